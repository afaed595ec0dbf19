/* reprise merge: write a plan as a physically merged GGUF, for engines that
 * have no plans (the copying is the library's rp_merge_write). */
#include "tools.h"

int cmd_merge(int argc, char **argv) {
    const char *cmd = "merge";
    model_opts mo;
    model_opts_init(&mo);
    const char *out = NULL;
    bool force = false;
    const arg_opt opts[] = {
        {"-o|--output", ARG_STR, &out, "FILE", "merged GGUF to write"},
        {"--force", ARG_FLAG, &force, NULL,
         "write the output even when it is one of the inputs (same file)"},
        {0},
    };
    const arg_opt *tables[] = {opts, model_opts_table(&mo, MO_ALL), NULL};
    const char *const epilog[] = {g_plan_help, NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise merge -m IN.gguf --repeat-layers SPEC -o OUT.gguf",
        .description =
            "Writes the plan as a physically merged file: each step's tensors are copied to its "
            "new\nlayer index and block_count is updated. The result costs the repeated layers' "
            "weights\nagain; the runtime plan gives bit-identical logits without that cost.",
        .tables = tables,
        .epilog = epilog};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (!out) {
        tool_error(cmd, "no output file (-o FILE)");
        return 2;
    }
    if (!mo.repeat_layers && !mo.layer_map && !mo.plan_file) {
        tool_error(cmd, "no plan given (--repeat-layers SPEC, --layer-map MAP or --plan FILE)");
        return 2;
    }
    rp_output_allow_inputs(force);
    tool_remove_temps_on_signals();
    mo.n_ctx = 16; /* the context only builds and validates the plan */
    rp_model *m;
    rp_context *c;
    int code;
    if (!tool_load(cmd, &mo, 1, &m, &c, &code)) return code;
    progress pr;
    progress_init(&pr, "writing");
    rp_merge_info info;
    rp_status s = rp_merge_write(c, out, progress_cb, &pr, &info);
    progress_done(&pr);
    if (!s && g_verbosity > 0)
        fprintf(stderr, "wrote %s: %d layers (%d source + %d repeated steps), %.2f MiB\n", out,
                info.n_layer_out, info.n_src, info.n_repeated, (double)info.bytes / 1048576.0);
    rp_context_free(c);
    rp_model_free(m);
    return s ? tool_fail(cmd, s) : 0;
}
