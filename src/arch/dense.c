#include "arch/dense.h"
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

/* Scratch of one context: every buffer sized for n_ubatch tokens. */
typedef struct dense_ctx {
    float *x;              /* [n_ub][n_embd] residual stream */
    float *xn;             /* [n_ub][n_embd] normed input of a sublayer */
    float *tmp;            /* [n_ub][max(n_embd, q width)] sublayer output */
    float *q;              /* [n_ub][n_head * head_dim_k] */
    float *k;              /* [n_ub][n_head_kv * head_dim_k] */
    float *v;              /* [n_ub][n_head_kv * head_dim_v] */
    float *att;            /* [n_ub][n_head * head_dim_v] */
    float *gate;           /* [n_ub][n_ff] */
    float *up;             /* [n_ub][n_ff] */
    float *rope[2];        /* [n_ub][n_rot] cos/sin per rope set */
    const rp_kv_view **kv; /* [n_ub] */
    void *block;
} dense_ctx;

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
    size_t total = 0;
    for (size_t i = 0; i < RP_ARRAY_LEN(sizes); i++)
        total += rp_align_up(sizes[i] * sizeof(float), 64);
    dense_ctx *d = rp_calloc(1, sizeof *d, "dense scratch");
    if (!d) return RP_ERR_NOMEM;
    d->block = rp_alloc_aligned(total, "activation scratch");
    d->kv = rp_calloc(n, sizeof *d->kv, "kv views");
    if (!d->block || !d->kv) {
        rp_free_aligned(d->block);
        free(d->kv);
        free(d);
        return RP_ERR_NOMEM;
    }
    float **dst[] = {&d->x,   &d->xn,   &d->tmp, &d->q,       &d->k,      &d->v,
                     &d->att, &d->gate, &d->up,  &d->rope[0], &d->rope[1]};
    char *p = d->block;
    for (size_t i = 0; i < RP_ARRAY_LEN(sizes); i++) {
        *dst[i] = (float *)p;
        p += rp_align_up(sizes[i] * sizeof(float), 64);
    }
    c->arch_ctx = d;
    return RP_OK;
}

void rp_dense_ctx_free(rp_context *c) {
    dense_ctx *d = c->arch_ctx;
    if (!d) return;
    rp_free_aligned(d->block);
    free(d->kv);
    free(d);
    c->arch_ctx = NULL;
}

static void add_bias(float *x, const rp_tensor *b, int n_rows, int width) {
    if (!b) return;
    for (int r = 0; r < n_rows; r++) rp_add(x + (size_t)r * (size_t)width, b->data, width);
}

static void norm_rows(float *y, const float *x, const rp_tensor *w, const rp_tensor *b, int n,
                      int rows, float eps) {
    if (b)
        rp_layernorm(y, x, w->data, b->data, n, rows, eps);
    else
        rp_rmsnorm(y, x, w->data, n, rows, eps);
}

/* the trace hook's tensor name of step e, rows [0, n) of width w */
#define TRACE(name, e, data, w)                                                                    \
    do {                                                                                           \
        if (rp_tracing(c))                                                                         \
            rp_trace_emit(c, ub, name, e, (e) >= 0 ? plan->src[e] : -1, data, n, w, compacted);    \
    } while (0)

rp_status rp_dense_forward(rp_context *c, const rp_ubatch *ub) {
    const rp_model *m = c->model;
    const rp_hparams *hp = &m->hp;
    const rp_dense_cfg *cfg = m->arch_data;
    const rp_plan *plan = c->plan;
    dense_ctx *d = c->arch_ctx;
    const int E = hp->n_embd;
    int n = ub->n_tok;
    /* steps [e_begin, e_end): the whole plan unless rp_decode_steps asked for a range */
    const int e_begin = ub->step_begin, e_end = ub->step_end ? ub->step_end : plan->n_eff;

    /* embeddings, or the residual stream entering step e_begin */
    if (e_begin > 0) memcpy(d->x, ub->x_in, (size_t)n * (size_t)E * sizeof(float));
    for (int t = 0; t < n && e_begin == 0; t++) {
        float *xr = d->x + (size_t)t * (size_t)E;
        if (ub->embd)
            memcpy(xr, ub->embd + (size_t)t * (size_t)E, (size_t)E * sizeof(float));
        else
            rp_tensor_get_row(m->tok_embd, ub->token[t], xr);
        if (hp->embd_scale != 1.0f) rp_scale(xr, hp->embd_scale, E);
    }
    bool compacted = false;
    if (e_begin == 0) TRACE("inp_embd", -1, d->x, E);
    /* rotary tables, once per micro-batch for every layer that shares them */
    for (int r = 0; r < hp->n_rope_sets; r++) rp_rope_cache(d->rope[r], ub->pos, n, &hp->rope[r]);

    for (int e = e_begin; e < e_end; e++) {
        const int src = plan->src[e];
        const rp_layer *L = &m->layers[src];
        const rp_layer_info *li = &m->info[src];
        const int nh = li->n_head, nkv = li->n_head_kv, dk = li->head_dim_k, dv = li->head_dim_v;
        const int wq = nh * dk, wk = nkv * dk, wv = nkv * dv, wo = nh * dv;
        const rp_rope_params *rope = &hp->rope[li->rope_set];

        /* attention: what the layer is comes from src, where it runs (KV slot) from e */
        norm_rows(d->xn, d->x, L->attn_norm, L->attn_norm_b, E, n, hp->eps);
        TRACE("attn_norm", e, d->xn, E);
        const rp_tensor *w3[3] = {L->wq, L->wk, L->wv};
        float *y3[3] = {d->q, d->k, d->v};
        rp_matmul_n(&c->cc, 3, w3, y3, d->xn, n);
        rp_ctx_delta(&c->cc, c->deltas, e, 3, w3, y3, d->xn, n);
        add_bias(d->q, L->bq, n, wq);
        add_bias(d->k, L->bk, n, wk);
        add_bias(d->v, L->bv, n, wv);
        if (L->q_norm) {
            rp_rmsnorm_heads(d->q, L->q_norm->data, dk, nh, n, wq, hp->eps);
            rp_rmsnorm_heads(d->k, L->k_norm->data, dk, nkv, n, wk, hp->eps);
        }
        if (rope->n_rot > 0) {
            rp_rope_apply(d->q, n, wq, nh, dk, rope->n_rot, d->rope[li->rope_set], hp->rope_style);
            rp_rope_apply(d->k, n, wk, nkv, dk, rope->n_rot, d->rope[li->rope_set], hp->rope_style);
        }
        TRACE("Qcur", e, d->q, wq);
        TRACE("Kcur", e, d->k, wk);
        TRACE("Vcur", e, d->v, wv);
        for (int t = 0; t < n; t++) {
            d->kv[t] = rp_ctx_kv(c, e, ub->seq[t]);
            rp_kv_write(d->kv[t], nkv, dk, dv, ub->pos[t], d->k + (size_t)t * (size_t)wk,
                        d->v + (size_t)t * (size_t)wv);
        }
        rp_attn_args aa = {
            .n_tok = n,
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
            .kv = d->kv,
        };
        rp_attention(&c->cc, &aa, c->attn_scratch, c->attn_scratch_per_thread);
        TRACE("kqv_out", e, d->att, wo);
        rp_matmul(&c->cc, L->wo, d->att, n, d->tmp);
        rp_ctx_delta(&c->cc, c->deltas, e, 1, &L->wo, &d->tmp, d->att, n);
        add_bias(d->tmp, L->bo, n, E);
        TRACE("attn_out", e, d->tmp, E);
        if (L->attn_post_norm) {
            rp_rmsnorm(d->tmp, d->tmp, L->attn_post_norm->data, E, n, hp->eps);
            TRACE("attn_post_norm", e, d->tmp, E);
        }
        rp_ctx_residual(c->deltas, e, d->x, d->tmp, n, E);
        TRACE("ffn_inp", e, d->x, E);

        /* After the last step's attention only the output rows matter. */
        if (e == plan->n_eff - 1 && ub->n_out < n) {
            for (int i = 0; i < ub->n_out; i++)
                if (ub->out_rows[i] != i)
                    memmove(d->x + (size_t)i * (size_t)E,
                            d->x + (size_t)ub->out_rows[i] * (size_t)E, (size_t)E * sizeof(float));
            n = ub->n_out;
            compacted = true;
            if (!n) break;
        }

        /* feed-forward */
        norm_rows(d->xn, d->x, L->ffn_norm, L->ffn_norm_b, E, n, hp->eps);
        TRACE("ffn_norm", e, d->xn, E);
        const rp_tensor *w2[2] = {L->ffn_gate, L->ffn_up};
        float *y2[2] = {d->gate, d->up};
        rp_matmul_n(&c->cc, 2, w2, y2, d->xn, n);
        rp_ctx_delta(&c->cc, c->deltas, e, 2, w2, y2, d->xn, n);
        TRACE("ffn_gate", e, d->gate, li->n_ff);
        TRACE("ffn_up", e, d->up, li->n_ff);
        const size_t nf = (size_t)n * (size_t)li->n_ff;
        if (cfg->act == RP_ACT_SILU)
            rp_silu_mul(d->gate, d->up, (int)nf);
        else if (cfg->act == RP_ACT_GELU_TANH)
            rp_gelu_tanh_mul(d->gate, d->up, (int)nf);
        else if (cfg->act == RP_ACT_GELU_TANH_F16)
            rp_gelu_tanh_f16_mul(d->gate, d->up, (int)nf);
        else
            rp_gelu_erf_mul(d->gate, d->up, (int)nf);
        TRACE(cfg->act == RP_ACT_SILU ? "ffn_swiglu" : "ffn_geglu", e, d->gate, li->n_ff);
        rp_matmul(&c->cc, L->ffn_down, d->gate, n, d->tmp);
        rp_ctx_delta(&c->cc, c->deltas, e, 1, &L->ffn_down, &d->tmp, d->gate, n);
        TRACE("ffn_out", e, d->tmp, E);
        if (L->ffn_post_norm) {
            rp_rmsnorm(d->tmp, d->tmp, L->ffn_post_norm->data, E, n, hp->eps);
            TRACE("ffn_post_norm", e, d->tmp, E);
        }
        rp_ctx_residual(c->deltas, e, d->x, d->tmp, n, E);
        TRACE("l_out", e, d->x, E);
    }
    if (e_end < plan->n_eff) {
        memcpy(ub->x_out, d->x, (size_t)n * (size_t)E * sizeof(float));
        return RP_OK;
    }
    rp_forward_output(c, ub, d->x, compacted, d->xn);
    return RP_OK;
}
#undef TRACE
