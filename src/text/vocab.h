/* Vocabulary (internal view): tokens, scores, attributes, special ids, and the
 * tokenizers that run over them. SentencePiece-style (tokenizer.ggml.model =
 * "llama") lives in vocab.c; byte-level BPE ("gpt2") in vocab_bpe.c. */
#ifndef RP_VOCAB_H
#define RP_VOCAB_H

#include "format/gguf.h"
#include "reprise.h"
#include "text/vocab_table.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

rp_status rp_vocab_load(const rp_gguf *g, rp_vocab **out);
void rp_vocab_free(rp_vocab *v);

/* Tokenize one fragment of raw text (no special tokens inside). For SPM,
 * prefix_space says whether a leading space is added (first fragment or after
 * a special token). Appends to *out. */
rp_status rp_spm_tokenize(const rp_vocab *v, const char *text, size_t len, bool prefix_space,
                          rp_tokvec *out);

#endif
