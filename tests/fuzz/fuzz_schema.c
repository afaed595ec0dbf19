/* libFuzzer target: the JSON-schema converter. The input is a schema; a
 * grammar it converts to must parse (the converter checks) and is run over a
 * few JSON texts. */
#include "text/gbnf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char *gbnf = NULL;
    if (rp_json_schema_to_grammar(text, &gbnf) == RP_OK) {
        rp_gbnf *g;
        if (gbnf_parse(gbnf, strlen(gbnf), NULL, &g) == RP_OK) {
            static const char *const texts[] = {"{}", "{\"name\": \"x\", \"age\": 3}",
                                                "[1, \"a\", null]", "\"2024-01-01\"", "-12"};
            size_t matched;
            bool complete;
            for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
                gbnf_match_text(g, texts[i], strlen(texts[i]), &matched, &complete);
            gbnf_free(g);
        }
        free(gbnf);
    }
    free(text);
    return 0;
}
