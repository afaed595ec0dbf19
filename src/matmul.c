#include "matmul.h"
#include "kernels/kernels.h"
#include "types.h"
#include "util.h"

#include <string.h>

size_t rp_matmul_scratch(int64_t n_in, int n_tok) {
    /* the widest activation encoding is F32 itself (no scratch) or Q8_K
     * (292 bytes per 256); Q8_0/Q8_1 need 36 per 32 */
    size_t per_row = (size_t)(n_in / 32 + 1) * 40;
    return per_row * (size_t)(n_tok > 0 ? n_tok : 1) + 64;
}

typedef struct mm_job {
    int n;
    const rp_tensor *const *w;
    float *const *y;
    const void *xq;     /* activations in the weight's vec_dot_type */
    size_t xq_stride;   /* bytes per token row of xq */
    int n_tok;
    long total_rows;    /* sum of rows over the n weights */
    const rp_kernels *k;
} mm_job;

/* Rows are split across threads over the concatenation of all n weights, in
 * chunks of 16 so a thread's slice of each weight is contiguous. For several
 * tokens, each weight row is used for every token while it is in L1. */
static void mm_task(void *arg, int ith, int nth) {
    mm_job *j = arg;
    long r0, r1;
    rp_split_range(j->total_rows, ith, nth, 16, &r0, &r1);
    long base = 0;
    for (int i = 0; i < j->n && r0 < r1; i++) {
        const rp_tensor *w = j->w[i];
        long rows = (long)w->ne[1];
        long a = RP_MAX(r0, base) - base, b = RP_MIN(r1, base + rows) - base;
        base += rows;
        if (a >= b) continue;
        rp_vec_dot_fn dot = j->k->vec_dot[w->type];
        int ne0 = (int)w->ne[0];
        float *y = j->y[i];
        for (long r = a; r < b; r++) {
            const void *wr = rp_tensor_row(w, r);
            for (int t = 0; t < j->n_tok; t++)
                dot(ne0, &y[(size_t)t * (size_t)rows + (size_t)r], wr,
                    (const char *)j->xq + (size_t)t * j->xq_stride);
        }
    }
}

void rp_matmul_n(rp_compute *cc, int n, const rp_tensor *const *w, float *const *y, const float *x,
                 int n_tok) {
    const rp_kernels *k = rp_kern();
    const int64_t ne0 = w[0]->ne[0];
    /* Group weights that share an activation encoding; mixed types (a Q6_K
     * attn_v beside Q4_K q/k) each get their encoding in turn. */
    int done = 0;
    while (done < n) {
        int vdt = rp_type_get(w[done]->type)->vec_dot_type;
        int m = 1;
        while (done + m < n && rp_type_get(w[done + m]->type)->vec_dot_type == vdt) m++;
        mm_job j = {.n = m, .w = w + done, .y = y + done, .n_tok = n_tok, .k = k};
        for (int i = 0; i < m; i++) {
            RP_ASSERT(w[done + i]->ne[0] == ne0);
            RP_ASSERT(k->vec_dot[w[done + i]->type]);
            j.total_rows += (long)w[done + i]->ne[1];
        }
        if (vdt == RP_TYPE_F32) {
            j.xq = x;
            j.xq_stride = (size_t)ne0 * sizeof(float);
        } else {
            j.xq_stride = rp_row_size(vdt, ne0);
            RP_ASSERT(j.xq_stride * (size_t)n_tok <= cc->wbuf_size);
            for (int t = 0; t < n_tok; t++)
                k->act_quant[vdt](x + (size_t)t * (size_t)ne0, cc->wbuf + (size_t)t * j.xq_stride, ne0);
            j.xq = cc->wbuf;
        }
        rp_pool_run(cc->pool, mm_task, &j);
        done += m;
    }
}

void rp_matmul(rp_compute *cc, const rp_tensor *w, const float *x, int n_tok, float *y) {
    rp_matmul_n(cc, 1, &w, &y, x, n_tok);
}

void rp_tensor_get_row(const rp_tensor *w, int64_t r, float *out) {
    rp_type_get(w->type)->to_float(rp_tensor_row(w, r), out, w->ne[0]);
}
