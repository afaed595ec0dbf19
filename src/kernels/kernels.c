#include "kernels/kernels.h"
#include "kernels/types.h"

#include <pthread.h>

static rp_kernels g_tables[3];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void build(void) {
    for (int l = RP_ISA_SCALAR; l <= RP_ISA_AVX512; l++) {
        rp_kernels *k = &g_tables[l];
        rp_kernels_fill_ref(k);
        rp_attn_fill_ref(k);
        rp_act_fill_ref(k);
        if (l >= RP_ISA_AVX2) {
            rp_kernels_fill_avx2(k);
            rp_attn_fill_avx2(k);
            rp_act_fill_avx2(k);
            rp_gemm_q41_fill_avx2(k);
        }
        if (l >= RP_ISA_AVX512) {
            rp_kernels_fill_avx512(k);
            rp_packk_fill_avx512(k);
            rp_attn_fill_avx512(k);
            rp_act_fill_avx512(k);
            if (rp_cpu_has_avx512bf16()) rp_kernels_fill_avx512_bf16(k);
        }
        k->isa = (rp_isa)l;
    }
}

const rp_kernels *rp_kern_for(rp_isa isa) {
    pthread_once(&g_once, build);
    return &g_tables[isa];
}

int rp_kern_act_type(int type) {
    return type == RP_TYPE_BF16 || type == RP_TYPE_F16 ? type : rp_type_get(type)->vec_dot_type;
}

const rp_kernels *rp_kern(void) {
    static const rp_kernels *cached;
    if (!cached) cached = rp_kern_for(rp_cpu_isa());
    return cached;
}
