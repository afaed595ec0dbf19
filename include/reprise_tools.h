/*
 * reprise — tool-level services over the core API (reprise.h): what the
 * `reprise` command-line tools are built on, callable from C (or any FFI)
 * without the tools' option parsing.
 *
 *   GGUF files        read any GGUF file's header, metadata and tensor table;
 *                     copy a file through reprise's reader and writer
 *   plan files        plans as files (docs/plan-files.md) and the content hash
 *                     of a model's weights they are checked against
 *   perplexity, KLD   llama.cpp's windows, accumulators, base-file reader and writer
 *   scans             every repeat block (i,j) evaluated on weights loaded once;
 *                     the resumable CSV, the ranking, the Pareto list, the heatmap
 *   chat templates    render a conversation the way the model's template does
 *   speculative       drafts from the same weights, verified by the plan
 *   quantize          llama.cpp's types and mixtures, byte-identical blocks
 *   merge             a plan written as a physically merged GGUF
 *   convert           Hugging Face checkpoints to GGUF
 *   synth             deterministic random-weight models
 *   benchmarks        memory bandwidth and matmul kernel costs
 *
 * The conventions of reprise.h hold: opaque handles, rp_status returns (the
 * statuses each function returns are listed with it; RP_ERR_NOMEM and
 * RP_ERR_INTERNAL can come from anything that allocates), messages through
 * rp_last_error(), nothing printed, output files written atomically (a
 * failure leaves nothing behind). Structs that are not handles are plain data:
 * results and read-only views the library fills.
 */
#ifndef REPRISE_TOOLS_H
#define REPRISE_TOOLS_H

#include "reprise.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RP_TOOLS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RP_TOOLS_PRINTF(a, b)
#endif

RP_API_BEGIN

/* ==== Output files ========================================================
 * Every file the library writes goes to a temporary file renamed over the
 * target on success. A symbolic link's target is written; an existing file
 * keeps its mode; a read-only (no write bit) or non-regular target is refused,
 * except a character device, written through (so an output of /dev/null
 * discards it). A file the process holds open as an input (same device and
 * inode: a model, a checkpoint) is refused unless allowed here. */
void rp_output_allow_inputs(bool allow);
/* Unlinks the temporary files of the writes in progress. Async-signal-safe:
 * for a SIGINT / SIGTERM / SIGHUP handler, which then ends the process. */
void rp_atomic_remove_temps(void);
/* A file written under those rules, for tools' own outputs (run
 * --dump-logits, --dump-tensors): rp_output_open refuses what the rules
 * refuse (RP_ERR_IO naming the file and why) and opens the temporary file;
 * rp_output_commit renames it over the target and frees o (RP_ERR_IO if a
 * write or the rename failed: the target is then untouched);
 * rp_output_abort removes it and frees o. */
typedef struct rp_output rp_output;
rp_status rp_output_open(const char *path, rp_output **out);
rp_status rp_output_write(rp_output *o, const void *p, size_t n);
rp_status rp_output_commit(rp_output *o);
void rp_output_abort(rp_output *o);

/* ==== GGUF files ==========================================================
 * A GGUF v2/v3 reader. The file is untrusted: every count, length, offset and
 * dimension is checked against the file size with overflow-checked arithmetic
 * before it is used. Values, keys and tensors are read-only views owned by the
 * reader, valid until rp_gguf_close. */

#define RP_GGUF_MAX_DIMS 4

/* Size in bytes of a fixed-size value type; 0 for string, array or unknown. */
size_t rp_gguf_type_size(int type);

/* A decoded value. Strings are NUL-terminated (len excludes the NUL; a string
 * may contain NUL bytes, so use len). Arrays of fixed-size elements point at
 * the raw little-endian bytes (read them with rp_gguf_arr_i64 / _f64); arrays
 * of strings or arrays hold one decoded element each in elems. */
typedef struct rp_gguf_val {
    uint32_t type;   /* rp_gguf_type */
    uint64_t offset; /* byte offset of the value in the file */
    union {
        uint64_t u; /* UINT8..UINT64, BOOL */
        int64_t i;  /* INT8..INT64 */
        double f;   /* FLOAT32, FLOAT64 */
        struct {
            const char *s;
            uint64_t len;
        } str;
        struct {
            uint32_t type; /* element type */
            uint64_t n;
            const uint8_t *raw;              /* fixed-size elements */
            const struct rp_gguf_val *elems; /* string / array elements */
        } arr;
    };
} rp_gguf_val;

typedef struct rp_gguf_kv {
    const char *key;
    uint64_t offset; /* byte offset of the key in the file */
    rp_gguf_val val;
} rp_gguf_kv;

typedef struct rp_gguf_tensor {
    const char *name;
    uint32_t type;                /* rp_type */
    uint32_t n_dims;              /* 1..4 */
    int64_t ne[RP_GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused = 1 */
    uint64_t offset;              /* relative to the data section */
    uint64_t nbytes;
    uint64_t info_offset; /* byte offset of the tensor info in the file */
    const void *data;     /* into the mapping */
} rp_gguf_tensor;

typedef struct rp_gguf rp_gguf;

/* Maps and parses a file. On failure *out is NULL and rp_last_error() names the
 * problem and its byte offset.
 *   RP_ERR_IO      the file cannot be opened, read or mapped
 *   RP_ERR_FORMAT  not GGUF v2/v3, or malformed (where and what) */
rp_status rp_gguf_open(const char *path, rp_gguf **out);
/* The same over a buffer the caller keeps alive (fuzzing, embedded models). */
rp_status rp_gguf_open_mem(const void *data, size_t size, rp_gguf **out);
void rp_gguf_close(rp_gguf *g); /* NULL is fine */

uint32_t rp_gguf_version(const rp_gguf *g);
uint64_t rp_gguf_file_size(const rp_gguf *g);
uint64_t rp_gguf_alignment(const rp_gguf *g);
uint64_t rp_gguf_data_offset(const rp_gguf *g); /* start of the tensor data section */
const char *rp_gguf_path(const rp_gguf *g);     /* "" for memory buffers */

uint64_t rp_gguf_n_kv(const rp_gguf *g);
/* Key i (file order); NULL when i is out of range. */
const rp_gguf_kv *rp_gguf_kv_at(const rp_gguf *g, uint64_t i);
/* The value of a key; NULL if absent. */
const rp_gguf_val *rp_gguf_get(const rp_gguf *g, const char *key);

uint64_t rp_gguf_n_tensors(const rp_gguf *g);
/* Tensor i (file order); NULL when i is out of range. */
const rp_gguf_tensor *rp_gguf_tensor_at(const rp_gguf *g, uint64_t i);
const rp_gguf_tensor *rp_gguf_find_tensor(const rp_gguf *g, const char *name);

/* Typed getters: RP_OK, or RP_ERR_FORMAT naming the key when it is present with
 * another type or a value out of range. An absent key leaves *out untouched,
 * sets *found = false (found may be NULL) and returns RP_OK. Integer getters
 * accept any integer type whose value fits. */
rp_status rp_gguf_get_u32(const rp_gguf *g, const char *key, uint32_t *out, bool *found);
rp_status rp_gguf_get_i64(const rp_gguf *g, const char *key, int64_t *out, bool *found);
rp_status rp_gguf_get_f32(const rp_gguf *g, const char *key, float *out, bool *found);
rp_status rp_gguf_get_bool(const rp_gguf *g, const char *key, bool *out, bool *found);
rp_status rp_gguf_get_str(const rp_gguf *g, const char *key, const char **out, bool *found);
/* Element i of an integer / float / bool array as a wide value. */
int64_t rp_gguf_arr_i64(const rp_gguf_val *arr, uint64_t i);
double rp_gguf_arr_f64(const rp_gguf_val *arr, uint64_t i);

/* A value as text, the way `reprise inspect` shows it (preview): strings
 * quoted with C escapes, cut after 160 bytes ("...(N bytes)"); arrays as
 * "[a, b, ...]" with the first 8 elements and ", ... N more"; floats "%.9g"
 * (array elements "%.6g"). Without preview: strings as they are, arrays whole
 * (strings in them quoted and escaped), floats "%.9g". Returns the length the
 * whole text needs (like snprintf). */
int rp_gguf_val_text(const rp_gguf_val *v, bool preview, char *buf, size_t size);
/* The type of a value as text: "u32", "str", "arr[str,151936]", "arr[arr[i32,2],4]".
 * Returns the length needed (like snprintf). */
int rp_gguf_val_type_text(const rp_gguf_val *v, char *buf, size_t size);

/* Re-writes a GGUF file through reprise's reader and writer: the same keys,
 * tensors and alignment (a file written by a conforming writer comes out byte
 * for byte identical; the round-trip tests rely on it).
 *   statuses of rp_gguf_open for in; RP_ERR_IO when out cannot be written */
rp_status rp_gguf_copy(const char *in_path, const char *out_path);

/* ==== content hash and plan files ==========================================
 * A plan file is a small JSON document (docs/plan-files.md): a name, a
 * description, the spec in either grammar (repeat_layers or layer_map) and
 * the identity of the base model it was made for: architecture, trunk layer
 * count and the content hash of the model's tensors.
 *
 * The content hash identifies weights, not files: XXH3-128 over the tensor
 * table (name, type, shape) and an XXH3-128 digest of every tensor's bytes,
 * tensors taken in name order, metadata left out. Renaming a model, editing
 * its chat template or re-writing it with tensors in another order keeps the
 * hash; another quantization, another fine-tune or another shape changes it.
 * It is computed once: a file reprise wrote carries it in its metadata
 * (reprise.content_hash); for other files it is cached beside the model in
 * MODEL.gguf.rphash, valid while the file's size, mtime and inode and its
 * tensor table stay the same. */

#define RP_CONTENT_HASH_LEN 41 /* strlen("xxh3-128:") + 32 */
#define RP_TABLE_HASH_LEN   24 /* strlen("xxh3-64:") + 16 */

typedef enum rp_hash_source {
    RP_HASH_COMPUTED = 0, /* read every tensor's bytes now */
    RP_HASH_METADATA = 1, /* the file's own reprise.content_hash */
    RP_HASH_CACHE = 2,    /* MODEL.gguf.rphash */
} rp_hash_source;

typedef struct rp_content_hash {
    char hash[RP_CONTENT_HASH_LEN + 1]; /* "xxh3-128:" + 32 lowercase hex digits */
    char table[RP_TABLE_HASH_LEN + 1];  /* the tensor table alone: "xxh3-64:" + 16 hex */
    rp_hash_source source;
    bool cached;          /* RP_HASH_COMPUTED: the result was written to cache_path */
    char cache_note[256]; /* RP_HASH_COMPUTED and not cached: why not */
    char cache_path[4096];
} rp_content_hash;

/* Hashes every tensor of g now (bytes read through the mapping, by up to
 * n_threads threads; 0 = a few). progress may be NULL; returning false cancels.
 *   RP_ERR_CANCELLED  the progress callback returned false */
rp_status rp_content_hash_compute(const rp_gguf *g, int n_threads, rp_progress_fn progress,
                                  void *user, rp_content_hash *out);
/* The hash of g the cheapest way that is still right: its own metadata when the
 * tensor table it was stamped for is the file's, else the cache file beside
 * g's path when size, mtime, inode and tensor table match, else computed (and
 * the cache written; a read-only folder only costs the recomputation next
 * time, which out->cache_note explains). Statuses as rp_content_hash_compute. */
rp_status rp_content_hash_get(const rp_gguf *g, rp_progress_fn progress, void *user,
                              rp_content_hash *out);
/* rp_content_hash_get over the file a model was loaded from. */
rp_status rp_model_content_hash(const rp_model *m, rp_progress_fn progress, void *user,
                                rp_content_hash *out);
/* "xxh3-128:<32 lowercase hex>"? */
bool rp_content_hash_valid(const char *s);
const char *rp_hash_source_name(rp_hash_source s); /* "metadata", "cache", "computed" */

/* Plan kinds (the grammar of a spec). */
enum { RP_PLAN_IDENTITY = 0, RP_PLAN_REPEAT = 1, RP_PLAN_MAP = 2 };

#define RP_PLAN_NAME_MAX 64

typedef struct rp_planfile {
    char *name;         /* [A-Za-z0-9._:+/-], at most RP_PLAN_NAME_MAX bytes */
    char *description;  /* "" when absent */
    int kind;           /* RP_PLAN_REPEAT or RP_PLAN_MAP */
    char *spec;         /* in the grammar of kind */
    int n_eff;          /* steps of the plan on the base model */
    char *arch;         /* base model: general.architecture */
    int n_layer;        /* base model: trunk layers (what plans index) */
    char *content_hash; /* base model: "xxh3-128:..." */
    char *base_name;    /* base model: general.name (informational; may be NULL) */
    char *base_file;    /* base model: file name it was saved from (informational; may be NULL) */
    char *created_by;   /* "reprise 0.1.0" (informational; may be NULL) */
} rp_planfile;

/* A plan file for model m with content hash `hash`.
 *   RP_ERR_INVALID_ARG  a name that is not usable (rp_planfile_name_valid), an
 *                       invalid hash, a kind that is neither REPEAT nor MAP
 *   RP_ERR_PLAN         the spec does not fit m (the message names the block or item) */
rp_status rp_planfile_new(const rp_model *m, const char *hash, const char *name,
                          const char *description, int kind, const char *spec, rp_planfile **out);
/* Reads and validates a plan file; every refusal names the file and the JSON
 * field.
 *   RP_ERR_IO      the file cannot be read
 *   RP_ERR_FORMAT  not a plan file, or a field missing, mistyped or invalid */
rp_status rp_planfile_read(const char *path, rp_planfile **out);
/* The same from text; `what` names it in messages. RP_ERR_FORMAT as above. */
rp_status rp_planfile_parse(const char *text, size_t len, const char *what, rp_planfile **out);
/* The JSON text (malloc'ed, ends with a newline); NULL on out of memory. */
char *rp_planfile_to_json(const rp_planfile *pf);
/* Writes it atomically. RP_ERR_IO when the file cannot be written. */
rp_status rp_planfile_write(const rp_planfile *pf, const char *path);
void rp_planfile_free(rp_planfile *pf); /* NULL is fine */
/* Is `name` usable as a plan name (and so a served model id)? */
bool rp_planfile_name_valid(const char *name);
/* Does pf apply to model m whose content hash is `hash`? RP_OK when it does.
 *   RP_ERR_PLAN  another architecture or layer count; another content hash
 *                unless force, which accepts it and sets *forced (the caller
 *                must say so); a spec the model refuses. Messages name the plan
 *                file, the model and the reason. */
rp_status rp_planfile_check(const rp_planfile *pf, const rp_model *m, const char *hash, bool force,
                            bool *forced);
/* The steps pf runs on its base model as a compact eff->src list ("0..2 | 1..2 |
 * 3..4", seams marked). Returns the length needed (like snprintf), or -1 when
 * the spec does not build (a plan file that was not validated). */
int rp_planfile_steps(const rp_planfile *pf, char *buf, size_t size);

/* ==== perplexity and KL divergence =========================================
 * Evaluation of a model on a text by llama.cpp's method (its
 * tools/perplexity):
 *   - the whole text is tokenized once (BOS first where the vocabulary adds one);
 *   - it is cut into chunks of c tokens; chunk i is tokens [i*c, (i+1)*c);
 *   - where the vocabulary adds BOS, the first token of every chunk is replaced
 *     by BOS (the text's own token there is never predicted);
 *   - only the second half of each chunk is scored: the logits at positions
 *     first = c/2 .. c-2 predict the tokens at first+1 .. c-1, so a chunk
 *     scores n_score = c - 1 - c/2 tokens, each with at least c/2 of context.
 * The decoding driver hands each chunk's scored rows to a consumer in chunk
 * order; the accumulators (PPL, KLD) and the base-file reader/writer are
 * independent of it, so a caller can evaluate many plans on one loaded model
 * and one tokenized text. rp_perplexity is all of it in one call. The
 * base-file format is docs/kld-format.md. */

#define RP_EVAL_MIN_CTX 4 /* the smallest c: every chunk scores at least one token */

typedef struct rp_eval_windows {
    int n_ctx;    /* c: tokens per chunk */
    int n_chunk;  /* chunks evaluated */
    int first;    /* c/2: first position whose logits are scored */
    int n_score;  /* c - 1 - first: tokens scored per chunk */
    bool add_bos; /* the first token of each chunk is replaced by bos */
    int32_t bos;  /* BOS id, or -1 */
    int32_t n_vocab;
} rp_eval_windows;

/* Windows of a tokenized text of n_tokens for chunks of c tokens, at most
 * max_chunks of them (<= 0: all that fit, n_tokens / c).
 *   RP_ERR_INVALID_ARG  c below RP_EVAL_MIN_CTX or above the model's training
 *                       context, a text of fewer than 2*c tokens (llama.cpp's
 *                       rule: two chunks' worth) */
rp_status rp_eval_windows_init(rp_eval_windows *w, const rp_model *model, size_t n_tokens, int c,
                               int max_chunks);
/* Tokenizes a whole text for evaluation: BOS first where the vocabulary adds
 * one, control-token text treated as plain text, and no trailing EOS. *out is
 * malloc'ed. RP_ERR_UNSUPPORTED: the model has no tokenizer. */
rp_status rp_eval_tokenize(const rp_model *model, const char *text, size_t len, int32_t **out,
                           size_t *n_out);
/* Identity of a text: XXH64 (seed 0) of its bytes. */
uint64_t rp_eval_text_hash(const char *text, size_t len);

/* One chunk's scored rows: logits[j] (n_vocab floats) is the model's output at
 * position first + j and predicts target[j] (the text's token at first+j+1). */
typedef struct rp_eval_chunk {
    int index; /* 0-based chunk number */
    int n_score;
    const float *const *logits; /* [n_score] rows, valid during the callback */
    const int32_t *target;      /* [n_score] */
    int n_tokens_decoded;       /* tokens decoded for the group this chunk belonged to */
} rp_eval_chunk;

/* Consumer of one chunk. A non-OK status stops the run and is returned by
 * rp_eval_run (RP_ERR_CANCELLED to cancel on user request). */
typedef rp_status (*rp_eval_chunk_fn)(const rp_eval_chunk *chunk, void *user);

/* Decodes every chunk of w on ctx and calls fn for each in chunk order.
 * tokens holds at least w->n_chunk * w->n_ctx ids. n_seq chunks are decoded
 * together in one rp_decode, each in its own sequence (ctx needs n_seq_max >=
 * n_seq and n_ctx >= c; rp_decode splits the batch into passes of the
 * context's n_batch). The sequences used are cleared before each group. The
 * result does not depend on n_seq or the pass size.
 *   RP_ERR_INVALID_ARG  a context too small for c or n_seq, a vocabulary that
 *                       does not match w
 *   statuses of rp_decode; whatever fn returns */
rp_status rp_eval_run(rp_context *ctx, const int32_t *tokens, const rp_eval_windows *w, int n_seq,
                      rp_eval_chunk_fn fn, void *user);

/* -log softmax(logits)[target] over n_vocab logits, as llama.cpp computes it
 * (float differences from the maximum, a double sum of their exponentials). */
double rp_eval_nll(const float *logits, int n_vocab, int32_t target);

typedef struct rp_ppl_acc {
    double sum_nll, sum_nll2;
    size_t count;
} rp_ppl_acc;

void rp_ppl_add(rp_ppl_acc *a, double nll);
/* exp(mean nll) */
double rp_ppl_value(const rp_ppl_acc *a);
/* llama.cpp's "+/-": PPL * sqrt((E[nll^2] - E[nll]^2) / (count - 1)); 0 when
 * undefined (count < 2 or no spread). */
double rp_ppl_uncertainty(const rp_ppl_acc *a);

/* Base log-probabilities (the --kl-divergence-base file): one row per scored
 * token: the exact log-probability of the token that follows and the index of
 * the most likely token, plus the whole distribution as 16-bit codes on a
 * linear log-probability scale from the top down to RP_KLD_LP_RANGE below it. */

#define RP_KLD_MAGIC       "RPBASELP"
#define RP_KLD_VERSION     1
#define RP_KLD_LP_RANGE    24.0f /* nats kept below the most likely token */
#define RP_KLD_HEADER_SIZE 256   /* bytes before the token ids */
#define RP_KLD_DESC_SIZE   128   /* bytes of the free-text description */

typedef struct rp_kld_header {
    uint32_t version;
    uint32_t n_ctx, n_vocab, n_chunk, first, n_score;
    bool add_bos;
    int32_t bos;
    uint64_t text_bytes, text_hash, tokens_hash;
    float lp_range;
    char desc[RP_KLD_DESC_SIZE + 1]; /* NUL-terminated */
} rp_kld_header;

/* One decoded row. */
typedef struct rp_kld_row {
    float lp_target; /* exact log p(next token) */
    int32_t top;     /* argmax of the distribution */
    float lp_top;    /* log p(top) */
    float scale;     /* nats per code step */
    const uint16_t
        *code; /* [n_vocab]: 0 = below lp_top - range; else lp_top - (65535 - code) * scale */
} rp_kld_row;

/* Bytes of one row in the file for a vocabulary of n_vocab. */
size_t rp_kld_row_bytes(int32_t n_vocab);
/* Encodes a row of logits predicting target into buf (rp_kld_row_bytes).
 *   RP_ERR_INVALID_ARG  a target outside the vocabulary */
rp_status rp_kld_encode_row(const float *logits, int32_t n_vocab, int32_t target, void *buf);
/* Views an encoded row (validated: a corrupt row is RP_ERR_FORMAT, never used). */
rp_status rp_kld_decode_row(const void *buf, int32_t n_vocab, rp_kld_row *row);

typedef struct rp_kld_writer rp_kld_writer;
/* Creates path atomically (nothing is left behind unless committed). desc: a
 * free-text description of the base (model and plan), truncated to fit.
 *   RP_ERR_IO  the file cannot be created */
rp_status rp_kld_writer_open(const char *path, const rp_eval_windows *w, const int32_t *tokens,
                             uint64_t text_bytes, uint64_t text_hash, const char *desc,
                             rp_kld_writer **out);
/* Appends one chunk's rows (chunks in order, n_score rows each).
 *   RP_ERR_INVALID_ARG  a chunk out of order; RP_ERR_IO a failed write */
rp_status rp_kld_writer_add(rp_kld_writer *wr, const rp_eval_chunk *chunk);
/* Renames the file into place once every chunk was written.
 *   RP_ERR_INVALID_ARG  chunks missing; RP_ERR_IO a failed write or rename */
rp_status rp_kld_writer_commit(rp_kld_writer *wr);
/* Discards an unfinished file; frees wr (also after commit). NULL is fine. */
void rp_kld_writer_free(rp_kld_writer *wr);

typedef struct rp_kld_reader rp_kld_reader;
/* Opens and validates a base file: magic, version, geometry, the file size and
 * the token ids. Errors name the file and what is wrong.
 *   RP_ERR_IO  the file cannot be read; RP_ERR_FORMAT it is not a valid base file */
rp_status rp_kld_reader_open(const char *path, rp_kld_reader **out);
const rp_kld_header *rp_kld_reader_header(const rp_kld_reader *r);
/* [n_chunk * n_ctx] token ids of the windows. */
const int32_t *rp_kld_reader_tokens(const rp_kld_reader *r);
/* Reads chunk `index`'s rows (chunks in order from 0); rows[j] stays valid
 * until the next call.
 *   RP_ERR_INVALID_ARG  a chunk out of order; RP_ERR_IO / RP_ERR_FORMAT a
 *                       failed read or a corrupt row */
rp_status rp_kld_reader_chunk(rp_kld_reader *r, int index, const rp_kld_row **rows);
void rp_kld_reader_free(rp_kld_reader *r);

/* What the comparison run has, checked against a base header. Fields left at
 * their zero value are not checked (text_bytes 0 and text_hash 0: no text). */
typedef struct rp_kld_expect {
    int32_t n_vocab;
    int n_ctx;   /* 0: take the file's */
    int n_chunk; /* chunks wanted, 0: all of the file's */
    bool add_bos;
    int32_t bos;
    uint64_t text_bytes, text_hash;
    const int32_t *tokens; /* the comparison's tokenized text, NULL: not checked */
    size_t n_tokens;
} rp_kld_expect;

/* Refuses a base file whose header does not match (RP_ERR_INVALID_ARG, with
 * the reason). */
rp_status rp_kld_check(const rp_kld_header *h, const int32_t *file_tokens, const rp_kld_expect *e);

typedef struct rp_kld_acc {
    double sum_nll, sum_nll2;           /* the evaluated model */
    double sum_nll_base, sum_nll_base2; /* the base */
    double sum_nll_nll_base;
    double sum_kld, sum_kld2;
    double sum_p_diff, sum_p_diff2, sum_p_diff4;
    size_t n_same_top, count;
    float *kld;    /* [count] per-token KL divergence */
    float *p_diff; /* [count] p(target) - p_base(target) */
    size_t cap;
    float *scratch; /* [n_vocab] base log-probabilities of the current row */
    int32_t n_vocab;
} rp_kld_acc;

rp_status rp_kld_acc_init(rp_kld_acc *a, int32_t n_vocab);
void rp_kld_acc_free(rp_kld_acc *a);
/* Adds one token: the evaluated model's logits against the base row. Returns
 * the token's KLD in *kld (may be NULL). RP_ERR_INVALID_ARG: a target outside
 * the vocabulary. */
rp_status rp_kld_add(rp_kld_acc *a, const float *logits, const rp_kld_row *base, int32_t target,
                     double *kld);

/* A mean and its standard error as llama.cpp estimates them. */
typedef struct rp_mean_unc {
    double val, unc;
} rp_mean_unc;

/* Everything llama.cpp prints in its KL divergence report. */
typedef struct rp_kld_stats {
    size_t count;
    rp_mean_unc ppl, ppl_base, ln_ratio, ratio, diff;
    double cor; /* correlation of the two ln(PPL) estimates */
    rp_mean_unc kld;
    double kld_max, kld_min, kld_median;
    double kld_pct[8]; /* 99.9, 99, 95, 90, 10, 5, 1, 0.1 */
    rp_mean_unc p_diff;
    double p_diff_max, p_diff_min, p_diff_median;
    double p_diff_pct[10]; /* 99.9, 99, 95, 90, 75, 25, 10, 5, 1, 0.1 */
    rp_mean_unc p_diff_rms;
    rp_mean_unc same_top; /* fraction of tokens whose argmax agrees */
} rp_kld_stats;

extern const float rp_kld_pct_levels[8];
extern const float rp_p_diff_pct_levels[10];

/* The statistics so far. Means and uncertainties are cheap; with
 * percentiles, copies of the per-token values are sorted (the final report).
 *   RP_ERR_INVALID_ARG  no token added yet */
rp_status rp_kld_stats_compute(const rp_kld_acc *a, bool percentiles, rp_kld_stats *st);
/* llama.cpp's percentile of sorted values: linear between neighbours. */
double rp_eval_percentile(const float *sorted, size_t n, float fraction);

/* All of the above in one call (what `reprise perplexity` runs): the
 * perplexity of a text on ctx, or the KL divergence of ctx's distributions
 * against a base file, and optionally the base file of this run. */
typedef struct rp_perplexity_params {
    int n_ctx;              /* tokens per chunk; 0 = the context's n_ctx (with kld_base:
                               the file's, and a value given must match it) */
    int n_chunks;           /* chunks at most; <= 0: all that fit (kld_base: all of the file's) */
    int n_seq;              /* chunks decoded together; 0 = the context's n_seq_max */
    const char *kld_base;   /* compare with this base file (its windows; text may then be
                               NULL, else it must be the base's text) */
    const char *write_base; /* write the base file of this run (not with kld_base) */
    const char *base_desc;  /* its description (model and plan), truncated to fit */
    /* once the windows are known, before anything is decoded: the text's token
     * count (0 without a text) and the header of the base file with kld_base
     * (else NULL); may be NULL */
    void (*on_start)(const rp_eval_windows *w, int n_seq, size_t n_tokens,
                     const rp_kld_header *base, void *user);
    /* after each chunk: its index, the running PPL and its uncertainty (kld_base:
     * the running statistics, no percentiles; else NULL); false cancels. May be NULL. */
    bool (*on_chunk)(int index, double ppl, double unc, const rp_kld_stats *kld, void *user);
    void *user;
} rp_perplexity_params;

typedef struct rp_perplexity_result {
    rp_eval_windows windows;
    int n_seq;        /* chunks decoded together */
    double ppl, unc;  /* the perplexity (without kld_base) */
    rp_kld_stats kld; /* with kld_base: the whole report, percentiles included */
} rp_perplexity_result;

/* p may be NULL (the defaults: every chunk of the text, c = the context's n_ctx).
 *   RP_ERR_INVALID_ARG  no text without kld_base, both kld_base and write_base, a
 *                       chunk size the context cannot hold, a base file made with
 *                       another -c, vocabulary or text
 *   RP_ERR_CANCELLED    on_chunk returned false
 *   statuses of rp_eval_windows_init, rp_eval_run and the base-file functions */
rp_status rp_perplexity(rp_context *ctx, const char *text, size_t len,
                        const rp_perplexity_params *p, rp_perplexity_result *out);

/* ==== scans =================================================================
 * Every RYS block (i,j) of a model evaluated on one workload, on weights loaded
 * once. A workload is a set of token sequences (rp_scan_set): the chunks of a
 * text cut as the perplexity evaluation cuts them, or the prompts and answers
 * of a probe file. An rp_scan evaluates the identity plan, then any block as
 * a plan over the same rp_model: a new context per block, no reload, no weight
 * copy. With prefix reuse the residual stream after step j-1 is kept and every
 * block ending at j runs from there (results are bit for bit those of running
 * every plan whole). The formats (CSV, probe file) are docs/scan.md. */

typedef enum rp_scan_metric {
    RP_SCAN_PPL = 0, /* perplexity of the text; lower is better */
    RP_SCAN_KLD =
        1, /* mean KL divergence from the identity plan's distributions; lower is better */
    RP_SCAN_PROBE = 2, /* mean log-probability of the probe answers (nats); higher is better */
    /* generation probes (greedy, a token budget per probe); higher is better */
    RP_SCAN_MATH = 3,     /* mean partial credit of the numbers generated (rp_probe_score_math) */
    RP_SCAN_EQ = 4,       /* mean distance score to reference scores (rp_probe_score_eq) */
    RP_SCAN_MC = 5,       /* accuracy on the multiple-choice items (the likeliest choice) */
    RP_SCAN_COMBINED = 6, /* balanced z: the mean of the chosen metrics' z (delta / the
                             identity's standard error) */
} rp_scan_metric;

/* RYS's partial credit of an estimate for an actual integer (decimal digits,
 * an optional '-'): the shorter padded on the right with zeros to the longer
 * length, (1 - |a - e| / max(a, e)) * (1 - padding / length), in [0, 1]; 0 for
 * the wrong sign or what is not an integer. */
double rp_probe_number_credit(const char *actual, const char *estimate);
/* The best credit of any integer in output ("12,345" read as 12345). */
double rp_probe_score_math(const char *output, const char *expected);
/* EQ-style: the first n numbers of output against ref[0..n): 1 - sum of
 * min(|out - ref|, scale) / (n * scale), a missing number counting scale. */
double rp_probe_score_eq(const char *output, const double *ref, int n, double scale);

const char *rp_scan_metric_name(rp_scan_metric m); /* "ppl", "kld", "probe" */
int rp_scan_metric_from_name(const char *name);    /* -1 if unknown */
/* +1 when a larger value is better (probe), -1 when a smaller one is. */
int rp_scan_metric_sign(rp_scan_metric m);

/* One decoded sequence: tokens tok[0..n_dec) are decoded; row r (score_from
 * <= r < n_dec) is scored by the token that follows it, tok[r+1]. */
typedef struct rp_scan_seq {
    size_t tok;    /* offset of its tokens in rp_scan_set.tok (n_dec + 1 of them) */
    size_t row;    /* offset of its first decoded token among all decoded tokens */
    size_t scored; /* offset of its first scored row among all scored rows */
    int n_dec;
    int score_from;
    int item; /* probe item it belongs to, -1 for text */
} rp_scan_seq;

/* One probe: a prompt with a free answer (n_choices 0, one sequence), or a
 * multiple-choice question (one sequence per choice, answer = the right one). */
typedef struct rp_scan_item {
    int first_seq;
    int n_choices;
    int answer;
    int line; /* line of the probe file */
} rp_scan_item;

/* A generation probe: the prompt's tokens, answered greedily in at most
 * max_tokens tokens, the output scored against expected (math) or scores (eq). */
#define RP_SCAN_EQ_MAX 16
typedef struct rp_scan_gen {
    size_t tok; /* offset of the prompt's tokens in rp_scan_set.tok */
    int n_prompt, max_tokens;
    bool eq;           /* false: math */
    char expected[72]; /* math: the answer's digits (an optional '-') */
    double scores[RP_SCAN_EQ_MAX];
    int n_scores;
    double scale; /* eq: the scores' range (default 10) */
    int line;
} rp_scan_gen;

typedef struct rp_scan_set {
    int32_t *tok;
    size_t n_tok;
    rp_scan_seq *seq;
    int n_seq;
    size_t n_rows;   /* decoded tokens in all (rows of the prefix hidden states) */
    size_t n_scored; /* scored rows in all */
    int max_dec;     /* the longest sequence's n_dec (the contexts' n_ctx) */
    int *group; /* [n_group + 1]: group g decodes sequences group[g] .. group[g+1]-1 together */
    int n_group;
    int max_group; /* most sequences in one group (the contexts' n_seq_max) */
    rp_scan_item *items;
    int n_items, n_choice_items;
    rp_scan_gen *gen; /* generation probes (not in seq) */
    int n_gen, n_math, n_eq;
    int max_gen; /* the longest prompt + budget */
} rp_scan_set;

/* The chunks of a tokenized text as the perplexity evaluation cuts them
 * (BOS replacing each chunk's first token where the vocabulary adds one,
 * second half scored), n_batch / c chunks decoded together (at least one). */
rp_status rp_scan_set_text(rp_scan_set *set, const int32_t *tokens, const rp_eval_windows *w,
                           int n_batch);
/* A probe file: JSON Lines, one object per line (blank lines skipped):
 *   {"prompt": "...", "answer": "..."}                      free answer
 *   {"prompt": "...", "choices": ["...", ...], "answer": K}  K: index or the choice's text
 *   {"prompt": "...", "answer": 1234}                       math (a JSON integer)
 *   {"prompt": "...", "scores": [7, 0, 3]}                  EQ-style
 * with an optional "max_tokens" (the generation budget, default 16) on math
 * and EQ probes and "scale" (default 10) on EQ probes; or llama-perplexity's
 * HellaSwag text (6 lines per task: context, the right ending's index, 4
 * endings) or its --multiple-choice binary file, read as multiple-choice items
 * (context + " " + ending).
 * The prompt is tokenized with BOS where the vocabulary adds one; prompt and
 * answer are tokenized together, and the answer's tokens are those after the
 * longest prefix shared with the prompt alone. Groups pack sequences up to
 * n_batch tokens per decode.
 *   RP_ERR_FORMAT  a malformed line (the message names name:line and the field) */
rp_status rp_scan_set_probes(rp_scan_set *set, const rp_model *model, const char *text, size_t len,
                             const char *name, int n_batch);
void rp_scan_set_free(rp_scan_set *set);

typedef struct rp_scan_block {
    int i, j; /* source layers [i, j) run twice */
} rp_scan_block;

/* Every block with start <= i < j <= end and j - i <= max_extra (0: no
 * limit), ordered by j, then i (the order in which prefixes are reused).
 * *out is malloc'ed.
 *   RP_ERR_INVALID_ARG  a range outside 0..n_layer or one holding no block */
rp_status rp_scan_blocks(int n_layer, int start, int end, int max_extra, rp_scan_block **out,
                         int *n);

/* A plan of disjoint RYS blocks, sorted by i (the --repeat-layers grammar):
 * what a scan on top of a base plan and a beam search evaluate. */
#define RP_SCAN_MAX_BLOCKS 16
#define RP_SCAN_PLAN_LEN   160 /* room for the spec text of any rp_scan_plan */

typedef struct rp_scan_plan {
    int n; /* blocks; 0 = the identity */
    rp_scan_block b[RP_SCAN_MAX_BLOCKS];
} rp_scan_plan;

/* Parses "i,j;k,l" or "i-j;k-l" (any order, disjoint, 0 <= i < j <= n_layer;
 * NULL or "" is the identity).
 *   RP_ERR_PLAN  a malformed, empty, overlapping or out-of-range block, named */
rp_status rp_scan_plan_parse(const char *spec, int n_layer, rp_scan_plan *out);
/* The canonical spec "i-j;k-l" (blocks by i; "" for the identity): no comma,
 * so it is a CSV field as it stands and --repeat-layers reads it. */
void rp_scan_plan_format(const rp_scan_plan *p, char *buf, size_t size);
int rp_scan_plan_extra(const rp_scan_plan *p); /* extra layers: sum of j - i */
/* Whether block [i,j) is disjoint from every block of p. */
bool rp_scan_plan_disjoint(const rp_scan_plan *p, int i, int j);
/* p with block [i,j) added in its place. RP_ERR_PLAN: overlapping, or more
 * than RP_SCAN_MAX_BLOCKS blocks. */
rp_status rp_scan_plan_add(const rp_scan_plan *p, int i, int j, rp_scan_plan *out);
/* The plan step at which block [i,j) added to p starts to differ from p: its
 * steps before that are p's (j plus the extra layers of p's blocks before it). */
int rp_scan_plan_fork(const rp_scan_plan *p, int i, int j);
/* Keeps the blocks of shard k of n (1 <= k <= n) in place: whole end layers j
 * (so the prefix reuse holds inside a shard), given to the shards greedily by
 * their work, largest first. Returns the count kept. */
int rp_scan_shard(rp_scan_block *blocks, int n_blocks, int n_layer, int k, int n);

#define RP_SCAN_KLD_MEM_MAX ((size_t)256 << 20)

typedef struct rp_scan_params {
    rp_scan_metric metric;
    int n_threads; /* 0: physical cores */
    int type_k, type_v;
    int n_batch;        /* tokens per pass; 0 = 512 */
    bool reuse;         /* prefix reuse (falls back to whole plans where the architecture cannot) */
    const char *device; /* rp_context_params.device of every plan's context (NULL: the CPU) */
    float res_scale;    /* residual scale of each block's second pass ("i,j@s=F"); 0 or 1: none */
    /* kld: the identity's encoded distributions stay in memory up to this many
     * bytes (0: RP_SCAN_KLD_MEM_MAX), beyond it in an unlinked temporary file
     * under $TMPDIR (or /tmp) */
    size_t kld_mem_max;
    /* combined: the metrics it combines, bits (1 << RP_SCAN_MATH) etc. (0:
     * every one of math, eq and mc the workload has) */
    unsigned combine;
    /* Called between decode calls with the fraction of the current
     * evaluation done; returning false cancels it (RP_ERR_CANCELLED). */
    rp_progress_fn progress;
    void *progress_user;
} rp_scan_params;

typedef struct rp_scan_result {
    double value;    /* ppl: perplexity; kld: mean KLD; probe: mean answer log-probability */
    double unc;      /* its uncertainty as the eval core estimates it (0 for probe) */
    double delta;    /* value minus the identity plan's value */
    double accuracy; /* probe: fraction of multiple-choice items whose answer scores highest; -1:
                        none */
    double seconds; /* wall time of the evaluation (a block that advanced the prefix includes it) */
    /* generation probes: the mean scores, -1 where the workload has none */
    double math, eq;
} rp_scan_result;

typedef struct rp_scan rp_scan;

/* Checks the workload against the model (vocabulary, training context) and
 * the parameters; allocates nothing large yet. The model and set must outlive
 * the scan.
 *   RP_ERR_INVALID_ARG  a workload that does not fit the model, bad parameters */
rp_status rp_scan_new(const rp_model *model, const rp_scan_set *set, const rp_scan_params *p,
                      rp_scan **out);
/* Evaluates the identity plan (first: every block is measured against it).
 *   statuses of rp_decode; RP_ERR_CANCELLED from the progress callback */
rp_status rp_scan_identity(rp_scan *s, rp_scan_result *r);
/* Evaluates block (i,j) ("--repeat-layers i,j"). Statuses as identity, and
 * RP_ERR_PLAN for a block the model refuses, RP_ERR_INVALID_ARG before the
 * identity was evaluated. */
rp_status rp_scan_block_eval(rp_scan *s, int i, int j, rp_scan_result *r);
/* Evaluates plan p. fork: the plan step up to which the residual stream is
 * kept for the next plan (rp_scan_plan_fork: plans that share their first
 * fork steps run them once; 0: no reuse). Statuses as rp_scan_block_eval. */
rp_status rp_scan_plan_eval(rp_scan *s, const rp_scan_plan *p, int fork, rp_scan_result *r);
/* Whether blocks run from the saved prefix (false: reuse off, or an
 * architecture whose forward runs whole plans only). */
bool rp_scan_reusing(const rp_scan *s);
/* Bytes of memory held for the prefix hidden states and the identity's
 * distributions. */
uint64_t rp_scan_bytes(const rp_scan *s);
/* Plan steps run per decoded token so far, all evaluations together (the
 * work the reuse saves shows here). */
uint64_t rp_scan_steps_run(const rp_scan *s);
void rp_scan_free(rp_scan *s);

/* The CSV:
 *   # reprise scan 1
 *   # key: value                 (settings; see docs/scan.md)
 *   i,j,extra,metric,value,delta,seconds
 *   3,5,2,ppl,54.1234,-0.1646,0.412 */

#define RP_SCAN_CSV_MAGIC     "# reprise scan 2"
#define RP_SCAN_CSV_HEADER    "i,j,extra,metric,value,delta,seconds,plan"
#define RP_SCAN_CSV_MAGIC_V1  "# reprise scan 1" /* read: rows without the plan column */
#define RP_SCAN_CSV_HEADER_V1 "i,j,extra,metric,value,delta,seconds"

/* One evaluated plan: i,j the block it added (the heatmap's cell), extra the
 * whole plan's extra layers, plan its canonical spec (rp_scan_plan_format;
 * "" in a row given to rp_scan_csv_add: the single block i-j). */
typedef struct rp_scan_row {
    int i, j, extra;
    double value, delta, seconds;
    char plan[RP_SCAN_PLAN_LEN];
} rp_scan_row;

typedef struct rp_scan_csv {
    char **key, **val; /* [n_meta] settings in file order */
    bool *check;       /* [n_meta] must match when a file is resumed */
    int n_meta;
    char *metric; /* the metric column (== the "metric" setting) */
    rp_scan_row *rows;
    int n_rows, cap_rows;
} rp_scan_csv;

/* Adds or replaces a setting; check: a resumed file must have the same value.
 *   RP_ERR_INVALID_ARG  a key or value with a newline, or a key with ':' */
rp_status rp_scan_csv_set(rp_scan_csv *csv, const char *key, bool check, const char *fmt, ...)
    RP_TOOLS_PRINTF(4, 5);
const char *rp_scan_csv_get(const rp_scan_csv *csv, const char *key);
/* RP_ERR_INVALID_ARG: a block that is there already. */
rp_status rp_scan_csv_add(rp_scan_csv *csv, const rp_scan_row *row);
const rp_scan_row *rp_scan_csv_find(const rp_scan_csv *csv, int i, int j); /* plan "i-j" */
const rp_scan_row *rp_scan_csv_find_plan(const rp_scan_csv *csv, const char *plan);
/* Reads a scan CSV (RP_ERR_IO unreadable; RP_ERR_FORMAT a bad line, named by
 * file and line; a block given twice is an error). */
rp_status rp_scan_csv_read(const char *path, rp_scan_csv *csv);
/* Refuses (RP_ERR_INVALID_ARG) a file (read from path) whose checked settings
 * differ from want's, naming the setting and both values. */
rp_status rp_scan_csv_check(const rp_scan_csv *file, const rp_scan_csv *want, const char *path);
/* Writes the whole file atomically (a reader never sees half a row); RP_ERR_IO. */
rp_status rp_scan_csv_write(const char *path, const rp_scan_csv *csv);
void rp_scan_csv_free(rp_scan_csv *csv);

/* The rows ranked best first (sign: rp_scan_metric_sign; ties: fewer extra
 * layers first, then row order), rows whose delta is not finite left out:
 * order[0..*n_order) are indices into rows. order has room for n. */
void rp_scan_rank(const rp_scan_row *rows, int n, int sign, int *order, int *n_order);
/* Best block per extra-layer count (the Pareto list). best[k] for k =
 * 1..max_extra is the index into rows of the best block with k extra layers,
 * -1 where none; on_front[k] marks those better than every block with fewer
 * extra layers (and than the identity). Both have room for max_extra + 1. */
void rp_scan_pareto(const rp_scan_row *rows, int n, int sign, int max_extra, int *best,
                    bool *on_front);

/* The heatmap: start layer i down, end layer j across, one cell per block
 * coloured on a diverging scale centred on zero (blue better, red worse; each
 * side scaled to its largest magnitude with a square-root ramp, the legend
 * reads the values), the best blocks outlined and numbered, the Pareto list
 * beside. */
typedef struct rp_heatmap {
    const rp_scan_row *rows; /* blocks scanned (delta per block) */
    int n_rows;
    int start, end;    /* layer range of the scan: start <= i < j <= end */
    int max_extra;     /* 0: no limit */
    int sign;          /* +1: a larger delta is better; -1: a smaller one */
    const char *title; /* first line, e.g. the model and metric */
    const char *note;  /* second line, e.g. the text, window and identity value */
    const char *unit;  /* the legend's caption: "PPL change", "KLD", ... */
    int n_best;        /* best blocks marked with their rank (0: none) */
    /* the plan the blocks were added to (NULL: none): its blocks' cells are
     * hatched and labelled "base" */
    const rp_scan_plan *base;
} rp_heatmap;

/* Draws the heatmap and writes it as an 8-bit RGB PNG, atomically.
 *   RP_ERR_INVALID_ARG  an empty range; RP_ERR_IO the file cannot be written */
rp_status rp_heatmap_write_png(const rp_heatmap *h, const char *path);

/* ==== chat templates ========================================================
 * Render a conversation into the prompt text a model expects. The template
 * family is detected from the model's tokenizer.chat_template text (or named
 * explicitly); each family is rendered by C code that produces exactly what
 * the Jinja template produces for the same messages. */

typedef struct rp_chat_msg {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} rp_chat_msg;

/* Renders msgs with the model's template (or the family named by `name`, e.g.
 * "chatml", "llama3"; NULL = detect from the model). add_assistant appends the
 * opening of the assistant's turn. *out is malloc'ed (caller frees).
 *   RP_ERR_UNSUPPORTED  no template, or one no family recognises (the message
 *                       names the problem and --chat-template)
 *   RP_ERR_INVALID_ARG  an unknown family or role, a conversation the template
 *                       refuses (roles not alternating, a system message it
 *                       has no place for) */
rp_status rp_chat_apply(const rp_model *m, const char *name, const rp_chat_msg *msgs, size_t n,
                        bool add_assistant, char **out);
/* Comma-separated names accepted by rp_chat_apply, for --help. */
const char *rp_chat_names(void);

typedef struct rp_chat_opts {
    const char *name;          /* family; NULL = detect from template */
    const char *template_text; /* Jinja text the family and its variant are read from (may be NULL
                                  with name) */
    const char *bos, *eos;     /* bos_token / eos_token texts ("" if the model has none) */
    bool add_assistant;        /* add_generation_prompt */
    int enable_thinking;       /* Qwen3: -1 = template default (thinking on), 0 = off (empty
                                  <think></think>), 1 = on */
} rp_chat_opts;

/* The family a template text belongs to, or NULL if none is recognised. */
const char *rp_chat_detect(const char *template_text);
/* Renders msgs as o says. Statuses as rp_chat_apply. */
rp_status rp_chat_render(const rp_chat_opts *o, const rp_chat_msg *msgs, size_t n, char **out);
/* rp_chat_apply with options: o->template_text, bos and eos, when NULL, come
 * from the model. Statuses as rp_chat_apply. */
rp_status rp_chat_apply_opts(const rp_model *m, const rp_chat_opts *o, const rp_chat_msg *msgs,
                             size_t n, char **out);

/* ==== speculative decoding ==================================================
 * A draft proposes a few tokens cheaply; the target context (the caller's,
 * running its own plan) checks them all in one batch and keeps the longest
 * prefix it agrees with, plus one token of its own. The draft is either
 * another plan over the same model (its own context and state, sharing the
 * weights and the target's threads; it never inherits the target's plan: no
 * draft_plan means the trunk once, in order), or the model's NextN / MTP head,
 * which drafts from the target's last hidden state.
 *
 * Greedy sampling (temp <= 0) produces exactly the tokens plain decoding
 * produces. With temperature, a drafted token d drawn from the draft's q is
 * kept with probability min(1, p(d)/q(d)); at the first rejection the
 * replacement is drawn from max(0, p - q) normalized: the output follows the
 * target's distribution exactly (p and q are the sampler chain's
 * distributions, rp_sampler_probs). After a rejection both forget the rejected
 * positions (truncation, or a checkpoint restore for recurrent state). A
 * sequence's last token is decoded together with the next step's drafts, so
 * its logits are never computed twice; the target verifies in its one-token
 * orders, so each row equals plain decoding's one-token decode bit for bit. */

#define RP_SPEC_DRAFT_MAX 64 /* largest draft_max */

typedef struct rp_spec_params {
    const char
        *draft_plan; /* the draft's layer map (--layer-map syntax); NULL or "" = the trunk once */
    bool mtp;        /* draft with the model's NextN / MTP head instead of a plan */
    int draft_max;   /* tokens drafted per step, 1..RP_SPEC_DRAFT_MAX (0 = default) */
    int draft_min;   /* a draft shorter than this is dropped (the step decodes plainly) */
    float p_min;     /* stop drafting at a token whose draft probability (softmax of the
                        raw logits) is below p_min; 0 = never */
} rp_spec_params;

rp_spec_params rp_spec_default_params(void);

typedef struct rp_spec_stats {
    uint64_t steps;     /* verification passes */
    uint64_t drafted;   /* drafted tokens the target checked */
    uint64_t accepted;  /* of those, kept */
    uint64_t generated; /* tokens produced */
} rp_spec_stats;

typedef struct rp_spec rp_spec;

/* Builds the draft beside target (same model, n_ctx, sequences, pass size, KV
 * types and threads). The target must outlive the spec and is driven by it:
 * between rp_spec_seq_reset and the end, do not decode the spec's sequences
 * in the target directly.
 *   RP_ERR_INVALID_ARG  draft_max out of range, mtp with a draft plan, mtp on
 *                       a target made without keep_hidden
 *   RP_ERR_UNSUPPORTED  mtp on a model without a NextN / MTP head
 *   RP_ERR_PLAN         a draft plan the model refuses */
rp_status rp_spec_new(rp_context *target, const rp_spec_params *params, rp_spec **out);
void rp_spec_free(rp_spec *s); /* NULL is fine */

/* The draft's context (NULL with mtp): its plan report, its state size. */
const rp_context *rp_spec_draft_context(const rp_spec *s);
/* Bytes of state the draft adds (its KV / recurrent state, or the MTP head's KV). */
uint64_t rp_spec_state_bytes(const rp_spec *s);
/* One line on the draft: "draft: plan 0..2,4 (4 steps), draft-max 8" (like snprintf). */
int rp_spec_describe(const rp_spec *s, char *buf, size_t size);

/* Starts sequence seq over: clears it in every context and sets the sampling
 * of the target and of the draft (params->seed seeds the draws).
 *   RP_ERR_INVALID_ARG  seq outside the context */
rp_status rp_spec_seq_reset(rp_spec *s, int seq, const rp_sampler_params *params);
/* Appends tokens (a prompt, a user turn): decodes them into the target in one
 * call as plain decoding decodes a prompt, keeping the last row's logits for
 * the next step (all but the last once rp_spec_prepare has been used: its rows
 * start with the last token), and all but the last into the draft; remembers
 * them in the samplers' penalty windows.
 *   RP_ERR_INVALID_ARG  a sequence not reset; statuses of rp_decode */
rp_status rp_spec_seq_feed(rp_spec *s, int seq, const int32_t *tokens, int n);
/* Constrains seq's sampling (the target's and the draft's) to grammar g, from
 * its current position on (not owned; NULL removes it; set it after
 * rp_spec_seq_reset, which removes it). Drafts follow the grammar and it is
 * rolled back over rejected ones; each generated token advances it.
 *   RP_ERR_INVALID_ARG  a sequence not reset */
rp_status rp_spec_seq_set_grammar(rp_spec *s, int seq, rp_grammar *g);
/* Calls fn on the target's and then the draft's sampler of seq (after
 * rp_spec_seq_reset): logit biases, DRY's vocabulary. Returns fn's first
 * failure; RP_ERR_INVALID_ARG for a sequence not reset. */
rp_status rp_spec_seq_each_sampler(rp_spec *s, int seq, rp_status (*fn)(rp_sampler *, void *),
                                   void *user);
/* Keeps the first n tokens of seq (a chat template rewrote history).
 * Statuses of rp_kv_seq_truncate. */
rp_status rp_spec_seq_truncate(rp_spec *s, int seq, int n);
/* Tokens in seq (fed and generated). */
int rp_spec_seq_len(const rp_spec *s, int seq);

/* One step: draft, verify, accept. Writes 1 .. min(max_new, draft_max + 1)
 * tokens to out (room for draft_max + 1 needed) and appends them to seq;
 * output stops after an end-of-generation token. Needs a non-empty sequence
 * whose last token fits the context (rp_spec_seq_len <= n_ctx); a step never
 * produces a token beyond position n_ctx.
 *   RP_ERR_INVALID_ARG  an empty sequence, max_new < 1
 *   RP_ERR_CONTEXT_FULL no room for the last token; statuses of rp_decode */
rp_status rp_spec_step(rp_spec *s, int seq, int max_new, int32_t *out, int *n_out);

/* rp_spec_step in two halves, for a caller that verifies several sequences
 * in one batch of its own (a server): rp_spec_prepare drafts and writes the
 * rows to verify (the sequence's last token and the drafted tokens; room for
 * draft_max + 1) to tokens; the caller decodes them in the target as
 * consecutive rows of sequence seq, continuing it, with logits for every one
 * (and nothing else of that sequence in the batch); rp_spec_finish, given the
 * batch row of the first of them, accepts as rp_spec_step does. Other
 * sequences may be prepared, decoded and finished in between; a prepared
 * sequence is finished (or reset, or truncated) before anything else is done
 * with it. Statuses as rp_spec_step. */
rp_status rp_spec_prepare(rp_spec *s, int seq, int max_new, int32_t *tokens, int *n_tokens);
rp_status rp_spec_finish(rp_spec *s, int seq, int row, int32_t *out, int *n_out);

/* Counters of seq (or of every sequence with seq = -1) since the spec began. */
rp_spec_stats rp_spec_get_stats(const rp_spec *s, int seq);

/* The acceptance rule on one row (exposed for its statistical test): draft
 * token d was drawn from q; p is the target's distribution (both n floats,
 * summing to 1). u1, u2 uniform in [0,1). Returns d when accepted (*accepted
 * true), else a token drawn with u2 from max(0, p - q) normalized (from p
 * when that is empty, which only rounding can cause). */
int32_t rp_spec_accept_rule(const float *p, const float *q, int n, int32_t d, double u1, double u2,
                            bool *accepted);

/* ==== quantize ==============================================================
 * A model's weights rewritten in another type, with the per-tensor mixtures
 * llama.cpp uses for its _S/_M/_L types, so a Q4_K_M made here holds the same
 * types (and, from the same F32 source, the same bytes) as llama.cpp's. 1-D
 * tensors become F32; norms, routers and positional tables keep their type; a
 * tensor whose rows do not divide into the type's blocks falls back to one
 * that fits (as llama.cpp does); adapter tensors (*ffn_gate_up_adapter_*)
 * stay F16 unless pure or an override names them. Planning reads no tensor
 * data; writing converts one tensor at a time, rows spread over the threads. */

typedef struct rp_quantize_params {
    const char *type;      /* Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S/M/L Q4_K_S/M Q5_K_S/M Q6_K IQ4_NL
                              IQ4_XS F16 BF16 F32 (case-insensitive; rp_quantize_type_list) */
    int n_threads;         /* 0 = physical cores */
    bool pure;             /* one type for every 2-D weight: no mixture, no F16 adapters */
    bool allow_requantize; /* accept quantized input (quality suffers) */
    /* "REGEX=TYPE" overrides (POSIX extended regular expressions on tensor
     * names; the first that matches wins, over the mixture) */
    const char *const *tensor_types;
    int n_tensor_types;
} rp_quantize_params;

rp_quantize_params rp_quantize_default_params(void);
/* "Q4_0 Q4_1 ... F32": the types rp_quantize_params.type accepts. */
const char *rp_quantize_type_list(void);
/* llama.cpp's file type (general.file_type) of a target name (as
 * rp_quantize_params.type), or -1 when it is not one of the list. */
int rp_quantize_ftype(const char *name);

/* One tensor of the plan. */
typedef struct rp_quantize_tensor {
    const char *name;
    int type_in, type_out;
    int fallback_from; /* the type chosen first when its blocks did not fit the rows, else -1 */
    int64_t row;       /* elements per row (ne[0]) */
    uint64_t bytes_in, bytes_out;
} rp_quantize_tensor;

typedef struct rp_quantize_plan rp_quantize_plan;

/* Reads in_path's header and chooses every tensor's type.
 *   RP_ERR_INVALID_ARG  an unknown type, a malformed override ("--tensor-type
 *                       'x': expected REGEX=TYPE", a bad regular expression,
 *                       a type reprise cannot write)
 *   RP_ERR_UNSUPPORTED  a quantized tensor without allow_requantize, a tensor
 *                       type reprise cannot read (the message names the tensor)
 *   statuses of rp_gguf_open */
rp_status rp_quantize_plan_new(const char *in_path, const rp_quantize_params *p,
                               rp_quantize_plan **out);
void rp_quantize_plan_free(rp_quantize_plan *q); /* NULL is fine */
/* The target's name as the table spells it ("Q4_K_M"). */
const char *rp_quantize_plan_type(const rp_quantize_plan *q);
uint64_t rp_quantize_plan_n_tensors(const rp_quantize_plan *q);
/* Tensor i (file order); false when i is out of range. */
bool rp_quantize_plan_tensor(const rp_quantize_plan *q, uint64_t i, rp_quantize_tensor *out);
/* Totals of the plan; *n_fallback (may be NULL) counts the fallbacks. */
void rp_quantize_plan_totals(const rp_quantize_plan *q, uint64_t *bytes_in, uint64_t *bytes_out,
                             int *n_fallback);
/* Writes the quantized file (metadata copied, general.file_type set, the new
 * weights' own content hash stamped), atomically.
 *   RP_ERR_IO  the file cannot be written; RP_ERR_CANCELLED from progress */
rp_status rp_quantize_plan_write(rp_quantize_plan *q, const char *out_path, rp_progress_fn progress,
                                 void *user);

/* ==== merge =================================================================
 * A context's plan written as a physically merged GGUF, for engines that have
 * no plans: every step's tensors are copied to its new layer index, the
 * NextN/MTP head layers follow the trunk, per-layer arrays are re-indexed,
 * block_count and general.name updated, and the architecture adds whatever
 * metadata keeps each step's kind explicit. The merged file gives the same
 * logits as the plan (and costs the repeated layers' weights again). */

typedef struct rp_merge_info {
    int n_layer_out; /* layers of the merged file (steps + head layers) */
    int n_src;       /* layers of the source file (trunk and head layers) */
    int n_repeated;  /* steps beyond the trunk: n_eff - n_src */
    uint64_t bytes;  /* size of the file */
} rp_merge_info;

/* info may be NULL.
 *   RP_ERR_IO  the file cannot be written; RP_ERR_CANCELLED from progress;
 *   RP_ERR_UNSUPPORTED  the context has LoRA adapters or step deltas */
rp_status rp_merge_write(const rp_context *ctx, const char *path, rp_progress_fn progress,
                         void *user, rp_merge_info *info);

/* ==== convert ===============================================================
 * Hugging Face checkpoints (config.json, *.safetensors, tokenizer.json) to GGUF
 * files with the key names, tensor names and layouts llama.cpp's
 * convert_hf_to_gguf.py writes, so the files load in llama.cpp as well as in
 * reprise. Planning reads no tensor data: the dry run is the plan printed. */

typedef struct rp_convert_params {
    const char *dir;         /* the checkpoint directory */
    int outtype;             /* type of the 2-D weights: RP_TYPE_F32, F16, BF16 or Q8_0; -1 = auto
                              * (the checkpoint's 16-bit type, else F16, as llama.cpp guesses) */
    bool vocab_only;         /* metadata and tokenizer only: no weights are read */
    bool no_vocab;           /* no tokenizer: tokenizer.ggml.model = "none" */
    bool shapes_from_config; /* a directory without weights is planned from config.json
                              * (for a dry run; needs the architecture's shapes callback) */
    const char *vocab_pre;   /* force tokenizer.ggml.pre of a byte-level BPE tokenizer */
    const char *arch_opts;   /* options of the architecture's converter, "key[=value],..."
                              * (Zamba2: "merged", the older form with each visit's adapter
                              * baked into a full per-layer matrix); other keys are refused */
    const char *lora_dir;    /* a PEFT LoRA directory (adapter_config.json,
                              * adapter_model.safetensors): write a LoRA adapter GGUF
                              * (general.type = adapter) for the base model of dir (whose
                              * config.json alone is read; dir may be lora_dir when it holds
                              * one). A layer_replication adapter also records its plan
                              * (adapter.reprise.layer_map). */
} rp_convert_params;

rp_convert_params rp_convert_default_params(void);

typedef struct rp_conv rp_conv;

/* Reads config.json, the tokenizer and the tensor table, and plans the whole
 * output (metadata, tokenizer keys, every tensor's name, type, shape and
 * source). No tensor data is read. On failure *out is NULL.
 *   RP_ERR_IO           a file of the checkpoint cannot be read
 *   RP_ERR_FORMAT       a malformed config.json, tokenizer or safetensors header
 *                       (the message names the file and the field)
 *   RP_ERR_UNSUPPORTED  an architecture or tokenizer reprise does not convert
 *   RP_ERR_INVALID_ARG  conflicting parameters, an unknown architecture option, an
 *                       unused checkpoint tensor */
rp_status rp_conv_open(const rp_convert_params *p, rp_conv **out);
void rp_conv_free(rp_conv *cv); /* NULL is fine */

const char *rp_conv_hf_arch(const rp_conv *cv);   /* "LlamaForCausalLM" */
const char *rp_conv_arch_name(const rp_conv *cv); /* its general.architecture: "llama" */
bool rp_conv_from_shapes(const rp_conv *cv);      /* planned from config.json alone */
int64_t rp_conv_n_tokens(const rp_conv *cv);      /* tokens written (0 without a vocabulary) */
size_t rp_conv_n_out(const rp_conv *cv);          /* tensors of the output */
uint64_t rp_conv_file_size(const rp_conv *cv);
/* The architectures rp_conv_open converts, for messages. Static text. */
const char *rp_conv_arch_list(void);

/* Output tensor i of the plan. */
typedef struct rp_conv_tensor {
    const char *name;
    int type;
    uint32_t n_dims;
    int64_t ne[4]; /* GGUF order: ne[0] is contiguous */
    uint64_t bytes;
} rp_conv_tensor;
/* false when i is out of range. */
bool rp_conv_tensor_at(const rp_conv *cv, size_t i, rp_conv_tensor *out);
/* Where tensor i comes from, as the dry-run table says it: "model.x.weight
 * (BF16) + ..., what the producer does". Returns the length needed (like
 * snprintf); -1 when i is out of range. */
int rp_conv_tensor_from(const rp_conv *cv, size_t i, char *buf, size_t size);

/* Streams every tensor into path (temporary file + rename; nothing is left
 * on failure or cancel).
 *   RP_ERR_INVALID_ARG  a plan made from config.json alone
 *   RP_ERR_IO / RP_ERR_FORMAT  a checkpoint file unreadable or short, the
 *                       output unwritable; RP_ERR_CANCELLED from progress */
rp_status rp_conv_write(rp_conv *cv, const char *path, rp_progress_fn progress, void *user);

/* ==== synth =================================================================
 * Deterministic random-weight models (same seed, same bytes) for tests,
 * benchmarks and the demo: their text is noise, their arithmetic the real
 * thing. */

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

/* Writes the model atomically.
 *   RP_ERR_INVALID_ARG  an unknown architecture, shapes that do not fit together
 *                       (the message names the parameter)
 *   RP_ERR_UNSUPPORTED  an architecture without a synthesizer, a type reprise
 *                       cannot write
 *   RP_ERR_FORMAT       a vocab_path file without a tokenizer
 *   RP_ERR_IO  the file cannot be written; RP_ERR_CANCELLED from progress */
rp_status rp_synth_write(const rp_synth_params *p, const char *path, rp_progress_fn progress,
                         void *user);

/* ==== benchmarks ============================================================ */

/* Memory read bandwidth: the best of 3 passes of n_threads threads (0 =
 * physical cores) over a buffer of mib MiB (far larger than the caches), in
 * GB/s. RP_ERR_INVALID_ARG for mib < 1. */
rp_status rp_bench_bandwidth(int n_threads, size_t mib, double *gbs);

/* The cost of one product of a weight matrix of a type (rows of n inputs, about
 * mib MiB, packed as a loaded model's would be) with a number of tokens: what
 * `reprise bench --kernels` tabulates. The matrix repeats a few distinct
 * random rows, so building it is quick. */
typedef struct rp_bench_matmul rp_bench_matmul;
/*   RP_ERR_INVALID_ARG  a type reprise cannot compute and write, n not a
 *                       multiple of its block size, n < 32 or mib < 1 */
rp_status rp_bench_matmul_new(int type, int n, int mib, int n_threads, rp_bench_matmul **out);
void rp_bench_matmul_free(rp_bench_matmul *b); /* NULL is fine */
typedef struct rp_bench_matmul_info {
    int rows, n, n_threads;
    uint64_t bytes; /* of the matrix as stored in the file's type */
    bool packed;    /* re-laid out in panels, as a loaded model's weights are */
} rp_bench_matmul_info;
void rp_bench_matmul_get_info(const rp_bench_matmul *b, rp_bench_matmul_info *out);
/* One warm-up call, then reps timed calls with n_tokens tokens (1..512): the
 * fastest wall time and the process CPU time per call, in seconds.
 *   RP_ERR_INVALID_ARG  n_tokens or reps out of range */
rp_status rp_bench_matmul_run(rp_bench_matmul *b, int n_tokens, int reps, double *wall_s,
                              double *cpu_s);

RP_API_END

#ifdef __cplusplus
}
#endif
#endif /* REPRISE_TOOLS_H */
