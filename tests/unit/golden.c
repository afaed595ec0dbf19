#include "golden.h"
#include "test.h"

#include <math.h>
#include <string.h>

bool test_open(const char *path, const char *repeat, int n_ctx, rp_model **m, rp_context **c) {
    *c = NULL;
    if (rp_model_load(path, NULL, m)) {
        fprintf(stderr, "  %s\n", rp_last_error());
        return false;
    }
    rp_context_params cp = rp_context_default_params();
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.n_ctx = (uint32_t)n_ctx;
    cp.repeat_layers = repeat;
    if (rp_context_new(*m, &cp, c)) {
        fprintf(stderr, "  %s\n", rp_last_error());
        rp_model_free(*m);
        return false;
    }
    return true;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

bool golden_run(const char *model, const char *prefix, const char *repeat, golden_result *r) {
    const golden_opts o = {0};
    return golden_run_opts(model, prefix, repeat, &o, r);
}

bool golden_run_opts(const char *model, const char *prefix, const char *repeat,
                     const golden_opts *o, golden_result *r) {
    memset(r, 0, sizeof *r);
    if (o->logits) *o->logits = NULL;
    char path[1024];
    int toks[4096], greedy[4096];
    snprintf(path, sizeof path, "%s.tokens.txt", prefix);
    int n = test_read_ints(test_shared(path), 0, toks, 4096);
    snprintf(path, sizeof path, "%s.greedy.txt", prefix);
    int ng = test_read_ints(test_shared(path), 0, greedy, 4096);
    snprintf(path, sizeof path, "%s.logits.f32", prefix);
    size_t len;
    float *ref = test_read(test_shared(path), &len);
    if (n <= 0 || ng <= 0 || !ref) {
        free(ref);
        return false;
    }
    if (o->max_greedy > 0 && ng > o->max_greedy) ng = o->max_greedy;
    rp_model *m;
    rp_context *c = NULL;
    const char *mp = model[0] == '/' ? model : test_shared(model);
    if (rp_model_load(mp, NULL, &m)) {
        fprintf(stderr, "  %s\n", rp_last_error());
        free(ref);
        return false;
    }
    rp_context_params cp = rp_context_default_params();
    cp.type_k = cp.type_v = o->type_kv ? o->type_kv : RP_TYPE_F32;
    cp.n_ctx = 512;
    cp.repeat_layers = repeat;
    cp.device = o->device;
    if (rp_context_new(m, &cp, &c)) {
        fprintf(stderr, "  %s\n", rp_last_error());
        rp_model_free(m);
        free(ref);
        return false;
    }
    int nv = rp_n_vocab(c);
    bool ok = len == (size_t)n * (size_t)nv * sizeof(float);
    int8_t want[4096];
    for (int i = 0; i < n; i++) want[i] = 1;
    int32_t t32[4096];
    for (int i = 0; i < n; i++) t32[i] = toks[i];
    rp_batch b = {.n_tokens = n, .token = t32, .logits = want};
    if (ok && rp_decode(c, &b) == RP_OK) {
        float *mine = malloc((size_t)n * (size_t)nv * sizeof(float));
        for (int i = 0; i < n; i++) {
            memcpy(mine + (size_t)i * (size_t)nv, rp_get_logits(c, i), (size_t)nv * sizeof(float));
            r->top1_agree += argmax(mine + (size_t)i * nv, nv) == argmax(ref + (size_t)i * nv, nv);
        }
        r->n_pos = n;
        r->max_abs = test_max_abs_diff(ref, mine, (size_t)n * (size_t)nv);
        r->nmse = test_nmse(ref, mine, (size_t)n * (size_t)nv);
        if (o->n_vocab) *o->n_vocab = nv;
        if (o->logits)
            *o->logits = mine;
        else
            free(mine);
        /* greedy continuation */
        int32_t tok = argmax(rp_get_logits(c, n - 1), nv);
        r->n_greedy = ng;
        for (int i = 0; i < ng; i++) {
            if (tok != greedy[i]) break;
            r->greedy_match++;
            if (i + 1 == ng) break;
            rp_batch one = {.n_tokens = 1, .token = &tok};
            if (rp_decode(c, &one)) break;
            tok = argmax(rp_get_logits(c, 0), nv);
        }
    } else {
        ok = false;
    }
    rp_context_free(c);
    rp_model_free(m);
    free(ref);
    return ok;
}
