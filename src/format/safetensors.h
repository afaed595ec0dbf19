/* safetensors reader: single files, sharded checkpoints
 * (model.safetensors.index.json) and shape-only sets for dry runs.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {str: str}}) and the data section, whose offsets are relative
 * to byte 8 + N. The reader treats files as untrusted, as the GGUF reader does:
 * the header length, the JSON, every dtype, shape and offset pair are checked
 * with overflow-checked arithmetic, tensors may not overlap and must cover the
 * data section exactly (as the reference implementation requires), and every
 * message names the file, the tensor and a byte offset. Files are mapped, not
 * read. Tensors of any safetensors dtype are listed; only F32, F16 and BF16 are
 * given a reprise type (others have type -1 and are refused by name when their
 * data is read). This module knows nothing of models. */
#ifndef RP_SAFETENSORS_H
#define RP_SAFETENSORS_H

#include "reprise.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RP_ST_MAX_DIMS   8
#define RP_ST_MAX_HEADER (100u << 20) /* the reference implementation's limit */

typedef struct rp_st_tensor {
    const char *name;
    const char *dtype; /* as written: "F32", "BF16", "I64", ... */
    int type;          /* RP_TYPE_F32 / F16 / BF16, or -1 for a dtype reprise does not convert */
    uint32_t n_dims;   /* 0 (a scalar) .. RP_ST_MAX_DIMS */
    int64_t shape[RP_ST_MAX_DIMS]; /* as in the file: shape[n_dims-1] is contiguous */
    uint64_t n_elem;
    uint64_t nbytes;
    uint64_t offset;  /* absolute byte offset of the data in its file */
    const void *data; /* into the mapping; NULL for shape-only tensors */
    const char *file; /* the file holding it ("" for a memory buffer or a shape-only set) */
    uint32_t index;   /* position in the set */
} rp_st_tensor;

typedef struct rp_st rp_st;

/* One .safetensors file. On failure *out is NULL and rp_last_error() names the
 * problem, the tensor and the byte offset. */
rp_status rp_st_open(const char *path, rp_st **out);
/* Parse a buffer the caller keeps alive (fuzzing). */
rp_status rp_st_open_mem(const void *data, size_t size, rp_st **out);
/* A Hugging Face checkpoint directory: model.safetensors.index.json (every
 * shard it names, cross-checked against the weight map), else
 * model.safetensors, else every model*.safetensors file. A name found in two
 * files is an error. */
rp_status rp_st_open_dir(const char *dir, rp_st **out);
/* An empty shape-only set, filled with rp_st_add_shape (reprise convert
 * --dry-run from config.json alone). */
rp_st *rp_st_new_shapes(void);
rp_status rp_st_add_shape(rp_st *st, const char *name, int type, uint32_t n_dims,
                          const int64_t *shape);
void rp_st_close(rp_st *st);

uint64_t rp_st_n_tensors(const rp_st *st);
const rp_st_tensor *rp_st_tensor_at(const rp_st *st, uint64_t i);
const rp_st_tensor *rp_st_find(const rp_st *st, const char *name);
uint32_t rp_st_n_files(const rp_st *st);
/* A "__metadata__" string of the first file that has the key; NULL if none. */
const char *rp_st_metadata(const rp_st *st, const char *key);

/* Elements [first, first + n) of t (in file order) as F32. Refuses, naming the
 * tensor, dtypes other than F32/F16/BF16 and shape-only tensors. Safe for any
 * alignment of the data. */
rp_status rp_st_read_f32(const rp_st_tensor *t, uint64_t first, uint64_t n, float *dst);

#endif
