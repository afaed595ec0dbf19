/* llama end to end on stories260K against llama.cpp's goldens. */
#include "golden.h"
#include "test.h"

#include <math.h>
#include <string.h>

static void check_golden(const char *model, const char *prefix, const char *repeat, double tol) {
    golden_result r;
    REQUIRE(golden_run(model, prefix, repeat, &r), "%s: could not run", prefix);
    CHECK(r.max_abs <= tol, "%s: prompt logits max |delta| %.3g > %.3g", prefix, r.max_abs, tol);
    CHECK(r.greedy_match == r.n_greedy, "%s: greedy continuation diverges at token %d of %d",
          prefix, r.greedy_match, r.n_greedy);
    printf("     %s%s%s: max|d| %.2e nmse %.2e greedy %d/%d\n", prefix,
           repeat ? " --repeat-layers " : "", repeat ? repeat : "", r.max_abs, r.nmse,
           r.greedy_match, r.n_greedy);
}

void test_llama_golden_stories(void) {
    check_golden("models/stories260K.gguf", "golden/stories260K/p1", NULL, 1e-3);
    check_golden("models/stories260K.gguf", "golden/stories260K/p2", NULL, 1e-3);
    check_golden("models/stories260K.gguf", "golden/stories260K/p3", NULL, 1e-3);
}

void test_llama_golden_rys(void) {
    check_golden("models/stories260K.gguf", "golden/rys/stories260K-1-3", "1,3", 1e-3);
}

/* The prompt decoded as one batch equals the same prompt token by token. */
void test_llama_batch_equals_sequential(void) {
    rp_model *m;
    rp_context *c1, *c2;
    REQUIRE(test_open(test_shared("models/stories260K.gguf"), NULL, 128, &m, &c1), "open");
    rp_context_params cp = rp_context_default_params();
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.n_ctx = 128;
    REQUIRE(rp_context_new(m, &cp, &c2) == RP_OK, "ctx");
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = (int32_t)((i * 37 + 1) % 512);
    int8_t all[40];
    memset(all, 1, sizeof all);
    rp_batch b = {.n_tokens = 40, .token = toks, .logits = all};
    REQUIRE(rp_decode(c1, &b) == RP_OK, "%s", rp_last_error());
    int nv = rp_n_vocab(c1);
    double worst = 0;
    for (int i = 0; i < 40; i++) {
        rp_batch one = {.n_tokens = 1, .token = &toks[i]};
        REQUIRE(rp_decode(c2, &one) == RP_OK, "%s", rp_last_error());
        double d = test_max_abs_diff(rp_get_logits(c1, i), rp_get_logits(c2, 0), (size_t)nv);
        if (d > worst) worst = d;
    }
    CHECK(worst <= 1e-5, "batch vs sequential max |delta| %.3g", worst);
    rp_context_free(c1);
    rp_context_free(c2);
    rp_model_free(m);
}

/* The identity plan given explicitly is byte-identical to no plan. */
void test_llama_identity_plan_bitexact(void) {
    rp_model *m;
    rp_context *a, *b2;
    REQUIRE(test_open(test_shared("models/stories260K.gguf"), NULL, 64, &m, &a), "open");
    rp_context_params cp = rp_context_default_params();
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.n_ctx = 64;
    cp.layer_map = "0..4";
    REQUIRE(rp_context_new(m, &cp, &b2) == RP_OK, "%s", rp_last_error());
    int32_t toks[12] = {1, 403, 407, 261, 378, 13, 300, 301, 302, 303, 304, 305};
    int8_t all[12];
    memset(all, 1, sizeof all);
    rp_batch b = {.n_tokens = 12, .token = toks, .logits = all};
    REQUIRE(rp_decode(a, &b) == RP_OK && rp_decode(b2, &b) == RP_OK, "decode");
    bool same = true;
    for (int i = 0; i < 12; i++)
        same &= !memcmp(rp_get_logits(a, i), rp_get_logits(b2, i), 512 * sizeof(float));
    CHECK(same, "identity map differs from no plan");
    rp_context_free(a);
    rp_context_free(b2);
    rp_model_free(m);
}

/* A full context is an error status, never a crash. */
void test_llama_context_full(void) {
    rp_model *m;
    rp_context *c;
    REQUIRE(test_open(test_shared("models/stories260K.gguf"), NULL, 8, &m, &c), "open");
    int32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    rp_batch b = {.n_tokens = 9, .token = toks};
    CHECK(rp_decode(c, &b) == RP_ERR_CONTEXT_FULL, "9 tokens into 8 positions");
    CHECK(rp_kv_seq_len(c, 0) == 0, "refused batch leaves the cache untouched");
    b.n_tokens = 8;
    CHECK(rp_decode(c, &b) == RP_OK, "8 fit");
    rp_batch one = {.n_tokens = 1, .token = toks};
    CHECK(rp_decode(c, &one) == RP_ERR_CONTEXT_FULL && strstr(rp_last_error(), "context full"),
          "%s", rp_last_error());
    CHECK(rp_kv_seq_truncate(c, 0, 4) == RP_OK && rp_kv_seq_len(c, 0) == 4, "truncate");
    CHECK(rp_decode(c, &one) == RP_OK, "room again after truncate");
    int32_t bad = 99999;
    one.token = &bad;
    CHECK(rp_decode(c, &one) == RP_ERR_INVALID_ARG, "token id out of range");
    rp_context_free(c);
    rp_model_free(m);
}
