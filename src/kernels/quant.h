/* Block formats, bit-compatible with ggml. Each block is a struct with its
 * encoding described and its size asserted; the scalar functions here are the
 * reference every SIMD kernel is tested against. */
#ifndef RP_QUANT_H
#define RP_QUANT_H

#include <assert.h>
#include <stdint.h>

#define QK4_0        32
#define QK4_1        32
#define QK5_0        32
#define QK5_1        32
#define QK8_0        32
#define QK8_1        32
#define QK_K         256
#define K_SCALE_SIZE 12

typedef uint16_t rp_half; /* IEEE binary16 bits */

/* Q8_0: 32 weights = d * qs[i], d fp16. */
typedef struct {
    rp_half d;
    int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

/* Q8_1: like Q8_0 plus s = d * sum(qs) (activation format for the *_1 types). */
typedef struct {
    rp_half d;
    rp_half s;
    int8_t qs[QK8_1];
} block_q8_1;
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

/* Q4_0: 32 weights = d * (q - 8), q 4-bit; byte j holds q[j] (low nibble) and
 * q[j+16] (high nibble). */
typedef struct {
    rp_half d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

/* Q4_1: 32 weights = d * q + m. */
typedef struct {
    rp_half d;
    rp_half m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1;
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");

/* Q5_0: 32 weights = d * (q - 16), q 5-bit: low 4 bits as Q4_0, 5th bits in qh. */
typedef struct {
    rp_half d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");

/* Q5_1: 32 weights = d * q + m, q 5-bit. */
typedef struct {
    rp_half d;
    rp_half m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");

/* Q2_K: 256 weights in 16 groups of 16; per group a 4-bit scale and 4-bit min
 * (scales[]), scaled by the fp16 super-block d / dmin; 2-bit quants. */
typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    rp_half d;
    rp_half dmin;
} block_q2_K;
static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");

/* Q3_K: 256 weights in 16 groups of 16; 6-bit signed scales packed in 12
 * bytes; 2 low bits in qs, the high bit in hmask (set = no -4 offset). */
typedef struct {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    rp_half d;
} block_q3_K;
static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");

/* Q4_K: 256 weights in 8 groups of 32; 6-bit scale and min per group packed in
 * 12 bytes, times fp16 d / dmin; weight = d*sc*q - dmin*m. */
typedef struct {
    rp_half d;
    rp_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

/* Q5_K: as Q4_K with a fifth bit per weight in qh. */
typedef struct {
    rp_half d;
    rp_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

/* Q6_K: 256 weights in 16 groups of 16, int8 scales, 6-bit quants (4 low bits
 * in ql, 2 high bits in qh), weight = d * sc * (q - 32). */
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    rp_half d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

/* Q8_K: activation format for the K-quants: f32 d, int8 quants, and the sums of
 * each group of 16 quants (bsums) so min terms need no second pass. */
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;
static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

/* IQ4_NL: 32 weights = d * kvalues_iq4nl[q], q 4-bit (non-linear grid). */
typedef struct {
    rp_half d;
    uint8_t qs[QK4_0 / 2];
} block_iq4_nl;
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");

/* IQ4_XS: 256 weights, 8 groups of 32 with 6-bit scales, non-linear 4-bit grid. */
typedef struct {
    rp_half d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");

/* ---- conversions ------------------------------------------------------
 *
 * rp_dequant_*: block -> float, bit-identical to ggml's dequantize_row_*.
 * rp_quant_*:   float -> block, the reference quantizers used to write files
 *               (the same algorithms as ggml's *_ref / quantize_* without an
 *               importance matrix).
 * rp_act_*:     activations -> the vec_dot encodings, rounding exactly as
 *               llama.cpp's x86 kernels do (Q8_0/Q8_1: round half to even of
 *               x * 127/amax; Q8_K: nearest int of x * -127/max).
 * n is a multiple of the block size in every call. */

#define QK4_NL 32

/* The non-linear 4-bit grid of IQ4_NL / IQ4_XS. */
extern const int8_t rp_kvalues_iq4nl[16];

void rp_f32_to_float(const void *src, float *dst, int64_t n);
void rp_float_to_f32(const float *src, void *dst, int64_t n);
void rp_f16_to_float(const void *src, float *dst, int64_t n);
void rp_float_to_f16(const float *src, void *dst, int64_t n);
void rp_bf16_to_float(const void *src, float *dst, int64_t n);
void rp_float_to_bf16(const float *src, void *dst, int64_t n);

void rp_dequant_q4_0(const void *src, float *dst, int64_t n);
void rp_dequant_q4_1(const void *src, float *dst, int64_t n);
void rp_dequant_q5_0(const void *src, float *dst, int64_t n);
void rp_dequant_q5_1(const void *src, float *dst, int64_t n);
void rp_dequant_q8_0(const void *src, float *dst, int64_t n);
void rp_dequant_q8_1(const void *src, float *dst, int64_t n);
void rp_dequant_q2_K(const void *src, float *dst, int64_t n);
void rp_dequant_q3_K(const void *src, float *dst, int64_t n);
void rp_dequant_q4_K(const void *src, float *dst, int64_t n);
void rp_dequant_q5_K(const void *src, float *dst, int64_t n);
void rp_dequant_q6_K(const void *src, float *dst, int64_t n);
void rp_dequant_q8_K(const void *src, float *dst, int64_t n);
void rp_dequant_iq4_nl(const void *src, float *dst, int64_t n);
void rp_dequant_iq4_xs(const void *src, float *dst, int64_t n);

void rp_quant_q4_0(const float *src, void *dst, int64_t n);
void rp_quant_q4_1(const float *src, void *dst, int64_t n);
void rp_quant_q5_0(const float *src, void *dst, int64_t n);
void rp_quant_q5_1(const float *src, void *dst, int64_t n);
void rp_quant_q8_0(const float *src, void *dst, int64_t n);
void rp_quant_q8_1(const float *src, void *dst, int64_t n);
void rp_quant_q2_K(const float *src, void *dst, int64_t n);
void rp_quant_q3_K(const float *src, void *dst, int64_t n);
void rp_quant_q4_K(const float *src, void *dst, int64_t n);
void rp_quant_q5_K(const float *src, void *dst, int64_t n);
void rp_quant_q6_K(const float *src, void *dst, int64_t n);
void rp_quant_q8_K(const float *src, void *dst, int64_t n);
void rp_quant_iq4_nl(const float *src, void *dst, int64_t n);
void rp_quant_iq4_xs(const float *src, void *dst, int64_t n);

void rp_act_q8_0(const float *x, void *y, int64_t n);
void rp_act_q8_1(const float *x, void *y, int64_t n);
void rp_act_q8_K(const float *x, void *y, int64_t n);

/* Helpers shared by the quantizers and kernels. */

/* Round to nearest, ties to even, for |x| < 2^22 (ggml's nearest_int). */
static inline int rp_nearest_int(float x) {
    union {
        float f;
        int32_t i;
    } u = {.f = x + 12582912.0f};
    return (u.i & 0x007fffff) - 0x00400000;
}

/* 6-bit scale and min j (0..7) of a Q4_K / Q5_K block's 12 packed bytes. */
static inline void rp_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Signed 6-bit scale j (0..15) of a Q3_K block, -32..31. */
static inline int rp_q3k_scale(int j, const uint8_t *s) {
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

#endif
