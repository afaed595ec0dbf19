/* reprise scan (src/eval/scan.c, scan_csv.c, png_canvas.c, png_heatmap.c): decoding
 * a range of plan steps from given hidden states is bit for bit the whole
 * plan; the scan with prefix reuse gives the numbers of whole plans and of the
 * eval core; probes, the block list, the CSV and its refusals, the Pareto
 * list, the heatmap read back through libpng. */
#include "core/context.h"
#include "eval/eval.h"
#include "eval/png_canvas.h"
#include "eval/scan.h"
#include "test.h"
#include "base/util.h"

#include <math.h>
#include <png.h>
#include <string.h>

#define STORIES "models/stories260K.gguf"
#define QWEN35  "models/synth/qwen35-tiny.gguf"
#define TEXT    "text/war-and-peace.txt"

static rp_model *load(const char *rel) {
    rp_model *m = NULL;
    if (rp_model_load(test_shared(rel), NULL, &m)) fprintf(stderr, "  %s\n", rp_last_error());
    return m;
}

static rp_context *new_ctx(const rp_model *m, const char *spec, int n_ctx, int n_seq, int n_batch) {
    rp_context_params cp = rp_context_default_params();
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_seq_max = (uint32_t)n_seq;
    cp.n_batch = (uint32_t)n_batch;
    cp.n_threads = 1;
    cp.repeat_layers = spec;
    rp_context *c = NULL;
    if (rp_context_new(m, &cp, &c)) fprintf(stderr, "  %s\n", rp_last_error());
    return c;
}

/* The first bytes of the shared text, tokenized for evaluation. */
static int32_t *text_tokens(const rp_model *m, size_t bytes, size_t *n) {
    size_t len;
    char *text = test_read(test_shared(TEXT), &len);
    if (!text) return NULL;
    int32_t *t = NULL;
    if (rp_eval_tokenize(m, text, RP_MIN(len, bytes), &t, n))
        fprintf(stderr, "  %s\n", rp_last_error());
    free(text);
    return t;
}

/* ---- rp_decode_steps --------------------------------------------------------- */

/* A batch of two sequences of n tokens each, every row asking for logits. */
typedef struct two_seq {
    int32_t tok[2 * 48], pos[2 * 48], seq[2 * 48];
    int8_t want[2 * 48];
    rp_batch b;
} two_seq;

static void make_batch(two_seq *t, const int32_t *tokens, int n) {
    for (int k = 0; k < 2 * n; k++) {
        t->tok[k] = tokens[k];
        t->pos[k] = k % n;
        t->seq[k] = k / n;
        t->want[k] = 1;
    }
    t->b = (rp_batch){
        .n_tokens = 2 * n, .token = t->tok, .pos = t->pos, .seq_id = t->seq, .logits = t->want};
}

/* Logits of every row of a whole-plan decode. */
static float *whole_logits(rp_context *c, const rp_batch *b) {
    const int nv = rp_n_vocab(c);
    rp_kv_clear(c);
    if (rp_decode(c, b)) {
        fprintf(stderr, "  %s\n", rp_last_error());
        return NULL;
    }
    float *out = malloc((size_t)b->n_tokens * (size_t)nv * sizeof *out);
    for (int i = 0; out && i < b->n_tokens; i++)
        memcpy(out + (size_t)i * nv, rp_get_logits(c, i), (size_t)nv * 4);
    return out;
}

static bool rows_equal(rp_context *c, const float *want, int n_rows) {
    const int nv = rp_n_vocab(c);
    for (int i = 0; i < n_rows; i++)
        if (memcmp(rp_get_logits(c, i), want + (size_t)i * nv, (size_t)nv * sizeof(float)))
            return false;
    return true;
}

void test_scan_steps_bit_exact(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "stories260K");
    size_t n_tok;
    int32_t *tokens = text_tokens(m, 4096, &n_tok);
    REQUIRE(tokens && n_tok >= 96, "text");
    const int n = 40, E = rp_model_n_embd(m);
    two_seq t;
    make_batch(&t, tokens, n);
    float *h = malloc((size_t)2 * n * E * sizeof *h);
    /* micro-batches of 64 and of 16 tokens: a later micro-batch attends to the
     * cells an earlier one wrote in the same ranged call */
    const int batches[2] = {64, 16};
    for (int bi = 0; bi < 2; bi++) {
        rp_context *id = new_ctx(m, NULL, 48, 2, batches[bi]);
        rp_context *blk = new_ctx(m, "1,3", 48, 2, batches[bi]);
        REQUIRE(id && blk, "contexts");
        float *want_id = whole_logits(id, &t.b), *want_blk = whole_logits(blk, &t.b);
        REQUIRE(want_id && want_blk, "whole plans");
        /* identity: steps [0,2) then [2,5) */
        rp_kv_clear(id);
        CHECK(rp_decode_steps(id, &t.b, 0, 2, NULL, h) == RP_OK, "%s", rp_last_error());
        CHECK(rp_get_logits(id, 0) == NULL, "a range short of the last step produces no logits");
        rp_kv_clear(id);
        CHECK(rp_decode_steps(id, &t.b, 2, 5, h, NULL) == RP_OK, "%s", rp_last_error());
        CHECK(rows_equal(id, want_id, 2 * n),
              "identity [0,2)+[2,5) differs from the whole plan (n_batch %d)", batches[bi]);
        /* block 1,3 (steps 0 1 2 | 1 2 | 3 4): the identity's prefix through layer 2,
         * advanced in place one step at a time, then the block from its step 3 */
        rp_kv_clear(id);
        CHECK(rp_decode_steps(id, &t.b, 0, 1, NULL, h) == RP_OK, "%s", rp_last_error());
        for (int e = 1; e < 3; e++) {
            rp_kv_clear(id);
            CHECK(rp_decode_steps(id, &t.b, e, e + 1, h, h) == RP_OK, "%s", rp_last_error());
        }
        rp_kv_clear(blk);
        CHECK(rp_decode_steps(blk, &t.b, 3, rp_context_n_eff(blk), h, NULL) == RP_OK, "%s",
              rp_last_error());
        CHECK(rows_equal(blk, want_blk, 2 * n),
              "block 1,3 from the identity prefix differs (n_batch %d)", batches[bi]);
        /* the whole range through rp_decode_steps is rp_decode */
        rp_kv_clear(blk);
        CHECK(rp_decode_steps(blk, &t.b, 0, rp_context_n_eff(blk), NULL, NULL) == RP_OK, "%s",
              rp_last_error());
        CHECK(rows_equal(blk, want_blk, 2 * n),
              "rp_decode_steps over every step differs from rp_decode");
        free(want_id);
        free(want_blk);
        rp_context_free(id);
        rp_context_free(blk);
    }
    free(h);
    free(tokens);
    rp_model_free(m);
}

void test_scan_steps_refusals(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "stories260K");
    rp_context *c = new_ctx(m, NULL, 16, 1, 16);
    REQUIRE(c, "context");
    int32_t tok[4] = {1, 2, 3, 4};
    rp_batch b = {.n_tokens = 4, .token = tok};
    float h[4 * 64];
    CHECK(rp_decode_steps(c, &b, 2, 2, h, h) == RP_ERR_INVALID_ARG, "empty range accepted");
    CHECK(strstr(rp_last_error(), "[2, 2)"), "message: %s", rp_last_error());
    CHECK(rp_decode_steps(c, &b, 0, 6, NULL, NULL) == RP_ERR_INVALID_ARG,
          "range past the plan accepted");
    CHECK(rp_decode_steps(c, &b, 1, 5, NULL, NULL) == RP_ERR_INVALID_ARG,
          "no input hidden states accepted");
    CHECK(strstr(rp_last_error(), "input hidden states"), "message: %s", rp_last_error());
    CHECK(rp_decode_steps(c, &b, 0, 2, NULL, NULL) == RP_ERR_INVALID_ARG,
          "no destination accepted");
    CHECK(rp_decode_steps(c, &b, 0, 5, NULL, h) == RP_ERR_INVALID_ARG,
          "hidden destination at the last step");
    CHECK(rp_decode_steps(c, &b, 0, 2, h, h) == RP_ERR_INVALID_ARG,
          "hidden input at step 0 accepted");
    CHECK(rp_kv_seq_len(c, 0) == 0, "a refused call changed the cache");
    rp_context_free(c);
    rp_model_free(m);
    /* an architecture whose forward runs whole plans only */
    m = load(QWEN35);
    REQUIRE(m, "qwen35-tiny");
    c = new_ctx(m, NULL, 16, 1, 16);
    REQUIRE(c, "context");
    CHECK(rp_decode_steps(c, &b, 0, 2, NULL, h) == RP_ERR_UNSUPPORTED, "qwen35 ranges accepted");
    CHECK(strstr(rp_last_error(), "qwen35"), "message names the architecture: %s", rp_last_error());
    rp_context_free(c);
    rp_model_free(m);
}

/* ---- the scan against the eval core and whole plans ------------------------- */

typedef struct core_acc {
    rp_ppl_acc ppl;
    rp_kld_writer *writer;
    rp_kld_reader *reader;
    rp_kld_acc kld;
    int n_vocab;
} core_acc;

static rp_status core_chunk(const rp_eval_chunk *ch, void *user) {
    core_acc *a = user;
    const rp_kld_row *rows = NULL;
    rp_status s;
    if (a->writer && (s = rp_kld_writer_add(a->writer, ch))) return s;
    if (a->reader && (s = rp_kld_reader_chunk(a->reader, ch->index, &rows))) return s;
    for (int j = 0; j < ch->n_score; j++) {
        rp_ppl_add(&a->ppl, rp_eval_nll(ch->logits[j], a->n_vocab, ch->target[j]));
        if (rows && (s = rp_kld_add(&a->kld, ch->logits[j], &rows[j], ch->target[j], NULL)))
            return s;
    }
    return RP_OK;
}

static rp_scan *new_scan(const rp_model *m, const rp_scan_set *set, rp_scan_metric metric,
                         bool reuse, int n_batch) {
    rp_scan_params p = {.metric = metric,
                        .n_threads = 1,
                        .type_k = RP_TYPE_F32,
                        .type_v = RP_TYPE_F32,
                        .n_batch = n_batch,
                        .reuse = reuse};
    rp_scan *s = NULL;
    if (rp_scan_new(m, set, &p, &s)) fprintf(stderr, "  %s\n", rp_last_error());
    return s;
}

void test_scan_matches_eval_core(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "stories260K");
    size_t n_tok;
    int32_t *tokens = text_tokens(m, 8192, &n_tok);
    REQUIRE(tokens, "text");
    rp_eval_windows w;
    REQUIRE(rp_eval_windows_init(&w, m, n_tok, 64, 4) == RP_OK, "%s", rp_last_error());
    rp_scan_set set;
    REQUIRE(rp_scan_set_text(&set, tokens, &w, 128) == RP_OK, "%s", rp_last_error());
    CHECK(set.n_seq == 4 && set.n_group == 2 && set.max_group == 2 && set.max_dec == 63,
          "set: %d seqs, %d groups", set.n_seq, set.n_group);
    CHECK(set.n_scored == 4 * (size_t)w.n_score, "scored rows %zu", set.n_scored);
    /* the eval core: identity perplexity and its base file; block 1,3's perplexity and KLD */
    const char *base = test_tmp("scan-core.kld");
    core_acc id = {.n_vocab = w.n_vocab}, blk = {.n_vocab = w.n_vocab};
    rp_context *c = new_ctx(m, NULL, 64, 2, 128);
    REQUIRE(c, "context");
    REQUIRE(rp_kld_writer_open(base, &w, tokens, 1, 1, "identity", &id.writer) == RP_OK, "%s",
            rp_last_error());
    REQUIRE(rp_eval_run(c, tokens, &w, 2, core_chunk, &id) == RP_OK, "%s", rp_last_error());
    REQUIRE(rp_kld_writer_commit(id.writer) == RP_OK, "%s", rp_last_error());
    rp_kld_writer_free(id.writer);
    rp_context_free(c);
    c = new_ctx(m, "1,3", 64, 2, 128);
    REQUIRE(c, "context");
    REQUIRE(rp_kld_reader_open(base, &blk.reader) == RP_OK, "%s", rp_last_error());
    REQUIRE(rp_kld_acc_init(&blk.kld, w.n_vocab) == RP_OK, "kld");
    REQUIRE(rp_eval_run(c, tokens, &w, 2, core_chunk, &blk) == RP_OK, "%s", rp_last_error());
    rp_kld_reader_free(blk.reader);
    rp_context_free(c);
    rp_kld_stats st;
    REQUIRE(rp_kld_stats_compute(&blk.kld, false, &st) == RP_OK, "stats");
    rp_kld_acc_free(&blk.kld);
    const double core_id = rp_ppl_value(&id.ppl), core_blk = rp_ppl_value(&blk.ppl);

    for (int reuse = 0; reuse < 2; reuse++) {
        rp_scan *s = new_scan(m, &set, RP_SCAN_PPL, reuse, 128);
        REQUIRE(s, "scan");
        CHECK(rp_scan_reusing(s) == (reuse != 0), "reuse %d", reuse);
        rp_scan_result r;
        CHECK(rp_scan_block_eval(s, 1, 3, &r) == RP_ERR_INVALID_ARG, "a block before the identity");
        REQUIRE(rp_scan_identity(s, &r) == RP_OK, "%s", rp_last_error());
        CHECK(r.value == core_id && r.delta == 0, "identity %.12g, eval core %.12g", r.value,
              core_id);
        CHECK(r.unc == rp_ppl_uncertainty(&id.ppl), "uncertainty");
        REQUIRE(rp_scan_block_eval(s, 1, 3, &r) == RP_OK, "%s", rp_last_error());
        CHECK(r.value == core_blk, "block 1,3: %.12g, eval core %.12g (reuse %d)", r.value,
              core_blk, reuse);
        CHECK(r.delta == core_blk - core_id, "delta");
        CHECK(rp_scan_block_eval(s, 3, 3, &r) == RP_ERR_INVALID_ARG, "empty block");
        CHECK(rp_scan_block_eval(s, 2, 6, &r) == RP_ERR_INVALID_ARG, "block past the layers");
        rp_scan_free(s);
        s = new_scan(m, &set, RP_SCAN_KLD, reuse, 128);
        REQUIRE(s, "scan");
        REQUIRE(rp_scan_identity(s, &r) == RP_OK, "%s", rp_last_error());
        CHECK(r.value == 0, "identity KLD %g", r.value);
        REQUIRE(rp_scan_block_eval(s, 1, 3, &r) == RP_OK, "%s", rp_last_error());
        CHECK(r.value == st.kld.val && r.unc == st.kld.unc && r.delta == r.value,
              "block 1,3 KLD %.12g, eval core %.12g", r.value, st.kld.val);
        CHECK(r.value > 0.01, "a repeated block moves the distributions: %g", r.value);
        const uint64_t mem_bytes = rp_scan_bytes(s);
        rp_scan_free(s);
        /* the identity's distributions in a temporary file instead of memory */
        rp_scan_params pf = {.metric = RP_SCAN_KLD,
                             .n_threads = 1,
                             .type_k = RP_TYPE_F32,
                             .type_v = RP_TYPE_F32,
                             .n_batch = 128,
                             .reuse = reuse,
                             .kld_mem_max = 1};
        REQUIRE(rp_scan_new(m, &set, &pf, &s) == RP_OK, "%s", rp_last_error());
        /* one sequence's rows (31 at c = 64) stay in memory instead of all of them */
        const uint64_t rb = rp_kld_row_bytes(w.n_vocab);
        CHECK(rp_scan_bytes(s) + (set.n_scored - 31) * rb == mem_bytes,
              "%llu bytes, %llu in memory", (unsigned long long)rp_scan_bytes(s),
              (unsigned long long)mem_bytes);
        REQUIRE(rp_scan_identity(s, &r) == RP_OK, "%s", rp_last_error());
        REQUIRE(rp_scan_block_eval(s, 1, 3, &r) == RP_OK, "%s", rp_last_error());
        CHECK(r.value == st.kld.val, "block 1,3 KLD from a file %.12g, eval core %.12g", r.value,
              st.kld.val);
        rp_scan_free(s);
        /* nowhere to put the file: refused with the path and the way out */
        const char *tmpdir = getenv("TMPDIR");
        char *saved = tmpdir ? strdup(tmpdir) : NULL;
        setenv("TMPDIR", "/nonexistent-reprise-dir", 1);
        CHECK(rp_scan_new(m, &set, &pf, &s) == RP_ERR_IO && strstr(rp_last_error(), "set TMPDIR") &&
                  strstr(rp_last_error(), "/nonexistent-reprise-dir/"),
              "%s", rp_last_error());
        if (saved)
            setenv("TMPDIR", saved, 1);
        else
            unsetenv("TMPDIR");
        free(saved);
    }
    rp_scan_set_free(&set);
    free(tokens);
    rp_model_free(m);
}

static bool on_cancel(float f, void *user) {
    (void)f;
    int *calls = user;
    return --*calls > 0;
}

void test_scan_reuse_equals_whole_plans(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "stories260K");
    size_t n_tok;
    int32_t *tokens = text_tokens(m, 4096, &n_tok);
    REQUIRE(tokens, "text");
    rp_eval_windows w;
    REQUIRE(rp_eval_windows_init(&w, m, n_tok, 32, 3) == RP_OK, "%s", rp_last_error());
    rp_scan_set set;
    REQUIRE(rp_scan_set_text(&set, tokens, &w, 16) == RP_OK, "%s",
            rp_last_error()); /* micro-batches of 16 */
    rp_scan_block *blocks;
    int nb;
    REQUIRE(rp_scan_blocks(5, 0, 5, 0, &blocks, &nb) == RP_OK && nb == 15, "blocks");
    double whole[15], steps_whole = 0;
    rp_scan_result r;
    rp_scan *s = new_scan(m, &set, RP_SCAN_PPL, false, 16);
    REQUIRE(s && rp_scan_identity(s, &r) == RP_OK, "identity");
    for (int k = 0; k < nb; k++) {
        REQUIRE(rp_scan_block_eval(s, blocks[k].i, blocks[k].j, &r) == RP_OK, "%s",
                rp_last_error());
        whole[k] = r.value;
    }
    steps_whole = (double)rp_scan_steps_run(s);
    rp_scan_free(s);
    /* in the scan's order: each prefix advanced once */
    s = new_scan(m, &set, RP_SCAN_PPL, true, 16);
    REQUIRE(s && rp_scan_identity(s, &r) == RP_OK, "identity");
    for (int k = 0; k < nb; k++) {
        REQUIRE(rp_scan_block_eval(s, blocks[k].i, blocks[k].j, &r) == RP_OK, "%s",
                rp_last_error());
        CHECK(r.value == whole[k], "block %d,%d: %.12g with reuse, %.12g whole", blocks[k].i,
              blocks[k].j, r.value, whole[k]);
    }
    /* layer steps per token: 5 + sum(5 + j - i) whole; 5 + sum(5 - i) + 5 (the prefixes) with reuse
     */
    const double rows = (double)set.n_rows;
    CHECK(steps_whole == rows * (5 + 75 + 35), "whole plans ran %g steps", steps_whole / rows);
    CHECK((double)rp_scan_steps_run(s) == rows * (5 + 55 + 5), "reuse ran %g steps",
          rp_scan_steps_run(s) / rows);
    /* out of order: a shorter prefix restarts from the tokens; the same numbers */
    const int order[5] = {14, 2, 3, 9, 0};
    for (int k = 0; k < 5; k++) {
        const rp_scan_block *b = &blocks[order[k]];
        REQUIRE(rp_scan_block_eval(s, b->i, b->j, &r) == RP_OK, "%s", rp_last_error());
        CHECK(r.value == whole[order[k]], "block %d,%d out of order", b->i, b->j);
    }
    rp_scan_free(s);
    /* cancelled while advancing a prefix: the next block starts over and is right */
    int calls = 2;
    rp_scan_params p = {.metric = RP_SCAN_PPL,
                        .n_threads = 1,
                        .type_k = RP_TYPE_F32,
                        .type_v = RP_TYPE_F32,
                        .n_batch = 16,
                        .reuse = true,
                        .progress = on_cancel,
                        .progress_user = &calls};
    REQUIRE(rp_scan_new(m, &set, &p, &s) == RP_OK, "%s", rp_last_error());
    calls = 1000;
    REQUIRE(rp_scan_identity(s, &r) == RP_OK, "%s", rp_last_error());
    calls = 2; /* stops after the second group of the advance */
    CHECK(rp_scan_block_eval(s, 2, 4, &r) == RP_ERR_CANCELLED, "not cancelled");
    calls = 1000;
    REQUIRE(rp_scan_block_eval(s, 2, 4, &r) == RP_OK, "%s", rp_last_error());
    CHECK(r.value == whole[8], "block 2,4 after a cancel: %.12g, want %.12g", r.value, whole[8]);
    rp_scan_free(s);
    free(blocks);
    rp_scan_set_free(&set);
    free(tokens);
    rp_model_free(m);
}

void test_scan_without_ranges(void) {
    /* qwen35 runs whole plans only: the scan still works, without reuse */
    rp_model *m = load(QWEN35);
    REQUIRE(m, "qwen35-tiny");
    size_t n_tok;
    int32_t *tokens = text_tokens(m, 2048, &n_tok);
    REQUIRE(tokens, "text");
    rp_eval_windows w;
    REQUIRE(rp_eval_windows_init(&w, m, n_tok, 16, 2) == RP_OK, "%s", rp_last_error());
    rp_scan_set set;
    REQUIRE(rp_scan_set_text(&set, tokens, &w, 32) == RP_OK, "%s", rp_last_error());
    rp_scan *s = new_scan(m, &set, RP_SCAN_PPL, true, 32);
    REQUIRE(s, "scan");
    CHECK(!rp_scan_reusing(s), "qwen35 cannot reuse prefixes");
    rp_scan_result r;
    REQUIRE(rp_scan_identity(s, &r) == RP_OK, "%s", rp_last_error());
    const double id = r.value;
    REQUIRE(rp_scan_block_eval(s, 3, 5, &r) == RP_OK, "%s", rp_last_error());
    rp_scan_free(s);
    /* against the eval core on the same plan */
    core_acc a = {.n_vocab = w.n_vocab};
    rp_context *c = new_ctx(m, "3,5", 16, 2, 32);
    REQUIRE(c, "context");
    REQUIRE(rp_eval_run(c, tokens, &w, 2, core_chunk, &a) == RP_OK, "%s", rp_last_error());
    CHECK(r.value == rp_ppl_value(&a.ppl) && r.delta == r.value - id,
          "qwen35 block 3,5: %.12g vs %.12g", r.value, rp_ppl_value(&a.ppl));
    rp_context_free(c);
    rp_scan_set_free(&set);
    free(tokens);
    rp_model_free(m);
}

/* ---- probes ------------------------------------------------------------------ */

/* log p(answer | prompt) computed by hand: one sequence, one decode. */
static double answer_lp(const rp_model *m, const char *prompt, const char *answer) {
    int32_t *p = NULL, *w = NULL;
    size_t np = 0, nw = 0;
    char joined[512];
    snprintf(joined, sizeof joined, "%s%s", prompt, answer);
    rp_tokenize(rp_model_vocab(m), prompt, strlen(prompt), true, false, &p, &np);
    rp_tokenize(rp_model_vocab(m), joined, strlen(joined), true, false, &w, &nw);
    size_t split = 0;
    while (split < np && split < nw && p[split] == w[split]) split++;
    rp_context *c = new_ctx(m, NULL, 64, 1, 64);
    int8_t want[64] = {0};
    for (size_t k = split - 1; k + 1 < nw; k++) want[k] = 1;
    rp_batch b = {.n_tokens = (int32_t)nw - 1, .token = w, .logits = want};
    double lp = 0;
    if (c && rp_decode(c, &b) == RP_OK)
        for (size_t k = split - 1; k + 1 < nw; k++)
            lp -= rp_eval_nll(rp_get_logits(c, (int)k), rp_n_vocab(c), w[k + 1]);
    else
        lp = NAN;
    rp_context_free(c);
    free(p);
    free(w);
    return lp;
}

void test_scan_probes(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "stories260K");
    const char *jsonl =
        "{\"prompt\": \"Once upon a time, there was a little\", \"answer\": \" girl\"}\n"
        "\n"
        "  {\"prompt\": \"The cat sat on the\", \"choices\": [\" mat\", \" sky\", \" idea\"], "
        "\"answer\": 0}\r\n"
        "{\"prompt\": \"Lily liked to\", \"choices\": [\" play\", \" run\"], \"answer\": \" run\"}";
    rp_scan_set set;
    REQUIRE(rp_scan_set_probes(&set, m, jsonl, strlen(jsonl), "p.jsonl", 512) == RP_OK, "%s",
            rp_last_error());
    CHECK(set.n_items == 3 && set.n_choice_items == 2 && set.n_seq == 6, "%d items, %d seqs",
          set.n_items, set.n_seq);
    CHECK(set.items[1].line == 3 && set.items[1].n_choices == 3 && set.items[1].answer == 0,
          "item 2");
    CHECK(set.items[2].answer == 1 && set.items[2].first_seq == 4, "item 3 answer by text");
    CHECK(set.n_group == 1 && set.max_group == 6, "one group of six sequences");
    rp_scan *s = new_scan(m, &set, RP_SCAN_PROBE, true, 512);
    REQUIRE(s, "scan");
    rp_scan_result r;
    REQUIRE(rp_scan_identity(s, &r) == RP_OK, "%s", rp_last_error());
    const double g = answer_lp(m, "Once upon a time, there was a little", " girl");
    const double c0 = answer_lp(m, "The cat sat on the", " mat"),
                 c1 = answer_lp(m, "The cat sat on the", " sky"),
                 c2 = answer_lp(m, "The cat sat on the", " idea");
    const double d0 = answer_lp(m, "Lily liked to", " play"),
                 d1 = answer_lp(m, "Lily liked to", " run");
    const double mc1 = c0 - log(exp(c0) + exp(c1) + exp(c2)), mc2 = d1 - log(exp(d0) + exp(d1));
    const double want = (g + mc1 + mc2) / 3;
    CHECK(fabs(r.value - want) <= 1e-9 * fabs(want), "probe score %.12g, by hand %.12g", r.value,
          want);
    const double acc = ((c0 > c1 && c0 > c2) + (d1 > d0)) / 2.0;
    CHECK(r.accuracy == acc, "accuracy %g, by hand %g", r.accuracy, acc);
    CHECK(g > -5 && g < 0, "stories260K knows its little girl: %g", g);
    /* a block changes the score; reuse changes nothing */
    rp_scan_result a, b;
    REQUIRE(rp_scan_block_eval(s, 2, 4, &a) == RP_OK, "%s", rp_last_error());
    rp_scan_free(s);
    s = new_scan(m, &set, RP_SCAN_PROBE, false, 512);
    REQUIRE(s && rp_scan_identity(s, &r) == RP_OK && rp_scan_block_eval(s, 2, 4, &b) == RP_OK,
            "whole plans");
    CHECK(a.value == b.value && a.delta == b.value - r.value && a.delta != 0,
          "probe block 2,4: %.12g vs %.12g", a.value, b.value);
    rp_scan_free(s);
    rp_scan_set_free(&set);
    /* a probe file and the metric must go together */
    const char *text = "{\"prompt\": \"a\", \"answer\": \" b\"}\n";
    REQUIRE(rp_scan_set_probes(&set, m, text, strlen(text), "q.jsonl", 64) == RP_OK, "%s",
            rp_last_error());
    rp_scan_params p = {.metric = RP_SCAN_PPL, .type_k = RP_TYPE_F32, .type_v = RP_TYPE_F32};
    CHECK(rp_scan_new(m, &set, &p, &s) == RP_ERR_INVALID_ARG, "ppl over probes accepted");
    rp_scan_set_free(&set);
    rp_model_free(m);
}

void test_scan_probe_refusals(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "stories260K");
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"prompt\": \"a\", \"answer\": \" b\"}\n{\"prompt\": \"a\" \"answer\": 1}\n",
         "p.jsonl:2: not a JSON"},
        {"[1, 2]\n", "p.jsonl:1: a probe is a JSON object"},
        {"{\"prompt\": \"a\"}\n", "p.jsonl:1: no \"answer\""},
        {"{\"prompt\": 3, \"answer\": \"b\"}\n", "\"prompt\" must be a string"},
        {"{\"prompt\": \"a\", \"answer\": \"\"}\n", "p.jsonl:1: the answer is empty"},
        {"{\"prompt\": \"a\", \"answer\": \" b\", \"label\": 1}\n", "unknown key \"label\""},
        {"{\"prompt\": \"a\", \"choices\": [\" b\"], \"answer\": 0}\n", "2 to 64 strings"},
        {"{\"prompt\": \"a\", \"choices\": [\" b\", \" c\"], \"answer\": 2}\n",
         "not a choice index"},
        {"{\"prompt\": \"a\", \"choices\": [\" b\", \" c\"], \"answer\": \" d\"}\n",
         "none of the choices"},
        {"{\"prompt\": \"a\", \"choices\": [\" b\", 7], \"answer\": 0}\n",
         "choice 1 is not a string"},
        {"{\"prompt\": \"a\", \"choices\": [\" b\", \" b\"], \"answer\": \" b\"}\n",
         "matches choices 0 and 1"},
        {"{\"prompt\": \"a\", \"answer\": \" b\", \"prompt\": \"c\"}\n", "p.jsonl:1: not a JSON"},
        {"\n \n", "p.jsonl: no probes"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        rp_scan_set set;
        rp_status s = rp_scan_set_probes(&set, m, bad[k].text, strlen(bad[k].text), "p.jsonl", 64);
        CHECK(s == RP_ERR_FORMAT && strstr(rp_last_error(), bad[k].want),
              "case %zu: status %d, '%s'", k, s, rp_last_error());
        CHECK(set.n_seq == 0 && set.tok == NULL, "case %zu left a set behind", k);
    }
    rp_model_free(m);
}

/* ---- blocks, CSV, Pareto -------------------------------------------------------- */

void test_scan_blocks(void) {
    rp_scan_block *b;
    int n;
    REQUIRE(rp_scan_blocks(12, 0, 12, 0, &b, &n) == RP_OK, "%s", rp_last_error());
    CHECK(n == 78, "12 layers: %d blocks", n);
    bool ordered = true;
    for (int k = 1; k < n; k++)
        ordered &= b[k].j > b[k - 1].j || (b[k].j == b[k - 1].j && b[k].i > b[k - 1].i);
    CHECK(ordered && b[0].i == 0 && b[0].j == 1 && b[n - 1].i == 11 && b[n - 1].j == 12, "order");
    free(b);
    REQUIRE(rp_scan_blocks(12, 2, 10, 3, &b, &n) == RP_OK, "%s", rp_last_error());
    int want = 0;
    for (int j = 3; j <= 10; j++)
        for (int i = 2; i < j; i++) want += j - i <= 3;
    CHECK(n == want && n == 21, "range 2..10, at most 3 extra: %d blocks", n);
    for (int k = 0; k < n; k++)
        CHECK(b[k].i >= 2 && b[k].j <= 10 && b[k].j - b[k].i <= 3, "block %d", k);
    free(b);
    CHECK(rp_scan_blocks(12, 4, 4, 0, &b, &n) == RP_ERR_INVALID_ARG, "empty range");
    CHECK(rp_scan_blocks(12, 0, 13, 0, &b, &n) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "--end 13"),
          "range past the layers: %s", rp_last_error());
    CHECK(rp_scan_blocks(12, 0, 12, -1, &b, &n) == RP_ERR_INVALID_ARG, "negative budget");
}

static bool write_file(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return false;
    fputs(text, fp);
    return fclose(fp) == 0;
}

void test_scan_csv(void) {
    rp_scan_csv a = {0};
    REQUIRE(rp_scan_csv_set(&a, "model", true, "m.gguf, %d bytes", 1234) == RP_OK, "set");
    REQUIRE(rp_scan_csv_set(&a, "c", true, "%d", 128) == RP_OK, "set");
    REQUIRE(rp_scan_csv_set(&a, "metric", true, "ppl") == RP_OK, "set");
    REQUIRE(rp_scan_csv_set(&a, "identity", false, "%.10g", 54.288024) == RP_OK, "set");
    CHECK(rp_scan_csv_set(&a, "bad:key", true, "x") == RP_ERR_INVALID_ARG, "a key with ':'");
    rp_scan_row r1 = {3, 5, 2, 54.1, -0.188024, 0.25, ""},
                r2 = {0, 12, 12, 1e6, 999945.711976, 1.5, ""};
    REQUIRE(rp_scan_csv_add(&a, &r1) == RP_OK && rp_scan_csv_add(&a, &r2) == RP_OK, "rows");
    CHECK(rp_scan_csv_add(&a, &r1) == RP_ERR_INVALID_ARG, "a block twice");
    const char *path = test_tmp("scan.csv");
    REQUIRE(rp_scan_csv_write(path, &a) == RP_OK, "%s", rp_last_error());
    rp_scan_csv b;
    REQUIRE(rp_scan_csv_read(path, &b) == RP_OK, "%s", rp_last_error());
    CHECK(b.n_rows == 2 && b.rows[0].i == 3 && b.rows[0].j == 5 && b.rows[0].delta == -0.188024,
          "rows back");
    CHECK(b.rows[1].value == 1e6 && b.rows[1].seconds == 1.5, "row 2 back");
    CHECK(!strcmp(b.rows[0].plan, "3-5") && rp_scan_csv_find(&b, 3, 5) == &b.rows[0] &&
              rp_scan_csv_find_plan(&b, "0-12") == &b.rows[1] && !rp_scan_csv_find(&b, 3, 6),
          "plans back: '%s'", b.rows[0].plan);
    CHECK(!strcmp(rp_scan_csv_get(&b, "identity"), "54.288024") && !strcmp(b.metric, "ppl"),
          "settings back");
    CHECK(rp_scan_csv_check(&b, &a, path) == RP_OK, "%s", rp_last_error());
    /* a run with other settings is refused, naming the setting */
    rp_scan_csv_set(&a, "c", true, "64");
    CHECK(rp_scan_csv_check(&b, &a, path) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "c '128'") && strstr(rp_last_error(), "c '64'"),
          "%s", rp_last_error());
    rp_scan_csv_set(&a, "c", true, "128");
    rp_scan_csv_set(&a, "chunks", true, "40");
    CHECK(rp_scan_csv_check(&b, &a, path) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "no 'chunks' setting"),
          "%s", rp_last_error());
    rp_scan_csv_free(&b);
    rp_scan_csv_free(&a);
    /* malformed files: the line and the reason */
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"i,j,extra,metric,value,delta,seconds\n", ":1: not a reprise scan CSV"},
        {"# reprise scan 1\n# metric: ppl\n", "no column names line"},
        {"# reprise scan 1\ni,j,extra,metric,value,delta,seconds\n", "no '# metric:' setting"},
        {"# reprise scan 1\n# metric: ppl\n#metric ppl\n", ":3: a setting reads"},
        {"# reprise scan 1\n# metric: ppl\n# metric: kld\n", ":3: setting 'metric' given twice"},
        {"# reprise scan 1\n# metric: ppl\ni,j,metric\n", ":3: expected the column names"},
        {"# reprise scan 1\n# metric: ppl\ni,j,extra,metric,value,delta,seconds\n1,3,2,kld,1,1,1\n",
         ":4: metric 'kld' differs"},
        {"# reprise scan 1\n# metric: ppl\ni,j,extra,metric,value,delta,seconds\n1,3,1,ppl,1,1,1\n",
         ":4: block 1,3 with 1 extra layers"},
        {"# reprise scan 1\n# metric: ppl\ni,j,extra,metric,value,delta,seconds\n1,3,2,ppl,1,x,1\n",
         ":4: value, delta and seconds must be numbers"},
        {"# reprise scan 1\n# metric: "
         "ppl\ni,j,extra,metric,value,delta,seconds\n1,3,2,ppl,1,1,1,9\n",
         ":4: value, delta and seconds"},
        {"# reprise scan 1\n# metric: "
         "ppl\ni,j,extra,metric,value,delta,seconds\n-1,3,4,ppl,1,1,1\n",
         ":4: i, j and extra must be layer numbers"},
        {"# reprise scan 1\n# metric: "
         "ppl\ni,j,extra,metric,value,delta,seconds\n1,3,2,ppl,1,1,1\n1,3,2,ppl,2,2,2\n",
         ":5: plan 1-3 appears twice"},
        /* version 2: the plan column */
        {"# reprise scan 2\n# metric: ppl\ni,j,extra,metric,value,delta,seconds\n",
         ":3: expected the column names 'i,j,extra,metric,value,delta,seconds,plan'"},
        {"# reprise scan 2\n# metric: ppl\ni,j,extra,metric,value,delta,seconds,plan\n"
         "1,3,2,ppl,1,1,1\n",
         ":4: value, delta and seconds must be numbers (8 columns)"},
        {"# reprise scan 2\n# metric: ppl\ni,j,extra,metric,value,delta,seconds,plan\n"
         "1,3,4,ppl,1,1,1,1-3;4-5\n",
         ":4: plan '1-3;4-5' does not hold block 1,3 with 4 extra layers"},
        {"# reprise scan 2\n# metric: ppl\ni,j,extra,metric,value,delta,seconds,plan\n"
         "1,3,3,ppl,1,1,1,4-5;1-3\n",
         "(written as '1-3;4-5')"},
        {"# reprise scan 2\n# metric: ppl\ni,j,extra,metric,value,delta,seconds,plan\n"
         "1,3,2,ppl,1,1,1,0-1\n",
         "does not hold block 1,3"},
        {"# reprise scan 2\n# metric: ppl\ni,j,extra,metric,value,delta,seconds,plan\n"
         "1,3,4,ppl,1,1,1,1-3;2-4\n",
         ":4: plan '1-3;2-4' is not a plan of disjoint blocks"},
        {"# reprise scan 1\n# metric: "
         "ppl\ni,j,extra,metric,value,delta,seconds\n1,3,2,ppl,1,1,nan\n",
         ":4: value, delta"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        REQUIRE(write_file(path, bad[k].text), "write");
        rp_status s = rp_scan_csv_read(path, &b);
        CHECK(s == RP_ERR_FORMAT && strstr(rp_last_error(), bad[k].want), "case %zu: %d '%s'", k, s,
              rp_last_error());
        CHECK(b.n_rows == 0 && b.n_meta == 0, "case %zu left rows behind", k);
    }
    CHECK(rp_scan_csv_read(test_tmp("absent.csv"), &b) == RP_ERR_IO, "absent file");
    /* a plan whose arithmetic overflowed is a result: nan and inf read back */
    REQUIRE(write_file(path,
                       "# reprise scan 1\n# metric: ppl\ni,j,extra,metric,value,delta,seconds\n"
                       "1,3,2,ppl,nan,-nan,1\n2,3,1,ppl,inf,inf,0.5\n"),
            "write");
    REQUIRE(rp_scan_csv_read(path, &b) == RP_OK, "%s", rp_last_error());
    CHECK(b.n_rows == 2 && isnan(b.rows[0].value) && isnan(b.rows[0].delta) &&
              isinf(b.rows[1].delta),
          "nan, inf");
    int best[2];
    bool front[2];
    rp_scan_pareto(b.rows, b.n_rows, -1, 1, best, front);
    CHECK(best[1] == -1 && !front[1], "a non-finite block is nobody's best");
    rp_scan_csv_free(&b);
}

void test_scan_pareto(void) {
    /* ppl deltas: lower is better */
    const rp_scan_row rows[] = {
        {4, 5, 1, 0, +0.50, 0, ""}, {5, 6, 1, 0, -0.20, 0, ""}, {3, 5, 2, 0, -0.10, 0, ""},
        {2, 5, 3, 0, -0.90, 0, ""}, {1, 5, 4, 0, -0.40, 0, ""}, {0, 6, 6, 0, -1.50, 0, ""},
    };
    int best[7];
    bool front[7];
    rp_scan_pareto(rows, 6, -1, 6, best, front);
    CHECK(best[1] == 1 && best[2] == 2 && best[3] == 3 && best[4] == 4 && best[5] == -1 &&
              best[6] == 5,
          "best");
    CHECK(front[1] && !front[2] && front[3] && !front[4] && !front[5] && front[6], "front");
    /* probe: higher is better; nothing beats the identity, nothing is on the front */
    const rp_scan_row worse[] = {{0, 1, 1, 0, -0.5, 0, ""}, {0, 2, 2, 0, -0.1, 0, ""}};
    rp_scan_pareto(worse, 2, +1, 2, best, front);
    CHECK(best[1] == 0 && best[2] == 1 && !front[1] && !front[2], "front above the identity only");
}

/* ---- heatmap --------------------------------------------------------------------- */

void test_scan_font(void) {
    for (char ch = 33; ch < 127; ch++) {
        int on = 0;
        for (int r = 0; r < RP_FONT_H; r++)
            for (int c = 0; c < RP_FONT_W; c++) on += rp_font_pixel(ch, c, r);
        CHECK(on >= 2, "glyph '%c' is empty", ch);
    }
    for (int r = 0; r < RP_FONT_H; r++)
        for (int c = 0; c < RP_FONT_W; c++) CHECK(!rp_font_pixel(' ', c, r), "space has ink");
    /* glyphs differ from each other (no copy-paste slip): compare every pair */
    for (char a = 33; a < 127; a++)
        for (char b = (char)(a + 1); b < 127; b++) {
            bool same = true;
            for (int r = 0; r < RP_FONT_H && same; r++)
                for (int c = 0; c < RP_FONT_W && same; c++)
                    same = rp_font_pixel(a, c, r) == rp_font_pixel(b, c, r);
            CHECK(!same, "glyphs '%c' and '%c' are the same", a, b);
        }
    CHECK(rp_font_pixel('\x01', 2, 6) == rp_font_pixel('?', 2, 6),
          "a control character draws as '?'");
    CHECK(rp_text_width("ab", 2) == 22 && rp_text_width("", 2) == 0, "text width");
}

void test_scan_heatmap_png(void) {
    /* zero is the centre of the scale; each side darkens with its magnitude */
    const rp_rgb z = rp_heatmap_colour(0, -1, 1, 1), g1 = rp_heatmap_colour(-0.1, -1, 1, 1),
                 g2 = rp_heatmap_colour(-1, -1, 1, 1), b2 = rp_heatmap_colour(2, -1, 1, 2);
    CHECK(z.r == z.g && z.g == z.b && z.r > 240, "zero is near white");
    CHECK(g1.b > g1.r && g2.b > g2.r && g2.r + g2.g + g2.b < g1.r + g1.g + g1.b,
          "better is blue, darker further");
    CHECK(b2.r > b2.b && b2.r > b2.g, "worse is red");
    const rp_rgb p1 = rp_heatmap_colour(+0.5, +1, 1, 1);
    CHECK(p1.b > p1.r, "with higher = better, a positive delta is blue");

    const rp_scan_row rows[] = {{0, 1, 1, 0, +3.0, 0, ""},
                                {0, 2, 2, 0, -0.2, 0, ""},
                                {1, 2, 1, 0, 0.0, 0, ""},
                                {1, 3, 2, 0, -1.0, 0, ""},
                                {2, 3, 1, 0, +0.1, 0, ""}};
    rp_heatmap h = {.rows = rows,
                    .n_rows = 5,
                    .start = 0,
                    .end = 3,
                    .sign = -1,
                    .title = "test map",
                    .note = "note",
                    .unit = "PPL change",
                    .n_best = 2};
    rp_canvas cv;
    REQUIRE(rp_heatmap_draw(&h, &cv) == RP_OK, "%s", rp_last_error());
    const char *path = test_tmp("heat.png");
    REQUIRE(rp_canvas_write_png(&cv, path) == RP_OK, "%s", rp_last_error());
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    REQUIRE(png_image_begin_read_from_file(&img, path), "libpng: %s", img.message);
    img.format = PNG_FORMAT_RGB;
    CHECK((int)img.width == cv.w && (int)img.height == cv.h, "size %ux%u, drawn %dx%d", img.width,
          img.height, cv.w, cv.h);
    uint8_t *px = malloc(PNG_IMAGE_SIZE(img));
    REQUIRE(px && png_image_finish_read(&img, NULL, px, 0, NULL), "libpng: %s", img.message);
    CHECK(memcmp(px, cv.px, (size_t)cv.w * cv.h * 3) == 0, "the file holds the canvas");
    /* find the cells: the most saturated blue (block 1,3) and red (block 0,1) pixels */
    int blue = 0, red = 0;
    for (int k = 0; k < cv.w * cv.h; k++) {
        const uint8_t *p = cv.px + 3 * k;
        blue += p[2] > 120 && p[0] < 40;
        red += p[0] > 90 && p[1] < 40 && p[2] < 60;
    }
    CHECK(blue > 300 && red > 300, "blue %d and red %d pixels", blue, red);
    free(px);
    png_image_free(&img);
    rp_canvas_free(&cv);
    /* a bad path is an error that names it, with nothing left behind */
    REQUIRE(rp_canvas_init(&cv, 4, 4, (rp_rgb){1, 2, 3}) == RP_OK, "canvas");
    CHECK(rp_canvas_write_png(&cv, "/nonexistent-dir/x.png") == RP_ERR_IO &&
              strstr(rp_last_error(), "nonexistent"),
          "%s", rp_last_error());
    rp_canvas_free(&cv);
    CHECK(rp_canvas_init(&cv, 0, 5, (rp_rgb){0, 0, 0}) == RP_ERR_INVALID_ARG, "empty canvas");
}
