/* Entry points of the Vulkan backend (src/backend/vulkan/). A build without
 * Vulkan (no `pkg-config vulkan` or no glslc) gets the stubs in backend.c,
 * which fail with a message naming the packages to install. */
#ifndef RP_BACKEND_VK_H
#define RP_BACKEND_VK_H

#include "backend/backend.h"

/* The Vulkan devices ("vulkan0", ...); RP_ERR_UNSUPPORTED when there are
 * none, the message says why (no loader, no device, built without Vulkan). */
rp_status rp_backend_vk_list(rp_backend_dev *devs, int cap, int *n);
rp_status rp_backend_vk_new(int index, const rp_backend_params *p, rp_backend **out);
/* True when this build has the Vulkan backend. */
bool rp_backend_vk_built(void);

#endif
