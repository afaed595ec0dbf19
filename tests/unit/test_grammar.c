/* GBNF grammars: every grammar of llama.cpp's grammars/ parses (copies in
 * tests/fixtures/grammars, see its README), accepts and rejects the strings
 * it should; parse errors name line and column; and against real
 * vocabularies the trie mask equals a token-by-token check of every token. */
#include "test.h"

#include "text/gbnf.h"
#include "text/vocab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GFIX "tests/fixtures/grammars"

static rp_gbnf *parse_file(const char *name) {
    char path[256];
    snprintf(path, sizeof path, GFIX "/%s.gbnf", name);
    size_t len;
    char *src = test_read(path, &len);
    if (!src) {
        CHECK(false, "%s missing", path);
        return NULL;
    }
    rp_gbnf *g = NULL;
    rp_status s = gbnf_parse(src, len, NULL, &g);
    CHECK(s == RP_OK, "%s: %s", name, rp_last_error());
    free(src);
    return g;
}

/* Whether the whole of text is a complete sentence of g. */
static bool accepts(const rp_gbnf *g, const char *text) {
    size_t matched;
    bool complete;
    rp_status s = gbnf_match_text(g, text, strlen(text), &matched, &complete);
    return s == RP_OK && complete;
}

typedef struct gcase {
    const char *grammar;
    const char *yes[6];
    const char *no[6];
} gcase;

static const gcase FILE_CASES[] = {
    {"arithmetic", {"1+2=3\n", "x = y\n", "(a+b)*c=d\n1=1\n"}, {"1+=2\n", "=3\n", "", "1=2"}},
    {"c",
     {"int main(){return 0;}", "float f(int x){x = x*2;return x;}", "int g(){while(a<b){a = a+1;}}",
      ""},
     {"int main() {}", "int main(){return 0}", "main(){}"}},
    {"chess",
     {"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8#\n"},
     {"1. e4 e5\n", "1. e9 e5\n2. a3 a6\n", "2. e4 e5\n3. a3 a6\n"}},
    {"english", {"Hello, world!", "one two\nthree"}, {"Hello  world", "h\xc3\xa9llo", " lead", ""}},
    {"japanese",
     {"\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf \xe4\xb8\x96\xe7\x95\x8c",
      "\xe3\x82\xab\xe3\x82\xbf"},
     {"hello", "\xe3\x81\x93 ", ""}},
    {"json",
     {"{\"a\": [1, 2.5, \"x\", true, null, {\"b\": -3e15}]}", "{}", "{\"k\":\"\\u00e9\\n\"}",
      "{ }\n"},
     {"{\"a\": }", "[1]", "{\"a\": 01}", "{\"a\": \"\x01\"}", "{\"a\" 1}", "{\"a\": [1,]}"}},
    {"json_arr", {"[\n1,\n2]", "[\n{\"a\": \"b\"}]", "[\n]"}, {"[1]", "[\n1,\n2] ", "{}"}},
    {"list", {"- a\n- b\n", "- \xe2\x82\xac\n"}, {"- a", "* a\n", "", "- a\xe2\x80\xa8\n"}},
};

void test_grammar_fixtures(void) {
    for (size_t i = 0; i < sizeof FILE_CASES / sizeof *FILE_CASES; i++) {
        const gcase *c = &FILE_CASES[i];
        rp_gbnf *g = parse_file(c->grammar);
        if (!g) continue;
        for (int k = 0; k < 6 && c->yes[k]; k++)
            CHECK(accepts(g, c->yes[k]), "%s should accept \"%s\"", c->grammar, c->yes[k]);
        for (int k = 0; k < 6 && c->no[k]; k++)
            CHECK(!accepts(g, c->no[k]), "%s should reject \"%s\"", c->grammar, c->no[k]);
        gbnf_free(g);
    }
}

static const gcase INLINE_CASES[] = {
    {"root ::= \"a\"{2,4}", {"aa", "aaa", "aaaa"}, {"a", "aaaaa", ""}},
    {"root ::= [0-9]{3,}", {"123", "12345678"}, {"12", "12a"}},
    {"root ::= [0-9]{3}", {"123"}, {"12", "1234"}},
    {"root ::= (\"ab\" | \"c\")+ \".\"", {"ab.", "cabc."}, {".", "a.", "abab"}},
    {"root ::= \"x\"? \"y\"* \"z\"+", {"z", "xz", "yyyz", "xyzz"}, {"", "x", "xxz", "zy"}},
    {"root ::= [^a-c\\n]+", {"xyz", "\xc3\xa9\xe2\x82\xac"}, {"a", "xbx", "x\ny"}},
    {"root ::= \"\\x41\\u00e9\\U0001F600\\t\\\\\\\"\"", {"A\xc3\xa9\xf0\x9f\x98\x80\t\\\""}, {"A"}},
    {"root ::= . . .", {"abc", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"}, {"ab", "abcd"}},
    {"root ::= [\\-\\]a]+", {"-]a", "a"}, {"b", "["}},
    {"root ::= [a-]", {"a", "-"}, {"b"}},
    {"# comment\nroot ::= a b # trailing\na ::= \"a\"\nb ::= (\n  \"b\" |\n  \"c\"\n)\n",
     {"ab", "ac"},
     {"a", "abc"}},
    {"root ::= \"a\" |\n  \"b\"", {"a", "b"}, {"ab"}},
    {"root ::= x{0,3} \"!\"\nx ::= \"ab\" | \"c\"",
     {"!", "ab!", "abcab!"},
     {"ababab!x", "abcabc!"}},
    {"root ::= item ( \",\" item ){0,2}\nitem ::= [a-z]+",
     {"a", "a,b", "a,b,c"},
     {"a,b,c,d", ",a"}},
    {"root ::= \"\"", {""}, {"a"}},
    {"root ::= r\nr ::= \"(\" r \")\" | \"\"", {"", "()", "((()))"}, {"(()", "())"}},
};

void test_grammar_syntax(void) {
    for (size_t i = 0; i < sizeof INLINE_CASES / sizeof *INLINE_CASES; i++) {
        const gcase *c = &INLINE_CASES[i];
        rp_gbnf *g = NULL;
        rp_status s = gbnf_parse(c->grammar, strlen(c->grammar), NULL, &g);
        CHECK(s == RP_OK, "%s: %s", c->grammar, rp_last_error());
        if (s) continue;
        for (int k = 0; k < 6 && c->yes[k]; k++)
            CHECK(accepts(g, c->yes[k]), "\"%s\" should accept \"%s\"", c->grammar, c->yes[k]);
        for (int k = 0; k < 6 && c->no[k]; k++)
            CHECK(!accepts(g, c->no[k]), "\"%s\" should reject \"%s\"", c->grammar, c->no[k]);
        gbnf_free(g);
    }
}

void test_grammar_errors(void) {
    static const struct {
        const char *src;
        const char *msg;
    } bad[] = {
        {"root ::= foo", "line 1, column 10: undefined rule 'foo'"},
        {"root ::= \"a\"\nexpr ::= expr \"+\" \"1\"", "rule 'expr' is left-recursive"},
        {"root ::= x root\nx ::= \"a\"?", "rule 'root' is left-recursive"},
        {"root = \"a\"", "line 1, column 6: expected '::=' after the rule name 'root'"},
        {"root ::= \"abc", "line 1, column 10: unterminated string literal"},
        {"root ::= \"\\q\"", "line 1, column 11: unknown escape '\\q'"},
        {"root ::= [a-", "unterminated character set"},
        {"root ::= [z-a]", "character range ends before it starts"},
        {"root ::= \"a\"{3,2}", "repetition maximum below its minimum"},
        {"root ::= \"a\"{2001}", "repetition minimum above 2000"},
        {"root ::= \"a\"\n  \"b\"", "line 2, column 3: expected a rule name"},
        {"root ::= (\"a\"", "expected ')'"},
        {"root ::= \"a\" )", "unmatched ')'"},
        {"root ::= * \"a\"", "without something before it to repeat"},
        {"root ::= \"\\x4\"", "expected 2 hex digits after \\x"},
        {"other ::= \"a\"", "no rule named 'root'"},

        {"root ::= \"a\"{1000} \"b\"{0,1000}{0,100}", "repetition nested too deeply"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rp_gbnf *g = NULL;
        rp_status s = gbnf_parse(bad[i].src, strlen(bad[i].src), NULL, &g);
        CHECK(s != RP_OK && strstr(rp_last_error(), bad[i].msg),
              "%s: status %d \"%s\" (want \"%s\")", bad[i].src, s, rp_last_error(), bad[i].msg);
        CHECK(!g, "grammar returned on error");
        gbnf_free(g);
    }
    char deep[700] = "root ::= ";
    for (int i = 0; i < 300; i++) strcat(deep, "(");
    strcat(deep, "\"a\"");
    for (int i = 0; i < 300; i++) strcat(deep, ")");
    CHECK(rp_grammar_check(deep, NULL) == RP_ERR_FORMAT &&
              strstr(rp_last_error(), "nested more than 200 deep"),
          "%s", rp_last_error());
    CHECK(rp_grammar_check("root ::= [a-z]+ \"!\"", NULL) == RP_OK, "%s", rp_last_error());
    CHECK(rp_grammar_check("start ::= \"x\"", "start") == RP_OK, "%s", rp_last_error());
}

/* ---- against a vocabulary ----------------------------------------------------------- */

typedef struct vfix {
    rp_model *m;
    rp_grammar_vocab *gv;
    const rp_vocab *v;
} vfix;

static bool open_vocab(const char *rel, vfix *f) {
    memset(f, 0, sizeof *f);
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = true;
    if (rp_model_load(test_shared(rel), &mp, &f->m) != RP_OK) {
        CHECK(false, "%s: %s", rel, rp_last_error());
        return false;
    }
    f->v = rp_model_vocab(f->m);
    if (rp_grammar_vocab_new(f->v, &f->gv) != RP_OK) {
        CHECK(false, "vocab trie: %s", rp_last_error());
        return false;
    }
    return true;
}

static void close_vocab(vfix *f) {
    rp_grammar_vocab_free(f->gv);
    rp_model_free(f->m);
}

/* The trie mask against rp_grammar_allows for every token; returns the allowed count. */
static int compare_mask(rp_grammar *g, const rp_vocab *v, const char *where) {
    int32_t n = rp_vocab_n_tokens(v);
    float *logits = calloc((size_t)n, sizeof *logits);
    if (!logits) return 0;
    rp_status s = rp_grammar_apply(g, logits);
    CHECK(s == RP_OK, "%s: %s", where, rp_last_error());
    int allowed = 0, bad = 0;
    for (int32_t t = 0; t < n; t++) {
        bool a = logits[t] == 0, b = rp_grammar_allows(g, t);
        allowed += a;
        if (a != b && bad++ < 5)
            CHECK(false, "%s: token %d \"%s\": mask %d, allows %d", where, t, rp_vocab_text(v, t),
                  a, b);
    }
    free(logits);
    return allowed;
}

static void accept_text(rp_grammar *g, const rp_vocab *v, const char *text, bool check_each,
                        int *n_steps) {
    int32_t *toks;
    size_t n;
    REQUIRE(rp_tokenize(v, text, strlen(text), false, false, &toks, &n) == RP_OK, "tokenize");
    for (size_t i = 0; i < n; i++) {
        char where[96];
        snprintf(where, sizeof where, "before token %zu of \"%.30s\"", i, text);
        if (check_each) {
            int allowed = compare_mask(g, v, where);
            CHECK(allowed > 0, "%s: nothing allowed", where);
        }
        CHECK(rp_grammar_allows(g, toks[i]), "%s: token %d not allowed", where, toks[i]);
        rp_status s = rp_grammar_accept(g, toks[i]);
        CHECK(s == RP_OK, "%s: %s", where, rp_last_error());
        (*n_steps)++;
    }
    free(toks);
}

void test_grammar_vocab_mask(void) {
    static const char *const vocabs[] = {"vocab/qwen3/ggml-vocab-qwen3.gguf",
                                         "vocab/llama.cpp/ggml-vocab-llama-spm.gguf"};
    size_t len;
    char *json = test_read(GFIX "/json.gbnf", &len);
    char *jp = test_read(GFIX "/japanese.gbnf", &len);
    REQUIRE(json && jp, "grammar fixtures");
    for (size_t k = 0; k < 2; k++) {
        vfix f;
        if (!open_vocab(vocabs[k], &f)) {
            close_vocab(&f);
            continue;
        }
        int32_t eos = rp_vocab_eos(f.v);
        /* SentencePiece's first piece starts with a space: let the text start with one */
        char *jg = malloc(strlen(json) + 64), *jpg = malloc(strlen(jp) + 64);
        REQUIRE(jg && jpg, "alloc");
        sprintf(jg, "start ::= \" \"? root\n%s", json);
        sprintf(jpg, "start ::= \" \"? root\n%s", jp);
        rp_grammar *g;
        REQUIRE(rp_grammar_new(f.gv, jg, "start", &g) == RP_OK, "%s", rp_last_error());
        int steps = 0;
        CHECK(!rp_grammar_can_end(g) && !rp_grammar_allows(g, eos), "%s: EOS allowed at the start",
              vocabs[k]);
        accept_text(g, f.v,
                    "{\"name\": \"Ana \\\"A\\\" \xc3\xa9\xe6\x97\xa5\", \"age\": 42, \"tags\": "
                    "[true, null, -1.5e3]}",
                    true, &steps);
        CHECK(rp_grammar_can_end(g) && rp_grammar_allows(g, eos), "%s: EOS not allowed at the end",
              vocabs[k]);
        compare_mask(g, f.v, "complete object");
        /* save / restore around a rejected continuation */
        rp_grammar_state st = rp_grammar_save(g);
        CHECK(rp_grammar_accept(g, eos) == RP_OK, "eos: %s", rp_last_error());
        CHECK(!rp_grammar_allows(g, eos) && rp_grammar_accept(g, eos) != RP_OK,
              "accepted after the end");
        rp_grammar_restore(g, st);
        CHECK(rp_grammar_allows(g, eos), "restore");
        rp_grammar_reset(g);
        CHECK(!rp_grammar_can_end(g), "reset");
        /* a token the grammar refuses */
        int32_t *toks;
        size_t n;
        REQUIRE(rp_tokenize(f.v, "[", 1, false, false, &toks, &n) == RP_OK && n == 1, "tokenize [");
        CHECK(!rp_grammar_allows(g, toks[0]) && rp_grammar_accept(g, toks[0]) == RP_ERR_INVALID_ARG,
              "[ at the start");
        free(toks);
        rp_grammar_free(g);
        /* multi-byte characters split across tokens */
        REQUIRE(rp_grammar_new(f.gv, jpg, "start", &g) == RP_OK, "%s", rp_last_error());
        accept_text(g, f.v,
                    "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf "
                    "\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82",
                    true, &steps);
        CHECK(rp_grammar_can_end(g), "japanese complete");
        rp_grammar_free(g);
        free(jg);
        free(jpg);
        close_vocab(&f);
    }
    free(json);
    free(jp);
}

/* Token elements: <[id]>, <text>, !<...>. */
void test_grammar_tokens(void) {
    vfix f;
    if (!open_vocab("vocab/qwen3/ggml-vocab-qwen3.gguf", &f)) {
        close_vocab(&f);
        return;
    }
    int32_t think = rp_vocab_find(f.v, "<think>", 7), end_think = rp_vocab_find(f.v, "</think>", 8);
    REQUIRE(think >= 0 && end_think >= 0, "qwen3 has <think> tokens");
    rp_grammar *g;
    REQUIRE(rp_grammar_new(f.gv,
                           "root ::= <think> thinking </think> \"ok\"\nthinking ::= !</think>*",
                           NULL, &g) == RP_OK,
            "%s", rp_last_error());
    CHECK(rp_grammar_allows(g, think) && !rp_grammar_allows(g, end_think), "start");
    CHECK(compare_mask(g, f.v, "start") == 1, "only <think> at the start");
    CHECK(rp_grammar_accept(g, think) == RP_OK, "%s", rp_last_error());
    int allowed = compare_mask(g, f.v, "inside");
    CHECK(allowed > 100000, "inside: %d allowed", allowed);
    int32_t *toks;
    size_t n;
    REQUIRE(rp_tokenize(f.v, "hmm ok", 6, false, false, &toks, &n) == RP_OK, "tokenize");
    for (size_t i = 0; i < n; i++)
        CHECK(rp_grammar_accept(g, toks[i]) == RP_OK, "%s", rp_last_error());
    free(toks);
    CHECK(rp_grammar_accept(g, end_think) == RP_OK, "%s", rp_last_error());
    CHECK(!rp_grammar_can_end(g), "needs ok");
    rp_grammar_free(g);
    char src[64];
    snprintf(src, sizeof src, "root ::= <[%d]> | \"x\"", think);
    REQUIRE(rp_grammar_new(f.gv, src, NULL, &g) == RP_OK, "%s", rp_last_error());
    CHECK(rp_grammar_allows(g, think), "<[id]>");
    rp_grammar_free(g);
    CHECK(rp_grammar_new(f.gv, "root ::= <not one token at all>", NULL, &g) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "is not one token"),
          "%s", rp_last_error());
    CHECK(rp_grammar_new(f.gv, "root ::= <[999999999]>", NULL, &g) == RP_ERR_INVALID_ARG &&
              strstr(rp_last_error(), "outside the vocabulary"),
          "%s", rp_last_error());
    close_vocab(&f);
}
