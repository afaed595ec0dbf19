/* reprise serve: plans built for requests. With --plan-requests N, a request
 * whose "plan" is a spec no served plan runs gets a new entry: a context with
 * that plan over the one copy of the weights (its own slots and KV, the
 * threads of entry 0), served from then on under the spec as its name, up to
 * N of them. Without the flag such a request is refused (serve_api.c). */
#include "serve.h"

#include <stdlib.h>
#include <string.h>

/* The served contexts and the new plan's (built plan-only first: nothing
 * allocated) added up against the memory bound, as serve's startup does:
 * over it, 503 with both figures. A spec that does not build is 422. */
static bool fits_beside(srv_server *srv, const rp_context_params *cp, const char *spec,
                        unsigned *status, char *err, size_t err_size) {
    rp_context_params po = *cp;
    po.plan_only = true;
    rp_context *probe = NULL;
    rp_status s = rp_context_new(srv->model, &po, &probe);
    if (s) {
        *status = s == RP_ERR_NOMEM ? 500 : 422;
        snprintf(err, err_size, "plan '%.200s': %s", spec, rp_last_error());
        return false;
    }
    uint64_t st, sc, limit, total = 0;
    bool over = false;
    for (int i = 0; i <= srv->n_entries; i++) {
        rp_context_mem_need(i < srv->n_entries ? srv->entries[i].ctx : probe, &st, &sc,
                            i == srv->n_entries ? &limit : NULL);
        const uint64_t one = st > UINT64_MAX - sc ? UINT64_MAX : st + sc;
        over |= st == UINT64_MAX || one == UINT64_MAX || total > UINT64_MAX - one;
        if (!over) total += one;
    }
    const uint64_t mine = st > UINT64_MAX - sc ? UINT64_MAX : st + sc;
    rp_context_free(probe);
    if (!limit || (!over && total <= limit)) return true;
    const double mib = 1048576.0;
    *status = 503;
    snprintf(err, err_size,
             "plan '%.200s' needs %.1f MiB of state and scratch, %.1f MiB in all with the %d "
             "context%s served, over the %s of %.1f MiB",
             spec, (double)mine / mib, over ? 1.8e13 : (double)total / mib, (int)srv->n_entries,
             srv->n_entries == 1 ? "" : "s", cp->mem_limit ? "memory limit" : "memory available",
             (double)limit / mib);
    return false;
}

int srv_plan_for_request(srv_server *srv, const char *spec, unsigned *status, char *err,
                         size_t err_size) {
    pthread_mutex_lock(&srv->plan_mu);
    int idx = -1;
    for (int i = 0; i < srv->n_entries && idx < 0; i++) /* built meanwhile by another request */
        if (!strcmp(srv->entries[i].name, spec)) idx = i;
    if (idx >= 0) goto done;
    const int n = srv->n_entries;
    if (srv->n_request_plans >= srv->plan_requests || n >= srv->entries_cap) {
        *status = 503;
        snprintf(err, err_size,
                 "plan '%.200s' is not served, and this server has built the %d plans "
                 "--plan-requests allows",
                 spec, srv->n_request_plans);
        goto done;
    }
    rp_context_params cp = srv->plan_cp;
    const bool map = !strncmp(spec, "map:", 4);
    cp.repeat_layers = map ? NULL : spec;
    cp.layer_map = map ? spec + 4 : NULL;
    srv_entry *en = &srv->entries[n];
    memset(en, 0, sizeof *en);
    if (!fits_beside(srv, &cp, spec, status, err, err_size)) goto done;
    rp_status s = rp_context_new(srv->model, &cp, &en->ctx);
    if (!s) s = rp_context_share_pool(en->ctx, srv->entries[0].ctx);
    char *name = s ? NULL : strdup(spec);
    if (s || !name) {
        *status = s ? (s == RP_ERR_NOMEM ? 500 : 422) : 500;
        snprintf(err, err_size, "plan '%.200s': %s", spec, s ? rp_last_error() : "out of memory");
        rp_context_free(en->ctx);
        free(name);
        memset(en, 0, sizeof *en);
        goto done;
    }
    en->name = name;
    en->n_slot = srv->entries[0].n_slot;
    en->n_ctx = rp_context_n_ctx(en->ctx);
    en->plan_kind = map ? "layer-map" : "repeat-layers";
    en->plan_spec = map ? name + 4 : name;
    en->description = "built for a request (--plan-requests)";
    if (!srv_engine_add_entries(srv->engine, n + 1)) {
        *status = 500;
        snprintf(err, err_size, "out of memory");
        rp_context_free(en->ctx);
        free(name);
        memset(en, 0, sizeof *en);
        goto done;
    }
    srv->request_names[srv->n_request_plans++] = name;
    srv->n_entries = n + 1; /* after the entry is complete: readers see it whole */
    idx = n;
    if (g_verbosity > 0)
        fprintf(stderr, "serve: model '%s' built for a request: %d -> %d layers, state %.2f MiB\n",
                name, rp_model_n_layer(srv->model), rp_context_n_eff(en->ctx),
                (double)rp_context_state_bytes(en->ctx) / 1048576.0);
done:
    pthread_mutex_unlock(&srv->plan_mu);
    return idx;
}

void srv_plans_free(srv_server *srv) {
    for (int i = 0; i < srv->n_request_plans; i++) free(srv->request_names[i]);
    srv->n_request_plans = 0;
}
