/* State of a context: one KV slot (per sequence) for every plan step that
 * attends, one recurrent state for every step that recurs. Sized from the
 * plan and the per-layer facts of each step's source layer: a repeated layer
 * gets its own slot, sized and typed like its source's. */
#ifndef RP_KV_H
#define RP_KV_H

#include "core/model.h"
#include "kernels/ops.h"
#include "core/plan.h"

#include <stdint.h>

typedef struct rp_state {
    int n_steps, n_seq, n_ctx;
    rp_kv_view *kv;     /* [n_steps][n_seq]; k == NULL when the step has no KV */
    float **rec;        /* [n_steps][n_seq]; NULL when the step has no recurrent state */
    size_t *rec_floats; /* [n_steps] */
    int *seq_len;       /* [n_seq] positions cached */
    /* Rollback guard of sequence checkpoints (rp_seq_checkpoint_*): how many
     * checkpoints each sequence has had saved, and the shortest length it has
     * been cut back to since its latest one. */
    uint32_t *seq_ckpt; /* [n_seq] */
    int *seq_low;       /* [n_seq] */
    uint64_t kv_bytes, rec_bytes;
    void **blocks; /* allocations */
    int n_blocks;
} rp_state;

/* ring_extra: the largest number of tokens one sequence can add in a
 * micro-batch (so a sliding window of w keeps w + ring_extra - 1 cells).
 * alloc false: no buffers, only the views' types and caps and the byte counts
 * (k == v == NULL): a plan's report, or caches that live on a device (kv_bytes
 * then counts the device's). */
rp_status rp_state_init(rp_state *st, const rp_model *m, const rp_plan *plan, int n_seq, int n_ctx,
                        int ring_extra, int type_k, int type_v, bool alloc);
/* What rp_state_init would allocate (KV + recurrent bytes, UINT64_MAX if it
 * overflows), allocating nothing. rp_state_init with alloc false fills the
 * views' sizes and the byte counts without the buffers (a plan's report). */
uint64_t rp_state_bytes(const rp_model *m, const rp_plan *plan, int n_seq, int n_ctx,
                        int ring_extra, int type_k, int type_v);
void rp_state_free(rp_state *st);
/* RP_OK when a cache of these types can hold every attending layer of m
 * (RP_ERR_INVALID_ARG naming the type, or the layer and its head width). */
rp_status rp_kv_check_model(const rp_model *m, int type_k, int type_v);
void rp_state_clear_seq(rp_state *st, int seq);
/* Recurrent state floats one sequence holds over every step. */
size_t rp_state_rec_floats_seq(const rp_state *st);

#endif
