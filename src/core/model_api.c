/* Public model queries that need nothing of the loader: a model from memory,
 * its path, the dominant weight type, metadata iteration and the content hash
 * of its weights. */
#include "core/model.h"
#include "core/planfile.h"
#include "kernels/types.h"
#include "base/util.h"

#include <string.h>

rp_status rp_model_load_mem(const void *data, size_t size, const char *name,
                            const rp_model_params *params, rp_model **out) {
    *out = NULL;
    if (!data || !size) return rp_fail(RP_ERR_INVALID_ARG, "no model image (empty buffer)");
    rp_gguf *g;
    rp_status s = rp_gguf_open_mem(data, size, &g);
    if (s) return rp_fail_prefix(s, "%s", name ? name : "<memory>");
    return rp_model_from_gguf(g, name, params, out);
}

const char *rp_model_path(const rp_model *m) {
    return m->path;
}

int rp_model_weight_type(const rp_model *m, bool *mixed) {
    uint64_t by_type[RP_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].n_dims >= 2 && m->tensors[i].type >= 0 &&
            m->tensors[i].type < RP_TYPE_COUNT)
            by_type[m->tensors[i].type] += m->tensors[i].nbytes;
    int best = -1, kinds = 0;
    for (int t = 0; t < RP_TYPE_COUNT; t++) {
        kinds += by_type[t] > 0;
        if (by_type[t] > 0 && (best < 0 || by_type[t] > by_type[best])) best = t;
    }
    if (mixed) *mixed = kinds > 1;
    return best;
}

int64_t rp_model_meta_count(const rp_model *m) {
    return (int64_t)rp_gguf_n_kv(m->gguf);
}

static const rp_gguf_kv *meta_at(const rp_model *m, int64_t i) {
    return i >= 0 ? rp_gguf_kv_at(m->gguf, (uint64_t)i) : NULL;
}

const char *rp_model_meta_key(const rp_model *m, int64_t i) {
    const rp_gguf_kv *kv = meta_at(m, i);
    return kv ? kv->key : NULL;
}

int rp_model_meta_type(const rp_model *m, int64_t i, int *elem) {
    const rp_gguf_kv *kv = meta_at(m, i);
    if (!kv) return -1;
    if (elem) *elem = kv->val.type == RP_GGUF_ARRAY ? (int)kv->val.arr.type : -1;
    return (int)kv->val.type;
}

int rp_model_meta_val_str(const rp_model *m, int64_t i, char *buf, size_t size) {
    const rp_gguf_kv *kv = meta_at(m, i);
    if (!kv) {
        if (size) buf[0] = 0;
        return -1;
    }
    return rp_gguf_val_text(&kv->val, false, buf, size);
}

rp_status rp_model_content_hash(const rp_model *m, rp_progress_fn progress, void *user,
                                rp_content_hash *out) {
    return rp_content_hash_get(m->gguf, progress, user, out);
}
