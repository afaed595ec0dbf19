/* Table-read activations, 16 elements a step (see act_ref.c): the rounding
 * to fp16 is vcvtps2ph's round-to-nearest-even, the one rp_fp32_to_fp16 and
 * ggml's F16C conversion make, so every element equals the scalar twin's. */
#include "kernels/kernels.h"

#include <immintrin.h>

static inline __m512 geglu16(__m512 x, const float *tab) {
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 g = _mm512_i32gather_ps(_mm512_cvtepu16_epi32(h), tab, 4);
    const __mmask16 lo = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-10.0f), _CMP_LE_OQ);
    const __mmask16 hi = _mm512_cmp_ps_mask(x, _mm512_set1_ps(10.0f), _CMP_GE_OQ);
    g = _mm512_mask_blend_ps(lo, g, _mm512_setzero_ps());
    return _mm512_mask_blend_ps(hi, g, x);
}

static void geglu_f16_avx512(float *gate, const float *up, int n, const float *tab) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = geglu16(_mm512_loadu_ps(gate + i), tab);
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(g, _mm512_loadu_ps(up + i)));
    }
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        const __m512 g = geglu16(_mm512_maskz_loadu_ps(k, gate + i), tab);
        _mm512_mask_storeu_ps(gate + i, k, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, up + i)));
    }
}

void rp_act_fill_avx512(rp_kernels *k) {
    k->geglu_f16 = geglu_f16_avx512;
}
