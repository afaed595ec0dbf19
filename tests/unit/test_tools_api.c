/* The tool-level services of reprise_tools.h called as an embedder calls
 * them, without the tools' option parsing: perplexity and KLD in one call
 * (llama.cpp's golden), GGUF value text and copy, quantize plans, merge, the
 * benchmarks, the scan ranking, plan-file steps, a conversion's table and a
 * model's content hash. Public headers only. */
#include "reprise.h"
#include "reprise_tools.h"
#include "test.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#define STORIES "models/stories260K.gguf"
#define QWEN3   "models/synth/qwen3-tiny.gguf"
#define TEXT    "text/war-and-peace.txt"
#define GOLDEN  "golden/ppl/stories260K-war-and-peace-c128-40.txt"

static rp_model *load(const char *rel) {
    rp_model *m = NULL;
    if (rp_model_load(test_shared(rel), NULL, &m)) fprintf(stderr, "  %s\n", rp_last_error());
    return m;
}

static rp_context *context(const rp_model *m, int n_ctx, int n_seq, const char *repeat) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_seq_max = (uint32_t)n_seq;
    cp.n_threads = 1;
    cp.type_k = cp.type_v = RP_TYPE_F32;
    cp.repeat_layers = repeat;
    rp_context *c = NULL;
    if (rp_context_new(m, &cp, &c)) fprintf(stderr, "  %s\n", rp_last_error());
    return c;
}

/* "Final estimate: PPL = X +/- Y" of the golden. */
static bool golden_ppl(double *ppl, double *unc) {
    size_t len;
    char *s = test_read(test_shared(GOLDEN), &len);
    const char *p = s ? strstr(s, "PPL = ") : NULL;
    bool ok = p && sscanf(p, "PPL = %lf +/- %lf", ppl, unc) == 2;
    free(s);
    return ok;
}

typedef struct chunk_log {
    int n, cancel_at;
    double last;
} chunk_log;

static bool on_chunk(int index, double ppl, double unc, const rp_kld_stats *kld, void *user) {
    (void)unc;
    (void)kld;
    chunk_log *l = user;
    l->n++;
    l->last = ppl;
    return index + 1 != l->cancel_at;
}

/* rp_perplexity gives llama.cpp's number, writes a base file a second call
 * compares with (itself: no divergence), and a cancel leaves no file. */
void test_tools_api_perplexity(void) {
    double g_ppl, g_unc;
    REQUIRE(golden_ppl(&g_ppl, &g_unc), "golden");
    size_t len;
    char *text = test_read(test_shared(TEXT), &len);
    rp_model *m = load(STORIES);
    rp_context *c = m ? context(m, 128, 4, NULL) : NULL;
    REQUIRE(text && c, "setup");
    len = 16384; /* the prefix holds the 40 chunks of 128 tokens (test_eval.c) */
    const char *base = test_tmp("base.kld");
    chunk_log log = {0};
    rp_perplexity_params p = {.n_chunks = 40,
                              .write_base = base,
                              .base_desc = "stories",
                              .on_chunk = on_chunk,
                              .user = &log};
    rp_perplexity_result r;
    REQUIRE(!rp_perplexity(c, text, len, &p, &r), "%s", rp_last_error());
    CHECK(fabs(r.ppl - g_ppl) <= 2e-6 * g_ppl && fabs(r.unc - g_unc) <= 2e-5 * g_unc,
          "PPL %.6f +/- %.6f, llama.cpp %.4f +/- %.5f", r.ppl, r.unc, g_ppl, g_unc);
    CHECK(log.n == 40 && log.last == r.ppl && r.windows.n_ctx == 128 && r.n_seq == 4,
          "%d chunks, windows of %d, %d per decode", log.n, r.windows.n_ctx, r.n_seq);
    /* the same model against its own base file: KLD 0, the same top token */
    rp_perplexity_params k = {.kld_base = base};
    REQUIRE(!rp_perplexity(c, NULL, 0, &k, &r), "%s", rp_last_error());
    CHECK(r.kld.count == 40 * 63 && r.kld.kld.val < 1e-6 && r.kld.same_top.val == 1.0,
          "KLD %g over %zu tokens, same top %g", r.kld.kld.val, r.kld.count, r.kld.same_top.val);
    CHECK(fabs(r.kld.ppl.val - g_ppl) <= 2e-6 * g_ppl, "PPL(Q) %.6f", r.kld.ppl.val);
    /* cancelled after chunk 3: RP_ERR_CANCELLED, no base file */
    const char *gone = test_tmp("cancelled.kld");
    log = (chunk_log){.cancel_at = 3};
    p.write_base = gone;
    CHECK(rp_perplexity(c, text, len, &p, &r) == RP_ERR_CANCELLED && log.n == 3, "cancel: %d",
          log.n);
    CHECK(access(gone, F_OK) != 0, "a cancelled run left %s", gone);
    CHECK(rp_perplexity(c, NULL, 0, NULL, &r) == RP_ERR_INVALID_ARG, "no text, no base accepted");
    rp_context_free(c);
    rp_model_free(m);
    free(text);
}

/* Values as inspect shows them, and whole; a file copied through the reader
 * and writer comes out byte for byte. */
void test_tools_api_gguf_text_copy(void) {
    rp_gguf *g;
    REQUIRE(!rp_gguf_open(test_shared(STORIES), &g), "%s", rp_last_error());
    const rp_gguf_val *tok = rp_gguf_get(g, "tokenizer.ggml.tokens");
    const rp_gguf_val *eps = rp_gguf_get(g, "llama.attention.layer_norm_rms_epsilon");
    REQUIRE(tok && eps, "keys");
    char buf[4096], ty[64];
    rp_gguf_val_text(tok, true, buf, sizeof buf);
    CHECK(!strcmp(buf, "[\"<unk>\", \"<s>\", \"</s>\", \"<0x00>\", \"<0x01>\", \"<0x02>\", "
                       "\"<0x03>\", \"<0x04>\", ... 504 more]"),
          "preview %s", buf);
    const int n = rp_gguf_val_text(tok, false, NULL, 0);
    CHECK(n > 2000 && rp_gguf_val_text(tok, false, buf, 8) == n && !strcmp(buf, "[\"<unk>"),
          "whole: %d", n);
    rp_gguf_val_type_text(tok, ty, sizeof ty);
    CHECK(!strcmp(ty, "arr[str,512]"), "type %s", ty);
    rp_gguf_val_text(eps, true, buf, sizeof buf);
    CHECK(!strcmp(buf, "9.99999975e-06"), "float %s", buf);
    rp_gguf_close(g);
    const char *out = test_tmp("copy.gguf");
    REQUIRE(!rp_gguf_copy(test_shared(STORIES), out), "%s", rp_last_error());
    size_t na, nb;
    char *a = test_read(test_shared(STORIES), &na), *b = test_read(out, &nb);
    CHECK(a && b && na == nb && !memcmp(a, b, na), "the copy differs");
    free(a);
    free(b);
    CHECK(rp_gguf_copy(test_shared("models/none.gguf"), out) == RP_ERR_IO, "a missing input");
}

/* A quantization plan: llama.cpp's mixture, the totals, refusals naming the
 * problem, and a written file that loads. */
void test_tools_api_quantize(void) {
    CHECK(rp_quantize_ftype("q4_k_m") == 15 && rp_quantize_ftype("Q9") == -1, "ftype");
    rp_quantize_params p = rp_quantize_default_params();
    p.type = "Q4_K_M";
    rp_quantize_plan *q;
    REQUIRE(!rp_quantize_plan_new(test_shared(QWEN3), &p, &q), "%s", rp_last_error());
    int found = 0;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < rp_quantize_plan_n_tensors(q); i++) {
        rp_quantize_tensor t;
        REQUIRE(rp_quantize_plan_tensor(q, i, &t), "tensor %llu", (unsigned long long)i);
        sum += t.bytes_out;
        found += !strcmp(t.name, "blk.0.attn_v.weight") && t.type_out == RP_TYPE_Q6_K;
        found += !strcmp(t.name, "blk.1.attn_v.weight") && t.type_out == RP_TYPE_Q4_K;
        found += !strcmp(t.name, "output_norm.weight") && t.type_out == RP_TYPE_F32;
    }
    uint64_t in, outb;
    int nf;
    rp_quantize_plan_totals(q, &in, &outb, &nf);
    CHECK(found == 3 && sum == outb && outb < in && nf == 0, "mixture %d, %llu bytes", found,
          (unsigned long long)outb);
    CHECK(!strcmp(rp_quantize_plan_type(q), "Q4_K_M"), "type %s", rp_quantize_plan_type(q));
    const char *out = test_tmp("q.gguf");
    REQUIRE(!rp_quantize_plan_write(q, out, NULL, NULL), "%s", rp_last_error());
    rp_quantize_plan_free(q);
    rp_model *m = NULL;
    CHECK(!rp_model_load(out, NULL, &m), "the quantized file: %s", rp_last_error());
    rp_model_free(m);
    const char *bad[] = {"(=q8_0"};
    p.tensor_types = bad;
    p.n_tensor_types = 1;
    CHECK(rp_quantize_plan_new(test_shared(QWEN3), &p, &q) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "bad regular expression"),
          "%s", rp_last_error());
    p.n_tensor_types = 0;
    CHECK(rp_quantize_plan_new(test_shared("models/synth/qwen3-tiny-Q4_K_M.gguf"), &p, &q) ==
                  RP_ERR_UNSUPPORTED &&
              strstr(rp_last_error(), "quantizing it again"),
          "%s", rp_last_error());
}

/* The merged file of a plan runs, as the identity, the logits of the plan. */
void test_tools_api_merge(void) {
    rp_model *m = load(STORIES);
    rp_context *plan = m ? context(m, 32, 1, "1,3") : NULL;
    REQUIRE(plan, "setup");
    const char *out = test_tmp("merged.gguf");
    rp_merge_info info;
    REQUIRE(!rp_merge_write(plan, out, NULL, NULL, &info), "%s", rp_last_error());
    CHECK(info.n_layer_out == 7 && info.n_src == 5 && info.n_repeated == 2 && info.bytes > 0,
          "%d layers", info.n_layer_out);
    rp_model *mm = NULL;
    REQUIRE(!rp_model_load(out, NULL, &mm), "%s", rp_last_error());
    rp_context *merged = context(mm, 32, 1, NULL);
    const int32_t t[] = {1, 403, 407, 261, 378, 69};
    rp_batch b = {.n_tokens = 6, .token = t};
    REQUIRE(merged && !rp_decode(plan, &b) && !rp_decode(merged, &b), "%s", rp_last_error());
    CHECK(!memcmp(rp_get_logits(plan, 5), rp_get_logits(merged, 5), 512 * sizeof(float)),
          "merged logits differ from the plan's");
    rp_context_free(merged);
    rp_model_free(mm);
    rp_context_free(plan);
    rp_model_free(m);
}

/* The benchmarks measure something and refuse what they cannot. */
void test_tools_api_bench(void) {
    double gbs = 0;
    CHECK(!rp_bench_bandwidth(1, 8, &gbs) && gbs > 0, "bandwidth %g", gbs);
    CHECK(rp_bench_bandwidth(1, 0, &gbs) == RP_ERR_INVALID_ARG, "0 MiB accepted");
    rp_bench_matmul *b;
    REQUIRE(!rp_bench_matmul_new(RP_TYPE_Q8_0, 256, 1, 1, &b), "%s", rp_last_error());
    rp_bench_matmul_info info;
    rp_bench_matmul_get_info(b, &info);
    double wall = 0, cpu = -1;
    CHECK(info.rows >= 64 && info.n == 256 && info.bytes == (uint64_t)info.rows * 272,
          "%d rows, %llu bytes", info.rows, (unsigned long long)info.bytes);
    CHECK(!rp_bench_matmul_run(b, 16, 2, &wall, &cpu) && wall > 0 && cpu >= 0, "run");
    CHECK(rp_bench_matmul_run(b, 513, 1, &wall, &cpu) == RP_ERR_INVALID_ARG, "513 tokens");
    rp_bench_matmul_free(b);
    CHECK(rp_bench_matmul_new(RP_TYPE_Q8_1, 256, 1, 1, &b) == RP_ERR_INVALID_ARG, "q8_1");
    CHECK(rp_bench_matmul_new(RP_TYPE_Q4_K, 100, 1, 1, &b) == RP_ERR_INVALID_ARG, "rows of 100");
}

/* Best first; ties go to fewer extra layers, then to the row order; NaN left out. */
void test_tools_api_scan_rank(void) {
    const rp_scan_row rows[] = {
        {0, 2, 2, 0, -1.0, 0, ""}, {1, 2, 1, 0, -1.0, 0, ""}, {0, 1, 1, 0, NAN, 0, ""},
        {2, 3, 1, 0, -3.0, 0, ""}, {1, 3, 2, 0, 0.5, 0, ""},  {0, 3, 3, 0, -1.0, 0, ""},
    };
    int order[6], n = 0;
    rp_scan_rank(rows, 6, -1, order, &n);
    CHECK(n == 5 && order[0] == 3 && order[1] == 1 && order[2] == 0 && order[3] == 5 &&
              order[4] == 4,
          "lower better: %d: %d %d %d %d %d", n, order[0], order[1], order[2], order[3], order[4]);
    rp_scan_rank(rows, 6, +1, order, &n);
    CHECK(n == 5 && order[0] == 4 && order[1] == 1 && order[4] == 3, "higher better");
}

/* A plan file's steps on its base model; a content hash through the model. */
void test_tools_api_planfile_and_hash(void) {
    rp_model *m = load(STORIES);
    REQUIRE(m, "load");
    rp_content_hash h, hg;
    rp_gguf *g;
    REQUIRE(!rp_model_content_hash(m, NULL, NULL, &h) && !rp_gguf_open(test_shared(STORIES), &g) &&
                !rp_content_hash_get(g, NULL, NULL, &hg),
            "%s", rp_last_error());
    CHECK(rp_content_hash_valid(h.hash) && !strcmp(h.hash, hg.hash), "%s vs %s", h.hash, hg.hash);
    rp_gguf_close(g);
    rp_planfile *pf;
    REQUIRE(!rp_planfile_new(m, h.hash, "rys", "", RP_PLAN_REPEAT, "1,3", &pf), "%s",
            rp_last_error());
    char steps[64];
    CHECK(rp_planfile_steps(pf, steps, sizeof steps) > 0 && !strcmp(steps, "0..2 | 1..4"),
          "steps %s", steps);
    bool forced = true;
    CHECK(!rp_planfile_check(pf, m, h.hash, false, &forced) && !forced, "check");
    rp_planfile_free(pf);
    rp_model_free(m);
}

/* A conversion's table: every tensor's size adds up to the file's tensor data. */
void test_tools_api_convert_table(void) {
    rp_convert_params p = rp_convert_default_params();
    p.dir = "tests/fixtures/hf/llama";
    rp_conv *cv;
    REQUIRE(!rp_conv_open(&p, &cv), "%s", rp_last_error());
    uint64_t total = 0;
    int from_ok = 0;
    const size_t n = rp_conv_n_out(cv);
    for (size_t i = 0; i < n; i++) {
        rp_conv_tensor t;
        char from[400];
        REQUIRE(rp_conv_tensor_at(cv, i, &t), "tensor %zu", i);
        total += t.bytes;
        from_ok += rp_conv_tensor_from(cv, i, from, sizeof from) > 0; /* a source or a note */
    }
    rp_conv_tensor t;
    CHECK(n > 0 && from_ok == (int)n && total < rp_conv_file_size(cv) &&
              !rp_conv_tensor_at(cv, n, &t),
          "%zu tensors, %d with a source", n, from_ok);
    CHECK(!strcmp(rp_conv_arch_name(cv), "llama") && strstr(rp_conv_arch_list(), "Llama"),
          "arch %s", rp_conv_arch_name(cv));
    rp_conv_free(cv);
}
