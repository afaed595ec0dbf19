#version 450
// Matrix-vector products for a few tokens (generation, short verification
// batches): a workgroup computes NR rows for NT tokens; its invocations take
// the rows' units of 32 in turn, read the weight blocks as they are stored
// and multiply them with the activations in the weight's vec_dot encoding
// (integer sums per half unit, scaled in float) or, for float weights, with
// the F32 activations; then the workgroup sums its invocations' parts.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const uint NR = 2;
layout(constant_id = 2) const uint NT = 1;
layout(local_size_x_id = 0) in;
#define MAXR 2u
#define MAXT 8u

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

#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
shared float part[MAXR * MAXT * 32u];
#else
shared float part[MAXR * MAXT * WG];
#endif

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint r0 = gl_WorkGroupID.x * NR, t0 = gl_WorkGroupID.y * NT;
    const uint nu = (pc.ne0 + 31u) / 32u;
    float acc[MAXR * MAXT];
    [[unroll]] for (uint i = 0u; i < MAXR * MAXT; i++) acc[i] = 0.0;
    for (uint u = tid; u < nu; u += WG) {
        [[unroll]] for (uint r = 0u; r < MAXR; r++) {
            if (r >= NR || r0 + r >= pc.nr) break;
            const uint rb = pc.w_off + (r0 + r) * pc.row_bytes;
#ifdef FLOAT_W
            float wv[32];
            unit_f(rb, u, min(32u, pc.ne0 - u * 32u), wv);
            [[unroll]] for (uint t = 0u; t < MAXT; t++) {
                if (t >= NT || t0 + t >= pc.n_tok) break;
                const uint xo = pc.x_off + (t0 + t) * pc.x_stride + u * 32u;
                const uint n = min(32u, pc.ne0 - u * 32u);
                float s = 0.0;
                for (uint e = 0u; e < n; e++) s += wv[e] * uintBitsToFloat(xa[xo + e]);
                acc[r * MAXT + t] += s;
            }
#else
            uint q[8];
            int sc0, sc1, mn0, mn1;
            float dw, bw;
            unit_q(rb, u, q, sc0, sc1, dw, bw, mn0, mn1);
            [[unroll]] for (uint t = 0u; t < MAXT; t++) {
                if (t >= NT || t0 + t >= pc.n_tok) break;
                const uint xo = pc.x_off + (t0 + t) * pc.x_stride;
                const uint xq = xo + u * 8u;
                int s0 = dot4(q[0], xa[xq]) + dot4(q[1], xa[xq + 1u]) + dot4(q[2], xa[xq + 2u]) +
                         dot4(q[3], xa[xq + 3u]);
                int s1 = dot4(q[4], xa[xq + 4u]) + dot4(q[5], xa[xq + 5u]) +
                         dot4(q[6], xa[xq + 6u]) + dot4(q[7], xa[xq + 7u]);
                const float dx = act_d(xo, u, pc.ne0);
                float c = float(sc0 * s0 + sc1 * s1) * (dw * dx);
#if MIN_KIND == 1
                c += bw * act_s(xo, u, pc.ne0);
#elif MIN_KIND == 2
                c -= float(mn0 * act_bsum(xo, u, 0u, pc.ne0) + mn1 * act_bsum(xo, u, 1u, pc.ne0)) *
                     (bw * dx);
#endif
                acc[r * MAXT + t] += c;
            }
#endif
        }
    }
    const uint nk = NR * NT;
#ifdef USE_SUBGROUP
    [[unroll]] for (uint k = 0u; k < MAXR * MAXT; k++) {
        if (k >= nk) break;
        const float s = subgroupAdd(acc[(k / NT) * MAXT + k % NT]);
        if (subgroupElect()) part[k * 32u + gl_SubgroupID] = s;
    }
    barrier();
    if (tid < nk) {
        float s = 0.0;
        for (uint i = 0u; i < gl_NumSubgroups; i++) s += part[tid * 32u + i];
        const uint r = tid / NT, t = tid % NT;
        if (r0 + r < pc.nr && t0 + t < pc.n_tok) y[pc.y_off + (t0 + t) * pc.y_stride + r0 + r] = s;
    }
#else
    [[unroll]] for (uint k = 0u; k < MAXR * MAXT; k++) {
        if (k >= nk) break;
        part[k * WG + tid] = acc[(k / NT) * MAXT + k % NT];
    }
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s)
            for (uint k = 0u; k < nk; k++) part[k * WG + tid] += part[k * WG + tid + s];
        barrier();
    }
    if (tid < nk) {
        const uint r = tid / NT, t = tid % NT;
        if (r0 + r < pc.nr && t0 + t < pc.n_tok)
            y[pc.y_off + (t0 + t) * pc.y_stride + r0 + r] = part[tid * WG];
    }
#endif
}
