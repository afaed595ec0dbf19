/* Attention over F16 and quantized caches (the split path where the CPU has
 * its kernel; an F32 K or V takes the per-key path, quantized rows decoded by
 * the table's kv_to_f32):
 * against a double-precision reference computed from the cached values, for
 * grouped heads (1, 2, 8 and 12 query heads per KV head), head dims with
 * tails, sliding windows on ring caches, soft-capping and contexts spanning
 * several splits; and bit for bit, a batch equals its tokens one at a time,
 * on one thread and on two (where a single token's splits are spread over
 * the threads), with two sequences interleaved in a batch. */
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "kernels/types.h"
#include "test.h"
#include "base/threads.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

typedef struct acase {
    const char *name;
    int n_head, n_head_kv, dk, dv;
    int window, cap; /* cap < n_ctx: a ring of the last cap positions */
    float softcap;
    int n_pos;          /* positions of each sequence: 0 .. n_pos - 1 */
    int type_k, type_v; /* 0 (F32) is read as F16 unless f32 is set */
    bool f32;
} acase;

static int case_type(const acase *c, bool v) {
    const int t = v ? c->type_v : c->type_k;
    return t == RP_TYPE_F32 && !c->f32 ? RP_TYPE_F16 : t;
}

/* the row of head g at cell, dequantized by the type's own dequantizer (the
 * reference the cache's readers must agree with) */
static void cached(const rp_kv_view *kv, bool v, int g, int cell, int dim, float *row) {
    const int type = v ? kv->type_v : kv->type_k;
    const size_t rb = rp_kv_row_bytes(type, dim);
    const uint8_t *base = (const uint8_t *)(v ? kv->v : kv->k);
    rp_type_get(type)->to_float(base + ((size_t)g * (size_t)kv->cap + (size_t)cell) * rb, row, dim);
}

/* the reference: softmax over the visible positions in double; a quantized
 * cache holds K and V rotated (rp_kv_rot_k / _v), so the query is rotated as
 * the cache's K was and the output rotated back */
static void reference(const acase *c, const rp_kv_view *kv, const float *q0, int p, float *out) {
    const int group = c->n_head / c->n_head_kv, lo = c->window ? RP_MAX(0, p - c->window + 1) : 0;
    const int rk = rp_kv_rot_k(kv->type_k, c->dk), rv = rp_kv_rot_v(kv->type_v, c->dv);
    double *s = malloc(sizeof(double) * (size_t)(p + 1));
    float *q = malloc(sizeof(float) * (size_t)c->n_head * (size_t)c->dk);
    memcpy(q, q0, sizeof(float) * (size_t)c->n_head * (size_t)c->dk);
    for (int j = 0; rk && j < c->n_head * c->dk; j += rk) rp_fwht(q + j, rk);
    float row[512];
    double o[512];
    for (int h = 0; h < c->n_head; h++) {
        const int g = h / group;
        double mx = -INFINITY, sum = 0;
        for (int i = lo; i <= p; i++) {
            double d = 0;
            cached(kv, false, g, i % kv->cap, c->dk, row);
            for (int e = 0; e < c->dk; e++) d += (double)q[h * c->dk + e] * row[e];
            d /= sqrt((double)c->dk);
            if (c->softcap > 0) d = c->softcap * tanh(d / c->softcap);
            s[i] = d;
            mx = fmax(mx, d);
        }
        for (int i = lo; i <= p; i++) sum += (s[i] = exp(s[i] - mx));
        for (int e = 0; e < c->dv; e++) o[e] = 0;
        for (int i = lo; i <= p; i++) {
            cached(kv, true, g, i % kv->cap, c->dv, row);
            for (int e = 0; e < c->dv; e++) o[e] += s[i] * row[e];
        }
        for (int e = 0; e < c->dv; e++) out[h * c->dv + e] = (float)(o[e] / sum);
    }
    for (int j = 0; rv && j < c->n_head * c->dv; j += rv) rp_fwht(out + j, rv);
    free(s);
    free(q);
}

static void run_case(const acase *c) {
    const int n_seq = 2, P = c->n_pos, cap = c->cap ? c->cap : P;
    const int wq = c->n_head * c->dk, wk = c->n_head_kv * c->dk, wv = c->n_head_kv * c->dv,
              wo = c->n_head * c->dv;
    rp_rng r;
    rp_rng_seed(&r, (uint64_t)P * 7 + (uint64_t)c->dk);
    /* two sequences, the tokens of both interleaved in one batch: the batch
     * is the last `nb` positions of each (a ring holds them all) */
    const int nb = RP_MIN(P, 24);
    const int n_tok = 2 * nb;
    rp_kv_view kv[2];
    void *mem[2][2];
    const int tk = case_type(c, false), tv = case_type(c, true);
    for (int s = 0; s < n_seq; s++) {
        for (int j = 0; j < 2; j++)
            mem[s][j] = rp_alloc_aligned(
                (size_t)c->n_head_kv * cap * rp_kv_row_bytes(j ? tv : tk, j ? c->dv : c->dk), "t");
        kv[s] = (rp_kv_view){mem[s][0], mem[s][1], tk, tv, cap};
    }
    float *q = malloc(sizeof(float) * (size_t)n_tok * wq), *k = malloc(sizeof(float) * (size_t)wk),
          *v = malloc(sizeof(float) * (size_t)wv);
    /* attention rotates its queries in place (quantized K): each call gets a copy */
    float *qb = malloc(sizeof(float) * (size_t)n_tok * wq),
          *q1 = malloc(sizeof(float) * (size_t)wq);
    float *ob = malloc(sizeof(float) * (size_t)n_tok * wo),
          *os = malloc(sizeof(float) * (size_t)wo), *ref = malloc(sizeof(float) * (size_t)wo);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_tok);
    const rp_kv_view **views = malloc(sizeof(*views) * (size_t)n_tok);
    for (int i = 0; i < n_tok * wq; i++) q[i] = rp_rng_normal(&r) * 2.0f;
    for (int t = 0; t < n_tok; t++) {
        pos[t] = P - nb + t / 2;
        views[t] = &kv[t % 2];
    }
    for (int nth = 1; nth <= 2; nth++) {
        rp_compute cc = {.pool = rp_pool_new(nth)};
        REQUIRE(cc.pool, "pool");
        const size_t per = rp_attention_scratch(P, c->n_head / c->n_head_kv, 1);
        float *scr = malloc(sizeof(float) * per * (size_t)nth);
        /* the batch: caches filled up to each sequence's last position */
        for (int s = 0; s < n_seq; s++)
            for (int p = 0; p < P; p++) {
                rp_rng_seed(&r, (uint64_t)(s * 100000 + p));
                for (int i = 0; i < wk; i++) k[i] = rp_rng_normal(&r);
                for (int i = 0; i < wv; i++) v[i] = rp_rng_normal(&r) * 3.0f;
                rp_kv_write(&kv[s], c->n_head_kv, c->dk, c->dv, p, k, v);
            }
        memcpy(qb, q, sizeof(float) * (size_t)n_tok * wq);
        rp_attn_args a = {.n_tok = n_tok,
                          .q = qb,
                          .q_stride = wq,
                          .out = ob,
                          .out_stride = wo,
                          .n_head = c->n_head,
                          .n_head_kv = c->n_head_kv,
                          .head_dim_k = c->dk,
                          .head_dim_v = c->dv,
                          .scale = 1.0f / sqrtf((float)c->dk),
                          .softcap = c->softcap,
                          .window = c->window,
                          .pos = pos,
                          .kv = views};
        rp_attention(&cc, &a, scr, per);
        /* one token at a time, the cache as it is (a token sees only its
         * window: later positions in a ring are beyond it) */
        int bad = 0;
        double err = 0;
        for (int t = 0; t < n_tok; t++) {
            rp_attn_args one = a;
            one.n_tok = 1;
            memcpy(q1, q + (size_t)t * wq, sizeof(float) * (size_t)wq);
            one.q = q1;
            one.out = os;
            one.pos = pos + t;
            one.kv = views + t;
            rp_attention(&cc, &one, scr, per);
            bad += memcmp(os, ob + (size_t)t * wo, sizeof(float) * (size_t)wo) != 0;
            if (t < 4 || t >= n_tok - 2) {
                reference(c, views[t], q + (size_t)t * wq, pos[t], ref);
                for (int i = 0; i < wo; i++) err = fmax(err, fabs((double)ref[i] - os[i]));
            }
        }
        CHECK(!bad, "%s, %d threads: %d tokens differ between the batch and one at a time", c->name,
              nth, bad);
        CHECK(err < 2e-5, "%s, %d threads: max |delta| %.3g from the reference", c->name, nth, err);
        if (nth == 2) printf("     %s: max|d| %.2e vs double reference\n", c->name, err);
        free(scr);
        rp_pool_free(cc.pool);
    }
    for (int s = 0; s < n_seq; s++)
        for (int j = 0; j < 2; j++) rp_free_aligned(mem[s][j]);
    free(q);
    free(qb);
    free(q1);
    free(k);
    free(v);
    free(ob);
    free(os);
    free(ref);
    free(pos);
    free(views);
}

void test_attention_f16(void) {
    enum { F16 = RP_TYPE_F16 };
    const acase cases[] = {
        {"qwen3-like 16/8 x 128, 40 positions", 16, 8, 128, 128, 0, 0, 0, 40, F16, F16, false},
        {"16/8 x 128, 700 positions (3 splits)", 16, 8, 128, 128, 0, 0, 0, 700, F16, F16, false},
        {"MQA 8/1 x 64, 600 positions", 8, 1, 64, 64, 0, 0, 0, 600, F16, F16, false},
        {"12/1 x 80 (head chunks, tails), 300 positions", 12, 1, 80, 80, 0, 0, 0, 300, F16, F16,
         false},
        {"4/2 x 256 / 96, softcap 50", 4, 2, 256, 96, 0, 0, 50.0f, 270, F16, F16, false},
        {"window 100 on a ring of 123, 520 positions", 4, 2, 64, 64, 100, 123, 0, 520, F16, F16,
         false},
        {"window 300, full cache, 530 positions", 4, 4, 32, 48, 300, 0, 0, 530, F16, F16, false},
        {"1 position", 2, 1, 16, 16, 0, 0, 0, 1, F16, F16, false},
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) run_case(&cases[i]);
}

/* every quantized cache type (llama.cpp's -ctk / -ctv), on the split path
 * and, with an F32 partner, on the per-key path */
void test_attention_quant(void) {
    enum { F16 = RP_TYPE_F16, F32 = RP_TYPE_F32 };
    const acase cases[] = {
        {"q8_0: 16/8 x 128, 700 positions", 16, 8, 128, 128, 0, 0, 0, 700, RP_TYPE_Q8_0,
         RP_TYPE_Q8_0, false},
        {"q4_0: MQA 8/1 x 64, 600 positions", 8, 1, 64, 64, 0, 0, 0, 600, RP_TYPE_Q4_0,
         RP_TYPE_Q4_0, false},
        {"q4_1: 12/1 x 64 (head chunks), 300 positions", 12, 1, 64, 64, 0, 0, 0, 300, RP_TYPE_Q4_1,
         RP_TYPE_Q4_1, false},
        {"q5_0: 4/2 x 256 / 96, softcap 50", 4, 2, 256, 96, 0, 0, 50.0f, 270, RP_TYPE_Q5_0,
         RP_TYPE_Q5_0, false},
        {"q5_1: window 100 on a ring of 123", 4, 2, 64, 64, 100, 123, 0, 520, RP_TYPE_Q5_1,
         RP_TYPE_Q5_1, false},
        {"iq4_nl: 4/4 x 32, window 300", 4, 4, 32, 32, 300, 0, 0, 530, RP_TYPE_IQ4_NL,
         RP_TYPE_IQ4_NL, false},
        {"q8_0 K, f16 V", 8, 2, 64, 64, 0, 0, 0, 280, RP_TYPE_Q8_0, F16, false},
        {"f16 K, q4_0 V", 8, 2, 64, 64, 0, 0, 0, 280, F16, RP_TYPE_Q4_0, false},
        {"f32 K, q8_0 V (per-key path)", 8, 2, 64, 64, 0, 0, 0, 280, F32, RP_TYPE_Q8_0, true},
        {"iq4_nl K, f32 V (per-key path)", 4, 2, 96, 64, 0, 0, 0, 300, RP_TYPE_IQ4_NL, F32, true},
        {"q5_1 K, f32 V (per-key path)", 4, 1, 32, 32, 0, 0, 0, 90, RP_TYPE_Q5_1, F32, true},
        {"q8_0: 1 position", 2, 1, 32, 32, 0, 0, 0, 1, RP_TYPE_Q8_0, RP_TYPE_Q8_0, false},
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) run_case(&cases[i]);
}

/* the decoders of quantized cache rows: every ISA the CPU has gives exactly
 * the floats of the type's dequantizer, on rows of random blocks (random
 * scales, every nibble and 5th-bit pattern) */
void test_attention_kv_rows(void) {
    const int types[] = {RP_TYPE_Q8_0, RP_TYPE_Q4_0, RP_TYPE_Q4_1,
                         RP_TYPE_Q5_0, RP_TYPE_Q5_1, RP_TYPE_IQ4_NL};
    enum { N = 256 };
    rp_rng r;
    rp_rng_seed(&r, 4242);
    for (size_t ti = 0; ti < RP_ARRAY_LEN(types); ti++) {
        const int t = types[ti];
        const size_t rb = rp_kv_row_bytes(t, N);
        REQUIRE(rb == rp_row_size(t, N), "%s: row bytes", rp_type_name(t));
        uint8_t row[N * 2];
        for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)rp_rng_next(&r);
        /* finite scales: fp16 halves with a small exponent */
        const size_t bb = rb / (N / 32);
        for (int b = 0; b < N / 32; b++) {
            uint8_t *blk = row + (size_t)b * bb;
            blk[1] = (uint8_t)(0x20 + (blk[1] & 0x1F)) | (blk[1] & 0x80);
            if (t == RP_TYPE_Q4_1 || t == RP_TYPE_Q5_1)
                blk[3] = (uint8_t)(0x20 + (blk[3] & 0x1F)) | (blk[3] & 0x80);
        }
        float want[N], got[N];
        rp_type_get(t)->to_float(row, want, N);
        for (int isa = RP_ISA_SCALAR; isa <= (int)rp_cpu_isa_max(); isa++) {
            const rp_kernels *k = rp_kern_for((rp_isa)isa);
            REQUIRE(k->kv_to_f32[t], "%s: no decoder at ISA %d", rp_type_name(t), isa);
            memset(got, 0xFF, sizeof got);
            k->kv_to_f32[t](row, got, N);
            CHECK(!memcmp(got, want, sizeof got), "%s at ISA %d: decoded row differs",
                  rp_type_name(t), isa);
        }
    }
}
