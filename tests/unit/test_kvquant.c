/* Quantized KV caches (-ctk / -ctv q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)
 * through the public API, on the synthetic Qwen3 model (heads of 32): the
 * state costs exactly the cache's rows (so a plan's price shrinks with the
 * type); an explicit identity plan decodes bit for bit like no plan, for each
 * type; a sequence's saved state restores bit for bit; the quantized caches'
 * logits stay near the F16 cache's; and a model whose heads are not a multiple
 * of 32 is refused with a message naming the layer. */
#include "test.h"
#include "kernels/ops.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "base/threads.h"
#include "base/util.h"
#include "reprise.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QWEN3 "models/synth/qwen3-tiny.gguf"

static const int32_t k_tok[] = {1, 403, 407, 261, 378, 69, 259, 397, 269, 101, 306, 278, 44, 90};
#define N_TOK ((int)(sizeof k_tok / sizeof k_tok[0]))

#define N_TYPES 6
static const int k_types[N_TYPES] = {RP_TYPE_Q8_0, RP_TYPE_Q4_0, RP_TYPE_Q4_1,
                                     RP_TYPE_Q5_0, RP_TYPE_Q5_1, RP_TYPE_IQ4_NL};

static rp_context *ctx_of(const rp_model *m, int tk, int tv, const char *map, int n_seq) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq_max = (uint32_t)n_seq;
    cp.n_threads = 2;
    cp.type_k = tk;
    cp.type_v = tv;
    cp.layer_map = map;
    rp_context *c = NULL;
    if (rp_context_new(m, &cp, &c)) fprintf(stderr, "  %s\n", rp_last_error());
    return c;
}

static bool decode(rp_context *c, const int32_t *t, int n, int seq, bool all) {
    int32_t s[64];
    int8_t lg[64];
    for (int i = 0; i < n; i++) {
        s[i] = seq;
        lg[i] = all || i == n - 1;
    }
    rp_batch b = {.n_tokens = n, .token = t, .seq_id = s, .logits = lg};
    rp_status st = rp_decode(c, &b);
    if (st) fprintf(stderr, "  decode: %s\n", rp_last_error());
    return st == RP_OK;
}

void test_kvquant_state_bytes(void) {
    rp_model *m = NULL;
    REQUIRE(!rp_model_load(test_shared(QWEN3), NULL, &m), "%s", rp_last_error());
    rp_context *f16 = ctx_of(m, RP_TYPE_F16, RP_TYPE_F16, NULL, 1);
    REQUIRE(f16, "f16 context");
    const uint64_t b16 = rp_context_state_bytes(f16);
    for (size_t i = 0; i < N_TYPES; i++) {
        const int t = k_types[i];
        rp_context *c = ctx_of(m, t, t, NULL, 1);
        REQUIRE(c, "%s context", rp_type_name(t));
        /* F16 rows of 32 are 64 bytes; a quantized row is one block */
        const uint64_t want = b16 / 64 * rp_kv_row_bytes(t, 32);
        CHECK(rp_context_state_bytes(c) == want, "%s: state %llu bytes, want %llu", rp_type_name(t),
              (unsigned long long)rp_context_state_bytes(c), (unsigned long long)want);
        rp_context_free(c);
        /* a repeated layer adds one layer's rows of that type */
        rp_context *rep = ctx_of(m, t, t, "0,1,1", 1);
        if (rep) {
            const uint64_t per_layer = want / (uint64_t)rp_model_n_layer(m);
            CHECK(rp_context_state_bytes(rep) == per_layer * 3, "%s: a 3-step plan costs %llu",
                  rp_type_name(t), (unsigned long long)rp_context_state_bytes(rep));
        }
        rp_context_free(rep);
    }
    rp_context_free(f16);
    rp_model_free(m);
}

void test_kvquant_identity_and_drift(void) {
    rp_model *m = NULL;
    REQUIRE(!rp_model_load(test_shared(QWEN3), NULL, &m), "%s", rp_last_error());
    char map[32];
    snprintf(map, sizeof map, "0..%d", rp_model_n_layer(m) - 1);
    rp_context *ref = ctx_of(m, RP_TYPE_F16, RP_TYPE_F16, NULL, 1);
    REQUIRE(ref && decode(ref, k_tok, N_TOK, 0, true), "f16 reference");
    const int nv = rp_n_vocab(ref);
    float *want = malloc(sizeof(float) * (size_t)nv * N_TOK);
    for (int i = 0; i < N_TOK; i++)
        memcpy(want + (size_t)i * nv, rp_get_logits(ref, i), sizeof(float) * (size_t)nv);
    float lo = want[0], hi = want[0];
    for (size_t i = 0; i < (size_t)nv * N_TOK; i++) {
        lo = fminf(lo, want[i]);
        hi = fmaxf(hi, want[i]);
    }
    const double span = hi - lo;
    double drift[N_TYPES + 1];
    for (size_t ti = 0; ti < N_TYPES + 1; ti++) {
        /* the last round: K and V of different types */
        const int tk = ti < N_TYPES ? k_types[ti] : RP_TYPE_Q8_0;
        const int tv = ti < N_TYPES ? k_types[ti] : RP_TYPE_Q4_0;
        rp_context *a = ctx_of(m, tk, tv, NULL, 1), *b = ctx_of(m, tk, tv, map, 1);
        REQUIRE(a && b, "%s/%s contexts", rp_type_name(tk), rp_type_name(tv));
        REQUIRE(decode(a, k_tok, N_TOK, 0, true) && decode(b, k_tok, N_TOK, 0, true), "decode");
        int differ = 0;
        double worst = 0;
        for (int i = 0; i < N_TOK; i++) {
            differ +=
                memcmp(rp_get_logits(a, i), rp_get_logits(b, i), sizeof(float) * (size_t)nv) != 0;
            worst = fmax(worst,
                         test_max_abs_diff(rp_get_logits(a, i), want + (size_t)i * nv, (size_t)nv));
        }
        CHECK(!differ, "%s/%s: %d rows of the identity plan differ from no plan", rp_type_name(tk),
              rp_type_name(tv), differ);
        /* a coarser cache moves the logits more: q8_0 least, and none of
         * them wholesale (nor not at all: the cache would still be F16) */
        drift[ti] = worst;
        CHECK(worst > 0 && worst < 0.25 * span,
              "%s/%s: max |logit - f16 cache's| %.3g (logits span %.3g)", rp_type_name(tk),
              rp_type_name(tv), worst, span);
        CHECK(ti == 0 || worst > drift[0], "%s/%s: drift %.3g not above q8_0's %.3g",
              rp_type_name(tk), rp_type_name(tv), worst, drift[0]);
        printf("     %s/%s: max |logit delta| vs f16 cache %.3g (logits span %.3g)\n",
               rp_type_name(tk), rp_type_name(tv), worst, span);
        rp_context_free(a);
        rp_context_free(b);
    }
    free(want);
    rp_context_free(ref);
    rp_model_free(m);
}

void test_kvquant_state_roundtrip(void) {
    rp_model *m = NULL;
    REQUIRE(!rp_model_load(test_shared(QWEN3), NULL, &m), "%s", rp_last_error());
    int nv = 0;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const int t = k_types[ti];
        rp_context *c = ctx_of(m, t, t, NULL, 1), *to = ctx_of(m, t, t, NULL, 2);
        REQUIRE(c && to, "%s contexts", rp_type_name(t));
        nv = rp_n_vocab(c);
        REQUIRE(decode(c, k_tok, N_TOK - 1, 0, false), "prompt");
        const size_t n = rp_seq_state_size(c, 0);
        void *img = malloc(n);
        REQUIRE(!rp_seq_state_save(c, 0, img, n, NULL), "save: %s", rp_last_error());
        REQUIRE(decode(c, &k_tok[N_TOK - 1], 1, 0, false), "next");
        float *a = malloc(sizeof(float) * (size_t)nv);
        memcpy(a, rp_get_logits(c, 0), sizeof(float) * (size_t)nv);
        REQUIRE(decode(to, k_tok, 3, 1, false), "other content");
        REQUIRE(!rp_seq_state_load(to, 1, img, n), "load: %s", rp_last_error());
        REQUIRE(decode(to, &k_tok[N_TOK - 1], 1, 1, false), "next after restore");
        CHECK(!memcmp(a, rp_get_logits(to, 0), sizeof(float) * (size_t)nv),
              "%s: the restored sequence decodes differently", rp_type_name(t));
        /* an image of another cache type is refused by name */
        rp_context *other = ctx_of(m, RP_TYPE_F16, RP_TYPE_F16, NULL, 1);
        CHECK(other && rp_seq_state_load(other, 0, img, n) == RP_ERR_UNSUPPORTED &&
                  strstr(rp_last_error(), rp_type_name(t)),
              "%s image into an f16 context: %s", rp_type_name(t), rp_last_error());
        rp_context_free(other);
        free(a);
        free(img);
        rp_context_free(to);
        rp_context_free(c);
    }
    rp_model_free(m);
}

void test_kvquant_refusals(void) {
    rp_model *m = NULL;
    REQUIRE(!rp_model_load(test_shared("models/stories260K.gguf"), NULL, &m), "%s",
            rp_last_error());
    rp_context *c = ctx_of(m, RP_TYPE_Q8_0, RP_TYPE_F16, NULL, 1);
    CHECK(!c && strstr(rp_last_error(), "layer 0") && strstr(rp_last_error(), "multiple of 32"),
          "heads of 8 with a q8_0 cache: %s", rp_last_error());
    rp_context_free(c);
    c = ctx_of(m, RP_TYPE_F16, RP_TYPE_Q4_K, NULL, 1);
    CHECK(!c && strstr(rp_last_error(), "q4_K") && strstr(rp_last_error(), "iq4_nl"),
          "a q4_K cache: %s", rp_last_error());
    rp_context_free(c);
    CHECK(rp_kv_type_supported(RP_TYPE_IQ4_NL) && !rp_kv_type_supported(RP_TYPE_Q8_1) &&
              !rp_kv_type_supported(-1),
          "rp_kv_type_supported");
    rp_model_free(m);
}

/* ---- the rotation of quantized caches (llama.cpp's attn_rot_k/_v) -------- */

/* rp_fwht against the Sylvester Hadamard matrix built here entry by entry
 * (H[i][j] = (-1)^popcount(i & j) / sqrt(n)): within float rounding, and its
 * own inverse; the block sizes llama.cpp picks for each head */
void test_kv_rotation_hadamard(void) {
    const int sizes[] = {64, 128, 256};
    double worst = 0, worst_inv = 0;
    for (int si = 0; si < 3; si++) {
        const int n = sizes[si];
        float x[256], y[256];
        for (int i = 0; i < n; i++) x[i] = y[i] = sinf(0.37f * (float)i) + (i == 5 ? 20.0f : 0.0f);
        rp_fwht(y, n);
        for (int i = 0; i < n; i++) {
            double want = 0;
            for (int j = 0; j < n; j++)
                want += (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) * x[j];
            want /= sqrt((double)n);
            worst = fmax(worst, fabs(want - y[i]));
        }
        rp_fwht(y, n);
        for (int i = 0; i < n; i++) worst_inv = fmax(worst_inv, fabs((double)x[i] - y[i]));
    }
    CHECK(worst < 1e-4 && worst_inv < 1e-4, "fwht vs the matrix %.2e, twice vs identity %.2e",
          worst, worst_inv);
    CHECK(rp_kv_rot_k(RP_TYPE_Q4_0, 64) == 64 && rp_kv_rot_k(RP_TYPE_Q8_0, 128) == 128 &&
              rp_kv_rot_k(RP_TYPE_Q4_0, 256) == 256 && rp_kv_rot_k(RP_TYPE_Q4_0, 192) == 64 &&
              rp_kv_rot_k(RP_TYPE_Q4_0, 96) == 0 && rp_kv_rot_k(RP_TYPE_F16, 128) == 0 &&
              rp_kv_rot_k(RP_TYPE_F32, 128) == 0,
          "K rotation sizes");
    CHECK(rp_kv_rot_v(RP_TYPE_Q4_0, 256) == 64 && rp_kv_rot_v(RP_TYPE_IQ4_NL, 64) == 64 &&
              rp_kv_rot_v(RP_TYPE_Q8_0, 32) == 0 && rp_kv_rot_v(RP_TYPE_F16, 64) == 0,
          "V rotation sizes");
}

/* One head with an outlier channel (as real keys have) through a Q4_0 cache:
 * the attention output against exact F32 attention, and the same with the
 * keys quantized without rotation (done here by hand). The rotated cache is
 * markedly closer: the outlier no longer sets the scale of its block. */
void test_kv_rotation_attention(void) {
    enum { D = 64, NP = 48 };
    static float q[D], qr[D], k[NP][D], v[NP][D], o32[D], o4[D], ou[D];
    for (int i = 0; i < D; i++) q[i] = cosf(0.3f * (float)i) * (i == 7 ? 6.0f : 1.0f);
    for (int p = 0; p < NP; p++)
        for (int i = 0; i < D; i++) {
            k[p][i] = sinf(0.11f * (float)(p * D + i)) + (i == 7 ? 12.0f + 0.1f * (float)p : 0.0f);
            v[p][i] = cosf(0.07f * (float)(p * 3 + i));
        }
    /* reference attention of one query over keys kk (floats) */
    float kk[NP][D];
    for (int pass = 0; pass < 3; pass++) {
        float *out = pass == 0 ? o32 : pass == 1 ? o4 : ou;
        if (pass < 2) {
            /* the library: caches of F32 or Q4_0 K, F32 V */
            const int tk = pass == 0 ? RP_TYPE_F32 : RP_TYPE_Q4_0;
            void *kc = calloc(1, rp_kv_row_bytes(tk, D) * NP),
                 *vc = calloc(1, sizeof(float) * D * NP);
            REQUIRE(kc && vc, "alloc");
            rp_kv_view kv = {kc, vc, tk, RP_TYPE_F32, NP};
            for (int p = 0; p < NP; p++) rp_kv_write(&kv, 1, D, D, p, k[p], v[p]);
            const rp_kv_view *kvs[1] = {&kv};
            int32_t pos[1] = {NP - 1};
            memcpy(qr, q, sizeof q);
            rp_attn_args a = {.n_tok = 1,
                              .q = qr,
                              .q_stride = D,
                              .out = out,
                              .out_stride = D,
                              .n_head = 1,
                              .n_head_kv = 1,
                              .head_dim_k = D,
                              .head_dim_v = D,
                              .scale = 0.125f,
                              .pos = pos,
                              .kv = kvs};
            rp_compute cc = {.pool = rp_pool_new(1)};
            const size_t per = rp_attention_scratch(NP, 1, 1);
            float *scratch = malloc(per * sizeof(float));
            REQUIRE(cc.pool && scratch, "alloc");
            rp_attention(&cc, &a, scratch, per);
            free(scratch);
            rp_pool_free(cc.pool);
            free(kc);
            free(vc);
        } else {
            /* keys through Q4_0 unrotated, attention in double */
            block_q4_0 b[D / 32];
            for (int p = 0; p < NP; p++) {
                rp_quant_q4_0(k[p], b, D);
                rp_dequant_q4_0(b, kk[p], D);
            }
            double s[NP], mx = -1e30, sum = 0;
            for (int p = 0; p < NP; p++) {
                s[p] = 0;
                for (int i = 0; i < D; i++) s[p] += (double)q[i] * kk[p][i];
                s[p] *= 0.125;
                mx = fmax(mx, s[p]);
            }
            for (int p = 0; p < NP; p++) sum += (s[p] = exp(s[p] - mx));
            for (int i = 0; i < D; i++) {
                double acc = 0;
                for (int p = 0; p < NP; p++) acc += s[p] * v[p][i];
                out[i] = (float)(acc / sum);
            }
        }
    }
    double e_rot = 0, e_plain = 0, ref = 0;
    for (int i = 0; i < D; i++) {
        e_rot += (o4[i] - o32[i]) * (double)(o4[i] - o32[i]);
        e_plain += (ou[i] - o32[i]) * (double)(ou[i] - o32[i]);
        ref += o32[i] * (double)o32[i];
    }
    printf("     q4_0 K, one head of 64 with an outlier: nmse rotated %.2e, unrotated %.2e\n",
           e_rot / ref, e_plain / ref);
    CHECK(e_rot < 0.5 * e_plain, "the rotated cache is not closer (%.2e vs %.2e)", e_rot / ref,
          e_plain / ref);
}
