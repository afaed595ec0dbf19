/* Scores of generated answers (the probes of reprise scan, docs/scan.md):
 * RYS's partial credit for a number, and an EQ-style distance to reference
 * scores. Pure functions of text. */
#include "eval/scan.h"
#include "base/util.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIGITS 64

/* The digits of an integer (no sign, no leading zeros, "0" for zero). */
static int clean_digits(const char *s, size_t n, char *out) {
    size_t k = 0;
    while (k + 1 < n && s[k] == '0') k++;
    int m = 0;
    for (; k < n && m < MAX_DIGITS; k++) out[m++] = s[k];
    out[m] = 0;
    return m;
}

/* RYS's partial credit of estimate (digits) for actual (digits): the shorter
 * padded on the right with zeros to the longer's length, then (1 - |a - e| /
 * max(a, e)) * (1 - padding / length), clamped to [0, 1]. Padding on the
 * right compares the leading digits; the factor charges the wrong length. */
static double credit(const char *a, int la, const char *e, int le) {
    const int len = RP_MAX(la, le), pad = len - RP_MIN(la, le);
    /* both as mantissas 0.d1d2...: the same ratio as the padded integers */
    long double x = 0, y = 0, scale = 1;
    for (int k = 0; k < len; k++) {
        scale /= 10;
        x += scale * (k < la ? a[k] - '0' : 0);
        y += scale * (k < le ? e[k] - '0' : 0);
    }
    const long double mx = x > y ? x : y;
    if (mx == 0) return 1.0; /* both zero */
    const double rel = (double)(fabsl(x - y) / mx);
    const double s = (1.0 - rel) * (1.0 - (double)pad / len);
    return s < 0 ? 0 : s > 1 ? 1 : s;
}

double rp_probe_number_credit(const char *actual, const char *estimate) {
    const char *a = actual, *e = estimate;
    const bool na = *a == '-', ne = *e == '-';
    a += na;
    e += ne;
    const size_t la = strspn(a, "0123456789"), le = strspn(e, "0123456789");
    if (!la || !le || a[la] || e[le]) return 0;
    char da[MAX_DIGITS + 1], de[MAX_DIGITS + 1];
    const int ca = clean_digits(a, la, da), ce = clean_digits(e, le, de);
    const bool za = !strcmp(da, "0"), ze = !strcmp(de, "0");
    if (na != ne && !(za && ze)) return 0; /* the wrong sign earns nothing */
    return credit(da, ca, de, ce);
}

/* The next integer in text from *p (digits, optionally with ',' between
 * groups of three and a leading '-'), its digits in buf; false at the end. */
static bool next_integer(const char **p, char *buf, size_t size) {
    const char *s = *p;
    while (*s && !isdigit((unsigned char)*s)) s++;
    if (!*s) {
        *p = s;
        return false;
    }
    size_t n = 0;
    if (s > *p && s[-1] == '-') buf[n++] = '-';
    while (*s) {
        if (isdigit((unsigned char)*s)) {
            if (n + 1 < size) buf[n++] = *s;
            s++;
        } else if (*s == ',' && isdigit((unsigned char)s[1]) && isdigit((unsigned char)s[2]) &&
                   isdigit((unsigned char)s[3]) && !isdigit((unsigned char)s[4])) {
            s++; /* 12,345 */
        } else {
            break;
        }
    }
    buf[n] = 0;
    *p = s;
    return true;
}

double rp_probe_score_math(const char *output, const char *expected) {
    double best = 0;
    char num[MAX_DIGITS + 2];
    for (const char *p = output; next_integer(&p, num, sizeof num);)
        best = fmax(best, rp_probe_number_credit(expected, num));
    return best;
}

double rp_probe_score_eq(const char *output, const double *ref, int n, double scale) {
    if (n < 1 || !(scale > 0)) return 0;
    double sum = 0;
    int k = 0;
    const char *p = output;
    while (k < n && *p) {
        /* the next number: digits with an optional fraction */
        while (*p && !isdigit((unsigned char)*p)) p++;
        if (!*p) break;
        char *end;
        const double v = strtod(p, &end);
        p = end > p ? end : p + 1;
        sum += fmin(fabs(v - ref[k]), scale);
        k++;
    }
    sum += (double)(n - k) * scale; /* a missing score is the farthest */
    const double s = 1.0 - sum / ((double)n * scale);
    return s < 0 ? 0 : s;
}
