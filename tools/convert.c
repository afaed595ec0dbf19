/* reprise convert: a Hugging Face checkpoint directory to a GGUF file. */
#include "tools.h"

#include <inttypes.h>
#include <string.h>

static void print_plan(const rp_conv *cv) {
    size_t n = rp_conv_n_out(cv);
    printf("%-34s %-5s %-16s %11s  %s\n", "tensor", "type", "shape", "bytes", "from");
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        rp_conv_tensor o;
        rp_conv_tensor_at(cv, i, &o);
        char shape[64], from[400];
        size_t k = 0;
        for (uint32_t d = 0; d < o.n_dims && k < sizeof shape; d++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%" PRId64, d ? ", " : "[",
                                  o.ne[d]);
        if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
        rp_conv_tensor_from(cv, i, from, sizeof from);
        total += o.bytes;
        printf("%-34s %-5s %-16s %11" PRIu64 "  %s\n", o.name, rp_type_name(o.type), shape, o.bytes,
               from);
    }
    uint64_t size = rp_conv_file_size(cv);
    printf("\n%s -> %s: %zu tensors, %" PRIu64 " bytes of tensor data, %" PRId64 " tokens\n",
           rp_conv_hf_arch(cv), rp_conv_arch_name(cv), n, total, rp_conv_n_tokens(cv));
    printf("file size: %" PRIu64 " bytes (%.2f MiB)\n", size, (double)size / 1048576.0);
}

int cmd_convert(int argc, char **argv) {
    const char *cmd = "convert";
    rp_convert_params p = rp_convert_default_params();
    const char *out = NULL, *outtype = "f16";
    const char *arch_opts = NULL;
    bool dry_run = false, quiet = false, zamba2_merged = false;
    const arg_opt opts[] = {
        {"-o|--outfile", ARG_STR, &out, "FILE",
         "output GGUF (written to a temporary file, then renamed)"},
        {"--outtype", ARG_STR, &outtype, "TYPE",
         "type of the matrices: f32, f16 (default), bf16, q8_0 or auto"},
        {"--dry-run", ARG_FLAG, &dry_run, NULL,
         "print the tensor table and the file size; write nothing (works on a config.json alone)"},
        {"--vocab-only", ARG_FLAG, &p.vocab_only, NULL, "write the metadata and tokenizer only"},
        {"--no-vocab", ARG_FLAG, &p.no_vocab, NULL,
         "convert without a tokenizer (tokenizer.ggml.model = none)"},
        {"--vocab-pre", ARG_STR, &p.vocab_pre, "NAME",
         "tokenizer.ggml.pre for a pre-tokenizer reprise does not know"},
        {"--arch-opt", ARG_STR, &arch_opts, "LIST",
         "options of the architecture's converter, KEY[=VALUE],... (Zamba2: merged)"},
        {"--zamba2-merged", ARG_FLAG, &zamba2_merged, NULL,
         "Zamba2: the older merged form (each visit's MLP adapter baked into its own full ffn_up) "
         "instead of shared blocks stored once + adapter pairs (= --arch-opt merged)"},
        {"--lora", ARG_STR, &p.lora_dir, "PEFT_DIR",
         "write a LoRA adapter GGUF from a PEFT directory (adapter_config.json, "
         "adapter_model.safetensors); HF_DIR is its base model (config.json only; default "
         "PEFT_DIR)"},
        {"-q|--quiet", ARG_FLAG, &quiet, NULL, "only errors on stderr"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    const char *pos[1];
    int n_pos = 0;
    char about[1024];
    snprintf(about, sizeof about,
             "Converts a Hugging Face checkpoint (config.json, *.safetensors, tokenizer.json) to "
             "GGUF with\n"
             "the names, keys and layouts llama.cpp's converter writes. 1-D tensors stay F32; q8_0 "
             "falls\n"
             "back to f16 for rows that are not a multiple of 32. Architectures:\n  %s",
             rp_conv_arch_list());
    const arg_spec spec = {
        .cmd = cmd,
        .usage =
            "reprise convert HF_DIR -o OUT.gguf [--outtype f32|f16|bf16|q8_0|auto] [--dry-run]\n"
            "       reprise convert [HF_DIR] --lora PEFT_DIR -o ADAPTER.gguf",
        .description = about,
        .tables = tables,
        .pos = pos,
        .max_pos = 1,
        .n_pos = &n_pos};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (quiet) g_verbosity = 0;
    if (n_pos == 0 && p.lora_dir) pos[n_pos++] = p.lora_dir;
    if (n_pos != 1) {
        tool_error(cmd, "give one checkpoint directory (see --help)");
        return 2;
    }
    if (!out && !dry_run) {
        tool_error(cmd, "no output file (-o FILE), or --dry-run");
        return 2;
    }
    if (p.vocab_only && p.no_vocab) {
        tool_error(cmd, "--vocab-only and --no-vocab exclude each other");
        return 2;
    }
    if (!strcmp(outtype, "auto"))
        p.outtype = -1;
    else {
        p.outtype = rp_type_from_name(outtype);
        if (p.outtype != RP_TYPE_F32 && p.outtype != RP_TYPE_F16 && p.outtype != RP_TYPE_BF16 &&
            p.outtype != RP_TYPE_Q8_0) {
            tool_error(cmd, "--outtype '%s' is not one of f32, f16, bf16, q8_0, auto", outtype);
            return 2;
        }
    }
    char arch_list[512];
    snprintf(arch_list, sizeof arch_list, "%s%s%s", arch_opts ? arch_opts : "",
             arch_opts && zamba2_merged ? "," : "", zamba2_merged ? "merged" : "");
    p.arch_opts = arch_list;
    p.dir = pos[0];
    p.shapes_from_config = dry_run;
    rp_conv *cv;
    rp_status s = rp_conv_open(&p, &cv);
    if (s) return tool_fail(cmd, s);
    if (dry_run) {
        if (rp_conv_from_shapes(cv))
            printf("(no weights in %s: shapes from config.json)\n", pos[0]);
        print_plan(cv);
        rp_conv_free(cv);
        return 0;
    }
    tool_remove_temps_on_signals();
    progress pr;
    progress_init(&pr, "converting");
    s = rp_conv_write(cv, out, progress_cb, &pr);
    progress_done(&pr);
    if (!s && g_verbosity > 0)
        fprintf(stderr, "wrote %s: %s -> %s, %zu tensors, %" PRIu64 " bytes\n", out,
                rp_conv_hf_arch(cv), rp_conv_arch_name(cv), rp_conv_n_out(cv),
                rp_conv_file_size(cv));
    rp_conv_free(cv);
    return s ? tool_fail(cmd, s) : 0;
}
