/* The backend boundary: what a forward pass asks of the machine it runs on.
 *
 * A backend is a table of functions (rp_backend_ops, as zeux/calm plugs its
 * CUDA forward in beside the C one; ggml's backend split is the other
 * precedent) over three kinds of memory that live where the backend wants
 * them:
 *
 *   weights   the model's rp_tensor views, uploaded once (rp_be_upload). A
 *             tensor that several layers or plan steps point at is one
 *             backend buffer: uploads are keyed by the tensor's bytes
 *             (t->data), so aliased slots (RYS repeats, Zamba2's shared
 *             blocks) and a second upload of the same tensor cost nothing.
 *             Ops name weights by their host rp_tensor *; the backend finds
 *             its copy.
 *   buffers   activations and scratch (rp_be_buf_new), addressed by rp_bx =
 *             (buffer, byte offset): F32 rows unless an op says int32.
 *   KV        one rp_bkv per plan step that attends, holding every sequence
 *             (rp_be_kv_new): sequence s's K is [n_head_kv][cap][head_dim_k]
 *             in type_k (F32 or F16), V likewise, position p in cell p % cap,
 *             so a sliding-window ring is only a smaller cap. This is
 *             src/core/kv.c's layout; the CPU backend can also wrap the views
 *             rp_state already holds (rp_backend_cpu_kv_wrap).
 *
 * Ops are enqueued: they return nothing and a failure is latched, returned by
 * the next rp_be_sync (later ops are skipped). Host arrays an op takes
 * (tokens, positions, sequence ids, rows, write sources) are copied when the
 * op is called; host destinations (read, kv_read, the output op's logits and
 * hidden rows) are filled by the time rp_be_sync returns. The host waits once
 * per micro-batch, in rp_be_sync, for the outputs it asked for.
 *
 * The CPU backend (backend_cpu.c) runs every op by calling the functions the
 * forwards call today (src/kernels/ops.c, matmul.c), with the same arguments,
 * so a forward written against this interface computes on the CPU the same
 * bits it does now. The Vulkan backend (src/backend/vulkan/) is checked
 * against it op by op (tests/unit/test_backend_vk.c).
 *
 * Call the rp_be_* functions below, not the table: they keep the per-op
 * counters (rp_backend_stats) that `reprise bench --device` reports. */
#ifndef RP_BACKEND_H
#define RP_BACKEND_H

#include "core/tensor.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "reprise.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rp_backend rp_backend;

/* A backend buffer; each backend's own struct begins with this. */
typedef struct rp_bbuf {
    size_t size; /* bytes */
} rp_bbuf;

/* Elements of a backend buffer from byte offset off (4-byte aligned). */
typedef struct rp_bx {
    rp_bbuf *buf;
    size_t off;
} rp_bx;

static inline rp_bx rp_bx_at(rp_bbuf *b, size_t off) {
    rp_bx x = {b, off};
    return x;
}
/* n 4-byte elements further on */
static inline rp_bx rp_bx_add(rp_bx x, size_t n) {
    x.off += n * 4;
    return x;
}

/* Gate activations of the gated FFN (same values as src/arch/dense.h's rp_act). */
typedef enum rp_bact {
    RP_BACT_SILU = 0,
    RP_BACT_GELU_TANH = 1,
    RP_BACT_GELU_ERF = 2,
    RP_BACT_GELU_TANH_F16 = 3, /* through fp16 as ggml's CPU backend (rp_gelu_tanh_f16_mul) */
} rp_bact;

typedef enum rp_bnorm {
    RP_BNORM_RMS = 0,   /* rp_rmsnorm */
    RP_BNORM_LAYER = 1, /* rp_layernorm (bias optional) */
} rp_bnorm;

/* A plan step's KV cache. cap: positions a sequence keeps (n_ctx, or the
 * ring of a sliding window: window + ring_extra - 1, as kv.c sizes it). */
typedef struct rp_bkv_desc {
    int n_seq, n_head_kv, cap, head_dim_k, head_dim_v;
    int type_k, type_v; /* RP_TYPE_F32 or RP_TYPE_F16 */
} rp_bkv_desc;

/* One plan step's KV cache for every sequence; each backend's own struct
 * begins with this. */
typedef struct rp_bkv {
    rp_bkv_desc d;
} rp_bkv;

/* Attention of n_tok queries over one plan step's cache (rp_attn_args with
 * the cache named by step and sequence instead of by pointer). */
typedef struct rp_battn {
    int n_tok;
    rp_bx q; /* [n_tok][q_stride], head h at h * head_dim_k */
    int q_stride;
    rp_bx out; /* [n_tok][out_stride], head h at h * head_dim_v */
    int out_stride;
    int n_head, n_head_kv, head_dim_k, head_dim_v;
    float scale;        /* applied to q.k */
    float softcap;      /* 0 = none */
    int window;         /* 0 = full causal; else positions p-window+1 .. p */
    const int32_t *pos; /* [n_tok] host */
    const int32_t *seq; /* [n_tok] host: token t reads sequence seq[t] of kv */
    rp_bkv *kv;         /* the plan step's cache */
} rp_battn;

/* The output rows (rp_forward_output): x's rows `rows` (all of the first n_out
 * when rows is NULL) are normed (RMS, or layer norm when norm_b is set) and
 * multiplied by the output matrix, then soft-capped. */
typedef struct rp_bout {
    rp_bx x;   /* [n_tok][n_embd] final residual stream; may be overwritten */
    rp_bx tmp; /* [n_out][n_embd] scratch */
    int n_embd, n_out;
    const int32_t *rows; /* [n_out] ascending rows of x (host), or NULL */
    const rp_tensor *norm, *norm_b, *w;
    float eps, softcap; /* softcap 0 = none */
    float *logits;      /* host [n_out][w->ne[1]], filled by sync */
    float *hidden;      /* host [n_out][n_embd] the rows before the norm, or NULL */
} rp_bout;

/* What the counters count. bytes: what the op must read (weights, activations,
 * cache cells it attends to), the same estimate on every backend; dispatches:
 * kernel launches (Vulkan) or kernel calls (CPU). */
typedef enum rp_bop {
    RP_BOP_GET_ROWS = 0,
    RP_BOP_NORM,
    RP_BOP_MATMUL,
    RP_BOP_ROPE,
    RP_BOP_KV_WRITE,
    RP_BOP_ATTN,
    RP_BOP_ELTWISE,
    RP_BOP_OUTPUT,
    RP_BOP_TRANSFER, /* write, read, copy, gather, kv_read */
    RP_BOP_COUNT
} rp_bop;

typedef struct rp_backend_stats {
    uint64_t calls[RP_BOP_COUNT];
    uint64_t dispatches[RP_BOP_COUNT];
    uint64_t bytes[RP_BOP_COUNT];
    uint64_t syncs;
    /* memory the backend holds */
    uint64_t weight_bytes; /* distinct weight bytes uploaded */
    int n_weights;         /* distinct weight tensors uploaded */
    uint64_t kv_bytes;     /* KV caches */
    uint64_t buf_bytes;    /* activation / scratch buffers */
    uint64_t device_bytes; /* device memory allocated in all (Vulkan: chunks) */
} rp_backend_stats;

typedef struct rp_backend_ops {
    void (*free)(rp_backend *be);
    /* ---- memory (immediate) */
    rp_status (*upload)(rp_backend *be, const rp_tensor *t);
    void (*forget)(rp_backend *be, const rp_tensor *t);
    rp_status (*buf_new)(rp_backend *be, size_t bytes, const char *what, rp_bbuf **out);
    void (*buf_free)(rp_backend *be, rp_bbuf *b);
    rp_status (*kv_new)(rp_backend *be, const rp_bkv_desc *d, rp_bkv **out);
    void (*kv_free)(rp_backend *be, rp_bkv *kv);
    /* ---- transfers (enqueued) */
    void (*write)(rp_backend *be, rp_bx dst, const void *src, size_t bytes);
    void (*read)(rp_backend *be, void *dst, rp_bx src, size_t bytes);
    void (*copy)(rp_backend *be, rp_bx dst, rp_bx src, size_t bytes);
    void (*kv_read)(rp_backend *be, const rp_bkv *kv, int seq, void *k, void *v);
    void (*gather)(rp_backend *be, rp_bx dst, rp_bx src, const int32_t *rows, int n, int width);
    /* ---- ops (enqueued) */
    void (*get_rows)(rp_backend *be, rp_bx dst, const rp_tensor *w, const int32_t *rows, int n);
    void (*norm)(rp_backend *be, rp_bnorm kind, rp_bx y, rp_bx x, const rp_tensor *w,
                 const rp_tensor *b, int n, int rows, float eps);
    void (*norm_heads)(rp_backend *be, rp_bx x, const rp_tensor *w, int head_dim, int n_head,
                       int rows, int stride, float eps);
    void (*matmul)(rp_backend *be, int n, const rp_tensor *const *w, const rp_bx *y, rp_bx x,
                   int n_tok);
    void (*rope_cache)(rp_backend *be, rp_bx cs, const int32_t *pos, int n_tok,
                       const rp_rope_params *p);
    void (*rope)(rp_backend *be, rp_bx x, int n_tok, int stride, int n_head, int head_dim,
                 int n_rot, rp_bx cs, rp_rope_style style);
    void (*kv_write)(rp_backend *be, rp_bkv *kv, int n_tok, const int32_t *pos, const int32_t *seq,
                     rp_bx k, int k_stride, rp_bx v, int v_stride);
    void (*attention)(rp_backend *be, const rp_battn *a);
    void (*add)(rp_backend *be, rp_bx y, rp_bx x, int n);
    void (*add_row)(rp_backend *be, rp_bx y, const rp_tensor *b, int width, int rows);
    void (*mul)(rp_backend *be, rp_bx y, rp_bx x, int n);
    void (*scale)(rp_backend *be, rp_bx y, float s, int n);
    void (*softcap)(rp_backend *be, rp_bx y, float cap, int n);
    void (*act_mul)(rp_backend *be, rp_bact act, rp_bx gate, rp_bx up, int n);
    void (*output)(rp_backend *be, const rp_bout *o);
    rp_status (*sync)(rp_backend *be);
} rp_backend_ops;

struct rp_backend {
    const rp_backend_ops *ops;
    char name[32];      /* "cpu", "vulkan0", ... */
    char desc[256];     /* the device, for the boot log */
    uint64_t mem_total; /* device memory (0 = host memory) */
    rp_backend_stats stats;
};

/* ---- opening a backend ------------------------------------------------------ */

#define RP_BACKEND_MAX_DEVICES 16

typedef struct rp_backend_dev {
    char name[32];  /* what rp_backend_open takes: "cpu", "vulkan0", ... */
    char desc[256]; /* "llvmpipe (LLVM 15.0.6, 256 bits), Vulkan 1.3, cpu" */
    uint64_t mem_bytes;
} rp_backend_dev;

typedef struct rp_backend_params {
    /* CPU: the context's thread pool and scratch (borrowed; see
     * rp_context.cc and attn_scratch): attention scratch of per_thread
     * floats for each of the pool's threads. */
    rp_compute *cc;
    float *attn_scratch;
    size_t attn_scratch_per_thread;
    /* Vulkan test knobs (0 / false in normal use): the largest storage
     * binding to use if smaller than the device's, the largest part of a
     * weight, no subgroup operations,
     * uploads through a staging buffer even where device memory is mappable. */
    uint64_t vk_max_binding;
    uint64_t vk_max_weight_part; /* the largest allocation of a weight (split in parts) */
    bool vk_no_subgroup;
    bool vk_force_staging;
} rp_backend_params;

/* Every device this build and machine can run on: "cpu" first, then each
 * Vulkan device. *note (may be NULL) receives why there are none when Vulkan
 * is unavailable (built without it, no loader, no device), else "". */
rp_status rp_backend_list(rp_backend_dev *devs, int cap, int *n, char *note, size_t note_size);

/* Opens "cpu" or "vulkanN" ("vulkan" = vulkan0). A Vulkan build without a
 * loader or device, or a build without Vulkan, fails with RP_ERR_UNSUPPORTED
 * and a message naming the package to install. */
rp_status rp_backend_open(const char *name, const rp_backend_params *p, rp_backend **out);
void rp_backend_free(rp_backend *be);

/* The CPU backend over a context's pool and scratch. */
rp_status rp_backend_cpu_new(const rp_backend_params *p, rp_backend **out);
/* A step's cache over views rp_state already holds (views[s] for each of
 * d->n_seq sequences; borrowed, must outlive the handle). */
rp_status rp_backend_cpu_kv_wrap(rp_backend *be, const rp_kv_view *views, const rp_bkv_desc *d,
                                 rp_bkv **out);
/* The view of sequence seq of a CPU backend's cache. */
const rp_kv_view *rp_backend_cpu_kv_view(const rp_bkv *kv, int seq);
bool rp_backend_is_cpu(const rp_backend *be);
/* The host address of x on the CPU backend; NULL on any other. */
float *rp_backend_cpu_ptr(const rp_backend *be, rp_bx x);

/* Bytes of one sequence's K (or V) block of a step's cache. */
size_t rp_bkv_seq_bytes(const rp_bkv_desc *d, bool v);

/* ---- the calls a forward makes (counted, then forwarded to the table) ------ */

rp_status rp_be_upload(rp_backend *be, const rp_tensor *t);
/* Drops the backend's copy of t's bytes (after a sync; ops must not name t
 * again unless it is uploaded again). */
void rp_be_forget(rp_backend *be, const rp_tensor *t);
rp_status rp_be_buf_new(rp_backend *be, size_t bytes, const char *what, rp_bbuf **out);
void rp_be_buf_free(rp_backend *be, rp_bbuf *b);
rp_status rp_be_kv_new(rp_backend *be, const rp_bkv_desc *d, rp_bkv **out);
void rp_be_kv_free(rp_backend *be, rp_bkv *kv);

/* host -> buffer (src copied now) / buffer -> host (filled by sync) / buffer -> buffer */
void rp_be_write(rp_backend *be, rp_bx dst, const void *src, size_t bytes);
void rp_be_read(rp_backend *be, void *dst, rp_bx src, size_t bytes);
void rp_be_copy(rp_backend *be, rp_bx dst, rp_bx src, size_t bytes);
/* One sequence's K and V blocks of a cache into host k / v (either may be
 * NULL), in the layout above; filled by sync. */
void rp_be_kv_read(rp_backend *be, const rp_bkv *kv, int seq, void *k, void *v);
/* dst row i = src row rows[i] (width floats per row), i < n; rows ascending
 * with rows[i] >= i, so dst may be src (in-place compaction of output rows). */
void rp_be_gather(rp_backend *be, rp_bx dst, rp_bx src, const int32_t *rows, int n, int width);

/* dst[i] = row rows[i] of w as floats (rp_tensor_get_row), for every type. */
void rp_be_get_rows(rp_backend *be, rp_bx dst, const rp_tensor *w, const int32_t *rows, int n);
/* y[r] = norm(x[r]) * w (+ b) over rows of n (w may be NULL; b only for
 * RP_BNORM_LAYER); in place allowed. */
void rp_be_norm(rp_backend *be, rp_bnorm kind, rp_bx y, rp_bx x, const rp_tensor *w,
                const rp_tensor *b, int n, int rows, float eps);
/* rp_rmsnorm_heads: in place, n_head heads of head_dim per row, rows stride apart */
void rp_be_norm_heads(rp_backend *be, rp_bx x, const rp_tensor *w, int head_dim, int n_head,
                      int rows, int stride, float eps);
/* y[i] = x . w[i]^T for n weights sharing the row length (rp_matmul_n):
 * y[i] is [n_tok][w[i]->ne[1]], x is [n_tok][w[0]->ne[0]]. n <= RP_BE_MAX_N. */
#define RP_BE_MAX_N 8
void rp_be_matmul_n(rp_backend *be, int n, const rp_tensor *const *w, const rp_bx *y, rp_bx x,
                    int n_tok);
void rp_be_matmul(rp_backend *be, const rp_tensor *w, rp_bx x, int n_tok, rp_bx y);
/* The cos/sin table of rp_rope_cache ([n_tok][n_rot]) for positions pos. */
void rp_be_rope_cache(rp_backend *be, rp_bx cs, const int32_t *pos, int n_tok,
                      const rp_rope_params *p);
/* rp_rope_apply in place */
void rp_be_rope(rp_backend *be, rp_bx x, int n_tok, int stride, int n_head, int head_dim, int n_rot,
                rp_bx cs, rp_rope_style style);
/* Token t's K row (n_head_kv * head_dim_k floats at k + t * k_stride) and V
 * row into sequence seq[t]'s cells for position pos[t] (rp_kv_write). */
void rp_be_kv_write(rp_backend *be, rp_bkv *kv, int n_tok, const int32_t *pos, const int32_t *seq,
                    rp_bx k, int k_stride, rp_bx v, int v_stride);
void rp_be_attention(rp_backend *be, const rp_battn *a);
void rp_be_add(rp_backend *be, rp_bx y, rp_bx x, int n);                              /* y += x */
void rp_be_add_row(rp_backend *be, rp_bx y, const rp_tensor *b, int width, int rows); /* bias */
void rp_be_mul(rp_backend *be, rp_bx y, rp_bx x, int n);                              /* y *= x */
void rp_be_scale(rp_backend *be, rp_bx y, float s, int n);                            /* y *= s */
void rp_be_softcap(rp_backend *be, rp_bx y, float cap, int n);
void rp_be_act_mul(rp_backend *be, rp_bact act, rp_bx gate, rp_bx up,
                   int n); /* gate = act(gate)*up */
void rp_be_output(rp_backend *be, const rp_bout *o);
/* Runs what was enqueued, waits, fills the host destinations; the first
 * failure since the last sync (RP_OK if none). */
rp_status rp_be_sync(rp_backend *be);

void rp_be_stats_reset(rp_backend *be);
/* The counters as a table, per token when n_tok > 0 ("op calls dispatches
 * bytes"); returns the length like snprintf. */
int rp_be_stats_report(const rp_backend *be, int n_tok, char *buf, size_t size);
const char *rp_bop_name(rp_bop op);

#endif
