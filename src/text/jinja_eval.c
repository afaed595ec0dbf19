/* Jinja evaluator: statements and expressions over the tree of jinja_parse.c,
 * with Jinja2's scoping (a for loop's body gets a fresh scope per iteration;
 * if does not open one; a macro runs in a scope under the one it was defined
 * in, so it sees the template's variables as they are when it is called) and
 * Python's operators (1 == 1.0 == True, str + str, list * int, // and % that
 * floor, ...).
 *
 * A runtime error longjmps to jj_render with a message naming the template
 * line and column; everything allocated lives in the render arena. */
#include "text/jinja.h"

#include "base/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_BYTES  ((size_t)256 << 20)
#define DEFAULT_MAX_OUTPUT ((size_t)64 << 20)
#define DEFAULT_MAX_STEPS  50000000ull
#define DEFAULT_MAX_DEPTH  600
#define MAX_MACRO_DEPTH    64

/* ---- scopes ---------------------------------------------------------------- */

static jj_scope *scope_new(jj_ctx *c, jj_scope *parent) {
    jj_scope *s = jj_ctx_alloc(c, NULL, sizeof *s);
    s->parent = parent;
    return s;
}

static void scope_set(jj_ctx *c, jj_scope *s, jj_str name, jv v) {
    jv_dict_set(c, &s->vars, jv_str(name.p, name.n), v);
}

static jv lookup(jj_ctx *c, jj_scope *s, jj_str name) {
    for (; s; s = s->parent) {
        jv *v = jv_dict_gets(&s->vars, name.p, name.n);
        if (v) return *v;
    }
    if (c->globals) {
        jv *v = jv_dict_gets(c->globals, name.p, name.n);
        if (v) return *v;
    }
    jv g = jj_find_global(name.p, name.n);
    if (g.kind != JV_UNDEF) return g;
    return jj_undef_msg(c, "'%.*s' is undefined", (int)RP_MIN(name.n, (size_t)100), name.p);
}

/* ---- containers --------------------------------------------------------------- */

static jv new_str(jj_ctx *c, const jj_node *at, const char *a, size_t na, const char *b,
                  size_t nb) {
    if (na + nb > c->lim.max_output)
        jj_fail(c, at, RP_ERR_INVALID_ARG, "string longer than the output limit");
    char *p = jj_ctx_alloc(c, at, na + nb + 1);
    if (na) memcpy(p, a, na);
    if (nb) memcpy(p + na, b, nb);
    return jv_str(p, na + nb);
}

/* ---- attribute and item access ------------------------------------------------- */

static bool as_index(jv k, int64_t *i) {
    if (k.kind == JV_INT)
        *i = k.u.i;
    else if (k.kind == JV_BOOL)
        *i = k.u.b;
    else
        return false;
    return true;
}

/* obj[key] with Jinja's rule: the item first, then (for a string key) the attribute. */
static jv getitem(jj_ctx *c, const jj_node *at, jv obj, jv key) {
    if (obj.kind == JV_UNDEF) jj_undefined_error(c, at, obj);
    int64_t i;
    if (obj.kind == JV_DICT) {
        jv *v = jv_dict_get(obj.u.d, key);
        if (v) return *v;
    } else if (obj.kind == JV_LIST && as_index(key, &i)) {
        int64_t n = (int64_t)obj.u.l->n;
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.u.l->v[i];
        return jj_undef_msg(c, "%s index %lld out of range", jv_type_name(obj),
                            (long long)(i < 0 ? i - n : i));
    } else if (obj.kind == JV_STR && as_index(key, &i)) {
        int64_t n = (int64_t)jj_utf8_len(obj.u.s.p, obj.u.s.n);
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
            size_t b = jj_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)i);
            size_t e = b + jj_utf8_offset(obj.u.s.p + b, obj.u.s.n - b, 1);
            return jv_str(obj.u.s.p + b, e - b);
        }
        return jj_undef_msg(c, "string index out of range");
    }
    if (key.kind == JV_STR) return jj_getattr(c, at, obj, key);
    if (obj.kind == JV_DICT) return jj_undef_msg(c, "'dict object' has no item of that key");
    return jj_undef_msg(c, "'%s object' has no item of that key", jv_type_name(obj));
}

static int64_t slice_bound(jj_ctx *c, const jj_node *at, jv v, int64_t def, int64_t len,
                           bool neg_step) {
    if (v.kind == JV_NONE || v.kind == JV_UNDEF) return def;
    int64_t i;
    if (!as_index(v, &i)) jj_fail(c, at, JJ_ERR_TYPE, "slice indices must be integers or None");
    if (i < 0) {
        i += len;
        if (i < 0) i = neg_step ? -1 : 0;
    } else if (i >= len) {
        i = neg_step ? len - 1 : len;
    }
    return i;
}

static jv eval(jj_ctx *c, jj_scope *s, const jj_node *n);

static jv eval_slice(jj_ctx *c, jj_scope *s, const jj_node *n) {
    jv obj = eval(c, s, n->a);
    jv vb = n->b ? eval(c, s, n->b) : jv_none();
    jv ve = n->c ? eval(c, s, n->c) : jv_none();
    jv vs = n->d ? eval(c, s, n->d) : jv_none();
    if (obj.kind == JV_UNDEF) jj_undefined_error(c, n, obj);
    int64_t step = 1;
    if (vs.kind != JV_NONE && !as_index(vs, &step))
        jj_fail(c, n, JJ_ERR_TYPE, "slice step must be an integer");
    if (step == 0) jj_fail(c, n, JJ_ERR_TYPE, "slice step cannot be zero");
    bool is_str = obj.kind == JV_STR;
    if (!is_str && obj.kind != JV_LIST)
        jj_fail(c, n, JJ_ERR_TYPE, "'%s' object is not subscriptable", jv_type_name(obj));
    /* strings: slice their code points */
    jv items = is_str ? jj_iterable_to_list(c, n, obj) : obj;
    int64_t len = (int64_t)items.u.l->n;
    int64_t b = slice_bound(c, n, vb, step > 0 ? 0 : len - 1, len, step < 0);
    int64_t e = slice_bound(c, n, ve, step > 0 ? len : -1, len, step < 0);
    if (is_str && step == 1) {
        if (e <= b) return jv_str("", 0);
        size_t ob = jj_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)b);
        size_t oe = ob + jj_utf8_offset(obj.u.s.p + ob, obj.u.s.n - ob, (size_t)(e - b));
        return jv_str(obj.u.s.p + ob, oe - ob);
    }
    jv out = jv_list_new(c, 0);
    out.u.l->tuple = items.u.l->tuple;
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step)
        jv_list_push(c, out.u.l, items.u.l->v[i]);
    if (!is_str) return out;
    jj_out o = {0};
    for (size_t i = 0; i < out.u.l->n; i++)
        jj_out_put(c, &o, out.u.l->v[i].u.s.p, out.u.l->v[i].u.s.n);
    return jv_str(o.p ? o.p : "", o.n);
}

/* ---- operators ------------------------------------------------------------------- */

static bool contains(jj_ctx *c, const jj_node *at, jv item, jv box) {
    switch (box.kind) {
    case JV_UNDEF:
        return false;
    case JV_STR:
        if (item.kind != JV_STR)
            jj_fail(c, at, JJ_ERR_TYPE, "'in <string>' requires string as left operand, not %s",
                    jv_type_name(item));
        return item.u.s.n == 0 || memmem(box.u.s.p, box.u.s.n, item.u.s.p, item.u.s.n) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < box.u.l->n; i++)
            if (jv_equal(box.u.l->v[i], item)) return true;
        return false;
    case JV_DICT:
    case JV_NS:
        return jv_dict_get(box.u.d, item) != NULL;
    default:
        jj_fail(c, at, JJ_ERR_TYPE, "argument of type '%s' is not iterable", jv_type_name(box));
    }
}

static bool compare(jj_ctx *c, const jj_node *at, int op, jv a, jv b) {
    switch (op) {
    case JOP_EQ:
        return jv_equal(a, b);
    case JOP_NE:
        return !jv_equal(a, b);
    case JOP_LT:
        return jj_less(c, at, a, b);
    case JOP_GT:
        return jj_less(c, at, b, a);
    case JOP_LE:
        return !jj_less(c, at, b, a);
    case JOP_GE:
        return !jj_less(c, at, a, b);
    case JOP_IN:
        return contains(c, at, a, b);
    case JOP_NOTIN:
        return !contains(c, at, a, b);
    }
    return false;
}

static const char *op_text(int op) {
    static const char *const t[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    return op >= JOP_ADD && op <= JOP_POW ? t[op] : "?";
}

static _Noreturn void bad_operands(jj_ctx *c, const jj_node *at, int op, jv a, jv b) {
    if (a.kind == JV_UNDEF) jj_undefined_error(c, at, a);
    if (b.kind == JV_UNDEF) jj_undefined_error(c, at, b);
    if (op == JOP_ADD && a.kind == JV_STR)
        jj_fail(c, at, JJ_ERR_TYPE, "can only concatenate str (not \"%s\") to str",
                jv_type_name(b));
    if (op == JOP_ADD && a.kind == JV_LIST)
        jj_fail(c, at, JJ_ERR_TYPE, "can only concatenate %s (not \"%s\") to %s", jv_type_name(a),
                jv_type_name(b), jv_type_name(a));
    jj_fail(c, at, JJ_ERR_TYPE, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op),
            jv_type_name(a), jv_type_name(b));
}

static int64_t ival(jv v) {
    return v.kind == JV_INT ? v.u.i : (int64_t)v.u.b;
}

static jv repeat(jj_ctx *c, const jj_node *at, jv seq, int64_t times) {
    if (times <= 0) {
        if (seq.kind == JV_STR) return jv_str("", 0);
        jv l = jv_list_new(c, 0);
        l.u.l->tuple = seq.u.l->tuple;
        return l;
    }
    size_t unit = seq.kind == JV_STR ? seq.u.s.n : seq.u.l->n * sizeof(jv);
    if (unit && (uint64_t)times > c->lim.max_output / unit)
        jj_fail(c, at, RP_ERR_INVALID_ARG, "repetition result too large");
    if (seq.kind == JV_STR) {
        jj_out o = {0};
        for (int64_t i = 0; i < times; i++) jj_out_put(c, &o, seq.u.s.p, seq.u.s.n);
        return jv_str(o.p ? o.p : "", o.n);
    }
    jv l = jv_list_new(c, seq.u.l->n * (size_t)times);
    l.u.l->tuple = seq.u.l->tuple;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++) jv_list_push(c, l.u.l, seq.u.l->v[k]);
    return l;
}

static jv arith(jj_ctx *c, const jj_node *at, int op, jv a, jv b) {
    bool nums = jv_is_num(a) && jv_is_num(b);
    bool ints = nums && a.kind != JV_FLOAT && b.kind != JV_FLOAT;
    int64_t r;
    switch (op) {
    case JOP_ADD:
        if (ints) {
            if (__builtin_add_overflow(ival(a), ival(b), &r))
                jj_fail(c, at, JJ_ERR_TYPE, "integer overflow");
            return jv_int(r);
        }
        if (nums) return jv_float(jv_num(a) + jv_num(b));
        if (a.kind == JV_STR && b.kind == JV_STR)
            return new_str(c, at, a.u.s.p, a.u.s.n, b.u.s.p, b.u.s.n);
        if (a.kind == JV_LIST && b.kind == JV_LIST && a.u.l->tuple == b.u.l->tuple) {
            jv l = jv_list_new(c, a.u.l->n + b.u.l->n);
            l.u.l->tuple = a.u.l->tuple;
            for (size_t i = 0; i < a.u.l->n; i++) jv_list_push(c, l.u.l, a.u.l->v[i]);
            for (size_t i = 0; i < b.u.l->n; i++) jv_list_push(c, l.u.l, b.u.l->v[i]);
            return l;
        }
        break;
    case JOP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(ival(a), ival(b), &r))
                jj_fail(c, at, JJ_ERR_TYPE, "integer overflow");
            return jv_int(r);
        }
        if (nums) return jv_float(jv_num(a) - jv_num(b));
        break;
    case JOP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(ival(a), ival(b), &r))
                jj_fail(c, at, JJ_ERR_TYPE, "integer overflow");
            return jv_int(r);
        }
        if (nums) return jv_float(jv_num(a) * jv_num(b));
        if ((a.kind == JV_STR || a.kind == JV_LIST) && (b.kind == JV_INT || b.kind == JV_BOOL))
            return repeat(c, at, a, ival(b));
        if ((b.kind == JV_STR || b.kind == JV_LIST) && (a.kind == JV_INT || a.kind == JV_BOOL))
            return repeat(c, at, b, ival(a));
        break;
    case JOP_DIV:
        if (nums) {
            if (jv_num(b) == 0) jj_fail(c, at, JJ_ERR_TYPE, "division by zero");
            return jv_float(jv_num(a) / jv_num(b));
        }
        break;
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (ints) {
            int64_t x = ival(a), y = ival(b);
            if (y == 0) jj_fail(c, at, JJ_ERR_TYPE, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) jj_fail(c, at, JJ_ERR_TYPE, "integer overflow");
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            return jv_int(op == JOP_MOD ? m : q);
        }
        if (nums) {
            double x = jv_num(a), y = jv_num(b);
            if (y == 0) jj_fail(c, at, JJ_ERR_TYPE, "float division by zero");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return jv_float(op == JOP_MOD ? m : floor(x / y));
        }
        if (op == JOP_MOD && a.kind == JV_STR) return jj_percent_format(c, at, a, b);
        break;
    case JOP_POW:
        if (ints && ival(b) >= 0) {
            int64_t base = ival(a), e = ival(b), acc = 1;
            while (e--)
                if (__builtin_mul_overflow(acc, base, &acc))
                    jj_fail(c, at, JJ_ERR_TYPE, "integer overflow");
            return jv_int(acc);
        }
        if (nums) return jv_float(pow(jv_num(a), jv_num(b)));
        break;
    }
    bad_operands(c, at, op, a, b);
}

/* ---- calls --------------------------------------------------------------------- */

static void exec_body(jj_ctx *c, jj_scope *s, jj_node *const *body, size_t n);

static jv capture(jj_ctx *c, jj_scope *s, jj_node *const *body, size_t n) {
    jj_out *saved = c->out, buf = {0};
    c->out = &buf;
    exec_body(c, s, body, n);
    c->out = saved;
    return jv_str(buf.p ? buf.p : "", buf.n);
}

static jv call_macro(jj_ctx *c, const jj_node *at, const jfunc *f, const jj_args *a) {
    const jj_node *m = f->macro;
    if (++c->depth > c->lim.max_depth || c->depth > MAX_MACRO_DEPTH * 16)
        jj_fail(c, at, RP_ERR_INVALID_ARG, "macro calls nested too deeply");
    jj_scope *s = scope_new(c, f->closure);
    jv varargs = jv_list_new(c, 0), kwargs = jv_dict_new(c, 0);
    varargs.u.l->tuple = true;
    for (size_t i = 0; i < a->n_pos; i++) {
        if (i < m->n_targets)
            scope_set(c, s, m->targets[i], a->pos[i]);
        else
            jv_list_push(c, varargs.u.l, a->pos[i]);
    }
    jv caller = {0};
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t i = 0;
        while (i < m->n_targets && !(m->targets[i].n == a->kwname[k].n &&
                                     !memcmp(m->targets[i].p, a->kwname[k].p, a->kwname[k].n)))
            i++;
        if (i < m->n_targets) {
            if (i < a->n_pos)
                jj_fail(c, at, JJ_ERR_TYPE, "macro '%s' got multiple values for argument '%.*s'",
                        f->name, (int)a->kwname[k].n, a->kwname[k].p);
            scope_set(c, s, m->targets[i], a->kw[k]);
        } else if (a->kwname[k].n == 6 && !memcmp(a->kwname[k].p, "caller", 6)) {
            caller = a->kw[k];
        } else {
            jv_dict_set(c, kwargs.u.d, jv_str(a->kwname[k].p, a->kwname[k].n), a->kw[k]);
        }
    }
    for (size_t i = 0; i < m->n_targets; i++) {
        if (jv_dict_gets(&s->vars, m->targets[i].p, m->targets[i].n)) continue;
        /* defaults are evaluated at call time, in the macro's scope */
        jv d = m->defaults && m->defaults[i] ? eval(c, s, m->defaults[i])
                                             : jj_undef_msg(c, "parameter '%.*s' was not provided",
                                                            (int)m->targets[i].n, m->targets[i].p);
        scope_set(c, s, m->targets[i], d);
    }
    scope_set(c, s, (jj_str){"varargs", 7}, varargs);
    scope_set(c, s, (jj_str){"kwargs", 6}, kwargs);
    if (caller.kind == JV_FUNC) scope_set(c, s, (jj_str){"caller", 6}, caller);
    int ctl = c->ctl;
    jv r = capture(c, s, m->body, m->n_body);
    c->ctl = ctl;
    c->depth--;
    return r;
}

jv jj_call(jj_ctx *c, const jj_node *at, jv fn, const jj_args *a) {
    if (fn.kind == JV_UNDEF) jj_undefined_error(c, at, fn);
    if (fn.kind != JV_FUNC)
        jj_fail(c, at, JJ_ERR_TYPE, "'%s' object is not callable", jv_type_name(fn));
    jj_step(c, at);
    const jfunc *f = fn.u.fn;
    if (f->kind == JF_MACRO) return call_macro(c, at, f, a);
    return f->fn(c, at, f->self, a);
}

static void eval_args(jj_ctx *c, jj_scope *s, const jj_node *n, jj_args *a, size_t extra_pos) {
    memset(a, 0, sizeof *a);
    a->n_pos = n->n_args + extra_pos;
    if (a->n_pos) a->pos = jj_ctx_alloc(c, n, a->n_pos * sizeof(jv));
    for (size_t i = 0; i < n->n_args; i++) a->pos[i + extra_pos] = eval(c, s, n->args[i]);
    a->n_kw = n->n_kw;
    if (n->n_kw) {
        a->kw = jj_ctx_alloc(c, n, n->n_kw * sizeof(jv));
        a->kwname = n->kwnames;
        for (size_t i = 0; i < n->n_kw; i++) a->kw[i] = eval(c, s, n->kwvals[i]);
    }
}

static jv apply_filter(jj_ctx *c, jj_scope *s, const jj_node *f, jv v) {
    jj_fn fn = jj_find_filter(f->name.p, f->name.n);
    if (!fn) jj_fail(c, f, RP_ERR_FORMAT, "no filter named '%.*s'", (int)f->name.n, f->name.p);
    jj_args a;
    eval_args(c, s, f, &a, 0);
    jj_step(c, f);
    return fn(c, f, v, &a);
}

/* ---- expressions ------------------------------------------------------------------ */

static jv eval_inner(jj_ctx *c, jj_scope *s, const jj_node *n) {
    switch ((jj_kind)n->kind) {
    case JN_CONST:
        return n->val;
    case JN_NAME:
        return lookup(c, s, n->name);
    case JN_GETATTR:
        return jj_getattr(c, n, eval(c, s, n->a), jv_str(n->attr.p, n->attr.n));
    case JN_GETITEM: {
        jv obj = eval(c, s, n->a);
        return getitem(c, n, obj, eval(c, s, n->b));
    }
    case JN_SLICE:
        return eval_slice(c, s, n);
    case JN_CALL: {
        jv fn = eval(c, s, n->a);
        jj_args a;
        eval_args(c, s, n, &a, 0);
        return jj_call(c, n, fn, &a);
    }
    case JN_FILTER:
        return apply_filter(c, s, n, eval(c, s, n->a));
    case JN_TEST: {
        jj_test_fn t = jj_find_test(n->name.p, n->name.n);
        if (!t) jj_fail(c, n, RP_ERR_FORMAT, "no test named '%.*s'", (int)n->name.n, n->name.p);
        jv v = eval(c, s, n->a);
        jj_args a;
        eval_args(c, s, n, &a, 0);
        bool r = t(c, n, v, &a);
        return jv_bool(n->op ? !r : r);
    }
    case JN_UNARY: {
        jv v = eval(c, s, n->a);
        if (n->op == 'n') return jv_bool(!jv_truthy(v));
        if (v.kind == JV_UNDEF) jj_undefined_error(c, n, v);
        if (v.kind == JV_FLOAT) return jv_float(n->op == '-' ? -v.u.f : v.u.f);
        if (v.kind == JV_INT || v.kind == JV_BOOL) {
            if (n->op == '-' && ival(v) == INT64_MIN)
                jj_fail(c, n, JJ_ERR_TYPE, "integer overflow");
            return jv_int(n->op == '-' ? -ival(v) : ival(v));
        }
        jj_fail(c, n, JJ_ERR_TYPE, "bad operand type for unary %c: '%s'", n->op, jv_type_name(v));
    }
    case JN_BINARY: {
        jv a = eval(c, s, n->a);
        return arith(c, n, n->op, a, eval(c, s, n->b));
    }
    case JN_COMPARE: {
        jv left = eval(c, s, n->a);
        for (size_t i = 0; i < n->n_args; i++) {
            jv right = eval(c, s, n->args[i]);
            if (!compare(c, n, n->ops[i], left, right)) return jv_bool(false);
            left = right;
        }
        return jv_bool(true);
    }
    case JN_AND: {
        jv a = eval(c, s, n->a);
        return jv_truthy(a) ? eval(c, s, n->b) : a;
    }
    case JN_OR: {
        jv a = eval(c, s, n->a);
        return jv_truthy(a) ? a : eval(c, s, n->b);
    }
    case JN_COND:
        if (jv_truthy(eval(c, s, n->a))) return eval(c, s, n->b);
        return n->c
                   ? eval(c, s, n->c)
                   : jj_undef_msg(c, "the inline if expression evaluated to false and has no else");
    case JN_LIST:
    case JN_TUPLE: {
        jv l = jv_list_new(c, n->n_args);
        l.u.l->tuple = n->kind == JN_TUPLE;
        for (size_t i = 0; i < n->n_args; i++) jv_list_push(c, l.u.l, eval(c, s, n->args[i]));
        return l;
    }
    case JN_DICT: {
        jv d = jv_dict_new(c, n->n_args);
        for (size_t i = 0; i < n->n_args; i++) {
            jv k = eval(c, s, n->args[i]);
            if (k.kind == JV_LIST && !k.u.l->tuple)
                jj_fail(c, n->args[i], JJ_ERR_TYPE, "unhashable type: 'list'");
            if (k.kind == JV_DICT) jj_fail(c, n->args[i], JJ_ERR_TYPE, "unhashable type: 'dict'");
            jv_dict_set(c, d.u.d, k, eval(c, s, n->kwvals[i]));
        }
        return d;
    }
    case JN_CONCAT: {
        jj_out o = {0};
        for (size_t i = 0; i < n->n_args; i++) jv_write_str(c, &o, eval(c, s, n->args[i]));
        return jv_str(o.p ? o.p : "", o.n);
    }
    default:
        jj_fail(c, n, RP_ERR_INTERNAL, "statement where an expression was expected");
    }
}

static jv eval(jj_ctx *c, jj_scope *s, const jj_node *n) {
    jj_step(c, n);
    if (++c->depth > c->lim.max_depth)
        jj_fail(c, n, RP_ERR_INVALID_ARG, "expressions nested too deeply");
    jv v = eval_inner(c, s, n);
    c->depth--;
    return v;
}

/* ---- statements --------------------------------------------------------------------- */

static void assign(jj_ctx *c, jj_scope *s, const jj_node *at, const jj_str *targets, size_t n,
                   jv v) {
    if (n == 1) {
        scope_set(c, s, targets[0], v);
        return;
    }
    jv items = v.kind == JV_LIST ? v : jj_iterable_to_list(c, at, v);
    if (items.u.l->n != n)
        jj_fail(c, at, JJ_ERR_TYPE, "%s values to unpack (expected %zu, got %zu)",
                items.u.l->n > n ? "too many" : "not enough", n, items.u.l->n);
    for (size_t i = 0; i < n; i++) scope_set(c, s, targets[i], items.u.l->v[i]);
}

/* One scope serves every iteration (emptied each time, as Jinja starts each
 * iteration afresh) and one loop object is advanced in place, so a loop
 * allocates nothing per iteration. */
static void exec_for(jj_ctx *c, jj_scope *s, const jj_node *n) {
    jv it = eval(c, s, n->a);
    if (it.kind == JV_NONE) jj_fail(c, n->a, JJ_ERR_TYPE, "'NoneType' object is not iterable");
    jv src = jj_iterable_to_list(c, n->a, it);
    /* the items as they are now: appending in the body neither moves nor extends them */
    const jv *items = src.u.l->v;
    size_t count = src.u.l->n;
    jj_scope *is = scope_new(c, s);
    if (n->b) {
        jv kept = jv_list_new(c, count);
        for (size_t i = 0; i < count; i++) {
            is->vars.n = 0;
            assign(c, is, n, n->targets, n->n_targets, items[i]);
            if (jv_truthy(eval(c, is, n->b))) jv_list_push(c, kept.u.l, items[i]);
        }
        items = kept.u.l->v;
        count = kept.u.l->n;
    }
    jloop *lp = jj_ctx_alloc(c, n, sizeof *lp);
    lp->items = items;
    lp->n = count;
    jv lv = {.kind = JV_LOOP};
    lv.u.loop = lp;
    for (size_t i = 0; i < count; i++) {
        jj_step(c, n);
        is->vars.n = 0;
        lp->index0 = i;
        assign(c, is, n, n->targets, n->n_targets, items[i]);
        scope_set(c, is, (jj_str){"loop", 4}, lv);
        exec_body(c, is, n->body, n->n_body);
        if (c->ctl == 1) {
            c->ctl = 0;
            break;
        }
        c->ctl = 0;
    }
    if (!count && n->n_orelse) exec_body(c, s, n->orelse, n->n_orelse);
}

static jv make_macro(jj_ctx *c, jj_scope *s, const jj_node *n, const char *name) {
    jfunc *f = jj_ctx_alloc(c, n, sizeof *f);
    f->kind = JF_MACRO;
    f->name = name;
    f->macro = n;
    f->closure = s;
    jv v = {.kind = JV_FUNC};
    v.u.fn = f;
    return v;
}

static void exec_stmt(jj_ctx *c, jj_scope *s, const jj_node *n) {
    jj_step(c, n);
    switch ((jj_kind)n->kind) {
    case JN_TEXT:
        jj_out_put(c, c->out, n->val.u.s.p, n->val.u.s.n);
        break;
    case JN_OUTPUT:
        jv_write_str(c, c->out, eval(c, s, n->a));
        break;
    case JN_IF:
        if (jv_truthy(eval(c, s, n->a)))
            exec_body(c, s, n->body, n->n_body);
        else
            exec_body(c, s, n->orelse, n->n_orelse);
        break;
    case JN_FOR:
        exec_for(c, s, n);
        break;
    case JN_SET: {
        jv v = eval(c, s, n->b);
        if (n->a) {
            jv ns = lookup(c, s, n->a->name);
            if (ns.kind != JV_NS)
                jj_fail(c, n, JJ_ERR_TYPE, "cannot assign attribute on non-namespace object '%.*s'",
                        (int)n->a->name.n, n->a->name.p);
            jv_dict_set(c, ns.u.d, jv_str(n->a->attr.p, n->a->attr.n), v);
        } else {
            assign(c, s, n, n->targets, n->n_targets, v);
        }
        break;
    }
    case JN_SETBLOCK: {
        jv v = capture(c, s, n->body, n->n_body);
        for (size_t i = 0; i < n->n_filters; i++) v = apply_filter(c, s, n->filters[i], v);
        scope_set(c, s, n->name, v);
        break;
    }
    case JN_MACRO: {
        char *name = jj_ctx_alloc(c, n, n->name.n + 1);
        memcpy(name, n->name.p, n->name.n);
        scope_set(c, s, n->name, make_macro(c, s, n, name));
        break;
    }
    case JN_CALLBLOCK: {
        const jj_node *call = n->a;
        jv fn = eval(c, s, call->a);
        jj_args a;
        eval_args(c, s, call, &a, 0);
        jj_args b = a;
        b.n_kw = a.n_kw + 1;
        b.kw = jj_ctx_alloc(c, n, b.n_kw * sizeof(jv));
        b.kwname = jj_ctx_alloc(c, n, b.n_kw * sizeof(jj_str));
        for (size_t i = 0; i < a.n_kw; i++) {
            b.kw[i] = a.kw[i];
            b.kwname[i] = a.kwname[i];
        }
        b.kwname[a.n_kw] = (jj_str){"caller", 6};
        b.kw[a.n_kw] = make_macro(c, s, n, "caller");
        jv_write_str(c, c->out, jj_call(c, n, fn, &b));
        break;
    }
    case JN_FILTERBLOCK: {
        jv v = capture(c, s, n->body, n->n_body);
        for (size_t i = 0; i < n->n_filters; i++) v = apply_filter(c, s, n->filters[i], v);
        jv_write_str(c, c->out, v);
        break;
    }
    case JN_WITH: {
        jj_scope *w = scope_new(c, s);
        for (size_t i = 0; i < n->n_targets; i++)
            scope_set(c, w, n->targets[i], eval(c, s, n->args[i]));
        exec_body(c, w, n->body, n->n_body);
        break;
    }
    case JN_GENERATION:
        exec_body(c, s, n->body, n->n_body);
        break;
    case JN_BREAK:
        c->ctl = 1;
        break;
    case JN_CONTINUE:
        c->ctl = 2;
        break;
    default:
        jj_fail(c, n, RP_ERR_INTERNAL, "expression where a statement was expected");
    }
}

static void exec_body(jj_ctx *c, jj_scope *s, jj_node *const *body, size_t n) {
    if (++c->depth > c->lim.max_depth)
        jj_fail(c, n ? body[0] : NULL, RP_ERR_INVALID_ARG, "blocks nested too deeply");
    for (size_t i = 0; i < n && !c->ctl; i++) exec_stmt(c, s, body[i]);
    c->depth--;
}

/* ---- static checks ------------------------------------------------------------------ */

typedef struct check_ctx {
    int loops;
    const jj_node *bad;
    const char *why;
} check_ctx;

static void check_nodes(check_ctx *k, jj_node *const *v, size_t n);

static void check_node(check_ctx *k, const jj_node *n) {
    if (!n || k->bad) return;
    if (n->kind == JN_FILTER && !jj_find_filter(n->name.p, n->name.n)) {
        k->bad = n;
        k->why = "filter";
        return;
    }
    if (n->kind == JN_TEST && !jj_find_test(n->name.p, n->name.n)) {
        k->bad = n;
        k->why = "test";
        return;
    }
    if ((n->kind == JN_BREAK || n->kind == JN_CONTINUE) && !k->loops) {
        k->bad = n;
        k->why = "loop";
        return;
    }
    check_node(k, n->a);
    check_node(k, n->b);
    check_node(k, n->c);
    check_node(k, n->d);
    check_nodes(k, n->args, n->n_args);
    check_nodes(k, n->kwvals, n->n_kw);
    check_nodes(k, n->filters, n->n_filters);
    if (n->defaults) check_nodes(k, n->defaults, n->n_targets);
    int loops = k->loops;
    if (n->kind == JN_MACRO || n->kind == JN_CALLBLOCK) k->loops = 0;
    if (n->kind == JN_FOR) k->loops++;
    check_nodes(k, n->body, n->n_body);
    if (n->kind == JN_FOR) k->loops--;
    check_nodes(k, n->orelse, n->n_orelse);
    k->loops = loops;
}

static void check_nodes(check_ctx *k, jj_node *const *v, size_t n) {
    for (size_t i = 0; i < n && !k->bad; i++) check_node(k, v[i]);
}

rp_status jj_validate(const jj_template *t) {
    check_ctx k = {0};
    check_nodes(&k, t->body, t->n_body);
    if (!k.bad) return RP_OK;
    const jj_node *n = k.bad;
    if (!strcmp(k.why, "loop"))
        return rp_fail(RP_ERR_FORMAT, "chat template line %d, column %d: '%s' outside a for loop",
                       n->line, n->col, n->kind == JN_BREAK ? "break" : "continue");
    return rp_fail(RP_ERR_FORMAT, "chat template line %d, column %d: no %s named '%.*s'", n->line,
                   n->col, k.why, (int)RP_MIN(n->name.n, (size_t)60), n->name.p);
}

/* ---- entry ----------------------------------------------------------------------------- */

rp_status jj_render(const jj_template *t, jj_arena *values, const jdict *globals, int64_t now,
                    const jj_limits *lim, char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    jj_ctx *c = calloc(1, sizeof *c);
    if (!c) return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
    c->arena = values;
    if (lim) c->lim = *lim;
    if (!c->lim.max_bytes) c->lim.max_bytes = DEFAULT_MAX_BYTES;
    if (!c->lim.max_output) c->lim.max_output = DEFAULT_MAX_OUTPUT;
    if (!c->lim.max_steps) c->lim.max_steps = DEFAULT_MAX_STEPS;
    if (!c->lim.max_depth) c->lim.max_depth = DEFAULT_MAX_DEPTH;
    if (!values->limit || values->limit > values->used + c->lim.max_bytes)
        values->limit = values->used + c->lim.max_bytes;
    c->globals = globals;
    c->now = now;
    rp_status st = RP_OK;
    if (setjmp(c->jb)) {
        st = rp_fail(c->status ? c->status : RP_ERR_INTERNAL, "%s", c->msg);
    } else {
        jj_out o = {0};
        c->out = &o;
        c->root = scope_new(c, NULL);
        exec_body(c, c->root, t->body, t->n_body);
        char *r = malloc(o.n + 1);
        if (!r) {
            st = rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
        } else {
            if (o.n) memcpy(r, o.p, o.n);
            r[o.n] = 0;
            *out = r;
            if (out_len) *out_len = o.n;
        }
    }
    free(c);
    return st;
}
