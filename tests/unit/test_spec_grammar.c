/* Speculative decoding under a grammar (rp_spec_seq_set_grammar): sampled
 * drafts and replacements never leave the grammar, the grammar is rolled
 * back over rejected drafts (a second grammar object fed the accepted tokens
 * accepts every one of them), and greedy output equals plain greedy decoding
 * with the same grammar. */
#include "reprise_tools.h"
#include "test.h"

#include <string.h>

#define STORIES "models/stories260K.gguf"
/* words of lowercase letters separated by single spaces: most tokens of the
 * vocabulary are refused somewhere, so drafts are often cut */
static const char g_words[] = "root ::= (\" \" [a-z]+)+";

static rp_context *gctx(const rp_model *m, int n_ctx) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_threads = 1;
    rp_context *c = NULL;
    if (rp_context_new(m, &cp, &c)) fprintf(stderr, "  %s\n", rp_last_error());
    return c;
}

/* n tokens with the spec (draft: the trunk's first layers), grammar g. */
static bool spec_run(rp_context *c, rp_grammar *g, const rp_sampler_params *sp,
                     const int32_t *prompt, int n_prompt, int n, int32_t *out,
                     rp_spec_stats *stats) {
    rp_spec_params p = rp_spec_default_params();
    p.draft_plan = "0..2";
    p.draft_max = 4;
    p.p_min = 0;
    rp_spec *s = NULL;
    bool ok = rp_spec_new(c, &p, &s) == RP_OK && rp_spec_seq_reset(s, 0, sp) == RP_OK &&
              rp_spec_seq_set_grammar(s, 0, g) == RP_OK &&
              rp_spec_seq_feed(s, 0, prompt, n_prompt) == RP_OK;
    int have = 0;
    while (ok && have < n) {
        int32_t step[RP_SPEC_DRAFT_MAX + 1];
        int k = 0;
        ok = rp_spec_step(s, 0, n - have, step, &k) == RP_OK;
        for (int i = 0; ok && i < k && have < n; i++) out[have++] = step[i];
    }
    if (!ok) fprintf(stderr, "  spec: %s\n", rp_last_error());
    if (s) *stats = rp_spec_get_stats(s, 0);
    rp_spec_free(s);
    return ok;
}

void test_spec_grammar(void) {
    rp_model *m = NULL;
    REQUIRE(rp_model_load(test_shared(STORIES), NULL, &m) == RP_OK, "load: %s", rp_last_error());
    const rp_vocab *v = rp_model_vocab(m);
    rp_grammar_vocab *gv = NULL;
    REQUIRE(rp_grammar_vocab_new(v, &gv) == RP_OK, "trie: %s", rp_last_error());
    const int32_t prompt[] = {1, 403, 407, 261, 378};
    enum { N = 48 };
    int32_t out[N], ref[N];
    /* sampled: every token the grammar's own check accepts, for several seeds */
    uint64_t drafted = 0, accepted = 0;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        rp_context *c = gctx(m, 256);
        rp_grammar *g = NULL, *check = NULL;
        REQUIRE(c && rp_grammar_new(gv, g_words, NULL, &g) == RP_OK &&
                    rp_grammar_new(gv, g_words, NULL, &check) == RP_OK,
                "setup");
        rp_sampler_params sp = rp_sampler_default_params();
        sp.temp = 1.0f;
        sp.seed = seed;
        rp_spec_stats st = {0};
        CHECK(spec_run(c, g, &sp, prompt, 5, N, out, &st), "seed %llu", (unsigned long long)seed);
        int bad = -1;
        for (int i = 0; i < N && bad < 0; i++)
            if (rp_grammar_accept(check, out[i]) != RP_OK) bad = i;
        CHECK(bad < 0, "seed %llu: token %d (id %d) leaves the grammar", (unsigned long long)seed,
              bad, bad >= 0 ? out[bad] : -1);
        drafted += st.drafted;
        accepted += st.accepted;
        rp_grammar_free(g);
        rp_grammar_free(check);
        rp_context_free(c);
    }
    CHECK(drafted > 0 && accepted < drafted,
          "drafts %llu, accepted %llu: rejections exercise the "
          "rollback",
          (unsigned long long)drafted, (unsigned long long)accepted);
    /* greedy: the plain sampler with the grammar gives the same tokens */
    rp_sampler_params gp = rp_sampler_default_params();
    gp.temp = 0;
    rp_context *c = gctx(m, 256);
    rp_grammar *g = NULL;
    REQUIRE(c && rp_grammar_new(gv, g_words, NULL, &g) == RP_OK, "setup");
    rp_sampler *smp = rp_sampler_new(&gp, rp_n_vocab(c));
    rp_sampler_set_grammar(smp, g);
    rp_batch b = {.n_tokens = 5, .token = prompt};
    REQUIRE(rp_decode(c, &b) == RP_OK, "decode");
    const float *lg = rp_get_logits(c, 4);
    for (int i = 0; i < N; i++) {
        ref[i] = rp_sampler_sample(smp, lg);
        REQUIRE(ref[i] >= 0 && rp_sampler_accept_sampled(smp, ref[i]) == RP_OK, "plain %d", i);
        rp_batch one = {.n_tokens = 1, .token = &ref[i]};
        REQUIRE(rp_decode(c, &one) == RP_OK, "decode");
        lg = rp_get_logits(c, 0);
    }
    rp_sampler_free(smp);
    rp_grammar_free(g);
    rp_context_free(c);
    c = gctx(m, 256);
    g = NULL;
    REQUIRE(c && rp_grammar_new(gv, g_words, NULL, &g) == RP_OK, "setup");
    rp_spec_stats st = {0};
    CHECK(spec_run(c, g, &gp, prompt, 5, N, out, &st), "greedy spec");
    CHECK(memcmp(out, ref, sizeof out) == 0, "greedy spec under the grammar differs from plain");
    rp_grammar_free(g);
    rp_context_free(c);
    rp_grammar_vocab_free(gv);
    rp_model_free(m);
}
