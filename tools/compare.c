/* reprise compare: two engines' outputs side by side.
 *   logits: two files of float32 rows (n_vocab each; reprise run
 *           --dump-logits, tests/reference/llama_logits.c): NMSE, max |diff|,
 *           top-1 agreement over every position, and the first position that
 *           differs at all and past the threshold.
 *   --trace: two --dump-tensors directories (or llama_logits.c's): the
 *           tensors in the order the first one computed them, row by row
 *           (matched by name, step and position), and the first that differs. */
#include "tools.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cmp_opts {
    int n_vocab;
    const char *model;
    bool trace, all;
    float tol;      /* --trace: |diff| above it differs (default 0: any bit) */
    float max_nmse; /* > 0: exit 1 past it */
    float min_top1; /* > 0: exit 1 under it (fraction) */
    bool per_pos;
} cmp_opts;

/* a whole float32 file (logit files pass the text reader's limit) */
static float *read_f32(const char *cmd, const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        tool_error(cmd, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    float *f = NULL;
    long len = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    if (len < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        tool_error(cmd, "cannot read %s: %s", path, strerror(errno));
    } else if (len % (long)sizeof(float)) {
        tool_error(cmd, "%s: %ld bytes is not a whole number of float32", path, len);
    } else if (!(f = malloc(len ? (size_t)len : 1))) {
        tool_error(cmd, "%s: out of memory for %ld bytes", path, len);
    } else if (fread(f, 1, (size_t)len, fp) != (size_t)len) {
        tool_error(cmd, "%s: short read", path);
        free(f);
        f = NULL;
    }
    fclose(fp);
    if (f) *n = (size_t)len / sizeof(float);
    return f;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* ---- logits --------------------------------------------------------------- */

static int cmp_logits(const char *cmd, const cmp_opts *o, const char *fa, const char *fb) {
    size_t na = 0, nb = 0;
    float *a = read_f32(cmd, fa, &na), *b = a ? read_f32(cmd, fb, &nb) : NULL;
    int rc = 1;
    const size_t nv = (size_t)o->n_vocab;
    if (!a || !b) goto out;
    if (na != nb || na % nv) {
        tool_error(cmd, "%s has %zu floats and %s %zu: not the same rows of %zu logits", fa, na, fb,
                   nb, nv);
        goto out;
    }
    const size_t np = na / nv;
    double se = 0, sr = 0, worst = 0, maxd = 0;
    size_t worst_p = 0, maxd_p = 0, top1 = 0;
    long first_any = -1, first_thr = -1;
    for (size_t p = 0; p < np; p++) {
        const float *x = a + p * nv, *r = b + p * nv;
        double e = 0, s = 0, md = 0;
        for (size_t i = 0; i < nv; i++) {
            const double d = (double)x[i] - (double)r[i];
            e += d * d;
            s += (double)r[i] * r[i];
            if (fabs(d) > md) md = fabs(d);
        }
        const double nm = s > 0 ? e / s : e;
        const bool same1 = argmax(x, (int)nv) == argmax(r, (int)nv);
        top1 += same1;
        se += e;
        sr += s;
        if (nm > worst) worst = nm, worst_p = p;
        if (md > maxd) maxd = md, maxd_p = p;
        if (md > 0 && first_any < 0) first_any = (long)p;
        if (o->max_nmse > 0 && nm > o->max_nmse && first_thr < 0) first_thr = (long)p;
        if (o->per_pos)
            printf("pos %zu: nmse %.3g max_abs %.4g top1 %s\n", p, nm, md, same1 ? "same" : "DIFF");
    }
    const double nmse = sr > 0 ? se / sr : se, agree = np ? (double)top1 / (double)np : 1;
    printf("positions %zu x %zu logits\n", np, nv);
    printf("nmse %.3g (worst position %zu: %.3g)\n", nmse, worst_p, worst);
    printf("max_abs_diff %.4g (position %zu)\n", maxd, maxd_p);
    printf("top1_agreement %.2f%% (%zu of %zu)\n", 100 * agree, top1, np);
    if (first_any < 0)
        printf("identical: every position bit for bit\n");
    else
        printf("first position that differs: %ld\n", first_any);
    if (first_thr >= 0) printf("first position past nmse %.3g: %ld\n", o->max_nmse, first_thr);
    rc = 0;
    if (o->max_nmse > 0 && worst > o->max_nmse) rc = 1;
    if (o->min_top1 > 0 && agree < o->min_top1) rc = 1;
out:
    free(a);
    free(b);
    return rc;
}

/* ---- traces --------------------------------------------------------------- */

typedef struct trace_ent {
    char name[48];
    int step, rows, width;
    int32_t *pos;
    char file[80];
} trace_ent;

typedef struct trace_dir {
    const char *dir;
    trace_ent *e;
    int n;
} trace_dir;

static void trace_dir_free(trace_dir *t) {
    for (int i = 0; i < t->n; i++) free(t->e[i].pos);
    free(t->e);
}

/* index.tsv: call name step src rows width pos file */
static bool trace_dir_read(const char *cmd, const char *dir, trace_dir *t) {
    char path[4200];
    snprintf(path, sizeof path, "%s/index.tsv", dir);
    size_t len = 0;
    char *txt = tool_read_text(cmd, path, &len);
    if (!txt) return false;
    t->dir = dir;
    int cap = 0;
    char *save = NULL;
    bool ok = true;
    for (char *ln = strtok_r(txt, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(ln, "call\t", 5)) continue;
        trace_ent e = {0};
        int src, call, off = 0;
        if (sscanf(ln, "%d\t%47s\t%d\t%d\t%d\t%d\t%n", &call, e.name, &e.step, &src, &e.rows,
                   &e.width, &off) != 6 ||
            e.rows <= 0 || e.width <= 0) {
            tool_error(cmd, "%s: a line that is not 'call name step src rows width pos file'",
                       path);
            ok = false;
            break;
        }
        e.pos = malloc(sizeof *e.pos * (size_t)e.rows);
        char *p = ln + off;
        for (int i = 0; i < e.rows && e.pos; i++) {
            e.pos[i] = (int32_t)strtol(p, &p, 10);
            if (*p == ',') p++;
        }
        if (!e.pos || sscanf(p, "\t%79s", e.file) != 1) {
            free(e.pos);
            tool_error(cmd, "%s: a line without its positions or file", path);
            ok = false;
            break;
        }
        if (t->n == cap) {
            cap = cap ? cap * 2 : 256;
            trace_ent *ne = realloc(t->e, sizeof *ne * (size_t)cap);
            if (!ne) {
                free(e.pos);
                ok = false;
                break;
            }
            t->e = ne;
        }
        t->e[t->n++] = e;
    }
    free(txt);
    return ok;
}

static float *trace_load(const char *cmd, const trace_dir *t, const trace_ent *e) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", t->dir, e->file);
    size_t n = 0;
    float *f = read_f32(cmd, path, &n);
    if (f && n != (size_t)e->rows * (size_t)e->width) {
        tool_error(cmd, "%s: %zu floats, the index says %d x %d", path, n, e->rows, e->width);
        free(f);
        return NULL;
    }
    return f;
}

static bool trace_has(const trace_dir *b, const char *name) {
    for (int i = 0; i < b->n; i++)
        if (!strcmp(b->e[i].name, name)) return true;
    return false;
}

/* The entry of b holding tensor (name, step) at position pos, and its row:
 * the last such (llama.cpp names a tensor and its reshaped, normed and roped
 * successors alike: "Qcur-0"; the last is the one the next op reads). */
static const trace_ent *trace_find(const trace_dir *b, const char *name, int step, int32_t pos,
                                   int *row) {
    /* llama.cpp's name of the token embeddings' rows */
    if (!strcmp(name, "inp_embd") && !trace_has(b, name)) name = "embd";
    for (int i = b->n - 1; i >= 0; i--) {
        const trace_ent *e = &b->e[i];
        /* the output's step is n_eff in reprise, none in llama.cpp */
        const bool any_step = !strncmp(name, "result_", 7);
        if ((e->step != step && !any_step) || strcmp(e->name, name)) continue;
        for (int r = 0; r < e->rows; r++)
            if (e->pos[r] == pos) {
                *row = r;
                return e;
            }
    }
    return NULL;
}

/* Compares entry ea of a with b's rows; 1 differs, 0 same, -1 error. */
static int trace_cmp_ent(const char *cmd, const cmp_opts *o, const trace_dir *a,
                         const trace_ent *ea, const trace_dir *b, int *compared) {
    float *xa = trace_load(cmd, a, ea);
    if (!xa) return -1;
    int res = 0;
    double e2 = 0, s2 = 0, md = 0;
    int md_pos = -1, md_i = -1, first_pos = -1, rows_found = 0;
    for (int r = 0; r < ea->rows && res >= 0; r++) {
        int rb = 0;
        const trace_ent *eb = trace_find(b, ea->name, ea->step, ea->pos[r], &rb);
        if (!eb) continue;
        if (eb->width != ea->width) {
            printf("%s step %d: width %d vs %d\n", ea->name, ea->step, ea->width, eb->width);
            res = 1;
            break;
        }
        float *xb = trace_load(cmd, b, eb);
        if (!xb) {
            res = -1;
            break;
        }
        const float *ra = xa + (size_t)r * (size_t)ea->width,
                    *rr = xb + (size_t)rb * (size_t)eb->width;
        for (int i = 0; i < ea->width; i++) {
            const double d = fabs((double)ra[i] - (double)rr[i]);
            e2 += d * d;
            s2 += (double)rr[i] * rr[i];
            if (d > md) md = d, md_pos = ea->pos[r], md_i = i;
            if (d > o->tol && first_pos < 0) first_pos = ea->pos[r];
        }
        free(xb);
        (*compared)++;
        rows_found++;
    }
    free(xa);
    if (res) return res;
    if (!rows_found) {
        if (o->all) printf("%-16s step %3d: not in %s\n", ea->name, ea->step, b->dir);
        return 0;
    }
    const bool differs = first_pos >= 0;
    if (differs || o->all)
        printf("%-16s step %3d: nmse %.3g max_abs %.4g (position %d, index %d)%s\n", ea->name,
               ea->step, s2 > 0 ? e2 / s2 : e2, md, md_pos, md_i, differs ? "  <- differs" : "");
    return differs;
}

static int cmp_traces(const char *cmd, const cmp_opts *o, const char *da, const char *db) {
    trace_dir a = {0}, b = {0};
    int rc = 1;
    if (!trace_dir_read(cmd, da, &a) || !trace_dir_read(cmd, db, &b)) goto out;
    int compared = 0, differ = 0;
    for (int i = 0; i < a.n; i++) {
        const int r = trace_cmp_ent(cmd, o, &a, &a.e[i], &b, &compared);
        if (r < 0) goto out;
        if (r > 0 && !differ++ && !o->all) break;
    }
    if (!compared) {
        tool_error(cmd, "no tensor of %s is in %s (names, steps and positions differ)", da, db);
        goto out;
    }
    printf("%d rows compared: %s\n", compared,
           differ ? "the first tensor that differs is above" : "every tensor the same");
    rc = differ ? 1 : 0;
out:
    trace_dir_free(&a);
    trace_dir_free(&b);
    return rc;
}

int cmd_compare(int argc, char **argv) {
    const char *cmd = "compare";
    cmp_opts o = {0};
    const char *pos[2];
    int n_pos = 0;
    const arg_opt opts[] = {
        {"--n-vocab", ARG_INT, &o.n_vocab, "N", "logits per row (or -m MODEL)"},
        {"-m|--model", ARG_STR, &o.model, "FILE", "take n_vocab from this model's vocabulary"},
        {"--max-nmse", ARG_FLOAT, &o.max_nmse, "X", "exit 1 when a position's NMSE passes X"},
        {"--min-top1", ARG_FLOAT, &o.min_top1, "F", "exit 1 when top-1 agreement is under F"},
        {"--per-position", ARG_FLAG, &o.per_pos, NULL, "a line per position"},
        {"--trace", ARG_FLAG, &o.trace, NULL, "compare two --dump-tensors directories"},
        {"--tol", ARG_FLOAT, &o.tol, "X", "--trace: |diff| above X differs (default 0)"},
        {"--all", ARG_FLAG, &o.all, NULL, "--trace: every tensor, not only the first that differs"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise compare (--n-vocab N | -m MODEL) A.f32 REF.f32\n"
                 "       reprise compare --trace DIR_A DIR_REF",
        .description = "Compares logits of every position (float32 rows, as run --dump-logits "
                       "writes\nthem), or two tensor traces (--dump-tensors), and names the "
                       "first position or\ntensor that differs.\n",
        .tables = tables,
        .pos = pos,
        .max_pos = 2,
        .n_pos = &n_pos};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (n_pos != 2) {
        tool_error(cmd, "need two files (or two directories with --trace)");
        return 2;
    }
    if (o.trace) return cmp_traces(cmd, &o, pos[0], pos[1]);
    if (o.model) {
        rp_model *m = tool_load_model(cmd, o.model, true);
        if (!m) return 1;
        o.n_vocab = rp_vocab_n_tokens(rp_model_vocab(m));
        rp_model_free(m);
    }
    if (o.n_vocab <= 0) {
        tool_error(cmd, "give --n-vocab N or -m MODEL");
        return 2;
    }
    return cmp_logits(cmd, &o, pos[0], pos[1]);
}
