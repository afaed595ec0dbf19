/* reprise demo: the `make run` job. Until a trained default model ships, it
 * synthesises a small random-weight llama model, says so, and shows a plan. */
#include "synth.h"
#include "tools.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int generate(rp_model *m, const char *repeat, const char *prompt, int n) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 256;
    cp.repeat_layers = repeat;
    rp_context *c;
    rp_status s = rp_context_new(m, &cp, &c);
    if (s) return tool_fail("demo", s);
    int need = rp_context_plan_report(c, NULL, 0);
    char *rep = malloc((size_t)need + 1);
    if (rep) {
        rp_context_plan_report(c, rep, (size_t)need + 1);
        fputs(rep, stdout);
        free(rep);
    }
    const rp_vocab *v = rp_model_vocab(m);
    int32_t *toks;
    size_t nt;
    if ((s = rp_tokenize(v, prompt, strlen(prompt), true, false, &toks, &nt))) {
        rp_context_free(c);
        return tool_fail("demo", s);
    }
    rp_batch b = {.n_tokens = (int32_t)nt, .token = toks};
    s = rp_decode(c, &b);
    printf("  > %s", prompt);
    char piece[256];
    for (int i = 0; !s && i < n; i++) {
        const float *lg = rp_get_logits(c, i == 0 ? (int)nt - 1 : 0);
        int32_t best = 0;
        for (int k = 1; k < rp_n_vocab(c); k++)
            if (lg[k] > lg[best]) best = k;
        if (rp_vocab_is_eog(v, best)) break;
        rp_token_to_piece(v, best, false, piece, sizeof piece);
        fputs(piece, stdout);
        rp_batch one = {.n_tokens = 1, .token = &best};
        s = rp_decode(c, &one);
    }
    printf("\n\n");
    free(toks);
    rp_context_free(c);
    return s ? tool_fail("demo", s) : 0;
}

int cmd_demo(int argc, char **argv) {
    (void)argc;
    (void)argv;
    char path[256];
    snprintf(path, sizeof path, "/tmp/reprise-demo-%ld.gguf", (long)getpid());
    rp_synth_params p = rp_synth_default_params();
    p.arch = "llama";
    p.n_layer = 12;
    p.n_embd = 128;
    p.n_head = 4;
    p.n_ff = 352;
    printf("reprise demo\n\n"
           "No trained default model ships yet, so this generates a deterministic RANDOM-WEIGHT llama\n"
           "model (12 layers, n_embd 128, built-in byte vocabulary). Its text is noise; what it shows is\n"
           "the engine: the same weights run with and without a layer plan.\n\n");
    rp_status s = rp_synth_write(&p, path, NULL, NULL);
    if (s) return tool_fail("demo", s);
    rp_model *m;
    s = rp_model_load(path, NULL, &m);
    unlink(path);
    if (s) return tool_fail("demo", s);
    char desc[256];
    rp_model_desc(m, desc, sizeof desc);
    printf("model: %s\n\n", desc);
    int rc = generate(m, NULL, "Once upon a time", 24);
    if (!rc) rc = generate(m, "4,8", "Once upon a time", 24);
    rp_model_free(m);
    return rc;
}
