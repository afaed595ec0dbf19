/* libFuzzer target: the GBNF parser and the text matcher. The input is a
 * grammar, optionally followed by a NUL byte and a text to match against it. */
#include "text/gbnf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    rp_gbnf *g;
    if (gbnf_parse((const char *)data, glen, NULL, &g) == RP_OK) {
        size_t matched;
        bool complete;
        if (nul) gbnf_match_text(g, (const char *)nul + 1, size - glen - 1, &matched, &complete);
        /* and a few fixed texts */
        static const char *const texts[] = {"", "a", "{\"a\": [1, 2]}", "1. e4 e5\n",
                                            "\xe3\x81\x93\xc3\xa9"};
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
            gbnf_match_text(g, texts[i], strlen(texts[i]), &matched, &complete);
        gbnf_free(g);
    }
    return 0;
}
