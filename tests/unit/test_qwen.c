/* qwen3 against llama.cpp's goldens (F32 KV), qwen2 (Q/K/V biases) on a
 * synthesized model: batch equals sequential, and the biases change the
 * result (a copy with zeroed biases gives other logits). */
#include "golden.h"
#include "test.h"

#include "format/gguf.h"
#include "core/model.h"
#include "convert/synth.h"

#include <math.h>
#include <string.h>

static void check_qwen_golden(const char *prefix, const char *repeat) {
    golden_result r;
    REQUIRE(golden_run("models/synth/qwen3-tiny.gguf", prefix, repeat, &r), "%s: could not run",
            prefix);
    /* the bar: NMSE <= 1e-6, max |delta| <= 2e-3, greedy identical */
    CHECK(r.nmse <= 1e-6, "%s: logits NMSE %.3g > 1e-6", prefix, r.nmse);
    CHECK(r.max_abs <= 2e-3, "%s: logits max |delta| %.3g > 2e-3", prefix, r.max_abs);
    CHECK(r.greedy_match == r.n_greedy, "%s: greedy continuation diverges at token %d of %d",
          prefix, r.greedy_match, r.n_greedy);
    printf("     %s%s%s: max|d| %.2e nmse %.2e greedy %d/%d\n", prefix,
           repeat ? " --repeat-layers " : "", repeat ? repeat : "", r.max_abs, r.nmse,
           r.greedy_match, r.n_greedy);
}

void test_qwen3_golden(void) {
    check_qwen_golden("golden/synth/qwen3-tiny.p1", NULL);
}

void test_qwen3_golden_rys(void) {
    check_qwen_golden("golden/rys/qwen3-tiny-3-5", "3,5");
}

/* A small qwen2 with biases, and a copy of it whose biases are zero. */
static bool qwen2_models(const char *path, const char *zero_path) {
    rp_synth_params p = rp_synth_default_params();
    p.arch = "qwen2";
    p.n_embd = 64;
    p.n_layer = 3;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = 96;
    p.n_vocab = 512;
    if (rp_synth_write(&p, path, NULL, NULL)) {
        fprintf(stderr, "  synth: %s\n", rp_last_error());
        return false;
    }
    rp_gguf *g;
    if (rp_gguf_open(path, &g)) return false;
    rp_gguf_writer *w = rp_gguf_writer_new();
    rp_status s = rp_gguf_w_copy_kv(w, g);
    static float zeros[4096];
    int n_bias = 0;
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g) && !s; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        bool bias = strstr(t->name, ".bias") != NULL;
        n_bias += bias;
        s = rp_gguf_w_add_tensor(w, t->name, (int)t->type, t->n_dims, t->ne,
                                 bias ? zeros : t->data);
    }
    s = s ? s : rp_gguf_w_write(w, zero_path, NULL, NULL);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
    if (n_bias != 3 * p.n_layer)
        fprintf(stderr, "  %d bias tensors, expected %d\n", n_bias, 3 * p.n_layer);
    return !s && n_bias == 3 * p.n_layer;
}

void test_qwen2_biases(void) {
    const char *path = test_tmp("qwen2.gguf"), *zpath = test_tmp("qwen2-nobias.gguf");
    REQUIRE(qwen2_models(path, zpath), "could not write the qwen2 models");
    rp_model *m, *mz;
    rp_context *c1, *c2, *cz;
    REQUIRE(test_open(path, NULL, 64, &m, &c1), "open");
    REQUIRE(test_open(zpath, NULL, 64, &mz, &cz), "open zero-bias copy");
    CHECK(!strcmp(rp_model_arch(m), "qwen2"), "arch %s", rp_model_arch(m));
    for (int l = 0; l < 3; l++)
        CHECK(m->layers[l].bq && m->layers[l].bk && m->layers[l].bv && !m->layers[l].q_norm,
              "layer %d: q/k/v biases bound, no q/k norm", l);
    rp_context_params cp = rp_context_default_params();
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.n_ctx = 64;
    REQUIRE(rp_context_new(m, &cp, &c2) == RP_OK, "%s", rp_last_error());
    enum { N = 24 };
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (int32_t)((i * 53 + 7) % 512);
    int8_t all[N];
    memset(all, 1, sizeof all);
    rp_batch b = {.n_tokens = N, .token = toks, .logits = all};
    REQUIRE(rp_decode(c1, &b) == RP_OK && rp_decode(cz, &b) == RP_OK, "%s", rp_last_error());
    int nv = rp_n_vocab(c1);
    double worst = 0, bias_effect = 0;
    for (int i = 0; i < N; i++) {
        bias_effect = fmax(
            bias_effect, test_max_abs_diff(rp_get_logits(c1, i), rp_get_logits(cz, i), (size_t)nv));
        rp_batch one = {.n_tokens = 1, .token = &toks[i]};
        REQUIRE(rp_decode(c2, &one) == RP_OK, "%s", rp_last_error());
        worst =
            fmax(worst, test_max_abs_diff(rp_get_logits(c1, i), rp_get_logits(c2, 0), (size_t)nv));
    }
    CHECK(worst <= 1e-4, "batch vs sequential max |delta| %.3g", worst);
    CHECK(bias_effect > 1e-2, "zeroing the Q/K/V biases moved the logits by only %.3g",
          bias_effect);
    printf("     qwen2: batch vs sequential %.2e; biases move logits by up to %.2e\n", worst,
           bias_effect);
    rp_context_free(c1);
    rp_context_free(c2);
    rp_context_free(cz);
    rp_model_free(m);
    rp_model_free(mz);
}
