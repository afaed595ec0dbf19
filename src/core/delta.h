/* Deltas on shared weights: LoRA adapters and residual scales, per plan step.
 *
 * A LoRA adapter file (llama.cpp's GGUF adapter format) holds pairs
 * "<base>.lora_a" [n_in, r] and "<base>.lora_b" [r, n_out] for base matrices
 * "blk.N.<name>.weight" of the model; a pair adds scale * B (A x) to the base
 * matmul's output, scale = user scale * alpha / r (alpha = adapter.lora.alpha;
 * 0 or absent: the user scale alone, as llama.cpp does). Adapter tensors are
 * kept as F32 copies (any stored type is dequantized once at load); the base
 * weights are never touched, so they stay shared and in their own type.
 *
 * Which step gets which pair:
 *   - an adapter of rp_context_params.lora (--lora): every step e whose source
 *     layer src[e] = N (a repeated layer gets the same delta on each pass);
 *   - an adapter a plan step names ('@lora=PATH'): that step only, with the
 *     pairs of layer src[e] (the file is made for source layers);
 *   - a layer_replication adapter (reprise convert --lora of a PEFT
 *     checkpoint with layer_replication; key adapter.reprise.layer_map): blk.N
 *     is plan step N, whose base weights are those of layer src[N].
 * A step's residual scale s makes the step add s * attn(..) and s * ffn(..)
 * to the residual stream instead of the plain contributions.
 *
 * The forward calls two hooks (no-ops without deltas): rp_ctx_delta after a
 * matmul of layer weights, rp_ctx_residual where a sublayer's output joins
 * the residual stream. An architecture whose forward calls them sets
 * rp_arch.deltas; adapters and step deltas are refused on the others. */
#ifndef RP_DELTA_H
#define RP_DELTA_H

#include "base/util.h"
#include "core/model.h"
#include "core/plan.h"
#include "kernels/matmul.h"
#include "reprise.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct rp_deltas rp_deltas;

/* Opens the adapters of p->lora (checked against m) into *out (NULL when p
 * has none). *layer_map receives the layer map of a layer_replication
 * adapter among them (owned by *out), or NULL. */
rp_status rp_deltas_open(const rp_model *m, const rp_context_params *p, rp_deltas **out,
                         const char **layer_map);
/* Completes *d for plan: opens the plan's per-step adapters and builds each
 * step's list of pairs. *d may be NULL (created when the plan has deltas; left
 * NULL when nothing applies). On failure *d is freed and NULL. */
rp_status rp_deltas_bind(rp_deltas **d, const rp_model *m, const rp_plan *plan, int n_ubatch);
void rp_deltas_free(rp_deltas *d);

/* Bytes of adapter weights held (0 for NULL). */
uint64_t rp_deltas_bytes(const rp_deltas *d);
/* Report lines (adapters, what they cover) appended to b. */
void rp_deltas_report(const rp_deltas *d, const rp_plan *plan, rp_buf *b);

/* The hooks (d: the context's deltas, NULL = none). y[i] += step e's pairs
 * on w[i] applied to x ([n_tok] rows of w[i]'s n_in floats; y[i] rows of its
 * n_out), computed on cc's pool. */
void rp_ctx_delta(rp_compute *cc, const rp_deltas *d, int e, int n, const rp_tensor *const *w,
                  float *const *y, const float *x, int n_tok);
/* x[t] += s_e * y[t] for n_tok rows of width E (rp_add when s_e = 1). */
void rp_ctx_residual(const rp_deltas *d, int e, float *x, const float *y, int n_tok, int E);

#endif
