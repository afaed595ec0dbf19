/* BF16 weights with AVX512_BF16 (vdpbf16ps), compiled with -mavx512bf16 on
 * top of the AVX-512 flags and installed only when cpuid has it
 * (rp_cpu_has_avx512bf16): the activations are BF16 (rp_kern_act_type) and
 * every output is the scalar twin's float (kernels_ref.c): one 16-lane
 * accumulator per output over steps of 32 inputs, the row's n % 32 tail
 * masked to zero pairs, _mm512_reduce_add_ps. That is llama.cpp's x86
 * tinyBLAS arithmetic for BF16 (one accumulator per output, k in steps of
 * 32): vec_dot with vdpbf16ps, the gemm with it too
 * or with two FMAs per instruction's pair (the same floats, below), which
 * ever this CPU issues faster (rp_bf16_dp_fast), so a batch equals its
 * tokens one at a time. */
#include "kernels/kernels.h"
#include "base/util.h"

#include <immintrin.h>
#include <string.h>
#include <time.h>

#define UNROLL8 _Pragma("GCC unroll 8")

static inline __m512bh ld(const uint16_t *p) {
    return (__m512bh)_mm512_loadu_si512((const void *)p);
}

static inline __m512bh ldm(const uint16_t *p, __mmask32 m) {
    return (__m512bh)_mm512_maskz_loadu_epi16(m, p);
}

static inline __mmask32 tail_mask(int n) {
    const int t = n % 32;
    return t ? (__mmask32)((1u << t) - 1) : (__mmask32)0;
}

static void vec_dot_bf16_avx512(int n, float *s, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    const int nk = n - n % 32;
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < nk; i += 32) acc = _mm512_dpbf16_ps(acc, ld(a + i), ld(b + i));
    if (nk < n) {
        const __mmask32 m = tail_mask(n);
        acc = _mm512_dpbf16_ps(acc, ldm(a + nk, m), ldm(b + nk, m));
    }
    *s = _mm512_reduce_add_ps(acc);
}

/* No multi-row gemv: row after row through vec_dot generates faster (as
 * for F16, kernels_avx512.c; BF16 tg32 on Zen 4, 3 alternations: -t 1
 * 11.8-12.8 t/s with the 4-row gemv against 15.8-19.5, -t 2 17.0-20.4
 * against 23.1-24.7). */

/* The gemm in vdpbf16ps: a tile of RM rows x RN <= 6 tokens, the rows' and
 * the tokens' bf16 read as they are (no packing), one accumulator per
 * output as vec_dot. Where the instruction issues at about vfmadd231ps's
 * rate (Zen 4) this is the faster gemm; where it does not (Zen 5, below),
 * the FMA gemm is. bf16_dp_fast measures which, once. */
static inline __attribute__((always_inline)) void dtile(int RM, int RN, int n, const uint16_t **a,
                                                        const uint16_t **b, float *y, size_t ldy) {
    const int nk = n - n % 32;
    __m512 c[4][6];
    UNROLL8
    for (int i = 0; i < RM; i++) UNROLL8
    for (int j = 0; j < RN; j++) c[i][j] = _mm512_setzero_ps();
    for (int k = 0; k < nk; k += 32) {
        __m512bh av[4];
        UNROLL8
        for (int i = 0; i < RM; i++) av[i] = ld(a[i] + k);
        UNROLL8
        for (int j = 0; j < RN; j++) {
            const __m512bh bv = ld(b[j] + k);
            UNROLL8
            for (int i = 0; i < RM; i++) c[i][j] = _mm512_dpbf16_ps(c[i][j], av[i], bv);
        }
    }
    if (nk < n) {
        const __mmask32 m = tail_mask(n);
        __m512bh av[4];
        UNROLL8
        for (int i = 0; i < RM; i++) av[i] = ldm(a[i] + nk, m);
        UNROLL8
        for (int j = 0; j < RN; j++) {
            const __m512bh bv = ldm(b[j] + nk, m);
            UNROLL8
            for (int i = 0; i < RM; i++) c[i][j] = _mm512_dpbf16_ps(c[i][j], av[i], bv);
        }
    }
    UNROLL8
    for (int j = 0; j < RN; j++) UNROLL8
    for (int i = 0; i < RM; i++) y[(size_t)j * ldy + (size_t)i] = _mm512_reduce_add_ps(c[i][j]);
}

#define DTILES(RM)                                                                                 \
    static void dtile_##RM(int rn, int n, const uint16_t **a, const uint16_t **b, float *y,        \
                           size_t ldy) {                                                           \
        switch (rn) {                                                                              \
        case 6:                                                                                    \
            dtile(RM, 6, n, a, b, y, ldy);                                                         \
            break;                                                                                 \
        case 5:                                                                                    \
            dtile(RM, 5, n, a, b, y, ldy);                                                         \
            break;                                                                                 \
        case 4:                                                                                    \
            dtile(RM, 4, n, a, b, y, ldy);                                                         \
            break;                                                                                 \
        case 3:                                                                                    \
            dtile(RM, 3, n, a, b, y, ldy);                                                         \
            break;                                                                                 \
        case 2:                                                                                    \
            dtile(RM, 2, n, a, b, y, ldy);                                                         \
            break;                                                                                 \
        default:                                                                                   \
            dtile(RM, 1, n, a, b, y, ldy);                                                         \
            break;                                                                                 \
        }                                                                                          \
    }
DTILES(4)
DTILES(1)

/* Rows in tiles of 4 (the last rows one by one), each against every token in
 * tiles of 6: the tile's rows stay in L1, the chunk of tokens in L2; the
 * next rows prefetched to L2 meanwhile. */
static void gemm_run_bf16_dp(int n, int nr, const void *w, size_t ldw, const void *xp, size_t ldx,
                             int cnt, float *y, size_t ldy, void *scratch) {
    (void)scratch;
    for (int r = 0; r < nr;) {
        const int rm = nr - r >= 4 ? 4 : 1;
        if (r + rm < nr) rp_prefetch_rows(w, ldw, r + rm, RP_MIN(4, nr - r - rm));
        const uint16_t *a[4];
        for (int i = 0; i < rm; i++)
            a[i] = (const uint16_t *)((const char *)w + (size_t)(r + i) * ldw);
        for (int t = 0; t < cnt; t += 6) {
            const int rn = cnt - t < 6 ? cnt - t : 6;
            const uint16_t *b[6];
            for (int j = 0; j < rn; j++)
                b[j] = (const uint16_t *)((const char *)xp + (size_t)(t + j) * ldx);
            float *yt = y + (size_t)t * ldy + (size_t)r;
            (rm == 4 ? dtile_4 : dtile_1)(rn, n, a, b, yt, ldy);
        }
        r += rm;
    }
}

static size_t bf16_dp_scratch(int n) {
    (void)n;
    return 64;
}

static const rp_gemm_ops gemm_bf16_dp = {NULL, NULL, bf16_dp_scratch, gemm_run_bf16_dp};

/* The gemm does not use vdpbf16ps: on Zen 5 it issues at a quarter of the
 * rate of vfmadd231ps (measured: 1.3 G/s against 5.3 G/s on one core), so
 * two FMAs per instruction's pair of products are twice as fast. They give
 * its floats exactly (the scalar twin's emulation: per lane the odd input's
 * product then the even one's, each fused, bf16 subnormals as zero): a row
 * tile is split once into scratch, per 32 inputs its 16 odd then its 16 even
 * values as F32 (zero past n), and each token's 32 values are split as
 * read. */
static inline __attribute__((always_inline)) void ftile(int RM, int RN, int n, const float **a,
                                                        const uint16_t **b, float *y, size_t ldy) {
    const int nk = n - n % 32;
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u), eo = _mm512_set1_epi32(0x7f800000),
                  ee = _mm512_set1_epi32(0x7f80);
    __m512 c[4][4];
    UNROLL8
    for (int i = 0; i < RM; i++) UNROLL8
    for (int j = 0; j < RN; j++) c[i][j] = _mm512_setzero_ps();
    for (int k = 0; k < n; k += 32) {
        __m512 ao[4], ae[4];
        UNROLL8
        for (int i = 0; i < RM; i++) {
            ao[i] = _mm512_load_ps(a[i] + k);
            ae[i] = _mm512_load_ps(a[i] + k + 16);
        }
        UNROLL8
        for (int j = 0; j < RN; j++) {
            const __m512i v = k < nk ? _mm512_loadu_si512((const void *)(b[j] + k))
                                     : _mm512_maskz_loadu_epi16(tail_mask(n), b[j] + k);
            const __m512 bo =
                _mm512_castsi512_ps(_mm512_maskz_and_epi32(_mm512_test_epi32_mask(v, eo), v, hi));
            const __m512 be =
                _mm512_castsi512_ps(_mm512_maskz_slli_epi32(_mm512_test_epi32_mask(v, ee), v, 16));
            UNROLL8
            for (int i = 0; i < RM; i++)
                c[i][j] = _mm512_fmadd_ps(ae[i], be, _mm512_fmadd_ps(ao[i], bo, c[i][j]));
        }
    }
    UNROLL8
    for (int j = 0; j < RN; j++) UNROLL8
    for (int i = 0; i < RM; i++) y[(size_t)j * ldy + (size_t)i] = _mm512_reduce_add_ps(c[i][j]);
}

#define FTILES(RM)                                                                                 \
    static void ftile_##RM(int rn, int n, const float **a, const uint16_t **b, float *y,           \
                           size_t ldy) {                                                           \
        switch (rn) {                                                                              \
        case 4:                                                                                    \
            ftile(RM, 4, n, a, b, y, ldy);                                                         \
            break;                                                                                 \
        case 3:                                                                                    \
            ftile(RM, 3, n, a, b, y, ldy);                                                         \
            break;                                                                                 \
        case 2:                                                                                    \
            ftile(RM, 2, n, a, b, y, ldy);                                                         \
            break;                                                                                 \
        default:                                                                                   \
            ftile(RM, 1, n, a, b, y, ldy);                                                         \
            break;                                                                                 \
        }                                                                                          \
    }
FTILES(4)
FTILES(1)

/* row r's bf16 split into dst: per 32 inputs 16 odd then 16 even values */
static void split_row(int n, const uint16_t *src, float *dst) {
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u), eo = _mm512_set1_epi32(0x7f800000),
                  ee = _mm512_set1_epi32(0x7f80);
    for (int k = 0; k < n; k += 32) {
        const __m512i v = k + 32 <= n ? _mm512_loadu_si512((const void *)(src + k))
                                      : _mm512_maskz_loadu_epi16(tail_mask(n), src + k);
        _mm512_store_si512((void *)(dst + k),
                           _mm512_maskz_and_epi32(_mm512_test_epi32_mask(v, eo), v, hi));
        _mm512_store_si512((void *)(dst + k + 16),
                           _mm512_maskz_slli_epi32(_mm512_test_epi32_mask(v, ee), v, 16));
    }
}

/* Rows in tiles of 4 (the last rows one by one), each tile split once and run
 * against every token in tiles of 4: the tile's rows stay in L1, the chunk of
 * tokens in L2. */
static void gemm_run_bf16(int n, int nr, const void *w, size_t ldw, const void *xp, size_t ldx,
                          int cnt, float *y, size_t ldy, void *scratch) {
    const size_t stride = rp_align_up((uint64_t)n, 32);
    float *wf = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    for (int r = 0; r < nr;) {
        const int rm = nr - r >= 4 ? 4 : 1;
        if (r + rm < nr) rp_prefetch_rows(w, ldw, r + rm, RP_MIN(4, nr - r - rm));
        const float *a[4];
        for (int i = 0; i < rm; i++) {
            split_row(n, (const uint16_t *)((const char *)w + (size_t)(r + i) * ldw),
                      wf + (size_t)i * stride);
            a[i] = wf + (size_t)i * stride;
        }
        for (int t = 0; t < cnt; t += 4) {
            const int rn = cnt - t < 4 ? cnt - t : 4;
            const uint16_t *b[4];
            for (int j = 0; j < rn; j++)
                b[j] = (const uint16_t *)((const char *)xp + (size_t)(t + j) * ldx);
            float *yt = y + (size_t)t * ldy + (size_t)r;
            if (rm == 4)
                ftile_4(rn, n, a, b, yt, ldy);
            else
                ftile_1(rn, n, a, b, yt, ldy);
        }
        r += rm;
    }
}

static size_t bf16_scratch(int n) {
    return 4 * rp_align_up((uint64_t)n, 32) * sizeof(float) + 64;
}

static const rp_gemm_ops gemm_bf16 = {NULL, NULL, bf16_scratch, gemm_run_bf16};

/* rp_fp32_to_bf16 on 16 lanes: round to nearest even, NaN made quiet */
static void act_bf16_avx512(const float *x, void *y, int64_t n) {
    uint16_t *d = y;
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000),
                  half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1),
                  quiet = _mm512_set1_epi32(64);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(half, lsb)), 16);
        r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), quiet);
        _mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtepi32_epi16(r));
    }
    for (; i < n; i++) d[i] = rp_fp32_to_bf16(x[i]);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* seconds of 8 independent chains of 4096 vdpbf16ps (dp) or vfmadd231ps:
 * register-only, so the issue rate alone */
static double chains_s(bool dp) {
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3a83);
    const __m512 fa = _mm512_set1_ps(1.0f), fb = _mm512_set1_ps(1e-3f);
    __m512 c[8];
    for (int i = 0; i < 8; i++) c[i] = _mm512_set1_ps((float)i);
    const double t0 = now_s();
    for (int r = 0; r < 4096; r++) {
        if (dp)
            for (int i = 0; i < 8; i++) c[i] = _mm512_dpbf16_ps(c[i], a, b);
        else
            for (int i = 0; i < 8; i++) c[i] = _mm512_fmadd_ps(fa, fb, c[i]);
        __asm__ volatile(""
                         : "+v"(c[0]), "+v"(c[1]), "+v"(c[2]), "+v"(c[3]), "+v"(c[4]), "+v"(c[5]),
                           "+v"(c[6]), "+v"(c[7]));
    }
    const double t = now_s() - t0;
    volatile float sink = _mm512_reduce_add_ps(c[0]);
    (void)sink;
    return t;
}

/* vdpbf16ps (two products a lane) at least 5/8 of vfmadd231ps's rate: the
 * best of 5 measurements of each, about 0.1 ms in all */
bool rp_bf16_dp_fast(void) {
    double dp = 1e9, fma = 1e9;
    for (int i = 0; i < 5; i++) {
        dp = RP_MIN(dp, chains_s(true));
        fma = RP_MIN(fma, chains_s(false));
    }
    return dp < 1.6 * fma;
}

void rp_kernels_bf16_gemms(const rp_gemm_ops **dp, const rp_gemm_ops **fma) {
    *dp = &gemm_bf16_dp;
    *fma = &gemm_bf16;
}

void rp_kernels_fill_avx512_bf16(rp_kernels *k) {
    k->vec_dot[RP_TYPE_BF16] = vec_dot_bf16_avx512;
    k->gemm[RP_TYPE_BF16] = rp_bf16_dp_fast() ? &gemm_bf16_dp : &gemm_bf16;
    k->act_quant[RP_TYPE_BF16] = act_bf16_avx512;
}
