/* Grammars against a vocabulary: which tokens may come next, and accepting one.
 *
 * The token texts (rp_token_to_piece without control tokens, so UTF-8 bytes
 * exactly as generated) are kept in a trie laid out in preorder: node i's
 * subtree is nodes [i, end[i]), so walking the whole trie is one linear scan
 * over arrays, and a prefix no stack can continue skips its subtree in one
 * jump. Each node keeps the matcher state after its byte (a stack per depth);
 * code points arrive one byte at a time, and a partial UTF-8 sequence goes on
 * only while some stack could take a code point that starts with it (as
 * llama.cpp lets tokens end inside a character).
 *
 * Control tokens have no text: only end-of-generation tokens (when the grammar
 * is complete) and explicit token elements (<[id]>, <text>) allow them. The
 * allowed set of a state is cached (a few states recur all the time: inside a
 * string, between values). */
#include "text/gbnf.h"

#include "base/util.h"
#include "text/vocab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PIECE    4096
#define N_MASK_CACHE 64

struct rp_grammar_vocab {
    const rp_vocab *vocab;
    int32_t n_vocab;
    char *text;    /* every piece, back to back */
    uint32_t *off; /* [n_vocab + 1] piece t is text[off[t] .. off[t + 1]) */
    bool *eog;     /* [n_vocab] */
    /* the trie, preorder; node 0 is the root (the empty prefix) */
    size_t n_nodes;
    uint8_t *byte;   /* [n_nodes] */
    uint16_t *depth; /* [n_nodes] */
    uint32_t *end;   /* [n_nodes] one past the subtree */
    uint32_t
        *tok_off; /* [n_nodes + 1] tokens ending at node i: toks[tok_off[i] .. tok_off[i + 1]) */
    int32_t *toks;
    uint16_t max_depth;
    /* Subtree summaries of the nodes with many tokens below: the ASCII bytes
     * (and whether any byte >= 0x80) under the node. A state that every such
     * byte leads back to allows the whole subtree at once (inside a JSON
     * string, most of the vocabulary). */
    uint32_t *sum_of;         /* [n_nodes] summary index, or UINT32_MAX */
    uint64_t (*sum_ascii)[2]; /* [n_sums] */
    uint8_t *sum_high;        /* [n_sums] */
    uint32_t *bad_before;     /* [n_toks + 1] tokens in toks[0..k) whose text is not strict UTF-8 */
    /* per token, in toks order: its ASCII bytes; bit 0 of tok_flags: a byte >= 0x80,
     * bit 1: not strict UTF-8 */
    uint64_t (*tok_ascii)[2];
    uint8_t *tok_flags;
};

#define MIN_SUMMARY 32 /* tokens below a node for it to get a summary */

typedef struct walk {
    uint32_t state, v; /* matcher state; partial UTF-8 value */
    uint8_t r;         /* continuation bytes still to come */
    uint8_t len;       /* bytes of the sequence in progress (its shortest form's minimum) */
} walk;

typedef struct mask {
    walk key;
    bool valid;
    uint64_t *bits; /* [n_vocab / 64 + 1] */
} mask;

struct rp_grammar {
    const rp_grammar_vocab *gv;
    rp_gbnf *g;
    gm *m;
    uint32_t initial;
    walk cur;
    bool done;   /* an end-of-generation token was accepted */
    walk *stack; /* [max_depth + 1] */
    mask cache[N_MASK_CACHE];
    int next_slot;
    uint64_t *eog_bits; /* the mask once the output is complete: end-of-generation tokens */
};

/* ---- the vocabulary trie --------------------------------------------------------- */

typedef struct piece_ref {
    const char *p;
    uint32_t n;
    int32_t id;
} piece_ref;

static int cmp_piece(const void *a, const void *b) {
    const piece_ref *x = a, *y = b;
    uint32_t n = RP_MIN(x->n, y->n);
    int r = n ? memcmp(x->p, y->p, n) : 0;
    if (r) return r;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->id - y->id;
}

void rp_grammar_vocab_free(rp_grammar_vocab *gv) {
    if (!gv) return;
    free(gv->text);
    free(gv->off);
    free(gv->eog);
    free(gv->byte);
    free(gv->depth);
    free(gv->end);
    free(gv->tok_off);
    free(gv->toks);
    free(gv->sum_of);
    free(gv->sum_ascii);
    free(gv->sum_high);
    free(gv->bad_before);
    free(gv->tok_ascii);
    free(gv->tok_flags);
    free(gv);
}

/* Whether p[0..n) is strict UTF-8 (no overlong forms, nothing above
 * U+10FFFF), a final sequence possibly cut short. */
static bool strict_utf8(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t b = p[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        size_t len = b >= 0xC2 && b <= 0xDF   ? 2
                     : b >= 0xE0 && b <= 0xEF ? 3
                     : b >= 0xF0 && b <= 0xF4 ? 4
                                              : 0;
        if (!len) return false;
        for (size_t k = 1; k < len; k++) {
            if (i + k >= n) return true; /* cut short */
            uint8_t c = p[i + k];
            uint8_t lo = 0x80, hi = 0xBF;
            if (k == 1 && b == 0xE0) lo = 0xA0;
            if (k == 1 && b == 0xF0) lo = 0x90;
            if (k == 1 && b == 0xF4) hi = 0x8F;
            if (c < lo || c > hi) return false;
        }
        i += len;
    }
    return true;
}

static rp_status build_summaries(rp_grammar_vocab *gv) {
    size_t n = gv->n_nodes, nt = gv->tok_off[n];
    uint64_t(*below)[2] = calloc(n, sizeof *below);
    uint8_t *high = calloc(n, 1);
    gv->sum_of = malloc(n * sizeof *gv->sum_of);
    gv->bad_before = malloc((nt + 1) * sizeof *gv->bad_before);
    if (!below || !high || !gv->sum_of || !gv->bad_before) {
        free(below);
        free(high);
        return rp_fail(RP_ERR_NOMEM, "grammar: out of memory building the vocabulary trie");
    }
    /* children have larger indices than their parent: fold bottom-up */
    for (size_t i = n; i-- > 0;) {
        for (size_t c = i + 1; c < gv->end[i]; c = gv->end[c]) {
            uint8_t b = gv->byte[c];
            if (b < 0x80)
                below[i][b >> 6] |= 1ull << (b & 63);
            else
                high[i] = 1;
            below[i][0] |= below[c][0];
            below[i][1] |= below[c][1];
            high[i] |= high[c];
        }
    }
    size_t n_sums = 0;
    for (size_t i = 0; i < n; i++)
        n_sums += gv->tok_off[gv->end[i]] - gv->tok_off[i] >= MIN_SUMMARY;
    gv->sum_ascii = malloc((n_sums ? n_sums : 1) * sizeof *gv->sum_ascii);
    gv->sum_high = malloc(n_sums ? n_sums : 1);
    if (!gv->sum_ascii || !gv->sum_high) {
        free(below);
        free(high);
        return rp_fail(RP_ERR_NOMEM, "grammar: out of memory building the vocabulary trie");
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        gv->sum_of[i] = UINT32_MAX;
        if (gv->tok_off[gv->end[i]] - gv->tok_off[i] < MIN_SUMMARY) continue;
        gv->sum_of[i] = (uint32_t)k;
        gv->sum_ascii[k][0] = below[i][0];
        gv->sum_ascii[k][1] = below[i][1];
        gv->sum_high[k++] = high[i];
    }
    free(below);
    free(high);
    gv->tok_ascii = calloc(nt ? nt : 1, sizeof *gv->tok_ascii);
    gv->tok_flags = calloc(nt ? nt : 1, 1);
    if (!gv->tok_ascii || !gv->tok_flags)
        return rp_fail(RP_ERR_NOMEM, "grammar: out of memory building the vocabulary trie");
    gv->bad_before[0] = 0;
    for (size_t j = 0; j < nt; j++) {
        int32_t t = gv->toks[j];
        const uint8_t *p = (const uint8_t *)gv->text + gv->off[t];
        size_t len = gv->off[t + 1] - gv->off[t];
        bool ok = strict_utf8(p, len);
        gv->bad_before[j + 1] = gv->bad_before[j] + !ok;
        for (size_t i = 0; i < len; i++) {
            if (p[i] < 0x80)
                gv->tok_ascii[j][p[i] >> 6] |= 1ull << (p[i] & 63);
            else
                gv->tok_flags[j] |= 1;
        }
        if (!ok) gv->tok_flags[j] |= 2;
    }
    return RP_OK;
}

static rp_status build_trie(rp_grammar_vocab *gv) {
    int32_t n = gv->n_vocab;
    piece_ref *refs = malloc((size_t)n * sizeof *refs);
    if (!refs) return rp_fail(RP_ERR_NOMEM, "grammar: out of memory building the vocabulary trie");
    size_t k = 0, nodes = 1;
    for (int32_t t = 0; t < n; t++) {
        uint32_t len = gv->off[t + 1] - gv->off[t];
        if (len) refs[k++] = (piece_ref){gv->text + gv->off[t], len, t};
        nodes += len; /* an upper bound */
    }
    qsort(refs, k, sizeof *refs, cmp_piece);
    gv->byte = malloc(nodes);
    gv->depth = malloc(nodes * sizeof *gv->depth);
    gv->end = malloc(nodes * sizeof *gv->end);
    gv->tok_off = malloc((nodes + 1) * sizeof *gv->tok_off);
    gv->toks = malloc((k ? k : 1) * sizeof *gv->toks);
    uint32_t *path = malloc((MAX_PIECE + 1) * sizeof *path);
    if (!gv->byte || !gv->depth || !gv->end || !gv->tok_off || !gv->toks || !path) {
        free(refs);
        free(path);
        return rp_fail(RP_ERR_NOMEM, "grammar: out of memory building the vocabulary trie");
    }
    size_t nn = 1, nt = 0, depth = 0; /* path[0..depth] = nodes of the current prefix */
    path[0] = 0;
    gv->byte[0] = 0;
    gv->depth[0] = 0;
    gv->tok_off[0] = 0;
    const piece_ref *prev = NULL;
    for (size_t i = 0; i < k; i++) {
        const piece_ref *r = &refs[i];
        size_t lcp = 0;
        if (prev)
            while (lcp < prev->n && lcp < r->n && prev->p[lcp] == r->p[lcp]) lcp++;
        while (depth > lcp) gv->end[path[depth--]] = (uint32_t)nn; /* close finished subtrees */
        for (size_t d = lcp; d < r->n; d++) {
            gv->byte[nn] = (uint8_t)r->p[d];
            gv->depth[nn] = (uint16_t)(d + 1);
            gv->tok_off[nn] = (uint32_t)nt;
            path[++depth] = (uint32_t)nn++;
        }
        gv->toks[nt++] = r->id;
        if (r->n > gv->max_depth) gv->max_depth = (uint16_t)r->n;
        prev = r;
    }
    while (depth > 0) gv->end[path[depth--]] = (uint32_t)nn;
    gv->end[0] = (uint32_t)nn;
    gv->tok_off[nn] = (uint32_t)nt;
    gv->n_nodes = nn;
    free(path);
    free(refs);
    return RP_OK;
}

rp_status rp_grammar_vocab_new(const rp_vocab *v, rp_grammar_vocab **out) {
    *out = NULL;
    if (!v || v->n_tokens < 1) return rp_fail(RP_ERR_INVALID_ARG, "grammar: no vocabulary");
    rp_grammar_vocab *gv = calloc(1, sizeof *gv);
    if (!gv) return rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
    gv->vocab = v;
    gv->n_vocab = v->n_tokens;
    gv->off = malloc(((size_t)v->n_tokens + 1) * sizeof *gv->off);
    gv->eog = malloc((size_t)v->n_tokens);
    rp_buf text = {0};
    char buf[MAX_PIECE + 1];
    bool ok = gv->off && gv->eog;
    for (int32_t t = 0; ok && t < v->n_tokens; t++) {
        gv->off[t] = (uint32_t)text.len;
        gv->eog[t] = rp_vocab_is_eog(v, t);
        int k = rp_token_to_piece(v, t, false, buf, sizeof buf);
        if (k > 0 && k <= MAX_PIECE && !gv->eog[t]) ok = rp_buf_append(&text, buf, (size_t)k);
        if (text.len > UINT32_MAX / 2) ok = false;
    }
    if (ok) gv->off[v->n_tokens] = (uint32_t)text.len;
    gv->text = text.data;
    if (!ok) {
        rp_grammar_vocab_free(gv);
        return rp_fail(RP_ERR_NOMEM, "grammar: out of memory reading the vocabulary");
    }
    rp_status s = build_trie(gv);
    if (!s) s = build_summaries(gv);
    if (s) {
        rp_grammar_vocab_free(gv);
        return s;
    }
    *out = gv;
    return RP_OK;
}

/* ---- walking bytes ------------------------------------------------------------------ */

/* The walk after byte b, or one with state GM_DEAD. UTF-8 is taken
 * strictly: overlong forms, surrogates and values above U+10FFFF are dead
 * (else byte tokens could spell '{' as C1 BB). */
static walk step_byte(gm *m, walk w, uint8_t b) {
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    walk o = {GM_DEAD, 0, 0, 0};
    if (w.r == 0) {
        if (b < 0x80) {
            o.state = gm_step(m, w.state, b);
            return o;
        }
        int r = (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : 0;
        if (!r) return o;
        uint32_t v = b & (0x3Fu >> r);
        if (gm_may_take(m, w.state, v, r, min_cp[r + 1]))
            o = (walk){w.state, v, (uint8_t)r, (uint8_t)(r + 1)};
        return o;
    }
    if ((b & 0xC0) != 0x80) return o;
    uint32_t v = (w.v << 6) | (b & 0x3F);
    if (w.r == 1) {
        if (v < min_cp[w.len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return o;
        o.state = gm_step(m, w.state, v);
        return o;
    }
    if (gm_may_take(m, w.state, v, w.r - 1, min_cp[w.len]))
        o = (walk){w.state, v, (uint8_t)(w.r - 1), w.len};
    return o;
}

static walk walk_text(gm *m, walk w, const char *p, size_t n) {
    for (size_t i = 0; i < n && w.state != GM_DEAD; i++) w = step_byte(m, w, (uint8_t)p[i]);
    return w;
}

/* ---- grammars ------------------------------------------------------------------------- */

static rp_status matcher_error(const rp_grammar *g) {
    return rp_fail(RP_ERR_INVALID_ARG, "grammar: %s", gm_error(g->m));
}

static int32_t find_token(void *user, const char *text) {
    const rp_vocab *v = user;
    int32_t *toks = NULL;
    size_t n = 0;
    if (rp_tokenize(v, text, strlen(text), false, true, &toks, &n) != RP_OK) return -1;
    int32_t id = n == 1 ? toks[0] : -1;
    free(toks);
    return id;
}

rp_status rp_grammar_check(const char *gbnf, const char *root) {
    if (!gbnf) return rp_fail(RP_ERR_INVALID_ARG, "grammar: no grammar text");
    rp_gbnf *g;
    rp_status s = gbnf_parse(gbnf, strlen(gbnf), root, &g);
    gbnf_free(g);
    return s;
}

rp_status rp_grammar_new(const rp_grammar_vocab *gv, const char *gbnf, const char *root,
                         rp_grammar **out) {
    *out = NULL;
    if (!gv || !gbnf) return rp_fail(RP_ERR_INVALID_ARG, "grammar: no vocabulary or grammar text");
    rp_grammar *g = calloc(1, sizeof *g);
    if (!g) return rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
    g->gv = gv;
    rp_status s = gbnf_parse(gbnf, strlen(gbnf), root, &g->g);
    if (!s) s = gbnf_bind_tokens(g->g, find_token, (void *)gv->vocab);
    for (size_t i = 0; !s && i < g->g->n_e; i++)
        if ((g->g->e[i].type == GB_TOKEN || g->g->e[i].type == GB_TOKEN_NOT) &&
            (int64_t)g->g->e[i].v >= gv->n_vocab)
            s = rp_fail(RP_ERR_INVALID_ARG,
                        "grammar: token <[%u]> is outside the vocabulary (%d tokens)", g->g->e[i].v,
                        gv->n_vocab);
    if (!s) {
        g->m = gm_new(g->g);
        g->stack = malloc(((size_t)gv->max_depth + 2) * sizeof *g->stack);
        if (!g->m || !g->stack) s = rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
    }
    if (!s) {
        g->initial = gm_initial(g->m);
        if (gm_error(g->m))
            s = matcher_error(g);
        else if (g->initial == GM_DEAD)
            s = rp_fail(RP_ERR_INVALID_ARG, "grammar: the start rule matches nothing");
    }
    if (s) {
        rp_grammar_free(g);
        return s;
    }
    g->cur = (walk){g->initial, 0, 0, 0};
    *out = g;
    return RP_OK;
}

void rp_grammar_free(rp_grammar *g) {
    if (!g) return;
    for (int i = 0; i < N_MASK_CACHE; i++) free(g->cache[i].bits);
    free(g->eog_bits);
    free(g->stack);
    gm_free(g->m);
    gbnf_free(g->g);
    free(g);
}

void rp_grammar_reset(rp_grammar *g) {
    g->cur = (walk){g->initial, 0, 0, 0};
    g->done = false;
}

rp_grammar_state rp_grammar_save(const rp_grammar *g) {
    rp_grammar_state st = {
        {(uint64_t)g->cur.state | (uint64_t)g->cur.v << 32,
         (uint64_t)g->cur.r | (uint64_t)g->cur.len << 8 | (uint64_t)g->done << 16}};
    return st;
}

void rp_grammar_restore(rp_grammar *g, rp_grammar_state st) {
    g->cur.state = (uint32_t)st.opaque[0];
    g->cur.v = (uint32_t)(st.opaque[0] >> 32);
    g->cur.r = (uint8_t)(st.opaque[1] & 0xFF);
    g->cur.len = (uint8_t)(st.opaque[1] >> 8);
    g->done = (st.opaque[1] >> 16) & 1;
}

bool rp_grammar_can_end(const rp_grammar *g) {
    return g->done || (g->cur.r == 0 && gm_can_end(g->m, g->cur.state));
}

/* The walk after token t from w (GM_DEAD when t cannot come next). */
static walk after_token(rp_grammar *g, walk w, int32_t t) {
    const rp_grammar_vocab *gv = g->gv;
    walk dead = {GM_DEAD, 0, 0, 0};
    if (t < 0 || t >= gv->n_vocab) return dead;
    if (gv->eog[t]) return w.r == 0 && gm_can_end(g->m, w.state) ? w : dead;
    uint32_t len = gv->off[t + 1] - gv->off[t];
    walk c = len ? walk_text(g->m, w, gv->text + gv->off[t], len) : dead;
    if (w.r == 0 && gm_has_token_tops(g->m, w.state)) {
        uint32_t ts = gm_step_token(g->m, w.state, t);
        /* a token element and a text that ends inside a character cannot share one state:
         * the text wins then */
        if (ts != GM_DEAD && (c.state == GM_DEAD || c.r == 0))
            c = (walk){gm_union(g->m, c.state, ts), 0, 0, 0};
    }
    return c;
}

bool rp_grammar_allows(rp_grammar *g, int32_t token) {
    if (g->done) return false;
    return after_token(g, g->cur, token).state != GM_DEAD;
}

rp_status rp_grammar_accept(rp_grammar *g, int32_t token) {
    if (g->done)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "grammar: the output is already complete (token %d after the end)", token);
    walk w = after_token(g, g->cur, token);
    if (gm_error(g->m)) return matcher_error(g);
    if (w.state == GM_DEAD)
        return rp_fail(RP_ERR_INVALID_ARG, "grammar: token %d (\"%.*s\") cannot come next", token,
                       token >= 0 && token < g->gv->n_vocab
                           ? (int)RP_MIN(g->gv->off[token + 1] - g->gv->off[token], 40u)
                           : 0,
                       token >= 0 && token < g->gv->n_vocab ? g->gv->text + g->gv->off[token] : "");
    if (token >= 0 && token < g->gv->n_vocab && g->gv->eog[token]) g->done = true;
    g->cur = w;
    return RP_OK;
}

/* ---- masks ---------------------------------------------------------------------------- */

typedef struct tok_ctx {
    const rp_grammar_vocab *gv;
    uint64_t *bits;
} tok_ctx;

static void set_bit(uint64_t *b, int32_t t) {
    b[t >> 6] |= 1ull << (t & 63);
}

static void mark_token_elem(void *user, int32_t token, bool negated) {
    tok_ctx *c = user;
    if (!negated) {
        set_bit(c->bits, token);
        return;
    }
    for (int32_t t = 0; t < c->gv->n_vocab; t++)
        if (t != token && !c->gv->eog[t]) set_bit(c->bits, t);
}

/* Bits of the tokens that may follow w. */
static void compute_mask(rp_grammar *g, walk w, uint64_t *bits) {
    const rp_grammar_vocab *gv = g->gv;
    memset(bits, 0, ((size_t)gv->n_vocab / 64 + 1) * sizeof *bits);
    if (w.r == 0 && gm_can_end(g->m, w.state))
        for (int32_t t = 0; t < gv->n_vocab; t++)
            if (gv->eog[t]) set_bit(bits, t);
    if (w.r == 0 && gm_has_token_tops(g->m, w.state)) {
        tok_ctx c = {gv, bits};
        gm_token_tops(g->m, w.state, mark_token_elem, &c);
    }
    walk *st = g->stack;
    st[0] = w;
    const uint8_t *byte = gv->byte;
    const uint16_t *depth = gv->depth;
    const uint32_t *end = gv->end, *tok_off = gv->tok_off;
    size_t n = gv->n_nodes;
    for (size_t i = 0; i < n;) {
        walk nw = i ? step_byte(g->m, st[depth[i] - 1], byte[i]) : w;
        if (nw.state == GM_DEAD) {
            i = end[i];
            continue;
        }
        st[depth[i]] = nw;
        for (uint32_t k = tok_off[i]; k < tok_off[i + 1]; k++) set_bit(bits, gv->toks[k]);
        uint32_t si = gv->sum_of[i];
        uint64_t q[2];
        bool hq;
        if (si != UINT32_MAX && nw.r == 0 && gm_quiet(g->m, nw.state, q, &hq)) {
            uint32_t b = tok_off[i + 1], e = tok_off[end[i]];
            bool clean = gv->bad_before[e] == gv->bad_before[b];
            if (clean && !(gv->sum_ascii[si][0] & ~q[0]) && !(gv->sum_ascii[si][1] & ~q[1]) &&
                (!gv->sum_high[si] || hq)) {
                /* every path below comes back to this state: all of it is allowed */
                for (uint32_t k = b; k < e; k++) set_bit(bits, gv->toks[k]);
                i = end[i];
                continue;
            }
            if (__builtin_popcountll(q[0] & 0xFFFFFFFF00000000ull) + __builtin_popcountll(q[1]) >=
                48) {
                /* a permissive state: token by token is cheaper than the trie
                 * (most tokens are quiet; the others are walked from here) */
                for (uint32_t k = b; k < e; k++) {
                    bool quiet = !(gv->tok_ascii[k][0] & ~q[0]) && !(gv->tok_ascii[k][1] & ~q[1]) &&
                                 !(gv->tok_flags[k] & 2) && (!(gv->tok_flags[k] & 1) || hq);
                    int32_t t = gv->toks[k];
                    if (!quiet) {
                        size_t d = depth[i];
                        quiet = walk_text(g->m, nw, gv->text + gv->off[t] + d,
                                          gv->off[t + 1] - gv->off[t] - d)
                                    .state != GM_DEAD;
                    }
                    if (quiet) set_bit(bits, t);
                }
                i = end[i];
                continue;
            }
        }
        i++;
    }
}

static const uint64_t *get_mask(rp_grammar *g) {
    for (int i = 0; i < N_MASK_CACHE; i++) {
        mask *c = &g->cache[i];
        if (c->valid && c->key.state == g->cur.state && c->key.v == g->cur.v &&
            c->key.r == g->cur.r && c->key.len == g->cur.len)
            return c->bits;
    }
    mask *c = &g->cache[g->next_slot];
    g->next_slot = (g->next_slot + 1) % N_MASK_CACHE;
    if (!c->bits) {
        c->bits = malloc(((size_t)g->gv->n_vocab / 64 + 1) * sizeof *c->bits);
        if (!c->bits) return NULL;
    }
    compute_mask(g, g->cur, c->bits);
    c->key = g->cur;
    c->valid = !gm_error(g->m);
    return c->bits;
}

size_t gbnf_vocab_nodes(const rp_grammar_vocab *gv) {
    return gv->n_nodes;
}

const uint64_t *gbnf_grammar_mask(rp_grammar *g) {
    const rp_grammar_vocab *gv = g->gv;
    if (g->done) {
        if (!g->eog_bits) {
            g->eog_bits = calloc((size_t)gv->n_vocab / 64 + 1, sizeof *g->eog_bits);
            if (!g->eog_bits) {
                rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
                return NULL;
            }
            for (int32_t t = 0; t < gv->n_vocab; t++)
                if (gv->eog[t]) set_bit(g->eog_bits, t);
        }
        return g->eog_bits;
    }
    const uint64_t *bits = get_mask(g);
    if (!bits) {
        rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
        return NULL;
    }
    if (gm_error(g->m)) {
        matcher_error(g);
        return NULL;
    }
    return bits;
}

void gbnf_mask_cache_clear(rp_grammar *g) {
    for (int i = 0; i < N_MASK_CACHE; i++) g->cache[i].valid = false;
}

rp_status rp_grammar_apply(rp_grammar *g, float *logits) {
    const rp_grammar_vocab *gv = g->gv;
    const uint64_t *bits = gbnf_grammar_mask(g);
    if (!bits) return RP_ERR_INVALID_ARG;
    for (int32_t w = 0; w * 64 < gv->n_vocab; w++) {
        uint64_t keep = bits[w];
        if (keep == ~0ull) continue;
        int32_t hi = RP_MIN(gv->n_vocab, w * 64 + 64);
        for (int32_t t = w * 64; t < hi; t++)
            if (!((keep >> (t & 63)) & 1)) logits[t] = -INFINITY;
    }
    return RP_OK;
}

/* ---- text (tests, validation) ------------------------------------------------------------ */

rp_status gbnf_match_text(const rp_gbnf *gr, const char *text, size_t len, size_t *matched,
                          bool *complete) {
    gm *m = gm_new(gr);
    if (!m) return rp_fail(RP_ERR_NOMEM, "grammar: out of memory");
    walk w = {gm_initial(m), 0, 0, 0};
    size_t i = 0;
    for (; i < len && w.state != GM_DEAD; i++) {
        walk nw = step_byte(m, w, (uint8_t)text[i]);
        if (nw.state == GM_DEAD) break;
        w = nw;
    }
    rp_status s = gm_error(m) ? rp_fail(RP_ERR_INVALID_ARG, "grammar: %s", gm_error(m)) : RP_OK;
    *matched = i;
    *complete = i == len && w.r == 0 && gm_can_end(m, w.state);
    gm_free(m);
    return s;
}
