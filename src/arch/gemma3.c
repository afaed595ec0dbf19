/* gemma2 and gemma3: dense decoders that interleave sliding-window (local)
 * attention layers with global ones. Everything that differs from llama is
 * data for the shared block (src/arch/dense.c) and the KV state (src/kv.c):
 * a local layer is info[l].kind = RP_LAYER_ATTN_SWA with its window and rotary
 * table 1, so a plan step that repeats it keeps its window, its rope and a
 * KV ring sized by that window.
 *
 * Hyperparameters, as llama.cpp reads them:
 *   window      <arch>.attention.sliding_window; gemma2 defaults to 4096,
 *               gemma3 without it (or 0) has no local layers.
 *   local/global <arch>.attention.sliding_window_pattern: a period P (layer l is
 *               local iff l % P < P - 1, so 6 = five local then one global;
 *               0 = every layer local), default 6 (gemma3) / 2 (gemma2); or a
 *               per-layer array, bool or 0/1, true = local, as llama.cpp reads
 *               it for gemma4 and the other per-layer-pattern architectures.
 *               reprise merge writes the array (merge_meta below); llama.cpp's
 *               gemma2/gemma3 loaders read only the period form.
 *   rope        global layers: rope.freq_base and the file's scaling; local
 *               layers: rope.freq_base_swa, by default 10000 unscaled
 *               (gemma3) or the global base and scaling (gemma2).
 *   q scale     <arch>.attention.scale when present (merge writes it, since the
 *               rule below depends on the layer count), else llama.cpp's
 *               query_pre_attn_scalar rule: 1/sqrt(n_embd / n_head) for the
 *               27B shapes (62 layers gemma3, 46 gemma2), 1/sqrt(head_dim)
 *               otherwise.
 *   soft-caps   gemma2: attn_logit_softcapping (default 50) on the scaled
 *               scores, final_logit_softcapping (default 30); gemma3: the final
 *               one only, when the file has it.
 * Token embeddings are scaled by sqrt(n_embd); RMSNorm before and after both
 * sublayers (post_attention_norm, post_ffw_norm), per-head Q/K RMSNorm
 * (gemma3), GeGLU with tanh GELU evaluated through fp16 as ggml's CPU backend
 * does (RP_ACT_GELU_TANH_F16): against llama.cpp's gemma3-tiny golden that is
 * max |delta| 4.4e-4, NMSE 2.6e-10, where plain F32 GELU gives 1.6e-3, 1.3e-8
 * (tests/unit/test_gemma.c). */
#include "arch/dense.h"
#include "base/util.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct gemma_spec {
    rp_dense_cfg cfg;
    int window;                /* sliding window when the key is absent; 0 = no local layers */
    int period;                /* pattern period when the key is absent */
    bool local_rope_10k;       /* local layers default to rope base 10000, unscaled */
    bool attn_softcap;         /* reads attn_logit_softcapping */
    float attn_cap, final_cap; /* soft-caps when their keys are absent (0 = none) */
    int n_layer_27b;           /* layer count of the shape scaled by 1/sqrt(n_embd / n_head) */
} gemma_spec;

static const gemma_spec spec_gemma2 = {
    .cfg = {.act = RP_ACT_GELU_TANH_F16, .qk_norm = false, .post_norms = true},
    .window = 4096,
    .period = 2,
    .local_rope_10k = false,
    .attn_softcap = true,
    .attn_cap = 50.0f,
    .final_cap = 30.0f,
    .n_layer_27b = 46,
};

static const gemma_spec spec_gemma3 = {
    .cfg = {.act = RP_ACT_GELU_TANH_F16, .qk_norm = true, .post_norms = true},
    .window = 0,
    .period = 6,
    .local_rope_10k = true,
    .attn_softcap = false,
    .n_layer_27b = 62,
};

/* Which layers are local: local[l] for every layer of the file. */
static rp_status read_local_layers(const rp_model *m, int period_default, bool *local) {
    char key[160];
    rp_arch_key(m, "attention.sliding_window_pattern", key, sizeof key);
    const rp_gguf_val *v = rp_gguf_get(m->gguf, key);
    const int n = m->hp.n_layer;
    if (v && v->type == RP_GGUF_ARRAY) {
        if (v->arr.type != RP_GGUF_BOOL && !rp_gguf_type_is_int((int)v->arr.type))
            return rp_fail(RP_ERR_FORMAT,
                           "%s: key '%s' at byte offset %" PRIu64
                           " must be a period or one bool per layer, not an "
                           "array of %s",
                           m->path, key, v->offset, rp_gguf_type_name((int)v->arr.type));
        if (v->arr.n != (uint64_t)n)
            return rp_fail(RP_ERR_FORMAT,
                           "%s: key '%s' has %" PRIu64 " entries, the model has %d layers", m->path,
                           key, v->arr.n, n);
        for (int l = 0; l < n; l++) {
            int64_t x = rp_gguf_arr_i64(v, (uint64_t)l);
            if (x != 0 && x != 1)
                return rp_fail(RP_ERR_FORMAT,
                               "%s: key '%s'[%d] = %" PRId64
                               ": a layer is 1 (sliding window) or 0 (global)",
                               m->path, key, l, x);
            local[l] = x != 0;
        }
        return RP_OK;
    }
    uint32_t period = (uint32_t)period_default;
    if (v) {
        rp_status s = rp_gguf_get_u32(m->gguf, key, &period, NULL);
        if (s) return rp_fail_prefix(s, "%s", m->path);
    }
    for (int l = 0; l < n; l++) local[l] = period == 0 || (uint32_t)l % period < period - 1;
    return RP_OK;
}

static rp_status load_gemma(rp_model *m, const gemma_spec *g) {
    rp_status s = rp_load_transformer_hparams(m);
    if (s) return s;
    rp_hparams *hp = &m->hp;
    hp->rope_style = RP_ROPE_NEOX;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    m->arch_data = (void *)&g->cfg;

    int window = g->window;
    if ((s = rp_hp_u32(m, "attention.sliding_window", false, (uint32_t)g->window, 0, 1u << 24,
                       &window)))
        return s;
    if (g->attn_softcap && (s = rp_hp_f32(m, "attn_logit_softcapping", false, g->attn_cap, 0.0f,
                                          1e6f, &hp->attn_softcap)))
        return s;
    if ((s = rp_hp_f32(m, "final_logit_softcapping", false, g->final_cap, 0.0f, 1e6f,
                       &hp->final_softcap)))
        return s;

    float scale = 0.0f;
    if ((s = rp_hp_f32(m, "attention.scale", false, 0.0f, 0.0f, 1e6f, &scale))) return s;
    if (scale == 0.0f)
        scale = hp->n_layer == g->n_layer_27b
                    ? 1.0f / sqrtf((float)(hp->n_embd / m->info[0].n_head))
                    : 1.0f / sqrtf((float)hp->head_dim_k);
    hp->attn_scale = scale;

    /* the local rotary table */
    hp->rope[1] = hp->rope[0];
    if (g->local_rope_10k) {
        hp->rope[1].freq_base = 10000.0f;
        hp->rope[1].freq_scale = 1.0f;
    }
    if ((s = rp_hp_f32(m, "rope.freq_base_swa", false, hp->rope[1].freq_base, 1e-3f, 1e12f,
                       &hp->rope[1].freq_base)))
        return s;

    if (window > 0) {
        bool *local = rp_calloc((size_t)hp->n_layer, sizeof *local, "layer pattern");
        if (!local) return RP_ERR_NOMEM;
        s = read_local_layers(m, g->period, local);
        int n_local = 0;
        for (int l = 0; !s && l < hp->n_layer; l++) {
            if (!local[l]) continue;
            m->info[l].kind = RP_LAYER_ATTN_SWA;
            m->info[l].window = window;
            m->info[l].rope_set = 1;
            n_local++;
        }
        free(local);
        if (s) return s;
        hp->n_rope_sets = n_local ? 2 : 1;
    }

    if ((s = rp_bind_io(m))) return s;
    for (int l = 0; l < hp->n_layer; l++)
        if ((s = rp_dense_bind_layer(m, l, &g->cfg))) return s;
    return RP_OK;
}

static rp_status load_gemma2(rp_model *m) {
    return load_gemma(m, &spec_gemma2);
}
static rp_status load_gemma3(rp_model *m) {
    return load_gemma(m, &spec_gemma3);
}

static void unload_gemma(rp_model *m) {
    m->arch_data = NULL;
}

/* A physically merged file must say which of its layers are local: the fixed
 * period would silently re-type the repeated ones. It also carries the
 * attention scale, whose default rule depends on the layer count. */
static rp_status merge_meta_gemma(const rp_model *m, const rp_plan *plan, rp_gguf_writer *w) {
    char key[160];
    const int n_layer = m->hp.n_layer, n_new = plan->n_eff + (n_layer - plan->n_src);
    rp_status s =
        rp_gguf_w_set_f32(w, rp_arch_key(m, "attention.scale", key, sizeof key), m->hp.attn_scale);
    bool any_local = false;
    for (int l = 0; l < n_layer; l++) any_local |= m->info[l].kind == RP_LAYER_ATTN_SWA;
    if (s || !any_local) return s;
    uint8_t *flags = rp_malloc((size_t)n_new, "layer pattern");
    if (!flags) return RP_ERR_NOMEM;
    for (int i = 0; i < n_new; i++) {
        int src = i < plan->n_eff ? plan->src[i] : plan->n_src + (i - plan->n_eff);
        flags[i] = m->info[src].kind == RP_LAYER_ATTN_SWA;
    }
    s = rp_gguf_w_set_arr(w, rp_arch_key(m, "attention.sliding_window_pattern", key, sizeof key),
                          RP_GGUF_BOOL, flags, (uint64_t)n_new);
    free(flags);
    return s;
}

/* Random weights with llama.cpp's tensor names. p->window: 0 = the default
 * (gemma3 512, gemma2 4096), < 0 = no sliding_window key. */
static rp_status synth_gemma(rp_synth *s, const rp_synth_params *p, unsigned feat, float rope_base,
                             int window) {
    char key[128];
    rp_status st =
        rp_synth_transformer_keys(s, p, p->rope_base > 0 ? p->rope_base : rope_base, 1e-6f);
    if (p->window >= 0) {
        snprintf(key, sizeof key, "%s.attention.sliding_window", p->arch);
        st = st ? st
                : rp_gguf_w_set_u32(rp_synth_writer(s), key,
                                    (uint32_t)(p->window ? p->window : window));
    }
    return st ? st : rp_dense_synth_tensors(s, p, feat);
}

static rp_status synth_gemma2(rp_synth *s, const rp_synth_params *p) {
    return synth_gemma(s, p, RP_DENSE_F_POST_NORMS, 10000.0f, 4096);
}
static rp_status synth_gemma3(rp_synth *s, const rp_synth_params *p) {
    return synth_gemma(s, p, RP_DENSE_F_QK_NORM | RP_DENSE_F_POST_NORMS, 1e6f, 512);
}

extern const rp_conv_hooks rp_conv_gemma3; /* gemma3_convert.c */

#define GEMMA_ARCH(var, nm, loadfn, synthfn, hf, conv)                                             \
    const rp_arch var = {.name = nm,                                                               \
                         .tensors = &rp_dense_tensors,                                             \
                         .load = loadfn,                                                           \
                         .unload = unload_gemma,                                                   \
                         .ctx_init = rp_dense_ctx_init,                                            \
                         .ctx_free = rp_dense_ctx_free,                                            \
                         .forward = rp_dense_forward,                                              \
                         .step_ranges = true,                                                      \
                         .deltas = true,                                                           \
                         .merge_meta = merge_meta_gemma,                                           \
                         .synth = synthfn,                                                         \
                         .hf_classes = hf,                                                         \
                         .convert = conv}

GEMMA_ARCH(rp_arch_gemma2, "gemma2", load_gemma2, synth_gemma2, NULL, NULL);
static const char *const g_hf_gemma3[] = {"Gemma3ForCausalLM", NULL};
GEMMA_ARCH(rp_arch_gemma3, "gemma3", load_gemma3, synth_gemma3, g_hf_gemma3, &rp_conv_gemma3);
