/* Scan 2 (src/eval/scan_plan.c, rp_scan_plan_eval): plans of disjoint blocks
 * (parse, canonical form, fork step), shards by end layer, and plans on a
 * base evaluated with prefix reuse equal to whole plans, in a beam's order. */
#include "eval/png_canvas.h"
#include "eval/scan.h"
#include "test.h"
#include "base/util.h"

#include <string.h>

#define STORIES "models/stories260K.gguf"
#define TEXT    "text/war-and-peace.txt"

void test_scan_plan_grammar(void) {
    rp_scan_plan p;
    char buf[RP_SCAN_PLAN_LEN];
    REQUIRE(rp_scan_plan_parse(" 26,34; 3-5 ;10,11", 64, &p) == RP_OK, "%s", rp_last_error());
    rp_scan_plan_format(&p, buf, sizeof buf);
    CHECK(p.n == 3 && !strcmp(buf, "3-5;10-11;26-34"), "canonical: %d '%s'", p.n, buf);
    CHECK(rp_scan_plan_extra(&p) == 2 + 1 + 8, "extra %d", rp_scan_plan_extra(&p));
    CHECK(rp_scan_plan_disjoint(&p, 5, 10) && !rp_scan_plan_disjoint(&p, 4, 6) &&
              !rp_scan_plan_disjoint(&p, 33, 40) && rp_scan_plan_disjoint(&p, 34, 40),
          "disjoint");
    /* the fork: a block's repeat starts after layer j-1, shifted by the blocks before it */
    CHECK(rp_scan_plan_fork(&p, 6, 9) == 9 + 2, "fork 6,9: %d", rp_scan_plan_fork(&p, 6, 9));
    CHECK(rp_scan_plan_fork(&p, 0, 2) == 2, "fork 0,2");
    CHECK(rp_scan_plan_fork(&p, 40, 50) == 50 + 11, "fork 40,50");
    rp_scan_plan q;
    REQUIRE(rp_scan_plan_add(&p, 6, 9, &q) == RP_OK, "%s", rp_last_error());
    rp_scan_plan_format(&q, buf, sizeof buf);
    CHECK(!strcmp(buf, "3-5;6-9;10-11;26-34"), "added: '%s'", buf);
    CHECK(rp_scan_plan_add(&p, 4, 6, &q) == RP_ERR_PLAN && strstr(rp_last_error(), "overlaps"),
          "overlap: %s", rp_last_error());
    REQUIRE(rp_scan_plan_parse(NULL, 5, &p) == RP_OK && p.n == 0, "NULL = identity");
    REQUIRE(rp_scan_plan_parse("  ", 5, &p) == RP_OK && p.n == 0, "blank = identity");
    rp_scan_plan_format(&p, buf, sizeof buf);
    CHECK(buf[0] == 0, "identity formats as ''");
    static const struct {
        const char *spec, *msg;
    } bad[] = {
        {"1,3;2,4", "overlaps"}, {"3,3", "i < j"},      {"1,9", "beyond the 5 layers"},
        {"1;2", "malformed"},    {"1,2;", "malformed"}, {"a,b", "malformed"},
        {"1,2,3", "malformed"},
    };
    for (size_t k = 0; k < RP_ARRAY_LEN(bad); k++)
        CHECK(rp_scan_plan_parse(bad[k].spec, 5, &p) == RP_ERR_PLAN &&
                  strstr(rp_last_error(), bad[k].msg),
              "'%s': %s", bad[k].spec, rp_last_error());
}

void test_scan_shards(void) {
    rp_scan_block *all, *b;
    int n;
    REQUIRE(rp_scan_blocks(30, 0, 30, 0, &all, &n) == RP_OK && n == 465, "blocks");
    for (int shards = 1; shards <= 7; shards += 3) {
        int seen[31][31] = {{0}}, total = 0, owner[31];
        for (int j = 0; j <= 30; j++) owner[j] = -1;
        for (int k = 1; k <= shards; k++) {
            b = malloc((size_t)n * sizeof *b);
            REQUIRE(b, "memory");
            memcpy(b, all, (size_t)n * sizeof *b);
            const int kept = rp_scan_shard(b, n, 30, k, shards);
            CHECK(kept > 0, "shard %d/%d is empty", k, shards);
            bool ordered = true;
            for (int t = 0; t < kept; t++) {
                seen[b[t].i][b[t].j]++;
                /* whole end layers: j belongs to one shard */
                CHECK(owner[b[t].j] < 0 || owner[b[t].j] == k, "j %d in two shards", b[t].j);
                owner[b[t].j] = k;
                if (t)
                    ordered &= b[t].j > b[t - 1].j || (b[t].j == b[t - 1].j && b[t].i > b[t - 1].i);
            }
            CHECK(ordered, "shard %d/%d keeps the scan's order", k, shards);
            total += kept;
            free(b);
        }
        CHECK(total == 465, "%d shards hold %d blocks", shards, total);
        bool once = true;
        for (int t = 0; t < n; t++) once &= seen[all[t].i][all[t].j] == 1;
        CHECK(once, "%d shards: every block once", shards);
    }
    free(all);
}

static rp_scan *new_scan(const rp_model *m, const rp_scan_set *set, bool reuse) {
    rp_scan_params p = {.metric = RP_SCAN_PPL,
                        .n_threads = 1,
                        .type_k = RP_TYPE_F32,
                        .type_v = RP_TYPE_F32,
                        .n_batch = 16,
                        .reuse = reuse};
    rp_scan *s = NULL;
    if (rp_scan_new(m, set, &p, &s)) fprintf(stderr, "  %s\n", rp_last_error());
    return s;
}

/* Plans on two bases (a beam's second round) with their forks, reuse on,
 * interleaved bases: each value is the whole plan's, bit for bit. */
void test_scan_plans_on_base_reuse(void) {
    rp_model *m = NULL;
    REQUIRE(rp_model_load(test_shared(STORIES), NULL, &m) == RP_OK, "%s", rp_last_error());
    size_t len, n_tok;
    char *text = test_read(test_shared(TEXT), &len);
    REQUIRE(text, "text");
    int32_t *tokens = NULL;
    REQUIRE(rp_eval_tokenize(m, text, RP_MIN(len, 4096), &tokens, &n_tok) == RP_OK, "%s",
            rp_last_error());
    free(text);
    rp_eval_windows w;
    REQUIRE(rp_eval_windows_init(&w, m, n_tok, 32, 3) == RP_OK, "%s", rp_last_error());
    rp_scan_set set;
    REQUIRE(rp_scan_set_text(&set, tokens, &w, 16) == RP_OK, "%s", rp_last_error());
    static const char *const bases[] = {"1,2", "3,5", "1,2", "0,1;2,3"};
    rp_scan_plan plans[64];
    int forks[64], np = 0;
    for (size_t b = 0; b < RP_ARRAY_LEN(bases); b++) {
        rp_scan_plan base;
        REQUIRE(rp_scan_plan_parse(bases[b], 5, &base) == RP_OK, "%s", rp_last_error());
        for (int j = 1; j <= 5; j++)
            for (int i = 0; i < j; i++)
                if (rp_scan_plan_disjoint(&base, i, j) && np < 64) {
                    REQUIRE(rp_scan_plan_add(&base, i, j, &plans[np]) == RP_OK, "add");
                    forks[np++] = rp_scan_plan_fork(&base, i, j);
                }
    }
    REQUIRE(np > 20, "%d plans", np);
    rp_scan *whole = new_scan(m, &set, false), *reuse = new_scan(m, &set, true);
    rp_scan_result r, q;
    REQUIRE(whole && reuse && rp_scan_identity(whole, &r) == RP_OK &&
                rp_scan_identity(reuse, &q) == RP_OK,
            "identity");
    for (int k = 0; k < np; k++) {
        char spec[RP_SCAN_PLAN_LEN];
        rp_scan_plan_format(&plans[k], spec, sizeof spec);
        REQUIRE(rp_scan_plan_eval(whole, &plans[k], 0, &r) == RP_OK, "%s", rp_last_error());
        REQUIRE(rp_scan_plan_eval(reuse, &plans[k], forks[k], &q) == RP_OK, "%s", rp_last_error());
        CHECK(r.value == q.value, "plan %s (fork %d): %.12g whole, %.12g with reuse", spec,
              forks[k], r.value, q.value);
    }
    CHECK(rp_scan_steps_run(reuse) < rp_scan_steps_run(whole), "reuse ran %llu steps, whole %llu",
          (unsigned long long)rp_scan_steps_run(reuse),
          (unsigned long long)rp_scan_steps_run(whole));
    rp_scan_free(whole);
    rp_scan_free(reuse);
    rp_scan_set_free(&set);
    free(tokens);
    rp_model_free(m);
}

/* The heatmap of a scan on a base: the base's cell is hatched (its colour and
 * ink stripes), a map without a base has none of that colour. */
void test_scan_heatmap_base(void) {
    const rp_scan_row rows[] = {{0, 1, 2, 0, -0.5, 0, "0-1;1-3"},
                                {3, 4, 3, 0, +0.4, 0, "1-3;3-4"},
                                {3, 5, 4, 0, -0.2, 0, "1-3;3-5"}};
    const rp_scan_plan base = {.n = 1, .b = {{1, 3}}};
    rp_heatmap h = {.rows = rows,
                    .n_rows = 3,
                    .start = 0,
                    .end = 5,
                    .sign = -1,
                    .title = "on a base",
                    .unit = "change from the base",
                    .n_best = 1,
                    .base = &base};
    int counts[2];
    for (int with = 0; with < 2; with++) {
        h.base = with ? &base : NULL;
        rp_canvas cv;
        REQUIRE(rp_heatmap_draw(&h, &cv) == RP_OK, "%s", rp_last_error());
        int n = 0;
        for (int k = 0; k < cv.w * cv.h; k++) {
            const uint8_t *p = cv.px + 3 * k;
            n += p[0] == 236 && p[1] == 226 && p[2] == 160; /* the base's colour */
        }
        counts[with] = n;
        rp_canvas_free(&cv);
    }
    CHECK(counts[0] == 0 && counts[1] > 200, "base-coloured pixels: %d without, %d with a base",
          counts[0], counts[1]);
}
