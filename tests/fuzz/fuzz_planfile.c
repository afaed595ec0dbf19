/* libFuzzer target: plan files (docs/plan-files.md): the JSON reader and its
 * checks; what parses is formatted back and written. */
#include "reprise_tools.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rp_planfile *pf = NULL;
    if (rp_planfile_parse((const char *)data, size, "fuzz", &pf) == RP_OK) {
        char steps[512];
        rp_planfile_steps(pf, steps, sizeof steps);
        char path[64];
        snprintf(path, sizeof path, "/tmp/fuzz-planfile-%ld.json", (long)getpid());
        if (rp_planfile_write(pf, path) == RP_OK) {
            rp_planfile *back = NULL;
            if (rp_planfile_read(path, &back) == RP_OK) rp_planfile_free(back);
            unlink(path);
        }
        rp_planfile_free(pf);
    }
    return 0;
}
