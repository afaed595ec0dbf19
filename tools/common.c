#include "tools.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
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
    case ARG_STRS2:
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
        if (t < 0 || !rp_kv_type_supported(t)) {
            tool_error(cmd, "%s: cache type '%s' is not supported (use one of %s)", flag, v,
                       rp_kv_type_list());
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
    const arg_opt *seen[128]; /* single-valued options given so far */
    int n_seen = 0;
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
        if (found->kind != ARG_STRS) { /* a second value would silently replace the first */
            for (int k = 0; k < n_seen; k++)
                if (seen[k] == found) {
                    tool_error(spec->cmd, "%s given twice (it takes one value; see --help)", flag);
                    return false;
                }
            if (n_seen < (int)ARRAY_LEN(seen)) seen[n_seen++] = found;
        }
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
        if (found->kind == ARG_STRS2 &&
            (i + 1 >= argc || !parse_value(spec->cmd, found, flag, argv[++i]))) {
            if (i + 1 >= argc)
                tool_error(spec->cmd, "%s needs two values (%s)", flag, found->metavar);
            return false;
        }
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
    for (const char *const *e = spec->epilog; e && *e; e++) fprintf(fp, "\n%s\n", *e);
}

int args_parse_cmd(const arg_spec *spec, int argc, char **argv) {
    bool help;
    if (args_parse(spec, argc, argv, &help)) return ARGS_OK;
    return help ? 0 : 2;
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
    /* messages quote names from files: no terminal control byte gets through */
    char safe[4096];
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)(m && *m ? m : rp_status_str(s));
         *p && k + 5 < sizeof safe; p++) {
        if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
            k += (size_t)snprintf(safe + k, sizeof safe - k, "\\x%02x", *p);
        else
            safe[k++] = (char)*p;
    }
    safe[k] = 0;
    tool_error(cmd, "%s", safe);
    return 1;
}

/* ---- progress ------------------------------------------------------------ */

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

/* ---- small helpers ---------------------------------------------------------- */

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

void fmt_duration(char *buf, size_t n, double s) {
    if (s < 0) s = 0;
    if (s < 90)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 5400)
        snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* Room for n more bytes and the NUL after them. */
static bool tbuf_room(tbuf *b, size_t n) {
    if (n > SIZE_MAX / 2 - b->len) return false;
    size_t want = b->len + n + 1;
    if (want <= b->cap) return true;
    size_t cap = b->cap < 64 ? 64 : b->cap;
    while (cap < want) cap += cap / 2;
    char *d = realloc(b->data, cap);
    if (!d) return false;
    b->data = d;
    b->cap = cap;
    return true;
}

bool tbuf_add(tbuf *b, const void *p, size_t n) {
    if (!tbuf_room(b, n)) return false;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return true;
}

bool tbuf_printf(tbuf *b, const char *fmt, ...) {
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    const int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    bool ok = n >= 0 && tbuf_room(b, (size_t)n);
    if (ok) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        b->len += (size_t)n;
    }
    va_end(ap);
    return ok;
}

void tbuf_free(tbuf *b) {
    free(b->data);
    *b = (tbuf){0};
}

/* ---- sampling options ----------------------------------------------------------- */

void sampling_opts_init(sampling_opts *o) {
    memset(o, 0, sizeof *o);
    o->sp = rp_sampler_default_params();
    o->seed_text = "-1";
}

const arg_opt *sampling_opts_table(sampling_opts *o) {
    static arg_opt t[24];
    rp_sampler_params *sp = &o->sp;
    const arg_opt src[] = {
        {"-s|--seed", ARG_STR, &o->seed_text, "N",
         "sampling seed (default -1: a random one, printed with -v)"},
        {"--temp", ARG_FLOAT, &sp->temp, "T", "temperature (0 = greedy; default 0.8)"},
        {"--top-k", ARG_INT, &sp->top_k, "K", "top-k (0 = off; default 40)"},
        {"--top-p", ARG_FLOAT, &sp->top_p, "P", "top-p (1 = off; default 0.95)"},
        {"--min-p", ARG_FLOAT, &sp->min_p, "P", "min-p (0 = off; default 0.05)"},
        {"--typical", ARG_FLOAT, &sp->typical_p, "P", "locally typical sampling (1 = off)"},
        {"--top-n-sigma", ARG_FLOAT, &sp->top_n_sigma, "N",
         "keep logits within N sigma of the top (-1 = off)"},
        {"--xtc-probability", ARG_FLOAT, &sp->xtc_probability, "P", "XTC: chance (0 = off)"},
        {"--xtc-threshold", ARG_FLOAT, &sp->xtc_threshold, "P", "XTC: threshold (default 0.1)"},
        {"--repeat-penalty", ARG_FLOAT, &sp->repeat_penalty, "F", "repetition penalty (1 = off)"},
        {"--repeat-last-n", ARG_INT, &sp->penalty_last_n, "N",
         "tokens the penalties look back (default 64, -1 = all)"},
        {"--frequency-penalty", ARG_FLOAT, &sp->freq_penalty, "F", "frequency penalty (0 = off)"},
        {"--presence-penalty", ARG_FLOAT, &sp->presence_penalty, "F", "presence penalty (0 = off)"},
        {"--dry-multiplier", ARG_FLOAT, &sp->dry_multiplier, "F", "DRY penalty (0 = off)"},
        {"--dry-base", ARG_FLOAT, &sp->dry_base, "F", "DRY base (default 1.75)"},
        {"--dry-allowed-length", ARG_INT, &sp->dry_allowed_length, "N",
         "DRY: repeats this long are free (default 2)"},
        {"--dry-penalty-last-n", ARG_INT, &sp->dry_penalty_last_n, "N",
         "DRY looks back N tokens (-1 = all)"},
        {"--mirostat", ARG_INT, &sp->mirostat, "N", "Mirostat 1 or 2 (0 = off)"},
        {"--mirostat-lr", ARG_FLOAT, &sp->mirostat_eta, "ETA", "Mirostat learning rate (0.1)"},
        {"--mirostat-ent", ARG_FLOAT, &sp->mirostat_tau, "TAU", "Mirostat target entropy (5.0)"},
        {"--samplers", ARG_STR, &sp->samplers, "LIST",
         "stage order: 'penalties;dry;top_k;...' or letters 'edskypmxt'"},
        {"--ignore-eos", ARG_FLAG, &o->ignore_eos, NULL, "never stop at an end-of-text token"},
        {"-v|--verbose", ARG_FLAG, &o->verbose, NULL, "more on stderr (the seed used, ...)"},
        {0},
    };
    _Static_assert(sizeof src <= sizeof t, "sampling table");
    memcpy(t, src, sizeof src);
    return t;
}

/* A seed: -1 (random) or 0..2^64-1. */
static bool parse_seed(const char *cmd, const char *v, uint64_t *out) {
    if (!strcmp(v, "-1")) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x =
            (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 12);
        x += 0x9E3779B97F4A7C15ull; /* splitmix64 finaliser */
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        *out = (x ^ (x >> 31)) & 0xFFFFFFFFu; /* llama.cpp's seeds are 32-bit */
        return true;
    }
    char *end;
    errno = 0;
    unsigned long long x = *v == '-' ? 0 : strtoull(v, &end, 10);
    if (*v == '-' || errno || end == v || *end) {
        tool_error(cmd, "--seed expects -1 (random) or a non-negative integer, got '%s'", v);
        return false;
    }
    *out = (uint64_t)x;
    return true;
}

bool sampling_opts_check(const char *cmd, sampling_opts *o) {
    rp_sampler_params *sp = &o->sp;
    if (o->verbose && g_verbosity < 2) g_verbosity = 2;
    if (!parse_seed(cmd, o->seed_text, &o->seed)) return false;
    sp->seed = o->seed;
    if (sp->temp < 0) sp->temp = 0;
    if (sp->top_p <= 0 || sp->top_p > 1 || sp->min_p < 0 || sp->min_p > 1 ||
        sp->repeat_penalty <= 0) {
        tool_error(
            cmd,
            "sampling values out of range (top-p in (0,1], min-p in [0,1], repeat-penalty > 0)");
        return false;
    }
    /* the sampler checks the rest (mirostat, samplers) */
    rp_sampler *probe = rp_sampler_new(sp, 2);
    if (!probe) {
        tool_error(cmd, "%s", rp_last_error());
        return false;
    }
    rp_sampler_free(probe);
    if (g_verbosity >= 2) fprintf(stderr, "seed: %llu\n", (unsigned long long)o->seed);
    return true;
}

rp_status sampling_opts_apply(const sampling_opts *o, rp_sampler *smp, const rp_vocab *v) {
    rp_status s = o->sp.dry_multiplier > 0 ? rp_sampler_set_vocab(smp, v, NULL, 0) : RP_OK;
    if (s || !o->ignore_eos) return s;
    int32_t n = rp_vocab_n_tokens(v), k = 0;
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    float *bias = malloc((size_t)(n > 0 ? n : 1) * sizeof *bias);
    if (ids && bias)
        for (int32_t i = 0; i < n; i++)
            if (rp_vocab_is_eog(v, i)) {
                ids[k] = i;
                bias[k++] = -INFINITY;
            }
    s = ids && bias ? rp_sampler_set_logit_bias(smp, ids, bias, (size_t)k) : RP_ERR_NOMEM;
    free(ids);
    free(bias);
    return s;
}

/* ---- text ---------------------------------------------------------------- */

/* A text is read whole, so it is bounded: /dev/zero or an endless pipe stops
 * here instead of at the end of memory. A pipe is read (`-f <(cmd)`). */
#define TOOL_TEXT_MAX ((size_t)256 << 20)

char *tool_read_text(const char *cmd, const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        tool_error(cmd, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t k;
    bool too_big = false;
    while (buf && (k = fread(buf + n, 1, cap - n - 1, fp)) > 0) {
        n += k;
        if (n > TOOL_TEXT_MAX) {
            too_big = true;
            break;
        }
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
    if (too_big) {
        free(buf);
        tool_error(cmd, "'%s' holds more than %zu MiB of text, the limit for a text file", path,
                   TOOL_TEXT_MAX >> 20);
        return NULL;
    }
    if (!buf || err) {
        free(buf);
        tool_error(cmd, "cannot read '%s'", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* ---- threads ---------------------------------------------------------------- */

bool tool_check_threads(const char *cmd, int *n_threads, bool force) {
    if (*n_threads < 0) {
        tool_error(cmd, "-t must be at least 0 (0 = the default: physical cores), got %d",
                   *n_threads);
        return false;
    }
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && *n_threads > cores && !force) {
        fprintf(stderr,
                "%s: note: -t %d is more than the %ld cores here: using %ld (--threads-force keeps "
                "%d)\n",
                cmd, *n_threads, cores, cores, *n_threads);
        *n_threads = (int)cores;
    }
    return true;
}

/* ---- output files ---------------------------------------------------------- */

static void on_fatal_signal(int sig) {
    rp_atomic_remove_temps(); /* async-signal-safe: unlink only */
    signal(sig, SIG_DFL);
    raise(sig);
}

void tool_remove_temps_on_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
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
