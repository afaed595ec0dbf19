/* The dense decoder block shared by the transformer architectures (llama,
 * qwen2, qwen3, gemma3, ...): a loop over plan steps running
 *   x += attn(norm(x));  x += ffn(norm(x))
 * where everything that varies is data: the configuration below (set by the
 * architecture's own file) and the per-layer facts in rp_layer_info. */
#ifndef RP_ARCH_DENSE_H
#define RP_ARCH_DENSE_H

#include "arch/arch.h"
#include "convert/synth.h"
#include "core/context.h"

/* RP_ACT_GELU_TANH_F16: tanh GELU evaluated through fp16 as ggml's CPU backend
 * does (rp_gelu_tanh_f16_mul), for architectures matched against llama.cpp. */
typedef enum rp_act {
    RP_ACT_SILU = 0,
    RP_ACT_GELU_TANH = 1,
    RP_ACT_GELU_ERF = 2,
    RP_ACT_GELU_TANH_F16 = 3
} rp_act;

typedef struct rp_dense_cfg {
    rp_act act;      /* gate activation of the gated FFN */
    bool qk_norm;    /* per-head RMSNorm of q and k before RoPE (qwen3, gemma3) */
    bool post_norms; /* RMSNorm after attention and after the FFN, before the residual (gemma) */
} rp_dense_cfg;

/* Binds the standard per-layer tensors of layer l (attn_norm, q/k/v/o with
 * optional biases and q/k norms, ffn norm/gate/up/down, post norms when
 * cfg->post_norms) with shape checks from m->info[l]. */
rp_status rp_dense_bind_layer(rp_model *m, int l, const rp_dense_cfg *cfg);

rp_status rp_dense_ctx_init(rp_context *c);
void rp_dense_ctx_free(rp_context *c);
/* m->arch_data must point at an rp_dense_cfg. */
rp_status rp_dense_forward(rp_context *c, const rp_ubatch *ub);

#endif
