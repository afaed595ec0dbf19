/* Vocabulary (internal view): tokens, scores, attributes, special ids, and the
 * tokenizers that run over them. SentencePiece-style (tokenizer.ggml.model =
 * "llama") lives in vocab.c; byte-level BPE ("gpt2") in vocab_bpe.c. */
#ifndef RP_VOCAB_H
#define RP_VOCAB_H

#include "format/gguf.h"
#include "reprise.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

rp_status rp_vocab_load(const rp_gguf *g, rp_vocab **out);
void rp_vocab_free(rp_vocab *v);

/* id of a token text, -1 if none. */
int32_t rp_vocab_find(const rp_vocab *v, const char *s, size_t len);

/* Tokenize one fragment of raw text (no special tokens inside). For SPM,
 * prefix_space says whether a leading space is added (first fragment or after
 * a special token). Appends to *out (growable array of *n / *cap). */
typedef struct rp_tokvec {
    int32_t *v;
    size_t n, cap;
} rp_tokvec;
bool rp_tokvec_push(rp_tokvec *t, int32_t id);
rp_status rp_spm_tokenize(const rp_vocab *v, const char *text, size_t len, bool prefix_space,
                          rp_tokvec *out);

/* Byte-level BPE (vocab_bpe.c). */
rp_status rp_bpe_init(rp_vocab *v, const rp_gguf *g);
void rp_bpe_free(struct rp_bpe *b);
rp_status rp_bpe_tokenize(const rp_vocab *v, const char *text, size_t len, rp_tokvec *out);
/* Text of a BPE token decoded from its byte-level form into buf (bytes). */
int rp_bpe_decode_token(const rp_vocab *v, int32_t id, char *buf, size_t size);

#endif
