/* libFuzzer target: the layer-plan grammars (--repeat-layers specs,
 * --layer-map maps, scan plans 'i-j;k-l') on models of 1..64 layers; what
 * parses is formatted back. The first byte picks the layer count. */
#include "core/plan.h"
#include "reprise_tools.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 1 << 16) return 0;
    const int n_layer = 1 + data[0] % 64;
    char *text = malloc(size);
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    rp_plan *p = NULL;
    char buf[256];
    if (rp_plan_repeat(text, n_layer, n_layer, &p) == RP_OK) {
        rp_plan_format(p, buf, sizeof buf);
        rp_plan_free(p);
    }
    if (rp_plan_map(text, n_layer, n_layer + 1, &p) == RP_OK) {
        rp_plan_format(p, buf, sizeof buf);
        rp_plan_free(p);
    }
    rp_scan_plan sp;
    if (rp_scan_plan_parse(text, n_layer, &sp) == RP_OK) {
        char canon[RP_SCAN_PLAN_LEN];
        rp_scan_plan_format(&sp, canon, sizeof canon);
        rp_scan_plan_extra(&sp);
    }
    free(text);
    return 0;
}
