/* rp_perplexity: the whole evaluation of eval.c in one call: tokenize, cut
 * the windows (or take a base file's), decode, accumulate the perplexity or
 * the KL divergence, and write a base file. */
#include "base/util.h"
#include "eval/eval.h"

#include <stdlib.h>
#include <string.h>

typedef struct ppl_run {
    const rp_perplexity_params *p;
    const rp_eval_windows *w;
    rp_ppl_acc ppl;
    rp_kld_writer *writer; /* write_base */
    rp_kld_reader *reader; /* kld_base */
    rp_kld_acc kld;
} ppl_run;

static rp_status on_chunk(const rp_eval_chunk *ch, void *user) {
    ppl_run *r = user;
    rp_status s;
    rp_kld_stats st;
    if (r->reader) {
        const rp_kld_row *rows;
        if ((s = rp_kld_reader_chunk(r->reader, ch->index, &rows))) return s;
        for (int j = 0; j < ch->n_score; j++)
            if ((s = rp_kld_add(&r->kld, ch->logits[j], &rows[j], ch->target[j], NULL))) return s;
        if ((s = rp_kld_stats_compute(&r->kld, false, &st))) return s;
    } else {
        for (int j = 0; j < ch->n_score; j++)
            rp_ppl_add(&r->ppl, rp_eval_nll(ch->logits[j], r->w->n_vocab, ch->target[j]));
        if (r->writer && (s = rp_kld_writer_add(r->writer, ch))) return s;
    }
    const rp_perplexity_params *p = r->p;
    if (p->on_chunk && !p->on_chunk(ch->index, rp_ppl_value(&r->ppl), rp_ppl_uncertainty(&r->ppl),
                                    r->reader ? &st : NULL, p->user))
        return rp_fail(RP_ERR_CANCELLED, "perplexity cancelled after chunk %d", ch->index + 1);
    return RP_OK;
}

/* Opens the base file of a comparison and checks it against the context,
 * the chunk size asked for (0: any) and the text (when there is one). */
static rp_status base_open(ppl_run *r, const rp_context *ctx, int c, const int32_t *toks,
                           size_t n_tok, const char *text, size_t len) {
    rp_status s = rp_kld_reader_open(r->p->kld_base, &r->reader);
    if (s) return s;
    const rp_kld_header *h = rp_kld_reader_header(r->reader);
    if (c && (uint32_t)c != h->n_ctx)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "the base file was made with -c %u; this run asks for -c %d", h->n_ctx, c);
    const rp_vocab *v = rp_model_vocab(rp_context_model(ctx));
    const rp_kld_expect e = {
        .n_vocab = rp_n_vocab(ctx),
        .n_ctx = (int)h->n_ctx,
        .n_chunk = r->p->n_chunks > 0 ? r->p->n_chunks : 0,
        .add_bos = rp_vocab_add_bos(v) && rp_vocab_bos(v) >= 0,
        .bos = rp_vocab_bos(v),
        .text_bytes = text ? len : 0,
        .text_hash = text ? rp_eval_text_hash(text, len) : 0,
        .tokens = toks,
        .n_tokens = n_tok,
    };
    return rp_kld_check(h, rp_kld_reader_tokens(r->reader), &e);
}

rp_status rp_perplexity(rp_context *ctx, const char *text, size_t len,
                        const rp_perplexity_params *params, rp_perplexity_result *out) {
    memset(out, 0, sizeof *out);
    const rp_perplexity_params defaults = {0};
    const rp_perplexity_params *p = params ? params : &defaults;
    if (!text && !p->kld_base)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "perplexity: no text (and no base file to compare with)");
    if (p->kld_base && p->write_base)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "perplexity: a run compares with a base file or writes one, not both");
    const rp_model *m = rp_context_model(ctx);
    ppl_run r = {.p = p};
    int32_t *toks = NULL;
    size_t n_tok = 0;
    rp_eval_windows *w = &out->windows;
    rp_status s = text ? rp_eval_tokenize(m, text, len, &toks, &n_tok) : RP_OK;
    const int32_t *eval_tokens = toks;
    if (!s && p->kld_base) {
        if (!(s = base_open(&r, ctx, p->n_ctx, toks, n_tok, text, len))) {
            const rp_kld_header *h = rp_kld_reader_header(r.reader);
            s = rp_eval_windows_init(w, m, (size_t)h->n_chunk * h->n_ctx, (int)h->n_ctx,
                                     p->n_chunks);
            eval_tokens = rp_kld_reader_tokens(r.reader);
        }
        if (!s) s = rp_kld_acc_init(&r.kld, w->n_vocab);
    } else if (!s) {
        const int c = p->n_ctx ? p->n_ctx : (int)rp_context_n_ctx(ctx);
        s = rp_eval_windows_init(w, m, n_tok, c, p->n_chunks);
        if (!s && p->write_base)
            s = rp_kld_writer_open(p->write_base, w, toks, len, rp_eval_text_hash(text, len),
                                   p->base_desc ? p->base_desc : "", &r.writer);
    }
    if (!s) {
        const int n_seq = p->n_seq > 0 ? p->n_seq : (int)rp_context_n_seq(ctx);
        out->n_seq = RP_MIN(n_seq, w->n_chunk);
        r.w = w;
        if (p->on_start)
            p->on_start(w, out->n_seq, n_tok, r.reader ? rp_kld_reader_header(r.reader) : NULL,
                        p->user);
        s = rp_eval_run(ctx, eval_tokens, w, out->n_seq, on_chunk, &r);
    }
    if (!s && r.reader) s = rp_kld_stats_compute(&r.kld, true, &out->kld);
    if (!s && r.writer) s = rp_kld_writer_commit(r.writer);
    out->ppl = rp_ppl_value(&r.ppl);
    out->unc = rp_ppl_uncertainty(&r.ppl);
    rp_kld_writer_free(r.writer);
    rp_kld_reader_free(r.reader);
    rp_kld_acc_free(&r.kld);
    free(toks);
    return s;
}
