/* reprise merge: write a plan as a physically merged GGUF, for engines that
 * have no plans. Every step's tensors are copied to its new layer index; the
 * NextN/MTP head layers follow the trunk; per-layer arrays are re-indexed; the
 * architecture adds whatever metadata keeps each step's kind explicit. */
#include "arch/arch.h"
#include "core/context.h"
#include "format/gguf.h"
#include "core/model.h"
#include "core/planfile.h"
#include "tools.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Layer index of a "blk.N.rest" tensor name, -1 otherwise; *rest = "rest". */
static int blk_index(const char *name, const char **rest) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long l = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || l < 0 || l > 1000000) return -1;
    *rest = end + 1;
    return (int)l;
}

/* Source layer of merged layer i: the plan's steps, then the head layers. */
static int src_of(const rp_plan *p, int n_layer, int i) {
    if (i < p->n_eff) return p->src[i];
    return p->n_src + (i - p->n_eff) < n_layer ? p->n_src + (i - p->n_eff) : -1;
}

int cmd_merge(int argc, char **argv) {
    const char *cmd = "merge";
    model_opts mo;
    model_opts_init(&mo);
    const char *out = NULL;
    const arg_opt opts[] = {
        {"-o|--output", ARG_STR, &out, "FILE", "merged GGUF to write"},
        {0},
    };
    const arg_opt *tables[] = {opts, model_opts_table(&mo), NULL};
    arg_spec spec = {
        cmd,
        "reprise merge -m IN.gguf --repeat-layers SPEC -o OUT.gguf",
        "Writes the plan as a physically merged file: each step's tensors are copied to its new\n"
        "layer index and block_count is updated. The result costs the repeated layers' weights\n"
        "again; the runtime plan gives bit-identical logits without that cost.",
        tables,
        NULL,
        0,
        NULL};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) {
        if (help) printf("\n%s\n", g_plan_help);
        return help ? 0 : 2;
    }
    if (!out) {
        tool_error(cmd, "no output file (-o FILE)");
        return 2;
    }
    if (!mo.repeat_layers && !mo.layer_map && !mo.plan_file) {
        tool_error(cmd, "no plan given (--repeat-layers SPEC, --layer-map MAP or --plan FILE)");
        return 2;
    }
    mo.n_ctx = 16; /* the context only builds and validates the plan */
    rp_model *m;
    rp_context *c;
    int code;
    if (!tool_load(cmd, &mo, 1, &m, &c, &code)) return code;
    const rp_plan *p = c->plan;
    const rp_gguf *g = m->gguf;
    const int n_layer = m->hp.n_layer, n_new = p->n_eff + (n_layer - p->n_src);
    char key[256];
    rp_gguf_writer *w = rp_gguf_writer_new();
    rp_status s = w ? RP_OK : RP_ERR_NOMEM;
    /* metadata: copy, re-indexing every per-layer array of the architecture */
    for (uint64_t i = 0; !s && i < rp_gguf_n_kv(g); i++) {
        const rp_gguf_kv *kv = rp_gguf_kv_at(g, i);
        const rp_gguf_val *v = &kv->val;
        size_t al = strlen(m->arch->name);
        bool per_layer = !strncmp(kv->key, m->arch->name, al) && kv->key[al] == '.' &&
                         v->type == RP_GGUF_ARRAY && v->arr.n == (uint64_t)n_layer &&
                         rp_gguf_type_size((int)v->arr.type) > 0;
        if (per_layer) {
            size_t es = rp_gguf_type_size((int)v->arr.type);
            uint8_t *raw = malloc(es * (size_t)n_new);
            if (!raw) {
                s = RP_ERR_NOMEM;
                break;
            }
            for (int l = 0; l < n_new; l++)
                memcpy(raw + es * (size_t)l, v->arr.raw + es * (size_t)src_of(p, n_layer, l), es);
            s = rp_gguf_w_set_arr(w, kv->key, (int)v->arr.type, raw, (uint64_t)n_new);
            free(raw);
        } else {
            s = rp_gguf_w_set(w, kv->key, v);
        }
    }
    if (!s)
        s = rp_gguf_w_set_u32(w, rp_arch_key(m, "block_count", key, sizeof key), (uint32_t)n_new);
    if (!s) {
        char name[512];
        const char *old = rp_model_name(m);
        snprintf(name, sizeof name, "%s (merged plan %s)", old, p->spec);
        s = rp_gguf_w_set_str(w, "general.name", name);
    }
    if (!s && m->arch->merge_meta) s = m->arch->merge_meta(m, p, w);
    /* tensors: non-layer tensors as they are; layer tensors once per step */
    uint64_t nt = rp_gguf_n_tensors(g);
    for (uint64_t i = 0; !s && i < nt; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        const char *rest;
        if (blk_index(t->name, &rest) < 0)
            s = rp_gguf_w_add_tensor(w, t->name, (int)t->type, t->n_dims, t->ne, t->data);
    }
    for (int l = 0; !s && l < n_new; l++) {
        int src = src_of(p, n_layer, l);
        for (uint64_t i = 0; !s && i < nt; i++) {
            const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
            const char *rest;
            if (blk_index(t->name, &rest) != src) continue;
            char name[512];
            snprintf(name, sizeof name, "blk.%d.%s", l, rest);
            s = rp_gguf_w_add_tensor(w, name, (int)t->type, t->n_dims, t->ne, t->data);
        }
    }
    if (!s) s = rp_content_hash_stamp(w); /* the merged weights' own identity, not the source's */
    progress pr;
    progress_init(&pr, "writing");
    if (!s) s = rp_gguf_w_write(w, out, progress_cb, &pr);
    progress_done(&pr);
    if (!s && g_verbosity > 0)
        fprintf(stderr, "wrote %s: %d layers (%d source + %d repeated steps), %.2f MiB\n", out,
                n_new, n_layer, p->n_eff - p->n_src, (double)rp_gguf_w_size(w) / 1048576.0);
    rp_gguf_writer_free(w);
    rp_context_free(c);
    rp_model_free(m);
    return s ? tool_fail(cmd, s) : 0;
}
