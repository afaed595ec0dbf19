/* libFuzzer target: the safetensors reader (header length, JSON, dtypes,
 * shapes, offsets, coverage of the data section), and reading every tensor of
 * whatever it accepts back as F32. */
#include "format/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the reader keeps pointers into the buffer: give it its own copy */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    rp_st *st;
    if (rp_st_open_mem(buf, size, &st) == RP_OK) {
        float tmp[512];
        for (uint64_t i = 0; i < rp_st_n_tensors(st); i++) {
            const rp_st_tensor *t = rp_st_tensor_at(st, i);
            rp_st_find(st, t->name);
            for (uint64_t k = 0; k < t->n_elem && k < (1u << 16); k += 512) {
                uint64_t n = t->n_elem - k < 512 ? t->n_elem - k : 512;
                rp_st_read_f32(t, k, n, tmp);
            }
        }
        rp_st_metadata(st, "format");
        rp_st_close(st);
    }
    free(buf);
    return 0;
}
