/* LoRA adapters, per-step deltas and PEFT layer_replication against PEFT +
 * transformers (tests/fixtures/lora/, made by
 * tests/reference/make_lora_fixtures.py over the tiny llama of
 * tests/fixtures/hf/llama).
 *
 * The base is converted at F32 and every adapter at F32, so the tolerance is
 * the converter's F32 one (test_convert.c): max |d| <= 1e-4 and NMSE <= 1e-10
 * against the reference logits (measured: <= 1e-5, NMSE ~1e-12); an F16
 * adapter is held to the rounded-weight bound 4 u max|logit| (u = 2^-11,
 * max|logit| < 10 here) and NMSE <= 1e-5 (measured 5.5e-3, 7e-7). */
#include "convert/convert.h"
#include "core/plan.h"
#include "test.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define BASE "tests/fixtures/hf/llama"
#define LFIX "tests/fixtures/lora"

static rp_status convert(const char *dir, const char *lora, int outtype, const char *out) {
    rp_convert_params p = rp_convert_default_params();
    p.dir = dir;
    p.lora_dir = lora;
    p.outtype = outtype;
    rp_conv *cv;
    rp_status s = rp_conv_open(&p, &cv);
    if (s) return s;
    s = rp_conv_write(cv, out, NULL, NULL);
    rp_conv_free(cv);
    return s;
}

/* the converted base and adapters, made once */
static const char *g_base, *g_a, *g_b, *g_rep, *g_a16;

static bool setup(void) {
    if (g_base) return true;
    const char *base = test_tmp("lora-base.gguf"), *a = test_tmp("lora-a.gguf"),
               *b = test_tmp("lora-b.gguf"), *rep = test_tmp("lora-rep.gguf"),
               *a16 = test_tmp("lora-a16.gguf");
    static char pb[512], pa[512], pbb[512], pr[512], pa16[512];
    snprintf(pb, sizeof pb, "%s", base);
    snprintf(pa, sizeof pa, "%s", a);
    snprintf(pbb, sizeof pbb, "%s", b);
    snprintf(pr, sizeof pr, "%s", rep);
    snprintf(pa16, sizeof pa16, "%s", a16);
    rp_status s = convert(BASE, NULL, RP_TYPE_F32, pb);
    if (!s) s = convert(BASE, LFIX "/a", RP_TYPE_F32, pa);
    if (!s) s = convert(BASE, LFIX "/b", RP_TYPE_F32, pbb);
    if (!s) s = convert(BASE, LFIX "/rep", RP_TYPE_F32, pr);
    if (!s) s = convert(BASE, LFIX "/a", RP_TYPE_F16, pa16);
    CHECK(s == RP_OK, "convert: %s", rp_last_error());
    if (s) return false;
    g_base = pb, g_a = pa, g_b = pbb, g_rep = pr, g_a16 = pa16;
    return true;
}

typedef struct run_cfg {
    const char *repeat, *map;
    rp_lora_params lora[4];
    int n_lora;
} run_cfg;

/* All logits of the reference tokens, or NULL with *st set. */
static float *run(const run_cfg *rc, int *n_tok, int *n_vocab, rp_status *st) {
    int tok[64];
    *n_tok = test_read_ints(BASE "/ref/tokens.txt", 0, tok, 64);
    rp_model *m;
    if ((*st = rp_model_load(g_base, NULL, &m))) return NULL;
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.repeat_layers = rc->repeat;
    cp.layer_map = rc->map;
    cp.lora = rc->lora;
    cp.n_lora = rc->n_lora;
    rp_context *c;
    float *out = NULL;
    if (!(*st = rp_context_new(m, &cp, &c))) {
        int32_t t32[64];
        int8_t want[64];
        for (int i = 0; i < *n_tok; i++) t32[i] = tok[i], want[i] = 1;
        rp_batch b = {.n_tokens = *n_tok, .token = t32, .logits = want};
        if (!(*st = rp_decode(c, &b))) {
            *n_vocab = rp_n_vocab(c);
            size_t row = (size_t)*n_vocab;
            out = malloc((size_t)*n_tok * row * sizeof *out);
            for (int i = 0; out && i < *n_tok; i++)
                memcpy(out + (size_t)i * row, rp_get_logits(c, i), row * sizeof *out);
        }
        rp_context_free(c);
    }
    rp_model_free(m);
    return out;
}

/* rc's logits against ref/<ref>.f32; returns max |d| (INFINITY on failure). */
static double vs_ref_nmse(const char *what, const run_cfg *rc, const char *ref, double tol,
                          double nmse) {
    int n = 0, nv = 0;
    rp_status st;
    float *got = run(rc, &n, &nv, &st);
    CHECK(got != NULL, "%s: %s", what, rp_last_error());
    if (!got) return INFINITY;
    char p[256];
    snprintf(p, sizeof p, LFIX "/ref/%s.f32", ref);
    size_t len;
    float *want = test_read(p, &len);
    const size_t cnt = (size_t)n * (size_t)nv;
    CHECK(want && len == cnt * sizeof(float), "%s: %s has %zu bytes, want %zu", what, p, len,
          cnt * sizeof(float));
    double d = INFINITY, e = INFINITY;
    if (want && len == cnt * sizeof(float)) {
        d = test_max_abs_diff(want, got, cnt);
        e = test_nmse(want, got, cnt);
    }
    CHECK(d <= tol && e <= nmse, "%s: max|d| %.3g, NMSE %.3g vs %s (tolerance %g, %g)", what, d, e,
          ref, tol, nmse);
    printf("     %-34s max|d| %.2e  NMSE %.2e  vs %s\n", what, d, e, ref);
    free(want);
    free(got);
    return d;
}

static double vs_ref(const char *what, const run_cfg *rc, const char *ref, double tol) {
    return vs_ref_nmse(what, rc, ref, tol, 1e-10);
}

void test_lora_peft(void) {
    REQUIRE(setup(), "fixtures");
    run_cfg a = {.lora = {{g_a, 1.0f}}, .n_lora = 1};
    vs_ref("--lora a", &a, "a", 1e-4);
    run_cfg half = {.lora = {{g_a, 0.5f}}, .n_lora = 1};
    vs_ref("--lora-scaled a 0.5", &half, "a-half", 1e-4);
    run_cfg ab = {.lora = {{g_a, 1.0f}, {g_b, 1.0f}}, .n_lora = 2};
    vs_ref("--lora a --lora b (rslora)", &ab, "ab", 1e-4);
    run_cfg plan = {.repeat = "0,2", .lora = {{g_a, 1.0f}}, .n_lora = 1};
    vs_ref("--lora a --repeat-layers 0,2", &plan, "a-plan", 1e-4);
    run_cfg lcpp = {.lora = {{LFIX "/a-llamacpp.gguf", 1.0f}}, .n_lora = 1};
    vs_ref("llama.cpp's convert_lora_to_gguf", &lcpp, "a", 1e-4);
    /* F16 adapter: rounded weights, bound 4 u max|logit| (max|logit| < 10 here) */
    run_cfg a16 = {.lora = {{g_a16, 1.0f}}, .n_lora = 1};
    vs_ref_nmse("--lora a (f16 adapter)", &a16, "a", 4.0 / 2048 * 10, 1e-5);
    /* the deltas do something: the base alone is far from a's logits */
    size_t len;
    float *base = test_read(BASE "/ref/logits.f32", &len), *ra = test_read(LFIX "/ref/a.f32", &len);
    REQUIRE(base && ra, "refs");
    CHECK(test_max_abs_diff(base, ra, len / sizeof(float)) > 0.1, "adapter a changes the logits");
    free(base);
    free(ra);
}

void test_lora_steps(void) {
    REQUIRE(setup(), "fixtures");
    char map[1024];
    snprintf(map, sizeof map, "0,1,0@s=0.85@lora=%s,1@s=0.707", g_a);
    run_cfg st = {.map = map};
    vs_ref("per-step lora + residual scales", &st, "steps", 1e-4);
    /* the same through --repeat-layers: modifiers apply to the second pass */
    snprintf(map, sizeof map, "0,1@s=0.85@lora=%s", g_a);
    run_cfg rep = {.repeat = map};
    int n, nv;
    rp_status s;
    float *x = run(&rep, &n, &nv, &s);
    CHECK(x != NULL, "repeat with modifiers: %s", rp_last_error());
    free(x);
    /* @s=1 changes nothing, bit for bit */
    run_cfg one = {.map = "0,1@s=1"}, none = {.map = "0,1"};
    float *p1 = run(&one, &n, &nv, &s), *p0 = run(&none, &n, &nv, &s);
    REQUIRE(p1 && p0, "runs");
    CHECK(!memcmp(p1, p0, (size_t)n * (size_t)nv * sizeof(float)), "@s=1 is the plain plan");
    free(p1);
    free(p0);
}

void test_lora_replication(void) {
    REQUIRE(setup(), "fixtures");
    run_cfg rep = {.lora = {{g_rep, 1.0f}}, .n_lora = 1};
    vs_ref("PEFT layer_replication (its plan)", &rep, "rep", 1e-4);
    run_cfg same = {.map = "0,1,1", .lora = {{g_rep, 1.0f}}, .n_lora = 1};
    vs_ref("layer_replication, plan given", &same, "rep", 1e-4);
    run_cfg other = {.map = "0,1", .lora = {{g_rep, 1.0f}}, .n_lora = 1};
    int n, nv;
    rp_status s;
    float *x = run(&other, &n, &nv, &s);
    CHECK(!x && s == RP_ERR_PLAN && strstr(rp_last_error(), "layer_replication"),
          "another plan refused: %d %s", s, rp_last_error());
    free(x);
    /* memory: the adapter's pairs beyond the base, the base once */
    rp_model *m;
    REQUIRE(!rp_model_load(g_base, NULL, &m), "load");
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 16;
    cp.lora = rep.lora;
    cp.n_lora = 1;
    rp_context *c;
    REQUIRE(!rp_context_new(m, &cp, &c), "%s", rp_last_error());
    /* 3 steps x 7 pairs x r 4 x (n_in + n_out), F32 */
    const uint64_t want =
        3ull * 4 * 4 * ((64 + 64) + (64 + 32) * 2 + (16 * 4 + 64) + 2 * (64 + 88) + (88 + 64));
    CHECK(rp_context_adapter_bytes(c) == want, "adapter bytes %llu, want %llu",
          (unsigned long long)rp_context_adapter_bytes(c), (unsigned long long)want);
    char rep_txt[4096];
    rp_context_plan_report(c, rep_txt, sizeof rep_txt);
    CHECK(strstr(rep_txt, "layer_replication") && strstr(rep_txt, "0..1 | 1"), "report: %s",
          rep_txt);
    rp_context_free(c);
    rp_model_free(m);
}

static void refused(const run_cfg *rc, rp_status want, const char *needle) {
    int n, nv;
    rp_status s;
    float *x = run(rc, &n, &nv, &s);
    CHECK(!x && s == want && strstr(rp_last_error(), needle), "want %d '%s', got %d: %s", want,
          needle, s, rp_last_error());
    free(x);
}

void test_lora_refusals(void) {
    REQUIRE(setup(), "fixtures");
    run_cfg r1 = {.map = "0,1@x=2"};
    refused(&r1, RP_ERR_PLAN, "unknown step modifier");
    run_cfg r2 = {.map = "0,1@s=0"};
    refused(&r2, RP_ERR_PLAN, "residual scale");
    run_cfg r3 = {.repeat = "0,2@lora="};
    refused(&r3, RP_ERR_PLAN, "names no adapter");
    run_cfg r4 = {.map = "0@s=1@s=2,1"};
    refused(&r4, RP_ERR_PLAN, "two residual scales");
    run_cfg r5 = {.lora = {{g_base, 1.0f}}, .n_lora = 1};
    refused(&r5, RP_ERR_FORMAT, "not 'adapter'");
    run_cfg r6 = {.lora = {{"/nonexistent/x.gguf", 1.0f}}, .n_lora = 1};
    refused(&r6, RP_ERR_IO, "LoRA adapter");
    char map[600];
    snprintf(map, sizeof map, "0,1@lora=%s", g_rep);
    run_cfg r7 = {.map = map};
    refused(&r7, RP_ERR_PLAN, "give it with --lora");
    /* two layer_replication adapters: two plans */
    run_cfg r8 = {.lora = {{g_a, 1.0f}, {g_rep, 1.0f}, {g_rep, 1.0f}}, .n_lora = 3};
    refused(&r8, RP_ERR_PLAN, "second layer_replication");
}

/* The grammar alone: which steps carry which deltas. */
void test_lora_plan_grammar(void) {
    rp_plan *p = NULL;
    REQUIRE(!rp_plan_repeat("4,6@s=0.5@lora=x.gguf*2;9,10", 12, 12, &p), "%s", rp_last_error());
    CHECK(p->n_eff == 15 && p->has_deltas, "n_eff %d", p->n_eff);
    for (int e = 0; e < p->n_eff; e++) {
        const bool second = e == 6 || e == 7;
        CHECK(p->res_scale[e] == (second ? 0.5f : 1.0f), "step %d: residual %g", e,
              (double)p->res_scale[e]);
        CHECK(p->n_lora[e] == (second ? 1 : 0), "step %d: %d adapters", e, p->n_lora[e]);
    }
    CHECK(p->n_lora_path == 1 && !strcmp(p->lora_path[0], "x.gguf") &&
              p->lora_scale[6 * RP_PLAN_STEP_LORA] == 2.0f,
          "adapter x.gguf x2");
    char buf[512];
    rp_plan_format_deltas(p, buf, sizeof buf);
    CHECK(!strcmp(buf, "  step 6 (src 4, pass 2): residual x0.5, lora x.gguf x2\n"
                       "  step 7 (src 5, pass 2): residual x0.5, lora x.gguf x2\n"),
          "deltas: %s", buf);
    rp_plan_free(p);
    /* a map item's modifiers apply to each of its steps; paths are interned */
    REQUIRE(!rp_plan_map("0..2@lora=a@lora=b*0.5,1..2@lora=a", 4, 4, &p), "%s", rp_last_error());
    CHECK(p->n_eff == 5 && p->n_lora_path == 2 && p->n_lora[0] == 2 && p->n_lora[4] == 1 &&
              p->lora[4 * RP_PLAN_STEP_LORA] == 0 && p->lora_scale[RP_PLAN_STEP_LORA + 1] == 0.5f,
          "map deltas");
    rp_plan_free(p);
    /* without modifiers: no deltas */
    REQUIRE(!rp_plan_map("0..3,2..3", 4, 4, &p), "map");
    CHECK(!p->has_deltas, "no deltas");
    rp_plan_free(p);
    static const char *bad[] = {"0@s=",      "0@s=x", "0@s=17",
                                "0@lora=*2", "0@",    "0@lora=a@lora=b@lora=c@lora=d@lora=e",
                                "0..1@t=1"};
    for (size_t i = 0; i < RP_ARRAY_LEN(bad); i++) {
        rp_status s = rp_plan_map(bad[i], 4, 4, &p);
        CHECK(s == RP_ERR_PLAN && !p && strstr(rp_last_error(), "item 1"), "'%s': %d %s", bad[i], s,
              rp_last_error());
    }
}
