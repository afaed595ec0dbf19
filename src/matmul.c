/* Matrix products over the thread pool.
 *
 * One token (generation): the rows are split across threads in slices of 16
 * and each thread streams its slice once through the kernel's gemv (or
 * vec_dot row by row).
 *
 * Several tokens (prompt processing): the activations are quantized and
 * re-encoded once, in parallel, into groups of RP_GEMM_GROUP tokens; then each
 * thread takes a slice of rows and runs the type's gemm kernel over chunks of
 * token groups small enough to stay in L2, so a weight row is read once per
 * chunk and each activation byte once per pair of rows.
 *
 * Every path returns, for each output, exactly the float the type's vec_dot
 * returns: a batch equals the same tokens one at a time. */
#include "matmul.h"
#include "kernels/kernels.h"
#include "types.h"
#include "util.h"

#include <string.h>

/* tokens from which the gemm path beats one gemv per token */
#define GEMM_MIN_TOKENS 3
/* packed activations per chunk of token groups: small enough to stay in L2
 * while each row tile streams them, large enough to amortize a tile's setup */
#define CHUNK_BYTES (384 << 10)

/* per 32 inputs and token: the standard encoding (<= 36.5 bytes for
 * Q8_0/Q8_1/Q8_K) and the packed one (<= 40 bytes) */
size_t rp_matmul_scratch(int64_t n_in, int n_tok) {
    size_t per32 = (size_t)(n_in / 32 + 1);
    size_t toks = rp_align_up((uint64_t)(n_tok > 0 ? n_tok : 1), RP_GEMM_GROUP);
    return per32 * 40 * toks + per32 * 40 * toks + 256;
}

typedef struct mm_job {
    int n; /* weights in this pass */
    const rp_tensor *const *w;
    float *const *y;
    long total_rows; /* sum of rows over the n weights */
    int ne0;
    int n_tok;
    const float *x; /* F32 activations [n_tok][ne0] */
    int vdt;        /* vec_dot_type of the pass */
    uint8_t *xq;    /* activations in vdt, xq_stride bytes per token */
    size_t xq_stride;
    uint8_t *xp; /* packed groups (gemm path) */
    size_t group_bytes;
    const rp_gemm_ops *gemm;
    const rp_kernels *k;
    rp_pool *pool;
    uint8_t *xe; /* packed-weight extras per token (gemv) */
    size_t xe_stride;
} mm_job;

static int n_groups(int n_tok) {
    return (n_tok + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
}

/* Quantize (and pack) the activations of whole token groups. */
static void prepare_task(void *arg, int ith, int nth) {
    mm_job *j = arg;
    const int ng = n_groups(j->n_tok);
    long g0, g1;
    rp_split_range(ng, ith, nth, 1, &g0, &g1);
    for (long g = g0; g < g1; g++) {
        const int t0 = (int)g * RP_GEMM_GROUP;
        const int cnt = RP_MIN(RP_GEMM_GROUP, j->n_tok - t0);
        if (j->vdt != RP_TYPE_F32)
            for (int t = t0; t < t0 + cnt; t++)
                j->k->act_quant[j->vdt](j->x + (size_t)t * (size_t)j->ne0,
                                        j->xq + (size_t)t * j->xq_stride, j->ne0);
        if (j->gemm && j->gemm->pack)
            j->gemm->pack(j->ne0, cnt, j->xq + (size_t)t0 * j->xq_stride, j->xq_stride,
                          j->xp + (size_t)g * j->group_bytes);
    }
}

/* Rows [a, b) of weight w (one of the pass) for every token. */
static void rows_generic(const mm_job *j, const rp_tensor *w, float *y, long a, long b) {
    rp_vec_dot_fn dot = j->k->vec_dot[w->type];
    const size_t rows = (size_t)w->ne[1];
    for (long r = a; r < b; r++) {
        const void *wr = rp_tensor_row(w, r);
        for (int t = 0; t < j->n_tok; t++)
            dot(j->ne0, &y[(size_t)t * rows + (size_t)r], wr, j->xq + (size_t)t * j->xq_stride);
    }
}

static void rows_gemv(const mm_job *j, const rp_tensor *w, float *y, long a, long b) {
    rp_gemv_fn gemv = j->k->gemv[w->type];
    const size_t rows = (size_t)w->ne[1];
    for (int t = 0; t < j->n_tok; t++)
        gemv(j->ne0, (int)(b - a), rp_tensor_row(w, a), w->row_bytes,
             j->xq + (size_t)t * j->xq_stride, y + (size_t)t * rows + (size_t)a);
}

static void rows_gemm(const mm_job *j, const rp_tensor *w, float *y, long a, long b,
                      void *scratch) {
    const size_t rows = (size_t)w->ne[1];
    const int ng = n_groups(j->n_tok);
    const size_t gb = j->gemm->pack ? j->group_bytes : j->xq_stride * RP_GEMM_GROUP;
    const int chunk = (int)RP_MAX((size_t)1, CHUNK_BYTES / (gb ? gb : 1));
    for (int g0 = 0; g0 < ng; g0 += chunk) {
        const int g1 = RP_MIN(ng, g0 + chunk);
        const int t0 = g0 * RP_GEMM_GROUP, cnt = RP_MIN(j->n_tok, g1 * RP_GEMM_GROUP) - t0;
        const void *xp = j->gemm->pack ? (const void *)(j->xp + (size_t)g0 * j->group_bytes)
                                       : (const void *)(j->xq + (size_t)t0 * j->xq_stride);
        j->gemm->run(j->ne0, (int)(b - a), rp_tensor_row(w, a), w->row_bytes, xp, j->xq_stride, cnt,
                     y + (size_t)t0 * rows + (size_t)a, rows, scratch);
    }
}

static long panels(const rp_tensor *w) {
    return (long)((w->ne[1] + RP_PANEL - 1) / RP_PANEL);
}

/* One token against the packed panels [p0, p1) of w. */
static void rows_packed(const mm_job *j, const rp_tensor *w, float *y, long p0, long p1) {
    const rp_pack_ops *po = j->k->pack[w->type];
    const size_t rows = (size_t)w->ne[1];
    for (int t = 0; t < j->n_tok; t++)
        po->gemv(j->ne0, (int64_t)rows, w->pack, p0, p1, j->xq + (size_t)t * j->xq_stride,
                 j->xe + (size_t)t * j->xe_stride, y + (size_t)t * rows);
}

/* The work is the sequence of 16-row panels of all n weights, split evenly
 * across threads: a thread's part of each weight is contiguous. */
static void mm_task(void *arg, int ith, int nth) {
    mm_job *j = arg;
    long total = 0;
    for (int i = 0; i < j->n; i++) total += panels(j->w[i]);
    long q0, q1;
    rp_split_range(total, ith, nth, 1, &q0, &q1);
    /* NULL (out of memory) falls back to vec_dot, which needs none */
    void *scratch =
        j->gemm && q0 < q1 ? rp_pool_scratch(j->pool, ith, j->gemm->scratch_bytes(j->ne0)) : NULL;
    long base = 0;
    for (int i = 0; i < j->n && q0 < q1; i++) {
        const rp_tensor *w = j->w[i];
        const long np = panels(w);
        const long a = RP_MAX(q0, base) - base, b = RP_MIN(q1, base + np) - base;
        base += np;
        if (a >= b) continue;
        const long r0 = a * RP_PANEL, r1 = RP_MIN(b * RP_PANEL, (long)w->ne[1]);
        if (j->gemm && scratch)
            rows_gemm(j, w, j->y[i], r0, r1, scratch);
        else if (j->n_tok < GEMM_MIN_TOKENS && w->pack && j->k->pack[w->type])
            rows_packed(j, w, j->y[i], a, b);
        else if (j->n_tok < GEMM_MIN_TOKENS && j->k->gemv[w->type])
            rows_gemv(j, w, j->y[i], r0, r1);
        else
            rows_generic(j, w, j->y[i], r0, r1);
    }
}

void rp_matmul_n(rp_compute *cc, int n, const rp_tensor *const *w, float *const *y, const float *x,
                 int n_tok) {
    const rp_kernels *k = rp_kern();
    const int64_t ne0 = w[0]->ne[0];
    /* Group weights that share an activation encoding and a kernel path; mixed
     * types (a Q6_K attn_v beside Q4_K q/k) each get their encoding in turn. */
    int done = 0;
    while (done < n) {
        const int type0 = w[done]->type;
        const int vdt = rp_type_get(type0)->vec_dot_type;
        const rp_gemm_ops *gemm = n_tok >= GEMM_MIN_TOKENS ? k->gemm[type0] : NULL;
        int m = 1;
        while (done + m < n && w[done + m]->type == type0 &&
               (w[done + m]->pack != NULL) == (w[done]->pack != NULL))
            m++;
        mm_job j = {.n = m,
                    .w = w + done,
                    .y = y + done,
                    .ne0 = (int)ne0,
                    .n_tok = n_tok,
                    .x = x,
                    .vdt = vdt,
                    .gemm = gemm,
                    .k = k,
                    .pool = cc->pool};
        for (int i = 0; i < m; i++) {
            RP_ASSERT(w[done + i]->ne[0] == ne0);
            RP_ASSERT(k->vec_dot[w[done + i]->type]);
            j.total_rows += (long)w[done + i]->ne[1];
        }
        const size_t toks = rp_align_up((uint64_t)n_tok, RP_GEMM_GROUP);
        if (vdt == RP_TYPE_F32) {
            j.xq = (uint8_t *)x;
            j.xq_stride = (size_t)ne0 * sizeof(float);
        } else {
            j.xq_stride = rp_row_size(vdt, ne0);
            j.xq = cc->wbuf;
        }
        if (gemm && gemm->pack) {
            j.group_bytes = gemm->group_bytes((int)ne0);
            j.xp = cc->wbuf + rp_align_up(j.xq_stride * toks, 64);
            RP_ASSERT(j.xp + j.group_bytes * (toks / RP_GEMM_GROUP) <= cc->wbuf + cc->wbuf_size);
        }
        RP_ASSERT(vdt == RP_TYPE_F32 || j.xq_stride * (size_t)n_tok <= cc->wbuf_size);
        if (vdt != RP_TYPE_F32 || (gemm && gemm->pack)) {
            if (n_tok >= GEMM_MIN_TOKENS)
                rp_pool_run(cc->pool, prepare_task, &j);
            else
                prepare_task(&j, 0, 1);
        }
        /* packed weights: the activation extras their kernel wants, once */
        const rp_pack_ops *po = n_tok < GEMM_MIN_TOKENS && w[done]->pack ? k->pack[type0] : NULL;
        if (po) {
            j.xe_stride = rp_align_up(po->xbytes((int)ne0), 64);
            j.xe = cc->wbuf + rp_align_up(j.xq_stride * (size_t)n_tok, 64);
            RP_ASSERT(j.xe + j.xe_stride * (size_t)n_tok <= cc->wbuf + cc->wbuf_size);
            for (int t = 0; t < n_tok; t++)
                po->xprep((int)ne0, j.xq + (size_t)t * j.xq_stride, j.xe + (size_t)t * j.xe_stride);
        }
        rp_pool_run(cc->pool, mm_task, &j);
        done += m;
    }
}

void rp_matmul(rp_compute *cc, const rp_tensor *w, const float *x, int n_tok, float *y) {
    rp_matmul_n(cc, 1, &w, &y, x, n_tok);
}

rp_status rp_matmul_pack(rp_tensor *t, void **owned) {
    *owned = NULL;
    const rp_pack_ops *po = t->n_dims == 2 ? rp_kern()->pack[t->type] : NULL;
    if (!po || t->pack) return RP_OK;
    void *p = rp_alloc_aligned(po->bytes(t->ne[0], t->ne[1]), "packed weights");
    if (!p) return rp_fail_prefix(RP_ERR_NOMEM, "tensor '%s'", t->name);
    po->pack(t->ne[0], t->ne[1], t->data, t->row_bytes, p);
    t->pack = p;
    *owned = p;
    return RP_OK;
}

void rp_tensor_get_row(const rp_tensor *w, int64_t r, float *out) {
    rp_type_get(w->type)->to_float(rp_tensor_row(w, r), out, w->ne[0]);
}
