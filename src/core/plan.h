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
} rp_plan;

/* kind: RP_PLAN_IDENTITY / _REPEAT / _MAP (reprise_tools.h) */

/* n_trunk: layers a plan may use; n_total: all layers in the file (the NextN /
 * MTP head layers n_trunk..n_total-1 are named in refusals). Each refusal is
 * one message naming the block and the reason; *out is NULL then. */
rp_status rp_plan_identity(int n_trunk, rp_plan **out);
/* RYS: "i,j" or "i-j" blocks ([i,j) run twice), ';' separated, any order, disjoint. */
rp_status rp_plan_repeat(const char *spec, int n_trunk, int n_total, rp_plan **out);
/* Full map: comma separated items, "k" or inclusive "a..b". */
rp_status rp_plan_map(const char *map, int n_trunk, int n_total, rp_plan **out);
void rp_plan_free(rp_plan *p);

bool rp_plan_is_identity(const rp_plan *p);
/* Source layers run more than once, and boundary layers among them: the first
 * or last max(3, n_trunk/8) layers. Returns how many repeated steps fall in
 * that band (0 = none); the band width is stored in *band. */
int rp_plan_boundary_repeats(const rp_plan *p, int *band);
/* Compact eff->src list with seams marked: "0..2 | 1..2 | 3..4". Returns the
 * length needed (like snprintf). */
int rp_plan_format(const rp_plan *p, char *buf, size_t size);

#endif
