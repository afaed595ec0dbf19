/* The Vulkan backend's ops: each records dispatches into the micro-batch's
 * command buffer (vk_device.c), which puts a memory barrier before a
 * dispatch or copy only where it conflicts with what came since the last.
 *
 * Bindings: a storage binding may not exceed the device's
 * maxStorageBufferRange (128 MiB on lavapipe), so every op binds windows of
 * its buffers and walks them: weights by rows (a weight larger than one
 * allocation is stored in parts), activations by tokens, caches by sequence
 * and KV heads, element-wise ops by element ranges. The shaders get each
 * window's start in their push constants.
 *
 * Matrix products: quantized weights are multiplied with activations
 * quantized as the CPU does (Q8_0 / Q8_1 / Q8_K with the CPU's rounding,
 * quant_*.comp), with integer block sums scaled in float, so the result
 * equals the CPU's up to float summation order. Up to 8 tokens take the
 * matrix-vector kernel (mul_mv_*: a workgroup per 2 rows, threads over the
 * row's blocks), more the tiled kernel (mul_mm_*: 32 x 32 outputs per
 * workgroup, a tile of dequantized blocks in shared memory, plain integer /
 * float FMA; no cooperative-matrix path). */
#include "backend/vulkan/vk.h"
#include "backend/backend_vk.h"
#include "base/util.h"
#include "kernels/types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static vk_be *VB(rp_backend *be) {
    return (vk_be *)be;
}

static vk_alloc *BA(rp_bx x) {
    return &((vk_buf *)x.buf)->a;
}

static void disp(vk_be *v, rp_bop op) {
    v->base.stats.dispatches[op]++;
}

/* a window over [lo, hi) bytes of an activation buffer, relative to x */
static vk_bind XW(const vk_be *v, rp_bx x, size_t lo, size_t hi) {
    return vk_window(v, BA(x), x.off + lo, x.off + hi);
}

/* elements a window may span */
static size_t wmax_elems(const vk_be *v, size_t elem_bytes) {
    return (size_t)(vk_window_max(v) / elem_bytes);
}

/* tokens of stride elements per window */
static int tok_chunk(const vk_be *v, size_t stride_elems, int n) {
    size_t c = wmax_elems(v, 4) / (stride_elems ? stride_elems : 1);
    if (c < 1) c = 1;
    return (int)RP_MIN((size_t)n, c);
}

/* ops need no barrier of their own: dispatches and copies put one in on a
 * hazard */
static bool op_begin(vk_be *v) {
    return vk_begin(v);
}

static vk_weight *weight_of(vk_be *v, const rp_tensor *t) {
    vk_weight *w = rp_ptrmap_get(&v->weights, t->data);
    if (!w)
        vk_latch(v, rp_fail(RP_ERR_INTERNAL, "vulkan: tensor '%s' was never uploaded", t->name));
    return w;
}

/* ---- memory ------------------------------------------------------------------ */

static bool type_runs(const vk_be *v, int type) {
    return type >= 0 && type < RP_TYPE_COUNT && v->sh.mul_mv[type] >= 0 &&
           v->sh.get_rows[type] >= 0;
}

static rp_status vk_upload(rp_backend *be, const rp_tensor *t) {
    vk_be *v = VB(be);
    vk_weight *old = rp_ptrmap_get(&v->weights, t->data);
    const int64_t rows = t->row_bytes ? (int64_t)(t->nbytes / t->row_bytes) : 0;
    if (old) {
        if (old->type != t->type || old->ne0 != t->ne[0] || old->rows != rows)
            return rp_fail(RP_ERR_INVALID_ARG,
                           "vulkan: tensor '%s' shares its bytes with a tensor of another shape",
                           t->name);
        return RP_OK;
    }
    if (!type_runs(v, t->type))
        return rp_fail(RP_ERR_UNSUPPORTED, "tensor '%s': type %s has no Vulkan kernels", t->name,
                       rp_type_name(t->type) ? rp_type_name(t->type) : "?");
    if (rows < 1 || t->row_bytes * (size_t)rows != t->nbytes)
        return rp_fail(RP_ERR_INVALID_ARG, "vulkan: tensor '%s' is not whole rows", t->name);
    const VkDeviceSize part_max = v->max_part - 256;
    if (t->row_bytes > part_max || t->row_bytes > vk_window_max(v))
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "tensor '%s': a row of %zu bytes exceeds what %s binds at once", t->name,
                       t->row_bytes, v->props.deviceName);
    const int64_t part_rows = (int64_t)(part_max / t->row_bytes);
    vk_weight *w = rp_calloc(1, sizeof *w, "vulkan weight");
    if (!w) return RP_ERR_NOMEM;
    w->type = t->type;
    w->ne0 = t->ne[0];
    w->rows = rows;
    w->row_bytes = t->row_bytes;
    w->n_parts = (int)((rows + part_rows - 1) / part_rows);
    w->parts = rp_calloc((size_t)w->n_parts, sizeof *w->parts, "vulkan weight parts");
    rp_status s = w->parts ? RP_OK : RP_ERR_NOMEM;
    for (int i = 0; i < w->n_parts && !s; i++) {
        vk_part *p = &w->parts[i];
        p->row0 = (int64_t)i * part_rows;
        p->rows = RP_MIN(part_rows, rows - p->row0);
        const size_t bytes = (size_t)p->rows * t->row_bytes;
        /* 16 spare bytes: shaders load whole words past a row's last byte */
        if (!(s = vk_mem_alloc(v, bytes + 16, false, &p->a)))
            s = vk_upload_now(v, &p->a, 0, (const char *)t->data + (size_t)p->row0 * t->row_bytes,
                              bytes);
    }
    if (!s && v->n_wlist == v->cap_wlist) {
        int cap = v->cap_wlist ? 2 * v->cap_wlist : 64;
        vk_weight **p = rp_realloc(v->wlist, (size_t)cap * sizeof *p, "vulkan weights");
        if (p) {
            v->wlist = p;
            v->cap_wlist = cap;
        } else {
            s = RP_ERR_NOMEM;
        }
    }
    if (!s) s = rp_ptrmap_put(&v->weights, t->data, w);
    if (s) {
        for (int i = 0; w->parts && i < w->n_parts; i++) vk_mem_free(v, &w->parts[i].a);
        free(w->parts);
        free(w);
        return rp_fail_prefix(s, "uploading tensor '%s'", t->name);
    }
    v->wlist[v->n_wlist++] = w;
    be->stats.weight_bytes += t->nbytes;
    be->stats.n_weights++;
    return RP_OK;
}

static void vk_forget(rp_backend *be, const rp_tensor *t) {
    vk_be *v = VB(be);
    vk_weight *w = rp_ptrmap_del(&v->weights, t->data);
    if (!w) return;
    for (int i = 0; i < v->n_wlist; i++)
        if (v->wlist[i] == w) {
            v->wlist[i] = v->wlist[--v->n_wlist];
            break;
        }
    be->stats.weight_bytes -= w->row_bytes * (uint64_t)w->rows;
    be->stats.n_weights--;
    for (int i = 0; i < w->n_parts; i++) vk_mem_free(v, &w->parts[i].a);
    free(w->parts);
    free(w);
}

static rp_status vk_buf_new(rp_backend *be, size_t bytes, const char *what, rp_bbuf **out) {
    vk_be *v = VB(be);
    vk_buf *b = rp_calloc(1, sizeof *b, what);
    if (!b) return RP_ERR_NOMEM;
    rp_status s = vk_mem_alloc(v, bytes, false, &b->a);
    if (s) {
        free(b);
        return rp_fail_prefix(s, "%s", what);
    }
    b->base.size = bytes;
    be->stats.buf_bytes += bytes;
    *out = &b->base;
    return RP_OK;
}

static void vk_buf_free(rp_backend *be, rp_bbuf *bb) {
    vk_be *v = VB(be);
    vk_buf *b = (vk_buf *)bb;
    be->stats.buf_bytes -= b->base.size;
    vk_mem_free(v, &b->a);
    free(b);
}

static void kv_release(vk_be *v, vk_kv *kv) {
    for (int s = 0; s < kv->base.d.n_seq; s++) {
        if (kv->k) vk_mem_free(v, &kv->k[s]);
        if (kv->v) vk_mem_free(v, &kv->v[s]);
    }
    free(kv->k);
    free(kv->v);
    free(kv);
}

static rp_status vk_kv_new(rp_backend *be, const rp_bkv_desc *d, rp_bkv **out) {
    vk_be *v = VB(be);
    if ((d->type_k == RP_TYPE_F16 && d->head_dim_k % 2) ||
        (d->type_v == RP_TYPE_F16 && d->head_dim_v % 2))
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "vulkan: an F16 KV cache needs even head dims (this one has %d / %d)",
                       d->head_dim_k, d->head_dim_v);
    if (d->head_dim_k > 256 || d->head_dim_v > 256)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "vulkan: attention supports head dims up to 256 (this cache has %d / %d)",
                       d->head_dim_k, d->head_dim_v);
    const size_t pk = rp_bkv_seq_bytes(d, false), pv = rp_bkv_seq_bytes(d, true);
    const size_t head_k = pk / (size_t)d->n_head_kv, head_v = pv / (size_t)d->n_head_kv;
    if (head_k > vk_window_max(v) || head_v > vk_window_max(v))
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "vulkan: one KV head of %d cells (%zu bytes) exceeds what %s binds at once",
                       d->cap, RP_MAX(head_k, head_v), v->props.deviceName);
    vk_kv *kv = rp_calloc(1, sizeof *kv, "vulkan KV cache");
    if (!kv) return RP_ERR_NOMEM;
    kv->base.d = *d;
    kv->k = rp_calloc((size_t)d->n_seq, sizeof *kv->k, "vulkan KV cache");
    kv->v = rp_calloc((size_t)d->n_seq, sizeof *kv->v, "vulkan KV cache");
    rp_status s = kv->k && kv->v ? RP_OK : RP_ERR_NOMEM;
    for (int i = 0; i < d->n_seq && !s; i++)
        if (!(s = vk_mem_alloc(v, pk, false, &kv->k[i]))) s = vk_mem_alloc(v, pv, false, &kv->v[i]);
    if (s) {
        kv_release(v, kv);
        return rp_fail_prefix(s, "vulkan KV cache of %d sequences", d->n_seq);
    }
    be->stats.kv_bytes += (uint64_t)(pk + pv) * (uint64_t)d->n_seq;
    *out = &kv->base;
    return RP_OK;
}

static void vk_kv_free(rp_backend *be, rp_bkv *bkv) {
    const rp_bkv_desc *d = &bkv->d;
    be->stats.kv_bytes -=
        (uint64_t)(rp_bkv_seq_bytes(d, false) + rp_bkv_seq_bytes(d, true)) * (uint64_t)d->n_seq;
    kv_release(VB(be), (vk_kv *)bkv);
}

/* ---- transfers ------------------------------------------------------------------ */

static void vk_write(rp_backend *be, rp_bx dst, const void *src, size_t bytes) {
    vk_be *v = VB(be);
    vk_alloc a;
    if (!op_begin(v) || !vk_upload_bytes(v, src, bytes, NULL, &a)) return;
    VkBufferCopy c = {a.off, BA(dst)->off + dst.off, bytes};
    vk_copy(v, a.chunk->buf, BA(dst)->chunk->buf, &c, 1);
    disp(v, RP_BOP_TRANSFER);
}

static void vk_read(rp_backend *be, void *dst, rp_bx src, size_t bytes) {
    vk_be *v = VB(be);
    vk_alloc a;
    if (!op_begin(v) || !vk_download(v, dst, bytes, &a)) return;
    VkBufferCopy c = {BA(src)->off + src.off, a.off, bytes};
    vk_copy(v, BA(src)->chunk->buf, a.chunk->buf, &c, 1);
    disp(v, RP_BOP_TRANSFER);
}

static void vk_copy_op(rp_backend *be, rp_bx dst, rp_bx src, size_t bytes) {
    vk_be *v = VB(be);
    if (!op_begin(v)) return;
    const vk_alloc *da = BA(dst), *sa = BA(src);
    const VkDeviceSize d0 = da->off + dst.off, s0 = sa->off + src.off;
    disp(v, RP_BOP_TRANSFER);
    if (da->chunk != sa->chunk || d0 + bytes <= s0 || s0 + bytes <= d0) {
        VkBufferCopy c = {s0, d0, bytes};
        vk_copy(v, sa->chunk->buf, da->chunk->buf, &c, 1);
        return;
    }
    if (d0 == s0) return;
    /* overlapping: through scratch */
    vk_buf *t = vk_scratch(v, VK_SCR_GATHER, bytes);
    if (!t) return;
    VkBufferCopy c1 = {s0, t->a.off, bytes}, c2 = {t->a.off, d0, bytes};
    vk_copy(v, sa->chunk->buf, t->a.chunk->buf, &c1, 1);
    vk_copy(v, t->a.chunk->buf, da->chunk->buf, &c2, 1);
    disp(v, RP_BOP_TRANSFER);
}

static void vk_kv_read(rp_backend *be, const rp_bkv *bkv, int seq, void *k, void *v_dst) {
    vk_be *v = VB(be);
    const vk_kv *kv = (const vk_kv *)bkv;
    if (!op_begin(v)) return;
    for (int j = 0; j < 2; j++) {
        void *dst = j ? v_dst : k;
        const vk_alloc *src = j ? &kv->v[seq] : &kv->k[seq];
        if (!dst) continue;
        const size_t bytes = rp_bkv_seq_bytes(&bkv->d, j == 1);
        vk_alloc a;
        if (!vk_download(v, dst, bytes, &a)) return;
        VkBufferCopy c = {src->off, a.off, bytes};
        vk_copy(v, src->chunk->buf, a.chunk->buf, &c, 1);
        disp(v, RP_BOP_TRANSFER);
    }
}

static void vk_gather(rp_backend *be, rp_bx dst, rp_bx src, const int32_t *rows, int n, int width) {
    vk_be *v = VB(be);
    if (!op_begin(v)) return;
    const size_t rb = (size_t)width * 4;
    VkBufferCopy *c = rp_malloc(sizeof *c * (size_t)n, "vulkan gather");
    if (!c) {
        vk_latch(v, RP_ERR_NOMEM);
        return;
    }
    const vk_alloc *da = BA(dst), *sa = BA(src);
    const bool same = da->chunk == sa->chunk;
    vk_buf *t = same ? vk_scratch(v, VK_SCR_GATHER, (size_t)n * rb) : NULL;
    if (same && !t) {
        free(c);
        return;
    }
    const VkBuffer mid = same ? t->a.chunk->buf : da->chunk->buf;
    const VkDeviceSize mid0 = same ? t->a.off : da->off + dst.off;
    uint32_t nc = 0;
    for (int i = 0; i < n; i++) {
        const VkDeviceSize so = sa->off + src.off + (size_t)rows[i] * rb, dof = mid0 + i * rb;
        if (nc && c[nc - 1].srcOffset + c[nc - 1].size == so &&
            c[nc - 1].dstOffset + c[nc - 1].size == dof)
            c[nc - 1].size += rb; /* runs of consecutive rows in one region */
        else
            c[nc++] = (VkBufferCopy){so, dof, rb};
    }
    vk_copy(v, sa->chunk->buf, mid, c, nc);
    disp(v, RP_BOP_TRANSFER);
    if (same) {
        VkBufferCopy back = {t->a.off, da->off + dst.off, (size_t)n * rb};
        vk_copy(v, t->a.chunk->buf, da->chunk->buf, &back, 1);
        disp(v, RP_BOP_TRANSFER);
    }
    free(c);
}

/* ---- embedding rows ------------------------------------------------------------------ */

typedef struct pc_get_rows {
    uint32_t ne0, row_bytes, w_off, r0, nr, ids_off, dst_off, n_tok;
} pc_get_rows;

static void vk_get_rows(rp_backend *be, rp_bx dst, const rp_tensor *t, const int32_t *rows, int n) {
    vk_be *v = VB(be);
    vk_weight *w = op_begin(v) ? weight_of(v, t) : NULL;
    vk_bind ib;
    if (!w || !vk_upload_bytes(v, rows, (size_t)n * 4, &ib, NULL)) return;
    const uint32_t WG = 64, units = (uint32_t)((w->ne0 + 31) / 32);
    const int64_t wrows = (int64_t)(vk_window_max(v) / w->row_bytes);
    const int tc = RP_MIN(tok_chunk(v, (size_t)w->ne0, n), (int)v->max_groups[1]);
    const uint32_t spec[1] = {WG};
    for (int pi = 0; pi < w->n_parts; pi++) {
        const vk_part *p = &w->parts[pi];
        for (int64_t r0 = 0; r0 < p->rows; r0 += wrows) {
            const int64_t nr = RP_MIN(wrows, p->rows - r0);
            /* only windows holding some of the rows asked for */
            bool any = false;
            for (int i = 0; i < n && !any; i++)
                any = rows[i] >= p->row0 + r0 && rows[i] < p->row0 + r0 + nr;
            if (!any) continue;
            vk_bind b[3];
            b[0] = vk_window(v, &p->a, (size_t)r0 * w->row_bytes, (size_t)(r0 + nr) * w->row_bytes);
            b[1] = ib;
            for (int t0 = 0; t0 < n; t0 += tc) {
                const int nt = RP_MIN(tc, n - t0);
                b[2] = XW(v, dst, (size_t)t0 * (size_t)w->ne0 * 4,
                          (size_t)(t0 + nt) * (size_t)w->ne0 * 4);
                pc_get_rows pc = {(uint32_t)w->ne0, (uint32_t)w->row_bytes,
                                  b[0].shift,       (uint32_t)(p->row0 + r0),
                                  (uint32_t)nr,     ib.shift / 4 + (uint32_t)t0,
                                  b[2].shift / 4,   (uint32_t)nt};
                vk_dispatch(v, v->sh.get_rows[w->type], spec, 1, b, 3, 1u << 2, &pc, sizeof pc,
                            (units + WG - 1) / WG, (uint32_t)nt, 1);
                disp(v, RP_BOP_GET_ROWS);
            }
        }
    }
}

/* ---- norms ------------------------------------------------------------------------ */

typedef struct pc_norm {
    uint32_t n, rpt, x_stride, y_stride, x_off, y_off, w_off, b_off, ids_off, flags;
    float eps;
    uint32_t n_rows, x_row0;
} pc_norm;

enum { NORM_W = 1, NORM_B = 2, NORM_LAYER = 4, NORM_IDS = 8 };

static vk_bind weight_window(vk_be *v, const rp_tensor *t, int n, bool *ok) {
    vk_weight *w = weight_of(v, t);
    vk_bind b = {0};
    *ok = w != NULL;
    if (w) b = vk_window(v, &w->parts[0].a, 0, (size_t)n * 4);
    return b;
}

/* rows of n elements: token t's row h at x + t * x_stride + h * n (h < rpt);
 * x token ids[t] when ids is given (host), else t */
static void norm_rows(vk_be *v, bool layer, rp_bx y, int y_stride, rp_bx x, int x_stride,
                      const int32_t *ids, const rp_tensor *w, const rp_tensor *b, int n, int rpt,
                      int n_tok, float eps) {
    vk_bind bw = {0}, bb = {0}, bi = {0};
    bool ok = true;
    if (w) bw = weight_window(v, w, n, &ok);
    if (ok && b) bb = weight_window(v, b, n, &ok);
    if (!ok || (ids && !vk_upload_bytes(v, ids, (size_t)n_tok * 4, &bi, NULL))) return;
    const uint32_t WG = n <= 512 ? 64 : 256, spec[1] = {WG};
    const int shader = v->subgroups ? v->sh.norm_sg : v->sh.norm;
    /* tokens per dispatch: both windows within range, rows within the grid */
    int tc = RP_MIN(tok_chunk(v, (size_t)RP_MAX(x_stride, y_stride), n_tok),
                    (int)(v->max_groups[0] / (uint32_t)rpt));
    for (int t0 = 0; t0 < n_tok;) {
        int nt = RP_MIN(tc, n_tok - t0);
        int xr0 = ids ? ids[t0] : t0;
        /* the x rows this chunk reads must fit one window too */
        while (ids && nt > 1 &&
               (size_t)(ids[t0 + nt - 1] - xr0 + 1) * (size_t)x_stride > wmax_elems(v, 4))
            nt /= 2;
        const int xr1 = ids ? ids[t0 + nt - 1] + 1 : t0 + nt;
        vk_bind bd[5];
        bd[0] = XW(v, x, (size_t)xr0 * (size_t)x_stride * 4,
                   ((size_t)(xr1 - 1) * (size_t)x_stride + (size_t)rpt * (size_t)n) * 4);
        bd[1] = XW(v, y, (size_t)t0 * (size_t)y_stride * 4,
                   ((size_t)(t0 + nt - 1) * (size_t)y_stride + (size_t)rpt * (size_t)n) * 4);
        bd[2] = bw;
        bd[3] = bb;
        bd[4] = bi;
        pc_norm pc = {(uint32_t)n,
                      (uint32_t)rpt,
                      (uint32_t)x_stride,
                      (uint32_t)y_stride,
                      bd[0].shift / 4,
                      bd[1].shift / 4,
                      bw.shift / 4,
                      bb.shift / 4,
                      bi.shift / 4 + (uint32_t)t0,
                      (w ? NORM_W : 0) | (b ? NORM_B : 0) | (layer ? NORM_LAYER : 0) |
                          (ids ? NORM_IDS : 0),
                      eps,
                      (uint32_t)(nt * rpt),
                      (uint32_t)xr0};
        vk_dispatch(v, shader, spec, 1, bd, 5, 1u << 1, &pc, sizeof pc, (uint32_t)(nt * rpt), 1, 1);
        disp(v, RP_BOP_NORM);
        t0 += nt;
    }
}

static void vk_norm(rp_backend *be, rp_bnorm kind, rp_bx y, rp_bx x, const rp_tensor *w,
                    const rp_tensor *b, int n, int rows, float eps) {
    vk_be *v = VB(be);
    if (!op_begin(v)) return;
    norm_rows(v, kind == RP_BNORM_LAYER, y, n, x, n, NULL, w, b, n, 1, rows, eps);
}

static void vk_norm_heads(rp_backend *be, rp_bx x, const rp_tensor *w, int head_dim, int n_head,
                          int rows, int stride, float eps) {
    vk_be *v = VB(be);
    if (!op_begin(v)) return;
    norm_rows(v, false, x, stride, x, stride, NULL, w, NULL, head_dim, n_head, rows, eps);
}

/* ---- matrix products ------------------------------------------------------------------- */

typedef struct pc_quant {
    uint32_t ne0, n_tok, x_off, x_stride, y_off, y_stride;
} pc_quant;

typedef struct pc_mm {
    uint32_t ne0, nr, row_bytes, w_off, x_off, x_stride, y_off, y_stride, n_tok;
} pc_mm;

/* 32-bit words one token's activations take in a vec_dot_type */
static size_t act_words(int vdt, int64_t ne0) {
    switch (vdt) {
    case RP_TYPE_Q8_0:
        return (size_t)(ne0 / 4 + ne0 / 32);
    case RP_TYPE_Q8_1:
        return (size_t)(ne0 / 4 + 2 * (ne0 / 32));
    case RP_TYPE_Q8_K:
        return (size_t)(ne0 / 4 + ne0 / 256 + ne0 / 16);
    default:
        return (size_t)ne0;
    }
}

/* x [n_tok][ne0] F32 -> the vdt encoding in the ACT scratch */
static vk_buf *quantize_act(vk_be *v, int vdt, rp_bx x, int64_t ne0, int n_tok) {
    const size_t xs = act_words(vdt, ne0);
    vk_buf *q = vk_scratch(v, VK_SCR_ACT, (size_t)n_tok * xs * 4);
    if (!q) return NULL;
    const int shader = v->sh.quant[vdt];
    const uint32_t WG = 64, spec[1] = {WG};
    const uint32_t nblk = (uint32_t)(ne0 / (vdt == RP_TYPE_Q8_K ? 256 : 32));
    const int tc = RP_MIN(tok_chunk(v, RP_MAX((size_t)ne0, xs), n_tok), (int)v->max_groups[1]);
    for (int t0 = 0; t0 < n_tok; t0 += tc) {
        const int nt = RP_MIN(tc, n_tok - t0);
        vk_bind b[2];
        b[0] = XW(v, x, (size_t)t0 * (size_t)ne0 * 4, (size_t)(t0 + nt) * (size_t)ne0 * 4);
        b[1] = vk_window(v, &q->a, (size_t)t0 * xs * 4, (size_t)(t0 + nt) * xs * 4);
        pc_quant pc = {(uint32_t)ne0, (uint32_t)nt,   b[0].shift / 4,
                       (uint32_t)ne0, b[1].shift / 4, (uint32_t)xs};
        vk_dispatch(v, shader, spec, 1, b, 2, 1u << 1, &pc, sizeof pc, (nblk + WG - 1) / WG,
                    (uint32_t)nt, 1);
        disp(v, RP_BOP_MATMUL);
    }
    return q;
}

/* y[n_tok][w->rows] = x . w^T with x already in the weight's vec_dot_type
 * (xa: the words of the activations, xs words per token) */
static void mm_dispatch(vk_be *v, const vk_weight *w, const vk_alloc *xa, size_t x0, size_t xs,
                        rp_bx y, int n_tok) {
    const bool mv = n_tok <= 8;
    /* two shape classes of the vector kernel: one token, up to 8 */
    const uint32_t NT = n_tok <= 1 ? 1 : 8, NR = 2;
    const int shader = mv ? (v->subgroups ? v->sh.mul_mv_sg[w->type] : v->sh.mul_mv[w->type])
                          : v->sh.mul_mm[w->type];
    const uint32_t spec_mv[3] = {64, NR, NT}, spec_mm[1] = {256};
    const uint32_t rows_wg = mv ? NR : 32, toks_wg = mv ? NT : 32;
    const size_t ldy = (size_t)w->rows;
    int64_t wrows = (int64_t)(vk_window_max(v) / w->row_bytes);
    wrows = RP_MIN(wrows, (int64_t)v->max_groups[0] * rows_wg);
    int tc = tok_chunk(v, RP_MAX(xs, ldy), n_tok);
    tc = (int)RP_MIN((size_t)tc, (size_t)v->max_groups[1] * toks_wg);
    for (int pi = 0; pi < w->n_parts; pi++) {
        const vk_part *p = &w->parts[pi];
        for (int64_t r0 = 0; r0 < p->rows; r0 += wrows) {
            const int64_t nr = RP_MIN(wrows, p->rows - r0);
            vk_bind b[3];
            b[0] = vk_window(v, &p->a, (size_t)r0 * w->row_bytes, (size_t)(r0 + nr) * w->row_bytes);
            for (int t0 = 0; t0 < n_tok; t0 += tc) {
                const int nt = RP_MIN(tc, n_tok - t0);
                b[1] = vk_window(v, xa, x0 + (size_t)t0 * xs * 4, x0 + (size_t)(t0 + nt) * xs * 4);
                b[2] = XW(v, y, (size_t)t0 * ldy * 4, (size_t)(t0 + nt) * ldy * 4);
                pc_mm pc = {(uint32_t)w->ne0,
                            (uint32_t)nr,
                            (uint32_t)w->row_bytes,
                            b[0].shift,
                            b[1].shift / 4,
                            (uint32_t)xs,
                            b[2].shift / 4 + (uint32_t)(p->row0 + r0),
                            (uint32_t)ldy,
                            (uint32_t)nt};
                vk_dispatch(v, shader, mv ? spec_mv : spec_mm, mv ? 3 : 1, b, 3, 1u << 2, &pc,
                            sizeof pc, (uint32_t)((nr + rows_wg - 1) / rows_wg),
                            (uint32_t)((nt + toks_wg - 1) / toks_wg), 1);
                disp(v, RP_BOP_MATMUL);
            }
        }
    }
}

static void matmul_rec(vk_be *v, int n, const rp_tensor *const *t, const rp_bx *y, rp_bx x,
                       int n_tok) {
    vk_weight *w[RP_BE_MAX_N];
    for (int i = 0; i < n; i++)
        if (!(w[i] = weight_of(v, t[i]))) return;
    bool done[RP_BE_MAX_N] = {false};
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        const int vdt = rp_type_get(w[i]->type)->vec_dot_type;
        const vk_alloc *xa = BA(x);
        size_t x0 = x.off;
        if (vdt != RP_TYPE_F32) {
            vk_buf *q = quantize_act(v, vdt, x, w[i]->ne0, n_tok);
            if (!q) return;
            xa = &q->a;
            x0 = 0;
        }
        for (int j = i; j < n; j++)
            if (!done[j] && rp_type_get(w[j]->type)->vec_dot_type == vdt) {
                mm_dispatch(v, w[j], xa, x0, act_words(vdt, w[j]->ne0), y[j], n_tok);
                done[j] = true;
            }
    }
}

static void vk_matmul(rp_backend *be, int n, const rp_tensor *const *w, const rp_bx *y, rp_bx x,
                      int n_tok) {
    vk_be *v = VB(be);
    if (!op_begin(v)) return;
    matmul_rec(v, n, w, y, x, n_tok);
}

/* ---- rotary embeddings ------------------------------------------------------------------ */

typedef struct pc_rope {
    uint32_t n_tok, stride, n_head, head_dim, n_rot, neox, x_off, cs_off;
} pc_rope;

static void vk_rope_cache(rp_backend *be, rp_bx cs, const int32_t *pos, int n_tok,
                          const rp_rope_params *p) {
    vk_be *v = VB(be);
    /* the table is the CPU's (rp_rope_cache), computed here and uploaded */
    float *tab = rp_malloc((size_t)n_tok * (size_t)p->n_rot * sizeof(float), "rope table");
    if (!tab) {
        vk_latch(v, RP_ERR_NOMEM);
        return;
    }
    rp_rope_cache(tab, pos, n_tok, p);
    vk_write(be, cs, tab, (size_t)n_tok * (size_t)p->n_rot * sizeof(float));
    free(tab);
}

static void vk_rope(rp_backend *be, rp_bx x, int n_tok, int stride, int n_head, int head_dim,
                    int n_rot, rp_bx cs, rp_rope_style style) {
    vk_be *v = VB(be);
    if (!op_begin(v)) return;
    const uint32_t WG = 64, spec[1] = {WG}, pairs = (uint32_t)(n_head * (n_rot / 2));
    const int tc = RP_MIN(tok_chunk(v, (size_t)stride, n_tok), (int)v->max_groups[1]);
    for (int t0 = 0; t0 < n_tok; t0 += tc) {
        const int nt = RP_MIN(tc, n_tok - t0);
        vk_bind b[2];
        b[0] = XW(v, x, (size_t)t0 * (size_t)stride * 4,
                  ((size_t)(t0 + nt - 1) * (size_t)stride + (size_t)n_head * (size_t)head_dim) * 4);
        b[1] = XW(v, cs, (size_t)t0 * (size_t)n_rot * 4, (size_t)(t0 + nt) * (size_t)n_rot * 4);
        pc_rope pc = {(uint32_t)nt,    (uint32_t)stride,      (uint32_t)n_head, (uint32_t)head_dim,
                      (uint32_t)n_rot, style == RP_ROPE_NEOX, b[0].shift / 4,   b[1].shift / 4};
        vk_dispatch(v, v->sh.rope, spec, 1, b, 2, 1u << 0, &pc, sizeof pc, (pairs + WG - 1) / WG,
                    (uint32_t)nt, 1);
        disp(v, RP_BOP_ROPE);
    }
}

/* ---- KV cache and attention ------------------------------------------------------------- */

/* The batch tokens of each sequence: list[] grouped by sequence, first[s] ..
 * first[s + 1] the tokens of sequence s (ascending). */
typedef struct seq_lists {
    int32_t *list;
    int *first; /* [n_seq + 1] */
} seq_lists;

static bool seq_lists_make(vk_be *v, int n_seq, const int32_t *seq, int n_tok, seq_lists *L) {
    L->list = rp_malloc((size_t)n_tok * sizeof *L->list, "vulkan token lists");
    L->first = rp_calloc((size_t)n_seq + 1, sizeof *L->first, "vulkan token lists");
    if (!L->list || !L->first) {
        free(L->list);
        free(L->first);
        vk_latch(v, RP_ERR_NOMEM);
        return false;
    }
    for (int t = 0; t < n_tok; t++) L->first[seq[t] + 1]++;
    for (int s = 0; s < n_seq; s++) L->first[s + 1] += L->first[s];
    int *fill = rp_malloc((size_t)n_seq * sizeof *fill, "vulkan token lists");
    if (!fill) {
        free(L->list);
        free(L->first);
        vk_latch(v, RP_ERR_NOMEM);
        return false;
    }
    memcpy(fill, L->first, (size_t)n_seq * sizeof *fill);
    for (int t = 0; t < n_tok; t++) L->list[fill[seq[t]]++] = t;
    free(fill);
    return true;
}

static void seq_lists_free(seq_lists *L) {
    free(L->list);
    free(L->first);
}

/* The tokens list[a .. *b) whose rows (stride elements) fit one window. */
static int list_piece(const vk_be *v, const int32_t *list, int a, int end, size_t stride) {
    int b = a + 1;
    const size_t lim = wmax_elems(v, 4);
    while (b < end && (size_t)(list[b] - list[a] + 1) * stride <= lim) b++;
    return b;
}

typedef struct pc_kv_write {
    uint32_t n_list, nh, dk, dv, k_stride, v_stride, k_off, v_off, kc_off, vc_off, cap, flags,
        list_off, pos_off, t_base, h0;
} pc_kv_write;

static void vk_kv_write(rp_backend *be, rp_bkv *bkv, int n_tok, const int32_t *pos,
                        const int32_t *seq, rp_bx k, int k_stride, rp_bx vx, int v_stride) {
    vk_be *v = VB(be);
    const vk_kv *kv = (const vk_kv *)bkv;
    const rp_bkv_desc *d = &bkv->d;
    seq_lists L;
    vk_bind bl, bp;
    if (!op_begin(v) || !seq_lists_make(v, d->n_seq, seq, n_tok, &L)) return;
    if (vk_upload_bytes(v, L.list, (size_t)n_tok * 4, &bl, NULL) &&
        vk_upload_bytes(v, pos, (size_t)n_tok * 4, &bp, NULL)) {
        const size_t ek = d->type_k == RP_TYPE_F16 ? 2 : 4, ev = d->type_v == RP_TYPE_F16 ? 2 : 4;
        const size_t hk = (size_t)d->cap * (size_t)d->head_dim_k * ek,
                     hv = (size_t)d->cap * (size_t)d->head_dim_v * ev;
        const int hc = (int)RP_MIN((size_t)d->n_head_kv,
                                   (size_t)vk_window_max(v) / RP_MAX(hk, hv)); /* heads/window */
        const uint32_t WG = 64, spec[1] = {WG};
        const size_t stride = (size_t)RP_MAX(k_stride, v_stride);
        for (int s = 0; s < d->n_seq; s++)
            for (int a = L.first[s]; a < L.first[s + 1];) {
                const int b = RP_MIN(list_piece(v, L.list, a, L.first[s + 1], stride),
                                     a + (int)v->max_groups[1]);
                const int t_lo = L.list[a], t_hi = L.list[b - 1] + 1;
                for (int h0 = 0; h0 < d->n_head_kv; h0 += hc) {
                    const int nh = RP_MIN(hc, d->n_head_kv - h0);
                    vk_bind bd[6];
                    bd[0] = XW(v, k, (size_t)t_lo * (size_t)k_stride * 4,
                               ((size_t)(t_hi - 1) * (size_t)k_stride +
                                (size_t)d->n_head_kv * (size_t)d->head_dim_k) *
                                   4);
                    bd[1] = XW(v, vx, (size_t)t_lo * (size_t)v_stride * 4,
                               ((size_t)(t_hi - 1) * (size_t)v_stride +
                                (size_t)d->n_head_kv * (size_t)d->head_dim_v) *
                                   4);
                    bd[2] = vk_window(v, &kv->k[s], (size_t)h0 * hk, (size_t)(h0 + nh) * hk);
                    bd[3] = vk_window(v, &kv->v[s], (size_t)h0 * hv, (size_t)(h0 + nh) * hv);
                    bd[4] = bl;
                    bd[5] = bp;
                    pc_kv_write pc = {(uint32_t)(b - a),
                                      (uint32_t)nh,
                                      (uint32_t)d->head_dim_k,
                                      (uint32_t)d->head_dim_v,
                                      (uint32_t)k_stride,
                                      (uint32_t)v_stride,
                                      bd[0].shift / 4,
                                      bd[1].shift / 4,
                                      bd[2].shift / (uint32_t)ek,
                                      bd[3].shift / (uint32_t)ev,
                                      (uint32_t)d->cap,
                                      (d->type_k == RP_TYPE_F16 ? 1u : 0u) |
                                          (d->type_v == RP_TYPE_F16 ? 2u : 0u),
                                      bl.shift / 4 + (uint32_t)a,
                                      bp.shift / 4,
                                      (uint32_t)t_lo,
                                      (uint32_t)h0};
                    const uint32_t pairs =
                        (uint32_t)(nh * RP_MAX(d->head_dim_k, d->head_dim_v) / 2 + 1);
                    vk_dispatch(v, v->sh.kv_write, spec, 1, bd, 6, (1u << 2) | (1u << 3), &pc,
                                sizeof pc, (pairs + WG - 1) / WG, (uint32_t)(b - a), 1);
                    disp(v, RP_BOP_KV_WRITE);
                }
                a = b;
            }
    }
    seq_lists_free(&L);
}

typedef struct pc_attn {
    uint32_t n_list, q_stride, out_stride, q_off, out_off, dk, dv, group, h0, cap, kc_off, vc_off;
    float scale, softcap;
    uint32_t window, list_off, pos_off, t_base;
} pc_attn;

static void vk_attention(rp_backend *be, const rp_battn *a) {
    vk_be *v = VB(be);
    const vk_kv *kv = (const vk_kv *)a->kv;
    const rp_bkv_desc *d = &a->kv->d;
    seq_lists L;
    vk_bind bl, bp;
    if (!op_begin(v) || !seq_lists_make(v, d->n_seq, a->seq, a->n_tok, &L)) return;
    const int kf = d->type_k == RP_TYPE_F16, vf = d->type_v == RP_TYPE_F16;
    const int shader = v->subgroups ? v->sh.attn_sg[kf][vf] : v->sh.attn[kf][vf];
    if (vk_upload_bytes(v, L.list, (size_t)a->n_tok * 4, &bl, NULL) &&
        vk_upload_bytes(v, a->pos, (size_t)a->n_tok * 4, &bp, NULL)) {
        const size_t ek = kf ? 2 : 4, ev = vf ? 2 : 4;
        const size_t hk = (size_t)d->cap * (size_t)a->head_dim_k * ek,
                     hv = (size_t)d->cap * (size_t)a->head_dim_v * ev;
        const int group = a->n_head / a->n_head_kv;
        int hc = (int)RP_MIN((size_t)a->n_head_kv, (size_t)vk_window_max(v) / RP_MAX(hk, hv));
        hc = RP_MIN(hc, (int)(v->max_groups[1] / (uint32_t)group));
        const uint32_t WG = 64, spec[1] = {WG};
        const size_t stride = (size_t)RP_MAX(a->q_stride, a->out_stride);
        for (int s = 0; s < d->n_seq; s++)
            for (int i = L.first[s]; i < L.first[s + 1];) {
                const int j = RP_MIN(list_piece(v, L.list, i, L.first[s + 1], stride),
                                     i + (int)v->max_groups[0]);
                const int t_lo = L.list[i], t_hi = L.list[j - 1] + 1;
                for (int g0 = 0; g0 < a->n_head_kv; g0 += hc) {
                    const int ng = RP_MIN(hc, a->n_head_kv - g0);
                    vk_bind bd[6];
                    bd[0] = XW(v, a->q, (size_t)t_lo * (size_t)a->q_stride * 4,
                               ((size_t)(t_hi - 1) * (size_t)a->q_stride +
                                (size_t)a->n_head * (size_t)a->head_dim_k) *
                                   4);
                    bd[1] = XW(v, a->out, (size_t)t_lo * (size_t)a->out_stride * 4,
                               ((size_t)(t_hi - 1) * (size_t)a->out_stride +
                                (size_t)a->n_head * (size_t)a->head_dim_v) *
                                   4);
                    bd[2] = vk_window(v, &kv->k[s], (size_t)g0 * hk, (size_t)(g0 + ng) * hk);
                    bd[3] = vk_window(v, &kv->v[s], (size_t)g0 * hv, (size_t)(g0 + ng) * hv);
                    bd[4] = bl;
                    bd[5] = bp;
                    pc_attn pc = {(uint32_t)(j - i),
                                  (uint32_t)a->q_stride,
                                  (uint32_t)a->out_stride,
                                  bd[0].shift / 4,
                                  bd[1].shift / 4,
                                  (uint32_t)a->head_dim_k,
                                  (uint32_t)a->head_dim_v,
                                  (uint32_t)group,
                                  (uint32_t)(g0 * group),
                                  (uint32_t)d->cap,
                                  bd[2].shift / (uint32_t)ek,
                                  bd[3].shift / (uint32_t)ev,
                                  a->scale,
                                  a->softcap,
                                  (uint32_t)RP_MAX(a->window, 0),
                                  bl.shift / 4 + (uint32_t)i,
                                  bp.shift / 4,
                                  (uint32_t)t_lo};
                    vk_dispatch(v, shader, spec, 1, bd, 6, 1u << 1, &pc, sizeof pc,
                                (uint32_t)(j - i), (uint32_t)(ng * group), 1);
                    disp(v, RP_BOP_ATTN);
                }
                i = j;
            }
    }
    seq_lists_free(&L);
}

/* ---- element-wise ---------------------------------------------------------------------- */

enum {
    EW_ADD = 0,
    EW_MUL,
    EW_SCALE,
    EW_SOFTCAP,
    EW_SILU,
    EW_GELU_TANH,
    EW_GELU_ERF,
    EW_GELU_TANH_F16,
    EW_ADD_ROW
};

typedef struct pc_ew {
    uint32_t op, n, y_off, x_off, width, phase;
    float s;
} pc_ew;

/* y op= x over n elements; x is a buffer (xb), a bias row (xw, width), or none */
static void eltwise(vk_be *v, uint32_t op, rp_bx y, const rp_bx *xb, const vk_alloc *xw, int width,
                    float s, int n) {
    const uint32_t WG = 256, spec[1] = {WG};
    const size_t chunk = RP_MIN(wmax_elems(v, 4), (size_t)v->max_groups[0] * WG * 4);
    for (size_t i0 = 0; i0 < (size_t)n; i0 += chunk) {
        const size_t cn = RP_MIN(chunk, (size_t)n - i0);
        vk_bind b[2] = {XW(v, y, i0 * 4, (i0 + cn) * 4), {0}};
        if (xb) b[1] = XW(v, *xb, i0 * 4, (i0 + cn) * 4);
        if (xw) b[1] = vk_window(v, xw, 0, (size_t)width * 4);
        pc_ew pc = {op,
                    (uint32_t)cn,
                    b[0].shift / 4,
                    b[1].buf ? b[1].shift / 4 : 0,
                    (uint32_t)(width > 0 ? width : 1),
                    width > 0 ? (uint32_t)(i0 % (size_t)width) : 0,
                    s};
        const size_t groups = (cn + (size_t)WG * 4 - 1) / ((size_t)WG * 4);
        vk_dispatch(v, v->sh.eltwise, spec, 1, b, 2, 1u << 0, &pc, sizeof pc, (uint32_t)groups, 1,
                    1);
        disp(v, RP_BOP_ELTWISE);
    }
}

static void vk_add(rp_backend *be, rp_bx y, rp_bx x, int n) {
    vk_be *v = VB(be);
    if (op_begin(v)) eltwise(v, EW_ADD, y, &x, NULL, 0, 0, n);
}

static void vk_add_row(rp_backend *be, rp_bx y, const rp_tensor *b, int width, int rows) {
    vk_be *v = VB(be);
    vk_weight *w = op_begin(v) ? weight_of(v, b) : NULL;
    if (w) eltwise(v, EW_ADD_ROW, y, NULL, &w->parts[0].a, width, 0, width * rows);
}

static void vk_mul(rp_backend *be, rp_bx y, rp_bx x, int n) {
    vk_be *v = VB(be);
    if (op_begin(v)) eltwise(v, EW_MUL, y, &x, NULL, 0, 0, n);
}

static void vk_scale(rp_backend *be, rp_bx y, float s, int n) {
    vk_be *v = VB(be);
    if (op_begin(v)) eltwise(v, EW_SCALE, y, NULL, NULL, 0, s, n);
}

static void vk_softcap(rp_backend *be, rp_bx y, float cap, int n) {
    vk_be *v = VB(be);
    if (op_begin(v)) eltwise(v, EW_SOFTCAP, y, NULL, NULL, 0, cap, n);
}

static void vk_act_mul(rp_backend *be, rp_bact act, rp_bx gate, rp_bx up, int n) {
    vk_be *v = VB(be);
    static const uint32_t ops[] = {[RP_BACT_SILU] = EW_SILU,
                                   [RP_BACT_GELU_TANH] = EW_GELU_TANH,
                                   [RP_BACT_GELU_ERF] = EW_GELU_ERF,
                                   [RP_BACT_GELU_TANH_F16] = EW_GELU_TANH_F16};
    if (op_begin(v)) eltwise(v, ops[act], gate, &up, NULL, 0, 0, n);
}

/* ---- output rows ----------------------------------------------------------------------- */

static void vk_output(rp_backend *be, const rp_bout *o) {
    vk_be *v = VB(be);
    if (!op_begin(v)) return;
    const size_t ne = (size_t)o->n_embd, nv = (size_t)o->w->ne[1];
    if (o->hidden) { /* the selected rows before the norm, straight to the host */
        vk_alloc a;
        if (!vk_download(v, o->hidden, (size_t)o->n_out * ne * 4, &a)) return;
        VkBufferCopy *c = rp_malloc(sizeof *c * (size_t)o->n_out, "vulkan output rows");
        if (!c) {
            vk_latch(v, RP_ERR_NOMEM);
            return;
        }
        for (int i = 0; i < o->n_out; i++)
            c[i] = (VkBufferCopy){BA(o->x)->off + o->x.off +
                                      (size_t)(o->rows ? o->rows[i] : i) * ne * 4,
                                  a.off + (size_t)i * ne * 4, ne * 4};
        vk_copy(v, BA(o->x)->chunk->buf, a.chunk->buf, c, (uint32_t)o->n_out);
        free(c);
        disp(v, RP_BOP_TRANSFER);
    }
    norm_rows(v, o->norm_b != NULL, o->tmp, o->n_embd, o->x, o->n_embd, o->rows, o->norm, o->norm_b,
              o->n_embd, 1, o->n_out, o->eps);
    vk_buf *lg = vk_scratch(v, VK_SCR_LOGITS, (size_t)o->n_out * nv * 4);
    if (!lg) return;
    rp_bx y = {&lg->base, 0};
    matmul_rec(v, 1, &o->w, &y, o->tmp, o->n_out);
    if (o->softcap > 0)
        eltwise(v, EW_SOFTCAP, y, NULL, NULL, 0, o->softcap, (int)((size_t)o->n_out * nv));
    vk_alloc a;
    if (!vk_download(v, o->logits, (size_t)o->n_out * nv * 4, &a)) return;
    VkBufferCopy c = {lg->a.off, a.off, (size_t)o->n_out * nv * 4};
    vk_copy(v, lg->a.chunk->buf, a.chunk->buf, &c, 1);
    disp(v, RP_BOP_OUTPUT);
}

static rp_status vk_sync_op(rp_backend *be) {
    return vk_sync(VB(be));
}

static void vk_free_be(rp_backend *be) {
    vk_be *v = VB(be);
    vk_device_close(v);
    free(v);
}

const rp_backend_ops rp_vk_ops = {
    .free = vk_free_be,
    .upload = vk_upload,
    .forget = vk_forget,
    .buf_new = vk_buf_new,
    .buf_free = vk_buf_free,
    .kv_new = vk_kv_new,
    .kv_free = vk_kv_free,
    .write = vk_write,
    .read = vk_read,
    .copy = vk_copy_op,
    .kv_read = vk_kv_read,
    .gather = vk_gather,
    .get_rows = vk_get_rows,
    .norm = vk_norm,
    .norm_heads = vk_norm_heads,
    .matmul = vk_matmul,
    .rope_cache = vk_rope_cache,
    .rope = vk_rope,
    .kv_write = vk_kv_write,
    .attention = vk_attention,
    .add = vk_add,
    .add_row = vk_add_row,
    .mul = vk_mul,
    .scale = vk_scale,
    .softcap = vk_softcap,
    .act_mul = vk_act_mul,
    .output = vk_output,
    .sync = vk_sync_op,
};

rp_status rp_backend_vk_new(int index, const rp_backend_params *p, rp_backend **out) {
    *out = NULL;
    static const rp_backend_params none = {0};
    vk_be *v = rp_calloc(1, sizeof *v, "vulkan backend");
    if (!v) return RP_ERR_NOMEM;
    v->base.ops = &rp_vk_ops;
    rp_status s = vk_device_open(v, index, p ? p : &none);
    if (s) {
        vk_device_close(v);
        free(v);
        return rp_fail_prefix(s, "device vulkan%d", index);
    }
    *out = &v->base;
    return RP_OK;
}
