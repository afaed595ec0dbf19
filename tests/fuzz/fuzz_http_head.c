/* libFuzzer target: the pure parts of serve's connection layer
 * (tools/serve_conn.c) that see a request head before libmicrohttpd does.
 * The input is the bytes a client sends first.
 *   - srv_conn_sniff on every prefix a recv() could return (1..64 bytes):
 *     once it decides (plausible, or garbage answered 400), a longer prefix
 *     must decide the same, or a request split across packets would be
 *     answered differently from the same request in one packet;
 *   - the framing check (srv_framing_add/verdict) on the header lines, against
 *     a plain re-count: two different Content-Length values, Content-Length
 *     with Transfer-Encoding, or two Transfer-Encodings are ambiguous.
 * fuzz-tools: serve_conn common */
#include "serve_conn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void sniff_prefixes(const uint8_t *data, size_t size) {
    int decided = 0;
    size_t at = 0;
    for (size_t k = 1; k <= size && k <= 64; k++) {
        int v = srv_conn_sniff(data, k);
        if (v < -1 || v > 1) abort();
        if (decided && v != decided) {
            fprintf(stderr, "sniff: %d after %zu bytes, %d after %zu\n", decided, at, v, k);
            abort();
        }
        if (v && !decided) decided = v, at = k;
    }
    if (size >= 64 && !srv_conn_sniff(data, 64)) abort(); /* 64 bytes always decide */
}

#define MAX_HDR 64

static void framing(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return;
    memcpy(text, data, size);
    text[size] = 0;
    const char *keys[MAX_HDR], *vals[MAX_HDR];
    int n = 0;
    char *line = strchr(text, '\n'); /* the request line is not a header */
    while (line && n < MAX_HDR) {
        line++;
        char *next = strchr(line, '\n');
        if (next) *next = 0;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') line[--len] = 0;
        if (!len) break; /* the end of the head */
        char *colon = strchr(line, ':');
        if (colon) {
            *colon = 0;
            char *v = colon + 1;
            while (*v == ' ' || *v == '\t') v++;
            keys[n] = line;
            vals[n++] = v;
        }
        line = next;
    }
    srv_framing f = {0};
    int n_cl = 0, n_te = 0;
    bool differ = false;
    const char *first = NULL;
    for (int i = 0; i < n; i++) {
        srv_framing_add(&f, keys[i], vals[i]);
        if (!strcasecmp(keys[i], "Content-Length")) {
            if (n_cl++ && strcmp(first, vals[i])) differ = true;
            if (!first) first = vals[i];
        } else if (!strcasecmp(keys[i], "Transfer-Encoding")) {
            n_te++;
        }
    }
    const bool ambiguous = differ || (n_cl && n_te) || n_te > 1;
    const char *why = srv_framing_verdict(&f);
    if (ambiguous != (why != NULL)) {
        fprintf(stderr, "framing: %d Content-Length (%s), %d Transfer-Encoding: verdict %s\n", n_cl,
                differ ? "different" : "equal", n_te, why ? why : "unambiguous");
        abort();
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sniff_prefixes(data, size);
    framing(data, size);
    return 0;
}
