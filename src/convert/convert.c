/* The conversion mechanism: config.json access, the hyperparameter keys every
 * decoder shares, rule-driven tensor mapping with shape checks, the output
 * type rules, and streaming the planned tensors into the GGUF writer. What an
 * architecture is lives in src/arch/<name>_convert.c, found through the
 * architecture registry (rp_arch.hf_classes, rp_arch.convert). */
#include "convert/convert.h"
#include "arch/arch.h"
#include "base/json_util.h"
#include "core/planfile.h"
#include "kernels/quant.h"
#include "kernels/types.h"
#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GGML_QUANT_VERSION 2 /* general.quantization_version of the block formats */

rp_convert_params rp_convert_default_params(void) {
    rp_convert_params p = {0};
    p.outtype = RP_TYPE_F16;
    return p;
}

/* ---- config.json ------------------------------------------------------------ */

const json_t *rp_conv_cfg(const rp_conv *cv, const char *path) {
    const json_t *v = cv->config;
    char part[128];
    while (v && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        if (n >= sizeof part || !json_is_object(v)) return NULL;
        memcpy(part, path, n);
        part[n] = 0;
        v = json_object_get(v, part);
        path += n + (dot ? 1 : 0);
    }
    return json_is_null(v) ? NULL : v;
}

static rp_status cfg_missing(rp_conv *cv, const char *path) {
    return rp_fail(RP_ERR_FORMAT, "%s/config.json: required key '%s' is missing", cv->dir, path);
}

rp_status rp_conv_cfg_int(rp_conv *cv, const char *path, bool required, int64_t def, int64_t lo,
                          int64_t hi, int64_t *out) {
    const json_t *v = rp_conv_cfg(cv, path);
    if (!v) {
        if (required) return cfg_missing(cv, path);
        *out = def;
        return RP_OK;
    }
    int64_t x;
    if (json_is_integer(v))
        x = (int64_t)json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 9e18)
        x = (int64_t)json_real_value(v);
    else
        return rp_fail(RP_ERR_FORMAT, "%s/config.json: '%s' must be an integer, not %s", cv->dir,
                       path, json_is_real(v) ? "a fraction" : rp_json_kind(v));
    if (x < lo || x > hi)
        return rp_fail(RP_ERR_FORMAT,
                       "%s/config.json: '%s' = %" PRId64 " is out of range (%" PRId64 "..%" PRId64
                       ")",
                       cv->dir, path, x, lo, hi);
    *out = x;
    return RP_OK;
}

rp_status rp_conv_cfg_num(rp_conv *cv, const char *path, bool required, double def, double *out) {
    const json_t *v = rp_conv_cfg(cv, path);
    if (!v) {
        if (required) return cfg_missing(cv, path);
        *out = def;
        return RP_OK;
    }
    if (!json_is_number(v))
        return rp_fail(RP_ERR_FORMAT, "%s/config.json: '%s' must be a number, not %s", cv->dir,
                       path, rp_json_kind(v));
    double x = json_number_value(v);
    if (!isfinite(x))
        return rp_fail(RP_ERR_FORMAT, "%s/config.json: '%s' is not finite", cv->dir, path);
    *out = x;
    return RP_OK;
}

rp_status rp_conv_cfg_bool(rp_conv *cv, const char *path, bool def, bool *out) {
    const json_t *v = rp_conv_cfg(cv, path);
    if (!v) {
        *out = def;
        return RP_OK;
    }
    if (!json_is_boolean(v))
        return rp_fail(RP_ERR_FORMAT, "%s/config.json: '%s' must be true or false, not %s", cv->dir,
                       path, rp_json_kind(v));
    *out = json_is_true(v);
    return RP_OK;
}

rp_status rp_conv_cfg_str(rp_conv *cv, const char *path, const char *def, const char **out) {
    const json_t *v = rp_conv_cfg(cv, path);
    if (!v) {
        *out = def;
        return RP_OK;
    }
    if (!json_is_string(v))
        return rp_fail(RP_ERR_FORMAT, "%s/config.json: '%s' must be a string, not %s", cv->dir,
                       path, rp_json_kind(v));
    *out = json_string_value(v);
    return RP_OK;
}

/* The first of several spellings of a key (llama.cpp's find_hparam). */
static const char *cfg_first(const rp_conv *cv, const char *const *names) {
    for (; *names; names++)
        if (rp_conv_cfg(cv, *names)) return *names;
    return NULL;
}

/* ---- keys ------------------------------------------------------------------- */

static const char *arch_key(const rp_conv *cv, const char *suffix, char *buf, size_t n) {
    snprintf(buf, n, "%s.%s", cv->arch->name, suffix);
    return buf;
}

rp_status rp_conv_set_u32(rp_conv *cv, const char *suffix, uint32_t v) {
    char k[160];
    return rp_gguf_w_set_u32(cv->w, arch_key(cv, suffix, k, sizeof k), v);
}
rp_status rp_conv_set_f32(rp_conv *cv, const char *suffix, float v) {
    char k[160];
    return rp_gguf_w_set_f32(cv->w, arch_key(cv, suffix, k, sizeof k), v);
}
rp_status rp_conv_set_bool(rp_conv *cv, const char *suffix, bool v) {
    char k[160];
    return rp_gguf_w_set_bool(cv->w, arch_key(cv, suffix, k, sizeof k), v);
}
rp_status rp_conv_set_str(rp_conv *cv, const char *suffix, const char *v) {
    char k[160];
    return rp_gguf_w_set_str(cv->w, arch_key(cv, suffix, k, sizeof k), v);
}
rp_status rp_conv_set_arr(rp_conv *cv, const char *suffix, int elem_type, const void *raw,
                          uint64_t n) {
    char k[160];
    return rp_gguf_w_set_arr(cv->w, arch_key(cv, suffix, k, sizeof k), elem_type, raw, n);
}

/* ---- rope ------------------------------------------------------------------- */

rp_status rp_conv_rope_params(rp_conv *cv, const char *layer_type, rp_conv_rope *out) {
    memset(out, 0, sizeof *out);
    out->type = "default";
    bool sliding = layer_type && strcmp(layer_type, "sliding_attention") == 0;
    const char *where = "rope_parameters";
    const json_t *rp = rp_conv_cfg(cv, where);
    if (!rp) rp = rp_conv_cfg(cv, where = "rope_scaling");
    if (rp && !json_is_object(rp))
        return rp_fail(RP_ERR_FORMAT, "%s/config.json: '%s' must be an object, not %s", cv->dir,
                       where, rp_json_kind(rp));
    const json_t *obj = rp;
    if (rp && (json_object_get(rp, "full_attention") || json_object_get(rp, "sliding_attention"))) {
        obj = json_object_get(rp, sliding ? "sliding_attention" : "full_attention");
        if (obj && !json_is_object(obj))
            return rp_fail(RP_ERR_FORMAT, "%s/config.json: '%s.%s' must be an object", cv->dir,
                           where, sliding ? "sliding_attention" : "full_attention");
    } else if (sliding) {
        obj = NULL; /* the older layout scales global layers only */
    }
    out->obj = obj;
    if (obj) {
        const json_t *t = json_object_get(obj, "rope_type");
        if (!t) t = json_object_get(obj, "type");
        if (t && !json_is_string(t))
            return rp_fail(RP_ERR_FORMAT, "%s/config.json: '%s' rope_type must be a string",
                           cv->dir, where);
        if (t) out->type = json_string_value(t);
        const json_t *th = json_object_get(obj, "rope_theta");
        if (th && !json_is_number(th))
            return rp_fail(RP_ERR_FORMAT, "%s/config.json: '%s' rope_theta must be a number",
                           cv->dir, where);
        if (th) out->theta = json_number_value(th);
        if (th && !(out->theta > 0)) /* 0 would fall back to a default silently */
            return rp_fail(RP_ERR_FORMAT, "%s/config.json: '%s' rope_theta %g must be positive",
                           cv->dir, where, out->theta);
    }
    if (out->theta == 0) {
        static const char *const global[] = {"global_rope_theta", "rope_global_theta",
                                             "rope_theta_global", "rope_theta",
                                             "rotary_emb_base",   NULL};
        static const char *const local[] = {"local_rope_theta",     "rope_local_theta",
                                            "rope_theta_local",     "swa_rope_theta",
                                            "rope_local_base_freq", NULL};
        const char *k = cfg_first(cv, sliding ? local : global);
        if (k) {
            rp_status s = rp_conv_cfg_num(cv, k, true, 0, &out->theta);
            if (s) return s;
            if (!(out->theta > 0))
                return rp_fail(RP_ERR_FORMAT, "%s/config.json: %s %g must be positive", cv->dir, k,
                               out->theta);
        }
    }
    if (out->theta < 0 || (out->theta > 0 && out->theta < 1e-3))
        return rp_fail(RP_ERR_FORMAT, "%s/config.json: rope theta %g is out of range", cv->dir,
                       out->theta);
    return RP_OK;
}

rp_status rp_conv_rope_num(rp_conv *cv, const rp_conv_rope *r, const char *key, bool required,
                           double def, double *out) {
    const json_t *v = r->obj ? json_object_get(r->obj, key) : NULL;
    if (!v || json_is_null(v)) {
        if (required)
            return rp_fail(RP_ERR_FORMAT, "%s/config.json: rope scaling '%s' needs '%s'", cv->dir,
                           r->type, key);
        *out = def;
        return RP_OK;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return rp_fail(RP_ERR_FORMAT, "%s/config.json: rope parameter '%s' must be a finite number",
                       cv->dir, key);
    *out = json_number_value(v);
    return RP_OK;
}

/* ---- the decoder keys ------------------------------------------------------- */

static rp_status first_int(rp_conv *cv, const char *const *names, bool required, int64_t lo,
                           int64_t hi, int64_t *out, bool *found) {
    const char *k = cfg_first(cv, names);
    *found = k != NULL;
    if (!k) return required ? cfg_missing(cv, names[0]) : RP_OK;
    return rp_conv_cfg_int(cv, k, true, 0, lo, hi, out);
}

rp_status rp_conv_decoder_params(rp_conv *cv, bool tied_default) {
    static const char *const k_layer[] = {"n_layers", "num_hidden_layers", "n_layer", "num_layers",
                                          NULL};
    static const char *const k_ctx[] = {
        "max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length",
        "model_max_length",        NULL};
    static const char *const k_embd[] = {"hidden_size", "n_embd", "dim", NULL};
    static const char *const k_ff[] = {"intermediate_size", "n_inner", "hidden_dim", NULL};
    static const char *const k_head[] = {"num_attention_heads", "n_head", "n_heads", NULL};
    static const char *const k_kv[] = {"num_key_value_heads", "n_kv_heads", NULL};
    static const char *const k_rms[] = {"rms_norm_eps", "norm_eps", NULL};
    static const char *const k_ln[] = {"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon",
                                       NULL};
    rp_conv_hparams *hp = &cv->hp;
    rp_status s;
    bool found;
    int64_t ctx = 0;
    if ((s = first_int(cv, k_layer, true, 1, 1024, &hp->n_layer, &found))) return s;
    if ((s = rp_conv_set_u32(cv, "block_count", (uint32_t)hp->n_layer))) return s;
    if ((s = first_int(cv, k_ctx, false, 1, UINT32_MAX, &ctx, &found))) return s;
    if (found && (s = rp_conv_set_u32(cv, "context_length", (uint32_t)ctx))) return s;
    if ((s = first_int(cv, k_embd, true, 1, 1 << 20, &hp->n_embd, &found))) return s;
    if ((s = rp_conv_set_u32(cv, "embedding_length", (uint32_t)hp->n_embd))) return s;
    if ((s = first_int(cv, k_ff, true, 1, 1 << 24, &hp->n_ff, &found))) return s;
    if ((s = rp_conv_set_u32(cv, "feed_forward_length", (uint32_t)hp->n_ff))) return s;
    if ((s = first_int(cv, k_head, true, 1, 1 << 14, &hp->n_head, &found))) return s;
    if ((s = rp_conv_set_u32(cv, "attention.head_count", (uint32_t)hp->n_head))) return s;
    hp->n_head_kv = hp->n_head;
    if ((s = first_int(cv, k_kv, false, 1, hp->n_head, &hp->n_head_kv, &found))) return s;
    if (found && (s = rp_conv_set_u32(cv, "attention.head_count_kv", (uint32_t)hp->n_head_kv)))
        return s;
    if (hp->n_head % hp->n_head_kv)
        return rp_fail(RP_ERR_FORMAT,
                       "%s/config.json: num_attention_heads %" PRId64
                       " is not a multiple of num_key_value_heads %" PRId64,
                       cv->dir, hp->n_head, hp->n_head_kv);

    rp_conv_rope rope;
    if ((s = rp_conv_rope_params(cv, NULL, &rope))) return s;
    double factor = 0;
    if (!strcmp(rope.type, "linear") || !strcmp(rope.type, "yarn")) {
        if ((s = rp_conv_rope_num(cv, &rope, "factor", true, 0, &factor))) return s;
        if (factor <= 0)
            return rp_fail(RP_ERR_FORMAT, "%s/config.json: rope factor %g is not positive", cv->dir,
                           factor);
        if ((s = rp_conv_set_str(cv, "rope.scaling.type", rope.type))) return s;
        if ((s = rp_conv_set_f32(cv, "rope.scaling.factor", (float)factor))) return s;
    }
    if (!strcmp(rope.type, "yarn")) {
        double orig, x;
        if ((s = rp_conv_rope_num(cv, &rope, "original_max_position_embeddings", true, 0, &orig)))
            return s;
        if (orig < 1 || orig > UINT32_MAX || orig != floor(orig))
            return rp_fail(RP_ERR_FORMAT,
                           "%s/config.json: original_max_position_embeddings %g is not a count",
                           cv->dir, orig);
        if ((s = rp_conv_set_u32(cv, "rope.scaling.original_context_length", (uint32_t)orig)))
            return s;
        static const struct {
            const char *hf[2], *gguf;
        } yarn[] = {
            {{"extrapolation_factor", NULL}, "rope.scaling.yarn_ext_factor"},
            {{"attention_factor", "attn_factor"}, "rope.scaling.yarn_attn_factor"},
            {{"beta_fast", NULL}, "rope.scaling.yarn_beta_fast"},
            {{"beta_slow", NULL}, "rope.scaling.yarn_beta_slow"},
        };
        for (size_t i = 0; i < RP_ARRAY_LEN(yarn); i++)
            for (int j = 0; j < 2 && yarn[i].hf[j]; j++)
                if (json_object_get(rope.obj, yarn[i].hf[j]) &&
                    !json_is_null(json_object_get(rope.obj, yarn[i].hf[j]))) {
                    if ((s = rp_conv_rope_num(cv, &rope, yarn[i].hf[j], true, 0, &x))) return s;
                    if ((s = rp_conv_set_f32(cv, yarn[i].gguf, (float)x))) return s;
                    break;
                }
    } else if (strcmp(rope.type, "default") != 0 && strcmp(rope.type, "linear") != 0 &&
               strcmp(rope.type, "llama3") != 0) {
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s/config.json: rope type '%s' is not supported (default, linear, yarn; "
                       "llama3 for Llama)",
                       cv->dir, rope.type);
    }
    if (rope.theta > 0 && (s = rp_conv_set_f32(cv, "rope.freq_base", (float)rope.theta))) return s;
    rp_conv_rope local;
    if ((s = rp_conv_rope_params(cv, "sliding_attention", &local))) return s;
    if (local.theta > 0 && (s = rp_conv_set_f32(cv, "rope.freq_base_swa", (float)local.theta)))
        return s;

    const char *k = cfg_first(cv, k_rms);
    double eps;
    if (k) {
        if ((s = rp_conv_cfg_num(cv, k, true, 0, &eps))) return s;
        if (eps <= 0 || eps >= 1)
            return rp_fail(RP_ERR_FORMAT, "%s/config.json: '%s' = %g is out of range", cv->dir, k,
                           eps);
        if ((s = rp_conv_set_f32(cv, "attention.layer_norm_rms_epsilon", (float)eps))) return s;
    }
    if ((k = cfg_first(cv, k_ln))) {
        if ((s = rp_conv_cfg_num(cv, k, true, 0, &eps))) return s;
        if ((s = rp_conv_set_f32(cv, "attention.layer_norm_epsilon", (float)eps))) return s;
    }
    int64_t hd = 0;
    if ((s = rp_conv_cfg_int(cv, "head_dim", false, 0, 1, 1 << 14, &hd))) return s;
    if (hd) {
        if ((s = rp_conv_set_u32(cv, "attention.key_length", (uint32_t)hd))) return s;
        if ((s = rp_conv_set_u32(cv, "attention.value_length", (uint32_t)hd))) return s;
    } else {
        if (hp->n_embd % hp->n_head)
            return rp_fail(RP_ERR_FORMAT,
                           "%s/config.json: hidden_size %" PRId64 " is not a multiple of %" PRId64
                           " heads and there is no head_dim",
                           cv->dir, hp->n_embd, hp->n_head);
        hd = hp->n_embd / hp->n_head;
    }
    hp->head_dim = hd;
    if ((s = rp_conv_cfg_int(cv, "vocab_size", true, 0, 1, 1 << 24, &hp->n_vocab))) return s;
    return rp_conv_cfg_bool(cv, "tie_word_embeddings", tied_default, &hp->tied);
}

/* ---- tensor planning -------------------------------------------------------- */

bool rp_conv_is_used(const rp_conv *cv, const rp_st_tensor *t) {
    return cv->used && cv->used[t->index];
}

rp_status rp_conv_drop(rp_conv *cv, const rp_st_tensor *t) {
    cv->used[t->index] = true;
    return RP_OK;
}

rp_conv_out *rp_conv_find_out(rp_conv *cv, const char *name) {
    for (size_t i = 0; i < cv->n_out; i++)
        if (strcmp(cv->outs[i].name, name) == 0) return &cv->outs[i];
    return NULL;
}

static rp_conv_out *push_out(rp_conv *cv, const char *name) {
    if (rp_conv_find_out(cv, name)) {
        rp_fail(RP_ERR_FORMAT, "%s: two checkpoint tensors map to '%s'", cv->dir, name);
        return NULL;
    }
    if (cv->n_out == cv->cap_out) {
        size_t cap = cv->cap_out ? cv->cap_out * 2 : 64;
        rp_conv_out *o = rp_realloc(cv->outs, cap * sizeof *o, "output tensor table");
        if (!o) return NULL;
        cv->outs = o;
        cv->cap_out = cap;
    }
    rp_conv_out *o = &cv->outs[cv->n_out];
    memset(o, 0, sizeof *o);
    o->force_type = -1;
    o->name = rp_strdup(name);
    if (!o->name) return NULL;
    cv->n_out++;
    return o;
}

rp_conv_out *rp_conv_add(rp_conv *cv, const char *name, const rp_st_tensor *src) {
    if (src->type < 0) {
        rp_fail(RP_ERR_UNSUPPORTED,
                "checkpoint tensor '%s' has dtype %s; reprise converts F32, F16 and BF16 tensors",
                src->name, src->dtype);
        return NULL;
    }
    if (src->n_dims > 4) {
        rp_fail(RP_ERR_UNSUPPORTED, "checkpoint tensor '%s' has %u dimensions (GGUF has at most 4)",
                src->name, src->n_dims);
        return NULL;
    }
    rp_conv_out *o = push_out(cv, name);
    if (!o) return NULL;
    o->n_dims = src->n_dims ? src->n_dims : 1;
    for (int d = 0; d < 4; d++) o->ne[d] = 1;
    for (uint32_t d = 0; d < src->n_dims; d++) o->ne[d] = src->shape[src->n_dims - 1 - d];
    o->src[0] = src;
    o->n_src = 1;
    cv->used[src->index] = true;
    return o;
}

rp_conv_out *rp_conv_add_values(rp_conv *cv, const char *name, uint32_t n_dims, const int64_t *ne,
                                float *values) {
    float **ow = rp_realloc(cv->owned, (cv->n_owned + 1) * sizeof *ow, "generated tensors");
    if (!ow) {
        free(values);
        return NULL;
    }
    cv->owned = ow;
    cv->owned[cv->n_owned++] = values;
    rp_conv_out *o = push_out(cv, name);
    if (!o) return NULL;
    o->n_dims = n_dims;
    for (int d = 0; d < 4; d++) o->ne[d] = d < (int)n_dims ? ne[d] : 1;
    o->values = values;
    o->make = rp_conv_make_values;
    o->note = "generated";
    return o;
}

int64_t rp_conv_dim(const rp_conv *cv, int dim) {
    const rp_conv_hparams *hp = &cv->hp;
    if (dim == RP_DIM_NONE) return 0;
    rp_dims d;
    rp_dims_init(&d, hp->n_embd, hp->n_vocab, hp->n_ff, hp->n_head, hp->n_head_kv, hp->head_dim,
                 hp->head_dim);
    return dim > RP_DIM_ANY && dim < RP_DIM_ROT2 ? d.v[dim] : -1;
}

static bool ends_with(const char *s, const char *suffix);

/* Does name match pattern + ".weight"/".bias"? '#' matches a decimal layer
 * number (returned in *layer, else -1); *suffix points at the suffix. */
static bool rule_match(const char *pat, const char *name, int64_t *layer, const char **suffix) {
    *layer = -1;
    while (*pat) {
        if (*pat == '#') {
            if (*name < '0' || *name > '9' || (name[0] == '0' && name[1] >= '0' && name[1] <= '9'))
                return false;
            int64_t v = 0;
            while (*name >= '0' && *name <= '9') {
                v = v * 10 + (*name++ - '0');
                if (v > 1000000) return false;
            }
            *layer = v;
            pat++;
            continue;
        }
        if (*pat++ != *name++) return false;
    }
    if (strcmp(name, ".weight") && strcmp(name, ".bias")) return false;
    *suffix = name;
    return true;
}

/* The GGUF name of rule row r for a checkpoint tensor of layer `layer` with
 * suffix ".weight" or ".bias". */
static void gguf_name(char *buf, size_t n, const rp_tensor_def *r, int64_t layer,
                      const char *suffix) {
    rp_tensor_name(r, (int)layer, buf, n);
    const size_t len = strlen(buf), w = strlen(".weight");
    RP_ASSERT(len > w && !strcmp(buf + len - w, ".weight"));
    snprintf(buf + len - w, n - (len - w), "%s", suffix);
}

/* pattern with '#' replaced by the layer number, plus suffix */
static void expand(char *buf, size_t n, const char *pat, int64_t layer, const char *suffix) {
    size_t k = 0;
    for (; *pat && k + 24 < n; pat++) {
        if (*pat == '#')
            k += (size_t)snprintf(buf + k, n - k, "%" PRId64, layer);
        else
            buf[k++] = *pat;
    }
    snprintf(buf + k, n - k, "%s", suffix);
}

static void fmt_shape(char *buf, size_t n, uint32_t nd, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (uint32_t d = 0; d < nd && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* One PEFT tensor t against the rules (--lora). */
static rp_status lora_map_one(rp_conv *cv, const rp_st_tensor *t, const rp_conv_rule *rules,
                              size_t n_rules) {
    static const char pre[] = "base_model.model.";
    const char *n = t->name;
    size_t len = strlen(n);
    bool is_a = ends_with(n, ".lora_A.weight"), is_b = ends_with(n, ".lora_B.weight");
    if (strncmp(n, pre, sizeof pre - 1) || (!is_a && !is_b)) return RP_OK; /* unused: reported */
    char hf[256];
    const size_t core = len - (sizeof pre - 1) - strlen(".lora_A.weight");
    if (core + 8 >= sizeof hf) return RP_OK;
    snprintf(hf, sizeof hf, "%.*s.weight", (int)core, n + sizeof pre - 1);
    for (size_t r = 0; r < n_rules; r++) {
        int64_t layer;
        const char *suffix;
        if (!rule_match(rules[r].hf, hf, &layer, &suffix)) continue;
        const rp_tensor_def *row = rules[r].gguf;
        if (layer >= cv->lora_layers)
            return rp_fail(RP_ERR_FORMAT, "%s: layer %" PRId64 " is beyond the adapter's %" PRId64,
                           t->name, layer, cv->lora_layers);
        if (row->ne1 == RP_DIM_NONE || t->n_dims != 2)
            return rp_fail(RP_ERR_UNSUPPORTED, "%s: a LoRA pair on a tensor that is not a matrix",
                           t->name);
        const int64_t want = is_a ? rp_conv_dim(cv, row->ne0) : rp_conv_dim(cv, row->ne1),
                      got = is_a ? t->shape[1] : t->shape[0],
                      rank = is_a ? t->shape[0] : t->shape[1];
        if ((want >= 0 && got != want) || rank != cv->lora_rank)
            return rp_fail(RP_ERR_FORMAT,
                           "%s has shape [%" PRId64 ", %" PRId64 "]; config.json and r = %" PRId64
                           " imply %s",
                           t->name, t->shape[0], t->shape[1], cv->lora_rank,
                           is_a ? "[r, n_in]" : "[n_out, r]");
        char gname[272];
        gguf_name(gname, sizeof gname - 8, row, layer, ".weight");
        strcat(gname, is_a ? ".lora_a" : ".lora_b");
        rp_conv_out *o = rp_conv_add(cv, gname, t);
        if (!o) return RP_ERR_FORMAT;
        o->make = is_a ? NULL : rules[r].make;
        o->note = is_a ? NULL : rules[r].note;
        return RP_OK;
    }
    return RP_OK;
}

rp_status rp_conv_map(rp_conv *cv, const rp_conv_rule *rules, size_t n_rules) {
    for (uint64_t i = 0; cv->lora && i < rp_st_n_tensors(cv->st); i++) {
        rp_status s =
            cv->used[i] ? RP_OK : lora_map_one(cv, rp_st_tensor_at(cv->st, i), rules, n_rules);
        if (s) return s;
    }
    if (cv->lora) return RP_OK;
    for (uint64_t i = 0; i < rp_st_n_tensors(cv->st); i++) {
        const rp_st_tensor *t = rp_st_tensor_at(cv->st, i);
        if (cv->used[i]) continue;
        for (size_t r = 0; r < n_rules; r++) {
            int64_t layer;
            const char *suffix;
            if (!rule_match(rules[r].hf, t->name, &layer, &suffix)) continue;
            if (t->type < 0)
                return rp_fail(
                    RP_ERR_UNSUPPORTED,
                    "checkpoint tensor '%s' has dtype %s; reprise converts F32, F16 and BF16 "
                    "tensors",
                    t->name, t->dtype);
            if (layer >= cv->hp.n_layer)
                return rp_fail(RP_ERR_FORMAT,
                               "checkpoint tensor '%s': layer %" PRId64 " is beyond the %" PRId64
                               " layers of config.json",
                               t->name, layer, cv->hp.n_layer);
            /* expected shape, in safetensors order (outermost first) */
            const rp_tensor_def *row = rules[r].gguf;
            bool bias = strcmp(suffix, ".bias") == 0;
            int64_t want[2];
            uint32_t nd;
            if (bias) {
                nd = 1;
                want[0] = rp_conv_dim(cv, row->ne1 != RP_DIM_NONE ? row->ne1 : row->ne0);
            } else if (row->ne1 != RP_DIM_NONE) {
                nd = 2;
                want[0] = rp_conv_dim(cv, row->ne1);
                want[1] = rp_conv_dim(cv, row->ne0);
            } else {
                nd = 1;
                want[0] = rp_conv_dim(cv, row->ne0);
            }
            bool ok = t->n_dims == nd;
            for (uint32_t d = 0; ok && d < nd; d++) ok = want[d] < 0 || t->shape[d] == want[d];
            if (!ok && row->ne0 != RP_DIM_ANY) {
                char got[96], exp[96];
                fmt_shape(got, sizeof got, t->n_dims, t->shape);
                fmt_shape(exp, sizeof exp, nd, want);
                return rp_fail(RP_ERR_FORMAT,
                               "checkpoint tensor '%s' has shape %s, config.json implies %s",
                               t->name, got, exp);
            }
            char gname[256];
            gguf_name(gname, sizeof gname, row, layer, suffix);
            rp_conv_out *o = rp_conv_add(cv, gname, t);
            if (!o) return RP_ERR_FORMAT;
            o->make = rules[r].make;
            o->note = rules[r].note;
            break;
        }
    }
    /* every required weight is there */
    for (size_t r = 0; r < n_rules; r++) {
        if (!(rules[r].flags & RP_RULE_REQUIRED)) continue;
        bool per_layer = strchr(rules[r].hf, '#') != NULL;
        for (int64_t l = 0; l < (per_layer ? cv->hp.n_layer : 1); l++) {
            char name[256];
            expand(name, sizeof name, rules[r].hf, l, ".weight");
            if (!rp_st_find(cv->st, name))
                return rp_fail(RP_ERR_FORMAT,
                               "%s: the checkpoint has no tensor '%s' (a %s needs it)", cv->dir,
                               name, cv->hf_arch);
        }
    }
    return RP_OK;
}

static int config_dtype(rp_conv *cv) {
    const char *dt = NULL;
    if (rp_conv_cfg_str(cv, "dtype", NULL, &dt) ||
        (!dt && rp_conv_cfg_str(cv, "torch_dtype", NULL, &dt)))
        dt = NULL;
    if (dt && !strcmp(dt, "float32")) return RP_TYPE_F32;
    if (dt && !strcmp(dt, "float16")) return RP_TYPE_F16;
    return RP_TYPE_BF16;
}

rp_status rp_conv_rule_shapes(rp_conv *cv, rp_st *st, const rp_conv_rule *rules, size_t n_rules) {
    int type = config_dtype(cv);
    for (size_t r = 0; r < n_rules; r++) {
        if (!(rules[r].flags & RP_RULE_REQUIRED)) continue;
        int64_t shape[2];
        const rp_tensor_def *row = rules[r].gguf;
        uint32_t nd = row->ne1 != RP_DIM_NONE ? 2 : 1;
        if (nd == 2) {
            shape[0] = rp_conv_dim(cv, row->ne1);
            shape[1] = rp_conv_dim(cv, row->ne0);
        } else {
            shape[0] = rp_conv_dim(cv, row->ne0);
        }
        if (shape[0] < 0 || (nd == 2 && shape[1] < 0))
            return rp_fail(RP_ERR_INTERNAL, "rule '%s' has no definite shape", rules[r].hf);
        bool per_layer = strchr(rules[r].hf, '#') != NULL;
        for (int64_t l = 0; l < (per_layer ? cv->hp.n_layer : 1); l++) {
            char name[256];
            expand(name, sizeof name, rules[r].hf, l, ".weight");
            rp_status s = rp_st_add_shape(st, name, type, nd, shape);
            if (s) return s;
        }
    }
    return RP_OK;
}

rp_status rp_conv_output_head(rp_conv *cv) {
    if (cv->lora) return RP_OK;
    const rp_st_tensor *t = rp_st_find(cv->st, "lm_head.weight");
    if (cv->hp.tied) return t ? rp_conv_drop(cv, t) : RP_OK;
    if (!t)
        return rp_fail(RP_ERR_FORMAT,
                       "%s: tie_word_embeddings is false but the checkpoint has no lm_head.weight",
                       cv->dir);
    return RP_OK;
}

/* ---- producers -------------------------------------------------------------- */

int64_t rp_conv_src_row_len(const rp_st_tensor *t) {
    return t->n_dims >= 2 ? t->shape[t->n_dims - 1] : (int64_t)t->n_elem;
}

rp_status rp_conv_src_rows(const rp_st_tensor *t, int64_t row0, int64_t n_rows, float *dst) {
    int64_t len = rp_conv_src_row_len(t);
    return rp_st_read_f32(t, (uint64_t)(row0 * len), (uint64_t)(n_rows * len), dst);
}

rp_status rp_conv_make_copy(rp_conv *cv, const rp_conv_out *o, int64_t row0, int64_t n_rows,
                            float *dst) {
    (void)cv;
    RP_ASSERT(rp_conv_src_row_len(o->src[0]) == o->ne[0]);
    return rp_conv_src_rows(o->src[0], row0, n_rows, dst);
}

rp_status rp_conv_make_values(rp_conv *cv, const rp_conv_out *o, int64_t row0, int64_t n_rows,
                              float *dst) {
    (void)cv;
    memcpy(dst, o->values + row0 * o->ne[0], (size_t)(n_rows * o->ne[0]) * sizeof(float));
    return RP_OK;
}

/* ---- output types ----------------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* llama.cpp's convert_hf_to_gguf.py rules. */
static int pick_type(const rp_conv *cv, const rp_conv_out *o) {
    if (o->force_type >= 0) return o->force_type;
    const bool pair = ends_with(o->name, ".lora_a") || ends_with(o->name, ".lora_b");
    if (o->n_dims <= 1 || ends_with(o->name, "_norm.weight") ||
        (!ends_with(o->name, ".weight") && !pair))
        return RP_TYPE_F32;
    if (cv->outtype == RP_TYPE_Q8_0 && o->ne[0] % QK8_0) return RP_TYPE_F16;
    return cv->outtype;
}

/* ---- open / write ------------------------------------------------------------ */

/* Does the directory hold any weights (an index or a model*.safetensors)? Only
 * names are looked at: a malformed file must still be reported, not planned
 * around. */
static bool has_weights(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL)
        found = strncmp(e->d_name, "model", 5) == 0 && ends_with(e->d_name, ".safetensors");
    closedir(d);
    if (!found) {
        size_t n = strlen(dir) + 40;
        char *p = rp_malloc(n, "path");
        struct stat sb;
        if (p) {
            snprintf(p, n, "%s/model.safetensors.index.json", dir);
            found = stat(p, &sb) == 0;
        }
        free(p);
    }
    return found;
}

static rp_status load_config(rp_conv *cv) {
    size_t n = strlen(cv->dir) + 16;
    char *path = rp_malloc(n, "path");
    if (!path) return RP_ERR_NOMEM;
    snprintf(path, n, "%s/config.json", cv->dir);
    json_error_t err;
    /* numbers as doubles: some configs carry integers beyond 64 bits */
    bool read_failed;
    json_t *root =
        rp_json_load_path(path, (size_t)16 << 20, /* a config is a few KiB */
                          JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &err, &read_failed);
    rp_status s = RP_OK;
    struct stat sb;
    if (!root) {
        if (read_failed && stat(path, &sb) == 0)
            s = rp_fail_prefix(RP_ERR_IO, "config.json");
        else if (stat(path, &sb) != 0)
            s = rp_fail(RP_ERR_IO,
                        "%s: no config.json (is this a Hugging Face checkpoint directory?)",
                        cv->dir);
        else
            s = rp_fail(RP_ERR_FORMAT, "%s at byte offset %d (line %d, column %d): %s", path,
                        err.position, err.line, err.column, err.text);
    } else if (!json_is_object(root)) {
        s = rp_fail(RP_ERR_FORMAT, "%s: the top level is not an object", path);
    }
    free(path);
    if (s) {
        json_decref(root);
        return s;
    }
    /* multimodal configs keep the language model's keys in text_config */
    json_t *tc = json_object_get(root, "text_config");
    if (json_is_object(tc)) {
        json_t *merged = json_deep_copy(root);
        if (!merged || json_object_update(merged, tc)) {
            json_decref(merged);
            json_decref(root);
            return rp_fail(RP_ERR_NOMEM, "out of memory merging text_config");
        }
        json_decref(root);
        root = merged;
    }
    cv->config = root;
    return RP_OK;
}

/* Output order: token_embd, the blocks by layer number, then the rest; by
 * name within each (the same order however the plan was made). */
static int64_t out_group(const char *name) {
    if (!strcmp(name, rp_io_rows[RP_IO_TOKEN_EMBD].name)) return -1;
    if (!strncmp(name, "blk.", 4) && name[4] >= '0' && name[4] <= '9')
        return strtoll(name + 4, NULL, 10);
    return INT64_MAX;
}

static int cmp_out(const void *pa, const void *pb) {
    const rp_conv_out *a = pa, *b = pb;
    int64_t ga = out_group(a->name), gb = out_group(b->name);
    if (ga != gb) return ga < gb ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* ---- architecture options ---------------------------------------------------- */

const char *rp_conv_arch_list(void) {
    return rp_arch_hf_list();
}

/* params.arch_opts split into cv->opt (key and value strings, "" for a bare
 * key); every key must be one the architecture's converter declares. */
static rp_status parse_opts(rp_conv *cv) {
    const char *p = cv->p.arch_opts ? cv->p.arch_opts : "";
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        const size_t nk = (size_t)((eq ? eq : end) - p);
        if (nk) {
            char **o = rp_realloc(cv->opt, (cv->n_opt + 1) * 2 * sizeof *o, "converter options");
            if (!o) return RP_ERR_NOMEM;
            cv->opt = o;
            o[2 * cv->n_opt] = rp_strndup(p, nk);
            o[2 * cv->n_opt + 1] = eq ? rp_strndup(eq + 1, (size_t)(end - eq - 1)) : rp_strdup("");
            cv->n_opt++;
            if (!o[2 * cv->n_opt - 2] || !o[2 * cv->n_opt - 1]) return RP_ERR_NOMEM;
            const rp_conv_opt *d = cv->hooks->opts;
            while (d && d->key && strcmp(d->key, o[2 * cv->n_opt - 2])) d++;
            if (!d || !d->key) {
                rp_buf known = {0};
                for (d = cv->hooks->opts; d && d->key; d++)
                    rp_buf_printf(&known, "%s%s", known.len ? ", " : "", d->key);
                rp_status s = rp_fail(
                    RP_ERR_INVALID_ARG,
                    "architecture option '%s' is not one the %s converter takes (%s)",
                    o[2 * cv->n_opt - 2], cv->arch->name, known.len ? known.data : "it takes none");
                rp_buf_free(&known);
                return s;
            }
        }
        p = *end ? end + 1 : end;
    }
    return RP_OK;
}

const char *rp_conv_opt_get(const rp_conv *cv, const char *key) {
    for (size_t i = 0; i < cv->n_opt; i++)
        if (!strcmp(cv->opt[2 * i], key)) return cv->opt[2 * i + 1];
    return NULL;
}

bool rp_conv_opt_flag(const rp_conv *cv, const char *key) {
    return rp_conv_opt_get(cv, key) != NULL;
}

static rp_status plan(rp_conv *cv) {
    const rp_convert_params *p = &cv->p;
    rp_status s;
    if ((s = load_config(cv))) return s;
    const json_t *archs = rp_conv_cfg(cv, "architectures");
    if (!json_is_array(archs) || !json_is_string(json_array_get(archs, 0)))
        return rp_fail(RP_ERR_FORMAT,
                       "%s/config.json: no \"architectures\" list naming the model class", cv->dir);
    const char *hf = json_string_value(json_array_get(archs, 0));
    cv->arch = rp_arch_find_hf(hf);
    if (!cv->arch)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s: architecture '%s' is not supported by reprise convert (supported: %s)",
                       cv->dir, hf, rp_conv_arch_list());
    cv->hooks = cv->arch->convert;
    cv->hf_arch = hf;
    if ((s = parse_opts(cv))) return s;
    if (!(cv->w = rp_gguf_writer_new())) return RP_ERR_NOMEM;
    const char *base = strrchr(cv->dir, '/');
    base = base && base[1] ? base + 1 : cv->dir;
    if ((s = rp_gguf_w_set_str(cv->w, "general.architecture", cv->arch->name))) return s;
    cv->lora = p->lora_dir != NULL;
    if (cv->lora && !cv->arch->deltas)
        return rp_fail(RP_ERR_UNSUPPORTED, "--lora: reprise applies no LoRA to %s models",
                       cv->arch->name);
    if ((s = rp_gguf_w_set_str(cv->w, "general.type", cv->lora ? "adapter" : "model"))) return s;
    if ((s = rp_gguf_w_set_str(cv->w, "general.name", base))) return s;
    if ((s = cv->hooks->params(cv))) return s;
    if (cv->lora && (s = rp_conv_lora_keys(cv))) return s;

    if (!p->vocab_only) {
        if (!p->lora_dir && p->shapes_from_config && !has_weights(cv->dir)) {
            if (!cv->hooks->shapes)
                return rp_fail(RP_ERR_UNSUPPORTED,
                               "%s: no weights, and %s cannot be planned from config.json alone",
                               cv->dir, cv->hf_arch);
            if (!(cv->st = rp_st_new_shapes())) return RP_ERR_NOMEM;
            cv->from_shapes = true;
            if ((s = cv->hooks->shapes(cv, cv->st))) return s;
        } else if (cv->lora) {
            size_t n = strlen(p->lora_dir) + 32;
            char *path = rp_malloc(n, "path");
            if (!path) return RP_ERR_NOMEM;
            snprintf(path, n, "%s/adapter_model.safetensors", p->lora_dir);
            s = rp_st_open(path, &cv->st);
            free(path);
            if (s) return s;
        } else if ((s = rp_st_open_dir(cv->dir, &cv->st))) {
            return s;
        }
        cv->used =
            rp_calloc((size_t)rp_st_n_tensors(cv->st) + 1, sizeof *cv->used, "tensor bookkeeping");
        if (!cv->used) return RP_ERR_NOMEM;
    }
    cv->outtype = p->outtype;
    if (cv->outtype < 0) { /* auto: the first matrix's 16-bit type, else F16 */
        cv->outtype = RP_TYPE_F16;
        for (uint64_t i = 0; cv->st && i < rp_st_n_tensors(cv->st); i++) {
            const rp_st_tensor *t = rp_st_tensor_at(cv->st, i);
            if (t->n_dims < 2) continue;
            if (t->type == RP_TYPE_BF16) cv->outtype = RP_TYPE_BF16;
            break;
        }
    }
    if (cv->outtype != RP_TYPE_F32 && cv->outtype != RP_TYPE_F16 && cv->outtype != RP_TYPE_BF16 &&
        cv->outtype != RP_TYPE_Q8_0)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "output type %s is not one reprise convert writes (f32, f16, bf16, q8_0)",
                       rp_type_name(cv->outtype) ? rp_type_name(cv->outtype) : "?");
    if ((s = rp_gguf_w_set_u32(cv->w, "general.file_type", (uint32_t)rp_type_ftype(cv->outtype))))
        return s;
    if ((s = rp_gguf_w_set_u32(cv->w, "general.quantization_version", GGML_QUANT_VERSION)))
        return s;

    if (cv->lora) {
        /* an adapter carries no tokenizer */
    } else if (p->no_vocab) {
        if ((s = rp_gguf_w_set_str(cv->w, "tokenizer.ggml.model", "none"))) return s;
    } else if ((s = cv->hooks->vocab ? cv->hooks->vocab(cv) : rp_conv_vocab(cv, true, -1))) {
        return s;
    }
    if (p->vocab_only) return RP_OK;

    /* buffers some checkpoints carry that are not weights (llama.cpp skips them too) */
    for (uint64_t i = 0; i < rp_st_n_tensors(cv->st); i++) {
        const char *n = rp_st_tensor_at(cv->st, i)->name;
        if (ends_with(n, ".rotary_emb.inv_freq") || ends_with(n, ".attention.masked_bias") ||
            ends_with(n, ".attention.bias"))
            cv->used[i] = true;
    }
    if ((s = cv->hooks->tensors(cv))) return s;
    if (cv->lora) rp_conv_lora_keep_pairs(cv);
    for (uint64_t i = 0; i < rp_st_n_tensors(cv->st); i++)
        if (!cv->used[i]) {
            const rp_st_tensor *t = rp_st_tensor_at(cv->st, i);
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "%s: checkpoint tensor '%s' has no place in a %s GGUF file",
                           t->file[0] ? t->file : cv->dir, t->name, cv->arch->name);
        }
    const rp_conv_out *embd = rp_conv_find_out(cv, rp_io_rows[RP_IO_TOKEN_EMBD].name);
    if (cv->n_tokens > 0 && embd && embd->ne[1] != cv->n_tokens)
        return rp_fail(RP_ERR_FORMAT,
                       "%s: the tokenizer has %" PRId64 " tokens but token_embd.weight has %" PRId64
                       " rows",
                       cv->dir, cv->n_tokens, embd->ne[1]);
    qsort(cv->outs, cv->n_out, sizeof *cv->outs, cmp_out);
    for (size_t i = 0; i < cv->n_out; i++) {
        rp_conv_out *o = &cv->outs[i];
        o->type = pick_type(cv, o);
        if (o->type == RP_TYPE_F16 && cv->outtype == RP_TYPE_Q8_0 && o->force_type < 0)
            rp_log(RP_LOG_INFO,
                   "%s: rows of %" PRId64
                   " values cannot be split into q8_0 blocks of %d; stored as f16",
                   o->name, o->ne[0], QK8_0);
        if ((s = rp_gguf_w_add_tensor(cv->w, o->name, o->type, o->n_dims, o->ne, NULL))) return s;
    }
    /* the weights' identity for plan files, computed as they are written
     * (its keys are here already, so a dry run's size counts them) */
    return rp_content_hash_stamp(cv->w);
}

rp_status rp_conv_open(const rp_convert_params *p, rp_conv **out) {
    *out = NULL;
    if (!p->dir || !p->dir[0]) return rp_fail(RP_ERR_INVALID_ARG, "no checkpoint directory");
    rp_conv *cv = rp_calloc(1, sizeof *cv, "converter");
    if (!cv) return RP_ERR_NOMEM;
    cv->p = *p;
    cv->dir = rp_strdup(p->dir);
    if (!cv->dir) {
        free(cv);
        return RP_ERR_NOMEM;
    }
    for (size_t n = strlen(cv->dir); n > 1 && cv->dir[n - 1] == '/'; n--) cv->dir[n - 1] = 0;
    cv->p.dir = cv->dir;
    rp_status s = plan(cv);
    if (s) {
        rp_conv_free(cv);
        return s;
    }
    *out = cv;
    return RP_OK;
}

void rp_conv_free(rp_conv *cv) {
    if (!cv) return;
    for (size_t i = 0; i < cv->n_out; i++) free(cv->outs[i].name);
    for (size_t i = 0; i < cv->n_owned; i++) free(cv->owned[i]);
    free(cv->outs);
    free(cv->owned);
    free(cv->used);
    free(cv->chunk);
    free(cv->arch_data);
    for (size_t i = 0; i < 2 * cv->n_opt; i++) free(cv->opt[i]);
    free(cv->opt);
    rp_st_close(cv->st);
    rp_gguf_writer_free(cv->w);
    json_decref(cv->config);
    free(cv->dir);
    free(cv);
}

const char *rp_conv_hf_arch(const rp_conv *cv) {
    return cv->hf_arch;
}
const char *rp_conv_arch_name(const rp_conv *cv) {
    return cv->arch->name;
}
bool rp_conv_from_shapes(const rp_conv *cv) {
    return cv->from_shapes;
}
int64_t rp_conv_n_tokens(const rp_conv *cv) {
    return cv->n_tokens;
}
size_t rp_conv_n_out(const rp_conv *cv) {
    return cv->n_out;
}
const rp_conv_out *rp_conv_out_at(const rp_conv *cv, size_t i) {
    return i < cv->n_out ? &cv->outs[i] : NULL;
}
uint64_t rp_conv_file_size(const rp_conv *cv) {
    return rp_gguf_w_size(cv->w);
}

/* The writer's fill callback: rows of output `index` in chunks, through its
 * producer, converted to the output type. */
static rp_status fill(void *user, uint64_t index, void *dst, uint64_t nbytes) {
    rp_conv *cv = user;
    const rp_conv_out *o = &cv->outs[index];
    const rp_type_traits *tt = rp_type_get(o->type);
    RP_ASSERT(tt && tt->from_float);
    int64_t ne0 = o->ne[0], rows = o->ne[1] * o->ne[2] * o->ne[3];
    size_t row_bytes = rp_row_size(o->type, ne0);
    RP_ASSERT((uint64_t)rows * row_bytes == nbytes);
    if (cv->chunk_floats < (size_t)ne0) {
        size_t n = RP_MAX((size_t)ne0, (size_t)1 << 18);
        float *c = rp_realloc(cv->chunk, n * sizeof *c, "conversion buffer");
        if (!c) return RP_ERR_NOMEM;
        cv->chunk = c;
        cv->chunk_floats = n;
    }
    int64_t per = (int64_t)(cv->chunk_floats / (size_t)ne0);
    for (int64_t r = 0; r < rows; r += per) {
        int64_t k = RP_MIN(per, rows - r);
        rp_status s = (o->make ? o->make : rp_conv_make_copy)(cv, o, r, k, cv->chunk);
        if (s) return rp_fail_prefix(s, "converting '%s'", o->name);
        tt->from_float(cv->chunk, (uint8_t *)dst + (size_t)r * row_bytes, k * ne0);
    }
    return RP_OK;
}

rp_status rp_conv_write(rp_conv *cv, const char *path, rp_progress_fn progress, void *user) {
    if (cv->from_shapes)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "%s: planned from config.json alone, there are no weights to write",
                       cv->dir);
    rp_gguf_w_set_fill(cv->w, fill, cv);
    return rp_gguf_w_write(cv->w, path, progress, user);
}

rp_status rp_conv_vocab(rp_conv *cv, bool pad_to_config, int add_space_prefix) {
    return rp_convert_tokenizer(cv->dir, cv->config, pad_to_config ? cv->hp.n_vocab : 0,
                                add_space_prefix, cv->p.vocab_pre, cv->w, &cv->n_tokens);
}
