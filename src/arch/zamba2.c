/* Zamba2 (Zyphra): a stack of Mamba2 layers, some of which ("hybrid") first
 * run a transformer block that is *shared*: one or a few blocks visited at
 * several depths, each visit with its own low-rank adapters. The shared
 * tensors are stored once in the file and held once in memory; each visit's
 * adapter pair is kept as a pair (W.a + B.(A.a), never a baked full-rank
 * copy per visit). The reference is Hugging Face's modeling_zamba2.py.
 *
 * Per layer l (h = residual stream [H], e = token embeddings [H]):
 *   Mamba2 layer:  h = h + mamba(norm(h))
 *   hybrid layer:  s = linear_l(block_b(concat(h, e)))   (b = its shared block)
 *                  h = h + mamba(norm(h + s))            (the residual is h)
 * block_b(c) for visit l: a = rmsnorm_2H(c);
 *   q/k/v = W.a (+ B_l.(A_l.a) with attention adapters), RoPE over the whole
 *   head (head_dim = 2H / n_head) when rope.dimension_count > 0, attention
 *   scaled by (head_dim / 2)^-0.5 over visit l's own KV slot, o = Wo.att;
 *   f = rmsnorm_H(o); gate_up = W_gu.f (+ bias) + B_l.(A_l.f), split into
 *   gate | up; down(gelu_erf(gate) * up) (+ bias). No residual inside.
 * mamba(u): in_proj -> z | xBC | dt; xBC = silu(conv1d(xBC) + bias) over the
 *   last d_conv inputs (conv state); dt = max(softplus(dt + dt_bias),
 *   time_step_min); per head: S = exp(dt A) S + dt x B^T, y = S C + D x, B
 *   and C from the head's group; y = grouped_rmsnorm(y * silu(z)) (eps 1e-5,
 *   as the reference hard-codes), out_proj.
 *
 * GGUF layout (names llama.cpp's Mamba2 uses where they exist):
 *   keys  zamba2.block_count, context_length, embedding_length (H),
 *         feed_forward_length (n_ff), attention.head_count, head_count_kv,
 *         key_length = value_length (= 2H / head_count, required),
 *         layer_norm_rms_epsilon, rope.dimension_count (0 = no RoPE),
 *         rope.freq_base,
 *         ssm.conv_kernel, ssm.inner_size, ssm.state_size,
 *         ssm.time_step_rank (Mamba2 heads), ssm.group_count,
 *         ssm.time_step_min (f32, optional, 0 = no floor; HF clamps dt to
 *         config.time_step_min in its prompt path),
 *         shared_block (i32[block_count]: -1 for a Mamba2 layer, else the
 *         shared block b the hybrid layer visits; explicit so that a plan or
 *         a merged file keeps each visit's block),
 *         ffn_gate_up_adapter_rank (u32; absent or 0 = the merged form),
 *         attn_adapter_rank (u32; absent or 0 = no attention adapters).
 *   every layer:  blk.N.attn_norm.weight [H] (the Mamba2 input norm),
 *         ssm_in.weight [H, 2*inner + 2*groups*state + heads] (+ .bias),
 *         ssm_conv1d.weight [conv_kernel, inner + 2*groups*state] + .bias,
 *         ssm_dt.bias [heads], ssm_a [heads] (= -exp(A_log)), ssm_d [heads],
 *         ssm_norm.weight [inner], ssm_out.weight [inner, H] (+ .bias).
 *   shared block b, stored once at L = its first hybrid layer:
 *         blk.L.shared_attn_norm.weight [2H], attn_q.weight [2H, heads*hd],
 *         attn_k/attn_v.weight [2H, kv_heads*hd], attn_output.weight
 *         [heads*hd, H], ffn_norm.weight [H], ffn_up.weight [H, 2*n_ff]
 *         (gate rows, then up rows; + .bias), ffn_down.weight [n_ff, H]
 *         (+ .bias).
 *       Every other hybrid layer of block b aliases these rp_tensors (no
 *       copy). A hybrid layer that carries its own copy of one of them uses
 *       its own: that is how the merged form stores its per-visit ffn_up, and
 *       how a physically merged plan (reprise merge) stays correct.
 *   every hybrid layer N:
 *         blk.N.hybrid_proj.weight [H, H] (the layer's own `linear`),
 *         adapter form (rank r > 0): ffn_gate_up_adapter_a.weight [H, r] and
 *         ffn_gate_up_adapter_b.weight [r, 2*n_ff];
 *         merged form (rank 0): its own ffn_up.weight [H, 2*n_ff] = W + B.A;
 *         attention adapters (rank ra > 0): attn_{q,k,v}_adapter_a.weight
 *         [2H, ra] and attn_{q,k,v}_adapter_b.weight [ra, width of q/k/v].
 *   Adapter tensors without their rank key are refused, never guessed. */
#include "arch/zamba2.h"
#include "arch/arch.h"
#include "convert/synth.h"
#include "core/context.h"
#include "kernels/ops_ssm.h"
#include "kernels/types.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define Z2_SSM_NORM_EPS 1e-5f /* the reference's Mamba2 gated norm ignores rms_norm_eps */

typedef struct z2_hp { /* m->arch_data */
    int d_conv, d_inner, d_state, n_ssm_head, n_group;
    int ssm_head_dim; /* d_inner / n_ssm_head */
    int conv_dim;     /* d_inner + 2 * n_group * d_state: the convolved x | B | C */
    int d_in_proj;    /* d_inner (z) + conv_dim + n_ssm_head (dt) */
    float dt_min;
    int n_block; /* shared blocks */
    int *first;  /* [n_block] first hybrid layer of each block (where its tensors are stored) */
    int n_hybrid;
    int gu_rank, attn_rank;
    int n_aliased; /* slots bound to a tensor stored at another layer */
} z2_hp;

enum { Z2_Q, Z2_K, Z2_V };

typedef struct z2_layer { /* rp_layer.ext of every layer */
    int block;            /* -1: a Mamba2 layer */
    /* Mamba2 mixer */
    const rp_tensor *norm;          /* [H] */
    const rp_tensor *in, *in_b;     /* [H, d_in_proj], [d_in_proj] */
    const rp_tensor *conv, *conv_b; /* [d_conv, conv_dim] (F32), [conv_dim] */
    const rp_tensor *dt_b, *a, *d;  /* [n_ssm_head] */
    const rp_tensor *ssm_norm;      /* [d_inner] */
    const rp_tensor *out, *out_b;   /* [d_inner, H], [H] */
    /* hybrid visit; the shared block itself is in rp_layer (attn_norm, wq, wk,
     * wv, wo, ffn_norm, ffn_gate_up, ffn_down), aliased across visits */
    const rp_tensor *proj;                /* [H, H] */
    const rp_tensor *gu_bias, *down_bias; /* [2 n_ff], [H] (shared, optional) */
    const rp_tensor *gu_a, *gu_b;         /* [H, r], [r, 2 n_ff] */
    const rp_tensor *ad_a[3], *ad_b[3];   /* q, k, v: [2H, ra], [ra, width] */
} z2_layer;

/* ---- the tensor table ----------------------------------------------------- */

#define EXT(f) RP_TAT_EXT(z2_layer, f)
#define AT     RP_TAT_LAYER
#define HYB    RP_Z2_F_HYBRID
#define SHARED (RP_Z2_F_HYBRID | RP_Z2_F_STORES)
const rp_tensor_def rp_zamba2_rows[RP_Z2_N_ROWS] = {
    [RP_Z2_NORM] = {RP_TROW("attn_norm.weight", EMBD, NONE, NORM), EXT(norm)},
    [RP_Z2_SSM_IN] = {RP_TROW("ssm_in.weight", EMBD, Z2_IN_PROJ, OTHER), EXT(in)},
    [RP_Z2_SSM_IN_B] = {RP_TROW("ssm_in.bias", Z2_IN_PROJ, NONE, OTHER), .opt = true, EXT(in_b)},
    /* read as F32 taps (converted at load) */
    [RP_Z2_CONV] = {RP_TROW("ssm_conv1d.weight", Z2_CONV, Z2_CONV_DIM, OTHER), EXT(conv)},
    [RP_Z2_CONV_B] = {RP_TROW("ssm_conv1d.bias", Z2_CONV_DIM, NONE, OTHER), .opt = true,
                      .make = RP_Z2_F_MAMBA, EXT(conv_b)},
    [RP_Z2_DT_B] = {RP_TROW("ssm_dt.bias", Z2_HEADS, NONE, OTHER), .gen = RP_GEN_UNIFORM,
                    .lo = -4.0f, .hi = -1.0f, EXT(dt_b)},
    /* -exp(A_log), checked negative at load */
    [RP_Z2_A] = {RP_TROW("ssm_a", Z2_HEADS, NONE, OTHER), .gen = RP_GEN_UNIFORM, .lo = -8.0f,
                 .hi = -0.5f, EXT(a)},
    [RP_Z2_D] = {RP_TROW("ssm_d", Z2_HEADS, NONE, OTHER), .gen = RP_GEN_UNIFORM, .lo = 0.5f,
                 .hi = 1.5f, EXT(d)},
    [RP_Z2_SSM_NORM] = {RP_TROW("ssm_norm.weight", Z2_INNER, NONE, NORM), EXT(ssm_norm)},
    [RP_Z2_SSM_OUT] = {RP_TROW("ssm_out.weight", Z2_INNER, EMBD, OTHER), EXT(out)},
    [RP_Z2_SSM_OUT_B] = {RP_TROW("ssm_out.bias", EMBD, NONE, OTHER), .opt = true, EXT(out_b)},
    /* the shared block: attention over concat(h, e) of width 2H, then the MLP */
    [RP_Z2_SHARED_NORM] = {RP_TROW("shared_attn_norm.weight", EMBD2, NONE, NORM), .when = SHARED,
                           AT(attn_norm)},
    [RP_Z2_ATTN_Q] = {RP_TROW("attn_q.weight", EMBD2, Q, ATTN_Q), .when = SHARED, AT(wq)},
    [RP_Z2_ATTN_K] = {RP_TROW("attn_k.weight", EMBD2, KV, ATTN_K), .when = SHARED, AT(wk)},
    [RP_Z2_ATTN_V] = {RP_TROW("attn_v.weight", EMBD2, KV, ATTN_V), .when = SHARED, AT(wv)},
    [RP_Z2_ATTN_OUT] = {RP_TROW("attn_output.weight", Q, EMBD, ATTN_OUTPUT), .when = SHARED,
                        AT(wo)},
    [RP_Z2_FFN_NORM] = {RP_TROW("ffn_norm.weight", EMBD, NONE, NORM), .when = SHARED, AT(ffn_norm)},
    [RP_Z2_FFN_DOWN] = {RP_TROW("ffn_down.weight", FF, EMBD, FFN_DOWN), .when = SHARED,
                        AT(ffn_down)},
    [RP_Z2_FFN_UP_B] = {RP_TROW("ffn_up.bias", FF2, NONE, OTHER), .opt = true, .when = SHARED,
                        EXT(gu_bias)},
    [RP_Z2_FFN_DOWN_B] = {RP_TROW("ffn_down.bias", EMBD, NONE, OTHER), .opt = true, .when = SHARED,
                          EXT(down_bias)},
    /* gate rows, then up rows */
    [RP_Z2_FFN_UP] = {RP_TROW("ffn_up.weight", EMBD, FF2, FFN_UP), .when = HYB | RP_Z2_F_OWN_GU,
                      AT(ffn_gate_up)},
    [RP_Z2_PROJ] = {RP_TROW("hybrid_proj.weight", EMBD, EMBD, OTHER), .when = HYB, EXT(proj)},
    /* (llama.cpp's name rules count the MLP adapter pair as ffn_gate) */
    [RP_Z2_GU_A] = {RP_TROW("ffn_gate_up_adapter_a.weight", EMBD, Z2_RANK, FFN_GATE),
                    .when = HYB | RP_Z2_F_ADAPTERS, EXT(gu_a)},
    [RP_Z2_GU_B] = {RP_TROW("ffn_gate_up_adapter_b.weight", Z2_RANK, FF2, FFN_GATE),
                    .when = HYB | RP_Z2_F_ADAPTERS, EXT(gu_b)},
    [RP_Z2_ATTN_Q_A] = {RP_TROW("attn_q_adapter_a.weight", EMBD2, Z2_ARANK, OTHER),
                        .when = HYB | RP_Z2_F_ATTN_ADAPTERS, EXT(ad_a[Z2_Q])},
    [RP_Z2_ATTN_Q_B] = {RP_TROW("attn_q_adapter_b.weight", Z2_ARANK, Q, OTHER),
                        .when = HYB | RP_Z2_F_ATTN_ADAPTERS, EXT(ad_b[Z2_Q])},
    [RP_Z2_ATTN_K_A] = {RP_TROW("attn_k_adapter_a.weight", EMBD2, Z2_ARANK, OTHER),
                        .when = HYB | RP_Z2_F_ATTN_ADAPTERS, EXT(ad_a[Z2_K])},
    [RP_Z2_ATTN_K_B] = {RP_TROW("attn_k_adapter_b.weight", Z2_ARANK, KV, OTHER),
                        .when = HYB | RP_Z2_F_ATTN_ADAPTERS, EXT(ad_b[Z2_K])},
    [RP_Z2_ATTN_V_A] = {RP_TROW("attn_v_adapter_a.weight", EMBD2, Z2_ARANK, OTHER),
                        .when = HYB | RP_Z2_F_ATTN_ADAPTERS, EXT(ad_a[Z2_V])},
    [RP_Z2_ATTN_V_B] = {RP_TROW("attn_v_adapter_b.weight", Z2_ARANK, KV, OTHER),
                        .when = HYB | RP_Z2_F_ATTN_ADAPTERS, EXT(ad_b[Z2_V])},
};
#undef EXT
#undef AT
#undef HYB
#undef SHARED

const rp_tensor_table rp_zamba2_tensors = {
    .what = "zamba2",
    .rows = rp_zamba2_rows,
    .n_rows = RP_Z2_N_ROWS,
    .base = &rp_io_tensors,
};

static void set_dims(rp_dims *d, int in_proj, int conv_dim, int d_conv, int heads, int d_inner,
                     int rank, int arank) {
    d->v[RP_DIM_Z2_IN_PROJ] = in_proj;
    d->v[RP_DIM_Z2_CONV_DIM] = conv_dim;
    d->v[RP_DIM_Z2_CONV] = d_conv;
    d->v[RP_DIM_Z2_HEADS] = heads;
    d->v[RP_DIM_Z2_INNER] = d_inner;
    d->v[RP_DIM_Z2_RANK] = rank;
    d->v[RP_DIM_Z2_ARANK] = arank;
}

static void layer_dims(rp_dims *d, const rp_model *m, int l, const z2_hp *z) {
    rp_dims_of_layer(d, m, l);
    set_dims(d, z->d_in_proj, z->conv_dim, z->d_conv, z->n_ssm_head, z->d_inner, z->gu_rank,
             z->attn_rank);
}

/* ---- loading ------------------------------------------------------------- */

/* Converts a 2-D tensor to an owned F32 copy (conv taps are read as floats). */
static rp_status to_f32(rp_model *m, const rp_tensor *t) {
    if (t->type == RP_TYPE_F32) return RP_OK;
    rp_tensor *mt = &m->tensors[t - m->tensors];
    const rp_type_traits *tt = rp_type_get(mt->type);
    if (!tt || !tt->to_float)
        return rp_fail(RP_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which reprise cannot read",
                       m->path, mt->name, rp_type_name(mt->type));
    const size_t n = (size_t)mt->ne[0] * (size_t)mt->ne[1];
    float *f = rp_malloc(n * sizeof(float), "converted tensor");
    if (!f || !rp_model_own(m, f)) {
        free(f);
        return RP_ERR_NOMEM;
    }
    for (int64_t r = 0; r < mt->ne[1]; r++)
        tt->to_float(rp_tensor_row(mt, r), f + (size_t)r * (size_t)mt->ne[0], mt->ne[0]);
    mt->data = f;
    mt->type = RP_TYPE_F32;
    mt->row_bytes = (size_t)mt->ne[0] * sizeof(float);
    mt->nbytes = n * sizeof(float);
    return RP_OK;
}

static rp_status load_ssm_hparams(rp_model *m, z2_hp *z) {
    rp_status s;
    if ((s = rp_hp_u32(m, "ssm.conv_kernel", true, 0, 1, 256, &z->d_conv))) return s;
    if ((s = rp_hp_u32(m, "ssm.inner_size", true, 0, 1, 1u << 18, &z->d_inner))) return s;
    if ((s = rp_hp_u32(m, "ssm.state_size", true, 0, 1, 1u << 12, &z->d_state))) return s;
    if ((s = rp_hp_u32(m, "ssm.time_step_rank", true, 0, 1, (uint32_t)z->d_inner, &z->n_ssm_head)))
        return s;
    if ((s = rp_hp_u32(m, "ssm.group_count", false, 1, 1, (uint32_t)z->n_ssm_head, &z->n_group)))
        return s;
    if ((s = rp_hp_f32(m, "ssm.time_step_min", false, 0.0f, 0.0f, 1.0f, &z->dt_min))) return s;
    if (z->d_inner % z->n_ssm_head)
        return rp_fail(
            RP_ERR_FORMAT,
            "%s: zamba2.ssm.time_step_rank %d (Mamba2 heads) does not divide ssm.inner_size %d",
            m->path, z->n_ssm_head, z->d_inner);
    if (z->n_ssm_head % z->n_group)
        return rp_fail(RP_ERR_FORMAT,
                       "%s: zamba2.ssm.group_count %d does not divide the %d Mamba2 heads", m->path,
                       z->n_group, z->n_ssm_head);
    z->ssm_head_dim = z->d_inner / z->n_ssm_head;
    z->conv_dim = z->d_inner + 2 * z->n_group * z->d_state;
    z->d_in_proj = z->d_inner + z->conv_dim + z->n_ssm_head;
    return RP_OK;
}

/* zamba2.shared_block: which block each hybrid layer visits (-1: none). */
static rp_status load_blocks(rp_model *m, z2_hp *z, int *block) {
    char key[160];
    rp_arch_key(m, "shared_block", key, sizeof key);
    const rp_gguf_val *v = rp_gguf_get(m->gguf, key);
    const int n = m->hp.n_layer;
    if (!v)
        return rp_fail(RP_ERR_FORMAT,
                       "%s: required key '%s' is missing (the shared block of each layer)", m->path,
                       key);
    if (v->type != RP_GGUF_ARRAY || !rp_gguf_type_is_int((int)v->arr.type))
        return rp_fail(RP_ERR_FORMAT, "%s: key '%s' must be an integer array", m->path, key);
    if (v->arr.n != (uint64_t)n)
        return rp_fail(RP_ERR_FORMAT, "%s: key '%s' has %llu entries, the model has %d layers",
                       m->path, key, (unsigned long long)v->arr.n, n);
    int max = -1;
    for (int l = 0; l < n; l++) {
        int64_t b = rp_gguf_arr_i64(v, (uint64_t)l);
        if (b < -1 || b >= n)
            return rp_fail(
                RP_ERR_FORMAT,
                "%s: key '%s'[%d] = %lld is out of range (-1 for a Mamba2 layer, else a block "
                "index below %d)",
                m->path, key, l, (long long)b, n);
        block[l] = (int)b;
        max = RP_MAX(max, (int)b);
    }
    if (max < 0) return rp_fail(RP_ERR_FORMAT, "%s: key '%s' names no hybrid layer", m->path, key);
    z->n_block = max + 1;
    z->first = rp_malloc((size_t)z->n_block * sizeof *z->first, "zamba2 blocks");
    if (!z->first) return RP_ERR_NOMEM;
    for (int b = 0; b < z->n_block; b++) z->first[b] = -1;
    for (int l = n - 1; l >= 0; l--)
        if (block[l] >= 0) z->first[block[l]] = l;
    for (int b = 0; b < z->n_block; b++)
        if (z->first[b] < 0)
            return rp_fail(RP_ERR_FORMAT,
                           "%s: key '%s' uses shared blocks up to %d but no layer visits block %d",
                           m->path, key, max, b);
    for (int l = 0; l < n; l++) z->n_hybrid += block[l] >= 0;
    return RP_OK;
}

/* A shared-block row of hybrid layer l: its own tensor when the file has one,
 * else the tensor stored at the block's first hybrid layer (`first`, NULL at
 * that layer itself), aliased rather than copied. */
static rp_status bind_shared(rp_model *m, z2_hp *z, const rp_tensor_def *r, const rp_tensor **dst,
                             const rp_tensor *first, bool is_first, int l, const rp_dims *d) {
    rp_status s = rp_bind_row(m, dst, r, l, d, is_first && !r->opt);
    if (s) return s;
    if (!*dst && !is_first && first) {
        *dst = first;
        z->n_aliased++;
    }
    return RP_OK;
}

/* The adapter pair of rows a_row / b_row: [n_in, rank] and [rank, n_out].
 * With rank 0 the pair must be absent (a pair without its rank is refused). */
static rp_status bind_pair(rp_model *m, z2_layer *Z, int a_row, int rank, int l, const rp_dims *d,
                           const char *rank_key) {
    const rp_tensor_def *ra = &rp_zamba2_rows[a_row], *rb = &rp_zamba2_rows[a_row + 1];
    const rp_tensor **a = rp_tensor_slot(m, ra, l, Z), **b = rp_tensor_slot(m, rb, l, Z);
    if (!rank) {
        for (int i = 0; i < 2; i++) {
            char nm[256];
            rp_tensor_name(i ? rb : ra, l, nm, sizeof nm);
            if (rp_gguf_find_tensor(m->gguf, nm))
                return rp_fail(RP_ERR_FORMAT,
                               "%s: tensor '%s' is an adapter but the file has no zamba2.%s "
                               "(absent or 0 means no "
                               "adapters); refusing to guess its rank",
                               m->path, nm, rank_key);
        }
        *a = *b = NULL;
        return RP_OK;
    }
    rp_status s = rp_bind_row(m, a, ra, l, d, true);
    return s ? s : rp_bind_row(m, b, rb, l, d, true);
}

static rp_status bind_mamba(rp_model *m, const z2_hp *z, z2_layer *Z, int l) {
    rp_dims d;
    layer_dims(&d, m, l, z);
    rp_status s = rp_bind_layer_rows(m, &rp_zamba2_tensors, l, RP_Z2_F_MAMBA, &d, Z);
    if (s) return s;
    if ((s = to_f32(m, Z->conv))) return s;
    const float *a = Z->a->data;
    for (int h = 0; h < z->n_ssm_head; h++)
        if (!(a[h] < 0.0f) || !isfinite(a[h]))
            return rp_fail(RP_ERR_FORMAT,
                           "%s: tensor '%s'[%d] = %g; it must be negative (-exp(A_log))", m->path,
                           Z->a->name, h, (double)a[h]);
    return RP_OK;
}

/* The merged form's gate|up matrix: the layer's own, required. */
static rp_status bind_own_gate_up(rp_model *m, int l, const rp_dims *d) {
    const rp_tensor_def *r = &rp_zamba2_rows[RP_Z2_FFN_UP];
    rp_layer *L = &m->layers[l];
    rp_status s = rp_bind_row(m, &L->ffn_gate_up, r, l, d, false);
    if (s || L->ffn_gate_up) return s;
    char nm[256];
    return rp_fail(RP_ERR_FORMAT,
                   "%s: hybrid layer %d has no '%s': without "
                   "zamba2.ffn_gate_up_adapter_rank "
                   "the file is in the merged form, which stores a full ffn_up (adapter baked "
                   "in) at every "
                   "hybrid layer",
                   m->path, l, rp_tensor_name(r, l, nm, sizeof nm));
}

/* The shared block's tensors at hybrid layer l (the gate|up matrix among
 * them in the adapter form): stored there or aliased to its first visit f. */
static rp_status bind_block(rp_model *m, z2_hp *z, int l, int f, const rp_dims *d) {
    void *Z = m->layers[l].ext, *ZF = m->layers[f].ext;
    const bool is_first = f == l;
    rp_status s = RP_OK;
    for (int i = RP_Z2_SHARED_FIRST; i <= RP_Z2_SHARED_LAST && !s; i++) {
        const rp_tensor_def *r = &rp_zamba2_rows[i];
        s = bind_shared(m, z, r, rp_tensor_slot(m, r, l, Z), *rp_tensor_slot(m, r, f, ZF), is_first,
                        l, d);
    }
    if (!s && z->gu_rank) {
        const rp_tensor_def *r = &rp_zamba2_rows[RP_Z2_FFN_UP];
        s = bind_shared(m, z, r, rp_tensor_slot(m, r, l, Z), *rp_tensor_slot(m, r, f, ZF), is_first,
                        l, d);
    }
    return s;
}

static rp_status bind_hybrid(rp_model *m, z2_hp *z, int l) {
    z2_layer *Z = m->layers[l].ext;
    const int b = Z->block, f = z->first[b];
    rp_dims d;
    layer_dims(&d, m, l, z);
    rp_status s = bind_block(m, z, l, f, &d);
    if (s)
        return rp_fail_prefix(
            s, "zamba2: shared block %d (stored at its first hybrid layer %d, visited by layer %d)",
            b, f, l);
    if (!z->gu_rank && (s = bind_own_gate_up(m, l, &d))) return s;
    if ((s = rp_bind_row(m, &Z->proj, &rp_zamba2_rows[RP_Z2_PROJ], l, &d, true))) return s;
    if ((s = bind_pair(m, Z, RP_Z2_GU_A, z->gu_rank, l, &d, "ffn_gate_up_adapter_rank"))) return s;
    for (int i = 0; i < 3; i++)
        if ((s = bind_pair(m, Z, RP_Z2_ATTN_Q_A + 2 * i, z->attn_rank, l, &d, "attn_adapter_rank")))
            return s;
    return RP_OK;
}

static rp_status load_zamba2(rp_model *m) {
    rp_hparams *hp = &m->hp;
    rp_status s = rp_load_transformer_hparams(m);
    if (s) return s;
    char key[160];
    if (!rp_gguf_get(m->gguf, rp_arch_key(m, "attention.key_length", key, sizeof key)))
        return rp_fail(RP_ERR_FORMAT,
                       "%s: required key '%s' is missing (2 x embedding_length / head_count)",
                       m->path, key);
    if ((int64_t)hp->n_head * hp->head_dim_k != 2 * (int64_t)hp->n_embd ||
        hp->head_dim_v != hp->head_dim_k)
        return rp_fail(
            RP_ERR_FORMAT,
            "%s: zamba2.attention.head_count %d x key_length %d (value_length %d) must equal 2 x "
            "embedding_length %d: the shared block attends over concat(h, e)",
            m->path, hp->n_head, hp->head_dim_k, hp->head_dim_v, hp->n_embd);
    if (hp->n_ctx_train < 1) hp->n_ctx_train = 1;
    hp->rope_style = RP_ROPE_NEOX;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim_k / 2.0f);
    z2_hp *z = rp_calloc(1, sizeof *z, "zamba2 hparams");
    if (!z) return RP_ERR_NOMEM;
    m->arch_data = z;
    if ((s = load_ssm_hparams(m, z))) return s;
    const uint32_t max_rank = (uint32_t)RP_MIN(2 * hp->n_embd, 1 << 16);
    if ((s = rp_hp_u32(m, "ffn_gate_up_adapter_rank", false, 0, 0, max_rank, &z->gu_rank)))
        return s;
    if ((s = rp_hp_u32(m, "attn_adapter_rank", false, 0, 0, max_rank, &z->attn_rank))) return s;
    int *block = rp_malloc((size_t)hp->n_layer * sizeof *block, "zamba2 blocks");
    if (!block) return RP_ERR_NOMEM;
    s = load_blocks(m, z, block);
    const size_t rec =
        (size_t)(z->d_conv - 1) * (size_t)z->conv_dim + (size_t)z->d_inner * (size_t)z->d_state;
    for (int l = 0; !s && l < hp->n_layer; l++) {
        rp_layer_info *li = &m->info[l];
        z2_layer *Z = rp_calloc(1, sizeof *Z, "zamba2 layer");
        if (!Z) {
            s = RP_ERR_NOMEM;
            break;
        }
        m->layers[l].ext = Z;
        Z->block = block[l];
        li->rec_floats = rec;
        if (Z->block >= 0) {
            li->kind = RP_LAYER_HYBRID;
            li->has_kv = true;
        } else {
            li->kind = RP_LAYER_RECURRENT;
            li->has_kv = false;
            li->n_head = li->n_head_kv = li->head_dim_k = li->head_dim_v = li->n_ff = 0;
        }
    }
    free(block);
    if (s) return s;
    if ((s = rp_bind_io(m))) return s;
    for (int l = 0; l < hp->n_layer; l++) {
        if ((s = bind_mamba(m, z, m->layers[l].ext, l))) return s;
        if (((z2_layer *)m->layers[l].ext)->block >= 0 && (s = bind_hybrid(m, z, l))) return s;
    }
    rp_log(RP_LOG_INFO,
           "zamba2: %d Mamba2 layers, %d of them hybrid visiting %d shared block(s); %d slots "
           "alias a tensor stored "
           "once; MLP adapters %s (rank %d), attention adapters rank %d",
           hp->n_layer, z->n_hybrid, z->n_block, z->n_aliased,
           z->gu_rank ? "kept as pairs" : "merged", z->gu_rank, z->attn_rank);
    return RP_OK;
}

static void unload_zamba2(rp_model *m) {
    z2_hp *z = m->arch_data;
    if (z) free(z->first);
    free(z);
    m->arch_data = NULL;
}

/* ---- forward ------------------------------------------------------------- */

/* Scratch of one context, every buffer sized for n_ubatch tokens. */
typedef struct z2_ctx {
    float *x;                  /* [n][H] residual stream h */
    float *emb;                /* [n][H] token embeddings e */
    float *cat;                /* [n][2H] concat(h, e), normed in place */
    float *q;                  /* [n][heads * hd] */
    float *k, *v;              /* [n][kv_heads * hd] */
    float *att;                /* [n][heads * hd] */
    float *lo;                 /* [n][max rank] A.a of an adapter */
    float *ad;                 /* [n][max(2 n_ff, heads * hd)] B.(A.a) */
    float *o;                  /* [n][H] block / mixer outputs */
    float *gu;                 /* [n][2 n_ff] */
    float *act;                /* [n][n_ff] */
    float *s;                  /* [n][H] */
    float *u;                  /* [n][H] normed mixer input */
    float *zx;                 /* [n][d_in_proj] z | xBC | dt */
    float *y;                  /* [n][d_inner] */
    float *dt;                 /* [n][ssm heads] */
    float *rope;               /* [n][n_rot] */
    const rp_kv_view **kv;     /* [n] */
    float **conv_st, **ssm_st; /* [n] each token's sequence state */
    void *block;
} z2_ctx;

static void z2_ctx_free(rp_context *c) {
    z2_ctx *d = c->arch_ctx;
    if (!d) return;
    rp_free_aligned(d->block);
    free(d->kv);
    free(d->conv_st);
    free(d->ssm_st);
    free(d);
    c->arch_ctx = NULL;
}

static rp_status z2_ctx_init(rp_context *c) {
    const rp_model *m = c->model;
    const z2_hp *z = m->arch_data;
    const size_t n = (size_t)c->n_ubatch, E = (size_t)m->hp.n_embd;
    size_t nq = 0, nkv = 0, ff = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const rp_layer_info *li = &m->info[l];
        nq = RP_MAX(nq, (size_t)li->n_head * (size_t)li->head_dim_k);
        nkv = RP_MAX(nkv, (size_t)li->n_head_kv * (size_t)li->head_dim_k);
        ff = RP_MAX(ff, (size_t)li->n_ff);
    }
    const size_t rank = (size_t)RP_MAX(1, RP_MAX(z->gu_rank, z->attn_rank));
    const size_t nrot = (size_t)m->hp.rope[0].n_rot;
    /* the matmul inputs here are 2H, heads*hd, H, n_ff, d_inner and the ranks;
     * the context sized its activation scratch for the generic widths */
    const int64_t widest = (int64_t)RP_MAX(RP_MAX(2 * E, nq), RP_MAX(ff, (size_t)z->d_inner));
    const size_t need = rp_matmul_scratch(widest, c->n_ubatch);
    if (need > c->cc.wbuf_size) {
        uint8_t *w = rp_alloc_aligned(need, "matmul scratch");
        if (!w) return RP_ERR_NOMEM;
        rp_free_aligned(c->cc.wbuf);
        c->cc.wbuf = w;
        c->cc.wbuf_size = need;
    }
    z2_ctx *d = rp_calloc(1, sizeof *d, "zamba2 scratch");
    if (!d) return RP_ERR_NOMEM;
    float **const bufs[] = {&d->x,   &d->emb, &d->cat, &d->q, &d->k,  &d->v,
                            &d->att, &d->lo,  &d->ad,  &d->o, &d->gu, &d->act,
                            &d->s,   &d->u,   &d->zx,  &d->y, &d->dt, &d->rope};
    const size_t widths[] = {E,
                             E,
                             2 * E,
                             nq,
                             nkv,
                             nkv,
                             nq,
                             rank,
                             RP_MAX(2 * ff, nq),
                             E,
                             2 * ff,
                             ff,
                             E,
                             E,
                             (size_t)z->d_in_proj,
                             (size_t)z->d_inner,
                             (size_t)z->n_ssm_head,
                             nrot};
    _Static_assert(RP_ARRAY_LEN(bufs) == RP_ARRAY_LEN(widths), "one width per buffer");
    size_t total = 0;
    for (size_t i = 0; i < RP_ARRAY_LEN(widths); i++)
        total += rp_align_up((n * widths[i] + 1) * sizeof(float), 64);
    d->block = rp_alloc_aligned(total, "activation scratch");
    d->kv = rp_calloc(n, sizeof *d->kv, "kv views");
    d->conv_st = rp_calloc(n, sizeof *d->conv_st, "state views");
    d->ssm_st = rp_calloc(n, sizeof *d->ssm_st, "state views");
    c->arch_ctx = d;
    if (!d->block || !d->kv || !d->conv_st || !d->ssm_st) {
        z2_ctx_free(c);
        return RP_ERR_NOMEM;
    }
    char *p = d->block;
    for (size_t i = 0; i < RP_ARRAY_LEN(widths); i++) {
        *bufs[i] = (float *)p;
        p += rp_align_up((n * widths[i] + 1) * sizeof(float), 64);
    }
    return RP_OK;
}

static void add_bias(float *x, const rp_tensor *b, int n_rows, int width) {
    if (!b) return;
    for (int r = 0; r < n_rows; r++) rp_add(x + (size_t)r * (size_t)width, b->data, width);
}

/* y += B.(A.x) for the n rows of x (an adapter pair; a == NULL: none). */
static void add_adapter(rp_context *c, z2_ctx *d, const rp_tensor *a, const rp_tensor *b,
                        const float *x, int n, float *y) {
    if (!a) return;
    const int w = (int)b->ne[1];
    rp_matmul(&c->cc, a, x, n, d->lo);
    rp_matmul(&c->cc, b, d->lo, n, d->ad);
    for (int t = 0; t < n; t++) rp_add(y + (size_t)t * (size_t)w, d->ad + (size_t)t * (size_t)w, w);
}

/* The shared block of hybrid step e (source layer L) on concat(h, e), then
 * the layer's own projection: d->o = linear_l(block(concat(x, emb))). */
static void shared_block(rp_context *c, z2_ctx *d, const rp_ubatch *ub, int e, const rp_layer *L,
                         const rp_layer_info *li) {
    const rp_hparams *hp = &c->model->hp;
    const z2_layer *Z = L->ext;
    const int n = ub->n_tok, E = hp->n_embd, E2 = 2 * E;
    const int nh = li->n_head, nkv = li->n_head_kv, hd = li->head_dim_k, ff = li->n_ff;
    const int wq = nh * hd, wk = nkv * hd;
    for (int t = 0; t < n; t++) {
        memcpy(d->cat + (size_t)t * (size_t)E2, d->x + (size_t)t * (size_t)E,
               (size_t)E * sizeof(float));
        memcpy(d->cat + (size_t)t * (size_t)E2 + E, d->emb + (size_t)t * (size_t)E,
               (size_t)E * sizeof(float));
    }
    rp_rmsnorm(d->cat, d->cat, L->attn_norm->data, E2, n, hp->eps);
    const rp_tensor *w3[3] = {L->wq, L->wk, L->wv};
    float *y3[3] = {d->q, d->k, d->v};
    rp_matmul_n(&c->cc, 3, w3, y3, d->cat, n);
    for (int i = 0; i < 3; i++) add_adapter(c, d, Z->ad_a[i], Z->ad_b[i], d->cat, n, y3[i]);
    const rp_rope_params *rope = &hp->rope[0];
    if (rope->n_rot > 0) {
        rp_rope_apply(d->q, n, wq, nh, hd, rope->n_rot, d->rope, hp->rope_style);
        rp_rope_apply(d->k, n, wk, nkv, hd, rope->n_rot, d->rope, hp->rope_style);
    }
    /* what the visit is comes from its source layer; where it runs (its own
     * KV slot) from the step */
    for (int t = 0; t < n; t++) {
        d->kv[t] = rp_ctx_kv(c, e, ub->seq[t]);
        rp_kv_write(d->kv[t], nkv, hd, hd, ub->pos[t], d->k + (size_t)t * (size_t)wk,
                    d->v + (size_t)t * (size_t)wk);
    }
    rp_attn_args aa = {
        .n_tok = n,
        .q = d->q,
        .q_stride = wq,
        .out = d->att,
        .out_stride = wq,
        .n_head = nh,
        .n_head_kv = nkv,
        .head_dim_k = hd,
        .head_dim_v = hd,
        .scale = hp->attn_scale,
        .pos = ub->pos,
        .kv = d->kv,
    };
    rp_attention(&c->cc, &aa, c->attn_scratch, c->attn_scratch_per_thread);
    rp_matmul(&c->cc, L->wo, d->att, n, d->o);
    rp_rmsnorm(d->o, d->o, L->ffn_norm->data, E, n, hp->eps);
    rp_matmul(&c->cc, L->ffn_gate_up, d->o, n, d->gu);
    add_bias(d->gu, Z->gu_bias, n, 2 * ff);
    add_adapter(c, d, Z->gu_a, Z->gu_b, d->o, n, d->gu); /* before the gate/up split */
    for (int t = 0; t < n; t++) {
        float *act = d->act + (size_t)t * (size_t)ff;
        const float *gu = d->gu + (size_t)t * 2 * (size_t)ff;
        memcpy(act, gu, (size_t)ff * sizeof(float));
        rp_gelu_erf_mul(act, gu + ff, ff);
    }
    rp_matmul(&c->cc, L->ffn_down, d->act, n, d->s);
    add_bias(d->s, Z->down_bias, n, E);
    rp_matmul(&c->cc, Z->proj, d->s, n, d->o);
}

/* The Mamba2 mixer of step e on d->u (normed); output in d->o. */
static void mamba(rp_context *c, z2_ctx *d, const rp_ubatch *ub, int e, const z2_layer *Z) {
    const z2_hp *z = c->model->arch_data;
    const int n = ub->n_tok, P = z->d_in_proj, DI = z->d_inner;
    for (int t = 0; t < n; t++) {
        float *rec = c->state.rec[(size_t)e * (size_t)c->n_seq + (size_t)ub->seq[t]];
        d->conv_st[t] = rec;
        d->ssm_st[t] = rec + (size_t)(z->d_conv - 1) * (size_t)z->conv_dim;
    }
    rp_matmul(&c->cc, Z->in, d->u, n, d->zx);
    add_bias(d->zx, Z->in_b, n, P);
    rp_ssm_conv1d_silu(&c->cc, d->zx + DI, n, P, z->conv_dim, Z->conv->data,
                       Z->conv_b ? Z->conv_b->data : NULL, z->d_conv, d->conv_st);
    rp_ssm_dt(d->dt, d->zx + DI + z->conv_dim, P, Z->dt_b->data, n, z->n_ssm_head, z->dt_min);
    const int gs = z->n_group * z->d_state;
    rp_ssm_scan_args sa = {
        .n_tok = n,
        .n_head = z->n_ssm_head,
        .head_dim = z->ssm_head_dim,
        .d_state = z->d_state,
        .n_group = z->n_group,
        .x = d->zx + DI,
        .B = d->zx + 2 * DI,
        .C = d->zx + 2 * DI + gs,
        .x_stride = P,
        .bc_stride = P,
        .dt = d->dt,
        .A = Z->a->data,
        .D = Z->d->data,
        .y = d->y,
        .y_stride = DI,
        .state = d->ssm_st,
    };
    rp_ssm_scan(&c->cc, &sa);
    rp_ssm_norm_gated(d->y, d->zx, P, Z->ssm_norm->data, DI, z->n_group, n, Z2_SSM_NORM_EPS);
    rp_matmul(&c->cc, Z->out, d->y, n, d->o);
    add_bias(d->o, Z->out_b, n, c->model->hp.n_embd);
}

static rp_status z2_forward(rp_context *c, const rp_ubatch *ub) {
    const rp_model *m = c->model;
    const rp_hparams *hp = &m->hp;
    const rp_plan *plan = c->plan;
    z2_ctx *d = c->arch_ctx;
    const int E = hp->n_embd, n = ub->n_tok;
    /* steps [e_begin, e_end): the whole plan unless rp_decode_steps asked for a range */
    const int e_begin = ub->step_begin, e_end = ub->step_end ? ub->step_end : plan->n_eff;
    /* the token embeddings e feed every hybrid step, so they are looked up
     * even when the residual stream enters mid-plan */
    for (int t = 0; t < n; t++) {
        float *er = d->emb + (size_t)t * (size_t)E;
        if (ub->embd)
            memcpy(er, ub->embd + (size_t)t * (size_t)E, (size_t)E * sizeof(float));
        else
            rp_tensor_get_row(m->tok_embd, ub->token[t], er);
    }
    memcpy(d->x, e_begin > 0 ? ub->x_in : d->emb, (size_t)n * (size_t)E * sizeof(float));
    if (hp->rope[0].n_rot > 0) rp_rope_cache(d->rope, ub->pos, n, &hp->rope[0]);
    for (int e = e_begin; e < e_end; e++) {
        const int src = plan->src[e];
        const rp_layer *L = &m->layers[src];
        const z2_layer *Z = L->ext;
        const float *in = d->x;
        if (Z->block >= 0) {
            shared_block(c, d, ub, e, L, &m->info[src]);
            for (int i = 0; i < n * E; i++) d->u[i] = d->x[i] + d->o[i];
            in = d->u;
        }
        rp_rmsnorm(d->u, in, Z->norm->data, E, n, hp->eps);
        mamba(c, d, ub, e, Z);
        for (int i = 0; i < n * E; i++) d->x[i] += d->o[i];
    }
    if (e_end < plan->n_eff) {
        memcpy(ub->x_out, d->x, (size_t)n * (size_t)E * sizeof(float));
        return RP_OK;
    }
    rp_forward_output(c, ub, d->x, false, d->u);
    return RP_OK;
}

/* ---- plans written as files (reprise merge) ------------------------------ */

/* The merged file re-indexes zamba2.shared_block by itself (a per-layer
 * array) and copies each step's own tensors, so each visit keeps its block and
 * adapter. What can go wrong is where a block's tensors are: the loader looks
 * for them at the block's first hybrid layer of the new file, so the step that
 * comes first for each block must be a layer that stores them. */
static rp_status merge_meta_zamba2(const rp_model *m, const rp_plan *p, rp_gguf_writer *w) {
    (void)w;
    const z2_hp *z = m->arch_data;
    for (int b = 0; b < z->n_block; b++) {
        int e = 0;
        while (e < p->n_eff && ((const z2_layer *)m->layers[p->src[e]].ext)->block != b) e++;
        if (e == p->n_eff) continue; /* the plan never visits block b: nothing of it is needed */
        const int src = p->src[e], f = z->first[b];
        for (int i = RP_Z2_SHARED_FIRST; i <= RP_Z2_FFN_UP; i++) { /* what a block stores */
            char a[128], o[128];
            rp_tensor_name(&rp_zamba2_rows[i], f, a, sizeof a);
            rp_tensor_name(&rp_zamba2_rows[i], src, o, sizeof o);
            if (rp_gguf_find_tensor(m->gguf, a) && !rp_gguf_find_tensor(m->gguf, o))
                return rp_fail(RP_ERR_UNSUPPORTED,
                               "zamba2: in this plan the first visit of shared block %d is step %d "
                               "(source layer %d), "
                               "but the block's tensors are stored at layer %d ('%s'); a merged "
                               "file keeps them at its "
                               "first visit, so layer %d must come before every other visit of "
                               "block %d (the runtime "
                               "plan has no such limit)",
                               b, e, src, f, a, f, b);
        }
    }
    return RP_OK;
}

/* ---- synthetic models ---------------------------------------------------- */

/* Random Zamba2 weights in the layout above. Unset sizes: Mamba2 inner width
 * 2 n_embd in heads of 16, state 16, one group, conv 4; every 3rd layer
 * hybrid; 2 shared blocks (1 with a single hybrid layer); MLP adapter rank 8,
 * no attention adapters; RoPE over the whole head (n_rot < 0: none). */
static rp_status synth_zamba2(rp_synth *s, const rp_synth_params *p) {
    const int E = p->n_embd, nh = p->n_head, nkv = p->n_head_kv ? p->n_head_kv : p->n_head,
              ff = p->n_ff;
    const int hd = nh > 0 ? 2 * E / nh : 0, d_inner = 2 * E;
    const int heads = p->ssm_heads ? p->ssm_heads : RP_MAX(1, d_inner / 16);
    const int ds = p->ssm_state ? p->ssm_state : 16, groups = p->ssm_groups ? p->ssm_groups : 1;
    const int dconv = p->ssm_conv ? p->ssm_conv : 4,
              interval = p->attn_interval ? p->attn_interval : 3;
    const int n_rot = p->n_rot < 0 ? 0 : p->n_rot ? p->n_rot : hd;
    const int rank = p->adapters_merged ? 0 : p->adapter_rank ? p->adapter_rank : 8;
    const int arank = p->adapters_merged ? 0 : p->attn_adapter_rank;
    int n_hyb = 0;
    for (int l = 0; l < p->n_layer; l++) n_hyb += (l + 1) % interval == 0;
    const int nb = p->n_shared_blocks ? p->n_shared_blocks : RP_MIN(2, n_hyb);
    if (nh < 1 || (2 * E) % nh || (p->head_dim && p->head_dim != hd) || nh % nkv ||
        d_inner % heads || heads % groups || n_rot > hd || n_rot % 2 || n_hyb < 1 || nb < 1 ||
        nb > n_hyb || (arank && nkv != nh))
        return rp_fail(RP_ERR_INVALID_ARG,
                       "synth zamba2: inconsistent shape (n_embd %d, heads %d/%d: head_dim must be "
                       "2 n_embd / heads; "
                       "Mamba2 heads %d in %d groups over %d channels; rotary %d; %d hybrid layers "
                       "(every %d-th) for "
                       "%d shared blocks; attention adapters need head_count_kv = head_count)",
                       E, nh, nkv, heads, groups, d_inner, n_rot, n_hyb, interval, nb);
    const int conv_dim = d_inner + 2 * groups * ds, proj = d_inner + conv_dim + heads;
    rp_synth_params q = *p;
    q.head_dim = hd;
    rp_status st =
        rp_synth_transformer_keys(s, &q, p->rope_base > 0 ? p->rope_base : 10000.0f, 1e-5f);
    rp_gguf_writer *w = rp_synth_writer(s);
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "zamba2." suffix), key)
    st = st ? st : rp_gguf_w_set_u32(w, KEY("rope.dimension_count"), (uint32_t)n_rot);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("ssm.conv_kernel"), (uint32_t)dconv);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("ssm.inner_size"), (uint32_t)d_inner);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("ssm.state_size"), (uint32_t)ds);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("ssm.time_step_rank"), (uint32_t)heads);
    st = st ? st : rp_gguf_w_set_u32(w, KEY("ssm.group_count"), (uint32_t)groups);
    st = st ? st : rp_gguf_w_set_f32(w, KEY("ssm.time_step_min"), 0.001f);
    if (rank) st = st ? st : rp_gguf_w_set_u32(w, KEY("ffn_gate_up_adapter_rank"), (uint32_t)rank);
    if (arank) st = st ? st : rp_gguf_w_set_u32(w, KEY("attn_adapter_rank"), (uint32_t)arank);
    int32_t *block = rp_malloc((size_t)p->n_layer * sizeof *block, "synth blocks");
    if (!block) return RP_ERR_NOMEM;
    for (int l = 0, v = 0; l < p->n_layer; l++) block[l] = (l + 1) % interval == 0 ? v++ % nb : -1;
    st = st ? st
            : rp_gguf_w_set_arr(w, KEY("shared_block"), RP_GGUF_INT32, block, (uint64_t)p->n_layer);
#undef KEY
    rp_dims d;
    rp_dims_init(&d, E, p->n_vocab, ff, nh, nkv, hd, hd);
    set_dims(&d, proj, conv_dim, dconv, heads, d_inner, rank, arank);
    st = st ? st
            : rp_synth_rows(s, &rp_io_tensors, false, -1, p->tied ? 0 : RP_IO_F_UNTIED, &d, NULL);
    rp_rng rng;
    rp_rng_seed(&rng, p->seed ^ 0x2a3b2u);
    bool stored[64] = {false}; /* blocks whose tensors are written (nb <= 64) */
    if (nb > 64)
        st = st ? st : rp_fail(RP_ERR_INVALID_ARG, "synth zamba2: at most 64 shared blocks");
    for (int l = 0; l < p->n_layer && !st; l++) {
        const int b = block[l];
        unsigned feat = RP_Z2_F_MAMBA;
        if (b >= 0) {
            feat |= RP_Z2_F_HYBRID | (stored[b] ? 0u : RP_Z2_F_STORES);
            feat |= rank ? RP_Z2_F_ADAPTERS : 0u;
            feat |= arank ? RP_Z2_F_ATTN_ADAPTERS : 0u;
            if (!rank || !stored[b]) feat |= RP_Z2_F_OWN_GU;
            stored[b] = true;
        }
        st = rp_synth_rows(s, &rp_zamba2_tensors, true, l, feat, &d, &rng);
    }
    free(block);
    return st;
}

extern const rp_conv_hooks rp_conv_zamba2; /* zamba2_convert.c */

const rp_arch rp_arch_zamba2 = {
    .name = "zamba2",
    .tensors = &rp_zamba2_tensors,
    .load = load_zamba2,
    .unload = unload_zamba2,
    .ctx_init = z2_ctx_init,
    .ctx_free = z2_ctx_free,
    .forward = z2_forward,
    .step_ranges = true,
    .merge_meta = merge_meta_zamba2,
    .synth = synth_zamba2,
    .hf_classes = (const char *const[]){"Zamba2ForCausalLM", NULL},
    .convert = &rp_conv_zamba2,
};
