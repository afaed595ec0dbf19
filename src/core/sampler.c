/* Sampling: a chain of stages over a candidate list, in llama.cpp's default
 * order — penalties, DRY, top-n-sigma, top-k, typical-p, top-p, min-p, XTC,
 * temperature — then a seeded draw (or argmax when the temperature is 0).
 * `samplers` reorders or drops stages by llama.cpp's names. Mirostat (v1 or
 * v2) replaces the chain with temperature + Mirostat, as in llama.cpp.
 *
 * A grammar, when set, is a stage before all of them. By default it is used
 * as llama.cpp uses it: the chain picks a token without the grammar, and only
 * when the grammar refuses that token is the draw redone with the grammar
 * applied first (llama.cpp's common_sampler_sample with grammar_first =
 * false; exact for greedy decoding, and the full mask is rarely needed).
 * grammar_first = true always applies it first (the exact constrained
 * distribution; rp_sampler_probs always does).
 *
 * After each draw the final candidates and their probabilities stay, for
 * post-sampling log-probabilities; rp_logits_logprobs gives the model's own
 * (pre-sampling) distribution. */
#include "base/util.h"
#include "text/gbnf.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    int32_t id;
    float logit;
    float p;
} cand;

typedef enum stage_kind {
    ST_PENALTIES,
    ST_DRY,
    ST_TOP_N_SIGMA,
    ST_TOP_K,
    ST_TYPICAL,
    ST_TOP_P,
    ST_MIN_P,
    ST_XTC,
    ST_TEMP,
    ST_COUNT
} stage_kind;

/* llama.cpp's names and letters for --samplers / "samplers". */
static const struct {
    const char *name, *alias;
    char letter;
} STAGE_NAMES[ST_COUNT] = {
    [ST_PENALTIES] = {"penalties", NULL, 'e'},
    [ST_DRY] = {"dry", NULL, 'd'},
    [ST_TOP_N_SIGMA] = {"top_n_sigma", "top-n-sigma", 's'},
    [ST_TOP_K] = {"top_k", "top-k", 'k'},
    [ST_TYPICAL] = {"typ_p", "typical", 'y'},
    [ST_TOP_P] = {"top_p", "nucleus", 'p'},
    [ST_MIN_P] = {"min_p", "min-p", 'm'},
    [ST_XTC] = {"xtc", NULL, 'x'},
    [ST_TEMP] = {"temperature", "temp", 't'},
};

typedef struct ring {
    int32_t *v;
    int cap, n, pos;
} ring;

struct rp_sampler {
    rp_sampler_params p;
    int32_t n_vocab;
    stage_kind order[ST_COUNT * 2];
    int n_order;
    cand *c;        /* [n_vocab] */
    size_t n;       /* live candidates */
    bool sorted;    /* c[0..n) sorted by logit descending */
    bool has_p;     /* c[i].p holds the softmax of the live candidates */
    ring hist;      /* penalty window */
    ring dry_hist;  /* DRY window */
    int32_t *count; /* [n_vocab] scratch for penalties */
    rp_rng rng;
    float mu; /* Mirostat's running surprise target */
    rp_grammar *grammar;
    float *bias; /* [n_vocab] logit bias, or NULL */
    const rp_vocab *vocab;
    bool *dry_breaker; /* [n_vocab] tokens whose text holds a sequence breaker */
    int32_t *dry_rep;  /* scratch */
    int32_t *dry_max;  /* [n_vocab] longest repeat a token would extend (scratch) */
    int32_t last;      /* the last token drawn (-1 before any) */
};

rp_sampler_params rp_sampler_default_params(void) {
    rp_sampler_params p = {
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .penalty_last_n = 64,
        .freq_penalty = 0.0f,
        .presence_penalty = 0.0f,
        .seed = 0xFFFFFFFFu,
    };
    return p;
}

/* ---- setup ---------------------------------------------------------------------- */

static bool ring_init(ring *r, int32_t last_n, const char *what) {
    r->cap = last_n < 0 ? 1 << 16 : RP_MIN(RP_MAX(last_n, 1), 1 << 16);
    r->v = rp_malloc((size_t)r->cap * sizeof *r->v, what);
    r->n = r->pos = 0;
    return r->v != NULL;
}

static void ring_push(ring *r, int32_t t) {
    r->v[r->pos] = t;
    r->pos = (r->pos + 1) % r->cap;
    if (r->n < r->cap) r->n++;
}

/* i-th most recent token (0 = the last). */
static int32_t ring_back(const ring *r, int i) {
    return r->v[((r->pos - 1 - i) % r->cap + r->cap) % r->cap];
}

static bool name_is(const char *s, size_t n, const char *name) {
    if (!name || strlen(name) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)s[i]) != name[i]) return false;
    return true;
}

/* Stage order from `samplers`: names (llama.cpp's, '_' or '-', any case)
 * separated by ';', ',' or spaces, or llama.cpp's letters ("edskypmxt"). */
static rp_status parse_order(rp_sampler *s, const char *spec) {
    s->n_order = 0;
    if (!spec) {
        for (int k = 0; k < ST_COUNT; k++) s->order[s->n_order++] = (stage_kind)k;
        return RP_OK;
    }
    bool letters = *spec && !strpbrk(spec, ";, \t");
    for (const char *q = spec; letters && *q; q++) {
        bool known = false;
        for (int k = 0; k < ST_COUNT; k++) known |= STAGE_NAMES[k].letter == *q;
        letters = known;
    }
    if (letters && strlen(spec) <= 3) /* "top" is not three letters */
        for (int k = 0; k < ST_COUNT; k++)
            if (!strcmp(spec, STAGE_NAMES[k].name)) letters = false;
    for (const char *q = spec; *q;) {
        if (s->n_order >= (int)RP_ARRAY_LEN(s->order))
            return rp_fail(RP_ERR_INVALID_ARG, "samplers: more than %d stages",
                           (int)RP_ARRAY_LEN(s->order));
        if (letters) {
            for (int k = 0; k < ST_COUNT; k++)
                if (STAGE_NAMES[k].letter == *q) s->order[s->n_order++] = (stage_kind)k;
            q++;
            continue;
        }
        while (*q == ';' || *q == ',' || *q == ' ' || *q == '\t') q++;
        const char *e = q;
        while (*e && *e != ';' && *e != ',' && *e != ' ' && *e != '\t') e++;
        if (e == q) break;
        int found = -1;
        for (int k = 0; k < ST_COUNT && found < 0; k++) {
            char canon[32];
            snprintf(canon, sizeof canon, "%s", STAGE_NAMES[k].name);
            char nodash[32];
            size_t m = 0;
            for (const char *c = canon; *c; c++)
                if (*c != '_') nodash[m++] = *c;
            nodash[m] = 0;
            if (name_is(q, (size_t)(e - q), canon) ||
                name_is(q, (size_t)(e - q), STAGE_NAMES[k].alias) ||
                name_is(q, (size_t)(e - q), nodash))
                found = k;
            for (char *c = canon; *c; c++)
                if (*c == '_') *c = '-';
            if (name_is(q, (size_t)(e - q), canon)) found = k;
        }
        if (found < 0)
            return rp_fail(RP_ERR_INVALID_ARG,
                           "samplers: unknown stage '%.*s' (penalties, dry, top_n_sigma, top_k, "
                           "typ_p, top_p, min_p, "
                           "xtc, temperature)",
                           (int)RP_MIN(e - q, 40), q);
        s->order[s->n_order++] = (stage_kind)found;
        q = e;
    }
    return RP_OK;
}

rp_sampler *rp_sampler_new(const rp_sampler_params *params, int32_t n_vocab) {
    if (n_vocab < 1) {
        rp_fail(RP_ERR_INVALID_ARG, "sampler: vocabulary is empty");
        return NULL;
    }
    rp_sampler *s = rp_calloc(1, sizeof *s, "sampler");
    if (!s) return NULL;
    s->p = params ? *params : rp_sampler_default_params();
    s->n_vocab = n_vocab;
    s->last = -1;
    const rp_sampler_params *p = &s->p;
    s->c = rp_malloc((size_t)n_vocab * sizeof *s->c, "sampler candidates");
    s->count = rp_calloc((size_t)n_vocab, sizeof *s->count, "sampler counts");
    bool ok = s->c && s->count && ring_init(&s->hist, p->penalty_last_n, "sampler history");
    if (ok && p->dry_multiplier != 0) {
        ok =
            ring_init(&s->dry_hist, p->dry_penalty_last_n == 0 ? -1 : p->dry_penalty_last_n,
                      "DRY history") &&
            (s->dry_rep = rp_malloc((size_t)s->dry_hist.cap * sizeof *s->dry_rep, "DRY scratch")) &&
            (s->dry_max = rp_calloc((size_t)n_vocab, sizeof *s->dry_max, "DRY scratch"));
    }
    if (!ok) {
        rp_sampler_free(s);
        return NULL;
    }
    if (p->mirostat < 0 || p->mirostat > 2) {
        rp_fail(RP_ERR_INVALID_ARG, "sampler: mirostat must be 0, 1 or 2, not %d", p->mirostat);
        rp_sampler_free(s);
        return NULL;
    }
    if (parse_order(s, p->samplers)) {
        rp_sampler_free(s);
        return NULL;
    }
    s->mu = 2.0f * (p->mirostat_tau > 0 ? p->mirostat_tau : 5.0f);
    rp_rng_seed(&s->rng, p->seed);
    return s;
}

void rp_sampler_free(rp_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->count);
    free(s->hist.v);
    free(s->dry_hist.v);
    free(s->dry_rep);
    free(s->dry_max);
    free(s->dry_breaker);
    free(s->bias);
    free(s);
}

void rp_sampler_accept(rp_sampler *s, int32_t token) {
    if (token < 0 || token >= s->n_vocab) return;
    ring_push(&s->hist, token);
    if (s->dry_hist.v) ring_push(&s->dry_hist, token);
}

rp_status rp_sampler_accept_sampled(rp_sampler *s, int32_t token) {
    if (token < 0 || token >= s->n_vocab)
        return rp_fail(RP_ERR_INVALID_ARG, "sampler: token %d outside the vocabulary", token);
    if (s->grammar) {
        rp_status st = rp_grammar_accept(s->grammar, token);
        if (st) return st;
    }
    rp_sampler_accept(s, token);
    return RP_OK;
}

void rp_sampler_reset(rp_sampler *s) {
    s->hist.n = s->hist.pos = 0;
    s->dry_hist.n = s->dry_hist.pos = 0;
    s->mu = 2.0f * (s->p.mirostat_tau > 0 ? s->p.mirostat_tau : 5.0f);
    s->n = 0;
    s->last = -1;
    rp_rng_seed(&s->rng, s->p.seed);
}

void rp_sampler_set_grammar(rp_sampler *s, rp_grammar *g) {
    s->grammar = g;
}

rp_status rp_sampler_set_logit_bias(rp_sampler *s, const int32_t *tokens, const float *bias,
                                    size_t n) {
    if (!n) {
        free(s->bias);
        s->bias = NULL;
        return RP_OK;
    }
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab)
            return rp_fail(RP_ERR_INVALID_ARG,
                           "logit bias: token %d outside the vocabulary (%d tokens)", tokens[i],
                           s->n_vocab);
    if (!s->bias && !(s->bias = rp_calloc((size_t)s->n_vocab, sizeof *s->bias, "logit bias")))
        return RP_ERR_NOMEM;
    memset(s->bias, 0, (size_t)s->n_vocab * sizeof *s->bias);
    for (size_t i = 0; i < n; i++) s->bias[tokens[i]] += bias[i];
    return RP_OK;
}

rp_status rp_sampler_set_vocab(rp_sampler *s, const rp_vocab *v, const char *const *breakers,
                               size_t n_breakers) {
    static const char *const defaults[] = {"\n", ":", "\"", "*"};
    if (!breakers) {
        breakers = defaults;
        n_breakers = RP_ARRAY_LEN(defaults);
    }
    if (rp_vocab_n_tokens(v) != s->n_vocab)
        return rp_fail(RP_ERR_INVALID_ARG, "sampler: vocabulary of %d tokens for a sampler of %d",
                       rp_vocab_n_tokens(v), s->n_vocab);
    s->vocab = v;
    free(s->dry_breaker);
    s->dry_breaker = rp_calloc((size_t)s->n_vocab, 1, "DRY breakers");
    if (!s->dry_breaker) return RP_ERR_NOMEM;
    char piece[512];
    for (int32_t t = 0; t < s->n_vocab; t++) {
        int k = rp_token_to_piece(v, t, true, piece, sizeof piece);
        if (k <= 0) continue;
        size_t len = (size_t)RP_MIN(k, (int)sizeof piece - 1);
        for (size_t b = 0; b < n_breakers && !s->dry_breaker[t]; b++)
            if (*breakers[b] && memmem(piece, len, breakers[b], strlen(breakers[b])))
                s->dry_breaker[t] = true;
    }
    return RP_OK;
}

/* ---- helpers ------------------------------------------------------------------------ */

static int cand_cmp(const void *a, const void *b) {
    float x = ((const cand *)a)->logit, y = ((const cand *)b)->logit;
    if (x != y) return x > y ? -1 : 1;
    return ((const cand *)a)->id - ((const cand *)b)->id;
}

/* Bring the k largest candidates to the front, sorted (quickselect + sort). */
static void partial_sort(rp_sampler *s, size_t k) {
    if (k >= s->n) {
        qsort(s->c, s->n, sizeof *s->c, cand_cmp);
        s->sorted = true;
        return;
    }
    size_t lo = 0, hi = s->n - 1;
    while (lo < hi) {
        cand pivot = s->c[(lo + hi) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (cand_cmp(&s->c[i], &pivot) < 0) i++;
            while (cand_cmp(&s->c[j], &pivot) > 0) j--;
            if (i <= j) {
                cand t = s->c[i];
                s->c[i] = s->c[j];
                s->c[j] = t;
                i++;
                if (j == 0) break;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    qsort(s->c, k, sizeof *s->c, cand_cmp);
}

static void sort_all(rp_sampler *s) {
    if (!s->sorted) partial_sort(s, s->n);
    s->sorted = true;
}

static void softmax_cands(rp_sampler *s) {
    float mx = -INFINITY;
    for (size_t i = 0; i < s->n; i++) mx = fmaxf(mx, s->c[i].logit);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) {
        s->c[i].p = expf(s->c[i].logit - mx);
        sum += s->c[i].p;
    }
    for (size_t i = 0; i < s->n; i++) s->c[i].p = (float)(s->c[i].p / sum);
    s->has_p = true;
}

static size_t min_keep(const rp_sampler *s) {
    return (size_t)RP_MAX(s->p.min_keep, 1);
}

/* ---- stages ------------------------------------------------------------------------- */

static void stage_penalties(rp_sampler *s) {
    const rp_sampler_params *p = &s->p;
    if (p->penalty_last_n == 0 ||
        (p->repeat_penalty == 1.0f && p->freq_penalty == 0.0f && p->presence_penalty == 0.0f))
        return;
    for (int i = 0; i < s->hist.n; i++) s->count[s->hist.v[i]]++;
    for (size_t i = 0; i < s->n; i++) {
        int32_t cnt = s->count[s->c[i].id];
        if (!cnt) continue;
        float *l = &s->c[i].logit;
        if (p->repeat_penalty != 1.0f)
            *l = *l <= 0 ? *l * p->repeat_penalty : *l / p->repeat_penalty;
        *l -= (float)cnt * p->freq_penalty + p->presence_penalty;
    }
    for (int i = 0; i < s->hist.n; i++) s->count[s->hist.v[i]] = 0;
    s->sorted = s->has_p = false;
}

/* DRY ("don't repeat yourself", p-e-w): a token that would extend a sequence
 * already seen in the window, repeated for at least allowed_length tokens,
 * loses multiplier * base^(length - allowed_length). Repeats cannot reach
 * back past a sequence breaker (a token whose text holds one of the breaker
 * strings); breakers themselves are never penalized. */
static void stage_dry(rp_sampler *s) {
    const rp_sampler_params *p = &s->p;
    ring *h = &s->dry_hist;
    if (p->dry_multiplier == 0 || !h->v) return;
    float base = p->dry_base > 0 ? p->dry_base : 1.75f;
    int allowed = p->dry_allowed_length > 0 ? p->dry_allowed_length : 2;
    int n = h->n;
    if (base < 1.0f || n <= allowed) return;
    /* a repeat ends at the most recent breaker */
    int limit = n;
    for (int i = 0; i < n && s->dry_breaker; i++)
        if (s->dry_breaker[ring_back(h, i)]) {
            limit = i;
            break;
        }
    if (limit < allowed) return;
    /* z[k] = length of the common suffix of the window and the window cut k
     * tokens short (a Z-function over the reversed window) */
    int32_t *z = s->dry_rep;
    z[0] = n;
    for (int k = 1, l = 0, r = 0; k < n; k++) {
        int len = 0;
        if (k < r) len = RP_MIN(r - k, z[k - l]);
        while (k + len < n && ring_back(h, len) == ring_back(h, k + len)) len++;
        z[k] = len;
        if (k + len > r) {
            l = k;
            r = k + len;
        }
    }
    bool any = false;
    for (int k = 1; k < n; k++) {
        int len = RP_MIN(z[k], limit);
        if (len < allowed) continue;
        int32_t next = ring_back(h, k - 1); /* what followed that earlier occurrence */
        if (len > s->dry_max[next]) s->dry_max[next] = len;
        any = true;
    }
    if (!any) return;
    int max_exp = base > 1.000001f ? (int)(88.7228391f / logf(base)) : 0;
    for (size_t i = 0; i < s->n; i++) {
        int32_t t = s->c[i].id;
        int len = s->dry_max[t];
        if (!len || (s->dry_breaker && s->dry_breaker[t])) continue;
        int e = len - allowed;
        if (max_exp > 0 && e > max_exp) e = max_exp;
        s->c[i].logit -= p->dry_multiplier * powf(base, (float)e);
    }
    for (int k = 1; k < n; k++) s->dry_max[ring_back(h, k - 1)] = 0;
    s->sorted = s->has_p = false;
}

/* Keeps the logits within top_n_sigma standard deviations of the largest. */
static void stage_top_n_sigma(rp_sampler *s) {
    float nsig = s->p.top_n_sigma;
    if (nsig <= 0 || s->n <= 1) return;
    float mx = -INFINITY;
    double sum = 0;
    size_t cnt = 0;
    for (size_t i = 0; i < s->n; i++)
        if (isfinite(s->c[i].logit)) {
            mx = fmaxf(mx, s->c[i].logit);
            sum += s->c[i].logit;
            cnt++;
        }
    if (!cnt) return;
    double mean = sum / (double)cnt, acc = 0;
    for (size_t i = 0; i < s->n; i++)
        if (isfinite(s->c[i].logit)) acc += (s->c[i].logit - mean) * (s->c[i].logit - mean);
    float thr = mx - nsig * (float)sqrt(acc / (double)cnt);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->c[i].logit >= thr) s->c[k++] = s->c[i];
    s->n = k; /* order preserved */
    s->has_p = false;
}

static void stage_top_k(rp_sampler *s, int32_t top_k) {
    if (top_k <= 0) return;
    size_t k = RP_MAX((size_t)top_k, min_keep(s));
    if (k < s->n) {
        partial_sort(s, k);
        s->n = k;
    } else {
        sort_all(s);
    }
    s->sorted = true;
    s->has_p = false;
}

static void stage_top_p(rp_sampler *s) {
    float top_p = s->p.top_p;
    if (top_p >= 1.0f) return;
    /* grow a sorted prefix until it holds probability mass p */
    softmax_cands(s);
    size_t k = s->sorted ? s->n : RP_MIN(s->n, (size_t)256), keep = min_keep(s);
    for (;;) {
        if (!s->sorted) partial_sort(s, k);
        double cum = 0;
        size_t i = 0;
        for (; i < k; i++) {
            cum += s->c[i].p;
            if (cum >= top_p && i + 1 >= keep) break;
        }
        if (i < k) {
            s->n = i + 1;
            s->sorted = true;
            break;
        }
        if (k == s->n) {
            s->sorted = true;
            break;
        }
        k = RP_MIN(s->n, k * 8);
    }
    s->has_p = false;
}

static void stage_min_p(rp_sampler *s) {
    if (s->p.min_p <= 0.0f) return;
    float mx = -INFINITY;
    for (size_t i = 0; i < s->n; i++) mx = fmaxf(mx, s->c[i].logit);
    float thr = mx + logf(s->p.min_p);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->c[i].logit >= thr) s->c[k++] = s->c[i];
    if (k < min_keep(s) && s->n >= min_keep(s)) {
        partial_sort(s, min_keep(s));
        k = min_keep(s);
        s->sorted = true;
    }
    s->n = k; /* order preserved */
    s->has_p = false;
}

/* Locally typical sampling: keep the tokens whose surprise is closest to the
 * distribution's entropy, up to probability mass typical_p (in that order). */
static void stage_typical(rp_sampler *s) {
    float tp = s->p.typical_p;
    if (tp <= 0 || tp >= 1.0f || s->n < 2) return;
    softmax_cands(s);
    double ent = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->c[i].p > 0) ent -= s->c[i].p * log(s->c[i].p);
    /* sort by |surprise - entropy|: stash the score in logit order via an index sort */
    typedef struct {
        float score;
        cand c;
    } scored;
    scored *sc = malloc(s->n * sizeof *sc);
    if (!sc) return;
    for (size_t i = 0; i < s->n; i++) {
        sc[i].c = s->c[i];
        sc[i].score = s->c[i].p > 0 ? (float)fabs(-log(s->c[i].p) - ent) : INFINITY;
    }
    /* insertion into a heap-free stable sort: merge sort by score */
    for (size_t w = 1; w < s->n; w *= 2) {
        scored *tmp = malloc(s->n * sizeof *tmp);
        if (!tmp) break;
        for (size_t lo = 0; lo < s->n; lo += 2 * w) {
            size_t mid = RP_MIN(lo + w, s->n), hi = RP_MIN(lo + 2 * w, s->n), i = lo, j = mid,
                   k = lo;
            while (i < mid || j < hi)
                tmp[k++] = (j >= hi || (i < mid && sc[i].score <= sc[j].score)) ? sc[i++] : sc[j++];
        }
        memcpy(sc, tmp, s->n * sizeof *tmp);
        free(tmp);
    }
    double cum = 0;
    size_t last = s->n;
    for (size_t i = 0; i < s->n; i++) {
        cum += sc[i].c.p;
        if (cum > tp && i + 1 >= min_keep(s)) {
            last = i + 1;
            break;
        }
    }
    for (size_t i = 0; i < last; i++) s->c[i] = sc[i].c;
    s->n = last;
    free(sc);
    s->sorted = s->has_p = false;
}

/* XTC ("exclude top choices"): with probability xtc_probability, drop every
 * candidate at or above xtc_threshold except the least likely of them. */
static void stage_xtc(rp_sampler *s) {
    float prob = s->p.xtc_probability, thr = s->p.xtc_threshold > 0 ? s->p.xtc_threshold : 0.1f;
    if (prob <= 0 || thr > 0.5f || s->n < 2) return;
    if (rp_rng_uniform(&s->rng) > prob) return;
    sort_all(s);
    softmax_cands(s);
    size_t last = 0;
    for (size_t i = 0; i < s->n && s->c[i].p >= thr; i++) last = i;
    if (last > 0 && s->n - last >= min_keep(s)) {
        memmove(s->c, s->c + last, (s->n - last) * sizeof *s->c);
        s->n -= last;
    }
    s->has_p = false;
}

static void stage_temp(rp_sampler *s) {
    for (size_t i = 0; i < s->n; i++) s->c[i].logit /= s->p.temp;
    s->has_p = false;
}

static void run_stage(rp_sampler *s, stage_kind k) {
    switch (k) {
    case ST_PENALTIES:
        stage_penalties(s);
        break;
    case ST_DRY:
        stage_dry(s);
        break;
    case ST_TOP_N_SIGMA:
        stage_top_n_sigma(s);
        break;
    case ST_TOP_K:
        stage_top_k(s, s->p.top_k);
        break;
    case ST_TYPICAL:
        stage_typical(s);
        break;
    case ST_TOP_P:
        stage_top_p(s);
        break;
    case ST_MIN_P:
        stage_min_p(s);
        break;
    case ST_XTC:
        stage_xtc(s);
        break;
    case ST_TEMP:
        stage_temp(s);
        break;
    case ST_COUNT:
        break;
    }
}

/* ---- the chain ------------------------------------------------------------------------- */

/* Candidates from logits (+ bias), only those the grammar allows when
 * with_grammar. false when the grammar failed (its message is set). */
static bool load(rp_sampler *s, const float *logits, bool with_grammar) {
    const uint64_t *mask = NULL;
    if (with_grammar && s->grammar) {
        mask = gbnf_grammar_mask(s->grammar);
        if (!mask) return false;
    }
    size_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (mask && !((mask[i >> 6] >> (i & 63)) & 1)) continue;
        float l = logits[i] + (s->bias ? s->bias[i] : 0.0f);
        if (l == -INFINITY && (mask || s->bias)) continue;
        s->c[n++] = (cand){i, l, 0};
    }
    s->n = n;
    s->sorted = s->has_p = false;
    return true;
}

static bool greedy(const rp_sampler *s) {
    return s->p.temp <= 0;
}

static void run_chain(rp_sampler *s) {
    if (!s->n) return;
    if (s->p.mirostat) {
        if (!greedy(s)) stage_temp(s);
        return;
    }
    for (int i = 0; i < s->n_order; i++) {
        stage_kind k = s->order[i];
        /* greedy decoding keeps only the stages that change logits */
        if (greedy(s) && k != ST_PENALTIES && k != ST_DRY) continue;
        run_stage(s, k);
        if (!s->n) return;
    }
}

static size_t argmax(const rp_sampler *s) {
    size_t best = 0;
    for (size_t i = 1; i < s->n; i++)
        if (s->c[i].logit > s->c[best].logit) best = i;
    return best;
}

static size_t draw(rp_sampler *s) {
    softmax_cands(s);
    double u = rp_rng_uniform(&s->rng), cum = 0;
    for (size_t i = 0; i < s->n; i++) {
        cum += s->c[i].p;
        if (u < cum) return i;
    }
    return s->n - 1;
}

/* Mirostat (v1: top-k from the estimated Zipf exponent; v2: cut at surprise
 * mu), then the running target mu moves toward tau. */
static size_t draw_mirostat(rp_sampler *s) {
    float tau = s->p.mirostat_tau > 0 ? s->p.mirostat_tau : 5.0f;
    float eta = s->p.mirostat_eta > 0 ? s->p.mirostat_eta : 0.1f;
    sort_all(s);
    softmax_cands(s);
    if (s->p.mirostat == 1) {
        int m = (int)RP_MIN(s->n, (size_t)100);
        double sum_tb = 0, sum_t2 = 0;
        for (int i = 0; i + 1 < m; i++) {
            double t = log((double)(i + 2) / (double)(i + 1)), b = log(s->c[i].p / s->c[i + 1].p);
            sum_tb += t * b;
            sum_t2 += t * t;
        }
        double s_hat = sum_t2 > 0 ? sum_tb / sum_t2 : 1.0, eps = s_hat - 1;
        double k =
            fabs(eps) < 1e-9
                ? (double)s->n
                : pow(eps * pow(2.0, s->mu) / (1 - pow((double)s->n_vocab, -eps)), 1 / s_hat);
        size_t kk = isfinite(k) && k >= 1 ? (size_t)RP_MIN(k, (double)s->n) : 1;
        s->n = RP_MAX(kk, (size_t)1);
    } else {
        size_t keep = 0;
        while (keep < s->n && -log2f(s->c[keep].p) <= s->mu) keep++;
        s->n = RP_MAX(keep, (size_t)1);
    }
    size_t i = draw(s);
    float surprise = -log2f(s->c[i].p);
    s->mu -= eta * (surprise - tau);
    return i;
}

/* Picks from the live candidates; -1 when there are none. Leaves c[0..n) with p. */
static int32_t pick(rp_sampler *s) {
    if (!s->n) return -1;
    size_t i;
    if (greedy(s)) {
        i = argmax(s);
        /* the distribution greedy decoding draws from: the argmax, certain */
        s->c[0] = s->c[i];
        s->c[0].p = 1.0f;
        s->n = 1;
        s->has_p = true;
        i = 0;
    } else if (s->p.mirostat) {
        i = draw_mirostat(s);
    } else {
        i = draw(s);
    }
    return s->c[i].id;
}

int32_t rp_sampler_sample(rp_sampler *s, const float *logits) {
    bool first = s->grammar && s->p.grammar_first;
    if (!load(s, logits, first)) return -1;
    rp_rng saved_rng = s->rng;
    float saved_mu = s->mu;
    run_chain(s);
    int32_t t = pick(s);
    if (!s->grammar || first || (t >= 0 && rp_grammar_allows(s->grammar, t))) return s->last = t;
    /* the grammar refuses the token: draw again with the grammar applied first */
    s->rng = saved_rng;
    s->mu = saved_mu;
    if (!load(s, logits, true)) return -1;
    run_chain(s);
    return s->last = pick(s);
}

void rp_sampler_probs(rp_sampler *s, const float *logits, float *probs) {
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    if (!load(s, logits, true)) return;
    rp_rng saved_rng = s->rng;
    run_chain(s);
    s->rng = saved_rng; /* XTC's coin must not move the sampler's stream here */
    if (!s->n) return;
    if (greedy(s)) {
        probs[s->c[argmax(s)].id] = 1.0f;
        return;
    }
    softmax_cands(s);
    for (size_t i = 0; i < s->n; i++) probs[s->c[i].id] = s->c[i].p;
}

/* ---- log-probabilities ------------------------------------------------------------------- */

/* The n largest of (id, value) pairs, sorted descending, into top. */
static int top_n(const cand *c, size_t n, int k, rp_token_logprob *top, bool by_p) {
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        float v = by_p ? c[i].p : c[i].logit;
        if (m == k && v <= top[m - 1].logprob) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && top[j - 1].logprob < v) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = (rp_token_logprob){c[i].id, v};
    }
    return m;
}

int rp_sampler_last_logprobs(const rp_sampler *s, int32_t token, float *token_logprob,
                             rp_token_logprob *top, int n_top) {
    if (token_logprob) *token_logprob = -INFINITY;
    if (!s->has_p || !s->n) return 0;
    for (size_t i = 0; token_logprob && i < s->n; i++)
        if (s->c[i].id == token) *token_logprob = logf(s->c[i].p);
    if (n_top <= 0 || !top) return 0;
    int m = top_n(s->c, s->n, n_top, top, true);
    int k = 0;
    for (int i = 0; i < m; i++) /* probabilities of 0 are not alternatives */
        if (top[i].logprob > 0) top[k++] = (rp_token_logprob){top[i].token, logf(top[i].logprob)};
    return k;
}

int rp_logits_logprobs(const float *logits, int32_t n_vocab, int32_t token, float *token_logprob,
                       rp_token_logprob *top, int n_top) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) mx = fmaxf(mx, logits[i]);
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    float lse = mx + (float)log(sum);
    if (token_logprob)
        *token_logprob = token >= 0 && token < n_vocab ? logits[token] - lse : -INFINITY;
    if (n_top <= 0 || !top) return 0;
    int m = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float v = logits[i];
        if (m == n_top && v <= top[m - 1].logprob) continue;
        int j = m < n_top ? m++ : n_top - 1;
        while (j > 0 && top[j - 1].logprob < v) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = (rp_token_logprob){i, v};
    }
    for (int i = 0; i < m; i++) top[i].logprob -= lse;
    return m;
}
