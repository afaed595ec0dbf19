/* reprise convert: Hugging Face checkpoints (config.json, safetensors,
 * tokenizer.json) to GGUF files with the key names, tensor names and layouts
 * llama.cpp's convert_hf_to_gguf.py writes, so the files load in llama.cpp as
 * well as in reprise.
 *
 * The mechanism (convert.c) is shared and names no architecture: it finds the
 * one whose rp_arch.hf_classes lists config.json's class (src/arch/registry.c)
 * and runs its rp_conv_hooks, which live beside it in src/arch/<name>_convert.c:
 *   params   config.json -> "<arch>.*" hyperparameter keys (and cv->hp),
 *   tensors  checkpoint tensors -> output tensors: a name, a shape and a row
 *            producer (a plain copy, the llama Q/K permutation, Gemma's +1 on
 *            RMSNorm weights, a slice, a sum of several inputs, generated
 *            values). A checkpoint tensor may feed several outputs, several
 *            checkpoint tensors one output, and a tensor shared by several
 *            layers is simply planned once (the loader aliases it). Every
 *            checkpoint tensor must be used or explicitly dropped, so nothing
 *            is lost silently.
 *   vocab    optional: how the tokenizer is sized (rp_conv_vocab),
 *   shapes   optional: the checkpoint tensors config.json implies, so
 *            --dry-run works on a config.json alone.
 * Planning reads no tensor data: --dry-run is the plan printed. Writing streams
 * each output in row chunks through its producer, converts the rows to the
 * output type and hands them to the GGUF writer (temporary file + rename). */
#ifndef RP_CONVERT_H
#define RP_CONVERT_H

#include "arch/tensors.h"
#include "format/gguf.h"
#include "reprise.h"
#include "reprise_tools.h"
#include "format/safetensors.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- the conversion, as the tool drives it: public (reprise_tools.h) ------- */

typedef struct rp_conv_out rp_conv_out;
const rp_conv_out *rp_conv_out_at(const rp_conv *cv, size_t i);

/* The tokenizer on its own: DIR/tokenizer.json (+ tokenizer_config.json and
 * chat_template.jinja/.json; special token ids also from config, which may be
 * NULL) as tokenizer.* keys into w. pad_to > 0 pads the token list with
 * [PADn] entries to that many tokens (llama.cpp pads to config.json's
 * vocab_size). add_space_prefix: -1 = from tokenizer.json. pre: NULL =
 * recognise the pre-tokenizer. *n_tokens receives the token count. */
rp_status rp_convert_tokenizer(const char *dir, const json_t *config, int64_t pad_to,
                               int add_space_prefix, const char *pre, rp_gguf_writer *w,
                               int64_t *n_tokens);

/* ---- for architecture converters ------------------------------------------- */

/* Produces rows [row0, row0 + n_rows) of an output as F32 (a row is ne[0]
 * values; rows run over ne[1] * ne[2] * ne[3]). */
typedef rp_status (*rp_conv_make_fn)(rp_conv *cv, const rp_conv_out *o, int64_t row0,
                                     int64_t n_rows, float *dst);

#define RP_CONV_MAX_SRC 4

struct rp_conv_out {
    char *name;
    uint32_t n_dims;
    int64_t ne[4];  /* GGUF order: ne[0] is contiguous (the checkpoint's last dimension) */
    int type;       /* chosen when the plan is complete */
    int force_type; /* -1: llama.cpp's rules (1-D and *_norm.weight F32, biases F32, the rest
                     * the outtype, Q8_0 falling back to F16 on rows it cannot block) */
    const rp_st_tensor *src[RP_CONV_MAX_SRC];
    int n_src;
    rp_conv_make_fn make; /* NULL: src[0]'s rows as they are */
    int64_t iarg[4];      /* producer parameters */
    float farg[4];
    const float *values; /* generated values (owned by the converter), for rp_conv_add_values */
    const char *note;    /* what the producer does, for the dry-run table (static string) */
};

/* Hyperparameters the tensor mapping checks shapes against (set by params). */
typedef struct rp_conv_hparams {
    int64_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab;
    bool tied; /* the embedding is the output matrix: no output.weight */
} rp_conv_hparams;

/* An option an architecture's converter takes (reprise convert --arch-opt). */
typedef struct rp_conv_opt {
    const char *key;
    const char *help;
} rp_conv_opt;

/* What an architecture's converter does (rp_arch.convert; the classes it
 * converts from are rp_arch.hf_classes). */
typedef struct rp_conv_hooks {
    rp_status (*params)(rp_conv *cv);
    rp_status (*vocab)(rp_conv *cv); /* NULL: rp_conv_vocab(cv, true, -1) */
    rp_status (*tensors)(rp_conv *cv);
    rp_status (*shapes)(rp_conv *cv, rp_st *st); /* optional */
    const rp_conv_opt *opts;                     /* its options, {0}-terminated; NULL = none */
} rp_conv_hooks;

/* rp_conv_arch_list (the classes reprise converts, for messages) is public. */

/* An architecture option of params.arch_opts: its value ("" for a bare key),
 * or NULL when not given (the converter declared the key: others are refused
 * when the conversion is opened). */
const char *rp_conv_opt_get(const rp_conv *cv, const char *key);
bool rp_conv_opt_flag(const rp_conv *cv, const char *key);

/* Converter state. Architecture files use hp, st, w and arch_data; the rest
 * belongs to the mechanism. */
struct rp_conv {
    rp_convert_params p;
    char *dir;
    const struct rp_arch *arch; /* the architecture written (arch->name) */
    const rp_conv_hooks *hooks; /* its converter */
    const char *hf_arch;        /* the config.json class it converts from */
    json_t *config;             /* config.json ("text_config" merged over the top level) */
    rp_conv_hparams hp;
    rp_st *st;  /* checkpoint tensors (shape-only when planned from config.json) */
    bool *used; /* [n st tensors] */
    rp_gguf_writer *w;
    rp_conv_out *outs;
    size_t n_out, cap_out;
    int64_t n_tokens; /* tokens the vocabulary wrote */
    int outtype;      /* resolved */
    bool from_shapes;
    float **owned; /* generated value buffers */
    size_t n_owned;
    float *chunk; /* F32 rows while writing */
    size_t chunk_floats;
    void *arch_data; /* an architecture's own state (freed with free()) */
    /* reprise convert --lora: the PEFT adapter's layers (layer_replication:
     * the replicated count) and its target modules' rank */
    bool lora;
    int64_t lora_layers, lora_rank;
    char **opt; /* [2 n_opt] params.arch_opts as key, value ("" for a bare key) */
    size_t n_opt;
};

/* config.json. A path is dotted ("rope_scaling.factor"); JSON null counts as
 * absent. Range and type errors name the key. */
const json_t *rp_conv_cfg(const rp_conv *cv, const char *path);
rp_status rp_conv_cfg_int(rp_conv *cv, const char *path, bool required, int64_t def, int64_t lo,
                          int64_t hi, int64_t *out);
rp_status rp_conv_cfg_num(rp_conv *cv, const char *path, bool required, double def, double *out);
rp_status rp_conv_cfg_bool(rp_conv *cv, const char *path, bool def, bool *out);
rp_status rp_conv_cfg_str(rp_conv *cv, const char *path, const char *def, const char **out);

/* "<arch>.<suffix>" keys. */
rp_status rp_conv_set_u32(rp_conv *cv, const char *suffix, uint32_t v);
rp_status rp_conv_set_f32(rp_conv *cv, const char *suffix, float v);
rp_status rp_conv_set_bool(rp_conv *cv, const char *suffix, bool v);
rp_status rp_conv_set_str(rp_conv *cv, const char *suffix, const char *v);
rp_status rp_conv_set_arr(rp_conv *cv, const char *suffix, int elem_type, const void *raw,
                          uint64_t n);

/* RoPE parameters from either config.json layout: transformers 5's
 * rope_parameters (flat, or per layer type {"full_attention": {...},
 * "sliding_attention": {...}}) or the older rope_theta + rope_scaling (+
 * rope_local_base_freq for sliding layers). layer_type: NULL or
 * "full_attention" / "sliding_attention". */
typedef struct rp_conv_rope {
    const char *type;  /* "default", "linear", "yarn", "llama3", ... */
    double theta;      /* 0 when config.json has none */
    const json_t *obj; /* the parameter object (factor, ...), or NULL */
} rp_conv_rope;
rp_status rp_conv_rope_params(rp_conv *cv, const char *layer_type, rp_conv_rope *out);
/* A number of the rope parameter object (rope_scaling.factor, ...). */
rp_status rp_conv_rope_num(rp_conv *cv, const rp_conv_rope *r, const char *key, bool required,
                           double def, double *out);

/* The keys every decoder-only transformer writes, as llama.cpp's TextModel
 * does: block_count, context_length, embedding_length, feed_forward_length,
 * attention.head_count(_kv), rope.freq_base and linear/yarn scaling,
 * attention.layer_norm_rms_epsilon, attention.key_length/value_length when
 * config.json has head_dim. Fills cv->hp (tied from tie_word_embeddings, whose
 * default is tied_default). */
rp_status rp_conv_decoder_params(rp_conv *cv, bool tied_default);

/* Tensor planning. */
rp_conv_out *rp_conv_add(rp_conv *cv, const char *name,
                         const rp_st_tensor *src); /* NULL on error */
rp_conv_out *rp_conv_add_values(rp_conv *cv, const char *name, uint32_t n_dims, const int64_t *ne,
                                float *values /* taken */);
rp_status rp_conv_drop(rp_conv *cv, const rp_st_tensor *t); /* used on purpose, no output */
rp_conv_out *rp_conv_find_out(rp_conv *cv, const char *name);
bool rp_conv_is_used(const rp_conv *cv, const rp_st_tensor *t);

enum { RP_RULE_REQUIRED = 1 }; /* the .weight must exist (in every layer for '#' rules) */

/* "<hf>.weight" / "<hf>.bias" -> the GGUF tensor of row `gguf` of the
 * architecture's tensor table (a ".weight" row; a ".bias" goes to the same
 * name with ".bias"). '#' in hf stands for the layer number (< n_layer), which
 * a per-layer row takes. The .weight's expected shape is the row's (rp_dim
 * resolved from cv->hp by rp_conv_dim); a .bias is [ne1], or [ne0] for a 1-D
 * row. */
typedef struct rp_conv_rule {
    const char *hf;
    const rp_tensor_def *gguf;
    unsigned flags;
    rp_conv_make_fn make; /* NULL = copy */
    const char *note;
} rp_conv_rule;

/* convert_lora.c: adapter_config.json of p.lora_dir -> the adapter keys
 * (general.type, adapter.type, adapter.lora.alpha, adapter.reprise.layer_map),
 * cv->lora_layers and lora_rank; and the filter that keeps only the LoRA
 * outputs once the architecture's tensor hook has run. */
rp_status rp_conv_lora_keys(rp_conv *cv);
void rp_conv_lora_keep_pairs(rp_conv *cv);

/* Maps every unused checkpoint tensor that matches a rule; checks shapes and
 * required tensors. With --lora it maps the PEFT pairs instead:
 * "base_model.model.<hf>.lora_A.weight" [r, n_in] -> "<gguf>.lora_a",
 * ".lora_B.weight" [n_out, r] -> "<gguf>.lora_b" through the rule's row
 * producer (the Q/K permutation acts on B's output rows). */
rp_status rp_conv_map(rp_conv *cv, const rp_conv_rule *rules, size_t n_rules);
/* The checkpoint tensors the rules imply (weights of REQUIRED rules), for an
 * architecture's shapes callback; dtype from config.json's dtype/torch_dtype. */
rp_status rp_conv_rule_shapes(rp_conv *cv, rp_st *st, const rp_conv_rule *rules, size_t n_rules);
/* A table dimension (rp_dim) from cv->hp: -1 for one the converter does not
 * know (any), 0 for RP_DIM_NONE. */
int64_t rp_conv_dim(const rp_conv *cv, int dim);
/* Drops lm_head.weight of a tied model; requires it when the model is not tied. */
rp_status rp_conv_output_head(rp_conv *cv);

/* Producers. */
rp_status rp_conv_make_copy(rp_conv *cv, const rp_conv_out *o, int64_t row0, int64_t n_rows,
                            float *dst);
rp_status rp_conv_make_values(rp_conv *cv, const rp_conv_out *o, int64_t row0, int64_t n_rows,
                              float *dst);
/* Rows of a checkpoint tensor (a row: its last dimension; a 0-/1-D tensor is
 * one row). */
int64_t rp_conv_src_row_len(const rp_st_tensor *t);
rp_status rp_conv_src_rows(const rp_st_tensor *t, int64_t row0, int64_t n_rows, float *dst);

/* The vocabulary of cv's directory (see rp_convert_tokenizer): pad_to_config
 * pads to hp.n_vocab. Sets cv->n_tokens. */
rp_status rp_conv_vocab(rp_conv *cv, bool pad_to_config, int add_space_prefix);

#endif
