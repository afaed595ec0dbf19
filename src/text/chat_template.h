/* Jinja chat templates (text/chat_template.c over text/jinja*.c): the public
 * rp_chat_template_* functions of reprise.h, plus the variant tests use to pin
 * the clock strftime_now reads and to set the interpreter's limits. */
#ifndef RP_CHAT_TEMPLATE_H
#define RP_CHAT_TEMPLATE_H

#include "reprise.h"
#include "text/jinja.h"

/* rp_chat_template_apply with strftime_now's time (seconds since the epoch,
 * formatted as local time) and limits (NULL = defaults). */
rp_status rp_chat_template_apply_ex(const rp_chat_template *t, const rp_chat_template_inputs *in,
                                    int64_t now, const jj_limits *lim, char **out);

#endif
