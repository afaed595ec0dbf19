#include "text/vocab.h"
#include "text/vocab_bpe.h"
#include "base/util.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- loading ------------------------------------------------------------- */

void rp_vocab_free(rp_vocab *v) {
    if (!v) return;
    rp_bpe_free(v->bpe);
    free(v->model);
    free(v->pre);
    free(v->text);
    free(v->len);
    free(v->scores);
    free(v->ttype);
    free(v->map.slots);
    free(v->eog);
    free(v->specials);
    free(v->arena);
    free(v);
}

static rp_status get_id(const rp_gguf *g, const char *key, int32_t n, int32_t *out) {
    const rp_gguf_val *val = rp_gguf_get(g, key);
    if (!val) return RP_OK;
    int64_t x;
    bool found;
    rp_status s = rp_gguf_get_i64(g, key, &x, &found);
    if (s) return s;
    /* -1 and 0xFFFFFFFF both mean "none" in files in the wild */
    if (x == -1 || x == 0xFFFFFFFFll) {
        *out = -1;
        return RP_OK;
    }
    if (x < 0 || x >= n)
        return rp_fail(RP_ERR_FORMAT,
                       "%s: key '%s' = %" PRId64 " is not a token id (vocabulary has %d tokens)",
                       rp_gguf_path(g), key, x, n);
    *out = (int32_t)x;
    return RP_OK;
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const rp_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (v->len[x] != v->len[y]) return v->len[x] > v->len[y] ? -1 : 1;
    return x - y;
}

/* tokenizer.ggml.model / .pre: the tokenizer's type; *none when the file
 * has no tokenizer (tokens as ids only). */
static rp_status load_type(const rp_gguf *g, rp_vocab *v, bool *none) {
    const char *model = NULL, *pre = NULL;
    bool found;
    rp_status s;
    *none = false;
    if ((s = rp_gguf_get_str(g, "tokenizer.ggml.model", &model, &found))) return s;
    if (!model) {
        *none = true;
        return RP_OK;
    }
    if ((s = rp_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &found))) return s;
    v->model = rp_strdup(model);
    v->pre = rp_strdup(pre ? pre : "default");
    if (!v->model || !v->pre) return RP_ERR_NOMEM;
    if (!strcmp(model, RP_VOCAB_MODEL_SPM))
        v->type = RP_VOCAB_SPM;
    else if (!strcmp(model, RP_VOCAB_MODEL_BPE))
        v->type = RP_VOCAB_BPE;
    else if (!strcmp(model, "none") || !strcmp(model, "no_vocab"))
        *none = true;
    else
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "tokenizer model '%s' is not supported (llama/SPM and gpt2/BPE are)", model);
    return RP_OK;
}

/* The token arrays (tokens, scores, token types), validated, copied into the
 * table; then the text -> id map. */
static rp_status load_tokens(const rp_gguf *g, rp_vocab *v) {
    const rp_gguf_val *toks, *scores = NULL, *types = NULL;
    bool found;
    rp_status s;
    if ((s = rp_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, &found))) return s;
    if (!toks)
        return rp_fail(RP_ERR_FORMAT, "%s: tokenizer.ggml.tokens is missing", rp_gguf_path(g));
    if (toks->arr.type != RP_GGUF_STRING || toks->arr.n == 0 || toks->arr.n > (1u << 24))
        return rp_fail(RP_ERR_FORMAT,
                       "%s: tokenizer.ggml.tokens at byte offset %" PRIu64
                       " must be a non-empty string array (got %s[%" PRIu64 "])",
                       rp_gguf_path(g), toks->offset, rp_gguf_type_name((int)toks->arr.type),
                       toks->arr.n);
    v->n_tokens = (int32_t)toks->arr.n;
    if ((s = rp_gguf_get_arr(g, "tokenizer.ggml.scores", &scores, &found))) return s;
    if ((s = rp_gguf_get_arr(g, "tokenizer.ggml.token_type", &types, &found))) return s;
    if (scores && (scores->arr.type != RP_GGUF_FLOAT32 || scores->arr.n != toks->arr.n))
        return rp_fail(
            RP_ERR_FORMAT, "%s: tokenizer.ggml.scores must be f32[%d] (got %s[%" PRIu64 "])",
            rp_gguf_path(g), v->n_tokens, rp_gguf_type_name((int)scores->arr.type), scores->arr.n);
    if (types && (!rp_gguf_type_is_int((int)types->arr.type) || types->arr.n != toks->arr.n))
        return rp_fail(
            RP_ERR_FORMAT,
            "%s: tokenizer.ggml.token_type must be an integer array of %d (got %s[%" PRIu64 "])",
            rp_gguf_path(g), v->n_tokens, rp_gguf_type_name((int)types->arr.type), types->arr.n);
    size_t n = (size_t)v->n_tokens, bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += (size_t)toks->arr.elems[i].str.len + 1;
    v->text = rp_calloc(n, sizeof *v->text, "vocabulary");
    v->len = rp_calloc(n, sizeof *v->len, "vocabulary");
    v->scores = rp_calloc(n, sizeof *v->scores, "vocabulary");
    v->ttype = rp_calloc(n, sizeof *v->ttype, "vocabulary");
    v->eog = rp_calloc(n, sizeof *v->eog, "vocabulary");
    v->arena = rp_malloc(bytes, "vocabulary");
    if (!v->text || !v->len || !v->scores || !v->ttype || !v->eog || !v->arena) return RP_ERR_NOMEM;
    char *p = v->arena;
    for (size_t i = 0; i < n; i++) {
        const rp_gguf_val *e = &toks->arr.elems[i];
        if (e->str.len > 65535)
            return rp_fail(RP_ERR_FORMAT, "%s: token %zu is %" PRIu64 " bytes long",
                           rp_gguf_path(g), i, e->str.len);
        memcpy(p, e->str.s, (size_t)e->str.len + 1);
        v->text[i] = p;
        v->len[i] = (uint32_t)e->str.len;
        p += e->str.len + 1;
        v->scores[i] = scores ? (float)rp_gguf_arr_f64(scores, i) : 0.0f;
        int64_t t = types ? rp_gguf_arr_i64(types, i) : RP_TOKEN_NORMAL;
        if (t < 0 || t > RP_TOKEN_BYTE)
            return rp_fail(RP_ERR_FORMAT,
                           "%s: tokenizer.ggml.token_type[%zu] = %" PRId64
                           " is not a token type (0..6)",
                           rp_gguf_path(g), i, t);
        v->ttype[i] = (int32_t)(t ? t : RP_TOKEN_NORMAL);
    }
    return rp_vocab_map_build(v) ? RP_OK : RP_ERR_NOMEM;
}

/* bos, eos, ... and the add_* flags: the tokenizer type's defaults, then the
 * file's keys. */
static rp_status load_special_ids(const rp_gguf *g, rp_vocab *v) {
    struct {
        const char *key;
        int32_t *dst;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", &v->bos},
        {"tokenizer.ggml.eos_token_id", &v->eos},
        {"tokenizer.ggml.eot_token_id", &v->eot},
        {"tokenizer.ggml.unknown_token_id", &v->unk},
        {"tokenizer.ggml.padding_token_id", &v->pad},
        {"tokenizer.ggml.seperator_token_id", &v->sep},
    };
    if (v->type == RP_VOCAB_SPM) {
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
    } else {
        v->bos = v->eos = 11; /* gpt2's <|endoftext|> unless the file says otherwise */
        if (v->n_tokens <= 11) v->bos = v->eos = -1;
    }
    rp_status s;
    for (size_t i = 0; i < RP_ARRAY_LEN(ids); i++)
        if ((s = get_id(g, ids[i].key, v->n_tokens, ids[i].dst))) return s;
    v->add_bos = v->type == RP_VOCAB_SPM;
    v->add_eos = false;
    v->add_space_prefix = v->type == RP_VOCAB_SPM;
    bool b, found;
    if ((s = rp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, &found))) return s;
    if (found) v->add_bos = b;
    if ((s = rp_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b, &found))) return s;
    if (found) v->add_eos = b;
    if ((s = rp_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b, &found))) return s;
    if (found) v->add_space_prefix = b;
    return RP_OK;
}

/* end-of-generation set: eos, eot, and the usual end-of-turn texts (an eot
 * found among them when the file names none) */
static void mark_eog(rp_vocab *v) {
    static const char *const eog_texts[] = {"<|eot_id|>",    "<|im_end|>",      "<|end|>",
                                            "<end_of_turn>", "<|endoftext|>",   "<|eom_id|>",
                                            "<EOT>",         "<|end_of_text|>", "</s>"};
    if (v->eos >= 0) v->eog[v->eos] = true;
    if (v->eot >= 0) v->eog[v->eot] = true;
    for (size_t i = 0; i < RP_ARRAY_LEN(eog_texts); i++) {
        int32_t id = rp_vocab_find(v, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0 && (v->ttype[id] == RP_TOKEN_CONTROL || v->ttype[id] == RP_TOKEN_USER_DEFINED))
            v->eog[id] = true;
    }
    if (v->eot < 0) {
        static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>",
                                                "<end_of_turn>"};
        for (size_t i = 0; i < RP_ARRAY_LEN(eot_texts) && v->eot < 0; i++) {
            int32_t id = rp_vocab_find(v, eot_texts[i], strlen(eot_texts[i]));
            if (id >= 0 && v->ttype[id] == RP_TOKEN_CONTROL) v->eot = id;
        }
    }
}

/* special tokens recognised in text, longest first */
static rp_status index_specials(rp_vocab *v) {
    v->specials = rp_calloc((size_t)v->n_tokens, sizeof *v->specials, "special tokens");
    if (!v->specials) return RP_ERR_NOMEM;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if ((v->ttype[i] == RP_TOKEN_CONTROL || v->ttype[i] == RP_TOKEN_USER_DEFINED ||
             v->ttype[i] == RP_TOKEN_UNKNOWN) &&
            v->len[i] > 0)
            v->specials[v->n_specials++] = i;
    qsort_r(v->specials, (size_t)v->n_specials, sizeof *v->specials, cmp_special, v);
    for (int32_t k = 0; k < v->n_specials; k++)
        v->special_first[(uint8_t)v->text[v->specials[k]][0]] = true;
    return RP_OK;
}

rp_status rp_vocab_load(const rp_gguf *g, rp_vocab **out) {
    *out = NULL;
    rp_vocab *v = rp_calloc(1, sizeof *v, "vocabulary");
    if (!v) return RP_ERR_NOMEM;
    v->bos = v->eos = v->eot = v->unk = v->pad = v->sep = v->nl = -1;
    for (int i = 0; i < 256; i++) v->byte_tok[i] = -1;
    bool none;
    rp_status s = load_type(g, v, &none);
    if (!s && none) {
        *out = v;
        return RP_OK;
    }
    if (!s) s = load_tokens(g, v);
    if (!s) s = load_special_ids(g, v);
    if (!s) mark_eog(v);
    if (!s) s = index_specials(v);
    if (!s && v->type == RP_VOCAB_SPM) {
        for (int c = 0; c < 256; c++) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", c);
            v->byte_tok[c] = rp_vocab_find(v, hex, 6);
        }
        v->nl = v->byte_tok['\n'];
    } else if (!s) {
        s = rp_bpe_init(v, g);
    }
    if (s) {
        rp_vocab_free(v);
        return s;
    }
    *out = v;
    return RP_OK;
}

/* ---- SentencePiece-style tokenizer --------------------------------------- */

/* Symbols form a linked list over the text; a max-heap of candidate bigrams
 * (by the merged token's score, then leftmost) drives the merges. */
typedef struct spm_sym {
    int prev, next;
    const char *text;
    size_t n;
} spm_sym;

typedef struct spm_bigram {
    int left, right;
    float score;
    size_t size;
} spm_bigram;

typedef struct spm_heap {
    spm_bigram *v;
    size_t n, cap;
} spm_heap;

static bool bigram_less(const spm_bigram *a, const spm_bigram *b) {
    return a->score < b->score || (a->score == b->score && a->left > b->left);
}

static bool heap_push(spm_heap *h, spm_bigram b) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        spm_bigram *p = rp_realloc(h->v, cap * sizeof *p, "tokenizer heap");
        if (!p) return false;
        h->v = p;
        h->cap = cap;
    }
    size_t i = h->n++;
    h->v[i] = b;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_less(&h->v[parent], &h->v[i])) break;
        spm_bigram t = h->v[parent];
        h->v[parent] = h->v[i];
        h->v[i] = t;
        i = parent;
    }
    return true;
}

static spm_bigram heap_pop(spm_heap *h) {
    spm_bigram top = h->v[0];
    h->v[0] = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && bigram_less(&h->v[m], &h->v[l])) m = l;
        if (r < h->n && bigram_less(&h->v[m], &h->v[r])) m = r;
        if (m == i) break;
        spm_bigram t = h->v[m];
        h->v[m] = h->v[i];
        h->v[i] = t;
        i = m;
    }
    return top;
}

static size_t utf8_len(unsigned char c) {
    static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

typedef struct spm_state {
    const rp_vocab *v;
    spm_sym *sym;
    spm_heap heap;
} spm_state;

static bool try_bigram(spm_state *st, int left, int right) {
    if (left < 0 || right < 0) return true;
    size_t n = st->sym[left].n + st->sym[right].n;
    int32_t id = rp_vocab_find(st->v, st->sym[left].text, n);
    if (id < 0) return true;
    spm_bigram b = {left, right, st->v->scores[id], n};
    return heap_push(&st->heap, b);
}

/* A final symbol is a token, or (never merged and not in the vocabulary) its
 * bytes as <0xNN> tokens. Merges only ever form texts that are tokens, so no
 * deeper re-segmentation is needed. */
static bool resegment(const spm_state *st, const spm_sym *s, rp_tokvec *out) {
    int32_t id = rp_vocab_find(st->v, s->text, s->n);
    if (id >= 0) return rp_tokvec_push(out, id);
    for (size_t j = 0; j < s->n; j++) {
        int32_t b = st->v->byte_tok[(unsigned char)s->text[j]];
        if (b < 0) b = st->v->unk;
        if (b >= 0 && !rp_tokvec_push(out, b)) return false;
    }
    return true;
}

rp_status rp_spm_tokenize(const rp_vocab *v, const char *text, size_t len, bool prefix_space,
                          rp_tokvec *out) {
    /* escape: optional leading space, then ' ' -> U+2581 */
    size_t n_sp = 0;
    for (size_t i = 0; i < len; i++) n_sp += text[i] == ' ';
    size_t elen = len + 2 * n_sp + (prefix_space ? 3 : 0);
    if (elen == 0) return RP_OK;
    char *esc = rp_malloc(elen, "tokenizer");
    spm_sym *sym = rp_malloc(elen * sizeof *sym, "tokenizer");
    if (!esc || !sym) {
        free(esc);
        free(sym);
        return RP_ERR_NOMEM;
    }
    size_t k = 0;
    if (prefix_space) {
        memcpy(esc, "\xe2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            esc[k++] = text[i];
        }
    }
    spm_state st = {.v = v, .sym = sym};
    int ns = 0;
    for (size_t off = 0; off < elen;) {
        size_t cl = utf8_len((unsigned char)esc[off]);
        if (cl > elen - off) cl = elen - off;
        sym[ns].text = esc + off;
        sym[ns].n = cl;
        sym[ns].prev = ns - 1;
        off += cl;
        sym[ns].next = off == elen ? -1 : ns + 1;
        ns++;
    }
    rp_status s = RP_OK;
    for (int i = 1; i < ns; i++)
        if (!try_bigram(&st, i - 1, i)) {
            s = RP_ERR_NOMEM;
            goto done;
        }
    while (st.heap.n) {
        spm_bigram b = heap_pop(&st.heap);
        spm_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (!try_bigram(&st, l->prev, b.left) || !try_bigram(&st, b.left, l->next)) {
            s = RP_ERR_NOMEM;
            goto done;
        }
    }
    for (int i = 0; i != -1 && ns > 0; i = sym[i].next)
        if (!resegment(&st, &sym[i], out)) {
            s = RP_ERR_NOMEM;
            goto done;
        }
done:
    free(st.heap.v);
    free(esc);
    free(sym);
    return s;
}

/* ---- public tokenize / detokenize --------------------------------------- */

int32_t rp_vocab_n_tokens(const rp_vocab *v) {
    return v ? v->n_tokens : 0;
}
int32_t rp_vocab_bos(const rp_vocab *v) {
    return v->bos;
}
int32_t rp_vocab_eos(const rp_vocab *v) {
    return v->eos;
}
bool rp_vocab_add_bos(const rp_vocab *v) {
    return v->add_bos && v->bos >= 0;
}
bool rp_vocab_add_eos(const rp_vocab *v) {
    return v->add_eos && v->eos >= 0;
}
bool rp_vocab_is_eog(const rp_vocab *v, int32_t t) {
    return t >= 0 && t < v->n_tokens && v->eog[t];
}
const char *rp_vocab_text(const rp_vocab *v, int32_t t) {
    return t >= 0 && t < v->n_tokens ? v->text[t] : NULL;
}

rp_status rp_tokenize(const rp_vocab *v, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    if (!v || v->type == RP_VOCAB_NONE)
        return rp_fail(RP_ERR_UNSUPPORTED, "model has no tokenizer");
    rp_tokvec tv = {0};
    rp_status s = RP_OK;
    if (add_special && rp_vocab_add_bos(v) && !rp_tokvec_push(&tv, v->bos)) return RP_ERR_NOMEM;
    /* Partition on special tokens: user-defined ones always, control ones
     * only when parse_special. Then tokenize each raw fragment. */
    bool prev_special = true;
    size_t i = 0, frag = 0;
    while (i <= len) {
        int32_t hit = -1;
        if (i < len && !v->special_first[(uint8_t)text[i]]) {
            i++;
            continue;
        }
        if (i < len)
            for (int32_t k = 0; k < v->n_specials; k++) {
                int32_t id = v->specials[k];
                if (!parse_special && v->ttype[id] != RP_TOKEN_USER_DEFINED) continue;
                if (v->len[id] <= len - i && memcmp(text + i, v->text[id], v->len[id]) == 0) {
                    hit = id;
                    break;
                }
            }
        if (hit < 0 && i < len) {
            i++;
            continue;
        }
        if (i > frag) {
            if (v->type == RP_VOCAB_SPM)
                s = rp_spm_tokenize(v, text + frag, i - frag, v->add_space_prefix && prev_special,
                                    &tv);
            else
                s = rp_bpe_tokenize(v, text + frag, i - frag, &tv);
            if (s) break;
            prev_special = false;
        }
        if (hit < 0) break;
        if (!rp_tokvec_push(&tv, hit)) {
            s = RP_ERR_NOMEM;
            break;
        }
        prev_special = true;
        i += v->len[hit];
        frag = i;
    }
    if (!s && add_special && rp_vocab_add_eos(v) && !rp_tokvec_push(&tv, v->eos)) s = RP_ERR_NOMEM;
    if (s) {
        free(tv.v);
        return s;
    }
    if (!tv.v) tv.v = rp_malloc(sizeof(int32_t), "tokens");
    if (!tv.v) return RP_ERR_NOMEM;
    *out = tv.v;
    *n_out = tv.n;
    return RP_OK;
}

static int copy_out(char *buf, size_t size, const char *s, size_t n) {
    if (size) {
        size_t k = n < size - 1 ? n : size - 1;
        memcpy(buf, s, k);
        buf[k] = 0;
    }
    return (int)n;
}

int rp_token_to_piece(const rp_vocab *v, int32_t t, bool special, char *buf, size_t size) {
    if (!v || t < 0 || t >= v->n_tokens) return copy_out(buf, size, "", 0);
    int tt = v->ttype[t];
    if (tt == RP_TOKEN_CONTROL)
        return special ? copy_out(buf, size, v->text[t], v->len[t]) : copy_out(buf, size, "", 0);
    if (tt == RP_TOKEN_UNUSED) return copy_out(buf, size, "", 0);
    if (tt == RP_TOKEN_USER_DEFINED) return copy_out(buf, size, v->text[t], v->len[t]);
    if (v->type == RP_VOCAB_BPE) return rp_bpe_decode_token(v, t, buf, size);
    if (tt == RP_TOKEN_UNKNOWN) return copy_out(buf, size, "\xe2\x96\x85", 3);
    if (tt == RP_TOKEN_BYTE) {
        /* "<0xNN>" */
        const char *s = v->text[t];
        char c = 0;
        if (v->len[t] == 6) c = (char)strtol(s + 3, NULL, 16);
        return copy_out(buf, size, &c, 1);
    }
    /* normal SPM piece: U+2581 -> ' ' */
    char tmp[1024];
    size_t k = 0;
    const char *s = v->text[t];
    for (size_t i = 0; i < v->len[t] && k < sizeof tmp; i++) {
        if (i + 2 < v->len[t] + 0u && (unsigned char)s[i] == 0xe2 &&
            (unsigned char)s[i + 1] == 0x96 && (unsigned char)s[i + 2] == 0x81) {
            tmp[k++] = ' ';
            i += 2;
        } else {
            tmp[k++] = s[i];
        }
    }
    return copy_out(buf, size, tmp, k);
}

int rp_detokenize(const rp_vocab *v, const int32_t *tokens, size_t n, bool special, char *buf,
                  size_t size) {
    rp_buf b = {0};
    bool first = true;
    char piece[1024];
    for (size_t i = 0; i < n; i++) {
        int k = rp_token_to_piece(v, tokens[i], special, piece, sizeof piece);
        if (k > (int)sizeof piece - 1) k = (int)sizeof piece - 1;
        const char *p = piece;
        if (first && k > 0 && v->add_space_prefix && v->type == RP_VOCAB_SPM && piece[0] == ' ') {
            p++;
            k--;
        }
        if (k > 0 ||
            (tokens[i] >= 0 && tokens[i] < v->n_tokens && v->ttype[tokens[i]] != RP_TOKEN_CONTROL))
            first = false;
        rp_buf_append(&b, p, (size_t)k);
    }
    int len = (int)b.len;
    copy_out(buf, size, b.data ? b.data : "", b.len);
    rp_buf_free(&b);
    return len;
}
