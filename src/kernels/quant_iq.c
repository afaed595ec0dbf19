/* IQ4_NL (32-element blocks) and IQ4_XS (256-element super-blocks with 6-bit
 * group scales): 4-bit indices into a fixed non-linear grid. */
#include "kernels/quant.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

const int8_t rp_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

void rp_dequant_iq4_nl(const void *src, float *dst, int64_t n) {
    const block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK4_NL; i++, dst += QK4_NL) {
        const float d = rp_fp16_to_fp32(b[i].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)rp_kvalues_iq4nl[b[i].qs[j] & 0xF];
            dst[j + 16] = d * (float)rp_kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

static inline int iq4xs_scale(const block_iq4_xs *b, int ib) {
    return (((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
            (((b->scales_h >> (2 * ib)) & 3) << 4)) -
           32;
}

void rp_dequant_iq4_xs(const void *src, float *dst, int64_t n) {
    const block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = rp_fp16_to_fp32(b[i].d);
        const uint8_t *qs = b[i].qs;
        for (int ib = 0; ib < 8; ib++, qs += 16, dst += 32) {
            const float dl = d * (float)iq4xs_scale(&b[i], ib);
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)rp_kvalues_iq4nl[qs[j] & 0xF];
                dst[j + 16] = dl * (float)rp_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* Index of the grid value nearest to x (ties go up), by binary search over
 * midpoints (the grid is sorted). */
static int grid_index(float x) {
    const float x2 = x + x;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        if (x2 >= (float)(rp_kvalues_iq4nl[j - 1] + rp_kvalues_iq4nl[j])) idx = j;
    }
    return idx;
}

/* Best scale of one group of 32 for the grid, weighted by x^2: start from the
 * extreme value on the grid's end, refit, then try 15 nearby scales. */
static float fit_grid(const float *x, uint8_t *L) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    if (amax < 1e-15f) {
        memset(L, 0, 32);
        return 0.0f;
    }
    const float v0 = (float)rp_kvalues_iq4nl[0];
    float d = -max / v0, id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = grid_index(id * x[j]);
        L[j] = (uint8_t)l;
        const float q = (float)rp_kvalues_iq4nl[l], w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int t = -7; t <= 7; t++) {
        id = ((float)t + v0) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = (float)rp_kvalues_iq4nl[grid_index(id * x[j])], w = x[j] * x[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void pack_nibbles(uint8_t *qs, const uint8_t *L) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

void rp_quant_iq4_nl(const float *src, void *dst, int64_t n) {
    block_iq4_nl *b = dst;
    uint8_t L[32];
    for (int64_t i = 0; i < n / QK4_NL; i++, src += QK4_NL) {
        const float d = fit_grid(src, L);
        b[i].d = rp_fp32_to_fp16(d);
        const float id = d ? 1 / d : 0.0f;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)grid_index(id * src[j]);
        pack_nibbles(b[i].qs, L);
    }
}

void rp_quant_iq4_xs(const float *src, void *dst, int64_t n) {
    block_iq4_xs *b = dst;
    uint8_t L[32];
    float scales[8];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float max_scale = 0, amax = 0;
        for (int ib = 0; ib < 8; ib++) {
            scales[ib] = fit_grid(src + 32 * ib, L);
            if (fabsf(scales[ib]) > amax) {
                amax = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        const float d = -max_scale / 32, id = d ? 1 / d : 0.0f;
        b[i].d = rp_fp32_to_fp16(d);
        for (int ib = 0; ib < 8; ib++) {
            int l = rp_nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            const float dl = d * (float)l, idl = dl ? 1 / dl : 0.0f;
            for (int j = 0; j < 32; j++) L[j] = (uint8_t)grid_index(idl * src[32 * ib + j]);
            pack_nibbles(b[i].qs + 16 * ib, L);
            l += 32;
            b[i].scales_l[ib / 2] |= (uint8_t)((l & 0xF) << (4 * (ib % 2)));
            b[i].scales_h |= (uint16_t)((l >> 4) << (2 * ib));
        }
    }
}
