/* Speculative decoding from the same weights.
 *
 * A draft proposes a few tokens cheaply; the target context (the caller's,
 * running its own plan) checks them all in one batch and keeps the longest
 * prefix it agrees with, plus one token of its own. The draft is either
 *   - another plan over the same model (a context with its own plan and its
 *     own KV / recurrent state, sharing the model's weights and the target's
 *     thread pool), e.g. the stack with middle layers skipped; it never
 *     inherits the target's plan: no draft_plan means the trunk once, in
 *     order, whatever the target runs; or
 *   - the model's NextN / MTP head (its architecture's draft head,
 *     core/draft.h), which drafts from the target's last hidden state: with
 *     a plan, the plan's hidden state.
 *
 * Acceptance. Greedy sampling (temp <= 0) keeps a drafted token when the
 * target's own choice at that row is the same token, and the tokens produced
 * are identical, token for token, to decoding without speculation (the
 * target samples each row with the same sampler calls plain decoding makes,
 * and a batch computes each row exactly as a single token does). With
 * temperature, a drafted token d drawn from the draft's distribution q is
 * kept with probability min(1, p(d)/q(d)), p being the target's; at the
 * first rejection the replacement is drawn from max(0, p - q) normalized,
 * and after a fully accepted draft one more token is drawn from p: the
 * output follows the target's distribution exactly. p and q are the sampler
 * chain's distributions (rp_sampler_probs), so top-k/top-p/min-p/penalties
 * apply to both.
 *
 * Rollback. After a rejection the target and the draft forget the rejected
 * positions: attention caches are truncated; contexts with recurrent state
 * save a sequence checkpoint before the speculative part and restore it, and
 * the accepted tokens are decoded again on the next step.
 *
 * A sequence's tokens are decoded lazily: the last token of a sequence is
 * decoded together with the next step's drafted tokens, so its logits are
 * never computed twice. The library never prints; every failure names what
 * and where. */
#ifndef RP_SPEC_H
#define RP_SPEC_H

#include "reprise.h"

#include <stdbool.h>
#include <stdint.h>

#define RP_SPEC_DRAFT_MAX 64 /* largest draft_max */

typedef struct rp_spec_params {
    const char
        *draft_plan; /* the draft's layer map (--layer-map syntax); NULL or "" = the trunk once */
    bool mtp;        /* draft with the model's NextN / MTP head instead of a plan */
    int draft_max;   /* tokens drafted per step, 1..RP_SPEC_DRAFT_MAX (0 = default) */
    int draft_min;   /* a draft shorter than this is dropped (the step decodes plainly) */
    float p_min;     /* stop drafting at a token whose draft probability (softmax of the
                        raw logits) is below p_min; 0 = never */
} rp_spec_params;

rp_spec_params rp_spec_default_params(void);

typedef struct rp_spec_stats {
    uint64_t steps;     /* verification passes */
    uint64_t drafted;   /* drafted tokens the target checked */
    uint64_t accepted;  /* of those, kept */
    uint64_t generated; /* tokens produced */
} rp_spec_stats;

typedef struct rp_spec rp_spec;

/* Builds the draft beside target (same model, n_ctx, sequences, micro-batch,
 * KV types and threads). The target must outlive the spec and is driven by it:
 * between rp_spec_seq_reset and the end, do not decode the spec's sequences
 * in the target directly. mtp needs a model whose architecture declares a
 * draft head and whose file has one, and a target made with keep_hidden. */
rp_status rp_spec_new(rp_context *target, const rp_spec_params *params, rp_spec **out);
void rp_spec_free(rp_spec *s);

/* The draft's context (NULL with mtp): its plan report, its state size. */
const rp_context *rp_spec_draft_context(const rp_spec *s);
/* Bytes of state the draft adds (its KV / recurrent state, or the MTP head's KV). */
uint64_t rp_spec_state_bytes(const rp_spec *s);
/* One line on the draft: "draft: plan 0..2,4 (4 steps), draft-max 8" (like snprintf). */
int rp_spec_describe(const rp_spec *s, char *buf, size_t size);

/* Starts sequence seq over: clears it in every context and sets the sampling
 * of the target and of the draft (params->seed seeds the draws). */
rp_status rp_spec_seq_reset(rp_spec *s, int seq, const rp_sampler_params *params);
/* Appends tokens (a prompt, a user turn): decodes all but the last into the
 * target (and the draft), remembers them in the samplers' penalty windows. */
rp_status rp_spec_seq_feed(rp_spec *s, int seq, const int32_t *tokens, int n);
/* Keeps the first n tokens of seq (a chat template rewrote history). */
rp_status rp_spec_seq_truncate(rp_spec *s, int seq, int n);
/* Tokens in seq (fed and generated). */
int rp_spec_seq_len(const rp_spec *s, int seq);

/* One step: draft, verify, accept. Writes 1 .. min(max_new, draft_max + 1)
 * tokens to out (room for draft_max + 1 needed) and appends them to seq;
 * output stops after an end-of-generation token. Needs a non-empty sequence
 * whose last token fits the context (rp_spec_seq_len <= n_ctx); a step never
 * produces a token beyond position n_ctx. */
rp_status rp_spec_step(rp_spec *s, int seq, int max_new, int32_t *out, int *n_out);

/* rp_spec_step in two halves, for a caller that verifies several sequences
 * in one batch of its own (a server): rp_spec_prepare drafts and writes the
 * rows to verify (the sequence's last token and the drafted tokens; room for
 * draft_max + 1) to tokens; the caller decodes them in the target as
 * consecutive rows of sequence seq, continuing it, with logits for every one
 * (and nothing else of that sequence in the batch); rp_spec_finish, given the
 * batch row of the first of them, accepts as rp_spec_step does. Other
 * sequences may be prepared, decoded and finished in between; a prepared
 * sequence is finished (or reset, or truncated) before anything else is done
 * with it. */
rp_status rp_spec_prepare(rp_spec *s, int seq, int max_new, int32_t *tokens, int *n_tokens);
rp_status rp_spec_finish(rp_spec *s, int seq, int row, int32_t *out, int *n_out);

/* Counters of seq (or of every sequence with seq = -1) since the spec began. */
rp_spec_stats rp_spec_get_stats(const rp_spec *s, int seq);

/* The acceptance rule on one row (exposed for its statistical test): draft
 * token d was drawn from q; p is the target's distribution (both n floats,
 * summing to 1). u1, u2 uniform in [0,1). Returns d when accepted (*accepted
 * true), else a token drawn with u2 from max(0, p - q) normalized (from p
 * when that is empty, which only rounding can cause). */
int32_t rp_spec_accept_rule(const float *p, const float *q, int n, int32_t d, double u1, double u2,
                            bool *accepted);

#endif
