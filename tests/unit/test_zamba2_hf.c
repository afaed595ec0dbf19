/* Zamba2 against transformers: the tiny checkpoints of
 * tests/fixtures/hf/zamba2-* (tests/reference/make_zamba2_fixtures.py),
 * converted to both GGUF forms; shared tensors stored and held once; the
 * adapters matter. */
#include "test_zamba2.h"

#include "convert/convert.h"

#include <math.h>

#define FIX "tests/fixtures/hf/"

/* Converts fixture `name` (merged: the older merged form) to a scratch GGUF;
 * the path is kept in one of a few static slots (test_tmp's rotate faster). */
static const char *convert_fixture(const char *name, bool merged, int outtype) {
    static char slots[4][1024];
    static int k;
    char dir[256], out[256];
    snprintf(dir, sizeof dir, FIX "%s", name);
    snprintf(out, sizeof out, "%s-%s-%s.gguf", name, merged ? "merged" : "adapters",
             rp_type_name(outtype));
    char *path = slots[k++ % 4];
    snprintf(path, sizeof slots[0], "%s", test_tmp(out));
    rp_convert_params p = rp_convert_default_params();
    p.dir = dir;
    p.outtype = outtype;
    p.arch_opts = merged ? "merged" : NULL;
    rp_conv *cv;
    rp_status s = rp_conv_open(&p, &cv);
    if (!s) {
        s = rp_conv_write(cv, path, NULL, NULL);
        rp_conv_free(cv);
    }
    if (s) {
        fprintf(stderr, "  convert %s: %s\n", name, rp_last_error());
        return NULL;
    }
    return path;
}

static int read_tokens(const char *name, int32_t *toks, int max) {
    char p[256];
    int t[512];
    snprintf(p, sizeof p, FIX "%s/ref/tokens.txt", name);
    int n = test_read_ints(p, 0, t, RP_MIN(max, 512));
    for (int i = 0; i < n; i++) toks[i] = t[i];
    return n;
}

/* max |delta| of every position's logits against ref/<file>; INFINITY when
 * something could not run. */
static double vs_reference(const char *gguf, const char *name, const char *file) {
    int32_t toks[512];
    int n = read_tokens(name, toks, 512);
    char p[256];
    snprintf(p, sizeof p, FIX "%s/ref/%s", name, file);
    size_t len;
    float *ref = test_read(p, &len);
    rp_model *m = load(gguf);
    rp_context *c = NULL;
    double worst = INFINITY;
    if (n > 0 && ref && m && open_ctx(m, NULL, NULL, 64, 1, 1, &c)) {
        const int nv = rp_n_vocab(c);
        float *got = malloc((size_t)n * (size_t)nv * sizeof(float));
        if (got && len == (size_t)n * (size_t)nv * sizeof(float) && run_chunks(c, toks, n, n, got))
            worst = test_max_abs_diff(ref, got, (size_t)n * (size_t)nv);
        free(got);
    }
    free(ref);
    rp_context_free(c);
    rp_model_free(m);
    return worst;
}

static int count_tensors(const rp_model *m, const char *suffix) {
    int n = 0;
    size_t k = strlen(suffix);
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        size_t l = strlen(m->tensors[i].name);
        n += l >= k && !strcmp(m->tensors[i].name + l - k, suffix);
    }
    return n;
}

/* ---- against transformers ---------------------------------------------------- */

static void check_fixture(const char *name) {
    for (int merged = 0; merged < 2; merged++) {
        const char *path = convert_fixture(name, merged, RP_TYPE_F32);
        REQUIRE(path, "%s: conversion failed", name);
        double d = vs_reference(path, name, "logits.f32");
        CHECK(d <= 1e-4, "%s (%s form): logits max |delta| %.3g > 1e-4 vs transformers", name,
              merged ? "merged" : "adapter", d);
        printf("     %s, %s form, F32: max|d| vs transformers %.2e\n", name,
               merged ? "merged" : "adapter", d);
    }
    /* F16 matrices (the adapter pair too) against transformers with every
     * 2-D weight rounded to float16. The CPU also rounds each F16 matmul's
     * activations to float16 (llama.cpp's arithmetic, bit for bit in
     * tests/cli/quant_types.sh), which the reference does not: one rounding
     * (relative 2^-12) per activation, measured max |delta| 0.0141 (mem2) and
     * 0.0274 (mem1); the F32 checks above keep 1e-4 */
    const char *path = convert_fixture(name, false, RP_TYPE_F16);
    REQUIRE(path, "%s: f16 conversion failed", name);
    double d = vs_reference(path, name, "logits-f16w.f32");
    CHECK(d <= 0.06,
          "%s (adapter form, F16): logits max |delta| %.3g > 0.06 vs transformers (f16 weights)",
          name, d);
    printf("     %s, adapter form, F16: max|d| vs transformers (f16 weights) %.2e\n", name, d);
}

/* num_mem_blocks=1, attention adapters, RoPE, hybrid layers in a row */
void test_zamba2_hf_mem1(void) {
    check_fixture("zamba2-mem1");
}
/* num_mem_blocks=2, GQA, two Mamba2 groups, biases, no RoPE, BF16 checkpoint */
void test_zamba2_hf_mem2(void) {
    check_fixture("zamba2-mem2");
}

/* ---- shared tensors stored and held once ------------------------------------ */

void test_zamba2_shared_once(void) {
    const char *pa = convert_fixture("zamba2-mem2", false, RP_TYPE_F32);
    const char *pm = convert_fixture("zamba2-mem2", true, RP_TYPE_F32);
    REQUIRE(pa && pm, "conversion failed");
    rp_model *a = load(pa), *m = load(pm);
    REQUIRE(a && m, "load");
    static const int hyb[4] = {1, 3, 4, 6}; /* visits 0..3: blocks 0, 1, 0, 1 */
    /* adapter form: each shared tensor once in the file, one pair per visit */
    CHECK(count_tensors(a, ".attn_q.weight") == 2 && count_tensors(a, ".ffn_up.weight") == 2 &&
              count_tensors(a, ".shared_attn_norm.weight") == 2 &&
              count_tensors(a, ".ffn_down.weight") == 2,
          "shared tensors stored once per block");
    CHECK(count_tensors(a, ".ffn_gate_up_adapter_a.weight") == 4 &&
              count_tensors(a, ".ffn_gate_up_adapter_b.weight") == 4,
          "one adapter pair per visit");
    for (int v = 0; v < 4; v++) {
        const rp_layer *L = &a->layers[hyb[v]], *F = &a->layers[hyb[v % 2]];
        CHECK(L->wq == F->wq && L->wk == F->wk && L->wv == F->wv && L->wo == F->wo &&
                  L->ffn_gate_up == F->ffn_gate_up && L->ffn_down == F->ffn_down &&
                  L->attn_norm == F->attn_norm && L->ffn_norm == F->ffn_norm,
              "visit %d (layer %d) aliases block %d's tensors stored at layer %d", v, hyb[v], v % 2,
              hyb[v % 2]);
        CHECK(L->wq != a->layers[hyb[(v + 1) % 2]].wq,
              "visit %d: the other block is another tensor", v);
        CHECK(a->info[hyb[v]].kind == RP_LAYER_HYBRID && a->info[hyb[v]].has_kv &&
                  a->info[hyb[v]].rec_floats,
              "layer %d is hybrid with KV and recurrent state", hyb[v]);
    }
    CHECK(a->info[0].kind == RP_LAYER_RECURRENT && !a->info[0].has_kv, "layer 0 is a Mamba2 layer");
    /* merged form: a full ffn_up per visit, no pairs, shared attention */
    CHECK(count_tensors(m, ".ffn_up.weight") == 4 && count_tensors(m, "_adapter_a.weight") == 0 &&
              count_tensors(m, ".attn_q.weight") == 2,
          "merged form: 4 ffn_up, no adapters, attention stored once");
    for (int v = 0; v < 4; v++)
        CHECK(m->layers[hyb[v]].ffn_gate_up != m->layers[hyb[(v + 2) % 4]].ffn_gate_up,
              "merged form: visit %d has its own ffn_up", v);
    /* weight bytes are the file's tensor bytes: nothing is copied at load */
    uint64_t file_bytes = 0;
    for (uint64_t i = 0; i < rp_gguf_n_tensors(a->gguf); i++)
        file_bytes += rp_gguf_tensor_at(a->gguf, i)->nbytes;
    CHECK(rp_model_weight_bytes(a) == file_bytes, "weight bytes %llu vs file %llu",
          (unsigned long long)rp_model_weight_bytes(a), (unsigned long long)file_bytes);
    printf("     zamba2-mem2: adapter form %llu tensors / %llu weight bytes, merged form %llu / "
           "%llu\n",
           (unsigned long long)a->n_tensors, (unsigned long long)rp_model_weight_bytes(a),
           (unsigned long long)m->n_tensors, (unsigned long long)rp_model_weight_bytes(m));
    rp_model_free(a);
    rp_model_free(m);
}

/* The adapters are applied: a copy whose B matrices are zero runs another
 * model (so the reference comparison above can fail). */
void test_zamba2_adapters_matter(void) {
    const char *pa = convert_fixture("zamba2-mem1", false, RP_TYPE_F32);
    REQUIRE(pa, "conversion failed");
    const char *z1 = rewrite(pa, "z2-nogu.gguf", NULL, "ffn_gate_up_adapter_b", NULL);
    const char *z2 = rewrite(pa, "z2-noqkv.gguf", NULL, "_adapter_b", NULL);
    REQUIRE(z1 && z2, "rewrite");
    double d1 = vs_reference(z1, "zamba2-mem1", "logits.f32"),
           d2 = vs_reference(z2, "zamba2-mem1", "logits.f32");
    CHECK(d1 > 1e-2 && isfinite(d1), "zeroing the MLP adapters moved the logits by only %.3g", d1);
    CHECK(d2 > d1 && isfinite(d2),
          "zeroing the attention adapters as well moved them by %.3g (MLP alone %.3g)", d2, d1);
    printf("     without MLP adapters: max|d| %.2f; without any adapter: %.2f\n", d1, d2);
}
