/* reprise scan: evaluate every RYS block (i,j) of a model on one loaded copy of
 * its weights, write one CSV row per block (resumable), draw the heatmap and
 * print the best blocks and the Pareto list. The evaluation, the CSV, the
 * ranking and the heatmap are the library's (rp_scan_*, reprise_tools.h); the
 * file formats are docs/scan.md.
 *
 * parse (scan_parse) -> validate (scan_check) -> load the model and the
 * workload (scan_load) -> the CSV's settings, resumed (scan_settings) -> run
 * the identity and the blocks (scan_execute) -> report (scan_report). */
#include "scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_CTX   512
#define DEFAULT_BATCH 512
#define DEFAULT_BEST  3

static const char *metric_caption(rp_scan_metric m) {
    static const char *const cap[] = {
        "PPL change",        "KLD from identity", "answer log-prob change",
        "math score change", "EQ score change",   "MC accuracy change",
        "balanced z"};
    return (unsigned)m < ARRAY_LEN(cap) ? cap[m] : "change";
}

static bool probe_metric(rp_scan_metric m) {
    return m != RP_SCAN_PPL && m != RP_SCAN_KLD;
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
         "probes: JSONL (free answer, choices, math, EQ), HellaSwag or llama MC binary"},
        {"--combine", ARG_STR, &o->combine_list, "LIST",
         "combined: the metrics it combines, e.g. math,eq (default: all the file has)"},
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
         "one scan per residual scale of each block's second pass ('i,j@s=F'); F != 1 writes "
         "OUT-sF.csv"},
        {"--base-plan", ARG_STR, &o->base_plan, "SPEC|FILE",
         "scan blocks on top of this plan ('i,j;k,l' or a plan file)"},
        {"--beam", ARG_INT, &o->beam, "W",
         "beam search: each round adds a block to the W best plans"},
        {"--depth", ARG_INT, &o->depth, "D", "beam search: plans of up to D blocks (default 2)"},
        {"--shard", ARG_STR, &o->shard, "K/N",
         "only shard K of N (whole end layers j); join with 'reprise scan merge'"},
        {0},
    };
    /* the model options without the plan flags: scan makes the plans */
    const arg_opt *tables[] = {opts, model_opts_table(&o->mo, MO_CHUNKS), NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage =
            "reprise scan -m MODEL -f TEXT [-c N] [--chunks K] [--metric ppl|kld] [--max-extra "
            "N]\n                    [--start I --end J] [-o OUT.csv] [--png OUT.png]\n"
            "       reprise scan -m MODEL --probes FILE.jsonl [...]\n"
            "       reprise scan merge A.csv B.csv ... -o ALL.csv [--png]",
        .description =
            "Evaluates the identity plan once, then every RYS block (i,j) -- source layers [i,j)\n"
            "run twice, as --repeat-layers i,j -- with start <= i < j <= end and at most\n"
            "--max-extra extra layers, each as a plan over the weights loaded once. Metrics:\n"
            "  ppl    perplexity of the text, llama.cpp's windows (as reprise perplexity): delta\n"
            "         against the identity plan, lower is better;\n"
            "  kld    mean KL divergence of the block's token distributions from the identity's;\n"
            "  probe  mean log-probability of the answers in a JSONL file (docs/scan.md), higher\n"
            "         is better; multiple-choice items also report accuracy;\n"
            "  math   RYS's partial credit of the numbers answered greedily (integer answers);\n"
            "  eq     EQ-style distance of the numbers answered to reference scores;\n"
            "  mc     accuracy on the multiple-choice probes (the likeliest choice);\n"
            "  combined  balanced z: the mean of each chosen metric's delta over its standard\n"
            "         error at the identity (--combine math,eq,mc).\n"
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
        tool_error(cmd, "--metric '%s' is not one of ppl, kld, probe, math, eq, mc, combined",
                   o->metric_name);
        return false;
    }
    o->metric = (rp_scan_metric)metric;
    const bool probe = probe_metric(o->metric);
    if (probe && !o->probes) {
        tool_error(cmd, "--metric %s needs --probes FILE (JSONL; see docs/scan.md)",
                   rp_scan_metric_name(metric));
        return false;
    }
    if (!probe && o->probes) {
        tool_error(cmd, "--probes goes with --metric probe, math, eq, mc or combined, not %s",
                   rp_scan_metric_name(metric));
        return false;
    }
    if (o->combine_list && o->metric != RP_SCAN_COMBINED) {
        tool_error(cmd, "--combine goes with --metric combined");
        return false;
    }
    for (const char *p = o->combine_list; p && *p;) {
        const size_t n = strcspn(p, ",");
        char name[16];
        snprintf(name, sizeof name, "%.*s", (int)(n < 15 ? n : 15), p);
        const int m = rp_scan_metric_from_name(name);
        if (m != RP_SCAN_MATH && m != RP_SCAN_EQ && m != RP_SCAN_MC) {
            tool_error(cmd, "--combine '%s': combines math, eq and mc", o->combine_list);
            return false;
        }
        o->combine |= 1u << m;
        p += n + (p[n] == ',');
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
    if (o->beam < 0 || o->depth < 0 || (o->depth && !o->beam) || o->depth > RP_SCAN_MAX_BLOCKS) {
        tool_error(cmd, "%s",
                   o->depth && !o->beam ? "--depth goes with --beam W"
                                        : "--beam and --depth expect counts (depth at most 16)");
        return 2;
    }
    if (o->beam && !o->depth) o->depth = 2;
    if (o->shard) {
        char tail;
        if (sscanf(o->shard, "%d/%d%c", &o->shard_k, &o->shard_n, &tail) != 2 || o->shard_n < 1 ||
            o->shard_k < 1 || o->shard_k > o->shard_n) {
            tool_error(cmd, "--shard '%s': expected K/N with 1 <= K <= N", o->shard);
            return 2;
        }
        if (o->beam) {
            tool_error(cmd, "--shard and --beam: a beam's rounds depend on each other; shard the "
                            "first round, merge, then run the beam on the merged CSV");
            return 2;
        }
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
    if (!probe_metric(o->metric) && o->c < RP_EVAL_MIN_CTX) {
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

/* --base-plan: a spec, or a plan file checked against the model (a repeat
 * plan: the scan adds blocks to it). */
static bool load_base(scan_job *job) {
    const scan_opts *o = job->o;
    if (!o->base_plan) return true;
    const char *spec = o->base_plan;
    rp_planfile *pf = NULL;
    struct stat st;
    if (stat(o->base_plan, &st) == 0 && S_ISREG(st.st_mode)) {
        model_opts mo = o->mo;
        mo.plan_file = o->base_plan;
        mo.repeat_layers = mo.layer_map = NULL;
        const char *map = NULL;
        if (!tool_plan_resolve(job->cmd, &mo, job->model, &pf, &spec, &map)) return false;
        if (map) {
            tool_error(job->cmd,
                       "--base-plan %s: a layer map; a scan adds blocks to a plan of "
                       "repeat blocks only",
                       o->base_plan);
            rp_planfile_free(pf);
            return false;
        }
    }
    rp_status s = rp_scan_plan_parse(spec, job->n_layer, &job->base);
    rp_planfile_free(pf);
    if (s) {
        tool_error(job->cmd, "--base-plan: %s", rp_last_error());
        return false;
    }
    rp_scan_plan_format(&job->base, job->base_spec, sizeof job->base_spec);
    return true;
}

/* The model, the blocks of its range, the workload. Returns 0, or the exit status. */
static int scan_load(scan_job *job) {
    scan_opts *o = job->o;
    const char *cmd = job->cmd;
    job->input = probe_metric(o->metric) ? o->probes : o->file;
    if (!(job->text = tool_read_text(cmd, job->input, &job->text_len))) return 1;
    if (!(job->model = tool_load_model(cmd, o->mo.model, false))) return 1;
    job->n_layer = rp_model_n_layer(job->model);
    if (o->end < 0) o->end = job->n_layer;
    if (!load_base(job)) return 2;
    rp_status s =
        rp_scan_blocks(job->n_layer, o->start, o->end, o->max_extra, &job->blocks, &job->n_blocks);
    if (s) return tool_fail(cmd, s), 2;
    int kept = 0; /* the blocks a plan on the base can add */
    for (int b = 0; b < job->n_blocks; b++)
        if (rp_scan_plan_disjoint(&job->base, job->blocks[b].i, job->blocks[b].j))
            job->blocks[kept++] = job->blocks[b];
    job->n_blocks = kept;
    if (o->shard_n)
        job->n_blocks =
            rp_scan_shard(job->blocks, job->n_blocks, job->n_layer, o->shard_k, o->shard_n);
    if (job->n_blocks <= 0) {
        tool_error(cmd, "no block to scan%s", job->base.n ? " disjoint from the base plan" : "");
        return 2;
    }
    if (probe_metric(o->metric)) {
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
    if (!s && probe_metric(o->metric))
        s = rp_scan_csv_set(csv, "probes", true, "%zu bytes, xxh64 %016llx (%s)", job->text_len,
                            hash, base_name(job->input));
    if (!s && !probe_metric(o->metric)) {
        s = rp_scan_csv_set(csv, "text", true, "%zu bytes, xxh64 %016llx", job->text_len, hash);
        if (!s) s = rp_scan_csv_set(csv, "text-file", false, "%s", base_name(job->input));
        if (!s) s = rp_scan_csv_set(csv, "c", true, "%d", job->w.n_ctx);
        if (!s) s = rp_scan_csv_set(csv, "chunks", true, "%d", job->w.n_chunk);
    }
    if (!s) s = rp_scan_csv_set(csv, "metric", true, "%s", rp_scan_metric_name(o->metric));
    if (!s)
        s = rp_scan_csv_set(csv, "cache", true, "%s/%s", rp_type_name(o->mo.type_k),
                            rp_type_name(o->mo.type_v));
    if (!s) s = rp_scan_csv_set(csv, "layers", true, "%d", job->n_layer);
    if (!s && o->metric == RP_SCAN_COMBINED)
        s = rp_scan_csv_set(csv, "combine", true, "%s", o->combine_list ? o->combine_list : "all");
    if (!s && job->base.n) s = rp_scan_csv_set(csv, "base", true, "%s", job->base_spec);
    if (!s && o->shard_n) s = rp_scan_csv_set(csv, "shard", true, "%d/%d", o->shard_k, o->shard_n);
    if (!s)
        s = rp_scan_csv_set(csv, "range", false, "start %d, end %d, max-extra %d", o->start, o->end,
                            o->max_extra);
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
    /* settings a file may have that this run does not set */
    static const char *const only_when_set[] = {"base", "shard"};
    for (size_t k = 0; k < sizeof only_when_set / sizeof *only_when_set && !s; k++) {
        const char *v = rp_scan_csv_get(&old, only_when_set[k]);
        if (v && !rp_scan_csv_get(&job->csv, only_when_set[k])) {
            tool_error(job->cmd,
                       "%s was written with %s '%s'; this run has none (use another -o, or give "
                       "--%s)",
                       out, only_when_set[k], v,
                       !strcmp(only_when_set[k], "base") ? "base-plan" : "shard");
            rp_scan_csv_free(&old);
            return RP_ERR_CANCELLED; /* said */
        }
    }
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
    if (s == RP_ERR_CANCELLED) return false;
    if (s) return tool_fail(job->cmd, s), false;
    return scan_first_cands(job);
}

static void say_workload(const scan_job *job) {
    const scan_opts *o = job->o;
    if (g_verbosity <= 0) return;
    const char *metric = rp_scan_metric_name(o->metric);
    fprintf(stderr, "model: %s\n", job->desc);
    if (probe_metric(o->metric))
        fprintf(stderr,
                "scan: %d probes: %d multiple-choice, %d free answers, %d math, %d EQ (%d "
                "log-likelihood sequences of up to %d tokens)\n",
                job->set.n_items + job->set.n_gen, job->set.n_choice_items,
                job->set.n_items - job->set.n_choice_items, job->set.n_math, job->set.n_eq,
                job->set.n_seq, job->set.max_dec + 1);
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
    if (job->base.n)
        fprintf(stderr, "scan: on top of the base plan %s (+%d layers): %d disjoint blocks\n",
                job->base_spec, rp_scan_plan_extra(&job->base), job->n_blocks);
    if (o->shard_n)
        fprintf(stderr, "scan: shard %d/%d: %d blocks\n", o->shard_k, o->shard_n, job->n_blocks);
    if (o->beam)
        fprintf(stderr, "scan: beam search, width %d, plans of up to %d blocks\n", o->beam,
                job->base.n + o->depth);
    if (job->resumed)
        fprintf(stderr, "scan: resuming %s: %d of the %d blocks are there, %d to run\n", o->out,
                job->n_blocks - job->n_todo, job->n_blocks, job->n_todo);
}

/* ---- report ------------------------------------------------------------------------ */

static void plan_label(const rp_scan_row *r, char *buf, size_t n) {
    if (strchr(r->plan, ';'))
        snprintf(buf, n, "%s", r->plan);
    else
        snprintf(buf, n, "%d,%d", r->i, r->j);
}

static void print_best(const scan_view *v, int sign) {
    const char *metric = rp_scan_metric_name(v->metric);
    int *order = malloc(((size_t)v->n_all + 1) * sizeof *order), n_order = 0;
    if (!order) return;
    rp_scan_rank(v->all, v->n_all, sign, order, &n_order);
    const int lim = v->n_best > 5 ? v->n_best : 5;
    const int shown = n_order < lim ? n_order : lim;
    printf("best %s:\n  rank  %-9s  extra  %-10s  delta\n",
           v->n_all > v->n_cells ? "plans" : "blocks", v->n_all > v->n_cells ? "plan" : "block",
           metric);
    for (int t = 0; t < shown; t++) {
        const rp_scan_row *r = &v->all[order[t]];
        char blk[RP_SCAN_PLAN_LEN];
        plan_label(r, blk, sizeof blk);
        printf("  %4d  %-9s  %5d  ", t + 1, blk, r->extra);
        print_value(v->metric, r->value);
        printf("  %+.6f\n", r->delta);
    }
    free(order);
}

static void print_pareto(const scan_view *v, int sign) {
    const int lim = v->n_layer;
    int *best = malloc(((size_t)lim + 1) * sizeof *best);
    bool *front = malloc(((size_t)lim + 1) * sizeof *front);
    if (best && front) {
        rp_scan_pareto(v->all, v->n_all, sign, lim, best, front);
        printf("\nPareto list (best %s per extra-layer count; * = better than every smaller "
               "%s):\n",
               v->n_all > v->n_cells ? "plan" : "block", v->n_all > v->n_cells ? "plan" : "block");
        printf("  extra  %-9s  %-10s  delta\n", v->n_all > v->n_cells ? "plan" : "block",
               rp_scan_metric_name(v->metric));
        for (int e = 1; e <= lim; e++) {
            if (best[e] < 0) continue;
            const rp_scan_row *r = &v->all[best[e]];
            char blk[RP_SCAN_PLAN_LEN];
            plan_label(r, blk, sizeof blk);
            printf("  %5d  %-9s  ", e, blk);
            print_value(v->metric, r->value);
            printf("  %+.6f%s\n", r->delta, front[e] ? " *" : "");
        }
    }
    free(best);
    free(front);
}

/* The heatmap (not for a scan stopped before its first block): deltas from
 * the base plan's when there is one. */
static rp_status write_heatmap(const scan_view *v, int sign, double identity) {
    const char *incomplete = v->n_cells < v->n_expected ? " (scan incomplete)" : "";
    char title[512], note[640], on[RP_SCAN_PLAN_LEN + 40] = "";
    const char *bd = rp_scan_csv_get(v->csv, "base-delta");
    const double base_delta = v->base.n && bd ? strtod(bd, NULL) : 0.0;
    if (v->base.n) {
        char spec[RP_SCAN_PLAN_LEN];
        rp_scan_plan_format(&v->base, spec, sizeof spec);
        snprintf(on, sizeof on, " on base %s (%+.4g)", spec, base_delta);
    }
    static const char *const what[] = {"perplexity",
                                       "KL divergence from the identity",
                                       "probe answer log-probability",
                                       "math probes (RYS partial credit)",
                                       "EQ-style probes",
                                       "multiple-choice accuracy",
                                       "balanced z of the probes"};
    snprintf(title, sizeof title, "reprise scan: %s (%d layers), %s%s", v->model_name, v->n_layer,
             (unsigned)v->metric < ARRAY_LEN(what) ? what[v->metric] : "?", on);
    if (probe_metric(v->metric))
        snprintf(note, sizeof note, "%s: %d probes; identity %.4f%s%s%s", v->input_name,
                 v->n_probes, identity, v->metric == RP_SCAN_PROBE ? " nats" : "",
                 v->base.n ? "; change from the base" : "", incomplete);
    else if (v->metric == RP_SCAN_PPL)
        snprintf(note, sizeof note, "%s, c=%d x %d chunks; identity PPL %.4f%s%s", v->input_name,
                 v->c, v->chunks, identity, v->base.n ? "; change from the base" : "", incomplete);
    else /* the identity's KLD is 0 by definition */
        snprintf(note, sizeof note, "%s, c=%d x %d chunks%s%s", v->input_name, v->c, v->chunks,
                 v->base.n ? "; change from the base" : "", incomplete);
    rp_scan_row *cells = malloc(((size_t)v->n_cells + 1) * sizeof *cells);
    if (!cells) return RP_ERR_NOMEM;
    for (int k = 0; k < v->n_cells; k++) {
        cells[k] = v->cells[k];
        cells[k].delta -= base_delta;
    }
    const rp_heatmap hm = {
        .rows = cells,
        .n_rows = v->n_cells,
        .start = v->start,
        .end = v->end,
        .max_extra = v->max_extra,
        .sign = sign,
        .title = title,
        .note = note,
        .unit = v->base.n ? "change from the base" : metric_caption(v->metric),
        .n_best = v->n_best,
        .base = v->base.n ? &v->base : NULL,
    };
    rp_status s = rp_heatmap_write_png(&hm, v->png_path);
    free(cells);
    return s;
}

bool scan_view_report(const scan_view *v) {
    const int sign = rp_scan_metric_sign(v->metric);
    const char *idv = rp_scan_csv_get(v->csv, "identity");
    const double identity = idv ? strtod(idv, NULL) : NAN;
    if (v->print_lists) {
        const char *metric = rp_scan_metric_name(v->metric);
        printf("identity plan: %s %.6f\n", metric, identity);
        const char *bv = rp_scan_csv_get(v->csv, "base-value");
        if (v->base.n && bv) {
            char spec[RP_SCAN_PLAN_LEN];
            rp_scan_plan_format(&v->base, spec, sizeof spec);
            printf("base plan %s: %s %s (delta %s)\n", spec, metric, bv,
                   rp_scan_csv_get(v->csv, "base-delta"));
        }
        printf("%d %s, %s is %s\n\n", v->n_all, v->n_all > v->n_cells ? "plans" : "blocks", metric,
               sign > 0 ? "higher = better" : "lower = better");
        print_best(v, sign);
        print_pareto(v, sign);
    }
    rp_status s =
        !v->no_png && (v->n_cells || v->print_lists) ? write_heatmap(v, sign, identity) : RP_OK;
    if (s) return tool_fail(v->cmd, s), false;
    return true;
}

/* The rows of this scan's plans; the lists; the heatmap; the timing. */
static bool scan_report(const scan_job *job, const scan_stats *st) {
    const scan_opts *o = job->o;
    rp_scan_row *rows = malloc(((size_t)job->n_cands + 1) * sizeof *rows);
    if (!rows) return tool_error(job->cmd, "out of memory"), false;
    int n_rows = 0, n_cells = 0;
    for (int k = 0; k < job->n_cands; k++) {
        const rp_scan_row *r = rp_scan_csv_find_plan(&job->csv, job->cands[k].spec);
        if (!r) continue;
        rows[n_rows++] = *r;
        n_cells += k < job->n_first;
    }
    /* the first round's rows come first: they are the cells */
    const scan_view v = {
        .cmd = job->cmd,
        .csv = &job->csv,
        .metric = o->metric,
        .model_name = base_name(o->mo.model),
        .input_name = base_name(job->input),
        .png_path = o->png_path,
        .n_layer = job->n_layer,
        .start = o->start,
        .end = o->end,
        .max_extra = o->max_extra,
        .n_best = o->n_best,
        .base = job->base,
        .cells = rows,
        .n_cells = n_cells,
        .n_expected = job->n_first,
        .all = rows,
        .n_all = n_rows,
        .c = job->w.n_ctx,
        .chunks = job->w.n_chunk,
        .n_probes = job->set.n_items + job->set.n_gen,
        .print_lists = !st->interrupted,
    };
    const bool ok = scan_view_report(&v);
    free(rows);
    if (!ok) return false;
    if (g_verbosity > 0) {
        fprintf(stderr, "wrote %s and %s\n", o->out, o->png_path);
        if (st->n_run)
            fprintf(stderr,
                    "timing: identity %.2f s, %d plans %.2f s (%.3f s per plan), prefix reuse "
                    "%s: %.1f layer steps per token per plan\n",
                    st->t_identity, st->n_run, st->t_scan, st->t_scan / st->n_run,
                    st->reusing ? "on" : "off",
                    job->set.n_rows
                        ? ((double)st->steps / (double)job->set.n_rows - job->n_layer) / st->n_run
                        : 0.0);
    }
    return true;
}

int cmd_scan(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "merge")) return cmd_scan_merge(argc - 1, argv + 1);
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
        const size_t n =
            strlen(out0) - (strlen(out0) > 4 && !strcmp(out0 + strlen(out0) - 4, ".csv") ? 4 : 0);
        snprintf(out, sizeof out, "%.*s-s%g.csv", (int)n, out0, (double)o.scale);
        snprintf(png, sizeof png, "%.*s-s%g.png", (int)strlen(png0) - 4, png0, (double)o.scale);
        o.out = o.scale == 1 ? out0 : out;
        o.png_path = o.scale == 1 ? png0 : png;
        rp_scan_csv_free(&job.csv);
        memset(&job.csv, 0, sizeof job.csv);
        job.resumed = false;
        scan_stats st = {0};
        if (g_verbosity > 0 && o.scales)
            fprintf(stderr, "scan: residual scale %g -> %s\n", (double)o.scale, o.out);
        rc = scan_settings(&job) ? 0 : 1;
        if (g_verbosity > 0 && !rc) say_workload(&job);
        if (!rc && !scan_execute(&job, &st)) rc = 1;
        if (!rc) rc = !scan_report(&job, &st) ? 1 : st.interrupted ? 130 : 0;
    }
    rp_scan_csv_free(&job.csv);
    rp_scan_set_free(&job.set);
    free(job.blocks);
    free(job.cands);
    free(job.toks);
    free(job.text);
    free(o.png_alloc);
    rp_model_free(job.model);
    return rc;
}
