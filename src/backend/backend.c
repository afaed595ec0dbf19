/* The calls a forward makes: each is counted (calls and the bytes the op
 * must read, the same estimate on every backend) and forwarded to the
 * backend's table (opening and listing backends by name: registry.c). */
#include "backend/backend.h"
#include "base/util.h"
#include "kernels/types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const bop_names[RP_BOP_COUNT] = {
    [RP_BOP_GET_ROWS] = "get_rows", [RP_BOP_NORM] = "norm",         [RP_BOP_MATMUL] = "matmul",
    [RP_BOP_ROPE] = "rope",         [RP_BOP_KV_WRITE] = "kv_write", [RP_BOP_ATTN] = "attention",
    [RP_BOP_ELTWISE] = "eltwise",   [RP_BOP_OUTPUT] = "output",     [RP_BOP_TRANSFER] = "transfer",
};

const char *rp_bop_name(rp_bop op) {
    return op >= 0 && op < RP_BOP_COUNT ? bop_names[op] : "?";
}

static void count(rp_backend *be, rp_bop op, uint64_t bytes) {
    be->stats.calls[op]++;
    be->stats.bytes[op] += bytes;
}

size_t rp_bkv_seq_bytes(const rp_bkv_desc *d, bool v) {
    const int type = v ? d->type_v : d->type_k;
    const size_t es = type == RP_TYPE_F16 ? 2 : 4;
    return (size_t)d->n_head_kv * (size_t)d->cap * (size_t)(v ? d->head_dim_v : d->head_dim_k) * es;
}

void rp_backend_free(rp_backend *be) {
    if (be) be->ops->free(be);
}

/* ---- memory ----------------------------------------------------------------- */

rp_status rp_be_upload(rp_backend *be, const rp_tensor *t) {
    return be->ops->upload(be, t);
}

void rp_be_forget(rp_backend *be, const rp_tensor *t) {
    if (t) be->ops->forget(be, t);
}

rp_status rp_be_buf_new(rp_backend *be, size_t bytes, const char *what, rp_bbuf **out) {
    *out = NULL;
    return be->ops->buf_new(be, bytes ? bytes : 4, what, out);
}

void rp_be_buf_free(rp_backend *be, rp_bbuf *b) {
    if (b) be->ops->buf_free(be, b);
}

rp_status rp_be_kv_new(rp_backend *be, const rp_bkv_desc *d, rp_bkv **out) {
    *out = NULL;
    if (d->n_seq < 1 || d->n_head_kv < 1 || d->cap < 1 || d->head_dim_k < 1 || d->head_dim_v < 1 ||
        (d->type_k != RP_TYPE_F32 && d->type_k != RP_TYPE_F16) ||
        (d->type_v != RP_TYPE_F32 && d->type_v != RP_TYPE_F16))
        return rp_fail(RP_ERR_INVALID_ARG,
                       "KV cache: %d sequences x %d heads x %d cells x %d/%d dims of %s/%s is "
                       "not a cache (F32 or F16 elements)",
                       d->n_seq, d->n_head_kv, d->cap, d->head_dim_k, d->head_dim_v,
                       rp_type_name(d->type_k) ? rp_type_name(d->type_k) : "?",
                       rp_type_name(d->type_v) ? rp_type_name(d->type_v) : "?");
    return be->ops->kv_new(be, d, out);
}

void rp_be_kv_free(rp_backend *be, rp_bkv *kv) {
    if (kv) be->ops->kv_free(be, kv);
}

/* ---- transfers ---------------------------------------------------------------- */

static void check_range(rp_bx x, size_t bytes) {
    RP_ASSERT(x.buf && x.off <= x.buf->size && bytes <= x.buf->size - x.off);
}

void rp_be_write(rp_backend *be, rp_bx dst, const void *src, size_t bytes) {
    check_range(dst, bytes);
    count(be, RP_BOP_TRANSFER, bytes);
    if (bytes) be->ops->write(be, dst, src, bytes);
}

void rp_be_read(rp_backend *be, void *dst, rp_bx src, size_t bytes) {
    check_range(src, bytes);
    count(be, RP_BOP_TRANSFER, bytes);
    if (bytes) be->ops->read(be, dst, src, bytes);
}

void rp_be_copy(rp_backend *be, rp_bx dst, rp_bx src, size_t bytes) {
    check_range(dst, bytes);
    check_range(src, bytes);
    count(be, RP_BOP_TRANSFER, bytes);
    if (bytes) be->ops->copy(be, dst, src, bytes);
}

void rp_be_kv_read(rp_backend *be, const rp_bkv *kv, int seq, void *k, void *v) {
    RP_ASSERT(seq >= 0 && seq < kv->d.n_seq);
    count(be, RP_BOP_TRANSFER,
          (k ? rp_bkv_seq_bytes(&kv->d, false) : 0) + (v ? rp_bkv_seq_bytes(&kv->d, true) : 0));
    be->ops->kv_read(be, kv, seq, k, v);
}

void rp_be_gather(rp_backend *be, rp_bx dst, rp_bx src, const int32_t *rows, int n, int width) {
    if (n <= 0) return;
    for (int i = 0; i < n; i++) RP_ASSERT(rows[i] >= i && (i == 0 || rows[i] > rows[i - 1]));
    check_range(dst, (size_t)n * (size_t)width * 4);
    check_range(src, ((size_t)rows[n - 1] + 1) * (size_t)width * 4);
    count(be, RP_BOP_TRANSFER, (uint64_t)n * (uint64_t)width * 4);
    be->ops->gather(be, dst, src, rows, n, width);
}

/* ---- ops ---------------------------------------------------------------------- */

void rp_be_get_rows(rp_backend *be, rp_bx dst, const rp_tensor *w, const int32_t *rows, int n) {
    if (n <= 0) return;
    check_range(dst, (size_t)n * (size_t)w->ne[0] * 4);
    for (int i = 0; i < n; i++) RP_ASSERT(rows[i] >= 0 && rows[i] < w->ne[1]);
    count(be, RP_BOP_GET_ROWS, (uint64_t)n * (w->row_bytes + 4));
    be->ops->get_rows(be, dst, w, rows, n);
}

void rp_be_norm(rp_backend *be, rp_bnorm kind, rp_bx y, rp_bx x, const rp_tensor *w,
                const rp_tensor *b, int n, int rows, float eps) {
    if (rows <= 0) return;
    RP_ASSERT(kind == RP_BNORM_LAYER || !b);
    RP_ASSERT((!w || (w->type == RP_TYPE_F32 && w->ne[0] >= n)) &&
              (!b || (b->type == RP_TYPE_F32 && b->ne[0] >= n)));
    check_range(x, (size_t)rows * (size_t)n * 4);
    check_range(y, (size_t)rows * (size_t)n * 4);
    count(be, RP_BOP_NORM, (uint64_t)rows * (uint64_t)n * 4 + (w ? (uint64_t)n * 4 : 0));
    be->ops->norm(be, kind, y, x, w, b, n, rows, eps);
}

void rp_be_norm_heads(rp_backend *be, rp_bx x, const rp_tensor *w, int head_dim, int n_head,
                      int rows, int stride, float eps) {
    if (rows <= 0) return;
    RP_ASSERT(w && w->type == RP_TYPE_F32 && w->ne[0] >= head_dim);
    RP_ASSERT(stride >= n_head * head_dim);
    check_range(x, ((size_t)(rows - 1) * (size_t)stride + (size_t)n_head * head_dim) * 4);
    count(be, RP_BOP_NORM, (uint64_t)rows * (uint64_t)n_head * (uint64_t)head_dim * 4);
    be->ops->norm_heads(be, x, w, head_dim, n_head, rows, stride, eps);
}

void rp_be_matmul_n(rp_backend *be, int n, const rp_tensor *const *w, const rp_bx *y, rp_bx x,
                    int n_tok) {
    if (n_tok <= 0 || n <= 0) return;
    RP_ASSERT(n <= RP_BE_MAX_N);
    const int64_t ne0 = w[0]->ne[0];
    uint64_t bytes = (uint64_t)n_tok * (uint64_t)ne0 * 4;
    check_range(x, (size_t)n_tok * (size_t)ne0 * 4);
    for (int i = 0; i < n; i++) {
        RP_ASSERT(w[i]->ne[0] == ne0);
        check_range(y[i], (size_t)n_tok * (size_t)w[i]->ne[1] * 4);
        bytes += w[i]->row_bytes * (uint64_t)w[i]->ne[1];
    }
    count(be, RP_BOP_MATMUL, bytes);
    be->ops->matmul(be, n, w, y, x, n_tok);
}

void rp_be_matmul(rp_backend *be, const rp_tensor *w, rp_bx x, int n_tok, rp_bx y) {
    rp_be_matmul_n(be, 1, &w, &y, x, n_tok);
}

void rp_be_rope_cache(rp_backend *be, rp_bx cs, const int32_t *pos, int n_tok,
                      const rp_rope_params *p) {
    if (n_tok <= 0 || p->n_rot <= 0) return;
    check_range(cs, (size_t)n_tok * (size_t)p->n_rot * 4);
    count(be, RP_BOP_ROPE, (uint64_t)n_tok * 4);
    be->ops->rope_cache(be, cs, pos, n_tok, p);
}

void rp_be_rope(rp_backend *be, rp_bx x, int n_tok, int stride, int n_head, int head_dim, int n_rot,
                rp_bx cs, rp_rope_style style) {
    if (n_tok <= 0 || n_rot <= 0) return;
    RP_ASSERT(n_rot <= head_dim && n_rot % 2 == 0 && stride >= n_head * head_dim);
    check_range(x, ((size_t)(n_tok - 1) * (size_t)stride + (size_t)n_head * head_dim) * 4);
    check_range(cs, (size_t)n_tok * (size_t)n_rot * 4);
    count(be, RP_BOP_ROPE,
          (uint64_t)n_tok * ((uint64_t)n_head * (uint64_t)n_rot + (uint64_t)n_rot) * 4);
    be->ops->rope(be, x, n_tok, stride, n_head, head_dim, n_rot, cs, style);
}

void rp_be_kv_write(rp_backend *be, rp_bkv *kv, int n_tok, const int32_t *pos, const int32_t *seq,
                    rp_bx k, int k_stride, rp_bx v, int v_stride) {
    if (n_tok <= 0) return;
    const rp_bkv_desc *d = &kv->d;
    const int wk = d->n_head_kv * d->head_dim_k, wv = d->n_head_kv * d->head_dim_v;
    RP_ASSERT(k_stride >= wk && v_stride >= wv);
    check_range(k, ((size_t)(n_tok - 1) * (size_t)k_stride + (size_t)wk) * 4);
    check_range(v, ((size_t)(n_tok - 1) * (size_t)v_stride + (size_t)wv) * 4);
    for (int t = 0; t < n_tok; t++) RP_ASSERT(seq[t] >= 0 && seq[t] < d->n_seq && pos[t] >= 0);
    count(be, RP_BOP_KV_WRITE, (uint64_t)n_tok * (uint64_t)(wk + wv) * 4);
    be->ops->kv_write(be, kv, n_tok, pos, seq, k, k_stride, v, v_stride);
}

void rp_be_attention(rp_backend *be, const rp_battn *a) {
    if (a->n_tok <= 0) return;
    const rp_bkv_desc *d = &a->kv->d;
    RP_ASSERT(a->n_head_kv == d->n_head_kv && a->head_dim_k == d->head_dim_k &&
              a->head_dim_v == d->head_dim_v && a->n_head % a->n_head_kv == 0);
    check_range(a->q, ((size_t)(a->n_tok - 1) * (size_t)a->q_stride +
                       (size_t)a->n_head * (size_t)a->head_dim_k) *
                          4);
    check_range(a->out, ((size_t)(a->n_tok - 1) * (size_t)a->out_stride +
                         (size_t)a->n_head * (size_t)a->head_dim_v) *
                            4);
    const uint64_t cell =
        (uint64_t)d->n_head_kv * ((uint64_t)d->head_dim_k * (d->type_k == RP_TYPE_F16 ? 2 : 4) +
                                  (uint64_t)d->head_dim_v * (d->type_v == RP_TYPE_F16 ? 2 : 4));
    uint64_t bytes = 0;
    for (int t = 0; t < a->n_tok; t++) {
        RP_ASSERT(a->seq[t] >= 0 && a->seq[t] < d->n_seq && a->pos[t] >= 0);
        const int lo = a->window > 0 ? RP_MAX(0, a->pos[t] - a->window + 1) : 0;
        RP_ASSERT(a->pos[t] - lo + 1 <= d->cap);
        bytes += (uint64_t)(a->pos[t] - lo + 1) * cell +
                 (uint64_t)a->n_head * (uint64_t)a->head_dim_k * 4;
    }
    count(be, RP_BOP_ATTN, bytes);
    be->ops->attention(be, a);
}

static void eltwise_check(rp_backend *be, rp_bx y, const rp_bx *x, int n) {
    check_range(y, (size_t)n * 4);
    if (x) check_range(*x, (size_t)n * 4);
    count(be, RP_BOP_ELTWISE, (uint64_t)n * (x ? 8 : 4));
}

void rp_be_add(rp_backend *be, rp_bx y, rp_bx x, int n) {
    if (n <= 0) return;
    eltwise_check(be, y, &x, n);
    be->ops->add(be, y, x, n);
}

void rp_be_add_row(rp_backend *be, rp_bx y, const rp_tensor *b, int width, int rows) {
    if (rows <= 0 || !b) return;
    RP_ASSERT(b->type == RP_TYPE_F32 && b->ne[0] >= width);
    eltwise_check(be, y, NULL, width * rows);
    be->ops->add_row(be, y, b, width, rows);
}

void rp_be_mul(rp_backend *be, rp_bx y, rp_bx x, int n) {
    if (n <= 0) return;
    eltwise_check(be, y, &x, n);
    be->ops->mul(be, y, x, n);
}

void rp_be_scale(rp_backend *be, rp_bx y, float s, int n) {
    if (n <= 0) return;
    eltwise_check(be, y, NULL, n);
    be->ops->scale(be, y, s, n);
}

void rp_be_softcap(rp_backend *be, rp_bx y, float cap, int n) {
    if (n <= 0) return;
    eltwise_check(be, y, NULL, n);
    be->ops->softcap(be, y, cap, n);
}

void rp_be_act_mul(rp_backend *be, rp_bact act, rp_bx gate, rp_bx up, int n) {
    if (n <= 0) return;
    RP_ASSERT(act >= RP_BACT_SILU && act <= RP_BACT_GELU_TANH_F16);
    eltwise_check(be, gate, &up, n);
    be->ops->act_mul(be, act, gate, up, n);
}

void rp_be_output(rp_backend *be, const rp_bout *o) {
    if (o->n_out <= 0) return;
    RP_ASSERT(o->w->ne[0] == o->n_embd && o->norm && o->norm->type == RP_TYPE_F32);
    const size_t rows_x = o->rows ? (size_t)o->rows[o->n_out - 1] + 1 : (size_t)o->n_out;
    check_range(o->x, rows_x * (size_t)o->n_embd * 4);
    check_range(o->tmp, (size_t)o->n_out * (size_t)o->n_embd * 4);
    for (int i = 0; o->rows && i < o->n_out; i++)
        RP_ASSERT(o->rows[i] >= i && (i == 0 || o->rows[i] > o->rows[i - 1]));
    count(be, RP_BOP_OUTPUT,
          (uint64_t)o->n_out * (uint64_t)o->n_embd * 4 + o->w->row_bytes * (uint64_t)o->w->ne[1]);
    be->ops->output(be, o);
}

rp_status rp_be_sync(rp_backend *be) {
    be->stats.syncs++;
    return be->ops->sync(be);
}

void rp_be_stats_reset(rp_backend *be) {
    rp_backend_stats *s = &be->stats;
    memset(s->calls, 0, sizeof s->calls);
    memset(s->dispatches, 0, sizeof s->dispatches);
    memset(s->bytes, 0, sizeof s->bytes);
    s->syncs = 0;
}

int rp_be_stats_report(const rp_backend *be, int n_tok, char *buf, size_t size) {
    const rp_backend_stats *s = &be->stats;
    const double div = n_tok > 0 ? (double)n_tok : 1.0;
    rp_buf b = {0};
    uint64_t tc = 0, td = 0, tb = 0;
    rp_buf_printf(&b, "%-10s %12s %12s %14s%s\n", "op", "calls", "dispatches", "bytes read",
                  n_tok > 0 ? " (per token)" : "");
    for (int i = 0; i < RP_BOP_COUNT; i++) {
        if (!s->calls[i]) continue;
        rp_buf_printf(&b, "%-10s %12.1f %12.1f %14.0f\n", bop_names[i], (double)s->calls[i] / div,
                      (double)s->dispatches[i] / div, (double)s->bytes[i] / div);
        tc += s->calls[i];
        td += s->dispatches[i];
        tb += s->bytes[i];
    }
    rp_buf_printf(&b, "%-10s %12.1f %12.1f %14.0f\n", "total", (double)tc / div, (double)td / div,
                  (double)tb / div);
    int len = (int)b.len;
    if (size) snprintf(buf, size, "%s", b.data ? b.data : "");
    rp_buf_free(&b);
    return len;
}

/* ---- a build without Vulkan ------------------------------------------------------ */
