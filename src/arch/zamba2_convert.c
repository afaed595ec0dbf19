/* Zamba2ForCausalLM -> GGUF "zamba2" (the layout is documented at the top of
 * src/arch/zamba2.c).
 *
 * The checkpoint stores every hybrid layer's copy of its shared block
 * (model.layers.L.shared_transformer.*); transformers ties each copy to the
 * block's first hybrid layer, whose values win. The converter writes the
 * shared tensors once, at that first layer, and drops the other copies.
 * Visit v's adapters live in its block's lists (gate_up_proj_adapter_list.v,
 * linear_{q,k,v}_adapter_list.v, at the block's first hybrid layer); they are
 * written as the visit's own pair blk.<layer>.*_adapter_a / _b.
 *
 * With the architecture option "merged" (reprise convert --arch-opt merged,
 * or --zamba2-merged) the older merged form is written instead: each
 * hybrid layer gets its own full ffn_up = W_gu + B.A (and, with attention
 * adapters, its own attn_q/k/v = W + B.A), computed in double and rounded
 * once; no adapter tensors and no rank keys. */
#include "convert/convert.h"
#include "arch/zamba2.h"
#include "base/util.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct z2_conv { /* cv->arch_data: one allocation, freed by the mechanism */
    int64_t d_conv, d_inner, d_state, n_ssm_head, n_group, rank, n_block;
    bool attn_adapters, use_rope;
    int64_t *first; /* [n_block] first hybrid layer of each block */
    int32_t *block; /* [n_layer] -1 or the shared block */
    int32_t *visit; /* [n_layer] index among the hybrid layers, -1 */
} z2_conv;

/* ---- hyperparameters --------------------------------------------------------- */

/* layers_block_type (hybrid / mamba, or the newer linear_attention), or the
 * hybrid_layer_ids list when only that is given. */
static rp_status layer_types(rp_conv *cv, z2_conv *z) {
    const int64_t n = cv->hp.n_layer;
    const json_t *lt = rp_conv_cfg(cv, "layers_block_type");
    if (!lt) lt = rp_conv_cfg(cv, "layer_types");
    for (int64_t l = 0; l < n; l++) z->block[l] = -1;
    if (lt) {
        if (!json_is_array(lt) || (int64_t)json_array_size(lt) != n)
            return rp_fail(RP_ERR_FORMAT,
                           "%s/config.json: layers_block_type must list the %" PRId64 " layers",
                           cv->dir, n);
        for (int64_t l = 0; l < n; l++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)l));
            if (t && !strcmp(t, "hybrid"))
                z->block[l] = 0;
            else if (!t || (strcmp(t, "mamba") && strcmp(t, "linear_attention")))
                return rp_fail(RP_ERR_FORMAT,
                               "%s/config.json: layers_block_type[%" PRId64
                               "] is not hybrid, mamba or "
                               "linear_attention",
                               cv->dir, l);
        }
        return RP_OK;
    }
    const json_t *ids = rp_conv_cfg(cv, "hybrid_layer_ids");
    if (!json_is_array(ids))
        return rp_fail(
            RP_ERR_FORMAT,
            "%s/config.json: neither layers_block_type nor hybrid_layer_ids says which layers "
            "are hybrid",
            cv->dir);
    for (size_t i = 0; i < json_array_size(ids); i++) {
        const json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n)
            return rp_fail(RP_ERR_FORMAT,
                           "%s/config.json: hybrid_layer_ids[%zu] is not a layer index", cv->dir,
                           i);
        z->block[json_integer_value(v)] = 0;
    }
    return RP_OK;
}

static rp_status z2_params(rp_conv *cv) {
    rp_status s = rp_conv_decoder_params(cv, true);
    if (s) return s;
    rp_conv_hparams *hp = &cv->hp;
    const size_t nl = (size_t)hp->n_layer; /* n_block <= n_layer */
    z2_conv *z =
        rp_calloc(1, sizeof *z + nl * (sizeof *z->first + sizeof *z->block + sizeof *z->visit),
                  "zamba2 converter");
    if (!z) return RP_ERR_NOMEM;
    cv->arch_data = z;
    z->first = (int64_t *)(z + 1);
    z->block = (int32_t *)(z->first + nl);
    z->visit = z->block + nl;
    /* the shared block attends over concat(h, e): width 2H */
    if ((2 * hp->n_embd) % hp->n_head)
        return rp_fail(RP_ERR_FORMAT,
                       "%s/config.json: 2 x hidden_size %" PRId64 " is not a multiple of %" PRId64
                       " attention heads",
                       cv->dir, hp->n_embd, hp->n_head);
    hp->head_dim = 2 * hp->n_embd / hp->n_head;
    int64_t hd;
    if ((s = rp_conv_cfg_int(cv, "attention_head_dim", false, hp->head_dim, 1, 1 << 14, &hd)))
        return s;
    if (hd != hp->head_dim)
        return rp_fail(RP_ERR_FORMAT,
                       "%s/config.json: attention_head_dim %" PRId64
                       " is not 2 x hidden_size / heads = "
                       "%" PRId64,
                       cv->dir, hd, hp->head_dim);
    if ((s = rp_conv_set_u32(cv, "attention.key_length", (uint32_t)hp->head_dim))) return s;
    if ((s = rp_conv_set_u32(cv, "attention.value_length", (uint32_t)hp->head_dim))) return s;
    if ((s = rp_conv_set_u32(cv, "attention.head_count_kv", (uint32_t)hp->n_head_kv))) return s;
    if ((s = rp_conv_cfg_bool(cv, "use_mem_rope", false, &z->use_rope))) return s;
    if ((s = rp_conv_set_u32(cv, "rope.dimension_count", z->use_rope ? (uint32_t)hp->head_dim : 0)))
        return s;
    const char *act;
    if ((s = rp_conv_cfg_str(cv, "hidden_act", "gelu", &act))) return s;
    if (strcmp(act, "gelu") != 0)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s/config.json: hidden_act '%s' (reprise's zamba2 runs erf GELU, 'gelu')",
                       cv->dir, act);

    int64_t expand;
    double tmin;
    if ((s = rp_conv_cfg_int(cv, "mamba_d_conv", false, 4, 1, 256, &z->d_conv))) return s;
    if ((s = rp_conv_cfg_int(cv, "mamba_d_state", false, 64, 1, 1 << 12, &z->d_state))) return s;
    if ((s = rp_conv_cfg_int(cv, "mamba_expand", false, 2, 1, 64, &expand))) return s;
    if ((s = rp_conv_cfg_int(cv, "n_mamba_heads", false, 8, 1, 1 << 16, &z->n_ssm_head))) return s;
    if ((s = rp_conv_cfg_int(cv, "mamba_ngroups", false, 1, 1, z->n_ssm_head, &z->n_group)))
        return s;
    if ((s = rp_conv_cfg_num(cv, "time_step_min", false, 0.001, &tmin))) return s;
    z->d_inner = expand * hp->n_embd;
    if (z->d_inner % z->n_ssm_head || z->n_ssm_head % z->n_group || tmin < 0 || tmin > 1)
        return rp_fail(RP_ERR_FORMAT,
                       "%s/config.json: mamba_expand x hidden_size %" PRId64
                       ", n_mamba_heads %" PRId64 ", mamba_ngroups %" PRId64
                       " and time_step_min %g are inconsistent",
                       cv->dir, z->d_inner, z->n_ssm_head, z->n_group, tmin);
    if ((s = rp_conv_set_u32(cv, "ssm.conv_kernel", (uint32_t)z->d_conv))) return s;
    if ((s = rp_conv_set_u32(cv, "ssm.inner_size", (uint32_t)z->d_inner))) return s;
    if ((s = rp_conv_set_u32(cv, "ssm.state_size", (uint32_t)z->d_state))) return s;
    if ((s = rp_conv_set_u32(cv, "ssm.time_step_rank", (uint32_t)z->n_ssm_head))) return s;
    if ((s = rp_conv_set_u32(cv, "ssm.group_count", (uint32_t)z->n_group))) return s;
    if ((s = rp_conv_set_f32(cv, "ssm.time_step_min", (float)tmin))) return s;

    if ((s = rp_conv_cfg_int(cv, "num_mem_blocks", false, 1, 1, hp->n_layer, &z->n_block)))
        return s;
    if ((s = rp_conv_cfg_int(cv, "adapter_rank", false, 128, 1, 1 << 16, &z->rank))) return s;
    if ((s = rp_conv_cfg_bool(cv, "use_shared_attention_adapter", false, &z->attn_adapters)))
        return s;
    if ((s = layer_types(cv, z))) return s;
    int32_t v = 0;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        z->visit[l] = -1;
        if (z->block[l] < 0) continue;
        z->visit[l] = v;
        z->block[l] = (int32_t)(v % z->n_block); /* transformers' tie cycle: hybrid order */
        if (v < z->n_block) z->first[v] = l;
        v++;
    }
    if (v < z->n_block)
        return rp_fail(RP_ERR_FORMAT,
                       "%s/config.json: %" PRId64 " shared blocks but only %d hybrid layers",
                       cv->dir, z->n_block, v);
    if ((s = rp_conv_set_arr(cv, "shared_block", RP_GGUF_INT32, z->block, (uint64_t)hp->n_layer)))
        return s;
    if (!rp_conv_opt_flag(cv, "merged")) {
        if ((s = rp_conv_set_u32(cv, "ffn_gate_up_adapter_rank", (uint32_t)z->rank))) return s;
        if (z->attn_adapters && (s = rp_conv_set_u32(cv, "attn_adapter_rank", (uint32_t)z->rank)))
            return s;
    }
    return RP_OK;
}

/* ---- tensors ------------------------------------------------------------------ */

/* A checkpoint tensor by printf name; NULL when absent (an error if required). */
static const rp_st_tensor *src_of(rp_conv *cv, bool required, rp_status *s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static const rp_st_tensor *src_of(rp_conv *cv, bool required, rp_status *s, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const rp_st_tensor *t = rp_st_find(cv->st, name);
    if (!t && required)
        *s = rp_fail(
            RP_ERR_FORMAT,
            "%s: the checkpoint has no tensor '%s' (a Zamba2ForCausalLM with this config.json "
            "needs it)",
            cv->dir, name);
    return t;
}

/* Checks t's checkpoint shape (outermost first; n_dims entries of want, -1 =
 * any) and plans it as output `name`. */
static rp_conv_out *add_shaped(rp_conv *cv, rp_status *s, const char *name, const rp_st_tensor *t,
                               uint32_t nd, int64_t w0, int64_t w1, int64_t w2) {
    const int64_t want[3] = {w0, w1, w2};
    bool ok = t->n_dims == nd;
    for (uint32_t d = 0; ok && d < nd; d++) ok = want[d] < 0 || t->shape[d] == want[d];
    if (!ok) {
        char got[96] = "[", exp[96] = "[";
        for (uint32_t d = 0; d < t->n_dims; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%" PRId64, d ? ", " : "",
                     t->shape[d]);
        for (uint32_t d = 0; d < nd; d++)
            snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%" PRId64, d ? ", " : "",
                     want[d]);
        *s = rp_fail(RP_ERR_FORMAT, "checkpoint tensor '%s' has shape %s], config.json implies %s]",
                     t->name, got, exp);
        return NULL;
    }
    rp_conv_out *o = rp_conv_add(cv, name, t);
    if (!o) *s = RP_ERR_FORMAT;
    return o;
}

static rp_status make_neg_exp(rp_conv *cv, const rp_conv_out *o, int64_t row0, int64_t n,
                              float *dst) {
    rp_status s = rp_conv_make_copy(cv, o, row0, n, dst);
    for (int64_t i = 0; !s && i < n * o->ne[0]; i++) dst[i] = -expf(dst[i]);
    return s;
}

/* W + B.A, rows [row0, row0 + n): src[0] = W [out, in], src[1] = A [r, in],
 * src[2] = B [out, r]; the product in double, rounded once. */
static rp_status make_merged(rp_conv *cv, const rp_conv_out *o, int64_t row0, int64_t n,
                             float *dst) {
    const int64_t in = o->ne[0], r = o->src[1]->shape[0];
    float *a = rp_malloc((size_t)(r * in + n * r) * sizeof *a, "adapter");
    double *acc = rp_malloc((size_t)in * sizeof *acc, "adapter");
    rp_status s = a && acc ? RP_OK : RP_ERR_NOMEM;
    float *b = a ? a + r * in : NULL;
    if (!s) s = rp_conv_make_copy(cv, o, row0, n, dst);
    if (!s) s = rp_conv_src_rows(o->src[1], 0, r, a);
    if (!s) s = rp_conv_src_rows(o->src[2], row0, n, b);
    for (int64_t i = 0; !s && i < n; i++) {
        float *row = dst + i * in;
        for (int64_t j = 0; j < in; j++) acc[j] = row[j];
        for (int64_t k = 0; k < r; k++) {
            const double bk = b[i * r + k];
            const float *ak = a + k * in;
            for (int64_t j = 0; j < in; j++) acc[j] += bk * ak[j];
        }
        for (int64_t j = 0; j < in; j++) row[j] = (float)acc[j];
    }
    free(a);
    free(acc);
    return s;
}

/* Output `name` = W + B.A (merged form): W [out, in], A [r, in], B [out, r]. */
static rp_status add_merged(rp_conv *cv, const z2_conv *z, const char *name, const rp_st_tensor *w,
                            const rp_st_tensor *a, const rp_st_tensor *b, int64_t out, int64_t in) {
    rp_status s = RP_OK;
    const int64_t r = z->rank;
    if (a->n_dims != 2 || a->shape[0] != r || a->shape[1] != in || b->n_dims != 2 ||
        b->shape[0] != out || b->shape[1] != r)
        return rp_fail(
            RP_ERR_FORMAT,
            "adapter pair '%s' / '%s' does not have the shapes config.json implies ([%" PRId64
            ", %" PRId64 "] and [%" PRId64 ", %" PRId64 "])",
            a->name, b->name, r, in, out, r);
    rp_conv_out *o = add_shaped(cv, &s, name, w, 2, out, in, 0);
    if (!o) return s;
    o->src[1] = a;
    o->src[2] = b;
    o->n_src = 3;
    o->make = make_merged;
    o->note = "W + B.A (adapter merged)";
    rp_conv_drop(cv, a);
    rp_conv_drop(cv, b);
    return RP_OK;
}

/* GGUF name of zamba2 row `row` at layer l. */
static const char *row_name(int row, int64_t l, char *buf, size_t n) {
    return rp_tensor_name(&rp_zamba2_rows[row], (int)l, buf, n);
}

/* The adapter pair of visit v as rows a_row / a_row + 1 of layer l ([in, r]
 * and [r, out]). */
static rp_status add_pair(rp_conv *cv, const z2_conv *z, const rp_st_tensor *a,
                          const rp_st_tensor *b, int64_t l, int a_row, int64_t in, int64_t out) {
    rp_status s = RP_OK;
    char name[160];
    rp_conv_out *oa =
        add_shaped(cv, &s, row_name(a_row, l, name, sizeof name), a, 2, z->rank, in, 0);
    if (!oa) return s;
    rp_conv_out *ob =
        add_shaped(cv, &s, row_name(a_row + 1, l, name, sizeof name), b, 2, out, z->rank, 0);
    if (!ob) return s;
    /* rank-r rows leave Q8_0's fast kernels; keep the pair 16-bit as the quantizer does */
    if (cv->outtype == RP_TYPE_Q8_0) oa->force_type = ob->force_type = RP_TYPE_F16;
    oa->note = ob->note = "adapter pair";
    return RP_OK;
}

static rp_status mamba_tensors(rp_conv *cv, const z2_conv *z, int64_t l) {
    const int64_t E = cv->hp.n_embd, nh = z->n_ssm_head;
    const int64_t conv_dim = z->d_inner + 2 * z->n_group * z->d_state,
                  proj = z->d_inner + conv_dim + nh;
    char p[96], g[160];
    snprintf(p, sizeof p,
             z->block[l] >= 0 ? "model.layers.%" PRId64 ".mamba_decoder."
                              : "model.layers.%" PRId64 ".",
             l);
    rp_status s = RP_OK;
    const rp_st_tensor *t;
    rp_conv_out *o = NULL;
#define OUT(row, req, hf, nd, a, b, c)                                                             \
    if ((t = src_of(cv, req, &s, "%s" hf, p))) {                                                   \
        if (!(o = add_shaped(cv, &s, row_name(row, l, g, sizeof g), t, nd, a, b, c))) return s;    \
    } else if (s)                                                                                  \
    return s
    OUT(RP_Z2_NORM, true, "input_layernorm.weight", 1, E, 0, 0);
    OUT(RP_Z2_SSM_IN, true, "mamba.in_proj.weight", 2, proj, E, 0);
    OUT(RP_Z2_SSM_IN_B, false, "mamba.in_proj.bias", 1, proj, 0, 0);
    OUT(RP_Z2_CONV, true, "mamba.conv1d.weight", 3, conv_dim, 1, z->d_conv);
    o->n_dims = 2; /* [conv_dim, 1, k] -> [k, conv_dim] */
    o->ne[1] = conv_dim;
    o->ne[2] = 1;
    OUT(RP_Z2_CONV_B, false, "mamba.conv1d.bias", 1, conv_dim, 0, 0);
    OUT(RP_Z2_DT_B, true, "mamba.dt_bias", 1, nh, 0, 0);
    OUT(RP_Z2_A, true, "mamba.A_log", 1, nh, 0, 0);
    o->make = make_neg_exp;
    o->note = "-exp(A_log)";
    OUT(RP_Z2_D, true, "mamba.D", 1, nh, 0, 0);
    OUT(RP_Z2_SSM_NORM, true, "mamba.norm.weight", 1, z->d_inner, 0, 0);
    OUT(RP_Z2_SSM_OUT, true, "mamba.out_proj.weight", 2, E, z->d_inner, 0);
    OUT(RP_Z2_SSM_OUT_B, false, "mamba.out_proj.bias", 1, E, 0, 0);
#undef OUT
    return RP_OK;
}

/* Hybrid layer l, visit v of block b. The block's first layer f holds the
 * shared tensors and every visit's adapters. */
static rp_status hybrid_tensors(rp_conv *cv, const z2_conv *z, int64_t l) {
    const rp_conv_hparams *hp = &cv->hp;
    const int64_t E = hp->n_embd, E2 = 2 * E, ff2 = 2 * hp->n_ff;
    const int64_t nq = hp->n_head * hp->head_dim, nkv = hp->n_head_kv * hp->head_dim;
    const int32_t v = z->visit[l], b = z->block[l];
    const int64_t f = z->first[b];
    const bool merged = rp_conv_opt_flag(cv, "merged"), is_first = f == l;
    char st[96], g[160];
    snprintf(st, sizeof st, "model.layers.%" PRId64 ".shared_transformer.", f);
    rp_status s = RP_OK;
    const rp_st_tensor *t;
    if ((t = src_of(cv, true, &s, "model.layers.%" PRId64 ".linear.weight", l))) {
        if (!add_shaped(cv, &s, row_name(RP_Z2_PROJ, l, g, sizeof g), t, 2, E, E, 0)) return s;
    } else {
        return s;
    }
    /* attention: shared q/k/v (or, merged with attention adapters, per visit) */
    static const char *const qkv[3] = {"q", "k", "v"};
    const int64_t width[3] = {nq, nkv, nkv};
    for (int i = 0; i < 3; i++) {
        const rp_st_tensor *w = src_of(cv, true, &s, "%sself_attn.%s_proj.weight", st, qkv[i]);
        if (!w) return s;
        const rp_st_tensor *a = NULL, *bb = NULL;
        if (z->attn_adapters) {
            a = src_of(cv, true, &s, "%sself_attn.linear_%s_adapter_list.%d.0.weight", st, qkv[i],
                       v);
            bb = a ? src_of(cv, true, &s, "%sself_attn.linear_%s_adapter_list.%d.1.weight", st,
                            qkv[i], v)
                   : NULL;
            if (!bb) return s;
            if (!merged && (s = add_pair(cv, z, a, bb, l, RP_Z2_ATTN_Q_A + 2 * i, E2, width[i])))
                return s;
        }
        row_name(RP_Z2_ATTN_Q + i, l, g, sizeof g);
        if (merged && z->attn_adapters) {
            if ((s = add_merged(cv, z, g, w, a, bb, width[i], E2))) return s;
        } else if (is_first) {
            if (!add_shaped(cv, &s, g, w, 2, width[i], E2, 0)) return s;
        }
    }
    /* MLP: W_gu shared, its adapter per visit; merged: W + B.A per visit */
    const rp_st_tensor *w = src_of(cv, true, &s, "%sfeed_forward.gate_up_proj.weight", st);
    const rp_st_tensor *a =
        w ? src_of(cv, true, &s, "%sfeed_forward.gate_up_proj_adapter_list.%d.0.weight", st, v)
          : NULL;
    const rp_st_tensor *bb =
        a ? src_of(cv, true, &s, "%sfeed_forward.gate_up_proj_adapter_list.%d.1.weight", st, v)
          : NULL;
    if (!bb) return s;
    row_name(RP_Z2_FFN_UP, l, g, sizeof g);
    if (merged) {
        if ((s = add_merged(cv, z, g, w, a, bb, ff2, E))) return s;
    } else {
        if ((s = add_pair(cv, z, a, bb, l, RP_Z2_GU_A, E, ff2))) return s;
        if (is_first && !add_shaped(cv, &s, g, w, 2, ff2, E, 0)) return s;
    }
    if (!is_first) return RP_OK;
    /* the rest of the shared block, once */
    static const struct {
        const char *hf;
        int row;
        bool req;
        int nd;
        int d0, d1; /* 0 H, 1 2H, 2 q width, 3 n_ff, 4 2 n_ff */
    } rest[] = {
        {"input_layernorm.weight", RP_Z2_SHARED_NORM, true, 1, 1, 0},
        {"self_attn.o_proj.weight", RP_Z2_ATTN_OUT, true, 2, 0, 2},
        {"pre_ff_layernorm.weight", RP_Z2_FFN_NORM, true, 1, 0, 0},
        {"feed_forward.gate_up_proj.bias", RP_Z2_FFN_UP_B, false, 1, 4, 0},
        {"feed_forward.down_proj.weight", RP_Z2_FFN_DOWN, true, 2, 0, 3},
        {"feed_forward.down_proj.bias", RP_Z2_FFN_DOWN_B, false, 1, 0, 0},
    };
    const int64_t dims[5] = {E, E2, nq, hp->n_ff, ff2};
    for (size_t i = 0; i < RP_ARRAY_LEN(rest); i++) {
        if (!(t = src_of(cv, rest[i].req, &s, "%s%s", st, rest[i].hf))) {
            if (s) return s;
            continue;
        }
        row_name(rest[i].row, l, g, sizeof g);
        if (!add_shaped(cv, &s, g, t, (uint32_t)rest[i].nd, dims[rest[i].d0], dims[rest[i].d1], 0))
            return s;
    }
    return RP_OK;
}

static rp_status z2_tensors(rp_conv *cv) {
    z2_conv *z = cv->arch_data;
    const rp_conv_hparams *hp = &cv->hp;
    rp_status s = rp_conv_output_head(cv);
    const rp_st_tensor *t;
    if (s) return s;
    if (!(t = src_of(cv, true, &s, "model.embed_tokens.weight"))) return s;
    const rp_tensor_def *io = rp_io_rows;
    if (!add_shaped(cv, &s, io[RP_IO_TOKEN_EMBD].name, t, 2, hp->n_vocab, hp->n_embd, 0)) return s;
    if (!(t = src_of(cv, true, &s, "model.final_layernorm.weight"))) return s;
    if (!add_shaped(cv, &s, io[RP_IO_OUTPUT_NORM].name, t, 1, hp->n_embd, 0, 0)) return s;
    if (!hp->tied && (t = src_of(cv, true, &s, "lm_head.weight")))
        if (!add_shaped(cv, &s, io[RP_IO_OUTPUT].name, t, 2, hp->n_vocab, hp->n_embd, 0)) return s;
    if (s) return s;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        if ((s = mamba_tensors(cv, z, l))) return s;
        if (z->block[l] >= 0 && (s = hybrid_tensors(cv, z, l))) return s;
    }
    /* every other hybrid layer's copy of its shared block: tied to the
     * first copy by transformers, so dropped (its values never run there) */
    char p[96];
    for (int64_t l = 0; l < hp->n_layer; l++) {
        if (z->block[l] < 0 || z->first[z->block[l]] == l) continue;
        int n = snprintf(p, sizeof p, "model.layers.%" PRId64 ".shared_transformer.", l);
        for (uint64_t i = 0; i < rp_st_n_tensors(cv->st); i++) {
            const rp_st_tensor *c = rp_st_tensor_at(cv->st, i);
            if (!strncmp(c->name, p, (size_t)n) && !rp_conv_is_used(cv, c)) rp_conv_drop(cv, c);
        }
    }
    return RP_OK;
}

/* ---- shapes from config.json (--dry-run) ------------------------------------- */

static rp_status z2_shapes(rp_conv *cv, rp_st *st) {
    const z2_conv *z = cv->arch_data;
    const rp_conv_hparams *hp = &cv->hp;
    const int64_t E = hp->n_embd, E2 = 2 * E, ff2 = 2 * hp->n_ff, r = z->rank, nh = z->n_ssm_head;
    const int64_t nq = hp->n_head * hp->head_dim, nkv = hp->n_head_kv * hp->head_dim;
    const int64_t conv_dim = z->d_inner + 2 * z->n_group * z->d_state,
                  proj = z->d_inner + conv_dim + nh;
    const char *dt = NULL;
    if (rp_conv_cfg_str(cv, "dtype", NULL, &dt) ||
        (!dt && rp_conv_cfg_str(cv, "torch_dtype", NULL, &dt)))
        dt = NULL;
    const int type = dt && !strcmp(dt, "float32")   ? RP_TYPE_F32
                     : dt && !strcmp(dt, "float16") ? RP_TYPE_F16
                                                    : RP_TYPE_BF16;
    rp_status s = RP_OK;
    char name[192];
#define SHAPE(nd, a, b, c, ...)                                                                    \
    do {                                                                                           \
        const int64_t sh_[3] = {a, b, c};                                                          \
        snprintf(name, sizeof name, __VA_ARGS__);                                                  \
        if (!s) s = rp_st_add_shape(st, name, type, nd, sh_);                                      \
    } while (0)
    SHAPE(2, hp->n_vocab, E, 0, "model.embed_tokens.weight");
    SHAPE(1, E, 0, 0, "model.final_layernorm.weight");
    if (!hp->tied) SHAPE(2, hp->n_vocab, E, 0, "lm_head.weight");
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const char *m = z->block[l] >= 0 ? "mamba_decoder." : "";
        SHAPE(1, E, 0, 0, "model.layers.%" PRId64 ".%sinput_layernorm.weight", l, m);
        SHAPE(2, proj, E, 0, "model.layers.%" PRId64 ".%smamba.in_proj.weight", l, m);
        SHAPE(3, conv_dim, 1, z->d_conv, "model.layers.%" PRId64 ".%smamba.conv1d.weight", l, m);
        SHAPE(1, conv_dim, 0, 0, "model.layers.%" PRId64 ".%smamba.conv1d.bias", l, m);
        SHAPE(1, nh, 0, 0, "model.layers.%" PRId64 ".%smamba.dt_bias", l, m);
        SHAPE(1, nh, 0, 0, "model.layers.%" PRId64 ".%smamba.A_log", l, m);
        SHAPE(1, nh, 0, 0, "model.layers.%" PRId64 ".%smamba.D", l, m);
        SHAPE(1, z->d_inner, 0, 0, "model.layers.%" PRId64 ".%smamba.norm.weight", l, m);
        SHAPE(2, E, z->d_inner, 0, "model.layers.%" PRId64 ".%smamba.out_proj.weight", l, m);
        if (z->block[l] < 0) continue;
        SHAPE(2, E, E, 0, "model.layers.%" PRId64 ".linear.weight", l);
        const int64_t f = z->first[z->block[l]];
        const int32_t v = z->visit[l];
        const char *sp = "model.layers.%" PRId64 ".shared_transformer.";
        char pre[96];
        snprintf(pre, sizeof pre, sp, f);
        SHAPE(2, r, E, 0, "%sfeed_forward.gate_up_proj_adapter_list.%d.0.weight", pre, v);
        SHAPE(2, ff2, r, 0, "%sfeed_forward.gate_up_proj_adapter_list.%d.1.weight", pre, v);
        for (int i = 0; z->attn_adapters && i < 3; i++) {
            SHAPE(2, r, E2, 0, "%sself_attn.linear_%c_adapter_list.%d.0.weight", pre, "qkv"[i], v);
            SHAPE(2, i ? nkv : nq, r, 0, "%sself_attn.linear_%c_adapter_list.%d.1.weight", pre,
                  "qkv"[i], v);
        }
        if (f != l) continue;
        SHAPE(1, E2, 0, 0, "%sinput_layernorm.weight", pre);
        SHAPE(2, nq, E2, 0, "%sself_attn.q_proj.weight", pre);
        SHAPE(2, nkv, E2, 0, "%sself_attn.k_proj.weight", pre);
        SHAPE(2, nkv, E2, 0, "%sself_attn.v_proj.weight", pre);
        SHAPE(2, E, nq, 0, "%sself_attn.o_proj.weight", pre);
        SHAPE(1, E, 0, 0, "%spre_ff_layernorm.weight", pre);
        SHAPE(2, ff2, E, 0, "%sfeed_forward.gate_up_proj.weight", pre);
        SHAPE(2, E, hp->n_ff, 0, "%sfeed_forward.down_proj.weight", pre);
    }
#undef SHAPE
    return s;
}

static const rp_conv_opt g_opts[] = {
    {"merged", "the older merged form: each hybrid visit's adapters baked into its own full "
               "ffn_up (and attn_q/k/v), no adapter pairs and no rank keys"},
    {0},
};

const rp_conv_hooks rp_conv_zamba2 = {
    .params = z2_params,
    .tensors = z2_tensors,
    .shapes = z2_shapes,
    .opts = g_opts,
};
