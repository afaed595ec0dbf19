/* Sampler stages on fixed distributions (each stage alone through the
 * `samplers` order), logit bias, log-probabilities, the grammar stage, and
 * grammar-constrained generation on stories260K whose output must parse as
 * JSON and validate against its schema. */
#include "test.h"

#include "base/util.h"
#include "reprise.h"
#include "text/vocab.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NV 8

static rp_sampler_params only(const char *samplers) {
    rp_sampler_params p = rp_sampler_default_params();
    p.temp = 1.0f;
    p.samplers = samplers;
    p.seed = 1234;
    return p;
}

/* logits = log(probs), the rest -inf-like (very negative) */
static void from_probs(float *logits, const double *p, int n) {
    for (int i = 0; i < NV; i++) logits[i] = i < n ? (float)log(p[i]) : -30.0f;
}

static bool near(double a, double b) {
    return fabs(a - b) < 1e-4;
}

void test_sampler_typical_p(void) {
    static const double p[] = {0.4, 0.25, 0.15, 0.1, 0.06, 0.04};
    float l[NV], pr[NV];
    from_probs(l, p, 6);
    rp_sampler_params sp = only("typ_p;temperature");
    sp.typical_p = 0.5f;
    rp_sampler *s = rp_sampler_new(&sp, NV);
    REQUIRE(s, "%s", rp_last_error());
    rp_sampler_probs(s, l, pr);
    /* entropy 1.525: surprise closest to it: 1 (0.139), 2 (0.372), 0 (0.609): mass 0.8 > 0.5 */
    CHECK(near(pr[0], 0.5) && near(pr[1], 0.3125) && near(pr[2], 0.1875), "kept %g %g %g", pr[0],
          pr[1], pr[2]);
    CHECK(pr[3] == 0 && pr[4] == 0 && pr[5] == 0, "dropped");
    rp_sampler_free(s);
}

void test_sampler_top_n_sigma(void) {
    float l[NV] = {10, 9, 8, 0, 0, 0, -INFINITY, -INFINITY}, pr[NV];
    rp_sampler_params sp = only("top_n_sigma;temperature");
    sp.top_n_sigma = 1.0f; /* mean 4.5, sigma 4.54 (finite logits): keep >= 5.46 */
    rp_sampler *s = rp_sampler_new(&sp, NV);
    rp_sampler_probs(s, l, pr);
    double z = exp(10) + exp(9) + exp(8);
    CHECK(near(pr[0], exp(10) / z) && near(pr[2], exp(8) / z) && pr[3] == 0, "n=1: %g %g %g", pr[0],
          pr[2], pr[3]);
    rp_sampler_free(s);
    sp.top_n_sigma = 0.2f; /* keep >= 9.09 */
    s = rp_sampler_new(&sp, NV);
    rp_sampler_probs(s, l, pr);
    CHECK(pr[0] == 1.0f && pr[1] == 0, "n=0.2: %g %g", pr[0], pr[1]);
    rp_sampler_free(s);
}

void test_sampler_xtc(void) {
    static const double p[] = {0.4, 0.3, 0.2, 0.1};
    float l[NV], pr[NV];
    from_probs(l, p, 4);
    rp_sampler_params sp = only("xtc;temperature");
    sp.xtc_probability = 1.0f;
    sp.xtc_threshold = 0.25f; /* 0 and 1 are above: all but the least likely of them go */
    rp_sampler *s = rp_sampler_new(&sp, NV);
    rp_sampler_probs(s, l, pr);
    CHECK(pr[0] == 0 && near(pr[1], 0.5) && near(pr[2], 1.0 / 3) && near(pr[3], 1.0 / 6),
          "%g %g %g %g", pr[0], pr[1], pr[2], pr[3]);
    rp_sampler_free(s);
    sp.xtc_threshold = 0.45f; /* only one above: nothing dropped */
    s = rp_sampler_new(&sp, NV);
    rp_sampler_probs(s, l, pr);
    CHECK(near(pr[0], 0.4), "one above the threshold: %g", pr[0]);
    rp_sampler_free(s);
    sp.xtc_probability = 0.0f; /* off */
    sp.xtc_threshold = 0.25f;
    s = rp_sampler_new(&sp, NV);
    rp_sampler_probs(s, l, pr);
    CHECK(near(pr[0], 0.4), "off: %g", pr[0]);
    rp_sampler_free(s);
}

static rp_sampler *dry_sampler(const int32_t *hist, int n, float mult) {
    rp_sampler_params sp = only("dry;temperature");
    sp.dry_multiplier = mult;
    rp_sampler *s = rp_sampler_new(&sp, NV);
    for (int i = 0; s && i < n; i++) rp_sampler_accept(s, hist[i]);
    return s;
}

void test_sampler_dry(void) {
    float l[NV] = {0}, pr[NV];
    /* 1 2 3 1 2: a 3 would extend the repeat "1 2" (length 2 = allowed): penalty 0.8 * 1.75^0 */
    static const int32_t h1[] = {1, 2, 3, 1, 2};
    rp_sampler *s = dry_sampler(h1, 5, 0.8f);
    REQUIRE(s, "%s", rp_last_error());
    rp_sampler_probs(s, l, pr);
    CHECK(near(pr[3] / pr[0], exp(-0.8)), "ratio %g", pr[3] / pr[0]);
    CHECK(near(pr[1], pr[0]) && near(pr[2], pr[0]), "others untouched");
    rp_sampler_free(s);
    /* 1 2 3 4 1 2 3: a 4 extends "1 2 3": 0.8 * 1.75^1 */
    static const int32_t h2[] = {1, 2, 3, 4, 1, 2, 3};
    s = dry_sampler(h2, 7, 0.8f);
    rp_sampler_probs(s, l, pr);
    CHECK(near(pr[4] / pr[0], exp(-0.8 * 1.75)), "ratio %g", pr[4] / pr[0]);
    rp_sampler_free(s);
    /* a single earlier token is below allowed_length: no penalty */
    static const int32_t h3[] = {1, 2, 3, 2};
    s = dry_sampler(h3, 4, 0.8f);
    rp_sampler_probs(s, l, pr);
    CHECK(near(pr[3], pr[0]), "no penalty: %g %g", pr[3], pr[0]);
    rp_sampler_free(s);
    /* sequence breakers (from a vocabulary): a breaker ends a repeat */
    rp_model *m;
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    REQUIRE(rp_model_load(test_shared("models/stories260K.gguf"), &mp, &m) == RP_OK, "%s",
            rp_last_error());
    const rp_vocab *v = rp_model_vocab(m);
    int32_t nv = rp_vocab_n_tokens(v);
    float *ll = calloc((size_t)nv, sizeof *ll), *pp = calloc((size_t)nv, sizeof *pp);
    REQUIRE(ll && pp, "alloc");
    int32_t *t;
    size_t n;
    REQUIRE(rp_tokenize(v, "a b c a b", 9, false, false, &t, &n) == RP_OK && n >= 5, "tokenize");
    rp_sampler_params sp = only("dry;temperature");
    sp.dry_multiplier = 0.8f;
    for (int with_breaker = 0; with_breaker < 2; with_breaker++) {
        s = rp_sampler_new(&sp, nv);
        char piece[64];
        int k = rp_token_to_piece(v, t[n - 1], false, piece,
                                  sizeof piece); /* the last token: a breaker */
        piece[k > 0 ? k : 0] = 0;
        const char *br[] = {piece};
        CHECK(rp_sampler_set_vocab(s, v, with_breaker ? br : (const char *const[]){"#"}, 1) ==
                  RP_OK,
              "%s", rp_last_error());
        for (size_t i = 0; i < n; i++) rp_sampler_accept(s, t[i]);
        rp_sampler_probs(s, ll, pp);
        int32_t next = t[2]; /* what followed "a b" the first time */
        double ratio = pp[next] / pp[next == 0 ? 1 : 0];
        CHECK(with_breaker ? near(ratio, 1.0) : ratio < 0.9, "breaker %d: ratio %g", with_breaker,
              ratio);
        rp_sampler_free(s);
    }
    free(t);
    free(ll);
    free(pp);
    rp_model_free(m);
}

void test_sampler_mirostat(void) {
    static const double p[] = {0.5, 0.3, 0.15, 0.05};
    float l[NV];
    from_probs(l, p, 4);
    rp_sampler_params sp = rp_sampler_default_params();
    sp.temp = 1.0f;
    sp.mirostat = 2;
    sp.mirostat_tau = 1.0f; /* mu = 2 bits: only tokens with p >= 0.25 on the first draw */
    int seen[NV] = {0};
    for (uint64_t seed = 1; seed <= 200; seed++) {
        sp.seed = seed;
        rp_sampler *s = rp_sampler_new(&sp, NV);
        REQUIRE(s, "%s", rp_last_error());
        int32_t tok = rp_sampler_sample(s, l);
        if (tok >= 0) seen[tok]++;
        rp_sampler_free(s);
    }
    CHECK(seen[0] && seen[1] && !seen[2] && !seen[3], "mirostat 2 first draws: %d %d %d %d",
          seen[0], seen[1], seen[2], seen[3]);
    /* v1: deterministic for a seed, and from the candidates */
    sp.mirostat = 1;
    sp.mirostat_tau = 5.0f;
    sp.seed = 7;
    rp_sampler *a = rp_sampler_new(&sp, NV), *b = rp_sampler_new(&sp, NV);
    for (int i = 0; i < 20; i++) {
        int32_t x = rp_sampler_sample(a, l), y = rp_sampler_sample(b, l);
        CHECK(x == y && x >= 0 && x < 4, "mirostat 1 draw %d: %d %d", i, x, y);
    }
    rp_sampler_free(a);
    rp_sampler_free(b);
    sp.mirostat = 3;
    CHECK(!rp_sampler_new(&sp, NV) && strstr(rp_last_error(), "mirostat"), "%s", rp_last_error());
}

void test_sampler_order_and_bias(void) {
    float l[NV] = {1, 5, 3, 2, 0, 0, 0, 0};
    rp_sampler_params sp = only("top_k;temperature");
    sp.top_k = 1;
    rp_sampler *s = rp_sampler_new(&sp, NV);
    for (int i = 0; i < 10; i++) CHECK(rp_sampler_sample(s, l) == 1, "top_k 1");
    rp_sampler_free(s);
    sp.samplers = "kt"; /* llama.cpp's letters */
    s = rp_sampler_new(&sp, NV);
    CHECK(s && rp_sampler_sample(s, l) == 1, "letters");
    rp_sampler_free(s);
    sp.samplers = "Top-K, temp";
    s = rp_sampler_new(&sp, NV);
    CHECK(s && rp_sampler_sample(s, l) == 1, "aliases: %s", rp_last_error());
    rp_sampler_free(s);
    sp.samplers = "top_k;top_q";
    CHECK(!rp_sampler_new(&sp, NV) && strstr(rp_last_error(), "unknown stage 'top_q'"), "%s",
          rp_last_error());
    /* logit bias: -inf bans (ignore_eos), + moves */
    rp_sampler_params g = rp_sampler_default_params();
    g.temp = 0;
    s = rp_sampler_new(&g, NV);
    int32_t tok[2] = {1, 3};
    float bias[2] = {-INFINITY, 2.5f};
    CHECK(rp_sampler_set_logit_bias(s, tok, bias, 2) == RP_OK, "%s", rp_last_error());
    CHECK(rp_sampler_sample(s, l) == 3, "biased greedy");
    int32_t bad = NV;
    CHECK(rp_sampler_set_logit_bias(s, &bad, bias, 1) == RP_ERR_INVALID_ARG, "out of range");
    CHECK(rp_sampler_set_logit_bias(s, NULL, NULL, 0) == RP_OK && rp_sampler_sample(s, l) == 1,
          "cleared");
    rp_sampler_free(s);
}

void test_sampler_logprobs(void) {
    float l[NV] = {1, 2, 3, -1, -1, -1, -1, -1};
    double lse = 0;
    for (int i = 0; i < NV; i++) lse += exp(l[i]);
    lse = log(lse);
    rp_token_logprob top[4];
    float lp;
    int k = rp_logits_logprobs(l, NV, 1, &lp, top, 3);
    CHECK(k == 3 && top[0].token == 2 && top[1].token == 1 && top[2].token == 0, "order");
    CHECK(near(lp, 2 - lse) && near(top[0].logprob, 3 - lse), "values %g %g", lp, top[0].logprob);
    /* post-sampling: top-2 renormalized */
    rp_sampler_params sp = only("top_k;temperature");
    sp.top_k = 2;
    rp_sampler *s = rp_sampler_new(&sp, NV);
    int32_t t = rp_sampler_sample(s, l);
    k = rp_sampler_last_logprobs(s, t, &lp, top, 4);
    double z = log(exp(3) + exp(2));
    CHECK(k == 2 && top[0].token == 2 && near(top[0].logprob, 3 - z) && near(top[1].logprob, 2 - z),
          "post %d", k);
    CHECK(near(lp, l[t] - z), "chosen %g", lp);
    CHECK(rp_sampler_last_logprobs(s, 5, &lp, NULL, 0) == 0 && lp == -INFINITY,
          "outside the kept set");
    rp_sampler_free(s);
    /* greedy: the argmax, certain */
    rp_sampler_params g = rp_sampler_default_params();
    g.temp = 0;
    s = rp_sampler_new(&g, NV);
    t = rp_sampler_sample(s, l);
    k = rp_sampler_last_logprobs(s, t, &lp, top, 4);
    CHECK(t == 2 && k == 1 && lp == 0 && top[0].token == 2, "greedy %d %d %g", t, k, lp);
    rp_sampler_free(s);
}

/* ---- grammars in the sampler -------------------------------------------------------- */

typedef struct gen {
    rp_model *m;
    rp_context *ctx;
    rp_grammar_vocab *gv;
} gen;

static bool open_stories(gen *g, uint32_t n_ctx) {
    memset(g, 0, sizeof *g);
    if (rp_model_load(test_shared("models/stories260K.gguf"), NULL, &g->m)) return false;
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = 1;
    return !rp_context_new(g->m, &cp, &g->ctx) &&
           !rp_grammar_vocab_new(rp_model_vocab(g->m), &g->gv);
}

static void close_stories(gen *g) {
    rp_grammar_vocab_free(g->gv);
    rp_context_free(g->ctx);
    rp_model_free(g->m);
}

/* Generates with the grammar from prompt; returns the text (malloc'ed) or NULL. */
static char *generate(gen *g, rp_grammar *gr, const rp_sampler_params *sp, const char *prompt,
                      int max_tokens) {
    const rp_vocab *v = rp_model_vocab(g->m);
    int32_t *toks;
    size_t n;
    if (rp_tokenize(v, prompt, strlen(prompt), true, false, &toks, &n)) return NULL;
    rp_kv_clear(g->ctx);
    rp_sampler *s = rp_sampler_new(sp, rp_n_vocab(g->ctx));
    rp_sampler_set_grammar(s, gr);
    for (size_t i = 0; i < n; i++) rp_sampler_accept(s, toks[i]);
    rp_batch b = {.n_tokens = (int32_t)n, .token = toks};
    rp_buf out = {0};
    bool ok = rp_decode(g->ctx, &b) == RP_OK, ended = false;
    for (int i = 0; ok && i < max_tokens; i++) {
        int32_t t = rp_sampler_sample(s, rp_get_logits(g->ctx, i ? 0 : (int)n - 1));
        if (t < 0 || rp_sampler_accept_sampled(s, t)) {
            ok = false;
            break;
        }
        if (rp_vocab_is_eog(v, t)) {
            ended = true;
            break;
        }
        char piece[64];
        int k = rp_token_to_piece(v, t, false, piece, sizeof piece);
        if (k > 0) rp_buf_append(&out, piece, (size_t)k);
        rp_batch one = {.n_tokens = 1, .token = &t};
        ok = rp_decode(g->ctx, &one) == RP_OK;
    }
    free(toks);
    rp_sampler_free(s);
    if (!ok || !ended) {
        CHECK(false, "generation %s: %s", ended ? "failed" : "did not end", rp_last_error());
        rp_buf_free(&out);
        return NULL;
    }
    rp_buf_append(&out, "", 1);
    return out.data;
}

/* The schema of the constrained-generation test, checked by hand with jansson. */
static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},"
    "\"mood\":{\"enum\":[\"happy\",\"sad\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":6},\"maxItems\":3}},"
    "\"required\":[\"name\",\"age\",\"mood\"]}";

static bool validates(const char *text, char *why, size_t size) {
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) return snprintf(why, size, "not JSON: %.100s", e.text), false;
    bool ok = json_is_object(j);
    const json_t *name = json_object_get(j, "name"), *age = json_object_get(j, "age"),
                 *mood = json_object_get(j, "mood");
    const json_t *tags = json_object_get(j, "tags");
    ok = ok && json_is_string(name) && json_string_length(name) >= 1;
    ok =
        ok && json_is_integer(age) && json_integer_value(age) >= 0 && json_integer_value(age) <= 99;
    ok = ok && json_is_string(mood) &&
         (!strcmp(json_string_value(mood), "happy") || !strcmp(json_string_value(mood), "sad"));
    ok = ok && (!tags || (json_is_array(tags) && json_array_size(tags) <= 3));
    size_t n_keys = 3 + (tags != NULL);
    ok = ok && json_object_size(j) == n_keys;
    if (!ok) snprintf(why, size, "does not validate");
    json_decref(j);
    return ok;
}

void test_sampler_grammar_generation(void) {
    gen g;
    REQUIRE(open_stories(&g, 512), "stories260K: %s", rp_last_error());
    char *gbnf = NULL;
    REQUIRE(rp_json_schema_to_grammar(SCHEMA, &gbnf) == RP_OK, "%s", rp_last_error());
    int n_ok = 0, n = 0;
    for (int mode = 0; mode < 3; mode++) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            rp_grammar *gr;
            REQUIRE(rp_grammar_new(g.gv, gbnf, NULL, &gr) == RP_OK, "%s", rp_last_error());
            rp_sampler_params sp = rp_sampler_default_params();
            sp.seed = seed;
            sp.temp = mode == 2 ? 0.0f : 0.9f; /* mode 2: greedy */
            sp.grammar_first = mode == 1;
            char *out = generate(&g, gr, &sp, "Once upon a time", 400);
            n++;
            if (out) {
                char why[128];
                bool v = validates(out, why, sizeof why);
                CHECK(v, "mode %d seed %llu: %s: %s", mode, (unsigned long long)seed, why, out);
                n_ok += v;
            }
            free(out);
            rp_grammar_free(gr);
            if (mode == 2) break; /* greedy: one seed is enough */
        }
    }
    CHECK(n_ok == n, "%d of %d outputs validate", n_ok, n);
    /* the grammar stage in rp_sampler_probs: refused tokens get no mass */
    rp_grammar *gr;
    REQUIRE(rp_grammar_new(g.gv, "root ::= \"{\" [a-z]+", NULL, &gr) == RP_OK, "%s",
            rp_last_error());
    rp_sampler_params sp = rp_sampler_default_params();
    sp.temp = 1.0f;
    rp_sampler *s = rp_sampler_new(&sp, rp_n_vocab(g.ctx));
    rp_sampler_set_grammar(s, gr);
    int32_t nv = rp_n_vocab(g.ctx);
    float *l = calloc((size_t)nv, sizeof *l), *pr = calloc((size_t)nv, sizeof *pr);
    REQUIRE(l && pr, "alloc");
    rp_sampler_probs(s, l, pr);
    for (int32_t t = 0; t < nv; t++)
        if (pr[t] > 0) CHECK(rp_grammar_allows(gr, t), "token %d has mass but is refused", t);
    /* strict UTF-8: '{' spelled overlong from byte tokens (C1 BB) is no '{' */
    int32_t c1 = rp_vocab_find(rp_model_vocab(g.m), "<0xC1>", 6),
            e0 = rp_vocab_find(rp_model_vocab(g.m), "<0xE0>", 6);
    REQUIRE(c1 >= 0 && e0 >= 0, "byte tokens");
    CHECK(!rp_grammar_allows(gr, c1) && !rp_grammar_allows(gr, e0),
          "a lead byte of an overlong '{' is allowed");
    int32_t t = rp_sampler_sample(s, l);
    CHECK(t >= 0 && rp_grammar_allows(gr, t), "sampled %d", t);
    CHECK(rp_sampler_accept_sampled(s, t) == RP_OK, "%s", rp_last_error());
    rp_sampler_free(s);
    free(l);
    free(pr);
    rp_grammar_free(gr);
    free(gbnf);
    close_stories(&g);
}
