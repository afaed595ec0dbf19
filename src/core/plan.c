#include "core/plan.h"
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
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
    if (!p->src || !p->seam || !p->pass || !p->spec) {
        rp_plan_free(p);
        return RP_ERR_NOMEM;
    }
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
    free(p);
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
        bool ok = parse_num(&c, &i) && (*c == ',' || *c == '-');
        if (ok) c++;
        ok = ok && parse_num(&c, &j) && c == q + len;
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
    for (int l = 0; l < n_trunk; l++) {
        (*out)->src[e++] = l;
        if (k < nb && l == b[k].j - 1) {
            for (int r = b[k].i; r < b[k].j; r++) (*out)->src[e++] = r;
            k++;
        }
    }
    RP_ASSERT(e == n_eff);
    s = plan_finish(*out, n_trunk);
done:
    free(b);
    if (s && *out) {
        rp_plan_free(*out);
        *out = NULL;
    }
    return s;
}

rp_status rp_plan_map(const char *map, int n_trunk, int n_total, rp_plan **out) {
    *out = NULL;
    if (!map) return rp_plan_identity(n_trunk, out);
    const char *p = map;
    while (isspace((unsigned char)*p)) p++;
    if (!*p)
        return rp_fail(RP_ERR_PLAN, "--layer-map: empty map (expected items like '0..15,11..31')");
    char note[160];
    /* two passes: count steps with validation, then fill */
    long n_eff = 0;
    int *steps = NULL;
    for (int pass = 0; pass < 2; pass++) {
        const char *q = map;
        int item = 0;
        long e = 0;
        while (1) {
            item++;
            const char *end = strchr(q, ',');
            size_t len = end ? (size_t)(end - q) : strlen(q);
            char text[48];
            snprintf(text, sizeof text, "%.*s", (int)(len < 40 ? len : 40), q);
            const char *c = q;
            long a, bnd;
            bool ok = parse_num(&c, &a);
            if (ok && c < q + len && c[0] == '.' && c[1] == '.') {
                c += 2;
                ok = parse_num(&c, &bnd);
            } else {
                bnd = a;
            }
            if (!ok || c != q + len) {
                free(steps);
                return rp_fail(RP_ERR_PLAN,
                               "--layer-map: item %d '%s' is malformed (expected a layer 'k' or an "
                               "inclusive range 'a..b')",
                               item, text);
            }
            if (a < 0 || bnd < 0) {
                free(steps);
                return rp_fail(RP_ERR_PLAN, "--layer-map: item %d '%s': number out of range", item,
                               text);
            }
            if (bnd < a) {
                free(steps);
                return rp_fail(
                    RP_ERR_PLAN,
                    "--layer-map: item %d '%s': range runs backwards (a..b needs a <= b)", item,
                    text);
            }
            if (bnd >= n_trunk) {
                free(steps);
                return rp_fail(RP_ERR_PLAN,
                               "--layer-map: item %d '%s' names layer %ld, but the model has %d "
                               "transformer layers (0..%d)%s",
                               item, text, bnd, n_trunk, n_trunk - 1,
                               mtp_note((int)bnd + 1, n_trunk, n_total, note, sizeof note));
            }
            if (pass == 0) {
                e += bnd - a + 1;
                if (e > MAX_PLAN_STEPS)
                    return rp_fail(RP_ERR_PLAN, "--layer-map: more than %d steps", MAX_PLAN_STEPS);
            } else {
                for (long l = a; l <= bnd; l++) steps[e++] = (int)l;
            }
            if (!end) break;
            q = end + 1;
        }
        if (pass == 0) {
            n_eff = e;
            steps = rp_calloc((size_t)n_eff, sizeof *steps, "plan");
            if (!steps) return RP_ERR_NOMEM;
        }
    }
    rp_status s = plan_alloc(n_trunk, (int)n_eff, map, RP_PLAN_MAP, out);
    if (!s) {
        memcpy((*out)->src, steps, (size_t)n_eff * sizeof *steps);
        s = plan_finish(*out, n_trunk);
    }
    free(steps);
    if (s) {
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
