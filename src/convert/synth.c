#include "convert/synth.h"
#include "arch/arch.h"
#include "core/planfile.h"
#include "kernels/types.h"
#include "base/util.h"
#include "text/vocab_table.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef enum { K_WEIGHT, K_NORM, K_BIAS, K_VALUES } synth_kind;

typedef struct synth_tensor {
    synth_kind kind;
    int type;
    int64_t ne0, ne1;
    uint64_t seed;
    float *values;
} synth_tensor;

struct rp_synth {
    rp_gguf_writer *w;
    int type;
    uint64_t seed;
    synth_tensor *t;
    size_t n, cap;
};

rp_synth_params rp_synth_default_params(void) {
    rp_synth_params p = {0};
    p.arch = rp_arch_at(0)->name; /* the registry's first: the plain dense decoder */
    p.n_embd = 256;
    p.n_layer = 4;
    p.n_head = 8;
    p.n_ff = 688;
    p.n_vocab = 512;
    p.n_ctx = 4096;
    p.type = RP_TYPE_F32;
    p.seed = 42;
    return p;
}

rp_gguf_writer *rp_synth_writer(rp_synth *s) {
    return s->w;
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static rp_status add(rp_synth *s, synth_kind kind, int type, int64_t ne0, int64_t ne1,
                     const float *vals, const char *name) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        synth_tensor *t = rp_realloc(s->t, cap * sizeof *t, "synth tensors");
        if (!t) return RP_ERR_NOMEM;
        s->t = t;
        s->cap = cap;
    }
    /* rows that do not divide into the type's blocks stay F16 */
    if (kind == K_WEIGHT && ne0 % rp_type_get(type)->blck_size) type = RP_TYPE_F16;
    synth_tensor *t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->type = type;
    t->ne0 = ne0;
    t->ne1 = ne1;
    t->seed = s->seed ^ name_hash(name);
    if (vals) {
        size_t n = (size_t)ne0 * (size_t)(ne1 ? ne1 : 1);
        t->values = rp_malloc(n * sizeof(float), "synth values");
        if (!t->values) return RP_ERR_NOMEM;
        memcpy(t->values, vals, n * sizeof(float));
    }
    int64_t ne[2] = {ne0, ne1};
    rp_status st = rp_gguf_w_add_tensor(s->w, name, type, ne1 ? 2 : 1, ne, NULL);
    if (st) {
        free(t->values);
        return st;
    }
    s->n++;
    return RP_OK;
}

#define FMT_NAME(buf, fmt)                                                                         \
    char buf[256];                                                                                 \
    va_list ap;                                                                                    \
    va_start(ap, fmt);                                                                             \
    vsnprintf(buf, sizeof buf, fmt, ap);                                                           \
    va_end(ap)

rp_status rp_synth_weight(rp_synth *s, int64_t ne0, int64_t ne1, const char *fmt, ...) {
    FMT_NAME(name, fmt);
    return add(s, K_WEIGHT, s->type, ne0, ne1, NULL, name);
}

rp_status rp_synth_norm(rp_synth *s, int64_t n, const char *fmt, ...) {
    FMT_NAME(name, fmt);
    return add(s, K_NORM, RP_TYPE_F32, n, 0, NULL, name);
}

rp_status rp_synth_bias(rp_synth *s, int64_t n, const char *fmt, ...) {
    FMT_NAME(name, fmt);
    return add(s, K_BIAS, RP_TYPE_F32, n, 0, NULL, name);
}

rp_status rp_synth_values(rp_synth *s, const float *v, int64_t ne0, int64_t ne1, const char *fmt,
                          ...) {
    FMT_NAME(name, fmt);
    return add(s, K_VALUES, RP_TYPE_F32, ne0, ne1, v, name);
}

rp_status rp_synth_uniform(rp_synth *s, rp_rng *rng, int64_t n, float lo, float hi, const char *fmt,
                           ...) {
    FMT_NAME(name, fmt);
    float *v = rp_malloc((size_t)n * sizeof(float), "synth values");
    if (!v) return RP_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * (float)rp_rng_uniform(rng);
    rp_status st = add(s, K_VALUES, RP_TYPE_F32, n, 0, v, name);
    free(v);
    return st;
}

/* Generated at write time, one tensor at a time, so a large model never sits
 * in memory as F32. */
static rp_status fill(void *user, uint64_t index, void *dst, uint64_t nbytes) {
    rp_synth *s = user;
    const synth_tensor *t = &s->t[index];
    size_t n = (size_t)t->ne0 * (size_t)(t->ne1 ? t->ne1 : 1);
    if (t->kind == K_VALUES) {
        memcpy(dst, t->values, nbytes);
        return RP_OK;
    }
    rp_rng rng;
    rp_rng_seed(&rng, t->seed);
    if (t->kind != K_WEIGHT) {
        float *f = dst;
        for (size_t i = 0; i < n; i++)
            f[i] = (t->kind == K_NORM ? 1.0f : 0.0f) +
                   0.1f * (float)(rp_rng_uniform(&rng) * 2.0 - 1.0);
        return RP_OK;
    }
    const rp_type_traits *tt = rp_type_get(t->type);
    float scale = 1.0f / sqrtf((float)t->ne0);
    float *row = rp_malloc((size_t)t->ne0 * sizeof(float), "synth row");
    if (!row) return RP_ERR_NOMEM;
    size_t rb = rp_row_size(t->type, t->ne0);
    for (int64_t r = 0; r < (t->ne1 ? t->ne1 : 1); r++) {
        for (int64_t i = 0; i < t->ne0; i++) row[i] = rp_rng_normal(&rng) * scale;
        tt->from_float(row, (char *)dst + (size_t)r * rb, t->ne0);
    }
    free(row);
    return RP_OK;
}

rp_status rp_synth_transformer_keys(rp_synth *s, const rp_synth_params *p, float rope_base,
                                    float eps) {
    char key[128];
    const char *a = p->arch;
    int hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    rp_status st = RP_OK;
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    st = st ? st : rp_gguf_w_set_u32(s->w, KEY("block_count"), (uint32_t)p->n_layer);
    st = st ? st : rp_gguf_w_set_u32(s->w, KEY("context_length"), (uint32_t)p->n_ctx);
    st = st ? st : rp_gguf_w_set_u32(s->w, KEY("embedding_length"), (uint32_t)p->n_embd);
    st = st ? st : rp_gguf_w_set_u32(s->w, KEY("feed_forward_length"), (uint32_t)p->n_ff);
    st = st ? st : rp_gguf_w_set_u32(s->w, KEY("attention.head_count"), (uint32_t)p->n_head);
    st = st ? st
            : rp_gguf_w_set_u32(s->w, KEY("attention.head_count_kv"),
                                (uint32_t)(p->n_head_kv ? p->n_head_kv : p->n_head));
    st = st ? st : rp_gguf_w_set_u32(s->w, KEY("attention.key_length"), (uint32_t)hd);
    st = st ? st : rp_gguf_w_set_u32(s->w, KEY("attention.value_length"), (uint32_t)hd);
    st = st ? st : rp_gguf_w_set_u32(s->w, KEY("rope.dimension_count"), (uint32_t)hd);
    st = st ? st : rp_gguf_w_set_f32(s->w, KEY("rope.freq_base"), rope_base);
    st = st ? st : rp_gguf_w_set_f32(s->w, KEY("attention.layer_norm_rms_epsilon"), eps);
#undef KEY
    return st;
}

/* A byte-level SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens,
 * printable ASCII words, then filler tokens up to n_vocab. */
static rp_status builtin_vocab(rp_synth *s, int n_vocab) {
    if (n_vocab < 259 + 95) n_vocab = 259 + 95;
    char **tok = rp_calloc((size_t)n_vocab, sizeof *tok, "vocab");
    float *scores = rp_calloc((size_t)n_vocab, sizeof *scores, "vocab");
    int32_t *types = rp_calloc((size_t)n_vocab, sizeof *types, "vocab");
    rp_status st = RP_ERR_NOMEM;
    if (!tok || !scores || !types) goto done;
    const char *fixed[3] = {"<unk>", "<s>", "</s>"};
    int k = 0;
    for (; k < 3; k++) {
        tok[k] = rp_strdup(fixed[k]);
        types[k] = k == 0 ? 2 : 3;
    }
    for (int b = 0; b < 256; b++, k++) {
        tok[k] = rp_malloc(8, "vocab");
        if (tok[k]) snprintf(tok[k], 8, "<0x%02X>", b);
        types[k] = 6;
    }
    for (int c = 32; c < 127; c++, k++) {
        char t[8];
        if (c == ' ')
            snprintf(t, sizeof t, "\xe2\x96\x81");
        else
            snprintf(t, sizeof t, "%c", c);
        tok[k] = rp_strdup(t);
        types[k] = 1;
        scores[k] = -(float)(c - 32);
    }
    for (; k < n_vocab; k++) {
        tok[k] = rp_malloc(16, "vocab");
        if (tok[k]) snprintf(tok[k], 16, "\xe2\x96\x81w%d", k);
        types[k] = 1;
        scores[k] = -1000.0f - (float)k;
    }
    for (int i = 0; i < n_vocab; i++)
        if (!tok[i]) goto done;
    st = rp_gguf_w_set_str(s->w, "tokenizer.ggml.model", RP_VOCAB_MODEL_SPM);
    st = st ? st
            : rp_gguf_w_set_arr_str(s->w, "tokenizer.ggml.tokens", (const char *const *)tok,
                                    (uint64_t)n_vocab);
    st = st ? st
            : rp_gguf_w_set_arr(s->w, "tokenizer.ggml.scores", RP_GGUF_FLOAT32, scores,
                                (uint64_t)n_vocab);
    st = st ? st
            : rp_gguf_w_set_arr(s->w, "tokenizer.ggml.token_type", RP_GGUF_INT32, types,
                                (uint64_t)n_vocab);
    st = st ? st : rp_gguf_w_set_u32(s->w, "tokenizer.ggml.bos_token_id", 1);
    st = st ? st : rp_gguf_w_set_u32(s->w, "tokenizer.ggml.eos_token_id", 2);
    st = st ? st : rp_gguf_w_set_u32(s->w, "tokenizer.ggml.unknown_token_id", 0);
done:
    if (tok)
        for (int i = 0; i < n_vocab; i++) free(tok[i]);
    free(tok);
    free(scores);
    free(types);
    return st;
}

rp_status rp_synth_write(const rp_synth_params *p, const char *path, rp_progress_fn progress,
                         void *user) {
    const rp_arch *arch = rp_arch_find(p->arch);
    if (!arch)
        return rp_fail(RP_ERR_INVALID_ARG, "synth: unknown architecture '%s' (supported: %s)",
                       p->arch, rp_arch_list());
    if (!arch->synth)
        return rp_fail(RP_ERR_UNSUPPORTED, "synth: architecture '%s' has no synthesizer", p->arch);
    const rp_type_traits *tt = rp_type_get(p->type);
    if (!tt || !tt->from_float)
        return rp_fail(RP_ERR_UNSUPPORTED, "synth: cannot write weights of type %s",
                       tt ? tt->name : "?");
    if (p->n_embd < 1 || p->n_layer < 1 || p->n_head < 1 || p->n_ff < 1 || p->n_embd > 65536 ||
        p->n_layer > 512 || p->n_ff > 1 << 18 || (p->n_head_kv && p->n_head % p->n_head_kv) ||
        (!p->head_dim && p->n_embd % p->n_head))
        return rp_fail(RP_ERR_INVALID_ARG,
                       "synth: inconsistent shape (n_embd %d, n_layer %d, n_head %d/%d, n_ff %d)",
                       p->n_embd, p->n_layer, p->n_head, p->n_head_kv, p->n_ff);
    rp_synth s = {.type = p->type, .seed = p->seed};
    s.w = rp_gguf_writer_new();
    if (!s.w) return RP_ERR_NOMEM;
    rp_status st = rp_gguf_w_set_str(s.w, "general.architecture", p->arch);
    char name[128];
    snprintf(name, sizeof name, "synthetic %s (seed %llu)", p->arch, (unsigned long long)p->seed);
    st = st ? st : rp_gguf_w_set_str(s.w, "general.name", name);
    if (rp_type_ftype(p->type) >= 0)
        st =
            st ? st : rp_gguf_w_set_u32(s.w, "general.file_type", (uint32_t)rp_type_ftype(p->type));
    rp_synth_params q = *p;
    if (!st && p->vocab_path) {
        rp_gguf *g;
        st = rp_gguf_open(p->vocab_path, &g);
        if (!st) {
            for (uint64_t i = 0; i < rp_gguf_n_kv(g) && !st; i++) {
                const rp_gguf_kv *kv = rp_gguf_kv_at(g, i);
                if (!strncmp(kv->key, "tokenizer.", 10)) st = rp_gguf_w_set(s.w, kv->key, &kv->val);
            }
            const rp_gguf_val *toks = rp_gguf_get(g, "tokenizer.ggml.tokens");
            if (!st && (!toks || toks->type != RP_GGUF_ARRAY))
                st = rp_fail(RP_ERR_FORMAT, "synth: '%s' has no tokenizer.ggml.tokens",
                             p->vocab_path);
            else if (!st)
                q.n_vocab = (int)toks->arr.n;
            rp_gguf_close(g);
        }
    } else if (!st) {
        st = builtin_vocab(&s, p->n_vocab);
        if (q.n_vocab < 259 + 95) q.n_vocab = 259 + 95;
    }
    st = st ? st : arch->synth(&s, &q);
    if (!st) {
        rp_gguf_w_set_fill(s.w, fill, &s);
        st = rp_content_hash_stamp(s.w);
        st = st ? st : rp_gguf_w_write(s.w, path, progress, user);
    }
    for (size_t i = 0; i < s.n; i++) free(s.t[i].values);
    free(s.t);
    rp_gguf_writer_free(s.w);
    return st;
}
