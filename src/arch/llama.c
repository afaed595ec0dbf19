/* llama, qwen2, qwen3: uniform dense decoders that differ only in data —
 * RoPE style, Q/K/V biases (qwen2, bound when present) and per-head Q/K norms
 * (qwen3). */
#include "arch/dense.h"

static const rp_dense_cfg cfg_llama = {.act = RP_ACT_SILU, .qk_norm = false};
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
    if ((s = rp_bind(m, &ff, false, m->hp.rope[0].n_rot / 2, 0, "rope_freqs.weight"))) return s;
    if (ff) m->hp.rope[0].freq_factors = ff->data;
    return RP_OK;
}

static rp_status load_qwen2(rp_model *m) {
    return load_common(m, &cfg_llama, RP_ROPE_NEOX);
}
static rp_status load_qwen3(rp_model *m) {
    return load_common(m, &cfg_qwen3, RP_ROPE_NEOX);
}

/* Random llama/qwen2/qwen3 weights with the tensor names llama.cpp uses. */
static rp_status synth_dense(rp_synth *s, const rp_synth_params *p, bool qkv_bias, bool qk_norm,
                             float rope_base) {
    const int hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    const int nkv = p->n_head_kv ? p->n_head_kv : p->n_head;
    rp_status st =
        rp_synth_transformer_keys(s, p, p->rope_base > 0 ? p->rope_base : rope_base, 1e-6f);
    st = st ? st : rp_synth_weight(s, p->n_embd, p->n_vocab, "token_embd.weight");
    st = st ? st : rp_synth_norm(s, p->n_embd, "output_norm.weight");
    if (!p->tied) st = st ? st : rp_synth_weight(s, p->n_embd, p->n_vocab, "output.weight");
    for (int l = 0; l < p->n_layer && !st; l++) {
        st = rp_synth_norm(s, p->n_embd, "blk.%d.attn_norm.weight", l);
        st = st ? st
                : rp_synth_weight(s, p->n_embd, (int64_t)p->n_head * hd, "blk.%d.attn_q.weight", l);
        st = st ? st : rp_synth_weight(s, p->n_embd, (int64_t)nkv * hd, "blk.%d.attn_k.weight", l);
        st = st ? st : rp_synth_weight(s, p->n_embd, (int64_t)nkv * hd, "blk.%d.attn_v.weight", l);
        if (qkv_bias) {
            st = st ? st : rp_synth_bias(s, (int64_t)p->n_head * hd, "blk.%d.attn_q.bias", l);
            st = st ? st : rp_synth_bias(s, (int64_t)nkv * hd, "blk.%d.attn_k.bias", l);
            st = st ? st : rp_synth_bias(s, (int64_t)nkv * hd, "blk.%d.attn_v.bias", l);
        }
        if (qk_norm) {
            st = st ? st : rp_synth_norm(s, hd, "blk.%d.attn_q_norm.weight", l);
            st = st ? st : rp_synth_norm(s, hd, "blk.%d.attn_k_norm.weight", l);
        }
        st = st ? st
                : rp_synth_weight(s, (int64_t)p->n_head * hd, p->n_embd,
                                  "blk.%d.attn_output.weight", l);
        st = st ? st : rp_synth_norm(s, p->n_embd, "blk.%d.ffn_norm.weight", l);
        st = st ? st : rp_synth_weight(s, p->n_embd, p->n_ff, "blk.%d.ffn_gate.weight", l);
        st = st ? st : rp_synth_weight(s, p->n_embd, p->n_ff, "blk.%d.ffn_up.weight", l);
        st = st ? st : rp_synth_weight(s, p->n_ff, p->n_embd, "blk.%d.ffn_down.weight", l);
    }
    return st;
}

static rp_status synth_llama(rp_synth *s, const rp_synth_params *p) {
    return synth_dense(s, p, false, false, 10000.0f);
}
static rp_status synth_qwen2(rp_synth *s, const rp_synth_params *p) {
    return synth_dense(s, p, true, false, 1e6f);
}
static rp_status synth_qwen3(rp_synth *s, const rp_synth_params *p) {
    return synth_dense(s, p, false, true, 1e6f);
}

static void unload_static(rp_model *m) {
    m->arch_data = NULL;
}

extern const rp_conv_hooks rp_conv_llama, rp_conv_qwen2, rp_conv_qwen3; /* *_convert.c */

#define DENSE_ARCH(var, nm, loadfn, synthfn, hf, conv)                                             \
    const rp_arch var = {.name = nm,                                                               \
                         .load = loadfn,                                                           \
                         .unload = unload_static,                                                  \
                         .ctx_init = rp_dense_ctx_init,                                            \
                         .ctx_free = rp_dense_ctx_free,                                            \
                         .forward = rp_dense_forward,                                              \
                         .step_ranges = true,                                                      \
                         .synth = synthfn,                                                         \
                         .hf_classes = (const char *const[]){hf, NULL},                            \
                         .convert = &conv}

DENSE_ARCH(rp_arch_llama, "llama", load_llama, synth_llama, "LlamaForCausalLM", rp_conv_llama);
DENSE_ARCH(rp_arch_qwen2, "qwen2", load_qwen2, synth_qwen2, "Qwen2ForCausalLM", rp_conv_qwen2);
DENSE_ARCH(rp_arch_qwen3, "qwen3", load_qwen3, synth_qwen3, "Qwen3ForCausalLM", rp_conv_qwen3);
