// Weight decoders, one per type (WT_<type> defined by the build). The weight
// buffer is w[] (words); rb is the byte offset of a row; a row is read in
// units of 32 weights (a block of the 32-wide types, an eighth of a K-quant
// super-block).
//
// Integer types give, for unit u: q[8] the 32 quants as signed bytes (four a
// word, element e in word e / 4, lane e % 4), the integer scales of its two
// halves sc0 / sc1 (1 for the 32-wide types), the float block scale dw, and
// for the types with a minimum: bw (Q4_1 / Q5_1: m, added as m * s of the
// activations; K-quants: dmin, subtracted as dmin * d_x * (mn0 * bsum0 + mn1 *
// bsum1) over the halves' integer mins). A weight is (dw * sc) * q, plus bw
// (MIN_KIND 1) or minus bw * mn (MIN_KIND 2): the CPU's dequantization.
//
// Float types (F32, F16, BF16) give the 32 floats (n valid) of unit u.

uint wb(uint o) {
    return (w[o >> 2] >> ((o & 3u) << 3)) & 0xffu;
}
uint wh(uint o) { // o even
    return (w[o >> 2] >> ((o & 2u) << 3)) & 0xffffu;
}
uint w32(uint o) { // any byte offset
    uint s = (o & 3u) << 3;
    uint lo = w[o >> 2];
    return s == 0u ? lo : (lo >> s) | (w[(o >> 2) + 1u] << (32u - s));
}
float wf16(uint o) {
    return h2f(wh(o));
}
// lanes of levels 0..127 minus off (<= 64), as signed bytes
uint sub_lanes(uint x, uint off) {
    return ((x | 0x80808080u) - off * 0x01010101u) ^ 0x80808080u;
}
// four bits b0..b3 of x, from bit `bit`, to bit 4 of lanes 0..3
uint spread4(uint x, uint bit) {
    uint b = (x >> bit) & 0xfu;
    return ((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25);
}

#if defined(WT_q4_0) || defined(WT_q4_1) || defined(WT_iq4_nl) || defined(WT_iq4_xs)
#define NIB_TYPES 1
#endif
#if defined(WT_iq4_nl) || defined(WT_iq4_xs)
const int kvalues[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
uint kv4(uint nibs) { // four nibbles in bits 0-3 of each lane -> grid values
    return (uint(kvalues[nibs & 0xfu]) & 0xffu) | ((uint(kvalues[(nibs >> 8) & 0xfu]) & 0xffu) << 8) |
           ((uint(kvalues[(nibs >> 16) & 0xfu]) & 0xffu) << 16) |
           (uint(kvalues[(nibs >> 24) & 0xfu]) << 24);
}
#endif

#if defined(WT_q4_0)
#define BLOCK_BYTES 18u
#define UPB 1u
#define MIN_KIND 0
#define ACT_Q8_0 1
#elif defined(WT_q4_1)
#define BLOCK_BYTES 20u
#define UPB 1u
#define MIN_KIND 1
#define ACT_Q8_1 1
#elif defined(WT_q5_0)
#define BLOCK_BYTES 22u
#define UPB 1u
#define MIN_KIND 0
#define ACT_Q8_0 1
#elif defined(WT_q5_1)
#define BLOCK_BYTES 24u
#define UPB 1u
#define MIN_KIND 1
#define ACT_Q8_1 1
#elif defined(WT_q8_0)
#define BLOCK_BYTES 34u
#define UPB 1u
#define MIN_KIND 0
#define ACT_Q8_0 1
#elif defined(WT_iq4_nl)
#define BLOCK_BYTES 18u
#define UPB 1u
#define MIN_KIND 0
#define ACT_Q8_0 1
#elif defined(WT_q2_K)
#define BLOCK_BYTES 84u
#define UPB 8u
#define MIN_KIND 2
#define ACT_Q8_K 1
#elif defined(WT_q3_K)
#define BLOCK_BYTES 110u
#define UPB 8u
#define MIN_KIND 0
#define ACT_Q8_K 1
#elif defined(WT_q4_K)
#define BLOCK_BYTES 144u
#define UPB 8u
#define MIN_KIND 2
#define ACT_Q8_K 1
#elif defined(WT_q5_K)
#define BLOCK_BYTES 176u
#define UPB 8u
#define MIN_KIND 2
#define ACT_Q8_K 1
#elif defined(WT_q6_K)
#define BLOCK_BYTES 210u
#define UPB 8u
#define MIN_KIND 0
#define ACT_Q8_K 1
#elif defined(WT_iq4_xs)
#define BLOCK_BYTES 136u
#define UPB 8u
#define MIN_KIND 0
#define ACT_Q8_K 1
#elif defined(WT_f32) || defined(WT_f16) || defined(WT_bf16)
#define FLOAT_W 1
#else
#error "no weight type"
#endif

#ifdef FLOAT_W
void unit_f(uint rb, uint u, uint n, out float v[32]) {
    [[unroll]] for (uint e = 0u; e < 32u; e++) {
        uint i = u * 32u + e;
        float x = 0.0;
        if (e < n) {
#if defined(WT_f32)
            x = uintBitsToFloat(w[(rb >> 2) + i]);
#elif defined(WT_f16)
            x = wf16(rb + 2u * i);
#else
            x = uintBitsToFloat(wh(rb + 2u * i) << 16);
#endif
        }
        v[e] = x;
    }
}
#else
// K-quant 6-bit scale and min j (0..7) of the 12 bytes at o
void k4_scale_min(uint o, uint j, out int sc, out int m) {
    if (j < 4u) {
        sc = int(wb(o + j) & 63u);
        m = int(wb(o + j + 4u) & 63u);
    } else {
        sc = int((wb(o + j + 4u) & 0xfu) | ((wb(o + j - 4u) >> 6) << 4));
        m = int((wb(o + j + 4u) >> 4) | ((wb(o + j) >> 6) << 4));
    }
}
int q3k_scale(uint o, uint j) { // j 0..15, bytes at o
    uint lo = j < 8u ? wb(o + j) & 0xfu : wb(o + j - 8u) >> 4;
    uint hi = (wb(o + 8u + j % 4u) >> (2u * (j / 4u))) & 3u;
    return int(lo | (hi << 4)) - 32;
}

void unit_q(uint rb, uint u, out uint q[8], out int sc0, out int sc1, out float dw, out float bw,
            out int mn0, out int mn1) {
    uint bo = rb + (u / UPB) * BLOCK_BYTES;
    uint j = u % UPB;
    sc0 = 1;
    sc1 = 1;
    bw = 0.0;
    mn0 = 0;
    mn1 = 0;
#if defined(WT_q4_0) || defined(WT_q4_1) || defined(WT_iq4_nl)
#if defined(WT_q4_1)
    uint qo = bo + 4u;
    bw = wf16(bo + 2u);
#else
    uint qo = bo + 2u;
#endif
    dw = wf16(bo);
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uint x = w32(qo + 4u * k);
#if defined(WT_q4_0)
        q[k] = sub_lanes(x & 0x0f0f0f0fu, 8u);
        q[k + 4u] = sub_lanes((x >> 4) & 0x0f0f0f0fu, 8u);
#elif defined(WT_q4_1)
        q[k] = x & 0x0f0f0f0fu;
        q[k + 4u] = (x >> 4) & 0x0f0f0f0fu;
#else
        q[k] = kv4(x & 0x0f0f0f0fu);
        q[k + 4u] = kv4((x >> 4) & 0x0f0f0f0fu);
#endif
    }
#elif defined(WT_q5_0) || defined(WT_q5_1)
#if defined(WT_q5_1)
    uint ho = bo + 4u, qo = bo + 8u;
    bw = wf16(bo + 2u);
#else
    uint ho = bo + 2u, qo = bo + 6u;
#endif
    dw = wf16(bo);
    uint qh = w32(ho);
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uint x = w32(qo + 4u * k);
        uint lo = (x & 0x0f0f0f0fu) | spread4(qh, 4u * k);
        uint hi = ((x >> 4) & 0x0f0f0f0fu) | spread4(qh, 16u + 4u * k);
#if defined(WT_q5_0)
        q[k] = sub_lanes(lo, 16u);
        q[k + 4u] = sub_lanes(hi, 16u);
#else
        q[k] = lo;
        q[k + 4u] = hi;
#endif
    }
#elif defined(WT_q8_0)
    dw = wf16(bo);
    [[unroll]] for (uint k = 0u; k < 8u; k++) q[k] = w32(bo + 2u + 4u * k);
#elif defined(WT_q2_K)
    dw = wf16(bo + 80u);
    bw = wf16(bo + 82u);
    uint s0 = wb(bo + 2u * j), s1 = wb(bo + 2u * j + 1u);
    sc0 = int(s0 & 0xfu);
    sc1 = int(s1 & 0xfu);
    mn0 = int(s0 >> 4);
    mn1 = int(s1 >> 4);
    [[unroll]] for (uint k = 0u; k < 8u; k++)
        q[k] = (w32(bo + 16u + 32u * (j / 4u) + 4u * k) >> (2u * (j % 4u))) & 0x03030303u;
#elif defined(WT_q3_K)
    dw = wf16(bo + 108u);
    sc0 = q3k_scale(bo + 96u, 2u * j);
    sc1 = q3k_scale(bo + 96u, 2u * j + 1u);
    [[unroll]] for (uint k = 0u; k < 8u; k++) {
        uint lo = (w32(bo + 32u + 32u * (j / 4u) + 4u * k) >> (2u * (j % 4u))) & 0x03030303u;
        uint hm = (w32(bo + 4u * k) >> j) & 0x01010101u;
        q[k] = sub_lanes(lo | (hm << 2), 4u);
    }
#elif defined(WT_q4_K) || defined(WT_q5_K)
    dw = wf16(bo);
    bw = wf16(bo + 2u);
    int sc, m;
    k4_scale_min(bo + 4u, j, sc, m);
    sc0 = sc;
    sc1 = sc;
    mn0 = m;
    mn1 = m;
#if defined(WT_q4_K)
    uint qo = bo + 16u + 32u * (j / 2u);
#else
    uint qo = bo + 48u + 32u * (j / 2u);
#endif
    [[unroll]] for (uint k = 0u; k < 8u; k++) {
        uint x = w32(qo + 4u * k);
        uint nib = (j % 2u) != 0u ? (x >> 4) & 0x0f0f0f0fu : x & 0x0f0f0f0fu;
#if defined(WT_q5_K)
        nib |= ((w32(bo + 16u + 4u * k) >> j) & 0x01010101u) << 4;
#endif
        q[k] = nib;
    }
#elif defined(WT_q6_K)
    dw = wf16(bo + 208u);
    sc0 = bitfieldExtract(int(wb(bo + 192u + 2u * j)), 0, 8);
    sc1 = bitfieldExtract(int(wb(bo + 193u + 2u * j)), 0, 8);
    uint h = j / 4u, k2 = j % 4u;
    [[unroll]] for (uint k = 0u; k < 8u; k++) {
        uint l = w32(bo + 64u * h + 32u * (k2 & 1u) + 4u * k);
        uint q4 = (k2 < 2u ? l : l >> 4) & 0x0f0f0f0fu;
        uint hh = (w32(bo + 128u + 32u * h + 4u * k) >> (2u * k2)) & 0x03030303u;
        q[k] = sub_lanes(q4 | (hh << 4), 32u);
    }
#elif defined(WT_iq4_xs)
    dw = wf16(bo);
    uint sh = wh(bo + 2u);
    int ls = int(((wb(bo + 4u + j / 2u) >> (4u * (j % 2u))) & 0xfu) | (((sh >> (2u * j)) & 3u) << 4)) - 32;
    sc0 = ls;
    sc1 = ls;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uint x = w32(bo + 8u + 16u * j + 4u * k);
        q[k] = kv4(x & 0x0f0f0f0fu);
        q[k + 4u] = kv4((x >> 4) & 0x0f0f0f0fu);
    }
#endif
}

// weight e (0..31) of a decoded unit as the CPU dequantizes it
float unit_value(uint q[8], int sc0, int sc1, float dw, float bw, int mn0, int mn1, uint e) {
    int qv = i8x4(q[e / 4u])[e % 4u];
    int sc = e < 16u ? sc0 : sc1;
    precise float d1 = dw * float(sc);
    precise float val = d1 * float(qv);
#if MIN_KIND == 1
    val = val + bw;
#elif MIN_KIND == 2
    precise float m1 = bw * float(e < 16u ? mn0 : mn1);
    val = val - m1;
#endif
    return val;
}
#endif
