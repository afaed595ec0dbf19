/* reprise: one binary, one subcommand per tool. */
#include "tools.h"

#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command g_commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"perplexity", cmd_perplexity, "perplexity of a text; KL divergence against a base model"},
    {"chat", cmd_chat, "talk with a model through its chat template"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"inspect", cmd_inspect, "show a GGUF file's header, metadata and tensors"},
    {"synth", cmd_synth, "write a deterministic random-weight model"},
    {"convert", cmd_convert, "convert a Hugging Face checkpoint (safetensors) to GGUF"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server (continuous batching over N slots)"},
    {"scan", cmd_scan, "evaluate every repeat block (i,j): CSV, heatmap, Pareto list"},
    {"quantize", cmd_quantize, "quantize a model: llama.cpp types and mixtures (Q4_K_M, ...)"},
    {"bench", cmd_bench, "prompt and generation speed (llama-bench style table)"},
    {"merge", cmd_merge, "write a plan as a physically merged GGUF file"},
    {"plan", cmd_plan, "plan files: save, show, check; the content hash of a model's weights"},
    {"demo", cmd_demo, "the `make run` job: a short generation on the built-in demo model"},
    {"gguf-copy", cmd_gguf_copy, "re-write a GGUF file through reprise's reader and writer"},
    {"compare", cmd_compare, "compare logits of every position, or two tensor traces"},
};

static void usage(FILE *fp) {
    fprintf(fp,
            "reprise %s: GGUF inference where the layers a model runs are a plan over weights "
            "stored once\n\nusage: reprise COMMAND [options]   (reprise COMMAND --help)\n\n"
            "commands:\n",
            RP_VERSION);
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        fprintf(fp, "  %-12s %s\n", g_commands[i].name, g_commands[i].summary);
}

int main(int argc, char **argv) {
    tool_log_init();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("reprise %s\n", RP_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        if (!strcmp(argv[1], g_commands[i].name)) return g_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "reprise: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
