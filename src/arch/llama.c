/* llama, qwen2, qwen3: uniform dense decoders that differ only in data —
 * RoPE style, Q/K/V biases (qwen2, bound when present) and per-head Q/K norms
 * (qwen3). */
#include "arch/llama.h"

static const rp_dense_cfg cfg_llama = {.act = RP_ACT_SILU, .qk_norm = false};

/* llama's own rows beyond the dense block's */
const rp_tensor_def rp_llama_rows[RP_LLAMA_N_ROWS] = {
    [RP_LLAMA_ROPE_FREQS] = {RP_TROW_MODEL("rope_freqs.weight", ROT2, NONE, OTHER), .opt = true},
};
const rp_tensor_table rp_llama_tensors = {
    .what = "llama",
    .rows = rp_llama_rows,
    .n_rows = RP_LLAMA_N_ROWS,
    .base = &rp_dense_tensors,
};
static const rp_dense_cfg cfg_qwen3 = {.act = RP_ACT_SILU, .qk_norm = true};

static rp_status load_common(rp_model *m, const rp_dense_cfg *cfg, rp_rope_style style) {
    rp_status s = rp_load_transformer_hparams(m);
    if (s) return s;
    m->hp.rope_style = style;
    m->arch_data = (void *)cfg;
    if ((s = rp_bind_io(m))) return s;
    for (int l = 0; l < m->hp.n_layer; l++)
        if ((s = rp_dense_bind_layer(m, l, cfg))) return s;
    return RP_OK;
}

static rp_status load_llama(rp_model *m) {
    rp_status s = load_common(m, &cfg_llama, RP_ROPE_NORM);
    if (s) return s;
    /* Llama 3.1+ frequency factors */
    const rp_tensor *ff = NULL;
    rp_dims d;
    rp_dims_of_layer(&d, m, 0);
    if ((s = rp_bind_row(m, &ff, &rp_llama_rows[RP_LLAMA_ROPE_FREQS], -1, &d, false))) return s;
    if (ff) m->hp.rope[0].freq_factors = ff->data;
    return RP_OK;
}

static rp_status load_qwen2(rp_model *m) {
    return load_common(m, &cfg_llama, RP_ROPE_NEOX);
}
static rp_status load_qwen3(rp_model *m) {
    return load_common(m, &cfg_qwen3, RP_ROPE_NEOX);
}

/* Random llama/qwen2/qwen3 weights: the keys, then the dense rows (the
 * names llama.cpp uses). */
static rp_status synth_dense(rp_synth *s, const rp_synth_params *p, unsigned feat,
                             float rope_base) {
    rp_status st =
        rp_synth_transformer_keys(s, p, p->rope_base > 0 ? p->rope_base : rope_base, 1e-6f);
    return st ? st : rp_dense_synth_tensors(s, p, feat);
}

static rp_status synth_llama(rp_synth *s, const rp_synth_params *p) {
    return synth_dense(s, p, 0, 10000.0f);
}
static rp_status synth_qwen2(rp_synth *s, const rp_synth_params *p) {
    return synth_dense(s, p, RP_DENSE_F_QKV_BIAS, 1e6f);
}
static rp_status synth_qwen3(rp_synth *s, const rp_synth_params *p) {
    return synth_dense(s, p, RP_DENSE_F_QK_NORM, 1e6f);
}

static void unload_static(rp_model *m) {
    m->arch_data = NULL;
}

extern const rp_conv_hooks rp_conv_llama, rp_conv_qwen2, rp_conv_qwen3; /* *_convert.c */

#define DENSE_ARCH(var, nm, tables, loadfn, synthfn, hf, conv)                                     \
    const rp_arch var = {.name = nm,                                                               \
                         .tensors = tables,                                                        \
                         .load = loadfn,                                                           \
                         .unload = unload_static,                                                  \
                         .ctx_init = rp_dense_ctx_init,                                            \
                         .ctx_free = rp_dense_ctx_free,                                            \
                         .forward = rp_dense_forward,                                              \
                         .step_ranges = true,                                                      \
                         .deltas = true,                                                           \
                         .synth = synthfn,                                                         \
                         .hf_classes = (const char *const[]){hf, NULL},                            \
                         .convert = &conv}

DENSE_ARCH(rp_arch_llama, "llama", &rp_llama_tensors, load_llama, synth_llama, "LlamaForCausalLM",
           rp_conv_llama);
DENSE_ARCH(rp_arch_qwen2, "qwen2", &rp_dense_tensors, load_qwen2, synth_qwen2, "Qwen2ForCausalLM",
           rp_conv_qwen2);
DENSE_ARCH(rp_arch_qwen3, "qwen3", &rp_dense_tensors, load_qwen3, synth_qwen3, "Qwen3ForCausalLM",
           rp_conv_qwen3);
