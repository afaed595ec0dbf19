/* Comparison of a model run with llama.cpp's golden outputs (shared/golden). */
#ifndef RP_TEST_GOLDEN_H
#define RP_TEST_GOLDEN_H

#include "reprise.h"

typedef struct golden_result {
    double max_abs;   /* prompt logits, max |delta| */
    double nmse;      /* prompt logits */
    int n_greedy;     /* golden continuation length */
    int greedy_match; /* leading tokens identical */
    int top1_agree;   /* prompt positions whose argmax agrees */
    int n_pos;
} golden_result;

/* Runs golden case `prefix` (e.g. "golden/stories260K/p1") on model `model`
 * (a path under shared/ or absolute), with a layer spec (NULL = identity) and
 * an F32 KV cache. Returns false if the files or the model could not be read. */
bool golden_run(const char *model, const char *prefix, const char *repeat_layers, golden_result *r);

/* golden_run with a device (NULL = the CPU), a KV type, the greedy
 * continuation cut to max_greedy tokens (0 = all of it), and the prompt
 * logits kept ([n_pos][n_vocab], malloc'ed; the caller frees) when logits is
 * not NULL. */
typedef struct golden_opts {
    const char *device;
    int type_kv; /* 0 = RP_TYPE_F32 */
    int max_greedy;
    float **logits;
    int *n_vocab;
} golden_opts;
bool golden_run_opts(const char *model, const char *prefix, const char *repeat,
                     const golden_opts *o, golden_result *r);

/* Opens a model with an F32 KV context of n_ctx (helpers for tests). */
bool test_open(const char *path, const char *repeat, int n_ctx, rp_model **m, rp_context **c);

#endif
