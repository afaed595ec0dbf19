/* The trace hook: named intermediates of a forward handed to the caller. */
#include "core/context.h"
#include "base/util.h"

#include <stdlib.h>

void rp_context_set_trace(rp_context *c, rp_trace_fn fn, void *user) {
    c->trace_fn = fn;
    c->trace_user = user;
}

void rp_trace_emit(const rp_context *c, const rp_ubatch *ub, const char *name, int e, int src,
                   const float *data, int n, int width, bool compacted) {
    if (!c->trace_fn || n <= 0) return;
    int32_t *pos = NULL, *seq = NULL;
    if (compacted) {
        /* the rows are the output rows now */
        pos = malloc((size_t)n * 2 * sizeof *pos);
        if (!pos) return; /* a trace is best effort: no memory, no tensor */
        seq = pos + n;
        for (int i = 0; i < n; i++) {
            pos[i] = ub->pos[ub->out_rows[i]];
            seq[i] = ub->seq[ub->out_rows[i]];
        }
    }
    const rp_trace_tensor t = {.name = name,
                               .step = e,
                               .src = src,
                               .n_rows = n,
                               .width = width,
                               .data = data,
                               .pos = compacted ? pos : ub->pos,
                               .seq = compacted ? seq : ub->seq};
    c->trace_fn(c->trace_user, &t);
    free(pos);
}
