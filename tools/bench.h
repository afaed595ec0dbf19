/* reprise bench's lists and report formats (bench_out.c): the comma lists of
 * llama-bench's flags and one result row printed as a Markdown table, CSV or
 * JSON with llama-bench's field names where it has one. */
#ifndef RP_TOOLS_BENCH_H
#define RP_TOOLS_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#define BENCH_LIST_MAX 16

typedef enum bench_fmt { BENCH_MD, BENCH_CSV, BENCH_JSON } bench_fmt;

typedef struct bench_result {
    const char *model_file;  /* as given with -m */
    const char *model_label; /* "qwen3 596.05M q8_0" */
    double mib, mparams;
    const char *plan; /* "identity", "repeat 2,4", "map 0..3,2..5", "file NAME" */
    int n_eff;        /* steps the plan runs */
    int threads, type_k, type_v, n_batch;
    int n_prompt, n_gen, n_depth;
    int reps;
    const double *ts;           /* [reps] tokens per second */
    double bw_before, bw_after; /* GB/s read around the row; 0: not probed */
} bench_result;

typedef struct bench_out {
    bench_fmt fmt;
    int rows;
} bench_out;

/* "md", "csv", "json"; false for anything else */
bool bench_fmt_parse(const char *s, bench_fmt *fmt);
void bench_out_begin(bench_out *o);
void bench_out_row(bench_out *o, const bench_result *r);
void bench_out_end(bench_out *o);
/* llama-bench's test name: pp512, tg128, pp512+tg128, then " @ d4096" */
void bench_test_name(const bench_result *r, char *buf, size_t size);

/* "64,512": at most BENCH_LIST_MAX integers in [lo, hi]; prints an error
 * naming the flag and returns false otherwise */
bool bench_parse_ints(const char *cmd, const char *flag, const char *s, int lo, int hi, int *v,
                      int *n);
/* "f16,q8_0": KV cache types (rp_kv_type_supported) */
bool bench_parse_types(const char *cmd, const char *flag, const char *s, int *v, int *n);

#endif
