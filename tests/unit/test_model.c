/* Model loading: crafted hyperparameters, tokenizer metadata and tensors get
 * a clear error naming what is wrong, never a crash or a giant allocation. */
#include "format/gguf.h"
#include "test.h"
#include "base/util.h"

#include <string.h>

typedef void (*edit_fn)(rp_gguf_writer *w, const rp_gguf *g);

/* Copies stories260K through the writer, applying edit, loads the result. */
static rp_status load_edited(edit_fn edit, const char *skip_tensor) {
    rp_gguf *g;
    if (rp_gguf_open(test_shared("models/stories260K.gguf"), &g)) return RP_ERR_IO;
    rp_gguf_writer *w = rp_gguf_writer_new();
    rp_gguf_w_copy_kv(w, g);
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        if (skip_tensor && !strcmp(t->name, skip_tensor)) continue;
        rp_gguf_w_add_tensor(w, t->name, (int)t->type, t->n_dims, t->ne, t->data);
    }
    if (edit) edit(w, g);
    const char *out = test_tmp("edited.gguf");
    rp_status s = rp_gguf_w_write(w, out, NULL, NULL);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
    if (s) return s;
    rp_model *m;
    s = rp_model_load(out, NULL, &m);
    if (!s) rp_model_free(m);
    return s;
}

static void e_heads(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    rp_gguf_w_set_u32(w, "llama.attention.head_count", 7);
}
static void e_heads_kv(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    rp_gguf_w_set_u32(w, "llama.attention.head_count_kv", 3);
}
static void e_rope(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    rp_gguf_w_set_u32(w, "llama.rope.dimension_count", 64);
}
static void e_layers(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    rp_gguf_w_set_u32(w, "llama.block_count", 4000000000u);
}
static void e_layers6(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    rp_gguf_w_set_u32(w, "llama.block_count", 6);
}
static void e_embd_type(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    rp_gguf_w_set_str(w, "llama.embedding_length", "64");
}
static void e_bos(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    rp_gguf_w_set_u32(w, "tokenizer.ggml.bos_token_id", 512);
}
static void e_scores(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    float s[3] = {0, 0, 0};
    rp_gguf_w_set_arr(w, "tokenizer.ggml.scores", RP_GGUF_FLOAT32, s, 3);
}
static void e_types_kind(rp_gguf_writer *w, const rp_gguf *g) {
    const rp_gguf_val *v = rp_gguf_get(g, "tokenizer.ggml.token_type");
    float *f = calloc(v->arr.n, sizeof *f);
    rp_gguf_w_set_arr(w, "tokenizer.ggml.token_type", RP_GGUF_FLOAT32, f, v->arr.n);
    free(f);
}
static void e_tokens(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    const char *t[600];
    float sc[600] = {0};
    int32_t ty[600];
    for (int i = 0; i < 600; i++) {
        char *b = malloc(16);
        snprintf(b, 16, "t%d", i);
        t[i] = b;
        ty[i] = 1;
    }
    rp_gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", t, 600);
    rp_gguf_w_set_arr(w, "tokenizer.ggml.scores", RP_GGUF_FLOAT32, sc, 600);
    rp_gguf_w_set_arr(w, "tokenizer.ggml.token_type", RP_GGUF_INT32, ty, 600);
    for (int i = 0; i < 600; i++) free((void *)t[i]);
}
static void e_arch(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    rp_gguf_w_set_str(w, "general.architecture", "mamba7");
}
static void e_eps(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    rp_gguf_w_set_f32(w, "llama.attention.layer_norm_rms_epsilon", -1.0f);
}
static void e_ff(rp_gguf_writer *w, const rp_gguf *g) {
    (void)g;
    rp_gguf_w_set_u32(w, "llama.feed_forward_length", 171);
}

void test_model_crafted_hparams(void) {
    struct {
        edit_fn edit;
        const char *skip;
        rp_status want;
        const char *needle;
    } cases[] = {
        {e_heads, NULL, RP_ERR_FORMAT, "head"},
        {e_heads_kv, NULL, RP_ERR_FORMAT, "head_count_kv"},
        {e_rope, NULL, RP_ERR_FORMAT, "rope.dimension_count"},
        {e_layers, NULL, RP_ERR_FORMAT, "llama.block_count"},
        {e_layers6, NULL, RP_ERR_FORMAT, "missing tensor 'blk.5."},
        {e_embd_type, NULL, RP_ERR_FORMAT, "llama.embedding_length"},
        {e_bos, NULL, RP_ERR_FORMAT, "bos_token_id"},
        {e_scores, NULL, RP_ERR_FORMAT, "tokenizer.ggml.scores"},
        {e_types_kind, NULL, RP_ERR_FORMAT, "token_type"},
        {e_tokens, NULL, RP_ERR_FORMAT, "vocabulary has 600 tokens"},
        {e_arch, NULL, RP_ERR_UNSUPPORTED, "mamba7"},
        {e_eps, NULL, RP_ERR_FORMAT, "layer_norm_rms_epsilon"},
        {e_ff, NULL, RP_ERR_FORMAT, "blk.0.ffn_gate.weight"},
        {NULL, "blk.2.attn_k.weight", RP_ERR_FORMAT, "missing tensor 'blk.2.attn_k.weight'"},
        {NULL, "output_norm.weight", RP_ERR_FORMAT, "output_norm.weight"},
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
        rp_status s = load_edited(cases[i].edit, cases[i].skip);
        CHECK(s == cases[i].want && strstr(rp_last_error(), cases[i].needle),
              "case %zu: status %d, message '%s'", i, (int)s, rp_last_error());
    }
    CHECK(load_edited(NULL, NULL) == RP_OK, "unedited copy loads: %s", rp_last_error());
}

/* Output.weight absent: the embedding is used (tied). */
void test_model_tied_output(void) {
    CHECK(load_edited(NULL, "output.weight") == RP_OK, "tied output: %s", rp_last_error());
}

/* GGUF v2 has the same layout as v3 and must load. */
void test_model_gguf_v2(void) {
    size_t n;
    uint8_t *d = test_read(test_shared("models/stories260K.gguf"), &n);
    REQUIRE(d, "read");
    d[4] = 2;
    rp_gguf *g;
    CHECK(rp_gguf_open_mem(d, n, &g) == RP_OK && rp_gguf_version(g) == 2, "v2: %s",
          rp_last_error());
    if (g) rp_gguf_close(g);
    free(d);
}
