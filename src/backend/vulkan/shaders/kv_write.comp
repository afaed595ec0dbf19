#version 450
// K and V rows of one sequence's tokens into its cache cells (pos % cap),
// F32 or F16 (round to nearest even, as rp_kv_write): invocation (pair,
// token) writes two adjacent elements of K and of V, so an F16 cache is
// written in whole words (head dims are even).
#include "common.glsl"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer BK { float ksrc[]; };
layout(std430, binding = 1) readonly buffer BV { float vsrc[]; };
layout(std430, binding = 2) buffer CK { uint kc[]; };
layout(std430, binding = 3) buffer CV { uint vc[]; };
layout(std430, binding = 4) readonly buffer BL { int list[]; };
layout(std430, binding = 5) readonly buffer BP { int pos[]; };
layout(push_constant) uniform PC {
    uint n_list, nh, dk, dv, k_stride, v_stride, k_off, v_off, kc_off, vc_off, cap, flags,
        list_off, pos_off, t_base, h0;
} pc;

// element i of the n_h heads of dim d (F32: any dim; F16: i even, d even)
void put(uint which, bool f16, uint i, uint dim, uint src_off, uint stride, uint t, uint c_off,
         uint cell) {
    const uint h = i / dim, d = i % dim;
    const uint s = src_off + (t - pc.t_base) * stride + (pc.h0 + h) * dim + d;
    const uint c = c_off + (h * pc.cap + cell) * dim + d;
    const float a = which == 0u ? ksrc[s] : vsrc[s];
    if (f16) {
        const float b = which == 0u ? ksrc[s + 1u] : vsrc[s + 1u];
        const uint word = f2h(a) | (f2h(b) << 16);
        if (which == 0u) kc[c / 2u] = word; else vc[c / 2u] = word;
    } else if (which == 0u) {
        kc[c] = floatBitsToUint(a);
    } else {
        vc[c] = floatBitsToUint(a);
    }
}

void main() {
    const uint j = gl_GlobalInvocationID.x, li = gl_GlobalInvocationID.y;
    if (li >= pc.n_list) return;
    const uint t = uint(list[pc.list_off + li]);
    const uint cell = uint(pos[pc.pos_off + t]) % pc.cap;
    const bool kf = (pc.flags & 1u) != 0u, vf = (pc.flags & 2u) != 0u;
    for (uint i = 2u * j; i < 2u * j + 2u; i++) {
        if (i < pc.nh * pc.dk && (!kf || i % 2u == 0u))
            put(0u, kf, i, pc.dk, pc.k_off, pc.k_stride, t, pc.kc_off, cell);
        if (i < pc.nh * pc.dv && (!vf || i % 2u == 0u))
            put(1u, vf, i, pc.dv, pc.v_off, pc.v_stride, t, pc.vc_off, cell);
    }
}
