/* The context (internal view): a model, a plan over its layers, the state
 * that plan needs, scratch buffers and a thread pool. */
#ifndef RP_CONTEXT_H
#define RP_CONTEXT_H

#include "kv.h"
#include "matmul.h"
#include "model.h"
#include "plan.h"
#include "reprise.h"

/* A micro-batch: at most n_ubatch tokens computed together. */
typedef struct rp_ubatch {
    int n_tok;
    const int32_t *token;  /* [n_tok] (NULL when embd is given) */
    const float *embd;     /* [n_tok][n_embd] input embeddings instead of tokens, or NULL */
    const int32_t *pos;    /* [n_tok] */
    const int32_t *seq;    /* [n_tok] */
    int n_out;             /* rows that want output */
    const int32_t *out_rows; /* [n_out] ascending row indices */
    float *logits;         /* [n_out][n_vocab] destination */
    float *hidden;         /* [n_out][n_embd] destination of the final hidden state, or NULL */
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
    float *logits;          /* [n_outputs][n_vocab] */
    float *hidden;          /* [n_outputs][n_embd] (keep_hidden) */
    int32_t *out_index;     /* [n_batch_last] row -> output index or -1 */
    size_t out_cap, index_cap;
    int n_batch_last;
    /* attention scratch: per thread */
    float *attn_scratch;
    size_t attn_scratch_per_thread;
    void *arch_ctx;
};

/* Shared tail of every forward: final norm of the output rows of x
 * ([n_tok][n_embd], rows selected by ub->out_rows unless already compacted),
 * the output matmul, and the final soft-cap. x is overwritten. */
void rp_forward_output(rp_context *c, const rp_ubatch *ub, float *x, bool compacted, float *tmp);

/* The KV view of plan step e for a token's sequence. */
static inline const rp_kv_view *rp_ctx_kv(const rp_context *c, int e, int seq) {
    return &c->state.kv[(size_t)e * (size_t)c->n_seq + (size_t)seq];
}

#endif
