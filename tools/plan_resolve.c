/* What every tool does with --plan FILE: the plan file read and checked
 * against the model's weights (their content hash, with a message when it has
 * to be computed), and the loud warning when --plan-force accepts other ones. */
#include "tools.h"

#include <string.h>

_Static_assert(TOOL_HASH_SIZE >= RP_CONTENT_HASH_LEN + 1, "TOOL_HASH_SIZE holds a content hash");

bool tool_content_hash(const char *cmd, const rp_model *m, char hash[TOOL_HASH_SIZE]) {
    progress pr;
    progress_init(&pr, "hashing the weights");
    rp_content_hash h;
    double t0 = now_s();
    rp_status s = rp_model_content_hash(m, progress_cb, &pr, &h);
    progress_done(&pr);
    if (s) {
        tool_fail(cmd, s);
        return false;
    }
    /* said once when it is cached, every time when it is slow and cannot be */
    double dt = now_s() - t0;
    if (h.source == RP_HASH_COMPUTED &&
        (g_verbosity > 1 || (g_verbosity > 0 && (h.cached || dt >= 1.0)))) {
        fprintf(stderr, "%s: content hash of %s computed in %.1f s (%.1f MiB of tensors); ", cmd,
                rp_model_path(m), dt, (double)rp_model_weight_bytes(m) / 1048576.0);
        if (h.cached)
            fprintf(stderr, "cached in %s\n", h.cache_path);
        else
            fprintf(stderr, "not cached (%s): it is computed again next time\n", h.cache_note);
    }
    memcpy(hash, h.hash, sizeof h.hash);
    return true;
}

void tool_warn_forced(const rp_planfile *pf, const char *file, const char *path, const char *hash,
                      const char *doing) {
    fprintf(stderr,
            "warning: --plan-force: plan '%s' (%s) was made for the weights %s%s%s%s; %s holds %s. "
            "%s (same architecture %s, same %d layers): its effect on these weights is untested\n",
            pf->name, file, pf->content_hash, pf->base_file ? " (" : "",
            pf->base_file ? pf->base_file : "", pf->base_file ? ")" : "", path, hash, doing,
            pf->arch, pf->n_layer);
}

bool tool_plan_resolve(const char *cmd, const model_opts *o, const rp_model *m, rp_planfile **pf,
                       const char **repeat, const char **map) {
    *pf = NULL;
    *repeat = o->repeat_layers;
    *map = o->layer_map;
    if (!o->plan_file) return true;
    if (o->repeat_layers || o->layer_map) {
        tool_error(cmd, "--plan and %s are alternatives; give one",
                   o->repeat_layers ? "--repeat-layers" : "--layer-map");
        return false;
    }
    rp_planfile *p;
    rp_status s = rp_planfile_read(o->plan_file, &p);
    if (s) {
        tool_fail(cmd, s);
        return false;
    }
    char hash[TOOL_HASH_SIZE];
    bool forced = false;
    if (!tool_content_hash(cmd, m, hash) ||
        (s = rp_planfile_check(p, m, hash, o->plan_force, &forced))) {
        if (s) tool_error(cmd, "--plan %s: %s", o->plan_file, rp_last_error());
        rp_planfile_free(p);
        return false;
    }
    if (forced) /* loudly, even with -q: the weights are not the ones the plan was made for */
        tool_warn_forced(p, o->plan_file, rp_model_path(m), hash, "Applying it anyway");
    else if (g_verbosity > 0)
        fprintf(stderr, "plan: '%s' from %s (made for these weights: %s)\n", p->name, o->plan_file,
                hash);
    *pf = p;
    if (p->kind == RP_PLAN_REPEAT)
        *repeat = p->spec;
    else
        *map = p->spec;
    return true;
}
