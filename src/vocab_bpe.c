/* Byte-level BPE: placeholder until the BPE tokenizer lands (issue 5). */
#include "util.h"
#include "vocab.h"

rp_status rp_bpe_init(rp_vocab *v, const rp_gguf *g) {
    (void)v;
    (void)g;
    return RP_OK;
}

void rp_bpe_free(struct rp_bpe *b) { (void)b; }

rp_status rp_bpe_tokenize(const rp_vocab *v, const char *text, size_t len, rp_tokvec *out) {
    (void)v;
    (void)text;
    (void)len;
    (void)out;
    return rp_fail(RP_ERR_UNSUPPORTED, "byte-level BPE tokenization is not implemented yet");
}

int rp_bpe_decode_token(const rp_vocab *v, int32_t id, char *buf, size_t size) {
    (void)v;
    (void)id;
    if (size) buf[0] = 0;
    return 0;
}
