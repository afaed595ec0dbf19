/* The plan of a conversion as public data: each output tensor's name, type,
 * shape, size and where it comes from (what the dry-run table prints). */
#include "convert/convert.h"
#include "kernels/types.h"

#include <string.h>

bool rp_conv_tensor_at(const rp_conv *cv, size_t i, rp_conv_tensor *out) {
    memset(out, 0, sizeof *out);
    if (i >= rp_conv_n_out(cv)) return false;
    const rp_conv_out *o = rp_conv_out_at(cv, i);
    out->name = o->name;
    out->type = o->type;
    out->n_dims = o->n_dims;
    memcpy(out->ne, o->ne, sizeof out->ne);
    out->bytes = rp_row_size(o->type, o->ne[0]) * (uint64_t)(o->ne[1] * o->ne[2] * o->ne[3]);
    return true;
}

int rp_conv_tensor_from(const rp_conv *cv, size_t i, char *buf, size_t size) {
    if (i >= rp_conv_n_out(cv)) {
        if (size) buf[0] = 0;
        return -1;
    }
    const rp_conv_out *o = rp_conv_out_at(cv, i);
    char from[1024];
    size_t k = 0;
    from[0] = 0;
    for (int s = 0; s < o->n_src && k < sizeof from; s++)
        k += (size_t)snprintf(from + k, sizeof from - k, "%s%s (%s)", s ? " + " : "",
                              o->src[s]->name, o->src[s]->dtype);
    if (o->note && k < sizeof from)
        snprintf(from + k, sizeof from - k, "%s%s", k ? ", " : "", o->note);
    return snprintf(buf, size, "%s", from);
}
