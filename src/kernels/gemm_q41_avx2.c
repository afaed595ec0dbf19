/* AVX2 multi-token gemm for Q4_1 and Q5_1 (rp_gemm_ops), in the float order
 * of their vec_dot (kernels_avx2.c, llama.cpp's ggml_vec_dot_q4_1_q8_1 /
 * _q5_1_q8_1): per block acc[l] = fma(dw*dx, lane sum, acc[l]) over the 8
 * lanes of 4 values, summs = fma(m, s, summs), then
 * ((a4+a0)+(a6+a2)) + ((a5+a1)+(a7+a3)) + summs. Here a register holds one
 * lane of 8 tokens; the weight values (0..15, 0..31) are vpmaddubsw's
 * unsigned operand, the activations its signed one (pair sums stay below
 * 2^15), so each output is exactly vec_dot's float. A row is unpacked once
 * (values, d, m) for every token group of the call.
 *
 * Kept apart from kernels_avx2.c so the tables of the two files merge
 * independently; filled after rp_kernels_fill_avx2 (the AVX-512 table
 * overrides these with its own). */
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "base/util.h"

#include <immintrin.h>
#include <string.h>

#define UNROLL8 _Pragma("GCC unroll 8")

/* bytes per block of a packed group: i8 xs[8][16][4] (lane l, token t: its
 * 4 activation bytes), f32 dx[16], f32 sx[16] */
#define G1_BYTES 640

static inline float f16(uint16_t h) {
    return _cvtsh_ss(h);
}

static inline uint32_t load_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static size_t g1_group_bytes(int n) {
    return (size_t)(n / 32) * G1_BYTES;
}

static void g1_pack(int n, int cnt, const void *xq, size_t ldx, void *group) {
    const int nb = n / 32;
    uint8_t *g = group;
    for (int b = 0; b < nb; b++) {
        uint32_t *xs = (uint32_t *)(g + (size_t)b * G1_BYTES);
        float *dx = (float *)(xs + 128), *sx = dx + 16;
        for (int t = 0; t < RP_GEMM_GROUP; t++) {
            if (t < cnt) {
                const block_q8_1 *x = (const block_q8_1 *)((const char *)xq + (size_t)t * ldx) + b;
                for (int l = 0; l < 8; l++) xs[l * 16 + t] = load_u32(x->qs + 4 * l);
                dx[t] = f16(x->d);
                sx[t] = f16(x->s);
            } else {
                for (int l = 0; l < 8; l++) xs[l * 16 + t] = 0;
                dx[t] = sx[t] = 0.0f;
            }
        }
    }
}

static size_t g1_row_bytes(int n) {
    return rp_align_up((size_t)(n / 32) * (32 + 4 + 4), 64);
}

static size_t g1_scratch(int n) {
    return g1_row_bytes(n);
}

/* 16 packed bytes to 32 values: low nibbles, then high nibbles */
static inline __m256i nibbles32(const uint8_t *p) {
    const __m128i t = _mm_loadu_si128((const __m128i *)p);
    const __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* byte j = 0x10 where bit j of the 32-bit word is set */
static inline __m256i fifth_bits(const uint8_t *p) {
    const __m256i sh = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                          0x0202020202020202, 0x0303030303030303);
    const __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)load_u32(p)), sh);
    const __m256i m = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(b, m), m), _mm256_set1_epi8(0x10));
}

/* the row unpacked: 32 values per block, then d[nb], then m[nb] */
static void g1_prep(int type, int n, const void *row, uint8_t *p) {
    const int nb = n / 32;
    float *dw = (float *)(p + (size_t)nb * 32), *mw = dw + nb;
    for (int b = 0; b < nb; b++) {
        __m256i v;
        if (type == RP_TYPE_Q4_1) {
            const block_q4_1 *x = (const block_q4_1 *)row + b;
            dw[b] = f16(x->d);
            mw[b] = f16(x->m);
            v = nibbles32(x->qs);
        } else {
            const block_q5_1 *x = (const block_q5_1 *)row + b;
            dw[b] = f16(x->d);
            mw[b] = f16(x->m);
            v = _mm256_or_si256(nibbles32(x->qs), fifth_bits(x->qh));
        }
        _mm256_storeu_si256((__m256i *)(p + 32 * b), v);
    }
}

/* one row against tokens [8h, 8h + 8) of a group, c of them stored */
static void g1_half(int nb, const uint8_t *p, const uint8_t *xg, int h, float *y, size_t ldy,
                    int c) {
    const float *dw = (const float *)(p + (size_t)nb * 32), *mw = dw + nb;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[8];
    UNROLL8
    for (int l = 0; l < 8; l++) acc[l] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = xg + (size_t)b * G1_BYTES, *xs = blk + 32 * h;
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(dw[b]),
                                       _mm256_loadu_ps((const float *)(blk + 512) + 8 * h));
        UNROLL8
        for (int l = 0; l < 8; l++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(xs + 64 * l));
            const __m256i w = _mm256_set1_epi32((int)load_u32(p + 32 * b + 4 * l));
            const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
            acc[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[l]);
        }
    }
    __m256 summs = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++)
        summs = _mm256_fmadd_ps(
            _mm256_set1_ps(mw[b]),
            _mm256_loadu_ps((const float *)(xg + (size_t)b * G1_BYTES + 576) + 8 * h), summs);
    const __m256 r0 = _mm256_add_ps(acc[4], acc[0]), r1 = _mm256_add_ps(acc[5], acc[1]);
    const __m256 r2 = _mm256_add_ps(acc[6], acc[2]), r3 = _mm256_add_ps(acc[7], acc[3]);
    const __m256 s =
        _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(r0, r2), _mm256_add_ps(r1, r3)), summs);
    float tmp[8];
    _mm256_storeu_ps(tmp, s);
    for (int t = 0; t < c; t++) y[(size_t)t * ldy] = tmp[t];
}

static void g1_run(int type, int n, int nr, const void *w, size_t ldw, const void *xp, int cnt,
                   float *y, size_t ldy, void *scratch) {
    const int nb = n / 32, ng = (cnt + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
    const size_t gb = g1_group_bytes(n);
    for (int r = 0; r < nr; r++) {
        g1_prep(type, n, (const char *)w + (size_t)r * ldw, scratch);
        for (int g = 0; g < ng; g++) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)g * gb;
            const int c = RP_MIN(RP_GEMM_GROUP, cnt - g * RP_GEMM_GROUP);
            float *yg = y + (size_t)g * RP_GEMM_GROUP * ldy + r;
            g1_half(nb, scratch, xg, 0, yg, ldy, RP_MIN(8, c));
            if (c > 8) g1_half(nb, scratch, xg, 1, yg + 8 * ldy, ldy, c - 8);
        }
    }
}

static void run_q4_1(int n, int nr, const void *w, size_t ldw, const void *xp, size_t ldx, int cnt,
                     float *y, size_t ldy, void *scratch) {
    (void)ldx;
    g1_run(RP_TYPE_Q4_1, n, nr, w, ldw, xp, cnt, y, ldy, scratch);
}

static void run_q5_1(int n, int nr, const void *w, size_t ldw, const void *xp, size_t ldx, int cnt,
                     float *y, size_t ldy, void *scratch) {
    (void)ldx;
    g1_run(RP_TYPE_Q5_1, n, nr, w, ldw, xp, cnt, y, ldy, scratch);
}

static const rp_gemm_ops gemm_q4_1 = {g1_group_bytes, g1_pack, g1_scratch, run_q4_1};
static const rp_gemm_ops gemm_q5_1 = {g1_group_bytes, g1_pack, g1_scratch, run_q5_1};

void rp_gemm_q41_fill_avx2(rp_kernels *k) {
    k->gemm[RP_TYPE_Q4_1] = &gemm_q4_1;
    k->gemm[RP_TYPE_Q5_1] = &gemm_q5_1;
}
