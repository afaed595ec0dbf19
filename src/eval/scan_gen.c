/* The generation probes of a scan: every math and EQ probe answered greedily
 * under the plan of a context, several probes decoded together (one sequence
 * each), and each output scored (probe_score.c). */
#include "eval/scan.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int k = 1; k < n; k++)
        if (x[k] > x[b]) b = k;
    return b;
}

/* Probes [g0, g1) as sequences 0.., decoded together. */
static rp_status gen_group(const rp_scan_set *set, rp_context *ctx, int g0, int g1, double *score,
                           char *texts) {
    const rp_vocab *v = rp_model_vocab(rp_context_model(ctx));
    const int nv = rp_n_vocab(ctx), n = g1 - g0;
    size_t tot = 0;
    for (int g = g0; g < g1; g++) tot += (size_t)set->gen[g].n_prompt;
    int32_t *tok = rp_malloc((tot + 1) * sizeof *tok, "probe batch"),
            *pos = rp_malloc((tot + 1) * sizeof *pos, "probe batch"),
            *seq = rp_malloc((tot + 1) * sizeof *seq, "probe batch"),
            *row = rp_malloc((size_t)n * sizeof *row, "probe batch"),
            *next = rp_malloc((size_t)n * sizeof *next, "probe batch");
    int8_t *want = rp_malloc(tot + 1, "probe batch");
    char *text = rp_calloc((size_t)n, GEN_TEXT_MAX, "probe outputs");
    int *len = rp_calloc((size_t)n, sizeof *len, "probe outputs");
    bool *done = rp_calloc((size_t)n, sizeof *done, "probe outputs");
    rp_status st = RP_OK;
    if (!tok || !pos || !seq || !row || !next || !want || !text || !len || !done) {
        st = RP_ERR_NOMEM;
        goto out;
    }
    for (int q = 0; q < n && !st; q++) st = rp_kv_seq_truncate(ctx, q, 0);
    size_t k = 0;
    for (int q = 0; q < n; q++) {
        const rp_scan_gen *ge = &set->gen[g0 + q];
        for (int p = 0; p < ge->n_prompt; p++, k++) {
            tok[k] = set->tok[ge->tok + (size_t)p];
            pos[k] = p;
            seq[k] = q;
            want[k] = p == ge->n_prompt - 1;
        }
        row[q] = (int32_t)k - 1;
    }
    rp_batch b = {.n_tokens = (int32_t)k, .token = tok, .pos = pos, .seq_id = seq, .logits = want};
    if (!st) st = rp_decode(ctx, &b);
    for (int step = 0; !st; step++) {
        int active = 0;
        for (int q = 0; q < n; q++) {
            if (done[q]) continue;
            const rp_scan_gen *ge = &set->gen[g0 + q];
            const int32_t t = argmax(rp_get_logits(ctx, row[q]), nv);
            char piece[64];
            int w =
                rp_vocab_is_eog(v, t) ? -1 : rp_token_to_piece(v, t, false, piece, sizeof piece);
            if (w > 0 && len[q] + w < GEN_TEXT_MAX) {
                memcpy(text + (size_t)q * GEN_TEXT_MAX + len[q], piece, (size_t)RP_MIN(w, 63));
                len[q] += RP_MIN(w, 63);
            }
            /* the end: an end-of-generation token, the budget, or a line break after text */
            const bool newline = w > 0 && memchr(piece, '\n', (size_t)RP_MIN(w, 63)) &&
                                 len[q] > (int)strspn(text + (size_t)q * GEN_TEXT_MAX, " \n");
            if (w < 0 || step + 1 >= ge->max_tokens || newline) {
                done[q] = true;
                continue;
            }
            next[active] = q;
            tok[active] = t;
            pos[active] = ge->n_prompt + step;
            seq[active] = q;
            want[active] = 1;
            active++;
        }
        if (!active) break;
        for (int a = 0; a < active; a++) row[next[a]] = a;
        b = (rp_batch){.n_tokens = active, .token = tok, .pos = pos, .seq_id = seq, .logits = want};
        st = rp_decode(ctx, &b);
    }
    for (int q = 0; q < n && !st; q++) {
        const rp_scan_gen *ge = &set->gen[g0 + q];
        const char *out = text + (size_t)q * GEN_TEXT_MAX;
        score[g0 + q] = ge->eq ? rp_probe_score_eq(out, ge->scores, ge->n_scores, ge->scale)
                               : rp_probe_score_math(out, ge->expected);
        if (texts) memcpy(texts + (size_t)(g0 + q) * GEN_TEXT_MAX, out, GEN_TEXT_MAX);
    }
out:
    free(tok);
    free(pos);
    free(seq);
    free(row);
    free(next);
    free(want);
    free(text);
    free(len);
    free(done);
    return st;
}

rp_status rp_scan_generate(const rp_scan_set *set, rp_context *ctx, int n_batch, int n_seq,
                           double *score, char *texts, rp_progress_fn progress, void *user) {
    const int budget = n_batch > 0 ? n_batch : 512;
    for (int g0 = 0; g0 < set->n_gen;) {
        int g1 = g0 + 1, used = set->gen[g0].n_prompt;
        while (g1 < set->n_gen && g1 - g0 < n_seq && used + set->gen[g1].n_prompt <= budget)
            used += set->gen[g1++].n_prompt;
        rp_status st = gen_group(set, ctx, g0, g1, score, texts);
        if (st) return rp_fail_prefix(st, "generating probes %d..%d", g0 + 1, g1);
        if (progress && !progress((float)g1 / (float)set->n_gen, user))
            return rp_fail(RP_ERR_CANCELLED, "scan cancelled");
        g0 = g1;
    }
    return RP_OK;
}
