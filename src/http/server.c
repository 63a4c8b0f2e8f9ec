/* libmicrohttpd glue: each request is routed (routes.c) on the final access
 * handler call, its reply becomes an MHD response with the caching, content
 * coding, CORS and request-id headers, and one access-log line is written
 * when it completes.
 *
 * Methods: GET and HEAD (MHD sends no body for HEAD); OPTIONS answers CORS
 * preflights; anything else is 405 with Allow. Request bodies are refused with
 * 413 on the first call, before they are read (no PostProcessor). */
#include "http/http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ALLOW "GET, HEAD, OPTIONS"
#define EXPOSE_HEADERS "ETag, X-Request-Id"
#define PREFLIGHT_HEADERS "If-None-Match, X-Request-Id, Accept-Encoding"
/* Bodies smaller than this are sent uncompressed. */
#define GZIP_MIN_BYTES 1024
/* Per-connection memory: headers plus a long query string (exclude lists). */
#define CONNECTION_MEMORY (256 * 1024)

struct es_server {
    es_app *app;
    struct MHD_Daemon *daemon;
    unsigned port;
};

/* Per-request state (MHD's *con_cls), freed when the request completes. */
typedef struct request {
    char method[16];
    char *path;
    char *query_text;
    char id[72];
    double t0;
    unsigned status;
    size_t bytes;
    bool answered;
} request;

static const char *header(struct MHD_Connection *conn, const char *name)
{
    return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, name);
}

static bool is_method(const request *rq, const char *name)
{
    return strcmp(rq->method, name) == 0;
}

/* Does the client announce a request body? */
static bool body_announced(struct MHD_Connection *conn)
{
    const char *len = header(conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return header(conn, MHD_HTTP_HEADER_TRANSFER_ENCODING) || (len && strspn(len, "0") != strlen(len));
}

static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    es_query_add(cls, key, value);
    return MHD_YES;
}

/* Turn a reply into a problem document of the given kind (the body is replaced). */
static void problem_reply(es_reply *rep, es_problem_kind kind, const char *detail, const char *param,
                          const char *instance, const char *request_id)
{
    json_t *p = es_problem_new(kind, detail, param, instance, request_id);
    es_err ignored;
    if (!rep->body_static)
        free(rep->body);
    *rep = (es_reply){.status = es_problem_status(kind), .content_type = "application/problem+json",
                      .cache_control = "no-store"};
    if (es_json_body(p, 0, &rep->body, &rep->len, &ignored) < 0) {
        rep->body = (char *)"{}";
        rep->len = 2;
        rep->body_static = true;
    }
    json_decref(p);
}

/* The ETag of a body-derived reply, and 304 if the client has it. */
static void finish_etag(es_reply *rep, const char *if_none_match)
{
    if (rep->status != 200)
        return;
    if (rep->etag_from_body)
        es_etag_of(rep->body, rep->len, rep->etag);
    if (rep->etag[0] && es_etag_matches(if_none_match, rep->etag))
        rep->status = 304;
}

/* Replace a large body by its gzip when the client accepts it; true if done. */
static bool maybe_gzip(es_reply *rep, const char *accept_encoding)
{
    if (rep->status != 200 || rep->len < GZIP_MIN_BYTES || !es_accepts_gzip(accept_encoding))
        return false;
    char *z = NULL;
    size_t zlen = 0;
    if (es_gzip(rep->body, rep->len, &z, &zlen) < 0)
        return false;
    if (zlen >= rep->len) {
        free(z);
        return false;
    }
    if (!rep->body_static)
        free(rep->body);
    rep->body = z;
    rep->len = zlen;
    rep->body_static = false;
    return true;
}

static void add(struct MHD_Response *r, const char *name, const char *value)
{
    if (value && *value)
        MHD_add_response_header(r, name, value);
}

/* CORS headers for an allowed Origin; preflight answers add the allowed methods. */
static void add_cors(struct MHD_Response *r, const es_app *app, struct MHD_Connection *conn, bool preflight,
                     char *vary, size_t vary_size)
{
    const char *allow = es_cors_allow(app->server.cors_origins, header(conn, "Origin"));
    if (!allow)
        return;
    add(r, "Access-Control-Allow-Origin", allow);
    add(r, "Access-Control-Expose-Headers", EXPOSE_HEADERS);
    if (strcmp(allow, "*") != 0)
        snprintf(vary + strlen(vary), vary_size - strlen(vary), "%sOrigin", *vary ? ", " : "");
    if (preflight) {
        add(r, "Access-Control-Allow-Methods", ALLOW);
        add(r, "Access-Control-Allow-Headers", PREFLIGHT_HEADERS);
        add(r, "Access-Control-Max-Age", "86400");
    }
}

/* Queue the reply (consumed) with every header; records status and size. */
static enum MHD_Result send_reply(es_server *srv, request *rq, struct MHD_Connection *conn, es_reply *rep,
                                  bool preflight)
{
    finish_etag(rep, header(conn, MHD_HTTP_HEADER_IF_NONE_MATCH));
    if (rep->status == 304 || rep->status == 204) {
        if (!rep->body_static)
            free(rep->body);
        rep->body = (char *)"";
        rep->len = 0;
        rep->body_static = true;
    }
    bool gzipped = maybe_gzip(rep, header(conn, MHD_HTTP_HEADER_ACCEPT_ENCODING));
    struct MHD_Response *r =
        rep->body_static ? MHD_create_response_from_buffer(rep->len, rep->body, MHD_RESPMEM_PERSISTENT)
                         : MHD_create_response_from_buffer_with_free_callback(rep->len, rep->body, free);
    if (!r) {
        if (!rep->body_static)
            free(rep->body);
        return MHD_NO;
    }
    char vary[64] = "";
    if (rep->content_type && rep->len)
        add(r, MHD_HTTP_HEADER_CONTENT_TYPE, rep->content_type);
    if (rep->status == 200 || rep->status == 304)
        snprintf(vary, sizeof vary, "Accept-Encoding");
    if (gzipped)
        add(r, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
    add(r, MHD_HTTP_HEADER_ETAG, rep->etag);
    add(r, MHD_HTTP_HEADER_CACHE_CONTROL, rep->cache_control);
    add(r, MHD_HTTP_HEADER_ALLOW, rep->allow);
    add(r, "X-Request-Id", rq->id);
    add_cors(r, srv->app, conn, preflight, vary, sizeof vary);
    add(r, MHD_HTTP_HEADER_VARY, vary);
    if (atomic_load(&srv->app->stopping))
        add(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(conn, rep->status, r);
    MHD_destroy_response(r);
    rq->status = rep->status;
    rq->bytes = is_method(rq, "HEAD") ? 0 : rep->len;
    rq->answered = true;
    return ok;
}

/* Answer with a problem of the given kind right away. */
static enum MHD_Result send_problem(es_server *srv, request *rq, struct MHD_Connection *conn, es_problem_kind kind,
                                    const char *detail)
{
    es_reply rep = {0};
    problem_reply(&rep, kind, detail, NULL, rq->path, rq->id);
    if (kind == ES_PROB_METHOD_NOT_ALLOWED)
        rep.allow = ALLOW;
    return send_reply(srv, rq, conn, &rep, false);
}

/* Route and run the request, then send its reply or problem. */
static enum MHD_Result answer(es_server *srv, request *rq, struct MHD_Connection *conn)
{
    es_query q;
    es_query_init(&q);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_arg, &q);
    rq->query_text = es_query_text(&q);
    es_ctx cx = {.app = srv->app, .query = &q, .path = rq->path,
                 .if_none_match = header(conn, MHD_HTTP_HEADER_IF_NONE_MATCH)};
    const es_route *route = es_route_find(rq->path, &cx);
    bool preflight = false;
    es_err err = {0};
    if (!route) {
        problem_reply(&cx.reply, ES_PROB_NOT_FOUND, "no such path (see /openapi.yaml)", NULL, rq->path, rq->id);
    } else if (is_method(rq, "OPTIONS")) {
        preflight = header(conn, "Access-Control-Request-Method") != NULL;
        cx.reply = (es_reply){.status = 204, .body = (char *)"", .body_static = true, .allow = ALLOW};
    } else if (es_route_dispatch(route, &cx, &err) < 0) {
        if (es_problem_status(es_problem_kind_of(err.code)) >= 500)
            es_error("%s %s: %s error: %s", rq->method, rq->path, es_errcode_name(err.code), err.message);
        problem_reply(&cx.reply, es_problem_kind_of(err.code), err.message, err.param, rq->path, rq->id);
    }
    es_query_free(&q);
    return send_reply(srv, rq, conn, &cx.reply, preflight);
}

/* MHD access handler: state on the first call (refusing wrong methods and
 * bodies at once), the answer on the final call. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    (void)upload_data;
    es_server *srv = cls;
    request *rq = *con_cls;
    if (!rq) {
        rq = es_calloc(1, sizeof *rq);
        snprintf(rq->method, sizeof rq->method, "%s", method);
        rq->path = es_strdup(url);
        rq->t0 = es_now();
        es_request_id(header(conn, "X-Request-Id"), atomic_fetch_add(&srv->app->request_counter, 1) + 1, rq->id);
        *con_cls = rq;
        atomic_fetch_add(&srv->app->metrics.in_flight, 1);
        es_ctx probe = {0};
        bool known = es_route_find(url, &probe) != NULL;
        if (!is_method(rq, "GET") && !is_method(rq, "HEAD") && !is_method(rq, "OPTIONS"))
            return send_problem(srv, rq, conn, known ? ES_PROB_METHOD_NOT_ALLOWED : ES_PROB_NOT_FOUND,
                                known ? "this API is read-only: use GET, HEAD or OPTIONS" : "no such path");
        if (body_announced(conn))
            return send_problem(srv, rq, conn, ES_PROB_BODY_NOT_ACCEPTED, "requests must not carry a body");
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0; /* discarded: only reached if a body slipped past the first check */
        return rq->answered ? MHD_YES
                            : send_problem(srv, rq, conn, ES_PROB_BODY_NOT_ACCEPTED, "requests must not carry a body");
    }
    return rq->answered ? MHD_YES : answer(srv, rq, conn);
}

/* Access log line and metrics, then free the request state. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    es_server *srv = cls;
    request *rq = *con_cls;
    if (!rq)
        return;
    double seconds = es_now() - rq->t0;
    es_info("%s %s%s%.512s %u %zu B %.1f ms id=%s%s", rq->method, rq->path, rq->query_text && *rq->query_text ? "?" : "",
            rq->query_text ? rq->query_text : "", rq->status, rq->bytes, seconds * 1e3, rq->id,
            toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)");
    es_metrics_observe(&srv->app->metrics, rq->status, seconds, rq->bytes);
    atomic_fetch_sub(&srv->app->metrics.in_flight, 1);
    free(rq->path);
    free(rq->query_text);
    free(rq);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    es_warn("libmicrohttpd: %s", line);
}

/* Resolve host:port to one socket address. ES_E_IO naming "listen" on failure. */
static int resolve(const char *host, unsigned port, struct addrinfo **out, es_err *err)
{
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    int rc = getaddrinfo(host, service, &hints, out);
    if (rc != 0)
        return es_fail(err, ES_E_IO, "listen", "cannot resolve listen address %s:%u: %s", host, port, gai_strerror(rc));
    return 0;
}

int es_server_start(es_app *app, const char *host, unsigned port, es_server **out, es_err *err)
{
    struct addrinfo *ai;
    if (resolve(host, port, &ai, err) < 0)
        return -1;
    es_server *srv = es_calloc(1, sizeof *srv);
    srv->app = app;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_ERROR_LOG |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    srv->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv, MHD_OPTION_SOCK_ADDR,
        ai->ai_addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)app->server.threads, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)app->server.connection_timeout_s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)app->server.connection_limit,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!srv->daemon) {
        free(srv);
        return es_fail(err, ES_E_IO, "listen", "cannot listen on %s:%u (address in use or not local?)", host, port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : port;
    *out = srv;
    return 0;
}

unsigned es_server_port(const es_server *s) { return s->port; }

/* Stop accepting, let in-flight requests finish (up to grace_s), stop, free. */
void es_server_stop(es_server *s, double grace_s)
{
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    double deadline = es_now() + grace_s;
    while (atomic_load(&s->app->metrics.in_flight) > 0 && es_now() < deadline)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    MHD_stop_daemon(s->daemon);
    free(s);
}
