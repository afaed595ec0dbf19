/* libFuzzer target: serve's request bodies (tools/serve_api.c) through the
 * real endpoint handlers, without a socket. The first input byte picks the
 * endpoint (/v1/completions, /v1/chat/completions, /completion, /tokenize,
 * /detokenize, /apply-template); the rest is the body, decoded by
 * api_body_json as serve does. The server here is a tiny synthesized model
 * (stories260K's SentencePiece vocabulary when REPRISE_SHARED has it, else
 * the built-in byte vocabulary), a Jinja chat template, two entries ("tiny"
 * and the plan "rep" = 0,0) and an engine already stopped: a request that
 * reads cleanly is answered 503 (shutting down) after its whole parse,
 * grammar and sampler checks. Every request must get exactly one reply
 * with a status of 200, 400, 404, 422 or 503 and a valid JSON body; a 500,
 * no reply or two replies is a finding.
 * fuzz-tools: serve_api serve_engine chat_tmpl common load plan_resolve trace */
#include "serve.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct srv_req {
    srv_server *srv;
    int n_replies;
    unsigned status;
};

static srv_server g_srv;
static bool g_verbose; /* FUZZ_VERBOSE=1: print each refusal (to check the seeds) */
static srv_entry g_entries[2];

srv_server *srv_req_server(srv_req *r) {
    return r->srv;
}

enum MHD_Result srv_reply_json(srv_req *r, unsigned status, json_t *body) {
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) {
        fprintf(stderr, "reply %u: no JSON body (json_pack of an invalid string?)\n", status);
        abort();
    }
    if (g_verbose && status == 200) fprintf(stderr, "200: %.300s\n", s);
    free(s);
    r->n_replies++;
    r->status = status;
    return MHD_YES;
}

enum MHD_Result srv_reply_error(srv_req *r, unsigned status, const char *type, const char *code,
                                const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!*msg || !type) abort(); /* every refusal says why */
    if (status == 500) {
        fprintf(stderr, "500: %s\n", msg);
        abort();
    }
    if (g_verbose) fprintf(stderr, "%u %s: %s\n", status, code ? code : "-", msg);
    tbuf clean = {0};
    utf8_append_valid(&clean, msg, strlen(msg)); /* as serve.c */
    json_t *err = json_pack("{s:s%,s:s,s:s?}", "message", clean.data ? clean.data : "", clean.len,
                            "type", type, "code", code);
    tbuf_free(&clean);
    return srv_reply_json(r, status, err ? json_pack("{s:o}", "error", err) : NULL);
}

enum MHD_Result srv_reply_text(srv_req *r, unsigned status, const char *type, const char *text,
                               size_t n) {
    (void)type;
    (void)text;
    (void)n;
    r->n_replies++;
    r->status = status;
    return MHD_YES;
}

enum MHD_Result srv_reply_task_error(srv_req *r, const srv_task *t) {
    return srv_reply_error(r, (unsigned)t->err_http, t->err_type ? t->err_type : "server_error",
                           t->err_code, "%s", t->err_msg);
}

/* The engine is stopped: no task is ever accepted, so nothing waits or streams. */
bool srv_await(srv_req *r, srv_task *t) {
    (void)r;
    (void)t;
    abort();
}

enum MHD_Result srv_reply_stream(srv_req *r, srv_task *t, srv_emit_fn emit, void *user,
                                 void (*free_user)(void *)) {
    (void)r;
    (void)t;
    (void)emit;
    (void)user;
    (void)free_user;
    abort();
}

int srv_plan_for_request(srv_server *srv, const char *spec, unsigned *status, char *err,
                         size_t err_size) {
    (void)srv;
    (void)spec;
    (void)status;
    (void)err;
    (void)err_size;
    abort(); /* --plan-requests is 0 here */
}

/* A Jinja template that reads roles, content, the generation prompt and a
 * chat_template_kwargs variable. */
static const char g_template[] =
    "{%- if greeting is defined %}{{ greeting }}\n{% endif -%}"
    "{%- for m in messages %}<|{{ m['role'] }}|>{{ m['content'] | trim }}\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif -%}";

static void die(const char *what) {
    fprintf(stderr, "fuzz_http_body: %s: %s\n", what, rp_last_error());
    exit(1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_verbosity = 0;
    g_verbose = getenv("FUZZ_VERBOSE") != NULL;
    char path[96], vocab[1024];
    snprintf(path, sizeof path, "/tmp/fuzz-http-body-%ld.gguf", (long)getpid());
    const char *shared = getenv("REPRISE_SHARED");
    snprintf(vocab, sizeof vocab, "%s/models/stories260K.gguf", shared ? shared : "../shared");
    rp_synth_params sp = rp_synth_default_params();
    sp.arch = "llama";
    sp.n_embd = 16;
    sp.n_layer = 1;
    sp.n_head = 2;
    sp.n_ff = 32;
    sp.n_vocab = 300;
    if (access(vocab, R_OK) == 0) sp.vocab_path = vocab;
    if (rp_synth_write(&sp, path, NULL, NULL)) die("synth");
    if (rp_model_load(path, NULL, &g_srv.model)) die("load");
    unlink(path);
    tmpl_opts to = {.name = g_template};
    char err[256];
    g_srv.chat_ok = chat_tmpl_open("fuzz", &to, g_srv.model, &g_srv.tmpl, err, sizeof err);
    if (!g_srv.chat_ok) {
        fprintf(stderr, "fuzz_http_body: template: %s\n", err);
        exit(1);
    }
    if (rp_grammar_vocab_new(rp_model_vocab(g_srv.model), &g_srv.gv)) die("grammar vocab");
    g_entries[0] = (srv_entry){
        .name = "tiny", .n_slot = 1, .n_ctx = 64, .plan_kind = "identity", .plan_spec = ""};
    g_entries[1] = (srv_entry){
        .name = "rep", .n_slot = 1, .n_ctx = 64, .plan_kind = "repeat-layers", .plan_spec = "0,0"};
    g_srv.entries = g_entries;
    atomic_store(&g_srv.n_entries, 2);
    g_srv.entries_cap = 2;
    g_srv.max_body = 1 << 20;
    g_srv.n_batch = 64;
    g_srv.engine = srv_engine_start(g_entries, 2, 64, err, sizeof err);
    if (!g_srv.engine) {
        fprintf(stderr, "fuzz_http_body: engine: %s\n", err);
        exit(1);
    }
    srv_engine_stop(g_srv.engine, 0); /* every submit is refused: 503 */
    return 0;
}

typedef enum MHD_Result (*handler)(srv_req *r, json_t *body);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const handler handlers[] = {api_completions, api_chat,       api_native_completion,
                                       api_tokenize,    api_detokenize, api_apply_template};
    if (size < 1 || size > 200000) return 0;
    const handler fn = handlers[data[0] % (sizeof handlers / sizeof handlers[0])];
    char why[256];
    json_t *body = api_body_json((const char *)data + 1, size - 1, why, sizeof why);
    if (!body) {
        if (!*why) abort();
        return 0;
    }
    srv_req r = {.srv = &g_srv};
    fn(&r, body);
    json_decref(body);
    if (r.n_replies != 1) {
        fprintf(stderr, "%d replies\n", r.n_replies);
        abort();
    }
    switch (r.status) {
    case 200:
    case 400:
    case 404:
    case 422:
    case 503:
        break;
    default:
        fprintf(stderr, "status %u\n", r.status);
        abort();
    }
    return 0;
}
