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
 * and where.
 *
 * The interface is public (include/reprise_tools.h, "speculative decoding"). */
#ifndef RP_SPEC_H
#define RP_SPEC_H

#include "reprise.h"
#include "reprise_tools.h"

#endif
