/* Where a context's forward runs (rp_context.be) and each plan step's cache
 * there (rp_context.bkv).
 *
 * The CPU: a CPU backend per context over the context's thread pool and
 * attention scratch, its caches wrapping the views rp_state already holds, so
 * checkpoints, sequence copies and state images keep working on them.
 *
 * A device ("vulkan0", ...): one backend per device, opened on first use and
 * kept for the process (pipelines compile once), shared by every context on
 * that device; a model's weights are uploaded once (scan's contexts, a
 * server's plans, a draft context) and leave the device with the model's last
 * context there; each context adds its own caches and scratch. Contexts that
 * share a device are used from one thread at a time (as contexts sharing a
 * thread pool are). The caches live on the device; the host state keeps the
 * sequence lengths (the KV blocks of rp_state are not allocated), so what
 * reads cached K/V on the host (sequence copies, state images) is refused. */
#include "arch/arch.h"
#include "base/util.h"
#include "core/context.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* A device stays open for the process once a context used it (its
 * pipelines compile once); each model on it counts its contexts, and the
 * model's weights leave the device with its last one. */
typedef struct dev_open {
    rp_backend *be;
} dev_open;
typedef struct dev_model {
    const rp_model *m;
    rp_backend *be;
    int refs;
} dev_model;

#define MAX_SHARED 16
static dev_open g_dev[RP_BACKEND_MAX_DEVICES];
static dev_model g_models[MAX_SHARED];
static pthread_mutex_t g_share_mu = PTHREAD_MUTEX_INITIALIZER;

bool rp_ctx_device_is_cpu(const char *d) {
    return !d || !*d || !strcmp(d, "cpu");
}

int rp_ctx_layer_weights(const rp_layer *L, const rp_tensor **out) {
    const rp_tensor *t[] = {L->attn_norm,
                            L->attn_norm_b,
                            L->wq,
                            L->wk,
                            L->wv,
                            L->wo,
                            L->bq,
                            L->bk,
                            L->bv,
                            L->bo,
                            L->q_norm,
                            L->k_norm,
                            L->attn_post_norm,
                            L->ffn_norm,
                            L->ffn_norm_b,
                            L->ffn_gate,
                            L->ffn_up,
                            L->ffn_down,
                            L->ffn_post_norm};
    int n = 0;
    for (size_t i = 0; i < RP_ARRAY_LEN(t); i++)
        if (t[i]) out[n++] = t[i];
    return n;
}

/* every weight of m the device may hold */
static void forget_model(rp_backend *be, const rp_model *m) {
    const rp_tensor *io[] = {m->tok_embd, m->output_norm, m->output_norm_b, m->output};
    for (size_t i = 0; i < RP_ARRAY_LEN(io); i++)
        if (io[i]) rp_be_forget(be, io[i]);
    for (uint64_t i = 0; i < m->n_tensors; i++) rp_be_forget(be, &m->tensors[i]);
    for (int l = 0; l < m->hp.n_layer; l++) {
        const rp_tensor *t[RP_CTX_LAYER_WEIGHTS_MAX];
        const int n = rp_ctx_layer_weights(&m->layers[l], t);
        for (int i = 0; i < n; i++) rp_be_forget(be, t[i]);
    }
}

static rp_status device_get(const char *name, rp_backend **out) {
    char want[32];
    snprintf(want, sizeof want, "%s", strcmp(name, "vulkan") ? name : "vulkan0");
    for (int i = 0; i < RP_BACKEND_MAX_DEVICES; i++)
        if (g_dev[i].be && !strcmp(g_dev[i].be->name, want)) {
            *out = g_dev[i].be;
            return RP_OK;
        }
    for (int i = 0; i < RP_BACKEND_MAX_DEVICES; i++)
        if (!g_dev[i].be) {
            rp_backend_params p = {0};
            rp_status s = rp_backend_open(want, &p, out);
            if (!s) g_dev[i].be = *out;
            return s;
        }
    return rp_fail(RP_ERR_UNSUPPORTED, "device %s: more than %d devices open", want,
                   RP_BACKEND_MAX_DEVICES);
}

/* the device backend `name` for a context of m */
static rp_status share_get(const rp_model *m, const char *name, rp_backend **out) {
    pthread_mutex_lock(&g_share_mu);
    *out = NULL;
    rp_status s = device_get(name, out);
    int slot = -1;
    for (int i = 0; i < MAX_SHARED && !s; i++) {
        if (g_models[i].m == m && g_models[i].be == *out) {
            slot = i;
            break;
        }
        if (!g_models[i].m && slot < 0) slot = i;
    }
    if (!s && slot < 0)
        s = rp_fail(RP_ERR_UNSUPPORTED, "device %s: more than %d models open on devices at once",
                    name, MAX_SHARED);
    if (!s) {
        if (!g_models[slot].m) g_models[slot] = (dev_model){m, *out, 0};
        g_models[slot].refs++;
    }
    pthread_mutex_unlock(&g_share_mu);
    if (s) *out = NULL;
    return s;
}

static void share_put(const rp_model *m, rp_backend *be) {
    pthread_mutex_lock(&g_share_mu);
    for (int i = 0; i < MAX_SHARED; i++)
        if (g_models[i].m == m && g_models[i].be == be && --g_models[i].refs == 0) {
            forget_model(be, m);
            g_models[i] = (dev_model){0};
        }
    pthread_mutex_unlock(&g_share_mu);
}

static rp_bkv_desc step_desc(const rp_context *c, int e) {
    const rp_layer_info *li = &c->model->info[c->plan->src[e]];
    const rp_kv_view *v = rp_ctx_kv(c, e, 0);
    return (rp_bkv_desc){c->n_seq,       li->n_head_kv, v->cap,   li->head_dim_k,
                         li->head_dim_v, v->type_k,     v->type_v};
}

rp_status rp_ctx_dev_init(rp_context *c) {
    const rp_model *m = c->model;
    const char *dev = c->params.device;
    rp_status s;
    if (rp_ctx_device_is_cpu(dev)) {
        rp_backend_params p = {.cc = &c->cc,
                               .attn_scratch = c->attn_scratch,
                               .attn_scratch_per_thread = c->attn_scratch_per_thread};
        if ((s = rp_backend_cpu_new(&p, &c->be))) return s;
    } else {
        if (!m->arch->on_device)
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "device %s: the %s forward runs on the CPU only (the device runs "
                           "llama, qwen2, qwen3, gemma2 and gemma3 so far); use -ngl 0",
                           dev, m->arch->name);
        if (c->deltas)
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "device %s: LoRA adapters and step deltas run on the CPU only so far; "
                           "use -ngl 0",
                           dev);
        if ((s = share_get(m, dev, &c->be))) return s;
        c->on_device = true;
    }
    c->params.device = NULL; /* not owned; rp_context_device names it */
    c->bkv = rp_calloc((size_t)c->plan->n_eff, sizeof *c->bkv, "step caches");
    if (!c->bkv) return RP_ERR_NOMEM;
    for (int e = 0; e < c->plan->n_eff; e++) {
        if (!m->info[c->plan->src[e]].has_kv) continue;
        const rp_bkv_desc d = step_desc(c, e);
        s = c->on_device ? rp_be_kv_new(c->be, &d, &c->bkv[e])
                         : rp_backend_cpu_kv_wrap(c->be, rp_ctx_kv(c, e, 0), &d, &c->bkv[e]);
        if (s)
            return rp_fail_prefix(s, "%s: cache of step %d (source layer %d)", c->be->name, e,
                                  c->plan->src[e]);
    }
    return RP_OK;
}

void rp_ctx_dev_free(rp_context *c) {
    if (!c->be) return;
    for (int e = 0; c->bkv && e < c->plan->n_eff; e++)
        if (c->bkv[e]) rp_be_kv_free(c->be, c->bkv[e]);
    free(c->bkv);
    c->bkv = NULL;
    if (c->on_device)
        share_put(c->model, c->be);
    else
        rp_backend_free(c->be);
    c->be = NULL;
}

rp_status rp_ctx_host_only(const rp_context *c, const char *what) {
    if (!c->on_device) return RP_OK;
    return rp_fail(RP_ERR_UNSUPPORTED, "%s: the context's caches live on %s, not in host memory",
                   what, c->be->name);
}

/* ---- public ------------------------------------------------------------------------- */

rp_status rp_device_list(rp_device_info *devs, int cap, int *n, char *note, size_t note_size) {
    rp_backend_dev d[RP_BACKEND_MAX_DEVICES + 1];
    *n = 0;
    if (cap < 1) return rp_fail(RP_ERR_INVALID_ARG, "device list: no room for any device");
    int k = 0;
    rp_status s = rp_backend_list(d, (int)RP_ARRAY_LEN(d), &k, note, note_size);
    if (s) return s;
    for (int i = 0; i < k && i < cap; i++) {
        _Static_assert(sizeof devs->name == sizeof d->name && sizeof devs->desc == sizeof d->desc,
                       "device names");
        memset(&devs[i], 0, sizeof devs[i]);
        memcpy(devs[i].name, d[i].name, sizeof devs[i].name);
        memcpy(devs[i].desc, d[i].desc, sizeof devs[i].desc);
        devs[i].mem_bytes = d[i].mem_bytes;
        (*n)++;
    }
    return RP_OK;
}

const char *rp_context_device(const rp_context *c) {
    if (c->be) return c->be->name;
    /* a plan-only context opens no backend: the device it was asked for */
    return c->params.device && *c->params.device ? c->params.device : "cpu";
}

static double mib(uint64_t b) {
    return (double)b / 1048576.0;
}

int rp_context_device_report(const rp_context *c, char *buf, size_t size) {
    const rp_backend *be = c->be;
    if (!be) /* a plan-only context: no backend opened */
        return snprintf(buf, size, "device: %s (not opened: the plan only)\n",
                        rp_context_device(c));
    const rp_backend_stats *st = &be->stats;
    rp_buf b = {0};
    rp_buf_printf(&b, "device: %s (%s)", be->name, be->desc);
    if (be->mem_total) rp_buf_printf(&b, ", %.0f MiB of memory", mib(be->mem_total));
    rp_buf_printf(&b, "\n");
    if (c->on_device) {
        uint64_t kv = 0;
        for (int e = 0; e < c->plan->n_eff; e++)
            if (c->bkv[e])
                kv += (rp_bkv_seq_bytes(&c->bkv[e]->d, false) +
                       rp_bkv_seq_bytes(&c->bkv[e]->d, true)) *
                      (uint64_t)c->n_seq;
        rp_buf_printf(&b,
                      "  on the device: weights %.2f MiB (%d tensors, each once) + state %.2f "
                      "MiB (%d steps x %d sequences x %d positions) + scratch %.2f MiB; %.2f "
                      "MiB allocated in all by the device's contexts\n",
                      mib(st->weight_bytes), st->n_weights, mib(kv), c->plan->n_eff, c->n_seq,
                      c->n_ctx, mib(st->buf_bytes), mib(st->device_bytes));
    }
    const int n = (int)b.len;
    if (size) snprintf(buf, size, "%s", b.data ? b.data : "");
    rp_buf_free(&b);
    return n;
}

void rp_context_device_stats_reset(rp_context *c) {
    rp_be_stats_reset(c->be);
}

int rp_context_device_stats(const rp_context *c, int n_tok, char *buf, size_t size) {
    return rp_be_stats_report(c->be, n_tok, buf, size);
}
