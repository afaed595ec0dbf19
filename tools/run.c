/* reprise run: generate a continuation of a prompt; reprise tokenize. */
#include "chat_tmpl.h"
#include "grammar_opts.h"
#include "spec_opts.h"
#include "tools.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct run_opts {
    model_opts mo;
    sampling_opts so;
    spec_opts spec;
    grammar_opts go;
    tmpl_opts to;
    chat_tmpl tmpl; /* with a template option or -sys: the prompt is one user turn */
    bool use_tmpl;
    const rp_vocab *vocab; /* the model's, once loaded */
    const char *prompt, *file, *tokens, *dump, *system;
    int n_predict;
    bool no_special;
} run_opts;

/* What a generation did, for the timing line. */
typedef struct run_stats {
    size_t n_prompt;
    double t_prompt, t_gen;
    int n_gen;
    const char *stop;
} run_stats;

static void print_timing(const run_stats *st) {
    fflush(stdout); /* the text first, then the timing line on its own */
    if (g_verbosity <= 0) return;
    fprintf(stderr,
            "timing: prompt %zu tokens in %.1f ms (%.2f t/s); generation %d tokens in %.1f ms "
            "(%.2f t/s); stopped: %s\n",
            st->n_prompt, st->t_prompt * 1e3,
            (double)st->n_prompt / (st->t_prompt > 0 ? st->t_prompt : 1e-9), st->n_gen,
            st->t_gen * 1e3, st->n_gen / (st->t_gen > 0 ? st->t_gen : 1e-9), st->stop);
}

/* Said on stderr when generation stops at a full context. */
static void context_full_note(uint32_t n_ctx) {
    if (g_verbosity > 0)
        fprintf(
            stderr,
            "\nreprise run: context full (%u positions); stopping (raise -c for longer output)\n",
            n_ctx);
}

/* The text of a generated token on stdout. */
static void put_piece(const rp_vocab *vocab, int32_t tok) {
    char piece[512];
    int n = rp_token_to_piece(vocab, tok, false, piece, sizeof piece);
    fwrite(piece, 1, (size_t)(n < (int)sizeof piece ? n : (int)sizeof piece - 1), stdout);
}

/* --dump-logits: through the library's writer (a temporary file renamed on
 * success; a link's target written, its mode kept; a FIFO, a read-only file
 * or the model itself refused), opened before the prompt is decoded. */
static bool write_logits(const char *cmd, rp_output *out, rp_context *ctx, int n_tok) {
    const size_t nv = (size_t)rp_n_vocab(ctx);
    rp_status s = RP_OK;
    for (int i = 0; i < n_tok && !s; i++)
        s = rp_output_write(out, rp_get_logits(ctx, i), nv * sizeof(float));
    if (s)
        rp_output_abort(out);
    else
        s = rp_output_commit(out);
    if (s) tool_error(cmd, "--dump-logits: %s", rp_last_error());
    return !s;
}

/* Generation with speculative decoding: the same stop rules, output and
 * timing line as plain decoding, and the draft's acceptance. */
static rp_status apply_sampling(rp_sampler *smp, void *user) {
    const run_opts *o = user;
    return sampling_opts_apply(&o->so, smp, o->vocab);
}

static int run_spec(const char *cmd, rp_spec *spc, const rp_vocab *vocab, run_opts *o,
                    const int32_t *toks, size_t n_tok, int n_predict, uint32_t n_ctx) {
    run_stats st = {.n_prompt = n_tok, .stop = "end of text"};
    double t0 = now_s();
    rp_status s = rp_spec_seq_reset(spc, 0, &o->so.sp);
    if (!s) s = rp_spec_seq_set_grammar(spc, 0, o->go.g);
    if (!s) s = rp_spec_seq_each_sampler(spc, 0, apply_sampling, o);
    if (!s) s = rp_spec_seq_feed(spc, 0, toks, (int)n_tok);
    if (s) return tool_fail(cmd, s);
    st.t_prompt = now_s() - t0;
    double t1 = now_s();
    int32_t out[RP_SPEC_DRAFT_MAX + 1];
    bool done = false;
    while (!done) {
        /* plain decoding's limits: n_predict printed tokens; the last token
         * sampled at position n_ctx */
        int max_new = (int)n_ctx + 1 - rp_spec_seq_len(spc, 0);
        if (n_predict >= 0 && n_predict - st.n_gen < max_new) max_new = n_predict - st.n_gen;
        if (n_predict >= 0 && st.n_gen >= n_predict) {
            st.stop = "token limit";
            break;
        }
        int k = 0;
        if ((s = rp_spec_step(spc, 0, max_new, out, &k))) return tool_fail(cmd, s);
        for (int i = 0; i < k && !done; i++) {
            if ((done = rp_vocab_is_eog(vocab, out[i]))) break;
            put_piece(vocab, out[i]);
            st.n_gen++;
        }
        fflush(stdout);
        if (!done && (uint32_t)rp_spec_seq_len(spc, 0) > n_ctx) {
            st.stop = "context full";
            context_full_note(n_ctx);
            done = true;
        }
    }
    st.t_gen = now_s() - t1;
    fputc('\n', stdout);
    print_timing(&st);
    if (g_verbosity > 0) {
        const rp_spec_stats ss = rp_spec_get_stats(spc, 0);
        char line[256];
        spec_format_stats(line, sizeof line, &ss);
        fprintf(stderr, "%s\n", line);
    }
    return 0;
}

/* Plain generation: the prompt in one decode, then one token at a time. */
static int run_plain(const char *cmd, rp_context *ctx, run_opts *o, const int32_t *toks,
                     size_t n_tok) {
    const rp_vocab *vocab = rp_model_vocab(rp_context_model(ctx));
    const uint32_t n_ctx = rp_context_n_ctx(ctx);
    const int nv = rp_n_vocab(ctx);
    run_stats st = {.n_prompt = n_tok, .stop = "end of text"};
    rp_output *dump = NULL;
    if (o->dump) {
        tool_remove_temps_on_signals();
        if (rp_output_open(o->dump, &dump)) {
            tool_error(cmd, "--dump-logits: %s", rp_last_error());
            return 1;
        }
    }
    int8_t *want = calloc(n_tok, 1);
    if (!want) {
        rp_output_abort(dump);
        return 1;
    }
    for (size_t i = 0; i < n_tok; i++) want[i] = o->dump ? 1 : (i == n_tok - 1);
    double t0 = now_s();
    rp_batch b = {.n_tokens = (int32_t)n_tok, .token = toks, .logits = want};
    rp_status s = rp_decode(ctx, &b);
    free(want);
    if (s) {
        rp_output_abort(dump);
        return tool_fail(cmd, s);
    }
    st.t_prompt = now_s() - t0;
    if (dump) {
        if (!write_logits(cmd, dump, ctx, (int)n_tok)) return 1;
        if (g_verbosity > 0) fprintf(stderr, "wrote %zu x %d logits to %s\n", n_tok, nv, o->dump);
        return 0;
    }
    rp_sampler *smp = rp_sampler_new(&o->so.sp, nv);
    if (!smp) return tool_fail(cmd, RP_ERR_NOMEM);
    if ((s = sampling_opts_apply(&o->so, smp, vocab))) {
        rp_sampler_free(smp);
        return tool_fail(cmd, s);
    }
    rp_sampler_set_grammar(smp, o->go.g);
    for (size_t i = 0; i < n_tok; i++) rp_sampler_accept(smp, toks[i]);
    const float *logits = rp_get_logits(ctx, (int)n_tok - 1);
    double t1 = now_s();
    for (;;) {
        if (o->n_predict >= 0 && st.n_gen >= o->n_predict) {
            st.stop = "token limit";
            break;
        }
        int32_t tok = rp_sampler_sample(smp, logits);
        if (tok < 0) { /* only with a grammar */
            rp_sampler_free(smp);
            tool_error(cmd, "the grammar allows no token after %d tokens", st.n_gen);
            return 1;
        }
        if ((s = rp_sampler_accept_sampled(smp, tok))) break;
        if (rp_vocab_is_eog(vocab, tok)) break;
        put_piece(vocab, tok);
        fflush(stdout);
        st.n_gen++;
        if ((uint32_t)rp_kv_seq_len(ctx, 0) >= n_ctx) {
            st.stop = "context full";
            context_full_note(n_ctx);
            break;
        }
        rp_batch one = {.n_tokens = 1, .token = &tok};
        if ((s = rp_decode(ctx, &one))) break;
        logits = rp_get_logits(ctx, 0);
    }
    rp_sampler_free(smp);
    if (s) return tool_fail(cmd, s);
    st.t_gen = now_s() - t1;
    fputc('\n', stdout);
    print_timing(&st);
    return 0;
}

/* The prompt as tokens: --tokens as given, or the text of -p / -f tokenized;
 * every id inside the vocabulary and the whole within the context. */
static bool prompt_tokens(const char *cmd, const run_opts *o, rp_context *ctx, int32_t **toks,
                          size_t *n_tok) {
    if (o->tokens) {
        if (!parse_int_list(o->tokens, toks, n_tok) || *n_tok == 0) {
            tool_error(cmd, "--tokens expects a list of token ids like '1,2,3'");
            return false;
        }
    } else {
        size_t len = o->file ? 0 : strlen(o->prompt);
        char *text = o->file ? tool_read_text(cmd, o->file, &len) : NULL;
        if (o->file && !text) return false;
        if (text && len && text[len - 1] == '\n') text[--len] = 0; /* as llama.cpp's -f */
        if (o->use_tmpl) {                                         /* the prompt as one user turn */
            rp_chat_msg msgs[2] = {{"system", o->system}, {"user", text ? text : o->prompt}};
            char *full = NULL;
            rp_status s =
                chat_tmpl_render(&o->tmpl, rp_context_model(ctx), o->system ? msgs : msgs + 1,
                                 o->system ? 2 : 1, true, -1, &full);
            free(text);
            if (s) return tool_fail(cmd, s), false;
            text = full;
            len = strlen(full);
        }
        rp_status s = rp_tokenize(rp_model_vocab(rp_context_model(ctx)), text ? text : o->prompt,
                                  len, true, !o->no_special, toks, n_tok);
        free(text);
        if (s) return tool_fail(cmd, s), false;
        if (*n_tok == 0) {
            tool_error(cmd, "the prompt is empty after tokenization");
            return false;
        }
    }
    const int nv = rp_n_vocab(ctx);
    for (size_t i = 0; i < *n_tok; i++)
        if ((*toks)[i] < 0 || (*toks)[i] >= nv) {
            tool_error(cmd, "token id %d at prompt position %zu is outside the vocabulary (0..%d)",
                       (*toks)[i], i, nv - 1);
            return false;
        }
    if (*n_tok > rp_context_n_ctx(ctx)) {
        tool_error(cmd, "the prompt has %zu tokens, more than the context size %u (raise -c)",
                   *n_tok, rp_context_n_ctx(ctx));
        return false;
    }
    return true;
}

/* The command line; ARGS_OK or the exit status. */
static int run_parse(const char *cmd, run_opts *o, int argc, char **argv) {
    model_opts_init(&o->mo);
    sampling_opts_init(&o->so);
    spec_opts_init(&o->spec);
    o->n_predict = -1;
    const arg_opt prompt_opts[] = {
        {"-p|--prompt", ARG_STR, &o->prompt, "TEXT", "prompt"},
        {"-f|--file", ARG_STR, &o->file, "FILE", "read the prompt from a file"},
        {"--tokens", ARG_STR, &o->tokens, "IDS",
         "prompt as raw token ids '1,2,3' (no tokenizer, no BOS added)"},
        {"-n|--n-predict", ARG_INT, &o->n_predict, "N",
         "tokens to generate (-1 = until end of text or full context)"},
        {"-sys|--system", ARG_STR, &o->system, "TEXT",
         "a system message: the prompt goes through the chat template as a user turn"},
        {0},
    };
    const arg_opt output_opts[] = {
        {"--dump-logits", ARG_STR, &o->dump, "FILE",
         "write the prompt's logits (float32, n_tokens x n_vocab) and stop"},
        {"--no-parse-special", ARG_FLAG, &o->no_special, NULL,
         "treat control-token text in the prompt as plain text"},
        {0},
    };
    const arg_opt *tables[] = {prompt_opts,
                               sampling_opts_table(&o->so),
                               grammar_opts_table(&o->go),
                               tmpl_opts_table(&o->to),
                               output_opts,
                               model_opts_table(&o->mo, MO_ALL | MO_DEVICE),
                               spec_opts_table(&o->spec),
                               NULL};
    const char *const epilog[] = {g_plan_help, g_spec_help, NULL};
    const arg_spec spec = {.cmd = cmd,
                           .usage = "reprise run -m MODEL -p PROMPT [options]",
                           .description = "Generates a continuation of the prompt. stdout carries "
                                          "only the generated text, streamed;\nthe model, the "
                                          "plan and a timing line go to stderr.\n\n",
                           .tables = tables,
                           .epilog = epilog};
    return args_parse_cmd(&spec, argc, argv);
}

static bool run_check(const char *cmd, run_opts *o) {
    if (!spec_opts_check(cmd, &o->spec, &o->mo)) return false;
    if (spec_opts_active(&o->spec) && o->dump) {
        tool_error(cmd, "--dump-logits writes the prompt's logits; it does not combine with "
                        "speculative decoding");
        return false;
    }
    if (o->n_predict < -1) {
        tool_error(cmd,
                   "-n must be -1 (until the end of text or a full context) or at least 0, "
                   "got %d",
                   o->n_predict);
        return false;
    }
    if ((o->prompt != NULL) + (o->file != NULL) + (o->tokens != NULL) > 1) {
        tool_error(cmd, "give one of -p, -f and --tokens");
        return false;
    }
    if (!o->prompt && !o->file && !o->tokens && !o->mo.dump_plan) {
        tool_error(cmd, "no prompt (-p TEXT, -f FILE or --tokens IDS)");
        return false;
    }
    o->use_tmpl = tmpl_opts_given(&o->to) || o->system;
    if (o->use_tmpl && o->tokens) {
        tool_error(cmd, "--tokens is the prompt as ids: it does not go through a chat template");
        return false;
    }
    if ((o->go.grammar || o->go.grammar_file || o->go.schema || o->go.schema_file) && o->dump) {
        tool_error(cmd, "--dump-logits stops before generation: a grammar has nothing to do");
        return false;
    }
    return sampling_opts_check(cmd, &o->so) && grammar_opts_check(cmd, &o->go);
}

int cmd_run(int argc, char **argv) {
    const char *cmd = "run";
    run_opts o;
    memset(&o, 0, sizeof o);
    int rc = run_parse(cmd, &o, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (tool_list_devices(&o.mo)) {
        grammar_opts_free(&o.go);
        return 0;
    }
    if (!run_check(cmd, &o)) {
        grammar_opts_free(&o.go);
        return 2;
    }
    rp_model *model;
    rp_context *ctx;
    g_model_private_copy = !o.mo.dump_plan; /* the file may change under a long run */
    if (o.use_tmpl && !tool_check_template(cmd, &o.mo, &o.to, &o.tmpl)) {
        grammar_opts_free(&o.go);
        return 2;
    }
    if (!tool_load(cmd, &o.mo, 1, &model, &ctx, &rc)) {
        chat_tmpl_free(&o.tmpl);
        grammar_opts_free(&o.go);
        return rc;
    }
    o.vocab = rp_model_vocab(model);
    int32_t *toks = NULL;
    size_t n_tok = 0;
    rc = 1;
    if (grammar_opts_bind(cmd, &o.go, model) && prompt_tokens(cmd, &o, ctx, &toks, &n_tok)) {
        if (spec_opts_active(&o.spec)) {
            rp_spec *spc = spec_open(cmd, &o.spec, ctx, NULL);
            if (spc)
                rc = run_spec(cmd, spc, rp_model_vocab(model), &o, toks, n_tok, o.n_predict,
                              rp_context_n_ctx(ctx));
            rp_spec_free(spc);
        } else {
            rc = run_plain(cmd, ctx, &o, toks, n_tok);
        }
    }
    free(toks);
    chat_tmpl_free(&o.tmpl);
    grammar_opts_free(&o.go);
    rp_context_free(ctx);
    rp_model_free(model);
    return rc;
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
    const arg_spec spec = {.cmd = cmd,
                           .usage = "reprise tokenize -m MODEL -p TEXT [--no-bos]",
                           .description = "Prints the token ids on one line.",
                           .tables = tables};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (!model_path || (!prompt && !file)) {
        tool_error(cmd, "need -m MODEL and -p TEXT (or -f FILE)");
        return 2;
    }
    rp_model *m = tool_load_model(cmd, model_path, true);
    if (!m) return 1;
    size_t len = file ? 0 : strlen(prompt);
    char *text = file ? tool_read_text(cmd, file, &len) : NULL;
    if (file && !text) {
        rp_model_free(m);
        return 1;
    }
    int32_t *toks = NULL;
    size_t n = 0;
    rp_status s =
        rp_tokenize(rp_model_vocab(m), file ? text : prompt, len, !no_bos, !no_special, &toks, &n);
    if (s) tool_fail(cmd, s);
    char piece[512];
    for (size_t i = 0; !s && i < n; i++) {
        if (pieces) {
            rp_token_to_piece(rp_model_vocab(m), toks[i], true, piece, sizeof piece);
            printf("%d '%s'\n", toks[i], piece);
        } else {
            printf(i ? " %d" : "%d", toks[i]);
        }
    }
    if (!s && !pieces) putchar('\n');
    free(toks);
    free(text);
    rp_model_free(m);
    return s ? 1 : 0;
}
