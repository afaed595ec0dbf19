/* The context (internal view): a model, a plan over its layers, the state
 * that plan needs, scratch buffers and a thread pool. */
#ifndef RP_CONTEXT_H
#define RP_CONTEXT_H

#include "backend/backend.h"
#include "core/kv.h"
#include "kernels/matmul.h"
#include "core/model.h"
#include "core/plan.h"
#include "reprise.h"

/* A micro-batch: at most n_ubatch tokens computed together. */
typedef struct rp_ubatch {
    int n_tok;
    const int32_t *token;    /* [n_tok] (NULL when embd is given) */
    const float *embd;       /* [n_tok][n_embd] input embeddings instead of tokens, or NULL */
    const int32_t *pos;      /* [n_tok] */
    const int32_t *seq;      /* [n_tok] */
    int n_out;               /* rows that want output */
    const int32_t *out_rows; /* [n_out] ascending row indices */
    float *logits;           /* [n_out][n_vocab] destination */
    float *hidden;           /* [n_out][n_embd] destination of the final hidden state, or NULL */
    /* Plan steps run: [step_begin, step_end) (both 0: every step; see
     * rp_decode_steps). step_begin > 0 starts from x_in instead of the
     * embeddings; step_end < n_eff stops there, writes the residual stream to
     * x_out and produces no output rows (n_out is 0). Only forwards of
     * architectures with rp_arch.step_ranges read these fields. */
    int step_begin, step_end;
    const float *x_in; /* [n_tok][n_embd] residual stream entering step step_begin */
    float *x_out;      /* [n_tok][n_embd] residual stream after step step_end - 1 */
} rp_ubatch;

struct rp_context {
    const rp_model *model;
    rp_context_params params;
    rp_plan *plan;
    rp_state state;
    rp_compute cc;
    int n_threads;
    int n_ctx, n_seq, n_ubatch;
    /* outputs of the last decode */
    float *logits;      /* [n_outputs][n_vocab] */
    float *hidden;      /* [n_outputs][n_embd] (keep_hidden) */
    int32_t *out_index; /* [n_batch_last] row -> output index or -1 */
    size_t out_cap, index_cap;
    int n_batch_last;
    /* attention scratch: per thread */
    float *attn_scratch;
    size_t attn_scratch_per_thread;
    void *arch_ctx;
    /* Where the forward runs (core/context_dev.c): the CPU backend over cc and
     * attn_scratch, or a device shared by the model's contexts on it; each
     * plan step's cache there (NULL where the step has none). */
    rp_backend *be;
    rp_bkv **bkv;   /* [n_eff] */
    bool on_device; /* be is not the CPU: state lives there, not in state.kv */
    struct rp_deltas
        *deltas;          /* LoRA adapters and residual scales per step (core/delta.h), or NULL */
    bool pool_borrowed;   /* cc.pool belongs to another context (rp_context_share_pool) */
    rp_abort_fn abort_fn; /* rp_context_set_abort: asked before each pass of a decode */
    void *abort_user;
    rp_trace_fn trace_fn; /* rp_context_set_trace */
    void *trace_user;
};

/* Decodes a batch through plan steps [begin, end) only: the prefix reuse of
 * reprise scan (a plan whose first steps equal another plan's runs them once).
 *   - begin == 0 starts from the token embeddings (x_in must be NULL); begin > 0
 *     takes x_in ([n_tokens][n_embd], batch row order) as the residual stream
 *     entering step begin.
 *   - end == n_eff produces the batch's logits as rp_decode does (x_out must be
 *     NULL); end < n_eff writes the residual stream after step end-1 to x_out
 *     (same layout; x_out may equal x_in) and no logits.
 * Steps outside the range are not run: their KV / recurrent state is neither
 * read nor written. A step inside the range attends to its own cells of the
 * earlier positions, so those must come from calls whose range covered it (a
 * caller that changes ranges on a sequence clears it first). Sequence lengths
 * advance as in rp_decode. Architectures whose forward does not honour ranges
 * (rp_arch.step_ranges false) are refused with RP_ERR_UNSUPPORTED. */
rp_status rp_decode_steps(rp_context *c, const rp_batch *b, int begin, int end, const float *x_in,
                          float *x_out);
/* rp_context_share_pool (one thread pool for several contexts) is public. */

/* Shared tail of every forward: final norm of the output rows of x
 * ([n_tok][n_embd], rows selected by ub->out_rows unless already compacted),
 * the output matmul, and the final soft-cap. x is overwritten. */
void rp_forward_output(rp_context *c, const rp_ubatch *ub, float *x, bool compacted, float *tmp);

/* RP_OK when every sliding-window ring of seq still holds the window a
 * sequence cut back to p positions needs (rp_kv_seq_truncate and checkpoint
 * restores refuse otherwise, naming the step). */
rp_status rp_ctx_ring_rollback_check(const rp_context *c, int seq, int p);

/* The backend and step caches of a new context (after its state and scratch,
 * before ctx_init), and their release (after ctx_free). */
rp_status rp_ctx_dev_init(rp_context *c);
/* true for the CPU's names: NULL, "" or "cpu" (rp_context_params.device) */
bool rp_ctx_device_is_cpu(const char *device);
void rp_ctx_dev_free(rp_context *c);
/* The dense weights of layer L (its non-NULL rp_layer tensors) into out;
 * their count. What a device forward uploads and a device forgets. */
#define RP_CTX_LAYER_WEIGHTS_MAX 19
int rp_ctx_layer_weights(const rp_layer *L, const rp_tensor **out);
/* RP_ERR_UNSUPPORTED naming what when c runs on a device (what needs host state). */
rp_status rp_ctx_host_only(const rp_context *c, const char *what);
/* Hands rows [0, n) of data ([n][width]) to the trace hook as tensor name of
 * step e (layer src); rows are the micro-batch's tokens, or its output rows
 * once compacted. Does nothing without a hook. */
void rp_trace_emit(const rp_context *c, const rp_ubatch *ub, const char *name, int e, int src,
                   const float *data, int n, int width, bool compacted);
static inline bool rp_tracing(const rp_context *c) {
    return c->trace_fn != NULL;
}

/* The KV view of plan step e for a token's sequence. */
static inline const rp_kv_view *rp_ctx_kv(const rp_context *c, int e, int seq) {
    return &c->state.kv[(size_t)e * (size_t)c->n_seq + (size_t)seq];
}

#endif
