/* AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c; only called
 * when cpuid says the CPU has them. */
#include "kernels/kernels.h"
#include "quant.h"
#include "util.h"

#include <immintrin.h>
#include <math.h>

static inline float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static float dot_f32_avx2(int n, const float *a, const float *b) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_f32_avx2(int n, float a, const float *x, float *y) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
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
    for (; i < n; i++) s += rp_fp16_to_fp32(a[i]) * b[i];
    return s;
}

static void axpy_f16_avx2(int n, float a, const uint16_t *x, float *y) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))),
                                                _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * rp_fp16_to_fp32(x[i]);
}

static void f32_to_f16_avx2(const float *x, uint16_t *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = rp_fp32_to_fp16(x[i]);
}

static void vec_dot_f32_avx2(int n, float *s, const void *w, const void *x) { *s = dot_f32_avx2(n, w, x); }
static void vec_dot_f16_avx2(int n, float *s, const void *w, const void *x) { *s = dot_f16_f32_avx2(n, w, x); }

static void vec_dot_bf16_avx2(int n, float *s, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(a + i)));
        __m256 af = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
        acc = _mm256_fmadd_ps(af, _mm256_loadu_ps(b + i), acc);
    }
    float r = hsum256(acc);
    for (; i < n; i++) r += rp_bf16_to_fp32(a[i]) * b[i];
    *s = r;
}

/* Signed int8 dot of 32 bytes into 8 int32 lanes: maddubs needs an unsigned
 * operand, so use |a| and move a's sign onto b. */
static inline __m256i dot_i8_32(__m256i a, __m256i b) {
    __m256i ua = _mm256_sign_epi8(a, a);
    __m256i sb = _mm256_sign_epi8(b, a);
    __m256i p16 = _mm256_maddubs_epi16(ua, sb);
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

static void vec_dot_q8_0_avx2(int n, float *s, const void *w, const void *x) {
    const block_q8_0 *a = w, *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / QK8_0; i++) {
        __m256i qa = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256 d = _mm256_set1_ps(rp_fp16_to_fp32(a[i].d) * rp_fp16_to_fp32(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8_32(qa, qb)), acc);
    }
    *s = hsum256(acc);
}

/* Activations to Q8_0, rounding half to even (as ggml's SIMD path does). */
static void quant_q8_0_avx2(const float *x, void *y, int64_t n) {
    block_q8_0 *b = y;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *p = x + i * QK8_0;
        __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8), v2 = _mm256_loadu_ps(p + 16),
               v3 = _mm256_loadu_ps(p + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float d = amax / 127.0f;
        b[i].d = rp_fp32_to_fp16(d);
        __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), _MM_ROUND_NEAREST));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), _MM_ROUND_NEAREST));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), _MM_ROUND_NEAREST));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), _MM_ROUND_NEAREST));
        i0 = _mm256_packs_epi32(i0, i1);
        i2 = _mm256_packs_epi32(i2, i3);
        i0 = _mm256_packs_epi16(i0, i2);
        /* undo the lane interleaving of the packs */
        i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)b[i].qs, i0);
    }
}

void rp_kernels_fill_avx2(rp_kernels *k) {
    k->vec_dot[RP_TYPE_F32] = vec_dot_f32_avx2;
    k->vec_dot[RP_TYPE_F16] = vec_dot_f16_avx2;
    k->vec_dot[RP_TYPE_BF16] = vec_dot_bf16_avx2;
    k->vec_dot[RP_TYPE_Q8_0] = vec_dot_q8_0_avx2;
    k->act_quant[RP_TYPE_Q8_0] = quant_q8_0_avx2;
    k->dot_f32 = dot_f32_avx2;
    k->axpy_f32 = axpy_f32_avx2;
    k->dot_f16_f32 = dot_f16_f32_avx2;
    k->axpy_f16 = axpy_f16_avx2;
    k->f32_to_f16 = f32_to_f16_avx2;
}
