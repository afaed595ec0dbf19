/* Values of the Jinja interpreter: the arena, lists and dicts, equality and
 * truth with Python's rules, and the three ways a value becomes text: str()
 * (what {{ x }} prints), repr() (inside printed lists and dicts) and
 * json.dumps (transformers' tojson). */
#include "text/jinja.h"

#include "base/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena --------------------------------------------------------------- */

struct jj_chunk {
    jj_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

void *jj_alloc(jj_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->limit && (n > a->limit || a->used > a->limit - n)) return NULL;
    jj_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > ((size_t)64 << 10) ? n : ((size_t)64 << 10);
        c = malloc(sizeof *c + size);
        if (!c) return NULL;
        c->size = size;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void jj_arena_free(jj_arena *a) {
    for (jj_chunk *c = a->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- lists and dicts ------------------------------------------------------ */

jv jv_cstr(const char *s) {
    return jv_str(s, strlen(s));
}

static bool grow(jj_arena *a, void **p, size_t elem, size_t n, size_t *cap, size_t want) {
    if (want <= *cap) return true;
    size_t nc = *cap ? *cap * 2 : 4;
    while (nc < want) nc *= 2;
    void *q = jj_alloc(a, nc * elem);
    if (!q) return false;
    if (n) memcpy(q, *p, n * elem);
    *p = q;
    *cap = nc;
    return true;
}

bool jv_list_push_a(jj_arena *a, jlist *l, jv v) {
    void *p = l->v;
    if (!grow(a, &p, sizeof(jv), l->n, &l->cap, l->n + 1)) return false;
    l->v = p;
    l->v[l->n++] = v;
    return true;
}

jv *jv_dict_get(const jdict *d, jv key) {
    if (key.kind == JV_STR) return jv_dict_gets(d, key.u.s.p, key.u.s.n);
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->key[i], key)) return &d->val[i];
    return NULL;
}

jv *jv_dict_gets(const jdict *d, const char *k, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->key[i].kind == JV_STR && d->key[i].u.s.n == n && !memcmp(d->key[i].u.s.p, k, n))
            return &d->val[i];
    return NULL;
}

bool jv_dict_set_a(jj_arena *a, jdict *d, jv key, jv val) {
    jv *old = jv_dict_get(d, key);
    if (old) {
        *old = val;
        return true;
    }
    size_t cap = d->cap;
    void *k = d->key, *v = d->val;
    if (!grow(a, &k, sizeof(jv), d->n, &cap, d->n + 1)) return false;
    cap = d->cap;
    if (!grow(a, &v, sizeof(jv), d->n, &cap, d->n + 1)) return false;
    d->key = k;
    d->val = v;
    d->cap = cap;
    d->key[d->n] = key;
    d->val[d->n++] = val;
    return true;
}

/* An allocation of n bytes failed: the render's limit, or malloc. */
static _Noreturn void alloc_failed(jj_ctx *c, const jj_node *at, size_t n) {
    const jj_arena *a = c->arena;
    if (n + 16 > a->limit || a->used > a->limit - n - 16)
        jj_fail(c, at, RP_ERR_INVALID_ARG, "the template needs more than %zu MiB of memory",
                c->lim.max_bytes >> 20);
    jj_fail(c, at, RP_ERR_NOMEM, "out of memory");
}

void *jj_ctx_alloc(jj_ctx *c, const jj_node *at, size_t n) {
    void *p = jj_alloc(c->arena, n);
    if (!p) alloc_failed(c, at, n);
    return p;
}

jv jv_list_new(jj_ctx *c, size_t cap) {
    jv v = {.kind = JV_LIST};
    v.u.l = jj_ctx_alloc(c, NULL, sizeof *v.u.l);
    if (cap) {
        v.u.l->v = jj_ctx_alloc(c, NULL, cap * sizeof(jv));
        v.u.l->cap = cap;
    }
    return v;
}

jv jv_dict_new(jj_ctx *c, size_t cap) {
    jv v = {.kind = JV_DICT};
    v.u.d = jj_ctx_alloc(c, NULL, sizeof *v.u.d);
    if (cap) {
        v.u.d->key = jj_ctx_alloc(c, NULL, cap * sizeof(jv));
        v.u.d->val = jj_ctx_alloc(c, NULL, cap * sizeof(jv));
        v.u.d->cap = cap;
    }
    return v;
}

void jv_list_push(jj_ctx *c, jlist *l, jv v) {
    if (!jv_list_push_a(c->arena, l, v)) alloc_failed(c, NULL, 2 * l->cap * sizeof v);
}

void jv_dict_set(jj_ctx *c, jdict *d, jv key, jv val) {
    if (!jv_dict_set_a(c->arena, d, key, val)) alloc_failed(c, NULL, 2 * d->cap * sizeof val);
}

/* ---- Python semantics ------------------------------------------------------ */

bool jv_truthy(jv v) {
    switch (v.kind) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v.u.b;
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0;
    case JV_STR:
        return v.u.s.n != 0;
    case JV_LIST:
        return v.u.l->n != 0;
    case JV_DICT:
        return v.u.d->n != 0;
    default:
        return true;
    }
}

bool jv_is_num(jv v) {
    return v.kind == JV_BOOL || v.kind == JV_INT || v.kind == JV_FLOAT;
}

double jv_num(jv v) {
    return v.kind == JV_FLOAT  ? v.u.f
           : v.kind == JV_INT  ? (double)v.u.i
           : v.kind == JV_BOOL ? (double)v.u.b
                               : 0;
}

bool jv_equal(jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT)
            return (a.kind == JV_INT ? a.u.i : a.u.b) == (b.kind == JV_INT ? b.u.i : b.u.b);
        return jv_num(a) == jv_num(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case JV_LIST:
        if (a.u.l->tuple != b.u.l->tuple || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JV_DICT:
    case JV_NS:
        if (a.kind == JV_NS) return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jv_dict_get(b.u.d, a.u.d->key[i]);
            if (!o || !jv_equal(a.u.d->val[i], *o)) return false;
        }
        return true;
    case JV_FUNC:
        return a.u.fn == b.u.fn;
    case JV_LOOP:
        return a.u.loop == b.u.loop;
    default:
        return false;
    }
}

const char *jv_type_name(jv v) {
    switch (v.kind) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "str";
    case JV_LIST:
        return v.u.l->tuple ? "tuple" : "list";
    case JV_DICT:
        return "dict";
    case JV_NS:
        return "Namespace";
    case JV_FUNC:
        return "function";
    case JV_LOOP:
        return "LoopContext";
    }
    return "object";
}

/* ---- UTF-8 ------------------------------------------------------------------ */

size_t jj_utf8_len(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

size_t jj_utf8_offset(const char *p, size_t n, size_t i) {
    size_t b = 0;
    while (b < n && i) {
        b++;
        while (b < n && ((unsigned char)p[b] & 0xC0) == 0x80) b++;
        i--;
    }
    return b;
}

/* Code point at p (n bytes available), its length in *len; invalid bytes decode as themselves. */
static uint32_t utf8_decode(const char *p, size_t n, size_t *len) {
    const unsigned char *u = (const unsigned char *)p;
    if (u[0] < 0x80 || n < 2) {
        *len = 1;
        return u[0];
    }
    if ((u[0] & 0xE0) == 0xC0 && (u[1] & 0xC0) == 0x80) {
        *len = 2;
        return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    }
    if ((u[0] & 0xF0) == 0xE0 && n >= 3 && (u[1] & 0xC0) == 0x80 && (u[2] & 0xC0) == 0x80) {
        *len = 3;
        return ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    }
    if ((u[0] & 0xF8) == 0xF0 && n >= 4 && (u[1] & 0xC0) == 0x80 && (u[2] & 0xC0) == 0x80 &&
        (u[3] & 0xC0) == 0x80) {
        *len = 4;
        return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
               ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    }
    *len = 1;
    return u[0];
}

static bool is_py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t jj_space_len(const char *p, size_t n) {
    if (!n) return 0;
    size_t len;
    uint32_t c = utf8_decode(p, n, &len);
    return is_py_space(c) ? len : 0;
}

size_t jj_space_len_back(const char *p, size_t n) {
    for (size_t k = 1; k <= 4 && k <= n; k++) {
        if (k < n && ((unsigned char)p[n - k] & 0xC0) == 0x80) continue;
        return jj_space_len(p + n - k, k) == k ? k : 0;
    }
    return 0;
}

/* ---- text output -------------------------------------------------------------- */

void jj_out_put(jj_ctx *c, jj_out *o, const char *p, size_t n) {
    if (!n) return;
    if (n > c->lim.max_output || o->n > c->lim.max_output - n)
        jj_fail(c, NULL, RP_ERR_INVALID_ARG, "the template wrote more than %zu MiB of text",
                c->lim.max_output >> 20);
    if (o->cap - o->n < n) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap - o->n < n) {
            if (cap > SIZE_MAX / 4) jj_fail(c, NULL, RP_ERR_NOMEM, "template output too large");
            cap *= 2;
        }
        char *q = jj_ctx_alloc(c, NULL, cap);
        if (o->n) memcpy(q, o->p, o->n);
        o->p = q;
        o->cap = cap;
    }
    memcpy(o->p + o->n, p, n);
    o->n += n;
}

static void putc_(jj_ctx *c, jj_out *o, char ch) {
    jj_out_put(c, o, &ch, 1);
}

static void putf(jj_ctx *c, jj_out *o, const char *fmt, ...) RP_PRINTF(3, 4);
static void putf(jj_ctx *c, jj_out *o, const char *fmt, ...) {
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    jj_out_put(c, o, buf, (size_t)RP_MIN(RP_MAX(k, 0), (int)sizeof buf - 1));
}

int jj_format_float(double f, char *buf, size_t size) {
    if (isnan(f)) return snprintf(buf, size, "nan");
    if (isinf(f)) return snprintf(buf, size, f < 0 ? "-inf" : "inf");
    if (f == 0) return snprintf(buf, size, signbit(f) ? "-0.0" : "0.0");
    /* shortest digits that read back as f */
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e is "-d.ddde+XX": split into sign, digits, exponent */
    const char *q = e;
    bool neg = *q == '-';
    if (neg) q++;
    char digits[24];
    int nd = 0;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int exp = atoi(q + 1);
    char out[64];
    int k = 0;
    if (neg) out[k++] = '-';
    if (exp >= -4 && exp < 16) { /* Python's repr: fixed notation in this range */
        if (exp < 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = -1; i > exp; i--) out[k++] = '0';
            for (int i = 0; i < nd; i++) out[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) out[k++] = i < nd ? digits[i] : '0';
            out[k++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) out[k++] = digits[i];
            else
                out[k++] = '0';
        }
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        k += snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp < 0 ? '-' : '+',
                      exp < 0 ? -exp : exp);
    }
    out[k] = 0;
    return snprintf(buf, size, "%s", out);
}

static bool py_printable(uint32_t c) {
    if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
        (c >= 0x205F && c <= 0x2064))
        return false;
    if (c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xE000 && c <= 0xF8FF))
        return false;
    return true;
}

static void write_str_repr(jj_ctx *c, jj_out *o, const char *p, size_t n) {
    bool sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    char quote = sq && !dq ? '"' : '\'';
    putc_(c, o, quote);
    for (size_t i = 0; i < n;) {
        size_t len;
        uint32_t ch = utf8_decode(p + i, n - i, &len);
        if (ch == (uint32_t)quote || ch == '\\') {
            putc_(c, o, '\\');
            putc_(c, o, (char)ch);
        } else if (ch == '\n') {
            jj_out_put(c, o, "\\n", 2);
        } else if (ch == '\r') {
            jj_out_put(c, o, "\\r", 2);
        } else if (ch == '\t') {
            jj_out_put(c, o, "\\t", 2);
        } else if (!py_printable(ch)) {
            if (ch < 0x100)
                putf(c, o, "\\x%02x", (unsigned)ch);
            else
                putf(c, o, "\\u%04x", (unsigned)ch);
        } else {
            jj_out_put(c, o, p + i, len);
        }
        i += len;
    }
    putc_(c, o, quote);
}

/* None / bools / numbers as Python prints them (json: as JSON does). */
static void write_scalar(jj_ctx *c, jj_out *o, jv v, bool json) {
    char buf[64];
    switch (v.kind) {
    case JV_NONE:
        jj_out_put(c, o, json ? "null" : "None", 4);
        break;
    case JV_BOOL:
        if (json)
            jj_out_put(c, o, v.u.b ? "true" : "false", v.u.b ? 4 : 5);
        else
            jj_out_put(c, o, v.u.b ? "True" : "False", v.u.b ? 4 : 5);
        break;
    case JV_INT:
        putf(c, o, "%lld", (long long)v.u.i);
        break;
    case JV_FLOAT:
        if (json && isnan(v.u.f))
            jj_out_put(c, o, "NaN", 3);
        else if (json && isinf(v.u.f))
            jj_out_put(c, o, v.u.f < 0 ? "-Infinity" : "Infinity", v.u.f < 0 ? 9 : 8);
        else {
            jj_format_float(v.u.f, buf, sizeof buf);
            jj_out_put(c, o, buf, strlen(buf));
        }
        break;
    default:
        break;
    }
}

static void write_container(jj_ctx *c, jj_out *o, jv v) {
    if (++c->depth > c->lim.max_depth)
        jj_fail(c, NULL, JJ_ERR_TYPE, "value nested too deeply to print");
    if (v.kind == JV_LIST) {
        const jlist *l = v.u.l;
        putc_(c, o, l->tuple ? '(' : '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jj_out_put(c, o, ", ", 2);
            jv_write_repr(c, o, l->v[i]);
        }
        if (l->tuple && l->n == 1) putc_(c, o, ',');
        putc_(c, o, l->tuple ? ')' : ']');
    } else {
        const jdict *d = v.u.d;
        if (v.kind == JV_NS) jj_out_put(c, o, "<Namespace ", 11);
        putc_(c, o, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) jj_out_put(c, o, ", ", 2);
            jv_write_repr(c, o, d->key[i]);
            jj_out_put(c, o, ": ", 2);
            jv_write_repr(c, o, d->val[i]);
        }
        putc_(c, o, '}');
        if (v.kind == JV_NS) putc_(c, o, '>');
    }
    c->depth--;
}

void jv_write_repr(jj_ctx *c, jj_out *o, jv v) {
    switch (v.kind) {
    case JV_UNDEF:
        jj_out_put(c, o, "Undefined", 9);
        break;
    case JV_STR:
        write_str_repr(c, o, v.u.s.p, v.u.s.n);
        break;
    case JV_LIST:
    case JV_DICT:
    case JV_NS:
        write_container(c, o, v);
        break;
    case JV_FUNC:
        putf(c, o, "<function %s>", v.u.fn->name ? v.u.fn->name : "?");
        break;
    case JV_LOOP:
        jj_out_put(c, o, "<LoopContext>", 13);
        break;
    default:
        write_scalar(c, o, v, false);
    }
}

void jv_write_str(jj_ctx *c, jj_out *o, jv v) {
    if (v.kind == JV_STR)
        jj_out_put(c, o, v.u.s.p, v.u.s.n);
    else if (v.kind != JV_UNDEF)
        jv_write_repr(c, o, v);
}

jv jv_to_str(jj_ctx *c, jv v) {
    if (v.kind == JV_STR) return v;
    jj_out o = {0};
    jv_write_str(c, &o, v);
    return jv_str(o.p ? o.p : "", o.n);
}

/* ---- JSON (Python's json.dumps) -------------------------------------------- */

static void write_json_str(jj_ctx *c, jj_out *o, const char *p, size_t n, bool ascii) {
    putc_(c, o, '"');
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)p[i];
        const char *esc = ch == '"'    ? "\\\""
                          : ch == '\\' ? "\\\\"
                          : ch == '\n' ? "\\n"
                          : ch == '\r' ? "\\r"
                          : ch == '\t' ? "\\t"
                          : ch == '\b' ? "\\b"
                          : ch == '\f' ? "\\f"
                                       : NULL;
        if (esc) {
            jj_out_put(c, o, esc, 2);
            i++;
        } else if (ch < 0x20) {
            putf(c, o, "\\u%04x", ch);
            i++;
        } else if (ch >= 0x80 && ascii) {
            size_t len;
            uint32_t cp = utf8_decode(p + i, n - i, &len);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                putf(c, o, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                putf(c, o, "\\u%04x", cp);
            }
            i += len;
        } else {
            size_t j = i + 1;
            while (j < n && (unsigned char)p[j] >= 0x20 && p[j] != '"' && p[j] != '\\' &&
                   !(ascii && (unsigned char)p[j] >= 0x80))
                j++;
            jj_out_put(c, o, p + i, j - i);
            i = j;
        }
    }
    putc_(c, o, '"');
}

static void json_newline(jj_ctx *c, jj_out *o, const jj_json_opts *opt, int level) {
    putc_(c, o, '\n');
    for (int i = 0; i < level; i++) jj_out_put(c, o, opt->indent.p, opt->indent.n);
}

/* A dict key as json.dumps writes it (str keys; numbers, bools and None are
 * converted; anything else is a TypeError). */
static void write_json_key(jj_ctx *c, const jj_node *at, jj_out *o, jv k, const jj_json_opts *opt) {
    char buf[64];
    switch (k.kind) {
    case JV_STR:
        write_json_str(c, o, k.u.s.p, k.u.s.n, opt->ensure_ascii);
        return;
    case JV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)k.u.i);
        break;
    case JV_FLOAT:
        jj_format_float(k.u.f, buf, sizeof buf);
        break;
    case JV_BOOL:
        snprintf(buf, sizeof buf, "%s", k.u.b ? "true" : "false");
        break;
    case JV_NONE:
        snprintf(buf, sizeof buf, "null");
        break;
    default:
        jj_fail(c, at, JJ_ERR_TYPE, "tojson: keys must be str, int, float, bool or None, not %s",
                jv_type_name(k));
    }
    write_json_str(c, o, buf, strlen(buf), false);
}

static int cmp_keys(jj_ctx *c, const jj_node *at, jv a, jv b) {
    return jj_less(c, at, a, b) ? -1 : jj_less(c, at, b, a) ? 1 : 0;
}

void jv_write_json(jj_ctx *c, const jj_node *at, jj_out *o, jv v, const jj_json_opts *opt,
                   int level) {
    jj_step(c, at);
    switch (v.kind) {
    case JV_NONE:
    case JV_BOOL:
    case JV_INT:
    case JV_FLOAT:
        write_scalar(c, o, v, true);
        return;
    case JV_STR:
        write_json_str(c, o, v.u.s.p, v.u.s.n, opt->ensure_ascii);
        return;
    case JV_LIST:
    case JV_DICT:
        break;
    default:
        jj_fail(c, at, JJ_ERR_TYPE, "tojson: Object of type %s is not JSON serializable",
                jv_type_name(v));
    }
    if (++c->depth > c->lim.max_depth)
        jj_fail(c, at, JJ_ERR_TYPE, "tojson: value nested too deeply");
    size_t n = v.kind == JV_LIST ? v.u.l->n : v.u.d->n;
    putc_(c, o, v.kind == JV_LIST ? '[' : '{');
    if (n) {
        size_t *order = NULL;
        if (v.kind == JV_DICT && opt->sort_keys) {
            /* insertion sort of indices: dicts in templates are small */
            order = jj_ctx_alloc(c, at, n * sizeof *order);
            for (size_t i = 0; i < n; i++) {
                size_t j = i;
                while (j > 0 && cmp_keys(c, at, v.u.d->key[order[j - 1]], v.u.d->key[i]) > 0) {
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = i;
            }
        }
        for (size_t i = 0; i < n; i++) {
            if (i) jj_out_put(c, o, opt->item_sep.p, opt->item_sep.n);
            if (opt->pretty) json_newline(c, o, opt, level + 1);
            if (v.kind == JV_LIST) {
                jv_write_json(c, at, o, v.u.l->v[i], opt, level + 1);
            } else {
                size_t k = order ? order[i] : i;
                write_json_key(c, at, o, v.u.d->key[k], opt);
                jj_out_put(c, o, opt->key_sep.p, opt->key_sep.n);
                jv_write_json(c, at, o, v.u.d->val[k], opt, level + 1);
            }
        }
        if (opt->pretty) json_newline(c, o, opt, level);
    }
    putc_(c, o, v.kind == JV_LIST ? ']' : '}');
    c->depth--;
}

/* ---- errors and limits (used by every evaluator file) ----------------------- */

_Noreturn void jj_fail(jj_ctx *c, const jj_node *at, rp_status s, const char *fmt, ...) {
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at)
        snprintf(c->msg, sizeof c->msg, "chat template line %d, column %d: %s", at->line, at->col,
                 msg);
    else
        snprintf(c->msg, sizeof c->msg, "chat template: %s", msg);
    c->status = s;
    longjmp(c->jb, 1);
}

void jj_step(jj_ctx *c, const jj_node *at) {
    if (++c->steps > c->lim.max_steps)
        jj_fail(c, at, RP_ERR_INVALID_ARG,
                "the template ran more than %llu steps (a runaway loop?)",
                (unsigned long long)c->lim.max_steps);
}

_Noreturn void jj_undefined_error(jj_ctx *c, const jj_node *at, jv u) {
    if (u.u.s.n) jj_fail(c, at, JJ_ERR_TYPE, "%.*s", (int)RP_MIN(u.u.s.n, (size_t)300), u.u.s.p);
    jj_fail(c, at, JJ_ERR_TYPE, "a value is undefined");
}

jv jj_undef_msg(jj_ctx *c, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t n = (size_t)RP_MIN(RP_MAX(k, 0), (int)sizeof buf - 1);
    char *p = jj_ctx_alloc(c, NULL, n + 1);
    memcpy(p, buf, n);
    return jv_undef(p, n);
}

/* ---- iteration and ordering (Python semantics) ------------------------------ */

jv jj_iterable_to_list(jj_ctx *c, const jj_node *at, jv v) {
    switch (v.kind) {
    case JV_LIST:
        return v;
    case JV_UNDEF: {
        jv l = jv_list_new(c, 0);
        return l;
    }
    case JV_DICT: {
        jv l = jv_list_new(c, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) jv_list_push(c, l.u.l, v.u.d->key[i]);
        return l;
    }
    case JV_STR: {
        jv l = jv_list_new(c, v.u.s.n);
        for (size_t i = 0; i < v.u.s.n;) {
            size_t k = jj_utf8_offset(v.u.s.p + i, v.u.s.n - i, 1);
            jv_list_push(c, l.u.l, jv_str(v.u.s.p + i, k));
            i += k;
        }
        return l;
    }
    default:
        jj_fail(c, at, JJ_ERR_TYPE, "'%s' object is not iterable", jv_type_name(v));
    }
}

bool jj_less(jj_ctx *c, const jj_node *at, jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT)
            return (a.kind == JV_INT ? a.u.i : a.u.b) < (b.kind == JV_INT ? b.u.i : b.u.b);
        return jv_num(a) < jv_num(b);
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        size_t n = RP_MIN(a.u.s.n, b.u.s.n);
        int r = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
        return r < 0 || (r == 0 && a.u.s.n < b.u.s.n);
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i]))
                return jj_less(c, at, a.u.l->v[i], b.u.l->v[i]);
        return a.u.l->n < b.u.l->n;
    }
    if (a.kind == JV_UNDEF) jj_undefined_error(c, at, a);
    if (b.kind == JV_UNDEF) jj_undefined_error(c, at, b);
    jj_fail(c, at, JJ_ERR_TYPE, "'<' not supported between instances of '%s' and '%s'",
            jv_type_name(a), jv_type_name(b));
}
