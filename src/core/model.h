/* The model: hyperparameters, tensor views into the mapping (two slots may
 * point at one tensor), per-layer facts, and the vocabulary. Immutable after
 * load; shared by every context. */
#ifndef RP_MODEL_H
#define RP_MODEL_H

#include "format/gguf.h"
#include "kernels/ops.h"
#include "reprise.h"
#include "core/tensor.h"
#include "text/vocab.h"

#include <stdbool.h>
#include <stdint.h>

#define RP_MAX_LAYERS 1024

/* What a source layer is. The plan copies this from src to every step. */
typedef enum rp_layer_kind {
    RP_LAYER_ATTN = 0,      /* full causal attention */
    RP_LAYER_ATTN_SWA = 1,  /* sliding-window attention */
    RP_LAYER_RECURRENT = 2, /* recurrent mixer only (Mamba2, gated delta-net) */
    RP_LAYER_HYBRID = 3,    /* recurrent mixer plus a shared attention block (Zamba2) */
} rp_layer_kind;

const char *rp_layer_kind_name(int kind); /* "attn", "swa", "rec", "hyb" */

/* Per source layer facts every module may read (sizes of its state). */
typedef struct rp_layer_info {
    int kind;
    int n_head, n_head_kv;
    int head_dim_k, head_dim_v;
    int n_ff;
    int window;        /* SWA window (tokens a query sees, itself included) */
    int rope_set;      /* which rotary table the layer uses (0 = global) */
    size_t rec_floats; /* recurrent state floats per sequence (conv + ssm) */
    bool has_kv;       /* needs a KV slot per step */
} rp_layer_info;

/* Tensors of one layer. A superset across architectures; each architecture
 * binds the ones it has, by its tensor table (src/arch/tensors.h, which has
 * every GGUF name and shape). Pointers may alias across layers. Shapes are
 * GGUF's [ne0, ne1]: ne0 is contiguous, so a matrix is [inputs, outputs] and
 * row r holds output r's weights. E = n_embd, hk / hv = head_dim_k / _v of the
 * layer; the shared Zamba2 block reads 2E-wide inputs (its table says so). */
typedef struct rp_layer {
    const rp_tensor *attn_norm, *attn_norm_b; /* [E] */
    const rp_tensor *wq; /* [E, n_head hk] (gated attention: [E, 2 n_head hk], q then gate) */
    const rp_tensor *wk; /* [E, n_head_kv hk] */
    const rp_tensor *wv; /* [E, n_head_kv hv] */
    const rp_tensor *wo; /* [n_head hv, E] */
    const rp_tensor *bq, *bk, *bv, *bo;     /* [n_head hk], [n_head_kv hk], [n_head_kv hv], [E] */
    const rp_tensor *q_norm, *k_norm;       /* [hk] per-head RMSNorm */
    const rp_tensor *attn_post_norm;        /* [E] */
    const rp_tensor *ffn_norm, *ffn_norm_b; /* [E] */
    const rp_tensor *ffn_gate, *ffn_up;     /* [E, n_ff] */
    const rp_tensor *ffn_down;              /* [n_ff, E] */
    const rp_tensor *ffn_gate_up;           /* [E, 2 n_ff]: gate rows, then up rows */
    const rp_tensor *ffn_post_norm;         /* [E] */
    void *ext; /* architecture-specific tensors (recurrent mixers, adapters) */
} rp_layer;

typedef struct rp_hparams {
    int n_layer; /* blocks in the file, including NextN/MTP heads */
    int n_trunk; /* blocks a plan runs over */
    int n_embd;
    int n_vocab;
    int n_ctx_train;
    int n_head, n_head_kv, head_dim_k, head_dim_v, n_ff; /* defaults (per layer in info) */
    float eps;
    rp_rope_style rope_style;
    rp_rope_params rope[2]; /* [0] global, [1] local/SWA where it differs */
    int n_rope_sets;
    float attn_scale;    /* 0 = 1/sqrt(head_dim_k) */
    float attn_softcap;  /* 0 = none */
    float final_softcap; /* 0 = none */
    float embd_scale;    /* token embeddings are multiplied by this (1 = none) */
} rp_hparams;

typedef struct rp_arch rp_arch;

struct rp_model {
    char *path;
    char *name;
    rp_gguf *gguf;
    const rp_arch *arch;
    rp_hparams hp;
    rp_tensor *tensors; /* one view per GGUF tensor, in file order */
    uint64_t n_tensors;
    const rp_tensor *tok_embd;                    /* [E, n_vocab]: row t is token t's embedding */
    const rp_tensor *output_norm, *output_norm_b; /* [E] */
    const rp_tensor *output;                      /* [E, n_vocab] (tok_embd when tied) */
    rp_layer *layers;                             /* [n_layer] */
    rp_layer_info *info;                          /* [n_layer] */
    rp_vocab *vocab;
    void *arch_data; /* owned by the architecture */
    void **owned;    /* buffers the model owns (converted norms, ...) */
    int n_owned, cap_owned;
};

/* Builds a model over an opened GGUF (taking ownership of g, also on
 * failure). rp_model_load is rp_gguf_open + this. */
rp_status rp_model_from_gguf(rp_gguf *g, const char *path, const rp_model_params *params,
                             rp_model **out);

/* ---- helpers for architecture loaders ------------------------------------ */

/* Key "<arch>.<suffix>" into buf. */
const char *rp_arch_key(const rp_model *m, const char *suffix, char *buf, size_t n);
/* Typed hyperparameter reads with range checks; messages name the key. */
rp_status rp_hp_u32(const rp_model *m, const char *suffix, bool required, uint32_t def, uint32_t lo,
                    uint32_t hi, int *out);
rp_status rp_hp_f32(const rp_model *m, const char *suffix, bool required, float def, float lo,
                    float hi, float *out);
/* A per-layer u32/i32/bool array "<arch>.<suffix>" of n_layer entries, or a
 * scalar broadcast to all layers. found=false if absent (out untouched). */
rp_status rp_hp_layer_arr(const rp_model *m, const char *suffix, int *out, bool *found);

/* Bind a tensor: finds the name (printf format, e.g. "blk.%d.attn_q.weight"),
 * checks its shape (ne0/ne1 < 0 = any; n_dims 1 or 2), that 2-D weights can be
 * computed, and converts a non-F32 1-D tensor to an owned F32 copy. Missing
 * and !required -> *dst = NULL. */
rp_status rp_bind(rp_model *m, const rp_tensor **dst, bool required, int64_t ne0, int64_t ne1,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Keep a buffer alive as long as the model. */
bool rp_model_own(rp_model *m, void *p);

/* Generic transformer hyperparameters from "<arch>.*" keys (block_count,
 * embedding_length, feed_forward_length, head counts, key/value lengths, rope,
 * eps), validated; fills hp and every info[] with an attention layer. */
rp_status rp_load_transformer_hparams(rp_model *m);

#endif
