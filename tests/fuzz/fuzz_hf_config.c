/* libFuzzer target: a Hugging Face checkpoint's config.json and
 * tokenizer.json, as convert reads them (a directory with no weights, planned
 * from config.json). The input is config.json, a NUL byte, tokenizer.json. */
#include "reprise_tools.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void put(const char *dir, const char *name, const uint8_t *p, size_t n) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp) return;
    fwrite(p, 1, n, fp);
    fclose(fp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/fuzz-hf-%ld", (long)getpid());
    mkdir(dir, 0700);
    const uint8_t *nul = memchr(data, 0, size);
    const size_t n_cfg = nul ? (size_t)(nul - data) : size;
    put(dir, "config.json", data, n_cfg);
    char tok[128];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
    if (nul)
        put(dir, "tokenizer.json", nul + 1, size - n_cfg - 1);
    else
        unlink(tok);
    rp_convert_params p = rp_convert_default_params();
    p.dir = dir;
    p.shapes_from_config = true;
    p.no_vocab = !nul;
    rp_conv *cv = NULL;
    if (rp_conv_open(&p, &cv) == RP_OK) rp_conv_free(cv);
    return 0;
}
