/* The plan module: grammar, expansion, validation messages. */
#include "core/plan.h"
#include "test.h"
#include "base/util.h"

#include <string.h>

static int n_eff_of(const char *spec, int n) {
    rp_plan *p;
    if (rp_plan_repeat(spec, n, n, &p)) return -1;
    int e = p->n_eff;
    rp_plan_free(p);
    return e;
}

void test_plan_rys_counts(void) {
    struct {
        const char *spec;
        int n_eff;
    } cases[] = {{"33,34", 65},     {"31,34", 67}, {"30,35", 69},       {"26,34", 72},
                 {"24,35", 75},     {"29,34", 69}, {"43,45;28,34", 72}, {"26-34", 72},
                 {" 26 , 34 ", 72}, {"0,64", 128}};
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++)
        CHECK(n_eff_of(cases[i].spec, 64) == cases[i].n_eff, "%s -> %d, want %d", cases[i].spec,
              n_eff_of(cases[i].spec, 64), cases[i].n_eff);
}

void test_plan_rys_expansion(void) {
    rp_plan *p;
    REQUIRE(rp_plan_repeat("26,34", 64, 64, &p) == RP_OK, "%s", rp_last_error());
    int want[72], k = 0;
    for (int l = 0; l < 34; l++) want[k++] = l;
    for (int l = 26; l < 34; l++) want[k++] = l;
    for (int l = 34; l < 64; l++) want[k++] = l;
    CHECK(p->n_eff == 72 && memcmp(p->src, want, sizeof want) == 0, "expansion of 26,34");
    CHECK(p->seam[34] && !p->seam[33] && !p->seam[35] && p->pass[34] == 1 && p->pass[33] == 0,
          "seams/passes");
    char buf[256];
    rp_plan_format(p, buf, sizeof buf);
    CHECK(!strcmp(buf, "0..33 | 26..63"), "format: %s", buf);
    rp_plan_free(p);
    /* two blocks, written in descending order */
    REQUIRE(rp_plan_repeat("43,45;28,34", 64, 64, &p) == RP_OK, "%s", rp_last_error());
    rp_plan_format(p, buf, sizeof buf);
    CHECK(!strcmp(buf, "0..33 | 28..44 | 43..63"), "format: %s", buf);
    CHECK(p->n_eff == 72, "n_eff");
    rp_plan_free(p);
    /* stories-sized: 1,3 on 5 layers -> 0 1 2 1 2 3 4 */
    REQUIRE(rp_plan_repeat("1,3", 5, 5, &p) == RP_OK, "%s", rp_last_error());
    int w2[] = {0, 1, 2, 1, 2, 3, 4};
    CHECK(p->n_eff == 7 && memcmp(p->src, w2, sizeof w2) == 0, "1,3 on 5");
    rp_plan_free(p);
}

static void refuse(const char *spec, int n_trunk, int n_total, const char *needle) {
    rp_plan *p = (rp_plan *)1;
    rp_status s = rp_plan_repeat(spec, n_trunk, n_total, &p);
    CHECK(s == RP_ERR_PLAN && p == NULL, "'%s' must be refused", spec);
    CHECK(strstr(rp_last_error(), needle) != NULL, "'%s': message '%s' lacks '%s'", spec,
          rp_last_error(), needle);
}

void test_plan_rys_refusals(void) {
    refuse("", 64, 64, "empty");
    refuse("26", 64, 64, "block 1 '26' is malformed");
    refuse("26,34;", 64, 64, "block 2");
    refuse("34,26", 64, 64, "empty");
    refuse("26,26", 64, 64, "empty");
    refuse("26,65", 64, 64, "beyond");
    refuse("26,34;30,40", 64, 64, "overlap");
    refuse("a,b", 64, 64, "malformed");
    refuse("1,99999999999999999999", 64, 64, "out of range");
    refuse("-1,3", 64, 64, "malformed");
    refuse("26,34,40", 64, 64, "malformed");
    refuse("6,9", 8, 9, "NextN/MTP head");
}

void test_plan_layer_map(void) {
    rp_plan *p;
    REQUIRE(rp_plan_map("0..15,11..31", 32, 32, &p) == RP_OK, "%s", rp_last_error());
    CHECK(p->n_eff == 37 && p->src[16] == 11 && p->seam[16] && p->src[36] == 31, "exllama map");
    rp_plan_free(p);
    REQUIRE(rp_plan_map("0,1,2,2,3", 4, 4, &p) == RP_OK, "%s", rp_last_error());
    int w[] = {0, 1, 2, 2, 3};
    CHECK(p->n_eff == 5 && memcmp(p->src, w, sizeof w) == 0 && p->pass[3] == 1, "explicit list");
    rp_plan_free(p);
    REQUIRE(rp_plan_map("0..9,14..27", 28, 28, &p) == RP_OK, "%s", rp_last_error());
    CHECK(p->n_eff == 24, "skip plan");
    rp_plan_free(p);
    p = (rp_plan *)1;
    CHECK(rp_plan_map("0..40", 32, 32, &p) == RP_ERR_PLAN && !p &&
              strstr(rp_last_error(), "item 1"),
          "%s", rp_last_error());
    CHECK(rp_plan_map("5..2", 32, 32, &p) == RP_ERR_PLAN && strstr(rp_last_error(), "backwards"),
          "%s", rp_last_error());
    CHECK(rp_plan_map("0,,1", 32, 32, &p) == RP_ERR_PLAN && strstr(rp_last_error(), "item 2"), "%s",
          rp_last_error());
    CHECK(rp_plan_map("0..8", 8, 9, &p) == RP_ERR_PLAN && strstr(rp_last_error(), "NextN"), "%s",
          rp_last_error());
}

void test_plan_boundary_warning(void) {
    rp_plan *p;
    int band;
    REQUIRE(rp_plan_repeat("26,34", 64, 64, &p) == RP_OK, "ok");
    CHECK(rp_plan_boundary_repeats(p, &band) == 0 && band == 8, "middle block: no warning");
    rp_plan_free(p);
    REQUIRE(rp_plan_repeat("1,3", 64, 64, &p) == RP_OK, "ok");
    CHECK(rp_plan_boundary_repeats(p, &band) == 2, "first layers warn");
    rp_plan_free(p);
    REQUIRE(rp_plan_repeat("62,64", 64, 64, &p) == RP_OK, "ok");
    CHECK(rp_plan_boundary_repeats(p, &band) == 2, "last layers warn");
    rp_plan_free(p);
    REQUIRE(rp_plan_identity(64, &p) == RP_OK, "ok");
    CHECK(rp_plan_is_identity(p) && rp_plan_boundary_repeats(p, &band) == 0, "identity");
    rp_plan_free(p);
}
