/* Float types, the legacy 32-element blocks (Q4_0 .. Q8_1) and the activation
 * encodings. Dequantization is bit-identical to ggml's: every product is the
 * same float operation in the same order (no contraction: -std=c11 keeps
 * a*b+c as two roundings, as ggml-base is built). */
#include "kernels/quant.h"
#include "base/util.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- float types --------------------------------------------------------- */

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

/* ---- dequantization ------------------------------------------------------ */

/* Element j (0..31) of a legacy block lives in nibble j%16 of qs, low nibble
 * for j < 16; its fifth bit (Q5) is bit j of qh. */
static inline int q5_high(const uint8_t qh[4], int j) {
    uint32_t h =
        (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    return (int)((h >> j) & 1) << 4;
}

void rp_dequant_q4_0(const void *src, float *dst, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        const float d = rp_fp16_to_fp32(b[i].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((b[i].qs[j] & 0xF) - 8) * d;
            dst[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void rp_dequant_q4_1(const void *src, float *dst, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++, dst += QK4_1) {
        const float d = rp_fp16_to_fp32(b[i].d), m = rp_fp16_to_fp32(b[i].m);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)(b[i].qs[j] & 0xF) * d + m;
            dst[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

void rp_dequant_q5_0(const void *src, float *dst, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        const float d = rp_fp16_to_fp32(b[i].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)(((b[i].qs[j] & 0xF) | q5_high(b[i].qh, j)) - 16) * d;
            dst[j + 16] = (float)(((b[i].qs[j] >> 4) | q5_high(b[i].qh, j + 16)) - 16) * d;
        }
    }
}

void rp_dequant_q5_1(const void *src, float *dst, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++, dst += QK5_1) {
        const float d = rp_fp16_to_fp32(b[i].d), m = rp_fp16_to_fp32(b[i].m);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((b[i].qs[j] & 0xF) | q5_high(b[i].qh, j)) * d + m;
            dst[j + 16] = (float)((b[i].qs[j] >> 4) | q5_high(b[i].qh, j + 16)) * d + m;
        }
    }
}

void rp_dequant_q8_0(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const float d = rp_fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

void rp_dequant_q8_1(const void *src, float *dst, int64_t n) {
    const block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK8_1; i++, dst += QK8_1) {
        const float d = rp_fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK8_1; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

/* ---- reference quantizers ------------------------------------------------ */

/* The signed value of largest magnitude (the first one on ties). */
static float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    if (amax_out) *amax_out = amax;
    return max;
}

/* Truncating conversion of (v + bias) to an unsigned level, capped at top:
 * the legacy quantizers round by adding 0.5 and truncating towards zero. */
static inline uint8_t trunc_level(float v, int top) {
    if (!(v >= 1.0f)) return 0; /* also NaN */
    return v >= (float)top ? (uint8_t)top : (uint8_t)(int)v;
}

void rp_quant_q4_0(const float *src, void *dst, int64_t n) {
    block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, src += QK4_0) {
        /* d maps the extreme value onto level -8, so the grid is used asymmetrically */
        const float d = signed_absmax(src, QK4_0, NULL) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        b[i].d = rp_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            uint8_t lo = trunc_level(src[j] * id + 8.5f, 15),
                    hi = trunc_level(src[j + 16] * id + 8.5f, 15);
            b[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

void rp_quant_q4_1(const float *src, void *dst, int64_t n) {
    block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / QK4_1; i++, src += QK4_1) {
        float mn, mx;
        min_max(src, QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15, id = d ? 1.0f / d : 0.0f;
        b[i].d = rp_fp32_to_fp16(d);
        b[i].m = rp_fp32_to_fp16(mn);
        for (int j = 0; j < 16; j++) {
            uint8_t lo = trunc_level((src[j] - mn) * id + 0.5f, 15);
            uint8_t hi = trunc_level((src[j + 16] - mn) * id + 0.5f, 15);
            b[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void put_q5(uint8_t qs[16], uint8_t qh[4], const uint8_t L[32]) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((L[j] & 0xF) | (L[j + 16] & 0xF) << 4);
        h |= (uint32_t)(L[j] >> 4 & 1) << j;
        h |= (uint32_t)(L[j + 16] >> 4 & 1) << (j + 16);
    }
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

void rp_quant_q5_0(const float *src, void *dst, int64_t n) {
    block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / QK5_0; i++, src += QK5_0) {
        const float d = signed_absmax(src, QK5_0, NULL) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        b[i].d = rp_fp32_to_fp16(d);
        uint8_t L[32];
        for (int j = 0; j < 32; j++) L[j] = trunc_level(src[j] * id + 16.5f, 31);
        put_q5(b[i].qs, b[i].qh, L);
    }
}

void rp_quant_q5_1(const float *src, void *dst, int64_t n) {
    block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / QK5_1; i++, src += QK5_1) {
        float mn, mx;
        min_max(src, QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31, id = d ? 1.0f / d : 0.0f;
        b[i].d = rp_fp32_to_fp16(d);
        b[i].m = rp_fp32_to_fp16(mn);
        uint8_t L[32];
        for (int j = 0; j < 32; j++) L[j] = trunc_level((src[j] - mn) * id + 0.5f, 31);
        put_q5(b[i].qs, b[i].qh, L);
    }
}

/* d = max|x| / 127, q = round(x / d), ties away from zero (the file writer's
 * rounding; activations use rp_act_q8_0). */
void rp_quant_q8_0(const float *src, void *dst, int64_t n) {
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(src[j]));
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        b[i].d = rp_fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)roundf(src[j] * id);
    }
}

void rp_quant_q8_1(const float *src, void *dst, int64_t n) {
    block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, src += QK8_1) {
        float amax = 0;
        for (int j = 0; j < QK8_1; j++) amax = fmaxf(amax, fabsf(src[j]));
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            b[i].qs[j] = (int8_t)roundf(src[j] * id);
            sum += b[i].qs[j];
        }
        b[i].d = rp_fp32_to_fp16(d);
        b[i].s = rp_fp32_to_fp16((float)sum * d);
    }
}

/* ---- activation encodings -------------------------------------------------- */

/* As llama.cpp's AVX2 quantize_row_q8_0: d = amax/127 stored as fp16, the
 * unrounded 127/amax as multiplier, round half to even. */
static float act_block(const float *x, int8_t *q) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < 32; j++) q[j] = (int8_t)rp_nearest_int(x[j] * id);
    return amax / 127.0f;
}

void rp_act_q8_0(const float *x, void *y, int64_t n) {
    block_q8_0 *b = y;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0)
        b[i].d = rp_fp32_to_fp16(act_block(x, b[i].qs));
}

void rp_act_q8_1(const float *x, void *y, int64_t n) {
    block_q8_1 *b = y;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        const float d = act_block(x, b[i].qs);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) sum += b[i].qs[j];
        b[i].d = rp_fp32_to_fp16(d);
        b[i].s = rp_fp32_to_fp16(d * (float)sum);
    }
}
