/* libFuzzer target: the KLD base file reader (header, tokens, every chunk's
 * rows), as perplexity --kl-divergence-base reads it. */
#include "reprise_tools.h"

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz-kld-%ld.bin", (long)getpid());
    FILE *fp = fopen(path, "wb");
    if (!fp) return 0;
    fwrite(data, 1, size, fp);
    fclose(fp);
    rp_kld_reader *r = NULL;
    if (rp_kld_reader_open(path, &r) == RP_OK) {
        const rp_kld_header *h = rp_kld_reader_header(r);
        (void)rp_kld_reader_tokens(r);
        for (uint32_t c = 0; h && c < h->n_chunk && c < 64; c++) {
            const rp_kld_row *rows;
            if (rp_kld_reader_chunk(r, (int)c, &rows) != RP_OK) break;
        }
        rp_kld_reader_free(r);
    }
    unlink(path);
    return 0;
}
