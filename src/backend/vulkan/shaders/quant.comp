#version 450
// Activations encoded as the CPU's vec_dot types (rp_act_q8_0 / q8_1 / q8_K,
// the same rounding): one invocation per block of one token.
// Output per token (y_stride words): the quants as signed bytes (ne0 / 4
// words), then per block of 32 d (Q8_0, Q8_1; the fp16-rounded value as a
// float) and s (Q8_1), or per 256 d and per 16 the sum of the quants (Q8_K).
#include "common.glsl"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer BX { float x[]; };
layout(std430, binding = 1) writeonly buffer BY { uint y[]; };
layout(push_constant) uniform PC {
    uint ne0, n_tok, x_off, x_stride, y_off, y_stride;
} pc;

#ifdef ACT_Q8_K
#define BS 256u
#else
#define BS 32u
#endif

void main() {
    uint blk = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
    if (blk >= pc.ne0 / BS || t >= pc.n_tok) return;
    uint xo = pc.x_off + t * pc.x_stride + blk * BS;
    uint yo = pc.y_off + t * pc.y_stride;
    uint nq = pc.ne0 / 4u;
#ifdef ACT_Q8_K
    float amax = 0.0, mx = 0.0;
    for (uint j = 0u; j < BS; j++) {
        float v = x[xo + j];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    uint sums = nq + pc.ne0 / 256u + blk * 16u;
    if (amax == 0.0) {
        for (uint k = 0u; k < BS / 4u; k++) y[yo + blk * (BS / 4u) + k] = 0u;
        y[yo + nq + blk] = 0u;
        for (uint g = 0u; g < 16u; g++) y[yo + sums + g] = 0u;
        return;
    }
    float iscale = div_rn(-127.0, mx);
    for (uint g = 0u; g < 16u; g++) {
        int sum = 0;
        for (uint k = 0u; k < 4u; k++) {
            uint word = 0u;
            for (uint l = 0u; l < 4u; l++) {
                precise float p = iscale * x[xo + 16u * g + 4u * k + l];
                int q = min(nearest_int(p), 127);
                sum += q;
                word |= (uint(q) & 0xffu) << (8u * l);
            }
            y[yo + blk * 64u + 4u * g + k] = word;
        }
        y[yo + sums + g] = uint(sum);
    }
    y[yo + nq + blk] = floatBitsToUint(div_rn(1.0, iscale));
#else
    float amax = 0.0;
    for (uint j = 0u; j < BS; j++) amax = max(amax, abs(x[xo + j]));
    float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
    int sum = 0;
    for (uint k = 0u; k < 8u; k++) {
        uint word = 0u;
        for (uint l = 0u; l < 4u; l++) {
            precise float p = x[xo + 4u * k + l] * id;
            int q = nearest_int(p);
            sum += q;
            word |= (uint(q) & 0xffu) << (8u * l);
        }
        y[yo + blk * 8u + k] = word;
    }
    float d = div_rn(amax, 127.0);
    y[yo + nq + blk] = floatBitsToUint(f16_round(d));
#ifdef ACT_Q8_1
    precise float s = d * float(sum);
    y[yo + nq + pc.ne0 / 32u + blk] = floatBitsToUint(f16_round(s));
#endif
#endif
}
