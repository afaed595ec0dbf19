/* The reference side of docs/fidelity.md: llama.cpp's logits of every
 * position of a token-id prompt, in the layout of `reprise run --dump-logits`
 * (float32, n_tokens x n_vocab), with exact attention (no flash attention,
 * F32 KV cache). Built against a llama.cpp tree (not part of make test):
 *   cc -O2 -I$LLAMA/include -I$LLAMA/ggml/include tests/reference/llama_logits.c \
 *      -L$BUILD/bin -lllama -lggml -lggml-base -Wl,-rpath,$BUILD/bin -o llama_logits
 *   llama_logits MODEL IDS-FILE OUT.f32 [n_ubatch] [threads] [TRACE-DIR]
 * IDS-FILE holds the token ids separated by commas or whitespace. TRACE-DIR
 * (prompts of at most n_ubatch tokens): every named F32 tensor of the graph,
 * written through the eval callback in the layout of reprise's
 * --dump-tensors (index.tsv + raw float32 files; "attn_norm-3" becomes name
 * attn_norm, step 3), for reprise compare --trace. GREEDY=N in the
 * environment: then N tokens greedily, one decode each, their ids on stdout. */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tracer {
    const char *dir;
    FILE *index;
    long calls;
    int n_tok;
} tracer;

static bool trace_cb(struct ggml_tensor *t, bool ask, void *user) {
    tracer *tr = user;
    if (ask) return t->type == GGML_TYPE_F32 && t->name[0];
    if (!ggml_is_contiguous(t) || ggml_nelements(t) % tr->n_tok) return true;
    char name[64];
    int step = -1;
    snprintf(name, sizeof name, "%s", t->name);
    char *dash = strrchr(name, '-');
    if (dash && dash[1] >= '0' && dash[1] <= '9') {
        step = atoi(dash + 1);
        *dash = 0;
    } /* no suffix: step -1 (reprise compare matches result_* by name alone) */
    if (strchr(name, ' ') || strchr(name, '(')) return true; /* unnamed views: "x (view)" */
    char file[128], path[4096];
    snprintf(file, sizeof file, "%06ld-%s-%d.f32", tr->calls, name, step);
    snprintf(path, sizeof path, "%s/%s", tr->dir, file);
    FILE *fp = fopen(path, "wb");
    if (!fp) return true;
    fwrite(t->data, sizeof(float), (size_t)ggml_nelements(t), fp);
    fclose(fp);
    const long width = (long)(ggml_nelements(t) / tr->n_tok);
    fprintf(tr->index, "%ld\t%s\t%d\t%d\t%d\t%ld\t", tr->calls, name, step, step, tr->n_tok, width);
    for (int i = 0; i < tr->n_tok; i++) fprintf(tr->index, "%s%d", i ? "," : "", i);
    fprintf(tr->index, "\t%s\n", file);
    tr->calls++;
    return true;
}

static enum ggml_type type_named(const char *name) {
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        if (ggml_type_name((enum ggml_type)t) && !strcmp(ggml_type_name((enum ggml_type)t), name))
            return (enum ggml_type)t;
    fprintf(stderr, "unknown cache type %s\n", name);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: llama_logits MODEL IDS-FILE OUT.f32 [n_ubatch] [threads]\n");
        return 2;
    }
    FILE *fi = fopen(argv[2], "r");
    if (!fi) return perror(argv[2]), 1;
    int cap = 1024, n = 0;
    llama_token *toks = malloc(sizeof *toks * (size_t)cap);
    int v;
    for (;;) {
        int c = fscanf(fi, "%d", &v);
        if (c == 1) {
            if (n == cap) toks = realloc(toks, sizeof *toks * (size_t)(cap *= 2));
            toks[n++] = v;
        } else if (c == EOF || fgetc(fi) == EOF) {
            break;
        }
    }
    fclose(fi);
    const int n_ub = argc > 4 ? atoi(argv[4]) : 512;
    const int nth = argc > 5 ? atoi(argv[5]) : 2;
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n < 256 ? 256 : (n + 255) / 256 * 256);
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = (uint32_t)n_ub;
    cp.n_threads = cp.n_threads_batch = nth;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    /* CTK / CTV (cache type names: q8_0, f16, ...) and FA=1 override the
     * exact-attention defaults (a quantized V needs flash attention) */
    if (getenv("CTK")) cp.type_k = type_named(getenv("CTK"));
    if (getenv("CTV")) cp.type_v = type_named(getenv("CTV"));
    if (getenv("FA") && atoi(getenv("FA"))) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    cp.no_perf = true;
    tracer tr = {0};
    if (argc > 6) {
        char ip[4096];
        snprintf(ip, sizeof ip, "%s/index.tsv", argv[6]);
        tr.dir = argv[6];
        tr.n_tok = n;
        tr.index = fopen(ip, "w");
        if (!tr.index) return perror(ip), 1;
        fprintf(tr.index, "call\tname\tstep\tsrc\trows\twidth\tpos\tfile\n");
        cp.cb_eval = trace_cb;
        cp.cb_eval_user_data = &tr;
    }
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) return fprintf(stderr, "cannot create a context\n"), 1;
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = toks[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b)) return fprintf(stderr, "decode failed\n"), 1;
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
    FILE *fo = fopen(argv[3], "wb");
    if (!fo) return perror(argv[3]), 1;
    for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)nv, fo);
    fclose(fo);
    const int n_gen = getenv("GREEDY") ? atoi(getenv("GREEDY")) : 0;
    const float *last = llama_get_logits_ith(ctx, n - 1);
    for (int g = 0; g < n_gen; g++) {
        int best = 0;
        for (int i = 1; i < nv; i++)
            if (last[i] > last[best]) best = i;
        printf("%s%d", g ? " " : "", best);
        llama_token tok = best;
        struct llama_batch one = llama_batch_get_one(&tok, 1);
        if (llama_decode(ctx, one)) return fprintf(stderr, "decode failed\n"), 1;
        last = llama_get_logits_ith(ctx, -1);
    }
    if (n_gen) printf("\n");
    if (tr.index) fclose(tr.index);
    fprintf(stderr, "%d positions x %d logits -> %s\n", n, nv, argv[3]);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}
