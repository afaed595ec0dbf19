/* GGUF v2/v3 reader and writer. The reader treats the file as untrusted: every
 * count, length, offset and dimension is checked against the file size with
 * overflow-checked arithmetic before it is used, and nothing is allocated from
 * a count before that count has been bounded by the bytes that hold it.
 * This module knows nothing of models. */
#ifndef RP_GGUF_H
#define RP_GGUF_H

#include "reprise.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RP_GGUF_MAGIC             0x46554747u /* "GGUF" little-endian */
#define RP_GGUF_DEFAULT_ALIGNMENT 32
#define RP_GGUF_MAX_DIMS          4

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

const char *rp_gguf_type_name(int type);
/* Size in bytes of a fixed-size value type; 0 for string, array or unknown. */
size_t rp_gguf_type_size(int type);

/* A decoded value. Strings are NUL-terminated copies (len excludes the NUL;
 * a string may contain NUL bytes, so use len). Arrays of fixed-size elements
 * point at the raw little-endian bytes; arrays of strings or arrays hold one
 * decoded element each in elems. */
typedef struct rp_gguf_val {
    uint32_t type;
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
            uint32_t type;
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

/* Map and parse a file. On failure *out is NULL and rp_last_error() names the
 * problem and its byte offset. */
rp_status rp_gguf_open(const char *path, rp_gguf **out);
/* Parse a buffer the caller keeps alive (fuzzing, embedded models). */
rp_status rp_gguf_open_mem(const void *data, size_t size, rp_gguf **out);
void rp_gguf_close(rp_gguf *g);
/* The bytes [p, p + n) of a mapped file will not be read again (a tensor
 * whose only copy in use is a converted or re-laid-out one): the whole pages
 * inside the range leave the process's memory (MADV_DONTNEED; were they read
 * after all, they would come back from the file). A no-op for buffers opened
 * with rp_gguf_open_mem (embedded models, fuzz inputs) and for ranges outside
 * the mapping. */
void rp_gguf_release(const rp_gguf *g, const void *p, uint64_t n);
/* The same for the header (metadata and tensor table, parsed into copies;
 * fixed-size arrays read after this come back from the file). */
void rp_gguf_release_header(const rp_gguf *g);

uint32_t rp_gguf_version(const rp_gguf *g);
uint64_t rp_gguf_file_size(const rp_gguf *g);
uint64_t rp_gguf_alignment(const rp_gguf *g);
uint64_t rp_gguf_data_offset(const rp_gguf *g); /* start of the tensor data section */
const char *rp_gguf_path(const rp_gguf *g);     /* "" for memory buffers */

uint64_t rp_gguf_n_kv(const rp_gguf *g);
const rp_gguf_kv *rp_gguf_kv_at(const rp_gguf *g, uint64_t i);
const rp_gguf_val *rp_gguf_get(const rp_gguf *g, const char *key);

uint64_t rp_gguf_n_tensors(const rp_gguf *g);
const rp_gguf_tensor *rp_gguf_tensor_at(const rp_gguf *g, uint64_t i);
const rp_gguf_tensor *rp_gguf_find_tensor(const rp_gguf *g, const char *name);

/* Typed getters: RP_OK, or an error naming the key when it is present with
 * another type or a value out of range; absent keys return RP_ERR_FORMAT only
 * from the _req variants, otherwise leave *out untouched and return RP_OK with
 * *found = false (found may be NULL). Integer getters accept any integer type
 * whose value fits. */
rp_status rp_gguf_get_u32(const rp_gguf *g, const char *key, uint32_t *out, bool *found);
rp_status rp_gguf_get_i64(const rp_gguf *g, const char *key, int64_t *out, bool *found);
rp_status rp_gguf_get_f32(const rp_gguf *g, const char *key, float *out, bool *found);
rp_status rp_gguf_get_bool(const rp_gguf *g, const char *key, bool *out, bool *found);
rp_status rp_gguf_get_str(const rp_gguf *g, const char *key, const char **out, bool *found);
rp_status rp_gguf_req_u32(const rp_gguf *g, const char *key, uint32_t *out);
/* An array value of the given element type (any integer type for
 * RP_GGUF_INT32 requests is NOT converted: the caller reads with
 * rp_gguf_arr_i64). NULL with found=false if absent. */
rp_status rp_gguf_get_arr(const rp_gguf *g, const char *key, const rp_gguf_val **out, bool *found);
/* Element i of an integer/float/bool array as a wide value. */
int64_t rp_gguf_arr_i64(const rp_gguf_val *arr, uint64_t i);
double rp_gguf_arr_f64(const rp_gguf_val *arr, uint64_t i);
bool rp_gguf_type_is_int(int type);

/* ---- writer -------------------------------------------------------------- */

typedef struct rp_gguf_writer rp_gguf_writer;

rp_gguf_writer *rp_gguf_writer_new(void);
void rp_gguf_writer_free(rp_gguf_writer *w);

/* Metadata, in the order added. Setting a key that exists replaces its value in
 * place (keeping its position). Values are copied. */
rp_status rp_gguf_w_set(rp_gguf_writer *w, const char *key, const rp_gguf_val *val);
rp_status rp_gguf_w_set_u32(rp_gguf_writer *w, const char *key, uint32_t v);
rp_status rp_gguf_w_set_i32(rp_gguf_writer *w, const char *key, int32_t v);
rp_status rp_gguf_w_set_u64(rp_gguf_writer *w, const char *key, uint64_t v);
rp_status rp_gguf_w_set_f32(rp_gguf_writer *w, const char *key, float v);
rp_status rp_gguf_w_set_bool(rp_gguf_writer *w, const char *key, bool v);
rp_status rp_gguf_w_set_str(rp_gguf_writer *w, const char *key, const char *v);
/* Array of fixed-size elements (raw little-endian bytes, n elements). */
rp_status rp_gguf_w_set_arr(rp_gguf_writer *w, const char *key, int elem_type, const void *raw,
                            uint64_t n);
rp_status rp_gguf_w_set_arr_str(rp_gguf_writer *w, const char *key, const char *const *strs,
                                uint64_t n);
bool rp_gguf_w_remove(rp_gguf_writer *w, const char *key);
/* Copy every key of a reader (in its order). */
rp_status rp_gguf_w_copy_kv(rp_gguf_writer *w, const rp_gguf *g);

/* Tensors, in the order added; data is borrowed until the write finishes and
 * must hold exactly rp_row_size(type, ne[0]) * ne[1] * ne[2] * ne[3] bytes.
 * data may be NULL if a fill callback provides the bytes at write time. */
typedef rp_status (*rp_gguf_fill_fn)(void *user, uint64_t index, void *dst, uint64_t nbytes);
rp_status rp_gguf_w_add_tensor(rp_gguf_writer *w, const char *name, int type, uint32_t n_dims,
                               const int64_t *ne, const void *data);
void rp_gguf_w_set_fill(rp_gguf_writer *w, rp_gguf_fill_fn fill, void *user);
uint64_t rp_gguf_w_n_tensors(const rp_gguf_writer *w);
/* A file without tensors is padded to the alignment by default (as gguf-py
 * and ggml write it); older writers stopped right after the header. */
void rp_gguf_w_set_pad_empty(rp_gguf_writer *w, bool pad);

/* A string value completed once the tensor data is written (a digest of the
 * data, such as reprise.content_hash): `key` is written with `len`
 * placeholder bytes; `tensor` sees every tensor as it is written (file order;
 * t->data points at its bytes, t->offset is relative to the data section);
 * `finish` then fills exactly len bytes, written over the placeholder before
 * the file is committed. A failing callback fails the write. `free_user` (may
 * be NULL) releases user with the writer. One per writer. */
typedef struct rp_gguf_w_late {
    rp_status (*tensor)(void *user, const rp_gguf_tensor *t);
    rp_status (*finish)(void *user, char *value);
    void (*free_user)(void *user);
    void *user;
} rp_gguf_w_late;
rp_status rp_gguf_w_set_late_str(rp_gguf_writer *w, const char *key, size_t len,
                                 const rp_gguf_w_late *late);

/* Tensor i as added so far (name, type, shape, nbytes; data may be NULL when
 * a fill callback provides it); false when i is out of range. */
bool rp_gguf_w_tensor_info(const rp_gguf_writer *w, uint64_t i, rp_gguf_tensor *out);
/* Bytes the file will have. */
uint64_t rp_gguf_w_size(const rp_gguf_writer *w);
/* Write atomically (temporary file + rename); nothing is left on failure. */
rp_status rp_gguf_w_write(rp_gguf_writer *w, const char *path, rp_progress_fn progress, void *user);

#endif
