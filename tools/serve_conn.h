/* reprise serve: the connection layer (serve_conn.c): accepting, the first
 * look at a request line, connection limits, the header deadline, request
 * framing checks. */
#ifndef RP_SERVE_CONN_H
#define RP_SERVE_CONN_H

#include "tools.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct srv_conn_opts {
    int max_conns;         /* connections in all */
    int max_per_ip;        /* from one client address; 0 = no cap */
    double header_timeout; /* seconds to send a request's headers */
} srv_conn_opts;

typedef struct srv_conn srv_conn;

typedef struct srv_conn_counts {
    unsigned long refused_full, refused_ip, timed_out, bad_line, evicted;
} srv_conn_counts;

/* Takes the listening socket lfd (closed by srv_conn_stop). NULL if out of memory. */
srv_conn *srv_conn_new(int lfd, const srv_conn_opts *o);
/* Starts accepting for daemon d (started with MHD_USE_NO_LISTEN_SOCKET and
 * srv_conn_notify as its MHD_OPTION_NOTIFY_CONNECTION). */
bool srv_conn_start(srv_conn *g, struct MHD_Daemon *d);
/* Stops accepting: the listening socket and the sockets not yet handed over close. */
void srv_conn_stop(srv_conn *g);
void srv_conn_free(srv_conn *g);
void srv_conn_stats(srv_conn *g, srv_conn_counts *out);

void srv_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);
/* A request's headers are complete / its response is done (keep-alive: the
 * next request's headers get a new deadline). */
void srv_conn_headers_done(srv_conn *g, struct MHD_Connection *c);
void srv_conn_request_done(srv_conn *g, struct MHD_Connection *c);
/* Why a request's framing is ambiguous (request smuggling behind a proxy),
 * or NULL: two different Content-Length headers, Content-Length with
 * Transfer-Encoding, more than one Transfer-Encoding. */
const char *srv_conn_check_framing(struct MHD_Connection *c);
/* The same check, pure (tests/fuzz/fuzz_http_head.c): each header of a
 * request added in order, then the verdict (NULL: unambiguous). */
typedef struct srv_framing {
    int n_cl, n_te;
    const char *cl; /* the last Content-Length value */
    bool cl_differ;
} srv_framing;
void srv_framing_add(srv_framing *f, const char *key, const char *value);
const char *srv_framing_verdict(const srv_framing *f);

/* The start of a request line: 1 plausible (a method token, a space, a
 * target's first byte), 0 not enough bytes yet, -1 garbage. */
int srv_conn_sniff(const unsigned char *p, size_t n);

#endif
