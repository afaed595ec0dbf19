/* Byte-level BPE: llama.cpp's tokenizer vectors on every gpt2 vocabulary in
 * shared/vocab, qwen2 on the Qwen3 vocabulary, llama-bpe on a vocabulary built
 * here from Llama 3's tokenizer.json, plus the mechanisms on tiny vocabularies
 * whose right answer is known by construction. */
#include "test.h"

#include "format/gguf.h"
#include "base/util.h"
#include "reprise.h"
#include "text/vocab.h"

#include <dirent.h>
#include <jansson.h>
#include <string.h>

int run_vocab_vectors(const char *gguf, const char *vectors, int *n_total); /* test_vocab.c */

static rp_model *load_vocab(const char *path) {
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    rp_model *m = NULL;
    if (rp_model_load(path, &mp, &m)) {
        fprintf(stderr, "  %s: %s\n", path, rp_last_error());
        return NULL;
    }
    return m;
}

static int vectors(const char *gguf, const char *name) {
    char v[512];
    snprintf(v, sizeof v, "vocab/llama.cpp/ggml-vocab-%s.gguf", name);
    int total = 0;
    int bad = run_vocab_vectors(gguf, test_shared(v), &total);
    CHECK(bad == 0 && total == 46, "%s vectors on %s: %d of %d differ", name, gguf, bad, total);
    return bad;
}

/* Every vocabulary GGUF of llama.cpp's set that is here, whatever it is. A
 * vocabulary reprise does not tokenize (bert-bge: WordPiece) must be refused
 * with a message naming the tokenizer, never skipped in silence. */
void test_bpe_vectors_llamacpp(void) {
    const char *dir = test_shared("vocab/llama.cpp");
    char dirbuf[512];
    snprintf(dirbuf, sizeof dirbuf, "%s", dir);
    DIR *d = opendir(dirbuf);
    REQUIRE(d, "cannot open %s", dirbuf);
    struct dirent *e;
    int n_bpe = 0, n_refused = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 16 || strcmp(e->d_name + n - 5, ".gguf") || strncmp(e->d_name, "ggml-vocab-", 11))
            continue;
        char path[1024], name[256];
        snprintf(path, sizeof path, "%s/%s", dirbuf, e->d_name);
        snprintf(name, sizeof name, "%.*s", (int)(n - 16), e->d_name + 11);
        rp_gguf *g;
        REQUIRE(rp_gguf_open(path, &g) == RP_OK, "%s", rp_last_error());
        const char *model = NULL;
        rp_gguf_get_str(g, "tokenizer.ggml.model", &model, NULL);
        bool bpe = model && !strcmp(model, "gpt2");
        bool wpm = model && !strcmp(model, "bert");
        rp_gguf_close(g);
        if (bpe) {
            vectors(path, name);
            n_bpe++;
        } else if (wpm) {
            rp_model_params mp = rp_model_default_params();
            mp.vocab_only = true;
            rp_model *m = NULL;
            rp_status s = rp_model_load(path, &mp, &m);
            CHECK(s == RP_ERR_UNSUPPORTED && strstr(rp_last_error(), "'bert'"),
                  "%s: WordPiece should be refused by name, got status %d '%s'", name, s,
                  rp_last_error());
            rp_model_free(m);
            n_refused++;
        }
    }
    closedir(d);
    /* gpt-2 deepseek-coder deepseek-llm falcon mpt refact starcoder; bert-bge */
    CHECK(n_bpe == 7 && n_refused == 1, "found %d gpt2 and %d bert vocabularies, expected 7 and 1",
          n_bpe, n_refused);
}

void test_bpe_vectors_qwen2(void) {
    vectors(test_shared("vocab/qwen3/ggml-vocab-qwen3.gguf"), "qwen2");
    /* deepseek-r1-qwen's vectors are the same file's */
    vectors(test_shared("vocab/qwen3/ggml-vocab-qwen3.gguf"), "deepseek-r1-qwen");
}

/* ---- a llama-bpe vocabulary from Llama 3's tokenizer.json ---------------- */

static char *read_xz(const char *path, size_t *len) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "xz -dc '%s'", path);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 20, n = 0, k;
    char *buf = malloc(cap);
    while (buf && (k = fread(buf + n, 1, cap - n, p)) > 0) {
        n += k;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    if (pclose(p) != 0 || !buf) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Writes a vocab-only GGUF from a HF tokenizer.json: tokens by id, added
 * special tokens as control tokens, the merges in order. */
static bool build_llama3_vocab(const char *out) {
    size_t len;
    char *text = read_xz(test_shared("vocab/llama3/tokenizer.json.xz"), &len);
    if (!text) return false;
    json_error_t err;
    json_t *root = json_loadb(text, len, 0, &err);
    free(text);
    if (!root) {
        fprintf(stderr, "  tokenizer.json: %s at line %d\n", err.text, err.line);
        return false;
    }
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    json_t *added = json_object_get(root, "added_tokens");
    bool ok = json_is_object(vocab) && json_is_array(merges) && json_is_array(added);
    size_t n_tok = ok ? json_object_size(vocab) + json_array_size(added) : 0;
    const char **toks = calloc(n_tok ? n_tok : 1, sizeof *toks);
    int32_t *types = calloc(n_tok ? n_tok : 1, sizeof *types);
    size_t n_merges = ok ? json_array_size(merges) : 0;
    const char **mstr = calloc(n_merges ? n_merges : 1, sizeof *mstr);
    const char *key;
    json_t *val;
    if (ok) json_object_foreach(vocab, key, val) {
            json_int_t id = json_integer_value(val);
            if (id < 0 || (size_t)id >= n_tok)
                ok = false;
            else {
                toks[id] = key;
                types[id] = 1;
            }
        }
    for (size_t i = 0; ok && i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        json_int_t id = json_integer_value(json_object_get(a, "id"));
        if (id < 0 || (size_t)id >= n_tok)
            ok = false;
        else {
            toks[id] = json_string_value(json_object_get(a, "content"));
            types[id] = json_is_true(json_object_get(a, "special")) ? 3 : 4;
        }
    }
    for (size_t i = 0; ok && i < n_tok; i++) ok = toks[i] != NULL;
    for (size_t i = 0; ok && i < n_merges; i++)
        ok = (mstr[i] = json_string_value(json_array_get(merges, i))) != NULL;
    if (ok) {
        rp_gguf_writer *w = rp_gguf_writer_new();
        rp_status s = rp_gguf_w_set_str(w, "general.architecture", "llama");
        s = s ? s : rp_gguf_w_set_str(w, "tokenizer.ggml.model", "gpt2");
        s = s ? s : rp_gguf_w_set_str(w, "tokenizer.ggml.pre", "llama-bpe");
        s = s ? s : rp_gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", toks, n_tok);
        s = s ? s : rp_gguf_w_set_arr(w, "tokenizer.ggml.token_type", RP_GGUF_INT32, types, n_tok);
        s = s ? s : rp_gguf_w_set_arr_str(w, "tokenizer.ggml.merges", mstr, n_merges);
        s = s ? s : rp_gguf_w_set_u32(w, "tokenizer.ggml.bos_token_id", 128000);
        s = s ? s : rp_gguf_w_set_u32(w, "tokenizer.ggml.eos_token_id", 128001);
        s = s ? s : rp_gguf_w_write(w, out, NULL, NULL);
        rp_gguf_writer_free(w);
        ok = s == RP_OK;
        if (!ok) fprintf(stderr, "  writing %s: %s\n", out, rp_last_error());
    }
    free(toks);
    free(types);
    free(mstr);
    json_decref(root);
    return ok;
}

void test_bpe_vectors_llama_bpe(void) {
    const char *path = test_tmp("llama3-vocab.gguf");
    REQUIRE(build_llama3_vocab(path),
            "could not build a vocabulary from vocab/llama3/tokenizer.json.xz");
    vectors(path, "llama-bpe");
    rp_model *m = load_vocab(path);
    REQUIRE(m, "load");
    const rp_vocab *v = rp_model_vocab(m);
    /* llama-bpe adds BOS by default; ignore_merges makes "Cửa Việt" one merge-free lookup per word
     */
    int32_t *t;
    size_t n;
    REQUIRE(rp_tokenize(v, "Hello", 5, true, false, &t, &n) == RP_OK, "%s", rp_last_error());
    CHECK(n == 2 && t[0] == 128000 && t[1] == 9906, "BOS + Hello: n %zu first %d", n,
          n ? t[0] : -1);
    free(t);
    rp_model_free(m);
}

/* ---- special tokens, round trips ----------------------------------------- */

static size_t tok(const rp_vocab *v, const char *s, bool special, int32_t *out, size_t max) {
    int32_t *t;
    size_t n;
    if (rp_tokenize(v, s, strlen(s), false, special, &t, &n) != RP_OK) {
        fprintf(stderr, "  tokenize '%s': %s\n", s, rp_last_error());
        return 0;
    }
    for (size_t i = 0; i < n && i < max; i++) out[i] = t[i];
    free(t);
    return n;
}

void test_bpe_special_tokens(void) {
    rp_model *m = load_vocab(test_shared("vocab/qwen3/ggml-vocab-qwen3.gguf"));
    REQUIRE(m, "load");
    const rp_vocab *v = rp_model_vocab(m);
    const char *s = "<|im_start|>user\nHi<|im_end|>\n<think>";
    int32_t t[64];
    size_t n = tok(v, s, true, t, 64);
    /* <|im_start|> user \n Hi <|im_end|> \n <think> */
    int32_t want[] = {151644, 872, 198, 13048, 151645, 198, 151667};
    CHECK(n == 7 && !memcmp(t, want, sizeof want), "parsed specials: n %zu", n);
    /* as plain text the control tokens are text; <think> is user-defined and stays one token */
    n = tok(v, s, false, t, 64);
    bool has_ctl = false;
    for (size_t i = 0; i < n; i++) has_ctl |= t[i] == 151644 || t[i] == 151645;
    CHECK(n > 7 && !has_ctl && t[n - 1] == 151667, "plain text: n %zu", n);
    char buf[256];
    int32_t *all;
    size_t na;
    REQUIRE(rp_tokenize(v, s, strlen(s), false, false, &all, &na) == RP_OK, "tokenize");
    rp_detokenize(v, all, na, true, buf, sizeof buf);
    CHECK(!strcmp(buf, s), "plain-text specials round trip: '%s'", buf);
    free(all);
    CHECK(rp_vocab_is_eog(v, 151645) && rp_vocab_is_eog(v, 151643),
          "<|im_end|> and <|endoftext|> end generation");
    rp_model_free(m);
}

void test_bpe_roundtrip(void) {
    rp_model *m = load_vocab(test_shared("vocab/qwen3/ggml-vocab-qwen3.gguf"));
    REQUIRE(m, "load");
    const rp_vocab *v = rp_model_vocab(m);
    static const char *const texts[] = {
        "Hello world",
        "  leading and trailing   \n\n\t ",
        "Cửa Việt — 我想在apple工作1314151天～ нещо на Български",
        "🚀 (normal) 😶‍🌫️ ✅ 🦙🦙",
        "invalid \xff\xfe bytes \xc3 and a lone continuation \x80 end",
        "\xe4\xbd",
        "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it",
    };
    for (size_t i = 0; i < RP_ARRAY_LEN(texts); i++) {
        int32_t *t;
        size_t n;
        REQUIRE(rp_tokenize(v, texts[i], strlen(texts[i]), false, false, &t, &n) == RP_OK, "%s",
                rp_last_error());
        char buf[1024];
        int k = rp_detokenize(v, t, n, false, buf, sizeof buf);
        CHECK(k == (int)strlen(texts[i]) && !memcmp(buf, texts[i], (size_t)k),
              "round trip %zu: '%s'", i, buf);
        /* piece by piece gives the same bytes */
        char cat[1024];
        size_t c = 0;
        for (size_t j = 0; j < n; j++) {
            char piece[256];
            int pk = rp_token_to_piece(v, t[j], false, piece, sizeof piece);
            if (c + (size_t)pk < sizeof cat) memcpy(cat + c, piece, (size_t)pk);
            c += (size_t)pk;
        }
        CHECK(c == strlen(texts[i]) && !memcmp(cat, texts[i], c), "pieces %zu", i);
        free(t);
    }
    /* a long text: every byte comes back */
    size_t len;
    char *wp = test_read(test_shared("text/war-and-peace.txt"), &len);
    REQUIRE(wp && len > 200000, "war-and-peace.txt");
    len = 200000;
    int32_t *t;
    size_t n;
    REQUIRE(rp_tokenize(v, wp, len, false, false, &t, &n) == RP_OK, "%s", rp_last_error());
    char *back = malloc(len + 1);
    int k = rp_detokenize(v, t, n, false, back, len + 1);
    CHECK(k == (int)len && !memcmp(back, wp, len),
          "war and peace prefix round trip (%d of %zu bytes)", k, len);
    CHECK(n > len / 6 && n < len / 3, "%zu tokens for %zu bytes of English", n, len);
    free(back);
    free(t);
    free(wp);
    rp_model_free(m);
}

/* ---- mechanisms on tiny vocabularies ------------------------------------- */

/* A vocab-only GGUF with the given tokens (all normal) and merges. */
static rp_status tiny_vocab(const char *path, const char *pre, const char *const *toks, size_t n,
                            const char *const *merges, size_t n_merges, rp_model **m) {
    rp_gguf_writer *w = rp_gguf_writer_new();
    rp_status s = rp_gguf_w_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) s = s ? s : rp_gguf_w_set_str(w, "tokenizer.ggml.pre", pre);
    s = s ? s : rp_gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", toks, n);
    if (merges) s = s ? s : rp_gguf_w_set_arr_str(w, "tokenizer.ggml.merges", merges, n_merges);
    s = s ? s : rp_gguf_w_write(w, path, NULL, NULL);
    rp_gguf_writer_free(w);
    if (s) return s;
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    return rp_model_load(path, &mp, m);
}

void test_bpe_ignore_merges(void) {
    /* "abc" is a token but no merge sequence builds it: ("b","c") then nothing */
    static const char *const toks[] = {"a", "b", "c", "bc", "abc", "Ġ"};
    static const char *const merges[] = {"b c"};
    for (int llama3 = 0; llama3 < 2; llama3++) {
        rp_model *m;
        REQUIRE(tiny_vocab(test_tmp("im.gguf"), llama3 ? "llama-bpe" : "gpt-2", toks, 6, merges, 1,
                           &m) == RP_OK,
                "%s", rp_last_error());
        int32_t t[8];
        size_t n = tok(rp_model_vocab(m), "abc", false, t, 8);
        if (llama3)
            CHECK(n == 1 && t[0] == 4, "ignore_merges: whole pre-token first (n %zu)", n);
        else
            CHECK(n == 2 && t[0] == 0 && t[1] == 3, "without ignore_merges: a + bc (n %zu)", n);
        rp_model_free(m);
    }
}

void test_bpe_merge_order(void) {
    /* ranks decide, ties go leftmost: "aaa" with (a a) -> aa a; with (a aa)
     * ranked first it still needs "aa" to exist first, so aa a. "abab" with
     * (b a) ranked before (a b): a ba b -> a + (ba) + b, then nothing. */
    static const char *const toks[] = {"a", "b", "aa", "ab", "ba", "aaa", "abab"};
    static const char *const merges[] = {"a aa", "b a", "a a", "a b", "ab ab"};
    rp_model *m;
    REQUIRE(tiny_vocab(test_tmp("mo.gguf"), "gpt-2", toks, 7, merges, 5, &m) == RP_OK, "%s",
            rp_last_error());
    int32_t t[8];
    size_t n = tok(rp_model_vocab(m), "aaa", false, t, 8);
    /* a a a: only (a a) applies at first (rank 2), leftmost: [aa][a]; then (aa a)? not a merge;
     * (a aa) needs a left of aa: none. */
    CHECK(n == 2 && t[0] == 2 && t[1] == 0, "aaa -> aa a (n %zu: %d %d)", n, t[0],
          n > 1 ? t[1] : -1);
    n = tok(rp_model_vocab(m), "abab", false, t, 8);
    CHECK(n == 3 && t[0] == 0 && t[1] == 4 && t[2] == 1, "abab -> a ba b (n %zu)", n);
    /* a long single pre-token finishes (heap, not a rescan) and merges pairwise from the left */
    size_t big = 200001;
    char *s = malloc(big + 1);
    memset(s, 'a', big);
    s[big] = 0;
    int32_t *all;
    size_t na;
    REQUIRE(rp_tokenize(rp_model_vocab(m), s, big, false, false, &all, &na) == RP_OK, "%s",
            rp_last_error());
    CHECK(na == big / 2 + 1 && all[0] == 2 && all[na - 1] == 0, "200001 x 'a' -> %zu tokens", na);
    free(all);
    free(s);
    rp_model_free(m);
}

void test_bpe_errors(void) {
    static const char *const toks[] = {"a", "b", "ab"};
    static const char *const bad[] = {"ab"};
    static const char *const good[] = {"a b"};
    rp_model *m = NULL;
    CHECK(tiny_vocab(test_tmp("e1.gguf"), "gpt-2", toks, 3, NULL, 0, &m) == RP_ERR_FORMAT &&
              strstr(rp_last_error(), "tokenizer.ggml.merges is missing"),
          "missing merges: %s", rp_last_error());
    CHECK(tiny_vocab(test_tmp("e2.gguf"), "gpt-2", toks, 3, bad, 1, &m) == RP_ERR_FORMAT &&
              strstr(rp_last_error(), "tokenizer.ggml.merges[0]"),
          "malformed merge: %s", rp_last_error());
    CHECK(tiny_vocab(test_tmp("e3.gguf"), "no-such-pre", toks, 3, good, 1, &m) ==
                  RP_ERR_UNSUPPORTED &&
              strstr(rp_last_error(), "'no-such-pre'"),
          "unknown pre-tokenizer: %s", rp_last_error());
    /* absent pre: llama.cpp's "default" */
    CHECK(tiny_vocab(test_tmp("e4.gguf"), NULL, toks, 3, good, 1, &m) == RP_OK, "no pre: %s",
          rp_last_error());
    int32_t t[4];
    if (m)
        CHECK(tok(rp_model_vocab(m), "ab", false, t, 4) == 1 && t[0] == 2, "default pre tokenizes");
    rp_model_free(m);
}
