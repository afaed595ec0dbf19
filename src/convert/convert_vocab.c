/* Tokenizers: Hugging Face tokenizer.json (+ tokenizer_config.json,
 * chat_template.jinja / .json, config.json's special ids) -> tokenizer.* keys,
 * as llama.cpp's converter writes them.
 *
 * Two kinds of BPE model are converted:
 *  - byte-level BPE (a ByteLevel pre-tokenizer; GPT-2, Llama 3, Qwen):
 *    tokenizer.ggml.model "gpt2", tokens as stored (byte-level alphabet),
 *    token types, merges ("a b"; pairs written as two strings have spaces
 *    inside a part encoded as U+0120, as gguf-py does), and
 *    tokenizer.ggml.pre naming the pre-tokenizer's split rules;
 *  - SentencePiece-style BPE with byte fallback (Llama 2, Gemma):
 *    tokenizer.ggml.model "llama", pieces with U+2581 for spaces, <0xNN> byte
 *    tokens, scores and types, and add_space_prefix.
 *
 * tokenizer.ggml.pre: llama.cpp's converter identifies the pre-tokenizer by
 * running the Python tokenizer on a check string and hashing the token ids.
 * reprise has no Python tokenizer at conversion time, so it recognises the
 * pre-tokenizer from what tokenizer.json says it does: the list of Split
 * regexes and the ByteLevel use_regex flag are compared verbatim with a
 * table of known configurations (g_pre below). That is exactly the
 * information tokenizer.ggml.pre selects in llama.cpp (its own split regexes).
 * An unknown configuration is refused by name; --vocab-pre overrides.
 *
 * Scores of the SentencePiece-style vocabulary: llama.cpp's SPM tokenizer
 * merges the adjacent pair whose merged piece has the highest score, while
 * tokenizer.json ranks merges. Each piece gets minus the rank of the first
 * merge that produces it (so earlier merges win, as in the Hugging Face
 * tokenizer); pieces no merge produces get minus the merge count, bytes and
 * the unknown token 0, added tokens and padding -1000 (llama.cpp's value).
 * (llama.cpp's own tokenizer.json path writes -1000 for every piece, which
 * leaves the merge order to chance.) */
#include "convert/convert.h"
#include "base/json_util.h"
#include "base/util.h"
#include "text/vocab.h"

#include <inttypes.h>
#include <math.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_TOKENS (1 << 24)

static const char LLAMA3_RE[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Known byte-level pre-tokenizers: the Split regexes in order, and whether
 * the ByteLevel step splits with GPT-2's own regex. */
static const struct {
    const char *pre;
    const char *split[2];
    bool byte_level_regex;
} g_pre[] = {
    {"llama-bpe", {LLAMA3_RE, NULL}, false},
    {"qwen2", {QWEN2_RE, NULL}, false},
    {"gpt-2", {NULL, NULL}, true},
};

typedef struct tok {
    const char *dir;
    json_t *tj, *tc;      /* tokenizer.json, tokenizer_config.json (or NULL) */
    const json_t *config; /* config.json (or NULL) */
    const json_t *model, *vocab, *added;
    int64_t n;
    const char **text; /* [n] */
    int32_t *type;     /* [n] */
    float *score;      /* [n] (SPM) */
    bool spm;
    char **owned;
    size_t n_owned, cap_owned;
    const char **merges;
    size_t n_merges;
} tok;

static rp_status tj_fail(const tok *t, const char *fmt, ...) RP_PRINTF(2, 3);
static rp_status tj_fail(const tok *t, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rp_fail(RP_ERR_FORMAT, "%s/tokenizer.json: %s", t->dir, msg);
}

static char *own(tok *t, char *s) {
    if (!s) return NULL;
    if (t->n_owned == t->cap_owned) {
        size_t cap = t->cap_owned ? t->cap_owned * 2 : 256;
        char **o = rp_realloc(t->owned, cap * sizeof *o, "token strings");
        if (!o) {
            free(s);
            return NULL;
        }
        t->owned = o;
        t->cap_owned = cap;
    }
    t->owned[t->n_owned++] = s;
    return s;
}

/* tokenizer_config.json and config.json may hold integers beyond 64 bits
 * (model_max_length = 1e30 is common): those files are read with numbers as
 * doubles, and their integers are read through json_int. */
static bool json_int(const json_t *v, int64_t *out) {
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    double d = json_is_real(v) ? json_real_value(v) : 0.5;
    if (d == floor(d) && fabs(d) < 9e18) {
        *out = (int64_t)json_real_value(v);
        return true;
    }
    return false;
}

static rp_status load_json(const char *dir, const char *name, bool required, json_t **out) {
    *out = NULL;
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = rp_malloc(n, "path");
    if (!path) return RP_ERR_NOMEM;
    snprintf(path, n, "%s/%s", dir, name);
    struct stat sb;
    rp_status s = RP_OK;
    if (stat(path, &sb) != 0) {
        if (required)
            s = rp_fail(RP_ERR_IO,
                        "%s: no %s (reprise convert reads Hugging Face fast-tokenizer files; a "
                        "SentencePiece tokenizer.model alone is not supported; --no-vocab converts "
                        "without a vocabulary)",
                        dir, name);
    } else {
        json_error_t err;
        size_t flags =
            JSON_REJECT_DUPLICATES | (strcmp(name, "tokenizer.json") ? JSON_DECODE_INT_AS_REAL : 0);
        bool read_failed;
        *out = rp_json_load_path(path, RP_READ_FILE_MAX, flags, &err, &read_failed);
        if (!*out && read_failed)
            s = RP_ERR_IO; /* the reader named the file and the reason */
        else if (!*out)
            s = rp_fail(RP_ERR_FORMAT, "%s at byte offset %d (line %d, column %d): %s", path,
                        err.position, err.line, err.column, err.text);
        else if (!json_is_object(*out)) {
            s = rp_fail(RP_ERR_FORMAT, "%s: the top level is not an object", path);
            json_decref(*out);
            *out = NULL;
        }
    }
    free(path);
    return s;
}

/* llama.cpp's does_token_look_special */
static bool looks_special(const char *s) {
    size_t n = strlen(s);
    static const char *const names[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < RP_ARRAY_LEN(names); i++)
        if (!strcmp(s, names[i])) return true;
    static const char FW_BAR[] = "\xef\xbd\x9c"; /* U+FF5C, deepseek's <｜...｜> */
    if (n >= 2 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return true;
    if (n >= 4 && s[0] == '<' && !memcmp(s + 1, FW_BAR, 3) && !memcmp(s + n - 4, FW_BAR, 3) &&
        s[n - 1] == '>')
        return true;
    return n >= 7 && !strncmp(s, "<unused", 7) && s[n - 1] == '>';
}

/* U+2581 (the SentencePiece space) -> ' ', for user-defined tokens. */
static char *spaces_from_pieces(const char *s) {
    size_t n = strlen(s);
    char *o = rp_malloc(n + 1, "token"), *p = o;
    if (!o) return NULL;
    while (*s) {
        if ((uint8_t)s[0] == 0xe2 && (uint8_t)s[1] == 0x96 && (uint8_t)s[2] == 0x81) {
            *p++ = ' ';
            s += 3;
        } else
            *p++ = *s++;
    }
    *p = 0;
    return o;
}

static bool is_byte_token(const char *s) {
    static const char hex[] = "0123456789ABCDEFabcdef";
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && s[5] == '>' && strchr(hex, s[3]) &&
           strchr(hex, s[4]);
}

/* Does this JSON (sub)tree contain an object {"type": name}? */
static bool has_type(const json_t *v, const char *name) {
    if (json_is_object(v)) {
        const json_t *t = json_object_get(v, "type");
        if (json_is_string(t) && !strcmp(json_string_value(t), name)) return true;
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) if (has_type(x, name)) return true;
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (has_type(json_array_get(v, i), name)) return true;
    }
    return false;
}

/* ---- the token table ------------------------------------------------------- */

static rp_status read_id(const tok *t, const json_t *v, const char *what, const char *name,
                         int64_t *id) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= MAX_TOKENS)
        return tj_fail(t, "%s '%.100s' has no valid id (0..%d)", what, name, MAX_TOKENS - 1);
    *id = (int64_t)json_integer_value(v);
    return RP_OK;
}

static rp_status build_table(tok *t, int64_t pad_to) {
    rp_status s;
    int64_t max = -1, id;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)t->vocab, key, val) {
        if ((s = read_id(t, val, "model.vocab token", key, &id))) return s;
        max = RP_MAX(max, id);
    }
    for (size_t i = 0; i < json_array_size(t->added); i++) {
        const json_t *a = json_array_get(t->added, i);
        const json_t *c = json_object_get(a, "content");
        if (!json_is_string(c)) return tj_fail(t, "added_tokens[%zu] has no content string", i);
        if ((s = read_id(t, json_object_get(a, "id"), "added token", json_string_value(c), &id)))
            return s;
        max = RP_MAX(max, id);
    }
    if (max < 0) return tj_fail(t, "the vocabulary is empty");
    t->n = max + 1;
    if (pad_to > 0) {
        if (t->n > pad_to)
            return tj_fail(t, "token id %" PRId64 " is beyond config.json's vocab_size %" PRId64,
                           max, pad_to);
        t->n = pad_to;
    }
    size_t n = (size_t)t->n;
    t->text = rp_calloc(n, sizeof *t->text, "token table");
    t->type = rp_calloc(n, sizeof *t->type, "token table");
    t->score = rp_calloc(n, sizeof *t->score, "token table");
    if (!t->text || !t->type || !t->score) return RP_ERR_NOMEM;
    json_object_foreach((json_t *)t->vocab, key, val) {
        id = (int64_t)json_integer_value(val);
        if (t->text[id])
            return tj_fail(t, "tokens '%.100s' and '%.100s' share id %" PRId64, t->text[id], key,
                           id);
        t->text[id] = key;
        t->type[id] = RP_TOKEN_NORMAL;
    }
    return RP_OK;
}

static rp_status apply_added(tok *t) {
    for (size_t i = 0; i < json_array_size(t->added); i++) {
        const json_t *a = json_array_get(t->added, i);
        const char *c = json_string_value(json_object_get(a, "content"));
        int64_t id = (int64_t)json_integer_value(json_object_get(a, "id"));
        bool special = json_is_true(json_object_get(a, "special"));
        if (special || looks_special(c)) {
            t->text[id] = c;
            t->type[id] = RP_TOKEN_CONTROL;
        } else {
            /* llama.cpp expects user-defined tokens pre-normalised (spaces, not U+2581) */
            if (!(t->text[id] = own(t, spaces_from_pieces(c)))) return RP_ERR_NOMEM;
            t->type[id] = RP_TOKEN_USER_DEFINED;
        }
        t->score[id] = -1000.0f;
    }
    for (int64_t id = 0; id < t->n; id++)
        if (!t->text[id]) {
            char buf[32];
            snprintf(buf, sizeof buf, "[PAD%" PRId64 "]", id);
            if (!(t->text[id] = own(t, rp_strdup(buf)))) return RP_ERR_NOMEM;
            t->type[id] = RP_TOKEN_UNUSED;
            t->score[id] = -1000.0f;
        }
    return RP_OK;
}

/* Merges as "a b" strings; also fills SPM scores from merge ranks. */
static rp_status read_merges(tok *t) {
    const json_t *m = json_object_get(t->model, "merges");
    if (!m || json_is_null(m)) return RP_OK;
    if (!json_is_array(m)) return tj_fail(t, "model.merges is not an array");
    size_t n = json_array_size(m);
    if (n > MAX_TOKENS) return tj_fail(t, "%zu merges (at most %d)", n, MAX_TOKENS);
    t->merges = rp_calloc(n + 1, sizeof *t->merges, "merges");
    if (!t->merges) return RP_ERR_NOMEM;
    bool *scored = t->spm ? rp_calloc((size_t)t->n, sizeof *scored, "scores") : NULL;
    if (t->spm && !scored) return RP_ERR_NOMEM;
    rp_status s = RP_OK;
    char stackbuf[512];
    for (size_t r = 0; r < n && !s; r++) {
        const json_t *e = json_array_get(m, r);
        const char *left = NULL, *right = NULL;
        size_t ll = 0;
        if (json_is_string(e)) {
            t->merges[r] = json_string_value(e);
            const char *sp = strchr(t->merges[r], ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                left = t->merges[r];
                ll = (size_t)(sp - left);
                right = sp + 1;
            }
        } else if (json_is_array(e) && json_array_size(e) == 2 &&
                   json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1))) {
            left = json_string_value(json_array_get(e, 0));
            right = json_string_value(json_array_get(e, 1));
            ll = strlen(left);
            /* "a b" with spaces inside a part written as U+0120 */
            rp_buf b = {0};
            bool ok = true;
            for (int part = 0; part < 2 && ok; part++) {
                if (part) ok = rp_buf_append(&b, " ", 1);
                for (const char *p = part ? right : left; *p && ok; p++)
                    ok = *p == ' ' ? rp_buf_append(&b, "\xc4\xa0", 2) : rp_buf_append(&b, p, 1);
            }
            ok = ok && rp_buf_append(&b, "", 1);
            if (!ok) rp_buf_free(&b);
            if (!ok || !own(t, b.data)) { /* own() frees on failure */
                s = RP_ERR_NOMEM;
                break;
            }
            t->merges[r] = b.data;
        } else {
            s = tj_fail(t, "model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", r);
            break;
        }
        if (scored && left) {
            size_t rl = strlen(right);
            char *cat = ll + rl + 1 <= sizeof stackbuf ? stackbuf : rp_malloc(ll + rl + 1, "merge");
            if (!cat) {
                s = RP_ERR_NOMEM;
                break;
            }
            memcpy(cat, left, ll);
            memcpy(cat + ll, right, rl + 1);
            const json_t *idv = json_object_get(t->vocab, cat);
            if (cat != stackbuf) free(cat);
            if (json_is_integer(idv)) {
                int64_t id = (int64_t)json_integer_value(idv);
                if (!scored[id] && t->type[id] == RP_TOKEN_NORMAL) {
                    t->score[id] = -(float)r;
                    scored[id] = true;
                }
            }
        }
    }
    t->n_merges = n;
    if (scored)
        for (int64_t id = 0; id < t->n; id++)
            if (t->type[id] == RP_TOKEN_NORMAL && !scored[id]) t->score[id] = -(float)n;
    free(scored);
    return s;
}

/* ---- pre-tokenizer --------------------------------------------------------- */

typedef struct pre_info {
    const char *split[4];
    int n_split;
    bool byte_level, byte_level_regex, other;
    const char *other_type;
} pre_info;

static void collect_pre(const json_t *p, pre_info *pi) {
    if (!json_is_object(p)) return;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type) {
        pi->other = true;
        return;
    }
    if (!strcmp(type, "Sequence")) {
        const json_t *l = json_object_get(p, "pretokenizers");
        for (size_t i = 0; i < json_array_size(l); i++) collect_pre(json_array_get(l, i), pi);
    } else if (!strcmp(type, "Split")) {
        const char *re = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        if (!re || (beh && strcmp(beh, "Isolated")) || json_is_true(json_object_get(p, "invert")) ||
            pi->n_split == 4) {
            pi->other = true;
            pi->other_type = "Split";
        } else
            pi->split[pi->n_split++] = re;
    } else if (!strcmp(type, "ByteLevel")) {
        pi->byte_level = true;
        const json_t *u = json_object_get(p, "use_regex");
        pi->byte_level_regex = !u || json_is_true(u);
        if (json_is_true(json_object_get(p, "add_prefix_space"))) {
            pi->other = true;
            pi->other_type = "ByteLevel with add_prefix_space";
        }
    } else {
        pi->other = true;
        pi->other_type = type;
    }
}

static rp_status recognise_pre(const tok *t, const char **out) {
    pre_info pi = {0};
    collect_pre(json_object_get(t->tj, "pre_tokenizer"), &pi);
    for (size_t i = 0; i < RP_ARRAY_LEN(g_pre) && !pi.other; i++) {
        int n = 0;
        while (n < 2 && g_pre[i].split[n]) n++;
        if (n != pi.n_split || g_pre[i].byte_level_regex != pi.byte_level_regex) continue;
        bool same = true;
        for (int k = 0; k < n && same; k++) same = !strcmp(g_pre[i].split[k], pi.split[k]);
        if (same) {
            *out = g_pre[i].pre;
            return RP_OK;
        }
    }
    char what[300];
    if (pi.other)
        snprintf(what, sizeof what, "a %s step", pi.other_type ? pi.other_type : "pre-tokenizer");
    else
        snprintf(what, sizeof what, "%d Split regex(es)%s%.120s%s, ByteLevel use_regex=%s",
                 pi.n_split, pi.n_split ? " starting '" : "", pi.n_split ? pi.split[0] : "",
                 pi.n_split ? "'" : "", pi.byte_level_regex ? "true" : "false");
    return rp_fail(RP_ERR_UNSUPPORTED,
                   "%s/tokenizer.json: the pre-tokenizer (%s) is not one reprise recognises "
                   "(llama-bpe, qwen2, "
                   "gpt-2); give llama.cpp's name for it with --vocab-pre NAME",
                   t->dir, what);
}

/* SentencePiece-style: is a space prepended to the text? */
static bool spm_space_prefix(const tok *t) {
    const json_t *norm = json_object_get(t->tj, "normalizer");
    const json_t *list = json_object_get(norm, "normalizers");
    size_t n = json_is_array(list) ? json_array_size(list) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_is_array(list) ? json_array_get(list, i) : norm;
        const char *type = json_string_value(json_object_get(e, "type"));
        if (type && !strcmp(type, "Prepend")) return true;
    }
    const json_t *pre = json_object_get(t->tj, "pre_tokenizer");
    list = json_object_get(pre, "pretokenizers");
    n = json_is_array(list) ? json_array_size(list) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_is_array(list) ? json_array_get(list, i) : pre;
        const char *type = json_string_value(json_object_get(e, "type"));
        if (!type || strcmp(type, "Metaspace")) continue;
        const char *scheme = json_string_value(json_object_get(e, "prepend_scheme"));
        if (scheme) return strcmp(scheme, "never") != 0;
        return json_is_true(json_object_get(e, "add_prefix_space"));
    }
    return false;
}

/* ---- special tokens, flags, templates ---------------------------------------- */

/* Special token kinds in the order llama.cpp's SpecialVocab considers them;
 * eot and eom join when a post-processor's trailing token replaces the EOS.
 * add_key: the add_<kind>_token flag GGUF has for it (NULL: none). */
enum { SP_BOS, SP_EOS, SP_UNK, SP_SEP, SP_PAD, SP_CLS, SP_MASK, SP_EOT, SP_EOM, N_SP };
static const struct {
    const char *kind, *id_key, *add_key;
} g_special[N_SP] = {
    {"bos", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token"},
    {"eos", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_eos_token"},
    {"unk", "tokenizer.ggml.unknown_token_id", NULL},
    {"sep", "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.add_sep_token"},
    {"pad", "tokenizer.ggml.padding_token_id", NULL},
    {"cls", NULL, NULL},
    {"mask", "tokenizer.ggml.mask_token_id", NULL},
    {"eot", "tokenizer.ggml.eot_token_id", NULL},
    {"eom", "tokenizer.ggml.eom_token_id", NULL},
};

typedef struct specials {
    const char
        *str[N_SP];     /* token text per kind (tokenizer_config, adjusted by the post-processor) */
    bool kind_on[N_SP]; /* eot/eom are considered only once added */
    int add[N_SP];      /* -1 unset, else 0/1 */
    int add_order[N_SP], n_add;
    int64_t id[N_SP];
    int id_order[N_SP], n_id;
} specials;

/* tokenizer_config's "<kind>_token": a string or {"content": ...} */
static const char *tc_token(const tok *t, const char *kind) {
    if (!t->tc) return NULL;
    char k[32];
    snprintf(k, sizeof k, "%s_token", kind);
    const json_t *v = json_object_get(t->tc, k);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int64_t added_id(const tok *t, const char *content) {
    for (size_t i = 0; content && i < json_array_size(t->added); i++) {
        const json_t *a = json_array_get(t->added, i);
        if (!strcmp(json_string_value(json_object_get(a, "content")), content))
            return (int64_t)json_integer_value(json_object_get(a, "id"));
    }
    return -1;
}

static const char *template_token(const json_t *item) {
    return json_string_value(json_object_get(json_object_get(item, "SpecialToken"), "id"));
}

static bool str_eq(const char *a, const char *b) {
    return a && b && !strcmp(a, b);
}

static void set_add(specials *sp, int k, bool v) {
    if (sp->add[k] < 0) sp->add_order[sp->n_add++] = k;
    sp->add[k] = v;
}

/* What the post-processor adds, read the way llama.cpp reads it (simple
 * templates only: a leading BOS/CLS, a trailing EOS, a separator between A
 * and B). */
static void template_flags(const tok *t, specials *sp, const json_t *p) {
    const json_t *single = json_object_get(p, "single"), *pair = json_object_get(p, "pair");
    size_t ns = json_array_size(single);
    const char *first = NULL, *last = NULL;
    if (ns > 1) {
        if ((first = template_token(json_array_get(single, 0)))) {
            if (!t->tc)
                sp->str[SP_BOS] = first;
            else if (!str_eq(first, sp->str[SP_BOS]) && !str_eq(first, sp->str[SP_CLS])) {
                if (!sp->str[SP_BOS]) sp->str[SP_BOS] = first;
                if (!sp->str[SP_CLS]) sp->str[SP_CLS] = first;
            }
            set_add(sp, SP_BOS, str_eq(first, sp->str[SP_BOS]) || str_eq(first, sp->str[SP_CLS]));
        }
        if ((last = template_token(json_array_get(single, ns - 1)))) {
            if (!t->tc)
                sp->str[SP_EOS] = last;
            else if (!str_eq(last, sp->str[SP_EOS])) {
                /* the trailing token becomes the EOS; the old one stays as EOT (or EOM) */
                int keep = !sp->kind_on[SP_EOT] ? SP_EOT : !sp->kind_on[SP_EOM] ? SP_EOM : -1;
                if (keep >= 0) {
                    sp->kind_on[keep] = true;
                    sp->str[keep] = sp->str[SP_EOS];
                }
                sp->str[SP_EOS] = last;
            }
            set_add(sp, SP_EOS, str_eq(last, sp->str[SP_EOS]));
        }
    }
    size_t np = json_array_size(pair), a = 0, b = np;
    if (!np) return;
    if (first && str_eq(template_token(json_array_get(pair, 0)), first)) a = 1;
    if (last && str_eq(template_token(json_array_get(pair, np - 1)), last)) b = np - 1;
    if (b <= a) return;
    const char *ta = json_string_value(
        json_object_get(json_object_get(json_array_get(pair, a), "Sequence"), "id"));
    const char *tb = json_string_value(
        json_object_get(json_object_get(json_array_get(pair, b - 1), "Sequence"), "id"));
    if (!str_eq(ta, "A") || !str_eq(tb, "B") || b - a < 3) return;
    /* "A [sep] [eos] B" */
    bool add_sep = false;
    const char *e = template_token(json_array_get(pair, a + 1));
    if (e && (str_eq(e, sp->str[SP_SEP]) || str_eq(e, sp->str[SP_EOS])) && !last) add_sep = true;
    if (b - a == 4 && (e = template_token(json_array_get(pair, a + 2))) &&
        (str_eq(e, sp->str[SP_SEP]) || str_eq(e, sp->str[SP_EOS])))
        add_sep = true;
    set_add(sp, SP_SEP, add_sep);
    if (add_sep && !sp->str[SP_SEP] && t->tc) sp->str[SP_SEP] = sp->str[SP_EOS];
}

static void set_id(specials *sp, int k, int64_t id, int64_t n) {
    if (id < 0 || sp->id[k] >= 0 || !g_special[k].id_key) return;
    if (id >= n) {
        rp_log(RP_LOG_WARN, "%s token id %" PRId64 " is beyond the %" PRId64 " tokens; not written",
               g_special[k].kind, id, n);
        return;
    }
    sp->id[k] = id;
    sp->id_order[sp->n_id++] = k;
}

/* Special token ids and add flags; also marks, in a SentencePiece-style
 * vocabulary, the tokens tokenizer_config names as control tokens. */
static void resolve_specials(tok *t, specials *out) {
    specials sp;
    memset(&sp, 0, sizeof sp);
    for (int k = 0; k < N_SP; k++) {
        sp.kind_on[k] = k < SP_EOT;
        sp.add[k] = -1;
        sp.id[k] = -1;
        if (sp.kind_on[k]) sp.str[k] = tc_token(t, g_special[k].kind);
    }
    if (!sp.str[SP_BOS] && sp.str[SP_CLS] && t->tc) sp.str[SP_BOS] = sp.str[SP_CLS];
    if (!sp.str[SP_EOS] && sp.str[SP_SEP] && t->tc) sp.str[SP_EOS] = sp.str[SP_SEP];
    const json_t *post = json_object_get(t->tj, "post_processor");
    const json_t *procs = json_object_get(post, "processors");
    size_t np = json_is_array(procs) ? json_array_size(procs) : (json_is_object(post) ? 1 : 0);
    for (size_t i = 0; i < np; i++) {
        const json_t *p = json_is_array(procs) ? json_array_get(procs, i) : post;
        const char *type = json_string_value(json_object_get(p, "type"));
        if (str_eq(type, "ByteLevel")) {
            if (sp.add[SP_BOS] < 0) set_add(&sp, SP_BOS, false);
            if (sp.add[SP_EOS] < 0) set_add(&sp, SP_EOS, false);
        } else if (str_eq(type, "RobertaProcessing")) {
            set_add(&sp, SP_BOS, true);
            set_add(&sp, SP_EOS, true);
            set_add(&sp, SP_SEP, true);
            const json_t *cls = json_array_get(json_object_get(p, "cls"), 0),
                         *sep = json_array_get(json_object_get(p, "sep"), 0);
            if (!sp.str[SP_CLS] && t->tc)
                sp.str[SP_CLS] = json_is_string(cls) ? json_string_value(cls) : sp.str[SP_BOS];
            if (!sp.str[SP_SEP] && t->tc)
                sp.str[SP_SEP] = json_is_string(sep) ? json_string_value(sep) : sp.str[SP_EOS];
        } else if (str_eq(type, "TemplateProcessing")) {
            template_flags(t, &sp, p);
        }
    }
    /* tokenizer_config's add_<kind>_token where the post-processor said nothing */
    for (int k = 0; k < N_SP && t->tc; k++) {
        if (!sp.kind_on[k]) continue;
        char key[32];
        snprintf(key, sizeof key, "add_%s_token", g_special[k].kind);
        const json_t *v = json_object_get(t->tc, key);
        if (json_is_boolean(v) && sp.add[k] < 0) set_add(&sp, k, json_is_true(v));
    }
    for (int k = 0; k < N_SP; k++)
        if (sp.kind_on[k]) set_id(&sp, k, added_id(t, sp.str[k]), t->n);
    for (int k = 0; k < N_SP && t->config;
         k++) { /* config.json's <kind>_token_id (an int; lists are ignored) */
        if (!sp.kind_on[k]) continue;
        char key[32];
        int64_t x;
        snprintf(key, sizeof key, "%s_token_id", g_special[k].kind);
        if (json_int(json_object_get(t->config, key), &x) && x >= 0) set_id(&sp, k, x, t->n);
    }
    /* SentencePiece-style: the special tokens tokenizer_config names are control tokens */
    if (t->spm) {
        const json_t *extra = t->tc ? json_object_get(t->tc, "additional_special_tokens") : NULL;
        for (int64_t id = 0; id < t->n; id++) {
            if (t->type[id] != RP_TOKEN_NORMAL) continue;
            bool special = false;
            for (int k = 0; k < N_SP && !special; k++)
                special = sp.kind_on[k] && str_eq(sp.str[k], t->text[id]);
            for (size_t i = 0; i < json_array_size(extra) && !special; i++)
                special = str_eq(json_string_value(json_array_get(extra, i)), t->text[id]);
            if (special) t->type[id] = RP_TOKEN_CONTROL;
        }
    }
    *out = sp;
}

static rp_status write_specials(const specials *sp, rp_gguf_writer *w) {
    rp_status s;
    for (int i = 0; i < sp->n_id; i++) {
        int k = sp->id_order[i];
        if ((s = rp_gguf_w_set_u32(w, g_special[k].id_key, (uint32_t)sp->id[k]))) return s;
    }
    for (int i = 0; i < sp->n_add; i++) {
        int k = sp->add_order[i];
        if (g_special[k].add_key &&
            (s = rp_gguf_w_set_bool(w, g_special[k].add_key, sp->add[k] == 1)))
            return s;
    }
    return RP_OK;
}

/* Lowercase / StripAccents normalizers (also inside BertNormalizer and Sequence). */
static void normalizer_flags(const json_t *n, int *lower, int *strip) {
    const char *type = json_string_value(json_object_get(n, "type"));
    if (str_eq(type, "Lowercase"))
        *lower = 1;
    else if (str_eq(type, "StripAccents"))
        *strip = 1;
    else if (str_eq(type, "BertNormalizer")) {
        const json_t *l = json_object_get(n, "lowercase"), *a = json_object_get(n, "strip_accents");
        if (json_is_boolean(l)) *lower = json_is_true(l);
        if (json_is_boolean(a)) *strip = json_is_true(a);
    } else if (str_eq(type, "Sequence")) {
        const json_t *l = json_object_get(n, "normalizers");
        for (size_t i = 0; i < json_array_size(l); i++)
            normalizer_flags(json_array_get(l, i), lower, strip);
    }
}

/* What the tokenizer does with each normalizer step (the rule in
 * docs/hardening.md): Lowercase, StripAccents and BertNormalizer's two flags
 * become tokenizer.ggml.normalizer.*; a SentencePiece-style vocabulary's
 * Prepend and Replace of " " by U+2581 are what its tokenizer does anyway;
 * NFC is not applied (as in llama.cpp: text already in NFC, nearly all text,
 * tokenizes the same), said at the info level. Any other step is not applied
 * either, and the conversion warns by name: text it would change tokenizes
 * differently than with the Hugging Face tokenizer. */
static void check_normalizer(const tok *t, const json_t *n, const char *where) {
    if (!n || json_is_null(n)) return;
    const char *type = json_string_value(json_object_get(n, "type"));
    static const char u2581[] = "\xe2\x96\x81";
    if (str_eq(type, "Sequence")) {
        const json_t *l = json_object_get(n, "normalizers");
        if (!json_is_array(l))
            rp_log(RP_LOG_WARN,
                   "%s/tokenizer.json: %s is a Sequence without a normalizers list; "
                   "ignored",
                   t->dir, where);
        for (size_t i = 0; i < json_array_size(l); i++) {
            char sub[64];
            snprintf(sub, sizeof sub, "%s[%zu]", where, i);
            check_normalizer(t, json_array_get(l, i), sub);
        }
        return;
    }
    if (str_eq(type, "Lowercase") || str_eq(type, "StripAccents") || str_eq(type, "BertNormalizer"))
        return;
    if (t->spm && str_eq(type, "Prepend") &&
        str_eq(json_string_value(json_object_get(n, "prepend")), u2581))
        return;
    if (t->spm && str_eq(type, "Replace") &&
        str_eq(json_string_value(json_object_get(json_object_get(n, "pattern"), "String")), " ") &&
        str_eq(json_string_value(json_object_get(n, "content")), u2581))
        return;
    if (str_eq(type, "NFC")) {
        rp_log(RP_LOG_INFO, "%s/tokenizer.json: %s NFC is not applied (as in llama.cpp)", t->dir,
               where);
        return;
    }
    char what[80];
    if (type)
        snprintf(what, sizeof what, "'%.40s'", type);
    else
        snprintf(what, sizeof what, "without a type");
    rp_log(RP_LOG_WARN,
           "%s/tokenizer.json: %s %s is not applied by reprise (nor llama.cpp): text it "
           "changes tokenizes differently than with the Hugging Face tokenizer",
           t->dir, where, what);
}

/* A SentencePiece-style vocabulary splits nothing before its merges: a
 * pre-tokenizer step other than Metaspace is not applied, with a warning. */
static void check_spm_pre(const tok *t, const json_t *p, const char *where) {
    if (!p || json_is_null(p)) return;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (str_eq(type, "Sequence")) {
        const json_t *l = json_object_get(p, "pretokenizers");
        for (size_t i = 0; i < json_array_size(l); i++) {
            char sub[64];
            snprintf(sub, sizeof sub, "%s[%zu]", where, i);
            check_spm_pre(t, json_array_get(l, i), sub);
        }
        return;
    }
    if (str_eq(type, "Metaspace")) return;
    rp_log(RP_LOG_WARN,
           "%s/tokenizer.json: %s '%.40s' is not applied to a SentencePiece-style (byte_fallback) "
           "vocabulary: text it would split tokenizes differently than with the Hugging Face "
           "tokenizer",
           t->dir, where, type ? type : "(no type)");
}

/* chat_template.jinja with additional_chat_templates/NAME.jinja beside it:
 * a named list, [{"name": "default", ...}, {"name": NAME, ...}], in *list
 * (the default's text moves into it). */
static rp_status additional_templates(const char *dir, char **jinja, json_t **list) {
    size_t n = strlen(dir) + 32;
    char *sub = rp_malloc(n, "path");
    if (!sub) return RP_ERR_NOMEM;
    snprintf(sub, n, "%s/additional_chat_templates", dir);
    DIR *d = opendir(sub);
    rp_status s = RP_OK;
    struct dirent *e;
    json_t *l = NULL;
    while (d && !s && (e = readdir(d)) != NULL) {
        size_t k = strlen(e->d_name);
        if (k <= 6 || strcmp(e->d_name + k - 6, ".jinja") != 0) continue;
        if (!l) {
            l = json_array();
            json_array_append_new(l, json_pack("{s:s,s:s}", "name", "default", "template", *jinja));
        }
        size_t pn = strlen(sub) + k + 2, len;
        char *path = rp_malloc(pn, "path"), *text = NULL;
        if (!path) {
            s = RP_ERR_NOMEM;
            break;
        }
        snprintf(path, pn, "%s/%s", sub, e->d_name);
        if (!(s = rp_read_file(path, &text, &len))) {
            char *name = rp_strndup(e->d_name, k - 6);
            json_array_append_new(
                l, json_pack("{s:s,s:s}", "name", name ? name : "", "template", text));
            free(name);
        }
        free(text);
        free(path);
    }
    if (d) closedir(d);
    free(sub);
    if (l && !s) {
        /* directory order is arbitrary: sort the named ones */
        size_t m = json_array_size(l);
        for (size_t i = 2; i < m; i++)
            for (size_t j = i; j > 1; j--) {
                json_t *a = json_array_get(l, j - 1), *b = json_array_get(l, j);
                if (strcmp(json_string_value(json_object_get(a, "name")),
                           json_string_value(json_object_get(b, "name"))) <= 0)
                    break;
                json_incref(a);
                json_array_set(l, j - 1, b);
                json_array_set_new(l, j, a);
            }
        free(*jinja);
        *jinja = NULL;
        *list = l;
    } else
        json_decref(l);
    return s;
}

static rp_status write_templates(tok *t, rp_gguf_writer *w) {
    const json_t *ct = t->tc ? json_object_get(t->tc, "chat_template") : NULL;
    json_t *alt = NULL;
    char *jinja = NULL;
    rp_status s = RP_OK;
    if (!ct || json_is_null(ct)) {
        size_t n = strlen(t->dir) + 32, len;
        char *path = rp_malloc(n, "path");
        if (!path) return RP_ERR_NOMEM;
        snprintf(path, n, "%s/chat_template.jinja", t->dir);
        struct stat sb;
        if (stat(path, &sb) == 0) {
            if (!(s = rp_read_file(path, &jinja, &len)))
                s = additional_templates(t->dir, &jinja, &alt);
            if (alt) ct = alt;
        } else if (!(s = load_json(t->dir, "chat_template.json", false, &alt)) && alt) {
            ct = json_object_get(alt, "chat_template");
        }
        free(path);
        if (s) return s;
    }
    if (jinja) {
        s = rp_gguf_w_set_str(w, "tokenizer.chat_template", jinja);
    } else if (json_is_string(ct)) {
        s = rp_gguf_w_set_str(w, "tokenizer.chat_template", json_string_value(ct));
    } else if (json_is_array(ct)) { /* named templates */
        const char *names[64];
        char *owned[64];
        size_t nn = 0;
        for (size_t i = 0; i < json_array_size(ct) && !s; i++) {
            const json_t *c = json_array_get(ct, i);
            const char *name = json_string_value(json_object_get(c, "name"));
            const char *tmpl = json_string_value(json_object_get(c, "template"));
            if (!name || !tmpl) continue;
            if (!strcmp(name, "default")) {
                s = rp_gguf_w_set_str(w, "tokenizer.chat_template", tmpl);
                continue;
            }
            if (nn == 64) break;
            char *clean = rp_strdup(name);
            if (!clean) {
                s = RP_ERR_NOMEM;
                break;
            }
            for (char *p = clean; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                      (*p >= '0' && *p <= '9')))
                    *p = '_';
            char key[200];
            snprintf(key, sizeof key, "tokenizer.chat_template.%.150s", clean);
            s = rp_gguf_w_set_str(w, key, tmpl);
            names[nn] = owned[nn] = clean;
            nn++;
        }
        if (!s && nn) s = rp_gguf_w_set_arr_str(w, "tokenizer.chat_templates", names, nn);
        for (size_t i = 0; i < nn; i++) free(owned[i]);
    } else if (ct && !json_is_null(ct)) {
        rp_log(RP_LOG_WARN, "%s: chat_template is neither a string nor a list; not written",
               t->dir);
    }
    free(jinja);
    json_decref(alt);
    return s;
}

/* ---- the whole tokenizer ------------------------------------------------------ */

static rp_status convert(tok *t, int64_t pad_to, int add_space_prefix, const char *pre,
                         rp_gguf_writer *w, int64_t *n_tokens) {
    rp_status s;
    if ((s = load_json(t->dir, "tokenizer.json", true, &t->tj))) return s;
    if ((s = load_json(t->dir, "tokenizer_config.json", false, &t->tc))) return s;
    t->model = json_object_get(t->tj, "model");
    const char *mtype = json_string_value(json_object_get(t->model, "type"));
    if (!json_is_object(t->model) || !mtype) return tj_fail(t, "no \"model\" object with a type");
    if (strcmp(mtype, "BPE") != 0)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s/tokenizer.json: model type '%s' is not supported (BPE only)", t->dir,
                       mtype);
    t->vocab = json_object_get(t->model, "vocab");
    if (!json_is_object(t->vocab)) return tj_fail(t, "model.vocab is not an object");
    if (json_object_size(t->vocab) == 0) /* would convert to nothing but [PAD] tokens */
        return tj_fail(t, "model.vocab is empty");
    t->added = json_object_get(t->tj, "added_tokens");
    if (t->added && !json_is_array(t->added)) return tj_fail(t, "added_tokens is not an array");
    t->spm = json_is_true(json_object_get(t->model, "byte_fallback"));
    if (!t->spm && !has_type(json_object_get(t->tj, "pre_tokenizer"), "ByteLevel"))
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "%s/tokenizer.json: a BPE model with neither a ByteLevel pre-tokenizer nor "
                       "byte_fallback is not supported",
                       t->dir);
    if ((s = build_table(t, pad_to))) return s;
    if (t->spm)
        for (int64_t id = 0; id < t->n; id++)
            if (t->text[id] && is_byte_token(t->text[id])) t->type[id] = RP_TOKEN_BYTE;
    if ((s = read_merges(t))) return s;
    if ((s = apply_added(t))) return s;
    specials sp;
    resolve_specials(t, &sp);
    const char *model = t->spm ? RP_VOCAB_MODEL_SPM : RP_VOCAB_MODEL_BPE;
    if (!t->spm && !pre && (s = recognise_pre(t, &pre))) return s;
    if ((s = rp_gguf_w_set_str(w, "tokenizer.ggml.model", model))) return s;
    if ((s = rp_gguf_w_set_str(w, "tokenizer.ggml.pre", t->spm ? "default" : pre))) return s;
    if ((s = rp_gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", t->text, (uint64_t)t->n))) return s;
    if (t->spm && (s = rp_gguf_w_set_arr(w, "tokenizer.ggml.scores", RP_GGUF_FLOAT32, t->score,
                                         (uint64_t)t->n)))
        return s;
    if ((s = rp_gguf_w_set_arr(w, "tokenizer.ggml.token_type", RP_GGUF_INT32, t->type,
                               (uint64_t)t->n)))
        return s;
    if (!t->spm && (s = rp_gguf_w_set_arr_str(w, "tokenizer.ggml.merges", t->merges, t->n_merges)))
        return s;
    if ((s = write_specials(&sp, w))) return s;
    if (t->spm) {
        /* llama.cpp reads a missing key as true: written when the caller
         * forces it, when tokenizer_config says (as llama.cpp's Llama
         * converter writes it), or when tokenizer.json prepends no space */
        const json_t *v = t->tc ? json_object_get(t->tc, "add_prefix_space") : NULL;
        int asp = add_space_prefix >= 0 ? add_space_prefix
                  : json_is_boolean(v)  ? json_is_true(v)
                  : spm_space_prefix(t) ? -1
                                        : 0;
        if (asp >= 0 && (s = rp_gguf_w_set_bool(w, "tokenizer.ggml.add_space_prefix", asp == 1)))
            return s;
    }
    if ((s = write_templates(t, w))) return s;
    int lower = -1, strip = -1;
    normalizer_flags(json_object_get(t->tj, "normalizer"), &lower, &strip);
    check_normalizer(t, json_object_get(t->tj, "normalizer"), "normalizer");
    if (t->spm) check_spm_pre(t, json_object_get(t->tj, "pre_tokenizer"), "pre_tokenizer");
    if (lower >= 0 &&
        (s = rp_gguf_w_set_bool(w, "tokenizer.ggml.normalizer.lowercase", lower == 1)))
        return s;
    if (strip >= 0 &&
        (s = rp_gguf_w_set_bool(w, "tokenizer.ggml.normalizer.strip_accents", strip == 1)))
        return s;
    if (json_is_true(json_object_get(t->model, "ignore_merges")) && !t->spm &&
        strcmp(pre, "llama-bpe") != 0)
        rp_log(RP_LOG_WARN,
               "%s: tokenizer.json sets ignore_merges, which llama.cpp honours only for llama-bpe "
               "(pre is %s)",
               t->dir, pre);
    rp_log(RP_LOG_INFO, "tokenizer: %s, pre %s, %" PRId64 " tokens, %zu merges", model,
           t->spm ? "default" : pre, t->n, t->n_merges);
    *n_tokens = t->n;
    return RP_OK;
}

rp_status rp_convert_tokenizer(const char *dir, const json_t *config, int64_t pad_to,
                               int add_space_prefix, const char *pre, rp_gguf_writer *w,
                               int64_t *n_tokens) {
    tok t = {.dir = dir, .config = config};
    *n_tokens = 0;
    rp_status s = convert(&t, pad_to, add_space_prefix, pre, w, n_tokens);
    for (size_t i = 0; i < t.n_owned; i++) free(t.owned[i]);
    free(t.owned);
    free(t.text);
    free(t.type);
    free(t.score);
    free(t.merges);
    json_decref(t.tj);
    json_decref(t.tc);
    return s;
}
