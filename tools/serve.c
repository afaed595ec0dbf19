/* reprise serve: an OpenAI-compatible HTTP server over one model, its layer
 * plan and N slots decoded together (continuous batching).
 *
 * HTTP is libmicrohttpd in thread-per-connection mode: a handler may block
 * while its request waits for the engine, and it watches its socket so that a
 * client that goes away cancels its generation. This file holds the command
 * line, the listening socket, routing, authentication, the body limit, the
 * reply helpers (JSON, errors, server-sent events) and the shutdown on
 * SIGTERM; serve_api.c the endpoints; serve_engine.c the inference thread. */
#include "serve.h"
#include "serve_conn.h"
#include "spec_opts.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SRV_CONN_LIMIT 512 /* default --conn-limit */
#define SRV_WAIT_SLICE 0.1 /* seconds between checks of the client's socket */

struct srv_req {
    srv_server *srv;
    struct MHD_Connection *conn;
    const char *method, *url;
    tbuf body;
    bool too_big;     /* the body passed --max-body: answered 413 */
    size_t discarded; /* bytes of an oversized body read and dropped */
    bool replied;
    unsigned status;
    double t0;
};

srv_server *srv_req_server(srv_req *r) {
    return r->srv;
}

/* ---- replies ---------------------------------------------------------------- */

/* --cors: the headers a browser on another origin needs. */
static void add_cors(const srv_server *srv, struct MHD_Response *resp) {
    if (!srv->cors) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", srv->cors);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    if (strcmp(srv->cors, "*")) MHD_add_response_header(resp, "Vary", "Origin");
}

static enum MHD_Result queue(srv_req *r, unsigned status, struct MHD_Response *resp) {
    if (!resp) return MHD_NO;
    add_cors(r->srv, resp);
    if (atomic_load(&r->srv->stopping))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->replied = true;
    r->status = status;
    return ret;
}

enum MHD_Result srv_reply_json(srv_req *r, unsigned status, json_t *body) {
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) {
        static const char oom[] =
            "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":null}}";
        status = 500;
        s = strdup(oom);
        if (!s) return MHD_NO;
    }
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    return queue(r, status, resp);
}

enum MHD_Result srv_reply_text(srv_req *r, unsigned status, const char *type, const char *text,
                               size_t n) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(n, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    return queue(r, status, resp);
}

enum MHD_Result srv_reply_error(srv_req *r, unsigned status, const char *type, const char *code,
                                const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tbuf clean = {0};
    utf8_append_valid(&clean, msg, strlen(msg)); /* messages may quote client text */
    json_t *err = json_pack("{s:s%,s:s,s:s?}", "message", clean.data ? clean.data : "", clean.len,
                            "type", type, "code", code);
    tbuf_free(&clean);
    return srv_reply_json(r, status, err ? json_pack("{s:o}", "error", err) : NULL);
}

enum MHD_Result srv_reply_task_error(srv_req *r, const srv_task *t) {
    return srv_reply_error(r, (unsigned)t->err_http, t->err_type ? t->err_type : "server_error",
                           t->err_code, "%s", t->err_msg);
}

/* The client closed its end (or the socket failed). Pipelined bytes waiting
 * to be read do not count as gone. */
static bool fd_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        char c;
        ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

bool srv_await(srv_req *r, srv_task *t) {
    srv_engine *e = r->srv->engine;
    int fd = conn_fd(r->conn);
    for (;;) {
        srv_lock(e);
        srv_wait_locked(e, t, SIZE_MAX, now_s() + SRV_WAIT_SLICE);
        bool done = t->done;
        srv_unlock(e);
        if (done) return true;
        if (fd_gone(fd)) {
            srv_lock(e);
            srv_cancel_locked(e, t);
            srv_unlock(e);
            return false;
        }
    }
}

/* ---- server-sent events ----------------------------------------------------- */

typedef struct srv_stream {
    srv_engine *engine;
    srv_task *task;
    int fd;
    srv_emit_fn emit;
    void *user;
    void (*free_user)(void *);
    tbuf pend;     /* bytes produced, not yet handed to MHD */
    size_t off;    /* of pend already handed */
    size_t seen;   /* bytes of task->out already emitted */
    size_t n_mark; /* chunk marks of the task already emitted */
    tbuf cuts;     /* scratch: chunk ends (relative to the delta) copied out under the lock */
    tbuf delta;    /* scratch: new text copied out under the lock */
    bool finished; /* the last event is in pend */
} srv_stream;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_stream *st = cls;
    for (;;) {
        if (st->off < st->pend.len) {
            size_t n = SRV_MIN(max, st->pend.len - st->off);
            memcpy(buf, st->pend.data + st->off, n);
            st->off += n;
            return (ssize_t)n;
        }
        st->pend.len = st->off = 0;
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        srv_task *t = st->task;
        srv_lock(st->engine);
        srv_wait_locked(st->engine, t, st->seen, now_s() + SRV_WAIT_SLICE);
        bool done = t->done;
        st->delta.len = st->cuts.len = 0;
        bool ok = true;
        if (t->out.len > st->seen) {
            /* one event per engine publish (a token's text), as it was produced */
            const size_t *mark = (const size_t *)t->marks.data;
            size_t n_mark = t->marks.len / sizeof *mark;
            for (size_t i = st->n_mark; ok && i < n_mark; i++) {
                size_t cut = mark[i] - st->seen;
                ok = tbuf_add(&st->cuts, &cut, sizeof cut);
            }
            st->n_mark = n_mark;
            ok = ok && tbuf_add(&st->delta, t->out.data + st->seen, t->out.len - st->seen);
            st->seen = t->out.len;
        }
        srv_unlock(st->engine);
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
        const size_t *cut = (const size_t *)st->cuts.data;
        for (size_t i = 0, from = 0; i < st->cuts.len / sizeof *cut; from = cut[i++])
            if (!st->emit(st->user, &st->pend, st->delta.data + from, cut[i] - from, NULL))
                return MHD_CONTENT_READER_END_WITH_ERROR;
        if (done) {
            if (!st->emit(st->user, &st->pend, NULL, 0, t))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            st->finished = true;
            continue;
        }
        if (!st->delta.len && fd_gone(st->fd)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls) {
    srv_stream *st = cls;
    srv_release(st->engine, st->task); /* cancels the generation if it is still running */
    if (st->free_user) st->free_user(st->user);
    tbuf_free(&st->pend);
    tbuf_free(&st->delta);
    tbuf_free(&st->cuts);
    free(st);
}

enum MHD_Result srv_reply_stream(srv_req *r, srv_task *t, srv_emit_fn emit, void *user,
                                 void (*free_user)(void *)) {
    srv_stream *st = calloc(1, sizeof *st);
    struct MHD_Response *resp = NULL;
    if (st) {
        st->engine = r->srv->engine;
        st->task = t;
        st->fd = conn_fd(r->conn);
        st->emit = emit;
        st->user = user;
        st->free_user = free_user;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st,
                                                 stream_free);
    }
    if (!resp) {
        if (st) free(st);
        srv_release(r->srv->engine, t);
        if (free_user) free_user(user);
        return srv_reply_error(r, 500, "server_error", NULL, "out of memory");
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return queue(r, 200, resp);
}

/* ---- routing ---------------------------------------------------------------- */

typedef struct route {
    const char *method, *path;
    enum MHD_Result (*fn)(srv_req *r, json_t *body);
    bool auth;      /* needs the API key when one is set */
    bool json_body; /* the body is a JSON object */
} route;

static const route g_routes[] = {
    {"GET", "/", api_page, false, false},
    {"GET", "/index.html", api_page, false, false},
    {"GET", "/health", api_health, false, false},
    {"GET", "/metrics", api_metrics, true, false},
    {"GET", "/slots", api_slots, true, false},
    {"POST", "/apply-template", api_apply_template, true, true},
    {"GET", "/models", api_models, true, false},
    {"GET", "/v1/models", api_models, true, false},
    {"GET", "/props", api_props, true, false},
    {"POST", "/v1/completions", api_completions, true, true},
    {"POST", "/v1/chat/completions", api_chat, true, true},
    {"POST", "/completion", api_native_completion, true, true},
    {"POST", "/tokenize", api_tokenize, true, true},
    {"POST", "/detokenize", api_detokenize, true, true},
};

/* Constant-time comparison of the bearer token with the key. */
static bool auth_ok(srv_req *r) {
    const char *key = r->srv->api_key;
    const char *h =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    size_t n = strlen(h), k = strlen(key);
    unsigned char diff = (unsigned char)(n != k);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(h[i] ^ key[i % (k ? k : 1)]);
    return diff == 0;
}

static enum MHD_Result dispatch(srv_req *r) {
    srv_server *srv = r->srv;
    const route *rt = NULL;
    bool path_known = false;
    for (size_t i = 0; i < sizeof g_routes / sizeof g_routes[0]; i++)
        if (!strcmp(g_routes[i].path, r->url)) {
            path_known = true;
            if (!strcmp(g_routes[i].method, r->method)) rt = &g_routes[i];
        }
    if (!rt && path_known && !strcmp(r->method, "OPTIONS")) { /* a CORS preflight */
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (resp) MHD_add_response_header(resp, "Allow", "GET, POST, OPTIONS");
        return queue(r, 204, resp);
    }
    if (!rt && path_known)
        return srv_reply_error(r, 405, "invalid_request_error", "method_not_allowed",
                               "%s is not allowed on %s", r->method, r->url);
    if (!rt)
        return srv_reply_error(r, 404, "not_found_error", "not_found", "no endpoint %s %s",
                               r->method, r->url);
    if (rt->auth && srv->api_key && !auth_ok(r))
        return srv_reply_error(r, 401, "authentication_error", "invalid_api_key",
                               "missing or wrong API key (send 'Authorization: Bearer KEY')");
    if (r->too_big)
        return srv_reply_error(r, 413, "invalid_request_error", "request_too_large",
                               "the request body is larger than the server's limit of %zu bytes",
                               srv->max_body);
    if (atomic_load(&srv->stopping))
        return srv_reply_error(r, 503, "unavailable_error", "shutting_down",
                               "the server is shutting down");
    json_t *body = NULL;
    if (rt->json_body) {
        if (!r->body.len)
            return srv_reply_error(r, 400, "invalid_request_error", "invalid_json",
                                   "the request body is empty");
        char why[256];
        if (!(body = api_body_json(r->body.data, r->body.len, why, sizeof why)))
            return srv_reply_error(r, 400, "invalid_request_error", "invalid_json", "%s", why);
    }
    enum MHD_Result ret = rt->fn(r, body);
    json_decref(body);
    return ret;
}

static atomic_int g_in_flight; /* requests between their first byte and their completion */
static bool g_log_requests;
static srv_conn *g_conn; /* the connection layer (serve_conn.c) */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls) {
    (void)version;
    srv_server *srv = cls;
    srv_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->srv = srv;
        r->conn = c;
        r->url = url;
        r->method = method;
        r->t0 = now_s();
        *con_cls = r;
        atomic_fetch_add(&g_in_flight, 1);
        srv_conn_headers_done(g_conn, c);
        const char *framing = srv_conn_check_framing(c);
        if (framing) { /* ambiguous framing: answered, and the connection closes */
            r->too_big = true;
            return srv_reply_error(r, 400, "invalid_request_error", "bad_request",
                                   "the request has %s", framing);
        }
        /* a declared length over the limit is refused before the body is read */
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno || end == cl || n > srv->max_body) {
                r->too_big = true;
                return srv_reply_error(
                    r, 413, "invalid_request_error", "request_too_large",
                    "the request body (%s bytes) is larger than the server's limit of %zu bytes",
                    cl, srv->max_body);
            }
        }
        return MHD_YES;
    }
    if (*data_size) {
        if (!r->too_big && r->body.len + *data_size <= srv->max_body) {
            if (!tbuf_add(&r->body, data, *data_size)) return MHD_NO;
        } else {
            r->too_big = true;
            r->discarded += *data_size;
            if (r->discarded > 16 * srv->max_body) return MHD_NO; /* stop reading an endless body */
        }
        *data_size = 0;
        return MHD_YES;
    }
    if (r->replied) return MHD_YES;
    return dispatch(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
    (void)cls;
    (void)c;
    srv_req *r = *con_cls;
    if (!r) return;
    if (g_log_requests)
        fprintf(stderr, "serve: %s %s %u %.1f ms%s\n", r->method, r->url, r->status,
                (now_s() - r->t0) * 1e3,
                code == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)");
    srv_conn_request_done(g_conn, c);
    tbuf_free(&r->body);
    free(r);
    *con_cls = NULL;
    atomic_fetch_sub(&g_in_flight, 1);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    if (g_verbosity < 2) return;
    fprintf(stderr, "serve: http: ");
    vfprintf(stderr, fmt, ap);
}

/* ---- listening socket ------------------------------------------------------- */

static int listen_on(const char *host, int port, int *bound, bool *loopback) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc) {
        tool_error("serve", "cannot resolve --host '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 256)) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        tool_error("serve", "cannot listen on %s:%d: %s", host, port, strerror(err));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    *bound = port;
    *loopback = false;
    if (!getsockname(fd, (struct sockaddr *)&ss, &len)) {
        if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
            *bound = ntohs(a->sin6_port);
            *loopback = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
        } else {
            const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
            *bound = ntohs(a->sin_port);
            *loopback = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
        }
    }
    return fd;
}

/* ---- the command ------------------------------------------------------------ */

static const char *plan_kind(const char *repeat, const char *map) {
    if (repeat && *repeat) return "repeat-layers";
    if (map && *map) return "layer-map";
    return "identity";
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Only what a --repeat-layers spec is made of: anything else names a file. */
static bool looks_like_spec(const char *s) {
    return *s && strspn(s, "0123456789,;- \t") == strlen(s);
}

/* What the entries own beyond their contexts. */
typedef struct entry_store {
    rp_planfile *pf[SRV_MAX_PLANS];
    char *names[SRV_MAX_PLANS];
    int n_pf, n_names;
    char hash[TOOL_HASH_SIZE]; /* the base weights' content hash, once needed */
    bool have_hash;
} entry_store;

/* The name before '=' of a --plan value (into name; "" when there is none). */
static bool plan_arg_name(const char *cmd, const char *arg, char name[RP_PLAN_NAME_MAX + 1],
                          const char **val) {
    const char *eq = strchr(arg, '=');
    *val = arg;
    name[0] = 0;
    if (!eq || is_file(arg)) return true;
    if ((size_t)(eq - arg) > RP_PLAN_NAME_MAX) {
        tool_error(cmd, "--plan %s: the name before '=' is longer than %d characters", arg,
                   RP_PLAN_NAME_MAX);
        return false;
    }
    snprintf(name, RP_PLAN_NAME_MAX + 1, "%.*s", (int)(eq - arg), arg);
    *val = eq + 1;
    if (!rp_planfile_name_valid(name)) {
        tool_error(cmd,
                   "--plan %s: name '%s' is not usable: 1..%d characters of A-Z a-z 0-9 and . "
                   "_ : + / -",
                   arg, name, RP_PLAN_NAME_MAX);
        return false;
    }
    if (!**val) {
        tool_error(cmd, "--plan %s: nothing after '=' (a spec, map:MAP or a plan file)", arg);
        return false;
    }
    return true;
}

/* A --plan value that names a plan file: read, checked against the weights. */
static bool plan_arg_file(const char *cmd, const char *arg, const char *file, const model_opts *mo,
                          const rp_model *m, entry_store *st, srv_entry *en, const char **repeat,
                          const char **map) {
    rp_planfile *pf;
    rp_status s = rp_planfile_read(file, &pf);
    if (s) return tool_error(cmd, "--plan %s: %s", arg, rp_last_error()), false;
    st->pf[st->n_pf++] = pf;
    if (!st->have_hash && !tool_content_hash(cmd, m, st->hash)) return false;
    st->have_hash = true;
    bool forced = false;
    if ((s = rp_planfile_check(pf, m, st->hash, mo->plan_force, &forced)))
        return tool_error(cmd, "--plan %s: %s", arg, rp_last_error()), false;
    if (forced) tool_warn_forced(pf, file, mo->model, st->hash, "Serving it anyway");
    en->plan_kind = pf->kind == RP_PLAN_REPEAT ? "repeat-layers" : "layer-map";
    en->plan_spec = pf->spec;
    en->plan_file = file;
    en->plan_name = pf->name;
    en->description = pf->description;
    en->plan_forced = forced;
    *(pf->kind == RP_PLAN_REPEAT ? repeat : map) = pf->spec;
    return true;
}

/* Reads one --plan value into entry en (its context not created yet):
 * NAME=SPEC (RYS blocks), NAME=map:MAP, NAME=FILE or FILE. */
static bool parse_plan_arg(const char *cmd, const char *arg, const model_opts *mo,
                           const rp_model *m, entry_store *st, srv_entry *en, const char **repeat,
                           const char **map) {
    char name[RP_PLAN_NAME_MAX + 1];
    const char *val;
    *repeat = *map = NULL;
    if (!plan_arg_name(cmd, arg, name, &val)) return false;
    if (name[0] && !strncmp(val, "map:", 4))
        *map = val + 4;
    else if (name[0] && looks_like_spec(val) && !is_file(val))
        *repeat = val;
    else if (!plan_arg_file(cmd, arg, val, mo, m, st, en, repeat, map))
        return false;
    if (!en->plan_file) {
        if (!**(*repeat ? repeat : map)) {
            tool_error(cmd, "--plan %s: empty spec", arg);
            return false;
        }
        en->plan_kind = *repeat ? "repeat-layers" : "layer-map";
        en->plan_spec = *repeat ? *repeat : *map;
        en->description = "";
    }
    char *nm = strdup(name[0] ? name : en->plan_name);
    if (!nm) {
        tool_error(cmd, "out of memory");
        return false;
    }
    st->names[st->n_names++] = nm;
    en->name = nm;
    return true;
}

typedef struct serve_opts {
    model_opts mo;
    spec_opts so;
    const char *host, *api_key, *alias, *cors;
    tmpl_opts to;
    int port, n_parallel, plan_requests;
    int conn_limit, conn_limit_ip;
    float timeout, grace, header_timeout;
    uint64_t max_body;
    bool verbose;
    str_list plans;
} serve_opts;

static int serve_parse(const char *cmd, serve_opts *o, int argc, char **argv) {
    const arg_opt opts[] = {
        {"--host", ARG_STR, &o->host, "ADDR",
         "address to listen on (default 127.0.0.1: loopback only)"},
        {"--port", ARG_INT, &o->port, "N",
         "TCP port (default 8080; 0 = any free port, logged at startup)"},
        {"-np|--parallel", ARG_INT, &o->n_parallel, "N",
         "slots decoded together, each its own KV sequence (default 1)"},
        {"--api-key", ARG_STR, &o->api_key, "KEY",
         "require 'Authorization: Bearer KEY' (all but /health)"},
        {"--timeout", ARG_FLOAT, &o->timeout, "S",
         "seconds a request may take, queue included (default 600, 0 = none)"},
        {"--max-body", ARG_U64, &o->max_body, "BYTES",
         "largest request body accepted (default 4194304)"},
        {"-a|--alias", ARG_STR, &o->alias, "NAME",
         "model id in /v1/models and the 'model' field (default: file name)"},
        {"--cors", ARG_STR, &o->cors, "ORIGIN",
         "allow browsers on ORIGIN ('*': any) to call the API (CORS headers, OPTIONS)"},
        {"--grace", ARG_FLOAT, &o->grace, "S",
         "on SIGTERM, seconds running requests get to finish (default 10)"},
        {"--conn-limit", ARG_INT, &o->conn_limit, "N",
         "open connections at most (default 512; when full, the oldest one still sending its "
         "headers is dropped, else 503)"},
        {"--conn-limit-per-ip", ARG_INT, &o->conn_limit_ip, "N",
         "open connections from one client address at most (default 128, 0 = no cap; over: "
         "503)"},
        {"--header-timeout", ARG_FLOAT, &o->header_timeout, "S",
         "seconds a client has to send a request's headers (default 10; over: 408)"},
        {"-v|--verbose", ARG_FLAG, &o->verbose, NULL, "log every request"},
        {"--plan-requests", ARG_INT, &o->plan_requests, "N",
         "build up to N more plans that requests name by spec (\"plan\": \"26,34\"; default 0)"},
        {"--plan", ARG_STRS, &o->plans, "NAME=SPEC",
         "also serve a plan: NAME=SPEC, NAME=map:MAP, NAME=FILE or FILE (repeatable; above)"},
        {0},
    };
    /* the model options but --plan, which reads differently here */
    const arg_opt *tables[] = {
        opts, tmpl_opts_table(&o->to),
        model_opts_table(&o->mo, MO_SPEC | MO_PLAN_FORCE | MO_DUMP | MO_DEVICE),
        spec_opts_table(&o->so), NULL};
    char templates[512];
    snprintf(templates, sizeof templates, "chat templates (built-in families): %s",
             rp_chat_names());
    const char *const epilog[] = {templates, g_plan_help, g_spec_help, NULL};
    const arg_spec spec = {
        .cmd = cmd,
        .usage = "reprise serve -m MODEL [--repeat-layers SPEC] [--plan NAME=SPEC ...] [--parallel "
                 "N] [--port N] [options]",
        .description =
            "An OpenAI-compatible HTTP server: a chat page at /; GET /health, /v1/models, /props, "
            "/metrics,\n/slots; POST /v1/completions, /v1/chat/completions (stream: true for "
            "server-sent events),\nllama.cpp's /completion, /tokenize, /detokenize and "
            "/apply-template. Every slot runs the plan\nover the one copy of the weights. "
            "SIGTERM stops accepting, lets running requests finish\n(--grace) and exits 0. With "
            "one model, any \"model\" name is served; with several, the name picks\none.\n\n"
            "Several plans, one copy of the weights: the model (with --repeat-layers/--layer-map "
            "if\ngiven) is served under its file name (or -a NAME), and each --plan as another "
            "model:\n"
            "  --plan rys-s=33,34       RYS blocks (--repeat-layers grammar) served as 'rys-s'\n"
            "  --plan deep=map:0..9,4..31   a --layer-map served as 'deep'\n"
            "  --plan rys-xl=rys.json   a plan file (reprise plan save), checked against the "
            "weights\n"
            "  --plan rys.json          the same, served under the name in the file\n"
            "A request's \"model\" picks one (none: the first). Each has its own --parallel slots "
            "and\nKV cache sized for its plan; --plan-force accepts plan files made for other "
            "weights.\nWith --spec, --draft-plan or --spec-mtp every slot of every model decodes "
            "speculatively\n(each model's own draft beside it; the drafted rows of all slots "
            "verified in one batch).",
        .tables = tables,
        .epilog = epilog};
    return args_parse_cmd(&spec, argc, argv);
}

static bool serve_check(const char *cmd, const serve_opts *o) {
    if (o->n_parallel < 1 || o->n_parallel > 256)
        tool_error(cmd, "--parallel must be in 1..256, got %d", o->n_parallel);
    else if (o->port < 0 || o->port > 65535)
        tool_error(cmd, "--port must be in 0..65535, got %d", o->port);
    else if (o->timeout < 0 || o->grace < 0)
        tool_error(cmd, "--timeout and --grace must not be negative");
    else if (o->max_body < 1024 || o->max_body > (1ull << 30))
        tool_error(cmd, "--max-body must be in 1024..1073741824 bytes");
    else if (o->plan_requests < 0 || o->plan_requests > SRV_MAX_PLANS)
        tool_error(cmd, "--plan-requests must be in 0..%d, got %d", SRV_MAX_PLANS,
                   o->plan_requests);
    else if (o->api_key && !*o->api_key)
        tool_error(cmd, "--api-key is empty");
    else if (o->alias && !*o->alias)
        tool_error(cmd, "--alias is empty (a model needs a name; leave -a out for the file name)");
    else if (o->conn_limit < 1 || o->conn_limit > 4096 || o->conn_limit_ip < 0)
        tool_error(cmd, "--conn-limit must be in 1..4096 and --conn-limit-per-ip at least 0");
    else if (!(o->header_timeout > 0) || o->header_timeout > 3600)
        tool_error(cmd, "--header-timeout must be in (0, 3600] seconds");
    else
        return true;
    return false;
}

/* One more entry: a --plan over the model, parsed and checked, its context
 * plan-only (nothing allocated) until plans_realize; *cp what it is built with. */
static bool add_plan_entry(const char *cmd, const serve_opts *o, const rp_model *model,
                           srv_entry *entries, int n_entries, entry_store *store, const char *arg,
                           rp_context_params *cp) {
    srv_entry *en = &entries[n_entries];
    const char *rep, *map;
    if (!parse_plan_arg(cmd, arg, &o->mo, model, store, en, &rep, &map)) return false;
    for (int j = 0; j < n_entries; j++)
        if (!strcmp(entries[j].name, en->name)) {
            tool_error(cmd, "--plan %s: the name '%s' is already served%s", arg, en->name,
                       j == 0 ? " (the model itself: -a NAME renames it)" : "");
            return false;
        }
    *cp = model_opts_context(&o->mo, (uint32_t)o->n_parallel);
    if (!model_opts_device(cmd, &o->mo, model, &cp->device)) return false;
    cp->repeat_layers = rep;
    cp->layer_map = map;
    rp_context_params po = *cp;
    po.plan_only = true;
    rp_status s = rp_context_new(model, &po, &en->ctx);
    if (s) return tool_error(cmd, "--plan %s: %s", arg, rp_last_error()), false;
    return true;
}

/* The memory of every context serve creates (the model's and each --plan's,
 * --parallel slots each) added up against the bound before any plan's state
 * is allocated: each may fit alone and all together not. */
static bool plans_fit(const char *cmd, const serve_opts *o, const srv_entry *entries,
                      int n_entries) {
    uint64_t total = 0, limit = 0, biggest = 0;
    bool over = false;
    for (int i = 0; i < n_entries; i++) {
        uint64_t st, sc, lim;
        rp_context_mem_need(entries[i].ctx, &st, &sc, &lim);
        if (i == 0) limit = lim;
        const uint64_t one = st > UINT64_MAX - sc ? UINT64_MAX : st + sc;
        over |= st == UINT64_MAX || one == UINT64_MAX || total > UINT64_MAX - one;
        if (!over) total += one;
        if (one > biggest) biggest = one;
    }
    if (!limit || (!over && total <= limit)) return true;
    const double mib = 1048576.0;
    tool_error(cmd,
               "the model and its %d --plan context%s (%d slot%s each) need %.1f MiB of state and "
               "scratch in all (the largest alone %.1f MiB), over the %s of %.1f MiB; serve "
               "fewer plans, fewer slots (--parallel) or a smaller context (-c)",
               n_entries - 1, n_entries == 2 ? "" : "s", o->n_parallel,
               o->n_parallel == 1 ? "" : "s", over ? 1.8e13 : (double)total / mib,
               (double)biggest / mib, o->mo.mem_limit ? "memory limit" : "memory available",
               (double)limit / mib);
    return false;
}

/* Entry i's plan-only context replaced by the real one, on entry 0's threads. */
static bool plan_realize(const char *cmd, const serve_opts *o, const rp_model *model,
                         srv_entry *entries, int i, const rp_context_params *cp) {
    srv_entry *en = &entries[i];
    rp_context_free(en->ctx);
    en->ctx = NULL;
    rp_status s = rp_context_new(model, cp, &en->ctx);
    if (!s) /* one decodes at a time: one set of threads */
        s = rp_context_share_pool(en->ctx, entries[0].ctx);
    if (s) return tool_error(cmd, "--plan %s: %s", o->plans.v[i - 1], rp_last_error()), false;
    en->n_slot = o->n_parallel;
    en->n_ctx = rp_context_n_ctx(en->ctx);
    if (g_verbosity > 0) {
        int nb = rp_context_boundary_repeats(en->ctx, NULL);
        fprintf(stderr,
                "serve: model '%s': %s %s%s%s: %d -> %d layers, state %.2f MiB (%d slots x %u "
                "positions)%s\n",
                en->name, en->plan_kind, en->plan_spec, en->plan_file ? " from " : "",
                en->plan_file ? en->plan_file : "", rp_model_n_layer(model),
                rp_context_n_eff(en->ctx), (double)rp_context_state_bytes(en->ctx) / 1048576.0,
                o->n_parallel, en->n_ctx, nb ? "; warning: repeats boundary layers" : "");
    }
    return true;
}

/* A template that cannot render now will not render later: say so once
 * (an explicit --chat-template that does not render is an error: false). */
static bool check_chat_template(const char *cmd, const serve_opts *o, srv_server *srv) {
    if (tmpl_opts_given(&o->to)) { /* an explicit template that does not render is an error */
        if (!tool_check_template(cmd, &o->mo, &o->to, &srv->tmpl)) return false;
        srv->chat_ok = true;
        return true;
    }
    /* the model's own: without one, chat is unavailable and the rest still served */
    srv->chat_ok = tool_check_template_err(cmd, &o->mo, &o->to, &srv->tmpl, srv->chat_err,
                                           sizeof srv->chat_err);
    if (!srv->chat_ok) {
        if (g_verbosity > 0)
            fprintf(stderr, "serve: /v1/chat/completions is unavailable: %s\n", srv->chat_err);
    } else if (g_verbosity > 0) {
        fprintf(stderr, "serve: chat template: %s\n", srv->tmpl.what);
    }
    return true;
}

/* Listens, starts the engine and the HTTP daemon; NULL after printing why not. */
static struct MHD_Daemon *serve_start(const char *cmd, const serve_opts *o, srv_server *srv) {
    bool loopback = true;
    int bound = 0;
    int lfd = listen_on(o->host, o->port, &bound, &loopback);
    if (lfd < 0) return NULL;
    if (!loopback && !o->api_key)
        fprintf(stderr, "serve: warning: listening on %s, beyond this machine, without --api-key\n",
                o->host);
    char err[256];
    srv->engine = srv_engine_start(srv->entries, srv->n_entries, srv->n_batch, err, sizeof err);
    if (!srv->engine) {
        tool_error(cmd, "%s", err);
        close(lfd);
        return NULL;
    }
    unsigned idle = o->timeout > 0 && o->timeout < 600 ? (unsigned)o->timeout + 1 : 600;
    /* the connection layer accepts and hands sockets to the daemon; the logger is
     * the first option: libmicrohttpd warns about options read before it */
    const srv_conn_opts co = {.max_conns = o->conn_limit,
                              .max_per_ip = o->conn_limit_ip,
                              .header_timeout = o->header_timeout};
    g_conn = srv_conn_new(lfd, &co);
    struct MHD_Daemon *d =
        !g_conn ? NULL
                : MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                                       MHD_USE_ITC | MHD_USE_POLL | MHD_USE_ERROR_LOG |
                                       MHD_USE_NO_LISTEN_SOCKET,
                                   0, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER,
                                   mhd_log, NULL, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                   MHD_OPTION_NOTIFY_CONNECTION, srv_conn_notify, g_conn,
                                   MHD_OPTION_CONNECTION_TIMEOUT, idle, MHD_OPTION_CONNECTION_LIMIT,
                                   (unsigned)(2 * o->conn_limit + 16), MHD_OPTION_END);
    if (d && !srv_conn_start(g_conn, d)) {
        MHD_stop_daemon(d);
        d = NULL;
    }
    if (!d) {
        tool_error(cmd, "cannot start the HTTP server on %s:%d", o->host, bound);
        if (g_conn)
            srv_conn_free(g_conn); /* closes lfd */
        else
            close(lfd);
        g_conn = NULL;
        return NULL;
    }
    if (g_verbosity > 0) {
        tbuf names = {0};
        for (int i = 0; i < srv->n_entries; i++)
            tbuf_printf(&names, "%s'%s'", i ? ", " : "", srv->entries[i].name);
        const bool v6 = strchr(o->host, ':') != NULL, many = srv->n_entries > 1;
        fprintf(stderr,
                "serve: model%s %s, %d slot%s%s x %u positions, weights mapped once (%.2f MiB), "
                "listening on http://%s%s%s:%d%s\n",
                many ? "s" : "", names.data ? names.data : "", o->n_parallel,
                o->n_parallel == 1 ? "" : "s", many ? " each" : "", srv->entries[0].n_ctx,
                (double)rp_model_weight_bytes(srv->model) / 1048576.0, v6 ? "[" : "", o->host,
                v6 ? "]" : "", bound, o->api_key ? " (API key required)" : "");
        tbuf_free(&names);
        fflush(stderr);
    }
    return d;
}

/* Until SIGTERM or SIGINT; then stop accepting (queued requests get 503 at
 * once: from this moment none is admitted while the listening socket
 * closes), let running ones finish within --grace, and let the handlers send
 * what their finished tasks produced. */
static void serve_until_signal(srv_server *srv, struct MHD_Daemon *d, const sigset_t *sigs,
                               double grace) {
    int sig = 0;
    while (sigwait(sigs, &sig) != 0) {
    }
    if (g_verbosity > 0) {
        int busy, queued;
        srv_engine_counts(srv->engine, &busy, &queued);
        fprintf(stderr, "serve: %s: stopping (%d running, %d queued)\n",
                sig == SIGTERM ? "SIGTERM" : "SIGINT", busy, queued);
    }
    atomic_store(&srv->stopping, true);
    srv_engine_drain(srv->engine, grace);
    (void)d;
    srv_conn_stop(g_conn); /* stops accepting, closes the listening socket */
    srv_engine_stop(srv->engine, grace);
    for (double until = now_s() + 5.0; atomic_load(&g_in_flight) > 0 && now_s() < until;)
        usleep(10000);
}

/* The server's state beyond its entries. */
static void server_init(srv_server *srv, const serve_opts *o, rp_model *model, srv_entry *entries,
                        int n_entries) {
    memset(srv, 0, sizeof *srv);
    srv->model = model;
    srv->model_path = o->mo.model;
    srv->entries = entries;
    atomic_init(&srv->n_entries, n_entries);
    srv->entries_cap = 1 + SRV_MAX_PLANS;
    srv->plan_requests = o->plan_requests;
    srv->plan_cp = model_opts_context(&o->mo, (uint32_t)o->n_parallel);
    srv->plan_cp.repeat_layers = srv->plan_cp.layer_map = NULL;
    pthread_mutex_init(&srv->plan_mu, NULL);
    srv->api_key = o->api_key;
    srv->chat_template = o->to.name;
    srv->cors = o->cors;
    srv->timeout = o->timeout;
    srv->max_body = (size_t)o->max_body;
    srv->n_batch = o->mo.n_batch ? (int)o->mo.n_batch : 512;
    srv->t_start = now_s();
    atomic_init(&srv->stopping, false);
    atomic_init(&srv->counter, (uint_fast64_t)time(NULL) << 20);
    json_object_seed(0);
}

int cmd_serve(int argc, char **argv) {
    const char *cmd = "serve";
    serve_opts o = {.host = "127.0.0.1",
                    .port = 8080,
                    .n_parallel = 1,
                    .timeout = 600.0f,
                    .grace = 10.0f,
                    .header_timeout = 10.0f,
                    .conn_limit = SRV_CONN_LIMIT,
                    .conn_limit_ip = 128,
                    .max_body = 4u << 20};
    model_opts_init(&o.mo);
    spec_opts_init(&o.so);
    int rc = serve_parse(cmd, &o, argc, argv);
    if (rc != ARGS_OK) return rc;
    if (tool_list_devices(&o.mo)) return 0;
    if (!spec_opts_check(cmd, &o.so, &o.mo) || !serve_check(cmd, &o)) return 2;
    if (o.verbose) g_verbosity = 2;
    g_log_requests = o.verbose;
    g_model_private_copy = true; /* a model file rewritten under the server cannot kill it */

    /* Signals are taken by sigwait in this thread only: block them before any
     * thread (thread pool, engine, HTTP) exists so every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    rp_model *model;
    rp_context *ctx;
    srv_server srv;
    server_init(&srv, &o, NULL, NULL, 0);
    if (!check_chat_template(cmd, &o, &srv)) return 2; /* before the weights load */
    chat_tmpl tmpl = srv.tmpl;
    const bool chat_ok = srv.chat_ok;
    char chat_err[256];
    memcpy(chat_err, srv.chat_err, sizeof chat_err);
    if (!tool_load(cmd, &o.mo, (uint32_t)o.n_parallel, &model, &ctx, &rc)) {
        chat_tmpl_free(&tmpl);
        return rc;
    }

    /* entry 0: the model as loaded; then one entry per --plan, each its own
     * context (plan, KV, slots) over the same rp_model: the weights are mapped once */
    srv_entry entries[1 + SRV_MAX_PLANS];
    memset(entries, 0, sizeof entries);
    entry_store store;
    memset(&store, 0, sizeof store);
    int n_entries = 1;
    entries[0] = (srv_entry){
        .name = (char *)(o.alias ? o.alias : base_name(o.mo.model)),
        .ctx = ctx,
        .n_slot = o.n_parallel,
        .n_ctx = rp_context_n_ctx(ctx),
        .plan_kind = plan_kind(o.mo.repeat_layers, o.mo.layer_map),
        .plan_spec = o.mo.repeat_layers ? o.mo.repeat_layers
                     : o.mo.layer_map   ? o.mo.layer_map
                                        : "",
        .description = "",
    };
    rc = 1;
    struct MHD_Daemon *d = NULL;
    bool ok = true;
    static rp_context_params plan_cp[SRV_MAX_PLANS];
    for (int i = 0; ok && i < o.plans.n; i++)
        if ((ok = add_plan_entry(cmd, &o, model, entries, n_entries, &store, o.plans.v[i],
                                 &plan_cp[i])))
            n_entries++;
    ok = ok && plans_fit(cmd, &o, entries, n_entries);
    for (int i = 1; ok && i < n_entries; i++)
        ok = plan_realize(cmd, &o, model, entries, i, &plan_cp[i - 1]);
    for (int i = 0; ok && spec_opts_active(&o.so) && i < n_entries; i++) {
        char label[300];
        snprintf(label, sizeof label, "serve: model '%s'", entries[i].name);
        ok = (entries[i].spec = spec_open(cmd, &o.so, entries[i].ctx, label)) != NULL;
    }
    server_init(&srv, &o, model, entries, n_entries);
    srv.tmpl = tmpl;
    srv.chat_ok = chat_ok;
    memcpy(srv.chat_err, chat_err, sizeof chat_err);
    if (ok) {
        rp_status gs = rp_grammar_vocab_new(rp_model_vocab(model), &srv.gv);
        if (gs) ok = tool_fail(cmd, gs) == 0;
    }
    if (ok && (d = serve_start(cmd, &o, &srv))) {
        serve_until_signal(&srv, d, &sigs, o.grace);
        rc = 0;
    }
    if (d) MHD_stop_daemon(d);
    srv_conn_free(g_conn);
    g_conn = NULL;
    srv_engine_free(srv.engine);
    rp_grammar_vocab_free(srv.gv);
    chat_tmpl_free(&srv.tmpl);
    for (int i = 0; i < n_entries; i++) rp_spec_free(entries[i].spec); /* before their targets */
    n_entries = srv.n_entries; /* with the plans built for requests */
    srv_plans_free(&srv);
    for (int i = n_entries - 1; i >= 1; i--)
        rp_context_free(entries[i].ctx); /* they borrow entry 0's threads */
    if (n_entries < 1 + SRV_MAX_PLANS)
        rp_context_free(entries[n_entries].ctx); /* one that failed half-way */
    rp_context_free(ctx);
    for (int i = 0; i < store.n_pf; i++) rp_planfile_free(store.pf[i]);
    for (int i = 0; i < store.n_names; i++) free(store.names[i]);
    rp_model_free(model);
    if (rc == 0 && g_verbosity > 0) fprintf(stderr, "serve: stopped\n");
    return rc;
}
