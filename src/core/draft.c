/* The draft head, through the architecture's hook (see draft.h). */
#include "core/draft.h"
#include "arch/arch.h"
#include "core/model.h"
#include "base/util.h"

#include <stdlib.h>

struct rp_draft_head {
    const rp_draft_ops *ops;
    void *impl;
};

static const rp_draft_ops *ops_of(const rp_model *m) {
    return m && m->arch ? m->arch->draft : NULL;
}

bool rp_draft_head_available(const rp_model *m) {
    const rp_draft_ops *o = ops_of(m);
    return o && o->available(m);
}

const char *rp_draft_head_needs(const rp_model *m) {
    const rp_draft_ops *o = ops_of(m);
    return o ? o->needs : "its architecture has none";
}

rp_status rp_draft_head_new(rp_context *c, rp_draft_head **out) {
    *out = NULL;
    const rp_model *m = rp_context_model(c);
    const rp_draft_ops *o = ops_of(m);
    if (!o)
        return rp_fail(RP_ERR_UNSUPPORTED, "%s: the %s architecture has no draft head", m->path,
                       m->arch->name);
    rp_draft_head *h = rp_calloc(1, sizeof *h, "draft head");
    if (!h) return RP_ERR_NOMEM;
    h->ops = o;
    rp_status s = o->create(c, &h->impl);
    if (s) {
        free(h);
        return s;
    }
    *out = h;
    return RP_OK;
}

void rp_draft_head_free(rp_draft_head *h) {
    if (!h) return;
    h->ops->destroy(h->impl);
    free(h);
}

rp_status rp_draft_head_decode(rp_draft_head *h, const rp_draft_batch *b) {
    return h->ops->decode(h->impl, b);
}

int rp_draft_head_seq_len(const rp_draft_head *h, int seq) {
    return h->ops->seq_len(h->impl, seq);
}

rp_status rp_draft_head_truncate(rp_draft_head *h, int seq, int p) {
    return h->ops->truncate(h->impl, seq, p);
}

uint64_t rp_draft_head_state_bytes(const rp_draft_head *h) {
    return h->ops->state_bytes(h->impl);
}
