/* Sequences as a whole: removing a range (llama.cpp's seq_rm), copying one
 * sequence into another (seq_cp), and the image of one sequence's state that
 * restores bit for bit (state_seq_get/set).
 *
 * Every (step, sequence) pair owns its KV cells: a K block [n_head_kv][cap]
 * [head_dim_k] and a V block of the same shape, position p at cell p % cap
 * (cap = n_ctx, or the sliding-window ring's size), and its recurrent state
 * (rec_floats floats). A copy is therefore a memcpy per step.
 *
 * The image (host byte order; it is not a file format meant to travel
 * between machines):
 *   "RPSEQST\0", u32 version, u32 n_eff, n_embd, n_vocab, type_k, type_v, len
 *   per step: u32 src, n_head_kv (0: no KV), head_dim_k, head_dim_v, n_cells, 0,
 *             u64 rec_floats
 *   per step: K of the last n_cells positions (head by head, in position
 *             order), V likewise, then the recurrent state. */
#include "core/context.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

#define IMG_MAGIC "RPSEQST"
/* version 2: quantized caches hold K (and V) rotated (rp_kv_rot_k); a
 * version 1 image is still read where its caches are F16 or F32 */
#define IMG_VERSION 2

static rp_status seq_check(const rp_context *c, int seq, const char *what) {
    if (seq < 0 || seq >= c->n_seq)
        return rp_fail(RP_ERR_INVALID_ARG, "%s: sequence %d out of range (context has %d)", what,
                       seq, c->n_seq);
    return RP_OK;
}

/* A new generation of seq's content: its checkpoints no longer restore. */
static void seq_replaced(rp_context *c, int seq, int len) {
    c->state.seq_len[seq] = len;
    c->state.seq_low[seq] = len;
    c->state.seq_ckpt[seq]++;
}

rp_status rp_kv_seq_rm(rp_context *c, int seq, int p0, int p1) {
    if (p0 < 0) p0 = 0;
    if (seq < 0) { /* every sequence: only the whole range */
        if (p0 > 0 || p1 >= 0)
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "remove positions [%d, %d) of every sequence: only whole sequences can "
                           "be removed from all at once",
                           p0, p1);
        rp_kv_clear(c);
        return RP_OK;
    }
    rp_status s = seq_check(c, seq, "remove positions");
    if (s) return s;
    const int len = c->state.seq_len[seq];
    if (p1 < 0 || p1 > len) p1 = len;
    if (p0 >= p1) return RP_OK; /* nothing there */
    if (p1 < len)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "sequence %d: positions [%d, %d) cannot be removed while positions %d..%d "
                       "stay (a sequence's positions run from 0 without holes; remove its end)",
                       seq, p0, p1, p1, len - 1);
    return rp_kv_seq_truncate(c, seq, p0);
}

/* Bytes of the K and V blocks of step e for one sequence (0: no KV). */
static void kv_block_bytes(const rp_context *c, int e, size_t *k, size_t *v) {
    const rp_layer_info *li = &c->model->info[c->plan->src[e]];
    const rp_kv_view *kv = rp_ctx_kv(c, e, 0);
    *k = *v = 0;
    if (!kv->k) return;
    *k = (size_t)li->n_head_kv * (size_t)kv->cap * rp_kv_row_bytes(kv->type_k, li->head_dim_k);
    *v = (size_t)li->n_head_kv * (size_t)kv->cap * rp_kv_row_bytes(kv->type_v, li->head_dim_v);
}

rp_status rp_kv_seq_cp(rp_context *c, int src, int dst, int p0, int p1) {
    rp_status s = seq_check(c, src, "copy sequence");
    if (!s) s = seq_check(c, dst, "copy sequence");
    if (!s && src != dst) s = rp_ctx_host_only(c, "copy sequence");
    if (s) return s;
    const int len = c->state.seq_len[src];
    if (p0 > 0)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "copy sequence %d: a copy starts at position 0 (a sequence has no holes), "
                       "not %d",
                       src, p0);
    if (p1 < 0) p1 = len;
    if (p1 > len)
        return rp_fail(RP_ERR_INVALID_ARG, "copy sequence %d: it has %d positions, not %d", src,
                       len, p1);
    if (p1 < len) { /* a prefix: only what truncation could do to src itself */
        if (rp_context_has_recurrent(c))
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "copy sequence %d: the plan keeps recurrent state, which holds the "
                           "whole sequence; copy all %d positions or none",
                           src, len);
        if ((s = rp_ctx_ring_rollback_check(c, src, p1))) return s;
    }
    if (src == dst) return p1 < len ? rp_kv_seq_truncate(c, src, p1) : RP_OK;
    const rp_state *st = &c->state;
    for (int e = 0; e < st->n_steps; e++) {
        size_t kb, vb;
        kv_block_bytes(c, e, &kb, &vb);
        const rp_kv_view *a = rp_ctx_kv(c, e, src), *b = rp_ctx_kv(c, e, dst);
        if (kb) {
            memcpy(b->k, a->k, kb);
            memcpy(b->v, a->v, vb);
        }
        const size_t i = (size_t)e * (size_t)st->n_seq;
        if (st->rec[i + (size_t)src])
            memcpy(st->rec[i + (size_t)dst], st->rec[i + (size_t)src],
                   st->rec_floats[e] * sizeof(float));
    }
    seq_replaced(c, dst, p1);
    return RP_OK;
}

/* ---- the image --------------------------------------------------------------- */

typedef struct img_head {
    char magic[8];
    uint32_t version, n_eff, n_embd, n_vocab, type_k, type_v, len;
} img_head;

typedef struct img_step {
    uint32_t src, n_head_kv, head_dim_k, head_dim_v, n_cells, zero; /* zero: no padding */
    uint64_t rec_floats;
} img_step;

_Static_assert(sizeof(img_head) == 36 && sizeof(img_step) == 32, "the image has no padding");

/* Cells of step e that hold positions of a sequence of len positions: all of
 * them for a full cache, the last cap for a ring. */
static uint32_t cells_held(const rp_kv_view *kv, int len) {
    return kv->k ? (uint32_t)RP_MIN(len, kv->cap) : 0;
}

static size_t step_data_bytes(const img_step *d, int type_k, int type_v) {
    return (size_t)d->n_head_kv * d->n_cells *
               (rp_kv_row_bytes(type_k, (int)d->head_dim_k) +
                rp_kv_row_bytes(type_v, (int)d->head_dim_v)) +
           (size_t)d->rec_floats * sizeof(float);
}

static void describe_step(const rp_context *c, int e, int len, img_step *d) {
    const rp_layer_info *li = &c->model->info[c->plan->src[e]];
    const rp_kv_view *kv = rp_ctx_kv(c, e, 0);
    *d = (img_step){.src = (uint32_t)c->plan->src[e], .rec_floats = c->state.rec_floats[e]};
    if (kv->k) {
        d->n_head_kv = (uint32_t)li->n_head_kv;
        d->head_dim_k = (uint32_t)li->head_dim_k;
        d->head_dim_v = (uint32_t)li->head_dim_v;
        d->n_cells = cells_held(kv, len);
    }
}

size_t rp_seq_state_size(const rp_context *c, int seq) {
    if (seq < 0 || seq >= c->n_seq) return 0;
    size_t n = sizeof(img_head) + (size_t)c->plan->n_eff * sizeof(img_step);
    for (int e = 0; e < c->plan->n_eff; e++) {
        img_step d;
        describe_step(c, e, c->state.seq_len[seq], &d);
        n += step_data_bytes(&d, c->params.type_k, c->params.type_v);
    }
    return n;
}

/* Copies the rows of positions [p0, p0 + n) of one block ([heads][cap][row])
 * to or from a packed [heads][n][row] run. */
static uint8_t *rows_copy(uint8_t *block, uint8_t *packed, int heads, int cap, int p0, int n,
                          size_t row, bool to_packed) {
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < n; i++) {
            uint8_t *cell = block + ((size_t)h * (size_t)cap + (size_t)((p0 + i) % cap)) * row;
            if (to_packed)
                memcpy(packed, cell, row);
            else
                memcpy(cell, packed, row);
            packed += row;
        }
    return packed;
}

rp_status rp_seq_state_save(const rp_context *c, int seq, void *buf, size_t size, size_t *written) {
    rp_status s = seq_check(c, seq, "save sequence state");
    if (!s) s = rp_ctx_host_only(c, "save sequence state");
    if (s) return s;
    const size_t need = rp_seq_state_size(c, seq);
    if (!buf || size < need)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "save sequence state: the image of sequence %d needs %zu bytes, the "
                       "buffer has %zu",
                       seq, need, buf ? size : 0);
    const int len = c->state.seq_len[seq];
    img_head h = {.version = IMG_VERSION,
                  .n_eff = (uint32_t)c->plan->n_eff,
                  .n_embd = (uint32_t)c->model->hp.n_embd,
                  .n_vocab = (uint32_t)c->model->hp.n_vocab,
                  .type_k = (uint32_t)c->params.type_k,
                  .type_v = (uint32_t)c->params.type_v,
                  .len = (uint32_t)len};
    memcpy(h.magic, IMG_MAGIC, sizeof h.magic);
    uint8_t *p = buf;
    memcpy(p, &h, sizeof h);
    p += sizeof h;
    for (int e = 0; e < c->plan->n_eff; e++) { /* the table first, the data after it */
        img_step d;
        describe_step(c, e, len, &d);
        memcpy(p + (size_t)e * sizeof d, &d, sizeof d);
    }
    p += (size_t)c->plan->n_eff * sizeof(img_step);
    for (int e = 0; e < c->plan->n_eff; e++) {
        img_step d;
        describe_step(c, e, len, &d);
        const rp_kv_view *kv = rp_ctx_kv(c, e, seq);
        const int p0 = len - (int)d.n_cells;
        if (d.n_cells) {
            p = rows_copy(kv->k, p, (int)d.n_head_kv, kv->cap, p0, (int)d.n_cells,
                          rp_kv_row_bytes(kv->type_k, (int)d.head_dim_k), true);
            p = rows_copy(kv->v, p, (int)d.n_head_kv, kv->cap, p0, (int)d.n_cells,
                          rp_kv_row_bytes(kv->type_v, (int)d.head_dim_v), true);
        }
        const float *r = c->state.rec[(size_t)e * (size_t)c->n_seq + (size_t)seq];
        if (r) {
            memcpy(p, r, (size_t)d.rec_floats * sizeof(float));
            p += (size_t)d.rec_floats * sizeof(float);
        }
    }
    RP_ASSERT((size_t)(p - (uint8_t *)buf) == need);
    if (written) *written = need;
    return RP_OK;
}

/* Checks an image against c; on success *steps points at its step table. */
static rp_status image_check(const rp_context *c, const uint8_t *buf, size_t size, img_head *h,
                             const uint8_t **steps) {
    const char *what = "load sequence state";
    if (size < sizeof *h || memcmp(buf, IMG_MAGIC, sizeof h->magic))
        return rp_fail(RP_ERR_FORMAT, "%s: not a sequence state image", what);
    memcpy(h, buf, sizeof *h);
    const bool plain = (h->type_k == RP_TYPE_F16 || h->type_k == RP_TYPE_F32) &&
                       (h->type_v == RP_TYPE_F16 || h->type_v == RP_TYPE_F32);
    if (h->version == 1 && !plain)
        return rp_fail(RP_ERR_FORMAT,
                       "%s: a version 1 image of a quantized KV cache (%s/%s): its rows were "
                       "written without the rotation this build applies; save it again",
                       what, rp_type_name((int)h->type_k), rp_type_name((int)h->type_v));
    if (h->version != IMG_VERSION && h->version != 1)
        return rp_fail(RP_ERR_FORMAT, "%s: image version %u, this build reads %d", what, h->version,
                       IMG_VERSION);
    if (h->n_eff != (uint32_t)c->plan->n_eff || h->n_embd != (uint32_t)c->model->hp.n_embd ||
        h->n_vocab != (uint32_t)c->model->hp.n_vocab)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s: the image is of a %u-step plan over a model with n_embd %u and %u "
                       "tokens; this context runs %d steps, n_embd %d, %d tokens",
                       what, h->n_eff, h->n_embd, h->n_vocab, c->plan->n_eff, c->model->hp.n_embd,
                       c->model->hp.n_vocab);
    if (h->type_k != (uint32_t)c->params.type_k || h->type_v != (uint32_t)c->params.type_v)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s: the image holds %s/%s KV caches; this context has %s/%s", what,
                       rp_type_name((int)h->type_k), rp_type_name((int)h->type_v),
                       rp_type_name(c->params.type_k), rp_type_name(c->params.type_v));
    if (h->len > (uint32_t)c->n_ctx)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s: the image holds %u positions; this context has room for %d", what,
                       h->len, c->n_ctx);
    const size_t table = (size_t)h->n_eff * sizeof(img_step);
    if (size - sizeof *h < table) return rp_fail(RP_ERR_FORMAT, "%s: the image is truncated", what);
    *steps = buf + sizeof *h;
    size_t data = 0;
    for (int e = 0; e < c->plan->n_eff; e++) {
        img_step d, want;
        memcpy(&d, *steps + (size_t)e * sizeof d, sizeof d);
        describe_step(c, e, (int)h->len, &want);
        const rp_kv_view *kv = rp_ctx_kv(c, e, 0);
        if (d.src != want.src || d.n_head_kv != want.n_head_kv || d.head_dim_k != want.head_dim_k ||
            d.head_dim_v != want.head_dim_v || d.rec_floats != want.rec_floats)
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "%s: step %d of the image runs source layer %u with %u KV heads of "
                           "%u/%u and %llu recurrent floats; this context's step %d runs layer "
                           "%u with %u heads of %u/%u and %llu",
                           what, e, d.src, d.n_head_kv, d.head_dim_k, d.head_dim_v,
                           (unsigned long long)d.rec_floats, e, want.src, want.n_head_kv,
                           want.head_dim_k, want.head_dim_v, (unsigned long long)want.rec_floats);
        /* the positions this context's cells must hold: all len of them, or a ring's last cap */
        if (d.n_cells > h->len || (kv->k && d.n_cells < cells_held(kv, (int)h->len)))
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "%s: step %d of the image holds the last %u of %u positions (a "
                           "sliding-window ring); this context's step keeps %u",
                           what, e, d.n_cells, h->len, cells_held(kv, (int)h->len));
        data += step_data_bytes(&d, c->params.type_k, c->params.type_v);
    }
    if (size - sizeof *h - table != data)
        return rp_fail(RP_ERR_FORMAT, "%s: the image has %zu bytes of state, its table says %zu",
                       what, size - sizeof *h - table, data);
    return RP_OK;
}

rp_status rp_seq_state_load(rp_context *c, int seq, const void *buf, size_t size) {
    rp_status s = seq_check(c, seq, "load sequence state");
    if (!s) s = rp_ctx_host_only(c, "load sequence state");
    if (s) return s;
    img_head h;
    const uint8_t *steps = NULL;
    if (!buf) return rp_fail(RP_ERR_FORMAT, "load sequence state: no image");
    if ((s = image_check(c, buf, size, &h, &steps))) return s;
    const uint8_t *p = steps + (size_t)h.n_eff * sizeof(img_step);
    for (int e = 0; e < c->plan->n_eff; e++) {
        img_step d;
        memcpy(&d, steps + (size_t)e * sizeof d, sizeof d);
        const rp_kv_view *kv = rp_ctx_kv(c, e, seq);
        if (d.n_cells) {
            /* the image's cells hold positions len - n_cells .. len - 1; this
             * context keeps the last `keep` of them */
            const int keep = (int)cells_held(kv, (int)h.len), skip = (int)d.n_cells - keep;
            const size_t rk = rp_kv_row_bytes(kv->type_k, (int)d.head_dim_k),
                         rv = rp_kv_row_bytes(kv->type_v, (int)d.head_dim_v);
            const int p0 = (int)h.len - keep;
            for (int part = 0; part < 2; part++) {
                const size_t row = part ? rv : rk;
                uint8_t *block = part ? kv->v : kv->k;
                for (uint32_t hd = 0; hd < d.n_head_kv; hd++) {
                    const uint8_t *src = p + ((size_t)hd * d.n_cells + (size_t)skip) * row;
                    rows_copy(block + (size_t)hd * (size_t)kv->cap * row, (uint8_t *)src, 1,
                              kv->cap, p0, keep, row, false);
                }
                p += (size_t)d.n_head_kv * d.n_cells * row;
            }
        }
        float *r = c->state.rec[(size_t)e * (size_t)c->n_seq + (size_t)seq];
        if (r) {
            memcpy(r, p, (size_t)d.rec_floats * sizeof(float));
            p += (size_t)d.rec_floats * sizeof(float);
        }
    }
    seq_replaced(c, seq, (int)h.len);
    return RP_OK;
}

rp_status rp_seq_state_save_file(const rp_context *c, int seq, const char *path) {
    rp_status s = seq_check(c, seq, "save sequence state");
    if (!s) s = rp_ctx_host_only(c, "save sequence state");
    if (s) return s;
    const size_t n = rp_seq_state_size(c, seq);
    void *buf = rp_malloc(n, "sequence state image");
    if (!buf) return RP_ERR_NOMEM;
    s = rp_seq_state_save(c, seq, buf, n, NULL);
    if (!s) s = rp_atomic_write_file(path, buf, n);
    free(buf);
    return s;
}

rp_status rp_seq_state_load_file(rp_context *c, int seq, const char *path) {
    rp_status s = seq_check(c, seq, "load sequence state");
    if (!s) s = rp_ctx_host_only(c, "load sequence state");
    if (s) return s;
    char *buf;
    size_t n;
    if ((s = rp_read_file_max(path, (size_t)1 << 36, &buf, &n))) return s; /* 64 GiB of KV */
    s = rp_seq_state_load(c, seq, buf, n);
    if (s) rp_fail_prefix(s, "%s", path);
    free(buf);
    return s;
}
