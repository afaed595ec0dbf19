/* Compute kernels, one table per instruction-set level. Every function has a
 * scalar twin in kernels_ref.c, which is the reference the SIMD versions are
 * tested against. Kernels know nothing of models or plans. */
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

typedef struct rp_kernels {
    rp_isa isa;
    rp_vec_dot_fn vec_dot[RP_TYPE_COUNT];     /* by weight type */
    rp_act_quant_fn act_quant[RP_TYPE_COUNT]; /* by vec_dot_type; NULL for F32 */
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
