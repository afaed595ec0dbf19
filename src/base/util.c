#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ---- errors -------------------------------------------------------------- */

#define RP_ERR_MAX 1024
static _Thread_local char g_err[RP_ERR_MAX];

const char *rp_status_str(rp_status s) {
    switch (s) {
    case RP_OK:
        return "ok";
    case RP_ERR_INVALID_ARG:
        return "invalid argument";
    case RP_ERR_IO:
        return "i/o error";
    case RP_ERR_FORMAT:
        return "format error";
    case RP_ERR_UNSUPPORTED:
        return "unsupported";
    case RP_ERR_NOMEM:
        return "out of memory";
    case RP_ERR_PLAN:
        return "invalid layer plan";
    case RP_ERR_CONTEXT_FULL:
        return "context full";
    case RP_ERR_CANCELLED:
        return "cancelled";
    case RP_ERR_INTERNAL:
        return "internal error";
    }
    return "unknown status";
}

const char *rp_last_error(void) {
    return g_err;
}

const char *rp_version(void) {
    return RP_VERSION;
}

void rp_free(void *p) {
    free(p);
}

void rp_clear_error(void) {
    g_err[0] = 0;
}

rp_status rp_fail(rp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return s;
}

rp_status rp_fail_prefix(rp_status s, const char *fmt, ...) {
    char prefix[RP_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t pl = strlen(prefix);
    if (pl > RP_ERR_MAX - 3) pl = RP_ERR_MAX - 3;
    /* shift the old message right and put "prefix: " in front */
    memmove(g_err + pl + 2, g_err, RP_ERR_MAX - pl - 2);
    g_err[RP_ERR_MAX - 1] = 0;
    memcpy(g_err, prefix, pl);
    g_err[pl] = ':';
    g_err[pl + 1] = ' ';
    return s;
}

_Noreturn void rp_assert_fail(const char *file, int line, const char *expr) {
    /* The one place the library stops the process: an internal invariant broke,
     * so continuing would compute garbage. Report through the log if anyone
     * listens, and on stderr as a last resort. */
    rp_log(RP_LOG_ERROR, "reprise internal error: %s:%d: assertion '%s' failed", file, line, expr);
    fprintf(stderr, "reprise internal error: %s:%d: assertion '%s' failed\n", file, line, expr);
    abort();
}

/* ---- logging ------------------------------------------------------------- */

/* The callback and its user pointer change together under the lock; a
 * message is delivered outside it, to the pair read under it. */
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static rp_log_fn g_log_fn;
static void *g_log_user;

void rp_log_set(rp_log_fn fn, void *user) {
    pthread_mutex_lock(&g_log_mu);
    g_log_fn = fn;
    g_log_user = user;
    pthread_mutex_unlock(&g_log_mu);
}

static rp_log_fn log_target(void **user) {
    pthread_mutex_lock(&g_log_mu);
    rp_log_fn fn = g_log_fn;
    *user = g_log_user;
    pthread_mutex_unlock(&g_log_mu);
    return fn;
}

bool rp_log_enabled(rp_log_level level) {
    (void)level;
    void *user;
    return log_target(&user) != NULL;
}

void rp_log(rp_log_level level, const char *fmt, ...) {
    void *user;
    rp_log_fn fn = log_target(&user);
    if (!fn) return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fn(level, msg, user);
}

/* ---- allocation ---------------------------------------------------------- */

void *rp_malloc(size_t n, const char *what) {
    void *p = malloc(n ? n : 1);
    if (!p) rp_fail(RP_ERR_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
    return p;
}

void *rp_calloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) rp_fail(RP_ERR_NOMEM, "out of memory allocating %zu x %zu bytes for %s", n, size, what);
    return p;
}

void *rp_realloc(void *p, size_t n, const char *what) {
    void *q = realloc(p, n ? n : 1);
    if (!q) rp_fail(RP_ERR_NOMEM, "out of memory growing %s to %zu bytes", what, n);
    return q;
}

/* Blocks of RP_HUGE_MIN bytes and more (packed weights, KV caches, scratch)
 * are placed on 2 MiB boundaries and offered transparent huge pages: a
 * generation step streams every weight once, and on 4 KiB pages it pays a
 * TLB walk every 64 cache lines (Linux's default THP mode is madvise). */
#define RP_HUGE_MIN  ((size_t)8 << 20)
#define RP_HUGE_PAGE ((size_t)2 << 20)

void *rp_alloc_aligned(size_t n, const char *what) {
    const bool huge = n >= RP_HUGE_MIN;
    size_t sz = rp_align_up(n ? n : 1, huge ? RP_HUGE_PAGE : 64);
    void *p = aligned_alloc(huge ? RP_HUGE_PAGE : 64, sz);
    if (!p) {
        rp_fail(RP_ERR_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (huge) (void)madvise(p, sz, MADV_HUGEPAGE); /* a hint: 4 KiB pages if refused */
#endif
    memset(p, 0, sz);
    return p;
}

void rp_free_aligned(void *p) {
    free(p);
}

char *rp_strdup(const char *s) {
    return s ? rp_strndup(s, strlen(s)) : NULL;
}

char *rp_strndup(const char *s, size_t n) {
    char *p = rp_malloc(n + 1, "string");
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- buffers ------------------------------------------------------------- */

bool rp_buf_reserve(rp_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = rp_realloc(b->data, cap, "buffer");
    if (!d) return false;
    b->data = d;
    b->cap = cap;
    return true;
}

bool rp_buf_append(rp_buf *b, const void *p, size_t n) {
    if (!rp_buf_reserve(b, n)) return false;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return true;
}

bool rp_buf_printf(rp_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !rp_buf_reserve(b, (size_t)n)) return false;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return true;
}

void rp_buf_free(rp_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

double rp_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- half precision ------------------------------------------------------ */

static inline uint32_t f32_bits(float f) {
    union {
        float f;
        uint32_t u;
    } v = {.f = f};
    return v.u;
}
static inline float bits_f32(uint32_t u) {
    union {
        uint32_t u;
        float f;
    } v = {.u = u};
    return v.f;
}

float rp_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24 */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t rp_fp32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (ax < 0x38800000u) {
        /* subnormal half (or zero): round ax / 2^-24 to nearest even */
        float v = bits_f32(ax) * 16777216.0f;
        uint32_t m = (uint32_t)lrintf(v);
        return (uint16_t)(sign | m);
    }
    uint32_t e = (ax >> 23) - 112;
    uint32_t m = ax & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

uint16_t rp_fp32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet nan */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

/* ---- rng ----------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rp_rng_seed(rp_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t rp_rng_next(rp_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rp_rng_uniform(rp_rng *r) {
    return (double)(rp_rng_next(r) >> 11) * 0x1.0p-53;
}

float rp_rng_normal(rp_rng *r) {
    double u1 = rp_rng_uniform(r), u2 = rp_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
