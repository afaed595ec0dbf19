#version 450
// Rotary embeddings in place with the CPU's cos/sin table (rp_rope_apply):
// invocation (pair, token) rotates one pair of one head.
layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) buffer BX { float x[]; };
layout(std430, binding = 1) readonly buffer BC { float cs[]; };
layout(push_constant) uniform PC {
    uint n_tok, stride, n_head, head_dim, n_rot, neox, x_off, cs_off;
} pc;

void main() {
    const uint i = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
    const uint half_ = pc.n_rot / 2u;
    if (i >= pc.n_head * half_ || t >= pc.n_tok) return;
    const uint h = i / half_, p = i % half_;
    const uint base = pc.x_off + t * pc.stride + h * pc.head_dim;
    const uint a = pc.neox != 0u ? p : 2u * p, b = pc.neox != 0u ? p + half_ : 2u * p + 1u;
    const float co = cs[pc.cs_off + t * pc.n_rot + 2u * p], si = cs[pc.cs_off + t * pc.n_rot + 2u * p + 1u];
    const float x0 = x[base + a], x1 = x[base + b];
    precise float y0 = x0 * co - x1 * si;
    precise float y1 = x0 * si + x1 * co;
    x[base + a] = y0;
    x[base + b] = y1;
}
