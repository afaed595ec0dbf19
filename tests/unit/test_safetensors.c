/* safetensors reader: values of every float dtype at any alignment, sharded
 * checkpoints, crafted malformed headers (each refused with a message that
 * names the problem and a byte offset), and robustness against truncated and
 * bit-flipped files. */
#include "format/safetensors.h"
#include "test.h"
#include "base/util.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define FIX "tests/fixtures/hf"

/* 8-byte little-endian header length, header, data */
static uint8_t *st_buf(const char *header, const void *data, size_t n_data, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + n_data;
    uint8_t *b = malloc(*len ? *len : 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    if (n_data) memcpy(b + 8 + h, data, n_data);
    return b;
}

static bool write_file(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return false;
    bool ok = fwrite(p, 1, n, fp) == n;
    return fclose(fp) == 0 && ok;
}

/* F32, F16 and BF16 values read back exactly, also from odd offsets (a
 * header of odd length puts 16-bit data at odd addresses). */
void test_safetensors_values(void) {
    uint8_t data[4 * 3 + 2 * 3 + 2 * 3];
    float f[3] = {1.5f, -2.25f, 1e-3f};
    uint16_t h[3] = {0x3c00 /* 1 */, 0xc000 /* -2 */, 0x3555 /* 0.333251953125 */};
    uint16_t bf[3] = {0x3f80 /* 1 */, 0xc040 /* -3 */, 0x3e80 /* 0.25 */};
    memcpy(data, f, 12);
    memcpy(data + 12, h, 6);
    memcpy(data + 18, bf, 6);
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                      "\"b\":{\"dtype\":\"F16\",\"shape\":[1,3],\"data_offsets\":[12,18]},"
                      "\"c\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[18,24]},"
                      "\"__metadata__\":{\"format\":\"pt\"}}  ";
    char padded[400];
    snprintf(padded, sizeof padded, "%.*s", (int)(strlen(hdr) - (strlen(hdr) % 2 == 0)),
             hdr); /* odd length */
    size_t n;
    uint8_t *buf = st_buf(padded, data, sizeof data, &n);
    rp_st *st;
    REQUIRE(rp_st_open_mem(buf, n, &st) == RP_OK, "%s", rp_last_error());
    CHECK(rp_st_n_tensors(st) == 3, "3 tensors");
    CHECK(rp_st_metadata(st, "format") && !strcmp(rp_st_metadata(st, "format"), "pt"), "metadata");
    float out[3];
    const rp_st_tensor *t = rp_st_find(st, "a");
    CHECK(t && t->type == RP_TYPE_F32 && t->n_dims == 1 && rp_st_read_f32(t, 0, 3, out) == RP_OK &&
              out[0] == 1.5f && out[1] == -2.25f && out[2] == 1e-3f,
          "f32 values");
    t = rp_st_find(st, "b");
    CHECK(t && t->type == RP_TYPE_F16 && t->n_dims == 2 && t->shape[1] == 3, "f16 shape");
    CHECK(t && rp_st_read_f32(t, 1, 2, out) == RP_OK && out[0] == -2.0f &&
              out[1] == 0.333251953125f,
          "f16 values from element 1");
    t = rp_st_find(st, "c");
    CHECK(t && (((uintptr_t)t->data) & 1) && rp_st_read_f32(t, 0, 3, out) == RP_OK &&
              out[0] == 1.0f && out[1] == -3.0f && out[2] == 0.25f,
          "bf16 values at an odd address");
    CHECK(t && rp_st_read_f32(t, 2, 2, out) == RP_ERR_INVALID_ARG, "read past the end refused");
    CHECK(rp_st_find(st, "zz") == NULL, "absent name");
    rp_st_close(st);
    free(buf);
}

/* A dtype reprise does not convert is listed (its bytes are checked) and
 * refused by name when read. */
void test_safetensors_other_dtypes(void) {
    uint8_t data[16 + 1] = {0};
    const char *hdr = "{\"pos\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                      "\"q\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[16,17]}}";
    size_t n;
    uint8_t *buf = st_buf(hdr, data, sizeof data, &n);
    rp_st *st;
    REQUIRE(rp_st_open_mem(buf, n, &st) == RP_OK, "%s", rp_last_error());
    const rp_st_tensor *t = rp_st_find(st, "pos");
    float out[2];
    CHECK(t && t->type == -1 && !strcmp(t->dtype, "I64"), "I64 listed");
    CHECK(t && rp_st_read_f32(t, 0, 2, out) == RP_ERR_UNSUPPORTED &&
              strstr(rp_last_error(), "'pos'") && strstr(rp_last_error(), "I64"),
          "read refused naming the tensor: %s", rp_last_error());
    rp_st_close(st);
    free(buf);
}

typedef struct bad_case {
    const char *header;
    size_t n_data;
    const char *want; /* substring of the message */
} bad_case;

void test_safetensors_rejects(void) {
    static const bad_case cases[] = {
        {"[1]", 0, "does not start with '{'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "header JSON"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{}}", 4,
         "duplicate"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "unknown dtype 'F33'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "need"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "beyond the end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end before"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets"},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
         "belong to no tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6,
         "belong to no tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":["
         "0,4]}}",
         4, "overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         "dimensions"},
        {"{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
         "whole number of bytes"},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "not a string"},
        {"{\"a\":[1,2]}", 0, "not an object"},
    };
    uint8_t zeros[16] = {0};
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
        size_t n;
        uint8_t *buf = st_buf(cases[i].header, zeros, cases[i].n_data, &n);
        rp_st *st = NULL;
        rp_status s = rp_st_open_mem(buf, n, &st);
        CHECK(s == RP_ERR_FORMAT && strstr(rp_last_error(), cases[i].want) &&
                  strstr(rp_last_error(), "byte offset"),
              "case %zu: status %d, message '%s'", i, s, rp_last_error());
        CHECK(st == NULL, "case %zu: no set on failure", i);
        rp_st_close(st);
        free(buf);
    }
    /* the header length itself */
    uint8_t tiny[4] = {1, 0, 0, 0};
    rp_st *st;
    CHECK(rp_st_open_mem(tiny, 4, &st) == RP_ERR_FORMAT && strstr(rp_last_error(), "truncated"),
          "short file: %s", rp_last_error());
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    CHECK(rp_st_open_mem(huge, sizeof huge, &st) == RP_ERR_FORMAT &&
              strstr(rp_last_error(), "exceeds"),
          "header length beyond the file: %s", rp_last_error());
    CHECK(rp_st_open("/nonexistent.safetensors", &st) == RP_ERR_IO, "missing file");
    /* an empty checkpoint is valid */
    size_t n;
    uint8_t *buf = st_buf("{}", NULL, 0, &n);
    CHECK(rp_st_open_mem(buf, n, &st) == RP_OK && rp_st_n_tensors(st) == 0, "empty set: %s",
          rp_last_error());
    rp_st_close(st);
    free(buf);
}

/* The Hugging Face fixtures: single files and a four-shard checkpoint. */
void test_safetensors_fixtures(void) {
    static const struct {
        const char *name;
        uint64_t n_tensors;
        uint32_t n_files;
        int type;
    } fx[] = {{"llama", 21, 1, RP_TYPE_F32},
              {"qwen2", 27, 4, RP_TYPE_BF16},
              {"qwen3", 24, 1, RP_TYPE_F32},
              {"gemma3", 80, 1, RP_TYPE_F16}};
    for (size_t i = 0; i < RP_ARRAY_LEN(fx); i++) {
        char dir[256];
        snprintf(dir, sizeof dir, FIX "/%s", fx[i].name);
        rp_st *st;
        rp_status s = rp_st_open_dir(dir, &st);
        CHECK(s == RP_OK, "%s: %s", dir, rp_last_error());
        if (s) continue;
        CHECK(rp_st_n_tensors(st) == fx[i].n_tensors && rp_st_n_files(st) == fx[i].n_files,
              "%s: %llu tensors in %u files", dir, (unsigned long long)rp_st_n_tensors(st),
              rp_st_n_files(st));
        const rp_st_tensor *e = rp_st_find(st, "model.embed_tokens.weight");
        CHECK(e && e->type == fx[i].type && e->n_dims == 2 && e->shape[1] == 64, "%s: embedding",
              dir);
        float *v = e ? malloc((size_t)e->n_elem * sizeof *v) : NULL;
        CHECK(v && rp_st_read_f32(e, 0, e->n_elem, v) == RP_OK, "%s: read", dir);
        double ss = 0;
        for (uint64_t k = 0; v && k < e->n_elem; k++) ss += (double)v[k] * v[k];
        /* N(0,1) embeddings: the mean square is about 1 */
        CHECK(v && ss / (double)e->n_elem > 0.8 && ss / (double)e->n_elem < 1.2,
              "%s: values look like N(0,1): %g", dir, v ? ss / (double)e->n_elem : 0);
        free(v);
        rp_st_close(st);
    }
}

/* model.safetensors.index.json must agree with its shards. */
void test_safetensors_index(void) {
    const char *dir = test_tmp("st-index");
    mkdir(dir, 0700);
    char path[600];
    float one = 1.0f;
    size_t n;
    uint8_t *a =
        st_buf("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", &one, 4, &n);
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    REQUIRE(write_file(path, a, n), "write shard");
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    REQUIRE(write_file(path, a, n), "write shard");
    free(a);
    static const struct {
        const char *index, *want;
    } cases[] = {
        {"{\"weight_map\":{\"x\":\"a.safetensors\"}}", NULL},
        {"{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\"}}", "in no shard"},
        {"{\"weight_map\":{\"x\":\"b.safetensors\",\"z\":\"a.safetensors\"}}", "'x'"},
        {"{\"weight_map\":{\"x\":\"../a.safetensors\"}}", "same directory"},
        {"{\"weight_map\":{\"x\":\"c.safetensors\"}}", "cannot open"},
        {"{\"weight_map\":{}}", "empty"},
        {"{\"weight_map\":[]}", "weight_map"},
        {"{\"weight_map\":{\"x\":\"a.safetensors\"", "byte offset"},
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        REQUIRE(write_file(path, cases[i].index, strlen(cases[i].index)), "write index");
        rp_st *st = NULL;
        rp_status s = rp_st_open_dir(dir, &st);
        if (!cases[i].want)
            CHECK(s == RP_OK && rp_st_n_tensors(st) == 1 && rp_st_n_files(st) == 1, "case %zu: %s",
                  i, rp_last_error());
        else
            CHECK(s != RP_OK && strstr(rp_last_error(), cases[i].want), "case %zu: '%s'", i,
                  rp_last_error());
        rp_st_close(st);
    }
    /* without an index: every model*.safetensors, and a name in two files is an error */
    remove(path);
    snprintf(path, sizeof path, "%s/model-1.safetensors", dir);
    size_t n1;
    uint8_t *one_t =
        st_buf("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", &one, 4, &n1);
    REQUIRE(write_file(path, one_t, n1), "write");
    snprintf(path, sizeof path, "%s/model-2.safetensors", dir);
    REQUIRE(write_file(path, one_t, n1), "write");
    free(one_t);
    rp_st *st = NULL;
    CHECK(rp_st_open_dir(dir, &st) == RP_ERR_FORMAT && strstr(rp_last_error(), "in both"),
          "duplicate across files: %s", rp_last_error());
    CHECK(rp_st_open_dir("/nonexistent-dir", &st) != RP_OK, "missing directory");
}

/* Every truncation of a shard's header region and a sample beyond it, and
 * every bit flip of the header: an error or a valid set, never a crash; a
 * valid set reads back every tensor. */
static int g_st_ok, g_st_err;

static void try_st(const uint8_t *buf, size_t n) {
    rp_st *st;
    if (rp_st_open_mem(buf, n, &st) != RP_OK) {
        g_st_err++;
        if (!rp_last_error()[0]) CHECK(false, "error without a message (len %zu)", n);
        return;
    }
    g_st_ok++;
    float tmp[256];
    for (uint64_t i = 0; i < rp_st_n_tensors(st); i++) {
        const rp_st_tensor *t = rp_st_tensor_at(st, i);
        for (uint64_t k = 0; k < t->n_elem; k += 256)
            rp_st_read_f32(t, k, RP_MIN(256, t->n_elem - k), tmp);
    }
    rp_st_close(st);
}

void test_safetensors_robust(void) {
    size_t n;
    uint8_t *orig = test_read(FIX "/qwen2/model-00001-of-00004.safetensors", &n);
    REQUIRE(orig && n > 8, "read shard");
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | orig[i];
    size_t data_start = (size_t)(8 + hlen);
    uint8_t *buf = malloc(n);
    g_st_ok = g_st_err = 0;
    size_t n_trunc = 0;
    for (size_t len = 0; len < n;
         len += len < data_start + 64 ? 1 : (n - data_start) / 61 + 1, n_trunc++) {
        memcpy(buf, orig, len);
        try_st(buf, len);
    }
    CHECK(g_st_ok == 0, "%d truncated files parsed as valid", g_st_ok);
    memcpy(buf, orig, n);
    size_t n_flip = 0;
    for (size_t i = 0; i < data_start; i++)
        for (int bit = 0; bit < 8; bit++, n_flip++) {
            buf[i] ^= (uint8_t)(1u << bit);
            try_st(buf, n);
            buf[i] ^= (uint8_t)(1u << bit);
        }
    printf("     %zu truncations, %zu header bit flips (%d parsed, %d refused)\n", n_trunc, n_flip,
           g_st_ok, g_st_err);
    CHECK(g_st_err > 0, "bit flips were all accepted");
    free(buf);
    free(orig);
}
