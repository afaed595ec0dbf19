/* libFuzzer target: the GGUF reader, and the model loader (hyperparameters,
 * tensor binding, vocabulary) on whatever the reader accepts. */
#include "format/gguf.h"
#include "core/model.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the reader keeps pointers into the buffer: give it its own copy */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    rp_gguf *g;
    if (rp_gguf_open_mem(buf, size, &g) == RP_OK) {
        rp_model *m;
        if (rp_model_from_gguf(g, "fuzz", NULL, &m) == RP_OK) {
            int32_t *toks;
            size_t n;
            if (rp_tokenize(rp_model_vocab(m), "Hello world <s>", 15, true, true, &toks, &n) ==
                RP_OK)
                free(toks);
            rp_model_free(m);
        }
    }
    free(buf);
    return 0;
}
