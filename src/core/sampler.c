/* Sampling: a chain of stages over a candidate list, in llama.cpp's default
 * order — penalties, top-k, top-p, min-p, temperature, then a seeded draw (or
 * argmax when the temperature is 0). */
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    int32_t id;
    float logit;
    float p;
} cand;

typedef enum stage_kind { ST_PENALTIES, ST_TOP_K, ST_TOP_P, ST_MIN_P, ST_TEMP } stage_kind;

typedef struct stage {
    stage_kind kind;
    float f;
    int32_t k;
} stage;

struct rp_sampler {
    rp_sampler_params p;
    int32_t n_vocab;
    stage stages[8];
    int n_stages;
    cand *c;       /* [n_vocab] */
    size_t n;      /* live candidates */
    bool sorted;   /* c[0..n) sorted by logit descending */
    int32_t *hist; /* ring of recent tokens */
    int hist_cap, hist_n, hist_pos;
    int32_t *count; /* [n_vocab] scratch for penalties */
    rp_rng rng;
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

rp_sampler *rp_sampler_new(const rp_sampler_params *params, int32_t n_vocab) {
    if (n_vocab < 1) {
        rp_fail(RP_ERR_INVALID_ARG, "sampler: vocabulary is empty");
        return NULL;
    }
    rp_sampler *s = rp_calloc(1, sizeof *s, "sampler");
    if (!s) return NULL;
    s->p = params ? *params : rp_sampler_default_params();
    s->n_vocab = n_vocab;
    s->c = rp_malloc((size_t)n_vocab * sizeof *s->c, "sampler candidates");
    s->count = rp_calloc((size_t)n_vocab, sizeof *s->count, "sampler counts");
    s->hist_cap = s->p.penalty_last_n < 0 ? 1 << 20 : RP_MAX(s->p.penalty_last_n, 1);
    s->hist = rp_malloc((size_t)RP_MIN(s->hist_cap, 1 << 16) * sizeof *s->hist, "sampler history");
    if (s->hist_cap > (1 << 16)) s->hist_cap = 1 << 16;
    if (!s->c || !s->count || !s->hist) {
        rp_sampler_free(s);
        return NULL;
    }
    const rp_sampler_params *p = &s->p;
    if (p->penalty_last_n != 0 &&
        (p->repeat_penalty != 1.0f || p->freq_penalty != 0.0f || p->presence_penalty != 0.0f))
        s->stages[s->n_stages++] = (stage){ST_PENALTIES, 0, 0};
    if (p->temp > 0) {
        if (p->top_k > 0) s->stages[s->n_stages++] = (stage){ST_TOP_K, 0, p->top_k};
        if (p->top_p < 1.0f) s->stages[s->n_stages++] = (stage){ST_TOP_P, p->top_p, 0};
        if (p->min_p > 0.0f) s->stages[s->n_stages++] = (stage){ST_MIN_P, p->min_p, 0};
        s->stages[s->n_stages++] = (stage){ST_TEMP, p->temp, 0};
    }
    rp_rng_seed(&s->rng, p->seed);
    return s;
}

void rp_sampler_free(rp_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->count);
    free(s->hist);
    free(s);
}

void rp_sampler_accept(rp_sampler *s, int32_t token) {
    if (token < 0 || token >= s->n_vocab) return;
    s->hist[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % s->hist_cap;
    if (s->hist_n < s->hist_cap) s->hist_n++;
}

void rp_sampler_reset(rp_sampler *s) {
    s->hist_n = s->hist_pos = 0;
    rp_rng_seed(&s->rng, s->p.seed);
}

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

static void softmax_cands(rp_sampler *s) {
    float mx = -INFINITY;
    for (size_t i = 0; i < s->n; i++) mx = fmaxf(mx, s->c[i].logit);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) {
        s->c[i].p = expf(s->c[i].logit - mx);
        sum += s->c[i].p;
    }
    for (size_t i = 0; i < s->n; i++) s->c[i].p = (float)(s->c[i].p / sum);
}

static void run_stage(rp_sampler *s, const stage *st) {
    switch (st->kind) {
    case ST_PENALTIES: {
        for (int i = 0; i < s->hist_n; i++) s->count[s->hist[i]]++;
        for (size_t i = 0; i < s->n; i++) {
            int32_t cnt = s->count[s->c[i].id];
            if (!cnt) continue;
            float *l = &s->c[i].logit;
            if (s->p.repeat_penalty != 1.0f)
                *l = *l <= 0 ? *l * s->p.repeat_penalty : *l / s->p.repeat_penalty;
            *l -= (float)cnt * s->p.freq_penalty + s->p.presence_penalty;
        }
        for (int i = 0; i < s->hist_n; i++) s->count[s->hist[i]] = 0;
        s->sorted = false;
        break;
    }
    case ST_TOP_K:
        if ((size_t)st->k < s->n) {
            partial_sort(s, (size_t)st->k);
            s->n = (size_t)st->k;
        } else if (!s->sorted) {
            partial_sort(s, s->n);
        }
        s->sorted = true;
        break;
    case ST_TOP_P: {
        /* grow a sorted prefix until it holds probability mass p */
        softmax_cands(s);
        size_t k = s->sorted ? s->n : RP_MIN(s->n, (size_t)256);
        for (;;) {
            if (!s->sorted) partial_sort(s, k);
            double cum = 0;
            size_t i = 0;
            for (; i < k; i++) {
                cum += s->c[i].p;
                if (cum >= st->f) break;
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
        break;
    }
    case ST_MIN_P: {
        float mx = -INFINITY;
        for (size_t i = 0; i < s->n; i++) mx = fmaxf(mx, s->c[i].logit);
        float thr = mx + logf(st->f);
        size_t k = 0;
        for (size_t i = 0; i < s->n; i++)
            if (s->c[i].logit >= thr) s->c[k++] = s->c[i];
        s->n = k; /* order preserved */
        break;
    }
    case ST_TEMP:
        for (size_t i = 0; i < s->n; i++) s->c[i].logit /= st->f;
        break;
    }
}

static void run_chain(rp_sampler *s, const float *logits) {
    for (int32_t i = 0; i < s->n_vocab; i++) s->c[i] = (cand){i, logits[i], 0};
    s->n = (size_t)s->n_vocab;
    s->sorted = false;
    for (int i = 0; i < s->n_stages; i++) run_stage(s, &s->stages[i]);
}

int32_t rp_sampler_sample(rp_sampler *s, const float *logits) {
    run_chain(s, logits);
    if (s->p.temp <= 0) {
        size_t best = 0;
        for (size_t i = 1; i < s->n; i++)
            if (s->c[i].logit > s->c[best].logit) best = i;
        return s->c[best].id;
    }
    softmax_cands(s);
    double u = rp_rng_uniform(&s->rng), cum = 0;
    for (size_t i = 0; i < s->n; i++) {
        cum += s->c[i].p;
        if (u < cum) return s->c[i].id;
    }
    return s->c[s->n - 1].id;
}

void rp_sampler_probs(rp_sampler *s, const float *logits, float *probs) {
    run_chain(s, logits);
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    if (s->p.temp <= 0) {
        size_t best = 0;
        for (size_t i = 1; i < s->n; i++)
            if (s->c[i].logit > s->c[best].logit) best = i;
        probs[s->c[best].id] = 1.0f;
        return;
    }
    softmax_cands(s);
    for (size_t i = 0; i < s->n; i++) probs[s->c[i].id] = s->c[i].p;
}
