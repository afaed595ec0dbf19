/* Hardening (issue 22): inputs that used to be accepted silently or to reach
 * undefined behaviour, each now refused or reported. */
#include "base/util.h"
#include "format/gguf.h"
#include "reprise.h"
#include "test.h"

#include <string.h>
#include <unistd.h>

static char g_warn[1024];
static int g_n_warn;
static void catch_log(rp_log_level level, const char *msg, void *user) {
    (void)user;
    if (level != RP_LOG_WARN) return;
    g_n_warn++;
    snprintf(g_warn, sizeof g_warn, "%s", msg);
}

/* Text the vocabulary cannot encode (no token, not even its single bytes):
 * the tokens llama.cpp gives (the bytes dropped), a warning that says so,
 * and no memcpy from NULL in the word cache (UBSan) for a word with no token. */
void test_hardening_bpe_unencodable_text(void) {
    static const char *const toks[] = {"a", "b", "ab", "Ġ"};
    static const char *const merges[] = {"a b"};
    const char *path = test_tmp("hard-bpe.gguf");
    rp_gguf_writer *w = rp_gguf_writer_new();
    REQUIRE(w, "writer");
    rp_status s = rp_gguf_w_set_str(w, "tokenizer.ggml.model", "gpt2");
    s = s ? s : rp_gguf_w_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    s = s ? s : rp_gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    s = s ? s : rp_gguf_w_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    s = s ? s : rp_gguf_w_write(w, path, NULL, NULL);
    rp_gguf_writer_free(w);
    REQUIRE(!s, "%s", rp_last_error());
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    rp_model *m;
    REQUIRE(rp_model_load(path, &mp, &m) == RP_OK, "%s", rp_last_error());
    rp_log_set(catch_log, NULL);
    g_n_warn = 0;
    int32_t *t = NULL;
    size_t n = 0;
    /* "xy" first: a word of two bytes with no token at all, into the cache */
    s = rp_tokenize(rp_model_vocab(m), "xy ab xy", 8, false, false, &t, &n);
    rp_log_set(NULL, NULL);
    REQUIRE(s == RP_OK, "%s", rp_last_error());
    /* xy -> nothing, " ab" -> Ġ ab, " xy" -> Ġ */
    CHECK(n == 3 && t[0] == 3 && t[1] == 2 && t[2] == 3, "tokens (n %zu)", n);
    CHECK(g_n_warn == 1 && strstr(g_warn, "4 byte(s)"), "warning (%d): %s", g_n_warn, g_warn);
    free(t);
    rp_model_free(m);
    unlink(path);
}
