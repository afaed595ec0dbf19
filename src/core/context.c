#include "core/context.h"
#include "arch/arch.h"
#include "core/delta.h"
#include "base/threads.h"
#include "kernels/types.h"
#include "base/util.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_N_CTX_CAP 4096
#define DEFAULT_N_BATCH   512

rp_context_params rp_context_default_params(void) {
    rp_context_params p = {0};
    p.type_k = RP_TYPE_F16;
    p.type_v = RP_TYPE_F16;
    return p;
}

void rp_context_free(rp_context *c) {
    if (!c) return;
    if (c->arch_ctx && c->model->arch->ctx_free) c->model->arch->ctx_free(c);
    rp_ctx_dev_free(c);
    rp_state_free(&c->state);
    if (!c->pool_borrowed) rp_pool_free(c->cc.pool);
    rp_free_aligned(c->cc.wbuf);
    rp_free_aligned(c->attn_scratch);
    free(c->logits);
    free(c->hidden);
    free(c->out_index);
    rp_plan_free(c->plan);
    rp_deltas_free(c->deltas);
    free(c);
}

static rp_status build_plan(const rp_model *m, const rp_context_params *p, rp_plan **plan) {
    bool has_rep = p->repeat_layers && *p->repeat_layers;
    bool has_map = p->layer_map && *p->layer_map;
    if (has_rep && has_map)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "repeat_layers and layer_map are alternatives; give one");
    if (has_rep) return rp_plan_repeat(p->repeat_layers, m->hp.n_trunk, m->hp.n_layer, plan);
    if (has_map) return rp_plan_map(p->layer_map, m->hp.n_trunk, m->hp.n_layer, plan);
    return rp_plan_identity(m->hp.n_trunk, plan);
}

/* MemAvailable of /proc/meminfo in bytes; 0 if unknown. */
static uint64_t mem_available(void) {
    FILE *fp = fopen("/proc/meminfo", "r");
    if (!fp) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, fp))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(fp);
    return (uint64_t)kb * 1024;
}

/* The state and scratch c would allocate (state UINT64_MAX: past 64 bits).
 * Scratch: the matmul and attention buffers, and about the architecture's
 * activations (n_ubatch rows of a few widths) and logits. */
static void mem_estimate(const rp_context *c, uint64_t *state, uint64_t *scratch) {
    const rp_model *m = c->model;
    *state = rp_state_bytes(m, c->plan, c->n_seq, c->n_ctx, c->n_ubatch, c->params.type_k,
                            c->params.type_v);
    uint64_t widest = (uint64_t)m->hp.n_embd;
    int max_group = 1;
    for (int l = 0; l < m->hp.n_layer; l++) {
        widest = RP_MAX(widest, (uint64_t)m->info[l].n_ff);
        widest = RP_MAX(widest, (uint64_t)m->info[l].n_head * (uint64_t)m->info[l].head_dim_v);
        if (m->info[l].has_kv)
            max_group = RP_MAX(max_group, m->info[l].n_head / RP_MAX(1, m->info[l].n_head_kv));
    }
    const uint64_t ub = (uint64_t)c->n_ubatch;
    *scratch = (uint64_t)rp_matmul_scratch((int64_t)widest * 2, c->n_ubatch) +
               (uint64_t)rp_attention_scratch(c->n_ctx, max_group, 1) * (uint64_t)c->n_threads * 4 +
               ub * (8 * (uint64_t)m->hp.n_embd + 4 * widest + (uint64_t)m->hp.n_vocab) * 4;
}

void rp_context_mem_need(const rp_context *c, uint64_t *state, uint64_t *scratch, uint64_t *limit) {
    uint64_t st, sc;
    mem_estimate(c, &st, &sc);
    if (state) *state = st;
    if (scratch) *scratch = sc;
    if (limit) *limit = c->params.mem_limit ? c->params.mem_limit : mem_available();
}

/* The state and scratch c would allocate, against the limit, before any of
 * it is allocated. */
static rp_status check_memory(const rp_context *c) {
    const rp_model *m = c->model;
    uint64_t state, scratch, limit, need;
    rp_context_mem_need(c, &state, &scratch, &limit);
    if (!limit) return RP_OK; /* unknown: nothing to check against */
    if (state != UINT64_MAX && rp_add_u64(state, scratch, &need) && need <= limit) return RP_OK;
    const double mib = 1048576.0;
    return rp_fail(RP_ERR_NOMEM,
                   "context: the plan's %d steps x %d sequence(s) x %d positions need %.1f MiB of "
                   "state (KV and recurrent) and about %.1f MiB of scratch, over the %s of %.1f "
                   "MiB (the weights, %.1f MiB, are mapped apart); lower the context size, the "
                   "steps or the sequences%s",
                   c->plan->n_eff, c->n_seq, c->n_ctx,
                   state == UINT64_MAX ? 1.8e13 : (double)state / mib, (double)scratch / mib,
                   c->params.mem_limit ? "memory limit" : "memory available", (double)limit / mib,
                   (double)rp_model_weight_bytes(m) / mib,
                   c->params.mem_limit ? "" : ", or set a memory limit");
}

static int c_ubatch(const rp_context_params *p) {
    return p->n_batch ? (int)RP_MIN(p->n_batch, 8192u) : DEFAULT_N_BATCH;
}

rp_status rp_context_new(const rp_model *m, const rp_context_params *params, rp_context **out) {
    *out = NULL;
    if (!m || !m->arch)
        return rp_fail(RP_ERR_INVALID_ARG, "context needs a model loaded with its weights");
    rp_context_params p = params ? *params : rp_context_default_params();
    rp_status s = rp_kv_check_model(m, p.type_k, p.type_v);
    if (s) return s;
    /* the adapters and the plan first: a refusal allocates nothing else */
    rp_deltas *deltas = NULL;
    const char *adopted = NULL; /* a layer_replication adapter's plan */
    s = rp_deltas_open(m, &p, &deltas, &adopted);
    if (s) return s;
    rp_context_params pp = p;
    if (adopted && !(p.repeat_layers && *p.repeat_layers) && !(p.layer_map && *p.layer_map))
        pp.layer_map = adopted;
    rp_plan *plan = NULL;
    if (!(s = build_plan(m, &pp, &plan))) s = rp_deltas_bind(&deltas, m, plan, c_ubatch(&p));
    if (s) {
        rp_plan_free(plan);
        rp_deltas_free(deltas);
        return s;
    }
    rp_context *c = rp_calloc(1, sizeof *c, "context");
    if (!c) {
        rp_plan_free(plan);
        rp_deltas_free(deltas);
        return RP_ERR_NOMEM;
    }
    c->model = m;
    c->plan = plan;
    c->deltas = deltas;
    c->params = p;
    c->params.repeat_layers = c->params.layer_map = NULL; /* not owned */
    c->params.lora = NULL;
    c->params.n_lora = 0;
    c->n_ctx = p.n_ctx ? (int)p.n_ctx : RP_MIN(m->hp.n_ctx_train, DEFAULT_N_CTX_CAP);
    if (p.n_ctx > (1u << 24)) {
        rp_context_free(c);
        return rp_fail(RP_ERR_INVALID_ARG, "n_ctx %u is too large", p.n_ctx);
    }
    c->n_seq = p.n_seq_max ? (int)p.n_seq_max : 1;
    if (c->n_seq > 4096) {
        rp_context_free(c);
        return rp_fail(RP_ERR_INVALID_ARG, "n_seq_max %d is too large", c->n_seq);
    }
    c->n_ubatch = c_ubatch(&p);
    c->n_threads = p.n_threads > 0 ? p.n_threads : rp_n_physical_cores();
    if (c->n_threads > 512) c->n_threads = 512;

    const bool on_host = rp_ctx_device_is_cpu(p.device);
    if (!p.plan_only && (s = check_memory(c))) goto fail;
    if ((s = rp_state_init(&c->state, m, plan, c->n_seq, c->n_ctx, c->n_ubatch, p.type_k, p.type_v,
                           !p.plan_only && on_host)))
        goto fail;
    if (p.plan_only) {
        *out = c;
        return RP_OK;
    }
    c->cc.pool = rp_pool_new(c->n_threads);
    if (!c->cc.pool) {
        s = RP_ERR_NOMEM;
        goto fail;
    }
    int64_t widest = m->hp.n_embd;
    for (int l = 0; l < m->hp.n_layer; l++) {
        widest = RP_MAX(widest, (int64_t)m->info[l].n_ff);
        widest = RP_MAX(widest, (int64_t)m->info[l].n_head * m->info[l].head_dim_v);
    }
    c->cc.wbuf_size = rp_matmul_scratch(widest * 2, c->n_ubatch);
    c->cc.wbuf = rp_alloc_aligned(c->cc.wbuf_size, "matmul scratch");
    int max_group = 1;
    for (int l = 0; l < m->hp.n_layer; l++)
        if (m->info[l].has_kv)
            max_group = RP_MAX(max_group, m->info[l].n_head / m->info[l].n_head_kv);
    c->attn_scratch_per_thread = rp_attention_scratch(c->n_ctx, max_group, 1);
    c->attn_scratch = rp_alloc_aligned(
        c->attn_scratch_per_thread * (size_t)c->n_threads * sizeof(float), "attention scratch");
    if (!c->cc.wbuf || !c->attn_scratch) {
        s = RP_ERR_NOMEM;
        goto fail;
    }
    if ((s = rp_ctx_dev_init(c)) || (s = m->arch->ctx_init(c))) goto fail;
    *out = c;
    return RP_OK;
fail:
    rp_context_free(c);
    return s;
}

rp_status rp_context_share_pool(rp_context *c, rp_context *donor) {
    if (c->n_threads != donor->n_threads)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "contexts with %d and %d threads cannot share a thread pool", c->n_threads,
                       donor->n_threads);
    if (c == donor || c->cc.pool == donor->cc.pool) return RP_OK;
    if (!c->pool_borrowed) rp_pool_free(c->cc.pool);
    c->cc.pool = donor->cc.pool;
    c->pool_borrowed = true;
    return RP_OK;
}

const rp_model *rp_context_model(const rp_context *c) {
    return c->model;
}
uint32_t rp_context_n_ctx(const rp_context *c) {
    return (uint32_t)c->n_ctx;
}
uint32_t rp_context_n_seq(const rp_context *c) {
    return (uint32_t)c->n_seq;
}
int rp_context_n_threads(const rp_context *c) {
    return c->n_threads;
}
int rp_context_n_eff(const rp_context *c) {
    return c->plan->n_eff;
}
int rp_context_step_src(const rp_context *c, int eff) {
    return eff >= 0 && eff < c->plan->n_eff ? c->plan->src[eff] : -1;
}
uint64_t rp_context_state_bytes(const rp_context *c) {
    return c->state.kv_bytes + c->state.rec_bytes;
}
int rp_n_vocab(const rp_context *c) {
    return c->model->hp.n_vocab;
}

/* "    swa  = sliding window of 8, rope base 10000, KV ring of 519 cells per sequence" */
static void describe_step_type(rp_buf *b, const rp_context *c, int e) {
    const rp_model *m = c->model;
    const rp_layer_info *li = &m->info[c->plan->src[e]];
    rp_buf_printf(b, "    %-4s = ", rp_layer_kind_name(li->kind));
    if (li->kind == RP_LAYER_ATTN_SWA)
        rp_buf_printf(b, "sliding window of %d", li->window);
    else if (li->kind == RP_LAYER_ATTN)
        rp_buf_printf(b, "full causal attention");
    else
        rp_buf_printf(b, "recurrent mixer%s",
                      li->kind == RP_LAYER_HYBRID ? " + shared attention" : "");
    if (li->has_kv) {
        const rp_rope_params *r = &m->hp.rope[li->rope_set];
        if (r->n_rot > 0) rp_buf_printf(b, ", rope base %g", (double)r->freq_base);
        if (r->n_rot > 0 && r->freq_scale != 1.0f)
            rp_buf_printf(b, " scaled x%g", 1.0 / (double)r->freq_scale);
        int cap = rp_ctx_kv(c, e, 0)->cap;
        rp_buf_printf(
            b, cap < c->n_ctx ? ", KV ring of %d cells per sequence" : ", KV %d cells per sequence",
            cap);
    }
    if (li->rec_floats)
        rp_buf_printf(b, ", recurrent state %zu floats per sequence", li->rec_floats);
    rp_buf_printf(b, "\n");
}

uint64_t rp_context_adapter_bytes(const rp_context *c) {
    return rp_deltas_bytes(c->deltas);
}

int rp_context_plan_report(const rp_context *c, char *buf, size_t size) {
    const rp_plan *p = c->plan;
    const rp_model *m = c->model;
    rp_buf b = {0};
    const char *what = p->kind == RP_PLAN_REPEAT ? "--repeat-layers"
                       : p->kind == RP_PLAN_MAP  ? "--layer-map"
                                                 : NULL;
    if (what)
        rp_buf_printf(&b, "plan: %s %s: %d -> %d layers\n", what, p->spec, p->n_src, p->n_eff);
    else
        rp_buf_printf(&b, "plan: identity, %d layers\n", p->n_eff);
    int need = rp_plan_format(p, NULL, 0);
    char *fmt = malloc((size_t)need + 1);
    if (fmt) {
        rp_plan_format(p, fmt, (size_t)need + 1);
        rp_buf_printf(&b, "  eff->src: %s%s\n", fmt,
                      p->n_eff > 1 && strchr(fmt, '|') ? "   ('|' = seam)" : "");
        free(fmt);
    }
    /* step types when the model mixes them: each step is its source layer's type */
    bool mixed = false;
    for (int l = 1; l < m->hp.n_trunk; l++) mixed |= m->info[l].kind != m->info[0].kind;
    if (mixed) {
        rp_buf_printf(&b, "  steps (eff:src type):");
        for (int e = 0; e < p->n_eff; e++)
            rp_buf_printf(&b, "%s %d:%d %s",
                          e == 0       ? ""
                          : p->seam[e] ? " |"
                                       : ",",
                          e, p->src[e], rp_layer_kind_name(m->info[p->src[e]].kind));
        rp_buf_printf(&b, "\n");
        for (int e = 0; e < p->n_eff; e++) {
            bool seen = false; /* one line per distinct (type, window, rotary table) */
            for (int f = 0; f < e && !seen; f++) {
                const rp_layer_info *a = &m->info[p->src[e]], *o = &m->info[p->src[f]];
                seen = a->kind == o->kind && a->window == o->window && a->rope_set == o->rope_set;
            }
            if (!seen) describe_step_type(&b, c, e);
        }
    }
    if (m->hp.n_layer > m->hp.n_trunk)
        rp_buf_printf(&b, "  NextN/MTP head: layers %d..%d (loaded, never part of a plan)\n",
                      m->hp.n_trunk, m->hp.n_layer - 1);
    /* growth: KV slots and compute relative to the identity plan */
    int kv_id = 0, kv_plan = 0;
    for (int l = 0; l < m->hp.n_trunk; l++) kv_id += m->info[l].has_kv || m->info[l].rec_floats;
    for (int e = 0; e < p->n_eff; e++)
        kv_plan += m->info[p->src[e]].has_kv || m->info[p->src[e]].rec_floats;
    double kv_growth = kv_id ? 100.0 * (kv_plan - kv_id) / kv_id : 0.0;
    double comp_growth = 100.0 * (p->n_eff - p->n_src) / (double)p->n_src;
    rp_buf_printf(
        &b,
        "  state: %d slots (%+.1f%%), %.2f MiB for %d x %d positions; compute per token %+.1f%%; "
        "extra weight bytes: %" PRIu64 "\n",
        kv_plan, kv_growth, (double)rp_context_state_bytes(c) / 1048576.0, c->n_seq, c->n_ctx,
        comp_growth, rp_deltas_bytes(c->deltas));
    rp_deltas_report(c->deltas, p, &b);
    /* what the sliding-window rings save: the same steps with every position kept */
    uint64_t full = c->state.rec_bytes;
    bool rings = false;
    for (int e = 0; e < p->n_eff; e++) {
        const rp_layer_info *li = &m->info[p->src[e]];
        if (!li->has_kv) continue;
        rings |= rp_ctx_kv(c, e, 0)->cap < c->n_ctx;
        full += ((uint64_t)rp_kv_row_bytes(c->params.type_k, li->head_dim_k) +
                 (uint64_t)rp_kv_row_bytes(c->params.type_v, li->head_dim_v)) *
                (uint64_t)li->n_head_kv * (uint64_t)c->n_ctx * (uint64_t)c->n_seq;
    }
    if (rings)
        rp_buf_printf(&b,
                      "  sliding-window rings: %.2f MiB of state instead of %.2f MiB with every "
                      "position kept\n",
                      (double)rp_context_state_bytes(c) / 1048576.0, (double)full / 1048576.0);
    int band;
    int nb = rp_plan_boundary_repeats(p, &band);
    if (nb)
        rp_buf_printf(&b,
                      "  warning: %d repeated step(s) fall in the first or last %d layers; "
                      "repeating boundary "
                      "layers reliably produces incoherent output (a property of models, not of "
                      "the engine)\n",
                      nb, band);
    int n = (int)b.len;
    if (size) snprintf(buf, size, "%s", b.data ? b.data : "");
    rp_buf_free(&b);
    return n;
}

/* ---- decode -------------------------------------------------------------- */

static rp_status grow(void **p, size_t *cap, size_t need, size_t elem, const char *what) {
    if (need <= *cap) return RP_OK;
    void *q = rp_realloc(*p, need * elem, what);
    if (!q) return RP_ERR_NOMEM;
    *p = q;
    *cap = need;
    return RP_OK;
}

/* rp_decode over plan steps [begin, end) (end 0: the last step); see
 * rp_decode_steps. */
/* NaN or Inf logits (weights that hold them, or overflow) would be sampled as
 * token 0: an error naming the token instead, and no logits readable. */
static rp_status check_finite(rp_context *c, const float *logits, int n_out, const int32_t *rows,
                              int u0, const int32_t *pos, const int32_t *seq) {
    const size_t nv = (size_t)c->model->hp.n_vocab;
    for (int r = 0; r < n_out; r++) {
        const float *l = logits + (size_t)r * nv;
        float acc = 0; /* NaN or Inf anywhere makes acc * 0 NaN */
        for (size_t j = 0; j < nv; j++) acc += l[j] * 0.0f;
        if (acc == 0) continue;
        size_t j = 0;
        while (j < nv && isfinite(l[j])) j++;
        const int i = u0 + rows[r];
        c->n_batch_last = 0;
        return rp_fail(RP_ERR_FORMAT,
                       "decode: the logits of batch token %d (sequence %d, position %d) are not "
                       "finite (logit %zu is %s): the weights or the plan produce NaN/Inf",
                       i, seq[i], pos[i], j, j < nv && isnan(l[j]) ? "NaN" : "infinite");
    }
    return RP_OK;
}

static rp_status decode(rp_context *c, const rp_batch *b, int begin, int end, const float *x_in,
                        float *x_out) {
    if (c->params.plan_only)
        return rp_fail(RP_ERR_INVALID_ARG, "decode: the context holds a plan only (plan_only)");
    if (!b || b->n_tokens < 1 || (!b->token && !b->embd))
        return rp_fail(RP_ERR_INVALID_ARG, "decode: empty batch");
    if (b->token && b->embd)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "decode: a batch holds token ids or input embeddings, not both");
    const rp_model *m = c->model;
    const bool partial = end > 0 && end < c->plan->n_eff;
    const int n = b->n_tokens;
    const int nv = m->hp.n_vocab, ne = m->hp.n_embd;
    /* validate and resolve positions before touching any state */
    int32_t *pos = rp_malloc((size_t)n * sizeof *pos, "batch positions");
    int32_t *seq = rp_malloc((size_t)n * sizeof *seq, "batch sequences");
    int *next = rp_calloc((size_t)c->n_seq, sizeof *next, "batch");
    int32_t *rows = rp_malloc((size_t)n * sizeof *rows, "batch rows");
    rp_status s = RP_OK;
    if (!pos || !seq || !next || !rows) {
        s = RP_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < c->n_seq; i++) next[i] = c->state.seq_len[i];
    int n_out = 0;
    for (int i = 0; i < n; i++) {
        int sq = b->seq_id ? b->seq_id[i] : 0;
        if (sq < 0 || sq >= c->n_seq) {
            s = rp_fail(RP_ERR_INVALID_ARG, "decode: token %d has sequence id %d (context has %d)",
                        i, sq, c->n_seq);
            goto done;
        }
        if (b->token && (b->token[i] < 0 || b->token[i] >= nv)) {
            s = rp_fail(RP_ERR_INVALID_ARG,
                        "decode: token %d has id %d, outside the vocabulary (0..%d)", i,
                        b->token[i], nv - 1);
            goto done;
        }
        int p = b->pos ? b->pos[i] : next[sq];
        if (p != next[sq]) {
            s = rp_fail(RP_ERR_INVALID_ARG,
                        "decode: token %d of sequence %d has position %d, expected %d", i, sq, p,
                        next[sq]);
            goto done;
        }
        if (p >= c->n_ctx) {
            s = rp_fail(RP_ERR_CONTEXT_FULL,
                        "context full: sequence %d reached %d positions (n_ctx %d)", sq, p,
                        c->n_ctx);
            goto done;
        }
        next[sq]++;
        pos[i] = p;
        seq[i] = sq;
        bool want = !partial && (b->logits ? b->logits[i] != 0 : i == n - 1);
        if (want) n_out++;
    }
    if ((s = grow((void **)&c->logits, &c->out_cap, (size_t)(n_out ? n_out : 1) * (size_t)nv,
                  sizeof(float), "logits")))
        goto done;
    if (c->params.keep_hidden) {
        float *h = rp_realloc(c->hidden, (size_t)(n_out ? n_out : 1) * (size_t)ne * sizeof(float),
                              "hidden states");
        if (!h) {
            s = RP_ERR_NOMEM;
            goto done;
        }
        c->hidden = h;
    }
    if ((s = grow((void **)&c->out_index, &c->index_cap, (size_t)n, sizeof(int32_t),
                  "output index")))
        goto done;
    c->n_batch_last = n;
    int k = 0;
    for (int i = 0; i < n; i++) {
        bool want = !partial && (b->logits ? b->logits[i] != 0 : i == n - 1);
        c->out_index[i] = want ? k++ : -1;
    }
    /* micro-batches of n_ubatch tokens */
    int out_base = 0;
    for (int u0 = 0; u0 < n; u0 += c->n_ubatch) {
        int un = RP_MIN(c->n_ubatch, n - u0);
        if (c->abort_fn && c->abort_fn(c->abort_user)) {
            c->n_batch_last = 0; /* no logits of a cancelled call */
            s = rp_fail(RP_ERR_CANCELLED, "decode: aborted after %d of %d tokens", u0, n);
            goto done;
        }
        int uo = 0;
        for (int i = 0; i < un; i++)
            if (c->out_index[u0 + i] >= 0) rows[uo++] = i;
        rp_ubatch ub = {
            .n_tok = un,
            .token = b->token ? b->token + u0 : NULL,
            .embd = b->embd ? b->embd + (size_t)u0 * (size_t)ne : NULL,
            .pos = pos + u0,
            .seq = seq + u0,
            .n_out = uo,
            .out_rows = rows,
            .logits = c->logits + (size_t)out_base * (size_t)nv,
            .hidden = c->params.keep_hidden ? c->hidden + (size_t)out_base * (size_t)ne : NULL,
            .step_begin = begin,
            .step_end = end,
            .x_in = x_in ? x_in + (size_t)u0 * (size_t)ne : NULL,
            .x_out = x_out ? x_out + (size_t)u0 * (size_t)ne : NULL,
        };
        if ((s = m->arch->forward(c, &ub))) goto done;
        for (int i = 0; i < un; i++) c->state.seq_len[seq[u0 + i]] = pos[u0 + i] + 1;
        if ((s = check_finite(c, ub.logits, uo, rows, u0, pos, seq))) goto done;
        out_base += uo;
    }
done:
    free(pos);
    free(seq);
    free(next);
    free(rows);
    return s;
}

rp_status rp_decode(rp_context *c, const rp_batch *b) {
    return decode(c, b, 0, 0, NULL, NULL);
}

rp_status rp_decode_steps(rp_context *c, const rp_batch *b, int begin, int end, const float *x_in,
                          float *x_out) {
    const int n_eff = c->plan->n_eff;
    if (!c->model->arch->step_ranges)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "decode from step %d: the %s forward pass runs whole plans only", begin,
                       c->model->arch->name);
    if (begin < 0 || end <= begin || end > n_eff)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "decode steps [%d, %d): outside the plan's %d steps or empty", begin, end,
                       n_eff);
    if ((begin > 0) != (x_in != NULL))
        return rp_fail(RP_ERR_INVALID_ARG, "decode steps [%d, %d): %s", begin, end,
                       begin > 0
                           ? "a range that skips the first step needs its input hidden states"
                           : "a range from step 0 starts from the tokens, not from hidden states");
    if ((end < n_eff) != (x_out != NULL))
        return rp_fail(
            RP_ERR_INVALID_ARG, "decode steps [%d, %d): %s", begin, end,
            end < n_eff
                ? "a range that stops before the last step needs a destination for its hidden "
                  "states"
                : "a range through the last step produces logits, not hidden states");
    return decode(c, b, begin, end, x_in, x_out);
}

const float *rp_get_logits(const rp_context *c, int i) {
    if (i < 0 || i >= c->n_batch_last || c->out_index[i] < 0) return NULL;
    return c->logits + (size_t)c->out_index[i] * (size_t)c->model->hp.n_vocab;
}

const float *rp_get_hidden(const rp_context *c, int i) {
    if (!c->params.keep_hidden || i < 0 || i >= c->n_batch_last || c->out_index[i] < 0) return NULL;
    return c->hidden + (size_t)c->out_index[i] * (size_t)c->model->hp.n_embd;
}

int rp_kv_seq_len(const rp_context *c, int seq) {
    return seq >= 0 && seq < c->n_seq ? c->state.seq_len[seq] : -1;
}

rp_status rp_kv_seq_truncate(rp_context *c, int seq, int p) {
    if (seq < 0 || seq >= c->n_seq)
        return rp_fail(RP_ERR_INVALID_ARG, "sequence %d out of range", seq);
    if (p < 0 || p > c->state.seq_len[seq])
        return rp_fail(RP_ERR_INVALID_ARG, "truncate sequence %d to %d: it has %d positions", seq,
                       p, c->state.seq_len[seq]);
    if (p == 0) {
        rp_state_clear_seq(&c->state, seq);
        return RP_OK;
    }
    for (int e = 0; e < c->state.n_steps; e++)
        if (c->state.rec[(size_t)e * (size_t)c->n_seq + (size_t)seq] && p != c->state.seq_len[seq])
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "sequence %d: recurrent state cannot be rolled back to position %d", seq,
                           p);
    rp_status s = rp_ctx_ring_rollback_check(c, seq, p);
    if (s) return s;
    c->state.seq_len[seq] = p;
    c->state.seq_low[seq] = RP_MIN(c->state.seq_low[seq], p);
    return RP_OK;
}

rp_status rp_ctx_ring_rollback_check(const rp_context *c, int seq, int p) {
    /* A sliding-window ring holds the last cap positions; the next token at p
     * must still find its window p-window+1 .. p-1 there. */
    for (int e = 0; e < c->state.n_steps; e++) {
        const rp_kv_view *kv = rp_ctx_kv(c, e, seq);
        const rp_layer_info *li = &c->model->info[c->plan->src[e]];
        if (!kv->cap || kv->cap >= c->n_ctx || li->kind != RP_LAYER_ATTN_SWA) continue;
        const int oldest = c->state.seq_len[seq] - kv->cap;
        if (RP_MAX(0, p - li->window + 1) < oldest)
            return rp_fail(
                RP_ERR_UNSUPPORTED,
                "sequence %d: step %d (source layer %d) keeps a sliding-window ring of the last %d "
                "positions; it cannot be rolled back from %d to %d (%d at the earliest)",
                seq, e, c->plan->src[e], kv->cap, c->state.seq_len[seq], p,
                oldest + li->window - 1);
    }
    return RP_OK;
}

void rp_kv_clear(rp_context *c) {
    for (int s = 0; s < c->n_seq; s++) rp_state_clear_seq(&c->state, s);
}

/* ---- shared output ------------------------------------------------------- */

void rp_forward_output(rp_context *c, const rp_ubatch *ub, float *x, bool compacted, float *tmp) {
    const rp_model *m = c->model;
    const int ne = m->hp.n_embd;
    if (!ub->n_out) return;
    if (!compacted)
        for (int i = 0; i < ub->n_out; i++)
            if (ub->out_rows[i] != i)
                memmove(x + (size_t)i * (size_t)ne, x + (size_t)ub->out_rows[i] * (size_t)ne,
                        (size_t)ne * sizeof(float));
    if (ub->hidden) memcpy(ub->hidden, x, (size_t)ub->n_out * (size_t)ne * sizeof(float));
    if (m->output_norm_b)
        rp_layernorm(tmp, x, (const float *)m->output_norm->data,
                     (const float *)m->output_norm_b->data, ne, ub->n_out, m->hp.eps);
    else
        rp_rmsnorm(tmp, x, (const float *)m->output_norm->data, ne, ub->n_out, m->hp.eps);
    const int e_out = c->plan->n_eff;
    rp_trace_emit(c, ub, "result_norm", e_out, -1, tmp, ub->n_out, ne, true);
    rp_matmul(&c->cc, m->output, tmp, ub->n_out, ub->logits);
    if (m->hp.final_softcap > 0)
        rp_softcap(ub->logits, m->hp.final_softcap, ub->n_out * m->hp.n_vocab);
    rp_trace_emit(c, ub, "result_output", e_out, -1, ub->logits, ub->n_out, m->hp.n_vocab, true);
}

/* ---- sequence checkpoints ------------------------------------------------ */

struct rp_seq_checkpoint {
    const rp_context *ctx; /* the context it belongs to */
    int seq;               /* -1 until saved */
    int len;               /* positions the sequence had */
    uint32_t id;           /* the sequence's checkpoint count at the save */
    size_t n_floats;
    float *rec; /* [n_floats] every recurrent step's state of the sequence, in step order */
};

bool rp_context_has_recurrent(const rp_context *c) {
    return rp_state_rec_floats_seq(&c->state) > 0;
}

rp_seq_checkpoint *rp_seq_checkpoint_new(const rp_context *c) {
    rp_seq_checkpoint *ck = rp_calloc(1, sizeof *ck, "sequence checkpoint");
    if (!ck) return NULL;
    ck->ctx = c;
    ck->seq = -1;
    ck->len = -1;
    ck->n_floats = rp_state_rec_floats_seq(&c->state);
    if (ck->n_floats) {
        ck->rec = rp_alloc_aligned(ck->n_floats * sizeof(float), "sequence checkpoint");
        if (!ck->rec) {
            free(ck);
            return NULL;
        }
    }
    return ck;
}

void rp_seq_checkpoint_free(rp_seq_checkpoint *ck) {
    if (!ck) return;
    rp_free_aligned(ck->rec);
    free(ck);
}

int rp_seq_checkpoint_len(const rp_seq_checkpoint *ck) {
    return ck ? ck->len : -1;
}

static rp_status ckpt_check(const rp_context *c, int seq, const rp_seq_checkpoint *ck,
                            const char *what) {
    if (!ck) return rp_fail(RP_ERR_INVALID_ARG, "%s: no checkpoint given", what);
    if (ck->ctx != c)
        return rp_fail(RP_ERR_INVALID_ARG, "%s: the checkpoint was made for another context", what);
    if (seq < 0 || seq >= c->n_seq)
        return rp_fail(RP_ERR_INVALID_ARG, "%s: sequence %d out of range (context has %d)", what,
                       seq, c->n_seq);
    return RP_OK;
}

rp_status rp_seq_checkpoint_save(const rp_context *c, int seq, rp_seq_checkpoint *ck) {
    rp_status s = ckpt_check(c, seq, ck, "checkpoint save");
    if (s) return s;
    rp_state *st = (rp_state *)&c->state; /* the guard is bookkeeping, not state */
    float *dst = ck->rec;
    for (int e = 0; e < st->n_steps; e++) {
        const float *r = st->rec[(size_t)e * (size_t)st->n_seq + (size_t)seq];
        if (!r) continue;
        memcpy(dst, r, st->rec_floats[e] * sizeof(float));
        dst += st->rec_floats[e];
    }
    ck->seq = seq;
    ck->len = st->seq_len[seq];
    ck->id = ++st->seq_ckpt[seq];
    st->seq_low[seq] = ck->len;
    return RP_OK;
}

rp_status rp_seq_checkpoint_restore(rp_context *c, int seq, const rp_seq_checkpoint *ck) {
    rp_status s = ckpt_check(c, seq, ck, "checkpoint restore");
    if (s) return s;
    rp_state *st = &c->state;
    if (ck->seq < 0)
        return rp_fail(RP_ERR_INVALID_ARG, "checkpoint restore: the checkpoint was never saved");
    if (ck->seq != seq)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "checkpoint restore: the checkpoint holds sequence %d, not %d", ck->seq,
                       seq);
    if (ck->id != st->seq_ckpt[seq])
        return rp_fail(
            RP_ERR_INVALID_ARG,
            "checkpoint restore: sequence %d has had a newer checkpoint saved since this one", seq);
    if (st->seq_low[seq] < ck->len)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "checkpoint restore: sequence %d was cut back to %d positions after the "
                       "checkpoint at %d; "
                       "the positions it needs are gone",
                       seq, st->seq_low[seq], ck->len);
    if ((s = rp_ctx_ring_rollback_check(c, seq, ck->len))) return s;
    const float *src = ck->rec;
    for (int e = 0; e < st->n_steps; e++) {
        float *r = st->rec[(size_t)e * (size_t)st->n_seq + (size_t)seq];
        if (!r) continue;
        memcpy(r, src, st->rec_floats[e] * sizeof(float));
        src += st->rec_floats[e];
    }
    st->seq_len[seq] = ck->len;
    return RP_OK;
}
