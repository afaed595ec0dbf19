/* reprise scan: running the plans. The identity first (every delta is
 * against it), the base plan's value, then the blocks on the base in
 * ascending j (the prefix reuse), then for a beam search each round: the W
 * best plans of the last round, each with every disjoint block added, the
 * plans of one parent together in ascending j (they share its prefix). */
#include "scan.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

/* Progress of a round, weighted by the plan steps each evaluation runs per
 * token (what its time is proportional to). */
typedef struct scan_progress {
    progress pr;
    double units_total, units_done, units_now; /* units of the evaluation in progress */
    int done, total;                           /* plans */
    char last[RP_SCAN_PLAN_LEN + 64];          /* the last plan's result */
    double t0;
} scan_progress;

static bool on_progress(float frac, void *user) {
    scan_progress *sp = user;
    if (g_stop) return false;
    const double f =
        sp->units_total > 0 ? (sp->units_done + frac * sp->units_now) / sp->units_total : 0;
    char extra[RP_SCAN_PLAN_LEN + 160];
    snprintf(extra, sizeof extra, "| plans %d/%d%s%s", sp->done, sp->total,
             sp->last[0] ? " | last " : "", sp->last);
    progress_update(&sp->pr, (float)f, extra);
    return true;
}

/* Work of a candidate in plan steps per token: from its fork with the prefix
 * held (plus the steps that advance it), the whole plan without reuse. */
static double cand_units(int n_layer, const scan_cand *c, bool reuse, int *held, int *held_group) {
    const int n_eff = n_layer + rp_scan_plan_extra(&c->plan);
    if (!reuse) return n_eff;
    double u = n_eff - c->fork;
    if (*held != c->fork || *held_group != c->group)
        u += *held_group == c->group && *held > 0 && *held < c->fork ? c->fork - *held : c->fork;
    *held = c->fork;
    *held_group = c->group;
    return u;
}

/* ---- candidates ---------------------------------------------------------- */

static bool cand_known(const scan_job *job, int from, const char *spec) {
    for (int k = from; k < job->n_cands; k++)
        if (!strcmp(job->cands[k].spec, spec)) return true;
    return false;
}

/* Every block of the scan disjoint from parent, added to it (group g). A plan
 * already among the candidates from `from` on is not added twice. */
static bool add_cands(scan_job *job, const rp_scan_plan *parent, int g, int from) {
    for (int b = 0; b < job->n_blocks; b++) {
        const int i = job->blocks[b].i, j = job->blocks[b].j;
        if (!rp_scan_plan_disjoint(parent, i, j)) continue;
        scan_cand c = {.i = i, .j = j, .group = g};
        if (rp_scan_plan_add(parent, i, j, &c.plan)) continue; /* too many blocks */
        rp_scan_plan_format(&c.plan, c.spec, sizeof c.spec);
        if (cand_known(job, from, c.spec)) continue;
        c.fork = rp_scan_plan_fork(parent, i, j);
        if (job->n_cands == job->cap_cands) {
            int cap = job->cap_cands ? 2 * job->cap_cands : 256;
            scan_cand *n = realloc(job->cands, (size_t)cap * sizeof *n);
            if (!n) return tool_error(job->cmd, "out of memory"), false;
            job->cands = n;
            job->cap_cands = cap;
        }
        job->cands[job->n_cands++] = c;
    }
    return true;
}

bool scan_first_cands(scan_job *job) {
    job->n_cands = 0;
    if (!add_cands(job, &job->base, 0, 0)) return false;
    job->n_first = job->n_cands;
    job->n_todo = 0;
    for (int k = 0; k < job->n_cands; k++)
        job->n_todo += !rp_scan_csv_find_plan(&job->csv, job->cands[k].spec);
    return true;
}

/* The next round: the W best plans among candidates [from, to), each with
 * every disjoint block. Returns the count of parents (0: nothing to grow). */
static int next_round(scan_job *job, int from, int to, int sign) {
    const int n = to - from;
    rp_scan_row *rows = malloc(((size_t)n + 1) * sizeof *rows);
    int *order = malloc(((size_t)n + 1) * sizeof *order), n_order = 0, n_rows = 0;
    int *idx = malloc(((size_t)n + 1) * sizeof *idx);
    if (!rows || !order || !idx) {
        free(rows);
        free(order);
        free(idx);
        tool_error(job->cmd, "out of memory");
        return -1;
    }
    for (int k = from; k < to; k++) {
        const rp_scan_row *r = rp_scan_csv_find_plan(&job->csv, job->cands[k].spec);
        if (!r) continue;
        idx[n_rows] = k;
        rows[n_rows++] = *r;
    }
    rp_scan_rank(rows, n_rows, sign, order, &n_order);
    const int w = n_order < job->o->beam ? n_order : job->o->beam;
    const int start = job->n_cands;
    int parents = 0;
    for (int t = 0; t < w; t++) {
        const rp_scan_plan parent = job->cands[idx[order[t]]].plan;
        if (!add_cands(job, &parent, 1 + t, start)) {
            parents = -1;
            break;
        }
        parents++;
        if (g_verbosity > 0)
            fprintf(stderr, "beam: parent %d: %s (delta %+.6f)\n", t + 1, rows[order[t]].plan,
                    rows[order[t]].delta);
    }
    free(rows);
    free(order);
    free(idx);
    return parents;
}

/* ---- running --------------------------------------------------------------- */

typedef struct run_state {
    scan_job *job;
    scan_stats *st;
    rp_scan *scan;
    scan_progress prog;
    bool started; /* the identity (and the base) evaluated */
} run_state;

static rp_status run_identity(run_state *rs) {
    scan_job *job = rs->job;
    const scan_opts *o = job->o;
    rp_scan_result id;
    rp_status s = rp_scan_identity(rs->scan, &id);
    progress_done(&rs->prog.pr);
    if (s) return s;
    rs->st->t_identity = id.seconds;
    const char *rec = rp_scan_csv_get(&job->csv, "identity");
    if (rec) {
        const double v = strtod(rec, NULL);
        if (!(fabs(v - id.value) <= 1e-6 * fmax(1.0, fabs(id.value))))
            fprintf(stderr,
                    "warning: the identity plan scores %.10g now; %s recorded %s (another build or "
                    "machine?): its rows were measured against that\n",
                    id.value, o->out, rec);
    } else {
        rp_scan_csv_set(&job->csv, "identity", false, "%.10g", id.value);
        if (id.unc > 0) rp_scan_csv_set(&job->csv, "identity-unc", false, "%.6g", id.unc);
        if (id.accuracy >= 0)
            rp_scan_csv_set(&job->csv, "identity-accuracy", false, "%.6g", id.accuracy);
        if (id.math >= 0) rp_scan_csv_set(&job->csv, "identity-math", false, "%.6g", id.math);
        if (id.eq >= 0) rp_scan_csv_set(&job->csv, "identity-eq", false, "%.6g", id.eq);
    }
    if (g_verbosity > 0) {
        fprintf(stderr, "identity: %s %.6f", rp_scan_metric_name(o->metric), id.value);
        if (id.unc > 0) fprintf(stderr, " +/- %.5f", id.unc);
        if (id.accuracy >= 0) fprintf(stderr, ", accuracy %.2f%%", 100 * id.accuracy);
        if (id.math >= 0) fprintf(stderr, ", math %.4f", id.math);
        if (id.eq >= 0) fprintf(stderr, ", eq %.4f", id.eq);
        fprintf(stderr, " in %.2f s\n", id.seconds);
    }
    if (job->base.n && !rp_scan_csv_get(&job->csv, "base-value")) {
        rp_scan_result b;
        if ((s = rp_scan_plan_eval(rs->scan, &job->base, 0, &b))) return s;
        progress_done(&rs->prog.pr);
        rp_scan_csv_set(&job->csv, "base-value", false, "%.10g", b.value);
        rp_scan_csv_set(&job->csv, "base-delta", false, "%.10g", b.delta);
        if (g_verbosity > 0)
            fprintf(stderr, "base plan %s: %s %.6f (%+.6f) in %.2f s\n", job->base_spec,
                    rp_scan_metric_name(o->metric), b.value, b.delta, b.seconds);
    }
    return rp_scan_csv_write(o->out, &job->csv);
}

/* The scan and the identity, at the first plan to run. */
static rp_status start(run_state *rs) {
    if (rs->started) return RP_OK;
    scan_job *job = rs->job;
    const scan_opts *o = job->o;
    const rp_scan_params sp = {
        .metric = o->metric,
        .n_threads = o->mo.n_threads,
        .type_k = o->mo.type_k,
        .type_v = o->mo.type_v,
        .n_batch = o->n_batch,
        .reuse = !o->no_reuse,
        .combine = o->combine,
        .res_scale = o->scale,
        .progress = on_progress,
        .progress_user = &rs->prog,
    };
    rp_status s = rp_scan_new(job->model, &job->set, &sp, &rs->scan);
    if (s) return s;
    rs->st->reusing = rp_scan_reusing(rs->scan);
    const bool gen = o->metric == RP_SCAN_MATH || o->metric == RP_SCAN_EQ ||
                     (o->metric == RP_SCAN_COMBINED && (job->set.n_math || job->set.n_eq));
    if (!o->no_reuse && !rs->st->reusing && g_verbosity > 0)
        fprintf(stderr,
                gen ? "scan: generation probes run every plan whole: no prefix reuse\n"
                    : "scan: the %s forward pass runs whole plans only: no prefix reuse\n",
                rp_model_arch(job->model));
    rs->started = true;
    rs->prog.units_now = job->n_layer;
    return run_identity(rs);
}

/* One line per finished plan, with the time left. */
static void say_plan(const run_state *rs, const scan_cand *c, const rp_scan_result *r) {
    if (g_verbosity <= 0) return;
    const scan_progress *prog = &rs->prog;
    const double el = now_s() - prog->t0;
    const double left =
        prog->units_done > 0 ? el / prog->units_done * (prog->units_total - prog->units_done) : 0;
    char eta[32];
    fmt_duration(eta, sizeof eta, left);
    fprintf(stderr, "[%d/%d] ", prog->done, prog->total);
    if (c->plan.n == 1)
        fprintf(stderr, "block %d,%d", c->i, c->j);
    else
        fprintf(stderr, "plan %s", c->spec);
    fprintf(stderr, " (+%d): %s %.6f (%+.6f)", rp_scan_plan_extra(&c->plan),
            rp_scan_metric_name(rs->job->o->metric), r->value, r->delta);
    if (r->accuracy >= 0) fprintf(stderr, ", accuracy %.2f%%", 100 * r->accuracy);
    if (r->math >= 0) fprintf(stderr, ", math %.4f", r->math);
    if (r->eq >= 0) fprintf(stderr, ", eq %.4f", r->eq);
    fprintf(stderr, " in %.2f s, %s left\n", r->seconds, eta);
}

/* Candidates [from, to) not in the CSV yet, each row written as it finishes. */
static rp_status run_cands(run_state *rs, int from, int to) {
    scan_job *job = rs->job;
    scan_progress *prog = &rs->prog;
    int held = -1, held_group = -1, todo = 0;
    double units = 0;
    for (int k = from; k < to; k++)
        if (!rp_scan_csv_find_plan(&job->csv, job->cands[k].spec)) {
            todo++;
            units +=
                cand_units(job->n_layer, &job->cands[k], !job->o->no_reuse, &held, &held_group);
        }
    if (!todo) return RP_OK;
    prog->done = 0;
    prog->total = todo;
    prog->units_done = 0;
    prog->units_total = units + (rs->started ? 0 : job->n_layer * (job->base.n ? 2 : 1));
    prog->t0 = now_s();
    rp_status s = start(rs);
    if (s) return s;
    prog->units_done = prog->units_total - units;
    held = held_group = -1;
    const double t0 = now_s();
    for (int k = from; k < to; k++) {
        const scan_cand *c = &job->cands[k];
        if (rp_scan_csv_find_plan(&job->csv, c->spec)) continue;
        prog->units_now = cand_units(job->n_layer, c, rs->st->reusing, &held, &held_group);
        rp_scan_result r;
        if ((s = rp_scan_plan_eval(rs->scan, &c->plan, c->fork, &r))) return s;
        progress_done(&prog->pr);
        prog->units_done += prog->units_now;
        prog->done++;
        rs->st->n_run++;
        rp_scan_row row = {c->i,      c->j, rp_scan_plan_extra(&c->plan), r.value, r.delta,
                           r.seconds, ""};
        snprintf(row.plan, sizeof row.plan, "%s", c->spec);
        if ((s = rp_scan_csv_add(&job->csv, &row)) ||
            (s = rp_scan_csv_write(job->o->out, &job->csv)))
            return s;
        snprintf(prog->last, sizeof prog->last, "%s %s %+.4g", c->spec,
                 rp_scan_metric_name(job->o->metric), r.delta);
        say_plan(rs, c, &r);
    }
    rs->st->t_scan += now_s() - t0;
    return RP_OK;
}

/* The first round, then the beam's rounds 2..depth. */
static rp_status run_rounds(run_state *rs) {
    scan_job *job = rs->job;
    rp_status s = run_cands(rs, 0, job->n_first);
    const int sign = rp_scan_metric_sign(job->o->metric);
    int from = 0, to = job->n_first;
    for (int d = 2; !s && job->o->beam > 0 && d <= job->o->depth; d++) {
        const int parents = next_round(job, from, to, sign);
        if (parents < 0) return RP_ERR_NOMEM;
        if (parents == 0 || job->n_cands == to) break;
        if (g_verbosity > 0)
            fprintf(stderr, "beam: round %d: %d plans of %d blocks from %d parents\n", d,
                    job->n_cands - to, job->base.n + d, parents);
        from = to;
        to = job->n_cands;
        s = run_cands(rs, from, to);
    }
    return s;
}

bool scan_execute(scan_job *job, scan_stats *st) {
    run_state rs = {.job = job, .st = st};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second signal ends the process at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    progress_init(&rs.prog.pr, job->cmd);
    rp_status s = run_rounds(&rs);
    progress_done(&rs.prog.pr);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (rs.scan) st->steps = rp_scan_steps_run(rs.scan);
    rp_scan_free(rs.scan);
    st->interrupted = s == RP_ERR_CANCELLED;
    if (st->interrupted) {
        int have = 0;
        for (int k = 0; k < job->n_first; k++)
            have += rp_scan_csv_find_plan(&job->csv, job->cands[k].spec) != NULL;
        fprintf(stderr,
                "reprise scan: interrupted; %s holds %d of the %d blocks (%d plans in all); run "
                "the same command to continue\n",
                job->o->out, have, job->n_first, job->csv.n_rows);
    } else if (s)
        tool_fail(job->cmd, s);
    return !s || st->interrupted;
}
