/* Deterministic random-weight models for tests, benchmarks and the demo.
 * The architecture-specific part (which tensors, which keys) is each
 * architecture's synth callback; this module provides the mechanism. */
#ifndef RP_SYNTH_H
#define RP_SYNTH_H

#include "format/gguf.h"
#include "reprise.h"
#include "base/util.h"

typedef struct rp_synth_params {
    const char *arch;
    int n_embd, n_layer, n_head, n_head_kv, n_ff;
    int head_dim; /* 0 = n_embd / n_head */
    int n_vocab;  /* used without a vocab file (built-in byte vocabulary) */
    int n_ctx;    /* context_length key */
    int type;     /* rp_type of 2-D weights */
    bool tied;    /* no output.weight: the embedding is the output matrix */
    uint64_t seed;
    const char *vocab_path; /* copy tokenizer.* keys from this GGUF */
    float rope_base;        /* 0 = architecture default */
    int window;             /* sliding window (architectures that have one), 0 = default */
    /* recurrent / hybrid shapes (qwen35 ...); 0 = the architecture's default */
    int ssm_conv;      /* conv kernel width */
    int ssm_state;     /* recurrent state size (width of each recurrent head) */
    int ssm_groups;    /* recurrent key heads */
    int ssm_heads;     /* recurrent value heads */
    int attn_interval; /* every n-th layer is full attention */
    int n_nextn;       /* NextN/MTP layers after the n_layer trunk layers; -1 = none */
    int n_rot;         /* rotary dimensions per head */
    /* Zamba2 (0 = the architecture's default) */
    int n_shared_blocks;   /* shared transformer blocks the hybrid layers cycle through */
    int adapter_rank;      /* rank of each visit's MLP adapter pair */
    int attn_adapter_rank; /* rank of each visit's q/k/v adapter pairs (0 = none) */
    bool adapters_merged;  /* the older merged form: a full ffn_up per hybrid layer, no pairs */
} rp_synth_params;

rp_synth_params rp_synth_default_params(void);

typedef struct rp_synth rp_synth;

/* For architecture callbacks: add a random 2-D weight [ne0 x ne1] in the
 * chosen type (scaled by 1/sqrt(ne0)), or, with ne1 == 0, a 1-D F32 norm
 * weight (values near 1) or bias (near 0, when bias is true). */
rp_status rp_synth_weight(rp_synth *s, int64_t ne0, int64_t ne1, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
rp_status rp_synth_norm(rp_synth *s, int64_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
rp_status rp_synth_bias(rp_synth *s, int64_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A tensor of explicit F32 values (copied). */
rp_status rp_synth_values(rp_synth *s, const float *v, int64_t ne0, int64_t ne1, const char *fmt,
                          ...) __attribute__((format(printf, 5, 6)));
/* A 1-D F32 tensor of n values drawn uniformly from [lo, hi) with rng (for
 * parameters that need a range, such as decay rates). */
rp_status rp_synth_uniform(rp_synth *s, rp_rng *rng, int64_t n, float lo, float hi, const char *fmt,
                           ...) __attribute__((format(printf, 6, 7)));
rp_gguf_writer *rp_synth_writer(rp_synth *s);
/* Standard transformer keys: block_count, embedding_length, feed_forward_length,
 * head counts, key/value length, rope, eps, context_length. */
rp_status rp_synth_transformer_keys(rp_synth *s, const rp_synth_params *p, float rope_base,
                                    float eps);

/* Writes the model atomically. */
rp_status rp_synth_write(const rp_synth_params *p, const char *path, rp_progress_fn progress,
                         void *user);

#endif
