/* Grammars in llama.cpp's GBNF format, and the matcher that constrains
 * generation to them.
 *
 *   gbnf_parse.c  text -> rp_gbnf: rules, each a list of alternatives, each a
 *                 sequence of elements (character set, rule reference, token),
 *                 repetitions rewritten into helper rules, checked for undefined
 *                 rules and left recursion.
 *   gbnf_match.c  the matcher: a position in the grammar is a set of stacks
 *                 (a graph-structured stack: every stack node (element, parent)
 *                 is interned, so equal stacks are one id), a state is an
 *                 interned set of stack tops; transitions on a code point are
 *                 cached per (state, code point).
 *   gbnf_vocab.c  the vocabulary side: token texts in a trie stored in preorder,
 *                 walked against a state to mask the logits of tokens that
 *                 cannot continue; accepting a token; the public rp_grammar_*.
 */
#ifndef RP_GBNF_H
#define RP_GBNF_H

#include "reprise.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the grammar ------------------------------------------------------------ */

typedef enum gb_type {
    GB_END = 0,   /* end of an alternative */
    GB_CHARS,     /* one code point in set v */
    GB_RULE,      /* rule v */
    GB_TOKEN,     /* the token with id v */
    GB_TOKEN_NOT, /* any token but v */
} gb_type;

typedef struct gb_elem {
    uint8_t type;
    uint32_t v;
} gb_elem;

/* A set of code points: sorted, disjoint, non-adjacent ranges (negation is
 * materialized), with an ASCII bitmap for the common case. */
typedef struct gb_cset {
    uint32_t r0, nr; /* ranges[2*r0 ..] lo,hi pairs */
    uint64_t ascii[2];
} gb_cset;

typedef struct gb_rule {
    uint32_t alt0, n_alt;    /* alts[alt0 .. alt0 + n_alt): element indices */
    uint32_t name, name_len; /* in names */
    bool nullable;
} gb_rule;

typedef struct rp_gbnf {
    gb_elem *e; /* every alternative's elements, each ending in GB_END */
    size_t n_e;
    uint32_t *alts;
    size_t n_alts;
    gb_rule *rules;
    size_t n_rules;
    gb_cset *sets;
    size_t n_sets;
    uint32_t *ranges;
    size_t n_ranges;
    char *names;
    uint32_t root;
    /* <text> tokens: until gbnf_bind_tokens resolves them against a
     * vocabulary, their elements hold GB_TOKEN_TEXT | index into tok_text */
    char **tok_text;
    size_t n_tok, n_bound;
} rp_gbnf;

#define GB_TOKEN_TEXT 0x80000000u

/* Parses GBNF text; `root` names the start rule (NULL = "root"). Errors are
 * RP_ERR_FORMAT with line and column. */
rp_status gbnf_parse(const char *text, size_t len, const char *root, rp_gbnf **out);
void gbnf_free(rp_gbnf *g);
/* The name of rule r (for messages and dumps). */
const char *gbnf_rule_name(const rp_gbnf *g, uint32_t r, size_t *len);
/* Whether set s holds code point c. */
bool gbnf_set_has(const rp_gbnf *g, uint32_t s, uint32_t c);
/* Whether set s holds some code point in [lo, hi]. */
bool gbnf_set_meets(const rp_gbnf *g, uint32_t s, uint32_t lo, uint32_t hi);
/* Resolves <text> tokens: find(text) returns the id of the token whose text is
 * exactly text, or -1. */
rp_status gbnf_bind_tokens(rp_gbnf *g, int32_t (*find)(void *user, const char *text), void *user);

/* ---- the matcher -------------------------------------------------------------- */

typedef struct gm gm;

#define GM_DEAD   0u /* no stack survives */
#define GM_ACCEPT 0u /* stack node 0: the empty stack (the grammar is complete) */

gm *gm_new(const rp_gbnf *g);
void gm_free(gm *m);
/* The state before any input; GM_DEAD with an error when the expansion fails. */
uint32_t gm_initial(gm *m);
/* After code point c; GM_DEAD when no stack accepts it. A failed expansion
 * (limits) also returns GM_DEAD and sets gm_error. */
uint32_t gm_step(gm *m, uint32_t state, uint32_t c);
/* Whether some stack of state could take a code point that starts with the
 * partial UTF-8 value v, r continuation bytes still to come (1..3), and is at
 * least min (the smallest value its encoded length may hold). */
bool gm_may_take(gm *m, uint32_t state, uint32_t v, int r, uint32_t min);
/* After a whole token that a TOKEN / TOKEN_NOT element matches (only those stacks). */
uint32_t gm_step_token(gm *m, uint32_t state, int32_t token);
/* Union of two states. */
uint32_t gm_union(gm *m, uint32_t a, uint32_t b);
bool gm_can_end(const gm *m, uint32_t state);
/* Whether some stack of state waits for a token element (TOKEN or TOKEN_NOT). */
bool gm_has_token_tops(const gm *m, uint32_t state);
/* Calls fn(user, token, negated) for each token element at the top of state. */
void gm_token_tops(const gm *m, uint32_t state, void (*fn)(void *user, int32_t token, bool negated),
                   void *user);
/* out = the ASCII code points that lead from state back to itself (128
 * bits), *high = whether every code point >= 0x80 does; false after an error. */
bool gm_quiet(gm *m, uint32_t state, uint64_t out[2], bool *high);
/* Non-NULL after a limit was hit (the message); the matcher is then unusable. */
const char *gm_error(const gm *m);
/* Bytes the matcher holds (tests and limits). */
size_t gm_bytes(const gm *m);

/* The tokens that may come next, one bit each (valid until the grammar
 * changes); NULL on failure (rp_last_error says why). */
const uint64_t *gbnf_grammar_mask(rp_grammar *g);
/* Nodes of the vocabulary trie (benchmarks). */
size_t gbnf_vocab_nodes(const rp_grammar_vocab *gv);
/* Forgets the cached masks (benchmarks). */
void gbnf_mask_cache_clear(rp_grammar *g);

/* ---- text (gbnf_vocab.c) --------------------------------------------------------- */

/* Runs text through the grammar: *matched = bytes accepted before the first
 * one no stack takes (len when all are), *complete = the grammar can end
 * after all of text. */
rp_status gbnf_match_text(const rp_gbnf *g, const char *text, size_t len, size_t *matched,
                          bool *complete);

#endif
