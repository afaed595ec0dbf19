/* Grammar microbenchmark: the cost of constraining one generation step.
 *
 * A vocabulary (default SmolLM2-135M-Instruct, 49,152 tokens) and a grammar
 * (default json.gbnf; any .gbnf) are loaded; a sample JSON document is
 * tokenized and walked token by token through the grammar, timing at each
 * step:
 *   mask cold  rp_grammar_apply the first time a state is seen (fresh grammar:
 *              transitions and masks computed)
 *   mask warm  rp_grammar_apply on a second walk (transitions cached, masks
 *              recomputed: the mask cache is cleared before each call)
 *   cached     rp_grammar_apply when the state's mask is cached
 *   allows     rp_grammar_allows on the next token (llama.cpp's fast path:
 *              check the token the sampler picked first)
 * Reported as microseconds per step (mean and max over the walk).
 *
 * With --generate MODEL.gguf, generation instead: a chat prompt (rendered by
 * the model's own Jinja template) asking for a JSON object, N_GEN tokens
 * sampled (temperature 0.8, seed 1) three ways — no grammar, a JSON-schema
 * grammar the llama.cpp way (draw, check, redraw only when refused), and with
 * grammar_first — reporting the CPU time per token of the forward pass and of
 * sampling (one thread, so other jobs on the machine do not count; best of 3)
 * and what the grammar costs in tokens per second.
 *
 *   bench/grammar.sh [VOCAB.gguf] [GRAMMAR.gbnf] [TEXT]
 *   grammar_bench --generate MODEL.gguf [N_GEN]
 */
#include "reprise.h"
#include "text/gbnf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (p) p[n] = 0;
    fclose(f);
    return p;
}

#define REPS 5

typedef struct stat_ {
    double sum, max;
    int n;
} stat_;

static void add(stat_ *s, double v) {
    s->sum += v;
    if (v > s->max) s->max = v;
    s->n++;
}

/* ---- generation ------------------------------------------------------------------ */

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":30},\"color\":{\"type\":\"string\"},"
    "\"toys\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":4}},"
    "\"required\":[\"name\",\"age\",\"color\"]}";

/* Generates up to n_gen tokens after the prompt. Times are this thread's CPU
 * time (the context runs on one thread), so other jobs on the machine do not
 * count: *decode_us in rp_decode, *sample_us in sampling and accepting. */
typedef struct gen_times {
    double decode_us, sample_us;
    int n;
} gen_times;

static gen_times gen_once(rp_context *ctx, const rp_vocab *v, const int32_t *prompt,
                          size_t n_prompt, rp_grammar *g, bool first, int n_gen, char *text,
                          size_t text_size) {
    gen_times r = {0, 0, 0};
    rp_sampler_params sp = rp_sampler_default_params();
    sp.seed = 1;
    sp.grammar_first = first;
    rp_sampler *s = rp_sampler_new(&sp, rp_n_vocab(ctx));
    if (g) {
        rp_grammar_reset(g);
        rp_sampler_set_grammar(s, g);
    }
    rp_kv_clear(ctx);
    for (size_t i = 0; i < n_prompt; i++) rp_sampler_accept(s, prompt[i]);
    rp_batch b = {.n_tokens = (int32_t)n_prompt, .token = prompt};
    if (rp_decode(ctx, &b)) return r;
    size_t tl = 0;
    for (; r.n < n_gen; r.n++) {
        double t0 = cpu_us();
        int32_t t = rp_sampler_sample(s, rp_get_logits(ctx, r.n ? 0 : (int)n_prompt - 1));
        bool stop = t < 0 || rp_sampler_accept_sampled(s, t) || rp_vocab_is_eog(v, t);
        double t1 = cpu_us();
        r.sample_us += t1 - t0;
        if (stop) break;
        char piece[64];
        int k = rp_token_to_piece(v, t, false, piece, sizeof piece);
        if (k > 0 && tl + (size_t)k < text_size) {
            memcpy(text + tl, piece, (size_t)k);
            tl += (size_t)k;
        }
        rp_batch one = {.n_tokens = 1, .token = &t};
        if (rp_decode(ctx, &one)) break;
        r.decode_us += cpu_us() - t1;
    }
    text[tl] = 0;
    rp_sampler_free(s);
    return r;
}

static int generate_bench(const char *path, int n_gen) {
    rp_model *m;
    if (rp_model_load(path, NULL, &m)) {
        fprintf(stderr, "%s: %s\n", path, rp_last_error());
        return 1;
    }
    const rp_vocab *v = rp_model_vocab(m);
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = 1024;
    cp.n_threads = 1; /* all the work on this thread: its CPU time is the cost */
    rp_context *ctx;
    if (rp_context_new(m, &cp, &ctx)) {
        fprintf(stderr, "%s\n", rp_last_error());
        return 1;
    }
    const char *tmpl = rp_model_meta_str(m, "tokenizer.chat_template");
    char *prompt = NULL;
    const char *msgs = "[{\"role\":\"user\",\"content\":\"Describe a cat as a JSON object with the "
                       "fields name, age, color "
                       "and toys.\"}]";
    if (!tmpl) { /* a base model: the request as plain text */
        prompt =
            strdup("A cat described as a JSON object with the fields name, age, color and toys:\n");
    } else if (rp_chat_template_render(tmpl, msgs, NULL, NULL, true,
                                       rp_vocab_text(v, rp_vocab_bos(v)),
                                       rp_vocab_text(v, rp_vocab_eos(v)), &prompt)) {
        fprintf(stderr, "chat template: %s\n", rp_last_error());
        return 1;
    }
    int32_t *toks;
    size_t n;
    if (!prompt || rp_tokenize(v, prompt, strlen(prompt), !tmpl, true, &toks, &n)) return 1;
    char *gbnf;
    rp_grammar_vocab *gv;
    rp_grammar *g;
    if (rp_json_schema_to_grammar(SCHEMA, &gbnf) || rp_grammar_vocab_new(v, &gv) ||
        rp_grammar_new(gv, gbnf, NULL, &g)) {
        fprintf(stderr, "%s\n", rp_last_error());
        return 1;
    }
    static const char *const names[3] = {"no grammar", "grammar (llama.cpp's way)",
                                         "grammar_first"};
    gen_times best[3];
    char text[3][4096];
    for (int k = 0; k < 3; k++) best[k] = (gen_times){1e30, 1e30, 0};
    for (int rep = 0; rep < 3; rep++)
        for (int k = 0; k < 3; k++) {
            gen_times t =
                gen_once(ctx, v, toks, n, k ? g : NULL, k == 2, n_gen, text[k], sizeof text[k]);
            if (t.n && t.decode_us / t.n < best[k].decode_us / (best[k].n ? best[k].n : 1))
                best[k].decode_us = t.decode_us, best[k].n = t.n;
            if (t.n && t.sample_us < best[k].sample_us) best[k].sample_us = t.sample_us;
        }
    printf("model        %s, prompt %zu tokens, up to %d generated (temperature 0.8, seed 1), one "
           "thread, "
           "CPU time, best of 3\n",
           path, n, n_gen);
    double dec = best[0].decode_us / best[0].n; /* the forward pass, per token */
    for (int k = 0; k < 3; k++) {
        double samp = best[k].sample_us / best[k].n;
        printf("%-26s %3d tokens: forward %8.0f us/token, sampling %7.1f us/token (%.1f %% of a "
               "forward pass)\n",
               names[k], best[k].n, best[k].decode_us / best[k].n, samp, 100 * samp / dec);
    }
    double base = dec + best[0].sample_us / best[0].n;
    printf("tokens/s     %.2f without a grammar; with one %.2f (llama.cpp's way: %+.2f %% time per "
           "token), "
           "%.2f (grammar_first: %+.2f %%)\n",
           1e6 / base, 1e6 / (dec + best[1].sample_us / best[1].n),
           100 * (best[1].sample_us / best[1].n - best[0].sample_us / best[0].n) / base,
           1e6 / (dec + best[2].sample_us / best[2].n),
           100 * (best[2].sample_us / best[2].n - best[0].sample_us / best[0].n) / base);
    printf("output (grammar): %s\n", text[1]);
    free(gbnf);
    free(toks);
    free(prompt);
    rp_grammar_free(g);
    rp_grammar_vocab_free(gv);
    rp_context_free(ctx);
    rp_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "--generate"))
        return generate_bench(argv[2], argc > 3 ? atoi(argv[3]) : 96);
    const char *home = getenv("HOME");
    char def_vocab[512];
    snprintf(def_vocab, sizeof def_vocab, "%s/.cache/reprise/SmolLM2-135M-Instruct.Q4_1.gguf",
             home ? home : "");
    const char *vocab_path = argc > 1 ? argv[1] : def_vocab;
    const char *grammar_path = argc > 2 ? argv[2] : "tests/fixtures/grammars/json.gbnf";
    const char *text =
        argc > 3
            ? argv[3]
            : "{\"name\": \"Ana Lucia\", \"age\": 42, \"email\": \"ana@example.org\", \"tags\": "
              "[\"admin\", \"editor\"], \"address\": {\"street\": \"12 Rue de la Paix\", \"city\": "
              "\"Paris\", \"zip\": \"75002\"}, \"active\": true, \"score\": 97.5, \"notes\": "
              "\"Prefers e-mail; speaks French and English.\"}";
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    rp_model *m;
    if (rp_model_load(vocab_path, &mp, &m)) {
        fprintf(stderr, "%s: %s\n", vocab_path, rp_last_error());
        return 1;
    }
    const rp_vocab *v = rp_model_vocab(m);
    char *gbnf = slurp(grammar_path);
    if (!gbnf) {
        fprintf(stderr, "cannot read %s\n", grammar_path);
        return 1;
    }
    double t0 = now_us();
    rp_grammar_vocab *gv;
    if (rp_grammar_vocab_new(v, &gv)) {
        fprintf(stderr, "%s\n", rp_last_error());
        return 1;
    }
    double t_trie = now_us() - t0;
    int32_t *toks;
    size_t n;
    if (rp_tokenize(v, text, strlen(text), false, false, &toks, &n)) return 1;
    int32_t nv = rp_vocab_n_tokens(v);
    float *logits = malloc((size_t)nv * sizeof *logits);
    stat_ cold = {0}, warm = {0}, cached = {0}, allows = {0};
    rp_grammar *g;
    t0 = now_us();
    if (rp_grammar_new(gv, gbnf, NULL, &g)) {
        fprintf(stderr, "%s\n", rp_last_error());
        return 1;
    }
    double t_new = now_us() - t0;
    int allowed_sum = 0;
    for (int pass = 0; pass < 3; pass++) {
        rp_grammar_reset(g);
        for (size_t i = 0; i < n; i++) {
            /* passes 1 and 2: best of REPS (the machine is shared) */
            double best = 1e30;
            for (int rep = 0; rep < (pass ? REPS : 1); rep++) {
                memset(logits, 0, (size_t)nv * sizeof *logits);
                if (pass == 1) gbnf_mask_cache_clear(g);
                double a = now_us();
                if (rp_grammar_apply(g, logits)) {
                    fprintf(stderr, "%s\n", rp_last_error());
                    return 1;
                }
                double b = now_us();
                if (b - a < best) best = b - a;
            }
            add(pass == 0 ? &cold : pass == 1 ? &warm : &cached, best);
            if (pass == 1 && getenv("GRAMMAR_BENCH_STEPS")) {
                int al = 0;
                for (int32_t t = 0; t < nv; t++) al += logits[t] == 0;
                char piece[64];
                int k = rp_token_to_piece(v, toks[i], false, piece, sizeof piece);
                fprintf(stderr, "step %3zu %8.1f us %7d allowed  next \"%.*s\"\n", i, best, al,
                        k < 0 ? 0 : k, piece);
            }
            if (pass == 0)
                for (int32_t t = 0; t < nv; t++) allowed_sum += logits[t] == 0;
            double a = now_us();
            bool ok = rp_grammar_allows(g, toks[i]);
            double b = now_us();
            if (pass == 2) add(&allows, b - a);
            if (!ok || rp_grammar_accept(g, toks[i])) {
                fprintf(stderr, "token %zu refused: %s\n", i, rp_last_error());
                return 1;
            }
        }
    }
    printf("vocabulary   %s: %d tokens, %zu trie nodes; trie built in %.1f ms\n", vocab_path, nv,
           gbnf_vocab_nodes(gv), t_trie / 1e3);
    printf("grammar      %s: compiled in %.2f ms\n", grammar_path, t_new / 1e3);
    printf("walk         %zu tokens of a %zu-byte JSON document, %.0f tokens allowed per step on "
           "average\n",
           n, strlen(text), (double)allowed_sum / (double)n);
    printf(
        "mask cold    %8.1f us/step mean, %8.1f max  (first walk: transitions + masks computed)\n",
        cold.sum / cold.n, cold.max);
    printf("mask warm    %8.1f us/step mean, %8.1f max  (transitions cached, masks recomputed)\n",
           warm.sum / warm.n, warm.max);
    printf("mask cached  %8.1f us/step mean, %8.1f max  (the state's mask cached)\n",
           cached.sum / cached.n, cached.max);
    printf("allows       %8.2f us/step mean, %8.2f max  (one token checked)\n",
           allows.sum / allows.n, allows.max);
    rp_grammar_free(g);
    rp_grammar_vocab_free(gv);
    free(toks);
    free(logits);
    free(gbnf);
    rp_model_free(m);
    return 0;
}
