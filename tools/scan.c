/* reprise scan: evaluate every RYS block (i,j) of a model on one loaded copy of
 * its weights, write one CSV row per block (resumable), draw the heatmap and
 * print the best blocks and the Pareto list. The evaluation is src/eval/scan.c; the
 * file formats are docs/scan.md. */
#include "eval/png_canvas.h"
#include "eval/scan.h"
#include "tools.h"
#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CTX   512
#define DEFAULT_BATCH 512
#define DEFAULT_BEST  3

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static void fmt_duration(char *buf, size_t n, double s) {
    if (s < 0) s = 0;
    if (s < 90)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 5400)
        snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

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

static void print_value(const char *label, rp_scan_metric m, double v) {
    if (m == RP_SCAN_PROBE)
        printf("%s%.4f nats", label, v);
    else
        printf("%s%.4f", label, v);
}

int cmd_scan(int argc, char **argv) {
    const char *cmd = "scan";
    model_opts mo;
    model_opts_init(&mo);
    const char *file = NULL, *probes = NULL, *metric_name = NULL, *out = "scan.csv",
               *png_path = NULL;
    int n_chunks = -1, max_extra = 0, start = 0, end = -1, n_best = DEFAULT_BEST;
    bool no_reuse = false;
    const arg_opt opts[] = {
        {"-f|--file", ARG_STR, &file, "FILE", "the text (ppl and kld metrics)"},
        {"--chunks", ARG_INT, &n_chunks, "N",
         "evaluate at most N chunks of -c tokens (default: all)"},
        {"--metric", ARG_STR, &metric_name, "M",
         "ppl (default with -f), kld, or probe (default with --probes)"},
        {"--probes", ARG_STR, &probes, "FILE",
         "JSONL probes: {prompt, answer} or {prompt, choices, answer}"},
        {"--max-extra", ARG_INT, &max_extra, "N", "blocks of at most N layers (default: any)"},
        {"--start", ARG_INT, &start, "I", "first layer a block may start at (default 0)"},
        {"--end", ARG_INT, &end, "J",
         "last layer a block may end before (default: the layer count)"},
        {"-o|--output", ARG_STR, &out, "FILE",
         "results CSV, resumed when it exists (default scan.csv)"},
        {"--png", ARG_STR, &png_path, "FILE", "heatmap (default: the CSV's name with .png)"},
        {"--best", ARG_INT, &n_best, "N", "best blocks marked on the heatmap (default 3)"},
        {"--no-reuse", ARG_FLAG, &no_reuse, NULL,
         "run every plan from its first layer (for timing the reuse)"},
        {0},
    };
    /* the shared model options without the plan flags: scan makes the plans */
    arg_opt mopts[24];
    const arg_opt *shared = model_opts_table(&mo);
    size_t k = 0;
    for (size_t s = 0; shared[s].kind != ARG_END && k + 1 < sizeof mopts / sizeof mopts[0]; s++) {
        if (!strcmp(shared[s].names, "--repeat-layers") ||
            !strcmp(shared[s].names, "--layer-map") || !strcmp(shared[s].names, "--dump-plan") ||
            !strcmp(shared[s].names, "--plan") || !strcmp(shared[s].names, "--plan-force"))
            continue;
        mopts[k] = shared[s];
        if (!strcmp(mopts[k].names, "-c|--ctx-size"))
            mopts[k].help = "tokens per chunk (default 512, or the training context if smaller)";
        else if (!strcmp(mopts[k].names, "-b|--batch-size"))
            mopts[k].help = "tokens per decode: max(1, N/c) chunks together (default 512)";
        k++;
    }
    memset(&mopts[k], 0, sizeof mopts[k]);
    const arg_opt *tables[] = {opts, mopts, NULL};
    arg_spec spec = {
        cmd,
        "reprise scan -m MODEL -f TEXT [-c N] [--chunks K] [--metric ppl|kld] [--max-extra N]\n"
        "                    [--start I --end J] [-o OUT.csv] [--png OUT.png]\n"
        "       reprise scan -m MODEL --probes FILE.jsonl [...]",
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
        "(start layer down, end layer across) marks the best blocks; stdout lists them and the\n"
        "best block for each extra-layer count (the Pareto list).",
        tables,
        NULL,
        0,
        NULL};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) return help ? 0 : 2;
    if (mo.quiet) g_verbosity = 0;
    if (!mo.model) {
        tool_error(cmd, "no model given (-m FILE)");
        return 2;
    }
    int metric = metric_name ? rp_scan_metric_from_name(metric_name)
                 : probes    ? RP_SCAN_PROBE
                             : RP_SCAN_PPL;
    if (metric < 0) {
        tool_error(cmd, "--metric '%s' is not one of ppl, kld, probe", metric_name);
        return 2;
    }
    if (metric == RP_SCAN_PROBE && !probes) {
        tool_error(cmd, "--metric probe needs --probes FILE (JSONL; see docs/scan.md)");
        return 2;
    }
    if (metric != RP_SCAN_PROBE && probes) {
        tool_error(cmd, "--probes goes with --metric probe, not %s", rp_scan_metric_name(metric));
        return 2;
    }
    if (metric != RP_SCAN_PROBE && !file) {
        tool_error(cmd, "no text (-f FILE) for --metric %s", rp_scan_metric_name(metric));
        return 2;
    }
    if (metric == RP_SCAN_PROBE && file) {
        tool_error(cmd, "-f goes with --metric ppl or kld; probes are scored on their own");
        return 2;
    }
    if (n_chunks == 0 || n_chunks < -1) {
        tool_error(cmd, "--chunks expects a positive count, got %d", n_chunks);
        return 2;
    }
    if (max_extra < 0 || start < 0 || (end != -1 && end <= start) || n_best < 0) {
        tool_error(cmd, "%s",
                   max_extra < 0 ? "--max-extra expects a positive count"
                   : n_best < 0  ? "--best expects a count"
                   : start < 0   ? "--start expects a layer number"
                                 : "--end must be greater than --start");
        return 2;
    }
    const bool c_given = mo.n_ctx != 0;
    int c = c_given ? (mo.n_ctx > INT32_MAX ? INT32_MAX : (int)mo.n_ctx) : DEFAULT_CTX;
    if (metric != RP_SCAN_PROBE && c < RP_EVAL_MIN_CTX) {
        tool_error(cmd, "-c %d is too small: chunks need at least %d tokens", c, RP_EVAL_MIN_CTX);
        return 2;
    }
    const int n_batch = mo.n_batch ? (int)RP_MIN(mo.n_batch, 1u << 20) : DEFAULT_BATCH;
    char *png_alloc = NULL;
    if (!png_path) {
        const size_t n = strlen(out);
        png_alloc = malloc(n + 5);
        if (!png_alloc) return 1;
        memcpy(png_alloc, out, n + 1);
        if (n > 4 && !strcmp(out + n - 4, ".csv")) png_alloc[n - 4] = 0;
        strcat(png_alloc, ".png");
        png_path = png_alloc;
    }

    int ret = 1;
    rp_status s;
    char *text = NULL;
    size_t text_len = 0;
    int32_t *toks = NULL;
    size_t n_tok = 0;
    rp_model *model = NULL;
    rp_scan *scan = NULL;
    rp_scan_set set;
    memset(&set, 0, sizeof set);
    rp_scan_csv csv, old;
    memset(&csv, 0, sizeof csv);
    memset(&old, 0, sizeof old);
    rp_scan_block *blocks = NULL;
    int n_blocks = 0;
    rp_eval_windows w;
    memset(&w, 0, sizeof w);
    const char *input = metric == RP_SCAN_PROBE ? probes : file;
    if (!(text = tool_read_text(cmd, input, &text_len))) goto out;

    /* the model */
    rp_model_params mp = rp_model_default_params();
    progress lp;
    progress_init(&lp, "loading");
    mp.progress = progress_cb;
    mp.progress_user = &lp;
    s = rp_model_load(mo.model, &mp, &model);
    progress_done(&lp);
    if (s) {
        tool_fail(cmd, s);
        goto out;
    }
    const int n_layer = rp_model_n_layer(model);
    if (end < 0) end = n_layer;
    if ((s = rp_scan_blocks(n_layer, start, end, max_extra, &blocks, &n_blocks))) {
        tool_fail(cmd, s);
        ret = 2;
        goto out;
    }

    /* the workload */
    if (metric == RP_SCAN_PROBE) {
        if ((s = rp_scan_set_probes(&set, model, text, text_len, input, n_batch))) {
            tool_fail(cmd, s);
            goto out;
        }
    } else {
        const int n_train = rp_model_n_ctx_train(model);
        if (!c_given && n_train > 0 && c > n_train) c = n_train;
        if ((s = rp_eval_tokenize(model, text, text_len, &toks, &n_tok)) ||
            (s = rp_eval_windows_init(&w, model, n_tok, c, n_chunks)) ||
            (s = rp_scan_set_text(&set, toks, &w, n_batch))) {
            tool_fail(cmd, s);
            goto out;
        }
    }

    /* the settings that make rows comparable; a CSV from other settings is refused */
    struct stat st;
    const unsigned long long model_bytes =
        stat(mo.model, &st) == 0 ? (unsigned long long)st.st_size : 0;
    char desc[256];
    rp_model_desc(model, desc, sizeof desc);
    const unsigned long long hash = (unsigned long long)rp_eval_text_hash(text, text_len);
    s = rp_scan_csv_set(&csv, "model", true, "%s, %llu bytes", base_name(mo.model), model_bytes);
    if (!s) s = rp_scan_csv_set(&csv, "model-desc", false, "%s", desc);
    if (!s && metric == RP_SCAN_PROBE)
        s = rp_scan_csv_set(&csv, "probes", true, "%zu bytes, xxh64 %016llx (%s)", text_len, hash,
                            base_name(input));
    if (!s && metric != RP_SCAN_PROBE) {
        s = rp_scan_csv_set(&csv, "text", true, "%zu bytes, xxh64 %016llx", text_len, hash);
        if (!s) s = rp_scan_csv_set(&csv, "text-file", false, "%s", base_name(input));
        if (!s) s = rp_scan_csv_set(&csv, "c", true, "%d", w.n_ctx);
        if (!s) s = rp_scan_csv_set(&csv, "chunks", true, "%d", w.n_chunk);
    }
    if (!s) s = rp_scan_csv_set(&csv, "metric", true, "%s", rp_scan_metric_name(metric));
    if (!s)
        s = rp_scan_csv_set(&csv, "cache", true, "%s/%s", rp_type_name(mo.type_k),
                            rp_type_name(mo.type_v));
    if (s) {
        tool_fail(cmd, s);
        goto out;
    }
    bool resumed = false;
    if (access(out, F_OK) == 0) {
        if ((s = rp_scan_csv_read(out, &old)) || (s = rp_scan_csv_check(&old, &csv, out))) {
            tool_fail(cmd, s);
            goto out;
        }
        /* the old rows, and what it recorded that this run did not set (the identity's value) */
        for (int r = 0; r < old.n_rows && !s; r++) s = rp_scan_csv_add(&csv, &old.rows[r]);
        for (int m = 0; m < old.n_meta && !s; m++)
            if (!rp_scan_csv_get(&csv, old.key[m]))
                s = rp_scan_csv_set(&csv, old.key[m], false, "%s", old.val[m]);
        if (s) {
            tool_fail(cmd, s);
            goto out;
        }
        resumed = true;
    }
    /* the file now: a path that cannot be written fails before any work */
    if ((s = rp_scan_csv_write(out, &csv))) {
        tool_fail(cmd, s);
        goto out;
    }
    int n_todo = 0;
    for (int b = 0; b < n_blocks; b++) n_todo += !rp_scan_csv_find(&csv, blocks[b].i, blocks[b].j);
    if (g_verbosity > 0) {
        fprintf(stderr, "model: %s\n", desc);
        if (metric == RP_SCAN_PROBE)
            fprintf(stderr,
                    "scan: %d probes (%d multiple-choice) in %d sequences of up to %d tokens\n",
                    set.n_items, set.n_choice_items, set.n_seq, set.max_dec + 1);
        else
            fprintf(
                stderr,
                "scan: %d chunks of %d tokens (%zu of %zu tokens), scoring the last %d of each\n",
                w.n_chunk, w.n_ctx, (size_t)w.n_chunk * (size_t)w.n_ctx, n_tok, w.n_score);
        if (max_extra)
            fprintf(stderr,
                    "scan: %d blocks [i,j) with %d <= i < j <= %d and j - i <= %d, metric %s\n",
                    n_blocks, start, end, max_extra, rp_scan_metric_name(metric));
        else
            fprintf(stderr, "scan: %d blocks [i,j) with %d <= i < j <= %d, metric %s\n", n_blocks,
                    start, end, rp_scan_metric_name(metric));
        if (resumed)
            fprintf(stderr, "scan: resuming %s: %d of the %d blocks are there, %d to run\n", out,
                    n_blocks - n_todo, n_blocks, n_todo);
    }

    double t_scan = 0, t_identity = 0;
    int n_run = 0;
    bool interrupted = false;
    uint64_t steps = 0;
    bool reusing = false;
    if (n_todo > 0) {
        rp_scan_params sp = {
            .metric = (rp_scan_metric)metric,
            .n_threads = mo.n_threads,
            .type_k = mo.type_k,
            .type_v = mo.type_v,
            .n_batch = n_batch,
            .reuse = !no_reuse,
        };
        scan_progress prog;
        memset(&prog, 0, sizeof prog);
        sp.progress = on_progress;
        sp.progress_user = &prog;
        if ((s = rp_scan_new(model, &set, &sp, &scan))) {
            tool_fail(cmd, s);
            goto out;
        }
        reusing = rp_scan_reusing(scan);
        if (!no_reuse && !reusing && g_verbosity > 0)
            fprintf(stderr, "scan: the %s forward pass runs whole plans only: no prefix reuse\n",
                    rp_model_arch(model));
        /* the work ahead, in plan steps per token */
        int held = -1;
        prog.units_now = n_layer;
        prog.units_total = n_layer;
        for (int b = 0; b < n_blocks; b++)
            if (!rp_scan_csv_find(&csv, blocks[b].i, blocks[b].j))
                prog.units_total += block_units(n_layer, blocks[b].i, blocks[b].j, reusing, &held);
        prog.total = n_todo;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESETHAND; /* a second signal ends the process at once */
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        progress_init(&prog.pr, cmd);
        prog.t0 = now_s();

        rp_scan_result id;
        s = rp_scan_identity(scan, &id);
        progress_done(&prog.pr);
        if (s) {
            interrupted = s == RP_ERR_CANCELLED;
            if (!interrupted) tool_fail(cmd, s);
            goto finish;
        }
        t_identity = id.seconds;
        prog.units_done += prog.units_now;
        const char *rec = rp_scan_csv_get(&csv, "identity");
        if (rec) {
            const double v = strtod(rec, NULL);
            if (!(fabs(v - id.value) <= 1e-6 * fmax(1.0, fabs(id.value))))
                fprintf(
                    stderr,
                    "warning: the identity plan scores %.10g now; %s recorded %s (another build or "
                    "machine?): its rows were measured against that\n",
                    id.value, out, rec);
        } else {
            rp_scan_csv_set(&csv, "identity", false, "%.10g", id.value);
            if (id.unc > 0) rp_scan_csv_set(&csv, "identity-unc", false, "%.6g", id.unc);
            if (id.accuracy >= 0)
                rp_scan_csv_set(&csv, "identity-accuracy", false, "%.6g", id.accuracy);
        }
        if (g_verbosity > 0) {
            fprintf(stderr, "identity: %s %.6f", rp_scan_metric_name(metric), id.value);
            if (id.unc > 0) fprintf(stderr, " +/- %.5f", id.unc);
            if (id.accuracy >= 0) fprintf(stderr, ", accuracy %.2f%%", 100 * id.accuracy);
            fprintf(stderr, " in %.2f s\n", id.seconds);
        }
        if ((s = rp_scan_csv_write(out, &csv))) {
            tool_fail(cmd, s);
            goto finish;
        }
        const double t_blocks0 = now_s();
        held = -1;
        for (int b = 0; b < n_blocks; b++) {
            const int bi = blocks[b].i, bj = blocks[b].j;
            if (rp_scan_csv_find(&csv, bi, bj)) continue;
            prog.units_now = block_units(n_layer, bi, bj, reusing, &held);
            rp_scan_result r;
            s = rp_scan_block_eval(scan, bi, bj, &r);
            if (s) {
                progress_done(&prog.pr);
                interrupted = s == RP_ERR_CANCELLED;
                if (!interrupted) tool_fail(cmd, s);
                goto finish;
            }
            prog.units_done += prog.units_now;
            prog.done++;
            n_run++;
            rp_scan_row row = {bi, bj, bj - bi, r.value, r.delta, r.seconds};
            if ((s = rp_scan_csv_add(&csv, &row)) || (s = rp_scan_csv_write(out, &csv))) {
                progress_done(&prog.pr);
                tool_fail(cmd, s);
                goto finish;
            }
            snprintf(prog.last, sizeof prog.last, "%d,%d %s %+.4g", bi, bj,
                     rp_scan_metric_name(metric), r.delta);
            if (g_verbosity > 0) {
                const double el = now_s() - prog.t0;
                const double left = prog.units_done > 0 ? el / prog.units_done *
                                                              (prog.units_total - prog.units_done)
                                                        : 0;
                char eta[32];
                fmt_duration(eta, sizeof eta, left);
                progress_done(&prog.pr);
                fprintf(stderr, "[%d/%d] block %d,%d (+%d): %s %.6f (%+.6f)", prog.done, prog.total,
                        bi, bj, bj - bi, rp_scan_metric_name(metric), r.value, r.delta);
                if (r.accuracy >= 0) fprintf(stderr, ", accuracy %.2f%%", 100 * r.accuracy);
                fprintf(stderr, " in %.2f s, %s left\n", r.seconds, eta);
            }
        }
        t_scan = now_s() - t_blocks0;
        steps = rp_scan_steps_run(scan);
    finish:
        progress_done(&prog.pr);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (interrupted) {
            fprintf(
                stderr,
                "reprise scan: interrupted; %s holds %d of the %d blocks; run the same command to "
                "continue\n",
                out, n_blocks - n_todo + n_run, n_blocks);
            ret = 130;
        }
        if (s && !interrupted) goto out;
    }

    /* results: the rows of this range, best first; the Pareto list; the heatmap */
    {
        rp_scan_row *rows = malloc(((size_t)n_blocks + 1) * sizeof *rows);
        const int lim = max_extra ? max_extra : end - start;
        int *best = malloc(((size_t)lim + 1) * sizeof *best);
        bool *front = malloc(((size_t)lim + 1) * sizeof *front);
        if (!rows || !best || !front) {
            free(rows);
            free(best);
            free(front);
            tool_error(cmd, "out of memory");
            goto out;
        }
        int n_rows = 0;
        for (int b = 0; b < n_blocks; b++) {
            const rp_scan_row *r = rp_scan_csv_find(&csv, blocks[b].i, blocks[b].j);
            if (r) rows[n_rows++] = *r;
        }
        const int sign = rp_scan_metric_sign((rp_scan_metric)metric);
        const char *idv = rp_scan_csv_get(&csv, "identity");
        const double identity = idv ? strtod(idv, NULL) : NAN;
        if (!interrupted) {
            printf("identity plan: %s %.6f\n", rp_scan_metric_name(metric), identity);
            printf("%d blocks, %s is %s\n\n", n_rows, rp_scan_metric_name(metric),
                   sign > 0 ? "higher = better" : "lower = better");
            /* best blocks */
            int n_finite = 0;
            for (int r = 0; r < n_rows; r++) n_finite += isfinite(rows[r].delta) != 0;
            int shown = RP_MIN(n_finite, RP_MAX(n_best, 5));
            bool *used = calloc((size_t)n_rows + 1, 1);
            for (int r = 0; r < n_rows && used; r++) used[r] = !isfinite(rows[r].delta);
            printf("best blocks:\n  rank  block  extra  %-10s  delta\n",
                   rp_scan_metric_name(metric));
            for (int t = 0; t < shown && used; t++) {
                int bb = -1;
                for (int r = 0; r < n_rows; r++)
                    if (!used[r] && (bb < 0 || sign * rows[r].delta > sign * rows[bb].delta ||
                                     (sign * rows[r].delta == sign * rows[bb].delta &&
                                      rows[r].extra < rows[bb].extra)))
                        bb = r;
                used[bb] = true;
                char blk[32];
                snprintf(blk, sizeof blk, "%d,%d", rows[bb].i, rows[bb].j);
                printf("  %4d  %-5s  %5d  ", t + 1, blk, rows[bb].extra);
                print_value("", (rp_scan_metric)metric, rows[bb].value);
                printf("  %+.6f\n", rows[bb].delta);
            }
            free(used);
            rp_scan_pareto(rows, n_rows, sign, lim, best, front);
            printf("\nPareto list (best block per extra-layer count; * = better than every smaller "
                   "block):\n");
            printf("  extra  block  %-10s  delta\n", rp_scan_metric_name(metric));
            for (int e = 1; e <= lim; e++) {
                if (best[e] < 0) continue;
                const rp_scan_row *r = &rows[best[e]];
                char blk[32];
                snprintf(blk, sizeof blk, "%d,%d", r->i, r->j);
                printf("  %5d  %-5s  ", e, blk);
                print_value("", (rp_scan_metric)metric, r->value);
                printf("  %+.6f%s\n", r->delta, front[e] ? " *" : "");
            }
        }
        /* the heatmap (not for a scan stopped before its first block) */
        char title[200], note[256];
        snprintf(title, sizeof title, "reprise scan: %s (%d layers), %s", base_name(mo.model),
                 n_layer,
                 metric == RP_SCAN_PPL   ? "perplexity"
                 : metric == RP_SCAN_KLD ? "KL divergence from the identity"
                                         : "probe answer log-probability");
        if (metric == RP_SCAN_PROBE)
            snprintf(note, sizeof note, "%s: %d probes; identity %.4f nats%s", base_name(input),
                     set.n_items, identity, n_rows < n_blocks ? " (scan incomplete)" : "");
        else
            snprintf(note, sizeof note, "%s, c=%d x %d chunks; identity %s %.4f%s",
                     base_name(input), w.n_ctx, w.n_chunk,
                     metric == RP_SCAN_PPL ? "PPL" : "KLD 0 by definition, PPL", identity,
                     n_rows < n_blocks ? " (scan incomplete)" : "");
        if (metric == RP_SCAN_KLD)
            snprintf(note, sizeof note, "%s, c=%d x %d chunks%s", base_name(input), w.n_ctx,
                     w.n_chunk, n_rows < n_blocks ? " (scan incomplete)" : "");
        rp_heatmap hm = {
            .rows = rows,
            .n_rows = n_rows,
            .start = start,
            .end = end,
            .max_extra = max_extra,
            .sign = sign,
            .title = title,
            .note = note,
            .unit = metric_caption((rp_scan_metric)metric),
            .n_best = n_best,
        };
        rp_canvas cv;
        memset(&cv, 0, sizeof cv);
        s = RP_OK;
        if (n_rows || !interrupted) s = rp_heatmap_draw(&hm, &cv);
        if (!s && cv.px) s = rp_canvas_write_png(&cv, png_path);
        rp_canvas_free(&cv);
        free(rows);
        free(best);
        free(front);
        if (s) {
            tool_fail(cmd, s);
            ret = 1;
            goto out;
        }
    }
    if (g_verbosity > 0) {
        fprintf(stderr, "wrote %s and %s\n", out, png_path);
        if (n_run)
            fprintf(stderr,
                    "timing: identity %.2f s, %d blocks %.2f s (%.3f s per block), prefix reuse "
                    "%s: %.1f layer "
                    "steps per token per block\n",
                    t_identity, n_run, t_scan, t_scan / n_run, reusing ? "on" : "off",
                    set.n_rows ? ((double)steps / (double)set.n_rows - n_layer) / n_run : 0.0);
    }
    if (!interrupted) ret = 0;
out:
    rp_scan_free(scan);
    free(blocks);
    rp_scan_csv_free(&csv);
    rp_scan_csv_free(&old);
    rp_scan_set_free(&set);
    free(toks);
    free(text);
    free(png_alloc);
    rp_model_free(model);
    return ret;
}
