/* The Vulkan device layer: the loader opened at run time, instance and
 * device selection, device limits (queried, never assumed), memory chunks
 * with sub-allocation, per-batch arenas for uploads and readbacks,
 * descriptor pools, pipelines created on first use per (shader,
 * specialization constants), and the one command buffer a micro-batch is
 * recorded into and submitted from at sync. */
#include "backend/vulkan/vk.h"
#include "backend/backend_vk.h"
#include "base/util.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOADER_HELP                                                                                \
    "install a Vulkan driver: mesa-vulkan-drivers (lavapipe, runs on the CPU) or the GPU's own "   \
    "driver"

const char *vk_result_str(VkResult r) {
    switch (r) {
    case VK_SUCCESS:
        return "VK_SUCCESS";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
        return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
        return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
        return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
        return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
        return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
        return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
        return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_TOO_MANY_OBJECTS:
        return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
        return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_FRAGMENTED_POOL:
        return "VK_ERROR_FRAGMENTED_POOL";
    default:
        return "VkResult error";
    }
}

static rp_status vk_fail(VkResult r, const char *what) {
    rp_status s = r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY
                      ? RP_ERR_NOMEM
                      : RP_ERR_UNSUPPORTED;
    return rp_fail(s, "vulkan: %s failed (%s, %d)", what, vk_result_str(r), (int)r);
}

/* ---- loader --------------------------------------------------------------------- */

static vk_loader g_loader;
static rp_status g_loader_status = RP_ERR_INTERNAL;
static char g_loader_msg[256];
static pthread_once_t g_loader_once = PTHREAD_ONCE_INIT;

static void loader_open(void) {
    void *h = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_loader_msg, sizeof g_loader_msg,
                 "no Vulkan loader (libvulkan.so.1 not found): install libvulkan1 and %s",
                 LOADER_HELP);
        g_loader_status = RP_ERR_UNSUPPORTED;
        return;
    }
    /* dlsym returns an object pointer; copying it is the portable way to
     * get a function pointer out of it */
    void *sym = dlsym(h, "vkGetInstanceProcAddr");
    if (!sym) {
        snprintf(g_loader_msg, sizeof g_loader_msg,
                 "the Vulkan loader has no vkGetInstanceProcAddr: reinstall libvulkan1");
        g_loader_status = RP_ERR_UNSUPPORTED;
        return;
    }
    memcpy(&g_loader.get_instance_proc, &sym, sizeof sym);
    g_loader.create_instance =
        (PFN_vkCreateInstance)g_loader.get_instance_proc(NULL, "vkCreateInstance");
    g_loader.enumerate_version = (PFN_vkEnumerateInstanceVersion)g_loader.get_instance_proc(
        NULL, "vkEnumerateInstanceVersion");
    g_loader_status = g_loader.create_instance ? RP_OK : RP_ERR_UNSUPPORTED;
    if (g_loader_status)
        snprintf(g_loader_msg, sizeof g_loader_msg, "the Vulkan loader has no vkCreateInstance");
}

rp_status vk_loader_get(const vk_loader **out) {
    pthread_once(&g_loader_once, loader_open);
    *out = &g_loader;
    return g_loader_status ? rp_fail(g_loader_status, "%s", g_loader_msg) : RP_OK;
}

#if defined(RP_SANITIZE)
/* Sanitizer builds: the loader unloads the driver (ICD) at vkDestroyInstance,
 * so what the driver keeps past it shows up in LeakSanitizer's exit report
 * as "<unknown module>", which no suppression can name. Pinning every loaded
 * libvulkan_* library (RTLD_NODELETE) keeps the driver's name in the report,
 * where tests/lsan.supp suppresses it. Release builds leave the loader be. */
static int pin_icd(struct dl_phdr_info *info, size_t size, void *user) {
    (void)size;
    (void)user;
    if (info->dlpi_name && strstr(info->dlpi_name, "libvulkan_"))
        (void)dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}
#endif

rp_status vk_instance_new(const vk_loader *L, VkInstance *inst, vk_fns *f) {
    uint32_t ver = VK_API_VERSION_1_0;
    if (L->enumerate_version) L->enumerate_version(&ver);
    if (ver < VK_API_VERSION_1_1)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "the Vulkan loader offers version %u.%u; reprise needs 1.1: install a "
                       "newer libvulkan1",
                       VK_API_VERSION_MAJOR(ver), VK_API_VERSION_MINOR(ver));
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "reprise",
                             .pEngineName = "reprise",
                             .apiVersion = VK_API_VERSION_1_1};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app};
    VkResult r = L->create_instance(&ci, NULL, inst);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
        return rp_fail(RP_ERR_UNSUPPORTED, "no Vulkan 1.1 driver found: %s", LOADER_HELP);
    if (r) return vk_fail(r, "vkCreateInstance");
#if defined(RP_SANITIZE)
    dl_iterate_phdr(pin_icd, NULL);
#endif
    memset(f, 0, sizeof *f);
#define X(n)                                                                                       \
    f->n = (PFN_##n)L->get_instance_proc(*inst, #n);                                               \
    if (!f->n) {                                                                                   \
        PFN_vkDestroyInstance d =                                                                  \
            (PFN_vkDestroyInstance)L->get_instance_proc(*inst, "vkDestroyInstance");               \
        if (d) d(*inst, NULL);                                                                     \
        return rp_fail(RP_ERR_UNSUPPORTED, "the Vulkan loader lacks %s", #n);                      \
    }
    VK_FNS_INSTANCE(X)
#undef X
    return RP_OK;
}

/* ---- listing -------------------------------------------------------------------- */

static const char *dev_type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
        return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
        return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
        return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
        return "cpu";
    default:
        return "other";
    }
}

static uint64_t device_local_bytes(const VkPhysicalDeviceMemoryProperties *mp) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < mp->memoryHeapCount; i++)
        if (mp->memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
            n += mp->memoryHeaps[i].size;
    return n;
}

static rp_status list_physical(const vk_fns *f, VkInstance inst, VkPhysicalDevice *pd,
                               uint32_t *n) {
    VkResult r = f->vkEnumeratePhysicalDevices(inst, n, NULL);
    if (r) return vk_fail(r, "vkEnumeratePhysicalDevices");
    if (*n == 0) return rp_fail(RP_ERR_UNSUPPORTED, "no Vulkan device found: %s", LOADER_HELP);
    if (*n > RP_BACKEND_MAX_DEVICES) *n = RP_BACKEND_MAX_DEVICES;
    r = f->vkEnumeratePhysicalDevices(inst, n, pd);
    if (r && r != VK_INCOMPLETE) return vk_fail(r, "vkEnumeratePhysicalDevices");
    return RP_OK;
}

bool rp_backend_vk_built(void) {
    return true;
}

rp_status rp_backend_vk_list(rp_backend_dev *devs, int cap, int *n) {
    *n = 0;
    const vk_loader *L;
    rp_status s = vk_loader_get(&L);
    VkInstance inst;
    vk_fns f;
    if (s || (s = vk_instance_new(L, &inst, &f))) return s;
    VkPhysicalDevice pd[RP_BACKEND_MAX_DEVICES];
    uint32_t np = 0;
    if (!(s = list_physical(&f, inst, pd, &np)))
        for (uint32_t i = 0; i < np && *n < cap; i++) {
            VkPhysicalDeviceProperties pr;
            VkPhysicalDeviceMemoryProperties mp;
            f.vkGetPhysicalDeviceProperties(pd[i], &pr);
            f.vkGetPhysicalDeviceMemoryProperties(pd[i], &mp);
            rp_backend_dev *d = &devs[(*n)++];
            memset(d, 0, sizeof *d);
            snprintf(d->name, sizeof d->name, "vulkan%u", i);
            snprintf(d->desc, sizeof d->desc, "%.120s, Vulkan %u.%u, %s", pr.deviceName,
                     VK_API_VERSION_MAJOR(pr.apiVersion), VK_API_VERSION_MINOR(pr.apiVersion),
                     dev_type_name(pr.deviceType));
            d->mem_bytes = device_local_bytes(&mp);
        }
    f.vkDestroyInstance(inst, NULL);
    return s;
}

/* ---- opening a device ------------------------------------------------------------ */

static int find_type(const VkPhysicalDeviceMemoryProperties *mp, uint32_t bits,
                     VkMemoryPropertyFlags want) {
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++)
        if ((bits & (1u << i)) && (mp->memoryTypes[i].propertyFlags & want) == want) return (int)i;
    return -1;
}

static rp_status load_device_fns(vk_be *v) {
#define X(n)                                                                                       \
    v->f.n = (PFN_##n)v->f.vkGetDeviceProcAddr(v->dev, #n);                                        \
    if (!v->f.n) return rp_fail(RP_ERR_UNSUPPORTED, "the Vulkan driver lacks %s", #n);
    VK_FNS_DEVICE(X)
#undef X
    return RP_OK;
}

/* Memory types: the first device-local one for buffers; for staging a
 * host-visible coherent one, cached if there is one (readbacks). */
static rp_status pick_memory(vk_be *v, const rp_backend_params *p) {
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = 4096,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkBuffer b;
    VkResult r = v->f.vkCreateBuffer(v->dev, &bi, NULL, &b);
    if (r) return vk_fail(r, "vkCreateBuffer");
    VkMemoryRequirements req;
    v->f.vkGetBufferMemoryRequirements(v->dev, b, &req);
    v->f.vkDestroyBuffer(v->dev, b, NULL);
    const VkMemoryPropertyFlags hv =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int td = find_type(&v->memp, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    int th = find_type(&v->memp, req.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (th < 0) th = find_type(&v->memp, req.memoryTypeBits, hv);
    if (td < 0) td = th;
    if (td < 0 || th < 0)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "vulkan: %s has no host-visible coherent memory type for storage buffers",
                       v->props.deviceName);
    v->type_dev = (uint32_t)td;
    v->type_host = (uint32_t)th;
    v->dev_mappable = !p->vk_force_staging && (v->memp.memoryTypes[td].propertyFlags & hv) == hv;
    return RP_OK;
}

static rp_status query_limits(vk_be *v, const rp_backend_params *p) {
    const VkPhysicalDeviceLimits *lim = &v->props.limits;
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sg = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &m3};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &sg};
    v->f.vkGetPhysicalDeviceProperties2(v->phys, &p2);
    if (lim->maxPerStageDescriptorStorageBuffers < VK_NB ||
        lim->maxComputeWorkGroupInvocations < 256 || lim->maxComputeWorkGroupSize[0] < 256 ||
        lim->maxComputeSharedMemorySize < 16384 || lim->maxPushConstantsSize < VK_PUSH)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "vulkan: %s is too small for reprise's kernels (it has %u storage "
                       "buffers per stage, %u invocations per workgroup, %u bytes of shared "
                       "memory, %u of push constants; reprise needs %d, 256, 16384, %d)",
                       v->props.deviceName, lim->maxPerStageDescriptorStorageBuffers,
                       lim->maxComputeWorkGroupInvocations, lim->maxComputeSharedMemorySize,
                       lim->maxPushConstantsSize, VK_NB, VK_PUSH);
    v->max_binding = lim->maxStorageBufferRange;
    if (p->vk_max_binding && p->vk_max_binding < v->max_binding) v->max_binding = p->vk_max_binding;
    v->align = RP_MAX(lim->minStorageBufferOffsetAlignment, (VkDeviceSize)16);
    if (v->max_binding < 4 * v->align || v->max_binding < 4096)
        return rp_fail(RP_ERR_UNSUPPORTED, "vulkan: a storage binding of %llu bytes is too small",
                       (unsigned long long)v->max_binding);
    /* one allocation: the driver's limit (1 GiB when it does not say) */
    v->max_alloc = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : (1ull << 30);
    /* each allocation is one VkBuffer: keep it within 2 GiB, which every
     * driver's maxBufferSize (a Vulkan 1.3 limit) allows */
    if (v->max_alloc > (1ull << 31)) v->max_alloc = 1ull << 31;
    v->max_part = v->max_alloc;
    if (p->vk_max_weight_part && p->vk_max_weight_part < v->max_part)
        v->max_part = p->vk_max_weight_part;
    v->chunk_bytes = RP_MIN((VkDeviceSize)256 << 20, v->max_alloc);
    for (int i = 0; i < 3; i++) v->max_groups[i] = lim->maxComputeWorkGroupCount[i];
    v->subgroup_size = sg.subgroupSize;
    const VkSubgroupFeatureFlags need =
        VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    v->subgroups = !p->vk_no_subgroup && (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                   (sg.supportedOperations & need) == need && sg.subgroupSize >= 8;
    return RP_OK;
}

static rp_status create_device(vk_be *v) {
    uint32_t nq = 0;
    v->f.vkGetPhysicalDeviceQueueFamilyProperties(v->phys, &nq, NULL);
    VkQueueFamilyProperties qf[32];
    if (nq > 32) nq = 32;
    v->f.vkGetPhysicalDeviceQueueFamilyProperties(v->phys, &nq, qf);
    int fam = -1;
    for (uint32_t i = 0; i < nq && fam < 0; i++) /* a compute-only family first */
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) &&
            !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
            fam = (int)i;
    for (uint32_t i = 0; i < nq && fam < 0; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) fam = (int)i;
    if (fam < 0)
        return rp_fail(RP_ERR_UNSUPPORTED, "vulkan: %s has no compute queue", v->props.deviceName);
    v->qfam = (uint32_t)fam;
    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueFamilyIndex = v->qfam,
                                  .queueCount = 1,
                                  .pQueuePriorities = &prio};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi};
    VkResult r = v->f.vkCreateDevice(v->phys, &di, NULL, &v->dev);
    if (r) return vk_fail(r, "vkCreateDevice");
    rp_status s = load_device_fns(v);
    if (s) return s;
    v->f.vkGetDeviceQueue(v->dev, v->qfam, 0, &v->queue);
    return RP_OK;
}

static rp_status create_layout(vk_be *v) {
    VkDescriptorSetLayoutBinding b[VK_NB];
    for (int i = 0; i < VK_NB; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo li = {.sType =
                                              VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = VK_NB,
                                          .pBindings = b};
    VkResult r = v->f.vkCreateDescriptorSetLayout(v->dev, &li, NULL, &v->dsl);
    if (r) return vk_fail(r, "vkCreateDescriptorSetLayout");
    VkPushConstantRange pr = {
        .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = VK_PUSH};
    VkPipelineLayoutCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                     .setLayoutCount = 1,
                                     .pSetLayouts = &v->dsl,
                                     .pushConstantRangeCount = 1,
                                     .pPushConstantRanges = &pr};
    r = v->f.vkCreatePipelineLayout(v->dev, &pi, NULL, &v->layout);
    if (r) return vk_fail(r, "vkCreatePipelineLayout");
    return RP_OK;
}

static rp_status create_commands(vk_be *v) {
    VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                  .queueFamilyIndex = v->qfam};
    VkResult r = v->f.vkCreateCommandPool(v->dev, &pi, NULL, &v->cmd_pool);
    if (r) return vk_fail(r, "vkCreateCommandPool");
    VkCommandBuffer cbs[2];
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = v->cmd_pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 2};
    if ((r = v->f.vkAllocateCommandBuffers(v->dev, &ai, cbs)))
        return vk_fail(r, "vkAllocateCommandBuffers");
    v->cb = cbs[0];
    v->cb_now = cbs[1];
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = v->f.vkCreateFence(v->dev, &fi, NULL, &v->fence)) ||
        (r = v->f.vkCreateFence(v->dev, &fi, NULL, &v->fence_now)))
        return vk_fail(r, "vkCreateFence");
    return RP_OK;
}

static int shader_or(const char *fmt, const char *a) {
    char name[64];
    snprintf(name, sizeof name, fmt, a);
    return vk_shader_find(name);
}

static void find_shaders(vk_be *v) {
    vk_shader_ids *s = &v->sh;
    for (int t = 0; t < RP_TYPE_COUNT; t++) {
        const char *tn = rp_type_name(t);
        s->mul_mv[t] = s->mul_mv_sg[t] = s->mul_mm[t] = s->get_rows[t] = s->quant[t] = -1;
        if (!tn) continue;
        s->mul_mv[t] = shader_or("mul_mv_%s", tn);
        s->mul_mv_sg[t] = shader_or("mul_mv_%s_sg", tn);
        s->mul_mm[t] = shader_or("mul_mm_%s", tn);
        s->get_rows[t] = shader_or("get_rows_%s", tn);
        s->quant[t] = shader_or("quant_%s", tn);
    }
    static const char *const kv[2] = {"f32", "f16"};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            char n[64];
            snprintf(n, sizeof n, "attn_k%s_v%s", kv[a], kv[b]);
            s->attn[a][b] = vk_shader_find(n);
            snprintf(n, sizeof n, "attn_k%s_v%s_sg", kv[a], kv[b]);
            s->attn_sg[a][b] = vk_shader_find(n);
        }
    s->norm = vk_shader_find("norm");
    s->norm_sg = vk_shader_find("norm_sg");
    s->rope = vk_shader_find("rope");
    s->kv_write = vk_shader_find("kv_write");
    s->eltwise = vk_shader_find("eltwise");
}

int vk_shader_find(const char *name) {
    for (int i = 0; i < rp_vk_n_shaders; i++)
        if (!strcmp(rp_vk_shaders[i].name, name)) return i;
    return -1;
}

rp_status vk_device_open(vk_be *v, int index, const rp_backend_params *p) {
    const vk_loader *L;
    rp_status s = vk_loader_get(&L);
    if (s || (s = vk_instance_new(L, &v->inst, &v->f))) return s;
    VkPhysicalDevice pd[RP_BACKEND_MAX_DEVICES];
    uint32_t np = 0;
    if ((s = list_physical(&v->f, v->inst, pd, &np))) return s;
    if ((uint32_t)index >= np)
        return rp_fail(RP_ERR_INVALID_ARG, "device vulkan%d: there %s %u Vulkan device%s", index,
                       np == 1 ? "is" : "are", np, np == 1 ? "" : "s");
    v->phys = pd[index];
    v->f.vkGetPhysicalDeviceProperties(v->phys, &v->props);
    v->f.vkGetPhysicalDeviceMemoryProperties(v->phys, &v->memp);
    if (v->props.apiVersion < VK_API_VERSION_1_1)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "device vulkan%d (%s) is Vulkan %u.%u; reprise needs 1.1", index,
                       v->props.deviceName, VK_API_VERSION_MAJOR(v->props.apiVersion),
                       VK_API_VERSION_MINOR(v->props.apiVersion));
    if ((s = query_limits(v, p)) || (s = create_device(v)) || (s = pick_memory(v, p)) ||
        (s = create_layout(v)) || (s = create_commands(v)))
        return s;
    v->modules = rp_calloc((size_t)rp_vk_n_shaders, sizeof *v->modules, "vulkan shaders");
    if (!v->modules) return RP_ERR_NOMEM;
    find_shaders(v);
    v->up.block = 4u << 20;
    v->down.block = 4u << 20;
    if ((s = vk_mem_alloc(v, 256, false, &v->dummy))) return s;
    snprintf(v->base.name, sizeof v->base.name, "vulkan%d", index);
    snprintf(v->base.desc, sizeof v->base.desc,
             "%.120s (Vulkan %u.%u, %s), binding range %llu MiB, subgroups %s", v->props.deviceName,
             VK_API_VERSION_MAJOR(v->props.apiVersion), VK_API_VERSION_MINOR(v->props.apiVersion),
             dev_type_name(v->props.deviceType), (unsigned long long)(v->max_binding >> 20),
             v->subgroups ? "on" : "off");
    v->base.mem_total = device_local_bytes(&v->memp);
    return RP_OK;
}

/* ---- memory --------------------------------------------------------------------- */

static void chunk_destroy(vk_be *v, vk_chunk *c) {
    if (c->buf) v->f.vkDestroyBuffer(v->dev, c->buf, NULL);
    if (c->map) v->f.vkUnmapMemory(v->dev, c->mem);
    if (c->mem) v->f.vkFreeMemory(v->dev, c->mem, NULL);
    v->base.stats.device_bytes -= c->mem ? c->size : 0;
    free(c->free_list);
    free(c);
}

static rp_status chunk_new(vk_be *v, VkDeviceSize size, bool host, vk_chunk **out) {
    vk_chunk *c = rp_calloc(1, sizeof *c, "vulkan memory chunk");
    if (!c) return RP_ERR_NOMEM;
    c->size = size;
    c->host = host;
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = v->f.vkCreateBuffer(v->dev, &bi, NULL, &c->buf);
    if (r) {
        chunk_destroy(v, c);
        return vk_fail(r, "vkCreateBuffer");
    }
    VkMemoryRequirements req;
    v->f.vkGetBufferMemoryRequirements(v->dev, c->buf, &req);
    const uint32_t type = host ? v->type_host : v->type_dev;
    if (!(req.memoryTypeBits & (1u << type))) {
        chunk_destroy(v, c);
        return rp_fail(RP_ERR_UNSUPPORTED, "vulkan: storage buffers cannot use memory type %u",
                       type);
    }
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = type};
    if ((r = v->f.vkAllocateMemory(v->dev, &ai, NULL, &c->mem))) {
        chunk_destroy(v, c);
        return rp_fail(RP_ERR_NOMEM, "vulkan: %llu bytes of %s memory: %s",
                       (unsigned long long)size, host ? "staging" : "device", vk_result_str(r));
    }
    v->base.stats.device_bytes += size;
    if ((r = v->f.vkBindBufferMemory(v->dev, c->buf, c->mem, 0))) {
        chunk_destroy(v, c);
        return vk_fail(r, "vkBindBufferMemory");
    }
    if (host || v->dev_mappable) {
        if ((r = v->f.vkMapMemory(v->dev, c->mem, 0, VK_WHOLE_SIZE, 0, &c->map))) {
            c->map = NULL;
            chunk_destroy(v, c);
            return vk_fail(r, "vkMapMemory");
        }
    }
    c->free_list = rp_malloc(sizeof *c->free_list * 8, "vulkan free list");
    if (!c->free_list) {
        chunk_destroy(v, c);
        return RP_ERR_NOMEM;
    }
    c->cap_free = 8;
    c->n_free = 1;
    c->free_list[0] = (vk_range){0, size};
    if (v->n_chunks == v->cap_chunks) {
        int cap = v->cap_chunks ? 2 * v->cap_chunks : 16;
        vk_chunk **p = rp_realloc(v->chunks, (size_t)cap * sizeof *p, "vulkan chunks");
        if (!p) {
            chunk_destroy(v, c);
            return RP_ERR_NOMEM;
        }
        v->chunks = p;
        v->cap_chunks = cap;
    }
    v->chunks[v->n_chunks++] = c;
    *out = c;
    return RP_OK;
}

static bool chunk_take(vk_chunk *c, VkDeviceSize bytes, VkDeviceSize align, vk_alloc *out) {
    for (int i = 0; i < c->n_free; i++) {
        vk_range *f = &c->free_list[i];
        const VkDeviceSize start = rp_align_up(f->off, align), pad = start - f->off;
        if (pad + bytes > f->size) continue;
        const VkDeviceSize end = start + bytes, tail = f->off + f->size - end;
        out->chunk = c;
        out->off = start;
        out->size = bytes;
        c->used += bytes;
        if (pad && tail) { /* split: keep the pad here, the tail after it */
            if (c->n_free == c->cap_free) {
                vk_range *p = realloc(c->free_list, sizeof *p * (size_t)c->cap_free * 2);
                if (!p) {
                    c->used -= bytes;
                    return false;
                }
                c->free_list = p;
                c->cap_free *= 2;
                f = &c->free_list[i];
            }
            memmove(&c->free_list[i + 2], &c->free_list[i + 1],
                    sizeof *f * (size_t)(c->n_free - i - 1));
            c->free_list[i + 1] = (vk_range){end, tail};
            f->size = pad;
            c->n_free++;
        } else if (pad) {
            f->size = pad;
        } else if (tail) {
            f->off = end;
            f->size = tail;
        } else {
            memmove(f, f + 1, sizeof *f * (size_t)(c->n_free - i - 1));
            c->n_free--;
        }
        return true;
    }
    return false;
}

rp_status vk_mem_alloc(vk_be *v, VkDeviceSize bytes, bool host, vk_alloc *out) {
    memset(out, 0, sizeof *out);
    bytes = rp_align_up(bytes ? bytes : 4, 16);
    const VkDeviceSize align = RP_MAX(v->align, (VkDeviceSize)256);
    if (bytes > v->max_alloc)
        return rp_fail(
            RP_ERR_NOMEM, "vulkan: %llu bytes in one allocation is more than %s allows (%llu)",
            (unsigned long long)bytes, v->props.deviceName, (unsigned long long)v->max_alloc);
    for (int i = 0; i < v->n_chunks; i++)
        if (v->chunks[i]->host == host && chunk_take(v->chunks[i], bytes, align, out)) return RP_OK;
    vk_chunk *c = NULL;
    rp_status s = chunk_new(v, RP_MAX(bytes, v->chunk_bytes), host, &c);
    if (s) return s;
    RP_ASSERT(chunk_take(c, bytes, align, out));
    return RP_OK;
}

void vk_mem_free(vk_be *v, vk_alloc *a) {
    vk_chunk *c = a->chunk;
    if (!c) return;
    int i = 0;
    while (i < c->n_free && c->free_list[i].off < a->off) i++;
    const bool join_prev = i > 0 && c->free_list[i - 1].off + c->free_list[i - 1].size == a->off;
    const bool join_next = i < c->n_free && a->off + a->size == c->free_list[i].off;
    if (join_prev && join_next) {
        c->free_list[i - 1].size += a->size + c->free_list[i].size;
        memmove(&c->free_list[i], &c->free_list[i + 1],
                sizeof *c->free_list * (size_t)(c->n_free - i - 1));
        c->n_free--;
    } else if (join_prev) {
        c->free_list[i - 1].size += a->size;
    } else if (join_next) {
        c->free_list[i].off = a->off;
        c->free_list[i].size += a->size;
    } else {
        if (c->n_free == c->cap_free) {
            vk_range *p = realloc(c->free_list, sizeof *p * (size_t)c->cap_free * 2);
            RP_ASSERT(p); /* a lost range would only leak device memory; stop instead */
            c->free_list = p;
            c->cap_free *= 2;
        }
        memmove(&c->free_list[i + 1], &c->free_list[i],
                sizeof *c->free_list * (size_t)(c->n_free - i));
        c->free_list[i] = (vk_range){a->off, a->size};
        c->n_free++;
    }
    c->used -= a->size;
    memset(a, 0, sizeof *a);
    if (c->used == 0) { /* give an empty chunk back */
        for (int k = 0; k < v->n_chunks; k++)
            if (v->chunks[k] == c) {
                v->chunks[k] = v->chunks[--v->n_chunks];
                break;
            }
        chunk_destroy(v, c);
    }
}

VkDeviceSize vk_window_max(const vk_be *v) {
    return v->max_binding - v->align - 8;
}

vk_bind vk_window(const vk_be *v, const vk_alloc *a, VkDeviceSize lo, VkDeviceSize hi) {
    RP_ASSERT(lo <= hi && hi <= a->size && hi - lo <= vk_window_max(v));
    const VkDeviceSize start = a->off + lo, base = start / v->align * v->align;
    VkDeviceSize end = rp_align_up(a->off + hi, 4) + 4;
    end = RP_MIN(end, a->off + a->size);
    end = RP_MAX(end, base + 4);
    if (end > a->chunk->size) end = a->chunk->size;
    vk_bind b = {a->chunk->buf, base, end - base, (uint32_t)(start - base)};
    return b;
}

/* ---- batch recording -------------------------------------------------------------- */

void vk_latch(vk_be *v, rp_status s) {
    if (s && !v->err) v->err = s;
}

bool vk_begin(vk_be *v) {
    if (v->err) return false;
    if (v->recording) return true;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkResult r = v->f.vkBeginCommandBuffer(v->cb, &bi);
    if (r) {
        vk_latch(v, vk_fail(r, "vkBeginCommandBuffer"));
        return false;
    }
    v->recording = true;
    v->dirty = false;
    v->n_acc = 0;
    return true;
}

void vk_barrier(vk_be *v) {
    if (!v->recording || !v->dirty) return;
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    const VkPipelineStageFlags st =
        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    v->f.vkCmdPipelineBarrier(v->cb, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
    v->dirty = false;
    v->n_acc = 0;
}

/* whether [lo, hi) of buf conflicts with an access since the last barrier */
static bool conflicts(const vk_be *v, VkBuffer buf, VkDeviceSize lo, VkDeviceSize hi, bool write) {
    for (int i = 0; i < v->n_acc; i++) {
        const vk_access *a = &v->acc[i];
        if (a->buf == buf && lo < a->hi && a->lo < hi && (write || a->write)) return true;
    }
    return false;
}

static void record_access(vk_be *v, VkBuffer buf, VkDeviceSize lo, VkDeviceSize hi, bool write) {
    if (v->n_acc == (int)RP_ARRAY_LEN(v->acc)) vk_barrier(v);
    v->acc[v->n_acc++] = (vk_access){buf, lo, hi, write};
}

static VkPipeline get_pipeline(vk_be *v, int shader, const uint32_t *spec, int n_spec) {
    uint32_t key[4] = {0, 0, 0, 0};
    for (int i = 0; i < n_spec && i < 4; i++) key[i] = spec[i];
    for (int i = 0; i < v->n_pipes; i++)
        if (v->pipes[i].shader == shader && !memcmp(v->pipes[i].spec, key, sizeof key))
            return v->pipes[i].pipe;
    VkResult r;
    if (!v->modules[shader]) {
        VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                       .codeSize = rp_vk_shaders[shader].words * 4,
                                       .pCode = rp_vk_shaders[shader].code};
        if ((r = v->f.vkCreateShaderModule(v->dev, &mi, NULL, &v->modules[shader]))) {
            vk_latch(v, vk_fail(r, "vkCreateShaderModule"));
            return VK_NULL_HANDLE;
        }
    }
    VkSpecializationMapEntry me[4];
    for (int i = 0; i < 4; i++)
        me[i] = (VkSpecializationMapEntry){(uint32_t)i, (uint32_t)(4 * i), 4};
    VkSpecializationInfo si = {.mapEntryCount = (uint32_t)RP_MIN(n_spec, 4),
                               .pMapEntries = me,
                               .dataSize = (size_t)RP_MIN(n_spec, 4) * 4,
                               .pData = key};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = v->modules[shader],
                  .pName = "main",
                  .pSpecializationInfo = n_spec ? &si : NULL},
        .layout = v->layout};
    VkPipeline p;
    if ((r = v->f.vkCreateComputePipelines(v->dev, VK_NULL_HANDLE, 1, &ci, NULL, &p))) {
        vk_latch(v, rp_fail_prefix(vk_fail(r, "vkCreateComputePipelines"), "shader %s",
                                   rp_vk_shaders[shader].name));
        return VK_NULL_HANDLE;
    }
    if (v->n_pipes == v->cap_pipes) {
        int cap = v->cap_pipes ? 2 * v->cap_pipes : 64;
        vk_pipe *q = rp_realloc(v->pipes, (size_t)cap * sizeof *q, "vulkan pipelines");
        if (!q) {
            v->f.vkDestroyPipeline(v->dev, p, NULL);
            vk_latch(v, RP_ERR_NOMEM);
            return VK_NULL_HANDLE;
        }
        v->pipes = q;
        v->cap_pipes = cap;
    }
    v->pipes[v->n_pipes].shader = shader;
    memcpy(v->pipes[v->n_pipes].spec, key, sizeof key);
    v->pipes[v->n_pipes++].pipe = p;
    return p;
}

static VkDescriptorSet alloc_set(vk_be *v) {
    for (;;) {
        if (v->pool_cur < v->n_pools) {
            VkDescriptorSetAllocateInfo ai = {.sType =
                                                  VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                              .descriptorPool = v->pools[v->pool_cur],
                                              .descriptorSetCount = 1,
                                              .pSetLayouts = &v->dsl};
            VkDescriptorSet set;
            VkResult r = v->f.vkAllocateDescriptorSets(v->dev, &ai, &set);
            if (r == VK_SUCCESS) return set;
            if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) {
                vk_latch(v, vk_fail(r, "vkAllocateDescriptorSets"));
                return VK_NULL_HANDLE;
            }
            v->pool_cur++;
            continue;
        }
        if (v->n_pools == v->cap_pools) {
            int cap = v->cap_pools ? 2 * v->cap_pools : 8;
            VkDescriptorPool *p = rp_realloc(v->pools, (size_t)cap * sizeof *p, "vulkan pools");
            if (!p) {
                vk_latch(v, RP_ERR_NOMEM);
                return VK_NULL_HANDLE;
            }
            v->pools = p;
            v->cap_pools = cap;
        }
        const uint32_t sets = 512;
        VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, sets * VK_NB};
        VkDescriptorPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                         .maxSets = sets,
                                         .poolSizeCount = 1,
                                         .pPoolSizes = &ps};
        VkResult r = v->f.vkCreateDescriptorPool(v->dev, &pi, NULL, &v->pools[v->n_pools]);
        if (r) {
            vk_latch(v, vk_fail(r, "vkCreateDescriptorPool"));
            return VK_NULL_HANDLE;
        }
        v->pool_cur = v->n_pools++;
    }
}

void vk_dispatch(vk_be *v, int shader, const uint32_t *spec, int n_spec, const vk_bind *b, int nb,
                 uint32_t writes, const void *push, size_t push_bytes, uint32_t gx, uint32_t gy,
                 uint32_t gz) {
    if (!vk_begin(v)) return;
    if (shader < 0) {
        vk_latch(v, rp_fail(RP_ERR_INTERNAL, "vulkan: a kernel is missing from this build"));
        return;
    }
    if (!gx || !gy || !gz) return;
    if (gx > v->max_groups[0] || gy > v->max_groups[1] || gz > v->max_groups[2]) {
        vk_latch(v, rp_fail(RP_ERR_INTERNAL,
                            "vulkan: %s: a grid of %u x %u x %u workgroups exceeds the device's "
                            "%u x %u x %u",
                            rp_vk_shaders[shader].name, gx, gy, gz, v->max_groups[0],
                            v->max_groups[1], v->max_groups[2]));
        return;
    }
    RP_ASSERT(nb <= VK_NB && push_bytes <= VK_PUSH);
    VkPipeline p = get_pipeline(v, shader, spec, n_spec);
    VkDescriptorSet set = p ? alloc_set(v) : VK_NULL_HANDLE;
    if (!set) return;
    VkDescriptorBufferInfo bi[VK_NB];
    VkWriteDescriptorSet w[VK_NB];
    for (int i = 0; i < VK_NB; i++) {
        if (i < nb && b[i].buf) {
            RP_ASSERT(b[i].range <= v->max_binding && b[i].off % v->align == 0);
            bi[i] = (VkDescriptorBufferInfo){b[i].buf, b[i].off, b[i].range};
        } else {
            bi[i] = (VkDescriptorBufferInfo){v->dummy.chunk->buf, v->dummy.off, v->dummy.size};
        }
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set,
                                      .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    v->f.vkUpdateDescriptorSets(v->dev, VK_NB, w, 0, NULL);
    /* a barrier first when this dispatch conflicts with what came since the last */
    bool hazard = false;
    for (int i = 0; i < nb && !hazard; i++)
        hazard =
            b[i].buf && conflicts(v, b[i].buf, b[i].off, b[i].off + b[i].range, writes >> i & 1u);
    if (hazard) vk_barrier(v);
    for (int i = 0; i < nb; i++)
        if (b[i].buf) record_access(v, b[i].buf, b[i].off, b[i].off + b[i].range, writes >> i & 1u);
    v->f.vkCmdBindPipeline(v->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    v->f.vkCmdBindDescriptorSets(v->cb, VK_PIPELINE_BIND_POINT_COMPUTE, v->layout, 0, 1, &set, 0,
                                 NULL);
    uint8_t pc[VK_PUSH] = {0};
    memcpy(pc, push, push_bytes);
    v->f.vkCmdPushConstants(v->cb, v->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, VK_PUSH, pc);
    v->f.vkCmdDispatch(v->cb, gx, gy, gz);
    v->dirty = true;
}

void vk_copy(vk_be *v, VkBuffer src, VkBuffer dst, const VkBufferCopy *regions, uint32_t n) {
    if (!vk_begin(v) || !n) return;
    bool hazard = false;
    for (uint32_t i = 0; i < n && !hazard; i++)
        hazard =
            conflicts(v, dst, regions[i].dstOffset, regions[i].dstOffset + regions[i].size, true) ||
            conflicts(v, src, regions[i].srcOffset, regions[i].srcOffset + regions[i].size, false);
    if (hazard) vk_barrier(v);
    for (uint32_t i = 0; i < n; i++) {
        record_access(v, dst, regions[i].dstOffset, regions[i].dstOffset + regions[i].size, true);
        record_access(v, src, regions[i].srcOffset, regions[i].srcOffset + regions[i].size, false);
    }
    v->f.vkCmdCopyBuffer(v->cb, src, dst, n, regions);
    v->dirty = true;
}

/* ---- arenas and scratch ------------------------------------------------------------ */

static bool arena_take(vk_be *v, vk_arena *ar, size_t bytes, vk_alloc *out) {
    bytes = rp_align_up(bytes ? bytes : 4, 16);
    const VkDeviceSize align = RP_MAX(v->align, (VkDeviceSize)16);
    for (;;) {
        if (ar->cur < ar->n_blocks) {
            vk_alloc *blk = &ar->blocks[ar->cur];
            const VkDeviceSize start = rp_align_up(ar->used, align);
            if (start + bytes <= blk->size) {
                *out = (vk_alloc){blk->chunk, blk->off + start, bytes};
                ar->used = start + bytes;
                return true;
            }
            ar->cur++;
            ar->used = 0;
            continue;
        }
        if (ar->n_blocks == ar->cap_blocks) {
            int cap = ar->cap_blocks ? 2 * ar->cap_blocks : 8;
            vk_alloc *p = rp_realloc(ar->blocks, (size_t)cap * sizeof *p, "vulkan arena");
            if (!p) {
                vk_latch(v, RP_ERR_NOMEM);
                return false;
            }
            ar->blocks = p;
            ar->cap_blocks = cap;
        }
        rp_status s = vk_mem_alloc(v, RP_MAX((VkDeviceSize)bytes, ar->block), true,
                                   &ar->blocks[ar->n_blocks]);
        if (s) {
            vk_latch(v, s);
            return false;
        }
        ar->cur = ar->n_blocks++;
        ar->used = 0;
    }
}

/* after a batch: keep the first block (of the normal size), give the rest back */
static void arena_reset(vk_be *v, vk_arena *ar) {
    int keep = 0;
    for (int i = 0; i < ar->n_blocks; i++) {
        if (keep == 0 && ar->blocks[i].size == rp_align_up(ar->block, 16))
            ar->blocks[keep++] = ar->blocks[i];
        else
            vk_mem_free(v, &ar->blocks[i]);
    }
    ar->n_blocks = keep;
    ar->cur = 0;
    ar->used = 0;
}

static void arena_free(vk_be *v, vk_arena *ar) {
    for (int i = 0; i < ar->n_blocks; i++) vk_mem_free(v, &ar->blocks[i]);
    free(ar->blocks);
    memset(ar, 0, sizeof *ar);
}

static void *amap(const vk_alloc *a) {
    return (char *)a->chunk->map + a->off;
}

bool vk_upload_bytes(vk_be *v, const void *src, size_t bytes, vk_bind *b, vk_alloc *where) {
    if (v->err) return false;
    /* positions and sequences are the same for every step of a micro-batch */
    for (int i = 0; i < 4 && !where; i++)
        if (v->recent[i].src == src && v->recent[i].bytes == bytes && v->recent[i].copy &&
            !memcmp(v->recent[i].copy, src, bytes)) {
            *b = v->recent[i].b;
            return true;
        }
    vk_alloc a;
    if (!arena_take(v, &v->up, bytes, &a)) return false;
    memcpy(amap(&a), src, bytes);
    if (where) *where = a;
    if (b) {
        if (bytes > vk_window_max(v)) {
            vk_latch(v,
                     rp_fail(RP_ERR_UNSUPPORTED,
                             "vulkan: an op input of %zu bytes exceeds the binding range", bytes));
            return false;
        }
        *b = vk_window(v, &a, 0, bytes);
        if (!where) {
            int k = v->recent_next++ % 4;
            v->recent[k].src = src;
            v->recent[k].bytes = bytes;
            v->recent[k].b = *b;
            v->recent[k].copy = amap(&a);
        }
    }
    return true;
}

bool vk_download(vk_be *v, void *dst, size_t bytes, vk_alloc *where) {
    if (v->err) return false;
    if (!arena_take(v, &v->down, bytes, where)) return false;
    if (v->n_pending == v->cap_pending) {
        int cap = v->cap_pending ? 2 * v->cap_pending : 16;
        vk_pending *p = rp_realloc(v->pending, (size_t)cap * sizeof *p, "vulkan readbacks");
        if (!p) {
            vk_latch(v, RP_ERR_NOMEM);
            return false;
        }
        v->pending = p;
        v->cap_pending = cap;
    }
    v->pending[v->n_pending++] = (vk_pending){dst, amap(where), bytes};
    return true;
}

static void buf_destroy(vk_be *v, vk_buf *b) {
    if (!b) return;
    v->base.stats.buf_bytes -= b->base.size;
    vk_mem_free(v, &b->a);
    free(b);
}

vk_buf *vk_scratch(vk_be *v, int slot, size_t bytes) {
    vk_buf *b = v->scr[slot];
    if (b && b->base.size >= bytes) return b;
    if (v->err) return NULL;
    if (b) { /* still used by recorded commands: free after the fence */
        if (v->n_retired == v->cap_retired) {
            int cap = v->cap_retired ? 2 * v->cap_retired : 8;
            vk_buf **p = rp_realloc(v->retired, (size_t)cap * sizeof *p, "vulkan scratch");
            if (!p) {
                vk_latch(v, RP_ERR_NOMEM);
                return NULL;
            }
            v->retired = p;
            v->cap_retired = cap;
        }
        v->retired[v->n_retired++] = b;
        v->scr[slot] = NULL;
    }
    vk_buf *n = rp_calloc(1, sizeof *n, "vulkan scratch");
    if (!n) {
        vk_latch(v, RP_ERR_NOMEM);
        return NULL;
    }
    const size_t size = (size_t)rp_align_up(RP_MAX(bytes, (size_t)1 << 16), 1 << 16);
    rp_status s = vk_mem_alloc(v, size, false, &n->a);
    if (s) {
        free(n);
        vk_latch(v, s);
        return NULL;
    }
    n->base.size = size;
    v->base.stats.buf_bytes += size;
    v->scr[slot] = n;
    return n;
}

/* ---- immediate transfers ----------------------------------------------------------- */

static rp_status submit_now(vk_be *v, VkCommandBuffer cb, VkFence fence) {
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
    VkResult r = v->f.vkQueueSubmit(v->queue, 1, &si, fence);
    if (r) return vk_fail(r, "vkQueueSubmit");
    r = v->f.vkWaitForFences(v->dev, 1, &fence, VK_TRUE, UINT64_MAX);
    if (r) return vk_fail(r, "vkWaitForFences");
    v->f.vkResetFences(v->dev, 1, &fence);
    return RP_OK;
}

rp_status vk_upload_now(vk_be *v, const vk_alloc *dst, VkDeviceSize off, const void *src,
                        size_t bytes) {
    if (dst->chunk->map) {
        memcpy((char *)dst->chunk->map + dst->off + off, src, bytes);
        return RP_OK;
    }
    /* through a staging block, a piece at a time */
    const size_t piece = 16u << 20;
    vk_alloc st;
    rp_status s = vk_mem_alloc(v, RP_MIN(bytes, piece), true, &st);
    if (s) return s;
    for (size_t done = 0; done < bytes && !s; done += piece) {
        const size_t n = RP_MIN(piece, bytes - done);
        memcpy(amap(&st), (const char *)src + done, n);
        VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                       .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
        VkResult r = v->f.vkBeginCommandBuffer(v->cb_now, &bi);
        if (r) {
            s = vk_fail(r, "vkBeginCommandBuffer");
            break;
        }
        VkBufferCopy c = {st.off, dst->off + off + done, n};
        v->f.vkCmdCopyBuffer(v->cb_now, st.chunk->buf, dst->chunk->buf, 1, &c);
        if ((r = v->f.vkEndCommandBuffer(v->cb_now))) {
            s = vk_fail(r, "vkEndCommandBuffer");
            break;
        }
        s = submit_now(v, v->cb_now, v->fence_now);
        v->f.vkResetCommandBuffer(v->cb_now, 0);
    }
    vk_mem_free(v, &st);
    return s;
}

/* ---- sync --------------------------------------------------------------------------- */

static void batch_reset(vk_be *v) {
    for (int i = 0; i < v->n_pools; i++) v->f.vkResetDescriptorPool(v->dev, v->pools[i], 0);
    v->pool_cur = 0;
    arena_reset(v, &v->up);
    arena_reset(v, &v->down);
    for (int i = 0; i < v->n_retired; i++) buf_destroy(v, v->retired[i]);
    v->n_retired = 0;
    v->n_pending = 0;
    memset(v->recent, 0, sizeof v->recent);
    v->recording = false;
    v->dirty = false;
    v->n_acc = 0;
}

rp_status vk_sync(vk_be *v) {
    rp_status s = v->err;
    if (v->recording) {
        VkResult r = v->f.vkEndCommandBuffer(v->cb);
        if (r && !s) s = vk_fail(r, "vkEndCommandBuffer");
        if (!s) s = submit_now(v, v->cb, v->fence);
        v->f.vkResetCommandBuffer(v->cb, 0);
    }
    if (!s)
        for (int i = 0; i < v->n_pending; i++)
            memcpy(v->pending[i].dst, v->pending[i].src, v->pending[i].bytes);
    batch_reset(v);
    v->err = RP_OK;
    return s;
}

/* ---- teardown ----------------------------------------------------------------------- */

void vk_device_close(vk_be *v) {
    if (v->dev) {
        v->f.vkDeviceWaitIdle(v->dev);
        if (v->recording) v->f.vkEndCommandBuffer(v->cb);
        v->recording = false;
        batch_reset(v);
        arena_free(v, &v->up);
        arena_free(v, &v->down);
        for (int i = 0; i < VK_SCR_COUNT; i++) buf_destroy(v, v->scr[i]);
        for (int i = 0; i < v->n_wlist; i++) {
            vk_weight *w = v->wlist[i];
            for (int k = 0; k < w->n_parts; k++) vk_mem_free(v, &w->parts[k].a);
            free(w->parts);
            free(w);
        }
        free(v->wlist);
        rp_ptrmap_free(&v->weights);
        vk_mem_free(v, &v->dummy);
        while (v->n_chunks) chunk_destroy(v, v->chunks[--v->n_chunks]);
        free(v->chunks);
        for (int i = 0; i < v->n_pipes; i++) v->f.vkDestroyPipeline(v->dev, v->pipes[i].pipe, NULL);
        free(v->pipes);
        for (int i = 0; v->modules && i < rp_vk_n_shaders; i++)
            if (v->modules[i]) v->f.vkDestroyShaderModule(v->dev, v->modules[i], NULL);
        free(v->modules);
        for (int i = 0; i < v->n_pools; i++)
            v->f.vkDestroyDescriptorPool(v->dev, v->pools[i], NULL);
        free(v->pools);
        free(v->pending);
        free(v->retired);
        if (v->layout) v->f.vkDestroyPipelineLayout(v->dev, v->layout, NULL);
        if (v->dsl) v->f.vkDestroyDescriptorSetLayout(v->dev, v->dsl, NULL);
        if (v->fence) v->f.vkDestroyFence(v->dev, v->fence, NULL);
        if (v->fence_now) v->f.vkDestroyFence(v->dev, v->fence_now, NULL);
        if (v->cmd_pool) v->f.vkDestroyCommandPool(v->dev, v->cmd_pool, NULL);
        v->f.vkDestroyDevice(v->dev, NULL);
    }
    if (v->inst) v->f.vkDestroyInstance(v->inst, NULL);
}
