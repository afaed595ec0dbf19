#include "kernels/ops_ssm.h"
#include "base/threads.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

static inline float silu(float x) {
    return x / (1.0f + expf(-x));
}

/* softplus as torch evaluates it (threshold 20: above it, x itself) */
static inline float softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

/* ---- causal conv1d + SiLU ------------------------------------------------ */

typedef struct conv_job {
    float *x;
    int n_tok, stride, channels, k;
    const float *w, *b;
    float *const *st;
} conv_job;

/* Channels are independent: each thread owns a channel range and scans every
 * token of the batch in order, so each sequence's history advances in time
 * order even when the batch mixes sequences. */
static void conv_task(void *arg, int ith, int nth) {
    const conv_job *j = arg;
    long c0, c1;
    rp_split_range(j->channels, ith, nth, 16, &c0, &c1);
    const int k = j->k;
    const size_t ch = (size_t)j->channels;
    for (int t = 0; t < j->n_tok; t++) {
        float *x = j->x + (size_t)t * (size_t)j->stride;
        float *h = j->st[t]; /* [k-1][channels], oldest first */
        for (long c = c0; c < c1; c++) {
            const float *w = j->w + (size_t)c * (size_t)k;
            const float xc = x[c];
            float acc = j->b ? j->b[c] : 0.0f;
            for (int i = 0; i < k - 1; i++) acc += w[i] * h[(size_t)i * ch + (size_t)c];
            acc += w[k - 1] * xc;
            for (int i = 0; i + 1 < k - 1; i++)
                h[(size_t)i * ch + (size_t)c] = h[(size_t)(i + 1) * ch + (size_t)c];
            if (k > 1) h[(size_t)(k - 2) * ch + (size_t)c] = xc;
            x[c] = silu(acc);
        }
    }
}

void rp_ssm_conv1d_silu(rp_compute *cc, float *x, int n_tok, int stride, int channels,
                        const float *w, const float *b, int k, float *const *st) {
    conv_job j = {x, n_tok, stride, channels, k, w, b, st};
    rp_pool_run(cc->pool, conv_task, &j);
}

/* ---- step sizes ---------------------------------------------------------- */

void rp_ssm_dt(float *out, const float *dt, int stride, const float *dt_bias, int n_tok, int n_head,
               float dt_min) {
    for (int t = 0; t < n_tok; t++) {
        const float *in = dt + (size_t)t * (size_t)stride;
        float *o = out + (size_t)t * (size_t)n_head;
        for (int h = 0; h < n_head; h++) o[h] = fmaxf(softplus(in[h] + dt_bias[h]), dt_min);
    }
}

/* ---- selective scan ------------------------------------------------------ */

static void scan_task(void *arg, int ith, int nth) {
    const rp_ssm_scan_args *a = arg;
    long h0, h1;
    rp_split_range(a->n_head, ith, nth, 1, &h0, &h1);
    const int P = a->head_dim, N = a->d_state;
    const int heads_per_group = a->n_head / a->n_group;
    const size_t head_state = (size_t)P * (size_t)N;
    for (long h = h0; h < h1; h++) {
        const int g = (int)h / heads_per_group;
        const float A = a->A[h], D = a->D[h];
        for (int t = 0; t < a->n_tok; t++) {
            const float dt = a->dt[(size_t)t * (size_t)a->n_head + (size_t)h];
            const float dA = expf(dt * A);
            const float *x = a->x + (size_t)t * (size_t)a->x_stride + (size_t)h * (size_t)P;
            const float *B = a->B + (size_t)t * (size_t)a->bc_stride + (size_t)g * (size_t)N;
            const float *C = a->C + (size_t)t * (size_t)a->bc_stride + (size_t)g * (size_t)N;
            float *y = a->y + (size_t)t * (size_t)a->y_stride + (size_t)h * (size_t)P;
            float *S = a->state[t] + (size_t)h * head_state;
            for (int p = 0; p < P; p++) {
                float *s = S + (size_t)p * (size_t)N;
                const float dx = dt * x[p];
                float acc = 0.0f;
                for (int n = 0; n < N; n++) {
                    s[n] = s[n] * dA + dx * B[n];
                    acc += s[n] * C[n];
                }
                y[p] = acc + D * x[p];
            }
        }
    }
}

void rp_ssm_scan(rp_compute *cc, const rp_ssm_scan_args *a) {
    /* more threads than heads would only wait */
    int nth = rp_pool_size(cc->pool);
    rp_pool_run_n(cc->pool, nth < a->n_head ? nth : a->n_head, scan_task, (void *)a);
}

/* ---- gated grouped RMSNorm ----------------------------------------------- */

void rp_ssm_norm_gated(float *y, const float *z, int z_stride, const float *w, int width,
                       int n_group, int n_rows, float eps) {
    const int gw = width / n_group;
    for (int r = 0; r < n_rows; r++) {
        float *yr = y + (size_t)r * (size_t)width;
        const float *zr = z + (size_t)r * (size_t)z_stride;
        for (int i = 0; i < width; i++) yr[i] *= silu(zr[i]);
        for (int g = 0; g < n_group; g++) {
            float *v = yr + (size_t)g * (size_t)gw;
            double ss = 0; /* double accumulation, as rp_rmsnorm does */
            for (int i = 0; i < gw; i++) ss += (double)(v[i] * v[i]);
            const float scale = 1.0f / sqrtf((float)(ss / gw) + eps);
            for (int i = 0; i < gw; i++)
                v[i] = (v[i] * scale) * w[(size_t)g * (size_t)gw + (size_t)i];
        }
    }
}
