/* Public queries of a context's plan and state (what tools report: a server's
 * /props, a scan's timing), and the abort callback of rp_decode. */
#include "core/context.h"

bool rp_context_step_seam(const rp_context *c, int eff) {
    return eff > 0 && eff < c->plan->n_eff && c->plan->seam[eff];
}

int rp_context_plan_format(const rp_context *c, char *buf, size_t size) {
    return rp_plan_format(c->plan, buf, size);
}

int rp_context_boundary_repeats(const rp_context *c, int *band) {
    int b = 0;
    const int n = rp_plan_boundary_repeats(c->plan, &b);
    if (band) *band = b;
    return n;
}

/* Does source layer l keep state of its own (a KV cache or recurrent state)? */
static bool keeps_state(const rp_model *m, int l) {
    return m->info[l].has_kv || m->info[l].rec_floats;
}

void rp_context_state_info(const rp_context *c, rp_state_info *out) {
    const rp_model *m = c->model;
    const rp_plan *p = c->plan;
    *out = (rp_state_info){
        .kv_bytes = c->state.kv_bytes,
        .rec_bytes = c->state.rec_bytes,
        .n_seq = (uint32_t)c->n_seq,
        .n_ctx = (uint32_t)c->n_ctx,
    };
    for (int l = 0; l < m->hp.n_trunk; l++) out->n_slots_trunk += keeps_state(m, l);
    for (int e = 0; e < p->n_eff; e++) {
        out->n_slots += keeps_state(m, p->src[e]);
        out->n_slots_kv += m->info[p->src[e]].has_kv;
        out->n_slots_rec += m->info[p->src[e]].rec_floats > 0;
    }
}

void rp_context_set_abort(rp_context *c, rp_abort_fn fn, void *user) {
    c->abort_fn = fn;
    c->abort_user = user;
}
