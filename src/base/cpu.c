#include "base/cpu.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#if defined(__x86_64__)
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

/* cpuid bits, plus XCR0 so the OS saves the vector state we would use. */
rp_isa rp_cpu_isa_max(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return RP_ISA_SCALAR;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
         f16c = c & (1u << 29);
    if (!osxsave || !avx) return RP_ISA_SCALAR;
    uint64_t xcr0 = xgetbv0();
    bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return RP_ISA_SCALAR;
    bool avx2 = b & (1u << 5), bmi2 = b & (1u << 8);
    bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
         avx512vl = b & (1u << 31);
    bool avx512vbmi = c & (1u << 1), avx512vnni = c & (1u << 11);
    if (!(ymm && avx2 && fma && f16c && bmi2)) return RP_ISA_SCALAR;
    if (zmm && avx512f && avx512dq && avx512bw && avx512vl && avx512vbmi && avx512vnni)
        return RP_ISA_AVX512;
    return RP_ISA_AVX2;
#else
    return RP_ISA_SCALAR;
#endif
}

bool rp_cpu_has_avx512bf16(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (rp_cpu_isa_max() < RP_ISA_AVX512 || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return a & (1u << 5);
#else
    return false;
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
