/* Gemma3ForCausalLM (text) -> GGUF "gemma3".
 *
 * Gemma's RMSNorm multiplies by (1 + w); llama.cpp multiplies by w, so every
 * *norm.weight (the four per layer, Q/K norms, the final norm) is written as
 * w + 1, added in F32 as transformers computes it (llama.cpp's converter adds
 * in the checkpoint's dtype, which rounds 1 + w to F16 for an F16 checkpoint;
 * the difference is below 2^-11). The token embedding is cut to the tokenizer's size (Gemma 3
 * configs count a few hundred rows no token uses). The output is always tied. Which layers use the
 * sliding window: llama.cpp's gemma3 assumes five local layers then one global; when config.json
 * says otherwise (layer_types or sliding_window_pattern), the per-layer pattern is written as
 * gemma3.attention.sliding_window_pattern (bool per layer, true = local). */
#include "convert/convert.h"
#include "arch/dense.h"
#include "base/util.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static rp_status make_plus_one(rp_conv *cv, const rp_conv_out *o, int64_t row0, int64_t n,
                               float *dst) {
    rp_status s = rp_conv_make_copy(cv, o, row0, n, dst);
    for (int64_t i = 0; !s && i < n * o->ne[0]; i++) dst[i] += 1.0f;
    return s;
}

#define REQ           RP_RULE_REQUIRED
#define NORM(hf, row) RP_DENSE_RULE(hf, row, REQ, make_plus_one, "+1")
#define MAT(hf, row)  RP_DENSE_RULE(hf, row, REQ, NULL, NULL)

static const rp_conv_rule g_rules[] = {
    RP_IO_RULE("model.embed_tokens", TOKEN_EMBD, REQ),
    {"model.norm", &rp_io_rows[RP_IO_OUTPUT_NORM], REQ, make_plus_one, "+1"},
    NORM("model.layers.#.input_layernorm", ATTN_NORM),
    MAT("model.layers.#.self_attn.q_proj", ATTN_Q),
    MAT("model.layers.#.self_attn.k_proj", ATTN_K),
    MAT("model.layers.#.self_attn.v_proj", ATTN_V),
    MAT("model.layers.#.self_attn.o_proj", ATTN_OUT),
    NORM("model.layers.#.self_attn.q_norm", ATTN_Q_NORM),
    NORM("model.layers.#.self_attn.k_norm", ATTN_K_NORM),
    NORM("model.layers.#.post_attention_layernorm", POST_ATTN_NORM),
    NORM("model.layers.#.pre_feedforward_layernorm", FFN_NORM),
    NORM("model.layers.#.post_feedforward_layernorm", POST_FFN_NORM),
    MAT("model.layers.#.mlp.gate_proj", FFN_GATE),
    MAT("model.layers.#.mlp.up_proj", FFN_UP),
    MAT("model.layers.#.mlp.down_proj", FFN_DOWN),
};
#undef REQ
#undef NORM
#undef MAT

/* Per-layer sliding flags from layer_types, or from the older
 * sliding_window_pattern (layer i is local unless (i + 1) % pattern == 0). */
static rp_status layer_pattern(rp_conv *cv, bool *swa) {
    int64_t n = cv->hp.n_layer;
    const json_t *lt = rp_conv_cfg(cv, "layer_types");
    if (lt) {
        if (!json_is_array(lt) || (int64_t)json_array_size(lt) != n)
            return rp_fail(RP_ERR_FORMAT,
                           "%s/config.json: layer_types must list the %" PRId64 " layers", cv->dir,
                           n);
        for (int64_t l = 0; l < n; l++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)l));
            if (!t || (strcmp(t, "sliding_attention") && strcmp(t, "full_attention")))
                return rp_fail(RP_ERR_FORMAT,
                               "%s/config.json: layer_types[%" PRId64
                               "] is not sliding_attention or "
                               "full_attention",
                               cv->dir, l);
            swa[l] = strcmp(t, "sliding_attention") == 0;
        }
        return RP_OK;
    }
    int64_t pat;
    rp_status s = rp_conv_cfg_int(cv, "sliding_window_pattern", false, 6, 1, 1 << 20, &pat);
    for (int64_t l = 0; !s && l < n; l++) swa[l] = (l + 1) % pat != 0;
    return s;
}

static rp_status gemma3_params(rp_conv *cv) {
    rp_status s = rp_conv_decoder_params(cv, true);
    if (s) return s;
    rp_conv_hparams *hp = &cv->hp;
    int64_t x;
    double eps, theta_default = 1e6;
    /* defaults of Gemma3TextConfig where config.json leaves a key out */
    if ((s = rp_conv_cfg_int(cv, "max_position_embeddings", false, 131072, 1, UINT32_MAX, &x)))
        return s;
    if ((s = rp_conv_set_u32(cv, "context_length", (uint32_t)x))) return s;
    if ((s = rp_conv_cfg_num(cv, "rms_norm_eps", false, 1e-6, &eps))) return s;
    if ((s = rp_conv_set_f32(cv, "attention.layer_norm_rms_epsilon", (float)eps))) return s;
    if (!rp_conv_cfg(cv, "head_dim")) hp->head_dim = 256;
    if ((s = rp_conv_set_u32(cv, "attention.key_length", (uint32_t)hp->head_dim))) return s;
    if ((s = rp_conv_set_u32(cv, "attention.value_length", (uint32_t)hp->head_dim))) return s;
    if (!rp_conv_cfg(cv, "num_key_value_heads")) hp->n_head_kv = 4;
    if (hp->n_head % hp->n_head_kv)
        return rp_fail(RP_ERR_FORMAT,
                       "%s/config.json: %" PRId64 " heads are not a multiple of %" PRId64
                       " KV heads",
                       cv->dir, hp->n_head, hp->n_head_kv);
    if ((s = rp_conv_set_u32(cv, "attention.head_count_kv", (uint32_t)hp->n_head_kv))) return s;
    rp_conv_rope global, local;
    if ((s = rp_conv_rope_params(cv, NULL, &global))) return s;
    if ((s = rp_conv_rope_params(cv, "sliding_attention", &local))) return s;
    if ((s = rp_conv_set_f32(cv, "rope.freq_base",
                             (float)(global.theta > 0 ? global.theta : theta_default))))
        return s;
    if (strcmp(local.type, "default") != 0)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s/config.json: rope scaling '%s' on sliding-window layers", cv->dir,
                       local.type);
    if (rp_conv_cfg(cv, "attn_logit_softcapping"))
        return rp_fail(RP_ERR_UNSUPPORTED, "%s/config.json: Gemma 3 has no attn_logit_softcapping",
                       cv->dir);
    double cap;
    if ((s = rp_conv_cfg_num(cv, "final_logit_softcapping", false, 0, &cap))) return s;
    if (cap != 0 && (s = rp_conv_set_f32(cv, "final_logit_softcapping", (float)cap))) return s;
    const char *act;
    if ((s = rp_conv_cfg_str(cv, "hidden_activation", "gelu_pytorch_tanh", &act))) return s;
    if (strcmp(act, "gelu_pytorch_tanh") != 0)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s/config.json: hidden_activation '%s' (llama.cpp's gemma3 runs "
                       "gelu_pytorch_tanh)",
                       cv->dir, act);
    /* Queries are scaled by 1/sqrt(query_pre_attn_scalar). llama.cpp's gemma3
     * loader has no key for it: it takes 1/sqrt(n_embd / n_head) for 62 layers
     * (the 27B) and 1/sqrt(head_dim) otherwise. When the checkpoint states
     * another value, its scale is written under llama.cpp's generic key
     * <arch>.attention.scale (LLM_KV_ATTENTION_SCALE, read by reprise's gemma3
     * loader; llama.cpp's gemma3 loader ignores it, so such a file runs with
     * the wrong scale there). Nothing is written when the rule gives it. */
    int64_t qpas;
    if ((s = rp_conv_cfg_int(cv, "query_pre_attn_scalar", false, hp->head_dim, 1, 1 << 20, &qpas)))
        return s;
    const int64_t rule = hp->n_layer == 62 ? hp->n_embd / hp->n_head : hp->head_dim;
    if (qpas != rule && (s = rp_conv_set_f32(cv, "attention.scale", 1.0f / sqrtf((float)qpas))))
        return s;

    bool *swa = rp_calloc((size_t)hp->n_layer, sizeof *swa, "layer pattern");
    if (!swa) return RP_ERR_NOMEM;
    bool any = false, standard = true;
    if (!(s = layer_pattern(cv, swa)))
        for (int64_t l = 0; l < hp->n_layer; l++) {
            any |= swa[l];
            standard &= swa[l] == ((l + 1) % 6 != 0);
        }
    if (!s && any) {
        int64_t window;
        if (!(s = rp_conv_cfg_int(cv, "sliding_window", true, 0, 1, UINT32_MAX, &window)))
            s = rp_conv_set_u32(cv, "attention.sliding_window", (uint32_t)window);
    }
    if (!s && any && !standard) {
        uint8_t *b = rp_malloc((size_t)hp->n_layer, "layer pattern");
        if (!b)
            s = RP_ERR_NOMEM;
        else {
            for (int64_t l = 0; l < hp->n_layer; l++) b[l] = swa[l];
            s = rp_conv_set_arr(cv, "attention.sliding_window_pattern", RP_GGUF_BOOL, b,
                                (uint64_t)hp->n_layer);
            free(b);
        }
    }
    free(swa);
    return s;
}

/* no space prefix, and no padding: the embedding is cut to the tokenizer */
static rp_status gemma3_vocab(rp_conv *cv) {
    return rp_conv_vocab(cv, false, 0);
}

static rp_status gemma3_tensors(rp_conv *cv) {
    const rp_st_tensor *head = rp_st_find(cv->st, "lm_head.weight");
    rp_status s = head ? rp_conv_drop(cv, head) : RP_OK; /* always tied */
    if (!s) s = rp_conv_map(cv, g_rules, RP_ARRAY_LEN(g_rules));
    if (s) return s;
    rp_conv_out *e = rp_conv_find_out(cv, rp_io_rows[RP_IO_TOKEN_EMBD].name);
    if (cv->n_tokens > 0 && cv->n_tokens < e->ne[1]) {
        e->ne[1] = cv->n_tokens;
        e->note = "rows cut to the vocabulary";
    }
    return RP_OK;
}

static rp_status gemma3_shapes(rp_conv *cv, rp_st *st) {
    return rp_conv_rule_shapes(cv, st, g_rules, RP_ARRAY_LEN(g_rules));
}

const rp_conv_hooks rp_conv_gemma3 = {
    .params = gemma3_params,
    .vocab = gemma3_vocab,
    .tensors = gemma3_tensors,
    .shapes = gemma3_shapes,
};
