/* Chat templates. Each family is a C function that writes what its Jinja
 * template writes; details that vary between releases of one family (a
 * default system prompt, a BOS token in the text, the assistant opening
 * being unconditional) are read from the template text as flags.
 *
 * Where a template refuses a conversation (roles that do not alternate), or
 * has no place for a system message and would raise or silently drop it, the
 * render fails with a message saying so rather than invent a format. */
#include "text/chat.h"

#include "base/util.h"
#include "text/vocab.h"

#include <stdlib.h>
#include <string.h>

typedef struct chat_ctx {
    const rp_chat_opts *o;
    const char *tmpl; /* "" when none */
    rp_buf out;
} chat_ctx;

typedef rp_status (*render_fn)(chat_ctx *c, const rp_chat_msg *msgs, size_t n);

static bool has(const chat_ctx *c, const char *s) {
    return strstr(c->tmpl, s) != NULL;
}

static bool put(chat_ctx *c, const char *s) {
    return rp_buf_append(&c->out, s, strlen(s));
}
static bool putn(chat_ctx *c, const char *s, size_t n) {
    return rp_buf_append(&c->out, s, n);
}

/* ---- string helpers (Python str semantics) ------------------------------- */

/* Length of the whitespace character at s (Python's str.isspace), 0 if none. */
static size_t space_len(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    if (n >= 1 && ((u[0] >= 0x09 && u[0] <= 0x0D) || (u[0] >= 0x1C && u[0] <= 0x20))) return 1;
    if (n >= 2 && u[0] == 0xC2 && (u[1] == 0x85 || u[1] == 0xA0)) return 2;
    if (n >= 3) {
        uint32_t cp =
            ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
        if ((u[0] & 0xF0) == 0xE0 &&
            (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
             cp == 0x202F || cp == 0x205F || cp == 0x3000))
            return 3;
    }
    return 0;
}

/* Whether a whitespace character ends exactly at s + n. */
static size_t space_len_back(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++)
        if (space_len(s + n - k, k) == k) return k;
    return 0;
}

typedef struct span {
    const char *p;
    size_t n;
} span;

static span sp(const char *s) {
    return (span){s, strlen(s)};
}

static span strip(span s) { /* Jinja |trim, Python .strip() */
    size_t k;
    while (s.n && (k = space_len(s.p, s.n))) {
        s.p += k;
        s.n -= k;
    }
    while (s.n && (k = space_len_back(s.p, s.n))) s.n -= k;
    return s;
}

static span lstrip_nl(span s) {
    while (s.n && *s.p == '\n') {
        s.p++;
        s.n--;
    }
    return s;
}

static span rstrip_nl(span s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

static const char *find_in(span s, const char *needle) {
    return memmem(s.p, s.n, needle, strlen(needle));
}

static const char *find_last(span s, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = s.n >= k ? s.n - k + 1 : 0; i-- > 0;)
        if (!memcmp(s.p + i, needle, k)) return s.p + i;
    return NULL;
}

static bool putspan(chat_ctx *c, span s) {
    return putn(c, s.p, s.n);
}

static bool is_role(const rp_chat_msg *m, const char *r) {
    return m->role && !strcmp(m->role, r);
}

static rp_status check_roles(const char *family, const rp_chat_msg *msgs, size_t n, bool tool_ok) {
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return rp_fail(RP_ERR_INVALID_ARG, "chat message %zu has no %s", i,
                           msgs[i].role ? "content" : "role");
        if (is_role(&msgs[i], "system") || is_role(&msgs[i], "user") ||
            is_role(&msgs[i], "assistant"))
            continue;
        if (tool_ok && is_role(&msgs[i], "tool")) continue;
        return rp_fail(RP_ERR_INVALID_ARG,
                       "chat template '%s': message %zu has role '%s' (system, user, assistant%s)",
                       family, i, msgs[i].role, tool_ok ? ", tool" : "");
    }
    return RP_OK;
}

/* user, assistant, user, ... after an optional leading system message. */
static rp_status check_alternating(const char *family, const rp_chat_msg *msgs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (is_role(&msgs[i], "user") != (i % 2 == 0))
            return rp_fail(RP_ERR_INVALID_ARG,
                           "chat template '%s': roles must alternate user/assistant/user/... after "
                           "an optional "
                           "system message (message %zu is '%s')",
                           family, i, msgs[i].role);
    return RP_OK;
}

static rp_status no_system(const char *family, const rp_chat_msg *msgs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (is_role(&msgs[i], "system"))
            return rp_fail(RP_ERR_INVALID_ARG,
                           "chat template '%s' has no place for a system message (the model's "
                           "template %s it); "
                           "put the instructions in the first user message",
                           family, "rejects or drops");
    return RP_OK;
}

#define PUT(x)                                                                                     \
    do {                                                                                           \
        if (!(x)) return RP_ERR_NOMEM;                                                             \
    } while (0)

/* ---- ChatML (Qwen2, Qwen2.5, many fine-tunes) ---------------------------- */

/* A literal default system prompt in the template ('<|im_start|>system\nYou
 * are Qwen, ...<|im_end|>'), used when the conversation has none. */
static char *chatml_default_system(const char *t) {
    static const char *const heads[] = {"<|im_start|>system\\n", "<|im_start|>system\n"};
    for (size_t h = 0; h < 2; h++)
        for (const char *p = strstr(t, heads[h]); p; p = strstr(p + 1, heads[h])) {
            const char *b = p + strlen(heads[h]);
            if (*b == '\'' || *b == '"' || *b == '{')
                continue; /* the conversation's own system message */
            const char *e = strstr(b, "<|im_end|>");
            if (!e) continue;
            rp_buf s = {0};
            for (const char *q = b; q < e; q++) {
                if (*q == '\'' || *q == '"') {
                    rp_buf_free(&s);
                    s.data = NULL;
                    break; /* not one literal */
                }
                if (q[0] == '\\' && q + 1 < e && q[1] == 'n') {
                    rp_buf_append(&s, "\n", 1);
                    q++;
                } else {
                    rp_buf_append(&s, q, 1);
                }
            }
            if (s.data) {
                rp_buf_append(&s, "", 1);
                return s.data;
            }
        }
    return NULL;
}

static rp_status render_chatml(chat_ctx *c, const rp_chat_msg *msgs, size_t n) {
    rp_status s = check_roles("chatml", msgs, n, true);
    if (s) return s;
    char *def = chatml_default_system(c->tmpl);
    bool ok = true;
    if (def && (n == 0 || !is_role(&msgs[0], "system")))
        ok = put(c, "<|im_start|>system\n") && put(c, def) && put(c, "<|im_end|>\n");
    free(def);
    for (size_t i = 0; i < n && ok; i++)
        ok = put(c, "<|im_start|>") && put(c, msgs[i].role) && put(c, "\n") &&
             put(c, msgs[i].content) && put(c, "<|im_end|>\n");
    if (ok && c->o->add_assistant) ok = put(c, "<|im_start|>assistant\n");
    return ok ? RP_OK : RP_ERR_NOMEM;
}

/* ---- Qwen3: ChatML with <think> ------------------------------------------ */

static rp_status render_qwen3(chat_ctx *c, const rp_chat_msg *msgs, size_t n) {
    rp_status s = check_roles("qwen3", msgs, n, true);
    if (s) return s;
    if (n && is_role(&msgs[0], "system"))
        PUT(put(c, "<|im_start|>system\n") && put(c, msgs[0].content) && put(c, "<|im_end|>\n"));
    /* the last user message that is not a tool response */
    size_t last_query = n ? n - 1 : 0;
    for (size_t i = n; i-- > 0;) {
        span t = sp(msgs[i].content);
        bool tool_resp = t.n >= 31 && !memcmp(t.p, "<tool_response>", 15) &&
                         !memcmp(t.p + t.n - 16, "</tool_response>", 16);
        if (is_role(&msgs[i], "user") && !tool_resp) {
            last_query = i;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const rp_chat_msg *m = &msgs[i];
        if (is_role(m, "user") || (is_role(m, "system") && i > 0)) {
            PUT(put(c, "<|im_start|>") && put(c, m->role) && put(c, "\n") && put(c, m->content) &&
                put(c, "<|im_end|>\n"));
        } else if (is_role(m, "assistant")) {
            span content = sp(m->content), reasoning = {"", 0};
            const char *close = find_in(content, "</think>");
            if (close) {
                const char *last_close = find_last(content, "</think>");
                span after = {last_close + 8, (size_t)(content.p + content.n - last_close - 8)};
                span before = rstrip_nl((span){content.p, (size_t)(close - content.p)});
                const char *open = find_last(before, "<think>");
                if (open) before = (span){open + 7, (size_t)(before.p + before.n - open - 7)};
                reasoning = lstrip_nl(before);
                content = lstrip_nl(after);
            }
            PUT(put(c, "<|im_start|>assistant\n"));
            if (i > last_query && (i == n - 1 || reasoning.n)) {
                /* .strip('\n') on the reasoning, .lstrip('\n') on the answer */
                PUT(put(c, "<think>\n") && putspan(c, rstrip_nl(lstrip_nl(reasoning))) &&
                    put(c, "\n</think>\n\n") && putspan(c, lstrip_nl(content)));
            } else {
                PUT(putspan(c, content));
            }
            PUT(put(c, "<|im_end|>\n"));
        } else if (is_role(m, "tool")) {
            if (i == 0 || !is_role(&msgs[i - 1], "tool")) PUT(put(c, "<|im_start|>user"));
            PUT(put(c, "\n<tool_response>\n") && put(c, m->content) &&
                put(c, "\n</tool_response>"));
            if (i == n - 1 || !is_role(&msgs[i + 1], "tool")) PUT(put(c, "<|im_end|>\n"));
        }
    }
    if (c->o->add_assistant) {
        PUT(put(c, "<|im_start|>assistant\n"));
        if (c->o->enable_thinking == 0) PUT(put(c, "<think>\n\n</think>\n\n"));
    }
    return RP_OK;
}

/* ---- Llama 3 -------------------------------------------------------------- */

static rp_status render_llama3(chat_ctx *c, const rp_chat_msg *msgs, size_t n) {
    rp_status s = check_roles("llama3", msgs, n, false);
    if (s) return s;
    /* the base model's template opens the assistant turn unconditionally */
    bool always_open = c->tmpl[0] && !has(c, "add_generation_prompt");
    /* Llama 3.1+: a system header with the knowledge cut-off and a date */
    bool dated = has(c, "Cutting Knowledge Date");
    PUT(put(c, c->o->bos));
    size_t i = 0;
    if (dated) {
        span sys = {"", 0};
        if (n && is_role(&msgs[0], "system")) {
            sys = strip(sp(msgs[0].content));
            i = 1;
        }
        PUT(put(c, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
                   "2023\nToday Date: "
                   "26 Jul 2024\n\n") &&
            putspan(c, sys) && put(c, "<|eot_id|>"));
    }
    for (; i < n; i++)
        PUT(put(c, "<|start_header_id|>") && put(c, msgs[i].role) &&
            put(c, "<|end_header_id|>\n\n") && putspan(c, strip(sp(msgs[i].content))) &&
            put(c, "<|eot_id|>"));
    if (c->o->add_assistant || always_open)
        PUT(put(c, "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    return RP_OK;
}

/* ---- Llama 2 --------------------------------------------------------------- */

static rp_status render_llama2(chat_ctx *c, const rp_chat_msg *msgs, size_t n) {
    rp_status s = check_roles("llama2", msgs, n, false);
    if (s) return s;
    const char *sys = NULL;
    if (n && is_role(&msgs[0], "system")) {
        sys = msgs[0].content;
        msgs++;
        n--;
    }
    if ((s = check_alternating("llama2", msgs, n))) return s;
    for (size_t i = 0; i < n; i++) {
        rp_buf content = {0};
        if (i == 0 && sys) rp_buf_printf(&content, "<<SYS>>\n%s\n<</SYS>>\n\n", sys);
        rp_buf_append(&content, msgs[i].content, strlen(msgs[i].content));
        span t = strip((span){content.data ? content.data : "", content.len});
        bool ok =
            is_role(&msgs[i], "user")
                ? put(c, c->o->bos) && put(c, "[INST] ") && putspan(c, t) && put(c, " [/INST]")
                : put(c, " ") && putspan(c, t) && put(c, " ") && put(c, c->o->eos);
        rp_buf_free(&content);
        PUT(ok);
    }
    return RP_OK;
}

/* ---- Gemma ------------------------------------------------------------------ */

static rp_status render_gemma(chat_ctx *c, const rp_chat_msg *msgs, size_t n) {
    rp_status s = check_roles("gemma", msgs, n, false);
    if (s) return s;
    /* Gemma 3 folds the system message into the first user turn; Gemma 1/2 raise */
    bool sys_ok = !c->tmpl[0] || has(c, "first_user_prefix");
    const char *prefix = NULL;
    if (n && is_role(&msgs[0], "system") && sys_ok) {
        prefix = msgs[0].content;
        msgs++;
        n--;
    }
    if ((s = no_system("gemma", msgs, n))) return s;
    if ((s = check_alternating("gemma", msgs, n))) return s;
    if (!c->tmpl[0] || has(c, "bos_token")) PUT(put(c, c->o->bos));
    for (size_t i = 0; i < n; i++) {
        PUT(put(c, "<start_of_turn>") &&
            put(c, is_role(&msgs[i], "assistant") ? "model" : msgs[i].role) && put(c, "\n"));
        if (i == 0 && prefix) PUT(put(c, prefix) && put(c, "\n\n"));
        PUT(putspan(c, strip(sp(msgs[i].content))) && put(c, "<end_of_turn>\n"));
    }
    if (c->o->add_assistant) PUT(put(c, "<start_of_turn>model\n"));
    return RP_OK;
}

/* ---- Phi-3 -------------------------------------------------------------------- */

static rp_status render_phi3(chat_ctx *c, const rp_chat_msg *msgs, size_t n) {
    rp_status s = check_roles("phi3", msgs, n, false);
    if (s) return s;
    /* Phi-3-mini/medium write the assistant opening after every user turn and
     * have no system role; later ones write "<|role|>" for every message. */
    bool per_role =
        !c->tmpl[0] || has(c, "message['role'] + '|>'") || has(c, "message.role + '|>'");
    if (c->tmpl[0] && has(c, "bos_token")) PUT(put(c, c->o->bos));
    if (!per_role) {
        if ((s = no_system("phi3", msgs, n))) return s;
        for (size_t i = 0; i < n; i++)
            PUT(is_role(&msgs[i], "user") ? put(c, "<|user|>\n") && put(c, msgs[i].content) &&
                                                put(c, "<|end|>\n<|assistant|>\n")
                                          : put(c, msgs[i].content) && put(c, "<|end|>\n"));
        return RP_OK;
    }
    for (size_t i = 0; i < n; i++)
        PUT(put(c, "<|") && put(c, msgs[i].role) && put(c, "|>\n") && put(c, msgs[i].content) &&
            put(c, "<|end|>\n"));
    if (c->o->add_assistant)
        PUT(put(c, "<|assistant|>\n"));
    else if (has(c, "else %}{{ eos_token }}"))
        PUT(put(c, c->o->eos));
    return RP_OK;
}

/* ---- Mistral ---------------------------------------------------------------------- */

typedef enum { MISTRAL_V0, MISTRAL_V1, MISTRAL_V3, MISTRAL_V3_TEKKEN } mistral_kind;

static rp_status render_mistral_kind(chat_ctx *c, const rp_chat_msg *msgs, size_t n, mistral_kind k,
                                     const char *family) {
    rp_status s = check_roles(family, msgs, n, false);
    if (s) return s;
    const char *sys = NULL;
    if (k != MISTRAL_V0 && n && is_role(&msgs[0], "system")) {
        sys = msgs[0].content;
        msgs++;
        n--;
    }
    if ((s = no_system(family, msgs, n))) return s;
    if ((s = check_alternating(family, msgs, n))) return s;
    PUT(put(c, c->o->bos));
    for (size_t i = 0; i < n; i++) {
        const char *content = msgs[i].content;
        if (is_role(&msgs[i], "user")) {
            /* v1 puts the system message in the first user turn, v3 in the last one */
            bool with_sys = sys && ((k == MISTRAL_V1 && i == 0) || (k >= MISTRAL_V3 && i == n - 1));
            static const char *const open[] = {"[INST] ", " [INST] ", "[INST] ", "[INST]"};
            static const char *const close[] = {" [/INST]", " [/INST]", "[/INST]", "[/INST]"};
            PUT(put(c, open[k]));
            if (with_sys) PUT(put(c, sys) && put(c, "\n\n"));
            PUT(put(c, content) && put(c, close[k]));
        } else if (k == MISTRAL_V3) {
            PUT(put(c, " ") && putspan(c, strip(sp(content))) && put(c, c->o->eos));
        } else {
            PUT(put(c, k == MISTRAL_V1 ? " " : "") && put(c, content) && put(c, c->o->eos));
        }
    }
    return RP_OK;
}

static rp_status render_mistral(chat_ctx *c, const rp_chat_msg *m, size_t n) {
    return render_mistral_kind(c, m, n, MISTRAL_V0, "mistral");
}
static rp_status render_mistral_v1(chat_ctx *c, const rp_chat_msg *m, size_t n) {
    return render_mistral_kind(c, m, n, MISTRAL_V1, "mistral-v1");
}
static rp_status render_mistral_v3(chat_ctx *c, const rp_chat_msg *m, size_t n) {
    return render_mistral_kind(c, m, n, MISTRAL_V3, "mistral-v3");
}
static rp_status render_mistral_v3t(chat_ctx *c, const rp_chat_msg *m, size_t n) {
    return render_mistral_kind(c, m, n, MISTRAL_V3_TEKKEN, "mistral-v3-tekken");
}

/* ---- families ------------------------------------------------------------------------ */

typedef struct family {
    const char *name;
    render_fn render;
} family;

static const family g_families[] = {
    {"chatml", render_chatml},         {"qwen3", render_qwen3},
    {"llama3", render_llama3},         {"llama2", render_llama2},
    {"gemma", render_gemma},           {"phi3", render_phi3},
    {"mistral", render_mistral},       {"mistral-v1", render_mistral_v1},
    {"mistral-v3", render_mistral_v3}, {"mistral-v3-tekken", render_mistral_v3t},
};

const char *rp_chat_names(void) {
    return "chatml, qwen3, llama3, llama2, gemma, phi3, mistral, mistral-v1, mistral-v3, "
           "mistral-v3-tekken";
}

const char *rp_chat_detect(const char *t) {
    if (!t || !*t) return NULL;
    if (strstr(t, "<|im_start|>")) return strstr(t, "<think>") ? "qwen3" : "chatml";
    if (strstr(t, "<|start_header_id|>") && strstr(t, "<|eot_id|>")) return "llama3";
    if (strstr(t, "<start_of_turn>")) return "gemma";
    if (strstr(t, "<|user|>") ||
        (strstr(t, "'<|' + message['role'] + '|>'") && strstr(t, "<|end|>")))
        return "phi3";
    if (strstr(t, "[INST]")) {
        if (strstr(t, "<<SYS>>")) return "llama2";
        if (strstr(t, "[SYSTEM_PROMPT]")) return NULL; /* v7: not rendered here */
        if (strstr(t, "' [INST] '")) return "mistral-v1";
        if (strstr(t, " [/INST]")) return "mistral";
        if (strstr(t, "[INST] ")) return "mistral-v3";
        return "mistral-v3-tekken";
    }
    return NULL;
}

rp_status rp_chat_render(const rp_chat_opts *o, const rp_chat_msg *msgs, size_t n, char **out) {
    *out = NULL;
    const char *name = o->name && *o->name ? o->name : rp_chat_detect(o->template_text);
    if (!name) {
        if (!o->template_text || !*o->template_text)
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "the model has no chat template (tokenizer.chat_template); name one "
                           "with --chat-template "
                           "(%s)",
                           rp_chat_names());
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "the model's chat template is not one reprise renders (it begins '%.60s'); "
                       "name the family "
                       "with --chat-template (%s)",
                       o->template_text, rp_chat_names());
    }
    const family *f = NULL;
    for (size_t i = 0; i < RP_ARRAY_LEN(g_families) && !f; i++)
        if (!strcmp(g_families[i].name, name)) f = &g_families[i];
    if (!f)
        return rp_fail(RP_ERR_INVALID_ARG, "unknown chat template '%s' (known: %s)", name,
                       rp_chat_names());
    rp_chat_opts oo = *o;
    if (!oo.bos) oo.bos = "";
    if (!oo.eos) oo.eos = "";
    /* a family named by hand renders its current release, not the model's text */
    bool own_text =
        !o->name || !*o->name ||
        (rp_chat_detect(o->template_text) && !strcmp(rp_chat_detect(o->template_text), name));
    chat_ctx c = {.o = &oo, .tmpl = own_text && o->template_text ? o->template_text : ""};
    rp_status s = f->render(&c, msgs, n);
    if (!s && !rp_buf_append(&c.out, "", 1)) s = RP_ERR_NOMEM;
    if (s) {
        rp_buf_free(&c.out);
        return s == RP_ERR_NOMEM
                   ? rp_fail(RP_ERR_NOMEM, "out of memory rendering the chat template")
                   : s;
    }
    *out = c.out.data;
    return RP_OK;
}

rp_status rp_chat_apply_opts(const rp_model *m, const rp_chat_opts *o, const rp_chat_msg *msgs,
                             size_t n, char **out) {
    rp_chat_opts oo = *o;
    const rp_vocab *v = m ? rp_model_vocab(m) : NULL;
    if (!oo.template_text && m) oo.template_text = rp_model_meta_str(m, "tokenizer.chat_template");
    if (!oo.bos) oo.bos = v && rp_vocab_bos(v) >= 0 ? rp_vocab_text(v, rp_vocab_bos(v)) : "";
    if (!oo.eos) oo.eos = v && rp_vocab_eos(v) >= 0 ? rp_vocab_text(v, rp_vocab_eos(v)) : "";
    return rp_chat_render(&oo, msgs, n, out);
}

rp_status rp_chat_apply(const rp_model *m, const char *name, const rp_chat_msg *msgs, size_t n,
                        bool add_assistant, char **out) {
    rp_chat_opts o = {.name = name, .add_assistant = add_assistant, .enable_thinking = -1};
    return rp_chat_apply_opts(m, &o, msgs, n, out);
}
