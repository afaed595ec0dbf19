/* Speculative decoding: greedy output identical to plain decoding (draft
 * plans, the MTP head, target plans with repeats, several sequences,
 * truncation), the rejection rule keeps the target distribution (a
 * chi-square test on small vocabularies, and end to end on stories260K),
 * sequence checkpoints restore recurrent state exactly. */
#include "golden.h"
#include "format/gguf.h"
#include "core/model.h"
#include "core/spec.h"
#include "convert/synth.h"
#include "test.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

#define STORIES "models/stories260K.gguf"
#define QWEN3   "models/synth/qwen3-tiny.gguf"
#define QWEN35  "models/synth/qwen35-tiny.gguf"

static rp_context *new_ctx(const rp_model *m, const char *repeat, int n_ctx, int n_seq,
                           bool keep_hidden) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_seq_max = (uint32_t)n_seq;
    cp.n_threads = 1;
    cp.repeat_layers = repeat;
    cp.keep_hidden = keep_hidden;
    rp_context *c = NULL;
    if (rp_context_new(m, &cp, &c)) fprintf(stderr, "  %s\n", rp_last_error());
    return c;
}

static rp_sampler_params greedy_params(void) {
    rp_sampler_params sp = rp_sampler_default_params();
    sp.temp = 0;
    return sp;
}

static void prompt_of(int32_t *t, int n, int n_vocab, int salt) {
    t[0] = 1;
    for (int i = 1; i < n; i++) t[i] = (int32_t)((i * 37 + 11 + salt * 101) % n_vocab);
}

/* Plain greedy decoding as `reprise run` does it: n_gen tokens after the prompt. */
static bool plain_greedy(const rp_model *m, const char *repeat, const rp_sampler_params *sp,
                         const int32_t *prompt, int n_prompt, int n_gen, int32_t *out) {
    rp_context *c = new_ctx(m, repeat, 256, 1, false);
    rp_sampler *smp = c ? rp_sampler_new(sp, rp_n_vocab(c)) : NULL;
    bool ok = c && smp;
    rp_batch b = {.n_tokens = n_prompt, .token = prompt};
    ok = ok && rp_decode(c, &b) == RP_OK;
    for (int i = 0; ok && i < n_prompt; i++) rp_sampler_accept(smp, prompt[i]);
    for (int i = 0; ok && i < n_gen; i++) {
        out[i] = rp_sampler_sample(smp, rp_get_logits(c, 0 == i ? n_prompt - 1 : 0));
        rp_sampler_accept(smp, out[i]);
        rp_batch one = {.n_tokens = 1, .token = &out[i]};
        ok = rp_decode(c, &one) == RP_OK;
    }
    if (!ok) fprintf(stderr, "  plain decoding: %s\n", rp_last_error());
    rp_sampler_free(smp);
    rp_context_free(c);
    return ok;
}

/* n_gen tokens of sequence seq through the spec (at most `limit` per step). */
static bool spec_generate(rp_spec *s, int seq, int n_gen, int limit, int32_t *out) {
    int n = 0;
    int32_t buf[RP_SPEC_DRAFT_MAX + 1];
    while (n < n_gen) {
        int k = 0;
        int want = n_gen - n < limit ? n_gen - n : limit;
        if (rp_spec_step(s, seq, want, buf, &k) || k < 1 || k > want) {
            fprintf(stderr, "  step: %s (k %d)\n", rp_last_error(), k);
            return false;
        }
        memcpy(out + n, buf, (size_t)k * sizeof *buf);
        n += k;
    }
    return true;
}

typedef struct case_ {
    const char *repeat;     /* target plan */
    const char *draft_plan; /* NULL = default */
    bool mtp;
    int draft_max;
    float p_min;
} case_;

/* Greedy output of every case equals plain decoding; returns the summed
 * statistics so callers can check that drafts were both kept and rejected. */
static rp_spec_stats check_identity(const char *model, const case_ *cases, int n_cases, int n_gen) {
    rp_spec_stats tot = {0};
    rp_model *m;
    if (rp_model_load(model[0] == '/' ? model : test_shared(model), NULL, &m)) {
        CHECK(false, "%s: %s", model, rp_last_error());
        return tot;
    }
    const int nv = m->hp.n_vocab;
    int32_t prompt[12], ref[128], got[128];
    prompt_of(prompt, 12, nv, 3);
    const rp_sampler_params sp = greedy_params();
    const char *last_repeat = "?";
    for (int ci = 0; ci < n_cases; ci++) {
        const case_ *cs = &cases[ci];
        if (ci == 0 ||
            (cs->repeat ? !last_repeat || strcmp(cs->repeat, last_repeat) : last_repeat != NULL))
            if (!plain_greedy(m, cs->repeat, &sp, prompt, 12, n_gen, ref)) break;
        last_repeat = cs->repeat;
        rp_context *t = new_ctx(m, cs->repeat, 256, 1, cs->mtp);
        rp_spec_params p = rp_spec_default_params();
        p.draft_plan = cs->draft_plan;
        p.mtp = cs->mtp;
        p.draft_max = cs->draft_max;
        p.p_min = cs->p_min;
        rp_spec *s = NULL;
        if (!t || rp_spec_new(t, &p, &s)) {
            CHECK(false, "%s case %d: %s", model, ci, rp_last_error());
            rp_context_free(t);
            continue;
        }
        bool ok = rp_spec_seq_reset(s, 0, &sp) == RP_OK &&
                  rp_spec_seq_feed(s, 0, prompt, 12) == RP_OK &&
                  spec_generate(s, 0, n_gen, 1000, got);
        CHECK(ok, "%s case %d: %s", model, ci, rp_last_error());
        int same = 0;
        while (ok && same < n_gen && got[same] == ref[same]) same++;
        rp_spec_stats st = rp_spec_get_stats(s, 0);
        CHECK(!ok || same == n_gen,
              "%s --repeat-layers %s, draft %s: differs from plain decoding at token %d of %d (%d "
              "vs %d)",
              model, cs->repeat ? cs->repeat : "-",
              cs->mtp          ? "mtp"
              : cs->draft_plan ? cs->draft_plan
                               : "default",
              same, n_gen, same < n_gen ? got[same] : -1, same < n_gen ? ref[same] : -1);
        CHECK(!ok || st.generated == (uint64_t)n_gen, "generated %llu",
              (unsigned long long)st.generated);
        printf("     %s repeat %s draft %s max %d: %d/%d identical, accepted %llu of %llu drafted "
               "in %llu steps\n",
               model, cs->repeat ? cs->repeat : "-",
               cs->mtp          ? "mtp"
               : cs->draft_plan ? cs->draft_plan
                                : "default",
               p.draft_max, same, n_gen, (unsigned long long)st.accepted,
               (unsigned long long)st.drafted, (unsigned long long)st.steps);
        tot.steps += st.steps;
        tot.drafted += st.drafted;
        tot.accepted += st.accepted;
        tot.generated += st.generated;
        rp_spec_free(s);
        rp_context_free(t);
    }
    rp_model_free(m);
    return tot;
}

void test_spec_greedy_stories(void) {
    const case_ cases[] = {
        {NULL, NULL, false, 4, 0},       /* the trunk drafting for itself: every draft kept */
        {NULL, "0,1,3,4", false, 4, 0},  /* a skip plan */
        {NULL, "0..2,4", false, 1, 0},   /* one token at a time */
        {NULL, "0,4", false, 8, 0.5f},   /* early stop at low confidence */
        {"1,3", NULL, false, 4, 0},      /* a repeat plan, drafted by the plain stack */
        {"1,3", "0,1,2,4", false, 6, 0}, /* a repeat plan, drafted by a skip plan */
    };
    rp_spec_stats st = check_identity(STORIES, cases, (int)RP_ARRAY_LEN(cases), 60);
    CHECK(st.accepted > 0 && st.accepted < st.drafted,
          "drafts should be both kept and rejected: %llu of %llu", (unsigned long long)st.accepted,
          (unsigned long long)st.drafted);
}

void test_spec_greedy_qwen3(void) {
    const case_ cases[] = {
        {NULL, "0..2,5..7", false, 3, 0},
        {"2,5", NULL, false, 3, 0},
        {"2,5", "0..3,6,7", false, 2, 0},
    };
    rp_spec_stats st = check_identity(QWEN3, cases, (int)RP_ARRAY_LEN(cases), 24);
    CHECK(st.accepted > 0 && st.accepted < st.drafted,
          "drafts should be both kept and rejected: %llu of %llu", (unsigned long long)st.accepted,
          (unsigned long long)st.drafted);
}

/* A copy of qwen35-tiny whose tokens from 3 on fall into three classes that
 * share one embedding row (the output matrix is the embedding): the model
 * then effectively has a three-token vocabulary, greedy picks the lowest id of
 * a class, and the random-weight MTP head agrees with the trunk often enough
 * for drafts to be both kept and rejected. */
static const char *collapsed_qwen35(void) {
    const char *dst = test_tmp("spec-qwen35-3class.gguf");
    size_t len;
    uint8_t *bytes = test_read(test_shared(QWEN35), &len);
    rp_gguf *g = NULL;
    if (!bytes || rp_gguf_open(test_shared(QWEN35), &g)) {
        free(bytes);
        return NULL;
    }
    const rp_gguf_tensor *t = rp_gguf_find_tensor(g, "token_embd.weight");
    bool ok = t && t->type == RP_TYPE_F32 && !rp_gguf_find_tensor(g, "output.weight");
    if (ok) {
        const size_t row = (size_t)t->ne[0] * sizeof(float);
        uint8_t *base = bytes + rp_gguf_data_offset(g) + t->offset;
        for (int64_t r = 6; r < t->ne[1]; r++)
            memcpy(base + (size_t)r * row, base + (size_t)(3 + (r - 3) % 3) * row, row);
        FILE *fp = fopen(dst, "wb");
        ok = fp && fwrite(bytes, 1, len, fp) == len;
        if (fp) ok = fclose(fp) == 0 && ok;
    }
    rp_gguf_close(g);
    free(bytes);
    return ok ? dst : NULL;
}

void test_spec_greedy_qwen35_collapsed(void) {
    const char *path = collapsed_qwen35();
    REQUIRE(path, "could not write the collapsed model");
    const case_ cases[] = {
        {NULL, NULL, true, 3, 0},
        {"2,6", NULL, true, 3, 0},
        {"2,6", "0..2,4..7", false, 3, 0},
    };
    /* check_identity opens shared paths: give it this one relative to the shared root */
    rp_spec_stats st = check_identity(path, cases, (int)RP_ARRAY_LEN(cases), 30);
    CHECK(st.accepted > 0 && st.accepted < st.drafted,
          "drafts should be both kept and rejected: %llu of %llu", (unsigned long long)st.accepted,
          (unsigned long long)st.drafted);
}

/* The MTP head drafting (on the identity and on a plan's hidden state), and a
 * recurrent draft plan: checkpoints roll back the delta-net state. */
void test_spec_greedy_qwen35(void) {
    const case_ cases[] = {
        {NULL, NULL, true, 3, 0},
        {"2,6", NULL, true, 2, 0},
        {NULL, "0..2,4..7", false, 3, 0},
        {"2,6", NULL, false, 3, 0},
    };
    rp_spec_stats st = check_identity(QWEN35, cases, (int)RP_ARRAY_LEN(cases), 24);
    CHECK(st.accepted > 0 && st.accepted < st.drafted,
          "drafts should be both kept and rejected: %llu of %llu", (unsigned long long)st.accepted,
          (unsigned long long)st.drafted);
}

/* Two sequences stepped alternately equal each run alone; truncating a
 * sequence and generating again continues as plain decoding would. */
static void check_seqs_and_truncate(const char *model, const char *draft_plan, bool mtp, int N) {
    rp_model *m;
    REQUIRE(rp_model_load(model[0] == '/' ? model : test_shared(model), NULL, &m) == RP_OK, "%s",
            rp_last_error());
    const int nv = m->hp.n_vocab;
    int32_t pa[10], pb[7], ra[64], rb[64], ga[64], gb[64];
    prompt_of(pa, 10, nv, 1);
    prompt_of(pb, 7, nv, 2);
    const rp_sampler_params sp = greedy_params();
    REQUIRE(plain_greedy(m, NULL, &sp, pa, 10, N, ra) && plain_greedy(m, NULL, &sp, pb, 7, N, rb),
            "plain");
    rp_context *t = new_ctx(m, NULL, 128, 2, mtp);
    rp_spec_params p = rp_spec_default_params();
    p.draft_plan = draft_plan;
    p.mtp = mtp;
    p.draft_max = 3;
    p.p_min = 0;
    rp_spec *s = NULL;
    REQUIRE(t && rp_spec_new(t, &p, &s) == RP_OK, "%s", rp_last_error());
    REQUIRE(rp_spec_seq_reset(s, 0, &sp) == RP_OK && rp_spec_seq_reset(s, 1, &sp) == RP_OK,
            "reset");
    REQUIRE(rp_spec_seq_feed(s, 0, pa, 10) == RP_OK && rp_spec_seq_feed(s, 1, pb, 7) == RP_OK, "%s",
            rp_last_error());
    bool ok = true;
    for (int r = 0; r < N / 5 && ok; r++)
        ok = spec_generate(s, 0, 5, 1000, ga + r * 5) && spec_generate(s, 1, 5, 1000, gb + r * 5);
    CHECK(ok && !memcmp(ga, ra, (size_t)N * sizeof *ga) && !memcmp(gb, rb, (size_t)N * sizeof *gb),
          "%s: two sequences differ from each alone", model);
    /* cut sequence 0 back into its generated part, then at the prompt's end */
    const int cuts[] = {10 + 7, 10 + 1, 10 + N * 2 / 3};
    for (size_t c = 0; c < RP_ARRAY_LEN(cuts) && ok; c++) {
        ok = rp_spec_seq_truncate(s, 0, cuts[c]) == RP_OK && rp_spec_seq_len(s, 0) == cuts[c];
        CHECK(ok, "truncate to %d: %s", cuts[c], rp_last_error());
        const int n_more = N - (cuts[c] - 10);
        ok = ok && spec_generate(s, 0, n_more, 1000, ga);
        CHECK(ok && !memcmp(ga, ra + (cuts[c] - 10), (size_t)n_more * sizeof *ga),
              "%s: after truncating to %d the continuation differs", model, cuts[c]);
    }
    /* max_new 1 steps (no drafting) interleave with speculative ones */
    ok = ok && rp_spec_seq_truncate(s, 1, 7) == RP_OK;
    for (int i = 0; i < N && ok;) {
        int32_t buf[8];
        int k;
        ok = rp_spec_step(s, 1, i % 3 ? 1 : 4, buf, &k) == RP_OK;
        for (int j = 0; ok && j < k && i < N; j++, i++) ok = buf[j] == rb[i];
        CHECK(ok, "%s: mixed step sizes differ at %d: %s", model, i, rp_last_error());
    }
    rp_spec_free(s);
    rp_context_free(t);
    rp_model_free(m);
}

void test_spec_sequences(void) {
    check_seqs_and_truncate(STORIES, "0,2,4", false, 30);
    const char *q35 = collapsed_qwen35();
    REQUIRE(q35, "could not write the collapsed model");
    check_seqs_and_truncate(q35, NULL, true, 15);
    check_seqs_and_truncate(q35, "0..5,7", false, 15);
}

/* Several sequences verified in one batch of the caller's (rp_spec_prepare,
 * one rp_decode, rp_spec_finish per sequence), as a server does: each equals
 * plain decoding alone. */
static void check_batched(const char *model, const char *draft_plan, bool mtp) {
    rp_model *m;
    REQUIRE(rp_model_load(model[0] == '/' ? model : test_shared(model), NULL, &m) == RP_OK, "%s",
            rp_last_error());
    enum { NS = 3, N = 16 };
    const int nv = m->hp.n_vocab;
    int32_t prompt[NS][9], ref[NS][N + RP_SPEC_DRAFT_MAX + 1], got[NS][N + RP_SPEC_DRAFT_MAX + 1];
    const rp_sampler_params sp = greedy_params();
    for (int q = 0; q < NS; q++) {
        prompt_of(prompt[q], 5 + q * 2, nv, 7 + q);
        REQUIRE(plain_greedy(m, NULL, &sp, prompt[q], 5 + q * 2, N + RP_SPEC_DRAFT_MAX + 1, ref[q]),
                "plain");
    }
    rp_context *t = new_ctx(m, NULL, 128, NS, mtp);
    rp_spec_params p = rp_spec_default_params();
    p.draft_plan = draft_plan;
    p.mtp = mtp;
    p.draft_max = 3;
    p.p_min = 0;
    rp_spec *s = NULL;
    REQUIRE(t && rp_spec_new(t, &p, &s) == RP_OK, "%s", rp_last_error());
    int n[NS] = {0};
    for (int q = 0; q < NS; q++)
        REQUIRE(rp_spec_seq_reset(s, q, &sp) == RP_OK &&
                    rp_spec_seq_feed(s, q, prompt[q], 5 + q * 2) == RP_OK,
                "%s", rp_last_error());
    int32_t out[RP_SPEC_DRAFT_MAX + 1];
    int k;
    CHECK(rp_spec_finish(s, 0, 0, out, &k) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "no prepared rows"),
          "%s", rp_last_error());
    bool ok = true;
    while (ok && (n[0] < N || n[1] < N || n[2] < N)) {
        int32_t tok[NS * (RP_SPEC_DRAFT_MAX + 1)], sq[NS * (RP_SPEC_DRAFT_MAX + 1)];
        int row0[NS], nb = 0;
        for (int q = 0; q < NS && ok; q++) {
            row0[q] = -1;
            if (n[q] >= N) continue;
            int c = 0;
            ok = rp_spec_prepare(s, q, 4, tok + nb, &c) == RP_OK;
            row0[q] = nb;
            for (int i = 0; i < c; i++) sq[nb + i] = q;
            nb += c;
        }
        if (ok && n[1] < N)
            CHECK(rp_spec_seq_feed(s, 1, tok, 1) == RP_ERR_INVALID_ARG &&
                      strstr(rp_last_error(), "waiting"),
                  "%s", rp_last_error());
        int8_t want[NS * (RP_SPEC_DRAFT_MAX + 1)];
        memset(want, 1, sizeof want);
        rp_batch b = {.n_tokens = nb, .token = tok, .seq_id = sq, .logits = want};
        ok = ok && rp_decode(t, &b) == RP_OK;
        for (int q = 0; q < NS && ok; q++) {
            if (row0[q] < 0) continue;
            ok = rp_spec_finish(s, q, row0[q], got[q] + n[q], &k) == RP_OK;
            n[q] += k;
        }
    }
    CHECK(ok, "%s: %s", model, rp_last_error());
    for (int q = 0; q < NS && ok; q++)
        CHECK(!memcmp(got[q], ref[q], (size_t)N * sizeof(int32_t)),
              "%s: sequence %d verified in a shared batch differs from plain decoding", model, q);
    const rp_spec_stats st = rp_spec_get_stats(s, -1);
    printf("     %s batched: accepted %llu of %llu drafted\n", model,
           (unsigned long long)st.accepted, (unsigned long long)st.drafted);
    rp_spec_free(s);
    rp_context_free(t);
    rp_model_free(m);
}

void test_spec_batched(void) {
    check_batched(STORIES, "0,1,3,4", false);
    const char *q35 = collapsed_qwen35();
    REQUIRE(q35, "could not write the collapsed model");
    check_batched(q35, NULL, true);
    check_batched(q35, "0..2,4..7", false);
}

/* Refusals name what is wrong. */
void test_spec_refusals(void) {
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(STORIES), NULL, &m) == RP_OK, "%s", rp_last_error());
    rp_context *t = new_ctx(m, NULL, 64, 1, false);
    REQUIRE(t, "ctx");
    rp_spec *s = NULL;
    rp_spec_params p = rp_spec_default_params();
    p.draft_plan = "0..7";
    CHECK(rp_spec_new(t, &p, &s) == RP_ERR_PLAN && strstr(rp_last_error(), "draft plan") && !s,
          "%s", rp_last_error());
    p = rp_spec_default_params();
    p.mtp = true;
    CHECK(rp_spec_new(t, &p, &s) == RP_ERR_UNSUPPORTED && strstr(rp_last_error(), "NextN"), "%s",
          rp_last_error());
    p.draft_plan = "0,1";
    CHECK(rp_spec_new(t, &p, &s) == RP_ERR_INVALID_ARG && strstr(rp_last_error(), "alternatives"),
          "%s", rp_last_error());
    p = rp_spec_default_params();
    p.draft_max = 65;
    CHECK(rp_spec_new(t, &p, &s) == RP_ERR_INVALID_ARG && strstr(rp_last_error(), "draft-max 65"),
          "%s", rp_last_error());
    p.draft_max = 4;
    p.draft_min = 5;
    CHECK(rp_spec_new(t, &p, &s) == RP_ERR_INVALID_ARG && strstr(rp_last_error(), "draft-min 5"),
          "%s", rp_last_error());
    p.draft_min = 0;
    p.p_min = 1.5f;
    CHECK(rp_spec_new(t, &p, &s) == RP_ERR_INVALID_ARG && strstr(rp_last_error(), "p-min"), "%s",
          rp_last_error());
    p.p_min = 0;
    REQUIRE(rp_spec_new(t, &p, &s) == RP_OK, "%s", rp_last_error());
    int32_t out[8], tok[70];
    int k;
    CHECK(rp_spec_step(s, 0, 4, out, &k) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "not started"),
          "%s", rp_last_error());
    CHECK(rp_spec_seq_reset(s, 1, NULL) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "sequence 1"),
          "%s", rp_last_error());
    const rp_sampler_params sp = greedy_params();
    REQUIRE(rp_spec_seq_reset(s, 0, &sp) == RP_OK, "reset");
    CHECK(rp_spec_step(s, 0, 4, out, &k) == RP_ERR_INVALID_ARG && strstr(rp_last_error(), "empty"),
          "%s", rp_last_error());
    tok[0] = 600;
    CHECK(rp_spec_seq_feed(s, 0, tok, 1) == RP_ERR_INVALID_ARG && strstr(rp_last_error(), "600"),
          "%s", rp_last_error());
    for (int i = 0; i < 70; i++) tok[i] = 5;
    CHECK(rp_spec_seq_feed(s, 0, tok, 65) == RP_ERR_CONTEXT_FULL, "%s", rp_last_error());
    CHECK(rp_spec_seq_truncate(s, 0, 3) == RP_ERR_INVALID_ARG, "%s", rp_last_error());
    /* the context fills exactly as plain decoding's does: the last token lands at position n_ctx */
    REQUIRE(rp_spec_seq_feed(s, 0, tok, 60) == RP_OK, "%s", rp_last_error());
    int n = 60;
    while (n <= 64) {
        rp_status st = rp_spec_step(s, 0, 65 - n, out, &k);
        REQUIRE(st == RP_OK, "step at %d: %s", n, rp_last_error());
        n += k;
    }
    CHECK(n == 65 && rp_spec_step(s, 0, 4, out, &k) == RP_ERR_CONTEXT_FULL, "n %d: %s", n,
          rp_last_error());
    rp_spec_free(s);
    /* a micro-batch too small for the verification batch */
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 4;
    rp_context *t2;
    REQUIRE(rp_context_new(m, &cp, &t2) == RP_OK, "ctx");
    p.draft_max = 4;
    CHECK(rp_spec_new(t2, &p, &s) == RP_ERR_INVALID_ARG && strstr(rp_last_error(), "micro-batch"),
          "%s", rp_last_error());
    rp_context_free(t2);
    rp_context_free(t);
    rp_model_free(m);
}

/* ---- the rejection rule keeps the target distribution ------------------- */

/* Pearson chi-square of counts against probabilities p (n cells, total N),
 * cells with an expected count below 5 pooled; *dof gets the degrees. */
static double chi_square(const double *p, const long *count, int n, long N, int *dof) {
    double chi = 0, pool_e = 0, pool_o = 0;
    int cells = 0;
    for (int i = 0; i < n; i++) {
        const double e = p[i] * (double)N;
        if (e < 5) {
            pool_e += e;
            pool_o += (double)count[i];
            if (p[i] == 0 && count[i] > 0) return INFINITY; /* a token the target never gives */
            continue;
        }
        chi += (count[i] - e) * (count[i] - e) / e;
        cells++;
    }
    if (pool_e >= 5) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells++;
    } else if (pool_o > pool_e + 10) {
        return INFINITY;
    }
    *dof = cells - 1;
    return chi;
}

/* Upper 1e-4 tail of chi-square with dof degrees (Wilson-Hilferty). */
static double chi_crit(int dof) {
    const double z = 3.719, k = dof > 0 ? dof : 1;
    const double a = 1 - 2 / (9 * k) + z * sqrt(2 / (9 * k));
    return k * a * a * a;
}

void test_spec_rule_distribution(void) {
    enum { V = 6 };
    static const float pairs[][2][V] = {
        {{0.4f, 0.3f, 0.2f, 0.1f, 0, 0},
         {0.1f, 0.1f, 0.1f, 0.1f, 0.3f, 0.3f}}, /* q puts mass where p has none */
        {{0.05f, 0.05f, 0.1f, 0.2f, 0.3f, 0.3f},
         {0.5f, 0.3f, 0.1f, 0.1f, 0, 0}},                     /* q misses p's mode */
        {{0.5f, 0.5f, 0, 0, 0, 0}, {0, 0, 0, 0.5f, 0.5f, 0}}, /* disjoint: always rejected */
        {{0.2f, 0.2f, 0.2f, 0.2f, 0.1f, 0.1f},
         {0.2f, 0.2f, 0.2f, 0.2f, 0.1f, 0.1f}}, /* equal: always kept */
        {{1, 0, 0, 0, 0, 0},
         {0.2f, 0.2f, 0.2f, 0.2f, 0.1f, 0.1f}}, /* greedy target, sampled draft */
    };
    const long N = 60000;
    rp_rng rng;
    rp_rng_seed(&rng, 20240915);
    for (size_t k = 0; k < RP_ARRAY_LEN(pairs); k++) {
        const float *p = pairs[k][0], *q = pairs[k][1];
        long count[V] = {0}, wrong[V] = {0}, kept = 0;
        for (long i = 0; i < N; i++) {
            /* d ~ q */
            double u = rp_rng_uniform(&rng), cum = 0;
            int32_t dq = V - 1;
            for (int j = 0; j < V; j++) {
                cum += q[j];
                if (u < cum) {
                    dq = j;
                    break;
                }
            }
            bool acc;
            const double u1 = rp_rng_uniform(&rng), u2 = rp_rng_uniform(&rng);
            const int32_t t = rp_spec_accept_rule(p, q, V, dq, u1, u2, &acc);
            REQUIRE(t >= 0 && t < V, "token %d", t);
            count[t]++;
            kept += acc;
            /* a wrong rule for contrast: rejected drafts replaced from p itself */
            double cp = 0;
            int32_t tp = V - 1;
            for (int j = 0; j < V; j++) {
                cp += p[j];
                if (u2 < cp) {
                    tp = j;
                    break;
                }
            }
            wrong[acc ? dq : tp]++;
        }
        double pd[V], beta = 0, off = 0;
        for (int j = 0; j < V; j++) {
            pd[j] = p[j];
            beta += fmin(p[j], q[j]); /* expected acceptance rate */
        }
        for (int j = 0; j < V; j++) /* how far the wrong rule's distribution is from p */
            off += fabs(fmin(p[j], q[j]) + (1 - beta) * p[j] - p[j]);
        int dof = 0, dof_w = 0;
        const double chi = chi_square(pd, count, V, N, &dof),
                     chi_w = chi_square(pd, wrong, V, N, &dof_w);
        CHECK(chi < chi_crit(dof), "pair %zu: chi-square %.1f with %d dof (critical %.1f)", k, chi,
              dof, chi_crit(dof));
        CHECK(fabs((double)kept / (double)N - beta) < 0.01,
              "pair %zu: acceptance %.4f, expected %.4f", k, (double)kept / (double)N, beta);
        /* the test has the power to see a wrong rule wherever that rule is wrong */
        if (off > 0.05)
            CHECK(chi_w > 10 * chi_crit(dof_w), "pair %zu: the wrong rule passes (chi-square %.1f)",
                  k, chi_w);
        printf("     pair %zu: acceptance %.3f (expected %.3f), chi-square %.1f (%d dof, critical "
               "%.1f), wrong rule "
               "%.0f\n",
               k, (double)kept / (double)N, beta, chi, dof, chi_crit(dof), chi_w);
    }
}

/* End to end on stories260K: with temperature, top-k 4 and a repetition
 * penalty, the first two tokens of speculative sampling (drafted by a skip
 * plan) follow the target's joint distribution p(x1) p(x2 | x1). */
void test_spec_sampling_stories(void) {
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(STORIES), NULL, &m) == RP_OK, "%s", rp_last_error());
    const int nv = m->hp.n_vocab;
    enum { K = 4 };
    rp_sampler_params sp = rp_sampler_default_params();
    sp.temp = 2.5f;
    sp.top_k = K;
    sp.top_p = 1.0f;
    sp.min_p = 0;
    sp.repeat_penalty = 1.5f;
    const int32_t prompt[4] = {1, 403, 407, 261};
    /* exact target distributions */
    rp_context *c = new_ctx(m, NULL, 64, 1, false);
    REQUIRE(c, "ctx");
    float *probs = malloc((size_t)nv * sizeof(float));
    double *joint = calloc((size_t)nv * (size_t)nv, sizeof(double));
    long *count = calloc((size_t)nv * (size_t)nv, sizeof(long));
    REQUIRE(probs && joint && count, "alloc");
    rp_batch b = {.n_tokens = 4, .token = prompt};
    REQUIRE(rp_decode(c, &b) == RP_OK, "decode");
    rp_sampler *smp = rp_sampler_new(&sp, nv);
    for (int i = 0; i < 4; i++) rp_sampler_accept(smp, prompt[i]);
    rp_sampler_probs(smp, rp_get_logits(c, 3), probs);
    int32_t first[K];
    double p1[K];
    int n1 = 0;
    for (int t = 0; t < nv; t++)
        if (probs[t] > 0) {
            REQUIRE(n1 < K, "more than %d tokens kept", K);
            first[n1] = t;
            p1[n1++] = probs[t];
        }
    for (int i = 0; i < n1; i++) {
        REQUIRE(rp_kv_seq_truncate(c, 0, 4) == RP_OK, "truncate");
        rp_batch one = {.n_tokens = 1, .token = &first[i]};
        REQUIRE(rp_decode(c, &one) == RP_OK, "decode");
        rp_sampler_reset(smp);
        for (int j = 0; j < 4; j++) rp_sampler_accept(smp, prompt[j]);
        rp_sampler_accept(smp, first[i]);
        rp_sampler_probs(smp, rp_get_logits(c, 0), probs);
        for (int t = 0; t < nv; t++)
            joint[(size_t)first[i] * (size_t)nv + (size_t)t] = p1[i] * probs[t];
    }
    rp_sampler_free(smp);
    rp_context_free(c);
    /* speculative sampling */
    rp_context *t = new_ctx(m, NULL, 64, 1, false);
    rp_spec_params p = rp_spec_default_params();
    p.draft_plan = "0..2,4";
    p.draft_max = 2;
    p.p_min = 0;
    rp_spec *s = NULL;
    REQUIRE(t && rp_spec_new(t, &p, &s) == RP_OK, "%s", rp_last_error());
    const long N = 2000;
    for (long i = 0; i < N; i++) {
        sp.seed = (uint64_t)i * 7919u + 1;
        int32_t got[2];
        REQUIRE(rp_spec_seq_reset(s, 0, &sp) == RP_OK &&
                    rp_spec_seq_feed(s, 0, prompt, 4) == RP_OK && spec_generate(s, 0, 2, 1000, got),
                "%s", rp_last_error());
        count[(size_t)got[0] * (size_t)nv + (size_t)got[1]]++;
    }
    const rp_spec_stats st = rp_spec_get_stats(s, 0);
    CHECK(st.accepted > 0 && st.accepted < st.drafted, "drafts kept %llu of %llu",
          (unsigned long long)st.accepted, (unsigned long long)st.drafted);
    int dof = 0;
    const double chi = chi_square(joint, count, nv * nv, N, &dof);
    CHECK(dof >= 3 && chi < chi_crit(dof),
          "joint of the first two tokens: chi-square %.1f with %d dof (critical %.1f)", chi, dof,
          chi_crit(dof));
    printf("     first two tokens over %ld runs: chi-square %.1f with %d dof (critical %.1f)\n", N,
           chi, dof, chi_crit(dof));
    rp_spec_free(s);
    rp_context_free(t);
    free(probs);
    free(joint);
    free(count);
    rp_model_free(m);
}

/* ---- sequence checkpoints ------------------------------------------------- */

/* Save at 12, decode 9 more, restore, decode the same 9: logits identical to
 * decoding them the first time; the guard refuses stale checkpoints. */
static void check_checkpoint(const char *path) {
    rp_model *m;
    REQUIRE(rp_model_load(path, NULL, &m) == RP_OK, "%s", rp_last_error());
    const int nv = m->hp.n_vocab;
    rp_context *c = new_ctx(m, NULL, 64, 2, false), *o = new_ctx(m, NULL, 64, 1, false);
    REQUIRE(c && o, "ctx");
    CHECK(rp_context_has_recurrent(c), "%s: expected recurrent state", path);
    int32_t t[21];
    prompt_of(t, 21, nv, 5);
    int8_t all[21];
    memset(all, 1, sizeof all);
    rp_seq_checkpoint *ck = rp_seq_checkpoint_new(c), *ko = rp_seq_checkpoint_new(o);
    REQUIRE(ck && ko, "checkpoint");
    CHECK(rp_seq_checkpoint_len(ck) == -1, "fresh checkpoint");
    int32_t seq1[21];
    for (int i = 0; i < 21; i++) seq1[i] = 1;
    rp_batch p0 = {.n_tokens = 12, .token = t, .seq_id = seq1}; /* sequence 1 of c */
    REQUIRE(rp_decode(c, &p0) == RP_OK, "%s", rp_last_error());
    CHECK(rp_seq_checkpoint_restore(c, 1, ck) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "never saved"),
          "%s", rp_last_error());
    REQUIRE(rp_seq_checkpoint_save(c, 1, ck) == RP_OK && rp_seq_checkpoint_len(ck) == 12, "save");
    float *ref = malloc((size_t)9 * nv * sizeof(float));
    rp_batch p1 = {.n_tokens = 9, .token = t + 12, .seq_id = seq1, .logits = all};
    REQUIRE(rp_decode(c, &p1) == RP_OK, "decode");
    for (int i = 0; i < 9; i++)
        memcpy(ref + (size_t)i * nv, rp_get_logits(c, i), (size_t)nv * sizeof(float));
    CHECK(rp_kv_seq_truncate(c, 1, 15) == RP_ERR_UNSUPPORTED,
          "recurrent truncation must be refused");
    CHECK(rp_seq_checkpoint_restore(c, 0, ck) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "holds sequence 1"),
          "%s", rp_last_error());
    CHECK(rp_seq_checkpoint_restore(o, 1, ck) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "another context"),
          "%s", rp_last_error());
    for (int rep = 0; rep < 2; rep++) { /* a checkpoint restores more than once */
        REQUIRE(rp_seq_checkpoint_restore(c, 1, ck) == RP_OK, "%s", rp_last_error());
        CHECK(rp_kv_seq_len(c, 1) == 12, "length after restore %d", rp_kv_seq_len(c, 1));
        REQUIRE(rp_decode(c, &p1) == RP_OK, "decode");
        bool same = true;
        for (int i = 0; i < 9; i++)
            same &= !memcmp(ref + (size_t)i * nv, rp_get_logits(c, i), (size_t)nv * sizeof(float));
        CHECK(same, "%s: restored state gives other logits (pass %d)", path, rep);
    }
    /* stale: cut below the checkpoint, or a newer one saved */
    REQUIRE(rp_kv_seq_truncate(c, 1, 0) == RP_OK, "clear");
    CHECK(rp_seq_checkpoint_restore(c, 1, ck) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "cut back"),
          "%s", rp_last_error());
    rp_seq_checkpoint *ck2 = rp_seq_checkpoint_new(c);
    REQUIRE(rp_decode(c, &p0) == RP_OK && rp_seq_checkpoint_save(c, 1, ck) == RP_OK &&
                rp_seq_checkpoint_save(c, 1, ck2) == RP_OK,
            "save");
    CHECK(rp_seq_checkpoint_restore(c, 1, ck) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "newer"),
          "%s", rp_last_error());
    CHECK(rp_seq_checkpoint_restore(c, 1, ck2) == RP_OK, "%s", rp_last_error());
    CHECK(rp_seq_checkpoint_save(c, 2, ck2) == RP_ERR_INVALID_ARG, "sequence 2 of 2");
    rp_seq_checkpoint_free(ck2);
    rp_seq_checkpoint_free(ck);
    rp_seq_checkpoint_free(ko);
    free(ref);
    rp_context_free(c);
    rp_context_free(o);
    rp_model_free(m);
}

void test_spec_checkpoint(void) {
    check_checkpoint(test_shared(QWEN35));
    /* Zamba2: Mamba2 layers and shared attention blocks */
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = "zamba2";
    sp.n_embd = 64;
    sp.n_layer = 6; /* hybrid layers at 2 and 5 */
    sp.n_head = 4;
    sp.n_ff = 96;
    sp.n_vocab = 300;
    sp.ssm_groups = 2;
    sp.adapter_rank = 8;
    const char *path = test_tmp("spec-zamba2.gguf");
    REQUIRE(rp_synth_write(&sp, path, NULL, NULL) == RP_OK, "%s", rp_last_error());
    check_checkpoint(path);
    /* attention only: the checkpoint is a truncation */
    rp_model *m;
    REQUIRE(rp_model_load(test_shared(STORIES), NULL, &m) == RP_OK, "load");
    rp_context *c = new_ctx(m, NULL, 32, 1, false);
    rp_seq_checkpoint *ck = rp_seq_checkpoint_new(c);
    int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    rp_batch b = {.n_tokens = 5, .token = t};
    CHECK(!rp_context_has_recurrent(c), "stories260K has no recurrent state");
    REQUIRE(rp_decode(c, &b) == RP_OK && rp_seq_checkpoint_save(c, 0, ck) == RP_OK, "save");
    rp_batch b2 = {.n_tokens = 3, .token = t + 5};
    REQUIRE(rp_decode(c, &b2) == RP_OK, "decode");
    CHECK(rp_seq_checkpoint_restore(c, 0, ck) == RP_OK && rp_kv_seq_len(c, 0) == 5, "%s",
          rp_last_error());
    rp_seq_checkpoint_free(ck);
    rp_context_free(c);
    rp_model_free(m);
}
