/* Chat templates: render a conversation into the prompt text a model expects.
 * The template family is detected from the model's tokenizer.chat_template
 * text (or named explicitly); each family is rendered by C code that produces
 * exactly what the Jinja template produces for the same messages. */
#ifndef RP_CHAT_H
#define RP_CHAT_H

#include "reprise.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct rp_chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} rp_chat_msg;

/* Renders msgs with the model's template (or the family named by `name`, e.g.
 * "chatml", "llama3"; NULL = detect from the model). add_assistant appends the
 * opening of the assistant's turn. *out is malloc'ed (caller frees). Unknown
 * or missing templates are an error naming the problem and --chat-template. */
rp_status rp_chat_apply(const rp_model *m, const char *name, const rp_chat_msg *msgs, size_t n,
                        bool add_assistant, char **out);

/* Comma-separated names accepted by rp_chat_apply, for --help. */
const char *rp_chat_names(void);

#endif
