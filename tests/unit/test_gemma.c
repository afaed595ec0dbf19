/* gemma3 (and gemma2): llama.cpp's golden, interleaved sliding-window
 * attention with a KV ring, and plans that keep each repeated layer's type. */
#include "arch/arch.h"
#include "arch/dense.h"
#include "core/context.h"
#include "golden.h"
#include "kernels/kernels.h"
#include "test.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GEMMA3_TINY "models/synth/gemma3-tiny.gguf"
#define GEMMA3_P1   "golden/synth/gemma3-tiny.p1"

/* An F32-KV context with the given shape and plan (NULL = identity). */
static bool open_ctx(const rp_model *m, int n_ctx, int n_batch, const char *repeat,
                     rp_context **c) {
    rp_context_params cp = rp_context_default_params();
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)n_batch;
    cp.n_threads = 1; /* the suite's cores are shared: no pool waiting on a busy machine */
    cp.repeat_layers = repeat;
    if (rp_context_new(m, &cp, c)) {
        fprintf(stderr, "  %s\n", rp_last_error());
        return false;
    }
    return true;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The golden case: prompt tokens, greedy continuation, prompt logits. */
typedef struct golden {
    int32_t tok[64], greedy[64];
    int n, ng;
    float *logits; /* [n][512] */
} golden;

static bool golden_load(golden *g) {
    int t[64], gr[64];
    g->n = test_read_ints(test_shared(GEMMA3_P1 ".tokens.txt"), 0, t, 64);
    g->ng = test_read_ints(test_shared(GEMMA3_P1 ".greedy.txt"), 0, gr, 64);
    size_t len;
    g->logits = test_read(test_shared(GEMMA3_P1 ".logits.f32"), &len);
    if (g->n <= 0 || g->ng <= 0 || !g->logits || len != (size_t)g->n * 512 * sizeof(float)) {
        free(g->logits);
        return false;
    }
    for (int i = 0; i < g->n; i++) g->tok[i] = t[i];
    for (int i = 0; i < g->ng; i++) g->greedy[i] = gr[i];
    return true;
}

/* Decodes the prompt as one batch (split by the context into micro-batches)
 * and returns every position's logits [n][n_vocab] (malloc'ed). */
static float *decode_all(rp_context *c, const int32_t *tok, int n) {
    int8_t want[256];
    for (int i = 0; i < n; i++) want[i] = 1;
    rp_batch b = {.n_tokens = n, .token = tok, .logits = want};
    if (rp_decode(c, &b)) {
        fprintf(stderr, "  %s\n", rp_last_error());
        return NULL;
    }
    const int nv = rp_n_vocab(c);
    float *out = malloc((size_t)n * (size_t)nv * sizeof(float));
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * nv, rp_get_logits(c, i), (size_t)nv * sizeof(float));
    return out;
}

/* Greedy continuation after a decoded prompt whose last logits are `last`:
 * how many leading tokens agree with want[0..n). */
static int greedy_match(rp_context *c, const float *last, const int32_t *want, int n) {
    const int nv = rp_n_vocab(c);
    int32_t tok = argmax(last, nv);
    for (int i = 0; i < n; i++) {
        if (tok != want[i]) return i;
        if (i + 1 == n) return n;
        rp_batch one = {.n_tokens = 1, .token = &tok};
        if (rp_decode(c, &one)) return i + 1;
        tok = argmax(rp_get_logits(c, 0), nv);
    }
    return n;
}

/* The golden with the context's micro-batch size n_batch: n_batch 512 keeps
 * every position; n_batch 4 makes each local layer's KV a ring of 8+4-1 = 11
 * cells, which the 34-token prompt and the 32 generated tokens wrap around
 * several times. */
static void check_golden(int n_batch) {
    golden g;
    REQUIRE(golden_load(&g), "golden files");
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(GEMMA3_TINY), NULL, &m) == RP_OK, "%s", rp_last_error());
    rp_context *c;
    if (!open_ctx(m, 128, n_batch, NULL, &c)) {
        CHECK(false, "context");
        rp_model_free(m);
        free(g.logits);
        return;
    }
    const int want_cap = n_batch < 121 ? 8 + n_batch - 1 : 128;
    CHECK(c->state.kv[0].cap == want_cap && c->state.kv[5].cap == 128,
          "KV cells: local %d (want %d), global %d", c->state.kv[0].cap, want_cap,
          c->state.kv[5].cap);
    float *mine = decode_all(c, g.tok, g.n);
    if (mine) {
        size_t nl = (size_t)g.n * 512;
        double mx = test_max_abs_diff(g.logits, mine, nl), nmse = test_nmse(g.logits, mine, nl);
        int ng = greedy_match(c, mine + (size_t)(g.n - 1) * 512, g.greedy, g.ng);
        CHECK(nmse <= 1e-6, "n_batch %d: NMSE %.3g > 1e-6", n_batch, nmse);
        CHECK(mx <= 2e-3, "n_batch %d: max |delta| %.3g > 2e-3", n_batch, mx);
        CHECK(ng == g.ng, "n_batch %d: greedy diverges at token %d of %d", n_batch, ng, g.ng);
        printf("     gemma3-tiny p1, n_batch %d (local KV %d cells): max|d| %.2e nmse %.2e greedy "
               "%d/%d\n",
               n_batch, c->state.kv[0].cap, mx, nmse, ng, g.ng);
    } else {
        CHECK(false, "decode");
    }
    free(mine);
    rp_context_free(c);
    rp_model_free(m);
    free(g.logits);
}

void test_gemma3_golden(void) {
    check_golden(512);
}
void test_gemma3_golden_ring(void) {
    check_golden(4);
}

/* ggml evaluates GELU through fp16 (GGML_GELU_FP16); plain F32 GELU moves the
 * golden measurably. Both numbers are printed; the fp16 form must be closer. */
void test_gemma3_golden_gelu_fp16(void) {
    golden g;
    REQUIRE(golden_load(&g), "golden files");
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(GEMMA3_TINY), NULL, &m) == RP_OK, "%s", rp_last_error());
    const rp_dense_cfg *cfg = m->arch_data;
    CHECK(cfg->act == RP_ACT_GELU_TANH_F16, "gemma3 uses the fp16 GELU");
    rp_dense_cfg plain = *cfg;
    plain.act = RP_ACT_GELU_TANH;
    double mx[2] = {0, 0}, nmse[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        m->arch_data = k ? (void *)&plain : (void *)cfg;
        rp_context *c;
        if (!open_ctx(m, 64, 512, NULL, &c)) break;
        float *mine = decode_all(c, g.tok, g.n);
        if (mine) {
            mx[k] = test_max_abs_diff(g.logits, mine, (size_t)g.n * 512);
            nmse[k] = test_nmse(g.logits, mine, (size_t)g.n * 512);
        }
        free(mine);
        rp_context_free(c);
    }
    m->arch_data = (void *)cfg;
    printf("     GELU via fp16: max|d| %.2e nmse %.2e; plain F32 GELU: max|d| %.2e nmse %.2e\n",
           mx[0], nmse[0], mx[1], nmse[1]);
    CHECK(mx[0] > 0 && mx[0] < mx[1] && nmse[0] < nmse[1], "fp16 GELU is not closer to llama.cpp");
    rp_model_free(m);
    free(g.logits);
}

/* The table-read GELU (GGML_GELU_FP16) of every ISA level against the
 * definition computed here directly, one tanhf per element: every fp16 value
 * and its two float neighbours (which round to it or to the next value),
 * the +-10 cut-offs, +-0, infinities; bit for bit, for lengths that leave a
 * SIMD tail. */
static float gelu_direct(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float r = rp_fp16_to_fp32(rp_fp32_to_fp16(x));
    const float c = 0.7978845608028654f;
    const float g = 0.5f * r * (1.0f + tanhf(c * r * fmaf(0.044715f * r, r, 1.0f)));
    return rp_fp16_to_fp32(rp_fp32_to_fp16(g));
}

void test_gelu_fp16_table_every_input(void) {
    enum { N = 3 * 65536 + 8 };
    float *x = malloc(N * sizeof *x), *up = malloc(N * sizeof *up), *y = malloc(N * sizeof *y);
    REQUIRE(x && up && y, "alloc");
    int n = 0;
    for (int h = 0; h < 65536; h++) {
        const float v = rp_fp16_to_fp32((uint16_t)h);
        if (isnan(v)) continue;
        x[n++] = v;
        x[n++] = nextafterf(v, INFINITY);
        x[n++] = nextafterf(v, -INFINITY);
    }
    const float edge[] = {-10.0f, 10.0f, nextafterf(-10.0f, 0), nextafterf(10.0f, 0), 0.0f, -0.0f};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) x[n++] = edge[i];
    for (int i = 0; i < n; i++) up[i] = 1.0f + (float)(i % 7) * 0.25f;
    int bad = 0, first = -1;
    for (int isa = RP_ISA_SCALAR; isa <= (int)rp_cpu_isa_max(); isa++) {
        const rp_kernels *K = rp_kern_for((rp_isa)isa);
        const int lens[] = {n, 13, 1};
        for (int li = 0; li < 3; li++) {
            memcpy(y, x, (size_t)n * sizeof *y);
            for (int i0 = 0; i0 < n; i0 += lens[li]) {
                const int len = n - i0 < lens[li] ? n - i0 : lens[li];
                K->geglu_f16(y + i0, up + i0, len, rp_gelu_f16_table());
                if (li) break; /* the short lengths: one call at the start */
            }
            const int upto = li ? lens[li] : n;
            for (int i = 0; i < upto; i++) {
                const float want = gelu_direct(x[i]) * up[i];
                if (memcmp(&want, &y[i], sizeof want)) {
                    if (first < 0) first = i;
                    bad++;
                }
            }
        }
    }
    CHECK(bad == 0, "%d elements differ from the direct GELU (first x = %a)", bad,
          first >= 0 ? (double)x[first] : 0.0);
    free(x);
    free(up);
    free(y);
}

/* What the loader makes of gemma3-tiny: five local layers then a global one,
 * two rotary tables, the query scale, the embedding scale, no soft-caps. */
void test_gemma3_hparams(void) {
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(GEMMA3_TINY), NULL, &m) == RP_OK, "%s", rp_last_error());
    const rp_hparams *hp = &m->hp;
    for (int l = 0; l < 6; l++) {
        const rp_layer_info *li = &m->info[l];
        bool local = l < 5;
        CHECK(li->kind == (local ? RP_LAYER_ATTN_SWA : RP_LAYER_ATTN) &&
                  li->window == (local ? 8 : 0) && li->rope_set == (local ? 1 : 0),
              "layer %d: kind %s window %d rope set %d", l, rp_layer_kind_name(li->kind),
              li->window, li->rope_set);
    }
    CHECK(hp->n_rope_sets == 2 && hp->rope[0].freq_base == 1e6f &&
              hp->rope[1].freq_base == 10000.0f && hp->rope[0].freq_scale == 1.0f &&
              hp->rope[1].freq_scale == 1.0f,
          "rope: %d sets, bases %g / %g", hp->n_rope_sets, (double)hp->rope[0].freq_base,
          (double)hp->rope[1].freq_base);
    CHECK(hp->rope_style == RP_ROPE_NEOX, "neox rope");
    CHECK(hp->attn_scale == 1.0f / sqrtf(32.0f), "query scale %g", (double)hp->attn_scale);
    CHECK(hp->embd_scale == 16.0f, "embedding scale %g", (double)hp->embd_scale);
    CHECK(hp->attn_softcap == 0.0f && hp->final_softcap == 0.0f, "no soft-caps in this file");
    CHECK(m->layers[0].q_norm && m->layers[0].attn_post_norm && m->layers[5].ffn_post_norm,
          "norms bound");
    rp_model_free(m);
}

/* ---- files with crafted metadata ----------------------------------------- */

/* A small random gemma model (tensors from synth, keys edited): every
 * edit is "key=value" with value u32, f32 (has a '.'), "-" (remove), or
 * "[a,b,..]" (bool array) / "{a,b,..}" (u32 array) / "'text'" (string). */
static bool write_model_hd(const char *arch, int n_layer, int window, int head_dim,
                           const char *path, const char *const *edits, int n_edits) {
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = arch;
    sp.n_embd = 64;
    sp.n_layer = n_layer;
    sp.n_head = 4;
    sp.n_head_kv = 2;
    sp.n_ff = 128;
    sp.window = window;
    sp.head_dim = head_dim;
    sp.seed = 7;
    const char *tmp = test_tmp("gemma-synth.gguf");
    if (rp_synth_write(&sp, tmp, NULL, NULL)) return false;
    if (!n_edits) return rename(tmp, path) == 0;
    rp_gguf *g;
    if (rp_gguf_open(tmp, &g)) return false;
    rp_gguf_writer *w = rp_gguf_writer_new();
    rp_status s = rp_gguf_w_copy_kv(w, g);
    for (int i = 0; !s && i < n_edits; i++) {
        char key[128], val[256];
        const char *eq = strchr(edits[i], '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq - edits[i]), edits[i]);
        snprintf(val, sizeof val, "%s", eq + 1);
        if (!strcmp(val, "-")) {
            rp_gguf_w_remove(w, key);
        } else if (val[0] == '[' || val[0] == '{') {
            uint8_t b[256];
            uint32_t u[256];
            int n = 0;
            for (char *t = strtok(val + 1, ",]}"); t && n < 256; t = strtok(NULL, ",]}")) {
                b[n] = (uint8_t)atoi(t);
                u[n++] = (uint32_t)atoi(t);
            }
            s = val[0] == '[' ? rp_gguf_w_set_arr(w, key, RP_GGUF_BOOL, b, (uint64_t)n)
                              : rp_gguf_w_set_arr(w, key, RP_GGUF_UINT32, u, (uint64_t)n);
        } else if (val[0] == '\'') {
            val[strlen(val) - 1] = 0;
            s = rp_gguf_w_set_str(w, key, val + 1);
        } else if (strchr(val, '.')) {
            s = rp_gguf_w_set_f32(w, key, strtof(val, NULL));
        } else {
            s = rp_gguf_w_set_u32(w, key, (uint32_t)strtoul(val, NULL, 10));
        }
    }
    for (uint64_t i = 0; !s && i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        s = rp_gguf_w_add_tensor(w, t->name, (int)t->type, t->n_dims, t->ne, t->data);
    }
    if (!s) s = rp_gguf_w_write(w, path, NULL, NULL);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
    return s == RP_OK;
}

static bool write_model(const char *arch, int n_layer, int window, const char *path,
                        const char *const *edits, int n_edits) {
    return write_model_hd(arch, n_layer, window, 0, path, edits, n_edits);
}

/* Local layers of a file as a string "LLLLLG..." ("" if it does not load). */
static const char *local_map(const char *path, char *buf) {
    rp_model *m;
    buf[0] = 0;
    if (rp_model_load(path, NULL, &m)) return buf;
    int l = 0;
    for (; l < m->hp.n_layer; l++) buf[l] = m->info[l].kind == RP_LAYER_ATTN_SWA ? 'L' : 'G';
    buf[l] = 0;
    rp_model_free(m);
    return buf;
}

void test_gemma3_pattern_forms(void) {
    struct {
        const char *edit, *want;
    } cases[] = {
        {NULL, "LLLLLGLLLLLGL"},                                        /* default period 6 */
        {"gemma3.attention.sliding_window_pattern=2", "LGLGLGLGLGLGL"}, /* period 2 */
        {"gemma3.attention.sliding_window_pattern=0", "LLLLLLLLLLLLL"}, /* 0: all local */
        {"gemma3.attention.sliding_window_pattern=1", "GGGGGGGGGGGGG"}, /* 1: none */
        {"gemma3.attention.sliding_window_pattern=[1,0,1,1,0,0,1,1,1,1,1,1,0]", "LGLLGGLLLLLLG"},
        {"gemma3.attention.sliding_window_pattern={0,1,1,0,0,0,0,0,0,0,0,0,1}", "GLLGGGGGGGGGL"},
        {"gemma3.attention.sliding_window=0", "GGGGGGGGGGGGG"}, /* no window: all global */
    };
    char buf[64];
    const char *path = test_tmp("gemma-pattern.gguf");
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
        const char *e[1] = {cases[i].edit};
        REQUIRE(write_model("gemma3", 13, 16, path, e, cases[i].edit ? 1 : 0), "write: %s",
                rp_last_error());
        const char *got = local_map(path, buf);
        CHECK(!strcmp(got, cases[i].want), "%s: layers %s, want %s (%s)",
              cases[i].edit ? cases[i].edit : "default", got, cases[i].want,
              got[0] ? "" : rp_last_error());
    }
    /* gemma2 alternates, local first */
    REQUIRE(write_model("gemma2", 5, 16, path, NULL, 0), "write: %s", rp_last_error());
    CHECK(!strcmp(local_map(path, buf), "LGLGL"), "gemma2: %s", buf);
}

static void refused(const char *arch, const char *edit, const char *needle) {
    const char *path = test_tmp("gemma-bad.gguf");
    const char *e[1] = {edit};
    REQUIRE(write_model(arch, 6, 16, path, e, 1), "write: %s", rp_last_error());
    rp_model *m = (rp_model *)1;
    rp_status s = rp_model_load(path, NULL, &m);
    CHECK(s != RP_OK && m == NULL, "%s: loaded", edit);
    CHECK(strstr(rp_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", edit,
          rp_last_error(), needle);
    if (s == RP_OK) rp_model_free(m);
}

void test_gemma3_bad_metadata(void) {
    refused("gemma3", "gemma3.attention.sliding_window_pattern=[1,1,0]",
            "has 3 entries, the model has 6 layers");
    refused("gemma3", "gemma3.attention.sliding_window_pattern={1,1,2,1,1,0}",
            "sliding_window_pattern'[2] = 2");
    refused("gemma3", "gemma3.attention.sliding_window_pattern='LLLLLG'", "sliding_window_pattern");
    refused("gemma3", "gemma3.attention.sliding_window=99999999",
            "attention.sliding_window' = 99999999 is out of range");
    refused("gemma3", "gemma3.final_logit_softcapping=-1.5",
            "final_logit_softcapping' = -1.5 is out of range");
    refused("gemma3", "gemma3.rope.freq_base_swa=0.0", "rope.freq_base_swa' = 0 is out of range");
    refused("gemma2", "gemma2.attn_logit_softcapping='x'", "attn_logit_softcapping");
}

/* The query scale: llama.cpp's layer-count rule (the 27B shapes use
 * n_embd / n_head, the others head_dim) unless the file states it
 * (attention.scale, which merge writes). Here n_embd / n_head = 16 and
 * head_dim = 32. */
void test_gemma_attention_scale(void) {
    const char *path = test_tmp("gemma-scale.gguf");
    struct {
        const char *arch;
        int n_layer;
        const char *edit;
        float want;
    } cases[] = {
        {"gemma3", 6, NULL, 1.0f / sqrtf(32.0f)},
        {"gemma3", 62, NULL, 1.0f / sqrtf(16.0f)},
        {"gemma3", 62, "gemma3.attention.scale=0.125", 0.125f},
        {"gemma2", 6, NULL, 1.0f / sqrtf(32.0f)},
        {"gemma2", 46, NULL, 1.0f / sqrtf(16.0f)},
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
        const char *e[1] = {cases[i].edit};
        REQUIRE(
            write_model_hd(cases[i].arch, cases[i].n_layer, 16, 32, path, e, cases[i].edit ? 1 : 0),
            "write");
        rp_model *m;
        REQUIRE(rp_model_load(path, NULL, &m) == RP_OK, "%s", rp_last_error());
        CHECK(m->hp.attn_scale == cases[i].want, "%s, %d layers %s: scale %g, want %g",
              cases[i].arch, cases[i].n_layer, cases[i].edit ? cases[i].edit : "",
              (double)m->hp.attn_scale, (double)cases[i].want);
        rp_model_free(m);
    }
}

/* ---- plans on interleaved sliding-window attention ----------------------- */

/* KV bytes the state must hold: every step sized by its source layer's type
 * (F32 K and V, one sequence). */
static uint64_t expected_kv_bytes(const rp_context *c, int ring_extra) {
    const rp_model *m = c->model;
    uint64_t total = 0;
    for (int e = 0; e < c->plan->n_eff; e++) {
        const rp_layer_info *li = &m->info[c->plan->src[e]];
        int cells = li->kind == RP_LAYER_ATTN_SWA ? RP_MIN(c->n_ctx, li->window + ring_extra - 1)
                                                  : c->n_ctx;
        total += (uint64_t)cells * (uint64_t)li->n_head_kv *
                 (uint64_t)(li->head_dim_k + li->head_dim_v) * 4;
    }
    return total;
}

/* A repeated step is its source layer: type, window, rotary table; its KV slot
 * is sized by that type. Repeats a global layer, local layers, and both. */
void test_gemma3_plan_step_types(void) {
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(GEMMA3_TINY), NULL, &m) == RP_OK, "%s", rp_last_error());
    const char *specs[] = {"5,6", "1,3", "3,6"};
    const int want_src[3][9] = {
        {0, 1, 2, 3, 4, 5, 5}, {0, 1, 2, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 3, 4, 5}};
    const int want_n[3] = {7, 8, 9};
    for (int k = 0; k < 3; k++) {
        rp_context *c;
        if (!open_ctx(m, 64, 4, specs[k], &c)) {
            CHECK(false, "context for %s", specs[k]);
            continue;
        }
        CHECK(c->plan->n_eff == want_n[k] &&
                  !memcmp(c->plan->src, want_src[k], (size_t)want_n[k] * sizeof(int)),
              "%s: plan", specs[k]);
        for (int e = 0; e < c->plan->n_eff; e++) {
            const rp_layer_info *li = &m->info[c->plan->src[e]];
            bool local = c->plan->src[e] < 5;
            CHECK(li->kind == (local ? RP_LAYER_ATTN_SWA : RP_LAYER_ATTN) &&
                      li->rope_set == (local ? 1 : 0),
                  "%s step %d", specs[k], e);
            CHECK(rp_ctx_kv(c, e, 0)->cap == (local ? 11 : 64), "%s step %d: %d KV cells", specs[k],
                  e, rp_ctx_kv(c, e, 0)->cap);
        }
        CHECK(rp_context_state_bytes(c) == expected_kv_bytes(c, 4),
              "%s: state %llu bytes, want %llu", specs[k],
              (unsigned long long)rp_context_state_bytes(c),
              (unsigned long long)expected_kv_bytes(c, 4));
        /* the plan report names each step's type and what the types are */
        char rep[2048];
        rp_context_plan_report(c, rep, sizeof rep);
        char step[32]; /* the first repeated step, after the seam */
        int e0 = 1;
        while (!c->plan->seam[e0]) e0++;
        snprintf(step, sizeof step, " | %d:%d %s", e0, c->plan->src[e0],
                 c->plan->src[e0] < 5 ? "swa" : "attn");
        CHECK(strstr(rep, step) &&
                  strstr(rep, "swa  = sliding window of 8, rope base 10000, KV ring of 11 cells") &&
                  strstr(rep, "attn = full causal attention, rope base 1e+06, KV 64 cells"),
              "%s: report:\n%s", specs[k], rep);
        rp_context_free(c);
    }
    rp_model_free(m);
}

/* Prompt (34 tokens, window 8) plus 26 generated tokens, token by token: a
 * ring of 11 cells gives bit-identical logits to a cache that keeps every
 * position, for the identity plan and for plans repeating local and global
 * layers. */
void test_gemma3_ring_equals_full_cache(void) {
    golden g;
    REQUIRE(golden_load(&g), "golden files");
    free(g.logits);
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(GEMMA3_TINY), NULL, &m) == RP_OK, "%s", rp_last_error());
    const char *specs[] = {NULL, "3,6", "1,3"};
    for (int k = 0; k < 3; k++) {
        rp_context *ring, *full;
        if (!open_ctx(m, 96, 4, specs[k], &ring)) break;
        if (!open_ctx(m, 96, 96, specs[k], &full)) {
            rp_context_free(ring);
            break;
        }
        CHECK(rp_ctx_kv(ring, 0, 0)->cap == 11 && rp_ctx_kv(full, 0, 0)->cap == 96, "cache sizes");
        int n_same = 0, n = 0;
        int32_t tok = g.tok[0];
        for (int i = 0; i < 60; i++, n++) {
            tok = i < g.n ? g.tok[i] : tok;
            rp_batch one = {.n_tokens = 1, .token = &tok};
            if (rp_decode(ring, &one) || rp_decode(full, &one)) break;
            const float *a = rp_get_logits(ring, 0), *b = rp_get_logits(full, 0);
            n_same += !memcmp(a, b, 512 * sizeof(float));
            tok = argmax(b, 512);
        }
        CHECK(n == 60 && n_same == 60, "%s: %d of %d positions bit-identical",
              specs[k] ? specs[k] : "identity", n_same, n);
        rp_context_free(ring);
        rp_context_free(full);
    }
    rp_model_free(m);
}

/* The ring's limit on rolling back: the next token must still find its
 * window. With n_batch 4 a sequence can go back 4 positions. */
void test_gemma3_ring_truncate(void) {
    golden g;
    REQUIRE(golden_load(&g), "golden files");
    free(g.logits);
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(GEMMA3_TINY), NULL, &m) == RP_OK, "%s", rp_last_error());
    rp_context *c;
    if (!open_ctx(m, 64, 4, NULL, &c)) {
        rp_model_free(m);
        REQUIRE(false, "context");
    }
    float *before = decode_all(c, g.tok, 32);
    REQUIRE(before, "decode");
    CHECK(rp_kv_seq_truncate(c, 0, 27) == RP_ERR_UNSUPPORTED &&
              strstr(rp_last_error(), "sliding-window ring of the last 11 positions") &&
              strstr(rp_last_error(), "from 32 to 27 (28 at the earliest)"),
          "%s", rp_last_error());
    CHECK(rp_kv_seq_len(c, 0) == 32, "a refused rollback changes nothing");
    REQUIRE(rp_kv_seq_truncate(c, 0, 28) == RP_OK, "%s", rp_last_error());
    float *again = decode_all(c, g.tok + 28, 4);
    REQUIRE(again, "decode");
    CHECK(!memcmp(again, before + 28 * 512, 4 * 512 * sizeof(float)),
          "re-decoded positions 28..31 differ");
    CHECK(rp_kv_seq_truncate(c, 0, 0) == RP_OK && rp_kv_seq_len(c, 0) == 0,
          "truncating to 0 always works");
    free(before);
    free(again);
    rp_context_free(c);
    rp_model_free(m);
}

/* What merge adds for a Gemma plan: the per-layer pattern of the merged
 * layers (true = local) and the query scale. The fixed period would have
 * made merged layer 8 (a repeat of global layer 5) local. */
void test_gemma3_merge_meta(void) {
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(GEMMA3_TINY), NULL, &m) == RP_OK, "%s", rp_last_error());
    rp_context *c;
    if (!open_ctx(m, 16, 4, "3,6", &c)) {
        rp_model_free(m);
        REQUIRE(false, "context");
    }
    REQUIRE(m->arch->merge_meta, "gemma3 has a merge_meta hook");
    rp_gguf_writer *w = rp_gguf_writer_new();
    rp_status s = m->arch->merge_meta(m, c->plan, w);
    const char *path = test_tmp("gemma-meta.gguf");
    if (!s) s = rp_gguf_w_write(w, path, NULL, NULL);
    rp_gguf_writer_free(w);
    CHECK(s == RP_OK, "%s", rp_last_error());
    rp_gguf *g;
    if (!s && rp_gguf_open(path, &g) == RP_OK) {
        const rp_gguf_val *v = rp_gguf_get(g, "gemma3.attention.sliding_window_pattern");
        const int want[9] = {1, 1, 1, 1, 1, 0, 1, 1, 0};
        bool ok = v && v->type == RP_GGUF_ARRAY && v->arr.type == RP_GGUF_BOOL && v->arr.n == 9;
        for (int i = 0; ok && i < 9; i++) ok = rp_gguf_arr_i64(v, (uint64_t)i) == want[i];
        CHECK(ok, "pattern array of the merged layers");
        float sc = 0;
        CHECK(rp_gguf_get_f32(g, "gemma3.attention.scale", &sc, NULL) == RP_OK &&
                  sc == m->hp.attn_scale,
              "attention.scale %g", (double)sc);
        rp_gguf_close(g);
    }
    rp_context_free(c);
    rp_model_free(m);
}

/* KV bytes of a 4096-token context (F16 cache, n_batch 512): local layers
 * keep a ring of window + 511 cells instead of 4096. */
void test_gemma3_kv_bytes_4096(void) {
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(GEMMA3_TINY), NULL, &m) == RP_OK, "%s", rp_last_error());
    uint64_t bytes[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        rp_context_params cp = rp_context_default_params();
        cp.n_ctx = 4096;
        cp.n_batch = k ? 4096 : 512; /* a micro-batch of 4096 makes every ring the whole context */
        cp.n_threads = 1;
        rp_context *c;
        REQUIRE(rp_context_new(m, &cp, &c) == RP_OK, "%s", rp_last_error());
        bytes[k] = rp_context_state_bytes(c);
        rp_context_free(c);
    }
    /* per cell and layer: 4 kv heads x 32 x (K + V) x 2 bytes = 512 */
    const uint64_t want_ring = 5ull * 519 * 512 + 1ull * 4096 * 512, want_full = 6ull * 4096 * 512;
    CHECK(bytes[0] == want_ring && bytes[1] == want_full, "KV bytes %llu / %llu, want %llu / %llu",
          (unsigned long long)bytes[0], (unsigned long long)bytes[1], (unsigned long long)want_ring,
          (unsigned long long)want_full);
    printf("     gemma3-tiny, 4096 positions, F16 KV: %llu bytes (%.2f MiB) with rings, %llu (%.2f "
           "MiB) without\n",
           (unsigned long long)bytes[0], (double)bytes[0] / 1048576.0, (unsigned long long)bytes[1],
           (double)bytes[1] / 1048576.0);
    rp_model_free(m);
}

/* ---- gemma2 (no llama.cpp golden here: checked for its data and for the
 * same ring/plan invariants) --------------------------------------------- */

void test_gemma2_model(void) {
    const char *path = test_tmp("gemma2.gguf");
    REQUIRE(write_model("gemma2", 4, 6, path, NULL, 0), "write: %s", rp_last_error());
    rp_model *m;
    REQUIRE(rp_model_load(path, NULL, &m) == RP_OK, "%s", rp_last_error());
    const rp_hparams *hp = &m->hp;
    CHECK(hp->attn_softcap == 50.0f && hp->final_softcap == 30.0f, "soft-caps %g / %g",
          (double)hp->attn_softcap, (double)hp->final_softcap);
    CHECK(hp->rope[1].freq_base == hp->rope[0].freq_base && hp->rope[0].freq_base == 10000.0f,
          "one rope base");
    CHECK(hp->embd_scale == 8.0f && !m->layers[0].q_norm && m->layers[1].ffn_post_norm,
          "embedding scale, norms");
    CHECK(m->info[0].kind == RP_LAYER_ATTN_SWA && m->info[0].window == 6 &&
              m->info[1].kind == RP_LAYER_ATTN,
          "alternating window 6");
    rp_context *ring, *full;
    REQUIRE(open_ctx(m, 64, 2, "1,3", &ring), "ctx");
    REQUIRE(open_ctx(m, 64, 64, "1,3", &full), "ctx");
    CHECK(rp_ctx_kv(ring, 1, 0)->cap == 64 && rp_ctx_kv(ring, 2, 0)->cap == 7 &&
              rp_ctx_kv(ring, 4, 0)->cap == 7,
          "plan 1,3: steps 0 1 2 1 2 3, KV of step 2 and its repeat a ring of 7");
    int same = 0, capped = 1;
    for (int i = 0; i < 30; i++) {
        int32_t tok = (int32_t)(3 + (i * 37) % 300);
        rp_batch one = {.n_tokens = 1, .token = &tok};
        if (rp_decode(ring, &one) || rp_decode(full, &one)) break;
        const float *a = rp_get_logits(ring, 0), *b = rp_get_logits(full, 0);
        same += !memcmp(a, b, (size_t)hp->n_vocab * sizeof(float));
        for (int v = 0; v < hp->n_vocab; v++) capped &= fabsf(a[v]) <= 30.0f;
    }
    CHECK(same == 30, "ring vs full cache: %d of 30 positions bit-identical", same);
    CHECK(capped, "final soft-cap bounds the logits by 30");
    rp_context_free(ring);
    rp_context_free(full);
    rp_model_free(m);
}

/* Rotary tables: global layers take the file's base and scaling; gemma3's
 * local layers rope base 10000 unscaled (or rope.freq_base_swa), gemma2's the
 * global base and scaling unless rope.freq_base_swa says otherwise. */
void test_gemma_rope_tables(void) {
    const char *path = test_tmp("gemma-rope.gguf");
    struct {
        const char *arch;
        const char *edits[3];
        float base0, scale0, base1, scale1;
    } cases[] = {
        {"gemma3",
         {"gemma3.rope.scaling.type='linear'", "gemma3.rope.scaling.factor=8.0"},
         1e6f,
         0.125f,
         1e4f,
         1.0f},
        {"gemma3", {"gemma3.rope.freq_base_swa=5000.0"}, 1e6f, 1.0f, 5000.0f, 1.0f},
        {"gemma2",
         {"gemma2.rope.scaling.type='linear'", "gemma2.rope.scaling.factor=2.0"},
         1e4f,
         0.5f,
         1e4f,
         0.5f},
        {"gemma2", {"gemma2.rope.freq_base_swa=20000.0"}, 1e4f, 1.0f, 2e4f, 1.0f},
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
        int n = 0;
        while (n < 3 && cases[i].edits[n]) n++;
        REQUIRE(write_model(cases[i].arch, 6, 16, path, cases[i].edits, n), "write");
        rp_model *m;
        REQUIRE(rp_model_load(path, NULL, &m) == RP_OK, "%s", rp_last_error());
        const rp_rope_params *r = m->hp.rope;
        CHECK(r[0].freq_base == cases[i].base0 && r[0].freq_scale == cases[i].scale0 &&
                  r[1].freq_base == cases[i].base1 && r[1].freq_scale == cases[i].scale1 &&
                  m->info[0].rope_set == 1 && m->info[5].rope_set == 0,
              "%s %s: global %g x%g, local %g x%g", cases[i].arch, cases[i].edits[0],
              (double)r[0].freq_base, (double)r[0].freq_scale, (double)r[1].freq_base,
              (double)r[1].freq_scale);
        rp_model_free(m);
    }
}
