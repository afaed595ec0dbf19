/* reprise plan: plans as files you can share, check and serve by name.
 *
 *   plan save  -m MODEL --repeat-layers SPEC --name N [--description D] -o FILE
 *   plan show  FILE [--json]
 *   plan check -m MODEL FILE [--plan-force]
 *   plan hash  MODEL...
 *
 * What every tool does with --plan FILE is plan_resolve.c. */
#include "tools.h"

#include <stdlib.h>
#include <string.h>

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
    const char *const epilog[] = {g_plan_help, NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise plan save -m MODEL (--repeat-layers SPEC | --layer-map MAP) --name NAME "
                 "[--description TEXT] -o FILE",
        .description =
            "Writes a plan file: the name, the description, the spec and the identity of MODEL\n"
            "(architecture, layer count and the content hash of its tensors). `--plan FILE`\n"
            "applies it wherever a spec is accepted; docs/plan-files.md describes the format.",
        .tables = tables,
        .epilog = epilog};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
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
    rp_model *m = tool_load_model(cmd, model, false);
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
    const arg_spec spec = {.cmd = cmd,
                           .usage = "reprise plan show FILE [--json]",
                           .description =
                               "Prints a plan file: name, description, spec, the steps it runs on "
                               "its\nbase model, and the base model's identity.",
                           .tables = tables,
                           .pos = pos,
                           .max_pos = 1,
                           .n_pos = &n_pos};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
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
    const int need = rp_planfile_steps(pf, NULL, 0);
    char *steps = need >= 0 ? malloc((size_t)need + 1) : NULL;
    if (steps) rp_planfile_steps(pf, steps, (size_t)need + 1);
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
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise plan check -m MODEL FILE [--plan-force]",
        .description =
            "Says whether the plan file applies to MODEL (exit 0) or why not (exit 1): the\n"
            "architecture, the layer count and the content hash of the weights must match;\n"
            "--plan-force accepts another content hash.",
        .tables = tables,
        .pos = pos,
        .max_pos = 1,
        .n_pos = &n_pos};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (n_pos != 1 || !model) {
        tool_error(cmd, "expected -m MODEL and one plan file (see --help)");
        return 2;
    }
    rp_planfile *pf;
    rp_status s = rp_planfile_read(pos[0], &pf);
    if (s) return tool_fail(cmd, s);
    rp_model *m = tool_load_model(cmd, model, false);
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
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise plan hash MODEL... [--recompute]",
        .description = "Prints the content hash of each model's tensors (what plan files record)\n"
                       "and where it came from: the file's metadata, the cache beside it, or\n"
                       "computed now.",
        .tables = tables,
        .pos = pos,
        .max_pos = 32,
        .n_pos = &n_pos};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
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
