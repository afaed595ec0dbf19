/* Zamba2 on synthetic models: load, batch == token by token, round trip,
 * sequences, plans over both layer kinds, and refusals naming what is wrong
 * in a file. (Against transformers: test_zamba2_hf.c.) */
#include "test_zamba2.h"

#include "convert/synth.h"

#include <math.h>

static rp_synth_params synth_params(int type, bool merged, int attn_rank) {
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = "zamba2";
    sp.n_embd = 64;
    sp.n_layer = 9; /* hybrid at 2, 5, 8: blocks 0, 1, 0 */
    sp.n_head = 4;
    sp.n_ff = 96;
    sp.n_vocab = 400;
    sp.type = type;
    sp.ssm_groups = 2;
    sp.adapter_rank = 8;
    sp.attn_adapter_rank = attn_rank;
    sp.adapters_merged = merged;
    sp.seed = 7;
    return sp;
}

static void make_tokens(int32_t *t, int n, int salt) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 37 + salt * 101 + 3) % 400);
}

/* load, logits finite, batch == token by token (one and two threads), a
 * round trip through the GGUF reader and writer bit-exact */
static void check_synth(int type, bool merged, int attn_rank, bool two_threads) {
    rp_synth_params sp = synth_params(type, merged, attn_rank);
    char name[64];
    snprintf(name, sizeof name, "z2synth-%s-%d-%d.gguf", rp_type_name(type), merged, attn_rank);
    const char *path = test_tmp(name);
    REQUIRE(rp_synth_write(&sp, path, NULL, NULL) == RP_OK, "%s", rp_last_error());
    rp_model *m = load(path);
    REQUIRE(m, "load");
    CHECK(!strcmp(rp_model_arch(m), "zamba2") && rp_model_n_layer(m) == 9, "arch %s, %d layers",
          rp_model_arch(m), rp_model_n_layer(m));
    CHECK(m->layers[8].wq == m->layers[2].wq && m->layers[5].wq != m->layers[2].wq,
          "layer 8 aliases layer 2's block");
    enum { N = 24, NV = 400 };
    int32_t t[N];
    make_tokens(t, N, 1);
    float *ref = malloc((size_t)N * NV * sizeof(float)),
          *got = malloc((size_t)N * NV * sizeof(float));
    rp_context *c1 = NULL, *c2 = NULL, *c3 = NULL;
    REQUIRE(ref && got && open_ctx(m, NULL, NULL, 64, 1, 1, &c1) &&
                open_ctx(m, NULL, NULL, 64, 1, 1, &c2) &&
                open_ctx(m, NULL, NULL, 64, 1, two_threads ? 2 : 1, &c3),
            "ctx");
    REQUIRE(run_chunks(c1, t, N, N, ref) && run_chunks(c2, t, N, 1, got), "decode");
    bool finite = true;
    for (size_t i = 0; i < (size_t)N * NV; i++) finite &= isfinite(ref[i]);
    CHECK(finite, "logits finite");
    double d = test_max_abs_diff(ref, got, (size_t)N * NV);
    CHECK(d <= 1e-4, "%s: batch vs token by token max |delta| %.3g", name, d);
    /* state carried across micro-batches; with two threads, the conv
     * channels and scan heads split between them (one batch: the pool spins) */
    REQUIRE(run_chunks(c3, t, N, two_threads ? N : 7, got), "decode in chunks");
    double d2 = test_max_abs_diff(ref, got, (size_t)N * NV);
    CHECK(d2 <= 1e-4, "%s: %d thread(s) in chunks of %d vs one batch: max |delta| %.3g", name,
          two_threads ? 2 : 1, two_threads ? N : 7, d2);
    /* round trip */
    const char *copy = rewrite(path, "z2synth-copy.gguf", NULL, NULL, NULL);
    REQUIRE(copy, "rewrite");
    size_t la, lb;
    char *fa = test_read(path, &la), *fb = test_read(copy, &lb);
    CHECK(fa && fb && la == lb && !memcmp(fa, fb, la), "the rewritten file is byte-identical");
    free(fa);
    free(fb);
    rp_model *m2 = load(copy);
    rp_context *c4 = NULL;
    REQUIRE(m2 && open_ctx(m2, NULL, NULL, 64, 1, 1, &c4) && run_chunks(c4, t, N, N, got),
            "round trip decode");
    CHECK(!memcmp(ref, got, (size_t)N * NV * sizeof(float)), "%s: round trip logits differ", name);
    printf("     %s: batch vs sequential %.2e, %s %.2e, round trip bit-exact\n", name, d,
           two_threads ? "two threads" : "chunks of 7", d2);
    rp_context_free(c1);
    rp_context_free(c2);
    rp_context_free(c3);
    rp_context_free(c4);
    rp_model_free(m2);
    rp_model_free(m);
    free(ref);
    free(got);
}

void test_zamba2_synth(void) {
    check_synth(RP_TYPE_F32, false, 0, true);
    check_synth(RP_TYPE_F32, true, 0, false);
    check_synth(RP_TYPE_Q8_0, false, 4, false);
}

/* Two sequences interleaved in one batch equal each alone; a recurrent
 * sequence cannot be rolled back, only cleared. */
void test_zamba2_sequences(void) {
    rp_synth_params sp = synth_params(RP_TYPE_F32, false, 4);
    const char *path = test_tmp("z2seq.gguf");
    REQUIRE(rp_synth_write(&sp, path, NULL, NULL) == RP_OK, "%s", rp_last_error());
    rp_model *m = load(path);
    REQUIRE(m, "load");
    enum { N = 16, NV = 400 };
    int32_t a[N], b[N];
    make_tokens(a, N, 1);
    make_tokens(b, N, 2);
    float *ra = malloc((size_t)N * NV * sizeof(float)),
          *rb = malloc((size_t)N * NV * sizeof(float));
    rp_context *c1 = NULL, *c2 = NULL;
    REQUIRE(open_ctx(m, NULL, NULL, 64, 1, 1, &c1) && open_ctx(m, NULL, NULL, 64, 2, 1, &c2),
            "ctx");
    REQUIRE(run_chunks(c1, a, N, N, ra), "a");
    rp_kv_clear(c1);
    REQUIRE(run_chunks(c1, b, N, N, rb), "b");
    int32_t tok[2 * N], seq[2 * N];
    int8_t want[2 * N];
    for (int i = 0; i < N; i++) {
        tok[2 * i] = a[i], seq[2 * i] = 0;
        tok[2 * i + 1] = b[i], seq[2 * i + 1] = 1;
    }
    memset(want, 1, sizeof want);
    rp_batch bb = {.n_tokens = 2 * N, .token = tok, .seq_id = seq, .logits = want};
    REQUIRE(rp_decode(c2, &bb) == RP_OK, "%s", rp_last_error());
    double worst = 0;
    for (int i = 0; i < N; i++)
        worst = fmax(
            worst, fmax(test_max_abs_diff(ra + (size_t)i * NV, rp_get_logits(c2, 2 * i), NV),
                        test_max_abs_diff(rb + (size_t)i * NV, rp_get_logits(c2, 2 * i + 1), NV)));
    CHECK(worst <= 1e-4, "interleaved sequences vs alone: max |delta| %.3g", worst);
    CHECK(rp_kv_seq_truncate(c2, 0, 5) == RP_ERR_UNSUPPORTED &&
              strstr(rp_last_error(), "recurrent"),
          "%s", rp_last_error());
    CHECK(rp_kv_seq_truncate(c2, 1, 0) == RP_OK && rp_kv_seq_len(c2, 1) == 0, "clear sequence 1");
    int32_t s1[N];
    for (int i = 0; i < N; i++) s1[i] = 1;
    rp_batch one = {.n_tokens = N, .token = b, .seq_id = s1, .logits = want};
    REQUIRE(rp_decode(c2, &one) == RP_OK, "%s", rp_last_error());
    double d = test_max_abs_diff(rb + (size_t)(N - 1) * NV, rp_get_logits(c2, N - 1), NV);
    CHECK(d <= 1e-4, "sequence 1 after clearing vs fresh: max |delta| %.3g", d);
    rp_context_free(c1);
    rp_context_free(c2);
    free(ra);
    free(rb);
    rp_model_free(m);
}

/* --repeat-layers: a repeated Mamba2 layer gets its own conv/SSM state, a
 * repeated hybrid visit its own KV slot with the same block and adapter as
 * its source; the plan runs batch == token by token. */
void test_zamba2_plans(void) {
    rp_synth_params sp = synth_params(RP_TYPE_F32, false, 0);
    const char *path = test_tmp("z2plan.gguf");
    REQUIRE(rp_synth_write(&sp, path, NULL, NULL) == RP_OK, "%s", rp_last_error());
    rp_model *m = load(path);
    REQUIRE(m, "load");
    rp_context *c = NULL, *cs = NULL;
    REQUIRE(open_ctx(m, "4,6", NULL, 32, 2, 1, &c), "ctx"); /* steps ..4,5,4,5,6.. */
    CHECK(c->plan->n_eff == 11, "n_eff %d", c->plan->n_eff);
    /* steps 4,5 run layers 4,5; steps 6,7 run them again */
    const int n_seq = c->n_seq;
    for (int s = 0; s < n_seq; s++) {
        CHECK(c->state.rec[4 * n_seq + s] && c->state.rec[6 * n_seq + s] &&
                  c->state.rec[4 * n_seq + s] != c->state.rec[6 * n_seq + s],
              "seq %d: repeated Mamba2 layer 4 has its own recurrent state", s);
        CHECK(c->state.kv[7 * n_seq + s].k &&
                  c->state.kv[5 * n_seq + s].k != c->state.kv[7 * n_seq + s].k,
              "seq %d: repeated hybrid visit (layer 5) has its own KV slot", s);
        CHECK(!c->state.kv[4 * n_seq + s].k && !c->state.kv[6 * n_seq + s].k,
              "Mamba2 steps have no KV");
    }
    CHECK(c->plan->src[7] == 5 && m->layers[c->plan->src[7]].ext == m->layers[5].ext,
          "same block and adapter");
    uint64_t id_bytes;
    {
        rp_context *ci = NULL;
        REQUIRE(open_ctx(m, NULL, NULL, 32, 2, 1, &ci), "ctx");
        id_bytes = rp_context_state_bytes(ci);
        rp_context_free(ci);
    }
    CHECK(rp_context_state_bytes(c) > id_bytes, "the plan's state is larger than the identity's");
    enum { N = 20, NV = 400 };
    int32_t t[N];
    make_tokens(t, N, 3);
    float *ref = malloc((size_t)N * NV * sizeof(float)),
          *got = malloc((size_t)N * NV * sizeof(float));
    REQUIRE(open_ctx(m, "4,6", NULL, 32, 1, 1, &cs), "ctx");
    REQUIRE(run_chunks(c, t, N, N, ref) && run_chunks(cs, t, N, 1, got), "decode");
    double d = test_max_abs_diff(ref, got, (size_t)N * NV);
    CHECK(d <= 1e-4, "plan 4,6: batch vs token by token %.3g", d);
    rp_context_free(cs);
    /* the same plan as an explicit map gives the same bits */
    REQUIRE(open_ctx(m, NULL, "0..5,4..8", 32, 1, 1, &cs) && run_chunks(cs, t, N, N, got), "map");
    CHECK(!memcmp(ref, got, (size_t)N * NV * sizeof(float)),
          "--layer-map 0..5,4..8 differs from --repeat-layers 4,6");
    /* step ranges (reprise scan's prefix reuse): the identity's steps 0..5
     * are the plan's, so the plan from step 6 on continues them; the token
     * embeddings reach every hybrid step also when the stream enters mid-plan */
    rp_context *id = NULL;
    float *h = malloc((size_t)N * 64 * sizeof(float));
    REQUIRE(h && open_ctx(m, NULL, NULL, 32, 1, 1, &id), "ctx");
    int8_t all[N];
    memset(all, 1, sizeof all);
    rp_batch bt = {.n_tokens = N, .token = t, .logits = all};
    CHECK(rp_decode_steps(id, &bt, 0, 3, NULL, h) == RP_OK, "%s", rp_last_error());
    rp_kv_clear(id);
    CHECK(rp_decode_steps(id, &bt, 3, 6, h, h) == RP_OK, "%s", rp_last_error());
    rp_kv_clear(cs);
    CHECK(rp_decode_steps(cs, &bt, 6, 11, h, NULL) == RP_OK, "%s", rp_last_error());
    bool same = true;
    for (int i = 0; i < N; i++)
        same &= !memcmp(rp_get_logits(cs, i), ref + (size_t)i * NV, NV * sizeof(float));
    CHECK(same, "plan 4,6 from the identity's steps [0,3)+[3,6) differs from the whole plan");
    rp_context_free(id);
    free(h);
    printf("     plan 4,6: 11 steps, batch vs sequential %.2e, state %llu vs %llu bytes\n", d,
           (unsigned long long)rp_context_state_bytes(c), (unsigned long long)id_bytes);
    rp_context_free(cs);
    rp_context_free(c);
    free(ref);
    free(got);
    rp_model_free(m);
}
/* ---- refusals: files edited from a synthetic model --------------------------- */

static void e_no_rank(rp_gguf_writer *w) {
    rp_gguf_w_remove(w, "zamba2.ffn_gate_up_adapter_rank");
}
static void e_rank0(rp_gguf_writer *w) {
    rp_gguf_w_set_u32(w, "zamba2.ffn_gate_up_adapter_rank", 0);
}
static void e_rank5(rp_gguf_writer *w) {
    rp_gguf_w_set_u32(w, "zamba2.ffn_gate_up_adapter_rank", 5);
}
static void e_no_attn_rank(rp_gguf_writer *w) {
    rp_gguf_w_remove(w, "zamba2.attn_adapter_rank");
}
static void e_blocks_short(rp_gguf_writer *w) {
    int32_t b[5] = {-1, -1, 0, -1, -1};
    rp_gguf_w_set_arr(w, "zamba2.shared_block", RP_GGUF_INT32, b, 5);
}
static void e_blocks_range(rp_gguf_writer *w) {
    int32_t b[9] = {-1, -1, 0, -1, -1, 1, 12, -1, 0};
    rp_gguf_w_set_arr(w, "zamba2.shared_block", RP_GGUF_INT32, b, 9);
}
static void e_blocks_gap(rp_gguf_writer *w) {
    int32_t b[9] = {-1, -1, 0, -1, -1, 2, -1, -1, 0};
    rp_gguf_w_set_arr(w, "zamba2.shared_block", RP_GGUF_INT32, b, 9);
}
static void e_blocks_none(rp_gguf_writer *w) {
    rp_gguf_w_remove(w, "zamba2.shared_block");
}
static void e_key_length(rp_gguf_writer *w) {
    rp_gguf_w_set_u32(w, "zamba2.attention.key_length", 8);
    rp_gguf_w_set_u32(w, "zamba2.attention.value_length", 8);
    rp_gguf_w_set_u32(w, "zamba2.rope.dimension_count", 8);
}
static void e_groups(rp_gguf_writer *w) {
    rp_gguf_w_set_u32(w, "zamba2.ssm.group_count", 3);
}
static void e_inner(rp_gguf_writer *w) {
    rp_gguf_w_set_u32(w, "zamba2.ssm.inner_size", 120);
}

void test_zamba2_refusals(void) {
    char pa[1024], pm[1024];
    rp_synth_params sp = synth_params(RP_TYPE_F32, false, 4);
    snprintf(pa, sizeof pa, "%s", test_tmp("z2ref-a.gguf"));
    snprintf(pm, sizeof pm, "%s", test_tmp("z2ref-m.gguf"));
    REQUIRE(rp_synth_write(&sp, pa, NULL, NULL) == RP_OK, "%s", rp_last_error());
    sp = synth_params(RP_TYPE_F32, true, 0);
    REQUIRE(rp_synth_write(&sp, pm, NULL, NULL) == RP_OK, "%s", rp_last_error());
    struct {
        const char *src;
        const char *skip, *zero;
        edit_fn edit;
        rp_status want;
        const char *needle;
    } cases[] = {
        {pa, NULL, NULL, e_no_rank, RP_ERR_FORMAT, "refusing to guess its rank"},
        {pa, NULL, NULL, e_rank0, RP_ERR_FORMAT,
         "blk.2.ffn_gate_up_adapter_a.weight' is an adapter"},
        {pa, NULL, NULL, e_rank5, RP_ERR_FORMAT, "ffn_gate_up_adapter_a.weight' has shape"},
        {pa, NULL, NULL, e_no_attn_rank, RP_ERR_FORMAT, "attn_adapter_rank"},
        {pa, NULL, NULL, e_blocks_short, RP_ERR_FORMAT, "zamba2.shared_block' has 5 entries"},
        {pa, NULL, NULL, e_blocks_range, RP_ERR_FORMAT, "zamba2.shared_block'[6] = 12"},
        {pa, NULL, NULL, e_blocks_gap, RP_ERR_FORMAT, "no layer visits block 1"},
        {pa, NULL, NULL, e_blocks_none, RP_ERR_FORMAT, "zamba2.shared_block' is missing"},
        {pa, NULL, NULL, e_key_length, RP_ERR_FORMAT, "must equal 2 x embedding_length"},
        {pa, NULL, NULL, e_groups, RP_ERR_FORMAT, "group_count 3"},
        {pa, NULL, NULL, e_inner, RP_ERR_FORMAT, "ssm_in.weight' has shape"},
        /* the block's tensors are stored at its first hybrid layer only */
        {pa, "blk.2.attn_k.weight", NULL, NULL, RP_ERR_FORMAT,
         "shared block 0 (stored at its first hybrid layer 2"},
        {pa, "blk.5.ffn_up.weight", NULL, NULL, RP_ERR_FORMAT,
         "missing tensor 'blk.5.ffn_up.weight'"},
        {pa, "blk.8.hybrid_proj.weight", NULL, NULL, RP_ERR_FORMAT,
         "missing tensor 'blk.8.hybrid_proj.weight'"},
        {pa, "blk.8.ffn_gate_up_adapter_b.weight", NULL, NULL, RP_ERR_FORMAT,
         "blk.8.ffn_gate_up_adapter_b.weight"},
        {pa, "blk.2.ssm_conv1d.weight", NULL, NULL, RP_ERR_FORMAT,
         "missing tensor 'blk.2.ssm_conv1d.weight'"},
        /* A = -exp(A_log) < 0: a file holding A_log itself is refused */
        {pa, NULL, "blk.3.ssm_a", NULL, RP_ERR_FORMAT, "'blk.3.ssm_a'[0] = 0"},
        /* merged form: every hybrid layer has its own ffn_up */
        {pm, "blk.8.ffn_up.weight", NULL, NULL, RP_ERR_FORMAT,
         "hybrid layer 8 has no 'blk.8.ffn_up.weight'"},
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(cases); i++) {
        char out[64];
        snprintf(out, sizeof out, "z2-refuse-%zu.gguf", i);
        const char *path = rewrite(cases[i].src, out, cases[i].skip, cases[i].zero, cases[i].edit);
        REQUIRE(path, "case %zu: rewrite", i);
        rp_model *m = NULL;
        rp_status s = rp_model_load(path, NULL, &m);
        CHECK(s == cases[i].want && strstr(rp_last_error(), cases[i].needle),
              "case %zu: status %d, message '%s'", i, (int)s, rp_last_error());
        rp_model_free(m);
    }
    /* the unedited copies load */
    rp_model *m = load(rewrite(pa, "z2-copy.gguf", NULL, NULL, NULL));
    CHECK(m, "unedited copy loads");
    rp_model_free(m);
}
