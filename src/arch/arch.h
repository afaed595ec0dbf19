/* The architecture interface. Each architecture lives in its own file under
 * src/arch/ and registers an rp_arch in the table in src/arch/registry.c.
 * Per-layer variation is data (rp_layer_info, configuration structs), not
 * branches on the architecture name elsewhere. */
#ifndef RP_ARCH_H
#define RP_ARCH_H

#include "core/context.h"
#include "format/gguf.h"
#include "core/model.h"
#include "core/plan.h"
#include "convert/synth.h"

struct rp_arch {
    const char *name; /* general.architecture */
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
    /* Optional: metadata a physically merged file of this plan needs beyond
     * block_count (explicit per-layer arrays). */
    rp_status (*merge_meta)(const rp_model *m, const rp_plan *plan, rp_gguf_writer *w);
    /* Optional: add this architecture's keys and random tensors (reprise synth). */
    rp_status (*synth)(rp_synth *s, const rp_synth_params *p);
};

const rp_arch *rp_arch_find(const char *name);
/* rp_arch_list (the names, for messages) is public (reprise.h). */

#endif
