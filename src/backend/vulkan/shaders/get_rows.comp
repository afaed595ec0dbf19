#version 450
// Rows of a weight as floats (embedding lookups), dequantized exactly as the
// CPU does: invocation (unit u, token t) writes 32 values of row ids[t], when
// that row lies in this dispatch's window [r0, r0 + nr) of the weight.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer BW { uint w[]; };
layout(std430, binding = 1) readonly buffer BI { int ids[]; };
layout(std430, binding = 2) writeonly buffer BD { float dst[]; };
layout(push_constant) uniform PC {
    uint ne0, row_bytes, w_off, r0, nr, ids_off, dst_off, n_tok;
} pc;

#include "wtypes.glsl"

void main() {
    const uint u = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
    const uint nu = (pc.ne0 + 31u) / 32u;
    if (u >= nu || t >= pc.n_tok) return;
    const uint id = uint(ids[pc.ids_off + t]);
    if (id < pc.r0 || id >= pc.r0 + pc.nr) return;
    const uint rb = pc.w_off + (id - pc.r0) * pc.row_bytes;
    const uint o = pc.dst_off + t * pc.ne0 + u * 32u;
#ifdef FLOAT_W
    const uint n = min(32u, pc.ne0 - u * 32u);
    float v[32];
    unit_f(rb, u, n, v);
    for (uint e = 0u; e < n; e++) dst[o + e] = v[e];
#else
    uint q[8];
    int sc0, sc1, mn0, mn1;
    float dw, bw;
    unit_q(rb, u, q, sc0, sc1, dw, bw, mn0, mn1);
    [[unroll]] for (uint e = 0u; e < 32u; e++)
        dst[o + e] = unit_value(q, sc0, sc1, dw, bw, mn0, mn1, e);
#endif
}
