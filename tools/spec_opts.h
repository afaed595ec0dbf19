/* Speculative decoding options shared by run, chat, bench and serve:
 * --spec, --draft-plan, --spec-mtp, --draft-max, --draft-min, --draft-p-min. */
#ifndef RP_TOOLS_SPEC_OPTS_H
#define RP_TOOLS_SPEC_OPTS_H

#include "tools.h"

typedef struct spec_opts {
    bool spec;              /* --spec: speculate with the default draft (the trunk once) */
    const char *draft_plan; /* --draft-plan MAP */
    bool mtp;               /* --spec-mtp */
    int draft_max;          /* 0 = default */
    int draft_min;          /* -1 = not given */
    float p_min;            /* < 0 = not given */
} spec_opts;

void spec_opts_init(spec_opts *o);
/* The option table (--spec, --draft-plan, --spec-mtp, --draft-max, --draft-min, --draft-p-min). */
const arg_opt *spec_opts_table(spec_opts *o);
extern const char *const g_spec_help; /* a paragraph for --help */
/* True when speculative decoding was asked for. */
bool spec_opts_active(const spec_opts *o);
/* Checks the combination before anything is loaded (prints the error). Sets
 * mo->keep_hidden for --spec-mtp. */
bool spec_opts_check(const char *cmd, const spec_opts *o, model_opts *mo);
/* Builds the draft beside ctx and prints its one-line description (after
 * "label: " when label is not NULL); NULL after printing the error. */
rp_spec *spec_open(const char *cmd, const spec_opts *o, rp_context *ctx, const char *label);
/* "speculative: 412 of 652 drafted tokens accepted (63.2%), 3.10 tokens per
 * verification (210)" (like snprintf) */
int spec_format_stats(char *buf, size_t size, const rp_spec_stats *st);

#endif
