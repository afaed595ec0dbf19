/* Byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * Text is split into pre-tokens by the regexes of the vocabulary's
 * pre-tokenizer (tokenizer.ggml.pre), run with PCRE2 and its Unicode
 * properties. A pre-type with several regexes applies them in sequence: each
 * splits every piece the previous one produced into its matches and the gaps
 * between them (a regex sees only its piece, so `$` and lookaheads stop at the
 * piece's end). Each pre-token's bytes are mapped to GPT-2's printable
 * byte alphabet and merged with the ranked merges: a min-heap of adjacent
 * pairs keyed by (rank, position) replaces the quadratic rescan. Symbols are
 * token ids, so a pair is one 64-bit hash lookup; texts that merges create
 * but the vocabulary lacks get ids past n_tokens and come out as single-byte
 * tokens at the end, as llama.cpp does.
 *
 * Invalid UTF-8 never reaches a regex as a character (PCRE2_MATCH_INVALID_UTF):
 * such bytes fall between matches and are tokenized as their own byte-level
 * pre-token, so decoding gives back the exact input bytes. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/vocab_bpe.h"
#include "base/util.h"

#include <inttypes.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#define BPE_MAX_RE 8

/* ---- pre-tokenizers ------------------------------------------------------ */

/* The regexes as the models' tokenizer.json files state them (with the
 * case-insensitive contraction group spelled out, so that no Unicode case
 * folding such as U+017F -> 's' applies). */
#define RE_GPT2     "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACT "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3                                                                                  \
    RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                                     \
                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                   \
    RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                                          \
                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN35                                                                                  \
    RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "                                  \
                "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"                               \
                "\\s+(?!\\S)|\\s+"
#define RE_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_TEKKEN                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER             \
    "+" RE_LOWER "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O                                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+" RE_CONTRACT                                 \
    "?|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*" RE_CONTRACT                               \
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

typedef struct pre_def {
    const char *names; /* tokenizer.ggml.pre values, '|' separated */
    const char *re[BPE_MAX_RE];
    bool ignore_merges; /* a pre-token that is a whole token is emitted before merging (Llama 3) */
    bool add_bos;       /* default of add_bos when the file does not say */
} pre_def;

static const pre_def g_pre[] = {
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {"gpt-2|phi-2|jina-es|jina-de|jina-v2-es|jina-v2-de|jina-v1-en|jina-v2-code|roberta-bpe|mpt|"
     "olmo|jais|"
     "exaone4|trillion|gigachat|a.x-4.0|mellum|modern-bert|granite-docling",
     {RE_GPT2},
     false,
     false},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", {RE_LLAMA3}, true, true},
    {"dbrx|smaug-bpe|chatglm-bpe|glm4", {RE_LLAMA3}, false, false},
    {"qwen2|deepseek-r1-qwen|stablelm2|hunyuan|megrez|kormo|solar-open", {RE_QWEN2}, false, false},
    {"qwen35", {RE_QWEN35}, false, false},
    {"deepseek-llm",
     {"[\r\n]",
      "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-"
      "\\x{293}\\x{295}"
      "-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
      "\\x{38C}"
      "\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{"
      "10A0}-\\x{10C5}"
      "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{"
      "1D2B}\\x{1D6B}"
      "-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{"
      "1F48}-\\x{1F4D}"
      "\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{"
      "1FB6}-\\x{1FBC}"
      "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{"
      "1FE0}-\\x{1FEC}"
      "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{"
      "2119}-\\x{211D}"
      "\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{"
      "213F}\\x{2145}"
      "-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{"
      "2CEE}\\x{2CF2}"
      "\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{"
      "A78B}-\\x{A78E}"
      "\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{"
      "FF5A}\\x{10400}"
      "-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{"
      "10CF2}\\x{118A0}"
      "-\\x{118DF}\\x{1E900}-\\x{1E943}"
      "]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
      "\\s+$", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}+"},
     false,
     false},
    {"deepseek-coder",
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
      "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"},
     false,
     false},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, false},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b|mellum2",
     {"\\p{N}", RE_GPT2},
     false,
     false},
    {"tekken", {RE_TEKKEN}, true, true},
    {"gpt-4o|llama4|kanana2", {RE_GPT4O}, false, false},
    {"poro-chat|bloom|gpt3-finnish", {RE_BLOOM}, false, false},
    {"viking", {RE_BLOOM, "\\p{N}"}, false, false},
    {"chameleon",
     {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
      "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2},
     false,
     true},
    {"seed-coder",
     {RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| "
                  "?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     false,
     false},
    {"bailingmoe|bailingmoe2|llada-moe",
     {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
     false,
     false},
    {"grok-2", {RE_QWEN2}, false, false},
};

static bool name_in(const char *names, const char *s) {
    size_t n = strlen(s);
    for (const char *p = names; *p;) {
        const char *e = strchr(p, '|');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !memcmp(p, s, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

/* ---- state --------------------------------------------------------------- */

struct rp_bpe {
    const pre_def *pre;
    pcre2_code *re[BPE_MAX_RE];
    int n_re;
    bool ignore_merges;
    /* merges: open addressing on (left, right) symbol ids */
    uint64_t *mkey; /* [mcap] ((left + 1) << 32) | (right + 1); 0 = empty */
    int32_t *mrank; /* [mcap] merge rank (its index in tokenizer.ggml.merges) */
    int32_t *mres;  /* [mcap] symbol id of the merged text */
    uint64_t mmask;
    uint32_t n_merges;
    /* symbols outside the vocabulary: id n_tokens + k */
    char **xtext;
    uint32_t *xlen;
    int32_t n_x, cap_x;
    uint64_t *xslots; /* (k + 1) or 0 */
    uint64_t xmask;
    int32_t byte_sym[256]; /* symbol of each byte's printable form */
    char enc[256][2];      /* byte -> UTF-8 of its printable code point (1 or 2 bytes) */
    uint8_t enc_len[256];
    int16_t dec[324]; /* printable code point -> byte, -1 if none */
};

static uint64_t hash_str(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_pair(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

void rp_bpe_free(struct rp_bpe *b) {
    if (!b) return;
    for (int i = 0; i < b->n_re; i++) pcre2_code_free(b->re[i]);
    free(b->mkey);
    free(b->mrank);
    free(b->mres);
    for (int32_t i = 0; i < b->n_x; i++) free(b->xtext[i]);
    free(b->xtext);
    free(b->xlen);
    free(b->xslots);
    free(b);
}

static int32_t extra_find(const struct rp_bpe *b, const char *s, size_t n) {
    if (!b->xslots) return -1;
    for (uint64_t h = hash_str(s, n) & b->xmask;; h = (h + 1) & b->xmask) {
        uint64_t e = b->xslots[h];
        if (!e) return -1;
        int32_t k = (int32_t)(e - 1);
        if (b->xlen[k] == n && !memcmp(b->xtext[k], s, n)) return k;
    }
}

static bool extra_rehash(struct rp_bpe *b, uint64_t cap) {
    uint64_t *slots = rp_calloc(cap, sizeof *slots, "BPE symbols");
    if (!slots) return false;
    for (int32_t k = 0; k < b->n_x; k++) {
        uint64_t h = hash_str(b->xtext[k], b->xlen[k]) & (cap - 1);
        while (slots[h]) h = (h + 1) & (cap - 1);
        slots[h] = (uint64_t)k + 1;
    }
    free(b->xslots);
    b->xslots = slots;
    b->xmask = cap - 1;
    return true;
}

/* Symbol id of a text: its token id, or an id past the vocabulary. -1 on
 * allocation failure. */
static int32_t intern(const rp_vocab *v, struct rp_bpe *b, const char *s, size_t n) {
    int32_t id = rp_vocab_find(v, s, n);
    if (id >= 0) return id;
    int32_t k = extra_find(b, s, n);
    if (k >= 0) return v->n_tokens + k;
    if (b->n_x >= INT32_MAX - v->n_tokens - 1) return -1;
    if (b->n_x == b->cap_x) {
        int32_t cap = b->cap_x ? b->cap_x * 2 : 64;
        char **t = rp_realloc(b->xtext, (size_t)cap * sizeof *t, "BPE symbols");
        if (!t) return -1;
        b->xtext = t;
        uint32_t *l = rp_realloc(b->xlen, (size_t)cap * sizeof *l, "BPE symbols");
        if (!l) return -1;
        b->xlen = l;
        b->cap_x = cap;
    }
    char *copy = rp_strndup(s, n);
    if (!copy) return -1;
    b->xtext[b->n_x] = copy;
    b->xlen[b->n_x] = (uint32_t)n;
    b->n_x++;
    if ((uint64_t)b->n_x * 2 > (b->xslots ? b->xmask + 1 : 0)) {
        if (!extra_rehash(b, b->xslots ? (b->xmask + 1) * 2 : 128)) return -1;
    } else {
        uint64_t h = hash_str(s, n) & b->xmask;
        while (b->xslots[h]) h = (h + 1) & b->xmask;
        b->xslots[h] = (uint64_t)b->n_x;
    }
    return v->n_tokens + b->n_x - 1;
}

static const char *sym_text(const rp_vocab *v, const struct rp_bpe *b, int32_t id, size_t *n) {
    if (id < v->n_tokens) {
        *n = v->len[id];
        return v->text[id];
    }
    *n = b->xlen[id - v->n_tokens];
    return b->xtext[id - v->n_tokens];
}

/* Finds the merge of (l, r); returns its slot or -1. */
static int64_t merge_find(const struct rp_bpe *b, int32_t l, int32_t r) {
    uint64_t key = ((uint64_t)(uint32_t)(l + 1) << 32) | (uint32_t)(r + 1);
    for (uint64_t h = hash_pair(key) & b->mmask;; h = (h + 1) & b->mmask) {
        if (b->mkey[h] == key) return (int64_t)h;
        if (!b->mkey[h]) return -1;
    }
}

/* GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the
 * others for code points 256, 257, ... in byte order. */
static void byte_alphabet(struct rp_bpe *b) {
    int n = 0;
    for (int i = 0; i < 324; i++) b->dec[i] = -1;
    for (int c = 0; c < 256; c++) {
        bool printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
        int cp = printable ? c : 256 + n++;
        if (cp < 0x80) {
            b->enc[c][0] = (char)cp;
            b->enc_len[c] = 1;
        } else {
            b->enc[c][0] = (char)(0xC0 | (cp >> 6));
            b->enc[c][1] = (char)(0x80 | (cp & 0x3F));
            b->enc_len[c] = 2;
        }
        b->dec[cp] = (int16_t)c;
    }
}

static rp_status compile_regexes(struct rp_bpe *b, const char *pre) {
    for (int i = 0; i < BPE_MAX_RE && b->pre->re[i]; i++) {
        int err;
        PCRE2_SIZE off;
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)b->pre->re[i], PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                          &err, &off, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            return rp_fail(RP_ERR_INTERNAL,
                           "pre-tokenizer '%s': regex %d does not compile at offset %zu: %s", pre,
                           i + 1, (size_t)off, (const char *)msg);
        }
        /* JIT is an optimisation: without it (unsupported CPU, no executable
         * memory) pcre2_match still runs the compiled pattern. */
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        b->re[b->n_re++] = re;
    }
    return RP_OK;
}

static rp_status load_merges(rp_vocab *v, struct rp_bpe *b, const rp_gguf *g) {
    const rp_gguf_val *arr = NULL;
    bool found;
    rp_status s = rp_gguf_get_arr(g, "tokenizer.ggml.merges", &arr, &found);
    if (s) return s;
    if (!arr)
        return rp_fail(RP_ERR_FORMAT,
                       "%s: tokenizer.ggml.merges is missing (a gpt2 tokenizer needs its merges)",
                       rp_gguf_path(g));
    if (arr->arr.type != RP_GGUF_STRING || arr->arr.n > (1u << 26))
        return rp_fail(RP_ERR_FORMAT,
                       "%s: tokenizer.ggml.merges at byte offset %" PRIu64
                       " must be a string array (got %s[%" PRIu64 "])",
                       rp_gguf_path(g), arr->offset, rp_gguf_type_name((int)arr->arr.type),
                       arr->arr.n);
    b->n_merges = (uint32_t)arr->arr.n;
    uint64_t cap = 64;
    while (cap < (uint64_t)b->n_merges * 2) cap <<= 1;
    b->mkey = rp_calloc(cap, sizeof *b->mkey, "BPE merges");
    b->mrank = rp_malloc(cap * sizeof *b->mrank, "BPE merges");
    b->mres = rp_malloc(cap * sizeof *b->mres, "BPE merges");
    if (!b->mkey || !b->mrank || !b->mres) return RP_ERR_NOMEM;
    b->mmask = cap - 1;
    char *tmp = NULL;
    size_t tmp_cap = 0;
    for (uint32_t i = 0; i < b->n_merges; i++) {
        const rp_gguf_val *e = &arr->arr.elems[i];
        const char *m = e->str.s;
        size_t n = (size_t)e->str.len;
        /* "left right": the first space after the first byte separates them */
        const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
        if (!sp || sp + 1 == m + n) {
            free(tmp);
            return rp_fail(RP_ERR_FORMAT,
                           "%s: tokenizer.ggml.merges[%" PRIu32 "] = '%.*s' is not 'left right'",
                           rp_gguf_path(g), i, (int)RP_MIN(n, 64), m);
        }
        size_t nl = (size_t)(sp - m), nr = n - nl - 1;
        int32_t l = intern(v, b, m, nl), r = intern(v, b, sp + 1, nr);
        if (n > tmp_cap) {
            char *t = rp_realloc(tmp, n, "BPE merges");
            if (!t) {
                free(tmp);
                return RP_ERR_NOMEM;
            }
            tmp = t;
            tmp_cap = n;
        }
        memcpy(tmp, m, nl);
        memcpy(tmp + nl, sp + 1, nr);
        int32_t res = intern(v, b, tmp, nl + nr);
        if (l < 0 || r < 0 || res < 0) {
            free(tmp);
            return RP_ERR_NOMEM;
        }
        uint64_t key = ((uint64_t)(uint32_t)(l + 1) << 32) | (uint32_t)(r + 1);
        uint64_t h = hash_pair(key) & b->mmask;
        while (b->mkey[h] && b->mkey[h] != key) h = (h + 1) & b->mmask;
        if (b->mkey[h]) continue; /* a repeated pair keeps its first (best) rank */
        b->mkey[h] = key;
        b->mrank[h] = (int32_t)i;
        b->mres[h] = res;
    }
    free(tmp);
    return RP_OK;
}

rp_status rp_bpe_init(rp_vocab *v, const rp_gguf *g) {
    const pre_def *pre = NULL;
    for (size_t i = 0; i < RP_ARRAY_LEN(g_pre) && !pre; i++)
        if (name_in(g_pre[i].names, v->pre)) pre = &g_pre[i];
    if (!pre) {
        rp_buf known = {0};
        for (size_t i = 0; i < RP_ARRAY_LEN(g_pre); i++)
            rp_buf_printf(&known, "%s%s", i ? "|" : "", g_pre[i].names);
        rp_status s = rp_fail(RP_ERR_UNSUPPORTED,
                              "%s: pre-tokenizer '%s' (tokenizer.ggml.pre) is not known; known: %s",
                              rp_gguf_path(g), v->pre, known.data ? known.data : "");
        rp_buf_free(&known);
        return s;
    }
    struct rp_bpe *b = rp_calloc(1, sizeof *b, "BPE tokenizer");
    if (!b) return RP_ERR_NOMEM;
    v->bpe = b; /* freed with the vocabulary, also on failure below */
    b->pre = pre;
    b->ignore_merges = pre->ignore_merges;
    byte_alphabet(b);
    rp_status s = compile_regexes(b, v->pre);
    if (s) return s;
    if ((s = load_merges(v, b, g))) return s;
    for (int c = 0; c < 256; c++) {
        b->byte_sym[c] = intern(v, b, b->enc[c], b->enc_len[c]);
        if (b->byte_sym[c] < 0) return RP_ERR_NOMEM;
    }
    bool found, add_bos;
    if ((s = rp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, &found))) return s;
    if (!found) v->add_bos = pre->add_bos;
    /* the newline token, as the tokenizer produces it */
    int32_t nl = rp_vocab_find(v, b->enc['\n'], b->enc_len['\n']);
    if (nl >= 0) v->nl = nl;
    return RP_OK;
}

/* ---- tokenize ------------------------------------------------------------ */

typedef struct bpe_sym {
    int32_t id; /* symbol id, -1 once merged into its left neighbour */
    int32_t prev, next;
} bpe_sym;

typedef struct bpe_pair {
    int32_t rank, left, right;
    int32_t lid, rid;
} bpe_pair;

typedef struct bpe_session {
    const rp_vocab *v;
    const struct rp_bpe *b;
    rp_tokvec *out;
    pcre2_match_data *md[BPE_MAX_RE];
    bpe_sym *sym;
    size_t cap_sym;
    bpe_pair *heap;
    size_t n_heap, cap_heap;
    char *enc;
    size_t cap_enc;
    /* pre-tokens already tokenized in this call (words repeat): open
     * addressing over (hash, bytes) -> a run of tokens */
    struct wc_entry *wc;
    size_t wc_cap, wc_n;
    char *wc_bytes;
    size_t wb_n, wb_cap;
    int32_t *wc_toks;
    size_t wt_n, wt_cap;
    size_t dropped; /* bytes with no token (dropped, as llama.cpp drops them) */
} bpe_session;

typedef struct wc_entry {
    uint64_t h;
    uint32_t woff, wlen; /* wlen 0 = empty slot */
    uint32_t toff, tn;
} wc_entry;

#define WC_MAX_WORD    64
#define WC_MAX_ENTRIES (1u << 20)

static bool grow_buf(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = rp_realloc(*p, c * elem, "tokenizer cache");
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static const wc_entry *wc_find(const bpe_session *s, uint64_t h, const char *w, size_t n) {
    if (!s->wc) return NULL;
    for (size_t i = h & (s->wc_cap - 1);; i = (i + 1) & (s->wc_cap - 1)) {
        const wc_entry *e = &s->wc[i];
        if (!e->wlen) return NULL;
        if (e->h == h && e->wlen == n && !memcmp(s->wc_bytes + e->woff, w, n)) return e;
    }
}

/* Remembers that w tokenizes to toks[0..tn); failure only costs speed. */
static void wc_insert(bpe_session *s, uint64_t h, const char *w, size_t n, const int32_t *toks,
                      size_t tn) {
    if (s->wc_n >= WC_MAX_ENTRIES) return;
    if ((s->wc_n + 1) * 2 > s->wc_cap) {
        size_t cap = s->wc_cap ? s->wc_cap * 2 : 4096;
        wc_entry *t = calloc(cap, sizeof *t);
        if (!t) return;
        for (size_t i = 0; i < s->wc_cap; i++)
            if (s->wc[i].wlen) {
                size_t j = s->wc[i].h & (cap - 1);
                while (t[j].wlen) j = (j + 1) & (cap - 1);
                t[j] = s->wc[i];
            }
        free(s->wc);
        s->wc = t;
        s->wc_cap = cap;
    }
    if (!grow_buf((void **)&s->wc_bytes, &s->wb_cap, s->wb_n + n, 1) ||
        !grow_buf((void **)&s->wc_toks, &s->wt_cap, s->wt_n + tn, sizeof(int32_t)) ||
        s->wb_n + n > UINT32_MAX || s->wt_n + tn > UINT32_MAX)
        return;
    size_t i = h & (s->wc_cap - 1);
    while (s->wc[i].wlen) i = (i + 1) & (s->wc_cap - 1);
    memcpy(s->wc_bytes + s->wb_n, w, n);
    if (tn) memcpy(s->wc_toks + s->wt_n, toks, tn * sizeof *toks); /* toks may be NULL */
    s->wc[i] = (wc_entry){h, (uint32_t)s->wb_n, (uint32_t)n, (uint32_t)s->wt_n, (uint32_t)tn};
    s->wb_n += n;
    s->wt_n += tn;
    s->wc_n++;
}

static bool pair_before(const bpe_pair *a, const bpe_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static bool heap_push(bpe_session *s, bpe_pair p) {
    if (s->n_heap == s->cap_heap) {
        size_t cap = s->cap_heap ? s->cap_heap * 2 : 64;
        bpe_pair *h = rp_realloc(s->heap, cap * sizeof *h, "tokenizer heap");
        if (!h) return false;
        s->heap = h;
        s->cap_heap = cap;
    }
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = p;
    return true;
}

static bpe_pair heap_pop(bpe_session *s) {
    bpe_pair top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const bpe_pair *best = &last;
        if (l < n && pair_before(&s->heap[l], best)) {
            m = l;
            best = &s->heap[l];
        }
        if (r < n && pair_before(&s->heap[r], best)) m = r;
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n) s->heap[i] = last;
    return top;
}

static bool try_pair(bpe_session *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    int64_t h = merge_find(s->b, s->sym[left].id, s->sym[right].id);
    if (h < 0) return true;
    bpe_pair p = {s->b->mrank[h], left, right, s->sym[left].id, s->sym[right].id};
    return heap_push(s, p);
}

static bool emit(bpe_session *s, int32_t id) {
    const rp_vocab *v = s->v;
    if (id < v->n_tokens) return rp_tokvec_push(s->out, id);
    /* a text the vocabulary lacks: its single bytes, where they are tokens */
    size_t n;
    const char *t = sym_text(v, s->b, id, &n);
    for (size_t i = 0; i < n; i++) {
        int32_t b = rp_vocab_find(v, t + i, 1);
        if (b < 0) s->dropped++;
        if (b >= 0 && !rp_tokvec_push(s->out, b)) return false;
    }
    return true;
}

static rp_status bpe_word_merge(bpe_session *s, const char *text, size_t n);

/* One pre-token: bytes text[0..n) -> tokens, through the cache. */
static rp_status bpe_word(bpe_session *s, const char *text, size_t n) {
    if (n < 2 || n > WC_MAX_WORD) return bpe_word_merge(s, text, n);
    uint64_t h = hash_str(text, n);
    const wc_entry *e = wc_find(s, h, text, n);
    if (e) {
        for (uint32_t i = 0; i < e->tn; i++)
            if (!rp_tokvec_push(s->out, s->wc_toks[e->toff + i])) return RP_ERR_NOMEM;
        return RP_OK;
    }
    size_t before = s->out->n, dropped = s->dropped;
    rp_status st = bpe_word_merge(s, text, n);
    if (!st && s->dropped == dropped) /* a word that lost bytes is counted again each time */
        wc_insert(s, h, text, n, s->out->v + before, s->out->n - before);
    return st;
}

/* One pre-token by merging. */
static rp_status bpe_word_merge(bpe_session *s, const char *text, size_t n) {
    const struct rp_bpe *b = s->b;
    if (n == 1) return emit(s, b->byte_sym[(uint8_t)text[0]]) ? RP_OK : RP_ERR_NOMEM;
    if (b->ignore_merges) {
        if (2 * n > s->cap_enc) {
            char *e = rp_realloc(s->enc, 2 * n, "tokenizer");
            if (!e) return RP_ERR_NOMEM;
            s->enc = e;
            s->cap_enc = 2 * n;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            uint8_t c = (uint8_t)text[i];
            memcpy(s->enc + k, b->enc[c], b->enc_len[c]);
            k += b->enc_len[c];
        }
        int32_t id = rp_vocab_find(s->v, s->enc, k);
        if (id >= 0) return rp_tokvec_push(s->out, id) ? RP_OK : RP_ERR_NOMEM;
    }
    if (n > s->cap_sym) {
        bpe_sym *p = rp_realloc(s->sym, n * sizeof *p, "tokenizer");
        if (!p) return RP_ERR_NOMEM;
        s->sym = p;
        s->cap_sym = n;
    }
    if (n > INT32_MAX) return rp_fail(RP_ERR_INVALID_ARG, "pre-token of %zu bytes is too long", n);
    for (size_t i = 0; i < n; i++)
        s->sym[i] = (bpe_sym){b->byte_sym[(uint8_t)text[i]], (int32_t)i - 1,
                              i + 1 < n ? (int32_t)i + 1 : -1};
    s->n_heap = 0;
    for (size_t i = 1; i < n; i++)
        if (!try_pair(s, (int32_t)i - 1, (int32_t)i)) return RP_ERR_NOMEM;
    while (s->n_heap) {
        bpe_pair p = heap_pop(s);
        bpe_sym *l = &s->sym[p.left], *r = &s->sym[p.right];
        /* stale: one side has merged since this pair was queued */
        if (l->id != p.lid || r->id != p.rid || l->next != p.right) continue;
        int64_t h = merge_find(b, p.lid, p.rid);
        l->id = b->mres[h];
        r->id = -1;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = p.left;
        if (!try_pair(s, l->prev, p.left) || !try_pair(s, p.left, l->next)) return RP_ERR_NOMEM;
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next)
        if (!emit(s, s->sym[i].id)) return RP_ERR_NOMEM;
    return RP_OK;
}

static int re_match(const pcre2_code *re, const char *p, size_t n, size_t off,
                    pcre2_match_data *md) {
    int rc = pcre2_jit_match(re, (PCRE2_SPTR)p, n, off, PCRE2_NOTEMPTY, md, NULL);
    if (rc == PCRE2_ERROR_JIT_BADOPTION || rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re, (PCRE2_SPTR)p, n, off, PCRE2_NOTEMPTY, md, NULL);
    return rc;
}

/* Splits text[0..n) with regex `level` and passes every match and every gap
 * between matches on to the next level; past the last level, a piece is a
 * pre-token. */
static rp_status split(bpe_session *s, int level, const char *p, size_t n) {
    if (n == 0) return RP_OK;
    if (level == s->b->n_re) return bpe_word(s, p, n);
    const pcre2_code *re = s->b->re[level];
    pcre2_match_data *md = s->md[level];
    size_t prev = 0;
    rp_status st;
    while (prev < n) {
        int rc = re_match(re, p, n, prev, md);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return rp_fail(RP_ERR_INTERNAL, "pre-tokenizer '%s': regex %d failed at byte %zu: %s",
                           s->v->pre, level + 1, prev, (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms > prev && (st = split(s, level + 1, p + prev, ms - prev))) return st;
        if ((st = split(s, level + 1, p + ms, me - ms))) return st;
        prev = me;
    }
    return split(s, level + 1, p + prev, n - prev);
}

rp_status rp_bpe_tokenize(const rp_vocab *v, const char *text, size_t len, rp_tokvec *out) {
    const struct rp_bpe *b = v->bpe;
    if (!b) return rp_fail(RP_ERR_INTERNAL, "BPE tokenizer not initialised");
    bpe_session s = {.v = v, .b = b, .out = out};
    rp_status st = RP_OK;
    for (int i = 0; i < b->n_re; i++) {
        s.md[i] = pcre2_match_data_create_from_pattern(b->re[i], NULL);
        if (!s.md[i]) st = rp_fail(RP_ERR_NOMEM, "out of memory (regex match data)");
    }
    if (!st) st = split(&s, 0, text, len);
    if (!st && s.dropped)
        rp_log(RP_LOG_WARN,
               "tokenizer: %zu byte(s) of the text have no token in the vocabulary (neither as "
               "part of a word nor as a single byte) and were dropped, as llama.cpp drops them",
               s.dropped);
    for (int i = 0; i < b->n_re; i++) pcre2_match_data_free(s.md[i]);
    free(s.sym);
    free(s.heap);
    free(s.enc);
    free(s.wc);
    free(s.wc_bytes);
    free(s.wc_toks);
    return st;
}

/* ---- detokenize ---------------------------------------------------------- */

int rp_bpe_decode_token(const rp_vocab *v, int32_t id, char *buf, size_t size) {
    const struct rp_bpe *b = v->bpe;
    const uint8_t *t = (const uint8_t *)v->text[id];
    size_t n = v->len[id], k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = t[i];
        size_t cl = 1;
        if (cp >= 0xC2 && cp < 0xE0 && i + 1 < n && (t[i + 1] & 0xC0) == 0x80) {
            cp = ((cp & 0x1F) << 6) | (t[i + 1] & 0x3F);
            cl = 2;
        }
        if (b && cp < 324 && b->dec[cp] >= 0 && (cl == 2 || cp < 0x80)) {
            if (k + 1 < size) buf[k] = (char)b->dec[cp];
            k++;
        } else {
            /* not a byte of GPT-2's alphabet: the text itself */
            for (size_t j = 0; j < cl; j++, k++)
                if (k + 1 < size) buf[k] = (char)t[i + j];
        }
        i += cl;
    }
    if (size) buf[k < size ? k : size - 1] = 0;
    return (int)k;
}
