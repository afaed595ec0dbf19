/* JSON schema -> GBNF, with the semantics of llama.cpp's
 * json-schema-to-grammar (common/json-schema-to-grammar.cpp, grammars/README.md):
 *
 *   - types object / array / string / number / integer / boolean / null, a
 *     list of types, enum, const, anyOf / oneOf (alternatives), allOf (objects
 *     merged; enums intersected), $ref to #/$defs/... or #/definitions/...
 *     (recursive ones too), {} or true for any value;
 *   - objects: properties in the order the schema lists them, required ones
 *     first, the optional ones after them in any subset (each optional one may
 *     be left out, the order stays); additionalProperties false unless the
 *     schema says otherwise (llama.cpp's default); true or a schema adds keys
 *     that are none of the listed names;
 *   - arrays: items with minItems / maxItems, prefixItems (or an items list)
 *     as a fixed tuple;
 *   - strings: minLength / maxLength, format date / time / date-time / uuid,
 *     pattern (a regex subset, below); integers: minimum / maximum /
 *     exclusiveMinimum / exclusiveMaximum as digit ranges;
 *   - whitespace (rule `space`) after { [ : , and before } ].
 *
 * Keywords that only narrow a schema (uniqueItems, contains, not, if/then/
 * else, patternProperties, minimum on numbers, ...) are ignored as llama.cpp
 * ignores them: the grammar then accepts more than the schema. Patterns: ^...$
 * with literals, ., [classes], ( ) and (?: ), |, * + ? {m,n}, \d \w \s and
 * their negations, escapes. Unlike llama.cpp, what a pattern matches is kept
 * valid JSON: '"' and '\' are written escaped and control characters are
 * never produced. */
#include "base/util.h"
#include "text/gbnf.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct rule {
    char *name, *body;
} rule;

typedef struct conv {
    const json_t *root;
    rule *rules;
    size_t n, cap;
    char **resolving; /* $refs being converted (recursion) */
    size_t n_resolving;
    int depth;
    rp_status status;
} conv;

/* ---- text helpers ----------------------------------------------------------- */

static char *dupf(const char *fmt, ...) RP_PRINTF(1, 2);
static char *dupf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static bool fail(conv *c, rp_status s, const char *fmt, ...) RP_PRINTF(3, 4);
static bool fail(conv *c, rp_status s, const char *fmt, ...) {
    if (c->status) return false;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->status = rp_fail(s, "JSON schema: %s", msg);
    return false;
}

/* A GBNF string literal for the bytes p[0..n). */
static bool put_literal(rp_buf *b, const char *p, size_t n) {
    bool ok = rp_buf_append(b, "\"", 1);
    for (size_t i = 0; ok && i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\')
            ok = rp_buf_printf(b, "\\%c", c);
        else if (c == '\n')
            ok = rp_buf_append(b, "\\n", 2);
        else if (c == '\r')
            ok = rp_buf_append(b, "\\r", 2);
        else if (c == '\t')
            ok = rp_buf_append(b, "\\t", 2);
        else if (c < 0x20 || c == 0x7F)
            ok = rp_buf_printf(b, "\\x%02X", c);
        else
            ok = rp_buf_append(b, p + i, 1);
    }
    return ok && rp_buf_append(b, "\"", 1);
}

static char *finish(rp_buf *b, bool ok) {
    if (!ok || !rp_buf_append(b, "", 1)) {
        rp_buf_free(b);
        return NULL;
    }
    return b->data;
}

/* The literal of a JSON value as json.dumps writes it (compact separators are
 * what llama.cpp's dump() gives). */
static char *json_literal(const json_t *v) {
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text) return NULL;
    rp_buf b = {0};
    char *r = finish(&b, put_literal(&b, text, strlen(text)));
    free(text);
    return r;
}

/* ---- rules ------------------------------------------------------------------- */

static const char *const RESERVED[] = {
    "root",    "space",         "boolean",      "null",        "number",
    "integer", "integral-part", "decimal-part", "string",      "char",
    "value",   "object",        "array",        "uuid",        "date",
    "time",    "date-time",     "date-string",  "time-string", "date-time-string",
    "dot"};

/* A rule name from text: runs of other characters than [a-zA-Z0-9-] become '-'. */
static char *rule_name(const char *text) {
    size_t n = strlen(text);
    char *s = malloc(n + 2);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = text[i];
        bool w = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '-';
        if (w)
            s[k++] = ch;
        else if (!k || s[k - 1] != '-')
            s[k++] = '-';
    }
    if (!k) s[k++] = 'x';
    s[k] = 0;
    return s;
}

static rule *find_rule(conv *c, const char *name) {
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->rules[i].name, name)) return &c->rules[i];
    return NULL;
}

/* Adds name ::= body (taking body); a name already used for another body gets
 * a number. Returns the name used (owned by the table) or NULL. */
static const char *add_rule(conv *c, const char *name, char *body) {
    char *esc = body ? rule_name(name) : NULL;
    if (!esc) {
        free(body);
        fail(c, RP_ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0;; i++) {
        char *key = i ? dupf("%s%d", esc, i) : rp_strdup(esc);
        if (!key) break;
        rule *r = find_rule(c, key);
        if (r && !strcmp(r->body, body)) {
            free(key);
            free(esc);
            free(body);
            return r->name;
        }
        if (r) {
            free(key);
            continue;
        }
        if (c->n == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 32;
            rule *nr = realloc(c->rules, cap * sizeof *nr);
            if (!nr) {
                free(key);
                break;
            }
            c->rules = nr;
            c->cap = cap;
        }
        c->rules[c->n] = (rule){key, body};
        free(esc);
        return c->rules[c->n++].name;
    }
    free(esc);
    free(body);
    fail(c, RP_ERR_NOMEM, "out of memory");
    return NULL;
}

/* The built-in rules, by name: body and the rules it uses. */
static const struct {
    const char *name, *body, *deps[6];
} PRIMITIVES[] = {
    {"space", "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}", {NULL}},
    {"boolean", "(\"true\" | \"false\")", {NULL}},
    {"null", "\"null\"", {NULL}},
    {"decimal-part", "[0-9]{1,16}", {NULL}},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", {NULL}},
    {"number",
     "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)?",
     {"integral-part", "decimal-part", NULL}},
    {"integer", "(\"-\"? integral-part)", {"integral-part", NULL}},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})", {NULL}},
    {"string", "\"\\\"\" char* \"\\\"\"", {"char", NULL}},
    {"value",
     "object | array | string | number | boolean | null",
     {"object", "array", "string", "number", "boolean", "null"}},
    {"object",
     "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? space "
     "\"}\"",
     {"space", "string", "value", NULL}},
    {"array", "\"[\" space ( value (\",\" space value)* )? space \"]\"", {"space", "value", NULL}},
    {"uuid",
     "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
     "[0-9a-fA-F]{12} \"\\\"\"",
     {NULL}},
    {"date",
     "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] "
     ")",
     {NULL}},
    {"time",
     "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? ( \"Z\" | "
     "( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
     {NULL}},
    {"date-time", "date \"T\" time", {"date", "time", NULL}},
    {"date-string", "\"\\\"\" date \"\\\"\"", {"date", NULL}},
    {"time-string", "\"\\\"\" time \"\\\"\"", {"time", NULL}},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\"", {"date-time", NULL}},
};

/* Adds a built-in rule and what it needs; returns its name. */
static const char *primitive(conv *c, const char *name) {
    for (size_t i = 0; i < RP_ARRAY_LEN(PRIMITIVES); i++) {
        if (strcmp(PRIMITIVES[i].name, name)) continue;
        rule *r = find_rule(c, name);
        if (r) return r->name;
        const char *nm = add_rule(c, name, rp_strdup(PRIMITIVES[i].body));
        for (int k = 0; nm && k < 6 && PRIMITIVES[i].deps[k]; k++)
            if (!primitive(c, PRIMITIVES[i].deps[k])) return NULL;
        return nm;
    }
    fail(c, RP_ERR_INTERNAL, "no built-in rule '%s'", name);
    return NULL;
}

/* name ::= the built-in's body, for a schema rule that is just a primitive. */
static const char *primitive_as(conv *c, const char *name, const char *prim) {
    const char *p = primitive(c, prim);
    if (!p) return NULL;
    if (!strcmp(name, prim)) return p;
    return add_rule(c, name, rp_strdup(p));
}

/* ---- integer ranges ------------------------------------------------------------ */

static bool digits_rep(rp_buf *b, int min, int max) {
    if (max <= 0) return true;
    if (min == 1 && max == 1) return rp_buf_printf(b, "[0-9]");
    if (min == max) return rp_buf_printf(b, "[0-9]{%d}", min);
    return rp_buf_printf(b, "[0-9]{%d,%d}", min, max);
}

static bool digit_set(rp_buf *b, char lo, char hi) {
    return lo == hi ? rp_buf_printf(b, "[%c]", lo) : rp_buf_printf(b, "[%c-%c]", lo, hi);
}

/* Numbers from x to y, both of the same number of digits (as strings). */
static bool same_len_range(rp_buf *b, const char *x, const char *y, size_t n) {
    size_t i = 0;
    while (i < n && x[i] == y[i]) i++;
    bool ok = true;
    if (i) {
        ok = rp_buf_append(b, "\"", 1) && rp_buf_append(b, x, i) && rp_buf_append(b, "\"", 1);
        if (i < n) ok = ok && rp_buf_append(b, " ", 1);
    }
    if (i == n || !ok) return ok;
    size_t rest = n - i - 1;
    if (!rest) return digit_set(b, x[i], y[i]);
    bool x_zeros = true, y_nines = true;
    for (size_t k = i + 1; k < n; k++) {
        x_zeros &= x[k] == '0';
        y_nines &= y[k] == '9';
    }
    char nines[24], zeros[24];
    memset(nines, '9', rest);
    memset(zeros, '0', rest);
    ok = rp_buf_append(b, "(", 1);
    /* x's first digit with the rest from x up */
    char lo = x[i], hi = y[i];
    if (x_zeros) {
        /* x[i]..(y[i]-1) with any rest, or all of it when y's rest is all nines */
        char top = y_nines ? hi : (char)(hi - 1);
        if (top >= lo)
            ok = ok && digit_set(b, lo, top) && rp_buf_append(b, " ", 1) &&
                 digits_rep(b, (int)rest, (int)rest);
        if (!y_nines) {
            if (top >= lo) ok = ok && rp_buf_append(b, " | ", 3);
            ok = ok && digit_set(b, hi, hi) && rp_buf_append(b, " (", 2) &&
                 same_len_range(b, zeros, y + i + 1, rest) && rp_buf_append(b, ")", 1);
        }
    } else {
        ok = ok && digit_set(b, lo, lo) && rp_buf_append(b, " (", 2) &&
             same_len_range(b, x + i + 1, nines, rest) && rp_buf_append(b, ")", 1);
        char mid_hi = y_nines ? hi : (char)(hi - 1);
        if (lo + 1 <= mid_hi)
            ok = ok && rp_buf_append(b, " | ", 3) && digit_set(b, (char)(lo + 1), mid_hi) &&
                 rp_buf_append(b, " ", 1) && digits_rep(b, (int)rest, (int)rest);
        if (!y_nines)
            ok = ok && rp_buf_append(b, " | ", 3) && digit_set(b, hi, hi) &&
                 rp_buf_append(b, " (", 2) && same_len_range(b, zeros, y + i + 1, rest) &&
                 rp_buf_append(b, ")", 1);
    }
    return ok && rp_buf_append(b, ")", 1);
}

/* Non-negative numbers in [lo, hi] (hi < 0: unbounded; at most 16 digits then). */
static bool nonneg_range(rp_buf *b, long long lo, long long hi) {
    char xs[24], ys[24];
    int lx = snprintf(xs, sizeof xs, "%lld", lo);
    int ly = hi >= 0 ? snprintf(ys, sizeof ys, "%lld", hi) : 16;
    bool ok = true, first = true;
    for (int len = lx; len <= ly && ok; len++) {
        char a[24], z[24];
        if (len == lx)
            memcpy(a, xs, (size_t)len + 1);
        else {
            a[0] = '1';
            memset(a + 1, '0', (size_t)len - 1);
            a[len] = 0;
        }
        if (hi >= 0 && len == ly)
            memcpy(z, ys, (size_t)len + 1);
        else {
            memset(z, '9', (size_t)len);
            z[len] = 0;
        }
        if (!first) ok = rp_buf_append(b, " | ", 3);
        first = false;
        if (hi < 0 && len > lx) {
            /* every longer number, up to 16 digits */
            ok = ok && rp_buf_printf(b, "[1-9] ") && digits_rep(b, len - 1, 15);
            break;
        }
        ok = ok && same_len_range(b, a, z, (size_t)len);
    }
    return ok;
}

/* Integers in [lo, hi]; has_lo / has_hi say which bounds exist. */
static bool int_range(rp_buf *b, bool has_lo, long long lo, bool has_hi, long long hi) {
    static const char any_pos[] = "[1-9] [0-9]{0,15}";
    if (has_lo && has_hi) {
        if (hi < 0)
            return rp_buf_printf(b, "\"-\" (") && int_range(b, true, -hi, true, -lo) &&
                   rp_buf_printf(b, ")");
        if (lo < 0)
            return rp_buf_printf(b, "\"-\" (") && nonneg_range(b, 1, -lo) &&
                   rp_buf_printf(b, ") | ") && nonneg_range(b, 0, hi);
        return nonneg_range(b, lo, hi);
    }
    if (has_lo) {
        if (lo < 0)
            return rp_buf_printf(b, "\"-\" (") && nonneg_range(b, 1, -lo) &&
                   rp_buf_printf(b, ") | [0] | %s", any_pos);
        return nonneg_range(b, lo, -1);
    }
    /* only an upper bound */
    if (hi >= 0) return rp_buf_printf(b, "\"-\" %s | ", any_pos) && nonneg_range(b, 0, hi);
    return rp_buf_printf(b, "\"-\" (") && nonneg_range(b, -hi, -1) && rp_buf_printf(b, ")");
}

/* ---- patterns (regex subset -> GBNF) ----------------------------------------------- */

typedef struct rx {
    conv *c;
    const char *s;
    size_t n, i;
    int depth;
} rx;

static bool rx_fail(rx *r, const char *what) {
    return fail(r->c, RP_ERR_UNSUPPORTED, "pattern \"%.*s\": %s at offset %zu",
                (int)RP_MIN(r->n, (size_t)80), r->s, what, r->i);
}

/* Appends a code point as it may appear inside [...] of GBNF. */
static bool class_char(rp_buf *b, uint32_t cp) {
    if (cp == '\\' || cp == ']' || cp == '[' || cp == '-' || cp == '"' || cp == '^')
        return rp_buf_printf(b, "\\%c", (char)cp);
    if (cp < 0x20 || cp == 0x7F) return rp_buf_printf(b, "\\x%02X", cp);
    if (cp < 0x80) return rp_buf_printf(b, "%c", (char)cp);
    return cp < 0x10000 ? rp_buf_printf(b, "\\u%04X", cp) : rp_buf_printf(b, "\\U%08X", cp);
}

static uint32_t rx_utf8(rx *r) {
    unsigned char c0 = (unsigned char)r->s[r->i];
    size_t len = c0 < 0x80 ? 1 : (c0 & 0xE0) == 0xC0 ? 2 : (c0 & 0xF0) == 0xE0 ? 3 : 4;
    uint32_t cp = len == 1 ? c0 : (uint32_t)(c0 & (0x7F >> len));
    for (size_t k = 1; k < len && r->i + k < r->n; k++)
        cp = (cp << 6) | ((unsigned char)r->s[r->i + k] & 0x3F);
    r->i += len;
    return cp;
}

/* The JSON-safe text of a literal code point: " and \ escaped, control characters refused. */
static bool lit_cp(rx *r, rp_buf *b, uint32_t cp) {
    if (cp == '"') return rp_buf_printf(b, "\"\\\\\\\"\"");  /* the two characters \" */
    if (cp == '\\') return rp_buf_printf(b, "\"\\\\\\\\\""); /* the two characters \\ */
    if (cp == '\n') return rp_buf_printf(b, "\"\\\\n\"");
    if (cp == '\t') return rp_buf_printf(b, "\"\\\\t\"");
    if (cp < 0x20 || cp == 0x7F)
        return rx_fail(r, "a control character (JSON strings cannot hold one as it is)");
    rp_buf_printf(b, "[");
    return class_char(b, cp) && rp_buf_printf(b, "]");
}

/* A character set from escape letter d/w/s (upper case: negated) into ranges. */
static size_t class_escape(char e, uint32_t *pairs) {
    switch (e) {
    case 'd':
        pairs[0] = '0', pairs[1] = '9';
        return 1;
    case 'w':
        pairs[0] = 'a', pairs[1] = 'z', pairs[2] = 'A', pairs[3] = 'Z', pairs[4] = '0',
        pairs[5] = '9', pairs[6] = '_', pairs[7] = '_';
        return 4;
    case 's':
        pairs[0] = ' ', pairs[1] = ' ', pairs[2] = '\t', pairs[3] = '\r', pairs[4] = '\n',
        pairs[5] = '\n', pairs[6] = '\f', pairs[7] = '\f';
        return 4;
    }
    return 0;
}

/* Writes a set (ranges, negated or not) made JSON-safe: what must be escaped in
 * JSON (" \ and control characters) is left out and, where the set holds " or
 * \, offered as its escape sequence. */
static bool emit_set(rp_buf *b, const uint32_t *pairs, size_t n, bool neg) {
    bool has_q = false, has_bs = false;
    for (size_t i = 0; i < n; i++) {
        bool q = pairs[2 * i] <= '"' && pairs[2 * i + 1] >= '"';
        bool bs = pairs[2 * i] <= '\\' && pairs[2 * i + 1] >= '\\';
        has_q |= neg ? false : q;
        has_bs |= neg ? false : bs;
    }
    if (neg) {
        /* a negated set holds " and \ unless it lists them */
        bool lq = false, lbs = false;
        for (size_t i = 0; i < n; i++) {
            lq |= pairs[2 * i] <= '"' && pairs[2 * i + 1] >= '"';
            lbs |= pairs[2 * i] <= '\\' && pairs[2 * i + 1] >= '\\';
        }
        has_q = !lq;
        has_bs = !lbs;
    }
    bool ok = rp_buf_printf(b, "(");
    if (neg) {
        ok = ok && rp_buf_printf(b, "[^\"\\\\\\x00-\\x1F\\x7F");
        for (size_t i = 0; i < n && ok; i++) {
            ok = class_char(b, pairs[2 * i]);
            if (pairs[2 * i + 1] != pairs[2 * i])
                ok = ok && rp_buf_printf(b, "-") && class_char(b, pairs[2 * i + 1]);
        }
        ok = ok && rp_buf_printf(b, "]");
    } else {
        /* ranges minus the characters JSON escapes */
        ok = ok && rp_buf_printf(b, "[");
        bool any = false;
        for (size_t i = 0; i < n && ok; i++) {
            uint32_t lo = pairs[2 * i], hi = pairs[2 * i + 1];
            static const uint32_t cut[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}};
            /* split [lo,hi] around the cut characters */
            uint32_t a = lo;
            while (a <= hi && ok) {
                bool skip = false;
                for (size_t k = 0; k < 4; k++)
                    if (a >= cut[k][0] && a <= cut[k][1]) {
                        a = cut[k][1] + 1;
                        skip = true;
                    }
                if (skip) continue;
                uint32_t e = hi;
                for (size_t k = 0; k < 4; k++)
                    if (cut[k][0] > a && cut[k][0] - 1 < e) e = cut[k][0] - 1;
                ok = class_char(b, a);
                if (e != a) ok = ok && rp_buf_printf(b, "-") && class_char(b, e);
                any = true;
                if (e >= hi) break;
                a = e + 1;
            }
        }
        if (!any)
            ok = ok &&
                 rp_buf_printf(
                     b, "\\x00"); /* never matched inside a JSON string: \x00 is excluded below */
        ok = ok && rp_buf_printf(b, "]");
        if (!any) {
            b->len -= 6; /* drop "[\x00]" and write an impossible alternative */
            ok = rp_buf_printf(b, "[\\x00]");
        }
    }
    if (has_q) ok = ok && rp_buf_printf(b, " | \"\\\\\\\"\"");
    if (has_bs) ok = ok && rp_buf_printf(b, " | \"\\\\\\\\\"");
    return ok && rp_buf_printf(b, ")");
}

static bool rx_alts(rx *r, rp_buf *b);

static bool rx_class(rx *r, rp_buf *b) {
    r->i++; /* [ */
    bool neg = false;
    if (r->i < r->n && r->s[r->i] == '^') {
        neg = true;
        r->i++;
    }
    uint32_t pairs[2 * 256];
    size_t n = 0;
    bool first = true;
    while (r->i < r->n && (r->s[r->i] != ']' || first)) {
        first = false;
        if (n + 4 > 256) return rx_fail(r, "character class too long");
        uint32_t lo;
        if (r->s[r->i] == '\\' && r->i + 1 < r->n) {
            char e = r->s[r->i + 1];
            size_t k = class_escape((char)(e | 0x20), pairs + 2 * n);
            if (k && e >= 'a') {
                n += k;
                r->i += 2;
                continue;
            }
            if (k) return rx_fail(r, "negated class escapes (\\D \\W \\S) inside [...]");
            r->i += 2;
            lo = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : (uint32_t)(unsigned char)e;
        } else {
            lo = rx_utf8(r);
        }
        uint32_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\' && r->i + 1 < r->n) {
                char e = r->s[r->i + 1];
                r->i += 2;
                hi = e == 'n'   ? '\n'
                     : e == 't' ? '\t'
                     : e == 'r' ? '\r'
                                : (uint32_t)(unsigned char)e;
            } else {
                hi = rx_utf8(r);
            }
            if (hi < lo) return rx_fail(r, "range out of order in a character class");
        }
        pairs[2 * n] = lo;
        pairs[2 * n + 1] = hi;
        n++;
    }
    if (r->i >= r->n) return rx_fail(r, "unterminated character class");
    r->i++; /* ] */
    return emit_set(b, pairs, n, neg);
}

static bool rx_atom(rx *r, rp_buf *b) {
    char ch = r->s[r->i];
    if (ch == '(') {
        r->i++;
        if (r->i + 1 < r->n && r->s[r->i] == '?') {
            if (r->s[r->i + 1] != ':') return rx_fail(r, "only (?: ) groups are supported");
            r->i += 2;
        }
        if (++r->depth > MAX_DEPTH) return rx_fail(r, "groups nested too deeply");
        bool ok = rp_buf_printf(b, "(") && rx_alts(r, b);
        r->depth--;
        if (!ok) return false;
        if (r->i >= r->n || r->s[r->i] != ')') return rx_fail(r, "unbalanced parentheses");
        r->i++;
        return rp_buf_printf(b, ")");
    }
    if (ch == '[') return rx_class(r, b);
    if (ch == '.') {
        r->i++;
        uint32_t nl[4] = {'\n', '\n', '\r', '\r'};
        return emit_set(b, nl, 2, true);
    }
    if (ch == '\\') {
        if (r->i + 1 >= r->n) return rx_fail(r, "a trailing backslash");
        char e = r->s[r->i + 1];
        r->i += 2;
        uint32_t pairs[8];
        size_t k = class_escape((char)(e | 0x20), pairs);
        if (k) return emit_set(b, pairs, k, e < 'a');
        if (e >= '1' && e <= '9') return rx_fail(r, "back-references");
        if (e == 'b' || e == 'B') return rx_fail(r, "word boundaries");
        uint32_t cp = e == 'n'   ? '\n'
                      : e == 't' ? '\t'
                      : e == 'r' ? '\r'
                      : e == 'f' ? '\f'
                                 : (uint32_t)(unsigned char)e;
        return lit_cp(r, b, cp);
    }
    if (ch == '^' || ch == '$')
        return rx_fail(r, "anchors other than a leading ^ and a trailing $");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{')
        return rx_fail(r, "a quantifier with nothing to repeat");
    return lit_cp(r, b, rx_utf8(r));
}

static bool rx_quant(rx *r, rp_buf *b) {
    if (r->i >= r->n) return true;
    char ch = r->s[r->i];
    bool ok = true;
    if (ch == '*' || ch == '+' || ch == '?') {
        r->i++;
        ok = rp_buf_printf(b, "%c", ch);
    } else if (ch == '{') {
        size_t e = r->i + 1;
        long m = 0, x = -1;
        bool comma = false, digits = false;
        for (; e < r->n && r->s[e] != '}'; e++) {
            if (r->s[e] == ',') {
                if (comma) return rx_fail(r, "bad {m,n}");
                comma = true;
                x = 0;
            } else if (r->s[e] >= '0' && r->s[e] <= '9') {
                digits = true;
                long *t = comma ? &x : &m;
                *t = *t * 10 + (r->s[e] - '0');
                if (*t > 100000) return rx_fail(r, "repetition count too large");
            } else {
                return rx_fail(r, "bad {m,n}");
            }
        }
        if (e >= r->n || !digits) return rx_fail(r, "bad {m,n}");
        bool open = comma && e > 0 && r->s[e - 1] == ',';
        r->i = e + 1;
        if (!comma)
            ok = rp_buf_printf(b, "{%ld}", m);
        else if (open)
            ok = rp_buf_printf(b, "{%ld,}", m);
        else
            ok = rp_buf_printf(b, "{%ld,%ld}", m, x);
    } else {
        return true;
    }
    if (r->i < r->n && (r->s[r->i] == '?' || r->s[r->i] == '+'))
        r->i++; /* lazy / possessive: same language */
    return ok;
}

static bool rx_seq(rx *r, rp_buf *b) {
    bool first = true;
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        if (r->s[r->i] == '$' && r->i + 1 == r->n) break;
        if (!first && !rp_buf_printf(b, " ")) return false;
        first = false;
        if (!rp_buf_printf(b, "(") || !rx_atom(r, b) || !rp_buf_printf(b, ")") || !rx_quant(r, b))
            return false;
    }
    if (first) return rp_buf_printf(b, "\"\"");
    return true;
}

static bool rx_alts(rx *r, rp_buf *b) {
    if (!rx_seq(r, b)) return false;
    while (r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        if (!rp_buf_printf(b, " | ") || !rx_seq(r, b)) return false;
    }
    return true;
}

static const char *visit_pattern(conv *c, const char *name, const char *pat) {
    size_t n = strlen(pat);
    rx r = {c, pat, n, 0, 0};
    if (!n || pat[0] != '^' || pat[n - 1] != '$' || (n >= 2 && pat[n - 2] == '\\')) {
        fail(c, RP_ERR_UNSUPPORTED, "pattern \"%.80s\" must start with '^' and end with '$'", pat);
        return NULL;
    }
    r.i = 1;
    rp_buf b = {0};
    bool ok = rp_buf_printf(&b, "\"\\\"\" (") && rx_alts(&r, &b);
    if (ok && r.i < n - 1) ok = rx_fail(&r, "unbalanced parentheses");
    ok = ok && rp_buf_printf(&b, ") \"\\\"\"");
    char *body = finish(&b, ok);
    if (!body) {
        if (!c->status) fail(c, RP_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return add_rule(c, name, body);
}

/* ---- schemas ------------------------------------------------------------------------ */

static const char *visit(conv *c, const json_t *s, const char *name);

static char *sub_name(const char *name, const char *part) {
    return *name ? dupf("%s-%s", name, part) : rp_strdup(part);
}

/* Names for schema rules: "root" at the top, never a built-in's name. */
static char *schema_rule_name(const char *name) {
    if (!*name) return rp_strdup("root");
    for (size_t i = 0; i < RP_ARRAY_LEN(RESERVED); i++)
        if (!strcmp(name, RESERVED[i])) return dupf("%s-", name);
    return rp_strdup(name);
}

static const json_t *resolve_pointer(conv *c, const char *ref) {
    if (ref[0] != '#') {
        fail(c, RP_ERR_UNSUPPORTED, "$ref \"%.100s\": only local references (#/...) are supported",
             ref);
        return NULL;
    }
    const json_t *v = c->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char key[256];
        size_t k = 0;
        for (size_t i = 0; i < len && k + 1 < sizeof key; i++) { /* ~1 = /, ~0 = ~ */
            if (p[i] == '~' && i + 1 < len && (p[i + 1] == '0' || p[i + 1] == '1')) {
                key[k++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                key[k++] = p[i];
            }
        }
        key[k] = 0;
        if (json_is_object(v))
            v = json_object_get(v, key);
        else if (json_is_array(v))
            v = json_array_get(v, (size_t)strtoul(key, NULL, 10));
        else
            v = NULL;
        if (!v) {
            fail(c, RP_ERR_INVALID_ARG, "$ref \"%.100s\" does not resolve", ref);
            return NULL;
        }
        p += len;
    }
    return v;
}

static const char *visit_ref(conv *c, const char *ref, const char *rname) {
    const char *frag = strrchr(ref, '/');
    /* (an empty $ref has no character to skip) */
    char *nm = dupf("ref-%s", frag ? frag + 1 : *ref ? ref + 1 : ref);
    if (!nm) {
        fail(c, RP_ERR_NOMEM, "out of memory");
        return NULL;
    }
    char *esc = rule_name(nm);
    free(nm);
    if (!esc) return NULL;
    /* converted already, or being converted (a recursive reference) */
    for (size_t i = 0; i < c->n_resolving; i++)
        if (!strcmp(c->resolving[i], ref)) {
            const char *r = add_rule(c, rname, esc);
            return r;
        }
    rule *done = find_rule(c, esc);
    if (done) {
        const char *r = add_rule(c, rname, esc);
        return r;
    }
    const json_t *target = resolve_pointer(c, ref);
    if (!target) {
        free(esc);
        return NULL;
    }
    char **nr = realloc(c->resolving, (c->n_resolving + 1) * sizeof *nr);
    if (!nr) {
        free(esc);
        fail(c, RP_ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->resolving = nr;
    c->resolving[c->n_resolving++] = (char *)ref;
    const char *got = visit(c, target, esc);
    c->n_resolving--;
    free(esc);
    if (!got) return NULL;
    return add_rule(c, rname, rp_strdup(got));
}

static const char *visit_union(conv *c, const json_t *alts, const char *name, const char *rname) {
    rp_buf b = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < json_array_size(alts); i++) {
        char part[32];
        snprintf(part, sizeof part, "%zu", i);
        char *sn = sub_name(name, part);
        const char *r = sn ? visit(c, json_array_get(alts, i), sn) : NULL;
        free(sn);
        ok = r && (!i || rp_buf_printf(&b, " | ")) && rp_buf_printf(&b, "%s", r);
    }
    if (!json_array_size(alts))
        return fail(c, RP_ERR_INVALID_ARG, "anyOf / oneOf needs alternatives"), NULL;
    char *body = finish(&b, ok);
    if (!body) return NULL;
    return add_rule(c, rname, body);
}

/* A JSON string that is none of names[0..n): a trie over them (llama.cpp's
 * scheme: at each node, a listed next character continues, any other ends the
 * match early and lets the key go on freely). */
static bool not_strings_node(conv *c, rp_buf *b, const char *const *names, size_t n, size_t depth,
                             const char *char_rule) {
    /* the distinct next characters among names that continue past depth */
    bool ok = true, first = true;
    rp_buf rejects = {0};
    for (size_t i = 0; i < n && ok; i++) {
        size_t len = strlen(names[i]);
        if (len <= depth) continue;
        char ch = names[i][depth];
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = strlen(names[k]) > depth && names[k][depth] == ch &&
                   !memcmp(names[k], names[i], depth);
        if (seen) continue;
        /* the names sharing this prefix and character */
        const char **sub = malloc(n * sizeof *sub);
        if (!sub) return fail(c, RP_ERR_NOMEM, "out of memory");
        size_t m = 0;
        bool ends_here = false, more = false;
        for (size_t k = 0; k < n; k++)
            if (strlen(names[k]) > depth && names[k][depth] == ch &&
                !memcmp(names[k], names[i], depth)) {
                sub[m++] = names[k];
                if (strlen(names[k]) == depth + 1)
                    ends_here = true;
                else
                    more = true;
            }
        uint32_t cp = (unsigned char)ch;
        ok = (first || rp_buf_printf(b, " | ")) && rp_buf_printf(b, "[") && class_char(b, cp) &&
             rp_buf_printf(b, "]");
        ok = ok && class_char(&rejects, cp);
        first = false;
        if (more) {
            ok = ok && rp_buf_printf(b, " (") &&
                 not_strings_node(c, b, sub, m, depth + 1, char_rule);
            /* the name itself ends here: going on with any character is fine */
            if (ends_here) ok = ok && rp_buf_printf(b, " | %s+", char_rule);
            ok = ok && rp_buf_printf(b, ")");
            if (!ends_here) ok = ok && rp_buf_printf(b, "?");
        } else {
            ok = ok && rp_buf_printf(b, " %s+", char_rule);
        }
        free(sub);
    }
    if (!first && ok)
        ok = rp_buf_printf(b, " | [^\"%.*s] %s*", (int)rejects.len,
                           rejects.data ? rejects.data : "", char_rule);
    rp_buf_free(&rejects);
    return ok;
}

static const char *not_strings(conv *c, const char *name, const char *const *names, size_t n) {
    const char *ch = primitive(c, "char");
    if (!ch) return NULL;
    rp_buf b = {0};
    bool empty_listed = false;
    for (size_t i = 0; i < n; i++) empty_listed |= !names[i][0];
    bool ok = rp_buf_printf(&b, "[\"] ( ") && not_strings_node(c, &b, names, n, 0, ch) &&
              rp_buf_printf(&b, " )");
    if (ok && !empty_listed) ok = rp_buf_printf(&b, "?");
    ok = ok && rp_buf_printf(&b, " [\"]");
    char *body = finish(&b, ok);
    if (!body) return NULL;
    return add_rule(c, name, body);
}

typedef struct prop {
    const char *name;
    const json_t *schema;
    bool required;
    const char *kv; /* rule name */
} prop;

/* optional[k..] as llama.cpp writes them: the first present one, then each
 * later one optionally, in order ("*" = additional properties, any number). */
static bool optional_chain(conv *c, rp_buf *b, const prop *opt, size_t n, size_t k,
                           bool first_optional, const char *name) {
    const prop *p = &opt[k];
    bool star = !p->name;
    bool ok;
    if (first_optional)
        ok = rp_buf_printf(b, "( \",\" space %s )%c", p->kv, star ? '*' : '?');
    else
        ok = rp_buf_printf(b, "%s", p->kv) &&
             (!star || rp_buf_printf(b, " ( \",\" space %s )*", p->kv));
    if (ok && k + 1 < n) {
        rp_buf rest = {0};
        bool rok = optional_chain(c, &rest, opt, n, k + 1, true, name);
        char *body = finish(&rest, rok);
        char *rn = body ? dupf("%s%s%s-rest", name, *name ? "-" : "", star ? "additional" : p->name)
                        : NULL;
        const char *r = rn ? add_rule(c, rn, body) : NULL;
        if (!rn) free(body);
        free(rn);
        ok = r && rp_buf_printf(b, " %s", r);
    }
    return ok;
}

static const char *build_object(conv *c, prop *props, size_t n, const json_t *additional,
                                const char *name, const char *rname) {
    const char *sp = primitive(c, "space");
    if (!sp) return NULL;
    for (size_t i = 0; i < n; i++) {
        char *pn = sub_name(name, props[i].name);
        const char *vr = pn ? visit(c, props[i].schema, pn) : NULL;
        if (!vr) {
            free(pn);
            return NULL;
        }
        json_t *key = json_string(props[i].name);
        char *lit = key ? json_literal(key) : NULL;
        json_decref(key);
        char *kvn = dupf("%s-kv", pn);
        char *body = lit ? dupf("%s space \":\" space %s", lit, vr) : NULL;
        free(lit);
        props[i].kv = kvn && body ? add_rule(c, kvn, body) : NULL;
        if (!kvn) free(body);
        free(kvn);
        free(pn);
        if (!props[i].kv) return NULL;
    }
    prop star = {0};
    if (additional) {
        char *sn = sub_name(name, "additional");
        char *vn = sn ? dupf("%s-value", sn) : NULL;
        const char *vr = !vn ? NULL
                         : json_is_true(additional) ||
                                 (json_is_object(additional) && !json_object_size(additional))
                             ? primitive(c, "value")
                             : visit(c, additional, vn);
        const char *kr = NULL;
        if (vr) {
            if (!n) {
                kr = primitive(c, "string");
            } else {
                const char **names = malloc(n * sizeof *names);
                char *kn = dupf("%s-k", sn);
                if (names && kn) {
                    for (size_t i = 0; i < n; i++) names[i] = props[i].name;
                    kr = not_strings(c, kn, names, n);
                }
                free(names);
                free(kn);
            }
        }
        char *kvn = sn ? dupf("%s-kv", sn) : NULL;
        star.kv = kr && kvn ? add_rule(c, kvn, dupf("%s \":\" space %s", kr, vr)) : NULL;
        free(kvn);
        free(vn);
        free(sn);
        if (!star.kv) return c->status ? NULL : (fail(c, RP_ERR_NOMEM, "out of memory"), NULL);
    }
    size_t n_req = 0, n_opt = 0;
    prop *opt = malloc((n + 1) * sizeof *opt);
    if (!opt) return fail(c, RP_ERR_NOMEM, "out of memory"), NULL;
    rp_buf b = {0};
    bool ok = rp_buf_printf(&b, "\"{\" space ");
    for (size_t i = 0; i < n && ok; i++) {
        if (!props[i].required) {
            opt[n_opt++] = props[i];
            continue;
        }
        ok = (!n_req || rp_buf_printf(&b, " \",\" space ")) && rp_buf_printf(&b, "%s", props[i].kv);
        n_req++;
    }
    if (additional) opt[n_opt++] = star;
    if (!n_req && !n_opt) {
        free(opt);
        rp_buf_free(&b);
        return add_rule(c, rname, rp_strdup("\"{\" space \"}\""));
    }
    if (n_opt && ok) {
        ok = rp_buf_printf(&b, " (");
        if (n_req) ok = ok && rp_buf_printf(&b, " \",\" space ( ");
        for (size_t i = 0; i < n_opt && ok; i++)
            ok = (!i || rp_buf_printf(&b, " | ")) &&
                 optional_chain(c, &b, opt, n_opt, i, false, name);
        if (n_req) ok = ok && rp_buf_printf(&b, " )");
        ok = ok && rp_buf_printf(&b, " )?");
    }
    ok = ok && rp_buf_printf(&b, " space \"}\"");
    free(opt);
    char *body = finish(&b, ok);
    if (!body) return c->status ? NULL : (fail(c, RP_ERR_NOMEM, "out of memory"), NULL);
    return add_rule(c, rname, body);
}

static bool in_required(const json_t *req, const char *key) {
    size_t i;
    const json_t *v;
    json_array_foreach(req, i,
                       v) if (json_is_string(v) && !strcmp(json_string_value(v), key)) return true;
    return false;
}

/* Collects the properties of an object schema (following $refs) into *props. */
static bool collect_props(conv *c, const json_t *s, bool required, prop **props, size_t *n,
                          size_t *cap) {
    const json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref)) {
        const json_t *t = resolve_pointer(c, json_string_value(ref));
        return t && collect_props(c, t, required, props, n, cap);
    }
    const json_t *pr = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)pr, k, v) {
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 8;
            prop *np = realloc(*props, *cap * sizeof *np);
            if (!np) return fail(c, RP_ERR_NOMEM, "out of memory");
            *props = np;
        }
        (*props)[(*n)++] = (prop){k, v, required && in_required(req, k), NULL};
    }
    return true;
}

static const char *visit_all_of(conv *c, const json_t *all, const char *name, const char *rname) {
    prop *props = NULL;
    size_t n = 0, cap = 0;
    /* enums: the values every component lists */
    json_t *common = NULL;
    size_t n_enum = 0;
    size_t i;
    const json_t *comp;
    json_array_foreach(all, i, comp) {
        const json_t *any = json_object_get(comp, "anyOf");
        if (json_is_array(any)) {
            size_t k;
            const json_t *alt;
            json_array_foreach(any, k,
                               alt) if (!collect_props(c, alt, false, &props, &n, &cap)) goto fail_;
        } else if (!collect_props(c, comp, true, &props, &n, &cap)) {
            goto fail_;
        }
        const json_t *en = json_object_get(comp, "enum");
        if (json_is_array(en)) {
            n_enum++;
            if (!common) {
                common = json_deep_copy(en);
            } else {
                for (size_t k = json_array_size(common); k-- > 0;) {
                    bool found = false;
                    for (size_t m = 0; m < json_array_size(en) && !found; m++)
                        found = json_equal(json_array_get(common, k), json_array_get(en, m));
                    if (!found) json_array_remove(common, k);
                }
            }
        }
    }
    if (n_enum == json_array_size(all) && common && json_array_size(common)) {
        rp_buf b = {0};
        bool ok = rp_buf_printf(&b, "(");
        for (size_t k = 0; k < json_array_size(common) && ok; k++) {
            char *lit = json_literal(json_array_get(common, k));
            ok = lit && (!k || rp_buf_printf(&b, " | ")) && rp_buf_printf(&b, "%s", lit);
            free(lit);
        }
        ok = ok && rp_buf_printf(&b, ")");
        json_decref(common);
        free(props);
        char *body = finish(&b, ok);
        return body ? add_rule(c, rname, body) : (fail(c, RP_ERR_NOMEM, "out of memory"), NULL);
    }
    json_decref(common);
    const char *r = build_object(c, props, n, NULL, name, rname);
    free(props);
    return r;
fail_:
    json_decref(common);
    free(props);
    return NULL;
}

static int64_t int_of(const json_t *v, bool *ok) {
    *ok = true;
    if (json_is_integer(v)) return (int64_t)json_integer_value(v);
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == (double)(int64_t)d) return (int64_t)d;
    }
    *ok = false;
    return 0;
}

static const char *visit_string(conv *c, const json_t *s, const char *rname) {
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (json_is_string(pat)) return visit_pattern(c, rname, json_string_value(pat));
    if (json_is_string(fmt)) {
        const char *f = json_string_value(fmt);
        if (!strcmp(f, "uuid")) return primitive_as(c, rname, "uuid");
        if (!strcmp(f, "date")) return primitive_as(c, rname, "date-string");
        if (!strcmp(f, "time")) return primitive_as(c, rname, "time-string");
        if (!strcmp(f, "date-time")) return primitive_as(c, rname, "date-time-string");
        /* other formats (email, uri, ...): any string, as llama.cpp */
    }
    const json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
    if (mn || mx) {
        bool ok1 = true, ok2 = true;
        int64_t lo = mn ? int_of(mn, &ok1) : 0, hi = mx ? int_of(mx, &ok2) : -1;
        if (!ok1 || !ok2 || lo < 0 || (mx && hi < lo) || lo > 100000 || hi > 100000)
            return fail(c, RP_ERR_INVALID_ARG,
                        "minLength / maxLength must be integers with minLength <= maxLength <= "
                        "100000"),
                   NULL;
        const char *ch = primitive(c, "char");
        if (!ch) return NULL;
        char *body;
        if (!mx)
            body = lo == 0   ? dupf("\"\\\"\" %s* \"\\\"\"", ch)
                   : lo == 1 ? dupf("\"\\\"\" %s+ \"\\\"\"", ch)
                             : dupf("\"\\\"\" %s{%lld,} \"\\\"\"", ch, (long long)lo);
        else if (hi == 0)
            body = rp_strdup("\"\\\"\" \"\\\"\"");
        else
            body = dupf("\"\\\"\" %s{%lld,%lld} \"\\\"\"", ch, (long long)lo, (long long)hi);
        return add_rule(c, rname, body);
    }
    return primitive_as(c, rname, "string");
}

static const char *visit_integer(conv *c, const json_t *s, const char *rname) {
    const json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    const json_t *emn = json_object_get(s, "exclusiveMinimum"),
                 *emx = json_object_get(s, "exclusiveMaximum");
    bool has_lo = false, has_hi = false, ok = true;
    int64_t lo = 0, hi = 0;
    if (mn && json_is_number(mn)) {
        double d = json_number_value(mn);
        lo = (int64_t)ceil(d);
        has_lo = true;
        if (json_is_true(emn) && (double)lo == d) lo++; /* draft 4: a boolean */
    }
    if (emn && json_is_number(emn)) {
        double d = json_number_value(emn);
        int64_t e = (int64_t)floor(d) + 1;
        if (!has_lo || e > lo) lo = e;
        has_lo = true;
    }
    if (mx && json_is_number(mx)) {
        double d = json_number_value(mx);
        hi = (int64_t)floor(d);
        has_hi = true;
        if (json_is_true(emx) && (double)hi == d) hi--;
    }
    if (emx && json_is_number(emx)) {
        double d = json_number_value(emx);
        int64_t e = (int64_t)ceil(d) - 1;
        if (!has_hi || e < hi) hi = e;
        has_hi = true;
    }
    if (!has_lo && !has_hi) return primitive_as(c, rname, "integer");
    const int64_t lim = 999999999999999LL; /* 15 digits: the grammar's own limit */
    if ((has_lo && (lo < -lim || lo > lim)) || (has_hi && (hi < -lim || hi > lim)))
        return fail(c, RP_ERR_UNSUPPORTED, "integer bounds beyond 15 digits"), NULL;
    if (has_lo && has_hi && hi < lo)
        return fail(c, RP_ERR_INVALID_ARG, "integer minimum above its maximum"), NULL;
    rp_buf b = {0};
    ok = rp_buf_printf(&b, "(") && int_range(&b, has_lo, lo, has_hi, hi) && rp_buf_printf(&b, ")");
    char *body = finish(&b, ok);
    return body ? add_rule(c, rname, body) : (fail(c, RP_ERR_NOMEM, "out of memory"), NULL);
}

static const char *visit_array(conv *c, const json_t *s, const char *name, const char *rname) {
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    const char *sp = primitive(c, "space");
    if (!sp) return NULL;
    if (json_is_array(prefix) || json_is_array(items)) {
        const json_t *tuple = json_is_array(prefix) ? prefix : items;
        rp_buf b = {0};
        bool ok = rp_buf_printf(&b, "\"[\" space ");
        for (size_t i = 0; i < json_array_size(tuple) && ok; i++) {
            char part[40];
            snprintf(part, sizeof part, "tuple-%zu", i);
            char *sn = sub_name(name, part);
            const char *r = sn ? visit(c, json_array_get(tuple, i), sn) : NULL;
            free(sn);
            ok = r && (!i || rp_buf_printf(&b, " \",\" space ")) && rp_buf_printf(&b, "%s", r);
        }
        ok = ok && rp_buf_printf(&b, " space \"]\"");
        char *body = finish(&b, ok);
        return body ? add_rule(c, rname, body)
                    : (c->status ? NULL : (fail(c, RP_ERR_NOMEM, "out of memory"), NULL));
    }
    bool ok1 = true, ok2 = true;
    const json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
    int64_t lo = mn ? int_of(mn, &ok1) : 0, hi = mx ? int_of(mx, &ok2) : -1;
    if (!ok1 || !ok2 || lo < 0 || (mx && hi < lo) || lo > 10000 || hi > 10000)
        return fail(c, RP_ERR_INVALID_ARG,
                    "minItems / maxItems must be integers with minItems <= maxItems <= 10000"),
               NULL;
    bool any_items =
        !items || json_is_true(items) || (json_is_object(items) && !json_object_size(items));
    if (any_items && lo == 0 && hi < 0) return primitive_as(c, rname, "array");
    char *in = sub_name(name, "item");
    const char *item = in ? (any_items ? primitive(c, "value") : visit(c, items, in)) : NULL;
    free(in);
    if (!item) return NULL;
    char *body;
    if (hi == 0)
        body = rp_strdup("\"[\" space \"]\"");
    else {
        /* item ("," space item){lo-1, hi-1}, optional as a whole when lo == 0 */
        char rep[64];
        int64_t rlo = lo ? lo - 1 : 0, rhi = hi < 0 ? -1 : hi - 1;
        if (rhi == 0)
            rep[0] = 0;
        else if (rhi < 0)
            snprintf(rep, sizeof rep,
                     rlo == 0   ? " (\",\" space %%s)*"
                     : rlo == 1 ? " (\",\" space %%s)+"
                                : " (\",\" space %%s){%lld,}",
                     (long long)rlo);
        else if (rlo == rhi)
            snprintf(rep, sizeof rep, " (\",\" space %%s){%lld}", (long long)rlo);
        else
            snprintf(rep, sizeof rep, " (\",\" space %%s){%lld,%lld}", (long long)rlo,
                     (long long)rhi);
        char *seq;
        if (rep[0]) {
            char *tail = dupf(rep, item); /* the format holds only %s and literals */
            seq = tail ? dupf("%s%s", item, tail) : NULL;
            free(tail);
        } else {
            seq = rp_strdup(item);
        }
        body = seq ? (lo == 0 ? dupf("\"[\" space (%s)? space \"]\"", seq)
                              : dupf("\"[\" space %s space \"]\"", seq))
                   : NULL;
        free(seq);
    }
    return add_rule(c, rname, body);
}

static const char *visit_type(conv *c, const json_t *s, const char *type, const char *name,
                              const char *rname) {
    if (!strcmp(type, "object")) {
        const json_t *pr = json_object_get(s, "properties"),
                     *add = json_object_get(s, "additionalProperties");
        if ((!pr || !json_object_size(pr)) && !json_is_false(add)) {
            if (!add || json_is_true(add) || (json_is_object(add) && !json_object_size(add)))
                return primitive_as(c, rname, "object");
        }
        prop *props = NULL;
        size_t n = 0, cap = 0;
        const char *r = NULL;
        if (collect_props(c, s, true, &props, &n, &cap)) {
            /* additionalProperties: absent or false = none (llama.cpp's default) */
            const json_t *extra = add && !json_is_false(add) ? add : NULL;
            r = build_object(c, props, n, extra, name, rname);
        }
        free(props);
        return r;
    }
    if (!strcmp(type, "array")) return visit_array(c, s, name, rname);
    if (!strcmp(type, "string")) return visit_string(c, s, rname);
    if (!strcmp(type, "integer")) return visit_integer(c, s, rname);
    if (!strcmp(type, "number")) return primitive_as(c, rname, "number");
    if (!strcmp(type, "boolean")) return primitive_as(c, rname, "boolean");
    if (!strcmp(type, "null")) return primitive_as(c, rname, "null");
    fail(c, RP_ERR_INVALID_ARG, "unknown type \"%.40s\" (at %s)", type, *name ? name : "the root");
    return NULL;
}

static const char *visit_inner(conv *c, const json_t *s, const char *name, const char *rname) {
    if (json_is_true(s)) return primitive_as(c, rname, "value");
    if (json_is_false(s))
        return fail(c, RP_ERR_UNSUPPORTED, "the schema 'false' (at %s) matches nothing",
                    *name ? name : "the root"),
               NULL;
    if (!json_is_object(s))
        return fail(c, RP_ERR_INVALID_ARG, "a schema must be an object or a boolean (at %s)",
                    *name ? name : "the root"),
               NULL;
    const json_t *ref = json_object_get(s, "$ref"), *any = json_object_get(s, "anyOf"),
                 *one = json_object_get(s, "oneOf");
    const json_t *all = json_object_get(s, "allOf"), *cnst = json_object_get(s, "const"),
                 *en = json_object_get(s, "enum");
    const json_t *type = json_object_get(s, "type");
    if (json_is_string(ref)) return visit_ref(c, json_string_value(ref), rname);
    if (json_is_array(any) || json_is_array(one))
        return visit_union(c, json_is_array(any) ? any : one, name, rname);
    if (json_is_array(all)) return visit_all_of(c, all, name, rname);
    if (cnst) {
        char *lit = json_literal(cnst);
        return lit ? add_rule(c, rname, lit) : (fail(c, RP_ERR_NOMEM, "out of memory"), NULL);
    }
    if (json_is_array(en)) {
        if (!json_array_size(en))
            return fail(c, RP_ERR_INVALID_ARG, "an empty enum matches nothing"), NULL;
        rp_buf b = {0};
        bool ok = rp_buf_printf(&b, "(");
        for (size_t i = 0; i < json_array_size(en) && ok; i++) {
            char *lit = json_literal(json_array_get(en, i));
            ok = lit && (!i || rp_buf_printf(&b, " | ")) && rp_buf_printf(&b, "%s", lit);
            free(lit);
        }
        ok = ok && rp_buf_printf(&b, ")");
        char *body = finish(&b, ok);
        return body ? add_rule(c, rname, body) : (fail(c, RP_ERR_NOMEM, "out of memory"), NULL);
    }
    if (json_is_array(type)) {
        /* a list of types: each one as an alternative of the same schema */
        json_t *alts = json_array();
        bool ok = alts != NULL;
        for (size_t i = 0; ok && i < json_array_size(type); i++) {
            json_t *one_t = json_copy((json_t *)s);
            ok = one_t && !json_object_set(one_t, "type", json_array_get(type, i)) &&
                 !json_array_append_new(alts, one_t);
        }
        const char *r =
            ok ? visit_union(c, alts, name, rname) : (fail(c, RP_ERR_NOMEM, "out of memory"), NULL);
        json_decref(alts);
        return r;
    }
    if (json_is_string(type)) return visit_type(c, s, json_string_value(type), name, rname);
    if (type)
        return fail(c, RP_ERR_INVALID_ARG, "\"type\" must be a string or a list (at %s)",
                    *name ? name : "the root"),
               NULL;
    /* no type: infer it from the keywords, as llama.cpp does */
    if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties"))
        return visit_type(c, s, "object", name, rname);
    if (json_object_get(s, "items") || json_object_get(s, "prefixItems"))
        return visit_type(c, s, "array", name, rname);
    if (json_object_get(s, "pattern") || json_object_get(s, "minLength") ||
        json_object_get(s, "maxLength") || json_object_get(s, "format"))
        return visit_type(c, s, "string", name, rname);
    return primitive_as(c, rname, "value");
}

static const char *visit(conv *c, const json_t *s, const char *name) {
    if (c->status) return NULL;
    if (++c->depth > MAX_DEPTH) {
        fail(c, RP_ERR_UNSUPPORTED, "schema nested more than %d deep", MAX_DEPTH);
        c->depth--;
        return NULL;
    }
    char *rname = schema_rule_name(name);
    const char *r = rname ? visit_inner(c, s, name, rname) : NULL;
    if (!rname) fail(c, RP_ERR_NOMEM, "out of memory");
    free(rname);
    c->depth--;
    return r;
}

static int cmp_rules(const void *a, const void *b) {
    return strcmp(((const rule *)a)->name, ((const rule *)b)->name);
}

rp_status rp_json_schema_to_grammar(const char *schema_json, char **gbnf) {
    *gbnf = NULL;
    if (!schema_json) return rp_fail(RP_ERR_INVALID_ARG, "JSON schema: no schema");
    json_error_t e;
    json_t *root = json_loads(schema_json, JSON_DECODE_ANY, &e);
    if (!root)
        return rp_fail(RP_ERR_INVALID_ARG, "JSON schema: not valid JSON (line %d, column %d: %s)",
                       e.line, e.column, e.text);
    conv c = {.root = root};
    const char *r = visit(&c, root, "");
    rp_status st = c.status;
    if (!r && !st) st = rp_fail(RP_ERR_INTERNAL, "JSON schema: conversion failed");
    if (!st) {
        if (c.n > 1) qsort(c.rules, c.n, sizeof *c.rules, cmp_rules);
        rp_buf b = {0};
        bool ok = true;
        for (size_t i = 0; i < c.n && ok; i++)
            ok = rp_buf_printf(&b, "%s ::= %s\n", c.rules[i].name, c.rules[i].body);
        char *text = finish(&b, ok);
        if (!text) st = rp_fail(RP_ERR_NOMEM, "JSON schema: out of memory");
        *gbnf = text;
    }
    for (size_t i = 0; i < c.n; i++) {
        free(c.rules[i].name);
        free(c.rules[i].body);
    }
    free(c.rules);
    free(c.resolving);
    json_decref(root);
    if (!st) {
        /* what the converter writes must parse */
        rp_status v = rp_grammar_check(*gbnf, NULL);
        if (v) {
            st = rp_fail_prefix(RP_ERR_INTERNAL,
                                "JSON schema: the generated grammar does not parse: ");
            free(*gbnf);
            *gbnf = NULL;
        }
    }
    return st;
}

const char *rp_grammar_json(void) {
    return "root ::= object\n"
           "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
           "object ::= \"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* )? "
           "\"}\" ws\n"
           "array ::= \"[\" ws ( value ( \",\" ws value )* )? \"]\" ws\n"
           "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" "
           "[0-9a-fA-F]{4} ) )* \"\\\"\" ws\n"
           "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? "
           "[0-9]{1,16} )? ws\n"
           "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
}
