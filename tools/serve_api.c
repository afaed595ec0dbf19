/* reprise serve: the endpoints. Each reads its JSON body (wrong types are
 * 400, values out of range 422), builds a task for the engine or answers at
 * once, and shapes the result the way its API does: OpenAI's text and chat
 * completions (objects and server-sent chunks) or llama.cpp's native
 * /completion, /tokenize and /detokenize. */
#include "serve.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- request fields --------------------------------------------------------- */

/* What a JSON value is, for messages ("'x' must be a string, got an integer"). */
static const char *json_kind(const json_t *v) {
    static const char *const kinds[] = {
        [JSON_OBJECT] = "an object",   [JSON_ARRAY] = "an array", [JSON_STRING] = "a string",
        [JSON_INTEGER] = "an integer", [JSON_REAL] = "a number",  [JSON_TRUE] = "a boolean",
        [JSON_FALSE] = "a boolean",    [JSON_NULL] = "null",
    };
    const unsigned t = (unsigned)json_typeof(v);
    return t < ARRAY_LEN(kinds) && kinds[t] ? kinds[t] : "null";
}

typedef struct gen_params {
    float temperature, top_p, min_p, presence_penalty, frequency_penalty, repeat_penalty;
    int top_k, repeat_last_n, n_predict, n;
    int64_t seed; /* < 0: pick one */
    bool stream;
    bool return_tokens; /* /completion: list the generated token ids */
    char *stop[SRV_MAX_STOP];
    int n_stop;
} gen_params;

typedef enum field_kind { FK_FLOAT, FK_INT, FK_I64, FK_BOOL } field_kind;

/* A request field: its JSON name, where it goes, and its accepted range
 * (lo_open: lo itself is excluded). */
typedef struct field {
    const char *name;
    field_kind kind;
    size_t off;
    double lo, hi;
    bool lo_open;
} field;

#define GP(f) offsetof(gen_params, f)
static const field g_sampling_fields[] = {
    {"temperature", FK_FLOAT, GP(temperature), 0, 100, false},
    {"top_p", FK_FLOAT, GP(top_p), 0, 1, true},
    {"top_k", FK_INT, GP(top_k), 0, INT32_MAX, false},
    {"min_p", FK_FLOAT, GP(min_p), 0, 1, false},
    {"presence_penalty", FK_FLOAT, GP(presence_penalty), -2, 2, false},
    {"frequency_penalty", FK_FLOAT, GP(frequency_penalty), -2, 2, false},
    {"repeat_penalty", FK_FLOAT, GP(repeat_penalty), 0, 100, true},
    {"repeat_last_n", FK_INT, GP(repeat_last_n), -1, 1 << 20, false},
    {"seed", FK_I64, GP(seed), -9.3e18, 9.3e18, false},
    {"n", FK_INT, GP(n), 1, 1, false},
    {"stream", FK_BOOL, GP(stream), 0, 0, false},
    {0},
};
/* the length limit by each API's name for it, and the fields of one API only */
static const field g_openai_only[] = {
    {"max_tokens", FK_INT, GP(n_predict), -1, INT32_MAX, false},
    {"max_completion_tokens", FK_INT, GP(n_predict), -1, INT32_MAX, false},
    {0},
};
static const field g_native_only[] = {
    {"n_predict", FK_INT, GP(n_predict), -1, INT32_MAX, false},
    {"max_tokens", FK_INT, GP(n_predict), -1, INT32_MAX, false},
    {"return_tokens", FK_BOOL, GP(return_tokens), 0, 0, false},
    {0},
};

/* A refusal being built: HTTP status, OpenAI error type and code, message. */
typedef struct api_err {
    unsigned status;
    const char *type, *code;
    char msg[512];
} api_err;

static bool refuse(api_err *e, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool refuse(api_err *e, unsigned status, const char *code, const char *fmt, ...) {
    e->status = status;
    e->type = status == 404   ? "not_found_error"
              : status >= 500 ? "server_error"
                              : "invalid_request_error";
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return false;
}

static enum MHD_Result reply_refusal(srv_req *r, const api_err *e) {
    return srv_reply_error(r, e->status, e->type, e->code, "%s", e->msg);
}

/* Reads every field of the table present (and not null) in body into p. */
static bool read_fields(const json_t *body, const field *tab, gen_params *p, api_err *e) {
    for (const field *f = tab; f->name; f++) {
        json_t *v = json_object_get(body, f->name);
        if (!v || json_is_null(v)) continue;
        char *dst = (char *)p + f->off;
        if (f->kind == FK_BOOL) {
            if (!json_is_boolean(v))
                return refuse(e, 400, "invalid_type", "'%s' must be a boolean, got %s", f->name,
                              json_kind(v));
            *(bool *)dst = json_is_true(v);
            continue;
        }
        if (!json_is_number(v))
            return refuse(e, 400, "invalid_type", "'%s' must be a number, got %s", f->name,
                          json_kind(v));
        double x = json_number_value(v);
        if (f->kind != FK_FLOAT && (!json_is_integer(v) && x != floor(x)))
            return refuse(e, 400, "invalid_type", "'%s' must be an integer, got %g", f->name, x);
        if (!isfinite(x) || x < f->lo || x > f->hi || (f->lo_open && x == f->lo)) {
            if (f->lo == f->hi)
                return refuse(e, 422, "invalid_value", "'%s' must be %g, got %g", f->name, f->lo,
                              x);
            return refuse(e, 422, "invalid_value", "'%s' must be in %c%g, %g], got %g", f->name,
                          f->lo_open ? '(' : '[', f->lo, f->hi, x);
        }
        if (f->kind == FK_FLOAT)
            *(float *)dst = (float)x;
        else if (f->kind == FK_INT)
            *(int *)dst = (int)x;
        else
            *(int64_t *)dst = json_is_integer(v) ? (int64_t)json_integer_value(v) : (int64_t)x;
    }
    return true;
}

static bool read_stop(const json_t *body, gen_params *p, api_err *e) {
    json_t *v = json_object_get(body, "stop");
    if (!v || json_is_null(v)) return true;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_string(v) && !json_is_array(v))
        return refuse(e, 400, "invalid_type",
                      "'stop' must be a string or an array of strings, got %s", json_kind(v));
    if (n > SRV_MAX_STOP)
        return refuse(e, 422, "invalid_value", "'stop' has %zu strings; at most %d", n,
                      SRV_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(s))
            return refuse(e, 400, "invalid_type", "'stop[%zu]' must be a string, got %s", i,
                          json_kind(s));
        size_t len = json_string_length(s);
        if (len == 0) continue; /* an empty stop string would stop before anything */
        if (len > SRV_MAX_STOP_LEN)
            return refuse(e, 422, "invalid_value", "'stop[%zu]' is %zu bytes; at most %d", i, len,
                          SRV_MAX_STOP_LEN);
        if (memchr(json_string_value(s), 0, len))
            return refuse(e, 422, "invalid_value", "'stop[%zu]' contains a NUL character", i);
        if (!(p->stop[p->n_stop] = strdup(json_string_value(s))))
            return refuse(e, 500, NULL, "out of memory");
        p->n_stop++;
    }
    return true;
}

/* Features of the OpenAI API that reprise does not implement are refused by
 * name rather than silently ignored. A value that asks for nothing passes. */
static bool read_unsupported(const json_t *body, api_err *e) {
    static const char *const names[] = {"logprobs",      "top_logprobs", "echo",      "suffix",
                                        "best_of",       "tools",        "functions", "tool_choice",
                                        "function_call", "logit_bias"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        json_t *v = json_object_get(body, names[i]);
        if (!v || json_is_null(v) || json_is_false(v)) continue;
        if (json_is_array(v) && json_array_size(v) == 0) continue;
        if (json_is_object(v) && json_object_size(v) == 0) continue;
        if (!strcmp(names[i], "best_of") && json_is_integer(v) && json_integer_value(v) == 1)
            continue;
        if (!strcmp(names[i], "tool_choice") && json_is_string(v) &&
            !strcmp(json_string_value(v), "none"))
            continue;
        return refuse(e, 422, "unsupported", "'%s' is not supported by this server", names[i]);
    }
    json_t *rf = json_object_get(body, "response_format");
    if (rf && !json_is_null(rf)) {
        json_t *ty = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "text"))
            return refuse(e, 422, "unsupported",
                          "'response_format' other than {\"type\":\"text\"} is not supported");
    }
    return true;
}

static void gen_params_init(gen_params *p, int n_predict) {
    memset(p, 0, sizeof *p);
    rp_sampler_params d = rp_sampler_default_params();
    p->temperature = d.temp;
    p->top_p = d.top_p;
    p->top_k = d.top_k;
    p->min_p = d.min_p;
    p->presence_penalty = d.presence_penalty;
    p->frequency_penalty = d.freq_penalty;
    p->repeat_penalty = d.repeat_penalty;
    p->repeat_last_n = d.penalty_last_n;
    p->n_predict = n_predict;
    p->n = 1;
    p->seed = -1;
}

static void gen_params_free(gen_params *p) {
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    p->n_stop = 0;
}

/* The entry a request's "model" names (absent or null: the first). */
static int pick_entry(srv_server *srv, const json_t *body, api_err *e) {
    json_t *m = body ? json_object_get(body, "model") : NULL;
    if (!m || json_is_null(m)) return 0;
    if (!json_is_string(m)) {
        refuse(e, 400, "invalid_type", "'model' must be a string, got %s", json_kind(m));
        return -1;
    }
    for (int i = 0; i < srv->n_entries; i++)
        if (!strcmp(srv->entries[i].name, json_string_value(m))) return i;
    tbuf names = {0};
    for (int i = 0; i < srv->n_entries; i++)
        tbuf_printf(&names, "%s'%s'", i ? ", " : "", srv->entries[i].name);
    refuse(e, 404, "model_not_found", "model '%.200s' is not served here (models: %s)",
           json_string_value(m), names.data ? names.data : "");
    tbuf_free(&names);
    return -1;
}

/* ---- prompts ---------------------------------------------------------------- */

static bool tokenize_text(srv_server *srv, const char *text, size_t len, int32_t **toks, int *n,
                          api_err *e) {
    const rp_vocab *v = rp_model_vocab(srv->model);
    size_t k = 0;
    rp_status s = rp_tokenize(v, text, len, true, true, toks, &k);
    if (s)
        return refuse(e, s == RP_ERR_NOMEM ? 500 : 422, "invalid_value",
                      "cannot tokenize the prompt: %s", rp_last_error());
    /* a template that writes BOS itself plus the tokenizer's BOS: keep one */
    int32_t bos = rp_vocab_bos(v);
    if (k >= 2 && bos >= 0 && (*toks)[0] == bos && (*toks)[1] == bos) {
        memmove(*toks, *toks + 1, (k - 1) * sizeof **toks);
        k--;
    }
    if (k > INT_MAX) return refuse(e, 400, "context_length_exceeded", "the prompt is too long");
    *n = (int)k;
    return true;
}

static bool token_array(srv_server *srv, const json_t *a, const char *what, int32_t **toks, int *n,
                        api_err *e) {
    size_t k = json_array_size(a);
    int32_t nv = rp_vocab_n_tokens(rp_model_vocab(srv->model));
    if (k > (size_t)INT_MAX / 2)
        return refuse(e, 400, "context_length_exceeded", "'%s' is too long", what);
    *toks = malloc((k ? k : 1) * sizeof **toks);
    if (!*toks) return refuse(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < k; i++) {
        json_t *x = json_array_get(a, i);
        if (!json_is_integer(x))
            return refuse(e, 400, "invalid_type", "'%s[%zu]' must be a token id (integer), got %s",
                          what, i, json_kind(x));
        json_int_t id = json_integer_value(x);
        if (id < 0 || id >= nv)
            return refuse(e, 422, "invalid_value",
                          "'%s[%zu]' = %lld is outside the vocabulary (0..%d)", what, i,
                          (long long)id, nv - 1);
        (*toks)[i] = (int32_t)id;
    }
    *n = (int)k;
    return true;
}

/* "prompt": a string, token ids, or a one-element array of either. */
static bool read_prompt(srv_server *srv, const json_t *body, int32_t **toks, int *n, api_err *e) {
    json_t *p = json_object_get(body, "prompt");
    if (!p || json_is_null(p)) return refuse(e, 400, "missing_field", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) > 0 && !json_is_integer(json_array_get(p, 0))) {
        if (json_array_size(p) > 1)
            return refuse(e, 422, "unsupported",
                          "'prompt' holds %zu prompts; send one prompt per request",
                          json_array_size(p));
        p = json_array_get(p, 0);
    }
    if (json_is_string(p))
        return tokenize_text(srv, json_string_value(p), json_string_length(p), toks, n, e);
    if (json_is_array(p)) return token_array(srv, p, "prompt", toks, n, e);
    return refuse(e, 400, "invalid_type",
                  "'prompt' must be a string or an array of token ids, got %s", json_kind(p));
}

/* "messages" rendered through the chat template. */
static bool read_messages(srv_server *srv, const json_t *body, int32_t **toks, int *n, api_err *e) {
    json_t *m = json_object_get(body, "messages");
    if (!m || json_is_null(m)) return refuse(e, 400, "missing_field", "'messages' is required");
    if (!json_is_array(m))
        return refuse(e, 400, "invalid_type", "'messages' must be an array, got %s", json_kind(m));
    size_t k = json_array_size(m);
    if (k == 0) return refuse(e, 422, "invalid_value", "'messages' is empty");
    if (!srv->chat_ok)
        return refuse(e, 400, "chat_template_unavailable", "chat is unavailable on this server: %s",
                      srv->chat_err);
    rp_chat_msg *msgs = calloc(k, sizeof *msgs);
    tbuf *parts = calloc(k, sizeof *parts); /* content assembled from text parts */
    bool ok = msgs && parts;
    if (!ok) refuse(e, 500, NULL, "out of memory");
    for (size_t i = 0; ok && i < k; i++) {
        json_t *x = json_array_get(m, i);
        if (!json_is_object(x)) {
            ok = refuse(e, 400, "invalid_type", "'messages[%zu]' must be an object, got %s", i,
                        json_kind(x));
            break;
        }
        json_t *role = json_object_get(x, "role"), *content = json_object_get(x, "content");
        if (!json_is_string(role)) {
            ok = refuse(e, 400, "invalid_type", "'messages[%zu].role' must be a string", i);
            break;
        }
        const char *rs = json_string_value(role);
        if (!strcmp(rs, "developer")) rs = "system"; /* OpenAI's newer name for the system turn */
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant")) {
            ok = refuse(e, 422, "invalid_value",
                        "'messages[%zu].role' '%.40s' is not supported (system, user, assistant)",
                        i, rs);
            break;
        }
        msgs[i].role = rs;
        if (!content || json_is_null(content)) {
            msgs[i].content = "";
        } else if (json_is_string(content)) {
            if (memchr(json_string_value(content), 0, json_string_length(content))) {
                ok = refuse(e, 422, "invalid_value",
                            "'messages[%zu].content' contains a NUL character", i);
                break;
            }
            msgs[i].content = json_string_value(content);
        } else if (json_is_array(content)) {
            for (size_t j = 0; ok && j < json_array_size(content); j++) {
                json_t *part = json_array_get(content, j);
                json_t *ty = json_is_object(part) ? json_object_get(part, "type") : NULL;
                json_t *tx = json_is_object(part) ? json_object_get(part, "text") : NULL;
                if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") ||
                    !json_is_string(tx)) {
                    ok = refuse(
                        e, 422, "unsupported",
                        "'messages[%zu].content[%zu]': only {\"type\":\"text\",\"text\":...} "
                        "parts are supported",
                        i, j);
                    break;
                }
                if (!tbuf_add(&parts[i], json_string_value(tx), strlen(json_string_value(tx))))
                    ok = refuse(e, 500, NULL, "out of memory");
            }
            if (ok && !tbuf_add(&parts[i], "", 1)) ok = refuse(e, 500, NULL, "out of memory");
            if (ok) msgs[i].content = parts[i].data;
        } else {
            ok = refuse(e, 400, "invalid_type",
                        "'messages[%zu].content' must be a string or an array of parts, got %s", i,
                        json_kind(content));
        }
    }
    char *text = NULL;
    if (ok) {
        rp_status s = rp_chat_apply(srv->model, srv->chat_template, msgs, k, true, &text);
        if (s)
            ok = refuse(e, s == RP_ERR_NOMEM ? 500 : 422, "invalid_value", "chat template: %s",
                        rp_last_error());
    }
    if (ok) ok = tokenize_text(srv, text, strlen(text), toks, n, e);
    free(text);
    for (size_t i = 0; parts && i < k; i++) tbuf_free(&parts[i]);
    free(parts);
    free(msgs);
    return ok;
}

/* ---- generation ------------------------------------------------------------- */

typedef enum api_kind { K_COMPLETIONS, K_CHAT, K_NATIVE } api_kind;

/* What a reply (whole or streamed) needs to know about its request. */
typedef struct api_reply {
    api_kind kind;
    srv_server *srv;
    const char *model;
    char id[48];
    long long created;
    int n_prompt;
    bool include_usage;
    bool role_sent;
    gen_params gp; /* as used (seed resolved) */
} api_reply;

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static const char *finish_reason(srv_finish f) {
    return f == SRV_FIN_LIMIT || f == SRV_FIN_CONTEXT ? "length" : "stop";
}

static json_t *usage_json(const api_reply *a, const srv_task *t) {
    return json_pack("{s:i,s:i,s:i}", "prompt_tokens", a->n_prompt, "completion_tokens", t->n_gen,
                     "total_tokens", a->n_prompt + t->n_gen);
}

static json_t *native_result(const api_reply *a, const srv_task *t, const char *text, size_t n) {
    static const char *const stop_type[] = {"none", "eos", "word", "limit", "limit", "none"};
    json_t *stops = json_array();
    for (int i = 0; i < a->gp.n_stop; i++) json_array_append_new(stops, json_string(a->gp.stop[i]));
    double prompt_ms = (t->t_prompt - t->t_start) * 1e3, gen_ms = (t->t_end - t->t_prompt) * 1e3;
    json_t *settings = json_pack(
        "{s:i,s:f,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:I,s:o,s:b}", "n_predict", a->gp.n_predict,
        "temperature", (double)a->gp.temperature, "top_k", a->gp.top_k, "top_p",
        (double)a->gp.top_p, "min_p", (double)a->gp.min_p, "repeat_penalty",
        (double)a->gp.repeat_penalty, "repeat_last_n", a->gp.repeat_last_n, "presence_penalty",
        (double)a->gp.presence_penalty, "frequency_penalty", (double)a->gp.frequency_penalty,
        "seed", (json_int_t)a->gp.seed, "stop", stops, "stream", a->gp.stream);
    json_t *timings = json_pack("{s:i,s:f,s:i,s:f,s:f}", "prompt_n", a->n_prompt, "prompt_ms",
                                prompt_ms, "predicted_n", t->n_gen, "predicted_ms", gen_ms,
                                "predicted_per_second", gen_ms > 0 ? t->n_gen * 1e3 / gen_ms : 0.0);
    if (timings && a->srv->entries[t->entry].spec) {
        /* speculative decoding, with llama.cpp's names */
        json_object_set_new(timings, "draft_n", json_integer(t->n_drafted));
        json_object_set_new(timings, "draft_n_accepted", json_integer(t->n_accepted));
    }
    const char *word =
        t->finish == SRV_FIN_WORD && t->stop_index >= 0 ? a->gp.stop[t->stop_index] : "";
    json_t *j =
        json_pack("{s:s%,s:b,s:s,s:i,s:i,s:s,s:s,s:b,s:o,s:o}", "content", text ? text : "", n,
                  "stop", 1, "model", a->model, "tokens_predicted", t->n_gen, "tokens_evaluated",
                  a->n_prompt, "stop_type", stop_type[t->finish], "stopping_word", word,
                  "truncated", 0, "generation_settings", settings, "timings", timings);
    if (j && a->gp.return_tokens) {
        json_t *ids = json_array();
        const int32_t *v = (const int32_t *)t->tokens.data;
        for (size_t i = 0; ids && i < t->tokens.len / sizeof *v; i++)
            json_array_append_new(ids, json_integer(v[i]));
        json_object_set_new(j, "tokens", ids);
    }
    return j;
}

/* The whole reply of a finished task. */
static json_t *final_json(const api_reply *a, const srv_task *t) {
    const char *text = t->out.data ? t->out.data : "";
    size_t n = t->out.len;
    if (a->kind == K_NATIVE) return native_result(a, t, text, n);
    json_t *choice;
    if (a->kind == K_CHAT)
        choice =
            json_pack("{s:i,s:{s:s,s:s%},s:n,s:s}", "index", 0, "message", "role", "assistant",
                      "content", text, n, "logprobs", "finish_reason", finish_reason(t->finish));
    else
        choice = json_pack("{s:s%,s:i,s:n,s:s}", "text", text, n, "index", 0, "logprobs",
                           "finish_reason", finish_reason(t->finish));
    return json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", a->id, "object",
                     a->kind == K_CHAT ? "chat.completion" : "text_completion", "created",
                     (json_int_t)a->created, "model", a->model, "choices", choice, "usage",
                     usage_json(a, t));
}

static bool sse(tbuf *out, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    bool ok = s && tbuf_printf(out, "data: %s\n\n", s);
    free(s);
    return ok;
}

/* One streamed chunk: new text (finish NULL) or the closing chunk. */
static json_t *chunk_json(api_reply *a, const char *text, size_t n, const char *finish) {
    if (a->kind == K_NATIVE) return json_pack("{s:s%,s:b}", "content", text, n, "stop", 0);
    json_t *choice;
    if (a->kind == K_CHAT) {
        json_t *delta = json_object();
        if (!a->role_sent) json_object_set_new(delta, "role", json_string("assistant"));
        if (!finish || !a->role_sent) json_object_set_new(delta, "content", json_stringn(text, n));
        a->role_sent = true;
        choice = json_pack("{s:i,s:o,s:n,s:s?}", "index", 0, "delta", delta, "logprobs",
                           "finish_reason", finish);
    } else {
        choice = json_pack("{s:s%,s:i,s:n,s:s?}", "text", text, n, "index", 0, "logprobs",
                           "finish_reason", finish);
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", a->id, "object",
                     a->kind == K_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)a->created, "model", a->model, "choices", choice);
}

static bool emit(void *user, tbuf *out, const char *text, size_t n, const srv_task *done) {
    api_reply *a = user;
    if (!done) {
        if (a->kind == K_CHAT && !a->role_sent && !sse(out, chunk_json(a, "", 0, NULL)))
            return false;
        return sse(out, chunk_json(a, text, n, NULL));
    }
    if (done->finish == SRV_FIN_ERROR) {
        json_t *err =
            json_pack("{s:{s:s,s:s,s:s?}}", "error", "message", done->err_msg, "type",
                      done->err_type ? done->err_type : "server_error", "code", done->err_code);
        return sse(out, err);
    }
    if (a->kind == K_NATIVE) return sse(out, native_result(a, done, "", 0));
    if (!sse(out, chunk_json(a, "", 0, finish_reason(done->finish)))) return false;
    if (a->include_usage) {
        json_t *u = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", a->id, "object",
                              a->kind == K_CHAT ? "chat.completion.chunk" : "text_completion",
                              "created", (json_int_t)a->created, "model", a->model, "choices",
                              "usage", usage_json(a, done));
        if (!sse(out, u)) return false;
    }
    return tbuf_printf(out, "data: [DONE]\n\n");
}

static void reply_free(void *user) {
    api_reply *a = user;
    gen_params_free(&a->gp);
    free(a);
}

static enum MHD_Result generate(srv_req *r, json_t *body, api_kind kind) {
    srv_server *srv = srv_req_server(r);
    api_err e = {0};
    api_reply *a = calloc(1, sizeof *a);
    int32_t *toks = NULL;
    int n_tok = 0;
    srv_task *t = NULL;
    if (!a) return srv_reply_error(r, 500, "server_error", NULL, "out of memory");
    a->kind = kind;
    a->srv = srv;
    gen_params_init(&a->gp, kind == K_COMPLETIONS ? 16 : -1);
    int ei = pick_entry(srv, body, &e);
    bool ok = ei >= 0 && read_unsupported(body, &e) &&
              read_fields(body, g_sampling_fields, &a->gp, &e) &&
              read_fields(body, kind == K_NATIVE ? g_native_only : g_openai_only, &a->gp, &e) &&
              read_stop(body, &a->gp, &e);
    if (ok && kind != K_NATIVE) {
        json_t *so = json_object_get(body, "stream_options");
        if (so && !json_is_null(so)) {
            json_t *iu = json_is_object(so) ? json_object_get(so, "include_usage") : NULL;
            if (!json_is_object(so) || (iu && !json_is_boolean(iu)))
                ok = refuse(&e, 400, "invalid_type",
                            "'stream_options' must be {\"include_usage\": bool}");
            else
                a->include_usage = json_is_true(iu);
        }
    }
    if (ok)
        ok = kind == K_CHAT ? read_messages(srv, body, &toks, &n_tok, &e)
                            : read_prompt(srv, body, &toks, &n_tok, &e);
    if (ok) {
        const srv_entry *en = &srv->entries[ei];
        if (n_tok == 0)
            ok = refuse(&e, 400, "invalid_value", "the prompt is empty");
        else if ((uint32_t)n_tok > en->n_ctx)
            ok = refuse(&e, 400, "context_length_exceeded",
                        "the prompt has %d tokens, more than the context size of %u (raise -c)",
                        n_tok, en->n_ctx);
    }
    if (ok && !(t = srv_task_new())) ok = refuse(&e, 500, NULL, "out of memory");
    if (!ok) {
        free(toks);
        reply_free(a);
        return reply_refusal(r, &e);
    }
    const srv_entry *en = &srv->entries[ei];
    a->model = en->name;
    a->n_prompt = n_tok;
    a->created = (long long)time(NULL);
    uint64_t serial = atomic_fetch_add(&srv->counter, 1);
    snprintf(a->id, sizeof a->id, "%s-%016llx", kind == K_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)mix64(serial));
    if (a->gp.seed < 0) a->gp.seed = (int64_t)(mix64(serial ^ (uint64_t)(now_s() * 1e9)) >> 1);

    t->entry = ei;
    t->prompt = toks;
    t->n_prompt = n_tok;
    t->sp.temp = a->gp.temperature;
    t->sp.top_k = a->gp.top_k;
    t->sp.top_p = a->gp.top_p;
    t->sp.min_p = a->gp.min_p;
    t->sp.repeat_penalty = a->gp.repeat_penalty;
    t->sp.penalty_last_n = a->gp.repeat_last_n;
    t->sp.freq_penalty = a->gp.frequency_penalty;
    t->sp.presence_penalty = a->gp.presence_penalty;
    t->sp.seed = (uint64_t)a->gp.seed;
    t->n_predict = a->gp.n_predict;
    for (int i = 0; i < a->gp.n_stop; i++)
        if (!(t->stop[t->n_stop++] = strdup(a->gp.stop[i]))) {
            srv_release(srv->engine, t);
            reply_free(a);
            return srv_reply_error(r, 500, "server_error", NULL, "out of memory");
        }
    t->t_submit = now_s();
    t->deadline = srv->timeout > 0 ? t->t_submit + srv->timeout : 0;
    if (!srv_submit(srv->engine, t)) {
        srv_release(srv->engine, t);
        reply_free(a);
        return srv_reply_error(r, 503, "unavailable_error", "shutting_down",
                               "the server is shutting down");
    }
    if (a->gp.stream) return srv_reply_stream(r, t, emit, a, reply_free);
    enum MHD_Result ret;
    if (!srv_await(r, t))
        ret = MHD_NO; /* the client is gone: drop the connection */
    else if (t->finish == SRV_FIN_ERROR)
        ret = srv_reply_task_error(r, t);
    else
        ret = srv_reply_json(r, 200, final_json(a, t));
    srv_release(srv->engine, t);
    reply_free(a);
    return ret;
}

enum MHD_Result api_completions(srv_req *r, json_t *body) {
    return generate(r, body, K_COMPLETIONS);
}
enum MHD_Result api_chat(srv_req *r, json_t *body) {
    return generate(r, body, K_CHAT);
}
enum MHD_Result api_native_completion(srv_req *r, json_t *body) {
    return generate(r, body, K_NATIVE);
}

/* ---- tokenizer -------------------------------------------------------------- */

static bool read_bool(const json_t *body, const char *name, bool *out, api_err *e) {
    json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v))
        return refuse(e, 400, "invalid_type", "'%s' must be a boolean, got %s", name, json_kind(v));
    *out = json_is_true(v);
    return true;
}

enum MHD_Result api_tokenize(srv_req *r, json_t *body) {
    srv_server *srv = srv_req_server(r);
    api_err e = {0};
    bool add_special = false, parse_special = true, with_pieces = false;
    json_t *c = json_object_get(body, "content");
    if (!c || json_is_null(c))
        return reply_refusal(r, (refuse(&e, 400, "missing_field", "'content' is required"), &e));
    if (!json_is_string(c))
        return reply_refusal(
            r, (refuse(&e, 400, "invalid_type", "'content' must be a string, got %s", json_kind(c)),
                &e));
    if (!read_bool(body, "add_special", &add_special, &e) ||
        !read_bool(body, "parse_special", &parse_special, &e) ||
        !read_bool(body, "with_pieces", &with_pieces, &e))
        return reply_refusal(r, &e);
    const rp_vocab *v = rp_model_vocab(srv->model);
    int32_t *toks = NULL;
    size_t n = 0;
    rp_status s = rp_tokenize(v, json_string_value(c), json_string_length(c), add_special,
                              parse_special, &toks, &n);
    if (s)
        return srv_reply_error(r, 422, "invalid_request_error", "invalid_value",
                               "cannot tokenize: %s", rp_last_error());
    json_t *arr = json_array();
    char piece[1024];
    for (size_t i = 0; arr && i < n; i++) {
        if (!with_pieces) {
            json_array_append_new(arr, json_integer(toks[i]));
            continue;
        }
        int k = rp_token_to_piece(v, toks[i], true, piece, sizeof piece);
        if (k > (int)sizeof piece - 1) k = (int)sizeof piece - 1;
        json_t *p = json_stringn(piece, (size_t)k); /* NULL when not valid UTF-8: give the bytes */
        if (!p) {
            p = json_array();
            for (int j = 0; j < k; j++)
                json_array_append_new(p, json_integer((unsigned char)piece[j]));
        }
        json_array_append_new(arr, json_pack("{s:i,s:o}", "id", toks[i], "piece", p));
    }
    free(toks);
    return srv_reply_json(r, 200, arr ? json_pack("{s:o}", "tokens", arr) : NULL);
}

enum MHD_Result api_detokenize(srv_req *r, json_t *body) {
    srv_server *srv = srv_req_server(r);
    api_err e = {0};
    json_t *a = json_object_get(body, "tokens");
    if (!a || json_is_null(a))
        return reply_refusal(r, (refuse(&e, 400, "missing_field", "'tokens' is required"), &e));
    if (!json_is_array(a))
        return reply_refusal(
            r, (refuse(&e, 400, "invalid_type", "'tokens' must be an array, got %s", json_kind(a)),
                &e));
    int32_t *toks = NULL;
    int n = 0;
    if (!token_array(srv, a, "tokens", &toks, &n, &e)) {
        free(toks);
        return reply_refusal(r, &e);
    }
    const rp_vocab *v = rp_model_vocab(srv->model);
    int need = rp_detokenize(v, toks, (size_t)n, true, NULL, 0);
    char *text = malloc((size_t)need + 1);
    tbuf clean = {0};
    bool ok = text != NULL;
    if (ok) {
        rp_detokenize(v, toks, (size_t)n, true, text, (size_t)need + 1);
        ok = utf8_append_valid(&clean, text, (size_t)need);
    }
    free(text);
    free(toks);
    json_t *j = ok ? json_pack("{s:s%}", "content", clean.data ? clean.data : "", clean.len) : NULL;
    tbuf_free(&clean);
    return srv_reply_json(r, 200, j);
}

/* ---- information ------------------------------------------------------------ */

enum MHD_Result api_health(srv_req *r, json_t *body) {
    (void)body;
    srv_server *srv = srv_req_server(r);
    int busy, queued, total = 0;
    srv_engine_counts(srv->engine, &busy, &queued);
    for (int i = 0; i < srv->n_entries; i++) total += srv->entries[i].n_slot;
    return srv_reply_json(r, 200,
                          json_pack("{s:s,s:i,s:i,s:i}", "status", "ok", "slots_idle", total - busy,
                                    "slots_processing", busy, "requests_queued", queued));
}

/* A process's resident memory now and at its peak, from /proc (bytes; 0 if unknown). */
static void proc_rss(uint64_t *rss, uint64_t *peak) {
    *rss = *peak = 0;
    FILE *fp = fopen("/proc/self/status", "r");
    if (!fp) return;
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, fp)) {
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) *rss = kb * 1024;
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) *peak = kb * 1024;
    }
    fclose(fp);
}

/* The plan of one entry: what it runs, what it costs. */
static json_t *plan_json(const srv_entry *en) {
    const rp_context *c = en->ctx;
    const rp_model *m = rp_context_model(c);
    const int n_eff = rp_context_n_eff(c);
    rp_state_info si;
    rp_context_state_info(c, &si);
    json_t *src = json_array(), *seams = json_array();
    for (int e = 0; e < n_eff; e++) {
        json_array_append_new(src, json_integer(rp_context_step_src(c, e)));
        if (rp_context_step_seam(c, e)) json_array_append_new(seams, json_integer(e));
    }
    int need = rp_context_plan_report(c, NULL, 0), fn = rp_context_plan_format(c, NULL, 0);
    char *report = malloc((size_t)need + 1), *compact = malloc((size_t)fn + 1);
    if (report) rp_context_plan_report(c, report, (size_t)need + 1);
    if (compact) rp_context_plan_format(c, compact, (size_t)fn + 1);
    const int kv_id = si.n_slots_trunk, kv_plan = si.n_slots;
    json_t *j = json_pack(
        "{s:s,s:s,s:i,s:i,s:s,s:o,s:o,s:i,s:i,s:f,s:f,s:I,s:I,s:I,s:I,s:s}", "kind", en->plan_kind,
        "spec", en->plan_spec, "n_layer", rp_model_n_layer(m), "n_eff", n_eff, "eff_to_src_compact",
        compact ? compact : "", "eff_to_src", src, "seams", seams, "kv_slots", kv_plan,
        "kv_slots_identity", kv_id, "kv_growth", kv_id ? (double)kv_plan / kv_id : 1.0,
        "compute_growth", (double)n_eff / rp_model_n_layer(m), "state_bytes",
        (json_int_t)rp_context_state_bytes(c), "state_bytes_per_slot",
        (json_int_t)(rp_context_state_bytes(c) / (uint64_t)en->n_slot), "kv_bytes",
        (json_int_t)si.kv_bytes, "kv_bytes_per_slot",
        (json_int_t)(si.kv_bytes / (uint64_t)en->n_slot), "report", report ? report : "");
    free(report);
    free(compact);
    if (j && en->spec) { /* speculative decoding: what drafts for this plan */
        int dn = rp_spec_describe(en->spec, NULL, 0);
        char *desc = malloc((size_t)dn + 1);
        if (desc) rp_spec_describe(en->spec, desc, (size_t)dn + 1);
        json_object_set_new(j, "speculative", json_string(desc ? desc : ""));
        free(desc);
    }
    if (j &&
        en->plan_file) { /* where the plan came from, and whether it was made for these weights */
        json_object_set_new(j, "file", json_string(en->plan_file));
        json_object_set_new(j, "name", json_string(en->plan_name));
        json_object_set_new(j, "description", json_string(en->description));
        json_object_set_new(j, "forced", json_boolean(en->plan_forced));
    }
    return j;
}

static uint64_t kv_bytes(const rp_context *c) {
    rp_state_info si;
    rp_context_state_info(c, &si);
    return si.kv_bytes;
}

static json_t *entry_json(const srv_server *srv, const srv_entry *en) {
    (void)srv;
    return json_pack("{s:s,s:i,s:i,s:o}", "id", en->name, "n_ctx", (int)en->n_ctx, "slots",
                     en->n_slot, "plan", plan_json(en));
}

enum MHD_Result api_models(srv_req *r, json_t *body) {
    (void)body;
    srv_server *srv = srv_req_server(r);
    json_t *data = json_array();
    long long created = (long long)time(NULL) - (long long)(now_s() - srv->t_start);
    for (int i = 0; i < srv->n_entries; i++) {
        const srv_entry *en = &srv->entries[i];
        json_array_append_new(
            data,
            json_pack("{s:s,s:s,s:I,s:s,s:{s:s,s:i,s:i,s:i,s:I,s:I,s:s,s:s,s:s,s:I}}", "id",
                      en->name, "object", "model", "created", (json_int_t)created, "owned_by",
                      "reprise", "meta", "arch", rp_model_arch(srv->model), "n_ctx", (int)en->n_ctx,
                      "n_layer", rp_model_n_layer(srv->model), "n_eff", rp_context_n_eff(en->ctx),
                      "n_params", (json_int_t)rp_model_n_params(srv->model), "size",
                      (json_int_t)rp_model_weight_bytes(srv->model), "plan", en->plan_kind, "spec",
                      en->plan_spec, "description", en->description ? en->description : "",
                      "kv_bytes_per_slot", (json_int_t)(kv_bytes(en->ctx) / (uint64_t)en->n_slot)));
    }
    return srv_reply_json(r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

enum MHD_Result api_props(srv_req *r, json_t *body) {
    (void)body;
    srv_server *srv = srv_req_server(r);
    const srv_entry *en0 = &srv->entries[0];
    json_t *models = json_array();
    uint64_t state = 0;
    int total = 0;
    for (int i = 0; i < srv->n_entries; i++) {
        json_array_append_new(models, entry_json(srv, &srv->entries[i]));
        state += rp_context_state_bytes(srv->entries[i].ctx);
        total += srv->entries[i].n_slot;
    }
    uint64_t rss, peak, weights = rp_model_weight_bytes(srv->model);
    proc_rss(&rss, &peak);
    char desc[256];
    rp_model_desc(srv->model, desc, sizeof desc);
    rp_sampler_params d = rp_sampler_default_params();
    const char *tmpl = rp_model_meta_str(srv->model, "tokenizer.chat_template");
    tbuf clean = {0};
    if (tmpl) utf8_append_valid(&clean, tmpl, strlen(tmpl));
    json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:o,s:o,s:{s:f,s:i,s:f,s:f,s:i},s:{s:I,"
                          "s:I,s:I,s:I,s:f,s:f},s:s?,"
                          "s:s?,s:b,s:s}",
                          "model", en0->name, "model_path", srv->model_path, "model_desc", desc,
                          "arch", rp_model_arch(srv->model), "n_ctx", (int)en0->n_ctx,
                          "n_ctx_train", rp_model_n_ctx_train(srv->model), "n_vocab",
                          rp_vocab_n_tokens(rp_model_vocab(srv->model)), "total_slots", total,
                          "plan", plan_json(en0), "models", models, "default_generation_settings",
                          "temperature", (double)d.temp, "top_k", d.top_k, "top_p", (double)d.top_p,
                          "min_p", (double)d.min_p, "n_predict", -1, "memory", "weight_bytes",
                          (json_int_t)weights, "state_bytes", (json_int_t)state, "rss_bytes",
                          (json_int_t)rss, "peak_rss_bytes", (json_int_t)peak, "rss_over_weights",
                          weights ? (double)rss / (double)weights : 0.0, "peak_rss_over_weights",
                          weights ? (double)peak / (double)weights : 0.0, "chat_template",
                          clean.data, "chat_template_name", srv->chat_template, "chat",
                          srv->chat_ok, "build_info", "reprise " RP_VERSION);
    tbuf_free(&clean);
    return srv_reply_json(r, 200, j);
}
