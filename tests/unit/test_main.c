#include "test.h"
#include "reprise.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int g_check_failed;

typedef struct test_case {
    const char *name;
    void (*fn)(void);
} test_case;

static const test_case g_tests[] = {
#define T(name) {#name, test_##name},
#include "list.h"
#undef T
};

static char g_tmpdir[512];

const char *test_shared(const char *rel) {
    static _Thread_local char buf[8][1024];
    static _Thread_local int k;
    const char *root = getenv("REPRISE_SHARED");
    if (!root || !*root) root = "../shared";
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", root, rel);
    return b;
}

const char *test_tmp(const char *name) {
    static _Thread_local char buf[8][1024];
    static _Thread_local int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", g_tmpdir, name);
    return b;
}

void *test_read(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, fp) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(fp);
    if (p) {
        p[n] = 0;
        *len = (size_t)n;
    }
    return p;
}

int test_read_ints(const char *path, int line, int *out, int max) {
    size_t len;
    char *s = test_read(path, &len);
    if (!s) return -1;
    char *p = s;
    for (int l = 0; l < line && p; l++) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    int n = 0;
    while (p && *p && *p != '\n' && n < max) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        out[n++] = (int)v;
        p = end;
        while (*p == ' ') p++;
    }
    free(s);
    return n;
}

double test_max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

double test_nmse(const float *ref, const float *x, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)x[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    return den > 0 ? num / den : num;
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/reprise-test-%ld", (long)getpid());
    mkdir(g_tmpdir, 0700);
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof g_tests / sizeof g_tests[0]; i++) {
        if (filter && !strstr(g_tests[i].name, filter)) continue;
        g_check_failed = 0;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        g_tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &b);
        double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
        if (g_check_failed) {
            failed++;
            printf("FAIL %s (%d checks failed, %.0f ms)\n", g_tests[i].name, g_check_failed, ms);
        } else {
            passed++;
            printf("ok   %s (%.0f ms)\n", g_tests[i].name, ms);
        }
        fflush(stdout);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmpdir);
    printf("unit: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
