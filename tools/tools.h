/* Shared pieces of the command-line tools: option tables, logging to stderr,
 * progress on a terminal, and the model/context options every subcommand that
 * loads a model accepts. Only the tools talk to the user. */
#ifndef RP_TOOLS_H
#define RP_TOOLS_H

#include "reprise.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---- option tables ------------------------------------------------------- */

typedef enum arg_kind {
    ARG_END = 0,
    ARG_FLAG,   /* bool, no value */
    ARG_INT,    /* int */
    ARG_U32,    /* uint32_t */
    ARG_U64,    /* uint64_t */
    ARG_FLOAT,  /* float */
    ARG_STR,    /* const char * */
    ARG_STRS,   /* repeatable: str_list */
    ARG_KVTYPE, /* int rp_type, f32 | f16 */
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

/* Parses argv[1..] against one or more option tables (NULL-terminated list of
 * tables). Positional arguments are collected in pos (at most max_pos). On an
 * error prints "reprise CMD: ..." and returns false. --help / -h prints usage
 * and sets *help. */
typedef struct arg_spec {
    const char *cmd;
    const char *usage;       /* "reprise run -m MODEL [options]" */
    const char *description; /* paragraph printed under usage */
    const arg_opt *const *tables;
    const char **pos;
    int max_pos;
    int *n_pos;
} arg_spec;

bool args_parse(const arg_spec *spec, int argc, char **argv, bool *help);
void args_usage(const arg_spec *spec, FILE *fp);

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

/* ---- model + context options shared by run, bench, perplexity, serve ... -- */

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
    bool keep_hidden;      /* the context keeps final hidden states (speculative MTP drafting) */
    const char *plan_file; /* --plan FILE: a plan file (tools/plan.c) */
    bool plan_force;       /* --plan-force: accept weights whose content hash differs */
} model_opts;

void model_opts_init(model_opts *o);
/* The option table for model_opts (-m, -c, -b, -t, -ctk, -ctv, --repeat-layers,
 * --layer-map, --plan, --plan-force, --dump-plan). */
const arg_opt *model_opts_table(model_opts *o);
extern const char *const g_plan_help; /* how the plan grammars read, for --help */

/* Loads the model and creates a context; prints the plan report. With
 * --dump-plan prints the plan and returns false with *exit_code 0. */
bool tool_load(const char *cmd, const model_opts *o, uint32_t n_seq, rp_model **model,
               rp_context **ctx, int *exit_code);

/* ---- plan files (tools/plan.c) ---------------------------------------------- */

struct rp_planfile;
#define TOOL_HASH_SIZE 48 /* holds "xxh3-128:" + 32 hex digits */
/* The content hash of m's weights (from its metadata, the cache beside it, or
 * computed now with a message and progress). false after printing an error. */
bool tool_content_hash(const char *cmd, const rp_model *m, char hash[TOOL_HASH_SIZE]);
/* The plan of o for model m: --repeat-layers / --layer-map as given, or the
 * plan file of --plan read and checked against m (a refusal names the reason;
 * --plan-force accepts another content hash with a loud warning). *repeat and
 * *map may point into *pf: free it with tool_plan_free once the context
 * exists. false after printing an error. */
bool tool_plan_resolve(const char *cmd, const model_opts *o, const rp_model *m,
                       struct rp_planfile **pf, const char **repeat, const char **map);
void tool_plan_free(struct rp_planfile *pf);

/* The context's plan report (rp_context_plan_report) on fp. */
void tool_print_plan(FILE *fp, const rp_context *ctx);

/* Text helpers. */
char *tool_read_text(const char *cmd, const char *path, size_t *len); /* NULL on error */
bool parse_int_list(const char *s, int32_t **out, size_t *n);         /* "1,2,3" or "1 2 3" */

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
int cmd_serve(int argc, char **argv);
int cmd_scan(int argc, char **argv);
int cmd_plan(int argc, char **argv);

#endif
