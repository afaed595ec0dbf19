/* Internal helpers shared by every module: errors, logging, checked size
 * arithmetic, allocation, small file utilities. */
#ifndef RP_UTIL_H
#define RP_UTIL_H

#include "reprise.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__)
#define RP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define RP_LIKELY(x)    __builtin_expect(!!(x), 1)
#define RP_UNLIKELY(x)  __builtin_expect(!!(x), 0)
#else
#define RP_PRINTF(a, b)
#define RP_LIKELY(x)   (x)
#define RP_UNLIKELY(x) (x)
#endif

#define RP_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define RP_MAX(a, b)    ((a) > (b) ? (a) : (b))
#define RP_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Records a failure for rp_last_error() and returns s, so a failing path reads
 * `return rp_fail(RP_ERR_FORMAT, "tensor '%s': ...", name);`. */
rp_status rp_fail(rp_status s, const char *fmt, ...) RP_PRINTF(2, 3);
/* Prefixes the current error message: "loading x.gguf: <old message>". */
rp_status rp_fail_prefix(rp_status s, const char *fmt, ...) RP_PRINTF(2, 3);
void rp_clear_error(void);

void rp_log(rp_log_level level, const char *fmt, ...) RP_PRINTF(2, 3);
bool rp_log_enabled(rp_log_level level);

/* Internal invariant check that stays on in release builds: a failure is a bug
 * in reprise, never a consequence of file contents (those get rp_fail). */
#define RP_ASSERT(x)                                                                               \
    do {                                                                                           \
        if (RP_UNLIKELY(!(x))) rp_assert_fail(__FILE__, __LINE__, #x);                             \
    } while (0)
_Noreturn void rp_assert_fail(const char *file, int line, const char *expr);

/* Overflow-checked arithmetic: return false on overflow, *out untouched. */
static inline bool rp_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline bool rp_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool rp_mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline uint64_t rp_align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

/* Allocation: NULL on failure (after recording RP_ERR_NOMEM with what). */
void *rp_malloc(size_t n, const char *what);
void *rp_calloc(size_t n, size_t size, const char *what);
void *rp_realloc(void *p, size_t n, const char *what);
/* 64-byte aligned, zeroed; free with rp_free_aligned. */
void *rp_alloc_aligned(size_t n, const char *what);
void rp_free_aligned(void *p);
char *rp_strdup(const char *s);
char *rp_strndup(const char *s, size_t n);

/* A growable byte buffer. */
typedef struct rp_buf {
    char *data;
    size_t len, cap;
} rp_buf;
bool rp_buf_reserve(rp_buf *b, size_t extra);
bool rp_buf_append(rp_buf *b, const void *p, size_t n);
bool rp_buf_printf(rp_buf *b, const char *fmt, ...) RP_PRINTF(2, 3);
void rp_buf_free(rp_buf *b);

/* Files (src/base/files.c). Inputs: rp_open_regular opens path read-only
 * without blocking (a FIFO cannot hang it) and refuses anything but a regular
 * file, naming what it is: the fd, or -1 after rp_fail. rp_file_kind names a
 * st_mode ("FIFO", "directory", ...). */
struct stat;
int rp_open_regular(const char *path, struct stat *st);
const char *rp_file_kind(unsigned mode);
/* Whole file into memory (NUL-terminated; *len excludes the NUL), refused over
 * max bytes with a message naming the limit; rp_read_file's limit is
 * RP_READ_FILE_MAX. */
#define RP_READ_FILE_MAX ((size_t)1 << 30)
rp_status rp_read_file_max(const char *path, size_t max, char **data, size_t *len);
rp_status rp_read_file(const char *path, char **data, size_t *len);
/* The input files this process holds open (device + inode), which atomic
 * output refuses to replace unless rp_output_allow_inputs(true). */
void rp_input_add(uint64_t dev, uint64_t ino);
void rp_input_remove(uint64_t dev, uint64_t ino);

/* Atomic output: write to "<target>.tmp.<pid>" and rename over the target on
 * commit (the rules for what may be replaced are at the top of files.c). A
 * writer that is aborted (or never committed) removes its temporary file. */
typedef struct rp_atomic_file {
    FILE *fp;
    char *path;     /* the target (symbolic links resolved) */
    char *tmp_path; /* the temporary file (the target itself when direct) */
    bool failed;
    bool direct; /* a character device, written through */
    int slot;    /* in the table of live temporary files, -1 if none */
} rp_atomic_file;
rp_status rp_atomic_open(rp_atomic_file *af, const char *path);
bool rp_atomic_write(rp_atomic_file *af, const void *p, size_t n);
rp_status rp_atomic_commit(rp_atomic_file *af);
void rp_atomic_abort(rp_atomic_file *af);
/* The whole of [p, p + n) as the file at path, atomically (the above in one
 * call); errors name the file. */
rp_status rp_atomic_write_file(const char *path, const void *p, size_t n);

/* Monotonic seconds. */
double rp_time_s(void);

/* fp16 / bf16 scalar conversions (IEEE, round to nearest even). */
float rp_fp16_to_fp32(uint16_t h);
uint16_t rp_fp32_to_fp16(float f);
static inline float rp_bf16_to_fp32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}
uint16_t rp_fp32_to_bf16(float f);

/* Deterministic PRNG (xoshiro256**) for synthesis and sampling. */
typedef struct rp_rng {
    uint64_t s[4];
} rp_rng;
void rp_rng_seed(rp_rng *r, uint64_t seed);
uint64_t rp_rng_next(rp_rng *r);
double rp_rng_uniform(rp_rng *r); /* [0,1) */
float rp_rng_normal(rp_rng *r);   /* N(0,1) */

#endif
