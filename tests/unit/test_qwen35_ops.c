/* The gated delta-net ops against plain double-precision references: the
 * causal conv with its rolling state and the delta rule, over a batch that
 * interleaves two sequences and spreads heads over two threads. */
#include "base/cpu.h"
#include "kernels/ops_delta.h"
#include "test.h"
#include "base/threads.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

enum { NT = 13, HK = 2, HV = 4, D = 24, KW = 4, CH = 2 * HK * D + HV * D };

static float frand(rp_rng *r, float a) {
    return a * (float)(rp_rng_uniform(r) * 2.0 - 1.0);
}

/* token t belongs to sequence seq_of(t); order within a sequence is kept */
static int seq_of(int t) {
    return t % 3 == 1;
}

/* C channels (not a multiple of 8: the SIMD path has a scalar tail) in rows of CH */
static void conv_case(int isa) {
    enum { C = CH - 3 };
    rp_rng r;
    rp_rng_seed(&r, 7);
    static float x[NT][CH], y[NT][CH], w[KW * C], st[2][(KW - 1) * C];
    for (int t = 0; t < NT; t++)
        for (int c = 0; c < CH; c++) y[t][c] = x[t][c] = frand(&r, 2.0f);
    for (int i = 0; i < KW * C; i++) w[i] = frand(&r, 1.0f); /* tap-major [KW][C] */
    /* sequence 1 starts from a nonzero history */
    memset(st, 0, sizeof st);
    for (int i = 0; i < (KW - 1) * C; i++) st[1][i] = frand(&r, 1.0f);
    static double hist[2][64][C];
    int len[2] = {KW - 1, KW - 1};
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < KW - 1; j++)
            for (int c = 0; c < C; c++) hist[s][j][c] = st[s][j * C + c];
    float *ptr[NT];
    for (int t = 0; t < NT; t++) ptr[t] = st[seq_of(t)];
    rp_compute cc = {.pool = rp_pool_new(2)};
    REQUIRE(cc.pool, "pool");
    rp_conv1d_silu_isa(&cc, &y[0][0], NT, CH, C, w, KW, ptr, isa);
    double worst = 0;
    bool tail = true;
    for (int t = 0; t < NT; t++) {
        const int s = seq_of(t);
        for (int c = 0; c < C; c++) hist[s][len[s]][c] = x[t][c];
        len[s]++;
        for (int c = 0; c < C; c++) {
            double a = 0;
            for (int j = 0; j < KW; j++) a += (double)w[j * C + c] * hist[s][len[s] - KW + j][c];
            worst = fmax(worst, fabs(a / (1.0 + exp(-a)) - y[t][c]));
        }
        for (int c = C; c < CH; c++) tail &= y[t][c] == x[t][c];
    }
    CHECK(worst <= 1e-5, "%s conv vs reference: max |delta| %.3g", rp_isa_name((rp_isa)isa), worst);
    CHECK(tail, "%s conv wrote past its channels", rp_isa_name((rp_isa)isa));
    /* the state holds each sequence's last KW-1 raw inputs */
    bool hs = true;
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < KW - 1; j++)
            for (int c = 0; c < C; c++)
                hs &= st[s][j * C + c] == (float)hist[s][len[s] - (KW - 1) + j][c];
    CHECK(hs, "%s conv state is not the last inputs", rp_isa_name((rp_isa)isa));
    rp_pool_free(cc.pool);
}

void test_qwen35_ops_conv(void) {
    for (int isa = RP_ISA_SCALAR; isa <= (int)rp_cpu_isa(); isa++) conv_case(isa);
}

static void delta_case(int isa) {
    rp_rng r;
    rp_rng_seed(&r, 11);
    static float qk[NT][2 * HK * D], v[NT][HV * D], g[NT][HV], beta[NT][HV], out[NT][HV * D];
    static float state[2][HV][D][D];
    for (int t = 0; t < NT; t++) {
        for (int i = 0; i < 2 * HK * D; i++) qk[t][i] = frand(&r, 1.0f);
        for (int i = 0; i < HV * D; i++) v[t][i] = frand(&r, 1.0f);
        for (int h = 0; h < HV; h++) {
            g[t][h] = -(float)rp_rng_uniform(&r);
            beta[t][h] = (float)rp_rng_uniform(&r);
        }
    }
    rp_l2norm_heads(&qk[0][0], D, 2 * HK, NT, 2 * HK * D, 1e-6f);
    for (int i = 0; i < HK * D; i++) { /* the norm made every head unit length */
        double n = 0;
        for (int k = 0; k < D; k++) n += (double)qk[5][(i / D) * D + k] * qk[5][(i / D) * D + k];
        CHECK(fabs(n - 1.0) < 1e-5, "l2norm: |head| = %.6f", sqrt(n));
    }
    static double S[2][HV][D][D];
    for (int s = 0; s < 2; s++)
        for (int h = 0; h < HV; h++)
            for (int j = 0; j < D; j++)
                for (int i = 0; i < D; i++)
                    S[s][h][j][i] = state[s][h][j][i] = s ? frand(&r, 0.5f) : 0.0f;
    float *ptr[NT];
    for (int t = 0; t < NT; t++) ptr[t] = &state[seq_of(t)][0][0][0];
    rp_delta_args a = {
        .n_tok = NT,
        .n_head_k = HK,
        .n_head_v = HV,
        .d = D,
        .q = &qk[0][0],
        .k = &qk[0][HK * D],
        .qk_stride = 2 * HK * D,
        .v = &v[0][0],
        .v_stride = HV * D,
        .g = &g[0][0],
        .beta = &beta[0][0],
        .out = &out[0][0],
        .out_stride = HV * D,
        .scale = 1.0f / sqrtf((float)D),
        .state = ptr,
    };
    rp_compute cc = {.pool = rp_pool_new(2)};
    REQUIRE(cc.pool, "pool");
    rp_gated_delta_isa(&cc, &a, isa);
    double worst = 0;
    for (int t = 0; t < NT; t++) {
        const int s = seq_of(t);
        for (int h = 0; h < HV; h++) {
            const int hk = h % HK; /* v-heads tile the k-heads, as ggml's repeat does */
            const float *q = &qk[t][hk * D], *k = &qk[t][HK * D + hk * D];
            double(*M)[D] = S[s][h], sk[D];
            for (int j = 0; j < D; j++) {
                sk[j] = 0;
                for (int i = 0; i < D; i++) {
                    M[j][i] *= exp((double)g[t][h]);
                    sk[j] += M[j][i] * k[i];
                }
            }
            for (int j = 0; j < D; j++) {
                const double dj = ((double)v[t][h * D + j] - sk[j]) * beta[t][h];
                double o = 0;
                for (int i = 0; i < D; i++) {
                    M[j][i] += dj * k[i];
                    o += M[j][i] * q[i];
                }
                worst = fmax(worst, fabs(o / sqrt((double)D) - out[t][h * D + j]));
            }
        }
    }
    CHECK(worst <= 1e-5, "%s delta rule vs reference: max |delta| %.3g", rp_isa_name((rp_isa)isa),
          worst);
    double ws = 0;
    for (int s = 0; s < 2; s++)
        for (int h = 0; h < HV; h++)
            for (int j = 0; j < D; j++)
                for (int i = 0; i < D; i++) ws = fmax(ws, fabs(S[s][h][j][i] - state[s][h][j][i]));
    CHECK(ws <= 1e-5, "%s final state vs reference: max |delta| %.3g", rp_isa_name((rp_isa)isa),
          ws);
    rp_pool_free(cc.pool);
}

void test_qwen35_ops_delta(void) {
    for (int isa = RP_ISA_SCALAR; isa <= (int)rp_cpu_isa(); isa++) delta_case(isa);

    /* the gates and the gated norm */
    float b2[2] = {0.0f, 2.0f}, al[2] = {0.5f, 30.0f}, dt[2] = {-1.0f, 0.0f},
          aa[2] = {-2.0f, -0.5f};
    rp_delta_gates(b2, al, dt, aa, 1, 2);
    CHECK(fabsf(b2[0] - 0.5f) < 1e-7f && fabsf(b2[1] - 1.0f / (1.0f + expf(-2.0f))) < 1e-7f,
          "sigmoid");
    CHECK(fabs(al[0] - -2.0 * log1p(exp(-0.5))) < 1e-6 && fabsf(al[1] - -15.0f) < 1e-5f,
          "softplus gate %g %g", (double)al[0], (double)al[1]);
    float o[4] = {1, 2, 3, 4}, z[4] = {0, 1, -1, 2}, w[2] = {1.0f, 0.5f};
    rp_rmsnorm_gated(o, w, z, 2, 2, 1, 0.0f);
    const double s0 = 1.0 / sqrt(2.5), s1 = 1.0 / sqrt(12.5);
    const double want[4] = {0.0, 2 * s0 * 0.5 / (1 + exp(-1.0)), 3 * s1 * -1 / (1 + exp(1.0)),
                            4 * s1 * 0.5 * 2 / (1 + exp(-2.0))};
    double wg = 0;
    for (int i = 0; i < 4; i++) wg = fmax(wg, fabs(o[i] - want[i]));
    CHECK(wg < 1e-6, "gated rmsnorm: max |delta| %.3g", wg);
}
