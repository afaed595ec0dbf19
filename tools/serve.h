/* reprise serve: the HTTP front (serve.c: the command line, the socket,
 * routing, replies and streams; serve_api.c: the endpoints) over the engine
 * (serve_engine.h). */
#ifndef RP_SERVE_H
#define RP_SERVE_H

#include "chat_tmpl.h"
#include "serve_engine.h"
#include "tools.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- the HTTP side (serve.c) ------------------------------------------------ */

/* What every handler sees of the server. */
typedef struct srv_server {
    rp_model *model;
    const char *model_path;
    srv_entry *entries;   /* entries[0] answers requests that name no model */
    atomic_int n_entries; /* grows when a request's plan is built (serve_plans.c) */
    int entries_cap;      /* room in entries */
    /* --plan-requests N: plans requests may have built (0: none); the base
     * context parameters they are built with; the lock that serialises it */
    int plan_requests, n_request_plans;
    rp_context_params plan_cp;
    pthread_mutex_t plan_mu;
    char *request_names[SRV_MAX_PLANS];
    srv_engine *engine;
    const char *api_key;       /* NULL: no authentication */
    const char *chat_template; /* --chat-template, or NULL: the model's own */
    chat_tmpl tmpl;            /* the template requests are rendered with */
    rp_grammar_vocab *gv;      /* the model's token texts, for request grammars */
    const char *cors;          /* --cors ORIGIN, or NULL: no CORS headers */
    bool chat_ok;              /* the chat template rendered at startup */
    char chat_err[256];        /* why not */
    double timeout;            /* seconds per request, 0 = none */
    size_t max_body;
    int n_batch;
    double t_start;
    atomic_bool stopping;
    atomic_uint_fast64_t counter; /* request ids and default seeds */
} srv_server;

typedef struct srv_req srv_req; /* one HTTP request (serve.c) */

srv_server *srv_req_server(srv_req *r);
/* Replies with JSON (takes ownership of body; NULL = out of memory). */
enum MHD_Result srv_reply_json(srv_req *r, unsigned status, json_t *body);
/* Replies {"error":{"message","type","code"}}. */
enum MHD_Result srv_reply_error(srv_req *r, unsigned status, const char *type, const char *code,
                                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The reply of a finished task that failed (t->done, SRV_FIN_ERROR). */
enum MHD_Result srv_reply_task_error(srv_req *r, const srv_task *t);
/* Blocks until t is done; false if the client went away first (t is then
 * cancelled and the caller returns MHD_NO to drop the connection). */
bool srv_await(srv_req *r, srv_task *t);

/* A streamed reply (server-sent events). `emit` is called with each piece of
 * new text (valid UTF-8) and appends the bytes to send to out; at the end it
 * is called once more with done = the finished task (readable without the
 * lock), and what it appends then closes the stream. `user` is freed with
 * free_user when the response goes away. The stream owns the handler's
 * reference to t from here on. */
typedef bool (*srv_emit_fn)(void *user, tbuf *out, const char *text, size_t n,
                            const srv_task *done);
enum MHD_Result srv_reply_stream(srv_req *r, srv_task *t, srv_emit_fn emit, void *user,
                                 void (*free_user)(void *));

/* ---- plans built for requests (serve_plans.c) ----------------------------------- */

/* The entry of the plan spec (--repeat-layers grammar, or "map:" and a
 * --layer-map), built now over the served weights when --plan-requests
 * allows another; -1 with the HTTP status and reason in *status / err. */
int srv_plan_for_request(srv_server *srv, const char *spec, unsigned *status, char *err,
                         size_t err_size);
void srv_plans_free(srv_server *srv);

/* ---- the endpoints (serve_api.c) -------------------------------------------- */

enum MHD_Result api_health(srv_req *r, json_t *body);
enum MHD_Result api_models(srv_req *r, json_t *body);
enum MHD_Result api_props(srv_req *r, json_t *body);
enum MHD_Result api_completions(srv_req *r, json_t *body);
enum MHD_Result api_chat(srv_req *r, json_t *body);
enum MHD_Result api_native_completion(srv_req *r, json_t *body);
enum MHD_Result api_tokenize(srv_req *r, json_t *body);
enum MHD_Result api_detokenize(srv_req *r, json_t *body);
enum MHD_Result api_apply_template(srv_req *r, json_t *body);
enum MHD_Result api_metrics(srv_req *r, json_t *body);
enum MHD_Result api_slots(srv_req *r, json_t *body);
/* A request body as the JSON object the endpoints take (duplicate keys
 * refused), or NULL with the reason in why (malformed at line/column, not an
 * object). Pure: tests/fuzz/fuzz_http_body.c calls it without a socket. */
json_t *api_body_json(const char *data, size_t len, char *why, size_t why_size);
/* The table of request fields and how each is handled (serve_api.c). */
json_t *api_fields_json(void);

/* A reply with a body of the given type (text is copied). */
enum MHD_Result srv_reply_text(srv_req *r, unsigned status, const char *type, const char *text,
                               size_t n);
/* The chat page (serve_page.c, generated from tools/web/chat.html). */
enum MHD_Result api_page(srv_req *r, json_t *body);

#endif
