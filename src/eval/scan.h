/* reprise scan: every RYS block (i,j) of a model evaluated on one workload,
 * on weights loaded once.
 *
 * A workload is a set of token sequences (rp_scan_set): the chunks of a text
 * cut as the perplexity evaluation cuts them (src/eval.h), or the prompts and
 * answers of a probe file. An rp_scan evaluates the identity plan, then any
 * block as a plan over the same rp_model: a new context per block, no reload,
 * no weight copy.
 *
 * Prefix reuse. The plan of block (i,j) runs source layers 0..j-1 in steps
 * 0..j-1 exactly as the identity plan does, before its first repeated step.
 * With reuse on, the scan keeps the residual stream after step j-1 of every
 * decoded token (H_j: [n_rows][n_embd] floats) and runs a block only from
 * step j (rp_decode_steps). H_j is advanced from H_j' (j' < j) by running
 * steps j'..j-1 on the block's own context (its first j steps are the
 * identity's), so blocks taken in ascending j cost the prefix once in all.
 * The KV of the prefix steps is never needed: every step at or after j has
 * its own slot, filled by the same decode call, and a prefix slot is only
 * read by its own step. Results are bit for bit those of running every plan
 * whole: the same micro-batches meet the same inputs.
 *
 * Results go to a CSV (one row per block) that a later run resumes; the
 * heatmap is drawn by src/eval/png_heatmap.c. The format of both files and of
 * the probe file is docs/scan.md. The interface is public
 * (include/reprise_tools.h, "scans"). */
#ifndef RP_SCAN_H
#define RP_SCAN_H

#include "eval/eval.h"
#include "reprise.h"
#include "reprise_tools.h"
#include "core/model.h"

/* the most steps a plan of disjoint blocks has: every layer twice */
#define RP_SCAN_MAX_STEPS (2 * RP_MAX_LAYERS)
/* generation probes decoded together */
#define RP_SCAN_GEN_SEQ 16

#define GEN_TEXT_MAX 512 /* bytes of a probe's output kept */

/* Answers every generation probe of set greedily on ctx (n_seq sequences
 * decoded together, at most the context's; n_ctx >= set->max_gen): score[g]
 * its score, texts (NULL, or [n_gen][GEN_TEXT_MAX]) its output (scan_gen.c).
 * RP_ERR_CANCELLED from progress. */
rp_status rp_scan_generate(const rp_scan_set *set, rp_context *ctx, int n_batch, int n_seq,
                           double *score, char *texts, rp_progress_fn progress, void *user);

#endif
