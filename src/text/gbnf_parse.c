/* GBNF parser (llama.cpp's grammar format, grammars/README.md):
 *
 *   rule      name ::= alternatives            (a newline ends it, except
 *                                               inside ( ) and after |)
 *   name      [a-zA-Z0-9-]+
 *   sequence  of: "literal"  [set] [^set]  .  name  ( alternatives )
 *             <[id]>  <text>  !<[id]>  !<text>   each optionally followed by
 *             *  +  ?  {m}  {m,}  {m,n}
 *   escapes   \x.. \u.... \U........ \t \r \n \\ \" \[ \] \-
 *   comments  # to the end of the line
 *
 * Repetitions become helper rules: S* -> R ::= S R | (empty); S+ -> S R;
 * S? -> R ::= S | ; S{m,n} -> S (m times) then a chain of n-m optional
 * copies, each nested in the next (R_k ::= S R_k-1 | ). As in llama.cpp, a
 * bound above 2000 is refused for the minimum and means "unbounded" for the
 * maximum, and nesting that would multiply past 2000 copies is refused. */
#include "text/gbnf.h"

#include "base/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPETITION 2000
#define MAX_ELEMS      (1u << 22)
#define MAX_NEST       200

typedef struct seq {
    gb_elem *v;
    size_t n, cap;
} seq;

typedef struct trule {
    char *name;
    size_t name_len;
    seq *alts;
    size_t n_alts, cap;
    bool defined;
    size_t def_off; /* where it was first referenced or defined (for messages) */
} trule;

typedef struct parser {
    const char *s;
    size_t n, pos;
    trule *rules;
    size_t n_rules, cap_rules;
    uint32_t *ranges; /* lo,hi pairs of every set */
    size_t n_ranges, cap_ranges;
    gb_cset *sets;
    size_t n_sets, cap_sets;
    size_t n_elems;  /* total, for the limit */
    char **tok_text; /* <text> tokens, resolved later: their elements hold GB_TOKEN_TEXT | index */
    size_t n_tok, cap_tok;
    int nest;
    /* scratch that a failure (longjmp) must not leak: freed with the parser */
    uint32_t *set_buf; /* parse_set's ranges */
    size_t set_cap;
    gb_elem *sym_buf; /* repeat's copy of the repeated symbol */
    size_t sym_cap;
    jmp_buf jb;
    rp_status status;
} parser;

static _Noreturn void pfail(parser *P, size_t off, rp_status st, const char *fmt, ...)
    RP_PRINTF(4, 5);
static _Noreturn void pfail(parser *P, size_t off, rp_status st, const char *fmt, ...) {
    int line = 1, col = 1;
    for (size_t i = 0; i < off && i < P->n; i++) {
        if (P->s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    P->status = rp_fail(st, "grammar line %d, column %d: %s", line, col, msg);
    longjmp(P->jb, 1);
}

static void *grow(parser *P, void *p, size_t elem, size_t *cap, size_t want) {
    if (want <= *cap) return p;
    size_t nc = *cap ? *cap * 2 : 8;
    while (nc < want) nc *= 2;
    void *q = realloc(p, nc * elem);
    if (!q) {
        P->status = rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
        longjmp(P->jb, 1);
    }
    *cap = nc;
    return q;
}

static void seq_push(parser *P, seq *q, gb_elem e) {
    if (++P->n_elems > MAX_ELEMS)
        pfail(P, P->pos, RP_ERR_INVALID_ARG, "grammar too large (more than %u elements)",
              MAX_ELEMS);
    q->v = grow(P, q->v, sizeof *q->v, &q->cap, q->n + 1);
    q->v[q->n++] = e;
}

static char peek(const parser *P, size_t k) {
    return P->pos + k < P->n ? P->s[P->pos + k] : 0;
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

/* Spaces, tabs and comments; newlines too when newline_ok. */
static void skip_space(parser *P, bool newline_ok) {
    while (P->pos < P->n) {
        char c = P->s[P->pos];
        if (c == '#') {
            while (P->pos < P->n && P->s[P->pos] != '\n' && P->s[P->pos] != '\r') P->pos++;
        } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
            P->pos++;
        } else {
            break;
        }
    }
}

/* ---- rules ------------------------------------------------------------------- */

static uint32_t rule_id(parser *P, const char *name, size_t len, size_t at) {
    for (size_t i = 0; i < P->n_rules; i++)
        if (P->rules[i].name_len == len && !memcmp(P->rules[i].name, name, len)) return (uint32_t)i;
    P->rules = grow(P, P->rules, sizeof *P->rules, &P->cap_rules, P->n_rules + 1);
    trule *r = &P->rules[P->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(len + 1);
    if (!r->name) {
        P->status = rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
        longjmp(P->jb, 1);
    }
    memcpy(r->name, name, len);
    r->name[len] = 0;
    r->name_len = len;
    r->def_off = at;
    return (uint32_t)P->n_rules++;
}

/* A fresh helper rule named after its parent ("value_3"). */
static uint32_t new_rule(parser *P, uint32_t parent) {
    char buf[160];
    int k = snprintf(buf, sizeof buf, "%.100s_%zu", P->rules[parent].name, P->n_rules);
    uint32_t id = rule_id(P, buf, (size_t)k, P->pos);
    P->rules[id].defined = true;
    return id;
}

static seq *add_alt(parser *P, uint32_t rule) {
    trule *r = &P->rules[rule];
    r->alts = grow(P, r->alts, sizeof *r->alts, &r->cap, r->n_alts + 1);
    seq *q = &r->alts[r->n_alts++];
    memset(q, 0, sizeof *q);
    return q;
}

/* ---- character sets ---------------------------------------------------------- */

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0;
}

/* A set from n (lo, hi) pairs: sorted, merged, negated when neg. */
static uint32_t make_set(parser *P, uint32_t *pairs, size_t n, bool neg) {
    if (n > 1) qsort(pairs, n, 2 * sizeof *pairs, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && pairs[2 * i] <= pairs[2 * (m - 1) + 1] + 1) {
            if (pairs[2 * i + 1] > pairs[2 * (m - 1) + 1])
                pairs[2 * (m - 1) + 1] = pairs[2 * i + 1];
        } else {
            pairs[2 * m] = pairs[2 * i];
            pairs[2 * m + 1] = pairs[2 * i + 1];
            m++;
        }
    }
    P->ranges = grow(P, P->ranges, sizeof *P->ranges, &P->cap_ranges, P->n_ranges + 2 * (m + 1));
    uint32_t r0 = (uint32_t)(P->n_ranges / 2), nr = 0;
    uint32_t *out = P->ranges + P->n_ranges;
    if (!neg) {
        if (m) memcpy(out, pairs, 2 * m * sizeof *pairs);
        nr = (uint32_t)m;
    } else {
        uint32_t lo = 0;
        for (size_t i = 0; i < m; i++) {
            if (pairs[2 * i] > lo) {
                out[2 * nr] = lo;
                out[2 * nr + 1] = pairs[2 * i] - 1;
                nr++;
            }
            lo = pairs[2 * i + 1] + 1;
        }
        if (lo <= 0x10FFFF) {
            out[2 * nr] = lo;
            out[2 * nr + 1] = 0x10FFFF;
            nr++;
        }
    }
    P->n_ranges += 2 * nr;
    P->sets = grow(P, P->sets, sizeof *P->sets, &P->cap_sets, P->n_sets + 1);
    gb_cset *s = &P->sets[P->n_sets];
    memset(s, 0, sizeof *s);
    s->r0 = r0;
    s->nr = nr;
    for (uint32_t i = 0; i < nr; i++)
        for (uint32_t c = out[2 * i]; c <= out[2 * i + 1] && c < 128; c++)
            s->ascii[c >> 6] |= 1ull << (c & 63);
    return (uint32_t)P->n_sets++;
}

static uint32_t single(parser *P, uint32_t c) {
    uint32_t pr[2] = {c, c};
    return make_set(P, pr, 1, false);
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or set: an escape or a UTF-8 sequence. */
static uint32_t parse_char(parser *P) {
    size_t at = P->pos;
    if (P->pos >= P->n) pfail(P, at, RP_ERR_FORMAT, "unexpected end of grammar");
    unsigned char c = (unsigned char)P->s[P->pos];
    if (c == '\\') {
        char e = peek(P, 1);
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = hexv(peek(P, 2 + (size_t)i));
                if (h < 0)
                    pfail(P, at, RP_ERR_FORMAT, "expected %d hex digits after \\%c", digits, e);
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF) pfail(P, at, RP_ERR_FORMAT, "escape beyond U+10FFFF");
            P->pos += 2 + (size_t)digits;
            return v;
        }
        const char *from = "trn\\\"[]-", *to = "\t\r\n\\\"[]-";
        const char *q = e ? strchr(from, e) : NULL;
        if (!q) pfail(P, at, RP_ERR_FORMAT, "unknown escape '\\%c'", e ? e : ' ');
        P->pos += 2;
        return (uint32_t)(unsigned char)to[q - from];
    }
    /* UTF-8 */
    size_t len = c < 0x80             ? 1
                 : (c & 0xE0) == 0xC0 ? 2
                 : (c & 0xF0) == 0xE0 ? 3
                 : (c & 0xF8) == 0xF0 ? 4
                                      : 0;
    if (!len || P->pos + len > P->n) pfail(P, at, RP_ERR_FORMAT, "invalid UTF-8 in the grammar");
    uint32_t v = len == 1 ? c : (uint32_t)(c & (0x7F >> len));
    for (size_t i = 1; i < len; i++) {
        unsigned char d = (unsigned char)P->s[P->pos + i];
        if ((d & 0xC0) != 0x80) pfail(P, at, RP_ERR_FORMAT, "invalid UTF-8 in the grammar");
        v = (v << 6) | (d & 0x3F);
    }
    P->pos += len;
    return v;
}

static uint32_t parse_set(parser *P) {
    size_t open = P->pos++;
    bool neg = false;
    if (peek(P, 0) == '^') {
        neg = true;
        P->pos++;
    }
    size_t n = 0;
    while (peek(P, 0) != ']') {
        if (P->pos >= P->n)
            pfail(P, open, RP_ERR_FORMAT, "unterminated character set (missing ']')");
        uint32_t lo = parse_char(P), hi = lo;
        if (peek(P, 0) == '-' && peek(P, 1) != ']' && P->pos + 1 < P->n) {
            P->pos++;
            size_t at = P->pos;
            hi = parse_char(P);
            if (hi < lo) pfail(P, at, RP_ERR_FORMAT, "character range ends before it starts");
        }
        P->set_buf = grow(P, P->set_buf, 2 * sizeof *P->set_buf, &P->set_cap, n + 1);
        P->set_buf[2 * n] = lo;
        P->set_buf[2 * n + 1] = hi;
        n++;
    }
    P->pos++;
    return make_set(P, P->set_buf, n, neg);
}

/* ---- tokens --------------------------------------------------------------------- */

static gb_elem parse_token(parser *P, bool neg) {
    size_t at = P->pos;
    P->pos++; /* '<' */
    gb_elem e = {.type = neg ? GB_TOKEN_NOT : GB_TOKEN};
    if (peek(P, 0) == '[') {
        P->pos++;
        uint64_t v = 0;
        size_t d0 = P->pos;
        while (peek(P, 0) >= '0' && peek(P, 0) <= '9') {
            v = v * 10 + (uint64_t)(P->s[P->pos++] - '0');
            if (v > INT32_MAX) pfail(P, at, RP_ERR_FORMAT, "token id too large");
        }
        if (P->pos == d0) pfail(P, P->pos, RP_ERR_FORMAT, "expected a token id after '<['");
        if (peek(P, 0) != ']' || peek(P, 1) != '>')
            pfail(P, P->pos, RP_ERR_FORMAT, "expected ']>' after a token id");
        P->pos += 2;
        e.v = (uint32_t)v;
        return e;
    }
    size_t b = P->pos - 1;
    while (P->pos < P->n && P->s[P->pos] != '>' && P->s[P->pos] != '\n') P->pos++;
    if (peek(P, 0) != '>') pfail(P, at, RP_ERR_FORMAT, "expected '>' to end a token");
    P->pos++;
    /* resolved later against a vocabulary (gbnf_bind_tokens) */
    size_t k = P->n_tok;
    P->tok_text = grow(P, P->tok_text, sizeof(char *), &P->cap_tok, k + 1);
    P->tok_text[k] = rp_strndup(P->s + b, P->pos - b);
    if (!P->tok_text[k]) {
        P->status = rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
        longjmp(P->jb, 1);
    }
    P->n_tok++;
    e.v = GB_TOKEN_TEXT | (uint32_t)k;
    return e;
}

/* ---- sequences, alternatives, repetitions ---------------------------------------- */

static void parse_alternates(parser *P, uint32_t rule, bool nested);

/* Rewrites the last symbol q[from..] repeated min..max (max UINT64_MAX: no bound). */
static void repeat(parser *P, uint32_t rule, seq **qp, size_t from, uint64_t min, uint64_t max,
                   uint64_t *mult) {
    seq *q = *qp;
    size_t len = q->n - from;
    if (!len)
        pfail(P, P->pos, RP_ERR_FORMAT,
              "'*', '+', '?' or '{' without something before it to repeat");
    uint64_t copies = max != UINT64_MAX && max > 0 ? max : min > 0 ? min : 1;
    if (*mult * copies > MAX_REPETITION)
        pfail(P, P->pos, RP_ERR_INVALID_ARG,
              "repetition nested too deeply: more than %d copies of one symbol (reduce the bounds)",
              MAX_REPETITION);
    P->sym_buf = grow(P, P->sym_buf, sizeof *P->sym_buf, &P->sym_cap, len);
    gb_elem *sym = P->sym_buf;
    memcpy(sym, q->v + from, len * sizeof *sym);
    size_t alt_index = (size_t)(q - P->rules[rule].alts);
    q->n = from;
    for (uint64_t i = 0; i < min; i++)
        for (size_t k = 0; k < len; k++) seq_push(P, q, sym[k]);
    /* the optional tail: helper rules (they may move the rules array: re-find q) */
    uint32_t tail = UINT32_MAX;
    uint64_t n_opt = max == UINT64_MAX ? 1 : max - min;
    for (uint64_t i = 0; i < n_opt; i++) {
        uint32_t r = new_rule(P, rule);
        seq *a = add_alt(P, r);
        for (size_t k = 0; k < len; k++) seq_push(P, a, sym[k]);
        if (max == UINT64_MAX)
            seq_push(P, a, (gb_elem){GB_RULE, r});
        else if (tail != UINT32_MAX)
            seq_push(P, a, (gb_elem){GB_RULE, tail});
        add_alt(P, r); /* the empty alternative */
        tail = r;
    }
    q = &P->rules[rule].alts[alt_index];
    if (tail != UINT32_MAX) seq_push(P, q, (gb_elem){GB_RULE, tail});
    *mult *= copies;
    *qp = q;
}

static uint64_t parse_count(parser *P) {
    size_t at = P->pos;
    uint64_t v = 0;
    if (!(peek(P, 0) >= '0' && peek(P, 0) <= '9'))
        pfail(P, at, RP_ERR_FORMAT, "expected a number in '{...}'");
    while (peek(P, 0) >= '0' && peek(P, 0) <= '9') {
        v = v * 10 + (uint64_t)(P->s[P->pos++] - '0');
        if (v > (uint64_t)1 << 40) pfail(P, at, RP_ERR_FORMAT, "repetition count too large");
    }
    return v;
}

/* Elements of one alternative of `rule` (its last alternative) until a '|',
 * ')' or (outside parentheses) the end of the line. */
static void parse_sequence(parser *P, uint32_t rule, bool nested) {
    size_t last = SIZE_MAX; /* where the last symbol starts */
    uint64_t mult = 1;      /* copies of the last symbol already made by repetitions */
    seq *q = &P->rules[rule].alts[P->rules[rule].n_alts - 1];
    size_t alt = P->rules[rule].n_alts - 1;
    while (P->pos < P->n) {
        char c = P->s[P->pos];
        size_t at = P->pos;
        if (c == '"') {
            P->pos++;
            last = q->n;
            mult = 1;
            while (peek(P, 0) != '"') {
                if (P->pos >= P->n)
                    pfail(P, at, RP_ERR_FORMAT, "unterminated string literal (missing '\"')");
                uint32_t ch = parse_char(P);
                uint32_t s = single(P, ch);
                q = &P->rules[rule].alts[alt];
                seq_push(P, q, (gb_elem){GB_CHARS, s});
            }
            P->pos++;
        } else if (c == '[') {
            last = q->n;
            mult = 1;
            uint32_t s = parse_set(P);
            seq_push(P, q, (gb_elem){GB_CHARS, s});
        } else if (c == '.') {
            P->pos++;
            last = q->n;
            mult = 1;
            uint32_t pr[2] = {0, 0x10FFFF};
            uint32_t s = make_set(P, pr, 1, false);
            seq_push(P, q, (gb_elem){GB_CHARS, s});
        } else if (c == '<' || (c == '!' && peek(P, 1) == '<')) {
            if (c == '!') P->pos++;
            last = q->n;
            mult = 1;
            seq_push(P, q, parse_token(P, c == '!'));
        } else if (is_word(c)) {
            size_t b = P->pos;
            while (P->pos < P->n && is_word(P->s[P->pos])) P->pos++;
            uint32_t r = rule_id(P, P->s + b, P->pos - b, b);
            q = &P->rules[rule].alts[alt];
            last = q->n;
            mult = 1;
            seq_push(P, q, (gb_elem){GB_RULE, r});
        } else if (c == '(') {
            P->pos++;
            if (++P->nest > MAX_NEST)
                pfail(P, at, RP_ERR_FORMAT, "parentheses nested more than %d deep", MAX_NEST);
            skip_space(P, true);
            uint32_t r = new_rule(P, rule);
            size_t rules_before = P->n_rules;
            parse_alternates(P, r, true);
            P->nest--;
            if (peek(P, 0) != ')')
                pfail(P, P->pos, RP_ERR_FORMAT, "expected ')' to close the '(' at offset %zu", at);
            P->pos++;
            q = &P->rules[rule].alts[alt];
            last = q->n;
            /* a group's own repetitions count toward the nesting limit */
            mult = RP_MAX((uint64_t)1, (uint64_t)(P->n_rules - rules_before));
            seq_push(P, q, (gb_elem){GB_RULE, r});
        } else if (c == '*' || c == '+' || c == '?') {
            P->pos++;
            repeat(P, rule, &q, last == SIZE_MAX ? q->n : last, c == '+' ? 1 : 0,
                   c == '?' ? 1 : UINT64_MAX, &mult);
        } else if (c == '{') {
            P->pos++;
            skip_space(P, nested);
            uint64_t min = parse_count(P), max = min;
            skip_space(P, nested);
            if (peek(P, 0) == ',') {
                P->pos++;
                skip_space(P, nested);
                max = UINT64_MAX;
                if (peek(P, 0) >= '0' && peek(P, 0) <= '9') max = parse_count(P);
                skip_space(P, nested);
            }
            if (peek(P, 0) != '}')
                pfail(P, P->pos, RP_ERR_FORMAT, "expected '}' to close a repetition");
            P->pos++;
            if (min > MAX_REPETITION)
                pfail(P, at, RP_ERR_INVALID_ARG, "repetition minimum above %d", MAX_REPETITION);
            if (max != UINT64_MAX && max < min)
                pfail(P, at, RP_ERR_FORMAT, "repetition maximum below its minimum");
            if (max != UINT64_MAX && max > MAX_REPETITION) max = UINT64_MAX;
            repeat(P, rule, &q, last == SIZE_MAX ? q->n : last, min, max, &mult);
        } else {
            break;
        }
        skip_space(P, nested);
        q = &P->rules[rule].alts[alt];
    }
}

static void parse_alternates(parser *P, uint32_t rule, bool nested) {
    add_alt(P, rule);
    parse_sequence(P, rule, nested);
    while (peek(P, 0) == '|') {
        P->pos++;
        skip_space(P, true);
        add_alt(P, rule);
        parse_sequence(P, rule, nested);
    }
}

static void parse_rule(parser *P) {
    size_t at = P->pos;
    if (!is_word(peek(P, 0))) pfail(P, at, RP_ERR_FORMAT, "expected a rule name");
    while (P->pos < P->n && is_word(P->s[P->pos])) P->pos++;
    size_t name_len = P->pos - at;
    uint32_t r = rule_id(P, P->s + at, name_len, at);
    skip_space(P, false);
    if (!(peek(P, 0) == ':' && peek(P, 1) == ':' && peek(P, 2) == '='))
        pfail(P, P->pos, RP_ERR_FORMAT, "expected '::=' after the rule name '%.*s'",
              (int)RP_MIN(name_len, (size_t)60), P->s + at);
    P->pos += 3;
    skip_space(P, true);
    trule *t = &P->rules[r];
    /* a rule defined again replaces the earlier definition (as in llama.cpp) */
    for (size_t i = 0; i < t->n_alts; i++) free(t->alts[i].v);
    t->n_alts = 0;
    t->defined = true;
    t->def_off = at;
    parse_alternates(P, r, false);
    char c = peek(P, 0);
    if (c == '\r')
        P->pos += peek(P, 1) == '\n' ? 2 : 1;
    else if (c == '\n')
        P->pos++;
    else if (P->pos < P->n) {
        if (c == ')') pfail(P, P->pos, RP_ERR_FORMAT, "unmatched ')'");
        pfail(P, P->pos, RP_ERR_FORMAT, "unexpected '%c' (expected the end of the rule)", c);
    }
    skip_space(P, true);
}

/* ---- checks and flattening --------------------------------------------------------- */

static void free_parser(parser *P) {
    for (size_t i = 0; i < P->n_rules; i++) {
        for (size_t k = 0; k < P->rules[i].n_alts; k++) free(P->rules[i].alts[k].v);
        free(P->rules[i].alts);
        free(P->rules[i].name);
    }
    free(P->rules);
    free(P->set_buf);
    free(P->sym_buf);
    free(P->ranges);
    free(P->sets);
    for (size_t i = 0; i < P->n_tok; i++) free(P->tok_text[i]);
    free(P->tok_text);
}

/* Left recursion (a rule that can reach itself without consuming input)
 * would make the matcher loop: refuse it, naming the rule. */
static int left_recursive(const rp_gbnf *g, uint32_t r, uint8_t *mark) {
    if (mark[r] == 1) return (int)r;
    if (mark[r] == 2) return -1;
    mark[r] = 1;
    const gb_rule *R = &g->rules[r];
    for (uint32_t a = 0; a < R->n_alt; a++) {
        for (uint32_t i = g->alts[R->alt0 + a]; g->e[i].type == GB_RULE; i++) {
            int x = left_recursive(g, g->e[i].v, mark);
            if (x >= 0) return x;
            if (!g->rules[g->e[i].v].nullable) break;
        }
    }
    mark[r] = 2;
    return -1;
}

static rp_status finish(parser *P, const char *root, rp_gbnf **out) {
    for (size_t i = 0; i < P->n_rules; i++)
        if (!P->rules[i].defined)
            pfail(P, P->rules[i].def_off, RP_ERR_FORMAT, "undefined rule '%s'", P->rules[i].name);
    rp_gbnf *g = calloc(1, sizeof *g);
    if (!g) return rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
    size_t n_e = 0, n_alts = 0, names = 0;
    for (size_t i = 0; i < P->n_rules; i++) {
        n_alts += P->rules[i].n_alts;
        names += P->rules[i].name_len + 1;
        for (size_t k = 0; k < P->rules[i].n_alts; k++) n_e += P->rules[i].alts[k].n + 1;
    }
    g->e = malloc((n_e ? n_e : 1) * sizeof *g->e);
    g->alts = malloc((n_alts ? n_alts : 1) * sizeof *g->alts);
    g->rules = calloc(P->n_rules ? P->n_rules : 1, sizeof *g->rules);
    g->names = malloc(names ? names : 1);
    if (!g->e || !g->alts || !g->rules || !g->names) {
        gbnf_free(g);
        return rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
    }
    size_t e = 0, a = 0, nm = 0;
    for (size_t i = 0; i < P->n_rules; i++) {
        const trule *t = &P->rules[i];
        gb_rule *R = &g->rules[i];
        R->alt0 = (uint32_t)a;
        R->n_alt = (uint32_t)t->n_alts;
        R->name = (uint32_t)nm;
        R->name_len = (uint32_t)t->name_len;
        memcpy(g->names + nm, t->name, t->name_len + 1);
        nm += t->name_len + 1;
        for (size_t k = 0; k < t->n_alts; k++) {
            g->alts[a++] = (uint32_t)e;
            if (t->alts[k].n) memcpy(g->e + e, t->alts[k].v, t->alts[k].n * sizeof *g->e);
            e += t->alts[k].n;
            g->e[e++] = (gb_elem){GB_END, 0};
        }
    }
    g->n_e = e;
    g->n_alts = a;
    g->n_rules = P->n_rules;
    g->sets = P->sets;
    g->n_sets = P->n_sets;
    g->ranges = P->ranges;
    g->n_ranges = P->n_ranges;
    P->sets = NULL;
    P->ranges = NULL;
    g->tok_text = P->tok_text;
    g->n_tok = P->n_tok;
    P->tok_text = NULL;
    P->n_tok = 0;
    /* nullable rules, to a fixed point */
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < g->n_rules; i++) {
            gb_rule *R = &g->rules[i];
            if (R->nullable) continue;
            for (uint32_t k = 0; k < R->n_alt && !R->nullable; k++) {
                uint32_t j = g->alts[R->alt0 + k];
                while (g->e[j].type == GB_RULE && g->rules[g->e[j].v].nullable) j++;
                if (g->e[j].type == GB_END) R->nullable = changed = true;
            }
        }
    }
    size_t rl = strlen(root);
    g->root = UINT32_MAX;
    for (size_t i = 0; i < g->n_rules; i++)
        if (g->rules[i].name_len == rl && !memcmp(g->names + g->rules[i].name, root, rl))
            g->root = (uint32_t)i;
    if (g->root == UINT32_MAX) {
        gbnf_free(g);
        return rp_fail(RP_ERR_FORMAT, "grammar: no rule named '%s' (the start rule)", root);
    }
    uint8_t *mark = calloc(g->n_rules, 1);
    if (!mark) {
        gbnf_free(g);
        return rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
    }
    for (size_t i = 0; i < g->n_rules; i++) {
        int x = left_recursive(g, (uint32_t)i, mark);
        if (x >= 0) {
            size_t n;
            const char *name = gbnf_rule_name(g, (uint32_t)x, &n);
            free(mark);
            rp_status st =
                rp_fail(RP_ERR_FORMAT,
                        "grammar: rule '%.*s' is left-recursive (it can reach itself before any "
                        "character); rewrite it with repetition",
                        (int)RP_MIN(n, (size_t)80), name);
            gbnf_free(g);
            return st;
        }
    }
    free(mark);
    *out = g;
    return RP_OK;
}

rp_status gbnf_parse(const char *text, size_t len, const char *root, rp_gbnf **out) {
    *out = NULL;
    parser *P = calloc(1, sizeof *P);
    if (!P) return rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
    P->s = text;
    P->n = len;
    rp_status st;
    if (setjmp(P->jb)) {
        st = P->status;
    } else {
        if (memchr(text, 0, len))
            pfail(P, (size_t)((const char *)memchr(text, 0, len) - text), RP_ERR_FORMAT,
                  "NUL byte in the grammar");
        skip_space(P, true);
        while (P->pos < P->n) parse_rule(P);
        st = finish(P, root ? root : "root", out);
    }
    free_parser(P);
    free(P);
    return st;
}

void gbnf_free(rp_gbnf *g) {
    if (!g) return;
    free(g->e);
    free(g->alts);
    free(g->rules);
    free(g->names);
    free(g->sets);
    free(g->ranges);
    for (size_t i = 0; i < g->n_tok; i++) free(g->tok_text ? g->tok_text[i] : NULL);
    free(g->tok_text);
    free(g);
}

const char *gbnf_rule_name(const rp_gbnf *g, uint32_t r, size_t *len) {
    *len = g->rules[r].name_len;
    return g->names + g->rules[r].name;
}

bool gbnf_set_has(const rp_gbnf *g, uint32_t s, uint32_t c) {
    const gb_cset *cs = &g->sets[s];
    if (c < 128) return (cs->ascii[c >> 6] >> (c & 63)) & 1;
    const uint32_t *r = g->ranges + 2 * cs->r0;
    size_t lo = 0, hi = cs->nr;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < r[2 * mid])
            hi = mid;
        else if (c > r[2 * mid + 1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

bool gbnf_set_meets(const rp_gbnf *g, uint32_t s, uint32_t lo, uint32_t hi) {
    const gb_cset *cs = &g->sets[s];
    const uint32_t *r = g->ranges + 2 * cs->r0;
    for (uint32_t i = 0; i < cs->nr; i++)
        if (r[2 * i] <= hi && r[2 * i + 1] >= lo) return true;
    return false;
}

rp_status gbnf_bind_tokens(rp_gbnf *g, int32_t (*find)(void *user, const char *text), void *user) {
    int32_t *ids = malloc((g->n_tok ? g->n_tok : 1) * sizeof *ids);
    if (!ids) return rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
    for (size_t i = 0; i < g->n_tok; i++) {
        ids[i] = find ? find(user, g->tok_text[i]) : -1;
        if (ids[i] < 0) {
            rp_status st =
                rp_fail(RP_ERR_INVALID_ARG, "grammar: %s is not one token of this vocabulary",
                        g->tok_text[i]);
            free(ids);
            return st;
        }
    }
    for (size_t i = 0; i < g->n_e; i++)
        if ((g->e[i].type == GB_TOKEN || g->e[i].type == GB_TOKEN_NOT) &&
            (g->e[i].v & GB_TOKEN_TEXT))
            g->e[i].v = (uint32_t)ids[g->e[i].v & ~GB_TOKEN_TEXT];
    free(ids);
    g->n_bound = g->n_tok;
    return RP_OK;
}
