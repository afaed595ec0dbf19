/* AVX-512 row panels for Q2_K, Q3_K and Q5_K (rp_pack_ops): the weights of 16
 * rows side by side per lane of 4 codes, re-laid out once at load, so one
 * 512-bit register of codes serves 16 rows and the activation's 4 bytes are
 * the broadcast operand of vpdpbusd (kernels_avx512.c has the same scheme for
 * Q4_K and Q6_K; its header comment says how products run on panels).
 *
 * The codes are kept unsigned (Q3_K's -4 offset moves into a term of the
 * activation's 16-group sums), the per-group scales and mins are decoded at
 * pack time. Each token's super-block sums are exact integers however they
 * are formed; the float steps per super-block are those of the type's vec_dot
 * (kernels_ref.c), one output per vector lane:
 *   Q2_K (rows):  acc = fma(sum, dw * dx, acc), accm = fma(msum, dmin * dx,
 *                 accm), the result acc - accm;
 *   Q3_K, Q5_K (llama.cpp's tiled order): r = sum * dw, r = fma(-dmin, m, r)
 *                 (Q5_K's mins), acc = fma(r, dx, acc).
 * So every output is exactly the float of vec_dot, whatever the token count. */
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "base/util.h"

#include <immintrin.h>
#include <string.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL8       _Pragma("GCC unroll 8")

static inline uint32_t ld32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __m512i bc32(const void *p) {
    return _mm512_set1_epi32((int)ld32(p));
}

static inline uint32_t pr16(int a, int b) {
    return (uint32_t)(uint16_t)a | (uint32_t)(uint16_t)b << 16;
}

static inline int64_t panels_of(int64_t rows) {
    return (rows + RP_PANEL - 1) / RP_PANEL;
}

/* the first min(16, rows - r0) of 16 results */
static inline void store16(float *y, int64_t r0, int64_t rows, __m512 v) {
    const int64_t c = rows - r0 < 16 ? rows - r0 : 16;
    _mm512_mask_storeu_ps(y + r0, (__mmask16)((1u << c) - 1), v);
}

static inline __m512 d16(const uint8_t *p) {
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)p));
}

/* One token streams the panels once from memory: the lines PK_AHEAD bytes
 * ahead of a block are fetched while it is computed (the next panel's, at the
 * end of one: panels are consecutive). */
#ifndef PK_AHEAD
#define PK_AHEAD 4096
#endif
ALWAYS_INLINE void ahead(const uint8_t *pw, size_t blk, const int TT) {
    if (TT != 1) return;
    for (size_t i = 0; i < blk; i += 64) _mm_prefetch((const char *)pw + PK_AHEAD + i, _MM_HINT_T0);
}

/* block b of row r's panel; the 4-byte groups of a row are [g][16 rows][4] */
static inline const uint8_t *pblock(const void *packed, int64_t nb, int64_t r, int64_t b,
                                    size_t blk) {
    return (const uint8_t *)packed + (size_t)((r / 16) * nb + b) * blk;
}

static inline void put4(uint8_t *o, int g, int r, const uint8_t *src) {
    memcpy(o + (size_t)(g * 16 + r) * 4, src, 4);
}

static inline void get4(uint8_t *dst, const uint8_t *o, int g, int r) {
    memcpy(dst, o + (size_t)(g * 16 + r) * 4, 4);
}

/* bits of v moved so that bit b of each byte lands on bit `to` (16-bit
 * shifts: the bits that cross into the neighbouring byte are masked off by the
 * caller) */
ALWAYS_INLINE __m512i bit_to(__m512i v, int b, int to) {
    return b > to   ? _mm512_srli_epi16(v, (unsigned)(b - to))
           : b < to ? _mm512_slli_epi16(v, (unsigned)(to - b))
                    : v;
}

/* A | (B & C) */
#define OR_AND 0xF8

/* extras per super-block: int16 pairs (bsums_2p, bsums_2p+1), p < 8 */
static size_t pk16_xbytes(int n) {
    return (size_t)(n / QK_K) * 32;
}

static void pk16_xprep(int n, const void *xq, void *xe) {
    const block_q8_K *x = xq;
    uint32_t *o = xe;
    for (int sb = 0; sb < n / QK_K; sb++)
        for (int p = 0; p < 8; p++)
            o[8 * sb + p] = pr16(x[sb].bsums[2 * p], x[sb].bsums[2 * p + 1]);
}

/* gemm over panels [p0, p1) for nt tokens, in tiles of at most TT_MAX (<= 6)
 * tokens */
#define PK_CASE(k, TILE, TT_MAX)                                                                   \
    case k:                                                                                        \
        TILE(pw, nb, x0, ldx, e0, lde, y0, ldy, p * 16, rows, (k) <= (TT_MAX) ? (k) : 1);          \
        break;
#define PK_GEMM(name, TILE, blk, TT_MAX)                                                           \
    static void name(int n, int64_t rows, const void *packed, int64_t p0, int64_t p1, int nt,      \
                     const void *xq, size_t ldx, const void *xe, size_t lde, float *y,             \
                     size_t ldy) {                                                                 \
        const int nb = n / QK_K;                                                                   \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            const uint8_t *pw = (const uint8_t *)packed + (size_t)(p * nb) * (blk);                \
            for (int t0 = 0; t0 < nt; t0 += (TT_MAX)) {                                            \
                const uint8_t *x0 = (const uint8_t *)xq + (size_t)t0 * ldx;                        \
                const uint8_t *e0 = (const uint8_t *)xe + (size_t)t0 * lde;                        \
                float *y0 = y + (size_t)t0 * ldy;                                                  \
                switch (nt - t0 < (TT_MAX) ? nt - t0 : (TT_MAX)) {                                 \
                    PK_CASE(1, TILE, TT_MAX)                                                       \
                    PK_CASE(2, TILE, TT_MAX)                                                       \
                    PK_CASE(3, TILE, TT_MAX)                                                       \
                    PK_CASE(4, TILE, TT_MAX)                                                       \
                    PK_CASE(5, TILE, TT_MAX)                                                       \
                default:                                                                           \
                    TILE(pw, nb, x0, ldx, e0, lde, y0, ldy, p * 16, rows, 6 <= (TT_MAX) ? 6 : 1);  \
                    break;                                                                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

#define TILE_PARAMS                                                                                \
    const uint8_t *pw, int nb, const uint8_t *xq, size_t ldx, const uint8_t *xe, size_t lde,       \
        float *y, size_t ldy, int64_t r0, int64_t rows, const int TT

#define XQ(t, sb) (((const block_q8_K *)(xq + (size_t)(t)*ldx))[sb])

/* ---- Q2_K (rows): per panel and super-block (1344 bytes, as the file)
 *   u8  qs[2 h][8 l][16 rows][4]  bytes 32h+4l.. of each row's qs (bits 2k:
 *                                 elements 128h+32k+4l..)
 *   u8  sc[8 p][16 rows][2]       the scale bytes of groups 2p, 2p+1 (scale
 *                                 in the low nibble, min in the high one)
 *   u16 d[16], dmin[16] */
#define P2K_BYTES 1344
#define P2K_SC    1024
#define P2K_D     1280

static size_t p2k_bytes(int64_t n, int64_t rows) {
    return (size_t)(panels_of(rows) * (n / QK_K)) * P2K_BYTES;
}

static void p2k_pack(int64_t n, int64_t rows, const void *w, size_t ldw, void *dst) {
    const int64_t nsb = n / QK_K;
    for (int64_t p = 0; p < panels_of(rows); p++)
        for (int64_t sb = 0; sb < nsb; sb++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(p * nsb + sb) * P2K_BYTES;
            memset(o, 0, P2K_BYTES);
            for (int r = 0; r < 16; r++) {
                const int64_t row = p * 16 + r;
                if (row >= rows) continue;
                const block_q2_K *x =
                    (const block_q2_K *)((const char *)w + (size_t)row * ldw) + sb;
                for (int i = 0; i < 16; i++) put4(o, i, r, x->qs + 4 * i);
                for (int q = 0; q < 8; q++) {
                    o[P2K_SC + (q * 16 + r) * 2] = x->scales[2 * q];
                    o[P2K_SC + (q * 16 + r) * 2 + 1] = x->scales[2 * q + 1];
                }
                memcpy(o + P2K_D + 2 * r, &x->d, 2);
                memcpy(o + P2K_D + 32 + 2 * r, &x->dmin, 2);
            }
        }
}

static void p2k_unpack(int64_t n, const void *packed, int64_t r, int64_t b0, int64_t b1,
                       void *row) {
    block_q2_K *x = row;
    const int rr = (int)(r % 16);
    for (int64_t sb = b0; sb < b1; sb++, x++) {
        const uint8_t *o = pblock(packed, n / QK_K, r, sb, P2K_BYTES);
        for (int i = 0; i < 16; i++) get4(x->qs + 4 * i, o, i, rr);
        for (int q = 0; q < 8; q++) {
            x->scales[2 * q] = o[P2K_SC + (q * 16 + rr) * 2];
            x->scales[2 * q + 1] = o[P2K_SC + (q * 16 + rr) * 2 + 1];
        }
        memcpy(&x->d, o + P2K_D + 2 * rr, 2);
        memcpy(&x->dmin, o + P2K_D + 32 + 2 * rr, 2);
    }
}

/* One token, the tile's exact sums in fewer vector operations (the ports
 * are the limit, not memory): a register of codes is shifted once, its
 * crumbs 1 and 3 taken in place (4 x the code), so those groups' scaled sums
 * gather apart (s4) and are divided by 4 (exactly) once per super-block. */
ALWAYS_INLINE void p2k_one(const uint8_t *pw, int nb, const uint8_t *xq, const uint8_t *xe,
                           float *y, int64_t r0, int64_t rows) {
    const __m512i m3 = _mm512_set1_epi8(3), mc = _mm512_set1_epi8(0x0C),
                  m4 = _mm512_set1_epi32(0xF);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int sb = 0; sb < nb; sb++, pw += P2K_BYTES) {
        ahead(pw, P2K_BYTES, 1);
        const block_q8_K *xb = (const block_q8_K *)xq + sb;
        const uint32_t *bs = (const uint32_t *)xe + 8 * sb;
        __m512i s1 = _mm512_setzero_si512(), s4 = _mm512_setzero_si512(),
                ms = _mm512_setzero_si512();
        UNROLL8
        for (int h = 0; h < 2; h++) {
            __m512i a[8]; /* group 8h + 2k + (l >= 4) at a[2k + (l >= 4)] */
            UNROLL8
            for (int i = 0; i < 8; i++) a[i] = _mm512_setzero_si512();
            UNROLL8
            for (int l = 0; l < 8; l++) {
                const __m512i w = _mm512_load_si512(pw + (size_t)(h * 8 + l) * 64);
                const __m512i hi = _mm512_srli_epi16(w, 4);
                const int8_t *xs = xb->qs + 128 * h + 4 * l;
                const int j = l >= 4;
                a[j] = _mm512_dpbusd_epi32(a[j], _mm512_and_si512(w, m3), bc32(xs));
                a[2 + j] = _mm512_dpbusd_epi32(a[2 + j], _mm512_and_si512(w, mc), bc32(xs + 32));
                a[4 + j] = _mm512_dpbusd_epi32(a[4 + j], _mm512_and_si512(hi, m3), bc32(xs + 64));
                a[6 + j] = _mm512_dpbusd_epi32(a[6 + j], _mm512_and_si512(hi, mc), bc32(xs + 96));
            }
            UNROLL8
            for (int k = 0; k < 4; k++) {
                const int c = 4 * h + k;
                const __m512i s16 = _mm512_cvtepu8_epi16(
                    _mm256_load_si256((const __m256i *)(pw + P2K_SC + 32 * c)));
                const __m512i se = _mm512_and_si512(s16, m4),
                              so = _mm512_and_si512(_mm512_srli_epi32(s16, 16), m4);
                if (k % 2)
                    s4 = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(s4, a[2 * k], se), a[2 * k + 1],
                                             so);
                else
                    s1 = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(s1, a[2 * k], se), a[2 * k + 1],
                                             so);
                ms = _mm512_dpwssd_epi32(ms, _mm512_srli_epi16(s16, 4),
                                         _mm512_set1_epi32((int)bs[c]));
            }
        }
        const __m512i sum = _mm512_add_epi32(s1, _mm512_srai_epi32(s4, 2));
        const __m512 dx = _mm512_set1_ps(xb->d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d16(pw + P2K_D), dx), acc);
        accm =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(d16(pw + P2K_D + 32), dx), accm);
    }
    store16(y, r0, rows, _mm512_sub_ps(acc, accm));
}

/* per token: sum = sum over groups g of sc_g * (codes . x over g) (4 lanes of
 * vpdpbusd per group; a group's sum, |.| <= 16 * 3 * 128, is an int16 and its
 * scale the dword (sc, 0), so one vpdpwssd adds the exact product), msum =
 * sum of min_g * bsums_g */
ALWAYS_INLINE void p2k_tile(TILE_PARAMS) {
    if (TT == 1) {
        (void)ldx;
        (void)lde;
        (void)ldy;
        p2k_one(pw, nb, xq, xe, y, r0, rows);
        return;
    }
    const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi32(0xF);
    __m512 acc[4], accm[4];
    UNROLL8
    for (int t = 0; t < TT; t++) acc[t] = accm[t] = _mm512_setzero_ps();
    for (int sb = 0; sb < nb; sb++, pw += P2K_BYTES) {
        ahead(pw, P2K_BYTES, TT);
        __m512i sum[4], ms[4];
        UNROLL8
        for (int t = 0; t < TT; t++) sum[t] = ms[t] = _mm512_setzero_si512();
        UNROLL8
        for (int c = 0; c < 8; c++) { /* h = c / 4, k = c % 4: groups 2c, 2c + 1 */
            const int h = c / 4, k = c % 4;
            __m512i a0[4], a1[4];
            UNROLL8
            for (int t = 0; t < TT; t++) a0[t] = a1[t] = _mm512_setzero_si512();
            UNROLL8
            for (int l = 0; l < 8; l++) {
                const __m512i w = _mm512_load_si512(pw + (size_t)(h * 8 + l) * 64);
                const __m512i v = _mm512_and_si512(_mm512_srli_epi16(w, (unsigned)(2 * k)), m3);
                UNROLL8
                for (int t = 0; t < TT; t++) {
                    const __m512i xv = bc32(XQ(t, sb).qs + 128 * h + 32 * k + 4 * l);
                    if (l < 4)
                        a0[t] = _mm512_dpbusd_epi32(a0[t], v, xv);
                    else
                        a1[t] = _mm512_dpbusd_epi32(a1[t], v, xv);
                }
            }
            const __m512i s16 =
                _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(pw + P2K_SC + 32 * c)));
            const __m512i se = _mm512_and_si512(s16, m4),
                          so = _mm512_and_si512(_mm512_srli_epi32(s16, 16), m4);
            const __m512i mn = _mm512_srli_epi16(s16, 4);
            UNROLL8
            for (int t = 0; t < TT; t++) {
                sum[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sum[t], a0[t], se), a1[t], so);
                const uint32_t *bs = (const uint32_t *)(xe + (size_t)t * lde) + 8 * sb;
                ms[t] = _mm512_dpwssd_epi32(ms[t], mn, _mm512_set1_epi32((int)bs[c]));
            }
        }
        const __m512 dw = d16(pw + P2K_D), dmw = d16(pw + P2K_D + 32);
        UNROLL8
        for (int t = 0; t < TT; t++) {
            const __m512 dx = _mm512_set1_ps(XQ(t, sb).d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(dw, dx), acc[t]);
            accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ms[t]), _mm512_mul_ps(dmw, dx), accm[t]);
        }
    }
    UNROLL8
    for (int t = 0; t < TT; t++)
        store16(y + (size_t)t * ldy, r0, rows, _mm512_sub_ps(acc[t], accm[t]));
}

PK_GEMM(p2k_gemm, p2k_tile, P2K_BYTES, 4)

static const rp_pack_ops pack_q2_K = {p2k_bytes,   p2k_pack,   p2k_unpack,
                                      pk16_xbytes, pk16_xprep, p2k_gemm};

/* ---- Q3_K (tiled order): per panel and super-block (1856 bytes, padded to
 * cache lines)
 *   u8  qs[2 h][8 l][16 rows][4]  bytes 32h+4l.. of each row's qs
 *   u8  hm[8 l][16 rows][4]       bytes 4l.. of hmask, bits 1, 2 and 5, 6
 *                                 swapped (P3K_BIT: where the bit 4h+k of
 *                                 elements 128h+32k+4l.. is)
 *   i8  sc[8 p][16 rows][2]       the signed 6-bit scales of groups 2p, 2p+1
 *   u16 d[16]
 * A code's value is u - 4 with u = low bits + 4 * high bit (0..7): the sum
 * over a super-block is sum_g sc_g (u . x)_g - 4 sum_g sc_g bsums_g. */
#define P3K_BYTES 1856
#define P3K_HM    1024
#define P3K_SC    1536
#define P3K_D     1792

/* the one-token kernel takes chunk c's high bits from two shifted copies per
 * half: bits (0, 2), (1, 3), (4, 6), (5, 7) hold chunks (0, 1), (2, 3), (4, 5),
 * (6, 7) */
#define P3K_BIT(c) ((c) == 1 || (c) == 5 ? (c) + 1 : (c) == 2 || (c) == 6 ? (c)-1 : (c))

static inline uint8_t p3k_swap(uint8_t b) {
    return (uint8_t)((b & 0x99) | (b & 0x22) << 1 | (b & 0x44) >> 1);
}

static size_t p3k_bytes(int64_t n, int64_t rows) {
    return (size_t)(panels_of(rows) * (n / QK_K)) * P3K_BYTES;
}

static void p3k_pack(int64_t n, int64_t rows, const void *w, size_t ldw, void *dst) {
    const int64_t nsb = n / QK_K;
    for (int64_t p = 0; p < panels_of(rows); p++)
        for (int64_t sb = 0; sb < nsb; sb++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(p * nsb + sb) * P3K_BYTES;
            memset(o, 0, P3K_BYTES);
            for (int r = 0; r < 16; r++) {
                const int64_t row = p * 16 + r;
                if (row >= rows) continue;
                const block_q3_K *x =
                    (const block_q3_K *)((const char *)w + (size_t)row * ldw) + sb;
                for (int i = 0; i < 16; i++) put4(o, i, r, x->qs + 4 * i);
                for (int l = 0; l < 8; l++) {
                    uint8_t hm[4];
                    for (int j = 0; j < 4; j++) hm[j] = p3k_swap(x->hmask[4 * l + j]);
                    put4(o + P3K_HM, l, r, hm);
                }
                for (int g = 0; g < 16; g++)
                    o[P3K_SC + ((g / 2) * 16 + r) * 2 + g % 2] =
                        (uint8_t)(int8_t)rp_q3k_scale(g, x->scales);
                memcpy(o + P3K_D + 2 * r, &x->d, 2);
            }
        }
}

/* rp_q3k_scale inverted: the 16 6-bit scales (+32) back into 12 bytes */
static void p3k_unpack(int64_t n, const void *packed, int64_t r, int64_t b0, int64_t b1,
                       void *row) {
    block_q3_K *x = row;
    const int rr = (int)(r % 16);
    for (int64_t sb = b0; sb < b1; sb++, x++) {
        const uint8_t *o = pblock(packed, n / QK_K, r, sb, P3K_BYTES);
        for (int i = 0; i < 16; i++) get4(x->qs + 4 * i, o, i, rr);
        for (int l = 0; l < 8; l++) get4(x->hmask + 4 * l, o + P3K_HM, l, rr);
        for (int i = 0; i < 32; i++) x->hmask[i] = p3k_swap(x->hmask[i]);
        int v[16];
        for (int g = 0; g < 16; g++)
            v[g] = (int8_t)o[P3K_SC + ((g / 2) * 16 + rr) * 2 + g % 2] + 32;
        for (int j = 0; j < 8; j++) x->scales[j] = (uint8_t)((v[j] & 0xF) | (v[j + 8] & 0xF) << 4);
        for (int i = 0; i < 4; i++)
            x->scales[8 + i] = (uint8_t)((v[i] >> 4) | (v[i + 4] >> 4) << 2 | (v[i + 8] >> 4) << 4 |
                                         (v[i + 12] >> 4) << 6);
        memcpy(&x->d, o + P3K_D + 2 * rr, 2);
    }
}

/* One token, as p2k_one: codes shifted once per register, crumbs 1 and 3 in
 * place with their high bit at bit 4 (4 x the code: those groups' sums are
 * divided by 4 exactly before the scale), the high bits of a half from two
 * shifted copies of hm. */
ALWAYS_INLINE void p3k_one(const uint8_t *pw, int nb, const uint8_t *xq, const uint8_t *xe,
                           float *y, int64_t r0, int64_t rows) {
    const __m512i m3 = _mm512_set1_epi8(3), mc = _mm512_set1_epi8(0x0C), b2 = _mm512_set1_epi8(4),
                  b4 = _mm512_set1_epi8(0x10), lo16 = _mm512_set1_epi32(0xFFFF);
    __m512 acc = _mm512_setzero_ps();
    for (int sb = 0; sb < nb; sb++, pw += P3K_BYTES) {
        ahead(pw, P3K_BYTES, 1);
        const block_q8_K *xb = (const block_q8_K *)xq + sb;
        const uint32_t *bs = (const uint32_t *)xe + 8 * sb;
        __m512i sum = _mm512_setzero_si512(), off = _mm512_setzero_si512();
        UNROLL8
        for (int h = 0; h < 2; h++) {
            __m512i a[8]; /* group 8h + 2k + (l >= 4) at a[2k + (l >= 4)] */
            UNROLL8
            for (int i = 0; i < 8; i++) a[i] = _mm512_setzero_si512();
            UNROLL8
            for (int l = 0; l < 8; l++) {
                const __m512i w = _mm512_load_si512(pw + (size_t)(h * 8 + l) * 64);
                const __m512i hm = _mm512_load_si512(pw + P3K_HM + (size_t)l * 64);
                const __m512i hi = _mm512_srli_epi16(w, 4);
                /* chunk 4h + k's high bit at bit 2 (k even) or 4 (k odd) */
                const __m512i e = h ? _mm512_srli_epi16(hm, 2) : _mm512_slli_epi16(hm, 2);
                const __m512i o = h ? _mm512_srli_epi16(hm, 3) : _mm512_slli_epi16(hm, 1);
                const int8_t *xs = xb->qs + 128 * h + 4 * l;
                const int j = l >= 4;
                a[j] = _mm512_dpbusd_epi32(
                    a[j], _mm512_ternarylogic_epi32(_mm512_and_si512(w, m3), e, b2, OR_AND),
                    bc32(xs));
                a[2 + j] = _mm512_dpbusd_epi32(
                    a[2 + j], _mm512_ternarylogic_epi32(_mm512_and_si512(w, mc), e, b4, OR_AND),
                    bc32(xs + 32));
                a[4 + j] = _mm512_dpbusd_epi32(
                    a[4 + j], _mm512_ternarylogic_epi32(_mm512_and_si512(hi, m3), o, b2, OR_AND),
                    bc32(xs + 64));
                a[6 + j] = _mm512_dpbusd_epi32(
                    a[6 + j], _mm512_ternarylogic_epi32(_mm512_and_si512(hi, mc), o, b4, OR_AND),
                    bc32(xs + 96));
            }
            UNROLL8
            for (int k = 0; k < 4; k++) {
                const int c = 4 * h + k;
                const __m512i s16 = _mm512_cvtepi8_epi16(
                    _mm256_load_si256((const __m256i *)(pw + P3K_SC + 32 * c)));
                const __m512i ae = k % 2 ? _mm512_srai_epi32(a[2 * k], 2) : a[2 * k];
                const __m512i ao = k % 2 ? _mm512_srai_epi32(a[2 * k + 1], 2) : a[2 * k + 1];
                sum = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sum, ae, _mm512_and_si512(s16, lo16)),
                                          ao, _mm512_srli_epi32(s16, 16));
                off = _mm512_dpwssd_epi32(off, s16, _mm512_set1_epi32((int)bs[c]));
            }
        }
        const __m512i s = _mm512_sub_epi32(sum, _mm512_slli_epi32(off, 2));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), d16(pw + P3K_D)),
                              _mm512_set1_ps(xb->d), acc);
    }
    store16(y, r0, rows, acc);
}

/* as Q2_K's tile, the sums of groups (|.| <= 16 * 7 * 128) times their scales
 * (sc, 0) by vpdpwssd */
ALWAYS_INLINE void p3k_tile(TILE_PARAMS) {
    if (TT == 1) {
        (void)ldx;
        (void)lde;
        (void)ldy;
        p3k_one(pw, nb, xq, xe, y, r0, rows);
        return;
    }
    const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4);
    __m512 acc[4];
    UNROLL8
    for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
    for (int sb = 0; sb < nb; sb++, pw += P3K_BYTES) {
        ahead(pw, P3K_BYTES, TT);
        __m512i sum[4], off[4];
        UNROLL8
        for (int t = 0; t < TT; t++) sum[t] = off[t] = _mm512_setzero_si512();
        UNROLL8
        for (int c = 0; c < 8; c++) { /* h = c / 4, k = c % 4: groups 2c, 2c + 1 */
            const int h = c / 4, k = c % 4;
            __m512i a0[4], a1[4];
            UNROLL8
            for (int t = 0; t < TT; t++) a0[t] = a1[t] = _mm512_setzero_si512();
            UNROLL8
            for (int l = 0; l < 8; l++) {
                const __m512i w = _mm512_load_si512(pw + (size_t)(h * 8 + l) * 64);
                const __m512i hm = _mm512_load_si512(pw + P3K_HM + (size_t)l * 64);
                const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(w, (unsigned)(2 * k)), m3);
                const __m512i u =
                    _mm512_ternarylogic_epi32(lo, bit_to(hm, P3K_BIT(c), 2), m4, OR_AND);
                UNROLL8
                for (int t = 0; t < TT; t++) {
                    const __m512i xv = bc32(XQ(t, sb).qs + 128 * h + 32 * k + 4 * l);
                    if (l < 4)
                        a0[t] = _mm512_dpbusd_epi32(a0[t], u, xv);
                    else
                        a1[t] = _mm512_dpbusd_epi32(a1[t], u, xv);
                }
            }
            const __m512i s16 =
                _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *)(pw + P3K_SC + 32 * c)));
            const __m512i se = _mm512_and_si512(s16, _mm512_set1_epi32(0xFFFF)),
                          so = _mm512_srli_epi32(s16, 16);
            UNROLL8
            for (int t = 0; t < TT; t++) {
                sum[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sum[t], a0[t], se), a1[t], so);
                const uint32_t *bs = (const uint32_t *)(xe + (size_t)t * lde) + 8 * sb;
                off[t] = _mm512_dpwssd_epi32(off[t], s16, _mm512_set1_epi32((int)bs[c]));
            }
        }
        const __m512 dw = d16(pw + P3K_D);
        UNROLL8
        for (int t = 0; t < TT; t++) {
            const __m512i s = _mm512_sub_epi32(sum[t], _mm512_slli_epi32(off[t], 2));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dw),
                                     _mm512_set1_ps(XQ(t, sb).d), acc[t]);
        }
    }
    UNROLL8
    for (int t = 0; t < TT; t++) store16(y + (size_t)t * ldy, r0, rows, acc[t]);
}

PK_GEMM(p3k_gemm, p3k_tile, P3K_BYTES, 4)

static const rp_pack_ops pack_q3_K = {p3k_bytes,   p3k_pack,   p3k_unpack,
                                      pk16_xbytes, pk16_xprep, p3k_gemm};

/* ---- Q5_K (tiled order): per panel and super-block (2880 bytes)
 *   u8  qs[4 c][8 l][16 rows][4]  bytes 32c+4l.. of each row's qs (low
 *                                 nibbles: group 2c, high: group 2c+1)
 *   u8  qh[8 l][16 rows][4]       bytes 4l.. of qh (bit g: group g)
 *   u8  sc[8 g][16 rows]          6-bit group scales
 *   u8  mn[4 q][16 rows][2]       6-bit mins of groups 2q, 2q+1
 *   u16 d[16], dmin[16] */
#define P5K_BYTES 2880
#define P5K_QH    2048
#define P5K_SC    2560
#define P5K_MN    2688
#define P5K_D     2816

/* the 8 6-bit scales and mins of a Q4_K / Q5_K block */
static void k4_decode(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            sc[j] = s[j] & 63;
            mn[j] = s[j + 4] & 63;
        } else {
            sc[j] = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
            mn[j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
        }
    }
}

static size_t p5k_bytes(int64_t n, int64_t rows) {
    return (size_t)(panels_of(rows) * (n / QK_K)) * P5K_BYTES;
}

static void p5k_pack(int64_t n, int64_t rows, const void *w, size_t ldw, void *dst) {
    const int64_t nsb = n / QK_K;
    for (int64_t p = 0; p < panels_of(rows); p++)
        for (int64_t sb = 0; sb < nsb; sb++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(p * nsb + sb) * P5K_BYTES;
            memset(o, 0, P5K_BYTES);
            for (int r = 0; r < 16; r++) {
                const int64_t row = p * 16 + r;
                if (row >= rows) continue;
                const block_q5_K *x =
                    (const block_q5_K *)((const char *)w + (size_t)row * ldw) + sb;
                for (int i = 0; i < 32; i++) put4(o, i, r, x->qs + 4 * i);
                for (int l = 0; l < 8; l++) put4(o + P5K_QH, l, r, x->qh + 4 * l);
                uint8_t sc[8], mn[8];
                k4_decode(x->scales, sc, mn);
                for (int g = 0; g < 8; g++) {
                    o[P5K_SC + g * 16 + r] = sc[g];
                    o[P5K_MN + ((g / 2) * 16 + r) * 2 + g % 2] = mn[g];
                }
                memcpy(o + P5K_D + 2 * r, &x->d, 2);
                memcpy(o + P5K_D + 32 + 2 * r, &x->dmin, 2);
            }
        }
}

/* k4_decode inverted */
static void p5k_unpack(int64_t n, const void *packed, int64_t r, int64_t b0, int64_t b1,
                       void *row) {
    block_q5_K *x = row;
    const int rr = (int)(r % 16);
    for (int64_t sb = b0; sb < b1; sb++, x++) {
        const uint8_t *o = pblock(packed, n / QK_K, r, sb, P5K_BYTES);
        for (int i = 0; i < 32; i++) get4(x->qs + 4 * i, o, i, rr);
        for (int l = 0; l < 8; l++) get4(x->qh + 4 * l, o + P5K_QH, l, rr);
        uint8_t sc[8], mn[8];
        for (int g = 0; g < 8; g++) {
            sc[g] = o[P5K_SC + g * 16 + rr];
            mn[g] = o[P5K_MN + ((g / 2) * 16 + rr) * 2 + g % 2];
        }
        for (int j = 0; j < 4; j++) {
            x->scales[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
            x->scales[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
            x->scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
        }
        memcpy(&x->d, o + P5K_D + 2 * rr, 2);
        memcpy(&x->dmin, o + P5K_D + 32 + 2 * rr, 2);
    }
}

/* extras per super-block: int16 pairs (S_2q, S_2q+1) of the 32-group sums */
static size_t p5k_xbytes(int n) {
    return (size_t)(n / QK_K) * 16;
}

static void p5k_xprep(int n, const void *xq, void *xe) {
    const block_q8_K *x = xq;
    uint32_t *o = xe;
    for (int sb = 0; sb < n / QK_K; sb++)
        for (int q = 0; q < 4; q++)
            o[4 * sb + q] = pr16(x[sb].bsums[4 * q] + x[sb].bsums[4 * q + 1],
                                 x[sb].bsums[4 * q + 2] + x[sb].bsums[4 * q + 3]);
}

ALWAYS_INLINE void p5k_tile(TILE_PARAMS) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m16 = _mm512_set1_epi8(0x10);
    __m512 acc[6];
    UNROLL8
    for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
    for (int sb = 0; sb < nb; sb++, pw += P5K_BYTES) {
        ahead(pw, P5K_BYTES, TT);
        __m512i sum[6], ms[6];
        UNROLL8
        for (int t = 0; t < TT; t++) sum[t] = ms[t] = _mm512_setzero_si512();
        UNROLL8
        for (int c = 0; c < 4; c++) {
            __m512i a0[6], a1[6];
            UNROLL8
            for (int t = 0; t < TT; t++) a0[t] = a1[t] = _mm512_setzero_si512();
            UNROLL8
            for (int l = 0; l < 8; l++) {
                const __m512i w = _mm512_load_si512(pw + (size_t)(c * 8 + l) * 64);
                const __m512i qh = _mm512_load_si512(pw + P5K_QH + (size_t)l * 64);
                const __m512i lo = _mm512_ternarylogic_epi32(_mm512_and_si512(w, m4),
                                                             bit_to(qh, 2 * c, 4), m16, OR_AND);
                const __m512i hi =
                    _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(w, 4), m4),
                                              bit_to(qh, 2 * c + 1, 4), m16, OR_AND);
                UNROLL8
                for (int t = 0; t < TT; t++) {
                    const int8_t *xs = XQ(t, sb).qs + 64 * c + 4 * l;
                    a0[t] = _mm512_dpbusd_epi32(a0[t], lo, bc32(xs));
                    a1[t] = _mm512_dpbusd_epi32(a1[t], hi, bc32(xs + 32));
                }
            }
            const __m512i sc0 =
                _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(pw + P5K_SC + 32 * c)));
            const __m512i sc1 =
                _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(pw + P5K_SC + 32 * c + 16)));
            UNROLL8
            for (int t = 0; t < TT; t++)
                sum[t] = _mm512_add_epi32(sum[t], _mm512_add_epi32(_mm512_mullo_epi32(a0[t], sc0),
                                                                   _mm512_mullo_epi32(a1[t], sc1)));
        }
        UNROLL8
        for (int c = 0; c < 4; c++) {
            const __m512i mn =
                _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(pw + P5K_MN + 32 * c)));
            UNROLL8
            for (int t = 0; t < TT; t++) {
                const uint32_t *S = (const uint32_t *)(xe + (size_t)t * lde) + 4 * sb;
                ms[t] = _mm512_dpwssd_epi32(ms[t], mn, _mm512_set1_epi32((int)S[c]));
            }
        }
        const __m512 dw = d16(pw + P5K_D), dmw = d16(pw + P5K_D + 32);
        UNROLL8
        for (int t = 0; t < TT; t++) {
            __m512 r = _mm512_mul_ps(_mm512_cvtepi32_ps(sum[t]), dw);
            r = _mm512_fnmadd_ps(dmw, _mm512_cvtepi32_ps(ms[t]), r);
            acc[t] = _mm512_fmadd_ps(r, _mm512_set1_ps(XQ(t, sb).d), acc[t]);
        }
    }
    UNROLL8
    for (int t = 0; t < TT; t++) store16(y + (size_t)t * ldy, r0, rows, acc[t]);
}

PK_GEMM(p5k_gemm, p5k_tile, P5K_BYTES, 6)

static const rp_pack_ops pack_q5_K = {p5k_bytes,  p5k_pack,  p5k_unpack,
                                      p5k_xbytes, p5k_xprep, p5k_gemm};

void rp_packk_fill_avx512(rp_kernels *k) {
    k->pack[RP_TYPE_Q2_K] = &pack_q2_K;
    k->pack[RP_TYPE_Q3_K] = &pack_q3_K;
    k->pack[RP_TYPE_Q5_K] = &pack_q5_K;
}
