/* Shared pieces of the command-line tools: option tables, messages on stderr,
 * progress on a terminal, small helpers, and the model/context options every
 * subcommand that loads a model accepts. Only the tools talk to the user; they
 * use the library through its public headers alone (reprise.h,
 * reprise_tools.h). Each subcommand reads parse -> validate -> run -> report. */
#ifndef RP_TOOLS_H
#define RP_TOOLS_H

#include "reprise.h"
#include "reprise_tools.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- option tables (common.c) --------------------------------------------- */

typedef enum arg_kind {
    ARG_END = 0,
    ARG_FLAG,   /* bool, no value */
    ARG_INT,    /* int */
    ARG_U32,    /* uint32_t */
    ARG_U64,    /* uint64_t */
    ARG_FLOAT,  /* float */
    ARG_STR,    /* const char * */
    ARG_STRS,   /* repeatable: str_list */
    ARG_KVTYPE, /* int rp_type, a KV cache type (rp_kv_type_supported) */
    ARG_STRS2,  /* repeatable, two values each (--lora-scaled FILE SCALE): str_list pairs */
} arg_kind;

typedef struct str_list {
    const char *v[32];
    int n;
} str_list;

typedef struct arg_opt {
    const char *names; /* "-n|--n-predict": every spelling, '|' separated */
    arg_kind kind;
    void *ptr;
    const char *metavar;
    const char *help;
} arg_opt;

/* A command line: one or more option tables (NULL-terminated list of
 * tables), positional arguments collected in pos (at most max_pos), and the
 * paragraphs --help prints after the options (NULL-terminated; may be NULL). */
typedef struct arg_spec {
    const char *cmd;
    const char *usage;       /* "reprise run -m MODEL [options]" */
    const char *description; /* paragraph printed under usage */
    const arg_opt *const *tables;
    const char **pos;
    int max_pos;
    int *n_pos;
    const char *const *epilog;
} arg_spec;

/* Parses argv[1..]. On an error prints "reprise CMD: ..." and returns false;
 * --help / -h prints the usage (and the epilog) on stdout, sets *help and
 * returns false. */
bool args_parse(const arg_spec *spec, int argc, char **argv, bool *help);
void args_usage(const arg_spec *spec, FILE *fp);
/* args_parse as a subcommand ends it: ARGS_OK to go on, or the exit status
 * (0 after --help, 2 after an error). */
#define ARGS_OK (-1)
int args_parse_cmd(const arg_spec *spec, int argc, char **argv);

/* ---- messages ------------------------------------------------------------ */

extern int g_verbosity; /* 0 quiet (errors), 1 normal, 2 debug */
void tool_log_init(void);
void tool_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "reprise CMD: <rp_last_error()>" and returns 1. */
int tool_fail(const char *cmd, rp_status s);

/* Progress line on stderr when it is a terminal: "label 42% ...". */
typedef struct progress {
    const char *label;
    bool tty;
    double t0, last;
    int last_pct;
} progress;
void progress_init(progress *p, const char *label);
bool progress_cb(float frac, void *user); /* rp_progress_fn; user = progress* */
void progress_update(progress *p, float frac, const char *extra);
void progress_done(progress *p);

/* ---- small helpers ---------------------------------------------------------- */

double now_s(void);                      /* monotonic seconds */
const char *base_name(const char *path); /* what follows the last '/' */
/* "42s", "3m07s", "2h05m" */
void fmt_duration(char *buf, size_t n, double seconds);
char *tool_read_text(const char *cmd, const char *path, size_t *len); /* NULL on error */
/* SIGINT / SIGTERM / SIGHUP remove the temporary files of the writes in
 * progress (rp_atomic_remove_temps), then end the process as the signal would. */
void tool_remove_temps_on_signals(void);
/* -t N checked: negative refused; over the machine's cores capped to them
 * (with a note) unless force. False after printing why. */
bool tool_check_threads(const char *cmd, int *n_threads, bool force);
bool parse_int_list(const char *s, int32_t **out, size_t *n); /* "1,2,3" or "1 2 3" */

/* A growable byte buffer (text, or arrays of ids): data is NUL-terminated
 * after len; false when memory runs out (the buffer is unchanged). */
typedef struct tbuf {
    char *data;
    size_t len, cap;
} tbuf;
bool tbuf_add(tbuf *b, const void *p, size_t n);
bool tbuf_printf(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tbuf_free(tbuf *b);

/* ---- sampling options shared by run and chat (common.c) ----------------------- */

typedef struct sampling_opts {
    rp_sampler_params sp;
    const char *seed_text; /* -s as given ("-1": random) */
    uint64_t seed;         /* the seed used (sampling_opts_check) */
    bool ignore_eos, verbose;
} sampling_opts;

void sampling_opts_init(sampling_opts *o);
/* -s, --temp, --top-k, --top-p, --min-p, the penalties, llama.cpp's other
 * samplers (typical, top-n-sigma, XTC, DRY, Mirostat, --samplers),
 * --ignore-eos, -v */
const arg_opt *sampling_opts_table(sampling_opts *o);
/* Checks the ranges (prints the error) and completes o->sp (the seed: -1
 * draws one, printed at -v). */
bool sampling_opts_check(const char *cmd, sampling_opts *o);
/* What the parameters alone do not carry: DRY's vocabulary, --ignore-eos. */
rp_status sampling_opts_apply(const sampling_opts *o, rp_sampler *smp, const rp_vocab *v);

/* ---- model + context options (load.c) -------------------------------------------- */

typedef struct model_opts {
    const char *model;
    uint32_t n_ctx;
    uint32_t n_batch;
    int n_threads;
    int type_k, type_v;
    const char *repeat_layers;
    const char *layer_map;
    bool dump_plan;
    bool quiet;
    bool keep_hidden;         /* the context keeps final hidden states (speculative MTP drafting) */
    const char *plan_file;    /* --plan FILE: a plan file (plan_resolve.c) */
    bool plan_force;          /* --plan-force: accept weights whose content hash differs */
    bool threads_force;       /* --threads-force: -t beyond the machine's cores */
    const char *dump_tensors; /* --dump-tensors DIR (or REPRISE_TRACE): the trace hook's files */
    int n_gpu_layers;         /* -ngl N: 0 = the CPU, >= the layer count = all; -1 = not given */
    const char *device;       /* -dev NAME: cpu, vulkan0, ... */
    bool list_devices;        /* --list-devices */
    uint64_t mem_limit;       /* --mem-limit MIB: bound on state + scratch (0 = available memory) */
    bool mmap;                /* --mmap: serve/run keep the file mapped (no private copy) */
    str_list lora;            /* --lora FILE */
    str_list lora_scaled;     /* --lora-scaled FILE SCALE, as pairs */
} model_opts;

/* Which of the model options a command takes (-m, -c, -b, -t, -ctk, -ctv and
 * -q always). */
enum {
    MO_SPEC = 1,       /* --repeat-layers, --layer-map */
    MO_PLAN_FILE = 2,  /* --plan */
    MO_PLAN_FORCE = 4, /* --plan-force */
    MO_DUMP = 8,       /* --dump-plan */
    MO_CHUNKS = 16,    /* -c and -b read as chunks of a text (perplexity, scan) */
    MO_LISTS = 32,     /* -t, -ctk, -ctv left to the command (bench: comma lists) */
    MO_SCALAR = 64,    /* (an entry's flag: present unless MO_LISTS) */
    MO_DEVICE = 128,   /* -ngl, -dev, --list-devices */
    MO_ALL = MO_SPEC | MO_PLAN_FILE | MO_PLAN_FORCE | MO_DUMP,
};

void model_opts_init(model_opts *o);
/* The option table of model_opts for a command (a static table: a tool parses once). */
const arg_opt *model_opts_table(model_opts *o, unsigned which);
extern const char *const g_plan_help; /* how the plan grammars read, for --help */
/* --list-devices: prints the devices and returns true (the command exits 0). */
bool tool_list_devices(const model_opts *o);
/* The device -ngl / -dev select for model m (NULL = the CPU); false with an
 * error printed when they ask for what cannot be done (partial offload). */
bool model_opts_device(const char *cmd, const model_opts *o, const rp_model *m,
                       const char **device);
/* The boot log's device lines (nothing on the CPU). */
void tool_print_device(FILE *fp, const rp_context *ctx);

/* The model of o->model with progress on a terminal; NULL after printing an
 * error. vocab_only loads the tokenizer alone. */
rp_model *tool_load_model(const char *cmd, const char *path, bool vocab_only);
/* serve and run set it: the model file is read into private memory at load
 * (rp_model_params.private_copy), so truncating or rewriting it under the
 * running process cannot kill it with SIGBUS. */
extern bool g_model_private_copy;
/* The context of o over model m, its plan resolved; NULL after printing an
 * error. */
rp_context *tool_context_new(const char *cmd, const model_opts *o, const rp_model *m,
                             uint32_t n_seq);
/* The context parameters of o (its plan not resolved yet). */
rp_context_params model_opts_context(const model_opts *o, uint32_t n_seq);
/* Loads the model and creates a context; prints the plan report. With
 * --dump-plan prints the plan and returns false with *exit_code 0. */
bool tool_load(const char *cmd, const model_opts *o, uint32_t n_seq, rp_model **model,
               rp_context **ctx, int *exit_code);
/* Sets ctx's trace hook to write every tensor it hands to dir (created if
 * missing): dir/index.tsv, one line per tensor (call, name, step, src, rows,
 * width, positions, file), and the file NNNNNN-NAME-STEP.f32 of its values
 * (float32, rows x width). false after printing an error. */
bool tool_trace_open(const char *cmd, rp_context *ctx, const char *dir);
/* The context's plan report (rp_context_plan_report) on fp. */
void tool_print_plan(FILE *fp, const rp_context *ctx);

/* ---- plan files (plan_resolve.c) --------------------------------------------- */

#define TOOL_HASH_SIZE 48 /* holds "xxh3-128:" + 32 hex digits */
/* The content hash of m's weights (from its metadata, the cache beside it, or
 * computed now with a message and progress). false after printing an error. */
bool tool_content_hash(const char *cmd, const rp_model *m, char hash[TOOL_HASH_SIZE]);
/* The plan of o for model m: --repeat-layers / --layer-map as given, or the
 * plan file of --plan read and checked against m (a refusal names the reason;
 * --plan-force accepts another content hash with a loud warning). *repeat and
 * *map may point into *pf: free it with rp_planfile_free once the context
 * exists. false after printing an error. */
bool tool_plan_resolve(const char *cmd, const model_opts *o, const rp_model *m, rp_planfile **pf,
                       const char **repeat, const char **map);
/* The warning of --plan-force: plan pf (read from file) was made for other
 * weights than path's (whose hash is hash); `doing` says what happens anyway
 * ("Applying it anyway", "Serving it anyway"). Printed even with -q. */
void tool_warn_forced(const rp_planfile *pf, const char *file, const char *path, const char *hash,
                      const char *doing);

/* ---- subcommands ---------------------------------------------------------- */

int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_gguf_copy(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_scan(int argc, char **argv);
int cmd_plan(int argc, char **argv);

#endif
