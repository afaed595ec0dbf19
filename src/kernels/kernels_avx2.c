/* AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c; only called
 * when cpuid says the CPU has them. Every quantized dot product returns
 * exactly the floats of its scalar twin in kernels_ref.c (same lane split,
 * same fused multiply-adds in the same order); integer parts may be computed
 * any exact way. */
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "base/util.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* the drivers below take the values function as a constant: inlined */
#define ALWAYS_INLINE static inline __attribute__((always_inline))
/* the tiles' small loops over tokens, rows and chunks: registers, not arrays */
#define UNROLL _Pragma("GCC unroll 8")

static inline float f16(uint16_t h) {
    return _cvtsh_ss(h);
}

/* ((a4+a0)+(a6+a2)) + ((a5+a1)+(a7+a3)) */
static inline float hsum256(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* llama.cpp's tiled K-quant order (kernels_ref.c, tiled_step): per super-block
 * r = (float)s * dw, r = fma(-dmin, (float)m, r), acc = fma(r, dx, acc). */
static inline float tiled_step(float acc, int32_t s, int32_t m, float dw, float dmin, float dx) {
    float r = (float)s * dw;
    r = fmaf(-dmin, (float)m, r);
    return fmaf(r, dx, acc);
}

/* unsigned a (bytes < 128 or any u8 with |pair sums| < 2^15) times signed b:
 * 8 int32 lanes of 4 consecutive bytes */
static inline __m256i dot_u8(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

/* signed a times signed b (b never -128) */
static inline __m256i dot_i8(__m256i a, __m256i b) {
    return dot_u8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

/* 16 packed bytes to 32 nibbles: low nibbles first, then high nibbles */
static inline __m256i nibbles32(const uint8_t *p) {
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* byte j = 0xFF if bit j of the 32-bit word is set */
static inline __m256i bits32(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    const __m256i sh = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                          0x0202020202020202, 0x0303030303030303);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)w), sh);
    const __m256i m = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(b, m), m);
}

/* ---- float kernels --------------------------------------------------------- */

static float dot_f32_avx2(int n, const float *a, const float *b) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_f32_avx2(int n, float a, const float *x, float *y) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

static float dot_f16_f32_avx2(int n, const uint16_t *a, const float *b) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));
        __m256 a1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 8)));
        s0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i))),
                             _mm256_loadu_ps(b + i), s0);
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += f16(a[i]) * b[i];
    return s;
}

static void axpy_f16_avx2(int n, float a, const uint16_t *x, float *y) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            y + i, _mm256_fmadd_ps(va, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))),
                                   _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * f16(x[i]);
}

static void f32_to_f16_avx2(const float *x, uint16_t *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = rp_fp32_to_fp16(x[i]);
}

/* F32 weights: the scalar twin's order (its 16 lanes as two halves) */
static inline __m256 f32x8(const float *p, int cnt) {
    if (cnt >= 8) return _mm256_loadu_ps(p);
    float t[8] = {0};
    memcpy(t, p, (size_t)(cnt > 0 ? cnt : 0) * 4);
    return _mm256_loadu_ps(t);
}

static void vec_dot_f32_avx2(int n, float *s, const void *w, const void *x) {
    const float *a = w, *b = x;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int i = 0; i < n; i += 16) {
        lo = _mm256_fmadd_ps(f32x8(a + i, n - i), f32x8(b + i, n - i), lo);
        hi = _mm256_fmadd_ps(f32x8(a + i + 8, n - i - 8), f32x8(b + i + 8, n - i - 8), hi);
    }
    float l[16];
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(l + 8, hi);
    *s = rp_reduce16(l);
}
/* F16 activations, the order of the scalar twin: its 16 lanes as two halves */
static inline __m256 f16x8(const uint16_t *p, int cnt) {
    if (cnt >= 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    uint16_t t[8] = {0};
    memcpy(t, p, (size_t)(cnt > 0 ? cnt : 0) * 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t));
}

static void vec_dot_f16_avx2(int n, float *s, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int i = 0; i < n; i += 16) {
        lo = _mm256_fmadd_ps(f16x8(a + i, n - i), f16x8(b + i, n - i), lo);
        hi = _mm256_fmadd_ps(f16x8(a + i + 8, n - i - 8), f16x8(b + i + 8, n - i - 8), hi);
    }
    float l[16];
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(l + 8, hi);
    *s = rp_reduce16(l);
}

static void act_f16_avx2(const float *x, void *y, int64_t n) {
    uint16_t *d = y;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = rp_fp32_to_fp16(x[i]);
}

/* 8 bf16 pairs (16 values) as two float vectors, the odd values and the
 * even ones, subnormals as zero (vdpbf16ps reads them so) */
static inline void bf16_pairs(const uint16_t *p, int cnt, __m256 *odd, __m256 *even) {
    __m256i v;
    if (cnt >= 16) {
        v = _mm256_loadu_si256((const __m256i *)p);
    } else {
        uint16_t t[16] = {0};
        memcpy(t, p, (size_t)cnt * 2);
        v = _mm256_loadu_si256((const __m256i *)t);
    }
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u), ehi = _mm256_set1_epi32(0x7f800000),
                  elo = _mm256_set1_epi32(0x7f80);
    const __m256i o = _mm256_and_si256(v, hi), e = _mm256_slli_epi32(v, 16);
    const __m256i zo = _mm256_cmpeq_epi32(_mm256_and_si256(v, ehi), _mm256_setzero_si256());
    const __m256i ze = _mm256_cmpeq_epi32(_mm256_and_si256(v, elo), _mm256_setzero_si256());
    *odd = _mm256_castsi256_ps(_mm256_andnot_si256(zo, o));
    *even = _mm256_castsi256_ps(_mm256_andnot_si256(ze, e));
}

/* BF16 activations, the AVX512_BF16 order of the scalar twin (kernels_ref.c):
 * its 16 lanes as two 8-lane halves, odd then even value of each pair */
static void vec_dot_bf16_avx2(int n, float *s, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int i = 0; i < n; i += 32) {
        __m256 ao, ae, bo, be;
        bf16_pairs(a + i, n - i, &ao, &ae);
        bf16_pairs(b + i, n - i, &bo, &be);
        lo = _mm256_fmadd_ps(ae, be, _mm256_fmadd_ps(ao, bo, lo));
        const int r = n - i - 16;
        if (r > 0) {
            bf16_pairs(a + i + 16, r, &ao, &ae);
            bf16_pairs(b + i + 16, r, &bo, &be);
        } else {
            ao = ae = bo = be = _mm256_setzero_ps();
        }
        hi = _mm256_fmadd_ps(ae, be, _mm256_fmadd_ps(ao, bo, hi));
    }
    float l[16];
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(l + 8, hi);
    *s = rp_reduce16(l);
}

/* ---- legacy blocks ----------------------------------------------------------- */

static void vec_dot_q8_0_avx2(int n, float *s, const void *w, const void *x) {
    const block_q8_0 *a = w, *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QK8_0; i++) {
        __m256i qa = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256 d = _mm256_set1_ps(f16(a[i].d) * f16(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(qa, qb)), acc);
    }
    *s = hsum256(acc);
}

/* the f16 d of 4 consecutive blocks (stride bytes apart) as floats */
static inline __m128 d4_f16(const uint8_t *p, size_t stride) {
    uint16_t h0, h1, h2, h3;
    memcpy(&h0, p, 2);
    memcpy(&h1, p + stride, 2);
    memcpy(&h2, p + 2 * stride, 2);
    memcpy(&h3, p + 3 * stride, 2);
    __m128i v = _mm_cvtsi32_si128(h0);
    v = _mm_insert_epi16(v, h1, 1);
    v = _mm_insert_epi16(v, h2, 2);
    v = _mm_insert_epi16(v, h3, 3);
    return _mm_cvtph_ps(v);
}

/* acc = fma((float)sum, dw*dx, acc) per block, in block order; 4 blocks'
 * sums reduced together, then the chain on lane 0 */
static void vec_dot_q4_0_avx2(int n, float *s, const void *w, const void *x) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    const int nb = n / QK8_0;
    __m128 acc4 = _mm_setzero_ps();
    int i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m256i p0 = dot_i8(_mm256_sub_epi8(nibbles32(a[i].qs), _mm256_set1_epi8(8)),
                                  _mm256_loadu_si256((const __m256i *)b[i].qs));
        const __m256i p1 = dot_i8(_mm256_sub_epi8(nibbles32(a[i + 1].qs), _mm256_set1_epi8(8)),
                                  _mm256_loadu_si256((const __m256i *)b[i + 1].qs));
        const __m256i p2 = dot_i8(_mm256_sub_epi8(nibbles32(a[i + 2].qs), _mm256_set1_epi8(8)),
                                  _mm256_loadu_si256((const __m256i *)b[i + 2].qs));
        const __m256i p3 = dot_i8(_mm256_sub_epi8(nibbles32(a[i + 3].qs), _mm256_set1_epi8(8)),
                                  _mm256_loadu_si256((const __m256i *)b[i + 3].qs));
        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
        const __m128 sf = _mm_cvtepi32_ps(
            _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
        const __m128 d = _mm_mul_ps(d4_f16((const uint8_t *)&a[i].d, sizeof *a),
                                    d4_f16((const uint8_t *)&b[i].d, sizeof *b));
        acc4 = _mm_fmadd_ss(sf, d, acc4);
        acc4 = _mm_fmadd_ss(_mm_shuffle_ps(sf, sf, 1), _mm_shuffle_ps(d, d, 1), acc4);
        acc4 = _mm_fmadd_ss(_mm_shuffle_ps(sf, sf, 2), _mm_shuffle_ps(d, d, 2), acc4);
        acc4 = _mm_fmadd_ss(_mm_shuffle_ps(sf, sf, 3), _mm_shuffle_ps(d, d, 3), acc4);
    }
    float acc = _mm_cvtss_f32(acc4);
    for (; i < nb; i++) {
        __m256i q = _mm256_sub_epi8(nibbles32(a[i].qs), _mm256_set1_epi8(8));
        int sum = hsum_i32(dot_i8(q, _mm256_loadu_si256((const __m256i *)b[i].qs)));
        acc = fmaf((float)sum, f16(a[i].d) * f16(b[i].d), acc);
    }
    *s = acc;
}

static void vec_dot_q4_1_avx2(int n, float *s, const void *w, const void *x) {
    const block_q4_1 *a = w;
    const block_q8_1 *b = x;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    for (int i = 0; i < n / QK8_1; i++) {
        summs = fmaf(f16(a[i].m), f16(b[i].s), summs);
        __m256i l = dot_u8(nibbles32(a[i].qs), _mm256_loadu_si256((const __m256i *)b[i].qs));
        acc =
            _mm256_fmadd_ps(_mm256_set1_ps(f16(a[i].d) * f16(b[i].d)), _mm256_cvtepi32_ps(l), acc);
    }
    *s = hsum256(acc) + summs;
}

static void vec_dot_q5_0_avx2(int n, float *s, const void *w, const void *x) {
    const block_q5_0 *a = w;
    const block_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QK8_0; i++) {
        /* (nibble | bit << 4) - 16 == nibble | (bit ? 0 : 0xF0) as a signed byte */
        __m256i q = _mm256_or_si256(
            nibbles32(a[i].qs), _mm256_andnot_si256(bits32(a[i].qh), _mm256_set1_epi8((char)0xF0)));
        __m256i l = dot_i8(q, _mm256_loadu_si256((const __m256i *)b[i].qs));
        acc =
            _mm256_fmadd_ps(_mm256_set1_ps(f16(a[i].d) * f16(b[i].d)), _mm256_cvtepi32_ps(l), acc);
    }
    *s = hsum256(acc);
}

static void vec_dot_q5_1_avx2(int n, float *s, const void *w, const void *x) {
    const block_q5_1 *a = w;
    const block_q8_1 *b = x;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    for (int i = 0; i < n / QK8_1; i++) {
        summs = fmaf(f16(a[i].m), f16(b[i].s), summs);
        __m256i q = _mm256_or_si256(nibbles32(a[i].qs),
                                    _mm256_and_si256(bits32(a[i].qh), _mm256_set1_epi8(0x10)));
        __m256i l = dot_u8(q, _mm256_loadu_si256((const __m256i *)b[i].qs));
        acc =
            _mm256_fmadd_ps(_mm256_set1_ps(f16(a[i].d) * f16(b[i].d)), _mm256_cvtepi32_ps(l), acc);
    }
    *s = hsum256(acc) + summs;
}

static void vec_dot_iq4_nl_avx2(int n, float *s, const void *w, const void *x) {
    const block_iq4_nl *a = w;
    const block_q8_0 *b = x;
    const __m256i lut =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rp_kvalues_iq4nl));
    float acc = 0;
    for (int i = 0; i < n / QK4_NL; i++) {
        __m256i v = _mm256_shuffle_epi8(lut, nibbles32(a[i].qs));
        int sum = hsum_i32(dot_i8(v, _mm256_loadu_si256((const __m256i *)b[i].qs)));
        acc = fmaf((float)sum, f16(a[i].d) * f16(b[i].d), acc);
    }
    *s = acc;
}

/* ---- K-quants ------------------------------------------------------------------ */

/* 32 bytes of 2-bit fields at shift sh: byte l = (qs[l] >> sh) & 3 */
static inline __m256i crumbs(__m256i bits, int sh) {
    return _mm256_and_si256(_mm256_srli_epi16(bits, sh), _mm256_set1_epi8(3));
}

/* lanes of sum over one 32-element chunk of scale(e) * q(e) * x(e) where the
 * first 16 elements use scale s0 and the next 16 use s1 (q unsigned) */
static inline __m256i chunk16_u8(__m256i q, __m256i x, int s0, int s1) {
    __m256i sc = _mm256_setr_epi16((short)s0, (short)s0, (short)s0, (short)s0, (short)s0, (short)s0,
                                   (short)s0, (short)s0, (short)s1, (short)s1, (short)s1, (short)s1,
                                   (short)s1, (short)s1, (short)s1, (short)s1);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), sc);
}

static void vec_dot_q2_K_avx2(int n, float *s, const void *w, const void *x) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    float acc = 0, accm = 0;
    for (int i = 0; i < n / QK_K; i++) {
        __m128i sc8 = _mm_loadu_si128((const __m128i *)a[i].scales);
        __m256i mins =
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0xF)));
        int msum =
            hsum_i32(_mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)b[i].bsums)));
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                const int g = 8 * h + 2 * k;
                __m256i xv = _mm256_loadu_si256((const __m256i *)(b[i].qs + 128 * h + 32 * k));
                sumi =
                    _mm256_add_epi32(sumi, chunk16_u8(crumbs(bits, 2 * k), xv, a[i].scales[g] & 0xF,
                                                      a[i].scales[g + 1] & 0xF));
            }
        }
        acc = fmaf((float)hsum_i32(sumi), f16(a[i].d) * b[i].d, acc);
        accm = fmaf((float)msum, f16(a[i].dmin) * b[i].d, accm);
    }
    *s = acc - accm;
}

static void vec_dot_q3_K_avx2(int n, float *s, const void *w, const void *x) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    float acc = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int sc[16];
        for (int j = 0; j < 16; j++) sc[j] = rp_q3k_scale(j, a[i].scales);
        const __m256i hbits = _mm256_loadu_si256((const __m256i *)a[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                const int bit = 4 * h + k, g = 8 * h + 2 * k;
                /* q = low2 - 4 * (1 - hbit): (low2 + 4*hbit) - 4 */
                __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hbits, bit), _mm256_set1_epi8(1));
                __m256i q =
                    _mm256_sub_epi8(_mm256_add_epi8(crumbs(bits, 2 * k), _mm256_slli_epi16(hb, 2)),
                                    _mm256_set1_epi8(4));
                __m256i xv = _mm256_loadu_si256((const __m256i *)(b[i].qs + 128 * h + 32 * k));
                __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(xv, q));
                __m256i scv = _mm256_setr_epi16(
                    (short)sc[g], (short)sc[g], (short)sc[g], (short)sc[g], (short)sc[g],
                    (short)sc[g], (short)sc[g], (short)sc[g], (short)sc[g + 1], (short)sc[g + 1],
                    (short)sc[g + 1], (short)sc[g + 1], (short)sc[g + 1], (short)sc[g + 1],
                    (short)sc[g + 1], (short)sc[g + 1]);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scv));
            }
        }
        acc = tiled_step(acc, hsum_i32(sumi), 0, f16(a[i].d), 0, b[i].d);
    }
    *s = acc;
}

/* the 8 6-bit scales and mins of a Q4_K / Q5_K block (rp_k4_scale_min for
 * every j, on 32-bit words) */
static inline void k4_scales_mins(const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    uint32_t u[3];
    memcpy(u, q, 12);
    const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    const uint32_t s0 = u[0] & m6, s1 = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);
    const uint32_t n0 = u[1] & m6, n1 = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);
    memcpy(sc, &s0, 4);
    memcpy(sc + 4, &s1, 4);
    memcpy(mn, &n0, 4);
    memcpy(mn + 4, &n1, 4);
}

static void vec_dot_q4_K_avx2(int n, float *s, const void *w, const void *x) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    float acc = 0, accm = 0;
    for (int i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mn[8];
        k4_scales_mins(a[i].scales, sc, mn);
        /* sum_j mn[j] (bsums[2j] + bsums[2j+1]), exactly */
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(
            _mm_loadl_epi64((const __m128i *)mn), _mm_loadl_epi64((const __m128i *)mn)));
        const int msum =
            hsum_i32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)b[i].bsums), mins16));
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * c));
            __m256i lo = _mm256_and_si256(bits, _mm256_set1_epi8(0xF));
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), _mm256_set1_epi8(0xF));
            __m256i x0 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * c));
            __m256i x1 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * c + 32));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0),
                                                            _mm256_set1_epi16(sc[2 * c])));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1),
                                                            _mm256_set1_epi16(sc[2 * c + 1])));
        }
        acc = fmaf((float)hsum_i32(sumi), f16(a[i].d) * b[i].d, acc);
        accm = fmaf((float)msum, f16(a[i].dmin) * b[i].d, accm);
    }
    *s = acc - accm;
}

static void vec_dot_q5_K_avx2(int n, float *s, const void *w, const void *x) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    float acc = 0;
    for (int i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mn[8];
        k4_scales_mins(a[i].scales, sc, mn);
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(
            _mm_loadl_epi64((const __m128i *)mn), _mm_loadl_epi64((const __m128i *)mn)));
        const int total =
            hsum_i32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)b[i].bsums), mins16));
        const __m256i hbits = _mm256_loadu_si256((const __m256i *)a[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * c));
            __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c), _mm256_set1_epi8(1));
            __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c + 1), _mm256_set1_epi8(1));
            __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi8(0xF)),
                                         _mm256_slli_epi16(h0, 4));
            __m256i hi =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), _mm256_set1_epi8(0xF)),
                                _mm256_slli_epi16(h1, 4));
            __m256i x0 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * c));
            __m256i x1 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * c + 32));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0),
                                                            _mm256_set1_epi16(sc[2 * c])));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1),
                                                            _mm256_set1_epi16(sc[2 * c + 1])));
        }
        acc = tiled_step(acc, hsum_i32(sumi), total, f16(a[i].d), f16(a[i].dmin), b[i].d);
    }
    *s = acc;
}

/* shuffles of 8 int16 scales (both lanes) giving scale 2k x 8 in the low
 * lane and 2k + 1 x 8 in the high lane */
#define K6S(a, b)                                                                                  \
    _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a,      \
                     a + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1,  \
                     b, b + 1)

static void vec_dot_q6_K_avx2(int n, float *s, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    __m256 acc = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    const __m256i k6_scale_shuf[4] = {K6S(0, 2), K6S(4, 6), K6S(8, 10), K6S(12, 14)};
    for (int i = 0; i < n / QK_K; i++) {
        const float d = b[i].d * f16(a[i].d);
        /* the 16 scales as int16; half h's 8 in both 128-bit lanes */
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[i].scales));
        /* the offset 32 per lane from the 16-group sums (see the ref) */
        const __m256i off =
            _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)b[i].bsums), sc16);
        __m256i sumi = _mm256_setzero_si256();
        UNROLL
        for (int h = 0; h < 2; h++) {
            /* (an immediate at every optimization level, unlike h ? 0x11 : 0x00) */
            const __m256i sch = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11)
                                  : _mm256_permute2x128_si256(sc16, sc16, 0x00);
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(a[i].ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(a[i].ql + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(a[i].qh + 32 * h));
            /* value k: its 4 low bits, bits 2k, 2k+1 of hb at bits 4, 5 (the
             * 16-bit shifts carry bits across bytes only where masked off) */
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_and_si256(hb, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
            UNROLL
            for (int k = 0; k < 4; k++) {
                const __m256i xv =
                    _mm256_loadu_si256((const __m256i *)(b[i].qs + 128 * h + 32 * k));
                /* scale 8h + 2k in the low lane, 8h + 2k + 1 in the high lane */
                const __m256i scv = _mm256_shuffle_epi8(sch, k6_scale_shuf[k]);
                sumi =
                    _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], xv), scv));
            }
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum256(acc);
}

static void vec_dot_iq4_xs_avx2(int n, float *s, const void *w, const void *x) {
    const block_iq4_xs *a = w;
    const block_q8_K *b = x;
    const __m256i lut =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rp_kvalues_iq4nl));
    float acc = 0;
    for (int i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const int ls = (((a[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                            (((a[i].scales_h >> (2 * ib)) & 3) << 4)) -
                           32;
            __m256i v = _mm256_shuffle_epi8(lut, nibbles32(a[i].qs + 16 * ib));
            __m256i xv = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * ib));
            __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(xv, v));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, _mm256_set1_epi16((short)ls)));
        }
        acc = tiled_step(acc, hsum_i32(sumi), 0, f16(a[i].d), 0, b[i].d);
    }
    *s = acc;
}

/* ---- activation encodings ---------------------------------------------------- */

/* Q8_0 / Q8_1: d = amax/127 (fp16), q = round-half-even(x * 127/amax). */
static inline float act_block_avx2(const float *p, int8_t *q, int *sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8), v2 = _mm256_loadu_ps(p + 16),
           v3 = _mm256_loadu_ps(p + 24);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i i0 = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(v0, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i1 = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(v1, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i2 = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(v2, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i3 = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(v3, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (sum) *sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
    i0 = _mm256_packs_epi32(i0, i1);
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, i0);
    return amax / 127.0f;
}

static void act_q8_0_avx2(const float *x, void *y, int64_t n) {
    block_q8_0 *b = y;
    for (int64_t i = 0; i < n / QK8_0; i++)
        b[i].d = rp_fp32_to_fp16(act_block_avx2(x + i * QK8_0, b[i].qs, NULL));
}

static void act_q8_1_avx2(const float *x, void *y, int64_t n) {
    block_q8_1 *b = y;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int sum;
        const float d = act_block_avx2(x + i * QK8_1, b[i].qs, &sum);
        b[i].d = rp_fp32_to_fp16(d);
        b[i].s = rp_fp32_to_fp16(d * (float)sum);
    }
}

/* ---- prompt batches: tiles of 2 rows x 4 tokens ------------------------------
 *
 * The gemm of rp_gemm_ops: the activations of a group of RP_GEMM_GROUP tokens
 * are interleaved by block once per product (pack), the weights of two rows
 * are decoded once per call into the per-thread scratch (signed values, their
 * magnitudes, scales as vectors), then every quad of tokens runs against the
 * pair of rows with the 8 (row, token) products in registers. Each product
 * keeps the one-row vec_dot's arithmetic exactly:
 *   lanes (Q8_0, Q5_0): one 8-lane float accumulator per product,
 *     acc = fma(dw*dx, (float)lanes, acc), hsum256 at the end;
 *   rows (IQ4_NL): the block's exact integer sum, then
 *     acc = fma((float)sum, dw*dx, acc) per product, the 8 products of a tile
 *     in the 8 lanes of one vector.
 * Q4_0 and Q4_K have tiles of 8 rows interleaved x 4 tokens (below), in the
 * rows kind's order too.
 * A missing row or token of a tile repeats the last one; it is not stored. */

#define TQ 4 /* tokens of a tile */

/* lane k = the sum of the 8 lanes of s[k] (integer: any order is exact) */
static inline __m256i reduce8_i32(const __m256i *s) {
    const __m256i h01 = _mm256_hadd_epi32(s[0], s[1]), h23 = _mm256_hadd_epi32(s[2], s[3]);
    const __m256i h45 = _mm256_hadd_epi32(s[4], s[5]), h67 = _mm256_hadd_epi32(s[6], s[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* lane r * 4 + t of v to y[t * ldy + r] for the rows and tokens that exist */
static inline void store_tile(float *y, size_t ldy, __m256 v, int rows, int toks) {
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < toks; t++) y[(size_t)t * ldy + (size_t)r] = tmp[r * TQ + t];
}

/* -- 32-blocks with Q8_0 activations ---------------------------------------- */

/* a group, per block of 32 inputs: the 16 tokens' qs, then their d as floats */
#define G32_BYTES (RP_GEMM_GROUP * 32 + RP_GEMM_GROUP * 4)
/* the decoded pair of rows, per block: |q0|, q0, |q1|, q1, then d0 x4, d1 x4 */
#define W32_BYTES (5 * 32)

static size_t g32_group_bytes(int n) {
    return (size_t)(n / 32) * G32_BYTES;
}

static size_t g32_scratch(int n) {
    return (size_t)(n / 32) * W32_BYTES + 64;
}

static void g32_pack(int n, int cnt, const void *xq, size_t ldx, void *group) {
    uint8_t *g = group;
    memset(g, 0, g32_group_bytes(n));
    for (int t = 0; t < cnt; t++) {
        const block_q8_0 *x = (const block_q8_0 *)((const uint8_t *)xq + (size_t)t * ldx);
        for (int b = 0; b < n / 32; b++) {
            uint8_t *gb = g + (size_t)b * G32_BYTES;
            const float d = f16(x[b].d);
            memcpy(gb + 32 * t, x[b].qs, 32);
            memcpy(gb + 32 * RP_GEMM_GROUP + 4 * t, &d, 4);
        }
    }
}

/* block b of a row: its 32 signed values and d */
typedef __m256i (*w32_values_fn)(const void *row, int b, float *d);

static __m256i values_q8_0(const void *row, int b, float *d) {
    const block_q8_0 *a = (const block_q8_0 *)row + b;
    *d = f16(a->d);
    return _mm256_loadu_si256((const __m256i *)a->qs);
}

static __m256i values_q4_0(const void *row, int b, float *d) {
    const block_q4_0 *a = (const block_q4_0 *)row + b;
    *d = f16(a->d);
    return _mm256_sub_epi8(nibbles32(a->qs), _mm256_set1_epi8(8));
}

static __m256i values_q5_0(const void *row, int b, float *d) {
    const block_q5_0 *a = (const block_q5_0 *)row + b;
    *d = f16(a->d);
    return _mm256_or_si256(nibbles32(a->qs),
                           _mm256_andnot_si256(bits32(a->qh), _mm256_set1_epi8((char)0xF0)));
}

static __m256i values_iq4_nl(const void *row, int b, float *d) {
    const block_iq4_nl *a = (const block_iq4_nl *)row + b;
    *d = f16(a->d);
    const __m256i lut =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rp_kvalues_iq4nl));
    return _mm256_shuffle_epi8(lut, nibbles32(a->qs));
}

/* rows r0 and r1 (may be equal) decoded into s */
ALWAYS_INLINE void w32_decode(int n, const void *w0, const void *w1, w32_values_fn values,
                              uint8_t *s) {
    for (int b = 0; b < n / 32; b++) {
        uint8_t *o = s + (size_t)b * W32_BYTES;
        float d0, d1;
        const __m256i q0 = values(w0, b, &d0), q1 = values(w1, b, &d1);
        _mm256_storeu_si256((__m256i *)o, _mm256_sign_epi8(q0, q0));
        _mm256_storeu_si256((__m256i *)(o + 32), q0);
        _mm256_storeu_si256((__m256i *)(o + 64), _mm256_sign_epi8(q1, q1));
        _mm256_storeu_si256((__m256i *)(o + 96), q1);
        _mm256_storeu_ps((float *)(o + 128), _mm256_setr_ps(d0, d0, d0, d0, d1, d1, d1, d1));
    }
}

/* the 8 lanes of |w| . sign(x, w) (= w . x, w from the file may be -128) */
static inline __m256i dot_abs(__m256i aw, __m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)),
                             _mm256_set1_epi16(1));
}

static void w32_lanes_tile(int nb, const uint8_t *s, const uint8_t *xg, int tq, __m256 *acc) {
    UNROLL
    for (int k = 0; k < 2 * TQ; k++) acc[k] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *o = s + (size_t)b * W32_BYTES, *xb = xg + (size_t)b * G32_BYTES;
        const __m256i a0 = _mm256_loadu_si256((const __m256i *)o),
                      q0 = _mm256_loadu_si256((const __m256i *)(o + 32)),
                      a1 = _mm256_loadu_si256((const __m256i *)(o + 64)),
                      q1 = _mm256_loadu_si256((const __m256i *)(o + 96));
        /* the 8 scale products dw_r * dx_t (lane r * 4 + t) in one multiply,
         * each then broadcast from memory: the multiply ports are the tile's
         * bottleneck, loads are not */
        _Alignas(32) float dd[2 * TQ];
        _mm256_store_ps(
            dd, _mm256_mul_ps(_mm256_loadu_ps((const float *)(o + 128)),
                              _mm256_broadcast_ps((
                                  const __m128 *)((const float *)(xb + 32 * RP_GEMM_GROUP) + tq))));
        UNROLL
        for (int t = 0; t < TQ; t++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(xb + 32 * (tq + t)));
            acc[t] = _mm256_fmadd_ps(_mm256_broadcast_ss(&dd[t]),
                                     _mm256_cvtepi32_ps(dot_abs(a0, q0, x)), acc[t]);
            acc[TQ + t] = _mm256_fmadd_ps(_mm256_broadcast_ss(&dd[TQ + t]),
                                          _mm256_cvtepi32_ps(dot_abs(a1, q1, x)), acc[TQ + t]);
        }
    }
}

static __m256 w32_rows_tile(int nb, const uint8_t *s, const uint8_t *xg, int tq) {
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *o = s + (size_t)b * W32_BYTES, *xb = xg + (size_t)b * G32_BYTES;
        const __m256i a0 = _mm256_loadu_si256((const __m256i *)o),
                      q0 = _mm256_loadu_si256((const __m256i *)(o + 32)),
                      a1 = _mm256_loadu_si256((const __m256i *)(o + 64)),
                      q1 = _mm256_loadu_si256((const __m256i *)(o + 96));
        __m256i p[2 * TQ];
        UNROLL
        for (int t = 0; t < TQ; t++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(xb + 32 * (tq + t)));
            p[t] = dot_abs(a0, q0, x);
            p[TQ + t] = dot_abs(a1, q1, x);
        }
        const __m256 dw = _mm256_loadu_ps((const float *)(o + 128));
        const __m256 dx =
            _mm256_broadcast_ps((const __m128 *)((const float *)(xb + 32 * RP_GEMM_GROUP) + tq));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8_i32(p)), _mm256_mul_ps(dw, dx), acc);
    }
    return acc;
}

ALWAYS_INLINE void w32_run(int n, int nr, const void *w, size_t ldw, const void *xp, int cnt,
                           float *y, size_t ldy, void *scratch, w32_values_fn values, bool lanes) {
    const int nb = n / 32;
    const size_t gb = g32_group_bytes(n);
    uint8_t *s = scratch;
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const int rows = RP_MIN(2, nr - r0);
        const char *w0 = (const char *)w + (size_t)r0 * ldw;
        w32_decode(n, w0, rows == 2 ? w0 + ldw : w0, values, s);
        for (int t0 = 0; t0 < cnt; t0 += TQ) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)(t0 / RP_GEMM_GROUP) * gb;
            const int tq = t0 % RP_GEMM_GROUP, toks = RP_MIN(TQ, cnt - t0);
            float *yt = y + (size_t)t0 * ldy + (size_t)r0;
            if (lanes) {
                __m256 acc[2 * TQ];
                w32_lanes_tile(nb, s, xg, tq, acc);
                for (int r = 0; r < rows; r++)
                    for (int t = 0; t < toks; t++)
                        yt[(size_t)t * ldy + (size_t)r] = hsum256(acc[r * TQ + t]);
            } else {
                store_tile(yt, ldy, w32_rows_tile(nb, s, xg, tq), rows, toks);
            }
        }
    }
}

#define W32_GEMM(name, lanes)                                                                      \
    static void gemm_run_##name(int n, int nr, const void *w, size_t ldw, const void *xp,          \
                                size_t ldx, int cnt, float *y, size_t ldy, void *scratch) {        \
        (void)ldx;                                                                                 \
        w32_run(n, nr, w, ldw, xp, cnt, y, ldy, scratch, values_##name, lanes);                    \
    }                                                                                              \
    static const rp_gemm_ops gemm_##name = {g32_group_bytes, g32_pack, g32_scratch,                \
                                            gemm_run_##name};

W32_GEMM(q8_0, true)
W32_GEMM(q5_0, true)
W32_GEMM(iq4_nl, false)

/* -- Q4_K with Q8_K activations ----------------------------------------------- */

/* a group, per super-block: the 16 tokens' qs, their bsums, their d, their
 * bsums of 32 (bsums[2j] + bsums[2j+1], 8 int16) */
#define GK_QS    0
#define GK_BSUMS (RP_GEMM_GROUP * QK_K)
#define GK_D     (GK_BSUMS + RP_GEMM_GROUP * 32)
#define GK_BP    (GK_D + RP_GEMM_GROUP * 4)
#define GK_BYTES (GK_BP + RP_GEMM_GROUP * 16)

static size_t gk_group_bytes(int n) {
    return (size_t)(n / QK_K) * GK_BYTES;
}

static void gk_pack(int n, int cnt, const void *xq, size_t ldx, void *group) {
    uint8_t *g = group;
    memset(g, 0, gk_group_bytes(n));
    for (int t = 0; t < cnt; t++) {
        const block_q8_K *x = (const block_q8_K *)((const uint8_t *)xq + (size_t)t * ldx);
        for (int i = 0; i < n / QK_K; i++) {
            uint8_t *gi = g + (size_t)i * GK_BYTES;
            memcpy(gi + GK_QS + QK_K * t, x[i].qs, QK_K);
            memcpy(gi + GK_BSUMS + 32 * t, x[i].bsums, 32);
            memcpy(gi + GK_D + 4 * t, &x[i].d, 4);
            int16_t bp[8];
            UNROLL
            for (int j = 0; j < 8; j++)
                bp[j] = (int16_t)(x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
            memcpy(gi + GK_BP + 16 * t, bp, 16);
        }
    }
}

/* -- Q4_K, 8 rows interleaved x 4 tokens (the Q4_0 layout, per sub-block) ------
 * Per super-block and sub-block j, the 8 rows' values (0..15) side by side by
 * 4-byte chunk: a token's 4 bytes broadcast give the 8 rows' products in the
 * lanes; a sub-block's 8 chunks add up exactly in 16 bits (<= 8 * 2 * 15 *
 * 127), then times the rows' scales (madd) into 32 bits. The mins: lane r =
 * sum_j mn[r][j] (bsums[2j] + bsums[2j+1]) by madd over pairs of j. Then per
 * row and token the one-row chains: acc = fma((float)sum, d*dx, acc),
 * accm = fma((float)msum, dmin*dx, accm), acc - accm. */
#define W4I_Q     0
#define W4I_SC    (8 * 256)
#define W4I_MN    (W4I_SC + 8 * 32)
#define W4I_D     (W4I_MN + 4 * 32)
#define W4I_DM    (W4I_D + 32)
#define W4I_BYTES (W4I_DM + 32)

static size_t q4ki_scratch(int n) {
    return (size_t)(n / QK_K) * W4I_BYTES + 64;
}

/* out c = dword c of the 8 rows q[0..7] */
static inline void transpose8x8_epi32(const __m256i *q, __m256i *out) {
    const __m256i t0 = _mm256_unpacklo_epi32(q[0], q[1]), t1 = _mm256_unpackhi_epi32(q[0], q[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(q[2], q[3]), t3 = _mm256_unpackhi_epi32(q[2], q[3]);
    const __m256i t4 = _mm256_unpacklo_epi32(q[4], q[5]), t5 = _mm256_unpackhi_epi32(q[4], q[5]);
    const __m256i t6 = _mm256_unpacklo_epi32(q[6], q[7]), t7 = _mm256_unpackhi_epi32(q[6], q[7]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    out[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    out[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    out[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    out[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    out[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    out[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    out[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    out[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

static void q4ki_decode(int n, const void *w, size_t ldw, int rows, uint8_t *s) {
    for (int i = 0; i < n / QK_K; i++) {
        uint8_t *o = s + (size_t)i * W4I_BYTES;
        int16_t sc[8][16], mn[4][16];
        float d[8], dm[8];
        __m256i v[8][8]; /* [sub-block][row] */
        UNROLL
        for (int r = 0; r < 8; r++) {
            const block_q4_K *a =
                (const block_q4_K *)((const char *)w + (size_t)RP_MIN(r, rows - 1) * ldw) + i;
            UNROLL
            for (int j = 0; j < 8; j++) {
                uint8_t s8, m8;
                rp_k4_scale_min(j, a->scales, &s8, &m8);
                sc[j][2 * r] = sc[j][2 * r + 1] = s8;
                mn[j / 2][2 * r + j % 2] = m8;
            }
            UNROLL
            for (int c = 0; c < 4; c++) {
                const __m256i bits = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * c));
                v[2 * c][r] = _mm256_and_si256(bits, _mm256_set1_epi8(0xF));
                v[2 * c + 1][r] =
                    _mm256_and_si256(_mm256_srli_epi16(bits, 4), _mm256_set1_epi8(0xF));
            }
            d[r] = f16(a->d);
            dm[r] = f16(a->dmin);
        }
        UNROLL
        for (int j = 0; j < 8; j++) {
            __m256i c[8];
            transpose8x8_epi32(v[j], c);
            UNROLL
            for (int k = 0; k < 8; k++)
                _mm256_storeu_si256((__m256i *)(o + W4I_Q + 256 * j + 32 * k), c[k]);
        }
        memcpy(o + W4I_SC, sc, sizeof sc);
        memcpy(o + W4I_MN, mn, sizeof mn);
        memcpy(o + W4I_D, d, sizeof d);
        memcpy(o + W4I_DM, dm, sizeof dm);
    }
}

static inline __m256i bcast32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static void gemm_run_q4_Ki(int n, int nr, const void *w, size_t ldw, const void *xp, size_t ldx,
                           int cnt, float *y, size_t ldy, void *scratch) {
    (void)ldx;
    const int nb = n / QK_K;
    const size_t gb = gk_group_bytes(n);
    uint8_t *s = scratch;
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const int rows = RP_MIN(8, nr - r0);
        q4ki_decode(n, (const char *)w + (size_t)r0 * ldw, ldw, rows, s);
        for (int t0 = 0; t0 < cnt; t0 += TQ) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)(t0 / RP_GEMM_GROUP) * gb;
            const int tq = t0 % RP_GEMM_GROUP, toks = RP_MIN(TQ, cnt - t0);
            __m256 acc[TQ], accm[TQ];
            UNROLL
            for (int t = 0; t < TQ; t++) acc[t] = accm[t] = _mm256_setzero_ps();
            for (int i = 0; i < nb; i++) {
                const uint8_t *o = s + (size_t)i * W4I_BYTES, *xi = xg + (size_t)i * GK_BYTES;
                __m256i p[TQ];
                UNROLL
                for (int t = 0; t < TQ; t++) p[t] = _mm256_setzero_si256();
                UNROLL
                for (int j = 0; j < 8; j++) {
                    __m256i h[TQ];
                    UNROLL
                    for (int t = 0; t < TQ; t++) h[t] = _mm256_setzero_si256();
                    UNROLL
                    for (int c = 0; c < 8; c++) {
                        const __m256i wv =
                            _mm256_loadu_si256((const __m256i *)(o + W4I_Q + 256 * j + 32 * c));
                        UNROLL
                        for (int t = 0; t < TQ; t++)
                            h[t] = _mm256_add_epi16(
                                h[t],
                                _mm256_maddubs_epi16(
                                    wv, bcast32(xi + GK_QS + QK_K * (tq + t) + 32 * j + 4 * c)));
                    }
                    const __m256i sc = _mm256_loadu_si256((const __m256i *)(o + W4I_SC + 32 * j));
                    UNROLL
                    for (int t = 0; t < TQ; t++)
                        p[t] = _mm256_add_epi32(p[t], _mm256_madd_epi16(h[t], sc));
                }
                const __m256 dw = _mm256_loadu_ps((const float *)(o + W4I_D)),
                             dm = _mm256_loadu_ps((const float *)(o + W4I_DM));
                UNROLL
                for (int t = 0; t < TQ; t++) {
                    const uint8_t *bp = xi + GK_BP + 16 * (tq + t);
                    __m256i m = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(o + W4I_MN)),
                                                  bcast32(bp));
                    for (int k = 1; k < 4; k++)
                        m = _mm256_add_epi32(
                            m, _mm256_madd_epi16(
                                   _mm256_loadu_si256((const __m256i *)(o + W4I_MN + 32 * k)),
                                   bcast32(bp + 4 * k)));
                    const __m256 dx = _mm256_broadcast_ss((const float *)(xi + GK_D) + tq + t);
                    acc[t] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(p[t]), _mm256_mul_ps(dw, dx), acc[t]);
                    accm[t] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dm, dx), accm[t]);
                }
            }
            float *yt = y + (size_t)t0 * ldy + (size_t)r0;
            for (int t = 0; t < toks; t++) {
                float tmp[8];
                _mm256_storeu_ps(tmp, _mm256_sub_ps(acc[t], accm[t]));
                for (int r = 0; r < rows; r++) yt[(size_t)t * ldy + (size_t)r] = tmp[r];
            }
        }
    }
}

static const rp_gemm_ops gemm_q4_Ki = {gk_group_bytes, gk_pack, q4ki_scratch, gemm_run_q4_Ki};

/* -- Q4_0, 8 rows interleaved x 4 tokens ----------------------------------------
 * The 8 rows of a tile decoded into 4-byte chunks side by side (chunk c of a
 * block: bytes 4c..4c+3 of rows 0..7), so a token's 4 bytes broadcast against
 * one chunk give the 8 rows' products in the 8 lanes: no reduction across
 * lanes. |q| <= 8, so a block's 8 chunks add up exactly in 16 bits; lane r is
 * then row r's block sum and acc = fma((float)sum, dw*dx, acc) per row and
 * token, the one-row vec_dot's chain. */

/* per block: |q| of the 8 chunks, q of the 8 chunks, d of the 8 rows */
#define W40_BYTES (2 * 256 + 32)

static size_t q40i_scratch(int n) {
    return (size_t)(n / 32) * W40_BYTES + 64;
}

static void q40i_decode(int n, const void *w, size_t ldw, int rows, uint8_t *s) {
    for (int b = 0; b < n / 32; b++) {
        uint8_t *o = s + (size_t)b * W40_BYTES;
        __m256i q[8];
        float d[8];
        UNROLL
        for (int r = 0; r < 8; r++)
            q[r] = values_q4_0((const char *)w + (size_t)RP_MIN(r, rows - 1) * ldw, b, &d[r]);
        /* transpose 8 rows x 8 dwords: out c = dword c of rows 0..7 */
        __m256i t0 = _mm256_unpacklo_epi32(q[0], q[1]), t1 = _mm256_unpackhi_epi32(q[0], q[1]);
        __m256i t2 = _mm256_unpacklo_epi32(q[2], q[3]), t3 = _mm256_unpackhi_epi32(q[2], q[3]);
        __m256i t4 = _mm256_unpacklo_epi32(q[4], q[5]), t5 = _mm256_unpackhi_epi32(q[4], q[5]);
        __m256i t6 = _mm256_unpacklo_epi32(q[6], q[7]), t7 = _mm256_unpackhi_epi32(q[6], q[7]);
        /* u0: dword 0 (lo lane) / 4 (hi lane) of rows 0-3 ... */
        const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
        const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
        const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
        const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
        const __m256i c[8] = {
            _mm256_permute2x128_si256(u0, u4, 0x20), _mm256_permute2x128_si256(u1, u5, 0x20),
            _mm256_permute2x128_si256(u2, u6, 0x20), _mm256_permute2x128_si256(u3, u7, 0x20),
            _mm256_permute2x128_si256(u0, u4, 0x31), _mm256_permute2x128_si256(u1, u5, 0x31),
            _mm256_permute2x128_si256(u2, u6, 0x31), _mm256_permute2x128_si256(u3, u7, 0x31)};
        UNROLL
        for (int k = 0; k < 8; k++) {
            _mm256_storeu_si256((__m256i *)(o + 32 * k), _mm256_sign_epi8(c[k], c[k]));
            _mm256_storeu_si256((__m256i *)(o + 256 + 32 * k), c[k]);
        }
        _mm256_storeu_ps((float *)(o + 512), _mm256_loadu_ps(d));
    }
}

static void gemm_run_q4_0i(int n, int nr, const void *w, size_t ldw, const void *xp, size_t ldx,
                           int cnt, float *y, size_t ldy, void *scratch) {
    (void)ldx;
    const int nb = n / 32;
    const size_t gb = g32_group_bytes(n);
    const __m256i ones = _mm256_set1_epi16(1);
    uint8_t *s = scratch;
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const int rows = RP_MIN(8, nr - r0);
        q40i_decode(n, (const char *)w + (size_t)r0 * ldw, ldw, rows, s);
        for (int t0 = 0; t0 < cnt; t0 += TQ) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)(t0 / RP_GEMM_GROUP) * gb;
            const int tq = t0 % RP_GEMM_GROUP, toks = RP_MIN(TQ, cnt - t0);
            __m256 acc[TQ];
            UNROLL
            for (int t = 0; t < TQ; t++) acc[t] = _mm256_setzero_ps();
            for (int b = 0; b < nb; b++) {
                const uint8_t *o = s + (size_t)b * W40_BYTES, *xb = xg + (size_t)b * G32_BYTES;
                __m256i p[TQ];
                UNROLL
                for (int t = 0; t < TQ; t++) p[t] = _mm256_setzero_si256();
                UNROLL
                for (int c = 0; c < 8; c++) {
                    const __m256i aq = _mm256_loadu_si256((const __m256i *)(o + 32 * c)),
                                  q = _mm256_loadu_si256((const __m256i *)(o + 256 + 32 * c));
                    UNROLL
                    for (int t = 0; t < TQ; t++) {
                        int32_t x4;
                        memcpy(&x4, xb + 32 * (tq + t) + 4 * c, 4);
                        const __m256i xv = _mm256_set1_epi32(x4);
                        p[t] = _mm256_add_epi16(p[t],
                                                _mm256_maddubs_epi16(aq, _mm256_sign_epi8(xv, q)));
                    }
                }
                const __m256 dw = _mm256_loadu_ps((const float *)(o + 512));
                const float *dx = (const float *)(xb + 32 * RP_GEMM_GROUP) + tq;
                UNROLL
                for (int t = 0; t < TQ; t++)
                    acc[t] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p[t], ones)),
                                        _mm256_mul_ps(dw, _mm256_broadcast_ss(dx + t)), acc[t]);
            }
            float *yt = y + (size_t)t0 * ldy + (size_t)r0;
            for (int t = 0; t < toks; t++) {
                if (rows == 8) {
                    _mm256_storeu_ps(yt + (size_t)t * ldy, acc[t]);
                } else {
                    float tmp[8];
                    _mm256_storeu_ps(tmp, acc[t]);
                    for (int r = 0; r < rows; r++) yt[(size_t)t * ldy + (size_t)r] = tmp[r];
                }
            }
        }
    }
}

static const rp_gemm_ops gemm_q4_0i = {g32_group_bytes, g32_pack, q40i_scratch, gemm_run_q4_0i};

/* -- Q4_1 / Q5_1 with Q8_1 activations: lanes, plus summs = fma(m, s, summs)
 * per block (the 8 products' chains in the lanes of one vector) ------------- */

/* a group, per block: the 16 tokens' qs, their d, their s (floats) */
#define G1_BYTES (RP_GEMM_GROUP * 32 + RP_GEMM_GROUP * 8)
/* the decoded pair of rows, per block: q0, q1 (unsigned), d0 x4 d1 x4, m0 x4 m1 x4 */
#define W1_BYTES (4 * 32)

static size_t g1_group_bytes(int n) {
    return (size_t)(n / 32) * G1_BYTES;
}

static size_t g1_scratch(int n) {
    return (size_t)(n / 32) * W1_BYTES + 64;
}

static void g1_pack(int n, int cnt, const void *xq, size_t ldx, void *group) {
    uint8_t *g = group;
    memset(g, 0, g1_group_bytes(n));
    for (int t = 0; t < cnt; t++) {
        const block_q8_1 *x = (const block_q8_1 *)((const uint8_t *)xq + (size_t)t * ldx);
        for (int b = 0; b < n / 32; b++) {
            uint8_t *gb = g + (size_t)b * G1_BYTES;
            const float d = f16(x[b].d), sx = f16(x[b].s);
            memcpy(gb + 32 * t, x[b].qs, 32);
            memcpy(gb + 32 * RP_GEMM_GROUP + 4 * t, &d, 4);
            memcpy(gb + 36 * RP_GEMM_GROUP + 4 * t, &sx, 4);
        }
    }
}

/* block b of a row: its 32 unsigned values, d and m */
typedef __m256i (*w1_values_fn)(const void *row, int b, float *d, float *m);

static __m256i values_q4_1(const void *row, int b, float *d, float *m) {
    const block_q4_1 *a = (const block_q4_1 *)row + b;
    *d = f16(a->d);
    *m = f16(a->m);
    return nibbles32(a->qs);
}

static __m256i values_q5_1(const void *row, int b, float *d, float *m) {
    const block_q5_1 *a = (const block_q5_1 *)row + b;
    *d = f16(a->d);
    *m = f16(a->m);
    return _mm256_or_si256(nibbles32(a->qs),
                           _mm256_and_si256(bits32(a->qh), _mm256_set1_epi8(0x10)));
}

ALWAYS_INLINE void w1_decode(int n, const void *w0, const void *w1, w1_values_fn values,
                             uint8_t *s) {
    for (int b = 0; b < n / 32; b++) {
        uint8_t *o = s + (size_t)b * W1_BYTES;
        float d0, d1, m0, m1;
        _mm256_storeu_si256((__m256i *)o, values(w0, b, &d0, &m0));
        _mm256_storeu_si256((__m256i *)(o + 32), values(w1, b, &d1, &m1));
        _mm256_storeu_ps((float *)(o + 64), _mm256_setr_ps(d0, d0, d0, d0, d1, d1, d1, d1));
        _mm256_storeu_ps((float *)(o + 96), _mm256_setr_ps(m0, m0, m0, m0, m1, m1, m1, m1));
    }
}

/* the 8 products' lane accumulators and their summs */
static __m256 w1_tile(int nb, const uint8_t *s, const uint8_t *xg, int tq, __m256 *acc) {
    __m256 summs = _mm256_setzero_ps();
    UNROLL
    for (int k = 0; k < 2 * TQ; k++) acc[k] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *o = s + (size_t)b * W1_BYTES, *xb = xg + (size_t)b * G1_BYTES;
        const float *xd = (const float *)(xb + 32 * RP_GEMM_GROUP) + tq;
        summs = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(o + 96)),
                                _mm256_broadcast_ps((const __m128 *)(xd + RP_GEMM_GROUP)), summs);
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)o),
                      q1 = _mm256_loadu_si256((const __m256i *)(o + 32));
        const __m256 d0 = _mm256_broadcast_ss((const float *)(o + 64)),
                     d1 = _mm256_broadcast_ss((const float *)(o + 80));
        UNROLL
        for (int t = 0; t < TQ; t++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(xb + 32 * (tq + t)));
            const __m256 dx = _mm256_broadcast_ss(xd + t);
            acc[t] =
                _mm256_fmadd_ps(_mm256_mul_ps(d0, dx), _mm256_cvtepi32_ps(dot_u8(q0, x)), acc[t]);
            acc[TQ + t] = _mm256_fmadd_ps(_mm256_mul_ps(d1, dx), _mm256_cvtepi32_ps(dot_u8(q1, x)),
                                          acc[TQ + t]);
        }
    }
    return summs;
}

ALWAYS_INLINE void w1_run(int n, int nr, const void *w, size_t ldw, const void *xp, int cnt,
                          float *y, size_t ldy, void *scratch, w1_values_fn values) {
    const int nb = n / 32;
    const size_t gb = g1_group_bytes(n);
    uint8_t *s = scratch;
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const int rows = RP_MIN(2, nr - r0);
        const char *w0 = (const char *)w + (size_t)r0 * ldw;
        w1_decode(n, w0, rows == 2 ? w0 + ldw : w0, values, s);
        for (int t0 = 0; t0 < cnt; t0 += TQ) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)(t0 / RP_GEMM_GROUP) * gb;
            const int toks = RP_MIN(TQ, cnt - t0);
            __m256 acc[2 * TQ];
            float sm[8];
            _mm256_storeu_ps(sm, w1_tile(nb, s, xg, t0 % RP_GEMM_GROUP, acc));
            float *yt = y + (size_t)t0 * ldy + (size_t)r0;
            for (int r = 0; r < rows; r++)
                for (int t = 0; t < toks; t++)
                    yt[(size_t)t * ldy + (size_t)r] = hsum256(acc[r * TQ + t]) + sm[r * TQ + t];
        }
    }
}

#define W1_GEMM(name)                                                                              \
    static void gemm_run_##name(int n, int nr, const void *w, size_t ldw, const void *xp,          \
                                size_t ldx, int cnt, float *y, size_t ldy, void *scratch) {        \
        (void)ldx;                                                                                 \
        w1_run(n, nr, w, ldw, xp, cnt, y, ldy, scratch, values_##name);                            \
    }                                                                                              \
    static const rp_gemm_ops gemm_##name = {g1_group_bytes, g1_pack, g1_scratch, gemm_run_##name};

W1_GEMM(q4_1)
W1_GEMM(q5_1)

/* -- Q6_K: lanes, per super-block acc = fma(dx*dw, (float)lanes, acc) ---------- */

/* the decoded pair of rows, per super-block: the values of row 0 (0..63; chunk
 * c = 4h + k of vec_dot at 32 c), of row 1, the chunk scales of row 0 (16
 * int16: 8 of scale 2c, 8 of 2c+1), of row 1, the 16 scales of row 0 as int16,
 * of row 1, d0, d1 */
#define W6_Q     0
#define W6_SC    (2 * QK_K)
#define W6_S16   (W6_SC + 2 * 256)
#define W6_D     (W6_S16 + 2 * 32)
#define W6_BYTES (W6_D + 32)

static size_t q6k_scratch(int n) {
    return (size_t)(n / QK_K) * W6_BYTES + 64;
}

static void q6k_decode(int n, const block_q6_K *a0, const block_q6_K *a1, uint8_t *s) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    for (int i = 0; i < n / QK_K; i++) {
        uint8_t *o = s + (size_t)i * W6_BYTES;
        UNROLL
        for (int r = 0; r < 2; r++) {
            const block_q6_K *a = (r ? a1 : a0) + i;
            uint8_t *q = o + W6_Q + QK_K * r;
            for (int h = 0; h < 2; h++) {
                const __m256i l0 = _mm256_loadu_si256((const __m256i *)(a->ql + 64 * h));
                const __m256i l1 = _mm256_loadu_si256((const __m256i *)(a->ql + 64 * h + 32));
                const __m256i hb = _mm256_loadu_si256((const __m256i *)(a->qh + 32 * h));
                const __m256i v[4] = {
                    _mm256_or_si256(_mm256_and_si256(l0, m4),
                                    _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4)),
                    _mm256_or_si256(
                        _mm256_and_si256(l1, m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4)),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4)),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4))};
                UNROLL
                for (int k = 0; k < 4; k++) {
                    const int g = 8 * h + 2 * k;
                    const short s0 = a->scales[g], s1 = a->scales[g + 1];
                    _mm256_storeu_si256((__m256i *)(q + 32 * (4 * h + k)), v[k]);
                    _mm256_storeu_si256((__m256i *)(o + W6_SC + 256 * r + 32 * (4 * h + k)),
                                        _mm256_setr_epi16(s0, s0, s0, s0, s0, s0, s0, s0, s1, s1,
                                                          s1, s1, s1, s1, s1, s1));
                }
            }
            _mm256_storeu_si256((__m256i *)(o + W6_S16 + 32 * r),
                                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a->scales)));
            const float d = f16(a->d);
            memcpy(o + W6_D + 4 * r, &d, 4);
        }
    }
}

static void q6k_tile(int nb, const uint8_t *s, const uint8_t *xg, int tq, __m256 *acc) {
    UNROLL
    for (int k = 0; k < 2 * TQ; k++) acc[k] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const uint8_t *o = s + (size_t)i * W6_BYTES, *xi = xg + (size_t)i * GK_BYTES;
        __m256i p[2 * TQ];
        UNROLL
        for (int k = 0; k < 2 * TQ; k++) p[k] = _mm256_setzero_si256();
        UNROLL
        for (int c = 0; c < 8; c++) {
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)(o + W6_Q + 32 * c)),
                          w1 = _mm256_loadu_si256((const __m256i *)(o + W6_Q + QK_K + 32 * c));
            const __m256i s0 = _mm256_loadu_si256((const __m256i *)(o + W6_SC + 32 * c)),
                          s1 = _mm256_loadu_si256((const __m256i *)(o + W6_SC + 256 + 32 * c));
            UNROLL
            for (int t = 0; t < TQ; t++) {
                const __m256i x =
                    _mm256_loadu_si256((const __m256i *)(xi + GK_QS + QK_K * (tq + t) + 32 * c));
                p[t] = _mm256_add_epi32(p[t], _mm256_madd_epi16(_mm256_maddubs_epi16(w0, x), s0));
                p[TQ + t] =
                    _mm256_add_epi32(p[TQ + t], _mm256_madd_epi16(_mm256_maddubs_epi16(w1, x), s1));
            }
        }
        const __m256i c0 = _mm256_loadu_si256((const __m256i *)(o + W6_S16)),
                      c1 = _mm256_loadu_si256((const __m256i *)(o + W6_S16 + 32));
        const __m256 dw0 = _mm256_broadcast_ss((const float *)(o + W6_D)),
                     dw1 = _mm256_broadcast_ss((const float *)(o + W6_D + 4));
        UNROLL
        for (int t = 0; t < TQ; t++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)(xi + GK_BSUMS + 32 * (tq + t)));
            const __m256 dx = _mm256_broadcast_ss((const float *)(xi + GK_D) + tq + t);
            const __m256i i0 =
                _mm256_sub_epi32(p[t], _mm256_slli_epi32(_mm256_madd_epi16(bs, c0), 5));
            const __m256i i1 =
                _mm256_sub_epi32(p[TQ + t], _mm256_slli_epi32(_mm256_madd_epi16(bs, c1), 5));
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dw0), _mm256_cvtepi32_ps(i0), acc[t]);
            acc[TQ + t] =
                _mm256_fmadd_ps(_mm256_mul_ps(dx, dw1), _mm256_cvtepi32_ps(i1), acc[TQ + t]);
        }
    }
}

static void gemm_run_q6_K(int n, int nr, const void *w, size_t ldw, const void *xp, size_t ldx,
                          int cnt, float *y, size_t ldy, void *scratch) {
    (void)ldx;
    const int nb = n / QK_K;
    const size_t gb = gk_group_bytes(n);
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const int rows = RP_MIN(2, nr - r0);
        const char *w0 = (const char *)w + (size_t)r0 * ldw;
        q6k_decode(n, (const block_q6_K *)w0, (const block_q6_K *)(rows == 2 ? w0 + ldw : w0),
                   scratch);
        for (int t0 = 0; t0 < cnt; t0 += TQ) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)(t0 / RP_GEMM_GROUP) * gb;
            const int toks = RP_MIN(TQ, cnt - t0);
            __m256 acc[2 * TQ];
            q6k_tile(nb, scratch, xg, t0 % RP_GEMM_GROUP, acc);
            float *yt = y + (size_t)t0 * ldy + (size_t)r0;
            for (int r = 0; r < rows; r++)
                for (int t = 0; t < toks; t++)
                    yt[(size_t)t * ldy + (size_t)r] = hsum256(acc[r * TQ + t]);
        }
    }
}

static const rp_gemm_ops gemm_q6_K = {gk_group_bytes, gk_pack, q6k_scratch, gemm_run_q6_K};

/* ---- one token against many rows (gemv) -------------------------------------
 * Rows taken 8 at a time, row r's float accumulator in lane r of one vector:
 * each output is the float the type's vec_dot returns (the same fused
 * multiply-adds in the same order), the integer block sums of the 8 rows
 * reduced together (exact). Eight rows stream at once, so the serial chain of
 * one row's fma no longer bounds the speed. A missing row of the last eight
 * repeats the one before it and is not stored. */

#define GV_ROWS 8

/* the 8 rows' pointers: row r0 + r, the last one repeated past nr */
static inline void gv_rows(const void *w, size_t ldw, int r0, int nr, const uint8_t **rp) {
    for (int r = 0; r < GV_ROWS; r++)
        rp[r] = (const uint8_t *)w + (size_t)RP_MIN(r0 + r, nr - 1) * ldw;
}

/* the fp16 at byte off of each of the 8 rows, as floats (gathered in
 * general-purpose registers: they have the spare ports) */
static inline __m256 gv_f16x8(const uint8_t *const *rp, size_t off) {
    uint64_t q[2];
    UNROLL
    for (int k = 0; k < 2; k++) {
        uint16_t h0, h1, h2, h3;
        memcpy(&h0, rp[4 * k] + off, 2);
        memcpy(&h1, rp[4 * k + 1] + off, 2);
        memcpy(&h2, rp[4 * k + 2] + off, 2);
        memcpy(&h3, rp[4 * k + 3] + off, 2);
        q[k] = (uint64_t)h0 | (uint64_t)h1 << 16 | (uint64_t)h2 << 32 | (uint64_t)h3 << 48;
    }
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)q[1], (long long)q[0]));
}

static inline void gv_store(float *y, int rows, __m256 v) {
    if (rows == GV_ROWS) {
        _mm256_storeu_ps(y, v);
        return;
    }
    float t[GV_ROWS];
    _mm256_storeu_ps(t, v);
    for (int r = 0; r < rows; r++) y[r] = t[r];
}

/* the fp16 at byte off of 4 rows, as floats */
static inline __m128 gv_f16x4(const uint8_t *const *rp, size_t off) {
    uint16_t h0, h1, h2, h3;
    memcpy(&h0, rp[0] + off, 2);
    memcpy(&h1, rp[1] + off, 2);
    memcpy(&h2, rp[2] + off, 2);
    memcpy(&h3, rp[3] + off, 2);
    const uint64_t q = (uint64_t)h0 | (uint64_t)h1 << 16 | (uint64_t)h2 << 32 | (uint64_t)h3 << 48;
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)q));
}

static inline void gv_store4(float *y, int rows, __m128 v) {
    float t[4];
    _mm_storeu_ps(t, v);
    for (int r = 0; r < rows; r++) y[r] = t[r];
}

/* 8 * (the sum of the 32 int8 of x) in every lane */
static inline __m256i q8_sum8(__m256i xv) {
    __m256i sx =
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), xv), _mm256_set1_epi16(1));
    sx = _mm256_add_epi32(sx, _mm256_shuffle_epi32(sx, 0x4E));
    sx = _mm256_add_epi32(sx, _mm256_shuffle_epi32(sx, 0xB1));
    sx = _mm256_add_epi32(sx, _mm256_permute2x128_si256(sx, sx, 0x01));
    return _mm256_slli_epi32(sx, 3);
}

/* Q4_0, row k's nibbles . x in the low lane and row k + h's in the high lane
 * of one vector (8 lanes of partial sums) */
static inline __m256i q40_pair(const uint8_t *lo_row, const uint8_t *hi_row, __m256i xlo,
                               __m256i xhi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu2_m128i((const __m128i *)hi_row, (const __m128i *)lo_row);
    const __m256i lo = _mm256_maddubs_epi16(_mm256_and_si256(v, m4), xlo);
    const __m256i hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), xhi);
    /* |pair sums| <= 2 * 15 * 128: two of them fit an int16 */
    return _mm256_madd_epi16(_mm256_add_epi16(lo, hi), _mm256_set1_epi16(1));
}

/* Q4_0 (vec_dot_q4_0_avx2's chain per row: acc = fma(sum, dw * dx, acc) in
 * block order). sum = nibbles . x - 8 * (sum of x); two rows share a vector,
 * row k's 16 bytes in the low lane and row k + 4's in the high lane, so the
 * low nibbles of both meet x[0..15] and the high nibbles x[16..31]. The last
 * 1 to 4 rows go 4 at a time (rows k and k + 2 paired). */
static void gemv_q4_0_avx2(int n, int nr, const void *w, size_t ldw, const void *x, float *y) {
    const block_q8_0 *b = x;
    const int nb = n / QK8_0;
    const size_t qo = offsetof(block_q4_0, qs), dof = offsetof(block_q4_0, d);
    int r0 = 0;
    for (; nr - r0 > 4; r0 += GV_ROWS) {
        const uint8_t *rp[GV_ROWS];
        gv_rows(w, ldw, r0, nr, rp);
        __m256 acc = _mm256_setzero_ps();
        for (int i = 0; i < nb; i++) {
            const __m256i xv = _mm256_loadu_si256((const __m256i *)b[i].qs);
            const __m256i xlo = _mm256_broadcastsi128_si256(
                              _mm_loadu_si128((const __m128i *)b[i].qs)),
                          xhi = _mm256_broadcastsi128_si256(
                              _mm_loadu_si128((const __m128i *)(b[i].qs + 16)));
            const size_t off = (size_t)i * sizeof(block_q4_0);
            __m256i p[4];
            UNROLL
            for (int k = 0; k < 4; k++)
                p[k] = q40_pair(rp[k] + off + qo, rp[k + 4] + off + qo, xlo, xhi);
            /* row k's 4 partial sums in the low lane, row k + 4's in the high
             * lane -> row r's sum in lane r */
            const __m256i s8 =
                _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
            const __m256i s = _mm256_sub_epi32(s8, q8_sum8(xv));
            const __m256 d = _mm256_mul_ps(gv_f16x8(rp, off + dof), _mm256_set1_ps(f16(b[i].d)));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc);
        }
        gv_store(y + r0, RP_MIN(GV_ROWS, nr - r0), acc);
    }
    if (r0 < nr) {
        const uint8_t *rp[GV_ROWS];
        gv_rows(w, ldw, r0, nr, rp);
        __m128 acc = _mm_setzero_ps();
        for (int i = 0; i < nb; i++) {
            const __m256i xv = _mm256_loadu_si256((const __m256i *)b[i].qs);
            const __m256i xlo = _mm256_broadcastsi128_si256(
                              _mm_loadu_si128((const __m128i *)b[i].qs)),
                          xhi = _mm256_broadcastsi128_si256(
                              _mm_loadu_si128((const __m128i *)(b[i].qs + 16)));
            const size_t off = (size_t)i * sizeof(block_q4_0);
            const __m256i p0 = q40_pair(rp[0] + off + qo, rp[2] + off + qo, xlo, xhi),
                          p1 = q40_pair(rp[1] + off + qo, rp[3] + off + qo, xlo, xhi);
            /* [r0 r1 r0 r1 | r2 r3 r2 r3] -> r0 r1 r2 r3 */
            __m256i h = _mm256_hadd_epi32(p0, p1);
            h = _mm256_permute4x64_epi64(_mm256_hadd_epi32(h, h), 0x08);
            const __m128i s =
                _mm_sub_epi32(_mm256_castsi256_si128(h), _mm256_castsi256_si128(q8_sum8(xv)));
            const __m128 d = _mm_mul_ps(gv_f16x4(rp, off + dof), _mm_set1_ps(f16(b[i].d)));
            acc = _mm_fmadd_ps(_mm_cvtepi32_ps(s), d, acc);
        }
        gv_store4(y + r0, nr - r0, acc);
    }
}

/* one Q4_K row's block: S = 8 lanes of the scaled sums, M = 8 lanes of the
 * min sums (vec_dot_q4_K_avx2's sumi and msum before their lane sums) */
ALWAYS_INLINE void q4k_row(const block_q4_K *a, const block_q8_K *b, __m256i bsums,
                           const __m256i *bc, __m256i *S, __m256i *M) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    uint32_t u[3];
    memcpy(u, a->scales, 12);
    const uint32_t m6 = 0x3f3f3f3fu, q4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    const uint32_t s0 = u[0] & m6, s1 = (u[2] & q4) | (((u[0] >> 6) & m2) << 4);
    const uint32_t n0 = u[1] & m6, n1 = ((u[2] >> 4) & q4) | (((u[1] >> 6) & m2) << 4);
    /* bytes 0-7 the scales, 8-15 the mins */
    const __m128i smn =
        _mm_set_epi64x((long long)((uint64_t)n1 << 32 | n0), (long long)((uint64_t)s1 << 32 | s0));
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(smn));
    /* min j twice, against bsums 2j and 2j + 1 */
    *M = _mm256_madd_epi16(bsums, _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(smn, smn)));
    __m256i acc = _mm256_setzero_si256();
    UNROLL
    for (int c = 0; c < 4; c++) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * c));
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(b->qs + 64 * c));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(b->qs + 64 * c + 32));
        const __m256i lo = _mm256_maddubs_epi16(_mm256_and_si256(bits, m4), x0);
        const __m256i hi =
            _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), x1);
        acc = _mm256_add_epi32(
            acc, _mm256_add_epi32(_mm256_madd_epi16(lo, _mm256_shuffle_epi8(sc, bc[2 * c])),
                                  _mm256_madd_epi16(hi, _mm256_shuffle_epi8(sc, bc[2 * c + 1]))));
    }
    *S = acc;
}

/* lanes 0-3 = the sums of the 8 lanes of s[0..3] */
static inline __m128i reduce4_i32(const __m256i *s) {
    const __m256i h =
        _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* Q4_K (vec_dot_q4_K_avx2's two chains per row: acc = fma(sum, d * dx, acc),
 * accm = fma(min sum, dmin * dx, accm), then acc - accm). A row's 8 scales
 * and mins become 16-bit lanes once per block; each group's scale reaches
 * its products by a byte shuffle; the 8 rows' sums and min sums are reduced
 * together; the last 1 to 4 rows 4 at a time. */
static void gemv_q4_K_avx2(int n, int nr, const void *w, size_t ldw, const void *x, float *y) {
    const block_q8_K *b = x;
    const int nb = n / QK_K;
    /* word j of a 128-bit lane in all 8 words */
    const __m256i bc[8] = {_mm256_set1_epi16(0x0100), _mm256_set1_epi16(0x0302),
                           _mm256_set1_epi16(0x0504), _mm256_set1_epi16(0x0706),
                           _mm256_set1_epi16(0x0908), _mm256_set1_epi16(0x0B0A),
                           _mm256_set1_epi16(0x0D0C), _mm256_set1_epi16(0x0F0E)};
    const size_t bs = sizeof(block_q4_K), od = offsetof(block_q4_K, d),
                 om = offsetof(block_q4_K, dmin);
    int r0 = 0;
    for (; nr - r0 > 4; r0 += GV_ROWS) {
        const uint8_t *rp[GV_ROWS];
        gv_rows(w, ldw, r0, nr, rp);
        __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
        for (int i = 0; i < nb; i++) {
            const __m256i bsums = _mm256_loadu_si256((const __m256i *)b[i].bsums);
            const size_t off = (size_t)i * bs;
            __m256i S[GV_ROWS], M[GV_ROWS];
            UNROLL
            for (int r = 0; r < GV_ROWS; r++)
                q4k_row((const block_q4_K *)(rp[r] + off), &b[i], bsums, bc, &S[r], &M[r]);
            const __m256 dx = _mm256_set1_ps(b[i].d);
            const __m256 d = _mm256_mul_ps(gv_f16x8(rp, off + od), dx);
            const __m256 dm = _mm256_mul_ps(gv_f16x8(rp, off + om), dx);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8_i32(S)), d, acc);
            accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8_i32(M)), dm, accm);
        }
        gv_store(y + r0, RP_MIN(GV_ROWS, nr - r0), _mm256_sub_ps(acc, accm));
    }
    if (r0 < nr) {
        const uint8_t *rp[GV_ROWS];
        gv_rows(w, ldw, r0, nr, rp);
        __m128 acc = _mm_setzero_ps(), accm = _mm_setzero_ps();
        for (int i = 0; i < nb; i++) {
            const __m256i bsums = _mm256_loadu_si256((const __m256i *)b[i].bsums);
            const size_t off = (size_t)i * bs;
            __m256i S[4], M[4];
            UNROLL
            for (int r = 0; r < 4; r++)
                q4k_row((const block_q4_K *)(rp[r] + off), &b[i], bsums, bc, &S[r], &M[r]);
            const __m128 dx = _mm_set1_ps(b[i].d);
            const __m128 d = _mm_mul_ps(gv_f16x4(rp, off + od), dx);
            const __m128 dm = _mm_mul_ps(gv_f16x4(rp, off + om), dx);
            acc = _mm_fmadd_ps(_mm_cvtepi32_ps(reduce4_i32(S)), d, acc);
            accm = _mm_fmadd_ps(_mm_cvtepi32_ps(reduce4_i32(M)), dm, accm);
        }
        gv_store4(y + r0, nr - r0, _mm_sub_ps(acc, accm));
    }
}

/* ---- silu ------------------------------------------------------------------ */

/* rp_expf_ggml512 on 8 lanes: the same fused steps; ldexpf(j, n) as two exact
 * power-of-two products (j 2^(n>>1) is normal, the second rounds once, as
 * ldexpf does, subnormal and overflowing results included) */
static inline __m256 expf_ggml512_avx2(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 hi =
        _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f));
    const __m256 mid =
        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f));
    const __m256 lo = _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f));
    const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, u, mid), u, lo);
    const __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 big = _mm256_cmp_ps(an, _mm256_set1_ps(192), _CMP_GT_OQ);
    /* |n| <= 192 where it is used (NaN lanes stay NaN through j) */
    const __m256i ni = _mm256_cvtps_epi32(_mm256_andnot_ps(big, n));
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    const __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, s1), s2);
    if (_mm256_testz_ps(big, big)) return res;
    const __m256 neg = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ);
    const __m256 alt = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(), neg);
    return _mm256_blendv_ps(res, alt, big);
}

/* rp_silu_mul_ref's arithmetic, 8 lanes at a time; the tail through the ref */
static void silu_mul_avx2(float *gate, const float *up, int n) {
    int i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m256 e = expf_ggml512_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
        const __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, e));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    if (i < n) rp_silu_mul_ref(gate + i, up + i, n - i);
}

/* ---- gated delta-net ------------------------------------------------------ */

/* The delta rule on 8 lanes (same arithmetic as the scalar twin up to the
 * order of the sums); a head width that is not a multiple of 8 runs the twin. */
static void delta_token_avx2(float *S, int d, float decay, float beta, const float *q,
                             const float *k, const float *v, float scale, float *o, float *delta) {
    if (d % 8) {
        rp_delta_token_ref(S, d, decay, beta, q, k, v, scale, o, delta);
        return;
    }
    for (int j = 0; j < d; j++) {
        const float *row = S + (size_t)j * (size_t)d;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        int i = 0;
        for (; i + 16 <= d; i += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + i), _mm256_loadu_ps(k + i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(row + i + 8), _mm256_loadu_ps(k + i + 8), a1);
        }
        for (; i < d; i += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + i), _mm256_loadu_ps(k + i), a0);
        delta[j] = (v[j] - decay * hsum256(_mm256_add_ps(a0, a1))) * beta;
    }
    const __m256 vdec = _mm256_set1_ps(decay);
    for (int j = 0; j < d; j++) {
        float *row = S + (size_t)j * (size_t)d;
        const __m256 vd = _mm256_set1_ps(delta[j]);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        int i = 0;
        for (; i + 16 <= d; i += 16) {
            __m256 r0 = _mm256_fmadd_ps(vd, _mm256_loadu_ps(k + i),
                                        _mm256_mul_ps(_mm256_loadu_ps(row + i), vdec));
            __m256 r1 = _mm256_fmadd_ps(vd, _mm256_loadu_ps(k + i + 8),
                                        _mm256_mul_ps(_mm256_loadu_ps(row + i + 8), vdec));
            _mm256_storeu_ps(row + i, r0);
            _mm256_storeu_ps(row + i + 8, r1);
            a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q + i), a0);
            a1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(q + i + 8), a1);
        }
        for (; i < d; i += 8) {
            __m256 r0 = _mm256_fmadd_ps(vd, _mm256_loadu_ps(k + i),
                                        _mm256_mul_ps(_mm256_loadu_ps(row + i), vdec));
            _mm256_storeu_ps(row + i, r0);
            a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q + i), a0);
        }
        o[j] = hsum256(_mm256_add_ps(a0, a1)) * scale;
    }
}

static void conv_token_avx2(float *x, float *h, const float *w, int k, int channels, long c0,
                            long c1) {
    const size_t ch = (size_t)channels;
    long c = c0;
    for (; c + 8 <= c1; c += 8) {
        const __m256 xv = _mm256_loadu_ps(x + c);
        __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(w + (size_t)(k - 1) * ch + (size_t)c), xv);
        for (int i = 0; i < k - 1; i++)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + (size_t)i * ch + (size_t)c),
                                  _mm256_loadu_ps(h + (size_t)i * ch + (size_t)c), acc);
        for (int i = 0; i + 1 < k - 1; i++)
            _mm256_storeu_ps(h + (size_t)i * ch + (size_t)c,
                             _mm256_loadu_ps(h + (size_t)(i + 1) * ch + (size_t)c));
        if (k > 1) _mm256_storeu_ps(h + (size_t)(k - 2) * ch + (size_t)c, xv);
        float y[8];
        _mm256_storeu_ps(y, acc);
        for (int l = 0; l < 8; l++) x[c + l] = y[l] / (1.0f + expf(-y[l]));
    }
    if (c < c1) rp_conv_token_ref(x, h, w, k, channels, c, c1);
}

void rp_kernels_fill_avx2(rp_kernels *k) {
    k->vec_dot[RP_TYPE_F32] = vec_dot_f32_avx2;
    k->vec_dot[RP_TYPE_F16] = vec_dot_f16_avx2;
    k->vec_dot[RP_TYPE_BF16] = vec_dot_bf16_avx2;
    k->vec_dot[RP_TYPE_Q4_0] = vec_dot_q4_0_avx2;
    k->vec_dot[RP_TYPE_Q4_1] = vec_dot_q4_1_avx2;
    k->vec_dot[RP_TYPE_Q5_0] = vec_dot_q5_0_avx2;
    k->vec_dot[RP_TYPE_Q5_1] = vec_dot_q5_1_avx2;
    k->vec_dot[RP_TYPE_Q8_0] = vec_dot_q8_0_avx2;
    k->vec_dot[RP_TYPE_Q2_K] = vec_dot_q2_K_avx2;
    k->vec_dot[RP_TYPE_Q3_K] = vec_dot_q3_K_avx2;
    k->vec_dot[RP_TYPE_Q4_K] = vec_dot_q4_K_avx2;
    k->vec_dot[RP_TYPE_Q5_K] = vec_dot_q5_K_avx2;
    k->vec_dot[RP_TYPE_Q6_K] = vec_dot_q6_K_avx2;
    k->vec_dot[RP_TYPE_IQ4_NL] = vec_dot_iq4_nl_avx2;
    k->vec_dot[RP_TYPE_IQ4_XS] = vec_dot_iq4_xs_avx2;
    k->gemv[RP_TYPE_Q4_0] = gemv_q4_0_avx2;
    k->gemv[RP_TYPE_Q4_K] = gemv_q4_K_avx2;
    k->gemm[RP_TYPE_Q8_0] = &gemm_q8_0;
    k->gemm[RP_TYPE_Q5_0] = &gemm_q5_0;
    k->gemm[RP_TYPE_Q4_0] = &gemm_q4_0i;
    k->gemm[RP_TYPE_IQ4_NL] = &gemm_iq4_nl;
    k->gemm[RP_TYPE_Q4_K] = &gemm_q4_Ki;
    k->gemm[RP_TYPE_Q6_K] = &gemm_q6_K;
    k->gemm[RP_TYPE_Q4_1] = &gemm_q4_1;
    k->gemm[RP_TYPE_Q5_1] = &gemm_q5_1;
    k->act_quant[RP_TYPE_Q8_0] = act_q8_0_avx2;
    k->act_quant[RP_TYPE_F16] = act_f16_avx2;
    k->act_quant[RP_TYPE_Q8_1] = act_q8_1_avx2;
    k->silu_mul = silu_mul_avx2;
    k->dot_f32 = dot_f32_avx2;
    k->axpy_f32 = axpy_f32_avx2;
    k->dot_f16_f32 = dot_f16_f32_avx2;
    k->axpy_f16 = axpy_f16_avx2;
    k->f32_to_f16 = f32_to_f16_avx2;
    k->delta_token = delta_token_avx2;
    k->conv_token = conv_token_avx2;
}
