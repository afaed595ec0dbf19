/* GGUF reader/writer: round trips, getters, failures, and robustness against
 * truncated and bit-flipped files. */
#include "format/gguf.h"
#include "core/model.h"
#include "test.h"
#include "kernels/types.h"
#include "base/util.h"

#include <string.h>
#include <unistd.h>

static const char *const g_files[] = {
    "models/stories260K.gguf",
    "models/synth/qwen3-tiny.gguf",
    "models/synth/qwen3-tiny-Q8_0.gguf",
    "models/synth/qwen3-tiny-Q4_0.gguf",
    "models/synth/qwen3-tiny-Q4_K_M.gguf",
    "models/synth/qwen3-tiny-Q5_K_M.gguf",
    "models/synth/qwen3-tiny-Q6_K.gguf",
    "models/synth/gemma3-tiny.gguf",
    "models/synth/qwen35-tiny.gguf",
    "vocab/qwen3/ggml-vocab-qwen3.gguf",
    "vocab/llama.cpp/ggml-vocab-llama-spm.gguf",
    "vocab/llama.cpp/ggml-vocab-phi-3.gguf",
    "vocab/llama.cpp/ggml-vocab-gpt-2.gguf",
    "vocab/llama.cpp/ggml-vocab-bert-bge.gguf",
    "vocab/llama.cpp/ggml-vocab-deepseek-coder.gguf",
    "vocab/llama.cpp/ggml-vocab-deepseek-llm.gguf",
    "vocab/llama.cpp/ggml-vocab-falcon.gguf",
    "vocab/llama.cpp/ggml-vocab-mpt.gguf",
    "vocab/llama.cpp/ggml-vocab-refact.gguf",
    "vocab/llama.cpp/ggml-vocab-starcoder.gguf",
};

static rp_gguf_writer *copy_writer(const rp_gguf *g) {
    rp_gguf_writer *w = rp_gguf_writer_new();
    if (!w) return NULL;
    if (rp_gguf_w_copy_kv(w, g)) goto fail;
    rp_gguf_w_set_pad_empty(w, rp_gguf_n_tensors(g) > 0 ||
                                   rp_gguf_file_size(g) == rp_gguf_data_offset(g));
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        if (rp_gguf_w_add_tensor(w, t->name, (int)t->type, t->n_dims, t->ne, t->data)) goto fail;
    }
    return w;
fail:
    rp_gguf_writer_free(w);
    return NULL;
}

/* Every GGUF under shared/ read and re-written gives the same bytes. */
void test_gguf_roundtrip_shared(void) {
    for (size_t i = 0; i < sizeof g_files / sizeof g_files[0]; i++) {
        const char *path = test_shared(g_files[i]);
        rp_gguf *g;
        rp_status s = rp_gguf_open(path, &g);
        CHECK(s == RP_OK, "%s: %s", g_files[i], rp_last_error());
        if (s) continue;
        rp_gguf_writer *w = copy_writer(g);
        CHECK(w != NULL, "%s: writer", g_files[i]);
        if (!w) {
            rp_gguf_close(g);
            continue;
        }
        const char *out = test_tmp("rt.gguf");
        CHECK(rp_gguf_w_size(w) == rp_gguf_file_size(g), "%s: size %llu vs %llu", g_files[i],
              (unsigned long long)rp_gguf_w_size(w), (unsigned long long)rp_gguf_file_size(g));
        s = rp_gguf_w_write(w, out, NULL, NULL);
        CHECK(s == RP_OK, "%s: write: %s", g_files[i], rp_last_error());
        size_t la, lb;
        char *a = test_read(path, &la), *b = test_read(out, &lb);
        CHECK(a && b && la == lb && memcmp(a, b, la) == 0, "%s: bytes differ after round trip",
              g_files[i]);
        free(a);
        free(b);
        rp_gguf_writer_free(w);
        rp_gguf_close(g);
    }
}

void test_gguf_getters(void) {
    rp_gguf *g;
    REQUIRE(rp_gguf_open(test_shared("models/stories260K.gguf"), &g) == RP_OK, "%s",
            rp_last_error());
    CHECK(rp_gguf_version(g) == 3, "version");
    CHECK(rp_gguf_n_tensors(g) == 48 && rp_gguf_n_kv(g) == 19, "counts");
    uint32_t u = 0;
    bool found;
    CHECK(rp_gguf_get_u32(g, "llama.block_count", &u, &found) == RP_OK && found && u == 5,
          "block_count");
    float f = 0;
    CHECK(rp_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f, &found) == RP_OK &&
              f > 9e-6f,
          "eps");
    const char *str = NULL;
    CHECK(rp_gguf_get_str(g, "general.architecture", &str, &found) == RP_OK &&
              !strcmp(str, "llama"),
          "arch");
    CHECK(rp_gguf_get_str(g, "llama.block_count", &str, &found) == RP_ERR_FORMAT,
          "type mismatch must fail");
    CHECK(strstr(rp_last_error(), "llama.block_count") != NULL, "message names the key: %s",
          rp_last_error());
    CHECK(rp_gguf_get_u32(g, "no.such.key", &u, &found) == RP_OK && !found, "absent key");
    CHECK(rp_gguf_req_u32(g, "no.such.key", &u) == RP_ERR_FORMAT, "required absent key");
    const rp_gguf_tensor *t = rp_gguf_find_tensor(g, "blk.0.attn_q.weight");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 64 && t->type == RP_TYPE_F32 && t->nbytes == 16384,
          "tensor");
    CHECK(rp_gguf_find_tensor(g, "blk.9.attn_q.weight") == NULL, "absent tensor");
    rp_gguf_close(g);
}

/* Writer: every value type, nested arrays, alignment, and a failed write
 * leaves no file behind. */
void test_gguf_writer_types(void) {
    rp_gguf_writer *w = rp_gguf_writer_new();
    REQUIRE(w, "writer");
    rp_gguf_w_set_u32(w, "general.alignment", 64);
    rp_gguf_w_set_u32(w, "a.u32", 7);
    rp_gguf_w_set_i32(w, "a.i32", -7);
    rp_gguf_w_set_u64(w, "a.u64", 1ull << 40);
    rp_gguf_w_set_f32(w, "a.f32", 1.5f);
    rp_gguf_w_set_bool(w, "a.bool", true);
    rp_gguf_w_set_str(w, "a.str", "hello");
    int16_t arr[3] = {-1, 2, -3};
    rp_gguf_w_set_arr(w, "a.arr_i16", RP_GGUF_INT16, arr, 3);
    const char *strs[] = {"x", "", "zz"};
    rp_gguf_w_set_arr_str(w, "a.arr_str", strs, 3);
    rp_gguf_val inner[2] = {
        {.type = RP_GGUF_ARRAY,
         .arr = {.type = RP_GGUF_UINT8, .n = 2, .raw = (const uint8_t *)"\1\2"}},
        {.type = RP_GGUF_ARRAY,
         .arr = {.type = RP_GGUF_UINT8, .n = 1, .raw = (const uint8_t *)"\3"}}};
    rp_gguf_val nested = {.type = RP_GGUF_ARRAY,
                          .arr = {.type = RP_GGUF_ARRAY, .n = 2, .elems = inner}};
    rp_gguf_w_set(w, "a.nested", &nested);
    rp_gguf_val f64 = {.type = RP_GGUF_FLOAT64, .f = 2.25};
    rp_gguf_w_set(w, "a.f64", &f64);
    rp_gguf_w_set_u32(w, "a.u32", 8); /* replace in place */
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t ne[2] = {3, 2};
    CHECK(rp_gguf_w_add_tensor(w, "t0", RP_TYPE_F32, 2, ne, data) == RP_OK, "add");
    CHECK(rp_gguf_w_add_tensor(w, "t1", RP_TYPE_F32, 1, ne, data) == RP_OK, "add");
    CHECK(rp_gguf_w_add_tensor(w, "t1", RP_TYPE_F32, 1, ne, data) == RP_ERR_INVALID_ARG,
          "duplicate refused");
    int64_t bad[1] = {33};
    CHECK(rp_gguf_w_add_tensor(w, "q", RP_TYPE_Q8_0, 1, bad, data) == RP_ERR_INVALID_ARG,
          "row not multiple of block");
    const char *out = test_tmp("types.gguf");
    REQUIRE(rp_gguf_w_write(w, out, NULL, NULL) == RP_OK, "%s", rp_last_error());
    rp_gguf *g;
    REQUIRE(rp_gguf_open(out, &g) == RP_OK, "%s", rp_last_error());
    uint32_t u;
    bool found;
    CHECK(rp_gguf_get_u32(g, "a.u32", &u, &found) == RP_OK && u == 8, "replaced value");
    CHECK(rp_gguf_kv_at(g, 1)->key && !strcmp(rp_gguf_kv_at(g, 1)->key, "a.u32"), "order kept");
    CHECK(rp_gguf_alignment(g) == 64 && rp_gguf_data_offset(g) % 64 == 0, "alignment");
    const rp_gguf_val *v = rp_gguf_get(g, "a.nested");
    CHECK(v && v->arr.n == 2 && v->arr.elems[0].arr.n == 2 && v->arr.elems[1].arr.raw[0] == 3,
          "nested");
    v = rp_gguf_get(g, "a.arr_str");
    CHECK(v && v->arr.n == 3 && !strcmp(v->arr.elems[2].str.s, "zz") &&
              v->arr.elems[1].str.len == 0,
          "str array");
    v = rp_gguf_get(g, "a.arr_i16");
    CHECK(v && rp_gguf_arr_i64(v, 2) == -3, "i16 array");
    v = rp_gguf_get(g, "a.f64");
    CHECK(v && v->f == 2.25, "f64");
    const rp_gguf_tensor *t = rp_gguf_find_tensor(g, "t1");
    CHECK(t && t->offset % 64 == 0 && ((const float *)t->data)[2] == 3.0f, "tensor data");
    rp_gguf_close(g);
    /* failure: the directory does not exist; nothing must be left */
    CHECK(rp_gguf_w_write(w, "/nonexistent-dir/x.gguf", NULL, NULL) == RP_ERR_IO,
          "write into missing dir fails");
    rp_gguf_writer_free(w);
}

static bool cancel_after_one(float p, void *u) {
    (void)p;
    return ++*(int *)u < 1;
}

void test_gguf_writer_cancel_leaves_nothing(void) {
    rp_gguf_writer *w = rp_gguf_writer_new();
    float data[4] = {0};
    int64_t ne[1] = {4};
    rp_gguf_w_add_tensor(w, "a", RP_TYPE_F32, 1, ne, data);
    rp_gguf_w_add_tensor(w, "b", RP_TYPE_F32, 1, ne, data);
    const char *out = test_tmp("cancel.gguf");
    int calls = 0;
    CHECK(rp_gguf_w_write(w, out, cancel_after_one, &calls) == RP_ERR_CANCELLED, "cancel");
    CHECK(access(out, F_OK) != 0, "no output after a cancelled write");
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    CHECK(access(tmp, F_OK) != 0, "no temporary file left");
    rp_gguf_writer_free(w);
}

void test_gguf_rejects(void) {
    /* big-endian header, v1, bad magic, absurd counts */
    uint8_t be[24] = {'G', 'G', 'U', 'F', 0, 0, 0, 3};
    rp_gguf *g;
    CHECK(rp_gguf_open_mem(be, sizeof be, &g) == RP_ERR_UNSUPPORTED &&
              strstr(rp_last_error(), "big-endian"),
          "big-endian: %s", rp_last_error());
    uint8_t v1[24] = {'G', 'G', 'U', 'F', 1, 0, 0, 0};
    CHECK(rp_gguf_open_mem(v1, sizeof v1, &g) == RP_ERR_UNSUPPORTED, "v1: %s", rp_last_error());
    uint8_t bad[24] = {'G', 'G', 'U', 'X', 3, 0, 0, 0};
    CHECK(rp_gguf_open_mem(bad, sizeof bad, &g) == RP_ERR_FORMAT &&
              strstr(rp_last_error(), "magic"),
          "magic");
    uint8_t huge[24] = {'G', 'G', 'U', 'F', 3,    0,    0,    0,    0,    0,    0,    0,
                        0,   0,   0,   0,   0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    CHECK(rp_gguf_open_mem(huge, sizeof huge, &g) == RP_ERR_FORMAT &&
              strstr(rp_last_error(), "byte offset"),
          "huge kv count: %s", rp_last_error());
    CHECK(rp_gguf_open("/nonexistent.gguf", &g) == RP_ERR_IO, "missing file");
}

/* Parse (and, when that succeeds, load as a model and run a token through
 * it) every variant; returns false only on a broken invariant. */
static int g_ok, g_err;

static void try_buffer(const uint8_t *buf, size_t n, bool load_model) {
    rp_gguf *g;
    rp_status s = rp_gguf_open_mem(buf, n, &g);
    if (s) {
        g_err++;
        if (!rp_last_error()[0]) CHECK(false, "error without a message (len %zu)", n);
        return;
    }
    if (!load_model) {
        rp_gguf_close(g);
        g_ok++;
        return;
    }
    rp_model *m;
    s = rp_model_from_gguf(g, "fuzz", NULL, &m);
    if (s) {
        g_err++;
        return;
    }
    g_ok++;
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 8;
    cp.n_threads = 1;
    rp_context *c;
    if (rp_context_new(m, &cp, &c) == RP_OK) {
        int32_t *toks = NULL;
        size_t nt = 0;
        if (rp_tokenize(rp_model_vocab(m), "Once upon a time", 16, true, true, &toks, &nt) ==
                RP_OK &&
            nt > 0) {
            rp_batch b = {.n_tokens = nt > 8 ? 8 : (int32_t)nt, .token = toks};
            rp_decode(c, &b);
        }
        free(toks);
        rp_context_free(c);
    }
    rp_model_free(m);
}

static void robustness(const char *path, size_t flip_bytes, bool load_model, int flip_stride) {
    size_t n;
    uint8_t *orig = test_read(path, &n);
    REQUIRE(orig, "read %s", path);
    rp_gguf *g;
    REQUIRE(rp_gguf_open_mem(orig, n, &g) == RP_OK, "%s", rp_last_error());
    size_t info_end = (size_t)rp_gguf_data_offset(g);
    rp_gguf_close(g);
    uint8_t *buf = malloc(n);
    g_ok = g_err = 0;
    /* every truncation through the end of the tensor-info region, then a sample */
    size_t n_trunc = 0;
    for (size_t len = 0; len <= info_end && len < n; len++, n_trunc++) {
        memcpy(buf, orig, len);
        try_buffer(buf, len, false);
    }
    for (size_t len = info_end + 1; len < n; len += (n - info_end) / 97 + 1, n_trunc++) {
        memcpy(buf, orig, len);
        try_buffer(buf, len, false);
    }
    int trunc_ok = g_ok;
    CHECK(trunc_ok == 0 || info_end >= n, "%s: %d truncated files parsed as valid", path, trunc_ok);
    /* flip every bit of the first flip_bytes bytes */
    size_t n_flip = 0;
    size_t lim = flip_bytes < n ? flip_bytes : n;
    memcpy(buf, orig, n);
    for (size_t i = 0; i < lim; i++)
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (uint8_t)(1u << bit);
            try_buffer(buf, n, load_model && (n_flip % (size_t)flip_stride) == 0);
            buf[i] ^= (uint8_t)(1u << bit);
            n_flip++;
        }
    printf("     %s: %zu truncations, %zu bit flips (%d parsed, %d refused)\n", path, n_trunc,
           n_flip, g_ok, g_err);
    free(buf);
    free(orig);
}

void test_gguf_robust_stories(void) {
    robustness(test_shared("models/stories260K.gguf"), 4096, true, 8);
}

/* A vocab-only GGUF built from stories260K's tokenizer keys. */
void test_gguf_robust_vocab_only(void) {
    rp_gguf *g;
    REQUIRE(rp_gguf_open(test_shared("models/stories260K.gguf"), &g) == RP_OK, "%s",
            rp_last_error());
    rp_gguf_writer *w = rp_gguf_writer_new();
    for (uint64_t i = 0; i < rp_gguf_n_kv(g); i++) {
        const rp_gguf_kv *kv = rp_gguf_kv_at(g, i);
        if (!strncmp(kv->key, "tokenizer.", 10) || !strcmp(kv->key, "general.architecture"))
            rp_gguf_w_set(w, kv->key, &kv->val);
    }
    const char *out = test_tmp("vocab-only.gguf");
    REQUIRE(rp_gguf_w_write(w, out, NULL, NULL) == RP_OK, "%s", rp_last_error());
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
    robustness(out, 4096, false, 1);
}
