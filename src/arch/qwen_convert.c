/* Qwen2ForCausalLM -> "qwen2" and Qwen3ForCausalLM -> "qwen3". Both keep
 * Hugging Face's rotate-half layout (llama.cpp runs them with NeoX RoPE), so
 * every tensor is a plain copy. Qwen2 has Q/K/V biases (mapped with their
 * weights); Qwen3 has per-head RMSNorms on Q and K and often a tied output. */
#include "convert/convert.h"
#include "arch/arch.h"
#include "arch/dense.h"
#include "base/util.h"

#include <stdio.h>
#include <string.h>

#define REQ RP_RULE_REQUIRED
/* Q/K/V biases (Qwen2) go with their weights' rules */
#define QWEN_RULES                                                                                 \
    RP_IO_RULE("model.embed_tokens", TOKEN_EMBD, REQ), RP_IO_RULE("model.norm", OUTPUT_NORM, REQ), \
        RP_IO_RULE("lm_head", OUTPUT, 0),                                                          \
        RP_DENSE_RULE("model.layers.#.input_layernorm", ATTN_NORM, REQ, NULL, NULL),               \
        RP_DENSE_RULE("model.layers.#.self_attn.q_proj", ATTN_Q, REQ, NULL, NULL),                 \
        RP_DENSE_RULE("model.layers.#.self_attn.k_proj", ATTN_K, REQ, NULL, NULL),                 \
        RP_DENSE_RULE("model.layers.#.self_attn.v_proj", ATTN_V, REQ, NULL, NULL),                 \
        RP_DENSE_RULE("model.layers.#.self_attn.o_proj", ATTN_OUT, REQ, NULL, NULL),               \
        RP_DENSE_RULE("model.layers.#.post_attention_layernorm", FFN_NORM, REQ, NULL, NULL),       \
        RP_DENSE_RULE("model.layers.#.mlp.gate_proj", FFN_GATE, REQ, NULL, NULL),                  \
        RP_DENSE_RULE("model.layers.#.mlp.up_proj", FFN_UP, REQ, NULL, NULL),                      \
        RP_DENSE_RULE("model.layers.#.mlp.down_proj", FFN_DOWN, REQ, NULL, NULL)

static const rp_conv_rule g_qwen2[] = {QWEN_RULES};
static const rp_conv_rule g_qwen3[] = {
    QWEN_RULES,
    RP_DENSE_RULE("model.layers.#.self_attn.q_norm", ATTN_Q_NORM, REQ, NULL, NULL),
    RP_DENSE_RULE("model.layers.#.self_attn.k_norm", ATTN_K_NORM, REQ, NULL, NULL),
};
#undef REQ

static rp_status qwen_params(rp_conv *cv) {
    rp_status s = rp_conv_decoder_params(cv, false);
    if (s) return s;
    rp_conv_rope r;
    if ((s = rp_conv_rope_params(cv, NULL, &r))) return s;
    if (!strcmp(r.type, "llama3"))
        return rp_fail(RP_ERR_UNSUPPORTED, "%s/config.json: llama3 rope scaling on a Qwen model",
                       cv->dir);
    /* sliding-window attention in some layers is not something the GGUF qwen
     * architectures express: refuse rather than convert a different model */
    bool swa = false;
    if ((s = rp_conv_cfg_bool(cv, "use_sliding_window", false, &swa))) return s;
    if (swa)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s/config.json: use_sliding_window is true; llama.cpp's %s has no "
                       "sliding-window layers",
                       cv->dir, cv->arch->name);
    return RP_OK;
}

static rp_status qwen2_tensors(rp_conv *cv) {
    rp_status s = rp_conv_output_head(cv);
    return s ? s : rp_conv_map(cv, g_qwen2, RP_ARRAY_LEN(g_qwen2));
}

static rp_status qwen3_tensors(rp_conv *cv) {
    rp_status s = rp_conv_output_head(cv);
    return s ? s : rp_conv_map(cv, g_qwen3, RP_ARRAY_LEN(g_qwen3));
}

static rp_status lm_head_shape(rp_conv *cv, rp_st *st) {
    if (cv->hp.tied) return RP_OK;
    int64_t shape[2] = {cv->hp.n_vocab, cv->hp.n_embd};
    return rp_st_add_shape(st, "lm_head.weight", rp_st_tensor_at(st, 0)->type, 2, shape);
}

static rp_status qwen2_shapes(rp_conv *cv, rp_st *st) {
    rp_status s = rp_conv_rule_shapes(cv, st, g_qwen2, RP_ARRAY_LEN(g_qwen2));
    int type = s ? 0 : rp_st_tensor_at(st, 0)->type;
    /* Qwen2 always has Q/K/V biases */
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj"};
    for (int64_t l = 0; l < cv->hp.n_layer && !s; l++)
        for (int p = 0; p < 3 && !s; p++) {
            char name[160];
            snprintf(name, sizeof name, "model.layers.%lld.self_attn.%s.bias", (long long)l,
                     proj[p]);
            int64_t n = rp_conv_dim(cv, p ? RP_DIM_KV : RP_DIM_Q);
            s = rp_st_add_shape(st, name, type, 1, &n);
        }
    return s ? s : lm_head_shape(cv, st);
}

static rp_status qwen3_shapes(rp_conv *cv, rp_st *st) {
    rp_status s = rp_conv_rule_shapes(cv, st, g_qwen3, RP_ARRAY_LEN(g_qwen3));
    return s ? s : lm_head_shape(cv, st);
}

const rp_conv_hooks rp_conv_qwen2 = {
    .params = qwen_params,
    .tensors = qwen2_tensors,
    .shapes = qwen2_shapes,
};

const rp_conv_hooks rp_conv_qwen3 = {
    .params = qwen_params,
    .tensors = qwen3_tensors,
    .shapes = qwen3_shapes,
};
