/* The dense decoder block (src/arch/dense.c) written against the backend
 * interface, as phase B of issue 23 will write it: every call of
 * rp_dense_forward / rp_forward_output replaced by its rp_be_* twin, weights
 * by src, KV regions by step. It proves the interface carries the forward:
 *
 *   - on the CPU backend (borrowing the context's pool and scratch) it gives
 *     rp_decode's logits bit for bit: prompt batches mixing two sequences,
 *     then generation, on llama (stories260K), qwen3 (QK norms, F32 and
 *     Q4_K_M), gemma3 (sliding-window rings, post norms, fp16 GELU, embedding
 *     scale, final soft-cap), and a RYS plan;
 *   - on Vulkan (lavapipe) it agrees with the CPU backend (logits NMSE <= 1e-6
 *     for float weights, <= 1e-5 for a trained model's quantized weights, the
 *     same greedy tokens), a RYS plan's weights are uploaded once (0 extra
 *     weight bytes, KV growth n_eff / n_layer), gemma3 rings run past the
 *     window;
 *   - in lock-step (each op of the device's forward fed the CPU's inputs), every
 *     op of every forward is within NMSE 1e-10 of the CPU's: what a forward
 *     accumulates beyond that is the model's own sensitivity. Quantized
 *     activations make a forward chaotic: an input that differs in its last
 *     bit can round to another quant, and random models amplify it (the
 *     random qwen3-tiny-Q4_K_M moves by NMSE 3e-3 on the CPU when only its
 *     cache goes from F16 to F32). */
#include "test.h"
#include "test_backend.h"
#include "arch/dense.h"
#include "backend/backend.h"
#include "base/util.h"
#include "core/context.h"
#include "core/model.h"
#include "core/plan.h"
#include "kernels/types.h"

#include <math.h>
#include <string.h>

/* ---- the forward ------------------------------------------------------------------ */

/* Lock-step probing: the CPU's run records the result of every op; the
 * device's run compares its result with the record and then overwrites it
 * with the CPU's, so each op is measured on the CPU's inputs. */
typedef struct probe {
    bool record;
    float **rec;
    size_t *len;
    int n, cap, at;
    double worst;
    char worst_op[48];
} probe;

static void probe_free(probe *p) {
    for (int i = 0; i < p->n; i++) free(p->rec[i]);
    free(p->rec);
    free(p->len);
    memset(p, 0, sizeof *p);
}

typedef struct bfwd {
    probe *pr; /* lock-step probing, or NULL */
    rp_backend *be;
    const rp_model *m;
    const rp_plan *plan;
    int n_ub;
    rp_bbuf *act; /* every activation row below, n_ub tokens */
    rp_bx x, xn, tmp, q, k, v, att, gate, up, rope[2];
    rp_bkv **kv; /* [n_eff] the step's KV region, NULL when it has none */
} bfwd;

static void bfwd_free(bfwd *f) {
    for (int e = 0; f->kv && e < f->plan->n_eff; e++) rp_be_kv_free(f->be, f->kv[e]);
    free(f->kv);
    rp_be_buf_free(f->be, f->act);
    memset(f, 0, sizeof *f);
}

static rp_status upload_layer(rp_backend *be, const rp_layer *L) {
    const rp_tensor *t[RP_CTX_LAYER_WEIGHTS_MAX]; /* the library's own list */
    const int n = rp_ctx_layer_weights(L, t);
    rp_status s = RP_OK;
    for (int i = 0; i < n && !s; i++) s = rp_be_upload(be, t[i]);
    return s;
}

static rp_status bfwd_init(bfwd *f, rp_backend *be, const rp_model *m, const rp_plan *plan,
                           int n_ub, int n_seq, int n_ctx, int type_k, int type_v) {
    memset(f, 0, sizeof *f);
    f->be = be;
    f->m = m;
    f->plan = plan;
    f->n_ub = n_ub;
    const rp_hparams *hp = &m->hp;
    size_t wq = 0, wk = 0, wv = 0, wo = 0, wf = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        const rp_layer_info *li = &m->info[l];
        wq = RP_MAX(wq, (size_t)li->n_head * (size_t)li->head_dim_k);
        wk = RP_MAX(wk, (size_t)li->n_head_kv * (size_t)li->head_dim_k);
        wv = RP_MAX(wv, (size_t)li->n_head_kv * (size_t)li->head_dim_v);
        wo = RP_MAX(wo, (size_t)li->n_head * (size_t)li->head_dim_v);
        wf = RP_MAX(wf, (size_t)li->n_ff);
    }
    const size_t E = (size_t)hp->n_embd, n = (size_t)n_ub;
    const size_t nrot = (size_t)RP_MAX(hp->rope[0].n_rot, hp->rope[1].n_rot) + 1;
    const size_t sizes[11] = {n * E,    n * E,   n * RP_MAX(E, RP_MAX(wq, wo)),
                              n * wq,   n * wk,  n * wv,
                              n * wo,   n * wf,  n * wf,
                              n * nrot, n * nrot};
    size_t off[11], total = 0;
    for (int i = 0; i < 11; i++) {
        off[i] = total;
        total += rp_align_up(sizes[i] * 4, 256);
    }
    rp_status s = rp_be_buf_new(be, total, "activations", &f->act);
    if (s) return s;
    rp_bx *dst[11] = {&f->x,   &f->xn,   &f->tmp, &f->q,       &f->k,      &f->v,
                      &f->att, &f->gate, &f->up,  &f->rope[0], &f->rope[1]};
    for (int i = 0; i < 11; i++) *dst[i] = rp_bx_at(f->act, off[i]);
    /* weights once: a source layer several steps run is uploaded once */
    const rp_tensor *io[4] = {m->tok_embd, m->output_norm, m->output_norm_b, m->output};
    for (int i = 0; i < 4 && !s; i++)
        if (io[i]) s = rp_be_upload(be, io[i]);
    for (int e = 0; e < plan->n_eff && !s; e++) s = upload_layer(be, &m->layers[plan->src[e]]);
    /* a KV region per step, sized and typed by its source layer */
    f->kv = rp_calloc((size_t)plan->n_eff, sizeof *f->kv, "step caches");
    if (!s && !f->kv) s = RP_ERR_NOMEM;
    for (int e = 0; e < plan->n_eff && !s; e++) {
        const rp_layer_info *li = &m->info[plan->src[e]];
        if (!li->has_kv) continue;
        int cap = n_ctx;
        if (li->kind == RP_LAYER_ATTN_SWA && li->window > 0)
            cap = RP_MIN(n_ctx, li->window + n_ub - 1);
        rp_bkv_desc d = {n_seq, li->n_head_kv, cap, li->head_dim_k, li->head_dim_v, type_k, type_v};
        s = rp_be_kv_new(be, &d, &f->kv[e]);
    }
    if (s) bfwd_free(f);
    return s;
}

static void probe_op(bfwd *f, const char *op, int e, rp_bx x, size_t n) {
    probe *p = f->pr;
    if (!p) return;
    float *h = malloc(n * 4);
    rp_be_read(f->be, h, x, n * 4);
    if (rp_be_sync(f->be)) {
        CHECK(false, "probe %s: %s", op, rp_last_error());
        free(h);
        return;
    }
    if (p->record) {
        if (p->n == p->cap) {
            p->cap = p->cap ? 2 * p->cap : 256;
            p->rec = realloc(p->rec, sizeof *p->rec * (size_t)p->cap);
            p->len = realloc(p->len, sizeof *p->len * (size_t)p->cap);
        }
        p->rec[p->n] = h;
        p->len[p->n++] = n;
        return;
    }
    if (p->at >= p->n || p->len[p->at] != n) {
        CHECK(false, "probe %s: the runs differ in shape", op);
        free(h);
        return;
    }
    const float *c = p->rec[p->at++];
    const double d = test_nmse(c, h, n);
    if (!(d <= p->worst)) {
        p->worst = isnan(d) ? INFINITY : d;
        snprintf(p->worst_op, sizeof p->worst_op, "%s of step %d", op, e);
    }
    rp_be_write(f->be, x, c, n * 4);
    free(h);
}

static rp_bnorm norm_kind(const rp_tensor *b) {
    return b ? RP_BNORM_LAYER : RP_BNORM_RMS;
}

/* rp_dense_forward + rp_forward_output over the interface; logits [n_out][n_vocab] */
static rp_status bfwd_decode(bfwd *f, int n, const int32_t *tok, const int32_t *pos,
                             const int32_t *seq, int n_out, const int32_t *out_rows,
                             float *logits) {
    rp_backend *be = f->be;
    const rp_model *m = f->m;
    const rp_hparams *hp = &m->hp;
    const rp_dense_cfg *cfg = m->arch_data;
    const int E = hp->n_embd;
    rp_be_get_rows(be, f->x, m->tok_embd, tok, n);
    if (hp->embd_scale != 1.0f) rp_be_scale(be, f->x, hp->embd_scale, n * E);
    probe_op(f, "embedding", -1, f->x, (size_t)n * E);
    for (int r = 0; r < hp->n_rope_sets; r++)
        rp_be_rope_cache(be, f->rope[r], pos, n, &hp->rope[r]);
    bool compacted = false;
    for (int e = 0; e < f->plan->n_eff; e++) {
        const int src = f->plan->src[e];
        const rp_layer *L = &m->layers[src];
        const rp_layer_info *li = &m->info[src];
        const int nh = li->n_head, nkv = li->n_head_kv, dk = li->head_dim_k, dv = li->head_dim_v;
        const int wq = nh * dk, wk = nkv * dk, wv = nkv * dv, wo = nh * dv;
        const rp_rope_params *rope = &hp->rope[li->rope_set];

        rp_be_norm(be, norm_kind(L->attn_norm_b), f->xn, f->x, L->attn_norm, L->attn_norm_b, E, n,
                   hp->eps);
        probe_op(f, "attn_norm", e, f->xn, (size_t)n * E);
        const rp_tensor *w3[3] = {L->wq, L->wk, L->wv};
        const rp_bx y3[3] = {f->q, f->k, f->v};
        rp_be_matmul_n(be, 3, w3, y3, f->xn, n);
        rp_be_add_row(be, f->q, L->bq, wq, n);
        rp_be_add_row(be, f->k, L->bk, wk, n);
        rp_be_add_row(be, f->v, L->bv, wv, n);
        probe_op(f, "q", e, f->q, (size_t)n * wq);
        probe_op(f, "k", e, f->k, (size_t)n * wk);
        probe_op(f, "v", e, f->v, (size_t)n * wv);
        if (L->q_norm) {
            rp_be_norm_heads(be, f->q, L->q_norm, dk, nh, n, wq, hp->eps);
            rp_be_norm_heads(be, f->k, L->k_norm, dk, nkv, n, wk, hp->eps);
            probe_op(f, "q_norm", e, f->q, (size_t)n * wq);
            probe_op(f, "k_norm", e, f->k, (size_t)n * wk);
        }
        if (rope->n_rot > 0) {
            rp_be_rope(be, f->q, n, wq, nh, dk, rope->n_rot, f->rope[li->rope_set], hp->rope_style);
            rp_be_rope(be, f->k, n, wk, nkv, dk, rope->n_rot, f->rope[li->rope_set],
                       hp->rope_style);
            probe_op(f, "rope q", e, f->q, (size_t)n * wq);
            probe_op(f, "rope k", e, f->k, (size_t)n * wk);
        }
        /* what the layer is comes from src, where it runs (its KV region) from e */
        rp_be_kv_write(be, f->kv[e], n, pos, seq, f->k, wk, f->v, wv);
        rp_battn a = {.n_tok = n,
                      .q = f->q,
                      .q_stride = wq,
                      .out = f->att,
                      .out_stride = wo,
                      .n_head = nh,
                      .n_head_kv = nkv,
                      .head_dim_k = dk,
                      .head_dim_v = dv,
                      .scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)dk),
                      .softcap = hp->attn_softcap,
                      .window = li->kind == RP_LAYER_ATTN_SWA ? li->window : 0,
                      .pos = pos,
                      .seq = seq,
                      .kv = f->kv[e]};
        rp_be_attention(be, &a);
        probe_op(f, "attention", e, f->att, (size_t)n * wo);
        rp_be_matmul(be, L->wo, f->att, n, f->tmp);
        rp_be_add_row(be, f->tmp, L->bo, E, n);
        if (L->attn_post_norm)
            rp_be_norm(be, RP_BNORM_RMS, f->tmp, f->tmp, L->attn_post_norm, NULL, E, n, hp->eps);
        probe_op(f, "attn_output", e, f->tmp, (size_t)n * E);
        rp_be_add(be, f->x, f->tmp, n * E);
        probe_op(f, "attn residual", e, f->x, (size_t)n * E);

        if (e == f->plan->n_eff - 1 && n_out < n) {
            rp_be_gather(be, f->x, f->x, out_rows, n_out, E);
            n = n_out;
            compacted = true;
            if (!n) break;
        }

        rp_be_norm(be, norm_kind(L->ffn_norm_b), f->xn, f->x, L->ffn_norm, L->ffn_norm_b, E, n,
                   hp->eps);
        const rp_tensor *w2[2] = {L->ffn_gate, L->ffn_up};
        const rp_bx y2[2] = {f->gate, f->up};
        probe_op(f, "ffn_norm", e, f->xn, (size_t)n * E);
        rp_be_matmul_n(be, 2, w2, y2, f->xn, n);
        probe_op(f, "gate", e, f->gate, (size_t)n * li->n_ff);
        probe_op(f, "up", e, f->up, (size_t)n * li->n_ff);
        rp_be_act_mul(be, (rp_bact)cfg->act, f->gate, f->up, n * li->n_ff);
        probe_op(f, "activation", e, f->gate, (size_t)n * li->n_ff);
        rp_be_matmul(be, L->ffn_down, f->gate, n, f->tmp);
        if (L->ffn_post_norm)
            rp_be_norm(be, RP_BNORM_RMS, f->tmp, f->tmp, L->ffn_post_norm, NULL, E, n, hp->eps);
        probe_op(f, "ffn_output", e, f->tmp, (size_t)n * E);
        rp_be_add(be, f->x, f->tmp, n * E);
        probe_op(f, "ffn residual", e, f->x, (size_t)n * E);
    }
    rp_bout o = {.x = f->x,
                 .tmp = f->xn,
                 .n_embd = E,
                 .n_out = n_out,
                 .rows = compacted ? NULL : out_rows,
                 .norm = m->output_norm,
                 .norm_b = m->output_norm_b,
                 .w = m->output,
                 .eps = hp->eps,
                 .softcap = hp->final_softcap,
                 .logits = logits};
    rp_be_output(be, &o);
    return rp_be_sync(be);
}

/* ---- the runs --------------------------------------------------------------------------- */

/* Two sequences: a prompt batch of both (interleaved, every row's logits),
 * a batch with a few rows' logits, then generation one token per sequence
 * (n_batch in all: gemma3's runs past its rings of window + n_ubatch - 1
 * cells). */
#define MAX_BATCH 20
static int batch_len(int b) {
    return b == 0 ? 12 : b == 1 ? 5 : 2;
}

typedef struct run_out {
    float *logits[MAX_BATCH]; /* [rows asked][n_vocab] */
    int n_rows[MAX_BATCH];
    int n_batch;
} run_out;

static void run_free(run_out *r) {
    for (int i = 0; i < MAX_BATCH; i++) free(r->logits[i]);
    memset(r, 0, sizeof *r);
}

static void batch_make(int b, int nv, int32_t *tok, int32_t *pos, int32_t *seq, int8_t *want,
                       int *next) {
    for (int t = 0; t < batch_len(b); t++) {
        seq[t] = b == 0 ? (t % 3 == 2) : t % 2; /* seq 0 twice as often in the prompt */
        pos[t] = next[seq[t]]++;
        tok[t] = (int32_t)((t * 37 + b * 11 + 5) % nv);
        want[t] = b == 0 || b >= 2 || t == 1 || t == 4;
    }
}

/* rp_decode on context c */
static bool run_decode(rp_context *c, int n_batch, run_out *r) {
    const int nv = rp_n_vocab(c);
    int next[2] = {0, 0};
    r->n_batch = n_batch;
    for (int b = 0; b < n_batch; b++) {
        int32_t tok[16], pos[16], seq[16];
        int8_t want[16];
        batch_make(b, nv, tok, pos, seq, want, next);
        rp_batch bt = {
            .n_tokens = batch_len(b), .token = tok, .pos = pos, .seq_id = seq, .logits = want};
        rp_status s = rp_decode(c, &bt);
        CHECK(!s, "rp_decode batch %d: %s", b, rp_last_error());
        if (s) return false;
        int k = 0;
        for (int t = 0; t < batch_len(b); t++) k += want[t] != 0;
        r->n_rows[b] = k;
        r->logits[b] = malloc((size_t)k * (size_t)nv * 4);
        for (int t = 0, i = 0; t < batch_len(b); t++)
            if (want[t])
                memcpy(r->logits[b] + (size_t)i++ * nv, rp_get_logits(c, t), (size_t)nv * 4);
    }
    return true;
}

static bool run_fwd(bfwd *f, int nv, int n_batch, run_out *r) {
    int next[2] = {0, 0};
    r->n_batch = n_batch;
    for (int b = 0; b < n_batch; b++) {
        int32_t tok[16], pos[16], seq[16], rows[16];
        int8_t want[16];
        batch_make(b, nv, tok, pos, seq, want, next);
        int k = 0;
        for (int t = 0; t < batch_len(b); t++)
            if (want[t]) rows[k++] = t;
        r->n_rows[b] = k;
        r->logits[b] = malloc((size_t)k * (size_t)nv * 4);
        rp_status s = bfwd_decode(f, batch_len(b), tok, pos, seq, k, rows, r->logits[b]);
        CHECK(!s, "%s forward batch %d: %s", f->be->name, b, rp_last_error());
        if (s) return false;
    }
    return true;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

typedef struct fcase {
    const char *model;
    const char *repeat;
    int type_kv;
    int n_batch;
    /* the device's logits NMSE bound: the 1e-6 for float weights;
     * 0 = relative: a random quantized model moves by 3e-3 when only its
     * cache precision changes (F16 vs F32 KV on the CPU), so the device must
     * move it less than that */
    double bound;
} fcase;

static const fcase fcases[] = {
    {"models/stories260K.gguf", NULL, RP_TYPE_F32, 4, 1e-6},
    {"models/synth/qwen3-tiny.gguf", NULL, RP_TYPE_F16, 4, 1e-6},
    {"models/synth/qwen3-tiny-Q4_K_M.gguf", NULL, RP_TYPE_F16, 4, 0},
    {"models/synth/gemma3-tiny.gguf", NULL, RP_TYPE_F16, 18, 1e-6},
    {"models/synth/qwen3-tiny.gguf", "3,5", RP_TYPE_F32, 4, 1e-6},
};

static bool open_case(const fcase *fc, rp_model **m, rp_context **c) {
    *c = NULL;
    rp_status s = rp_model_load(test_shared(fc->model), NULL, m);
    CHECK(!s, "%s: %s", fc->model, rp_last_error());
    if (s) return false;
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 16;
    cp.n_seq_max = 2;
    cp.n_threads = 1;
    cp.type_k = cp.type_v = fc->type_kv;
    cp.repeat_layers = fc->repeat;
    s = rp_context_new(*m, &cp, c);
    CHECK(!s, "%s: context: %s", fc->model, rp_last_error());
    if (s) rp_model_free(*m);
    return !s;
}

static rp_backend *cpu_of(rp_context *c) {
    rp_backend_params p = {.cc = &c->cc,
                           .attn_scratch = c->attn_scratch,
                           .attn_scratch_per_thread = c->attn_scratch_per_thread};
    rp_backend *be = NULL;
    rp_status s = rp_backend_cpu_new(&p, &be);
    CHECK(!s, "cpu backend: %s", rp_last_error());
    return be;
}

/* the interface forward of m under c's plan on be, with its own caches */
static bool fwd_probed(rp_backend *be, const rp_model *m, rp_context *c, int type_kv, int n_batch,
                       probe *pr, run_out *r) {
    bfwd f;
    rp_status s = bfwd_init(&f, be, m, c->plan, c->n_ubatch, c->n_seq, c->n_ctx, type_kv, type_kv);
    CHECK(!s, "%s: forward: %s", be->name, rp_last_error());
    if (s) return false;
    f.pr = pr;
    const bool ok = run_fwd(&f, m->hp.n_vocab, n_batch, r);
    bfwd_free(&f);
    return ok;
}

static bool fwd_on(rp_backend *be, const rp_model *m, rp_context *c, int type_kv, int n_batch,
                   run_out *r) {
    return fwd_probed(be, m, c, type_kv, n_batch, NULL, r);
}

void test_backend_fwd_cpu(void) {
    for (size_t i = 0; i < RP_ARRAY_LEN(fcases); i++) {
        const fcase *fc = &fcases[i];
        rp_model *m;
        rp_context *c;
        if (!open_case(fc, &m, &c)) continue;
        rp_backend *be = cpu_of(c);
        run_out want = {0}, got = {0};
        if (be && fwd_on(be, m, c, fc->type_kv, fc->n_batch, &got) &&
            run_decode(c, fc->n_batch, &want))
            for (int b = 0; b < fc->n_batch; b++)
                CHECK(!memcmp(want.logits[b], got.logits[b],
                              (size_t)want.n_rows[b] * (size_t)m->hp.n_vocab * 4),
                      "%s%s%s batch %d: the interface forward differs from rp_decode (max |delta| "
                      "%.3g)",
                      fc->model, fc->repeat ? " --repeat-layers " : "",
                      fc->repeat ? fc->repeat : "", b,
                      test_max_abs_diff(want.logits[b], got.logits[b],
                                        (size_t)want.n_rows[b] * (size_t)m->hp.n_vocab));
        run_free(&want);
        run_free(&got);
        rp_backend_free(be);
        rp_context_free(c);
        rp_model_free(m);
    }
}

/* worst NMSE of b against a, and the rows whose greedy token agrees */
static double compare_runs(const run_out *a, const run_out *b, int nv, int *agree, int *rows) {
    double worst = 0;
    *agree = *rows = 0;
    for (int k = 0; k < a->n_batch; k++) {
        worst = fmax(worst, test_nmse(a->logits[k], b->logits[k], (size_t)a->n_rows[k] * nv));
        for (int r = 0; r < a->n_rows[k]; r++, (*rows)++)
            *agree += argmax(a->logits[k] + (size_t)r * nv, nv) ==
                      argmax(b->logits[k] + (size_t)r * nv, nv);
    }
    return worst;
}

/* the device's copies of a model's weights go with it (the next model may
 * reuse the addresses) */
static void forget_model(rp_backend *be, const rp_model *m) {
    for (int l = 0; l < m->hp.n_layer; l++) {
        const rp_layer *L = &m->layers[l];
        const rp_tensor *t[] = {L->attn_norm,
                                L->wq,
                                L->wk,
                                L->wv,
                                L->wo,
                                L->q_norm,
                                L->k_norm,
                                L->attn_post_norm,
                                L->ffn_norm,
                                L->ffn_gate,
                                L->ffn_up,
                                L->ffn_down,
                                L->ffn_post_norm,
                                L->bq,
                                L->bk,
                                L->bv,
                                L->bo,
                                L->attn_norm_b,
                                L->ffn_norm_b};
        for (size_t k = 0; k < RP_ARRAY_LEN(t); k++) rp_be_forget(be, t[k]);
    }
    rp_be_forget(be, m->tok_embd);
    rp_be_forget(be, m->output_norm);
    rp_be_forget(be, m->output_norm_b);
    rp_be_forget(be, m->output);
}

static void vk_case(tb_env *env, const fcase *fc) {
    rp_model *m;
    rp_context *c;
    if (!open_case(fc, &m, &c)) return;
    rp_backend *cpu = cpu_of(c), *vk = env->vk;
    run_out rc = {0}, rv = {0}, rs = {0};
    const rp_backend_stats before = vk->stats;
    const int nv = m->hp.n_vocab;
    if (cpu && fwd_on(cpu, m, c, fc->type_kv, fc->n_batch, &rc) &&
        fwd_on(vk, m, c, fc->type_kv, fc->n_batch, &rv)) {
        int agree, rows;
        const double d = compare_runs(&rc, &rv, nv, &agree, &rows);
        double bound = fc->bound;
        if (bound == 0) { /* the model's own sensitivity */
            const int other = fc->type_kv == RP_TYPE_F16 ? RP_TYPE_F32 : RP_TYPE_F16;
            int a2, r2;
            if (fwd_on(cpu, m, c, other, fc->n_batch, &rs))
                bound = compare_runs(&rc, &rs, nv, &a2, &r2);
        }
        char what[96];
        snprintf(what, sizeof what, "%s%s%s", strrchr(fc->model, '/') + 1,
                 fc->repeat ? " rys " : "", fc->repeat ? fc->repeat : "");
        CHECK(d <= bound, "%s: logits NMSE %.3g on the device, bound %.3g", what, d, bound);
        if (fc->bound > 0)
            CHECK(agree == rows, "%s: %d of %d rows' greedy tokens differ", what, rows - agree,
                  rows);
        tb_figure("forward", what, "NMSE", d, bound);
    }
    run_free(&rc);
    run_free(&rv);
    run_free(&rs);
    forget_model(vk, m);
    CHECK(vk->stats.weight_bytes == before.weight_bytes, "%s: weights left on the device",
          fc->model);
    rp_backend_free(cpu);
    rp_context_free(c);
    rp_model_free(m);
}

void test_backend_fwd_vk(void) {
    tb_env *env = tb_env_get(TB_VK);
    if (!env) return;
    for (size_t i = 0; i < RP_ARRAY_LEN(fcases); i++) vk_case(env, &fcases[i]);
}

/* A RYS plan on the device: the identity plan's weights (each uploaded
 * once), KV growing by n_eff / n_layer. */
void test_backend_fwd_vk_rys_memory(void) {
    tb_env *env = tb_env_get(TB_VK);
    if (!env) return;
    static const char *const specs[2] = {NULL, "3,5;1,2"};
    uint64_t w[2] = {0}, kv[2] = {0};
    int n_eff[2] = {0}, n_layer = 0;
    for (int k = 0; k < 2; k++) {
        const fcase fc = {"models/synth/qwen3-tiny.gguf", specs[k], RP_TYPE_F16, 1, 1e-6};
        rp_model *m;
        rp_context *c;
        if (!open_case(&fc, &m, &c)) return;
        const rp_backend_stats before = env->vk->stats;
        bfwd f;
        rp_status s = bfwd_init(&f, env->vk, m, c->plan, c->n_ubatch, c->n_seq, c->n_ctx,
                                RP_TYPE_F16, RP_TYPE_F16);
        CHECK(!s, "forward: %s", rp_last_error());
        w[k] = env->vk->stats.weight_bytes - before.weight_bytes;
        kv[k] = env->vk->stats.kv_bytes - before.kv_bytes;
        n_eff[k] = c->plan->n_eff;
        n_layer = m->hp.n_layer;
        if (!s) bfwd_free(&f);
        forget_model(env->vk, m);
        rp_context_free(c);
        rp_model_free(m);
    }
    CHECK(w[1] == w[0] && w[0] > 0, "rys plan: %llu weight bytes on the device, identity %llu",
          (unsigned long long)w[1], (unsigned long long)w[0]);
    CHECK(n_eff[1] == n_layer + 3 && kv[1] * (uint64_t)n_layer == kv[0] * (uint64_t)n_eff[1],
          "rys KV %llu bytes for %d steps, identity %llu for %d", (unsigned long long)kv[1],
          n_eff[1], (unsigned long long)kv[0], n_layer);
}

static void lockstep(tb_env *env, const rp_model *m, rp_context *c, int type_kv, int n_batch,
                     const char *what);

/* A trained model (models/demo-llama.gguf, F16) with its matrices quantized
 * in memory to a mixture of types, as a quantized file would hold them:
 * the device within NMSE 1e-5 of the CPU. */
typedef struct qmodel {
    rp_model m;
    rp_layer *layers;
    tb_weight *w;
    int n_w;
} qmodel;

static const rp_tensor *quantized(qmodel *q, const rp_tensor *t, int type) {
    const int ne0 = (int)t->ne[0], rows = (int)t->ne[1];
    if (ne0 % rp_type_get(type)->blck_size) type = RP_TYPE_Q8_0;
    tb_weight *w = &q->w[q->n_w++];
    float *row = malloc(sizeof(float) * (size_t)ne0);
    tb_weight_make(w, type, ne0, rows, 1);
    for (int r = 0; r < rows; r++) {
        rp_type_get(t->type)->to_float(rp_tensor_row(t, r), row, ne0);
        rp_type_get(type)->from_float(row, (char *)w->data + w->t.row_bytes * (size_t)r, ne0);
    }
    free(row);
    return &w->t;
}

static bool qmodel_make(qmodel *q, const rp_model *src) {
    static const int down[] = {RP_TYPE_Q4_K, RP_TYPE_Q6_K, RP_TYPE_Q5_K,
                               RP_TYPE_Q3_K, RP_TYPE_Q2_K, RP_TYPE_IQ4_XS};
    static const int attn[] = {RP_TYPE_Q8_0, RP_TYPE_Q4_0, RP_TYPE_Q5_0,
                               RP_TYPE_Q4_1, RP_TYPE_Q5_1, RP_TYPE_IQ4_NL};
    memset(q, 0, sizeof *q);
    q->m = *src;
    const int nl = src->hp.n_layer;
    q->layers = malloc(sizeof *q->layers * (size_t)nl);
    q->w = calloc((size_t)nl * 7 + 1, sizeof *q->w);
    if (!q->layers || !q->w) return false;
    for (int l = 0; l < nl; l++) {
        rp_layer L = src->layers[l];
        L.wq = quantized(q, L.wq, attn[l % 6]);
        L.wk = quantized(q, L.wk, attn[(l + 1) % 6]);
        L.wv = quantized(q, L.wv, attn[(l + 2) % 6]);
        L.wo = quantized(q, L.wo, attn[(l + 3) % 6]);
        L.ffn_gate = quantized(q, L.ffn_gate, attn[(l + 4) % 6]);
        L.ffn_up = quantized(q, L.ffn_up, attn[(l + 5) % 6]);
        L.ffn_down = quantized(q, L.ffn_down, down[l % 6]);
        q->layers[l] = L;
    }
    q->m.output = quantized(q, src->output, RP_TYPE_Q8_0);
    q->m.layers = q->layers;
    return true;
}

static void qmodel_free(qmodel *q) {
    for (int i = 0; i < q->n_w; i++) tb_weight_free(&q->w[i]);
    free(q->w);
    free(q->layers);
}

void test_backend_fwd_vk_quantized(void) {
    tb_env *env = tb_env_get(TB_VK);
    if (!env) return;
    const int n_batch = 4;
    rp_model *m;
    rp_context *c;
    rp_status s = rp_model_load("models/demo-llama.gguf", NULL, &m);
    REQUIRE(!s, "models/demo-llama.gguf: %s", rp_last_error());
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 16;
    cp.n_seq_max = 2;
    cp.n_threads = 1;
    if ((s = rp_context_new(m, &cp, &c))) {
        CHECK(false, "context: %s", rp_last_error());
        rp_model_free(m);
        return;
    }
    qmodel q;
    rp_backend *cpu = cpu_of(c);
    run_out rc = {0}, rv = {0}, rs = {0};
    if (cpu && qmodel_make(&q, m) && fwd_on(cpu, &q.m, c, RP_TYPE_F16, n_batch, &rc) &&
        fwd_on(env->vk, &q.m, c, RP_TYPE_F16, n_batch, &rv) &&
        fwd_on(cpu, &q.m, c, RP_TYPE_F32, n_batch, &rs)) {
        int agree, rows, a2, r2;
        const double d = compare_runs(&rc, &rv, m->hp.n_vocab, &agree, &rows);
        const double sens = compare_runs(&rc, &rs, m->hp.n_vocab, &a2, &r2);
        CHECK(d <= 1e-5,
              "demo-llama quantized: logits NMSE %.3g on the device (the CPU's "
              "F16 vs F32 cache: %.3g)",
              d, sens);
        CHECK(agree == rows, "demo-llama quantized: %d of %d rows' greedy tokens differ",
              rows - agree, rows);
        tb_figure("forward", "demo-llama, 13 quantized types", "NMSE", d, 1e-5);
        tb_figure("forward", "(the CPU, F16 vs F32 KV)", "NMSE", sens, 1e-5);
        lockstep(env, &q.m, c, RP_TYPE_F16, n_batch, "demo-llama quantized");
    }
    run_free(&rc);
    run_free(&rv);
    run_free(&rs);
    forget_model(env->vk, &q.m);
    qmodel_free(&q);
    forget_model(env->vk, m);
    rp_backend_free(cpu);
    rp_context_free(c);
    rp_model_free(m);
}

/* every op of the forwards in lock-step: fed the CPU's inputs, the device's
 * result within NMSE 1e-10 of the CPU's */
static void lockstep(tb_env *env, const rp_model *m, rp_context *c, int type_kv, int n_batch,
                     const char *what) {
    rp_backend *cpu = cpu_of(c);
    probe pr = {.record = true};
    run_out rc = {0}, rv = {0};
    if (cpu && fwd_probed(cpu, m, c, type_kv, n_batch, &pr, &rc)) {
        pr.record = false;
        if (fwd_probed(env->vk, m, c, type_kv, n_batch, &pr, &rv)) {
            int agree, rows;
            const double d = compare_runs(&rc, &rv, m->hp.n_vocab, &agree, &rows);
            CHECK(pr.at == pr.n, "%s: %d of %d ops compared", what, pr.at, pr.n);
            CHECK(pr.worst <= 1e-10, "%s: in lock-step, %s has NMSE %.3g", what, pr.worst_op,
                  pr.worst);
            CHECK(d <= 1e-10, "%s: in lock-step, the output rows have NMSE %.3g", what, d);
            char w[96];
            snprintf(w, sizeof w, "%s (%d ops)", what, pr.n);
            tb_figure("lock-step worst op", w, "NMSE", fmax(pr.worst, d), 1e-10);
        }
    }
    run_free(&rc);
    run_free(&rv);
    probe_free(&pr);
    rp_backend_free(cpu);
}

void test_backend_fwd_vk_lockstep(void) {
    tb_env *env = tb_env_get(TB_VK);
    if (!env) return;
    for (size_t i = 0; i < RP_ARRAY_LEN(fcases); i++) {
        const fcase *fc = &fcases[i];
        rp_model *m;
        rp_context *c;
        if (fc->repeat || !open_case(fc, &m, &c)) continue;
        /* four batches: prompts of both sequences and generation (the rings'
         * wrap-around is the forward test's and the attention test's) */
        lockstep(env, m, c, fc->type_kv, RP_MIN(fc->n_batch, 4), strrchr(fc->model, '/') + 1);
        forget_model(env->vk, m);
        rp_context_free(c);
        rp_model_free(m);
    }
}
