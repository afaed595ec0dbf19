/* The Jinja interpreter against transformers: every model template in
 * tests/fixtures/templates/expected/ and every snippet in snippets.json
 * (both made by tests/reference/make_template_fixtures.py) must render
 * byte-identically, or fail where transformers fails (with raise_exception's
 * message when the template raised). Plus syntax errors, limits and the API. */
#include "test.h"

#include "text/chat_template.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TFIX "tests/fixtures/templates"

/* 2025-01-15 12:00 local time, the clock the fixtures were rendered with. */
static int64_t fixed_now(void) {
    struct tm tm = {.tm_year = 125, .tm_mon = 0, .tm_mday = 15, .tm_hour = 12, .tm_isdst = -1};
    return (int64_t)mktime(&tm);
}

static char *dump(const json_t *j) {
    return j ? json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
}

/* Position of the first difference, for the failure message. */
static size_t first_diff(const char *a, const char *b) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    return i;
}

/* Checks one case; returns whether it matched. */
static bool check_case(const char *what, const char *got, rp_status s, const json_t *c) {
    const json_t *want = json_object_get(c, "output");
    if (want) {
        const char *w = json_string_value(want);
        if (s != RP_OK) {
            CHECK(false, "%s: failed (%s) where transformers renders", what, rp_last_error());
            return false;
        }
        if (strlen(got) != json_string_length(want) || strcmp(got, w)) {
            size_t d = first_diff(got, w);
            CHECK(false, "%s: differs at byte %zu: got \"%.40s\" want \"%.40s\"", what, d, got + d,
                  w + d);
            return false;
        }
        return true;
    }
    const char *err = json_string_value(json_object_get(c, "error"));
    if (s == RP_OK) {
        CHECK(false, "%s: rendered where transformers fails with \"%s\"", what, err);
        return false;
    }
    if (json_is_true(json_object_get(c, "raised")) &&
        (!strstr(rp_last_error(), "raise_exception: ") || !strstr(rp_last_error(), err))) {
        CHECK(false, "%s: error \"%s\" lacks the raised message \"%s\"", what, rp_last_error(),
              err);
        return false;
    }
    return true;
}

static json_t *load_json(const char *path) {
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    CHECK(j, "%s: %s (line %d)", path, e.text, e.line);
    return j;
}

static const char *const TEMPLATES[] = {
    "smollm2",
    "gemma3",
    "gemma2",
    "qwen2.5",
    "qwen3",
    "qwq",
    "qwen3-coder",
    "llama3.1",
    "llama3.2",
    "llama3.3",
    "mistral-nemo",
    "mistral-small-3.2",
    "phi3.5",
    "deepseek-r1-qwen",
    "deepseek-r1-llama",
    "hermes2-pro",
    "hermes3",
    "smollm3",
    "granite3.3",
    "functionary3.2",
    "command-r7b",
    "gpt-oss",
    "kimi-k2",
    "glm4.6",
    "lfm2",
};

static void run_template(const char *name, const json_t *convs, int *n_ok, int *n_all) {
    char path[256];
    snprintf(path, sizeof path, TFIX "/expected/%s.json", name);
    json_t *doc = load_json(path);
    snprintf(path, sizeof path, TFIX "/%s.jinja", name);
    size_t len;
    char *src = test_read(path, &len);
    if (!doc || !src) {
        CHECK(src, "%s missing", path);
        json_decref(doc);
        free(src);
        return;
    }
    rp_chat_template *t;
    rp_status s = rp_chat_template_new(src, &t);
    CHECK(s == RP_OK, "%s: %s", name, rp_last_error());
    const json_t *cases = json_object_get(doc, "cases");
    const char *bos = json_string_value(json_object_get(doc, "bos_token"));
    const char *eos = json_string_value(json_object_get(doc, "eos_token"));
    size_t i;
    const json_t *c;
    json_array_foreach(cases, i, c) {
        if (s) break;
        const char *cname = json_string_value(json_object_get(c, "conversation"));
        const json_t *conv = json_object_get(convs, cname);
        char *msgs = dump(json_object_get(conv, "messages"));
        char *tools = dump(json_object_get(conv, "tools"));
        char *extra = dump(json_object_get(c, "extra"));
        rp_chat_template_inputs in = {
            .messages_json = msgs,
            .tools_json = tools,
            .extra_vars_json = extra,
            .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
            .bos_token = bos,
            .eos_token = eos,
        };
        char *out = NULL;
        rp_status r = rp_chat_template_apply_ex(t, &in, fixed_now(), NULL, &out);
        char what[160];
        snprintf(what, sizeof what, "%s/%s agp=%d extra=%s", name, cname, in.add_generation_prompt,
                 extra);
        *n_ok += check_case(what, out, r, c);
        (*n_all)++;
        free(out);
        free(msgs);
        free(tools);
        free(extra);
    }
    rp_chat_template_free(t);
    json_decref(doc);
    free(src);
}

void test_jinja_model_templates(void) {
    json_t *convs = load_json(TFIX "/conversations.json");
    REQUIRE(convs, "conversations");
    int total_ok = 0, total = 0;
    for (size_t k = 0; k < sizeof TEMPLATES / sizeof *TEMPLATES; k++) {
        int ok = 0, all = 0;
        run_template(TEMPLATES[k], convs, &ok, &all);
        CHECK(all > 0 && ok == all, "%s: %d of %d cases match transformers", TEMPLATES[k], ok, all);
        total_ok += ok;
        total += all;
    }
    CHECK(total >= 600, "only %d cases", total);
    json_decref(convs);
}

void test_jinja_snippets(void) {
    json_t *doc = load_json(TFIX "/snippets.json");
    REQUIRE(doc, "snippets");
    size_t i;
    const json_t *c;
    int ok = 0;
    json_array_foreach(doc, i, c) {
        const char *src = json_string_value(json_object_get(c, "template"));
        rp_chat_template *t;
        rp_status s = rp_chat_template_new(src, &t);
        char *out = NULL;
        if (!s) {
            /* snippets see only their own variables (no messages) */
            const json_t *vars = json_object_get(c, "vars");
            char *vj = dump(vars);
            rp_chat_template_inputs in = {.messages_json = "[{}]", .extra_vars_json = vj};
            s = rp_chat_template_apply_ex(t, &in, fixed_now(), NULL, &out);
            free(vj);
            rp_chat_template_free(t);
        }
        char what[128];
        snprintf(what, sizeof what, "snippet %zu \"%.60s\"", i, src);
        ok += check_case(what, out ? out : "", s, c);
        free(out);
    }
    CHECK(ok == (int)json_array_size(doc), "%d of %zu snippets match", ok, json_array_size(doc));
    json_decref(doc);
}

/* What the interpreter adds to transformers' sandbox, and its messages. */
void test_jinja_extensions_and_errors(void) {
    char *out = NULL;
    /* list.append (transformers' immutable sandbox refuses it; llama.cpp allows it) */
    rp_status s = rp_chat_template_render("{% set l = [1] %}{{ l.append(2) }}{{ l }}", "[{}]", NULL,
                                          NULL, false, NULL, NULL, &out);
    CHECK(s == RP_OK && out && !strcmp(out, "None[1, 2]"), "append: %s",
          out ? out : rp_last_error());
    free(out);

    static const struct {
        const char *src;
        rp_status status;
        const char *msg; /* part of the message */
    } bad[] = {
        {"{% if x %}", RP_ERR_FORMAT,
         "line 1, column 4: unexpected end of template: missing {% endif %}"},
        {"ok\n  {{ 1 + }}", RP_ERR_FORMAT,
         "line 2, column 10: unexpected '}}', expected an expression"},
        {"{{ x | nosuchfilter }}", RP_ERR_FORMAT, "no filter named 'nosuchfilter'"},
        {"{{ x is nosuchtest }}", RP_ERR_FORMAT, "no test named 'nosuchtest'"},
        {"{% break %}", RP_ERR_FORMAT, "'break' outside a for loop"},
        {"{% include 'x' %}", RP_ERR_UNSUPPORTED, "'include' statements are not supported"},
        {"{{ 'abc }}", RP_ERR_FORMAT, "unterminated string literal"},
        {"{# never closed", RP_ERR_FORMAT, "missing end of comment tag"},
        {"{{ (1 ] }}", RP_ERR_FORMAT, "unexpected ']', expected ')'"},
        {"{% endfor %}", RP_ERR_FORMAT, "unexpected {% endfor %}"},
        {"{% frobnicate %}", RP_ERR_FORMAT, "unknown statement 'frobnicate'"},
        {"{{ x.y }}", RP_ERR_INVALID_ARG, "line 1, column 5: 'x' is undefined"},
        {"{{ raise_exception('no system role') }}", RP_ERR_INVALID_ARG,
         "raise_exception: no system role"},
        {"{{ undefined_fn() }}", RP_ERR_INVALID_ARG, "'undefined_fn' is undefined"},
        {"{{ 'a'() }}", RP_ERR_INVALID_ARG, "'str' object is not callable"},
        {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", RP_ERR_INVALID_ARG,
         "nested too deeply"},
        {"{% set r = range(8000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}",
         RP_ERR_INVALID_ARG, "steps"},
        {"{{ range(100000000) }}", RP_ERR_INVALID_ARG, "more than 10 million"},
        {"{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s "
         "~ ns.s %}{% endfor %}",
         RP_ERR_INVALID_ARG, "more than"},
        {"{{ 'x' * 100000000000 }}", RP_ERR_INVALID_ARG, "too large"},
    };
    /* smaller limits than the defaults keep the runaway cases quick */
    jj_limits lim = {
        .max_steps = 2000000, .max_bytes = (size_t)32 << 20, .max_output = (size_t)8 << 20};
    rp_chat_template_inputs in = {.messages_json = "[{\"role\":\"user\",\"content\":\"hi\"}]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        out = NULL;
        rp_chat_template *t;
        s = rp_chat_template_new(bad[i].src, &t);
        if (!s) {
            s = rp_chat_template_apply_ex(t, &in, 0, &lim, &out);
            rp_chat_template_free(t);
        }
        CHECK(s == bad[i].status && strstr(rp_last_error(), bad[i].msg),
              "%s: status %d, \"%s\" (want \"%s\")", bad[i].src, s, rp_last_error(), bad[i].msg);
        CHECK(!out, "%s: output on failure", bad[i].src);
        free(out);
    }
    /* deep nesting in the source is refused, not a stack overflow */
    char deep[4000];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    s = rp_chat_template_check(deep);
    CHECK(s == RP_ERR_FORMAT && strstr(rp_last_error(), "nested"), "deep parens: %s",
          rp_last_error());
    /* bad inputs */
    s = rp_chat_template_render("x", "{not json", NULL, NULL, false, NULL, NULL, &out);
    CHECK(s == RP_ERR_INVALID_ARG && strstr(rp_last_error(), "messages: not valid JSON"), "%s",
          rp_last_error());
    s = rp_chat_template_render("x", "[]", NULL, NULL, false, NULL, NULL, &out);
    CHECK(s == RP_ERR_INVALID_ARG && strstr(rp_last_error(), "empty"), "%s", rp_last_error());
    s = rp_chat_template_render("x", "[1]", NULL, NULL, false, NULL, NULL, &out);
    CHECK(s == RP_ERR_INVALID_ARG && strstr(rp_last_error(), "message 0"), "%s", rp_last_error());
    s = rp_chat_template_render("x", "[{}]", "{}", NULL, false, NULL, NULL, &out);
    CHECK(s == RP_ERR_INVALID_ARG && strstr(rp_last_error(), "tools must be a JSON array"), "%s",
          rp_last_error());
    s = rp_chat_template_render("x", "[{}]", NULL, "[]", false, NULL, NULL, &out);
    CHECK(s == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "extra variables must be a JSON object"),
          "%s", rp_last_error());
    CHECK(rp_chat_template_check("{% for m in messages %}{{ m.content|trim }}{% endfor %}") ==
              RP_OK,
          "check: %s", rp_last_error());
}

/* The variables transformers passes: bos/eos (absent when NULL), tools none,
 * null message fields dropped, reasoning aliased under "thinking". */
void test_jinja_inputs(void) {
    char *out = NULL;
    const char *t =
        "{{ bos_token is defined }}{{ eos_token }}|{{ tools is none }}{{ documents is none }}|"
        "{{ messages[0] | list }}|{{ messages[0].thinking }}|{{ add_generation_prompt }}|{{ x }}";
    rp_status s = rp_chat_template_render(
        t, "[{\"role\":\"assistant\",\"content\":null,\"reasoning\":\"why\",\"tool_calls\":null}]",
        NULL, "{\"x\": [1, 2.5, \"é\"]}", true, NULL, "</s>", &out);
    CHECK(s == RP_OK, "%s", rp_last_error());
    CHECK(out && !strcmp(out, "False</s>|TrueTrue|['thinking', 'role', 'reasoning', "
                              "'reasoning_content']|why|True|[1, "
                              "2.5, 'é']"),
          "got %s", out);
    free(out);
}
