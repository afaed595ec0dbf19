/* Instruction sets available at run time. REPRISE_ISA=scalar|avx2|avx512 in the
 * environment caps the level (tests compare every SIMD kernel with its scalar
 * twin this way; benchmarks can measure each level). */
#ifndef RP_CPU_H
#define RP_CPU_H

#include <stdbool.h>

typedef enum rp_isa {
    RP_ISA_SCALAR = 0,
    RP_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    RP_ISA_AVX512 = 2, /* + AVX-512 F/BW/VL/DQ/VNNI/VBMI */
} rp_isa;

/* Highest level this CPU supports, capped by REPRISE_ISA. */
rp_isa rp_cpu_isa(void);
/* Highest level this CPU supports, ignoring the environment. */
rp_isa rp_cpu_isa_max(void);
const char *rp_isa_name(rp_isa isa);
/* AVX512_BF16 (vdpbf16ps) with the AVX-512 level: its BF16 kernels are an
 * extra of that level, installed where cpuid has it. */
bool rp_cpu_has_avx512bf16(void);

#endif
