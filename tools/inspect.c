/* reprise inspect FILE [--json]: everything a GGUF file holds, readably;
 * reprise gguf-copy IN OUT. */
#include "tools.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define ARR_PREVIEW 8

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

/* What the file holds, counted once: aliases (tensors sharing another's
 * data) and the totals per type. */
typedef struct type_total {
    uint64_t tensors, params, bytes;
} type_total;

typedef struct inventory {
    int64_t *alias; /* [n tensors]: index of the first tensor with the same data, or -1 */
    type_total per[RP_TYPE_COUNT];
    uint64_t params, bytes, n_alias;
} inventory;

static bool inventory_init(inventory *inv, const rp_gguf *g) {
    memset(inv, 0, sizeof *inv);
    const uint64_t n = rp_gguf_n_tensors(g);
    inv->alias = malloc((n ? n : 1) * sizeof *inv->alias);
    if (!inv->alias) return false;
    for (uint64_t i = 0; i < n; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        inv->alias[i] = -1;
        for (uint64_t j = 0; t->nbytes && j < i; j++)
            if (inv->alias[j] < 0 && rp_gguf_tensor_at(g, j)->offset == t->offset) {
                inv->alias[i] = (int64_t)j;
                break;
            }
        if (inv->alias[i] >= 0) {
            inv->n_alias++;
            continue;
        }
        const uint64_t ne = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        inv->per[t->type].tensors++;
        inv->per[t->type].params += ne;
        inv->per[t->type].bytes += t->nbytes;
        inv->params += ne;
        inv->bytes += t->nbytes;
    }
    return true;
}

static double bits_per_weight(const type_total *t) {
    return t->params ? 8.0 * (double)t->bytes / (double)t->params : 0.0;
}

/* ---- --json ------------------------------------------------------------------ */

static json_t *metadata_json(const rp_gguf *g, bool full) {
    json_t *meta = json_array();
    for (uint64_t i = 0; i < rp_gguf_n_kv(g); i++) {
        const rp_gguf_kv *kv = rp_gguf_kv_at(g, i);
        json_t *o = json_object();
        char td[64];
        rp_gguf_val_type_text(&kv->val, td, sizeof td);
        json_object_set_new(o, "key", json_string(kv->key));
        json_object_set_new(o, "type", json_string(td));
        json_object_set_new(o, "value", value_json(&kv->val, full));
        json_array_append_new(meta, o);
    }
    return meta;
}

static json_t *tensors_json(const rp_gguf *g, const inventory *inv) {
    json_t *ts = json_array();
    for (uint64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
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
        if (inv->alias[i] >= 0)
            json_object_set_new(o, "alias_of",
                                json_string(rp_gguf_tensor_at(g, (uint64_t)inv->alias[i])->name));
        json_array_append_new(ts, o);
    }
    return ts;
}

static json_t *totals_json(const inventory *inv) {
    json_t *tot = json_object();
    json_object_set_new(tot, "parameters", json_integer((json_int_t)inv->params));
    json_object_set_new(tot, "bytes", json_integer((json_int_t)inv->bytes));
    json_object_set_new(tot, "aliases", json_integer((json_int_t)inv->n_alias));
    json_t *per = json_array();
    for (int ty = 0; ty < RP_TYPE_COUNT; ty++) {
        const type_total *t = &inv->per[ty];
        if (!t->tensors) continue;
        json_t *o = json_object();
        json_object_set_new(o, "type", json_string(rp_type_name(ty)));
        json_object_set_new(o, "tensors", json_integer((json_int_t)t->tensors));
        json_object_set_new(o, "parameters", json_integer((json_int_t)t->params));
        json_object_set_new(o, "bytes", json_integer((json_int_t)t->bytes));
        json_object_set_new(o, "bits_per_weight", json_real(bits_per_weight(t)));
        json_array_append_new(per, o);
    }
    json_object_set_new(tot, "per_type", per);
    return tot;
}

static void print_json(const char *path, const rp_gguf *g, const inventory *inv, bool full,
                       json_t *plan) {
    json_t *root = json_object();
    json_object_set_new(root, "file", json_string(path));
    json_object_set_new(root, "version", json_integer(rp_gguf_version(g)));
    json_object_set_new(root, "file_size", json_integer((json_int_t)rp_gguf_file_size(g)));
    json_object_set_new(root, "alignment", json_integer((json_int_t)rp_gguf_alignment(g)));
    json_object_set_new(root, "data_offset", json_integer((json_int_t)rp_gguf_data_offset(g)));
    json_object_set_new(root, "metadata", metadata_json(g, full));
    json_object_set_new(root, "tensors", tensors_json(g, inv));
    json_object_set_new(root, "totals", totals_json(inv));
    if (plan) json_object_set_new(root, "plan", plan);
    json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', stdout);
    json_decref(root);
}

/* A context's plan: its report and the source layer of every step. */
static json_t *plan_json(const rp_context *c) {
    const int n = rp_context_plan_report(c, NULL, 0);
    char *report = malloc((size_t)n + 1);
    if (report) rp_context_plan_report(c, report, (size_t)n + 1);
    json_t *src = json_array();
    for (int e = 0; e < rp_context_n_eff(c); e++)
        json_array_append_new(src, json_integer(rp_context_step_src(c, e)));
    json_t *j = json_pack("{s:i,s:o,s:s}", "n_eff", rp_context_n_eff(c), "eff_to_src", src,
                          "report", report ? report : "");
    free(report);
    return j;
}

/* ---- text ------------------------------------------------------------------- */

/* A key or tensor name as it may go to a terminal: control bytes (ESC, CR,
 * C1 controls in UTF-8) as \xNN, a backslash doubled; the rest as is. */
static const char *safe_name(const char *s, char *buf, size_t size) {
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && k + 9 < size; p++) {
        const bool c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
        if (*p == '\\') {
            buf[k++] = '\\';
            buf[k++] = '\\';
        } else if (*p < 0x20 || *p == 0x7f || c1) {
            k += (size_t)snprintf(buf + k, size - k, "\\x%02x", *p);
            if (c1) k += (size_t)snprintf(buf + k, size - k, "\\x%02x", *++p);
        } else {
            buf[k++] = (char)*p;
        }
    }
    buf[k] = 0;
    return buf;
}

static void print_metadata(const rp_gguf *g) {
    const uint64_t nk = rp_gguf_n_kv(g);
    printf("\nmetadata (%" PRIu64 " keys):\n", nk);
    for (uint64_t i = 0; i < nk; i++) {
        const rp_gguf_kv *kv = rp_gguf_kv_at(g, i);
        char td[64];
        rp_gguf_val_type_text(&kv->val, td, sizeof td);
        char name[1024];
        printf("  %-44s %-16s ", safe_name(kv->key, name, sizeof name), td);
        const int n = rp_gguf_val_text(&kv->val, true, NULL, 0);
        char *text = malloc((size_t)n + 1);
        if (text) rp_gguf_val_text(&kv->val, true, text, (size_t)n + 1);
        if (text) fwrite(text, 1, (size_t)n, stdout);
        free(text);
        putchar('\n');
    }
}

static void print_tensors(const rp_gguf *g, const inventory *inv) {
    const uint64_t nt = rp_gguf_n_tensors(g);
    printf("\ntensors (%" PRIu64 "):\n", nt);
    printf("  %5s  %-40s %-8s %-24s %12s %12s\n", "#", "name", "type", "shape", "offset", "bytes");
    for (uint64_t i = 0; i < nt; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        char sh[96];
        size_t k = 0;
        for (uint32_t d = 0; d < t->n_dims && k < sizeof sh; d++)
            k += (size_t)snprintf(sh + k, sizeof sh - k, d ? " x %" PRId64 : "%" PRId64, t->ne[d]);
        char name[1024];
        printf("  %5" PRIu64 "  %-40s %-8s %-24s %12" PRIu64 " %12" PRIu64, i,
               safe_name(t->name, name, sizeof name), rp_type_name((int)t->type), sh, t->offset,
               t->nbytes);
        if (inv->alias[i] >= 0)
            printf("  alias of %s", safe_name(rp_gguf_tensor_at(g, (uint64_t)inv->alias[i])->name,
                                              name, sizeof name));
        putchar('\n');
    }
}

static void print_text(const char *path, const rp_gguf *g, const inventory *inv) {
    printf("file:       %s\n", path);
    printf("format:     GGUF v%u, %" PRIu64 " bytes, alignment %" PRIu64
           ", tensor data at offset %" PRIu64 "\n",
           rp_gguf_version(g), rp_gguf_file_size(g), rp_gguf_alignment(g), rp_gguf_data_offset(g));
    print_metadata(g);
    print_tensors(g, inv);
    printf("\ntotals: %" PRIu64 " parameters, %" PRIu64 " bytes of tensor data (%.2f MiB)",
           inv->params, inv->bytes, (double)inv->bytes / 1048576.0);
    if (inv->n_alias) printf(", %" PRIu64 " aliased tensors stored once", inv->n_alias);
    printf("\n  %-8s %8s %14s %14s %8s\n", "type", "tensors", "parameters", "bytes", "bpw");
    for (int ty = 0; ty < RP_TYPE_COUNT; ty++) {
        const type_total *t = &inv->per[ty];
        if (!t->tensors) continue;
        printf("  %-8s %8" PRIu64 " %14" PRIu64 " %14" PRIu64 " %8.4f\n", rp_type_name(ty),
               t->tensors, t->params, t->bytes, bits_per_weight(t));
    }
}

/* ---- the commands ------------------------------------------------------------ */

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
    const arg_spec spec = {.cmd = "inspect",
                           .usage = "reprise inspect FILE [--json] [--repeat-layers SPEC]",
                           .description =
                               "Header, metadata (long arrays summarised), tensor table "
                               "with aliases (tensors sharing data), and totals per type.",
                           .tables = tables,
                           .pos = pos,
                           .max_pos = 1,
                           .n_pos = &n_pos};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (n_pos != 1) {
        tool_error("inspect", "expected one GGUF file (see --help)");
        return 2;
    }
    rp_gguf *g;
    rp_status s = rp_gguf_open(pos[0], &g);
    if (s) return tool_fail("inspect", s);
    inventory inv;
    if (!inventory_init(&inv, g)) {
        rp_gguf_close(g);
        return tool_fail("inspect", RP_ERR_NOMEM);
    }
    const bool plan = mo.repeat_layers || mo.layer_map || mo.plan_file;
    json_t *pj = NULL;
    if (json && plan) { /* the plan inside the JSON: stdout stays one JSON document */
        rp_model *m;
        rp_context *c;
        int code;
        mo.model = pos[0];
        mo.n_ctx = 16;
        mo.quiet = true;
        if (!tool_load("inspect", &mo, 1, &m, &c, &code)) {
            free(inv.alias);
            rp_gguf_close(g);
            return code;
        }
        pj = plan_json(c);
        rp_context_free(c);
        rp_model_free(m);
    }
    if (json)
        print_json(pos[0], g, &inv, full, pj);
    else
        print_text(pos[0], g, &inv);
    free(inv.alias);
    rp_gguf_close(g);
    if (plan && !json) { /* the plan, as --dump-plan prints it */
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
    const bool force = argc == 4 && strcmp(argv[3], "--force") == 0;
    if (argc != 3 && !force) {
        tool_error("gguf-copy", "usage: reprise gguf-copy IN.gguf OUT.gguf [--force] (--force: "
                                "write OUT even when it is IN)");
        return 2;
    }
    rp_output_allow_inputs(force);
    tool_remove_temps_on_signals();
    rp_status s = rp_gguf_copy(argv[1], argv[2]);
    return s ? tool_fail("gguf-copy", s) : 0;
}
