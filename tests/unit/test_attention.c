/* Attention over F16 caches (the split path where the CPU has its kernel):
 * against a double-precision reference computed from the cached values, for
 * grouped heads (1, 2, 8 and 12 query heads per KV head), head dims with
 * tails, sliding windows on ring caches, soft-capping and contexts spanning
 * several splits; and bit for bit, a batch equals its tokens one at a time,
 * on one thread and on two (where a single token's splits are spread over
 * the threads), with two sequences interleaved in a batch. */
#include "kernels/ops.h"
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
    int n_pos; /* positions of each sequence: 0 .. n_pos - 1 */
} acase;

/* the reference: softmax over the visible positions in double */
static void reference(const acase *c, const rp_kv_view *kv, const float *q, int p, float *out) {
    const int group = c->n_head / c->n_head_kv, lo = c->window ? RP_MAX(0, p - c->window + 1) : 0;
    double *s = malloc(sizeof(double) * (size_t)(p + 1));
    for (int h = 0; h < c->n_head; h++) {
        const int g = h / group;
        const uint16_t *K = (const uint16_t *)kv->k + (size_t)g * kv->cap * c->dk;
        const uint16_t *V = (const uint16_t *)kv->v + (size_t)g * kv->cap * c->dv;
        double mx = -INFINITY, sum = 0;
        for (int i = lo; i <= p; i++) {
            double d = 0;
            for (int e = 0; e < c->dk; e++)
                d += (double)q[h * c->dk + e] *
                     rp_fp16_to_fp32(K[(size_t)(i % kv->cap) * c->dk + e]);
            d /= sqrt((double)c->dk);
            if (c->softcap > 0) d = c->softcap * tanh(d / c->softcap);
            s[i] = d;
            mx = fmax(mx, d);
        }
        for (int i = lo; i <= p; i++) sum += (s[i] = exp(s[i] - mx));
        for (int e = 0; e < c->dv; e++) {
            double o = 0;
            for (int i = lo; i <= p; i++)
                o += s[i] * rp_fp16_to_fp32(V[(size_t)(i % kv->cap) * c->dv + e]);
            out[h * c->dv + e] = (float)(o / sum);
        }
    }
    free(s);
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
    uint16_t *mem[2][2];
    for (int s = 0; s < n_seq; s++) {
        for (int j = 0; j < 2; j++)
            mem[s][j] = rp_alloc_aligned((size_t)c->n_head_kv * cap * (j ? c->dv : c->dk) * 2, "t");
        kv[s] = (rp_kv_view){mem[s][0], mem[s][1], RP_TYPE_F16, RP_TYPE_F16, cap};
    }
    float *q = malloc(sizeof(float) * (size_t)n_tok * wq), *k = malloc(sizeof(float) * (size_t)wk),
          *v = malloc(sizeof(float) * (size_t)wv);
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
        rp_attn_args a = {.n_tok = n_tok,
                          .q = q,
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
            one.q = q + (size_t)t * wq;
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
    free(k);
    free(v);
    free(ob);
    free(os);
    free(ref);
    free(pos);
    free(views);
}

void test_attention_f16(void) {
    const acase cases[] = {
        {"qwen3-like 16/8 x 128, 40 positions", 16, 8, 128, 128, 0, 0, 0, 40},
        {"16/8 x 128, 700 positions (3 splits)", 16, 8, 128, 128, 0, 0, 0, 700},
        {"MQA 8/1 x 64, 600 positions", 8, 1, 64, 64, 0, 0, 0, 600},
        {"12/1 x 80 (head chunks, tails), 300 positions", 12, 1, 80, 80, 0, 0, 0, 300},
        {"4/2 x 256 / 96, softcap 50", 4, 2, 256, 96, 0, 0, 50.0f, 270},
        {"window 100 on a ring of 123, 520 positions", 4, 2, 64, 64, 100, 123, 0, 520},
        {"window 300, full cache, 530 positions", 4, 4, 32, 48, 300, 0, 0, 530},
        {"1 position", 2, 1, 16, 16, 0, 0, 0, 1},
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) run_case(&cases[i]);
}
