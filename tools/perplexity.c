/* reprise perplexity: perplexity of a model on a text, and KL divergence of
 * its token distributions against a base model's saved log-probabilities
 * (llama.cpp's method and report; the evaluation itself is src/eval/eval.c). */
#include "eval/eval.h"
#include "tools.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CTX   512
#define DEFAULT_BATCH 512

static int imin(int a, int b) {
    return a < b ? a : b;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct ppl_run {
    const rp_eval_windows *w;
    rp_ppl_acc ppl;
    rp_kld_writer *writer; /* --kl-divergence-base without --kl-divergence */
    rp_kld_reader *reader; /* --kl-divergence */
    rp_kld_acc kld;
    bool stream;  /* stdout is not a terminal: running values as they come */
    char *values; /* "[1]33.0934,[2]..." */
    size_t values_len, values_cap;
    progress pr;
    double t0;
} ppl_run;

static bool append_value(ppl_run *r, const char *s) {
    size_t n = strlen(s);
    if (r->values_len + n + 1 > r->values_cap) {
        size_t cap = r->values_cap ? 2 * r->values_cap : 1024;
        while (cap < r->values_len + n + 1) cap *= 2;
        char *p = realloc(r->values, cap);
        if (!p) return false;
        r->values = p;
        r->values_cap = cap;
    }
    memcpy(r->values + r->values_len, s, n + 1);
    r->values_len += n;
    return true;
}

static void kld_table_header(void) {
    /* llama.cpp's header, column for column */
    printf("chunk             PPL               ln(PPL(Q)/PPL(base))          "
           "KL Divergence              \xce\x94p RMS            Same top p\n");
}

static rp_status on_chunk(const rp_eval_chunk *ch, void *user) {
    ppl_run *r = user;
    const int nv = r->w->n_vocab;
    char extra[160];
    rp_status s;
    if (r->reader) {
        const rp_kld_row *rows;
        if ((s = rp_kld_reader_chunk(r->reader, ch->index, &rows))) return s;
        for (int j = 0; j < ch->n_score; j++)
            if ((s = rp_kld_add(&r->kld, ch->logits[j], &rows[j], ch->target[j], NULL))) return s;
        rp_kld_stats st;
        if ((s = rp_kld_stats_compute(&r->kld, false, &st))) return s;
        progress_done(&r->pr);
        printf("%4d    %9.4f \xc2\xb1 %9.4f    %10.5f \xc2\xb1 %10.5f    %10.5f \xc2\xb1 %10.5f"
               "    %6.3f \xc2\xb1 %6.3f %%    %6.3f \xc2\xb1 %6.3f %%\n",
               ch->index + 1, st.ppl.val, st.ppl.unc, st.ln_ratio.val, st.ln_ratio.unc, st.kld.val,
               st.kld.unc, 100.0 * st.p_diff_rms.val, 100.0 * st.p_diff_rms.unc,
               100.0 * st.same_top.val, 100.0 * st.same_top.unc);
        fflush(stdout);
        snprintf(extra, sizeof extra, "KLD %.6f", st.kld.val);
    } else {
        for (int j = 0; j < ch->n_score; j++)
            rp_ppl_add(&r->ppl, rp_eval_nll(ch->logits[j], nv, ch->target[j]));
        if (r->writer && (s = rp_kld_writer_add(r->writer, ch))) return s;
        char v[64];
        snprintf(v, sizeof v, "[%d]%.4f,", ch->index + 1, rp_ppl_value(&r->ppl));
        if (!append_value(r, v)) return RP_ERR_NOMEM;
        if (r->stream) {
            fputs(v, stdout);
            fflush(stdout);
        }
        snprintf(extra, sizeof extra, "PPL %.4f", rp_ppl_value(&r->ppl));
    }
    const int done = ch->index + 1;
    const double el = now_s() - r->t0;
    char line[256];
    snprintf(line, sizeof line, "| chunk %d/%d, %.0f tok/s, %s", done, r->w->n_chunk,
             el > 0 ? (double)done * r->w->n_ctx / el : 0.0, extra);
    progress_update(&r->pr, (float)done / (float)r->w->n_chunk, line);
    return RP_OK;
}

static void print_kld_report(const rp_kld_stats *st) {
    const char *pm = "\xc2\xb1", *dp = "\xce\x94p";
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f %s %10.6f\n", st->ppl.val, pm, st->ppl.unc);
    printf("Mean PPL(base)                : %10.6f %s %10.6f\n", st->ppl_base.val, pm,
           st->ppl_base.unc);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * st->cor);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f %s %10.6f\n", st->ln_ratio.val, pm,
           st->ln_ratio.unc);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f %s %10.6f\n", st->ratio.val, pm, st->ratio.unc);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f %s %10.6f\n", st->diff.val, pm, st->diff.unc);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f %s %10.6f\n", st->kld.val, pm, st->kld.unc);
    printf("Maximum KLD: %10.6f\n", st->kld_max);
    static const char *const kld_names[8] = {"99.9%  ", "99.0%  ", "95.0%  ", "90.0%  ",
                                             "10.0%  ", " 5.0%  ", " 1.0%  ", " 0.1%  "};
    for (int i = 0; i < 8; i++) {
        printf("%s KLD: %10.6f\n", kld_names[i], st->kld_pct[i]);
        if (i == 3) printf("Median  KLD: %10.6f\n", st->kld_median);
    }
    printf("Minimum KLD: %10.6f\n", st->kld_min);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    %s: %6.3f %s %5.3f %%\n", dp, 100.0 * st->p_diff.val, pm,
           100.0 * st->p_diff.unc);
    printf("Maximum %s: %6.3f%%\n", dp, 100.0 * st->p_diff_max);
    static const char *const pd_names[10] = {"99.9%  ", "99.0%  ", "95.0%  ", "90.0%  ", "75.0%  ",
                                             "25.0%  ", "10.0%  ", " 5.0%  ", " 1.0%  ", " 0.1%  "};
    for (int i = 0; i < 10; i++) {
        printf("%s %s: %6.3f%%\n", pd_names[i], dp, 100.0 * st->p_diff_pct[i]);
        if (i == 4) printf("Median  %s: %6.3f%%\n", dp, 100.0 * st->p_diff_median);
    }
    printf("Minimum %s: %6.3f%%\n", dp, 100.0 * st->p_diff_min);
    printf("RMS %s    : %6.3f %s %5.3f %%\n", dp, 100.0 * st->p_diff_rms.val, pm,
           100.0 * st->p_diff_rms.unc);
    printf("Same top p: %6.3f %s %5.3f %%\n", 100.0 * st->same_top.val, pm,
           100.0 * st->same_top.unc);
}

/* Loads the model, checks the chunk size against it, then creates the
 * context: a chunk size the model cannot take is refused before any KV cache
 * is allocated. */
static int load(const char *cmd, const model_opts *mo, int *c, bool c_given, uint32_t n_seq,
                uint32_t n_batch, rp_model **model, rp_context **ctx) {
    *model = NULL;
    *ctx = NULL;
    if (mo->quiet) g_verbosity = 0;
    if (mo->repeat_layers && mo->layer_map) {
        tool_error(cmd, "--repeat-layers and --layer-map are alternatives; give one");
        return 2;
    }
    rp_model_params mp = rp_model_default_params();
    progress pr;
    progress_init(&pr, "loading");
    mp.progress = progress_cb;
    mp.progress_user = &pr;
    rp_status s = rp_model_load(mo->model, &mp, model);
    progress_done(&pr);
    if (s) return tool_fail(cmd, s);
    int n_train = rp_model_n_ctx_train(*model);
    if (!c_given && n_train > 0 && *c > n_train) *c = n_train;
    if (n_train > 0 && *c > n_train) {
        tool_error(cmd, "-c %d is larger than the context %s was trained on (%d tokens)", *c,
                   mo->model, n_train);
        return 1;
    }
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = (uint32_t)*c;
    cp.n_batch = n_batch;
    cp.n_seq_max = n_seq;
    cp.n_threads = mo->n_threads;
    cp.type_k = mo->type_k;
    cp.type_v = mo->type_v;
    struct rp_planfile *pf = NULL; /* --plan FILE, checked against the model */
    if (!tool_plan_resolve(cmd, mo, *model, &pf, &cp.repeat_layers, &cp.layer_map)) return 1;
    s = rp_context_new(*model, &cp, ctx);
    tool_plan_free(pf);
    if (s) return tool_fail(cmd, s);
    FILE *fp = mo->dump_plan ? stdout : stderr;
    if (mo->dump_plan || g_verbosity > 0) {
        if (!mo->dump_plan) {
            char desc[256];
            rp_model_desc(*model, desc, sizeof desc);
            fprintf(stderr, "model: %s\n", desc);
        }
        tool_print_plan(fp, *ctx);
    }
    return mo->dump_plan ? 0 : -1;
}

int cmd_perplexity(int argc, char **argv) {
    const char *cmd = "perplexity";
    model_opts mo;
    model_opts_init(&mo);
    const char *file = NULL, *base_path = NULL;
    int n_chunks = -1;
    bool kld_mode = false;
    const arg_opt opts[] = {
        {"-f|--file", ARG_STR, &file, "FILE",
         "the text (tokenized whole, cut into chunks of -c tokens)"},
        {"--chunks", ARG_INT, &n_chunks, "N", "evaluate at most N chunks (default: all)"},
        {"--kl-divergence-base", ARG_STR, &base_path, "FILE",
         "write the model's log-probabilities to FILE (with --kl-divergence: read them)"},
        {"--kl-divergence", ARG_FLAG, &kld_mode, NULL,
         "compare with the base file's log-probabilities"},
        {0},
    };
    /* the shared model options, with -c and -b read as this tool reads them */
    arg_opt mopts[24];
    const arg_opt *shared = model_opts_table(&mo);
    size_t k = 0;
    for (; shared[k].kind != ARG_END && k + 1 < sizeof mopts / sizeof mopts[0]; k++) {
        mopts[k] = shared[k];
        if (!strcmp(mopts[k].names, "-c|--ctx-size"))
            mopts[k].help = "tokens per chunk (default 512, or the training context if smaller)";
        else if (!strcmp(mopts[k].names, "-b|--batch-size"))
            mopts[k].help = "tokens per decode: max(1, N/c) chunks together (default 512)";
    }
    memset(&mopts[k], 0, sizeof mopts[k]);
    const arg_opt *tables[] = {opts, mopts, NULL};
    arg_spec spec = {
        cmd,
        "reprise perplexity -m MODEL -f TEXT [-c 512] [--chunks N] [-b N] [-t N]\n"
        "       reprise perplexity -m BASE -f TEXT --kl-divergence-base B.kld\n"
        "       reprise perplexity -m MODEL [-f TEXT] --kl-divergence-base B.kld --kl-divergence",
        "Perplexity by llama.cpp's method: the whole text is tokenized once and cut into\n"
        "chunks of -c tokens (default 512, at most the model's training context); each chunk\n"
        "starts with BOS where the model adds one, and only its second half is scored. Prints\n"
        "the running value per chunk and 'Final estimate: PPL = X +/- Y'. -b N decodes N/c\n"
        "chunks together (default 512). A terminal shows progress on stderr.\n\n"
        "--kl-divergence-base FILE saves the model's token distributions over the same\n"
        "windows (docs/kld-format.md); a later run with --kl-divergence reads them back and\n"
        "reports the KL divergence, token-probability and top-token statistics of another\n"
        "model, quantization or layer plan against them (-c and the windows come from the\n"
        "file; -f also checks that the text is the same).",
        tables,
        NULL,
        0,
        NULL};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) {
        if (help) printf("\n%s\n", g_plan_help);
        return help ? 0 : 2;
    }
    if (!mo.model) {
        tool_error(cmd, "no model given (-m FILE)");
        return 2;
    }
    if (kld_mode && !base_path) {
        tool_error(cmd, "--kl-divergence needs --kl-divergence-base FILE (made by a run without "
                        "--kl-divergence)");
        return 2;
    }
    if (!kld_mode && !file && !mo.dump_plan) {
        tool_error(cmd, "no text (-f FILE)");
        return 2;
    }
    if (n_chunks == 0 || n_chunks < -1) {
        tool_error(cmd, "--chunks expects a positive count, got %d", n_chunks);
        return 2;
    }
    const bool c_given = mo.n_ctx != 0;
    int c = c_given ? (mo.n_ctx > INT32_MAX ? INT32_MAX : (int)mo.n_ctx) : DEFAULT_CTX;
    if (c < RP_EVAL_MIN_CTX) {
        tool_error(cmd, "-c %d is too small: chunks need at least %d tokens", c, RP_EVAL_MIN_CTX);
        return 2;
    }
    const uint32_t b = mo.n_batch ? mo.n_batch : DEFAULT_BATCH;

    int ret = 1;
    rp_status s;
    char *text = NULL;
    size_t text_len = 0;
    int32_t *toks = NULL;
    size_t n_tok = 0;
    rp_model *model = NULL;
    rp_context *ctx = NULL;
    ppl_run run;
    memset(&run, 0, sizeof run);
    rp_eval_windows w;
    const int32_t *eval_tokens = NULL;

    /* The base file first: with --kl-divergence it fixes c and the windows. */
    if (kld_mode) {
        if ((s = rp_kld_reader_open(base_path, &run.reader))) {
            tool_fail(cmd, s);
            goto out;
        }
        const rp_kld_header *h = rp_kld_reader_header(run.reader);
        if (c_given && (uint32_t)c != h->n_ctx) {
            tool_error(cmd,
                       "the base file was made with -c %u; this run asks for -c %d "
                       "(leave -c out to use the file's)",
                       h->n_ctx, c);
            goto out;
        }
        c = (int)h->n_ctx;
    }
    if (file && !(text = tool_read_text(cmd, file, &text_len))) goto out;

    const uint32_t n_seq_max = b / (uint32_t)c > 1 ? b / (uint32_t)c : 1;
    int lr = load(cmd, &mo, &c, c_given || kld_mode, n_seq_max, b, &model, &ctx);
    if (lr >= 0) {
        ret = lr;
        goto out;
    }
    if (text && (s = rp_eval_tokenize(model, text, text_len, &toks, &n_tok))) {
        tool_fail(cmd, s);
        goto out;
    }
    const rp_vocab *vocab = rp_model_vocab(model);
    if (kld_mode) {
        const rp_kld_header *h = rp_kld_reader_header(run.reader);
        rp_kld_expect e = {
            .n_vocab = rp_n_vocab(ctx),
            .n_ctx = c,
            .n_chunk = n_chunks > 0 ? n_chunks : 0,
            .add_bos = rp_vocab_add_bos(vocab) && rp_vocab_bos(vocab) >= 0,
            .bos = rp_vocab_bos(vocab),
            .text_bytes = text ? text_len : 0,
            .text_hash = text ? rp_eval_text_hash(text, text_len) : 0,
            .tokens = toks,
            .n_tokens = n_tok,
        };
        if ((s = rp_kld_check(h, rp_kld_reader_tokens(run.reader), &e))) {
            tool_fail(cmd, s);
            goto out;
        }
        const size_t n_file = (size_t)h->n_chunk * h->n_ctx;
        if ((s = rp_eval_windows_init(&w, model, n_file, c, n_chunks))) {
            tool_fail(cmd, s);
            goto out;
        }
        eval_tokens = rp_kld_reader_tokens(run.reader);
        if ((s = rp_kld_acc_init(&run.kld, w.n_vocab))) {
            tool_fail(cmd, s);
            goto out;
        }
        if (g_verbosity > 0)
            fprintf(stderr, "base: %s; %u chunks of %u tokens%s\n",
                    h->desc[0] ? h->desc : "(no description)", h->n_chunk, h->n_ctx,
                    text ? ", same text" : " (text not checked: no -f)");
    } else {
        if ((s = rp_eval_windows_init(&w, model, n_tok, c, n_chunks))) {
            tool_fail(cmd, s);
            goto out;
        }
        eval_tokens = toks;
        if (base_path) {
            char desc[RP_KLD_DESC_SIZE];
            const char *slash = strrchr(mo.model, '/');
            snprintf(desc, sizeof desc, "%s%s%s", slash ? slash + 1 : mo.model,
                     mo.repeat_layers ? " --repeat-layers "
                     : mo.layer_map   ? " --layer-map "
                     : mo.plan_file   ? " --plan "
                                      : "",
                     mo.repeat_layers ? mo.repeat_layers
                     : mo.layer_map   ? mo.layer_map
                     : mo.plan_file   ? mo.plan_file
                                      : "");
            if ((s = rp_kld_writer_open(base_path, &w, toks, text_len,
                                        rp_eval_text_hash(text, text_len), desc, &run.writer))) {
                tool_fail(cmd, s);
                goto out;
            }
        }
    }
    const int n_seq = imin((int)n_seq_max, w.n_chunk);
    if (g_verbosity > 0) {
        char from[96];
        if (kld_mode)
            snprintf(from, sizeof from, "the base file's windows");
        else
            snprintf(from, sizeof from, "%zu of %zu tokens", (size_t)w.n_chunk * (size_t)w.n_ctx,
                     n_tok);
        fprintf(stderr,
                "perplexity: %d chunks of %d tokens (%s), scoring the last %d of each; %d chunk%s "
                "per batch\n",
                w.n_chunk, w.n_ctx, from, w.n_score, n_seq, n_seq > 1 ? "s" : "");
    }
    run.w = &w;
    run.stream = !isatty(1);
    progress_init(&run.pr, cmd);
    run.t0 = now_s();
    if (kld_mode) kld_table_header();
    s = rp_eval_run(ctx, eval_tokens, &w, n_seq, on_chunk, &run);
    progress_done(&run.pr);
    if (s) {
        if (run.values_len && run.stream) putchar('\n');
        tool_fail(cmd, s);
        goto out;
    }
    const double el = now_s() - run.t0;
    if (kld_mode) {
        rp_kld_stats st;
        if ((s = rp_kld_stats_compute(&run.kld, true, &st))) {
            tool_fail(cmd, s);
            goto out;
        }
        putchar('\n');
        print_kld_report(&st);
    } else {
        if (!run.stream) fputs(run.values, stdout);
        putchar('\n');
        printf("Final estimate: PPL = %.4f +/- %.5f\n", rp_ppl_value(&run.ppl),
               rp_ppl_uncertainty(&run.ppl));
        if (run.writer) {
            if ((s = rp_kld_writer_commit(run.writer))) {
                tool_fail(cmd, s);
                goto out;
            }
            if (g_verbosity > 0)
                fprintf(stderr, "saved the log-probabilities of %zu tokens to %s\n",
                        (size_t)w.n_chunk * (size_t)w.n_score, base_path);
        }
    }
    fflush(stdout);
    if (g_verbosity > 0)
        fprintf(stderr, "timing: %d chunks of %d tokens in %.2f s (%.0f tok/s)\n", w.n_chunk,
                w.n_ctx, el, el > 0 ? (double)w.n_chunk * w.n_ctx / el : 0.0);
    ret = 0;
out:
    rp_kld_writer_free(run.writer);
    rp_kld_reader_free(run.reader);
    rp_kld_acc_free(&run.kld);
    free(run.values);
    free(toks);
    free(text);
    rp_context_free(ctx);
    rp_model_free(model);
    return ret;
}
