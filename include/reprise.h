/*
 * reprise — a C11 inference engine for GGUF language models in which the layers
 * a model runs are a plan over weights stored once.
 *
 * Public C API: load a model, build a context (a layer plan over the model plus
 * its state), decode batches, read logits, tokenize, sample. The tool-level
 * services the command-line tools are built on (GGUF inspection, quantize,
 * convert, merge, perplexity, scans, plan files, chat templates, speculative
 * decoding, benchmarks) are in reprise_tools.h, over this header.
 *
 * Errors. Every handle is opaque. Every function that can fail returns an
 * rp_status (RP_OK = 0) or, for the few constructors that say so, NULL; the
 * message of the last failure on the calling thread is rp_last_error(). Each
 * function lists the statuses it returns; RP_ERR_NOMEM (an allocation failed)
 * and RP_ERR_INTERNAL (a bug) can come from any function that allocates, and
 * are not repeated everywhere. A failing call leaves its outputs NULL / zero
 * and changes nothing it does not say it changes. The library never prints
 * and never exits: diagnostics reach the caller through the log callback.
 *
 * Thread safety: a model is immutable after load and may be shared by any
 * number of contexts and threads. A context is used by one thread at a time
 * (rp_context_set_abort's callback excepted, which another thread may cause
 * to return true). Functions without a handle (rp_status_str, rp_type_*,
 * rp_arch_list, rp_default_threads) may be called from any thread at any time.
 */
#ifndef REPRISE_H
#define REPRISE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RP_VERSION "0.1.0"

/* Export control. libreprise.so is built with -fvisibility=hidden: only what
 * reprise.h and reprise_tools.h declare between RP_API_BEGIN and RP_API_END
 * is exported (tests/cli/install.sh checks the two sets are equal). RP_API
 * marks a single declaration elsewhere. */
#if defined(__GNUC__)
#define RP_API       __attribute__((visibility("default")))
#define RP_API_BEGIN _Pragma("GCC visibility push(default)")
#define RP_API_END   _Pragma("GCC visibility pop")
#else
#define RP_API
#define RP_API_BEGIN
#define RP_API_END
#endif

RP_API_BEGIN

/* ---- status and errors --------------------------------------------------- */

typedef enum rp_status {
    RP_OK = 0,
    RP_ERR_INVALID_ARG = 1,  /* an argument is malformed or out of range */
    RP_ERR_IO = 2,           /* open, read, write, map or rename failed */
    RP_ERR_FORMAT = 3,       /* a file is malformed (the message says where) */
    RP_ERR_UNSUPPORTED = 4,  /* well-formed, but not something reprise runs */
    RP_ERR_NOMEM = 5,        /* an allocation failed */
    RP_ERR_PLAN = 6,         /* a layer spec does not fit this model */
    RP_ERR_CONTEXT_FULL = 7, /* no room left in the KV cache for the batch */
    RP_ERR_CANCELLED = 8,    /* a progress or abort callback asked to stop */
    RP_ERR_INTERNAL = 9,     /* a broken invariant: a bug in reprise */
} rp_status;

/* Short fixed name of a status ("format error", ...). Never NULL. */
const char *rp_status_str(rp_status s);

/* Message of the most recent failing call on this thread (thread-local; empty
 * string when none). Valid until the next failing call on the same thread. */
const char *rp_last_error(void);

/* RP_VERSION of the library itself (a binding loading libreprise.so checks
 * it against the headers it was written for). Static text. */
const char *rp_version(void);
/* Frees what a function returned malloc'ed to the caller (rp_tokenize's ids,
 * rendered templates, plan-file JSON, ...) with the library's own free(), for
 * bindings (Python's ctypes) that cannot call it. NULL is fine. */
void rp_free(void *p);

/* ---- logging and progress ------------------------------------------------ */

typedef enum rp_log_level {
    RP_LOG_ERROR = 0,
    RP_LOG_WARN = 1,
    RP_LOG_INFO = 2,
    RP_LOG_DEBUG = 3,
} rp_log_level;

/* Receives every diagnostic the library produces; msg has no trailing newline.
 * Without a callback the library stays silent. Process-wide.
 *
 * Thread safety: rp_log_set may be called at any time from any thread; the
 * callback and its user pointer are swapped together, and a message being
 * delivered while they change goes to the old pair or the new one, never a
 * mix. The callback itself is called from whichever thread logs (a loader, a
 * decode, a server's engine), possibly from several at once: it must be
 * thread-safe, and the user pointer must stay valid until it is replaced. */
typedef void (*rp_log_fn)(rp_log_level level, const char *msg, void *user);
void rp_log_set(rp_log_fn fn, void *user);

/* Long work reports progress in [0,1]; returning false cancels it (the call then
 * returns RP_ERR_CANCELLED and leaves nothing half-done behind). */
typedef bool (*rp_progress_fn)(float progress, void *user);

/* ---- tensor types (ggml / GGUF numbering) -------------------------------- */

typedef enum rp_type {
    RP_TYPE_F32 = 0,
    RP_TYPE_F16 = 1,
    RP_TYPE_Q4_0 = 2,
    RP_TYPE_Q4_1 = 3,
    RP_TYPE_Q5_0 = 6,
    RP_TYPE_Q5_1 = 7,
    RP_TYPE_Q8_0 = 8,
    RP_TYPE_Q8_1 = 9,
    RP_TYPE_Q2_K = 10,
    RP_TYPE_Q3_K = 11,
    RP_TYPE_Q4_K = 12,
    RP_TYPE_Q5_K = 13,
    RP_TYPE_Q6_K = 14,
    RP_TYPE_Q8_K = 15,
    RP_TYPE_IQ2_XXS = 16,
    RP_TYPE_IQ2_XS = 17,
    RP_TYPE_IQ3_XXS = 18,
    RP_TYPE_IQ1_S = 19,
    RP_TYPE_IQ4_NL = 20,
    RP_TYPE_IQ3_S = 21,
    RP_TYPE_IQ2_S = 22,
    RP_TYPE_IQ4_XS = 23,
    RP_TYPE_I8 = 24,
    RP_TYPE_I16 = 25,
    RP_TYPE_I32 = 26,
    RP_TYPE_I64 = 27,
    RP_TYPE_F64 = 28,
    RP_TYPE_IQ1_M = 29,
    RP_TYPE_BF16 = 30,
    RP_TYPE_TQ1_0 = 34,
    RP_TYPE_TQ2_0 = 35,
    RP_TYPE_MXFP4 = 39,
    RP_TYPE_COUNT = 40,
} rp_type;

/* Name as llama.cpp spells it ("q4_K", "f16"); NULL for an unknown id. */
const char *rp_type_name(int type);
/* Parse a type name, case-insensitively ("f16", "Q8_0"); -1 if unknown. */
int rp_type_from_name(const char *name);

/* What reprise knows and can do with a type. */
typedef struct rp_type_info {
    const char *name;   /* as rp_type_name */
    int block_size;     /* elements per block */
    size_t block_bytes; /* bytes per block */
    bool quantized;
    bool can_read;    /* reprise dequantizes it (a tensor of this type can be read as floats) */
    bool can_write;   /* reprise has a quantizer for it (it can write tensors of this type) */
    bool can_compute; /* reprise has matmul kernels for 2-D weights of this type */
} rp_type_info;

/* Fills *out and returns true for a known type id; false (and *out zeroed) for
 * an unknown one, retired ids included. */
bool rp_type_get_info(int type, rp_type_info *out);
/* Bytes of one row of n elements; 0 when n is not a multiple of the type's
 * block size or the type is unknown. */
size_t rp_type_row_bytes(int type, int64_t n);

/* ---- metadata value types (GGUF numbering) -------------------------------- */

typedef enum rp_gguf_type {
    RP_GGUF_UINT8 = 0,
    RP_GGUF_INT8 = 1,
    RP_GGUF_UINT16 = 2,
    RP_GGUF_INT16 = 3,
    RP_GGUF_UINT32 = 4,
    RP_GGUF_INT32 = 5,
    RP_GGUF_FLOAT32 = 6,
    RP_GGUF_BOOL = 7,
    RP_GGUF_STRING = 8,
    RP_GGUF_ARRAY = 9,
    RP_GGUF_UINT64 = 10,
    RP_GGUF_INT64 = 11,
    RP_GGUF_FLOAT64 = 12,
    RP_GGUF_TYPE_COUNT = 13,
} rp_gguf_type;

/* "u8", "str", "arr", ...; "?" for an unknown id. */
const char *rp_gguf_type_name(int type);

/* ---- threads ---------------------------------------------------------------- */

/* What n_threads = 0 means everywhere: the number of physical cores (>= 1). */
int rp_default_threads(void);

/* ---- model --------------------------------------------------------------- */

typedef struct rp_model rp_model;
typedef struct rp_vocab rp_vocab;

typedef struct rp_model_params {
    bool vocab_only;         /* load only the tokenizer */
    rp_progress_fn progress; /* optional */
    void *progress_user;
    /* Read the whole file into memory the process owns (anonymous pages at the
     * mapping's address) instead of keeping it mapped: the file may then be
     * truncated or rewritten in place (cp new.gguf model.gguf) under a running
     * process without a SIGBUS. Costs the file's size in anonymous memory
     * (with a mapping, the same pages are file-backed and reclaimable). */
    bool private_copy;
} rp_model_params;

rp_model_params rp_model_default_params(void);

/* Maps the file and binds its tensors in place (no copies). params may be NULL
 * (the defaults). On failure *out is NULL.
 *   RP_ERR_INVALID_ARG  no path
 *   RP_ERR_IO           the file cannot be opened or mapped
 *   RP_ERR_FORMAT       not GGUF, or a key / tensor the architecture needs is
 *                       malformed or missing (the message names it and its offset)
 *   RP_ERR_UNSUPPORTED  an architecture or tensor type reprise does not run
 *   RP_ERR_CANCELLED    the progress callback returned false */
rp_status rp_model_load(const char *path, const rp_model_params *params, rp_model **out);
/* The same from a GGUF image in memory, which the caller keeps alive and
 * unchanged until rp_model_free (an embedded model). name stands for the path
 * in messages and rp_model_path (NULL: "<memory>"). Statuses as rp_model_load. */
rp_status rp_model_load_mem(const void *data, size_t size, const char *name,
                            const rp_model_params *params, rp_model **out);
void rp_model_free(rp_model *model); /* NULL is fine */

const char *rp_model_arch(const rp_model *model);  /* "llama", "qwen3", ... ("" vocab_only) */
const char *rp_model_name(const rp_model *model);  /* general.name or file name */
const char *rp_model_path(const rp_model *model);  /* as given to the loader */
int rp_model_n_layer(const rp_model *model);       /* trunk layers a plan may use */
int rp_model_n_layer_total(const rp_model *model); /* incl. NextN/MTP head layers */
int rp_model_n_embd(const rp_model *model);
int rp_model_n_ctx_train(const rp_model *model);
uint64_t rp_model_n_params(const rp_model *model);
uint64_t rp_model_weight_bytes(const rp_model *model); /* distinct bytes mapped */
/* The type holding most bytes of the 2-D weights; *mixed (may be NULL) tells
 * whether 2-D weights of other types are present too. -1 without weights. */
int rp_model_weight_type(const rp_model *model, bool *mixed);
/* One-line description: "NAME (llama), 5 layers, n_embd 64, n_vocab 512,
 * 0.29M params, f32, 1.12 MiB". Returns the length the whole text needs (like
 * snprintf). */
int rp_model_desc(const rp_model *model, char *buf, size_t size);
const rp_vocab *rp_model_vocab(const rp_model *model);

/* Metadata. A string value by key (e.g. "tokenizer.chat_template"), NULL if
 * absent or not a string. */
const char *rp_model_meta_str(const rp_model *model, const char *key);
/* Every key of the file, in file order: i in [0, rp_model_meta_count). */
int64_t rp_model_meta_count(const rp_model *model);
/* Key i; NULL when i is out of range. */
const char *rp_model_meta_key(const rp_model *model, int64_t i);
/* Type of value i (an rp_gguf_type; RP_GGUF_ARRAY for arrays, whose element
 * type *elem receives, may be NULL); -1 when i is out of range. */
int rp_model_meta_type(const rp_model *model, int64_t i, int *elem);
/* Value i as text: a string as it is, a number or bool as C prints it
 * ("%.9g" for floats, "true"/"false"), an array whole as "[a, b, ...]" with
 * its strings quoted and escaped. Returns the length the whole text needs (like snprintf; buf may
 * be NULL with size 0), or -1 when i is out of range. */
int rp_model_meta_val_str(const rp_model *model, int64_t i, char *buf, size_t size);

/* Comma-separated names of the architectures this build runs ("llama, qwen2,
 * ..."). Static text: the same pointer on every call, safe from any thread
 * at any time, never freed. */
const char *rp_arch_list(void);

/* ---- context ------------------------------------------------------------- */

typedef struct rp_context rp_context;

/* A LoRA adapter (llama.cpp's GGUF adapter format: general.type = adapter,
 * adapter.type = lora, adapter.lora.alpha, tensors "<base name>.lora_a" /
 * ".lora_b"; reprise convert --lora writes one from a PEFT directory). It is
 * applied as y += scale * alpha/rank * B (A x) on every plan step that runs
 * a layer it has tensors for; the base weights are not touched (any type). */
typedef struct rp_lora_params {
    const char *path;
    float scale; /* llama.cpp's --lora-scaled SCALE (--lora: 1) */
} rp_lora_params;

typedef struct rp_context_params {
    uint32_t n_ctx;     /* positions per sequence; 0 = min(training context, 4096) */
    uint32_t n_batch;   /* tokens computed together in one pass; 0 = 512 */
    uint32_t n_seq_max; /* independent sequences (server slots); 0 = 1 */
    int n_threads;      /* 0 = number of physical cores */
    int type_k;         /* KV cache type: F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL */
    int type_v;
    /* Layer plan. At most one of these may be set (NULL or "" = identity).
     *   repeat_layers: RYS blocks "i,j;k,l" (half-open source ranges run twice)
     *   layer_map:     ExLlamaV3 ranges "0..15,11..31" (inclusive) or an explicit
     *                  list "0,1,2,2,3" */
    const char *repeat_layers;
    const char *layer_map;
    /* Keep the final hidden state (before the output norm) of every output row,
     * readable through rp_get_hidden (speculative drafting, embeddings). */
    bool keep_hidden;
    /* Where the forward runs: NULL, "" or "cpu" = the CPU; "vulkan0", ... a
     * Vulkan device (rp_device_list). On a device every plan step runs there
     * or the context is refused; there is no CPU fallback. */
    const char *device;
    /* Memory bound: the state (KV, recurrent) and scratch the context would
     * allocate are estimated first and refused over mem_limit bytes (0 = the
     * memory the system has available, MemAvailable). */
    uint64_t mem_limit;
    /* Only the plan and its figures (rp_context_plan_report, state bytes):
     * no state, scratch or threads are allocated; rp_decode refuses it. */
    bool plan_only;
    /* LoRA adapters on every step (n_lora of them; the array and its paths
     * are read during rp_context_new only). An adapter converted from a PEFT
     * layer_replication checkpoint carries its own layer map: it becomes the
     * plan when no plan is given, and must equal the plan otherwise. Per-step
     * adapters and residual scales are part of the plan spec ('@' modifiers). */
    const rp_lora_params *lora;
    int n_lora;
} rp_context_params;

rp_context_params rp_context_default_params(void);

/* Whether type can be a KV cache type (rp_context_params.type_k / type_v):
 * f32, f16, or llama.cpp's q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl blocks (their
 * ggml layouts; quantized caches need head widths that are multiples of 32).
 * rp_kv_type_list: their names, comma-separated (static text). */
bool rp_kv_type_supported(int type);
const char *rp_kv_type_list(void);

/* Builds the plan (validated before anything is allocated), the KV/recurrent
 * state and the thread pool. The model must outlive the context. params may
 * be NULL (the defaults). On failure *out is NULL.
 *   RP_ERR_INVALID_ARG  a model loaded vocab_only, a cache type that is
 *                       not rp_kv_type_supported or a quantized one on
 *                       heads that are not a multiple of 32 wide, n_ctx or
 *                       n_seq_max too large, both plan specs
 *   RP_ERR_PLAN         the spec does not fit the model (the message names the
 *                       block or item and why), or a layer_replication
 *                       adapter's layer map differs from the plan
 *   RP_ERR_IO           an adapter file cannot be opened
 *   RP_ERR_FORMAT       an adapter is not a LoRA GGUF for this model (wrong
 *                       architecture, a tensor without its pair or base, a
 *                       shape that does not fit; the message names it)
 *   RP_ERR_UNSUPPORTED  adapters or step deltas on an architecture whose
 *                       forward does not apply them, or a LoRA on a tensor
 *                       other than the layers' attention and FFN matrices;
 *                       params.device names a device the model cannot run on:
 *                       an architecture without a device forward, a weight
 *                       type without device kernels (the message names the
 *                       tensor and type), a cache type the device lacks; or
 *                       no Vulkan loader / device (the message names the
 *                       package to install)
 *   RP_ERR_NOMEM        the state and scratch estimated exceed mem_limit (or the
 *                       available memory): the message gives both figures;
 *                       nothing was allocated */
rp_status rp_context_new(const rp_model *model, const rp_context_params *params, rp_context **out);
void rp_context_free(rp_context *ctx); /* NULL is fine */

/* Lets ctx run on donor's thread pool instead of its own (freed now), so
 * several contexts decoded one after the other from one thread (a server's
 * models) keep one set of worker threads. They must never decode at the same
 * time, and donor must outlive ctx.
 *   RP_ERR_INVALID_ARG  the two have different thread counts (nothing changes) */
rp_status rp_context_share_pool(rp_context *ctx, rp_context *donor);

const rp_model *rp_context_model(const rp_context *ctx);
uint32_t rp_context_n_ctx(const rp_context *ctx);
uint32_t rp_context_n_seq(const rp_context *ctx);
int rp_context_n_threads(const rp_context *ctx);

/* The plan. */
/* Number of steps in the plan (n_eff). */
int rp_context_n_eff(const rp_context *ctx);
/* Source layer of step eff (0 <= eff < n_eff); -1 outside. */
int rp_context_step_src(const rp_context *ctx, int eff);
/* Whether step eff does not follow its predecessor's source layer (a seam of
 * the plan: src[eff] != src[eff-1] + 1); false for step 0 and outside. */
bool rp_context_step_seam(const rp_context *ctx, int eff);
/* Compact eff->src list with the seams marked: "0..2 | 1..2 | 3..4". Returns
 * the length the whole text needs (like snprintf). */
int rp_context_plan_format(const rp_context *ctx, char *buf, size_t size);
/* Repeated steps that fall in the first or last max(3, n_layer/8) layers
 * (repeating those reliably gives incoherent output); the band width goes to
 * *band (may be NULL). 0 = none. */
int rp_context_boundary_repeats(const rp_context *ctx, int *band);
/* Bytes of the LoRA adapters (global and per-step) this context holds: its
 * weight memory beyond the model's. */
uint64_t rp_context_adapter_bytes(const rp_context *ctx);
/* Multi-line human description of the plan (the load-time report). Returns the
 * length the full text needs (like snprintf). */
int rp_context_plan_report(const rp_context *ctx, char *buf, size_t size);

/* State accounting. */
/* Bytes of KV cache and recurrent state allocated by this context. */
uint64_t rp_context_state_bytes(const rp_context *ctx);
/* What rp_context_new checks against its memory bound, for any context
 * (plan_only ones too, which allocate none of it): the state and the scratch
 * it needs (state UINT64_MAX: past 64 bits) and the bound (mem_limit, else
 * MemAvailable now; 0 = unknown). A process with several contexts (serve's
 * plans) adds them up. Any pointer may be NULL. */
void rp_context_mem_need(const rp_context *ctx, uint64_t *state, uint64_t *scratch,
                         uint64_t *limit);
typedef struct rp_state_info {
    uint64_t kv_bytes;  /* attention caches, all sequences */
    uint64_t rec_bytes; /* recurrent (conv / SSM) state, all sequences */
    int n_slots;        /* plan steps that keep state (a KV cache or recurrent state) */
    int n_slots_trunk;  /* trunk layers that keep state: the identity plan's n_slots */
    int n_slots_kv;     /* plan steps with a KV cache */
    int n_slots_rec;    /* plan steps with recurrent state */
    uint32_t n_seq;     /* sequences the state is allocated for */
    uint32_t n_ctx;     /* positions per sequence */
} rp_state_info;
void rp_context_state_info(const rp_context *ctx, rp_state_info *out);

/* ---- devices ----------------------------------------------------------------- */

typedef struct rp_device_info {
    char name[32];      /* what rp_context_params.device takes: "cpu", "vulkan0", ... */
    char desc[256];     /* the device in words */
    uint64_t mem_bytes; /* its memory (0 for the CPU: host memory) */
} rp_device_info;
/* The devices this build and machine can run on: "cpu" first, then each
 * Vulkan device. note (may be NULL) receives why there is no Vulkan device
 * (built without it, no loader, no driver: each naming the package), else "".
 *   RP_ERR_INVALID_ARG  cap < 1 */
rp_status rp_device_list(rp_device_info *devs, int cap, int *n, char *note, size_t note_size);
/* The device name a context runs on ("cpu", "vulkan0", ...). */
const char *rp_context_device(const rp_context *ctx);
/* The boot log's lines: the device, its memory, what the context holds
 * there (weights once, state for the plan's steps, scratch). Returns the
 * length like snprintf. */
int rp_context_device_report(const rp_context *ctx, char *buf, size_t size);
/* Per-op counters of the forward (calls, dispatches, bytes read) since the
 * last reset, per token when n_tok > 0, as a table; length like snprintf. */
void rp_context_device_stats_reset(rp_context *ctx);
int rp_context_device_stats(const rp_context *ctx, int n_tok, char *buf, size_t size);

/* ---- decoding -------------------------------------------------------------- */

/* One decode call: tokens (or input embeddings) of any sequences with their
 * positions. Positions of one sequence must continue where its cache ends
 * (pos == rp_kv_seq_len). */
typedef struct rp_batch {
    int32_t n_tokens;
    const int32_t *token;  /* [n_tokens] token ids; NULL when embd is given */
    const int32_t *pos;    /* [n_tokens] positions; NULL = continue each sequence */
    const int32_t *seq_id; /* [n_tokens] sequence ids; NULL = all 0 */
    const int8_t *logits;  /* [n_tokens] nonzero: compute logits; NULL = last only */
    /* [n_tokens][n_embd] input embeddings instead of token ids (exactly one of
     * token and embd is set): each row enters the first plan step where a token's
     * embedding-table row would (an architecture that scales its embeddings,
     * such as Gemma's sqrt(n_embd), scales these too). */
    const float *embd;
} rp_batch;

/*   RP_ERR_INVALID_ARG   an empty batch, both or neither of token and embd, a
 *                        token id outside the vocabulary, a sequence id outside
 *                        the context, a position that does not continue its
 *                        sequence (nothing is decoded then)
 *   RP_ERR_CONTEXT_FULL  a sequence would pass n_ctx (nothing is decoded)
 *   RP_ERR_CANCELLED     the abort callback returned true (see below)
 *   RP_ERR_FORMAT        a token's logits are NaN or infinite (weights that hold
 *                        them): the message names the token and its position;
 *                        no logits are readable
 * A batch longer than n_batch runs as several passes of at most n_batch tokens. */
rp_status rp_decode(rp_context *ctx, const rp_batch *batch);

/* Called by rp_decode before each pass of at most n_batch tokens; returning
 * true stops the call with RP_ERR_CANCELLED. The passes already run stay in
 * the cache (rp_kv_seq_len says how far each sequence got); no logits are
 * readable after a cancelled call. Another thread may make the callback
 * return true (it is read on the decoding thread; use an atomic flag). NULL
 * removes it. */
typedef bool (*rp_abort_fn)(void *user);
void rp_context_set_abort(rp_context *ctx, rp_abort_fn fn, void *user);

/* Trace hook (like llama.cpp's eval callback): during rp_decode the forward
 * hands named intermediate tensors to fn, on the decoding thread, in the order
 * they are computed. Names follow llama.cpp's graph ("inp_embd", "attn_norm",
 * "Qcur" (after bias, norm and rope), "Kcur", "Vcur", "kqv_out", "attn_out",
 * "ffn_inp", "ffn_norm", "ffn_gate", "ffn_up", "ffn_swiglu" or "ffn_geglu" (the
 * gated activation), "ffn_out", "l_out",
 * "result_norm", "result_output"), without llama.cpp's "-LAYER" suffix:
 * step and src say where. data and pos are valid during the call only. The
 * library writes nothing itself; the tools' --dump-tensors / REPRISE_TRACE
 * write the tensors to files. Architectures whose forward emits no tensors
 * (today: those not on the dense decoder block) simply never call fn. NULL
 * removes the hook. */
typedef struct rp_trace_tensor {
    const char *name;
    int step;           /* plan step (-1: before the first step, n_eff: the output) */
    int src;            /* the model layer the step runs (-1 outside the steps) */
    int n_rows;         /* rows (tokens) */
    int width;          /* floats per row */
    const float *data;  /* [n_rows][width] */
    const int32_t *pos; /* [n_rows] position of each row */
    const int32_t *seq; /* [n_rows] sequence of each row */
} rp_trace_tensor;
typedef void (*rp_trace_fn)(void *user, const rp_trace_tensor *t);
void rp_context_set_trace(rp_context *ctx, rp_trace_fn fn, void *user);

/* Logits (n_vocab floats) of batch row i of the last rp_decode; NULL if row i
 * asked for none. The pointer is into the context's buffer, no copy, valid
 * until the next decode (rows that asked for logits are contiguous in row
 * order: rp_get_logits(ctx, i) + n_vocab is the next such row's). */
const float *rp_get_logits(const rp_context *ctx, int i);
/* Final hidden state (n_embd floats) of batch row i; needs keep_hidden. */
const float *rp_get_hidden(const rp_context *ctx, int i);
int rp_n_vocab(const rp_context *ctx);

/* ---- sequences ------------------------------------------------------------ */

/* Number of positions cached for seq (the next position to decode); -1 for a
 * sequence id outside the context. */
int rp_kv_seq_len(const rp_context *ctx, int seq);
/* Forget positions >= p of seq (p = 0 clears it). Attention caches simply
 * shrink; recurrent state can only be cleared (p = 0) or restored from a
 * checkpoint taken at p.
 *   RP_ERR_INVALID_ARG  seq outside the context, p outside 0..rp_kv_seq_len
 *   RP_ERR_UNSUPPORTED  recurrent state cannot go back to p, or a sliding-window
 *                       ring no longer holds what p needs (nothing changes) */
rp_status rp_kv_seq_truncate(rp_context *ctx, int seq, int p);
/* llama.cpp's sequence removal: forget positions [p0, p1) of seq (p1 < 0: to
 * the end; p0 < 0: from 0). A sequence's positions are contiguous from 0, so
 * only its end can go: [p0, end) is rp_kv_seq_truncate(ctx, seq, p0), [0, end)
 * clears it, and a range that keeps positions after p1 is refused.
 *   RP_ERR_INVALID_ARG  seq outside the context (seq < 0 means every sequence,
 *                       for which only the whole range is accepted)
 *   RP_ERR_UNSUPPORTED  a hole in the middle, or what rp_kv_seq_truncate refuses */
rp_status rp_kv_seq_rm(rp_context *ctx, int seq, int p0, int p1);
/* Makes sequence dst a copy of positions [0, p1) of sequence src (p1 < 0: all
 * of them; p0 must be 0 or negative: a sequence always starts at position 0).
 * dst's previous content is dropped (its checkpoints no longer restore).
 * Recurrent state is copied whole: with recurrent steps in the plan only the
 * whole of src can be copied.
 *   RP_ERR_INVALID_ARG  src or dst outside the context, p0 > 0, p1 > rp_kv_seq_len(src)
 *   RP_ERR_UNSUPPORTED  a prefix of a sequence with recurrent state, or a
 *                       sliding-window ring that no longer holds the prefix
 *                       (nothing changes) */
rp_status rp_kv_seq_cp(rp_context *ctx, int src, int dst, int p0, int p1);
/* Forgets every sequence. */
void rp_kv_clear(rp_context *ctx);

/* Sequence checkpoints. Attention caches roll back by truncation; recurrent
 * state (Mamba2, gated delta-net) cannot. A checkpoint holds one sequence's
 * recurrent state and length; restoring it brings the sequence back to that
 * length: recurrent state as it was, attention caches truncated (speculative
 * decoding saves one before verifying drafted tokens and restores it when some
 * are rejected). A checkpoint restores while it is the latest saved for its
 * sequence and the sequence has not been cut back (truncated, cleared) below
 * its length since; otherwise restore refuses with RP_ERR_INVALID_ARG. Sliding-
 * window rings limit how far back it can go, as for rp_kv_seq_truncate
 * (RP_ERR_UNSUPPORTED). */
typedef struct rp_seq_checkpoint rp_seq_checkpoint;
/* True when some plan step keeps recurrent state (rollback needs a checkpoint). */
bool rp_context_has_recurrent(const rp_context *ctx);
/* A checkpoint buffer for any one sequence of ctx (it holds the recurrent state
 * of one sequence: nothing for attention-only plans). NULL when out of memory. */
rp_seq_checkpoint *rp_seq_checkpoint_new(const rp_context *ctx);
void rp_seq_checkpoint_free(rp_seq_checkpoint *ck);
/*   RP_ERR_INVALID_ARG  no checkpoint, one of another context, seq outside the context */
rp_status rp_seq_checkpoint_save(const rp_context *ctx, int seq, rp_seq_checkpoint *ck);
/*   RP_ERR_INVALID_ARG  as save, or a checkpoint that no longer restores (above)
 *   RP_ERR_UNSUPPORTED  a sliding-window ring no longer holds what it needs */
rp_status rp_seq_checkpoint_restore(rp_context *ctx, int seq, const rp_seq_checkpoint *ck);
/* Positions the sequence had when the checkpoint was saved; -1 before any save. */
int rp_seq_checkpoint_len(const rp_seq_checkpoint *ck);

/* The whole state of one sequence (every step's KV cells and recurrent state,
 * and its length) as bytes, to restore later into a sequence of a context
 * with the same model, plan and cache types (llama.cpp's state_seq_*): the
 * restored sequence decodes bit for bit as the saved one would have. The
 * image records the plan's shape (steps, their source layers, state sizes,
 * cache types, n_embd, n_vocab), not the weights: it belongs to the model it
 * was made with. */
/* Bytes the image of seq needs now; 0 for a sequence outside the context. */
size_t rp_seq_state_size(const rp_context *ctx, int seq);
/* Writes the image to buf; *written (may be NULL) receives its size.
 *   RP_ERR_INVALID_ARG  seq outside the context, or size < rp_seq_state_size */
rp_status rp_seq_state_save(const rp_context *ctx, int seq, void *buf, size_t size,
                            size_t *written);
/* Replaces sequence seq by an image (from this context or another one with the
 * same shape); its checkpoints no longer restore.
 *   RP_ERR_INVALID_ARG  seq outside the context
 *   RP_ERR_FORMAT       not an image, or a truncated / corrupt one
 *   RP_ERR_UNSUPPORTED  an image of another plan, model shape or cache type
 *                       (the message names what differs), or one longer than
 *                       this context's n_ctx
 * Nothing changes on failure. */
rp_status rp_seq_state_load(rp_context *ctx, int seq, const void *buf, size_t size);
/* The same through a file (written atomically: a failure leaves nothing);
 * RP_ERR_IO when it cannot be written or read. */
rp_status rp_seq_state_save_file(const rp_context *ctx, int seq, const char *path);
rp_status rp_seq_state_load_file(rp_context *ctx, int seq, const char *path);

/* ---- vocabulary ---------------------------------------------------------- */

int32_t rp_vocab_n_tokens(const rp_vocab *vocab);
int32_t rp_vocab_bos(const rp_vocab *vocab); /* -1 if none */
int32_t rp_vocab_eos(const rp_vocab *vocab);
bool rp_vocab_add_bos(const rp_vocab *vocab);
bool rp_vocab_add_eos(const rp_vocab *vocab);
/* True for every token that ends generation (EOS, EOT, <|im_end|>, ...). */
bool rp_vocab_is_eog(const rp_vocab *vocab, int32_t token);
/* Text of a token id; NULL if out of range. */
const char *rp_vocab_text(const rp_vocab *vocab, int32_t token);

/* Tokenize text[0..len). add_special: add BOS/EOS as the vocabulary asks.
 * parse_special: recognise control tokens written in the text (e.g.
 * "<|im_start|>"); otherwise they are tokenized as plain text. On success
 * *out is malloc'ed (caller frees) and *n_out holds its length.
 *   RP_ERR_UNSUPPORTED  the model has no tokenizer */
rp_status rp_tokenize(const rp_vocab *vocab, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t **out, size_t *n_out);

/* Text of one token (special: control tokens as their text, else as nothing).
 * A token's text may end in an incomplete UTF-8 sequence; feed pieces in
 * order. Returns the length the whole piece needs (like snprintf). */
int rp_token_to_piece(const rp_vocab *vocab, int32_t token, bool special, char *buf, size_t size);
/* Whole sequence to text; returns the length needed (like snprintf). */
int rp_detokenize(const rp_vocab *vocab, const int32_t *tokens, size_t n, bool special, char *buf,
                  size_t size);

/* ---- sampling ------------------------------------------------------------ */

typedef struct rp_sampler rp_sampler;

typedef struct rp_sampler_params {
    float temp;             /* <= 0: greedy */
    int32_t top_k;          /* <= 0: off */
    float top_p;            /* >= 1: off */
    float min_p;            /* <= 0: off */
    float repeat_penalty;   /* 1: off */
    int32_t penalty_last_n; /* window of the penalties; 0 = off, -1 = whole context */
    float freq_penalty;     /* 0: off */
    float presence_penalty; /* 0: off */
    uint64_t seed;
    /* ---- llama.cpp's other samplers (zero: off, or llama.cpp's default) -- */
    float typical_p;            /* locally typical sampling; 0 or >= 1: off */
    float top_n_sigma;          /* keep logits within n sigma of the largest; <= 0: off */
    float xtc_probability;      /* XTC: chance of dropping the top choices; 0: off */
    float xtc_threshold;        /* XTC: probability a choice needs to be dropped; 0 = 0.1 */
    float dry_multiplier;       /* DRY repetition penalty; 0: off (needs rp_sampler_set_vocab
                                   for its sequence breakers) */
    float dry_base;             /* 0 = 1.75 */
    int32_t dry_allowed_length; /* 0 = 2 */
    int32_t dry_penalty_last_n; /* tokens DRY looks back over; 0 or -1 = all (up to 65536) */
    int32_t mirostat;           /* 1: Mirostat, 2: Mirostat 2.0 (temperature, then Mirostat
                                   instead of the chain, as llama.cpp); 0: off */
    float mirostat_tau;         /* 0 = 5.0 */
    float mirostat_eta;         /* 0 = 0.1 */
    int32_t min_keep;           /* candidates every truncating stage keeps; 0 = 1 */
    /* Stage order by llama.cpp's names ("penalties;dry;top_n_sigma;top_k;typ_p;
     * top_p;min_p;xtc;temperature", separated by ';', ',' or spaces) or its
     * letters ("edskypmxt"); stages left out do not run. NULL: that default. */
    const char *samplers;
    /* With a grammar (rp_sampler_set_grammar): false = llama.cpp's way (draw
     * without it; only when it refuses the token, draw again with the grammar
     * applied first); true = always apply it first (the exact constrained
     * distribution, slower). */
    bool grammar_first;
} rp_sampler_params;

rp_sampler_params rp_sampler_default_params(void);
/* NULL when out of memory or n_vocab < 1 (the message says which). */
rp_sampler *rp_sampler_new(const rp_sampler_params *params, int32_t n_vocab);
void rp_sampler_free(rp_sampler *s);
/* Remember a token in the penalty window (prompt tokens and sampled ones). */
void rp_sampler_accept(rp_sampler *s, int32_t token);
void rp_sampler_reset(rp_sampler *s);
/* Sample from logits (n_vocab floats, not modified). */
int32_t rp_sampler_sample(rp_sampler *s, const float *logits);
/* The probability distribution the chain samples from, after every stage
 * (n_vocab floats; zero outside the kept set). For speculative decoding. */
void rp_sampler_probs(rp_sampler *s, const float *logits, float *probs);

/* ---- sampling: grammar, logit bias, log-probabilities -------------------- */

typedef struct rp_grammar rp_grammar; /* see "grammars" below */

/* Constrains sampling to g (not owned: it must outlive its use; NULL
 * removes it). rp_sampler_sample then returns -1 when the grammar allows no
 * token. rp_sampler_probs applies it first. */
void rp_sampler_set_grammar(rp_sampler *s, rp_grammar *g);
/* Like rp_sampler_accept, and advances the grammar: call it for every token
 * generated (rp_sampler_accept alone for prompt tokens). Fails, changing
 * nothing, when the grammar refuses the token. */
rp_status rp_sampler_accept_sampled(rp_sampler *s, int32_t token);
/* Adds bias[i] to the logit of tokens[i] before every stage (-INFINITY bans a
 * token: ignore_eos is a -INFINITY bias on the end-of-generation tokens).
 * Replaces any earlier bias; n = 0 clears it. */
rp_status rp_sampler_set_logit_bias(rp_sampler *s, const int32_t *tokens, const float *bias,
                                    size_t n);
/* The vocabulary DRY reads sequence breakers from: tokens whose text holds one
 * of breakers[0..n) (NULL = llama.cpp's "\n", ":", "\"", "*") end a repeat. */
rp_status rp_sampler_set_vocab(rp_sampler *s, const rp_vocab *vocab, const char *const *breakers,
                               size_t n_breakers);

typedef struct rp_token_logprob {
    int32_t token;
    float logprob; /* natural log */
} rp_token_logprob;

/* Post-sampling log-probabilities (llama-server's post_sampling_probs): of the
 * distribution the last rp_sampler_sample drew from, after every stage and the
 * grammar (greedy: the chosen token, log 1 = 0). *token_logprob for token
 * (-INFINITY when outside the kept set); up to n_top alternatives in top, most
 * likely first. Returns how many were written. */
int rp_sampler_last_logprobs(const rp_sampler *s, int32_t token, float *token_logprob,
                             rp_token_logprob *top, int n_top);
/* Pre-sampling log-probabilities: log-softmax of the raw logits (no
 * temperature, no stage) — OpenAI's logprobs / top_logprobs and llama-server's
 * default n_probs. Same outputs as above. */
int rp_logits_logprobs(const float *logits, int32_t n_vocab, int32_t token, float *token_logprob,
                       rp_token_logprob *top, int n_top);

/* ---- chat templates (Jinja) ---------------------------------------------- */

/* A model's tokenizer.chat_template compiled by reprise's Jinja interpreter,
 * rendered as transformers' apply_chat_template(tokenize=False) renders it
 * (Jinja2 with trim_blocks and lstrip_blocks, transformers' tojson,
 * raise_exception, strftime_now, namespace). Errors: RP_ERR_FORMAT for syntax
 * (line and column in the message), RP_ERR_UNSUPPORTED for Jinja features
 * outside the subset (include, extends, ...), RP_ERR_INVALID_ARG when the
 * template refuses the conversation (raise_exception: the message carries its
 * text), fails on it (type errors, undefined values) or exceeds a limit. */
typedef struct rp_chat_template rp_chat_template;

typedef struct rp_chat_template_inputs {
    const char *messages_json;   /* JSON array of OpenAI-style messages: role, content,
                                    tool_calls, tool_call_id, name, reasoning_content */
    const char *tools_json;      /* JSON array of tool definitions; NULL: tools is none */
    const char *extra_vars_json; /* JSON object of more variables (enable_thinking,
                                    date_string, ...); NULL: none */
    bool add_generation_prompt;
    const char *bos_token; /* NULL: undefined in the template (a model without BOS) */
    const char *eos_token;
} rp_chat_template_inputs;

/* Compiles (and checks) a template; nothing is rendered. */
rp_status rp_chat_template_new(const char *template_src, rp_chat_template **out);
void rp_chat_template_free(rp_chat_template *t);
/* Whether template_src compiles (syntax, known filters and tests): for
 * checking a model's template before loading its weights. */
rp_status rp_chat_template_check(const char *template_src);
/* Renders in. *out is malloc'ed (caller frees). Thread-safe on one template. */
rp_status rp_chat_template_apply(const rp_chat_template *t, const rp_chat_template_inputs *in,
                                 char **out);
/* Compile and render in one call. */
rp_status rp_chat_template_render(const char *template_src, const char *messages_json,
                                  const char *tools_json, const char *extra_vars_json,
                                  bool add_generation_prompt, const char *bos, const char *eos,
                                  char **out);

/* ---- grammars ------------------------------------------------------------ */

/* Constrained generation with llama.cpp's GBNF grammars. A grammar is bound
 * to a vocabulary through an rp_grammar_vocab (the token texts in a trie;
 * build it once per model, share it between grammars and threads: it is
 * read-only). An rp_grammar holds the grammar and the position reached: one
 * thread at a time. Token texts are what generation emits (rp_token_to_piece
 * without special tokens); control tokens match only explicit token elements
 * (<[id]>, <text>), and end-of-generation tokens only where the grammar can
 * end. Errors in grammar text are RP_ERR_FORMAT naming line and column. */
typedef struct rp_grammar_vocab rp_grammar_vocab;
typedef struct rp_grammar rp_grammar;
/* A saved position (rp_grammar_save), to roll back drafted tokens. */
typedef struct rp_grammar_state {
    uint64_t opaque[2];
} rp_grammar_state;

rp_status rp_grammar_vocab_new(const rp_vocab *vocab, rp_grammar_vocab **out);
void rp_grammar_vocab_free(rp_grammar_vocab *gv);
/* Whether gbnf parses (rules defined, no left recursion); root NULL = "root".
 * Needs no vocabulary: <text> tokens are checked by rp_grammar_new. */
rp_status rp_grammar_check(const char *gbnf, const char *root);
rp_status rp_grammar_new(const rp_grammar_vocab *gv, const char *gbnf, const char *root,
                         rp_grammar **out);
void rp_grammar_free(rp_grammar *g);
/* Back to the start. */
void rp_grammar_reset(rp_grammar *g);
/* Sets logits[t] (n_vocab floats) to -INFINITY for every token t that cannot
 * come next. */
rp_status rp_grammar_apply(rp_grammar *g, float *logits);
/* Whether token may come next (one token: much cheaper than apply). */
bool rp_grammar_allows(rp_grammar *g, int32_t token);
/* Advances past token; RP_ERR_INVALID_ARG when the grammar does not allow it. */
rp_status rp_grammar_accept(rp_grammar *g, int32_t token);
/* Whether the output so far is complete (an end-of-generation token may come). */
bool rp_grammar_can_end(const rp_grammar *g);
rp_grammar_state rp_grammar_save(const rp_grammar *g);
void rp_grammar_restore(rp_grammar *g, rp_grammar_state state);

/* The grammar of any JSON object (llama.cpp's json.gbnf; for response_format
 * json_object). Static text. */
const char *rp_grammar_json(void);
/* A JSON schema (text) converted to GBNF, as llama.cpp's json-schema-to-grammar
 * does (see src/text/json_schema.c for what is covered); *gbnf is malloc'ed.
 * Keywords that only narrow a schema (uniqueItems, not, ...) are ignored, as
 * llama.cpp ignores them. RP_ERR_UNSUPPORTED names what cannot become a
 * grammar (a remote $ref, a regex feature outside the subset) and where. */
rp_status rp_json_schema_to_grammar(const char *schema_json, char **gbnf);

RP_API_END

#ifdef __cplusplus
}
#endif
#endif /* REPRISE_H */
