/* libFuzzer target: the resumable scan CSV (reader, resume checks, writer). */
#include "reprise_tools.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz-scan-%ld.csv", (long)getpid());
    FILE *fp = fopen(path, "wb");
    if (!fp) return 0;
    fwrite(data, 1, size, fp);
    fclose(fp);
    rp_scan_csv csv;
    if (rp_scan_csv_read(path, &csv) == RP_OK) {
        rp_scan_csv want;
        memset(&want, 0, sizeof want);
        if (rp_scan_csv_set(&want, "layers", true, "%d", 8) == RP_OK)
            (void)rp_scan_csv_check(&csv, &want, path);
        rp_scan_csv_free(&want);
        int order[64], n_order = 0;
        if (csv.n_rows <= 64) rp_scan_rank(csv.rows, csv.n_rows, 1, order, &n_order);
        (void)rp_scan_csv_write(path, &csv);
        rp_scan_csv_free(&csv);
    }
    unlink(path);
    return 0;
}
