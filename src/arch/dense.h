/* The dense decoder block shared by the transformer architectures (llama,
 * qwen2, qwen3, gemma3, ...): a loop over plan steps running
 *   x += attn(norm(x));  x += ffn(norm(x))
 * where everything that varies is data: the configuration below (set by the
 * architecture's own file) and the per-layer facts in rp_layer_info. */
#ifndef RP_ARCH_DENSE_H
#define RP_ARCH_DENSE_H

#include "arch/arch.h"
#include "arch/tensors.h"
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

/* The dense block's tensors: the rows of rp_dense_tensors (base: the I/O
 * table), in binding order. Shapes in the rows (dims of m->info[l]). */
enum {
    RP_DENSE_ATTN_NORM,
    RP_DENSE_ATTN_Q,
    RP_DENSE_ATTN_K,
    RP_DENSE_ATTN_V,
    RP_DENSE_ATTN_OUT,
    RP_DENSE_ATTN_Q_B,
    RP_DENSE_ATTN_K_B,
    RP_DENSE_ATTN_V_B,
    RP_DENSE_ATTN_OUT_B,
    RP_DENSE_ATTN_Q_NORM,
    RP_DENSE_ATTN_K_NORM,
    RP_DENSE_FFN_NORM,
    RP_DENSE_FFN_GATE,
    RP_DENSE_FFN_UP,
    RP_DENSE_FFN_DOWN,
    RP_DENSE_POST_ATTN_NORM,
    RP_DENSE_POST_FFN_NORM,
    RP_DENSE_N_ROWS,
};
/* Layer features of the dense rows. QKV_BIAS only says what synth makes (the
 * biases are optional rows every dense loader binds when the file has them). */
enum { RP_DENSE_F_QK_NORM = 1, RP_DENSE_F_POST_NORMS = 2, RP_DENSE_F_QKV_BIAS = 4 };
extern const rp_tensor_def rp_dense_rows[RP_DENSE_N_ROWS];
extern const rp_tensor_table rp_dense_tensors;

/* Converter rules (convert/convert.h) to a dense row and to an I/O row. */
#define RP_DENSE_RULE(hf, row, flags, make, note)                                                  \
    { hf, &rp_dense_rows[RP_DENSE_##row], flags, make, note }
#define RP_IO_RULE(hf, row, flags)                                                                 \
    { hf, &rp_io_rows[RP_IO_##row], flags, NULL, NULL }

/* The features of cfg's layers (qk_norm, post_norms). */
unsigned rp_dense_features(const rp_dense_cfg *cfg);

/* Binds the dense rows of layer l with features rp_dense_features(cfg), shape
 * checks from m->info[l]. */
rp_status rp_dense_bind_layer(rp_model *m, int l, const rp_dense_cfg *cfg);

/* Random weights of the dense rows (and the I/O ones) for every layer of p,
 * with layer features feat (the keys are the architecture's to write). */
rp_status rp_dense_synth_tensors(rp_synth *s, const rp_synth_params *p, unsigned feat);

rp_status rp_dense_ctx_init(rp_context *c);
void rp_dense_ctx_free(rp_context *c);
/* m->arch_data must point at an rp_dense_cfg. */
rp_status rp_dense_forward(rp_context *c, const rp_ubatch *ub);

#endif
