/* reprise chat: a conversation with a model through its chat template.
 *
 * On a terminal: line editing and history (libedit), the answer streamed as
 * it is sampled, Ctrl-C stops the answer (not the program), /reset starts
 * over, Ctrl-D or /quit leaves. With stdin not a terminal: one user turn per
 * line, answers on stdout, one per turn.
 *
 * The KV cache holds the conversation so far. Each turn renders the whole
 * conversation with the template; when the text already decoded is a prefix
 * of it (the usual case), only the rest is tokenized and decoded. When the
 * template rewrites history (Qwen3 drops the reasoning of earlier answers),
 * the cache is cut back to the first token that differs and decoding resumes
 * from there, so the model always sees exactly what the template says. */
#include "chat_tmpl.h"
#include "grammar_opts.h"
#include "spec_opts.h"
#include "tools.h"

#include <editline/readline.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_interrupt;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupt = 1;
}

typedef struct msg_list {
    rp_chat_msg *v;
    size_t n, cap;
} msg_list;

static bool msg_push(msg_list *l, const char *role, const char *content, size_t len) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        rp_chat_msg *p = realloc(l->v, cap * sizeof *p);
        if (!p) return false;
        l->v = p;
        l->cap = cap;
    }
    char *r = strdup(role), *c = malloc(len + 1);
    if (!r || !c) {
        free(r);
        free(c);
        return false;
    }
    memcpy(c, content, len);
    c[len] = 0;
    l->v[l->n++] = (rp_chat_msg){r, c};
    return true;
}

static void msg_pop(msg_list *l) {
    if (!l->n) return;
    l->n--;
    free((char *)l->v[l->n].role);
    free((char *)l->v[l->n].content);
}

typedef struct chat_state {
    const char *cmd;
    rp_model *model;
    rp_context *ctx;
    const rp_vocab *vocab;
    rp_sampler *smp;
    chat_tmpl *tmpl;
    int enable_thinking;
    rp_grammar *g; /* constrains every answer (each starts it over), or NULL */
    const sampling_opts *so;
    msg_list hist;
    /* what the KV cache holds: its text (rendered prompt pieces and answers)
     * and its tokens (int32_t ids in toks_buf; toks and n_toks view them) */
    tbuf fed;
    tbuf toks_buf;
    int32_t *toks;
    size_t n_toks;
    int last_row; /* row of the last decode whose logits are the next token's */
    int n_predict;
    bool stats;
    /* speculative decoding: the spec holds the conversation's tokens (the same
     * as toks) and decodes them; NULL = plain decoding */
    rp_spec *spec;
    rp_sampler_params sp;
} chat_state;

static bool fed_append(chat_state *s, const char *p, size_t n) {
    return tbuf_add(&s->fed, p, n);
}

/* The cache's tokens now n of them (a cut), then t[0..k) after them. */
static bool toks_set(chat_state *s, size_t n, const int32_t *t, size_t k) {
    s->toks_buf.len = n * sizeof *t;
    bool ok = tbuf_add(&s->toks_buf, t, k * sizeof *t);
    s->toks = (int32_t *)(void *)s->toks_buf.data;
    s->n_toks = s->toks_buf.len / sizeof *t;
    return ok;
}

static bool toks_append(chat_state *s, const int32_t *t, size_t n) {
    return toks_set(s, s->n_toks, t, n);
}

static rp_status apply_sampling(rp_sampler *smp, void *user) {
    const chat_state *s = user;
    return sampling_opts_apply(s->so, smp, s->vocab);
}

/* (Re)starts the spec's sequence with the sampling options and the grammar. */
static rp_status spec_start(chat_state *s) {
    rp_status st = rp_spec_seq_reset(s->spec, 0, &s->sp);
    if (!st) st = rp_spec_seq_set_grammar(s->spec, 0, s->g);
    if (!st) st = rp_spec_seq_each_sampler(s->spec, 0, apply_sampling, s);
    return st;
}

static void reset(chat_state *s, bool keep_system) {
    size_t keep = keep_system && s->hist.n && !strcmp(s->hist.v[0].role, "system") ? 1 : 0;
    while (s->hist.n > keep) msg_pop(&s->hist);
    rp_kv_clear(s->ctx);
    rp_status st = s->spec ? spec_start(s) : RP_OK;
    if (st) tool_fail(s->cmd, st);
    rp_sampler_reset(s->smp);
    s->fed.len = 0;
    if (s->fed.data) s->fed.data[0] = 0;
    toks_set(s, 0, NULL, 0);
}

/* Decodes toks[from..n_toks) (the cache holds toks[0..from)). */
static bool decode_from(chat_state *s, size_t from) {
    if (from >= s->n_toks) return true;
    if (s->spec) { /* the spec decodes lazily: the last token with the next step */
        rp_status st = rp_spec_seq_feed(s->spec, 0, s->toks + from, (int)(s->n_toks - from));
        if (st) return tool_fail(s->cmd, st), false;
        for (size_t i = from; i < s->n_toks; i++) rp_sampler_accept(s->smp, s->toks[i]);
        return true;
    }
    rp_batch b = {.n_tokens = (int32_t)(s->n_toks - from), .token = s->toks + from};
    rp_status st = rp_decode(s->ctx, &b);
    if (st) {
        tool_fail(s->cmd, st);
        return false;
    }
    for (size_t i = from; i < s->n_toks; i++) rp_sampler_accept(s->smp, s->toks[i]);
    s->last_row = b.n_tokens - 1;
    return true;
}

/* Brings the cache up to the rendered conversation `full`. Returns false on
 * an error (already reported); *n_new and *n_reused describe the work. */
static bool feed(chat_state *s, const char *full, size_t *n_new, size_t *n_reused) {
    size_t len = strlen(full);
    int32_t *t = NULL;
    size_t n = 0;
    rp_status st;
    const char *bos =
        rp_vocab_bos(s->vocab) >= 0 ? rp_vocab_text(s->vocab, rp_vocab_bos(s->vocab)) : NULL;
    bool text_has_bos = bos && *bos && !strncmp(full, bos, strlen(bos));
    const size_t fed_len = s->fed.len;
    if (fed_len == 0 || (fed_len <= len && !memcmp(s->fed.data, full, fed_len) && s->n_toks > 0)) {
        /* the cache's text is a prefix: tokenize and decode only the rest */
        const char *delta = full + fed_len;
        bool first = s->n_toks == 0;
        st = rp_tokenize(s->vocab, delta, len - fed_len, first && !text_has_bos, true, &t, &n);
        if (st) return tool_fail(s->cmd, st), false;
        size_t from = s->n_toks;
        if (from + n > rp_context_n_ctx(s->ctx)) {
            tool_error(
                s->cmd,
                "the conversation needs %zu positions, the context has %u: /reset to start over or "
                "raise -c",
                from + n, rp_context_n_ctx(s->ctx));
            free(t);
            return false;
        }
        bool ok = toks_append(s, t, n) && fed_append(s, delta, len - fed_len);
        free(t);
        if (!ok) return tool_fail(s->cmd, RP_ERR_NOMEM), false;
        *n_new = n;
        *n_reused = from;
        if (n == 0) { /* nothing new: re-decode the last token for fresh logits */
            if (from == 0) return tool_error(s->cmd, "the rendered conversation is empty"), false;
            if (s->spec) return true; /* its last token is decoded with the next step anyway */
            if ((st = rp_kv_seq_truncate(s->ctx, 0, (int)from - 1)))
                return tool_fail(s->cmd, st), false;
            return decode_from(s, from - 1);
        }
        return decode_from(s, from);
    }
    /* the template rewrote history: keep the longest common token prefix */
    st = rp_tokenize(s->vocab, full, len, !text_has_bos, true, &t, &n);
    if (st) return tool_fail(s->cmd, st), false;
    if (n > rp_context_n_ctx(s->ctx)) {
        tool_error(s->cmd,
                   "the conversation needs %zu positions, the context has %u: /reset to start over "
                   "or raise -c",
                   n, rp_context_n_ctx(s->ctx));
        free(t);
        return false;
    }
    size_t k = 0;
    while (k < n && k < s->n_toks && t[k] == s->toks[k]) k++;
    if (k == n && k > 0) k--; /* always decode at least the last token */
    if ((st = s->spec ? rp_spec_seq_truncate(s->spec, 0, (int)k)
                      : rp_kv_seq_truncate(s->ctx, 0, (int)k))) {
        free(t);
        return tool_fail(s->cmd, st), false;
    }
    s->fed.len = 0;
    bool ok = toks_set(s, k, t + k, n - k) && fed_append(s, full, len);
    free(t);
    if (!ok) return tool_fail(s->cmd, RP_ERR_NOMEM), false;
    /* the sampler's penalty window follows the cache */
    rp_sampler_reset(s->smp);
    for (size_t i = 0; i < k; i++) rp_sampler_accept(s->smp, s->toks[i]);
    *n_new = n - k;
    *n_reused = k;
    return decode_from(s, k);
}

/* Whether an answer of n_gen tokens stops here, and why: Ctrl-C, the token
 * limit or a full context. */
static bool answer_stops(const chat_state *s, int n_gen, uint32_t n_ctx, const char **why) {
    if (g_interrupt)
        *why = "interrupted";
    else if (s->n_predict >= 0 && n_gen >= s->n_predict)
        *why = "token limit";
    else if (s->n_toks >= n_ctx)
        *why = "context full";
    else
        return false;
    return true;
}

/* answer() with speculative decoding: each step gives one or more tokens,
 * handled as plain decoding handles each; the spec stops at the end-of-turn
 * token and never goes past the limits it is given, so its tokens and the
 * cache's stay the same. */
static bool answer_spec(chat_state *s, tbuf *text, int *n_gen, const char **why) {
    char piece[512];
    *n_gen = 0;
    *why = "end of turn";
    const uint32_t n_ctx = rp_context_n_ctx(s->ctx);
    int32_t out[RP_SPEC_DRAFT_MAX + 1];
    for (;;) {
        if (answer_stops(s, *n_gen, n_ctx, why)) break;
        int max_new = (int)(n_ctx - s->n_toks);
        if (s->n_predict >= 0 && s->n_predict - *n_gen < max_new) max_new = s->n_predict - *n_gen;
        int k = 0;
        rp_status st = rp_spec_step(s->spec, 0, max_new, out, &k);
        if (st) return tool_fail(s->cmd, st), false;
        for (int i = 0; i < k; i++) {
            const bool eog = rp_vocab_is_eog(s->vocab, out[i]);
            int n = rp_token_to_piece(s->vocab, out[i], eog, piece, sizeof piece);
            if (n > (int)sizeof piece - 1) n = (int)sizeof piece - 1;
            if (!toks_append(s, &out[i], 1) || !fed_append(s, piece, (size_t)n))
                return tool_fail(s->cmd, RP_ERR_NOMEM), false;
            rp_sampler_accept(s->smp, out[i]);
            if (eog) return true;
            tbuf_add(text, piece, (size_t)n);
            fwrite(piece, 1, (size_t)n, stdout);
            (*n_gen)++;
        }
        fflush(stdout);
    }
    return true;
}

/* Samples an answer, streaming it to stdout; its tokens (and the
 * end-of-turn token that closes it) join the cache. */
static bool answer(chat_state *s, tbuf *text, int *n_gen, const char **why) {
    if (s->g) rp_grammar_reset(s->g); /* each answer matches the grammar from its start */
    if (s->spec) return answer_spec(s, text, n_gen, why);
    char piece[512];
    *n_gen = 0;
    *why = "end of turn";
    const uint32_t n_ctx = rp_context_n_ctx(s->ctx);
    for (;;) {
        if (answer_stops(s, *n_gen, n_ctx, why)) break;
        int32_t tok = rp_sampler_sample(s->smp, rp_get_logits(s->ctx, s->last_row));
        if (tok < 0)
            return tool_error(s->cmd, "the grammar allows no token after %d tokens", *n_gen), false;
        bool eog = rp_vocab_is_eog(s->vocab, tok);
        /* the grammar advances here; decode_from puts the token in the penalty window */
        rp_status st = eog || !s->g ? RP_OK : rp_grammar_accept(s->g, tok);
        if (st) return tool_fail(s->cmd, st), false;
        int k = rp_token_to_piece(s->vocab, tok, eog, piece, sizeof piece);
        if (k > (int)sizeof piece - 1) k = (int)sizeof piece - 1;
        /* the cache's text follows the tokens, the end-of-turn token included */
        if (!toks_append(s, &tok, 1) || !fed_append(s, piece, (size_t)k))
            return tool_fail(s->cmd, RP_ERR_NOMEM), false;
        if (!decode_from(s, s->n_toks - 1)) return false;
        if (eog) break;
        tbuf_add(text, piece, (size_t)k);
        fwrite(piece, 1, (size_t)k, stdout);
        fflush(stdout);
        (*n_gen)++;
    }
    return true;
}

/* One user turn: render, feed, answer. */
static bool turn(chat_state *s, const char *line, size_t len, int index) {
    if (!msg_push(&s->hist, "user", line, len)) return tool_fail(s->cmd, RP_ERR_NOMEM), false;
    char *full = NULL;
    rp_status st =
        chat_tmpl_render(s->tmpl, s->model, s->hist.v, s->hist.n, true, s->enable_thinking, &full);
    if (st) {
        msg_pop(&s->hist);
        return tool_fail(s->cmd, st), false;
    }
    double t0 = now_s();
    size_t n_new = 0, n_reused = 0;
    size_t saved_toks = s->n_toks;
    bool ok = feed(s, full, &n_new, &n_reused);
    free(full);
    if (!ok) {
        msg_pop(&s->hist);
        /* the cache may be half-fed: start the next turn from a clean prefix */
        if (s->n_toks != saved_toks) reset(s, true);
        return false;
    }
    double t1 = now_s();
    tbuf text = {0};
    int n_gen = 0;
    const char *why = "";
    g_interrupt = 0;
    const rp_spec_stats st0 = s->spec ? rp_spec_get_stats(s->spec, 0) : (rp_spec_stats){0};
    ok = answer(s, &text, &n_gen, &why);
    double t2 = now_s();
    fputc('\n', stdout);
    fflush(stdout);
    if (!msg_push(&s->hist, "assistant", text.data ? text.data : "", text.len)) ok = false;
    tbuf_free(&text);
    if (!strcmp(why, "interrupted")) fprintf(stderr, "[answer stopped]\n");
    if (!strcmp(why, "context full"))
        fprintf(stderr, "[context full (%u positions): /reset to start over or raise -c]\n",
                rp_context_n_ctx(s->ctx));
    if (s->stats)
        fprintf(stderr,
                "[turn %d: prompt %zu new tokens (%zu reused from the cache) in %.0f ms; answer %d "
                "tokens in %.0f "
                "ms (%.1f t/s), %s; cache %zu/%u]\n",
                index, n_new, n_reused, (t1 - t0) * 1e3, n_gen, (t2 - t1) * 1e3,
                n_gen / (t2 - t1 > 0 ? t2 - t1 : 1e-9), why, s->n_toks, rp_context_n_ctx(s->ctx));
    if (s->stats && s->spec) {
        rp_spec_stats sd = rp_spec_get_stats(s->spec, 0);
        sd.steps -= st0.steps;
        sd.drafted -= st0.drafted;
        sd.accepted -= st0.accepted;
        sd.generated -= st0.generated;
        char msg[256];
        spec_format_stats(msg, sizeof msg, &sd);
        fprintf(stderr, "[%s]\n", msg);
    }
    return ok;
}

typedef struct chat_opts {
    model_opts mo;
    sampling_opts so;
    spec_opts spec;
    grammar_opts go;
    tmpl_opts to;
    const char *system, *prompt, *file;
    int n_predict;
    bool no_think, stats;
} chat_opts;

static int chat_parse(const char *cmd, chat_opts *o, int argc, char **argv) {
    model_opts_init(&o->mo);
    sampling_opts_init(&o->so);
    spec_opts_init(&o->spec);
    o->n_predict = -1;
    const arg_opt opts[] = {
        {"-sys|--system", ARG_STR, &o->system, "TEXT", "system message"},
        {"-p|--prompt", ARG_STR, &o->prompt, "TEXT", "the first user turn"},
        {"-f|--file", ARG_STR, &o->file, "FILE", "the first user turn from a file"},
        {"--no-think", ARG_FLAG, &o->no_think, NULL,
         "Qwen3: answer without reasoning (enable_thinking = false)"},
        {"-n|--n-predict", ARG_INT, &o->n_predict, "N",
         "most tokens per answer (-1 = until end of turn)"},
        {0},
    };
    const arg_opt report_opts[] = {
        {"--stats", ARG_FLAG, &o->stats, NULL,
         "after each answer, tokens decoded, reused and generated (stderr)"},
        {0},
    };
    const arg_opt *tables[] = {opts,
                               tmpl_opts_table(&o->to),
                               sampling_opts_table(&o->so),
                               grammar_opts_table(&o->go),
                               report_opts,
                               model_opts_table(&o->mo, MO_ALL),
                               spec_opts_table(&o->spec),
                               NULL};
    char templates[512];
    snprintf(templates, sizeof templates, "chat templates (built-in families): %s",
             rp_chat_names());
    const char *const epilog[] = {templates, g_plan_help, g_spec_help, NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise chat -m MODEL [-sys TEXT] [-p TEXT] [options]",
        .description =
            "A conversation through the model's chat template. On a terminal: line editing, the "
            "answer\nstreamed, Ctrl-C stops the answer, /help lists the commands (/reset, /quit), "
            "Ctrl-D\nleaves. A line ending in '\\' continues on the next line; a paste of several "
            "lines is\none turn. With stdin not a terminal: one user turn per line (or per "
            "'\\'-joined lines),\none answer per turn on stdout.",
        .tables = tables,
        .epilog = epilog};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (o->prompt && o->file) {
        tool_error(cmd, "give one of -p and -f");
        return 2;
    }
    return spec_opts_check(cmd, &o->spec, &o->mo) && sampling_opts_check(cmd, &o->so) &&
                   grammar_opts_check(cmd, &o->go)
               ? ARGS_OK
               : 2;
}

/* The sampler, the grammar, the speculative draft and the system message
 * (the template was checked before the weights loaded). */
static bool chat_open(chat_state *s, chat_opts *o) {
    s->smp = rp_sampler_new(&o->so.sp, rp_n_vocab(s->ctx));
    if (!s->smp) return tool_fail(s->cmd, RP_ERR_NOMEM), false;
    rp_status st = sampling_opts_apply(&o->so, s->smp, s->vocab);
    if (st) return tool_fail(s->cmd, st), false;
    if (!grammar_opts_bind(s->cmd, &o->go, s->model)) return false;
    s->g = o->go.g;
    rp_sampler_set_grammar(s->smp, s->g);
    s->sp = o->so.sp;
    if (spec_opts_active(&o->spec)) {
        s->spec = spec_open(s->cmd, &o->spec, s->ctx, NULL);
        st = s->spec ? spec_start(s) : RP_OK;
        if (st) tool_fail(s->cmd, st);
        if (!s->spec || st) return false;
    }
    if (o->system && !msg_push(&s->hist, "system", o->system, strlen(o->system))) return false;
    return true;
}

static const char g_chat_help[] =
    "commands:\n"
    "  /help          this list\n"
    "  /reset         start the conversation over (the system message stays)\n"
    "  /quit, /exit   leave (so does Ctrl-D)\n"
    "input: a line ending in '\\' continues on the next line; a pasted block is one turn;\n"
    "a line starting with '//' sends the text after the first '/'. Ctrl-C stops an answer.\n";

/* Drops the bracketed-paste markers from l (in place); sets *open when a
 * paste starts without ending on this line. */
static size_t strip_paste_marks(char *l, size_t len, bool *open) {
    static const char beg[] = "\033[200~", end[] = "\033[201~";
    for (char *p; (p = strstr(l, beg));) {
        *open = true;
        memmove(p, p + 6, strlen(p + 6) + 1);
    }
    for (char *p; (p = strstr(l, end));) {
        *open = false;
        memmove(p, p + 6, strlen(p + 6) + 1);
    }
    (void)len;
    return strlen(l);
}

/* Whether more input is waiting on a terminal right now (the rest of a paste). */
static bool input_pending(void) {
    struct pollfd pf = {.fd = 0, .events = POLLIN};
    return poll(&pf, 1, 15) > 0 && (pf.revents & POLLIN);
}

/* One physical line (without its newline) into *l; false at the end of input. */
static bool read_line(bool tty, const char *prompt, tbuf *l) {
    static char *line = NULL;
    static size_t cap = 0;
    if (!l) { /* release the buffer */
        free(line);
        line = NULL;
        return false;
    }
    l->len = 0;
    if (tty) {
        g_interrupt = 0;
        char *r = readline(prompt);
        if (!r) return false;
        bool ok = tbuf_add(l, r, strlen(r));
        free(r);
        return ok;
    }
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) return false;
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
    return tbuf_add(l, line, (size_t)n);
}

/* One user turn's text: lines joined while they end in '\' (the '\' becomes
 * a newline), while a bracketed paste is open, or (on a terminal) while more
 * pasted input is waiting. false at the end of input with nothing read. */
static bool read_turn(bool tty, tbuf *turn) {
    tbuf l = {0};
    bool any = false, paste = false;
    turn->len = 0;
    if (turn->data) turn->data[0] = 0;
    for (;;) {
        if (!read_line(tty, any ? "... " : "> ", &l)) break;
        any = true;
        l.len = l.data ? strip_paste_marks(l.data, l.len, &paste) : 0;
        bool more = l.len && l.data[l.len - 1] == '\\';
        if (more) l.len--;
        if (turn->len) tbuf_add(turn, "\n", 1);
        tbuf_add(turn, l.data ? l.data : "", l.len);
        if (!more && !paste && !(tty && input_pending())) break;
    }
    tbuf_free(&l);
    if (!turn->data) tbuf_add(turn, "", 0);
    return any;
}

/* A line starting with '/': a command. false when it says to leave. */
static bool command(chat_state *s, const char *l) {
    if (!strcmp(l, "/quit") || !strcmp(l, "/exit")) return false;
    if (!strcmp(l, "/reset")) {
        reset(s, true);
        fprintf(stderr, "[conversation reset]\n");
    } else if (!strcmp(l, "/help") || !strcmp(l, "/?")) {
        fputs(g_chat_help, stderr);
    } else {
        fprintf(stderr,
                "[unknown command '%.40s': /help lists them; start with '//' to send a "
                "text beginning with '/']\n",
                l);
    }
    return true;
}

/* The conversation: the first turn of -p / -f, then one turn per input until
 * /quit, Ctrl-D or the end of stdin. false when a turn failed with stdin not
 * a terminal (a script gets a failing exit status). */
static bool chat_loop(chat_state *s, const char *first) {
    const bool tty = isatty(0);
    if (tty) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        if (g_verbosity > 0)
            fprintf(stderr, "chat: /help lists the commands, /quit (or Ctrl-D) leaves, Ctrl-C "
                            "stops an answer\n");
    }
    int index = 0;
    bool ok = true;
    if (first && *first) ok = turn(s, first, strlen(first), ++index) || tty;
    tbuf in = {0};
    while (ok) {
        if (!read_turn(tty, &in)) {
            if (tty && g_interrupt) { /* Ctrl-C at the prompt: drop the line, a fresh prompt */
                fputc('\n', stdout);
                continue;
            }
            if (tty) fputc('\n', stdout);
            break;
        }
        char *l = in.data;
        size_t len = in.len;
        if (tty && len) add_history(l);
        if (l[0] == '/' && l[1] != '/') {
            if (!command(s, l)) break;
            continue;
        }
        if (l[0] == '/') { /* "//text" sends "/text" */
            l++;
            len--;
        }
        if (len) ok = turn(s, l, len, ++index) || tty;
    }
    tbuf_free(&in);
    if (!tty) read_line(false, NULL, NULL);
    return ok;
}

int cmd_chat(int argc, char **argv) {
    const char *cmd = "chat";
    chat_opts o;
    memset(&o, 0, sizeof o);
    int rc = chat_parse(cmd, &o, argc, argv);
    chat_tmpl tmpl;
    memset(&tmpl, 0, sizeof tmpl);
    if (rc == ARGS_OK && !tool_check_template(cmd, &o.mo, &o.to, &tmpl)) rc = 2;
    char *first = NULL;
    size_t first_len = 0;
    if (rc == ARGS_OK && o.file) {
        if (!(first = tool_read_text(cmd, o.file, &first_len))) rc = 2;
        if (first && first_len && first[first_len - 1] == '\n') first[--first_len] = 0;
    }
    rp_model *model = NULL;
    rp_context *ctx = NULL;
    int load_rc = 0;
    if (rc == ARGS_OK && !tool_load(cmd, &o.mo, 1, &model, &ctx, &load_rc)) rc = load_rc;
    if (rc != ARGS_OK) {
        free(first);
        chat_tmpl_free(&tmpl);
        grammar_opts_free(&o.go);
        return rc;
    }
    chat_state s = {.cmd = cmd,
                    .model = model,
                    .ctx = ctx,
                    .vocab = rp_model_vocab(model),
                    .tmpl = &tmpl,
                    .so = &o.so,
                    .enable_thinking = o.no_think ? 0 : -1,
                    .n_predict = o.n_predict,
                    .stats = o.stats};
    rc = chat_open(&s, &o) && chat_loop(&s, first ? first : o.prompt) ? 0 : 1;
    free(first);
    while (s.hist.n) msg_pop(&s.hist);
    free(s.hist.v);
    tbuf_free(&s.fed);
    tbuf_free(&s.toks_buf);
    rp_sampler_free(s.smp);
    rp_spec_free(s.spec);
    grammar_opts_free(&o.go);
    chat_tmpl_free(&tmpl);
    rp_context_free(ctx);
    rp_model_free(model);
    return rc;
}
