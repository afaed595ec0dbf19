/* The scalar KV-cache entries: quantized cache rows decoded by the types'
 * dequantizers (the definition the SIMD decoders must equal bit for bit). The
 * scalar table has no split-attention kernel: attention takes its per-key
 * path, which decodes rows through kv_to_f32. */
#include "kernels/kernels.h"
#include "kernels/quant.h"

#define KV_REF_FN(name, deq)                                                                       \
    static void name(const void *row, float *y, int n) {                                           \
        deq(row, y, n);                                                                            \
    }
KV_REF_FN(kv_q8_0_ref, rp_dequant_q8_0)
KV_REF_FN(kv_q4_0_ref, rp_dequant_q4_0)
KV_REF_FN(kv_q4_1_ref, rp_dequant_q4_1)
KV_REF_FN(kv_q5_0_ref, rp_dequant_q5_0)
KV_REF_FN(kv_q5_1_ref, rp_dequant_q5_1)
KV_REF_FN(kv_iq4_nl_ref, rp_dequant_iq4_nl)

void rp_attn_fill_ref(rp_kernels *k) {
    k->kv_to_f32[RP_TYPE_Q8_0] = kv_q8_0_ref;
    k->kv_to_f32[RP_TYPE_Q4_0] = kv_q4_0_ref;
    k->kv_to_f32[RP_TYPE_Q4_1] = kv_q4_1_ref;
    k->kv_to_f32[RP_TYPE_Q5_0] = kv_q5_0_ref;
    k->kv_to_f32[RP_TYPE_Q5_1] = kv_q5_1_ref;
    k->kv_to_f32[RP_TYPE_IQ4_NL] = kv_iq4_nl_ref;
}
