/* The scan's CSV: settings as "# key: value" lines, then one row per block.
 * A scan rewrites the whole file atomically after every block, so an
 * interrupted scan leaves a complete file that the next run resumes. */
#include "eval/scan.h"
#include "core/model.h"
#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rp_scan_csv_free(rp_scan_csv *csv) {
    for (int k = 0; k < csv->n_meta; k++) {
        free(csv->key[k]);
        free(csv->val[k]);
    }
    free(csv->key);
    free(csv->val);
    free(csv->check);
    free(csv->metric);
    free(csv->rows);
    memset(csv, 0, sizeof *csv);
}

static int meta_index(const rp_scan_csv *csv, const char *key) {
    for (int k = 0; k < csv->n_meta; k++)
        if (!strcmp(csv->key[k], key)) return k;
    return -1;
}

const char *rp_scan_csv_get(const rp_scan_csv *csv, const char *key) {
    int k = meta_index(csv, key);
    return k < 0 ? NULL : csv->val[k];
}

static rp_status set_value(rp_scan_csv *csv, const char *key, bool check, char *val) {
    if (!val) return RP_ERR_NOMEM;
    if (!strcmp(key, "metric")) {
        char *m = rp_strdup(val);
        if (!m) {
            free(val);
            return RP_ERR_NOMEM;
        }
        free(csv->metric);
        csv->metric = m;
    }
    int k = meta_index(csv, key);
    if (k >= 0) {
        free(csv->val[k]);
        csv->val[k] = val;
        csv->check[k] = check;
        return RP_OK;
    }
    char **nk = rp_realloc(csv->key, ((size_t)csv->n_meta + 1) * sizeof *nk, "scan settings");
    if (nk) csv->key = nk;
    char **nv =
        nk ? rp_realloc(csv->val, ((size_t)csv->n_meta + 1) * sizeof *nv, "scan settings") : NULL;
    if (nv) csv->val = nv;
    bool *nc =
        nv ? rp_realloc(csv->check, ((size_t)csv->n_meta + 1) * sizeof *nc, "scan settings") : NULL;
    if (nc) csv->check = nc;
    char *kc = nc ? rp_strdup(key) : NULL;
    if (!kc) {
        free(val);
        return RP_ERR_NOMEM;
    }
    csv->key[csv->n_meta] = kc;
    csv->val[csv->n_meta] = val;
    csv->check[csv->n_meta] = check;
    csv->n_meta++;
    return RP_OK;
}

rp_status rp_scan_csv_set(rp_scan_csv *csv, const char *key, bool check, const char *fmt, ...) {
    for (const char *p = key; *p; p++)
        if (*p == ':' || *p == '\n' || *p == '#')
            return rp_fail(RP_ERR_INVALID_ARG, "scan CSV: setting name '%s' holds '%c'", key, *p);
    va_list ap;
    va_start(ap, fmt);
    char buf[1024];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        return rp_fail(RP_ERR_INVALID_ARG, "scan CSV: setting '%s' is too long", key);
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return set_value(csv, key, check, rp_strdup(buf));
}

rp_status rp_scan_csv_add(rp_scan_csv *csv, const rp_scan_row *row) {
    rp_scan_row r = *row;
    if (!r.plan[0]) snprintf(r.plan, sizeof r.plan, "%d-%d", r.i, r.j);
    r.plan[sizeof r.plan - 1] = 0;
    if (rp_scan_csv_find_plan(csv, r.plan))
        return rp_fail(RP_ERR_INVALID_ARG, "scan CSV: plan %s is there already", r.plan);
    if (csv->n_rows == csv->cap_rows) {
        int cap = csv->cap_rows ? 2 * csv->cap_rows : 64;
        rp_scan_row *nr = rp_realloc(csv->rows, (size_t)cap * sizeof *nr, "scan rows");
        if (!nr) return RP_ERR_NOMEM;
        csv->rows = nr;
        csv->cap_rows = cap;
    }
    /* held as the file holds it, so a scan that reads its rows back prints
     * and draws what one that computed them did */
    char buf[64];
    snprintf(buf, sizeof buf, "%.10g %.10g %.3f", r.value, r.delta, r.seconds);
    RP_ASSERT(sscanf(buf, "%lf %lf %lf", &r.value, &r.delta, &r.seconds) == 3);
    csv->rows[csv->n_rows++] = r;
    return RP_OK;
}

const rp_scan_row *rp_scan_csv_find_plan(const rp_scan_csv *csv, const char *plan) {
    for (int k = 0; k < csv->n_rows; k++)
        if (!strcmp(csv->rows[k].plan, plan)) return &csv->rows[k];
    return NULL;
}

const rp_scan_row *rp_scan_csv_find(const rp_scan_csv *csv, int i, int j) {
    char plan[32];
    snprintf(plan, sizeof plan, "%d-%d", i, j);
    return rp_scan_csv_find_plan(csv, plan);
}

/* ---- reading ------------------------------------------------------------- */

static bool parse_int_field(const char **p, int *out) {
    char *end;
    errno = 0;
    long v = strtol(*p, &end, 10);
    if (end == *p || errno || v < 0 || v > RP_MAX_LAYERS || (*end != ',' && *end != 0))
        return false;
    *out = (int)v;
    *p = *end ? end + 1 : end;
    return true;
}

/* finite: seconds; a value or delta may be "nan" or "inf" (a plan whose
 * arithmetic overflowed is a result too) */
static bool parse_double_field(const char **p, double *out, bool finite) {
    char *end;
    errno = 0;
    double v = strtod(*p, &end);
    if (end - *p > 40) return false; /* no number this file writes is longer ("%.10g") */
    if (end == *p || (errno == ERANGE && isfinite(v) && v != 0) || (finite && !isfinite(v)) ||
        (*end != ',' && *end != 0))
        return false;
    *out = v;
    *p = *end ? end + 1 : end;
    return true;
}

/* The plan column (v2): a canonical spec holding block i,j, whose extra
 * layers are the row's. */
static rp_status parse_plan(rp_scan_row *r, const char *p, const char *path, int lineno) {
    rp_scan_plan pl;
    char canon[RP_SCAN_PLAN_LEN];
    if (strlen(p) >= sizeof r->plan || rp_scan_plan_parse(p, 0, &pl))
        return rp_fail(RP_ERR_FORMAT, "%s:%d: plan '%s' is not a plan of disjoint blocks 'i-j;k-l'",
                       path, lineno, p);
    rp_scan_plan_format(&pl, canon, sizeof canon);
    bool has = false;
    for (int k = 0; k < pl.n; k++) has |= pl.b[k].i == r->i && pl.b[k].j == r->j;
    if (strcmp(canon, p) || !has || rp_scan_plan_extra(&pl) != r->extra)
        return rp_fail(RP_ERR_FORMAT,
                       "%s:%d: plan '%s' does not hold block %d,%d with %d extra layers in all "
                       "(written as '%s')",
                       path, lineno, p, r->i, r->j, r->extra, canon);
    snprintf(r->plan, sizeof r->plan, "%s", p);
    return RP_OK;
}

static rp_status parse_row(rp_scan_csv *csv, const char *line, const char *path, int lineno,
                           bool v1) {
    rp_scan_row r;
    memset(&r, 0, sizeof r);
    const char *p = line;
    if (!parse_int_field(&p, &r.i) || !parse_int_field(&p, &r.j) || !parse_int_field(&p, &r.extra))
        return rp_fail(RP_ERR_FORMAT, "%s:%d: i, j and extra must be layer numbers: '%s'", path,
                       lineno, line);
    const char *comma = strchr(p, ',');
    if (!comma)
        return rp_fail(RP_ERR_FORMAT, "%s:%d: fewer than 7 columns: '%s'", path, lineno, line);
    if (!csv->metric || strlen(csv->metric) != (size_t)(comma - p) ||
        strncmp(p, csv->metric, (size_t)(comma - p)))
        return rp_fail(RP_ERR_FORMAT, "%s:%d: metric '%.*s' differs from the file's setting '%s'",
                       path, lineno, (int)(comma - p), p, csv->metric ? csv->metric : "(none)");
    p = comma + 1;
    if (!parse_double_field(&p, &r.value, false) || !parse_double_field(&p, &r.delta, false) ||
        !parse_double_field(&p, &r.seconds, true) || (v1 ? *p != 0 : !*p || p[-1] != ','))
        return rp_fail(RP_ERR_FORMAT,
                       "%s:%d: value, delta and seconds must be numbers (%d columns): '%s'", path,
                       lineno, v1 ? 7 : 8, line);
    if (r.j <= r.i || (v1 && r.extra != r.j - r.i))
        return rp_fail(RP_ERR_FORMAT,
                       "%s:%d: block %d,%d with %d extra layers is not a block [i,j)", path, lineno,
                       r.i, r.j, r.extra);
    rp_status s = v1 ? RP_OK : parse_plan(&r, p, path, lineno);
    if (s) return s;
    if (v1) snprintf(r.plan, sizeof r.plan, "%d-%d", r.i, r.j);
    if (rp_scan_csv_find_plan(csv, r.plan))
        return rp_fail(RP_ERR_FORMAT, "%s:%d: plan %s appears twice", path, lineno, r.plan);
    return rp_scan_csv_add(csv, &r);
}

rp_status rp_scan_csv_read(const char *path, rp_scan_csv *csv) {
    memset(csv, 0, sizeof *csv);
    char *data = NULL;
    size_t len = 0;
    rp_status s = rp_read_file(path, &data, &len);
    if (s) return s;
    int lineno = 0;
    bool header = false, v1 = false;
    for (char *p = data; *p && !s;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        size_t n = strlen(p);
        if (n && p[n - 1] == '\r') p[--n] = 0;
        lineno++;
        if (lineno == 1) {
            v1 = !strcmp(p, RP_SCAN_CSV_MAGIC_V1);
            if (strcmp(p, RP_SCAN_CSV_MAGIC) && !v1)
                s = rp_fail(RP_ERR_FORMAT,
                            "%s:1: not a reprise scan CSV (the first line is not '%s')", path,
                            RP_SCAN_CSV_MAGIC);
        } else if (!header && p[0] == '#') {
            const char *colon = strstr(p, ": ");
            if (strncmp(p, "# ", 2) || !colon || colon == p + 2)
                s = rp_fail(RP_ERR_FORMAT, "%s:%d: a setting reads '# key: value': '%s'", path,
                            lineno, p);
            else {
                char *key = rp_strndup(p + 2, (size_t)(colon - p - 2));
                if (!key)
                    s = RP_ERR_NOMEM;
                else if (meta_index(csv, key) >= 0)
                    s = rp_fail(RP_ERR_FORMAT, "%s:%d: setting '%s' given twice", path, lineno,
                                key);
                else
                    s = set_value(csv, key, false, rp_strdup(colon + 2));
                free(key);
            }
        } else if (!header) {
            const char *want = v1 ? RP_SCAN_CSV_HEADER_V1 : RP_SCAN_CSV_HEADER;
            if (strcmp(p, want))
                s = rp_fail(RP_ERR_FORMAT, "%s:%d: expected the column names '%s'", path, lineno,
                            want);
            else if (!csv->metric)
                s = rp_fail(RP_ERR_FORMAT, "%s: no '# metric:' setting before the column names",
                            path);
            header = true;
        } else if (n && !nl) {
            /* a last row with no newline: a write cut short (SIGKILL, a full
             * disk); the scan computes that block again */
            rp_log(RP_LOG_WARN, "%s:%d: the last row has no end of line (cut short): dropped", path,
                   lineno);
        } else if (n > 4096) {
            s = rp_fail(RP_ERR_FORMAT, "%s:%d: a row of %zu bytes (no scan row is over 4096)", path,
                        lineno, n);
        } else if (n) {
            s = parse_row(csv, p, path, lineno, v1);
        }
        p = nl ? nl + 1 : p + n;
    }
    if (!s && !header)
        s = rp_fail(RP_ERR_FORMAT, "%s: no column names line ('%s'): not a complete scan CSV", path,
                    RP_SCAN_CSV_HEADER);
    free(data);
    if (s) rp_scan_csv_free(csv);
    return s;
}

rp_status rp_scan_csv_check(const rp_scan_csv *file, const rp_scan_csv *want, const char *path) {
    for (int k = 0; k < want->n_meta; k++) {
        if (!want->check[k]) continue;
        const char *v = rp_scan_csv_get(file, want->key[k]);
        if (!v)
            return rp_fail(RP_ERR_INVALID_ARG,
                           "%s has no '%s' setting: it was not written by this kind of scan", path,
                           want->key[k]);
        if (strcmp(v, want->val[k]))
            return rp_fail(RP_ERR_INVALID_ARG,
                           "%s was written for %s '%s'; this run has %s '%s' (use another -o, or "
                           "remove the file "
                           "to start over)",
                           path, want->key[k], v, want->key[k], want->val[k]);
    }
    /* every row's blocks inside the model */
    const char *lv = rp_scan_csv_get(want, "layers");
    const int n_layer = lv ? atoi(lv) : 0;
    for (int k = 0; n_layer > 0 && k < file->n_rows; k++) {
        const rp_scan_row *r = &file->rows[k];
        rp_scan_plan pl;
        int top = r->j;
        if (!rp_scan_plan_parse(r->plan, 0, &pl))
            for (int b = 0; b < pl.n; b++) top = RP_MAX(top, pl.b[b].j);
        if (top > n_layer)
            return rp_fail(RP_ERR_INVALID_ARG,
                           "%s: the row of plan %s reaches layer %d; the model has %d layers", path,
                           r->plan, top, n_layer);
    }
    return RP_OK;
}

/* ---- writing ------------------------------------------------------------- */

rp_status rp_scan_csv_write(const char *path, const rp_scan_csv *csv) {
    rp_buf b = {0};
    bool ok = rp_buf_printf(&b, "%s\n", RP_SCAN_CSV_MAGIC);
    for (int k = 0; k < csv->n_meta && ok; k++)
        ok = rp_buf_printf(&b, "# %s: %s\n", csv->key[k], csv->val[k]);
    ok = ok && rp_buf_printf(&b, "%s\n", RP_SCAN_CSV_HEADER);
    for (int k = 0; k < csv->n_rows && ok; k++) {
        const rp_scan_row *r = &csv->rows[k];
        ok = rp_buf_printf(&b, "%d,%d,%d,%s,%.10g,%.10g,%.3f,%s\n", r->i, r->j, r->extra,
                           csv->metric ? csv->metric : "", r->value, r->delta, r->seconds, r->plan);
    }
    if (!ok) {
        rp_buf_free(&b);
        return RP_ERR_NOMEM;
    }
    rp_status s = rp_atomic_write_file(path, b.data, b.len);
    rp_buf_free(&b);
    return s;
}

/* ---- Pareto list --------------------------------------------------------- */

void rp_scan_pareto(const rp_scan_row *rows, int n, int sign, int max_extra, int *best,
                    bool *on_front) {
    for (int k = 0; k <= max_extra; k++) {
        best[k] = -1;
        on_front[k] = false;
    }
    for (int r = 0; r < n; r++) {
        const int k = rows[r].extra;
        if (k < 1 || k > max_extra || !isfinite(rows[r].delta)) continue;
        if (best[k] < 0 || sign * rows[r].delta > sign * rows[best[k]].delta) best[k] = r;
    }
    double bar = 0.0; /* the identity's delta */
    for (int k = 1; k <= max_extra; k++) {
        if (best[k] < 0) continue;
        const double d = sign * rows[best[k]].delta;
        if (d > bar) {
            on_front[k] = true;
            bar = d;
        }
    }
}

void rp_scan_rank(const rp_scan_row *rows, int n, int sign, int *order, int *n_order) {
    /* selection by (sign * delta, fewer extra layers, row order): rows with
     * the same score keep the order they came in */
    int k = 0;
    for (int r = 0; r < n; r++)
        if (isfinite(rows[r].delta)) order[k++] = r;
    for (int t = 0; t < k; t++) {
        int b = t;
        for (int u = t + 1; u < k; u++) {
            const rp_scan_row *x = &rows[order[u]], *y = &rows[order[b]];
            if (sign * x->delta > sign * y->delta ||
                (sign * x->delta == sign * y->delta && x->extra < y->extra) ||
                (sign * x->delta == sign * y->delta && x->extra == y->extra && order[u] < order[b]))
                b = u;
        }
        const int tmp = order[t];
        order[t] = order[b];
        order[b] = tmp;
    }
    *n_order = k;
}
