/* The vocabulary's table (internal view): tokens, scores, attributes,
 * special ids and the text -> id map, as rp_vocab_load (vocab.c) fills them.
 * Both tokenizers read it, SentencePiece-style in vocab.c and byte-level BPE
 * in vocab_bpe.c; it calls neither of them. */
#ifndef RP_VOCAB_TABLE_H
#define RP_VOCAB_TABLE_H

#include "reprise.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* tokenizer.ggml.model of the two tokenizers (these are vocabulary names; an
 * architecture of the same name is another thing) */
#define RP_VOCAB_MODEL_SPM "llama"
#define RP_VOCAB_MODEL_BPE "gpt2"

typedef enum rp_vocab_type {
    RP_VOCAB_NONE = 0,
    RP_VOCAB_SPM = 1, /* "llama": score-driven bigram merges, byte fallback */
    RP_VOCAB_BPE = 2, /* "gpt2": byte-level BPE with ranked merges */
} rp_vocab_type;

/* GGUF tokenizer.ggml.token_type values */
enum {
    RP_TOKEN_NORMAL = 1,
    RP_TOKEN_UNKNOWN = 2,
    RP_TOKEN_CONTROL = 3,
    RP_TOKEN_USER_DEFINED = 4,
    RP_TOKEN_UNUSED = 5,
    RP_TOKEN_BYTE = 6,
};

typedef struct rp_str_map {
    uint64_t *slots; /* (id + 1) or 0 */
    uint64_t mask;
} rp_str_map;

struct rp_bpe; /* vocab_bpe.c */

struct rp_vocab {
    rp_vocab_type type;
    char *model; /* tokenizer.ggml.model */
    char *pre;   /* tokenizer.ggml.pre ("default" if absent) */
    int32_t n_tokens;
    const char **text; /* [n_tokens] NUL-terminated */
    uint32_t *len;     /* [n_tokens] bytes */
    float *scores;     /* [n_tokens] (SPM) */
    int32_t *ttype;    /* [n_tokens] RP_TOKEN_* */
    rp_str_map map;    /* text -> id */
    int32_t bos, eos, eot, unk, pad, sep, nl;
    bool add_bos, add_eos, add_space_prefix;
    bool *eog;         /* [n_tokens] ends generation */
    int32_t *specials; /* ids of control / user-defined tokens, longest text first */
    int32_t n_specials;
    bool special_first[256]; /* some special token starts with this byte */
    int32_t byte_tok[256];   /* SPM <0xNN> tokens (-1 if absent) */
    struct rp_bpe *bpe;      /* BPE state (merges, pre-tokenizer), NULL for SPM */
    char *arena;             /* token texts */
};

/* Builds v->map from v->text / v->len (the first id wins for a duplicated
 * text, as llama.cpp does); false when out of memory. */
bool rp_vocab_map_build(rp_vocab *v);
/* id of a token text, -1 if none. */
int32_t rp_vocab_find(const rp_vocab *v, const char *s, size_t len);

/* A growable array of token ids (*n of *cap), what the tokenizers append to. */
typedef struct rp_tokvec {
    int32_t *v;
    size_t n, cap;
} rp_tokvec;
bool rp_tokvec_push(rp_tokvec *t, int32_t id);

#endif
