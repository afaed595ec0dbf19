/* reprise scan: what the parts of the command share (scan.c parses, loads
 * and reports; scan_run.c runs the plans of a scan, a base-plan scan and a
 * beam search; scan_merge.c joins the CSVs of shards). */
#ifndef RP_TOOLS_SCAN_H
#define RP_TOOLS_SCAN_H

#include "tools.h"

typedef struct scan_opts {
    model_opts mo;
    const char *file, *probes, *metric_name, *out, *png_path, *base_plan, *shard, *combine_list;
    unsigned combine;
    int n_chunks, max_extra, start, end, n_best, beam, depth;
    bool no_reuse;
    const char *scales; /* --scales: one scan per residual scale of the second pass */
    float scale;        /* the scale of the scan being run (1: none) */
    /* from the checks */
    rp_scan_metric metric;
    bool c_given;
    int c, n_batch;
    int shard_k, shard_n; /* 0/0: the whole scan */
    char *png_alloc;      /* png_path when derived from the CSV's name */
} scan_opts;

/* One plan to evaluate: a block (i,j) added to a plan of the scan (the base,
 * or a plan of the beam); group: which one (plans of one group share their
 * prefix up to fork). */
typedef struct scan_cand {
    rp_scan_plan plan;
    int i, j, fork, group;
    char spec[RP_SCAN_PLAN_LEN];
} scan_cand;

/* The model, the workload, the blocks and the CSV of one scan. */
typedef struct scan_job {
    const char *cmd;
    scan_opts *o;
    const char *input; /* the text or the probe file */
    char *text;
    size_t text_len;
    rp_model *model;
    int n_layer;
    rp_scan_block *blocks; /* of the range, disjoint from the base, of this shard */
    int n_blocks, n_todo;
    rp_scan_plan base;
    char base_spec[RP_SCAN_PLAN_LEN];
    rp_scan_set set;
    rp_eval_windows w;
    int32_t *toks;
    size_t n_tok;
    rp_scan_csv csv;
    char desc[256];
    bool resumed;
    /* every plan of the search (the first n_first: the blocks on the base) */
    scan_cand *cands;
    int n_cands, cap_cands, n_first;
} scan_job;

/* What running the plans did. */
typedef struct scan_stats {
    double t_identity, t_scan;
    int n_run;
    bool interrupted;
    uint64_t steps;
    bool reusing;
} scan_stats;

/* scan_run.c: evaluates every candidate not in the CSV yet (the identity and
 * the base first, once), the beam's rounds after the first; each row written
 * as it finishes. false after printing an error. */
bool scan_execute(scan_job *job, scan_stats *st);
/* The first round's candidates (the blocks on the base) and how many of them
 * the CSV lacks (job->n_todo). */
bool scan_first_cands(scan_job *job);

/* The lists and the heatmap of a CSV (scan.c; merge uses them too). */
typedef struct scan_view {
    const char *cmd;
    const rp_scan_csv *csv;
    rp_scan_metric metric;
    const char *model_name, *input_name, *png_path;
    int n_layer, start, end, max_extra, n_best;
    rp_scan_plan base;
    const rp_scan_row *cells; /* the heatmap's cells: blocks on the base */
    int n_cells, n_expected;
    const rp_scan_row *all; /* every plan, for the lists */
    int n_all;
    int c, chunks, n_probes; /* for the heatmap's note (0: not known) */
    bool print_lists;
    bool no_png; /* lists only */
} scan_view;
bool scan_view_report(const scan_view *v);

int cmd_scan_merge(int argc, char **argv);

#endif
