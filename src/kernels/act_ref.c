/* Activations read from a table: the scalar twin and the table itself.
 *
 * ggml's CPU backend defines GGML_GELU_FP16: for |x| < 10 it reads GELU from
 * a table indexed by x rounded to fp16, whose entries are GELU(that fp16
 * value) rounded to fp16; at or below -10 it gives 0, from 10 up x itself.
 * The table here holds those entries already widened to float (256 KiB), so
 * an element costs one conversion and one load; it is built once, on first
 * use, under pthread_once. */
#include "kernels/kernels.h"
#include "base/util.h"

#include <math.h>
#include <pthread.h>

static float g_gelu[65536];
static pthread_once_t g_gelu_once = PTHREAD_ONCE_INIT;

static float gelu_tanh_f32(float x) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    /* llama.cpp's x86 build fills its table from C compiled with contraction:
     * 1 + a*x*x is one fused multiply-add over the rounded a*x (found on
     * Gemma 3's ffn_geglu at x = -1.999, where the two forms round to
     * different fp16 values) */
    return 0.5f * x * (1.0f + tanhf(c * x * fmaf(0.044715f * x, x, 1.0f)));
}

static void build_gelu(void) {
    for (int h = 0; h < 65536; h++)
        g_gelu[h] = rp_fp16_to_fp32(rp_fp32_to_fp16(gelu_tanh_f32(rp_fp16_to_fp32((uint16_t)h))));
}

const float *rp_gelu_f16_table(void) {
    pthread_once(&g_gelu_once, build_gelu);
    return g_gelu;
}

static void geglu_f16_ref(float *gate, const float *up, int n, const float *tab) {
    for (int i = 0; i < n; i++) {
        const float x = gate[i];
        float g;
        if (x <= -10.0f)
            g = 0.0f;
        else if (x >= 10.0f)
            g = x;
        else
            g = tab[rp_fp32_to_fp16(x)];
        gate[i] = g * up[i];
    }
}

void rp_act_fill_ref(rp_kernels *k) {
    k->geglu_f16 = geglu_f16_ref;
}
