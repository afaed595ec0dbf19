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

json_t *api_body_json(const char *data, size_t len, char *why, size_t why_size) {
    json_error_t jerr;
    json_t *body = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!body) {
        snprintf(why, why_size, "malformed JSON at line %d, column %d: %s", jerr.line, jerr.column,
                 jerr.text);
        return NULL;
    }
    if (!json_is_object(body)) {
        json_decref(body);
        snprintf(why, why_size, "the request body must be a JSON object");
        return NULL;
    }
    return body;
}

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
    float typical_p, top_n_sigma, xtc_probability, xtc_threshold, dry_multiplier, dry_base;
    float mirostat_tau, mirostat_eta;
    int top_k, repeat_last_n, n_predict, n, dry_allowed_length, dry_penalty_last_n, mirostat;
    int min_keep, id_slot;
    int64_t seed; /* < 0: pick one */
    bool stream;
    bool return_tokens; /* /completion: list the generated token ids */
    bool ignore_eos, post_sampling_probs, cache_prompt;
    int n_probs;      /* /completion: alternatives per token */
    int logprobs_n;   /* /v1/completions: logprobs = N alternatives (-1: none) */
    bool logprobs;    /* /v1/chat/completions: logprobs = true */
    int top_logprobs; /* /v1/chat/completions */
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
    {"typical_p", FK_FLOAT, GP(typical_p), 0, 1, false},
    {"top_n_sigma", FK_FLOAT, GP(top_n_sigma), -1, 1000, false},
    {"xtc_probability", FK_FLOAT, GP(xtc_probability), 0, 1, false},
    {"xtc_threshold", FK_FLOAT, GP(xtc_threshold), 0, 1, false},
    {"dry_multiplier", FK_FLOAT, GP(dry_multiplier), 0, 100, false},
    {"dry_base", FK_FLOAT, GP(dry_base), 0, 100, false},
    {"dry_allowed_length", FK_INT, GP(dry_allowed_length), 0, 1 << 20, false},
    {"dry_penalty_last_n", FK_INT, GP(dry_penalty_last_n), -1, 1 << 20, false},
    {"mirostat", FK_INT, GP(mirostat), 0, 2, false},
    {"mirostat_tau", FK_FLOAT, GP(mirostat_tau), 0, 100, false},
    {"mirostat_eta", FK_FLOAT, GP(mirostat_eta), 0, 100, false},
    {"min_keep", FK_INT, GP(min_keep), 0, 1 << 20, false},
    {"ignore_eos", FK_BOOL, GP(ignore_eos), 0, 0, false},
    {"post_sampling_probs", FK_BOOL, GP(post_sampling_probs), 0, 0, false},
    {"cache_prompt", FK_BOOL, GP(cache_prompt), 0, 0, false},
    {"id_slot", FK_INT, GP(id_slot), -1, -1, false},
    {0},
};
/* the length limit by each API's name for it, and the fields of one API only */

static const field g_native_only[] = {
    {"n_predict", FK_INT, GP(n_predict), -1, INT32_MAX, false},
    {"max_tokens", FK_INT, GP(n_predict), -1, INT32_MAX, false},
    {"return_tokens", FK_BOOL, GP(return_tokens), 0, 0, false},
    {"n_probs", FK_INT, GP(n_probs), 0, SRV_MAX_PROBS, false},
    {0},
};
static const field g_completions_only[] = {
    {"max_tokens", FK_INT, GP(n_predict), -1, INT32_MAX, false},
    {"logprobs", FK_INT, GP(logprobs_n), 0, 5, false}, /* OpenAI's limit */
    {0},
};
static const field g_chat_only[] = {
    {"max_tokens", FK_INT, GP(n_predict), -1, INT32_MAX, false},
    {"max_completion_tokens", FK_INT, GP(n_predict), -1, INT32_MAX, false},
    {"logprobs", FK_BOOL, GP(logprobs), 0, 0, false},
    {"top_logprobs", FK_INT, GP(top_logprobs), 0, SRV_MAX_PROBS, false},
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

/* ---- the request fields ------------------------------------------------------
 * Every field llama-server (or OpenAI) accepts, and what this server does
 * with it: implemented, refused with 422 naming it when it asks for
 * something, or accepted without effect where none is the right answer.
 * docs/structured-output.md prints this table; /props lists it. */

enum { A_CMPL = 1, A_CHAT = 2, A_NATIVE = 4, A_ALL = 7 };
typedef enum field_how { F_DONE, F_REFUSED, F_NOOP } field_how;
typedef struct api_field {
    const char *name;
    unsigned apis;
    field_how how;
    double neutral; /* F_REFUSED: a number equal to this asks for nothing */
    const char *note;
} api_field;

static const api_field g_api_fields[] = {
    {"model", A_ALL, F_DONE, 0, "one model: any name; several plans: picks one by id"},
    {"plan", A_ALL, F_DONE, 0,
     "a served plan by name or spec; another spec is built with --plan-requests, else refused"},
    {"prompt", A_CMPL | A_NATIVE, F_DONE, 0, "a string or token ids (one prompt)"},
    {"messages", A_CHAT, F_DONE, 0, "through the chat template (Jinja: every role)"},
    {"chat_template_kwargs", A_CHAT, F_DONE, 0, "extra template variables (Jinja templates)"},
    {"stream", A_ALL, F_DONE, 0, "server-sent events"},
    {"stream_options", A_CMPL | A_CHAT, F_DONE, 0, "include_usage"},
    {"max_tokens", A_ALL, F_DONE, 0, ""},
    {"max_completion_tokens", A_CHAT, F_DONE, 0, ""},
    {"n_predict", A_NATIVE, F_DONE, 0, ""},
    {"n", A_CMPL | A_CHAT, F_DONE, 0, "1 only (one choice per request)"},
    {"stop", A_ALL, F_DONE, 0, "up to 16 strings, matched across tokens"},
    {"temperature", A_ALL, F_DONE, 0, ""},
    {"top_k", A_ALL, F_DONE, 0, ""},
    {"top_p", A_ALL, F_DONE, 0, ""},
    {"min_p", A_ALL, F_DONE, 0, ""},
    {"typical_p", A_ALL, F_DONE, 0, ""},
    {"top_n_sigma", A_ALL, F_DONE, 0, ""},
    {"xtc_probability", A_ALL, F_DONE, 0, ""},
    {"xtc_threshold", A_ALL, F_DONE, 0, ""},
    {"repeat_penalty", A_ALL, F_DONE, 0, ""},
    {"repeat_last_n", A_ALL, F_DONE, 0, ""},
    {"presence_penalty", A_ALL, F_DONE, 0, ""},
    {"frequency_penalty", A_ALL, F_DONE, 0, ""},
    {"dry_multiplier", A_ALL, F_DONE, 0, ""},
    {"dry_base", A_ALL, F_DONE, 0, ""},
    {"dry_allowed_length", A_ALL, F_DONE, 0, ""},
    {"dry_penalty_last_n", A_ALL, F_DONE, 0, ""},
    {"dry_sequence_breakers", A_ALL, F_DONE, 0, "single-token breakers"},
    {"mirostat", A_ALL, F_DONE, 0, ""},
    {"mirostat_tau", A_ALL, F_DONE, 0, ""},
    {"mirostat_eta", A_ALL, F_DONE, 0, ""},
    {"min_keep", A_ALL, F_DONE, 0, ""},
    {"samplers", A_ALL, F_DONE, 0, "names or letters, as llama.cpp"},
    {"seed", A_ALL, F_DONE, 0, "-1 or absent: a fresh one, reported back"},
    {"ignore_eos", A_ALL, F_DONE, 0, ""},
    {"logit_bias", A_ALL, F_DONE, 0, "{id: bias}, [[id, bias]], [[\"text\", bias]], false bans"},
    {"grammar", A_ALL, F_DONE, 0, "GBNF"},
    {"json_schema", A_ALL, F_DONE, 0, "converted to GBNF"},
    {"response_format", A_CMPL | A_CHAT | A_NATIVE, F_DONE, 0, "text, json_object, json_schema"},
    {"logprobs", A_CMPL | A_CHAT, F_DONE, 0, "completions: N alternatives; chat: true/false"},
    {"top_logprobs", A_CHAT, F_DONE, 0, "0..20"},
    {"n_probs", A_NATIVE, F_DONE, 0, "0..20, completion_probabilities"},
    {"post_sampling_probs", A_ALL, F_DONE, 0, "probabilities after the samplers (not with --spec)"},
    {"return_tokens", A_NATIVE, F_DONE, 0, ""},
    {"cache_prompt", A_ALL, F_NOOP, 0, "the output is the same either way"},
    {"id_slot", A_ALL, F_DONE, 0, "-1 only (the engine assigns slots)"},
    {"user", A_CMPL | A_CHAT, F_NOOP, 0, "informational"},
    {"best_of", A_CMPL, F_REFUSED, 1, "one completion per request"},
    {"echo", A_CMPL, F_REFUSED, 0, ""},
    {"suffix", A_CMPL, F_REFUSED, 0, ""},
    {"tools", A_CHAT, F_REFUSED, 0, "tool calls are not parsed"},
    {"tool_choice", A_CHAT, F_REFUSED, 0, "tool calls are not parsed"},
    {"functions", A_CHAT, F_REFUSED, 0, "tool calls are not parsed"},
    {"function_call", A_CHAT, F_REFUSED, 0, "tool calls are not parsed"},
    {"parallel_tool_calls", A_CHAT, F_REFUSED, 0, "tool calls are not parsed"},
    {"parse_tool_calls", A_ALL, F_REFUSED, 0, "tool calls are not parsed"},
    {"n_keep", A_ALL, F_REFUSED, 0, "no context shifting: a full context ends the answer"},
    {"n_discard", A_ALL, F_REFUSED, 0, "no context shifting"},
    {"n_indent", A_ALL, F_REFUSED, 0, ""},
    {"t_max_predict_ms", A_ALL, F_REFUSED, 0, "use the server's --timeout"},
    {"dynatemp_range", A_ALL, F_REFUSED, 0, "dynamic temperature"},
    {"dynatemp_exponent", A_ALL, F_REFUSED, 1, "dynamic temperature"},
    {"timings_per_token", A_ALL, F_REFUSED, 0, ""},
    {"return_progress", A_ALL, F_REFUSED, 0, ""},
    {"response_fields", A_ALL, F_REFUSED, 0, ""},
    {"lora", A_ALL, F_REFUSED, 0, "no adapters"},
    {"image_data", A_ALL, F_REFUSED, 0, "text only"},
    {"multimodal_data", A_ALL, F_REFUSED, 0, "text only"},
    {"input_prefix", A_ALL, F_REFUSED, 0, "no infill"},
    {"input_suffix", A_ALL, F_REFUSED, 0, "no infill"},
    {"input_extra", A_ALL, F_REFUSED, 0, "no infill"},
    {"grammar_lazy", A_ALL, F_REFUSED, 0, "grammars apply from the first token"},
    {"grammar_triggers", A_ALL, F_REFUSED, 0, "grammars apply from the first token"},
    {"preserved_tokens", A_ALL, F_REFUSED, 0, ""},
    {"thinking_forced_open", A_ALL, F_REFUSED, 0, ""},
    {"reasoning_format", A_ALL, F_REFUSED, 0, "reasoning stays in the content"},
    {"reasoning_budget", A_ALL, F_REFUSED, 0, ""},
    {"reasoning_effort", A_CHAT, F_REFUSED, 0, ""},
    {"backend_sampling", A_ALL, F_REFUSED, 0, ""},
    {"audio", A_CHAT, F_REFUSED, 0, "text only"},
    {"modalities", A_CHAT, F_REFUSED, 0, "text only"},
    {"prediction", A_CHAT, F_REFUSED, 0, ""},
    {"store", A_CHAT, F_REFUSED, 0, ""},
    {"metadata", A_CHAT, F_REFUSED, 0, ""},
    {"service_tier", A_CHAT, F_REFUSED, 0, ""},
    {0},
};

/* Whether a value asks for nothing (null, false, 0 or the field's neutral
 * number, "", [], {}). */
static bool asks_nothing(const json_t *v, double neutral) {
    if (json_is_null(v) || json_is_false(v)) return true;
    if (json_is_number(v)) return json_number_value(v) == 0 || json_number_value(v) == neutral;
    if (json_is_string(v)) return json_string_length(v) == 0;
    if (json_is_array(v)) return json_array_size(v) == 0;
    if (json_is_object(v)) return json_object_size(v) == 0;
    return false;
}

static unsigned api_bit(int kind) {
    return kind == 0 ? A_CMPL : kind == 1 ? A_CHAT : A_NATIVE;
}

/* Fields this server does not implement are refused by name rather than
 * silently ignored. */
static bool read_unsupported(const json_t *body, int kind, api_err *e) {
    for (const api_field *f = g_api_fields; f->name; f++) {
        if (f->how != F_REFUSED || !(f->apis & api_bit(kind))) continue;
        json_t *v = json_object_get(body, f->name);
        if (!v || asks_nothing(v, f->neutral)) continue;
        if (!strcmp(f->name, "tool_choice") && json_is_string(v) &&
            (!strcmp(json_string_value(v), "none") || !strcmp(json_string_value(v), "auto")))
            continue;
        if (!strcmp(f->name, "reasoning_format") && json_is_string(v) &&
            !strcmp(json_string_value(v), "none"))
            continue;
        return refuse(e, 422, "unsupported", "'%s' is not supported by this server%s%s", f->name,
                      *f->note ? ": " : "", f->note);
    }
    return true;
}

json_t *api_fields_json(void) {
    static const char *const how[] = {"implemented", "refused", "accepted, no effect"};
    json_t *a = json_array();
    for (const api_field *f = g_api_fields; a && f->name; f++)
        json_array_append_new(a, json_pack("{s:s,s:s,s:b,s:b,s:b,s:s}", "name", f->name, "handling",
                                           how[f->how], "completions", (f->apis & A_CMPL) != 0,
                                           "chat", (f->apis & A_CHAT) != 0, "native",
                                           (f->apis & A_NATIVE) != 0, "note", f->note));
    return a;
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
    p->id_slot = -1;
    p->logprobs_n = -1;
    p->cache_prompt = true;
    p->typical_p = d.typical_p;
    p->top_n_sigma = d.top_n_sigma;
    p->xtc_probability = d.xtc_probability;
    p->xtc_threshold = d.xtc_threshold;
    p->dry_multiplier = d.dry_multiplier;
    p->dry_base = d.dry_base;
    p->dry_allowed_length = d.dry_allowed_length;
    p->dry_penalty_last_n = d.dry_penalty_last_n;
    p->mirostat = d.mirostat;
    p->mirostat_tau = d.mirostat_tau;
    p->mirostat_eta = d.mirostat_eta;
    p->min_keep = d.min_keep;
}

static void gen_params_free(gen_params *p) {
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    p->n_stop = 0;
}

/* The entry a request's "plan" names: a served plan's name, or a spec equal
 * to what a served plan runs. -1 after refusing. */
static int pick_plan(srv_server *srv, const json_t *p, api_err *e) {
    if (!json_is_string(p)) {
        refuse(e, 400, "invalid_type",
               "'plan' must be a string (a served plan's name or spec), "
               "got %s",
               json_kind(p));
        return -1;
    }
    const char *v = json_string_value(p);
    for (int i = 0; i < srv->n_entries; i++)
        if (!strcmp(srv->entries[i].name, v) || !strcmp(srv->entries[i].plan_spec, v) ||
            (!*v && !strcmp(srv->entries[i].plan_kind, "identity")))
            return i;
    if (srv->plan_requests > 0 && *v) { /* the server may build it */
        char err[400];
        unsigned status = 500;
        int idx = srv_plan_for_request(srv, v, &status, err, sizeof err);
        if (idx < 0) refuse(e, status, status == 422 ? "invalid_plan" : "plan_limit", "%s", err);
        return idx;
    }
    tbuf names = {0};
    for (int i = 0; i < srv->n_entries; i++)
        tbuf_printf(&names, "%s'%s' (%s%s%s)", i ? ", " : "", srv->entries[i].name,
                    srv->entries[i].plan_kind, *srv->entries[i].plan_spec ? " " : "",
                    srv->entries[i].plan_spec);
    refuse(e, 422, "plan_not_served",
           "plan '%.200s' is not served here, and this server builds no plans per request (start "
           "it with --plan NAME=SPEC, or --plan-requests N); served: %s",
           v, names.data ? names.data : "");
    tbuf_free(&names);
    return -1;
}

/* The entry a request's "model" (and "plan") name: absent or null, the
 * first; a server with one entry serves it under any model name, as
 * llama-server does; several entries are routed by name. */
static int pick_entry(srv_server *srv, const json_t *body, api_err *e) {
    json_t *m = body ? json_object_get(body, "model") : NULL;
    json_t *p = body ? json_object_get(body, "plan") : NULL;
    if (m && !json_is_null(m) && !json_is_string(m)) {
        refuse(e, 400, "invalid_type", "'model' must be a string, got %s", json_kind(m));
        return -1;
    }
    int by_plan = p && !json_is_null(p) ? pick_plan(srv, p, e) : -2;
    if (by_plan == -1) return -1;
    int by_model = -2;
    if (m && !json_is_null(m)) {
        by_model = -1;
        for (int i = 0; i < srv->n_entries && by_model < 0; i++)
            if (!strcmp(srv->entries[i].name, json_string_value(m))) by_model = i;
        if (by_model < 0 && srv->n_entries == 1) by_model = -3; /* any name: the one model */
    }
    if (by_plan >= 0) {
        if (by_model >= 0 && by_model != by_plan) {
            refuse(e, 400, "invalid_value",
                   "'model' '%.100s' and 'plan' '%.100s' name different "
                   "plans; give one",
                   json_string_value(m), json_string_value(p));
            return -1;
        }
        return by_plan;
    }
    if (by_model >= 0) return by_model;
    if (by_model == -2 || by_model == -3) return 0;
    tbuf names = {0};
    for (int i = 0; i < srv->n_entries; i++)
        tbuf_printf(&names, "%s'%s'", i ? ", " : "", srv->entries[i].name);
    refuse(e, 404, "model_not_found",
           "model '%.200s' is not served here (this server routes by model id: %s)",
           json_string_value(m), names.data ? names.data : "");
    tbuf_free(&names);
    return -1;
}

/* ---- structured output, biases, breakers -------------------------------------- */

/* What a request asks beyond gen_params, handed to its task. */
typedef struct gen_extra {
    char *gbnf; /* the grammar's text (grammar, json_schema, response_format) */
    const char *gbnf_from;
    int32_t *bias_tok;
    float *bias;
    int n_bias, cap_bias;
    char **breakers;
    int n_breakers;
    char *samplers;
    char *kwargs; /* chat_template_kwargs as JSON */
} gen_extra;

static void gen_extra_free(gen_extra *x) {
    free(x->gbnf);
    free(x->bias_tok);
    free(x->bias);
    for (int i = 0; i < x->n_breakers; i++) free(x->breakers[i]);
    free(x->breakers);
    free(x->samplers);
    free(x->kwargs);
    memset(x, 0, sizeof *x);
}

/* The grammar of a JSON schema given as a JSON value. */
static bool schema_grammar(const json_t *schema, const char *what, gen_extra *x, api_err *e) {
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return refuse(e, 400, "invalid_type", "'%s' must be a JSON schema (an object), got %s",
                      what, json_kind(schema));
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return refuse(e, 500, NULL, "out of memory");
    rp_status st = rp_json_schema_to_grammar(text, &x->gbnf);
    free(text);
    if (st)
        return refuse(e, st == RP_ERR_NOMEM ? 500 : 400, "invalid_schema", "'%s': %s", what,
                      rp_last_error());
    x->gbnf_from = what;
    return true;
}

static bool read_grammar(const json_t *body, gen_extra *x, api_err *e) {
    json_t *g = json_object_get(body, "grammar"), *js = json_object_get(body, "json_schema");
    json_t *rf = json_object_get(body, "response_format");
    const char *rft = NULL;
    if (rf && !json_is_null(rf)) {
        json_t *ty = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_string(ty))
            return refuse(e, 400, "invalid_type",
                          "'response_format' must be {\"type\": \"text\" | \"json_object\" | "
                          "\"json_schema\", ...}");
        rft = json_string_value(ty);
        if (strcmp(rft, "text") && strcmp(rft, "json_object") && strcmp(rft, "json_schema"))
            return refuse(e, 422, "unsupported",
                          "'response_format.type' '%.40s' is not supported (text, json_object, "
                          "json_schema)",
                          rft);
        if (!strcmp(rft, "text")) rft = NULL;
    }
    const int n = (g && !json_is_null(g)) + (js && !json_is_null(js)) + (rft != NULL);
    if (n > 1)
        return refuse(e, 400, "invalid_value",
                      "give one of 'grammar', 'json_schema' and a JSON 'response_format'");
    if (g && !json_is_null(g)) {
        if (!json_is_string(g))
            return refuse(e, 400, "invalid_type", "'grammar' must be a string (GBNF), got %s",
                          json_kind(g));
        if (!json_string_length(g)) return true;
        if (!(x->gbnf = strdup(json_string_value(g)))) return refuse(e, 500, NULL, "out of memory");
        x->gbnf_from = "grammar";
        return true;
    }
    if (js && !json_is_null(js)) return schema_grammar(js, "json_schema", x, e);
    if (!rft) return true;
    if (!strcmp(rft, "json_object")) {
        json_t *sc = json_object_get(rf, "schema"); /* llama-server's extension */
        if (sc && !json_is_null(sc)) return schema_grammar(sc, "response_format.schema", x, e);
        x->gbnf = strdup(rp_grammar_json());
        x->gbnf_from = "response_format";
        return x->gbnf ? true : refuse(e, 500, NULL, "out of memory");
    }
    json_t *w = json_object_get(rf, "json_schema");
    json_t *sc = json_is_object(w) ? json_object_get(w, "schema") : NULL;
    if (!sc)
        return refuse(e, 400, "missing_field",
                      "'response_format' json_schema needs {\"json_schema\": {\"schema\": {...}}}");
    return schema_grammar(sc, "response_format.json_schema.schema", x, e);
}

static bool bias_add(gen_extra *x, int32_t tok, float b) {
    if (x->n_bias == x->cap_bias) {
        int cap = x->cap_bias ? 2 * x->cap_bias : 16;
        int32_t *t = realloc(x->bias_tok, (size_t)cap * sizeof *t);
        if (t) x->bias_tok = t;
        float *v = realloc(x->bias, (size_t)cap * sizeof *v);
        if (v) x->bias = v;
        if (!t || !v) return false;
        x->cap_bias = cap;
    }
    x->bias_tok[x->n_bias] = tok;
    x->bias[x->n_bias++] = b;
    return true;
}

/* A bias value: a number, or false (ban the token, as llama-server). */
static bool bias_value(const json_t *v, const char *what, float *b, api_err *e) {
    if (json_is_false(v)) {
        *b = -INFINITY;
        return true;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return refuse(e, 400, "invalid_type", "'%s' must be a number or false, got %s", what,
                      json_kind(v));
    *b = (float)json_number_value(v);
    return true;
}

static bool read_logit_bias(srv_server *srv, const json_t *body, gen_extra *x, api_err *e) {
    json_t *lb = json_object_get(body, "logit_bias");
    if (!lb || json_is_null(lb)) return true;
    const rp_vocab *v = rp_model_vocab(srv->model);
    const int32_t nv = rp_vocab_n_tokens(v);
    if (json_is_object(lb)) { /* OpenAI: {"token id": bias} */
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)lb, k, val) {
            char *end;
            long id = strtol(k, &end, 10);
            if (end == k || *end || id < 0 || id >= nv)
                return refuse(e, 422, "invalid_value",
                              "'logit_bias' key '%.40s' is not a token id (0..%d)", k, nv - 1);
            float b;
            if (!bias_value(val, "logit_bias", &b, e)) return false;
            if (!bias_add(x, (int32_t)id, b)) return refuse(e, 500, NULL, "out of memory");
        }
        return true;
    }
    if (!json_is_array(lb))
        return refuse(e, 400, "invalid_type", "'logit_bias' must be an object or an array, got %s",
                      json_kind(lb));
    for (size_t i = 0; i < json_array_size(lb); i++) { /* llama.cpp: [[id | "text", bias], ...] */
        json_t *pair = json_array_get(lb, i);
        json_t *k = json_array_get(pair, 0), *val = json_array_get(pair, 1);
        float b;
        if (!json_is_array(pair) || json_array_size(pair) != 2)
            return refuse(e, 400, "invalid_type", "'logit_bias[%zu]' must be [token, bias]", i);
        if (!bias_value(val, "logit_bias", &b, e)) return false;
        if (json_is_integer(k)) {
            json_int_t id = json_integer_value(k);
            if (id < 0 || id >= nv)
                return refuse(e, 422, "invalid_value",
                              "'logit_bias[%zu]' token %lld is outside the vocabulary (0..%d)", i,
                              (long long)id, nv - 1);
            if (!bias_add(x, (int32_t)id, b)) return refuse(e, 500, NULL, "out of memory");
        } else if (json_is_string(k)) { /* every token of the text */
            int32_t *t = NULL;
            size_t n = 0;
            if (rp_tokenize(v, json_string_value(k), json_string_length(k), false, false, &t, &n))
                return refuse(e, 422, "invalid_value", "'logit_bias[%zu]': %s", i, rp_last_error());
            bool ok = true;
            for (size_t j = 0; j < n && ok; j++) ok = bias_add(x, t[j], b);
            free(t);
            if (!ok) return refuse(e, 500, NULL, "out of memory");
        } else {
            return refuse(e, 400, "invalid_type",
                          "'logit_bias[%zu][0]' must be a token id or a text", i);
        }
    }
    return true;
}

/* samplers (a string or an array of names), dry_sequence_breakers,
 * chat_template_kwargs. */
static bool read_extra_strings(const json_t *body, gen_extra *x, api_err *e) {
    json_t *sm = json_object_get(body, "samplers");
    if (sm && !json_is_null(sm)) {
        tbuf b = {0};
        if (json_is_string(sm)) {
            tbuf_add(&b, json_string_value(sm), json_string_length(sm));
        } else if (json_is_array(sm)) {
            for (size_t i = 0; i < json_array_size(sm); i++) {
                json_t *it = json_array_get(sm, i);
                if (!json_is_string(it)) {
                    tbuf_free(&b);
                    return refuse(e, 400, "invalid_type", "'samplers[%zu]' must be a string", i);
                }
                tbuf_printf(&b, "%s%s", i ? ";" : "", json_string_value(it));
            }
        } else {
            return refuse(e, 400, "invalid_type", "'samplers' must be a string or an array, got %s",
                          json_kind(sm));
        }
        x->samplers = b.data ? b.data : strdup("");
    }
    json_t *br = json_object_get(body, "dry_sequence_breakers");
    if (br && !json_is_null(br)) {
        if (!json_is_array(br))
            return refuse(e, 400, "invalid_type", "'dry_sequence_breakers' must be an array");
        x->breakers = calloc(json_array_size(br) + 1, sizeof *x->breakers);
        if (!x->breakers) return refuse(e, 500, NULL, "out of memory");
        for (size_t i = 0; i < json_array_size(br); i++) {
            json_t *it = json_array_get(br, i);
            if (!json_is_string(it) || !json_string_length(it))
                return refuse(e, 400, "invalid_type",
                              "'dry_sequence_breakers[%zu]' must be a non-empty string", i);
            if (!(x->breakers[x->n_breakers++] = strdup(json_string_value(it))))
                return refuse(e, 500, NULL, "out of memory");
        }
    }
    json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw))
            return refuse(e, 400, "invalid_type", "'chat_template_kwargs' must be an object");
        x->kwargs = json_dumps(kw, JSON_COMPACT);
    }
    return true;
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

/* One message's content as text: a string, or the text of its parts. */
static bool content_text(const json_t *content, size_t i, tbuf *out, api_err *e) {
    if (!content || json_is_null(content))
        return tbuf_add(out, "", 0) ? true : refuse(e, 500, NULL, "out of memory");
    if (json_is_string(content)) {
        if (memchr(json_string_value(content), 0, json_string_length(content)))
            return refuse(e, 422, "invalid_value",
                          "'messages[%zu].content' contains a NUL character", i);
        return tbuf_add(out, json_string_value(content), json_string_length(content))
                   ? true
                   : refuse(e, 500, NULL, "out of memory");
    }
    if (!json_is_array(content))
        return refuse(e, 400, "invalid_type",
                      "'messages[%zu].content' must be a string or an array of parts, got %s", i,
                      json_kind(content));
    for (size_t j = 0; j < json_array_size(content); j++) {
        json_t *part = json_array_get(content, j);
        json_t *ty = json_is_object(part) ? json_object_get(part, "type") : NULL;
        json_t *tx = json_is_object(part) ? json_object_get(part, "text") : NULL;
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") || !json_is_string(tx))
            return refuse(e, 422, "unsupported",
                          "'messages[%zu].content[%zu]': only {\"type\":\"text\",\"text\":...} "
                          "parts are supported",
                          i, j);
        if (!tbuf_add(out, json_string_value(tx), json_string_length(tx)))
            return refuse(e, 500, NULL, "out of memory");
    }
    return tbuf_add(out, "", 0) ? true : refuse(e, 500, NULL, "out of memory");
}

/* "messages" rendered through the chat template into *text (malloc'ed):
 * each message's content made text, "developer" read as "system", the other
 * keys (tool_calls, name, ...) passed on to a Jinja template. */
static bool render_messages(srv_server *srv, const json_t *body, const char *kwargs, char **text,
                            api_err *e) {
    *text = NULL;
    json_t *m = json_object_get(body, "messages");
    if (!m || json_is_null(m)) return refuse(e, 400, "missing_field", "'messages' is required");
    if (!json_is_array(m))
        return refuse(e, 400, "invalid_type", "'messages' must be an array, got %s", json_kind(m));
    size_t k = json_array_size(m);
    if (k == 0) return refuse(e, 422, "invalid_value", "'messages' is empty");
    if (!srv->chat_ok)
        return refuse(e, 400, "chat_template_unavailable", "chat is unavailable on this server: %s",
                      srv->chat_err);
    json_t *norm = json_array();
    bool ok = norm != NULL;
    if (!ok) refuse(e, 500, NULL, "out of memory");
    for (size_t i = 0; ok && i < k; i++) {
        json_t *x = json_array_get(m, i);
        if (!json_is_object(x)) {
            ok = refuse(e, 400, "invalid_type", "'messages[%zu]' must be an object, got %s", i,
                        json_kind(x));
            break;
        }
        json_t *role = json_object_get(x, "role");
        if (!json_is_string(role)) {
            ok = refuse(e, 400, "invalid_type", "'messages[%zu].role' must be a string", i);
            break;
        }
        tbuf c = {0};
        if (!(ok = content_text(json_object_get(x, "content"), i, &c, e))) {
            tbuf_free(&c); /* the parts before the refused one */
            break;
        }
        json_t *y = json_deep_copy(x);
        const char *rs = json_string_value(role);
        if (y) {
            json_object_set_new(y, "role", json_string(strcmp(rs, "developer") ? rs : "system"));
            json_object_set_new(y, "content", json_stringn(c.data, c.len));
        }
        tbuf_free(&c);
        if (!y || json_array_append_new(norm, y)) ok = refuse(e, 500, NULL, "out of memory");
    }
    char *js = ok ? json_dumps(norm, JSON_COMPACT) : NULL;
    json_decref(norm);
    if (ok && !js) ok = refuse(e, 500, NULL, "out of memory");
    if (ok) {
        char err[400];
        rp_status s = chat_tmpl_render_json(&srv->tmpl, srv->model, js, NULL, kwargs, true, text,
                                            err, sizeof err);
        if (s)
            ok =
                refuse(e, s == RP_ERR_NOMEM ? 500 : 422, "invalid_value", "chat template: %s", err);
    }
    free(js);
    return ok;
}

static bool read_messages(srv_server *srv, const json_t *body, const char *kwargs, int32_t **toks,
                          int *n, api_err *e) {
    char *text = NULL;
    bool ok = render_messages(srv, body, kwargs, &text, e) &&
              tokenize_text(srv, text, strlen(text), toks, n, e);
    free(text);
    return ok;
}

enum MHD_Result api_apply_template(srv_req *r, json_t *body) {
    srv_server *srv = srv_req_server(r);
    api_err e = {0};
    gen_extra x = {0};
    char *text = NULL;
    bool ok = read_extra_strings(body, &x, &e) && render_messages(srv, body, x.kwargs, &text, &e);
    gen_extra_free(&x);
    if (!ok) return reply_refusal(r, &e);
    json_t *j = json_pack("{s:s}", "prompt", text);
    free(text);
    return srv_reply_json(r, 200, j);
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
    gen_params gp;     /* as used (seed resolved) */
    srv_task *task;    /* for the log-probabilities of streamed chunks */
    size_t n_chunks;   /* text chunks streamed so far */
    size_t probs_sent; /* tokens whose log-probabilities were streamed */
    size_t text_off;   /* /v1/completions: text offset of the next streamed token */
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

static json_t *probs_json(const api_reply *a, const srv_prob *p, size_t n, size_t *offset);

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
    if (j && a->gp.n_probs > 0 && !a->gp.stream) {
        size_t off = 0;
        json_object_set_new(j, "completion_probabilities",
                            probs_json(a, (const srv_prob *)(const void *)t->probs.data,
                                       t->probs.len / sizeof(srv_prob), &off));
    }
    if (j && a->gp.return_tokens) {
        json_t *ids = json_array();
        const int32_t *v = (const int32_t *)t->tokens.data;
        for (size_t i = 0; ids && i < t->tokens.len / sizeof *v; i++)
            json_array_append_new(ids, json_integer(v[i]));
        json_object_set_new(j, "tokens", ids);
    }
    return j;
}

/* ---- log-probabilities ---------------------------------------------------------- */

/* A token's text (valid UTF-8) and its bytes. */
static void token_strings(const srv_server *srv, int32_t tok, json_t **text, json_t **bytes) {
    char piece[256];
    int k = rp_token_to_piece(rp_model_vocab(srv->model), tok, false, piece, sizeof piece);
    if (k > (int)sizeof piece - 1) k = (int)sizeof piece - 1;
    if (k < 0) k = 0;
    tbuf clean = {0};
    utf8_append_valid(&clean, piece, (size_t)k);
    *text = json_stringn(clean.data ? clean.data : "", clean.len);
    tbuf_free(&clean);
    *bytes = json_array();
    for (int i = 0; i < k && *bytes; i++)
        json_array_append_new(*bytes, json_integer((unsigned char)piece[i]));
}

/* One token as a chat / native entry: token, bytes, logprob (or prob), and id for native. */
static json_t *prob_entry(const api_reply *a, int32_t tok, float lp) {
    json_t *text, *bytes;
    token_strings(a->srv, tok, &text, &bytes);
    const bool prob = a->kind == K_NATIVE && a->gp.post_sampling_probs;
    json_t *j = json_pack("{s:o,s:o,s:f}", "token", text, "bytes", bytes, prob ? "prob" : "logprob",
                          prob ? (double)expf(lp) : (isfinite(lp) ? (double)lp : -9999.0));
    if (j && a->kind == K_NATIVE) json_object_set_new(j, "id", json_integer(tok));
    return j;
}

/* The log-probabilities of p[0..n) in the shape of the request's API
 * (*offset: text offset of the first, for /v1/completions). */
static json_t *probs_json(const api_reply *a, const srv_prob *p, size_t n, size_t *offset) {
    if (a->kind == K_COMPLETIONS) {
        json_t *toks = json_array(), *lps = json_array(), *tops = json_array(),
               *offs = json_array();
        for (size_t i = 0; i < n; i++) {
            json_t *text, *bytes;
            token_strings(a->srv, p[i].tok, &text, &bytes);
            json_array_append_new(offs, json_integer((json_int_t)*offset));
            *offset += json_array_size(bytes);
            json_decref(bytes);
            json_array_append_new(toks, text);
            json_array_append_new(lps, json_real(isfinite(p[i].lp) ? p[i].lp : -9999.0));
            json_t *top = json_object();
            for (int k = 0; k < p[i].n_top && top; k++) {
                json_t *tt, *tb;
                token_strings(a->srv, p[i].top[k].token, &tt, &tb);
                json_object_set_new(top, json_string_value(tt), json_real(p[i].top[k].logprob));
                json_decref(tt);
                json_decref(tb);
            }
            json_array_append_new(tops, top);
        }
        return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs",
                         tops, "text_offset", offs);
    }
    json_t *arr = json_array();
    const bool prob = a->kind == K_NATIVE && a->gp.post_sampling_probs;
    for (size_t i = 0; i < n && arr; i++) {
        json_t *j = prob_entry(a, p[i].tok, p[i].lp), *top = json_array();
        for (int k = 0; k < p[i].n_top && top; k++)
            json_array_append_new(top, prob_entry(a, p[i].top[k].token, p[i].top[k].logprob));
        json_object_set_new(j, prob ? "top_probs" : "top_logprobs", top);
        json_array_append_new(arr, j);
    }
    if (a->kind == K_NATIVE) return arr;
    return json_pack("{s:o,s:n}", "content", arr, "refusal");
}

/* The task's records [from, to) copied under the engine lock. */
static json_t *task_probs(api_reply *a, size_t from, size_t to, size_t *offset) {
    srv_task *t = a->task;
    srv_lock(a->srv->engine);
    const size_t have = t->probs.len / sizeof(srv_prob);
    if (to > have) to = have;
    srv_prob *copy = to > from ? malloc((to - from) * sizeof *copy) : NULL;
    if (copy)
        memcpy(copy, (const srv_prob *)(const void *)t->probs.data + from,
               (to - from) * sizeof *copy);
    srv_unlock(a->srv->engine);
    json_t *j = probs_json(a, copy, copy ? to - from : 0, offset);
    free(copy);
    return j;
}

static bool want_probs(const api_reply *a) {
    return a->gp.n_probs > 0 || a->gp.logprobs || a->gp.logprobs_n >= 0;
}

/* The whole reply of a finished task. */
static json_t *final_json(const api_reply *a, const srv_task *t) {
    const char *text = t->out.data ? t->out.data : "";
    size_t n = t->out.len;
    if (a->kind == K_NATIVE) return native_result(a, t, text, n);
    json_t *choice;
    size_t off = 0;
    json_t *lp = want_probs(a) ? probs_json(a, (const srv_prob *)(const void *)t->probs.data,
                                            t->probs.len / sizeof(srv_prob), &off)
                               : json_null();
    if (a->kind == K_CHAT)
        choice = json_pack("{s:i,s:{s:s,s:s%},s:o,s:s}", "index", 0, "message", "role", "assistant",
                           "content", text, n, "logprobs", lp, "finish_reason",
                           finish_reason(t->finish));
    else
        choice = json_pack("{s:s%,s:i,s:o,s:s}", "text", text, n, "index", 0, "logprobs", lp,
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
static json_t *chunk_json(api_reply *a, const char *text, size_t n, const char *finish,
                          json_t *lp) {
    if (!lp) lp = json_null();
    if (a->kind == K_NATIVE) {
        json_t *j = json_pack("{s:s%,s:b}", "content", text, n, "stop", 0);
        if (j && a->gp.n_probs > 0)
            json_object_set_new(j, "completion_probabilities", lp);
        else
            json_decref(lp);
        return j;
    }
    json_t *choice;
    if (a->kind == K_CHAT) {
        json_t *delta = json_object();
        if (!a->role_sent) json_object_set_new(delta, "role", json_string("assistant"));
        if (!finish || !a->role_sent) json_object_set_new(delta, "content", json_stringn(text, n));
        a->role_sent = true;
        choice = json_pack("{s:i,s:o,s:o,s:s?}", "index", 0, "delta", delta, "logprobs", lp,
                           "finish_reason", finish);
    } else {
        choice = json_pack("{s:s%,s:i,s:o,s:s?}", "text", text, n, "index", 0, "logprobs", lp,
                           "finish_reason", finish);
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", a->id, "object",
                     a->kind == K_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)a->created, "model", a->model, "choices", choice);
}

/* The log-probabilities of the tokens up to the end of streamed chunk i
 * (SIZE_MAX: all of them), or NULL when not asked for. */
static json_t *chunk_probs(api_reply *a, size_t i) {
    if (!want_probs(a)) return NULL;
    size_t to = SIZE_MAX;
    if (i != SIZE_MAX) {
        srv_lock(a->srv->engine);
        const size_t *mt = (const size_t *)(const void *)a->task->mark_toks.data;
        if (i < a->task->mark_toks.len / sizeof *mt) to = mt[i];
        srv_unlock(a->srv->engine);
    }
    json_t *j = task_probs(a, a->probs_sent, to, &a->text_off);
    if (to == SIZE_MAX) {
        srv_lock(a->srv->engine);
        to = a->task->probs.len / sizeof(srv_prob);
        srv_unlock(a->srv->engine);
    }
    if (to > a->probs_sent) a->probs_sent = to;
    return j;
}

static bool emit(void *user, tbuf *out, const char *text, size_t n, const srv_task *done) {
    api_reply *a = user;
    if (!done) {
        if (a->kind == K_CHAT && !a->role_sent && !sse(out, chunk_json(a, "", 0, NULL, NULL)))
            return false;
        return sse(out, chunk_json(a, text, n, NULL, chunk_probs(a, a->n_chunks++)));
    }
    if (done->finish == SRV_FIN_ERROR) {
        json_t *err =
            json_pack("{s:{s:s,s:s,s:s?}}", "error", "message", done->err_msg, "type",
                      done->err_type ? done->err_type : "server_error", "code", done->err_code);
        return sse(out, err);
    }
    if (a->kind == K_NATIVE) {
        json_t *j = native_result(a, done, "", 0);
        json_t *lp = chunk_probs(a, SIZE_MAX);
        if (j && lp)
            json_object_set_new(j, "completion_probabilities", lp);
        else
            json_decref(lp);
        return sse(out, j);
    }
    if (!sse(out, chunk_json(a, "", 0, finish_reason(done->finish), chunk_probs(a, SIZE_MAX))))
        return false;
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

/* Reads the request into a (gen params), x (what the task takes beyond
 * them) and the prompt's tokens; false after refusing into e. */
static bool read_request(srv_server *srv, const json_t *body, api_kind kind, api_reply *a,
                         gen_extra *x, int *entry, int32_t **toks, int *n_tok, api_err *e) {
    const field *only = kind == K_NATIVE ? g_native_only
                        : kind == K_CHAT ? g_chat_only
                                         : g_completions_only;
    int ei = pick_entry(srv, body, e);
    bool ok = ei >= 0 && read_unsupported(body, (int)kind, e) &&
              read_fields(body, g_sampling_fields, &a->gp, e) &&
              read_fields(body, only, &a->gp, e) && read_stop(body, &a->gp, e) &&
              read_grammar(body, x, e) && read_logit_bias(srv, body, x, e) &&
              read_extra_strings(body, x, e);
    if (ok && kind != K_NATIVE) {
        json_t *so = json_object_get(body, "stream_options");
        if (so && !json_is_null(so)) {
            json_t *iu = json_is_object(so) ? json_object_get(so, "include_usage") : NULL;
            if (!json_is_object(so) || (iu && !json_is_boolean(iu)))
                ok = refuse(e, 400, "invalid_type",
                            "'stream_options' must be {\"include_usage\": bool}");
            else
                a->include_usage = json_is_true(iu);
        }
    }
    if (ok && kind == K_CHAT && a->gp.top_logprobs > 0 && !a->gp.logprobs)
        ok = refuse(e, 400, "invalid_value", "'top_logprobs' needs 'logprobs': true");
    if (ok && x->kwargs && kind != K_CHAT)
        ok = refuse(e, 400, "invalid_value", "'chat_template_kwargs' is for chat requests");
    if (ok && a->gp.post_sampling_probs && srv->entries[ei].spec)
        ok = refuse(e, 422, "unsupported",
                    "'post_sampling_probs' is not available with speculative decoding (the "
                    "pre-sampling log-probabilities are)");
    if (ok)
        ok = kind == K_CHAT ? read_messages(srv, body, x->kwargs, toks, n_tok, e)
                            : read_prompt(srv, body, toks, n_tok, e);
    if (ok) {
        const srv_entry *en = &srv->entries[ei];
        if (*n_tok == 0)
            ok = refuse(e, 400, "invalid_value", "the prompt is empty");
        else if ((uint32_t)*n_tok > en->n_ctx)
            ok = refuse(e, 400, "context_length_exceeded",
                        "the prompt has %d tokens, more than the context size of %u (raise -c)",
                        *n_tok, en->n_ctx);
    }
    *entry = ei;
    return ok;
}

/* The task's sampling from the request. */
static void task_sampling(srv_task *t, const gen_params *g) {
    t->sp.temp = g->temperature;
    t->sp.top_k = g->top_k;
    t->sp.top_p = g->top_p;
    t->sp.min_p = g->min_p;
    t->sp.repeat_penalty = g->repeat_penalty;
    t->sp.penalty_last_n = g->repeat_last_n;
    t->sp.freq_penalty = g->frequency_penalty;
    t->sp.presence_penalty = g->presence_penalty;
    t->sp.seed = (uint64_t)g->seed;
    t->sp.typical_p = g->typical_p;
    t->sp.top_n_sigma = g->top_n_sigma;
    t->sp.xtc_probability = g->xtc_probability;
    t->sp.xtc_threshold = g->xtc_threshold;
    t->sp.dry_multiplier = g->dry_multiplier;
    t->sp.dry_base = g->dry_base;
    t->sp.dry_allowed_length = g->dry_allowed_length;
    t->sp.dry_penalty_last_n = g->dry_penalty_last_n;
    t->sp.mirostat = g->mirostat;
    t->sp.mirostat_tau = g->mirostat_tau;
    t->sp.mirostat_eta = g->mirostat_eta;
    t->sp.min_keep = g->min_keep;
    t->n_predict = g->n_predict;
    t->want_probs = g->n_probs > 0 || g->logprobs || g->logprobs_n >= 0;
    t->n_probs = g->n_probs > 0 ? g->n_probs : g->logprobs ? g->top_logprobs : g->logprobs_n;
    if (t->n_probs < 0) t->n_probs = 0;
    t->post_probs = g->post_sampling_probs;
}

/* Hands x to the task: the grammar bound to the vocabulary, the biases
 * (and ignore_eos), breakers and samplers. false after refusing. */
static bool task_take_extra(srv_server *srv, srv_task *t, gen_extra *x, bool ignore_eos,
                            api_err *e) {
    if (x->gbnf) {
        rp_status st = rp_grammar_new(srv->gv, x->gbnf, NULL, &t->grammar);
        if (st)
            return refuse(e, st == RP_ERR_NOMEM ? 500 : 400, "invalid_grammar", "'%s': %s",
                          x->gbnf_from, rp_last_error());
    }
    const rp_vocab *v = rp_model_vocab(srv->model);
    for (int32_t i = 0; ignore_eos && i < rp_vocab_n_tokens(v); i++)
        if (rp_vocab_is_eog(v, i) && !bias_add(x, i, -INFINITY))
            return refuse(e, 500, NULL, "out of memory");
    t->bias_tok = x->bias_tok;
    t->bias = x->bias;
    t->n_bias = x->n_bias;
    t->breakers = x->breakers;
    t->n_breakers = x->n_breakers;
    t->samplers = x->samplers;
    t->sp.samplers = x->samplers;
    x->bias_tok = NULL;
    x->bias = NULL;
    x->breakers = NULL;
    x->samplers = NULL;
    x->n_bias = x->n_breakers = 0;
    /* the sampler refuses bad stage names and Mirostat modes: say so now */
    rp_sampler *probe = rp_sampler_new(&t->sp, 2);
    if (!probe) return refuse(e, 422, "invalid_value", "sampling: %s", rp_last_error());
    rp_sampler_free(probe);
    return true;
}

static enum MHD_Result generate(srv_req *r, json_t *body, api_kind kind) {
    srv_server *srv = srv_req_server(r);
    api_err e = {0};
    api_reply *a = calloc(1, sizeof *a);
    gen_extra x = {0};
    int32_t *toks = NULL;
    int n_tok = 0, ei = 0;
    srv_task *t = NULL;
    if (!a) return srv_reply_error(r, 500, "server_error", NULL, "out of memory");
    a->kind = kind;
    a->srv = srv;
    gen_params_init(&a->gp, kind == K_COMPLETIONS ? 16 : -1);
    bool ok = read_request(srv, body, kind, a, &x, &ei, &toks, &n_tok, &e);
    if (ok && !(t = srv_task_new())) ok = refuse(&e, 500, NULL, "out of memory");
    uint64_t serial = atomic_fetch_add(&srv->counter, 1);
    if (a->gp.seed < 0) a->gp.seed = (int64_t)(mix64(serial ^ (uint64_t)(now_s() * 1e9)) >> 1);
    if (ok) {
        t->entry = ei;
        t->prompt = toks;
        t->n_prompt = n_tok;
        toks = NULL;
        task_sampling(t, &a->gp);
        ok = task_take_extra(srv, t, &x, a->gp.ignore_eos, &e);
    }
    gen_extra_free(&x);
    for (int i = 0; ok && i < a->gp.n_stop; i++)
        if (!(t->stop[t->n_stop++] = strdup(a->gp.stop[i])))
            ok = refuse(&e, 500, NULL, "out of memory");
    if (!ok) {
        free(toks);
        if (t) srv_release(srv->engine, t);
        reply_free(a);
        return reply_refusal(r, &e);
    }
    const srv_entry *en = &srv->entries[ei];
    a->model = en->name;
    a->n_prompt = n_tok;
    a->created = (long long)time(NULL);
    a->task = t;
    snprintf(a->id, sizeof a->id, "%s-%016llx", kind == K_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)mix64(serial));
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
    if (j) {
        json_object_set_new(j, "chat_template_used",
                            json_string(srv->chat_ok ? srv->tmpl.what : ""));
        json_object_set_new(j, "request_fields", api_fields_json());
    }
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
    /* how a request's "model" is read: one model serves any name, several are routed */
    const char *routing = srv->n_entries == 1
                              ? "any: this server has one model and serves every model name"
                              : "by id: a request's model (or plan) picks one of these; none "
                                "picks the first";
    return srv_reply_json(
        r, 200, json_pack("{s:s,s:o,s:s}", "object", "list", "data", data, "routing", routing));
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
    if (j) {
        json_object_set_new(j, "chat_template_used",
                            json_string(srv->chat_ok ? srv->tmpl.what : ""));
        json_object_set_new(j, "request_fields", api_fields_json());
    }
    return srv_reply_json(r, 200, j);
}

/* ---- metrics and slots -------------------------------------------------------- */

/* Prometheus text, with llama-server's metric names where it has them. */
enum MHD_Result api_metrics(srv_req *r, json_t *body) {
    (void)body;
    srv_server *srv = srv_req_server(r);
    srv_metrics m;
    srv_engine_metrics(srv->engine, &m);
    uint32_t n_ctx_max = 0;
    for (int i = 0; i < srv->n_entries; i++)
        if (srv->entries[i].n_ctx > n_ctx_max) n_ctx_max = srv->entries[i].n_ctx;
    const struct {
        const char *name, *type, *help;
        double v;
    } rows[] = {
        {"llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
         (double)m.prompt_tokens},
        {"llamacpp:prompt_seconds_total", "counter", "Prompt process time", m.prompt_seconds},
        {"llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
         (double)m.tokens_predicted},
        {"llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time",
         m.predicted_seconds},
        {"llamacpp:n_decode_total", "counter", "Total number of llama_decode() calls",
         (double)m.n_decode},
        {"llamacpp:n_busy_slots_per_decode", "counter",
         "Average number of busy slots per llama_decode() call",
         m.n_decode ? (double)m.busy_per_decode / (double)m.n_decode : 0.0},
        {"llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
         m.prompt_seconds > 0 ? (double)m.prompt_tokens / m.prompt_seconds : 0.0},
        {"llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
         m.predicted_seconds > 0 ? (double)m.tokens_predicted / m.predicted_seconds : 0.0},
        {"llamacpp:requests_processing", "gauge", "Number of requests processing.", m.busy},
        {"llamacpp:requests_deferred", "gauge", "Number of requests deferred.", m.queued},
        {"llamacpp:n_tokens_max", "counter", "Largest observed n_tokens.", n_ctx_max},
        {"reprise:requests_finished_total", "counter", "Requests finished (any outcome).",
         (double)m.requests},
        {"reprise:spec_drafted_tokens_total", "counter",
         "Speculative decoding: drafted tokens verified.", (double)m.drafted},
        {"reprise:spec_accepted_tokens_total", "counter",
         "Speculative decoding: drafted tokens kept.", (double)m.accepted},
        {"reprise:models", "gauge", "Models (plans) served.", srv->n_entries},
    };
    tbuf out = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < ARRAY_LEN(rows); i++)
        ok = tbuf_printf(&out, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", rows[i].name, rows[i].help,
                         rows[i].name, rows[i].type, rows[i].name, rows[i].v);
    enum MHD_Result ret =
        ok ? srv_reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", out.data, out.len)
           : srv_reply_error(r, 500, "server_error", NULL, "out of memory");
    tbuf_free(&out);
    return ret;
}

/* Every slot of every model: busy or idle, its request's progress and sampling. */
enum MHD_Result api_slots(srv_req *r, json_t *body) {
    (void)body;
    srv_server *srv = srv_req_server(r);
    int total = 0;
    for (int i = 0; i < srv->n_entries; i++) total += srv->entries[i].n_slot;
    srv_slot_info *info = calloc((size_t)total, sizeof *info);
    if (!info) return srv_reply_error(r, 500, "server_error", NULL, "out of memory");
    int n = srv_engine_slots(srv->engine, info, total);
    json_t *a = json_array();
    for (int i = 0; a && i < n && i < total; i++) {
        const srv_slot_info *s = &info[i];
        const srv_entry *en = &srv->entries[s->entry];
        json_array_append_new(
            a, json_pack("{s:i,s:s,s:i,s:i,s:b,s:i,s:i,s:i,s:{s:f,s:i,s:f,s:f,s:I}}", "id",
                         s->entry * 1000 + s->id, "model", en->name, "id_slot", s->id, "n_ctx",
                         (int)en->n_ctx, "is_processing", s->busy, "n_prompt_tokens", s->n_prompt,
                         "n_decoded", s->n_gen, "n_predict", s->n_predict, "params", "temperature",
                         (double)s->sp.temp, "top_k", s->sp.top_k, "top_p", (double)s->sp.top_p,
                         "min_p", (double)s->sp.min_p, "seed", (json_int_t)s->sp.seed));
    }
    free(info);
    return srv_reply_json(r, 200, a);
}
