/* GGUF v2/v3 reader and writer. The reader treats the file as untrusted: every
 * count, length, offset and dimension is checked against the file size with
 * overflow-checked arithmetic before it is used, and nothing is allocated from
 * a count before that count has been bounded by the bytes that hold it.
 * This module knows nothing of models. */
#ifndef RP_GGUF_H
#define RP_GGUF_H

#include "reprise.h"
#include "reprise_tools.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RP_GGUF_MAGIC             0x46554747u /* "GGUF" little-endian */
#define RP_GGUF_DEFAULT_ALIGNMENT 32
/* rp_gguf_type, the value / key / tensor views and the reader are public
 * (reprise.h, reprise_tools.h); the rest of the reader and the writer are
 * internal. */

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

/* Typed getters (rp_gguf_get_u32 ... _str are public): the _req variant
 * returns RP_ERR_FORMAT for an absent key. */
rp_status rp_gguf_req_u32(const rp_gguf *g, const char *key, uint32_t *out);
/* An array value of the given element type (any integer type for
 * RP_GGUF_INT32 requests is NOT converted: the caller reads with
 * rp_gguf_arr_i64). NULL with found=false if absent. */
rp_status rp_gguf_get_arr(const rp_gguf *g, const char *key, const rp_gguf_val **out, bool *found);
bool rp_gguf_type_is_int(int type);

/* ---- writer -------------------------------------------------------------- */

/* Replaces a file's mapping by a private copy at the same addresses (read
 * with pread: a file that shrinks meanwhile is an error, not a SIGBUS); after
 * it the file may change on disk. RP_ERR_IO if the file changed since it was
 * opened or could not be read whole (the reader is then unusable: close it). */
rp_status rp_gguf_detach(rp_gguf *g);

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
