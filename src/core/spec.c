/* Speculative decoding from the same weights: a cheaper plan or the MTP head
 * drafts, the target plan verifies (see spec.h for the contract).
 *
 * Per sequence the spec keeps the token history hist[0..H). The target's
 * cache lags the history by at least one token: the last token is decoded in
 * the next step's verification batch together with the drafted tokens, whose
 * rows give the target's distributions. The draft's cache lags the same way.
 *
 * Except after a feed (a prompt, a turn): the target decodes every fed token
 * in one call, as plain decoding decodes a prompt (the same micro-batches,
 * the same batch orders, logits of the last row only), and keeps the last
 * row's logits (full): the next step verifies its drafts alone. Every other
 * target decode (a backlog of generated or accepted tokens, a verification
 * batch) runs with rp_compute.one_tok, so each row is computed as plain
 * decoding computes its one token: greedy output equals plain decoding's bit
 * for bit even where batches take other orders (docs/fidelity.md). A caller
 * of rp_spec_prepare / rp_spec_finish (a server, verifying in its own batch)
 * keeps the older contract: the first such call ends the full state for good
 * (split_api).
 *
 * Invariants between calls, for a sequence of H tokens:
 *   target: rp_kv_seq_len(target) <= H - 1 (or == H when full), its cache
 *           holds hist[0..len);
 *   draft:  rp_kv_seq_len(draft)  <= H - 1, likewise;
 *   MTP:    head length <= max(0, H - 2), and the target's hidden states of
 *           the positions [head length, target length) are in the sequence's
 *           buffer (hid), so the head can catch up before it drafts.
 * A recurrent target decodes any backlog beyond the last token on its own
 * before a speculative step (a checkpoint must sit right before the drafted
 * rows, or a rejection would throw away the backlog again). */
#include "core/spec.h"
#include "core/context.h"
#include "core/draft.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_DRAFT_MAX 8
/* llama.cpp's default: a draft token the draft itself doubts is rarely kept */
#define DEFAULT_P_MIN 0.75f
/* rows per target decode while the MTP head needs every row's hidden state
 * (each row then also gets logits: this bounds that buffer) */
#define HIDDEN_CHUNK 64

typedef struct spec_seq {
    bool ready;   /* rp_spec_seq_reset was called */
    bool greedy;  /* temp <= 0 */
    int32_t *tok; /* [cap] history */
    int n, cap;
    rp_sampler *smp;  /* target sampler: its penalty window follows the history */
    rp_sampler *dsmp; /* the draft's: same parameters, same history */
    rp_grammar *g;    /* constrains both samplers, or NULL (rp_spec_seq_set_grammar) */
    rp_rng rng;       /* draft draws and acceptance draws */
    bool full;        /* the target holds hist[0..n) and lg its last row's logits */
    float *lg;        /* [n_vocab] */
    rp_spec_stats st;
    /* MTP: the target's hidden states (pre-norm) of positions
     * [hid_pos, hid_pos + hid_n) */
    float *hid; /* [hid_cap][n_embd] */
    int hid_pos, hid_n, hid_cap;
    /* between rp_spec_prepare and rp_spec_finish */
    bool prepared;
    int p_h;     /* history length at prepare */
    int p_nd;    /* tokens drafted */
    bool p_full; /* prepared while full: the rows are the drafts alone */
    int32_t drafts[RP_SPEC_DRAFT_MAX];
    float *q;                       /* [draft_max][n_vocab] draft distributions (sampling) */
    rp_seq_checkpoint *ck_t, *ck_d; /* saved before the speculative rows */
} spec_seq;

struct rp_spec {
    rp_context *t;       /* target (the caller's) */
    rp_context *d;       /* draft plan context, or NULL */
    rp_draft_head *head; /* the model's draft head (MTP), or NULL */
    rp_spec_params p;
    char *draft_plan; /* owned copy ("" = trunk once) */
    int n_seq, n_ctx, n_vocab, n_embd;
    bool t_rec, d_rec;
    bool split_api; /* rp_spec_prepare was called: no full state (see above) */
    spec_seq *seq;  /* [n_seq] */
    /* scratch */
    int32_t *b_tok, *b_seq; /* [b_cap] */
    int8_t *b_want;         /* [b_cap] */
    int b_cap;
    float *pv;       /* [n_vocab] target distribution of a row */
    float *h_logits; /* [n_vocab] MTP head logits */
    float *h_cur;    /* [n_embd] the head's last h_nextn */
    float *h_next;   /* [n_embd] */
    int32_t *h_tok;  /* [HIDDEN_CHUNK + RP_SPEC_DRAFT_MAX + 1] head rows: tokens */
    int32_t *h_pos;  /* same: positions */
    int32_t *h_seqv; /* same: sequence ids */
};

rp_spec_params rp_spec_default_params(void) {
    rp_spec_params p = {0};
    p.draft_max = DEFAULT_DRAFT_MAX;
    p.p_min = DEFAULT_P_MIN;
    return p;
}

/* ---- the acceptance rule ------------------------------------------------- */

static int32_t draw(const float *p, int n, double u) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += p[i];
    double x = u * sum, cum = 0;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        if (p[i] <= 0) continue;
        cum += p[i];
        last = i;
        if (x < cum) return i;
    }
    return last >= 0 ? last : 0;
}

int32_t rp_spec_accept_rule(const float *p, const float *q, int n, int32_t d, double u1, double u2,
                            bool *accepted) {
    /* accept with min(1, p(d)/q(d)); q(d) > 0 since d was drawn from q */
    if (d >= 0 && d < n && q[d] > 0 && u1 * (double)q[d] < (double)p[d]) {
        *accepted = true;
        return d;
    }
    *accepted = false;
    /* residual max(0, p - q), normalized: drawn without a buffer */
    double sum = 0;
    for (int i = 0; i < n; i++) sum += p[i] > q[i] ? (double)p[i] - (double)q[i] : 0.0;
    if (!(sum > 0)) return draw(p, n, u2);
    double x = u2 * sum, cum = 0;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        if (p[i] <= q[i]) continue;
        cum += (double)p[i] - (double)q[i];
        last = i;
        if (x < cum) return i;
    }
    return last;
}

/* Probability of the most likely token under softmax(logits). */
static float top_prob(const float *logits, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, logits[i]);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)(logits[i] - mx));
    return (float)(1.0 / sum);
}

/* ---- lifetime ------------------------------------------------------------ */

static void seq_free(spec_seq *q) {
    free(q->tok);
    free(q->hid);
    free(q->q);
    free(q->lg);
    rp_seq_checkpoint_free(q->ck_t);
    rp_seq_checkpoint_free(q->ck_d);
    rp_sampler_free(q->smp);
    rp_sampler_free(q->dsmp);
    memset(q, 0, sizeof *q);
}

void rp_spec_free(rp_spec *s) {
    if (!s) return;
    rp_context_free(s->d);
    rp_draft_head_free(s->head);
    for (int i = 0; s->seq && i < s->n_seq; i++) seq_free(&s->seq[i]);
    free(s->seq);
    free(s->draft_plan);
    free(s->b_tok);
    free(s->b_seq);
    free(s->b_want);
    free(s->pv);
    free(s->h_logits);
    free(s->h_cur);
    free(s->h_next);
    free(s->h_tok);
    free(s->h_pos);
    free(s->h_seqv);
    free(s);
}

rp_status rp_spec_new(rp_context *t, const rp_spec_params *params, rp_spec **out) {
    *out = NULL;
    if (!t) return rp_fail(RP_ERR_INVALID_ARG, "speculative decoding: no target context");
    rp_spec_params p = params ? *params : rp_spec_default_params();
    if (p.draft_max == 0) p.draft_max = DEFAULT_DRAFT_MAX;
    const bool has_plan = p.draft_plan && *p.draft_plan;
    if (p.draft_max < 1 || p.draft_max > RP_SPEC_DRAFT_MAX)
        return rp_fail(RP_ERR_INVALID_ARG, "speculative decoding: draft-max %d is outside 1..%d",
                       p.draft_max, RP_SPEC_DRAFT_MAX);
    if (p.draft_min < 0 || p.draft_min > p.draft_max)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "speculative decoding: draft-min %d is outside 0..draft-max (%d)",
                       p.draft_min, p.draft_max);
    if (!(p.p_min >= 0.0f && p.p_min <= 1.0f))
        return rp_fail(RP_ERR_INVALID_ARG, "speculative decoding: draft-p-min %g is outside [0, 1]",
                       (double)p.p_min);
    if (p.mtp && has_plan)
        return rp_fail(
            RP_ERR_INVALID_ARG,
            "speculative decoding: the MTP head and a draft plan are alternatives; give one");
    if (p.draft_max + 1 > t->n_ubatch)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "speculative decoding: draft-max %d needs a micro-batch of at least %d "
                       "tokens (it is %d)",
                       p.draft_max, p.draft_max + 1, t->n_ubatch);
    const rp_model *m = t->model;
    if (p.mtp) {
        if (!rp_draft_head_available(m))
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "speculative decoding: %s has no NextN/MTP head to draft with (%s)",
                           m->path, rp_draft_head_needs(m));
        if (t->on_device)
            return rp_fail(RP_ERR_UNSUPPORTED,
                           "speculative decoding: the MTP head runs on the CPU only, the target "
                           "on %s; draft with a layer plan there, or run on the CPU",
                           t->be->name);
        if (!t->params.keep_hidden)
            return rp_fail(RP_ERR_INVALID_ARG, "speculative decoding: the MTP head drafts from the "
                                               "target's hidden states; make the "
                                               "target context with keep_hidden");
    }
    rp_spec *s = rp_calloc(1, sizeof *s, "speculative decoding");
    if (!s) return RP_ERR_NOMEM;
    s->t = t;
    s->n_seq = t->n_seq;
    s->n_ctx = t->n_ctx;
    s->n_vocab = m->hp.n_vocab;
    s->n_embd = m->hp.n_embd;
    s->t_rec = rp_context_has_recurrent(t);
    s->draft_plan = rp_strdup(has_plan ? p.draft_plan : "");
    p.draft_plan = s->draft_plan;
    s->p = p;
    rp_status st = RP_OK;
    const size_t nv = (size_t)s->n_vocab, ne = (size_t)s->n_embd;
    const int h_rows = HIDDEN_CHUNK + RP_SPEC_DRAFT_MAX + 1;
    s->seq = rp_calloc((size_t)s->n_seq, sizeof *s->seq, "speculative sequences");
    s->pv = rp_malloc(nv * sizeof(float), "target distribution");
    if (!s->draft_plan || !s->seq || !s->pv) {
        st = RP_ERR_NOMEM;
        goto fail;
    }
    if (p.mtp) {
        if ((st = rp_draft_head_new(t, &s->head))) goto fail;
        s->h_logits = rp_malloc(nv * sizeof(float), "MTP logits");
        s->h_cur = rp_malloc(ne * sizeof(float), "MTP hidden state");
        s->h_next = rp_malloc(ne * sizeof(float), "MTP hidden state");
        s->h_tok = rp_malloc((size_t)h_rows * sizeof(int32_t), "MTP rows");
        s->h_pos = rp_malloc((size_t)h_rows * sizeof(int32_t), "MTP rows");
        s->h_seqv = rp_malloc((size_t)h_rows * sizeof(int32_t), "MTP rows");
        if (!s->h_logits || !s->h_cur || !s->h_next || !s->h_tok || !s->h_pos || !s->h_seqv) {
            st = RP_ERR_NOMEM;
            goto fail;
        }
    } else {
        rp_context_params cp = rp_context_default_params();
        cp.n_ctx = (uint32_t)t->n_ctx;
        cp.n_batch = (uint32_t)t->n_ubatch;
        cp.n_seq_max = (uint32_t)t->n_seq;
        cp.n_threads = t->n_threads;
        cp.type_k = t->params.type_k;
        cp.type_v = t->params.type_v;
        cp.layer_map = has_plan ? s->draft_plan : NULL; /* never the target's plan */
        cp.device = t->on_device ? t->be->name : NULL;  /* where the target runs */
        if ((st = rp_context_new(m, &cp, &s->d))) {
            rp_fail_prefix(st, "draft plan '%s'", has_plan ? s->draft_plan : "(the trunk once)");
            goto fail;
        }
        /* The draft runs between the target's decodes, never beside them: one
         * set of worker threads serves both. */
        if ((st = rp_context_share_pool(s->d, t))) goto fail;
        s->d_rec = rp_context_has_recurrent(s->d);
    }
    *out = s;
    return RP_OK;
fail:
    rp_spec_free(s);
    return st;
}

const rp_context *rp_spec_draft_context(const rp_spec *s) {
    return s->d;
}

uint64_t rp_spec_state_bytes(const rp_spec *s) {
    return s->d ? rp_context_state_bytes(s->d) : rp_draft_head_state_bytes(s->head);
}

int rp_spec_describe(const rp_spec *s, char *buf, size_t size) {
    rp_buf b = {0};
    if (s->head) {
        rp_buf_printf(&b, "draft: NextN/MTP head (layer %d) on the target's %s hidden state",
                      s->t->model->hp.n_trunk,
                      rp_plan_is_identity(s->t->plan) ? "final" : "plan's final");
    } else {
        const rp_plan *dp = s->d->plan;
        rp_buf_printf(&b, "draft: %s%s (%d of the target's %d steps)",
                      *s->draft_plan ? "plan " : "the trunk once", s->draft_plan, dp->n_eff,
                      s->t->plan->n_eff);
        bool same = dp->n_eff == s->t->plan->n_eff;
        for (int e = 0; same && e < dp->n_eff; e++) same = dp->src[e] == s->t->plan->src[e];
        if (same)
            rp_buf_printf(&b,
                          ", the target's own steps: every draft is accepted and nothing is saved");
    }
    rp_buf_printf(&b, "; draft-max %d", s->p.draft_max);
    if (s->p.draft_min) rp_buf_printf(&b, ", draft-min %d", s->p.draft_min);
    if (s->p.p_min > 0) rp_buf_printf(&b, ", draft-p-min %g", (double)s->p.p_min);
    rp_buf_printf(&b, "; %.2f MiB of draft state", (double)rp_spec_state_bytes(s) / 1048576.0);
    int n = (int)b.len;
    if (size) snprintf(buf, size, "%s", b.data ? b.data : "");
    rp_buf_free(&b);
    return n;
}

/* ---- helpers ------------------------------------------------------------- */

static rp_status seq_check(const rp_spec *s, int seq, const char *what) {
    if (seq < 0 || seq >= s->n_seq)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "speculative %s: sequence %d out of range (%d sequences)", what, seq,
                       s->n_seq);
    if (!s->seq[seq].ready)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "speculative %s: sequence %d was not started (rp_spec_seq_reset)", what,
                       seq);
    return RP_OK;
}

static bool hist_push(spec_seq *q, const int32_t *t, int n) {
    if (q->n + n > q->cap) {
        int cap = (q->n + n) * 2 + 64;
        int32_t *nt = rp_realloc(q->tok, (size_t)cap * sizeof *nt, "token history");
        if (!nt) return false;
        q->tok = nt;
        q->cap = cap;
    }
    memcpy(q->tok + q->n, t, (size_t)n * sizeof *t);
    q->n += n;
    return true;
}

static bool batch_room(rp_spec *s, int n) {
    if (n <= s->b_cap) return true;
    int cap = n * 2;
    int32_t *a = rp_realloc(s->b_tok, (size_t)cap * sizeof *a, "speculative batch");
    if (a) s->b_tok = a;
    int32_t *b = rp_realloc(s->b_seq, (size_t)cap * sizeof *b, "speculative batch");
    if (b) s->b_seq = b;
    int8_t *c = rp_realloc(s->b_want, (size_t)cap * sizeof *c, "speculative batch");
    if (c) s->b_want = c;
    if (!a || !b || !c) return false;
    s->b_cap = cap;
    return true;
}

/* Appends tokens to the history and the samplers' windows. */
static bool take(spec_seq *q, const int32_t *t, int n) {
    if (!hist_push(q, t, n)) return false;
    for (int i = 0; i < n; i++) {
        rp_sampler_accept(q->smp, t[i]);
        rp_sampler_accept(q->dsmp, t[i]);
    }
    return true;
}

/* take() for one generated token, which also advances the grammar. */
static rp_status take_generated(spec_seq *q, int32_t t) {
    if (t < 0)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "speculative step: the grammar allows no token at this point");
    if (q->g) {
        rp_status st = rp_grammar_accept(q->g, t);
        if (st) return st;
    }
    return take(q, &t, 1) ? RP_OK : RP_ERR_NOMEM;
}

/* MTP: stores the hidden states of the output rows of the target's last
 * decode (rows [0, n) at positions pos0 + row) that the buffer lacks. */
static rp_status hid_store_rows(rp_spec *s, spec_seq *q, int pos0, int row0, int n) {
    const size_t ne = (size_t)s->n_embd;
    for (int i = 0; i < n; i++) {
        const int pos = pos0 + i;
        if (pos < q->hid_pos) continue;
        const int k = pos - q->hid_pos;
        if (k > q->hid_n)
            return rp_fail(RP_ERR_INTERNAL,
                           "speculative decoding: hidden states of positions %d..%d are missing",
                           q->hid_pos + q->hid_n, pos - 1);
        if (k < q->hid_n) continue; /* already there (the same tokens give the same state) */
        const float *h = rp_get_hidden(s->t, row0 + i);
        if (!h)
            return rp_fail(RP_ERR_INTERNAL,
                           "speculative decoding: the target gave no hidden state for position %d",
                           pos);
        if (q->hid_n == q->hid_cap) {
            int cap = q->hid_cap * 2 + 16;
            float *nh = rp_realloc(q->hid, (size_t)cap * ne * sizeof(float), "MTP hidden states");
            if (!nh) return RP_ERR_NOMEM;
            q->hid = nh;
            q->hid_cap = cap;
        }
        memcpy(q->hid + (size_t)q->hid_n * ne, h, ne * sizeof(float));
        q->hid_n++;
    }
    return RP_OK;
}

/* MTP: forgets the buffer's rows before position p. */
static void hid_drop_before(rp_spec *s, spec_seq *q, int p) {
    const int k = RP_MIN(q->hid_n, p - q->hid_pos);
    if (k <= 0) return;
    memmove(q->hid, q->hid + (size_t)k * (size_t)s->n_embd,
            (size_t)(q->hid_n - k) * (size_t)s->n_embd * sizeof(float));
    q->hid_n -= k;
    q->hid_pos += k;
}

/* rp_decode with c's one-token orders on or off (rp_compute.one_tok). */
static rp_status decode_in(rp_context *c, const rp_batch *b, bool one_tok) {
    const bool was = c->cc.one_tok;
    c->cc.one_tok = one_tok;
    rp_status st = rp_decode(c, b);
    c->cc.one_tok = was;
    return st;
}

/* Decodes toks[0..n) at positions pos0.. of seq into c, in one rp_decode
 * (one_tok: in the one-token orders). Rows at positions >= out_from give
 * logits. With capture (the MTP target) the rows whose hidden state the
 * buffer lacks give outputs too and are stored; then a long run of such rows
 * is decoded in chunks of HIDDEN_CHUNK outputs (each output row also gets
 * logits), the rows from out_from on always in the last one. */
static rp_status decode_rows(rp_spec *s, rp_context *c, int seq, const int32_t *toks, int pos0,
                             int n, int out_from, bool capture, bool one_tok) {
    spec_seq *q = &s->seq[seq];
    for (int i0 = 0; i0 < n;) {
        const int hid_end = q->hid_pos + q->hid_n;
        int k = n - i0;
        if (capture) {
            const int first = RP_MAX(pos0 + i0, RP_MIN(hid_end, out_from)) - (pos0 + i0);
            if (k - first > HIDDEN_CHUNK + RP_SPEC_DRAFT_MAX + 1) k = first + HIDDEN_CHUNK;
        }
        if (!batch_room(s, k)) return RP_ERR_NOMEM;
        for (int i = 0; i < k; i++) {
            const int pos = pos0 + i0 + i;
            s->b_tok[i] = toks[i0 + i];
            s->b_seq[i] = seq;
            s->b_want[i] = pos >= out_from || (capture && pos >= hid_end);
        }
        rp_batch b = {.n_tokens = k, .token = s->b_tok, .seq_id = s->b_seq, .logits = s->b_want};
        rp_status st = decode_in(c, &b, one_tok);
        if (st) return st;
        if (capture && (st = hid_store_rows(s, q, pos0 + i0, 0, k))) return st;
        i0 += k;
    }
    return RP_OK;
}

/* MTP: runs the head over positions [head length, end) with the target's
 * hidden states (rows the buffer holds). want_last: the last row's logits and
 * h_nextn go to h_logits / h_cur. */
static rp_status head_catch_up(rp_spec *s, int seq, int end, bool want_last) {
    spec_seq *q = &s->seq[seq];
    const int from = rp_draft_head_seq_len(s->head, seq);
    if (end <= from && want_last)
        return rp_fail(RP_ERR_INTERNAL,
                       "speculative decoding: MTP head at %d has no row left to draft from (%d)",
                       from, end);
    if (end <= from) return RP_OK;
    if (from < q->hid_pos || end > q->hid_pos + q->hid_n)
        return rp_fail(RP_ERR_INTERNAL,
                       "speculative decoding: MTP head at %d..%d, hidden states held for %d..%d",
                       from, end, q->hid_pos, q->hid_pos + q->hid_n);
    const int max_rows = HIDDEN_CHUNK + RP_SPEC_DRAFT_MAX + 1;
    for (int r0 = from; r0 < end;) {
        const int n = RP_MIN(max_rows, end - r0);
        /* the last row alone when its logits are wanted: logits are costly */
        const int n_plain = want_last && r0 + n == end ? n - 1 : n;
        for (int part = 0; part < 2; part++) {
            const int k = part == 0 ? n_plain : n - n_plain;
            const int p0 = part == 0 ? r0 : r0 + n_plain;
            if (k <= 0) continue;
            for (int i = 0; i < k; i++) {
                s->h_pos[i] = p0 + i;
                s->h_tok[i] = q->tok[p0 + i + 1];
                s->h_seqv[i] = seq;
            }
            rp_draft_batch mb = {
                .n = k,
                .token = s->h_tok,
                .hidden = q->hid + (size_t)(p0 - q->hid_pos) * (size_t)s->n_embd,
                .hidden_raw = true,
                .pos = s->h_pos,
                .seq = s->h_seqv,
                .logits = part == 1 ? s->h_logits : NULL,
                .hidden_out = part == 1 ? s->h_cur : NULL,
            };
            rp_status st = rp_draft_head_decode(s->head, &mb);
            if (st) return st;
        }
        r0 += n;
    }
    hid_drop_before(s, q, end);
    return RP_OK;
}

/* ---- sequences ------------------------------------------------------------ */

rp_status rp_spec_seq_reset(rp_spec *s, int seq, const rp_sampler_params *params) {
    if (seq < 0 || seq >= s->n_seq)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "speculative reset: sequence %d out of range (%d sequences)", seq, s->n_seq);
    spec_seq *q = &s->seq[seq];
    rp_sampler_params sp = params ? *params : rp_sampler_default_params();
    rp_sampler *a = rp_sampler_new(&sp, s->n_vocab), *b = rp_sampler_new(&sp, s->n_vocab);
    if (!a || !b) {
        rp_sampler_free(a);
        rp_sampler_free(b);
        return RP_ERR_NOMEM;
    }
    rp_sampler_free(q->smp);
    rp_sampler_free(q->dsmp);
    q->smp = a;
    q->dsmp = b;
    q->g = NULL;
    q->greedy = sp.temp <= 0;
    if (!q->greedy && !q->q) {
        q->q = rp_malloc((size_t)s->p.draft_max * (size_t)s->n_vocab * sizeof(float),
                         "draft distributions");
        if (!q->q) return RP_ERR_NOMEM;
    }
    if (s->t_rec && !q->ck_t && !(q->ck_t = rp_seq_checkpoint_new(s->t))) return RP_ERR_NOMEM;
    if (s->d_rec && !q->ck_d && !(q->ck_d = rp_seq_checkpoint_new(s->d))) return RP_ERR_NOMEM;
    q->prepared = false;
    rp_rng_seed(&q->rng, sp.seed ^ 0x5bec0de5u);
    q->n = 0;
    q->hid_pos = q->hid_n = 0;
    q->full = false;
    q->ready = true;
    rp_status st = rp_kv_seq_truncate(s->t, seq, 0);
    if (!st && s->d) st = rp_kv_seq_truncate(s->d, seq, 0);
    if (!st && s->head) st = rp_draft_head_truncate(s->head, seq, 0);
    return st;
}

int rp_spec_seq_len(const rp_spec *s, int seq) {
    return seq >= 0 && seq < s->n_seq && s->seq[seq].ready ? s->seq[seq].n : -1;
}

rp_spec_stats rp_spec_get_stats(const rp_spec *s, int seq) {
    rp_spec_stats r = {0};
    for (int i = 0; i < s->n_seq; i++) {
        if (seq >= 0 && i != seq) continue;
        r.steps += s->seq[i].st.steps;
        r.drafted += s->seq[i].st.drafted;
        r.accepted += s->seq[i].st.accepted;
        r.generated += s->seq[i].st.generated;
    }
    return r;
}

/* Brings the target's cache up to hist[0..end) (MTP: with the hidden states
 * the head will need); a backlog of generated or accepted tokens, which plain
 * decoding decoded one at a time, in the one-token orders (one_tok). */
static rp_status target_sync_to(rp_spec *s, int seq, int end, bool one_tok) {
    spec_seq *q = &s->seq[seq];
    const int lt = rp_kv_seq_len(s->t, seq);
    if (lt >= end) return RP_OK;
    return decode_rows(s, s->t, seq, q->tok + lt, lt, end - lt, s->n_ctx, s->head != NULL, one_tok);
}

static rp_status target_sync(rp_spec *s, int seq) {
    return s->seq[seq].full ? RP_OK : target_sync_to(s, seq, s->seq[seq].n - 1, true);
}

/* A feed's tokens hist[from..H) into the target as plain decoding decodes a
 * prompt: one call, batch orders, the last row's logits kept (full). */
static rp_status target_feed(rp_spec *s, int seq, int from) {
    spec_seq *q = &s->seq[seq];
    rp_status st;
    q->full = false;
    /* what plain decoding decoded before these tokens, one at a time */
    if ((st = target_sync_to(s, seq, from, true))) return st;
    if (!q->lg && !(q->lg = rp_malloc((size_t)s->n_vocab * sizeof(float), "target logits")))
        return RP_ERR_NOMEM;
    /* (MTP: every row gives its hidden state, plain decoding's last row alone
     * an output: the output rows in the one-token orders) */
    s->t->cc.one_tok_out = s->head != NULL;
    st = decode_rows(s, s->t, seq, q->tok + from, from, q->n - from, q->n - 1, s->head != NULL,
                     false);
    s->t->cc.one_tok_out = false;
    if (st) return st;
    const float *lg = rp_get_logits(s->t, s->t->n_batch_last - 1);
    if (!lg)
        return rp_fail(RP_ERR_INTERNAL,
                       "speculative feed: the target gave no logits for position %d", q->n - 1);
    memcpy(q->lg, lg, (size_t)s->n_vocab * sizeof(float));
    q->full = true;
    return RP_OK;
}

rp_status rp_spec_seq_feed(rp_spec *s, int seq, const int32_t *tokens, int n) {
    rp_status st = seq_check(s, seq, "feed");
    if (st) return st;
    spec_seq *q = &s->seq[seq];
    if (q->prepared)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "speculative feed: sequence %d has drafted rows waiting for rp_spec_finish",
                       seq);
    if (n < 0 || (n > 0 && !tokens))
        return rp_fail(RP_ERR_INVALID_ARG, "speculative feed: no tokens");
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab)
            return rp_fail(RP_ERR_INVALID_ARG,
                           "speculative feed: token %d has id %d, outside the vocabulary (0..%d)",
                           i, tokens[i], s->n_vocab - 1);
    if (q->n + n > s->n_ctx)
        return rp_fail(RP_ERR_CONTEXT_FULL,
                       "context full: sequence %d would hold %d tokens (n_ctx %d)", seq, q->n + n,
                       s->n_ctx);
    if (n == 0) return RP_OK;
    const int from = q->n;
    if (!take(q, tokens, n)) return RP_ERR_NOMEM;
    if (s->split_api) {
        if ((st = target_sync_to(s, seq, q->n - 1, false))) return st;
    } else if ((st = target_feed(s, seq, from))) {
        return st;
    }
    if (s->d) {
        const int ld = rp_kv_seq_len(s->d, seq);
        if (ld < q->n - 1 && (st = decode_rows(s, s->d, seq, q->tok + ld, ld, q->n - 1 - ld,
                                               s->n_ctx, false, false)))
            return st;
    }
    /* the head consumes what it can now: every row but the one that will
     * draft (position H-2), so the buffer stays short */
    if (s->head && q->n >= 3 && (st = head_catch_up(s, seq, q->n - 2, false))) return st;
    return RP_OK;
}

/* Cuts a context's sequence back to at most `valid` positions. */
static rp_status cut(rp_context *c, bool rec, rp_seq_checkpoint *ck, int seq, int valid) {
    const int len = rp_kv_seq_len(c, seq);
    if (len <= valid) return RP_OK;
    if (!rec || valid == 0) return rp_kv_seq_truncate(c, seq, valid);
    /* recurrent: back to the checkpoint when it is this sequence's and not
     * beyond valid, else start the sequence over (re-decoded lazily) */
    if (rp_seq_checkpoint_len(ck) >= 0 && rp_seq_checkpoint_len(ck) <= valid &&
        rp_seq_checkpoint_restore(c, seq, ck) == RP_OK)
        return RP_OK;
    rp_clear_error();
    return rp_kv_seq_truncate(c, seq, 0);
}

rp_status rp_spec_seq_set_grammar(rp_spec *s, int seq, rp_grammar *g) {
    rp_status st = seq_check(s, seq, "grammar");
    if (st) return st;
    spec_seq *q = &s->seq[seq];
    q->g = g;
    rp_sampler_set_grammar(q->smp, g);
    rp_sampler_set_grammar(q->dsmp, g);
    return RP_OK;
}

rp_status rp_spec_seq_each_sampler(rp_spec *s, int seq, rp_status (*fn)(rp_sampler *, void *),
                                   void *user) {
    rp_status st = seq_check(s, seq, "sampler setup");
    if (st) return st;
    spec_seq *q = &s->seq[seq];
    if ((st = fn(q->smp, user))) return st;
    return fn(q->dsmp, user);
}

rp_status rp_spec_seq_truncate(rp_spec *s, int seq, int n) {
    rp_status st = seq_check(s, seq, "truncate");
    if (st) return st;
    spec_seq *q = &s->seq[seq];
    if (n < 0 || n > q->n)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "speculative truncate: sequence %d has %d tokens, cannot keep %d", seq, q->n,
                       n);
    if (n == q->n) return RP_OK;
    q->n = n;
    q->full = false;
    rp_sampler_reset(q->smp);
    rp_sampler_reset(q->dsmp);
    for (int i = 0; i < n; i++) {
        rp_sampler_accept(q->smp, q->tok[i]);
        rp_sampler_accept(q->dsmp, q->tok[i]);
    }
    int t_valid = RP_MAX(0, n - 1);
    if (s->head) {
        /* the head must redo the row that drafts (position n-2) */
        const int h_valid = RP_MIN(rp_draft_head_seq_len(s->head, seq), RP_MAX(0, n - 2));
        if ((st = rp_draft_head_truncate(s->head, seq, h_valid))) return st;
        if (q->hid_pos > h_valid) {
            q->hid_pos = h_valid;
            q->hid_n = 0;
        } else {
            hid_drop_before(s, q, h_valid);
        }
        q->hid_n = RP_MAX(0, RP_MIN(q->hid_n, t_valid - q->hid_pos));
        /* the target recomputes the hidden states the buffer lacks */
        t_valid = RP_MIN(t_valid, q->hid_pos + q->hid_n);
    }
    q->prepared = false;
    if ((st = cut(s->t, s->t_rec, q->ck_t, seq, t_valid))) return st;
    if (s->d && (st = cut(s->d, s->d_rec, q->ck_d, seq, RP_MAX(0, n - 1)))) return st;
    return RP_OK;
}

/* ---- one step ------------------------------------------------------------- */

/* Picks draft token i from logits: greedy the draft sampler's argmax,
 * otherwise a draw from its distribution (kept in q[i] for the rule). Returns
 * -1 when the draft is not confident enough (p_min). */
static int32_t draft_pick(rp_spec *s, spec_seq *q, const float *logits, int i) {
    if (s->p.p_min > 0 && top_prob(logits, s->n_vocab) < s->p.p_min) return -1;
    int32_t t;
    if (q->greedy) {
        t = rp_sampler_sample(q->dsmp, logits);
    } else {
        float *qi = q->q + (size_t)i * (size_t)s->n_vocab;
        rp_sampler_probs(q->dsmp, logits, qi);
        t = draw(qi, s->n_vocab, rp_rng_uniform(&q->rng));
    }
    /* the grammar follows the drafts (rolled back after drafting) */
    if (t >= 0 && q->g && rp_grammar_accept(q->g, t)) return -1;
    return t;
}

static bool is_eog(const rp_spec *s, int32_t t) {
    return rp_vocab_is_eog(rp_model_vocab(s->t->model), t);
}

/* Drafts up to k tokens with the draft plan; *nd gets how many. */
static rp_status draft_plan(rp_spec *s, int seq, int k, int *nd) {
    spec_seq *q = &s->seq[seq];
    const int h = q->n;
    const int ld = rp_kv_seq_len(s->d, seq);
    rp_status st = decode_rows(s, s->d, seq, q->tok + ld, ld, h - ld, h - 1, false, false);
    if (st) return st;
    if (s->d_rec && k >= 2 && (st = rp_seq_checkpoint_save(s->d, seq, q->ck_d))) return st;
    *nd = 0;
    const float *logits = rp_get_logits(s->d, h - ld - 1); /* one decode: its last row */
    for (int i = 0; i < k; i++) {
        const int32_t t = draft_pick(s, q, logits, i);
        if (t < 0) break;
        q->drafts[(*nd)++] = t;
        if (i == k - 1 || is_eog(s, t)) break;
        int32_t sq = seq;
        rp_batch b = {.n_tokens = 1, .token = &q->drafts[i], .seq_id = &sq};
        if ((st = rp_decode(s->d, &b))) return st;
        logits = rp_get_logits(s->d, 0);
    }
    return RP_OK;
}

/* Drafts up to k tokens with the MTP head; *nd gets how many. */
static rp_status draft_mtp(rp_spec *s, int seq, int k, int *nd) {
    spec_seq *q = &s->seq[seq];
    const int h = q->n;
    *nd = 0;
    rp_status st = head_catch_up(s, seq, h - 1, true);
    if (st) return st;
    for (int i = 0; i < k; i++) {
        const int32_t t = draft_pick(s, q, s->h_logits, i);
        if (t < 0) break;
        q->drafts[(*nd)++] = t;
        if (i == k - 1 || is_eog(s, t)) break;
        /* the next row: the drafted token with the head's own h_nextn */
        int32_t pos = h - 1 + i, sq = seq;
        rp_draft_batch mb = {.n = 1,
                             .token = &q->drafts[i],
                             .hidden = s->h_cur,
                             .hidden_raw = false,
                             .pos = &pos,
                             .seq = &sq,
                             .logits = s->h_logits,
                             .hidden_out = s->h_next};
        if ((st = rp_draft_head_decode(s->head, &mb))) return st;
        float *tmp = s->h_cur;
        s->h_cur = s->h_next;
        s->h_next = tmp;
    }
    return RP_OK;
}

/* rp_spec_prepare; while full, the rows are the drafts alone (maybe none). */
static rp_status spec_prepare(rp_spec *s, int seq, int max_new, int32_t *tokens, int *n_tokens) {
    *n_tokens = 0;
    rp_status st = seq_check(s, seq, "step");
    if (st) return st;
    spec_seq *q = &s->seq[seq];
    const int h = q->n;
    if (h < 1)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "speculative step: sequence %d is empty (feed a prompt first)", seq);
    if (h > s->n_ctx)
        return rp_fail(RP_ERR_CONTEXT_FULL, "context full: sequence %d holds %d tokens (n_ctx %d)",
                       seq, h, s->n_ctx);
    if (max_new < 1)
        return rp_fail(RP_ERR_INVALID_ARG, "speculative step: max_new %d < 1", max_new);
    q->prepared = false;
    int k = RP_MIN(s->p.draft_max, RP_MIN(max_new - 1, s->n_ctx - h));
    if (s->head && h < 2) k = 0; /* the head needs the hidden state before the last token */
    /* 1. the target holds hist[0..H-1) (a recurrent target lags after a rollback) */
    if ((st = target_sync(s, seq))) return st;
    /* 2. draft */
    int nd = 0;
    const rp_grammar_state g0 = q->g ? rp_grammar_save(q->g) : (rp_grammar_state){{0, 0}};
    if (k > 0) st = s->head ? draft_mtp(s, seq, k, &nd) : draft_plan(s, seq, k, &nd);
    if (q->g) rp_grammar_restore(q->g, g0);
    if (st) return st;
    if (nd < s->p.draft_min) nd = 0;
    /* 3. the rows to verify: the last token (unless full) and the drafts */
    if (s->t_rec && nd > 0 && (st = rp_seq_checkpoint_save(s->t, seq, q->ck_t))) return st;
    const int f = q->full ? 0 : 1;
    tokens[0] = q->tok[h - 1];
    memcpy(tokens + f, q->drafts, (size_t)nd * sizeof *tokens);
    *n_tokens = nd + f;
    q->p_h = h;
    q->p_nd = nd;
    q->p_full = q->full;
    q->prepared = true;
    return RP_OK;
}

rp_status rp_spec_prepare(rp_spec *s, int seq, int max_new, int32_t *tokens, int *n_tokens) {
    *n_tokens = 0;
    rp_status st = seq_check(s, seq, "step");
    if (st) return st;
    /* the caller's rows always start with the last token: no full state from
     * now on (the last token of a fed sequence is decoded again) */
    s->split_api = true;
    spec_seq *q = &s->seq[seq];
    if (q->full) {
        q->full = false;
        if ((st = cut(s->t, s->t_rec, q->ck_t, seq, RP_MAX(0, q->n - 1)))) return st;
    }
    return spec_prepare(s, seq, max_new, tokens, n_tokens);
}

/* The target's logits that predict hist[h + i] (h: the history at prepare):
 * verification row row + i, or, when the rows were the drafts alone (f = 0),
 * the fed sequence's last row's for i = 0 and row + i - 1 after. */
static const float *pred_logits(const rp_spec *s, const spec_seq *q, int row, int f, int i) {
    return f || i ? rp_get_logits(s->t, row + i - 1 + f) : q->lg;
}

rp_status rp_spec_finish(rp_spec *s, int seq, int row, int32_t *out, int *n_out) {
    *n_out = 0;
    rp_status st = seq_check(s, seq, "step");
    if (st) return st;
    spec_seq *q = &s->seq[seq];
    if (!q->prepared)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "speculative step: sequence %d has no prepared rows to accept", seq);
    const int h = q->p_h, nd = q->p_nd, f = q->p_full ? 0 : 1;
    if (rp_kv_seq_len(s->t, seq) != h + nd)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "speculative step: sequence %d should hold %d positions after its "
                       "verification rows, it holds %d",
                       seq, h + nd, rp_kv_seq_len(s->t, seq));
    for (int i = 0; i < nd + f; i++)
        if (!rp_get_logits(s->t, row + i) || (s->head && !rp_get_hidden(s->t, row + i)))
            return rp_fail(RP_ERR_INVALID_ARG,
                           "speculative step: batch row %d of sequence %d has no %s", row + i, seq,
                           rp_get_logits(s->t, row + i) ? "hidden state" : "logits");
    q->prepared = false;
    q->full = false;
    /* MTP: the target's hidden states of the new rows, for the head's next catch-up */
    if (s->head && (st = hid_store_rows(s, q, h - f, row, nd + f))) return st;
    /* accept */
    int acc = 0, n = 0;
    bool stop = false;
    for (int i = 0; i < nd; i++) {
        const float *lg = pred_logits(s, q, row, f, i);
        bool ok;
        int32_t t;
        if (q->greedy) {
            t = rp_sampler_sample(q->smp, lg);
            ok = t == q->drafts[i];
        } else {
            rp_sampler_probs(q->smp, lg, s->pv);
            const double u1 = rp_rng_uniform(&q->rng), u2 = rp_rng_uniform(&q->rng);
            t = rp_spec_accept_rule(s->pv, q->q + (size_t)i * (size_t)s->n_vocab, s->n_vocab,
                                    q->drafts[i], u1, u2, &ok);
        }
        if ((st = take_generated(q, t))) return st;
        out[n++] = t;
        acc += ok;
        if (!ok || is_eog(s, t)) {
            stop = true;
            break;
        }
    }
    if (!stop) { /* every draft kept: one more token from the target's last row */
        const float *lg = pred_logits(s, q, row, f, nd);
        int32_t t;
        if (q->greedy) {
            t = rp_sampler_sample(q->smp, lg);
        } else {
            rp_sampler_probs(q->smp, lg, s->pv);
            t = draw(s->pv, s->n_vocab, rp_rng_uniform(&q->rng));
        }
        if ((st = take_generated(q, t))) return st;
        out[n++] = t;
    }
    *n_out = n;
    const int h_new = q->n;
    q->st.steps++;
    q->st.drafted += (uint64_t)nd;
    q->st.accepted += (uint64_t)acc;
    q->st.generated += (uint64_t)n;
    /* forget the rejected positions */
    if ((st = cut(s->t, s->t_rec, q->ck_t, seq, h_new - 1))) return st;
    if (s->d) {
        const int ld = rp_kv_seq_len(s->d, seq);
        if ((st = cut(s->d, s->d_rec, q->ck_d, seq, RP_MIN(ld, RP_MIN(h + acc, h_new - 1)))))
            return st;
    }
    if (s->head) {
        const int hl = rp_draft_head_seq_len(s->head, seq);
        if (hl > h - 1 && (st = rp_draft_head_truncate(s->head, seq, h - 1))) return st;
        /* hidden states of accepted rows only */
        q->hid_n = RP_MAX(0, RP_MIN(q->hid_n, h_new - 1 - q->hid_pos));
    }
    return RP_OK;
}

rp_status rp_spec_step(rp_spec *s, int seq, int max_new, int32_t *out, int *n_out) {
    *n_out = 0;
    int32_t vt[RP_SPEC_DRAFT_MAX + 1];
    int nb = 0;
    rp_status st = spec_prepare(s, seq, max_new, vt, &nb);
    if (st) return st;
    if (!batch_room(s, nb)) return RP_ERR_NOMEM;
    for (int i = 0; i < nb; i++) {
        s->b_seq[i] = seq;
        s->b_want[i] = 1;
    }
    /* every row as plain decoding computes its one token */
    rp_batch b = {.n_tokens = nb, .token = vt, .seq_id = s->b_seq, .logits = s->b_want};
    if (nb > 0 && (st = decode_in(s->t, &b, true))) {
        s->seq[seq].prepared = false;
        s->seq[seq].full = false;
        return st;
    }
    return rp_spec_finish(s, seq, 0, out, n_out);
}
