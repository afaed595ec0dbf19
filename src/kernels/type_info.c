/* The public view of the type table (types.c): what reprise can do with a type. */
#include "kernels/types.h"

#include <string.h>

bool rp_type_get_info(int type, rp_type_info *out) {
    memset(out, 0, sizeof *out);
    const rp_type_traits *t = rp_type_get(type);
    if (!t) return false;
    out->name = t->name;
    out->block_size = t->blck_size;
    out->block_bytes = t->type_size;
    out->quantized = t->is_quantized;
    out->can_read = t->to_float != NULL;
    out->can_write = t->from_float != NULL;
    out->can_compute = t->compute;
    return true;
}

size_t rp_type_row_bytes(int type, int64_t n) {
    return rp_row_size(type, n);
}
