/* Layer execution plans: which source layer each effective step runs. A plan
 * is built from a spec against a layer count alone; it depends on no other
 * module (weights, kinds and state are applied by the context). */
#ifndef RP_PLAN_H
#define RP_PLAN_H

#include "reprise.h"
#include "reprise_tools.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct rp_plan {
    int n_src;  /* trunk layers the plan was built against */
    int n_eff;  /* steps */
    int *src;   /* [n_eff] source layer of each step */
    bool *seam; /* [n_eff] step does not follow its predecessor's source (src[e] != src[e-1]+1) */
    int *pass;  /* [n_eff] how many times src[e] ran before this step (0 = first pass) */
    char *spec; /* the spec as given ("" for identity) */
    int kind;   /* RP_PLAN_IDENTITY / _REPEAT / _MAP */
    /* Per-step deltas ('@' modifiers of an item or block; weights stay shared):
     * res_scale[e] multiplies step e's attention and FFN contributions to the
     * residual stream (1 = none); lora[e * RP_PLAN_STEP_LORA + k] (k <
     * n_lora[e]) indexes lora_path, the adapter files applied at step e only,
     * each at lora_scale[same index]. The plan keeps names; the context loads
     * and checks the files. */
    float *res_scale;  /* [n_eff] */
    int *n_lora;       /* [n_eff] */
    int *lora;         /* [n_eff * RP_PLAN_STEP_LORA] */
    float *lora_scale; /* [n_eff * RP_PLAN_STEP_LORA] */
    char **lora_path;  /* [n_lora_path] distinct adapter files of the steps */
    int n_lora_path;
    bool has_deltas; /* some step has a residual scale or an adapter */
} rp_plan;

#define RP_PLAN_STEP_LORA 4 /* adapters one step may carry */

/* kind: RP_PLAN_IDENTITY / _REPEAT / _MAP (reprise_tools.h) */

/* n_trunk: layers a plan may use; n_total: all layers in the file (the NextN /
 * MTP head layers n_trunk..n_total-1 are named in refusals). Each refusal is
 * one message naming the block and the reason; *out is NULL then. */
rp_status rp_plan_identity(int n_trunk, rp_plan **out);
/* RYS: "i,j" or "i-j" blocks ([i,j) run twice), ';' separated, any order, disjoint.
 * A block may end in step modifiers, which apply to its second pass (the
 * steps the repetition adds): "4,6@s=0.707@lora=junction.gguf*0.5".
 * Modifiers: "@s=F" residual scale F (0 < F <= 16), "@lora=PATH" or
 * "@lora=PATH*F" an adapter applied at those steps only (at scale F, default
 * 1; at most RP_PLAN_STEP_LORA per step; PATH may not contain ',', ';' or
 * '@'). */
rp_status rp_plan_repeat(const char *spec, int n_trunk, int n_total, rp_plan **out);
/* Full map: comma separated items, "k" or inclusive "a..b", each optionally
 * followed by the modifiers above, which apply to every step of the item:
 * "0..5,4@s=0.85@lora=j.gguf,5..11". */
rp_status rp_plan_map(const char *map, int n_trunk, int n_total, rp_plan **out);
void rp_plan_free(rp_plan *p);

bool rp_plan_is_identity(const rp_plan *p);
/* Source layers run more than once, and boundary layers among them: the first
 * or last max(3, n_trunk/8) layers. Returns how many repeated steps fall in
 * that band (0 = none); the band width is stored in *band. */
int rp_plan_boundary_repeats(const rp_plan *p, int *band);
/* The steps' deltas, one per line ("  step 6 (src 4, pass 2): residual x0.707,
 * lora j.gguf x1\n"); "" without deltas. Returns the length needed. */
int rp_plan_format_deltas(const rp_plan *p, char *buf, size_t size);
/* Compact eff->src list with seams marked: "0..2 | 1..2 | 3..4". Returns the
 * length needed (like snprintf). */
int rp_plan_format(const rp_plan *p, char *buf, size_t size);

#endif
