/* reprise demo: the `make run` job. The trained demo model (models/) and its
 * held-out text are embedded in the binary (tools/demo_data.c), so the job
 * needs no file: a short generation without a plan and with a plan repeating
 * a middle block, the plan report, and the perplexity of both on text the
 * model never saw. */
#include "eval/eval.h"
#include "format/gguf.h"
#include "core/model.h"
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

typedef struct ppl_state {
    rp_ppl_acc acc;
    int32_t n_vocab;
} ppl_state;

static rp_status ppl_chunk(const rp_eval_chunk *ch, void *user) {
    ppl_state *st = user;
    for (int j = 0; j < ch->n_score; j++)
        rp_ppl_add(&st->acc, rp_eval_nll(ch->logits[j], st->n_vocab, ch->target[j]));
    return RP_OK;
}

static int perplexity(const rp_model *m, const char *plan, const int32_t *toks,
                      const rp_eval_windows *w, int n_threads) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = DEMO_CTX;
    cp.n_threads = n_threads;
    cp.n_seq_max = 2;
    cp.repeat_layers = plan;
    rp_context *c;
    rp_status s = rp_context_new(m, &cp, &c);
    if (s) return tool_fail("demo", s);
    ppl_state st = {.n_vocab = w->n_vocab};
    s = rp_eval_run(c, toks, w, 2, ppl_chunk, &st);
    rp_context_free(c);
    if (s) return tool_fail("demo", s);
    printf("  %-26s PPL = %8.4f +/- %.4f\n",
           plan ? "--repeat-layers " DEMO_PLAN ":" : "no plan:", rp_ppl_value(&st.acc),
           rp_ppl_uncertainty(&st.acc));
    return 0;
}

int cmd_demo(int argc, char **argv) {
    int n_threads = 0;
    const arg_opt opts[] = {
        {"-t|--threads", ARG_INT, &n_threads, "N", "threads (default: physical cores)"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    arg_spec spec = {"demo",
                     "reprise demo",
                     "The `make run` job: the embedded demo model with and without a layer plan.",
                     tables,
                     NULL,
                     0,
                     NULL};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) return help ? 0 : 2;
    rp_gguf *g;
    rp_status s = rp_gguf_open_mem(rp_demo_gguf, (size_t)(rp_demo_gguf_end - rp_demo_gguf), &g);
    if (s) return tool_fail("demo", s);
    rp_model *m;
    if ((s = rp_model_from_gguf(g, "models/demo-llama.gguf (embedded)", NULL, &m)))
        return tool_fail("demo", s);
    char desc[256];
    rp_model_desc(m, desc, sizeof desc);
    printf("reprise demo\n\n"
           "model: %s\n"
           "  trained by train/train.py on the first 95%% of War and Peace (public domain), "
           "converted with\n"
           "  reprise convert, embedded in this binary; models/README.md has the exact "
           "reproduction.\n\n",
           desc);
    int rc = generate(m, NULL, n_threads);
    if (!rc) rc = generate(m, DEMO_PLAN, n_threads);
    if (!rc) {
        const char *text = (const char *)rp_demo_text;
        size_t len = (size_t)(rp_demo_text_end - rp_demo_text);
        int32_t *toks = NULL;
        size_t n = 0;
        rp_eval_windows w;
        if ((s = rp_eval_tokenize(m, text, len, &toks, &n)) ||
            (s = rp_eval_windows_init(&w, m, n, DEMO_CTX, DEMO_CHUNKS))) {
            free(toks);
            rp_model_free(m);
            return tool_fail("demo", s);
        }
        printf("perplexity on the held-out last 5%% of War and Peace (%d chunks of %d tokens, "
               "llama.cpp's method):\n",
               w.n_chunk, w.n_ctx);
        rc = perplexity(m, NULL, toks, &w, n_threads);
        if (!rc) rc = perplexity(m, DEMO_PLAN, toks, &w, n_threads);
        free(toks);
    }
    rp_model_free(m);
    return rc;
}
