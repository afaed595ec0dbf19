/* reprise perplexity: perplexity of a model on a text, and KL divergence of
 * its token distributions against a base model's saved log-probabilities
 * (llama.cpp's method and report; the evaluation is the library's
 * rp_perplexity). */
#include "tools.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_CTX   512
#define DEFAULT_BATCH 512

typedef struct ppl_opts {
    model_opts mo;
    const char *file, *base_path;
    int n_chunks;
    bool kld_mode;
    bool c_given;
    int c;      /* tokens per chunk */
    uint32_t b; /* tokens per decode */
} ppl_opts;

/* What the running report needs between chunks. */
typedef struct ppl_report {
    const ppl_opts *o;
    const char *cmd;
    const rp_eval_windows *w;
    bool stream; /* stdout is not a terminal: running values as they come */
    tbuf values; /* "[1]33.0934,[2]..." */
    progress pr;
    double t0;
    bool oom;
} ppl_report;

static void kld_table_header(void) {
    /* llama.cpp's header, column for column */
    printf("chunk             PPL               ln(PPL(Q)/PPL(base))          "
           "KL Divergence              \xce\x94p RMS            Same top p\n");
}

static void on_start(const rp_eval_windows *w, int n_seq, size_t n_tok, const rp_kld_header *h,
                     void *user) {
    ppl_report *r = user;
    r->w = w;
    if (g_verbosity > 0 && h)
        fprintf(stderr, "base: %s; %u chunks of %u tokens%s\n",
                h->desc[0] ? h->desc : "(no description)", h->n_chunk, h->n_ctx,
                r->o->file ? ", same text" : " (text not checked: no -f)");
    if (g_verbosity > 0) {
        char from[96];
        if (h)
            snprintf(from, sizeof from, "the base file's windows");
        else
            snprintf(from, sizeof from, "%zu of %zu tokens", (size_t)w->n_chunk * (size_t)w->n_ctx,
                     n_tok);
        fprintf(stderr,
                "perplexity: %d chunks of %d tokens (%s), scoring the last %d of each; %d chunk%s "
                "per batch\n",
                w->n_chunk, w->n_ctx, from, w->n_score, n_seq, n_seq > 1 ? "s" : "");
    }
    progress_init(&r->pr, r->cmd);
    r->t0 = now_s();
    if (h) kld_table_header();
}

static bool on_chunk(int index, double ppl, double unc, const rp_kld_stats *st, void *user) {
    (void)unc;
    ppl_report *r = user;
    char extra[160];
    if (st) {
        progress_done(&r->pr);
        printf("%4d    %9.4f \xc2\xb1 %9.4f    %10.5f \xc2\xb1 %10.5f    %10.5f \xc2\xb1 %10.5f"
               "    %6.3f \xc2\xb1 %6.3f %%    %6.3f \xc2\xb1 %6.3f %%\n",
               index + 1, st->ppl.val, st->ppl.unc, st->ln_ratio.val, st->ln_ratio.unc, st->kld.val,
               st->kld.unc, 100.0 * st->p_diff_rms.val, 100.0 * st->p_diff_rms.unc,
               100.0 * st->same_top.val, 100.0 * st->same_top.unc);
        fflush(stdout);
        snprintf(extra, sizeof extra, "KLD %.6f", st->kld.val);
    } else {
        char v[64];
        snprintf(v, sizeof v, "[%d]%.4f,", index + 1, ppl);
        if (!tbuf_add(&r->values, v, strlen(v))) {
            r->oom = true;
            return false;
        }
        if (r->stream) {
            fputs(v, stdout);
            fflush(stdout);
        }
        snprintf(extra, sizeof extra, "PPL %.4f", ppl);
    }
    const int done = index + 1;
    const double el = now_s() - r->t0;
    char line[256];
    snprintf(line, sizeof line, "| chunk %d/%d, %.0f tok/s, %s", done, r->w->n_chunk,
             el > 0 ? (double)done * r->w->n_ctx / el : 0.0, extra);
    progress_update(&r->pr, (float)done / (float)r->w->n_chunk, line);
    return true;
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
 * is allocated. Returns -1 to go on, else the exit status (0 after
 * --dump-plan). */
static int load(const char *cmd, ppl_opts *o, rp_model **model, rp_context **ctx) {
    const model_opts *mo = &o->mo;
    *model = NULL;
    *ctx = NULL;
    if (mo->quiet) g_verbosity = 0;
    if (mo->repeat_layers && mo->layer_map) {
        tool_error(cmd, "--repeat-layers and --layer-map are alternatives; give one");
        return 2;
    }
    if (!(*model = tool_load_model(cmd, mo->model, false))) return 1;
    int n_train = rp_model_n_ctx_train(*model);
    if (!o->c_given && !o->kld_mode && n_train > 0 && o->c > n_train) o->c = n_train;
    if (n_train > 0 && o->c > n_train) {
        tool_error(cmd, "-c %d is larger than the context %s was trained on (%d tokens)", o->c,
                   mo->model, n_train);
        return 1;
    }
    const uint32_t n_seq = o->b / (uint32_t)o->c > 1 ? o->b / (uint32_t)o->c : 1;
    rp_context_params cp = model_opts_context(mo, n_seq);
    cp.n_ctx = (uint32_t)o->c;
    cp.n_batch = o->b;
    cp.keep_hidden = false;
    rp_planfile *pf = NULL; /* --plan FILE, checked against the model */
    if (!model_opts_device(cmd, mo, *model, &cp.device)) return 1;
    if (!tool_plan_resolve(cmd, mo, *model, &pf, &cp.repeat_layers, &cp.layer_map)) return 1;
    rp_status s = rp_context_new(*model, &cp, ctx);
    rp_planfile_free(pf);
    if (s) return tool_fail(cmd, s);
    FILE *fp = mo->dump_plan ? stdout : stderr;
    if (mo->dump_plan || g_verbosity > 0) {
        if (!mo->dump_plan) {
            char desc[256];
            rp_model_desc(*model, desc, sizeof desc);
            fprintf(stderr, "model: %s\n", desc);
        }
        tool_print_plan(fp, *ctx);
        tool_print_device(fp, *ctx);
    }
    return mo->dump_plan ? 0 : -1;
}

static int ppl_parse(const char *cmd, ppl_opts *o, int argc, char **argv) {
    model_opts_init(&o->mo);
    o->n_chunks = -1;
    const arg_opt opts[] = {
        {"-f|--file", ARG_STR, &o->file, "FILE",
         "the text (tokenized whole, cut into chunks of -c tokens)"},
        {"--chunks", ARG_INT, &o->n_chunks, "N", "evaluate at most N chunks (default: all)"},
        {"--kl-divergence-base", ARG_STR, &o->base_path, "FILE",
         "write the model's log-probabilities to FILE (with --kl-divergence: read them)"},
        {"--kl-divergence", ARG_FLAG, &o->kld_mode, NULL,
         "compare with the base file's log-probabilities"},
        {0},
    };
    const arg_opt *tables[] = {opts, model_opts_table(&o->mo, MO_ALL | MO_CHUNKS | MO_DEVICE),
                               NULL};
    const char *const epilog[] = {g_plan_help, NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise perplexity -m MODEL -f TEXT [-c 512] [--chunks N] [-b N] [-t N]\n"
                 "       reprise perplexity -m BASE -f TEXT --kl-divergence-base B.kld\n"
                 "       reprise perplexity -m MODEL [-f TEXT] --kl-divergence-base B.kld "
                 "--kl-divergence",
        .description =
            "Perplexity by llama.cpp's method: the whole text is tokenized once and cut into\n"
            "chunks of -c tokens (default 512, at most the model's training context); each chunk\n"
            "starts with BOS where the model adds one, and only its second half is scored. "
            "Prints\nthe running value per chunk and 'Final estimate: PPL = X +/- Y'. -b N decodes "
            "N/c\nchunks together (default 512). A terminal shows progress on stderr.\n\n"
            "--kl-divergence-base FILE saves the model's token distributions over the same\n"
            "windows (docs/kld-format.md); a later run with --kl-divergence reads them back and\n"
            "reports the KL divergence, token-probability and top-token statistics of another\n"
            "model, quantization or layer plan against them (-c and the windows come from the\n"
            "file; -f also checks that the text is the same).",
        .tables = tables,
        .epilog = epilog};
    return args_parse_cmd(&spec, argc, argv);
}

static bool ppl_check(const char *cmd, ppl_opts *o) {
    if (!o->mo.model) {
        tool_error(cmd, "no model given (-m FILE)");
        return false;
    }
    if (o->kld_mode && !o->base_path) {
        tool_error(cmd, "--kl-divergence needs --kl-divergence-base FILE (made by a run without "
                        "--kl-divergence)");
        return false;
    }
    if (!o->kld_mode && !o->file && !o->mo.dump_plan) {
        tool_error(cmd, "no text (-f FILE)");
        return false;
    }
    if (o->n_chunks == 0 || o->n_chunks < -1) {
        tool_error(cmd, "--chunks expects a positive count, got %d", o->n_chunks);
        return false;
    }
    o->c_given = o->mo.n_ctx != 0;
    o->c = o->c_given ? (o->mo.n_ctx > INT32_MAX ? INT32_MAX : (int)o->mo.n_ctx) : DEFAULT_CTX;
    if (o->c < RP_EVAL_MIN_CTX) {
        tool_error(cmd, "-c %d is too small: chunks need at least %d tokens", o->c,
                   RP_EVAL_MIN_CTX);
        return false;
    }
    o->b = o->mo.n_batch ? o->mo.n_batch : DEFAULT_BATCH;
    return true;
}

/* With --kl-divergence the base file fixes c (a -c given must agree). */
static bool base_chunk_size(const char *cmd, ppl_opts *o) {
    rp_kld_reader *rd;
    rp_status s = rp_kld_reader_open(o->base_path, &rd);
    if (s) return tool_fail(cmd, s), false;
    const uint32_t c = rp_kld_reader_header(rd)->n_ctx;
    rp_kld_reader_free(rd);
    if (o->c_given && (uint32_t)o->c != c) {
        tool_error(cmd,
                   "the base file was made with -c %u; this run asks for -c %d (leave -c out to "
                   "use the file's)",
                   c, o->c);
        return false;
    }
    o->c = (int)c;
    return true;
}

static void ppl_report_final(const ppl_opts *o, const ppl_report *r,
                             const rp_perplexity_result *res, double el) {
    const rp_eval_windows *w = &res->windows;
    if (o->kld_mode) {
        putchar('\n');
        print_kld_report(&res->kld);
    } else {
        if (!r->stream) fputs(r->values.data ? r->values.data : "", stdout);
        putchar('\n');
        printf("Final estimate: PPL = %.4f +/- %.5f\n", res->ppl, res->unc);
        if (o->base_path && g_verbosity > 0)
            fprintf(stderr, "saved the log-probabilities of %zu tokens to %s\n",
                    (size_t)w->n_chunk * (size_t)w->n_score, o->base_path);
    }
    fflush(stdout);
    if (g_verbosity > 0)
        fprintf(stderr, "timing: %d chunks of %d tokens in %.2f s (%.0f tok/s)\n", w->n_chunk,
                w->n_ctx, el, el > 0 ? (double)w->n_chunk * w->n_ctx / el : 0.0);
}

/* "model.gguf --repeat-layers 1,3": what the base file was made with. */
static void base_desc(const model_opts *mo, char *desc, size_t size) {
    snprintf(desc, size, "%s%s%s", base_name(mo->model),
             mo->repeat_layers ? " --repeat-layers "
             : mo->layer_map   ? " --layer-map "
             : mo->plan_file   ? " --plan "
                               : "",
             mo->repeat_layers ? mo->repeat_layers
             : mo->layer_map   ? mo->layer_map
             : mo->plan_file   ? mo->plan_file
                               : "");
}

int cmd_perplexity(int argc, char **argv) {
    const char *cmd = "perplexity";
    ppl_opts o;
    memset(&o, 0, sizeof o);
    int rc = ppl_parse(cmd, &o, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (tool_list_devices(&o.mo)) return 0;
    if (!ppl_check(cmd, &o)) return 2;
    if (o.kld_mode && !base_chunk_size(cmd, &o)) return 1;
    char *text = NULL;
    size_t text_len = 0;
    if (o.file && !(text = tool_read_text(cmd, o.file, &text_len))) return 1;
    rp_model *model;
    rp_context *ctx;
    rc = load(cmd, &o, &model, &ctx);
    if (rc < 0) {
        char desc[RP_KLD_DESC_SIZE];
        base_desc(&o.mo, desc, sizeof desc);
        ppl_report r = {.o = &o, .cmd = cmd, .stream = !isatty(1)};
        const rp_perplexity_params pp = {.n_ctx = o.c,
                                         .n_chunks = o.n_chunks,
                                         .kld_base = o.kld_mode ? o.base_path : NULL,
                                         .write_base = o.kld_mode ? NULL : o.base_path,
                                         .base_desc = desc,
                                         .on_start = on_start,
                                         .on_chunk = on_chunk,
                                         .user = &r};
        rp_perplexity_result res;
        rp_status s = rp_perplexity(ctx, text, text_len, &pp, &res);
        progress_done(&r.pr);
        if (s) {
            if (r.values.len && r.stream) putchar('\n');
            if (r.oom)
                tool_error(cmd, "out of memory");
            else
                tool_fail(cmd, s);
            rc = 1;
        } else {
            ppl_report_final(&o, &r, &res, now_s() - r.t0);
            rc = 0;
        }
        tbuf_free(&r.values);
    }
    free(text);
    rp_context_free(ctx);
    rp_model_free(model);
    return rc;
}
