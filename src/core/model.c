#include "core/model.h"
#include "arch/arch.h"
#include "kernels/types.h"
#include "base/util.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *rp_layer_kind_name(int kind) {
    static const char *const names[] = {"attn", "swa", "rec", "hyb"};
    return kind >= 0 && kind < 4 ? names[kind] : "?";
}

rp_model_params rp_model_default_params(void) {
    rp_model_params p = {0};
    return p;
}

bool rp_model_own(rp_model *m, void *p) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 16;
        void **o = rp_realloc(m->owned, (size_t)cap * sizeof *o, "model buffers");
        if (!o) return false;
        m->owned = o;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return true;
}

const char *rp_arch_key(const rp_model *m, const char *suffix, char *buf, size_t n) {
    snprintf(buf, n, "%s.%s", m->arch->name, suffix);
    return buf;
}

rp_status rp_hp_u32(const rp_model *m, const char *suffix, bool required, uint32_t def, uint32_t lo,
                    uint32_t hi, int *out) {
    char key[160];
    rp_arch_key(m, suffix, key, sizeof key);
    uint32_t v = def;
    bool found = false;
    const rp_gguf_val *val = rp_gguf_get(m->gguf, key);
    if (val && val->type == RP_GGUF_ARRAY) {
        /* a per-layer array where a scalar is read: all entries must agree */
        if (!rp_gguf_type_is_int((int)val->arr.type) || val->arr.n == 0)
            return rp_fail(RP_ERR_FORMAT, "%s: key '%s' must be an integer or an integer array",
                           m->path, key);
        int64_t x0 = rp_gguf_arr_i64(val, 0);
        if (x0 < 0 || x0 > (int64_t)UINT32_MAX)
            return rp_fail(RP_ERR_FORMAT, "%s: key '%s'[0] = %" PRId64 " is out of range", m->path,
                           key, x0);
        v = (uint32_t)x0;
        found = true;
    } else {
        rp_status s = rp_gguf_get_u32(m->gguf, key, &v, &found);
        if (s) return s;
    }
    if (!found && required)
        return rp_fail(RP_ERR_FORMAT, "%s: required key '%s' is missing", m->path, key);
    if (found && (v < lo || v > hi))
        return rp_fail(RP_ERR_FORMAT, "%s: key '%s' = %u is out of range (%u..%u)", m->path, key, v,
                       lo, hi);
    *out = (int)v;
    return RP_OK;
}

rp_status rp_hp_f32(const rp_model *m, const char *suffix, bool required, float def, float lo,
                    float hi, float *out) {
    char key[160];
    rp_arch_key(m, suffix, key, sizeof key);
    float v = def;
    bool found = false;
    rp_status s = rp_gguf_get_f32(m->gguf, key, &v, &found);
    if (s) return s;
    if (!found && required)
        return rp_fail(RP_ERR_FORMAT, "%s: required key '%s' is missing", m->path, key);
    if (found && (!isfinite(v) || v < lo || v > hi))
        return rp_fail(RP_ERR_FORMAT, "%s: key '%s' = %g is out of range (%g..%g)", m->path, key,
                       (double)v, (double)lo, (double)hi);
    *out = v;
    return RP_OK;
}

rp_status rp_hp_layer_arr(const rp_model *m, const char *suffix, int *out, bool *found) {
    char key[160];
    rp_arch_key(m, suffix, key, sizeof key);
    const rp_gguf_val *v = rp_gguf_get(m->gguf, key);
    *found = v != NULL;
    if (!v) return RP_OK;
    int n = m->hp.n_layer;
    if (v->type == RP_GGUF_ARRAY) {
        bool is_bool = v->arr.type == RP_GGUF_BOOL;
        if (!is_bool && !rp_gguf_type_is_int((int)v->arr.type))
            return rp_fail(RP_ERR_FORMAT,
                           "%s: key '%s' at byte offset %" PRIu64
                           " must be an integer array, not %s",
                           m->path, key, v->offset, rp_gguf_type_name((int)v->arr.type));
        if (v->arr.n != (uint64_t)n)
            return rp_fail(RP_ERR_FORMAT,
                           "%s: key '%s' has %" PRIu64 " entries, the model has %d layers", m->path,
                           key, v->arr.n, n);
        for (int i = 0; i < n; i++) {
            int64_t x = rp_gguf_arr_i64(v, (uint64_t)i);
            if (x < 0 || x > INT32_MAX)
                return rp_fail(RP_ERR_FORMAT, "%s: key '%s'[%d] = %" PRId64 " is out of range",
                               m->path, key, i, x);
            out[i] = (int)x;
        }
        return RP_OK;
    }
    int64_t x;
    bool f;
    rp_status s = rp_gguf_get_i64(m->gguf, key, &x, &f);
    if (s) return s;
    if (x < 0 || x > INT32_MAX)
        return rp_fail(RP_ERR_FORMAT, "%s: key '%s' = %" PRId64 " is out of range", m->path, key,
                       x);
    for (int i = 0; i < n; i++) out[i] = (int)x;
    return RP_OK;
}

static rp_tensor *find_tensor(rp_model *m, const char *name) {
    const rp_gguf_tensor *gt = rp_gguf_find_tensor(m->gguf, name);
    if (!gt) return NULL;
    return &m->tensors[gt - rp_gguf_tensor_at(m->gguf, 0)];
}

rp_status rp_bind(rp_model *m, const rp_tensor **dst, bool required, int64_t ne0, int64_t ne1,
                  const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    *dst = NULL;
    rp_tensor *t = find_tensor(m, name);
    if (!t) {
        if (required) return rp_fail(RP_ERR_FORMAT, "%s: missing tensor '%s'", m->path, name);
        return RP_OK;
    }
    int want_dims = ne1 == 0 ? 1 : 2;
    bool shape_ok = (ne0 < 0 || t->ne[0] == ne0) && t->ne[2] == 1 && t->ne[3] == 1 &&
                    (want_dims == 1 ? t->ne[1] == 1 : (ne1 < 0 || t->ne[1] == ne1));
    if (!shape_ok) {
        char want[64];
        if (want_dims == 1)
            snprintf(want, sizeof want, "[%" PRId64 "]", ne0);
        else
            snprintf(want, sizeof want, "[%" PRId64 ", %" PRId64 "]", ne0, ne1);
        return rp_fail(RP_ERR_FORMAT,
                       "%s: tensor '%s' has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                       "], expected %s",
                       m->path, name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], want);
    }
    if (want_dims == 1 && t->type != RP_TYPE_F32) {
        /* norms and biases are read as float rows: convert once at load */
        const rp_type_traits *tt = rp_type_get(t->type);
        if (!tt->to_float)
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "%s: tensor '%s' has type %s, which reprise cannot read", m->path, name,
                           tt->name);
        float *f = rp_malloc((size_t)t->ne[0] * sizeof(float), "converted tensor");
        if (!f || !rp_model_own(m, f)) {
            free(f);
            return RP_ERR_NOMEM;
        }
        tt->to_float(t->data, f, t->ne[0]);
        t->data = f;
        t->type = RP_TYPE_F32;
        t->row_bytes = t->nbytes = (size_t)t->ne[0] * sizeof(float);
    }
    if (want_dims == 2 && !rp_type_can_compute(t->type))
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s: tensor '%s' has type %s, which reprise cannot compute yet", m->path,
                       name, rp_type_name(t->type));
    *dst = t;
    return RP_OK;
}

rp_status rp_load_transformer_hparams(rp_model *m) {
    rp_hparams *hp = &m->hp;
    rp_status s;
    int nextn = 0;
    if ((s = rp_hp_u32(m, "block_count", true, 0, 1, RP_MAX_LAYERS, &hp->n_layer))) return s;
    if ((s = rp_hp_u32(m, "nextn_predict_layers", false, 0, 0, (uint32_t)hp->n_layer - 1, &nextn)))
        return s;
    hp->n_trunk = hp->n_layer - nextn;
    if ((s = rp_hp_u32(m, "embedding_length", true, 0, 1, 1u << 20, &hp->n_embd))) return s;
    if ((s = rp_hp_u32(m, "context_length", false, 2048, 1, 1u << 24, &hp->n_ctx_train))) return s;
    if ((s = rp_hp_u32(m, "attention.head_count", true, 0, 1, 1u << 14, &hp->n_head))) return s;
    if ((s = rp_hp_u32(m, "attention.head_count_kv", false, (uint32_t)hp->n_head, 1,
                       (uint32_t)hp->n_head, &hp->n_head_kv)))
        return s;
    if ((s = rp_hp_u32(m, "feed_forward_length", true, 0, 1, 1u << 24, &hp->n_ff))) return s;
    char key[160];
    bool has_kl =
        rp_gguf_get(m->gguf, rp_arch_key(m, "attention.key_length", key, sizeof key)) != NULL;
    if (!has_kl && hp->n_embd % hp->n_head)
        return rp_fail(RP_ERR_FORMAT, "%s: %d attention heads do not divide embedding_length %d",
                       m->path, hp->n_head, hp->n_embd);
    int hd = has_kl ? 0 : hp->n_embd / hp->n_head;
    if ((s = rp_hp_u32(m, "attention.key_length", false, (uint32_t)hd, 1, 1u << 14,
                       &hp->head_dim_k)))
        return s;
    if ((s = rp_hp_u32(m, "attention.value_length", false, (uint32_t)hp->head_dim_k, 1, 1u << 14,
                       &hp->head_dim_v)))
        return s;
    if (hp->n_head % hp->n_head_kv)
        return rp_fail(RP_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d",
                       m->path, hp->n_head, hp->n_head_kv);
    if ((s = rp_hp_f32(m, "attention.layer_norm_rms_epsilon", false, 1e-5f, 0.0f, 1.0f, &hp->eps)))
        return s;

    rp_rope_params *r = &hp->rope[0];
    hp->n_rope_sets = 1;
    if ((s = rp_hp_u32(m, "rope.dimension_count", false, (uint32_t)hp->head_dim_k, 0,
                       (uint32_t)hp->head_dim_k, &r->n_rot)))
        return s;
    if (r->n_rot % 2)
        return rp_fail(RP_ERR_FORMAT, "%s: rope.dimension_count %d is odd", m->path, r->n_rot);
    if ((s = rp_hp_f32(m, "rope.freq_base", false, 10000.0f, 1e-3f, 1e12f, &r->freq_base)))
        return s;
    float factor = 1.0f;
    const char *stype = NULL;
    bool found;
    if ((s = rp_gguf_get_str(m->gguf, rp_arch_key(m, "rope.scaling.type", key, sizeof key), &stype,
                             &found)))
        return s;
    if ((s = rp_hp_f32(m, "rope.scaling.factor", false, 0.0f, 0.0f, 1e6f, &factor))) return s;
    if (factor == 0.0f) {
        float lin = 0.0f;
        if ((s = rp_hp_f32(m, "rope.scale_linear", false, 0.0f, 0.0f, 1e6f, &lin))) return s;
        factor = lin > 0.0f ? lin : 1.0f;
    }
    r->freq_scale = 1.0f;
    r->attn_factor = 1.0f;
    r->ext_factor = 0.0f;
    r->beta_fast = 32.0f;
    r->beta_slow = 1.0f;
    r->n_ctx_orig = hp->n_ctx_train;
    if (stype && strcmp(stype, "none") != 0) {
        if (strcmp(stype, "linear") == 0) {
            r->freq_scale = 1.0f / factor;
        } else if (strcmp(stype, "yarn") == 0) {
            r->freq_scale = 1.0f / factor;
            r->ext_factor = 1.0f;
            if ((s = rp_hp_u32(m, "rope.scaling.original_context_length", false,
                               (uint32_t)hp->n_ctx_train, 1, 1u << 24, &r->n_ctx_orig)))
                return s;
            if ((s = rp_hp_f32(m, "rope.scaling.yarn_beta_fast", false, 32.0f, 0.0f, 1e4f,
                               &r->beta_fast)))
                return s;
            if ((s = rp_hp_f32(m, "rope.scaling.yarn_beta_slow", false, 1.0f, 0.0f, 1e4f,
                               &r->beta_slow)))
                return s;
            float af = 1.0f;
            if ((s = rp_hp_f32(m, "rope.scaling.attn_factor", false, 1.0f, 0.0f, 1e4f, &af)))
                return s;
            r->attn_factor = af;
        } else {
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "%s: rope scaling type '%s' is not supported (none, linear, yarn)",
                           m->path, stype);
        }
    } else if (!stype && factor != 1.0f) {
        r->freq_scale = 1.0f / factor;
    }
    hp->rope[1] = hp->rope[0];
    hp->embd_scale = 1.0f;

    /* per-layer arrays (head counts, ff length) when the file has them */
    int *arr = rp_calloc((size_t)hp->n_layer, sizeof *arr, "layer array");
    if (!arr) return RP_ERR_NOMEM;
    m->info = rp_calloc((size_t)hp->n_layer, sizeof *m->info, "layer info");
    m->layers = rp_calloc((size_t)hp->n_layer, sizeof *m->layers, "layers");
    if (!m->info || !m->layers) {
        free(arr);
        return RP_ERR_NOMEM;
    }
    for (int l = 0; l < hp->n_layer; l++) {
        rp_layer_info *li = &m->info[l];
        li->kind = RP_LAYER_ATTN;
        li->n_head = hp->n_head;
        li->n_head_kv = hp->n_head_kv;
        li->head_dim_k = hp->head_dim_k;
        li->head_dim_v = hp->head_dim_v;
        li->n_ff = hp->n_ff;
        li->has_kv = true;
    }
    static const char *const arrays[] = {"attention.head_count", "attention.head_count_kv",
                                         "feed_forward_length"};
    for (int a = 0; a < 3; a++) {
        bool f;
        s = rp_hp_layer_arr(m, arrays[a], arr, &f);
        if (s || !f) {
            if (s) {
                /* a scalar stored as array of the wrong length etc. */
                free(arr);
                return s;
            }
            continue;
        }
        const rp_gguf_val *v = rp_gguf_get(m->gguf, rp_arch_key(m, arrays[a], key, sizeof key));
        if (v->type != RP_GGUF_ARRAY) continue;
        for (int l = 0; l < hp->n_layer; l++) {
            rp_layer_info *li = &m->info[l];
            int x = arr[l];
            if (a == 0) li->n_head = x;
            if (a == 1) li->n_head_kv = x;
            if (a == 2) li->n_ff = x;
        }
    }
    free(arr);
    for (int l = 0; l < hp->n_layer; l++) {
        rp_layer_info *li = &m->info[l];
        if (li->n_head < 1 || li->n_head > (1 << 14) || li->n_head_kv < 1 ||
            li->n_head % li->n_head_kv || li->n_ff > (1 << 24))
            return rp_fail(
                RP_ERR_FORMAT,
                "%s: layer %d: head_count %d / head_count_kv %d / ff %d are inconsistent", m->path,
                l, li->n_head, li->n_head_kv, li->n_ff);
    }
    return RP_OK;
}

/* The weights' final form, tensor by tensor in file order, with progress:
 * a matrix the CPU's kernels run re-laid out (rp_matmul_pack) is used only
 * in its packed copy, so the pages packing read leave memory again
 * (rp_gguf_release) and the weights are held once; so are the file bytes of
 * a tensor converted at binding (norms to F32). Every other tensor's pages
 * are touched, so the first token does not pay the page faults. */
static rp_status finish_weights(rp_model *m, const rp_model_params *p) {
    uint64_t total = 0, done = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) total += rp_gguf_tensor_at(m->gguf, i)->nbytes;
    volatile uint8_t sink = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        rp_tensor *t = &m->tensors[i];
        const rp_gguf_tensor *gt = rp_gguf_tensor_at(m->gguf, i);
        void *pk = NULL;
        /* an untied embedding is only looked up, a row at a time */
        if (t->data == gt->data && !(t == m->tok_embd && m->output != t)) {
            rp_status s = rp_matmul_pack(t, &pk);
            if (s) return s;
            if (pk && !rp_model_own(m, pk)) {
                free(pk);
                t->pack = NULL;
                return RP_ERR_NOMEM;
            }
        }
        if (t->data != gt->data || t->pack) {
            rp_gguf_release(m->gguf, gt->data, gt->nbytes);
        } else {
            const uint8_t *d = t->data;
            for (uint64_t o = 0; o < t->nbytes; o += 4096) sink ^= d[o];
        }
        done += gt->nbytes;
        if (p->progress && total && !p->progress((float)done / (float)total, p->progress_user))
            return rp_fail(RP_ERR_CANCELLED, "loading '%s' cancelled", m->path);
    }
    (void)sink;
    /* the metadata (vocabulary, ...) lives on in parsed copies */
    rp_gguf_release_header(m->gguf);
    return RP_OK;
}

void rp_model_free(rp_model *m) {
    if (!m) return;
    if (m->arch && m->arch->unload) m->arch->unload(m);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    if (m->layers)
        for (int l = 0; l < m->hp.n_layer; l++) free(m->layers[l].ext);
    free(m->layers);
    free(m->info);
    free(m->tensors);
    rp_vocab_free(m->vocab);
    rp_gguf_close(m->gguf);
    free(m->name);
    free(m->path);
    free(m);
}

rp_status rp_model_from_gguf(rp_gguf *g, const char *path, const rp_model_params *params,
                             rp_model **out) {
    *out = NULL;
    rp_model_params defp = rp_model_default_params();
    if (!params) params = &defp;
    rp_model *m = rp_calloc(1, sizeof *m, "model");
    if (!m) {
        rp_gguf_close(g);
        return RP_ERR_NOMEM;
    }
    m->gguf = g;
    m->path = rp_strdup(path ? path : "<memory>");
    rp_status s = m->path ? RP_OK : RP_ERR_NOMEM;
    if (s) goto fail;
    const char *arch = NULL, *name = NULL;
    bool found;
    if ((s = rp_gguf_get_str(m->gguf, "general.architecture", &arch, &found))) goto fail;
    if ((s = rp_gguf_get_str(m->gguf, "general.name", &name, &found))) goto fail;
    const char *base = strrchr(m->path, '/');
    m->name = rp_strdup(name && *name ? name : base ? base + 1 : m->path);
    if (!m->name) {
        s = RP_ERR_NOMEM;
        goto fail;
    }
    if ((s = rp_vocab_load(m->gguf, &m->vocab))) {
        rp_fail_prefix(s, "%s: vocabulary", m->path);
        goto fail;
    }
    if (params->vocab_only) {
        *out = m;
        return RP_OK;
    }
    if (!arch) {
        s = rp_fail(RP_ERR_FORMAT, "%s: key 'general.architecture' is missing", m->path);
        goto fail;
    }
    m->arch = rp_arch_find(arch);
    if (!m->arch) {
        s = rp_fail(RP_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: %s)",
                    m->path, arch, rp_arch_list());
        goto fail;
    }
    m->n_tensors = rp_gguf_n_tensors(m->gguf);
    m->tensors = rp_calloc((size_t)m->n_tensors + 1, sizeof *m->tensors, "tensor views");
    if (!m->tensors) {
        s = RP_ERR_NOMEM;
        goto fail;
    }
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const rp_gguf_tensor *gt = rp_gguf_tensor_at(m->gguf, i);
        rp_tensor *t = &m->tensors[i];
        t->name = gt->name;
        t->type = (int)gt->type;
        t->n_dims = (int)gt->n_dims;
        memcpy(t->ne, gt->ne, sizeof t->ne);
        t->nbytes = (size_t)gt->nbytes;
        t->row_bytes = rp_row_size(t->type, t->ne[0]);
        t->data = gt->data;
    }
    if ((s = m->arch->load(m))) goto fail;
    int32_t nv = rp_vocab_n_tokens(m->vocab);
    if (nv > 0 && nv != m->hp.n_vocab) { /* llama.cpp requires them equal too */
        s = rp_fail(RP_ERR_FORMAT,
                    "%s: the vocabulary has %d tokens but token_embd.weight %s %d rows (ids "
                    "%s would have %s)",
                    m->path, nv, nv > m->hp.n_vocab ? "only" : "has", m->hp.n_vocab,
                    nv > m->hp.n_vocab ? "past the rows" : "past the vocabulary",
                    nv > m->hp.n_vocab ? "no embedding" : "no text");
        goto fail;
    }
    if ((s = finish_weights(m, params))) goto fail;
    *out = m;
    return RP_OK;
fail:
    rp_model_free(m);
    return s;
}

rp_status rp_model_load(const char *path, const rp_model_params *params, rp_model **out) {
    *out = NULL;
    if (!path) return rp_fail(RP_ERR_INVALID_ARG, "no model path");
    rp_gguf *g;
    rp_status s = rp_gguf_open(path, &g);
    if (s) return s;
    if (params && params->private_copy && (s = rp_gguf_detach(g))) {
        rp_gguf_close(g);
        return s;
    }
    return rp_model_from_gguf(g, path, params, out);
}

const char *rp_model_arch(const rp_model *m) {
    return m->arch ? m->arch->name : "";
}
const char *rp_model_name(const rp_model *m) {
    return m->name;
}
int rp_model_n_layer(const rp_model *m) {
    return m->hp.n_trunk;
}
int rp_model_n_layer_total(const rp_model *m) {
    return m->hp.n_layer;
}
int rp_model_n_embd(const rp_model *m) {
    return m->hp.n_embd;
}
int rp_model_n_ctx_train(const rp_model *m) {
    return m->hp.n_ctx_train;
}
const rp_vocab *rp_model_vocab(const rp_model *m) {
    return m->vocab;
}

uint64_t rp_model_n_params(const rp_model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const rp_tensor *t = &m->tensors[i];
        n += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    return n;
}

uint64_t rp_model_weight_bytes(const rp_model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < rp_gguf_n_tensors(m->gguf); i++)
        n += rp_gguf_tensor_at(m->gguf, i)->nbytes;
    return n;
}

const char *rp_model_meta_str(const rp_model *m, const char *key) {
    const rp_gguf_val *v = rp_gguf_get(m->gguf, key);
    return v && v->type == RP_GGUF_STRING ? v->str.s : NULL;
}

int rp_model_desc(const rp_model *m, char *buf, size_t size) {
    /* dominant weight type by bytes */
    uint64_t by_type[RP_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < m->n_tensors; i++) by_type[m->tensors[i].type] += m->tensors[i].nbytes;
    int best = 0;
    for (int t = 0; t < RP_TYPE_COUNT; t++)
        if (by_type[t] > by_type[best]) best = t;
    double mib = (double)rp_model_weight_bytes(m) / 1048576.0;
    return snprintf(buf, size,
                    "%s (%s), %d layers, n_embd %d, n_vocab %d, %.2fM params, %s, %.2f MiB",
                    m->name, rp_model_arch(m), m->hp.n_layer, m->hp.n_embd, m->hp.n_vocab,
                    (double)rp_model_n_params(m) / 1e6, rp_type_name(best), mib);
}
