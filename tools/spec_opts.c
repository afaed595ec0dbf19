/* Speculative decoding options shared by the tools (see spec_opts.h). */
#include "spec_opts.h"

#include <stdlib.h>
#include <string.h>

const char *const g_spec_help =
    "speculative decoding (the same weights draft, the plan verifies; greedy output is plain "
    "decoding's,\n"
    "token for token: the plan verifies each drafted token as it decodes a lone token):\n"
    "  --spec                the plain stack (the trunk once, in order) drafts for the plan\n"
    "  --draft-plan MAP      a cheaper plan drafts, in --layer-map syntax, e.g. '0..9,14..27' "
    "skips\n"
    "                        layers 10-13; the draft never inherits --repeat-layers / --layer-map\n"
    "  --spec-mtp            the model's NextN/MTP head drafts from the plan's hidden state "
    "(qwen35)\n"
    "  --draft-max N         tokens drafted per step (default 8); --draft-min N drops shorter "
    "drafts;\n"
    "                        --draft-p-min P stops a draft at a token the draft gives less than P";

void spec_opts_init(spec_opts *o) {
    memset(o, 0, sizeof *o);
    o->draft_min = -1;
    o->p_min = -1.0f;
}

const arg_opt *spec_opts_table(spec_opts *o) {
    static arg_opt t[7];
    const arg_opt src[] = {
        {"--spec", ARG_FLAG, &o->spec, NULL,
         "speculative decoding, drafted by the plain stack (see below)"},
        {"--draft-plan", ARG_STR, &o->draft_plan, "MAP",
         "speculative decoding drafted by this plan (layer-map syntax)"},
        {"--spec-mtp", ARG_FLAG, &o->mtp, NULL,
         "speculative decoding drafted by the model's NextN/MTP head"},
        {"--draft-max", ARG_INT, &o->draft_max, "N",
         "tokens drafted per step (default 8, at most 64)"},
        {"--draft-min", ARG_INT, &o->draft_min, "N",
         "drafts shorter than N are not verified (default 0)"},
        {"--draft-p-min", ARG_FLOAT, &o->p_min, "P",
         "stop drafting at a token the draft gives less than P (default 0.75)"},
        {0},
    };
    memcpy(t, src, sizeof src);
    return t;
}

bool spec_opts_active(const spec_opts *o) {
    return o->spec || o->mtp || (o->draft_plan && *o->draft_plan);
}

bool spec_opts_check(const char *cmd, const spec_opts *o, model_opts *mo) {
    const bool tuned = o->draft_max != 0 || o->draft_min >= 0 || o->p_min >= 0;
    if (o->draft_plan && !*o->draft_plan) {
        tool_error(cmd, "--draft-plan needs a layer map such as '0..9,14..27'");
        return false;
    }
    if (tuned && !spec_opts_active(o)) {
        tool_error(
            cmd,
            "--draft-max, --draft-min and --draft-p-min tune speculative decoding; turn it on with "
            "--spec, --draft-plan MAP or --spec-mtp");
        return false;
    }
    if (o->mtp && o->draft_plan) {
        tool_error(cmd, "--spec-mtp and --draft-plan are alternatives: the MTP head or a plan "
                        "drafts, not both");
        return false;
    }
    if (o->draft_max < 0 || o->draft_max > RP_SPEC_DRAFT_MAX) {
        tool_error(cmd, "--draft-max %d is outside 1..%d", o->draft_max, RP_SPEC_DRAFT_MAX);
        return false;
    }
    if (o->mtp) mo->keep_hidden = true;
    return true;
}

rp_spec *spec_open(const char *cmd, const spec_opts *o, rp_context *ctx, const char *label) {
    rp_spec_params p = rp_spec_default_params();
    p.draft_plan = o->draft_plan;
    p.mtp = o->mtp;
    if (o->draft_max) p.draft_max = o->draft_max;
    if (o->draft_min >= 0) p.draft_min = o->draft_min;
    if (o->p_min >= 0) p.p_min = o->p_min;
    rp_spec *s = NULL;
    rp_status st = rp_spec_new(ctx, &p, &s);
    if (st) {
        tool_fail(cmd, st);
        return NULL;
    }
    if (g_verbosity > 0) {
        char line[512];
        rp_spec_describe(s, line, sizeof line);
        fprintf(stderr, "%s%s%s\n", label ? label : "", label ? ": " : "", line);
    }
    return s;
}

int spec_format_stats(char *buf, size_t size, const rp_spec_stats *st) {
    return snprintf(buf, size,
                    "speculative: %llu of %llu drafted tokens accepted (%.1f%%), %.2f tokens per "
                    "verification (%llu)",
                    (unsigned long long)st->accepted, (unsigned long long)st->drafted,
                    st->drafted ? 100.0 * (double)st->accepted / (double)st->drafted : 0.0,
                    st->steps ? (double)st->generated / (double)st->steps : 0.0,
                    (unsigned long long)st->steps);
}
