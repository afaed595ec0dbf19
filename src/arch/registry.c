/* The table of architectures. Adding one: a file under src/arch/ defining an
 * rp_arch, and a line here (docs/HACKING.md, "Add an architecture"). */
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
#define N_ARCHS (sizeof g_archs / sizeof g_archs[0])

const rp_arch *rp_arch_find(const char *name) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (!strcmp(g_archs[i]->name, name)) return g_archs[i];
    return NULL;
}

const rp_arch *rp_arch_at(int i) {
    return i >= 0 && (size_t)i < N_ARCHS ? g_archs[i] : NULL;
}

const rp_arch *rp_arch_find_hf(const char *hf_class) {
    for (size_t i = 0; i < N_ARCHS; i++)
        for (const char *const *c = g_archs[i]->hf_classes; c && *c; c++)
            if (!strcmp(*c, hf_class)) return g_archs[i];
    return NULL;
}

/* The two lists, written once under pthread_once: every caller reads a
 * finished buffer. */
static char g_names[512], g_hf_names[512];
static pthread_once_t g_lists_once = PTHREAD_ONCE_INIT;

static void build_lists(void) {
    size_t k = 0, h = 0;
    for (size_t i = 0; i < N_ARCHS; i++) {
        if (k < sizeof g_names)
            k += (size_t)snprintf(g_names + k, sizeof g_names - k, "%s%s", i ? ", " : "",
                                  g_archs[i]->name);
        for (const char *const *c = g_archs[i]->hf_classes; c && *c; c++)
            if (h < sizeof g_hf_names)
                h += (size_t)snprintf(g_hf_names + h, sizeof g_hf_names - h, "%s%s", h ? ", " : "",
                                      *c);
    }
}

const char *rp_arch_list(void) {
    pthread_once(&g_lists_once, build_lists);
    return g_names;
}

const char *rp_arch_hf_list(void) {
    pthread_once(&g_lists_once, build_lists);
    return g_hf_names;
}
