/* AVX-512 (F/BW/VL/DQ/VNNI/VBMI) kernels; only called when cpuid has them.
 *
 * Every product here returns exactly the floats of the scalar reference
 * (kernels_ref.c): integer sums are exact however they are formed, and the
 * float steps — one fused multiply-add per block and lane (or per block and
 * row), the final lane reduction — are the same operations in the same order.
 *
 * Matrix x matrix (prompt processing) works on "token vectors": a 512-bit
 * register holds one quantity for 16 tokens. Activations are re-encoded once
 * per product into groups of 16 tokens, for each block and each lane of 4
 * activations the 16 tokens' 4 bytes side by side, offset by +128 to be the
 * unsigned operand of vpdpbusd / vpmaddubsw; the weight's 4 bytes are
 * broadcast as the signed operand. The +128 offset adds 128 * (sum of the 4
 * weights) to every lane, which a per-row correction removes before the
 * float conversion. A row tile of weights is unpacked once (values, the
 * correction, scales) into per-thread scratch and then used for every token
 * group. Matrix x vector (generation) streams the rows in their file layout. */
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "base/util.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* the lane loops must be unrolled so their accumulators stay in registers */
#define UNROLL8  _Pragma("GCC unroll 8")
#define UNROLL16 _Pragma("GCC unroll 16")
#define UNROLL3  _Pragma("GCC unroll 3")

static inline float f16(uint16_t h) {
    return _cvtsh_ss(h);
}

static inline uint32_t load_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ((a4+a0)+(a6+a2)) + ((a5+a1)+(a7+a3)), lane-wise over the 16 tokens */
static inline __m512 reduce8(const __m512 *a) {
    __m512 r0 = _mm512_add_ps(a[4], a[0]), r1 = _mm512_add_ps(a[5], a[1]);
    __m512 r2 = _mm512_add_ps(a[6], a[2]), r3 = _mm512_add_ps(a[7], a[3]);
    return _mm512_add_ps(_mm512_add_ps(r0, r2), _mm512_add_ps(r1, r3));
}

/* the same reduction of 8 lanes in a ymm */
static inline float hsum256(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline void store_tokens(float *y, size_t ldy, __m512 v, int cnt) {
    float tmp[16];
    _mm512_storeu_ps(tmp, v);
    for (int t = 0; t < cnt; t++) y[(size_t)t * ldy] = tmp[t];
}

/* ============================================================================
 * Float weights: F16 with F16 activations (rp_kern_act_type), F32 with F32
 * ones. Every output is one 16-lane accumulator over the row (16 inputs per
 * step, the tail masked to zeros), reduced with _mm512_reduce_add_ps:
 * llama.cpp's x86 tinyBLAS order, the scalar twins'. vec_dot, gemv and gemm
 * all do exactly that; the gemm multiplies F32 values (F16 widened once,
 * exactly) so its inner step is loads and FMAs only.
 * ========================================================================== */

static inline __m512 f16x16(const uint16_t *p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

static inline __m512 f16x16u(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* 16 inputs of a float row (F16 when h), the lanes past m zero */
static inline __attribute__((always_inline)) __m512 fl16(bool h, const void *p, int i,
                                                         __mmask16 m) {
    return h ? f16x16((const uint16_t *)p + i, m) : _mm512_maskz_loadu_ps(m, (const float *)p + i);
}

static inline __attribute__((always_inline)) __m512 fl16u(bool h, const void *p, int i) {
    return h ? f16x16u((const uint16_t *)p + i) : _mm512_loadu_ps((const float *)p + i);
}

static inline __attribute__((always_inline)) float fdot(bool h, int n, const void *a,
                                                        const void *b) {
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(fl16u(h, a, i), fl16u(h, b, i), acc);
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(fl16(h, a, i, m), fl16(h, b, i, m), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static void vec_dot_f16_avx512(int n, float *s, const void *w, const void *x) {
    *s = fdot(true, n, w, x);
}

static void vec_dot_f32_avx512(int n, float *s, const void *w, const void *x) {
    *s = fdot(false, n, w, x);
}

/* F16 and F32 weights have no multi-row gemv: one token goes row after row
 * through vec_dot. Four rows read side by side (sharing each activation
 * load, the rows 8 on prefetched) generated slower on Zen 4 (Qwen3-0.6B
 * shape tg32, 3 alternations: F16 -t 1 11.5-14.4 t/s against 15.6-17.9 row
 * by row, -t 2 16.9-19.2 against 22.7-26.4; F32 -t 1 5.7-6.2 against
 * 7.4-7.7): the one stream the prefetchers follow beats four short ones. */

/* A tile of RM <= 4 rows (F32) x RN <= 6 tokens (F16 when hb, widened as
 * read, else F32), the tail past the last multiple of 16 masked to zeros as
 * vec_dot's masked step: 24 accumulators, 4 + 6 loads per 24 FMAs. */
static inline __attribute__((always_inline)) void f32_tile(bool hb, int RM, int RN, int n,
                                                           const float *const *a,
                                                           const void *const *b, float *y,
                                                           size_t ldy) {
    const int nk = n - n % 16;
    __m512 c[4][6];
    UNROLL8
    for (int i = 0; i < RM; i++) UNROLL8
    for (int j = 0; j < RN; j++) c[i][j] = _mm512_setzero_ps();
    for (int k = 0; k < nk; k += 16) {
        __m512 av[4];
        UNROLL8
        for (int i = 0; i < RM; i++) av[i] = _mm512_loadu_ps(a[i] + k);
        UNROLL8
        for (int j = 0; j < RN; j++) {
            const __m512 bv = fl16u(hb, b[j], k);
            UNROLL8
            for (int i = 0; i < RM; i++) c[i][j] = _mm512_fmadd_ps(av[i], bv, c[i][j]);
        }
    }
    if (nk < n) {
        const __mmask16 m = (__mmask16)((1u << (n - nk)) - 1);
        __m512 av[4];
        UNROLL8
        for (int i = 0; i < RM; i++) av[i] = _mm512_maskz_loadu_ps(m, a[i] + nk);
        UNROLL8
        for (int j = 0; j < RN; j++) {
            const __m512 bv = fl16(hb, b[j], nk, m);
            UNROLL8
            for (int i = 0; i < RM; i++) c[i][j] = _mm512_fmadd_ps(av[i], bv, c[i][j]);
        }
    }
    UNROLL8
    for (int j = 0; j < RN; j++) UNROLL8
    for (int i = 0; i < RM; i++) y[(size_t)j * ldy + (size_t)i] = _mm512_reduce_add_ps(c[i][j]);
}

#define F32_TILES(HB, RM, NAME)                                                                    \
    static void NAME(int rn, int n, const float *const *a, const void *const *b, float *y,         \
                     size_t ldy) {                                                                 \
        switch (rn) {                                                                              \
        case 6:                                                                                    \
            f32_tile(HB, RM, 6, n, a, b, y, ldy);                                                  \
            break;                                                                                 \
        case 5:                                                                                    \
            f32_tile(HB, RM, 5, n, a, b, y, ldy);                                                  \
            break;                                                                                 \
        case 4:                                                                                    \
            f32_tile(HB, RM, 4, n, a, b, y, ldy);                                                  \
            break;                                                                                 \
        case 3:                                                                                    \
            f32_tile(HB, RM, 3, n, a, b, y, ldy);                                                  \
            break;                                                                                 \
        case 2:                                                                                    \
            f32_tile(HB, RM, 2, n, a, b, y, ldy);                                                  \
            break;                                                                                 \
        default:                                                                                   \
            f32_tile(HB, RM, 1, n, a, b, y, ldy);                                                  \
            break;                                                                                 \
        }                                                                                          \
    }
F32_TILES(false, 4, f32_tile_4)
F32_TILES(false, 1, f32_tile_1)
F32_TILES(true, 4, f16_tile_4)
F32_TILES(true, 1, f16_tile_1)

/* rows nr of F32 values (a[r] its row r) x tok tokens (b[t] its token t, F16
 * when hb): tiles of 4 rows (the last rows one by one) x 6 tokens */
static void float_tiles(bool hb, int n, int nr, const float *const *a, int tok,
                        const void *const *b, float *y, size_t ldy) {
    for (int r = 0; r < nr;) {
        const int rm = nr - r >= 4 ? 4 : 1;
        const float *ar[4] = {a[r], rm == 4 ? a[r + 1] : NULL, rm == 4 ? a[r + 2] : NULL,
                              rm == 4 ? a[r + 3] : NULL};
        for (int t = 0; t < tok; t += 6) {
            const int rn = tok - t < 6 ? tok - t : 6;
            float *yt = y + (size_t)t * ldy + (size_t)r;
            if (hb)
                (rm == 4 ? f16_tile_4 : f16_tile_1)(rn, n, ar, b + t, yt, ldy);
            else
                (rm == 4 ? f32_tile_4 : f32_tile_1)(rn, n, ar, b + t, yt, ldy);
        }
        r += rm;
    }
}

/* F32 weights: the rows and the activations as they are, blocks of 64
 * tokens (in L2) against 16 rows at a time. */
static void gemm_run_f32(int n, int nr, const void *w, size_t ldw, const void *xp, size_t ldx,
                         int cnt, float *y, size_t ldy, void *scratch) {
    (void)scratch;
    const void *b[RP_GEMM_GROUP * 4];
    for (int t0 = 0; t0 < cnt; t0 += RP_GEMM_GROUP * 4) {
        const int tok = RP_MIN(cnt - t0, RP_GEMM_GROUP * 4);
        for (int t = 0; t < tok; t++) b[t] = (const char *)xp + (size_t)(t0 + t) * ldx;
        for (int r0 = 0; r0 < nr; r0 += 16) {
            const int rows = RP_MIN(16, nr - r0);
            if (r0 + 16 < nr) rp_prefetch_rows(w, ldw, r0 + 16, RP_MIN(16, nr - r0 - 16));
            const float *a[16];
            for (int i = 0; i < rows; i++)
                a[i] = (const float *)((const char *)w + (size_t)(r0 + i) * ldw);
            float_tiles(false, n, rows, a, tok, b, y + (size_t)t0 * ldy + (size_t)r0, ldy);
        }
    }
}

static size_t f32_scratch(int n) {
    (void)n;
    return 64;
}

static const rp_gemm_ops gemm_f32 = {NULL, NULL, f32_scratch, gemm_run_f32};

/* F16 weights: each 4 rows are widened to F32 once into scratch (exactly:
 * the values vcvtph2ps gives in vec_dot) and reused for every token of the
 * chunk; the activations are read as they are (F16, half the bytes of
 * widened copies: widening them once was slower, pp256 72 t/s against 87). */
static void gemm_run_f16(int n, int nr, const void *w, size_t ldw, const void *xp, size_t ldx,
                         int cnt, float *y, size_t ldy, void *scratch) {
    const int tail = n % 16;
    const __mmask16 mt = (__mmask16)((1u << tail) - 1);
    const size_t stride = rp_align_up((uint64_t)n, 16);
    float *wf = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const void *b[RP_GEMM_GROUP * 4];
    for (int r = 0; r < nr; r += 4) {
        const int rm = RP_MIN(4, nr - r);
        if (r + 4 < nr) rp_prefetch_rows(w, ldw, r + 4, RP_MIN(4, nr - r - 4));
        const float *a[4];
        for (int i = 0; i < rm; i++) {
            const uint16_t *src = (const uint16_t *)((const char *)w + (size_t)(r + i) * ldw);
            float *dst = wf + (size_t)i * stride;
            int k = 0;
            for (; k + 16 <= n; k += 16) _mm512_store_ps(dst + k, f16x16u(src + k));
            if (tail) _mm512_store_ps(dst + k, f16x16(src + k, mt));
            a[i] = dst;
        }
        for (int t0 = 0; t0 < cnt; t0 += RP_GEMM_GROUP * 4) {
            const int tok = RP_MIN(cnt - t0, RP_GEMM_GROUP * 4);
            for (int t = 0; t < tok; t++) b[t] = (const char *)xp + (size_t)(t0 + t) * ldx;
            float_tiles(true, n, rm, a, tok, b, y + (size_t)t0 * ldy + (size_t)r, ldy);
        }
    }
}

static size_t f16_scratch(int n) {
    return 4 * rp_align_up((uint64_t)n, 16) * sizeof(float) + 64;
}

static const rp_gemm_ops gemm_f16 = {NULL, NULL, f16_scratch, gemm_run_f16};

static void act_f16_avx512(const float *x, void *y, int64_t n) {
    uint16_t *d = y;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = rp_fp32_to_fp16(x[i]);
}

/* ============================================================================
 * Blocks of 32 with Q8_0 activations: Q8_0, Q5_0 (lanes), Q4_0, IQ4_NL (rows)
 * ========================================================================== */

/* Packed group, per block b (640 bytes):
 *   u32 xu[8][16]  lane l of token t: its 4 activation bytes + 128
 *   f32 dx[16]     the token's block scale
 *   (64 bytes pad to keep blocks 128-byte aligned relative to each other) */
#define B32_BYTES 640

static size_t b32_group_bytes(int n) {
    return (size_t)(n / 32) * B32_BYTES;
}

static void b32_pack(int n, int cnt, const void *xq, size_t ldx, void *group) {
    const int nb = n / 32;
    uint8_t *g = group;
    for (int b = 0; b < nb; b++) {
        uint32_t *xu = (uint32_t *)(g + (size_t)b * B32_BYTES);
        float *dx = (float *)(xu + 128);
        for (int t = 0; t < RP_GEMM_GROUP; t++) {
            if (t < cnt) {
                const block_q8_0 *x = (const block_q8_0 *)((const char *)xq + (size_t)t * ldx) + b;
                for (int l = 0; l < 8; l++) xu[l * 16 + t] = load_u32(x->qs + 4 * l) ^ 0x80808080u;
                dx[t] = f16(x->d);
            } else {
                for (int l = 0; l < 8; l++) xu[l * 16 + t] = 0x80808080u;
                dx[t] = 0.0f;
            }
        }
        memset(dx + 16, 0, 64);
    }
}

/* Unpacked row of 32-blocks in scratch: values (32 signed bytes per block),
 * the +128 corrections (per lane for "lanes", per block for "rows"), and the
 * block scales as floats. */
typedef struct b32_row {
    int8_t *v;     /* [nb][32] */
    int32_t *corr; /* [nb][8] lanes, or [nb] rows */
    float *dw;     /* [nb] */
} b32_row;

static size_t b32_row_bytes(int n) {
    return (size_t)(n / 32) * (32 + 32 + 4) + 64;
}

static b32_row b32_carve(void *scratch, int n, int which) {
    const int nb = n / 32;
    uint8_t *p = (uint8_t *)scratch + (size_t)which * rp_align_up(b32_row_bytes(n), 64);
    b32_row r = {(int8_t *)p, (int32_t *)(p + (size_t)nb * 32), (float *)(p + (size_t)nb * 64)};
    return r;
}

/* corr = -128 * (sum of each lane's 4 values) for the 8 lanes of a block */
static inline __m256i lane_corr(__m256i v) {
    __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), v);
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s, 7));
}

static inline int32_t block_corr(__m256i v) {
    __m256i s = lane_corr(v);
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
    return _mm_cvtsi128_si32(h);
}

static inline __m256i nibbles32(const uint8_t *p) {
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

static inline __m256i bits32(const uint8_t *p) {
    const __m256i sh = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                          0x0202020202020202, 0x0303030303030303);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)load_u32(p)), sh);
    const __m256i m = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(b, m), m);
}

/* signed values of block b of a row, per type */
typedef __m256i (*b32_values_fn)(const void *row, int b, float *d);

static __m256i values_q8_0(const void *row, int b, float *d) {
    const block_q8_0 *x = (const block_q8_0 *)row + b;
    *d = f16(x->d);
    return _mm256_loadu_si256((const __m256i *)x->qs);
}

static __m256i values_q5_0(const void *row, int b, float *d) {
    const block_q5_0 *x = (const block_q5_0 *)row + b;
    *d = f16(x->d);
    return _mm256_or_si256(nibbles32(x->qs),
                           _mm256_andnot_si256(bits32(x->qh), _mm256_set1_epi8((char)0xF0)));
}

static __m256i values_q4_0(const void *row, int b, float *d) {
    const block_q4_0 *x = (const block_q4_0 *)row + b;
    *d = f16(x->d);
    return _mm256_sub_epi8(nibbles32(x->qs), _mm256_set1_epi8(8));
}

static __m256i values_iq4_nl(const void *row, int b, float *d) {
    const block_iq4_nl *x = (const block_iq4_nl *)row + b;
    *d = f16(x->d);
    const __m256i lut =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rp_kvalues_iq4nl));
    return _mm256_shuffle_epi8(lut, nibbles32(x->qs));
}

static void b32_prep(int n, const void *row, b32_values_fn values, bool lanes, b32_row *r) {
    for (int b = 0; b < n / 32; b++) {
        __m256i v = values(row, b, &r->dw[b]);
        _mm256_storeu_si256((__m256i *)(r->v + 32 * b), v);
        if (lanes)
            _mm256_storeu_si256((__m256i *)(r->corr + 8 * b), lane_corr(v));
        else
            r->corr[b] = block_corr(v);
    }
}

static size_t b32_scratch(int n) {
    return 2 * rp_align_up(b32_row_bytes(n), 64);
}

static inline __m512i bcast32(const void *p) {
    return _mm512_set1_epi32((int)load_u32(p));
}

/* lanes: acc[l] = fma(dw*dx, lane sum, acc[l]) per block; two rows at once */
static void b32_lanes_run(int n, int nr, const void *w, size_t ldw, const void *xp, int cnt,
                          float *y, size_t ldy, void *scratch, b32_values_fn values) {
    const int nb = n / 32, ng = (cnt + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
    const size_t gb = b32_group_bytes(n);
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const int rows = nr - r0 >= 2 ? 2 : 1;
        b32_row R[2];
        for (int i = 0; i < rows; i++) {
            R[i] = b32_carve(scratch, n, i);
            b32_prep(n, (const char *)w + (size_t)(r0 + i) * ldw, values, true, &R[i]);
        }
        if (rows == 1) R[1] = R[0];
        for (int g = 0; g < ng; g++) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)g * gb;
            __m512 a0[8], a1[8];
            UNROLL8
            for (int l = 0; l < 8; l++) a0[l] = a1[l] = _mm512_setzero_ps();
            for (int b = 0; b < nb; b++) {
                const __m512i *xu = (const __m512i *)(xg + (size_t)b * B32_BYTES);
                const __m512 dx = _mm512_load_ps((const float *)(xu + 8));
                const __m512 d0 = _mm512_mul_ps(_mm512_set1_ps(R[0].dw[b]), dx);
                const __m512 d1 = _mm512_mul_ps(_mm512_set1_ps(R[1].dw[b]), dx);
                const int8_t *v0 = R[0].v + 32 * b, *v1 = R[1].v + 32 * b;
                const int32_t *c0 = R[0].corr + 8 * b, *c1 = R[1].corr + 8 * b;
                UNROLL8
                for (int l = 0; l < 8; l++) {
                    const __m512i x = _mm512_load_si512(xu + l);
                    __m512i i0 =
                        _mm512_dpbusd_epi32(_mm512_set1_epi32(c0[l]), x, bcast32(v0 + 4 * l));
                    __m512i i1 =
                        _mm512_dpbusd_epi32(_mm512_set1_epi32(c1[l]), x, bcast32(v1 + 4 * l));
                    a0[l] = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(i0), a0[l]);
                    a1[l] = _mm512_fmadd_ps(d1, _mm512_cvtepi32_ps(i1), a1[l]);
                }
            }
            const int c =
                cnt - g * RP_GEMM_GROUP < RP_GEMM_GROUP ? cnt - g * RP_GEMM_GROUP : RP_GEMM_GROUP;
            float *yg = y + (size_t)g * RP_GEMM_GROUP * ldy + r0;
            store_tokens(yg, ldy, reduce8(a0), c);
            if (rows == 2) store_tokens(yg + 1, ldy, reduce8(a1), c);
        }
    }
}

/* rows: acc = fma((float)block sum, dw*dx, acc); two rows at once */
static void b32_rows_run(int n, int nr, const void *w, size_t ldw, const void *xp, int cnt,
                         float *y, size_t ldy, void *scratch, b32_values_fn values) {
    const int nb = n / 32, ng = (cnt + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
    const size_t gb = b32_group_bytes(n);
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const int rows = nr - r0 >= 2 ? 2 : 1;
        b32_row R[2];
        for (int i = 0; i < rows; i++) {
            R[i] = b32_carve(scratch, n, i);
            b32_prep(n, (const char *)w + (size_t)(r0 + i) * ldw, values, false, &R[i]);
        }
        if (rows == 1) R[1] = R[0];
        for (int g = 0; g < ng; g++) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)g * gb;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0;
            for (int b = 0; b < nb; b++) {
                const __m512i *xu = (const __m512i *)(xg + (size_t)b * B32_BYTES);
                const __m512 dx = _mm512_load_ps((const float *)(xu + 8));
                const int8_t *v0 = R[0].v + 32 * b, *v1 = R[1].v + 32 * b;
                __m512i i0 = _mm512_set1_epi32(R[0].corr[b]), i1 = _mm512_set1_epi32(R[1].corr[b]);
                __m512i j0 = _mm512_setzero_si512(), j1 = j0;
                UNROLL8
                for (int l = 0; l < 8; l += 2) {
                    const __m512i x0 = _mm512_load_si512(xu + l),
                                  x1 = _mm512_load_si512(xu + l + 1);
                    i0 = _mm512_dpbusd_epi32(i0, x0, bcast32(v0 + 4 * l));
                    i1 = _mm512_dpbusd_epi32(i1, x0, bcast32(v1 + 4 * l));
                    j0 = _mm512_dpbusd_epi32(j0, x1, bcast32(v0 + 4 * l + 4));
                    j1 = _mm512_dpbusd_epi32(j1, x1, bcast32(v1 + 4 * l + 4));
                }
                a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, j0)),
                                     _mm512_mul_ps(_mm512_set1_ps(R[0].dw[b]), dx), a0);
                a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i1, j1)),
                                     _mm512_mul_ps(_mm512_set1_ps(R[1].dw[b]), dx), a1);
            }
            const int c =
                cnt - g * RP_GEMM_GROUP < RP_GEMM_GROUP ? cnt - g * RP_GEMM_GROUP : RP_GEMM_GROUP;
            float *yg = y + (size_t)g * RP_GEMM_GROUP * ldy + r0;
            store_tokens(yg, ldy, a0, c);
            if (rows == 2) store_tokens(yg + 1, ldy, a1, c);
        }
    }
}

#define B32_GEMM(name, kind, valfn)                                                                \
    static void gemm_run_##name(int n, int nr, const void *w, size_t ldw, const void *xp,          \
                                size_t ldx, int cnt, float *y, size_t ldy, void *scratch) {        \
        (void)ldx;                                                                                 \
        b32_##kind##_run(n, nr, w, ldw, xp, cnt, y, ldy, scratch, valfn);                          \
    }                                                                                              \
    static const rp_gemm_ops gemm_##name = {b32_group_bytes, b32_pack, b32_scratch,                \
                                            gemm_run_##name};

B32_GEMM(q8_0, lanes, values_q8_0)
B32_GEMM(q5_0, lanes, values_q5_0)
B32_GEMM(q4_0, rows, values_q4_0)
B32_GEMM(iq4_nl, rows, values_iq4_nl)

/* ============================================================================
 * Blocks of 32 with Q8_1 activations: Q4_1, Q5_1 (lanes and a min term)
 *
 * vec_dot (kernels_avx2.c, llama.cpp's ggml_vec_dot_q4_1_q8_1 /
 * _q5_1_q8_1): per block acc[l] = fma(dw*dx, lane sum, acc[l]) and
 * summs = fma(m, s, summs), then hsum(acc) + summs. Here a register holds
 * one lane of 16 tokens, as for Q8_0; the weight values are unsigned (0..15,
 * 0..31), so they are vpdpbusd's unsigned operand as they are and the
 * activations its signed one: no offset, no correction. A tile of up to 3
 * rows shares every activation load; the min term is a second pass over the
 * blocks (one fma per block and row), which keeps it out of the registers
 * the lane accumulators need.
 * ========================================================================== */

/* Packed group, per block b (B32_BYTES):
 *   i8 xs[8][16][4]  lane l of token t: its 4 activation bytes
 *   f32 dx[16]       the token's block scale d
 *   f32 sx[16]       the token's s (fp16 d * sum of its 32 values) */
static void b32m_pack(int n, int cnt, const void *xq, size_t ldx, void *group) {
    const int nb = n / 32;
    uint8_t *g = group;
    for (int b = 0; b < nb; b++) {
        uint32_t *xs = (uint32_t *)(g + (size_t)b * B32_BYTES);
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

/* an unpacked row in scratch: values (32 unsigned bytes per block), d, m */
typedef struct b32m_row {
    const uint8_t *v;
    const float *dw, *mw;
} b32m_row;

typedef __m256i (*b32m_values_fn)(const void *row, int b, float *d, float *m);

static __m256i values_q4_1(const void *row, int b, float *d, float *m) {
    const block_q4_1 *x = (const block_q4_1 *)row + b;
    *d = f16(x->d);
    *m = f16(x->m);
    return nibbles32(x->qs);
}

static __m256i values_q5_1(const void *row, int b, float *d, float *m) {
    const block_q5_1 *x = (const block_q5_1 *)row + b;
    *d = f16(x->d);
    *m = f16(x->m);
    return _mm256_or_si256(nibbles32(x->qs),
                           _mm256_and_si256(bits32(x->qh), _mm256_set1_epi8(0x10)));
}

/* rows unpacked per pass over the token groups (a multiple of the tile) */
#define B32M_ROWS 6

static size_t b32m_row_bytes(int n) {
    return rp_align_up((size_t)(n / 32) * (32 + 4 + 4), 64);
}

static size_t b32m_scratch(int n) {
    return B32M_ROWS * b32m_row_bytes(n);
}

static b32m_row b32m_prep(int n, const void *row, b32m_values_fn values, uint8_t *p) {
    const int nb = n / 32;
    float *dw = (float *)(p + (size_t)nb * 32), *mw = dw + nb;
    for (int b = 0; b < nb; b++)
        _mm256_storeu_si256((__m256i *)(p + 32 * b), values(row, b, &dw[b], &mw[b]));
    return (b32m_row){p, dw, mw};
}

/* nr (1..3) rows against one group of 16 tokens, c of them stored */
static inline __attribute__((always_inline)) void
b32m_tile(int nb, const b32m_row *R, int nr, const uint8_t *xg, float *y, size_t ldy, int c) {
    __m512 acc[3][8];
    UNROLL8
    for (int l = 0; l < 8; l++) acc[0][l] = acc[1][l] = acc[2][l] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const __m512i *xs = (const __m512i *)(xg + (size_t)b * B32_BYTES);
        const __m512 dx = _mm512_load_ps((const float *)(xs + 8));
        __m512 d[3];
        UNROLL3
        for (int r = 0; r < nr; r++) d[r] = _mm512_mul_ps(_mm512_set1_ps(R[r].dw[b]), dx);
        UNROLL8
        for (int l = 0; l < 8; l++) {
            const __m512i x = _mm512_load_si512(xs + l);
            UNROLL3
            for (int r = 0; r < nr; r++) {
                const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                      bcast32(R[r].v + 32 * b + 4 * l), x);
                acc[r][l] = _mm512_fmadd_ps(d[r], _mm512_cvtepi32_ps(s), acc[r][l]);
            }
        }
    }
    for (int r = 0; r < nr; r++) {
        __m512 summs = _mm512_setzero_ps();
        for (int b = 0; b < nb; b++)
            summs = _mm512_fmadd_ps(
                _mm512_set1_ps(R[r].mw[b]),
                _mm512_load_ps((const float *)(xg + (size_t)b * B32_BYTES) + 144), summs);
        store_tokens(y + r, ldy, _mm512_add_ps(reduce8(acc[r]), summs), c);
    }
}

static void b32m_run(int n, int nr, const void *w, size_t ldw, const void *xp, int cnt, float *y,
                     size_t ldy, void *scratch, b32m_values_fn values) {
    const int nb = n / 32, ng = (cnt + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
    const size_t gb = b32_group_bytes(n), rb = b32m_row_bytes(n);
    for (int r0 = 0; r0 < nr; r0 += B32M_ROWS) {
        const int rows = nr - r0 < B32M_ROWS ? nr - r0 : B32M_ROWS;
        b32m_row R[B32M_ROWS];
        for (int i = 0; i < rows; i++)
            R[i] = b32m_prep(n, (const char *)w + (size_t)(r0 + i) * ldw, values,
                             (uint8_t *)scratch + (size_t)i * rb);
        for (int g = 0; g < ng; g++) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)g * gb;
            const int c =
                cnt - g * RP_GEMM_GROUP < RP_GEMM_GROUP ? cnt - g * RP_GEMM_GROUP : RP_GEMM_GROUP;
            float *yg = y + (size_t)g * RP_GEMM_GROUP * ldy + r0;
            int r = 0;
            for (; r + 3 <= rows; r += 3) b32m_tile(nb, R + r, 3, xg, yg + r, ldy, c);
            if (rows - r == 2)
                b32m_tile(nb, R + r, 2, xg, yg + r, ldy, c);
            else if (rows - r == 1)
                b32m_tile(nb, R + r, 1, xg, yg + r, ldy, c);
        }
    }
}

#define B32M_GEMM(name)                                                                            \
    static void gemm_run_##name(int n, int nr, const void *w, size_t ldw, const void *xp,          \
                                size_t ldx, int cnt, float *y, size_t ldy, void *scratch) {        \
        (void)ldx;                                                                                 \
        b32m_run(n, nr, w, ldw, xp, cnt, y, ldy, scratch, values_##name);                          \
    }                                                                                              \
    static const rp_gemm_ops gemm_##name = {b32_group_bytes, b32m_pack, b32m_scratch,              \
                                            gemm_run_##name};

B32M_GEMM(q4_1)
B32M_GEMM(q5_1)

/* ---- matrix x vector, 32-blocks ----------------------------------------- */

/* Q8_0 (lanes), two rows per register: [row r block b | row r+1 block b] as
 * unsigned (w + 128) against the activation block duplicated in both halves;
 * the correction is -128 * (sum of each lane's activations). */
static void gemv_q8_0(int n, int nr, const void *w, size_t ldw, const void *x, float *y) {
    const int nb = n / 32;
    const block_q8_0 *xb = x;
    int r = 0;
    for (; r + 2 <= nr; r += 2) {
        const block_q8_0 *w0 = (const block_q8_0 *)((const char *)w + (size_t)r * ldw);
        const block_q8_0 *w1 = (const block_q8_0 *)((const char *)w + (size_t)(r + 1) * ldw);
        __m512 acc = _mm512_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const __m256i xv = _mm256_loadu_si256((const __m256i *)xb[b].qs);
            const __m512i xx = _mm512_inserti64x4(_mm512_castsi256_si512(xv), xv, 1);
            /* sum of each lane's activations, times -128 */
            const __m256i xs = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), xv);
            const __m256i cr = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(xs, 7));
            const __m512i corr = _mm512_inserti64x4(_mm512_castsi256_si512(cr), cr, 1);
            __m512i wv = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)w0[b].qs)),
                _mm256_loadu_si256((const __m256i *)w1[b].qs), 1);
            wv = _mm512_xor_si512(wv, _mm512_set1_epi8((char)0x80));
            const __m512i s = _mm512_dpbusd_epi32(corr, wv, xx);
            const float dx = f16(xb[b].d);
            const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(f16(w0[b].d) * dx),
                                                _mm256_set1_ps(f16(w1[b].d) * dx), 1);
            acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
        }
        y[r] = hsum256(_mm512_castps512_ps256(acc));
        y[r + 1] = hsum256(_mm512_extractf32x8_ps(acc, 1));
    }
    for (; r < nr; r++) {
        const block_q8_0 *w0 = (const block_q8_0 *)((const char *)w + (size_t)r * ldw);
        __m256 acc = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const __m256i xv = _mm256_loadu_si256((const __m256i *)xb[b].qs);
            const __m256i xs = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), xv);
            const __m256i cr = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(xs, 7));
            __m256i wv = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)w0[b].qs),
                                          _mm256_set1_epi8((char)0x80));
            const __m256i s = _mm256_dpbusd_epi32(cr, wv, xv);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(w0[b].d) * f16(xb[b].d)),
                                  _mm256_cvtepi32_ps(s), acc);
        }
        y[r] = hsum256(acc);
    }
}

/* ============================================================================
 * K-quants with Q8_K activations
 * ========================================================================== */

/* Packed group, per super-block (4928 bytes):
 *   u32 xu[8][8][16]  chunk c (32 elements), lane l, token t: 4 bytes + 128
 *   f32 dx[16]
 *   u32 s32[4][16]    int16 pairs (S_2p, S_2p+1), S_j = sum of group j of 32
 *   u32 s16[8][16]    int16 pairs (bsums_2p, bsums_2p+1), groups of 16 */
#define KS_BYTES 4928
#define KS_DX    4096
#define KS_S32   4160
#define KS_S16   4416

static size_t ks_group_bytes(int n) {
    return (size_t)(n / QK_K) * KS_BYTES;
}

static inline uint32_t pair16(int a, int b) {
    return (uint32_t)(uint16_t)a | (uint32_t)(uint16_t)b << 16;
}

static void ks_pack(int n, int cnt, const void *xq, size_t ldx, void *group) {
    const int nsb = n / QK_K;
    for (int sb = 0; sb < nsb; sb++) {
        uint8_t *g = (uint8_t *)group + (size_t)sb * KS_BYTES;
        uint32_t *xu = (uint32_t *)g, *s32 = (uint32_t *)(g + KS_S32),
                 *s16 = (uint32_t *)(g + KS_S16);
        float *dx = (float *)(g + KS_DX);
        for (int t = 0; t < RP_GEMM_GROUP; t++) {
            if (t >= cnt) {
                for (int i = 0; i < 64; i++) xu[i * 16 + t] = 0x80808080u;
                dx[t] = 0.0f;
                for (int p = 0; p < 4; p++) s32[p * 16 + t] = 0;
                for (int p = 0; p < 8; p++) s16[p * 16 + t] = 0;
                continue;
            }
            const block_q8_K *x = (const block_q8_K *)((const char *)xq + (size_t)t * ldx) + sb;
            for (int i = 0; i < 64; i++) xu[i * 16 + t] = load_u32(x->qs + 4 * i) ^ 0x80808080u;
            dx[t] = x->d;
            for (int p = 0; p < 4; p++)
                s32[p * 16 + t] = pair16(x->bsums[4 * p] + x->bsums[4 * p + 1],
                                         x->bsums[4 * p + 2] + x->bsums[4 * p + 3]);
            for (int p = 0; p < 8; p++)
                s16[p * 16 + t] = pair16(x->bsums[2 * p], x->bsums[2 * p + 1]);
        }
    }
}

/* An unpacked super-block of one row. */
typedef struct ks_sb {
    int8_t v[QK_K];  /* signed values, element order */
    uint32_t sc[16]; /* int16 pair (s, s): scale of chunk c, half h at [2c + h] */
    uint32_t mn[8];  /* int16 pairs of mins (over s32 pairs: 4, over s16 pairs: 8) */
    int32_t corr[8]; /* -128 * weighted value sums: per lane ("lanes") or [0] ("rows") */
    float dw, dmin;
    uint8_t pad[56];
} ks_sb;
static_assert(sizeof(ks_sb) % 64 == 0, "ks_sb alignment");

typedef void (*ks_prep_fn)(const void *row, int sb, ks_sb *o);

/* Corrections from values and per-half scales (scale(c, h) in o->sc):
 * lane sums of 4 values by vpdpbusd against ones, times the half's scale. */
static void ks_corr(ks_sb *o, bool lanes) {
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 8; c++) {
        const __m256i s4 =
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1),
                                _mm256_loadu_si256((const __m256i *)(o->v + 32 * c)));
        const int s0 = (int16_t)(o->sc[2 * c] & 0xFFFF), s1 = (int16_t)(o->sc[2 * c + 1] & 0xFFFF);
        acc = _mm256_add_epi32(
            acc, _mm256_mullo_epi32(s4, _mm256_setr_epi32(s0, s0, s0, s0, s1, s1, s1, s1)));
    }
    acc = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(acc, 7));
    if (lanes) {
        _mm256_storeu_si256((__m256i *)o->corr, acc);
    } else {
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        o->corr[0] = _mm_cvtsi128_si32(h);
    }
}

static inline void k4_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    uint32_t u[4];
    memcpy(u, s, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t aux = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = aux;
    u[0] &= 0x3f3f3f3fu;
    memcpy(sc, u, 8);
    memcpy(mn, u + 2, 8);
}

static void prep_q4_K(const void *row, int sb, ks_sb *o) {
    const block_q4_K *x = (const block_q4_K *)row + sb;
    uint8_t sc[8], mn[8];
    k4_scales(x->scales, sc, mn);
    for (int c = 0; c < 4; c++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
        _mm256_storeu_si256((__m256i *)(o->v + 64 * c),
                            _mm256_and_si256(raw, _mm256_set1_epi8(0xF)));
        _mm256_storeu_si256((__m256i *)(o->v + 64 * c + 32),
                            _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0xF)));
    }
    for (int c = 0; c < 8; c++) o->sc[2 * c] = o->sc[2 * c + 1] = pair16(sc[c], sc[c]);
    for (int p = 0; p < 4; p++) o->mn[p] = pair16(mn[2 * p], mn[2 * p + 1]);
    o->dw = f16(x->d);
    o->dmin = f16(x->dmin);
    ks_corr(o, false);
}

static void prep_q5_K(const void *row, int sb, ks_sb *o) {
    const block_q5_K *x = (const block_q5_K *)row + sb;
    uint8_t sc[8], mn[8];
    k4_scales(x->scales, sc, mn);
    const __m256i hb = _mm256_loadu_si256((const __m256i *)x->qh);
    for (int c = 0; c < 4; c++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
        __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), _mm256_set1_epi8(1));
        __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), _mm256_set1_epi8(1));
        _mm256_storeu_si256((__m256i *)(o->v + 64 * c),
                            _mm256_or_si256(_mm256_and_si256(raw, _mm256_set1_epi8(0xF)),
                                            _mm256_slli_epi16(h0, 4)));
        _mm256_storeu_si256(
            (__m256i *)(o->v + 64 * c + 32),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0xF)),
                            _mm256_slli_epi16(h1, 4)));
    }
    for (int c = 0; c < 8; c++) o->sc[2 * c] = o->sc[2 * c + 1] = pair16(sc[c], sc[c]);
    for (int p = 0; p < 4; p++) o->mn[p] = pair16(mn[2 * p], mn[2 * p + 1]);
    o->dw = f16(x->d);
    o->dmin = f16(x->dmin);
    ks_corr(o, true);
}

static void prep_q6_K(const void *row, int sb, ks_sb *o) {
    const block_q6_K *x = (const block_q6_K *)row + sb;
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                               _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
        q[1] =
            _mm256_or_si256(_mm256_and_si256(l1, m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4));
        q[2] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4));
        q[3] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4));
        for (int k = 0; k < 4; k++) _mm256_storeu_si256((__m256i *)(o->v + 128 * h + 32 * k), q[k]);
    }
    /* unsigned values: the offset 32 comes per lane from the 16-group sums */
    for (int g = 0; g < 16; g++) o->sc[g] = pair16(x->scales[g], x->scales[g]);
    memset(o->mn, 0, sizeof o->mn);
    o->dw = f16(x->d);
    o->dmin = 0;
    ks_corr(o, true);
}

static void prep_q3_K(const void *row, int sb, ks_sb *o) {
    const block_q3_K *x = (const block_q3_K *)row + sb;
    for (int e = 0; e < QK_K; e++) {
        const int h = e / 128, k = (e % 128) / 32, l = e % 32;
        o->v[e] = (int8_t)(((x->qs[32 * h + l] >> (2 * k)) & 3) -
                           ((x->hmask[l] >> (e / 32)) & 1 ? 0 : 4));
    }
    for (int g = 0; g < 16; g++) {
        const int s = rp_q3k_scale(g, x->scales);
        o->sc[g] = pair16(s, s);
    }
    memset(o->mn, 0, sizeof o->mn);
    o->dw = f16(x->d);
    o->dmin = 0;
    ks_corr(o, true);
}

static void prep_q2_K(const void *row, int sb, ks_sb *o) {
    const block_q2_K *x = (const block_q2_K *)row + sb;
    for (int h = 0; h < 2; h++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
        for (int k = 0; k < 4; k++)
            _mm256_storeu_si256(
                (__m256i *)(o->v + 128 * h + 32 * k),
                _mm256_and_si256(_mm256_srli_epi16(raw, 2 * k), _mm256_set1_epi8(3)));
    }
    for (int g = 0; g < 16; g++) o->sc[g] = pair16(x->scales[g] & 0xF, x->scales[g] & 0xF);
    for (int p = 0; p < 8; p++) o->mn[p] = pair16(x->scales[2 * p] >> 4, x->scales[2 * p + 1] >> 4);
    o->dw = f16(x->d);
    o->dmin = f16(x->dmin);
    ks_corr(o, false);
}

static size_t ks_scratch(int n) {
    return 2 * (size_t)(n / QK_K) * sizeof(ks_sb) + 64;
}

static inline ks_sb *ks_rows(void *scratch) {
    return (ks_sb *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
}

/* "lanes" K-quants (Q3_K, Q5_K, Q6_K): per super-block and lane,
 * acc[l] = fma(dx*dw, lane sum, acc[l]); with_min adds Q5_K's
 * summs = fma(-dx*dmin, min sum, summs) after the reduction; off32 (Q6_K)
 * subtracts 32 * (sc[2l] bsums[2l] + sc[2l+1] bsums[2l+1]) from lane l. */
static void ks_lanes_run_off(int n, int nr, const void *w, size_t ldw, const void *xp, int cnt,
                             float *y, size_t ldy, void *scratch, ks_prep_fn prep, bool with_min,
                             bool off32) {
    const int nsb = n / QK_K, ng = (cnt + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
    const size_t gb = ks_group_bytes(n);
    ks_sb *rows = ks_rows(scratch);
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const int nrow = nr - r0 >= 2 ? 2 : 1;
        ks_sb *R[2] = {rows, rows + nsb};
        for (int i = 0; i < nrow; i++)
            for (int sb = 0; sb < nsb; sb++)
                prep((const char *)w + (size_t)(r0 + i) * ldw, sb, &R[i][sb]);
        if (nrow == 1) R[1] = R[0];
        for (int g = 0; g < ng; g++) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)g * gb;
            __m512 f0[8], f1[8], m0 = _mm512_setzero_ps(), m1 = m0;
            UNROLL8
            for (int l = 0; l < 8; l++) f0[l] = f1[l] = _mm512_setzero_ps();
            for (int sb = 0; sb < nsb; sb++) {
                const uint8_t *xs = xg + (size_t)sb * KS_BYTES;
                const __m512i *xu = (const __m512i *)xs;
                const ks_sb *a = &R[0][sb], *b = &R[1][sb];
                __m512i i0[8], i1[8];
                UNROLL8
                for (int l = 0; l < 8; l++) {
                    i0[l] = _mm512_set1_epi32(a->corr[l]);
                    i1[l] = _mm512_set1_epi32(b->corr[l]);
                }
                for (int c = 0; c < 8; c++) {
                    const __m512i sa0 = _mm512_set1_epi32((int)a->sc[2 * c]),
                                  sa1 = _mm512_set1_epi32((int)a->sc[2 * c + 1]);
                    const __m512i sb0 = _mm512_set1_epi32((int)b->sc[2 * c]),
                                  sb1 = _mm512_set1_epi32((int)b->sc[2 * c + 1]);
                    UNROLL8
                    for (int l = 0; l < 8; l++) {
                        const __m512i x = _mm512_load_si512(xu + 8 * c + l);
                        const __m512i pa = _mm512_maddubs_epi16(x, bcast32(a->v + 32 * c + 4 * l));
                        const __m512i pb = _mm512_maddubs_epi16(x, bcast32(b->v + 32 * c + 4 * l));
                        i0[l] = _mm512_dpwssd_epi32(i0[l], pa, l < 4 ? sa0 : sa1);
                        i1[l] = _mm512_dpwssd_epi32(i1[l], pb, l < 4 ? sb0 : sb1);
                    }
                }
                if (off32) {
                    const __m512i *s16 = (const __m512i *)(xs + KS_S16);
                    UNROLL8
                    for (int l = 0; l < 8; l++) {
                        const __m512i bs = _mm512_load_si512(s16 + l);
                        const int pa = (int)((a->sc[2 * l] & 0xFFFF) | a->sc[2 * l + 1] << 16),
                                  pb = (int)((b->sc[2 * l] & 0xFFFF) | b->sc[2 * l + 1] << 16);
                        i0[l] = _mm512_sub_epi32(
                            i0[l], _mm512_slli_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), bs,
                                                                         _mm512_set1_epi32(pa)),
                                                     5));
                        i1[l] = _mm512_sub_epi32(
                            i1[l], _mm512_slli_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), bs,
                                                                         _mm512_set1_epi32(pb)),
                                                     5));
                    }
                }
                const __m512 dx = _mm512_load_ps((const float *)(xs + KS_DX));
                const __m512 d0 = _mm512_mul_ps(dx, _mm512_set1_ps(a->dw)),
                             d1 = _mm512_mul_ps(dx, _mm512_set1_ps(b->dw));
                UNROLL8
                for (int l = 0; l < 8; l++) {
                    f0[l] = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(i0[l]), f0[l]);
                    f1[l] = _mm512_fmadd_ps(d1, _mm512_cvtepi32_ps(i1[l]), f1[l]);
                }
                if (with_min) {
                    const __m512i *s32 = (const __m512i *)(xs + KS_S32);
                    __m512i t0 = _mm512_setzero_si512(), t1 = t0;
                    UNROLL8
                    for (int p = 0; p < 4; p++) {
                        t0 = _mm512_dpwssd_epi32(t0, _mm512_load_si512(s32 + p),
                                                 _mm512_set1_epi32((int)a->mn[p]));
                        t1 = _mm512_dpwssd_epi32(t1, _mm512_load_si512(s32 + p),
                                                 _mm512_set1_epi32((int)b->mn[p]));
                    }
                    const __m512 ndx = _mm512_xor_ps(dx, _mm512_set1_ps(-0.0f));
                    m0 = _mm512_fmadd_ps(_mm512_mul_ps(ndx, _mm512_set1_ps(a->dmin)),
                                         _mm512_cvtepi32_ps(t0), m0);
                    m1 = _mm512_fmadd_ps(_mm512_mul_ps(ndx, _mm512_set1_ps(b->dmin)),
                                         _mm512_cvtepi32_ps(t1), m1);
                }
            }
            const int c =
                cnt - g * RP_GEMM_GROUP < RP_GEMM_GROUP ? cnt - g * RP_GEMM_GROUP : RP_GEMM_GROUP;
            float *yg = y + (size_t)g * RP_GEMM_GROUP * ldy + r0;
            __m512 r = reduce8(f0);
            store_tokens(yg, ldy, with_min ? _mm512_add_ps(r, m0) : r, c);
            if (nrow == 2) {
                r = reduce8(f1);
                store_tokens(yg + 1, ldy, with_min ? _mm512_add_ps(r, m1) : r, c);
            }
        }
    }
}

/* Q3_K, Q5_K in llama.cpp's tiled order (kernels_ref.c, tiled_step): per
 * super-block the lanes' integer sums added into one exact s, r = (float)s *
 * dw, with_min: r = fma(-dmin, (float)m, r), then acc = fma(r, dx, acc). */
static void ks_tiled_run(int n, int nr, const void *w, size_t ldw, const void *xp, int cnt,
                         float *y, size_t ldy, void *scratch, ks_prep_fn prep, bool with_min) {
    const int nsb = n / QK_K, ng = (cnt + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
    const size_t gb = ks_group_bytes(n);
    ks_sb *rows = ks_rows(scratch);
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const int nrow = nr - r0 >= 2 ? 2 : 1;
        ks_sb *R[2] = {rows, rows + nsb};
        for (int i = 0; i < nrow; i++)
            for (int sb = 0; sb < nsb; sb++)
                prep((const char *)w + (size_t)(r0 + i) * ldw, sb, &R[i][sb]);
        if (nrow == 1) R[1] = R[0];
        for (int g = 0; g < ng; g++) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)g * gb;
            __m512 f0 = _mm512_setzero_ps(), f1 = f0;
            for (int sb = 0; sb < nsb; sb++) {
                const uint8_t *xs = xg + (size_t)sb * KS_BYTES;
                const __m512i *xu = (const __m512i *)xs;
                const ks_sb *a = &R[0][sb], *b = &R[1][sb];
                __m512i i0[8], i1[8];
                UNROLL8
                for (int l = 0; l < 8; l++) {
                    i0[l] = _mm512_set1_epi32(a->corr[l]);
                    i1[l] = _mm512_set1_epi32(b->corr[l]);
                }
                for (int c = 0; c < 8; c++) {
                    const __m512i sa0 = _mm512_set1_epi32((int)a->sc[2 * c]),
                                  sa1 = _mm512_set1_epi32((int)a->sc[2 * c + 1]);
                    const __m512i sb0 = _mm512_set1_epi32((int)b->sc[2 * c]),
                                  sb1 = _mm512_set1_epi32((int)b->sc[2 * c + 1]);
                    UNROLL8
                    for (int l = 0; l < 8; l++) {
                        const __m512i x = _mm512_load_si512(xu + 8 * c + l);
                        const __m512i pa = _mm512_maddubs_epi16(x, bcast32(a->v + 32 * c + 4 * l));
                        const __m512i pb = _mm512_maddubs_epi16(x, bcast32(b->v + 32 * c + 4 * l));
                        i0[l] = _mm512_dpwssd_epi32(i0[l], pa, l < 4 ? sa0 : sa1);
                        i1[l] = _mm512_dpwssd_epi32(i1[l], pb, l < 4 ? sb0 : sb1);
                    }
                }
                const __m512 dx = _mm512_load_ps((const float *)(xs + KS_DX));
                __m512i s0 = i0[0], s1 = i1[0];
                for (int l = 1; l < 8; l++) {
                    s0 = _mm512_add_epi32(s0, i0[l]);
                    s1 = _mm512_add_epi32(s1, i1[l]);
                }
                __m512 v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(s0), _mm512_set1_ps(a->dw)),
                       v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(s1), _mm512_set1_ps(b->dw));
                if (with_min) {
                    const __m512i *s32 = (const __m512i *)(xs + KS_S32);
                    __m512i t0 = _mm512_setzero_si512(), t1 = t0;
                    UNROLL8
                    for (int p = 0; p < 4; p++) {
                        t0 = _mm512_dpwssd_epi32(t0, _mm512_load_si512(s32 + p),
                                                 _mm512_set1_epi32((int)a->mn[p]));
                        t1 = _mm512_dpwssd_epi32(t1, _mm512_load_si512(s32 + p),
                                                 _mm512_set1_epi32((int)b->mn[p]));
                    }
                    v0 = _mm512_fnmadd_ps(_mm512_set1_ps(a->dmin), _mm512_cvtepi32_ps(t0), v0);
                    v1 = _mm512_fnmadd_ps(_mm512_set1_ps(b->dmin), _mm512_cvtepi32_ps(t1), v1);
                }
                f0 = _mm512_fmadd_ps(v0, dx, f0);
                f1 = _mm512_fmadd_ps(v1, dx, f1);
            }
            const int c =
                cnt - g * RP_GEMM_GROUP < RP_GEMM_GROUP ? cnt - g * RP_GEMM_GROUP : RP_GEMM_GROUP;
            float *yg = y + (size_t)g * RP_GEMM_GROUP * ldy + r0;
            store_tokens(yg, ldy, f0, c);
            if (nrow == 2) store_tokens(yg + 1, ldy, f1, c);
        }
    }
}

/* "rows" K-quants (Q2_K, Q4_K): per super-block acc = fma(sum, dw*dx, acc),
 * accm = fma(min sum, dmin*dx, accm); result acc - accm. n_min pairs come
 * from the 32-groups (4) or the 16-groups (8). */
static void ks_rows_run(int n, int nr, const void *w, size_t ldw, const void *xp, int cnt, float *y,
                        size_t ldy, void *scratch, ks_prep_fn prep, int n_min) {
    const int nsb = n / QK_K, ng = (cnt + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
    const size_t gb = ks_group_bytes(n);
    ks_sb *rows = ks_rows(scratch);
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const int nrow = nr - r0 >= 2 ? 2 : 1;
        ks_sb *R[2] = {rows, rows + nsb};
        for (int i = 0; i < nrow; i++)
            for (int sb = 0; sb < nsb; sb++)
                prep((const char *)w + (size_t)(r0 + i) * ldw, sb, &R[i][sb]);
        if (nrow == 1) R[1] = R[0];
        for (int g = 0; g < ng; g++) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)g * gb;
            __m512 f0 = _mm512_setzero_ps(), f1 = f0, m0 = f0, m1 = f0;
            for (int sb = 0; sb < nsb; sb++) {
                const uint8_t *xs = xg + (size_t)sb * KS_BYTES;
                const __m512i *xu = (const __m512i *)xs;
                const ks_sb *a = &R[0][sb], *b = &R[1][sb];
                __m512i i0[4], i1[4];
                i0[0] = _mm512_set1_epi32(a->corr[0]);
                i1[0] = _mm512_set1_epi32(b->corr[0]);
                UNROLL8
                for (int k = 1; k < 4; k++) i0[k] = i1[k] = _mm512_setzero_si512();
                for (int c = 0; c < 8; c++) {
                    const __m512i sa0 = _mm512_set1_epi32((int)a->sc[2 * c]),
                                  sa1 = _mm512_set1_epi32((int)a->sc[2 * c + 1]);
                    const __m512i sb0 = _mm512_set1_epi32((int)b->sc[2 * c]),
                                  sb1 = _mm512_set1_epi32((int)b->sc[2 * c + 1]);
                    UNROLL8
                    for (int l = 0; l < 8; l++) {
                        const __m512i x = _mm512_load_si512(xu + 8 * c + l);
                        const __m512i pa = _mm512_maddubs_epi16(x, bcast32(a->v + 32 * c + 4 * l));
                        const __m512i pb = _mm512_maddubs_epi16(x, bcast32(b->v + 32 * c + 4 * l));
                        i0[l & 3] = _mm512_dpwssd_epi32(i0[l & 3], pa, l < 4 ? sa0 : sa1);
                        i1[l & 3] = _mm512_dpwssd_epi32(i1[l & 3], pb, l < 4 ? sb0 : sb1);
                    }
                }
                const __m512i *mp = (const __m512i *)(xs + (n_min == 4 ? KS_S32 : KS_S16));
                __m512i t0 = _mm512_setzero_si512(), t1 = t0;
                UNROLL8
                for (int p = 0; p < n_min; p++) {
                    t0 = _mm512_dpwssd_epi32(t0, _mm512_load_si512(mp + p),
                                             _mm512_set1_epi32((int)a->mn[p]));
                    t1 = _mm512_dpwssd_epi32(t1, _mm512_load_si512(mp + p),
                                             _mm512_set1_epi32((int)b->mn[p]));
                }
                const __m512i s0 = _mm512_add_epi32(_mm512_add_epi32(i0[0], i0[1]),
                                                    _mm512_add_epi32(i0[2], i0[3]));
                const __m512i s1 = _mm512_add_epi32(_mm512_add_epi32(i1[0], i1[1]),
                                                    _mm512_add_epi32(i1[2], i1[3]));
                const __m512 dx = _mm512_load_ps((const float *)(xs + KS_DX));
                f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0),
                                     _mm512_mul_ps(_mm512_set1_ps(a->dw), dx), f0);
                f1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1),
                                     _mm512_mul_ps(_mm512_set1_ps(b->dw), dx), f1);
                m0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t0),
                                     _mm512_mul_ps(_mm512_set1_ps(a->dmin), dx), m0);
                m1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t1),
                                     _mm512_mul_ps(_mm512_set1_ps(b->dmin), dx), m1);
            }
            const int c =
                cnt - g * RP_GEMM_GROUP < RP_GEMM_GROUP ? cnt - g * RP_GEMM_GROUP : RP_GEMM_GROUP;
            float *yg = y + (size_t)g * RP_GEMM_GROUP * ldy + r0;
            store_tokens(yg, ldy, _mm512_sub_ps(f0, m0), c);
            if (nrow == 2) store_tokens(yg + 1, ldy, _mm512_sub_ps(f1, m1), c);
        }
    }
}

/* IQ4_XS in llama.cpp's tiled order (vec_dot_iq4_xs_ref): per super-block
 * the exact integer sum s = sum over the 32-groups of (ls - 32) * (values .
 * activations), then acc = fma((float)s * dw, dx, acc). Its values reach
 * -127..113, so the +128-offset activations go through vpdpbusd (no int16
 * saturation): per group one running int32 sum, times the group's scale. */
static void prep_iq4_xs(const void *row, int sb, ks_sb *o) {
    const block_iq4_xs *x = (const block_iq4_xs *)row + sb;
    const __m128i lut = _mm_loadu_si128((const __m128i *)rp_kvalues_iq4nl);
    for (int ib = 0; ib < 8; ib++) {
        const __m128i q = _mm_loadu_si128((const __m128i *)(x->qs + 16 * ib));
        _mm_storeu_si128((__m128i *)(o->v + 32 * ib),
                         _mm_shuffle_epi8(lut, _mm_and_si128(q, _mm_set1_epi8(0xF))));
        _mm_storeu_si128(
            (__m128i *)(o->v + 32 * ib + 16),
            _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0xF))));
        const int ls = (((x->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                        (((x->scales_h >> (2 * ib)) & 3) << 4)) -
                       32;
        o->sc[2 * ib] = o->sc[2 * ib + 1] = pair16(ls, ls);
    }
    memset(o->mn, 0, sizeof o->mn);
    o->dw = f16(x->d);
    o->dmin = 0;
    ks_corr(o, false);
}

static void ks_iq4_xs_run(int n, int nr, const void *w, size_t ldw, const void *xp, int cnt,
                          float *y, size_t ldy, void *scratch) {
    const int nsb = n / QK_K, ng = (cnt + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
    const size_t gb = ks_group_bytes(n);
    ks_sb *rows = ks_rows(scratch);
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const int nrow = nr - r0 >= 2 ? 2 : 1;
        ks_sb *R[2] = {rows, rows + nsb};
        for (int i = 0; i < nrow; i++)
            for (int sb = 0; sb < nsb; sb++)
                prep_iq4_xs((const char *)w + (size_t)(r0 + i) * ldw, sb, &R[i][sb]);
        if (nrow == 1) R[1] = R[0];
        for (int g = 0; g < ng; g++) {
            const uint8_t *xg = (const uint8_t *)xp + (size_t)g * gb;
            __m512 f0 = _mm512_setzero_ps(), f1 = f0;
            for (int sb = 0; sb < nsb; sb++) {
                const uint8_t *xs = xg + (size_t)sb * KS_BYTES;
                const __m512i *xu = (const __m512i *)xs;
                const ks_sb *a = &R[0][sb], *b = &R[1][sb];
                __m512i s0 = _mm512_set1_epi32(a->corr[0]), s1 = _mm512_set1_epi32(b->corr[0]);
                for (int c = 0; c < 8; c++) {
                    /* two chains per row: vpdpbusd's latency, not its rate, bound one */
                    __m512i t0[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()}, t1[2];
                    t1[0] = t1[1] = t0[0];
                    UNROLL8
                    for (int l = 0; l < 8; l++) {
                        const __m512i x = _mm512_load_si512(xu + 8 * c + l);
                        t0[l & 1] =
                            _mm512_dpbusd_epi32(t0[l & 1], x, bcast32(a->v + 32 * c + 4 * l));
                        t1[l & 1] =
                            _mm512_dpbusd_epi32(t1[l & 1], x, bcast32(b->v + 32 * c + 4 * l));
                    }
                    s0 = _mm512_add_epi32(
                        s0,
                        _mm512_mullo_epi32(_mm512_add_epi32(t0[0], t0[1]),
                                           _mm512_set1_epi32((int16_t)(a->sc[2 * c] & 0xFFFF))));
                    s1 = _mm512_add_epi32(
                        s1,
                        _mm512_mullo_epi32(_mm512_add_epi32(t1[0], t1[1]),
                                           _mm512_set1_epi32((int16_t)(b->sc[2 * c] & 0xFFFF))));
                }
                const __m512 dx = _mm512_load_ps((const float *)(xs + KS_DX));
                f0 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s0), _mm512_set1_ps(a->dw)),
                                     dx, f0);
                f1 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s1), _mm512_set1_ps(b->dw)),
                                     dx, f1);
            }
            const int c =
                cnt - g * RP_GEMM_GROUP < RP_GEMM_GROUP ? cnt - g * RP_GEMM_GROUP : RP_GEMM_GROUP;
            float *yg = y + (size_t)g * RP_GEMM_GROUP * ldy + r0;
            store_tokens(yg, ldy, f0, c);
            if (nrow == 2) store_tokens(yg + 1, ldy, f1, c);
        }
    }
}

#define KS_GEMM(name, body)                                                                        \
    static void gemm_run_##name(int n, int nr, const void *w, size_t ldw, const void *xp,          \
                                size_t ldx, int cnt, float *y, size_t ldy, void *scratch) {        \
        (void)ldx;                                                                                 \
        body;                                                                                      \
    }                                                                                              \
    static const rp_gemm_ops gemm_##name = {ks_group_bytes, ks_pack, ks_scratch, gemm_run_##name};

KS_GEMM(q2_K, ks_rows_run(n, nr, w, ldw, xp, cnt, y, ldy, scratch, prep_q2_K, 8))
KS_GEMM(q4_K, ks_rows_run(n, nr, w, ldw, xp, cnt, y, ldy, scratch, prep_q4_K, 4))
KS_GEMM(q3_K, ks_tiled_run(n, nr, w, ldw, xp, cnt, y, ldy, scratch, prep_q3_K, false))
KS_GEMM(q5_K, ks_tiled_run(n, nr, w, ldw, xp, cnt, y, ldy, scratch, prep_q5_K, true))
KS_GEMM(iq4_xs, ks_iq4_xs_run(n, nr, w, ldw, xp, cnt, y, ldy, scratch))
KS_GEMM(q6_K, ks_lanes_run_off(n, nr, w, ldw, xp, cnt, y, ldy, scratch, prep_q6_K, false, true))

/* ---- matrix x vector, K-quants --------------------------------------------- */

static inline int32_t hsum_i32x16(__m512i v) {
    __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    q = _mm_add_epi32(q, _mm_unpackhi_epi64(q, q));
    q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0xB1));
    return _mm_cvtsi128_si32(q);
}

/* [a x 16 | b x 16] as int16 */
static inline __m512i scale_pair16(int a, int b) {
    return _mm512_inserti64x4(_mm512_set1_epi16((short)a), _mm256_set1_epi16((short)b), 1);
}

/* 32 packed bytes -> [low nibbles | high nibbles] */
static inline __m512i nibbles64(const uint8_t *p) {
    const __m256i raw = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_and_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1),
        _mm512_set1_epi8(0xF));
}

/* Q4_K (rows): exact super-block sums, then the two fused multiply-adds. */
static void gemv_q4_K(int n, int nr, const void *w, size_t ldw, const void *x, float *y) {
    const int nsb = n / QK_K;
    const block_q8_K *xb = x;
    for (int r = 0; r < nr; r++) {
        const block_q4_K *a = (const block_q4_K *)((const char *)w + (size_t)r * ldw);
        float acc = 0, accm = 0;
        for (int i = 0; i < nsb; i++) {
            uint8_t sc[8], mn[8];
            k4_scales(a[i].scales, sc, mn);
            int msum = 0;
            for (int j = 0; j < 8; j++)
                msum += mn[j] * (xb[i].bsums[2 * j] + xb[i].bsums[2 * j + 1]);
            __m512i s = _mm512_setzero_si512();
            for (int c = 0; c < 4; c++) {
                const __m512i q = nibbles64(a[i].qs + 32 * c);
                const __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512(xb[i].qs + 64 * c));
                s = _mm512_dpwssd_epi32(s, p, scale_pair16(sc[2 * c], sc[2 * c + 1]));
            }
            acc = fmaf((float)hsum_i32x16(s), f16(a[i].d) * xb[i].d, acc);
            accm = fmaf((float)msum, f16(a[i].dmin) * xb[i].d, accm);
        }
        y[r] = acc - accm;
    }
}

/* Q5_K in llama.cpp's tiled order (ks_tiled_run): one exact integer sum per
 * super-block. */
static void gemv_q5_K(int n, int nr, const void *w, size_t ldw, const void *x, float *y) {
    const int nsb = n / QK_K;
    const block_q8_K *xb = x;
    for (int r = 0; r < nr; r++) {
        const block_q5_K *a = (const block_q5_K *)((const char *)w + (size_t)r * ldw);
        float acc = 0;
        for (int i = 0; i < nsb; i++) {
            uint8_t sc[8], mn[8];
            k4_scales(a[i].scales, sc, mn);
            int total = 0;
            for (int j = 0; j < 8; j++)
                total += mn[j] * (xb[i].bsums[2 * j] + xb[i].bsums[2 * j + 1]);
            const __m256i hb = _mm256_loadu_si256((const __m256i *)a[i].qh);
            const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(hb), hb, 1);
            __m512i s = _mm512_setzero_si512();
            for (int c = 0; c < 4; c++) {
                /* fifth bits: bit 2c for the low half, 2c+1 for the high half */
                const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)),
                                                      _mm256_set1_epi16((short)(2 * c + 1)), 1);
                const __m512i h = _mm512_and_si512(_mm512_srlv_epi16(hh, sh), _mm512_set1_epi8(1));
                const __m512i q =
                    _mm512_or_si512(nibbles64(a[i].qs + 32 * c), _mm512_slli_epi16(h, 4));
                const __m512i p = _mm512_maddubs_epi16(q, _mm512_loadu_si512(xb[i].qs + 64 * c));
                s = _mm512_dpwssd_epi32(s, p, scale_pair16(sc[2 * c], sc[2 * c + 1]));
            }
            float rr = (float)_mm512_reduce_add_epi32(s) * f16(a[i].d);
            rr = fmaf(-f16(a[i].dmin), (float)total, rr);
            acc = fmaf(rr, xb[i].d, acc);
        }
        y[r] = acc;
    }
}

/* Q6_K (lanes): unsigned values, per-16 scales, the offset 32 per lane from
 * the 16-group sums. */
static void gemv_q6_K(int n, int nr, const void *w, size_t ldw, const void *x, float *y) {
    const int nsb = n / QK_K;
    const block_q8_K *xb = x;
    const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3);
    /* which of the 4 scales of a 64-element register each int16 lane uses */
    const __m512i sidx = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1,
                                          1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int r = 0; r < nr; r++) {
        const block_q6_K *a = (const block_q6_K *)((const char *)w + (size_t)r * ldw);
        __m256 acc = _mm256_setzero_ps();
        for (int i = 0; i < nsb; i++) {
            const __m512i scl = _mm512_cvtepi8_epi16(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a[i].scales)));
            __m512i s = _mm512_setzero_si512();
            for (int h = 0; h < 2; h++) {
                const __m512i ql =
                    _mm512_loadu_si512(a[i].ql + 64 * h); /* [k0,k1 low] / [k2,k3 high] nibbles */
                const __m256i hb = _mm256_loadu_si256((const __m256i *)(a[i].qh + 32 * h));
                const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(hb), hb, 1);
                const __m512i sh01 =
                    _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
                const __m512i sh23 =
                    _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
                const __m512i q01 = _mm512_or_si512(
                    _mm512_and_si512(ql, m4),
                    _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hh, sh01), m3), 4));
                const __m512i q23 = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                    _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hh, sh23), m3), 4));
                const __m512i x01 = _mm512_loadu_si512(xb[i].qs + 128 * h),
                              x23 = _mm512_loadu_si512(xb[i].qs + 128 * h + 64);
                const __m512i p01 = _mm512_maddubs_epi16(q01, x01);
                const __m512i p23 = _mm512_maddubs_epi16(q23, x23);
                /* scales of the 16-groups: 8h+0..3 for q01, 8h+4..7 for q23 */
                const __m512i s01 = _mm512_permutexvar_epi16(
                    _mm512_add_epi16(sidx, _mm512_set1_epi16((short)(8 * h))), scl);
                const __m512i s23 = _mm512_permutexvar_epi16(
                    _mm512_add_epi16(sidx, _mm512_set1_epi16((short)(8 * h + 4))), scl);
                s = _mm512_dpwssd_epi32(s, p01, s01);
                s = _mm512_dpwssd_epi32(s, p23, s23);
            }
            /* the offset 32 per lane from the 16-group sums (kernels_ref.c) */
            const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb[i].bsums),
                                                  _mm512_castsi512_si256(scl));
            const __m256i s8 = _mm256_sub_epi32(
                _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1)),
                _mm256_slli_epi32(off, 5));
            acc =
                _mm256_fmadd_ps(_mm256_set1_ps(xb[i].d * f16(a[i].d)), _mm256_cvtepi32_ps(s8), acc);
        }
        y[r] = hsum256(acc);
    }
}

/* ============================================================================
 * Row panels (weights packed at load): 16 rows side by side per lane of 4
 * weights, so the activation's 4 bytes are the broadcast operand and one
 * 512-bit register of weights serves 16 rows.
 *
 * Every product runs on this layout, whatever its token count: one token
 * (generation), a few (speculative verification) or many (prompts). For
 * each panel the tokens are taken in tiles of a few; the panel's weights are
 * loaded (and unpacked) once per tile and used for every token of it, and a
 * panel (a few KiB to tens of KiB) stays in L1 from one tile to the next, so
 * a matrix is read from memory once per product and the file's copy of a
 * packed tensor is never read after packing. Per token, a tile performs the
 * operations of the one-token kernel in the same order: each output is the
 * float vec_dot returns. The tile kernels are inlined with a constant tile
 * size, which keeps their per-token accumulators in registers.
 * ========================================================================== */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline int64_t n_panels(int64_t rows) {
    return (rows + RP_PANEL - 1) / RP_PANEL;
}

/* store the first min(16, rows - r0) of 16 results */
static inline void store_panel(float *y, int64_t r0, int64_t rows, __m512 v) {
    const int64_t c = rows - r0 < 16 ? rows - r0 : 16;
    _mm512_mask_storeu_ps(y + r0, (__mmask16)((1u << c) - 1), v);
}

/* The arguments of a tile: panel pw (nb blocks), tokens xq + t * ldx with
 * extras xe + t * lde, outputs y + t * ldy at rows r0.. (of rows). */
#define TILE_PARAMS                                                                                \
    const uint8_t *pw, int nb, const uint8_t *xq, size_t ldx, const uint8_t *xe, size_t lde,       \
        float *y, size_t ldy, int64_t r0, int64_t rows
#define TILE_ARGS pw, nb, x0, ldx, e0, lde, y0, ldy, p * 16, rows

/* gemm over panels [p0, p1) for nt tokens, in tiles of at most TT_MAX (<= 6)
 * tokens; TILE(TILE_ARGS, tt) is the tile kernel */
#define PANEL_GEMM(name, TILE, TT_MAX, unit, blk_bytes)                                            \
    static void name(int n, int64_t rows, const void *packed, int64_t p0, int64_t p1, int nt,      \
                     const void *xq, size_t ldx, const void *xe, size_t lde, float *y,             \
                     size_t ldy) {                                                                 \
        const int nb = n / (unit);                                                                 \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const uint8_t *pw = (const uint8_t *)packed + (size_t)(p * nb) * (blk_bytes);          \
            for (int t0 = 0; t0 < nt; t0 += (TT_MAX)) {                                            \
                const uint8_t *x0 = (const uint8_t *)xq + (size_t)t0 * ldx;                        \
                const uint8_t *e0 = (const uint8_t *)xe + (size_t)t0 * lde;                        \
                float *y0 = y + (size_t)t0 * ldy;                                                  \
                switch (nt - t0 < (TT_MAX) ? nt - t0 : (TT_MAX)) {                                 \
                case 1:                                                                            \
                    TILE(TILE_ARGS, 1);                                                            \
                    break;                                                                         \
                case 2:                                                                            \
                    TILE(TILE_ARGS, 2);                                                            \
                    break;                                                                         \
                case 3:                                                                            \
                    TILE(TILE_ARGS, 3 <= (TT_MAX) ? 3 : 1);                                        \
                    break;                                                                         \
                case 4:                                                                            \
                    TILE(TILE_ARGS, 4 <= (TT_MAX) ? 4 : 1);                                        \
                    break;                                                                         \
                case 5:                                                                            \
                    TILE(TILE_ARGS, 5 <= (TT_MAX) ? 5 : 1);                                        \
                    break;                                                                         \
                default:                                                                           \
                    TILE(TILE_ARGS, 6 <= (TT_MAX) ? 6 : 1);                                        \
                    break;                                                                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

/* The row of a packed tensor in the file's format, blocks [b0, b1): the
 * 4-byte groups of row r of panel blocks laid out as [g][16 rows][4] */
static inline const uint8_t *panel_block(const void *packed, int64_t nb, int64_t r, int64_t b,
                                         size_t blk_bytes) {
    return (const uint8_t *)packed + (size_t)((r / 16) * nb + b) * blk_bytes;
}

static inline void gather4(uint8_t *dst, const uint8_t *o, int g, int r) {
    memcpy(dst, o + (size_t)(g * 16 + r) * 4, 4);
}

/* ---- Q8_0 (lanes): per panel and block, u8 w+128 [8 lanes][16 rows][4] and
 * the 16 fp16 scales: 544 bytes, as 16 blocks of the file. */
#define P8_BYTES 544

static size_t p8_bytes(int64_t n, int64_t rows) {
    return (size_t)(n_panels(rows) * (n / 32)) * P8_BYTES;
}

static void p8_pack(int64_t n, int64_t rows, const void *w, size_t ldw, void *dst) {
    const int64_t nb = n / 32;
    for (int64_t p = 0; p < n_panels(rows); p++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(p * nb + b) * P8_BYTES;
            uint16_t *d = (uint16_t *)(o + 512);
            for (int r = 0; r < 16; r++) {
                const int64_t row = p * 16 + r;
                const block_q8_0 *x =
                    row < rows ? (const block_q8_0 *)((const char *)w + (size_t)row * ldw) + b
                               : NULL;
                for (int l = 0; l < 8; l++) {
                    const uint32_t v = x ? load_u32(x->qs + 4 * l) ^ 0x80808080u : 0x80808080u;
                    memcpy(o + (size_t)(l * 16 + r) * 4, &v, 4);
                }
                d[r] = x ? x->d : 0;
            }
        }
}

static void p8_unpack(int64_t n, const void *packed, int64_t r, int64_t b0, int64_t b1, void *row) {
    block_q8_0 *x = row;
    for (int64_t b = b0; b < b1; b++, x++) {
        const uint8_t *o = panel_block(packed, n / 32, r, b, P8_BYTES);
        for (int l = 0; l < 8; l++) {
            const uint32_t v = load_u32(o + (size_t)(l * 16 + r % 16) * 4) ^ 0x80808080u;
            memcpy(x->qs + 4 * l, &v, 4);
        }
        memcpy(&x->d, o + 512 + 2 * (r % 16), 2);
    }
}

/* extras per block: -128 * (sum of each lane's 4 activations), then the scale */
static size_t p8_xbytes(int n) {
    return (size_t)(n / 32) * 36;
}

/* per block of Q8_0 activations: -(1 << shift) * each lane's sum (the
 * weights' unsigned offset times the activations), then the scale */
static void lane_corr_xprep(int n, const void *xq, void *xe, int shift) {
    const block_q8_0 *x = xq;
    int32_t *corr = xe;
    float *dx = (float *)(corr + (size_t)(n / 32) * 8);
    for (int b = 0; b < n / 32; b++) {
        const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1),
                                              _mm256_loadu_si256((const __m256i *)x[b].qs));
        _mm256_storeu_si256((__m256i *)(corr + 8 * b),
                            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s, shift)));
        dx[b] = f16(x[b].d);
    }
}

static void p8_xprep(int n, const void *xq, void *xe) {
    lane_corr_xprep(n, xq, xe, 7);
}

/* per token and lane: acc[l] = fma(dw * dx, lane sum, acc[l]) */
ALWAYS_INLINE void p8_tile(TILE_PARAMS, const int TT) {
    __m512 acc[6][8];
    UNROLL8
    for (int t = 0; t < TT; t++) UNROLL8
    for (int l = 0; l < 8; l++) acc[t][l] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++, pw += P8_BYTES) {
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pw + 512)));
        __m512 d[6];
        UNROLL8
        for (int t = 0; t < TT; t++) {
            const float *dx = (const float *)(xe + (size_t)t * lde) + (size_t)nb * 8;
            d[t] = _mm512_mul_ps(dw, _mm512_set1_ps(dx[b]));
        }
        UNROLL8
        for (int l = 0; l < 8; l++) {
            const __m512i w = _mm512_loadu_si512(pw + 64 * l);
            UNROLL8
            for (int t = 0; t < TT; t++) {
                const block_q8_0 *x = (const block_q8_0 *)(xq + (size_t)t * ldx) + b;
                const int32_t *corr = (const int32_t *)(xe + (size_t)t * lde) + 8 * b;
                const __m512i s =
                    _mm512_dpbusd_epi32(_mm512_set1_epi32(corr[l]), w, bcast32(x->qs + 4 * l));
                acc[t][l] = _mm512_fmadd_ps(d[t], _mm512_cvtepi32_ps(s), acc[t][l]);
            }
        }
    }
    UNROLL8
    for (int t = 0; t < TT; t++) store_panel(y + (size_t)t * ldy, r0, rows, reduce8(acc[t]));
}

PANEL_GEMM(p8_gemm, p8_tile, 3, 32, P8_BYTES)

static const rp_pack_ops pack_q8_0 = {p8_bytes, p8_pack, p8_unpack, p8_xbytes, p8_xprep, p8_gemm};

/* ---- Q4_0 and IQ4_NL (rows): per panel and block (288 bytes, as the file)
 *   u8  qs[4 m][16 rows][4]  bytes 4m.. of each row (low nibbles: lane m,
 *                            elements 4m..; high nibbles: lane m + 4)
 *   u16 d[16]
 * The nibble is used unsigned (IQ4_NL: its grid value + 128, via a table);
 * the offset is removed with the activations' block sum. */
#define P40_BYTES 288

static size_t p40_bytes(int64_t n, int64_t rows) {
    return (size_t)(n_panels(rows) * (n / 32)) * P40_BYTES;
}

/* Q4_0 and IQ4_NL blocks have the same layout (fp16 d, 16 bytes of nibbles) */
static void p40_pack(int64_t n, int64_t rows, const void *w, size_t ldw, void *dst) {
    const int64_t nb = n / 32;
    for (int64_t p = 0; p < n_panels(rows); p++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(p * nb + b) * P40_BYTES;
            memset(o, 0, P40_BYTES);
            for (int r = 0; r < 16; r++) {
                const int64_t row = p * 16 + r;
                if (row >= rows) continue;
                const block_q4_0 *x = (const block_q4_0 *)((const char *)w + (size_t)row * ldw) + b;
                for (int m = 0; m < 4; m++) memcpy(o + (size_t)(m * 16 + r) * 4, x->qs + 4 * m, 4);
                memcpy(o + 256 + 2 * r, &x->d, 2);
            }
        }
}

static void p40_unpack(int64_t n, const void *packed, int64_t r, int64_t b0, int64_t b1,
                       void *row) {
    block_q4_0 *x = row;
    for (int64_t b = b0; b < b1; b++, x++) {
        const uint8_t *o = panel_block(packed, n / 32, r, b, P40_BYTES);
        for (int m = 0; m < 4; m++) gather4(x->qs + 4 * m, o, m, (int)(r % 16));
        memcpy(&x->d, o + 256 + 2 * (r % 16), 2);
    }
}

/* extras per block: the offset times the block's activation sum, then its scale */
static size_t p40_xbytes(int n) {
    return (size_t)(n / 32) * 8;
}

static void p40_xprep_off(int n, const void *xq, void *xe, int off) {
    const block_q8_0 *x = xq;
    int32_t *o = xe;
    for (int b = 0; b < n / 32; b++) {
        int s = 0;
        for (int j = 0; j < 32; j++) s += x[b].qs[j];
        o[2 * b] = -off * s;
        float d = f16(x[b].d);
        memcpy(&o[2 * b + 1], &d, 4);
    }
}

static void p40_xprep_q4_0(int n, const void *xq, void *xe) {
    p40_xprep_off(n, xq, xe, 8);
}
static void p40_xprep_iq4_nl(int n, const void *xq, void *xe) {
    p40_xprep_off(n, xq, xe, 128);
}

/* per token: acc = fma((float)block sum, dw * dx, acc) */
ALWAYS_INLINE void p40_tile(TILE_PARAMS, const int TT, const bool nl) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    __m512i lut = _mm512_setzero_si512();
    if (nl) {
        uint8_t u[16];
        for (int i = 0; i < 16; i++) u[i] = (uint8_t)(rp_kvalues_iq4nl[i] + 128);
        lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)u));
    }
    __m512 acc[6];
    UNROLL8
    for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++, pw += P40_BYTES) {
        __m512i s0[6], s1[6];
        UNROLL8
        for (int t = 0; t < TT; t++) {
            s0[t] = _mm512_set1_epi32(((const int32_t *)(xe + (size_t)t * lde))[2 * b]);
            s1[t] = _mm512_setzero_si512();
        }
        UNROLL8
        for (int m = 0; m < 4; m++) {
            const __m512i raw = _mm512_loadu_si512(pw + 64 * m);
            __m512i lo = _mm512_and_si512(raw, m4),
                    hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
            if (nl) {
                lo = _mm512_shuffle_epi8(lut, lo);
                hi = _mm512_shuffle_epi8(lut, hi);
            }
            UNROLL8
            for (int t = 0; t < TT; t++) {
                const block_q8_0 *x = (const block_q8_0 *)(xq + (size_t)t * ldx) + b;
                s0[t] = _mm512_dpbusd_epi32(s0[t], lo, bcast32(x->qs + 4 * m));
                s1[t] = _mm512_dpbusd_epi32(s1[t], hi, bcast32(x->qs + 16 + 4 * m));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pw + 256)));
        UNROLL8
        for (int t = 0; t < TT; t++) {
            float dx;
            memcpy(&dx, (const int32_t *)(xe + (size_t)t * lde) + 2 * b + 1, 4);
            const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0[t], s1[t])), d, acc[t]);
        }
    }
    UNROLL8
    for (int t = 0; t < TT; t++) store_panel(y + (size_t)t * ldy, r0, rows, acc[t]);
}

#define P40_TILE_Q4_0(args, tt)   p40_tile(args, tt, false)
#define P40_TILE_IQ4_NL(args, tt) p40_tile(args, tt, true)
PANEL_GEMM(p40_gemm_q4_0, P40_TILE_Q4_0, 6, 32, P40_BYTES)
PANEL_GEMM(p40_gemm_iq4_nl, P40_TILE_IQ4_NL, 6, 32, P40_BYTES)

static const rp_pack_ops pack_q4_0 = {p40_bytes,  p40_pack,       p40_unpack,
                                      p40_xbytes, p40_xprep_q4_0, p40_gemm_q4_0};
static const rp_pack_ops pack_iq4_nl = {p40_bytes,  p40_pack,         p40_unpack,
                                        p40_xbytes, p40_xprep_iq4_nl, p40_gemm_iq4_nl};

/* ---- Q5_0, Q5_1 and Q4_1 (lanes): per panel and block, the file's bytes:
 *   u8  qs[4 m][16 rows][4]  bytes 4m.. of each row (low nibbles: lane m,
 *                            elements 4m..; high nibbles: lane m + 4)
 *   u32 qh[16 rows]          Q5_x: the fifth bits, bit e for element e
 *   u16 d[16], u16 m[16]     (m: Q5_1's and Q4_1's minimum)
 * Q5_0 352 bytes, Q5_1 384, Q4_1 320. Lane l's values are (nibble | bit << 4),
 * unsigned; Q5_0's -16 is removed per lane with the activations' lane sums,
 * so each lane's integer sum is the one the type's vec_dot takes and every
 * float step is its own: acc[l] = fma(dw * dx, lane sum, acc[l]), the 8-lane
 * reduction, and for Q5_1 / Q4_1 + the fma(m, s, ...) accumulated per block
 * (vec_dot's scalar summs). */
enum { P5_Q5_0, P5_Q5_1, P5_Q4_1 };
#define P5_BYTES(k) ((k) == P5_Q5_0 ? 352 : (k) == P5_Q5_1 ? 384 : 320)
#define P5_QH       256
#define P5_D(k)     ((k) == P5_Q4_1 ? 256 : 320)
#define P5_M(k)     ((k) == P5_Q4_1 ? 288 : 352)

/* a block's fields in the file, per kind */
typedef struct p5_src {
    const uint8_t *qs, *qh, *d, *m;
} p5_src;

static p5_src p5_block(const void *row, int64_t b, int kind) {
    if (kind == P5_Q5_0) {
        const block_q5_0 *q = (const block_q5_0 *)row + b;
        return (p5_src){q->qs, q->qh, (const uint8_t *)&q->d, NULL};
    }
    if (kind == P5_Q5_1) {
        const block_q5_1 *q = (const block_q5_1 *)row + b;
        return (p5_src){q->qs, q->qh, (const uint8_t *)&q->d, (const uint8_t *)&q->m};
    }
    const block_q4_1 *q = (const block_q4_1 *)row + b;
    return (p5_src){q->qs, NULL, (const uint8_t *)&q->d, (const uint8_t *)&q->m};
}

static void p5_pack(int64_t n, int64_t rows, const void *w, size_t ldw, void *dst, int kind) {
    const int64_t nb = n / 32;
    for (int64_t p = 0; p < n_panels(rows); p++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(p * nb + b) * P5_BYTES(kind);
            memset(o, 0, P5_BYTES(kind));
            for (int r = 0; r < 16; r++) {
                const int64_t row = p * 16 + r;
                if (row >= rows) continue;
                const p5_src q = p5_block((const char *)w + (size_t)row * ldw, b, kind);
                for (int m = 0; m < 4; m++) memcpy(o + (size_t)(m * 16 + r) * 4, q.qs + 4 * m, 4);
                if (q.qh) memcpy(o + P5_QH + 4 * r, q.qh, 4);
                memcpy(o + P5_D(kind) + 2 * r, q.d, 2);
                if (q.m) memcpy(o + P5_M(kind) + 2 * r, q.m, 2);
            }
        }
}

static void p5_unpack(int64_t n, const void *packed, int64_t r, int64_t b0, int64_t b1, void *row,
                      int kind) {
    const int rr = (int)(r % 16);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *o = panel_block(packed, n / 32, r, b, P5_BYTES(kind));
        const p5_src q = p5_block(row, b - b0, kind); /* the same fields, written */
        for (int m = 0; m < 4; m++) gather4((uint8_t *)q.qs + 4 * m, o, m, rr);
        if (q.qh) memcpy((uint8_t *)q.qh, o + P5_QH + 4 * rr, 4);
        memcpy((uint8_t *)q.d, o + P5_D(kind) + 2 * rr, 2);
        if (q.m) memcpy((uint8_t *)q.m, o + P5_M(kind) + 2 * rr, 2);
    }
}

/* extras per block: Q5_0: -16 * (sum of each lane's 4 activations), then
 * the scale (36 bytes); Q5_1 and Q4_1: the scale and the activations' s */
static size_t p5_xbytes_q5_0(int n) {
    return (size_t)(n / 32) * 36;
}
static size_t p5_xbytes_min(int n) {
    return (size_t)(n / 32) * 8;
}

static void p5_xprep_q5_0(int n, const void *xq, void *xe) {
    lane_corr_xprep(n, xq, xe, 4);
}

static void p5_xprep_min(int n, const void *xq, void *xe) {
    const block_q8_1 *x = xq;
    float *o = xe;
    for (int b = 0; b < n / 32; b++) {
        o[2 * b] = f16(x[b].d);
        o[2 * b + 1] = f16(x[b].s);
    }
}

ALWAYS_INLINE void p5_tile(TILE_PARAMS, const int TT, const int kind) {
    const bool q5 = kind != P5_Q4_1, mins = kind != P5_Q5_0;
    const __m512i m4 = _mm512_set1_epi8(0xF), b4 = _mm512_set1_epi8(0x10);
    /* byte j of a row's lane: the 8 bits from bit j - 4 (mod 64) of its qword,
     * rows in the upper half from bit 32 + j - 4: bit 4 is the element's bit */
    const __m512i sel = _mm512_set1_epi64(0x1F1E1D1C3F3E3D3CLL);
    __m512 acc[3][8], summ[3];
    UNROLL8
    for (int t = 0; t < TT; t++) {
        summ[t] = _mm512_setzero_ps();
        UNROLL8
        for (int l = 0; l < 8; l++) acc[t][l] = _mm512_setzero_ps();
    }
    for (int b = 0; b < nb; b++, pw += P5_BYTES(kind)) {
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pw + P5_D(kind))));
        __m512 d[3];
        UNROLL8
        for (int t = 0; t < TT; t++) {
            const float *e = (const float *)(xe + (size_t)t * lde);
            d[t] = _mm512_mul_ps(dw, _mm512_set1_ps(mins ? e[2 * b] : e[(size_t)nb * 8 + b]));
        }
        if (mins) {
            const __m512 mw =
                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pw + P5_M(kind))));
            UNROLL8
            for (int t = 0; t < TT; t++)
                summ[t] = _mm512_fmadd_ps(
                    mw, _mm512_set1_ps(((const float *)(xe + (size_t)t * lde))[2 * b + 1]),
                    summ[t]);
        }
        const __m512i qh = q5 ? _mm512_loadu_si512(pw + P5_QH) : _mm512_setzero_si512();
        UNROLL8
        for (int m = 0; m < 4; m++) {
            const __m512i raw = _mm512_loadu_si512(pw + 64 * m);
            UNROLL8
            for (int hi = 0; hi < 2; hi++) {
                const int l = m + 4 * hi;
                __m512i u = hi ? _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4)
                               : _mm512_and_si512(raw, m4);
                if (q5)
                    u = _mm512_ternarylogic_epi32(
                        u, _mm512_multishift_epi64_epi8(sel, _mm512_srli_epi64(qh, 4 * l)), b4,
                        0xF8); /* u | (bits & b4) */
                UNROLL8
                for (int t = 0; t < TT; t++) {
                    const int8_t *xs = mins ? ((const block_q8_1 *)(xq + (size_t)t * ldx))[b].qs
                                            : ((const block_q8_0 *)(xq + (size_t)t * ldx))[b].qs;
                    const __m512i c =
                        mins ? _mm512_setzero_si512()
                             : _mm512_set1_epi32(
                                   ((const int32_t *)(xe + (size_t)t * lde))[8 * b + l]);
                    const __m512i sum = _mm512_dpbusd_epi32(c, u, bcast32(xs + 4 * l));
                    acc[t][l] = _mm512_fmadd_ps(d[t], _mm512_cvtepi32_ps(sum), acc[t][l]);
                }
            }
        }
    }
    UNROLL8
    for (int t = 0; t < TT; t++) {
        const __m512 v = reduce8(acc[t]);
        store_panel(y + (size_t)t * ldy, r0, rows, mins ? _mm512_add_ps(v, summ[t]) : v);
    }
}

#define P5_OPS(name, kind, xbytes, xprep)                                                          \
    static size_t name##_bytes(int64_t n, int64_t rows) {                                          \
        return (size_t)(n_panels(rows) * (n / 32)) * P5_BYTES(kind);                               \
    }                                                                                              \
    static void name##_pack(int64_t n, int64_t rows, const void *w, size_t ldw, void *dst) {       \
        p5_pack(n, rows, w, ldw, dst, kind);                                                       \
    }                                                                                              \
    static void name##_unpack(int64_t n, const void *packed, int64_t r, int64_t b0, int64_t b1,    \
                              void *row) {                                                         \
        p5_unpack(n, packed, r, b0, b1, row, kind);                                                \
    }                                                                                              \
    ALWAYS_INLINE void name##_tile(TILE_PARAMS, const int TT) {                                    \
        p5_tile(pw, nb, xq, ldx, xe, lde, y, ldy, r0, rows, TT, kind);                             \
    }                                                                                              \
    PANEL_GEMM(name##_gemm, name##_tile, 3, 32, P5_BYTES(kind))                                    \
    static const rp_pack_ops name = {name##_bytes, name##_pack, name##_unpack,                     \
                                     xbytes,       xprep,       name##_gemm};

P5_OPS(pack_q5_0, P5_Q5_0, p5_xbytes_q5_0, p5_xprep_q5_0)
P5_OPS(pack_q5_1, P5_Q5_1, p5_xbytes_min, p5_xprep_min)
P5_OPS(pack_q4_1, P5_Q4_1, p5_xbytes_min, p5_xprep_min)

/* ---- Q4_K (rows): per panel and super-block (2496 bytes)
 *   u8  qs[4 c][8 l][16 rows][4]  bytes 32c+4l.. of each row's qs (low
 *                                 nibbles: group 2c, high: group 2c+1)
 *   u8  sc[8][16]                 6-bit group scales
 *   u32 mn[4][16]                 int16 pairs (min 2p, min 2p+1)
 *   u16 d[16], dmin[16] */
#define P4K_BYTES 2496
#define P4K_SC    2048
#define P4K_MN    2176
#define P4K_D     2432

static size_t p4k_bytes(int64_t n, int64_t rows) {
    return (size_t)(n_panels(rows) * (n / QK_K)) * P4K_BYTES;
}

static void p4k_pack(int64_t n, int64_t rows, const void *w, size_t ldw, void *dst) {
    const int64_t nsb = n / QK_K;
    for (int64_t p = 0; p < n_panels(rows); p++)
        for (int64_t sb = 0; sb < nsb; sb++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(p * nsb + sb) * P4K_BYTES;
            memset(o, 0, P4K_BYTES);
            for (int r = 0; r < 16; r++) {
                const int64_t row = p * 16 + r;
                if (row >= rows) continue;
                const block_q4_K *x =
                    (const block_q4_K *)((const char *)w + (size_t)row * ldw) + sb;
                for (int c = 0; c < 4; c++)
                    for (int l = 0; l < 8; l++)
                        memcpy(o + (size_t)((c * 8 + l) * 16 + r) * 4, x->qs + 32 * c + 4 * l, 4);
                uint8_t sc[8], mn[8];
                k4_scales(x->scales, sc, mn);
                for (int j = 0; j < 8; j++) o[P4K_SC + j * 16 + r] = sc[j];
                for (int q = 0; q < 4; q++) {
                    const uint32_t v = pair16(mn[2 * q], mn[2 * q + 1]);
                    memcpy(o + P4K_MN + (size_t)(q * 16 + r) * 4, &v, 4);
                }
                memcpy(o + P4K_D + 2 * r, &x->d, 2);
                memcpy(o + P4K_D + 32 + 2 * r, &x->dmin, 2);
            }
        }
}

/* k4_scales inverted: 6-bit scales and mins back into the 12 bytes */
static void p4k_unpack(int64_t n, const void *packed, int64_t r, int64_t b0, int64_t b1,
                       void *row) {
    block_q4_K *x = row;
    const int rr = (int)(r % 16);
    for (int64_t sb = b0; sb < b1; sb++, x++) {
        const uint8_t *o = panel_block(packed, n / QK_K, r, sb, P4K_BYTES);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 8; l++) gather4(x->qs + 32 * c + 4 * l, o, c * 8 + l, rr);
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) sc[j] = o[P4K_SC + j * 16 + rr];
        for (int q = 0; q < 4; q++) {
            const uint32_t v = load_u32(o + P4K_MN + (size_t)(q * 16 + rr) * 4);
            mn[2 * q] = (uint8_t)v;
            mn[2 * q + 1] = (uint8_t)(v >> 16);
        }
        for (int j = 0; j < 4; j++) {
            x->scales[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
            x->scales[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
            x->scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
        }
        memcpy(&x->d, o + P4K_D + 2 * rr, 2);
        memcpy(&x->dmin, o + P4K_D + 32 + 2 * rr, 2);
    }
}

/* extras per super-block: int16 pairs (S_2p, S_2p+1) of the group sums */
static size_t p4k_xbytes(int n) {
    return (size_t)(n / QK_K) * 16;
}

static void p4k_xprep(int n, const void *xq, void *xe) {
    const block_q8_K *x = xq;
    uint32_t *o = xe;
    for (int sb = 0; sb < n / QK_K; sb++)
        for (int q = 0; q < 4; q++)
            o[4 * sb + q] = pair16(x[sb].bsums[4 * q] + x[sb].bsums[4 * q + 1],
                                   x[sb].bsums[4 * q + 2] + x[sb].bsums[4 * q + 3]);
}

/* per token: exact super-block sums (group sums times their 6-bit scales),
 * acc = fma(sum, dw * dx, acc), accm = fma(min sum, dmin * dx, accm);
 * the result is acc - accm */
ALWAYS_INLINE void p4k_tile_impl(TILE_PARAMS, const int TT, const bool per64) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    __m512 acc[6], accm[6];
    UNROLL8
    for (int t = 0; t < TT; t++) acc[t] = accm[t] = _mm512_setzero_ps();
    for (int sb = 0; sb < nb; sb++, pw += P4K_BYTES) {
        __m512i sum[6];
        UNROLL8
        for (int t = 0; t < TT; t++) sum[t] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            __m512i lo[6], hi[6];
            UNROLL8
            for (int t = 0; t < TT; t++) lo[t] = hi[t] = _mm512_setzero_si512();
            UNROLL8
            for (int l = 0; l < 8; l++) {
                const __m512i w = _mm512_load_si512(pw + (size_t)(c * 8 + l) * 64);
                const __m512i wl = _mm512_and_si512(w, m4),
                              wh = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
                UNROLL8
                for (int t = 0; t < TT; t++) {
                    const int8_t *xs = ((const block_q8_K *)(xq + (size_t)t * ldx))[sb].qs;
                    lo[t] = _mm512_dpbusd_epi32(lo[t], wl, bcast32(xs + 64 * c + 4 * l));
                    hi[t] = _mm512_dpbusd_epi32(hi[t], wh, bcast32(xs + 64 * c + 32 + 4 * l));
                }
            }
            const __m512i sc0 =
                _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(pw + P4K_SC + 32 * c)));
            const __m512i sc1 =
                _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(pw + P4K_SC + 32 * c + 16)));
            UNROLL8
            for (int t = 0; t < TT; t++)
                sum[t] = _mm512_add_epi32(sum[t], _mm512_add_epi32(_mm512_mullo_epi32(lo[t], sc0),
                                                                   _mm512_mullo_epi32(hi[t], sc1)));
            if (per64) { /* llama.cpp's repacked gemm: both sums per 64 elements */
                const __m512 dw =
                    _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pw + P4K_D)));
                const __m512 dmw =
                    _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pw + P4K_D + 32)));
                const __m512i mn = _mm512_load_si512(pw + P4K_MN + 64 * c);
                UNROLL8
                for (int t = 0; t < TT; t++) {
                    const uint32_t *S = (const uint32_t *)(xe + (size_t)t * lde) + 4 * sb;
                    const __m512i ms = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mn,
                                                           _mm512_set1_epi32((int)S[c]));
                    const __m512 dx =
                        _mm512_set1_ps(((const block_q8_K *)(xq + (size_t)t * ldx))[sb].d);
                    acc[t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(dw, dx), acc[t]);
                    accm[t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dmw, dx), accm[t]);
                    sum[t] = _mm512_setzero_si512();
                }
            }
        }
        if (per64) continue;
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pw + P4K_D)));
        const __m512 dmw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pw + P4K_D + 32)));
        UNROLL8
        for (int t = 0; t < TT; t++) {
            const uint32_t *S = (const uint32_t *)(xe + (size_t)t * lde) + 4 * sb;
            __m512i ms = _mm512_setzero_si512();
            UNROLL8
            for (int q = 0; q < 4; q++)
                ms = _mm512_dpwssd_epi32(ms, _mm512_load_si512(pw + P4K_MN + 64 * q),
                                         _mm512_set1_epi32((int)S[q]));
            const __m512 dx = _mm512_set1_ps(((const block_q8_K *)(xq + (size_t)t * ldx))[sb].d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(dw, dx), acc[t]);
            accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(dmw, dx), accm[t]);
        }
    }
    UNROLL8
    for (int t = 0; t < TT; t++)
        store_panel(y + (size_t)t * ldy, r0, rows, _mm512_sub_ps(acc[t], accm[t]));
}

ALWAYS_INLINE void p4k_tile(TILE_PARAMS, const int TT) {
    p4k_tile_impl(pw, nb, xq, ldx, xe, lde, y, ldy, r0, rows, TT, false);
}

ALWAYS_INLINE void p4k_tile_b(TILE_PARAMS, const int TT) {
    p4k_tile_impl(pw, nb, xq, ldx, xe, lde, y, ldy, r0, rows, TT, true);
}

PANEL_GEMM(p4k_gemm, p4k_tile, 4, QK_K, P4K_BYTES)
PANEL_GEMM(p4k_gemm_b, p4k_tile_b, 4, QK_K, P4K_BYTES)

static const rp_pack_ops pack_q4_K = {p4k_bytes,  p4k_pack,  p4k_unpack,
                                      p4k_xbytes, p4k_xprep, p4k_gemm};

/* ---- Q6_K (lanes): per panel and super-block (3360 bytes of the file,
 * padded to 3392 so that blocks start on cache lines), in the order the
 * kernels read it, so a panel streams front to back:
 *   i8  sc[16 groups][16 rows]
 *   u16 d[16], 32 bytes of padding
 *   then per lane l (8), per half h (2), three 64-byte vectors [16 rows][4]:
 *     qh   bytes 32h+4l.. of each row's qh (bits 2k: chunk 4h+k)
 *     ql0  bytes 64h+4l..    of each row's ql (low nibbles: chunk 4h,   high: 4h+2)
 *     ql1  bytes 64h+32+4l.. of each row's ql (low nibbles: chunk 4h+1, high: 4h+3) */
#define P6K_BYTES 3392
#define P6K_SC    0
#define P6K_D     256
#define P6K_Q     320
/* the qh vector (m < 0) or ql vector m of half h, lane l */
#define P6K_VEC(h, m, l) (P6K_Q + (size_t)(l)*384 + (size_t)(h)*192 + (size_t)((m) + 1) * 64)

static size_t p6k_bytes(int64_t n, int64_t rows) {
    return (size_t)(n_panels(rows) * (n / QK_K)) * P6K_BYTES;
}

static void p6k_pack(int64_t n, int64_t rows, const void *w, size_t ldw, void *dst) {
    const int64_t nsb = n / QK_K;
    for (int64_t p = 0; p < n_panels(rows); p++)
        for (int64_t sb = 0; sb < nsb; sb++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(p * nsb + sb) * P6K_BYTES;
            memset(o, 0, P6K_BYTES);
            for (int r = 0; r < 16; r++) {
                const int64_t row = p * 16 + r;
                if (row >= rows) {
                    /* q = 32 is the value 0 (the low bits are already 0) */
                    for (int h = 0; h < 2; h++)
                        for (int l = 0; l < 8; l++)
                            memcpy(o + P6K_VEC(h, -1, l) + 4 * r, "\xAA\xAA\xAA\xAA", 4);
                    continue;
                }
                const block_q6_K *x =
                    (const block_q6_K *)((const char *)w + (size_t)row * ldw) + sb;
                for (int h = 0; h < 2; h++)
                    for (int l = 0; l < 8; l++) {
                        for (int m = 0; m < 2; m++)
                            memcpy(o + P6K_VEC(h, m, l) + 4 * r, x->ql + 64 * h + 32 * m + 4 * l,
                                   4);
                        memcpy(o + P6K_VEC(h, -1, l) + 4 * r, x->qh + 32 * h + 4 * l, 4);
                    }
                for (int g = 0; g < 16; g++) o[P6K_SC + g * 16 + r] = (uint8_t)x->scales[g];
                memcpy(o + P6K_D + 2 * r, &x->d, 2);
            }
        }
}

static void p6k_unpack(int64_t n, const void *packed, int64_t r, int64_t b0, int64_t b1,
                       void *row) {
    block_q6_K *x = row;
    const int rr = (int)(r % 16);
    for (int64_t sb = b0; sb < b1; sb++, x++) {
        const uint8_t *o = panel_block(packed, n / QK_K, r, sb, P6K_BYTES);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 8; l++) {
                for (int m = 0; m < 2; m++)
                    memcpy(x->ql + 64 * h + 32 * m + 4 * l, o + P6K_VEC(h, m, l) + 4 * rr, 4);
                memcpy(x->qh + 32 * h + 4 * l, o + P6K_VEC(h, -1, l) + 4 * rr, 4);
            }
        for (int g = 0; g < 16; g++) x->scales[g] = (int8_t)o[P6K_SC + g * 16 + rr];
        memcpy(&x->d, o + P6K_D + 2 * rr, 2);
    }
}

/* extras per super-block: int16 pairs (bsums_2l, bsums_2l+1) for lane l */
static size_t p6k_xbytes(int n) {
    return (size_t)(n / QK_K) * 32;
}

static void p6k_xprep(int n, const void *xq, void *xe) {
    const block_q8_K *x = xq;
    uint32_t *o = xe;
    for (int sb = 0; sb < n / QK_K; sb++)
        for (int l = 0; l < 8; l++)
            o[8 * sb + l] = pair16(x[sb].bsums[2 * l], x[sb].bsums[2 * l + 1]);
}

/* per token and lane: the lane's exact sum over the super-block (unsigned
 * values, per-16 scales, minus 32 * (sc[2l] bsums[2l] + sc[2l+1] bsums[2l+1])
 * as kernels_ref.c), then acc[l] = fma(dx * dw, sum, acc[l]) */
ALWAYS_INLINE void p6k_tile_impl(TILE_PARAMS, const int TT) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
    /* int16 lane pairs (2r, 2r + 1) <- word r of the low (even) or high (odd) group */
    const __m512i dup_lo = _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8,
                                            8, 7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i dup_hi = _mm512_add_epi16(dup_lo, _mm512_set1_epi16(16));
    __m512i scp[16]; /* (sc, sc) pairs of the 16 rows, per group */
    __m512i sco[8];  /* (sc[2l], sc[2l+1]) pairs of the 16 rows, per lane */
    __m512 acc[6][8];
    UNROLL8
    for (int t = 0; t < TT; t++) UNROLL8
    for (int l = 0; l < 8; l++) acc[t][l] = _mm512_setzero_ps();
    for (int sb = 0; sb < nb; sb++, pw += P6K_BYTES) {
        for (int g = 0; g < 16; g += 2) {
            const __m512i s16 =
                _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(pw + P6K_SC + g * 16)));
            scp[g] = _mm512_permutexvar_epi16(dup_lo, s16);
            scp[g + 1] = _mm512_permutexvar_epi16(dup_hi, s16);
            sco[g / 2] = _mm512_mask_blend_epi16(0xAAAAAAAAu, scp[g], scp[g + 1]);
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pw + P6K_D)));
        __m512 d[6];
        UNROLL8
        for (int t = 0; t < TT; t++)
            d[t] = _mm512_mul_ps(_mm512_set1_ps(((const block_q8_K *)(xq + (size_t)t * ldx))[sb].d),
                                 dw);
        UNROLL8
        for (int l = 0; l < 8; l++) {
            __m512i sum[6];
            UNROLL8
            for (int t = 0; t < TT; t++) sum[t] = _mm512_setzero_si512();
            UNROLL8
            for (int h = 0; h < 2; h++) {
                const __m512i qh = _mm512_load_si512(pw + P6K_VEC(h, -1, l));
                const __m512i w0 = _mm512_load_si512(pw + P6K_VEC(h, 0, l));
                const __m512i w1 = _mm512_load_si512(pw + P6K_VEC(h, 1, l));
                __m512i q[4];
                /* (low or high nibble) | (2 bits of qh) << 4, as m30 ? b : c */
                q[0] = _mm512_ternarylogic_epi32(m30, _mm512_slli_epi16(qh, 4),
                                                 _mm512_and_si512(w0, m4), 0xCA);
                q[1] = _mm512_ternarylogic_epi32(m30, _mm512_slli_epi16(qh, 2),
                                                 _mm512_and_si512(w1, m4), 0xCA);
                q[2] = _mm512_ternarylogic_epi32(
                    m30, qh, _mm512_and_si512(_mm512_srli_epi16(w0, 4), m4), 0xCA);
                q[3] =
                    _mm512_ternarylogic_epi32(m30, _mm512_srli_epi16(qh, 2),
                                              _mm512_and_si512(_mm512_srli_epi16(w1, 4), m4), 0xCA);
                UNROLL8
                for (int t = 0; t < TT; t++) {
                    const int8_t *xs = ((const block_q8_K *)(xq + (size_t)t * ldx))[sb].qs;
                    UNROLL8
                    for (int k = 0; k < 4; k++) {
                        const int c = 4 * h + k;
                        const __m512i pr = _mm512_maddubs_epi16(q[k], bcast32(xs + 32 * c + 4 * l));
                        sum[t] = _mm512_dpwssd_epi32(sum[t], pr, scp[8 * h + 2 * k + (l >= 4)]);
                    }
                }
            }
            UNROLL8
            for (int t = 0; t < TT; t++) {
                const uint32_t *bs = (const uint32_t *)(xe + (size_t)t * lde) + 8 * sb;
                const __m512i off = _mm512_dpwssd_epi32(_mm512_setzero_si512(), sco[l],
                                                        _mm512_set1_epi32((int)bs[l]));
                sum[t] = _mm512_sub_epi32(sum[t], _mm512_slli_epi32(off, 5));
                acc[t][l] = _mm512_fmadd_ps(d[t], _mm512_cvtepi32_ps(sum[t]), acc[t][l]);
            }
        }
    }
    UNROLL8
    for (int t = 0; t < TT; t++) store_panel(y + (size_t)t * ldy, r0, rows, reduce8(acc[t]));
}

/* One token (generation): the tile's arithmetic per lane, reordered so that
 * fewer vectors stay live (the tile's 24 scale vectors and 8 accumulators
 * spilled): lanes 0..3 use the even 16-groups' scales, lanes 4..7 the odd
 * ones, so each half builds only its 8; each lane's offset pairs come from
 * one permutation. Integer lane sums are exact, so every float is the
 * tile's (acc[l] = fma(dx * dw, sum, acc[l]), then the same reduction). */
ALWAYS_INLINE void p6k_one(TILE_PARAMS) {
    (void)ldy;
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
    const __m512i dup_lo = _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8,
                                            8, 7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i dup_hi = _mm512_add_epi16(dup_lo, _mm512_set1_epi16(16));
    const __m512i pair =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    (void)ldx;
    (void)lde;
    __m512 acc[8];
    UNROLL8
    for (int l = 0; l < 8; l++) acc[l] = _mm512_setzero_ps();
    for (int sb = 0; sb < nb; sb++, pw += P6K_BYTES) {
        /* the block after next */
        for (int i = 0; i < P6K_BYTES; i += 64)
            _mm_prefetch((const char *)pw + 2 * P6K_BYTES + i, _MM_HINT_T0);
        const block_q8_K *xb = (const block_q8_K *)xq + sb;
        const uint32_t *bs = (const uint32_t *)xe + 8 * sb;
        const __m512 d =
            _mm512_mul_ps(_mm512_set1_ps(xb->d),
                          _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(pw + P6K_D))));
        for (int half = 0; half < 2; half++) {
            __m512i sp[8]; /* (sc, sc) of the 16 rows for group 2j + half */
            UNROLL8
            for (int j = 0; j < 8; j++)
                sp[j] = _mm512_permutexvar_epi16(half ? dup_hi : dup_lo,
                                                 _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                                                     (const __m256i *)(pw + P6K_SC + 2 * j * 16))));
            UNROLL8
            for (int l = 4 * half; l < 4 * half + 4; l++) {
                __m512i sum = _mm512_setzero_si512();
                UNROLL8
                for (int h = 0; h < 2; h++) {
                    const __m512i qh = _mm512_load_si512(pw + P6K_VEC(h, -1, l));
                    const __m512i w0 = _mm512_load_si512(pw + P6K_VEC(h, 0, l));
                    const __m512i w1 = _mm512_load_si512(pw + P6K_VEC(h, 1, l));
                    __m512i q[4];
                    q[0] = _mm512_ternarylogic_epi32(m30, _mm512_slli_epi16(qh, 4),
                                                     _mm512_and_si512(w0, m4), 0xCA);
                    q[1] = _mm512_ternarylogic_epi32(m30, _mm512_slli_epi16(qh, 2),
                                                     _mm512_and_si512(w1, m4), 0xCA);
                    q[2] = _mm512_ternarylogic_epi32(
                        m30, qh, _mm512_and_si512(_mm512_srli_epi16(w0, 4), m4), 0xCA);
                    q[3] = _mm512_ternarylogic_epi32(m30, _mm512_srli_epi16(qh, 2),
                                                     _mm512_and_si512(_mm512_srli_epi16(w1, 4), m4),
                                                     0xCA);
                    UNROLL8
                    for (int k = 0; k < 4; k++) {
                        const int c = 4 * h + k;
                        const __m512i pr =
                            _mm512_maddubs_epi16(q[k], bcast32(xb->qs + 32 * c + 4 * l));
                        sum = _mm512_dpwssd_epi32(sum, pr, sp[4 * h + k]);
                    }
                }
                const __m512i so = _mm512_permutexvar_epi16(
                    pair, _mm512_cvtepi8_epi16(
                              _mm256_loadu_si256((const __m256i *)(pw + P6K_SC + 2 * l * 16))));
                const __m512i off =
                    _mm512_dpwssd_epi32(_mm512_setzero_si512(), so, _mm512_set1_epi32((int)bs[l]));
                sum = _mm512_sub_epi32(sum, _mm512_slli_epi32(off, 5));
                acc[l] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sum), acc[l]);
            }
        }
    }
    store_panel(y, r0, rows, reduce8(acc));
}

ALWAYS_INLINE void p6k_tile(TILE_PARAMS, const int TT) {
    if (TT == 1)
        p6k_one(pw, nb, xq, ldx, xe, lde, y, ldy, r0, rows);
    else
        p6k_tile_impl(pw, nb, xq, ldx, xe, lde, y, ldy, r0, rows, TT);
}

/* llama.cpp's tiled order (batches): only each super-block's exact integer
 * sum per token and row counts, so the sum is taken in the order that keeps
 * the fewest vectors live: the offsets first, then per half h and lane half
 * the 4 scale vectors its 16 lanes x 4 chunks use, two accumulators per
 * token. Then acc = fma((float)S * dw, dx, acc), as p6k_tile_impl's tiled. */
ALWAYS_INLINE void p6k_tile_b(TILE_PARAMS, const int TT) {
    (void)ldy;
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
    const __m512i dup_lo = _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8,
                                            8, 7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i dup_hi = _mm512_add_epi16(dup_lo, _mm512_set1_epi16(16));
    const __m512i pair =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m512 acc[4];
    UNROLL8
    for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
    for (int sb = 0; sb < nb; sb++, pw += P6K_BYTES) {
        __m512i tot[4][2];
        UNROLL8
        for (int t = 0; t < TT; t++) tot[t][0] = tot[t][1] = _mm512_setzero_si512();
        /* 32 * (sc[2j] bsums[2j] + sc[2j+1] bsums[2j+1]) over j, subtracted */
        UNROLL8
        for (int j = 0; j < 8; j++) {
            const __m512i so =
                _mm512_permutexvar_epi16(pair, _mm512_cvtepi8_epi16(_mm256_load_si256(
                                                   (const __m256i *)(pw + P6K_SC + 2 * j * 16))));
            UNROLL8
            for (int t = 0; t < TT; t++) {
                const uint32_t *bs = (const uint32_t *)(xe + (size_t)t * lde) + 8 * sb;
                tot[t][1] = _mm512_dpwssd_epi32(tot[t][1], so, _mm512_set1_epi32((int)bs[j]));
            }
        }
        UNROLL8
        for (int t = 0; t < TT; t++)
            tot[t][1] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(tot[t][1], 5));
        UNROLL8
        for (int h = 0; h < 2; h++) {
            UNROLL8
            for (int half = 0; half < 2; half++) {
                __m512i sp[4]; /* (sc, sc) of the 16 rows for group 2 (4h + k) + half */
                UNROLL8
                for (int k = 0; k < 4; k++)
                    sp[k] = _mm512_permutexvar_epi16(
                        half ? dup_hi : dup_lo,
                        _mm512_cvtepi8_epi16(_mm256_load_si256(
                            (const __m256i *)(pw + P6K_SC + 2 * (4 * h + k) * 16))));
                for (int l = 4 * half; l < 4 * half + 4; l++) {
                    const __m512i qh = _mm512_load_si512(pw + P6K_VEC(h, -1, l));
                    const __m512i w0 = _mm512_load_si512(pw + P6K_VEC(h, 0, l));
                    const __m512i w1 = _mm512_load_si512(pw + P6K_VEC(h, 1, l));
                    __m512i q[4];
                    q[0] = _mm512_ternarylogic_epi32(m30, _mm512_slli_epi16(qh, 4),
                                                     _mm512_and_si512(w0, m4), 0xCA);
                    q[1] = _mm512_ternarylogic_epi32(m30, _mm512_slli_epi16(qh, 2),
                                                     _mm512_and_si512(w1, m4), 0xCA);
                    q[2] = _mm512_ternarylogic_epi32(
                        m30, qh, _mm512_and_si512(_mm512_srli_epi16(w0, 4), m4), 0xCA);
                    q[3] = _mm512_ternarylogic_epi32(m30, _mm512_srli_epi16(qh, 2),
                                                     _mm512_and_si512(_mm512_srli_epi16(w1, 4), m4),
                                                     0xCA);
                    UNROLL8
                    for (int t = 0; t < TT; t++) {
                        const int8_t *xs = ((const block_q8_K *)(xq + (size_t)t * ldx))[sb].qs;
                        UNROLL8
                        for (int k = 0; k < 4; k++) {
                            const __m512i pr =
                                _mm512_maddubs_epi16(q[k], bcast32(xs + 32 * (4 * h + k) + 4 * l));
                            tot[t][k & 1] = _mm512_dpwssd_epi32(tot[t][k & 1], pr, sp[k]);
                        }
                    }
                }
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(pw + P6K_D)));
        UNROLL8
        for (int t = 0; t < TT; t++)
            acc[t] = _mm512_fmadd_ps(
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(tot[t][0], tot[t][1])), dw),
                _mm512_set1_ps(((const block_q8_K *)(xq + (size_t)t * ldx))[sb].d), acc[t]);
    }
    UNROLL8
    for (int t = 0; t < TT; t++) store_panel(y + (size_t)t * ldy, r0, rows, acc[t]);
}

PANEL_GEMM(p6k_gemm, p6k_tile, 4, QK_K, P6K_BYTES)
PANEL_GEMM(p6k_gemm_b, p6k_tile_b, 4, QK_K, P6K_BYTES)

static const rp_pack_ops pack_q6_K = {p6k_bytes,  p6k_pack,  p6k_unpack,
                                      p6k_xbytes, p6k_xprep, p6k_gemm};

/* ============================================================================
 * Attention's float helpers with the AVX2 arithmetic: its 8-lane accumulators
 * side by side in 512-bit registers, its tails and final reduction, so the
 * results are those of the AVX2 table bit for bit (goldens do not depend on
 * the level) with half the instructions.
 * ========================================================================== */

static float dot_f32_avx512(int n, const float *a, const float *b) {
    __m512 s01 = _mm512_setzero_ps(), s23 = s01; /* AVX2's s0|s1 and s2|s3 */
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s01 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s01);
        s23 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s23);
    }
    __m256 s0 = _mm512_castps512_ps256(s01), s1 = _mm512_extractf32x8_ps(s01, 1);
    const __m256 s2 = _mm512_castps512_ps256(s23), s3 = _mm512_extractf32x8_ps(s23, 1);
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static float dot_f16_f32_avx512(int n, const uint16_t *a, const float *b) {
    __m512 s01 = _mm512_setzero_ps(); /* AVX2's s0|s1 */
    int i = 0;
    for (; i + 16 <= n; i += 16)
        s01 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i))),
                              _mm512_loadu_ps(b + i), s01);
    __m256 s0 = _mm512_castps512_ps256(s01);
    const __m256 s1 = _mm512_extractf32x8_ps(s01, 1);
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i))),
                             _mm256_loadu_ps(b + i), s0);
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += f16(a[i]) * b[i];
    return s;
}

static void axpy_f32_avx512(int n, float a, const float *x, float *y) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_set1_ps(a), _mm512_loadu_ps(x + i),
                                                _mm512_loadu_ps(y + i)));
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_set1_ps(a), _mm256_loadu_ps(x + i),
                                                _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

static void axpy_f16_avx512(int n, float a, const uint16_t *x, float *y) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(
            y + i, _mm512_fmadd_ps(_mm512_set1_ps(a),
                                   _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))),
                                   _mm512_loadu_ps(y + i)));
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(_mm256_set1_ps(a),
                                         _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))),
                                         _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * f16(x[i]);
}

/* ============================================================================
 * Activation quantization: the scalar rules of quant.c / quant_k.c (the same
 * float operations, rp_nearest_int's addition and bit mask, NaN ignored by
 * the magnitude search, (int8_t) truncation), 16 values per instruction.
 * ========================================================================== */

/* |v| with NaN as 0 (fmaxf and the strict > of the scalar search skip NaN) */
static inline __m512 abs_nonan(__m512 v) {
    const __m512 a = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), v);
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, a, _CMP_ORD_Q), a);
}

static inline __m512i nearest16(__m512 v) {
    const __m512i b = _mm512_castps_si512(_mm512_add_ps(v, _mm512_set1_ps(12582912.0f)));
    return _mm512_sub_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x007fffff)),
                            _mm512_set1_epi32(0x00400000));
}

/* q of 32 values scaled to 127 / amax; returns amax / 127 and the sum of q */
static float act_block32(const float *x, int8_t *q, int *sum) {
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(abs_nonan(x0), abs_nonan(x1)));
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    const __m128i q0 = _mm512_cvtepi32_epi8(nearest16(_mm512_mul_ps(x0, id)));
    const __m128i q1 = _mm512_cvtepi32_epi8(nearest16(_mm512_mul_ps(x1, id)));
    _mm_storeu_si128((__m128i *)q, q0);
    _mm_storeu_si128((__m128i *)(q + 16), q1);
    *sum = _mm512_reduce_add_epi32(
        _mm512_add_epi32(_mm512_cvtepi8_epi32(q0), _mm512_cvtepi8_epi32(q1)));
    return amax / 127.0f;
}

static void act_q8_0_avx512(const float *x, void *y, int64_t n) {
    block_q8_0 *b = y;
    int sum;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0)
        b[i].d = rp_fp32_to_fp16(act_block32(x, b[i].qs, &sum));
}

static void act_q8_1_avx512(const float *x, void *y, int64_t n) {
    block_q8_1 *b = y;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        int sum;
        const float d = act_block32(x, b[i].qs, &sum);
        b[i].d = rp_fp32_to_fp16(d);
        b[i].s = rp_fp32_to_fp16(d * (float)sum);
    }
}

static void act_q8_K_avx512(const float *x, void *y, int64_t n) {
    block_q8_K *b = y;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m512 m = _mm512_setzero_ps();
        for (int j = 0; j < QK_K; j += 16) m = _mm512_max_ps(m, abs_nonan(_mm512_loadu_ps(x + j)));
        const float amax = _mm512_reduce_max_ps(m);
        if (!amax) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        /* the signed extreme value: the first one of that magnitude */
        float max = 0;
        for (int j = 0; j < QK_K; j += 16) {
            const __mmask16 eq = _mm512_cmp_ps_mask(abs_nonan(_mm512_loadu_ps(x + j)),
                                                    _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (eq) {
                max = x[j + __builtin_ctz(eq)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 is = _mm512_set1_ps(iscale);
        for (int g = 0; g < QK_K / 16; g++) {
            const __m512i v = _mm512_min_epi32(
                nearest16(_mm512_mul_ps(is, _mm512_loadu_ps(x + 16 * g))), _mm512_set1_epi32(127));
            const __m128i q = _mm512_cvtepi32_epi8(v);
            _mm_storeu_si128((__m128i *)(b[i].qs + 16 * g), q);
            b[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q));
        }
        b[i].d = 1 / iscale;
    }
}

/* rp_expf_ggml512, 16 lanes */
static inline __m512 expf_ggml512(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 hi =
        _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f));
    const __m512 mid =
        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f));
    const __m512 lo = _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f));
    const __m512 j = _mm512_fmadd_ps(_mm512_fmadd_ps(hi, u, mid), u, lo);
    const __m512 res = _mm512_scalef_ps(j, n);
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    if (!big) return res;
    const __mmask16 neg = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512 alt = _mm512_mask_blend_ps(neg, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, res, alt);
}

static void silu_mul_avx512(float *gate, const float *up, int n) {
    int i = 0;
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(gate + i);
        const __m512 e = expf_ggml512(_mm512_sub_ps(_mm512_setzero_ps(), x));
        const __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, e));
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
    }
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(k, gate + i);
        const __m512 e = expf_ggml512(_mm512_sub_ps(_mm512_setzero_ps(), x));
        const __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(gate + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, up + i)));
    }
}

static float dot_f32_ggml_avx512(int n, const float *x, const float *y) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
    /* the tail: ggml's leftover loop is not contracted (each product rounded,
     * then added; measured on qwen3-tiny's head dim 32, every score) */
    for (int i = np; i < n; i++) {
        const float pr = x[i] * y[i];
        s += pr;
    }
    return s;
}

static double exp_sum_ggml_avx512(int n, float *x, float max) {
    double sum = 0;
    const __m512 m = _mm512_set1_ps(max);
    for (int i = 0; i < n; i += 16) {
        const __m512 v = expf_ggml512(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
        _mm512_storeu_ps(x + i, v);
        sum += (double)_mm512_reduce_add_ps(v);
    }
    return sum;
}

static void fma_f32_avx512(int n, float a, const float *x, float *y) {
    const __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i,
                         _mm512_fmadd_ps(_mm512_loadu_ps(x + i), va, _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(x[i], a, y[i]);
}

void rp_kernels_fill_avx512(rp_kernels *k) {
    k->dot_f32_ggml = dot_f32_ggml_avx512;
    k->exp_sum_ggml = exp_sum_ggml_avx512;
    k->fma_f32 = fma_f32_avx512;
    k->silu_mul = silu_mul_avx512;
    k->dot_f32 = dot_f32_avx512;
    k->dot_f16_f32 = dot_f16_f32_avx512;
    k->axpy_f32 = axpy_f32_avx512;
    k->axpy_f16 = axpy_f16_avx512;
    k->act_quant[RP_TYPE_Q8_0] = act_q8_0_avx512;
    k->act_quant[RP_TYPE_Q8_1] = act_q8_1_avx512;
    k->act_quant[RP_TYPE_Q8_K] = act_q8_K_avx512;
    k->vec_dot[RP_TYPE_F16] = vec_dot_f16_avx512;
    k->act_quant[RP_TYPE_F16] = act_f16_avx512;
    k->gemm[RP_TYPE_F16] = &gemm_f16;
    k->vec_dot[RP_TYPE_F32] = vec_dot_f32_avx512;
    k->gemm[RP_TYPE_F32] = &gemm_f32;
    k->gemm[RP_TYPE_Q8_0] = &gemm_q8_0;
    k->gemm[RP_TYPE_Q5_0] = &gemm_q5_0;
    k->gemm[RP_TYPE_Q4_0] = &gemm_q4_0;
    k->gemm[RP_TYPE_Q4_1] = &gemm_q4_1;
    k->gemm[RP_TYPE_Q5_1] = &gemm_q5_1;
    k->gemm[RP_TYPE_IQ4_NL] = &gemm_iq4_nl;
    k->gemm[RP_TYPE_Q2_K] = &gemm_q2_K;
    k->gemm[RP_TYPE_Q3_K] = &gemm_q3_K;
    k->gemm[RP_TYPE_Q4_K] = &gemm_q4_K;
    k->gemm[RP_TYPE_Q5_K] = &gemm_q5_K;
    k->gemm[RP_TYPE_IQ4_XS] = &gemm_iq4_xs;
    k->gemm[RP_TYPE_Q6_K] = &gemm_q6_K;
    k->gemv[RP_TYPE_Q8_0] = gemv_q8_0;
    k->gemv[RP_TYPE_Q4_K] = gemv_q4_K;
    k->gemv[RP_TYPE_Q5_K] = gemv_q5_K;
    k->gemv[RP_TYPE_Q6_K] = gemv_q6_K;
    k->pack[RP_TYPE_Q8_0] = &pack_q8_0;
    k->pack[RP_TYPE_Q4_K] = &pack_q4_K;
    k->pack[RP_TYPE_Q6_K] = &pack_q6_K;
    k->pack_gemm_batch[RP_TYPE_Q4_K] = p4k_gemm_b;
    k->pack_gemm_batch[RP_TYPE_Q6_K] = p6k_gemm_b;
    k->pack[RP_TYPE_Q4_0] = &pack_q4_0;
    k->pack[RP_TYPE_Q5_0] = &pack_q5_0;
    k->pack[RP_TYPE_Q5_1] = &pack_q5_1;
    k->pack[RP_TYPE_Q4_1] = &pack_q4_1;
    k->pack[RP_TYPE_IQ4_NL] = &pack_iq4_nl;
}
