#version 450
// Causal attention of one sequence's tokens over its cache, a workgroup per
// (token, query head), online softmax over blocks of WG keys: each
// invocation scores one key of the block (scale, then soft-cap), the block's
// maximum and sum are reduced over the workgroup, and the invocations then
// accumulate the weighted V rows for their own output dims. Keys visible to
// the token at position p: max(0, p - window + 1) .. p (window 0: all), cell
// = position % cap. K_F16 / V_F16 select the cache element types.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
#define MAXD 256u

layout(std430, binding = 0) readonly buffer BQ { float q[]; };
layout(std430, binding = 1) writeonly buffer BO { float outp[]; };
layout(std430, binding = 2) readonly buffer CK { uint kc[]; };
layout(std430, binding = 3) readonly buffer CV { uint vc[]; };
layout(std430, binding = 4) readonly buffer BL { int list[]; };
layout(std430, binding = 5) readonly buffer BP { int pos[]; };
layout(push_constant) uniform PC {
    uint n_list, q_stride, out_stride, q_off, out_off, dk, dv, group, h0, cap, kc_off, vc_off;
    float scale, softcap;
    uint window, list_off, pos_off, t_base;
} pc;

#include "reduce.glsl"

shared float sq[MAXD];
shared float sp[WG];

float vval(uint i) {
#ifdef V_F16
    vec2 p = unpackHalf2x16(vc[i >> 1]);
    return (i & 1u) != 0u ? p.y : p.x;
#else
    return uintBitsToFloat(vc[i]);
#endif
}

void main() {
    const uint li = gl_WorkGroupID.x, hl = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    const uint t = uint(list[pc.list_off + li]);
    const uint h = pc.h0 + hl;               /* query head */
    const uint g = h / pc.group - pc.h0 / pc.group; /* KV head within the bound window */
    const uint qo = pc.q_off + (t - pc.t_base) * pc.q_stride + h * pc.dk;
    for (uint i = tid; i < pc.dk; i += WG) sq[i] = q[qo + i];
    barrier();
    const int p = pos[pc.pos_off + t];
    const int lo = pc.window > 0u ? max(0, p - int(pc.window) + 1) : 0;
    const uint kb = pc.kc_off + g * pc.cap * pc.dk, vb = pc.vc_off + g * pc.cap * pc.dv;
    float m = -1.0 / 0.0, l = 0.0;
    float o[MAXD / 64u];
    [[unroll]] for (uint k = 0u; k < MAXD / 64u; k++) o[k] = 0.0;
    for (int base = lo; base <= p; base += int(WG)) {
        const int i = base + int(tid);
        float s = -1.0 / 0.0;
        if (i <= p) {
            const uint row = kb + (uint(i) % pc.cap) * pc.dk;
            float d = 0.0;
#ifdef K_F16
            for (uint e = 0u; e < pc.dk; e += 2u) {
                const vec2 kk = unpackHalf2x16(kc[(row + e) >> 1]);
                d += kk.x * sq[e] + kk.y * sq[e + 1u];
            }
#else
            for (uint e = 0u; e < pc.dk; e++) d += uintBitsToFloat(kc[row + e]) * sq[e];
#endif
            s = d * pc.scale;
            if (pc.softcap > 0.0) s = pc.softcap * tanh_safe(s / pc.softcap);
        }
        const float mb = wg_max(s);
        const float mn = max(m, mb);
        const float pe = i <= p ? exp(s - mn) : 0.0;
        sp[tid] = pe;
        const float sum = wg_sum(pe); /* its barriers publish sp */
        const float corr = exp(m - mn);
        l = l * corr + sum;
        const uint cnt = uint(min(int(WG), p - base + 1));
        [[unroll]] for (uint k = 0u; k < MAXD / 64u; k++) {
            const uint d = tid + k * WG;
            if (d >= pc.dv) break;
            float acc = o[k] * corr;
            for (uint j = 0u; j < cnt; j++)
                acc += sp[j] * vval(vb + (uint(base + int(j)) % pc.cap) * pc.dv + d);
            o[k] = acc;
        }
        m = mn;
        barrier();
    }
    const uint oo = pc.out_off + (t - pc.t_base) * pc.out_stride + h * pc.dv;
    [[unroll]] for (uint k = 0u; k < MAXD / 64u; k++) {
        const uint d = tid + k * WG;
        if (d >= pc.dv) break;
        outp[oo + d] = o[k] / l;
    }
}
