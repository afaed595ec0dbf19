/* Perplexity and KL divergence over a tokenized text (see eval.h for the
 * method, docs/kld-format.md for the base file). */
#include "eval/eval.h"
#include "core/model.h"
#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* The base file is little-endian and rows are read in place. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the base-logits format is little-endian");

/* ---- windows ------------------------------------------------------------- */

rp_status rp_eval_windows_init(rp_eval_windows *w, const rp_model *model, size_t n_tokens, int c,
                               int max_chunks) {
    memset(w, 0, sizeof *w);
    if (c < RP_EVAL_MIN_CTX)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "chunk size -c %d is too small: at least %d, so each chunk scores a token",
                       c, RP_EVAL_MIN_CTX);
    int n_train = rp_model_n_ctx_train(model);
    if (n_train > 0 && c > n_train)
        return rp_fail(
            RP_ERR_INVALID_ARG,
            "chunk size -c %d is larger than the context the model was trained on (%d tokens)", c,
            n_train);
    if (n_tokens < 2 * (size_t)c)
        return rp_fail(
            RP_ERR_INVALID_ARG,
            "the text has %zu tokens; perplexity with -c %d needs at least %zu (two chunks' worth)",
            n_tokens, c, 2 * (size_t)c);
    size_t n_max = n_tokens / (size_t)c;
    if (n_max > INT32_MAX) n_max = INT32_MAX;
    const rp_vocab *v = rp_model_vocab(model);
    w->n_ctx = c;
    w->n_chunk = max_chunks > 0 && (size_t)max_chunks < n_max ? max_chunks : (int)n_max;
    w->first = c / 2;
    w->n_score = c - 1 - w->first;
    w->add_bos = rp_vocab_add_bos(v) && rp_vocab_bos(v) >= 0;
    w->bos = rp_vocab_bos(v);
    w->n_vocab = model->hp.n_vocab;
    return RP_OK;
}

rp_status rp_eval_tokenize(const rp_model *model, const char *text, size_t len, int32_t **out,
                           size_t *n_out) {
    const rp_vocab *v = rp_model_vocab(model);
    rp_status s = rp_tokenize(v, text, len, true, false, out, n_out);
    if (s) return rp_fail_prefix(s, "tokenizing the text");
    /* A vocabulary that appends EOS would put it at the very end of the text,
     * where nothing follows it: drop it rather than score it. */
    if (rp_vocab_add_eos(v) && *n_out > 0 && (*out)[*n_out - 1] == rp_vocab_eos(v)) (*n_out)--;
    return RP_OK;
}

uint64_t rp_eval_text_hash(const char *text, size_t len) {
    return (uint64_t)XXH64(text, len, 0);
}

/* ---- decoding driver ----------------------------------------------------- */

rp_status rp_eval_run(rp_context *ctx, const int32_t *tokens, const rp_eval_windows *w, int n_seq,
                      rp_eval_chunk_fn fn, void *user) {
    const int c = w->n_ctx;
    if (c < RP_EVAL_MIN_CTX || w->n_chunk < 1 || w->first != c / 2 || w->n_score != c - 1 - c / 2)
        return rp_fail(RP_ERR_INVALID_ARG, "evaluation windows are not initialised");
    if (rp_n_vocab(ctx) != w->n_vocab)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "evaluation windows are for %d tokens of vocabulary; the model has %d",
                       w->n_vocab, rp_n_vocab(ctx));
    if (n_seq < 1) n_seq = 1;
    if (n_seq > w->n_chunk) n_seq = w->n_chunk;
    if ((uint32_t)n_seq > rp_context_n_seq(ctx))
        return rp_fail(RP_ERR_INVALID_ARG,
                       "%d chunks per batch need %d sequences; the context has %u", n_seq, n_seq,
                       rp_context_n_seq(ctx));
    /* The whole chunk is decoded, as llama-perplexity does: its last token
     * predicts nothing in the chunk, but the token count of a product picks
     * llama.cpp's batch order for some weights (rp_matmul_batch_tokens: a
     * Q4_K product of c - 1 tokens takes its gemv order on the last
     * (c - 1) % 4), so c - 1 tokens would not give llama.cpp's logits. */
    const int n_dec = c;
    if ((uint32_t)n_dec > rp_context_n_ctx(ctx))
        return rp_fail(RP_ERR_INVALID_ARG,
                       "chunks of %d tokens need a context of %d positions; it has %u", c, n_dec,
                       rp_context_n_ctx(ctx));
    const size_t cap = (size_t)n_seq * (size_t)n_dec;
    int32_t *tok = rp_malloc(cap * sizeof *tok, "evaluation batch");
    int32_t *pos = rp_malloc(cap * sizeof *pos, "evaluation batch");
    int32_t *seq = rp_malloc(cap * sizeof *seq, "evaluation batch");
    int8_t *want = rp_malloc(cap, "evaluation batch");
    const float **rows = rp_malloc((size_t)w->n_score * sizeof *rows, "evaluation rows");
    rp_status s = RP_OK;
    if (!tok || !pos || !seq || !want || !rows) {
        s = RP_ERR_NOMEM;
        goto done;
    }
    for (int i0 = 0; i0 < w->n_chunk; i0 += n_seq) {
        const int g = RP_MIN(n_seq, w->n_chunk - i0);
        for (int q = 0; q < g; q++)
            if ((s = rp_kv_seq_truncate(ctx, q, 0))) goto done;
        size_t k = 0;
        for (int q = 0; q < g; q++) {
            const int32_t *src = tokens + (size_t)(i0 + q) * (size_t)c;
            for (int p = 0; p < n_dec; p++, k++) {
                tok[k] = p == 0 && w->add_bos ? w->bos : src[p];
                pos[k] = p;
                seq[k] = q;
                want[k] = p >= w->first;
            }
        }
        rp_batch b = {
            .n_tokens = (int32_t)k, .token = tok, .pos = pos, .seq_id = seq, .logits = want};
        if ((s = rp_decode(ctx, &b))) {
            rp_fail_prefix(s, "chunk %d", i0 + 1);
            goto done;
        }
        for (int q = 0; q < g; q++) {
            for (int j = 0; j < w->n_score; j++) {
                rows[j] = rp_get_logits(ctx, q * n_dec + w->first + j);
                RP_ASSERT(rows[j] != NULL);
            }
            rp_eval_chunk ch = {
                .index = i0 + q,
                .n_score = w->n_score,
                .logits = rows,
                .target = tokens + (size_t)(i0 + q) * (size_t)c + (size_t)w->first + 1,
                .n_tokens_decoded = (int)k,
            };
            if ((s = fn(&ch, user))) goto done;
        }
    }
done:
    free(tok);
    free(pos);
    free(seq);
    free(want);
    free(rows);
    return s;
}

/* ---- perplexity ---------------------------------------------------------- */

static float row_max(const float *x, int n, int *imax) {
    float m = x[0];
    int k = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > m) {
            m = x[i];
            k = i;
        }
    if (imax) *imax = k;
    return m;
}

static double row_log_sum_exp(const float *x, int n, float max) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += expf(x[i] - max);
    return log(sum);
}

double rp_eval_nll(const float *logits, int n_vocab, int32_t target) {
    const float max = row_max(logits, n_vocab, NULL);
    return -((double)(logits[target] - max) - row_log_sum_exp(logits, n_vocab, max));
}

void rp_ppl_add(rp_ppl_acc *a, double nll) {
    a->sum_nll += nll;
    a->sum_nll2 += nll * nll;
    a->count++;
}

double rp_ppl_value(const rp_ppl_acc *a) {
    return a->count ? exp(a->sum_nll / (double)a->count) : 0.0;
}

double rp_ppl_uncertainty(const rp_ppl_acc *a) {
    if (a->count < 2) return 0.0;
    const double n = (double)a->count;
    const double mean = a->sum_nll / n;
    const double var = a->sum_nll2 / n - mean * mean;
    return var > 0 ? exp(mean) * sqrt(var / (n - 1)) : 0.0;
}

/* ---- base rows ------------------------------------------------------------- */

#define ROW_HEAD   16 /* f32 lp_target, i32 top, f32 lp_top, f32 scale */
#define CODE_TOP   65535u
#define CODE_STEPS 65534.0 /* codes 1..65535 span [lp_top - range', lp_top] */

size_t rp_kld_row_bytes(int32_t n_vocab) {
    return ROW_HEAD + 2 * ((size_t)n_vocab + ((size_t)n_vocab & 1));
}

rp_status rp_kld_encode_row(const float *logits, int32_t n_vocab, int32_t target, void *buf) {
    if (n_vocab < 1 || target < 0 || target >= n_vocab)
        return rp_fail(RP_ERR_INVALID_ARG, "encoding a row: target %d outside the vocabulary of %d",
                       target, n_vocab);
    int top;
    const float max = row_max(logits, n_vocab, &top);
    float min = max;
    for (int i = 0; i < n_vocab; i++) {
        if (!isfinite(logits[i]))
            return rp_fail(RP_ERR_INVALID_ARG, "logit %d is not a finite number (%g)", i,
                           (double)logits[i]);
        if (logits[i] < min) min = logits[i];
    }
    const double lse = row_log_sum_exp(logits, n_vocab, max);
    const double lp_top = -lse;
    const double lp_floor = RP_MAX((double)(min - max) - lse, lp_top - (double)RP_KLD_LP_RANGE);
    const float scale = (float)((lp_top - lp_floor) / CODE_STEPS);
    const float f_lp_target = (float)((double)(logits[target] - max) - lse);
    const float f_lp_top = (float)lp_top;
    int32_t top32 = top;
    unsigned char *p = buf;
    memcpy(p, &f_lp_target, 4);
    memcpy(p + 4, &top32, 4);
    memcpy(p + 8, &f_lp_top, 4);
    memcpy(p + 12, &scale, 4);
    uint16_t *code = (uint16_t *)(p + ROW_HEAD);
    const double inv = scale > 0 ? 1.0 / (double)scale : 0.0;
    for (int i = 0; i < n_vocab; i++) {
        const double lp = (double)(logits[i] - max) - lse;
        if (scale <= 0) {
            code[i] = CODE_TOP; /* a flat distribution: every token at the top */
            continue;
        }
        if (lp < lp_floor) {
            code[i] = 0;
            continue;
        }
        double steps = nearbyint((lp_top - lp) * inv);
        if (steps > CODE_STEPS) steps = CODE_STEPS;
        if (steps < 0) steps = 0;
        code[i] = (uint16_t)(CODE_TOP - (unsigned)steps);
    }
    if (n_vocab & 1) code[n_vocab] = 0;
    return RP_OK;
}

rp_status rp_kld_decode_row(const void *buf, int32_t n_vocab, rp_kld_row *row) {
    const unsigned char *p = buf;
    memcpy(&row->lp_target, p, 4);
    memcpy(&row->top, p + 4, 4);
    memcpy(&row->lp_top, p + 8, 4);
    memcpy(&row->scale, p + 12, 4);
    row->code = (const uint16_t *)(p + ROW_HEAD);
    /* log-probabilities are <= 0; allow float rounding just above */
    if (!isfinite(row->lp_target) || row->lp_target > 1e-3f)
        return rp_fail(RP_ERR_FORMAT, "log-probability of the next token is %g",
                       (double)row->lp_target);
    if (!isfinite(row->lp_top) || row->lp_top > 1e-3f || row->lp_top < row->lp_target - 1e-3f)
        return rp_fail(RP_ERR_FORMAT, "log-probability of the top token is %g",
                       (double)row->lp_top);
    if (row->top < 0 || row->top >= n_vocab)
        return rp_fail(RP_ERR_FORMAT, "top token %d outside the vocabulary of %d", row->top,
                       n_vocab);
    if (!isfinite(row->scale) || row->scale < 0 || row->scale * CODE_STEPS > 1e4)
        return rp_fail(RP_ERR_FORMAT, "code step %g is out of range", (double)row->scale);
    return RP_OK;
}

/* ---- base file ------------------------------------------------------------- */

static void put_u32(unsigned char *p, uint32_t v) {
    memcpy(p, &v, 4);
}
static void put_u64(unsigned char *p, uint64_t v) {
    memcpy(p, &v, 8);
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Header offsets (docs/kld-format.md). */
enum {
    H_MAGIC = 0,
    H_VERSION = 8,
    H_HEADER_SIZE = 12,
    H_N_CTX = 16,
    H_N_VOCAB = 20,
    H_N_CHUNK = 24,
    H_FIRST = 28,
    H_N_SCORE = 32,
    H_FLAGS = 36,
    H_BOS = 40,
    H_LP_RANGE = 44,
    H_TEXT_BYTES = 48,
    H_TEXT_HASH = 56,
    H_TOKENS_HASH = 64,
    H_ROW_BYTES = 72,
    H_DESC = 80,
};
#define FLAG_ADD_BOS 1u
#define MAX_CTX      (1u << 24)
#define MAX_VOCAB    (1u << 26)

struct rp_kld_writer {
    rp_atomic_file af;
    rp_eval_windows w;
    int next_chunk;
    size_t row_bytes;
    unsigned char *buf; /* one row */
    bool committed;
};

rp_status rp_kld_writer_open(const char *path, const rp_eval_windows *w, const int32_t *tokens,
                             uint64_t text_bytes, uint64_t text_hash, const char *desc,
                             rp_kld_writer **out) {
    *out = NULL;
    if (w->n_ctx < RP_EVAL_MIN_CTX || w->n_chunk < 1 || w->n_vocab < 1)
        return rp_fail(RP_ERR_INVALID_ARG, "base file: evaluation windows are not initialised");
    rp_kld_writer *wr = rp_calloc(1, sizeof *wr, "base file writer");
    if (!wr) return RP_ERR_NOMEM;
    wr->w = *w;
    wr->row_bytes = rp_kld_row_bytes(w->n_vocab);
    wr->buf = rp_malloc(wr->row_bytes, "base file row");
    if (!wr->buf) {
        free(wr);
        return RP_ERR_NOMEM;
    }
    rp_status s = rp_atomic_open(&wr->af, path);
    if (s) {
        free(wr->buf);
        free(wr);
        return s;
    }
    const size_t n_tok = (size_t)w->n_chunk * (size_t)w->n_ctx;
    unsigned char h[RP_KLD_HEADER_SIZE] = {0};
    memcpy(h + H_MAGIC, RP_KLD_MAGIC, 8);
    put_u32(h + H_VERSION, RP_KLD_VERSION);
    put_u32(h + H_HEADER_SIZE, RP_KLD_HEADER_SIZE);
    put_u32(h + H_N_CTX, (uint32_t)w->n_ctx);
    put_u32(h + H_N_VOCAB, (uint32_t)w->n_vocab);
    put_u32(h + H_N_CHUNK, (uint32_t)w->n_chunk);
    put_u32(h + H_FIRST, (uint32_t)w->first);
    put_u32(h + H_N_SCORE, (uint32_t)w->n_score);
    put_u32(h + H_FLAGS, w->add_bos ? FLAG_ADD_BOS : 0);
    put_u32(h + H_BOS, (uint32_t)w->bos);
    const float range = RP_KLD_LP_RANGE;
    memcpy(h + H_LP_RANGE, &range, 4);
    put_u64(h + H_TEXT_BYTES, text_bytes);
    put_u64(h + H_TEXT_HASH, text_hash);
    put_u64(h + H_TOKENS_HASH, (uint64_t)XXH64(tokens, n_tok * sizeof *tokens, 0));
    put_u32(h + H_ROW_BYTES, (uint32_t)wr->row_bytes);
    if (desc) {
        size_t n = strlen(desc);
        memcpy(h + H_DESC, desc, RP_MIN(n, (size_t)RP_KLD_DESC_SIZE - 1));
    }
    if (!rp_atomic_write(&wr->af, h, sizeof h) ||
        !rp_atomic_write(&wr->af, tokens, n_tok * sizeof *tokens)) {
        s = RP_ERR_IO;
        rp_kld_writer_free(wr);
        return s;
    }
    *out = wr;
    return RP_OK;
}

rp_status rp_kld_writer_add(rp_kld_writer *wr, const rp_eval_chunk *ch) {
    if (ch->index != wr->next_chunk || ch->n_score != wr->w.n_score || ch->index >= wr->w.n_chunk)
        return rp_fail(RP_ERR_INVALID_ARG, "base file: chunk %d given, chunk %d of %d expected",
                       ch->index + 1, wr->next_chunk + 1, wr->w.n_chunk);
    for (int j = 0; j < ch->n_score; j++) {
        rp_status s = rp_kld_encode_row(ch->logits[j], wr->w.n_vocab, ch->target[j], wr->buf);
        if (s) return rp_fail_prefix(s, "base file: chunk %d, row %d", ch->index + 1, j);
        if (!rp_atomic_write(&wr->af, wr->buf, wr->row_bytes)) return RP_ERR_IO;
    }
    wr->next_chunk++;
    return RP_OK;
}

rp_status rp_kld_writer_commit(rp_kld_writer *wr) {
    if (wr->next_chunk != wr->w.n_chunk)
        return rp_fail(RP_ERR_INVALID_ARG, "base file: %d of %d chunks written", wr->next_chunk,
                       wr->w.n_chunk);
    rp_status s = rp_atomic_commit(&wr->af);
    wr->committed = s == RP_OK;
    return s;
}

void rp_kld_writer_free(rp_kld_writer *wr) {
    if (!wr) return;
    if (!wr->committed && wr->af.path) rp_atomic_abort(&wr->af);
    free(wr->buf);
    free(wr);
}

struct rp_kld_reader {
    FILE *fp;
    char *path;
    rp_kld_header h;
    int32_t *tokens;
    size_t row_bytes;
    unsigned char *buf; /* one chunk of rows */
    rp_kld_row *rows;   /* [n_score] */
};

void rp_kld_reader_free(rp_kld_reader *r) {
    if (!r) return;
    if (r->fp) fclose(r->fp);
    free(r->path);
    free(r->tokens);
    free(r->buf);
    free(r->rows);
    free(r);
}

/* Checks the header fields; the message names the field. */
static rp_status parse_header(const unsigned char *h, uint64_t file_size, rp_kld_header *o) {
    if (memcmp(h + H_MAGIC, "_logits_", 8) == 0)
        return rp_fail(
            RP_ERR_UNSUPPORTED,
            "this is a llama.cpp --kl-divergence-base file; reprise writes and reads its own "
            "format (docs/kld-format.md): make the base with reprise perplexity "
            "--kl-divergence-base");
    if (memcmp(h + H_MAGIC, RP_KLD_MAGIC, 8) != 0)
        return rp_fail(RP_ERR_FORMAT,
                       "not a reprise base log-probability file (no '%s' magic at byte 0)",
                       RP_KLD_MAGIC);
    memset(o, 0, sizeof *o);
    o->version = get_u32(h + H_VERSION);
    if (o->version != RP_KLD_VERSION)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "format version %u (byte 8); this reprise reads version %d", o->version,
                       RP_KLD_VERSION);
    uint32_t hs = get_u32(h + H_HEADER_SIZE);
    if (hs != RP_KLD_HEADER_SIZE)
        return rp_fail(RP_ERR_FORMAT, "header size %u (byte 12), expected %d", hs,
                       RP_KLD_HEADER_SIZE);
    o->n_ctx = get_u32(h + H_N_CTX);
    o->n_vocab = get_u32(h + H_N_VOCAB);
    o->n_chunk = get_u32(h + H_N_CHUNK);
    o->first = get_u32(h + H_FIRST);
    o->n_score = get_u32(h + H_N_SCORE);
    if (o->n_ctx < RP_EVAL_MIN_CTX || o->n_ctx > MAX_CTX)
        return rp_fail(RP_ERR_FORMAT, "chunk size %u (byte 16) out of range [%d, %u]", o->n_ctx,
                       RP_EVAL_MIN_CTX, MAX_CTX);
    if (o->n_vocab < 1 || o->n_vocab > MAX_VOCAB)
        return rp_fail(RP_ERR_FORMAT, "vocabulary size %u (byte 20) out of range [1, %u]",
                       o->n_vocab, MAX_VOCAB);
    if (o->n_chunk < 1 || o->n_chunk > INT32_MAX)
        return rp_fail(RP_ERR_FORMAT, "chunk count %u (byte 24) out of range", o->n_chunk);
    if (o->first != o->n_ctx / 2 || o->n_score != o->n_ctx - 1 - o->first)
        return rp_fail(RP_ERR_FORMAT,
                       "scored window %u + %u (bytes 28, 32) does not match chunk size %u",
                       o->first, o->n_score, o->n_ctx);
    uint32_t flags = get_u32(h + H_FLAGS);
    if (flags & ~FLAG_ADD_BOS) return rp_fail(RP_ERR_FORMAT, "unknown flags 0x%x (byte 36)", flags);
    o->add_bos = flags & FLAG_ADD_BOS;
    o->bos = (int32_t)get_u32(h + H_BOS);
    if (o->bos < -1 || o->bos >= (int32_t)o->n_vocab || (o->add_bos && o->bos < 0))
        return rp_fail(RP_ERR_FORMAT, "BOS id %d (byte 40) outside the vocabulary", o->bos);
    memcpy(&o->lp_range, h + H_LP_RANGE, 4);
    if (!isfinite(o->lp_range) || o->lp_range <= 0)
        return rp_fail(RP_ERR_FORMAT, "log-probability range %g (byte 44) is not positive",
                       (double)o->lp_range);
    o->text_bytes = get_u64(h + H_TEXT_BYTES);
    o->text_hash = get_u64(h + H_TEXT_HASH);
    o->tokens_hash = get_u64(h + H_TOKENS_HASH);
    uint32_t rb = get_u32(h + H_ROW_BYTES);
    if (rb != rp_kld_row_bytes((int32_t)o->n_vocab))
        return rp_fail(RP_ERR_FORMAT,
                       "row size %u (byte 72) does not match the vocabulary of %u (expected %zu)",
                       rb, o->n_vocab, rp_kld_row_bytes((int32_t)o->n_vocab));
    memcpy(o->desc, h + H_DESC, RP_KLD_DESC_SIZE);
    o->desc[RP_KLD_DESC_SIZE] = 0;
    /* the size is exact: header, tokens, rows */
    uint64_t n_tok, n_rows, rows_bytes, want;
    if (!rp_mul_u64(o->n_chunk, o->n_ctx, &n_tok) || !rp_mul_u64(o->n_chunk, o->n_score, &n_rows) ||
        !rp_mul_u64(n_rows, rb, &rows_bytes) || !rp_mul_u64(n_tok, 4, &want) ||
        !rp_add_u64(want, RP_KLD_HEADER_SIZE, &want) || !rp_add_u64(want, rows_bytes, &want))
        return rp_fail(RP_ERR_FORMAT, "header sizes overflow");
    if (want != file_size)
        return rp_fail(
            RP_ERR_FORMAT,
            "the file is %llu bytes; its header (%u chunks of %u, vocabulary %u) needs %llu%s",
            (unsigned long long)file_size, o->n_chunk, o->n_ctx, o->n_vocab,
            (unsigned long long)want, file_size < want ? " (truncated?)" : "");
    return RP_OK;
}

rp_status rp_kld_reader_open(const char *path, rp_kld_reader **out) {
    *out = NULL;
    rp_kld_reader *r = rp_calloc(1, sizeof *r, "base file reader");
    if (!r) return RP_ERR_NOMEM;
    rp_status s = RP_OK;
    r->path = rp_strdup(path);
    struct stat st;
    int fd = r->path ? rp_open_regular(path, &st) : -1;
    r->fp = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!r->path || !r->fp) {
        s = !r->path ? RP_ERR_NOMEM
            : fd < 0 ? RP_ERR_IO
                     : rp_fail(RP_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        rp_kld_reader_free(r);
        return s;
    }
    unsigned char h[RP_KLD_HEADER_SIZE];
    if (fstat(fileno(r->fp), &st) != 0) {
        s = rp_fail(RP_ERR_IO, "cannot stat: %s", strerror(errno));
        goto fail;
    }
    if ((uint64_t)st.st_size < RP_KLD_HEADER_SIZE) {
        s = rp_fail(RP_ERR_FORMAT, "%lld bytes, shorter than the %d-byte header",
                    (long long)st.st_size, RP_KLD_HEADER_SIZE);
        goto fail;
    }
    if (fread(h, 1, sizeof h, r->fp) != sizeof h) {
        s = rp_fail(RP_ERR_IO, "reading the header failed");
        goto fail;
    }
    if ((s = parse_header(h, (uint64_t)st.st_size, &r->h))) goto fail;
    const size_t n_tok = (size_t)r->h.n_chunk * r->h.n_ctx;
    r->row_bytes = rp_kld_row_bytes((int32_t)r->h.n_vocab);
    size_t chunk_bytes;
    if (!rp_mul_size(r->row_bytes, r->h.n_score, &chunk_bytes)) {
        s = rp_fail(RP_ERR_FORMAT, "chunk size overflows");
        goto fail;
    }
    r->tokens = rp_malloc(n_tok * sizeof *r->tokens, "base file tokens");
    r->buf = rp_malloc(chunk_bytes ? chunk_bytes : 1, "base file rows");
    r->rows = rp_malloc(r->h.n_score * sizeof *r->rows, "base file rows");
    if (!r->tokens || !r->buf || !r->rows) {
        s = RP_ERR_NOMEM;
        goto fail;
    }
    if (fread(r->tokens, sizeof *r->tokens, n_tok, r->fp) != n_tok) {
        s = rp_fail(RP_ERR_IO, "reading the token ids failed");
        goto fail;
    }
    if ((uint64_t)XXH64(r->tokens, n_tok * sizeof *r->tokens, 0) != r->h.tokens_hash) {
        s = rp_fail(RP_ERR_FORMAT,
                    "the token ids (from byte %d) do not match their hash (byte 64): corrupt file",
                    RP_KLD_HEADER_SIZE);
        goto fail;
    }
    for (size_t i = 0; i < n_tok; i++)
        if (r->tokens[i] < 0 || (uint32_t)r->tokens[i] >= r->h.n_vocab) {
            s = rp_fail(RP_ERR_FORMAT,
                        "token %zu (byte %zu) has id %d, outside the vocabulary of %u", i,
                        RP_KLD_HEADER_SIZE + 4 * i, r->tokens[i], r->h.n_vocab);
            goto fail;
        }
    *out = r;
    return RP_OK;
fail:
    rp_fail_prefix(s, "base file '%s'", path);
    rp_kld_reader_free(r);
    return s;
}

const rp_kld_header *rp_kld_reader_header(const rp_kld_reader *r) {
    return &r->h;
}
const int32_t *rp_kld_reader_tokens(const rp_kld_reader *r) {
    return r->tokens;
}

rp_status rp_kld_reader_chunk(rp_kld_reader *r, int index, const rp_kld_row **rows) {
    *rows = NULL;
    if (index < 0 || (uint32_t)index >= r->h.n_chunk)
        return rp_fail(RP_ERR_INVALID_ARG, "base file '%s' holds %u chunks; chunk %d asked",
                       r->path, r->h.n_chunk, index + 1);
    const size_t chunk_bytes = r->row_bytes * r->h.n_score;
    const uint64_t off = RP_KLD_HEADER_SIZE + (uint64_t)r->h.n_chunk * r->h.n_ctx * 4 +
                         (uint64_t)index * chunk_bytes;
    if (fseeko(r->fp, (off_t)off, SEEK_SET) != 0 ||
        fread(r->buf, 1, chunk_bytes, r->fp) != chunk_bytes)
        return rp_fail(RP_ERR_IO, "base file '%s': reading chunk %d (byte %llu) failed", r->path,
                       index + 1, (unsigned long long)off);
    for (uint32_t j = 0; j < r->h.n_score; j++) {
        rp_status s = rp_kld_decode_row(r->buf + (size_t)j * r->row_bytes, (int32_t)r->h.n_vocab,
                                        &r->rows[j]);
        if (s)
            return rp_fail_prefix(s, "base file '%s': chunk %d, row %u (byte %llu)", r->path,
                                  index + 1, j,
                                  (unsigned long long)(off + (uint64_t)j * r->row_bytes));
    }
    *rows = r->rows;
    return RP_OK;
}

rp_status rp_kld_check(const rp_kld_header *h, const int32_t *file_tokens, const rp_kld_expect *e) {
    if ((uint32_t)e->n_vocab != h->n_vocab)
        return rp_fail(
            RP_ERR_INVALID_ARG,
            "the base file is for a vocabulary of %u tokens; this model has %d (another tokenizer)",
            h->n_vocab, e->n_vocab);
    if (e->n_ctx && (uint32_t)e->n_ctx != h->n_ctx)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "the base file was made with -c %u; this run asks for -c %d (leave -c out "
                       "to use the file's)",
                       h->n_ctx, e->n_ctx);
    if (e->n_chunk < 0 || (uint32_t)e->n_chunk > h->n_chunk)
        return rp_fail(RP_ERR_INVALID_ARG, "the base file holds %u chunks; %d asked (--chunks)",
                       h->n_chunk, e->n_chunk);
    if (e->add_bos != h->add_bos || (h->add_bos && e->bos != h->bos)) {
        if (h->add_bos && e->add_bos)
            return rp_fail(RP_ERR_INVALID_ARG,
                           "the base file starts its chunks with BOS id %d; this model's BOS is %d",
                           h->bos, e->bos);
        return rp_fail(RP_ERR_INVALID_ARG,
                       "the base file's chunks %s with BOS; this model's vocabulary %s one",
                       h->add_bos ? "start" : "do not start", e->add_bos ? "adds" : "does not add");
    }
    if ((e->text_bytes || e->text_hash) &&
        (e->text_bytes != h->text_bytes || e->text_hash != h->text_hash))
        return rp_fail(RP_ERR_INVALID_ARG,
                       "the base file was made from another text (%llu bytes, hash %016llx); "
                       "this text is %llu bytes, hash %016llx",
                       (unsigned long long)h->text_bytes, (unsigned long long)h->text_hash,
                       (unsigned long long)e->text_bytes, (unsigned long long)e->text_hash);
    if (e->tokens) {
        const uint32_t n_chunk = e->n_chunk ? (uint32_t)e->n_chunk : h->n_chunk;
        const size_t n = (size_t)n_chunk * h->n_ctx;
        for (size_t i = 0; i < n; i++) {
            if (i >= e->n_tokens)
                return rp_fail(RP_ERR_INVALID_ARG,
                               "the text tokenizes to %zu tokens here; the base file's %u chunks "
                               "of %u need %zu",
                               e->n_tokens, n_chunk, h->n_ctx, n);
            if (e->tokens[i] != file_tokens[i])
                return rp_fail(RP_ERR_INVALID_ARG,
                               "token %zu (chunk %zu, position %zu) differs: the base file has "
                               "id %d, this model's tokenizer gives %d (another tokenizer?)",
                               i, i / h->n_ctx + 1, i % h->n_ctx, file_tokens[i], e->tokens[i]);
        }
    }
    return RP_OK;
}

/* ---- KL divergence --------------------------------------------------------- */

rp_status rp_kld_acc_init(rp_kld_acc *a, int32_t n_vocab) {
    memset(a, 0, sizeof *a);
    if (n_vocab < 1) return rp_fail(RP_ERR_INVALID_ARG, "KLD: vocabulary of %d", n_vocab);
    a->n_vocab = n_vocab;
    a->scratch = rp_malloc((size_t)n_vocab * sizeof *a->scratch, "KLD scratch");
    return a->scratch ? RP_OK : RP_ERR_NOMEM;
}

void rp_kld_acc_free(rp_kld_acc *a) {
    free(a->kld);
    free(a->p_diff);
    free(a->scratch);
    memset(a, 0, sizeof *a);
}

rp_status rp_kld_add(rp_kld_acc *a, const float *logits, const rp_kld_row *base, int32_t target,
                     double *kld_out) {
    const int n = a->n_vocab;
    if (target < 0 || target >= n)
        return rp_fail(RP_ERR_INVALID_ARG, "KLD: target %d outside the vocabulary of %d", target,
                       n);
    if (a->count == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 1024;
        float *k = rp_realloc(a->kld, cap * sizeof *k, "KLD values");
        if (!k) return RP_ERR_NOMEM;
        a->kld = k;
        float *d = rp_realloc(a->p_diff, cap * sizeof *d, "KLD values");
        if (!d) return RP_ERR_NOMEM;
        a->p_diff = d;
        a->cap = cap;
    }
    /* the evaluated model */
    int top;
    const float max = row_max(logits, n, &top);
    const double lse = row_log_sum_exp(logits, n, max);
    const double nll = -((double)(logits[target] - max) - lse);
    /* the base distribution from its codes, renormalised over the tokens it
     * kept, so that KLD >= 0 holds exactly as for two true distributions */
    float *lpb = a->scratch;
    double sum_b = 0.0;
    for (int i = 0; i < n; i++) {
        const uint16_t q = base->code[i];
        if (!q) {
            lpb[i] = -INFINITY;
            continue;
        }
        lpb[i] = base->lp_top - (float)(CODE_TOP - q) * base->scale;
        sum_b += exp((double)lpb[i]);
    }
    const double norm_b = sum_b > 0 ? log(sum_b) : 0.0;
    double kld = 0.0;
    for (int i = 0; i < n; i++) {
        if (lpb[i] == -INFINITY) continue;
        const double lb = (double)lpb[i] - norm_b;
        const double lq = (double)(logits[i] - max) - lse;
        kld += exp(lb) * (lb - lq);
    }
    if (kld < 0) kld = 0; /* rounding of a zero divergence */
    const double nll_base = -(double)base->lp_target;
    a->sum_nll += nll;
    a->sum_nll2 += nll * nll;
    a->sum_nll_base += nll_base;
    a->sum_nll_base2 += nll_base * nll_base;
    a->sum_nll_nll_base += nll * nll_base;
    a->sum_kld += kld;
    a->sum_kld2 += kld * kld;
    const double p_diff = exp(-nll) - exp(-nll_base);
    a->sum_p_diff += p_diff;
    a->sum_p_diff2 += p_diff * p_diff;
    a->sum_p_diff4 += p_diff * p_diff * p_diff * p_diff;
    a->n_same_top += top == base->top;
    a->kld[a->count] = (float)kld;
    a->p_diff[a->count] = (float)p_diff;
    a->count++;
    if (kld_out) *kld_out = kld;
    return RP_OK;
}

const float rp_kld_pct_levels[8] = {0.999f, 0.990f, 0.950f, 0.900f, 0.100f, 0.050f, 0.010f, 0.001f};
const float rp_p_diff_pct_levels[10] = {0.999f, 0.990f, 0.950f, 0.900f, 0.750f,
                                        0.250f, 0.100f, 0.050f, 0.010f, 0.001f};

double rp_eval_percentile(const float *v, size_t n, float fraction) {
    if (!n) return 0.0;
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    const double p = (double)fraction * (double)(n - 1);
    const size_t ip = (size_t)p;
    const double f = p - (double)ip;
    return (1 - f) * v[ip] + f * v[RP_MIN(ip + 1, n - 1)];
}

static double median(const float *v, size_t n) {
    if (!n) return 0.0;
    return n % 2 == 0 ? 0.5 * ((double)v[n / 2] + (double)v[n / 2 - 1]) : (double)v[n / 2];
}

/* llama.cpp's estimate: no uncertainty below 11 values. */
static rp_mean_unc mean_unc(double sum, double sum2, size_t count) {
    rp_mean_unc r = {0, 0};
    if (count < 1) return r;
    r.val = sum / (double)count;
    double var = sum2 / (double)count - r.val * r.val;
    r.unc = var > 0 && count > 10 ? sqrt(var / (double)(count - 1)) : 0.0;
    return r;
}

static double covariance(double sa, double sb, double sab, size_t count) {
    if (count < 10) return 0.0;
    const double n = (double)count;
    return (sab / n - (sa / n) * (sb / n)) / (n - 1);
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

rp_status rp_kld_stats_compute(const rp_kld_acc *a, bool percentiles, rp_kld_stats *st) {
    memset(st, 0, sizeof *st);
    const size_t n = a->count;
    st->count = n;
    if (!n) return RP_OK;
    const rp_mean_unc lp = mean_unc(a->sum_nll, a->sum_nll2, n);
    const rp_mean_unc lb = mean_unc(a->sum_nll_base, a->sum_nll_base2, n);
    st->ppl.val = exp(lp.val);
    st->ppl.unc = st->ppl.val * lp.unc;
    st->ppl_base.val = exp(lb.val);
    st->ppl_base.unc = st->ppl_base.val * lb.unc;
    const double cov = covariance(a->sum_nll, a->sum_nll_base, a->sum_nll_nll_base, n);
    st->cor = lp.unc > 0 && lb.unc > 0 ? cov / (lp.unc * lb.unc) : 0.0;
    st->ln_ratio.val = lp.val - lb.val;
    st->ln_ratio.unc = sqrt(RP_MAX(0.0, lp.unc * lp.unc + lb.unc * lb.unc - 2.0 * cov));
    st->ratio.val = exp(st->ln_ratio.val);
    st->ratio.unc = st->ratio.val * st->ln_ratio.unc;
    const double ppl_cov = st->ppl.val * st->ppl_base.val * cov;
    st->diff.val = st->ppl.val - st->ppl_base.val;
    st->diff.unc = sqrt(RP_MAX(0.0, st->ppl.unc * st->ppl.unc +
                                        st->ppl_base.unc * st->ppl_base.unc - 2.0 * ppl_cov));
    st->kld = mean_unc(a->sum_kld, a->sum_kld2, n);
    st->p_diff = mean_unc(a->sum_p_diff, a->sum_p_diff2, n);
    const rp_mean_unc mse = mean_unc(a->sum_p_diff2, a->sum_p_diff4, n);
    st->p_diff_rms.val = sqrt(mse.val);
    st->p_diff_rms.unc = st->p_diff_rms.val > 0 ? 0.5 / st->p_diff_rms.val * mse.unc : 0.0;
    st->same_top.val = (double)a->n_same_top / (double)n;
    st->same_top.unc =
        n > 1 ? sqrt(st->same_top.val * (1 - st->same_top.val) / (double)(n - 1)) : 0.0;
    if (!percentiles) return RP_OK;
    float *v = rp_malloc(n * sizeof *v, "KLD percentiles");
    if (!v) return RP_ERR_NOMEM;
    memcpy(v, a->kld, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_float);
    st->kld_max = v[n - 1];
    st->kld_min = v[0];
    st->kld_median = median(v, n);
    for (int i = 0; i < 8; i++) st->kld_pct[i] = rp_eval_percentile(v, n, rp_kld_pct_levels[i]);
    memcpy(v, a->p_diff, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_float);
    st->p_diff_max = v[n - 1];
    st->p_diff_min = v[0];
    st->p_diff_median = median(v, n);
    for (int i = 0; i < 10; i++)
        st->p_diff_pct[i] = rp_eval_percentile(v, n, rp_p_diff_pct_levels[i]);
    free(v);
    return RP_OK;
}
