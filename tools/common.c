#include "tools.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int g_verbosity = 1;

/* ---- option parsing ------------------------------------------------------ */

/* Does `arg` (e.g. "--top-k") match one of the '|'-separated names? */
static bool name_matches(const char *names, const char *arg, size_t arg_len) {
    const char *p = names;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == arg_len && strncmp(p, arg, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static bool parse_value(const char *cmd, const arg_opt *o, const char *flag, const char *v) {
    char *end;
    errno = 0;
    switch (o->kind) {
    case ARG_INT: {
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < INT_MIN || x > INT_MAX) goto bad_int;
        *(int *)o->ptr = (int)x;
        return true;
    }
    case ARG_U32: {
        if (*v == '-') goto bad_int;
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end || x > UINT32_MAX) goto bad_int;
        *(uint32_t *)o->ptr = (uint32_t)x;
        return true;
    }
    case ARG_U64: {
        if (*v == '-') goto bad_int;
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end) goto bad_int;
        *(uint64_t *)o->ptr = (uint64_t)x;
        return true;
    }
    case ARG_FLOAT: {
        float x = strtof(v, &end);
        if (errno || end == v || *end || !isfinite(x)) {
            tool_error(cmd, "%s expects a number, got '%s'", flag, v);
            return false;
        }
        *(float *)o->ptr = x;
        return true;
    }
    case ARG_STR:
        *(const char **)o->ptr = v;
        return true;
    case ARG_STRS: {
        str_list *l = o->ptr;
        if (l->n >= (int)(sizeof l->v / sizeof l->v[0])) {
            tool_error(cmd, "%s given too many times", flag);
            return false;
        }
        l->v[l->n++] = v;
        return true;
    }
    case ARG_KVTYPE: {
        int t = rp_type_from_name(v);
        if (t != RP_TYPE_F32 && t != RP_TYPE_F16) {
            tool_error(cmd, "%s: cache type '%s' is not supported (use f32 or f16)", flag, v);
            return false;
        }
        *(int *)o->ptr = t;
        return true;
    }
    default:
        return false;
    }
bad_int:
    tool_error(cmd, "%s expects %s integer, got '%s'", flag,
               o->kind == ARG_INT ? "an" : "a non-negative", v);
    return false;
}

bool args_parse(const arg_spec *spec, int argc, char **argv, bool *help) {
    *help = false;
    if (spec->n_pos) *spec->n_pos = 0;
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (!only_pos && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
            *help = true;
            args_usage(spec, stdout);
            return false;
        }
        if (only_pos || a[0] != '-' || a[1] == 0 || (a[1] >= '0' && a[1] <= '9')) {
            if (!spec->n_pos || *spec->n_pos >= spec->max_pos) {
                tool_error(spec->cmd, "unexpected argument '%s' (see --help)", a);
                return false;
            }
            spec->pos[(*spec->n_pos)++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t flen = eq && a[1] == '-' ? (size_t)(eq - a) : strlen(a);
        const arg_opt *found = NULL;
        for (const arg_opt *const *t = spec->tables; *t && !found; t++)
            for (const arg_opt *o = *t; o->kind != ARG_END; o++)
                if (name_matches(o->names, a, flen)) {
                    found = o;
                    break;
                }
        if (!found) {
            tool_error(spec->cmd, "unknown option '%.*s' (see --help)", (int)flen, a);
            return false;
        }
        char flag[64];
        snprintf(flag, sizeof flag, "%.*s", (int)flen, a);
        if (found->kind == ARG_FLAG) {
            if (eq && a[1] == '-') {
                tool_error(spec->cmd, "%s takes no value", flag);
                return false;
            }
            *(bool *)found->ptr = true;
            continue;
        }
        const char *v;
        if (eq && a[1] == '-')
            v = eq + 1;
        else if (i + 1 < argc)
            v = argv[++i];
        else {
            tool_error(spec->cmd, "%s needs a value (%s)", flag,
                       found->metavar ? found->metavar : "VALUE");
            return false;
        }
        if (!parse_value(spec->cmd, found, flag, v)) return false;
    }
    return true;
}

void args_usage(const arg_spec *spec, FILE *fp) {
    fprintf(fp, "usage: %s\n", spec->usage);
    if (spec->description) fprintf(fp, "\n%s\n", spec->description);
    fprintf(fp, "\noptions:\n");
    for (const arg_opt *const *t = spec->tables; *t; t++)
        for (const arg_opt *o = *t; o->kind != ARG_END; o++) {
            char left[96];
            const char *mv = o->metavar ? o->metavar : "";
            snprintf(left, sizeof left, "%s%s%s", o->names, o->kind == ARG_FLAG ? "" : " ",
                     o->kind == ARG_FLAG ? "" : mv);
            for (char *c = left; *c; c++)
                if (*c == '|') *c = ',';
            fprintf(fp, "  %-30s %s\n", left, o->help ? o->help : "");
        }
    fprintf(fp, "  %-30s %s\n", "-h,--help", "show this help");
}

/* ---- messages ------------------------------------------------------------ */

static void log_to_stderr(rp_log_level level, const char *msg, void *user) {
    (void)user;
    if ((int)level > g_verbosity + 1) return;
    static const char *const tags[] = {"error: ", "warning: ", "", ""};
    fprintf(stderr, "%s%s\n", tags[level], msg);
}

void tool_log_init(void) {
    rp_log_set(log_to_stderr, NULL);
}

void tool_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "reprise %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int tool_fail(const char *cmd, rp_status s) {
    const char *m = rp_last_error();
    tool_error(cmd, "%s", m && *m ? m : rp_status_str(s));
    return 1;
}

/* ---- progress ------------------------------------------------------------ */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_init(progress *p, const char *label) {
    p->label = label;
    p->tty = isatty(2) && g_verbosity > 0;
    p->t0 = p->last = now_s();
    p->last_pct = -1;
}

void progress_update(progress *p, float frac, const char *extra) {
    if (!p->tty) return;
    double t = now_s();
    int pct = (int)(frac * 100.0f);
    if (pct == p->last_pct && t - p->last < 0.25) return;
    p->last = t;
    p->last_pct = pct;
    double el = t - p->t0;
    char eta[32] = "";
    if (frac > 0.01f && frac < 1.0f) snprintf(eta, sizeof eta, ", %.0fs left", el / frac - el);
    fprintf(stderr, "\r\033[K%s %3d%%%s%s%s", p->label, pct, eta, extra ? " " : "",
            extra ? extra : "");
    fflush(stderr);
}

bool progress_cb(float frac, void *user) {
    progress_update(user, frac, NULL);
    return true;
}

void progress_done(progress *p) {
    if (p->tty && p->last_pct >= 0) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
}

/* ---- model options ------------------------------------------------------- */

const char *const g_plan_help =
    "layer plans (weights are shared by pointer: a repeated layer costs compute and KV, no "
    "memory):\n"
    "  --repeat-layers SPEC  RYS blocks: 'i,j' or 'i-j' is the half-open range [i,j) of source\n"
    "                        layers, run a second time right after its first pass; several\n"
    "                        blocks separated by ';' (any order, must not overlap).\n"
    "                        '26,34' on 64 layers runs ...,25,26..33,26..33,34,...,63.\n"
    "  --layer-map MAP       the whole sequence of source layers, comma separated; an item is a\n"
    "                        layer 'k' or an inclusive range 'a..b' (ExLlamaV3 style):\n"
    "                        '0..15,11..31' or '0,1,2,2,3'. Layers may repeat or be skipped.\n"
    "  --plan FILE           a plan file (reprise plan save): its spec, applied only to the model\n"
    "                        it was made for (architecture, layer count, content hash of the\n"
    "                        weights); --plan-force accepts weights with another content hash.";

void model_opts_init(model_opts *o) {
    memset(o, 0, sizeof *o);
    o->type_k = RP_TYPE_F16;
    o->type_v = RP_TYPE_F16;
}

const arg_opt *model_opts_table(model_opts *o) {
    /* One table per call site is enough: tools parse once. */
    static arg_opt t[14];
    arg_opt src[] = {
        {"-m|--model", ARG_STR, &o->model, "FILE", "GGUF model to load"},
        {"-c|--ctx-size", ARG_U32, &o->n_ctx, "N",
         "context size per sequence (0 = model's, max 4096)"},
        {"-b|--batch-size", ARG_U32, &o->n_batch, "N", "tokens computed per pass (default 512)"},
        {"-t|--threads", ARG_INT, &o->n_threads, "N", "threads (default: physical cores)"},
        {"-ctk|--cache-type-k", ARG_KVTYPE, &o->type_k, "TYPE",
         "KV cache type for K: f32 or f16 (default f16)"},
        {"-ctv|--cache-type-v", ARG_KVTYPE, &o->type_v, "TYPE",
         "KV cache type for V: f32 or f16 (default f16)"},
        {"--repeat-layers", ARG_STR, &o->repeat_layers, "SPEC",
         "RYS plan: repeat source layers [i,j) (see below)"},
        {"--layer-map", ARG_STR, &o->layer_map, "MAP",
         "explicit plan: '0..15,11..31' or '0,1,2,2,3'"},
        {"--plan", ARG_STR, &o->plan_file, "FILE",
         "plan file (reprise plan save) checked against the model"},
        {"--plan-force", ARG_FLAG, &o->plan_force, NULL,
         "apply --plan to weights with another content hash"},
        {"--dump-plan", ARG_FLAG, &o->dump_plan, NULL, "print the layer plan and exit"},
        {"-q|--quiet", ARG_FLAG, &o->quiet, NULL, "only errors on stderr"},
        {0},
    };
    memcpy(t, src, sizeof src);
    return t;
}

bool tool_load(const char *cmd, const model_opts *o, uint32_t n_seq, rp_model **model,
               rp_context **ctx, int *exit_code) {
    *model = NULL;
    *ctx = NULL;
    *exit_code = 1;
    if (o->quiet) g_verbosity = 0;
    if (!o->model) {
        tool_error(cmd, "no model given (-m FILE)");
        return false;
    }
    if (o->repeat_layers && o->layer_map) {
        tool_error(cmd, "--repeat-layers and --layer-map are alternatives; give one");
        return false;
    }
    if (o->plan_file && (o->repeat_layers || o->layer_map)) {
        tool_error(cmd, "--plan and %s are alternatives; give one",
                   o->repeat_layers ? "--repeat-layers" : "--layer-map");
        return false;
    }
    rp_model_params mp = rp_model_default_params();
    progress pr;
    progress_init(&pr, "loading");
    mp.progress = progress_cb;
    mp.progress_user = &pr;
    rp_status s = rp_model_load(o->model, &mp, model);
    progress_done(&pr);
    if (s) {
        tool_fail(cmd, s);
        return false;
    }
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = o->n_ctx;
    cp.n_batch = o->n_batch;
    cp.n_seq_max = n_seq;
    cp.n_threads = o->n_threads;
    cp.type_k = o->type_k;
    cp.type_v = o->type_v;
    cp.keep_hidden = o->keep_hidden;
    struct rp_planfile *pf = NULL;
    if (!tool_plan_resolve(cmd, o, *model, &pf, &cp.repeat_layers, &cp.layer_map)) {
        rp_model_free(*model);
        *model = NULL;
        return false;
    }
    s = rp_context_new(*model, &cp, ctx);
    tool_plan_free(pf);
    if (s) {
        tool_fail(cmd, s);
        rp_model_free(*model);
        *model = NULL;
        return false;
    }
    if (o->dump_plan) {
        tool_print_plan(stdout, *ctx);
        rp_context_free(*ctx);
        rp_model_free(*model);
        *ctx = NULL;
        *model = NULL;
        *exit_code = 0;
        return false;
    }
    if (g_verbosity > 0) {
        char desc[256];
        rp_model_desc(*model, desc, sizeof desc);
        fprintf(stderr, "model: %s\n", desc);
        tool_print_plan(stderr, *ctx);
    }
    return true;
}

void tool_print_plan(FILE *fp, const rp_context *ctx) {
    int n = rp_context_plan_report(ctx, NULL, 0);
    char *buf = malloc((size_t)n + 1);
    if (!buf) return;
    rp_context_plan_report(ctx, buf, (size_t)n + 1);
    fputs(buf, fp);
    free(buf);
}

/* ---- text helpers -------------------------------------------------------- */

char *tool_read_text(const char *cmd, const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        tool_error(cmd, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n - 1, fp)) > 0) {
        n += k;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    bool err = ferror(fp);
    fclose(fp);
    if (!buf || err) {
        free(buf);
        tool_error(cmd, "cannot read '%s'", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

bool parse_int_list(const char *s, int32_t **out, size_t *n) {
    size_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return false;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < INT32_MIN || x > INT32_MAX) {
            free(v);
            return false;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv) {
                free(v);
                return false;
            }
            v = nv;
            cap *= 2;
        }
        v[k++] = (int32_t)x;
        p = end;
        if (*p && *p != ' ' && *p != ',' && *p != '\n' && *p != '\t') {
            free(v);
            return false;
        }
    }
    *out = v;
    *n = k;
    return true;
}
