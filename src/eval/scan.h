/* reprise scan: every RYS block (i,j) of a model evaluated on one workload,
 * on weights loaded once.
 *
 * A workload is a set of token sequences (rp_scan_set): the chunks of a text
 * cut as the perplexity evaluation cuts them (src/eval.h), or the prompts and
 * answers of a probe file. An rp_scan evaluates the identity plan, then any
 * block as a plan over the same rp_model: a new context per block, no reload,
 * no weight copy.
 *
 * Prefix reuse. The plan of block (i,j) runs source layers 0..j-1 in steps
 * 0..j-1 exactly as the identity plan does, before its first repeated step.
 * With reuse on, the scan keeps the residual stream after step j-1 of every
 * decoded token (H_j: [n_rows][n_embd] floats) and runs a block only from
 * step j (rp_decode_steps). H_j is advanced from H_j' (j' < j) by running
 * steps j'..j-1 on the block's own context (its first j steps are the
 * identity's), so blocks taken in ascending j cost the prefix once in all.
 * The KV of the prefix steps is never needed: every step at or after j has
 * its own slot, filled by the same decode call, and a prefix slot is only
 * read by its own step. Results are bit for bit those of running every plan
 * whole: the same micro-batches meet the same inputs.
 *
 * Results go to a CSV (one row per block) that a later run resumes; the
 * heatmap is drawn by src/png_heatmap.c. The format of both files and of the
 * probe file is docs/scan.md. */
#ifndef RP_SCAN_H
#define RP_SCAN_H

#include "eval/eval.h"
#include "reprise.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- metrics ------------------------------------------------------------- */

typedef enum rp_scan_metric {
    RP_SCAN_PPL = 0, /* perplexity of the text; lower is better */
    RP_SCAN_KLD =
        1, /* mean KL divergence from the identity plan's distributions; lower is better */
    RP_SCAN_PROBE = 2, /* mean log-probability of the probe answers (nats); higher is better */
} rp_scan_metric;

const char *rp_scan_metric_name(rp_scan_metric m); /* "ppl", "kld", "probe" */
int rp_scan_metric_from_name(const char *name);    /* -1 if unknown */
/* +1 when a larger value is better (probe), -1 when a smaller one is. */
int rp_scan_metric_sign(rp_scan_metric m);

/* ---- workload ------------------------------------------------------------ */

/* One decoded sequence: tokens tok[0..n_dec) are decoded; row r (score_from
 * <= r < n_dec) is scored by the token that follows it, tok[r+1]. */
typedef struct rp_scan_seq {
    size_t tok;    /* offset of its tokens in rp_scan_set.tok (n_dec + 1 of them) */
    size_t row;    /* offset of its first decoded token among all decoded tokens */
    size_t scored; /* offset of its first scored row among all scored rows */
    int n_dec;
    int score_from;
    int item; /* probe item it belongs to, -1 for text */
} rp_scan_seq;

/* One probe: a prompt with a free answer (n_choices 0, one sequence), or a
 * multiple-choice question (one sequence per choice, answer = the right one). */
typedef struct rp_scan_item {
    int first_seq;
    int n_choices;
    int answer;
    int line; /* line of the probe file */
} rp_scan_item;

typedef struct rp_scan_set {
    int32_t *tok;
    size_t n_tok;
    rp_scan_seq *seq;
    int n_seq;
    size_t n_rows;   /* decoded tokens in all (rows of the prefix hidden states) */
    size_t n_scored; /* scored rows in all */
    int max_dec;     /* the longest sequence's n_dec (the contexts' n_ctx) */
    int *group; /* [n_group + 1]: group g decodes sequences group[g] .. group[g+1]-1 together */
    int n_group;
    int max_group; /* most sequences in one group (the contexts' n_seq_max) */
    rp_scan_item *items;
    int n_items, n_choice_items;
} rp_scan_set;

/* The chunks of a tokenized text as the perplexity evaluation cuts them
 * (BOS replacing each chunk's first token where the vocabulary adds one,
 * second half scored), n_batch / c chunks decoded together (at least one). */
rp_status rp_scan_set_text(rp_scan_set *set, const int32_t *tokens, const rp_eval_windows *w,
                           int n_batch);

/* A probe file: JSON Lines, one object per line (blank lines skipped):
 *   {"prompt": "...", "answer": "..."}                      free answer
 *   {"prompt": "...", "choices": ["...", ...], "answer": K}  K: index or the choice's text
 * The prompt is tokenized with BOS where the vocabulary adds one; prompt and
 * answer are tokenized together, and the answer's tokens are those after the
 * longest prefix shared with the prompt alone. Errors name the line. Groups
 * pack sequences up to n_batch tokens per decode. */
rp_status rp_scan_set_probes(rp_scan_set *set, const rp_model *model, const char *text, size_t len,
                             const char *name, int n_batch);
void rp_scan_set_free(rp_scan_set *set);

/* ---- blocks -------------------------------------------------------------- */

typedef struct rp_scan_block {
    int i, j; /* source layers [i, j) run twice */
} rp_scan_block;

/* Every block with start <= i < j <= end and j - i <= max_extra (0: no
 * limit), ordered by j, then i (the order in which prefixes are reused).
 * Refuses a range outside 0..n_layer or one holding no block. *out is
 * malloc'ed. */
rp_status rp_scan_blocks(int n_layer, int start, int end, int max_extra, rp_scan_block **out,
                         int *n);

/* ---- evaluation ---------------------------------------------------------- */

#define RP_SCAN_KLD_MEM_MAX ((size_t)256 << 20)

typedef struct rp_scan_params {
    rp_scan_metric metric;
    int n_threads; /* 0: physical cores */
    int type_k, type_v;
    int n_batch; /* tokens per micro-batch; 0 = 512 */
    bool reuse;  /* prefix reuse (falls back to whole plans where the architecture cannot) */
    /* kld: the identity's encoded distributions stay in memory up to this many
     * bytes (0: RP_SCAN_KLD_MEM_MAX), beyond it in an unlinked temporary file
     * under $TMPDIR (or /tmp) */
    size_t kld_mem_max;
    /* Called between decode calls with the fraction of the current
     * evaluation done; returning false cancels it (RP_ERR_CANCELLED). */
    rp_progress_fn progress;
    void *progress_user;
} rp_scan_params;

typedef struct rp_scan_result {
    double value;    /* ppl: perplexity; kld: mean KLD; probe: mean answer log-probability */
    double unc;      /* its uncertainty as the eval core estimates it (0 for probe) */
    double delta;    /* value minus the identity plan's value */
    double accuracy; /* probe: fraction of multiple-choice items whose answer scores highest; -1:
                        none */
    double seconds; /* wall time of the evaluation (a block that advanced the prefix includes it) */
} rp_scan_result;

typedef struct rp_scan rp_scan;

/* Checks the workload against the model (vocabulary, training context) and
 * the parameters; allocates nothing large yet. The model and set must outlive
 * the scan. */
rp_status rp_scan_new(const rp_model *model, const rp_scan_set *set, const rp_scan_params *p,
                      rp_scan **out);
/* Evaluates the identity plan (first: every block is measured against it). */
rp_status rp_scan_identity(rp_scan *s, rp_scan_result *r);
/* Evaluates block (i,j) ("--repeat-layers i,j"). */
rp_status rp_scan_block_eval(rp_scan *s, int i, int j, rp_scan_result *r);
/* Whether blocks run from the saved prefix (false: reuse off, or an
 * architecture whose forward runs whole plans only). */
bool rp_scan_reusing(const rp_scan *s);
/* Bytes of memory held for the prefix hidden states and the identity's
 * distributions. */
uint64_t rp_scan_bytes(const rp_scan *s);
/* Plan steps run per decoded token so far, all evaluations together (the
 * work the reuse saves shows here). */
uint64_t rp_scan_steps_run(const rp_scan *s);
void rp_scan_free(rp_scan *s);

/* ---- CSV ------------------------------------------------------------------
 *   # reprise scan 1
 *   # key: value                 (settings; see docs/scan.md)
 *   i,j,extra,metric,value,delta,seconds
 *   3,5,2,ppl,54.1234,-0.1646,0.412 */

#define RP_SCAN_CSV_MAGIC  "# reprise scan 1"
#define RP_SCAN_CSV_HEADER "i,j,extra,metric,value,delta,seconds"

typedef struct rp_scan_row {
    int i, j, extra;
    double value, delta, seconds;
} rp_scan_row;

typedef struct rp_scan_csv {
    char **key, **val; /* [n_meta] settings in file order */
    bool *check;       /* [n_meta] must match when a file is resumed */
    int n_meta;
    char *metric; /* the metric column (== the "metric" setting) */
    rp_scan_row *rows;
    int n_rows, cap_rows;
} rp_scan_csv;

/* Adds or replaces a setting; check: a resumed file must have the same value. */
rp_status rp_scan_csv_set(rp_scan_csv *csv, const char *key, bool check, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *rp_scan_csv_get(const rp_scan_csv *csv, const char *key);
rp_status rp_scan_csv_add(rp_scan_csv *csv, const rp_scan_row *row);
const rp_scan_row *rp_scan_csv_find(const rp_scan_csv *csv, int i, int j);
/* Reads a scan CSV (errors name the file and line; a block given twice is an
 * error). */
rp_status rp_scan_csv_read(const char *path, rp_scan_csv *csv);
/* Refuses a file (read from path) whose checked settings differ from want's,
 * naming the setting and both values. */
rp_status rp_scan_csv_check(const rp_scan_csv *file, const rp_scan_csv *want, const char *path);
/* Writes the whole file atomically (a reader never sees half a row). */
rp_status rp_scan_csv_write(const char *path, const rp_scan_csv *csv);
void rp_scan_csv_free(rp_scan_csv *csv);

/* Best block per extra-layer count (the Pareto list). best[k] for k =
 * 1..max_extra is the index into rows of the best block with k extra layers,
 * -1 where none; on_front[k] marks those better than every block with fewer
 * extra layers (and than the identity). sign: rp_scan_metric_sign. */
void rp_scan_pareto(const rp_scan_row *rows, int n, int sign, int max_extra, int *best,
                    bool *on_front);

#endif
