#include "kernels/ops.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "base/util.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* ---- norms --------------------------------------------------------------- */

void rp_rmsnorm(float *y, const float *x, const float *w, int n, int n_rows, float eps) {
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * (size_t)n;
        float *yr = y + (size_t)r * (size_t)n;
        double ss = 0; /* double accumulation, as ggml does */
        for (int i = 0; i < n; i++) ss += (double)(xr[i] * xr[i]);
        float scale = 1.0f / sqrtf((float)(ss / n) + eps);
        if (w)
            for (int i = 0; i < n; i++) yr[i] = (xr[i] * scale) * w[i];
        else
            for (int i = 0; i < n; i++) yr[i] = xr[i] * scale;
    }
}

void rp_rmsnorm_heads(float *x, const float *w, int head_dim, int n_head, int n_rows, int stride,
                      float eps) {
    for (int r = 0; r < n_rows; r++)
        rp_rmsnorm(x + (size_t)r * (size_t)stride, x + (size_t)r * (size_t)stride, w, head_dim,
                   n_head, eps);
}

void rp_layernorm(float *y, const float *x, const float *w, const float *b, int n, int n_rows,
                  float eps) {
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * (size_t)n;
        float *yr = y + (size_t)r * (size_t)n;
        double mean = 0, var = 0;
        for (int i = 0; i < n; i++) mean += xr[i];
        mean /= n;
        for (int i = 0; i < n; i++) var += ((double)xr[i] - mean) * ((double)xr[i] - mean);
        float scale = 1.0f / sqrtf((float)(var / n) + eps);
        for (int i = 0; i < n; i++) {
            float v = (float)(xr[i] - mean) * scale;
            yr[i] = v * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
        }
    }
}

/* ---- rope ---------------------------------------------------------------- */

static float yarn_ramp(float low, float high, int i0) {
    float y = ((float)(i0 / 2) - low) / fmaxf(0.001f, high - low);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) /
           (2.0f * logf(base));
}

void rp_rope_cache(float *cs, const int32_t *pos, int n_tok, const rp_rope_params *p) {
    const int n_rot = p->n_rot;
    const float theta_scale = powf(p->freq_base, -2.0f / (float)n_rot);
    float corr[2] = {0, 0};
    if (p->ext_factor != 0.0f) {
        float lo = floorf(yarn_corr_dim(n_rot, p->n_ctx_orig, p->beta_fast, p->freq_base));
        float hi = ceilf(yarn_corr_dim(n_rot, p->n_ctx_orig, p->beta_slow, p->freq_base));
        corr[0] = fmaxf(0.0f, lo);
        corr[1] = fminf((float)(n_rot - 1), hi);
    }
    for (int t = 0; t < n_tok; t++) {
        float *c = cs + (size_t)t * (size_t)n_rot;
        float theta = (float)pos[t];
        for (int i0 = 0; i0 < n_rot; i0 += 2) {
            float ff = p->freq_factors ? p->freq_factors[i0 / 2] : 1.0f;
            float extrap = theta / ff;
            float interp = p->freq_scale * extrap;
            float th = interp, mscale = p->attn_factor;
            if (p->ext_factor != 0.0f) {
                float mix = yarn_ramp(corr[0], corr[1], i0) * p->ext_factor;
                th = interp * (1 - mix) + extrap * mix;
                mscale *= 1.0f + 0.1f * logf(1.0f / p->freq_scale);
            }
            c[i0] = cosf(th) * mscale;
            c[i0 + 1] = sinf(th) * mscale;
            theta *= theta_scale;
        }
    }
}

/* The rotation of a pair as llama.cpp's x86 build computes it: GCC contracts
 * x0*cos - x1*sin and x0*sin + x1*cos into one fused multiply-add each
 * (ggml_compute_forward_rope_flt), x1*sin and x1*cos being the products
 * rounded first (found on SmolLM2's Qcur: every element equal to
 * llama-eval-callback's). Plain C rounds both products (reprise builds with
 * -std=c11, so without contraction): one ulp apart. */
static inline float rope_lo(float x0, float x1, float co, float si) {
    return fmaf(x0, co, -(x1 * si));
}
static inline float rope_hi(float x0, float x1, float co, float si) {
    return fmaf(x0, si, x1 * co);
}

void rp_rope_apply(float *x, int n_tok, int stride, int n_head, int head_dim, int n_rot,
                   const float *cs, rp_rope_style style) {
    for (int t = 0; t < n_tok; t++) {
        const float *c = cs + (size_t)t * (size_t)n_rot;
        for (int h = 0; h < n_head; h++) {
            float *v = x + (size_t)t * (size_t)stride + (size_t)h * (size_t)head_dim;
            if (style == RP_ROPE_NEOX) {
                int half = n_rot / 2;
                for (int i = 0; i < half; i++) {
                    float x0 = v[i], x1 = v[i + half];
                    float co = c[2 * i], si = c[2 * i + 1];
                    v[i] = rope_lo(x0, x1, co, si);
                    v[i + half] = rope_hi(x0, x1, co, si);
                }
            } else {
                for (int i = 0; i < n_rot; i += 2) {
                    float x0 = v[i], x1 = v[i + 1];
                    float co = c[i], si = c[i + 1];
                    v[i] = rope_lo(x0, x1, co, si);
                    v[i + 1] = rope_hi(x0, x1, co, si);
                }
            }
        }
    }
}

/* ---- activations --------------------------------------------------------- */

/* llama.cpp's swiglu on x86 AVX-512 (rp_kernels.silu_mul); its scalar
 * reference, x / (1 + expf(-x)), differs from it in the last bits. */
void rp_silu_mul(float *gate, const float *up, int n) {
    rp_kern()->silu_mul(gate, up, n);
}

void rp_gelu_tanh_mul(float *gate, const float *up, int n) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int i = 0; i < n; i++) {
        float x = gate[i];
        gate[i] = 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x))) * up[i];
    }
}

/* ggml's CPU backend's GELU (GGML_GELU_FP16): read from a table of fp16
 * values (rp_kernels.geglu_f16, act_ref.c) */
void rp_gelu_tanh_f16_mul(float *gate, const float *up, int n) {
    rp_kern()->geglu_f16(gate, up, n, rp_gelu_f16_table());
}

void rp_gelu_erf_mul(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float x = gate[i];
        gate[i] = 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)) * up[i];
    }
}

void rp_add(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += x[i];
}

void rp_scale(float *y, float s, int n) {
    for (int i = 0; i < n; i++) y[i] *= s;
}

void rp_softcap(float *x, float cap, int n) {
    for (int i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

void rp_softmax(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, x[i]);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* ---- attention ----------------------------------------------------------- */

size_t rp_attention_scratch(int n_ctx, int n_head, int n_head_kv) {
    int group = n_head / (n_head_kv > 0 ? n_head_kv : 1);
    return (size_t)group * (size_t)(n_ctx + 48);
}

bool rp_kv_type_ok(int type) {
    switch (type) {
    case RP_TYPE_F32:
    case RP_TYPE_F16:
    case RP_TYPE_Q8_0:
    case RP_TYPE_Q4_0:
    case RP_TYPE_Q4_1:
    case RP_TYPE_Q5_0:
    case RP_TYPE_Q5_1:
    case RP_TYPE_IQ4_NL:
        return true;
    default:
        return false;
    }
}

size_t rp_kv_row_bytes(int type, int dim) {
    return rp_kv_type_ok(type) ? rp_row_size(type, dim) : 0;
}

static bool kv_quantized(int type) {
    return type != RP_TYPE_F32 && type != RP_TYPE_F16;
}

int rp_kv_rot_k(int type, int dim) {
    if (!kv_quantized(type) || dim % 64) return 0;
    int n = 64;
    while (dim % (2 * n) == 0) n *= 2;
    return n;
}

int rp_kv_rot_v(int type, int dim) {
    return kv_quantized(type) && dim % 64 == 0 ? 64 : 0;
}

void rp_fwht(float *x, int n) {
    const float scale = 1.0f / sqrtf((float)n);
    for (int j = 0; j < n; j++) x[j] *= scale;
    for (int len = 1; len < n; len <<= 1)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                const float u = x[j], v = x[j + len];
                x[j] = u + v;
                x[j + len] = u - v;
            }
}

/* every rot-wide block of the n floats of each of rows rows, stride apart */
static void fwht_rows(float *x, size_t stride, int rows, int n, int rot) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < n; j += rot) rp_fwht(x + (size_t)r * stride + j, rot);
}

static void kv_row_write(const rp_kernels *kn, int type, const float *x, void *row, int n,
                         int rot) {
    float t[RP_KV_QMAXD];
    if (rot) {
        memcpy(t, x, (size_t)n * sizeof *t);
        fwht_rows(t, 0, 1, n, rot);
        x = t;
    }
    if (type == RP_TYPE_F32)
        memcpy(row, x, (size_t)n * sizeof(float));
    else if (type == RP_TYPE_F16)
        kn->f32_to_f16(x, row, n);
    else if (type == RP_TYPE_Q8_0)
        kn->act_quant[RP_TYPE_Q8_0](x, row, n);
    else
        rp_type_get(type)->from_float(x, row, n);
}

void rp_kv_write(const rp_kv_view *kv, int n_head_kv, int head_dim_k, int head_dim_v, int pos,
                 const float *k, const float *v) {
    const rp_kernels *kn = rp_kern();
    const int cell = pos % kv->cap;
    const size_t rk = rp_kv_row_bytes(kv->type_k, head_dim_k),
                 rv = rp_kv_row_bytes(kv->type_v, head_dim_v);
    const int rot_k = rp_kv_rot_k(kv->type_k, head_dim_k),
              rot_v = rp_kv_rot_v(kv->type_v, head_dim_v);
    for (int h = 0; h < n_head_kv; h++) {
        const size_t at = (size_t)h * (size_t)kv->cap + (size_t)cell;
        kv_row_write(kn, kv->type_k, k + (size_t)h * head_dim_k, (uint8_t *)kv->k + at * rk,
                     head_dim_k, rot_k);
        kv_row_write(kn, kv->type_v, v + (size_t)h * head_dim_v, (uint8_t *)kv->v + at * rv,
                     head_dim_v, rot_v);
    }
}

/* ---- the per-key path: F32 caches (llama.cpp's arithmetic), CPUs without a
 * split kernel, head dims beyond it ------------------------------------------ */

typedef struct attn_job {
    const rp_attn_args *a;
    float *scratch;
    size_t per_thread;
    int lanes; /* attn_exact_head's V lanes: 64 in the one-token order, 16 in the batch order */
} attn_job;

/* One query head on an F32 cache in the order of llama.cpp's exact attention
 * (-fa off) on its AVX-512 build: kq = q.k per key (ggml_vec_dot_f32), times
 * scale, masked; softmax by ggml_vec_soft_max_f32 over blocks of 16 cells
 * (e^(s - max) by ggml's polynomial, the sum in double, one lane-reduced block
 * at a time), times (float)(1 / sum); then V weighted by those probabilities
 * as its mul_mat runs on a prompt batch (two or more tokens): tinyBLAS, one
 * 16-lane fused accumulator per output over the cells, then
 * _mm512_reduce_add_ps (see L below for one token). Cells
 * are llama.cpp's, which for a sequence decoded from position 0 are the
 * positions; masked cells add exact zeros, so only lane = position % 16 (or
 * % 64) matters. s holds n_ctx + 48 floats; acc 16 * dv (64 * dv room). */
static void attn_exact_head(const rp_attn_args *a, const rp_kv_view *kv, int g, const float *q,
                            int lo, int p, int L, float *s, float *acc, float *o) {
    const rp_kernels *kn = rp_kern();
    const int dk = a->head_dim_k, dv = a->head_dim_v;
    const float *K = (const float *)kv->k + (size_t)g * (size_t)kv->cap * (size_t)dk;
    const float *V = (const float *)kv->v + (size_t)g * (size_t)kv->cap * (size_t)dv;
    const int base = lo & ~15, end = (p + 16) & ~15; /* blocks of 16 covering [lo, p] */
    float mx = -INFINITY;
    for (int j = base; j < end; j++) {
        float d = -INFINITY;
        if (j >= lo && j <= p) {
            d = kn->dot_f32_ggml(dk, K + (size_t)(j % kv->cap) * (size_t)dk, q) * a->scale;
            if (a->softcap > 0) d = a->softcap * tanhf(d / a->softcap);
        }
        s[j - base] = d;
        mx = fmaxf(mx, d);
    }
    const float inv = (float)(1.0 / kn->exp_sum_ggml(end - base, s, mx));
    for (int j = 0; j < end - base; j++) s[j] *= inv;
    /* llama.cpp's orders for V: a batch of tokens goes through tinyBLAS (one
     * 16-lane accumulator per output over the cells), a one-token decode
     * through ggml_vec_dot_f32 over the V^T row (4 x 16 lanes, cell % 64;
     * its n_kv is padded to 256, so no cell falls in its serial tail). So a
     * batch differs from its tokens one at a time in the last bits, as in
     * llama.cpp; following both makes greedy decoding llama.cpp's, token for
     * token (tests/cli/real_models.sh, greedy_decode). L: 64 for one token
     * (or rp_compute.one_tok: every token in its one-token order), else 16. */
    memset(acc, 0, (size_t)L * (size_t)dv * sizeof(float));
    for (int j = lo; j <= p; j++)
        kn->fma_f32(dv, s[j - base], V + (size_t)(j % kv->cap) * (size_t)dv,
                    acc + (size_t)(j % L) * (size_t)dv);
    float r[16];
    for (int d = 0; d < dv; d++) {
        for (int l = 0; l < 16; l++) {
            const float *x = acc + (size_t)l * (size_t)dv + d;
            r[l] = L == 16
                       ? x[0]
                       : (x[0] + x[(size_t)32 * dv]) + (x[(size_t)16 * dv] + x[(size_t)48 * dv]);
            /* (the 64-lane reduction of vec_dot, for a one-token order) */
        }
        o[d] = rp_reduce16(r);
    }
}

/* q . K row (any cache type; quantized rows decoded into buf first) */
static float key_dot(const rp_kernels *kn, int type, const void *row, const float *q, int dk,
                     float *buf) {
    if (type == RP_TYPE_F16) return kn->dot_f16_f32(dk, row, q);
    if (type == RP_TYPE_F32) return kn->dot_f32(dk, row, q);
    kn->kv_to_f32[type](row, buf, dk);
    return kn->dot_f32(dk, buf, q);
}

/* o += w * V row */
static void value_axpy(const rp_kernels *kn, int type, float w, const void *row, float *o, int dv,
                       float *buf) {
    if (type == RP_TYPE_F16) {
        kn->axpy_f16(dv, w, row, o);
    } else if (type == RP_TYPE_F32) {
        kn->axpy_f32(dv, w, row, o);
    } else {
        kn->kv_to_f32[type](row, buf, dv);
        kn->axpy_f32(dv, w, buf, o);
    }
}

static void attn_task(void *arg, int ith, int nth) {
    const attn_job *j = arg;
    const rp_attn_args *a = j->a;
    const rp_kernels *kn = rp_kern();
    const int group = a->n_head / a->n_head_kv;
    const int dk = a->head_dim_k, dv = a->head_dim_v;
    float *sc = j->scratch + (size_t)ith * j->per_thread;
    _Alignas(64) float buf[RP_KV_QMAXD];
    const int n_tasks = a->n_tok * a->n_head_kv;
    for (int task = ith; task < n_tasks; task += nth) {
        const int t = task / a->n_head_kv, g = task % a->n_head_kv;
        const rp_kv_view *kv = a->kv[t];
        const int p = a->pos[t];
        const int lo = a->window > 0 ? RP_MAX(0, p - a->window + 1) : 0;
        const int n = p - lo + 1;
        RP_ASSERT(n <= kv->cap);
        const size_t rk = rp_kv_row_bytes(kv->type_k, dk), rv = rp_kv_row_bytes(kv->type_v, dv);
        const uint8_t *K = (const uint8_t *)kv->k + (size_t)g * (size_t)kv->cap * rk;
        const uint8_t *V = (const uint8_t *)kv->v + (size_t)g * (size_t)kv->cap * rv;
        for (int hh = 0; hh < group; hh++) {
            const int h = g * group + hh;
            const float *q = a->q + (size_t)t * (size_t)a->q_stride + (size_t)h * (size_t)dk;
            float *s = sc + (size_t)hh * (size_t)(j->per_thread / (size_t)group);
            if (kv->type_k == RP_TYPE_F32 && kv->type_v == RP_TYPE_F32 && dv <= RP_ATTN_MAXD) {
                _Alignas(64) float acc[64 * RP_ATTN_MAXD];
                attn_exact_head(a, kv, g, q, lo, p, j->lanes, s, acc,
                                a->out + (size_t)t * (size_t)a->out_stride +
                                    (size_t)h * (size_t)dv);
                continue;
            }
            for (int i = 0; i < n; i++) {
                const int cell = (lo + i) % kv->cap;
                float d = key_dot(kn, kv->type_k, K + (size_t)cell * rk, q, dk, buf);
                d *= a->scale;
                if (a->softcap > 0) d = a->softcap * tanhf(d / a->softcap);
                s[i] = d;
            }
            rp_softmax(s, n);
            float *o = a->out + (size_t)t * (size_t)a->out_stride + (size_t)h * (size_t)dv;
            memset(o, 0, (size_t)dv * sizeof(float));
            for (int i = 0; i < n; i++) {
                const int cell = (lo + i) % kv->cap;
                value_axpy(kn, kv->type_v, s[i], V + (size_t)cell * rv, o, dv, buf);
            }
        }
    }
}

/* ---- the split path -------------------------------------------------------
 *
 * A query's keys are taken in splits of RP_ATTN_SPLIT positions (fixed in
 * absolute position: split s holds positions [s * S, (s + 1) * S)); the
 * kernel returns for each split the maximum score m, the sum l of
 * exp(score - m) and the unnormalized weighted sum o of V rows; the splits'
 * results are merged in split order and o / l is the output. The work is
 * items of (a tile of up to tq consecutive tokens, a KV head, up to hq of
 * the query heads sharing it), so each K or V row a kernel call reads serves
 * up to RP_ATTN_MAXQ queries. Many items (prompts): each thread takes whole
 * items and merges their splits as it goes. Few items (generation, a long
 * context): the (item, split) pairs are spread over the threads and merged
 * by a second pass. Both do the same arithmetic in the same order for every
 * query, which does not depend on the other tokens of the batch: a batch
 * equals its tokens one at a time. The threads claim their items (or
 * (item, split) pairs) from a shared counter, a few at a time, so a thread
 * the scheduler takes away (a competing load) leaves its share to the
 * others; what a unit computes does not depend on the thread that runs it. */

typedef struct attn_plan {
    const rp_attn_args *a;
    rp_attn_split_fn split;
    int group, hq, tq; /* query heads per KV head; per item; tokens per tile */
    int n_tiles, n_hc, n_items;
    int n_spl;        /* splits per item in the split-spread mode */
    float *part;      /* [n_items][n_spl]: m[MAXQ], l[MAXQ], has[MAXQ], o[MAXQ][dv] */
    _Atomic int next; /* the next unit to claim (reset before each pass) */
    int chunk;        /* units per claim */
} attn_plan;

/* claims the next units [*u0, *u1) of n; false when none is left */
static bool attn_claim(attn_plan *P, int n, int *u0, int *u1) {
    const int u = atomic_fetch_add_explicit(&P->next, P->chunk, memory_order_relaxed);
    if (u >= n) return false;
    *u0 = u;
    *u1 = RP_MIN(n, u + P->chunk);
    return true;
}

/* units per claim: about 4 claims per thread, at least 1 */
static int attn_chunk(int n_units, int nth) {
    return RP_MAX(1, n_units / (4 * nth));
}

/* item i: tile, KV head, head chunk */
static void item_of(const attn_plan *P, int i, int *tile, int *g, int *hc) {
    *hc = i % P->n_hc;
    *g = (i / P->n_hc) % P->a->n_head_kv;
    *tile = i / P->n_hc / P->a->n_head_kv;
}

/* visible positions [lo, p + 1) of token t */
static int vis_lo(const rp_attn_args *a, int t) {
    return a->window > 0 ? RP_MAX(0, a->pos[t] - a->window + 1) : 0;
}

/* The queries of item i (slot = token in tile * hq + head in chunk), split s:
 * m[slot], l[slot], o[slot * dv] for the slots whose token sees the split
 * (has[slot]); one kernel call per run of tokens sharing a cache (a run's
 * slots are consecutive: a tile of several tokens has every head of the
 * group in one chunk). */
static void item_split(const attn_plan *P, int i, int s, float *m, float *l, float *o, bool *has) {
    const rp_attn_args *a = P->a;
    int tile, g, hc;
    item_of(P, i, &tile, &g, &hc);
    const int t0 = tile * P->tq, t1 = RP_MIN(a->n_tok, t0 + P->tq);
    const int h0 = g * P->group + hc * P->hq, nh = RP_MIN(P->hq, P->group - hc * P->hq);
    const int k0 = s * RP_ATTN_SPLIT, k1 = k0 + RP_ATTN_SPLIT;
    for (int q = 0; q < RP_ATTN_MAXQ; q++) has[q] = false;
    for (int ta = t0; ta < t1;) {
        const rp_kv_view *kv = a->kv[ta];
        int tb = ta + 1;
        while (tb < t1 && a->kv[tb] == kv) tb++;
        const size_t rk = rp_kv_row_bytes(kv->type_k, a->head_dim_k),
                     rv = rp_kv_row_bytes(kv->type_v, a->head_dim_v);
        rp_attn_split sp = {.k0 = k0,
                            .k1 = k1,
                            .k = (const uint8_t *)kv->k + (size_t)g * (size_t)kv->cap * rk,
                            .v = (const uint8_t *)kv->v + (size_t)g * (size_t)kv->cap * rv,
                            .type_k = kv->type_k,
                            .type_v = kv->type_v,
                            .cap = kv->cap,
                            .dk = a->head_dim_k,
                            .dv = a->head_dim_v,
                            .scale = a->scale,
                            .softcap = a->softcap};
        const int first = (ta - t0) * P->hq;
        bool any = false;
        for (int t = ta; t < tb; t++) {
            const int lo = vis_lo(a, t), hi = a->pos[t] + 1;
            RP_ASSERT(hi - lo <= kv->cap);
            for (int h = 0; h < nh; h++) {
                const int q = sp.nq++;
                RP_ASSERT(first + q == (t - t0) * P->hq + h);
                sp.q[q] = a->q + (size_t)t * (size_t)a->q_stride +
                          (size_t)(h0 + h) * (size_t)a->head_dim_k;
                sp.beg[q] = RP_MAX(lo, k0);
                sp.end[q] = RP_MIN(hi, k1);
                has[first + q] = sp.beg[q] < sp.end[q];
                any |= has[first + q];
            }
        }
        if (any)
            P->split(&sp, m + first, l + first, o + (size_t)first * (size_t)a->head_dim_v,
                     (size_t)a->head_dim_v);
        ta = tb;
    }
}

/* acc (m, l, o) merged with a split's (ms, ls, os); the first one is copied */
static void attn_merge(bool first, float *m, float *l, float *o, float ms, float ls,
                       const float *os, int dv) {
    if (first) {
        *m = ms;
        *l = ls;
        memcpy(o, os, (size_t)dv * sizeof(float));
        return;
    }
    const float mn = fmaxf(*m, ms), ea = expf(*m - mn), eb = expf(ms - mn);
    *l = *l * ea + ls * eb;
    for (int i = 0; i < dv; i++) o[i] = o[i] * ea + os[i] * eb;
    *m = mn;
}

/* o / l into the output rows of item i */
static void item_store(const attn_plan *P, int i, const float *l, const float *o) {
    const rp_attn_args *a = P->a;
    int tile, g, hc;
    item_of(P, i, &tile, &g, &hc);
    const int t0 = tile * P->tq, t1 = RP_MIN(a->n_tok, t0 + P->tq);
    const int h0 = g * P->group + hc * P->hq, nh = RP_MIN(P->hq, P->group - hc * P->hq);
    const int dv = a->head_dim_v;
    for (int t = t0; t < t1; t++)
        for (int h = 0; h < nh; h++) {
            const int q = (t - t0) * P->hq + h;
            float *out = a->out + (size_t)t * (size_t)a->out_stride + (size_t)(h0 + h) * (size_t)dv;
            const float inv = 1.0f / l[q];
            for (int d = 0; d < dv; d++) out[d] = o[(size_t)q * dv + d] * inv;
        }
}

/* the splits item i's tokens see: [*s0, *s1) */
static void item_splits(const attn_plan *P, int i, int *s0, int *s1) {
    const rp_attn_args *a = P->a;
    int tile, g, hc;
    item_of(P, i, &tile, &g, &hc);
    const int t0 = tile * P->tq, t1 = RP_MIN(a->n_tok, t0 + P->tq);
    int lo = INT32_MAX, hi = 0;
    for (int t = t0; t < t1; t++) {
        lo = RP_MIN(lo, vis_lo(a, t));
        hi = RP_MAX(hi, a->pos[t] + 1);
    }
    *s0 = lo / RP_ATTN_SPLIT;
    *s1 = (hi + RP_ATTN_SPLIT - 1) / RP_ATTN_SPLIT;
}

/* whole items, splits merged in order */
static void attn_items_task(void *arg, int ith, int nth) {
    attn_plan *P = arg;
    (void)ith;
    (void)nth;
    const int dv = P->a->head_dim_v;
    float m[RP_ATTN_MAXQ], l[RP_ATTN_MAXQ], ms[RP_ATTN_MAXQ], ls[RP_ATTN_MAXQ];
    bool seen[RP_ATTN_MAXQ], has[RP_ATTN_MAXQ];
    _Alignas(64) float o[RP_ATTN_MAXQ * RP_ATTN_MAXD], os[RP_ATTN_MAXQ * RP_ATTN_MAXD];
    int i0, i1;
    while (attn_claim(P, P->n_items, &i0, &i1))
        for (int i = i0; i < i1; i++) {
            int s0, s1;
            item_splits(P, i, &s0, &s1);
            for (int q = 0; q < RP_ATTN_MAXQ; q++) seen[q] = false;
            for (int s = s0; s < s1; s++) {
                item_split(P, i, s, ms, ls, os, has);
                for (int q = 0; q < RP_ATTN_MAXQ; q++)
                    if (has[q]) {
                        attn_merge(!seen[q], &m[q], &l[q], o + (size_t)q * dv, ms[q], ls[q],
                                   os + (size_t)q * dv, dv);
                        seen[q] = true;
                    }
            }
            item_store(P, i, l, o);
        }
}

static float *part_at(const attn_plan *P, int i, int s) {
    return P->part + ((size_t)i * (size_t)P->n_spl + (size_t)s) * RP_ATTN_MAXQ *
                         (size_t)(3 + P->a->head_dim_v);
}

/* split-spread mode, pass 1: (item, split) pairs */
static void attn_parts_task(void *arg, int ith, int nth) {
    attn_plan *P = arg;
    (void)ith;
    (void)nth;
    bool has[RP_ATTN_MAXQ];
    const int n_units = P->n_items * P->n_spl;
    int u0, u1;
    while (attn_claim(P, n_units, &u0, &u1))
        for (int u = u0; u < u1; u++) {
            const int i = u / P->n_spl, s = u % P->n_spl;
            int s0, s1;
            item_splits(P, i, &s0, &s1);
            float *pp = part_at(P, i, s);
            for (int q = 0; q < RP_ATTN_MAXQ; q++) has[q] = false;
            if (s >= s0 && s < s1)
                item_split(P, i, s, pp, pp + RP_ATTN_MAXQ, pp + 3 * RP_ATTN_MAXQ, has);
            for (int q = 0; q < RP_ATTN_MAXQ; q++) pp[2 * RP_ATTN_MAXQ + q] = has[q] ? 1.0f : 0.0f;
        }
}

/* pass 2: every item's splits merged in order */
static void attn_merge_task(void *arg, int ith, int nth) {
    attn_plan *P = arg;
    (void)ith;
    (void)nth;
    const int dv = P->a->head_dim_v;
    float m[RP_ATTN_MAXQ], l[RP_ATTN_MAXQ];
    bool seen[RP_ATTN_MAXQ];
    _Alignas(64) float o[RP_ATTN_MAXQ * RP_ATTN_MAXD];
    int i0, i1;
    while (attn_claim(P, P->n_items, &i0, &i1))
        for (int i = i0; i < i1; i++) {
            for (int q = 0; q < RP_ATTN_MAXQ; q++) seen[q] = false;
            for (int s = 0; s < P->n_spl; s++) {
                const float *pp = part_at(P, i, s), *po = pp + 3 * RP_ATTN_MAXQ;
                for (int q = 0; q < RP_ATTN_MAXQ; q++)
                    if (pp[2 * RP_ATTN_MAXQ + q] != 0.0f) {
                        attn_merge(!seen[q], &m[q], &l[q], o + (size_t)q * dv, pp[q],
                                   pp[RP_ATTN_MAXQ + q], po + (size_t)q * dv, dv);
                        seen[q] = true;
                    }
            }
            item_store(P, i, l, o);
        }
}

static void attention(rp_compute *cc, const rp_attn_args *a, float *scratch, size_t per_thread);

void rp_attention(rp_compute *cc, const rp_attn_args *a, float *scratch, size_t per_thread) {
    if (a->n_tok <= 0) return;
    const int rot_k = rp_kv_rot_k(a->kv[0]->type_k, a->head_dim_k),
              rot_v = rp_kv_rot_v(a->kv[0]->type_v, a->head_dim_v);
    if (rot_k) fwht_rows(a->q, (size_t)a->q_stride, a->n_tok, a->n_head * a->head_dim_k, rot_k);
    attention(cc, a, scratch, per_thread);
    if (rot_v) fwht_rows(a->out, (size_t)a->out_stride, a->n_tok, a->n_head * a->head_dim_v, rot_v);
}

static void attention(rp_compute *cc, const rp_attn_args *a, float *scratch, size_t per_thread) {
    const rp_kernels *kn = rp_kern();
    /* an F32 cache keeps the per-key arithmetic, llama.cpp's (the goldens
     * match it bit for bit); F16 caches (the default) and quantized ones take
     * the split path */
    const bool split =
        a->n_tok > 0 && a->kv[0]->type_k != RP_TYPE_F32 && a->kv[0]->type_v != RP_TYPE_F32;
    if (!kn->attn_split || !split || a->head_dim_k > RP_ATTN_MAXD || a->head_dim_v > RP_ATTN_MAXD) {
        attn_job j = {a, scratch, per_thread, a->n_tok == 1 || cc->one_tok ? 64 : 16};
        rp_pool_run(cc->pool, attn_task, &j);
        return;
    }
    attn_plan P = {.a = a, .split = kn->attn_split, .group = a->n_head / a->n_head_kv};
    P.hq = RP_MIN(P.group, RP_ATTN_MAXQ);
    P.tq = RP_MAX(1, RP_ATTN_MAXQ / P.hq);
    P.n_hc = (P.group + P.hq - 1) / P.hq;
    P.n_tiles = (a->n_tok + P.tq - 1) / P.tq;
    P.n_items = P.n_tiles * a->n_head_kv * P.n_hc;
    const int nth = rp_pool_size(cc->pool);
    int max_s = 0, min_s = INT32_MAX;
    for (int t = 0; t < a->n_tok; t++) {
        max_s = RP_MAX(max_s, a->pos[t] / RP_ATTN_SPLIT);
        min_s = RP_MIN(min_s, vis_lo(a, t) / RP_ATTN_SPLIT);
    }
    /* few items with several splits: spread the splits over the threads */
    if (nth > 1 && P.n_items < 2 * nth && max_s > min_s) {
        P.n_spl = max_s + 1;
        const size_t bytes = (size_t)P.n_items * (size_t)P.n_spl * RP_ATTN_MAXQ *
                             (size_t)(3 + a->head_dim_v) * sizeof(float);
        P.part = rp_pool_shared_scratch(cc->pool, bytes);
        if (P.part) {
            P.chunk = attn_chunk(P.n_items * P.n_spl, nth);
            atomic_store(&P.next, 0);
            rp_pool_run(cc->pool, attn_parts_task, &P);
            P.chunk = 1;
            atomic_store(&P.next, 0);
            rp_pool_run(cc->pool, attn_merge_task, &P);
            return;
        }
    }
    P.chunk = attn_chunk(P.n_items, nth);
    atomic_store(&P.next, 0);
    rp_pool_run(cc->pool, attn_items_task, &P);
}
