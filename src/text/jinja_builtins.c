/* Jinja builtins: the filters, tests, global functions and Python methods
 * chat templates call, each with the semantics of Jinja2 3.1 / Python 3 (the
 * argument order and defaults of jinja2/filters.py and jinja2/tests.py;
 * transformers' own tojson, raise_exception, strftime_now, dict, namespace).
 *
 * Case mapping (upper, lower, title, capitalize) covers ASCII and Latin-1;
 * other letters are left as they are. */
#include "text/jinja.h"

#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- arguments ------------------------------------------------------------- */

/* Argument i (positional) or `name` (keyword); false when not given. */
static bool arg(const jj_args *a, size_t i, const char *name, jv *out) {
    if (i < a->n_pos) {
        *out = a->pos[i];
        return true;
    }
    size_t n = name ? strlen(name) : 0;
    for (size_t k = 0; name && k < a->n_kw; k++)
        if (a->kwname[k].n == n && !memcmp(a->kwname[k].p, name, n)) {
            *out = a->kw[k];
            return true;
        }
    return false;
}

static jv arg_or(const jj_args *a, size_t i, const char *name, jv def) {
    jv v;
    return arg(a, i, name, &v) ? v : def;
}

static jj_str need_str(jj_ctx *c, const jj_node *at, jv v, const char *what) {
    if (v.kind == JV_UNDEF) jj_undefined_error(c, at, v);
    if (v.kind != JV_STR)
        jj_fail(c, at, JJ_ERR_TYPE, "%s needs a string, not %s", what, jv_type_name(v));
    return (jj_str){v.u.s.p, v.u.s.n};
}

static int64_t need_int(jj_ctx *c, const jj_node *at, jv v, const char *what) {
    if (v.kind == JV_INT) return v.u.i;
    if (v.kind == JV_BOOL) return v.u.b;
    if (v.kind == JV_UNDEF) jj_undefined_error(c, at, v);
    jj_fail(c, at, JJ_ERR_TYPE, "%s needs an integer, not %s", what, jv_type_name(v));
}

static jv mkstr(jj_ctx *c, const jj_out *o) {
    (void)c;
    return jv_str(o->p ? o->p : "", o->n);
}

static jv tuple2(jj_ctx *c, jv a, jv b) {
    jv t = jv_list_new(c, 2);
    t.u.l->tuple = true;
    jv_list_push(c, t.u.l, a);
    jv_list_push(c, t.u.l, b);
    return t;
}

static jv func(jj_ctx *c, const char *name, jj_fn fn, jv self) {
    jfunc *f = jj_ctx_alloc(c, NULL, sizeof *f);
    f->kind = self.kind == JV_UNDEF ? JF_BUILTIN : JF_METHOD;
    f->name = name;
    f->fn = fn;
    f->self = self;
    jv v = {.kind = JV_FUNC};
    v.u.fn = f;
    return v;
}

/* ---- case mapping (ASCII + Latin-1) ------------------------------------------- */

static size_t cp_at(const char *p, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)p;
    if (n >= 2 && (u[0] & 0xE0) == 0xC0 && (u[1] & 0xC0) == 0x80) {
        *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
        return 2;
    }
    size_t k = jj_utf8_offset(p, n, 1);
    *cp = k == 1 ? u[0] : 0xFFFFFFFF;
    return k ? k : 1;
}

static void put_cp(jj_ctx *c, jj_out *o, uint32_t cp, const char *orig, size_t len) {
    if (cp == 0xFFFFFFFF || (cp >= 0x80 && len != 2)) {
        jj_out_put(c, o, orig, len);
        return;
    }
    char b[2];
    if (cp < 0x80) {
        b[0] = (char)cp;
        jj_out_put(c, o, b, 1);
    } else {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        jj_out_put(c, o, b, 2);
    }
}

static bool cp_upper_p(uint32_t c) {
    return (c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7);
}
static bool cp_lower_p(uint32_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 0xDF && c <= 0xFF && c != 0xF7);
}
static uint32_t cp_upper(uint32_t c) {
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
    return c;
}
static uint32_t cp_lower(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    return c;
}
static bool cp_alpha(uint32_t c) {
    return cp_upper_p(c) || cp_lower_p(c) || (c >= 0x100 && c != 0xFFFFFFFF);
}

/* mode: 'u' upper, 'l' lower, 'c' capitalize, 't' Python str.title, 'j' Jinja's title filter */
static jv case_map(jj_ctx *c, jj_str s, char mode) {
    jj_out o = {0};
    bool start = true; /* next letter starts a word */
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        size_t k = cp_at(s.p + i, s.n - i, &cp);
        uint32_t r = cp;
        switch (mode) {
        case 'u':
            r = cp_upper(cp);
            break;
        case 'l':
            r = cp_lower(cp);
            break;
        case 'c':
            r = i == 0 ? cp_upper(cp) : cp_lower(cp);
            break;
        case 't':
            r = start ? cp_upper(cp) : cp_lower(cp);
            start = !cp_alpha(cp);
            break;
        case 'j': {
            /* words begin after runs of whitespace, '-', '(', '{', '[', '<' */
            bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' ||
                       jj_space_len(s.p + i, s.n - i);
            r = sep ? cp : start ? cp_upper(cp) : cp_lower(cp);
            start = sep;
            break;
        }
        }
        put_cp(c, &o, r, s.p + i, k);
        i += k;
    }
    return mkstr(c, &o);
}

/* ---- string helpers ---------------------------------------------------------------- */

static bool in_chars(jj_str chars, const char *p, size_t k) {
    for (size_t i = 0; i < chars.n;) {
        size_t m = jj_utf8_offset(chars.p + i, chars.n - i, 1);
        if (m == k && !memcmp(chars.p + i, p, k)) return true;
        i += m ? m : 1;
    }
    return false;
}

/* Python str.strip / lstrip / rstrip (chars NULL: whitespace). */
static jj_str strip(jj_str s, const jj_str *chars, bool left, bool right) {
    while (left && s.n) {
        size_t k = chars ? jj_utf8_offset(s.p, s.n, 1) : jj_space_len(s.p, s.n);
        if (!k || (chars && !in_chars(*chars, s.p, k))) break;
        s.p += k;
        s.n -= k;
    }
    while (right && s.n) {
        size_t k;
        if (chars) {
            k = 1;
            while (k < s.n && ((unsigned char)s.p[s.n - k] & 0xC0) == 0x80) k++;
            if (!in_chars(*chars, s.p + s.n - k, k)) break;
        } else {
            k = jj_space_len_back(s.p, s.n);
            if (!k) break;
        }
        s.n -= k;
    }
    return s;
}

static jv str_of(jj_ctx *c, jv v) {
    return jv_to_str(c, v);
}

static jj_str sval(jj_ctx *c, jv v) {
    jv s = str_of(c, v);
    return (jj_str){s.u.s.p, s.u.s.n};
}

static jv replace(jj_ctx *c, const jj_node *at, jj_str s, jj_str old, jj_str new_, int64_t count) {
    jj_out o = {0};
    if (!old.n) {
        /* Python inserts new between every character (and at both ends) */
        int64_t done = 0;
        for (size_t i = 0; i <= s.n;) {
            if (count < 0 || done < count) {
                jj_out_put(c, &o, new_.p, new_.n);
                done++;
            }
            if (i == s.n) break;
            size_t k = jj_utf8_offset(s.p + i, s.n - i, 1);
            jj_out_put(c, &o, s.p + i, k);
            i += k;
            jj_step(c, at);
        }
        return mkstr(c, &o);
    }
    size_t i = 0;
    int64_t done = 0;
    while (i < s.n) {
        const char *f = (count < 0 || done < count) ? memmem(s.p + i, s.n - i, old.p, old.n) : NULL;
        if (!f) break;
        size_t at_ = (size_t)(f - s.p);
        jj_out_put(c, &o, s.p + i, at_ - i);
        jj_out_put(c, &o, new_.p, new_.n);
        i = at_ + old.n;
        done++;
    }
    jj_out_put(c, &o, s.p + i, s.n - i);
    return mkstr(c, &o);
}

/* Python str.split / rsplit. */
static jv split(jj_ctx *c, const jj_node *at, jj_str s, const jv *sep, int64_t maxsplit,
                bool from_right) {
    jv l = jv_list_new(c, 0);
    if (!sep || sep->kind == JV_NONE) {
        /* runs of whitespace; leading and trailing ones ignored */
        jv parts = jv_list_new(c, 0);
        size_t i = 0;
        while (i < s.n) {
            size_t k;
            while (i < s.n && (k = jj_space_len(s.p + i, s.n - i))) i += k;
            if (i >= s.n) break;
            size_t b = i;
            while (i < s.n && !jj_space_len(s.p + i, s.n - i))
                i += jj_utf8_offset(s.p + i, s.n - i, 1);
            jv_list_push(c, parts.u.l, jv_str(s.p + b, i - b));
        }
        size_t n = parts.u.l->n;
        if (maxsplit < 0 || (size_t)maxsplit + 1 >= n) return parts;
        /* keep maxsplit pieces, the rest as one (from the original text) */
        if (!from_right) {
            /* the rest keeps its trailing whitespace, as in Python */
            for (size_t k = 0; k < (size_t)maxsplit; k++) jv_list_push(c, l.u.l, parts.u.l->v[k]);
            const char *b = parts.u.l->v[maxsplit].u.s.p;
            jv_list_push(c, l.u.l, jv_str(b, (size_t)(s.p + s.n - b)));
        } else {
            jv last = parts.u.l->v[n - 1 - (size_t)maxsplit];
            jv_list_push(c, l.u.l, jv_str(s.p, (size_t)(last.u.s.p + last.u.s.n - s.p)));
            for (size_t k = n - (size_t)maxsplit; k < n; k++)
                jv_list_push(c, l.u.l, parts.u.l->v[k]);
        }
        return l;
    }
    jj_str d = need_str(c, at, *sep, "split");
    if (!d.n) jj_fail(c, at, JJ_ERR_TYPE, "empty separator");
    if (!from_right) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            const char *f =
                (maxsplit < 0 || done < maxsplit) ? memmem(s.p + i, s.n - i, d.p, d.n) : NULL;
            if (!f) break;
            jv_list_push(c, l.u.l, jv_str(s.p + i, (size_t)(f - s.p) - i));
            i = (size_t)(f - s.p) + d.n;
            done++;
        }
        jv_list_push(c, l.u.l, jv_str(s.p + i, s.n - i));
        return l;
    }
    /* rsplit: collect from the right, then reverse */
    size_t e = s.n;
    int64_t done = 0;
    jv rev = jv_list_new(c, 0);
    while (maxsplit < 0 || done < maxsplit) {
        size_t f = SIZE_MAX;
        for (size_t k = e >= d.n ? e - d.n + 1 : 0; k-- > 0;)
            if (!memcmp(s.p + k, d.p, d.n)) {
                f = k;
                break;
            }
        if (f == SIZE_MAX) break;
        jv_list_push(c, rev.u.l, jv_str(s.p + f + d.n, e - f - d.n));
        e = f;
        done++;
    }
    jv_list_push(c, rev.u.l, jv_str(s.p, e));
    for (size_t k = rev.u.l->n; k-- > 0;) jv_list_push(c, l.u.l, rev.u.l->v[k]);
    return l;
}

static bool has_affix(jj_str s, jv a, bool prefix) {
    if (a.kind != JV_STR) return false;
    if (a.u.s.n > s.n) return false;
    const char *p = prefix ? s.p : s.p + s.n - a.u.s.n;
    return !memcmp(p, a.u.s.p, a.u.s.n);
}

static bool affix_any(jj_ctx *c, const jj_node *at, jj_str s, jv a, bool prefix) {
    if (a.kind == JV_LIST) {
        for (size_t i = 0; i < a.u.l->n; i++)
            if (has_affix(s, a.u.l->v[i], prefix)) return true;
        return false;
    }
    need_str(c, at, a, prefix ? "startswith" : "endswith");
    return has_affix(s, a, prefix);
}

/* ---- formatting: str % args and str.format ---------------------------------------- */

typedef struct spec {
    char fill, align, sign;
    bool zero, alt;
    int width, prec;
    char type;
} spec;

static void pad_out(jj_ctx *c, jj_out *o, const char *p, size_t n, const spec *sp) {
    size_t w = jj_utf8_len(p, n);
    size_t pad = sp->width > 0 && (size_t)sp->width > w ? (size_t)sp->width - w : 0;
    char align = sp->align ? sp->align : '<';
    size_t left = align == '>' ? pad : align == '^' ? pad / 2 : 0, right = pad - left;
    char fill = sp->fill ? sp->fill : ' ';
    if (sp->zero && align == '=') {
        /* sign first, then zeros */
        size_t sgn = n && (p[0] == '-' || p[0] == '+' || p[0] == ' ') ? 1 : 0;
        jj_out_put(c, o, p, sgn);
        for (size_t i = 0; i < pad; i++) jj_out_put(c, o, "0", 1);
        jj_out_put(c, o, p + sgn, n - sgn);
        return;
    }
    for (size_t i = 0; i < left; i++) jj_out_put(c, o, &fill, 1);
    jj_out_put(c, o, p, n);
    for (size_t i = 0; i < right; i++) jj_out_put(c, o, &fill, 1);
}

/* One value formatted by a spec: s (str), r (repr), d/i, f/F/e/E/g/G, x/X/o, c. */
static void format_one(jj_ctx *c, const jj_node *at, jj_out *o, jv v, spec sp) {
    char buf[512];
    char t = sp.type;
    if (t == 0) t = v.kind == JV_INT ? 'd' : v.kind == JV_FLOAT && sp.prec >= 0 ? 'g' : 's';
    if (t == 's' || t == 'r') {
        jj_out tmp = {0};
        if (t == 'r')
            jv_write_repr(c, &tmp, v);
        else
            jv_write_str(c, &tmp, v);
        size_t n = tmp.n;
        if (sp.prec >= 0) n = jj_utf8_offset(tmp.p, tmp.n, (size_t)sp.prec);
        pad_out(c, o, tmp.p ? tmp.p : "", n, &sp);
        return;
    }
    if (!jv_is_num(v))
        jj_fail(c, at, JJ_ERR_TYPE, "format '%c' needs a number, not %s", t, jv_type_name(v));
    if (!sp.align && sp.zero) sp.align = '=';
    if (!sp.align) sp.align = '>';
    const char *sign = sp.sign == '+' ? "+" : sp.sign == ' ' ? " " : "";
    int k;
    if (t == 'd' || t == 'i' || t == 'x' || t == 'X' || t == 'o' || t == 'c') {
        long long x =
            v.kind == JV_FLOAT ? (long long)v.u.f : (long long)(v.kind == JV_INT ? v.u.i : v.u.b);
        if (t == 'c') {
            buf[0] = (char)x;
            k = 1;
        } else if (t == 'd' || t == 'i') {
            k = snprintf(buf, sizeof buf, "%s%lld", x < 0 ? "" : sign, x);
        } else {
            unsigned long long ux = (unsigned long long)(x < 0 ? -x : x);
            const char *f = t == 'x' ? "%s%s%llx" : t == 'X' ? "%s%s%llX" : "%s%s%llo";
            const char *pre = sp.alt ? (t == 'o' ? "0o" : t == 'x' ? "0x" : "0X") : "";
            k = snprintf(buf, sizeof buf, f, x < 0 ? "-" : sign, pre, ux);
        }
    } else if (strchr("fFeEgG%", t)) {
        double x = jv_num(v);
        int prec = sp.prec >= 0 ? sp.prec : 6;
        if (prec > 100) prec = 100;
        char f[16];
        if (t == '%') {
            x *= 100;
            snprintf(f, sizeof f, "%%s%%.%df%%%%", prec);
        } else {
            snprintf(f, sizeof f, "%%s%%.%d%c", prec, t);
        }
        k = snprintf(buf, sizeof buf, f, x < 0 || signbit(x) ? "" : sign, x);
    } else {
        jj_fail(c, at, JJ_ERR_TYPE, "unknown format code '%c'", t);
    }
    pad_out(c, o, buf, (size_t)RP_MIN(RP_MAX(k, 0), (int)sizeof buf - 1), &sp);
}

/* fmt % args: %[(name)][flags][width][.prec]type */
jv jj_percent_format(jj_ctx *c, const jj_node *at, jv fmt, jv args) {
    jj_out o = {0};
    jj_str f = {fmt.u.s.p, fmt.u.s.n};
    size_t ai = 0;
    bool tuple = args.kind == JV_LIST && args.u.l->tuple;
    bool used_single = false;
    for (size_t i = 0; i < f.n; i++) {
        if (f.p[i] != '%') {
            jj_out_put(c, &o, f.p + i, 1);
            continue;
        }
        if (++i >= f.n) jj_fail(c, at, JJ_ERR_TYPE, "incomplete format");
        if (f.p[i] == '%') {
            jj_out_put(c, &o, "%", 1);
            continue;
        }
        jv v = {0};
        bool have = false;
        if (f.p[i] == '(') {
            size_t e = i + 1;
            while (e < f.n && f.p[e] != ')') e++;
            if (e >= f.n) jj_fail(c, at, JJ_ERR_TYPE, "incomplete format key");
            if (args.kind != JV_DICT) jj_fail(c, at, JJ_ERR_TYPE, "format requires a mapping");
            jv *x = jv_dict_gets(args.u.d, f.p + i + 1, e - i - 1);
            if (!x)
                jj_fail(c, at, JJ_ERR_TYPE, "format key '%.*s' missing", (int)(e - i - 1),
                        f.p + i + 1);
            v = *x;
            have = true;
            i = e + 1;
        }
        spec sp = {.prec = -1};
        for (; i < f.n && strchr("-+ 0#", f.p[i]); i++) {
            if (f.p[i] == '-')
                sp.align = '<';
            else if (f.p[i] == '0')
                sp.zero = true;
            else if (f.p[i] == '#')
                sp.alt = true;
            else
                sp.sign = f.p[i];
        }
        for (; i < f.n && f.p[i] >= '0' && f.p[i] <= '9'; i++)
            sp.width = RP_MIN(sp.width * 10 + (f.p[i] - '0'), 10000);
        if (i < f.n && f.p[i] == '.') {
            sp.prec = 0;
            for (i++; i < f.n && f.p[i] >= '0' && f.p[i] <= '9'; i++)
                sp.prec = RP_MIN(sp.prec * 10 + (f.p[i] - '0'), 1000);
        }
        if (i >= f.n) jj_fail(c, at, JJ_ERR_TYPE, "incomplete format");
        sp.type = f.p[i];
        if (sp.type == 'u') sp.type = 'd';
        if (!strchr("sridxXofFeEgGc", sp.type))
            jj_fail(c, at, JJ_ERR_TYPE, "unsupported format character '%c'", sp.type);
        if (!have) {
            if (tuple) {
                if (ai >= args.u.l->n)
                    jj_fail(c, at, JJ_ERR_TYPE, "not enough arguments for format string");
                v = args.u.l->v[ai++];
            } else {
                if (used_single)
                    jj_fail(c, at, JJ_ERR_TYPE, "not enough arguments for format string");
                v = args;
                used_single = true;
            }
        }
        if (sp.zero && sp.align != '<')
            sp.align = '=';
        else if (!sp.align)
            sp.align = '>';
        format_one(c, at, &o, v, sp);
    }
    if (tuple && ai < args.u.l->n)
        jj_fail(c, at, JJ_ERR_TYPE, "not all arguments converted during string formatting");
    return mkstr(c, &o);
}

static void parse_format_spec(const char *p, size_t n, spec *sp) {
    size_t i = 0;
    memset(sp, 0, sizeof *sp);
    sp->prec = -1;
    if (n >= 2 && strchr("<>^=", p[1])) {
        sp->fill = p[0];
        sp->align = p[1];
        i = 2;
    } else if (n >= 1 && strchr("<>^=", p[0])) {
        sp->align = p[0];
        i = 1;
    }
    if (i < n && strchr("+- ", p[i])) sp->sign = p[i++] == '-' ? 0 : p[i - 1];
    if (i < n && p[i] == '#') sp->alt = true, i++;
    if (i < n && p[i] == '0') sp->zero = true, i++;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++)
        sp->width = RP_MIN(sp->width * 10 + (p[i] - '0'), 10000);
    if (i < n && p[i] == '.') {
        sp->prec = 0;
        for (i++; i < n && p[i] >= '0' && p[i] <= '9'; i++)
            sp->prec = RP_MIN(sp->prec * 10 + (p[i] - '0'), 1000);
    }
    if (i < n) sp->type = p[i];
}

/* Python str.format: {} {0} {name} {x.attr} {x[key]} with !r / !s and :spec. */
static jv str_format(jj_ctx *c, const jj_node *at, jj_str f, const jj_args *a) {
    jj_out o = {0};
    size_t auto_i = 0;
    for (size_t i = 0; i < f.n; i++) {
        char ch = f.p[i];
        if ((ch == '{' || ch == '}') && i + 1 < f.n && f.p[i + 1] == ch) {
            jj_out_put(c, &o, &ch, 1);
            i++;
            continue;
        }
        if (ch == '}') jj_fail(c, at, JJ_ERR_TYPE, "single '}' encountered in format string");
        if (ch != '{') {
            jj_out_put(c, &o, &ch, 1);
            continue;
        }
        size_t e = i + 1;
        while (e < f.n && f.p[e] != '}') e++;
        if (e >= f.n) jj_fail(c, at, JJ_ERR_TYPE, "single '{' encountered in format string");
        const char *field = f.p + i + 1;
        size_t fn = e - i - 1, name_n = 0;
        while (name_n < fn && field[name_n] != '!' && field[name_n] != ':' &&
               field[name_n] != '.' && field[name_n] != '[')
            name_n++;
        jv v;
        if (name_n == 0) {
            if (auto_i >= a->n_pos)
                jj_fail(c, at, JJ_ERR_TYPE, "replacement index %zu out of range", auto_i);
            v = a->pos[auto_i++];
        } else if (field[0] >= '0' && field[0] <= '9') {
            size_t idx = (size_t)strtoul(field, NULL, 10);
            if (idx >= a->n_pos)
                jj_fail(c, at, JJ_ERR_TYPE, "replacement index %zu out of range", idx);
            v = a->pos[idx];
        } else {
            size_t k = 0;
            while (k < a->n_kw &&
                   !(a->kwname[k].n == name_n && !memcmp(a->kwname[k].p, field, name_n)))
                k++;
            if (k == a->n_kw)
                jj_fail(c, at, JJ_ERR_TYPE, "format field '%.*s' not given", (int)name_n, field);
            v = a->kw[k];
        }
        size_t q = name_n;
        while (q < fn && (field[q] == '.' || field[q] == '[')) {
            bool dot = field[q] == '.';
            size_t b = ++q;
            while (q < fn && field[q] != '.' && field[q] != '[' && field[q] != ']' &&
                   field[q] != '!' && field[q] != ':')
                q++;
            jv key = jv_str(field + b, q - b);
            if (!dot && q - b && field[b] >= '0' && field[b] <= '9')
                key = jv_int(strtoll(field + b, NULL, 10));
            if (!dot) q++;
            v = key.kind == JV_STR ? jj_getattr(c, at, v, key) : v;
            if (key.kind == JV_INT) {
                if (v.kind != JV_LIST || key.u.i < 0 || (size_t)key.u.i >= v.u.l->n)
                    jj_fail(c, at, JJ_ERR_TYPE, "format field index out of range");
                v = v.u.l->v[key.u.i];
            }
        }
        char conv = 0;
        if (q < fn && field[q] == '!') {
            conv = q + 1 < fn ? field[q + 1] : 0;
            q += 2;
        }
        spec sp;
        if (q < fn && field[q] == ':')
            parse_format_spec(field + q + 1, fn - q - 1, &sp);
        else
            parse_format_spec("", 0, &sp);
        if (conv == 'r' || conv == 's') {
            jj_out t = {0};
            if (conv == 'r')
                jv_write_repr(c, &t, v);
            else
                jv_write_str(c, &t, v);
            v = mkstr(c, &t);
        }
        if (v.kind == JV_STR && sp.type == 0) sp.type = 's';
        if (!sp.align) sp.align = v.kind == JV_STR ? '<' : '>';
        if (sp.zero && v.kind != JV_STR && sp.align == '>') sp.align = '=';
        format_one(c, at, &o, v, sp);
        i = e;
    }
    return mkstr(c, &o);
}

/* ---- string methods ------------------------------------------------------------------- */

static jj_str self_str(jv self) {
    return (jj_str){self.u.s.p, self.u.s.n};
}

static jv m_strip_any(jj_ctx *c, const jj_node *at, jv self, const jj_args *a, bool l, bool r) {
    jv ch;
    jj_str s = self_str(self);
    if (arg(a, 0, "chars", &ch) && ch.kind != JV_NONE) {
        jj_str cs = need_str(c, at, ch, "strip");
        s = strip(s, &cs, l, r);
    } else {
        s = strip(s, NULL, l, r);
    }
    return jv_str(s.p, s.n);
}
static jv m_strip(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    return m_strip_any(c, at, self, a, true, true);
}
static jv m_lstrip(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    return m_strip_any(c, at, self, a, true, false);
}
static jv m_rstrip(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    return m_strip_any(c, at, self, a, false, true);
}

static jv m_split_any(jj_ctx *c, const jj_node *at, jv self, const jj_args *a, bool right) {
    jv sep = arg_or(a, 0, "sep", jv_none());
    int64_t maxsplit = need_int(c, at, arg_or(a, 1, "maxsplit", jv_int(-1)), "split");
    return split(c, at, self_str(self), &sep, maxsplit, right);
}
static jv m_split(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    return m_split_any(c, at, self, a, false);
}
static jv m_rsplit(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    return m_split_any(c, at, self, a, true);
}

static jv m_splitlines(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)at;
    bool keep = jv_truthy(arg_or(a, 0, "keepends", jv_bool(false)));
    jj_str s = self_str(self);
    jv l = jv_list_new(c, 0);
    size_t b = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] != '\n' && s.p[i] != '\r') continue;
        size_t e = i;
        if (s.p[i] == '\r' && i + 1 < s.n && s.p[i + 1] == '\n') i++;
        jv_list_push(c, l.u.l, jv_str(s.p + b, (keep ? i + 1 : e) - b));
        b = i + 1;
    }
    if (b < s.n) jv_list_push(c, l.u.l, jv_str(s.p + b, s.n - b));
    return l;
}

static jv m_startswith(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    jv p;
    if (!arg(a, 0, "prefix", &p))
        jj_fail(c, at, JJ_ERR_TYPE, "startswith() takes at least 1 argument");
    return jv_bool(affix_any(c, at, self_str(self), p, true));
}
static jv m_endswith(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    jv p;
    if (!arg(a, 0, "suffix", &p))
        jj_fail(c, at, JJ_ERR_TYPE, "endswith() takes at least 1 argument");
    return jv_bool(affix_any(c, at, self_str(self), p, false));
}

static jv m_replace(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    jv o, n;
    if (!arg(a, 0, "old", &o) || !arg(a, 1, "new", &n))
        jj_fail(c, at, JJ_ERR_TYPE, "replace() takes 2 arguments");
    int64_t count = need_int(c, at, arg_or(a, 2, "count", jv_int(-1)), "replace");
    return replace(c, at, self_str(self), need_str(c, at, o, "replace"),
                   need_str(c, at, n, "replace"), count);
}

static jv m_upper(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)at, (void)a;
    return case_map(c, self_str(self), 'u');
}
static jv m_lower(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)at, (void)a;
    return case_map(c, self_str(self), 'l');
}
static jv m_title(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)at, (void)a;
    return case_map(c, self_str(self), 't');
}
static jv m_capitalize(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)at, (void)a;
    return case_map(c, self_str(self), 'c');
}
static jv m_format(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    return str_format(c, at, self_str(self), a);
}

static jv m_join(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    jv it;
    if (!arg(a, 0, "iterable", &it)) jj_fail(c, at, JJ_ERR_TYPE, "join() takes 1 argument");
    jv l = jj_iterable_to_list(c, at, it);
    jj_out o = {0};
    for (size_t i = 0; i < l.u.l->n; i++) {
        if (i) jj_out_put(c, &o, self.u.s.p, self.u.s.n);
        jj_str s = need_str(c, at, l.u.l->v[i], "join");
        jj_out_put(c, &o, s.p, s.n);
    }
    return mkstr(c, &o);
}

static jv m_find_any(jj_ctx *c, const jj_node *at, jv self, const jj_args *a, int mode) {
    jv sub;
    if (!arg(a, 0, "sub", &sub)) jj_fail(c, at, JJ_ERR_TYPE, "find() takes at least 1 argument");
    jj_str s = self_str(self), t = need_str(c, at, sub, "find");
    if (mode == 'c') { /* count, non-overlapping */
        if (!t.n) return jv_int((int64_t)jj_utf8_len(s.p, s.n) + 1);
        int64_t k = 0;
        for (size_t i = 0; i + t.n <= s.n;) {
            const char *f = memmem(s.p + i, s.n - i, t.p, t.n);
            if (!f) break;
            k++;
            i = (size_t)(f - s.p) + t.n;
        }
        return jv_int(k);
    }
    size_t pos = SIZE_MAX;
    if (mode == 'f') {
        const char *f = t.n ? memmem(s.p, s.n, t.p, t.n) : s.p;
        if (f) pos = (size_t)(f - s.p);
    } else {
        for (size_t k = s.n >= t.n ? s.n - t.n + 1 : 0; k-- > 0;)
            if (!memcmp(s.p + k, t.p, t.n)) {
                pos = k;
                break;
            }
    }
    return jv_int(pos == SIZE_MAX ? -1 : (int64_t)jj_utf8_len(s.p, pos));
}
static jv m_find(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    return m_find_any(c, at, self, a, 'f');
}
static jv m_rfind(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    return m_find_any(c, at, self, a, 'r');
}
static jv m_count(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    return m_find_any(c, at, self, a, 'c');
}

static jv m_is_any(jv self, int kind) {
    jj_str s = self_str(self);
    if (!s.n) return jv_bool(false);
    bool cased = false;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        size_t k = cp_at(s.p + i, s.n - i, &cp);
        bool ok;
        switch (kind) {
        case 'd':
            ok = cp >= '0' && cp <= '9';
            break;
        case 'a':
            ok = cp_alpha(cp);
            break;
        case 'n':
            ok = cp_alpha(cp) || (cp >= '0' && cp <= '9');
            break;
        case 's':
            ok = jj_space_len(s.p + i, s.n - i) > 0;
            break;
        case 'u':
            ok = !cp_lower_p(cp);
            cased |= cp_upper_p(cp);
            break;
        default: /* 'l' */
            ok = !cp_upper_p(cp);
            cased |= cp_lower_p(cp);
            break;
        }
        if (!ok) return jv_bool(false);
        i += k;
    }
    return jv_bool(kind == 'u' || kind == 'l' ? cased : true);
}
#define IS_METHOD(fname, k)                                                                        \
    static jv fname(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {                     \
        (void)c, (void)at, (void)a;                                                                \
        return m_is_any(self, k);                                                                  \
    }
IS_METHOD(m_isdigit, 'd')
IS_METHOD(m_isalpha, 'a')
IS_METHOD(m_isalnum, 'n')
IS_METHOD(m_isspace, 's')
IS_METHOD(m_isupper, 'u')
IS_METHOD(m_islower, 'l')

static jv m_affix_remove(jj_ctx *c, const jj_node *at, jv self, const jj_args *a, bool prefix) {
    jv x;
    if (!arg(a, 0, NULL, &x))
        jj_fail(c, at, JJ_ERR_TYPE, "removeprefix()/removesuffix() takes 1 argument");
    jj_str s = self_str(self), t = need_str(c, at, x, "removeprefix");
    if (!has_affix(s, x, prefix)) return self;
    return prefix ? jv_str(s.p + t.n, s.n - t.n) : jv_str(s.p, s.n - t.n);
}
static jv m_removeprefix(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    return m_affix_remove(c, at, self, a, true);
}
static jv m_removesuffix(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    return m_affix_remove(c, at, self, a, false);
}

/* ---- dict, list and loop methods --------------------------------------------------------- */

static jv m_get(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    jv k;
    if (!arg(a, 0, "key", &k)) jj_fail(c, at, JJ_ERR_TYPE, "get() takes at least 1 argument");
    jv *v = jv_dict_get(self.u.d, k);
    return v ? *v : arg_or(a, 1, "default", jv_none());
}

static jv dict_view(jj_ctx *c, jv self, int what) {
    const jdict *d = self.u.d;
    jv l = jv_list_new(c, d->n);
    for (size_t i = 0; i < d->n; i++)
        jv_list_push(c, l.u.l,
                     what == 'k'   ? d->key[i]
                     : what == 'v' ? d->val[i]
                                   : tuple2(c, d->key[i], d->val[i]));
    return l;
}
static jv m_items(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)at, (void)a;
    return dict_view(c, self, 'i');
}
static jv m_keys(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)at, (void)a;
    return dict_view(c, self, 'k');
}
static jv m_values(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)at, (void)a;
    return dict_view(c, self, 'v');
}
static jv m_copy(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)at, (void)a;
    jv d = jv_dict_new(c, self.u.d->n);
    for (size_t i = 0; i < self.u.d->n; i++)
        jv_dict_set(c, d.u.d, self.u.d->key[i], self.u.d->val[i]);
    return d;
}

static jv m_append(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    jv x;
    if (!arg(a, 0, NULL, &x)) jj_fail(c, at, JJ_ERR_TYPE, "append() takes 1 argument");
    if (self.u.l->tuple) jj_fail(c, at, JJ_ERR_TYPE, "'tuple' object has no attribute 'append'");
    jv_list_push(c, self.u.l, x);
    return jv_none();
}

static jv m_list_index(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    jv x;
    if (!arg(a, 0, NULL, &x)) jj_fail(c, at, JJ_ERR_TYPE, "index() takes 1 argument");
    for (size_t i = 0; i < self.u.l->n; i++)
        if (jv_equal(self.u.l->v[i], x)) return jv_int((int64_t)i);
    jj_fail(c, at, JJ_ERR_TYPE, "value is not in list");
}

static jv m_list_count(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    jv x;
    if (!arg(a, 0, NULL, &x)) jj_fail(c, at, JJ_ERR_TYPE, "count() takes 1 argument");
    int64_t k = 0;
    for (size_t i = 0; i < self.u.l->n; i++) k += jv_equal(self.u.l->v[i], x);
    return jv_int(k);
}

static jv m_cycle(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    if (!a->n_pos) jj_fail(c, at, JJ_ERR_TYPE, "no items for cycling given");
    (void)c;
    return a->pos[self.u.loop->index0 % a->n_pos];
}

typedef struct method {
    uint8_t kind; /* JV_STR / JV_DICT / JV_LIST / JV_LOOP */
    const char *name;
    jj_fn fn;
} method;

static const method METHODS[] = {
    {JV_STR, "strip", m_strip},
    {JV_STR, "lstrip", m_lstrip},
    {JV_STR, "rstrip", m_rstrip},
    {JV_STR, "split", m_split},
    {JV_STR, "rsplit", m_rsplit},
    {JV_STR, "splitlines", m_splitlines},
    {JV_STR, "startswith", m_startswith},
    {JV_STR, "endswith", m_endswith},
    {JV_STR, "replace", m_replace},
    {JV_STR, "upper", m_upper},
    {JV_STR, "lower", m_lower},
    {JV_STR, "title", m_title},
    {JV_STR, "capitalize", m_capitalize},
    {JV_STR, "format", m_format},
    {JV_STR, "join", m_join},
    {JV_STR, "find", m_find},
    {JV_STR, "rfind", m_rfind},
    {JV_STR, "count", m_count},
    {JV_STR, "isdigit", m_isdigit},
    {JV_STR, "isalpha", m_isalpha},
    {JV_STR, "isalnum", m_isalnum},
    {JV_STR, "isspace", m_isspace},
    {JV_STR, "isupper", m_isupper},
    {JV_STR, "islower", m_islower},
    {JV_STR, "removeprefix", m_removeprefix},
    {JV_STR, "removesuffix", m_removesuffix},
    {JV_DICT, "get", m_get},
    {JV_DICT, "items", m_items},
    {JV_DICT, "keys", m_keys},
    {JV_DICT, "values", m_values},
    {JV_DICT, "copy", m_copy},
    {JV_LIST, "append", m_append},
    {JV_LIST, "index", m_list_index},
    {JV_LIST, "count", m_list_count},
    {JV_LOOP, "cycle", m_cycle},
};

jv jj_find_method(jj_ctx *c, jv obj, const char *name, size_t n) {
    for (size_t i = 0; i < RP_ARRAY_LEN(METHODS); i++)
        if (METHODS[i].kind == obj.kind && strlen(METHODS[i].name) == n &&
            !memcmp(METHODS[i].name, name, n))
            return func(c, METHODS[i].name, METHODS[i].fn, obj);
    return jv_undef(NULL, 0);
}

/* ---- tests ---------------------------------------------------------------------------- */

#define TEST(name)  static bool name(jj_ctx *c, const jj_node *at, jv v, const jj_args *a)
#define UNUSED_ARGS (void)c, (void)at, (void)a

static jv test_arg(jj_ctx *c, const jj_node *at, const jj_args *a, const char *what) {
    jv x;
    if (!arg(a, 0, NULL, &x)) jj_fail(c, at, JJ_ERR_TYPE, "test '%s' needs an argument", what);
    return x;
}

TEST(t_defined) {
    UNUSED_ARGS;
    return v.kind != JV_UNDEF;
}
TEST(t_undefined) {
    UNUSED_ARGS;
    return v.kind == JV_UNDEF;
}
TEST(t_none) {
    UNUSED_ARGS;
    return v.kind == JV_NONE;
}
TEST(t_boolean) {
    UNUSED_ARGS;
    return v.kind == JV_BOOL;
}
TEST(t_true) {
    UNUSED_ARGS;
    return v.kind == JV_BOOL && v.u.b;
}
TEST(t_false) {
    UNUSED_ARGS;
    return v.kind == JV_BOOL && !v.u.b;
}
TEST(t_integer) {
    UNUSED_ARGS;
    return v.kind == JV_INT;
}
TEST(t_float) {
    UNUSED_ARGS;
    return v.kind == JV_FLOAT;
}
TEST(t_number) {
    UNUSED_ARGS;
    return jv_is_num(v);
}
TEST(t_string) {
    UNUSED_ARGS;
    return v.kind == JV_STR;
}
TEST(t_mapping) {
    UNUSED_ARGS;
    return v.kind == JV_DICT;
}
/* Jinja's Undefined is iterable (it iterates empty) and passes `sequence` too */
TEST(t_iterable) {
    UNUSED_ARGS;
    return v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
}
TEST(t_sequence) {
    UNUSED_ARGS;
    return v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
}
TEST(t_callable) {
    UNUSED_ARGS;
    return v.kind == JV_FUNC;
}
TEST(t_odd) {
    (void)a;
    return need_int(c, at, v, "odd") % 2 != 0;
}
TEST(t_even) {
    (void)a;
    return need_int(c, at, v, "even") % 2 == 0;
}
TEST(t_divisibleby) {
    int64_t d = need_int(c, at, test_arg(c, at, a, "divisibleby"), "divisibleby");
    if (!d) jj_fail(c, at, JJ_ERR_TYPE, "integer division or modulo by zero");
    return need_int(c, at, v, "divisibleby") % d == 0;
}
TEST(t_eq) {
    return jv_equal(v, test_arg(c, at, a, "eq"));
}
TEST(t_ne) {
    return !jv_equal(v, test_arg(c, at, a, "ne"));
}
TEST(t_lt) {
    return jj_less(c, at, v, test_arg(c, at, a, "lt"));
}
TEST(t_gt) {
    return jj_less(c, at, test_arg(c, at, a, "gt"), v);
}
TEST(t_le) {
    return !jj_less(c, at, test_arg(c, at, a, "le"), v);
}
TEST(t_ge) {
    return !jj_less(c, at, v, test_arg(c, at, a, "ge"));
}
TEST(t_in) {
    jv box = test_arg(c, at, a, "in");
    if (box.kind == JV_STR) {
        jj_str s = need_str(c, at, v, "in");
        return !s.n || memmem(box.u.s.p, box.u.s.n, s.p, s.n);
    }
    if (box.kind == JV_DICT) return jv_dict_get(box.u.d, v) != NULL;
    jv l = jj_iterable_to_list(c, at, box);
    for (size_t i = 0; i < l.u.l->n; i++)
        if (jv_equal(l.u.l->v[i], v)) return true;
    return false;
}
TEST(t_sameas) {
    jv o = test_arg(c, at, a, "sameas");
    if (v.kind != o.kind) return false;
    switch (v.kind) {
    case JV_NONE:
    case JV_UNDEF:
        return true;
    case JV_BOOL:
        return v.u.b == o.u.b;
    case JV_INT:
        return v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256; /* CPython's small-int cache */
    case JV_STR:
        return v.u.s.p == o.u.s.p && v.u.s.n == o.u.s.n;
    case JV_LIST:
        return v.u.l == o.u.l;
    case JV_DICT:
    case JV_NS:
        return v.u.d == o.u.d;
    default:
        return jv_equal(v, o);
    }
}
TEST(t_lower) {
    UNUSED_ARGS;
    return v.kind == JV_STR && jv_truthy(m_is_any(v, 'l'));
}
TEST(t_upper) {
    UNUSED_ARGS;
    return v.kind == JV_STR && jv_truthy(m_is_any(v, 'u'));
}
TEST(t_escaped) {
    UNUSED_ARGS;
    (void)v;
    return false;
}
TEST(t_filter) {
    UNUSED_ARGS;
    return v.kind == JV_STR && jj_find_filter(v.u.s.p, v.u.s.n) != NULL;
}
TEST(t_test) {
    UNUSED_ARGS;
    return v.kind == JV_STR && jj_find_test(v.u.s.p, v.u.s.n) != NULL;
}

static const struct {
    const char *name;
    jj_test_fn fn;
} TESTS[] = {
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"none", t_none},
    {"boolean", t_boolean},
    {"true", t_true},
    {"false", t_false},
    {"integer", t_integer},
    {"float", t_float},
    {"number", t_number},
    {"string", t_string},
    {"mapping", t_mapping},
    {"iterable", t_iterable},
    {"sequence", t_sequence},
    {"callable", t_callable},
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"==", t_eq},
    {"ne", t_ne},
    {"!=", t_ne},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<", t_lt},
    {"le", t_le},
    {"<=", t_le},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {">", t_gt},
    {"ge", t_ge},
    {">=", t_ge},
    {"in", t_in},
    {"sameas", t_sameas},
    {"lower", t_lower},
    {"upper", t_upper},
    {"escaped", t_escaped},
    {"filter", t_filter},
    {"test", t_test},
};

jj_test_fn jj_find_test(const char *name, size_t n) {
    for (size_t i = 0; i < RP_ARRAY_LEN(TESTS); i++)
        if (strlen(TESTS[i].name) == n && !memcmp(TESTS[i].name, name, n)) return TESTS[i].fn;
    return NULL;
}

/* ---- filters ------------------------------------------------------------------------- */

#define FILTER(name) static jv name(jj_ctx *c, const jj_node *at, jv v, const jj_args *a)

static size_t length_of(jj_ctx *c, const jj_node *at, jv v) {
    switch (v.kind) {
    case JV_STR:
        return jj_utf8_len(v.u.s.p, v.u.s.n);
    case JV_LIST:
        return v.u.l->n;
    case JV_DICT:
    case JV_NS:
        return v.u.d->n;
    case JV_UNDEF:
        return 0;
    default:
        jj_fail(c, at, JJ_ERR_TYPE, "object of type '%s' has no len()", jv_type_name(v));
    }
}

FILTER(f_length) {
    (void)a;
    return jv_int((int64_t)length_of(c, at, v));
}

/* transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
FILTER(f_tojson) {
    jj_json_opts o = {0};
    o.ensure_ascii = jv_truthy(arg_or(a, 0, "ensure_ascii", jv_bool(false)));
    jv ind = arg_or(a, 1, "indent", jv_none());
    if (ind.kind == JV_INT || ind.kind == JV_BOOL) {
        static const char spaces[] =
            "                                                                ";
        o.pretty = true;
        o.indent = (jj_str){spaces, (size_t)RP_MAX(0, RP_MIN(need_int(c, at, ind, "tojson"), 64))};
    } else if (ind.kind == JV_STR) {
        o.pretty = true;
        o.indent = (jj_str){ind.u.s.p, ind.u.s.n};
    } else if (ind.kind != JV_NONE) {
        jj_fail(c, at, JJ_ERR_TYPE, "tojson: indent must be an integer, a string or None");
    }
    jv sep = arg_or(a, 2, "separators", jv_none());
    if (sep.kind == JV_LIST && sep.u.l->n == 2) {
        o.item_sep = need_str(c, at, sep.u.l->v[0], "tojson separators");
        o.key_sep = need_str(c, at, sep.u.l->v[1], "tojson separators");
    } else if (sep.kind != JV_NONE) {
        jj_fail(c, at, JJ_ERR_TYPE, "tojson: separators must be a pair of strings");
    } else {
        o.item_sep = o.pretty ? (jj_str){",", 1} : (jj_str){", ", 2};
        o.key_sep = (jj_str){": ", 2};
    }
    o.sort_keys = jv_truthy(arg_or(a, 3, "sort_keys", jv_bool(false)));
    jj_out out = {0};
    jv_write_json(c, at, &out, v, &o, 0);
    return mkstr(c, &out);
}

FILTER(f_trim) {
    jv ch;
    jj_str s = sval(c, v);
    if (arg(a, 0, "chars", &ch) && ch.kind != JV_NONE) {
        jj_str cs = need_str(c, at, ch, "trim");
        s = strip(s, &cs, true, true);
    } else {
        s = strip(s, NULL, true, true);
    }
    return jv_str(s.p, s.n);
}

FILTER(f_upper) {
    (void)at, (void)a;
    return case_map(c, sval(c, v), 'u');
}
FILTER(f_lower) {
    (void)at, (void)a;
    return case_map(c, sval(c, v), 'l');
}
FILTER(f_title) {
    (void)at, (void)a;
    return case_map(c, sval(c, v), 'j');
}
FILTER(f_capitalize) {
    (void)at, (void)a;
    return case_map(c, sval(c, v), 'c');
}

FILTER(f_replace) {
    jv o, n;
    if (!arg(a, 0, "old", &o) || !arg(a, 1, "new", &n))
        jj_fail(c, at, JJ_ERR_TYPE, "replace needs old and new");
    jv cnt = arg_or(a, 2, "count", jv_none());
    int64_t count = cnt.kind == JV_NONE ? -1 : need_int(c, at, cnt, "replace");
    return replace(c, at, sval(c, v), sval(c, o), sval(c, n), count);
}

/* item.attribute for map / selectattr / sort / join, as Jinja's attrgetter:
 * dotted paths, integer parts index. */
static jv attr_path(jj_ctx *c, const jj_node *at, jv item, jv attr) {
    if (attr.kind == JV_INT) {
        if (item.kind == JV_LIST && attr.u.i >= 0 && (size_t)attr.u.i < item.u.l->n)
            return item.u.l->v[attr.u.i];
        return jv_undef(NULL, 0);
    }
    jj_str s = need_str(c, at, attr, "attribute");
    size_t b = 0;
    while (b <= s.n) {
        size_t e = b;
        while (e < s.n && s.p[e] != '.') e++;
        jv key = jv_str(s.p + b, e - b);
        bool digits = e > b;
        for (size_t i = b; i < e; i++) digits &= s.p[i] >= '0' && s.p[i] <= '9';
        if (item.kind == JV_UNDEF) return item;
        if (digits && item.kind == JV_LIST) {
            size_t idx = (size_t)strtoull(s.p + b, NULL, 10);
            item = idx < item.u.l->n ? item.u.l->v[idx] : jv_undef(NULL, 0);
        } else if (item.kind == JV_DICT) {
            jv *x = jv_dict_get(item.u.d, key);
            item = x ? *x : jj_getattr(c, at, item, key);
        } else {
            item = jj_getattr(c, at, item, key);
        }
        b = e + 1;
    }
    return item;
}

FILTER(f_join) {
    jv sep = arg_or(a, 0, "d", jv_str("", 0));
    jv attr;
    bool has_attr = arg(a, 1, "attribute", &attr);
    jj_str d = sval(c, sep);
    jv l = jj_iterable_to_list(c, at, v);
    jj_out o = {0};
    for (size_t i = 0; i < l.u.l->n; i++) {
        if (i) jj_out_put(c, &o, d.p, d.n);
        jv x = has_attr ? attr_path(c, at, l.u.l->v[i], attr) : l.u.l->v[i];
        jv_write_str(c, &o, x);
    }
    return mkstr(c, &o);
}

FILTER(f_first) {
    (void)a;
    jv l = jj_iterable_to_list(c, at, v);
    return l.u.l->n ? l.u.l->v[0] : jv_undef("No first item, sequence was empty.", 34);
}
FILTER(f_last) {
    (void)a;
    jv l = jj_iterable_to_list(c, at, v);
    return l.u.l->n ? l.u.l->v[l.u.l->n - 1] : jv_undef("No last item, sequence was empty.", 33);
}

FILTER(f_default) {
    (void)at;
    jv d = arg_or(a, 0, "default_value", jv_str("", 0));
    bool boolean = jv_truthy(arg_or(a, 1, "boolean", jv_bool(false)));
    (void)c;
    if (v.kind == JV_UNDEF || (boolean && !jv_truthy(v))) return d;
    return v;
}

FILTER(f_list) {
    (void)a;
    jv l = jj_iterable_to_list(c, at, v);
    jv copy = jv_list_new(c, l.u.l->n);
    for (size_t i = 0; i < l.u.l->n; i++) jv_list_push(c, copy.u.l, l.u.l->v[i]);
    return copy;
}

FILTER(f_items) {
    (void)a;
    if (v.kind == JV_UNDEF) return jv_list_new(c, 0);
    if (v.kind != JV_DICT) jj_fail(c, at, JJ_ERR_TYPE, "Can only get item pairs from a mapping.");
    return dict_view(c, v, 'i');
}

/* select / reject / selectattr / rejectattr */
static jv select_common(jj_ctx *c, const jj_node *at, jv v, const jj_args *a, bool by_attr,
                        bool keep) {
    size_t first = 0;
    jv attr = {0};
    if (by_attr) {
        if (!arg(a, 0, NULL, &attr))
            jj_fail(c, at, JJ_ERR_TYPE, "selectattr/rejectattr need an attribute name");
        first = 1;
    }
    jj_test_fn t = NULL;
    jj_args targs = {0};
    if (a->n_pos > first) {
        jj_str name = need_str(c, at, a->pos[first], "select test name");
        t = jj_find_test(name.p, name.n);
        if (!t) jj_fail(c, at, RP_ERR_FORMAT, "no test named '%.*s'", (int)name.n, name.p);
        targs.pos = a->pos + first + 1;
        targs.n_pos = a->n_pos - first - 1;
    }
    jv l = jj_iterable_to_list(c, at, v), out = jv_list_new(c, 0);
    for (size_t i = 0; i < l.u.l->n; i++) {
        jj_step(c, at);
        jv x = by_attr ? attr_path(c, at, l.u.l->v[i], attr) : l.u.l->v[i];
        bool r = t ? t(c, at, x, &targs) : jv_truthy(x);
        if (r == keep) jv_list_push(c, out.u.l, l.u.l->v[i]);
    }
    return out;
}
FILTER(f_select) {
    return select_common(c, at, v, a, false, true);
}
FILTER(f_reject) {
    return select_common(c, at, v, a, false, false);
}
FILTER(f_selectattr) {
    return select_common(c, at, v, a, true, true);
}
FILTER(f_rejectattr) {
    return select_common(c, at, v, a, true, false);
}

FILTER(f_map) {
    jv l = jj_iterable_to_list(c, at, v), out = jv_list_new(c, l.u.l->n);
    jv attr;
    if (arg(a, SIZE_MAX, "attribute", &attr)) {
        jv def;
        bool has_def = arg(a, SIZE_MAX, "default", &def);
        for (size_t i = 0; i < l.u.l->n; i++) {
            jv x = attr_path(c, at, l.u.l->v[i], attr);
            if (x.kind == JV_UNDEF && has_def) x = def;
            jv_list_push(c, out.u.l, x);
        }
        return out;
    }
    if (!a->n_pos) jj_fail(c, at, JJ_ERR_TYPE, "map needs a filter name or attribute=");
    jj_str name = need_str(c, at, a->pos[0], "map filter name");
    jj_fn f = jj_find_filter(name.p, name.n);
    if (!f) jj_fail(c, at, RP_ERR_FORMAT, "no filter named '%.*s'", (int)name.n, name.p);
    jj_args fa = *a;
    fa.pos++;
    fa.n_pos--;
    for (size_t i = 0; i < l.u.l->n; i++) {
        jj_step(c, at);
        jv_list_push(c, out.u.l, f(c, at, l.u.l->v[i], &fa));
    }
    return out;
}

FILTER(f_string) {
    (void)at, (void)a;
    return str_of(c, v);
}

static bool parse_int_text(jj_str s, int64_t base, int64_t *out) {
    s = strip(s, NULL, true, true);
    if (!s.n) return false;
    size_t i = 0;
    bool neg = false;
    if (s.p[0] == '+' || s.p[0] == '-') neg = s.p[i++] == '-';
    if (base == 16 && i + 1 < s.n && s.p[i] == '0' && (s.p[i + 1] == 'x' || s.p[i + 1] == 'X'))
        i += 2;
    if (i >= s.n) return false;
    int64_t v = 0;
    for (; i < s.n; i++) {
        char ch = s.p[i];
        if (ch == '_') continue;
        int d = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'z' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'Z' ? ch - 'A' + 10
                                         : 99;
        if (d >= base) return false;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
    }
    *out = neg ? -v : v;
    return true;
}

static bool parse_float_text(jj_str s, double *out) {
    s = strip(s, NULL, true, true);
    if (!s.n || s.n > 300) return false;
    char buf[320];
    memcpy(buf, s.p, s.n);
    buf[s.n] = 0;
    char *e;
    double d = strtod(buf, &e);
    if (*e) return false;
    *out = d;
    return true;
}

FILTER(f_int) {
    jv def = arg_or(a, 0, "default", jv_int(0));
    int64_t base = need_int(c, at, arg_or(a, 1, "base", jv_int(10)), "int");
    if (base < 2 || base > 36) base = 10;
    if (v.kind == JV_INT) return v;
    if (v.kind == JV_BOOL) return jv_int(v.u.b);
    if (v.kind == JV_FLOAT) {
        if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) return def;
        return jv_int((int64_t)v.u.f);
    }
    if (v.kind == JV_STR) {
        int64_t i;
        if (parse_int_text((jj_str){v.u.s.p, v.u.s.n}, base, &i)) return jv_int(i);
        double d;
        if (parse_float_text((jj_str){v.u.s.p, v.u.s.n}, &d) && isfinite(d) && fabs(d) < 9.2e18)
            return jv_int((int64_t)d);
    }
    return def;
}

FILTER(f_float) {
    jv def = arg_or(a, 0, "default", jv_float(0));
    (void)c, (void)at;
    if (v.kind == JV_FLOAT) return v;
    if (v.kind == JV_INT || v.kind == JV_BOOL) return jv_float(jv_num(v));
    double d;
    if (v.kind == JV_STR && parse_float_text((jj_str){v.u.s.p, v.u.s.n}, &d)) return jv_float(d);
    return def;
}

FILTER(f_safe) {
    (void)c, (void)at, (void)a;
    return v;
}

FILTER(f_escape) {
    (void)at, (void)a;
    jj_str s = sval(c, v);
    jj_out o = {0};
    for (size_t i = 0; i < s.n; i++) {
        const char *r = s.p[i] == '&'    ? "&amp;"
                        : s.p[i] == '<'  ? "&lt;"
                        : s.p[i] == '>'  ? "&gt;"
                        : s.p[i] == '"'  ? "&#34;"
                        : s.p[i] == '\'' ? "&#39;"
                                         : NULL;
        if (r)
            jj_out_put(c, &o, r, strlen(r));
        else
            jj_out_put(c, &o, s.p + i, 1);
    }
    return mkstr(c, &o);
}

FILTER(f_indent) {
    jv w = arg_or(a, 0, "width", jv_int(4));
    bool first = jv_truthy(arg_or(a, 1, "first", jv_bool(false)));
    bool blank = jv_truthy(arg_or(a, 2, "blank", jv_bool(false)));
    jj_str pad;
    if (w.kind == JV_STR) {
        pad = (jj_str){w.u.s.p, w.u.s.n};
    } else {
        int64_t n = RP_MAX(0, RP_MIN(need_int(c, at, w, "indent"), 1000));
        char *p = jj_ctx_alloc(c, at, (size_t)n + 1);
        memset(p, ' ', (size_t)n);
        pad = (jj_str){p, (size_t)n};
    }
    /* Jinja: the text plus "\n" split into lines; lines after the first get
     * the pad unless empty (blank=True pads them too); first=True pads the first. */
    jj_str s = sval(c, v);
    jj_out o = {0};
    if (first) jj_out_put(c, &o, pad.p, pad.n);
    size_t b = 0;
    for (bool is_first = true;; is_first = false) {
        size_t e = b;
        while (e < s.n && s.p[e] != '\n') e++;
        if (!is_first) {
            jj_out_put(c, &o, "\n", 1);
            if (blank || e > b) jj_out_put(c, &o, pad.p, pad.n);
        }
        jj_out_put(c, &o, s.p + b, e - b);
        if (e >= s.n) break;
        b = e + 1;
    }
    return mkstr(c, &o);
}

/* Jinja compares strings case-insensitively in unique/sort/dictsort/min/max
 * unless case_sensitive=True. */
static jv sort_key(jj_ctx *c, jv v, bool case_sensitive) {
    if (!case_sensitive && v.kind == JV_STR) return case_map(c, (jj_str){v.u.s.p, v.u.s.n}, 'l');
    return v;
}

FILTER(f_unique) {
    bool cs = jv_truthy(arg_or(a, 0, "case_sensitive", jv_bool(false)));
    jv attr;
    bool has_attr = arg(a, 1, "attribute", &attr);
    jv l = jj_iterable_to_list(c, at, v), out = jv_list_new(c, 0), seen = jv_list_new(c, 0);
    for (size_t i = 0; i < l.u.l->n; i++) {
        jv k = sort_key(c, has_attr ? attr_path(c, at, l.u.l->v[i], attr) : l.u.l->v[i], cs);
        bool dup = false;
        for (size_t j = 0; j < seen.u.l->n && !dup; j++) dup = jv_equal(seen.u.l->v[j], k);
        jj_step(c, at);
        if (dup) continue;
        jv_list_push(c, seen.u.l, k);
        jv_list_push(c, out.u.l, l.u.l->v[i]);
    }
    return out;
}

/* Stable merge sort of items by keys. */
static void sort_by(jj_ctx *c, const jj_node *at, jv *items, jv *keys, size_t n, bool reverse) {
    if (n < 2) return;
    jv *ti = jj_ctx_alloc(c, at, n * sizeof *ti), *tk = jj_ctx_alloc(c, at, n * sizeof *tk);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = RP_MIN(lo + w, n), hi = RP_MIN(lo + 2 * w, n), i = lo, j = mid, k = lo;
            while (i < mid || j < hi) {
                bool take_right = false;
                if (i >= mid)
                    take_right = true;
                else if (j < hi)
                    take_right = reverse ? jj_less(c, at, keys[i], keys[j])
                                         : jj_less(c, at, keys[j], keys[i]);
                jj_step(c, at);
                if (take_right) {
                    ti[k] = items[j];
                    tk[k++] = keys[j++];
                } else {
                    ti[k] = items[i];
                    tk[k++] = keys[i++];
                }
            }
        }
        memcpy(items, ti, n * sizeof *ti);
        memcpy(keys, tk, n * sizeof *tk);
    }
}

FILTER(f_sort) {
    bool reverse = jv_truthy(arg_or(a, 0, "reverse", jv_bool(false)));
    bool cs = jv_truthy(arg_or(a, 1, "case_sensitive", jv_bool(false)));
    jv attr;
    bool has_attr = arg(a, 2, "attribute", &attr);
    jv l = jj_iterable_to_list(c, at, v), out = jv_list_new(c, l.u.l->n);
    size_t n = l.u.l->n;
    jv *keys = jj_ctx_alloc(c, at, (n ? n : 1) * sizeof *keys);
    for (size_t i = 0; i < n; i++) {
        jv_list_push(c, out.u.l, l.u.l->v[i]);
        keys[i] = sort_key(c, has_attr ? attr_path(c, at, l.u.l->v[i], attr) : l.u.l->v[i], cs);
    }
    sort_by(c, at, out.u.l->v, keys, n, reverse);
    return out;
}

FILTER(f_dictsort) {
    bool cs = jv_truthy(arg_or(a, 0, "case_sensitive", jv_bool(false)));
    jv by = arg_or(a, 1, "by", jv_str("key", 3));
    bool reverse = jv_truthy(arg_or(a, 2, "reverse", jv_bool(false)));
    if (v.kind != JV_DICT)
        jj_fail(c, at, JJ_ERR_TYPE, "dictsort needs a mapping, not %s", jv_type_name(v));
    bool by_value = by.kind == JV_STR && by.u.s.n == 5 && !memcmp(by.u.s.p, "value", 5);
    jv out = dict_view(c, v, 'i');
    size_t n = out.u.l->n;
    jv *keys = jj_ctx_alloc(c, at, (n ? n : 1) * sizeof *keys);
    for (size_t i = 0; i < n; i++)
        keys[i] = sort_key(c, out.u.l->v[i].u.l->v[by_value ? 1 : 0], cs);
    sort_by(c, at, out.u.l->v, keys, n, reverse);
    return out;
}

/* Python's round(): halves to even, on the decimal value. */
static double py_round(double x, int64_t prec) {
    if (!isfinite(x)) return x;
    if (prec > 300 || prec < -300) return prec > 0 ? x : 0.0 * x;
    char buf[400];
    if (prec >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)prec,
                 x); /* glibc rounds the exact binary value half-even */
        return strtod(buf, NULL);
    }
    double p = pow(10.0, (double)-prec);
    return nearbyint(x / p) * p;
}

FILTER(f_round) {
    int64_t prec = need_int(c, at, arg_or(a, 0, "precision", jv_int(0)), "round");
    jv m = arg_or(a, 1, "method", jv_str("common", 6));
    jj_str ms = need_str(c, at, m, "round method");
    if (!jv_is_num(v)) jj_fail(c, at, JJ_ERR_TYPE, "round needs a number, not %s", jv_type_name(v));
    bool common = ms.n == 6 && !memcmp(ms.p, "common", 6);
    bool ceil_ = ms.n == 4 && !memcmp(ms.p, "ceil", 4);
    bool floor_ = ms.n == 5 && !memcmp(ms.p, "floor", 5);
    if (!common && !ceil_ && !floor_)
        jj_fail(c, at, JJ_ERR_TYPE, "method must be common, ceil or floor");
    if (common && v.kind != JV_FLOAT)
        return v.kind == JV_BOOL ? jv_int(v.u.b) : v; /* round(int, n) is an int */
    double x = jv_num(v);
    if (common) return jv_float(py_round(x, prec));
    double p = pow(10.0, (double)prec);
    return jv_float((ceil_ ? ceil(x * p) : floor(x * p)) / p);
}

FILTER(f_abs) {
    (void)a;
    if (v.kind == JV_INT) {
        if (v.u.i == INT64_MIN) jj_fail(c, at, JJ_ERR_TYPE, "integer overflow");
        return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    }
    if (v.kind == JV_BOOL) return jv_int(v.u.b);
    if (v.kind == JV_FLOAT) return jv_float(fabs(v.u.f));
    jj_fail(c, at, JJ_ERR_TYPE, "bad operand type for abs(): '%s'", jv_type_name(v));
}

FILTER(f_reverse) {
    (void)a;
    if (v.kind == JV_STR) {
        jv chars = jj_iterable_to_list(c, at, v);
        jj_out o = {0};
        for (size_t i = chars.u.l->n; i-- > 0;)
            jj_out_put(c, &o, chars.u.l->v[i].u.s.p, chars.u.l->v[i].u.s.n);
        return mkstr(c, &o);
    }
    jv l = jj_iterable_to_list(c, at, v), out = jv_list_new(c, l.u.l->n);
    for (size_t i = l.u.l->n; i-- > 0;) jv_list_push(c, out.u.l, l.u.l->v[i]);
    return out;
}

FILTER(f_batch) {
    int64_t n = need_int(c, at, arg_or(a, 0, "linecount", jv_int(1)), "batch");
    jv fill;
    bool has_fill = arg(a, 1, "fill_with", &fill) && fill.kind != JV_NONE;
    if (n < 1) jj_fail(c, at, JJ_ERR_TYPE, "batch size must be positive");
    jv l = jj_iterable_to_list(c, at, v), out = jv_list_new(c, 0);
    for (size_t i = 0; i < l.u.l->n; i += (size_t)n) {
        jv b = jv_list_new(c, (size_t)RP_MIN(n, 1024));
        for (size_t k = i; k < i + (size_t)n && k < l.u.l->n; k++)
            jv_list_push(c, b.u.l, l.u.l->v[k]);
        while (has_fill && b.u.l->n < (size_t)n) jv_list_push(c, b.u.l, fill);
        jv_list_push(c, out.u.l, b);
    }
    return out;
}

FILTER(f_sum) {
    jv attr;
    bool has_attr = arg(a, 0, "attribute", &attr);
    jv acc = arg_or(a, 1, "start", jv_int(0));
    jv l = jj_iterable_to_list(c, at, v);
    for (size_t i = 0; i < l.u.l->n; i++) {
        jv x = has_attr ? attr_path(c, at, l.u.l->v[i], attr) : l.u.l->v[i];
        if (!jv_is_num(x) || !jv_is_num(acc)) jj_fail(c, at, JJ_ERR_TYPE, "sum needs numbers");
        if (acc.kind != JV_FLOAT && x.kind != JV_FLOAT) {
            int64_t r;
            if (__builtin_add_overflow(acc.kind == JV_INT ? acc.u.i : acc.u.b,
                                       x.kind == JV_INT ? x.u.i : x.u.b, &r))
                jj_fail(c, at, JJ_ERR_TYPE, "integer overflow");
            acc = jv_int(r);
        } else {
            acc = jv_float(jv_num(acc) + jv_num(x));
        }
    }
    return acc;
}

static jv min_max(jj_ctx *c, const jj_node *at, jv v, const jj_args *a, bool want_max) {
    bool cs = jv_truthy(arg_or(a, 0, "case_sensitive", jv_bool(false)));
    jv attr;
    bool has_attr = arg(a, 1, "attribute", &attr);
    jv l = jj_iterable_to_list(c, at, v);
    if (!l.u.l->n) return jv_undef("No aggregated item, sequence was empty.", 39);
    size_t best = 0;
    jv bk = sort_key(c, has_attr ? attr_path(c, at, l.u.l->v[0], attr) : l.u.l->v[0], cs);
    for (size_t i = 1; i < l.u.l->n; i++) {
        jv k = sort_key(c, has_attr ? attr_path(c, at, l.u.l->v[i], attr) : l.u.l->v[i], cs);
        if (want_max ? jj_less(c, at, bk, k) : jj_less(c, at, k, bk)) {
            best = i;
            bk = k;
        }
    }
    return l.u.l->v[best];
}
FILTER(f_min) {
    return min_max(c, at, v, a, false);
}
FILTER(f_max) {
    return min_max(c, at, v, a, true);
}

FILTER(f_wordcount) {
    (void)a;
    jv parts = split(c, at, sval(c, v), NULL, -1, false);
    return jv_int((int64_t)parts.u.l->n);
}

FILTER(f_center) {
    int64_t w = need_int(c, at, arg_or(a, 0, "width", jv_int(80)), "center");
    jj_str s = sval(c, v);
    size_t len = jj_utf8_len(s.p, s.n);
    if (w <= (int64_t)len) return jv_str(s.p, s.n);
    if (w > 100000) jj_fail(c, at, JJ_ERR_TYPE, "center width too large");
    size_t pad = (size_t)w - len, left = pad / 2 + (pad & (size_t)w & 1);
    jj_out o = {0};
    for (size_t i = 0; i < left; i++) jj_out_put(c, &o, " ", 1);
    jj_out_put(c, &o, s.p, s.n);
    for (size_t i = left; i < pad; i++) jj_out_put(c, &o, " ", 1);
    return mkstr(c, &o);
}

FILTER(f_format) {
    jj_str s = sval(c, v);
    jv args = jv_list_new(c, a->n_pos);
    args.u.l->tuple = true;
    for (size_t i = 0; i < a->n_pos; i++) jv_list_push(c, args.u.l, a->pos[i]);
    if (a->n_kw) {
        jv d = jv_dict_new(c, a->n_kw);
        for (size_t i = 0; i < a->n_kw; i++)
            jv_dict_set(c, d.u.d, jv_str(a->kwname[i].p, a->kwname[i].n), a->kw[i]);
        return jj_percent_format(c, at, jv_str(s.p, s.n), d);
    }
    return jj_percent_format(c, at, jv_str(s.p, s.n), args);
}

FILTER(f_attr) {
    jv name;
    if (!arg(a, 0, "name", &name)) jj_fail(c, at, JJ_ERR_TYPE, "attr needs a name");
    need_str(c, at, name, "attr");
    if (v.kind == JV_DICT) {
        /* attr() looks at attributes only: a dict's keys are not attributes */
        jv m = jj_find_method(c, v, name.u.s.p, name.u.s.n);
        return m.kind != JV_UNDEF ? m : jv_undef(NULL, 0);
    }
    return jj_getattr(c, at, v, name);
}

FILTER(f_slice) {
    int64_t n = need_int(c, at, arg_or(a, 0, "slices", jv_int(1)), "slice");
    jv fill;
    bool has_fill = arg(a, 1, "fill_with", &fill) && fill.kind != JV_NONE;
    if (n < 1 || n > 100000) jj_fail(c, at, JJ_ERR_TYPE, "slice count must be positive");
    jv l = jj_iterable_to_list(c, at, v), out = jv_list_new(c, (size_t)n);
    size_t len = l.u.l->n, per = len / (size_t)n, extra = len % (size_t)n, off = 0;
    for (size_t k = 0; k < (size_t)n; k++) {
        size_t take = per + (k < extra);
        jv b = jv_list_new(c, take + 1);
        for (size_t i = 0; i < take; i++) jv_list_push(c, b.u.l, l.u.l->v[off + i]);
        off += take;
        if (has_fill && k >= extra && extra) jv_list_push(c, b.u.l, fill);
        jv_list_push(c, out.u.l, b);
    }
    return out;
}

FILTER(f_striptags) {
    (void)at, (void)a;
    jj_str s = sval(c, v);
    jj_out o = {0};
    bool in_tag = false;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] == '<')
            in_tag = true;
        else if (s.p[i] == '>' && in_tag)
            in_tag = false;
        else if (!in_tag)
            jj_out_put(c, &o, s.p + i, 1);
    }
    /* collapse whitespace like Jinja */
    jv parts = split(c, at, (jj_str){o.p ? o.p : "", o.n}, NULL, -1, false);
    jj_out r = {0};
    for (size_t i = 0; i < parts.u.l->n; i++) {
        if (i) jj_out_put(c, &r, " ", 1);
        jj_out_put(c, &r, parts.u.l->v[i].u.s.p, parts.u.l->v[i].u.s.n);
    }
    return mkstr(c, &r);
}

static const struct {
    const char *name;
    jj_fn fn;
} FILTERS[] = {
    {"length", f_length},
    {"count", f_length},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"upper", f_upper},
    {"lower", f_lower},
    {"title", f_title},
    {"capitalize", f_capitalize},
    {"replace", f_replace},
    {"join", f_join},
    {"first", f_first},
    {"last", f_last},
    {"default", f_default},
    {"d", f_default},
    {"list", f_list},
    {"items", f_items},
    {"select", f_select},
    {"reject", f_reject},
    {"selectattr", f_selectattr},
    {"rejectattr", f_rejectattr},
    {"map", f_map},
    {"string", f_string},
    {"int", f_int},
    {"float", f_float},
    {"safe", f_safe},
    {"e", f_escape},
    {"escape", f_escape},
    {"forceescape", f_escape},
    {"indent", f_indent},
    {"unique", f_unique},
    {"sort", f_sort},
    {"dictsort", f_dictsort},
    {"round", f_round},
    {"abs", f_abs},
    {"reverse", f_reverse},
    {"batch", f_batch},
    {"sum", f_sum},
    {"min", f_min},
    {"max", f_max},
    {"wordcount", f_wordcount},
    {"center", f_center},
    {"format", f_format},
    {"attr", f_attr},
    {"slice", f_slice},
    {"striptags", f_striptags},
};

jj_fn jj_find_filter(const char *name, size_t n) {
    for (size_t i = 0; i < RP_ARRAY_LEN(FILTERS); i++)
        if (strlen(FILTERS[i].name) == n && !memcmp(FILTERS[i].name, name, n)) return FILTERS[i].fn;
    return NULL;
}

/* ---- globals ---------------------------------------------------------------------------- */

static jv g_range(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)self;
    if (a->n_pos < 1 || a->n_pos > 3) jj_fail(c, at, JJ_ERR_TYPE, "range expects 1 to 3 arguments");
    int64_t start = 0, stop, step = 1;
    if (a->n_pos == 1) {
        stop = need_int(c, at, a->pos[0], "range");
    } else {
        start = need_int(c, at, a->pos[0], "range");
        stop = need_int(c, at, a->pos[1], "range");
        if (a->n_pos == 3) step = need_int(c, at, a->pos[2], "range");
    }
    if (step == 0) jj_fail(c, at, JJ_ERR_TYPE, "range() arg 3 must not be zero");
    double count = step > 0 ? ceil(((double)stop - (double)start) / (double)step)
                            : ceil(((double)start - (double)stop) / (double)-step);
    if (count > 1e7) jj_fail(c, at, RP_ERR_INVALID_ARG, "range() of more than 10 million items");
    jv l = jv_list_new(c, count > 0 ? (size_t)count : 0);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        jv_list_push(c, l.u.l, jv_int(i));
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return l;
}

static jv kwargs_dict(jj_ctx *c, const jj_node *at, const jj_args *a, uint8_t kind) {
    jv d = jv_dict_new(c, a->n_kw);
    d.kind = kind;
    for (size_t i = 0; i < a->n_pos; i++) {
        jv p = a->pos[i];
        if (p.kind != JV_DICT)
            jj_fail(c, at, JJ_ERR_TYPE, "expected a mapping argument, not %s", jv_type_name(p));
        for (size_t k = 0; k < p.u.d->n; k++) jv_dict_set(c, d.u.d, p.u.d->key[k], p.u.d->val[k]);
    }
    for (size_t i = 0; i < a->n_kw; i++)
        jv_dict_set(c, d.u.d, jv_str(a->kwname[i].p, a->kwname[i].n), a->kw[i]);
    return d;
}

static jv g_namespace(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)self;
    return kwargs_dict(c, at, a, JV_NS);
}

static jv g_dict(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)self;
    return kwargs_dict(c, at, a, JV_DICT);
}

static jv g_raise_exception(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)self;
    jv m = a->n_pos ? a->pos[0] : jv_str("", 0);
    jj_str s = sval(c, m);
    jj_fail(c, at, RP_ERR_INVALID_ARG, "raise_exception: %.*s", (int)RP_MIN(s.n, (size_t)500), s.p);
}

static jv g_strftime_now(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)self;
    jv f;
    if (!arg(a, 0, "format", &f)) jj_fail(c, at, JJ_ERR_TYPE, "strftime_now needs a format");
    jj_str fs = need_str(c, at, f, "strftime_now");
    if (fs.n > 200) jj_fail(c, at, JJ_ERR_TYPE, "strftime_now format too long");
    char fmt[208], buf[512];
    memcpy(fmt, fs.p, fs.n);
    fmt[fs.n] = 0;
    time_t t = (time_t)c->now;
    struct tm tm;
    localtime_r(&t, &tm);
    size_t n = fs.n ? strftime(buf, sizeof buf, fmt, &tm) : 0;
    char *p = jj_ctx_alloc(c, at, n + 1);
    memcpy(p, buf, n);
    return jv_str(p, n);
}

static jv joiner_call(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)at, (void)a;
    /* self is a one-element list [sep] that becomes [sep, true] after the first call */
    if (self.u.l->n == 1) {
        jv_list_push(c, self.u.l, jv_bool(true));
        return jv_str("", 0);
    }
    return self.u.l->v[0];
}

static jv g_joiner(jj_ctx *c, const jj_node *at, jv self, const jj_args *a) {
    (void)self, (void)at;
    jv state = jv_list_new(c, 2);
    jv_list_push(c, state.u.l, arg_or(a, 0, "sep", jv_str(", ", 2)));
    return func(c, "joiner", joiner_call, state);
}

jv jj_find_global(const char *name, size_t n) {
    static const jfunc funcs[] = {
        {.kind = JF_BUILTIN, .name = "range", .fn = g_range},
        {.kind = JF_BUILTIN, .name = "namespace", .fn = g_namespace},
        {.kind = JF_BUILTIN, .name = "dict", .fn = g_dict},
        {.kind = JF_BUILTIN, .name = "raise_exception", .fn = g_raise_exception},
        {.kind = JF_BUILTIN, .name = "strftime_now", .fn = g_strftime_now},
        {.kind = JF_BUILTIN, .name = "joiner", .fn = g_joiner},
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(funcs); i++)
        if (strlen(funcs[i].name) == n && !memcmp(funcs[i].name, name, n)) {
            jv v = {.kind = JV_FUNC};
            v.u.fn = &funcs[i];
            return v;
        }
    return jv_undef(NULL, 0);
}

/* ---- attribute access (needs the methods above) ------------------------------- */

static jv loop_attr(jj_ctx *c, const jj_node *at, jloop *l, const char *k, size_t n) {
    size_t len = l->n, i = l->index0;
#define IS(s) (n == sizeof(s) - 1 && !memcmp(k, s, n))
    if (IS("index")) return jv_int((int64_t)i + 1);
    if (IS("index0")) return jv_int((int64_t)i);
    if (IS("revindex")) return jv_int((int64_t)(len - i));
    if (IS("revindex0")) return jv_int((int64_t)(len - i - 1));
    if (IS("first")) return jv_bool(i == 0);
    if (IS("last")) return jv_bool(i + 1 == len);
    if (IS("length")) return jv_int((int64_t)len);
    if (IS("depth")) return jv_int(1); /* only recursive loops (unsupported) go deeper */
    if (IS("depth0")) return jv_int(0);
    if (IS("previtem")) return i ? l->items[i - 1] : jj_undef_msg(c, "there is no previous item");
    if (IS("nextitem"))
        return i + 1 < len ? l->items[i + 1] : jj_undef_msg(c, "there is no next item");
#undef IS
    (void)at;
    jv self = {.kind = JV_LOOP};
    self.u.loop = l;
    jv m = jj_find_method(c, self, k, n);
    if (m.kind != JV_UNDEF) return m;
    return jj_undef_msg(c, "'LoopContext' has no attribute '%.*s'", (int)RP_MIN(n, (size_t)100), k);
}

/* obj.key (key a string) with Jinja's rule: the object's attribute (a method)
 * first, then its item. */
jv jj_getattr(jj_ctx *c, const jj_node *at, jv obj, jv key) {
    if (obj.kind == JV_UNDEF) jj_undefined_error(c, at, obj);
    if (key.kind != JV_STR) jj_fail(c, at, JJ_ERR_TYPE, "attribute names must be strings");
    const char *k = key.u.s.p;
    size_t n = key.u.s.n;
    if (obj.kind == JV_LOOP) return loop_attr(c, at, obj.u.loop, k, n);
    if (obj.kind == JV_NS) {
        jv *v = jv_dict_gets(obj.u.d, k, n);
        return v ? *v
                 : jj_undef_msg(c, "'Namespace' has no attribute '%.*s'",
                                (int)RP_MIN(n, (size_t)100), k);
    }
    jv m = jj_find_method(c, obj, k, n);
    if (m.kind != JV_UNDEF) return m;
    if (obj.kind == JV_DICT) {
        jv *v = jv_dict_gets(obj.u.d, k, n);
        if (v) return *v;
    }
    return jj_undef_msg(c, "'%s object' has no attribute '%.*s'", jv_type_name(obj),
                        (int)RP_MIN(n, (size_t)100), k);
}
