/* AVX2 decoders of quantized KV-cache rows (rp_kernels.kv_to_f32); only called
 * when cpuid has AVX2 and F16C. The scalar dequantizers' arithmetic: one
 * multiply, then for Q4_1 / Q5_1 one add (no fused multiply-add), so a row is
 * bit for bit what rp_dequant_* gives. The AVX2 table's attention is the
 * per-key path over these rows and its dot / axpy kernels. */
#include "kernels/kernels.h"
#include "kernels/quant.h"

#include <immintrin.h>
#include <string.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline float h2f(uint16_t h) {
    return _cvtsh_ss(h);
}

/* 8 int32 lanes of the bytes at p, zero- or sign-extended */
static inline __m256i u8x8(const uint8_t *p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* the 32 values of a block as int32 lanes, q[j] for j < 16 from the low
 * nibbles, q[j + 16] from the high ones */
static inline void nib32(const uint8_t *qs, __m256i q[4]) {
    const __m256i a = u8x8(qs), b = u8x8(qs + 8), m = _mm256_set1_epi32(0xF);
    q[0] = _mm256_and_si256(a, m);
    q[1] = _mm256_and_si256(b, m);
    q[2] = _mm256_srli_epi32(a, 4);
    q[3] = _mm256_srli_epi32(b, 4);
}

/* lanes j of the 5th bits of qh for j in [8i, 8i + 8), as 16 or 0 */
static inline __m256i high5(uint32_t h, int i) {
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i x = _mm256_and_si256(_mm256_set1_epi32((int)((h >> (8 * i)) & 0xFF)), bits);
    return _mm256_and_si256(_mm256_cmpeq_epi32(x, bits), _mm256_set1_epi32(16));
}

ALWAYS_INLINE void blk32_avx2(int type, const uint8_t *blk, float *y) {
    __m256i q[4];
    __m256 d, m = _mm256_setzero_ps();
    bool has_m = false;
    switch (type) {
    case RP_TYPE_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)blk;
        d = _mm256_set1_ps(h2f(b->d));
        for (int i = 0; i < 4; i++)
            q[i] = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * i)));
        break;
    }
    case RP_TYPE_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)blk;
        d = _mm256_set1_ps(h2f(b->d));
        nib32(b->qs, q);
        for (int i = 0; i < 4; i++) q[i] = _mm256_sub_epi32(q[i], _mm256_set1_epi32(8));
        break;
    }
    case RP_TYPE_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)blk;
        d = _mm256_set1_ps(h2f(b->d));
        m = _mm256_set1_ps(h2f(b->m));
        has_m = true;
        nib32(b->qs, q);
        break;
    }
    case RP_TYPE_Q5_0: {
        const block_q5_0 *b = (const block_q5_0 *)blk;
        uint32_t h;
        memcpy(&h, b->qh, 4);
        d = _mm256_set1_ps(h2f(b->d));
        nib32(b->qs, q);
        for (int i = 0; i < 4; i++)
            q[i] = _mm256_sub_epi32(_mm256_or_si256(q[i], high5(h, i)), _mm256_set1_epi32(16));
        break;
    }
    case RP_TYPE_Q5_1: {
        const block_q5_1 *b = (const block_q5_1 *)blk;
        uint32_t h;
        memcpy(&h, b->qh, 4);
        d = _mm256_set1_ps(h2f(b->d));
        m = _mm256_set1_ps(h2f(b->m));
        has_m = true;
        nib32(b->qs, q);
        for (int i = 0; i < 4; i++) q[i] = _mm256_or_si256(q[i], high5(h, i));
        break;
    }
    default: { /* IQ4_NL */
        const block_iq4_nl *b = (const block_iq4_nl *)blk;
        d = _mm256_set1_ps(h2f(b->d));
        const __m256i lo = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)rp_kvalues_iq4nl));
        const __m256i hi =
            _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(rp_kvalues_iq4nl + 8)));
        nib32(b->qs, q);
        for (int i = 0; i < 4; i++) {
            const __m256i sel = _mm256_cmpgt_epi32(q[i], _mm256_set1_epi32(7));
            q[i] = _mm256_blendv_epi8(_mm256_permutevar8x32_epi32(lo, q[i]),
                                      _mm256_permutevar8x32_epi32(hi, q[i]), sel);
        }
        break;
    }
    }
    for (int i = 0; i < 4; i++) {
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(q[i]), d);
        if (has_m) v = _mm256_add_ps(v, m);
        _mm256_storeu_ps(y + 8 * i, v);
    }
}

static inline size_t block_bytes(int type) {
    switch (type) {
    case RP_TYPE_Q8_0:
        return sizeof(block_q8_0);
    case RP_TYPE_Q4_1:
        return sizeof(block_q4_1);
    case RP_TYPE_Q5_0:
        return sizeof(block_q5_0);
    case RP_TYPE_Q5_1:
        return sizeof(block_q5_1);
    default: /* Q4_0, IQ4_NL */
        return sizeof(block_q4_0);
    }
}

#define KV_ROW_AVX2(name, TYPE)                                                                    \
    static void name(const void *row, float *y, int n) {                                           \
        const uint8_t *b = row;                                                                    \
        for (int i = 0; i < n; i += 32, b += block_bytes(TYPE)) blk32_avx2(TYPE, b, y + i);        \
    }
KV_ROW_AVX2(kv_q8_0_avx2, RP_TYPE_Q8_0)
KV_ROW_AVX2(kv_q4_0_avx2, RP_TYPE_Q4_0)
KV_ROW_AVX2(kv_q4_1_avx2, RP_TYPE_Q4_1)
KV_ROW_AVX2(kv_q5_0_avx2, RP_TYPE_Q5_0)
KV_ROW_AVX2(kv_q5_1_avx2, RP_TYPE_Q5_1)
KV_ROW_AVX2(kv_iq4_nl_avx2, RP_TYPE_IQ4_NL)

void rp_attn_fill_avx2(rp_kernels *k) {
    k->kv_to_f32[RP_TYPE_Q8_0] = kv_q8_0_avx2;
    k->kv_to_f32[RP_TYPE_Q4_0] = kv_q4_0_avx2;
    k->kv_to_f32[RP_TYPE_Q4_1] = kv_q4_1_avx2;
    k->kv_to_f32[RP_TYPE_Q5_0] = kv_q5_0_avx2;
    k->kv_to_f32[RP_TYPE_Q5_1] = kv_q5_1_avx2;
    k->kv_to_f32[RP_TYPE_IQ4_NL] = kv_iq4_nl_avx2;
}
