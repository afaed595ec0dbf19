#include "core/plan.h"
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLAN_STEPS 65536

static rp_status plan_alloc(int n_trunk, int n_eff, const char *spec, int kind, rp_plan **out) {
    rp_plan *p = rp_calloc(1, sizeof *p, "plan");
    if (!p) return RP_ERR_NOMEM;
    p->n_src = n_trunk;
    p->n_eff = n_eff;
    p->kind = kind;
    p->src = rp_calloc((size_t)n_eff + 1, sizeof *p->src, "plan");
    p->seam = rp_calloc((size_t)n_eff + 1, sizeof *p->seam, "plan");
    p->pass = rp_calloc((size_t)n_eff + 1, sizeof *p->pass, "plan");
    p->spec = rp_strdup(spec ? spec : "");
    p->res_scale = rp_calloc((size_t)n_eff + 1, sizeof *p->res_scale, "plan");
    p->n_lora = rp_calloc((size_t)n_eff + 1, sizeof *p->n_lora, "plan");
    p->lora = rp_calloc((size_t)n_eff * RP_PLAN_STEP_LORA + 1, sizeof *p->lora, "plan");
    p->lora_scale = rp_calloc((size_t)n_eff * RP_PLAN_STEP_LORA + 1, sizeof *p->lora_scale, "plan");
    if (!p->src || !p->seam || !p->pass || !p->spec || !p->res_scale || !p->n_lora || !p->lora ||
        !p->lora_scale) {
        rp_plan_free(p);
        return RP_ERR_NOMEM;
    }
    for (int e = 0; e < n_eff; e++) p->res_scale[e] = 1.0f;
    *out = p;
    return RP_OK;
}

static rp_status plan_finish(rp_plan *p, int n_trunk) {
    int *count = rp_calloc((size_t)n_trunk + 1, sizeof *count, "plan");
    if (!count) return RP_ERR_NOMEM;
    for (int e = 0; e < p->n_eff; e++) {
        p->seam[e] = e > 0 && p->src[e] != p->src[e - 1] + 1;
        p->pass[e] = count[p->src[e]]++;
    }
    free(count);
    return RP_OK;
}

void rp_plan_free(rp_plan *p) {
    if (!p) return;
    free(p->src);
    free(p->seam);
    free(p->pass);
    free(p->spec);
    free(p->res_scale);
    free(p->n_lora);
    free(p->lora);
    free(p->lora_scale);
    for (int i = 0; i < p->n_lora_path; i++) free(p->lora_path[i]);
    free(p->lora_path);
    free(p);
}

/* ---- step modifiers: "@s=F", "@lora=PATH[*F]" ------------------------------ */

typedef struct step_mod {
    float res; /* 1 = none */
    int n_lora;
    char *path[RP_PLAN_STEP_LORA];
    float scale[RP_PLAN_STEP_LORA];
} step_mod;

static void mod_free(step_mod *m) {
    for (int k = 0; k < m->n_lora; k++) free(m->path[k]);
    m->n_lora = 0;
}

/* A float filling [s, end) exactly. */
static bool parse_float(const char *s, const char *end, float *out) {
    char buf[64];
    size_t n = (size_t)(end - s);
    if (n == 0 || n >= sizeof buf) return false;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *e;
    errno = 0;
    double v = strtod(buf, &e);
    if (e != buf + n || errno == ERANGE || !isfinite(v)) return false;
    *out = (float)v;
    return true;
}

/* The modifiers in [s, end): s is at '@' or at end. what/idx/text name the
 * item or block in messages. */
static rp_status parse_mods(const char *s, const char *end, step_mod *m, const char *what, int idx,
                            const char *text) {
    m->res = 1.0f;
    bool have_res = false;
    while (s < end) {
        const char *next = memchr(s + 1, '@', (size_t)(end - s - 1));
        if (!next) next = end;
        const char *v = s + 1;
        if (!strncmp(v, "s=", 2) && v + 2 <= next) {
            float f;
            if (have_res)
                return rp_fail(RP_ERR_PLAN, "%s %d '%s': two residual scales ('@s=')", what, idx,
                               text);
            if (!parse_float(v + 2, next, &f) || !(f > 0.0f && f <= 16.0f))
                return rp_fail(RP_ERR_PLAN,
                               "%s %d '%s': residual scale '%.*s' is not a number in (0, 16]", what,
                               idx, text, (int)(next - v - 2), v + 2);
            m->res = f;
            have_res = true;
        } else if (!strncmp(v, "lora=", 5) && v + 5 <= next) {
            const char *p = v + 5, *pe = next, *star = NULL;
            for (const char *c = p; c < pe; c++)
                if (*c == '*') star = c;
            float f = 1.0f;
            if (star) {
                if (!parse_float(star + 1, pe, &f) || !(fabsf(f) <= 1e6f))
                    return rp_fail(RP_ERR_PLAN, "%s %d '%s': adapter scale '%.*s' is not a number",
                                   what, idx, text, (int)(pe - star - 1), star + 1);
                pe = star;
            }
            if (pe == p)
                return rp_fail(RP_ERR_PLAN, "%s %d '%s': '@lora=' names no adapter file", what, idx,
                               text);
            if (m->n_lora == RP_PLAN_STEP_LORA)
                return rp_fail(RP_ERR_PLAN, "%s %d '%s': more than %d adapters on one step", what,
                               idx, text, RP_PLAN_STEP_LORA);
            if (!(m->path[m->n_lora] = rp_strndup(p, (size_t)(pe - p)))) return RP_ERR_NOMEM;
            m->scale[m->n_lora++] = f;
        } else {
            return rp_fail(RP_ERR_PLAN,
                           "%s %d '%s': unknown step modifier '%.*s' (expected '@s=F' for a "
                           "residual scale or '@lora=PATH[*F]' for an adapter)",
                           what, idx, text, (int)(next - s), s);
        }
        s = next;
    }
    return RP_OK;
}

/* Gives step e of p the modifiers m (adapter paths interned in p). */
static rp_status apply_mod(rp_plan *p, int e, const step_mod *m) {
    p->res_scale[e] = m->res;
    for (int k = 0; k < m->n_lora; k++) {
        int i = 0;
        while (i < p->n_lora_path && strcmp(p->lora_path[i], m->path[k])) i++;
        if (i == p->n_lora_path) {
            char **np = rp_realloc(p->lora_path, (size_t)(i + 1) * sizeof *np, "plan adapters");
            if (!np) return RP_ERR_NOMEM;
            p->lora_path = np;
            if (!(np[i] = rp_strdup(m->path[k]))) return RP_ERR_NOMEM;
            p->n_lora_path++;
        }
        p->lora[e * RP_PLAN_STEP_LORA + k] = i;
        p->lora_scale[e * RP_PLAN_STEP_LORA + k] = m->scale[k];
    }
    p->n_lora[e] = m->n_lora;
    p->has_deltas |= m->res != 1.0f || m->n_lora > 0;
    return RP_OK;
}

/* The end of an item's range part: its first '@', or the item's end. */
static const char *range_end(const char *q, size_t len) {
    const char *at = memchr(q, '@', len);
    return at ? at : q + len;
}

rp_status rp_plan_identity(int n_trunk, rp_plan **out) {
    *out = NULL;
    if (n_trunk < 1) return rp_fail(RP_ERR_PLAN, "model has no layers to plan over");
    rp_status s = plan_alloc(n_trunk, n_trunk, "", RP_PLAN_IDENTITY, out);
    if (s) return s;
    for (int i = 0; i < n_trunk; i++) (*out)->src[i] = i;
    return plan_finish(*out, n_trunk);
}

/* Parses a non-negative decimal integer at *p (after spaces). */
static bool parse_num(const char **p, long *v) {
    const char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    if (!isdigit((unsigned char)*s)) return false;
    errno = 0;
    char *end;
    long x = strtol(s, &end, 10);
    if (errno == ERANGE || x > INT_MAX) {
        *v = -1; /* out of range */
        *p = end;
        return true;
    }
    *v = x;
    while (*end == ' ' || *end == '\t') end++;
    *p = end;
    return true;
}

static const char *mtp_note(int j, int n_trunk, int n_total, char *buf, size_t n) {
    if (n_total > n_trunk && j > n_trunk)
        snprintf(buf, n, "; layers %d..%d are the NextN/MTP head, which is never part of a plan",
                 n_trunk, n_total - 1);
    else
        buf[0] = 0;
    return buf;
}

typedef struct block {
    int i, j;
    int idx; /* 1-based position in the spec */
    char text[48];
    step_mod mod; /* modifiers of the second pass */
} block;

static int block_cmp(const void *a, const void *b) {
    return ((const block *)a)->i - ((const block *)b)->i;
}

rp_status rp_plan_repeat(const char *spec, int n_trunk, int n_total, rp_plan **out) {
    *out = NULL;
    if (!spec) return rp_plan_identity(n_trunk, out);
    const char *p = spec;
    while (isspace((unsigned char)*p)) p++;
    if (!*p)
        return rp_fail(RP_ERR_PLAN, "--repeat-layers: empty spec (expected blocks like '26,34')");
    int n_blocks = 1;
    for (const char *c = spec; *c; c++) n_blocks += *c == ';';
    block *b = rp_calloc((size_t)n_blocks, sizeof *b, "plan blocks");
    if (!b) return RP_ERR_NOMEM;
    rp_status s = RP_OK;
    int nb = 0;
    const char *q = spec;
    char note[160];
    for (int k = 0; k < n_blocks; k++) {
        const char *end = strchr(q, ';');
        size_t len = end ? (size_t)(end - q) : strlen(q);
        block *bk = &b[nb];
        bk->idx = k + 1;
        snprintf(bk->text, sizeof bk->text, "%.*s", (int)(len < 40 ? len : 40), q);
        const char *c = q;
        long i, j;
        const char *re = range_end(q, len);
        bool ok = parse_num(&c, &i) && (*c == ',' || *c == '-');
        if (ok) c++;
        ok = ok && parse_num(&c, &j) && c == re;
        if (!ok) {
            s = rp_fail(RP_ERR_PLAN,
                        "--repeat-layers: block %d '%s' is malformed (expected 'i,j' or 'i-j', "
                        "the half-open range [i,j) of source layers)",
                        k + 1, bk->text);
            goto done;
        }
        if (i < 0 || j < 0) {
            s = rp_fail(RP_ERR_PLAN, "--repeat-layers: block %d '%s': number out of range", k + 1,
                        bk->text);
            goto done;
        }
        if (i >= j) {
            s = rp_fail(RP_ERR_PLAN,
                        "--repeat-layers: block %d '%s' is empty: needs i < j ([i,j) is half-open, "
                        "so 'k,k+1' repeats layer k once)",
                        k + 1, bk->text);
            goto done;
        }
        if (j > n_trunk) {
            s = rp_fail(RP_ERR_PLAN,
                        "--repeat-layers: block %d '%s' ends at %ld, beyond the model's %d "
                        "transformer layers (valid: 0 <= i < j <= %d)%s",
                        k + 1, bk->text, j, n_trunk, n_trunk,
                        mtp_note((int)j, n_trunk, n_total, note, sizeof note));
            goto done;
        }
        bk->i = (int)i;
        bk->j = (int)j;
        nb++;
        if ((s = parse_mods(re, q + len, &bk->mod, "--repeat-layers: block", k + 1, bk->text)))
            goto done;
        q = end ? end + 1 : q + len;
    }
    qsort(b, (size_t)nb, sizeof *b, block_cmp);
    for (int k = 1; k < nb; k++)
        if (b[k].i < b[k - 1].j) {
            s = rp_fail(
                RP_ERR_PLAN,
                "--repeat-layers: blocks %d '%s' and %d '%s' overlap (blocks must be disjoint)",
                b[k - 1].idx, b[k - 1].text, b[k].idx, b[k].text);
            goto done;
        }
    long n_eff = n_trunk;
    for (int k = 0; k < nb; k++) n_eff += b[k].j - b[k].i;
    if (n_eff > MAX_PLAN_STEPS) {
        s = rp_fail(RP_ERR_PLAN, "--repeat-layers: plan has %ld steps (limit %d)", n_eff,
                    MAX_PLAN_STEPS);
        goto done;
    }
    s = plan_alloc(n_trunk, (int)n_eff, spec, RP_PLAN_REPEAT, out);
    if (s) goto done;
    int e = 0, k = 0;
    for (int l = 0; l < n_trunk && !s; l++) {
        (*out)->src[e++] = l;
        if (k < nb && l == b[k].j - 1) {
            for (int r = b[k].i; r < b[k].j && !s; r++) {
                s = apply_mod(*out, e, &b[k].mod);
                (*out)->src[e++] = r;
            }
            k++;
        }
    }
    RP_ASSERT(s || e == n_eff);
    if (!s) s = plan_finish(*out, n_trunk);
done:
    for (int k2 = 0; k2 < n_blocks; k2++) mod_free(&b[k2].mod);
    free(b);
    if (s && *out) {
        rp_plan_free(*out);
        *out = NULL;
    }
    return s;
}

/* One item of a layer map: its range and modifiers, validated. */
static rp_status map_item(const char *q, size_t len, int item, int n_trunk, int n_total, long *a,
                          long *bnd, step_mod *mod) {
    char text[48], note[160];
    snprintf(text, sizeof text, "%.*s", (int)(len < 40 ? len : 40), q);
    const char *c = q, *re = range_end(q, len);
    bool ok = parse_num(&c, a);
    if (ok && c < re && c[0] == '.' && c[1] == '.') {
        c += 2;
        ok = parse_num(&c, bnd);
    } else {
        *bnd = *a;
    }
    if (!ok || c != re)
        return rp_fail(RP_ERR_PLAN,
                       "--layer-map: item %d '%s' is malformed (expected a layer 'k' or an "
                       "inclusive range 'a..b', optionally followed by '@s=F' / '@lora=PATH')",
                       item, text);
    if (*a < 0 || *bnd < 0)
        return rp_fail(RP_ERR_PLAN, "--layer-map: item %d '%s': number out of range", item, text);
    if (*bnd < *a)
        return rp_fail(RP_ERR_PLAN,
                       "--layer-map: item %d '%s': range runs backwards (a..b needs a <= b)", item,
                       text);
    if (*bnd >= n_trunk)
        return rp_fail(RP_ERR_PLAN,
                       "--layer-map: item %d '%s' names layer %ld, but the model has %d "
                       "transformer layers (0..%d)%s",
                       item, text, *bnd, n_trunk, n_trunk - 1,
                       mtp_note((int)*bnd + 1, n_trunk, n_total, note, sizeof note));
    return parse_mods(re, q + len, mod, "--layer-map: item", item, text);
}

rp_status rp_plan_map(const char *map, int n_trunk, int n_total, rp_plan **out) {
    *out = NULL;
    if (!map) return rp_plan_identity(n_trunk, out);
    const char *p = map;
    while (isspace((unsigned char)*p)) p++;
    if (!*p)
        return rp_fail(RP_ERR_PLAN, "--layer-map: empty map (expected items like '0..15,11..31')");
    int n_items = 1;
    for (const char *c = map; *c; c++) n_items += *c == ',';
    step_mod *mods = rp_calloc((size_t)n_items, sizeof *mods, "plan items");
    long *lo = rp_calloc((size_t)n_items, sizeof *lo, "plan items");
    long *hi = rp_calloc((size_t)n_items, sizeof *hi, "plan items");
    rp_status s = !mods || !lo || !hi ? RP_ERR_NOMEM : RP_OK;
    long n_eff = 0;
    const char *q = map;
    for (int item = 0; item < n_items && !s; item++) {
        const char *end = strchr(q, ',');
        size_t len = end ? (size_t)(end - q) : strlen(q);
        s = map_item(q, len, item + 1, n_trunk, n_total, &lo[item], &hi[item], &mods[item]);
        if (!s && (n_eff += hi[item] - lo[item] + 1) > MAX_PLAN_STEPS)
            s = rp_fail(RP_ERR_PLAN, "--layer-map: more than %d steps", MAX_PLAN_STEPS);
        q = end ? end + 1 : q + len;
    }
    if (!s) s = plan_alloc(n_trunk, (int)n_eff, map, RP_PLAN_MAP, out);
    int e = 0;
    for (int item = 0; item < n_items && !s; item++)
        for (long l = lo[item]; l <= hi[item] && !s; l++) {
            s = apply_mod(*out, e, &mods[item]);
            (*out)->src[e++] = (int)l;
        }
    if (!s) s = plan_finish(*out, n_trunk);
    for (int item = 0; mods && item < n_items; item++) mod_free(&mods[item]);
    free(mods);
    free(lo);
    free(hi);
    if (s && *out) {
        rp_plan_free(*out);
        *out = NULL;
    }
    return s;
}

bool rp_plan_is_identity(const rp_plan *p) {
    if (p->n_eff != p->n_src) return false;
    for (int e = 0; e < p->n_eff; e++)
        if (p->src[e] != e) return false;
    return true;
}

int rp_plan_boundary_repeats(const rp_plan *p, int *band) {
    int w = RP_MAX(3, p->n_src / 8);
    *band = w;
    int n = 0;
    for (int e = 0; e < p->n_eff; e++)
        if (p->pass[e] > 0 && (p->src[e] < w || p->src[e] >= p->n_src - w)) n++;
    return n;
}

int rp_plan_format(const rp_plan *p, char *buf, size_t size) {
    rp_buf b = {0};
    int e = 0;
    while (e < p->n_eff) {
        int f = e;
        while (f + 1 < p->n_eff && !p->seam[f + 1]) f++;
        if (e) rp_buf_printf(&b, " | ");
        if (f == e)
            rp_buf_printf(&b, "%d", p->src[e]);
        else
            rp_buf_printf(&b, "%d..%d", p->src[e], p->src[f]);
        e = f + 1;
    }
    int n = (int)b.len;
    if (size) snprintf(buf, size, "%s", b.data ? b.data : "");
    rp_buf_free(&b);
    return n;
}

int rp_plan_format_deltas(const rp_plan *p, char *buf, size_t size) {
    rp_buf b = {0};
    for (int e = 0; p->has_deltas && e < p->n_eff; e++) {
        if (p->res_scale[e] == 1.0f && !p->n_lora[e]) continue;
        rp_buf_printf(&b, "  step %d (src %d, pass %d):", e, p->src[e], p->pass[e] + 1);
        if (p->res_scale[e] != 1.0f) rp_buf_printf(&b, " residual x%g", (double)p->res_scale[e]);
        for (int k = 0; k < p->n_lora[e]; k++)
            rp_buf_printf(&b, "%s lora %s x%g", p->res_scale[e] != 1.0f || k ? "," : "",
                          p->lora_path[p->lora[e * RP_PLAN_STEP_LORA + k]],
                          (double)p->lora_scale[e * RP_PLAN_STEP_LORA + k]);
        rp_buf_printf(&b, "\n");
    }
    int n = (int)b.len;
    if (size) snprintf(buf, size, "%s", b.data ? b.data : "");
    rp_buf_free(&b);
    return n;
}
