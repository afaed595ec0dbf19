/* qwen35: Qwen3.5, a hybrid of gated delta-net (linear attention) layers and
 * gated full-attention layers, with a NextN / MTP head after the trunk.
 *
 * Every layer: x += mixer(rmsnorm(x)); x += swiglu(rmsnorm(x)) where the
 * mixer is, by the source layer's kind,
 *   full attention: q|gate = W_q x (per head: head_dim query, head_dim gate),
 *     RMSNorm on q and k, partial rotary (multi-section, interleaved: for text
 *     every section gets the token's position, the 4th section position 0),
 *     softmax attention, out = W_o (attn * sigmoid(gate));
 *   gated delta-net: q|k|v = conv1d+SiLU(W_qkv x), z = W_gate x,
 *     beta = sigmoid(W_beta x), g = ssm_a * softplus(W_alpha x + dt_bias),
 *     L2-normalised q and k, the delta rule per v-head, out =
 *     W_out (rmsnorm(o) * w * silu(z)).
 * Semantics follow llama.cpp's src/models/qwen35.cpp; shapes and keys follow
 * its GGUF files. */
#include "arch/qwen35.h"
#include "arch/arch.h"
#include "arch/tensors.h"
#include "convert/synth.h"
#include "core/context.h"
#include "kernels/ops_delta.h"
#include "kernels/types.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- weights ------------------------------------------------------------- */

typedef struct q35_rec {
    const rp_tensor *qkv;   /* attn_qkv:  [n_embd] -> [conv_dim]  q | k | v */
    const rp_tensor *z;     /* attn_gate: [n_embd] -> [d_inner] */
    const rp_tensor *beta;  /* ssm_beta:  [n_embd] -> [n_head_v] */
    const rp_tensor *alpha; /* ssm_alpha: [n_embd] -> [n_head_v] */
    const rp_tensor *out;   /* ssm_out:   [d_inner] -> [n_embd] */
    const float *conv;      /* ssm_conv1d, tap-major: [d_conv][conv_dim] (owned copy) */
    const float *dt_bias;   /* ssm_dt.bias: [n_head_v] */
    const float *a;         /* ssm_a: [n_head_v] (= -exp(A_log)) */
    const float *norm;      /* ssm_norm: [d_state] */
    /* as bound (the floats above are read from them) */
    const rp_tensor *t_conv, *t_dt, *t_a, *t_norm;
} q35_rec;

typedef struct q35_nextn {
    const rp_tensor *eh_proj; /* [2 n_embd] -> [n_embd] over concat(enorm(e), hnorm(h)) */
    const float *enorm;       /* [n_embd] */
    const float *hnorm;       /* [n_embd] */
    const rp_tensor *embed;   /* nextn.embed_tokens, else token_embd */
    const rp_tensor *head;    /* nextn.shared_head_head, else output */
    const float *head_norm;   /* nextn.shared_head_norm, else output_norm: [n_embd] */
    /* as bound (NULL when the file has none) */
    const rp_tensor *t_enorm, *t_hnorm, *t_embed, *t_head, *t_head_norm;
} q35_nextn;

typedef struct q35_ext { /* m->layers[l].ext */
    q35_rec rec;
    q35_nextn nextn;
} q35_ext;

typedef struct q35_hp { /* m->arch_data */
    int d_conv;         /* ssm.conv_kernel */
    int d_state;        /* ssm.state_size: width of every q, k, v head */
    int n_head_k;       /* ssm.group_count */
    int n_head_v;       /* ssm.time_step_rank */
    int d_inner;        /* ssm.inner_size = n_head_v * d_state */
    int conv_dim;       /* 2 * n_head_k * d_state + d_inner */
    int sections[4];    /* rope.dimension_sections */
    uint8_t *rope_zero; /* [n_rot/2] pair i rotates with position 0 (4th section) */
    int n_nextn;
} q35_hp;

/* ---- the tensor table ----------------------------------------------------- */

/* qwen35's own dimensions (rp_dims) and layer features */
#define RP_DIM_Q35_CONV_DIM (RP_DIM_ARCH + 0) /* conv_dim: q | k | v channels */
#define RP_DIM_Q35_INNER    (RP_DIM_ARCH + 1) /* d_inner = n_head_v * d_state */
#define RP_DIM_Q35_HEAD_V   (RP_DIM_ARCH + 2) /* n_head_v: recurrent value heads */
#define RP_DIM_Q35_CONV     (RP_DIM_ARCH + 3) /* d_conv: conv taps */
#define RP_DIM_Q35_STATE    (RP_DIM_ARCH + 4) /* d_state: width of a recurrent head */
enum { Q35_F_ATTN = 1, Q35_F_REC = 2, Q35_F_NEXTN = 4 };

#define AT       RP_TAT_LAYER
#define REC(f)   RP_TAT_EXT(q35_ext, rec.f)
#define NEXTN(f) RP_TAT_EXT(q35_ext, nextn.f)
/* In binding order; synth makes them in this order too (the uniform and
 * normal values come from one generator, in row order). */
static const rp_tensor_def g_rows[] = {
    {RP_TROW("attn_norm.weight", EMBD, NONE, NORM), AT(attn_norm)},
    /* post_attention_norm is the FFN's input norm */
    {RP_TROW("post_attention_norm.weight", EMBD, NONE, NORM), AT(ffn_norm)},
    /* gated delta-net layers; a fused q|k|v counts as attn_v (llama.cpp's mixtures) */
    {RP_TROW("attn_qkv.weight", EMBD, Q35_CONV_DIM, ATTN_V), .when = Q35_F_REC, REC(qkv)},
    {RP_TROW("attn_gate.weight", EMBD, Q35_INNER, OTHER), .when = Q35_F_REC, REC(z)},
    {RP_TROW("ssm_conv1d.weight", Q35_CONV, Q35_CONV_DIM, OTHER), .gen = RP_GEN_NORMAL,
     .when = Q35_F_REC, REC(t_conv)},
    {RP_TROW("ssm_dt.bias", Q35_HEAD_V, NONE, OTHER), .gen = RP_GEN_UNIFORM, .lo = -4.0f,
     .hi = -2.0f, .when = Q35_F_REC, REC(t_dt)},
    /* -exp(A_log) */
    {RP_TROW("ssm_a", Q35_HEAD_V, NONE, OTHER), .gen = RP_GEN_UNIFORM, .lo = -8.0f, .hi = -1.0f,
     .when = Q35_F_REC, REC(t_a)},
    {RP_TROW("ssm_beta.weight", EMBD, Q35_HEAD_V, OTHER), .when = Q35_F_REC, REC(beta)},
    {RP_TROW("ssm_alpha.weight", EMBD, Q35_HEAD_V, OTHER), .when = Q35_F_REC, REC(alpha)},
    {RP_TROW("ssm_norm.weight", Q35_STATE, NONE, NORM), .when = Q35_F_REC, REC(t_norm)},
    {RP_TROW("ssm_out.weight", Q35_INNER, EMBD, OTHER), .when = Q35_F_REC, REC(out)},
    /* gated full-attention layers: each head's query, then its output gate */
    {RP_TROW("attn_q.weight", EMBD, QG, ATTN_Q), .when = Q35_F_ATTN, AT(wq)},
    {RP_TROW("attn_k.weight", EMBD, KV, ATTN_K), .when = Q35_F_ATTN, AT(wk)},
    {RP_TROW("attn_v.weight", EMBD, KV_V, ATTN_V), .when = Q35_F_ATTN, AT(wv)},
    {RP_TROW("attn_output.weight", O, EMBD, ATTN_OUTPUT), .when = Q35_F_ATTN, AT(wo)},
    {RP_TROW("attn_q_norm.weight", HEAD, NONE, NORM), .when = Q35_F_ATTN, AT(q_norm)},
    {RP_TROW("attn_k_norm.weight", HEAD, NONE, NORM), .when = Q35_F_ATTN, AT(k_norm)},
    {RP_TROW("ffn_gate.weight", EMBD, FF, FFN_GATE), AT(ffn_gate)},
    {RP_TROW("ffn_up.weight", EMBD, FF, FFN_UP), AT(ffn_up)},
    {RP_TROW("ffn_down.weight", FF, EMBD, FFN_DOWN), AT(ffn_down)},
    /* the NextN / MTP head layers after the trunk (full attention) */
    {RP_TROW("nextn.eh_proj.weight", EMBD2, EMBD, OTHER), .when = Q35_F_NEXTN, NEXTN(eh_proj)},
    {RP_TROW("nextn.enorm.weight", EMBD, NONE, NORM), .when = Q35_F_NEXTN, NEXTN(t_enorm)},
    {RP_TROW("nextn.hnorm.weight", EMBD, NONE, NORM), .when = Q35_F_NEXTN, NEXTN(t_hnorm)},
    /* absent: token_embd, output, output_norm */
    {RP_TROW("nextn.embed_tokens.weight", EMBD, VOCAB, OTHER), .opt = true, .when = Q35_F_NEXTN,
     NEXTN(t_embed)},
    {RP_TROW("nextn.shared_head_head.weight", EMBD, VOCAB, OTHER), .opt = true, .when = Q35_F_NEXTN,
     NEXTN(t_head)},
    {RP_TROW("nextn.shared_head_norm.weight", EMBD, NONE, NORM), .opt = true, .when = Q35_F_NEXTN,
     .make = Q35_F_NEXTN, NEXTN(t_head_norm)},
};
#undef AT
#undef REC
#undef NEXTN

static const rp_tensor_table g_tensors = {
    .what = "qwen35",
    .rows = g_rows,
    .n_rows = RP_ARRAY_LEN(g_rows),
    .base = &rp_io_tensors,
};

static unsigned layer_features(bool rec, bool nextn) {
    return (rec ? Q35_F_REC : Q35_F_ATTN) | (nextn ? Q35_F_NEXTN : 0u);
}

/* The recurrent part of the dimensions. */
static void set_rec_dims(rp_dims *d, int conv_dim, int d_inner, int n_head_v, int d_conv,
                         int d_state) {
    d->v[RP_DIM_Q35_CONV_DIM] = conv_dim;
    d->v[RP_DIM_Q35_INNER] = d_inner;
    d->v[RP_DIM_Q35_HEAD_V] = n_head_v;
    d->v[RP_DIM_Q35_CONV] = d_conv;
    d->v[RP_DIM_Q35_STATE] = d_state;
}

static const q35_ext *ext_of(const rp_model *m, int l) {
    return m->layers[l].ext;
}

/* The conv kernel tap-major, [d_conv][conv_dim] floats (GGUF stores
 * [conv_dim][d_conv] in any readable type): an owned copy, so each tap is a
 * contiguous row across channels. */
static rp_status conv_taps(rp_model *m, const rp_tensor *t, const float **out) {
    const rp_type_traits *tt = rp_type_get(t->type);
    if (!tt->to_float)
        return rp_fail(RP_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which reprise cannot read",
                       m->path, t->name, tt->name);
    const int64_t k = t->ne[0], ch = t->ne[1];
    float *f = rp_malloc((size_t)(k * ch) * sizeof(float), "conv taps");
    float *row = rp_malloc((size_t)k * sizeof(float), "conv taps");
    if (!f || !row || !rp_model_own(m, f)) {
        free(f);
        free(row);
        return RP_ERR_NOMEM;
    }
    for (int64_t c = 0; c < ch; c++) {
        tt->to_float(rp_tensor_row(t, c), row, k);
        for (int64_t i = 0; i < k; i++) f[i * ch + c] = row[i];
    }
    free(row);
    *out = f;
    return RP_OK;
}

static const float *fdata(const rp_tensor *t) {
    return t ? (const float *)t->data : NULL;
}

/* What binding leaves to do: the conv taps re-laid out, the float views. */
static rp_status finish_rec(rp_model *m, q35_rec *r) {
    rp_status s = conv_taps(m, r->t_conv, &r->conv);
    if (s) return s;
    r->dt_bias = fdata(r->t_dt);
    r->a = fdata(r->t_a);
    r->norm = fdata(r->t_norm);
    return RP_OK;
}

static rp_status finish_nextn(rp_model *m, q35_nextn *x) {
    if (x->t_embed && !rp_type_get(x->t_embed->type)->to_float)
        return rp_fail(RP_ERR_UNSUPPORTED, "%s: %s has type %s, which reprise cannot read", m->path,
                       x->t_embed->name, rp_type_name(x->t_embed->type));
    x->enorm = fdata(x->t_enorm);
    x->hnorm = fdata(x->t_hnorm);
    x->embed = x->t_embed ? x->t_embed : m->tok_embd;
    x->head = x->t_head ? x->t_head : m->output;
    x->head_norm = x->t_head_norm ? fdata(x->t_head_norm) : fdata(m->output_norm);
    return RP_OK;
}

static rp_status bind_layer(rp_model *m, int l, const q35_hp *q) {
    const rp_layer_info *li = &m->info[l];
    q35_ext *x = rp_calloc(1, sizeof *x, "layer tensors");
    if (!x) return RP_ERR_NOMEM;
    m->layers[l].ext = x;
    rp_dims d;
    rp_dims_of_layer(&d, m, l);
    set_rec_dims(&d, q->conv_dim, q->d_inner, q->n_head_v, q->d_conv, q->d_state);
    const bool rec = li->kind == RP_LAYER_RECURRENT, nextn = l >= m->hp.n_trunk;
    rp_status s = rp_bind_layer_rows(m, &g_tensors, l, layer_features(rec, nextn), &d, x);
    if (!s && rec) s = finish_rec(m, &x->rec);
    if (!s && nextn) s = finish_nextn(m, &x->nextn);
    return s;
}

/* ---- hyperparameters ----------------------------------------------------- */

/* Which rotary pairs use the 4th (extra) position of multi-section rope. For
 * text, sections 0..2 all carry the token position and the 4th carries 0; with
 * interleaved sections (ggml's IMROPE, which llama.cpp uses for qwen35) pair i
 * belongs to section i % 3 while i < 3 * sections[i % 3], else to the 4th. */
static rp_status load_sections(rp_model *m, q35_hp *q) {
    const int half = m->hp.rope[0].n_rot / 2;
    char key[160];
    rp_arch_key(m, "rope.dimension_sections", key, sizeof key);
    const rp_gguf_val *v = rp_gguf_get(m->gguf, key);
    q->sections[0] = half; /* absent: plain rope over n_rot */
    if (v) {
        if (v->type != RP_GGUF_ARRAY || !rp_gguf_type_is_int((int)v->arr.type) || v->arr.n < 1 ||
            v->arr.n > 4)
            return rp_fail(RP_ERR_FORMAT,
                           "%s: key '%s' must be an integer array of at most 4 entries", m->path,
                           key);
        for (int i = 0; i < 4; i++) {
            int64_t x = i < (int)v->arr.n ? rp_gguf_arr_i64(v, (uint64_t)i) : 0;
            if (x < 0 || x > 1 << 16)
                return rp_fail(RP_ERR_FORMAT, "%s: key '%s'[%d] = %lld is out of range", m->path,
                               key, i, (long long)x);
            q->sections[i] = (int)x;
        }
    }
    const int sum = q->sections[0] + q->sections[1] + q->sections[2] + q->sections[3];
    if (half > 0 &&
        (q->sections[0] + q->sections[1] + q->sections[2] == 0 || sum > m->hp.head_dim_k))
        return rp_fail(
            RP_ERR_FORMAT,
            "%s: key '%s' = [%d, %d, %d, %d]: the first three sections must not all be 0 and "
            "the sum must not exceed head_dim %d",
            m->path, key, q->sections[0], q->sections[1], q->sections[2], q->sections[3],
            m->hp.head_dim_k);
    q->rope_zero = rp_calloc((size_t)half + 1, 1, "rope sections");
    if (!q->rope_zero) return RP_ERR_NOMEM;
    for (int i = 0; v && i < half; i++) { /* absent key: plain rope, no pair at position 0 */
        const int sec = i % sum, r = sec % 3;
        q->rope_zero[i] = !(sec < 3 * q->sections[r]);
    }
    return RP_OK;
}

static rp_status load_qwen35(rp_model *m) {
    rp_status s = rp_load_transformer_hparams(m);
    if (s) return s;
    rp_hparams *hp = &m->hp;
    hp->rope_style = RP_ROPE_NEOX;
    q35_hp *q = rp_calloc(1, sizeof *q, "qwen35 hyperparameters");
    if (!q) return RP_ERR_NOMEM;
    m->arch_data = q;
    if ((s = rp_hp_u32(m, "ssm.conv_kernel", true, 0, 1, 64, &q->d_conv))) return s;
    if ((s = rp_hp_u32(m, "ssm.state_size", true, 0, 1, RP_DELTA_MAX_D, &q->d_state))) return s;
    if ((s = rp_hp_u32(m, "ssm.group_count", true, 0, 1, 1 << 12, &q->n_head_k))) return s;
    if ((s = rp_hp_u32(m, "ssm.time_step_rank", true, 0, 1, 1 << 12, &q->n_head_v))) return s;
    if ((s = rp_hp_u32(m, "ssm.inner_size", true, 0, 1, 1 << 22, &q->d_inner))) return s;
    if (q->d_inner != q->n_head_v * q->d_state)
        return rp_fail(RP_ERR_FORMAT,
                       "%s: ssm.inner_size %d is not ssm.time_step_rank %d x ssm.state_size %d "
                       "(the delta rule needs "
                       "value heads as wide as key heads)",
                       m->path, q->d_inner, q->n_head_v, q->d_state);
    if (q->n_head_v % q->n_head_k)
        return rp_fail(RP_ERR_FORMAT,
                       "%s: ssm.time_step_rank %d is not a multiple of ssm.group_count %d", m->path,
                       q->n_head_v, q->n_head_k);
    q->conv_dim = 2 * q->n_head_k * q->d_state + q->d_inner;
    if (hp->head_dim_k != hp->head_dim_v)
        return rp_fail(RP_ERR_FORMAT,
                       "%s: attention key_length %d differs from value_length %d (the output gate "
                       "needs them equal)",
                       m->path, hp->head_dim_k, hp->head_dim_v);
    if ((s = load_sections(m, q))) return s;
    q->n_nextn = hp->n_layer - hp->n_trunk;

    /* layer kinds: the explicit array when present, else the interval */
    int *rec = rp_calloc((size_t)hp->n_layer, sizeof *rec, "layer kinds");
    if (!rec) return RP_ERR_NOMEM;
    bool found = false;
    if ((s = rp_hp_layer_arr(m, "attention.recurrent_layers", rec, &found))) {
        free(rec);
        return s;
    }
    if (!found) {
        int interval = 4;
        if ((s = rp_hp_u32(m, "full_attention_interval", false, 4, 1, 1u << 20, &interval))) {
            free(rec);
            return s;
        }
        for (int l = 0; l < hp->n_layer; l++) rec[l] = l < hp->n_trunk && (l + 1) % interval != 0;
    }
    const uint64_t conv_f = (uint64_t)(q->d_conv - 1) * (uint64_t)q->conv_dim;
    const uint64_t ssm_f = (uint64_t)q->n_head_v * (uint64_t)q->d_state * (uint64_t)q->d_state;
    for (int l = 0; l < hp->n_layer; l++) {
        rp_layer_info *li = &m->info[l];
        if (rec[l] && l >= hp->n_trunk) {
            free(rec);
            return rp_fail(RP_ERR_FORMAT,
                           "%s: attention.recurrent_layers marks layer %d recurrent, but it is a "
                           "NextN/MTP head layer (full attention)",
                           m->path, l);
        }
        if (rec[l]) {
            li->kind = RP_LAYER_RECURRENT;
            li->has_kv = false;
            li->rec_floats = (size_t)(conv_f + ssm_f);
        }
    }
    free(rec);
    if ((s = rp_bind_io(m))) return s;
    for (int l = 0; l < hp->n_layer; l++)
        if ((s = bind_layer(m, l, q))) return s;
    return RP_OK;
}

static void unload_qwen35(rp_model *m) {
    q35_hp *q = m->arch_data;
    if (q) free(q->rope_zero);
    free(q);
    m->arch_data = NULL;
}

/* ---- scratch ------------------------------------------------------------- */

typedef struct q35_buf {
    int n;       /* rows the buffers hold */
    float *x;    /* [n][n_embd] residual stream */
    float *xn;   /* [n][n_embd] normed sublayer input */
    float *tmp;  /* [n][n_embd] sublayer output */
    float *big;  /* [n][max(conv_dim, 2 n_head head_dim)] q|k|v (delta-net) or q|gate (attention) */
    float *z;    /* [n][d_inner] */
    float *q;    /* [n][n_head head_dim] */
    float *k;    /* [n][n_head_kv head_dim] */
    float *v;    /* [n][n_head_kv head_dim] */
    float *att;  /* [n][max(n_head head_dim, d_inner)] mixer output before its projection */
    float *beta; /* [n][n_head_v] */
    float *alpha;          /* [n][n_head_v] */
    float *gate;           /* [n][n_ff] */
    float *up;             /* [n][n_ff] */
    float *cat;            /* [n][2 n_embd] NextN input (head only) */
    float *rope;           /* [n][n_rot] cos/sin */
    float *rope0;          /* [n_rot] cos/sin at position 0 */
    const rp_kv_view **kv; /* [n] */
    float **cst;           /* [n] conv state of the token's sequence */
    float **sst;           /* [n] recurrent state of the token's sequence */
    void *block;
} q35_buf;

static void buf_free(q35_buf *b) {
    rp_free_aligned(b->block);
    free(b->kv);
    free(b->cst);
    free(b->sst);
    memset(b, 0, sizeof *b);
}

static rp_status buf_init(q35_buf *b, const rp_model *m, int n, bool head) {
    const q35_hp *q = m->arch_data;
    const size_t E = (size_t)m->hp.n_embd, N = (size_t)n;
    size_t wqg = 0, wq = 0, wk = 0, wf = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const rp_layer_info *li = &m->info[l];
        wf = RP_MAX(wf, (size_t)li->n_ff);
        if (li->kind == RP_LAYER_RECURRENT) continue;
        wq = RP_MAX(wq, (size_t)li->n_head * (size_t)li->head_dim_k);
        wqg = RP_MAX(wqg, 2 * (size_t)li->n_head * (size_t)li->head_dim_k);
        wk = RP_MAX(wk, (size_t)li->n_head_kv * (size_t)li->head_dim_k);
    }
    const size_t nrot = (size_t)m->hp.rope[0].n_rot + 2;
    size_t sizes[] = {
        N * E,
        N * E,
        N * E,
        N * RP_MAX((size_t)q->conv_dim, wqg),
        N * (size_t)q->d_inner,
        N * wq,
        N * wk,
        N * wk,
        N * RP_MAX(wq, (size_t)q->d_inner),
        N * (size_t)q->n_head_v,
        N * (size_t)q->n_head_v,
        N * wf,
        N * wf,
        head ? N * 2 * E : 1,
        N * nrot,
        nrot,
    };
    float **dst[] = {&b->x,   &b->xn,   &b->tmp,   &b->big,  &b->z,  &b->q,   &b->k,    &b->v,
                     &b->att, &b->beta, &b->alpha, &b->gate, &b->up, &b->cat, &b->rope, &b->rope0};
    _Static_assert(RP_ARRAY_LEN(sizes) == RP_ARRAY_LEN(dst), "one size per buffer");
    size_t total = 0;
    for (size_t i = 0; i < RP_ARRAY_LEN(sizes); i++)
        total += rp_align_up(sizes[i] * sizeof(float), 64);
    memset(b, 0, sizeof *b);
    b->n = n;
    b->block = rp_alloc_aligned(total, "qwen35 activations");
    b->kv = rp_calloc(N, sizeof *b->kv, "KV views");
    b->cst = rp_calloc(N, sizeof *b->cst, "state views");
    b->sst = rp_calloc(N, sizeof *b->sst, "state views");
    if (!b->block || !b->kv || !b->cst || !b->sst) {
        buf_free(b);
        return RP_ERR_NOMEM;
    }
    char *p = b->block;
    for (size_t i = 0; i < RP_ARRAY_LEN(sizes); i++) {
        *dst[i] = (float *)p;
        p += rp_align_up(sizes[i] * sizeof(float), 64);
    }
    return RP_OK;
}

/* The matmul scratch must hold the widest input this architecture feeds:
 * d_inner (ssm_out) and 2 n_embd (eh_proj) beside the context's own. */
static rp_status ensure_wbuf(rp_context *c) {
    const q35_hp *q = c->model->arch_data;
    int64_t widest = RP_MAX((int64_t)q->d_inner, 2 * (int64_t)c->model->hp.n_embd);
    size_t need = rp_matmul_scratch(widest, c->n_ubatch);
    if (need <= c->cc.wbuf_size) return RP_OK;
    uint8_t *w = rp_alloc_aligned(need, "matmul scratch");
    if (!w) return RP_ERR_NOMEM;
    rp_free_aligned(c->cc.wbuf);
    c->cc.wbuf = w;
    c->cc.wbuf_size = need;
    return RP_OK;
}

static rp_status ctx_init_qwen35(rp_context *c) {
    rp_status s = ensure_wbuf(c);
    if (s) return s;
    q35_buf *b = rp_calloc(1, sizeof *b, "qwen35 scratch");
    if (!b) return RP_ERR_NOMEM;
    if ((s = buf_init(b, c->model, c->n_ubatch, false))) {
        free(b);
        return s;
    }
    c->arch_ctx = b;
    return RP_OK;
}

static void ctx_free_qwen35(rp_context *c) {
    q35_buf *b = c->arch_ctx;
    if (!b) return;
    buf_free(b);
    free(b);
    c->arch_ctx = NULL;
}

/* ---- blocks -------------------------------------------------------------- */

/* cos/sin rows for the batch positions; pairs of the 4th rope section take
 * position 0. */
static void rope_table(const rp_model *m, q35_buf *b, const int32_t *pos, int n) {
    const q35_hp *q = m->arch_data;
    const rp_rope_params *rp = &m->hp.rope[0];
    const int n_rot = rp->n_rot;
    if (n_rot <= 0) return;
    rp_rope_cache(b->rope, pos, n, rp);
    bool any = false;
    for (int i = 0; i < n_rot / 2; i++) any |= q->rope_zero[i] != 0;
    if (!any) return;
    const int32_t zero = 0;
    rp_rope_cache(b->rope0, &zero, 1, rp);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < n_rot / 2; i++)
            if (q->rope_zero[i]) {
                b->rope[(size_t)t * (size_t)n_rot + 2 * (size_t)i] = b->rope0[2 * i];
                b->rope[(size_t)t * (size_t)n_rot + 2 * (size_t)i + 1] = b->rope0[2 * i + 1];
            }
}

/* Gated full attention of layer L over b->xn (n rows), K/V written to and read
 * from the views in b->kv; result [n][n_embd] in b->tmp. */
static void attn_mixer(rp_context *c, q35_buf *b, const rp_layer *L, const rp_layer_info *li,
                       const int32_t *pos, int n) {
    const rp_hparams *hp = &c->model->hp;
    const int nh = li->n_head, nkv = li->n_head_kv, hd = li->head_dim_k;
    const int wqg = 2 * nh * hd, wq = nh * hd, wk = nkv * hd;
    const rp_tensor *w3[3] = {L->wq, L->wk, L->wv};
    float *y3[3] = {b->big, b->k, b->v};
    rp_matmul_n(&c->cc, 3, w3, y3, b->xn, n);
    /* per head the projection holds [query | gate] */
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++)
            memcpy(b->q + (size_t)t * (size_t)wq + (size_t)h * (size_t)hd,
                   b->big + (size_t)t * (size_t)wqg + (size_t)h * 2 * (size_t)hd,
                   (size_t)hd * sizeof(float));
    rp_rmsnorm_heads(b->q, L->q_norm->data, hd, nh, n, wq, hp->eps);
    rp_rmsnorm_heads(b->k, L->k_norm->data, hd, nkv, n, wk, hp->eps);
    if (hp->rope[0].n_rot > 0) {
        rp_rope_apply(b->q, n, wq, nh, hd, hp->rope[0].n_rot, b->rope, RP_ROPE_NEOX);
        rp_rope_apply(b->k, n, wk, nkv, hd, hp->rope[0].n_rot, b->rope, RP_ROPE_NEOX);
    }
    for (int t = 0; t < n; t++)
        rp_kv_write(b->kv[t], nkv, hd, hd, pos[t], b->k + (size_t)t * (size_t)wk,
                    b->v + (size_t)t * (size_t)wk);
    rp_attn_args aa = {
        .n_tok = n,
        .q = b->q,
        .q_stride = wq,
        .out = b->att,
        .out_stride = wq,
        .n_head = nh,
        .n_head_kv = nkv,
        .head_dim_k = hd,
        .head_dim_v = hd,
        .scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)hd),
        .softcap = 0,
        .window = 0,
        .pos = pos,
        .kv = b->kv,
    };
    rp_attention(&c->cc, &aa, c->attn_scratch, c->attn_scratch_per_thread);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++) {
            float *o = b->att + (size_t)t * (size_t)wq + (size_t)h * (size_t)hd;
            const float *g =
                b->big + (size_t)t * (size_t)wqg + (size_t)h * 2 * (size_t)hd + (size_t)hd;
            for (int i = 0; i < hd; i++) o[i] *= 1.0f / (1.0f + expf(-g[i]));
        }
    rp_matmul(&c->cc, L->wo, b->att, n, b->tmp);
}

/* Gated delta-net of source layer `src` over b->xn; the conv and recurrent
 * states are in b->cst / b->sst per token; result in b->tmp. */
static void rec_mixer(rp_context *c, q35_buf *b, const q35_rec *r, int n) {
    const rp_model *m = c->model;
    const q35_hp *q = m->arch_data;
    const float eps = m->hp.eps;
    const int key_dim = q->n_head_k * q->d_state;
    const rp_tensor *w4[4] = {r->qkv, r->z, r->beta, r->alpha};
    float *y4[4] = {b->big, b->z, b->beta, b->alpha};
    rp_matmul_n(&c->cc, 4, w4, y4, b->xn, n);
    rp_conv1d_silu(&c->cc, b->big, n, q->conv_dim, q->conv_dim, r->conv, q->d_conv, b->cst);
    rp_l2norm_heads(b->big, q->d_state, q->n_head_k, n, q->conv_dim, eps);
    rp_l2norm_heads(b->big + key_dim, q->d_state, q->n_head_k, n, q->conv_dim, eps);
    rp_delta_gates(b->beta, b->alpha, r->dt_bias, r->a, n, q->n_head_v);
    rp_delta_args da = {
        .n_tok = n,
        .n_head_k = q->n_head_k,
        .n_head_v = q->n_head_v,
        .d = q->d_state,
        .q = b->big,
        .k = b->big + key_dim,
        .qk_stride = q->conv_dim,
        .v = b->big + 2 * key_dim,
        .v_stride = q->conv_dim,
        .g = b->alpha,
        .beta = b->beta,
        .out = b->att,
        .out_stride = q->d_inner,
        .scale = 1.0f / sqrtf((float)q->d_state),
        .state = b->sst,
    };
    rp_gated_delta(&c->cc, &da);
    rp_rmsnorm_gated(b->att, r->norm, b->z, q->d_state, q->n_head_v, n, eps);
    rp_matmul(&c->cc, r->out, b->att, n, b->tmp);
}

static void add_rows(float *x, const float *y, int n, int E) {
    for (int t = 0; t < n; t++) rp_add(x + (size_t)t * (size_t)E, y + (size_t)t * (size_t)E, E);
}

/* x += down(silu(gate(norm(x))) * up(norm(x))) */
static void ffn(rp_context *c, q35_buf *b, const rp_layer *L, const rp_layer_info *li, int n) {
    const rp_hparams *hp = &c->model->hp;
    rp_rmsnorm(b->xn, b->x, L->ffn_norm->data, hp->n_embd, n, hp->eps);
    const rp_tensor *w2[2] = {L->ffn_gate, L->ffn_up};
    float *y2[2] = {b->gate, b->up};
    rp_matmul_n(&c->cc, 2, w2, y2, b->xn, n);
    rp_silu_mul(b->gate, b->up, n * li->n_ff);
    rp_matmul(&c->cc, L->ffn_down, b->gate, n, b->tmp);
    add_rows(b->x, b->tmp, n, hp->n_embd);
}

static rp_status forward_qwen35(rp_context *c, const rp_ubatch *ub) {
    const rp_model *m = c->model;
    const rp_hparams *hp = &m->hp;
    const q35_hp *q = m->arch_data;
    const rp_plan *plan = c->plan;
    q35_buf *b = c->arch_ctx;
    const int E = hp->n_embd;
    int n = ub->n_tok;
    RP_ASSERT(n <= b->n);
    const bool one_tok = c->cc.one_tok;

    for (int t = 0; t < n; t++) {
        float *xr = b->x + (size_t)t * (size_t)E;
        if (ub->embd)
            memcpy(xr, ub->embd + (size_t)t * (size_t)E, (size_t)E * sizeof(float));
        else
            rp_tensor_get_row(m->tok_embd, ub->token[t], xr);
    }
    rope_table(m, b, ub->pos, n);

    bool compacted = false;
    for (int e = 0; e < plan->n_eff; e++) {
        /* what the layer is comes from src; where it runs (state slot) from e */
        const int src = plan->src[e];
        const rp_layer *L = &m->layers[src];
        const rp_layer_info *li = &m->info[src];
        rp_rmsnorm(b->xn, b->x, L->attn_norm->data, E, n, hp->eps);
        if (li->kind == RP_LAYER_RECURRENT) {
            for (int t = 0; t < n; t++) {
                float *st = c->state.rec[(size_t)e * (size_t)c->n_seq + (size_t)ub->seq[t]];
                b->cst[t] = st;
                b->sst[t] = st + (size_t)(q->d_conv - 1) * (size_t)q->conv_dim;
            }
            rec_mixer(c, b, &ext_of(m, src)->rec, n);
        } else {
            for (int t = 0; t < n; t++) b->kv[t] = rp_ctx_kv(c, e, ub->seq[t]);
            attn_mixer(c, b, L, li, ub->pos, n);
        }
        add_rows(b->x, b->tmp, n, E);

        /* after the last step's mixer only the output rows matter */
        if (e == plan->n_eff - 1 && ub->n_out < n) {
            for (int i = 0; i < ub->n_out; i++)
                if (ub->out_rows[i] != i)
                    memmove(b->x + (size_t)i * (size_t)E,
                            b->x + (size_t)ub->out_rows[i] * (size_t)E, (size_t)E * sizeof(float));
            n = ub->n_out;
            compacted = true;
            if (!n) break;
        }
        /* the output rows as a lone output row (rp_compute.one_tok_out) */
        if (e == plan->n_eff - 1 && c->cc.one_tok_out) c->cc.one_tok = true;
        ffn(c, b, L, li, n);
    }
    rp_forward_output(c, ub, b->x, compacted, b->xn);
    c->cc.one_tok = one_tok;
    return RP_OK;
}

/* ---- the NextN / MTP head ------------------------------------------------ */

struct rp_qwen35_mtp {
    rp_context *c; /* borrowed: model, pool, matmul and attention scratch */
    int layer;     /* the head's layer index (n_trunk) */
    int n_seq, n_ctx;
    rp_kv_view *kv; /* [n_seq] */
    int *len;       /* [n_seq] */
    void *kv_block;
    uint64_t kv_bytes;
    q35_buf b;
};

bool rp_qwen35_has_mtp(const rp_model *m) {
    return m && m->arch && !strcmp(m->arch->name, "qwen35") && m->hp.n_layer > m->hp.n_trunk;
}

void rp_qwen35_mtp_free(rp_qwen35_mtp *h) {
    if (!h) return;
    buf_free(&h->b);
    rp_free_aligned(h->kv_block);
    free(h->kv);
    free(h->len);
    free(h);
}

rp_status rp_qwen35_mtp_new(rp_context *c, rp_qwen35_mtp **out) {
    *out = NULL;
    const rp_model *m = c->model;
    if (!rp_qwen35_has_mtp(m))
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s: the model has no NextN/MTP head (a qwen35 file with "
                       "nextn_predict_layers >= 1 is needed)",
                       m->path);
    if (m->hp.n_layer - m->hp.n_trunk != 1)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s: %d NextN/MTP layers; only a single head layer is supported", m->path,
                       m->hp.n_layer - m->hp.n_trunk);
    rp_qwen35_mtp *h = rp_calloc(1, sizeof *h, "MTP head");
    if (!h) return RP_ERR_NOMEM;
    h->c = c;
    h->layer = m->hp.n_trunk;
    h->n_seq = c->n_seq;
    h->n_ctx = c->n_ctx;
    const rp_layer_info *li = &m->info[h->layer];
    const int tk = c->params.type_k, tv = c->params.type_v;
    const size_t per_k =
        (size_t)li->n_head_kv * (size_t)h->n_ctx * rp_kv_row_bytes(tk, li->head_dim_k);
    const size_t per_v =
        (size_t)li->n_head_kv * (size_t)h->n_ctx * rp_kv_row_bytes(tv, li->head_dim_v);
    h->kv = rp_calloc((size_t)h->n_seq, sizeof *h->kv, "MTP KV views");
    h->len = rp_calloc((size_t)h->n_seq, sizeof *h->len, "MTP lengths");
    h->kv_block = rp_alloc_aligned((per_k + per_v) * (size_t)h->n_seq, "MTP KV cache");
    rp_status s = h->kv && h->len && h->kv_block ? RP_OK : RP_ERR_NOMEM;
    if (!s) s = buf_init(&h->b, m, c->n_ubatch, true);
    if (s) {
        rp_qwen35_mtp_free(h);
        return s;
    }
    uint8_t *base = h->kv_block;
    for (int i = 0; i < h->n_seq; i++) {
        h->kv[i].k = base + (per_k + per_v) * (size_t)i;
        h->kv[i].v = base + (per_k + per_v) * (size_t)i + per_k;
        h->kv[i].type_k = tk;
        h->kv[i].type_v = tv;
        h->kv[i].cap = h->n_ctx;
    }
    h->kv_bytes = (uint64_t)(per_k + per_v) * (uint64_t)h->n_seq;
    *out = h;
    return RP_OK;
}

int rp_qwen35_mtp_seq_len(const rp_qwen35_mtp *h, int seq) {
    return seq >= 0 && seq < h->n_seq ? h->len[seq] : -1;
}

rp_status rp_qwen35_mtp_truncate(rp_qwen35_mtp *h, int seq, int p) {
    if (seq < 0 || seq >= h->n_seq)
        return rp_fail(RP_ERR_INVALID_ARG, "MTP head: sequence %d out of range", seq);
    if (p < 0 || p > h->len[seq])
        return rp_fail(RP_ERR_INVALID_ARG,
                       "MTP head: truncate sequence %d to %d: it has %d positions", seq, p,
                       h->len[seq]);
    h->len[seq] = p;
    return RP_OK;
}

uint64_t rp_qwen35_mtp_state_bytes(const rp_qwen35_mtp *h) {
    return h->kv_bytes;
}

/* One chunk of at most b.n rows (validated by the caller). */
static void mtp_chunk(rp_qwen35_mtp *h, const rp_qwen35_mtp_batch *in, int r0, int n,
                      const int32_t *seq) {
    rp_context *c = h->c;
    const rp_model *m = c->model;
    const rp_hparams *hp = &m->hp;
    const int E = hp->n_embd;
    const rp_layer *L = &m->layers[h->layer];
    const rp_layer_info *li = &m->info[h->layer];
    const q35_nextn *x = &ext_of(m, h->layer)->nextn;
    q35_buf *b = &h->b;
    const int32_t *pos = in->pos + r0;
    /* cat = [enorm(embed(token)) | hnorm(h)] */
    for (int t = 0; t < n; t++) {
        float *row = b->cat + (size_t)t * 2 * (size_t)E;
        rp_tensor_get_row(x->embed, in->token[r0 + t], b->tmp);
        rp_rmsnorm(row, b->tmp, x->enorm, E, 1, hp->eps);
        const float *hr = in->hidden + (size_t)(r0 + t) * (size_t)E;
        if (in->hidden_raw) {
            rp_rmsnorm(b->tmp, hr, m->output_norm->data, E, 1, hp->eps);
            hr = b->tmp;
        }
        rp_rmsnorm(row + E, hr, x->hnorm, E, 1, hp->eps);
    }
    rp_matmul(&c->cc, x->eh_proj, b->cat, n, b->x);
    rope_table(m, b, pos, n);
    rp_rmsnorm(b->xn, b->x, L->attn_norm->data, E, n, hp->eps);
    for (int t = 0; t < n; t++) b->kv[t] = &h->kv[seq[r0 + t]];
    attn_mixer(c, b, L, li, pos, n);
    add_rows(b->x, b->tmp, n, E);
    ffn(c, b, L, li, n);
    rp_rmsnorm(b->xn, b->x, x->head_norm, E, n, hp->eps);
    if (in->hidden_out)
        memcpy(in->hidden_out + (size_t)r0 * (size_t)E, b->xn,
               (size_t)n * (size_t)E * sizeof(float));
    if (in->logits)
        rp_matmul(&c->cc, x->head, b->xn, n, in->logits + (size_t)r0 * (size_t)hp->n_vocab);
}

rp_status rp_qwen35_mtp_decode(rp_qwen35_mtp *h, const rp_qwen35_mtp_batch *in) {
    const rp_model *m = h->c->model;
    if (!in || in->n < 1 || !in->token || !in->hidden || !in->pos)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "MTP head: empty batch (token, hidden and pos are required)");
    int32_t *seq = rp_malloc((size_t)in->n * sizeof *seq, "MTP batch");
    int *next = rp_malloc((size_t)h->n_seq * sizeof *next, "MTP batch");
    rp_status s = seq && next ? RP_OK : RP_ERR_NOMEM;
    if (!s) memcpy(next, h->len, (size_t)h->n_seq * sizeof *next);
    for (int i = 0; !s && i < in->n; i++) {
        const int sq = in->seq ? in->seq[i] : 0;
        if (sq < 0 || sq >= h->n_seq)
            s = rp_fail(RP_ERR_INVALID_ARG, "MTP head: row %d has sequence id %d (context has %d)",
                        i, sq, h->n_seq);
        else if (in->token[i] < 0 || in->token[i] >= m->hp.n_vocab)
            s = rp_fail(RP_ERR_INVALID_ARG,
                        "MTP head: row %d has token id %d, outside the vocabulary (0..%d)", i,
                        in->token[i], m->hp.n_vocab - 1);
        else if (in->pos[i] != next[sq])
            s = rp_fail(RP_ERR_INVALID_ARG,
                        "MTP head: row %d of sequence %d has position %d, expected %d", i, sq,
                        in->pos[i], next[sq]);
        else if (in->pos[i] >= h->n_ctx)
            s = rp_fail(RP_ERR_CONTEXT_FULL,
                        "MTP head: context full: sequence %d reached %d positions (n_ctx %d)", sq,
                        in->pos[i], h->n_ctx);
        else {
            seq[i] = sq;
            next[sq]++;
        }
    }
    for (int r0 = 0; !s && r0 < in->n; r0 += h->b.n) {
        const int n = RP_MIN(h->b.n, in->n - r0);
        mtp_chunk(h, in, r0, n, seq);
        for (int t = r0; t < r0 + n; t++) h->len[seq[t]] = in->pos[t] + 1;
    }
    free(seq);
    free(next);
    return s;
}

/* The head as qwen35's draft hook (core/draft.h). */
static rp_status draft_create(rp_context *c, void **impl) {
    return rp_qwen35_mtp_new(c, (rp_qwen35_mtp **)impl);
}
static void draft_destroy(void *impl) {
    rp_qwen35_mtp_free(impl);
}
static rp_status draft_decode(void *impl, const rp_draft_batch *b) {
    return rp_qwen35_mtp_decode(impl, b);
}
static int draft_seq_len(const void *impl, int seq) {
    return rp_qwen35_mtp_seq_len(impl, seq);
}
static rp_status draft_truncate(void *impl, int seq, int p) {
    return rp_qwen35_mtp_truncate(impl, seq, p);
}
static uint64_t draft_state_bytes(const void *impl) {
    return rp_qwen35_mtp_state_bytes(impl);
}

static const rp_draft_ops g_draft = {
    .needs = "a qwen35 file with nextn_predict_layers >= 1 is needed",
    .available = rp_qwen35_has_mtp,
    .create = draft_create,
    .destroy = draft_destroy,
    .decode = draft_decode,
    .seq_len = draft_seq_len,
    .truncate = draft_truncate,
    .state_bytes = draft_state_bytes,
};

/* ---- merge and synth ----------------------------------------------------- */

/* A merged file must say which layers recur: an index-derived pattern
 * (full_attention_interval) would give a repeated step its new index's kind. */
static rp_status merge_meta_qwen35(const rp_model *m, const rp_plan *p, rp_gguf_writer *w) {
    const int n_new = p->n_eff + (m->hp.n_layer - p->n_src);
    uint32_t *arr = rp_calloc((size_t)n_new, sizeof *arr, "recurrent_layers");
    if (!arr) return RP_ERR_NOMEM;
    for (int l = 0; l < n_new; l++) {
        const int src = l < p->n_eff ? p->src[l] : p->n_src + (l - p->n_eff);
        arr[l] = m->info[src].kind == RP_LAYER_RECURRENT;
    }
    char key[160];
    rp_status s =
        rp_gguf_w_set_arr(w, rp_arch_key(m, "attention.recurrent_layers", key, sizeof key),
                          RP_GGUF_UINT32, arr, (uint64_t)n_new);
    free(arr);
    return s;
}

/* Random Qwen3.5 weights with llama.cpp's names and keys. Unset recurrent
 * sizes follow Qwen3.5-0.8B's proportions: value heads = 2 n_head, key heads =
 * value heads, state = min(128, head_dim), conv 4, every 4th layer full
 * attention, rotary over a quarter of the head in sections [11, 11, 10, 0]. */
static rp_status synth_qwen35(rp_synth *s, const rp_synth_params *p) {
    const int E = p->n_embd, hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    const int nkv = p->n_head_kv ? p->n_head_kv : p->n_head;
    const int hv = p->ssm_heads ? p->ssm_heads : 2 * p->n_head;
    const int hk = p->ssm_groups ? p->ssm_groups : hv;
    const int ds = p->ssm_state ? p->ssm_state : RP_MIN(128, hd);
    const int dconv = p->ssm_conv ? p->ssm_conv : 4;
    const int interval = p->attn_interval ? p->attn_interval : 4;
    const int nextn = p->n_nextn < 0 ? 0 : p->n_nextn ? p->n_nextn : 1;
    const int n_rot = p->n_rot ? p->n_rot : RP_MAX(2, hd / 4 / 2 * 2);
    const int half = n_rot / 2, s2 = half / 3, s0 = (half - s2 + 1) / 2, s1 = half - s2 - s0;
    if (p->ssm_heads < 0 || p->ssm_groups < 0 || p->ssm_state < 0 || p->ssm_conv < 0 ||
        p->attn_interval < 0 || p->n_rot < 0 || p->n_nextn < -1 || hv > 4096 || hk > 4096 ||
        dconv > 64 || nextn > 16 || hv % hk || n_rot > hd || n_rot % 2 || ds > RP_DELTA_MAX_D)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "synth qwen35: inconsistent recurrent shape (value heads %d, key heads %d, "
                       "state %d, rotary %d "
                       "of head %d)",
                       hv, hk, ds, n_rot, hd);
    const int d_inner = hv * ds, conv_dim = 2 * hk * ds + d_inner, n_total = p->n_layer + nextn;
    rp_gguf_writer *w = rp_synth_writer(s);
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "qwen35." suffix), key)
    rp_status st = rp_synth_transformer_keys(s, p, p->rope_base > 0 ? p->rope_base : 1e7f, 1e-6f);
    const int32_t sections[4] = {s0, s1, s2, 0};
    st = st ? st : rp_gguf_w_set_u32(w, KEY("block_count"), (uint32_t)n_total);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("rope.dimension_count"), (uint32_t)n_rot);
    st = st ? st : rp_gguf_w_set_arr(w, KEY("rope.dimension_sections"), RP_GGUF_INT32, sections, 4);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("ssm.conv_kernel"), (uint32_t)dconv);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("ssm.state_size"), (uint32_t)ds);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("ssm.group_count"), (uint32_t)hk);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("ssm.time_step_rank"), (uint32_t)hv);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("ssm.inner_size"), (uint32_t)d_inner);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("full_attention_interval"), (uint32_t)interval);
    if (nextn) st = st ? st : rp_gguf_w_set_u32(w, KEY("nextn_predict_layers"), (uint32_t)nextn);
#undef KEY
    rp_dims d;
    rp_dims_init(&d, E, p->n_vocab, p->n_ff, p->n_head, nkv, hd, hd);
    set_rec_dims(&d, conv_dim, d_inner, hv, dconv, ds);
    st = st ? st
            : rp_synth_rows(s, &rp_io_tensors, false, -1, p->tied ? 0 : RP_IO_F_UNTIED, &d, NULL);
    rp_rng rng;
    rp_rng_seed(&rng, p->seed ^ 0x51e35u);
    for (int l = 0; l < n_total && !st; l++) {
        const bool rec = l < p->n_layer && (l + 1) % interval != 0;
        st = rp_synth_rows(s, &g_tensors, true, l, layer_features(rec, l >= p->n_layer), &d, &rng);
    }
    return st;
}

const rp_arch rp_arch_qwen35 = {
    .name = "qwen35",
    .tensors = &g_tensors,
    .load = load_qwen35,
    .unload = unload_qwen35,
    .ctx_init = ctx_init_qwen35,
    .ctx_free = ctx_free_qwen35,
    .forward = forward_qwen35,
    .merge_meta = merge_meta_qwen35,
    .synth = synth_qwen35,
    .draft = &g_draft,
};
