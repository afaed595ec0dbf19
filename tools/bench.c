/* reprise bench: prompt-processing and generation speed, printed as a table
 * like llama-bench's (mean +- sample standard deviation over repetitions), and
 * a memory read-bandwidth probe for the roofline. */
#include "kernels/matmul.h"
#include "core/model.h"
#include "spec_opts.h"
#include "base/threads.h"
#include "tools.h"
#include "kernels/types.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- bandwidth probe ---------------------------------------------------- */

typedef struct probe {
    const uint64_t *buf;
    size_t words;
    uint64_t sink[64];
} probe;

static void probe_task(void *arg, int ith, int nth) {
    probe *p = arg;
    long a, b;
    rp_split_range((long)(p->words / 8), ith, nth, 64, &a, &b);
    const uint64_t *w = p->buf;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = (size_t)a * 8; i < (size_t)b * 8; i += 8) {
        s0 += w[i] ^ w[i + 4];
        s1 += w[i + 1] ^ w[i + 5];
        s2 += w[i + 2] ^ w[i + 6];
        s3 += w[i + 3] ^ w[i + 7];
    }
    p->sink[ith % 64] = s0 + s1 + s2 + s3;
}

/* Best of 3 passes reading a buffer far larger than the caches. GB/s or <0. */
static double bandwidth_gbs(int threads, size_t mib) {
    const size_t bytes = mib << 20;
    uint64_t *buf = rp_alloc_aligned(bytes, "bandwidth probe");
    rp_pool *pool = rp_pool_new(threads);
    if (!buf || !pool) {
        rp_free_aligned(buf);
        rp_pool_free(pool);
        return -1;
    }
    for (size_t i = 0; i < bytes / 8; i++) buf[i] = i; /* fault every page in */
    probe p = {.buf = buf, .words = bytes / 8};
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = now_s();
        rp_pool_run(pool, probe_task, &p);
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    rp_pool_free(pool);
    rp_free_aligned(buf);
    return (double)bytes / best / 1e9;
}

/* ---- matmul microbenchmark ------------------------------------------------ */

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* The cost of one product of a weight matrix of `type` (about `mib` MiB, rows
 * of n inputs, packed as a model would be) with 1..16 tokens and a few larger
 * counts, relative to one token: fastest wall time of `reps` calls and CPU
 * time per call (all threads). A matrix larger than the caches shows whether
 * a small batch reads the weights once. */
static int kernel_bench(const char *type_name, int n, int mib, int threads, int reps) {
    int type = -1;
    for (int i = 0; i < RP_TYPE_COUNT; i++) {
        const rp_type_traits *t = rp_type_get(i);
        if (t && t->compute && !strcasecmp(t->name, type_name)) type = i;
    }
    if (type < 0 || !rp_type_get(type)->from_float) {
        tool_error("bench", "--kernels: '%s' is not a weight type reprise computes and writes",
                   type_name);
        return 2;
    }
    const rp_type_traits *tt = rp_type_get(type);
    const size_t rb = rp_row_size(type, n);
    if (!rb) {
        tool_error("bench", "--kernels: rows of %d do not divide into %s blocks", n, tt->name);
        return 2;
    }
    const int rows = (int)RP_MAX((size_t)64, ((size_t)mib << 20) / rb / 16 * 16);
    const int max_tok = 512, distinct = 64;
    uint8_t *w = rp_alloc_aligned(rb * (size_t)rows, "bench weights");
    float *x = malloc((size_t)n * max_tok * sizeof(float)),
          *y = rp_alloc_aligned((size_t)rows * max_tok * sizeof(float), "bench outputs");
    rp_compute cc = {.pool = rp_pool_new(threads)};
    cc.wbuf_size = rp_matmul_scratch(n, max_tok);
    cc.wbuf = rp_alloc_aligned(cc.wbuf_size, "bench scratch");
    int ret = 1;
    void *owned = NULL;
    if (!w || !x || !y || !cc.pool || !cc.wbuf) {
        tool_fail("bench", RP_ERR_NOMEM);
        goto out;
    }
    rp_rng rng;
    rp_rng_seed(&rng, 99);
    for (int i = 0; i < n * max_tok; i++) x[i] = rp_rng_normal(&rng);
    /* `distinct` quantized random rows, repeated */
    for (int r = 0; r < distinct && r < rows; r++) {
        tt->from_float(x + (size_t)(r % max_tok) * (size_t)n, w + (size_t)r * rb, n);
        for (int i = 0; i < n; i++)
            x[(size_t)(r % max_tok) * (size_t)n + (size_t)i] = rp_rng_normal(&rng);
    }
    for (int r = distinct; r < rows; r++)
        memcpy(w + (size_t)r * rb, w + (size_t)(r % distinct) * rb, rb);
    rp_tensor t = {.name = "bench",
                   .type = type,
                   .n_dims = 2,
                   .ne = {n, rows, 1, 1},
                   .nbytes = rb * (size_t)rows,
                   .row_bytes = rb,
                   .data = w};
    if (rp_matmul_pack(&t, &owned)) {
        tool_fail("bench", RP_ERR_NOMEM);
        goto out;
    }
    if (owned) { /* as a loaded model: only the packed copy stays in memory */
        rp_free_aligned(w);
        w = NULL;
        t.data = NULL;
    }
    printf("matmul %s: %d rows x %d (%.1f MiB%s), %d threads, fastest of %d calls\n", tt->name,
           rows, n, (double)rb * rows / 1048576.0, owned ? ", packed" : "", threads, reps);
    printf("| tokens | ms/call | x one token | CPU ms/call | CPU x one | GB/s weights |\n");
    printf("|---:|---:|---:|---:|---:|---:|\n");
    static const int counts[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                 11, 12, 13, 14, 15, 16, 32, 64, 512};
    double t1 = 0, c1 = 0;
    for (size_t i = 0; i < RP_ARRAY_LEN(counts); i++) {
        const int nt = counts[i];
        const int nr = nt >= 64 ? RP_MAX(1, reps / 4) : reps;
        rp_matmul(&cc, &t, x, nt, y); /* warm-up */
        double best = 1e30;
        const double c0 = cpu_s();
        for (int r = 0; r < nr; r++) {
            const double s0 = now_s();
            rp_matmul(&cc, &t, x, nt, y);
            const double dt = now_s() - s0;
            if (dt < best) best = dt;
        }
        const double cpu = (cpu_s() - c0) / nr;
        if (nt == 1) {
            t1 = best;
            c1 = cpu;
        }
        printf("| %d | %.3f | %.2f | %.3f | %.2f | %.1f |\n", nt, best * 1e3, best / t1, cpu * 1e3,
               cpu / c1, (double)rb * rows / best / 1e9);
        fflush(stdout);
    }
    ret = 0;
out:
    free(owned);
    rp_free_aligned(w);
    free(x);
    rp_free_aligned(y);
    rp_free_aligned(cc.wbuf);
    rp_pool_free(cc.pool);
    return ret;
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

/* "qwen3 596.05M q8_0": architecture, parameters, weight type by bytes
 * (with '+' when 2-D weights of other types are present). */
static void model_label(const rp_model *m, char *buf, size_t size) {
    uint64_t by_type[RP_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].n_dims >= 2) by_type[m->tensors[i].type] += m->tensors[i].nbytes;
    int best = 0, kinds = 0;
    for (int t = 0; t < RP_TYPE_COUNT; t++) {
        kinds += by_type[t] > 0;
        if (by_type[t] > by_type[best]) best = t;
    }
    snprintf(buf, size, "%s %.2fM %s%s", rp_model_arch(m), (double)rp_model_n_params(m) / 1e6,
             rp_type_name(best), kinds > 1 ? "+" : "");
}

static void print_row(const char *label, double mib, double mparams, int threads, int n_eff,
                      const char *test, stat s) {
    char ts[48];
    snprintf(ts, sizeof ts, "%.2f ± %.2f", s.mean, s.sd);
    printf("| %-28s | %9.2f MiB | %9.2f M | %7d | %6d | %8s | %20s |\n", label, mib, mparams,
           threads, n_eff, test, ts);
    fflush(stdout);
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    model_opts mo;
    model_opts_init(&mo);
    int n_prompt = 512, n_gen = 128, reps = 5, bw_mib = 0;
    bool bw = false;
    const char *kern_type = NULL;
    int kern_n = 2048, kern_mib = 128;
    const char *gen_prompt = "Once upon a time";
    spec_opts so;
    spec_opts_init(&so);
    const arg_opt opts[] = {
        {"-p|--n-prompt", ARG_INT, &n_prompt, "N",
         "prompt tokens of the pp test (0 = skip; default 512)"},
        {"-n|--n-gen", ARG_INT, &n_gen, "N",
         "generated tokens of the tg test (0 = skip; default 128)"},
        {"-r|--repetitions", ARG_INT, &reps, "N", "repetitions of each test (default 5)"},
        {"--bandwidth", ARG_FLAG, &bw, NULL,
         "measure memory read bandwidth with -t threads (no model needed)"},
        {"--bandwidth-mib", ARG_INT, &bw_mib, "N",
         "size of the bandwidth probe's buffer (default 2048)"},
        {"--kernels", ARG_STR, &kern_type, "TYPE",
         "matmul microbenchmark: a TYPE weight matrix (q8_0, q4_K, f16, ...) with 1..16, 32, 64 "
         "and 512 tokens (no model needed)"},
        {"--kernels-n", ARG_INT, &kern_n, "N", "with --kernels: inputs per row (default 2048)"},
        {"--kernels-mib", ARG_INT, &kern_mib, "N",
         "with --kernels: size of the matrix in MiB (default 128, beyond the caches)"},
        {"--gen-prompt", ARG_STR, &gen_prompt, "TEXT",
         "with speculative decoding: the prompt greedy generation starts from (default 'Once upon "
         "a time')"},
        {0},
    };
    const arg_opt *tables[] = {opts, model_opts_table(&mo), spec_opts_table(&so), NULL};
    arg_spec spec = {
        cmd,
        "reprise bench -m MODEL [-p 512] [-n 128] [-t N] [-r 5] [--repeat-layers SPEC]",
        "Measures prompt processing (ppN: N tokens in one batch from an empty cache) and "
        "generation\n"
        "(tgN: N tokens one at a time from an empty cache) and prints tokens per second, mean and\n"
        "standard deviation over the repetitions, after one warm-up run. --bandwidth prints the\n"
        "memory read bandwidth (GB/s), the roofline of generation. With speculative decoding\n"
        "(--spec, --draft-plan, --spec-mtp) it also times greedy generation of N tokens after\n"
        "--gen-prompt, plain (genN) and speculative (genN+spec), checks that both give the same\n"
        "tokens, and prints the acceptance rate and the speed-up.",
        tables,
        NULL,
        0,
        NULL};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) {
        if (help) printf("\n%s\n\n%s\n", g_plan_help, g_spec_help);
        return help ? 0 : 2;
    }
    if (!spec_opts_check(cmd, &so, &mo)) return 2;
    const bool use_spec = spec_opts_active(&so);
    if (use_spec && n_gen < 1) {
        tool_error(cmd, "speculative decoding is measured on generation: give -n N >= 1");
        return 2;
    }
    if (n_prompt < 0 || n_gen < 0 || reps < 1 || reps > 1000 || bw_mib < 0) {
        tool_error(cmd, "-p and -n must be >= 0, -r in 1..1000");
        return 2;
    }
    const int threads = mo.n_threads > 0 ? mo.n_threads : rp_n_physical_cores();
    if (bw) {
        const double g = bandwidth_gbs(threads, bw_mib ? (size_t)bw_mib : 2048);
        if (g < 0) return tool_fail(cmd, RP_ERR_NOMEM);
        printf("bandwidth: %.1f GB/s read, %d threads\n", g, threads);
        if (!mo.model) return 0;
    }
    if (kern_type) {
        if (kern_n < 32 || kern_mib < 1) {
            tool_error(cmd, "--kernels-n must be >= 32 and --kernels-mib >= 1");
            return 2;
        }
        return kernel_bench(kern_type, kern_n, kern_mib, threads, reps);
    }
    if (!mo.model) {
        tool_error(cmd, "no model given (-m FILE)");
        return 2;
    }
    if (!n_prompt && !n_gen) {
        tool_error(cmd, "nothing to measure (-p 0 and -n 0)");
        return 2;
    }
    if (!mo.n_ctx) mo.n_ctx = (uint32_t)(n_prompt > n_gen ? n_prompt : n_gen) + 1;
    if (!mo.n_batch && n_prompt > 0) mo.n_batch = (uint32_t)n_prompt;
    /* generation after a prompt of up to 512 tokens; verification batches of draft-max + 1 */
    if (use_spec && mo.n_ctx < (uint32_t)n_gen + 513) mo.n_ctx = (uint32_t)n_gen + 513;
    if (use_spec && mo.n_batch && mo.n_batch < RP_SPEC_DRAFT_MAX + 1)
        mo.n_batch = RP_SPEC_DRAFT_MAX + 1;
    rp_model *model;
    rp_context *ctx;
    rp_spec *spc = NULL;
    int32_t *gp = NULL, *g_plain = NULL, *g_spec = NULL;
    size_t n_gp = 0;
    int code;
    if (!tool_load(cmd, &mo, 1, &model, &ctx, &code)) return code;
    const int nv = rp_vocab_n_tokens(rp_model_vocab(model)) > 0
                       ? rp_vocab_n_tokens(rp_model_vocab(model))
                       : rp_n_vocab(ctx);
    const int nt = n_prompt > n_gen ? n_prompt : n_gen;
    int32_t *toks = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *toks);
    double *secs = malloc((size_t)reps * sizeof *secs);
    int ret = 1;
    if (!toks || !secs) {
        tool_fail(cmd, RP_ERR_NOMEM);
        goto out;
    }
    rp_rng rng;
    rp_rng_seed(&rng, 1234);
    for (int i = 0; i < nt; i++) toks[i] = (int32_t)(rp_rng_next(&rng) % (uint64_t)nv);

    char label[96];
    model_label(model, label, sizeof label);
    const double mib = (double)rp_model_weight_bytes(model) / 1048576.0,
                 mparams = (double)rp_model_n_params(model) / 1e6;
    const int used_threads = rp_context_n_threads(ctx), n_eff = rp_context_n_eff(ctx);
    printf("| %-28s | %13s | %11s | %7s | %6s | %8s | %20s |\n", "model", "size", "params",
           "threads", "layers", "test", "t/s");
    printf("| %.28s | %.13s: | %.11s: | %.7s: | %.6s: | %.8s: | %.20s: |\n",
           "------------------------------", "---------------", "-------------", "---------",
           "--------", "----------", "----------------------");
    /* warm-up: a short prompt and one generated token */
    double w;
    if (!run_pp(ctx, toks, n_prompt > 0 ? (n_prompt < 16 ? n_prompt : 16) : 1, &w) ||
        !run_tg(ctx, toks, 1, &w))
        goto out;
    char test[32];
    if (n_prompt > 0) {
        double *tps = malloc((size_t)reps * sizeof *tps);
        if (!tps) goto out;
        for (int r = 0; r < reps; r++) {
            if (!run_pp(ctx, toks, n_prompt, &secs[r])) {
                free(tps);
                goto out;
            }
            tps[r] = n_prompt / secs[r];
        }
        snprintf(test, sizeof test, "pp%d", n_prompt);
        print_row(label, mib, mparams, used_threads, n_eff, test, stats(tps, reps));
        free(tps);
    }
    if (n_gen > 0) {
        double *tps = malloc((size_t)reps * sizeof *tps);
        if (!tps) goto out;
        for (int r = 0; r < reps; r++) {
            if (!run_tg(ctx, toks, n_gen, &secs[r])) {
                free(tps);
                goto out;
            }
            tps[r] = n_gen / secs[r];
        }
        snprintf(test, sizeof test, "tg%d", n_gen);
        print_row(label, mib, mparams, used_threads, n_eff, test, stats(tps, reps));
        free(tps);
    }
    if (use_spec) {
        rp_status st = rp_tokenize(rp_model_vocab(model), gen_prompt, strlen(gen_prompt), true,
                                   true, &gp, &n_gp);
        if (st) {
            tool_fail(cmd, st);
            goto out;
        }
        if (n_gp < 1 || n_gp > 512) {
            tool_error(cmd, "--gen-prompt has %zu tokens; give 1 to 512", n_gp);
            goto out;
        }
        spc = spec_open(cmd, &so, ctx, NULL);
        g_plain = malloc((size_t)n_gen * sizeof *g_plain);
        g_spec = malloc((size_t)n_gen * sizeof *g_spec);
        double *tp = malloc((size_t)reps * 2 * sizeof *tp);
        if (!spc || !g_plain || !g_spec || !tp) {
            if (spc) tool_fail(cmd, RP_ERR_NOMEM);
            free(tp);
            goto out;
        }
        double *ts = tp + reps, w2;
        /* warm-up of both, then alternating repetitions */
        bool ok = run_gen_plain(ctx, gp, (int)n_gp, n_gen < 8 ? n_gen : 8, g_plain, &w2) &&
                  run_gen_spec(spc, gp, (int)n_gp, n_gen < 8 ? n_gen : 8, g_spec, &w2);
        const rp_spec_stats s0 = rp_spec_get_stats(spc, 0);
        for (int r = 0; r < reps && ok; r++) {
            ok = run_gen_plain(ctx, gp, (int)n_gp, n_gen, g_plain, &secs[r]) &&
                 run_gen_spec(spc, gp, (int)n_gp, n_gen, g_spec, &w2);
            tp[r] = n_gen / secs[r];
            ts[r] = n_gen / w2;
        }
        if (!ok) {
            free(tp);
            goto out;
        }
        snprintf(test, sizeof test, "gen%d", n_gen);
        print_row(label, mib, mparams, used_threads, n_eff, test, stats(tp, reps));
        snprintf(test, sizeof test, "gen%d+spec", n_gen);
        print_row(label, mib, mparams, used_threads, n_eff, test, stats(ts, reps));
        rp_spec_stats st1 = rp_spec_get_stats(spc, 0);
        st1.steps -= s0.steps;
        st1.drafted -= s0.drafted;
        st1.accepted -= s0.accepted;
        st1.generated -= s0.generated;
        char line[512];
        rp_spec_describe(spc, line, sizeof line);
        printf("\n%s\n", line);
        spec_format_stats(line, sizeof line, &st1);
        printf("%s\nspeed-up: %.2fx over plain greedy generation (gen%d+spec / gen%d)\n", line,
               stats(ts, reps).mean / stats(tp, reps).mean, n_gen, n_gen);
        free(tp);
        if (memcmp(g_plain, g_spec, (size_t)n_gen * sizeof *g_plain)) {
            int i = 0;
            while (g_plain[i] == g_spec[i]) i++;
            tool_error(
                cmd,
                "speculative greedy generation differs from plain at token %d (%d vs %d): a bug", i,
                g_spec[i], g_plain[i]);
            goto out;
        }
        printf("tokens: identical to plain greedy generation (%d)\n", n_gen);
    }
    ret = 0;
out:
    rp_spec_free(spc);
    free(gp);
    free(g_plain);
    free(g_spec);
    free(toks);
    free(secs);
    rp_context_free(ctx);
    rp_model_free(model);
    return ret;
}
