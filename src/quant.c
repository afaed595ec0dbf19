#include "quant.h"
#include "util.h"

#include <math.h>
#include <string.h>

void rp_f32_to_float(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void rp_float_to_f32(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void rp_f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = rp_fp16_to_fp32(s[i]);
}

void rp_float_to_f16(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = rp_fp32_to_fp16(src[i]);
}

void rp_bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = rp_bf16_to_fp32(s[i]);
}

void rp_float_to_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = rp_fp32_to_bf16(src[i]);
}

void rp_dequant_q8_0(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        float d = rp_fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK8_0; j++) dst[i * QK8_0 + j] = d * (float)b[i].qs[j];
    }
}

/* d = max|x| / 127, q = round(x / d): ggml's reference rounding (half away from zero). */
void rp_quant_q8_0(const float *src, void *dst, int64_t n) {
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *x = src + i * QK8_0;
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f;
        float id = d ? 1.0f / d : 0.0f;
        b[i].d = rp_fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}
