/* Gated delta-net operations (Qwen3-Next / Qwen3.5 linear attention) on F32
 * rows: the causal depthwise convolution with its rolling state, L2 norms,
 * the gates, the delta-rule recurrence and the gated RMSNorm.
 *
 * Batches may mix sequences. Every per-token state argument is an array of
 * n_tok pointers, one per token, at the state of that token's sequence; tokens
 * of one sequence appear in order, so a scan over the batch in row order is a
 * scan over each sequence in time order. Ops know nothing of models or plans. */
#ifndef RP_OPS_DELTA_H
#define RP_OPS_DELTA_H

#include "kernels/matmul.h"

#include <stdint.h>

/* Widest head (q, k, v) the recurrence supports; loaders refuse wider ones. */
#define RP_DELTA_MAX_D 1024

/* Causal depthwise conv1d of kernel width k over `channels` channels, then
 * SiLU, in place:
 *   y[t][c] = silu( w[k-1][c] * x[t][c] + sum_{j<k-1} w[j][c] * hist[j][c] )
 * where hist is the sequence's previous k-1 raw inputs (oldest first). x is
 * [n_tok][stride] (channels at the start of each row); w is tap-major,
 * [k][channels] (the transpose of GGUF's ssm_conv1d [channels][k]); st[t]
 * points at the token's sequence conv state, [k-1][channels], which is
 * advanced past x[t]. */
void rp_conv1d_silu(rp_compute *cc, float *x, int n_tok, int stride, int channels, const float *w,
                    int k, float *const *st);

/* x[r][h] = x[r][h] / max(||x[r][h]||, eps) for n_head heads of head_dim per
 * row (row stride `stride` floats). */
void rp_l2norm_heads(float *x, int head_dim, int n_head, int n_rows, int stride, float eps);

/* The per-head gates of n_tok tokens, in place ([n_tok][n_head] each):
 *   beta  = sigmoid(beta)
 *   alpha = a[h] * softplus(alpha + dt_bias[h])   (log of the decay, <= 0 for a < 0) */
void rp_delta_gates(float *beta, float *alpha, const float *dt_bias, const float *a, int n_tok,
                    int n_head);

typedef struct rp_delta_args {
    int n_tok;
    int n_head_k, n_head_v; /* v-head h reads q/k head h % n_head_k (ggml's repeat) */
    int d;                  /* head width of q, k and v */
    const float *q, *k;     /* [n_tok][qk_stride], head h at h * d (L2-normalised) */
    int qk_stride;
    const float *v; /* [n_tok][v_stride], head h at h * d */
    int v_stride;
    const float *g;    /* [n_tok][n_head_v] log decay */
    const float *beta; /* [n_tok][n_head_v] */
    float *out;        /* [n_tok][out_stride], head h at h * d */
    int out_stride;
    float scale;         /* applied to S q (1/sqrt(d)) */
    float *const *state; /* [n_tok] the token's sequence state: n_head_v matrices
                            [d (v)][d (k)], k contiguous */
} rp_delta_args;

/* The gated delta rule, token by token for each v-head:
 *   S <- exp(g) S;  S <- S + beta (v - S k) k^T;  o = scale * S q
 * Heads run in parallel on the pool; each head scans the batch in order. */
void rp_gated_delta(rp_compute *cc, const rp_delta_args *a);

/* rp_gated_delta / rp_conv1d_silu at a given level (<= rp_cpu_isa_max()). */
void rp_gated_delta_isa(rp_compute *cc, const rp_delta_args *a, int isa);
void rp_conv1d_silu_isa(rp_compute *cc, float *x, int n_tok, int stride, int channels,
                        const float *w, int k, float *const *st, int isa);

/* o[r][h] = rmsnorm(o[r][h]) * w * silu(z[r][h]) over n_head heads of head_dim
 * (rows of n_head * head_dim floats, o and z alike). */
void rp_rmsnorm_gated(float *o, const float *w, const float *z, int head_dim, int n_head,
                      int n_rows, float eps);

#endif
