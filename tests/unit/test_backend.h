/* Shared by the backend tests: a CPU backend and Vulkan backends opened once
 * per test run (pipelines compile once), random weights of any type. */
#ifndef RP_TEST_BACKEND_H
#define RP_TEST_BACKEND_H

#include "backend/backend.h"

#include <stdint.h>

typedef struct tb_env {
    rp_backend *cpu, *vk;
} tb_env;

enum {
    TB_VK = 0,   /* lavapipe as it is */
    TB_VK_NOSG,  /* without subgroup operations */
    TB_VK_SMALL, /* bindings of 16 KiB, weights in parts of 24 KiB, staging uploads */
    TB_COUNT
};

/* The CPU backend and Vulkan device `which`; NULL with a failed check when
 * Vulkan is not there (a build without it, or no device: the message says
 * which package is missing). */
tb_env *tb_env_get(int which);
/* The CPU backend alone (no Vulkan needed). */
rp_backend *tb_cpu(void);
/* VK_ICD_FILENAMES / VK_DRIVER_FILES = lavapipe's when the environment names no driver. */
void tb_select_lavapipe(void);

/* A weight of rows x ne0 random values in `type` (the reference quantizer),
 * forgotten by both backends on free. */
typedef struct tb_weight {
    rp_tensor t;
    void *data;
} tb_weight;
void tb_weight_make(tb_weight *w, int type, int ne0, int rows, uint64_t seed);
void tb_weight_free(tb_weight *w);

/* With RP_TEST_FIGURES=1: one line per measured figure (the report's table). */
void tb_figure(const char *op, const char *what, const char *metric, double value, double bound);

#endif
