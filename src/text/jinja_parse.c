/* Jinja parser: tokens -> tree, with Jinja2's grammar and precedence
 * (jinja2/parser.py, lowest first):
 *
 *   expr     := or ("if" or ("else" expr)?)*         ternary
 *   or       := and ("or" and)*
 *   and      := not ("and" not)*
 *   not      := "not" not | compare
 *   compare  := math1 (("=="|"!="|"<"|"<="|">"|">="|"in"|"not" "in") math1)*
 *   math1    := concat (("+"|"-") concat)*
 *   concat   := math2 ("~" math2)*
 *   math2    := pow (("*"|"/"|"//"|"%") pow)*
 *   pow      := unary ("**" unary)*
 *   unary    := ("-"|"+") unary-without-filters | primary postfix filters
 *   postfix  := ("." name | "[" subscript "]" | "(" args ")")*
 *   filters  := ("|" name args? | "is" "not"? name (args | primary)? | "(" args ")")*
 *
 * so filters bind tighter than any operator (`a + b|trim` trims b) and unary
 * minus tighter than `**` (`-2**2` is 4), as in Jinja. */
#include "text/jinja.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

#define MAX_NEST 300

typedef struct parser {
    jj_arena *a;
    const jj_tok *t;
    size_t n, i;
    int nest;
    jmp_buf jb;
    rp_status status;
} parser;

/* ---- errors and token helpers -------------------------------------------- */

static _Noreturn void pfail_at(parser *P, const jj_tok *t, rp_status s, const char *fmt, ...)
    RP_PRINTF(4, 5);
static _Noreturn void pfail_at(parser *P, const jj_tok *t, rp_status s, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    P->status = rp_fail(s, "chat template line %d, column %d: %s", t->line, t->col, msg);
    longjmp(P->jb, 1);
}

static const jj_tok *cur(const parser *P) {
    return &P->t[P->i];
}

static void next(parser *P) {
    if (P->t[P->i].kind != JT_EOF) P->i++;
}

static bool tok_is(const jj_tok *t, jj_tok_kind k, const char *text) {
    if (t->kind != k) return false;
    if (!text) return true;
    size_t n = strlen(text);
    return t->n == n && !memcmp(t->p, text, n);
}

static bool is_op(const parser *P, const char *op) {
    return tok_is(cur(P), JT_OP, op);
}
static bool is_name(const parser *P, const char *name) {
    return tok_is(cur(P), JT_NAME, name);
}

static bool skip_op(parser *P, const char *op) {
    if (!is_op(P, op)) return false;
    next(P);
    return true;
}
static bool skip_name(parser *P, const char *name) {
    if (!is_name(P, name)) return false;
    next(P);
    return true;
}

static const char *describe(const jj_tok *t, char *buf, size_t size) {
    switch (t->kind) {
    case JT_EOF:
        return "end of template";
    case JT_DATA:
        return "template data";
    case JT_VAR_BEGIN:
        return "'{{'";
    case JT_VAR_END:
        return "'}}'";
    case JT_BLOCK_BEGIN:
        return "'{%'";
    case JT_BLOCK_END:
        return "'%}'";
    case JT_STRING:
        return "a string";
    case JT_INT:
    case JT_FLOAT:
        return "a number";
    default:
        snprintf(buf, size, "'%.*s'", (int)RP_MIN(t->n, (size_t)40), t->p);
        return buf;
    }
}

static _Noreturn void unexpected(parser *P, const char *wanted) {
    char buf[64];
    pfail_at(P, cur(P), RP_ERR_FORMAT, "unexpected %s, expected %s",
             describe(cur(P), buf, sizeof buf), wanted);
}

static void expect_op(parser *P, const char *op) {
    if (!skip_op(P, op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(P, w);
    }
}

static jj_str expect_name(parser *P) {
    if (cur(P)->kind != JT_NAME) unexpected(P, "a name");
    jj_str s = {cur(P)->p, cur(P)->n};
    next(P);
    return s;
}

static void expect_block_end(parser *P) {
    if (cur(P)->kind != JT_BLOCK_END) unexpected(P, "'%}'");
    next(P);
}

/* ---- nodes and growable lists --------------------------------------------- */

static void *palloc(parser *P, size_t n) {
    void *p = jj_alloc(P->a, n);
    if (!p) {
        P->status = rp_fail(RP_ERR_NOMEM, "chat template: out of memory while parsing");
        longjmp(P->jb, 1);
    }
    return p;
}

static jj_node *node(parser *P, jj_kind k, const jj_tok *at) {
    jj_node *n = palloc(P, sizeof *n);
    n->kind = (uint8_t)k;
    n->line = at->line;
    n->col = at->col;
    return n;
}

typedef struct nvec {
    jj_node **v;
    size_t n, cap;
} nvec;

static void nvec_push(parser *P, nvec *v, jj_node *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jj_node **nv = palloc(P, cap * sizeof *nv);
        if (v->n) memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

typedef struct svec {
    jj_str *v;
    size_t n, cap;
} svec;

static void svec_push(parser *P, svec *v, jj_str x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jj_str *nv = palloc(P, cap * sizeof *nv);
        if (v->n) memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static void enter(parser *P) {
    if (++P->nest > MAX_NEST)
        pfail_at(P, cur(P), RP_ERR_FORMAT, "expressions or blocks nested more than %d deep",
                 MAX_NEST);
}
static void leave(parser *P) {
    P->nest--;
}

/* ---- expressions ---------------------------------------------------------- */

static jj_node *parse_expr(parser *P);
static jj_node *parse_or(parser *P);
static jj_node *parse_unary(parser *P, bool with_filter);
static jj_node *parse_primary(parser *P);
static jj_node *parse_postfix(parser *P, jj_node *n);

/* Call arguments after "(": positional, then name=value keywords. */
static void parse_call_args(parser *P, jj_node *n) {
    nvec pos = {0}, kwv = {0};
    svec kwn = {0};
    expect_op(P, "(");
    while (!is_op(P, ")")) {
        if (pos.n + kwv.n) expect_op(P, ",");
        if (is_op(P, ")")) break; /* trailing comma */
        if (is_op(P, "*") || is_op(P, "**"))
            pfail_at(P, cur(P), RP_ERR_UNSUPPORTED,
                     "*args and **kwargs in calls are not supported");
        if (cur(P)->kind == JT_NAME && tok_is(&P->t[P->i + 1], JT_OP, "=")) {
            jj_str k = expect_name(P);
            next(P);
            svec_push(P, &kwn, k);
            nvec_push(P, &kwv, parse_expr(P));
        } else {
            if (kwv.n)
                pfail_at(P, cur(P), RP_ERR_FORMAT,
                         "a positional argument follows a keyword argument");
            nvec_push(P, &pos, parse_expr(P));
        }
    }
    next(P);
    n->args = pos.v;
    n->n_args = pos.n;
    n->kwnames = kwn.v;
    n->kwvals = kwv.v;
    n->n_kw = kwv.n;
}

/* A filter or test name (dotted names allowed, as Jinja does). */
static jj_str parse_dotted(parser *P) {
    jj_str s = expect_name(P);
    while (is_op(P, ".") && P->t[P->i + 1].kind == JT_NAME) {
        next(P);
        jj_str x = expect_name(P);
        s.n = (size_t)(x.p + x.n - s.p);
    }
    return s;
}

static jj_node *parse_filter(parser *P, jj_node *on) {
    const jj_tok *at = cur(P);
    jj_node *n = node(P, JN_FILTER, at);
    n->a = on;
    n->name = parse_dotted(P);
    if (is_op(P, "(")) parse_call_args(P, n);
    return n;
}

static jj_node *parse_filter_expr(parser *P, jj_node *n) {
    for (;;) {
        if (is_op(P, "|")) {
            next(P);
            n = parse_filter(P, n);
        } else if (is_name(P, "is")) {
            const jj_tok *at = cur(P);
            next(P);
            jj_node *t = node(P, JN_TEST, at);
            t->a = n;
            if (skip_name(P, "not")) t->op = 1;
            t->name = parse_dotted(P);
            const jj_tok *c = cur(P);
            if (is_op(P, "(")) {
                parse_call_args(P, t);
            } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT ||
                        c->kind == JT_FLOAT || is_op(P, "[") || is_op(P, "{")) &&
                       !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
                if (is_name(P, "is"))
                    pfail_at(P, c, RP_ERR_FORMAT, "you cannot chain multiple tests with 'is'");
                jj_node *arg = parse_postfix(P, parse_primary(P));
                t->args = palloc(P, sizeof *t->args);
                t->args[0] = arg;
                t->n_args = 1;
            }
            n = t;
        } else if (is_op(P, "(")) {
            jj_node *c = node(P, JN_CALL, cur(P));
            c->a = n;
            parse_call_args(P, c);
            n = c;
        } else {
            return n;
        }
    }
}

/* Inside [ ]: an index, or a slice a:b:c with any part omitted. */
static jj_node *parse_subscript(parser *P, jj_node *on, const jj_tok *at) {
    jj_node *parts[3] = {0};
    bool slice = false;
    for (int k = 0; k < 3; k++) {
        if (!is_op(P, ":") && !is_op(P, "]")) parts[k] = parse_expr(P);
        if (k < 2 && skip_op(P, ":")) {
            slice = true;
            continue;
        }
        break;
    }
    if (!slice && is_op(P, ","))
        pfail_at(P, cur(P), RP_ERR_UNSUPPORTED, "tuple subscripts are not supported");
    expect_op(P, "]");
    if (!slice) {
        if (!parts[0]) pfail_at(P, at, RP_ERR_FORMAT, "empty subscript");
        jj_node *n = node(P, JN_GETITEM, at);
        n->a = on;
        n->b = parts[0];
        return n;
    }
    jj_node *n = node(P, JN_SLICE, at);
    n->a = on;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static jj_node *parse_postfix(parser *P, jj_node *n) {
    for (;;) {
        const jj_tok *at = cur(P);
        if (skip_op(P, ".")) {
            if (cur(P)->kind == JT_INT) {
                jj_node *g = node(P, JN_GETITEM, at);
                g->a = n;
                g->b = node(P, JN_CONST, cur(P));
                g->b->val = jv_int(cur(P)->i);
                next(P);
                n = g;
            } else {
                jj_node *g = node(P, JN_GETATTR, at);
                g->a = n;
                g->attr = expect_name(P);
                n = g;
            }
        } else if (skip_op(P, "[")) {
            n = parse_subscript(P, n, at);
        } else if (is_op(P, "(")) {
            jj_node *c = node(P, JN_CALL, at);
            c->a = n;
            parse_call_args(P, c);
            n = c;
        } else {
            return n;
        }
    }
}

/* ( ... ): an expression, or a tuple when a comma appears. */
static jj_node *parse_paren(parser *P, const jj_tok *at) {
    nvec items = {0};
    bool comma = false;
    while (!is_op(P, ")")) {
        if (items.n) {
            expect_op(P, ",");
            comma = true;
            if (is_op(P, ")")) break;
        }
        nvec_push(P, &items, parse_expr(P));
    }
    next(P);
    if (items.n == 1 && !comma) return items.v[0];
    jj_node *n = node(P, JN_TUPLE, at);
    n->args = items.v;
    n->n_args = items.n;
    return n;
}

static jj_node *parse_list_lit(parser *P, const jj_tok *at) {
    jj_node *n = node(P, JN_LIST, at);
    nvec items = {0};
    while (!is_op(P, "]")) {
        if (items.n) {
            expect_op(P, ",");
            if (is_op(P, "]")) break;
        }
        nvec_push(P, &items, parse_expr(P));
    }
    next(P);
    n->args = items.v;
    n->n_args = items.n;
    return n;
}

static jj_node *parse_dict_lit(parser *P, const jj_tok *at) {
    jj_node *n = node(P, JN_DICT, at);
    nvec keys = {0}, vals = {0};
    while (!is_op(P, "}")) {
        if (keys.n) {
            expect_op(P, ",");
            if (is_op(P, "}")) break;
        }
        nvec_push(P, &keys, parse_expr(P));
        expect_op(P, ":");
        nvec_push(P, &vals, parse_expr(P));
    }
    next(P);
    n->args = keys.v;
    n->n_args = keys.n;
    n->kwvals = vals.v;
    n->n_kw = vals.n;
    return n;
}

static jj_node *parse_primary(parser *P) {
    const jj_tok *t = cur(P);
    enter(P);
    jj_node *n;
    if (t->kind == JT_NAME) {
        next(P);
        n = node(P, JN_CONST, t);
        if (tok_is(t, JT_NAME, "true") || tok_is(t, JT_NAME, "True"))
            n->val = jv_bool(true);
        else if (tok_is(t, JT_NAME, "false") || tok_is(t, JT_NAME, "False"))
            n->val = jv_bool(false);
        else if (tok_is(t, JT_NAME, "none") || tok_is(t, JT_NAME, "None"))
            n->val = jv_none();
        else {
            n->kind = JN_NAME;
            n->name = (jj_str){t->p, t->n};
        }
    } else if (t->kind == JT_STRING) {
        /* adjacent literals concatenate ("a" "b") */
        size_t len = 0, k = P->i;
        while (P->t[k].kind == JT_STRING) len += P->t[k++].n;
        char *buf = palloc(P, len + 1);
        size_t o = 0;
        while (cur(P)->kind == JT_STRING) {
            memcpy(buf + o, cur(P)->p, cur(P)->n);
            o += cur(P)->n;
            next(P);
        }
        n = node(P, JN_CONST, t);
        n->val = jv_str(buf, len);
    } else if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        next(P);
        n = node(P, JN_CONST, t);
        n->val = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
    } else if (skip_op(P, "(")) {
        n = parse_paren(P, t);
    } else if (skip_op(P, "[")) {
        n = parse_list_lit(P, t);
    } else if (skip_op(P, "{")) {
        n = parse_dict_lit(P, t);
    } else {
        unexpected(P, "an expression");
    }
    leave(P);
    return n;
}

static jj_node *parse_unary(parser *P, bool with_filter) {
    const jj_tok *at = cur(P);
    jj_node *n;
    enter(P);
    if (is_op(P, "-") || is_op(P, "+")) {
        char op = *at->p;
        next(P);
        n = node(P, JN_UNARY, at);
        n->op = (uint8_t)op;
        n->a = parse_unary(P, false);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    leave(P);
    return n;
}

static jj_node *binary(parser *P, const jj_tok *at, int op, jj_node *a, jj_node *b) {
    jj_node *n = node(P, JN_BINARY, at);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jj_node *parse_pow(parser *P) {
    jj_node *n = parse_unary(P, true);
    while (is_op(P, "**")) {
        const jj_tok *at = cur(P);
        next(P);
        n = binary(P, at, JOP_POW, n, parse_unary(P, true));
    }
    return n;
}

static jj_node *parse_math2(parser *P) {
    jj_node *n = parse_pow(P);
    for (;;) {
        const jj_tok *at = cur(P);
        int op = is_op(P, "*")    ? JOP_MUL
                 : is_op(P, "/")  ? JOP_DIV
                 : is_op(P, "//") ? JOP_FLOORDIV
                 : is_op(P, "%")  ? JOP_MOD
                                  : 0;
        if (!op) return n;
        next(P);
        n = binary(P, at, op, n, parse_pow(P));
    }
}

static jj_node *parse_concat(parser *P) {
    const jj_tok *at = cur(P);
    jj_node *first = parse_math2(P);
    if (!is_op(P, "~")) return first;
    nvec parts = {0};
    nvec_push(P, &parts, first);
    while (skip_op(P, "~")) nvec_push(P, &parts, parse_math2(P));
    jj_node *n = node(P, JN_CONCAT, at);
    n->args = parts.v;
    n->n_args = parts.n;
    return n;
}

static jj_node *parse_math1(parser *P) {
    jj_node *n = parse_concat(P);
    for (;;) {
        const jj_tok *at = cur(P);
        int op = is_op(P, "+") ? JOP_ADD : is_op(P, "-") ? JOP_SUB : 0;
        if (!op) return n;
        next(P);
        n = binary(P, at, op, n, parse_concat(P));
    }
}

static jj_node *parse_compare(parser *P) {
    const jj_tok *at = cur(P);
    jj_node *first = parse_math1(P);
    nvec rhs = {0};
    uint8_t ops[64];
    for (;;) {
        int op = is_op(P, "==")     ? JOP_EQ
                 : is_op(P, "!=")   ? JOP_NE
                 : is_op(P, "<")    ? JOP_LT
                 : is_op(P, "<=")   ? JOP_LE
                 : is_op(P, ">")    ? JOP_GT
                 : is_op(P, ">=")   ? JOP_GE
                 : is_name(P, "in") ? JOP_IN
                                    : 0;
        if (!op && is_name(P, "not") && tok_is(&P->t[P->i + 1], JT_NAME, "in")) {
            next(P);
            op = JOP_NOTIN;
        }
        if (!op) break;
        if (rhs.n >= RP_ARRAY_LEN(ops))
            pfail_at(P, cur(P), RP_ERR_FORMAT, "comparison chain too long");
        next(P);
        ops[rhs.n] = (uint8_t)op;
        nvec_push(P, &rhs, parse_math1(P));
    }
    if (!rhs.n) return first;
    jj_node *n = node(P, JN_COMPARE, at);
    n->a = first;
    n->args = rhs.v;
    n->n_args = rhs.n;
    n->ops = palloc(P, rhs.n);
    memcpy(n->ops, ops, rhs.n);
    return n;
}

static jj_node *parse_not(parser *P) {
    const jj_tok *at = cur(P);
    if (skip_name(P, "not")) {
        enter(P);
        jj_node *n = node(P, JN_UNARY, at);
        n->op = 'n';
        n->a = parse_not(P);
        leave(P);
        return n;
    }
    return parse_compare(P);
}

/* a (word b)*, left-associative: "and" over not-expressions, "or" over and-expressions. */
static jj_node *parse_logic(parser *P, const char *word, jj_kind kind,
                            jj_node *(*operand)(parser *)) {
    jj_node *n = operand(P);
    while (is_name(P, word)) {
        const jj_tok *at = cur(P);
        next(P);
        jj_node *x = node(P, kind, at);
        x->a = n;
        x->b = operand(P);
        n = x;
    }
    return n;
}

static jj_node *parse_and(parser *P) {
    return parse_logic(P, "and", JN_AND, parse_not);
}

static jj_node *parse_or(parser *P) {
    return parse_logic(P, "or", JN_OR, parse_and);
}

static jj_node *parse_expr(parser *P) {
    enter(P);
    jj_node *n = parse_or(P);
    while (is_name(P, "if")) {
        const jj_tok *at = cur(P);
        next(P);
        jj_node *c = node(P, JN_COND, at);
        c->b = n;
        c->a = parse_or(P);
        if (skip_name(P, "else")) c->c = parse_expr(P);
        n = c;
    }
    leave(P);
    return n;
}

/* Comma-separated expressions: one is itself, several a tuple ({{ a, b }},
 * {% set x = 1, 2 %}). */
static jj_node *parse_tuple(parser *P) {
    const jj_tok *at = cur(P);
    jj_node *first = parse_expr(P);
    if (!is_op(P, ",")) return first;
    nvec items = {0};
    nvec_push(P, &items, first);
    while (skip_op(P, ",")) {
        if (cur(P)->kind == JT_VAR_END || cur(P)->kind == JT_BLOCK_END) break;
        nvec_push(P, &items, parse_expr(P));
    }
    jj_node *n = node(P, JN_TUPLE, at);
    n->args = items.v;
    n->n_args = items.n;
    return n;
}

/* ---- statements ------------------------------------------------------------ */

typedef struct body {
    nvec v;
    jj_str end; /* which end tag stopped it */
} body;

static void parse_body(parser *P, body *b, const char *const *ends, const jj_tok *open);

/* Assignment / loop targets: a name, names separated by commas, optionally in
 * parentheses. */
static void parse_targets(parser *P, svec *names) {
    bool paren = skip_op(P, "(");
    do {
        if (paren && is_op(P, ")")) break;
        svec_push(P, names, expect_name(P));
    } while (skip_op(P, ","));
    if (paren) expect_op(P, ")");
}

static jj_node *parse_for(parser *P, const jj_tok *at) {
    jj_node *n = node(P, JN_FOR, at);
    svec t = {0};
    parse_targets(P, &t);
    n->targets = t.v;
    n->n_targets = t.n;
    if (!skip_name(P, "in")) unexpected(P, "'in'");
    /* the iterable is an expression without the ternary (its "if" filters) */
    const jj_tok *it = cur(P);
    jj_node *iter = parse_or(P);
    if (is_op(P, ",")) {
        nvec items = {0};
        nvec_push(P, &items, iter);
        while (skip_op(P, ",")) nvec_push(P, &items, parse_or(P));
        iter = node(P, JN_TUPLE, it);
        iter->args = items.v;
        iter->n_args = items.n;
    }
    n->a = iter;
    if (skip_name(P, "if")) n->b = parse_expr(P);
    if (is_name(P, "recursive"))
        pfail_at(P, cur(P), RP_ERR_UNSUPPORTED, "recursive for loops are not supported");
    expect_block_end(P);
    static const char *const ends[] = {"endfor", "else", NULL};
    body b = {0};
    parse_body(P, &b, ends, at);
    n->body = b.v.v;
    n->n_body = b.v.n;
    if (b.end.n == 4) {
        static const char *const ends2[] = {"endfor", NULL};
        body e = {0};
        parse_body(P, &e, ends2, at);
        n->orelse = e.v.v;
        n->n_orelse = e.v.n;
    }
    return n;
}

static jj_node *parse_if(parser *P, const jj_tok *at) {
    jj_node *n = node(P, JN_IF, at);
    n->a = parse_tuple(P);
    expect_block_end(P);
    static const char *const ends[] = {"endif", "elif", "else", NULL};
    body b = {0};
    parse_body(P, &b, ends, at);
    n->body = b.v.v;
    n->n_body = b.v.n;
    if (b.end.n == 4 && !memcmp(b.end.p, "elif", 4)) {
        enter(P);
        jj_node *e = parse_if(P, &P->t[P->i - 1]);
        leave(P);
        n->orelse = palloc(P, sizeof *n->orelse);
        n->orelse[0] = e;
        n->n_orelse = 1;
    } else if (b.end.n == 4) {
        static const char *const ends2[] = {"endif", NULL};
        body e = {0};
        parse_body(P, &e, ends2, at);
        n->orelse = e.v.v;
        n->n_orelse = e.v.n;
    }
    return n;
}

static void parse_filter_chain(parser *P, jj_node *n) {
    nvec f = {0};
    do nvec_push(P, &f, parse_filter(P, NULL));
    while (skip_op(P, "|"));
    n->filters = f.v;
    n->n_filters = f.n;
}

static jj_node *parse_set(parser *P, const jj_tok *at) {
    jj_node *n = node(P, JN_SET, at);
    if (cur(P)->kind == JT_NAME && tok_is(&P->t[P->i + 1], JT_OP, ".")) {
        jj_node *r = node(P, JN_NSREF, cur(P));
        r->name = expect_name(P);
        next(P);
        r->attr = expect_name(P);
        n->a = r;
    } else {
        svec t = {0};
        parse_targets(P, &t);
        n->targets = t.v;
        n->n_targets = t.n;
    }
    if (skip_op(P, "=")) {
        n->b = parse_tuple(P);
        expect_block_end(P);
        return n;
    }
    /* block set: {% set x %}...{% endset %}, optionally {% set x | filter %} */
    if (n->a || n->n_targets != 1) unexpected(P, "'='");
    n->kind = JN_SETBLOCK;
    n->name = n->targets[0];
    if (skip_op(P, "|")) parse_filter_chain(P, n);
    expect_block_end(P);
    static const char *const ends[] = {"endset", NULL};
    body b = {0};
    parse_body(P, &b, ends, at);
    n->body = b.v.v;
    n->n_body = b.v.n;
    return n;
}

/* (a, b=default, ...) of a macro or a call block's caller. */
static void parse_params(parser *P, jj_node *n) {
    svec names = {0};
    nvec defs = {0};
    expect_op(P, "(");
    while (!is_op(P, ")")) {
        if (names.n) expect_op(P, ",");
        if (is_op(P, ")")) break;
        svec_push(P, &names, expect_name(P));
        jj_node *d = NULL;
        if (skip_op(P, "="))
            d = parse_expr(P);
        else if (defs.n && defs.v[defs.n - 1])
            pfail_at(P, cur(P), RP_ERR_FORMAT,
                     "a parameter without a default follows one with a default");
        nvec_push(P, &defs, d);
    }
    next(P);
    n->targets = names.v;
    n->n_targets = names.n;
    n->defaults = defs.v;
}

static jj_node *parse_macro(parser *P, const jj_tok *at) {
    jj_node *n = node(P, JN_MACRO, at);
    n->name = expect_name(P);
    parse_params(P, n);
    expect_block_end(P);
    static const char *const ends[] = {"endmacro", NULL};
    body b = {0};
    parse_body(P, &b, ends, at);
    n->body = b.v.v;
    n->n_body = b.v.n;
    return n;
}

static jj_node *parse_call_block(parser *P, const jj_tok *at) {
    jj_node *n = node(P, JN_CALLBLOCK, at);
    if (is_op(P, "(")) parse_params(P, n);
    n->a = parse_expr(P);
    if (n->a->kind != JN_CALL) pfail_at(P, at, RP_ERR_FORMAT, "{%% call %%} needs a macro call");
    expect_block_end(P);
    static const char *const ends[] = {"endcall", NULL};
    body b = {0};
    parse_body(P, &b, ends, at);
    n->body = b.v.v;
    n->n_body = b.v.n;
    return n;
}

static jj_node *parse_with(parser *P, const jj_tok *at) {
    jj_node *n = node(P, JN_WITH, at);
    svec names = {0};
    nvec vals = {0};
    while (cur(P)->kind != JT_BLOCK_END) {
        if (names.n) expect_op(P, ",");
        svec_push(P, &names, expect_name(P));
        expect_op(P, "=");
        nvec_push(P, &vals, parse_expr(P));
    }
    expect_block_end(P);
    n->targets = names.v;
    n->n_targets = names.n;
    n->args = vals.v;
    n->n_args = vals.n;
    static const char *const ends[] = {"endwith", NULL};
    body b = {0};
    parse_body(P, &b, ends, at);
    n->body = b.v.v;
    n->n_body = b.v.n;
    return n;
}

static jj_node *parse_simple_block(parser *P, jj_kind k, const jj_tok *at, const char *end) {
    jj_node *n = node(P, k, at);
    if (k == JN_FILTERBLOCK) parse_filter_chain(P, n);
    expect_block_end(P);
    const char *ends[] = {end, NULL};
    body b = {0};
    parse_body(P, &b, ends, at);
    n->body = b.v.v;
    n->n_body = b.v.n;
    return n;
}

/* After "{%": one statement (its whole block for compound ones). */
static jj_node *parse_statement(parser *P) {
    const jj_tok *at = cur(P);
    if (at->kind != JT_NAME) unexpected(P, "a statement name");
    next(P);
    if (tok_is(at, JT_NAME, "for")) return parse_for(P, at);
    if (tok_is(at, JT_NAME, "if")) return parse_if(P, at);
    if (tok_is(at, JT_NAME, "set")) return parse_set(P, at);
    if (tok_is(at, JT_NAME, "macro")) return parse_macro(P, at);
    if (tok_is(at, JT_NAME, "call")) return parse_call_block(P, at);
    if (tok_is(at, JT_NAME, "filter"))
        return parse_simple_block(P, JN_FILTERBLOCK, at, "endfilter");
    if (tok_is(at, JT_NAME, "with")) return parse_with(P, at);
    if (tok_is(at, JT_NAME, "generation"))
        return parse_simple_block(P, JN_GENERATION, at, "endgeneration");
    if (tok_is(at, JT_NAME, "break") || tok_is(at, JT_NAME, "continue")) {
        jj_node *n = node(P, *at->p == 'b' ? JN_BREAK : JN_CONTINUE, at);
        expect_block_end(P);
        return n;
    }
    static const char *const unsupported[] = {"include", "extends", "import", "from",
                                              "block",   "do",      "trans",  "autoescape"};
    for (size_t k = 0; k < RP_ARRAY_LEN(unsupported); k++)
        if (tok_is(at, JT_NAME, unsupported[k]))
            pfail_at(P, at, RP_ERR_UNSUPPORTED,
                     "'%s' statements are not supported in chat templates", unsupported[k]);
    pfail_at(P, at, RP_ERR_FORMAT, "unknown statement '%.*s'", (int)RP_MIN(at->n, (size_t)40),
             at->p);
}

static bool is_end(const jj_tok *t, const char *const *ends) {
    for (; ends && *ends; ends++)
        if (tok_is(t, JT_NAME, *ends)) return true;
    return false;
}

/* Statements until one of ends (consumed with its tag when it is an end*
 * tag; "else"/"elif" are consumed up to their "%}" or condition), or the end
 * of the template when ends is NULL. */
static void parse_body(parser *P, body *b, const char *const *ends, const jj_tok *open) {
    enter(P);
    for (;;) {
        const jj_tok *t = cur(P);
        if (t->kind == JT_EOF) {
            if (!ends) break;
            pfail_at(P, open, RP_ERR_FORMAT, "unexpected end of template: missing {%% %s %%}",
                     ends[0]);
        }
        if (t->kind == JT_DATA) {
            jj_node *n = node(P, JN_TEXT, t);
            n->val = jv_str(t->p, t->n);
            nvec_push(P, &b->v, n);
            next(P);
        } else if (t->kind == JT_VAR_BEGIN) {
            next(P);
            jj_node *n = node(P, JN_OUTPUT, t);
            n->a = parse_tuple(P);
            if (cur(P)->kind != JT_VAR_END) unexpected(P, "'}}'");
            next(P);
            nvec_push(P, &b->v, n);
        } else if (t->kind == JT_BLOCK_BEGIN) {
            next(P);
            const jj_tok *name = cur(P);
            if (is_end(name, ends)) {
                next(P);
                b->end = (jj_str){name->p, name->n};
                bool cond = tok_is(name, JT_NAME, "elif");
                if (!cond) {
                    /* Jinja allows the name again after end tags: {% endmacro name %} */
                    if (cur(P)->kind == JT_NAME && !tok_is(name, JT_NAME, "else")) next(P);
                    expect_block_end(P);
                }
                break;
            }
            if (name->kind == JT_NAME && name->n > 3 && !memcmp(name->p, "end", 3))
                pfail_at(P, name, RP_ERR_FORMAT, "unexpected {%% %.*s %%}%s%s",
                         (int)RP_MIN(name->n, (size_t)40), name->p, ends ? ", expected {% " : "",
                         ends ? ends[0] : "");
            if (tok_is(name, JT_NAME, "else") || tok_is(name, JT_NAME, "elif"))
                pfail_at(P, name, RP_ERR_FORMAT,
                         "unexpected {%% %.*s %%} outside an if or for block", (int)name->n,
                         name->p);
            nvec_push(P, &b->v, parse_statement(P));
        } else {
            unexpected(P, "template data or a tag");
        }
    }
    leave(P);
}

rp_status jj_parse(const char *src, size_t len, jj_template **out) {
    *out = NULL;
    jj_template *t = calloc(1, sizeof *t);
    if (!t) return rp_fail(RP_ERR_NOMEM, "chat template: out of memory");
    t->arena.limit = (size_t)64 << 20;
    jj_tok *toks;
    size_t nt;
    rp_status s = jj_lex(&t->arena, src, len, &toks, &nt);
    if (s) {
        jj_template_free(t);
        return s;
    }
    parser P = {.a = &t->arena, .t = toks, .n = nt};
    if (setjmp(P.jb)) {
        jj_template_free(t);
        return P.status;
    }
    body b = {0};
    parse_body(&P, &b, NULL, NULL);
    t->body = b.v.v;
    t->n_body = b.v.n;
    s = jj_validate(t);
    if (s) {
        jj_template_free(t);
        return s;
    }
    *out = t;
    return RP_OK;
}

void jj_template_free(jj_template *t) {
    if (!t) return;
    jj_arena_free(&t->arena);
    free(t);
}
