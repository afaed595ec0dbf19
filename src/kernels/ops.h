/* Neural-network operations on F32 rows: norms, rotary embeddings,
 * activations, attention over the KV cache. Batched over tokens; attention is
 * spread over the thread pool. Ops know nothing of models or plans. */
#ifndef RP_OPS_H
#define RP_OPS_H

#include "kernels/matmul.h"

#include <stdbool.h>
#include <stdint.h>

/* y[t] = x[t] / rms(x[t]) * w  (w may be NULL: no weight). In place allowed. */
void rp_rmsnorm(float *y, const float *x, const float *w, int n, int n_rows, float eps);
/* Per-head RMSNorm of n_rows x n_head heads of head_dim, stride between rows. */
void rp_rmsnorm_heads(float *x, const float *w, int head_dim, int n_head, int n_rows, int stride,
                      float eps);
/* LayerNorm with weight and optional bias. */
void rp_layernorm(float *y, const float *x, const float *w, const float *b, int n, int n_rows,
                  float eps);

/* ---- rotary position embeddings ------------------------------------------ */

typedef enum rp_rope_style {
    RP_ROPE_NORM = 0, /* rotate pairs (x[2i], x[2i+1]) (GPT-J / llama) */
    RP_ROPE_NEOX = 2, /* rotate pairs (x[i], x[i + n_rot/2]) */
} rp_rope_style;

typedef struct rp_rope_params {
    int n_rot; /* rotated dimensions per head (<= head_dim, even) */
    float freq_base;
    float freq_scale;  /* 1 / linear scaling factor */
    float ext_factor;  /* YaRN extrapolation mix (0 = off) */
    float attn_factor; /* YaRN magnitude scale (1 = off) */
    float beta_fast, beta_slow;
    int n_ctx_orig;            /* training context (YaRN) */
    const float *freq_factors; /* [n_rot/2] divisors of each frequency, or NULL */
} rp_rope_params;

/* cos/sin table: cs[t][n_rot] (pairs cos,sin) for each token position. */
void rp_rope_cache(float *cs, const int32_t *pos, int n_tok, const rp_rope_params *p);
/* Rotate n_head heads (each head_dim apart) of every token row (stride floats). */
void rp_rope_apply(float *x, int n_tok, int stride, int n_head, int head_dim, int n_rot,
                   const float *cs, rp_rope_style style);

/* ---- activations --------------------------------------------------------- */

void rp_silu_mul(float *gate, const float *up, int n);      /* gate = silu(gate) * up */
void rp_gelu_tanh_mul(float *gate, const float *up, int n); /* gate = gelu_tanh(gate) * up */
void rp_gelu_erf_mul(float *gate, const float *up, int n);  /* gate = gelu_erf(gate) * up */
/* gate = gelu_tanh(gate) * up with GELU as ggml's CPU backend evaluates it on
 * F32 (GGML_GELU_FP16): through fp16, i.e. fp16(gelu(fp16(x))) for |x| < 10,
 * 0 below -10, x from 10 up. What llama.cpp computes for Gemma's GeGLU. */
void rp_gelu_tanh_f16_mul(float *gate, const float *up, int n);
void rp_add(float *y, const float *x, int n); /* y += x */
void rp_scale(float *y, float s, int n);
void rp_softcap(float *x, float cap, int n); /* x = cap * tanh(x / cap) */
void rp_softmax(float *x, int n);            /* in place */

/* ---- attention ----------------------------------------------------------- */

/* One sequence's cache for one plan step: [n_head_kv][cap][row] for K and for
 * V, a row being one head's head_dim elements in the cache type: F32, F16, or
 * one of llama.cpp's 32-element blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
 * their ggml layouts byte for byte; head_dim a multiple of 32). Position p
 * lives in cell p % cap (cap >= the positions a token can see, so a ring
 * buffer is only a smaller cap). */
typedef struct rp_kv_view {
    void *k, *v;
    int type_k, type_v;
    int cap;
} rp_kv_view;

typedef struct rp_attn_args {
    int n_tok;
    float *q; /* [n_tok][q_stride], head h at h * head_dim_k; rotated in place
               * when the K cache is (rp_kv_rotation) */
    int q_stride;
    float *out; /* [n_tok][out_stride], head h at h * head_dim_v */
    int out_stride;
    int n_head, n_head_kv, head_dim_k, head_dim_v;
    float scale;                 /* applied to q.k */
    float softcap;               /* 0 = none; else scores = softcap * tanh(scores / softcap) */
    int window;                  /* 0 = full causal; else see positions p-window+1 .. p */
    const int32_t *pos;          /* [n_tok] */
    const rp_kv_view *const *kv; /* [n_tok] the token's sequence cache */
} rp_attn_args;

/* Whether a KV cache can hold this type (the list above), and the bytes of
 * one cache row of dim elements (0: not a cache type, or dim not a multiple
 * of its block). Quantized rows are at most RP_KV_QMAXD elements. */
#define RP_KV_QMAXD 1024
bool rp_kv_type_ok(int type);
size_t rp_kv_row_bytes(int type, int dim);

/* llama.cpp's rotation of quantized caches (its attn_rot_k / attn_rot_v):
 * where a K cache row is quantized, K and the queries are multiplied by an
 * orthonormal Walsh-Hadamard matrix of size rp_kv_rot_k(type, dim) (the
 * largest power of two from 64 dividing the head) before K is quantized, so
 * q.k is unchanged while outliers spread over the block; a quantized V is
 * rotated in blocks of 64 (rp_kv_rot_v) and attention's output rotated back
 * (the matrix is its own inverse). 0: no rotation (F32/F16 caches, heads not
 * a multiple of 64). rp_kv_write and rp_attention apply it. */
int rp_kv_rot_k(int type, int dim);
int rp_kv_rot_v(int type, int dim);
/* x (n a power of two) = H x / sqrt(n), ggml's butterfly order (its fwht):
 * the scale first, then stages of width 1, 2, 4, ..: (u, v) -> (u + v, u - v) */
void rp_fwht(float *x, int n);

/* Scratch floats attention needs per thread for n_ctx visible positions. */
size_t rp_attention_scratch(int n_ctx, int n_head, int n_head_kv);
void rp_attention(rp_compute *cc, const rp_attn_args *a, float *scratch, size_t scratch_per_thread);

/* Write one token's K and V rows ([n_head_kv * head_dim]) at position pos,
 * encoded as llama.cpp's CPU backend stores them: F16 rounded to nearest,
 * Q8_0 as its x86 quantize_row_q8_0 (rp_act_q8_0), the other block types by
 * their reference quantizers. */
void rp_kv_write(const rp_kv_view *kv, int n_head_kv, int head_dim_k, int head_dim_v, int pos,
                 const float *k, const float *v);

#endif
