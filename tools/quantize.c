/* reprise quantize: rewrite a model's weights in another type, with the
 * per-tensor mixtures llama.cpp uses for its _S/_M/_L types, so a Q4_K_M made
 * here holds the same types (and, from the same F32 source, the same bytes) as
 * llama.cpp's. Tensors are converted one at a time at write time, rows spread
 * over the threads; the output is written to a temporary file and renamed. */
#include "format/gguf.h"
#include "core/planfile.h"
#include "base/threads.h"
#include "tools.h"
#include "kernels/types.h"
#include "base/util.h"

#include <inttypes.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

/* ---- target types ----------------------------------------------------------- */

typedef struct qtype {
    const char *name; /* as given on the command line */
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
    for (size_t i = 0; i < RP_ARRAY_LEN(g_qtypes); i++) {
        const char *a = g_qtypes[i].name, *b = s;
        while (*a && *b && (*a | 32) == (*b | 32)) a++, b++;
        if (!*a && !*b) return &g_qtypes[i];
    }
    return NULL;
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

typedef enum cat {
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
} cat;

static cat category(const char *name) {
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
} mix_state;

/* llama.cpp's choice for one tensor of a mixture (the rules of the types
 * this tool writes). */
static int mixture_type(mix_state *s, const rp_gguf_tensor *t, int type) {
    const cat c = category(t->name);
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

/* ---- conversion at write time ---------------------------------------------- */

typedef struct plan_t {
    const rp_gguf_tensor *src;
    int type;
} plan_t;

typedef struct conv {
    const plan_t *plan;
    rp_pool *pool;
    progress *pr;
    uint64_t done_bytes, total_bytes;
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
    const plan_t *p = &c->plan[index];
    c->src = p->src;
    c->type = p->type;
    c->dst = dst;
    c->rows = p->src->ne[1] * p->src->ne[2] * p->src->ne[3];
    if (p->type == (int)p->src->type)
        memcpy(dst, p->src->data, nbytes);
    else
        rp_pool_run(c->pool, conv_task, c);
    c->done_bytes += p->src->nbytes;
    if (c->pr)
        progress_update(
            c->pr, (float)((double)c->done_bytes / (double)(c->total_bytes ? c->total_bytes : 1)),
            NULL);
    return RP_OK;
}

/* ---- the command -------------------------------------------------------------- */

int cmd_quantize(int argc, char **argv) {
    const char *cmd = "quantize";
    int threads = 0;
    bool pure = false, dry = false, requant = false;
    str_list tt = {0};
    const arg_opt opts[] = {
        {"-t|--threads", ARG_INT, &threads, "N", "threads (default: physical cores)"},
        {"--pure", ARG_FLAG, &pure, NULL,
         "one type for every 2-D weight: no mixture, no F16 adapters"},
        {"--tensor-type", ARG_STRS, &tt, "REGEX=TYPE",
         "type of the tensors whose names match the POSIX extended REGEX (repeatable, first match "
         "wins; "
         "wins over the mixture)"},
        {"--dry-run", ARG_FLAG, &dry, NULL,
         "print the per-tensor plan and the resulting size; write nothing"},
        {"--allow-requantize", ARG_FLAG, &requant, NULL,
         "accept quantized input (quality suffers)"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    const char *pos[3];
    int npos = 0;
    arg_spec spec = {
        cmd,
        "reprise quantize IN.gguf OUT.gguf TYPE [-t N] [--pure] [--tensor-type REGEX=TYPE] "
        "[--dry-run]",
        "TYPE: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M "
        "Q6_K\n"
        "IQ4_NL IQ4_XS F16 BF16 F32. The _S/_M/_L mixtures follow llama.cpp's rules (more bits for "
        "the\n"
        "output and token embedding, attn_v and part of ffn_down); 1-D tensors stay F32; a tensor "
        "whose\n"
        "rows do not divide into the type's blocks falls back to one that fits; adapter tensors\n"
        "(*ffn_gate_up_adapter_*) stay F16 unless --pure or a --tensor-type names them.",
        tables,
        pos,
        3,
        &npos};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) return help ? 0 : 2;
    if (npos != 3 && !(dry && npos == 2)) {
        tool_error(cmd, "expected IN.gguf OUT.gguf TYPE (see --help)");
        return 2;
    }
    const char *in = pos[0], *out = npos == 3 ? pos[1] : NULL, *tname = pos[npos - 1];
    const qtype *qt = find_qtype(tname);
    if (!qt) {
        tool_error(cmd, "unknown type '%s' (see --help for the list)", tname);
        return 2;
    }
    /* --tensor-type patterns */
    regex_t re[32];
    int re_type[32], nre = 0, ret = 2;
    for (int i = 0; i < tt.n; i++) {
        const char *eq = strrchr(tt.v[i], '=');
        const int t = eq ? rp_type_from_name(eq + 1) : -1;
        if (!eq || eq == tt.v[i]) {
            tool_error(cmd, "--tensor-type '%s': expected REGEX=TYPE", tt.v[i]);
            goto out_re;
        }
        if (t < 0 || !rp_type_get(t)->from_float || t == RP_TYPE_Q8_1 || t == RP_TYPE_Q8_K) {
            tool_error(cmd, "--tensor-type '%s': '%s' is not a type reprise can write", tt.v[i],
                       eq + 1);
            goto out_re;
        }
        char pat[256];
        snprintf(pat, sizeof pat, "%.*s", (int)(eq - tt.v[i]), tt.v[i]);
        int rc = regcomp(&re[nre], pat, REG_EXTENDED | REG_NOSUB);
        if (rc) {
            char msg[128];
            regerror(rc, &re[nre], msg, sizeof msg);
            tool_error(cmd, "--tensor-type '%s': bad regular expression: %s", tt.v[i], msg);
            goto out_re;
        }
        re_type[nre++] = t;
    }
    rp_gguf *g = NULL;
    rp_status s = rp_gguf_open(in, &g);
    if (s) {
        tool_fail(cmd, s);
        goto out_re;
    }
    const uint64_t nt = rp_gguf_n_tensors(g);
    plan_t *plan = calloc(nt ? nt : 1, sizeof *plan);
    if (!plan) {
        tool_fail(cmd, RP_ERR_NOMEM);
        goto out_g;
    }
    /* model facts the mixture needs */
    mix_state ms = {
        .ftype = qt->ftype, .tied = !rp_gguf_find_tensor(g, "output.weight"), .n_gqa = 1};
    {
        const char *arch = NULL;
        bool found;
        rp_gguf_get_str(g, "general.architecture", &arch, &found);
        if (arch) {
            char k1[128], k2[128];
            uint32_t nh = 0, nkv = 0;
            snprintf(k1, sizeof k1, "%s.attention.head_count", arch);
            snprintf(k2, sizeof k2, "%s.attention.head_count_kv", arch);
            if (rp_gguf_get_u32(g, k1, &nh, &found) == RP_OK && found &&
                rp_gguf_get_u32(g, k2, &nkv, &found) == RP_OK && found && nkv)
                ms.n_gqa = (int)(nh / nkv);
        }
    }
    for (uint64_t i = 0; i < nt; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        if (!quantizable(t)) continue;
        const cat c = category(t->name);
        ms.n_attn_v += c == C_ATTN_V;
        ms.n_ffn_down += c == C_FFN_DOWN;
    }
    const bool target_quant = rp_type_get(qt->base)->is_quantized;
    uint64_t bytes_in = 0, bytes_out = 0;
    int n_fallback = 0;
    for (uint64_t i = 0; i < nt; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        const rp_type_traits *st = rp_type_get((int)t->type);
        plan[i].src = t;
        int type = (int)t->type;
        if (!quantizable(t)) {
            if (t->n_dims == 1 && st->to_float && t->type != RP_TYPE_F32) type = RP_TYPE_F32;
        } else {
            if (st->is_quantized && !requant) {
                tool_error(cmd,
                           "tensor '%s' is already %s: quantizing it again loses quality "
                           "(--allow-requantize)",
                           t->name, st->name);
                goto out_plan;
            }
            if (!st->to_float) {
                tool_error(cmd, "tensor '%s' has type %s, which reprise cannot read", t->name,
                           st->name);
                goto out_plan;
            }
            int manual = -1;
            for (int k = 0; k < nre && manual < 0; k++)
                if (!regexec(&re[k], t->name, 0, NULL, 0)) manual = re_type[k];
            type = qt->base;
            if (manual >= 0)
                type = manual;
            else if (!pure && strstr(t->name, "ffn_gate_up_adapter_"))
                type = RP_TYPE_F16;
            else if (!pure && target_quant)
                type = mixture_type(&ms, t, type);
            else if (!pure)
                mixture_type(&ms, t, type); /* keep the layer counters in step */
            const int fb = fallback_type(type, t->ne[0]);
            if (fb != type) {
                fprintf(stderr,
                        "%s: %s has rows of %" PRId64 ", not a multiple of %s's %d: using %s\n",
                        cmd, t->name, t->ne[0], rp_type_name(type), rp_type_get(type)->blck_size,
                        rp_type_name(fb));
                type = fb;
                n_fallback++;
            }
        }
        plan[i].type = type;
        const uint64_t ob =
            rp_row_size(type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        bytes_in += t->nbytes;
        bytes_out += ob;
        if (dry)
            printf("%-40s %6s -> %-6s %8.3f MiB\n", t->name, st->name, rp_type_name(type),
                   (double)ob / 1048576.0);
    }
    if (dry) {
        printf("%s: %.2f MiB -> %.2f MiB (%s)%s\n", in, (double)bytes_in / 1048576.0,
               (double)bytes_out / 1048576.0, qt->name, n_fallback ? ", with fallbacks" : "");
        ret = 0;
        goto out_plan;
    }
    /* write */
    rp_gguf_writer *w = rp_gguf_writer_new();
    if (!w || (s = rp_gguf_w_copy_kv(w, g)) ||
        (s = rp_gguf_w_set_u32(w, "general.file_type", (uint32_t)qt->ftype)) ||
        (s = rp_gguf_w_set_u32(w, "general.quantization_version", 2))) {
        tool_fail(cmd, w ? s : RP_ERR_NOMEM);
        rp_gguf_writer_free(w);
        ret = 1;
        goto out_plan;
    }
    for (uint64_t i = 0; i < nt && !s; i++) {
        const rp_gguf_tensor *t = plan[i].src;
        s = rp_gguf_w_add_tensor(w, t->name, plan[i].type, t->n_dims, t->ne, NULL);
    }
    /* the quantized weights' own identity (a stamp copied from the input
     * would name the input's weights) */
    if (!s) s = rp_content_hash_stamp(w);
    const int nth = threads > 0 ? threads : rp_n_physical_cores();
    conv c = {.plan = plan, .pool = s ? NULL : rp_pool_new(nth), .total_bytes = bytes_in};
    progress pr;
    progress_init(&pr, "quantizing");
    c.pr = &pr;
    c.rowbuf = calloc((size_t)nth, sizeof *c.rowbuf);
    int64_t widest = 1;
    for (uint64_t i = 0; i < nt; i++) widest = RP_MAX(widest, plan[i].src->ne[0]);
    for (int i = 0; c.rowbuf && i < nth; i++)
        if (!(c.rowbuf[i] = malloc((size_t)widest * sizeof(float)))) {
            for (int k = 0; k < i; k++) free(c.rowbuf[k]);
            free(c.rowbuf);
            c.rowbuf = NULL;
        }
    if (!s && (!c.pool || !c.rowbuf)) s = RP_ERR_NOMEM;
    if (!s) {
        rp_gguf_w_set_fill(w, conv_fill, &c);
        s = rp_gguf_w_write(w, out, NULL, NULL);
    }
    progress_done(&pr);
    if (c.rowbuf)
        for (int i = 0; i < nth; i++) free(c.rowbuf[i]);
    free(c.rowbuf);
    rp_pool_free(c.pool);
    rp_gguf_writer_free(w);
    if (s) {
        tool_fail(cmd, s);
        ret = 1;
        goto out_plan;
    }
    if (g_verbosity > 0)
        fprintf(stderr, "%s: wrote %s (%s): %.2f MiB -> %.2f MiB\n", cmd, out, qt->name,
                (double)bytes_in / 1048576.0, (double)bytes_out / 1048576.0);
    ret = 0;
out_plan:
    free(plan);
out_g:
    rp_gguf_close(g);
out_re:
    for (int i = 0; i < nre; i++) regfree(&re[i]);
    return ret;
}
