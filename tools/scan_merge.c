/* reprise scan merge: the CSVs of the shards of one scan (scan --shard K/N)
 * joined into one CSV, with its lists and heatmap. Files from another model,
 * text, probe file or settings are refused, as are a missing or repeated
 * shard and a plan given twice. */
#include "scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILES 256

/* The settings every shard of one scan shares. */
static const char *const g_same[] = {"model",  "text",  "probes", "c",    "chunks",
                                     "metric", "cache", "layers", "base", "range"};

static int cmp_rows(const void *a, const void *b) {
    const rp_scan_row *x = a, *y = b;
    if (x->j != y->j) return x->j - y->j;
    if (x->i != y->i) return x->i - y->i;
    return strcmp(x->plan, y->plan);
}

/* Whether file f matches the first file's settings; prints the refusal. */
static bool same_scan(const char *cmd, const rp_scan_csv *first, const char *first_path,
                      const rp_scan_csv *f, const char *path) {
    for (size_t k = 0; k < ARRAY_LEN(g_same); k++) {
        const char *a = rp_scan_csv_get(first, g_same[k]), *b = rp_scan_csv_get(f, g_same[k]);
        if (!a && !b) continue;
        if (!a || !b || strcmp(a, b)) {
            tool_error(cmd, "%s has %s '%s' but %s has '%s': not shards of one scan", path,
                       g_same[k], b ? b : "(none)", first_path, a ? a : "(none)");
            return false;
        }
    }
    const char *ia = rp_scan_csv_get(first, "identity"), *ib = rp_scan_csv_get(f, "identity");
    if (ia && ib) {
        const double va = strtod(ia, NULL), vb = strtod(ib, NULL);
        if (!(fabs(va - vb) <= 1e-6 * fmax(1.0, fabs(va))))
            fprintf(stderr,
                    "warning: %s measured the identity at %s, %s at %s (another build or "
                    "machine?): its deltas are against its own\n",
                    path, ib, first_path, ia);
    }
    return true;
}

/* Shard k of n from the file's "shard" setting; false after the refusal. */
static bool shard_of(const char *cmd, const rp_scan_csv *f, const char *path, int *k, int *n) {
    const char *v = rp_scan_csv_get(f, "shard");
    char tail;
    if (!v || sscanf(v, "%d/%d%c", k, n, &tail) != 2 || *n < 1 || *k < 1 || *k > *n) {
        tool_error(cmd, "%s has no 'shard: K/N' setting: not a shard (scan --shard K/N)", path);
        return false;
    }
    return true;
}

/* The files, checked: one scan, every shard once. */
static bool read_all(const char *cmd, const char **paths, int n_paths, rp_scan_csv *csv) {
    int n_shards = 0;
    bool seen[MAX_FILES + 1] = {false};
    for (int f = 0; f < n_paths; f++) {
        rp_status s = rp_scan_csv_read(paths[f], &csv[f]);
        if (s) return tool_fail(cmd, s), false;
        int k, n;
        if (!shard_of(cmd, &csv[f], paths[f], &k, &n)) return false;
        if (f == 0) n_shards = n;
        if (n != n_shards) {
            tool_error(cmd, "%s is shard %d/%d, %s of %d shards", paths[f], k, n, paths[0],
                       n_shards);
            return false;
        }
        if (n > MAX_FILES || seen[k]) {
            tool_error(cmd, "%s: shard %d/%d %s", paths[f], k, n,
                       n > MAX_FILES ? "of too many shards" : "is given twice");
            return false;
        }
        seen[k] = true;
        if (f && !same_scan(cmd, &csv[0], paths[0], &csv[f], paths[f])) return false;
    }
    for (int k = 1; k <= n_shards; k++)
        if (!seen[k]) {
            tool_error(cmd, "shard %d/%d is missing (given: %d files)", k, n_shards, n_paths);
            return false;
        }
    return true;
}

/* The merged file: the first file's settings (less the shard), every row in
 * the order a whole scan writes them (by j, then i). */
static bool join(const char *cmd, int n_paths, rp_scan_csv *csv, rp_scan_csv *out) {
    memset(out, 0, sizeof *out);
    rp_status s = RP_OK;
    for (int m = 0; m < csv[0].n_meta && !s; m++)
        if (strcmp(csv[0].key[m], "shard"))
            s = rp_scan_csv_set(out, csv[0].key[m], false, "%s", csv[0].val[m]);
    int total = 0;
    for (int f = 0; f < n_paths; f++) total += csv[f].n_rows;
    rp_scan_row *rows = malloc(((size_t)total + 1) * sizeof *rows);
    if (!rows) return tool_error(cmd, "out of memory"), false;
    int n = 0;
    for (int f = 0; f < n_paths; f++)
        for (int r = 0; r < csv[f].n_rows; r++) rows[n++] = csv[f].rows[r];
    qsort(rows, (size_t)n, sizeof *rows, cmp_rows);
    for (int r = 0; r < n && !s; r++) {
        if (r && !strcmp(rows[r].plan, rows[r - 1].plan)) {
            tool_error(cmd, "plan %s is in two of the files: not disjoint shards", rows[r].plan);
            free(rows);
            return false;
        }
        s = rp_scan_csv_add(out, &rows[r]);
    }
    free(rows);
    if (s) return tool_fail(cmd, s), false;
    return true;
}

/* The view of the merged CSV for the lists and the heatmap. */
static bool view_of(const char *cmd, const rp_scan_csv *csv, scan_view *v) {
    const char *metric = rp_scan_csv_get(csv, "metric"), *layers = rp_scan_csv_get(csv, "layers"),
               *range = rp_scan_csv_get(csv, "range"), *base = rp_scan_csv_get(csv, "base");
    const int m = rp_scan_metric_from_name(metric);
    if (m < 0 || !layers || !range ||
        sscanf(range, "start %d, end %d, max-extra %d", &v->start, &v->end, &v->max_extra) != 3) {
        tool_error(cmd, "the files lack the 'metric', 'layers' or 'range' settings of a scan");
        return false;
    }
    v->metric = (rp_scan_metric)m;
    v->n_layer = atoi(layers);
    if (rp_scan_plan_parse(base, v->n_layer, &v->base)) {
        tool_error(cmd, "base plan '%s': %s", base, rp_last_error());
        return false;
    }
    const char *c = rp_scan_csv_get(csv, "c"), *ch = rp_scan_csv_get(csv, "chunks");
    v->c = c ? atoi(c) : 0;
    v->chunks = ch ? atoi(ch) : 0;
    rp_scan_block *blocks = NULL;
    int nb = 0;
    if (rp_scan_blocks(v->n_layer, v->start, v->end, v->max_extra, &blocks, &nb))
        return tool_fail(cmd, RP_ERR_FORMAT), false;
    v->n_expected = 0;
    for (int b = 0; b < nb; b++)
        v->n_expected += rp_scan_plan_disjoint(&v->base, blocks[b].i, blocks[b].j);
    free(blocks);
    return true;
}

int cmd_scan_merge(int argc, char **argv) {
    const char *cmd = "scan merge";
    const char *paths[MAX_FILES];
    int n_paths = 0, n_best = 3;
    const char *out = NULL;
    bool png = false, quiet = false;
    const arg_opt opts[] = {
        {"-o|--output", ARG_STR, &out, "FILE", "the merged CSV (required)"},
        {"--png", ARG_FLAG, &png, NULL, "also draw the heatmap (the CSV's name with .png)"},
        {"--best", ARG_INT, &n_best, "N", "best blocks marked on the heatmap (default 3)"},
        {"-q|--quiet", ARG_FLAG, &quiet, NULL, "errors only"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise scan merge A.csv B.csv ... -o ALL.csv [--png]",
        .description =
            "Joins the CSVs of the shards of one scan (scan --shard K/N, every shard once) into\n"
            "one CSV in the order of a whole scan, prints the best blocks and the Pareto list\n"
            "and, with --png, draws the heatmap. Files from another model, text or settings are\n"
            "refused.",
        .tables = tables,
        .pos = paths,
        .max_pos = MAX_FILES,
        .n_pos = &n_paths};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (quiet) g_verbosity = 0;
    if (!out || n_paths < 1 || n_best < 0) {
        tool_error(cmd, "%s",
                   !out         ? "no output (-o ALL.csv)"
                   : n_best < 0 ? "--best expects a count"
                                : "no CSVs to merge");
        return 2;
    }
    rp_scan_csv *csv = calloc((size_t)n_paths, sizeof *csv), merged;
    memset(&merged, 0, sizeof merged);
    char *png_path = malloc(strlen(out) + 5);
    rc = 1;
    scan_view v = {.cmd = cmd, .n_best = n_best, .print_lists = true};
    if (csv && png_path && read_all(cmd, paths, n_paths, csv) && join(cmd, n_paths, csv, &merged) &&
        view_of(cmd, &merged, &v)) {
        rp_status s = rp_scan_csv_write(out, &merged);
        if (s) {
            tool_fail(cmd, s);
        } else {
            strcpy(png_path, out);
            const size_t n = strlen(png_path);
            if (n > 4 && !strcmp(png_path + n - 4, ".csv")) png_path[n - 4] = 0;
            strcat(png_path, ".png");
            const char *model = rp_scan_csv_get(&merged, "model");
            const char *input = rp_scan_csv_get(&merged, "text-file");
            char model_name[256];
            snprintf(model_name, sizeof model_name, "%.*s", model ? (int)strcspn(model, ",") : 1,
                     model ? model : "?");
            v.csv = &merged;
            v.model_name = model_name;
            v.input_name = input ? input : "probes";
            v.png_path = png_path;
            v.cells = v.all = merged.rows;
            v.n_cells = v.n_all = merged.n_rows;
            v.no_png = !png;
            rc = scan_view_report(&v) ? 0 : 1;
            if (!rc && g_verbosity > 0)
                fprintf(stderr, "merged %d files: %d plans into %s%s%s\n", n_paths, merged.n_rows,
                        out, png ? " and " : "", png ? png_path : "");
        }
    }
    for (int f = 0; csv && f < n_paths; f++) rp_scan_csv_free(&csv[f]);
    free(csv);
    rp_scan_csv_free(&merged);
    free(png_path);
    return rc;
}
