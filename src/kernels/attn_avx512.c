/* AVX-512 attention over the KV cache (rp_attn_split) and the decoders of
 * quantized cache rows; only called when cpuid has AVX-512 (F/BW/VL/DQ).
 *
 * Quantized rows (llama.cpp's 32-element blocks) are decoded to floats with
 * the scalar dequantizers' arithmetic (one multiply, then for Q4_1 / Q5_1 one
 * add, no fused multiply-add), so a decoded row is bit for bit what
 * rp_dequant_* gives; attention then runs on those floats exactly as on F16
 * rows converted to F32. */
#include "kernels/kernels.h"
#include "kernels/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define UNROLL8       _Pragma("GCC unroll 8")
#define UNROLL16      _Pragma("GCC unroll 16")
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* ---- quantized rows ------------------------------------------------------ */

static inline size_t kv_block_bytes(int type) {
    switch (type) {
    case RP_TYPE_Q8_0:
        return sizeof(block_q8_0);
    case RP_TYPE_Q4_0:
        return sizeof(block_q4_0);
    case RP_TYPE_Q4_1:
        return sizeof(block_q4_1);
    case RP_TYPE_Q5_0:
        return sizeof(block_q5_0);
    case RP_TYPE_Q5_1:
        return sizeof(block_q5_1);
    default:
        return sizeof(block_iq4_nl);
    }
}

static inline float h2f(uint16_t h) {
    return _cvtsh_ss(h);
}

/* the 16 low nibbles and the 16 high nibbles of 16 bytes, as int32 lanes */
static inline void nibbles16(const uint8_t *qs, __m512i *lo, __m512i *hi) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
    *lo = _mm512_and_si512(b, _mm512_set1_epi32(0xF));
    *hi = _mm512_srli_epi32(b, 4);
}

/* elements 0..15 and 16..31 of one block */
ALWAYS_INLINE void blk32_avx512(int type, const uint8_t *blk, __m512 *y0, __m512 *y1) {
    __m512i lo, hi;
    switch (type) {
    case RP_TYPE_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)blk;
        const __m512 d = _mm512_set1_ps(h2f(b->d));
        lo = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->qs));
        hi = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16)));
        *y0 = _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d);
        *y1 = _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d);
        return;
    }
    case RP_TYPE_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)blk;
        const __m512 d = _mm512_set1_ps(h2f(b->d));
        const __m512i eight = _mm512_set1_epi32(8);
        nibbles16(b->qs, &lo, &hi);
        *y0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, eight)), d);
        *y1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, eight)), d);
        return;
    }
    case RP_TYPE_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)blk;
        const __m512 d = _mm512_set1_ps(h2f(b->d)), m = _mm512_set1_ps(h2f(b->m));
        nibbles16(b->qs, &lo, &hi);
        *y0 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lo), d), m);
        *y1 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(hi), d), m);
        return;
    }
    case RP_TYPE_Q5_0:
    case RP_TYPE_Q5_1: {
        const bool one = type == RP_TYPE_Q5_1;
        const uint8_t *qh = one ? ((const block_q5_1 *)blk)->qh : ((const block_q5_0 *)blk)->qh;
        const uint8_t *qs = one ? ((const block_q5_1 *)blk)->qs : ((const block_q5_0 *)blk)->qs;
        uint32_t h;
        memcpy(&h, qh, 4);
        nibbles16(qs, &lo, &hi);
        const __m512i sixteen = _mm512_set1_epi32(16);
        lo = _mm512_mask_or_epi32(lo, (__mmask16)(h & 0xFFFF), lo, sixteen);
        hi = _mm512_mask_or_epi32(hi, (__mmask16)(h >> 16), hi, sixteen);
        if (one) {
            const block_q5_1 *b = (const block_q5_1 *)blk;
            const __m512 d = _mm512_set1_ps(h2f(b->d)), m = _mm512_set1_ps(h2f(b->m));
            *y0 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lo), d), m);
            *y1 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(hi), d), m);
        } else {
            const __m512 d = _mm512_set1_ps(h2f(((const block_q5_0 *)blk)->d));
            *y0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, sixteen)), d);
            *y1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, sixteen)), d);
        }
        return;
    }
    default: { /* IQ4_NL */
        const block_iq4_nl *b = (const block_iq4_nl *)blk;
        const __m512 d = _mm512_set1_ps(h2f(b->d));
        const __m512i grid =
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)rp_kvalues_iq4nl));
        nibbles16(b->qs, &lo, &hi);
        *y0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(lo, grid)));
        *y1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(hi, grid)));
        return;
    }
    }
}

/* n elements (n % 32 == 0) of a quantized row */
ALWAYS_INLINE void kv_row_avx512(int type, const void *row, float *y, int n) {
    const uint8_t *b = row;
    const size_t bb = kv_block_bytes(type);
    for (int i = 0; i < n; i += 32, b += bb) {
        __m512 y0, y1;
        blk32_avx512(type, b, &y0, &y1);
        _mm512_storeu_ps(y + i, y0);
        _mm512_storeu_ps(y + i + 16, y1);
    }
}

#define KV_ROW_AVX512(name, TYPE)                                                                  \
    static void name(const void *row, float *y, int n) {                                           \
        kv_row_avx512(TYPE, row, y, n);                                                            \
    }
KV_ROW_AVX512(kv_q8_0_avx512, RP_TYPE_Q8_0)
KV_ROW_AVX512(kv_q4_0_avx512, RP_TYPE_Q4_0)
KV_ROW_AVX512(kv_q4_1_avx512, RP_TYPE_Q4_1)
KV_ROW_AVX512(kv_q5_0_avx512, RP_TYPE_Q5_0)
KV_ROW_AVX512(kv_q5_1_avx512, RP_TYPE_Q5_1)
KV_ROW_AVX512(kv_iq4_nl_avx512, RP_TYPE_IQ4_NL)

/* ============================================================================
 * Attention over a split of keys (rp_attn_split): scores for a tile of 16 keys
 * at once per query (16 dot-product accumulators reduced together), masked to
 * -inf where the query does not see the key; exp(score - max) by a vectorized
 * exponential; the weighted sum of V rows in chunks of 32 outputs for every
 * query of the call, so a K or V row is converted from F16 once for all of
 * them. Each query's arithmetic is independent of the others: key tiles and
 * lanes follow absolute positions.
 * ========================================================================== */

/* e^x for x <= 0 (x below -87 gives 0 or a subnormal): x = n ln2 + r, |r| <=
 * ln2 / 2, e^r by its Taylor polynomial of degree 7 (relative error < 1e-8
 * before rounding), scaled by 2^n */
static inline __m512 exp_neg512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* lane j of the result = the sum of the 16 lanes of a[j] (the same tree for
 * every j) */
static inline __m512 hsum16x16(const __m512 *a) {
    __m512 s[8], u[4], w[2];
    for (int i = 0; i < 8; i++)
        s[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        const __m512d x = _mm512_castps_pd(s[2 * i]), y = _mm512_castps_pd(s[2 * i + 1]);
        u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    for (int i = 0; i < 2; i++)
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x88),
                         _mm512_shuffle_f32x4(w[0], w[1], 0xDD));
}

static inline __mmask16 tail16(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n > 0 ? n : 0)) - 1);
}

/* 16 elements of a row (F32 or F16) from element i, those past n zero */
static inline __m512 row16(const void *row, bool f16row, int i, int n) {
    if (n - i >= 16) /* a whole 16: plain loads */
        return f16row ? _mm512_cvtph_ps(
                            _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)))
                      : _mm512_loadu_ps((const float *)row + i);
    const __mmask16 m = tail16(n - i);
    if (f16row) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i));
    return _mm512_maskz_loadu_ps(m, (const float *)row + i);
}

/* o[q][i] += p[q][pos] * v[pos][c + 16 i .. c + 16 i + 15] for pos in [lo,
 * hi) and the NV vectors i of the chunk at c, only where query q sees pos
 * (checked: the edges of the queries' ranges) or for every query (the range
 * all of them see) */
ALWAYS_INLINE void attn_pv_range(const rp_attn_split *a, const float (*p)[RP_ATTN_SPLIT], int base,
                                 int lo, int hi, int c, bool checked, __m512 *o, const int NQ,
                                 const int NV) {
    const int vt = a->type_v;
    const bool vf16 = vt == RP_TYPE_F16, vq = vt != RP_TYPE_F16 && vt != RP_TYPE_F32;
    const size_t bb = vq ? kv_block_bytes(vt) : 0;
    const size_t vrow = vq ? bb * (size_t)(a->dv / 32) : (size_t)a->dv * (vf16 ? 2 : 4);
    const size_t voff = vq ? bb * (size_t)(c / 32) : 0;
    /* the cell of pos, stepped (no division per row) */
    int cell = lo < hi ? lo % a->cap : 0;
    for (int pos = lo; pos < hi; pos++, cell = cell + 1 == a->cap ? 0 : cell + 1) {
        const uint8_t *v = (const uint8_t *)a->v + (size_t)cell * vrow;
        __m512 vv[8];
        if (vq) {
            UNROLL8
            for (int i = 0; i < NV; i += 2)
                blk32_avx512(vt, v + voff + bb * (size_t)(i / 2), &vv[i], &vv[i + 1]);
        } else {
            UNROLL8
            for (int i = 0; i < NV; i++) vv[i] = row16(v, vf16, c + 16 * i, a->dv);
        }
        UNROLL8
        for (int q = 0; q < NQ; q++)
            if (!checked || (pos >= a->beg[q] && pos < a->end[q])) {
                const __m512 w = _mm512_set1_ps(p[q][pos - base]);
                UNROLL8
                for (int i = 0; i < NV; i++)
                    o[q * NV + i] = _mm512_fmadd_ps(w, vv[i], o[q * NV + i]);
            }
    }
}

/* the chunks of NV * 16 outputs */
ALWAYS_INLINE void attn_pv_chunks(const rp_attn_split *a, const float (*p)[RP_ATTN_SPLIT], int base,
                                  int kb, int cb, int ce, int ke, float *out, size_t ldo,
                                  const int NQ, const int NV) {
    for (int c = 0; c < a->dv; c += 16 * NV) {
        __m512 o[RP_ATTN_MAXQ * 8];
        UNROLL16
        for (int i = 0; i < NQ * NV; i++) o[i] = _mm512_setzero_ps();
        attn_pv_range(a, p, base, kb, cb, c, true, o, NQ, NV);
        attn_pv_range(a, p, base, cb, ce, c, false, o, NQ, NV);
        attn_pv_range(a, p, base, ce, ke, c, true, o, NQ, NV);
        UNROLL8
        for (int q = 0; q < NQ; q++) UNROLL8
        for (int i = 0; i < NV; i++)
            _mm512_mask_storeu_ps(out + (size_t)q * ldo + c + 16 * i, tail16(a->dv - c - 16 * i),
                                  o[q * NV + i]);
    }
}

/* o[q] = sum over visible keys of p[q][key] * v[key], in chunks of up to 128
 * outputs (as many as the registers hold: one pass over the V rows where
 * they fit); each query's terms are added in position order whichever of
 * the three ranges they fall in, and each output on its own, so the chunk
 * width does not change a result */
ALWAYS_INLINE void attn_pv(const rp_attn_split *a, const float (*p)[RP_ATTN_SPLIT], int base,
                           int kb, int ke, float *o, size_t ldo, const int NQ) {
    /* [cb, ce): the positions every query of the call sees (empty when one
     * query sees none) */
    int cb = kb, ce = ke;
    for (int q = 0; q < NQ; q++) {
        cb = a->beg[q] > cb ? a->beg[q] : cb;
        ce = a->end[q] < ce ? a->end[q] : ce;
    }
    if (ce < cb) ce = cb;
    if (NQ * 8 <= 24 && a->dv % 128 == 0)
        attn_pv_chunks(a, p, base, kb, cb, ce, ke, o, ldo, NQ, NQ * 8 <= 24 ? 8 : 2);
    else if (NQ * 4 <= 20 && a->dv % 64 == 0)
        attn_pv_chunks(a, p, base, kb, cb, ce, ke, o, ldo, NQ, NQ * 4 <= 20 ? 4 : 2);
    else
        attn_pv_chunks(a, p, base, kb, cb, ce, ke, o, ldo, NQ, 2);
}

static void attn_split_avx512(const rp_attn_split *a, float *m_out, float *l_out, float *o,
                              size_t ldo) {
    const int nq = a->nq, dk = a->dk, dkp = (a->dk + 15) & ~15;
    int kb = a->k1, ke = a->k0;
    for (int q = 0; q < nq; q++)
        if (a->beg[q] < a->end[q]) {
            kb = a->beg[q] < kb ? a->beg[q] : kb;
            ke = a->end[q] > ke ? a->end[q] : ke;
        }
    if (kb >= ke) {
        for (int q = 0; q < nq; q++) {
            m_out[q] = -INFINITY;
            l_out[q] = 0;
            memset(o + (size_t)q * ldo, 0, (size_t)a->dv * sizeof(float));
        }
        return;
    }
    const int base = kb & ~15;
    _Alignas(64) float qp[RP_ATTN_MAXQ][RP_ATTN_MAXD];
    _Alignas(64) float kt[16][RP_ATTN_MAXD];
    _Alignas(64) float sc[RP_ATTN_MAXQ][RP_ATTN_SPLIT];
    for (int q = 0; q < nq; q++)
        for (int d = 0; d < dkp; d += 16) _mm512_store_ps(qp[q] + d, row16(a->q[q], false, d, dk));
    const int kt_type = a->type_k;
    const bool kf16 = kt_type == RP_TYPE_F16, kq = kt_type != RP_TYPE_F16 && kt_type != RP_TYPE_F32;
    const size_t krow =
        kq ? kv_block_bytes(kt_type) * (size_t)(dk / 32) : (size_t)dk * (kf16 ? 2 : 4);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 ninf = _mm512_set1_ps(-INFINITY), scale = _mm512_set1_ps(a->scale);
    __m512 mx[RP_ATTN_MAXQ];
    for (int q = 0; q < nq; q++) mx[q] = ninf;
    /* scores, masked, and their maximum per query; cell: that of the next
     * visible key (they are visited in order) */
    int cell = kb % a->cap;
    for (int t0 = base; t0 < ke; t0 += 16) {
        for (int j = 0; j < 16; j++) {
            const int pos = t0 + j;
            if (pos < kb || pos >= ke) {
                memset(kt[j], 0, (size_t)dkp * sizeof(float));
                continue;
            }
            const void *k = (const uint8_t *)a->k + (size_t)cell * krow;
            cell = cell + 1 == a->cap ? 0 : cell + 1;
            if (kq)
                kv_row_avx512(kt_type, k, kt[j], dk);
            else
                for (int d = 0; d < dkp; d += 16) _mm512_store_ps(kt[j] + d, row16(k, kf16, d, dk));
        }
        const __m512i posv = _mm512_add_epi32(_mm512_set1_epi32(t0), iota);
        for (int q = 0; q < nq; q++) {
            /* 16 accumulators kept in registers (the loops fully unrolled) */
            __m512 acc[16];
            UNROLL16
            for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
            for (int d = 0; d < dkp; d += 16) {
                const __m512 qv = _mm512_load_ps(qp[q] + d);
                UNROLL16
                for (int j = 0; j < 16; j++)
                    acc[j] = _mm512_fmadd_ps(qv, _mm512_load_ps(kt[j] + d), acc[j]);
            }
            __m512 s = _mm512_mul_ps(hsum16x16(acc), scale);
            if (a->softcap > 0) {
                _Alignas(64) float tmp[16];
                _mm512_store_ps(tmp, s);
                for (int j = 0; j < 16; j++) tmp[j] = a->softcap * tanhf(tmp[j] / a->softcap);
                s = _mm512_load_ps(tmp);
            }
            const __mmask16 vis = _mm512_cmpge_epi32_mask(posv, _mm512_set1_epi32(a->beg[q])) &
                                  _mm512_cmplt_epi32_mask(posv, _mm512_set1_epi32(a->end[q]));
            s = _mm512_mask_blend_ps(vis, ninf, s);
            _mm512_store_ps(sc[q] + (t0 - base), s);
            mx[q] = _mm512_max_ps(mx[q], s);
        }
    }
    /* exp(score - max), their sum */
    for (int q = 0; q < nq; q++) {
        const float m = _mm512_reduce_max_ps(mx[q]);
        m_out[q] = m;
        __m512 lv = _mm512_setzero_ps();
        if (m != -INFINITY)
            for (int t0 = base; t0 < ke; t0 += 16) {
                const __m512 s = _mm512_load_ps(sc[q] + (t0 - base));
                const __mmask16 live = _mm512_cmp_ps_mask(s, ninf, _CMP_NEQ_UQ);
                const __m512 p =
                    _mm512_maskz_mov_ps(live, exp_neg512(_mm512_sub_ps(s, _mm512_set1_ps(m))));
                _mm512_store_ps(sc[q] + (t0 - base), p);
                lv = _mm512_add_ps(lv, p);
            }
        l_out[q] = _mm512_reduce_add_ps(lv);
    }
    /* the weighted V rows */
    const float(*p)[RP_ATTN_SPLIT] = (const float(*)[RP_ATTN_SPLIT])sc;
    switch (nq) {
    case 1:
        attn_pv(a, p, base, kb, ke, o, ldo, 1);
        break;
    case 2:
        attn_pv(a, p, base, kb, ke, o, ldo, 2);
        break;
    case 3:
        attn_pv(a, p, base, kb, ke, o, ldo, 3);
        break;
    case 4:
        attn_pv(a, p, base, kb, ke, o, ldo, 4);
        break;
    case 5:
        attn_pv(a, p, base, kb, ke, o, ldo, 5);
        break;
    case 6:
        attn_pv(a, p, base, kb, ke, o, ldo, 6);
        break;
    case 7:
        attn_pv(a, p, base, kb, ke, o, ldo, 7);
        break;
    default:
        attn_pv(a, p, base, kb, ke, o, ldo, 8);
        break;
    }
}

void rp_attn_fill_avx512(rp_kernels *k) {
    k->kv_to_f32[RP_TYPE_Q8_0] = kv_q8_0_avx512;
    k->kv_to_f32[RP_TYPE_Q4_0] = kv_q4_0_avx512;
    k->kv_to_f32[RP_TYPE_Q4_1] = kv_q4_1_avx512;
    k->kv_to_f32[RP_TYPE_Q5_0] = kv_q5_0_avx512;
    k->kv_to_f32[RP_TYPE_Q5_1] = kv_q5_1_avx512;
    k->kv_to_f32[RP_TYPE_IQ4_NL] = kv_iq4_nl_avx512;
    k->attn_split = attn_split_avx512;
}
