/* Chat templates for run, chat and serve: a built-in family (src/text/chat.c)
 * or the model's tokenizer.chat_template rendered by the Jinja interpreter,
 * chosen and checked from the model's metadata before its weights load.
 *
 *   --jinja                  the model's own template through the interpreter
 *   --chat-template NAME     a built-in family (chatml, llama3, ...), or "jinja"
 *   --chat-template TEXT     a Jinja template given inline ({% ... %} / {{ ... }})
 *   --chat-template-file F   a Jinja template from a file
 *   (none)                   the built-in family that recognises the model's
 *                            template, else the model's template through the
 *                            interpreter */
#ifndef RP_CHAT_TMPL_H
#define RP_CHAT_TMPL_H

#include "tools.h"

typedef struct tmpl_opts {
    bool jinja;
    const char *name; /* --chat-template */
    const char *file; /* --chat-template-file */
} tmpl_opts;

/* --jinja, --chat-template, --chat-template-file (a static table). */
const arg_opt *tmpl_opts_table(tmpl_opts *o);
bool tmpl_opts_given(const tmpl_opts *o);

typedef struct chat_tmpl {
    rp_chat_template *jt; /* the Jinja template, or NULL: the built-in family */
    const char *family;   /* built-in family name (NULL: detect from the model) */
    char *bos, *eos;      /* the model's BOS / EOS texts (NULL: none) */
    char what[96];        /* "jinja (the model's template)", "chatml", ... */
} chat_tmpl;

/* Chooses and checks the template for model m (a vocabulary-only load is
 * enough) and renders a probe conversation; false with the reason in err. */
bool chat_tmpl_open(const char *cmd, const tmpl_opts *o, const rp_model *m, chat_tmpl *t, char *err,
                    size_t err_size);
void chat_tmpl_free(chat_tmpl *t);
/* chat_tmpl_open from the metadata of mo->model (its tokenizer only), before
 * the weights load. */
bool tool_check_template(const char *cmd, const model_opts *mo, const tmpl_opts *o, chat_tmpl *t);
/* The same, the reason in err instead of printed. */
bool tool_check_template_err(const char *cmd, const model_opts *mo, const tmpl_opts *o,
                             chat_tmpl *t, char *err, size_t err_size);

/* Renders msgs (roles system/user/assistant) for model m; enable_thinking -1
 * = the template's default. *out malloc'ed. */
rp_status chat_tmpl_render(const chat_tmpl *t, const rp_model *m, const rp_chat_msg *msgs, size_t n,
                           bool add_generation_prompt, int enable_thinking, char **out);
/* Renders OpenAI messages given as JSON (tools and extra variables may be
 * NULL; the built-in families take system/user/assistant text only); on
 * failure err says why. */
rp_status chat_tmpl_render_json(const chat_tmpl *t, const rp_model *m, const char *messages_json,
                                const char *tools_json, const char *extra_json,
                                bool add_generation_prompt, char **out, char *err, size_t err_size);

#endif
