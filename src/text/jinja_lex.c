/* Jinja lexer: template source -> tokens, with Jinja2's whitespace control as
 * transformers configures it (trim_blocks and lstrip_blocks on,
 * keep_trailing_newline off):
 *
 *   - newlines are normalized to "\n" and one trailing newline is dropped;
 *   - `{%-` / `{{-` / `{#-` strip all whitespace before the tag, `-%}` /
 *     `-}}` / `-#}` all whitespace after it;
 *   - trim_blocks: the first newline after `%}` or `#}` is removed (`+%}` keeps it);
 *   - lstrip_blocks: spaces and tabs from the start of a line up to `{%` or `{#`
 *     are removed when nothing else is on the line before the tag (`{%+` keeps them);
 *   - inside a tag, `%}` / `}}` only end it when brackets are balanced.
 *
 * Errors are RP_ERR_FORMAT with the line and column. */
#include "text/jinja.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    const char *s; /* normalized source */
    size_t n, pos;
    size_t *line_off; /* offsets where lines start */
    size_t n_lines;
    jj_arena *a;
    jj_tok *t;
    size_t nt, cap;
    bool line_starting;
    char brackets[64];
    int depth;
} lexer;

static void line_col(const lexer *L, size_t off, int *line, int *col) {
    size_t lo = 0, hi = L->n_lines;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (L->line_off[mid] <= off)
            lo = mid;
        else
            hi = mid;
    }
    *line = (int)lo + 1;
    *col = (int)(off - L->line_off[lo]) + 1;
}

static rp_status lex_fail(const lexer *L, size_t off, const char *what) {
    int line, col;
    line_col(L, off, &line, &col);
    return rp_fail(RP_ERR_FORMAT, "chat template line %d, column %d: %s", line, col, what);
}

static bool push(lexer *L, jj_tok_kind k, size_t off, const char *p, size_t n) {
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jj_tok *t = jj_alloc(L->a, cap * sizeof *t);
        if (!t) return false;
        if (L->nt) memcpy(t, L->t, L->nt * sizeof *t);
        L->t = t;
        L->cap = cap;
    }
    jj_tok *t = &L->t[L->nt++];
    memset(t, 0, sizeof *t);
    t->kind = (uint8_t)k;
    line_col(L, off, &t->line, &t->col);
    t->p = p;
    t->n = n;
    return true;
}

static size_t skip_space(const lexer *L, size_t p) {
    size_t k;
    while (p < L->n && (k = jj_space_len(L->s + p, L->n - p))) p += k;
    return p;
}

/* Whether s[b..e) is one or more whitespace characters. */
static bool all_space(const char *s, size_t b, size_t e) {
    if (b >= e) return false;
    size_t k;
    while (b < e && (k = jj_space_len(s + b, e - b))) b += k;
    return b == e;
}

/* The data before a tag, after the tag's whitespace control: sign is '-', '+'
 * or 0; lstrip applies to blocks and comments (not to {{). */
static void data_before(lexer *L, size_t b, size_t *e, char sign, bool lstrip) {
    if (sign == '-') {
        size_t k;
        while (*e > b && (k = jj_space_len_back(L->s + b, *e - b))) *e -= k;
    } else if (sign != '+' && lstrip) {
        size_t l = *e;
        while (l > b && L->s[l - 1] != '\n') l--;
        bool after_nl = l > b; /* a newline inside the data */
        if ((after_nl || L->line_starting) && all_space(L->s, l, *e)) *e = l;
    }
}

static bool emit_data(lexer *L, size_t b, size_t e) {
    return e <= b || push(L, JT_DATA, b, L->s + b, e - b);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string literal's value, with Python's escapes (Jinja decodes literals with
 * "unicode-escape"): \n \t \r \\ \' \" \a \b \f \v, \ooo, \xhh, \uhhhh,
 * \Uhhhhhhhh, backslash-newline; any other backslash stays as it is. */
static rp_status unescape(lexer *L, size_t b, size_t e, jj_tok *t) {
    char *o = jj_alloc(L->a, e - b + 1);
    if (!o) return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
    size_t n = 0;
    for (size_t i = b; i < e; i++) {
        char c = L->s[i];
        if (c != '\\' || i + 1 >= e) {
            o[n++] = c;
            continue;
        }
        char x = L->s[++i];
        static const char simple_in[] = "ntr\\'\"abfv\n";
        static const char simple_out[] = "\n\t\r\\'\"\a\b\f\v";
        const char *q = strchr(simple_in, x);
        if (q && x) {
            if (x != '\n') o[n++] = simple_out[q - simple_in];
            continue;
        }
        if (x >= '0' && x <= '7') {
            uint32_t v = 0;
            int k = 0;
            while (k < 3 && i < e && L->s[i] >= '0' && L->s[i] <= '7')
                v = v * 8 + (uint32_t)(L->s[i++] - '0'), k++;
            i--;
            n += put_utf8(o + n, v);
            continue;
        }
        int digits = x == 'x' ? 2 : x == 'u' ? 4 : x == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                int h = i + 1 + (size_t)k < e ? hexval(L->s[i + 1 + (size_t)k]) : -1;
                if (h < 0)
                    return lex_fail(L, i - 1, "truncated \\x, \\u or \\U escape in a string");
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF) return lex_fail(L, i - 1, "escape beyond U+10FFFF in a string");
            i += (size_t)digits;
            /* escapes need room: \xhh is 4 bytes of source for at most 2 of output */
            n += put_utf8(o + n, v);
            continue;
        }
        if (x == 'N') return lex_fail(L, i - 1, "\\N{...} escapes are not supported");
        o[n++] = '\\';
        o[n++] = x;
    }
    o[n] = 0;
    t->p = o;
    t->n = n;
    return RP_OK;
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* digits with single underscores between them ("1_000"); returns the end. */
static size_t scan_digits(const lexer *L, size_t p) {
    size_t q = p;
    while (q < L->n && is_digit(L->s[q])) {
        q++;
        if (q + 1 < L->n && L->s[q] == '_' && is_digit(L->s[q + 1])) q++;
    }
    return q;
}

static rp_status lex_number(lexer *L, size_t *pp) {
    size_t p = *pp, e = scan_digits(L, p), f = e;
    bool is_float = false;
    if (f + 1 < L->n && L->s[f] == '.' && is_digit(L->s[f + 1])) {
        f = scan_digits(L, f + 1);
        is_float = true;
    }
    if (f < L->n && (L->s[f] == 'e' || L->s[f] == 'E')) {
        size_t g = f + 1;
        if (g < L->n && (L->s[g] == '+' || L->s[g] == '-')) g++;
        if (g < L->n && is_digit(L->s[g])) {
            f = scan_digits(L, g);
            is_float = true;
        }
    }
    char buf[64];
    size_t end = is_float ? f : e, k = 0;
    for (size_t i = p; i < end && k + 1 < sizeof buf; i++)
        if (L->s[i] != '_') buf[k++] = L->s[i];
    buf[k] = 0;
    if (end - p >= sizeof buf) return lex_fail(L, p, "number literal too long");
    if (!push(L, is_float ? JT_FLOAT : JT_INT, p, L->s + p, end - p))
        return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
    jj_tok *t = &L->t[L->nt - 1];
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        if (k > 1 && buf[0] == '0') return lex_fail(L, p, "leading zeros in an integer literal");
        uint64_t v = 0;
        for (size_t i = 0; i < k; i++) {
            uint64_t d = (uint64_t)(buf[i] - '0');
            if (v > ((uint64_t)INT64_MAX - d) / 10)
                return lex_fail(L, p, "integer literal out of range");
            v = v * 10 + d;
        }
        t->i = (int64_t)v;
    }
    *pp = end;
    return RP_OK;
}

static rp_status lex_string(lexer *L, size_t *pp) {
    size_t p = *pp;
    char q = L->s[p];
    size_t i = p + 1;
    while (i < L->n && L->s[i] != q) i += L->s[i] == '\\' && i + 1 < L->n ? 2 : 1;
    if (i >= L->n) return lex_fail(L, p, "unterminated string literal");
    if (!push(L, JT_STRING, p, NULL, 0))
        return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
    rp_status s = unescape(L, p + 1, i, &L->t[L->nt - 1]);
    *pp = i + 1;
    return s;
}

static rp_status lex_op(lexer *L, size_t *pp) {
    size_t p = *pp;
    static const char *const two[] = {"//", "**", "==", "!=", ">=", "<="};
    size_t len = 0;
    for (size_t k = 0; k < RP_ARRAY_LEN(two); k++)
        if (p + 1 < L->n && L->s[p] == two[k][0] && L->s[p + 1] == two[k][1]) len = 2;
    char c = L->s[p];
    if (!len) {
        if (!strchr("+-/*%~[](){}><=.:|,;", c) || !c) {
            char msg[64];
            snprintf(msg, sizeof msg, "unexpected character '%c' in a tag", c);
            if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7F)
                snprintf(msg, sizeof msg, "unexpected byte 0x%02X in a tag", (unsigned char)c);
            return lex_fail(L, p, msg);
        }
        len = 1;
        if (c == '(' || c == '[' || c == '{') {
            if (L->depth >= (int)sizeof L->brackets)
                return lex_fail(L, p, "brackets nested too deeply");
            L->brackets[L->depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (c == ')' || c == ']' || c == '}') {
            if (!L->depth) {
                char msg[32];
                snprintf(msg, sizeof msg, "unexpected '%c'", c);
                return lex_fail(L, p, msg);
            }
            char want = L->brackets[--L->depth];
            if (want != c) {
                char msg[48];
                snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", c, want);
                return lex_fail(L, p, msg);
            }
        }
    }
    if (!push(L, JT_OP, p, L->s + p, len))
        return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
    *pp = p + len;
    return RP_OK;
}

/* Tokens of one {% ... %} or {{ ... }} up to and including its end. */
static rp_status lex_tag(lexer *L, bool block, size_t *pp) {
    size_t p = *pp;
    L->depth = 0;
    for (;;) {
        if (p >= L->n)
            return lex_fail(L, p,
                            block ? "unexpected end of template, expected '%}'"
                                  : "unexpected end of template, expected '}}'");
        const char *s = L->s + p;
        size_t left = L->n - p;
        char close = block ? '%' : '}';
        if (!L->depth) {
            size_t end = 0, after = 0;
            if (block && left >= 3 && s[0] == '+' && s[1] == '%' && s[2] == '}') {
                end = 3;
                after = p + 3;
            } else if (left >= 3 && s[0] == '-' && s[1] == close && s[2] == '}') {
                end = 3;
                after = skip_space(L, p + 3);
            } else if (left >= 2 && s[0] == close && s[1] == '}') {
                end = 2;
                after = p + 2;
                if (block && after < L->n && L->s[after] == '\n') after++;
            }
            if (end) {
                if (!push(L, block ? JT_BLOCK_END : JT_VAR_END, p, s, end))
                    return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
                L->line_starting = after > p && L->s[after - 1] == '\n';
                *pp = after;
                return RP_OK;
            }
        }
        size_t k = jj_space_len(s, left);
        rp_status st = RP_OK;
        if (k) {
            p += k;
        } else if (is_digit(s[0])) {
            st = lex_number(L, &p);
        } else if (is_name_start(s[0])) {
            size_t e = p + 1;
            while (e < L->n && (is_name_start(L->s[e]) || is_digit(L->s[e]))) e++;
            if (!push(L, JT_NAME, p, s, e - p))
                return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
            p = e;
        } else if (s[0] == '\'' || s[0] == '"') {
            st = lex_string(L, &p);
        } else {
            st = lex_op(L, &p);
        }
        if (st) return st;
    }
}

/* A comment from after its "{#" to after its end; emits nothing. */
static rp_status lex_comment(lexer *L, size_t open, size_t *pp) {
    size_t p = *pp;
    for (;;) {
        const char *e = memmem(L->s + p, L->n - p, "#}", 2);
        if (!e) return lex_fail(L, open, "missing end of comment tag");
        size_t q = (size_t)(e - L->s), after;
        if (q > p && L->s[q - 1] == '-') {
            after = skip_space(L, q + 2);
        } else if (q > p && L->s[q - 1] == '+') {
            after = q + 2;
        } else {
            after = q + 2;
            if (after < L->n && L->s[after] == '\n') after++;
        }
        L->line_starting = L->s[after - 1] == '\n';
        *pp = after;
        return RP_OK;
    }
}

/* "{% raw %}" (with optional -/+ and spaces) at p? Sets *end past it and *sign. */
static bool raw_begin(const lexer *L, size_t p, const char *word, size_t *end, char *sign,
                      bool trim_nl) {
    size_t q = p + 2;
    *sign = 0;
    if (q < L->n && (L->s[q] == '-' || L->s[q] == '+')) *sign = L->s[q++];
    q = skip_space(L, q);
    size_t wl = strlen(word);
    if (q + wl > L->n || memcmp(L->s + q, word, wl)) return false;
    q = skip_space(L, q + wl);
    if (q + 3 <= L->n && L->s[q] == '-' && L->s[q + 1] == '%' && L->s[q + 2] == '}') {
        *end = skip_space(L, q + 3);
        return true;
    }
    if (trim_nl && q + 3 <= L->n && L->s[q] == '+' && L->s[q + 1] == '%' && L->s[q + 2] == '}') {
        *end = q + 3;
        return true;
    }
    if (q + 2 <= L->n && L->s[q] == '%' && L->s[q + 1] == '}') {
        *end = q + 2;
        if (trim_nl && *end < L->n && L->s[*end] == '\n') (*end)++;
        return true;
    }
    return false;
}

static rp_status lex_raw(lexer *L, size_t open, size_t *pp) {
    for (size_t p = *pp; p + 1 < L->n; p++) {
        if (L->s[p] != '{' || L->s[p + 1] != '%') continue;
        size_t end;
        char sign;
        if (!raw_begin(L, p, "endraw", &end, &sign, true)) continue;
        size_t e = p;
        data_before(L, *pp, &e, sign, true);
        if (!emit_data(L, *pp, e)) return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
        L->line_starting = L->s[end - 1] == '\n';
        *pp = end;
        return RP_OK;
    }
    return lex_fail(L, open, "missing end of raw directive");
}

/* Newlines to "\n", one trailing newline dropped. */
static char *normalize(jj_arena *a, const char *src, size_t len, size_t *n_out) {
    char *s = jj_alloc(a, len + 1);
    if (!s) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    *n_out = n;
    return s;
}

rp_status jj_lex(jj_arena *a, const char *src, size_t len, jj_tok **toks, size_t *n_toks) {
    lexer L = {.a = a, .line_starting = true};
    L.s = normalize(a, src, len, &L.n);
    if (!L.s) return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
    size_t nl = 1;
    for (size_t i = 0; i < L.n; i++) nl += L.s[i] == '\n';
    L.line_off = jj_alloc(a, nl * sizeof *L.line_off);
    if (!L.line_off) return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
    L.line_off[L.n_lines++] = 0;
    for (size_t i = 0; i < L.n; i++)
        if (L.s[i] == '\n') L.line_off[L.n_lines++] = i + 1;

    size_t pos = 0;
    while (pos < L.n) {
        size_t t = pos;
        while (t + 1 < L.n &&
               !(L.s[t] == '{' && (L.s[t + 1] == '{' || L.s[t + 1] == '%' || L.s[t + 1] == '#')))
            t++;
        if (t + 1 >= L.n) {
            if (!emit_data(&L, pos, L.n))
                return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
            break;
        }
        char kind = L.s[t + 1];
        char sign = t + 2 < L.n && (L.s[t + 2] == '-' || L.s[t + 2] == '+') ? L.s[t + 2] : 0;
        size_t raw_end;
        char raw_sign;
        bool raw = kind == '%' && raw_begin(&L, t, "raw", &raw_end, &raw_sign, false);
        if (raw) sign = raw_sign;
        size_t e = t;
        data_before(&L, pos, &e, sign, kind != '{');
        if (!emit_data(&L, pos, e)) return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
        L.line_starting = false;
        size_t p = t + 2 + (sign ? 1 : 0);
        rp_status s;
        if (raw) {
            p = raw_end;
            L.line_starting = L.s[p - 1] == '\n';
            s = lex_raw(&L, t, &p);
        } else if (kind == '#') {
            s = lex_comment(&L, t, &p);
        } else {
            if (!push(&L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, t, L.s + t, p - t))
                return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
            s = lex_tag(&L, kind == '%', &p);
        }
        if (s) return s;
        pos = p;
    }
    if (!push(&L, JT_EOF, L.n, L.s + L.n, 0))
        return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
    *toks = L.t;
    *n_toks = L.nt;
    return RP_OK;
}
