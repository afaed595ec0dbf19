#include "cpu.h"

#include <stdlib.h>
#include <string.h>

rp_isa rp_cpu_isa_max(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
    return avx512 ? RP_ISA_AVX512 : avx2 ? RP_ISA_AVX2 : RP_ISA_SCALAR;
#else
    return RP_ISA_SCALAR;
#endif
}

rp_isa rp_cpu_isa(void) {
    rp_isa isa = rp_cpu_isa_max();
    const char *env = getenv("REPRISE_ISA");
    if (env) {
        rp_isa cap = !strcmp(env, "scalar") ? RP_ISA_SCALAR
                     : !strcmp(env, "avx2") ? RP_ISA_AVX2
                                            : RP_ISA_AVX512;
        if (cap < isa) isa = cap;
    }
    return isa;
}

const char *rp_isa_name(rp_isa isa) {
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    return names[isa];
}
