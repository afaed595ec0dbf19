/* Chat templates for run, chat and serve (chat_tmpl.h). */
#include "chat_tmpl.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

const arg_opt *tmpl_opts_table(tmpl_opts *o) {
    static arg_opt t[4];
    const arg_opt src[] = {
        {"--jinja", ARG_FLAG, &o->jinja, NULL,
         "render the model's own chat template with the Jinja interpreter"},
        {"--chat-template", ARG_STR, &o->name, "NAME|TEXT",
         "a built-in family (below), 'jinja', or a Jinja template text"},
        {"--chat-template-file", ARG_STR, &o->file, "FILE", "a Jinja chat template from a file"},
        {0},
    };
    memcpy(t, src, sizeof src);
    return t;
}

bool tmpl_opts_given(const tmpl_opts *o) {
    return o->jinja || o->name || o->file;
}

/* Whether name is one of the built-in families. */
static bool is_family(const char *name) {
    const char *p = rp_chat_names();
    const size_t n = strlen(name);
    while (*p) {
        size_t k = strcspn(p, ", ");
        if (k == n && !strncmp(p, name, n)) return true;
        p += k;
        p += strspn(p, ", ");
    }
    return false;
}

static bool looks_like_jinja(const char *s) {
    return strstr(s, "{%") || strstr(s, "{{");
}

static char *token_text(const rp_vocab *v, int32_t id) {
    const char *s = id >= 0 ? rp_vocab_text(v, id) : NULL;
    return s ? strdup(s) : NULL;
}

#define FAIL(...) (snprintf(err, err_size, __VA_ARGS__), false)

/* Compiles src as t's Jinja template; false with the reason in err. */
static bool compile(const char *src, const char *what, chat_tmpl *t, char *err, size_t err_size) {
    rp_status s = rp_chat_template_new(src, &t->jt);
    if (s) return FAIL("%s does not compile: %s", what, rp_last_error());
    return true;
}

static bool choose(const char *cmd, const tmpl_opts *o, const char *own, chat_tmpl *t, char *err,
                   size_t err_size) {
    if (o->file && o->name)
        return FAIL("--chat-template and --chat-template-file are alternatives; give one");
    if (o->file) {
        size_t len = 0;
        char *src = tool_read_text(cmd, o->file, &len);
        if (!src) return FAIL("--chat-template-file: cannot read '%s'", o->file);
        snprintf(t->what, sizeof t->what, "jinja (%s)", base_name(o->file));
        bool ok = compile(src, "--chat-template-file", t, err, err_size);
        free(src);
        return ok;
    }
    if (o->name && strcmp(o->name, "jinja")) {
        if (is_family(o->name)) {
            if (o->jinja) {
                tool_error(cmd,
                           "--jinja renders a Jinja template; --chat-template %s names a "
                           "built-in family",
                           o->name);
                return false;
            }
            t->family = o->name;
            snprintf(t->what, sizeof t->what, "%s", o->name);
            return true;
        }
        if (!looks_like_jinja(o->name))
            return FAIL("unknown chat template '%.60s': give a family (%s), 'jinja', a Jinja "
                        "template text, or --chat-template-file",
                        o->name, rp_chat_names());
        snprintf(t->what, sizeof t->what, "jinja (--chat-template text)");
        return compile(o->name, "--chat-template", t, err, err_size);
    }
    const bool jinja = o->jinja || (o->name && !strcmp(o->name, "jinja"));
    if (!own || !*own)
        return FAIL("the model has no chat template (tokenizer.chat_template): give "
                    "--chat-template NAME|TEXT or --chat-template-file FILE (families: %s)",
                    rp_chat_names());
    if (!jinja && rp_chat_detect(own)) {
        snprintf(t->what, sizeof t->what, "%s (detected)", rp_chat_detect(own));
        return true;
    }
    snprintf(t->what, sizeof t->what, "jinja (the model's template)");
    return compile(own, "the model's chat template", t, err, err_size);
}

bool chat_tmpl_open(const char *cmd, const tmpl_opts *o, const rp_model *m, chat_tmpl *t, char *err,
                    size_t err_size) {
    memset(t, 0, sizeof *t);
    const rp_vocab *v = rp_model_vocab(m);
    if (!choose(cmd, o, rp_model_meta_str(m, "tokenizer.chat_template"), t, err, err_size)) {
        chat_tmpl_free(t);
        return false;
    }
    t->bos = token_text(v, rp_vocab_bos(v));
    t->eos = token_text(v, rp_vocab_eos(v));
    rp_chat_msg probe = {"user", "hi"};
    char *out = NULL;
    rp_status s = chat_tmpl_render(t, m, &probe, 1, true, -1, &out);
    free(out);
    if (s) {
        snprintf(err, err_size, "chat template %s: %s", t->what, rp_last_error());
        chat_tmpl_free(t);
        return false;
    }
    return true;
}

void chat_tmpl_free(chat_tmpl *t) {
    rp_chat_template_free(t->jt);
    free(t->bos);
    free(t->eos);
    memset(t, 0, sizeof *t);
}

static rp_status render_jinja(const chat_tmpl *t, const char *messages, const char *tools,
                              const char *extra, bool add_gen, char **out) {
    rp_chat_template_inputs in = {.messages_json = messages,
                                  .tools_json = tools,
                                  .extra_vars_json = extra,
                                  .add_generation_prompt = add_gen,
                                  .bos_token = t->bos,
                                  .eos_token = t->eos};
    return rp_chat_template_apply(t->jt, &in, out);
}

rp_status chat_tmpl_render(const chat_tmpl *t, const rp_model *m, const rp_chat_msg *msgs, size_t n,
                           bool add_gen, int enable_thinking, char **out) {
    *out = NULL;
    if (!t->jt) {
        rp_chat_opts co = {
            .name = t->family, .add_assistant = add_gen, .enable_thinking = enable_thinking};
        return rp_chat_apply_opts(m, &co, msgs, n, out);
    }
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(
                a, json_pack("{s:s,s:s}", "role", msgs[i].role, "content", msgs[i].content)))
            break;
    char *js = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    if (!js) return RP_ERR_NOMEM;
    const char *extra = enable_thinking < 0 ? NULL
                        : enable_thinking   ? "{\"enable_thinking\":true}"
                                            : "{\"enable_thinking\":false}";
    rp_status s = render_jinja(t, js, NULL, extra, add_gen, out);
    free(js);
    return s;
}

rp_status chat_tmpl_render_json(const chat_tmpl *t, const rp_model *m, const char *messages_json,
                                const char *tools_json, const char *extra_json, bool add_gen,
                                char **out, char *err, size_t err_size) {
    *out = NULL;
    snprintf(err, err_size, "out of memory");
    if (t->jt) {
        rp_status s = render_jinja(t, messages_json, tools_json, extra_json, add_gen, out);
        if (s) snprintf(err, err_size, "%s", rp_last_error());
        return s;
    }
    if (tools_json) {
        snprintf(err, err_size,
                 "'tools' needs a Jinja chat template (start the server with --jinja)");
        return RP_ERR_UNSUPPORTED;
    }
    json_error_t je;
    json_t *a = json_loads(messages_json, 0, &je);
    size_t n = json_is_array(a) ? json_array_size(a) : 0;
    rp_chat_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
    rp_status s = msgs && a ? RP_OK : RP_ERR_NOMEM;
    for (size_t i = 0; !s && i < n; i++) {
        json_t *x = json_array_get(a, i);
        const char *role = json_string_value(json_object_get(x, "role"));
        const char *content = json_string_value(json_object_get(x, "content"));
        if (!role ||
            (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))) {
            snprintf(err, err_size,
                     "'messages[%zu].role' '%.40s' needs a Jinja chat template (start the server "
                     "with --jinja); the built-in families take system, user and assistant",
                     i, role ? role : "?");
            s = RP_ERR_INVALID_ARG;
        }
        msgs[i] = (rp_chat_msg){role, content ? content : ""};
    }
    int think = -1;
    json_t *x = extra_json ? json_loads(extra_json, 0, &je) : NULL;
    json_t *et = json_object_get(x, "enable_thinking");
    if (json_is_boolean(et)) think = json_is_true(et);
    json_decref(x);
    if (!s && (s = chat_tmpl_render(t, m, msgs, n, add_gen, think, out)))
        snprintf(err, err_size, "%s", rp_last_error());
    free(msgs);
    json_decref(a);
    return s;
}

bool tool_check_template_err(const char *cmd, const model_opts *mo, const tmpl_opts *o,
                             chat_tmpl *t, char *err, size_t err_size) {
    memset(t, 0, sizeof *t);
    snprintf(err, err_size, "no model");
    if (!mo->model) return false;
    rp_model *m = tool_load_model(cmd, mo->model, true);
    if (!m) return FAIL("cannot read the model's tokenizer");
    bool ok = chat_tmpl_open(cmd, o, m, t, err, err_size);
    rp_model_free(m);
    return ok;
}

bool tool_check_template(const char *cmd, const model_opts *mo, const tmpl_opts *o, chat_tmpl *t) {
    if (!mo->model) { /* tool_load says so */
        memset(t, 0, sizeof *t);
        return true;
    }
    char err[512];
    bool ok = tool_check_template_err(cmd, mo, o, t, err, sizeof err);
    if (!ok) tool_error(cmd, "%s", err);
    if (ok && g_verbosity >= 2) fprintf(stderr, "chat template: %s\n", t->what);
    return ok;
}
