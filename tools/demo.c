/* reprise demo: the `make run` job. The trained demo model (models/) and its
 * held-out text are embedded in the binary (tools/demo_data.c), so the job
 * needs no file: a short generation without a plan and with a plan repeating
 * a middle block, the plan report, and the perplexity of both on text the
 * model never saw. */
#include "tools.h"

#include <stdlib.h>
#include <string.h>

extern const unsigned char rp_demo_gguf[], rp_demo_gguf_end[];
extern const unsigned char rp_demo_text[], rp_demo_text_end[];

#define DEMO_PLAN   "4,6"
#define DEMO_PROMPT "Prince Andrew looked at"
#define DEMO_TOKENS 48
#define DEMO_CTX    256
#define DEMO_CHUNKS 40

static int generate(const rp_model *m, const char *plan, int n_threads) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = DEMO_CTX;
    cp.n_threads = n_threads;
    cp.repeat_layers = plan;
    rp_context *c;
    rp_status s = rp_context_new(m, &cp, &c);
    if (s) return tool_fail("demo", s);
    tool_print_plan(stdout, c);
    const rp_vocab *v = rp_model_vocab(m);
    int32_t *toks;
    size_t nt;
    if ((s = rp_tokenize(v, DEMO_PROMPT, strlen(DEMO_PROMPT), true, false, &toks, &nt))) {
        rp_context_free(c);
        return tool_fail("demo", s);
    }
    rp_batch b = {.n_tokens = (int32_t)nt, .token = toks};
    s = rp_decode(c, &b);
    printf("  greedy: \"%s", DEMO_PROMPT);
    char piece[256];
    for (int i = 0; !s && i < DEMO_TOKENS; i++) {
        const float *lg = rp_get_logits(c, i == 0 ? (int)nt - 1 : 0);
        int32_t best = 0;
        for (int k = 1; k < rp_n_vocab(c); k++)
            if (lg[k] > lg[best]) best = k;
        if (rp_vocab_is_eog(v, best)) break;
        rp_token_to_piece(v, best, false, piece, sizeof piece);
        for (char *p = piece; *p; p++)
            if (*p == '\n') *p = ' ';
        fputs(piece, stdout);
        fflush(stdout);
        rp_batch one = {.n_tokens = 1, .token = &best};
        s = rp_decode(c, &one);
    }
    printf("...\"\n\n");
    free(toks);
    rp_context_free(c);
    return s ? tool_fail("demo", s) : 0;
}

static int perplexity(const rp_model *m, const char *plan, int n_threads, int n_chunks) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = DEMO_CTX;
    cp.n_threads = n_threads;
    cp.n_seq_max = 2;
    cp.repeat_layers = plan;
    rp_context *c;
    rp_status s = rp_context_new(m, &cp, &c);
    if (s) return tool_fail("demo", s);
    const rp_perplexity_params pp = {.n_chunks = n_chunks};
    rp_perplexity_result r;
    s = rp_perplexity(c, (const char *)rp_demo_text, (size_t)(rp_demo_text_end - rp_demo_text), &pp,
                      &r);
    rp_context_free(c);
    if (s) return tool_fail("demo", s);
    if (!plan)
        printf("perplexity on the held-out last 5%% of War and Peace (%d chunks of %d tokens, "
               "llama.cpp's method):\n",
               r.windows.n_chunk, r.windows.n_ctx);
    printf("  %-26s PPL = %8.4f +/- %.4f\n",
           plan ? "--repeat-layers " DEMO_PLAN ":" : "no plan:", r.ppl, r.unc);
    return 0;
}

int cmd_demo(int argc, char **argv) {
    int n_threads = 0, n_chunks = DEMO_CHUNKS;
    const arg_opt opts[] = {
        {"-t|--threads", ARG_INT, &n_threads, "N", "threads (default: physical cores)"},
        {"--chunks", ARG_INT, &n_chunks, "N",
         "chunks of the perplexity measurement (default 40: all of the held-out text)"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    const arg_spec spec = {
        .cmd = "demo",
        .usage = "reprise demo [--chunks N]",
        .description = "The `make run` job: the embedded demo model with and without a layer plan.",
        .tables = tables};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (n_chunks < 1) {
        tool_error("demo", "--chunks expects a positive count, got %d", n_chunks);
        return 2;
    }
    rp_model *m;
    rp_status s = rp_model_load_mem(rp_demo_gguf, (size_t)(rp_demo_gguf_end - rp_demo_gguf),
                                    "models/demo-llama.gguf (embedded)", NULL, &m);
    if (s) return tool_fail("demo", s);
    char desc[256];
    rp_model_desc(m, desc, sizeof desc);
    printf("reprise demo\n\n"
           "model: %s\n"
           "  trained by train/train.py on the first 95%% of War and Peace (public domain), "
           "converted with\n"
           "  reprise convert, embedded in this binary; models/README.md has the exact "
           "reproduction.\n\n",
           desc);
    rc = generate(m, NULL, n_threads);
    if (!rc) rc = generate(m, DEMO_PLAN, n_threads);
    if (!rc) rc = perplexity(m, NULL, n_threads, n_chunks);
    if (!rc) rc = perplexity(m, DEMO_PLAN, n_threads, n_chunks);
    rp_model_free(m);
    return rc;
}
