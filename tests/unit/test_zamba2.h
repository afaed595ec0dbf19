/* Helpers shared by the Zamba2 unit tests (test_zamba2.c, test_zamba2_hf.c). */
#ifndef RP_TEST_ZAMBA2_H
#define RP_TEST_ZAMBA2_H

#include "test.h"

#include "core/context.h"
#include "format/gguf.h"
#include "core/model.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

/* A context with an F32 KV cache. */
static inline bool open_ctx(const rp_model *m, const char *repeat, const char *map, int n_ctx,
                            int n_seq, int n_threads, rp_context **c) {
    rp_context_params cp = rp_context_default_params();
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_seq_max = (uint32_t)n_seq;
    cp.n_threads = n_threads;
    cp.repeat_layers = repeat;
    cp.layer_map = map;
    if (rp_context_new(m, &cp, c) == RP_OK) return true;
    fprintf(stderr, "  context: %s\n", rp_last_error());
    return false;
}

static inline rp_model *load(const char *path) {
    rp_model *m = NULL;
    if (path && rp_model_load(path, NULL, &m))
        fprintf(stderr, "  load %s: %s\n", path, rp_last_error());
    return m;
}

/* Decodes toks[0..n) in chunks of `chunk` tokens (sequence 0), every row's
 * logits into out [n][n_vocab]. */
static inline bool run_chunks(rp_context *c, const int32_t *toks, int n, int chunk, float *out) {
    const int nv = rp_n_vocab(c);
    int8_t all[512];
    memset(all, 1, sizeof all);
    for (int i = 0; i < n; i += chunk) {
        int k = RP_MIN(chunk, n - i);
        rp_batch b = {.n_tokens = k, .token = toks + i, .logits = all};
        if (rp_decode(c, &b)) {
            fprintf(stderr, "  decode: %s\n", rp_last_error());
            return false;
        }
        for (int j = 0; j < k; j++)
            memcpy(out + (size_t)(i + j) * nv, rp_get_logits(c, j), (size_t)nv * sizeof(float));
    }
    return true;
}

typedef void (*edit_fn)(rp_gguf_writer *w);

/* Rewrites src through the writer: tensors named skip are left out, those
 * whose name contains `zero` get zero data; edit changes keys. */
static inline const char *rewrite(const char *src, const char *out, const char *skip,
                                  const char *zero, edit_fn edit) {
    rp_gguf *g;
    if (rp_gguf_open(src, &g)) return NULL;
    rp_gguf_writer *w = rp_gguf_writer_new();
    rp_status s = rp_gguf_w_copy_kv(w, g);
    void **zeros = calloc(rp_gguf_n_tensors(g) + 1, sizeof *zeros);
    for (uint64_t i = 0; !s && i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        if (skip && !strcmp(t->name, skip)) continue;
        const void *data = t->data;
        if (zero && strstr(t->name, zero)) data = zeros[i] = calloc(1, t->nbytes);
        s = rp_gguf_w_add_tensor(w, t->name, (int)t->type, t->n_dims, t->ne, data);
    }
    if (edit) edit(w);
    const char *path = test_tmp(out);
    if (!s) s = rp_gguf_w_write(w, path, NULL, NULL);
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) free(zeros[i]);
    free(zeros);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
    return s ? NULL : path;
}

#endif
