/* The backend boundary on the CPU: the CPU backend computes what the direct
 * calls compute, bit for bit (a dense forward written against the interface
 * equals rp_decode: tests/unit/test_backend_fwd.c), the transfers and KV
 * views behave as documented, the counters count. Also the shared helpers
 * of the backend tests. */
#include "test.h"
#include "test_backend.h"
#include "backend/backend_vk.h"
#include "base/threads.h"
#include "base/util.h"
#include "kernels/types.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

/* ---- shared helpers ----------------------------------------------------------------- */

static struct {
    rp_compute cc;
    float *scratch;
    size_t per_thread;
    rp_backend *cpu;
    rp_backend *vk[TB_COUNT];
    bool tried[TB_COUNT];
    bool registered;
} g;

static void env_free(void) {
    for (int i = 0; i < TB_COUNT; i++) rp_backend_free(g.vk[i]);
    rp_backend_free(g.cpu);
    rp_pool_free(g.cc.pool);
    rp_free_aligned(g.cc.wbuf);
    rp_free_aligned(g.scratch);
    memset(&g, 0, sizeof g);
}

rp_backend *tb_cpu(void) {
    if (g.cpu) return g.cpu;
    if (!g.registered) {
        atexit(env_free);
        g.registered = true;
    }
    g.cc.pool = rp_pool_new(1);
    g.cc.wbuf_size = rp_matmul_scratch(8192, 128);
    g.cc.wbuf = rp_alloc_aligned(g.cc.wbuf_size, "test matmul scratch");
    g.per_thread = rp_attention_scratch(1024, 8, 1);
    g.scratch = rp_alloc_aligned(g.per_thread * sizeof(float), "test attention scratch");
    rp_backend_params p = {
        .cc = &g.cc, .attn_scratch = g.scratch, .attn_scratch_per_thread = g.per_thread};
    rp_status s =
        g.cc.pool && g.cc.wbuf && g.scratch ? rp_backend_cpu_new(&p, &g.cpu) : RP_ERR_NOMEM;
    CHECK(!s, "cpu backend: %s", rp_last_error());
    return g.cpu;
}

void tb_select_lavapipe(void) {
    if (getenv("VK_ICD_FILENAMES") || getenv("VK_DRIVER_FILES")) return;
    static const char *const icd[] = {"/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
                                      "/usr/share/vulkan/icd.d/lvp_icd.aarch64.json",
                                      "/usr/share/vulkan/icd.d/lvp_icd.json"};
    for (size_t i = 0; i < RP_ARRAY_LEN(icd); i++)
        if (access(icd[i], R_OK) == 0) {
            setenv("VK_ICD_FILENAMES", icd[i], 1);
            setenv("VK_DRIVER_FILES", icd[i], 1);
            return;
        }
}

static tb_env g_env[TB_COUNT];

tb_env *tb_env_get(int which) {
    if (!tb_cpu()) return NULL;
    if (!rp_backend_vk_built()) {
        CHECK(false, "built without Vulkan: install libvulkan-dev glslc mesa-vulkan-drivers "
                     "(scripts/setup.sh does) and rebuild to test the Vulkan backend");
        return NULL;
    }
    if (!g.tried[which]) {
        g.tried[which] = true;
        tb_select_lavapipe();
        rp_backend_params p = {0};
        if (which == TB_VK_NOSG) p.vk_no_subgroup = true;
        if (which == TB_VK_SMALL) {
            p.vk_max_binding = 16 << 10;
            p.vk_max_weight_part = 24 << 10;
            p.vk_force_staging = true;
        }
        rp_status s = rp_backend_vk_new(0, &p, &g.vk[which]);
        CHECK(!s, "no Vulkan device to test on (install mesa-vulkan-drivers for lavapipe): %s",
              rp_last_error());
    }
    if (!g.vk[which]) {
        CHECK(false, "the Vulkan device could not be opened (see the first failure)");
        return NULL;
    }
    g_env[which] = (tb_env){g.cpu, g.vk[which]};
    return &g_env[which];
}

void tb_weight_make(tb_weight *w, int type, int ne0, int rows, uint64_t seed) {
    const rp_type_traits *tt = rp_type_get(type);
    const size_t rb = rp_row_size(type, ne0);
    float *x = malloc(sizeof(float) * (size_t)ne0 * (size_t)rows);
    rp_rng r;
    rp_rng_seed(&r, seed);
    for (size_t i = 0; i < (size_t)ne0 * (size_t)rows; i++) x[i] = rp_rng_normal(&r);
    memset(w, 0, sizeof *w);
    w->data = rp_alloc_aligned(rb * (size_t)rows, "test weight");
    for (int i = 0; i < rows; i++)
        tt->from_float(x + (size_t)i * (size_t)ne0, (char *)w->data + rb * (size_t)i, ne0);
    free(x);
    w->t = (rp_tensor){.name = "test weight",
                       .type = type,
                       .n_dims = rows > 1 ? 2 : 1,
                       .ne = {ne0, rows, 1, 1},
                       .nbytes = rb * (size_t)rows,
                       .row_bytes = rb,
                       .data = w->data};
}

void tb_weight_free(tb_weight *w) {
    /* the backends key uploads by the bytes' address, which malloc reuses */
    if (g.cpu) rp_be_forget(g.cpu, &w->t);
    for (int i = 0; i < TB_COUNT; i++)
        if (g.vk[i]) rp_be_forget(g.vk[i], &w->t);
    rp_free_aligned(w->data);
    memset(w, 0, sizeof *w);
}

void tb_figure(const char *op, const char *what, const char *metric, double value, double bound) {
    const char *f = getenv("RP_TEST_FIGURES");
    if (!f || !*f || !strcmp(f, "0")) return;
    if (bound > 0)
        printf("  figure %-22s %-36s %-12s %.3g (bound %.0e)\n", op, what, metric, value, bound);
    else
        printf("  figure %-22s %-36s %-12s %s\n", op, what, metric, "bit for bit");
}

/* ---- the CPU backend --------------------------------------------------------------- */

void test_backend_cpu_transfer(void) {
    rp_backend *be = tb_cpu();
    REQUIRE(be && rp_backend_is_cpu(be), "cpu backend");
    rp_bbuf *b = NULL;
    REQUIRE(!rp_be_buf_new(be, 40 * 4, "t", &b), "buffer");
    float x[40], y[40];
    for (int i = 0; i < 40; i++) x[i] = (float)i;
    rp_be_write(be, rp_bx_at(b, 0), x, sizeof x);
    static const int32_t rows[3] = {1, 3, 4};
    rp_be_gather(be, rp_bx_at(b, 0), rp_bx_at(b, 0), rows, 3, 8); /* in place, rows of 8 */
    rp_be_read(be, y, rp_bx_at(b, 0), sizeof y);
    CHECK(!rp_be_sync(be), "sync");
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 8; k++) CHECK(y[i * 8 + k] == x[rows[i] * 8 + k], "gather row %d", i);
    rp_be_copy(be, rp_bx_add(rp_bx_at(b, 0), 3), rp_bx_at(b, 0), 20 * 4); /* overlapping */
    rp_be_read(be, y, rp_bx_at(b, 0), sizeof y);
    CHECK(!rp_be_sync(be), "sync");
    CHECK(y[3] == x[8] && y[22] == x[35], "overlapping copy");
    CHECK(be->stats.calls[RP_BOP_TRANSFER] >= 5, "transfers counted");
    char rep[2048];
    CHECK(rp_be_stats_report(be, 1, rep, sizeof rep) > 0 && strstr(rep, "transfer"), "report: %s",
          rep);
    rp_be_buf_free(be, b);
}

/* a step's cache over views rp_state holds: the CPU backend writes where rp_kv_write does */
void test_backend_cpu_kv_wrap(void) {
    rp_backend *be = tb_cpu();
    REQUIRE(be, "cpu backend");
    const int nkv = 2, cap = 5, dk = 4, dv = 6;
    uint16_t k[2][2 * 5 * 4] = {{0}}, v[2][2 * 5 * 6] = {{0}};
    rp_kv_view views[2] = {{k[0], v[0], RP_TYPE_F16, RP_TYPE_F16, cap},
                           {k[1], v[1], RP_TYPE_F16, RP_TYPE_F16, cap}};
    rp_bkv_desc d = {2, nkv, cap, dk, dv, RP_TYPE_F16, RP_TYPE_F16};
    rp_bkv *kv = NULL;
    REQUIRE(!rp_backend_cpu_kv_wrap(be, views, &d, &kv), "wrap: %s", rp_last_error());
    CHECK(rp_backend_cpu_kv_view(kv, 1)->k == k[1], "view of sequence 1");
    rp_bbuf *b = NULL;
    REQUIRE(!rp_be_buf_new(be, (size_t)(nkv * (dk + dv)) * 4, "t", &b), "buffer");
    float row[20];
    for (int i = 0; i < 20; i++) row[i] = (float)i + 0.5f;
    rp_be_write(be, rp_bx_at(b, 0), row, (size_t)(nkv * (dk + dv)) * 4);
    const int32_t pos = 7, seq = 1;
    rp_be_kv_write(be, kv, 1, &pos, &seq, rp_bx_at(b, 0), nkv * dk,
                   rp_bx_add(rp_bx_at(b, 0), nkv * dk), nkv * dv);
    CHECK(!rp_be_sync(be), "sync");
    uint16_t ek[2 * 5 * 4] = {0}, ev[2 * 5 * 6] = {0};
    rp_kv_view ref = {ek, ev, RP_TYPE_F16, RP_TYPE_F16, cap};
    rp_kv_write(&ref, nkv, dk, dv, 7, row, row + nkv * dk);
    CHECK(!memcmp(ek, k[1], sizeof ek) && !memcmp(ev, v[1], sizeof ev), "cells as rp_kv_write");
    CHECK(!memcmp(k[0], (uint16_t[40]){0}, sizeof k[0]), "sequence 0 untouched");
    rp_be_kv_free(be, kv);
    rp_be_buf_free(be, b);
}
