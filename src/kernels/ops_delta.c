#include "kernels/ops_delta.h"
#include "kernels/kernels.h"
#include "base/cpu.h"
#include "base/threads.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

static inline float silu(float x) {
    return x / (1.0f + expf(-x));
}

/* ---- causal conv1d + SiLU ------------------------------------------------ */

typedef struct conv_job {
    float *x;
    int n_tok, stride, channels, k;
    const float *w;
    float *const *st;
    rp_conv_token_fn fn;
} conv_job;

/* Channels are independent: each thread owns a channel range and scans every
 * token of the batch in order, so the rolling history stays per sequence. */
static void conv_task(void *arg, int ith, int nth) {
    const conv_job *j = arg;
    long c0, c1;
    rp_split_range(j->channels, ith, nth, 16, &c0, &c1);
    if (c0 >= c1) return;
    for (int t = 0; t < j->n_tok; t++)
        j->fn(j->x + (size_t)t * (size_t)j->stride, j->st[t], j->w, j->k, j->channels, c0, c1);
}

void rp_conv1d_silu_isa(rp_compute *cc, float *x, int n_tok, int stride, int channels,
                        const float *w, int k, float *const *st, int isa) {
    conv_job j = {x, n_tok, stride, channels, k, w, st, rp_kern_for((rp_isa)isa)->conv_token};
    rp_pool_run(cc->pool, conv_task, &j);
}

void rp_conv1d_silu(rp_compute *cc, float *x, int n_tok, int stride, int channels, const float *w,
                    int k, float *const *st) {
    rp_conv1d_silu_isa(cc, x, n_tok, stride, channels, w, k, st, (int)rp_cpu_isa());
}

/* ---- norms and gates ----------------------------------------------------- */

void rp_l2norm_heads(float *x, int head_dim, int n_head, int n_rows, int stride, float eps) {
    for (int r = 0; r < n_rows; r++)
        for (int h = 0; h < n_head; h++) {
            float *v = x + (size_t)r * (size_t)stride + (size_t)h * (size_t)head_dim;
            double ss = 0; /* double accumulation, as ggml does */
            for (int i = 0; i < head_dim; i++) ss += (double)(v[i] * v[i]);
            const float s = 1.0f / fmaxf(sqrtf((float)ss), eps);
            for (int i = 0; i < head_dim; i++) v[i] *= s;
        }
}

void rp_delta_gates(float *beta, float *alpha, const float *dt_bias, const float *a, int n_tok,
                    int n_head) {
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < n_head; h++) {
            const size_t i = (size_t)t * (size_t)n_head + (size_t)h;
            beta[i] = 1.0f / (1.0f + expf(-beta[i]));
            const float z = alpha[i] + dt_bias[h];
            const float sp = z > 20.0f ? z : logf(1.0f + expf(z)); /* softplus */
            alpha[i] = sp * a[h];
        }
}

void rp_rmsnorm_gated(float *o, const float *w, const float *z, int head_dim, int n_head,
                      int n_rows, float eps) {
    const size_t n = (size_t)n_head * (size_t)n_rows;
    for (size_t r = 0; r < n; r++) {
        float *v = o + r * (size_t)head_dim;
        const float *zr = z + r * (size_t)head_dim;
        double ss = 0;
        for (int i = 0; i < head_dim; i++) ss += (double)(v[i] * v[i]);
        const float s = 1.0f / sqrtf((float)(ss / head_dim) + eps);
        for (int i = 0; i < head_dim; i++) v[i] = (v[i] * s) * w[i] * silu(zr[i]);
    }
}

/* ---- the delta rule ------------------------------------------------------ */

#define DELTA_MAX_D RP_DELTA_MAX_D

typedef struct delta_job {
    const rp_delta_args *a;
    rp_delta_token_fn fn;
} delta_job;

static void delta_task(void *arg, int ith, int nth) {
    const delta_job *j = arg;
    const rp_delta_args *a = j->a;
    const int d = a->d, hv = a->n_head_v;
    float delta[DELTA_MAX_D];
    for (int h = ith; h < hv; h += nth) {
        const int hk = h % a->n_head_k;
        for (int t = 0; t < a->n_tok; t++) {
            const size_t tq = (size_t)t * (size_t)a->qk_stride + (size_t)hk * (size_t)d;
            const size_t g = (size_t)t * (size_t)hv + (size_t)h;
            j->fn(a->state[t] + (size_t)h * (size_t)d * (size_t)d, d, expf(a->g[g]), a->beta[g],
                  a->q + tq, a->k + tq,
                  a->v + (size_t)t * (size_t)a->v_stride + (size_t)h * (size_t)d, a->scale,
                  a->out + (size_t)t * (size_t)a->out_stride + (size_t)h * (size_t)d, delta);
        }
    }
}

void rp_gated_delta_isa(rp_compute *cc, const rp_delta_args *a, int isa) {
    RP_ASSERT(a->d >= 1 && a->d <= DELTA_MAX_D && a->n_head_k >= 1);
    delta_job j = {a, rp_kern_for((rp_isa)isa)->delta_token};
    rp_pool_run_n(cc->pool, RP_MIN(rp_pool_size(cc->pool), a->n_head_v), delta_task, &j);
}

void rp_gated_delta(rp_compute *cc, const rp_delta_args *a) {
    rp_gated_delta_isa(cc, a, (int)rp_cpu_isa());
}
