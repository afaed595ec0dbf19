/* Quantization: a model's weights rewritten in another type, with the
 * per-tensor mixtures llama.cpp uses for its _S/_M/_L types, so a Q4_K_M made
 * here holds the same types (and, from the same F32 source, the same bytes) as
 * llama.cpp's. The plan (every tensor's type) is made from the header alone;
 * tensors are converted one at a time at write time, rows spread over the
 * threads; the output is written to a temporary file and renamed. */
#include "base/threads.h"
#include "arch/tensors.h"
#include "base/util.h"
#include "core/planfile.h"
#include "format/gguf.h"
#include "kernels/types.h"

#include <inttypes.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

/* ---- target types ----------------------------------------------------------- */

typedef struct qtype {
    const char *name; /* as given */
    int ftype;        /* llama_ftype stored in general.file_type */
    int base;         /* type of most weights */
} qtype;

enum {
    F_F32 = 0,
    F_F16 = 1,
    F_Q4_0 = 2,
    F_Q4_1 = 3,
    F_Q8_0 = 7,
    F_Q5_0 = 8,
    F_Q5_1 = 9,
    F_Q2_K = 10,
    F_Q3_K_S = 11,
    F_Q3_K_M = 12,
    F_Q3_K_L = 13,
    F_Q4_K_S = 14,
    F_Q4_K_M = 15,
    F_Q5_K_S = 16,
    F_Q5_K_M = 17,
    F_Q6_K = 18,
    F_IQ4_NL = 25,
    F_IQ4_XS = 30,
    F_BF16 = 32,
};

static const qtype g_qtypes[] = {
    {"Q4_0", F_Q4_0, RP_TYPE_Q4_0},       {"Q4_1", F_Q4_1, RP_TYPE_Q4_1},
    {"Q5_0", F_Q5_0, RP_TYPE_Q5_0},       {"Q5_1", F_Q5_1, RP_TYPE_Q5_1},
    {"Q8_0", F_Q8_0, RP_TYPE_Q8_0},       {"Q2_K", F_Q2_K, RP_TYPE_Q2_K},
    {"Q3_K_S", F_Q3_K_S, RP_TYPE_Q3_K},   {"Q3_K_M", F_Q3_K_M, RP_TYPE_Q3_K},
    {"Q3_K_L", F_Q3_K_L, RP_TYPE_Q3_K},   {"Q4_K_S", F_Q4_K_S, RP_TYPE_Q4_K},
    {"Q4_K_M", F_Q4_K_M, RP_TYPE_Q4_K},   {"Q5_K_S", F_Q5_K_S, RP_TYPE_Q5_K},
    {"Q5_K_M", F_Q5_K_M, RP_TYPE_Q5_K},   {"Q6_K", F_Q6_K, RP_TYPE_Q6_K},
    {"IQ4_NL", F_IQ4_NL, RP_TYPE_IQ4_NL}, {"IQ4_XS", F_IQ4_XS, RP_TYPE_IQ4_XS},
    {"F16", F_F16, RP_TYPE_F16},          {"BF16", F_BF16, RP_TYPE_BF16},
    {"F32", F_F32, RP_TYPE_F32},
};

static const qtype *find_qtype(const char *s) {
    for (size_t i = 0; s && i < RP_ARRAY_LEN(g_qtypes); i++) {
        const char *a = g_qtypes[i].name, *b = s;
        while (*a && *b && (*a | 32) == (*b | 32)) a++, b++;
        if (!*a && !*b) return &g_qtypes[i];
    }
    return NULL;
}

const char *rp_quantize_type_list(void) {
    return "Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K "
           "IQ4_NL IQ4_XS F16 BF16 F32";
}

int rp_quantize_ftype(const char *name) {
    const qtype *q = find_qtype(name);
    return q ? q->ftype : -1;
}

rp_quantize_params rp_quantize_default_params(void) {
    return (rp_quantize_params){0};
}

/* ---- which tensors are quantized -------------------------------------------- */

/* 2-D weights are, except these (norms, routers, small or positional tables). */
static const char *const g_keep[] = {
    "_norm.weight", "ffn_gate_inp.weight",  "altup",
    "laurel",       "per_layer_model_proj", "position_embd",
    "token_types",  "ssm_conv1d",           "shortconv.conv.weight",
    "time_mix_",    "attn_rel_b.weight",    "rel_pos",
    "patch_embd",   "patch_merger",
};

static bool quantizable(const rp_gguf_tensor *t) {
    const size_t len = strlen(t->name);
    if (t->n_dims < 2 || len < 6 || strcmp(t->name + len - 6, "weight")) return false;
    for (size_t i = 0; i < RP_ARRAY_LEN(g_keep); i++)
        if (strstr(t->name, g_keep[i])) return false;
    return true;
}

/* What a tensor is to the mixture rules. */
typedef enum quant_cat {
    C_OTHER,
    C_TOKEN_EMBD,
    C_OUTPUT,
    C_ATTN_V,
    C_ATTN_K,
    C_ATTN_Q,
    C_ATTN_OUT,
    C_FFN_UP,
    C_FFN_GATE,
    C_FFN_DOWN
} quant_cat;

/* The quantization category of a tensor by llama.cpp's name rules: the
 * answer for files of architectures reprise has no tensor table for. */
static quant_cat category_by_name(const char *name) {
    if (!strcmp(name, "output.weight")) return C_OUTPUT;
    if (!strcmp(name, "token_embd.weight")) return C_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") ||
        strstr(name, "attn_v.weight"))
        return C_ATTN_V;
    if (strstr(name, "attn_k.weight")) return C_ATTN_K;
    if (strstr(name, "attn_q.weight")) return C_ATTN_Q;
    if (strstr(name, "attn_output.weight")) return C_ATTN_OUT;
    if (strstr(name, "ffn_up")) return C_FFN_UP;
    if (strstr(name, "ffn_gate")) return C_FFN_GATE;
    if (strstr(name, "ffn_down")) return C_FFN_DOWN;
    return C_OTHER;
}

/* The quantization category of a tensor: its row in the architecture's
 * tensor table (src/arch/tensors.h), or the name rules when the
 * architecture or the tensor is not in a table. */
static quant_cat quant_category(const char *arch, const char *name) {
    switch (arch ? rp_arch_tensor_category(arch, name) : RP_TCAT_UNKNOWN) {
    case RP_TCAT_TOKEN_EMBD:
        return C_TOKEN_EMBD;
    case RP_TCAT_OUTPUT:
        return C_OUTPUT;
    case RP_TCAT_ATTN_Q:
        return C_ATTN_Q;
    case RP_TCAT_ATTN_K:
        return C_ATTN_K;
    case RP_TCAT_ATTN_V:
        return C_ATTN_V;
    case RP_TCAT_ATTN_OUTPUT:
        return C_ATTN_OUT;
    case RP_TCAT_FFN_UP:
        return C_FFN_UP;
    case RP_TCAT_FFN_GATE:
        return C_FFN_GATE;
    case RP_TCAT_FFN_DOWN:
        return C_FFN_DOWN;
    case RP_TCAT_OTHER:
    case RP_TCAT_NORM:
        return C_OTHER;
    case RP_TCAT_UNKNOWN:
        break;
    }
    return category_by_name(name);
}

/* The layers of a mixture that get more bits: the first and last eighth and
 * every third in between. */
static bool more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

typedef struct mix_state {
    int ftype;
    bool tied; /* no output.weight: token_embd is also the output */
    int n_gqa; /* head_count / head_count_kv */
    int n_attn_v, n_ffn_down, i_attn_v, i_ffn_down;
    const char *arch; /* general.architecture, NULL when absent */
} mix_state;

/* llama.cpp's choice for one tensor of a mixture (the rules of the types
 * this module writes). */
static int mixture_type(mix_state *s, const rp_gguf_tensor *t, int type) {
    const quant_cat c = quant_category(s->arch, t->name);
    const int f = s->ftype;
    if (c == C_OUTPUT || (s->tied && c == C_TOKEN_EMBD)) {
        if (t->ne[0] % rp_type_get(type)->blck_size) return RP_TYPE_Q8_0;
        return type == RP_TYPE_Q8_0 ? type : RP_TYPE_Q6_K;
    }
    if (c == C_ATTN_V) {
        const int i = s->i_attn_v++, n = s->n_attn_v;
        if (f == F_Q2_K) return s->n_gqa >= 4 ? RP_TYPE_Q4_K : RP_TYPE_Q3_K;
        if (f == F_Q3_K_M) return i < 2 ? RP_TYPE_Q5_K : RP_TYPE_Q4_K;
        if (f == F_Q3_K_L) return RP_TYPE_Q5_K;
        if ((f == F_IQ4_NL || f == F_IQ4_XS) && s->n_gqa >= 4) return RP_TYPE_Q5_K;
        if ((f == F_Q4_K_M || f == F_Q5_K_M) && more_bits(i, n)) return RP_TYPE_Q6_K;
        if (f == F_Q4_K_S && i < 4) return RP_TYPE_Q5_K;
        return type;
    }
    if (c == C_FFN_DOWN) {
        const int i = s->i_ffn_down++, n = s->n_ffn_down;
        if (f == F_Q2_K) return RP_TYPE_Q3_K;
        if (f == F_Q3_K_M) return i < n / 16 ? RP_TYPE_Q5_K : RP_TYPE_Q4_K;
        if (f == F_Q3_K_L) return RP_TYPE_Q5_K;
        if (f == F_Q4_K_M) return more_bits(i, n) ? RP_TYPE_Q6_K : type;
        if (i < n / 8 && (f == F_IQ4_NL || f == F_IQ4_XS)) return RP_TYPE_Q5_K;
        if (f == F_Q5_K_M && more_bits(i, n)) return RP_TYPE_Q6_K;
        if (f == F_Q4_K_S && i < n / 8) return RP_TYPE_Q5_K;
        return type;
    }
    if (c == C_ATTN_OUT) {
        if (f == F_Q2_K) return RP_TYPE_Q3_K;
        if (f == F_Q3_K_M) return RP_TYPE_Q4_K;
        if (f == F_Q3_K_L) return RP_TYPE_Q5_K;
    }
    return type;
}

/* A type whose blocks fit rows of ne0 elements, as llama.cpp falls back. */
static int fallback_type(int type, int64_t ne0) {
    if (ne0 % rp_type_get(type)->blck_size == 0) return type;
    int f = RP_TYPE_F16;
    switch (type) {
    case RP_TYPE_Q2_K:
    case RP_TYPE_Q3_K:
        f = RP_TYPE_Q4_0;
        break;
    case RP_TYPE_Q4_K:
        f = RP_TYPE_Q5_0;
        break;
    case RP_TYPE_Q5_K:
        f = RP_TYPE_Q5_1;
        break;
    case RP_TYPE_Q6_K:
        f = RP_TYPE_Q8_0;
        break;
    case RP_TYPE_IQ4_XS:
        f = RP_TYPE_IQ4_NL;
        break;
    default:
        break;
    }
    return ne0 % rp_type_get(f)->blck_size ? RP_TYPE_F16 : f;
}

/* ---- the plan ----------------------------------------------------------------- */

#define MAX_OVERRIDES 32

typedef struct qplan_tensor {
    const rp_gguf_tensor *src;
    int type, fallback_from;
    uint64_t bytes_out;
} qplan_tensor;

struct rp_quantize_plan {
    rp_gguf *g;
    const qtype *qt;
    int n_threads;
    qplan_tensor *t; /* [n] in file order */
    uint64_t n, bytes_in, bytes_out;
    int n_fallback;
    regex_t re[MAX_OVERRIDES];
    int re_type[MAX_OVERRIDES], n_re;
};

void rp_quantize_plan_free(rp_quantize_plan *q) {
    if (!q) return;
    for (int i = 0; i < q->n_re; i++) regfree(&q->re[i]);
    free(q->t);
    rp_gguf_close(q->g);
    free(q);
}

/* "REGEX=TYPE" into q's next override (messages name the option as the tool
 * spells it). */
static rp_status add_override(rp_quantize_plan *q, const char *spec) {
    if (q->n_re >= MAX_OVERRIDES)
        return rp_fail(RP_ERR_INVALID_ARG, "--tensor-type: at most %d overrides", MAX_OVERRIDES);
    const char *eq = strrchr(spec, '=');
    const int t = eq ? rp_type_from_name(eq + 1) : -1;
    if (!eq || eq == spec)
        return rp_fail(RP_ERR_INVALID_ARG, "--tensor-type '%s': expected REGEX=TYPE", spec);
    if (t < 0 || !rp_type_get(t)->from_float || t == RP_TYPE_Q8_1 || t == RP_TYPE_Q8_K)
        return rp_fail(RP_ERR_INVALID_ARG,
                       "--tensor-type '%s': '%s' is not a type reprise can write", spec, eq + 1);
    char pat[256];
    snprintf(pat, sizeof pat, "%.*s", (int)(eq - spec), spec);
    int rc = regcomp(&q->re[q->n_re], pat, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        char msg[128];
        regerror(rc, &q->re[q->n_re], msg, sizeof msg);
        return rp_fail(RP_ERR_INVALID_ARG, "--tensor-type '%s': bad regular expression: %s", spec,
                       msg);
    }
    q->re_type[q->n_re++] = t;
    return RP_OK;
}

/* The model facts the mixture needs. */
static mix_state mix_init(const rp_quantize_plan *q) {
    mix_state ms = {
        .ftype = q->qt->ftype, .tied = !rp_gguf_find_tensor(q->g, "output.weight"), .n_gqa = 1};
    const char *arch = NULL;
    bool found;
    rp_gguf_get_str(q->g, "general.architecture", &arch, &found);
    ms.arch = arch;
    if (arch) {
        char k1[128], k2[128];
        uint32_t nh = 0, nkv = 0;
        snprintf(k1, sizeof k1, "%s.attention.head_count", arch);
        snprintf(k2, sizeof k2, "%s.attention.head_count_kv", arch);
        if (rp_gguf_get_u32(q->g, k1, &nh, &found) == RP_OK && found &&
            rp_gguf_get_u32(q->g, k2, &nkv, &found) == RP_OK && found && nkv)
            ms.n_gqa = (int)(nh / nkv);
    }
    for (uint64_t i = 0; i < q->n; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(q->g, i);
        if (!quantizable(t)) continue;
        const quant_cat c = quant_category(ms.arch, t->name);
        ms.n_attn_v += c == C_ATTN_V;
        ms.n_ffn_down += c == C_FFN_DOWN;
    }
    return ms;
}

/* The type of one quantizable tensor: an override, the adapters' F16, the mixture. */
static rp_status choose(rp_quantize_plan *q, const rp_quantize_params *p, mix_state *ms,
                        const rp_gguf_tensor *t, int *type) {
    const rp_type_traits *st = rp_type_get((int)t->type);
    if (st->is_quantized && !p->allow_requantize)
        return rp_fail(RP_ERR_UNSUPPORTED,
                       "tensor '%s' is already %s: quantizing it again loses quality "
                       "(--allow-requantize)",
                       t->name, st->name);
    if (!st->to_float)
        return rp_fail(RP_ERR_UNSUPPORTED, "tensor '%s' has type %s, which reprise cannot read",
                       t->name, st->name);
    int manual = -1;
    for (int k = 0; k < q->n_re && manual < 0; k++)
        if (!regexec(&q->re[k], t->name, 0, NULL, 0)) manual = q->re_type[k];
    const bool target_quant = rp_type_get(q->qt->base)->is_quantized;
    *type = q->qt->base;
    if (manual >= 0)
        *type = manual;
    else if (!p->pure && strstr(t->name, "ffn_gate_up_adapter_"))
        *type = RP_TYPE_F16;
    else if (!p->pure && target_quant)
        *type = mixture_type(ms, t, *type);
    else if (!p->pure)
        mixture_type(ms, t, *type); /* keep the layer counters in step */
    return RP_OK;
}

rp_status rp_quantize_plan_new(const char *in_path, const rp_quantize_params *p,
                               rp_quantize_plan **out) {
    *out = NULL;
    const qtype *qt = find_qtype(p->type);
    if (!qt)
        return rp_fail(RP_ERR_INVALID_ARG, "unknown quantization type '%s' (%s)",
                       p->type ? p->type : "", rp_quantize_type_list());
    rp_quantize_plan *q = rp_calloc(1, sizeof *q, "quantization plan");
    if (!q) return RP_ERR_NOMEM;
    q->qt = qt;
    q->n_threads = p->n_threads > 0 ? p->n_threads : rp_n_physical_cores();
    rp_status s = RP_OK;
    for (int i = 0; i < p->n_tensor_types && !s; i++) s = add_override(q, p->tensor_types[i]);
    if (!s) s = rp_gguf_open(in_path, &q->g);
    if (!s) {
        q->n = rp_gguf_n_tensors(q->g);
        q->t = rp_calloc(q->n ? q->n : 1, sizeof *q->t, "quantization plan");
        if (!q->t) s = RP_ERR_NOMEM;
    }
    mix_state ms = {0};
    if (!s) ms = mix_init(q);
    for (uint64_t i = 0; !s && i < q->n; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(q->g, i);
        const rp_type_traits *st = rp_type_get((int)t->type);
        qplan_tensor *pt = &q->t[i];
        pt->src = t;
        pt->fallback_from = -1;
        int type = (int)t->type;
        if (!quantizable(t)) {
            if (t->n_dims == 1 && st->to_float && t->type != RP_TYPE_F32) type = RP_TYPE_F32;
        } else {
            if ((s = choose(q, p, &ms, t, &type))) break;
            const int fb = fallback_type(type, t->ne[0]);
            if (fb != type) {
                pt->fallback_from = type;
                type = fb;
                q->n_fallback++;
            }
        }
        pt->type = type;
        pt->bytes_out = rp_row_size(type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        q->bytes_in += t->nbytes;
        q->bytes_out += pt->bytes_out;
    }
    if (s) {
        rp_quantize_plan_free(q);
        return s;
    }
    *out = q;
    return RP_OK;
}

const char *rp_quantize_plan_type(const rp_quantize_plan *q) {
    return q->qt->name;
}

uint64_t rp_quantize_plan_n_tensors(const rp_quantize_plan *q) {
    return q->n;
}

bool rp_quantize_plan_tensor(const rp_quantize_plan *q, uint64_t i, rp_quantize_tensor *out) {
    memset(out, 0, sizeof *out);
    if (i >= q->n) return false;
    const qplan_tensor *pt = &q->t[i];
    *out = (rp_quantize_tensor){.name = pt->src->name,
                                .type_in = (int)pt->src->type,
                                .type_out = pt->type,
                                .fallback_from = pt->fallback_from,
                                .row = pt->src->ne[0],
                                .bytes_in = pt->src->nbytes,
                                .bytes_out = pt->bytes_out};
    return true;
}

void rp_quantize_plan_totals(const rp_quantize_plan *q, uint64_t *bytes_in, uint64_t *bytes_out,
                             int *n_fallback) {
    if (bytes_in) *bytes_in = q->bytes_in;
    if (bytes_out) *bytes_out = q->bytes_out;
    if (n_fallback) *n_fallback = q->n_fallback;
}

/* ---- conversion at write time ---------------------------------------------- */

typedef struct conv {
    const rp_quantize_plan *q;
    rp_pool *pool;
    rp_progress_fn progress;
    void *user;
    uint64_t done_bytes;
    /* the current tensor */
    const rp_gguf_tensor *src;
    int type;
    uint8_t *dst;
    int64_t rows;
    float **rowbuf; /* per thread */
} conv;

static void conv_task(void *arg, int ith, int nth) {
    conv *c = arg;
    const rp_gguf_tensor *s = c->src;
    const int64_t ne0 = s->ne[0];
    const size_t sb = rp_row_size((int)s->type, ne0), db = rp_row_size(c->type, ne0);
    long a, b;
    rp_split_range((long)c->rows, ith, nth, 1, &a, &b);
    const rp_type_traits *from = rp_type_get((int)s->type), *to = rp_type_get(c->type);
    for (long r = a; r < b; r++) {
        from->to_float((const uint8_t *)s->data + (size_t)r * sb, c->rowbuf[ith], ne0);
        to->from_float(c->rowbuf[ith], c->dst + (size_t)r * db, ne0);
    }
}

static rp_status conv_fill(void *user, uint64_t index, void *dst, uint64_t nbytes) {
    conv *c = user;
    const qplan_tensor *p = &c->q->t[index];
    c->src = p->src;
    c->type = p->type;
    c->dst = dst;
    c->rows = p->src->ne[1] * p->src->ne[2] * p->src->ne[3];
    if (p->type == (int)p->src->type)
        memcpy(dst, p->src->data, nbytes);
    else
        rp_pool_run(c->pool, conv_task, c);
    c->done_bytes += p->src->nbytes;
    const uint64_t total = c->q->bytes_in ? c->q->bytes_in : 1;
    if (c->progress && !c->progress((float)((double)c->done_bytes / (double)total), c->user))
        return rp_fail(RP_ERR_CANCELLED, "quantization cancelled");
    return RP_OK;
}

static void rowbufs_free(float **b, int n) {
    if (!b) return;
    for (int i = 0; i < n; i++) free(b[i]);
    free(b);
}

rp_status rp_quantize_plan_write(rp_quantize_plan *q, const char *out_path, rp_progress_fn progress,
                                 void *user) {
    rp_gguf_writer *w = rp_gguf_writer_new();
    rp_status s = w ? RP_OK : rp_fail(RP_ERR_NOMEM, "out of memory (GGUF writer)");
    if (!s) s = rp_gguf_w_copy_kv(w, q->g);
    if (!s) s = rp_gguf_w_set_u32(w, "general.file_type", (uint32_t)q->qt->ftype);
    if (!s) s = rp_gguf_w_set_u32(w, "general.quantization_version", 2);
    for (uint64_t i = 0; i < q->n && !s; i++) {
        const rp_gguf_tensor *t = q->t[i].src;
        s = rp_gguf_w_add_tensor(w, t->name, q->t[i].type, t->n_dims, t->ne, NULL);
    }
    /* the quantized weights' own identity (a stamp copied from the input
     * would name the input's weights) */
    if (!s) s = rp_content_hash_stamp(w);
    const int nth = q->n_threads;
    conv c = {.q = q, .progress = progress, .user = user};
    int64_t widest = 1;
    for (uint64_t i = 0; i < q->n; i++) widest = RP_MAX(widest, q->t[i].src->ne[0]);
    if (!s) {
        c.pool = rp_pool_new(nth);
        c.rowbuf = rp_calloc((size_t)nth, sizeof *c.rowbuf, "quantization rows");
        for (int i = 0; c.rowbuf && i < nth; i++)
            if (!(c.rowbuf[i] = rp_malloc((size_t)widest * sizeof(float), "quantization rows"))) {
                rowbufs_free(c.rowbuf, i);
                c.rowbuf = NULL;
            }
        if (!c.pool || !c.rowbuf) s = RP_ERR_NOMEM;
    }
    if (!s) {
        rp_gguf_w_set_fill(w, conv_fill, &c);
        s = rp_gguf_w_write(w, out_path, NULL, NULL);
    }
    rowbufs_free(c.rowbuf, c.rowbuf ? nth : 0);
    rp_pool_free(c.pool);
    rp_gguf_writer_free(w);
    return s;
}
