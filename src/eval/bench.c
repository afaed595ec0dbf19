/* Benchmarks of the machine and the kernels (reprise bench --bandwidth,
 * --kernels): the memory read bandwidth, the roofline of generation, and the
 * cost of one matmul of a packed weight matrix by token count. */
#include "base/threads.h"
#include "base/util.h"
#include "core/tensor.h"
#include "kernels/matmul.h"
#include "kernels/types.h"
#include "reprise_tools.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- bandwidth probe ---------------------------------------------------- */

typedef struct probe {
    const uint64_t *buf;
    size_t words;
    uint64_t sink[64];
} probe;

static void probe_task(void *arg, int ith, int nth) {
    probe *p = arg;
    long a, b;
    rp_split_range((long)(p->words / 8), ith, nth, 64, &a, &b);
    const uint64_t *w = p->buf;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = (size_t)a * 8; i < (size_t)b * 8; i += 8) {
        s0 += w[i] ^ w[i + 4];
        s1 += w[i + 1] ^ w[i + 5];
        s2 += w[i + 2] ^ w[i + 6];
        s3 += w[i + 3] ^ w[i + 7];
    }
    p->sink[ith % 64] = s0 + s1 + s2 + s3;
}

rp_status rp_bench_bandwidth(int n_threads, size_t mib, double *gbs) {
    *gbs = 0;
    if (mib < 1 || mib > ((size_t)1 << 20))
        return rp_fail(RP_ERR_INVALID_ARG, "bandwidth probe of %zu MiB: give 1 to 1048576", mib);
    const size_t bytes = mib << 20;
    uint64_t *buf = rp_alloc_aligned(bytes, "bandwidth probe");
    rp_pool *pool = buf ? rp_pool_new(n_threads > 0 ? n_threads : rp_n_physical_cores()) : NULL;
    if (!buf || !pool) {
        rp_free_aligned(buf);
        rp_pool_free(pool);
        return RP_ERR_NOMEM;
    }
    for (size_t i = 0; i < bytes / 8; i++) buf[i] = i; /* fault every page in */
    probe p = {.buf = buf, .words = bytes / 8};
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) { /* the best of 3 passes */
        const double t0 = rp_time_s();
        rp_pool_run(pool, probe_task, &p);
        const double dt = rp_time_s() - t0;
        if (dt < best) best = dt;
    }
    rp_pool_free(pool);
    rp_free_aligned(buf);
    *gbs = (double)bytes / best / 1e9;
    return RP_OK;
}

/* ---- matmul microbenchmark ------------------------------------------------ */

#define BENCH_MAX_TOK  512
#define BENCH_DISTINCT 64 /* distinct random rows, repeated over the matrix */

struct rp_bench_matmul {
    rp_tensor t;
    void *owned;  /* the packed copy (or NULL: t.data is w) */
    uint8_t *w;   /* the rows in the file's type, while unpacked */
    float *x, *y; /* [BENCH_MAX_TOK][n] inputs, [BENCH_MAX_TOK][rows] outputs */
    rp_compute cc;
    rp_bench_matmul_info info;
};

void rp_bench_matmul_free(rp_bench_matmul *b) {
    if (!b) return;
    free(b->owned);
    rp_free_aligned(b->w);
    free(b->x);
    rp_free_aligned(b->y);
    rp_free_aligned(b->cc.wbuf);
    rp_pool_free(b->cc.pool);
    free(b);
}

/* `distinct` quantized random rows, repeated over every row of w. */
static void fill_rows(rp_bench_matmul *b, const rp_type_traits *tt, size_t rb) {
    const int n = b->info.n, rows = b->info.rows;
    rp_rng rng;
    rp_rng_seed(&rng, 99);
    for (int i = 0; i < n * BENCH_MAX_TOK; i++) b->x[i] = rp_rng_normal(&rng);
    for (int r = 0; r < BENCH_DISTINCT && r < rows; r++) {
        float *src = b->x + (size_t)(r % BENCH_MAX_TOK) * (size_t)n;
        tt->from_float(src, b->w + (size_t)r * rb, n);
        for (int i = 0; i < n; i++) src[i] = rp_rng_normal(&rng);
    }
    for (int r = BENCH_DISTINCT; r < rows; r++)
        memcpy(b->w + (size_t)r * rb, b->w + (size_t)(r % BENCH_DISTINCT) * rb, rb);
}

rp_status rp_bench_matmul_new(int type, int n, int mib, int n_threads, rp_bench_matmul **out) {
    *out = NULL;
    const rp_type_traits *tt = rp_type_get(type);
    if (!tt || !tt->compute || !tt->from_float)
        return rp_fail(RP_ERR_INVALID_ARG, "'%s' is not a weight type reprise computes and writes",
                       tt ? tt->name : "?");
    if (n < 32 || mib < 1)
        return rp_fail(RP_ERR_INVALID_ARG, "rows of %d x %d MiB: give n >= 32 and mib >= 1", n,
                       mib);
    const size_t rb = rp_row_size(type, n);
    if (!rb)
        return rp_fail(RP_ERR_INVALID_ARG, "rows of %d do not divide into %s blocks", n, tt->name);
    rp_bench_matmul *b = rp_calloc(1, sizeof *b, "matmul benchmark");
    if (!b) return RP_ERR_NOMEM;
    const int rows = (int)RP_MAX((size_t)64, ((size_t)mib << 20) / rb / 16 * 16);
    b->info = (rp_bench_matmul_info){.rows = rows,
                                     .n = n,
                                     .n_threads = n_threads > 0 ? n_threads : rp_n_physical_cores(),
                                     .bytes = (uint64_t)rb * (uint64_t)rows};
    b->w = rp_alloc_aligned(rb * (size_t)rows, "bench weights");
    b->x = rp_malloc((size_t)n * BENCH_MAX_TOK * sizeof(float), "bench inputs");
    b->y = rp_alloc_aligned((size_t)rows * BENCH_MAX_TOK * sizeof(float), "bench outputs");
    b->cc.pool = rp_pool_new(b->info.n_threads);
    b->cc.wbuf_size = rp_matmul_scratch(n, BENCH_MAX_TOK);
    b->cc.wbuf = rp_alloc_aligned(b->cc.wbuf_size, "bench scratch");
    if (!b->w || !b->x || !b->y || !b->cc.pool || !b->cc.wbuf) {
        rp_bench_matmul_free(b);
        return RP_ERR_NOMEM;
    }
    fill_rows(b, tt, rb);
    b->t = (rp_tensor){.name = "bench",
                       .type = type,
                       .n_dims = 2,
                       .ne = {n, rows, 1, 1},
                       .nbytes = rb * (size_t)rows,
                       .row_bytes = rb,
                       .data = b->w};
    if (rp_matmul_pack(&b->t, &b->owned)) {
        rp_bench_matmul_free(b);
        return RP_ERR_NOMEM;
    }
    if (b->owned) { /* as a loaded model: only the packed copy stays in memory */
        rp_free_aligned(b->w);
        b->w = NULL;
        b->t.data = NULL;
        b->info.packed = true;
    }
    *out = b;
    return RP_OK;
}

void rp_bench_matmul_get_info(const rp_bench_matmul *b, rp_bench_matmul_info *out) {
    *out = b->info;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

rp_status rp_bench_matmul_run(rp_bench_matmul *b, int n_tokens, int reps, double *wall_s,
                              double *cpu_time) {
    if (n_tokens < 1 || n_tokens > BENCH_MAX_TOK || reps < 1)
        return rp_fail(RP_ERR_INVALID_ARG, "matmul benchmark: %d tokens x %d calls (1..%d tokens)",
                       n_tokens, reps, BENCH_MAX_TOK);
    rp_matmul(&b->cc, &b->t, b->x, n_tokens, b->y); /* warm-up */
    double best = 1e30;
    const double c0 = cpu_s();
    for (int r = 0; r < reps; r++) {
        const double s0 = rp_time_s();
        rp_matmul(&b->cc, &b->t, b->x, n_tokens, b->y);
        const double dt = rp_time_s() - s0;
        if (dt < best) best = dt;
    }
    *wall_s = best;
    *cpu_time = (cpu_s() - c0) / reps;
    return RP_OK;
}
