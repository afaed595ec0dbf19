/* Scan 2's probes (src/eval/probe_score.c, scan_gen.c, the probe formats in
 * scan.c): RYS's partial credit and the EQ-style score against scores
 * computed by hand, greedy generation batched = one probe at a time = a
 * plain greedy loop, llama-perplexity's HellaSwag and multiple-choice files,
 * and the mc and combined metrics. */
#include "eval/scan.h"
#include "test.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STORIES "models/stories260K.gguf"

static bool near(double a, double b) {
    return fabs(a - b) <= 1e-6;
}

void test_probe_math_credit(void) {
    static const struct {
        const char *actual, *estimate;
        double want; /* by hand */
    } c[] = {
        {"12345", "12345", 1.0},
        /* same length: 1 - 45/12345 */
        {"12345", "12300", 1.0 - 45.0 / 12345.0},
        /* 123 padded to 12300: (1 - 45/12345) * (1 - 2/5) */
        {"12345", "123", (1.0 - 45.0 / 12345.0) * 0.6},
        /* 99 padded to 990 against 100: (1 - 890/990) * (1 - 1/3) */
        {"100", "99", (1.0 - 890.0 / 990.0) * (2.0 / 3.0)},
        /* 5 padded to 50 against 49: (1 - 1/50) * (1 - 1/2) */
        {"49", "5", (1.0 - 1.0 / 50.0) * 0.5},
        {"-42", "-42", 1.0},
        {"-42", "42", 0.0},
        {"0", "0", 1.0},
        {"7", "0", 0.0},
        {"0012", "12", 1.0}, /* leading zeros are not digits of the number */
        {"5", "x", 0.0},
        {"5", "", 0.0},
    };
    for (size_t k = 0; k < RP_ARRAY_LEN(c); k++) {
        const double got = rp_probe_number_credit(c[k].actual, c[k].estimate);
        CHECK(near(got, c[k].want), "%s for %s: %.9f, want %.9f", c[k].estimate, c[k].actual, got,
              c[k].want);
    }
    /* the best integer in the output; "12,300" is one number */
    const double both = rp_probe_score_math(" I think 12,300, or maybe 99.", "12345");
    CHECK(near(both, 1.0 - 45.0 / 12345.0), "best of 12300 and 99: %.9f", both);
    /* 99 alone: padded to 99000 against 12345: (1 - 86655/99000) * (1 - 3/5) */
    CHECK(near(rp_probe_score_math("99", "12345"), (1.0 - 86655.0 / 99000.0) * 0.4), "99: %.9f",
          rp_probe_score_math("99", "12345"));
    CHECK(rp_probe_score_math(" no number here", "5") == 0, "no number");
    CHECK(near(rp_probe_score_math("-17 degrees", "-17"), 1.0), "a negative answer");
    CHECK(near(rp_probe_score_math("The answer is 3 - 2", "3"), 1.0), "'3 - 2': 3 counts");
}

void test_probe_eq_score(void) {
    const double ref[3] = {7, 2, 0};
    /* |5-7| + |2-2| + |3-0| = 5 of 30 */
    CHECK(near(rp_probe_score_eq("Anger: 5, Joy: 2, Fear: 3", ref, 3, 10), 1 - 5.0 / 30),
          "5 of 30: %.9f", rp_probe_score_eq("Anger: 5, Joy: 2, Fear: 3", ref, 3, 10));
    /* two scores missing count the scale each: 20 of 30 */
    CHECK(near(rp_probe_score_eq("Anger: 7", ref, 3, 10), 1 - 20.0 / 30), "missing");
    /* a distance is capped at the scale: |30-7| counts 10 */
    CHECK(near(rp_probe_score_eq("30 2 0", ref, 3, 10), 1 - 10.0 / 30), "capped");
    CHECK(near(rp_probe_score_eq("7.5, 2, 0.5", ref, 3, 10), 1 - 1.0 / 30), "fractions");
    CHECK(near(rp_probe_score_eq("7 2 0 9 9", ref, 3, 10), 1.0), "extra numbers ignored");
    CHECK(rp_probe_score_eq("", ref, 3, 10) == 0, "nothing");
}

static rp_model *load_stories(void) {
    rp_model *m = NULL;
    if (rp_model_load(test_shared(STORIES), NULL, &m)) fprintf(stderr, "  %s\n", rp_last_error());
    return m;
}

static rp_context *gen_ctx(const rp_model *m, int n_seq) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = (uint32_t)n_seq;
    cp.n_threads = 1;
    cp.type_k = cp.type_v = RP_TYPE_F32;
    rp_context *c = NULL;
    if (rp_context_new(m, &cp, &c)) fprintf(stderr, "  %s\n", rp_last_error());
    return c;
}

/* The plain greedy loop, one token per decode, for one prompt. */
static void greedy(rp_context *c, const int32_t *prompt, int n, int budget, char *out) {
    const rp_vocab *v = rp_model_vocab(rp_context_model(c));
    rp_kv_clear(c);
    size_t len = 0;
    out[0] = 0;
    int32_t tok = prompt[0];
    for (int p = 0;; p++) {
        tok = p < n ? prompt[p] : tok;
        int32_t pos = p, seq = 0;
        int8_t want = 1;
        rp_batch b = {.n_tokens = 1, .token = &tok, .pos = &pos, .seq_id = &seq, .logits = &want};
        if (rp_decode(c, &b)) return;
        if (p < n - 1) continue;
        const float *lg = rp_get_logits(c, 0);
        int32_t best = 0;
        for (int k = 1; k < rp_n_vocab(c); k++)
            if (lg[k] > lg[best]) best = k;
        if (rp_vocab_is_eog(v, best)) return;
        char piece[64];
        int w = rp_token_to_piece(v, best, false, piece, sizeof piece);
        if (w > 0 && len + (size_t)w < GEN_TEXT_MAX) {
            memcpy(out + len, piece, (size_t)w);
            len += (size_t)w;
            out[len] = 0;
        }
        if (p - (n - 1) + 1 >= budget) return;
        if (w > 0 && memchr(piece, '\n', (size_t)w) && len > strspn(out, " \n")) return;
        tok = best;
    }
}

void test_probe_generation(void) {
    rp_model *m = load_stories();
    REQUIRE(m, "stories260K");
    /* five prompts of different lengths and budgets */
    const char *jsonl = "{\"prompt\": \"Once upon a time\", \"answer\": 3, \"max_tokens\": 9}\n"
                        "{\"prompt\": \"Tom had 3 apples and\", \"answer\": 12}\n"
                        "{\"prompt\": \"The cat\", \"scores\": [1, 2], \"max_tokens\": 5}\n"
                        "{\"prompt\": \"Lily went to the park with her mom. She saw a big\", "
                        "\"answer\": 7, \"max_tokens\": 20}\n"
                        "{\"prompt\": \"One day\", \"answer\": 1, \"max_tokens\": 1}\n";
    rp_scan_set set;
    REQUIRE(rp_scan_set_probes(&set, m, jsonl, strlen(jsonl), "g.jsonl", 64) == RP_OK, "%s",
            rp_last_error());
    CHECK(set.n_gen == 5 && set.n_math == 4 && set.n_eq == 1 && set.n_items == 0, "%d probes",
          set.n_gen);
    CHECK(set.gen[0].max_tokens == 9 && set.gen[1].max_tokens == 16 &&
              !strcmp(set.gen[1].expected, "12") && set.gen[2].eq && set.gen[2].n_scores == 2,
          "fields");
    double s1[5], s16[5];
    char *t1 = calloc(5, GEN_TEXT_MAX), *t16 = calloc(5, GEN_TEXT_MAX);
    rp_context *c = gen_ctx(m, 16);
    REQUIRE(c && t1 && t16, "context");
    REQUIRE(rp_scan_generate(&set, c, 64, 16, s16, t16, NULL, NULL) == RP_OK, "%s",
            rp_last_error());
    REQUIRE(rp_scan_generate(&set, c, 64, 1, s1, t1, NULL, NULL) == RP_OK, "%s", rp_last_error());
    int nonempty = 0;
    for (int g = 0; g < 5; g++) {
        char want[GEN_TEXT_MAX];
        greedy(c, set.tok + set.gen[g].tok, set.gen[g].n_prompt, set.gen[g].max_tokens, want);
        CHECK(!strcmp(t16 + g * GEN_TEXT_MAX, want) && !strcmp(t1 + g * GEN_TEXT_MAX, want),
              "probe %d: batched '%s', alone '%s', greedy loop '%s'", g, t16 + g * GEN_TEXT_MAX,
              t1 + g * GEN_TEXT_MAX, want);
        CHECK(s16[g] == s1[g], "probe %d's score", g);
        nonempty += want[0] != 0;
    }
    CHECK(nonempty >= 4, "%d probes generated text", nonempty);
    rp_context_free(c);
    free(t1);
    free(t16);
    rp_scan_set_free(&set);
    rp_model_free(m);
}

static rp_scan *probe_scan(const rp_model *m, const rp_scan_set *set, rp_scan_metric metric,
                           unsigned combine) {
    rp_scan_params p = {.metric = metric,
                        .n_threads = 1,
                        .type_k = RP_TYPE_F32,
                        .type_v = RP_TYPE_F32,
                        .n_batch = 64,
                        .reuse = true,
                        .combine = combine};
    rp_scan *s = NULL;
    if (rp_scan_new(m, set, &p, &s)) fprintf(stderr, "  %s\n", rp_last_error());
    return s;
}

static void put_u32(unsigned char **p, uint32_t v) {
    memcpy(*p, &v, 4);
    *p += 4;
}

static void put_str(unsigned char **p, const char *s) {
    put_u32(p, (uint32_t)strlen(s));
    memcpy(*p, s, strlen(s));
    *p += strlen(s);
}

void test_probe_mc_formats(void) {
    rp_model *m = load_stories();
    REQUIRE(m, "stories260K");
    /* the same two tasks as JSONL, as HellaSwag text and as the binary file */
    const char *jsonl =
        "{\"prompt\": \"Tom saw a dog.\", \"choices\": [\" He ran.\", \" He sat.\", \" The sky.\", "
        "\" A cup.\"], \"answer\": 1}\n"
        "{\"prompt\": \"Lily had a ball.\", \"choices\": [\" She was sad.\", \" She played.\", "
        "\" Red.\", \" Big.\"], \"answer\": 0}\n";
    const char *hs = "Tom saw a dog.\n1\nHe ran.\nHe sat.\nThe sky.\nA cup.\n"
                     "Lily had a ball.\n0\nShe was sad.\nShe played.\nRed.\nBig.\n";
    unsigned char bin[1024], *p = bin;
    put_u32(&p, 2);
    put_u32(&p, 0);
    put_u32(&p, 0); /* offsets: read in order */
    const char *ctx[2] = {"Tom saw a dog.", "Lily had a ball."};
    const char *ends[2][4] = {{"He ran.", "He sat.", "The sky.", "A cup."},
                              {"She was sad.", "She played.", "Red.", "Big."}};
    const int gold[2] = {1, 0};
    for (int t = 0; t < 2; t++) {
        put_str(&p, ctx[t]);
        put_u32(&p, 4);
        for (int k = 0; k < 4; k++) put_str(&p, ends[t][k]);
        for (int k = 0; k < 4; k++) put_u32(&p, k == gold[t]);
        put_u32(&p, 0); /* the second answer set: none */
    }
    rp_scan_set a, b, c;
    REQUIRE(rp_scan_set_probes(&a, m, jsonl, strlen(jsonl), "a.jsonl", 64) == RP_OK, "%s",
            rp_last_error());
    REQUIRE(rp_scan_set_probes(&b, m, hs, strlen(hs), "hs.txt", 64) == RP_OK, "%s",
            rp_last_error());
    REQUIRE(rp_scan_set_probes(&c, m, (const char *)bin, (size_t)(p - bin), "mc.bin", 64) == RP_OK,
            "%s", rp_last_error());
    CHECK(a.n_choice_items == 2 && b.n_choice_items == 2 && c.n_choice_items == 2 &&
              a.n_tok == b.n_tok && a.n_tok == c.n_tok &&
              !memcmp(a.tok, b.tok, a.n_tok * sizeof *a.tok) &&
              !memcmp(a.tok, c.tok, a.n_tok * sizeof *a.tok) && b.items[0].answer == 1 &&
              c.items[1].answer == 0,
          "the three formats give the same tasks (%zu, %zu, %zu tokens)", a.n_tok, b.n_tok,
          c.n_tok);
    /* mc = the probe metric's accuracy; combined of mc alone = its z */
    rp_scan_result rp, rm, rc;
    rp_scan *sp = probe_scan(m, &a, RP_SCAN_PROBE, 0), *sm = probe_scan(m, &b, RP_SCAN_MC, 0),
            *sc = probe_scan(m, &c, RP_SCAN_COMBINED, 1u << RP_SCAN_MC);
    REQUIRE(sp && sm && sc, "scans");
    REQUIRE(!rp_scan_identity(sp, &rp) && !rp_scan_identity(sm, &rm) && !rp_scan_identity(sc, &rc),
            "%s", rp_last_error());
    CHECK(rm.value == rp.accuracy && rc.value == 0, "identity: mc %g, accuracy %g, combined %g",
          rm.value, rp.accuracy, rc.value);
    REQUIRE(!rp_scan_block_eval(sp, 1, 3, &rp) && !rp_scan_block_eval(sm, 1, 3, &rm) &&
                !rp_scan_block_eval(sc, 1, 3, &rc),
            "%s", rp_last_error());
    const double p0 = rm.value - rm.delta, se = fmax(sqrt(p0 * (1 - p0) / 2), 0.5);
    CHECK(rm.value == rp.accuracy && near(rc.value, rm.delta / se),
          "block 1,3: mc %g (accuracy %g), combined %g, want %g", rm.value, rp.accuracy, rc.value,
          rm.delta / se);
    rp_scan_free(sp);
    rp_scan_free(sm);
    rp_scan_free(sc);
    /* refusals: a metric the file cannot give, a malformed HellaSwag index, a cut binary file */
    rp_scan *none = NULL;
    rp_scan_params pm = {.metric = RP_SCAN_MATH, .n_threads = 1, .n_batch = 64};
    CHECK(rp_scan_new(m, &a, &pm, &none) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "needs math"),
          "%s", rp_last_error());
    rp_scan_set_free(&a);
    rp_scan_set_free(&b);
    rp_scan_set_free(&c);
    const char *bad_hs = "Tom saw a dog.\n1\nHe ran.\nHe sat.\nThe sky.\nA cup.\nLily.\n7\n";
    CHECK(rp_scan_set_probes(&a, m, bad_hs, strlen(bad_hs), "hs.txt", 64) == RP_ERR_FORMAT &&
              strstr(rp_last_error(), "lines left over"),
          "%s", rp_last_error());
    CHECK(rp_scan_set_probes(&a, m, (const char *)bin, (size_t)(p - bin) - 9, "mc.bin", 64) ==
                  RP_ERR_FORMAT &&
              strstr(rp_last_error(), "task 2"),
          "%s", rp_last_error());
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"prompt\": \"a\", \"answer\": 3, \"max_tokens\": 0}\n", "\"max_tokens\" must be"},
        {"{\"prompt\": \"a\", \"scores\": []}\n", "\"scores\" must be an array of 1 to"},
        {"{\"prompt\": \"a\", \"scores\": [1, \"x\"]}\n", "score 1 is not a number"},
        {"{\"prompt\": \"a\", \"scores\": [1], \"answer\": 2}\n", "and no \"answer\""},
        {"{\"prompt\": \"a\", \"answer\": \" b\", \"max_tokens\": 3}\n",
         "go with math and EQ probes"},
        {"{\"prompt\": \"a\", \"answer\": 3, \"scale\": 3}\n", "\"scale\" goes with"},
    };
    for (size_t k = 0; k < RP_ARRAY_LEN(bad); k++)
        CHECK(rp_scan_set_probes(&a, m, bad[k].text, strlen(bad[k].text), "p.jsonl", 64) ==
                      RP_ERR_FORMAT &&
                  strstr(rp_last_error(), bad[k].want),
              "case %zu: %s", k, rp_last_error());
    rp_model_free(m);
}
