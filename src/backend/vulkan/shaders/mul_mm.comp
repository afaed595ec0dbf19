#version 450
// Matrix-matrix products for prompts: a workgroup computes a tile of BM rows
// x BN tokens. Per step it decodes BK units of its rows into shared memory
// (the quants as signed bytes with their scales, or floats) beside the
// matching activations, then each invocation accumulates its outputs with
// integer sums per half unit scaled in float (plain FMA for float weights).
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer BW { uint w[]; };
layout(std430, binding = 1) readonly buffer BX { uint xa[]; };
layout(std430, binding = 2) writeonly buffer BY { float y[]; };
layout(push_constant) uniform PC {
    uint ne0, nr, row_bytes, w_off, x_off, x_stride, y_off, y_stride, n_tok;
} pc;

#include "wtypes.glsl"
#ifndef FLOAT_W
#include "act.glsl"
#endif

#define BM 32u
#define BN 32u
#define MAXO 16u /* outputs per invocation: BM * BN / WG with WG >= 64 */

#ifdef FLOAT_W
#define BK 1u
shared float sw[BM * BK * 32u];
shared float sx[BN * BK * 32u];
#else
#define BK 4u
shared uint sq[BM * BK * 8u];
shared int ssc[BM * BK * 2u];
shared int smn[BM * BK * 2u];
shared float sdw[BM * BK], sbw[BM * BK];
shared uint sxq[BN * BK * 8u];
shared float sdx[BN * BK], ssx[BN * BK];
shared int sbs[BN * BK * 2u];
#endif

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint r0 = gl_WorkGroupID.x * BM, t0 = gl_WorkGroupID.y * BN;
    const uint nu = (pc.ne0 + 31u) / 32u;
    const uint no = (BM * BN) / WG;
    float acc[MAXO];
    [[unroll]] for (uint i = 0u; i < MAXO; i++) acc[i] = 0.0;

    for (uint u0 = 0u; u0 < nu; u0 += BK) {
#ifdef FLOAT_W
        for (uint i = tid; i < BM * BK; i += WG) {
            const uint r = i % BM, k = i / BM, u = u0 + k;
            float v[32];
            if (r0 + r < pc.nr && u < nu) {
                unit_f(pc.w_off + (r0 + r) * pc.row_bytes, u, min(32u, pc.ne0 - u * 32u), v);
            } else {
                [[unroll]] for (uint e = 0u; e < 32u; e++) v[e] = 0.0;
            }
            [[unroll]] for (uint e = 0u; e < 32u; e++) sw[(r * BK + k) * 32u + e] = v[e];
        }
        for (uint i = tid; i < BN * BK * 32u; i += WG) {
            const uint t = i / (BK * 32u), c = i % (BK * 32u), col = u0 * 32u + c;
            float xv = 0.0;
            if (t0 + t < pc.n_tok && col < pc.ne0)
                xv = uintBitsToFloat(xa[pc.x_off + (t0 + t) * pc.x_stride + col]);
            sx[t * BK * 32u + c] = xv;
        }
        barrier();
        [[unroll]] for (uint j = 0u; j < MAXO; j++) {
            if (j >= no) break;
            const uint o = tid + j * WG, r = o % BM, t = o / BM;
            float s = 0.0;
            for (uint c = 0u; c < BK * 32u; c++) s += sw[r * BK * 32u + c] * sx[t * BK * 32u + c];
            acc[j] += s;
        }
        barrier();
#else
        for (uint i = tid; i < BM * BK; i += WG) {
            const uint r = i % BM, k = i / BM, u = u0 + k, si = r * BK + k;
            uint q[8];
            int sc0 = 0, sc1 = 0, mn0 = 0, mn1 = 0;
            float dw = 0.0, bw = 0.0;
            if (r0 + r < pc.nr && u < nu) {
                unit_q(pc.w_off + (r0 + r) * pc.row_bytes, u, q, sc0, sc1, dw, bw, mn0, mn1);
            } else {
                [[unroll]] for (uint e = 0u; e < 8u; e++) q[e] = 0u;
            }
            [[unroll]] for (uint e = 0u; e < 8u; e++) sq[si * 8u + e] = q[e];
            ssc[si * 2u] = sc0;
            ssc[si * 2u + 1u] = sc1;
            smn[si * 2u] = mn0;
            smn[si * 2u + 1u] = mn1;
            sdw[si] = dw;
            sbw[si] = bw;
        }
        for (uint i = tid; i < BN * BK; i += WG) {
            const uint t = i % BN, k = i / BN, u = u0 + k, si = t * BK + k;
            const bool ok = t0 + t < pc.n_tok && u < nu;
            const uint xo = pc.x_off + (t0 + t) * pc.x_stride;
            [[unroll]] for (uint e = 0u; e < 8u; e++) sxq[si * 8u + e] = ok ? xa[xo + u * 8u + e] : 0u;
            sdx[si] = ok ? act_d(xo, u, pc.ne0) : 0.0;
#ifdef ACT_Q8_1
            ssx[si] = ok ? act_s(xo, u, pc.ne0) : 0.0;
#endif
#ifdef ACT_Q8_K
            sbs[si * 2u] = ok ? act_bsum(xo, u, 0u, pc.ne0) : 0;
            sbs[si * 2u + 1u] = ok ? act_bsum(xo, u, 1u, pc.ne0) : 0;
#endif
        }
        barrier();
        [[unroll]] for (uint j = 0u; j < MAXO; j++) {
            if (j >= no) break;
            const uint o = tid + j * WG, r = o % BM, t = o / BM;
            float s = 0.0;
            for (uint k = 0u; k < BK; k++) {
                const uint wi = r * BK + k, xi = t * BK + k;
                int s0 = 0, s1 = 0;
                [[unroll]] for (uint e = 0u; e < 4u; e++) {
                    s0 += dot4(sq[wi * 8u + e], sxq[xi * 8u + e]);
                    s1 += dot4(sq[wi * 8u + 4u + e], sxq[xi * 8u + 4u + e]);
                }
                const float dx = sdx[xi];
                float c = float(ssc[wi * 2u] * s0 + ssc[wi * 2u + 1u] * s1) * (sdw[wi] * dx);
#if MIN_KIND == 1
                c += sbw[wi] * ssx[xi];
#elif MIN_KIND == 2
                c -= float(smn[wi * 2u] * sbs[xi * 2u] + smn[wi * 2u + 1u] * sbs[xi * 2u + 1u]) *
                     (sbw[wi] * dx);
#endif
                s += c;
            }
            acc[j] += s;
        }
        barrier();
#endif
    }
    [[unroll]] for (uint j = 0u; j < MAXO; j++) {
        if (j >= no) break;
        const uint o = tid + j * WG, r = o % BM, t = o / BM;
        if (r0 + r < pc.nr && t0 + t < pc.n_tok) y[pc.y_off + (t0 + t) * pc.y_stride + r0 + r] = acc[j];
    }
}
