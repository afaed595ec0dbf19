/* LoRA adapters and residual scales per plan step (core/delta.h). */
#include "core/delta.h"
#include "arch/arch.h"
#include "base/util.h"
#include "format/gguf.h"
#include "kernels/types.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANK 65536

typedef struct lora_pair {
    int layer;          /* N of blk.N: a source layer, or a plan step (layer_map) */
    char *rest;         /* the base name after "blk.N." */
    const rp_tensor *w; /* the model's base matrix (source-indexed adapters) */
    rp_tensor a, b;     /* F32 copies: a [n_in, r], b [r, n_out] */
} lora_pair;

typedef struct adapter {
    char *path;
    float alpha; /* 0: scale is the user's alone */
    float scale; /* user scale (--lora-scaled) */
    char *layer_map;
    lora_pair *pair;
    int n_pair;
    uint64_t bytes;
} adapter;

typedef struct delta_ent {
    const rp_tensor *w, *a, *b;
    float scale;
} delta_ent;

struct rp_deltas {
    adapter *ad;
    int n_ad, n_global; /* ad[0..n_global) come from params.lora, the rest from plan steps */
    delta_ent **ent;    /* [n_eff] */
    int *n_ent;         /* [n_eff] */
    float *res_scale;   /* [n_eff] */
    int n_eff;
    float *buf_r, *buf_o;
    int max_rank;
    int64_t max_out;
};

static void adapter_free(adapter *ad) {
    for (int i = 0; i < ad->n_pair; i++) {
        free(ad->pair[i].rest);
        free((void *)ad->pair[i].a.data);
        free((void *)ad->pair[i].b.data);
    }
    free(ad->pair);
    free(ad->path);
    free(ad->layer_map);
}

void rp_deltas_free(rp_deltas *d) {
    if (!d) return;
    for (int i = 0; i < d->n_ad; i++) adapter_free(&d->ad[i]);
    free(d->ad);
    for (int e = 0; d->ent && e < d->n_eff; e++) free(d->ent[e]);
    free(d->ent);
    free(d->n_ent);
    free(d->res_scale);
    free(d->buf_r);
    free(d->buf_o);
    free(d);
}

uint64_t rp_deltas_bytes(const rp_deltas *d) {
    uint64_t n = 0;
    for (int i = 0; d && i < d->n_ad; i++) n += d->ad[i].bytes;
    return n;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* An F32 copy of GGUF tensor gt. */
static rp_status copy_f32(const char *path, const rp_gguf_tensor *gt, rp_tensor *t) {
    const rp_type_traits *tt = rp_type_get((int)gt->type);
    if (gt->n_dims != 2 || !tt || !tt->to_float || gt->ne[0] % tt->blck_size)
        return rp_fail(RP_ERR_FORMAT, "%s: tensor '%s' is not a 2-D matrix of a type reprise reads",
                       path, gt->name);
    size_t n = (size_t)gt->ne[0] * (size_t)gt->ne[1];
    float *f = rp_malloc(n * sizeof *f + 1, "adapter tensor");
    if (!f) return RP_ERR_NOMEM;
    tt->to_float(gt->data, f, (int64_t)n);
    memset(t, 0, sizeof *t);
    t->name = gt->name; /* replaced below by a pointer that outlives the file */
    t->type = RP_TYPE_F32;
    t->n_dims = 2;
    t->ne[0] = gt->ne[0];
    t->ne[1] = gt->ne[1];
    t->ne[2] = t->ne[3] = 1;
    t->nbytes = n * sizeof *f;
    t->row_bytes = (size_t)gt->ne[0] * sizeof *f;
    t->data = f;
    return RP_OK;
}

/* The model matrix named name if the forward applies deltas to it (a layer's
 * attention or FFN matrix), else NULL. */
static const rp_tensor *hooked_tensor(const rp_model *m, const char *name, int layer) {
    const rp_tensor *w = NULL;
    for (uint64_t i = 0; i < m->n_tensors && !w; i++)
        if (!strcmp(m->tensors[i].name, name)) w = &m->tensors[i];
    if (!w || layer < 0 || layer >= m->hp.n_trunk) return NULL;
    const rp_layer *L = &m->layers[layer];
    const rp_tensor *slots[] = {L->wq, L->wk, L->wv, L->wo, L->ffn_gate, L->ffn_up, L->ffn_down};
    for (size_t k = 0; k < RP_ARRAY_LEN(slots); k++)
        if (slots[k] == w) return w;
    return NULL;
}

/* Finds blk.{layer}.{rest} in m and checks pair p's shapes against it. */
static rp_status resolve_base(const rp_model *m, const char *path, int layer, lora_pair *p,
                              const rp_tensor **out) {
    char name[256];
    snprintf(name, sizeof name, "blk.%d.%s", layer, p->rest);
    const rp_tensor *w = hooked_tensor(m, name, layer);
    if (!w)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s: LoRA on '%s': the model has no such layer matrix (reprise applies LoRA "
                       "to the layers' attention and FFN matrices, layers 0..%d)",
                       path, name, m->hp.n_trunk - 1);
    if (w->ne[0] != p->a.ne[0] || w->ne[1] != p->b.ne[1])
        return rp_fail(RP_ERR_FORMAT,
                       "%s: '%s.lora_a' [%" PRId64 ", %" PRId64 "] and '.lora_b' [%" PRId64
                       ", %" PRId64 "] do not fit the model's [%" PRId64 ", %" PRId64
                       "] (an adapter for another base model?)",
                       path, name, p->a.ne[0], p->a.ne[1], p->b.ne[0], p->b.ne[1], w->ne[0],
                       w->ne[1]);
    *out = w;
    return RP_OK;
}

/* Reads one pair: gt_a is "<base>.lora_a". */
static rp_status read_pair(const rp_gguf *g, const char *path, const rp_gguf_tensor *gt_a,
                           lora_pair *p) {
    size_t len = strlen(gt_a->name) - strlen(".lora_a");
    char base[256], bname[272];
    if (len >= sizeof base) return rp_fail(RP_ERR_FORMAT, "%s: tensor name too long", path);
    memcpy(base, gt_a->name, len);
    base[len] = 0;
    snprintf(bname, sizeof bname, "%s.lora_b", base);
    const rp_gguf_tensor *gt_b = rp_gguf_find_tensor(g, bname);
    if (!gt_b) return rp_fail(RP_ERR_FORMAT, "%s: '%s' has no '%s'", path, gt_a->name, bname);
    int layer = -1, off = 0;
    if (sscanf(base, "blk.%d.%n", &layer, &off) != 1 || off == 0 || layer < 0)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s: LoRA on '%s': reprise applies LoRA to the layers' attention and FFN "
                       "matrices (blk.N.*) only",
                       path, base);
    p->layer = layer;
    if (!(p->rest = rp_strdup(base + off))) return RP_ERR_NOMEM;
    rp_status s = copy_f32(path, gt_a, &p->a);
    if (!s) s = copy_f32(path, gt_b, &p->b);
    if (s) return s;
    if (p->a.ne[1] != p->b.ne[0] || p->a.ne[1] < 1 || p->a.ne[1] > MAX_RANK)
        return rp_fail(RP_ERR_FORMAT,
                       "%s: '%s': lora_a [%" PRId64 ", %" PRId64 "] and lora_b [%" PRId64
                       ", %" PRId64 "] disagree on the rank (lora_a must be [n_in, r], lora_b "
                       "[r, n_out])",
                       path, base, p->a.ne[0], p->a.ne[1], p->b.ne[0], p->b.ne[1]);
    p->a.name = p->b.name = p->rest;
    return RP_OK;
}

static rp_status check_keys(const rp_model *m, const rp_gguf *g, const char *path, adapter *ad) {
    const char *v = NULL;
    bool f = false;
    rp_status s = rp_gguf_get_str(g, "general.type", &v, &f);
    if (!s && (!f || strcmp(v, "adapter")))
        s = rp_fail(RP_ERR_FORMAT, "%s: general.type is '%s', not 'adapter' (not a LoRA file)",
                    path, f ? v : "(absent)");
    if (!s && !(s = rp_gguf_get_str(g, "adapter.type", &v, &f)) && (!f || strcmp(v, "lora")))
        s = rp_fail(RP_ERR_UNSUPPORTED, "%s: adapter.type is '%s'; reprise applies 'lora'", path,
                    f ? v : "(absent)");
    if (!s && !(s = rp_gguf_get_str(g, "general.architecture", &v, &f)) &&
        (!f || strcmp(v, m->arch->name)))
        s = rp_fail(RP_ERR_FORMAT, "%s: an adapter for '%s', the model is '%s'", path,
                    f ? v : "(no general.architecture)", m->arch->name);
    if (!s) s = rp_gguf_get_f32(g, "adapter.lora.alpha", &ad->alpha, &f);
    if (!s && !(s = rp_gguf_get_str(g, "adapter.reprise.layer_map", &v, &f)) && f &&
        !(ad->layer_map = rp_strdup(v)))
        s = RP_ERR_NOMEM;
    return s;
}

/* Opens an adapter file, checked against m: keys, pairs, shapes. */
static rp_status adapter_open(const rp_model *m, const char *path, float scale, adapter *ad) {
    memset(ad, 0, sizeof *ad);
    ad->scale = scale;
    if (!(ad->path = rp_strdup(path))) return RP_ERR_NOMEM;
    rp_gguf *g;
    rp_status s = rp_gguf_open(path, &g);
    if (s) return rp_fail_prefix(s, "LoRA adapter");
    s = check_keys(m, g, path, ad);
    uint64_t nt = rp_gguf_n_tensors(g);
    if (!s && !(ad->pair = rp_calloc((size_t)nt / 2 + 1, sizeof *ad->pair, "adapter")))
        s = RP_ERR_NOMEM;
    for (uint64_t i = 0; i < nt && !s; i++) {
        const rp_gguf_tensor *gt = rp_gguf_tensor_at(g, i);
        if (ends_with(gt->name, ".lora_b")) {
            char aname[272];
            snprintf(aname, sizeof aname, "%.*s.lora_a",
                     (int)(strlen(gt->name) - strlen(".lora_b")), gt->name);
            if (!rp_gguf_find_tensor(g, aname))
                s = rp_fail(RP_ERR_FORMAT, "%s: '%s' has no '%s'", path, gt->name, aname);
            continue;
        }
        if (!ends_with(gt->name, ".lora_a")) {
            s = rp_fail(RP_ERR_FORMAT, "%s: tensor '%s' is not a LoRA tensor (.lora_a / .lora_b)",
                        path, gt->name);
            break;
        }
        lora_pair *p = &ad->pair[ad->n_pair++];
        s = read_pair(g, path, gt, p);
        if (!s && !ad->layer_map) s = resolve_base(m, path, p->layer, p, &p->w);
        if (!s) ad->bytes += p->a.nbytes + p->b.nbytes;
    }
    if (!s && ad->n_pair == 0) s = rp_fail(RP_ERR_FORMAT, "%s: no LoRA tensors", path);
    rp_gguf_close(g);
    return s;
}

static rp_deltas *deltas_new(void) {
    return rp_calloc(1, sizeof(rp_deltas), "deltas");
}

static adapter *push_adapter(rp_deltas *d) {
    adapter *a = rp_realloc(d->ad, (size_t)(d->n_ad + 1) * sizeof *a, "adapters");
    if (!a) return NULL;
    d->ad = a;
    memset(&a[d->n_ad], 0, sizeof *a);
    return &a[d->n_ad++];
}

rp_status rp_deltas_open(const rp_model *m, const rp_context_params *p, rp_deltas **out,
                         const char **layer_map) {
    *out = NULL;
    *layer_map = NULL;
    if (p->n_lora <= 0) return RP_OK;
    if (!m->arch->deltas)
        return rp_fail(RP_ERR_UNSUPPORTED, "LoRA adapters: the %s forward does not apply them",
                       m->arch->name);
    rp_deltas *d = deltas_new();
    if (!d) return RP_ERR_NOMEM;
    rp_status s = RP_OK;
    for (int i = 0; i < p->n_lora && !s; i++) {
        adapter *a = push_adapter(d);
        s = !a                 ? RP_ERR_NOMEM
            : !p->lora[i].path ? rp_fail(RP_ERR_INVALID_ARG, "LoRA adapter %d has no path", i + 1)
                               : adapter_open(m, p->lora[i].path, p->lora[i].scale, a);
        if (!s && a->layer_map) {
            if (*layer_map)
                s = rp_fail(RP_ERR_PLAN,
                            "%s: a second layer_replication adapter (only one plan can run)",
                            a->path);
            *layer_map = a->layer_map;
        }
    }
    d->n_global = d->n_ad;
    if (s) {
        rp_deltas_free(d);
        *layer_map = NULL;
        return s;
    }
    *out = d;
    return RP_OK;
}

static rp_status push_ent(rp_deltas *d, int e, const rp_tensor *w, lora_pair *p, float scale,
                          float alpha) {
    delta_ent *n = rp_realloc(d->ent[e], (size_t)(d->n_ent[e] + 1) * sizeof *n, "step deltas");
    if (!n) return RP_ERR_NOMEM;
    d->ent[e] = n;
    const float r = (float)p->a.ne[1];
    n[d->n_ent[e]++] = (delta_ent){w, &p->a, &p->b, alpha != 0.0f ? scale * alpha / r : scale};
    d->max_rank = RP_MAX(d->max_rank, (int)p->a.ne[1]);
    d->max_out = RP_MAX(d->max_out, p->b.ne[1]);
    return RP_OK;
}

/* The pairs of source-indexed adapter a for step e (layer src). */
static rp_status bind_source(rp_deltas *d, adapter *a, int e, int src, float scale, bool need) {
    int found = 0;
    rp_status s = RP_OK;
    for (int i = 0; i < a->n_pair && !s; i++)
        if (a->pair[i].layer == src) {
            s = push_ent(d, e, a->pair[i].w, &a->pair[i], scale, a->alpha);
            found++;
        }
    if (!s && need && !found)
        s = rp_fail(RP_ERR_FORMAT, "%s (at plan step %d): the adapter has no tensors for layer %d",
                    a->path, e, src);
    return s;
}

/* A layer_replication adapter: blk.N is step N, run over layer src[N]'s weights. */
static rp_status bind_replicated(rp_deltas *d, adapter *a, const rp_model *m, const rp_plan *plan) {
    rp_plan *want = NULL;
    rp_status s = rp_plan_map(a->layer_map, m->hp.n_trunk, m->hp.n_layer, &want);
    if (s) return rp_fail_prefix(s, "%s: adapter.reprise.layer_map", a->path);
    bool same = want->n_eff == plan->n_eff;
    for (int e = 0; same && e < plan->n_eff; e++) same = want->src[e] == plan->src[e];
    rp_plan_free(want);
    if (!same)
        return rp_fail(RP_ERR_PLAN,
                       "%s: a layer_replication adapter made for the plan '%s' (its layers run "
                       "as PEFT replicated them); the context's plan differs",
                       a->path, a->layer_map);
    for (int i = 0; i < a->n_pair && !s; i++) {
        lora_pair *p = &a->pair[i];
        if (p->layer >= plan->n_eff)
            return rp_fail(RP_ERR_FORMAT, "%s: tensors for step %d, the plan '%s' has %d steps",
                           a->path, p->layer, a->layer_map, plan->n_eff);
        if (!(s = resolve_base(m, a->path, plan->src[p->layer], p, &p->w)))
            s = push_ent(d, p->layer, p->w, p, a->scale, a->alpha);
    }
    return s;
}

/* The adapter of plan path i (opened once). */
static rp_status step_adapter(rp_deltas *d, const rp_model *m, const rp_plan *plan, int i,
                              adapter **out) {
    for (int k = d->n_global; k < d->n_ad; k++)
        if (!strcmp(d->ad[k].path, plan->lora_path[i])) {
            *out = &d->ad[k];
            return RP_OK;
        }
    adapter *a = push_adapter(d);
    if (!a) return RP_ERR_NOMEM;
    rp_status s = adapter_open(m, plan->lora_path[i], 1.0f, a);
    if (!s && a->layer_map)
        s = rp_fail(RP_ERR_PLAN,
                    "%s: a layer_replication adapter covers a whole plan; give it with --lora, "
                    "not on a step",
                    a->path);
    *out = a;
    return s;
}

static rp_status bind_steps(rp_deltas *d, const rp_model *m, const rp_plan *plan) {
    rp_status s = RP_OK;
    for (int e = 0; e < plan->n_eff && !s; e++) {
        d->res_scale[e] = plan->res_scale[e];
        for (int g = 0; g < d->n_global && !s; g++)
            if (!d->ad[g].layer_map)
                s = bind_source(d, &d->ad[g], e, plan->src[e], d->ad[g].scale, false);
        for (int k = 0; k < plan->n_lora[e] && !s; k++) {
            adapter *a = NULL;
            const int i = plan->lora[e * RP_PLAN_STEP_LORA + k];
            if (!(s = step_adapter(d, m, plan, i, &a)))
                s = bind_source(d, a, e, plan->src[e], plan->lora_scale[e * RP_PLAN_STEP_LORA + k],
                                true);
        }
    }
    for (int g = 0; g < d->n_global && !s; g++)
        if (d->ad[g].layer_map) s = bind_replicated(d, &d->ad[g], m, plan);
    return s;
}

rp_status rp_deltas_bind(rp_deltas **dp, const rp_model *m, const rp_plan *plan, int n_ubatch) {
    if (!*dp && !plan->has_deltas) return RP_OK;
    if (!m->arch->deltas)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "plan step deltas (residual scales, adapters): the %s forward does not "
                       "apply them",
                       m->arch->name);
    rp_deltas *d = *dp ? *dp : deltas_new();
    *dp = NULL;
    if (!d) return RP_ERR_NOMEM;
    d->n_eff = plan->n_eff;
    d->ent = rp_calloc((size_t)plan->n_eff, sizeof *d->ent, "step deltas");
    d->n_ent = rp_calloc((size_t)plan->n_eff, sizeof *d->n_ent, "step deltas");
    d->res_scale = rp_calloc((size_t)plan->n_eff, sizeof *d->res_scale, "step deltas");
    rp_status s = !d->ent || !d->n_ent || !d->res_scale ? RP_ERR_NOMEM : bind_steps(d, m, plan);
    if (!s && d->max_rank) {
        d->buf_r = rp_malloc((size_t)n_ubatch * (size_t)d->max_rank * sizeof(float), "LoRA");
        d->buf_o = rp_malloc((size_t)n_ubatch * (size_t)d->max_out * sizeof(float), "LoRA");
        if (!d->buf_r || !d->buf_o) s = RP_ERR_NOMEM;
    }
    if (s) {
        rp_deltas_free(d);
        return s;
    }
    *dp = d;
    return RP_OK;
}

void rp_deltas_report(const rp_deltas *d, const rp_plan *plan, rp_buf *b) {
    for (int i = 0; d && i < d->n_ad; i++) {
        const adapter *a = &d->ad[i];
        int lo = INT32_MAX, hi = -1, rank = 0;
        for (int k = 0; k < a->n_pair; k++) {
            lo = RP_MIN(lo, a->pair[k].layer);
            hi = RP_MAX(hi, a->pair[k].layer);
            rank = RP_MAX(rank, (int)a->pair[k].a.ne[1]);
        }
        rp_buf_printf(b, "  lora %s: %d pairs, rank %d, alpha %g, %.1f KiB; ", a->path, a->n_pair,
                      rank, (double)a->alpha, (double)a->bytes / 1024.0);
        if (a->layer_map)
            rp_buf_printf(b, "layer_replication: its own pairs on steps %d..%d of '%s'\n", lo, hi,
                          a->layer_map);
        else if (i < d->n_global)
            rp_buf_printf(b, "scale %g on every step of layers %d..%d\n", (double)a->scale, lo, hi);
        else
            rp_buf_printf(b, "on the plan steps that name it (layers %d..%d)\n", lo, hi);
    }
    int n = rp_plan_format_deltas(plan, NULL, 0);
    char *s = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (s) {
        rp_plan_format_deltas(plan, s, (size_t)n + 1);
        rp_buf_printf(b, "  step deltas:\n%s", s);
        free(s);
    }
}

void rp_ctx_delta(rp_compute *cc, const rp_deltas *d, int e, int n, const rp_tensor *const *w,
                  float *const *y, const float *x, int n_tok) {
    if (!d || !d->n_ent[e]) return;
    for (int k = 0; k < d->n_ent[e]; k++) {
        const delta_ent *en = &d->ent[e][k];
        for (int i = 0; i < n; i++) {
            if (en->w != w[i]) continue;
            rp_matmul(cc, en->a, x, n_tok, d->buf_r);
            rp_matmul(cc, en->b, d->buf_r, n_tok, d->buf_o);
            const size_t cnt = (size_t)n_tok * (size_t)en->b->ne[1];
            float *yi = y[i];
            for (size_t j = 0; j < cnt; j++) yi[j] += en->scale * d->buf_o[j];
        }
    }
}

void rp_ctx_residual(const rp_deltas *d, int e, float *x, const float *y, int n_tok, int E) {
    const float s = d ? d->res_scale[e] : 1.0f;
    for (int t = 0; t < n_tok; t++) {
        float *xr = x + (size_t)t * (size_t)E;
        const float *yr = y + (size_t)t * (size_t)E;
        if (s == 1.0f)
            rp_add(xr, yr, E);
        else
            for (int j = 0; j < E; j++) xr[j] += s * yr[j];
    }
}
