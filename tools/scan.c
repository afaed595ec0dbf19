/* reprise scan: evaluate every RYS block (i,j) of a model on one loaded copy of
 * its weights, write one CSV row per block (resumable), draw the heatmap and
 * print the best blocks and the Pareto list. The evaluation, the CSV, the
 * ranking and the heatmap are the library's (rp_scan_*, reprise_tools.h); the
 * file formats are docs/scan.md.
 *
 * parse (scan_parse) -> validate (scan_check) -> load the model and the
 * workload (scan_load) -> the CSV's settings, resumed (scan_settings) -> run
 * the identity and the blocks (scan_execute) -> report (scan_report). */
#include "tools.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_CTX   512
#define DEFAULT_BATCH 512
#define DEFAULT_BEST  3

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

typedef struct scan_opts {
    model_opts mo;
    const char *file, *probes, *metric_name, *out, *png_path;
    int n_chunks, max_extra, start, end, n_best;
    bool no_reuse;
    const char *scales; /* --scales: one scan per residual scale of the second pass */
    float scale;
    /* from the checks */
    rp_scan_metric metric;
    bool c_given;
    int c, n_batch;
    char *png_alloc; /* png_path when derived from the CSV's name */
} scan_opts;

/* The model, the workload, the blocks and the CSV of one scan. */
typedef struct scan_job {
    const char *cmd;
    scan_opts *o;
    const char *input; /* the text or the probe file */
    char *text;
    size_t text_len;
    rp_model *model;
    int n_layer;
    rp_scan_block *blocks;
    int n_blocks, n_todo;
    rp_scan_set set;
    rp_eval_windows w;
    int32_t *toks;
    size_t n_tok;
    rp_scan_csv csv;
    char desc[256];
    bool resumed;
} scan_job;

/* What running the blocks did. */
typedef struct scan_stats {
    double t_identity, t_scan;
    int n_run;
    bool interrupted;
    uint64_t steps;
    bool reusing;
} scan_stats;

/* Progress of the whole scan, weighted by the plan steps each evaluation runs
 * per token (what its time is proportional to). */
typedef struct scan_progress {
    progress pr;
    double units_total, units_done, units_now; /* units of the evaluation in progress */
    int done, total;                           /* blocks */
    char last[96];                             /* the last block's result */
    double t0;
} scan_progress;

static bool on_progress(float frac, void *user) {
    scan_progress *sp = user;
    if (g_stop) return false;
    const double f =
        sp->units_total > 0 ? (sp->units_done + frac * sp->units_now) / sp->units_total : 0;
    char extra[192];
    snprintf(extra, sizeof extra, "| blocks %d/%d%s%s", sp->done, sp->total,
             sp->last[0] ? " | last " : "", sp->last);
    progress_update(&sp->pr, (float)f, extra);
    return true;
}

/* Work of a block in plan steps per token: from step j with the prefix held
 * (plus the steps that advance it), the whole plan without reuse. */
static double block_units(int n_layer, int i, int j, bool reuse, int *held) {
    const int n_eff = n_layer + (j - i);
    if (!reuse) return n_eff;
    double u = n_eff - j;
    if (*held != j) u += *held > 0 && *held < j ? j - *held : j;
    *held = j;
    return u;
}

static const char *metric_caption(rp_scan_metric m) {
    return m == RP_SCAN_PPL   ? "PPL change"
           : m == RP_SCAN_KLD ? "KLD from identity"
                              : "answer log-prob change";
}

static void print_value(rp_scan_metric m, double v) {
    printf(m == RP_SCAN_PROBE ? "%.4f nats" : "%.4f", v);
}

/* ---- parse and validate -------------------------------------------------------- */

static int scan_parse(const char *cmd, scan_opts *o, int argc, char **argv) {
    model_opts_init(&o->mo);
    o->out = "scan.csv";
    o->n_chunks = -1;
    o->end = -1;
    o->n_best = DEFAULT_BEST;
    const arg_opt opts[] = {
        {"-f|--file", ARG_STR, &o->file, "FILE", "the text (ppl and kld metrics)"},
        {"--chunks", ARG_INT, &o->n_chunks, "N",
         "evaluate at most N chunks of -c tokens (default: all)"},
        {"--metric", ARG_STR, &o->metric_name, "M",
         "ppl (default with -f), kld, or probe (default with --probes)"},
        {"--probes", ARG_STR, &o->probes, "FILE",
         "JSONL probes: {prompt, answer} or {prompt, choices, answer}"},
        {"--max-extra", ARG_INT, &o->max_extra, "N", "blocks of at most N layers (default: any)"},
        {"--start", ARG_INT, &o->start, "I", "first layer a block may start at (default 0)"},
        {"--end", ARG_INT, &o->end, "J",
         "last layer a block may end before (default: the layer count)"},
        {"-o|--output", ARG_STR, &o->out, "FILE",
         "results CSV, resumed when it exists (default scan.csv)"},
        {"--png", ARG_STR, &o->png_path, "FILE", "heatmap (default: the CSV's name with .png)"},
        {"--best", ARG_INT, &o->n_best, "N", "best blocks marked on the heatmap (default 3)"},
        {"--no-reuse", ARG_FLAG, &o->no_reuse, NULL,
         "run every plan from its first layer (for timing the reuse)"},
        {"--scales", ARG_STR, &o->scales, "F,F,...",
         "one scan per residual scale of the second pass ('i,j@s=F'); F != 1 writes OUT-sF.csv"},
        {0},
    };
    /* the model options without the plan flags: scan makes the plans */
    const arg_opt *tables[] = {opts, model_opts_table(&o->mo, MO_CHUNKS), NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage =
            "reprise scan -m MODEL -f TEXT [-c N] [--chunks K] [--metric ppl|kld] [--max-extra "
            "N]\n                    [--start I --end J] [-o OUT.csv] [--png OUT.png]\n"
            "       reprise scan -m MODEL --probes FILE.jsonl [...]",
        .description =
            "Evaluates the identity plan once, then every RYS block (i,j) -- source layers [i,j)\n"
            "run twice, as --repeat-layers i,j -- with start <= i < j <= end and at most\n"
            "--max-extra extra layers, each as a plan over the weights loaded once. Metrics:\n"
            "  ppl    perplexity of the text, llama.cpp's windows (as reprise perplexity): delta\n"
            "         against the identity plan, lower is better;\n"
            "  kld    mean KL divergence of the block's token distributions from the identity's;\n"
            "  probe  mean log-probability of the answers in a JSONL file (docs/scan.md), higher\n"
            "         is better; multiple-choice items also report accuracy.\n"
            "A block (i,j) runs layers 0..j-1 as the identity does: their output is computed once\n"
            "per j and reused by every block ending at j (--no-reuse runs every plan whole; the\n"
            "numbers are the same). One CSV row per block is written as it finishes; running the\n"
            "same command again continues an interrupted scan (Ctrl-C stops cleanly). The heatmap\n"
            "(start layer down, end layer across) marks the best blocks; stdout lists them and "
            "the\n"
            "best block for each extra-layer count (the Pareto list).",
        .tables = tables};
    return args_parse_cmd(&spec, argc, argv);
}

/* The metric and its input: -f for ppl and kld, --probes for probe. */
static bool check_metric(const char *cmd, scan_opts *o) {
    int metric = o->metric_name ? rp_scan_metric_from_name(o->metric_name)
                 : o->probes    ? RP_SCAN_PROBE
                                : RP_SCAN_PPL;
    if (metric < 0) {
        tool_error(cmd, "--metric '%s' is not one of ppl, kld, probe", o->metric_name);
        return false;
    }
    o->metric = (rp_scan_metric)metric;
    const bool probe = metric == RP_SCAN_PROBE;
    if (probe && !o->probes) {
        tool_error(cmd, "--metric probe needs --probes FILE (JSONL; see docs/scan.md)");
        return false;
    }
    if (!probe && o->probes) {
        tool_error(cmd, "--probes goes with --metric probe, not %s", rp_scan_metric_name(metric));
        return false;
    }
    if (!probe && !o->file) {
        tool_error(cmd, "no text (-f FILE) for --metric %s", rp_scan_metric_name(metric));
        return false;
    }
    if (probe && o->file) {
        tool_error(cmd, "-f goes with --metric ppl or kld; probes are scored on their own");
        return false;
    }
    return true;
}

/* 0, or the exit status. */
static int scan_check(const char *cmd, scan_opts *o) {
    if (o->mo.quiet) g_verbosity = 0;
    if (!o->mo.model) {
        tool_error(cmd, "no model given (-m FILE)");
        return 2;
    }
    if (!check_metric(cmd, o)) return 2;
    if (o->n_chunks == 0 || o->n_chunks < -1) {
        tool_error(cmd, "--chunks expects a positive count, got %d", o->n_chunks);
        return 2;
    }
    if (o->max_extra < 0 || o->start < 0 || (o->end != -1 && o->end <= o->start) || o->n_best < 0) {
        tool_error(cmd, "%s",
                   o->max_extra < 0 ? "--max-extra expects a positive count"
                   : o->n_best < 0  ? "--best expects a count"
                   : o->start < 0   ? "--start expects a layer number"
                                    : "--end must be greater than --start");
        return 2;
    }
    o->c_given = o->mo.n_ctx != 0;
    o->c = o->c_given ? (o->mo.n_ctx > INT32_MAX ? INT32_MAX : (int)o->mo.n_ctx) : DEFAULT_CTX;
    if (o->metric != RP_SCAN_PROBE && o->c < RP_EVAL_MIN_CTX) {
        tool_error(cmd, "-c %d is too small: chunks need at least %d tokens", o->c,
                   RP_EVAL_MIN_CTX);
        return 2;
    }
    o->n_batch = o->mo.n_batch ? (int)(o->mo.n_batch < (1u << 20) ? o->mo.n_batch : 1u << 20)
                               : DEFAULT_BATCH;
    if (!o->png_path) { /* the CSV's name with .png */
        const size_t n = strlen(o->out);
        if (!(o->png_alloc = malloc(n + 5))) return 1;
        memcpy(o->png_alloc, o->out, n + 1);
        if (n > 4 && !strcmp(o->out + n - 4, ".csv")) o->png_alloc[n - 4] = 0;
        strcat(o->png_alloc, ".png");
        o->png_path = o->png_alloc;
    }
    return 0;
}

/* ---- load ------------------------------------------------------------------------ */

/* The model, the blocks of its range, the workload. Returns 0, or the exit status. */
static int scan_load(scan_job *job) {
    scan_opts *o = job->o;
    const char *cmd = job->cmd;
    job->input = o->metric == RP_SCAN_PROBE ? o->probes : o->file;
    if (!(job->text = tool_read_text(cmd, job->input, &job->text_len))) return 1;
    if (!(job->model = tool_load_model(cmd, o->mo.model, false))) return 1;
    job->n_layer = rp_model_n_layer(job->model);
    if (o->end < 0) o->end = job->n_layer;
    rp_status s =
        rp_scan_blocks(job->n_layer, o->start, o->end, o->max_extra, &job->blocks, &job->n_blocks);
    if (s) return tool_fail(cmd, s), 2;
    if (o->metric == RP_SCAN_PROBE) {
        s = rp_scan_set_probes(&job->set, job->model, job->text, job->text_len, job->input,
                               o->n_batch);
    } else {
        const int n_train = rp_model_n_ctx_train(job->model);
        if (!o->c_given && n_train > 0 && o->c > n_train) o->c = n_train;
        if (!(s = rp_eval_tokenize(job->model, job->text, job->text_len, &job->toks,
                                   &job->n_tok)) &&
            !(s = rp_eval_windows_init(&job->w, job->model, job->n_tok, o->c, o->n_chunks)))
            s = rp_scan_set_text(&job->set, job->toks, &job->w, o->n_batch);
    }
    return s ? tool_fail(cmd, s) : 0;
}

/* ---- the CSV ------------------------------------------------------------------------ */

/* The settings that make rows comparable: a CSV from other settings is refused. */
static rp_status set_settings(scan_job *job) {
    const scan_opts *o = job->o;
    rp_scan_csv *csv = &job->csv;
    struct stat st;
    const unsigned long long model_bytes =
        stat(o->mo.model, &st) == 0 ? (unsigned long long)st.st_size : 0;
    rp_model_desc(job->model, job->desc, sizeof job->desc);
    const unsigned long long hash = (unsigned long long)rp_eval_text_hash(job->text, job->text_len);
    rp_status s =
        rp_scan_csv_set(csv, "model", true, "%s, %llu bytes", base_name(o->mo.model), model_bytes);
    if (!s && o->scale != 1)
        s = rp_scan_csv_set(csv, "residual-scale", true, "%g", (double)o->scale);
    if (!s) s = rp_scan_csv_set(csv, "model-desc", false, "%s", job->desc);
    if (!s && o->metric == RP_SCAN_PROBE)
        s = rp_scan_csv_set(csv, "probes", true, "%zu bytes, xxh64 %016llx (%s)", job->text_len,
                            hash, base_name(job->input));
    if (!s && o->metric != RP_SCAN_PROBE) {
        s = rp_scan_csv_set(csv, "text", true, "%zu bytes, xxh64 %016llx", job->text_len, hash);
        if (!s) s = rp_scan_csv_set(csv, "text-file", false, "%s", base_name(job->input));
        if (!s) s = rp_scan_csv_set(csv, "c", true, "%d", job->w.n_ctx);
        if (!s) s = rp_scan_csv_set(csv, "chunks", true, "%d", job->w.n_chunk);
    }
    if (!s) s = rp_scan_csv_set(csv, "metric", true, "%s", rp_scan_metric_name(o->metric));
    if (!s)
        s = rp_scan_csv_set(csv, "cache", true, "%s/%s", rp_type_name(o->mo.type_k),
                            rp_type_name(o->mo.type_v));
    return s;
}

/* The rows of an existing file with the same settings, and what it recorded
 * that this run did not set (the identity's value). */
static rp_status resume(scan_job *job) {
    const char *out = job->o->out;
    rp_scan_csv old;
    memset(&old, 0, sizeof old);
    rp_status s = rp_scan_csv_read(out, &old);
    if (!s) s = rp_scan_csv_check(&old, &job->csv, out);
    for (int r = 0; r < old.n_rows && !s; r++) s = rp_scan_csv_add(&job->csv, &old.rows[r]);
    for (int m = 0; m < old.n_meta && !s; m++)
        if (!rp_scan_csv_get(&job->csv, old.key[m]))
            s = rp_scan_csv_set(&job->csv, old.key[m], false, "%s", old.val[m]);
    rp_scan_csv_free(&old);
    return s;
}

static bool scan_settings(scan_job *job) {
    rp_status s = set_settings(job);
    if (!s && access(job->o->out, F_OK) == 0) {
        s = resume(job);
        job->resumed = !s;
    }
    /* the file now: a path that cannot be written fails before any work */
    if (!s) s = rp_scan_csv_write(job->o->out, &job->csv);
    if (s) return tool_fail(job->cmd, s), false;
    for (int b = 0; b < job->n_blocks; b++)
        job->n_todo += !rp_scan_csv_find(&job->csv, job->blocks[b].i, job->blocks[b].j);
    return true;
}

static void say_workload(const scan_job *job) {
    const scan_opts *o = job->o;
    if (g_verbosity <= 0) return;
    const char *metric = rp_scan_metric_name(o->metric);
    fprintf(stderr, "model: %s\n", job->desc);
    if (o->metric == RP_SCAN_PROBE)
        fprintf(stderr, "scan: %d probes (%d multiple-choice) in %d sequences of up to %d tokens\n",
                job->set.n_items, job->set.n_choice_items, job->set.n_seq, job->set.max_dec + 1);
    else
        fprintf(stderr,
                "scan: %d chunks of %d tokens (%zu of %zu tokens), scoring the last %d of each\n",
                job->w.n_chunk, job->w.n_ctx, (size_t)job->w.n_chunk * (size_t)job->w.n_ctx,
                job->n_tok, job->w.n_score);
    if (o->max_extra)
        fprintf(stderr, "scan: %d blocks [i,j) with %d <= i < j <= %d and j - i <= %d, metric %s\n",
                job->n_blocks, o->start, o->end, o->max_extra, metric);
    else
        fprintf(stderr, "scan: %d blocks [i,j) with %d <= i < j <= %d, metric %s\n", job->n_blocks,
                o->start, o->end, metric);
    if (job->resumed)
        fprintf(stderr, "scan: resuming %s: %d of the %d blocks are there, %d to run\n", o->out,
                job->n_blocks - job->n_todo, job->n_blocks, job->n_todo);
}

/* ---- run ----------------------------------------------------------------------- */

/* The identity plan: its value recorded (or checked against the file's). */
static rp_status run_identity(scan_job *job, rp_scan *scan, scan_progress *prog, scan_stats *st) {
    const scan_opts *o = job->o;
    rp_scan_result id;
    rp_status s = rp_scan_identity(scan, &id);
    progress_done(&prog->pr);
    if (s) return s;
    st->t_identity = id.seconds;
    prog->units_done += prog->units_now;
    const char *rec = rp_scan_csv_get(&job->csv, "identity");
    if (rec) {
        const double v = strtod(rec, NULL);
        if (!(fabs(v - id.value) <= 1e-6 * fmax(1.0, fabs(id.value))))
            fprintf(stderr,
                    "warning: the identity plan scores %.10g now; %s recorded %s (another build or "
                    "machine?): its rows were measured against that\n",
                    id.value, o->out, rec);
    } else {
        rp_scan_csv_set(&job->csv, "identity", false, "%.10g", id.value);
        if (id.unc > 0) rp_scan_csv_set(&job->csv, "identity-unc", false, "%.6g", id.unc);
        if (id.accuracy >= 0)
            rp_scan_csv_set(&job->csv, "identity-accuracy", false, "%.6g", id.accuracy);
    }
    if (g_verbosity > 0) {
        fprintf(stderr, "identity: %s %.6f", rp_scan_metric_name(o->metric), id.value);
        if (id.unc > 0) fprintf(stderr, " +/- %.5f", id.unc);
        if (id.accuracy >= 0) fprintf(stderr, ", accuracy %.2f%%", 100 * id.accuracy);
        fprintf(stderr, " in %.2f s\n", id.seconds);
    }
    return rp_scan_csv_write(o->out, &job->csv);
}

/* One line per finished block, with the time left. */
static void say_block(const scan_job *job, scan_progress *prog, int bi, int bj,
                      const rp_scan_result *r) {
    if (g_verbosity <= 0) return;
    const double el = now_s() - prog->t0;
    const double left =
        prog->units_done > 0 ? el / prog->units_done * (prog->units_total - prog->units_done) : 0;
    char eta[32];
    fmt_duration(eta, sizeof eta, left);
    progress_done(&prog->pr);
    fprintf(stderr, "[%d/%d] block %d,%d (+%d): %s %.6f (%+.6f)", prog->done, prog->total, bi, bj,
            bj - bi, rp_scan_metric_name(job->o->metric), r->value, r->delta);
    if (r->accuracy >= 0) fprintf(stderr, ", accuracy %.2f%%", 100 * r->accuracy);
    fprintf(stderr, " in %.2f s, %s left\n", r->seconds, eta);
}

/* Every block not in the CSV yet, each row written as it finishes. */
static rp_status run_blocks(scan_job *job, rp_scan *scan, scan_progress *prog, scan_stats *st) {
    const double t0 = now_s();
    int held = -1;
    for (int b = 0; b < job->n_blocks; b++) {
        const int bi = job->blocks[b].i, bj = job->blocks[b].j;
        if (rp_scan_csv_find(&job->csv, bi, bj)) continue;
        prog->units_now = block_units(job->n_layer, bi, bj, st->reusing, &held);
        rp_scan_result r;
        rp_status s = rp_scan_block_eval(scan, bi, bj, &r);
        if (s) return s;
        prog->units_done += prog->units_now;
        prog->done++;
        st->n_run++;
        rp_scan_row row = {bi, bj, bj - bi, r.value, r.delta, r.seconds};
        if ((s = rp_scan_csv_add(&job->csv, &row)) ||
            (s = rp_scan_csv_write(job->o->out, &job->csv)))
            return s;
        snprintf(prog->last, sizeof prog->last, "%d,%d %s %+.4g", bi, bj,
                 rp_scan_metric_name(job->o->metric), r.delta);
        say_block(job, prog, bi, bj, &r);
    }
    st->t_scan = now_s() - t0;
    st->steps = rp_scan_steps_run(scan);
    return RP_OK;
}

/* The identity and the blocks to run, Ctrl-C stopping cleanly between decodes. */
static bool scan_execute(scan_job *job, scan_stats *st) {
    const scan_opts *o = job->o;
    scan_progress prog;
    memset(&prog, 0, sizeof prog);
    const rp_scan_params sp = {
        .metric = o->metric,
        .n_threads = o->mo.n_threads,
        .type_k = o->mo.type_k,
        .type_v = o->mo.type_v,
        .n_batch = o->n_batch,
        .reuse = !o->no_reuse,
        .res_scale = o->scale,
        .progress = on_progress,
        .progress_user = &prog,
    };
    rp_scan *scan = NULL;
    rp_status s = rp_scan_new(job->model, &job->set, &sp, &scan);
    if (s) return tool_fail(job->cmd, s), false;
    st->reusing = rp_scan_reusing(scan);
    if (!o->no_reuse && !st->reusing && g_verbosity > 0)
        fprintf(stderr, "scan: the %s forward pass runs whole plans only: no prefix reuse\n",
                rp_model_arch(job->model));
    /* the work ahead, in plan steps per token */
    int held = -1;
    prog.units_now = prog.units_total = job->n_layer;
    for (int b = 0; b < job->n_blocks; b++)
        if (!rp_scan_csv_find(&job->csv, job->blocks[b].i, job->blocks[b].j))
            prog.units_total +=
                block_units(job->n_layer, job->blocks[b].i, job->blocks[b].j, st->reusing, &held);
    prog.total = job->n_todo;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second signal ends the process at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    progress_init(&prog.pr, job->cmd);
    prog.t0 = now_s();
    s = run_identity(job, scan, &prog, st);
    if (!s) s = run_blocks(job, scan, &prog, st);
    progress_done(&prog.pr);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    rp_scan_free(scan);
    st->interrupted = s == RP_ERR_CANCELLED;
    if (st->interrupted)
        fprintf(stderr,
                "reprise scan: interrupted; %s holds %d of the %d blocks; run the same command to "
                "continue\n",
                o->out, job->n_blocks - job->n_todo + st->n_run, job->n_blocks);
    else if (s)
        tool_fail(job->cmd, s);
    return !s || st->interrupted;
}

/* ---- report ------------------------------------------------------------------------ */

static void print_best(const scan_job *job, const rp_scan_row *rows, int n_rows, int sign) {
    const char *metric = rp_scan_metric_name(job->o->metric);
    int *order = malloc(((size_t)n_rows + 1) * sizeof *order), n_order = 0;
    if (!order) return;
    rp_scan_rank(rows, n_rows, sign, order, &n_order);
    const int n_best = job->o->n_best;
    const int shown = n_order < (n_best > 5 ? n_best : 5) ? n_order : (n_best > 5 ? n_best : 5);
    printf("best blocks:\n  rank  block  extra  %-10s  delta\n", metric);
    for (int t = 0; t < shown; t++) {
        const rp_scan_row *r = &rows[order[t]];
        char blk[32];
        snprintf(blk, sizeof blk, "%d,%d", r->i, r->j);
        printf("  %4d  %-5s  %5d  ", t + 1, blk, r->extra);
        print_value(job->o->metric, r->value);
        printf("  %+.6f\n", r->delta);
    }
    free(order);
}

static void print_pareto(const scan_job *job, const rp_scan_row *rows, int n_rows, int sign,
                         int lim) {
    int *best = malloc(((size_t)lim + 1) * sizeof *best);
    bool *front = malloc(((size_t)lim + 1) * sizeof *front);
    if (best && front) {
        rp_scan_pareto(rows, n_rows, sign, lim, best, front);
        printf("\nPareto list (best block per extra-layer count; * = better than every smaller "
               "block):\n");
        printf("  extra  block  %-10s  delta\n", rp_scan_metric_name(job->o->metric));
        for (int e = 1; e <= lim; e++) {
            if (best[e] < 0) continue;
            const rp_scan_row *r = &rows[best[e]];
            char blk[32];
            snprintf(blk, sizeof blk, "%d,%d", r->i, r->j);
            printf("  %5d  %-5s  ", e, blk);
            print_value(job->o->metric, r->value);
            printf("  %+.6f%s\n", r->delta, front[e] ? " *" : "");
        }
    }
    free(best);
    free(front);
}

/* The heatmap (not for a scan stopped before its first block). */
static rp_status write_heatmap(const scan_job *job, const rp_scan_row *rows, int n_rows, int sign,
                               double identity) {
    const scan_opts *o = job->o;
    const char *incomplete = n_rows < job->n_blocks ? " (scan incomplete)" : "";
    char title[200], note[256];
    snprintf(title, sizeof title, "reprise scan: %s (%d layers), %s", base_name(o->mo.model),
             job->n_layer,
             o->metric == RP_SCAN_PPL   ? "perplexity"
             : o->metric == RP_SCAN_KLD ? "KL divergence from the identity"
                                        : "probe answer log-probability");
    if (o->metric == RP_SCAN_PROBE)
        snprintf(note, sizeof note, "%s: %d probes; identity %.4f nats%s", base_name(job->input),
                 job->set.n_items, identity, incomplete);
    else if (o->metric == RP_SCAN_PPL)
        snprintf(note, sizeof note, "%s, c=%d x %d chunks; identity PPL %.4f%s",
                 base_name(job->input), job->w.n_ctx, job->w.n_chunk, identity, incomplete);
    else /* the identity's KLD is 0 by definition */
        snprintf(note, sizeof note, "%s, c=%d x %d chunks%s", base_name(job->input), job->w.n_ctx,
                 job->w.n_chunk, incomplete);
    const rp_heatmap hm = {
        .rows = rows,
        .n_rows = n_rows,
        .start = o->start,
        .end = o->end,
        .max_extra = o->max_extra,
        .sign = sign,
        .title = title,
        .note = note,
        .unit = metric_caption(o->metric),
        .n_best = o->n_best,
    };
    return rp_heatmap_write_png(&hm, o->png_path);
}

/* The rows of this range, best first; the Pareto list; the heatmap. */
static bool scan_report(const scan_job *job, const scan_stats *st) {
    const scan_opts *o = job->o;
    rp_scan_row *rows = malloc(((size_t)job->n_blocks + 1) * sizeof *rows);
    if (!rows) return tool_error(job->cmd, "out of memory"), false;
    int n_rows = 0;
    for (int b = 0; b < job->n_blocks; b++) {
        const rp_scan_row *r = rp_scan_csv_find(&job->csv, job->blocks[b].i, job->blocks[b].j);
        if (r) rows[n_rows++] = *r;
    }
    const int sign = rp_scan_metric_sign(o->metric);
    const char *idv = rp_scan_csv_get(&job->csv, "identity");
    const double identity = idv ? strtod(idv, NULL) : NAN;
    if (!st->interrupted) {
        const char *metric = rp_scan_metric_name(o->metric);
        printf("identity plan: %s %.6f\n", metric, identity);
        printf("%d blocks, %s is %s\n\n", n_rows, metric,
               sign > 0 ? "higher = better" : "lower = better");
        print_best(job, rows, n_rows, sign);
        print_pareto(job, rows, n_rows, sign, o->max_extra ? o->max_extra : o->end - o->start);
    }
    rp_status s =
        n_rows || !st->interrupted ? write_heatmap(job, rows, n_rows, sign, identity) : RP_OK;
    free(rows);
    if (s) return tool_fail(job->cmd, s), false;
    if (g_verbosity > 0) {
        fprintf(stderr, "wrote %s and %s\n", o->out, o->png_path);
        if (st->n_run)
            fprintf(stderr,
                    "timing: identity %.2f s, %d blocks %.2f s (%.3f s per block), prefix reuse "
                    "%s: %.1f layer steps per token per block\n",
                    st->t_identity, st->n_run, st->t_scan, st->t_scan / st->n_run,
                    st->reusing ? "on" : "off",
                    job->set.n_rows
                        ? ((double)st->steps / (double)job->set.n_rows - job->n_layer) / st->n_run
                        : 0.0);
    }
    return true;
}

int cmd_scan(int argc, char **argv) {
    const char *cmd = "scan";
    scan_opts o;
    memset(&o, 0, sizeof o);
    int rc = scan_parse(cmd, &o, argc, argv);
    if (rc != ARGS_OK) return rc;
    if ((rc = scan_check(cmd, &o))) return rc;
    scan_job job = {.cmd = cmd, .o = &o};
    rc = scan_load(&job);
    /* --scales: the same scan once per residual scale, each to its own files */
    const char *sc = o.scales ? o.scales : "1", *out0 = o.out, *png0 = o.png_path;
    char out[1024], png[1024];
    for (; !rc && *sc; sc += strcspn(sc, ",") + (sc[strcspn(sc, ",")] == ',')) {
        char *end;
        o.scale = strtof(sc, &end);
        if (end == sc || (*end && *end != ',') || !(o.scale > 0 && o.scale <= 16)) {
            tool_error(cmd, "--scales: '%.*s' is not a scale in (0, 16]", (int)strcspn(sc, ","),
                       sc);
            rc = 2;
            break;
        }
        const int n = (int)strlen(out0) -
                      (strlen(out0) > 4 && !strcmp(out0 + strlen(out0) - 4, ".csv") ? 4 : 0);
        snprintf(out, sizeof out, "%.*s-s%g.csv", n, out0, (double)o.scale);
        snprintf(png, sizeof png, "%.*s-s%g.png", (int)strlen(png0) - 4, png0, (double)o.scale);
        o.out = o.scale == 1 ? out0 : out;
        o.png_path = o.scale == 1 ? png0 : png;
        scan_stats st = {0};
        rp_scan_csv_free(&job.csv);
        memset(&job.csv, 0, sizeof job.csv);
        job.n_todo = 0;
        if (g_verbosity > 0 && o.scales)
            fprintf(stderr, "scan: residual scale %g -> %s\n", (double)o.scale, out);
        rc = scan_settings(&job) ? 0 : 1;
        if (g_verbosity > 0 && !rc) say_workload(&job);
        if (!rc && job.n_todo > 0 && !scan_execute(&job, &st)) rc = 1;
        if (!rc) rc = !scan_report(&job, &st) ? 1 : st.interrupted ? 130 : 0;
    }
    rp_scan_csv_free(&job.csv);
    rp_scan_set_free(&job.set);
    free(job.blocks);
    free(job.toks);
    free(job.text);
    free(o.png_alloc);
    rp_model_free(job.model);
    return rc;
}
