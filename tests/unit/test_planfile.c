/* Plan files and content hashes: what the hash covers, the stamp written
 * while a file is written, the cache beside a model, the plan-file format
 * (round trip, every refusal naming its field) and the identity check. */
#include "core/context.h"
#include "format/gguf.h"
#include "core/model.h"
#include "core/plan.h"
#include "core/planfile.h"
#include "test.h"
#include "base/util.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small GGUF files ----------------------------------------------------- */

typedef struct tiny_spec {
    bool swap_order; /* tensors in the other order */
    bool other_meta; /* another general.name, an extra key */
    bool other_data; /* one value of b differs */
    bool other_type; /* b stored as i32 (same bytes, another type) */
    bool stamp;      /* reprise.content_hash written while writing */
    bool fill_b;     /* b's bytes come from a fill callback */
} tiny_spec;

static float g_a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
static float g_b[4] = {0.5f, -1, 2, 1e-3f};

static rp_status fill_b(void *user, uint64_t index, void *dst, uint64_t nbytes) {
    (void)user;
    (void)index;
    memcpy(dst, g_b, (size_t)nbytes);
    return RP_OK;
}

static rp_status write_tiny(const char *path, const tiny_spec *t) {
    rp_gguf_writer *w = rp_gguf_writer_new();
    if (!w) return RP_ERR_NOMEM;
    float b[4];
    memcpy(b, g_b, sizeof b);
    if (t->other_data) b[2] = 2.5f;
    int64_t ne_a[2] = {4, 2}, ne_b[1] = {4};
    rp_status s = rp_gguf_w_set_str(w, "general.architecture", "llama");
    if (!s) s = rp_gguf_w_set_str(w, "general.name", t->other_meta ? "renamed" : "tiny");
    if (!s && t->other_meta) s = rp_gguf_w_set_u32(w, "extra.key", 7);
    const void *bd = t->fill_b ? NULL : b;
    int bt = t->other_type ? RP_TYPE_I32 : RP_TYPE_F32;
    if (t->swap_order) {
        if (!s) s = rp_gguf_w_add_tensor(w, "b", bt, 1, ne_b, bd);
        if (!s) s = rp_gguf_w_add_tensor(w, "a", RP_TYPE_F32, 2, ne_a, g_a);
    } else {
        if (!s) s = rp_gguf_w_add_tensor(w, "a", RP_TYPE_F32, 2, ne_a, g_a);
        if (!s) s = rp_gguf_w_add_tensor(w, "b", bt, 1, ne_b, bd);
    }
    if (t->fill_b) rp_gguf_w_set_fill(w, fill_b, NULL);
    if (!s && t->stamp) s = rp_content_hash_stamp(w);
    if (!s) s = rp_gguf_w_write(w, path, NULL, NULL);
    rp_gguf_writer_free(w);
    return s;
}

/* The hash computed from every byte of the file at path ("" on failure). */
static void hash_of(const char *path, rp_content_hash *h) {
    memset(h, 0, sizeof *h);
    rp_gguf *g;
    if (rp_gguf_open(path, &g)) return;
    if (rp_content_hash_compute(g, 1, NULL, NULL, h)) h->hash[0] = 0;
    rp_gguf_close(g);
}

void test_planfile_hash_covers_tensors_not_metadata(void) {
    const char *p0 = test_tmp("h0.gguf"), *p1 = test_tmp("h1.gguf");
    tiny_spec base = {0};
    REQUIRE(write_tiny(p0, &base) == RP_OK, "%s", rp_last_error());
    rp_content_hash h0, h1;
    hash_of(p0, &h0);
    REQUIRE(rp_content_hash_valid(h0.hash), "hash '%s'", h0.hash);
    CHECK(strncmp(h0.table, "xxh3-64:", 8) == 0 && strlen(h0.table) == RP_TABLE_HASH_LEN,
          "table '%s'", h0.table);
    /* same weights, other metadata and another tensor order: same hash */
    tiny_spec same[] = {{.swap_order = true}, {.other_meta = true}, {.fill_b = true}};
    for (size_t i = 0; i < RP_ARRAY_LEN(same); i++) {
        REQUIRE(write_tiny(p1, &same[i]) == RP_OK, "%s", rp_last_error());
        hash_of(p1, &h1);
        CHECK(!strcmp(h0.hash, h1.hash) && !strcmp(h0.table, h1.table), "case %zu: %s vs %s", i,
              h0.hash, h1.hash);
    }
    /* one value differs: another content hash, the same table */
    tiny_spec data = {.other_data = true};
    REQUIRE(write_tiny(p1, &data) == RP_OK, "%s", rp_last_error());
    hash_of(p1, &h1);
    CHECK(rp_content_hash_valid(h1.hash) && strcmp(h0.hash, h1.hash) && !strcmp(h0.table, h1.table),
          "data change: %s %s / %s %s", h0.hash, h0.table, h1.hash, h1.table);
    /* the same bytes as another type: both hashes change */
    tiny_spec type = {.other_type = true};
    REQUIRE(write_tiny(p1, &type) == RP_OK, "%s", rp_last_error());
    hash_of(p1, &h1);
    CHECK(rp_content_hash_valid(h1.hash) && strcmp(h0.hash, h1.hash) && strcmp(h0.table, h1.table),
          "type change: %s %s / %s %s", h0.hash, h0.table, h1.hash, h1.table);
    /* threads do not change the result */
    rp_gguf *g;
    REQUIRE(rp_gguf_open(p0, &g) == RP_OK, "%s", rp_last_error());
    rp_content_hash h4;
    CHECK(rp_content_hash_compute(g, 4, NULL, NULL, &h4) == RP_OK && !strcmp(h4.hash, h0.hash),
          "4 threads: %s", h4.hash);
    rp_gguf_close(g);
}

static bool cancel_at_once(float p, void *user) {
    (void)p;
    (void)user;
    return false;
}

void test_planfile_hash_cancel(void) {
    const char *p0 = test_tmp("hc.gguf");
    tiny_spec base = {0};
    REQUIRE(write_tiny(p0, &base) == RP_OK, "%s", rp_last_error());
    rp_gguf *g;
    REQUIRE(rp_gguf_open(p0, &g) == RP_OK, "%s", rp_last_error());
    rp_content_hash h;
    CHECK(rp_content_hash_compute(g, 1, cancel_at_once, NULL, &h) == RP_ERR_CANCELLED, "cancel: %s",
          rp_last_error());
    rp_gguf_close(g);
}

void test_planfile_hash_stamp(void) {
    const char *plain = test_tmp("s0.gguf"), *stamped = test_tmp("s1.gguf");
    tiny_spec a = {0}, b = {.stamp = true, .fill_b = true, .swap_order = true};
    REQUIRE(write_tiny(plain, &a) == RP_OK, "%s", rp_last_error());
    REQUIRE(write_tiny(stamped, &b) == RP_OK, "%s", rp_last_error());
    rp_content_hash h0;
    hash_of(plain, &h0);
    rp_gguf *g;
    REQUIRE(rp_gguf_open(stamped, &g) == RP_OK, "%s", rp_last_error());
    const char *key = NULL, *table = NULL;
    CHECK(rp_gguf_get_str(g, RP_CONTENT_HASH_KEY, &key, NULL) == RP_OK && key &&
              !strcmp(key, h0.hash),
          "stamped %s, computed %s", key ? key : "(none)", h0.hash);
    CHECK(rp_gguf_get_str(g, RP_CONTENT_HASH_TABLE_KEY, &table, NULL) == RP_OK && table &&
              !strcmp(table, h0.table),
          "table %s vs %s", table ? table : "(none)", h0.table);
    rp_content_hash h;
    CHECK(rp_content_hash_get(g, NULL, NULL, &h) == RP_OK && h.source == RP_HASH_METADATA &&
              !strcmp(h.hash, h0.hash),
          "get: %s from %s", h.hash, rp_hash_source_name(h.source));
    rp_gguf_close(g);
    struct stat st;
    char cache[1200];
    snprintf(cache, sizeof cache, "%s%s", stamped, RP_CONTENT_HASH_CACHE_EXT);
    CHECK(stat(cache, &st) != 0, "a stamped file needs no cache file");
}

void test_planfile_hash_stamp_too_early(void) {
    const char *path = test_tmp("early.gguf");
    rp_gguf_writer *w = rp_gguf_writer_new();
    REQUIRE(w, "writer");
    int64_t ne[1] = {4};
    REQUIRE(rp_gguf_w_add_tensor(w, "b", RP_TYPE_F32, 1, ne, g_b) == RP_OK, "%s", rp_last_error());
    REQUIRE(rp_content_hash_stamp(w) == RP_OK, "%s", rp_last_error());
    REQUIRE(rp_gguf_w_add_tensor(w, "c", RP_TYPE_F32, 1, ne, g_b) == RP_OK, "%s", rp_last_error());
    rp_status s = rp_gguf_w_write(w, path, NULL, NULL);
    CHECK(s == RP_ERR_INTERNAL && strstr(rp_last_error(), "before every tensor"), "%d %s", s,
          rp_last_error());
    CHECK(access(path, F_OK) != 0, "a failed write leaves nothing");
    rp_gguf_writer_free(w);
}

/* A tool that copies every key (as llama.cpp's quantizer does) but writes
 * other tensors leaves a stale content hash behind: it must not be trusted. */
void test_planfile_hash_stale_metadata(void) {
    const char *stamped = test_tmp("st0.gguf"), *copy = test_tmp("st1.gguf");
    tiny_spec a = {.stamp = true};
    REQUIRE(write_tiny(stamped, &a) == RP_OK, "%s", rp_last_error());
    rp_gguf *g;
    REQUIRE(rp_gguf_open(stamped, &g) == RP_OK, "%s", rp_last_error());
    rp_gguf_writer *w = rp_gguf_writer_new();
    REQUIRE(w && rp_gguf_w_copy_kv(w, g) == RP_OK, "copy");
    int64_t ne[1] = {8};
    REQUIRE(rp_gguf_w_add_tensor(w, "a", RP_TYPE_F32, 1, ne, g_a) == RP_OK, "%s",
            rp_last_error()); /* reshaped */
    REQUIRE(rp_gguf_w_write(w, copy, NULL, NULL) == RP_OK, "%s", rp_last_error());
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
    rp_content_hash truth;
    hash_of(copy, &truth);
    REQUIRE(rp_gguf_open(copy, &g) == RP_OK, "%s", rp_last_error());
    const char *key = NULL;
    rp_gguf_get_str(g, RP_CONTENT_HASH_KEY, &key, NULL);
    REQUIRE(key && strcmp(key, truth.hash), "the copy carries the old stamp");
    rp_content_hash h;
    CHECK(rp_content_hash_get(g, NULL, NULL, &h) == RP_OK && h.source != RP_HASH_METADATA &&
              !strcmp(h.hash, truth.hash),
          "stale stamp used: %s from %s (true %s)", h.hash, rp_hash_source_name(h.source),
          truth.hash);
    rp_gguf_close(g);
}

static rp_status get_hash(const char *path, rp_content_hash *h) {
    rp_gguf *g;
    rp_status s = rp_gguf_open(path, &g);
    if (s) return s;
    s = rp_content_hash_get(g, NULL, NULL, h);
    rp_gguf_close(g);
    return s;
}

void test_planfile_hash_cache(void) {
    const char *dir = test_tmp("cachedir");
    mkdir(dir, 0755);
    char model[1100], cache[1200];
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    snprintf(cache, sizeof cache, "%s%s", model, RP_CONTENT_HASH_CACHE_EXT);
    unlink(cache);
    tiny_spec a = {0}, b = {.other_data = true};
    REQUIRE(write_tiny(model, &a) == RP_OK, "%s", rp_last_error());
    rp_content_hash h1, h2, h3;
    REQUIRE(get_hash(model, &h1) == RP_OK, "%s", rp_last_error());
    CHECK(h1.source == RP_HASH_COMPUTED && h1.cached && !strcmp(h1.cache_path, cache),
          "first: %s cached %d at %s (%s)", rp_hash_source_name(h1.source), h1.cached,
          h1.cache_path, h1.cache_note);
    REQUIRE(get_hash(model, &h2) == RP_OK, "%s", rp_last_error());
    CHECK(h2.source == RP_HASH_CACHE && !strcmp(h1.hash, h2.hash), "second: %s",
          rp_hash_source_name(h2.source));
    /* the file is replaced by other weights of the same size: the cache is stale */
    REQUIRE(write_tiny(model, &b) == RP_OK, "%s", rp_last_error());
    REQUIRE(get_hash(model, &h3) == RP_OK, "%s", rp_last_error());
    CHECK(h3.source == RP_HASH_COMPUTED && strcmp(h3.hash, h1.hash), "after rewrite: %s %s",
          rp_hash_source_name(h3.source), h3.hash);
    /* a malformed cache file is replaced */
    FILE *fp = fopen(cache, "w");
    REQUIRE(fp, "open cache");
    fputs("{not json", fp);
    fclose(fp);
    REQUIRE(get_hash(model, &h2) == RP_OK, "%s", rp_last_error());
    CHECK(h2.source == RP_HASH_COMPUTED && h2.cached && !strcmp(h2.hash, h3.hash),
          "malformed cache: %s", rp_hash_source_name(h2.source));
    REQUIRE(get_hash(model, &h2) == RP_OK && h2.source == RP_HASH_CACHE, "cache rewritten");
    /* a read-only folder: computed every time, nothing written, and why */
    unlink(cache);
    REQUIRE(chmod(dir, 0555) == 0, "chmod");
    rp_status s = get_hash(model, &h2);
    chmod(dir, 0755);
    CHECK(s == RP_OK && h2.source == RP_HASH_COMPUTED && !h2.cached &&
              strstr(h2.cache_note, "read-only") && !strcmp(h2.hash, h3.hash),
          "read-only: %s cached %d note '%s'", rp_hash_source_name(h2.source), h2.cached,
          h2.cache_note);
    CHECK(access(cache, F_OK) != 0, "no cache file in a read-only folder");
}

/* ---- plan files ---------------------------------------------------------- */

static rp_model *load_stories(void) {
    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    if (rp_model_load(test_shared("models/stories260K.gguf"), &mp, &m)) return NULL;
    return m;
}

static const char *H1 = "xxh3-128:0123456789abcdef0123456789abcdef";
static const char *H2 = "xxh3-128:ffffffffffffffffffffffffffffffff";

void test_planfile_round_trip(void) {
    rp_model *m = load_stories();
    REQUIRE(m, "%s", rp_last_error());
    struct {
        int kind;
        const char *spec;
        int n_eff;
    } cases[] = {
        {RP_PLAN_REPEAT, "1,3", 7}, {RP_PLAN_REPEAT, "3,4;0-1", 7}, {RP_PLAN_MAP, "0..4,2..4", 8}};
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
        rp_planfile *pf, *back;
        REQUIRE(rp_planfile_new(m, H1, "rys-s", "a \"quoted\" description\nwith a newline",
                                cases[i].kind, cases[i].spec, &pf) == RP_OK,
                "%s", rp_last_error());
        CHECK(pf->n_eff == cases[i].n_eff && pf->n_layer == 5 && !strcmp(pf->arch, "llama"),
              "new %zu", i);
        const char *path = test_tmp("rt.json");
        REQUIRE(rp_planfile_write(pf, path) == RP_OK, "%s", rp_last_error());
        REQUIRE(rp_planfile_read(path, &back) == RP_OK, "%s", rp_last_error());
        CHECK(!strcmp(back->name, pf->name) && !strcmp(back->description, pf->description) &&
                  back->kind == pf->kind && !strcmp(back->spec, pf->spec) &&
                  back->n_eff == pf->n_eff && !strcmp(back->arch, pf->arch) &&
                  back->n_layer == pf->n_layer && !strcmp(back->content_hash, pf->content_hash) &&
                  !strcmp(back->base_file, "stories260K.gguf") &&
                  !strcmp(back->base_name, pf->base_name) &&
                  !strcmp(back->created_by, "reprise " RP_VERSION),
              "case %zu differs after the round trip", i);
        char *a = rp_planfile_to_json(pf), *b = rp_planfile_to_json(back);
        CHECK(a && b && !strcmp(a, b), "JSON differs:\n%s\n%s", a, b);
        free(a);
        free(b);
        rp_planfile_free(pf);
        rp_planfile_free(back);
    }
    /* a minimal hand-written file (no optional fields) reads */
    const char *minimal =
        "{\"format\":\"reprise-plan\",\"version\":1,\"name\":\"x\",\"layer_map\":\"0,1,1,2\","
        "\"base_model\":{\"architecture\":\"llama\",\"n_layer\":3,\"content_hash\":"
        "\"xxh3-128:0123456789abcdef0123456789abcdef\"}}";
    rp_planfile *pf;
    REQUIRE(rp_planfile_parse(minimal, strlen(minimal), "minimal", &pf) == RP_OK, "%s",
            rp_last_error());
    CHECK(pf->kind == RP_PLAN_MAP && pf->n_eff == 4 && !*pf->description && !pf->base_file &&
              !pf->created_by,
          "minimal");
    rp_planfile_free(pf);
    /* refusals of the constructor */
    CHECK(rp_planfile_new(m, H1, "bad name", NULL, RP_PLAN_REPEAT, "1,3", &pf) ==
                  RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "not usable"),
          "%s", rp_last_error());
    CHECK(rp_planfile_new(m, H1, "ok", NULL, RP_PLAN_REPEAT, "4,9", &pf) == RP_ERR_PLAN &&
              strstr(rp_last_error(), "block 1 '4,9'"),
          "%s", rp_last_error());
    CHECK(rp_planfile_new(m, "xxh3-128:zz", "ok", NULL, RP_PLAN_REPEAT, "1,3", &pf) ==
              RP_ERR_INVALID_ARG,
          "hash");
    rp_model_free(m);
}

void test_planfile_malformed(void) {
#define BASE                                                                                       \
    "\"base_model\":{\"architecture\":\"llama\",\"n_layer\":5,\"content_hash\":\""                 \
    "xxh3-128:0123456789abcdef0123456789abcdef\"}"
#define HEAD "\"format\":\"reprise-plan\",\"version\":1,"
    struct {
        const char *text, *needle;
    } cases[] = {
        {"{\"format\": ", "malformed JSON at line 1"},
        {"[1,2]", "expected a JSON object, got an array"},
        {"{\"version\":1}", "missing field 'format'"},
        {"{\"format\":\"gguf\",\"version\":1}", "field 'format' is 'gguf'"},
        {"{\"format\":\"reprise-plan\",\"version\":\"1\"}",
         "field 'version' must be an integer, got a string"},
        {"{\"format\":\"reprise-plan\",\"version\":2}",
         "field 'version' is 2; this reprise reads version 1"},
        {"{\"format\":\"reprise-plan\",\"version\":0}", "field 'version' is 0, outside"},
        {"{" HEAD "\"repeat_layers\":\"1,3\"," BASE "}", "missing field 'name'"},
        {"{" HEAD "\"name\":7,\"repeat_layers\":\"1,3\"," BASE "}",
         "field 'name' must be a string, got an integer"},
        {"{" HEAD "\"name\":\"a b\",\"repeat_layers\":\"1,3\"," BASE "}",
         "field 'name' 'a b' is not usable"},
        {"{" HEAD "\"name\":\"a\",\"repeat-layers\":\"1,3\"," BASE "}",
         "unknown field 'repeat-layers'"},
        {"{" HEAD "\"name\":\"a\"," BASE "}", "missing field 'repeat_layers' (or 'layer_map')"},
        {"{" HEAD "\"name\":\"a\",\"repeat_layers\":\"1,3\",\"layer_map\":\"0,1\"," BASE "}",
         "'repeat_layers' and 'layer_map' are alternatives"},
        {"{" HEAD "\"name\":\"a\",\"repeat_layers\":[1,3]," BASE "}",
         "field 'repeat_layers' must be a string, got an array"},
        {"{" HEAD "\"name\":\"a\",\"repeat_layers\":\"1,3\"}", "missing field 'base_model'"},
        {"{" HEAD "\"name\":\"a\",\"repeat_layers\":\"1,3\",\"base_model\":5}",
         "field 'base_model' must be an object"},
        {"{" HEAD "\"name\":\"a\",\"repeat_layers\":\"1,3\",\"base_model\":{\"n_layer\":5}}",
         "missing field 'base_model.architecture'"},
        {"{" HEAD "\"name\":\"a\",\"repeat_layers\":\"1,3\",\"base_model\":{\"architecture\":"
         "\"llama\",\"n_layer\":\"5\"}}",
         "field 'base_model.n_layer' must be an integer, got a string"},
        {"{" HEAD "\"name\":\"a\",\"repeat_layers\":\"1,3\",\"base_model\":{\"architecture\":"
         "\"llama\",\"n_layer\":5}}",
         "missing field 'base_model.content_hash'"},
        {"{" HEAD "\"name\":\"a\",\"repeat_layers\":\"1,3\",\"base_model\":{\"architecture\":"
         "\"llama\",\"n_layer\":5,"
         "\"content_hash\":\"md5:abc\"}}",
         "field 'base_model.content_hash' 'md5:abc' is malformed"},
        {"{" HEAD "\"name\":\"a\",\"repeat_layers\":\"1,3\",\"base_model\":{\"architecture\":"
         "\"llama\",\"n_layer\":5,"
         "\"content_hash\":\"xxh3-128:0123456789abcdef0123456789abcdef\",\"layers\":5}}",
         "unknown field 'base_model.layers'"},
        {"{" HEAD "\"name\":\"a\",\"repeat_layers\":\"4,9\"," BASE "}",
         "field 'repeat_layers' on the base model's 5 layers: --repeat-layers: block 1 '4,9'"},
        {"{" HEAD "\"name\":\"a\",\"layer_map\":\"0..7\"," BASE "}",
         "field 'layer_map' on the base model's 5 layers"},
        {"{" HEAD "\"name\":\"a\",\"repeat_layers\":\"1,3\",\"n_eff\":8," BASE "}",
         "field 'n_eff' is 8, but the spec builds 7 steps on 5 layers"},
        {"{" HEAD "\"name\":\"a\",\"name\":\"b\",\"repeat_layers\":\"1,3\"," BASE "}",
         "malformed JSON"},
    };
#undef BASE
#undef HEAD
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
        rp_planfile *pf = (rp_planfile *)1;
        rp_status s = rp_planfile_parse(cases[i].text, strlen(cases[i].text), "'t.json'", &pf);
        CHECK(s != RP_OK && pf == NULL, "case %zu accepted: %s", i, cases[i].text);
        CHECK(strstr(rp_last_error(), cases[i].needle) &&
                  strstr(rp_last_error(), "plan file 't.json'"),
              "case %zu: '%s' lacks '%s'", i, rp_last_error(), cases[i].needle);
    }
    rp_planfile *pf;
    CHECK(rp_planfile_read(test_tmp("no-such-plan.json"), &pf) == RP_ERR_IO &&
              strstr(rp_last_error(), "cannot open"),
          "%s", rp_last_error());
}

void test_planfile_check(void) {
    rp_model *m = load_stories();
    REQUIRE(m, "%s", rp_last_error());
    rp_planfile *pf;
    REQUIRE(rp_planfile_new(m, H1, "p", NULL, RP_PLAN_REPEAT, "1,3", &pf) == RP_OK, "%s",
            rp_last_error());
    bool forced = true;
    CHECK(rp_planfile_check(pf, m, H1, false, &forced) == RP_OK && !forced, "same weights: %s",
          rp_last_error());
    /* another content hash: refused, or accepted with force */
    CHECK(rp_planfile_check(pf, m, H2, false, &forced) == RP_ERR_PLAN && !forced &&
              strstr(rp_last_error(), "the content hash differs") &&
              strstr(rp_last_error(), "--plan-force applies"),
          "%s", rp_last_error());
    CHECK(rp_planfile_check(pf, m, H2, true, &forced) == RP_OK && forced, "forced: %s",
          rp_last_error());
    /* another layer count or architecture: refused even with force */
    pf->n_layer = 6;
    CHECK(rp_planfile_check(pf, m, H1, true, &forced) == RP_ERR_PLAN &&
              strstr(rp_last_error(), "layer count differs") &&
              strstr(rp_last_error(), "with 6 layers"),
          "%s", rp_last_error());
    pf->n_layer = 5;
    free(pf->arch);
    pf->arch = rp_strdup("qwen3");
    CHECK(rp_planfile_check(pf, m, H1, true, &forced) == RP_ERR_PLAN &&
              strstr(rp_last_error(), "architecture differs") && strstr(rp_last_error(), "qwen3"),
          "%s", rp_last_error());
    rp_planfile_free(pf);
    rp_model_free(m);
}

/* A server's entries: contexts with different plans over one model, decoded
 * one after the other on one shared thread pool, give exactly what contexts
 * of their own give. */
void test_planfile_contexts_share_pool(void) {
    rp_model *m = load_stories();
    REQUIRE(m, "%s", rp_last_error());
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    const char *specs[2] = {NULL, "1,3"};
    rp_context *own[2] = {0}, *shared[2] = {0};
    for (int i = 0; i < 2; i++) {
        cp.repeat_layers = specs[i];
        REQUIRE(rp_context_new(m, &cp, &own[i]) == RP_OK &&
                    rp_context_new(m, &cp, &shared[i]) == RP_OK,
                "%s", rp_last_error());
    }
    CHECK(rp_context_share_pool(shared[1], shared[0]) == RP_OK, "%s", rp_last_error());
    const int32_t toks[6] = {1, 403, 407, 261, 378, 300};
    const int nv = rp_n_vocab(own[0]);
    for (int step = 0; step < 6; step++) {
        for (int i = 0; i < 2; i++) {
            rp_batch b = {.n_tokens = 1, .token = &toks[step]};
            REQUIRE(rp_decode(own[i], &b) == RP_OK && rp_decode(shared[i], &b) == RP_OK, "%s",
                    rp_last_error());
            const float *a = rp_get_logits(own[i], 0), *c = rp_get_logits(shared[i], 0);
            CHECK(a && c && memcmp(a, c, (size_t)nv * sizeof *a) == 0,
                  "plan %d step %d: logits differ", i, step);
        }
    }
    /* another thread count cannot share: the scratch is sized by it */
    rp_context *one = NULL;
    cp.n_threads = 1;
    cp.repeat_layers = NULL;
    REQUIRE(rp_context_new(m, &cp, &one) == RP_OK, "%s", rp_last_error());
    CHECK(rp_context_share_pool(one, shared[0]) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "1 and 2 threads"),
          "%s", rp_last_error());
    rp_context_free(one);
    rp_context_free(shared[1]); /* the borrower first */
    for (int i = 0; i < 2; i++) rp_context_free(own[i]);
    rp_context_free(shared[0]);
    rp_model_free(m);
}
