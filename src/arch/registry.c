/* The table of architectures. Adding one: a file under src/arch/ defining an
 * rp_arch, and a line here. */
#include "arch/arch.h"

#include <pthread.h>
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

/* Filled once (pthread_once): any thread may ask at any time. */
static char g_arch_list[512];
static pthread_once_t g_arch_list_once = PTHREAD_ONCE_INIT;

static void arch_list_fill(void) {
    size_t k = 0;
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0] && k < sizeof g_arch_list; i++)
        k += (size_t)snprintf(g_arch_list + k, sizeof g_arch_list - k, "%s%s", i ? ", " : "",
                              g_archs[i]->name);
}

const char *rp_arch_list(void) {
    pthread_once(&g_arch_list_once, arch_list_fill);
    return g_arch_list;
}
