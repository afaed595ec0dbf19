/* Every SIMD kernel against its scalar twin: quantized products bit for bit
 * (vec_dot, the multi-row gemv and the packed gemm, on random codes including
 * extreme ones), activation encodings byte for byte, float products to
 * rounding; and within one ISA, batch paths equal the one-row path exactly. */
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "test.h"
#include "kernels/types.h"
#include "base/util.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

static const int k_types[] = {RP_TYPE_F32,  RP_TYPE_F16,    RP_TYPE_BF16,  RP_TYPE_Q4_0,
                              RP_TYPE_Q4_1, RP_TYPE_Q5_0,   RP_TYPE_Q5_1,  RP_TYPE_Q8_0,
                              RP_TYPE_Q2_K, RP_TYPE_Q3_K,   RP_TYPE_Q4_K,  RP_TYPE_Q5_K,
                              RP_TYPE_Q6_K, RP_TYPE_IQ4_NL, RP_TYPE_IQ4_XS};

/* Byte ranges of a block that hold codes (everything but the fp16 scales):
 * randomizing them reaches every code the format can express. */
typedef struct span {
    size_t off, len;
} span;

static int code_spans(int type, span *s) {
#define SP(T, f) (s[n++] = (span){offsetof(T, f), sizeof(((T *)0)->f)})
    int n = 0;
    switch (type) {
    case RP_TYPE_Q4_0:
        SP(block_q4_0, qs);
        break;
    case RP_TYPE_Q4_1:
        SP(block_q4_1, qs);
        break;
    case RP_TYPE_Q5_0:
        SP(block_q5_0, qh);
        SP(block_q5_0, qs);
        break;
    case RP_TYPE_Q5_1:
        SP(block_q5_1, qh);
        SP(block_q5_1, qs);
        break;
    case RP_TYPE_Q8_0:
        SP(block_q8_0, qs);
        break;
    case RP_TYPE_Q2_K:
        SP(block_q2_K, scales);
        SP(block_q2_K, qs);
        break;
    case RP_TYPE_Q3_K:
        SP(block_q3_K, hmask);
        SP(block_q3_K, qs);
        SP(block_q3_K, scales);
        break;
    case RP_TYPE_Q4_K:
        SP(block_q4_K, scales);
        SP(block_q4_K, qs);
        break;
    case RP_TYPE_Q5_K:
        SP(block_q5_K, scales);
        SP(block_q5_K, qh);
        SP(block_q5_K, qs);
        break;
    case RP_TYPE_Q6_K:
        SP(block_q6_K, ql);
        SP(block_q6_K, qh);
        SP(block_q6_K, scales);
        break;
    case RP_TYPE_IQ4_NL:
        SP(block_iq4_nl, qs);
        break;
    case RP_TYPE_IQ4_XS:
        SP(block_iq4_xs, scales_h);
        SP(block_iq4_xs, scales_l);
        SP(block_iq4_xs, qs);
        break;
    default:
        break;
    }
    return n;
#undef SP
}

/* rows of random weights: quantized Gaussian rows, the codes of odd rows
 * replaced by random bytes */
static void make_rows(int type, int n, int rows, uint8_t *w, rp_rng *r) {
    const rp_type_traits *t = rp_type_get(type);
    const size_t rb = rp_row_size(type, n);
    float *f = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < n; j++) f[j] = rp_rng_normal(r) * (i % 3 == 2 ? 20.0f : 0.05f);
        t->from_float(f, w + (size_t)i * rb, n);
        if (i % 2) {
            span s[4];
            const int ns = code_spans(type, s);
            for (size_t b = 0; b < rb / t->type_size && ns; b++)
                for (int k = 0; k < ns; k++)
                    for (size_t o = 0; o < s[k].len; o++)
                        w[(size_t)i * rb + b * t->type_size + s[k].off + o] =
                            (uint8_t)rp_rng_next(r);
        }
    }
    free(f);
}

static void make_acts(int n, int tokens, float *x, rp_rng *r) {
    for (int t = 0; t < tokens; t++)
        for (int j = 0; j < n; j++) {
            float v = rp_rng_normal(r);
            x[(size_t)t * (size_t)n + (size_t)j] = t == 1            ? 0.0f
                                                   : t == 2          ? v * 1e4f
                                                   : t == 3 && j % 7 ? 0.0f
                                                                     : v;
        }
}

static bool same_float(float a, float b, bool exact, double scale) {
    if (exact) return !memcmp(&a, &b, sizeof a);
    return fabs((double)a - b) <= 2e-5 * scale + 1e-30;
}

/* One type at one size for one ISA. */
static void check_type(rp_isa isa, int type, int n) {
    const rp_kernels *K = rp_kern_for(isa), *R = rp_kern_for(RP_ISA_SCALAR);
    const rp_type_traits *t = rp_type_get(type);
    const int vdt = rp_kern_act_type(type), rows = 37, toks = 35;
    const bool quant = vdt != RP_TYPE_F32;
    rp_rng rng;
    rp_rng_seed(&rng, (uint64_t)type * 1000 + (uint64_t)n);
    const size_t rb = rp_row_size(type, n),
                 xb = quant ? rp_row_size(vdt, n) : (size_t)n * sizeof(float);
    uint8_t *w = malloc(rb * rows), *xq = malloc(xb * toks);
    float *x = malloc((size_t)n * toks * sizeof(float)),
          *yref = malloc((size_t)rows * toks * sizeof(float));
    float *y = malloc((size_t)rows * toks * sizeof(float)),
          *scale = malloc((size_t)rows * toks * sizeof(float));
    float *wf = malloc((size_t)n * sizeof(float));
    REQUIRE(w && xq && x && yref && y && scale && wf, "alloc");
    make_rows(type, n, rows, w, &rng);
    make_acts(n, toks, x, &rng);
    for (int tk = 0; tk < toks; tk++) {
        if (quant)
            R->act_quant[vdt](x + (size_t)tk * (size_t)n, xq + (size_t)tk * xb, n);
        else
            memcpy(xq + (size_t)tk * xb, x + (size_t)tk * (size_t)n, xb);
    }
    for (int r = 0; r < rows; r++) {
        t->to_float(w + (size_t)r * rb, wf, n);
        for (int tk = 0; tk < toks; tk++) {
            double s = 0;
            for (int j = 0; j < n; j++)
                s += fabs((double)wf[j] * x[(size_t)tk * (size_t)n + (size_t)j]);
            scale[(size_t)tk * rows + (size_t)r] = (float)s;
            R->vec_dot[type](n, &yref[(size_t)tk * rows + (size_t)r], w + (size_t)r * rb,
                             xq + (size_t)tk * xb);
        }
    }
    /* vec_dot */
    int bad = 0;
    for (int r = 0; r < rows; r++)
        for (int tk = 0; tk < toks; tk++) {
            float v;
            K->vec_dot[type](n, &v, w + (size_t)r * rb, xq + (size_t)tk * xb);
            y[(size_t)tk * rows + (size_t)r] = v;
            bad += !same_float(v, yref[(size_t)tk * rows + (size_t)r], quant,
                               scale[(size_t)tk * rows + (size_t)r]);
        }
    CHECK(!bad, "%s %s n=%d: vec_dot differs from scalar at %d outputs", rp_isa_name(isa), t->name,
          n, bad);
    /* gemv: same floats as this ISA's vec_dot, for row counts that leave
     * every remainder of a kernel's row groups (of 4 or 8) and the last rows
     * of the matrix; nothing written past the rows asked for */
    if (K->gemv[type]) {
        float g[37 + 1];
        const int counts[] = {rows, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 20, 36};
        for (int tk = 0; tk < 4; tk++)
            for (size_t ci = 0; ci < RP_ARRAY_LEN(counts); ci++) {
                const int nr = counts[ci], first = rows - nr;
                for (int r = 0; r <= nr; r++) g[r] = NAN;
                K->gemv[type](n, nr, w + (size_t)first * rb, rb, xq + (size_t)tk * xb, g);
                bad = !isnan(g[nr]);
                for (int r = 0; r < nr; r++)
                    bad += !same_float(g[r], y[(size_t)tk * rows + (size_t)(first + r)], true, 0);
                CHECK(!bad, "%s %s n=%d token %d, %d rows: gemv differs from vec_dot at %d rows",
                      rp_isa_name(isa), t->name, n, tk, nr, bad);
            }
    }
    /* weights packed in row panels: every row unpacks to its bytes; products
     * of 1..toks tokens over every panel (the last one partial), the panels
     * in two calls, equal vec_dot */
    if (K->pack[type]) {
        const rp_pack_ops *po = K->pack[type];
        uint8_t *pk = rp_alloc_aligned(po->bytes(n, rows), "test"),
                *xe = rp_alloc_aligned(((po->xbytes(n) + 63) & ~(size_t)63) * toks, "test"),
                *row = malloc(rb);
        REQUIRE(pk && xe && row, "alloc");
        po->pack(n, rows, w, rb, pk);
        const int64_t nblk = n / t->blck_size;
        bad = 0;
        for (int r = 0; r < rows; r++) {
            memset(row, 0xA5, rb);
            po->unpack(n, pk, r, 0, nblk, row);
            bad += memcmp(row, w + (size_t)r * rb, rb) != 0;
            if (nblk > 1) { /* a block range lands at the start of the buffer */
                po->unpack(n, pk, r, 1, nblk, row);
                bad += memcmp(row, w + (size_t)r * rb + t->type_size, rb - t->type_size) != 0;
            }
        }
        CHECK(!bad, "%s %s n=%d: %d packed rows do not unpack to their bytes", rp_isa_name(isa),
              t->name, n, bad);
        const size_t les = (po->xbytes(n) + 63) & ~(size_t)63;
        for (int tk = 0; tk < toks; tk++) po->xprep(n, xq + (size_t)tk * xb, xe + (size_t)tk * les);
        float *g = malloc((size_t)(rows + 3) * toks * sizeof(float));
        REQUIRE(g, "alloc");
        const size_t ldy = (size_t)rows + 3;
        for (int nt = 1; nt <= toks; nt += nt < 9 ? 1 : 13) {
            for (size_t i = 0; i < ldy * toks; i++) g[i] = NAN;
            po->gemm(n, rows, pk, 0, 1, nt, xq, xb, xe, les, g, ldy);
            po->gemm(n, rows, pk, 1, (rows + RP_PANEL - 1) / RP_PANEL, nt, xq, xb, xe, les, g, ldy);
            bad = 0;
            for (int tk = 0; tk < nt; tk++) {
                for (int r = 0; r < rows; r++)
                    bad += !same_float(g[(size_t)tk * ldy + (size_t)r],
                                       y[(size_t)tk * rows + (size_t)r], true, 0);
                for (int r = rows; r < rows + 3; r++) /* nothing past the last row */
                    bad += !isnan(g[(size_t)tk * ldy + (size_t)r]);
            }
            CHECK(!bad, "%s %s n=%d, %d tokens: packed product differs from vec_dot at %d outputs",
                  rp_isa_name(isa), t->name, n, nt, bad);
        }
        /* llama.cpp's prompt order: the packed batch gemm equals the scalar
         * vec_dot_batch, bit for bit */
        if (K->pack_gemm_batch[type]) {
            REQUIRE(R->vec_dot_batch[type], "%s: no scalar vec_dot_batch", t->name);
            for (int nt = 1; nt <= toks; nt += nt < 9 ? 1 : 13) {
                for (size_t i = 0; i < ldy * toks; i++) g[i] = NAN;
                K->pack_gemm_batch[type](n, rows, pk, 0, 1, nt, xq, xb, xe, les, g, ldy);
                K->pack_gemm_batch[type](n, rows, pk, 1, (rows + RP_PANEL - 1) / RP_PANEL, nt, xq,
                                         xb, xe, les, g, ldy);
                bad = 0;
                for (int tk = 0; tk < nt; tk++)
                    for (int r = 0; r < rows; r++) {
                        float v;
                        R->vec_dot_batch[type](n, &v, w + (size_t)r * rb, xq + (size_t)tk * xb);
                        bad += !same_float(g[(size_t)tk * ldy + (size_t)r], v, true, 0);
                    }
                CHECK(!bad, "%s %s n=%d, %d tokens: packed batch order differs from scalar at %d",
                      rp_isa_name(isa), t->name, n, nt, bad);
            }
        }
        free(g);
        free(row);
        rp_free_aligned(pk);
        rp_free_aligned(xe);
    }
    /* gemm over packed groups, every token count up to toks */
    const rp_gemm_ops *gm = K->gemm[type];
    if (gm) {
        const int ng = (toks + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
        uint8_t *xp = gm->pack ? rp_alloc_aligned(gm->group_bytes(n) * (size_t)ng, "test") : NULL;
        uint8_t *scr = rp_alloc_aligned(gm->scratch_bytes(n), "test");
        float *g = malloc((size_t)rows * toks * sizeof(float));
        REQUIRE((xp || !gm->pack) && scr && g, "alloc");
        for (int cnt = 1; cnt <= toks; cnt += cnt < 4 ? 1 : 13) {
            if (gm->pack)
                for (int gi = 0; gi < ng; gi++) {
                    const int c = RP_MIN(RP_GEMM_GROUP, cnt - gi * RP_GEMM_GROUP);
                    if (c > 0)
                        gm->pack(n, c, xq + (size_t)gi * RP_GEMM_GROUP * xb, xb,
                                 xp + (size_t)gi * gm->group_bytes(n));
                }
            for (size_t i = 0; i < (size_t)rows * toks; i++) g[i] = NAN;
            /* rows in two calls: a tail of odd length */
            gm->run(n, 22, w, rb, gm->pack ? (const void *)xp : xq, xb, cnt, g, rows, scr);
            gm->run(n, rows - 22, w + 22 * rb, rb, gm->pack ? (const void *)xp : xq, xb, cnt,
                    g + 22, rows, scr);
            bad = 0;
            for (int tk = 0; tk < cnt; tk++)
                for (int r = 0; r < rows; r++)
                    bad += !same_float(g[(size_t)tk * rows + (size_t)r],
                                       y[(size_t)tk * rows + (size_t)r], true, 0);
            CHECK(!bad, "%s %s n=%d, %d tokens: gemm differs from vec_dot at %d outputs",
                  rp_isa_name(isa), t->name, n, cnt, bad);
        }
        rp_free_aligned(xp);
        rp_free_aligned(scr);
        free(g);
    }
    /* the product agrees with the dequantized weights (layout consistency) */
    if (isa == RP_ISA_SCALAR + 1) {
        bad = 0;
        for (int r = 0; r < rows; r += 5) {
            t->to_float(w + (size_t)r * rb, wf, n);
            double s = 0;
            for (int j = 0; j < n; j++) s += (double)wf[j] * x[j];
            bad += fabs(s - yref[r]) > 0.02 * scale[r] + 1e-20;
        }
        CHECK(!bad, "%s n=%d: vec_dot disagrees with the dequantized rows at %d rows", t->name, n,
              bad);
    }
    free(w);
    free(xq);
    free(x);
    free(yref);
    free(y);
    free(scale);
    free(wf);
}

void test_kernels_simd_vs_scalar(void) {
    const rp_isa top = rp_cpu_isa_max();
    if (top == RP_ISA_SCALAR) printf("     (no SIMD level on this CPU: nothing to compare)\n");
    for (int isa = RP_ISA_SCALAR + 1; isa <= (int)top; isa++)
        for (size_t i = 0; i < RP_ARRAY_LEN(k_types); i++) {
            const int type = k_types[i], bs = rp_type_get(type)->blck_size;
            const int sizes[] = {
                bs == 1 ? 7 : 0, bs == 1 ? 33 : 0, bs == 32 ? 32 : 0, bs == 32 ? 96 : 0, 256, 768};
            for (size_t s = 0; s < RP_ARRAY_LEN(sizes); s++)
                if (sizes[s]) check_type((rp_isa)isa, type, sizes[s]);
        }
}

void test_kernels_act_quant(void) {
    const int n = 1024;
    float x[1024];
    rp_rng r;
    rp_rng_seed(&r, 7);
    for (int isa = RP_ISA_SCALAR + 1; isa <= (int)rp_cpu_isa_max(); isa++) {
        const rp_kernels *K = rp_kern_for((rp_isa)isa), *R = rp_kern_for(RP_ISA_SCALAR);
        const int vdts[] = {RP_TYPE_Q8_0, RP_TYPE_Q8_1, RP_TYPE_Q8_K, RP_TYPE_BF16, RP_TYPE_F16};
        for (int rep = 0; rep < 9; rep++) {
            for (int j = 0; j < n; j++)
                x[j] = rep == 0 ? 0.0f
                                : rp_rng_normal(&r) * (rep == 5   ? 1e-30f
                                                       : rep == 6 ? 1e-40f /* 127/amax = inf */
                                                                  : 1.0f);
            if (rep == 4) /* exact ties at .5 after scaling by 127/amax */
                for (int j = 0; j < n; j++) x[j] = j % 32 == 0 ? 127.0f : (float)(j % 7) - 2.5f;
            if (rep == 7) /* the largest magnitude twice with both signs, in either order,
                           * 7 or 197 values apart */
                for (int j = 0; j < n; j++) {
                    const int b = j / 256, o = j % 256, second = b % 2 ? 200 : 10;
                    const float sg = b / 2 ? -1.0f : 1.0f;
                    x[j] = o == 3 ? 9.0f * sg : o == second ? -9.0f * sg : x[j];
                }
            if (rep == 8) { /* NaN skipped by the magnitude search, infinities, all-NaN blocks */
                for (int j = 0; j < n; j++) {
                    if (j % 97 == 5) x[j] = NAN;
                    if (j % 301 == 7) x[j] = j % 2 ? INFINITY : -INFINITY;
                    if (j >= 768) x[j] = NAN;
                }
                x[512] = -9.0f;
                x[513] = 9.0f;
            }
            for (size_t v = 0; v < RP_ARRAY_LEN(vdts); v++) {
                /* AVX2's Q8_0/Q8_1 encoder converts with saturation (as
                 * llama.cpp's AVX2 code does): an infinite scale or NaN
                 * inputs give other codes there, equally meaningless */
                if ((rep == 6 || rep == 8) && isa == RP_ISA_AVX2 && vdts[v] != RP_TYPE_Q8_K)
                    continue;
                uint8_t a[2048], b[2048];
                const size_t bytes = rp_row_size(vdts[v], n);
                memset(a, 0, sizeof a);
                memset(b, 0, sizeof b);
                R->act_quant[vdts[v]](x, a, n);
                K->act_quant[vdts[v]](x, b, n);
                CHECK(!memcmp(a, b, bytes), "%s: %s activations differ from scalar (case %d)",
                      rp_isa_name((rp_isa)isa), rp_type_name(vdts[v]), rep);
            }
        }
    }
}

/* Attention's float helpers: close to scalar; and the AVX-512 table keeps the
 * AVX2 arithmetic (llama.cpp's), so goldens do not depend on the level. */
void test_kernels_attention_helpers(void) {
    float a[300], b[300], y1[300], y2[300];
    uint16_t h[300];
    rp_rng r;
    rp_rng_seed(&r, 3);
    for (int i = 0; i < 300; i++) {
        a[i] = rp_rng_normal(&r);
        b[i] = rp_rng_normal(&r);
        h[i] = rp_fp32_to_fp16(a[i]);
    }
    const rp_kernels *R = rp_kern_for(RP_ISA_SCALAR);
    for (int isa = RP_ISA_SCALAR + 1; isa <= (int)rp_cpu_isa_max(); isa++) {
        const rp_kernels *K = rp_kern_for((rp_isa)isa);
        const int ns[] = {1, 8, 31, 32, 64, 128, 300};
        for (size_t k = 0; k < RP_ARRAY_LEN(ns); k++) {
            const int n = ns[k];
            CHECK(fabsf(K->dot_f32(n, a, b) - R->dot_f32(n, a, b)) < 1e-4f, "%s dot_f32 n=%d",
                  rp_isa_name((rp_isa)isa), n);
            CHECK(fabsf(K->dot_f16_f32(n, h, b) - R->dot_f16_f32(n, h, b)) < 1e-4f, "dot_f16 n=%d",
                  n);
            memcpy(y1, b, sizeof b);
            memcpy(y2, b, sizeof b);
            K->axpy_f32(n, 0.37f, a, y1);
            R->axpy_f32(n, 0.37f, a, y2);
            bool ok = true;
            for (int i = 0; i < n; i++) ok &= fabsf(y1[i] - y2[i]) < 1e-6f;
            CHECK(ok, "axpy_f32 n=%d", n);
            uint16_t h1[300], h2[300];
            K->f32_to_f16(a, h1, n);
            R->f32_to_f16(a, h2, n);
            CHECK(!memcmp(h1, h2, (size_t)n * 2), "f32_to_f16 n=%d", n);
        }
    }
    /* the AVX-512 helpers return the AVX2 floats bit for bit, every length */
    if (rp_cpu_isa_max() >= RP_ISA_AVX512) {
        const rp_kernels *A = rp_kern_for(RP_ISA_AVX2), *B = rp_kern_for(RP_ISA_AVX512);
        int bad = 0;
        for (int n = 0; n <= 300; n++) {
            const float da = A->dot_f32(n, a, b), db = B->dot_f32(n, a, b);
            const float ha = A->dot_f16_f32(n, h, b), hb = B->dot_f16_f32(n, h, b);
            bad += memcmp(&da, &db, 4) != 0 || memcmp(&ha, &hb, 4) != 0;
            memcpy(y1, b, sizeof b);
            memcpy(y2, b, sizeof b);
            A->axpy_f32(n, -1.7f, a, y1);
            B->axpy_f32(n, -1.7f, a, y2);
            A->axpy_f16(n, 0.61f, h, y1);
            B->axpy_f16(n, 0.61f, h, y2);
            bad += memcmp(y1, y2, sizeof y1) != 0;
        }
        CHECK(!bad, "AVX-512 attention helpers differ from AVX2's at %d lengths", bad);
    }
}

/* One gemm of one ISA against that ISA's vec_dot (and for quantized types
 * the scalar one) for 1..TOKS tokens and the row counts below. */
static void gemm_vs_vec_dot(int isa, int type, const rp_gemm_ops *gm) {
    enum { TOKS = 37, MAXR = 37 };
    const int row_counts[] = {1, 3, 5, 7, MAXR};
    const rp_kernels *K = rp_kern_for((rp_isa)isa), *R = rp_kern_for(RP_ISA_SCALAR);
    const rp_type_traits *t = rp_type_get(type);
    const int vdt = rp_kern_act_type(type), n = t->blck_size == 256 ? 512 : 96;
    const bool quant = vdt != RP_TYPE_F32;
    const size_t rb = rp_row_size(type, n),
                 xb = quant ? rp_row_size(vdt, n) : (size_t)n * sizeof(float);
    const int ng = (TOKS + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
    rp_rng rng;
    rp_rng_seed(&rng, 500 + (uint64_t)type);
    uint8_t *w = malloc(rb * MAXR), *xq = malloc(xb * TOKS);
    float *x = malloc((size_t)n * TOKS * sizeof(float));
    float *ref = malloc((size_t)MAXR * TOKS * sizeof(float));
    float *g = malloc((size_t)(MAXR + 1) * TOKS * sizeof(float));
    uint8_t *xp = gm->pack ? rp_alloc_aligned(gm->group_bytes(n) * (size_t)ng, "test") : NULL;
    uint8_t *scr = rp_alloc_aligned(gm->scratch_bytes(n), "test");
    REQUIRE(w && xq && x && ref && g && (xp || !gm->pack) && scr, "alloc");
    make_rows(type, n, MAXR, w, &rng);
    make_acts(n, TOKS, x, &rng);
    for (int tk = 0; tk < TOKS; tk++) {
        if (quant)
            K->act_quant[vdt](x + (size_t)tk * (size_t)n, xq + (size_t)tk * xb, n);
        else
            memcpy(xq + (size_t)tk * xb, x + (size_t)tk * (size_t)n, xb);
    }
    int bad_ref = 0;
    for (int tk = 0; tk < TOKS; tk++)
        for (int r = 0; r < MAXR; r++) {
            float *v = &ref[(size_t)tk * MAXR + (size_t)r], s;
            K->vec_dot[type](n, v, w + (size_t)r * rb, xq + (size_t)tk * xb);
            R->vec_dot[type](n, &s, w + (size_t)r * rb, xq + (size_t)tk * xb);
            bad_ref += quant && memcmp(v, &s, sizeof s) != 0; /* floats: rounding */
        }
    CHECK(!bad_ref, "%s %s: vec_dot differs from the scalar one at %d outputs",
          rp_isa_name((rp_isa)isa), t->name, bad_ref);
    int bad = 0, worst = 0;
    for (int cnt = 1; cnt <= TOKS; cnt++) {
        if (gm->pack)
            for (int gi = 0; gi * RP_GEMM_GROUP < cnt; gi++)
                gm->pack(n, RP_MIN(RP_GEMM_GROUP, cnt - gi * RP_GEMM_GROUP),
                         xq + (size_t)gi * RP_GEMM_GROUP * xb, xb,
                         xp + (size_t)gi * gm->group_bytes(n));
        const void *xs = gm->pack ? (const void *)xp : xq;
        for (size_t k = 0; k < RP_ARRAY_LEN(row_counts); k++) {
            const int nr = row_counts[k], ldy = MAXR + 1;
            for (size_t e = 0; e < (size_t)ldy * TOKS; e++) g[e] = NAN;
            /* the rows in two calls, the second starting at an odd row */
            const int split = nr / 2 | 1;
            gm->run(n, RP_MIN(split, nr), w, rb, xs, xb, cnt, g, (size_t)ldy, scr);
            if (nr > split)
                gm->run(n, nr - split, w + (size_t)split * rb, rb, xs, xb, cnt, g + split,
                        (size_t)ldy, scr);
            int b = 0;
            for (int tk = 0; tk < TOKS; tk++)
                for (int r = 0; r < ldy; r++) {
                    const float v = g[(size_t)tk * (size_t)ldy + (size_t)r];
                    if (tk >= cnt || r >= nr)
                        b += !isnan(v); /* nothing written outside */
                    else
                        b += memcmp(&v, &ref[(size_t)tk * MAXR + (size_t)r], sizeof v) != 0;
                }
            if (b && !bad) worst = cnt * 100 + nr;
            bad += b;
        }
    }
    CHECK(!bad, "%s %s: gemm differs from vec_dot at %d outputs (first at %d tokens, %d rows)",
          rp_isa_name((rp_isa)isa), t->name, bad, worst / 100, worst % 100);
    free(w);
    free(xq);
    free(x);
    free(ref);
    free(g);
    rp_free_aligned(xp);
    rp_free_aligned(scr);
}

/* The multi-token gemm of every type that has one (Q4_1 and Q5_1 among
 * them: llama.cpp's vec_dot order, 8 lanes and the min term, on tiles of rows
 * and tokens) equals this ISA's one-row vec_dot bit for bit, for every token
 * count 1..37 (the last group partial) and odd row counts (partial row tiles);
 * for quantized types that is the scalar vec_dot's float too. */
void test_kernels_gemm_every_token_count(void) {
    int tested = 0;
    for (int isa = RP_ISA_SCALAR + 1; isa <= (int)rp_cpu_isa_max(); isa++) {
        const rp_kernels *K = rp_kern_for((rp_isa)isa);
        for (size_t i = 0; i < RP_ARRAY_LEN(k_types); i++) {
            const int type = k_types[i];
            const rp_gemm_ops *gm = K->gemm[type];
            if (!gm) continue;
            gemm_vs_vec_dot(isa, type, gm);
            tested++;
        }
    }
    /* both BF16 gemms where vdpbf16ps exists, whichever this CPU runs */
    if (rp_cpu_isa_max() == RP_ISA_AVX512 && rp_cpu_has_avx512bf16()) {
        const rp_gemm_ops *dp, *fma;
        rp_kernels_bf16_gemms(&dp, &fma);
        gemm_vs_vec_dot(RP_ISA_AVX512, RP_TYPE_BF16, dp);
        gemm_vs_vec_dot(RP_ISA_AVX512, RP_TYPE_BF16, fma);
        printf("     BF16: both gemms (vdpbf16ps, FMA); this CPU runs the %s one\n",
               rp_bf16_dp_fast() ? "vdpbf16ps" : "FMA");
    }
    if (rp_cpu_isa_max() == RP_ISA_SCALAR) printf("     (no SIMD level on this CPU: no gemm)\n");
    CHECK(rp_cpu_isa_max() == RP_ISA_SCALAR || tested > 0, "no gemm was tested");
    for (int isa = RP_ISA_AVX2; isa <= (int)rp_cpu_isa_max(); isa++)
        CHECK(rp_kern_for((rp_isa)isa)->gemm[RP_TYPE_Q4_1] &&
                  rp_kern_for((rp_isa)isa)->gemm[RP_TYPE_Q5_1],
              "%s: Q4_1 / Q5_1 have no multi-token gemm", rp_isa_name((rp_isa)isa));
}

/* Through the dispatcher: a batch of tokens gives, bit for bit, the outputs
 * of the same tokens one at a time (gemm vs packed or multi-row gemv vs
 * vec_dot), on 2 threads, for row counts that leave partial panels; the
 * tokens a packed Q4_K/Q6_K batch takes in llama.cpp's prompt order give the
 * scalar vec_dot_batch's. */
void test_kernels_matmul_batch_equals_single(void) {
    const int n = 512, toks = 37;
    rp_compute cc = {.pool = rp_pool_new(2)};
    cc.wbuf_size = rp_matmul_scratch(n, toks);
    cc.wbuf = rp_alloc_aligned(cc.wbuf_size, "test");
    REQUIRE(cc.pool && cc.wbuf, "alloc");
    float *x = malloc((size_t)n * toks * sizeof(float));
    rp_rng r;
    rp_rng_seed(&r, 11);
    make_acts(n, toks, x, &r);
    for (size_t i = 0; i < RP_ARRAY_LEN(k_types); i++) {
        const int type = k_types[i], rows[2] = {45, 16};
        rp_tensor t[2];
        uint8_t *wd[2];
        void *owned[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++) {
            const size_t rb = rp_row_size(type, n);
            wd[k] = malloc(rb * (size_t)rows[k]);
            REQUIRE(wd[k], "alloc");
            make_rows(type, n, rows[k], wd[k], &r);
            t[k] = (rp_tensor){.name = "w",
                               .type = type,
                               .n_dims = 2,
                               .ne = {n, rows[k], 1, 1},
                               .nbytes = rb * (size_t)rows[k],
                               .row_bytes = rb,
                               .data = wd[k]};
            CHECK(rp_matmul_pack(&t[k], &owned[k]) == RP_OK, "pack: %s", rp_last_error());
        }
        float *yb[2], *ys[2];
        for (int k = 0; k < 2; k++) {
            yb[k] = malloc((size_t)rows[k] * toks * sizeof(float));
            ys[k] = malloc((size_t)rows[k] * toks * sizeof(float));
        }
        const rp_tensor *tw[2] = {&t[0], &t[1]};
        rp_matmul_n(&cc, 2, tw, yb, x, toks);
        for (int tk = 0; tk < toks; tk++) {
            float *y1[2] = {ys[0] + (size_t)tk * rows[0], ys[1] + (size_t)tk * rows[1]};
            rp_matmul_n(&cc, 2, tw, y1, x + (size_t)tk * n, 1);
        }
        /* llama.cpp's prompt order (rp_kernels.vec_dot_batch) on the tokens
         * rp_matmul_batch_tokens names: those outputs are the batch form's */
        const rp_kernels *K = rp_kern();
        const int nbt =
            t[0].pack && K->pack_gemm_batch[type] ? rp_matmul_batch_tokens(type, toks) : 0;
        if (nbt) {
            const int vdt = rp_kern_act_type(type);
            const size_t xb = rp_row_size(vdt, n);
            uint8_t *xq = malloc(xb);
            REQUIRE(xq, "alloc");
            for (int tk = 0; tk < nbt; tk++) {
                K->act_quant[vdt](x + (size_t)tk * n, xq, n);
                for (int k = 0; k < 2; k++)
                    for (int rr = 0; rr < rows[k]; rr++)
                        rp_kern_for(RP_ISA_SCALAR)
                            ->vec_dot_batch[type](n, &ys[k][(size_t)tk * rows[k] + rr],
                                                  wd[k] + rp_row_size(type, n) * rr, xq);
            }
            free(xq);
        }
        for (int k = 0; k < 2; k++)
            CHECK(!memcmp(yb[k], ys[k], (size_t)rows[k] * toks * sizeof(float)),
                  "%s (%s): batch != one by one (%d tokens in the batch order), weight %d",
                  rp_type_name(type), t[k].pack ? "packed" : "unpacked", nbt, k);
        for (int k = 0; k < 2; k++) {
            free(wd[k]);
            free(owned[k]);
            free(yb[k]);
            free(ys[k]);
        }
    }
    free(x);
    rp_free_aligned(cc.wbuf);
    rp_pool_free(cc.pool);
}

/* What the kernel tests cover is what this CPU runs: the levels above
 * rp_cpu_isa_max() (and the AVX-512 split attention, the one path only that
 * level has) go untested here, which is said on every run.
 * REPRISE_REQUIRE_ISA=avx2|avx512 (CI on a machine that has it) turns a missing
 * level into a failure instead of a note. */
void test_kernels_isa_coverage(void) {
    const rp_isa top = rp_cpu_isa_max();
    char untested[64] = "";
    for (int isa = (int)top + 1; isa <= (int)RP_ISA_AVX512; isa++)
        snprintf(untested + strlen(untested), sizeof untested - strlen(untested), "%s%s",
                 *untested ? ", " : "", rp_isa_name((rp_isa)isa));
    if (*untested)
        printf("     NOT TESTED on this CPU (it has %s at most): the %s kernels%s; "
               "REPRISE_REQUIRE_ISA=%s makes this a failure\n",
               rp_isa_name(top), untested,
               top < RP_ISA_AVX512 ? " and the AVX-512 split attention" : "",
               rp_isa_name(RP_ISA_AVX512));
    else
        printf("     tested: every level this build has (scalar, avx2, avx512)\n");
    const char *req = getenv("REPRISE_REQUIRE_ISA");
    if (!req || !*req) return;
    int want = -1;
    for (int isa = RP_ISA_SCALAR; isa <= (int)RP_ISA_AVX512; isa++)
        if (!strcmp(req, rp_isa_name((rp_isa)isa))) want = isa;
    REQUIRE(want >= 0, "REPRISE_REQUIRE_ISA=%s is not one of scalar, avx2, avx512", req);
    CHECK(want <= (int)top,
          "REPRISE_REQUIRE_ISA=%s, but this CPU has %s at most: the %s kernels "
          "were not tested",
          req, rp_isa_name(top), untested);
}

/* ---- AVX2 prompt tiles ------------------------------------------------------
 * The AVX2 table's gemm (tiles of rows x tokens over packed token groups)
 * against the same table's one-row vec_dot, bit for bit: every token count
 * 1..37 (partial tiles and groups), odd row counts (a tile's missing row), the
 * rows in two calls; nothing is written past the rows or tokens asked for. */
static void check_avx2_gemm(int type, int n) {
    const rp_kernels *K = rp_kern_for(RP_ISA_AVX2);
    const rp_gemm_ops *gm = K->gemm[type];
    const rp_type_traits *t = rp_type_get(type);
    const int vdt = rp_kern_act_type(type), toks = 37, maxrows = 37;
    const size_t rb = rp_row_size(type, n), xb = rp_row_size(vdt, n), ldy = maxrows + 2;
    const int ng = (toks + RP_GEMM_GROUP - 1) / RP_GEMM_GROUP;
    rp_rng rng;
    rp_rng_seed(&rng, 4242 + (uint64_t)type * 31 + (uint64_t)n);
    uint8_t *w = malloc(rb * maxrows), *xq = malloc(xb * toks);
    float *x = malloc((size_t)n * toks * sizeof(float)), *ref = malloc(ldy * toks * sizeof(float)),
          *g = malloc(ldy * toks * sizeof(float));
    uint8_t *xp = rp_alloc_aligned(gm->group_bytes(n) * (size_t)ng, "test"),
            *scr = rp_alloc_aligned(gm->scratch_bytes(n), "test");
    REQUIRE(w && xq && x && ref && g && xp && scr, "alloc");
    make_rows(type, n, maxrows, w, &rng);
    make_acts(n, toks, x, &rng);
    for (int tk = 0; tk < toks; tk++)
        K->act_quant[vdt](x + (size_t)tk * (size_t)n, xq + (size_t)tk * xb, n);
    for (int tk = 0; tk < toks; tk++)
        for (int r = 0; r < maxrows; r++)
            K->vec_dot[type](n, &ref[(size_t)tk * ldy + (size_t)r], w + (size_t)r * rb,
                             xq + (size_t)tk * xb);
    const int row_counts[] = {1, 3, 5, 37};
    for (size_t ri = 0; ri < RP_ARRAY_LEN(row_counts); ri++) {
        const int rows = row_counts[ri], split = rows > 4 ? rows / 2 | 1 : rows;
        for (int cnt = 1; cnt <= toks; cnt++) {
            for (int gi = 0; gi * RP_GEMM_GROUP < cnt; gi++)
                gm->pack(n, RP_MIN(RP_GEMM_GROUP, cnt - gi * RP_GEMM_GROUP),
                         xq + (size_t)gi * RP_GEMM_GROUP * xb, xb,
                         xp + (size_t)gi * gm->group_bytes(n));
            for (size_t i = 0; i < ldy * toks; i++) g[i] = NAN;
            gm->run(n, split, w, rb, xp, xb, cnt, g, ldy, scr);
            if (split < rows)
                gm->run(n, rows - split, w + (size_t)split * rb, rb, xp, xb, cnt, g + split, ldy,
                        scr);
            int bad = 0;
            for (int tk = 0; tk < toks; tk++)
                for (int r = 0; r < (int)ldy; r++) {
                    const float v = g[(size_t)tk * ldy + (size_t)r];
                    bad += tk < cnt && r < rows
                               ? !same_float(v, ref[(size_t)tk * ldy + (size_t)r], true, 0)
                               : !isnan(v);
                }
            CHECK(!bad, "avx2 %s n=%d, %d rows, %d tokens: gemm differs from vec_dot at %d outputs",
                  t->name, n, rows, cnt, bad);
        }
    }
    free(w);
    free(xq);
    free(x);
    free(ref);
    free(g);
    rp_free_aligned(xp);
    rp_free_aligned(scr);
}

void test_kernels_avx2_gemm_tiles(void) {
    if (rp_cpu_isa_max() < RP_ISA_AVX2) {
        printf("     NOT TESTED: this CPU has no AVX2\n");
        return;
    }
    const rp_kernels *K = rp_kern_for(RP_ISA_AVX2);
    int covered = 0;
    for (size_t i = 0; i < RP_ARRAY_LEN(k_types); i++) {
        const int type = k_types[i];
        if (!K->gemm[type]) continue;
        covered++;
        const int bs = rp_type_get(type)->blck_size;
        check_avx2_gemm(type, bs == 32 ? 96 : 256);
        check_avx2_gemm(type, 768);
    }
    /* the types and Gemma's mix have tiles */
    const int want[] = {RP_TYPE_Q8_0, RP_TYPE_Q4_0, RP_TYPE_Q4_K, RP_TYPE_Q5_0};
    for (size_t i = 0; i < RP_ARRAY_LEN(want); i++)
        CHECK(K->gemm[want[i]], "avx2: no gemm for %s", rp_type_get(want[i])->name);
    CHECK(covered >= 4, "avx2: %d types with a gemm", covered);
}

/* The AVX2 silu returns the ref's bits over the whole range of the exp
 * polynomial and past it: e^-x overflowing, the |n| > 192 cut, infinities
 * and NaN, lengths with a tail (where e^-x is subnormal, silu is x itself:
 * that rounding does not show here). */
void test_kernels_avx2_silu(void) {
    if (rp_cpu_isa_max() < RP_ISA_AVX2) {
        printf("     NOT TESTED: this CPU has no AVX2\n");
        return;
    }
    const rp_kernels *K = rp_kern_for(RP_ISA_AVX2);
    enum { N = 20011 };
    float *x = malloc(N * sizeof(float)), *up = malloc(N * sizeof(float)),
          *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
    REQUIRE(x && up && a && b, "alloc");
    rp_rng r;
    rp_rng_seed(&r, 5);
    for (int i = 0; i < N; i++) {
        x[i] = -210.0f + 420.0f * (float)i / N; /* every n of the polynomial */
        up[i] = i % 5 ? rp_rng_normal(&r) : 1.0f;
    }
    const float special[] = {INFINITY, -INFINITY, NAN,     0.0f,   -0.0f,   1e-42f, -1e-42f, 88.7f,
                             -88.7f,   103.9f,    -127.5f, 192.5f, -192.5f, 133.0f, 87.4f};
    for (size_t i = 0; i < RP_ARRAY_LEN(special); i++) x[7 * i + 3] = special[i];
    int bad = 0;
    for (int n = N; n > N - 9; n--) {
        memcpy(a, x, N * sizeof(float));
        memcpy(b, x, N * sizeof(float));
        rp_silu_mul_ref(a, up, n);
        K->silu_mul(b, up, n);
        for (int i = 0; i < n; i++)
            bad += memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]));
    }
    /* e^-x near and past its overflow, 8 lanes at a time */
    float e1[8], e2[8], one8[8];
    for (int k = 0; k < 8; k++) one8[k] = 1.0f;
    for (float v = 80.0f; v < 110.0f; v += 0.37f) {
        for (int k = 0; k < 8; k++) e1[k] = e2[k] = -(v + 0.01f * k);
        rp_silu_mul_ref(e1, one8, 8);
        K->silu_mul(e2, one8, 8);
        bad += memcmp(e1, e2, sizeof e1) != 0;
    }
    CHECK(!bad, "avx2 silu differs from the ref at %d outputs", bad);
    free(x);
    free(up);
    free(a);
    free(b);
}
