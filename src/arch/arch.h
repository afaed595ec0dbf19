/* The architecture interface. Each architecture lives in its own file under
 * src/arch/ and registers an rp_arch in the table in src/arch/registry.c.
 * Per-layer variation is data (rp_layer_info, configuration structs), not
 * branches on the architecture name elsewhere.
 *
 * This header is what the mechanisms (model, context, synth, convert, spec)
 * see of an architecture, so it names the types it passes and includes no
 * internal header: core/ and convert/ include it, and it depends on neither
 * (no include cycle). An architecture's own file includes what it uses. */
#ifndef RP_ARCH_H
#define RP_ARCH_H

#include "reprise.h"

#include <stdbool.h>

typedef struct rp_arch rp_arch;
typedef struct rp_ubatch rp_ubatch;             /* core/context.h */
typedef struct rp_plan rp_plan;                 /* core/plan.h */
typedef struct rp_gguf_writer rp_gguf_writer;   /* format/gguf.h */
typedef struct rp_synth rp_synth;               /* convert/synth.h */
typedef struct rp_synth_params rp_synth_params; /* convert/synth.h */
typedef struct rp_draft_ops rp_draft_ops;       /* core/draft.h */
typedef struct rp_conv_hooks rp_conv_hooks;     /* convert/convert.h */
typedef struct rp_tensor_table rp_tensor_table; /* arch/tensors.h */

struct rp_arch {
    const char *name; /* general.architecture */
    /* Every tensor it reads: names, shapes, which layers have them, their
     * quantization categories (arch/tensors.h). */
    const rp_tensor_table *tensors;
    /* Hyperparameters and tensor binding: fills m->hp, m->info, m->layers and
     * the I/O tensors. Everything read from the file is validated here. */
    rp_status (*load)(rp_model *m);
    void (*unload)(rp_model *m); /* optional: frees m->arch_data */
    /* Per-context scratch (c->arch_ctx), sized for c->n_ubatch tokens. */
    rp_status (*ctx_init)(rp_context *c);
    void (*ctx_free)(rp_context *c);
    /* Run every plan step over one micro-batch and write its outputs. */
    rp_status (*forward)(rp_context *c, const rp_ubatch *ub);
    /* forward honours rp_ubatch.step_begin/step_end/x_in/x_out (rp_decode_steps) */
    bool step_ranges;
    /* forward calls rp_ctx_delta / rp_ctx_residual (core/delta.h): LoRA
     * adapters and per-step residual scales apply */
    bool deltas;
    /* Optional: metadata a physically merged file of this plan needs beyond
     * block_count (explicit per-layer arrays). */
    rp_status (*merge_meta)(const rp_model *m, const rp_plan *plan, rp_gguf_writer *w);
    /* Optional: add this architecture's keys and random tensors (reprise synth). */
    rp_status (*synth)(rp_synth *s, const rp_synth_params *p);
    /* Optional: the draft head (NextN / MTP) speculative decoding can draft
     * with (core/draft.h). */
    const rp_draft_ops *draft;
    /* Optional: reprise convert. The Hugging Face classes (config.json
     * "architectures"[0]) this architecture is converted from, NULL-terminated,
     * and its converter, in src/arch/<name>_convert.c. */
    const char *const *hf_classes;
    const rp_conv_hooks *convert;
};

const rp_arch *rp_arch_find(const char *name);
/* The i-th registered architecture, NULL past the end (0 is the plain dense
 * decoder, the default of reprise synth). */
const rp_arch *rp_arch_at(int i);
/* Comma-separated list of supported architectures, for messages (built once,
 * safe from any thread). */
const char *rp_arch_list(void);
/* The architecture converted from Hugging Face class hf_class, or NULL. */
const rp_arch *rp_arch_find_hf(const char *hf_class);
/* Comma-separated list of the classes reprise convert takes (built once). */
const char *rp_arch_hf_list(void);

#endif
