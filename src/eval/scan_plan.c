/* Plans of disjoint RYS blocks as the scan handles them (a base plan, the
 * plans of a beam search), and the split of a scan's blocks into shards. */
#include "eval/scan.h"
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool parse_layer(const char **p, long *out) {
    while (**p == ' ' || **p == '\t') (*p)++;
    if (!isdigit((unsigned char)**p)) return false;
    char *end;
    errno = 0;
    long v = strtol(*p, &end, 10);
    if (errno || v > 1000000) return false;
    *out = v;
    *p = end;
    while (**p == ' ' || **p == '\t') (*p)++;
    return true;
}

rp_status rp_scan_plan_parse(const char *spec, int n_layer, rp_scan_plan *out) {
    memset(out, 0, sizeof *out);
    if (!spec) return RP_OK;
    const char *p = spec;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return RP_OK;
    rp_scan_plan t = {0};
    for (int k = 1;; k++) {
        long i, j;
        const char *blk = p;
        bool ok = parse_layer(&p, &i) && (*p == ',' || *p == '-');
        if (ok) p++;
        ok = ok && parse_layer(&p, &j) && (*p == ';' || !*p);
        if (!ok)
            return rp_fail(RP_ERR_PLAN,
                           "plan '%s': block %d ('%.*s') is malformed (expected 'i,j' or 'i-j', "
                           "blocks separated by ';')",
                           spec, k, (int)strcspn(blk, ";"), blk);
        if (i >= j)
            return rp_fail(RP_ERR_PLAN, "plan '%s': block %d is %ld,%ld; blocks need i < j", spec,
                           k, i, j);
        if (n_layer > 0 && j > n_layer)
            return rp_fail(RP_ERR_PLAN, "plan '%s': block %ld,%ld ends beyond the %d layers", spec,
                           i, j, n_layer);
        rp_status s = rp_scan_plan_add(&t, (int)i, (int)j, &t);
        if (s) return rp_fail_prefix(s, "plan '%s'", spec);
        if (!*p) break;
        p++;
    }
    *out = t;
    return RP_OK;
}

void rp_scan_plan_format(const rp_scan_plan *p, char *buf, size_t size) {
    size_t o = 0;
    if (size) buf[0] = 0;
    for (int k = 0; k < p->n && o < size; k++) {
        int w = snprintf(buf + o, size - o, "%s%d-%d", k ? ";" : "", p->b[k].i, p->b[k].j);
        if (w < 0) break;
        o += (size_t)w;
    }
}

int rp_scan_plan_extra(const rp_scan_plan *p) {
    int e = 0;
    for (int k = 0; k < p->n; k++) e += p->b[k].j - p->b[k].i;
    return e;
}

bool rp_scan_plan_disjoint(const rp_scan_plan *p, int i, int j) {
    for (int k = 0; k < p->n; k++)
        if (i < p->b[k].j && p->b[k].i < j) return false;
    return true;
}

rp_status rp_scan_plan_add(const rp_scan_plan *p, int i, int j, rp_scan_plan *out) {
    if (i < 0 || j <= i) return rp_fail(RP_ERR_PLAN, "block %d,%d is empty", i, j);
    for (int k = 0; k < p->n; k++)
        if (i < p->b[k].j && p->b[k].i < j)
            return rp_fail(RP_ERR_PLAN, "block %d,%d overlaps block %d,%d (blocks are disjoint)", i,
                           j, p->b[k].i, p->b[k].j);
    if (p->n >= RP_SCAN_MAX_BLOCKS)
        return rp_fail(RP_ERR_PLAN, "a plan of more than %d blocks", RP_SCAN_MAX_BLOCKS);
    rp_scan_plan t = *p;
    int at = t.n;
    while (at > 0 && t.b[at - 1].i > i) {
        t.b[at] = t.b[at - 1];
        at--;
    }
    t.b[at] = (rp_scan_block){i, j};
    t.n++;
    *out = t;
    return RP_OK;
}

int rp_scan_plan_fork(const rp_scan_plan *p, int i, int j) {
    (void)i;
    int f = j;
    for (int k = 0; k < p->n; k++)
        if (p->b[k].j <= j) f += p->b[k].j - p->b[k].i;
    return f;
}

/* ---- shards -------------------------------------------------------------- */

int rp_scan_shard(rp_scan_block *blocks, int n_blocks, int n_layer, int k, int n) {
    RP_ASSERT(k >= 1 && k <= n && n_layer >= 1 && n_layer <= 1 << 16);
    /* the work of each end layer j: the steps from j on of each of its blocks */
    double *work = rp_calloc((size_t)n_layer + 1, sizeof *work, "scan shards");
    int *owner = rp_malloc(((size_t)n_layer + 1) * sizeof *owner, "scan shards");
    double *load = rp_calloc((size_t)n, sizeof *load, "scan shards");
    if (!work || !owner || !load) {
        free(work);
        free(owner);
        free(load);
        return -1;
    }
    for (int b = 0; b < n_blocks; b++) {
        const int j = blocks[b].j;
        if (j >= 0 && j <= n_layer) work[j] += n_layer - blocks[b].i + 1;
    }
    for (int j = 0; j <= n_layer; j++) owner[j] = -1;
    /* largest first, ties by j; each to the least loaded shard (ties: the lowest) */
    for (;;) {
        int best = -1;
        for (int j = 0; j <= n_layer; j++)
            if (owner[j] < 0 && work[j] > 0 && (best < 0 || work[j] > work[best])) best = j;
        if (best < 0) break;
        int sh = 0;
        for (int t = 1; t < n; t++)
            if (load[t] < load[sh]) sh = t;
        owner[best] = sh;
        load[sh] += work[best];
    }
    int kept = 0;
    for (int b = 0; b < n_blocks; b++)
        if (blocks[b].j >= 0 && blocks[b].j <= n_layer && owner[blocks[b].j] == k - 1)
            blocks[kept++] = blocks[b];
    free(work);
    free(owner);
    free(load);
    return kept;
}
