/* The Vulkan backend against the CPU backend, op by op, on Mesa's lavapipe
 * (as llama.cpp's test-backend-ops does): every weight type and shape class
 * of the matrix products (odd row counts, row lengths that are not a
 * multiple of the workgroup, 1 / 2 / 7 / 40 / 64 tokens: the matrix-vector
 * and the tiled kernels), embedding rows of every type, norms, rope, KV
 * writes and attention (GQA, sliding windows on rings, soft-cap, F16 and F32
 * caches, several sequences interleaved in a batch), element-wise ops, the
 * output rows and the transfers; a device whose bindings and allocations are
 * forced small, so the range-splitting paths run; memory accounting of
 * aliased uploads.
 *
 * Tolerances (NMSE against the CPU backend's result): <= 1e-6 for F32 / F16
 * / BF16 paths, <= 1e-5 for quantized weights (the device quantizes the
 * activations as the CPU does, so both are far below; the figures are
 * printed with RP_TEST_FIGURES=1); attention max |delta| <= 1e-4;
 * embedding rows, rope, KV cells, copies and add / mul / scale bit for bit.
 *
 * Lavapipe is selected with VK_ICD_FILENAMES / VK_DRIVER_FILES unless the
 * environment already names a driver. */
#include "test.h"
#include "test_backend.h"
#include "backend/backend.h"
#include "backend/backend_vk.h"
#include "base/util.h"
#include "kernels/types.h"

#include <math.h>
#include <string.h>

#define NMSE_FLOAT 1e-6
#define NMSE_QUANT 1e-5
#define ATTN_ABS   1e-4

/* ---- helpers ------------------------------------------------------------------- */

static rp_bbuf *buf(rp_backend *be, size_t bytes) {
    rp_bbuf *b = NULL;
    rp_status s = rp_be_buf_new(be, bytes, "test buffer", &b);
    CHECK(!s, "%s buffer of %zu bytes: %s", be->name, bytes, rp_last_error());
    return b;
}

/* the same host data in a buffer of each backend */
typedef struct twin {
    rp_bbuf *c, *v;
    size_t bytes;
} twin;

static twin twin_new(tb_env *e, const void *data, size_t bytes) {
    twin t = {buf(e->cpu, bytes), buf(e->vk, bytes), bytes};
    if (data && t.c && t.v) {
        rp_be_write(e->cpu, rp_bx_at(t.c, 0), data, bytes);
        rp_be_write(e->vk, rp_bx_at(t.v, 0), data, bytes);
    }
    return t;
}

static void twin_free(tb_env *e, twin *t) {
    rp_be_buf_free(e->cpu, t->c);
    rp_be_buf_free(e->vk, t->v);
}

/* both buffers read back after a sync of each backend */
static bool twin_read(tb_env *e, const twin *t, float *c, float *v) {
    rp_be_read(e->cpu, c, rp_bx_at(t->c, 0), t->bytes);
    rp_be_read(e->vk, v, rp_bx_at(t->v, 0), t->bytes);
    rp_status sc = rp_be_sync(e->cpu);
    CHECK(!sc, "cpu sync: %s", rp_last_error());
    rp_status sv = rp_be_sync(e->vk);
    CHECK(!sv, "%s sync: %s", e->vk->name, rp_last_error());
    return !sc && !sv;
}

static float *randn(size_t n, uint64_t seed, float scale) {
    float *x = malloc(n * sizeof *x);
    rp_rng r;
    rp_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = rp_rng_normal(&r) * scale;
    return x;
}

/* ---- matrix products ----------------------------------------------------------------- */

static const int mm_types[] = {RP_TYPE_F32,  RP_TYPE_F16,    RP_TYPE_BF16,  RP_TYPE_Q4_0,
                               RP_TYPE_Q4_1, RP_TYPE_Q5_0,   RP_TYPE_Q5_1,  RP_TYPE_Q8_0,
                               RP_TYPE_Q2_K, RP_TYPE_Q3_K,   RP_TYPE_Q4_K,  RP_TYPE_Q5_K,
                               RP_TYPE_Q6_K, RP_TYPE_IQ4_NL, RP_TYPE_IQ4_XS};

/* F16 / BF16: the CPU rounds the activations to F16 / BF16 (llama.cpp's CPU
 * arithmetic), this backend keeps them F32: NMSE of one rounding per
 * activation; BF16's (relative 2^-9, measured 2.1e-6 to 3.5e-6) is beyond
 * NMSE_FLOAT, F16's (2^-12) within it */
static double mm_bound(int type) {
    if (type == RP_TYPE_BF16) return NMSE_QUANT;
    return rp_type_get(type)->is_quantized ? NMSE_QUANT : NMSE_FLOAT;
}

/* y = x . w^T for each token count on both backends; worst NMSE returned */
static double mm_case(tb_env *e, const tb_weight *w, const int *toks, int n_toks, uint64_t seed) {
    const int ne0 = (int)w->t.ne[0], rows = (int)w->t.ne[1];
    double worst = 0;
    for (int k = 0; k < n_toks; k++) {
        const int nt = toks[k];
        float *x = randn((size_t)nt * ne0, seed + (uint64_t)nt, 1.0f);
        twin tx = twin_new(e, x, (size_t)nt * ne0 * 4),
             ty = twin_new(e, NULL, (size_t)nt * rows * 4);
        float *yc = malloc(ty.bytes), *yv = malloc(ty.bytes);
        rp_be_matmul(e->cpu, &w->t, rp_bx_at(tx.c, 0), nt, rp_bx_at(ty.c, 0));
        rp_be_matmul(e->vk, &w->t, rp_bx_at(tx.v, 0), nt, rp_bx_at(ty.v, 0));
        if (twin_read(e, &ty, yc, yv)) {
            const double d = test_nmse(yc, yv, (size_t)nt * rows);
            CHECK(d <= mm_bound(w->t.type), "%s: matmul %s %dx%d, %d tokens: NMSE %.3g",
                  e->vk->name, rp_type_name(w->t.type), rows, ne0, nt, d);
            worst = fmax(worst, isnan(d) ? INFINITY : d);
        }
        twin_free(e, &tx);
        twin_free(e, &ty);
        free(x);
        free(yc);
        free(yv);
    }
    return worst;
}

void test_backend_vk_matmul(void) {
    tb_env *e = tb_env_get(TB_VK);
    if (!e) return;
    static const int toks[] = {1, 2, 7, 40, 64};
    for (size_t i = 0; i < RP_ARRAY_LEN(mm_types); i++) {
        const int type = mm_types[i], blk = rp_type_get(type)->blck_size;
        /* rows not a multiple of the tiles; row lengths of 1 or 3 blocks
         * (float weights: not a multiple of 32) */
        const int ne0s[2] = {blk == 1 ? 100 : blk * (blk == 256 ? 1 : 3), blk == 1 ? 288 : blk * 3};
        double worst = 0;
        for (int s = 0; s < 2; s++) {
            tb_weight w;
            tb_weight_make(&w, type, ne0s[s], 37, 100 + (uint64_t)(i * 2 + (size_t)s));
            REQUIRE(!rp_be_upload(e->vk, &w.t), "upload %s: %s", rp_type_name(type),
                    rp_last_error());
            REQUIRE(!rp_be_upload(e->cpu, &w.t), "upload: %s", rp_last_error());
            worst = fmax(worst, mm_case(e, &w, toks, (int)RP_ARRAY_LEN(toks), 7 * i + (size_t)s));
            tb_weight_free(&w);
        }
        tb_figure("matmul", rp_type_name(type), "NMSE", worst, mm_bound(type));
    }
}

/* Q/K/V-style: three weights of one input (two types), one call */
void test_backend_vk_matmul_n(void) {
    tb_env *e = tb_env_get(TB_VK);
    if (!e) return;
    tb_weight w[3];
    const int types[3] = {RP_TYPE_Q4_K, RP_TYPE_Q4_K, RP_TYPE_Q6_K}, rows[3] = {64, 32, 32};
    for (int i = 0; i < 3; i++) {
        tb_weight_make(&w[i], types[i], 256, rows[i], 500 + (uint64_t)i);
        REQUIRE(!rp_be_upload(e->vk, &w[i].t) && !rp_be_upload(e->cpu, &w[i].t), "upload: %s",
                rp_last_error());
    }
    static const int toks[] = {2, 33};
    double worst = 0;
    for (int k = 0; k < 2; k++) {
        const int nt = toks[k];
        float *x = randn((size_t)nt * 256, 77 + (uint64_t)nt, 1.0f);
        twin tx = twin_new(e, x, (size_t)nt * 256 * 4), ty[3];
        const rp_tensor *wt[3];
        rp_bx yc[3], yv[3];
        for (int i = 0; i < 3; i++) {
            ty[i] = twin_new(e, NULL, (size_t)nt * (size_t)rows[i] * 4);
            wt[i] = &w[i].t;
            yc[i] = rp_bx_at(ty[i].c, 0);
            yv[i] = rp_bx_at(ty[i].v, 0);
        }
        rp_be_matmul_n(e->cpu, 3, wt, yc, rp_bx_at(tx.c, 0), nt);
        rp_be_matmul_n(e->vk, 3, wt, yv, rp_bx_at(tx.v, 0), nt);
        for (int i = 0; i < 3; i++) {
            float *a = malloc(ty[i].bytes), *b = malloc(ty[i].bytes);
            if (twin_read(e, &ty[i], a, b)) {
                const double d = test_nmse(a, b, ty[i].bytes / 4);
                CHECK(d <= NMSE_QUANT, "matmul_n weight %d (%s), %d tokens: NMSE %.3g", i,
                      rp_type_name(types[i]), nt, d);
                worst = fmax(worst, d);
            }
            free(a);
            free(b);
            twin_free(e, &ty[i]);
        }
        twin_free(e, &tx);
        free(x);
    }
    for (int i = 0; i < 3; i++) tb_weight_free(&w[i]);
    tb_figure("matmul_n", "q4_K,q4_K,q6_K", "NMSE", worst, NMSE_QUANT);
}

/* ---- embedding rows ---------------------------------------------------------------- */

void test_backend_vk_get_rows(void) {
    tb_env *e = tb_env_get(TB_VK);
    if (!e) return;
    static const int32_t ids[7] = {0, 40, 3, 40, 1, 39, 17};
    for (size_t i = 0; i < RP_ARRAY_LEN(mm_types); i++) {
        const int type = mm_types[i], blk = rp_type_get(type)->blck_size;
        const int ne0 = blk == 1 ? 100 : blk * 2;
        tb_weight w;
        tb_weight_make(&w, type, ne0, 41, 900 + (uint64_t)i);
        REQUIRE(!rp_be_upload(e->vk, &w.t) && !rp_be_upload(e->cpu, &w.t), "upload: %s",
                rp_last_error());
        twin td = twin_new(e, NULL, 7 * (size_t)ne0 * 4);
        float *a = malloc(td.bytes), *b = malloc(td.bytes);
        rp_be_get_rows(e->cpu, rp_bx_at(td.c, 0), &w.t, ids, 7);
        rp_be_get_rows(e->vk, rp_bx_at(td.v, 0), &w.t, ids, 7);
        if (twin_read(e, &td, a, b))
            CHECK(!memcmp(a, b, td.bytes), "get_rows %s: max |delta| %.3g (bit for bit expected)",
                  rp_type_name(type), test_max_abs_diff(a, b, td.bytes / 4));
        free(a);
        free(b);
        twin_free(e, &td);
        tb_weight_free(&w);
    }
    tb_figure("get_rows", "every type", "max |delta|", 0, 0);
}

/* ---- norms ------------------------------------------------------------------------ */

static void norm_case(tb_env *e, rp_bnorm kind, int n, int rows, bool with_w, bool with_b,
                      double *worst) {
    tb_weight w, b;
    tb_weight_make(&w, RP_TYPE_F32, n, 1, 31 + (uint64_t)n);
    tb_weight_make(&b, RP_TYPE_F32, n, 1, 37 + (uint64_t)n);
    REQUIRE(!rp_be_upload(e->vk, &w.t) && !rp_be_upload(e->vk, &b.t), "upload: %s",
            rp_last_error());
    float *x = randn((size_t)n * rows, (uint64_t)(n * 3 + rows), 2.0f);
    twin tx = twin_new(e, x, (size_t)n * rows * 4), ty = twin_new(e, NULL, tx.bytes);
    float *a = malloc(tx.bytes), *c = malloc(tx.bytes);
    const rp_tensor *wt = with_w ? &w.t : NULL, *bt = with_b ? &b.t : NULL;
    rp_be_norm(e->cpu, kind, rp_bx_at(ty.c, 0), rp_bx_at(tx.c, 0), wt, bt, n, rows, 1e-5f);
    rp_be_norm(e->vk, kind, rp_bx_at(ty.v, 0), rp_bx_at(tx.v, 0), wt, bt, n, rows, 1e-5f);
    /* in place too */
    rp_be_norm(e->cpu, kind, rp_bx_at(tx.c, 0), rp_bx_at(tx.c, 0), wt, bt, n, rows, 1e-5f);
    rp_be_norm(e->vk, kind, rp_bx_at(tx.v, 0), rp_bx_at(tx.v, 0), wt, bt, n, rows, 1e-5f);
    for (int k = 0; k < 2; k++)
        if (twin_read(e, k ? &tx : &ty, a, c)) {
            const double d = test_nmse(a, c, tx.bytes / 4);
            CHECK(d <= NMSE_FLOAT, "%s norm n %d rows %d w %d b %d%s: NMSE %.3g",
                  kind ? "layer" : "rms", n, rows, with_w, with_b, k ? " in place" : "", d);
            *worst = fmax(*worst, d);
        }
    free(a);
    free(c);
    free(x);
    twin_free(e, &tx);
    twin_free(e, &ty);
    tb_weight_free(&w);
    tb_weight_free(&b);
}

void test_backend_vk_norm(void) {
    tb_env *e = tb_env_get(TB_VK);
    if (!e) return;
    double worst = 0;
    static const int ns[] = {64, 100, 576, 2048}, rows[] = {1, 7, 64};
    for (int i = 0; i < 4; i++)
        for (int r = 0; r < 3; r++) {
            norm_case(e, RP_BNORM_RMS, ns[i], rows[r], true, false, &worst);
            norm_case(e, RP_BNORM_LAYER, ns[i], rows[r], true, r != 1, &worst);
        }
    norm_case(e, RP_BNORM_RMS, 100, 7, false, false, &worst);
    tb_figure("norm", "rms/layer", "NMSE", worst, NMSE_FLOAT);

    /* per-head (qwen3 / gemma3 q and k norms): rows stride apart */
    worst = 0;
    static const int hd[] = {32, 128, 256}, nh[] = {4, 2, 3};
    for (int i = 0; i < 3; i++) {
        const int stride = hd[i] * nh[i] + 24, n_tok = 7;
        tb_weight w;
        tb_weight_make(&w, RP_TYPE_F32, hd[i], 1, 61 + (uint64_t)i);
        REQUIRE(!rp_be_upload(e->vk, &w.t), "upload: %s", rp_last_error());
        float *x = randn((size_t)stride * n_tok, 71 + (uint64_t)i, 1.5f);
        twin tx = twin_new(e, x, (size_t)stride * n_tok * 4);
        float *a = malloc(tx.bytes), *c = malloc(tx.bytes);
        rp_be_norm_heads(e->cpu, rp_bx_at(tx.c, 0), &w.t, hd[i], nh[i], n_tok, stride, 1e-6f);
        rp_be_norm_heads(e->vk, rp_bx_at(tx.v, 0), &w.t, hd[i], nh[i], n_tok, stride, 1e-6f);
        if (twin_read(e, &tx, a, c)) {
            const double d = test_nmse(a, c, tx.bytes / 4);
            CHECK(d <= NMSE_FLOAT, "head norm %d x %d: NMSE %.3g", nh[i], hd[i], d);
            for (int t = 0; t < n_tok; t++) /* the gap between rows is untouched */
                CHECK(
                    !memcmp(c + t * stride + hd[i] * nh[i], x + t * stride + hd[i] * nh[i], 24 * 4),
                    "head norm wrote past its heads (token %d)", t);
            worst = fmax(worst, d);
        }
        free(a);
        free(c);
        free(x);
        twin_free(e, &tx);
        tb_weight_free(&w);
    }
    tb_figure("norm_heads", "rms", "NMSE", worst, NMSE_FLOAT);
}

/* ---- rope --------------------------------------------------------------------------- */

void test_backend_vk_rope(void) {
    tb_env *e = tb_env_get(TB_VK);
    if (!e) return;
    float ff[32];
    for (int i = 0; i < 32; i++) ff[i] = 1.0f + 0.25f * (float)i;
    struct {
        int hd, n_rot, nh;
        rp_rope_style style;
        bool factors;
        float ext;
    } cs[] = {{64, 64, 4, RP_ROPE_NORM, false, 0},
              {64, 64, 3, RP_ROPE_NEOX, false, 0},
              {128, 32, 2, RP_ROPE_NEOX, true, 0},     /* partial rotation, frequency factors */
              {32, 16, 5, RP_ROPE_NORM, false, 1.0f}}; /* YaRN mix */
    for (size_t c = 0; c < RP_ARRAY_LEN(cs); c++) {
        const int n_tok = 7, stride = cs[c].hd * cs[c].nh + 8;
        int32_t pos[7] = {0, 1, 5, 100, 4095, 77, 3};
        rp_rope_params p = {.n_rot = cs[c].n_rot,
                            .freq_base = 10000.0f,
                            .freq_scale = cs[c].ext ? 0.25f : 1.0f,
                            .ext_factor = cs[c].ext,
                            .attn_factor = 1.0f,
                            .beta_fast = 32,
                            .beta_slow = 1,
                            .n_ctx_orig = 4096,
                            .freq_factors = cs[c].factors ? ff : NULL};
        float *x = randn((size_t)stride * n_tok, 300 + c, 1.0f);
        twin tx = twin_new(e, x, (size_t)stride * n_tok * 4),
             tc = twin_new(e, NULL, (size_t)n_tok * (size_t)p.n_rot * 4);
        rp_be_rope_cache(e->cpu, rp_bx_at(tc.c, 0), pos, n_tok, &p);
        rp_be_rope_cache(e->vk, rp_bx_at(tc.v, 0), pos, n_tok, &p);
        rp_be_rope(e->cpu, rp_bx_at(tx.c, 0), n_tok, stride, cs[c].nh, cs[c].hd, p.n_rot,
                   rp_bx_at(tc.c, 0), cs[c].style);
        rp_be_rope(e->vk, rp_bx_at(tx.v, 0), n_tok, stride, cs[c].nh, cs[c].hd, p.n_rot,
                   rp_bx_at(tc.v, 0), cs[c].style);
        float *a = malloc(tx.bytes), *b = malloc(tx.bytes);
        /* the CPU fuses one product of each rotation (llama.cpp's x86 build
         * does: rp_rope_apply); the shader rounds both: 1 ulp apart at most */
        if (twin_read(e, &tx, a, b))
            CHECK(test_max_abs_diff(a, b, tx.bytes / 4) <= 1e-6,
                  "rope case %zu: max |delta| %.3g (1 ulp expected)", c,
                  test_max_abs_diff(a, b, tx.bytes / 4));
        free(a);
        free(b);
        free(x);
        twin_free(e, &tx);
        twin_free(e, &tc);
    }
    tb_figure("rope", "norm/neox/partial/factors/yarn", "max |delta|", 0, 0);
}

/* ---- KV cache and attention ------------------------------------------------------------- */

typedef struct attn_case {
    const char *name;
    int n_head, n_head_kv, dk, dv, type_k, type_v;
    int window; /* 0 = full */
    float softcap;
    int n_seq, n_pos; /* positions each sequence ends with */
    int batch;        /* tokens per sequence in the last micro-batch */
} attn_case;

static double attn_run(tb_env *e, const attn_case *ac) {
    const int nb = ac->batch;
    const int cap = ac->window ? ac->window + nb - 1 : ac->n_pos; /* a ring as kv.c sizes it */
    rp_bkv_desc d = {ac->n_seq, ac->n_head_kv, cap, ac->dk, ac->dv, ac->type_k, ac->type_v};
    rp_bkv *kc = NULL, *kvv = NULL;
    rp_status s1 = rp_be_kv_new(e->cpu, &d, &kc), s2 = rp_be_kv_new(e->vk, &d, &kvv);
    CHECK(!s1 && !s2, "%s: kv_new: %s", ac->name, rp_last_error());
    if (s1 || s2) {
        rp_be_kv_free(e->cpu, kc);
        rp_be_kv_free(e->vk, kvv);
        return INFINITY;
    }
    const int wq = ac->n_head * ac->dk, wk = ac->n_head_kv * ac->dk, wv = ac->n_head_kv * ac->dv,
              wo = ac->n_head * ac->dv;
    /* micro-batches of nb tokens per sequence, the sequences' tokens interleaved */
    const int n_tok = nb * ac->n_seq;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_tok),
            *seq = malloc(sizeof(int32_t) * (size_t)n_tok);
    twin tq = twin_new(e, NULL, (size_t)n_tok * wq * 4),
         tk = twin_new(e, NULL, (size_t)n_tok * wk * 4),
         tv = twin_new(e, NULL, (size_t)n_tok * wv * 4),
         to = twin_new(e, NULL, (size_t)n_tok * wo * 4);
    double worst = 0;
    for (int p0 = 0; p0 < ac->n_pos; p0 += nb) {
        const int m = RP_MIN(nb, ac->n_pos - p0), nt = m * ac->n_seq;
        for (int t = 0; t < nt; t++) {
            pos[t] = p0 + t / ac->n_seq;
            seq[t] = (t + p0) % ac->n_seq; /* a different interleaving each batch */
        }
        float *q = randn((size_t)nt * wq, 11 + (uint64_t)p0, 1.0f),
              *k = randn((size_t)nt * wk, 13 + (uint64_t)p0, 1.0f),
              *v = randn((size_t)nt * wv, 17 + (uint64_t)p0, 1.0f);
        rp_be_write(e->cpu, rp_bx_at(tq.c, 0), q, (size_t)nt * wq * 4);
        rp_be_write(e->vk, rp_bx_at(tq.v, 0), q, (size_t)nt * wq * 4);
        rp_be_write(e->cpu, rp_bx_at(tk.c, 0), k, (size_t)nt * wk * 4);
        rp_be_write(e->vk, rp_bx_at(tk.v, 0), k, (size_t)nt * wk * 4);
        rp_be_write(e->cpu, rp_bx_at(tv.c, 0), v, (size_t)nt * wv * 4);
        rp_be_write(e->vk, rp_bx_at(tv.v, 0), v, (size_t)nt * wv * 4);
        rp_backend *bes[2] = {e->cpu, e->vk};
        for (int b = 0; b < 2; b++) {
            twin *T[4] = {&tq, &tk, &tv, &to};
            rp_bbuf *B[4];
            for (int i = 0; i < 4; i++) B[i] = b ? T[i]->v : T[i]->c;
            rp_bkv *kv = b ? kvv : kc;
            rp_be_kv_write(bes[b], kv, nt, pos, seq, rp_bx_at(B[1], 0), wk, rp_bx_at(B[2], 0), wv);
            rp_battn a = {.n_tok = nt,
                          .q = rp_bx_at(B[0], 0),
                          .q_stride = wq,
                          .out = rp_bx_at(B[3], 0),
                          .out_stride = wo,
                          .n_head = ac->n_head,
                          .n_head_kv = ac->n_head_kv,
                          .head_dim_k = ac->dk,
                          .head_dim_v = ac->dv,
                          .scale = 1.0f / sqrtf((float)ac->dk),
                          .softcap = ac->softcap,
                          .window = ac->window,
                          .pos = pos,
                          .seq = seq,
                          .kv = kv};
            rp_be_attention(bes[b], &a);
        }
        float *oc = malloc((size_t)nt * wo * 4), *ov = malloc((size_t)nt * wo * 4);
        rp_be_read(e->cpu, oc, rp_bx_at(to.c, 0), (size_t)nt * wo * 4);
        rp_be_read(e->vk, ov, rp_bx_at(to.v, 0), (size_t)nt * wo * 4);
        rp_status sc = rp_be_sync(e->cpu), sv = rp_be_sync(e->vk);
        CHECK(!sc && !sv, "%s: sync: %s", ac->name, rp_last_error());
        if (!sc && !sv) {
            const double dmax = test_max_abs_diff(oc, ov, (size_t)nt * wo);
            CHECK(dmax <= ATTN_ABS, "%s: positions %d..%d: max |delta| %.3g", ac->name, p0,
                  p0 + m - 1, dmax);
            worst = fmax(worst, dmax);
        }
        free(oc);
        free(ov);
        free(q);
        free(k);
        free(v);
    }
    /* the caches hold the same cells, bit for bit */
    for (int s = 0; s < ac->n_seq; s++) {
        const size_t bk = rp_bkv_seq_bytes(&d, false), bv = rp_bkv_seq_bytes(&d, true);
        uint8_t *k1 = malloc(bk), *k2 = malloc(bk), *v1 = malloc(bv), *v2 = malloc(bv);
        rp_be_kv_read(e->cpu, kc, s, k1, v1);
        rp_be_kv_read(e->vk, kvv, s, k2, v2);
        if (!rp_be_sync(e->cpu) && !rp_be_sync(e->vk))
            CHECK(!memcmp(k1, k2, bk) && !memcmp(v1, v2, bv), "%s: sequence %d's cells differ",
                  ac->name, s);
        free(k1);
        free(k2);
        free(v1);
        free(v2);
    }
    twin_free(e, &tq);
    twin_free(e, &tk);
    twin_free(e, &tv);
    twin_free(e, &to);
    free(pos);
    free(seq);
    rp_be_kv_free(e->cpu, kc);
    rp_be_kv_free(e->vk, kvv);
    return worst;
}

static const attn_case attn_cases[] = {
    {"f16 gqa 4:1, 1 token", 8, 2, 64, 64, RP_TYPE_F16, RP_TYPE_F16, 0, 0, 1, 70, 1},
    {"f16 gqa 2:1, 7-token batches, 3 sequences", 4, 2, 32, 32, RP_TYPE_F16, RP_TYPE_F16, 0, 0, 3,
     21, 7},
    {"f16 prompt of 64", 6, 6, 64, 64, RP_TYPE_F16, RP_TYPE_F16, 0, 0, 1, 64, 64},
    {"f32 window 8 ring, soft-cap 50, 2 sequences", 4, 1, 48, 48, RP_TYPE_F32, RP_TYPE_F32, 8,
     50.0f, 2, 30, 2},
    {"f16 window 5 ring, 7-token batches", 8, 4, 32, 32, RP_TYPE_F16, RP_TYPE_F16, 5, 0, 2, 28, 7},
    {"f16 K / f32 V, head dims 128 / 64", 4, 2, 128, 64, RP_TYPE_F16, RP_TYPE_F32, 0, 30.0f, 1, 40,
     2},
    {"f32 K / f16 V, head dim 256", 2, 1, 256, 256, RP_TYPE_F32, RP_TYPE_F16, 0, 0, 1, 20, 4},
    {"f32 odd head dim 37", 3, 3, 37, 37, RP_TYPE_F32, RP_TYPE_F32, 0, 0, 2, 9, 3},
};

void test_backend_vk_attention(void) {
    tb_env *e = tb_env_get(TB_VK);
    if (!e) return;
    double worst = 0;
    for (size_t i = 0; i < RP_ARRAY_LEN(attn_cases); i++)
        worst = fmax(worst, attn_run(e, &attn_cases[i]));
    tb_figure("attention", "f16/f32, gqa, window, softcap, seqs", "max |delta|", worst, ATTN_ABS);
    tb_figure("kv_write", "f16/f32", "cells", 0, 0);
}

/* ---- element-wise ----------------------------------------------------------------------- */

void test_backend_vk_eltwise(void) {
    tb_env *e = tb_env_get(TB_VK);
    if (!e) return;
    const int n = 10007, width = 100;
    float *y0 = randn((size_t)n, 1, 3.0f), *x0 = randn((size_t)n, 2, 1.0f);
    for (int i = 0; i < 40; i++) y0[i * 97] = (float)(i - 20); /* the clamps of the fp16 GELU */
    tb_weight bias;
    tb_weight_make(&bias, RP_TYPE_F32, width, 1, 3);
    REQUIRE(!rp_be_upload(e->vk, &bias.t), "upload: %s", rp_last_error());
    static const char *const names[] = {
        "add",     "mul",          "scale",       "softcap",
        "silu*up", "gelu_tanh*up", "gelu_erf*up", "gelu_tanh_f16*up",
        "add_row"};
    const double bound[] = {0, 0, 0, NMSE_FLOAT, NMSE_FLOAT, NMSE_FLOAT, NMSE_FLOAT, NMSE_FLOAT, 0};
    for (int op = 0; op < 9; op++) {
        twin ty = twin_new(e, y0, (size_t)n * 4), tx = twin_new(e, x0, (size_t)n * 4);
        rp_backend *bes[2] = {e->cpu, e->vk};
        for (int b = 0; b < 2; b++) {
            rp_bx y = rp_bx_at(b ? ty.v : ty.c, 0), x = rp_bx_at(b ? tx.v : tx.c, 0);
            switch (op) {
            case 0:
                rp_be_add(bes[b], y, x, n);
                break;
            case 1:
                rp_be_mul(bes[b], y, x, n);
                break;
            case 2:
                rp_be_scale(bes[b], y, 0.37f, n);
                break;
            case 3:
                rp_be_softcap(bes[b], y, 2.5f, n);
                break;
            case 8:
                rp_be_add_row(bes[b], y, &bias.t, width, n / width);
                break;
            default:
                rp_be_act_mul(bes[b], (rp_bact)(op - 4), y, x, n);
                break;
            }
        }
        float *a = malloc(ty.bytes), *c = malloc(ty.bytes);
        if (twin_read(e, &ty, a, c)) {
            const double d = test_nmse(a, c, (size_t)n);
            if (bound[op] == 0)
                CHECK(!memcmp(a, c, ty.bytes), "%s: max |delta| %.3g (bit for bit expected)",
                      names[op], test_max_abs_diff(a, c, (size_t)n));
            else
                CHECK(d <= bound[op], "%s: NMSE %.3g", names[op], d);
            tb_figure("eltwise", names[op], bound[op] ? "NMSE" : "max |delta|", bound[op] ? d : 0,
                      bound[op]);
        }
        free(a);
        free(c);
        twin_free(e, &ty);
        twin_free(e, &tx);
    }
    free(y0);
    free(x0);
    tb_weight_free(&bias);
}

/* ---- output rows and transfers ------------------------------------------------------------ */

static void output_case(tb_env *e, int type, bool layer, float softcap, const int32_t *rows,
                        int n_out, int n_tok, double *worst) {
    const int ne = 256, nv = 300;
    tb_weight w, nw, nb;
    tb_weight_make(&w, type, ne, nv, 41);
    tb_weight_make(&nw, RP_TYPE_F32, ne, 1, 42);
    tb_weight_make(&nb, RP_TYPE_F32, ne, 1, 43);
    REQUIRE(!rp_be_upload(e->vk, &w.t) && !rp_be_upload(e->vk, &nw.t) &&
                !rp_be_upload(e->vk, &nb.t) && !rp_be_upload(e->cpu, &w.t),
            "upload: %s", rp_last_error());
    float *x = randn((size_t)n_tok * ne, 44, 1.0f);
    twin tx = twin_new(e, x, (size_t)n_tok * ne * 4),
         tt = twin_new(e, NULL, (size_t)n_out * ne * 4);
    const size_t nl = (size_t)n_out * nv;
    float *lc = malloc(nl * 4), *lv = malloc(nl * 4), *hc = malloc((size_t)n_out * ne * 4),
          *hv = malloc((size_t)n_out * ne * 4);
    for (int b = 0; b < 2; b++) {
        rp_bout o = {.x = rp_bx_at(b ? tx.v : tx.c, 0),
                     .tmp = rp_bx_at(b ? tt.v : tt.c, 0),
                     .n_embd = ne,
                     .n_out = n_out,
                     .rows = rows,
                     .norm = &nw.t,
                     .norm_b = layer ? &nb.t : NULL,
                     .w = &w.t,
                     .eps = 1e-5f,
                     .softcap = softcap,
                     .logits = b ? lv : lc,
                     .hidden = b ? hv : hc};
        rp_be_output(b ? e->vk : e->cpu, &o);
    }
    rp_status sc = rp_be_sync(e->cpu), sv = rp_be_sync(e->vk);
    CHECK(!sc && !sv, "output: sync: %s", rp_last_error());
    if (!sc && !sv) {
        const double d = test_nmse(lc, lv, nl);
        CHECK(d <= mm_bound(type), "output %s%s softcap %g, %d of %d rows: NMSE %.3g",
              rp_type_name(type), layer ? " layer norm" : "", softcap, n_out, n_tok, d);
        CHECK(!memcmp(hc, hv, (size_t)n_out * ne * 4), "output: hidden rows differ");
        *worst = fmax(*worst, d);
    }
    free(lc);
    free(lv);
    free(hc);
    free(hv);
    free(x);
    twin_free(e, &tx);
    twin_free(e, &tt);
    tb_weight_free(&w);
    tb_weight_free(&nw);
    tb_weight_free(&nb);
}

void test_backend_vk_output(void) {
    tb_env *e = tb_env_get(TB_VK);
    if (!e) return;
    static const int32_t rows[3] = {2, 5, 6};
    double worst = 0;
    output_case(e, RP_TYPE_Q6_K, false, 0, rows, 3, 7, &worst);
    output_case(e, RP_TYPE_F16, true, 30.0f, NULL, 7, 7, &worst);
    output_case(e, RP_TYPE_Q8_0, false, 30.0f, rows + 2, 1, 7, &worst);
    tb_figure("output", "q6_K/f16/q8_0, rows, softcap", "NMSE", worst, NMSE_QUANT);
}

void test_backend_vk_transfer(void) {
    tb_env *e = tb_env_get(TB_VK);
    if (!e) return;
    const int width = 33, n = 9;
    float *x = randn((size_t)width * n, 5, 1.0f);
    twin t = twin_new(e, x, (size_t)width * n * 4), u = twin_new(e, NULL, (size_t)width * n * 4);
    static const int32_t rows[4] = {1, 2, 5, 8};
    rp_backend *bes[2] = {e->cpu, e->vk};
    for (int b = 0; b < 2; b++) {
        rp_bbuf *tb = b ? t.v : t.c, *ub = b ? u.v : u.c;
        rp_be_copy(bes[b], rp_bx_at(ub, 0), rp_bx_at(tb, 0), t.bytes);          /* whole */
        rp_be_gather(bes[b], rp_bx_at(tb, 0), rp_bx_at(tb, 0), rows, 4, width); /* in place */
        /* overlapping copy within one buffer */
        rp_be_copy(bes[b], rp_bx_add(rp_bx_at(ub, 0), 5), rp_bx_at(ub, 0), (size_t)width * 4 * 4);
    }
    float *a = malloc(t.bytes), *c = malloc(t.bytes);
    if (twin_read(e, &t, a, c)) {
        CHECK(!memcmp(a, c, t.bytes), "gather in place differs");
        for (int i = 0; i < 4; i++)
            CHECK(!memcmp(c + i * width, x + rows[i] * width, (size_t)width * 4),
                  "gather row %d is not source row %d", i, rows[i]);
    }
    if (twin_read(e, &u, a, c)) {
        CHECK(!memcmp(a, c, u.bytes), "copy differs");
        CHECK(!memcmp(c + 5, x, (size_t)width * 4 * 4), "overlapping copy lost data");
    }
    free(a);
    free(c);
    free(x);
    twin_free(e, &t);
    twin_free(e, &u);
}

/* ---- bindings and allocations forced small ------------------------------------------------ */

void test_backend_vk_split_bindings(void) {
    tb_env *e = tb_env_get(TB_VK_SMALL);
    if (!e) return;
    /* weights in several parts (allocations of 24 KiB), rows in windows of
     * 16 KiB, token chunks, staging uploads */
    static const int toks[] = {1, 64};
    const int types[3] = {RP_TYPE_Q4_K, RP_TYPE_Q8_0, RP_TYPE_F16};
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        tb_weight w;
        tb_weight_make(&w, types[i], 512, 160, 1000 + (uint64_t)i);
        REQUIRE(!rp_be_upload(e->vk, &w.t) && !rp_be_upload(e->cpu, &w.t), "upload: %s",
                rp_last_error());
        const uint64_t d0 = e->vk->stats.dispatches[RP_BOP_MATMUL];
        worst = fmax(worst, mm_case(e, &w, toks, 2, 50 + (uint64_t)i));
        CHECK(e->vk->stats.dispatches[RP_BOP_MATMUL] - d0 > 10,
              "%s: only %llu dispatches: the weight was not split", rp_type_name(types[i]),
              (unsigned long long)(e->vk->stats.dispatches[RP_BOP_MATMUL] - d0));
        tb_weight_free(&w);
    }
    tb_figure("split matmul", "q4_K/q8_0/f16 16 KiB windows", "NMSE", worst, NMSE_QUANT);

    /* an embedding of 1000 rows (210 KiB: 9 parts) */
    tb_weight emb;
    tb_weight_make(&emb, RP_TYPE_Q6_K, 256, 1000, 77);
    REQUIRE(!rp_be_upload(e->vk, &emb.t), "upload: %s", rp_last_error());
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (i * 379) % 1000;
    twin td = twin_new(e, NULL, 64 * 256 * 4);
    float *a = malloc(td.bytes), *c = malloc(td.bytes);
    rp_be_get_rows(e->cpu, rp_bx_at(td.c, 0), &emb.t, ids, 64);
    rp_be_get_rows(e->vk, rp_bx_at(td.v, 0), &emb.t, ids, 64);
    if (twin_read(e, &td, a, c)) CHECK(!memcmp(a, c, td.bytes), "split get_rows differs");
    free(a);
    free(c);
    twin_free(e, &td);
    tb_weight_free(&emb);

    /* norms, element-wise ops, attention and the output rows over windows */
    double w2 = 0;
    norm_case(e, RP_BNORM_RMS, 576, 64, true, false, &w2);
    attn_case ac = {
        /* a head of 140 cells is 8960 bytes: one KV head per window */
        "split: f16 2 sequences", 4, 2, 32, 32, RP_TYPE_F16, RP_TYPE_F16, 0, 0, 2, 140, 70};
    const double da = attn_run(e, &ac);
    CHECK(da <= ATTN_ABS, "split attention: %.3g", da);
    static const int32_t rows[2] = {3, 40};
    output_case(e, RP_TYPE_Q4_K, false, 0, rows, 2, 64, &w2);
    tb_figure("split norm/attn/output", "16 KiB windows", "NMSE", w2, NMSE_QUANT);
}

/* ---- memory accounting ---------------------------------------------------------------------- */

void test_backend_vk_memory(void) {
    tb_env *e = tb_env_get(TB_VK);
    if (!e) return;
    tb_weight w;
    tb_weight_make(&w, RP_TYPE_Q4_K, 1024, 64, 5);
    const rp_backend_stats before = e->vk->stats;
    REQUIRE(!rp_be_upload(e->vk, &w.t), "upload: %s", rp_last_error());
    const rp_backend_stats once = e->vk->stats;
    /* the same tensor again, and a second view of its bytes (two layers
     * aliasing one tensor) */
    rp_tensor alias = w.t;
    alias.name = "alias";
    REQUIRE(!rp_be_upload(e->vk, &w.t) && !rp_be_upload(e->vk, &alias), "upload: %s",
            rp_last_error());
    const rp_backend_stats twice = e->vk->stats;
    CHECK(once.n_weights == before.n_weights + 1, "first upload counted %d weights",
          once.n_weights - before.n_weights);
    CHECK(once.weight_bytes - before.weight_bytes == w.t.nbytes, "first upload: %llu bytes",
          (unsigned long long)(once.weight_bytes - before.weight_bytes));
    CHECK(twice.n_weights == once.n_weights && twice.weight_bytes == once.weight_bytes &&
              twice.device_bytes == once.device_bytes,
          "a repeated upload allocated again (%d weights, %llu device bytes)",
          twice.n_weights - once.n_weights,
          (unsigned long long)(twice.device_bytes - once.device_bytes));
    /* a tensor of another shape over the same bytes is refused */
    rp_tensor bad = w.t;
    bad.ne[0] = 512;
    bad.ne[1] = 128;
    bad.row_bytes /= 2;
    CHECK(rp_be_upload(e->vk, &bad) == RP_ERR_INVALID_ARG, "a reshaped alias was accepted");
    rp_clear_error();
    /* and a weight type without kernels names itself */
    tb_weight f;
    tb_weight_make(&f, RP_TYPE_F32, 32, 1, 6);
    f.t.type = RP_TYPE_IQ2_XXS;
    CHECK(rp_be_upload(e->vk, &f.t) == RP_ERR_UNSUPPORTED && strstr(rp_last_error(), "iq2_xxs"),
          "an unsupported type: %s", rp_last_error());
    rp_clear_error();
    tb_weight_free(&f);
    tb_weight_free(&w);
}

/* ---- without subgroup operations ----------------------------------------------------------- */

void test_backend_vk_no_subgroups(void) {
    tb_env *e = tb_env_get(TB_VK_NOSG);
    if (!e) return;
    static const int toks[] = {1, 7};
    const int types[2] = {RP_TYPE_Q4_K, RP_TYPE_F16};
    double worst = 0;
    for (int i = 0; i < 2; i++) {
        tb_weight w;
        tb_weight_make(&w, types[i], 512, 37, 2000 + (uint64_t)i);
        REQUIRE(!rp_be_upload(e->vk, &w.t) && !rp_be_upload(e->cpu, &w.t), "upload: %s",
                rp_last_error());
        worst = fmax(worst, mm_case(e, &w, toks, 2, 60 + (uint64_t)i));
        tb_weight_free(&w);
    }
    norm_case(e, RP_BNORM_LAYER, 576, 7, true, true, &worst);
    const double da = attn_run(e, &attn_cases[3]);
    CHECK(da <= ATTN_ABS, "attention without subgroups: %.3g", da);
    tb_figure("no subgroups", "matmul/norm/attn", "NMSE", worst, NMSE_QUANT);
}

/* ---- devices and errors -------------------------------------------------------------------- */

void test_backend_vk_devices(void) {
    rp_backend_dev devs[RP_BACKEND_MAX_DEVICES + 1];
    int n = 0;
    char note[512];
    tb_select_lavapipe();
    REQUIRE(!rp_backend_list(devs, (int)RP_ARRAY_LEN(devs), &n, note, sizeof note), "list: %s",
            rp_last_error());
    CHECK(n >= 1 && !strcmp(devs[0].name, "cpu"), "the cpu comes first");
    rp_backend *be = NULL;
    if (!rp_backend_vk_built()) {
        CHECK(n == 1 && strstr(note, "libvulkan-dev") && strstr(note, "glslc"),
              "a build without Vulkan says what to install: '%s'", note);
        CHECK(rp_backend_open("vulkan0", NULL, &be) == RP_ERR_UNSUPPORTED &&
                  strstr(rp_last_error(), "libvulkan-dev"),
              "open without Vulkan: %s", rp_last_error());
        return;
    }
    CHECK(n >= 2 && !strncmp(devs[1].name, "vulkan0", 8), "no Vulkan device listed: %s", note);
    CHECK(rp_backend_open("vulkan9", NULL, &be) == RP_ERR_INVALID_ARG && !be,
          "vulkan9 on a machine with %d devices: %s", n - 1, rp_last_error());
    CHECK(rp_backend_open("vulkanx", NULL, &be) == RP_ERR_INVALID_ARG, "a malformed name: %s",
          rp_last_error());
    CHECK(rp_backend_open("metal", NULL, &be) == RP_ERR_INVALID_ARG, "an unknown device");
    /* no driver: one error naming the package */
    char *icd = getenv("VK_ICD_FILENAMES") ? strdup(getenv("VK_ICD_FILENAMES")) : NULL,
         *drv = getenv("VK_DRIVER_FILES") ? strdup(getenv("VK_DRIVER_FILES")) : NULL;
    setenv("VK_ICD_FILENAMES", "/nonexistent/icd.json", 1);
    setenv("VK_DRIVER_FILES", "/nonexistent/icd.json", 1);
    CHECK(rp_backend_open("vulkan0", NULL, &be) == RP_ERR_UNSUPPORTED && !be &&
              strstr(rp_last_error(), "mesa-vulkan-drivers"),
          "no driver: %s", rp_last_error());
    CHECK(!rp_backend_list(devs, (int)RP_ARRAY_LEN(devs), &n, note, sizeof note) && n == 1 &&
              strstr(note, "mesa-vulkan-drivers"),
          "listing without a driver: %d devices, '%s'", n, note);
    if (icd)
        setenv("VK_ICD_FILENAMES", icd, 1);
    else
        unsetenv("VK_ICD_FILENAMES");
    if (drv)
        setenv("VK_DRIVER_FILES", drv, 1);
    else
        unsetenv("VK_DRIVER_FILES");
    free(icd);
    free(drv);
    rp_clear_error();
}
