/* reprise bench: prompt-processing and generation speed, printed as a table
 * like llama-bench's (mean +- sample standard deviation over repetitions); a
 * memory read-bandwidth probe for the roofline and a matmul microbenchmark
 * (both measured by the library's rp_bench_*). */
#include "spec_opts.h"
#include "tools.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_opts {
    model_opts mo;
    spec_opts so;
    int n_prompt, n_gen, reps, bw_mib;
    bool bw;
    const char *kern_type;
    int kern_n, kern_mib;
    const char *gen_prompt;
    int threads;
} bench_opts;

/* ---- matmul microbenchmark ------------------------------------------------ */

/* The cost of one product of a weight matrix of `type` (about `mib` MiB, rows
 * of n inputs, packed as a model would be) with 1..16 tokens and a few larger
 * counts, relative to one token: fastest wall time of `reps` calls and CPU
 * time per call (all threads). A matrix larger than the caches shows whether
 * a small batch reads the weights once. */
static int kernel_bench(const char *type_name, int n, int mib, int threads, int reps) {
    const int type = rp_type_from_name(type_name);
    rp_type_info ti;
    if (!rp_type_get_info(type, &ti) || !ti.can_compute || !ti.can_write) {
        tool_error("bench", "--kernels: '%s' is not a weight type reprise computes and writes",
                   type_name);
        return 2;
    }
    if (!rp_type_row_bytes(type, n)) {
        tool_error("bench", "--kernels: rows of %d do not divide into %s blocks", n, ti.name);
        return 2;
    }
    rp_bench_matmul *b;
    rp_status s = rp_bench_matmul_new(type, n, mib, threads, &b);
    if (s) return tool_fail("bench", s);
    rp_bench_matmul_info info;
    rp_bench_matmul_get_info(b, &info);
    printf("matmul %s: %d rows x %d (%.1f MiB%s), %d threads, fastest of %d calls\n", ti.name,
           info.rows, n, (double)info.bytes / 1048576.0, info.packed ? ", packed" : "", threads,
           reps);
    printf("| tokens | ms/call | x one token | CPU ms/call | CPU x one | GB/s weights |\n");
    printf("|---:|---:|---:|---:|---:|---:|\n");
    static const int counts[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                 11, 12, 13, 14, 15, 16, 32, 64, 512};
    double t1 = 0, c1 = 0;
    for (size_t i = 0; i < ARRAY_LEN(counts) && !s; i++) {
        const int nt = counts[i], nr = nt >= 64 ? (reps / 4 > 1 ? reps / 4 : 1) : reps;
        double best, cpu;
        if ((s = rp_bench_matmul_run(b, nt, nr, &best, &cpu))) break;
        if (nt == 1) {
            t1 = best;
            c1 = cpu;
        }
        printf("| %d | %.3f | %.2f | %.3f | %.2f | %.1f |\n", nt, best * 1e3, best / t1, cpu * 1e3,
               cpu / c1, (double)info.bytes / best / 1e9);
        fflush(stdout);
    }
    rp_bench_matmul_free(b);
    return s ? tool_fail("bench", s) : 0;
}

/* ---- speed tests ----------------------------------------------------------- */

typedef struct stat {
    double mean, sd;
} stat;

static stat stats(const double *v, int n) {
    stat s = {0, 0};
    for (int i = 0; i < n; i++) s.mean += v[i];
    s.mean /= n;
    for (int i = 0; i < n; i++) s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    return s;
}

/* n_tok tokens of one prompt (logits for the last) from an empty cache; s */
static bool run_pp(rp_context *ctx, const int32_t *toks, int n_tok, double *secs) {
    rp_kv_clear(ctx);
    rp_batch b = {.n_tokens = n_tok, .token = toks};
    const double t0 = now_s();
    rp_status s = rp_decode(ctx, &b);
    *secs = now_s() - t0;
    if (s) tool_fail("bench", s);
    return s == RP_OK;
}

/* n_gen tokens one at a time from an empty cache; s */
static bool run_tg(rp_context *ctx, const int32_t *toks, int n_gen, double *secs) {
    rp_kv_clear(ctx);
    const double t0 = now_s();
    for (int i = 0; i < n_gen; i++) {
        rp_batch b = {.n_tokens = 1, .token = &toks[i]};
        rp_status s = rp_decode(ctx, &b);
        if (s) {
            tool_fail("bench", s);
            return false;
        }
    }
    *secs = now_s() - t0;
    return true;
}

/* Greedy generation of n tokens after a prompt, plain: one token sampled
 * and decoded at a time. Times the generation only. */
static bool run_gen_plain(rp_context *ctx, const int32_t *prompt, int n_prompt, int n, int32_t *out,
                          double *secs) {
    rp_kv_clear(ctx);
    rp_sampler_params sp = rp_sampler_default_params();
    sp.temp = 0;
    rp_sampler *smp = rp_sampler_new(&sp, rp_n_vocab(ctx));
    if (!smp) return tool_fail("bench", RP_ERR_NOMEM), false;
    for (int i = 0; i < n_prompt; i++) rp_sampler_accept(smp, prompt[i]);
    rp_batch b = {.n_tokens = n_prompt, .token = prompt};
    rp_status s = rp_decode(ctx, &b);
    const double t0 = now_s();
    const float *logits = rp_get_logits(ctx, n_prompt - 1);
    for (int i = 0; i < n && !s; i++) {
        out[i] = rp_sampler_sample(smp, logits);
        rp_sampler_accept(smp, out[i]);
        rp_batch one = {.n_tokens = 1, .token = &out[i]};
        if (i + 1 < n && !(s = rp_decode(ctx, &one))) logits = rp_get_logits(ctx, 0);
    }
    *secs = now_s() - t0;
    rp_sampler_free(smp);
    if (s) tool_fail("bench", s);
    return s == RP_OK;
}

/* The same with speculative decoding. */
static bool run_gen_spec(rp_spec *spc, const int32_t *prompt, int n_prompt, int n, int32_t *out,
                         double *secs) {
    rp_sampler_params sp = rp_sampler_default_params();
    sp.temp = 0;
    rp_status s = rp_spec_seq_reset(spc, 0, &sp);
    if (!s) s = rp_spec_seq_feed(spc, 0, prompt, n_prompt);
    const double t0 = now_s();
    for (int k = 0, i = 0; i < n && !s; i += k) s = rp_spec_step(spc, 0, n - i, out + i, &k);
    *secs = now_s() - t0;
    if (s) tool_fail("bench", s);
    return s == RP_OK;
}

/* The columns every row shares. */
typedef struct bench_row {
    char label[96]; /* "qwen3 596.05M q8_0": architecture, parameters, weight type by bytes
                       (with '+' when 2-D weights of other types are present) */
    double mib, mparams;
    int threads, n_eff;
} bench_row;

static void row_init(bench_row *r, const rp_model *m, const rp_context *ctx) {
    bool mixed = false;
    const int type = rp_model_weight_type(m, &mixed);
    snprintf(r->label, sizeof r->label, "%s %.2fM %s%s", rp_model_arch(m),
             (double)rp_model_n_params(m) / 1e6, rp_type_name(type >= 0 ? type : RP_TYPE_F32),
             mixed ? "+" : "");
    r->mib = (double)rp_model_weight_bytes(m) / 1048576.0;
    r->mparams = (double)rp_model_n_params(m) / 1e6;
    r->threads = rp_context_n_threads(ctx);
    r->n_eff = rp_context_n_eff(ctx);
}

static void print_header(void) {
    printf("| %-28s | %13s | %11s | %7s | %6s | %8s | %20s |\n", "model", "size", "params",
           "threads", "layers", "test", "t/s");
    printf("| %.28s | %.13s: | %.11s: | %.7s: | %.6s: | %.8s: | %.20s: |\n",
           "------------------------------", "---------------", "-------------", "---------",
           "--------", "----------", "----------------------");
}

static void print_row(const bench_row *r, const char *test, stat s) {
    char ts[48];
    snprintf(ts, sizeof ts, "%.2f ± %.2f", s.mean, s.sd);
    printf("| %-28s | %9.2f MiB | %9.2f M | %7d | %6d | %8s | %20s |\n", r->label, r->mib,
           r->mparams, r->threads, r->n_eff, test, ts);
    fflush(stdout);
}

/* ppN or tgN: `reps` runs of n tokens, tokens per second. */
static bool bench_speed(rp_context *ctx, const bench_row *row, const int32_t *toks, int n, int reps,
                        bool prompt) {
    double *tps = malloc((size_t)reps * sizeof *tps);
    if (!tps) return false;
    bool ok = true;
    rp_context_device_stats_reset(ctx);
    for (int r = 0; r < reps && ok; r++) {
        double secs;
        ok = prompt ? run_pp(ctx, toks, n, &secs) : run_tg(ctx, toks, n, &secs);
        tps[r] = n / secs;
    }
    char test[32];
    snprintf(test, sizeof test, "%s%d", prompt ? "pp" : "tg", n);
    if (ok) print_row(row, test, stats(tps, reps));
    if (ok && strcmp(rp_context_device(ctx), "cpu")) { /* the device's work per token */
        char buf[2048];
        rp_context_device_stats(ctx, n * reps, buf, sizeof buf);
        printf("\n%s on %s, per token:\n%s\n", test, rp_context_device(ctx), buf);
    }
    free(tps);
    return ok;
}

/* genN and genN+spec: greedy generation plain and speculative, alternating,
 * the acceptance and the speed-up, and a check that both give the same tokens. */
static bool bench_spec(const char *cmd, const bench_opts *o, rp_context *ctx,
                       const bench_row *row) {
    const int n_gen = o->n_gen, reps = o->reps;
    int32_t *gp = NULL;
    size_t n_gp = 0;
    rp_status st = rp_tokenize(rp_model_vocab(rp_context_model(ctx)), o->gen_prompt,
                               strlen(o->gen_prompt), true, true, &gp, &n_gp);
    if (st) return tool_fail(cmd, st), false;
    if (n_gp < 1 || n_gp > 512) {
        tool_error(cmd, "--gen-prompt has %zu tokens; give 1 to 512", n_gp);
        free(gp);
        return false;
    }
    rp_spec *spc = spec_open(cmd, &o->so, ctx, NULL);
    int32_t *g_plain = malloc((size_t)n_gen * sizeof *g_plain);
    int32_t *g_spec = malloc((size_t)n_gen * sizeof *g_spec);
    double *tp = malloc((size_t)reps * 2 * sizeof *tp), *ts = tp ? tp + reps : NULL, w;
    bool ok = spc && g_plain && g_spec && tp;
    if (!ok && spc) tool_fail(cmd, RP_ERR_NOMEM);
    /* warm-up of both, then alternating repetitions */
    const int warm = n_gen < 8 ? n_gen : 8;
    ok = ok && run_gen_plain(ctx, gp, (int)n_gp, warm, g_plain, &w) &&
         run_gen_spec(spc, gp, (int)n_gp, warm, g_spec, &w);
    const rp_spec_stats s0 = ok ? rp_spec_get_stats(spc, 0) : (rp_spec_stats){0};
    for (int r = 0; r < reps && ok; r++) {
        double secs;
        ok = run_gen_plain(ctx, gp, (int)n_gp, n_gen, g_plain, &secs) &&
             run_gen_spec(spc, gp, (int)n_gp, n_gen, g_spec, &w);
        tp[r] = n_gen / secs;
        ts[r] = n_gen / w;
    }
    if (ok) {
        char test[32], line[512];
        snprintf(test, sizeof test, "gen%d", n_gen);
        print_row(row, test, stats(tp, reps));
        snprintf(test, sizeof test, "gen%d+spec", n_gen);
        print_row(row, test, stats(ts, reps));
        rp_spec_stats s1 = rp_spec_get_stats(spc, 0);
        s1.steps -= s0.steps;
        s1.drafted -= s0.drafted;
        s1.accepted -= s0.accepted;
        s1.generated -= s0.generated;
        rp_spec_describe(spc, line, sizeof line);
        printf("\n%s\n", line);
        spec_format_stats(line, sizeof line, &s1);
        printf("%s\nspeed-up: %.2fx over plain greedy generation (gen%d+spec / gen%d)\n", line,
               stats(ts, reps).mean / stats(tp, reps).mean, n_gen, n_gen);
    }
    if (ok && memcmp(g_plain, g_spec, (size_t)n_gen * sizeof *g_plain)) {
        int i = 0;
        while (g_plain[i] == g_spec[i]) i++;
        tool_error(cmd,
                   "speculative greedy generation differs from plain at token %d (%d vs %d): a bug",
                   i, g_spec[i], g_plain[i]);
        ok = false;
    } else if (ok) {
        printf("tokens: identical to plain greedy generation (%d)\n", n_gen);
    }
    free(tp);
    free(g_plain);
    free(g_spec);
    free(gp);
    rp_spec_free(spc);
    return ok;
}

/* The table for a model: warm-up, ppN, tgN, and the speculative rows. */
static int bench_model(const char *cmd, bench_opts *o) {
    if (!o->mo.n_ctx) o->mo.n_ctx = (uint32_t)(o->n_prompt > o->n_gen ? o->n_prompt : o->n_gen) + 1;
    if (!o->mo.n_batch && o->n_prompt > 0) o->mo.n_batch = (uint32_t)o->n_prompt;
    const bool use_spec = spec_opts_active(&o->so);
    /* generation after a prompt of up to 512 tokens; verification batches of draft-max + 1 */
    if (use_spec && o->mo.n_ctx < (uint32_t)o->n_gen + 513) o->mo.n_ctx = (uint32_t)o->n_gen + 513;
    if (use_spec && o->mo.n_batch && o->mo.n_batch < RP_SPEC_DRAFT_MAX + 1)
        o->mo.n_batch = RP_SPEC_DRAFT_MAX + 1;
    rp_model *model;
    rp_context *ctx;
    int code;
    if (!tool_load(cmd, &o->mo, 1, &model, &ctx, &code)) return code;
    const int nv = rp_vocab_n_tokens(rp_model_vocab(model)) > 0
                       ? rp_vocab_n_tokens(rp_model_vocab(model))
                       : rp_n_vocab(ctx);
    const int nt = o->n_prompt > o->n_gen ? o->n_prompt : o->n_gen;
    int32_t *toks = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *toks);
    bool ok = toks != NULL;
    if (!ok) tool_fail(cmd, RP_ERR_NOMEM);
    uint64_t rng = 1234; /* splitmix64: the same random tokens every run */
    for (int i = 0; ok && i < nt; i++) {
        uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        toks[i] = (int32_t)((z ^ (z >> 31)) % (uint64_t)nv);
    }
    bench_row row;
    row_init(&row, model, ctx);
    if (ok) print_header();
    /* warm-up: a short prompt and one generated token */
    double w;
    ok = ok && run_pp(ctx, toks, o->n_prompt > 0 ? (o->n_prompt < 16 ? o->n_prompt : 16) : 1, &w) &&
         run_tg(ctx, toks, 1, &w);
    if (ok && o->n_prompt > 0) ok = bench_speed(ctx, &row, toks, o->n_prompt, o->reps, true);
    if (ok && o->n_gen > 0) ok = bench_speed(ctx, &row, toks, o->n_gen, o->reps, false);
    if (ok && use_spec) ok = bench_spec(cmd, o, ctx, &row);
    free(toks);
    rp_context_free(ctx);
    rp_model_free(model);
    return ok ? 0 : 1;
}

static int bench_parse(const char *cmd, bench_opts *o, int argc, char **argv) {
    const arg_opt opts[] = {
        {"-p|--n-prompt", ARG_INT, &o->n_prompt, "N",
         "prompt tokens of the pp test (0 = skip; default 512)"},
        {"-n|--n-gen", ARG_INT, &o->n_gen, "N",
         "generated tokens of the tg test (0 = skip; default 128)"},
        {"-r|--repetitions", ARG_INT, &o->reps, "N", "repetitions of each test (default 5)"},
        {"--bandwidth", ARG_FLAG, &o->bw, NULL,
         "measure memory read bandwidth with -t threads (no model needed)"},
        {"--bandwidth-mib", ARG_INT, &o->bw_mib, "N",
         "size of the bandwidth probe's buffer (default 2048)"},
        {"--kernels", ARG_STR, &o->kern_type, "TYPE",
         "matmul microbenchmark: a TYPE weight matrix (q8_0, q4_K, f16, ...) with 1..16, 32, 64 "
         "and 512 tokens (no model needed)"},
        {"--kernels-n", ARG_INT, &o->kern_n, "N", "with --kernels: inputs per row (default 2048)"},
        {"--kernels-mib", ARG_INT, &o->kern_mib, "N",
         "with --kernels: size of the matrix in MiB (default 128, beyond the caches)"},
        {"--gen-prompt", ARG_STR, &o->gen_prompt, "TEXT",
         "with speculative decoding: the prompt greedy generation starts from (default 'Once upon "
         "a time')"},
        {0},
    };
    const arg_opt *tables[] = {opts, model_opts_table(&o->mo, MO_ALL | MO_DEVICE),
                               spec_opts_table(&o->so), NULL};
    const char *const epilog[] = {g_plan_help, g_spec_help, NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise bench -m MODEL [-p 512] [-n 128] [-t N] [-r 5] [--repeat-layers SPEC]",
        .description =
            "Measures prompt processing (ppN: N tokens in one batch from an empty cache) and "
            "generation\n(tgN: N tokens one at a time from an empty cache) and prints tokens per "
            "second, mean and\nstandard deviation over the repetitions, after one warm-up run. "
            "--bandwidth prints the\nmemory read bandwidth (GB/s), the roofline of generation. "
            "With "
            "speculative decoding\n(--spec, --draft-plan, --spec-mtp) it also times greedy "
            "generation of N tokens after\n--gen-prompt, plain (genN) and speculative (genN+spec), "
            "checks that both give the same\ntokens, and prints the acceptance rate and the "
            "speed-up.",
        .tables = tables,
        .epilog = epilog};
    return args_parse_cmd(&spec, argc, argv);
}

static bool bench_check(const char *cmd, bench_opts *o) {
    if (!spec_opts_check(cmd, &o->so, &o->mo)) return false;
    if (spec_opts_active(&o->so) && o->n_gen < 1) {
        tool_error(cmd, "speculative decoding is measured on generation: give -n N >= 1");
        return false;
    }
    if (o->n_prompt < 0 || o->n_gen < 0 || o->reps < 1 || o->reps > 1000 || o->bw_mib < 0) {
        tool_error(cmd, "-p and -n must be >= 0, -r in 1..1000");
        return false;
    }
    o->threads = o->mo.n_threads > 0 ? o->mo.n_threads : rp_default_threads();
    return true;
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    bench_opts o = {.n_prompt = 512,
                    .n_gen = 128,
                    .reps = 5,
                    .kern_n = 2048,
                    .kern_mib = 128,
                    .gen_prompt = "Once upon a time"};
    model_opts_init(&o.mo);
    spec_opts_init(&o.so);
    int rc = bench_parse(cmd, &o, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (tool_list_devices(&o.mo)) return 0;
    if (!bench_check(cmd, &o)) return 2;
    if (o.bw) {
        double g;
        rp_status s = rp_bench_bandwidth(o.threads, o.bw_mib ? (size_t)o.bw_mib : 2048, &g);
        if (s) return tool_fail(cmd, s);
        printf("bandwidth: %.1f GB/s read, %d threads\n", g, o.threads);
        if (!o.mo.model) return 0;
    }
    if (o.kern_type) {
        if (o.kern_n < 32 || o.kern_mib < 1) {
            tool_error(cmd, "--kernels-n must be >= 32 and --kernels-mib >= 1");
            return 2;
        }
        return kernel_bench(o.kern_type, o.kern_n, o.kern_mib, o.threads, o.reps);
    }
    if (!o.mo.model) {
        tool_error(cmd, "no model given (-m FILE)");
        return 2;
    }
    if (!o.n_prompt && !o.n_gen) {
        tool_error(cmd, "nothing to measure (-p 0 and -n 0)");
        return 2;
    }
    return bench_model(cmd, &o);
}
