/* The model and context options every command that loads a model accepts,
 * and the loading itself: the model with progress, the plan (a spec or a plan
 * file), the context, the plan report. */
#include "tools.h"

#include <stdlib.h>
#include <string.h>

const char *const g_plan_help =
    "layer plans (weights are shared by pointer: a repeated layer costs compute and KV, no "
    "memory):\n"
    "  --repeat-layers SPEC  RYS blocks: 'i,j' or 'i-j' is the half-open range [i,j) of source\n"
    "                        layers, run a second time right after its first pass; several\n"
    "                        blocks separated by ';' (any order, must not overlap).\n"
    "                        '26,34' on 64 layers runs ...,25,26..33,26..33,34,...,63.\n"
    "  --layer-map MAP       the whole sequence of source layers, comma separated; an item is a\n"
    "                        layer 'k' or an inclusive range 'a..b' (ExLlamaV3 style):\n"
    "                        '0..15,11..31' or '0,1,2,2,3'. Layers may repeat or be skipped.\n"
    "  step deltas          an item or block may end in '@s=F' (residual scale F of its steps'\n"
    "                        attention and FFN contributions) and '@lora=PATH[*F]' (an adapter\n"
    "                        applied at those steps only); on a --repeat-layers block they apply\n"
    "                        to its second pass: '5,6@s=0.707', '0..5,5@lora=j.gguf,6..11'.\n"
    "  --lora FILE           a LoRA adapter GGUF (llama.cpp's format; reprise convert --lora)\n"
    "                        on every step of its layers; --lora-scaled FILE F at scale F.\n"
    "  --plan FILE           a plan file (reprise plan save): its spec, applied only to the model\n"
    "                        it was made for (architecture, layer count, content hash of the\n"
    "                        weights); --plan-force accepts weights with another content hash.";

void model_opts_init(model_opts *o) {
    memset(o, 0, sizeof *o);
    o->type_k = RP_TYPE_F16;
    o->type_v = RP_TYPE_F16;
    o->n_gpu_layers = -1;
}

const arg_opt *model_opts_table(model_opts *o, unsigned which) {
    static arg_opt t[24];
    const bool chunks = which & MO_CHUNKS;
    /* each entry with the flag that selects it (0: always) */
    const struct {
        unsigned flag;
        arg_opt opt;
    } all[] = {
        {0, {"-m|--model", ARG_STR, &o->model, "FILE", "GGUF model to load"}},
        {0,
         {"-c|--ctx-size", ARG_U32, &o->n_ctx, "N",
          chunks ? "tokens per chunk (default 512, or the training context if smaller)"
                 : "context size per sequence (default 0: the model's training context, "
                   "at most 4096; more is accepted, with a warning past the training "
                   "context)"}},
        {0,
         {"-b|--batch-size", ARG_U32, &o->n_batch, "N",
          chunks ? "tokens per decode: max(1, N/c) chunks together (default 512)"
                 : "tokens computed per pass (default 512)"}},
        {MO_SCALAR,
         {"-t|--threads", ARG_INT, &o->n_threads, "N", "threads (default: physical cores)"}},
        {0,
         {"--threads-force", ARG_FLAG, &o->threads_force, NULL,
          "use -t N even beyond the machine's cores (otherwise capped to them)"}},
        {MO_SCALAR,
         {"-ctk|--cache-type-k", ARG_KVTYPE, &o->type_k, "TYPE",
          "KV cache type for K: f32, f16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl (default f16)"}},
        {MO_SCALAR,
         {"-ctv|--cache-type-v", ARG_KVTYPE, &o->type_v, "TYPE",
          "KV cache type for V: the same types (default f16)"}},
        {MO_SPEC,
         {"--repeat-layers", ARG_STR, &o->repeat_layers, "SPEC",
          "RYS plan: repeat source layers [i,j) (see below)"}},
        {MO_SPEC,
         {"--layer-map", ARG_STR, &o->layer_map, "MAP",
          "explicit plan: '0..15,11..31' or '0,1,2,2,3'"}},
        {MO_PLAN_FILE,
         {"--plan", ARG_STR, &o->plan_file, "FILE",
          "plan file (reprise plan save) checked against the model"}},
        {MO_PLAN_FORCE,
         {"--plan-force", ARG_FLAG, &o->plan_force, NULL,
          "apply --plan to weights with another content hash"}},
        {MO_DUMP, {"--dump-plan", ARG_FLAG, &o->dump_plan, NULL, "print the layer plan and exit"}},
        {MO_DEVICE,
         {"-ngl|--n-gpu-layers", ARG_INT, &o->n_gpu_layers, "N",
          "layers on the device: 0 = the CPU, the layer count or more = all (default: all "
          "when --device names a device)"}},
        {MO_DEVICE,
         {"-dev|--device", ARG_STR, &o->device, "NAME",
          "where the model runs: cpu, vulkan0, ... (default cpu; vulkan0 with -ngl)"}},
        {MO_DEVICE,
         {"--list-devices", ARG_FLAG, &o->list_devices, NULL, "list the devices and exit"}},
        {0,
         {"--mem-limit", ARG_U64, &o->mem_limit, "MIB",
          "refuse a context whose state and scratch exceed MIB MiB (default: the memory "
          "available)"}},
        {0,
         {"--lora", ARG_STRS, &o->lora, "FILE",
          "LoRA adapter (GGUF) on every step of its layers; repeatable"}},
        {0,
         {"--lora-scaled", ARG_STRS2, &o->lora_scaled, "FILE SCALE",
          "LoRA adapter at a user scale; repeatable"}},
        {MO_DUMP,
         {"--dump-tensors", ARG_STR, &o->dump_tensors, "DIR",
          "write the forward's named intermediate tensors to DIR (also REPRISE_TRACE=DIR)"}},
        {0,
         {"--mmap", ARG_FLAG, &o->mmap, NULL,
          "serve, run: keep the model file mapped instead of reading it into private memory "
          "(less anonymous memory; a file truncated or rewritten meanwhile then ends the process "
          "with SIGBUS)"}},
        {0, {"-q|--quiet", ARG_FLAG, &o->quiet, NULL, "only errors on stderr"}},
    };
    size_t k = 0;
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        if (all[i].flag == MO_SCALAR ? !(which & MO_LISTS) : !all[i].flag || (which & all[i].flag))
            t[k++] = all[i].opt;
    t[k] = (arg_opt){0};
    return t;
}

bool g_model_private_copy;

rp_model *tool_load_model(const char *cmd, const char *path, bool vocab_only) {
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = vocab_only;
    mp.private_copy = g_model_private_copy && !vocab_only;
    progress pr;
    progress_init(&pr, "loading");
    if (!vocab_only) {
        mp.progress = progress_cb;
        mp.progress_user = &pr;
    }
    rp_model *m = NULL;
    rp_status s = rp_model_load(path, &mp, &m);
    progress_done(&pr);
    if (s) tool_fail(cmd, s);
    return m;
}

rp_context_params model_opts_context(const model_opts *o, uint32_t n_seq) {
    rp_context_params cp = rp_context_default_params();
    cp.n_ctx = o->n_ctx;
    cp.n_batch = o->n_batch;
    cp.n_seq_max = n_seq;
    cp.n_threads = o->n_threads;
    cp.type_k = o->type_k;
    cp.type_v = o->type_v;
    cp.repeat_layers = o->repeat_layers;
    cp.layer_map = o->layer_map;
    cp.keep_hidden = o->keep_hidden;
    cp.device = o->device;
    cp.mem_limit = o->mem_limit > (UINT64_MAX >> 20) ? UINT64_MAX : o->mem_limit << 20;
    cp.plan_only = o->dump_plan; /* the plan's figures, nothing allocated */
    /* the adapters: read during rp_context_new only, so one table serves every call */
    static rp_lora_params lora[32];
    int n = 0;
    for (int i = 0; i < o->lora.n && n < 32; i++) lora[n++] = (rp_lora_params){o->lora.v[i], 1.0f};
    for (int i = 0; i + 1 < o->lora_scaled.n && n < 32; i += 2)
        lora[n++] = (rp_lora_params){o->lora_scaled.v[i], strtof(o->lora_scaled.v[i + 1], NULL)};
    cp.lora = lora;
    cp.n_lora = n;
    return cp;
}

bool tool_list_devices(const model_opts *o) {
    if (!o->list_devices) return false;
    rp_device_info d[17];
    int n = 0;
    char note[512];
    if (rp_device_list(d, (int)ARRAY_LEN(d), &n, note, sizeof note)) n = 0;
    printf("available devices:\n");
    for (int i = 0; i < n; i++) {
        printf("  %-9s %s", d[i].name, d[i].desc);
        if (d[i].mem_bytes) printf(", %.0f MiB", (double)d[i].mem_bytes / 1048576.0);
        printf("\n");
    }
    if (*note) printf("no Vulkan device: %s\n", note);
    return true;
}

bool model_opts_device(const char *cmd, const model_opts *o, const rp_model *m,
                       const char **device) {
    const int n_layer = rp_model_n_layer(m);
    const bool cpu = o->device && !strcmp(o->device, "cpu");
    *device = o->device;
    if (o->n_gpu_layers < 0) return true;
    if (o->n_gpu_layers == 0) {
        if (o->device && !cpu) {
            tool_error(cmd, "-ngl 0 runs on the CPU, --device %s asks for the device: give one",
                       o->device);
            return false;
        }
        *device = NULL;
        return true;
    }
    if (o->n_gpu_layers < n_layer) {
        tool_error(cmd,
                   "-ngl %d: partial offload is not supported yet; give -ngl 0 (the CPU) or "
                   "-ngl %d or more (all %d layers of the model on the device)",
                   o->n_gpu_layers, n_layer, n_layer);
        return false;
    }
    if (cpu) {
        tool_error(cmd, "-ngl %d asks for the device, --device cpu for the CPU: give one",
                   o->n_gpu_layers);
        return false;
    }
    if (!o->device) *device = "vulkan0";
    return true;
}

void tool_print_device(FILE *fp, const rp_context *ctx) {
    if (!strcmp(rp_context_device(ctx), "cpu")) return;
    char buf[1024];
    rp_context_device_report(ctx, buf, sizeof buf);
    fputs(buf, fp);
}

/* The checks of the plan options that need no model. */
static bool plan_opts_check(const char *cmd, model_opts *o) {
    if (!tool_check_threads(cmd, &o->n_threads, o->threads_force)) return false;
    /* an empty plan is no plan: refused rather than run as the identity */
    if ((o->repeat_layers && !*o->repeat_layers) || (o->layer_map && !*o->layer_map)) {
        tool_error(cmd, "%s is empty (leave it out to run the model's own layers)",
                   o->repeat_layers && !*o->repeat_layers ? "--repeat-layers" : "--layer-map");
        return false;
    }
    if (o->lora.n + o->lora_scaled.n / 2 > 32) {
        tool_error(cmd, "at most 32 LoRA adapters");
        return false;
    }
    for (int i = 1; i < o->lora_scaled.n; i += 2) {
        char *end;
        float f = strtof(o->lora_scaled.v[i], &end);
        if (end == o->lora_scaled.v[i] || *end || !(f == f)) {
            tool_error(cmd, "--lora-scaled %s %s: the scale is not a number",
                       o->lora_scaled.v[i - 1], o->lora_scaled.v[i]);
            return false;
        }
    }
    if (o->repeat_layers && o->layer_map) {
        tool_error(cmd, "--repeat-layers and --layer-map are alternatives; give one");
        return false;
    }
    if (o->plan_file && (o->repeat_layers || o->layer_map)) {
        tool_error(cmd, "--plan and %s are alternatives; give one",
                   o->repeat_layers ? "--repeat-layers" : "--layer-map");
        return false;
    }
    return true;
}

rp_context *tool_context_new(const char *cmd, const model_opts *o, const rp_model *m,
                             uint32_t n_seq) {
    rp_context_params cp = model_opts_context(o, n_seq);
    rp_planfile *pf = NULL;
    if (!model_opts_device(cmd, o, m, &cp.device)) return NULL;
    if (!tool_plan_resolve(cmd, o, m, &pf, &cp.repeat_layers, &cp.layer_map)) return NULL;
    rp_context *ctx = NULL;
    rp_status s = rp_context_new(m, &cp, &ctx);
    rp_planfile_free(pf);
    if (s) tool_fail(cmd, s);
    return ctx;
}

bool tool_load(const char *cmd, const model_opts *o_in, uint32_t n_seq, rp_model **model,
               rp_context **ctx, int *exit_code) {
    model_opts copy = *o_in, *o = &copy; /* -t may be capped */
    *model = NULL;
    *ctx = NULL;
    *exit_code = 1;
    if (o->quiet) g_verbosity = 0;
    if (tool_list_devices(o)) {
        *exit_code = 0;
        return false;
    }
    if (!o->model) {
        tool_error(cmd, "no model given (-m FILE)");
        return false;
    }
    if (o->mmap) g_model_private_copy = false;
    if (!plan_opts_check(cmd, o) || !(*model = tool_load_model(cmd, o->model, false))) return false;
    const int n_train = rp_model_n_ctx_train(*model);
    if (n_train > 0 && o->n_ctx > (uint32_t)n_train && g_verbosity > 0)
        fprintf(stderr,
                "%s: warning: -c %u is past the model's training context (%d): quality may drop "
                "beyond %d positions\n",
                cmd, o->n_ctx, n_train, n_train);
    if (!(*ctx = tool_context_new(cmd, o, *model, n_seq))) {
        rp_model_free(*model);
        *model = NULL;
        return false;
    }
    const char *trace_dir = o->dump_tensors ? o->dump_tensors : getenv("REPRISE_TRACE");
    if (trace_dir && *trace_dir && !o->dump_plan && !tool_trace_open(cmd, *ctx, trace_dir)) {
        rp_context_free(*ctx);
        rp_model_free(*model);
        *ctx = NULL;
        *model = NULL;
        return false;
    }
    if (o->dump_plan) {
        tool_print_plan(stdout, *ctx);
        rp_context_free(*ctx);
        rp_model_free(*model);
        *ctx = NULL;
        *model = NULL;
        *exit_code = 0;
        return false;
    }
    if (g_verbosity > 0) {
        char desc[256];
        rp_model_desc(*model, desc, sizeof desc);
        fprintf(stderr, "model: %s\n", desc);
        tool_print_plan(stderr, *ctx);
        tool_print_device(stderr, *ctx);
    }
    return true;
}

void tool_print_plan(FILE *fp, const rp_context *ctx) {
    int n = rp_context_plan_report(ctx, NULL, 0);
    char *buf = malloc((size_t)n + 1);
    if (!buf) return;
    rp_context_plan_report(ctx, buf, (size_t)n + 1);
    fputs(buf, fp);
    free(buf);
}
