/* The Vulkan entry points of a build without Vulkan (no `pkg-config vulkan`
 * or no glslc): each fails with a message naming the packages to install. */
#include "backend/backend_vk.h"
#include "base/util.h"

#ifndef RP_HAVE_VULKAN
#define NO_VULKAN                                                                                  \
    "reprise was built without Vulkan (install libvulkan-dev glslc, then rebuild; to run on "      \
    "the CPU with Mesa's lavapipe also install mesa-vulkan-drivers)"

bool rp_backend_vk_built(void) {
    return false;
}

rp_status rp_backend_vk_list(rp_backend_dev *devs, int cap, int *n) {
    (void)devs;
    (void)cap;
    *n = 0;
    return rp_fail(RP_ERR_UNSUPPORTED, NO_VULKAN);
}

rp_status rp_backend_vk_new(int index, const rp_backend_params *p, rp_backend **out) {
    (void)p;
    *out = NULL;
    return rp_fail(RP_ERR_UNSUPPORTED, "device vulkan%d: " NO_VULKAN, index);
}
#endif
