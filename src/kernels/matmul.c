/* Matrix products over the thread pool.
 *
 * The work of a product is the sequence of 16-row panels of its weights,
 * split evenly across threads; how a thread computes its rows depends on the
 * weight:
 *
 * Packed weights (re-laid out at load for this CPU, rp_matmul_pack): every
 * token count runs the type's panel kernel, which reads a panel once for a
 * tile of tokens, so the weights stream from memory once per product (per
 * chunk of tokens whose activations fit in L2) and the file's copy of a
 * packed tensor is never read. The activations are quantized once per
 * product, with the per-token extras the kernel wants.
 *
 * Other weights: many tokens (prompt processing) go through the type's gemm:
 * the activations are quantized and re-encoded once, in parallel, into
 * groups of RP_GEMM_GROUP tokens, then each thread runs the gemm over chunks
 * of token groups small enough to stay in L2. A few tokens (generation,
 * speculative verification) go through the multi-row gemv (or vec_dot) on
 * blocks of rows small enough to stay in L1, every token in turn, so a row is
 * read from memory once for all the tokens.
 *
 * Every path returns, for each output, exactly the float the type's vec_dot
 * returns: a batch equals the same tokens one at a time; except where
 * llama.cpp's x86 prompt path has its own order (rp_kernels.vec_dot_batch:
 * Q4_K, Q6_K), which the packed kernels follow on the tokens
 * rp_matmul_batch_tokens names (none with rp_compute.one_tok). */
#include "kernels/matmul.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "base/util.h"

#include <string.h>

/* packed activations per chunk of tokens: small enough to stay in L2 while
 * each row tile streams them, large enough to amortize a tile's setup */
#define CHUNK_BYTES (384 << 10)
/* bytes of weight rows the small-batch gemv keeps in L1 across tokens */
#define ROW_BLOCK_BYTES (16 << 10)

/* Tokens from which an unpacked weight of this type goes through the gemm
 * (groups of 16 tokens) rather than the row-blocked gemv / vec_dot (whose
 * cost per token is one pass over L1-resident rows). */
static int gemm_min_tokens(int type) {
    switch (type) {
    case RP_TYPE_F16:
        return 4;
    default:
        return 8;
    }
}

/* per 32 inputs and token: the standard encoding (<= 36.5 bytes for
 * Q8_0/Q8_1/Q8_K), the packed groups or the packed weights' extras (<= 40
 * bytes), alignment */
size_t rp_matmul_scratch(int64_t n_in, int n_tok) {
    size_t per32 = (size_t)(n_in / 32 + 1);
    size_t toks = rp_align_up((uint64_t)(n_tok > 0 ? n_tok : 1), RP_GEMM_GROUP);
    return per32 * 40 * toks * 2 + 64 * toks + 256;
}

typedef enum mm_mode { MM_PACKED, MM_GEMM, MM_GEMV, MM_DOT } mm_mode;

typedef struct mm_job {
    int n; /* weights in this pass */
    const rp_tensor *const *w;
    float *const *y;
    int ne0;
    int n_tok;
    const float *x; /* F32 activations [n_tok][ne0] */
    bool one_tok;   /* rp_compute.one_tok */
    int vdt;        /* vec_dot_type of the pass */
    mm_mode mode;
    uint8_t *xq; /* activations in vdt, xq_stride bytes per token */
    size_t xq_stride;
    uint8_t *xp; /* packed groups (gemm path) */
    size_t group_bytes;
    uint8_t *xe; /* packed weights: per-token extras */
    size_t xe_stride;
    const rp_gemm_ops *gemm;
    const rp_pack_ops *po;
    const rp_kernels *k;
    rp_pool *pool;
} mm_job;

static int n_groups(int n_tok) {
    return (n_tok + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
}

/* Quantize the activations (and derive what the path wants from them):
 * whole token groups for the gemm, tokens otherwise. */
static void prepare_task(void *arg, int ith, int nth) {
    mm_job *j = arg;
    if (j->mode != MM_GEMM) {
        long t0, t1;
        rp_split_range(j->n_tok, ith, nth, 1, &t0, &t1);
        for (long t = t0; t < t1; t++) {
            uint8_t *xq = j->xq + (size_t)t * j->xq_stride;
            if (j->vdt != RP_TYPE_F32)
                j->k->act_quant[j->vdt](j->x + (size_t)t * (size_t)j->ne0, xq, j->ne0);
            if (j->po) j->po->xprep(j->ne0, xq, j->xe + (size_t)t * j->xe_stride);
        }
        return;
    }
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
        if (j->gemm->pack)
            j->gemm->pack(j->ne0, cnt, j->xq + (size_t)t0 * j->xq_stride, j->xq_stride,
                          j->xp + (size_t)g * j->group_bytes);
    }
}

/* rows per block of the small-batch paths: a multiple of 4, ~ROW_BLOCK_BYTES */
static long row_block(const rp_tensor *w) {
    const long r = (long)(ROW_BLOCK_BYTES / (w->row_bytes ? w->row_bytes : 1));
    return r < 4 ? 4 : r & ~3L;
}

/* Rows [a, b) of weight w (one of the pass) for every token, a block of rows
 * at a time. */
static void rows_dot(const mm_job *j, const rp_tensor *w, float *y, long a, long b) {
    rp_vec_dot_fn dot = j->k->vec_dot[w->type];
    const size_t rows = (size_t)w->ne[1];
    const long rb = row_block(w);
    for (long r0 = a; r0 < b; r0 += rb) {
        const long r1 = RP_MIN(b, r0 + rb);
        for (int t = 0; t < j->n_tok; t++)
            for (long r = r0; r < r1; r++)
                dot(j->ne0, &y[(size_t)t * rows + (size_t)r], rp_tensor_row(w, r),
                    j->xq + (size_t)t * j->xq_stride);
    }
}

static void rows_gemv(const mm_job *j, const rp_tensor *w, float *y, long a, long b) {
    rp_gemv_fn gemv = j->k->gemv[w->type];
    const size_t rows = (size_t)w->ne[1];
    const long rb = row_block(w);
    for (long r0 = a; r0 < b; r0 += rb) {
        const long r1 = RP_MIN(b, r0 + rb);
        for (int t = 0; t < j->n_tok; t++)
            gemv(j->ne0, (int)(r1 - r0), rp_tensor_row(w, r0), w->row_bytes,
                 j->xq + (size_t)t * j->xq_stride, y + (size_t)t * rows + (size_t)r0);
    }
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

int rp_matmul_batch_tokens(int type, int n_tok) {
    switch (type) {
    case RP_TYPE_Q4_K:
        return n_tok >= 4 ? n_tok - n_tok % 4 : 0;
    case RP_TYPE_Q6_K:
        return n_tok >= 8 ? n_tok : 0;
    default:
        return 0;
    }
}

/* Every token against the packed panels [p0, p1) of w, in chunks of tokens
 * whose activations stay in L2; the first rp_matmul_batch_tokens tokens in
 * the batch order when the type has one. */
static void rows_packed(const mm_job *j, const rp_tensor *w, float *y, long p0, long p1) {
    const size_t rows = (size_t)w->ne[1];
    const int chunk = (int)RP_MAX((size_t)1, CHUNK_BYTES / (j->xq_stride + j->xe_stride));
    const rp_pack_gemm_fn gb = j->k->pack_gemm_batch[w->type];
    const int nb = gb && !j->one_tok ? rp_matmul_batch_tokens(w->type, j->n_tok) : 0;
    for (int t0 = 0; t0 < j->n_tok;) {
        const int end = t0 < nb ? nb : j->n_tok;
        const int cnt = RP_MIN(chunk, end - t0);
        (t0 < nb ? gb : j->po->gemm)(j->ne0, (int64_t)rows, w->pack, p0, p1, cnt,
                                     j->xq + (size_t)t0 * j->xq_stride, j->xq_stride,
                                     j->xe + (size_t)t0 * j->xe_stride, j->xe_stride,
                                     y + (size_t)t0 * rows, rows);
        t0 += cnt;
    }
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
    void *scratch = j->mode == MM_GEMM && q0 < q1
                        ? rp_pool_scratch(j->pool, ith, j->gemm->scratch_bytes(j->ne0))
                        : NULL;
    long base = 0;
    for (int i = 0; i < j->n && q0 < q1; i++) {
        const rp_tensor *w = j->w[i];
        const long np = panels(w);
        const long a = RP_MAX(q0, base) - base, b = RP_MIN(q1, base + np) - base;
        base += np;
        if (a >= b) continue;
        const long r0 = a * RP_PANEL, r1 = RP_MIN(b * RP_PANEL, (long)w->ne[1]);
        switch (j->mode) {
        case MM_PACKED:
            rows_packed(j, w, j->y[i], a, b);
            break;
        case MM_GEMM:
            if (scratch) {
                rows_gemm(j, w, j->y[i], r0, r1, scratch);
                break;
            }
            rows_dot(j, w, j->y[i], r0, r1);
            break;
        case MM_GEMV:
            rows_gemv(j, w, j->y[i], r0, r1);
            break;
        case MM_DOT:
            rows_dot(j, w, j->y[i], r0, r1);
            break;
        }
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
        const int vdt = rp_kern_act_type(type0);
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
                    .one_tok = cc->one_tok,
                    .vdt = vdt,
                    .k = k,
                    .pool = cc->pool};
        if (w[done]->pack && k->pack[type0]) {
            j.mode = MM_PACKED;
            j.po = k->pack[type0];
        } else if (k->gemm[type0] && n_tok >= gemm_min_tokens(type0)) {
            j.mode = MM_GEMM;
            j.gemm = k->gemm[type0];
        } else {
            j.mode = k->gemv[type0] ? MM_GEMV : MM_DOT;
        }
        for (int i = 0; i < m; i++) {
            RP_ASSERT(w[done + i]->ne[0] == ne0);
            RP_ASSERT(k->vec_dot[w[done + i]->type]);
        }
        const size_t toks = rp_align_up((uint64_t)n_tok, RP_GEMM_GROUP);
        if (vdt == RP_TYPE_F32) {
            j.xq = (uint8_t *)x;
            j.xq_stride = (size_t)ne0 * sizeof(float);
        } else {
            j.xq_stride = rp_row_size(vdt, ne0);
            j.xq = cc->wbuf;
            RP_ASSERT(j.xq_stride * (size_t)n_tok <= cc->wbuf_size);
        }
        uint8_t *after_xq =
            cc->wbuf + (vdt == RP_TYPE_F32 ? 0 : rp_align_up(j.xq_stride * toks, 64));
        if (j.mode == MM_GEMM && j.gemm->pack) {
            j.group_bytes = j.gemm->group_bytes((int)ne0);
            j.xp = after_xq;
            RP_ASSERT(j.xp + j.group_bytes * (toks / RP_GEMM_GROUP) <= cc->wbuf + cc->wbuf_size);
        }
        if (j.mode == MM_PACKED) {
            j.xe_stride = rp_align_up(j.po->xbytes((int)ne0), 64);
            j.xe = after_xq;
            RP_ASSERT(j.xe + j.xe_stride * (size_t)n_tok <= cc->wbuf + cc->wbuf_size);
        }
        if (vdt != RP_TYPE_F32 || j.po || (j.gemm && j.gemm->pack)) {
            /* a few tokens are quicker here than a round trip through the pool */
            if (n_tok >= 4)
                rp_pool_run(cc->pool, prepare_task, &j);
            else
                prepare_task(&j, 0, 1);
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
    const rp_type_traits *tt = rp_type_get(w->type);
    const rp_pack_ops *po = w->pack ? rp_kern()->pack[w->type] : NULL;
    if (!po) {
        tt->to_float(rp_tensor_row(w, r), out, w->ne[0]);
        return;
    }
    /* from the packed copy, a few blocks at a time through the stack */
    _Alignas(64) uint8_t buf[4096];
    const int64_t nb = w->ne[0] / tt->blck_size;
    const int64_t step = RP_MAX((int64_t)1, (int64_t)(sizeof buf / tt->type_size));
    for (int64_t b0 = 0; b0 < nb; b0 += step) {
        const int64_t b1 = RP_MIN(nb, b0 + step);
        po->unpack(w->ne[0], w->pack, r, b0, b1, buf);
        tt->to_float(buf, out + b0 * tt->blck_size, (b1 - b0) * tt->blck_size);
    }
}
