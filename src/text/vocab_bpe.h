/* Byte-level BPE (tokenizer.ggml.model = "gpt2"): merges, pre-tokenizers,
 * tokenize and decode over the vocabulary's table. */
#ifndef RP_VOCAB_BPE_H
#define RP_VOCAB_BPE_H

#include "format/gguf.h"
#include "text/vocab_table.h"

rp_status rp_bpe_init(rp_vocab *v, const rp_gguf *g);
void rp_bpe_free(struct rp_bpe *b);
rp_status rp_bpe_tokenize(const rp_vocab *v, const char *text, size_t len, rp_tokvec *out);
/* Text of a BPE token decoded from its byte-level form into buf (bytes). */
int rp_bpe_decode_token(const rp_vocab *v, int32_t id, char *buf, size_t size);

#endif
