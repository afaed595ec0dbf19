/* Mamba2 operations on F32 rows: the causal depthwise convolution with its
 * rolling state, the step sizes, the per-head selective scan with groups and
 * the grouped gated RMSNorm.
 *
 * Batches may mix sequences. Every per-token state argument is an array of
 * n_tok pointers, one per token, at the state of that token's sequence; tokens
 * of one sequence appear in order, so a scan over the batch in row order is a
 * scan over each sequence in time order (prompt processing and decoding run
 * the same code). Ops know nothing of models or plans. */
#ifndef RP_OPS_SSM_H
#define RP_OPS_SSM_H

#include "kernels/matmul.h"

#include <stddef.h>

/* Causal depthwise conv1d of kernel width k over `channels` channels, plus a
 * bias, then SiLU, in place:
 *   y[t][c] = silu( b[c] + sum_{j<k-1} w[c][j] * hist[j][c] + w[c][k-1] * x[t][c] )
 * hist is the sequence's previous k-1 raw inputs, oldest first. x is
 * [n_tok][stride] (channels at the start of each row); w is [channels][k] (the
 * GGUF ssm_conv1d layout, ne0 = k); b may be NULL; st[t] points at the token's
 * sequence conv state, [k-1][channels], which is advanced past x[t]. */
void rp_ssm_conv1d_silu(rp_compute *cc, float *x, int n_tok, int stride, int channels,
                        const float *w, const float *b, int k, float *const *st);

/* Step sizes of n_tok tokens, in place ([n_tok][n_head], row stride `stride`
 * floats): dt = max(softplus(dt + dt_bias[h]), dt_min). Written to out
 * ([n_tok][n_head], contiguous). dt_min = 0 leaves softplus alone. */
void rp_ssm_dt(float *out, const float *dt, int stride, const float *dt_bias, int n_tok, int n_head,
               float dt_min);

typedef struct rp_ssm_scan_args {
    int n_tok;
    int n_head, head_dim; /* head h owns channels h*head_dim .. (h+1)*head_dim-1 of x and y */
    int d_state;
    int n_group;        /* head h reads B and C of group h / (n_head / n_group) */
    const float *x;     /* [n_tok][x_stride] */
    const float *B, *C; /* [n_tok][bc_stride], group g at g * d_state */
    int x_stride, bc_stride;
    const float *dt; /* [n_tok][n_head] step sizes (rp_ssm_dt) */
    const float *A;  /* [n_head] negative decay rates (-exp(A_log)) */
    const float *D;  /* [n_head] skip */
    float *y;        /* [n_tok][y_stride] */
    int y_stride;
    float *const *state; /* [n_tok] the token's sequence state: n_head x [head_dim][d_state] */
} rp_ssm_scan_args;

/* The selective scan, token by token for each head:
 *   S <- exp(dt A) S + dt x B^T;   y = S C + D x
 * Heads run in parallel on the pool; each head scans the batch in order. */
void rp_ssm_scan(rp_compute *cc, const rp_ssm_scan_args *a);

/* y[r] = rmsnorm_g(y[r] * silu(z[r])) * w, the RMS taken over each of n_group
 * groups of width / n_group channels (Mamba2's gated norm, gate first).
 * y is [n_rows][width] contiguous; z rows are z_stride floats apart. */
void rp_ssm_norm_gated(float *y, const float *z, int z_stride, const float *w, int width,
                       int n_group, int n_rows, float eps);

#endif
