/* qwen35 (Qwen3.5: gated delta-net + gated attention hybrid) against
 * llama.cpp's golden, batch vs token-by-token, sequences, plans over
 * recurrent layers, state sizes, the MTP head, and bad files. */
#include "arch/arch.h"
#include "arch/qwen35.h"
#include "convert/synth.h"
#include "core/context.h"
#include "golden.h"
#include "core/model.h"
#include "test.h"
#include "reprise_tools.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

#define Q35 "models/synth/qwen35-tiny.gguf"

void test_qwen35_golden(void) {
    golden_result r;
    REQUIRE(golden_run(Q35, "golden/synth/qwen35-tiny.p1", NULL, &r),
            "could not run the golden case");
    CHECK(r.nmse <= 1e-6, "prompt logits NMSE %.3g > 1e-6", r.nmse);
    CHECK(r.max_abs <= 2e-3, "prompt logits max |delta| %.3g > 2e-3", r.max_abs);
    CHECK(r.top1_agree == r.n_pos, "argmax agrees at %d of %d prompt positions", r.top1_agree,
          r.n_pos);
    CHECK(r.greedy_match == r.n_greedy, "greedy continuation diverges at token %d of %d",
          r.greedy_match, r.n_greedy);
    printf("     qwen35-tiny p1: max|d| %.2e nmse %.2e greedy %d/%d\n", r.max_abs, r.nmse,
           r.greedy_match, r.n_greedy);
}

static bool open_ctx(rp_model *m, const char *repeat, const char *map, int n_ctx, int n_batch,
                     int n_seq, bool keep_hidden, rp_context **c) {
    rp_context_params cp = rp_context_default_params();
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)n_batch;
    cp.n_seq_max = (uint32_t)n_seq;
    cp.n_threads = 2;
    cp.repeat_layers = repeat;
    cp.layer_map = map;
    cp.keep_hidden = keep_hidden;
    if (rp_context_new(m, &cp, c)) {
        fprintf(stderr, "  %s\n", rp_last_error());
        return false;
    }
    return true;
}

static rp_model *load_tiny(void) {
    rp_model *m = NULL;
    if (rp_model_load(test_shared(Q35), NULL, &m)) fprintf(stderr, "  %s\n", rp_last_error());
    return m;
}

static void make_tokens(int32_t *t, int n, int salt) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 37 + 11 + salt * 101) % 512);
}

/* Logits of every row of one prompt decoded in batches of `chunk` tokens
 * (chunk 1 = token by token); out is [n][n_vocab]. */
static bool run_chunks(rp_context *c, const int32_t *toks, int n, int chunk, float *out) {
    const int nv = rp_n_vocab(c);
    int8_t all[256];
    memset(all, 1, sizeof all);
    for (int i = 0; i < n; i += chunk) {
        int k = n - i < chunk ? n - i : chunk;
        rp_batch b = {.n_tokens = k, .token = toks + i, .logits = all};
        if (rp_decode(c, &b)) {
            fprintf(stderr, "  %s\n", rp_last_error());
            return false;
        }
        for (int j = 0; j < k; j++)
            memcpy(out + (size_t)(i + j) * nv, rp_get_logits(c, j), (size_t)nv * sizeof(float));
    }
    return true;
}

/* Prompt processing over the whole batch, in micro-batches, and token by token
 * give the same logits: the recurrent state carries across every boundary.
 * With the one-token orders (rp_compute.one_tok, a speculative target's
 * verification) the whole batch equals token by token bit for bit. */
void test_qwen35_batch_equals_sequential(void) {
    rp_model *m = load_tiny();
    REQUIRE(m, "load");
    enum { N = 48 };
    int32_t toks[N];
    make_tokens(toks, N, 0);
    const int nv = 512;
    float *ref = malloc((size_t)N * nv * sizeof(float)),
          *one = malloc((size_t)N * nv * sizeof(float)),
          *got = malloc((size_t)N * nv * sizeof(float));
    const int chunks[] = {N, 1, 5, N};
    const int ubatch[] = {512, 512, 7, 512}; /* the third also splits each decode */
    for (int v = 0; v < 4; v++) {
        rp_context *c;
        REQUIRE(open_ctx(m, NULL, NULL, 128, ubatch[v], 1, false, &c), "ctx");
        c->cc.one_tok = v == 3;
        REQUIRE(run_chunks(c, toks, N, chunks[v], v == 0 ? ref : v == 1 ? one : got), "decode");
        rp_context_free(c);
        if (v == 3) {
            CHECK(!memcmp(one, got, (size_t)N * nv * sizeof(float)),
                  "one batch in the one-token orders differs from token by token: max |delta| %.3g",
                  test_max_abs_diff(one, got, (size_t)N * nv));
            continue;
        }
        if (!v) continue;
        double d = test_max_abs_diff(ref, v == 1 ? one : got, (size_t)N * nv);
        /* one-token chunks: V summed in llama.cpp's one-token order (64 lanes,
         * src/kernels/ops.c attn_exact_head), a batch in its batch order
         * (measured 1.38e-5) */
        CHECK(d <= 3e-5, "chunk %d / micro-batch %d vs one batch: max |delta| %.3g", chunks[v],
              ubatch[v], d);
    }
    free(ref);
    free(one);
    free(got);
    rp_model_free(m);
}

/* Last row's logits of a prompt of n tokens (want_all: every row an output,
 * as the MTP target decodes a prompt; one_tok_out as rp_compute says). */
static bool prompt_last_logits(rp_model *m, int n, bool want_all, bool one_tok_out, float *out) {
    rp_context *c;
    if (!open_ctx(m, NULL, NULL, 64, 512, 1, true, &c)) return false;
    int32_t toks[32];
    int8_t want[32];
    make_tokens(toks, n, 3);
    for (int i = 0; i < n; i++) want[i] = want_all || i == n - 1;
    c->cc.one_tok_out = one_tok_out;
    rp_batch b = {.n_tokens = n, .token = toks, .logits = want};
    bool ok = rp_decode(c, &b) == RP_OK;
    if (ok) memcpy(out, rp_get_logits(c, n - 1), (size_t)rp_n_vocab(c) * sizeof(float));
    rp_context_free(c);
    return ok;
}

/* A prompt decoded with every row an output (the MTP target needs every
 * hidden state) gives its last row the logits of plain decoding, where it is
 * the one output row, when the output rows take the one-token orders
 * (rp_compute.one_tok_out): on Q4_K_M with an F32 cache, where the last
 * step's feed-forward and the output over several rows take llama.cpp's batch
 * orders on AVX-512 (they differ there from 8 tokens on). */
void test_qwen35_output_rows_one_token_order(void) {
    rp_quantize_params qp = rp_quantize_default_params();
    qp.type = "Q4_K_M";
    qp.n_threads = 2;
    rp_quantize_plan *qz = NULL;
    const char *path = test_tmp("qwen35-tiny-q4km.gguf");
    REQUIRE(!rp_quantize_plan_new(test_shared(Q35), &qp, &qz), "%s", rp_last_error());
    rp_status st = rp_quantize_plan_write(qz, path, NULL, NULL);
    rp_quantize_plan_free(qz);
    REQUIRE(!st, "%s", rp_last_error());
    rp_model *m = NULL;
    REQUIRE(!rp_model_load(path, NULL, &m), "%s", rp_last_error());
    float plain[512], all[512], batch[512];
    int n_batch_differs = 0;
    for (int n = 6; n <= 13; n++) {
        REQUIRE(prompt_last_logits(m, n, false, false, plain) &&
                    prompt_last_logits(m, n, true, true, all) &&
                    prompt_last_logits(m, n, true, false, batch),
                "decode: %s", rp_last_error());
        CHECK(!memcmp(plain, all, sizeof plain),
              "%d tokens: every row an output in the one-token orders, last row max |delta| %.3g "
              "from plain decoding's",
              n, test_max_abs_diff(plain, all, 512));
        n_batch_differs += memcmp(plain, batch, sizeof plain) != 0;
    }
    printf("     batch orders part from the one-row logits at %d of 8 prompt lengths\n",
           n_batch_differs);
    rp_model_free(m);
}

/* Two sequences interleaved in one batch equal each run alone; clearing a
 * sequence zeroes its recurrent state; recurrent state cannot be rolled back. */
void test_qwen35_sequences(void) {
    rp_model *m = load_tiny();
    REQUIRE(m, "load");
    enum { N = 20 };
    const int nv = 512;
    int32_t a[N], b[N];
    make_tokens(a, N, 1);
    make_tokens(b, N, 2);
    float *ra = malloc((size_t)N * nv * sizeof(float)),
          *rb = malloc((size_t)N * nv * sizeof(float));
    rp_context *c1;
    REQUIRE(open_ctx(m, NULL, NULL, 64, 512, 1, false, &c1), "ctx");
    REQUIRE(run_chunks(c1, a, N, N, ra), "decode a");
    rp_kv_clear(c1);
    REQUIRE(run_chunks(c1, b, N, N, rb), "decode b");

    rp_context *c2;
    REQUIRE(open_ctx(m, NULL, NULL, 64, 512, 2, false, &c2), "ctx2");
    int32_t tok[2 * N], seq[2 * N];
    int8_t want[2 * N];
    for (int i = 0; i < N; i++) {
        tok[2 * i] = a[i], seq[2 * i] = 0;
        tok[2 * i + 1] = b[i], seq[2 * i + 1] = 1;
    }
    memset(want, 1, sizeof want);
    rp_batch bb = {.n_tokens = 2 * N, .token = tok, .seq_id = seq, .logits = want};
    REQUIRE(rp_decode(c2, &bb) == RP_OK, "%s", rp_last_error());
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double da = test_max_abs_diff(ra + (size_t)i * nv, rp_get_logits(c2, 2 * i), nv);
        double db = test_max_abs_diff(rb + (size_t)i * nv, rp_get_logits(c2, 2 * i + 1), nv);
        worst = fmax(worst, fmax(da, db));
    }
    CHECK(worst <= 1e-5, "interleaved sequences vs alone: max |delta| %.3g", worst);

    /* rolling back a recurrent sequence is refused; clearing it works */
    CHECK(rp_kv_seq_truncate(c2, 0, 5) == RP_ERR_UNSUPPORTED &&
              strstr(rp_last_error(), "recurrent"),
          "%s", rp_last_error());
    CHECK(rp_kv_seq_truncate(c2, 1, 0) == RP_OK && rp_kv_seq_len(c2, 1) == 0, "clear sequence 1");
    rp_batch one = {.n_tokens = N, .token = b, .seq_id = NULL, .logits = want};
    int32_t s1[N];
    for (int i = 0; i < N; i++) s1[i] = 1;
    one.seq_id = s1;
    REQUIRE(rp_decode(c2, &one) == RP_OK, "%s", rp_last_error());
    double d = test_max_abs_diff(rb + (size_t)(N - 1) * nv, rp_get_logits(c2, N - 1), nv);
    CHECK(d <= 1e-5, "sequence 1 after clearing vs fresh: max |delta| %.3g", d);
    rp_context_free(c1);
    rp_context_free(c2);
    free(ra);
    free(rb);
    rp_model_free(m);
}

/* Recurrent state per sequence is constant in the context length; KV grows. */
void test_qwen35_state_sizes(void) {
    rp_model *m = load_tiny();
    REQUIRE(m, "load");
    rp_context *a, *b;
    REQUIRE(open_ctx(m, NULL, NULL, 256, 64, 1, false, &a) &&
                open_ctx(m, NULL, NULL, 4096, 64, 1, false, &b),
            "ctx");
    /* 6 delta-net layers: conv (4-1) x 256 channels + 4 heads x 32 x 32 floats */
    const uint64_t rec = 6ull * (3 * 256 + 4 * 32 * 32) * 4;
    CHECK(a->state.rec_bytes == rec && b->state.rec_bytes == rec,
          "recurrent bytes %llu / %llu, want %llu", (unsigned long long)a->state.rec_bytes,
          (unsigned long long)b->state.rec_bytes, (unsigned long long)rec);
    /* 2 attention layers x (K + V) x 2 kv heads x 64 x n_ctx floats */
    CHECK(a->state.kv_bytes == 2ull * 2 * 2 * 64 * 256 * 4 &&
              b->state.kv_bytes == 16 * a->state.kv_bytes,
          "KV bytes %llu / %llu", (unsigned long long)a->state.kv_bytes,
          (unsigned long long)b->state.kv_bytes);
    rp_context_free(a);
    rp_context_free(b);
    rp_model_free(m);
}

/* A plan step keeps its source's kind; a repeated delta-net layer gets its own
 * conv + recurrent state, a repeated attention layer its own KV slot. */
static void check_plan(rp_model *m, const char *spec, int n_eff, int n_rec, int n_attn) {
    rp_context *c, *id;
    REQUIRE(open_ctx(m, spec, NULL, 64, 64, 1, false, &c) &&
                open_ctx(m, NULL, NULL, 64, 64, 1, false, &id),
            "%s", spec);
    CHECK(rp_context_n_eff(c) == n_eff, "%s: n_eff %d, want %d", spec, rp_context_n_eff(c), n_eff);
    int rec = 0, attn = 0;
    for (int e = 0; e < rp_context_n_eff(c); e++) {
        const int src = rp_context_step_src(c, e);
        const bool is_rec = m->info[src].kind == RP_LAYER_RECURRENT;
        CHECK(is_rec == (src != 3 && src != 7), "%s: step %d (layer %d) has the wrong kind", spec,
              e, src);
        CHECK((c->state.rec[e] != NULL) == is_rec && (c->state.kv[e].k != NULL) == !is_rec,
              "%s: step %d (layer %d): state does not match its kind", spec, e, src);
        rec += is_rec;
        attn += !is_rec;
        for (int f = 0; f < e; f++) /* no two steps share a slot */
            CHECK((!is_rec || c->state.rec[e] != c->state.rec[f]) &&
                      (is_rec || c->state.kv[e].k != c->state.kv[f].k),
                  "%s: steps %d and %d share state", spec, f, e);
    }
    CHECK(rec == n_rec && attn == n_attn, "%s: %d recurrent + %d attention steps, want %d + %d",
          spec, rec, attn, n_rec, n_attn);
    CHECK(c->state.rec_bytes == id->state.rec_bytes / 6 * (uint64_t)n_rec &&
              c->state.kv_bytes == id->state.kv_bytes / 2 * (uint64_t)n_attn,
          "%s: state bytes do not follow the steps", spec);
    /* it runs, and the repeat changes the result */
    enum { N = 12 };
    int32_t t[N];
    make_tokens(t, N, 3);
    rp_batch b = {.n_tokens = N, .token = t};
    REQUIRE(rp_decode(c, &b) == RP_OK && rp_decode(id, &b) == RP_OK, "%s: %s", spec,
            rp_last_error());
    const float *lp = rp_get_logits(c, N - 1), *li = rp_get_logits(id, N - 1);
    bool finite = true;
    for (int i = 0; i < 512; i++) finite &= isfinite(lp[i]) != 0;
    CHECK(finite, "%s: non-finite logits", spec);
    CHECK(test_max_abs_diff(lp, li, 512) > 1e-3, "%s: the plan changed nothing", spec);
    rp_context_free(c);
    rp_context_free(id);
}

void test_qwen35_plans(void) {
    rp_model *m = load_tiny();
    REQUIRE(m, "load");
    REQUIRE(rp_model_n_layer(m) == 8 && rp_model_n_layer_total(m) == 9, "trunk 8 + 1 head");
    check_plan(m, "1,2", 9, 7, 2);      /* a delta-net layer */
    check_plan(m, "3,4", 9, 6, 3);      /* an attention layer */
    check_plan(m, "2,5", 11, 8, 3);     /* both kinds: 2, 3, 4 */
    check_plan(m, "1,2;6,8", 11, 8, 3); /* two blocks, the second ends on attention layer 7 */
    /* the head is never part of a plan */
    rp_context *c = NULL;
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 32;
    cp.repeat_layers = "7,9";
    CHECK(rp_context_new(m, &cp, &c) == RP_ERR_PLAN && strstr(rp_last_error(), "NextN"), "%s",
          rp_last_error());
    cp.repeat_layers = NULL;
    cp.layer_map = "0..8";
    CHECK(rp_context_new(m, &cp, &c) == RP_ERR_PLAN && strstr(rp_last_error(), "NextN"), "%s",
          rp_last_error());
    /* the report shows step kinds and the head apart from the plan */
    REQUIRE(open_ctx(m, "2,5", NULL, 32, 32, 1, false, &c), "ctx");
    char rep[2048];
    rp_context_plan_report(c, rep, sizeof rep);
    CHECK(strstr(rep, " 5:2") && strstr(rep, " 6:3") && strstr(rep, "rec") && strstr(rep, "attn") &&
              strstr(rep, "NextN/MTP head: layers 8..8"),
          "%s", rep);
    rp_context_free(c);
    rp_model_free(m);
}

/* ---- the MTP head ---------------------------------------------------------- */

static const float *W(const rp_model *m, const char *name) {
    const rp_gguf_tensor *t = rp_gguf_find_tensor(m->gguf, name);
    return t && t->type == RP_TYPE_F32 ? t->data : NULL;
}

static void ref_rms(double *y, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * s * w[i];
}

/* y[r] = sum_k w[r][k] x[k] over a row-major F32 weight [rows][n] */
static void ref_mv(double *y, const float *w, const double *x, int n, int rows) {
    for (int r = 0; r < rows; r++) {
        double a = 0;
        for (int k = 0; k < n; k++) a += (double)w[(size_t)r * n + k] * x[k];
        y[r] = a;
    }
}

static void ref_rope(double *v, int pos, int n_rot, double base) {
    for (int j = 0; j < n_rot / 2; j++) {
        const double th = pos * pow(base, -2.0 * j / n_rot), c = cos(th), s = sin(th);
        const double a = v[j], b = v[j + n_rot / 2];
        v[j] = a * c - b * s;
        v[j + n_rot / 2] = a * s + b * c;
    }
}

/* A plain double-precision NextN block for qwen35-tiny (E 256, 4 heads / 2 kv
 * of 64, 16 rotary dims, ff 512): rows 0..n-1 at positions 0..n-1. */
static void ref_mtp(const rp_model *m, const float *hidden, const int32_t *tok, int n,
                    double *logits) {
    enum { E = 256, NH = 4, NKV = 2, HD = 64, FF = 512, NV = 512, ROT = 16 };
    const double eps = 1e-6;
    const float *eh = W(m, "blk.8.nextn.eh_proj.weight"), *en = W(m, "blk.8.nextn.enorm.weight"),
                *hn = W(m, "blk.8.nextn.hnorm.weight"),
                *shn = W(m, "blk.8.nextn.shared_head_norm.weight"),
                *on = W(m, "output_norm.weight"), *emb = W(m, "token_embd.weight"),
                *an = W(m, "blk.8.attn_norm.weight"),
                *pn = W(m, "blk.8.post_attention_norm.weight"), *wq = W(m, "blk.8.attn_q.weight"),
                *wk = W(m, "blk.8.attn_k.weight"), *wv = W(m, "blk.8.attn_v.weight"),
                *wo = W(m, "blk.8.attn_output.weight"), *qn = W(m, "blk.8.attn_q_norm.weight"),
                *kn = W(m, "blk.8.attn_k_norm.weight"), *wg = W(m, "blk.8.ffn_gate.weight"),
                *wu = W(m, "blk.8.ffn_up.weight"), *wd = W(m, "blk.8.ffn_down.weight");
    static double K[64][NKV * HD], V[64][NKV * HD];
    double x[E], t0[E], t1[E], cat[2 * E], qg[2 * NH * HD], q[NH * HD], o[NH * HD], g[FF], u[FF],
        sc[64];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < E; k++) t0[k] = emb[(size_t)tok[i] * E + k];
        ref_rms(cat, t0, en, E, eps);
        for (int k = 0; k < E; k++) t0[k] = hidden[(size_t)i * E + k];
        ref_rms(t1, t0, on, E, eps);
        ref_rms(cat + E, t1, hn, E, eps);
        ref_mv(x, eh, cat, 2 * E, E);
        ref_rms(t0, x, an, E, eps);
        ref_mv(qg, wq, t0, E, 2 * NH * HD);
        ref_mv(K[i], wk, t0, E, NKV * HD);
        ref_mv(V[i], wv, t0, E, NKV * HD);
        for (int h = 0; h < NH; h++) {
            ref_rms(q + h * HD, qg + h * 2 * HD, qn, HD, eps);
            ref_rope(q + h * HD, i, ROT, 1e7);
        }
        for (int h = 0; h < NKV; h++) {
            ref_rms(K[i] + h * HD, K[i] + h * HD, kn, HD, eps);
            ref_rope(K[i] + h * HD, i, ROT, 1e7);
        }
        for (int h = 0; h < NH; h++) {
            const int kvh = h / (NH / NKV);
            double mx = -1e300, sum = 0;
            for (int j = 0; j <= i; j++) {
                double d = 0;
                for (int k = 0; k < HD; k++) d += q[h * HD + k] * K[j][kvh * HD + k];
                sc[j] = d / sqrt((double)HD);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j <= i; j++) sum += sc[j] = exp(sc[j] - mx);
            for (int k = 0; k < HD; k++) {
                double a = 0;
                for (int j = 0; j <= i; j++) a += sc[j] / sum * V[j][kvh * HD + k];
                o[h * HD + k] = a / (1.0 + exp(-qg[h * 2 * HD + HD + k]));
            }
        }
        ref_mv(t0, wo, o, NH * HD, E);
        for (int k = 0; k < E; k++) x[k] += t0[k];
        ref_rms(t0, x, pn, E, eps);
        ref_mv(g, wg, t0, E, FF);
        ref_mv(u, wu, t0, E, FF);
        for (int k = 0; k < FF; k++) g[k] = g[k] / (1.0 + exp(-g[k])) * u[k];
        ref_mv(t0, wd, g, FF, E);
        for (int k = 0; k < E; k++) x[k] += t0[k];
        ref_rms(t0, x, shn, E, eps);
        ref_mv(logits + (size_t)i * NV, emb, t0, E, NV); /* tied output */
    }
}

void test_qwen35_mtp_head(void) {
    rp_model *m = load_tiny();
    REQUIRE(m, "load");
    REQUIRE(rp_qwen35_has_mtp(m), "qwen35-tiny has a NextN head");
    enum { N = 24, E = 256, NV = 512 };
    rp_context *c;
    REQUIRE(open_ctx(m, NULL, NULL, 64, 64, 2, true, &c), "ctx");
    int32_t toks[N + 1];
    make_tokens(toks, N + 1, 4);
    int8_t all[N];
    memset(all, 1, sizeof all);
    rp_batch b = {.n_tokens = N, .token = toks, .logits = all};
    REQUIRE(rp_decode(c, &b) == RP_OK, "%s", rp_last_error());
    static float hid[N * E], hnext[N * E], la[N * NV], lb[N * NV], lc[N * NV];
    for (int i = 0; i < N; i++) memcpy(hid + (size_t)i * E, rp_get_hidden(c, i), E * sizeof(float));
    int32_t pos[N];
    for (int i = 0; i < N; i++) pos[i] = i;

    /* row i: the trunk's hidden state at i with the token at i+1 */
    rp_qwen35_mtp *h1, *h2;
    REQUIRE(rp_qwen35_mtp_new(c, &h1) == RP_OK && rp_qwen35_mtp_new(c, &h2) == RP_OK, "%s",
            rp_last_error());
    CHECK(rp_qwen35_mtp_state_bytes(h1) == 2ull * 2 * 64 * 64 * 4 * 2, "head KV bytes %llu",
          (unsigned long long)rp_qwen35_mtp_state_bytes(h1));
    rp_qwen35_mtp_batch mb = {.n = N,
                              .token = toks + 1,
                              .hidden = hid,
                              .hidden_raw = true,
                              .pos = pos,
                              .logits = la,
                              .hidden_out = hnext};
    REQUIRE(rp_qwen35_mtp_decode(h1, &mb) == RP_OK, "%s", rp_last_error());
    CHECK(rp_qwen35_mtp_seq_len(h1, 0) == N, "head length %d", rp_qwen35_mtp_seq_len(h1, 0));
    for (int i = 0; i < N; i++) { /* row by row, on sequence 1 */
        int32_t s1 = 1;
        rp_qwen35_mtp_batch one = {.n = 1,
                                   .token = toks + 1 + i,
                                   .hidden = hid + (size_t)i * E,
                                   .hidden_raw = true,
                                   .pos = pos + i,
                                   .seq = &s1,
                                   .logits = lb + (size_t)i * NV};
        REQUIRE(rp_qwen35_mtp_decode(h2, &one) == RP_OK, "%s", rp_last_error());
    }
    CHECK(test_max_abs_diff(la, lb, (size_t)N * NV) <= 1e-5,
          "head batch vs row by row: max |delta| %.3g", test_max_abs_diff(la, lb, (size_t)N * NV));
    /* against a plain double-precision reference of the block */
    static double ref[N * NV];
    ref_mtp(m, hid, toks + 1, N, ref);
    double worst = 0;
    for (size_t i = 0; i < (size_t)N * NV; i++) worst = fmax(worst, fabs(ref[i] - la[i]));
    CHECK(worst <= 1e-3, "head vs double-precision reference: max |delta| %.3g", worst);
    printf("     MTP head vs reference: max|d| %.2e\n", worst);

    /* hidden_raw = false takes rows already normed by output_norm */
    rp_qwen35_mtp_free(h2);
    REQUIRE(rp_qwen35_mtp_new(c, &h2) == RP_OK, "%s", rp_last_error());
    static float normed[N * E];
    rp_rmsnorm(normed, hid, m->output_norm->data, E, N, m->hp.eps);
    mb.hidden = normed;
    mb.hidden_raw = false;
    mb.logits = lc;
    mb.hidden_out = NULL;
    REQUIRE(rp_qwen35_mtp_decode(h2, &mb) == RP_OK, "%s", rp_last_error());
    CHECK(!memcmp(la, lc, sizeof la), "pre-normed rows differ from raw rows normed by the head");

    /* positions must continue; truncation rolls the head back */
    int32_t bad = 3;
    rp_qwen35_mtp_batch gap = {
        .n = 1, .token = toks, .hidden = hid, .hidden_raw = true, .pos = &bad};
    CHECK(rp_qwen35_mtp_decode(h1, &gap) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "expected 24"),
          "%s", rp_last_error());
    /* (two rows again, as a batch: an F32 cache's one-token decode sums V in
     * llama.cpp's one-token order, a batch in its batch order) */
    REQUIRE(rp_qwen35_mtp_truncate(h1, 0, N - 2) == RP_OK, "%s", rp_last_error());
    float again[2 * NV];
    rp_qwen35_mtp_batch last = {.n = 2,
                                .token = toks + N - 1,
                                .hidden = hid + (size_t)(N - 2) * E,
                                .hidden_raw = true,
                                .pos = pos + N - 2,
                                .logits = again};
    REQUIRE(rp_qwen35_mtp_decode(h1, &last) == RP_OK, "%s", rp_last_error());
    CHECK(!memcmp(again, la + (size_t)(N - 2) * NV, sizeof again),
          "after truncation the last rows differ");
    /* the head's own output feeds the next draft step */
    float chain[NV];
    int32_t pn = N;
    rp_qwen35_mtp_batch next = {.n = 1,
                                .token = toks + N,
                                .hidden = hnext + (size_t)(N - 1) * E,
                                .hidden_raw = false,
                                .pos = &pn,
                                .logits = chain};
    REQUIRE(rp_qwen35_mtp_decode(h1, &next) == RP_OK, "%s", rp_last_error());
    bool finite = true;
    for (int i = 0; i < NV; i++) finite &= isfinite(chain[i]) != 0;
    CHECK(finite, "chained draft step gives non-finite logits");
    rp_qwen35_mtp_free(h1);
    rp_qwen35_mtp_free(h2);
    rp_context_free(c);
    rp_model_free(m);
}

/* ---- files ------------------------------------------------------------------ */

typedef struct variant {
    const char *key; /* metadata key to set (u32 scalar, or u32 array when arr) */
    uint32_t u;
    const uint32_t *arr;
    int n_arr;
    int arr_type;       /* element type of arr (RP_GGUF_UINT32 default) */
    const char *drop;   /* tensor left out */
    const char *remove; /* metadata key left out */
    const char *to_f16; /* 2-D F32 tensor stored as F16 */
    bool f16_values;    /* keep it F32, holding the values F16 rounding gives */
} variant;

/* A copy of qwen35-tiny with one change, in the test's scratch folder. */
static const char *write_variant(const char *name, const variant *v) {
    rp_gguf *g;
    if (rp_gguf_open(test_shared(Q35), &g)) return NULL;
    rp_gguf_writer *w = rp_gguf_writer_new();
    rp_status s = rp_gguf_w_copy_kv(w, g);
    uint16_t *half = NULL;
    if (!s && v->key && v->arr)
        s = rp_gguf_w_set_arr(w, v->key, v->arr_type ? v->arr_type : RP_GGUF_UINT32, v->arr,
                              (uint64_t)v->n_arr);
    else if (!s && v->key)
        s = rp_gguf_w_set_u32(w, v->key, v->u);
    if (!s && v->remove && !rp_gguf_w_remove(w, v->remove))
        s = RP_ERR_INVALID_ARG; /* no such key */
    for (uint64_t i = 0; !s && i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        if (v->drop && !strcmp(t->name, v->drop)) continue;
        if (v->to_f16 && !strcmp(t->name, v->to_f16)) {
            const size_t n = (size_t)(t->ne[0] * t->ne[1]);
            half = malloc(n * sizeof(float));
            for (size_t k = 0; k < n; k++) {
                const uint16_t h = rp_fp32_to_fp16(((const float *)t->data)[k]);
                if (v->f16_values)
                    ((float *)half)[k] = rp_fp16_to_fp32(h);
                else
                    half[k] = h;
            }
            s = rp_gguf_w_add_tensor(w, t->name, v->f16_values ? RP_TYPE_F32 : RP_TYPE_F16,
                                     t->n_dims, t->ne, half);
            continue;
        }
        s = rp_gguf_w_add_tensor(w, t->name, (int)t->type, t->n_dims, t->ne, t->data);
    }
    const char *path = test_tmp(name);
    if (!s) s = rp_gguf_w_write(w, path, NULL, NULL);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
    free(half);
    return s ? NULL : path;
}

static void expect_refused(const char *name, const variant *v, const char *msg) {
    const char *path = write_variant(name, v);
    REQUIRE(path, "%s: could not write the variant", name);
    rp_model *m = NULL;
    rp_status s = rp_model_load(path, NULL, &m);
    CHECK(s != RP_OK && !m && strstr(rp_last_error(), msg),
          "%s: status %d, message '%s' (want '%s')", name, s, rp_last_error(), msg);
    rp_model_free(m);
}

/* Last-row logits of a fixed prompt. */
static bool tail_logits(const char *path, float *out) {
    rp_model *m;
    rp_context *c;
    if (!test_open(path, NULL, 64, &m, &c)) return false;
    int32_t t[16];
    make_tokens(t, 16, 5);
    rp_batch b = {.n_tokens = 16, .token = t};
    bool ok = rp_decode(c, &b) == RP_OK;
    if (ok) memcpy(out, rp_get_logits(c, 15), 512 * sizeof(float));
    rp_context_free(c);
    rp_model_free(m);
    return ok;
}

void test_qwen35_files(void) {
    expect_refused("inner.gguf", &(variant){.key = "qwen35.ssm.inner_size", .u = 100},
                   "ssm.inner_size 100");
    expect_refused("groups.gguf", &(variant){.key = "qwen35.ssm.group_count", .u = 3},
                   "not a multiple");
    expect_refused("state.gguf", &(variant){.key = "qwen35.ssm.state_size", .u = 5000},
                   "ssm.state_size");
    expect_refused("noa.gguf", &(variant){.drop = "blk.1.ssm_a"}, "missing tensor 'blk.1.ssm_a'");
    expect_refused("nohead.gguf", &(variant){.drop = "blk.8.nextn.eh_proj.weight"},
                   "blk.8.nextn.eh_proj.weight");
    const uint32_t five[5] = {1, 1, 1, 0, 1};
    expect_refused("rl5.gguf",
                   &(variant){.key = "qwen35.attention.recurrent_layers", .arr = five, .n_arr = 5},
                   "has 5 entries");
    const uint32_t head_rec[9] = {1, 1, 1, 0, 1, 1, 1, 0, 1};
    expect_refused(
        "rlhead.gguf",
        &(variant){.key = "qwen35.attention.recurrent_layers", .arr = head_rec, .n_arr = 9},
        "NextN/MTP head layer");
    /* an explicit array that makes layer 2 attention: its attention tensors are missing */
    const uint32_t l2[9] = {1, 1, 0, 0, 1, 1, 1, 0, 0};
    expect_refused("rl2.gguf",
                   &(variant){.key = "qwen35.attention.recurrent_layers", .arr = l2, .n_arr = 9},
                   "missing tensor 'blk.2.attn_q.weight'");
    const int32_t sec[4] = {0, 0, 0, 5};
    expect_refused("sec.gguf",
                   &(variant){.key = "qwen35.rope.dimension_sections",
                              .arr = (const uint32_t *)sec,
                              .n_arr = 4,
                              .arr_type = RP_GGUF_INT32},
                   "dimension_sections");

    /* the explicit array equal to the interval pattern (any integer or bool
     * element type) runs the same bits */
    float base[512], got[512];
    REQUIRE(tail_logits(test_shared(Q35), base), "original");
    const uint32_t same[9] = {1, 1, 1, 0, 1, 1, 1, 0, 0};
    const char *p = write_variant(
        "rl.gguf", &(variant){.key = "qwen35.attention.recurrent_layers", .arr = same, .n_arr = 9});
    REQUIRE(p && tail_logits(p, got), "explicit recurrent_layers");
    CHECK(!memcmp(base, got, sizeof base), "explicit recurrent_layers changes the logits");
    const int8_t same_b[9] = {1, 1, 1, 0, 1, 1, 1, 0, 0};
    p = write_variant("rlb.gguf", &(variant){.key = "qwen35.attention.recurrent_layers",
                                             .arr = (const uint32_t *)same_b,
                                             .n_arr = 9,
                                             .arr_type = RP_GGUF_BOOL});
    REQUIRE(p && tail_logits(p, got), "bool recurrent_layers");
    CHECK(!memcmp(base, got, sizeof base), "bool recurrent_layers changes the logits");
    /* without rope sections every rotary pair takes the position, as [3, 3, 2, 0] does */
    p = write_variant("nosec.gguf", &(variant){.remove = "qwen35.rope.dimension_sections"});
    REQUIRE(p && tail_logits(p, got), "no rope sections");
    CHECK(!memcmp(base, got, sizeof base), "absent rope sections change the logits");
    /* a conv kernel stored as F16 is read as exactly the floats it holds */
    p = write_variant("convf16.gguf", &(variant){.to_f16 = "blk.0.ssm_conv1d.weight"});
    REQUIRE(p && tail_logits(p, got), "F16 conv kernel");
    CHECK(memcmp(base, got, sizeof base), "F16 conv kernel: no change at all");
    p = write_variant("convr.gguf",
                      &(variant){.to_f16 = "blk.0.ssm_conv1d.weight", .f16_values = true});
    REQUIRE(p && tail_logits(p, base), "F32 conv kernel with F16 values");
    CHECK(!memcmp(base, got, sizeof base),
          "F16 conv kernel differs from its values in F32: max |delta| %.3g",
          test_max_abs_diff(base, got, 512));
}

/* A synthesized Qwen3.5-shaped model at Q8_0: layer kinds from the interval,
 * the head after the trunk, prompt in one batch == token by token, the head
 * runs. */
void test_qwen35_synth(void) {
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = "qwen35";
    sp.n_embd = 128;
    sp.n_layer = 6;
    sp.n_head = 2;
    sp.n_head_kv = 1;
    sp.head_dim = 64;
    sp.n_ff = 256;
    sp.n_vocab = 400;
    sp.type = RP_TYPE_Q8_0;
    sp.attn_interval = 3;
    const char *path = test_tmp("q35synth.gguf");
    REQUIRE(rp_synth_write(&sp, path, NULL, NULL) == RP_OK, "%s", rp_last_error());
    rp_model *m;
    REQUIRE(rp_model_load(path, NULL, &m) == RP_OK, "%s", rp_last_error());
    CHECK(rp_model_n_layer(m) == 6 && rp_model_n_layer_total(m) == 7, "trunk %d / total %d",
          rp_model_n_layer(m), rp_model_n_layer_total(m));
    for (int l = 0; l < 7; l++)
        CHECK((m->info[l].kind == RP_LAYER_RECURRENT) == (l < 6 && (l + 1) % 3 != 0),
              "layer %d kind %s", l, rp_layer_kind_name(m->info[l].kind));
    /* defaults: value heads 2 n_head, key heads alike, state min(128, head_dim), rotary a quarter
     */
    CHECK(m->info[0].rec_floats == (size_t)(3 * (2 * 4 * 64 + 4 * 64) + 4 * 64 * 64),
          "rec floats %zu", m->info[0].rec_floats);
    CHECK(m->hp.rope[0].n_rot == 16, "n_rot %d", m->hp.rope[0].n_rot);
    enum { N = 20 };
    int32_t t[N];
    make_tokens(t, N, 6);
    for (int i = 0; i < N; i++) t[i] %= 400;
    float *ref = malloc((size_t)N * 400 * sizeof(float)),
          *got = malloc((size_t)N * 400 * sizeof(float));
    rp_context *c1, *c2;
    REQUIRE(open_ctx(m, NULL, NULL, 64, 64, 1, true, &c1) &&
                open_ctx(m, NULL, NULL, 64, 64, 1, false, &c2),
            "ctx");
    REQUIRE(run_chunks(c1, t, N, N, ref) && run_chunks(c2, t, N, 1, got), "decode");
    CHECK(test_max_abs_diff(ref, got, (size_t)N * 400) <= 1e-5,
          "Q8_0 batch vs sequential: max |delta| %.3g",
          test_max_abs_diff(ref, got, (size_t)N * 400));
    rp_qwen35_mtp *h;
    REQUIRE(rp_qwen35_mtp_new(c1, &h) == RP_OK, "%s", rp_last_error());
    int32_t pos = 0;
    rp_qwen35_mtp_batch mb = {.n = 1,
                              .token = t + 1,
                              .hidden = rp_get_hidden(c1, 0),
                              .hidden_raw = true,
                              .pos = &pos,
                              .logits = got};
    CHECK(rp_qwen35_mtp_decode(h, &mb) == RP_OK && isfinite(got[0]),
          "head on the synthetic model: %s", rp_last_error());
    rp_qwen35_mtp_free(h);
    rp_context_free(c1);
    rp_context_free(c2);
    free(ref);
    free(got);
    rp_model_free(m);

    /* no head: the head cannot be made */
    sp.n_nextn = -1;
    REQUIRE(rp_synth_write(&sp, path, NULL, NULL) == RP_OK, "%s", rp_last_error());
    REQUIRE(rp_model_load(path, NULL, &m) == RP_OK, "%s", rp_last_error());
    REQUIRE(open_ctx(m, NULL, NULL, 16, 16, 1, false, &c1), "ctx");
    CHECK(rp_model_n_layer_total(m) == 6 && rp_qwen35_mtp_new(c1, &h) == RP_ERR_UNSUPPORTED &&
              strstr(rp_last_error(), "no NextN"),
          "%s", rp_last_error());
    rp_context_free(c1);
    rp_model_free(m);
}
