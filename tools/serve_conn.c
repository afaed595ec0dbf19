/* reprise serve: the connection layer in front of libmicrohttpd (issue 22).
 *
 * One thread accepts every connection and holds it until the client has sent
 * the start of a plausible request line (a method token, a space, a target):
 * a line of garbage is answered 400 at once, a silent socket never reaches an
 * HTTP thread. Then the socket goes to the daemon (MHD_add_connection), which
 * runs it in a thread of its own. Limits, each answered 503 with a JSON body
 * (never a reset):
 *   - at most `max_conns` connections in all; when full, the oldest connection
 *     still sending its request headers is dropped to make room (slowloris
 *     holds no slot against a client that sends a whole request), and only when
 *     every connection is past its headers is the newcomer refused;
 *   - at most `max_per_ip` connections from one client address;
 *   - a request's headers must be complete within `header_timeout` seconds of
 *     the connection (or of the previous response on a kept-alive one): 408.
 * The daemon's requests report "headers complete" and "request finished"
 * (srv_conn_headers_done / srv_conn_request_done) through the socket context
 * of their connection. */
#include "serve_conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SRV_SNIFF_BYTES 64 /* enough to see a method and the start of a target */

typedef struct conn_slot {
    bool used;
    bool with_mhd;   /* handed to the daemon: it owns the fd now */
    bool in_headers; /* no complete request headers since t0 */
    bool shut;       /* refused or timed out: shut down, the daemon will close it */
    int fd;
    double t0; /* accepted, or the previous request finished */
    unsigned char addr[16];
    int addr_len; /* 4 or 16 */
    struct sockaddr_storage sa;
    socklen_t sa_len;
} conn_slot;

struct srv_conn {
    srv_conn_opts o;
    struct MHD_Daemon *d;
    int lfd, wake[2];
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;
    conn_slot *slots;
    int n_slots;
    unsigned long n_refused_full, n_refused_ip, n_timed_out, n_bad_line, n_evicted;
};

static const char *const g_503_full =
    "{\"error\":{\"message\":\"the server has no free connection; retry later\",\"type\":"
    "\"unavailable_error\",\"code\":\"too_many_connections\"}}";
static const char *const g_503_ip =
    "{\"error\":{\"message\":\"too many connections from this address; retry later\",\"type\":"
    "\"unavailable_error\",\"code\":\"too_many_connections\"}}";
static const char *const g_408 =
    "{\"error\":{\"message\":\"the request headers did not arrive in time\",\"type\":"
    "\"invalid_request_error\",\"code\":\"request_timeout\"}}";
static const char *const g_400 =
    "{\"error\":{\"message\":\"malformed request line\",\"type\":\"invalid_request_error\","
    "\"code\":\"bad_request\"}}";

/* A whole response in one non-blocking send (it is small): never waits. */
static void send_canned(int fd, unsigned status, const char *reason, const char *body,
                        bool retry_after) {
    char buf[768];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: "
                     "%zu\r\nConnection: close\r\n%s\r\n%s",
                     status, reason, strlen(body), retry_after ? "Retry-After: 1\r\n" : "", body);
    if (n > 0 && (size_t)n < sizeof buf)
        (void)send(fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Closes a socket we still own, after the response, without a reset. */
static void refuse(int fd, unsigned status, const char *reason, const char *body) {
    send_canned(fd, status, reason, body, status == 503);
    shutdown(fd, SHUT_WR);
    close(fd);
}

static bool addr_of(const struct sockaddr_storage *sa, unsigned char *out, int *len) {
    if (sa->ss_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        *len = 4;
        return true;
    }
    if (sa->ss_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        *len = 16;
        return true;
    }
    *len = 0;
    return false;
}

/* ---- the start of a request line --------------------------------------------- */

static bool is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int sniff(const unsigned char *p, size_t n);

/* 1: plausible so far and enough seen; 0: wait for more bytes; -1: garbage.
 * SRV_SNIFF_BYTES always decide (the accept thread peeks that many: a 0 there
 * would have it poll a readable socket in a loop until the header deadline). */
int srv_conn_sniff(const unsigned char *p, size_t n) {
    const int v = sniff(p, n);
    return v == 0 && n >= SRV_SNIFF_BYTES ? -1 : v;
}

static int sniff(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i + 1 < n && p[i] == '\r' && p[i + 1] == '\n') i += 2; /* empty lines first */
    if (i + 1 == n && p[i] == '\r') return 0; /* an empty line's \n may come in the next packet */
    if (i < n && p[i] == '\n') i++;
    size_t m = 0;
    for (; i < n && is_tchar(p[i]); i++)
        if (++m > 16) return -1; /* no method is that long */
    if (i == n) return 0;
    if (p[i] != ' ' || m == 0) return -1;
    if (i + 1 == n) return 0;
    return p[i + 1] > ' ' && p[i + 1] < 0x7f ? 1 : -1;
}

/* ---- the table of connections ----------------------------------------------- */

static conn_slot *slot_new(srv_conn *g) {
    for (int i = 0; i < g->n_slots; i++)
        if (!g->slots[i].used) return &g->slots[i];
    return NULL;
}

static int count_ip(const srv_conn *g, const unsigned char *addr, int len) {
    int k = 0;
    for (int i = 0; i < g->n_slots; i++)
        k += g->slots[i].used && g->slots[i].addr_len == len && !g->slots[i].shut &&
             memcmp(g->slots[i].addr, addr, (size_t)len) == 0;
    return k;
}

static int count_live(const srv_conn *g) {
    int k = 0;
    for (int i = 0; i < g->n_slots; i++) k += g->slots[i].used && !g->slots[i].shut;
    return k;
}

/* Ends a connection whose slot is kept until it is closed: one still ours is
 * closed now, one the daemon runs is shut down (its thread sees the end and
 * closes it; the slot goes with the daemon's "closed" notice). */
static void slot_end(conn_slot *s, unsigned status, const char *reason, const char *body) {
    if (!s->with_mhd) {
        refuse(s->fd, status, reason, body);
        s->used = false;
        return;
    }
    if (s->shut) return;
    send_canned(s->fd, status, reason, body, status == 503);
    shutdown(s->fd, SHUT_RDWR);
    s->shut = true;
}

/* Makes room when the table is full: the oldest connection still in its
 * headers goes. False if every connection is past its headers. */
static bool evict_oldest(srv_conn *g) {
    conn_slot *old = NULL;
    for (int i = 0; i < g->n_slots; i++) {
        conn_slot *s = &g->slots[i];
        if (s->used && !s->shut && s->in_headers && (!old || s->t0 < old->t0)) old = s;
    }
    if (!old) return false;
    slot_end(old, 503, "Service Unavailable", g_503_full);
    g->n_evicted++;
    return true;
}

static void on_accept(srv_conn *g, double now) {
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    int fd = accept4(g->lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    unsigned char addr[16];
    int alen;
    addr_of(&sa, addr, &alen);
    pthread_mutex_lock(&g->mu);
    conn_slot *s = NULL;
    if (g->o.max_per_ip > 0 && count_ip(g, addr, alen) >= g->o.max_per_ip) {
        g->n_refused_ip++;
        pthread_mutex_unlock(&g->mu);
        refuse(fd, 503, "Service Unavailable", g_503_ip);
        return;
    }
    if (count_live(g) >= g->o.max_conns && !evict_oldest(g)) {
        g->n_refused_full++;
        pthread_mutex_unlock(&g->mu);
        refuse(fd, 503, "Service Unavailable", g_503_full);
        return;
    }
    s = slot_new(g); /* the table has room for every shut slot still closing */
    if (!s) {
        g->n_refused_full++;
        pthread_mutex_unlock(&g->mu);
        refuse(fd, 503, "Service Unavailable", g_503_full);
        return;
    }
    *s = (conn_slot){.used = true,
                     .in_headers = true,
                     .fd = fd,
                     .t0 = now,
                     .addr_len = alen,
                     .sa = sa,
                     .sa_len = sl};
    memcpy(s->addr, addr, (size_t)alen);
    pthread_mutex_unlock(&g->mu);
}

/* A socket still ours has bytes (or its end): hand it over, refuse it, or wait. */
static void on_readable(srv_conn *g, conn_slot *s) {
    unsigned char buf[SRV_SNIFF_BYTES];
    ssize_t k = recv(s->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (k <= 0) { /* gone before a request */
        close(s->fd);
        s->used = false;
        return;
    }
    int v = srv_conn_sniff(buf, (size_t)k);
    if (v == 0) return;
    if (v < 0) {
        g->n_bad_line++;
        slot_end(s, 400, "Bad Request", g_400);
        return;
    }
    s->with_mhd = true; /* before the daemon's "started" notice can look for it */
    pthread_mutex_unlock(&g->mu);
    enum MHD_Result r = MHD_add_connection(g->d, s->fd, (struct sockaddr *)&s->sa, s->sa_len);
    pthread_mutex_lock(&g->mu);
    if (r != MHD_YES) s->used = false; /* the daemon closed it */
}

static void check_deadlines(srv_conn *g, double now) {
    for (int i = 0; i < g->n_slots; i++) {
        conn_slot *s = &g->slots[i];
        if (s->used && !s->shut && s->in_headers && now - s->t0 > g->o.header_timeout) {
            g->n_timed_out++;
            slot_end(s, 408, "Request Timeout", g_408);
        }
    }
}

static void *accept_main(void *arg) {
    srv_conn *g = arg;
    struct pollfd *p = calloc((size_t)g->n_slots + 2, sizeof *p);
    int *idx = calloc((size_t)g->n_slots + 2, sizeof *idx);
    if (!p || !idx) {
        free(p);
        free(idx);
        return NULL;
    }
    for (;;) {
        int n = 0;
        p[n++] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
        p[n++] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
        pthread_mutex_lock(&g->mu);
        for (int i = 0; i < g->n_slots; i++)
            if (g->slots[i].used && !g->slots[i].with_mhd) {
                idx[n] = i;
                p[n++] = (struct pollfd){.fd = g->slots[i].fd, .events = POLLIN};
            }
        pthread_mutex_unlock(&g->mu);
        int r = poll(p, (nfds_t)n, 200);
        if (r < 0 && errno != EINTR) break;
        if (p[0].revents) break; /* srv_conn_stop */
        const double now = now_s();
        if (p[1].revents & POLLIN)
            for (int k = 0; k < 64; k++) on_accept(g, now); /* a burst at once */
        pthread_mutex_lock(&g->mu);
        for (int j = 2; j < n; j++)
            if (p[j].revents && g->slots[idx[j]].used && !g->slots[idx[j]].with_mhd &&
                g->slots[idx[j]].fd == p[j].fd)
                on_readable(g, &g->slots[idx[j]]);
        check_deadlines(g, now);
        pthread_mutex_unlock(&g->mu);
    }
    free(p);
    free(idx);
    return NULL;
}

/* ---- the daemon's side ------------------------------------------------------- */

void srv_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code) {
    srv_conn *g = cls;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const int fd = ci ? (int)ci->connect_fd : -1;
    pthread_mutex_lock(&g->mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = NULL;
        for (int i = 0; i < g->n_slots; i++)
            if (g->slots[i].used && g->slots[i].with_mhd && g->slots[i].fd == fd)
                *socket_context = &g->slots[i];
    } else { /* closed: the daemon closes the fd after this notice */
        conn_slot *s = *socket_context;
        if (s) s->used = false;
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&g->mu);
}

static conn_slot *slot_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void srv_conn_headers_done(srv_conn *g, struct MHD_Connection *c) {
    pthread_mutex_lock(&g->mu);
    conn_slot *s = slot_of(c);
    if (s) s->in_headers = false;
    pthread_mutex_unlock(&g->mu);
}

void srv_conn_request_done(srv_conn *g, struct MHD_Connection *c) {
    pthread_mutex_lock(&g->mu);
    conn_slot *s = slot_of(c);
    if (s) { /* a kept-alive connection: the next request's headers get the same time */
        s->in_headers = true;
        s->t0 = now_s();
    }
    pthread_mutex_unlock(&g->mu);
}

void srv_framing_add(srv_framing *f, const char *key, const char *value) {
    if (!key) return;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (f->n_cl++ && (!value || !f->cl || strcmp(value, f->cl) != 0)) f->cl_differ = true;
        f->cl = value;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->n_te++;
    }
}

const char *srv_framing_verdict(const srv_framing *f) {
    if (f->cl_differ) return "two different Content-Length headers";
    if (f->n_cl && f->n_te) return "both Content-Length and Transfer-Encoding";
    if (f->n_te > 1) return "more than one Transfer-Encoding header";
    return NULL;
}

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
    (void)kind;
    srv_framing_add(cls, key, value);
    return MHD_YES;
}

const char *srv_conn_check_framing(struct MHD_Connection *c) {
    srv_framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &f);
    return srv_framing_verdict(&f);
}

/* ---- start, stop ------------------------------------------------------------- */

srv_conn *srv_conn_new(int lfd, const srv_conn_opts *o) {
    srv_conn *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->o = *o;
    g->lfd = lfd;
    g->wake[0] = g->wake[1] = -1;
    /* room for the live connections and as many again shut down but not yet closed */
    g->n_slots = 2 * o->max_conns + 16;
    g->slots = calloc((size_t)g->n_slots, sizeof *g->slots);
    if (!g->slots || pipe2(g->wake, O_CLOEXEC) != 0) {
        srv_conn_free(g);
        return NULL;
    }
    pthread_mutex_init(&g->mu, NULL);
    int fl = fcntl(lfd, F_GETFL);
    if (fl >= 0) fcntl(lfd, F_SETFL, fl | O_NONBLOCK);
    return g;
}

bool srv_conn_start(srv_conn *g, struct MHD_Daemon *d) {
    g->d = d;
    g->running = pthread_create(&g->thread, NULL, accept_main, g) == 0;
    return g->running;
}

void srv_conn_stop(srv_conn *g) {
    if (!g || !g->running) return;
    char c = 1;
    if (write(g->wake[1], &c, 1) != 1) {
    }
    pthread_join(g->thread, NULL);
    g->running = false;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n_slots; i++) /* sockets never handed over */
        if (g->slots[i].used && !g->slots[i].with_mhd) {
            close(g->slots[i].fd);
            g->slots[i].used = false;
        }
    pthread_mutex_unlock(&g->mu);
    if (g->lfd >= 0) close(g->lfd);
    g->lfd = -1;
}

void srv_conn_stats(srv_conn *g, srv_conn_counts *out) {
    pthread_mutex_lock(&g->mu);
    *out = (srv_conn_counts){.refused_full = g->n_refused_full,
                             .refused_ip = g->n_refused_ip,
                             .timed_out = g->n_timed_out,
                             .bad_line = g->n_bad_line,
                             .evicted = g->n_evicted};
    pthread_mutex_unlock(&g->mu);
}

void srv_conn_free(srv_conn *g) {
    if (!g) return;
    srv_conn_stop(g);
    if (g->wake[0] >= 0) close(g->wake[0]);
    if (g->wake[1] >= 0) close(g->wake[1]);
    if (g->slots) pthread_mutex_destroy(&g->mu);
    free(g->slots);
    free(g);
}
