/* The table of checkpoint architectures reprise convert knows. Adding one: a
 * file src/convert_<name>.c defining an rp_conv_arch, and a line here. */
#include "convert/convert.h"

#include <stdio.h>
#include <string.h>

extern const rp_conv_arch rp_conv_llama, rp_conv_qwen2, rp_conv_qwen3, rp_conv_gemma3;
extern const rp_conv_arch rp_conv_zamba2;

static const rp_conv_arch *const g_conv_archs[] = {
    &rp_conv_llama, &rp_conv_qwen2, &rp_conv_qwen3, &rp_conv_gemma3, &rp_conv_zamba2,
};

const rp_conv_arch *rp_conv_arch_find(const char *hf_arch) {
    for (size_t i = 0; i < sizeof g_conv_archs / sizeof g_conv_archs[0]; i++)
        if (!strcmp(g_conv_archs[i]->hf_arch, hf_arch)) return g_conv_archs[i];
    return NULL;
}

const char *rp_conv_arch_list(void) {
    static char buf[512];
    if (!buf[0]) {
        size_t k = 0;
        for (size_t i = 0; i < sizeof g_conv_archs / sizeof g_conv_archs[0] && k < sizeof buf; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? ", " : "",
                                  g_conv_archs[i]->hf_arch);
    }
    return buf;
}
