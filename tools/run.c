/* reprise run: generate a continuation of a prompt; reprise tokenize. */
#include "spec_opts.h"
#include "tools.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Said on stderr when generation stops at a full context. */
static void context_full_note(uint32_t n_ctx) {
    if (g_verbosity > 0)
        fprintf(
            stderr,
            "\nreprise run: context full (%u positions); stopping (raise -c for longer output)\n",
            n_ctx);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool write_logits(const char *cmd, const char *path, rp_context *ctx, int n_tok) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        tool_error(cmd, "cannot create '%s': %s", tmp, strerror(errno));
        return false;
    }
    int nv = rp_n_vocab(ctx);
    bool ok = true;
    for (int i = 0; i < n_tok && ok; i++)
        ok = fwrite(rp_get_logits(ctx, i), sizeof(float), (size_t)nv, fp) == (size_t)nv;
    ok = (fclose(fp) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        tool_error(cmd, "cannot write '%s'", path);
        return false;
    }
    return true;
}

/* Generation with speculative decoding: the same stop rules, output and
 * timing line as plain decoding, and the draft's acceptance. */
static int run_spec(const char *cmd, rp_spec *spc, const rp_vocab *vocab,
                    const rp_sampler_params *sp, const int32_t *toks, size_t n_tok, int n_predict,
                    uint32_t n_ctx) {
    double t0 = now_s();
    rp_status s = rp_spec_seq_reset(spc, 0, sp);
    if (!s) s = rp_spec_seq_feed(spc, 0, toks, (int)n_tok);
    if (s) return tool_fail(cmd, s);
    double t_prompt = now_s() - t0, t1 = now_s();
    int n_gen = 0;
    const char *stop_reason = "end of text";
    char piece[512];
    int32_t out[RP_SPEC_DRAFT_MAX + 1];
    bool done = false;
    while (!done) {
        /* plain decoding's limits: n_predict printed tokens; the last token
         * sampled at position n_ctx */
        int max_new = (int)n_ctx + 1 - rp_spec_seq_len(spc, 0);
        if (n_predict >= 0 && n_predict - n_gen < max_new) max_new = n_predict - n_gen;
        if (n_predict >= 0 && n_gen >= n_predict) {
            stop_reason = "token limit";
            break;
        }
        int k = 0;
        if ((s = rp_spec_step(spc, 0, max_new, out, &k))) return tool_fail(cmd, s);
        for (int i = 0; i < k && !done; i++) {
            if (rp_vocab_is_eog(vocab, out[i])) {
                done = true;
                break;
            }
            int n = rp_token_to_piece(vocab, out[i], false, piece, sizeof piece);
            fwrite(piece, 1, (size_t)(n < (int)sizeof piece ? n : (int)sizeof piece - 1), stdout);
            n_gen++;
        }
        fflush(stdout);
        if (!done && (uint32_t)rp_spec_seq_len(spc, 0) > n_ctx) {
            stop_reason = "context full";
            context_full_note(n_ctx);
            done = true;
        }
    }
    double t_gen = now_s() - t1;
    fputc('\n', stdout);
    if (g_verbosity > 0) {
        fprintf(stderr,
                "timing: prompt %zu tokens in %.1f ms (%.2f t/s); generation %d tokens in %.1f ms "
                "(%.2f t/s); "
                "stopped: %s\n",
                n_tok, t_prompt * 1e3, (double)n_tok / (t_prompt > 0 ? t_prompt : 1e-9), n_gen,
                t_gen * 1e3, n_gen / (t_gen > 0 ? t_gen : 1e-9), stop_reason);
        const rp_spec_stats st = rp_spec_get_stats(spc, 0);
        char line[256];
        spec_format_stats(line, sizeof line, &st);
        fprintf(stderr, "%s\n", line);
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    const char *cmd = "run";
    model_opts mo;
    model_opts_init(&mo);
    rp_sampler_params sp = rp_sampler_default_params();
    const char *prompt = NULL, *file = NULL, *tokens_arg = NULL, *dump = NULL;
    int n_predict = -1;
    uint64_t seed = 0xFFFFFFFFu;
    bool no_special = false;
    float repeat_penalty = 1.0f;
    spec_opts so;
    spec_opts_init(&so);
    const arg_opt opts[] = {
        {"-p|--prompt", ARG_STR, &prompt, "TEXT", "prompt"},
        {"-f|--file", ARG_STR, &file, "FILE", "read the prompt from a file"},
        {"--tokens", ARG_STR, &tokens_arg, "IDS",
         "prompt as raw token ids '1,2,3' (no tokenizer, no BOS added)"},
        {"-n|--n-predict", ARG_INT, &n_predict, "N",
         "tokens to generate (-1 = until end of text or full context)"},
        {"-s|--seed", ARG_U64, &seed, "N", "sampling seed (default 4294967295)"},
        {"--temp", ARG_FLOAT, &sp.temp, "T", "temperature (0 = greedy; default 0.8)"},
        {"--top-k", ARG_INT, &sp.top_k, "K", "top-k (0 = off; default 40)"},
        {"--top-p", ARG_FLOAT, &sp.top_p, "P", "top-p (1 = off; default 0.95)"},
        {"--min-p", ARG_FLOAT, &sp.min_p, "P", "min-p (0 = off; default 0.05)"},
        {"--repeat-penalty", ARG_FLOAT, &repeat_penalty, "F", "repetition penalty (1 = off)"},
        {"--repeat-last-n", ARG_INT, &sp.penalty_last_n, "N",
         "tokens the penalties look back (default 64, -1 = all)"},
        {"--frequency-penalty", ARG_FLOAT, &sp.freq_penalty, "F", "frequency penalty (0 = off)"},
        {"--presence-penalty", ARG_FLOAT, &sp.presence_penalty, "F", "presence penalty (0 = off)"},
        {"--dump-logits", ARG_STR, &dump, "FILE",
         "write the prompt's logits (float32, n_tokens x n_vocab) and stop"},
        {"--no-parse-special", ARG_FLAG, &no_special, NULL,
         "treat control-token text in the prompt as plain text"},
        {0},
    };
    const arg_opt *tables[] = {opts, model_opts_table(&mo), spec_opts_table(&so), NULL};
    arg_spec spec = {cmd,
                     "reprise run -m MODEL -p PROMPT [options]",
                     "Generates a continuation of the prompt. stdout carries only the generated "
                     "text, streamed;\n"
                     "the model, the plan and a timing line go to stderr.\n\n",
                     tables,
                     NULL,
                     0,
                     NULL};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) {
        if (help) printf("\n%s\n\n%s\n", g_plan_help, g_spec_help);
        return help ? 0 : 2;
    }
    sp.seed = seed;
    sp.repeat_penalty = repeat_penalty;
    if (!spec_opts_check(cmd, &so, &mo)) return 2;
    if (spec_opts_active(&so) && dump) {
        tool_error(cmd, "--dump-logits writes the prompt's logits; it does not combine with "
                        "speculative decoding");
        return 2;
    }
    if (sp.temp < 0) sp.temp = 0;
    if ((prompt != NULL) + (file != NULL) + (tokens_arg != NULL) > 1) {
        tool_error(cmd, "give one of -p, -f and --tokens");
        return 2;
    }
    if (!prompt && !file && !tokens_arg && !mo.dump_plan) {
        tool_error(cmd, "no prompt (-p TEXT, -f FILE or --tokens IDS)");
        return 2;
    }
    if (sp.top_p <= 0 || sp.top_p > 1 || sp.min_p < 0 || sp.min_p > 1 || repeat_penalty <= 0) {
        tool_error(
            cmd,
            "sampling values out of range (top-p in (0,1], min-p in [0,1], repeat-penalty > 0)");
        return 2;
    }
    rp_model *model;
    rp_context *ctx;
    int code;
    if (!tool_load(cmd, &mo, 1, &model, &ctx, &code)) return code;
    const rp_vocab *vocab = rp_model_vocab(model);
    int32_t *toks = NULL;
    size_t n_tok = 0;
    char *text = NULL;
    int ret = 1;
    rp_sampler *smp = NULL;
    rp_spec *spc = NULL;
    int8_t *want = NULL;
    if (tokens_arg) {
        if (!parse_int_list(tokens_arg, &toks, &n_tok) || n_tok == 0) {
            tool_error(cmd, "--tokens expects a list of token ids like '1,2,3'");
            goto out;
        }
    } else {
        size_t len = 0;
        if (file) {
            text = tool_read_text(cmd, file, &len);
            if (!text) goto out;
        }
        const char *t = file ? text : prompt;
        if (!file) len = strlen(prompt);
        rp_status s = rp_tokenize(vocab, t, len, true, !no_special, &toks, &n_tok);
        if (s) {
            tool_fail(cmd, s);
            goto out;
        }
        if (n_tok == 0) {
            tool_error(cmd, "the prompt is empty after tokenization");
            goto out;
        }
    }
    int nv = rp_n_vocab(ctx);
    for (size_t i = 0; i < n_tok; i++)
        if (toks[i] < 0 || toks[i] >= nv) {
            tool_error(cmd, "token id %d at prompt position %zu is outside the vocabulary (0..%d)",
                       toks[i], i, nv - 1);
            goto out;
        }
    uint32_t n_ctx = rp_context_n_ctx(ctx);
    if (n_tok > n_ctx) {
        tool_error(cmd, "the prompt has %zu tokens, more than the context size %u (raise -c)",
                   n_tok, n_ctx);
        goto out;
    }
    if (spec_opts_active(&so)) {
        spc = spec_open(cmd, &so, ctx, NULL);
        if (!spc) goto out;
        ret = run_spec(cmd, spc, vocab, &sp, toks, n_tok, n_predict, n_ctx);
        goto out;
    }
    want = calloc(n_tok, 1);
    if (!want) goto out;
    for (size_t i = 0; i < n_tok; i++) want[i] = dump ? 1 : (i == n_tok - 1);
    double t0 = now_s();
    rp_batch b = {.n_tokens = (int32_t)n_tok, .token = toks, .logits = want};
    rp_status s = rp_decode(ctx, &b);
    if (s) {
        tool_fail(cmd, s);
        goto out;
    }
    double t_prompt = now_s() - t0;
    if (dump) {
        ret = write_logits(cmd, dump, ctx, (int)n_tok) ? 0 : 1;
        if (!ret && g_verbosity > 0)
            fprintf(stderr, "wrote %zu x %d logits to %s\n", n_tok, nv, dump);
        goto out;
    }
    smp = rp_sampler_new(&sp, nv);
    if (!smp) {
        tool_fail(cmd, RP_ERR_NOMEM);
        goto out;
    }
    for (size_t i = 0; i < n_tok; i++) rp_sampler_accept(smp, toks[i]);
    const float *logits = rp_get_logits(ctx, (int)n_tok - 1);
    int n_gen = 0;
    double t1 = now_s();
    const char *stop_reason = "end of text";
    char piece[512];
    for (;;) {
        if (n_predict >= 0 && n_gen >= n_predict) {
            stop_reason = "token limit";
            break;
        }
        int32_t tok = rp_sampler_sample(smp, logits);
        rp_sampler_accept(smp, tok);
        if (rp_vocab_is_eog(vocab, tok)) break;
        int k = rp_token_to_piece(vocab, tok, false, piece, sizeof piece);
        fwrite(piece, 1, (size_t)(k < (int)sizeof piece ? k : (int)sizeof piece - 1), stdout);
        fflush(stdout);
        n_gen++;
        if ((uint32_t)rp_kv_seq_len(ctx, 0) >= n_ctx) {
            stop_reason = "context full";
            context_full_note(n_ctx);
            break;
        }
        rp_batch one = {.n_tokens = 1, .token = &tok};
        s = rp_decode(ctx, &one);
        if (s) {
            tool_fail(cmd, s);
            goto out;
        }
        logits = rp_get_logits(ctx, 0);
    }
    double t_gen = now_s() - t1;
    fputc('\n', stdout);
    if (g_verbosity > 0)
        fprintf(stderr,
                "timing: prompt %zu tokens in %.1f ms (%.2f t/s); generation %d tokens in %.1f ms "
                "(%.2f t/s); "
                "stopped: %s\n",
                n_tok, t_prompt * 1e3, (double)n_tok / (t_prompt > 0 ? t_prompt : 1e-9), n_gen,
                t_gen * 1e3, n_gen / (t_gen > 0 ? t_gen : 1e-9), stop_reason);
    ret = 0;
out:
    rp_spec_free(spc);
    rp_sampler_free(smp);
    free(want);
    free(toks);
    free(text);
    rp_context_free(ctx);
    rp_model_free(model);
    return ret;
}

int cmd_tokenize(int argc, char **argv) {
    const char *cmd = "tokenize";
    const char *model_path = NULL, *prompt = NULL, *file = NULL;
    bool no_bos = false, no_special = false, pieces = false;
    const arg_opt opts[] = {
        {"-m|--model", ARG_STR, &model_path, "FILE", "model (only its vocabulary is loaded)"},
        {"-p|--prompt", ARG_STR, &prompt, "TEXT", "text to tokenize"},
        {"-f|--file", ARG_STR, &file, "FILE", "read the text from a file"},
        {"--no-bos", ARG_FLAG, &no_bos, NULL, "do not add BOS/EOS"},
        {"--no-parse-special", ARG_FLAG, &no_special, NULL,
         "treat control-token text as plain text"},
        {"--pieces", ARG_FLAG, &pieces, NULL, "print 'id piece' per line"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    arg_spec spec = {cmd,
                     "reprise tokenize -m MODEL -p TEXT [--no-bos]",
                     "Prints the token ids on one line.",
                     tables,
                     NULL,
                     0,
                     NULL};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) return help ? 0 : 2;
    if (!model_path || (!prompt && !file)) {
        tool_error(cmd, "need -m MODEL and -p TEXT (or -f FILE)");
        return 2;
    }
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    rp_model *m;
    rp_status s = rp_model_load(model_path, &mp, &m);
    if (s) return tool_fail(cmd, s);
    size_t len = 0;
    char *text = NULL;
    if (file) {
        text = tool_read_text(cmd, file, &len);
        if (!text) {
            rp_model_free(m);
            return 1;
        }
    } else {
        len = strlen(prompt);
    }
    int32_t *toks;
    size_t n;
    s = rp_tokenize(rp_model_vocab(m), file ? text : prompt, len, !no_bos, !no_special, &toks, &n);
    if (s) {
        free(text);
        rp_model_free(m);
        return tool_fail(cmd, s);
    }
    char piece[512];
    for (size_t i = 0; i < n; i++) {
        if (pieces) {
            int k = rp_token_to_piece(rp_model_vocab(m), toks[i], true, piece, sizeof piece);
            (void)k;
            printf("%d '%s'\n", toks[i], piece);
        } else {
            printf(i ? " %d" : "%d", toks[i]);
        }
    }
    if (!pieces) putchar('\n');
    free(toks);
    free(text);
    rp_model_free(m);
    return 0;
}
