/* reprise bench: prompt-processing and generation speed as llama-bench
 * measures it (its flags, comma lists included, and its report formats:
 * bench_out.c), mean +- sample standard deviation over repetitions, a
 * memory read-bandwidth probe before and after each row; a matmul
 * microbenchmark (both measured by the library's rp_bench_*). */
#include "bench.h"
#include "spec_opts.h"
#include "tools.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_opts {
    model_opts mo;
    spec_opts so;
    const char *p_s, *n_s, *t_s, *ctk_s, *ctv_s, *d_s, *fmt_s;
    str_list pg_s;
    int reps, bw_mib, probe_mib;
    bool bw, no_probe;
    const char *kern_type;
    int kern_n, kern_mib;
    const char *gen_prompt;
    int threads; /* the first of -t (--bandwidth, --kernels, speculative rows) */
    /* the lists: every combination of -t, -ctk, -ctv, -d runs every test of
     * -p, -n and -pg (llama-bench's order) */
    int p[BENCH_LIST_MAX], n[BENCH_LIST_MAX], t[BENCH_LIST_MAX], tk[BENCH_LIST_MAX],
        tv[BENCH_LIST_MAX], d[BENCH_LIST_MAX], pg[BENCH_LIST_MAX][2];
    int n_p, n_n, n_t, n_tk, n_tv, n_d, n_pg;
    int n_prompt, n_gen; /* the first of -p and -n (speculative rows) */
    bench_fmt fmt;
} bench_opts;

static int imax(int a, int b) {
    return a > b ? a : b;
}

static int imin(int a, int b) {
    return a < b ? a : b;
}

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

/* The cache of sequence 0 holding the first `depth` tokens of toks and
 * nothing more: cut back to them when they are already there (*held ==
 * depth), else prefilled from an empty cache (untimed, llama-bench's -d). */
static bool at_depth(rp_context *ctx, const int32_t *toks, int depth, int *held) {
    if (depth > 0 && *held == depth && rp_kv_seq_rm(ctx, 0, depth, -1) == RP_OK) return true;
    rp_kv_clear(ctx);
    *held = 0;
    if (depth == 0) return true;
    rp_batch b = {.n_tokens = depth, .token = toks};
    rp_status s = rp_decode(ctx, &b);
    if (s) return tool_fail("bench", s), false;
    *held = depth;
    return true;
}

/* One timed run: np prompt tokens in one batch (logits for the last), then
 * ng tokens one at a time, after the cache holds depth tokens; s */
static bool run_test(rp_context *ctx, const int32_t *toks, int depth, int np, int ng, int *held,
                     double *secs) {
    if (!at_depth(ctx, toks, depth, held)) return false;
    const int32_t *t = toks + depth;
    const double t0 = now_s();
    rp_status s = RP_OK;
    if (np > 0) {
        rp_batch b = {.n_tokens = np, .token = t};
        s = rp_decode(ctx, &b);
    }
    for (int i = 0; i < ng && !s; i++) {
        rp_batch b = {.n_tokens = 1, .token = &t[np + i]};
        s = rp_decode(ctx, &b);
    }
    *secs = now_s() - t0;
    if (s) tool_fail("bench", s);
    return s == RP_OK;
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

/* The longest test with its depth (the context's size), the largest batch. */
static void bench_sizes(const bench_opts *o, int *n_ctx, int *n_batch) {
    int len = 0, batch = 0, depth = 0;
    for (int i = 0; i < o->n_p; i++) len = imax(len, o->p[i]), batch = imax(batch, o->p[i]);
    for (int i = 0; i < o->n_n; i++) len = imax(len, o->n[i]);
    for (int i = 0; i < o->n_pg; i++)
        len = imax(len, o->pg[i][0] + o->pg[i][1]), batch = imax(batch, o->pg[i][0]);
    for (int i = 0; i < o->n_d; i++) depth = imax(depth, o->d[i]);
    *n_ctx = depth + len + 1;
    *n_batch = batch > 0 ? batch : 512;
}

static double probe(const bench_opts *o, int threads) {
    double g = 0;
    if (!o->no_probe && rp_bench_bandwidth(threads, (size_t)o->probe_mib, &g)) g = 0;
    return g;
}

typedef struct bench_ctx {
    const bench_opts *o;
    rp_context *ctx;
    const int32_t *toks;
    int held; /* positions of toks the cache holds (at_depth) */
    bench_result r;
    double *ts;
    bench_out *out;
} bench_ctx;

/* One row: -r runs of (np, ng) at depth, bandwidth probed around them. */
static bool bench_row_run(bench_ctx *b, int depth, int np, int ng) {
    b->r.n_prompt = np;
    b->r.n_gen = ng;
    b->r.n_depth = depth;
    b->r.bw_before = probe(b->o, b->r.threads);
    for (int i = 0; i < b->o->reps; i++) {
        double secs;
        if (!run_test(b->ctx, b->toks, depth, np, ng, &b->held, &secs)) return false;
        b->ts[i] = (np + ng) / secs;
    }
    b->r.bw_after = probe(b->o, b->r.threads);
    bench_out_row(b->out, &b->r);
    return true;
}

/* Every test of one context (threads, cache types) at every depth. */
static bool bench_instance(bench_ctx *b) {
    const bench_opts *o = b->o;
    double w;
    b->held = 0;
    /* warm-up: a short prompt and one generated token */
    const int wp = o->n_p && o->p[0] > 0 ? imin(o->p[0], 16) : 1;
    bool ok = run_test(b->ctx, b->toks, 0, wp, 1, &b->held, &w);
    for (int di = 0; ok && di < o->n_d; di++) {
        const int d = o->d[di];
        for (int i = 0; ok && i < o->n_p; i++)
            if (o->p[i] > 0) ok = bench_row_run(b, d, o->p[i], 0);
        for (int i = 0; ok && i < o->n_n; i++)
            if (o->n[i] > 0) ok = bench_row_run(b, d, 0, o->n[i]);
        for (int i = 0; ok && i < o->n_pg; i++) ok = bench_row_run(b, d, o->pg[i][0], o->pg[i][1]);
    }
    return ok;
}

static const char *plan_name(const model_opts *mo, char *buf, size_t size) {
    if (mo->plan_file)
        snprintf(buf, size, "file %s", mo->plan_file);
    else if (mo->repeat_layers && *mo->repeat_layers)
        snprintf(buf, size, "repeat %s", mo->repeat_layers);
    else if (mo->layer_map && *mo->layer_map)
        snprintf(buf, size, "map %s", mo->layer_map);
    else
        snprintf(buf, size, "identity");
    return buf;
}

/* random tokens of the vocabulary, the same every run (splitmix64) */
static int32_t *bench_tokens(const rp_model *model, const rp_context *ctx, int n) {
    const int nv = rp_vocab_n_tokens(rp_model_vocab(model)) > 0
                       ? rp_vocab_n_tokens(rp_model_vocab(model))
                       : rp_n_vocab(ctx);
    int32_t *toks = malloc((size_t)(n > 0 ? n : 1) * sizeof *toks);
    uint64_t rng = 1234;
    for (int i = 0; toks && i < n; i++) {
        uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        toks[i] = (int32_t)((z ^ (z >> 31)) % (uint64_t)nv);
    }
    return toks;
}

/* The table for a model: every instance's rows, then the speculative ones. */
static int bench_model(const char *cmd, bench_opts *o) {
    int n_ctx, n_batch;
    bench_sizes(o, &n_ctx, &n_batch);
    const bool use_spec = spec_opts_active(&o->so);
    if (use_spec) n_ctx = imax(n_ctx, o->n_gen + 513);
    if (!o->mo.n_ctx) o->mo.n_ctx = (uint32_t)n_ctx;
    if (!o->mo.n_batch) o->mo.n_batch = (uint32_t)n_batch;
    if (use_spec && o->mo.n_batch < RP_SPEC_DRAFT_MAX + 1) o->mo.n_batch = RP_SPEC_DRAFT_MAX + 1;
    o->mo.n_threads = o->t[0];
    o->mo.type_k = o->tk[0];
    o->mo.type_v = o->tv[0];
    rp_model *model;
    rp_context *ctx;
    int code;
    if (!tool_load(cmd, &o->mo, 1, &model, &ctx, &code)) return code;
    char plan[160];
    bench_out out = {.fmt = o->fmt};
    bench_ctx b = {.o = o, .out = &out};
    b.ts = malloc((size_t)o->reps * sizeof *b.ts);
    b.toks = bench_tokens(model, ctx, n_ctx);
    bool ok = b.ts && b.toks;
    if (!ok) tool_fail(cmd, RP_ERR_NOMEM);
    char label[96];
    bool mixed = false;
    const int wtype = rp_model_weight_type(model, &mixed);
    snprintf(label, sizeof label, "%s %.2fM %s%s", rp_model_arch(model),
             (double)rp_model_n_params(model) / 1e6, rp_type_name(wtype >= 0 ? wtype : RP_TYPE_F32),
             mixed ? "+" : "");
    b.r = (bench_result){.model_file = o->mo.model,
                         .model_label = label,
                         .mib = (double)rp_model_weight_bytes(model) / 1048576.0,
                         .mparams = (double)rp_model_n_params(model) / 1e6,
                         .plan = plan_name(&o->mo, plan, sizeof plan),
                         .n_eff = rp_context_n_eff(ctx),
                         .n_batch = (int)o->mo.n_batch,
                         .reps = o->reps,
                         .ts = b.ts};
    if (ok) bench_out_begin(&out);
    for (int ti = 0; ok && ti < o->n_t; ti++)
        for (int ki = 0; ok && ki < o->n_tk; ki++)
            for (int vi = 0; ok && vi < o->n_tv; vi++) {
                if (ti || ki || vi) { /* the first context is tool_load's */
                    rp_context_free(ctx);
                    o->mo.n_threads = o->t[ti];
                    o->mo.type_k = o->tk[ki];
                    o->mo.type_v = o->tv[vi];
                    ok = (ctx = tool_context_new(cmd, &o->mo, model, 1)) != NULL;
                    if (!ok) break;
                }
                b.ctx = ctx;
                b.r.threads = rp_context_n_threads(ctx);
                b.r.type_k = o->tk[ki];
                b.r.type_v = o->tv[vi];
                ok = bench_instance(&b);
            }
    if (ok) bench_out_end(&out);
    if (ok && use_spec) {
        bench_row row;
        row_init(&row, model, ctx);
        print_header();
        ok = bench_spec(cmd, o, ctx, &row);
    }
    free(b.ts);
    free((void *)b.toks);
    rp_context_free(ctx);
    rp_model_free(model);
    return ok ? 0 : 1;
}

static int bench_parse(const char *cmd, bench_opts *o, int argc, char **argv) {
    const arg_opt opts[] = {
        {"-p|--n-prompt", ARG_STR, &o->p_s, "N,..",
         "prompt tokens of the pp tests (0 = none; default 512)"},
        {"-n|--n-gen", ARG_STR, &o->n_s, "N,..",
         "generated tokens of the tg tests (0 = none; default 128)"},
        {"-pg", ARG_STRS, &o->pg_s, "PP,TG",
         "a pp+tg test: PP prompt tokens then TG generated, timed together (repeatable)"},
        {"-d|--n-depth", ARG_STR, &o->d_s, "N,..",
         "tokens in the cache before each test (prefilled untimed; default 0)"},
        {"-t|--threads", ARG_STR, &o->t_s, "N,..", "threads (default: physical cores)"},
        {"-ctk|--cache-type-k", ARG_STR, &o->ctk_s, "TYPE,..",
         "KV cache types for K: f32, f16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl (default f16)"},
        {"-ctv|--cache-type-v", ARG_STR, &o->ctv_s, "TYPE,..",
         "KV cache types for V (default f16)"},
        {"-r|--repetitions", ARG_INT, &o->reps, "N", "repetitions of each test (default 5)"},
        {"-o|--output", ARG_STR, &o->fmt_s, "FMT", "md (default), csv or json"},
        {"--no-probe", ARG_FLAG, &o->no_probe, NULL,
         "no bandwidth probe before and after each row"},
        {"--probe-mib", ARG_INT, &o->probe_mib, "N",
         "buffer of the per-row bandwidth probe (default 1024)"},
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
    const arg_opt *tables[] = {opts, model_opts_table(&o->mo, MO_ALL | MO_LISTS),
                               spec_opts_table(&o->so), NULL};
    const char *const epilog[] = {g_plan_help, g_spec_help, NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise bench -m MODEL [-p 512] [-n 128] [-pg PP,TG] [-d 0] [-t N,..] "
                 "[-ctk f16,..] [-r 5] [-o md|csv|json]",
        .description =
            "Measures prompt processing (ppN: N tokens in one batch) and generation (tgN: N "
            "tokens one\nat a time), as llama-bench does: every combination of the lists of -t, "
            "-ctk, -ctv and -d\nruns every test of -p, -n and -pg, each after a cache of -d "
            "tokens (\"pp512 @ d4096\"),\nreporting tokens per second, mean and standard "
            "deviation over the repetitions, after one\nwarm-up run, with the memory read "
            "bandwidth (GB/s, the roofline of generation) probed\nbefore and after each row. "
            "--bandwidth prints the bandwidth alone. With speculative\ndecoding (--spec, "
            "--draft-plan, --spec-mtp) it also times greedy generation of N tokens\nafter "
            "--gen-prompt, plain (genN) and speculative (genN+spec), checks that both give the "
            "same\ntokens, and prints the acceptance rate and the speed-up.",
        .tables = tables,
        .epilog = epilog};
    return args_parse_cmd(&spec, argc, argv);
}

/* -pg PP,TG (each given once per test) */
static bool parse_pg(const char *cmd, bench_opts *o) {
    o->n_pg = 0;
    for (int i = 0; i < o->pg_s.n; i++) {
        int v[BENCH_LIST_MAX], n;
        if (!bench_parse_ints(cmd, "-pg", o->pg_s.v[i], 1, 1 << 20, v, &n)) return false;
        if (n != 2 || o->n_pg >= BENCH_LIST_MAX) {
            tool_error(cmd, "-pg: '%s' is not PP,TG (two positive counts)", o->pg_s.v[i]);
            return false;
        }
        o->pg[o->n_pg][0] = v[0];
        o->pg[o->n_pg][1] = v[1];
        o->n_pg++;
    }
    return true;
}

static bool parse_lists(const char *cmd, bench_opts *o) {
    char def_t[16];
    snprintf(def_t, sizeof def_t, "%d", rp_default_threads());
    if (!bench_parse_ints(cmd, "-p", o->p_s ? o->p_s : "512", 0, 1 << 20, o->p, &o->n_p) ||
        !bench_parse_ints(cmd, "-n", o->n_s ? o->n_s : "128", 0, 1 << 20, o->n, &o->n_n) ||
        !bench_parse_ints(cmd, "-d", o->d_s ? o->d_s : "0", 0, 1 << 24, o->d, &o->n_d) ||
        !bench_parse_ints(cmd, "-t", o->t_s ? o->t_s : def_t, 1, 512, o->t, &o->n_t) ||
        !bench_parse_types(cmd, "-ctk", o->ctk_s ? o->ctk_s : "f16", o->tk, &o->n_tk) ||
        !bench_parse_types(cmd, "-ctv", o->ctv_s ? o->ctv_s : "f16", o->tv, &o->n_tv) ||
        !parse_pg(cmd, o))
        return false;
    if (!bench_fmt_parse(o->fmt_s ? o->fmt_s : "md", &o->fmt)) {
        tool_error(cmd, "-o: '%s' is not md, csv or json", o->fmt_s);
        return false;
    }
    o->threads = o->t[0];
    o->n_prompt = o->p[0];
    o->n_gen = o->n[0];
    return true;
}

static bool bench_check(const char *cmd, bench_opts *o) {
    if (!parse_lists(cmd, o) || !spec_opts_check(cmd, &o->so, &o->mo)) return false;
    if (spec_opts_active(&o->so) && o->n_gen < 1) {
        tool_error(cmd, "speculative decoding is measured on generation: give -n N >= 1");
        return false;
    }
    if (o->reps < 1 || o->reps > 1000 || o->bw_mib < 0 || o->probe_mib < 1) {
        tool_error(cmd, "-r must be in 1..1000, --bandwidth-mib >= 0, --probe-mib >= 1");
        return false;
    }
    return true;
}

int cmd_bench(int argc, char **argv) {
    const char *cmd = "bench";
    bench_opts o = {.reps = 5,
                    .probe_mib = 1024,
                    .kern_n = 2048,
                    .kern_mib = 128,
                    .gen_prompt = "Once upon a time"};
    model_opts_init(&o.mo);
    spec_opts_init(&o.so);
    int rc = bench_parse(cmd, &o, argc, argv);
    if (rc != ARGS_OK) return rc;
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
    bool any = o.n_pg > 0;
    for (int i = 0; i < o.n_p; i++) any |= o.p[i] > 0;
    for (int i = 0; i < o.n_n; i++) any |= o.n[i] > 0;
    if (!any) {
        tool_error(cmd, "nothing to measure (-p 0 and -n 0)");
        return 2;
    }
    return bench_model(cmd, &o);
}
