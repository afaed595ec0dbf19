/* The tensor-table mechanism (see tensors.h) and the I/O table. */
#include "arch/tensors.h"
#include "arch/arch.h"
#include "convert/synth.h"
#include "kernels/types.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the I/O tensors -------------------------------------------------------- */

const rp_tensor_def rp_io_rows[RP_IO_N_ROWS] = {
    /* [n_embd, n_vocab]: row t is token t's embedding (any type with to_float) */
    [RP_IO_TOKEN_EMBD] = {RP_TROW_MODEL("token_embd.weight", EMBD, VOCAB, TOKEN_EMBD),
                          RP_TAT_MODEL(tok_embd)},
    [RP_IO_OUTPUT_NORM] = {RP_TROW_MODEL("output_norm.weight", EMBD, NONE, NORM),
                           RP_TAT_MODEL(output_norm)},
    [RP_IO_OUTPUT_NORM_B] = {RP_TROW_MODEL("output_norm.bias", EMBD, NONE, OTHER), .opt = true,
                             RP_TAT_MODEL(output_norm_b)},
    /* [n_embd, n_vocab]; absent: tied to token_embd */
    [RP_IO_OUTPUT] = {RP_TROW_MODEL("output.weight", EMBD, VOCAB, OUTPUT), .opt = true,
                      .make = RP_IO_F_UNTIED, RP_TAT_MODEL(output)},
};

const rp_tensor_table rp_io_tensors = {
    .what = "the input and output tensors",
    .rows = rp_io_rows,
    .n_rows = RP_IO_N_ROWS,
};

/* ---- dimensions ------------------------------------------------------------- */

void rp_dims_init(rp_dims *d, int64_t n_embd, int64_t n_vocab, int64_t n_ff, int64_t n_head,
                  int64_t n_head_kv, int64_t head_dim_k, int64_t head_dim_v) {
    memset(d, 0, sizeof *d);
    d->v[RP_DIM_ANY] = -1;
    d->v[RP_DIM_EMBD] = n_embd;
    d->v[RP_DIM_EMBD2] = 2 * n_embd;
    d->v[RP_DIM_VOCAB] = n_vocab;
    d->v[RP_DIM_FF] = n_ff;
    d->v[RP_DIM_FF2] = 2 * n_ff;
    d->v[RP_DIM_Q] = n_head * head_dim_k;
    d->v[RP_DIM_QG] = 2 * n_head * head_dim_k;
    d->v[RP_DIM_KV] = n_head_kv * head_dim_k;
    d->v[RP_DIM_KV_V] = n_head_kv * head_dim_v;
    d->v[RP_DIM_O] = n_head * head_dim_v;
    d->v[RP_DIM_HEAD] = head_dim_k;
}

void rp_dims_of_layer(rp_dims *d, const rp_model *m, int l) {
    const rp_layer_info *li = &m->info[l];
    rp_dims_init(d, m->hp.n_embd, m->tok_embd ? m->hp.n_vocab : -1, li->n_ff, li->n_head,
                 li->n_head_kv, li->head_dim_k, li->head_dim_v);
    d->v[RP_DIM_ROT2] = m->hp.rope[0].n_rot / 2;
}

/* ---- names ------------------------------------------------------------------ */

const char *rp_tensor_name(const rp_tensor_def *r, int l, char *buf, size_t n) {
    if (r->layer)
        snprintf(buf, n, "blk.%d.%s", l, r->name);
    else
        snprintf(buf, n, "%s", r->name);
    return buf;
}

const rp_tensor_def *rp_tensor_find(const rp_tensor_table *t, const char *name) {
    const char *rest = NULL;
    if (!strncmp(name, "blk.", 4) && name[4] >= '0' && name[4] <= '9') {
        rest = name + 4;
        while (*rest >= '0' && *rest <= '9') rest++;
        rest = *rest == '.' ? rest + 1 : NULL;
    }
    for (; t; t = t->base)
        for (size_t i = 0; i < t->n_rows; i++) {
            const rp_tensor_def *r = &t->rows[i];
            if (r->layer ? rest && !strcmp(r->name, rest) : !strcmp(r->name, name)) return r;
        }
    return NULL;
}

/* ---- binding ---------------------------------------------------------------- */

rp_status rp_bind_row(rp_model *m, const rp_tensor **dst, const rp_tensor_def *r, int l,
                      const rp_dims *d, bool required) {
    char name[256];
    return rp_bind(m, dst, required, d->v[r->ne0], d->v[r->ne1], "%s",
                   rp_tensor_name(r, l, name, sizeof name));
}

const rp_tensor **rp_tensor_slot(rp_model *m, const rp_tensor_def *r, int l, void *ext) {
    char *base = r->slot == RP_SLOT_LAYER   ? (char *)&m->layers[l]
                 : r->slot == RP_SLOT_EXT   ? (char *)ext
                 : r->slot == RP_SLOT_MODEL ? (char *)m
                                            : NULL;
    RP_ASSERT(base);
    return (const rp_tensor **)(void *)(base + r->off);
}

rp_status rp_bind_layer_rows(rp_model *m, const rp_tensor_table *t, int l, unsigned feat,
                             const rp_dims *d, void *ext) {
    for (size_t i = 0; i < t->n_rows; i++) {
        const rp_tensor_def *r = &t->rows[i];
        if (!r->layer || r->slot == RP_SLOT_NONE || (r->when & feat) != r->when) continue;
        rp_status s = rp_bind_row(m, rp_tensor_slot(m, r, l, ext), r, l, d, !r->opt);
        if (s) return s;
    }
    return RP_OK;
}

rp_status rp_bind_io(rp_model *m) {
    rp_hparams *hp = &m->hp;
    rp_dims d;
    rp_dims_init(&d, hp->n_embd, -1, 0, 0, 0, 0, 0);
    const rp_tensor_def *io = rp_io_rows;
    rp_status s = rp_bind_row(m, &m->tok_embd, &io[RP_IO_TOKEN_EMBD], -1, &d, true);
    if (s) return s;
    if (!rp_type_get(m->tok_embd->type)->to_float)
        return rp_fail(RP_ERR_UNSUPPORTED, "%s: %s has type %s, which reprise cannot read", m->path,
                       io[RP_IO_TOKEN_EMBD].name, rp_type_name(m->tok_embd->type));
    hp->n_vocab = (int)m->tok_embd->ne[1];
    if (hp->n_vocab < 1)
        return rp_fail(RP_ERR_FORMAT, "%s: %s has no rows", m->path, io[RP_IO_TOKEN_EMBD].name);
    d.v[RP_DIM_VOCAB] = hp->n_vocab;
    for (int i = RP_IO_OUTPUT_NORM; i < RP_IO_N_ROWS; i++)
        if ((s = rp_bind_row(m, rp_tensor_slot(m, &io[i], -1, NULL), &io[i], -1, &d, !io[i].opt)))
            return s;
    if (!m->output) m->output = m->tok_embd; /* tied */
    return RP_OK;
}

/* ---- synth ------------------------------------------------------------------ */

rp_status rp_synth_row(rp_synth *s, const rp_tensor_def *r, int l, const rp_dims *d, rp_rng *rng) {
    char name[256];
    rp_tensor_name(r, l, name, sizeof name);
    const int64_t ne0 = d->v[r->ne0], ne1 = d->v[r->ne1];
    if (r->gen == RP_GEN_UNIFORM) return rp_synth_uniform(s, rng, ne0, r->lo, r->hi, "%s", name);
    if (r->gen == RP_GEN_NORMAL) {
        const size_t n = (size_t)ne0 * (size_t)(ne1 ? ne1 : 1);
        float *v = rp_malloc(n * sizeof(float), "synth values");
        if (!v) return RP_ERR_NOMEM;
        for (size_t i = 0; i < n; i++) v[i] = rp_rng_normal(rng) / sqrtf((float)ne0);
        rp_status st = rp_synth_values(s, v, ne0, ne1, "%s", name);
        free(v);
        return st;
    }
    if (ne1) return rp_synth_weight(s, ne0, ne1, "%s", name);
    if (r->cat == RP_TCAT_NORM) return rp_synth_norm(s, ne0, "%s", name);
    return rp_synth_bias(s, ne0, "%s", name);
}

rp_status rp_synth_rows(rp_synth *s, const rp_tensor_table *t, bool layer, int l, unsigned feat,
                        const rp_dims *d, rp_rng *rng) {
    for (size_t i = 0; i < t->n_rows; i++) {
        const rp_tensor_def *r = &t->rows[i];
        if (r->layer != layer || (r->when & feat) != r->when) continue;
        if (r->opt && (!r->make || (r->make & feat) != r->make)) continue;
        rp_status st = rp_synth_row(s, r, l, d, rng);
        if (st) return st;
    }
    return RP_OK;
}

/* ---- quantization categories ------------------------------------------------ */

const char *rp_tensor_cat_name(rp_tensor_cat c) {
    static const char *const names[] = {
        "other",       "token_embd", "output",   "attn_q",   "attn_k", "attn_v",
        "attn_output", "ffn_up",     "ffn_gate", "ffn_down", "norm",
    };
    return c >= 0 && (size_t)c < RP_ARRAY_LEN(names) ? names[c] : "?";
}

rp_tensor_cat rp_arch_tensor_category(const char *arch, const char *name) {
    const rp_arch *a = arch ? rp_arch_find(arch) : NULL;
    const rp_tensor_def *r = a && name ? rp_tensor_find(a->tensors, name) : NULL;
    return r ? (rp_tensor_cat)r->cat : RP_TCAT_UNKNOWN;
}
