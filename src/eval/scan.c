/* reprise scan: the workload, the block list and the evaluation of plans on
 * one loaded model with the prefix reuse described in scan.h. */
#include "eval/scan.h"
#include "arch/arch.h"
#include "core/context.h"
#include "base/util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- metrics ------------------------------------------------------------- */

static const char *const g_metric_names[] = {"ppl", "kld", "probe", "math", "eq", "mc", "combined"};

const char *rp_scan_metric_name(rp_scan_metric m) {
    return (unsigned)m < RP_ARRAY_LEN(g_metric_names) ? g_metric_names[m] : "?";
}

int rp_scan_metric_from_name(const char *name) {
    for (size_t k = 0; k < RP_ARRAY_LEN(g_metric_names); k++)
        if (name && !strcmp(name, g_metric_names[k])) return (int)k;
    return -1;
}

int rp_scan_metric_sign(rp_scan_metric m) {
    return m == RP_SCAN_PPL || m == RP_SCAN_KLD ? -1 : +1;
}

/* ---- workload ------------------------------------------------------------ */

void rp_scan_set_free(rp_scan_set *set) {
    free(set->tok);
    free(set->seq);
    free(set->group);
    free(set->items);
    free(set->gen);
    memset(set, 0, sizeof *set);
}

/* Fills the offsets and the totals of set->seq[0..n_seq) (whose tok, n_dec
 * and score_from are set). */
static rp_status set_offsets(rp_scan_set *set) {
    size_t row = 0, scored = 0;
    set->max_dec = 0;
    for (int q = 0; q < set->n_seq; q++) {
        rp_scan_seq *sq = &set->seq[q];
        RP_ASSERT(sq->n_dec >= 1 && sq->score_from >= 0 && sq->score_from < sq->n_dec);
        sq->row = row;
        sq->scored = scored;
        row += (size_t)sq->n_dec;
        scored += (size_t)(sq->n_dec - sq->score_from);
        set->max_dec = RP_MAX(set->max_dec, sq->n_dec);
    }
    set->n_rows = row;
    set->n_scored = scored;
    return RP_OK;
}

/* Groups of consecutive sequences: at most max_per sequences and, beyond the
 * first sequence of a group, at most budget tokens. */
static rp_status set_groups(rp_scan_set *set, int max_per, int budget) {
    set->group = rp_malloc(((size_t)set->n_seq + 1) * sizeof *set->group, "scan groups");
    if (!set->group) return RP_ERR_NOMEM;
    set->n_group = 0;
    set->max_group = 0;
    int q = 0;
    while (q < set->n_seq) {
        int k = 0, used = 0;
        while (q + k < set->n_seq && k < max_per &&
               (k == 0 || used + set->seq[q + k].n_dec <= budget))
            used += set->seq[q + k++].n_dec;
        set->group[set->n_group++] = q;
        set->max_group = RP_MAX(set->max_group, k);
        q += k;
    }
    set->group[set->n_group] = set->n_seq;
    return RP_OK;
}

rp_status rp_scan_set_text(rp_scan_set *set, const int32_t *tokens, const rp_eval_windows *w,
                           int n_batch) {
    memset(set, 0, sizeof *set);
    const int c = w->n_ctx;
    if (c < RP_EVAL_MIN_CTX || w->n_chunk < 1 || w->first != c / 2)
        return rp_fail(RP_ERR_INVALID_ARG, "scan: evaluation windows are not initialised");
    const size_t n_tok = (size_t)w->n_chunk * (size_t)c;
    set->tok = rp_malloc(n_tok * sizeof *set->tok, "scan tokens");
    set->seq = rp_calloc((size_t)w->n_chunk, sizeof *set->seq, "scan sequences");
    if (!set->tok || !set->seq) {
        rp_scan_set_free(set);
        return RP_ERR_NOMEM;
    }
    memcpy(set->tok, tokens, n_tok * sizeof *set->tok);
    set->n_tok = n_tok;
    set->n_seq = w->n_chunk;
    for (int k = 0; k < w->n_chunk; k++) {
        rp_scan_seq *sq = &set->seq[k];
        sq->tok = (size_t)k * (size_t)c;
        /* as rp_eval_run: BOS replaces the first token; the last is never decoded */
        if (w->add_bos) set->tok[sq->tok] = w->bos;
        sq->n_dec = c - 1;
        sq->score_from = w->first;
        sq->item = -1;
    }
    const int per = n_batch / c > 1 ? n_batch / c : 1;
    rp_status s = set_offsets(set);
    if (!s) s = set_groups(set, per, per * (c - 1));
    if (s) rp_scan_set_free(set);
    return s;
}

/* ---- probes ------------------------------------------------------------------ */

typedef struct probe_builder {
    rp_scan_set *set;
    size_t tok_cap;
    int seq_cap, item_cap, gen_cap;
} probe_builder;

static bool room_tokens(probe_builder *b, size_t n) {
    rp_scan_set *set = b->set;
    if (set->n_tok + n <= b->tok_cap) return true;
    size_t cap = RP_MAX(b->tok_cap * 2, set->n_tok + n + 256);
    int32_t *t = rp_realloc(set->tok, cap * sizeof *t, "probe tokens");
    if (!t) return false;
    set->tok = t;
    b->tok_cap = cap;
    return true;
}

#define GEN_DEFAULT_TOKENS 16
#define GEN_MAX_TOKENS     256

/* A math probe (answer: a JSON integer) or an EQ probe ("scores"): the
 * prompt's tokens and what its output is scored against. */
static rp_status probe_gen(probe_builder *b, const rp_model *m, json_t *o, const int32_t *ptok,
                           size_t np, const char *name, int lineno) {
    json_t *ja = json_object_get(o, "answer"), *jsc = json_object_get(o, "scores"),
           *jm = json_object_get(o, "max_tokens"), *jscale = json_object_get(o, "scale");
    rp_scan_gen g = {.max_tokens = GEN_DEFAULT_TOKENS, .scale = 10, .line = lineno};
    if (jm && (!json_is_integer(jm) || json_integer_value(jm) < 1 ||
               json_integer_value(jm) > GEN_MAX_TOKENS))
        return rp_fail(RP_ERR_FORMAT, "%s:%d: \"max_tokens\" must be an integer 1..%d", name,
                       lineno, GEN_MAX_TOKENS);
    if (jm) g.max_tokens = (int)json_integer_value(jm);
    if (jsc) {
        g.eq = true;
        const size_t n = json_is_array(jsc) ? json_array_size(jsc) : 0;
        if (ja || n < 1 || n > RP_SCAN_EQ_MAX)
            return rp_fail(RP_ERR_FORMAT,
                           "%s:%d: \"scores\" must be an array of 1 to %d numbers (and no "
                           "\"answer\")",
                           name, lineno, RP_SCAN_EQ_MAX);
        for (size_t k = 0; k < n; k++) {
            json_t *x = json_array_get(jsc, k);
            if (!json_is_number(x))
                return rp_fail(RP_ERR_FORMAT, "%s:%d: score %zu is not a number", name, lineno, k);
            g.scores[g.n_scores++] = json_number_value(x);
        }
        if (jscale && (!json_is_number(jscale) || !(json_number_value(jscale) > 0)))
            return rp_fail(RP_ERR_FORMAT, "%s:%d: \"scale\" must be a positive number", name,
                           lineno);
        if (jscale) g.scale = json_number_value(jscale);
    } else {
        if (jscale)
            return rp_fail(RP_ERR_FORMAT, "%s:%d: \"scale\" goes with \"scores\"", name, lineno);
        snprintf(g.expected, sizeof g.expected, "%lld", (long long)json_integer_value(ja));
    }
    const int n_train = rp_model_n_ctx_train(m);
    if (np == 0 || np > (size_t)INT32_MAX / 4 ||
        (n_train > 0 && np + (size_t)g.max_tokens > (size_t)n_train))
        return rp_fail(RP_ERR_FORMAT, "%s:%d: the prompt is %s", name, lineno,
                       np ? "longer than the model's context with its budget"
                          : "empty and the vocabulary adds no BOS");
    rp_scan_set *set = b->set;
    if (!room_tokens(b, np)) return RP_ERR_NOMEM;
    if (set->n_gen == b->gen_cap) {
        int cap = b->gen_cap ? 2 * b->gen_cap : 32;
        rp_scan_gen *ng = rp_realloc(set->gen, (size_t)cap * sizeof *ng, "generation probes");
        if (!ng) return RP_ERR_NOMEM;
        set->gen = ng;
        b->gen_cap = cap;
    }
    g.tok = set->n_tok;
    g.n_prompt = (int)np;
    memcpy(set->tok + set->n_tok, ptok, np * sizeof *ptok);
    set->n_tok += np;
    set->max_gen = RP_MAX(set->max_gen, g.n_prompt + g.max_tokens);
    set->gen[set->n_gen++] = g;
    if (g.eq)
        set->n_eq++;
    else
        set->n_math++;
    return RP_OK;
}

/* Appends prompt+answer as one sequence; the answer's tokens follow the
 * longest prefix the joined text shares with the prompt alone. */
static rp_status probe_add_seq(probe_builder *b, const rp_model *m, const int32_t *ptok, size_t np,
                               const char *prompt, size_t plen, const char *answer,
                               const char *where) {
    const size_t alen = strlen(answer);
    if (!alen) return rp_fail(RP_ERR_FORMAT, "%s is empty: there is nothing to score", where);
    char *joined = rp_malloc(plen + alen + 1, "probe text");
    if (!joined) return RP_ERR_NOMEM;
    memcpy(joined, prompt, plen);
    memcpy(joined + plen, answer, alen + 1);
    int32_t *wt = NULL;
    size_t nw = 0;
    rp_status s = rp_tokenize(rp_model_vocab(m), joined, plen + alen, true, false, &wt, &nw);
    free(joined);
    if (s) return rp_fail_prefix(s, "tokenizing %s", where);
    size_t split = 0;
    while (split < np && split < nw && ptok[split] == wt[split]) split++;
    const rp_vocab *v = rp_model_vocab(m);
    /* a vocabulary that appends EOS: it is not part of the answer */
    if (rp_vocab_add_eos(v) && nw > split && wt[nw - 1] == rp_vocab_eos(v)) nw--;
    if (nw <= split) {
        free(wt);
        return rp_fail(RP_ERR_FORMAT, "%s adds no token to the prompt", where);
    }
    if (split == 0) {
        free(wt);
        return rp_fail(
            RP_ERR_FORMAT,
            "%s: the prompt is empty and the vocabulary adds no BOS, so the first answer token "
            "follows nothing",
            where);
    }
    const int n_train = rp_model_n_ctx_train(m);
    if (nw > (size_t)INT32_MAX / 2 || (n_train > 0 && nw > (size_t)n_train)) {
        free(wt);
        return rp_fail(RP_ERR_INVALID_ARG,
                       "%s: prompt and answer are %zu tokens, more than the %d the model was "
                       "trained on",
                       where, nw, n_train);
    }
    rp_scan_set *set = b->set;
    if (!room_tokens(b, nw)) {
        free(wt);
        return RP_ERR_NOMEM;
    }
    if (set->n_seq == b->seq_cap) {
        int cap = b->seq_cap ? 2 * b->seq_cap : 64;
        rp_scan_seq *q = rp_realloc(set->seq, (size_t)cap * sizeof *q, "probe sequences");
        if (!q) {
            free(wt);
            return RP_ERR_NOMEM;
        }
        set->seq = q;
        b->seq_cap = cap;
    }
    rp_scan_seq *sq = &set->seq[set->n_seq++];
    memset(sq, 0, sizeof *sq);
    sq->tok = set->n_tok;
    sq->n_dec = (int)nw - 1;
    sq->score_from = (int)split - 1;
    sq->item = set->n_items;
    memcpy(set->tok + set->n_tok, wt, nw * sizeof *wt);
    set->n_tok += nw;
    free(wt);
    return RP_OK;
}

static rp_status probe_line(probe_builder *b, const rp_model *m, const char *line, size_t len,
                            const char *name, int lineno) {
    char where[160];
    json_error_t jerr;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) return rp_fail(RP_ERR_FORMAT, "%s:%d: not a JSON object: %s", name, lineno, jerr.text);
    rp_status s = RP_OK;
    int32_t *ptok = NULL;
    if (!json_is_object(o)) {
        s = rp_fail(RP_ERR_FORMAT, "%s:%d: a probe is a JSON object, not %s", name, lineno,
                    json_is_array(o) ? "an array" : "a scalar");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        if (strcmp(key, "prompt") && strcmp(key, "answer") && strcmp(key, "choices") &&
            strcmp(key, "scores") && strcmp(key, "max_tokens") && strcmp(key, "scale")) {
            s = rp_fail(RP_ERR_FORMAT,
                        "%s:%d: unknown key \"%s\" (a probe has prompt, answer or scores, and "
                        "optional choices, max_tokens, scale)",
                        name, lineno, key);
            goto out;
        }
    }
    json_t *jp = json_object_get(o, "prompt"), *ja = json_object_get(o, "answer"),
           *jc = json_object_get(o, "choices");
    if (!json_is_string(jp)) {
        s = rp_fail(RP_ERR_FORMAT, "%s:%d: \"prompt\" must be a string", name, lineno);
        goto out;
    }
    json_t *jsc = json_object_get(o, "scores");
    if (!ja && !jsc) {
        s = rp_fail(RP_ERR_FORMAT, "%s:%d: no \"answer\"", name, lineno);
        goto out;
    }
    const bool gen = jsc || (!jc && json_is_integer(ja));
    if (!gen && (json_object_get(o, "max_tokens") || json_object_get(o, "scale"))) {
        s = rp_fail(RP_ERR_FORMAT,
                    "%s:%d: \"max_tokens\" and \"scale\" go with math and EQ probes (an integer "
                    "answer, or scores)",
                    name, lineno);
        goto out;
    }
    const char *prompt = json_string_value(jp);
    const size_t plen = json_string_length(jp);
    if (strlen(prompt) != plen) {
        s = rp_fail(RP_ERR_FORMAT, "%s:%d: \"prompt\" holds a NUL character", name, lineno);
        goto out;
    }
    size_t np = 0;
    if ((s = rp_tokenize(rp_model_vocab(m), prompt, plen, true, false, &ptok, &np))) {
        rp_fail_prefix(s, "%s:%d: tokenizing the prompt", name, lineno);
        goto out;
    }
    const rp_vocab *v = rp_model_vocab(m);
    if (rp_vocab_add_eos(v) && np > 0 && ptok[np - 1] == rp_vocab_eos(v)) np--;
    if (gen) {
        s = probe_gen(b, m, o, ptok, np, name, lineno);
        goto out;
    }
    rp_scan_set *set = b->set;
    if (set->n_items == b->item_cap) {
        int cap = b->item_cap ? 2 * b->item_cap : 32;
        rp_scan_item *it = rp_realloc(set->items, (size_t)cap * sizeof *it, "probe items");
        if (!it) {
            s = RP_ERR_NOMEM;
            goto out;
        }
        set->items = it;
        b->item_cap = cap;
    }
    rp_scan_item item = {.first_seq = set->n_seq, .n_choices = 0, .answer = 0, .line = lineno};
    if (!jc) {
        if (!json_is_string(ja)) {
            s = rp_fail(RP_ERR_FORMAT,
                        "%s:%d: \"answer\" must be a string, an integer (math) or give "
                        "\"choices\"",
                        name, lineno);
            goto out;
        }
        snprintf(where, sizeof where, "%s:%d: the answer", name, lineno);
        if ((s = probe_add_seq(b, m, ptok, np, prompt, plen, json_string_value(ja), where)))
            goto out;
    } else {
        const size_t nc = json_is_array(jc) ? json_array_size(jc) : 0;
        if (nc < 2 || nc > 64) {
            s = rp_fail(RP_ERR_FORMAT, "%s:%d: \"choices\" must be an array of 2 to 64 strings",
                        name, lineno);
            goto out;
        }
        int answer = -1;
        if (json_is_integer(ja)) {
            json_int_t k = json_integer_value(ja);
            if (k < 0 || (size_t)k >= nc) {
                s = rp_fail(RP_ERR_FORMAT, "%s:%d: \"answer\" %lld is not a choice index (0..%zu)",
                            name, lineno, (long long)k, nc - 1);
                goto out;
            }
            answer = (int)k;
        } else if (!json_is_string(ja)) {
            s = rp_fail(RP_ERR_FORMAT,
                        "%s:%d: \"answer\" must be a choice index or one of the choices", name,
                        lineno);
            goto out;
        }
        for (size_t k = 0; k < nc; k++) {
            json_t *ck = json_array_get(jc, k);
            if (!json_is_string(ck)) {
                s = rp_fail(RP_ERR_FORMAT, "%s:%d: choice %zu is not a string", name, lineno, k);
                goto out;
            }
            if (json_is_string(ja) && !strcmp(json_string_value(ja), json_string_value(ck))) {
                if (answer >= 0) {
                    s = rp_fail(RP_ERR_FORMAT, "%s:%d: the answer matches choices %d and %zu", name,
                                lineno, answer, k);
                    goto out;
                }
                answer = (int)k;
            }
            snprintf(where, sizeof where, "%s:%d: choice %zu", name, lineno, k);
            if ((s = probe_add_seq(b, m, ptok, np, prompt, plen, json_string_value(ck), where)))
                goto out;
        }
        if (answer < 0) {
            s = rp_fail(RP_ERR_FORMAT, "%s:%d: the answer \"%s\" is none of the choices", name,
                        lineno, json_string_value(ja));
            goto out;
        }
        item.n_choices = (int)nc;
        item.answer = answer;
        set->n_choice_items++;
    }
    set->items[set->n_items++] = item;
out:
    free(ptok);
    json_decref(o);
    return s;
}

/* ---- llama-perplexity's multiple-choice formats ------------------------------ */

/* One multiple-choice task: the context, then each ending after a space (as
 * llama-perplexity joins them). */
static rp_status mc_task(probe_builder *b, const rp_model *m, const char *ctx, size_t clen,
                         const char *const *end, const size_t *elen, int n, int gold,
                         const char *name, int task) {
    char where[160];
    if (n < 2 || n > 64 || gold < 0 || gold >= n)
        return rp_fail(RP_ERR_FORMAT, "%s: task %d: %d endings, the right one %d", name, task, n,
                       gold);
    int32_t *ptok = NULL;
    size_t np = 0;
    rp_status s = rp_tokenize(rp_model_vocab(m), ctx, clen, true, false, &ptok, &np);
    if (s) return rp_fail_prefix(s, "%s: task %d: tokenizing the context", name, task);
    const rp_vocab *v = rp_model_vocab(m);
    if (rp_vocab_add_eos(v) && np > 0 && ptok[np - 1] == rp_vocab_eos(v)) np--;
    rp_scan_set *set = b->set;
    if (set->n_items == b->item_cap) {
        int cap = b->item_cap ? 2 * b->item_cap : 32;
        rp_scan_item *it = rp_realloc(set->items, (size_t)cap * sizeof *it, "probe items");
        if (!it) {
            free(ptok);
            return RP_ERR_NOMEM;
        }
        set->items = it;
        b->item_cap = cap;
    }
    char *prompt = rp_strndup(ctx, clen);
    const rp_scan_item item = {
        .first_seq = set->n_seq, .n_choices = n, .answer = gold, .line = task};
    for (int k = 0; k < n && !s; k++) {
        char *ans = rp_malloc(elen[k] + 2, "probe ending");
        if (!ans || !prompt) {
            free(ans);
            s = RP_ERR_NOMEM;
            break;
        }
        ans[0] = ' ';
        memcpy(ans + 1, end[k], elen[k]);
        ans[elen[k] + 1] = 0;
        snprintf(where, sizeof where, "%s: task %d, ending %d", name, task, k);
        s = probe_add_seq(b, m, ptok, np, prompt, clen, ans, where);
        free(ans);
    }
    free(prompt);
    free(ptok);
    if (s) return s;
    set->items[set->n_items++] = item;
    set->n_choice_items++;
    return RP_OK;
}

/* HellaSwag as llama-perplexity reads it: 6 lines per task (the context, the
 * index of the right ending, 4 endings). */
static rp_status read_hellaswag(probe_builder *b, const rp_model *m, const char *text, size_t len,
                                const char *name) {
    const char *line[6];
    size_t ll[6];
    int n = 0, task = 0;
    rp_status s = RP_OK;
    for (size_t p = 0; p < len && !s;) {
        const char *nl = memchr(text + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - text) : len, z = e;
        if (z > p && text[z - 1] == '\r') z--;
        line[n] = text + p;
        ll[n++] = z - p;
        p = e + 1;
        if (n < 6) continue;
        task++;
        char idx[8] = {0};
        memcpy(idx, line[1], RP_MIN(ll[1], sizeof idx - 1));
        if (ll[1] != 1 || idx[0] < '0' || idx[0] > '3') {
            s = rp_fail(RP_ERR_FORMAT,
                        "%s:%d: HellaSwag task %d: line 2 must be the right ending's index 0..3, "
                        "got '%s'",
                        name, (task - 1) * 6 + 2, task, idx);
            break;
        }
        s = mc_task(b, m, line[0], ll[0], line + 2, ll + 2, 4, idx[0] - '0', name, task);
        n = 0;
    }
    if (!s && n)
        s = rp_fail(RP_ERR_FORMAT,
                    "%s: %d lines left over: HellaSwag files have 6 lines per task (neither JSON "
                    "Lines nor llama-perplexity's multiple-choice binary file)",
                    name, n);
    return s;
}

static bool read_u32(const char *t, size_t len, size_t *p, uint32_t *out) {
    if (*p + 4 > len) return false;
    memcpy(out, t + *p, 4);
    *p += 4;
    return true;
}

/* llama-perplexity's --multiple-choice file: u32 n_task, u32 offsets[n_task],
 * then per task: the question, and two answer sets (u32 n, n strings, n
 * int32 labels), a string being u32 length + bytes; the first set (one label
 * 1) is scored. */
static bool is_mc_binary(const char *t, size_t len) {
    uint32_t n;
    size_t p = 0;
    return read_u32(t, len, &p, &n) && n > 0 && n < (1u << 24) && 4 + 4 * (size_t)n < len;
}

static rp_status read_mc_binary(probe_builder *b, const rp_model *m, const char *t, size_t len,
                                const char *name) {
    uint32_t n_task = 0;
    size_t p = 0;
    read_u32(t, len, &p, &n_task);
    p += 4 * (size_t)n_task;
    rp_status s = RP_OK;
    for (uint32_t k = 0; k < n_task && !s; k++) {
        const char *str[65];
        size_t sl[65];
        uint32_t n = 0, sz;
        bool ok = read_u32(t, len, &p, &sz) && p + sz <= len;
        const char *q = t + p;
        const size_t ql = sz;
        if (ok) p += sz;
        int gold = -1, golds = 0;
        for (int set = 0; set < 2 && ok; set++) {
            uint32_t na = 0;
            ok = read_u32(t, len, &p, &na) && na <= 64 && (set || na >= 2);
            for (uint32_t a = 0; a < na && ok; a++) {
                ok = read_u32(t, len, &p, &sz) && p + sz <= len;
                if (ok && !set) {
                    str[a] = t + p;
                    sl[a] = sz;
                }
                if (ok) p += sz;
            }
            for (uint32_t a = 0; a < na && ok; a++) {
                uint32_t lab;
                ok = read_u32(t, len, &p, &lab);
                if (ok && !set && lab == 1) gold = (int)a, golds++;
            }
            if (!set) n = na;
        }
        if (!ok || golds != 1)
            return rp_fail(RP_ERR_FORMAT, "%s: multiple-choice task %u (at byte %zu) is %s", name,
                           k + 1, p,
                           ok ? "not one right answer among its first answer set"
                              : "cut short or has more than 64 answers");
        s = mc_task(b, m, q, ql, str, sl, (int)n, gold, name, (int)k + 1);
    }
    return s;
}

rp_status rp_scan_set_probes(rp_scan_set *set, const rp_model *model, const char *text, size_t len,
                             const char *name, int n_batch) {
    memset(set, 0, sizeof *set);
    probe_builder b = {.set = set};
    rp_status s = RP_OK;
    int lineno = 0;
    size_t first = 0;
    while (first < len && (text[first] == ' ' || text[first] == '\n' || text[first] == '\r' ||
                           text[first] == '\t'))
        first++;
    /* HellaSwag: the second line is a single digit; the binary file: its counts */
    const char *eol = memchr(text, '\n', len);
    const size_t l2 = eol ? (size_t)(eol - text) + 1 : len;
    const bool hellaswag = first < len && text[first] != '{' && l2 + 1 < len && text[l2] >= '0' &&
                           text[l2] <= '3' && (text[l2 + 1] == '\n' || text[l2 + 1] == '\r');
    const bool binary = !hellaswag && first < len && text[first] != '{' && is_mc_binary(text, len);
    const bool jsonl = !hellaswag && !binary;
    if (binary)
        s = read_mc_binary(&b, model, text, len, name);
    else if (hellaswag)
        s = read_hellaswag(&b, model, text, len, name);
    for (size_t p = 0; jsonl && p < len && !s;) {
        const char *nl = memchr(text + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - text) : len;
        lineno++;
        size_t a = p, z = e;
        while (a < z && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r')) a++;
        while (z > a && (text[z - 1] == ' ' || text[z - 1] == '\t' || text[z - 1] == '\r')) z--;
        if (z > a) s = probe_line(&b, model, text + a, z - a, name, lineno);
        p = e + 1;
    }
    if (!s && set->n_items == 0 && set->n_gen == 0)
        s = rp_fail(RP_ERR_FORMAT, "%s: no probes (one JSON object per line)", name);
    if (!s) s = set_offsets(set);
    /* keep one item's choices in one group where they fit */
    if (!s) s = set_groups(set, 256, RP_MAX(n_batch > 0 ? n_batch : 512, 1));
    if (s) rp_scan_set_free(set);
    return s;
}

/* ---- blocks -------------------------------------------------------------- */

rp_status rp_scan_blocks(int n_layer, int start, int end, int max_extra, rp_scan_block **out,
                         int *n) {
    *out = NULL;
    *n = 0;
    if (start < 0 || end > n_layer || start >= end)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "scan range --start %d --end %d: must satisfy 0 <= start < end <= %d", start,
                       end, n_layer);
    if (max_extra < 0)
        return rp_fail(RP_ERR_INVALID_ARG, "--max-extra %d: must be positive", max_extra);
    const int lim = max_extra ? max_extra : end - start;
    size_t cap = (size_t)(end - start) * (size_t)(end - start + 1) / 2;
    rp_scan_block *b = rp_malloc(cap * sizeof *b, "scan blocks");
    if (!b) return RP_ERR_NOMEM;
    int k = 0;
    for (int j = start + 1; j <= end; j++)
        for (int i = RP_MAX(start, j - lim); i < j; i++) b[k++] = (rp_scan_block){i, j};
    RP_ASSERT((size_t)k <= cap);
    *out = b;
    *n = k;
    return RP_OK;
}

/* ---- evaluation ---------------------------------------------------------- */

struct rp_scan {
    const rp_model *m;
    const rp_scan_set *set;
    rp_scan_params p;
    int n_layer, n_embd, n_vocab;
    bool reuse;
    bool have_identity;
    rp_scan_result identity;
    /* kld: the identity's scored rows, encoded as the base file encodes them,
     * in memory or (larger than kld_mem_max) in an unlinked temporary file
     * read back one sequence at a time */
    unsigned char *base; /* [n_scored][row_bytes], or [one sequence's rows] with a file */
    size_t row_bytes;
    int base_fd; /* -1: in memory */
    /* prefix reuse */
    float *h;   /* [n_rows][n_embd]: residual stream after step h_step - 1 */
    int h_step; /* -1: nothing held */
    int *h_src; /* [RP_SCAN_MAX_STEPS] source layers of the steps that made h */
    /* one decode call */
    int32_t *btok, *bpos, *bseq;
    int8_t *bwant;
    const float **rows;
    /* accumulators of the evaluation in progress */
    bool recording; /* the identity pass: record the base rows */
    rp_ppl_acc ppl;
    rp_kld_acc kld;
    double *seq_lp; /* [n_seq] log-probability of each sequence's scored tokens */
    uint64_t bytes, steps_run;
    /* what the metric needs: the log-likelihood passes, the generation probes */
    bool need_ll, need_gen;
    unsigned combine;  /* combined: bits 1 << RP_SCAN_MATH / _EQ / _MC */
    double *gen_score; /* [n_gen] scores of the evaluation in progress */
    /* the identity's mean and standard error per metric (index: the metric) */
    double id_mean[RP_SCAN_COMBINED], id_se[RP_SCAN_COMBINED];
    /* progress of the evaluation in progress */
    int pass_done, pass_total;
};

void rp_scan_free(rp_scan *s) {
    if (!s) return;
    free(s->base);
    if (s->base_fd >= 0) close(s->base_fd);
    rp_free_aligned(s->h);
    free(s->h_src);
    free(s->btok);
    free(s->bpos);
    free(s->bseq);
    free(s->bwant);
    free(s->rows);
    rp_kld_acc_free(&s->kld);
    free(s->seq_lp);
    free(s->gen_score);
    free(s);
}

/* Which metrics the workload can give, as bits 1 << metric. */
static unsigned available(const rp_scan_set *set) {
    return (set->n_math ? 1u << RP_SCAN_MATH : 0) | (set->n_eq ? 1u << RP_SCAN_EQ : 0) |
           (set->n_choice_items ? 1u << RP_SCAN_MC : 0);
}

/* The metric against the workload: RP_OK, or the refusal. */
static rp_status check_metric(const rp_scan_set *set, const rp_scan_params *p, unsigned *combine) {
    const char *name = rp_scan_metric_name(p->metric);
    const bool probes = set->n_items > 0 || set->n_gen > 0;
    *combine = 0;
    switch (p->metric) {
    case RP_SCAN_PPL:
    case RP_SCAN_KLD:
        if (probes) return rp_fail(RP_ERR_INVALID_ARG, "scan: metric %s needs a text", name);
        return RP_OK;
    case RP_SCAN_PROBE:
        if (!set->n_items)
            return rp_fail(RP_ERR_INVALID_ARG,
                           "scan: metric probe needs free-answer or multiple-choice probes");
        return RP_OK;
    case RP_SCAN_MATH:
    case RP_SCAN_EQ:
    case RP_SCAN_MC:
        if (!(available(set) & (1u << p->metric)))
            return rp_fail(RP_ERR_INVALID_ARG, "scan: metric %s needs %s probes in the probe file",
                           name,
                           p->metric == RP_SCAN_MATH ? "math (an integer answer)"
                           : p->metric == RP_SCAN_EQ ? "EQ (scores)"
                                                     : "multiple-choice");
        return RP_OK;
    case RP_SCAN_COMBINED: {
        const unsigned want = p->combine ? p->combine : available(set);
        const unsigned known = (1u << RP_SCAN_MATH) | (1u << RP_SCAN_EQ) | (1u << RP_SCAN_MC);
        if (!want || (want & ~known))
            return rp_fail(RP_ERR_INVALID_ARG, "scan: combined combines math, eq and mc probes");
        if (want & ~available(set))
            return rp_fail(RP_ERR_INVALID_ARG, "scan: combined: the probe file has no %s probes",
                           (want & ~available(set)) & (1u << RP_SCAN_MATH) ? "math"
                           : (want & ~available(set)) & (1u << RP_SCAN_EQ) ? "EQ"
                                                                           : "multiple-choice");
        *combine = want;
        return RP_OK;
    }
    }
    return rp_fail(RP_ERR_INVALID_ARG, "scan: unknown metric %d", p->metric);
}

rp_status rp_scan_new(const rp_model *m, const rp_scan_set *set, const rp_scan_params *p,
                      rp_scan **out) {
    *out = NULL;
    if ((!set->n_seq || !set->n_group) && !set->n_gen)
        return rp_fail(RP_ERR_INVALID_ARG, "scan: the workload is empty");
    unsigned combine;
    rp_status cm = check_metric(set, p, &combine);
    if (cm) return cm;
    const int n_train = rp_model_n_ctx_train(m);
    if (n_train > 0 && set->max_dec > n_train)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "scan: sequences of %d tokens exceed the model's training context (%d)",
                       set->max_dec, n_train);
    const int nv = rp_vocab_n_tokens(rp_model_vocab(m));
    for (size_t k = 0; k < set->n_tok; k++)
        if (set->tok[k] < 0 || set->tok[k] >= nv)
            return rp_fail(RP_ERR_INVALID_ARG,
                           "scan: token %zu has id %d, outside the vocabulary (%d)", k, set->tok[k],
                           nv);
    rp_scan *s = rp_calloc(1, sizeof *s, "scan");
    if (!s) return RP_ERR_NOMEM;
    s->m = m;
    s->set = set;
    s->p = *p;
    s->n_layer = rp_model_n_layer(m);
    s->n_embd = rp_model_n_embd(m);
    s->n_vocab = m->hp.n_vocab;
    s->combine = combine;
    s->need_gen = p->metric == RP_SCAN_MATH || p->metric == RP_SCAN_EQ ||
                  (combine & ((1u << RP_SCAN_MATH) | (1u << RP_SCAN_EQ)));
    s->need_ll = set->n_seq > 0 && (p->metric == RP_SCAN_PPL || p->metric == RP_SCAN_KLD ||
                                    p->metric == RP_SCAN_PROBE || p->metric == RP_SCAN_MC ||
                                    (combine & (1u << RP_SCAN_MC)));
    s->reuse = p->reuse && m->arch->step_ranges && s->need_ll && set->n_rows > 0;
    s->h_step = -1;
    s->base_fd = -1;
    int max_rows = 1;
    size_t max_group_tok = 0;
    for (int g = 0; g < set->n_group; g++) {
        size_t t = 0;
        for (int q = set->group[g]; q < set->group[g + 1]; q++) {
            t += (size_t)set->seq[q].n_dec;
            max_rows = RP_MAX(max_rows, set->seq[q].n_dec - set->seq[q].score_from);
        }
        max_group_tok = RP_MAX(max_group_tok, t);
    }
    max_group_tok++; /* never 0 bytes */
    s->btok = rp_malloc(max_group_tok * sizeof *s->btok, "scan batch");
    s->bpos = rp_malloc(max_group_tok * sizeof *s->bpos, "scan batch");
    s->bseq = rp_malloc(max_group_tok * sizeof *s->bseq, "scan batch");
    s->bwant = rp_malloc(max_group_tok, "scan batch");
    s->rows = rp_malloc((size_t)max_rows * sizeof *s->rows, "scan rows");
    s->seq_lp = rp_calloc((size_t)set->n_seq + 1, sizeof *s->seq_lp, "scan scores");
    s->gen_score = rp_calloc((size_t)set->n_gen + 1, sizeof *s->gen_score, "scan scores");
    rp_status st = RP_OK;
    if (!s->btok || !s->bpos || !s->bseq || !s->bwant || !s->rows || !s->seq_lp || !s->gen_score) {
        st = RP_ERR_NOMEM;
        goto fail;
    }
    if (p->metric == RP_SCAN_KLD) {
        s->row_bytes = rp_kld_row_bytes(s->n_vocab);
        size_t bytes;
        if (!rp_mul_size(s->row_bytes, set->n_scored, &bytes)) {
            st = rp_fail(RP_ERR_NOMEM, "scan: the identity's distributions overflow memory");
            goto fail;
        }
        const size_t mem_max = p->kld_mem_max ? p->kld_mem_max : RP_SCAN_KLD_MEM_MAX;
        if (bytes > mem_max) {
            /* a temporary file, unlinked at once: nothing is left behind */
            const char *dir = getenv("TMPDIR");
            char path[4096];
            snprintf(path, sizeof path, "%s/reprise-scan-kld.XXXXXX", dir && *dir ? dir : "/tmp");
            s->base_fd = mkstemp(path);
            if (s->base_fd < 0) {
                st = rp_fail(RP_ERR_IO,
                             "scan: the identity's distributions (%.1f MiB) need a temporary file; "
                             "cannot create '%s': %s (set TMPDIR)",
                             (double)bytes / 1048576.0, path, strerror(errno));
                goto fail;
            }
            unlink(path);
            bytes = s->row_bytes * (size_t)max_rows;
        }
        if (!(s->base = rp_malloc(bytes, "the identity plan's distributions"))) {
            st = rp_fail_prefix(RP_ERR_NOMEM, "scan (%.1f MiB for %zu scored tokens)",
                                (double)bytes / 1048576.0, set->n_scored);
            goto fail;
        }
        s->bytes += bytes;
    }
    if (s->reuse) {
        size_t bytes;
        if (!rp_mul_size(set->n_rows, (size_t)s->n_embd * sizeof(float), &bytes) ||
            !(s->h = rp_alloc_aligned(bytes, "prefix hidden states"))) {
            st = rp_fail(
                RP_ERR_NOMEM,
                "scan: the prefix hidden states (%zu tokens x %d floats) do not fit in memory; "
                "scan without prefix reuse",
                set->n_rows, s->n_embd);
            goto fail;
        }
        s->bytes += bytes;
        if (!(s->h_src = rp_malloc(RP_SCAN_MAX_STEPS * sizeof *s->h_src, "prefix steps"))) {
            st = RP_ERR_NOMEM;
            goto fail;
        }
    }
    *out = s;
    return RP_OK;
fail:
    rp_scan_free(s);
    return st;
}

bool rp_scan_reusing(const rp_scan *s) {
    return s->reuse;
}
uint64_t rp_scan_bytes(const rp_scan *s) {
    return s->bytes;
}
uint64_t rp_scan_steps_run(const rp_scan *s) {
    return s->steps_run;
}

static rp_status new_ctx(const rp_scan *s, const char *spec, rp_context **ctx) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = (uint32_t)RP_MAX(s->set->max_dec, s->need_gen ? s->set->max_gen : 1);
    cp.n_batch = (uint32_t)(s->p.n_batch > 0 ? s->p.n_batch : 0);
    cp.n_seq_max =
        (uint32_t)RP_MAX(RP_MAX(s->set->max_group, 1), s->need_gen ? RP_SCAN_GEN_SEQ : 1);
    cp.n_threads = s->p.n_threads;
    cp.type_k = s->p.type_k;
    cp.type_v = s->p.type_v;
    cp.repeat_layers = spec;
    return rp_context_new(s->m, &cp, ctx);
}

/* Scores one sequence's rows into the accumulators of the evaluation. */
static rp_status consume(rp_scan *s, int q, const float *const *rows) {
    const rp_scan_set *set = s->set;
    const rp_scan_seq *sq = &set->seq[q];
    const int32_t *tok = set->tok + sq->tok;
    const int n = sq->n_dec - sq->score_from;
    rp_status st;
    /* this sequence's rows of the identity's distributions */
    unsigned char *rows_base = s->base_fd >= 0 ? s->base : s->base + sq->scored * s->row_bytes;
    const size_t seq_bytes = (size_t)n * s->row_bytes;
    const off_t seq_off = (off_t)(sq->scored * s->row_bytes);
    if (s->p.metric == RP_SCAN_KLD && s->recording) {
        for (int k = 0; k < n; k++) {
            unsigned char *dst = rows_base + (size_t)k * s->row_bytes;
            if ((st = rp_kld_encode_row(rows[k], s->n_vocab, tok[sq->score_from + k + 1], dst)))
                return rp_fail_prefix(st, "identity plan, sequence %d, row %d", q,
                                      sq->score_from + k);
        }
        if (s->base_fd >= 0 &&
            pwrite(s->base_fd, rows_base, seq_bytes, seq_off) != (ssize_t)seq_bytes)
            return rp_fail(RP_ERR_IO,
                           "scan: writing the identity's distributions to a temporary file: %s",
                           strerror(errno));
        return RP_OK;
    }
    if (s->p.metric == RP_SCAN_KLD) {
        if (s->base_fd >= 0 &&
            pread(s->base_fd, rows_base, seq_bytes, seq_off) != (ssize_t)seq_bytes)
            return rp_fail(RP_ERR_IO, "scan: reading the identity's distributions back: %s",
                           errno ? strerror(errno) : "short read");
        for (int k = 0; k < n; k++) {
            rp_kld_row base;
            if ((st = rp_kld_decode_row(rows_base + (size_t)k * s->row_bytes, s->n_vocab, &base)))
                return rp_fail_prefix(st, "identity plan's row %zu", sq->scored + (size_t)k);
            if ((st = rp_kld_add(&s->kld, rows[k], &base, tok[sq->score_from + k + 1], NULL)))
                return st;
        }
        return RP_OK;
    }
    double lp = 0.0;
    for (int k = 0; k < n; k++) {
        const double nll = rp_eval_nll(rows[k], s->n_vocab, tok[sq->score_from + k + 1]);
        if (s->p.metric == RP_SCAN_PPL) rp_ppl_add(&s->ppl, nll);
        lp -= nll;
    }
    s->seq_lp[q] = lp;
    return RP_OK;
}

/* Runs steps [begin, end) of ctx over every group of the workload. x: the
 * prefix hidden states, read when begin > 0 and written when end < n_eff
 * (whole: plain rp_decode over the whole plan). Scores the output rows when
 * the range reaches the last step. */
static rp_status run_pass(rp_scan *s, rp_context *ctx, int begin, int end, bool whole) {
    const rp_scan_set *set = s->set;
    const int n_eff = rp_context_n_eff(ctx);
    const bool out = end == n_eff;
    const size_t E = (size_t)s->n_embd;
    for (int g = 0; g < set->n_group; g++) {
        const int q0 = set->group[g], q1 = set->group[g + 1];
        rp_status st;
        for (int q = 0; q < q1 - q0; q++)
            if ((st = rp_kv_seq_truncate(ctx, q, 0))) return st;
        size_t k = 0;
        for (int q = q0; q < q1; q++) {
            const rp_scan_seq *sq = &set->seq[q];
            for (int p = 0; p < sq->n_dec; p++, k++) {
                s->btok[k] = set->tok[sq->tok + (size_t)p];
                s->bpos[k] = p;
                s->bseq[k] = q - q0;
                s->bwant[k] = out && p >= sq->score_from;
            }
        }
        rp_batch b = {.n_tokens = (int32_t)k,
                      .token = s->btok,
                      .pos = s->bpos,
                      .seq_id = s->bseq,
                      .logits = s->bwant};
        float *x = s->h ? s->h + set->seq[q0].row * E : NULL;
        st = whole ? rp_decode(ctx, &b)
                   : rp_decode_steps(ctx, &b, begin, end, begin > 0 ? x : NULL, out ? NULL : x);
        if (st) return rp_fail_prefix(st, "decoding sequences %d..%d", q0 + 1, q1);
        s->steps_run += (uint64_t)(end - begin) * (uint64_t)k;
        if (out) {
            size_t base = 0;
            for (int q = q0; q < q1; q++) {
                const rp_scan_seq *sq = &set->seq[q];
                for (int r = sq->score_from; r < sq->n_dec; r++) {
                    s->rows[r - sq->score_from] = rp_get_logits(ctx, (int)(base + (size_t)r));
                    RP_ASSERT(s->rows[r - sq->score_from] != NULL);
                }
                if ((st = consume(s, q, s->rows))) return st;
                base += (size_t)sq->n_dec;
            }
        }
        s->pass_done++;
        if (s->p.progress &&
            !s->p.progress((float)s->pass_done / (float)s->pass_total, s->p.progress_user))
            return rp_fail(RP_ERR_CANCELLED, "scan cancelled");
    }
    return RP_OK;
}

static rp_status reset_acc(rp_scan *s) {
    memset(&s->ppl, 0, sizeof s->ppl);
    memset(s->seq_lp, 0, (size_t)s->set->n_seq * sizeof *s->seq_lp);
    s->pass_done = 0;
    if (s->p.metric != RP_SCAN_KLD) return RP_OK;
    rp_kld_acc_free(&s->kld);
    return rp_kld_acc_init(&s->kld, s->n_vocab);
}

/* The log-likelihood probes: the mean value and the multiple-choice accuracy. */
static void finish_probes(const rp_scan *s, rp_scan_result *r) {
    const rp_scan_set *set = s->set;
    double sum = 0;
    int right = 0;
    for (int t = 0; t < set->n_items; t++) {
        const rp_scan_item *it = &set->items[t];
        const double *lp = s->seq_lp + it->first_seq;
        if (!it->n_choices) {
            sum += lp[0];
            continue;
        }
        /* log P(answer | one of the choices), and whether it is the most likely */
        double mx = lp[0];
        int best = 0;
        for (int k = 1; k < it->n_choices; k++)
            if (lp[k] > mx) {
                mx = lp[k];
                best = k;
            }
        double z = 0;
        for (int k = 0; k < it->n_choices; k++) z += exp(lp[k] - mx);
        sum += lp[it->answer] - mx - log(z);
        right += best == it->answer;
    }
    r->value = set->n_items ? sum / set->n_items : 0;
    if (set->n_choice_items) r->accuracy = (double)right / set->n_choice_items;
}

/* The generation probes' mean scores (math, eq), and, for the identity, each
 * metric's standard error over the items (at least 1/n: the z of combined). */
static void finish_gen(rp_scan *s, rp_scan_result *r) {
    const rp_scan_set *set = s->set;
    double sum[2] = {0, 0}, sq[2] = {0, 0};
    int n[2] = {0, 0};
    for (int g = 0; g < set->n_gen; g++) {
        const int k = set->gen[g].eq;
        sum[k] += s->gen_score[g];
        sq[k] += s->gen_score[g] * s->gen_score[g];
        n[k]++;
    }
    r->math = n[0] ? sum[0] / n[0] : -1;
    r->eq = n[1] ? sum[1] / n[1] : -1;
    if (s->have_identity) return;
    for (int k = 0; k < 2; k++) {
        if (!n[k]) continue;
        const double mean = sum[k] / n[k], var = fmax(0.0, sq[k] / n[k] - mean * mean);
        const int m = k ? RP_SCAN_EQ : RP_SCAN_MATH;
        s->id_mean[m] = mean;
        s->id_se[m] = fmax(sqrt(var / n[k]), 1.0 / n[k]);
    }
}

/* combined: the mean over the chosen metrics of (value - identity's) / its
 * standard error at the identity. */
static double combined(rp_scan *s, const rp_scan_result *r) {
    const rp_scan_set *set = s->set;
    if (!s->have_identity && (s->combine & (1u << RP_SCAN_MC))) {
        const double p = r->accuracy, n = set->n_choice_items;
        s->id_mean[RP_SCAN_MC] = p;
        s->id_se[RP_SCAN_MC] = fmax(sqrt(p * (1 - p) / n), 1.0 / n);
    }
    const double v[RP_SCAN_COMBINED] = {
        [RP_SCAN_MATH] = r->math, [RP_SCAN_EQ] = r->eq, [RP_SCAN_MC] = r->accuracy};
    double z = 0;
    int k = 0;
    for (int m = RP_SCAN_MATH; m <= RP_SCAN_MC; m++)
        if (s->combine & (1u << m)) {
            z += (v[m] - s->id_mean[m]) / s->id_se[m];
            k++;
        }
    return k ? z / k : 0;
}

static rp_status finish(rp_scan *s, rp_scan_result *r) {
    r->accuracy = -1;
    r->unc = 0;
    r->math = r->eq = -1;
    if (s->need_ll && s->set->n_items) finish_probes(s, r);
    if (s->need_gen) finish_gen(s, r);
    switch (s->p.metric) {
    case RP_SCAN_PPL:
        r->value = rp_ppl_value(&s->ppl);
        r->unc = rp_ppl_uncertainty(&s->ppl);
        break;
    case RP_SCAN_KLD:
        if (s->recording) {
            r->value = 0; /* the identity against itself, by definition */
        } else {
            rp_kld_stats st;
            rp_status e = rp_kld_stats_compute(&s->kld, false, &st);
            if (e) return e;
            r->value = st.kld.val;
            r->unc = st.kld.unc;
        }
        break;
    case RP_SCAN_PROBE:
        break; /* finish_probes */
    case RP_SCAN_MATH:
        r->value = r->math;
        break;
    case RP_SCAN_EQ:
        r->value = r->eq;
        break;
    case RP_SCAN_MC:
        r->value = r->accuracy;
        break;
    case RP_SCAN_COMBINED:
        r->value = combined(s, r);
        break;
    }
    r->delta = s->have_identity ? r->value - s->identity.value : 0.0;
    return RP_OK;
}

/* The generation probes on ctx, when the metric has them. */
static rp_status run_gen(rp_scan *s, rp_context *ctx) {
    if (!s->need_gen) return RP_OK;
    return rp_scan_generate(s->set, ctx, s->p.n_batch, RP_SCAN_GEN_SEQ, s->gen_score, NULL,
                            s->p.progress, s->p.progress_user);
}

rp_status rp_scan_identity(rp_scan *s, rp_scan_result *r) {
    memset(r, 0, sizeof *r);
    const double t0 = rp_time_s();
    rp_context *ctx = NULL;
    rp_status st = new_ctx(s, NULL, &ctx);
    if (!st) st = reset_acc(s);
    if (st) {
        rp_context_free(ctx);
        return st;
    }
    s->pass_total = s->set->n_group;
    s->recording = true;
    s->have_identity = false;
    if (s->need_ll) st = run_pass(s, ctx, 0, rp_context_n_eff(ctx), true);
    if (!st) st = run_gen(s, ctx);
    if (!st) st = finish(s, r);
    s->recording = false;
    rp_context_free(ctx);
    if (st) return rp_fail_prefix(st, "identity plan");
    r->seconds = rp_time_s() - t0;
    s->identity = *r;
    s->have_identity = true;
    return RP_OK;
}

/* The first step at which ctx's plan differs from the steps that made the
 * held prefix (h_step when they all agree). */
static int held_agrees(const rp_scan *s, const rp_context *ctx) {
    int e = 0;
    while (e < s->h_step && rp_context_step_src(ctx, e) == s->h_src[e]) e++;
    return e;
}

rp_status rp_scan_plan_eval(rp_scan *s, const rp_scan_plan *p, int fork, rp_scan_result *r) {
    memset(r, 0, sizeof *r);
    char spec[RP_SCAN_PLAN_LEN];
    rp_scan_plan_format(p, spec, sizeof spec);
    if (!s->have_identity)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "scan: plan '%s' asked before the identity plan was evaluated", spec);
    for (int k = 0; k < p->n; k++)
        if (p->b[k].i < 0 || p->b[k].j <= p->b[k].i || p->b[k].j > s->n_layer)
            return rp_fail(RP_ERR_INVALID_ARG, "scan: block %d,%d is not 0 <= i < j <= %d",
                           p->b[k].i, p->b[k].j, s->n_layer);
    const double t0 = rp_time_s();
    /* the context's spec: each block's second pass at the scan's residual scale */
    char cspec[RP_SCAN_PLAN_LEN + 24 * RP_SCAN_MAX_BLOCKS];
    const float rs = s->p.res_scale;
    snprintf(cspec, sizeof cspec, "%s", spec);
    for (int k = 0, o = 0; rs > 0 && rs != 1 && k < p->n; k++)
        o += snprintf(cspec + o, sizeof cspec - (size_t)o, "%s%d-%d@s=%g", k ? ";" : "", p->b[k].i,
                      p->b[k].j, (double)rs);
    rp_context *ctx = NULL;
    rp_status st = new_ctx(s, p->n ? cspec : NULL, &ctx);
    if (st) return rp_fail_prefix(st, "plan %s", spec);
    const int n_eff = rp_context_n_eff(ctx);
    if (fork < 0 || fork >= n_eff || n_eff > RP_SCAN_MAX_STEPS) fork = 0;
    if ((st = reset_acc(s))) {
        rp_context_free(ctx);
        return st;
    }
    if (s->reuse && fork > 0) {
        const bool advance = s->h_step != fork || held_agrees(s, ctx) < fork;
        s->pass_total = s->set->n_group * (advance ? 2 : 1);
        if (advance) {
            /* from the prefix held when this plan's steps continue it, from the tokens otherwise */
            const int from = s->h_step > 0 && s->h_step < fork && held_agrees(s, ctx) == s->h_step
                                 ? s->h_step
                                 : 0;
            s->h_step = -1;
            st = run_pass(s, ctx, from, fork, false);
            if (!st) {
                for (int e = 0; e < fork; e++) s->h_src[e] = rp_context_step_src(ctx, e);
                s->h_step = fork;
            }
        }
        if (!st) st = run_pass(s, ctx, fork, n_eff, false);
    } else if (s->need_ll) {
        s->pass_total = s->set->n_group;
        st = run_pass(s, ctx, 0, n_eff, true);
    }
    if (!st) st = run_gen(s, ctx);
    if (!st) st = finish(s, r);
    rp_context_free(ctx);
    if (st) return st == RP_ERR_CANCELLED ? st : rp_fail_prefix(st, "plan %s", spec);
    r->seconds = rp_time_s() - t0;
    return RP_OK;
}

rp_status rp_scan_block_eval(rp_scan *s, int i, int j, rp_scan_result *r) {
    if (i < 0 || j <= i || j > s->n_layer) {
        memset(r, 0, sizeof *r);
        return rp_fail(RP_ERR_INVALID_ARG, "scan: block %d,%d is not 0 <= i < j <= %d", i, j,
                       s->n_layer);
    }
    const rp_scan_plan p = {.n = 1, .b = {{i, j}}};
    return rp_scan_plan_eval(s, &p, j, r);
}
