/* A weight tensor as the compute code sees it: type, shape and where its bytes
 * are. Several model slots may point at one rp_tensor (shared weights). */
#ifndef RP_TENSOR_H
#define RP_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef struct rp_tensor {
    const char *name;
    int type; /* rp_type */
    int n_dims;
    int64_t ne[4]; /* ne[0]: row length (contiguous), ne[1]: rows, ... */
    size_t nbytes;
    size_t row_bytes; /* bytes of one ne[0] row */
    const void *data; /* into the file mapping, or owned by the model */
    const void *pack; /* the same weights re-laid out for this CPU's matrix kernels
                         (rp_matmul_pack, owned by the model), or NULL */
} rp_tensor;

static inline const void *rp_tensor_row(const rp_tensor *t, int64_t r) {
    return (const char *)t->data + (size_t)r * t->row_bytes;
}

#endif
