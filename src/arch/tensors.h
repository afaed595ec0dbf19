/* Tensor tables: one row per tensor an architecture reads, the one place a
 * GGUF tensor name is written. A row says
 *   name      the GGUF name ("attn_q.weight"; per layer it is "blk.N.<name>"),
 *   shape     ne0 x ne1 in symbolic dimensions (rp_dim: n_embd, n_head *
 *             head_dim, n_ff, n_vocab, ... and the architecture's own),
 *             GGUF order: ne0 is contiguous, the input width of a matrix;
 *             ne1 = RP_DIM_NONE for a 1-D tensor,
 *   need      required, or optional (the file may leave it out), and which
 *             layers have it at all (feature bits the architecture sets per
 *             layer: qk_norm, recurrent, ...),
 *   category  what quantization mixtures call it (attn_v, ffn_down, output...),
 *   slot      where binding puts it (a field of rp_layer, of the
 *             architecture's own layer struct, or of rp_model),
 *   gen       how reprise synth makes random values for it.
 * Binding (rp_bind_layer_rows), synth (rp_synth_layer_rows), the converters
 * (rp_conv_rule points at rows), merge metadata and the quantizer's category
 * rules (rp_arch_tensor_category) all read these rows.
 *
 * A table may extend another (base): llama's is the dense block's, whose base
 * is the I/O table every architecture shares (token_embd, output_norm,
 * output). */
#ifndef RP_ARCH_TENSORS_H
#define RP_ARCH_TENSORS_H

#include "core/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Symbolic dimensions, resolved per layer into an rp_dims. */
typedef enum rp_dim {
    RP_DIM_NONE = 0, /* no such dimension: ne1 of a 1-D tensor */
    RP_DIM_ANY,      /* any size (not checked) */
    RP_DIM_EMBD,     /* n_embd */
    RP_DIM_EMBD2,    /* 2 n_embd */
    RP_DIM_VOCAB,    /* n_vocab */
    RP_DIM_FF,       /* n_ff of the layer */
    RP_DIM_FF2,      /* 2 n_ff: gate rows then up rows in one matrix */
    RP_DIM_Q,        /* n_head head_dim_k: the queries */
    RP_DIM_QG,       /* 2 n_head head_dim_k: each head's query, then its gate */
    RP_DIM_KV,       /* n_head_kv head_dim_k: the keys */
    RP_DIM_KV_V,     /* n_head_kv head_dim_v: the values */
    RP_DIM_O,        /* n_head head_dim_v: the attention output */
    RP_DIM_HEAD,     /* head_dim_k */
    RP_DIM_ROT2,     /* n_rot / 2: one entry per rotary pair */
    RP_DIM_ARCH,     /* RP_DIM_ARCH + i, i < 8: the architecture's own (its table names them) */
    RP_DIM_COUNT = RP_DIM_ARCH + 8
} rp_dim;

typedef struct rp_dims {
    int64_t v[RP_DIM_COUNT]; /* v[RP_DIM_NONE] = 0, v[RP_DIM_ANY] = -1 */
} rp_dims;

/* The generic dimensions of one layer (the architecture's own are 0 until
 * it sets them). */
void rp_dims_init(rp_dims *d, int64_t n_embd, int64_t n_vocab, int64_t n_ff, int64_t n_head,
                  int64_t n_head_kv, int64_t head_dim_k, int64_t head_dim_v);
/* ... of layer l of a model being loaded (m->hp, m->info[l]; n_vocab once
 * token_embd is bound, else any). */
void rp_dims_of_layer(rp_dims *d, const rp_model *m, int l);

/* What quantization mixtures call a tensor (llama.cpp's categories). */
typedef enum rp_tensor_cat {
    RP_TCAT_UNKNOWN = -1, /* not in the architecture's table (or no such architecture) */
    RP_TCAT_OTHER = 0,
    RP_TCAT_TOKEN_EMBD,
    RP_TCAT_OUTPUT,
    RP_TCAT_ATTN_Q,
    RP_TCAT_ATTN_K,
    RP_TCAT_ATTN_V, /* also a fused q|k|v: it gets attn_v's bits */
    RP_TCAT_ATTN_OUTPUT,
    RP_TCAT_FFN_UP,
    RP_TCAT_FFN_GATE,
    RP_TCAT_FFN_DOWN,
    RP_TCAT_NORM, /* a norm's weight (never quantized; mixtures treat it as other) */
} rp_tensor_cat;

const char *rp_tensor_cat_name(rp_tensor_cat c); /* "attn_v", ... ("?" when unknown) */

/* How reprise synth fills a row. AUTO: a 2-D weight is random in the model's
 * weight type, scaled by 1/sqrt(ne0); a 1-D norm (category NORM) is near 1,
 * any other 1-D tensor (a bias) near 0. The others draw F32 values from the
 * architecture's generator, in row order. */
typedef enum rp_tensor_gen {
    RP_GEN_AUTO = 0,
    RP_GEN_UNIFORM, /* uniform in [lo, hi) */
    RP_GEN_NORMAL,  /* normal / sqrt(ne0) */
} rp_tensor_gen;

/* Where binding stores a row: a const rp_tensor * at byte offset `off` of
 * rp_layer, of the architecture's own per-layer struct (rp_layer.ext), or of
 * rp_model. NONE: the caller binds it itself (rp_bind_row). */
enum { RP_SLOT_NONE = 0, RP_SLOT_LAYER, RP_SLOT_EXT, RP_SLOT_MODEL };

typedef struct rp_tensor_def { /* one row of a table */
    const char *name;          /* GGUF name; per layer the tensor is "blk.N.<name>" */
    bool layer;                /* one per layer (else one per model) */
    uint8_t ne0, ne1;          /* rp_dim */
    uint8_t cat;               /* rp_tensor_cat */
    uint8_t gen;               /* rp_tensor_gen */
    bool opt;                  /* the file may leave it out */
    uint16_t when; /* the layer features a layer has when it has this row (all of them) */
    uint16_t make; /* optional rows: synth makes it when the layer also has these (0: never) */
    uint8_t slot;  /* RP_SLOT_* */
    uint16_t off;
    float lo, hi; /* RP_GEN_UNIFORM */
} rp_tensor_def;

typedef struct rp_tensor_table {
    const char *what; /* "the dense decoder block" */
    const rp_tensor_def *rows;
    size_t n_rows;
    const struct rp_tensor_table *base; /* rows this table extends, or NULL */
} rp_tensor_table;

/* Row builders: RP_TROW per layer, RP_TROW_MODEL once per model; dims and
 * category without their prefixes (EMBD, ATTN_Q). */
#define RP_TROW(nm, d0, d1, c)                                                                     \
    .name = nm, .layer = true, .ne0 = RP_DIM_##d0, .ne1 = RP_DIM_##d1, .cat = RP_TCAT_##c
#define RP_TROW_MODEL(nm, d0, d1, c)                                                               \
    .name = nm, .layer = false, .ne0 = RP_DIM_##d0, .ne1 = RP_DIM_##d1, .cat = RP_TCAT_##c
#define RP_TAT_LAYER(field)     .slot = RP_SLOT_LAYER, .off = offsetof(rp_layer, field)
#define RP_TAT_EXT(type, field) .slot = RP_SLOT_EXT, .off = offsetof(type, field)
#define RP_TAT_MODEL(field)     .slot = RP_SLOT_MODEL, .off = offsetof(rp_model, field)

/* The I/O tensors every architecture has (the base of every table). */
enum {
    RP_IO_TOKEN_EMBD,
    RP_IO_OUTPUT_NORM,
    RP_IO_OUTPUT_NORM_B,
    RP_IO_OUTPUT,
    RP_IO_N_ROWS,
};
enum { RP_IO_F_UNTIED = 1 }; /* synth: the model has its own output matrix */
extern const rp_tensor_def rp_io_rows[RP_IO_N_ROWS];
extern const rp_tensor_table rp_io_tensors;

/* The GGUF name of row r (of layer l when per layer) in buf. */
const char *rp_tensor_name(const rp_tensor_def *r, int l, char *buf, size_t n);
/* The row of t (or of its bases) named `name` ("blk.N.<row>" for a layer
 * row), NULL when none. */
const rp_tensor_def *rp_tensor_find(const rp_tensor_table *t, const char *name);

/* ---- binding (architecture loaders) ---------------------------------------- */

/* Binds row r of layer l (ignored for a model row) into *dst with rp_bind:
 * shape from d, missing allowed unless required. */
rp_status rp_bind_row(rp_model *m, const rp_tensor **dst, const rp_tensor_def *r, int l,
                      const rp_dims *d, bool required);
/* The slot of row r of layer l (in m->layers[l], ext, or m); r has one. */
const rp_tensor **rp_tensor_slot(rp_model *m, const rp_tensor_def *r, int l, void *ext);
/* Binds, in table order, every per-layer row of t (not of its base) that
 * layer l has (rows whose `when` bits are all in feat) and that has a slot:
 * into m->layers[l] or ext; required unless the row is optional. */
rp_status rp_bind_layer_rows(rp_model *m, const rp_tensor_table *t, int l, unsigned feat,
                             const rp_dims *d, void *ext);
/* Token embedding, output norm, output (tied to the embedding when absent),
 * by the I/O rows; sets hp.n_vocab from the embedding. */
rp_status rp_bind_io(rp_model *m);

/* ---- synth ------------------------------------------------------------------ */

typedef struct rp_synth rp_synth;
typedef struct rp_rng rp_rng;

/* Writes row r (of layer l) with random values (see rp_tensor_gen; rng for
 * UNIFORM and NORMAL). */
rp_status rp_synth_row(rp_synth *s, const rp_tensor_def *r, int l, const rp_dims *d, rp_rng *rng);
/* Every row of t (not of its base) of the given scope that synth makes under
 * feat, in table order: per-layer rows of layer l (layer true), or the model
 * rows (layer false, l ignored). A row is made when its `when` bits are in
 * feat and it is required, or optional with its `make` bits in feat. */
rp_status rp_synth_rows(rp_synth *s, const rp_tensor_table *t, bool layer, int l, unsigned feat,
                        const rp_dims *d, rp_rng *rng);

/* ---- quantization categories ------------------------------------------------ */

/* The category of tensor `name` ("blk.3.attn_v.weight") in architecture
 * `arch` (general.architecture), from the architecture's table;
 * RP_TCAT_UNKNOWN when reprise does not know the architecture or the table
 * has no such tensor (a caller then uses its own name rules). */
rp_tensor_cat rp_arch_tensor_category(const char *arch, const char *name);

#endif
