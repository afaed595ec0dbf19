/* LlamaForCausalLM -> GGUF "llama".
 *
 * Hugging Face stores Q and K for rotate-half RoPE (the two halves of each
 * head are the rotation pairs); llama.cpp's llama runs the original
 * interleaved RoPE (pairs are adjacent). The rows of q_proj/k_proj (and their
 * biases) are therefore permuted per head: output row h*hd + 2i + j is input
 * row h*hd + j*hd/2 + i, for i < hd/2 and j in {0, 1}, with n_head heads for
 * Q and n_head_kv for K. Llama 3.1's "llama3" rope scaling becomes the
 * rope_freqs.weight tensor of per-frequency divisors. */
#include "convert/convert.h"
#include "arch/llama.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows [row0, row0 + n_rows) of the permuted tensor. A "unit" is one row of
 * the checkpoint's outer dimension (a bias has 1-element units and is one
 * output row). */
static rp_status permute(const rp_conv_out *o, int64_t heads, int64_t row0, int64_t n_rows,
                         float *dst) {
    const rp_st_tensor *t = o->src[0];
    int64_t units = t->shape[0], unit = (int64_t)t->n_elem / units, hd = units / heads,
            half = hd / 2;
    int64_t e0 = row0 * o->ne[0], e1 = (row0 + n_rows) * o->ne[0];
    for (int64_t u = e0 / unit; u * unit < e1; u++) {
        int64_t h = u / hd, r = u % hd, from = h * hd + (r % 2) * half + r / 2;
        int64_t a = RP_MAX(e0, u * unit), b = RP_MIN(e1, (u + 1) * unit);
        rp_status s = rp_st_read_f32(t, (uint64_t)(from * unit + (a - u * unit)), (uint64_t)(b - a),
                                     dst + (a - e0));
        if (s) return s;
    }
    return RP_OK;
}

static rp_status make_q(rp_conv *cv, const rp_conv_out *o, int64_t row0, int64_t n, float *dst) {
    return permute(o, cv->hp.n_head, row0, n, dst);
}

static rp_status make_k(rp_conv *cv, const rp_conv_out *o, int64_t row0, int64_t n, float *dst) {
    return permute(o, cv->hp.n_head_kv, row0, n, dst);
}

#define REQ RP_RULE_REQUIRED
static const rp_conv_rule g_rules[] = {
    RP_IO_RULE("model.embed_tokens", TOKEN_EMBD, REQ),
    RP_IO_RULE("model.norm", OUTPUT_NORM, REQ),
    RP_IO_RULE("lm_head", OUTPUT, 0),
    RP_DENSE_RULE("model.layers.#.input_layernorm", ATTN_NORM, REQ, NULL, NULL),
    RP_DENSE_RULE("model.layers.#.self_attn.q_proj", ATTN_Q, REQ, make_q, "rope-permuted"),
    RP_DENSE_RULE("model.layers.#.self_attn.k_proj", ATTN_K, REQ, make_k, "rope-permuted"),
    RP_DENSE_RULE("model.layers.#.self_attn.v_proj", ATTN_V, REQ, NULL, NULL),
    RP_DENSE_RULE("model.layers.#.self_attn.o_proj", ATTN_OUT, REQ, NULL, NULL),
    RP_DENSE_RULE("model.layers.#.post_attention_layernorm", FFN_NORM, REQ, NULL, NULL),
    RP_DENSE_RULE("model.layers.#.mlp.gate_proj", FFN_GATE, REQ, NULL, NULL),
    RP_DENSE_RULE("model.layers.#.mlp.up_proj", FFN_UP, REQ, NULL, NULL),
    RP_DENSE_RULE("model.layers.#.mlp.down_proj", FFN_DOWN, REQ, NULL, NULL),
};
#undef REQ

static rp_status llama_params(rp_conv *cv) {
    rp_status s = rp_conv_decoder_params(cv, false);
    if (s) return s;
    if (cv->hp.head_dim % 2)
        return rp_fail(RP_ERR_FORMAT,
                       "%s/config.json: head dimension %lld is odd; RoPE needs pairs", cv->dir,
                       (long long)cv->hp.head_dim);
    if ((s = rp_conv_set_u32(cv, "vocab_size", (uint32_t)cv->hp.n_vocab))) return s;
    return rp_conv_set_u32(cv, "rope.dimension_count", (uint32_t)cv->hp.head_dim);
}

/* Llama 3.1 scaling as per-frequency divisors: 1 for short wavelengths,
 * factor for long ones, a smooth blend between (what transformers applies to
 * its inverse frequencies, expressed as llama.cpp's rope_freqs). */
static rp_status rope_freqs(rp_conv *cv) {
    rp_conv_rope r;
    rp_status s = rp_conv_rope_params(cv, NULL, &r);
    if (s || strcmp(r.type, "llama3") != 0) return s;
    double factor, lo, hi, orig;
    if ((s = rp_conv_rope_num(cv, &r, "factor", false, 8.0, &factor))) return s;
    if ((s = rp_conv_rope_num(cv, &r, "low_freq_factor", false, 1.0, &lo))) return s;
    if ((s = rp_conv_rope_num(cv, &r, "high_freq_factor", false, 4.0, &hi))) return s;
    /* transformers reads it from the rope parameters; older configs keep it at the top level */
    if ((s = rp_conv_rope_num(cv, &r, "original_max_position_embeddings", false, 0, &orig)))
        return s;
    if (orig == 0 &&
        (s = rp_conv_cfg_num(cv, "original_max_position_embeddings", false, 8192, &orig)))
        return s;
    if (factor <= 0 || lo <= 0 || hi <= lo || orig <= 0)
        return rp_fail(
            RP_ERR_FORMAT,
            "%s/config.json: llama3 rope scaling needs factor > 0 and high_freq_factor > "
            "low_freq_factor > 0 (got %g, %g, %g)",
            cv->dir, factor, lo, hi);
    double base = r.theta > 0 ? r.theta : 10000.0;
    int64_t dim = cv->hp.head_dim, n = dim / 2;
    float *f = rp_malloc((size_t)n * sizeof *f, "rope_freqs");
    if (!f) return RP_ERR_NOMEM;
    double lo_wavelen = orig / lo, hi_wavelen = orig / hi;
    for (int64_t i = 0; i < n; i++) {
        double freq = 1.0 / pow(base, (double)(2 * i) / (double)dim), wavelen = 2 * M_PI / freq;
        if (wavelen < hi_wavelen)
            f[i] = 1.0f;
        else if (wavelen > lo_wavelen)
            f[i] = (float)factor;
        else {
            double smooth = (orig / wavelen - lo) / (hi - lo);
            f[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
    int64_t ne[1] = {n};
    return rp_conv_add_values(cv, rp_llama_rows[RP_LLAMA_ROPE_FREQS].name, 1, ne, f) ? RP_OK
                                                                                     : RP_ERR_NOMEM;
}

static rp_status llama_tensors(rp_conv *cv) {
    rp_status s = rp_conv_output_head(cv);
    if (!s) s = rp_conv_map(cv, g_rules, RP_ARRAY_LEN(g_rules));
    if (!s) s = rope_freqs(cv);
    return s;
}

static rp_status llama_shapes(rp_conv *cv, rp_st *st) {
    rp_status s = rp_conv_rule_shapes(cv, st, g_rules, RP_ARRAY_LEN(g_rules));
    if (s || cv->hp.tied) return s;
    int64_t shape[2] = {cv->hp.n_vocab, cv->hp.n_embd};
    return rp_st_add_shape(st, "lm_head.weight", rp_st_tensor_at(st, 0)->type, 2, shape);
}

const rp_conv_hooks rp_conv_llama = {
    .params = llama_params,
    .tensors = llama_tensors,
    .shapes = llama_shapes,
};
