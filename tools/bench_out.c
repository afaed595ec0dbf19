/* reprise bench's lists and report formats (see bench.h). */
#include "bench.h"
#include "tools.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool bench_fmt_parse(const char *s, bench_fmt *fmt) {
    static const char *const names[] = {"md", "csv", "json"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *fmt = (bench_fmt)i;
            return true;
        }
    return false;
}

/* the items of a comma list, each handed to `one`; false (an error printed)
 * on an empty item, too many items, or one refused */
static bool split_list(const char *cmd, const char *flag, const char *s, int *n,
                       bool (*one)(const char *item, int *out, const void *arg), int *v,
                       const void *arg, const char *what) {
    *n = 0;
    const char *p = s;
    for (;;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        char item[64];
        if (!len || len >= sizeof item) {
            tool_error(cmd, "%s: '%s' is not a comma-separated list", flag, s);
            return false;
        }
        if (*n >= BENCH_LIST_MAX) {
            tool_error(cmd, "%s: at most %d values", flag, BENCH_LIST_MAX);
            return false;
        }
        memcpy(item, p, len);
        item[len] = 0;
        if (!one(item, &v[*n], arg)) {
            tool_error(cmd, "%s: '%s' in '%s' is not %s", flag, item, s, what);
            return false;
        }
        ++*n;
        if (!e) return true;
        p = e + 1;
    }
}

typedef struct int_range {
    int lo, hi;
} int_range;

static bool one_int(const char *item, int *out, const void *arg) {
    const int_range *r = arg;
    char *end;
    errno = 0;
    const long x = strtol(item, &end, 10);
    if (errno || end == item || *end || x < r->lo || x > r->hi) return false;
    *out = (int)x;
    return true;
}

bool bench_parse_ints(const char *cmd, const char *flag, const char *s, int lo, int hi, int *v,
                      int *n) {
    char what[64];
    snprintf(what, sizeof what, "an integer in %d..%d", lo, hi);
    int_range r = {lo, hi};
    return split_list(cmd, flag, s, n, one_int, v, &r, what);
}

static bool one_type(const char *item, int *out, const void *arg) {
    (void)arg;
    const int t = rp_type_from_name(item);
    if (t < 0 || !rp_kv_type_supported(t)) return false;
    *out = t;
    return true;
}

bool bench_parse_types(const char *cmd, const char *flag, const char *s, int *v, int *n) {
    char what[160];
    snprintf(what, sizeof what, "a KV cache type (%s)", rp_kv_type_list());
    return split_list(cmd, flag, s, n, one_type, v, NULL, what);
}

void bench_test_name(const bench_result *r, char *buf, size_t size) {
    int k;
    if (r->n_prompt && r->n_gen)
        k = snprintf(buf, size, "pp%d+tg%d", r->n_prompt, r->n_gen);
    else if (r->n_prompt)
        k = snprintf(buf, size, "pp%d", r->n_prompt);
    else
        k = snprintf(buf, size, "tg%d", r->n_gen);
    if (r->n_depth && k > 0 && (size_t)k < size)
        snprintf(buf + k, size - (size_t)k, " @ d%d", r->n_depth);
}

typedef struct stat2 {
    double mean, sd;
} stat2;

static stat2 stats_of(const double *v, int n) {
    stat2 s = {0, 0};
    for (int i = 0; i < n; i++) s.mean += v[i];
    s.mean /= n;
    for (int i = 0; i < n; i++) s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    return s;
}

/* a JSON string (the text between the quotes) */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* a CSV field, quoted when it holds a comma, a quote or a newline */
static void csv_str(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static const char *const k_csv_fields =
    "model_filename,model_type,model_size,model_n_params,plan,n_eff,n_batch,n_threads,type_k,"
    "type_v,n_prompt,n_gen,n_depth,test,avg_ns,stddev_ns,avg_ts,stddev_ts,samples_ts,bw_before_gbs,"
    "bw_after_gbs";

void bench_out_begin(bench_out *o) {
    o->rows = 0;
    if (o->fmt == BENCH_MD) {
        printf("| %-28s | %13s | %11s | %-14s | %6s | %7s | %6s | %6s | %16s | %20s | %13s |\n",
               "model", "size", "params", "plan", "layers", "threads", "type_k", "type_v", "test",
               "t/s", "GB/s pre/post");
        printf("| %.28s | %.13s: | %.11s: | %.14s | %.6s: | %.7s: | %.6s | %.6s | %.16s: | %.20s: "
               "| %.13s: |\n",
               "------------------------------", "---------------", "-------------",
               "----------------", "--------", "---------", "--------", "--------",
               "------------------", "----------------------", "---------------");
    } else if (o->fmt == BENCH_CSV) {
        printf("%s\n", k_csv_fields);
    } else {
        printf("[\n");
    }
    fflush(stdout);
}

static void row_md(const bench_result *r, const char *test, stat2 s) {
    char ts[48], bw[32];
    snprintf(ts, sizeof ts, "%.2f ± %.2f", s.mean, s.sd);
    if (r->bw_before > 0)
        snprintf(bw, sizeof bw, "%.1f / %.1f", r->bw_before, r->bw_after);
    else
        snprintf(bw, sizeof bw, "-");
    printf("| %-28s | %9.2f MiB | %9.2f M | %-14s | %6d | %7d | %6s | %6s | %16s | %20s | %13s |\n",
           r->model_label, r->mib, r->mparams, r->plan, r->n_eff, r->threads,
           rp_type_name(r->type_k), rp_type_name(r->type_v), test, ts, bw);
}

static void row_csv(const bench_result *r, const char *test, stat2 s, stat2 ns) {
    csv_str(stdout, r->model_file);
    putchar(',');
    csv_str(stdout, r->model_label);
    printf(",%.0f,%.0f,", r->mib * 1048576.0, r->mparams * 1e6);
    csv_str(stdout, r->plan);
    printf(",%d,%d,%d,%s,%s,%d,%d,%d,", r->n_eff, r->n_batch, r->threads, rp_type_name(r->type_k),
           rp_type_name(r->type_v), r->n_prompt, r->n_gen, r->n_depth);
    csv_str(stdout, test);
    printf(",%.0f,%.0f,%.6f,%.6f,\"", ns.mean, ns.sd, s.mean, s.sd);
    for (int i = 0; i < r->reps; i++) printf("%s%.6f", i ? " " : "", r->ts[i]);
    printf("\",%.2f,%.2f\n", r->bw_before, r->bw_after);
}

static void row_json(const bench_result *r, const char *test, stat2 s, stat2 ns, bool first) {
    printf("%s  {\"model_filename\": ", first ? "" : ",\n");
    json_str(stdout, r->model_file);
    printf(", \"model_type\": ");
    json_str(stdout, r->model_label);
    printf(", \"model_size\": %.0f, \"model_n_params\": %.0f, \"plan\": ", r->mib * 1048576.0,
           r->mparams * 1e6);
    json_str(stdout, r->plan);
    printf(", \"n_eff\": %d, \"n_batch\": %d, \"n_threads\": %d, \"type_k\": \"%s\", \"type_v\": "
           "\"%s\", \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, \"test\": ",
           r->n_eff, r->n_batch, r->threads, rp_type_name(r->type_k), rp_type_name(r->type_v),
           r->n_prompt, r->n_gen, r->n_depth);
    json_str(stdout, test);
    printf(", \"avg_ns\": %.0f, \"stddev_ns\": %.0f, \"avg_ts\": %.6f, \"stddev_ts\": %.6f, "
           "\"samples_ts\": [",
           ns.mean, ns.sd, s.mean, s.sd);
    for (int i = 0; i < r->reps; i++) printf("%s%.6f", i ? ", " : "", r->ts[i]);
    printf("], \"bw_before_gbs\": %.2f, \"bw_after_gbs\": %.2f}", r->bw_before, r->bw_after);
}

void bench_out_row(bench_out *o, const bench_result *r) {
    char test[64];
    bench_test_name(r, test, sizeof test);
    const stat2 s = stats_of(r->ts, r->reps);
    double ns[1000];
    const int n = r->reps < 1000 ? r->reps : 1000;
    const int tokens = r->n_prompt + r->n_gen;
    for (int i = 0; i < n; i++) ns[i] = tokens / r->ts[i] * 1e9;
    const stat2 sn = stats_of(ns, n);
    if (o->fmt == BENCH_MD)
        row_md(r, test, s);
    else if (o->fmt == BENCH_CSV)
        row_csv(r, test, s, sn);
    else
        row_json(r, test, s, sn, o->rows == 0);
    o->rows++;
    fflush(stdout);
}

void bench_out_end(bench_out *o) {
    if (o->fmt == BENCH_JSON) printf("%s]\n", o->rows ? "\n" : "");
    fflush(stdout);
}
