/* Evaluation of a model on a text: perplexity and KL divergence against a base
 * model's saved log-probabilities, by llama.cpp's method (tools/perplexity):
 *
 *   - the whole text is tokenized once (BOS first where the vocabulary adds one);
 *   - it is cut into chunks of c tokens; chunk i is tokens [i*c, (i+1)*c);
 *   - where the vocabulary adds BOS, the first token of every chunk is replaced
 *     by BOS (the text's own token there is never predicted);
 *   - only the second half of each chunk is scored: the logits at positions
 *     first = c/2 .. c-2 predict the tokens at first+1 .. c-1, so a chunk
 *     scores n_score = c - 1 - c/2 tokens, each with at least c/2 of context.
 *
 * The decoding driver hands each chunk's scored rows to a consumer in chunk
 * order; the accumulators (PPL, KLD) and the base-file reader/writer are
 * independent of it, so a caller can evaluate many plans on one loaded model
 * and one tokenized text. The base-file format is specified in
 * docs/kld-format.md. */
#ifndef RP_EVAL_H
#define RP_EVAL_H

#include "reprise.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- windows ------------------------------------------------------------- */

#define RP_EVAL_MIN_CTX 4 /* the smallest c: every chunk scores at least one token */

typedef struct rp_eval_windows {
    int n_ctx;    /* c: tokens per chunk */
    int n_chunk;  /* chunks evaluated */
    int first;    /* c/2: first position whose logits are scored */
    int n_score;  /* c - 1 - first: tokens scored per chunk */
    bool add_bos; /* the first token of each chunk is replaced by bos */
    int32_t bos;  /* BOS id, or -1 */
    int32_t n_vocab;
} rp_eval_windows;

/* Windows of a tokenized text of n_tokens for chunks of c tokens, at most
 * max_chunks of them (<= 0: all that fit, n_tokens / c). Refuses c below
 * RP_EVAL_MIN_CTX, c above the model's training context, and a text of fewer
 * than 2*c tokens (llama.cpp's rule: two chunks' worth). */
rp_status rp_eval_windows_init(rp_eval_windows *w, const rp_model *model, size_t n_tokens, int c,
                               int max_chunks);

/* Tokenizes a whole text for evaluation: BOS first where the vocabulary adds
 * one, control-token text treated as plain text, and no trailing EOS. *out is
 * malloc'ed. */
rp_status rp_eval_tokenize(const rp_model *model, const char *text, size_t len, int32_t **out,
                           size_t *n_out);

/* Identity of a text: its length and XXH64 (seed 0) of its bytes. */
uint64_t rp_eval_text_hash(const char *text, size_t len);

/* ---- decoding driver ----------------------------------------------------- */

/* One chunk's scored rows: logits[j] (n_vocab floats) is the model's output at
 * position first + j and predicts target[j] (the text's token at first+j+1). */
typedef struct rp_eval_chunk {
    int index; /* 0-based chunk number */
    int n_score;
    const float *const *logits; /* [n_score] rows, valid during the callback */
    const int32_t *target;      /* [n_score] */
    int n_tokens_decoded;       /* tokens decoded for the group this chunk belonged to */
} rp_eval_chunk;

/* Consumer of one chunk. A non-OK status stops the run and is returned by
 * rp_eval_run (RP_ERR_CANCELLED to cancel on user request). */
typedef rp_status (*rp_eval_chunk_fn)(const rp_eval_chunk *chunk, void *user);

/* Decodes every chunk of w on ctx and calls fn for each in chunk order.
 * tokens holds at least w->n_chunk * w->n_ctx ids. n_seq chunks are decoded
 * together in one rp_decode, each in its own sequence (ctx needs n_seq_max >=
 * n_seq and n_ctx >= c; rp_decode splits the batch into micro-batches of the
 * context's n_batch). The sequences used are cleared before each group. The
 * result does not depend on n_seq or the micro-batch size. */
rp_status rp_eval_run(rp_context *ctx, const int32_t *tokens, const rp_eval_windows *w, int n_seq,
                      rp_eval_chunk_fn fn, void *user);

/* ---- perplexity ---------------------------------------------------------- */

/* -log softmax(logits)[target] over n_vocab logits, as llama.cpp computes it
 * (float differences from the maximum, a double sum of their exponentials). */
double rp_eval_nll(const float *logits, int n_vocab, int32_t target);

typedef struct rp_ppl_acc {
    double sum_nll, sum_nll2;
    size_t count;
} rp_ppl_acc;

void rp_ppl_add(rp_ppl_acc *a, double nll);
/* exp(mean nll) */
double rp_ppl_value(const rp_ppl_acc *a);
/* llama.cpp's "+/-": PPL * sqrt((E[nll^2] - E[nll]^2) / (count - 1)); 0 when
 * undefined (count < 2 or no spread). */
double rp_ppl_uncertainty(const rp_ppl_acc *a);

/* ---- base log-probabilities (the --kl-divergence-base file) ----------------
 * One row per scored token: the exact log-probability of the token that
 * follows and the index of the most likely token, plus the whole distribution
 * as 16-bit codes on a linear log-probability scale from the top down to
 * RP_KLD_LP_RANGE below it (see docs/kld-format.md). */

#define RP_KLD_MAGIC       "RPBASELP"
#define RP_KLD_VERSION     1
#define RP_KLD_LP_RANGE    24.0f /* nats kept below the most likely token */
#define RP_KLD_HEADER_SIZE 256   /* bytes before the token ids */
#define RP_KLD_DESC_SIZE   128   /* bytes of the free-text description */

typedef struct rp_kld_header {
    uint32_t version;
    uint32_t n_ctx, n_vocab, n_chunk, first, n_score;
    bool add_bos;
    int32_t bos;
    uint64_t text_bytes, text_hash, tokens_hash;
    float lp_range;
    char desc[RP_KLD_DESC_SIZE + 1]; /* NUL-terminated */
} rp_kld_header;

/* One decoded row. */
typedef struct rp_kld_row {
    float lp_target; /* exact log p(next token) */
    int32_t top;     /* argmax of the distribution */
    float lp_top;    /* log p(top) */
    float scale;     /* nats per code step */
    const uint16_t
        *code; /* [n_vocab]: 0 = below lp_top - range; else lp_top - (65535 - code) * scale */
} rp_kld_row;

/* Bytes of one row in the file for a vocabulary of n_vocab. */
size_t rp_kld_row_bytes(int32_t n_vocab);

/* Encodes a row of logits predicting target into buf (rp_kld_row_bytes). */
rp_status rp_kld_encode_row(const float *logits, int32_t n_vocab, int32_t target, void *buf);
/* Views an encoded row (validated: a corrupt row is an error, never used). */
rp_status rp_kld_decode_row(const void *buf, int32_t n_vocab, rp_kld_row *row);

typedef struct rp_kld_writer rp_kld_writer;
/* Creates path atomically (nothing is left behind unless committed). desc: a
 * free-text description of the base (model and plan), truncated to fit. */
rp_status rp_kld_writer_open(const char *path, const rp_eval_windows *w, const int32_t *tokens,
                             uint64_t text_bytes, uint64_t text_hash, const char *desc,
                             rp_kld_writer **out);
/* Appends one chunk's rows (chunks in order, n_score rows each). */
rp_status rp_kld_writer_add(rp_kld_writer *wr, const rp_eval_chunk *chunk);
/* Renames the file into place once every chunk was written. */
rp_status rp_kld_writer_commit(rp_kld_writer *wr);
/* Discards an unfinished file; frees wr (also after commit). NULL is fine. */
void rp_kld_writer_free(rp_kld_writer *wr);

typedef struct rp_kld_reader rp_kld_reader;
/* Opens and validates a base file: magic, version, geometry, the file size and
 * the token ids. Errors name the file and what is wrong. */
rp_status rp_kld_reader_open(const char *path, rp_kld_reader **out);
const rp_kld_header *rp_kld_reader_header(const rp_kld_reader *r);
/* [n_chunk * n_ctx] token ids of the windows. */
const int32_t *rp_kld_reader_tokens(const rp_kld_reader *r);
/* Reads chunk `index`'s rows (chunks in order from 0); rows[j] stays valid
 * until the next call. */
rp_status rp_kld_reader_chunk(rp_kld_reader *r, int index, const rp_kld_row **rows);
void rp_kld_reader_free(rp_kld_reader *r);

/* What the comparison run has, checked against a base header. Fields left at
 * their zero value are not checked (text_bytes 0 and text_hash 0: no text). */
typedef struct rp_kld_expect {
    int32_t n_vocab;
    int n_ctx;   /* 0: take the file's */
    int n_chunk; /* chunks wanted, 0: all of the file's */
    bool add_bos;
    int32_t bos;
    uint64_t text_bytes, text_hash;
    const int32_t *tokens; /* the comparison's tokenized text, NULL: not checked */
    size_t n_tokens;
} rp_kld_expect;

/* Refuses a base file whose header does not match, with the reason. */
rp_status rp_kld_check(const rp_kld_header *h, const int32_t *file_tokens, const rp_kld_expect *e);

/* ---- KL divergence --------------------------------------------------------- */

typedef struct rp_kld_acc {
    double sum_nll, sum_nll2;           /* the evaluated model */
    double sum_nll_base, sum_nll_base2; /* the base */
    double sum_nll_nll_base;
    double sum_kld, sum_kld2;
    double sum_p_diff, sum_p_diff2, sum_p_diff4;
    size_t n_same_top, count;
    float *kld;    /* [count] per-token KL divergence */
    float *p_diff; /* [count] p(target) - p_base(target) */
    size_t cap;
    float *scratch; /* [n_vocab] base log-probabilities of the current row */
    int32_t n_vocab;
} rp_kld_acc;

rp_status rp_kld_acc_init(rp_kld_acc *a, int32_t n_vocab);
void rp_kld_acc_free(rp_kld_acc *a);
/* Adds one token: the evaluated model's logits against the base row. Returns
 * the token's KLD in *kld (may be NULL). */
rp_status rp_kld_add(rp_kld_acc *a, const float *logits, const rp_kld_row *base, int32_t target,
                     double *kld);

/* A mean and its standard error as llama.cpp estimates them. */
typedef struct rp_mean_unc {
    double val, unc;
} rp_mean_unc;

/* Everything llama.cpp prints in its KL divergence report. */
typedef struct rp_kld_stats {
    size_t count;
    rp_mean_unc ppl, ppl_base, ln_ratio, ratio, diff;
    double cor; /* correlation of the two ln(PPL) estimates */
    rp_mean_unc kld;
    double kld_max, kld_min, kld_median;
    double kld_pct[8]; /* 99.9, 99, 95, 90, 10, 5, 1, 0.1 */
    rp_mean_unc p_diff;
    double p_diff_max, p_diff_min, p_diff_median;
    double p_diff_pct[10]; /* 99.9, 99, 95, 90, 75, 25, 10, 5, 1, 0.1 */
    rp_mean_unc p_diff_rms;
    rp_mean_unc same_top; /* fraction of tokens whose argmax agrees */
} rp_kld_stats;

extern const float rp_kld_pct_levels[8];
extern const float rp_p_diff_pct_levels[10];

/* The statistics so far. Means and uncertainties are cheap; with
 * percentiles, copies of the per-token values are sorted (the final report). */
rp_status rp_kld_stats_compute(const rp_kld_acc *a, bool percentiles, rp_kld_stats *st);
/* llama.cpp's percentile of sorted values: linear between neighbours. */
double rp_eval_percentile(const float *sorted, size_t n, float fraction);

#endif
