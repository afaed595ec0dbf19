/* Compute kernels, one table per instruction-set level. Every function has a
 * scalar twin in kernels_ref.c, which is the reference the SIMD versions are
 * tested against: quantized products must return exactly the same floats,
 * float products agree to rounding. Kernels know nothing of models or plans. */
#ifndef RP_KERNELS_H
#define RP_KERNELS_H

#include "cpu.h"
#include "reprise.h"

#include <stddef.h>
#include <stdint.h>

/* s = dot(w row of n weights in the weight's type, x row in its vec_dot_type). */
typedef void (*rp_vec_dot_fn)(int n, float *s, const void *w, const void *x);
/* Encode n activations (n % block == 0) in a vec_dot_type. */
typedef void (*rp_act_quant_fn)(const float *x, void *y, int64_t n);

/* One token against nr weight rows (row r at w + r * ldw): y[r] = vec_dot. The
 * activation row x is in the weight's vec_dot_type. */
typedef void (*rp_gemv_fn)(int n, int nr, const void *w, size_t ldw, const void *x, float *y);

/* Many tokens against many rows, for prompt processing. Activations are
 * re-encoded once per product into groups of RP_GEMM_GROUP tokens (the
 * kernel's own layout); the kernel then computes every row of a tile against
 * every token of some groups, each output bit-identical to vec_dot.
 *   group_bytes(n):  bytes of one packed group for rows of n inputs
 *   pack:            packs cnt <= RP_GEMM_GROUP tokens (rows of xq, ldx bytes
 *                    apart, in the vec_dot_type) into one group; missing
 *                    tokens are zero. NULL: run reads the rows as they are
 *                    (xp = first row, ldx bytes apart)
 *   scratch_bytes:   per-thread scratch run needs for rows of n inputs
 *   run:             y[t * ldy + r] for r < nr and t < cnt, the tokens of the
 *                    consecutive groups starting at xp */
#define RP_GEMM_GROUP 16
typedef struct rp_gemm_ops {
    size_t (*group_bytes)(int n);
    void (*pack)(int n, int cnt, const void *xq, size_t ldx, void *group);
    size_t (*scratch_bytes)(int n);
    void (*run)(int n, int nr, const void *w, size_t ldw, const void *xp, size_t ldx, int cnt,
                float *y, size_t ldy, void *scratch);
} rp_gemm_ops;

/* Weights re-laid out once at load in panels of RP_PANEL rows, so one 512-bit
 * instruction serves 16 rows (the activation broadcast). Rows past the end of
 * the last panel are zero. Products from a packed layout return exactly the
 * floats of vec_dot.
 *   bytes:  size of the packed copy of rows x n weights
 *   pack:   w (rows rows, ldw bytes apart) -> dst
 *   xbytes, xprep: per-token extras the kernel derives from an activation row
 *           (in the vec_dot_type) once per product
 *   gemv:   y[r] for the rows r < rows of panels [p0, p1), one token: its row
 *           xq and extras xe */
#define RP_PANEL 16
typedef struct rp_pack_ops {
    size_t (*bytes)(int64_t n, int64_t rows);
    void (*pack)(int64_t n, int64_t rows, const void *w, size_t ldw, void *dst);
    size_t (*xbytes)(int n);
    void (*xprep)(int n, const void *xq, void *xe);
    void (*gemv)(int n, int64_t rows, const void *packed, int64_t p0, int64_t p1, const void *xq,
                 const void *xe, float *y);
} rp_pack_ops;

typedef struct rp_kernels {
    rp_isa isa;
    rp_vec_dot_fn vec_dot[RP_TYPE_COUNT];     /* by weight type */
    rp_act_quant_fn act_quant[RP_TYPE_COUNT]; /* by vec_dot_type; NULL for F32 */
    rp_gemv_fn gemv[RP_TYPE_COUNT];           /* optional, by weight type */
    const rp_gemm_ops *gemm[RP_TYPE_COUNT];   /* optional, by weight type */
    const rp_pack_ops *pack[RP_TYPE_COUNT];   /* optional, by weight type */
    float (*dot_f32)(int n, const float *a, const float *b);
    /* y += a * x */
    void (*axpy_f32)(int n, float a, const float *x, float *y);
    /* f16 rows (KV cache) */
    float (*dot_f16_f32)(int n, const uint16_t *a, const float *b);
    void (*axpy_f16)(int n, float a, const uint16_t *x, float *y);
    void (*f32_to_f16)(const float *x, uint16_t *y, int n);
} rp_kernels;

/* The table for the running CPU (rp_cpu_isa()), built once. */
const rp_kernels *rp_kern(void);
/* The table for a given level (must be supported by the CPU to be called). */
const rp_kernels *rp_kern_for(rp_isa isa);

void rp_kernels_fill_ref(rp_kernels *k);
void rp_kernels_fill_avx2(rp_kernels *k);
void rp_kernels_fill_avx512(rp_kernels *k);

#endif
