/* reprise quantize: rewrite a model's weights in another type with
 * llama.cpp's per-tensor mixtures (the choice of types and the conversion are
 * the library's rp_quantize_*): the plan, the fallbacks it made, a dry run's
 * table, the write. */
#include "tools.h"

#include <inttypes.h>
#include <string.h>

/* The rows of a tensor did not divide into the chosen type's blocks. */
static void print_fallbacks(const char *cmd, const rp_quantize_plan *q) {
    for (uint64_t i = 0; i < rp_quantize_plan_n_tensors(q); i++) {
        rp_quantize_tensor t;
        rp_type_info from;
        rp_quantize_plan_tensor(q, i, &t);
        if (t.fallback_from < 0 || !rp_type_get_info(t.fallback_from, &from)) continue;
        fprintf(stderr, "%s: %s has rows of %" PRId64 ", not a multiple of %s's %d: using %s\n",
                cmd, t.name, t.row, from.name, from.block_size, rp_type_name(t.type_out));
    }
}

static void print_dry_run(const char *in, const rp_quantize_plan *q) {
    for (uint64_t i = 0; i < rp_quantize_plan_n_tensors(q); i++) {
        rp_quantize_tensor t;
        rp_quantize_plan_tensor(q, i, &t);
        printf("%-40s %6s -> %-6s %8.3f MiB\n", t.name, rp_type_name(t.type_in),
               rp_type_name(t.type_out), (double)t.bytes_out / 1048576.0);
    }
    uint64_t bytes_in, bytes_out;
    int n_fallback;
    rp_quantize_plan_totals(q, &bytes_in, &bytes_out, &n_fallback);
    printf("%s: %.2f MiB -> %.2f MiB (%s)%s\n", in, (double)bytes_in / 1048576.0,
           (double)bytes_out / 1048576.0, rp_quantize_plan_type(q),
           n_fallback ? ", with fallbacks" : "");
}

static int quantize_write(const char *cmd, rp_quantize_plan *q, const char *out) {
    progress pr;
    progress_init(&pr, "quantizing");
    rp_status s = rp_quantize_plan_write(q, out, progress_cb, &pr);
    progress_done(&pr);
    if (s) return tool_fail(cmd, s);
    uint64_t bytes_in, bytes_out;
    rp_quantize_plan_totals(q, &bytes_in, &bytes_out, NULL);
    if (g_verbosity > 0)
        fprintf(stderr, "%s: wrote %s (%s): %.2f MiB -> %.2f MiB\n", cmd, out,
                rp_quantize_plan_type(q), (double)bytes_in / 1048576.0,
                (double)bytes_out / 1048576.0);
    return 0;
}

int cmd_quantize(int argc, char **argv) {
    const char *cmd = "quantize";
    rp_quantize_params p = rp_quantize_default_params();
    bool dry = false, force = false;
    str_list tt = {0};
    const arg_opt opts[] = {
        {"-t|--threads", ARG_INT, &p.n_threads, "N", "threads (default: physical cores)"},
        {"--pure", ARG_FLAG, &p.pure, NULL,
         "one type for every 2-D weight: no mixture, no F16 adapters"},
        {"--tensor-type", ARG_STRS, &tt, "REGEX=TYPE",
         "type of the tensors whose names match the POSIX extended REGEX (repeatable, first match "
         "wins; wins over the mixture)"},
        {"--dry-run", ARG_FLAG, &dry, NULL,
         "print the per-tensor plan and the resulting size; write nothing"},
        {"--allow-requantize", ARG_FLAG, &p.allow_requantize, NULL,
         "accept quantized input (quality suffers)"},
        {"--force", ARG_FLAG, &force, NULL,
         "write the output even when it is one of the inputs (same file)"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    const char *pos[3];
    int npos = 0;
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise quantize IN.gguf OUT.gguf TYPE [-t N] [--pure] [--tensor-type "
                 "REGEX=TYPE] [--dry-run]",
        .description =
            "TYPE: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S "
            "Q5_K_M Q6_K\nIQ4_NL IQ4_XS F16 BF16 F32. The _S/_M/_L mixtures follow llama.cpp's "
            "rules (more bits for the\noutput and token embedding, attn_v and part of ffn_down); "
            "1-D tensors stay F32; a tensor whose\nrows do not divide into the type's blocks falls "
            "back to one that fits; adapter tensors\n(*ffn_gate_up_adapter_*) stay F16 unless "
            "--pure or a --tensor-type names them.",
        .tables = tables,
        .pos = pos,
        .max_pos = 3,
        .n_pos = &npos};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (npos != 3 && !(dry && npos == 2)) {
        tool_error(cmd, "expected IN.gguf OUT.gguf TYPE (see --help)");
        return 2;
    }
    const char *in = pos[0], *out = npos == 3 ? pos[1] : NULL;
    p.type = pos[npos - 1];
    if (rp_quantize_ftype(p.type) < 0) {
        tool_error(cmd, "unknown type '%s' (see --help for the list)", p.type);
        return 2;
    }
    if (!tool_check_threads(cmd, &p.n_threads, false)) return 2;
    p.tensor_types = tt.v;
    rp_output_allow_inputs(force);
    tool_remove_temps_on_signals();
    p.n_tensor_types = tt.n;
    rp_quantize_plan *q;
    rp_status s = rp_quantize_plan_new(in, &p, &q);
    if (s) {
        tool_fail(cmd, s);
        return 2;
    }
    print_fallbacks(cmd, q);
    if (dry)
        print_dry_run(in, q);
    else
        rc = quantize_write(cmd, q, out);
    rp_quantize_plan_free(q);
    return dry ? 0 : rc;
}
