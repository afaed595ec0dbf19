// Workgroup reductions over WG invocations (WG a power of two), through
// subgroup arithmetic where the device has it (USE_SUBGROUP), else a tree in
// shared memory. Every invocation of the workgroup must call them.
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
shared float red_sh[32];
float wg_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) red_sh[gl_SubgroupID] = v;
    barrier();
    float s = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) s += red_sh[i];
    barrier();
    return s;
}
float wg_max(float v) {
    v = subgroupMax(v);
    if (subgroupElect()) red_sh[gl_SubgroupID] = v;
    barrier();
    float s = red_sh[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) s = max(s, red_sh[i]);
    barrier();
    return s;
}
#else
shared float red_sh[WG];
float wg_sum(float v) {
    uint tid = gl_LocalInvocationIndex;
    red_sh[tid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) red_sh[tid] += red_sh[tid + s];
        barrier();
    }
    float r = red_sh[0];
    barrier();
    return r;
}
float wg_max(float v) {
    uint tid = gl_LocalInvocationIndex;
    red_sh[tid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) red_sh[tid] = max(red_sh[tid], red_sh[tid + s]);
        barrier();
    }
    float r = red_sh[0];
    barrier();
    return r;
}
#endif
