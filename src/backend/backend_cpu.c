/* The CPU backend: every op is the call today's forwards make, with the same
 * arguments (src/kernels/ops.c, matmul.c), on host memory, right away. A
 * forward written against the backend interface therefore computes the same
 * bits on the CPU as the direct calls (tests/unit/test_backend.c checks a
 * dense forward over the interface against the direct decode bit for bit). Weights
 * are the model's own tensors (file mapping or packed copies): upload only
 * records them for the memory counters. */
#include "backend/backend.h"
#include "base/ptrmap.h"
#include "base/util.h"
#include "kernels/types.h"

#include <stdlib.h>
#include <string.h>

typedef struct cpu_buf {
    rp_bbuf base;
    void *host;
} cpu_buf;

typedef struct cpu_kv {
    rp_bkv base;
    rp_kv_view *views; /* [n_seq] */
    void *k, *v;       /* owned blocks, NULL when wrapping rp_state's */
} cpu_kv;

typedef struct cpu_be {
    rp_backend base;
    rp_compute *cc;
    float *attn_scratch;
    size_t attn_per_thread;
    const rp_kv_view **views; /* [views_cap] per-token views of an attention call */
    int views_cap;
    rp_ptrmap weights; /* t->data -> t: distinct weights recorded */
    rp_status err;
} cpu_be;

static cpu_be *CB(rp_backend *be) {
    return (cpu_be *)be;
}

static float *P(rp_bx x) {
    return (float *)((char *)((cpu_buf *)x.buf)->host + x.off);
}

static void disp(rp_backend *be, rp_bop op, int n) {
    be->stats.dispatches[op] += (uint64_t)n;
}

static void latch(cpu_be *c, rp_status s) {
    if (!c->err) c->err = s;
}

/* ---- memory ----------------------------------------------------------------- */

static rp_status cpu_upload(rp_backend *be, const rp_tensor *t) {
    cpu_be *c = CB(be);
    if (rp_ptrmap_get(&c->weights, t->data)) return RP_OK;
    rp_status s = rp_ptrmap_put(&c->weights, t->data, (void *)t);
    if (s) return rp_fail_prefix(s, "tensor '%s'", t->name);
    be->stats.weight_bytes += t->nbytes;
    be->stats.n_weights++;
    return RP_OK;
}

static void cpu_forget(rp_backend *be, const rp_tensor *t) {
    const rp_tensor *old = rp_ptrmap_del(&CB(be)->weights, t->data);
    if (!old) return;
    be->stats.weight_bytes -= old->nbytes;
    be->stats.n_weights--;
}

static rp_status cpu_buf_new(rp_backend *be, size_t bytes, const char *what, rp_bbuf **out) {
    cpu_buf *b = rp_calloc(1, sizeof *b, what);
    if (!b) return RP_ERR_NOMEM;
    b->host = rp_alloc_aligned(bytes, what);
    if (!b->host) {
        free(b);
        return RP_ERR_NOMEM;
    }
    b->base.size = bytes;
    be->stats.buf_bytes += bytes;
    *out = &b->base;
    return RP_OK;
}

static void cpu_buf_free(rp_backend *be, rp_bbuf *bb) {
    cpu_buf *b = (cpu_buf *)bb;
    be->stats.buf_bytes -= b->base.size;
    rp_free_aligned(b->host);
    free(b);
}

static rp_status cpu_kv_new(rp_backend *be, const rp_bkv_desc *d, rp_bkv **out) {
    const size_t pk = rp_bkv_seq_bytes(d, false), pv = rp_bkv_seq_bytes(d, true);
    cpu_kv *kv = rp_calloc(1, sizeof *kv, "KV cache");
    if (!kv) return RP_ERR_NOMEM;
    kv->base.d = *d;
    kv->views = rp_calloc((size_t)d->n_seq, sizeof *kv->views, "KV views");
    kv->k = rp_alloc_aligned(pk * (size_t)d->n_seq, "KV cache (K)");
    kv->v = rp_alloc_aligned(pv * (size_t)d->n_seq, "KV cache (V)");
    if (!kv->views || !kv->k || !kv->v) {
        free(kv->views);
        rp_free_aligned(kv->k);
        rp_free_aligned(kv->v);
        free(kv);
        return RP_ERR_NOMEM;
    }
    for (int s = 0; s < d->n_seq; s++)
        kv->views[s] = (rp_kv_view){(char *)kv->k + pk * (size_t)s, (char *)kv->v + pv * (size_t)s,
                                    d->type_k, d->type_v, d->cap};
    be->stats.kv_bytes += (pk + pv) * (uint64_t)d->n_seq;
    *out = &kv->base;
    return RP_OK;
}

static void cpu_kv_free(rp_backend *be, rp_bkv *bkv) {
    cpu_kv *kv = (cpu_kv *)bkv;
    if (kv->k) {
        be->stats.kv_bytes -= (rp_bkv_seq_bytes(&bkv->d, false) + rp_bkv_seq_bytes(&bkv->d, true)) *
                              (uint64_t)bkv->d.n_seq;
        rp_free_aligned(kv->k);
        rp_free_aligned(kv->v);
    }
    free(kv->views);
    free(kv);
}

rp_status rp_backend_cpu_kv_wrap(rp_backend *be, const rp_kv_view *views, const rp_bkv_desc *d,
                                 rp_bkv **out) {
    *out = NULL;
    if (!rp_backend_is_cpu(be))
        return rp_fail(RP_ERR_INVALID_ARG, "KV views of host memory wrap only on the cpu backend");
    cpu_kv *kv = rp_calloc(1, sizeof *kv, "KV cache");
    if (!kv) return RP_ERR_NOMEM;
    kv->base.d = *d;
    kv->views = rp_calloc((size_t)d->n_seq, sizeof *kv->views, "KV views");
    if (!kv->views) {
        free(kv);
        return RP_ERR_NOMEM;
    }
    for (int s = 0; s < d->n_seq; s++) {
        RP_ASSERT(views[s].cap == d->cap && views[s].type_k == d->type_k &&
                  views[s].type_v == d->type_v);
        kv->views[s] = views[s];
    }
    *out = &kv->base;
    return RP_OK;
}

const rp_kv_view *rp_backend_cpu_kv_view(const rp_bkv *kv, int seq) {
    return &((const cpu_kv *)kv)->views[seq];
}

/* ---- transfers ---------------------------------------------------------------- */

static void cpu_write(rp_backend *be, rp_bx dst, const void *src, size_t bytes) {
    disp(be, RP_BOP_TRANSFER, 1);
    memcpy(P(dst), src, bytes);
}

static void cpu_read(rp_backend *be, void *dst, rp_bx src, size_t bytes) {
    disp(be, RP_BOP_TRANSFER, 1);
    memcpy(dst, P(src), bytes);
}

static void cpu_copy(rp_backend *be, rp_bx dst, rp_bx src, size_t bytes) {
    disp(be, RP_BOP_TRANSFER, 1);
    memmove(P(dst), P(src), bytes);
}

static void cpu_kv_read(rp_backend *be, const rp_bkv *bkv, int seq, void *k, void *v) {
    const rp_kv_view *view = rp_backend_cpu_kv_view(bkv, seq);
    disp(be, RP_BOP_TRANSFER, 1);
    if (k) memcpy(k, view->k, rp_bkv_seq_bytes(&bkv->d, false));
    if (v) memcpy(v, view->v, rp_bkv_seq_bytes(&bkv->d, true));
}

static void cpu_gather(rp_backend *be, rp_bx dst, rp_bx src, const int32_t *rows, int n,
                       int width) {
    float *d = P(dst);
    const float *s = P(src);
    disp(be, RP_BOP_TRANSFER, 1);
    for (int i = 0; i < n; i++)
        if (d + (size_t)i * (size_t)width != s + (size_t)rows[i] * (size_t)width)
            memmove(d + (size_t)i * (size_t)width, s + (size_t)rows[i] * (size_t)width,
                    (size_t)width * sizeof(float));
}

/* ---- ops ---------------------------------------------------------------------- */

static void cpu_get_rows(rp_backend *be, rp_bx dst, const rp_tensor *w, const int32_t *rows,
                         int n) {
    float *d = P(dst);
    disp(be, RP_BOP_GET_ROWS, 1);
    for (int i = 0; i < n; i++) rp_tensor_get_row(w, rows[i], d + (size_t)i * (size_t)w->ne[0]);
}

static void cpu_norm(rp_backend *be, rp_bnorm kind, rp_bx y, rp_bx x, const rp_tensor *w,
                     const rp_tensor *b, int n, int rows, float eps) {
    disp(be, RP_BOP_NORM, 1);
    const float *wd = w ? (const float *)w->data : NULL;
    if (kind == RP_BNORM_LAYER)
        rp_layernorm(P(y), P(x), wd, b ? (const float *)b->data : NULL, n, rows, eps);
    else
        rp_rmsnorm(P(y), P(x), wd, n, rows, eps);
}

static void cpu_norm_heads(rp_backend *be, rp_bx x, const rp_tensor *w, int head_dim, int n_head,
                           int rows, int stride, float eps) {
    disp(be, RP_BOP_NORM, 1);
    rp_rmsnorm_heads(P(x), (const float *)w->data, head_dim, n_head, rows, stride, eps);
}

static void cpu_matmul(rp_backend *be, int n, const rp_tensor *const *w, const rp_bx *y, rp_bx x,
                       int n_tok) {
    float *yp[RP_BE_MAX_N];
    for (int i = 0; i < n; i++) yp[i] = P(y[i]);
    disp(be, RP_BOP_MATMUL, n);
    rp_matmul_n(CB(be)->cc, n, w, yp, P(x), n_tok);
}

static void cpu_rope_cache(rp_backend *be, rp_bx cs, const int32_t *pos, int n_tok,
                           const rp_rope_params *p) {
    disp(be, RP_BOP_ROPE, 1);
    rp_rope_cache(P(cs), pos, n_tok, p);
}

static void cpu_rope(rp_backend *be, rp_bx x, int n_tok, int stride, int n_head, int head_dim,
                     int n_rot, rp_bx cs, rp_rope_style style) {
    disp(be, RP_BOP_ROPE, 1);
    rp_rope_apply(P(x), n_tok, stride, n_head, head_dim, n_rot, P(cs), style);
}

static void cpu_kv_write(rp_backend *be, rp_bkv *kv, int n_tok, const int32_t *pos,
                         const int32_t *seq, rp_bx k, int k_stride, rp_bx v, int v_stride) {
    const rp_bkv_desc *d = &kv->d;
    const float *kp = P(k), *vp = P(v);
    disp(be, RP_BOP_KV_WRITE, 1);
    for (int t = 0; t < n_tok; t++)
        rp_kv_write(rp_backend_cpu_kv_view(kv, seq[t]), d->n_head_kv, d->head_dim_k, d->head_dim_v,
                    pos[t], kp + (size_t)t * (size_t)k_stride, vp + (size_t)t * (size_t)v_stride);
}

static void cpu_attention(rp_backend *be, const rp_battn *a) {
    cpu_be *c = CB(be);
    disp(be, RP_BOP_ATTN, 1);
    if (a->n_tok > c->views_cap) {
        const rp_kv_view **v =
            rp_realloc(c->views, (size_t)a->n_tok * sizeof *v, "attention KV views");
        if (!v) {
            latch(c, RP_ERR_NOMEM);
            return;
        }
        c->views = v;
        c->views_cap = a->n_tok;
    }
    for (int t = 0; t < a->n_tok; t++) c->views[t] = rp_backend_cpu_kv_view(a->kv, a->seq[t]);
    rp_attn_args aa = {
        .n_tok = a->n_tok,
        .q = P(a->q),
        .q_stride = a->q_stride,
        .out = P(a->out),
        .out_stride = a->out_stride,
        .n_head = a->n_head,
        .n_head_kv = a->n_head_kv,
        .head_dim_k = a->head_dim_k,
        .head_dim_v = a->head_dim_v,
        .scale = a->scale,
        .softcap = a->softcap,
        .window = a->window,
        .pos = a->pos,
        .kv = c->views,
    };
    rp_attention(c->cc, &aa, c->attn_scratch, c->attn_per_thread);
}

static void cpu_add(rp_backend *be, rp_bx y, rp_bx x, int n) {
    disp(be, RP_BOP_ELTWISE, 1);
    rp_add(P(y), P(x), n);
}

static void cpu_add_row(rp_backend *be, rp_bx y, const rp_tensor *b, int width, int rows) {
    float *yp = P(y);
    disp(be, RP_BOP_ELTWISE, 1);
    for (int r = 0; r < rows; r++) rp_add(yp + (size_t)r * (size_t)width, b->data, width);
}

static void cpu_mul(rp_backend *be, rp_bx y, rp_bx x, int n) {
    float *yp = P(y);
    const float *xp = P(x);
    disp(be, RP_BOP_ELTWISE, 1);
    for (int i = 0; i < n; i++) yp[i] *= xp[i];
}

static void cpu_scale(rp_backend *be, rp_bx y, float s, int n) {
    disp(be, RP_BOP_ELTWISE, 1);
    rp_scale(P(y), s, n);
}

static void cpu_softcap(rp_backend *be, rp_bx y, float cap, int n) {
    disp(be, RP_BOP_ELTWISE, 1);
    rp_softcap(P(y), cap, n);
}

static void cpu_act_mul(rp_backend *be, rp_bact act, rp_bx gate, rp_bx up, int n) {
    disp(be, RP_BOP_ELTWISE, 1);
    switch (act) {
    case RP_BACT_SILU:
        rp_silu_mul(P(gate), P(up), n);
        break;
    case RP_BACT_GELU_TANH:
        rp_gelu_tanh_mul(P(gate), P(up), n);
        break;
    case RP_BACT_GELU_ERF:
        rp_gelu_erf_mul(P(gate), P(up), n);
        break;
    case RP_BACT_GELU_TANH_F16:
        rp_gelu_tanh_f16_mul(P(gate), P(up), n);
        break;
    }
}

/* the arithmetic of the forwards' shared output tail (core/context.c) */
static void cpu_output(rp_backend *be, const rp_bout *o) {
    float *x = P(o->x), *tmp = P(o->tmp);
    const size_t ne = (size_t)o->n_embd;
    disp(be, RP_BOP_OUTPUT, 1);
    for (int i = 0; o->rows && i < o->n_out; i++)
        if (o->rows[i] != i) memmove(x + (size_t)i * ne, x + (size_t)o->rows[i] * ne, ne * 4);
    if (o->hidden) memcpy(o->hidden, x, (size_t)o->n_out * ne * sizeof(float));
    if (o->norm_b)
        rp_layernorm(tmp, x, (const float *)o->norm->data, (const float *)o->norm_b->data,
                     o->n_embd, o->n_out, o->eps);
    else
        rp_rmsnorm(tmp, x, (const float *)o->norm->data, o->n_embd, o->n_out, o->eps);
    rp_matmul(CB(be)->cc, o->w, tmp, o->n_out, o->logits);
    if (o->softcap > 0) rp_softcap(o->logits, o->softcap, o->n_out * (int)o->w->ne[1]);
}

static rp_status cpu_sync(rp_backend *be) {
    cpu_be *c = CB(be);
    rp_status s = c->err;
    c->err = RP_OK;
    return s ? rp_fail(s, "cpu backend: an op ran out of memory") : RP_OK;
}

static void cpu_free(rp_backend *be) {
    cpu_be *c = CB(be);
    rp_ptrmap_free(&c->weights);
    free(c->views);
    free(c);
}

static const rp_backend_ops cpu_ops = {
    .free = cpu_free,
    .upload = cpu_upload,
    .forget = cpu_forget,
    .buf_new = cpu_buf_new,
    .buf_free = cpu_buf_free,
    .kv_new = cpu_kv_new,
    .kv_free = cpu_kv_free,
    .write = cpu_write,
    .read = cpu_read,
    .copy = cpu_copy,
    .kv_read = cpu_kv_read,
    .gather = cpu_gather,
    .get_rows = cpu_get_rows,
    .norm = cpu_norm,
    .norm_heads = cpu_norm_heads,
    .matmul = cpu_matmul,
    .rope_cache = cpu_rope_cache,
    .rope = cpu_rope,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .add = cpu_add,
    .add_row = cpu_add_row,
    .mul = cpu_mul,
    .scale = cpu_scale,
    .softcap = cpu_softcap,
    .act_mul = cpu_act_mul,
    .output = cpu_output,
    .sync = cpu_sync,
};

bool rp_backend_is_cpu(const rp_backend *be) {
    return be && be->ops == &cpu_ops;
}

float *rp_backend_cpu_ptr(const rp_backend *be, rp_bx x) {
    return rp_backend_is_cpu(be) ? P(x) : NULL;
}

rp_status rp_backend_cpu_new(const rp_backend_params *p, rp_backend **out) {
    *out = NULL;
    if (!p || !p->cc || !p->cc->pool || !p->attn_scratch)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "cpu backend: needs the context's thread pool and scratch buffers");
    cpu_be *c = rp_calloc(1, sizeof *c, "cpu backend");
    if (!c) return RP_ERR_NOMEM;
    c->base.ops = &cpu_ops;
    snprintf(c->base.name, sizeof c->base.name, "cpu");
    snprintf(c->base.desc, sizeof c->base.desc, "host CPU, %d threads", rp_pool_size(p->cc->pool));
    c->cc = p->cc;
    c->attn_scratch = p->attn_scratch;
    c->attn_per_thread = p->attn_scratch_per_thread;
    *out = &c->base;
    return RP_OK;
}
