/* Minimal unit-test harness: a test is a function; it passes when none of
 * its CHECKs failed. The list of tests is tests/unit/list.h. */
#ifndef RP_TEST_H
#define RP_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

extern int g_check_failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            g_check_failed++;                                                                      \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                      \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* Stop the current test when a precondition fails. */
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            CHECK(cond, __VA_ARGS__);                                                              \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* Path under the shared data folder (REPRISE_SHARED, default ../shared). */
const char *test_shared(const char *rel);
/* Path of a scratch file in the test's temporary folder. */
const char *test_tmp(const char *name);
/* Whole file into memory (malloc'ed, caller frees); NULL if missing. */
void *test_read(const char *path, size_t *len);
/* Reads "a b c" integer lists (one line); returns count. */
int test_read_ints(const char *path, int line, int *out, int max);
/* Logits helpers */
double test_max_abs_diff(const float *a, const float *b, size_t n);
double test_nmse(const float *ref, const float *x, size_t n);

#define T(name) void test_##name(void);
#include "list.h"
#undef T

#endif
