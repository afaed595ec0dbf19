/* Qwen3.5 (qwen35): the NextN / multi-token-prediction head as a callable
 * block, for speculative drafting from the target's own weights. It is
 * qwen35's draft head (rp_arch.draft, core/draft.h), which is how speculative
 * decoding reaches it; these functions are its direct interface (tests).
 *
 * The head is the model's layer n_trunk (one full-attention Qwen3.5 block with
 * nextn.eh_proj / enorm / hnorm in front and the shared head behind). It never
 * runs inside a plan. A head object lives beside one context: it borrows that
 * context's model, thread pool and scratch, and owns its KV cache (one cell per
 * position per sequence, n_ctx x n_seq_max of the context, the context's KV
 * types) and its activation buffers. Use it from the thread that uses the
 * context, between rp_decode calls.
 *
 * Row i of a call combines
 *   hidden[i]  the hidden state that predicted the token at position pos[i]+1:
 *              either the trunk's (rp_get_hidden of a context made with
 *              keep_hidden: the pre-norm residual stream, hidden_raw = true, the
 *              head applies output_norm first, as llama.cpp's h_nextn), or the
 *              head's own previous output (hidden_out, hidden_raw = false);
 *   token[i]   the token at position pos[i]+1 (its embedding, nextn.embed_tokens
 *              when the file has it, else token_embd);
 * and attends over the head's KV at position pos[i]. It yields logits for the
 * token at pos[i]+2 and the head's h_nextn (after shared_head_norm), which
 * feeds the next draft step. */
#ifndef RP_ARCH_QWEN35_H
#define RP_ARCH_QWEN35_H

#include "core/context.h"
#include "core/draft.h"

typedef struct rp_qwen35_mtp rp_qwen35_mtp;

/* A batch of head rows (the contract of rp_draft_batch, core/draft.h). */
typedef rp_draft_batch rp_qwen35_mtp_batch;

/* True when the model is a qwen35 file with a NextN head. */
bool rp_qwen35_has_mtp(const rp_model *m);
/* RP_ERR_UNSUPPORTED when the model has no head (or more than one head layer). */
rp_status rp_qwen35_mtp_new(rp_context *c, rp_qwen35_mtp **out);
void rp_qwen35_mtp_free(rp_qwen35_mtp *h);
rp_status rp_qwen35_mtp_decode(rp_qwen35_mtp *h, const rp_qwen35_mtp_batch *b);
/* Positions cached for seq in the head's KV. */
int rp_qwen35_mtp_seq_len(const rp_qwen35_mtp *h, int seq);
/* Forget positions >= p of seq (attention only: any p <= length works). */
rp_status rp_qwen35_mtp_truncate(rp_qwen35_mtp *h, int seq, int p);
/* Bytes of the head's KV cache. */
uint64_t rp_qwen35_mtp_state_bytes(const rp_qwen35_mtp *h);

#endif
