#include "core/kv.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static void *state_alloc(rp_state *st, size_t bytes, const char *what) {
    void *p = rp_alloc_aligned(bytes, what);
    if (!p) return NULL;
    st->blocks[st->n_blocks++] = p;
    return p;
}

uint64_t rp_state_bytes(const rp_model *m, const rp_plan *plan, int n_seq, int n_ctx,
                        int ring_extra, int type_k, int type_v) {
    uint64_t total = 0;
    for (int e = 0; e < plan->n_eff; e++) {
        const rp_layer_info *li = &m->info[plan->src[e]];
        uint64_t step = 0, a;
        if (li->has_kv) {
            int cap = n_ctx;
            if (li->kind == RP_LAYER_ATTN_SWA && li->window > 0)
                cap = RP_MIN(n_ctx, li->window + ring_extra - 1);
            step = ((uint64_t)rp_kv_row_bytes(type_k, li->head_dim_k) +
                    (uint64_t)rp_kv_row_bytes(type_v, li->head_dim_v)) *
                   (uint64_t)li->n_head_kv * (uint64_t)cap;
        }
        step += (uint64_t)li->rec_floats * sizeof(float);
        if (!rp_mul_u64(step, (uint64_t)n_seq, &a) || !rp_add_u64(total, a, &total))
            return UINT64_MAX;
    }
    return total;
}

rp_status rp_state_init(rp_state *st, const rp_model *m, const rp_plan *plan, int n_seq, int n_ctx,
                        int ring_extra, int type_k, int type_v, bool alloc) {
    memset(st, 0, sizeof *st);
    st->n_steps = plan->n_eff;
    st->n_seq = n_seq;
    st->n_ctx = n_ctx;
    size_t n_views = (size_t)plan->n_eff * (size_t)n_seq;
    st->kv = rp_calloc(n_views, sizeof *st->kv, "KV views");
    st->rec = rp_calloc(n_views, sizeof *st->rec, "state views");
    st->rec_floats = rp_calloc((size_t)plan->n_eff, sizeof *st->rec_floats, "state sizes");
    st->seq_len = rp_calloc((size_t)n_seq, sizeof *st->seq_len, "sequence lengths");
    st->seq_ckpt = rp_calloc((size_t)n_seq, sizeof *st->seq_ckpt, "sequence checkpoints");
    st->seq_low = rp_calloc((size_t)n_seq, sizeof *st->seq_low, "sequence checkpoints");
    st->blocks = rp_calloc((size_t)plan->n_eff * 3 + 1, sizeof *st->blocks, "state blocks");
    if (!st->kv || !st->rec || !st->rec_floats || !st->seq_len || !st->seq_ckpt || !st->seq_low ||
        !st->blocks) {
        rp_state_free(st);
        return RP_ERR_NOMEM;
    }
    for (int e = 0; e < plan->n_eff; e++) {
        const rp_layer_info *li = &m->info[plan->src[e]];
        if (li->has_kv) {
            int cap = n_ctx;
            if (li->kind == RP_LAYER_ATTN_SWA && li->window > 0)
                cap = RP_MIN(n_ctx, li->window + ring_extra - 1);
            size_t per_k =
                (size_t)li->n_head_kv * (size_t)cap * rp_kv_row_bytes(type_k, li->head_dim_k);
            size_t per_v =
                (size_t)li->n_head_kv * (size_t)cap * rp_kv_row_bytes(type_v, li->head_dim_v);
            uint8_t *kb = alloc ? state_alloc(st, per_k * (size_t)n_seq, "KV cache (K)") : NULL;
            uint8_t *vb = kb ? state_alloc(st, per_v * (size_t)n_seq, "KV cache (V)") : NULL;
            if (alloc && !vb) {
                rp_state_free(st);
                return rp_fail_prefix(RP_ERR_NOMEM, "KV cache for step %d (source layer %d)", e,
                                      plan->src[e]);
            }
            for (int s = 0; s < n_seq; s++) {
                rp_kv_view *v = &st->kv[(size_t)e * (size_t)n_seq + (size_t)s];
                v->k = kb ? kb + per_k * (size_t)s : NULL;
                v->v = vb ? vb + per_v * (size_t)s : NULL;
                v->type_k = type_k;
                v->type_v = type_v;
                v->cap = cap;
            }
            st->kv_bytes += (uint64_t)(per_k + per_v) * (uint64_t)n_seq;
        }
        if (li->rec_floats) {
            st->rec_floats[e] = li->rec_floats;
            float *rb = alloc ? state_alloc(st, li->rec_floats * sizeof(float) * (size_t)n_seq,
                                            "recurrent state")
                              : NULL;
            if (alloc && !rb) {
                rp_state_free(st);
                return rp_fail_prefix(RP_ERR_NOMEM, "recurrent state for step %d", e);
            }
            for (int s = 0; s < n_seq && rb; s++)
                st->rec[(size_t)e * (size_t)n_seq + (size_t)s] = rb + li->rec_floats * (size_t)s;
            st->rec_bytes += (uint64_t)li->rec_floats * sizeof(float) * (uint64_t)n_seq;
        }
    }
    return RP_OK;
}

void rp_state_free(rp_state *st) {
    if (st->blocks)
        for (int i = 0; i < st->n_blocks; i++) rp_free_aligned(st->blocks[i]);
    free(st->blocks);
    free(st->kv);
    free(st->rec);
    free(st->rec_floats);
    free(st->seq_len);
    free(st->seq_ckpt);
    free(st->seq_low);
    memset(st, 0, sizeof *st);
}

void rp_state_clear_seq(rp_state *st, int seq) {
    st->seq_len[seq] = 0;
    st->seq_low[seq] = 0;
    for (int e = 0; e < st->n_steps; e++) {
        float *r = st->rec[(size_t)e * (size_t)st->n_seq + (size_t)seq];
        if (r) memset(r, 0, st->rec_floats[e] * sizeof(float));
    }
}

size_t rp_state_rec_floats_seq(const rp_state *st) {
    size_t n = 0;
    for (int e = 0; e < st->n_steps; e++) n += st->rec_floats[e];
    return n;
}

bool rp_kv_type_supported(int type) {
    return rp_kv_type_ok(type);
}

const char *rp_kv_type_list(void) {
    return "f32, f16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl";
}

rp_status rp_kv_check_model(const rp_model *m, int type_k, int type_v) {
    const int types[2] = {type_k, type_v};
    for (int j = 0; j < 2; j++)
        if (!rp_kv_type_ok(types[j]))
            return rp_fail(RP_ERR_INVALID_ARG, "KV cache type for %s: %s is not one of %s",
                           j ? "V" : "K", rp_type_name(types[j]) ? rp_type_name(types[j]) : "?",
                           rp_kv_type_list());
    for (int l = 0; l < m->hp.n_layer; l++) {
        const rp_layer_info *li = &m->info[l];
        if (!li->has_kv) continue;
        for (int j = 0; j < 2; j++) {
            const int dim = j ? li->head_dim_v : li->head_dim_k;
            if (types[j] == RP_TYPE_F32 || types[j] == RP_TYPE_F16) continue;
            if (!rp_kv_row_bytes(types[j], dim) || dim > RP_KV_QMAXD)
                return rp_fail(RP_ERR_INVALID_ARG,
                               "KV cache type %s for %s: layer %d has heads of %d elements; a "
                               "%s cache needs a multiple of 32 up to %d",
                               rp_type_name(types[j]), j ? "V" : "K", l, dim,
                               rp_type_name(types[j]), RP_KV_QMAXD);
        }
    }
    return RP_OK;
}
