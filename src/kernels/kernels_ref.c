/* Scalar reference kernels: the definition every SIMD kernel is checked against.
 *
 * The quantized dot products reproduce llama.cpp's x86 arithmetic bit for bit,
 * so logits match the numbers people publish with llama.cpp. Integer products
 * are exact; what must match is the float part, which comes in two shapes:
 *
 *  "lanes" (llama.cpp's vec_dot kernels: Q8_0, Q4_1, Q5_0, Q5_1, Q3_K, Q5_K,
 *  Q6_K, IQ4_XS): each block's integer sum is split into 8 lanes, lane L
 *  holding the elements e with (e % 32) / 4 == L (the int32 lanes of a 256-bit
 *  register after the pairwise multiply-adds); every lane accumulates
 *  acc[L] = fma(d, (float)lane_sum, acc[L]) over the blocks in order, d being
 *  the float product of the two scales; the lanes are reduced as
 *  ((a4+a0)+(a6+a2)) + ((a5+a1)+(a7+a3)).
 *
 *  "rows" (llama.cpp's repacked x86 kernels, which it uses by default for
 *  Q4_0, IQ4_NL, Q2_K and Q4_K): one float accumulator per output,
 *  acc = fma((float)block_sum, d_w * d_x, acc) per block in order; the K-quants
 *  keep their min term in a second accumulator accm = fma((float)min_sum,
 *  dmin_w * d_x, accm) and return acc - accm.
 *
 * Per-type details are documented at each kernel. The SIMD kernels of every
 * ISA must produce exactly these floats. */
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

/* ---- float kernels (used by attention and F32/F16/BF16 weights) ----------- */

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

/* F32 weights: llama.cpp's x86 tinyBLAS arithmetic, as F16's below (16
 * lanes of fused multiply-adds, the tail as zeros, rp_reduce16). */
static void vec_dot_f32_ref(int n, float *s, const void *w, const void *x) {
    const float *a = w, *b = x;
    float acc[16] = {0};
    for (int i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++) {
            if (i + l < n)
                acc[l] = fmaf(a[i + l], b[i + l], acc[l]);
            else
                acc[l] += 0.0f;
        }
    *s = rp_reduce16(acc);
}
/* F16 weights take F16 activations (rp_kern_act_type: llama.cpp rounds them
 * so) and llama.cpp's x86 tinyBLAS arithmetic: 16 lanes over steps of 16
 * inputs, lane l a fused multiply-add of input i + l, a row's n % 16 tail as
 * zeros, then rp_reduce16. Its one-token ggml_vec_dot_f16 (4 accumulators
 * over steps of 64, summed in double) is not followed: a batch here is its
 * tokens one at a time. */
static void vec_dot_f16_ref(int n, float *s, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    float acc[16] = {0};
    for (int i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++) {
            if (i + l < n)
                acc[l] = fmaf(rp_fp16_to_fp32(a[i + l]), rp_fp16_to_fp32(b[i + l]), acc[l]);
            else
                acc[l] += 0.0f;
        }
    *s = rp_reduce16(acc);
}

/* BF16 weights take BF16 activations (rp_kern_act_type: llama.cpp rounds them
 * so, rp_fp32_to_bf16) and llama.cpp's AVX512_BF16 arithmetic: 16 lanes over
 * steps of 32 inputs, lane j of a step taking inputs 2j+1 then 2j, each as a
 * fused multiply-add of exact products (vdpbf16ps on Zen 5, measured; bf16
 * subnormal inputs read as zero), a row's n % 32 tail as zero pairs, then
 * rp_reduce16. The x86 tinyBLAS order (ggml_compute_forward_mul_mat on 2+
 * tokens); its one-token ggml_vec_dot_bf16 (two accumulators of 32) differs
 * in the last bits and is not followed: a batch here is its tokens one at a
 * time. An output flushed to zero by the instruction (a subnormal
 * accumulator) is not reproduced. */
static inline float bf16_daz(uint16_t h) {
    return rp_bf16_to_fp32((h & 0x7f80) ? h : (uint16_t)(h & 0x8000));
}

static float rp_dot_bf16_ref(int n, const uint16_t *a, const uint16_t *b) {
    float acc[16] = {0};
    for (int i = 0; i < n; i += 32)
        for (int j = 0; j < 16; j++) {
            const int e = i + 2 * j, o = e + 1;
            if (o < n)
                acc[j] = fmaf(bf16_daz(a[o]), bf16_daz(b[o]), acc[j]);
            else
                acc[j] += 0.0f;
            if (e < n)
                acc[j] = fmaf(bf16_daz(a[e]), bf16_daz(b[e]), acc[j]);
            else
                acc[j] += 0.0f;
        }
    return rp_reduce16(acc);
}

static void vec_dot_bf16_ref(int n, float *s, const void *w, const void *x) {
    *s = rp_dot_bf16_ref(n, w, x);
}

/* ---- lane helpers ---------------------------------------------------------- */

static float rp_hsum8_ref(const float a[8]) {
    const float r0 = a[4] + a[0], r1 = a[5] + a[1], r2 = a[6] + a[2], r3 = a[7] + a[3];
    return (r0 + r2) + (r1 + r3);
}

/* acc[L] = fma(d, lane[L], acc[L]) */
static inline void lanes_fma(float acc[8], float d, const int32_t lane[8]) {
    for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
}

/* lane[L] += sum over 32 elements of a[e] * b[e] * scale(e), for the lane of e */
static inline void lanes_add32(int32_t lane[8], const int8_t *a, const int8_t *b) {
    for (int e = 0; e < 32; e++) lane[e / 4] += (int32_t)a[e] * b[e];
}

/* ---- legacy blocks (32 weights) x Q8_0 / Q8_1 ------------------------------- */

/* Unpack a 4-bit block to 32 signed values v = q - off in element order. */
static inline void nibbles(const uint8_t qs[16], int off, int8_t out[32]) {
    for (int j = 0; j < 16; j++) {
        out[j] = (int8_t)((qs[j] & 0xF) - off);
        out[j + 16] = (int8_t)((qs[j] >> 4) - off);
    }
}

static inline void q5_values(const uint8_t qs[16], const uint8_t qh[4], int off, int8_t out[32]) {
    uint32_t h =
        (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    for (int j = 0; j < 16; j++) {
        out[j] = (int8_t)(((qs[j] & 0xF) | ((h >> j) & 1) << 4) - off);
        out[j + 16] = (int8_t)(((qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4) - off);
    }
}

/* sum of a[e] * b[e] over one 32-element block */
static inline int32_t block_sum32(const int8_t *a, const int8_t *b) {
    int32_t s = 0;
    for (int e = 0; e < 32; e++) s += (int32_t)a[e] * b[e];
    return s;
}

/* Q4_0 (rows): acc = fma(sum, d_w * d_x, acc). */
static void vec_dot_q4_0_ref(int n, float *s, const void *w, const void *x) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    float acc = 0;
    for (int i = 0; i < n / QK8_0; i++) {
        int8_t v[32];
        nibbles(a[i].qs, 8, v);
        acc = fmaf((float)block_sum32(v, b[i].qs),
                   rp_fp16_to_fp32(a[i].d) * rp_fp16_to_fp32(b[i].d), acc);
    }
    *s = acc;
}

/* Q4_1 / Q5_1: the min term m * s accumulates in one float (fused
 * multiply-add, block order) and is added after the lane reduction. */
static void vec_dot_q4_1_ref(int n, float *s, const void *w, const void *x) {
    const block_q4_1 *a = w;
    const block_q8_1 *b = x;
    float acc[8] = {0}, summs = 0;
    for (int i = 0; i < n / QK8_1; i++) {
        int8_t v[32];
        int32_t lane[8] = {0};
        summs = fmaf(rp_fp16_to_fp32(a[i].m), rp_fp16_to_fp32(b[i].s), summs);
        nibbles(a[i].qs, 0, v);
        lanes_add32(lane, v, b[i].qs);
        lanes_fma(acc, rp_fp16_to_fp32(a[i].d) * rp_fp16_to_fp32(b[i].d), lane);
    }
    *s = rp_hsum8_ref(acc) + summs;
}

static void vec_dot_q5_0_ref(int n, float *s, const void *w, const void *x) {
    const block_q5_0 *a = w;
    const block_q8_0 *b = x;
    float acc[8] = {0};
    for (int i = 0; i < n / QK8_0; i++) {
        int8_t v[32];
        int32_t lane[8] = {0};
        q5_values(a[i].qs, a[i].qh, 16, v);
        lanes_add32(lane, v, b[i].qs);
        lanes_fma(acc, rp_fp16_to_fp32(a[i].d) * rp_fp16_to_fp32(b[i].d), lane);
    }
    *s = rp_hsum8_ref(acc);
}

static void vec_dot_q5_1_ref(int n, float *s, const void *w, const void *x) {
    const block_q5_1 *a = w;
    const block_q8_1 *b = x;
    float acc[8] = {0}, summs = 0;
    for (int i = 0; i < n / QK8_1; i++) {
        int8_t v[32];
        int32_t lane[8] = {0};
        summs = fmaf(rp_fp16_to_fp32(a[i].m), rp_fp16_to_fp32(b[i].s), summs);
        q5_values(a[i].qs, a[i].qh, 0, v);
        lanes_add32(lane, v, b[i].qs);
        lanes_fma(acc, rp_fp16_to_fp32(a[i].d) * rp_fp16_to_fp32(b[i].d), lane);
    }
    *s = rp_hsum8_ref(acc) + summs;
}

static void vec_dot_q8_0_ref(int n, float *s, const void *w, const void *x) {
    const block_q8_0 *a = w, *b = x;
    float acc[8] = {0};
    for (int i = 0; i < n / QK8_0; i++) {
        int32_t lane[8] = {0};
        lanes_add32(lane, a[i].qs, b[i].qs);
        lanes_fma(acc, rp_fp16_to_fp32(a[i].d) * rp_fp16_to_fp32(b[i].d), lane);
    }
    *s = rp_hsum8_ref(acc);
}

/* IQ4_NL (rows), as Q4_0 with the non-linear grid. */
static void vec_dot_iq4_nl_ref(int n, float *s, const void *w, const void *x) {
    const block_iq4_nl *a = w;
    const block_q8_0 *b = x;
    float acc = 0;
    for (int i = 0; i < n / QK4_NL; i++) {
        int8_t v[32];
        for (int j = 0; j < 16; j++) {
            v[j] = rp_kvalues_iq4nl[a[i].qs[j] & 0xF];
            v[j + 16] = rp_kvalues_iq4nl[a[i].qs[j] >> 4];
        }
        acc = fmaf((float)block_sum32(v, b[i].qs),
                   rp_fp16_to_fp32(a[i].d) * rp_fp16_to_fp32(b[i].d), acc);
    }
    *s = acc;
}

/* ---- K-quants (256 weights) x Q8_K ------------------------------------------ */

/* llama.cpp's tiled K-quant matmul (ggml-cpu/tiled, which its x86 builds run
 * for Q3_K, Q5_K, Q6_K and IQ4_XS weights not repacked, on 8 or more tokens):
 * per super-block the exact integer sums s (scale x value x activation) and m
 * (min x activation sums; 0 without mins), r = (float)s * dw, then
 * r = fma(-dmin, (float)m, r), and acc = fma(r, dx, acc) (GCC contracts the
 * kernel's mul + add), super-blocks in order from acc = 0. reprise takes this order for
 * every token count (llama.cpp's own fewer-than-8-token products use vec_dot's
 * lanes: they differ from its batches in the last bits). */
static inline float tiled_step(float acc, int32_t s, int32_t m, float dw, float dmin, float dx) {
    float r = (float)s * dw;
    r = fmaf(-dmin, (float)m, r);
    return fmaf(r, dx, acc);
}

/* Q2_K (rows): sum = sum of scale(e) * q(e) * x(e), min_sum = sum over the 16
 * groups of min_g * bsums_g. */
static void vec_dot_q2_K_ref(int n, float *s, const void *w, const void *x) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    float acc = 0, accm = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int32_t sum = 0, msum = 0;
        for (int g = 0; g < 16; g++) msum += (a[i].scales[g] >> 4) * b[i].bsums[g];
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            sum +=
                (a[i].scales[e / 16] & 0xF) * ((a[i].qs[32 * h + l] >> (2 * k)) & 3) * b[i].qs[e];
        }
        acc = fmaf((float)sum, rp_fp16_to_fp32(a[i].d) * b[i].d, acc);
        accm = fmaf((float)msum, rp_fp16_to_fp32(a[i].dmin) * b[i].d, accm);
    }
    *s = acc - accm;
}

static void vec_dot_q3_K_ref(int n, float *s, const void *w, const void *x) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    float acc = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int32_t sum = 0;
        int sc[16];
        for (int j = 0; j < 16; j++) sc[j] = rp_q3k_scale(j, a[i].scales);
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const int q =
                ((a[i].qs[32 * h + l] >> (2 * k)) & 3) - ((a[i].hmask[l] >> (e / 32)) & 1 ? 0 : 4);
            sum += sc[e / 16] * q * b[i].qs[e];
        }
        acc = tiled_step(acc, sum, 0, rp_fp16_to_fp32(a[i].d), 0, b[i].d);
    }
    *s = acc;
}

/* Q4_K (rows): sum over the 8 groups of 32 of scale_g * q * x, min_sum over
 * the groups of min_g * (sum of the group's activations). */
static void vec_dot_q4_K_ref(int n, float *s, const void *w, const void *x) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    float acc = 0, accm = 0;
    for (int i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) rp_k4_scale_min(j, a[i].scales, &sc[j], &mn[j]);
        int32_t sum = 0, msum = 0;
        for (int j = 0; j < 8; j++) msum += mn[j] * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        for (int e = 0; e < QK_K; e++) {
            const int c = e / 64, l = e % 32;
            const int q = e % 64 < 32 ? a[i].qs[32 * c + l] & 0xF : a[i].qs[32 * c + l] >> 4;
            sum += sc[e / 32] * q * b[i].qs[e];
        }
        acc = fmaf((float)sum, rp_fp16_to_fp32(a[i].d) * b[i].d, acc);
        accm = fmaf((float)msum, rp_fp16_to_fp32(a[i].dmin) * b[i].d, accm);
    }
    *s = acc - accm;
}

/* Q4_K in llama.cpp's repacked 4-row gemm order (rp_kernels.vec_dot_batch):
 * the same sums per 64 elements (groups 2c, 2c+1) instead of per super-block. */
static void vec_dot_q4_K_batch_ref(int n, float *s, const void *w, const void *x) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    float acc = 0, accm = 0;
    for (int i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) rp_k4_scale_min(j, a[i].scales, &sc[j], &mn[j]);
        for (int c = 0; c < 4; c++) {
            int32_t sum = 0, msum = 0;
            for (int j = 2 * c; j < 2 * c + 2; j++)
                msum += mn[j] * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
            for (int e = 64 * c; e < 64 * c + 64; e++) {
                const int l = e % 32;
                const int q = e % 64 < 32 ? a[i].qs[32 * c + l] & 0xF : a[i].qs[32 * c + l] >> 4;
                sum += sc[e / 32] * q * b[i].qs[e];
            }
            acc = fmaf((float)sum, rp_fp16_to_fp32(a[i].d) * b[i].d, acc);
            accm = fmaf((float)msum, rp_fp16_to_fp32(a[i].dmin) * b[i].d, accm);
        }
    }
    *s = acc - accm;
}

/* Q5_K: tiled_step with the mins (llama.cpp's tiled order). */
static void vec_dot_q5_K_ref(int n, float *s, const void *w, const void *x) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    float acc = 0;
    for (int i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) rp_k4_scale_min(j, a[i].scales, &sc[j], &mn[j]);
        int32_t total = 0, sum = 0;
        for (int j = 0; j < 8; j++) total += mn[j] * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        for (int e = 0; e < QK_K; e++) {
            const int c = e / 64, l = e % 32, hi = e % 64 >= 32;
            const int q = (hi ? a[i].qs[32 * c + l] >> 4 : a[i].qs[32 * c + l] & 0xF) +
                          (((a[i].qh[l] >> (2 * c + hi)) & 1) << 4);
            sum += sc[e / 32] * q * b[i].qs[e];
        }
        acc = tiled_step(acc, sum, total, rp_fp16_to_fp32(a[i].d), rp_fp16_to_fp32(a[i].dmin),
                         b[i].d);
    }
    *s = acc;
}

/* Q6_K (lanes): the unsigned 6-bit values q in the lanes of their elements;
 * the offset -32 comes from the activation's 16-group sums, lane L taking
 * that of groups 2L and 2L+1: lane[L] -= 32 * (sc[2L] * bsums[2L] +
 * sc[2L+1] * bsums[2L+1]) (llama.cpp's AVX2 ggml_vec_dot_q6_K_q8_K). */
static void vec_dot_q6_K_ref(int n, float *s, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    float acc[8] = {0};
    for (int i = 0; i < n / QK_K; i++) {
        const float d = b[i].d * rp_fp16_to_fp32(a[i].d);
        int32_t lane[8] = {0};
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const uint8_t lo = a[i].ql[64 * h + l + 32 * (k & 1)];
            const int q = (k < 2 ? lo & 0xF : lo >> 4) | ((a[i].qh[32 * h + l] >> (2 * k)) & 3)
                                                             << 4;
            lane[l / 4] += a[i].scales[e / 16] * q * b[i].qs[e];
        }
        for (int L = 0; L < 8; L++)
            lane[L] -= 32 * (a[i].scales[2 * L] * b[i].bsums[2 * L] +
                             a[i].scales[2 * L + 1] * b[i].bsums[2 * L + 1]);
        lanes_fma(acc, d, lane);
    }
    *s = rp_hsum8_ref(acc);
}

/* Q6_K in llama.cpp's tiled K-quant matmul order (rp_kernels.vec_dot_batch):
 * per super-block the exact sum S of scale * (q - 32) * x, then
 * acc = fma((float)S * dw, dx, acc). */
static void vec_dot_q6_K_batch_ref(int n, float *s, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    float acc = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int32_t sum = 0;
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const uint8_t lo = a[i].ql[64 * h + l + 32 * (k & 1)];
            const int q =
                ((k < 2 ? lo & 0xF : lo >> 4) | ((a[i].qh[32 * h + l] >> (2 * k)) & 3) << 4) - 32;
            sum += a[i].scales[e / 16] * q * b[i].qs[e];
        }
        acc = fmaf((float)sum * rp_fp16_to_fp32(a[i].d), b[i].d, acc);
    }
    *s = acc;
}

static void vec_dot_iq4_xs_ref(int n, float *s, const void *w, const void *x) {
    const block_iq4_xs *a = w;
    const block_q8_K *b = x;
    float acc = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int32_t sum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = (((a[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                            (((a[i].scales_h >> (2 * ib)) & 3) << 4)) -
                           32;
            for (int e = 0; e < 32; e++) {
                const uint8_t byte = a[i].qs[16 * ib + e % 16];
                const int v = rp_kvalues_iq4nl[e < 16 ? byte & 0xF : byte >> 4];
                sum += ls * v * b[i].qs[32 * ib + e];
            }
        }
        acc = tiled_step(acc, sum, 0, rp_fp16_to_fp32(a[i].d), 0, b[i].d);
    }
    *s = acc;
}

/* ---- gated delta-net ------------------------------------------------------ */

void rp_conv_token_ref(float *x, float *h, const float *w, int k, int channels, long c0, long c1) {
    const size_t ch = (size_t)channels;
    for (long c = c0; c < c1; c++) {
        const float xc = x[c];
        float acc = w[(size_t)(k - 1) * ch + (size_t)c] * xc;
        for (int i = 0; i < k - 1; i++)
            acc += w[(size_t)i * ch + (size_t)c] * h[(size_t)i * ch + (size_t)c];
        for (int i = 0; i + 1 < k - 1; i++)
            h[(size_t)i * ch + (size_t)c] = h[(size_t)(i + 1) * ch + (size_t)c];
        if (k > 1) h[(size_t)(k - 2) * ch + (size_t)c] = xc;
        x[c] = acc / (1.0f + expf(-acc)); /* SiLU */
    }
}

void rp_delta_token_ref(float *S, int d, float decay, float beta, const float *q, const float *k,
                        const float *v, float scale, float *o, float *delta) {
    /* what the decayed state predicts for k, and the correction along it */
    for (int j = 0; j < d; j++) {
        const float *row = S + (size_t)j * (size_t)d;
        float sk = 0.0f;
        for (int i = 0; i < d; i++) sk += row[i] * k[i];
        delta[j] = (v[j] - decay * sk) * beta;
    }
    /* decay, write the correction, read with q: one sweep */
    for (int j = 0; j < d; j++) {
        float *row = S + (size_t)j * (size_t)d;
        float oj = 0.0f;
        for (int i = 0; i < d; i++) {
            row[i] = row[i] * decay + delta[j] * k[i];
            oj += row[i] * q[i];
        }
        o[j] = oj * scale;
    }
}

/* e^x as llama.cpp's AVX-512 build evaluates it (one lane of ggml_v_expf):
 * n = round(x log2 e) by the 1.5 * 2^23 shift, b = x - n ln2 in two fused
 * steps (ln2 split as hi + lo), p(b) = 1 + c1 b + c2 b^2 + ... + c5 b^5 as
 * three fused pairs in b and b^2, result p * 2^n; |n| > 192 gives 0 below,
 * +inf above (e^-inf = 0). */
float rp_expf_ggml512(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192) return n <= 0 ? 0.0f : INFINITY;
    const float u = b * b;
    const float j = fmaf(
        fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
        u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

void rp_silu_mul_ref(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        const float x = gate[i];
        gate[i] = x / (1.0f + rp_expf_ggml512(0.0f - x)) * up[i];
    }
}

float rp_reduce16(const float *v) {
    float t[8], u[4];
    for (int i = 0; i < 8; i++) t[i] = v[i] + v[i + 8];
    for (int i = 0; i < 4; i++) u[i] = t[i] + t[i + 4];
    return (u[0] + u[2]) + (u[1] + u[3]);
}

static float dot_f32_ggml_ref(int n, const float *x, const float *y) {
    float acc[4][16] = {{0}};
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++)
                acc[j][l] = fmaf(x[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]);
    float r[16];
    for (int l = 0; l < 16; l++) r[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    float s = rp_reduce16(r);
    /* the tail: ggml's leftover loop is not contracted (each product rounded,
     * then added; measured on qwen3-tiny's head dim 32, every score) */
    for (int i = np; i < n; i++) {
        const float pr = x[i] * y[i];
        s += pr;
    }
    return s;
}

static double exp_sum_ggml_ref(int n, float *x, float max) {
    double sum = 0;
    for (int i = 0; i < n; i += 16) {
        for (int l = 0; l < 16; l++) x[i + l] = rp_expf_ggml512(x[i + l] - max);
        sum += (double)rp_reduce16(x + i);
    }
    return sum;
}

static void fma_f32_ref(int n, float a, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] = fmaf(x[i], a, y[i]);
}

void rp_kernels_fill_ref(rp_kernels *k) {
    k->dot_f32_ggml = dot_f32_ggml_ref;
    k->exp_sum_ggml = exp_sum_ggml_ref;
    k->fma_f32 = fma_f32_ref;
    k->silu_mul = rp_silu_mul_ref;
    k->vec_dot[RP_TYPE_F32] = vec_dot_f32_ref;
    k->vec_dot[RP_TYPE_F16] = vec_dot_f16_ref;
    k->vec_dot[RP_TYPE_BF16] = vec_dot_bf16_ref;
    k->act_quant[RP_TYPE_BF16] = rp_float_to_bf16;
    k->act_quant[RP_TYPE_F16] = rp_float_to_f16;
    k->vec_dot[RP_TYPE_Q4_0] = vec_dot_q4_0_ref;
    k->vec_dot[RP_TYPE_Q4_1] = vec_dot_q4_1_ref;
    k->vec_dot[RP_TYPE_Q5_0] = vec_dot_q5_0_ref;
    k->vec_dot[RP_TYPE_Q5_1] = vec_dot_q5_1_ref;
    k->vec_dot[RP_TYPE_Q8_0] = vec_dot_q8_0_ref;
    k->vec_dot[RP_TYPE_Q2_K] = vec_dot_q2_K_ref;
    k->vec_dot[RP_TYPE_Q3_K] = vec_dot_q3_K_ref;
    k->vec_dot[RP_TYPE_Q4_K] = vec_dot_q4_K_ref;
    k->vec_dot[RP_TYPE_Q5_K] = vec_dot_q5_K_ref;
    k->vec_dot[RP_TYPE_Q6_K] = vec_dot_q6_K_ref;
    k->vec_dot_batch[RP_TYPE_Q4_K] = vec_dot_q4_K_batch_ref;
    k->vec_dot_batch[RP_TYPE_Q6_K] = vec_dot_q6_K_batch_ref;
    k->vec_dot[RP_TYPE_IQ4_NL] = vec_dot_iq4_nl_ref;
    k->vec_dot[RP_TYPE_IQ4_XS] = vec_dot_iq4_xs_ref;
    k->act_quant[RP_TYPE_Q8_0] = rp_act_q8_0;
    k->act_quant[RP_TYPE_Q8_1] = rp_act_q8_1;
    k->act_quant[RP_TYPE_Q8_K] = rp_act_q8_K;
    k->dot_f32 = dot_f32_ref;
    k->axpy_f32 = axpy_f32_ref;
    k->dot_f16_f32 = dot_f16_f32_ref;
    k->axpy_f16 = axpy_f16_ref;
    k->f32_to_f16 = f32_to_f16_ref;
    k->delta_token = rp_delta_token_ref;
    k->conv_token = rp_conv_token_ref;
}
