/* A draft head: a block of the model that proposes the next tokens from the
 * trunk's hidden state (the NextN / multi-token-prediction head some files
 * carry after the trunk), for speculative decoding from the target's own
 * weights (src/core/spec.c). An architecture that has one declares its
 * rp_draft_ops in rp_arch.draft; this module is the one way in, so the
 * mechanism that drafts names no architecture.
 *
 * A head object lives beside one context: it borrows that context's model,
 * thread pool and scratch, and owns its own cache (positions per sequence, as
 * many as the context has) and buffers. Use it from the thread that uses the
 * context, between rp_decode calls.
 *
 * Row i of a call combines
 *   hidden[i]  the hidden state that predicted the token at position pos[i]+1:
 *              either the trunk's (rp_get_hidden of a context made with
 *              keep_hidden: the pre-norm residual stream, hidden_raw = true),
 *              or the head's own previous output (hidden_out, hidden_raw =
 *              false);
 *   token[i]   the token at position pos[i]+1;
 * and attends over the head's cache at position pos[i]. It yields logits for
 * the token at pos[i]+2 and the head's output hidden state, which feeds the
 * next draft step. */
#ifndef RP_DRAFT_H
#define RP_DRAFT_H

#include "reprise.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct rp_draft_batch {
    int n;                /* rows */
    const int32_t *token; /* [n] */
    const float *hidden;  /* [n][n_embd] */
    bool hidden_raw;      /* true: trunk rows from rp_get_hidden; false: the head's own rows */
    const int32_t *pos;   /* [n] must continue each sequence: pos == rp_draft_head_seq_len */
    const int32_t *seq;   /* [n] sequence ids, NULL = all 0 */
    float *logits;        /* [n][n_vocab] output, or NULL */
    float *hidden_out;    /* [n][n_embd] the head's output hidden state, or NULL */
} rp_draft_batch;

/* What an architecture declares (rp_arch.draft); impl is its own head object. */
typedef struct rp_draft_ops {
    const char *needs; /* what a file needs to have a head, for messages */
    bool (*available)(const rp_model *m);
    rp_status (*create)(rp_context *c, void **impl);
    void (*destroy)(void *impl);
    rp_status (*decode)(void *impl, const rp_draft_batch *b);
    int (*seq_len)(const void *impl, int seq);
    rp_status (*truncate)(void *impl, int seq, int p);
    uint64_t (*state_bytes)(const void *impl);
} rp_draft_ops;

typedef struct rp_draft_head rp_draft_head;

/* True when m's architecture declares a draft head and the file has one. */
bool rp_draft_head_available(const rp_model *m);
/* Why m has none, for messages ("a ... file with ... is needed"). */
const char *rp_draft_head_needs(const rp_model *m);
/* RP_ERR_UNSUPPORTED when the model has no head. */
rp_status rp_draft_head_new(rp_context *c, rp_draft_head **out);
void rp_draft_head_free(rp_draft_head *h);
rp_status rp_draft_head_decode(rp_draft_head *h, const rp_draft_batch *b);
/* Positions cached for seq. */
int rp_draft_head_seq_len(const rp_draft_head *h, int seq);
/* Forget positions >= p of seq (any p <= length). */
rp_status rp_draft_head_truncate(rp_draft_head *h, int seq, int p);
/* Bytes of the head's cache. */
uint64_t rp_draft_head_state_bytes(const rp_draft_head *h);

#endif
