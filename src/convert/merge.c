/* A plan written as a physically merged GGUF, for engines that have no plans.
 * Every step's tensors are copied to its new layer index; the NextN/MTP head
 * layers follow the trunk; per-layer arrays are re-indexed; the architecture
 * adds whatever metadata keeps each step's kind explicit (rp_arch.merge_meta). */
#include "arch/arch.h"
#include "base/util.h"
#include "core/context.h"
#include "core/planfile.h"
#include "format/gguf.h"

#include <stdlib.h>
#include <string.h>

/* Layer index of a "blk.N.rest" tensor name, -1 otherwise; *rest = "rest". */
static int blk_index(const char *name, const char **rest) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long l = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || l < 0 || l > 1000000) return -1;
    *rest = end + 1;
    return (int)l;
}

/* Source layer of merged layer i: the plan's steps, then the head layers. */
static int src_of(const rp_plan *p, int n_layer, int i) {
    if (i < p->n_eff) return p->src[i];
    return p->n_src + (i - p->n_eff) < n_layer ? p->n_src + (i - p->n_eff) : -1;
}

/* Metadata: a copy, every per-layer array of the architecture re-indexed,
 * block_count and the name updated, the architecture's own keys. */
static rp_status merge_meta(const rp_model *m, const rp_plan *p, int n_new, rp_gguf_writer *w) {
    const rp_gguf *g = m->gguf;
    const int n_layer = m->hp.n_layer;
    rp_status s = RP_OK;
    for (uint64_t i = 0; !s && i < rp_gguf_n_kv(g); i++) {
        const rp_gguf_kv *kv = rp_gguf_kv_at(g, i);
        const rp_gguf_val *v = &kv->val;
        size_t al = strlen(m->arch->name);
        bool per_layer = !strncmp(kv->key, m->arch->name, al) && kv->key[al] == '.' &&
                         v->type == RP_GGUF_ARRAY && v->arr.n == (uint64_t)n_layer &&
                         rp_gguf_type_size((int)v->arr.type) > 0;
        if (!per_layer) {
            s = rp_gguf_w_set(w, kv->key, v);
            continue;
        }
        size_t es = rp_gguf_type_size((int)v->arr.type);
        uint8_t *raw = rp_malloc(es * (size_t)n_new, "merged per-layer array");
        if (!raw) return RP_ERR_NOMEM;
        for (int l = 0; l < n_new; l++)
            memcpy(raw + es * (size_t)l, v->arr.raw + es * (size_t)src_of(p, n_layer, l), es);
        s = rp_gguf_w_set_arr(w, kv->key, (int)v->arr.type, raw, (uint64_t)n_new);
        free(raw);
    }
    char key[256];
    if (!s)
        s = rp_gguf_w_set_u32(w, rp_arch_key(m, "block_count", key, sizeof key), (uint32_t)n_new);
    if (!s) {
        char name[512];
        snprintf(name, sizeof name, "%s (merged plan %s)", rp_model_name(m), p->spec);
        s = rp_gguf_w_set_str(w, "general.name", name);
    }
    if (!s && m->arch->merge_meta) s = m->arch->merge_meta(m, p, w);
    return s;
}

/* Tensors: non-layer tensors as they are; layer tensors once per step. */
static rp_status merge_tensors(const rp_model *m, const rp_plan *p, int n_new, rp_gguf_writer *w) {
    const rp_gguf *g = m->gguf;
    const uint64_t nt = rp_gguf_n_tensors(g);
    rp_status s = RP_OK;
    for (uint64_t i = 0; !s && i < nt; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        const char *rest;
        if (blk_index(t->name, &rest) < 0)
            s = rp_gguf_w_add_tensor(w, t->name, (int)t->type, t->n_dims, t->ne, t->data);
    }
    for (int l = 0; !s && l < n_new; l++) {
        int src = src_of(p, m->hp.n_layer, l);
        for (uint64_t i = 0; !s && i < nt; i++) {
            const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
            const char *rest;
            if (blk_index(t->name, &rest) != src) continue;
            char name[512];
            snprintf(name, sizeof name, "blk.%d.%s", l, rest);
            s = rp_gguf_w_add_tensor(w, name, (int)t->type, t->n_dims, t->ne, t->data);
        }
    }
    return s;
}

rp_status rp_merge_write(const rp_context *ctx, const char *path, rp_progress_fn progress,
                         void *user, rp_merge_info *info) {
    const rp_model *m = ctx->model;
    const rp_plan *p = ctx->plan;
    if (ctx->deltas)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "merge: the plan carries deltas (LoRA adapters or residual scales), which "
                       "a merged file of plain layers cannot hold; apply them at run time");
    const int n_layer = m->hp.n_layer, n_new = p->n_eff + (n_layer - p->n_src);
    rp_gguf_writer *w = rp_gguf_writer_new();
    if (!w) return rp_fail(RP_ERR_NOMEM, "out of memory (GGUF writer)");
    rp_status s = merge_meta(m, p, n_new, w);
    if (!s) s = merge_tensors(m, p, n_new, w);
    if (!s) s = rp_content_hash_stamp(w); /* the merged weights' own identity, not the source's */
    if (!s) s = rp_gguf_w_write(w, path, progress, user);
    if (!s && info)
        *info = (rp_merge_info){.n_layer_out = n_new,
                                .n_src = n_layer,
                                .n_repeated = p->n_eff - p->n_src,
                                .bytes = rp_gguf_w_size(w)};
    rp_gguf_writer_free(w);
    return s;
}
