/* AVX-512 (F/BW/VL/DQ/VNNI/VBMI) kernels; only called when cpuid has them. */
#include "kernels/kernels.h"
#include "quant.h"
#include "util.h"

#include <immintrin.h>

static float dot_f32_avx512(int n, const float *a, const float *b) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void axpy_f32_avx512(int n, float a, const float *x, float *y) {
    __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static float dot_f16_f32_avx512(int n, const uint16_t *a, const float *b) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i))), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i + 16))),
                             _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i))), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, a + i)), _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void axpy_f16_avx512(int n, float a, const uint16_t *x, float *y) {
    __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))),
                                                _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(va, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)),
                                              _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static void vec_dot_f32_avx512(int n, float *s, const void *w, const void *x) { *s = dot_f32_avx512(n, w, x); }
static void vec_dot_f16_avx512(int n, float *s, const void *w, const void *x) { *s = dot_f16_f32_avx512(n, w, x); }

/* Q8_0 x Q8_0 with VNNI: vpdpbusd needs an unsigned left operand, so use |w|
 * and move w's sign onto x. Two blocks per 512-bit register. */
static void vec_dot_q8_0_avx512(int n, float *s, const void *w, const void *x) {
    const block_q8_0 *a = w, *b = x;
    int nb = n / QK8_0, i = 0;
    __m512 acc = _mm512_setzero_ps();
    for (; i + 2 <= nb; i += 2) {
        __m512i qa = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a[i].qs)),
                                        _mm256_loadu_si256((const __m256i *)a[i + 1].qs), 1);
        __m512i qb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[i].qs)),
                                        _mm256_loadu_si256((const __m256i *)b[i + 1].qs), 1);
        __m512i ua = _mm512_abs_epi8(qa);
        __mmask64 neg = _mm512_movepi8_mask(qa);
        __m512i sb = _mm512_mask_sub_epi8(qb, neg, _mm512_setzero_si512(), qb);
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ua, sb);
        float d0 = rp_fp16_to_fp32(a[i].d) * rp_fp16_to_fp32(b[i].d);
        float d1 = rp_fp16_to_fp32(a[i + 1].d) * rp_fp16_to_fp32(b[i + 1].d);
        __m512 d = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot), acc);
    }
    float r = _mm512_reduce_add_ps(acc);
    for (; i < nb; i++) {
        __m256i qa = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i qb = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i ua = _mm256_abs_epi8(qa);
        __m256i sb = _mm256_sign_epi8(qb, qa);
        __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ua, sb);
        __m128i d4 = _mm_add_epi32(_mm256_castsi256_si128(dot), _mm256_extracti128_si256(dot, 1));
        d4 = _mm_add_epi32(d4, _mm_shuffle_epi32(d4, 0x4e));
        d4 = _mm_add_epi32(d4, _mm_shuffle_epi32(d4, 0xb1));
        r += rp_fp16_to_fp32(a[i].d) * rp_fp16_to_fp32(b[i].d) * (float)_mm_cvtsi128_si32(d4);
    }
    *s = r;
}

void rp_kernels_fill_avx512(rp_kernels *k) {
    k->vec_dot[RP_TYPE_F32] = vec_dot_f32_avx512;
    k->vec_dot[RP_TYPE_F16] = vec_dot_f16_avx512;
    k->vec_dot[RP_TYPE_Q8_0] = vec_dot_q8_0_avx512;
    k->dot_f32 = dot_f32_avx512;
    k->axpy_f32 = axpy_f32_avx512;
    k->dot_f16_f32 = dot_f16_f32_avx512;
    k->axpy_f16 = axpy_f16_avx512;
}
