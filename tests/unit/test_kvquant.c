/* Quantized KV caches (-ctk / -ctv q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)
 * through the public API, on the synthetic Qwen3 model (heads of 32): the
 * state costs exactly the cache's rows (so a plan's price shrinks with the
 * type); an explicit identity plan decodes bit for bit like no plan, for each
 * type; a sequence's saved state restores bit for bit; the quantized caches'
 * logits stay near the F16 cache's; and a model whose heads are not a multiple
 * of 32 is refused with a message naming the layer. */
#include "test.h"
#include "kernels/ops.h"
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
