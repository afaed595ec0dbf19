/* K-quants: 256-element super-blocks with per-group scales (Q2_K .. Q6_K) and
 * their activation format Q8_K. Dequantization is bit-identical to ggml's; the
 * quantizers follow the same search (weighted least squares over a few
 * candidate scales) so files compare in quality with llama.cpp's own. */
#include "kernels/quant.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

#define GROUP_EPS 1e-15f

static inline int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- scale search helpers ------------------------------------------------ */

/* Symmetric levels -nmax..nmax-1 around 0 with weights w (NULL: x^2); tries
 * 19 scales near nmax/max and keeps the weighted least-squares best. L gets
 * the levels offset by nmax; returns the scale. */
static float fit_symmetric(int n, int nmax, const float *x, int8_t *L, const float *w) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -(float)nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(rp_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float wi = w ? w[i] : x[i] * x[i];
        sumlx += wi * x[i] * (float)l;
        suml2 += wi * (float)l * (float)l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(rp_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float wi = w ? w[i] : x[i] * x[i];
            sumlx += wi * x[i] * (float)l;
            suml2 += wi * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(rp_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's per-group fit: start from nmax/max, then move single levels while
 * that improves the x^2-weighted fit (at most 5 sweeps). */
static float fit_q3(int n, int nmax, const float *x, int8_t *L) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -(float)nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(rp_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx <= 0) continue;
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            int nl = clampi(rp_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (nl == L[i]) continue;
            slx += w * x[i] * (float)nl;
            sl2 += w * (float)nl * (float)nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)nl;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric levels 0..nmax with a minimum: x ~ scale * L + min (min <= 0).
 * Tries nstep+1 scales (rmin + rdelta*is + nmax)/(max - min) and solves the
 * weighted 2x2 least squares for each; keeps the lowest weighted error (|d| if
 * use_mad, else d^2). Returns the scale, *neg_min = -min. */
static float fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
                        uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_err = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(rp_nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_err += w[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(rp_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * (float)Laux[i] + this_min - x[i];
            diff = use_mad ? fabsf(diff) : diff * diff;
            err += w[i] * diff;
        }
        if (err < best_err) {
            memcpy(L, Laux, (size_t)n);
            best_err = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

/* Pack 256 2-bit levels: byte 32*c + l holds elements 128*c/... as ggml:
 * qs[32*h + l] bits 2k..2k+1 = element 128*h + 32*k + l. */
static void pack_2bit(uint8_t *qs, const uint8_t *L) {
    for (int h = 0; h < QK_K; h += 128)
        for (int l = 0; l < 32; l++)
            qs[h / 4 + l] =
                (uint8_t)(L[h + l] | L[h + l + 32] << 2 | L[h + l + 64] << 4 | L[h + l + 96] << 6);
}

/* ---- Q2_K ---------------------------------------------------------------- */

void rp_dequant_q2_K(const void *src, float *dst, int64_t n) {
    const block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = rp_fp16_to_fp32(b[i].d), dmin = rp_fp16_to_fp32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        int is = 0;
        for (int h = 0; h < QK_K; h += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int half = 0; half < 2; half++) {
                    uint8_t sc = b[i].scales[is++];
                    const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *dst++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                }
    }
}

void rp_quant_q2_K(const float *src, void *dst, int64_t n) {
    block_q2_K *y = dst;
    uint8_t L[QK_K], Laux[16];
    float w[16], mins[16], scales[16];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(src[16 * j + l]);
            scales[j] = fit_affine(16, 3, src + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f,
                                   15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = 15.0f / max_scale;
            for (int j = 0; j < 16; j++)
                y[i].scales[j] = (uint8_t)rp_nearest_int(iscale * scales[j]);
            y[i].d = rp_fp32_to_fp16(max_scale / 15.0f);
        } else {
            memset(y[i].scales, 0, 16);
            y[i].d = rp_fp32_to_fp16(0.0f);
        }
        if (max_min > 0) {
            const float iscale = 15.0f / max_min;
            for (int j = 0; j < 16; j++)
                y[i].scales[j] |= (uint8_t)(rp_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = rp_fp32_to_fp16(max_min / 15.0f);
        } else {
            y[i].dmin = rp_fp32_to_fp16(0.0f);
        }
        /* requantize against the scales as stored */
        for (int j = 0; j < 16; j++) {
            const float d = rp_fp16_to_fp32(y[i].d) * (float)(y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = rp_fp16_to_fp32(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)clampi(rp_nearest_int((src[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(y[i].qs, L);
    }
}

/* ---- Q3_K ---------------------------------------------------------------- */

void rp_dequant_q3_K(const void *src, float *dst, int64_t n) {
    const block_q3_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = rp_fp16_to_fp32(b[i].d);
        const uint8_t *q = b[i].qs;
        int is = 0;
        uint8_t m = 1;
        for (int h = 0; h < QK_K; h += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1))
                for (int half = 0; half < 2; half++) {
                    const float dl = d * (float)rp_q3k_scale(is++, b[i].scales);
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *dst++ =
                            dl * (float)(((q[l] >> shift) & 3) - ((b[i].hmask[l] & m) ? 0 : 4));
                }
    }
}

void rp_quant_q3_K(const float *src, void *dst, int64_t n) {
    block_q3_K *y = dst;
    int8_t L[QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_q3(16, 4, src + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = clampi((int8_t)rp_nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8)
                    y[i].scales[j] = (uint8_t)(l & 0xF);
                else
                    y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = rp_fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = rp_fp32_to_fp16(0.0f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = rp_fp16_to_fp32(y[i].d) * (float)rp_q3k_scale(j, y[i].scales);
            if (!d) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(rp_nearest_int(src[16 * j + l] / d), -4, 3) + 4);
        }
        /* high bit of element j goes to hmask[j % 32], bit j / 32 */
        memset(y[i].hmask, 0, QK_K / 8);
        uint8_t U[QK_K];
        for (int j = 0; j < QK_K; j++) {
            U[j] = (uint8_t)L[j];
            if (U[j] > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1 << (j / 32));
                U[j] -= 4;
            }
        }
        pack_2bit(y[i].qs, U);
    }
}

/* ---- Q4_K / Q5_K --------------------------------------------------------- */

static void put_scales_k4(uint8_t s[12], const uint8_t *ls, const uint8_t *lm) {
    memset(s, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per group of 32 an affine fit
 * weighted by rms + |x|, 6-bit scales and mins, then requantization. */
static void quant_k4_levels(const float *x, int nmax, float rmin, int nstep, uint8_t *L,
                            uint8_t s[12], uint16_t *dd, uint16_t *dmin) {
    float scales[8], mins[8], w[32];
    uint8_t Laux[32], ls[8], lm[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av + fabsf(x[32 * j + l]);
        scales[j] = fit_affine(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, rmin, 0.1f,
                               nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; j++) {
        uint8_t a = (uint8_t)rp_nearest_int(inv_scale * scales[j]),
                b = (uint8_t)rp_nearest_int(inv_min * mins[j]);
        ls[j] = a < 63 ? a : 63;
        lm[j] = b < 63 ? b : 63;
    }
    put_scales_k4(s, ls, lm);
    *dd = rp_fp32_to_fp16(max_scale / 63.0f);
    *dmin = rp_fp32_to_fp16(max_min / 63.0f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        rp_k4_scale_min(j, s, &sc, &m);
        const float d = rp_fp16_to_fp32(*dd) * (float)sc;
        if (!d) continue;
        const float dm = rp_fp16_to_fp32(*dmin) * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clampi(rp_nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void rp_dequant_q4_K(const void *src, float *dst, int64_t n) {
    const block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = rp_fp16_to_fp32(b[i].d), dmin = rp_fp16_to_fp32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, m;
            rp_k4_scale_min(j, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            rp_k4_scale_min(j + 1, b[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void rp_quant_q4_K(const float *src, void *dst, int64_t n) {
    block_q4_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        quant_k4_levels(src, 15, -1.0f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
    }
}

void rp_dequant_q5_K(const void *src, float *dst, int64_t n) {
    const block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = rp_fp16_to_fp32(b[i].d), dmin = rp_fp16_to_fp32(b[i].dmin);
        const uint8_t *ql = b[i].qs, *qh = b[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 8; j += 2, ql += 32, u1 = (uint8_t)(u1 << 2), u2 = (uint8_t)(u2 << 2)) {
            uint8_t sc, m;
            rp_k4_scale_min(j, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            rp_k4_scale_min(j + 1, b[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

void rp_quant_q5_K(const float *src, void *dst, int64_t n) {
    block_q5_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        quant_k4_levels(src, 31, -0.5f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
        memset(y[i].qh, 0, QK_K / 8);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                if (l1 > 15) {
                    l1 -= 16;
                    y[i].qh[l] |= (uint8_t)(1 << (2 * c));
                }
                if (l2 > 15) {
                    l2 -= 16;
                    y[i].qh[l] |= (uint8_t)(2 << (2 * c));
                }
                y[i].qs[32 * c + l] = (uint8_t)(l1 | l2 << 4);
            }
    }
}

/* ---- Q6_K ---------------------------------------------------------------- */

/* 6-bit level (0..63) of element e of a Q6_K block. */
static inline int q6_level(const block_q6_K *b, int e) {
    const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
    const uint8_t lo = b->ql[64 * h + l + 32 * (k & 1)];
    const int low4 = k < 2 ? lo & 0xF : lo >> 4;
    return low4 | ((b->qh[32 * h + l] >> (2 * k)) & 3) << 4;
}

void rp_dequant_q6_K(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = rp_fp16_to_fp32(b[i].d);
        for (int e = 0; e < QK_K; e++)
            dst[e] = d * (float)b[i].scales[e / 16] * (float)(q6_level(&b[i], e) - 32);
    }
}

void rp_quant_q6_K(const float *src, void *dst, int64_t n) {
    block_q6_K *y = dst;
    int8_t L[QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_symmetric(16, 32, src + 16 * j, L + 16 * j, NULL);
            if (fabsf(scales[j]) > max_abs) {
                max_abs = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (max_abs < GROUP_EPS) {
            y[i].d = rp_fp32_to_fp16(0.0f);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        y[i].d = rp_fp32_to_fp16(1 / iscale);
        for (int j = 0; j < 16; j++) {
            int v = rp_nearest_int(iscale * scales[j]);
            y[i].scales[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) {
            const float d = rp_fp16_to_fp32(y[i].d) * (float)y[i].scales[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(rp_nearest_int(src[16 * j + l] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int e = 128 * h + l;
                const uint8_t q1 = (uint8_t)L[e], q2 = (uint8_t)L[e + 32], q3 = (uint8_t)L[e + 64],
                              q4 = (uint8_t)L[e + 96];
                y[i].ql[64 * h + l] = (uint8_t)((q1 & 0xF) | (q3 & 0xF) << 4);
                y[i].ql[64 * h + l + 32] = (uint8_t)((q2 & 0xF) | (q4 & 0xF) << 4);
                y[i].qh[32 * h + l] =
                    (uint8_t)((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
            }
    }
}

/* ---- Q8_K ---------------------------------------------------------------- */

void rp_dequant_q8_K(const void *src, float *dst, int64_t n) {
    const block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++)
        for (int j = 0; j < QK_K; j++) *dst++ = b[i].d * (float)b[i].qs[j];
}

/* Activations: q = nearest(x * -127/max) with max the signed extreme value,
 * d = 1 / that multiplier, and the sums of each group of 16 quants. */
void rp_act_q8_K(const float *x, void *y, int64_t n) {
    block_q8_K *b = y;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0, max = 0;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        if (!amax) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = rp_nearest_int(iscale * x[j]);
            b[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += b[i].qs[16 * g + l];
            b[i].bsums[g] = (int16_t)sum;
        }
        b[i].d = 1 / iscale;
    }
}

void rp_quant_q8_K(const float *src, void *dst, int64_t n) {
    rp_act_q8_K(src, dst, n);
}
