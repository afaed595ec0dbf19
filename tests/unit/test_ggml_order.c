/* The kernels that reproduce llama.cpp's x86 float order (silu with ggml's
 * exp polynomial, vec_dot_f32's lanes, the softmax sum, fused V
 * accumulation): every ISA's entry returns the scalar twin's bits, and the
 * scalar twins do what their comments say on hand-checked values. */
#include "kernels/kernels.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((float)(*s >> 8) / 16777216.0f - 0.5f) * 8.0f;
}

void test_ggml_order_kernels_match_ref(void) {
    const rp_kernels *ref = rp_kern_for(RP_ISA_SCALAR);
    for (int isa = RP_ISA_AVX2; isa <= (int)rp_cpu_isa(); isa++) {
        const rp_kernels *k = rp_kern_for((rp_isa)isa);
        unsigned seed = 7;
        for (int n = 1; n <= 300; n += 7) {
            float x[320], y[320], a[320], b[320];
            for (int i = 0; i < n; i++) x[i] = frand(&seed), y[i] = frand(&seed);
            x[0] = 150.0f; /* e^-150: the polynomial's range end */
            memcpy(a, x, sizeof x);
            memcpy(b, x, sizeof x);
            ref->silu_mul(a, y, n);
            k->silu_mul(b, y, n);
            CHECK(!memcmp(a, b, (size_t)n * 4), "isa %d silu n %d", isa, n);
            const float d0 = ref->dot_f32_ggml(n, x, y), d1 = k->dot_f32_ggml(n, x, y);
            CHECK(!memcmp(&d0, &d1, 4), "isa %d dot n %d: %.9g vs %.9g", isa, n, d0, d1);
            memcpy(a, y, sizeof y);
            memcpy(b, y, sizeof y);
            ref->fma_f32(n, 0.3f, x, a);
            k->fma_f32(n, 0.3f, x, b);
            CHECK(!memcmp(a, b, (size_t)n * 4), "isa %d fma n %d", isa, n);
            const int n16 = (n + 15) & ~15;
            for (int i = 0; i < n16; i++) a[i] = b[i] = i < n ? x[i] : -INFINITY;
            const double s0 = ref->exp_sum_ggml(n16, a, 4.0f), s1 = k->exp_sum_ggml(n16, b, 4.0f);
            CHECK(s0 == s1 && !memcmp(a, b, (size_t)n16 * 4), "isa %d exp_sum n %d", isa, n);
        }
    }
    /* the polynomial: within 2 ulp of expf over the softmax range, 0 at -inf */
    float worst = 0;
    for (float x = -80.0f; x <= 0.0f; x += 0.0137f) {
        const float e = rp_expf_ggml512(x), r = expf(x);
        worst = fmaxf(worst, fabsf(e - r) / r);
    }
    CHECK(worst < 3e-7f, "relative error %.3g", worst);
    CHECK(rp_expf_ggml512(-INFINITY) == 0.0f && rp_expf_ggml512(0.0f) == 1.0f, "ends");
    /* GCC's reduce order: halves of 8, of 4, then (0 + 2) + (1 + 3) */
    float v[16];
    for (int i = 0; i < 16; i++) v[i] = 1.0f;
    v[0] = 1e8f;
    v[8] = -1e8f; /* cancel first: the 14 ones survive */
    CHECK(rp_reduce16(v) == 14.0f, "reduce16 %g", rp_reduce16(v));
}
