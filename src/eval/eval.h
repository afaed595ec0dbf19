/* Evaluation of a model on a text: perplexity and KL divergence against a base
 * model's saved log-probabilities, by llama.cpp's method. The whole interface
 * is public (include/reprise_tools.h, "perplexity and KL divergence"); the
 * implementation is eval.c (windows, driver, accumulators, base files) and
 * perplexity.c (rp_perplexity, the one-call form). */
#ifndef RP_EVAL_H
#define RP_EVAL_H

#include "reprise.h"
#include "reprise_tools.h"

#endif
