/* reprise convert --lora: a PEFT LoRA directory to llama.cpp's GGUF adapter
 * format (what convert_lora_to_gguf.py writes): general.type = adapter,
 * adapter.type = lora, adapter.lora.alpha, and "<base>.lora_a" [n_in, r] /
 * "<base>.lora_b" [r, n_out] per adapted matrix, named and laid out by the
 * base architecture's converter rules (the tensor mapping of convert.c).
 *
 * adapter_config.json: r and lora_alpha are required; use_rslora (PEFT
 * scales by alpha / sqrt(r) instead of alpha / r) is written as the alpha
 * that gives the same scale under llama.cpp's alpha / r, alpha * sqrt(r);
 * per-module ranks or alphas (rank_pattern, alpha_pattern), DoRA, LoRA
 * biases, fan_in_fan_out and modules_to_save are refused by name.
 * layer_replication [[a, b), ...] (PEFT's repeated layers, each copy with its
 * own LoRA) is written as the plan adapter.reprise.layer_map "a..b-1,...",
 * and the adapter's blk.N then names plan step N. */
#include "convert/convert.h"
#include "base/util.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool empty_or_null(const json_t *v) {
    return !v || json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0) || json_is_false(v);
}

/* "a..b-1,..." from PEFT's layer_replication; *n receives the step count. */
static rp_status replication_map(rp_conv *cv, const char *file, const json_t *lr, rp_buf *map,
                                 int64_t *n) {
    *n = 0;
    if (!json_is_array(lr) || json_array_size(lr) == 0)
        return rp_fail(RP_ERR_FORMAT, "%s: layer_replication is not a list of [start, end] pairs",
                       file);
    size_t i;
    json_t *pair;
    json_array_foreach(lr, i, pair) {
        const json_t *a = json_array_get(pair, 0), *b = json_array_get(pair, 1);
        if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_number(a) ||
            !json_is_number(b))
            return rp_fail(RP_ERR_FORMAT, "%s: layer_replication[%zu] is not a [start, end] pair",
                           file, i);
        double s = json_number_value(a), e = json_number_value(b);
        if (s < 0 || e <= s || e > (double)cv->hp.n_layer || s != floor(s) || e != floor(e))
            return rp_fail(RP_ERR_FORMAT,
                           "%s: layer_replication[%zu] = [%g, %g] is not a range of the base's "
                           "%" PRId64 " layers",
                           file, i, s, e, cv->hp.n_layer);
        rp_buf_printf(map, "%s%d..%d", i ? "," : "", (int)s, (int)e - 1);
        *n += (int64_t)(e - s);
    }
    return RP_OK;
}

static rp_status lora_keys(rp_conv *cv, const char *file, const json_t *cfg) {
    static const char *const refused[] = {"rank_pattern", "alpha_pattern",  "use_dora",
                                          "lora_bias",    "fan_in_fan_out", "modules_to_save"};
    for (size_t k = 0; k < RP_ARRAY_LEN(refused); k++)
        if (!empty_or_null(json_object_get(cfg, refused[k])))
            return rp_fail(RP_ERR_UNSUPPORTED, "%s: '%s' is set; reprise converts plain LoRA", file,
                           refused[k]);
    const json_t *bias = json_object_get(cfg, "bias");
    if (bias && !json_is_null(bias) &&
        (!json_is_string(bias) || strcmp(json_string_value(bias), "none")))
        return rp_fail(RP_ERR_UNSUPPORTED, "%s: 'bias' is not \"none\"", file);
    const json_t *r = json_object_get(cfg, "r"), *alpha = json_object_get(cfg, "lora_alpha");
    if (!json_is_number(r) || json_number_value(r) < 1 || json_number_value(r) > 65536)
        return rp_fail(RP_ERR_FORMAT, "%s: 'r' (the rank) is missing or out of range", file);
    if (!json_is_number(alpha))
        return rp_fail(RP_ERR_FORMAT, "%s: 'lora_alpha' is missing or not a number", file);
    cv->lora_rank = (int64_t)json_number_value(r);
    double a = json_number_value(alpha);
    if (json_is_true(json_object_get(cfg, "use_rslora"))) a *= sqrt((double)cv->lora_rank);
    rp_status s = rp_gguf_w_set_str(cv->w, "adapter.type", "lora");
    if (!s) s = rp_gguf_w_set_f32(cv->w, "adapter.lora.alpha", (float)a);
    cv->lora_layers = cv->hp.n_layer;
    const json_t *lr = json_object_get(cfg, "layer_replication");
    if (!s && !empty_or_null(lr)) {
        rp_buf map = {0};
        s = replication_map(cv, file, lr, &map, &cv->lora_layers);
        if (!s) s = rp_gguf_w_set_str(cv->w, "adapter.reprise.layer_map", map.data);
        rp_buf_free(&map);
    }
    return s;
}

rp_status rp_conv_lora_keys(rp_conv *cv) {
    size_t n = strlen(cv->p.lora_dir) + 32;
    char *file = rp_malloc(n, "path");
    if (!file) return RP_ERR_NOMEM;
    snprintf(file, n, "%s/adapter_config.json", cv->p.lora_dir);
    json_error_t err;
    json_t *cfg = json_load_file(file, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &err);
    rp_status s;
    if (!cfg)
        s = rp_fail(RP_ERR_FORMAT, "%s: %s (line %d, column %d)", file, err.text, err.line,
                    err.column);
    else if (!json_is_object(cfg))
        s = rp_fail(RP_ERR_FORMAT, "%s: the top level is not an object", file);
    else
        s = lora_keys(cv, file, cfg);
    json_decref(cfg);
    free(file);
    return s;
}

static bool is_pair(const char *name) {
    size_t n = strlen(name);
    return n > 7 && (!strcmp(name + n - 7, ".lora_a") || !strcmp(name + n - 7, ".lora_b"));
}

void rp_conv_lora_keep_pairs(rp_conv *cv) {
    size_t k = 0;
    for (size_t i = 0; i < cv->n_out; i++) {
        if (is_pair(cv->outs[i].name))
            cv->outs[k++] = cv->outs[i];
        else
            free(cv->outs[i].name); /* generated base tensors (rope_freqs): not an adapter's */
    }
    cv->n_out = k;
}
