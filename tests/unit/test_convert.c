/* reprise convert against transformers: each tiny checkpoint under
 * tests/fixtures/hf/ (made by tests/reference/make_hf_fixtures.py) is
 * converted at every output type, run in reprise with an F32 KV cache, and its
 * logits compared with the ones transformers computed.
 *
 * Tolerances:
 *  - against transformers on the same weights (F32: the checkpoint as is;
 *    F16 / BF16: transformers with every matrix rounded to that type, as the
 *    file stores it): max |Δ| <= 1e-4, i.e. F32 rounding only;
 *  - against transformers on the unrounded weights: each stored weight has a
 *    relative error up to u (F16 2^-11, BF16 2^-8, Q8_0 1/127 of its block's
 *    largest value, plus Q8_0 activations in the matmul), which moves the
 *    logits by up to max |Δ| <= 4 u max|logit| on these models (measured:
 *    0.4 to 2.2 u max|logit|).
 *  - F16 / BF16 on the CPU round the activations of every matmul to F16 /
 *    BF16 as well (llama.cpp's arithmetic, bit for bit:
 *    tests/cli/quant_types.sh), which the -f16w / -bf16w references (F32
 *    activations) do not: against them, NMSE <= 5e-7 for F16 (one fp16
 *    rounding, relative 2^-12, per activation; measured 6.8e-8 to 1.55e-7,
 *    max |Δ| 0.0015 to 0.0128) and NMSE <= 3e-5 for BF16 (relative 2^-9;
 *    measured 3.7e-6 to 1.06e-5, max |Δ| 0.014 to 0.118); max |Δ| is then
 *    held by the plain bound above.
 * Gemma 3's GELU is evaluated through fp16 by ggml, llama.cpp and reprise
 * (GGML_GELU_FP16: a table indexed by fp16(x)); its tight references are
 * transformers with exactly that table. A pre-activation within F32 noise of
 * an fp16 rounding boundary may still pick the neighbouring entry (one fp16
 * step, 2^-11 relative), and the few such flips move these logits (up to 65)
 * by up to ~2e-4, so Gemma 3's tight bound is max |Δ| <= 1e-3 with NMSE <=
 * 1e-10 (every case here: NMSE <= 1e-10); against plain transformers its F32
 * logits agree to 1e-4 max|logit|. */
#include "convert/convert.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "test.h"
#include "kernels/types.h"
#include "text/vocab.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define FIX "tests/fixtures/hf"

int run_vocab_vectors(const char *gguf, const char *vectors, int *n_total); /* test_vocab.c */

static rp_status convert_to(const char *dir, int outtype, const char *out) {
    rp_convert_params p = rp_convert_default_params();
    p.dir = dir;
    p.outtype = outtype;
    rp_conv *cv;
    rp_status s = rp_conv_open(&p, &cv);
    if (s) return s;
    s = rp_conv_write(cv, out, NULL, NULL);
    rp_conv_free(cv);
    return s;
}

/* All rows of logits of one batch decoded from a model file (F32 KV cache). */
static float *run_logits(const char *path, const int *tok, int n, int *n_vocab) {
    rp_model *m;
    if (rp_model_load(path, NULL, &m)) return NULL;
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    cp.type_k = RP_TYPE_F32;
    cp.type_v = RP_TYPE_F32;
    rp_context *c;
    float *out = NULL;
    if (rp_context_new(m, &cp, &c) == RP_OK) {
        int32_t t32[64];
        int8_t want[64];
        for (int i = 0; i < n; i++) t32[i] = tok[i], want[i] = 1;
        rp_batch b = {.n_tokens = n, .token = t32, .logits = want};
        if (rp_decode(c, &b) == RP_OK) {
            *n_vocab = rp_n_vocab(c);
            out = malloc((size_t)n * (size_t)*n_vocab * sizeof *out);
            for (int i = 0; out && i < n; i++)
                memcpy(out + (size_t)i * (size_t)*n_vocab, rp_get_logits(c, i),
                       (size_t)*n_vocab * sizeof *out);
        }
        rp_context_free(c);
    }
    rp_model_free(m);
    return out;
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

typedef struct fixture {
    const char *name;
    const char *tight[3]; /* reference per outtype f32, f16, bf16 */
    double tight_max;     /* max |d| against the tight reference */
    double pure_f32;      /* bound on F32 vs plain transformers, relative to max|logit| (0: 1e-4
                             absolute) */
} fixture;

static const fixture g_fix[] = {
    {"llama", {"logits", "logits-f16w", "logits-bf16w"}, 1e-4, 0},
    {"qwen2", {"logits", "logits-f16w", "logits-bf16w"}, 1e-4, 0},
    {"qwen3", {"logits", "logits-f16w", "logits-bf16w"}, 1e-4, 0},
    {"gemma3", {"logits-ggml-act", "logits-ggml-act-f16w", "logits-ggml-act-bf16w"}, 1e-3, 1e-4},
};

static void logits_case(const fixture *fx) {
    char dir[256], p[512];
    snprintf(dir, sizeof dir, FIX "/%s", fx->name);
    snprintf(p, sizeof p, "%s/ref/tokens.txt", dir);
    int tok[64];
    int n = test_read_ints(p, 0, tok, 64);
    REQUIRE(n > 8, "%s: tokens", p);
    snprintf(p, sizeof p, "%s/ref/logits.f32", dir);
    size_t len;
    float *pure = test_read(p, &len);
    REQUIRE(pure, "%s", p);
    static const int types[] = {RP_TYPE_F32, RP_TYPE_F16, RP_TYPE_BF16, RP_TYPE_Q8_0};
    static const double u[] = {0, 1.0 / 2048, 1.0 / 256, 1.0 / 127};
    for (int k = 0; k < 4; k++) {
        char out[64];
        snprintf(out, sizeof out, "%s-%s.gguf", fx->name, rp_type_name(types[k]));
        const char *gguf = test_tmp(out);
        rp_status s = convert_to(dir, types[k], gguf);
        CHECK(s == RP_OK, "%s %s: convert: %s", fx->name, rp_type_name(types[k]), rp_last_error());
        if (s) continue;
        int nv = 0;
        float *got = run_logits(gguf, tok, n, &nv);
        CHECK(got != NULL, "%s %s: run: %s", fx->name, rp_type_name(types[k]), rp_last_error());
        if (!got) continue;
        size_t cnt = (size_t)n * (size_t)nv;
        CHECK(cnt * sizeof(float) == len, "%s: %zu logits, reference has %zu", fx->name, cnt,
              len / sizeof(float));
        if (cnt * sizeof(float) != len) {
            free(got);
            continue;
        }
        double ref_max = max_abs(pure, cnt), d_pure = test_max_abs_diff(pure, got, cnt);
        if (k < 3) {
            snprintf(p, sizeof p, "%s/ref/%s.f32", dir, fx->tight[k]);
            size_t tl;
            float *tight = test_read(p, &tl);
            CHECK(tight && tl == len, "%s", p);
            double d = tight && tl == len ? test_max_abs_diff(tight, got, cnt) : INFINITY;
            double e = tight && tl == len ? test_nmse(tight, got, cnt) : INFINITY;
            /* F16 / BF16: activations rounded too (the header) */
            const bool rounded = types[k] == RP_TYPE_F16 || types[k] == RP_TYPE_BF16;
            const double dmax = rounded ? INFINITY : fx->tight_max,
                         emax = types[k] == RP_TYPE_F16    ? 5e-7
                                : types[k] == RP_TYPE_BF16 ? 3e-5
                                                           : 1e-10;
            CHECK(d <= dmax && e <= emax, "%s %s: max|d| %.3g, NMSE %.3g vs %s (tolerance %g, %g)",
                  fx->name, rp_type_name(types[k]), d, e, fx->tight[k], dmax, emax);
            free(tight);
        }
        double bound =
            k == 0 ? (fx->pure_f32 > 0 ? fx->pure_f32 * ref_max : 1e-4) : 4 * u[k] * ref_max;
        CHECK(d_pure <= bound,
              "%s %s: max|d| %.3g vs plain transformers (bound %.3g, max|logit| %.2f)", fx->name,
              rp_type_name(types[k]), d_pure, bound, ref_max);
        printf("     %-6s %-4s max|d| vs transformers %.2e (max|logit| %.1f)\n", fx->name,
               rp_type_name(types[k]), d_pure, ref_max);
        free(got);
    }
    free(pure);
}

void test_convert_llama_logits(void) {
    logits_case(&g_fix[0]);
}
void test_convert_qwen2_logits(void) {
    logits_case(&g_fix[1]);
}
void test_convert_qwen3_logits(void) {
    logits_case(&g_fix[2]);
}
void test_convert_gemma3_logits(void) {
    logits_case(&g_fix[3]);
}

/* ---- keys, names and types as llama.cpp writes them ------------------------- */

static rp_gguf *open_converted(const char *name, int outtype, const char *file) {
    char dir[256];
    snprintf(dir, sizeof dir, FIX "/%s", name);
    const char *out = test_tmp(file);
    if (convert_to(dir, outtype, out)) return NULL;
    rp_gguf *g;
    return rp_gguf_open(out, &g) ? NULL : g;
}

static uint32_t key_u32(rp_gguf *g, const char *k) {
    uint32_t v = 0xffffffffu;
    bool f;
    rp_gguf_get_u32(g, k, &v, &f);
    return v;
}

static float key_f32(rp_gguf *g, const char *k) {
    float v = NAN;
    bool f;
    rp_gguf_get_f32(g, k, &v, &f);
    return v;
}

static const char *key_str(rp_gguf *g, const char *k) {
    const char *v = NULL;
    bool f;
    rp_gguf_get_str(g, k, &v, &f);
    return v ? v : "";
}

static int key_bool(rp_gguf *g, const char *k) {
    bool v = false, f = false;
    rp_gguf_get_bool(g, k, &v, &f);
    return f ? v : -1;
}

static int tensor_type(rp_gguf *g, const char *name) {
    const rp_gguf_tensor *t = rp_gguf_find_tensor(g, name);
    return t ? (int)t->type : -1;
}

void test_convert_llama_keys(void) {
    rp_gguf *g = open_converted("llama", RP_TYPE_Q8_0, "keys-llama.gguf");
    REQUIRE(g, "%s", rp_last_error());
    CHECK(!strcmp(key_str(g, "general.architecture"), "llama") &&
              !strcmp(key_str(g, "general.type"), "model"),
          "arch");
    CHECK(key_u32(g, "general.file_type") == 7 && key_u32(g, "general.quantization_version") == 2,
          "file type");
    CHECK(key_u32(g, "llama.block_count") == 2 && key_u32(g, "llama.context_length") == 256 &&
              key_u32(g, "llama.embedding_length") == 64 &&
              key_u32(g, "llama.feed_forward_length") == 88,
          "sizes");
    CHECK(key_u32(g, "llama.attention.head_count") == 4 &&
              key_u32(g, "llama.attention.head_count_kv") == 2 &&
              key_u32(g, "llama.attention.key_length") == 16 &&
              key_u32(g, "llama.rope.dimension_count") == 16 &&
              key_u32(g, "llama.vocab_size") == 512,
          "heads");
    CHECK(key_f32(g, "llama.rope.freq_base") == 10000.0f &&
              key_f32(g, "llama.attention.layer_norm_rms_epsilon") == 1e-5f,
          "rope base, eps");
    CHECK(!strcmp(key_str(g, "tokenizer.ggml.model"), "llama") &&
              !strcmp(key_str(g, "tokenizer.ggml.pre"), "default"),
          "tokenizer model");
    CHECK(key_u32(g, "tokenizer.ggml.bos_token_id") == 1 &&
              key_u32(g, "tokenizer.ggml.eos_token_id") == 2 &&
              key_u32(g, "tokenizer.ggml.unknown_token_id") == 0,
          "special ids");
    /* add_bos from the TemplateProcessing post-processor, add_sep from its
     * pair template; add_space_prefix left to llama.cpp's default (true) */
    CHECK(key_bool(g, "tokenizer.ggml.add_bos_token") == 1 &&
              key_bool(g, "tokenizer.ggml.add_eos_token") == 0 &&
              key_bool(g, "tokenizer.ggml.add_sep_token") == 0 &&
              key_bool(g, "tokenizer.ggml.add_space_prefix") == -1,
          "flags");
    const rp_gguf_val *tt = rp_gguf_get(g, "tokenizer.ggml.token_type");
    CHECK(tt && tt->arr.type == RP_GGUF_INT32 && tt->arr.n == 512 &&
              rp_gguf_arr_i64(tt, 0) == RP_TOKEN_CONTROL &&
              rp_gguf_arr_i64(tt, 1) == RP_TOKEN_CONTROL &&
              rp_gguf_arr_i64(tt, 3) == RP_TOKEN_BYTE &&
              rp_gguf_arr_i64(tt, 300) == RP_TOKEN_NORMAL,
          "token types");
    CHECK(rp_gguf_get(g, "tokenizer.ggml.merges") == NULL &&
              rp_gguf_get(g, "tokenizer.ggml.scores"),
          "spm arrays");
    /* Q8_0 where rows are a multiple of 32, F16 where not (n_ff 88), F32 for 1-D */
    CHECK(tensor_type(g, "blk.0.attn_q.weight") == RP_TYPE_Q8_0 &&
              tensor_type(g, "blk.0.ffn_gate.weight") == RP_TYPE_Q8_0 &&
              tensor_type(g, "blk.0.ffn_down.weight") == RP_TYPE_F16 &&
              tensor_type(g, "blk.0.attn_norm.weight") == RP_TYPE_F32 &&
              tensor_type(g, "rope_freqs.weight") == RP_TYPE_F32 &&
              tensor_type(g, "output.weight") == RP_TYPE_Q8_0,
          "types");
    const rp_gguf_tensor *rf = rp_gguf_find_tensor(g, "rope_freqs.weight");
    /* llama3 scaling, orig ctx 64, head_dim 16, base 1e4: the first pairs rotate fast (1), the last
     * slowly (8) */
    CHECK(rf && rf->ne[0] == 8 && ((const float *)rf->data)[0] == 1.0f &&
              ((const float *)rf->data)[7] == 8.0f,
          "rope_freqs");
    CHECK(rp_gguf_n_tensors(g) == 22, "22 tensors: %llu", (unsigned long long)rp_gguf_n_tensors(g));
    rp_gguf_close(g);
}

void test_convert_gemma3_keys(void) {
    rp_gguf *g = open_converted("gemma3", RP_TYPE_F16, "keys-gemma3.gguf");
    REQUIRE(g, "%s", rp_last_error());
    CHECK(!strcmp(key_str(g, "general.architecture"), "gemma3"), "arch");
    CHECK(key_u32(g, "gemma3.attention.sliding_window") == 4 &&
              key_f32(g, "gemma3.rope.freq_base") == 1e6f &&
              key_f32(g, "gemma3.rope.freq_base_swa") == 1e4f,
          "window and rope bases");
    CHECK(!rp_gguf_get(g, "gemma3.attention.sliding_window_pattern"),
          "five local + one global needs no pattern key");
    CHECK(key_u32(g, "gemma3.attention.key_length") == 32 &&
              key_u32(g, "gemma3.attention.head_count_kv") == 1 &&
              key_u32(g, "gemma3.context_length") == 512,
          "shape keys");
    CHECK(key_bool(g, "tokenizer.ggml.add_space_prefix") == 0 &&
              key_u32(g, "tokenizer.ggml.bos_token_id") == 2 &&
              key_u32(g, "tokenizer.ggml.eos_token_id") == 1 &&
              key_u32(g, "tokenizer.ggml.padding_token_id") == 0,
          "tokenizer keys");
    CHECK(!rp_gguf_find_tensor(g, "output.weight"), "tied");
    /* norms are stored as 1 + w */
    rp_st *st;
    REQUIRE(rp_st_open_dir(FIX "/gemma3", &st) == RP_OK, "%s", rp_last_error());
    const rp_st_tensor *src = rp_st_find(st, "model.layers.3.post_feedforward_layernorm.weight");
    const rp_gguf_tensor *dst = rp_gguf_find_tensor(g, "blk.3.post_ffw_norm.weight");
    float w[64];
    REQUIRE(src && dst && dst->type == RP_TYPE_F32 && rp_st_read_f32(src, 0, 64, w) == RP_OK,
            "norm tensors");
    int bad = 0;
    for (int i = 0; i < 64; i++) bad += ((const float *)dst->data)[i] != w[i] + 1.0f;
    CHECK(bad == 0, "%d of 64 norm weights are not w + 1", bad);
    rp_st_close(st);
    rp_gguf_close(g);
}

void test_convert_qwen_keys(void) {
    rp_gguf *g = open_converted("qwen2", RP_TYPE_BF16, "keys-qwen2.gguf");
    REQUIRE(g, "%s", rp_last_error());
    CHECK(!strcmp(key_str(g, "general.architecture"), "qwen2") &&
              key_u32(g, "general.file_type") == 32,
          "arch");
    CHECK(!strcmp(key_str(g, "tokenizer.ggml.model"), "gpt2") &&
              !strcmp(key_str(g, "tokenizer.ggml.pre"), "qwen2"),
          "byte-level BPE recognised as qwen2");
    CHECK(key_u32(g, "tokenizer.ggml.eos_token_id") == 319 &&
              key_u32(g, "tokenizer.ggml.padding_token_id") == 317 &&
              key_u32(g, "tokenizer.ggml.bos_token_id") == 317 &&
              key_bool(g, "tokenizer.ggml.add_bos_token") == 0,
          "special ids (bos from config.json)");
    CHECK(strstr(key_str(g, "tokenizer.chat_template"), "<|im_start|>") != NULL, "chat template");
    const rp_gguf_val *m = rp_gguf_get(g, "tokenizer.ggml.merges");
    CHECK(m && m->arr.n > 0 && !strcmp(m->arr.elems[0].str.s, "\xc4\xa0 t"),
          "merges as 'a b' strings");
    CHECK(tensor_type(g, "blk.1.attn_k.bias") == RP_TYPE_F32 &&
              tensor_type(g, "blk.1.attn_k.weight") == RP_TYPE_BF16 &&
              tensor_type(g, "output.weight") == RP_TYPE_BF16,
          "bias F32, matrices BF16");
    CHECK(!rp_gguf_get(g, "qwen2.attention.key_length") && !rp_gguf_get(g, "qwen2.vocab_size"),
          "no keys llama.cpp does not write for qwen2");
    rp_gguf_close(g);
    g = open_converted("qwen2", -1, "keys-qwen2-auto.gguf");
    REQUIRE(g, "%s", rp_last_error());
    CHECK(key_u32(g, "general.file_type") == 32 &&
              tensor_type(g, "blk.0.attn_q.weight") == RP_TYPE_BF16,
          "--outtype auto keeps a BF16 checkpoint BF16");
    rp_gguf_close(g);
    g = open_converted("qwen3", RP_TYPE_F32, "keys-qwen3.gguf");
    REQUIRE(g, "%s", rp_last_error());
    CHECK(key_u32(g, "qwen3.attention.key_length") == 32 &&
              tensor_type(g, "blk.0.attn_q_norm.weight") == RP_TYPE_F32 &&
              !rp_gguf_find_tensor(g, "output.weight") && key_u32(g, "general.file_type") == 0,
          "qwen3: head_dim, q/k norms, tied output");
    rp_gguf_close(g);
}

/* ---- vocabularies ---------------------------------------------------------- */

static const char *vocab_gguf(const char *dir, int64_t pad_to, const char *file) {
    rp_gguf_writer *w = rp_gguf_writer_new();
    rp_gguf_w_set_str(w, "general.architecture", "llama");
    int64_t n = 0;
    rp_status s = rp_convert_tokenizer(dir, NULL, pad_to, -1, NULL, w, &n);
    const char *out = test_tmp(file);
    if (!s) s = rp_gguf_w_write(w, out, NULL, NULL);
    rp_gguf_writer_free(w);
    return s ? NULL : out;
}

static void fixture_vectors(const char *name) {
    char dir[256], vec[300];
    snprintf(dir, sizeof dir, FIX "/%s", name);
    snprintf(vec, sizeof vec, "%s/ref/vocab", dir);
    const char *g = vocab_gguf(dir, 0, "vocab-fixture.gguf");
    REQUIRE(g, "%s: %s", name, rp_last_error());
    int total = 0, bad = run_vocab_vectors(g, vec, &total);
    CHECK(bad == 0 && total == 46, "%s: %d of %d tokenizer vectors differ from transformers", name,
          bad, total);
}

/* SentencePiece-style BPE with byte fallback (Llama 2 and Gemma layouts) */
void test_convert_vocab_spm(void) {
    fixture_vectors("llama");
    fixture_vectors("gemma3");
}

/* byte-level BPE (needs the byte-level tokenizer, src/text/vocab_bpe.c) */
void test_convert_vocab_bpe(void) {
    fixture_vectors("qwen2");
    fixture_vectors("qwen3");
}

/* The real Qwen3 tokenizer: the same arrays as the vocab GGUF gguf-py made
 * from it, and llama.cpp's qwen2 tokenizer vectors. */
void test_convert_vocab_qwen3(void) {
    const char *g = vocab_gguf(test_shared("vocab/qwen3"), 151936, "qwen3-vocab.gguf");
    REQUIRE(g, "%s", rp_last_error());
    rp_gguf *a, *b;
    REQUIRE(rp_gguf_open(g, &a) == RP_OK, "%s", rp_last_error());
    REQUIRE(rp_gguf_open(test_shared("vocab/qwen3/ggml-vocab-qwen3.gguf"), &b) == RP_OK, "%s",
            rp_last_error());
    CHECK(!strcmp(key_str(a, "tokenizer.ggml.pre"), "qwen2") &&
              !strcmp(key_str(a, "tokenizer.ggml.model"), "gpt2"),
          "pre recognised as qwen2");
    static const char *const arrays[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"};
    for (int k = 0; k < 2; k++) {
        const rp_gguf_val *x = rp_gguf_get(a, arrays[k]), *y = rp_gguf_get(b, arrays[k]);
        REQUIRE(x && y, "%s", arrays[k]);
        uint64_t diff = x->arr.n == y->arr.n ? 0 : 1;
        for (uint64_t i = 0; !diff && i < x->arr.n; i++)
            diff += x->arr.elems[i].str.len != y->arr.elems[i].str.len ||
                    memcmp(x->arr.elems[i].str.s, y->arr.elems[i].str.s,
                           (size_t)x->arr.elems[i].str.len) != 0;
        CHECK(diff == 0, "%s: %llu vs %llu entries, differences", arrays[k],
              (unsigned long long)x->arr.n, (unsigned long long)y->arr.n);
    }
    const rp_gguf_val *x = rp_gguf_get(a, "tokenizer.ggml.token_type"),
                      *y = rp_gguf_get(b, "tokenizer.ggml.token_type");
    uint64_t diff = x && y && x->arr.n == y->arr.n ? 0 : 1;
    for (uint64_t i = 0; !diff && i < x->arr.n; i++)
        diff += rp_gguf_arr_i64(x, i) != rp_gguf_arr_i64(y, i);
    CHECK(diff == 0, "token types differ");
    CHECK(key_u32(a, "tokenizer.ggml.eos_token_id") == key_u32(b, "tokenizer.ggml.eos_token_id") &&
              key_u32(a, "tokenizer.ggml.padding_token_id") ==
                  key_u32(b, "tokenizer.ggml.padding_token_id") &&
              key_bool(a, "tokenizer.ggml.add_bos_token") == 0,
          "special ids");
    CHECK(!strcmp(key_str(a, "tokenizer.chat_template"), key_str(b, "tokenizer.chat_template")),
          "chat template");
    rp_gguf_close(a);
    rp_gguf_close(b);
    int total = 0,
        bad = run_vocab_vectors(g, test_shared("vocab/llama.cpp/ggml-vocab-qwen2.gguf"), &total);
    CHECK(bad == 0 && total == 46, "qwen2 vectors: %d of %d differ", bad, total);
}

/* The real Llama 3 tokenizer (xz-compressed in shared/): llama.cpp's
 * llama-bpe vectors. */
void test_convert_vocab_llama3(void) {
    const char *dir = test_tmp("llama3-tok");
    mkdir(dir, 0700);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "xz -dc '%s' > '%s/tokenizer.json' && cp '%s' '%s/'",
             test_shared("vocab/llama3/tokenizer.json.xz"), dir,
             test_shared("vocab/llama3/tokenizer_config.json"), dir);
    REQUIRE(system(cmd) == 0, "cannot decompress the Llama 3 tokenizer (is xz installed?)");
    const char *g = vocab_gguf(dir, 0, "llama3-vocab.gguf");
    REQUIRE(g, "%s", rp_last_error());
    rp_gguf *a;
    REQUIRE(rp_gguf_open(g, &a) == RP_OK, "%s", rp_last_error());
    CHECK(!strcmp(key_str(a, "tokenizer.ggml.pre"), "llama-bpe"), "pre recognised as llama-bpe: %s",
          key_str(a, "tokenizer.ggml.pre"));
    CHECK(key_u32(a, "tokenizer.ggml.bos_token_id") == 128000 &&
              key_u32(a, "tokenizer.ggml.eos_token_id") == 128001,
          "bos/eos");
    const rp_gguf_val *tk = rp_gguf_get(a, "tokenizer.ggml.tokens");
    CHECK(tk && tk->arr.n == 128256, "128256 tokens");
    rp_gguf_close(a);
    int total = 0,
        bad =
            run_vocab_vectors(g, test_shared("vocab/llama.cpp/ggml-vocab-llama-bpe.gguf"), &total);
    CHECK(bad == 0 && total == 46, "llama-bpe vectors: %d of %d differ", bad, total);
}

/* ---- bad checkpoints -------------------------------------------------------- */

/* A copy of a fixture directory to break. */
static const char *copy_fixture(const char *name, const char *as) {
    const char *dir = test_tmp(as);
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && mkdir -p \"$(dirname '%s')\" && cp -r '" FIX "/%s' '%s'", dir, dir,
             name, dir);
    return system(cmd) == 0 ? dir : NULL;
}

/* config.json of dir with one key set (value as JSON text; NULL deletes it). */
static bool edit_config(const char *dir, const char *key, const char *value) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL);
    if (!root) return false;
    if (value)
        json_object_set_new(root, key, json_loads(value, JSON_DECODE_ANY, NULL));
    else
        json_object_del(root, key);
    bool ok = json_dump_file(root, path, JSON_INDENT(2)) == 0;
    json_decref(root);
    return ok;
}

static void expect_refusal(const char *dir, rp_status want, const char *what,
                           const char *case_name) {
    rp_convert_params p = rp_convert_default_params();
    p.dir = dir;
    rp_conv *cv = NULL;
    rp_status s = rp_conv_open(&p, &cv);
    CHECK(s == want && strstr(rp_last_error(), what),
          "%s: status %d (want %d), message '%s' lacks '%s'", case_name, s, want, rp_last_error(),
          what);
    rp_conv_free(cv);
}

void test_convert_refusals(void) {
    const char *d = copy_fixture("qwen3", "bad-qwen3");
    REQUIRE(d, "copy");
    expect_refusal("/nonexistent-checkpoint", RP_ERR_IO, "no config.json", "missing directory");
    REQUIRE(edit_config(d, "architectures", "[\"BertForMaskedLM\"]"), "edit");
    expect_refusal(d, RP_ERR_UNSUPPORTED, "LlamaForCausalLM, Qwen2ForCausalLM",
                   "unknown architecture");
    REQUIRE(edit_config(d, "architectures", NULL), "edit");
    expect_refusal(d, RP_ERR_FORMAT, "architectures", "no architectures");
    REQUIRE(edit_config(d, "architectures", "[\"Qwen3ForCausalLM\"]") &&
                edit_config(d, "hidden_size", NULL),
            "edit");
    expect_refusal(d, RP_ERR_FORMAT, "'hidden_size'", "missing key");
    REQUIRE(edit_config(d, "hidden_size", "\"64\""), "edit");
    expect_refusal(d, RP_ERR_FORMAT, "must be an integer", "key of the wrong type");
    REQUIRE(edit_config(d, "hidden_size", "32"), "edit");
    expect_refusal(d, RP_ERR_FORMAT, "config.json implies", "shapes disagree with config.json");
    REQUIRE(edit_config(d, "hidden_size", "64") && edit_config(d, "num_hidden_layers", "1"),
            "edit");
    expect_refusal(d, RP_ERR_FORMAT, "layer 1 is beyond", "a layer beyond num_hidden_layers");
    REQUIRE(edit_config(d, "num_hidden_layers", "3"), "edit");
    expect_refusal(d, RP_ERR_FORMAT, "model.layers.2.", "a missing layer");
    REQUIRE(edit_config(d, "num_hidden_layers", "2") &&
                edit_config(d, "tie_word_embeddings", "false"),
            "edit");
    expect_refusal(d, RP_ERR_FORMAT, "lm_head.weight", "untied without lm_head");
    REQUIRE(edit_config(d, "tie_word_embeddings", "true") &&
                edit_config(d, "num_key_value_heads", "3"),
            "edit");
    expect_refusal(d, RP_ERR_FORMAT, "num_key_value_heads", "heads not a multiple");
    REQUIRE(edit_config(d, "num_key_value_heads", "2") &&
                edit_config(d, "rope_parameters", "{\"rope_type\": \"dynamic\", \"factor\": 2.0}"),
            "edit");
    expect_refusal(d, RP_ERR_UNSUPPORTED, "rope type 'dynamic'", "unsupported rope scaling");
    REQUIRE(edit_config(d, "rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 4.0}"),
            "edit");
    expect_refusal(d, RP_ERR_FORMAT, "original_max_position_embeddings",
                   "yarn without its context");
    REQUIRE(edit_config(d, "rope_parameters",
                        "{\"rope_type\": \"default\", \"rope_theta\": 1000000.0}") &&
                edit_config(d, "vocab_size", "300"),
            "edit");
    expect_refusal(d, RP_ERR_FORMAT, "vocab_size", "tokenizer larger than vocab_size");
    REQUIRE(edit_config(d, "vocab_size", "320"), "edit");
    char cmd[1200];
    /* a tensor no rule knows */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && python3 -c \"import "
             "struct,json;h=json.dumps({'extra.weight':{'dtype':'F32','shape':[1],"
             "'data_offsets':[0,4]}}).encode();open('model-extra.safetensors','wb').write(struct."
             "pack('<Q',len(h))+h+"
             "bytes(4))\" && mv model.safetensors model-main.safetensors",
             d);
    REQUIRE(system(cmd) == 0, "extra shard");
    expect_refusal(d, RP_ERR_UNSUPPORTED, "'extra.weight' has no place", "an unknown tensor");
    /* a tensor of a dtype reprise does not convert */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && python3 -c \"import "
             "struct,json;h=json.dumps({'lm_head.weight':{'dtype':'I64','shape':[1],"
             "'data_offsets':[0,8]}}).encode();open('model-extra.safetensors','wb').write(struct."
             "pack('<Q',len(h))+h+"
             "bytes(8))\"",
             d);
    REQUIRE(system(cmd) == 0 && edit_config(d, "tie_word_embeddings", "false"), "I64 shard");
    expect_refusal(d, RP_ERR_UNSUPPORTED, "dtype I64", "an I64 tensor");
    snprintf(cmd, sizeof cmd, "rm '%s/model-extra.safetensors' '%s/tokenizer.json'", d, d);
    REQUIRE(system(cmd) == 0 && edit_config(d, "tie_word_embeddings", "true"), "no tokenizer");
    expect_refusal(d, RP_ERR_IO, "--no-vocab", "no tokenizer.json");
    rp_convert_params p = rp_convert_default_params();
    p.dir = d;
    p.no_vocab = true;
    rp_conv *cv;
    CHECK(rp_conv_open(&p, &cv) == RP_OK, "--no-vocab converts without a tokenizer: %s",
          rp_last_error());
    rp_conv_free(cv);
}

/* A byte-level tokenizer whose split regex is not a known one is refused,
 * unless its pre-tokenizer is named. */
void test_convert_unknown_pre(void) {
    const char *d = copy_fixture("qwen2", "pre-qwen2");
    REQUIRE(d, "copy");
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "sed -i 's/\\\\\\\\p{N}| ?/\\\\\\\\p{N}{1,2}| ?/' '%s/tokenizer.json'", d);
    REQUIRE(system(cmd) == 0, "edit tokenizer.json");
    expect_refusal(d, RP_ERR_UNSUPPORTED, "--vocab-pre", "unknown split regex");
    rp_convert_params p = rp_convert_default_params();
    p.dir = d;
    p.vocab_pre = "qwen2";
    rp_conv *cv;
    CHECK(rp_conv_open(&p, &cv) == RP_OK, "--vocab-pre overrides: %s", rp_last_error());
    rp_conv_free(cv);
}

/* --dry-run on a config.json alone plans the same tensors as the weights. */
void test_convert_plan_from_config(void) {
    for (size_t f = 0; f < RP_ARRAY_LEN(g_fix); f++) {
        char dir[256];
        snprintf(dir, sizeof dir, FIX "/%s", g_fix[f].name);
        char as[64]; /* the same base name: general.name is the directory's */
        snprintf(as, sizeof as, "cfg/%s", g_fix[f].name);
        const char *d = copy_fixture(g_fix[f].name, as);
        REQUIRE(d, "copy");
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -f '%s'/*.safetensors '%s'/*.index.json", d, d);
        REQUIRE(system(cmd) == 0, "rm weights");
        rp_convert_params p = rp_convert_default_params();
        p.dir = dir;
        rp_conv *a, *b;
        REQUIRE(rp_conv_open(&p, &a) == RP_OK, "%s", rp_last_error());
        p.dir = d;
        rp_status s = rp_conv_open(&p, &b);
        CHECK(s == RP_ERR_IO, "%s: no weights without shapes_from_config: %s", d, rp_last_error());
        p.shapes_from_config = true;
        s = rp_conv_open(&p, &b);
        CHECK(s == RP_OK, "%s: %s", d, rp_last_error());
        if (s) {
            rp_conv_free(a);
            continue;
        }
        CHECK(rp_conv_from_shapes(b) && rp_conv_n_out(a) == rp_conv_n_out(b),
              "%s: %zu vs %zu tensors", g_fix[f].name, rp_conv_n_out(a), rp_conv_n_out(b));
        for (size_t i = 0; i < rp_conv_n_out(a) && i < rp_conv_n_out(b); i++) {
            const rp_conv_out *x = rp_conv_out_at(a, i), *y = rp_conv_out_at(b, i);
            bool same = !strcmp(x->name, y->name) && x->type == y->type && x->n_dims == y->n_dims &&
                        !memcmp(x->ne, y->ne, sizeof x->ne);
            CHECK(same, "%s: tensor %zu: %s vs %s", g_fix[f].name, i, x->name, y->name);
            if (!same) break;
        }
        CHECK(rp_conv_file_size(a) == rp_conv_file_size(b), "%s: same file size", g_fix[f].name);
        CHECK(rp_conv_write(b, test_tmp("never.gguf"), NULL, NULL) == RP_ERR_INVALID_ARG,
              "a shape plan is not written");
        rp_conv_free(a);
        rp_conv_free(b);
    }
}

/* Older config.json layouts (rope_theta + rope_scaling, rope_local_base_freq,
 * sliding_window_pattern) convert to the same file as transformers 5's. */
static bool same_gguf(const char *pa, const char *pb, char *why, size_t n) {
    rp_gguf *a, *b;
    if (rp_gguf_open(pa, &a)) return snprintf(why, n, "%s", rp_last_error()), false;
    if (rp_gguf_open(pb, &b))
        return rp_gguf_close(a), snprintf(why, n, "%s", rp_last_error()), false;
    bool ok = rp_gguf_n_kv(a) == rp_gguf_n_kv(b) && rp_gguf_n_tensors(a) == rp_gguf_n_tensors(b);
    if (!ok)
        snprintf(why, n, "%llu/%llu keys, %llu/%llu tensors", (unsigned long long)rp_gguf_n_kv(a),
                 (unsigned long long)rp_gguf_n_kv(b), (unsigned long long)rp_gguf_n_tensors(a),
                 (unsigned long long)rp_gguf_n_tensors(b));
    for (uint64_t i = 0; ok && i < rp_gguf_n_kv(a); i++) {
        const rp_gguf_kv *x = rp_gguf_kv_at(a, i);
        const rp_gguf_val *y = rp_gguf_get(b, x->key);
        if (!strcmp(x->key, "general.name")) continue;
        ok = y && y->type == x->val.type &&
             (x->val.type == RP_GGUF_ARRAY || x->val.type == RP_GGUF_STRING
                  ? true
                  : (x->val.type == RP_GGUF_FLOAT32 ? x->val.f == y->f : x->val.u == y->u));
        if (!ok) snprintf(why, n, "key %s differs", x->key);
    }
    for (uint64_t i = 0; ok && i < rp_gguf_n_tensors(a); i++) {
        const rp_gguf_tensor *x = rp_gguf_tensor_at(a, i), *y = rp_gguf_find_tensor(b, x->name);
        ok = y && x->type == y->type && x->nbytes == y->nbytes &&
             !memcmp(x->data, y->data, (size_t)x->nbytes);
        if (!ok) snprintf(why, n, "tensor %s differs", x->name);
    }
    rp_gguf_close(a);
    rp_gguf_close(b);
    return ok;
}

void test_convert_old_config_layout(void) {
    char why[300];
    const char *d = copy_fixture("llama", "old-llama");
    REQUIRE(
        d && edit_config(d, "rope_parameters", NULL) && edit_config(d, "rope_theta", "10000.0") &&
            edit_config(d, "rope_scaling",
                        "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                        "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}"),
        "edit");
    const char *a = test_tmp("layout-new.gguf"), *b = test_tmp("layout-old.gguf");
    REQUIRE(convert_to(FIX "/llama", RP_TYPE_F32, a) == RP_OK &&
                convert_to(d, RP_TYPE_F32, b) == RP_OK,
            "%s", rp_last_error());
    CHECK(same_gguf(a, b, why, sizeof why), "llama: %s", why);
    d = copy_fixture("gemma3", "old-gemma3");
    REQUIRE(d && edit_config(d, "rope_parameters", NULL) && edit_config(d, "layer_types", NULL) &&
                edit_config(d, "_sliding_window_pattern", NULL) &&
                edit_config(d, "sliding_window_pattern", "6") &&
                edit_config(d, "rope_theta", "1000000.0") &&
                edit_config(d, "rope_local_base_freq", "10000.0"),
            "edit");
    REQUIRE(convert_to(FIX "/gemma3", RP_TYPE_F32, a) == RP_OK &&
                convert_to(d, RP_TYPE_F32, b) == RP_OK,
            "%s", rp_last_error());
    CHECK(same_gguf(a, b, why, sizeof why), "gemma3: %s", why);
    /* a pattern that is not five local + one global is written per layer */
    REQUIRE(edit_config(d, "sliding_window_pattern", "2"), "edit");
    REQUIRE(convert_to(d, RP_TYPE_F32, b) == RP_OK, "%s", rp_last_error());
    rp_gguf *g;
    REQUIRE(rp_gguf_open(b, &g) == RP_OK, "%s", rp_last_error());
    const rp_gguf_val *v = rp_gguf_get(g, "gemma3.attention.sliding_window_pattern");
    CHECK(v && v->type == RP_GGUF_ARRAY && v->arr.type == RP_GGUF_BOOL && v->arr.n == 6 &&
              v->arr.raw[0] == 1 && v->arr.raw[1] == 0 && v->arr.raw[4] == 1 && v->arr.raw[5] == 0,
          "per-layer pattern");
    rp_gguf_close(g);
}

/* Written atomically: a failed write leaves nothing, and the planned size is
 * the file's size. */
void test_convert_write_size(void) {
    rp_convert_params p = rp_convert_default_params();
    p.dir = FIX "/qwen2";
    rp_conv *cv;
    REQUIRE(rp_conv_open(&p, &cv) == RP_OK, "%s", rp_last_error());
    const char *out = test_tmp("size.gguf");
    REQUIRE(rp_conv_write(cv, out, NULL, NULL) == RP_OK, "%s", rp_last_error());
    struct stat sb;
    CHECK(stat(out, &sb) == 0 && (uint64_t)sb.st_size == rp_conv_file_size(cv),
          "size %lld vs planned %llu", (long long)sb.st_size,
          (unsigned long long)rp_conv_file_size(cv));
    CHECK(rp_conv_write(cv, "/nonexistent-dir/x.gguf", NULL, NULL) == RP_ERR_IO,
          "write into a missing directory");
    rp_conv_free(cv);
}

/* A Gemma 3 checkpoint whose query_pre_attn_scalar is not the value
 * llama.cpp's rule takes (head_dim, or n_embd/n_head for 62 layers): the
 * converter writes its scale under <arch>.attention.scale, and the file's
 * logits are transformers' (ggml's GELU) to F32 rounding; the rule's own
 * value writes no key. Without the key the logits are off (the case of the
 * issue: the scale fell back to the rule). */
void test_convert_gemma3_query_pre_attn_scalar(void) {
    const char *d = copy_fixture("gemma3", "qpas-gemma3");
    REQUIRE(d && edit_config(d, "query_pre_attn_scalar", "16"), "edit");
    const char *out = test_tmp("qpas16.gguf"), *plain = test_tmp("qpas32.gguf");
    REQUIRE(convert_to(d, RP_TYPE_F32, out) == RP_OK, "%s", rp_last_error());
    REQUIRE(convert_to(FIX "/gemma3", RP_TYPE_F32, plain) == RP_OK, "%s", rp_last_error());
    rp_gguf *g;
    REQUIRE(rp_gguf_open(out, &g) == RP_OK, "%s", rp_last_error());
    CHECK(key_f32(g, "gemma3.attention.scale") == 0.25f, "scale %g (want 1/sqrt(16))",
          key_f32(g, "gemma3.attention.scale"));
    rp_gguf_close(g);
    REQUIRE(rp_gguf_open(plain, &g) == RP_OK, "%s", rp_last_error());
    CHECK(!rp_gguf_get(g, "gemma3.attention.scale"), "the rule's value writes no key");
    rp_gguf_close(g);

    int tok[64];
    const int n = test_read_ints(FIX "/gemma3/ref/tokens.txt", 0, tok, 64);
    size_t len;
    float *ref = test_read(FIX "/gemma3/ref/logits-qpas16.f32", &len);
    REQUIRE(n > 8 && ref, "reference");
    int nv = 0;
    float *got = run_logits(out, tok, n, &nv), *wrong = run_logits(plain, tok, n, &nv);
    REQUIRE(got && wrong && (size_t)n * (size_t)nv * sizeof(float) == len, "logits");
    const size_t cnt = (size_t)n * (size_t)nv;
    const double dg = test_max_abs_diff(ref, got, cnt), dw = test_max_abs_diff(ref, wrong, cnt);
    /* F32 rounding: 1e-4 of max|logit| (64.9), NMSE 1e-9 (measured 1.2e-3, 1.3e-10) */
    const double nm = test_nmse(ref, got, cnt);
    CHECK(dg <= 1e-4 * max_abs(ref, cnt) && nm <= 1e-9, "max|d| %.3g, NMSE %.3g vs transformers",
          dg, nm);
    CHECK(dw > 100 * dg && dw > 1e-2, "the rule's scale is off by %.3g (the stated one %.3g)", dw,
          dg);
    printf("     gemma3 query_pre_attn_scalar 16: max|d| %.2e, NMSE %.2e (rule's scale: %.2e)\n",
           dg, nm, dw);
    free(ref);
    free(got);
    free(wrong);
}
