#version 450
// Element-wise ops over y[n] (x an operand buffer or a bias row): add, mul,
// scale, soft-cap, and the gated activations gate = act(gate) * up with
// act = SiLU, tanh GELU, erf GELU, or tanh GELU through fp16 as ggml's CPU
// backend evaluates it (rp_gelu_tanh_f16_mul). Four elements an invocation,
// strided over the grid.
#include "common.glsl"

layout(constant_id = 0) const uint WG = 256;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) buffer BY { float y[]; };
layout(std430, binding = 1) readonly buffer BX { float x[]; };
layout(push_constant) uniform PC {
    uint op, n, y_off, x_off, width, phase;
    float s;
} pc;

float gelu_tanh(float v) {
    const float c = 0.7978845608028654;
    return 0.5 * v * (1.0 + tanh_safe(c * v * (1.0 + 0.044715 * v * v)));
}

// erf to ~1e-7 (W. J. Cody's form of Abramowitz & Stegun 7.1.26 is 1.5e-7;
// this is the rational erfc approximation of Numerical Recipes' erfcc,
// fractional error < 1.2e-7)
float erf_approx(float v) {
    const float z = abs(v), t = 1.0 / (1.0 + 0.5 * z);
    const float r = t * exp(-z * z - 1.26551223 +
                            t * (1.00002368 +
                                 t * (0.37409196 +
                                      t * (0.09678418 +
                                           t * (-0.18628806 +
                                                t * (0.27886807 +
                                                     t * (-1.13520398 +
                                                          t * (1.48851587 +
                                                               t * (-0.82215223 +
                                                                    t * 0.17087277)))))))));
    return v >= 0.0 ? 1.0 - r : r - 1.0;
}

float apply(uint op, float yv, float xv) {
    switch (op) {
    case 0u: return yv + xv;
    case 1u: return yv * xv;
    case 2u: return yv * pc.s;
    case 3u: return pc.s * tanh_safe(yv / pc.s);
    case 4u: return yv / (1.0 + exp(-yv)) * xv;
    case 5u: return gelu_tanh(yv) * xv;
    case 6u: return 0.5 * yv * (1.0 + erf_approx(yv * 0.7071067811865476)) * xv;
    case 7u: {
        float g;
        if (yv <= -10.0) g = 0.0;
        else if (yv >= 10.0) g = yv;
        else g = f16_round(gelu_tanh(f16_round(yv)));
        return g * xv;
    }
    default: return yv + xv; /* 8: bias row */
    }
}

void main() {
    const uint stride = gl_NumWorkGroups.x * WG * 4u;
    for (uint i = gl_GlobalInvocationID.x * 4u; i < pc.n; i += stride)
        for (uint k = i; k < min(i + 4u, pc.n); k++) {
            const float xv = pc.op == 8u ? x[pc.x_off + (k + pc.phase) % pc.width]
                                         : (pc.op <= 1u || pc.op >= 4u ? x[pc.x_off + k] : 0.0);
            precise float r = apply(pc.op, y[pc.y_off + k], xv);
            y[pc.y_off + k] = r;
        }
}
