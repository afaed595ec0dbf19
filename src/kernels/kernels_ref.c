/* Scalar reference kernels: the definition every SIMD kernel is checked against. */
#include "kernels/kernels.h"
#include "quant.h"
#include "util.h"

static float dot_f32_ref(int n, const float *a, const float *b) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_f32_ref(int n, float a, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static float dot_f16_f32_ref(int n, const uint16_t *a, const float *b) {
    float s = 0;
    for (int i = 0; i < n; i++) s += rp_fp16_to_fp32(a[i]) * b[i];
    return s;
}

static void axpy_f16_ref(int n, float a, const uint16_t *x, float *y) {
    for (int i = 0; i < n; i++) y[i] += a * rp_fp16_to_fp32(x[i]);
}

static void f32_to_f16_ref(const float *x, uint16_t *y, int n) {
    for (int i = 0; i < n; i++) y[i] = rp_fp32_to_fp16(x[i]);
}

static void vec_dot_f32_ref(int n, float *s, const void *w, const void *x) {
    *s = dot_f32_ref(n, w, x);
}

static void vec_dot_f16_ref(int n, float *s, const void *w, const void *x) {
    *s = dot_f16_f32_ref(n, w, x);
}

static void vec_dot_bf16_ref(int n, float *s, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    float acc = 0;
    for (int i = 0; i < n; i++) acc += rp_bf16_to_fp32(a[i]) * b[i];
    *s = acc;
}

static void vec_dot_q8_0_ref(int n, float *s, const void *w, const void *x) {
    const block_q8_0 *a = w, *b = x;
    float acc = 0;
    for (int i = 0; i < n / QK8_0; i++) {
        int sum = 0;
        for (int j = 0; j < QK8_0; j++) sum += a[i].qs[j] * b[i].qs[j];
        acc += rp_fp16_to_fp32(a[i].d) * rp_fp16_to_fp32(b[i].d) * (float)sum;
    }
    *s = acc;
}

void rp_kernels_fill_ref(rp_kernels *k) {
    k->vec_dot[RP_TYPE_F32] = vec_dot_f32_ref;
    k->vec_dot[RP_TYPE_F16] = vec_dot_f16_ref;
    k->vec_dot[RP_TYPE_BF16] = vec_dot_bf16_ref;
    k->vec_dot[RP_TYPE_Q8_0] = vec_dot_q8_0_ref;
    k->act_quant[RP_TYPE_Q8_0] = rp_quant_q8_0;
    k->dot_f32 = dot_f32_ref;
    k->axpy_f32 = axpy_f32_ref;
    k->dot_f16_f32 = dot_f16_f32_ref;
    k->axpy_f16 = axpy_f16_ref;
    k->f32_to_f16 = f32_to_f16_ref;
}
