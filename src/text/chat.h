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
    const char *role; /* "system", "user", "assistant" */
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

/* ---- finer control (tests, tools) ---------------------------------------- */

typedef struct rp_chat_opts {
    const char *name;          /* family; NULL = detect from template */
    const char *template_text; /* Jinja text the family and its variant are read from (may be NULL
                                  with name) */
    const char *bos, *eos;     /* bos_token / eos_token texts ("" if the model has none) */
    bool add_assistant;        /* add_generation_prompt */
    int enable_thinking;       /* Qwen3: -1 = template default (thinking on), 0 = off (empty
                                  <think></think>), 1 = on */
} rp_chat_opts;

/* The family a template text belongs to, or NULL if none is recognised. */
const char *rp_chat_detect(const char *template_text);

/* Renders msgs as o says. Errors: unknown family or template, a conversation
 * the template refuses (roles not alternating, a system message the template
 * has no place for), an unknown role. */
rp_status rp_chat_render(const rp_chat_opts *o, const rp_chat_msg *msgs, size_t n, char **out);

/* rp_chat_apply with options: o->template_text, bos and eos, when NULL, come
 * from the model. */
rp_status rp_chat_apply_opts(const rp_model *m, const rp_chat_opts *o, const rp_chat_msg *msgs,
                             size_t n, char **out);

#endif
