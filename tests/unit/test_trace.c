/* The trace hook (rp_context_set_trace): the named intermediates of a forward
 * pass, in order, with their step, layer and positions; the logits it hands
 * are the decode's; the residual stream it hands is the forward's (the next
 * step's norm of it is the traced norm); a plan's steps name their layers;
 * without a hook nothing is called and the logits are the same. */
#include "reprise.h"
#include "test.h"

#include <string.h>

#define STORIES "models/stories260K.gguf"
#define GEMMA3  "models/synth/gemma3-tiny.gguf"

typedef struct rec {
    int n;
    char name[512][24];
    int step[512], src[512], rows[512], width[512];
    int32_t pos0[512];
    float *last_logits; /* copy of result_output */
    float *l_out;       /* copy of the last l_out */
    int l_out_step;
    float *result_norm;
    size_t n_logits, n_l_out;
} rec;

static void on_tensor(void *user, const rp_trace_tensor *t) {
    rec *r = user;
    if (r->n < 512) {
        snprintf(r->name[r->n], sizeof r->name[0], "%s", t->name);
        r->step[r->n] = t->step;
        r->src[r->n] = t->src;
        r->rows[r->n] = t->n_rows;
        r->width[r->n] = t->width;
        r->pos0[r->n] = t->pos[0];
        r->n++;
    }
    const size_t nf = (size_t)t->n_rows * (size_t)t->width;
    float **dst = !strcmp(t->name, "result_output") ? &r->last_logits
                  : !strcmp(t->name, "l_out")       ? &r->l_out
                  : !strcmp(t->name, "result_norm") ? &r->result_norm
                                                    : NULL;
    if (!dst) return;
    free(*dst);
    *dst = malloc(nf * sizeof(float));
    memcpy(*dst, t->data, nf * sizeof(float));
    if (dst == &r->last_logits) r->n_logits = nf;
    if (dst == &r->l_out) r->n_l_out = nf, r->l_out_step = t->step;
}

static rp_context *ctx_of(const rp_model *m, const char *repeat) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.repeat_layers = repeat;
    rp_context *c = NULL;
    if (rp_context_new(m, &cp, &c)) fprintf(stderr, "  %s\n", rp_last_error());
    return c;
}

static int find(const rec *r, const char *name, int step) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->name[i], name) && r->step[i] == step) return i;
    return -1;
}

void test_trace_names_and_logits(void) {
    rp_model *m = NULL;
    REQUIRE(rp_model_load(test_shared(STORIES), NULL, &m) == RP_OK, "%s", rp_last_error());
    rp_context *c = ctx_of(m, NULL);
    REQUIRE(c, "context");
    const int32_t toks[] = {1, 403, 407, 261, 378};
    const int8_t want[] = {1, 1, 1, 1, 1};
    rp_batch b = {.n_tokens = 5, .token = toks, .logits = want};
    rec r = {0};
    rp_context_set_trace(c, on_tensor, &r);
    REQUIRE(rp_decode(c, &b) == RP_OK, "%s", rp_last_error());
    const int nv = rp_n_vocab(c), ne = (int)rp_model_n_embd(m), nl = (int)rp_model_n_layer(m);
    /* the order of one step, llama.cpp's names */
    const char *order[] = {"attn_norm",  "Qcur",    "Kcur",     "Vcur",     "kqv_out",
                           "attn_out",   "ffn_inp", "ffn_norm", "ffn_gate", "ffn_up",
                           "ffn_swiglu", "ffn_out", "l_out"};
    CHECK(r.n == 1 + nl * 13 + 2, "%d tensors for %d layers", r.n, nl);
    CHECK(!strcmp(r.name[0], "inp_embd") && r.step[0] == -1 && r.src[0] == -1, "inp_embd first");
    for (int l = 0; l < nl; l++)
        for (int k = 0; k < 13; k++) {
            const int i = 1 + l * 13 + k;
            CHECK(i < r.n && !strcmp(r.name[i], order[k]) && r.step[i] == l && r.src[i] == l &&
                      r.rows[i] == 5 && r.pos0[i] == 0,
                  "tensor %d: %s step %d (want %s step %d)", i, r.name[i], r.step[i], order[k], l);
        }
    CHECK(r.width[find(&r, "attn_norm", 0)] == ne, "attn_norm width");
    CHECK(!strcmp(r.name[r.n - 1], "result_output") && r.step[r.n - 1] == nl &&
              r.width[r.n - 1] == nv && r.rows[r.n - 1] == 5,
          "result_output last");
    /* the logits handed are the decode's */
    bool same = r.n_logits == (size_t)5 * (size_t)nv;
    for (int i = 0; i < 5 && same; i++)
        same = !memcmp(r.last_logits + (size_t)i * (size_t)nv, rp_get_logits(c, i),
                       (size_t)nv * sizeof(float));
    CHECK(same, "result_output = rp_get_logits bit for bit");
    CHECK(r.l_out_step == nl - 1 && r.n_l_out == (size_t)5 * (size_t)ne && r.result_norm,
          "last l_out");
    /* without a hook: same logits, no call */
    float *ref = malloc((size_t)nv * sizeof(float));
    memcpy(ref, rp_get_logits(c, 4), (size_t)nv * sizeof(float));
    rp_context_set_trace(c, NULL, NULL);
    const int before = r.n;
    REQUIRE(rp_kv_seq_rm(c, 0, 0, -1) == RP_OK, "%s", rp_last_error());
    REQUIRE(rp_decode(c, &b) == RP_OK, "%s", rp_last_error());
    CHECK(r.n == before, "no calls without a hook");
    CHECK(!memcmp(ref, rp_get_logits(c, 4), (size_t)nv * sizeof(float)),
          "logits without the hook = with it");
    free(ref);
    free(r.last_logits);
    free(r.l_out);
    free(r.result_norm);
    rp_context_free(c);
    rp_model_free(m);
}

/* A plan: step e runs layer src; output rows only (last token) after the
 * last step's attention; Gemma 3's post-norms are traced. */
void test_trace_plan_steps(void) {
    rp_model *m = NULL;
    REQUIRE(rp_model_load(test_shared(GEMMA3), NULL, &m) == RP_OK, "%s", rp_last_error());
    rp_context *c = ctx_of(m, "1,3");
    REQUIRE(c, "context");
    const int32_t toks[] = {1, 5, 9, 13};
    rp_batch b = {.n_tokens = 4, .token = toks};
    rec r = {0};
    rp_context_set_trace(c, on_tensor, &r);
    REQUIRE(rp_decode(c, &b) == RP_OK, "%s", rp_last_error());
    const int nl = (int)rp_model_n_layer(m), ne = nl + 2; /* 0 1 2 | 1 2 3 ... */
    int steps = 0;
    for (int i = 0; i < r.n; i++)
        if (!strcmp(r.name[i], "l_out")) {
            const int e = r.step[i];
            const int want = e < 3 ? e : e - 2;
            CHECK(r.src[i] == want, "step %d runs layer %d (want %d)", e, r.src[i], want);
            steps++;
        }
    CHECK(steps == ne, "%d steps traced (want %d)", steps, ne);
    CHECK(find(&r, "attn_post_norm", 0) >= 0 && find(&r, "ffn_post_norm", 0) >= 0,
          "post-norms traced");
    const int last = find(&r, "ffn_norm", ne - 1);
    CHECK(last >= 0 && r.rows[last] == 1 && r.pos0[last] == 3,
          "after the last attention only the output row (position 3)");
    const int kq = find(&r, "kqv_out", ne - 1);
    CHECK(kq >= 0 && r.rows[kq] == 4, "the last attention still sees every row");
    const int out = find(&r, "result_output", ne);
    CHECK(out >= 0 && r.rows[out] == 1 && r.pos0[out] == 3, "one output row");
    bool same = r.last_logits &&
                !memcmp(r.last_logits, rp_get_logits(c, 3), (size_t)rp_n_vocab(c) * sizeof(float));
    CHECK(same, "result_output = the logits");
    free(r.last_logits);
    free(r.l_out);
    free(r.result_norm);
    rp_context_free(c);
    rp_model_free(m);
}
