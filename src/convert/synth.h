/* Deterministic random-weight models for tests, benchmarks and the demo.
 * The architecture-specific part (which tensors, which keys) is each
 * architecture's synth callback; this module provides the mechanism. */
#ifndef RP_SYNTH_H
#define RP_SYNTH_H

#include "format/gguf.h"
#include "reprise.h"
#include "reprise_tools.h"
#include "base/util.h"

/* rp_synth_params, rp_synth_default_params and rp_synth_write are public
 * (reprise_tools.h). */

typedef struct rp_synth rp_synth;

/* For architecture callbacks: add a random 2-D weight [ne0 x ne1] in the
 * chosen type (scaled by 1/sqrt(ne0)), or, with ne1 == 0, a 1-D F32 norm
 * weight (values near 1) or bias (near 0, when bias is true). */
rp_status rp_synth_weight(rp_synth *s, int64_t ne0, int64_t ne1, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
rp_status rp_synth_norm(rp_synth *s, int64_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
rp_status rp_synth_bias(rp_synth *s, int64_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A tensor of explicit F32 values (copied). */
rp_status rp_synth_values(rp_synth *s, const float *v, int64_t ne0, int64_t ne1, const char *fmt,
                          ...) __attribute__((format(printf, 5, 6)));
/* A 1-D F32 tensor of n values drawn uniformly from [lo, hi) with rng (for
 * parameters that need a range, such as decay rates). */
rp_status rp_synth_uniform(rp_synth *s, rp_rng *rng, int64_t n, float lo, float hi, const char *fmt,
                           ...) __attribute__((format(printf, 6, 7)));
rp_gguf_writer *rp_synth_writer(rp_synth *s);
/* Standard transformer keys: block_count, embedding_length, feed_forward_length,
 * head counts, key/value length, rope, eps, context_length. */
rp_status rp_synth_transformer_keys(rp_synth *s, const rp_synth_params *p, float rope_base,
                                    float eps);

#endif
