/* The table of architectures. Adding one: a file under src/arch/ defining an
 * rp_arch, and a line here. */
#include "arch/arch.h"

#include <stdio.h>
#include <string.h>

extern const rp_arch rp_arch_llama, rp_arch_qwen2, rp_arch_qwen3;
extern const rp_arch rp_arch_qwen35;
extern const rp_arch rp_arch_zamba2;
extern const rp_arch rp_arch_gemma2, rp_arch_gemma3;

static const rp_arch *const g_archs[] = {
    &rp_arch_llama,  &rp_arch_qwen2,  &rp_arch_qwen3,  &rp_arch_qwen35,
    &rp_arch_zamba2, &rp_arch_gemma2, &rp_arch_gemma3,
};

const rp_arch *rp_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        if (!strcmp(g_archs[i]->name, name)) return g_archs[i];
    return NULL;
}

const rp_arch *rp_arch_at(int i) {
    return i >= 0 && (size_t)i < sizeof g_archs / sizeof g_archs[0] ? g_archs[i] : NULL;
}

const char *rp_arch_list(void) {
    static char buf[512];
    if (!buf[0]) {
        size_t k = 0;
        for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0] && k < sizeof buf; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? ", " : "", g_archs[i]->name);
    }
    return buf;
}
