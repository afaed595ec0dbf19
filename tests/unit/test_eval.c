/* Perplexity and KL divergence (src/eval/eval.c): llama.cpp's goldens, the
 * independence of the result from batching, the base-file format and its
 * refusals, and the KLD statistics against exact arithmetic. */
#include "eval/eval.h"
#include "golden.h"
#include "test.h"
#include "kernels/types.h"
#include "base/util.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>

#define STORIES "models/stories260K.gguf"
#define QWEN3   "models/synth/qwen3-tiny.gguf"
#define TEXT    "text/war-and-peace.txt"
/* The first 16 KiB of the text tokenize to the same ids as the whole text's
 * first 9614 (checked when this test was written), enough for 40 chunks of
 * 128; the CLI test runs the whole file. */
#define TEXT_PREFIX 16384

static bool rel_close(double a, double b, double tol) {
    return fabs(a - b) <= tol * fmax(fabs(a), fabs(b));
}

/* Tokenized prefix of the shared text. */
static int32_t *text_tokens(const rp_model *m, size_t prefix, size_t *n, uint64_t *hash,
                            size_t *bytes) {
    size_t len;
    char *text = test_read(test_shared(TEXT), &len);
    if (!text) return NULL;
    if (prefix && prefix < len) len = prefix;
    int32_t *toks = NULL;
    if (rp_eval_tokenize(m, text, len, &toks, n)) fprintf(stderr, "  %s\n", rp_last_error());
    if (hash) *hash = rp_eval_text_hash(text, len);
    if (bytes) *bytes = len;
    free(text);
    return toks;
}

/* Opens a model with an F32 KV cache sized for n_seq chunks of c. */
static bool open_eval(const char *rel, const char *repeat, int c, int n_seq, int n_batch,
                      rp_model **m, rp_context **ctx) {
    *ctx = NULL;
    if (rp_model_load(test_shared(rel), NULL, m)) {
        fprintf(stderr, "  %s\n", rp_last_error());
        return false;
    }
    rp_context_params cp = rp_context_default_params();
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.n_ctx = (uint32_t)c;
    cp.n_seq_max = (uint32_t)n_seq;
    cp.n_batch = (uint32_t)n_batch;
    cp.n_threads = strstr(rel, "qwen3") ? 2 : 1; /* the larger model splits over the two cores */
    cp.repeat_layers = repeat;
    if (rp_context_new(*m, &cp, ctx)) {
        fprintf(stderr, "  %s\n", rp_last_error());
        rp_model_free(*m);
        *m = NULL;
        return false;
    }
    return true;
}

/* Reads llama-perplexity's running values "[1]33.0934,[2]..." from a golden. */
static int golden_running(const char *rel, double *v, int max) {
    size_t len;
    char *s = test_read(test_shared(rel), &len);
    if (!s) return 0;
    int n = 0;
    for (char *p = s; (p = strchr(p, '[')) && n < max;) {
        int k;
        double x;
        if (sscanf(p, "[%d]%lf", &k, &x) == 2 && k == n + 1) v[n++] = x;
        p++;
    }
    free(s);
    return n;
}

/* "Final estimate: PPL = X +/- Y" (or a "key : X" line) of a golden file. */
static bool golden_number(const char *rel, const char *key, double *x, double *y) {
    size_t len;
    char *s = test_read(test_shared(rel), &len);
    if (!s) return false;
    char *p = strstr(s, key);
    bool ok = false;
    if (p) {
        p += strlen(key);
        while (*p == ' ' || *p == ':' || *p == '=') p++;
        char *end;
        *x = strtod(p, &end);
        ok = end != p;
        if (ok && y) {
            char *q = strstr(end, "+/-");
            if (!q) q = strstr(end, "\xc2\xb1");
            ok = q != NULL;
            if (ok) *y = strtod(q + (q[0] == '+' ? 3 : 2), NULL);
        }
    }
    free(s);
    return ok;
}

/* ---- consumers ------------------------------------------------------------- */

typedef struct collect {
    rp_ppl_acc ppl;
    double running[64];
    int n_running;
    float *logits; /* [n_rows][n_vocab] all scored rows, when non-NULL */
    int32_t *target;
    size_t n_rows, cap_rows;
    int n_vocab;
    rp_kld_writer *writer;
    rp_kld_reader *reader;
    rp_kld_acc *kld;
    int stop_after; /* > 0: cancel after this many chunks */
    int next_index;
} collect;

static rp_status on_chunk(const rp_eval_chunk *ch, void *user) {
    collect *c = user;
    if (ch->index != c->next_index++) return RP_ERR_INTERNAL;
    const rp_kld_row *rows = NULL;
    if (c->reader) {
        rp_status s = rp_kld_reader_chunk(c->reader, ch->index, &rows);
        if (s) return s;
    }
    for (int j = 0; j < ch->n_score; j++) {
        rp_ppl_add(&c->ppl, rp_eval_nll(ch->logits[j], c->n_vocab, ch->target[j]));
        if (c->logits && c->n_rows < c->cap_rows) {
            memcpy(c->logits + c->n_rows * (size_t)c->n_vocab, ch->logits[j],
                   (size_t)c->n_vocab * sizeof(float));
            c->target[c->n_rows++] = ch->target[j];
        }
        if (rows) {
            rp_status s = rp_kld_add(c->kld, ch->logits[j], &rows[j], ch->target[j], NULL);
            if (s) return s;
        }
    }
    if (c->writer) {
        rp_status s = rp_kld_writer_add(c->writer, ch);
        if (s) return s;
    }
    if (c->n_running < 64) c->running[c->n_running++] = rp_ppl_value(&c->ppl);
    if (c->stop_after && ch->index + 1 >= c->stop_after) return RP_ERR_CANCELLED;
    return RP_OK;
}

static bool collect_rows(collect *c, size_t rows, int n_vocab) {
    c->n_vocab = n_vocab;
    c->cap_rows = rows;
    c->logits = malloc(rows * (size_t)n_vocab * sizeof(float));
    c->target = malloc(rows * sizeof(int32_t));
    return c->logits && c->target;
}

static void collect_free(collect *c) {
    free(c->logits);
    free(c->target);
}

/* Exact KL(p_base || p_q) of two logit rows, in double. */
static double exact_kld(const float *base, const float *q, int n) {
    double mb = base[0], mq = q[0];
    for (int i = 1; i < n; i++) {
        mb = fmax(mb, base[i]);
        mq = fmax(mq, q[i]);
    }
    double sb = 0, sq = 0;
    for (int i = 0; i < n; i++) {
        sb += exp(base[i] - mb);
        sq += exp(q[i] - mq);
    }
    double lsb = log(sb), lsq = log(sq), k = 0;
    for (int i = 0; i < n; i++) {
        double lb = base[i] - mb - lsb, lq = q[i] - mq - lsq;
        k += exp(lb) * (lb - lq);
    }
    return k;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* ---- perplexity goldens ------------------------------------------------------ */

void test_eval_ppl_golden_stories(void) {
    rp_model *m;
    rp_context *ctx;
    REQUIRE(open_eval(STORIES, NULL, 128, 4, 512, &m, &ctx), "open stories260K");
    size_t n;
    int32_t *toks = text_tokens(m, TEXT_PREFIX, &n, NULL, NULL);
    REQUIRE(toks, "tokenize");
    CHECK(n == 9614, "prefix tokenizes to %zu tokens", n);
    rp_eval_windows w;
    REQUIRE(rp_eval_windows_init(&w, m, n, 128, 40) == RP_OK, "%s", rp_last_error());
    CHECK(w.n_chunk == 40 && w.first == 64 && w.n_score == 63 && w.add_bos && w.bos == 1,
          "windows");
    collect c = {.n_vocab = w.n_vocab};
    REQUIRE(rp_eval_run(ctx, toks, &w, 4, on_chunk, &c) == RP_OK, "%s", rp_last_error());
    double gold[64];
    int ng = golden_running("golden/ppl/stories260K-war-and-peace-c128-40.txt", gold, 64);
    CHECK(ng == 40 && c.n_running == 40, "%d golden values, %d computed", ng, c.n_running);
    /* llama.cpp prints 4 decimals: agreement to the last digit */
    for (int i = 0; i < ng && i < c.n_running; i++)
        CHECK(fabs(c.running[i] - gold[i]) <= 1.5e-4, "chunk %d: %.6f, llama.cpp %.4f", i + 1,
              c.running[i], gold[i]);
    double ppl, unc;
    REQUIRE(golden_number("golden/ppl/stories260K-war-and-peace-c128-40.txt", "Final estimate: PPL",
                          &ppl, &unc),
            "golden final line");
    CHECK(rel_close(rp_ppl_value(&c.ppl), ppl, 1e-3), "PPL %.6f, llama.cpp %.4f (0.1%%)",
          rp_ppl_value(&c.ppl), ppl);
    CHECK(rel_close(rp_ppl_value(&c.ppl), ppl, 2e-6), "PPL %.6f, llama.cpp %.4f",
          rp_ppl_value(&c.ppl), ppl);
    CHECK(rel_close(rp_ppl_uncertainty(&c.ppl), unc, 2e-5), "+/- %.6f, llama.cpp %.5f",
          rp_ppl_uncertainty(&c.ppl), unc);
    CHECK(c.ppl.count == 40 * 63, "scored %zu tokens", c.ppl.count);
    free(toks);
    rp_context_free(ctx);
    rp_model_free(m);
}

/* qwen3-tiny F32: the PPL golden; its log-probabilities become the base of a
 * KLD run of the Q8_0 file (checked against exact arithmetic on the raw
 * logits) and of the Q4_K_M file (llama.cpp's KLD golden). */
static void kld_against(const char *rel, const char *path, const rp_kld_header *h,
                        const int32_t *file_toks, int chunks, collect *q, rp_kld_acc *acc) {
    rp_model *m;
    rp_context *ctx;
    REQUIRE(open_eval(rel, NULL, 128, 4, 512, &m, &ctx), "open %s", rel);
    rp_kld_reader *r;
    REQUIRE(rp_kld_reader_open(path, &r) == RP_OK, "%s", rp_last_error());
    rp_eval_windows w;
    REQUIRE(rp_eval_windows_init(&w, m, (size_t)h->n_chunk * h->n_ctx, (int)h->n_ctx, chunks) ==
                RP_OK,
            "%s", rp_last_error());
    REQUIRE(rp_kld_acc_init(acc, w.n_vocab) == RP_OK, "acc");
    REQUIRE(collect_rows(q, (size_t)w.n_chunk * (size_t)w.n_score, w.n_vocab), "alloc");
    q->reader = r;
    q->kld = acc;
    CHECK(rp_eval_run(ctx, file_toks, &w, 4, on_chunk, q) == RP_OK, "%s", rp_last_error());
    rp_kld_reader_free(r);
    rp_context_free(ctx);
    rp_model_free(m);
}

/* The qwen3-tiny F32 run over llama.cpp's window (c 128, 10 chunks) with its
 * log-probabilities saved to path; base collects its raw logits. */
static bool qwen3_base(const char *path, collect *base, int32_t **toks, uint64_t *hash,
                       size_t *bytes) {
    rp_model *m;
    rp_context *ctx;
    if (!open_eval(QWEN3, NULL, 128, 4, 512, &m, &ctx)) return false;
    size_t n;
    *toks = text_tokens(m, TEXT_PREFIX, &n, hash, bytes);
    rp_eval_windows w;
    bool ok = *toks && rp_eval_windows_init(&w, m, n, 128, 10) == RP_OK &&
              collect_rows(base, (size_t)w.n_chunk * (size_t)w.n_score, w.n_vocab) &&
              rp_kld_writer_open(path, &w, *toks, *bytes, *hash, "qwen3-tiny.gguf",
                                 &base->writer) == RP_OK &&
              rp_eval_run(ctx, *toks, &w, 4, on_chunk, base) == RP_OK &&
              rp_kld_writer_commit(base->writer) == RP_OK;
    if (!ok) fprintf(stderr, "  %s\n", rp_last_error());
    rp_kld_writer_free(base->writer);
    base->writer = NULL;
    rp_context_free(ctx);
    rp_model_free(m);
    return ok;
}

/* Header and token ids of a base file (tokens malloc'ed). */
static bool base_header(const char *path, rp_kld_header *h, int32_t **toks) {
    rp_kld_reader *r;
    if (rp_kld_reader_open(path, &r)) return false;
    *h = *rp_kld_reader_header(r);
    size_t n = (size_t)h->n_chunk * h->n_ctx;
    *toks = malloc(n * sizeof **toks);
    if (*toks) memcpy(*toks, rp_kld_reader_tokens(r), n * sizeof **toks);
    rp_kld_reader_free(r);
    return *toks != NULL;
}

void test_eval_qwen3_ppl_and_kld(void) {
    const char *golden = "golden/ppl/qwen3-tiny-war-and-peace-c128-10.txt";
    const char *path = test_tmp("qwen3-tiny-f32.kld");
    collect base = {0};
    int32_t *toks = NULL;
    size_t bytes;
    uint64_t hash;
    bool ok = qwen3_base(path, &base, &toks, &hash, &bytes);
    if (!ok) {
        collect_free(&base);
        free(toks);
    }
    REQUIRE(ok, "qwen3-tiny base run");
    double ppl, unc;
    REQUIRE(golden_number(golden, "Final estimate: PPL", &ppl, &unc), "golden");
    CHECK(rel_close(rp_ppl_value(&base.ppl), ppl, 1e-3), "PPL %.4f, llama.cpp %.4f (0.1%%)",
          rp_ppl_value(&base.ppl), ppl);
    CHECK(rel_close(rp_ppl_value(&base.ppl), ppl, 1e-5), "PPL %.4f, llama.cpp %.4f",
          rp_ppl_value(&base.ppl), ppl);
    CHECK(rel_close(rp_ppl_uncertainty(&base.ppl), unc, 1e-4), "+/- %.5f, llama.cpp %.5f",
          rp_ppl_uncertainty(&base.ppl), unc);

    rp_kld_header h;
    int32_t *file_toks;
    REQUIRE(base_header(path, &h, &file_toks), "%s", rp_last_error());
    CHECK(h.n_ctx == 128 && h.n_chunk == 10 && h.n_score == 63 && h.n_vocab == 512 &&
              h.text_hash == hash && h.text_bytes == bytes && !strcmp(h.desc, "qwen3-tiny.gguf"),
          "header");
    CHECK(!memcmp(file_toks, toks, 1280 * sizeof *toks), "token ids round-trip");

    /* Q8_0 against F32 on the first 4 of the file's chunks: the file-based
     * statistics against exact arithmetic on the raw logits of both models */
    collect q = {0};
    rp_kld_acc acc = {0};
    kld_against("models/synth/qwen3-tiny-Q8_0.gguf", path, &h, file_toks, 4, &q, &acc);
    rp_kld_stats st;
    REQUIRE(rp_kld_stats_compute(&acc, true, &st) == RP_OK, "stats");
    REQUIRE(q.n_rows == 4 * 63 && st.count == q.n_rows, "%zu rows, %zu counted", q.n_rows,
            st.count);
    double sum = 0, max_err = 0;
    size_t same = 0;
    rp_ppl_acc base4 = {0};
    for (size_t i = 0; i < q.n_rows; i++) {
        const float *lb = base.logits + i * 512, *lq = q.logits + i * 512;
        double k = exact_kld(lb, lq, 512);
        sum += k;
        max_err = fmax(max_err, fabs(k - acc.kld[i]));
        same += argmax(lb, 512) == argmax(lq, 512);
        rp_ppl_add(&base4, rp_eval_nll(lb, 512, base.target[i]));
    }
    const double exact_mean = sum / (double)q.n_rows;
    CHECK(st.kld.val > 1e-3, "Q8_0 moves the model: mean KLD %.6f", st.kld.val);
    CHECK(rel_close(st.kld.val, exact_mean, 1e-3), "mean KLD %.8f, exact %.8f", st.kld.val,
          exact_mean);
    CHECK(max_err < 1e-4, "largest per-token KLD error %.3g", max_err);
    CHECK(acc.n_same_top == same, "same top %zu, exact %zu", acc.n_same_top, same);
    CHECK(rel_close(st.ppl_base.val, rp_ppl_value(&base4), 1e-6), "PPL(base) %.4f, base run %.4f",
          st.ppl_base.val, rp_ppl_value(&base4));
    CHECK(rel_close(st.ppl.val, rp_ppl_value(&q.ppl), 1e-6), "PPL(Q) %.4f, its run %.4f",
          st.ppl.val, rp_ppl_value(&q.ppl));
    CHECK(st.same_top.val > 0.8 && st.same_top.val < 1.0, "same top p %.3f", st.same_top.val);
    collect_free(&q);
    rp_kld_acc_free(&acc);

    collect_free(&base);
    free(file_toks);
    free(toks);
}

/* Q4_K_M against F32: llama.cpp's report on the same files and window (mean
 * KLD within 2%, same top p within 1 point). Pending until the q4_K type
 * computes in reprise; from then on it runs and must pass. */
void test_eval_kld_golden_q4_K_M(void) {
    const char *kg = "golden/ppl/qwen3-tiny-Q4_K_M-vs-f32-kld.txt";
    if (!rp_type_can_compute(RP_TYPE_Q4_K)) {
        fprintf(stderr,
                "  pending: q4_K does not compute yet; the Q4_K_M KLD golden runs once it does\n");
        return;
    }
    const char *path = test_tmp("qwen3-tiny-f32-q4.kld");
    collect base = {0};
    int32_t *toks = NULL;
    size_t bytes;
    uint64_t hash;
    bool ok = qwen3_base(path, &base, &toks, &hash, &bytes);
    rp_kld_header h;
    int32_t *file_toks = NULL;
    ok = ok && base_header(path, &h, &file_toks);
    if (ok) {
        collect q4 = {0};
        rp_kld_acc acc = {0};
        kld_against("models/synth/qwen3-tiny-Q4_K_M.gguf", path, &h, file_toks, 0, &q4, &acc);
        rp_kld_stats st;
        double g_kld, g_kld_unc, g_same, g_same_unc;
        CHECK(golden_number(kg, "Mean    KLD", &g_kld, &g_kld_unc) &&
                  golden_number(kg, "Same top p", &g_same, &g_same_unc),
              "golden KLD file");
        CHECK(rp_kld_stats_compute(&acc, true, &st) == RP_OK && st.count == 630, "%zu tokens",
              st.count);
        CHECK(rel_close(st.kld.val, g_kld, 0.02), "Q4_K_M mean KLD %.6f, llama.cpp %.6f (2%%)",
              st.kld.val, g_kld);
        CHECK(fabs(100.0 * st.same_top.val - g_same) <= 1.0,
              "Q4_K_M same top p %.3f%%, llama.cpp %.3f%% (1 point)", 100.0 * st.same_top.val,
              g_same);
        collect_free(&q4);
        rp_kld_acc_free(&acc);
    }
    CHECK(ok, "qwen3-tiny base run");
    collect_free(&base);
    free(file_toks);
    free(toks);
}

/* ---- the method --------------------------------------------------------------- */

/* The scores do not depend on how chunks are grouped into sequences or how
 * the batch is split into micro-batches. */
void test_eval_batch_invariance(void) {
    const int c = 64, chunks = 6;
    double sums[4];
    const int n_seq[4] = {1, 3, 4, 6}, n_batch[4] = {64, 512, 16, 100};
    int32_t *toks = NULL;
    size_t n = 0;
    for (int k = 0; k < 4; k++) {
        rp_model *m;
        rp_context *ctx;
        REQUIRE(open_eval(STORIES, NULL, c, n_seq[k], n_batch[k], &m, &ctx), "open");
        if (!toks) toks = text_tokens(m, 8192, &n, NULL, NULL);
        REQUIRE(toks, "tokenize");
        rp_eval_windows w;
        REQUIRE(rp_eval_windows_init(&w, m, n, c, chunks) == RP_OK, "%s", rp_last_error());
        collect col = {.n_vocab = w.n_vocab};
        CHECK(rp_eval_run(ctx, toks, &w, n_seq[k], on_chunk, &col) == RP_OK, "%s", rp_last_error());
        CHECK(col.ppl.count == (size_t)chunks * 31, "count %zu", col.ppl.count);
        sums[k] = col.ppl.sum_nll;
        rp_context_free(ctx);
        rp_model_free(m);
    }
    for (int k = 1; k < 4; k++)
        CHECK(rel_close(sums[k], sums[0], 1e-12),
              "%d chunks per batch, micro-batch %d: sum %.15g vs %.15g", n_seq[k], n_batch[k],
              sums[k], sums[0]);
    free(toks);
}

/* BOS replaces the first token of every chunk; the text's token there is
 * never a target; a chunk scores only its second half. */
void test_eval_windows_and_targets(void) {
    rp_model *m;
    rp_context *ctx;
    REQUIRE(open_eval(STORIES, NULL, 16, 2, 512, &m, &ctx), "open");
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 100 + i;
    rp_eval_windows w;
    REQUIRE(rp_eval_windows_init(&w, m, 64, 16, 0) == RP_OK, "%s", rp_last_error());
    CHECK(w.n_chunk == 4 && w.first == 8 && w.n_score == 7, "windows %d %d %d", w.n_chunk, w.first,
          w.n_score);
    collect col = {0};
    REQUIRE(collect_rows(&col, 28, w.n_vocab), "alloc");
    CHECK(rp_eval_run(ctx, toks, &w, 2, on_chunk, &col) == RP_OK, "%s", rp_last_error());
    for (int ch = 0; ch < 4; ch++)
        for (int j = 0; j < 7; j++)
            CHECK(col.target[ch * 7 + j] == toks[ch * 16 + 9 + j], "chunk %d row %d target %d", ch,
                  j, col.target[ch * 7 + j]);
    /* the chunk's logits equal a plain decode of [BOS, tokens 1..14] */
    rp_kv_clear(ctx);
    int32_t one[15];
    int8_t want[15];
    one[0] = 1;
    for (int i = 1; i < 15; i++) one[i] = toks[16 + i];
    for (int i = 0; i < 15; i++) want[i] = 1;
    rp_batch b = {.n_tokens = 15, .token = one, .logits = want};
    REQUIRE(rp_decode(ctx, &b) == RP_OK, "%s", rp_last_error());
    double d = 0;
    for (int j = 0; j < 7; j++)
        d = fmax(d, test_max_abs_diff(rp_get_logits(ctx, 8 + j), col.logits + (size_t)(7 + j) * 512,
                                      512));
    CHECK(d == 0, "chunk 2 differs from a plain decode by %g", d);
    /* cancellation stops the run with the consumer's status */
    collect stop = {.n_vocab = w.n_vocab, .stop_after = 2};
    CHECK(rp_eval_run(ctx, toks, &w, 1, on_chunk, &stop) == RP_ERR_CANCELLED && stop.n_running == 2,
          "cancel");
    /* a context too small for the windows is refused */
    rp_eval_windows big;
    REQUIRE(rp_eval_windows_init(&big, m, 64, 32, 0) == RP_OK, "%s", rp_last_error());
    collect none = {.n_vocab = w.n_vocab};
    CHECK(rp_eval_run(ctx, toks, &big, 1, on_chunk, &none) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "context of 32 positions"),
          "%s", rp_last_error());
    CHECK(rp_eval_run(ctx, toks, &w, 3, on_chunk, &none) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "sequences"),
          "%s", rp_last_error());
    collect_free(&col);
    rp_context_free(ctx);
    rp_model_free(m);
}

void test_eval_windows_refusals(void) {
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(STORIES), NULL, &m) == RP_OK, "%s", rp_last_error());
    rp_eval_windows w;
    CHECK(rp_eval_windows_init(&w, m, 100000, 4096, 0) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "trained on (2048"),
          "%s", rp_last_error());
    CHECK(rp_eval_windows_init(&w, m, 100000, 3, 0) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "too small"),
          "%s", rp_last_error());
    CHECK(rp_eval_windows_init(&w, m, 255, 128, 0) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "has 255 tokens") && strstr(rp_last_error(), "at least 256"),
          "%s", rp_last_error());
    CHECK(rp_eval_windows_init(&w, m, 256, 128, 0) == RP_OK && w.n_chunk == 2, "two chunks' worth");
    CHECK(rp_eval_windows_init(&w, m, 1000, 128, 0) == RP_OK && w.n_chunk == 7, "all chunks: %d",
          w.n_chunk);
    CHECK(rp_eval_windows_init(&w, m, 1000, 128, 3) == RP_OK && w.n_chunk == 3, "--chunks 3: %d",
          w.n_chunk);
    CHECK(rp_eval_windows_init(&w, m, 1000, 128, 30) == RP_OK && w.n_chunk == 7, "--chunks 30: %d",
          w.n_chunk);
    /* an empty text is BOS alone: too short, said so */
    int32_t *t;
    size_t n;
    REQUIRE(rp_eval_tokenize(m, "", 0, &t, &n) == RP_OK, "%s", rp_last_error());
    CHECK(n == 1 && t[0] == 1, "empty text: %zu tokens", n);
    CHECK(rp_eval_windows_init(&w, m, n, 128, 0) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "has 1 tokens"),
          "%s", rp_last_error());
    free(t);
    rp_model_free(m);
}

/* ---- statistics ----------------------------------------------------------------- */

void test_eval_stats_arithmetic(void) {
    /* llama.cpp's percentile: linear between neighbours of sorted values */
    const float v[5] = {1, 2, 3, 4, 10};
    CHECK(rp_eval_percentile(v, 5, 0.5f) == 3.0, "median");
    CHECK(fabs(rp_eval_percentile(v, 5, 0.9f) - 7.6) < 1e-6, "90%%: %g",
          rp_eval_percentile(v, 5, 0.9f));
    CHECK(rp_eval_percentile(v, 5, 0.0f) == 1.0 && rp_eval_percentile(v, 5, 1.0f) == 10.0, "ends");
    /* PPL and its uncertainty */
    rp_ppl_acc a = {0};
    const double nll[4] = {1.0, 2.0, 3.0, 4.0};
    for (int i = 0; i < 4; i++) rp_ppl_add(&a, nll[i]);
    CHECK(fabs(rp_ppl_value(&a) - exp(2.5)) < 1e-12, "ppl");
    /* var = 7.5 - 6.25 = 1.25; / (n-1) = 0.41667 */
    CHECK(fabs(rp_ppl_uncertainty(&a) - exp(2.5) * sqrt(1.25 / 3)) < 1e-9, "unc %g",
          rp_ppl_uncertainty(&a));
    /* nll of a row: uniform over 4 tokens is ln 4 */
    const float flat[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    CHECK(fabs(rp_eval_nll(flat, 4, 2) - log(4.0)) < 1e-7, "nll");

    /* KLD of hand-made rows: base (1/2, 1/2) against q (3/4, 1/4) */
    const float base[2] = {0, 0}, q[2] = {(float)log(3.0), 0};
    unsigned char row[64];
    REQUIRE(rp_kld_row_bytes(2) <= sizeof row, "row size");
    REQUIRE(rp_kld_encode_row(base, 2, 1, row) == RP_OK, "%s", rp_last_error());
    rp_kld_row br;
    REQUIRE(rp_kld_decode_row(row, 2, &br) == RP_OK, "%s", rp_last_error());
    rp_kld_acc acc;
    REQUIRE(rp_kld_acc_init(&acc, 2) == RP_OK, "init");
    double k;
    REQUIRE(rp_kld_add(&acc, q, &br, 1, &k) == RP_OK, "%s", rp_last_error());
    const double want = 0.5 * log(0.5 / 0.75) + 0.5 * log(0.5 / 0.25);
    CHECK(fabs(k - want) < 1e-6, "KLD %.8f, exact %.8f", k, want);
    /* p(target): 1/4 against 1/2 */
    CHECK(fabs(acc.p_diff[0] - (0.25 - 0.5)) < 1e-6, "p diff %g", acc.p_diff[0]);
    CHECK(acc.n_same_top == 1, "both tops are token 0 (first maximum)");
    /* a distribution against itself: zero, the same top */
    REQUIRE(rp_kld_add(&acc, base, &br, 0, &k) == RP_OK, "%s", rp_last_error());
    CHECK(k >= 0 && k < 1e-9, "self KLD %g", k);
    rp_kld_stats st;
    REQUIRE(rp_kld_stats_compute(&acc, true, &st) == RP_OK, "stats");
    CHECK(st.count == 2 && fabs(st.kld.val - want / 2) < 1e-6 && st.kld.unc == 0,
          "mean %g (no uncertainty below 11)", st.kld.val);
    CHECK(st.kld_max == acc.kld[0] && st.kld_min == acc.kld[1] &&
              fabs(st.kld_median - want / 2) < 1e-6,
          "max/min/median");
    CHECK(st.same_top.val == 1.0, "same top %g", st.same_top.val);
    rp_kld_acc_free(&acc);
}

/* Encoded rows keep the distribution to half a code step, the target's
 * log-probability and the top token exactly, and drop only what lies more
 * than the range below the top. */
void test_eval_row_encoding(void) {
    enum { NV = 1001 };
    float logits[NV];
    rp_rng rng;
    rp_rng_seed(&rng, 7);
    for (int i = 0; i < NV; i++) logits[i] = 6.0f * rp_rng_normal(&rng);
    logits[500] = 40.0f; /* a peaked row: much of the tail drops below the range */
    unsigned char *row = malloc(rp_kld_row_bytes(NV));
    REQUIRE(row, "alloc");
    CHECK(rp_kld_row_bytes(NV) == 16 + 2 * (NV + 1), "padded to 4 bytes");
    REQUIRE(rp_kld_encode_row(logits, NV, 17, row) == RP_OK, "%s", rp_last_error());
    rp_kld_row r;
    REQUIRE(rp_kld_decode_row(row, NV, &r) == RP_OK, "%s", rp_last_error());
    double mx = 40.0, s = 0;
    for (int i = 0; i < NV; i++) s += exp(logits[i] - mx);
    const double lse = log(s);
    CHECK(r.top == 500, "top %d", r.top);
    CHECK(fabs(r.lp_target - (logits[17] - mx - lse)) < 1e-5, "target lp %g", r.lp_target);
    int dropped = 0;
    for (int i = 0; i < NV; i++) {
        const double lp = logits[i] - mx - lse;
        if (!r.code[i]) {
            dropped++;
            CHECK(lp < r.lp_top - RP_KLD_LP_RANGE + r.scale, "token %d dropped at lp %g", i, lp);
            continue;
        }
        const double dec = r.lp_top - (65535.0 - r.code[i]) * r.scale;
        CHECK(fabs(dec - lp) <= 0.5 * r.scale + 1e-5, "token %d: %g decodes to %g", i, lp, dec);
    }
    CHECK(dropped > 0 && dropped < NV - 1, "%d dropped", dropped);
    CHECK(r.scale > 0 && r.scale * 65534 <= RP_KLD_LP_RANGE * 1.0001f, "step %g", r.scale);
    /* a flat row: one code for all */
    for (int i = 0; i < NV; i++) logits[i] = 1.0f;
    REQUIRE(rp_kld_encode_row(logits, NV, 3, row) == RP_OK, "%s", rp_last_error());
    REQUIRE(rp_kld_decode_row(row, NV, &r) == RP_OK, "%s", rp_last_error());
    CHECK(r.scale == 0 && r.code[0] == 65535 && r.code[NV - 1] == 65535 &&
              fabs(r.lp_top + log(NV)) < 1e-5,
          "flat");
    /* not-finite logits are refused; so are corrupt rows */
    logits[9] = NAN;
    CHECK(rp_kld_encode_row(logits, NV, 3, row) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "logit 9"),
          "%s", rp_last_error());
    logits[9] = 1.0f;
    REQUIRE(rp_kld_encode_row(logits, NV, 3, row) == RP_OK, "%s", rp_last_error());
    float bad = NAN;
    memcpy(row + 12, &bad, 4);
    CHECK(rp_kld_decode_row(row, NV, &r) == RP_ERR_FORMAT, "NaN step accepted");
    int32_t top = NV;
    REQUIRE(rp_kld_encode_row(logits, NV, 3, row) == RP_OK, "%s", rp_last_error());
    memcpy(row + 4, &top, 4);
    CHECK(rp_kld_decode_row(row, NV, &r) == RP_ERR_FORMAT && strstr(rp_last_error(), "top token"),
          "%s", rp_last_error());
    free(row);
}

/* ---- the base file ---------------------------------------------------------------- */

/* A small base file made from random logits (no model needed). */
static bool write_small_base(const char *path, rp_eval_windows *w, int32_t *toks) {
    w->n_ctx = 8;
    w->n_chunk = 3;
    w->first = 4;
    w->n_score = 3;
    w->add_bos = true;
    w->bos = 1;
    w->n_vocab = 37;
    for (int i = 0; i < 24; i++) toks[i] = (i * 7) % 37;
    rp_kld_writer *wr;
    if (rp_kld_writer_open(path, w, toks, 1234, 0xabcdefull, "small test base", &wr)) return false;
    float logits[3][37];
    const float *rows[3] = {logits[0], logits[1], logits[2]};
    rp_rng rng;
    rp_rng_seed(&rng, 3);
    bool ok = true;
    for (int ch = 0; ch < 3 && ok; ch++) {
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 37; i++) logits[j][i] = 3.0f * rp_rng_normal(&rng);
        rp_eval_chunk c = {.index = ch, .n_score = 3, .logits = rows, .target = toks + ch * 8 + 5};
        ok = rp_kld_writer_add(wr, &c) == RP_OK;
    }
    ok = ok && rp_kld_writer_commit(wr) == RP_OK;
    rp_kld_writer_free(wr);
    return ok;
}

static bool file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

void test_eval_base_file_roundtrip(void) {
    const char *path = test_tmp("small.kld");
    rp_eval_windows w;
    int32_t toks[24];
    REQUIRE(write_small_base(path, &w, toks), "%s", rp_last_error());
    struct stat st;
    REQUIRE(stat(path, &st) == 0, "written");
    CHECK(st.st_size == 256 + 24 * 4 + 9 * (16 + 2 * 38), "size %lld", (long long)st.st_size);
    rp_kld_reader *r;
    REQUIRE(rp_kld_reader_open(path, &r) == RP_OK, "%s", rp_last_error());
    const rp_kld_header *h = rp_kld_reader_header(r);
    CHECK(h->version == 1 && h->n_ctx == 8 && h->n_vocab == 37 && h->n_chunk == 3 &&
              h->first == 4 && h->n_score == 3 && h->add_bos && h->bos == 1 &&
              h->text_bytes == 1234 && h->text_hash == 0xabcdef && h->lp_range == RP_KLD_LP_RANGE &&
              !strcmp(h->desc, "small test base"),
          "header fields");
    CHECK(!memcmp(rp_kld_reader_tokens(r), toks, sizeof toks), "tokens");
    const rp_kld_row *rows;
    CHECK(rp_kld_reader_chunk(r, 2, &rows) == RP_OK && rows[0].top >= 0, "%s", rp_last_error());
    CHECK(rp_kld_reader_chunk(r, 0, &rows) == RP_OK, "random access back to chunk 1");
    CHECK(rp_kld_reader_chunk(r, 3, &rows) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "holds 3 chunks"),
          "%s", rp_last_error());

    /* what a comparison run must match */
    rp_kld_expect e = {.n_vocab = 37, .add_bos = true, .bos = 1};
    CHECK(rp_kld_check(h, toks, &e) == RP_OK, "%s", rp_last_error());
    rp_kld_expect x = e;
    x.n_vocab = 512;
    CHECK(rp_kld_check(h, toks, &x) &&
              strstr(rp_last_error(), "vocabulary of 37 tokens; this model has 512"),
          "%s", rp_last_error());
    x = e;
    x.n_ctx = 16;
    CHECK(rp_kld_check(h, toks, &x) && strstr(rp_last_error(), "made with -c 8"), "%s",
          rp_last_error());
    x = e;
    x.n_chunk = 4;
    CHECK(rp_kld_check(h, toks, &x) && strstr(rp_last_error(), "holds 3 chunks; 4 asked"), "%s",
          rp_last_error());
    x = e;
    x.add_bos = false;
    CHECK(rp_kld_check(h, toks, &x) && strstr(rp_last_error(), "does not add"), "%s",
          rp_last_error());
    x = e;
    x.bos = 2;
    CHECK(rp_kld_check(h, toks, &x) && strstr(rp_last_error(), "BOS id 1; this model's BOS is 2"),
          "%s", rp_last_error());
    x = e;
    x.text_bytes = 1234;
    x.text_hash = 0xabcdee;
    CHECK(rp_kld_check(h, toks, &x) && strstr(rp_last_error(), "another text"), "%s",
          rp_last_error());
    int32_t other[24];
    memcpy(other, toks, sizeof other);
    other[13] = 5;
    x = e;
    x.tokens = other;
    x.n_tokens = 24;
    CHECK(rp_kld_check(h, toks, &x) &&
              strstr(rp_last_error(), "token 13 (chunk 2, position 5) differs"),
          "%s", rp_last_error());
    x.n_tokens = 20;
    other[13] = toks[13];
    CHECK(rp_kld_check(h, toks, &x) && strstr(rp_last_error(), "tokenizes to 20 tokens"), "%s",
          rp_last_error());
    x.n_chunk = 2; /* only the chunks compared need to match */
    CHECK(rp_kld_check(h, toks, &x) == RP_OK, "%s", rp_last_error());
    rp_kld_reader_free(r);

    /* an unfinished writer leaves nothing */
    const char *p2 = test_tmp("unfinished.kld");
    rp_kld_writer *wr;
    REQUIRE(rp_kld_writer_open(p2, &w, toks, 0, 0, NULL, &wr) == RP_OK, "%s", rp_last_error());
    CHECK(rp_kld_writer_commit(wr) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "0 of 3 chunks"),
          "%s", rp_last_error());
    rp_kld_writer_free(wr);
    CHECK(!file_exists(p2), "unfinished file left behind");
}

/* Damaged files give an error naming what is wrong, never a crash or a
 * silently wrong comparison. */
void test_eval_base_file_damage(void) {
    const char *path = test_tmp("dmg.kld"), *bad = test_tmp("dmg-bad.kld");
    rp_eval_windows w;
    int32_t toks[24];
    REQUIRE(write_small_base(path, &w, toks), "%s", rp_last_error());
    size_t len;
    unsigned char *d = test_read(path, &len);
    REQUIRE(d, "read");
    unsigned char *b = malloc(len);
    REQUIRE(b, "alloc");
    struct {
        const char *what;
        size_t off;
        uint32_t value;
        size_t keep; /* 0: whole file */
        const char *msg;
    } cases[] = {
        {"truncated", 0, 0, 700, "truncated"},
        {"header only", 0, 0, 100, "shorter than the 256-byte header"},
        {"magic", 0, 0x41414141, 0, "magic"},
        {"version", 8, 2, 0, "version 2"},
        {"chunk size", 16, 2, 0, "chunk size 2"},
        {"vocabulary", 20, 40, 0, "row size"},
        {"chunks", 24, 4, 0, "needs"},
        {"window", 28, 3, 0, "scored window"},
        {"flags", 36, 6, 0, "flags"},
        {"bos", 40, 37, 0, "BOS id 37"},
        {"token id", 256 + 4 * 5, 99, 0, "hash"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(b, d, len);
        if (!cases[k].keep) memcpy(b + cases[k].off, &cases[k].value, 4);
        FILE *fp = fopen(bad, "wb");
        REQUIRE(fp, "write");
        fwrite(b, 1, cases[k].keep ? cases[k].keep : len, fp);
        fclose(fp);
        rp_kld_reader *r = NULL;
        rp_status s = rp_kld_reader_open(bad, &r);
        CHECK(s != RP_OK && r == NULL && strstr(rp_last_error(), cases[k].msg) &&
                  strstr(rp_last_error(), bad),
              "%s: %s", cases[k].what, rp_last_error());
        rp_kld_reader_free(r);
    }
    /* llama.cpp's file is recognised and refused with the reason */
    memcpy(b, d, len);
    memcpy(b, "_logits_", 8);
    FILE *fp = fopen(bad, "wb");
    REQUIRE(fp, "write");
    fwrite(b, 1, len, fp);
    fclose(fp);
    rp_kld_reader *r = NULL;
    CHECK(rp_kld_reader_open(bad, &r) == RP_ERR_UNSUPPORTED && strstr(rp_last_error(), "llama.cpp"),
          "%s", rp_last_error());
    /* a corrupt row is found when its chunk is read */
    memcpy(b, d, len);
    const float nan = NAN;
    memcpy(b + 256 + 24 * 4 + (16 + 76) * 4 + 8, &nan, 4); /* chunk 2, row 1: lp_top */
    fp = fopen(bad, "wb");
    REQUIRE(fp, "write");
    fwrite(b, 1, len, fp);
    fclose(fp);
    REQUIRE(rp_kld_reader_open(bad, &r) == RP_OK, "%s", rp_last_error());
    const rp_kld_row *rows;
    CHECK(rp_kld_reader_chunk(r, 0, &rows) == RP_OK, "chunk 1 is fine");
    CHECK(rp_kld_reader_chunk(r, 1, &rows) == RP_ERR_FORMAT &&
              strstr(rp_last_error(), "chunk 2, row 1"),
          "%s", rp_last_error());
    rp_kld_reader_free(r);
    /* a bit of every header field flipped: an error or a valid file, never a crash */
    for (size_t off = 0; off < 96; off++)
        for (int k = 0; k < 2; k++) {
            memcpy(b, d, len);
            b[off] ^= (unsigned char)(1u << (k ? 7 : off % 7));
            fp = fopen(bad, "wb");
            REQUIRE(fp, "write");
            fwrite(b, 1, len, fp);
            fclose(fp);
            r = NULL;
            if (rp_kld_reader_open(bad, &r) == RP_OK) {
                const rp_kld_header *h = rp_kld_reader_header(r);
                for (uint32_t ch = 0; ch < h->n_chunk; ch++) rp_kld_reader_chunk(r, (int)ch, &rows);
            }
            rp_kld_reader_free(r);
        }
    free(b);
    free(d);
}

/* A model against itself: no divergence, the same top token everywhere, the
 * same perplexity; a plan moves it, as exact arithmetic says. */
void test_eval_kld_self_and_plan(void) {
    const char *path = test_tmp("stories.kld");
    const int c = 64, chunks = 4;
    rp_model *m;
    rp_context *ctx;
    REQUIRE(open_eval(STORIES, NULL, c, 2, 512, &m, &ctx), "open");
    size_t n, bytes;
    uint64_t hash;
    int32_t *toks = text_tokens(m, 8192, &n, &hash, &bytes);
    REQUIRE(toks, "tokenize");
    rp_eval_windows w;
    REQUIRE(rp_eval_windows_init(&w, m, n, c, chunks) == RP_OK, "%s", rp_last_error());
    collect base = {0};
    REQUIRE(collect_rows(&base, (size_t)chunks * (size_t)w.n_score, w.n_vocab), "alloc");
    REQUIRE(rp_kld_writer_open(path, &w, toks, bytes, hash, "stories260K", &base.writer) == RP_OK,
            "%s", rp_last_error());
    CHECK(rp_eval_run(ctx, toks, &w, 2, on_chunk, &base) == RP_OK, "%s", rp_last_error());
    CHECK(rp_kld_writer_commit(base.writer) == RP_OK, "%s", rp_last_error());
    rp_kld_writer_free(base.writer);
    base.writer = NULL;
    rp_context_free(ctx);

    for (int pass = 0; pass < 2; pass++) {
        const char *spec = pass ? "1,3" : NULL;
        rp_context_params cp = rp_context_default_params();
        cp.type_k = cp.type_v = RP_TYPE_F32;
        cp.n_ctx = (uint32_t)c;
        cp.n_seq_max = 3;
        cp.n_threads = 1;
        cp.repeat_layers = spec;
        REQUIRE(rp_context_new(m, &cp, &ctx) == RP_OK, "%s", rp_last_error());
        rp_kld_reader *r;
        REQUIRE(rp_kld_reader_open(path, &r) == RP_OK, "%s", rp_last_error());
        rp_kld_expect e = {.n_vocab = 512,
                           .add_bos = true,
                           .bos = 1,
                           .text_bytes = bytes,
                           .text_hash = hash,
                           .tokens = toks,
                           .n_tokens = n};
        CHECK(rp_kld_check(rp_kld_reader_header(r), rp_kld_reader_tokens(r), &e) == RP_OK, "%s",
              rp_last_error());
        rp_kld_acc acc;
        REQUIRE(rp_kld_acc_init(&acc, 512) == RP_OK, "acc");
        collect q = {0};
        REQUIRE(collect_rows(&q, base.n_rows, 512), "alloc");
        q.reader = r;
        q.kld = &acc;
        CHECK(rp_eval_run(ctx, rp_kld_reader_tokens(r), &w, 3, on_chunk, &q) == RP_OK, "%s",
              rp_last_error());
        rp_kld_stats st;
        REQUIRE(rp_kld_stats_compute(&acc, true, &st) == RP_OK, "stats");
        CHECK(st.count == base.n_rows, "count %zu", st.count);
        CHECK(rel_close(st.ppl_base.val, rp_ppl_value(&base.ppl), 1e-6),
              "PPL(base) %.6f, base run %.6f", st.ppl_base.val, rp_ppl_value(&base.ppl));
        if (!pass) {
            CHECK(st.kld.val < 1e-7 && st.kld_max < 1e-6, "self: mean KLD %.3g, max %.3g",
                  st.kld.val, st.kld_max);
            CHECK(st.same_top.val == 1.0, "self: same top %.4f", st.same_top.val);
            CHECK(rel_close(st.ppl.val, st.ppl_base.val, 1e-6) && fabs(st.ln_ratio.val) < 1e-7,
                  "self: PPL %.6f vs %.6f", st.ppl.val, st.ppl_base.val);
            CHECK(fabs(st.cor - 1.0) < 1e-6, "self: correlation %.8f", st.cor);
            CHECK(st.p_diff_rms.val < 1e-5, "self: RMS dp %.3g", st.p_diff_rms.val);
        } else {
            double sum = 0;
            size_t same = 0;
            for (size_t i = 0; i < q.n_rows; i++) {
                sum += exact_kld(base.logits + i * 512, q.logits + i * 512, 512);
                same += argmax(base.logits + i * 512, 512) == argmax(q.logits + i * 512, 512);
            }
            CHECK(st.kld.val > 0.01, "plan 1,3 moves the model: KLD %.6f", st.kld.val);
            CHECK(rel_close(st.kld.val, sum / (double)q.n_rows, 1e-3), "plan KLD %.8f, exact %.8f",
                  st.kld.val, sum / (double)q.n_rows);
            CHECK(acc.n_same_top == same && same < q.n_rows, "same top %zu, exact %zu",
                  acc.n_same_top, same);
            CHECK(st.ppl.val != st.ppl_base.val && st.cor < 1.0, "PPL moves");
        }
        collect_free(&q);
        rp_kld_acc_free(&acc);
        rp_kld_reader_free(r);
        rp_context_free(ctx);
    }
    collect_free(&base);
    free(toks);
    rp_model_free(m);
}
