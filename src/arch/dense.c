#include "arch/dense.h"
#include "backend/backend.h"
#include "base/util.h"
#include "core/delta.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AT RP_TAT_LAYER
const rp_tensor_def rp_dense_rows[RP_DENSE_N_ROWS] = {
    [RP_DENSE_ATTN_NORM] = {RP_TROW("attn_norm.weight", EMBD, NONE, NORM), AT(attn_norm)},
    [RP_DENSE_ATTN_Q] = {RP_TROW("attn_q.weight", EMBD, Q, ATTN_Q), AT(wq)},
    [RP_DENSE_ATTN_K] = {RP_TROW("attn_k.weight", EMBD, KV, ATTN_K), AT(wk)},
    [RP_DENSE_ATTN_V] = {RP_TROW("attn_v.weight", EMBD, KV_V, ATTN_V), AT(wv)},
    [RP_DENSE_ATTN_OUT] = {RP_TROW("attn_output.weight", O, EMBD, ATTN_OUTPUT), AT(wo)},
    [RP_DENSE_ATTN_Q_B] = {RP_TROW("attn_q.bias", Q, NONE, OTHER), .opt = true,
                           .make = RP_DENSE_F_QKV_BIAS, AT(bq)},
    [RP_DENSE_ATTN_K_B] = {RP_TROW("attn_k.bias", KV, NONE, OTHER), .opt = true,
                           .make = RP_DENSE_F_QKV_BIAS, AT(bk)},
    [RP_DENSE_ATTN_V_B] = {RP_TROW("attn_v.bias", KV_V, NONE, OTHER), .opt = true,
                           .make = RP_DENSE_F_QKV_BIAS, AT(bv)},
    [RP_DENSE_ATTN_OUT_B] = {RP_TROW("attn_output.bias", EMBD, NONE, OTHER), .opt = true, AT(bo)},
    [RP_DENSE_ATTN_Q_NORM] = {RP_TROW("attn_q_norm.weight", HEAD, NONE, NORM),
                              .when = RP_DENSE_F_QK_NORM, AT(q_norm)},
    [RP_DENSE_ATTN_K_NORM] = {RP_TROW("attn_k_norm.weight", HEAD, NONE, NORM),
                              .when = RP_DENSE_F_QK_NORM, AT(k_norm)},
    [RP_DENSE_FFN_NORM] = {RP_TROW("ffn_norm.weight", EMBD, NONE, NORM), AT(ffn_norm)},
    [RP_DENSE_FFN_GATE] = {RP_TROW("ffn_gate.weight", EMBD, FF, FFN_GATE), AT(ffn_gate)},
    [RP_DENSE_FFN_UP] = {RP_TROW("ffn_up.weight", EMBD, FF, FFN_UP), AT(ffn_up)},
    [RP_DENSE_FFN_DOWN] = {RP_TROW("ffn_down.weight", FF, EMBD, FFN_DOWN), AT(ffn_down)},
    [RP_DENSE_POST_ATTN_NORM] = {RP_TROW("post_attention_norm.weight", EMBD, NONE, NORM),
                                 .when = RP_DENSE_F_POST_NORMS, AT(attn_post_norm)},
    [RP_DENSE_POST_FFN_NORM] = {RP_TROW("post_ffw_norm.weight", EMBD, NONE, NORM),
                                .when = RP_DENSE_F_POST_NORMS, AT(ffn_post_norm)},
};
#undef AT

const rp_tensor_table rp_dense_tensors = {
    .what = "the dense decoder block",
    .rows = rp_dense_rows,
    .n_rows = RP_DENSE_N_ROWS,
    .base = &rp_io_tensors,
};

unsigned rp_dense_features(const rp_dense_cfg *cfg) {
    return (cfg->qk_norm ? RP_DENSE_F_QK_NORM : 0u) |
           (cfg->post_norms ? RP_DENSE_F_POST_NORMS : 0u);
}

rp_status rp_dense_bind_layer(rp_model *m, int l, const rp_dense_cfg *cfg) {
    rp_dims d;
    rp_dims_of_layer(&d, m, l);
    return rp_bind_layer_rows(m, &rp_dense_tensors, l, rp_dense_features(cfg), &d, NULL);
}

rp_status rp_dense_synth_tensors(rp_synth *s, const rp_synth_params *p, unsigned feat) {
    const int hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    const int nkv = p->n_head_kv ? p->n_head_kv : p->n_head;
    rp_dims d;
    rp_dims_init(&d, p->n_embd, p->n_vocab, p->n_ff, p->n_head, nkv, hd, hd);
    rp_status st =
        rp_synth_rows(s, &rp_io_tensors, false, -1, p->tied ? 0 : RP_IO_F_UNTIED, &d, NULL);
    for (int l = 0; l < p->n_layer && !st; l++)
        st = rp_synth_rows(s, &rp_dense_tensors, true, l, feat, &d, NULL);
    return st;
}

/* Scratch of one context on its backend (c->be): every activation row
 * sized for n_ubatch tokens, in one buffer. */
typedef struct dense_ctx {
    rp_bbuf *act;
    rp_bx x;       /* [n_ub][n_embd] residual stream */
    rp_bx xn;      /* [n_ub][n_embd] normed input of a sublayer */
    rp_bx tmp;     /* [n_ub][max(n_embd, q width)] sublayer output */
    rp_bx q;       /* [n_ub][n_head * head_dim_k] */
    rp_bx k;       /* [n_ub][n_head_kv * head_dim_k] */
    rp_bx v;       /* [n_ub][n_head_kv * head_dim_v] */
    rp_bx att;     /* [n_ub][n_head * head_dim_v] */
    rp_bx gate;    /* [n_ub][n_ff] */
    rp_bx up;      /* [n_ub][n_ff] */
    rp_bx rope[2]; /* [n_ub][n_rot] cos/sin per rope set */
} dense_ctx;

/* The weights of the steps' source layers, once each (a layer several steps
 * run, or a tensor several layers share, is one copy on the backend). */
static rp_status upload_weights(rp_context *c) {
    const rp_model *m = c->model;
    const rp_tensor *io[] = {m->tok_embd, m->output_norm, m->output_norm_b, m->output};
    rp_status s = RP_OK;
    for (size_t i = 0; i < RP_ARRAY_LEN(io) && !s; i++)
        if (io[i]) s = rp_be_upload(c->be, io[i]);
    for (int e = 0; e < c->plan->n_eff && !s; e++) {
        const rp_tensor *t[RP_CTX_LAYER_WEIGHTS_MAX];
        const int k = rp_ctx_layer_weights(&m->layers[c->plan->src[e]], t);
        for (int i = 0; i < k && !s; i++) s = rp_be_upload(c->be, t[i]);
    }
    return s;
}

rp_status rp_dense_ctx_init(rp_context *c) {
    const rp_model *m = c->model;
    const size_t n = (size_t)c->n_ubatch;
    size_t wq = 0, wk = 0, wv = 0, wo = 0, wf = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const rp_layer_info *li = &m->info[l];
        wq = RP_MAX(wq, (size_t)li->n_head * (size_t)li->head_dim_k);
        wk = RP_MAX(wk, (size_t)li->n_head_kv * (size_t)li->head_dim_k);
        wv = RP_MAX(wv, (size_t)li->n_head_kv * (size_t)li->head_dim_v);
        wo = RP_MAX(wo, (size_t)li->n_head * (size_t)li->head_dim_v);
        wf = RP_MAX(wf, (size_t)li->n_ff);
    }
    const size_t E = (size_t)m->hp.n_embd;
    const size_t wt = RP_MAX(E, RP_MAX(wq, wo));
    size_t nrot = (size_t)RP_MAX(m->hp.rope[0].n_rot, m->hp.rope[1].n_rot);
    size_t sizes[] = {n * E,  n * E,  n * wt, n * wq,       n * wk,      n * wv,
                      n * wo, n * wf, n * wf, n * nrot + 1, n * nrot + 1};
    size_t off[RP_ARRAY_LEN(sizes)], total = 0;
    for (size_t i = 0; i < RP_ARRAY_LEN(sizes); i++) {
        off[i] = total; /* 256: any device's storage-buffer offset alignment */
        total += rp_align_up(sizes[i] * sizeof(float), 256);
    }
    rp_status s = upload_weights(c);
    if (s) return s;
    dense_ctx *d = rp_calloc(1, sizeof *d, "dense scratch");
    if (!d) return RP_ERR_NOMEM;
    if ((s = rp_be_buf_new(c->be, total, "activation scratch", &d->act))) {
        free(d);
        return s;
    }
    rp_bx *dst[] = {&d->x,   &d->xn,   &d->tmp, &d->q,       &d->k,      &d->v,
                    &d->att, &d->gate, &d->up,  &d->rope[0], &d->rope[1]};
    for (size_t i = 0; i < RP_ARRAY_LEN(sizes); i++) *dst[i] = rp_bx_at(d->act, off[i]);
    c->arch_ctx = d;
    return RP_OK;
}

void rp_dense_ctx_free(rp_context *c) {
    dense_ctx *d = c->arch_ctx;
    if (!d) return;
    rp_be_buf_free(c->be, d->act);
    free(d);
    c->arch_ctx = NULL;
}

static rp_bnorm norm_kind(const rp_tensor *b) {
    return b ? RP_BNORM_LAYER : RP_BNORM_RMS;
}

/* The residual stream entering step e_begin: token embeddings (or the
 * batch's input embeddings), scaled, or the caller's hidden states. */
static void forward_input(rp_context *c, const rp_ubatch *ub, dense_ctx *d, int e_begin) {
    const rp_hparams *hp = &c->model->hp;
    const size_t n = (size_t)ub->n_tok * (size_t)hp->n_embd;
    if (e_begin > 0) {
        rp_be_write(c->be, d->x, ub->x_in, n * sizeof(float));
        return;
    }
    if (ub->embd)
        rp_be_write(c->be, d->x, ub->embd, n * sizeof(float));
    else
        rp_be_get_rows(c->be, d->x, c->model->tok_embd, ub->token, ub->n_tok);
    if (hp->embd_scale != 1.0f) rp_be_scale(c->be, d->x, hp->embd_scale, (int)n);
}

/* LoRA adapters and residual scales (core/delta.h) on the host rows of the
 * CPU backend; a device context with deltas is refused (context_dev.c). */
static void delta(rp_context *c, int e, int k, const rp_tensor *const *w, const rp_bx *y, rp_bx x,
                  int n) {
    if (!c->deltas) return;
    float *yp[RP_BE_MAX_N];
    for (int i = 0; i < k; i++) yp[i] = rp_backend_cpu_ptr(c->be, y[i]);
    rp_ctx_delta(&c->cc, c->deltas, e, k, w, yp, rp_backend_cpu_ptr(c->be, x), n);
}

static void residual(rp_context *c, int e, rp_bx x, rp_bx y, int n, int E) {
    if (c->deltas)
        rp_ctx_residual(c->deltas, e, rp_backend_cpu_ptr(c->be, x), rp_backend_cpu_ptr(c->be, y), n,
                        E);
    else
        rp_be_add(c->be, x, y, n * E);
}

/* Rows [0, n) of width w of x for the trace hook as tensor `name` of step e
 * (read back from a device first; the CPU's rows are handed over in place). */
static void trace_bx(rp_context *c, const rp_ubatch *ub, const char *name, int e, rp_bx x, int n,
                     int w, bool compacted) {
    const size_t bytes = (size_t)n * (size_t)w * sizeof(float);
    float *h = rp_backend_cpu_ptr(c->be, x), *tmp = NULL;
    if (!h) {
        if (!(tmp = rp_malloc(bytes ? bytes : 1, "trace rows"))) return;
        rp_be_read(c->be, tmp, x, bytes);
        h = rp_be_sync(c->be) ? NULL : tmp;
    }
    if (h) rp_trace_emit(c, ub, name, e, e >= 0 ? c->plan->src[e] : -1, h, n, w, compacted);
    free(tmp);
}
#define TRACE(name, e, x, w)                                                                       \
    do {                                                                                           \
        if (rp_tracing(c)) trace_bx(c, ub, name, e, x, n, w, compacted);                           \
    } while (0)

/* One forward for every backend: each call is enqueued on c->be (the CPU
 * backend runs it at once with the arguments the kernels always had), the
 * host waits once, in rp_be_sync, for the rows it asked for. */
rp_status rp_dense_forward(rp_context *c, const rp_ubatch *ub) {
    const rp_model *m = c->model;
    const rp_hparams *hp = &m->hp;
    const rp_dense_cfg *cfg = m->arch_data;
    const rp_plan *plan = c->plan;
    dense_ctx *d = c->arch_ctx;
    rp_backend *be = c->be;
    const int E = hp->n_embd;
    int n = ub->n_tok;
    /* steps [e_begin, e_end): the whole plan unless rp_decode_steps asked for a range */
    const int e_begin = ub->step_begin, e_end = ub->step_end ? ub->step_end : plan->n_eff;

    forward_input(c, ub, d, e_begin);
    bool compacted = false;
    if (e_begin == 0) TRACE("inp_embd", -1, d->x, E);
    /* rotary tables, once per micro-batch for every layer that shares them */
    for (int r = 0; r < hp->n_rope_sets; r++)
        rp_be_rope_cache(be, d->rope[r], ub->pos, n, &hp->rope[r]);

    for (int e = e_begin; e < e_end; e++) {
        const int src = plan->src[e];
        const rp_layer *L = &m->layers[src];
        const rp_layer_info *li = &m->info[src];
        const int nh = li->n_head, nkv = li->n_head_kv, dk = li->head_dim_k, dv = li->head_dim_v;
        const int wq = nh * dk, wk = nkv * dk, wv = nkv * dv, wo = nh * dv;
        const rp_rope_params *rope = &hp->rope[li->rope_set];

        /* attention: what the layer is comes from src, where it runs (KV region) from e */
        rp_be_norm(be, norm_kind(L->attn_norm_b), d->xn, d->x, L->attn_norm, L->attn_norm_b, E, n,
                   hp->eps);
        TRACE("attn_norm", e, d->xn, E);
        const rp_tensor *w3[3] = {L->wq, L->wk, L->wv};
        const rp_bx y3[3] = {d->q, d->k, d->v};
        rp_be_matmul_n(be, 3, w3, y3, d->xn, n);
        delta(c, e, 3, w3, y3, d->xn, n);
        rp_be_add_row(be, d->q, L->bq, wq, n);
        rp_be_add_row(be, d->k, L->bk, wk, n);
        rp_be_add_row(be, d->v, L->bv, wv, n);
        if (L->q_norm) {
            rp_be_norm_heads(be, d->q, L->q_norm, dk, nh, n, wq, hp->eps);
            rp_be_norm_heads(be, d->k, L->k_norm, dk, nkv, n, wk, hp->eps);
        }
        if (rope->n_rot > 0) {
            rp_be_rope(be, d->q, n, wq, nh, dk, rope->n_rot, d->rope[li->rope_set], hp->rope_style);
            rp_be_rope(be, d->k, n, wk, nkv, dk, rope->n_rot, d->rope[li->rope_set],
                       hp->rope_style);
        }
        TRACE("Qcur", e, d->q, wq);
        TRACE("Kcur", e, d->k, wk);
        TRACE("Vcur", e, d->v, wv);
        rp_be_kv_write(be, c->bkv[e], n, ub->pos, ub->seq, d->k, wk, d->v, wv);
        rp_battn a = {.n_tok = n,
                      .q = d->q,
                      .q_stride = wq,
                      .out = d->att,
                      .out_stride = wo,
                      .n_head = nh,
                      .n_head_kv = nkv,
                      .head_dim_k = dk,
                      .head_dim_v = dv,
                      .scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)dk),
                      .softcap = hp->attn_softcap,
                      .window = li->kind == RP_LAYER_ATTN_SWA ? li->window : 0,
                      .pos = ub->pos,
                      .seq = ub->seq,
                      .kv = c->bkv[e]};
        rp_be_attention(be, &a);
        TRACE("kqv_out", e, d->att, wo);
        rp_be_matmul(be, L->wo, d->att, n, d->tmp);
        delta(c, e, 1, &L->wo, &d->tmp, d->att, n);
        rp_be_add_row(be, d->tmp, L->bo, E, n);
        TRACE("attn_out", e, d->tmp, E);
        if (L->attn_post_norm) {
            rp_be_norm(be, RP_BNORM_RMS, d->tmp, d->tmp, L->attn_post_norm, NULL, E, n, hp->eps);
            TRACE("attn_post_norm", e, d->tmp, E);
        }
        residual(c, e, d->x, d->tmp, n, E);
        TRACE("ffn_inp", e, d->x, E);

        /* After the last step's attention only the output rows matter. */
        if (e == plan->n_eff - 1 && ub->n_out < n) {
            rp_be_gather(be, d->x, d->x, ub->out_rows, ub->n_out, E);
            n = ub->n_out;
            compacted = true;
            if (!n) break;
        }

        /* feed-forward */
        rp_be_norm(be, norm_kind(L->ffn_norm_b), d->xn, d->x, L->ffn_norm, L->ffn_norm_b, E, n,
                   hp->eps);
        TRACE("ffn_norm", e, d->xn, E);
        const rp_tensor *w2[2] = {L->ffn_gate, L->ffn_up};
        const rp_bx y2[2] = {d->gate, d->up};
        rp_be_matmul_n(be, 2, w2, y2, d->xn, n);
        delta(c, e, 2, w2, y2, d->xn, n);
        TRACE("ffn_gate", e, d->gate, li->n_ff);
        TRACE("ffn_up", e, d->up, li->n_ff);
        rp_be_act_mul(be, (rp_bact)cfg->act, d->gate, d->up, n * li->n_ff);
        TRACE(cfg->act == RP_ACT_SILU ? "ffn_swiglu" : "ffn_geglu", e, d->gate, li->n_ff);
        rp_be_matmul(be, L->ffn_down, d->gate, n, d->tmp);
        delta(c, e, 1, &L->ffn_down, &d->tmp, d->gate, n);
        TRACE("ffn_out", e, d->tmp, E);
        if (L->ffn_post_norm) {
            rp_be_norm(be, RP_BNORM_RMS, d->tmp, d->tmp, L->ffn_post_norm, NULL, E, n, hp->eps);
            TRACE("ffn_post_norm", e, d->tmp, E);
        }
        residual(c, e, d->x, d->tmp, n, E);
        TRACE("l_out", e, d->x, E);
    }
    if (e_end < plan->n_eff) {
        rp_be_read(be, ub->x_out, d->x, (size_t)n * (size_t)E * sizeof(float));
    } else if (rp_backend_is_cpu(be)) { /* today's tail, with its trace rows */
        rp_forward_output(c, ub, rp_backend_cpu_ptr(be, d->x), compacted,
                          rp_backend_cpu_ptr(be, d->xn));
    } else if (ub->n_out) {
        rp_bout o = {.x = d->x,
                     .tmp = d->xn,
                     .n_embd = E,
                     .n_out = ub->n_out,
                     .rows = compacted ? NULL : ub->out_rows,
                     .norm = m->output_norm,
                     .norm_b = m->output_norm_b,
                     .w = m->output,
                     .eps = hp->eps,
                     .softcap = hp->final_softcap,
                     .logits = ub->logits,
                     .hidden = ub->hidden};
        rp_be_output(be, &o);
    }
    return rp_be_sync(be);
}
#undef TRACE
