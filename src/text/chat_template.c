/* Chat templates rendered by the Jinja interpreter, the way transformers'
 * apply_chat_template(tokenize=False) renders them: messages with keys whose
 * value is null dropped, reasoning copied under "thinking" and
 * "reasoning_content", and the variables messages, tools (none when absent),
 * documents (none), add_generation_prompt, bos_token / eos_token (when the
 * model has them) and the caller's extra variables. */
#include "text/chat_template.h"

#include "base/json_util.h"
#include "base/util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct rp_chat_template {
    jj_template *t;
};

rp_status rp_chat_template_new(const char *src, rp_chat_template **out) {
    *out = NULL;
    if (!src) return rp_fail(RP_ERR_INVALID_ARG, "chat template: no template text");
    rp_chat_template *ct = calloc(1, sizeof *ct);
    if (!ct) return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
    rp_status s = jj_parse(src, strlen(src), &ct->t);
    if (s) {
        free(ct);
        return s;
    }
    *out = ct;
    return RP_OK;
}

void rp_chat_template_free(rp_chat_template *ct) {
    if (!ct) return;
    jj_template_free(ct->t);
    free(ct);
}

rp_status rp_chat_template_check(const char *src) {
    rp_chat_template *ct;
    rp_status s = rp_chat_template_new(src, &ct);
    rp_chat_template_free(ct);
    return s;
}

/* ---- JSON -> values --------------------------------------------------------- */

static bool from_json(jj_arena *a, const json_t *j, jv *out, int depth) {
    if (depth > 512) return false;
    switch (json_typeof(j)) {
    case JSON_NULL:
        *out = jv_none();
        return true;
    case JSON_TRUE:
    case JSON_FALSE:
        *out = jv_bool(json_is_true(j));
        return true;
    case JSON_INTEGER:
        *out = jv_int((int64_t)json_integer_value(j));
        return true;
    case JSON_REAL:
        *out = jv_float(json_real_value(j));
        return true;
    case JSON_STRING: {
        size_t n = json_string_length(j);
        char *p = jj_alloc(a, n + 1);
        if (!p) return false;
        memcpy(p, json_string_value(j), n);
        *out = jv_str(p, n);
        return true;
    }
    case JSON_ARRAY: {
        jlist *l = jj_alloc(a, sizeof *l);
        if (!l) return false;
        for (size_t i = 0; i < json_array_size(j); i++) {
            jv x;
            if (!from_json(a, json_array_get(j, i), &x, depth + 1) || !jv_list_push_a(a, l, x))
                return false;
        }
        out->kind = JV_LIST;
        out->u.l = l;
        return true;
    }
    case JSON_OBJECT: {
        jdict *d = jj_alloc(a, sizeof *d);
        if (!d) return false;
        for (void *it = json_object_iter((json_t *)j); it;
             it = json_object_iter_next((json_t *)j, it)) {
            const char *k = json_object_iter_key(it);
            size_t kn = json_object_iter_key_len(it);
            char *kc = jj_alloc(a, kn + 1);
            jv x;
            if (!kc || !from_json(a, json_object_iter_value(it), &x, depth + 1)) return false;
            memcpy(kc, k, kn);
            if (!jv_dict_set_a(a, d, jv_str(kc, kn), x)) return false;
        }
        out->kind = JV_DICT;
        out->u.d = d;
        return true;
    }
    }
    return false;
}

static rp_status parse_json(const char *text, const char *what, json_t **out) {
    json_error_t e;
    *out = json_loads(text, JSON_ALLOW_NUL, &e);
    if (!*out)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "chat template: %s: not valid JSON (line %d, column %d: %s)", what, e.line,
                       e.column, e.text);
    return RP_OK;
}

/* transformers' message normalization (see the file comment). */
static bool normalize_message(jj_arena *a, jv msg, jv *out) {
    static const char *const reasoning_keys[] = {"reasoning_content", "thinking", "reasoning"};
    jdict *d = jj_alloc(a, sizeof *d);
    if (!d) return false;
    jv reasoning = {0};
    for (size_t k = 0; k < RP_ARRAY_LEN(reasoning_keys) && reasoning.kind == JV_UNDEF; k++) {
        jv *r = jv_dict_gets(msg.u.d, reasoning_keys[k], strlen(reasoning_keys[k]));
        if (r && r->kind != JV_NONE) reasoning = *r;
    }
    if (reasoning.kind != JV_UNDEF && !jv_dict_set_a(a, d, jv_cstr("thinking"), reasoning))
        return false;
    for (size_t i = 0; i < msg.u.d->n; i++)
        if (msg.u.d->val[i].kind != JV_NONE &&
            !jv_dict_set_a(a, d, msg.u.d->key[i], msg.u.d->val[i]))
            return false;
    if (reasoning.kind != JV_UNDEF && !jv_dict_set_a(a, d, jv_cstr("reasoning_content"), reasoning))
        return false;
    out->kind = JV_DICT;
    out->u.d = d;
    return true;
}

static rp_status build_globals(jj_arena *a, const rp_chat_template_inputs *in, jdict *g) {
    json_t *msgs = NULL, *tools = NULL, *extra = NULL;
    rp_status s = RP_OK;
    if (!in->messages_json) return rp_fail(RP_ERR_INVALID_ARG, "chat template: no messages");
    if ((s = parse_json(in->messages_json, "messages", &msgs))) goto done;
    if (!json_is_array(msgs)) {
        s = rp_fail(RP_ERR_INVALID_ARG, "chat template: the messages must be a JSON array, not %s",
                    rp_json_kind(msgs));
        goto done;
    }
    if (!json_array_size(msgs)) {
        s = rp_fail(RP_ERR_INVALID_ARG, "chat template: the conversation is empty (no messages)");
        goto done;
    }
    if (in->tools_json && (s = parse_json(in->tools_json, "tools", &tools))) goto done;
    if (tools && !json_is_array(tools) && !json_is_null(tools)) {
        s = rp_fail(RP_ERR_INVALID_ARG, "chat template: the tools must be a JSON array, not %s",
                    rp_json_kind(tools));
        goto done;
    }
    if (in->extra_vars_json && (s = parse_json(in->extra_vars_json, "extra variables", &extra)))
        goto done;
    if (extra && !json_is_object(extra)) {
        s = rp_fail(RP_ERR_INVALID_ARG,
                    "chat template: the extra variables must be a JSON object, not %s",
                    rp_json_kind(extra));
        goto done;
    }
    jv mv, tv = jv_none(), ev = {0};
    bool ok = from_json(a, msgs, &mv, 0) && (!tools || from_json(a, tools, &tv, 0)) &&
              (!extra || from_json(a, extra, &ev, 0));
    if (!ok) {
        s = rp_fail(RP_ERR_NOMEM,
                    "chat template: the conversation is too large or nested too deeply");
        goto done;
    }
    for (size_t i = 0; i < mv.u.l->n; i++) {
        if (mv.u.l->v[i].kind != JV_DICT) {
            s = rp_fail(RP_ERR_INVALID_ARG, "chat template: message %zu must be a JSON object", i);
            goto done;
        }
        if (!normalize_message(a, mv.u.l->v[i], &mv.u.l->v[i])) {
            s = rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
            goto done;
        }
    }
    ok = jv_dict_set_a(a, g, jv_cstr("messages"), mv) &&
         jv_dict_set_a(a, g, jv_cstr("tools"), tv) &&
         jv_dict_set_a(a, g, jv_cstr("documents"), jv_none()) &&
         jv_dict_set_a(a, g, jv_cstr("add_generation_prompt"), jv_bool(in->add_generation_prompt));
    if (ok && in->bos_token) ok = jv_dict_set_a(a, g, jv_cstr("bos_token"), jv_cstr(in->bos_token));
    if (ok && in->eos_token) ok = jv_dict_set_a(a, g, jv_cstr("eos_token"), jv_cstr(in->eos_token));
    for (size_t i = 0; ok && ev.kind == JV_DICT && i < ev.u.d->n; i++)
        ok = jv_dict_set_a(a, g, ev.u.d->key[i], ev.u.d->val[i]);
    if (!ok) s = rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
done:
    json_decref(msgs);
    json_decref(tools);
    json_decref(extra);
    return s;
}

rp_status rp_chat_template_apply_ex(const rp_chat_template *ct, const rp_chat_template_inputs *in,
                                    int64_t now, const jj_limits *lim, char **out) {
    *out = NULL;
    if (!ct || !in) return rp_fail(RP_ERR_INVALID_ARG, "chat template: no template or inputs");
    jj_arena a = {.limit = (size_t)64 << 20};
    jdict g = {0};
    rp_status s = build_globals(&a, in, &g);
    if (!s) s = jj_render(ct->t, &a, &g, now, lim, out, NULL);
    jj_arena_free(&a);
    return s;
}

rp_status rp_chat_template_apply(const rp_chat_template *ct, const rp_chat_template_inputs *in,
                                 char **out) {
    return rp_chat_template_apply_ex(ct, in, (int64_t)time(NULL), NULL, out);
}

rp_status rp_chat_template_render(const char *template_src, const char *messages_json,
                                  const char *tools_json, const char *extra_vars_json,
                                  bool add_generation_prompt, const char *bos, const char *eos,
                                  char **out) {
    *out = NULL;
    rp_chat_template *ct;
    rp_status s = rp_chat_template_new(template_src, &ct);
    if (s) return s;
    rp_chat_template_inputs in = {
        .messages_json = messages_json,
        .tools_json = tools_json,
        .extra_vars_json = extra_vars_json,
        .add_generation_prompt = add_generation_prompt,
        .bos_token = bos,
        .eos_token = eos,
    };
    s = rp_chat_template_apply(ct, &in, out);
    rp_chat_template_free(ct);
    return s;
}
