/* The backends by name: "cpu" and "vulkanN" (the Vulkan entry points are
 * stubs of vulkan_stub.c in a build without Vulkan). */
#include "backend/backend.h"
#include "backend/backend_vk.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rp_status rp_backend_list(rp_backend_dev *devs, int cap, int *n, char *note, size_t note_size) {
    *n = 0;
    if (note && note_size) note[0] = 0;
    if (cap < 1) return rp_fail(RP_ERR_INVALID_ARG, "backend list: no room for any device");
    memset(&devs[0], 0, sizeof devs[0]);
    snprintf(devs[0].name, sizeof devs[0].name, "cpu");
    snprintf(devs[0].desc, sizeof devs[0].desc, "host CPU (%d physical cores)",
             rp_n_physical_cores());
    *n = 1;
    int nv = 0;
    rp_status s = rp_backend_vk_list(devs + 1, cap - 1, &nv);
    if (s) {
        if (note && note_size) snprintf(note, note_size, "%s", rp_last_error());
        rp_clear_error();
        return RP_OK;
    }
    *n += nv;
    return RP_OK;
}

rp_status rp_backend_open(const char *name, const rp_backend_params *p, rp_backend **out) {
    *out = NULL;
    if (!name || !strcmp(name, "cpu")) return rp_backend_cpu_new(p, out);
    if (!strncmp(name, "vulkan", 6)) {
        const char *d = name + 6;
        char *end = NULL;
        long idx = *d ? strtol(d, &end, 10) : 0;
        if ((*d && (!end || *end)) || idx < 0 || idx >= RP_BACKEND_MAX_DEVICES)
            return rp_fail(RP_ERR_INVALID_ARG,
                           "device '%s': expected vulkanN with N a device index (see "
                           "--list-devices)",
                           name);
        return rp_backend_vk_new((int)idx, p, out);
    }
    return rp_fail(RP_ERR_INVALID_ARG, "device '%s': unknown (expected cpu or vulkanN)", name);
}
