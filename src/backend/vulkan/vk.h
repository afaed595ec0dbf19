/* The Vulkan backend's internals: the loader's function table, the device
 * (memory chunks with sub-allocation, per-batch arenas, descriptor pools,
 * pipelines, the command buffer of the micro-batch) and the helpers the ops
 * record with (src/backend/vulkan/vk_ops.c).
 *
 * The loader (libvulkan.so.1) is opened at run time, so a binary built with
 * Vulkan still starts where there is none; the headers come from
 * libvulkan-dev and are used without prototypes. */
#ifndef RP_VK_H
#define RP_VK_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "backend/backend.h"
#include "base/ptrmap.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VK_FNS_INSTANCE(X)                                                                         \
    X(vkDestroyInstance)                                                                           \
    X(vkEnumeratePhysicalDevices)                                                                  \
    X(vkGetPhysicalDeviceProperties)                                                               \
    X(vkGetPhysicalDeviceProperties2)                                                              \
    X(vkGetPhysicalDeviceMemoryProperties)                                                         \
    X(vkGetPhysicalDeviceQueueFamilyProperties)                                                    \
    X(vkCreateDevice)                                                                              \
    X(vkGetDeviceProcAddr)

#define VK_FNS_DEVICE(X)                                                                           \
    X(vkDestroyDevice)                                                                             \
    X(vkGetDeviceQueue)                                                                            \
    X(vkAllocateMemory)                                                                            \
    X(vkFreeMemory)                                                                                \
    X(vkMapMemory)                                                                                 \
    X(vkUnmapMemory)                                                                               \
    X(vkCreateBuffer)                                                                              \
    X(vkDestroyBuffer)                                                                             \
    X(vkGetBufferMemoryRequirements)                                                               \
    X(vkBindBufferMemory)                                                                          \
    X(vkCreateShaderModule)                                                                        \
    X(vkDestroyShaderModule)                                                                       \
    X(vkCreateDescriptorSetLayout)                                                                 \
    X(vkDestroyDescriptorSetLayout)                                                                \
    X(vkCreatePipelineLayout)                                                                      \
    X(vkDestroyPipelineLayout)                                                                     \
    X(vkCreateComputePipelines)                                                                    \
    X(vkDestroyPipeline)                                                                           \
    X(vkCreateDescriptorPool)                                                                      \
    X(vkDestroyDescriptorPool)                                                                     \
    X(vkResetDescriptorPool)                                                                       \
    X(vkAllocateDescriptorSets)                                                                    \
    X(vkUpdateDescriptorSets)                                                                      \
    X(vkCreateCommandPool)                                                                         \
    X(vkDestroyCommandPool)                                                                        \
    X(vkAllocateCommandBuffers)                                                                    \
    X(vkResetCommandBuffer)                                                                        \
    X(vkBeginCommandBuffer)                                                                        \
    X(vkEndCommandBuffer)                                                                          \
    X(vkCmdBindPipeline)                                                                           \
    X(vkCmdBindDescriptorSets)                                                                     \
    X(vkCmdPushConstants)                                                                          \
    X(vkCmdDispatch)                                                                               \
    X(vkCmdPipelineBarrier)                                                                        \
    X(vkCmdCopyBuffer)                                                                             \
    X(vkCreateFence)                                                                               \
    X(vkDestroyFence)                                                                              \
    X(vkResetFences)                                                                               \
    X(vkWaitForFences)                                                                             \
    X(vkQueueSubmit)                                                                               \
    X(vkDeviceWaitIdle)

typedef struct vk_fns {
#define X(n) PFN_##n n;
    VK_FNS_INSTANCE(X) VK_FNS_DEVICE(X)
#undef X
} vk_fns;

/* The loader's global entry points (opened once per process). */
typedef struct vk_loader {
    PFN_vkGetInstanceProcAddr get_instance_proc;
    PFN_vkCreateInstance create_instance;
    PFN_vkEnumerateInstanceVersion enumerate_version; /* NULL on a 1.0 loader */
} vk_loader;

/* RP_ERR_UNSUPPORTED naming the package when there is no loader. */
rp_status vk_loader_get(const vk_loader **out);
/* An instance for listing or running (Vulkan 1.1), its functions in f. */
rp_status vk_instance_new(const vk_loader *L, VkInstance *inst, vk_fns *f);
const char *vk_result_str(VkResult r);

/* ---- the device's memory ------------------------------------------------------ */

/* A block of device memory with one buffer over all of it, sub-allocated. */
typedef struct vk_range {
    VkDeviceSize off, size;
} vk_range;

typedef struct vk_chunk {
    VkDeviceMemory mem;
    VkBuffer buf;
    VkDeviceSize size, used;
    void *map;           /* host pointer when the memory is mappable */
    bool host;           /* from the host-visible (staging) type */
    vk_range *free_list; /* sorted by offset, coalesced */
    int n_free, cap_free;
} vk_chunk;

typedef struct vk_alloc {
    vk_chunk *chunk;
    VkDeviceSize off, size;
} vk_alloc;

/* A binding window: (buffer, offset aligned for the device, range) and the
 * bytes from the window's start to what the caller asked for. */
typedef struct vk_bind {
    VkBuffer buf;
    VkDeviceSize off, range;
    uint32_t shift;
} vk_bind;

/* An uploaded weight: its rows in parts, each within one allocation. */
typedef struct vk_part {
    vk_alloc a;
    int64_t row0, rows;
} vk_part;

typedef struct vk_weight {
    int type;
    int64_t ne0, rows;
    size_t row_bytes;
    vk_part *parts;
    int n_parts;
} vk_weight;

typedef struct vk_buf {
    rp_bbuf base;
    vk_alloc a;
} vk_buf;

typedef struct vk_kv {
    rp_bkv base;
    vk_alloc *k, *v; /* [n_seq] */
} vk_kv;

/* host copies done after the fence: dst <- src (a mapped arena) */
typedef struct vk_pending {
    void *dst;
    const void *src;
    size_t bytes;
} vk_pending;

/* Per-batch bump allocation over host-visible blocks. */
typedef struct vk_arena {
    vk_alloc *blocks;
    int n_blocks, cap_blocks;
    int cur;            /* block being filled */
    VkDeviceSize used;  /* in blocks[cur] */
    VkDeviceSize block; /* bytes of a normal block */
} vk_arena;

/* a buffer range accessed since the last barrier */
typedef struct vk_access {
    VkBuffer buf;
    VkDeviceSize lo, hi;
    bool write;
} vk_access;

typedef struct vk_pipe {
    int shader;
    uint32_t spec[4];
    VkPipeline pipe;
} vk_pipe;

enum { VK_NB = 8 };     /* storage bindings of every pipeline */
enum { VK_PUSH = 128 }; /* push constant bytes */

/* scratch buffers ops reuse within a batch */
enum { VK_SCR_ACT = 0, VK_SCR_LOGITS, VK_SCR_GATHER, VK_SCR_COUNT };

/* shader indices by kind and weight type, -1 when absent */
typedef struct vk_shader_ids {
    int mul_mv[RP_TYPE_COUNT], mul_mv_sg[RP_TYPE_COUNT], mul_mm[RP_TYPE_COUNT];
    int get_rows[RP_TYPE_COUNT];
    int quant[RP_TYPE_COUNT];      /* by vec_dot_type: Q8_0, Q8_1, Q8_K */
    int attn[2][2], attn_sg[2][2]; /* [k f16][v f16] */
    int norm, norm_sg, rope, kv_write, eltwise;
} vk_shader_ids;

typedef struct vk_be {
    rp_backend base;
    vk_fns f;
    VkInstance inst;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties memp;
    uint32_t type_dev, type_host; /* memory types: device-local, host-visible coherent */
    bool dev_mappable;            /* device-local memory is host-visible: uploads map it */
    /* limits in use */
    VkDeviceSize max_binding, align, max_alloc, chunk_bytes;
    VkDeviceSize max_part; /* the largest allocation one part of a weight takes */
    uint32_t max_groups[3];
    bool subgroups;
    uint32_t subgroup_size;
    /* memory */
    vk_chunk **chunks;
    int n_chunks, cap_chunks;
    vk_arena up;               /* uploads and small op inputs of the batch */
    vk_arena down;             /* readbacks of the batch */
    vk_alloc dummy;            /* bound to unused slots */
    vk_buf *scr[VK_SCR_COUNT]; /* reused scratch */
    vk_buf **retired;          /* scratch replaced during the batch: freed at sync */
    int n_retired, cap_retired;
    rp_ptrmap weights; /* t->data -> vk_weight */
    vk_weight **wlist;
    int n_wlist, cap_wlist;
    /* pipelines */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    vk_pipe *pipes;
    int n_pipes, cap_pipes;
    VkShaderModule *modules; /* [n shaders], created on first use */
    vk_shader_ids sh;
    VkDescriptorPool *pools;
    int n_pools, cap_pools, pool_cur;
    /* the batch */
    VkCommandPool cmd_pool;
    VkCommandBuffer cb, cb_now; /* the batch's; immediate uploads' */
    VkFence fence, fence_now;
    bool recording;
    bool dirty;         /* commands since the last barrier */
    vk_access acc[256]; /* what they access: a barrier goes in only on a hazard */
    int n_acc;
    vk_pending *pending;
    int n_pending, cap_pending;
    /* the last small uploads, reused while equal (positions of every step) */
    struct {
        const void *src;
        size_t bytes;
        vk_bind b;
        const void *copy;
    } recent[4];
    int recent_next;
    rp_status err;
} vk_be;

/* ---- device layer (vk_device.c) ---------------------------------------------- */

rp_status vk_device_open(vk_be *v, int index, const rp_backend_params *p);
void vk_device_close(vk_be *v);

rp_status vk_mem_alloc(vk_be *v, VkDeviceSize bytes, bool host, vk_alloc *out);
void vk_mem_free(vk_be *v, vk_alloc *a);

/* A window over bytes [lo, hi) of allocation a (hi - lo <= v->max_binding -
 * v->align); the range reaches a little past hi (up to the next 4 bytes and
 * one word more, within the allocation) so byte readers may load whole words. */
vk_bind vk_window(const vk_be *v, const vk_alloc *a, VkDeviceSize lo, VkDeviceSize hi);
/* The largest span a window may cover. */
VkDeviceSize vk_window_max(const vk_be *v);

/* Latches the first failure (the op's message kept for sync). */
void vk_latch(vk_be *v, rp_status s);
/* Starts recording if needed; false when a failure is latched. */
bool vk_begin(vk_be *v);
/* A full memory barrier between what was recorded and what follows. Dispatches
 * and copies put one in themselves when they read what was written since the
 * last one, or write what was read or written (by binding ranges). */
void vk_barrier(vk_be *v);
/* Records a dispatch of shader `shader` with spec constants spec[0..n_spec)
 * (spec[0] is the workgroup size), binds b[0..nb) to bindings 0.. (bit i of
 * writes: the shader writes binding i) and pushes push_bytes of push
 * constants. */
void vk_dispatch(vk_be *v, int shader, const uint32_t *spec, int n_spec, const vk_bind *b, int nb,
                 uint32_t writes, const void *push, size_t push_bytes, uint32_t gx, uint32_t gy,
                 uint32_t gz);
void vk_copy(vk_be *v, VkBuffer src, VkBuffer dst, const VkBufferCopy *regions, uint32_t n);

/* Host bytes copied now into the batch's upload arena: the window over them
 * (small inputs bind it directly) and the arena allocation. */
bool vk_upload_bytes(vk_be *v, const void *src, size_t bytes, vk_bind *b, vk_alloc *where);
/* Arena bytes that sync copies to dst. */
bool vk_download(vk_be *v, void *dst, size_t bytes, vk_alloc *where);
/* Scratch slot of at least bytes for this batch. */
vk_buf *vk_scratch(vk_be *v, int slot, size_t bytes);

/* Immediate copy of host bytes into an allocation (weights at load). */
rp_status vk_upload_now(vk_be *v, const vk_alloc *dst, VkDeviceSize off, const void *src,
                        size_t bytes);

rp_status vk_sync(vk_be *v);

/* ---- shaders (generated from the .comp files under shaders/) ---------------------- */

typedef struct vk_spirv {
    const char *name;
    const uint32_t *code;
    size_t words;
} vk_spirv;

extern const vk_spirv rp_vk_shaders[];
extern const int rp_vk_n_shaders;
int vk_shader_find(const char *name);

/* ---- ops (vk_ops.c) ---------------------------------------------------------------- */

extern const rp_backend_ops rp_vk_ops;

#endif
