/* reprise plan: plans as files you can share, check and serve by name.
 *
 *   plan save  -m MODEL --repeat-layers SPEC --name N [--description D] -o FILE
 *   plan show  FILE [--json]
 *   plan check -m MODEL FILE [--plan-force]
 *   plan hash  MODEL...
 *
 * Also the pieces every tool uses for --plan FILE (tool_plan_resolve) and for a
 * model's content hash with a message when it has to be computed. */
#include "core/model.h"
#include "core/plan.h"
#include "core/planfile.h"
#include "tools.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(TOOL_HASH_SIZE >= RP_CONTENT_HASH_LEN + 1, "TOOL_HASH_SIZE holds a content hash");

bool tool_content_hash(const char *cmd, const rp_model *m, char hash[TOOL_HASH_SIZE]) {
    progress pr;
    progress_init(&pr, "hashing the weights");
    rp_content_hash h;
    double t0 = rp_time_s();
    rp_status s = rp_content_hash_get(m->gguf, progress_cb, &pr, &h);
    progress_done(&pr);
    if (s) {
        tool_fail(cmd, s);
        return false;
    }
    /* said once when it is cached, every time when it is slow and cannot be */
    double dt = rp_time_s() - t0;
    if (h.source == RP_HASH_COMPUTED &&
        (g_verbosity > 1 || (g_verbosity > 0 && (h.cached || dt >= 1.0)))) {
        fprintf(stderr, "%s: content hash of %s computed in %.1f s (%.1f MiB of tensors); ", cmd,
                m->path, dt, (double)rp_model_weight_bytes(m) / 1048576.0);
        if (h.cached)
            fprintf(stderr, "cached in %s\n", h.cache_path);
        else
            fprintf(stderr, "not cached (%s): it is computed again next time\n", h.cache_note);
    }
    memcpy(hash, h.hash, sizeof h.hash);
    return true;
}

bool tool_plan_resolve(const char *cmd, const model_opts *o, const rp_model *m,
                       struct rp_planfile **pf, const char **repeat, const char **map) {
    *pf = NULL;
    *repeat = o->repeat_layers;
    *map = o->layer_map;
    if (!o->plan_file) return true;
    if (o->repeat_layers || o->layer_map) {
        tool_error(cmd, "--plan and %s are alternatives; give one",
                   o->repeat_layers ? "--repeat-layers" : "--layer-map");
        return false;
    }
    rp_planfile *p;
    rp_status s = rp_planfile_read(o->plan_file, &p);
    if (s) {
        tool_fail(cmd, s);
        return false;
    }
    char hash[TOOL_HASH_SIZE];
    bool forced = false;
    if (!tool_content_hash(cmd, m, hash) ||
        (s = rp_planfile_check(p, m, hash, o->plan_force, &forced))) {
        if (s) {
            rp_fail_prefix(s, "--plan %s", o->plan_file);
            tool_fail(cmd, s);
        }
        rp_planfile_free(p);
        return false;
    }
    if (forced) /* loudly, even with -q: the weights are not the ones the plan was made for */
        fprintf(
            stderr,
            "warning: --plan-force: plan '%s' (%s) was made for the weights %s%s%s%s; %s holds %s. "
            "Applying it anyway (same architecture %s, same %d layers): its effect on these "
            "weights is untested\n",
            p->name, o->plan_file, p->content_hash, p->base_file ? " (" : "",
            p->base_file ? p->base_file : "", p->base_file ? ")" : "", m->path, hash, p->arch,
            p->n_layer);
    else if (g_verbosity > 0)
        fprintf(stderr, "plan: '%s' from %s (made for these weights: %s)\n", p->name, o->plan_file,
                hash);
    *pf = p;
    if (p->kind == RP_PLAN_REPEAT)
        *repeat = p->spec;
    else
        *map = p->spec;
    return true;
}

void tool_plan_free(struct rp_planfile *pf) {
    rp_planfile_free(pf);
}

/* ---- subcommands ------------------------------------------------------------- */

static rp_model *load_model(const char *cmd, const char *path) {
    rp_model_params mp = rp_model_default_params();
    progress pr;
    progress_init(&pr, "loading");
    mp.progress = progress_cb;
    mp.progress_user = &pr;
    rp_model *m = NULL;
    rp_status s = rp_model_load(path, &mp, &m);
    progress_done(&pr);
    if (s) tool_fail(cmd, s);
    return m;
}

static int plan_save(int argc, char **argv) {
    const char *cmd = "plan save";
    const char *model = NULL, *rep = NULL, *map = NULL, *name = NULL, *desc = NULL, *out = NULL;
    bool quiet = false;
    const arg_opt opts[] = {
        {"-m|--model", ARG_STR, &model, "FILE", "the base model the plan is made for"},
        {"--repeat-layers", ARG_STR, &rep, "SPEC",
         "RYS blocks: 'i,j' repeats source layers [i,j) (see below)"},
        {"--layer-map", ARG_STR, &map, "MAP", "the whole sequence: '0..15,11..31' or '0,1,2,2,3'"},
        {"--name", ARG_STR, &name, "NAME",
         "the plan's name (a served model id): A-Z a-z 0-9 . _ : + / -"},
        {"--description", ARG_STR, &desc, "TEXT", "what the plan is for (optional)"},
        {"-o|--output", ARG_STR, &out, "FILE", "plan file to write (JSON)"},
        {"-q|--quiet", ARG_FLAG, &quiet, NULL, "only errors on stderr"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    arg_spec spec = {
        cmd,
        "reprise plan save -m MODEL (--repeat-layers SPEC | --layer-map MAP) --name NAME "
        "[--description TEXT] -o FILE",
        "Writes a plan file: the name, the description, the spec and the identity of MODEL\n"
        "(architecture, layer count and the content hash of its tensors). `--plan FILE`\n"
        "applies it wherever a spec is accepted; docs/plan-files.md describes the format.",
        tables,
        NULL,
        0,
        NULL};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) {
        if (help) printf("\n%s\n", g_plan_help);
        return help ? 0 : 2;
    }
    if (quiet) g_verbosity = 0;
    if (!model || !out || !name) {
        tool_error(cmd, "needs -m MODEL, --name NAME and -o FILE (see --help)");
        return 2;
    }
    if (!rep == !map) {
        tool_error(cmd, rep ? "--repeat-layers and --layer-map are alternatives; give one"
                            : "no spec given (--repeat-layers SPEC or --layer-map MAP)");
        return 2;
    }
    if (!rp_planfile_name_valid(name)) {
        tool_error(cmd,
                   "--name '%s' is not usable: 1..%d characters of A-Z a-z 0-9 and . _ : + / -",
                   name, RP_PLAN_NAME_MAX);
        return 2;
    }
    rp_model *m = load_model(cmd, model);
    if (!m) return 1;
    char hash[TOOL_HASH_SIZE];
    rp_planfile *pf = NULL;
    int ret = 1;
    rp_status s;
    if (!tool_content_hash(cmd, m, hash)) goto out;
    if ((s = rp_planfile_new(m, hash, name, desc, rep ? RP_PLAN_REPEAT : RP_PLAN_MAP,
                             rep ? rep : map, &pf)) ||
        (s = rp_planfile_write(pf, out))) {
        tool_fail(cmd, s);
        goto out;
    }
    if (g_verbosity > 0)
        fprintf(stderr,
                "wrote %s: plan '%s', %s %s: %d -> %d layers, for %s %d layers, weights %s\n", out,
                pf->name, rep ? "--repeat-layers" : "--layer-map", pf->spec, pf->n_layer, pf->n_eff,
                pf->arch, pf->n_layer, pf->content_hash);
    ret = 0;
out:
    rp_planfile_free(pf);
    rp_model_free(m);
    return ret;
}

static int plan_show(int argc, char **argv) {
    const char *cmd = "plan show";
    bool json = false;
    const arg_opt opts[] = {
        {"--json", ARG_FLAG, &json, NULL, "print the plan file as reprise writes it"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    const char *pos[1];
    int n_pos = 0;
    arg_spec spec = {cmd,
                     "reprise plan show FILE [--json]",
                     "Prints a plan file: name, description, spec, the steps it runs on its\n"
                     "base model, and the base model's identity.",
                     tables,
                     pos,
                     1,
                     &n_pos};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) return help ? 0 : 2;
    if (n_pos != 1) {
        tool_error(cmd, "expected one plan file (see --help)");
        return 2;
    }
    rp_planfile *pf;
    rp_status s = rp_planfile_read(pos[0], &pf);
    if (s) return tool_fail(cmd, s);
    if (json) {
        char *text = rp_planfile_to_json(pf);
        if (text) fputs(text, stdout);
        free(text);
        rp_planfile_free(pf);
        return text ? 0 : tool_fail(cmd, RP_ERR_NOMEM);
    }
    rp_plan *p = NULL;
    s = pf->kind == RP_PLAN_REPEAT ? rp_plan_repeat(pf->spec, pf->n_layer, pf->n_layer, &p)
                                   : rp_plan_map(pf->spec, pf->n_layer, pf->n_layer, &p);
    if (s) { /* the reader checked it already */
        rp_planfile_free(pf);
        return tool_fail(cmd, s);
    }
    int need = rp_plan_format(p, NULL, 0);
    char *steps = malloc((size_t)need + 1);
    if (steps) rp_plan_format(p, steps, (size_t)need + 1);
    printf("plan:         %s\n", pf->name);
    if (*pf->description) printf("description:  %s\n", pf->description);
    printf("spec:         %s %s\n", pf->kind == RP_PLAN_REPEAT ? "--repeat-layers" : "--layer-map",
           pf->spec);
    printf("steps:        %d on %d layers (%+d, compute and KV %+.1f%%)\n", pf->n_eff, pf->n_layer,
           pf->n_eff - pf->n_layer, 100.0 * (pf->n_eff - pf->n_layer) / pf->n_layer);
    printf("eff->src:     %s\n", steps ? steps : "?");
    printf("base model:   %s, %d layers%s%s%s%s%s\n", pf->arch, pf->n_layer,
           pf->base_name ? ", '" : "", pf->base_name ? pf->base_name : "", pf->base_name ? "'" : "",
           pf->base_file ? ", file " : "", pf->base_file ? pf->base_file : "");
    printf("content hash: %s\n", pf->content_hash);
    if (pf->created_by) printf("created by:   %s\n", pf->created_by);
    free(steps);
    rp_plan_free(p);
    rp_planfile_free(pf);
    return 0;
}

static int plan_check(int argc, char **argv) {
    const char *cmd = "plan check";
    const char *model = NULL;
    bool force = false;
    const arg_opt opts[] = {
        {"-m|--model", ARG_STR, &model, "FILE", "the model to apply the plan to"},
        {"--plan-force", ARG_FLAG, &force, NULL,
         "accept weights whose content hash differs (same shapes)"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    const char *pos[1];
    int n_pos = 0;
    arg_spec spec = {
        cmd,
        "reprise plan check -m MODEL FILE [--plan-force]",
        "Says whether the plan file applies to MODEL (exit 0) or why not (exit 1): the\n"
        "architecture, the layer count and the content hash of the weights must match;\n"
        "--plan-force accepts another content hash.",
        tables,
        pos,
        1,
        &n_pos};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) return help ? 0 : 2;
    if (n_pos != 1 || !model) {
        tool_error(cmd, "expected -m MODEL and one plan file (see --help)");
        return 2;
    }
    rp_planfile *pf;
    rp_status s = rp_planfile_read(pos[0], &pf);
    if (s) return tool_fail(cmd, s);
    rp_model *m = load_model(cmd, model);
    int ret = 1;
    char hash[TOOL_HASH_SIZE];
    bool forced;
    if (m && tool_content_hash(cmd, m, hash)) {
        if ((s = rp_planfile_check(pf, m, hash, force, &forced))) {
            tool_fail(cmd, s);
        } else {
            printf("plan '%s' applies to %s: %s %d layers, %s%s\n", pf->name, model, pf->arch,
                   pf->n_layer,
                   forced ? "content hash differs (accepted by --plan-force): "
                          : "content hash matches: ",
                   hash);
            ret = 0;
        }
    }
    rp_model_free(m);
    rp_planfile_free(pf);
    return ret;
}

static int plan_hash(int argc, char **argv) {
    const char *cmd = "plan hash";
    bool recompute = false;
    const arg_opt opts[] = {
        {"--recompute", ARG_FLAG, &recompute, NULL,
         "read every tensor again, ignoring metadata and cache"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    const char *pos[32];
    int n_pos = 0;
    arg_spec spec = {cmd,
                     "reprise plan hash MODEL... [--recompute]",
                     "Prints the content hash of each model's tensors (what plan files record)\n"
                     "and where it came from: the file's metadata, the cache beside it, or\n"
                     "computed now.",
                     tables,
                     pos,
                     32,
                     &n_pos};
    bool help;
    if (!args_parse(&spec, argc, argv, &help)) return help ? 0 : 2;
    if (n_pos < 1) {
        tool_error(cmd, "expected one or more model files");
        return 2;
    }
    int ret = 0;
    for (int i = 0; i < n_pos; i++) {
        rp_gguf *g;
        rp_status s = rp_gguf_open(pos[i], &g);
        if (s) {
            tool_fail(cmd, s);
            ret = 1;
            continue;
        }
        rp_content_hash h;
        progress pr;
        progress_init(&pr, "hashing the weights");
        s = recompute ? rp_content_hash_compute(g, 0, progress_cb, &pr, &h)
                      : rp_content_hash_get(g, progress_cb, &pr, &h);
        progress_done(&pr);
        if (s) {
            tool_fail(cmd, s);
            ret = 1;
        } else {
            bool computed = h.source == RP_HASH_COMPUTED && !recompute;
            printf("%s  %s  (%s%s%s)\n", h.hash, pos[i], rp_hash_source_name(h.source),
                   !computed  ? ""
                   : h.cached ? ", cached in "
                              : ", not cached: ",
                   !computed  ? ""
                   : h.cached ? h.cache_path
                              : h.cache_note);
        }
        rp_gguf_close(g);
    }
    return ret;
}

typedef struct plan_cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} plan_cmd;

static const plan_cmd g_plan_cmds[] = {
    {"save", plan_save,
     "write a plan file for a model: -m MODEL --repeat-layers SPEC --name N -o FILE"},
    {"show", plan_show, "print a plan file"},
    {"check", plan_check, "does a plan file apply to a model? -m MODEL FILE [--plan-force]"},
    {"hash", plan_hash, "the content hash of models' weights (what plan files record)"},
};

static void plan_usage(FILE *fp) {
    fprintf(
        fp,
        "usage: reprise plan SUBCOMMAND [options]   (reprise plan SUBCOMMAND --help)\n\n"
        "Plans as files: a name, a description, a spec and the identity of the base model.\n"
        "Apply one with --plan FILE (run, chat, serve, perplexity, merge, inspect); serve several\n"
        "over one copy of the weights with `reprise serve -m MODEL --plan NAME=FILE ...`.\n\n");
    for (size_t i = 0; i < sizeof g_plan_cmds / sizeof g_plan_cmds[0]; i++)
        fprintf(fp, "  %-6s %s\n", g_plan_cmds[i].name, g_plan_cmds[i].summary);
}

int cmd_plan(int argc, char **argv) {
    if (argc < 2) {
        plan_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        plan_usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof g_plan_cmds / sizeof g_plan_cmds[0]; i++)
        if (!strcmp(argv[1], g_plan_cmds[i].name)) return g_plan_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "reprise plan: unknown subcommand '%s'\n\n", argv[1]);
    plan_usage(stderr);
    return 2;
}
