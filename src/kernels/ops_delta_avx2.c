/* AVX2 + FMA twins of the delta-net kernels in ops_delta.c. Compiled with
 * -mavx2 -mfma; called only when rp_cpu_isa() says the CPU has them. Same
 * arithmetic as the scalar twins up to the order of the sums (8 lanes). */
#include "kernels/ops_delta.h"

#include <immintrin.h>
#include <math.h>

static inline float hsum(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* d % 8 == 0 (the caller checks) */
void rp_delta_token_avx2(float *S, int d, float decay, float beta, const float *q, const float *k,
                         const float *v, float scale, float *o, float *delta) {
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
        delta[j] = (v[j] - decay * hsum(_mm256_add_ps(a0, a1))) * beta;
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
        o[j] = hsum(_mm256_add_ps(a0, a1)) * scale;
    }
}

void rp_conv_token_avx2(float *x, float *h, const float *w, int k, int channels, long c0, long c1) {
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
