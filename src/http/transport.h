/* The transport (src/http): libmicrohttpd, connections, framing. It turns
 * requests into calls of the service (its headers in include/embedscope/) and its
 * replies into bytes on sockets; it computes nothing.
 *   server.c   libmicrohttpd glue: request heads in, replies out, the
 *              exchange's callbacks (include/embedscope/exchange.h: a
 *              request's life past its head is the exchange's)
 *   listen.c   the listening socket, the descriptor limit, the access log
 *   conns.c    the acceptor: connection admission, head deadlines, canned refusals
 *   framing.c  the strict framing check of the request bytes (framing.h)
 *   main.c     the command line, signals, systemd's readiness protocol, start and shutdown
 *   probe.c    --probe: one GET to a running daemon (health checks without curl)
 * Only server.c and conns.c include <microhttpd.h> (their shared part is
 * acceptor.h). */
#ifndef ES_HTTP_TRANSPORT_H
#define ES_HTTP_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>

/* The service's headers the transport calls (server.c, main.c). */
#include "embedscope/app.h"
#include "embedscope/cost.h"
#include "embedscope/jobs.h"
#include "embedscope/metrics.h"
#include "embedscope/negotiate.h"
#include "embedscope/params.h"
#include "embedscope/pool.h"
#include "embedscope/problem.h"
#include "embedscope/render.h"
#include "embedscope/results.h"
#include "embedscope/route.h"
#include "embedscope/uploads.h"

/* ================================================================ conns.c */

/* Connection admission in front of libmicrohttpd: an acceptor thread admits
 * sockets (connection_limit, per_address_limit; trusted proxies exempt from
 * the latter), answers the others with a canned 503 problem+json, and shuts
 * down connections whose request head is overdue (header_timeout_s). */
typedef struct es_conns es_conns;
typedef struct es_conn es_conn;    /* one connection: MHD's socket context */

/* The admission state for conf (borrowed during the call); counters go to mx
 * (kept). Never fails. */
es_conns *es_conns_new(const es_server_conf *conf, es_metrics *mx);
/* Stop the acceptor and close the listen socket (new clients are refused by
 * the kernel). Idempotent; never fails. */
void es_conns_stop_accepting(es_conns *c);
/* Apply conf's connection_limit, per_address_limit, header_timeout_s and
 * trusted_proxies (a reload). Never fails. */
void es_conns_configure(es_conns *c, const es_server_conf *conf);
/* Stop accepting and free; NULL is ignored. Call after MHD_stop_daemon. */
void es_conns_free(es_conns *c);
/* A request head arrived on k (busy = true) or its answer completed (false):
 * the head deadline starts again from the bytes received so far. NULL k is
 * ignored. Never fails. */
void es_conn_request(es_conns *c, es_conn *k, bool busy);
/* The client address of k as text ("-" for NULL), and whether it is one of
 * server.trusted_proxies. Never fail. */
const char *es_conn_address(const es_conn *k);
bool es_conn_trusted(const es_conn *k);
/* A complete HTTP/1.1 answer with a problem document of kind (status line,
 * Content-Type, Cache-Control: no-store, Retry-After: 1 for server-busy,
 * Connection: close, Content-Length, body), malloc'ed, for writing straight to
 * a socket libmicrohttpd cannot answer on; *len is its length. Never fails. */
char *es_problem_raw(es_problem_kind kind, const char *detail, size_t *len);

/* ================================================================ server.c */

typedef struct es_server es_server;
/* Bind host:port (numeric host, port 0 = any free port) and start serving with
 * the app's thread pool. ES_E_IO with a message on failure. */
int es_server_start(es_app *app, const char *host, unsigned port, es_server **out, es_err *err);
/* The bound port (the real one when 0 was asked). Never fails. */
unsigned es_server_port(const es_server *s);
/* Stop accepting, wait up to grace_s seconds for in-flight requests, then
 * abandon the rest (503) and stop. True when everything stopped and s was
 * freed; false when computations still run inside a library call: nothing
 * was freed and the caller must exit the process. */
bool es_server_stop(es_server *s, double grace_s);

/* ================================================================ listen.c */

/* A listening socket on host:port (numeric host; the kernel's full backlog);
 * *bound is the real port. ES_E_IO naming "listen" on failure. */
int es_listen_open(const char *host, unsigned port, unsigned *bound, es_err *err);
/* Raise the open-files limit to its hard maximum and the connection limit
 * bounded by it (with room for data files, the cache and the pipes). */
unsigned es_fit_descriptors(unsigned limit);
/* A completed request, for its access-log line. */
typedef struct es_access {
    const char *method, *path, *query;
    unsigned status;
    size_t bytes;
    double seconds;
    const char *id, *client, *peer; /* peer: the connection's address (shown when not the client) */
    bool early;                     /* the connection closed before the reply was complete */
} es_access;
/* One access-log record (es_log_access: whatever --log-level says). */
void es_access_log(const es_access *a);
/* What a request head says about its framing (server.c counts it). */
typedef struct es_head_scan {
    size_t n_length, n_host;
    const char *length; /* the first Content-Length */
    bool lengths_differ, chunked;
} es_head_scan;
/* Why a head is refused (400) before anything else, NULL if it is not: nul
 * for a %00 in its target, http11 for an HTTP/1.1 request. */
const char *es_head_refusal(const es_head_scan *h, bool nul, bool http11);
/* Has a body come too slowly: after server.body_grace_s seconds from the
 * request head it must have averaged server.body_min_rate bytes per second
 * (a client dripping a body cannot hold a connection, and an upload's
 * temporary file, open; a body that stops altogether is closed by the idle
 * timeout, server.connection_timeout_s)? The live settings of app's catalogue. */
bool es_body_too_slow(es_app *app, double elapsed, size_t bytes);

/* ================================================================ probe.c */

/* GET path from a daemon listening on host:port (numeric; a wildcard such as
 * 0.0.0.0 or :: is reached on the loopback), within 2 s a step. Returns the
 * exit status of --probe: 0 for a 2xx answer, 1 for anything else (another
 * status, no answer; one line on stderr says which), 2 for a path that is no
 * absolute URL path. */
int es_probe(const char *host, unsigned port, const char *path);

#endif
