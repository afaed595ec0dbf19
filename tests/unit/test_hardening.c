/* Hardening (issue 22): inputs that used to be accepted silently or to reach
 * undefined behaviour, each now refused or reported. */
#include "base/util.h"
#include "format/gguf.h"
#include "reprise.h"
#include "reprise_tools.h"
#include "test.h"

#include <string.h>
#include <unistd.h>

static char g_warn[1024];
static int g_n_warn;
static void catch_log(rp_log_level level, const char *msg, void *user) {
    (void)user;
    if (level != RP_LOG_WARN) return;
    g_n_warn++;
    snprintf(g_warn, sizeof g_warn, "%s", msg);
}

/* Text the vocabulary cannot encode (no token, not even its single bytes):
 * the tokens llama.cpp gives (the bytes dropped), a warning that says so,
 * and no memcpy from NULL in the word cache (UBSan) for a word with no token. */
void test_hardening_bpe_unencodable_text(void) {
    static const char *const toks[] = {"a", "b", "ab", "Ġ"};
    static const char *const merges[] = {"a b"};
    const char *path = test_tmp("hard-bpe.gguf");
    rp_gguf_writer *w = rp_gguf_writer_new();
    REQUIRE(w, "writer");
    rp_status s = rp_gguf_w_set_str(w, "tokenizer.ggml.model", "gpt2");
    s = s ? s : rp_gguf_w_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    s = s ? s : rp_gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    s = s ? s : rp_gguf_w_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    s = s ? s : rp_gguf_w_write(w, path, NULL, NULL);
    rp_gguf_writer_free(w);
    REQUIRE(!s, "%s", rp_last_error());
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    rp_model *m;
    REQUIRE(rp_model_load(path, &mp, &m) == RP_OK, "%s", rp_last_error());
    rp_log_set(catch_log, NULL);
    g_n_warn = 0;
    int32_t *t = NULL;
    size_t n = 0;
    /* "xy" first: a word of two bytes with no token at all, into the cache */
    s = rp_tokenize(rp_model_vocab(m), "xy ab xy", 8, false, false, &t, &n);
    rp_log_set(NULL, NULL);
    REQUIRE(s == RP_OK, "%s", rp_last_error());
    /* xy -> nothing, " ab" -> Ġ ab, " xy" -> Ġ */
    CHECK(n == 3 && t[0] == 3 && t[1] == 2 && t[2] == 3, "tokens (n %zu)", n);
    CHECK(g_n_warn == 1 && strstr(g_warn, "4 byte(s)"), "warning (%d): %s", g_n_warn, g_warn);
    free(t);
    rp_model_free(m);
    unlink(path);
}

/* stories260K with its vocabulary cut to n tokens (the embedding keeps 512 rows). */
static rp_status cut_vocab(const char *path, uint64_t n) {
    rp_gguf *g;
    rp_status s = rp_gguf_open(test_shared("models/stories260K.gguf"), &g);
    if (s) return s;
    rp_gguf_writer *w = rp_gguf_writer_new();
    s = rp_gguf_w_copy_kv(w, g);
    const char *names[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                           "tokenizer.ggml.token_type"};
    for (int k = 0; k < 3 && !s; k++) {
        rp_gguf_val v = *rp_gguf_get(g, names[k]);
        v.arr.n = n;
        s = rp_gguf_w_set(w, names[k], &v);
    }
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g) && !s; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        s = rp_gguf_w_add_tensor(w, t->name, (int)t->type, t->n_dims, t->ne, t->data);
    }
    if (!s) s = rp_gguf_w_write(w, path, NULL, NULL);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
    return s;
}

/* A 100-token vocabulary over a 512-row embedding: ids 100..511 would have
 * no text (llama.cpp refuses it too). */
void test_hardening_vocab_smaller_than_embedding(void) {
    const char *path = test_tmp("hard-vocab100.gguf");
    REQUIRE(cut_vocab(path, 100) == RP_OK, "%s", rp_last_error());
    rp_model_params mp = rp_model_default_params();
    rp_model *m = NULL;
    CHECK(rp_model_load(path, &mp, &m) == RP_ERR_FORMAT, "loaded");
    CHECK(strstr(rp_last_error(), "100 tokens") && strstr(rp_last_error(), "512 rows"),
          "message: %s", rp_last_error());
    rp_model_free(m);
    REQUIRE(cut_vocab(path, 512) == RP_OK, "%s", rp_last_error());
    CHECK(rp_model_load(path, &mp, &m) == RP_OK, "%s", rp_last_error());
    rp_model_free(m);
    unlink(path);
}

/* Tensors whose bytes overlap are refused, naming both; the same bytes
 * under two names (an alias) are not. */
void test_hardening_overlapping_tensors(void) {
    float a[64] = {0};
    int64_t ne8[1] = {8}, ne16[1] = {16};
    rp_gguf_writer *w = rp_gguf_writer_new();
    REQUIRE(w, "writer");
    rp_gguf_w_add_tensor(w, "x", RP_TYPE_F32, 1, ne16, a);
    rp_gguf_w_add_tensor(w, "y", RP_TYPE_F32, 1, ne8, a);
    const char *path = test_tmp("hard-overlap.gguf");
    REQUIRE(rp_gguf_w_write(w, path, NULL, NULL) == RP_OK, "%s", rp_last_error());
    rp_gguf_writer_free(w);
    size_t n;
    unsigned char *d = test_read(path, &n);
    REQUIRE(d, "read back");
    rp_gguf *g;
    REQUIRE(rp_gguf_open_mem(d, n, &g) == RP_OK, "%s", rp_last_error());
    const uint64_t off_x = rp_gguf_tensor_at(g, 0)->info_offset + 8 + 1 + 4 + 8 + 4,
                   off_y = rp_gguf_tensor_at(g, 1)->info_offset + 8 + 1 + 4 + 8 + 4;
    rp_gguf_close(g);
    uint64_t v = 32; /* y inside x's 64 bytes */
    memcpy(d + off_y, &v, 8);
    CHECK(rp_gguf_open_mem(d, n, &g) == RP_ERR_FORMAT, "overlap accepted");
    CHECK(strstr(rp_last_error(), "overlaps tensor 'x'"), "message: %s", rp_last_error());
    v = 0; /* both at 0 with different sizes: still an overlap */
    memcpy(d + off_y, &v, 8);
    CHECK(rp_gguf_open_mem(d, n, &g) == RP_ERR_FORMAT, "offset 0 twice accepted");
    (void)off_x;
    free(d);
    unlink(path);
}

/* A context's state and scratch are estimated before anything is allocated
 * and refused over mem_limit (naming both figures); plan_only allocates no
 * state and reports the same figures; decode refuses it. */
void test_hardening_context_memory_bound(void) {
    rp_model_params mp = rp_model_default_params();
    rp_model *m;
    REQUIRE(rp_model_load(test_shared("models/stories260K.gguf"), &mp, &m) == RP_OK, "%s",
            rp_last_error());
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 2048;
    cp.layer_map = "0..4,0..4,0..4,0..4"; /* 20 steps: 5 MiB of KV */
    cp.mem_limit = 4u << 20;
    rp_context *c = NULL;
    CHECK(rp_context_new(m, &cp, &c) == RP_ERR_NOMEM, "over the limit accepted");
    CHECK(strstr(rp_last_error(), "5.0 MiB of state") && strstr(rp_last_error(), "4.0 MiB"),
          "message: %s", rp_last_error());
    cp.plan_only = true;
    REQUIRE(rp_context_new(m, &cp, &c) == RP_OK, "%s", rp_last_error());
    CHECK(rp_context_state_bytes(c) == 5u << 20, "state bytes %llu",
          (unsigned long long)rp_context_state_bytes(c));
    int32_t tok = 1;
    rp_batch b = {.n_tokens = 1, .token = &tok};
    CHECK(rp_decode(c, &b) == RP_ERR_INVALID_ARG, "decode on a plan-only context");
    rp_context_free(c);
    cp.plan_only = false;
    cp.mem_limit = 64u << 20;
    CHECK(rp_context_new(m, &cp, &c) == RP_OK, "%s", rp_last_error());
    rp_context_free(c);
    rp_model_free(m);
}

/* A scan CSV: a torn last row (what SIGKILL leaves) is dropped with a
 * warning and the rest resumes; a row reaching past the model's layers, and a
 * number of a million digits, are refused. */
void test_hardening_scan_csv_rows(void) {
    rp_scan_csv a;
    memset(&a, 0, sizeof a);
    REQUIRE(rp_scan_csv_set(&a, "metric", true, "ppl") == RP_OK, "set");
    REQUIRE(rp_scan_csv_set(&a, "layers", true, "%d", 8) == RP_OK, "set");
    rp_scan_row r1 = {3, 5, 2, 54.1, -0.1, 0.25, ""};
    REQUIRE(rp_scan_csv_add(&a, &r1) == RP_OK, "row");
    const char *path = test_tmp("hard-scan.csv");
    REQUIRE(rp_scan_csv_write(path, &a) == RP_OK, "%s", rp_last_error());
    size_t n;
    char *text = test_read(path, &n);
    REQUIRE(text, "read back");
    FILE *fp = fopen(path, "ab");
    REQUIRE(fp, "append");
    fputs("4,6,2,ppl,54.", fp); /* torn */
    fclose(fp);
    rp_scan_csv b;
    rp_log_set(catch_log, NULL);
    g_n_warn = 0;
    rp_status s = rp_scan_csv_read(path, &b);
    rp_log_set(NULL, NULL);
    CHECK(s == RP_OK, "torn row: %s", rp_last_error());
    if (!s) {
        CHECK(b.n_rows == 1 && g_n_warn == 1 && strstr(g_warn, "cut short"), "rows %d, warn %s",
              b.n_rows, g_warn);
        CHECK(rp_scan_csv_check(&b, &a, path) == RP_OK, "%s", rp_last_error());
        rp_scan_csv_free(&b);
    }
    /* a row for block 7,9 of an 8-layer model */
    fp = fopen(path, "wb");
    fwrite(text, 1, n, fp);
    fputs("7,9,2,ppl,54.1,-0.1,0.25,7-9\n", fp);
    fclose(fp);
    REQUIRE(rp_scan_csv_read(path, &b) == RP_OK, "%s", rp_last_error());
    CHECK(rp_scan_csv_check(&b, &a, path) == RP_ERR_INVALID_ARG, "block past the layers");
    CHECK(strstr(rp_last_error(), "reaches layer 9; the model has 8"), "message: %s",
          rp_last_error());
    rp_scan_csv_free(&b);
    /* a value of a million digits */
    fp = fopen(path, "wb");
    fwrite(text, 1, n, fp);
    fputs("4,6,2,ppl,1.", fp);
    for (int k = 0; k < 1000000; k++) fputc('0', fp);
    fputs(",-0.1,0.25,4-6\n", fp);
    fclose(fp);
    CHECK(rp_scan_csv_read(path, &b) == RP_ERR_FORMAT, "a million digits accepted");
    free(text);
    rp_scan_csv_free(&a);
    unlink(path);
}
