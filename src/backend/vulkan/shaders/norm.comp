#version 450
// RMSNorm / LayerNorm of rows, a workgroup per row. Row r is head r % rpt of
// token r / rpt: x at x_off + xt * x_stride + h * n (xt = ids[token] - x_row0
// with an id list, else the token), y at y_off + token * y_stride + h * n.
// y = (x * scale) * w (+ b), scale = 1 / sqrt(mean square + eps), as rp_rmsnorm
// / rp_layernorm compute it; in place allowed.
#include "common.glsl"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer BX { float x[]; };
layout(std430, binding = 1) buffer BY { float y[]; };
layout(std430, binding = 2) readonly buffer BWt { float wt[]; };
layout(std430, binding = 3) readonly buffer BB { float bias[]; };
layout(std430, binding = 4) readonly buffer BI { int ids[]; };
layout(push_constant) uniform PC {
    uint n, rpt, x_stride, y_stride, x_off, y_off, w_off, b_off, ids_off, flags;
    float eps;
    uint n_rows, x_row0;
} pc;

#include "reduce.glsl"

void main() {
    const uint r = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
    if (r >= pc.n_rows) return;
    const uint t = r / pc.rpt, h = r % pc.rpt;
    const uint xt = (pc.flags & 8u) != 0u ? uint(ids[pc.ids_off + t]) - pc.x_row0 : t;
    const uint xo = pc.x_off + xt * pc.x_stride + h * pc.n;
    const uint yo = pc.y_off + t * pc.y_stride + h * pc.n;
    const bool layer = (pc.flags & 4u) != 0u;
    float mean = 0.0;
    if (layer) {
        float s = 0.0;
        for (uint i = tid; i < pc.n; i += WG) s += x[xo + i];
        mean = wg_sum(s) / float(pc.n);
    }
    float ss = 0.0;
    for (uint i = tid; i < pc.n; i += WG) {
        const float d = x[xo + i] - mean;
        ss += d * d;
    }
    ss = wg_sum(ss);
    const float scale = 1.0 / sqrt(ss / float(pc.n) + pc.eps);
    for (uint i = tid; i < pc.n; i += WG) {
        precise float v = (x[xo + i] - mean) * scale;
        if ((pc.flags & 1u) != 0u) v = v * wt[pc.w_off + i];
        if ((pc.flags & 2u) != 0u) v = v + bias[pc.b_off + i];
        y[yo + i] = v;
    }
}
