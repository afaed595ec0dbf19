/* reprise inspect FILE [--json]: everything a GGUF file holds, readably. */
#include "format/gguf.h"
#include "tools.h"
#include "kernels/types.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define ARR_PREVIEW 8

static void print_escaped(FILE *fp, const char *s, uint64_t len, uint64_t max) {
    fputc('"', fp);
    for (uint64_t i = 0; i < len && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(fp, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", fp);
        else if (c == '\t')
            fputs("\\t", fp);
        else if (c < 0x20 || c == 0x7f)
            fprintf(fp, "\\x%02x", c);
        else
            fputc(c, fp);
    }
    fputc('"', fp);
    if (len > max) fprintf(fp, "...(%" PRIu64 " bytes)", len);
}

static void print_scalar(FILE *fp, const rp_gguf_val *v) {
    switch (v->type) {
    case RP_GGUF_INT8:
    case RP_GGUF_INT16:
    case RP_GGUF_INT32:
    case RP_GGUF_INT64:
        fprintf(fp, "%" PRId64, v->i);
        break;
    case RP_GGUF_FLOAT32:
    case RP_GGUF_FLOAT64:
        fprintf(fp, "%.9g", v->f);
        break;
    case RP_GGUF_BOOL:
        fputs(v->u ? "true" : "false", fp);
        break;
    case RP_GGUF_STRING:
        print_escaped(fp, v->str.s, v->str.len, 160);
        break;
    default:
        fprintf(fp, "%" PRIu64, v->u);
        break;
    }
}

static void print_value(FILE *fp, const rp_gguf_val *v) {
    if (v->type != RP_GGUF_ARRAY) {
        print_scalar(fp, v);
        return;
    }
    fputc('[', fp);
    uint64_t n = v->arr.n;
    for (uint64_t i = 0; i < n && i < ARR_PREVIEW; i++) {
        if (i) fputs(", ", fp);
        if (v->arr.elems)
            print_value(fp, &v->arr.elems[i]);
        else if (v->arr.type == RP_GGUF_FLOAT32 || v->arr.type == RP_GGUF_FLOAT64)
            fprintf(fp, "%.6g", rp_gguf_arr_f64(v, i));
        else if (v->arr.type == RP_GGUF_BOOL)
            fputs(v->arr.raw[i] ? "true" : "false", fp);
        else if (v->arr.type == RP_GGUF_UINT64)
            fprintf(fp, "%" PRIu64, (uint64_t)rp_gguf_arr_i64(v, i));
        else
            fprintf(fp, "%" PRId64, rp_gguf_arr_i64(v, i));
    }
    if (n > ARR_PREVIEW) fprintf(fp, ", ... %" PRIu64 " more", n - ARR_PREVIEW);
    fputc(']', fp);
}

static void type_desc(const rp_gguf_val *v, char *buf, size_t n) {
    if (v->type == RP_GGUF_ARRAY) {
        char inner[48];
        if (v->arr.type == RP_GGUF_ARRAY && v->arr.n)
            type_desc(&v->arr.elems[0], inner, sizeof inner);
        else
            snprintf(inner, sizeof inner, "%s", rp_gguf_type_name((int)v->arr.type));
        snprintf(buf, n, "arr[%s,%" PRIu64 "]", inner, v->arr.n);
    } else {
        snprintf(buf, n, "%s", rp_gguf_type_name((int)v->type));
    }
}

static json_t *value_json(const rp_gguf_val *v, bool full) {
    switch (v->type) {
    case RP_GGUF_INT8:
    case RP_GGUF_INT16:
    case RP_GGUF_INT32:
    case RP_GGUF_INT64:
        return json_integer(v->i);
    case RP_GGUF_FLOAT32:
    case RP_GGUF_FLOAT64:
        return json_real(v->f);
    case RP_GGUF_BOOL:
        return json_boolean(v->u);
    case RP_GGUF_STRING:
        return json_stringn_nocheck(v->str.s, (size_t)v->str.len);
    case RP_GGUF_ARRAY: {
        json_t *o = json_object();
        json_object_set_new(o, "element_type", json_string(rp_gguf_type_name((int)v->arr.type)));
        json_object_set_new(o, "count", json_integer((json_int_t)v->arr.n));
        json_t *items = json_array();
        uint64_t lim = full ? v->arr.n : (v->arr.n < ARR_PREVIEW ? v->arr.n : ARR_PREVIEW);
        for (uint64_t i = 0; i < lim; i++) {
            if (v->arr.elems)
                json_array_append_new(items, value_json(&v->arr.elems[i], full));
            else if (v->arr.type == RP_GGUF_FLOAT32 || v->arr.type == RP_GGUF_FLOAT64)
                json_array_append_new(items, json_real(rp_gguf_arr_f64(v, i)));
            else if (v->arr.type == RP_GGUF_BOOL)
                json_array_append_new(items, json_boolean(v->arr.raw[i]));
            else
                json_array_append_new(items, json_integer(rp_gguf_arr_i64(v, i)));
        }
        json_object_set_new(o, full ? "items" : "first", items);
        return o;
    }
    default:
        return json_integer((json_int_t)v->u);
    }
}

typedef struct type_total {
    uint64_t tensors, params, bytes;
} type_total;

static void shape_str(const rp_gguf_tensor *t, char *buf, size_t n) {
    size_t k = 0;
    for (uint32_t d = 0; d < t->n_dims && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? " x %" PRId64 : "%" PRId64, t->ne[d]);
}

/* Index of the first tensor whose data starts at the same offset, or -1. */
static int64_t *find_aliases(const rp_gguf *g) {
    uint64_t n = rp_gguf_n_tensors(g);
    int64_t *alias = malloc((n ? n : 1) * sizeof *alias);
    if (!alias) return NULL;
    for (uint64_t i = 0; i < n; i++) {
        alias[i] = -1;
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        if (!t->nbytes) continue;
        for (uint64_t j = 0; j < i; j++)
            if (alias[j] < 0 && rp_gguf_tensor_at(g, j)->offset == t->offset) {
                alias[i] = (int64_t)j;
                break;
            }
    }
    return alias;
}

int cmd_inspect(int argc, char **argv) {
    bool json = false, full = false;
    model_opts mo;
    model_opts_init(&mo);
    const arg_opt opts[] = {
        {"--json", ARG_FLAG, &json, NULL, "machine-readable output"},
        {"--full", ARG_FLAG, &full, NULL, "print arrays whole (JSON)"},
        {"--repeat-layers", ARG_STR, &mo.repeat_layers, "SPEC",
         "also show the plan this spec builds"},
        {"--layer-map", ARG_STR, &mo.layer_map, "MAP", "also show the plan this map builds"},
        {"--plan", ARG_STR, &mo.plan_file, "FILE",
         "also show the plan of this plan file (checked against FILE)"},
        {"--plan-force", ARG_FLAG, &mo.plan_force, NULL,
         "accept a plan file made for other weights"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    const char *pos[1];
    int n_pos = 0;
    arg_spec spec = {"inspect",
                     "reprise inspect FILE [--json] [--repeat-layers SPEC]",
                     "Header, metadata (long arrays summarised), tensor table with aliases "
                     "(tensors sharing data), and totals per type.",
                     tables,
                     pos,
                     1,
                     &n_pos};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) return help ? 0 : 2;
    if (n_pos != 1) {
        tool_error("inspect", "expected one GGUF file (see --help)");
        return 2;
    }
    rp_gguf *g;
    rp_status s = rp_gguf_open(pos[0], &g);
    if (s) return tool_fail("inspect", s);
    int64_t *alias = find_aliases(g);
    if (!alias) {
        rp_gguf_close(g);
        return tool_fail("inspect", RP_ERR_NOMEM);
    }
    uint64_t nt = rp_gguf_n_tensors(g), nk = rp_gguf_n_kv(g);
    type_total totals[RP_TYPE_COUNT] = {{0}};
    uint64_t params = 0, bytes = 0, n_alias = 0;
    for (uint64_t i = 0; i < nt; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        if (alias[i] >= 0) {
            n_alias++;
            continue;
        }
        uint64_t ne = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        totals[t->type].tensors++;
        totals[t->type].params += ne;
        totals[t->type].bytes += t->nbytes;
        params += ne;
        bytes += t->nbytes;
    }

    if (json) {
        json_t *root = json_object();
        json_object_set_new(root, "file", json_string(pos[0]));
        json_object_set_new(root, "version", json_integer(rp_gguf_version(g)));
        json_object_set_new(root, "file_size", json_integer((json_int_t)rp_gguf_file_size(g)));
        json_object_set_new(root, "alignment", json_integer((json_int_t)rp_gguf_alignment(g)));
        json_object_set_new(root, "data_offset", json_integer((json_int_t)rp_gguf_data_offset(g)));
        json_t *meta = json_array();
        for (uint64_t i = 0; i < nk; i++) {
            const rp_gguf_kv *kv = rp_gguf_kv_at(g, i);
            json_t *o = json_object();
            char td[64];
            type_desc(&kv->val, td, sizeof td);
            json_object_set_new(o, "key", json_string(kv->key));
            json_object_set_new(o, "type", json_string(td));
            json_object_set_new(o, "value", value_json(&kv->val, full));
            json_array_append_new(meta, o);
        }
        json_object_set_new(root, "metadata", meta);
        json_t *ts = json_array();
        for (uint64_t i = 0; i < nt; i++) {
            const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(t->name));
            json_object_set_new(o, "type", json_string(rp_type_name((int)t->type)));
            json_t *shape = json_array();
            for (uint32_t d = 0; d < t->n_dims; d++)
                json_array_append_new(shape, json_integer(t->ne[d]));
            json_object_set_new(o, "shape", shape);
            json_object_set_new(o, "offset", json_integer((json_int_t)t->offset));
            json_object_set_new(o, "bytes", json_integer((json_int_t)t->nbytes));
            if (alias[i] >= 0)
                json_object_set_new(o, "alias_of",
                                    json_string(rp_gguf_tensor_at(g, (uint64_t)alias[i])->name));
            json_array_append_new(ts, o);
        }
        json_object_set_new(root, "tensors", ts);
        json_t *tot = json_object();
        json_object_set_new(tot, "parameters", json_integer((json_int_t)params));
        json_object_set_new(tot, "bytes", json_integer((json_int_t)bytes));
        json_object_set_new(tot, "aliases", json_integer((json_int_t)n_alias));
        json_t *per = json_array();
        for (int ty = 0; ty < RP_TYPE_COUNT; ty++) {
            if (!totals[ty].tensors) continue;
            json_t *o = json_object();
            json_object_set_new(o, "type", json_string(rp_type_name(ty)));
            json_object_set_new(o, "tensors", json_integer((json_int_t)totals[ty].tensors));
            json_object_set_new(o, "parameters", json_integer((json_int_t)totals[ty].params));
            json_object_set_new(o, "bytes", json_integer((json_int_t)totals[ty].bytes));
            json_object_set_new(o, "bits_per_weight",
                                json_real(totals[ty].params ? 8.0 * (double)totals[ty].bytes /
                                                                  (double)totals[ty].params
                                                            : 0));
            json_array_append_new(per, o);
        }
        json_object_set_new(tot, "per_type", per);
        json_object_set_new(root, "totals", tot);
        json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        fputc('\n', stdout);
        json_decref(root);
    } else {
        printf("file:       %s\n", pos[0]);
        printf("format:     GGUF v%u, %" PRIu64 " bytes, alignment %" PRIu64
               ", tensor data at offset %" PRIu64 "\n",
               rp_gguf_version(g), rp_gguf_file_size(g), rp_gguf_alignment(g),
               rp_gguf_data_offset(g));
        printf("\nmetadata (%" PRIu64 " keys):\n", nk);
        for (uint64_t i = 0; i < nk; i++) {
            const rp_gguf_kv *kv = rp_gguf_kv_at(g, i);
            char td[64];
            type_desc(&kv->val, td, sizeof td);
            printf("  %-44s %-16s ", kv->key, td);
            print_value(stdout, &kv->val);
            putchar('\n');
        }
        printf("\ntensors (%" PRIu64 "):\n", nt);
        printf("  %5s  %-40s %-8s %-24s %12s %12s\n", "#", "name", "type", "shape", "offset",
               "bytes");
        for (uint64_t i = 0; i < nt; i++) {
            const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
            char sh[96];
            shape_str(t, sh, sizeof sh);
            printf("  %5" PRIu64 "  %-40s %-8s %-24s %12" PRIu64 " %12" PRIu64, i, t->name,
                   rp_type_name((int)t->type), sh, t->offset, t->nbytes);
            if (alias[i] >= 0)
                printf("  alias of %s", rp_gguf_tensor_at(g, (uint64_t)alias[i])->name);
            putchar('\n');
        }
        printf("\ntotals: %" PRIu64 " parameters, %" PRIu64 " bytes of tensor data (%.2f MiB)",
               params, bytes, (double)bytes / 1048576.0);
        if (n_alias) printf(", %" PRIu64 " aliased tensors stored once", n_alias);
        printf("\n  %-8s %8s %14s %14s %8s\n", "type", "tensors", "parameters", "bytes", "bpw");
        for (int ty = 0; ty < RP_TYPE_COUNT; ty++) {
            if (!totals[ty].tensors) continue;
            printf("  %-8s %8" PRIu64 " %14" PRIu64 " %14" PRIu64 " %8.4f\n", rp_type_name(ty),
                   totals[ty].tensors, totals[ty].params, totals[ty].bytes,
                   totals[ty].params ? 8.0 * (double)totals[ty].bytes / (double)totals[ty].params
                                     : 0.0);
        }
    }
    free(alias);
    rp_gguf_close(g);

    if (mo.repeat_layers || mo.layer_map || mo.plan_file) {
        rp_model *m;
        rp_context *c;
        int code;
        mo.model = pos[0];
        mo.dump_plan = true;
        mo.n_ctx = 16;
        if (!tool_load("inspect", &mo, 1, &m, &c, &code)) return code;
    }
    return 0;
}

/* reprise gguf-copy IN OUT: read and re-write through reprise's GGUF layer
 * (used by the round-trip tests; bytes must come out identical). */
int cmd_gguf_copy(int argc, char **argv) {
    if (argc != 3) {
        tool_error("gguf-copy", "usage: reprise gguf-copy IN.gguf OUT.gguf");
        return 2;
    }
    rp_gguf *g;
    rp_status s = rp_gguf_open(argv[1], &g);
    if (s) return tool_fail("gguf-copy", s);
    rp_gguf_writer *w = rp_gguf_writer_new();
    if (!w) {
        rp_gguf_close(g);
        return tool_fail("gguf-copy", RP_ERR_NOMEM);
    }
    s = rp_gguf_w_copy_kv(w, g);
    /* keep the source's convention for a tensor-less file's tail */
    rp_gguf_w_set_pad_empty(w, rp_gguf_n_tensors(g) > 0 ||
                                   rp_gguf_file_size(g) == rp_gguf_data_offset(g));
    for (uint64_t i = 0; !s && i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        s = rp_gguf_w_add_tensor(w, t->name, (int)t->type, t->n_dims, t->ne, t->data);
    }
    if (!s) s = rp_gguf_w_write(w, argv[2], NULL, NULL);
    rp_gguf_writer_free(w);
    rp_gguf_close(g);
    return s ? tool_fail("gguf-copy", s) : 0;
}
