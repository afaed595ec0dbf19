/* Tokenizer vectors from llama.cpp's test-tokenizer-0. */
#include "test.h"

#include "reprise.h"

#include <string.h>

/* Runs every vector of vocab/llama.cpp/NAME.gguf.{inp,out} on the given vocab
 * GGUF; returns the number of mismatches (-1 if files are missing). */
int run_vocab_vectors(const char *gguf, const char *vectors, int *n_total);

int run_vocab_vectors(const char *gguf, const char *vectors, int *n_total) {
    char p[1024];
    size_t ilen, olen;
    snprintf(p, sizeof p, "%s.inp", vectors);
    char *inp = test_read(p, &ilen);
    snprintf(p, sizeof p, "%s.out", vectors);
    char *out = test_read(p, &olen);
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    rp_model *m = NULL;
    if (!inp || !out || rp_model_load(gguf, &mp, &m)) {
        fprintf(stderr, "  cannot run %s: %s\n", vectors, rp_last_error());
        free(inp);
        free(out);
        return -1;
    }
    const char *sep = "\n__ggml_vocab_test__\n";
    char *ip = inp, *op = out;
    int bad = 0, total = 0;
    while (*ip) {
        char *e = strstr(ip, sep);
        if (!e) break;
        char *ol = strchr(op, '\n');
        if (!ol) break;
        *ol = 0;
        int32_t *toks;
        size_t n;
        total++;
        if (rp_tokenize(rp_model_vocab(m), ip, (size_t)(e - ip), false, false, &toks, &n) !=
            RP_OK) {
            bad++;
            fprintf(stderr, "  vector %d: %s\n", total, rp_last_error());
        } else {
            char got[8192];
            size_t k = 0;
            got[0] = 0;
            for (size_t i = 0; i < n && k < sizeof got - 16; i++)
                k += (size_t)snprintf(got + k, sizeof got - k, i ? " %d" : "%d", toks[i]);
            const char *want = op;
            while (*want == ' ') want++;
            if (strcmp(got, want) != 0) {
                bad++;
                if (bad <= 5)
                    fprintf(stderr, "  vector %d '%.*s':\n    want %s\n    got  %s\n", total,
                            (int)(e - ip), ip, want, got);
            }
            free(toks);
        }
        ip = e + strlen(sep);
        op = ol + 1;
    }
    rp_model_free(m);
    free(inp);
    free(out);
    *n_total = total;
    return bad;
}

void test_vocab_spm_vectors(void) {
    static const char *const names[] = {"ggml-vocab-llama-spm", "ggml-vocab-phi-3"};
    for (size_t i = 0; i < 2; i++) {
        char g[512], v[512];
        snprintf(g, sizeof g, "vocab/llama.cpp/%s.gguf", names[i]);
        snprintf(v, sizeof v, "vocab/llama.cpp/%s.gguf", names[i]);
        int total = 0;
        int bad = run_vocab_vectors(test_shared(g), test_shared(v), &total);
        CHECK(bad == 0 && total == 46, "%s: %d of %d vectors differ", names[i], bad, total);
    }
}

void test_vocab_spm_detokenize(void) {
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    rp_model *m;
    REQUIRE(rp_model_load(test_shared("models/stories260K.gguf"), &mp, &m) == RP_OK, "%s",
            rp_last_error());
    const rp_vocab *v = rp_model_vocab(m);
    const char *text = "Once upon a time, there was a little girl named Lily.";
    int32_t *t;
    size_t n;
    REQUIRE(rp_tokenize(v, text, strlen(text), true, false, &t, &n) == RP_OK, "tokenize");
    CHECK(t[0] == rp_vocab_bos(v), "BOS first");
    char buf[256];
    rp_detokenize(v, t, n, false, buf, sizeof buf);
    CHECK(!strcmp(buf, text), "round trip: '%s'", buf);
    free(t);
    /* bytes outside the vocabulary fall back to <0xNN> tokens and come back */
    const char *odd = "\xe2\x82\xac \x01";
    REQUIRE(rp_tokenize(v, odd, strlen(odd), false, false, &t, &n) == RP_OK, "tokenize");
    rp_detokenize(v, t, n, false, buf, sizeof buf);
    CHECK(!strcmp(buf, odd), "byte fallback round trip");
    free(t);
    rp_model_free(m);
}
