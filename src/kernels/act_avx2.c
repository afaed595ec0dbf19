/* Table-read activations, 8 elements a step (see act_ref.c): the rounding to
 * fp16 is vcvtps2ph's round-to-nearest-even (F16C), the one rp_fp32_to_fp16
 * makes, so every element equals the scalar twin's. */
#include "kernels/kernels.h"
#include "base/util.h"

#include <immintrin.h>

static void geglu_f16_avx2(float *gate, const float *up, int n, const float *tab) {
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 g = _mm256_i32gather_ps(tab, _mm256_cvtepu16_epi32(h), 4);
        g = _mm256_blendv_ps(g, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
        g = _mm256_blendv_ps(g, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) { /* the tail as act_ref.c's twin */
        const float x = gate[i];
        const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : tab[rp_fp32_to_fp16(x)];
        gate[i] = g * up[i];
    }
}

void rp_act_fill_avx2(rp_kernels *k) {
    k->geglu_f16 = geglu_f16_avx2;
}
