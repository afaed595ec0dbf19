/* Matrix products of weights with activations, spread over the thread pool.
 * Y[t][r] = sum_k W[r][k] * X[t][k] for every token row t and weight row r:
 * W is [rows = ne[1]] x [ne[0]] in its own type, X and Y are row-major F32. */
#ifndef RP_MATMUL_H
#define RP_MATMUL_H

#include "reprise.h"
#include "core/tensor.h"
#include "base/threads.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rp_compute {
    rp_pool *pool;
    uint8_t *wbuf; /* scratch: activations encoded in the kernels' format */
    size_t wbuf_size;
    /* Every token of a batch in the order it has as a lone token: no batch
     * order on packed weights (rp_matmul_batch_tokens), attention's one-token
     * V order (rp_attention). A speculative target's verification sets it, so
     * that its rows equal plain decoding's, token by token. */
    bool one_tok;
    /* one_tok from the last step's feed-forward on (the rows that give
     * outputs), for a prompt decoded with every row an output as plain
     * decoding computes its one output row (qwen35: the MTP target). */
    bool one_tok_out;
} rp_compute;

/* Scratch bytes a matmul over n_tok rows of n_in activations may need. */
size_t rp_matmul_scratch(int64_t n_in, int n_tok);

void rp_matmul(rp_compute *cc, const rp_tensor *w, const float *x, int n_tok, float *y);
/* Several weights with the same input row length, one pass over the pool:
 * y[i] = x . w[i]^T. (Q/K/V, gate/up.) */
void rp_matmul_n(rp_compute *cc, int n, const rp_tensor *const *w, float *const *y, const float *x,
                 int n_tok);

/* How many leading tokens of an n_tok product of a weight of this type take
 * rp_kernels.vec_dot_batch's order on packed weights (llama.cpp's x86 prompt
 * paths: Q4_K's repacked gemm on whole groups of 4 tokens, the rest by its
 * gemv; Q6_K's tiled matmul from 8 tokens); 0 for the other types. */
int rp_matmul_batch_tokens(int type, int n_tok);

/* Builds t->pack when the running CPU's kernels have a faster layout for
 * t's type: *owned receives the buffer the caller must keep (and free) as long
 * as t is used, NULL if nothing was built. */
rp_status rp_matmul_pack(rp_tensor *t, void **owned);

/* Row r of w as floats (embedding lookup). */
void rp_tensor_get_row(const rp_tensor *w, int64_t r, float *out);

#endif
