/* A Jinja2 interpreter for chat templates: the subset of Jinja2 (and of the
 * Python it evaluates) that Hugging Face chat templates use, rendered the way
 * transformers renders them — ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True) with the loopcontrols extension, transformers' tojson,
 * raise_exception, strftime_now, dict and namespace.
 *
 * Files: jinja_lex.c (source -> tokens, whitespace control), jinja_parse.c
 * (tokens -> tree), jinja_value.c (values, arena, errors and limits, Python
 * str/repr/JSON text, comparison), jinja_builtins.c (filters, tests, methods,
 * globals, attribute access), jinja_eval.c (statements and expressions); each
 * calls only the ones before it. The public entry points are in
 * text/chat_template.c.
 *
 * Memory: every value, node and output buffer lives in an arena freed in one
 * go, so values need no reference counts and a runtime error can unwind with
 * longjmp from anywhere inside the evaluator (nothing is leaked). Templates are
 * untrusted input: the arena has a byte limit, the evaluator counts steps and
 * nesting depth, and each limit fails with a message saying which one.
 */
#ifndef RP_JINJA_H
#define RP_JINJA_H

#include "reprise.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- arena --------------------------------------------------------------- */

typedef struct jj_chunk jj_chunk;
typedef struct jj_arena {
    jj_chunk *head;
    size_t used;  /* bytes handed out, all chunks */
    size_t limit; /* jj_alloc fails past this */
} jj_arena;

/* Zeroed memory, 16-byte aligned; NULL when the limit is reached or malloc fails. */
void *jj_alloc(jj_arena *a, size_t n);
void jj_arena_free(jj_arena *a);

/* ---- values -------------------------------------------------------------- */

typedef enum jv_kind {
    JV_UNDEF = 0, /* Jinja's Undefined: prints "", falsy, iterates empty */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,  /* UTF-8 bytes (p, n); immutable, may point into the source */
    JV_LIST, /* list or tuple (l->tuple) */
    JV_DICT, /* insertion-ordered */
    JV_NS,   /* namespace(): a dict whose attributes `set ns.x = ...` may assign */
    JV_FUNC, /* macro, builtin function, bound method */
    JV_LOOP, /* the `loop` variable of a for loop */
} jv_kind;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jloop jloop;

typedef struct jv {
    uint8_t kind;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s; /* JV_STR; for JV_UNDEF the name that was undefined (for messages) */
        jlist *l;
        jdict *d;
        const jfunc *fn;
        jloop *loop;
    } u;
} jv;

struct jlist {
    jv *v;
    size_t n, cap;
    bool tuple;
};

struct jdict {
    jv *key; /* [n] */
    jv *val; /* [n] */
    size_t n, cap;
};

/* ---- tree ---------------------------------------------------------------- */

typedef enum jj_kind {
    /* statements */
    JN_TEXT,        /* val: the text */
    JN_OUTPUT,      /* a: expression */
    JN_IF,          /* a: condition, body, orelse (elif is an IF inside orelse) */
    JN_FOR,         /* targets (names), a: iterable, b: filter (or NULL), body, orelse */
    JN_SET,         /* targets (names, or one NSREF in a), b: value */
    JN_SETBLOCK,    /* name, body, filters: filter chain (FILTER nodes with a = NULL) */
    JN_MACRO,       /* name, params (names), defaults (exprs, NULL = none), body */
    JN_CALLBLOCK,   /* a: the call, params/defaults: the caller's, body */
    JN_FILTERBLOCK, /* filters, body */
    JN_WITH,        /* targets, values (args), body */
    JN_BREAK,
    JN_CONTINUE,
    JN_GENERATION, /* transformers' {% generation %}: renders its body */
    /* expressions */
    JN_CONST,   /* val */
    JN_NAME,    /* name */
    JN_NSREF,   /* name.attr as an assignment target: name, attr */
    JN_GETATTR, /* a.attr */
    JN_GETITEM, /* a[b] */
    JN_SLICE,   /* a[b:c:d] (any may be NULL); d in args[0] */
    JN_CALL,    /* a(args, kwargs) */
    JN_FILTER,  /* a|name(args, kwargs) */
    JN_TEST,    /* a is [not] name(args) ; op = 1 when negated */
    JN_UNARY,   /* op: '-', '+', 'n' (not) ; a */
    JN_BINARY,  /* op: JOP_* ; a, b */
    JN_COMPARE, /* a, then args[i] compared by ops[i] (chained) */
    JN_AND,
    JN_OR,
    JN_COND,   /* b if a else c (c may be NULL: undefined) */
    JN_LIST,   /* args */
    JN_TUPLE,  /* args */
    JN_DICT,   /* args: keys, kwvals: values */
    JN_CONCAT, /* args joined with ~ */
} jj_kind;

enum {
    JOP_ADD = 1,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN,
};

typedef struct jj_str {
    const char *p;
    size_t n;
} jj_str;

typedef struct jj_node jj_node;
struct jj_node {
    uint8_t kind;
    uint8_t op;
    int line, col;
    jv val;
    jj_str name, attr;
    jj_node *a, *b, *c, *d;
    jj_node **args; /* positional arguments, items, keys, compared operands */
    size_t n_args;
    jj_str *kwnames; /* keyword arguments: kwnames[i] = kwvals[i] */
    jj_node **kwvals;
    size_t n_kw;
    uint8_t *ops;    /* JN_COMPARE: one JOP_* per operand in args */
    jj_str *targets; /* FOR / SET / WITH / MACRO parameters */
    size_t n_targets;
    jj_node **defaults; /* MACRO / CALLBLOCK: one per parameter, NULL = required */
    jj_node **body;
    size_t n_body;
    jj_node **orelse;
    size_t n_orelse;
    jj_node **filters; /* SETBLOCK / FILTERBLOCK */
    size_t n_filters;
};

/* ---- lexer --------------------------------------------------------------- */

typedef enum jj_tok_kind {
    JT_EOF = 0,
    JT_DATA,        /* text between tags (after whitespace control) */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,
    JT_STRING, /* value unescaped */
    JT_INT,
    JT_FLOAT,
    JT_OP, /* text: the operator */
} jj_tok_kind;

typedef struct jj_tok {
    uint8_t kind;
    int line, col;
    const char *p; /* text (JT_STRING: the unescaped value) */
    size_t n;
    int64_t i;
    double f;
} jj_tok;

/* Tokens of src[0..len) (ending in JT_EOF), allocated in a. */
rp_status jj_lex(jj_arena *a, const char *src, size_t len, jj_tok **toks, size_t *n_toks);

/* ---- a compiled template and its limits ---------------------------------- */

typedef struct jj_limits {
    size_t max_bytes;   /* arena bytes per render (values, text); 0 = default */
    size_t max_output;  /* bytes of rendered text; 0 = default */
    uint64_t max_steps; /* evaluation steps; 0 = default */
    int max_depth;      /* nesting of calls and expressions; 0 = default */
} jj_limits;

typedef struct jj_template {
    jj_arena arena; /* tokens and tree */
    jj_node **body;
    size_t n_body;
} jj_template;

/* Parses src[0..len). Syntax errors are RP_ERR_FORMAT naming line and column;
 * a feature outside the subset (include, extends, ...) is RP_ERR_UNSUPPORTED. */
rp_status jj_parse(const char *src, size_t len, jj_template **out);
/* The checks Jinja makes when it compiles: every filter and test exists,
 * break/continue sit inside a loop. Called by jj_parse. */
rp_status jj_validate(const jj_template *t);
void jj_template_free(jj_template *t);

/* ---- rendering ------------------------------------------------------------- */

typedef struct jj_out {
    char *p;
    size_t n, cap;
} jj_out;

typedef struct jj_scope jj_scope;
struct jj_scope {
    jj_scope *parent;
    jdict vars;
};

typedef struct jj_ctx {
    jmp_buf jb;
    jj_arena *arena;
    jj_out *out;      /* where text goes now (captures swap it) */
    size_t out_total; /* bytes written to the final output */
    jj_limits lim;
    uint64_t steps;
    int depth;
    int ctl;              /* 1 = break, 2 = continue pending */
    jj_scope *root;       /* the template's top-level scope */
    const jdict *globals; /* the caller's variables, under root */
    int64_t now;          /* strftime_now's time (seconds since the epoch) */
    rp_status status;     /* of the failure that unwound */
    char msg[768];
} jj_ctx;

/* Renders t with the variables in globals (a JV_DICT) into *out (malloc'ed,
 * NUL-terminated; *out_len without the NUL). `now` is the time strftime_now
 * formats (local time). Errors name the line and column of the template. */
rp_status jj_render(const jj_template *t, jj_arena *values, const jdict *globals, int64_t now,
                    const jj_limits *lim, char **out, size_t *out_len);

/* ---- shared by the evaluator files (not for other modules) ----------------- */

#define JJ_ERR_TYPE RP_ERR_INVALID_ARG
#if defined(__GNUC__)
#define JJ_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define JJ_PRINTF(a, b)
#endif
_Noreturn void jj_fail(jj_ctx *c, const jj_node *at, rp_status s, const char *fmt, ...)
    JJ_PRINTF(4, 5);
void *jj_ctx_alloc(jj_ctx *c, const jj_node *at, size_t n);
/* An undefined value whose message (when used) is the formatted text. */
jv jj_undef_msg(jj_ctx *c, const char *fmt, ...) JJ_PRINTF(2, 3);

static inline jv jv_undef(const char *name, size_t n) {
    jv v = {.kind = JV_UNDEF};
    v.u.s.p = name;
    v.u.s.n = n;
    return v;
}
static inline jv jv_none(void) {
    jv v = {.kind = JV_NONE};
    return v;
}
static inline jv jv_bool(bool b) {
    jv v = {.kind = JV_BOOL};
    v.u.b = b;
    return v;
}
static inline jv jv_int(int64_t i) {
    jv v = {.kind = JV_INT};
    v.u.i = i;
    return v;
}
static inline jv jv_float(double f) {
    jv v = {.kind = JV_FLOAT};
    v.u.f = f;
    return v;
}
static inline jv jv_str(const char *p, size_t n) {
    jv v = {.kind = JV_STR};
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}
jv jv_cstr(const char *s);
jv jv_list_new(jj_ctx *c, size_t cap);
jv jv_dict_new(jj_ctx *c, size_t cap);
void jv_list_push(jj_ctx *c, jlist *l, jv v);
/* Sets key (appends or replaces in place, keeping the insertion order). */
void jv_dict_set(jj_ctx *c, jdict *d, jv key, jv val);
/* NULL when absent. */
jv *jv_dict_get(const jdict *d, jv key);
jv *jv_dict_gets(const jdict *d, const char *k, size_t n);
/* Growth without a context (building the caller's variables). false = no memory. */
bool jv_dict_set_a(jj_arena *a, jdict *d, jv key, jv val);
bool jv_list_push_a(jj_arena *a, jlist *l, jv v);

bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
bool jv_is_num(jv v); /* bool, int, float (Python numbers) */
double jv_num(jv v);
const char *jv_type_name(jv v); /* Python's name: 'str', 'int', 'dict', ... */

/* Text of a value appended to o: Python str(), repr(), and transformers' tojson
 * (json.dumps with ensure_ascii, indent, separators, sort_keys). */
void jj_out_put(jj_ctx *c, jj_out *o, const char *p, size_t n);
void jv_write_str(jj_ctx *c, jj_out *o, jv v);
void jv_write_repr(jj_ctx *c, jj_out *o, jv v);
typedef struct jj_json_opts {
    bool ensure_ascii;
    bool pretty;   /* indent given: one item per line */
    jj_str indent; /* per level */
    jj_str item_sep, key_sep;
    bool sort_keys;
} jj_json_opts;
void jv_write_json(jj_ctx *c, const jj_node *at, jj_out *o, jv v, const jj_json_opts *opt,
                   int level);
/* str(v) as a JV_STR (strings are returned as they are). */
jv jv_to_str(jj_ctx *c, jv v);
/* Python's repr of a float (shortest round-trip digits). */
int jj_format_float(double f, char *buf, size_t size);

/* UTF-8 helpers with Python str semantics. */
size_t jj_utf8_len(const char *p, size_t n); /* code points */
/* Byte offset of code point index i (clamped to n). */
size_t jj_utf8_offset(const char *p, size_t n, size_t i);
/* Length of a Python whitespace character at p (str.isspace), 0 if none. */
size_t jj_space_len(const char *p, size_t n);
size_t jj_space_len_back(const char *p, size_t n);

/* ---- builtins (jinja_builtins.c) ------------------------------------------- */

typedef struct jj_args {
    jv *pos;
    size_t n_pos;
    jj_str *kwname;
    jv *kw;
    size_t n_kw;
} jj_args;

typedef jv (*jj_fn)(jj_ctx *c, const jj_node *at, jv self, const jj_args *a);

typedef enum jfunc_kind { JF_BUILTIN, JF_MACRO, JF_METHOD } jfunc_kind;
struct jfunc {
    jfunc_kind kind;
    const char *name;
    jj_fn fn;              /* BUILTIN / METHOD */
    jv self;               /* METHOD: the bound object */
    const jj_node *macro;  /* MACRO / caller: params, defaults, body */
    jj_scope *closure;     /* MACRO: the scope it was defined in */
    const jj_node *caller; /* MACRO: the call block when invoked via {% call %} */
    jj_scope *caller_scope;
};

struct jloop {
    const jv *items; /* what the loop iterates (after its `if` filter) */
    size_t n, index0;
};

/* Filter / test / global / method lookup; NULL when unknown. */
jj_fn jj_find_filter(const char *name, size_t n);
typedef bool (*jj_test_fn)(jj_ctx *c, const jj_node *at, jv v, const jj_args *a);
jj_test_fn jj_find_test(const char *name, size_t n);
jv jj_find_global(const char *name, size_t n);
/* obj.name for a method of obj's type; JV_UNDEF if none. */
jv jj_find_method(jj_ctx *c, jv obj, const char *name, size_t n);

/* obj.key with Jinja's rule: the object's attribute (a method) first, then
 * its item (jinja_builtins.c). */
jv jj_getattr(jj_ctx *c, const jj_node *at, jv obj, jv key);
/* fmt % args (printf-style, Python semantics for %s %r %d %i %f %x %%). */
jv jj_percent_format(jj_ctx *c, const jj_node *at, jv fmt, jv args);
/* Calls a macro or builtin (jinja_eval.c). */
jv jj_call(jj_ctx *c, const jj_node *at, jv fn, const jj_args *a);

/* The layers below the builtins (jinja_value.c): a step of the evaluation
 * (counted against the limit), iteration, Python's <, undefined values. The
 * files call downward only: value <- builtins <- eval. */
jv jj_iterable_to_list(jj_ctx *c, const jj_node *at, jv v); /* list of items / keys / chars */
void jj_step(jj_ctx *c, const jj_node *at);
bool jj_less(jj_ctx *c, const jj_node *at, jv a, jv b); /* Python a < b */
_Noreturn void jj_undefined_error(jj_ctx *c, const jj_node *at, jv u);

#endif
