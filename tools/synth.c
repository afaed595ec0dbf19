/* reprise synth: a deterministic random-weight model of a given shape. */
#include "tools.h"

#include <string.h>

int cmd_synth(int argc, char **argv) {
    const char *cmd = "synth";
    rp_synth_params p = rp_synth_default_params();
    const char *out = NULL, *type = "f32", *arch = "llama";
    bool tied = false;
    int head_dim = 0;
    float rope_base = 0;
    const arg_opt opts[] = {
        {"--arch", ARG_STR, &arch, "NAME",
         "architecture (llama, qwen2, qwen3, ...; default llama)"},
        {"--n-embd", ARG_INT, &p.n_embd, "N", "embedding width (default 256)"},
        {"--n-layer", ARG_INT, &p.n_layer, "N", "layers (default 4)"},
        {"--n-head", ARG_INT, &p.n_head, "N", "attention heads (default 8)"},
        {"--n-head-kv", ARG_INT, &p.n_head_kv, "N", "key/value heads (default = n-head)"},
        {"--head-dim", ARG_INT, &head_dim, "N", "head width (default n-embd / n-head)"},
        {"--n-ff", ARG_INT, &p.n_ff, "N", "feed-forward width (default 688)"},
        {"--n-vocab", ARG_INT, &p.n_vocab, "N",
         "vocabulary size of the built-in byte vocabulary (default 512)"},
        {"--ctx", ARG_INT, &p.n_ctx, "N", "context_length key (default 4096)"},
        {"--rope-base", ARG_FLOAT, &rope_base, "F",
         "rope frequency base (default: the architecture's)"},
        {"--window", ARG_INT, &p.window, "N", "sliding window (architectures that have one)"},
        {"--n-rot", ARG_INT, &p.n_rot, "N",
         "rotary dimensions per head (default: the architecture's)"},
        {"--ssm-state", ARG_INT, &p.ssm_state, "N",
         "recurrent head width / state size (hybrids such as qwen35)"},
        {"--ssm-groups", ARG_INT, &p.ssm_groups, "N", "recurrent key heads"},
        {"--ssm-heads", ARG_INT, &p.ssm_heads, "N", "recurrent value heads"},
        {"--ssm-conv", ARG_INT, &p.ssm_conv, "N", "recurrent conv kernel width"},
        {"--attn-interval", ARG_INT, &p.attn_interval, "N",
         "every N-th layer is full attention (hybrids)"},
        {"--nextn", ARG_INT, &p.n_nextn, "N",
         "NextN/MTP layers after the trunk (-1 = none; default: the architecture's)"},
        {"--shared-blocks", ARG_INT, &p.n_shared_blocks, "N",
         "Zamba2: shared transformer blocks (default 2)"},
        {"--adapter-rank", ARG_INT, &p.adapter_rank, "N",
         "Zamba2: rank of each hybrid visit's MLP adapter pair (default 8)"},
        {"--attn-adapter-rank", ARG_INT, &p.attn_adapter_rank, "N",
         "Zamba2: rank of the q/k/v adapter pairs (default 0: none)"},
        {"--adapters-merged", ARG_FLAG, &p.adapters_merged, NULL,
         "Zamba2: the older merged form (a full ffn_up per hybrid layer)"},
        {"--type", ARG_STR, &type, "TYPE",
         "type of the 2-D weights: f32, f16, bf16, q8_0, ... (default f32)"},
        {"--tied", ARG_FLAG, &tied, NULL,
         "no output.weight: the embedding doubles as the output matrix"},
        {"--vocab", ARG_STR, &p.vocab_path, "FILE",
         "copy the tokenizer of this GGUF (sets the vocabulary size)"},
        {"-s|--seed", ARG_U64, &p.seed, "N", "seed (default 42)"},
        {"-o|--output", ARG_STR, &out, "FILE", "output GGUF"},
        {0},
    };
    const arg_opt *tables[] = {opts, NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise synth --arch A [shape options] [--type T] [--vocab FROM.gguf] -o OUT",
        .description = "Writes a deterministic random-weight model (same seed, same bytes) for "
                       "tests, benchmarks and\n"
                       "the demo. Its text is noise; its arithmetic is the real thing.",
        .tables = tables};
    int rc = args_parse_cmd(&spec, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (!out) {
        tool_error(cmd, "no output file (-o FILE)");
        return 2;
    }
    int t = rp_type_from_name(type);
    if (t < 0) {
        tool_error(cmd, "unknown type '%s'", type);
        return 2;
    }
    p.arch = arch;
    p.type = t;
    p.tied = tied;
    p.head_dim = head_dim;
    p.rope_base = rope_base;
    progress pr;
    progress_init(&pr, "writing");
    rp_status s = rp_synth_write(&p, out, progress_cb, &pr);
    progress_done(&pr);
    if (s) return tool_fail(cmd, s);
    if (g_verbosity > 0) fprintf(stderr, "wrote %s\n", out);
    return 0;
}
