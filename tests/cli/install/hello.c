/* Built by tests/cli/install.sh against an installed reprise with
 * `pkg-config --cflags --libs reprise` and nothing else: loads a model,
 * greedy-decodes a few tokens, and shows a refused plan's message. */
#include <reprise.h>
#include <reprise_tools.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    printf("version %s %s\n", rp_version(), RP_VERSION);
    rp_model *m;
    if (rp_model_load(argv[1], NULL, &m)) {
        printf("load: %s\n", rp_last_error());
        return 1;
    }
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 64;
    cp.repeat_layers = "0,99";
    rp_context *c = NULL;
    rp_status s = rp_context_new(m, &cp, &c);
    printf("bad plan: %s: %s\n", rp_status_str(s), rp_last_error());
    cp.repeat_layers = NULL;
    int32_t *tok;
    size_t n;
    if (rp_context_new(m, &cp, &c) ||
        rp_tokenize(rp_model_vocab(m), "Once", 4, true, false, &tok, &n))
        return 1;
    printf("tokens");
    for (int step = 0; step < 4; step++) {
        rp_batch b = {.n_tokens = step ? 1 : (int32_t)n, .token = tok + (step ? n - 1 : 0)};
        if (rp_decode(c, &b)) return 1;
        const float *l = rp_get_logits(c, b.n_tokens - 1);
        int32_t best = 0;
        for (int32_t v = 1; v < rp_n_vocab(c); v++)
            if (l[v] > l[best]) best = v;
        printf(" %d", best);
        tok[n - 1] = best;
    }
    printf("\n");
    rp_free(tok);
    rp_context_free(c);
    rp_model_free(m);
    return 0;
}
