/* libmicrohttpd glue: a request's head is checked (framing, methods,
 * bodies), its exchange created (include/embedscope/exchange.h: the route,
 * the gate, the computation, waiting, 202 jobs and the watcher are the
 * exchange's), and its reply becomes an MHD response with the caching,
 * content coding, CORS and request-id headers; one access-log line is
 * written when it completes.
 *
 * The exchange's callbacks: suspend and resume are MHD_suspend_connection and
 * MHD_resume_connection (while suspended a connection cannot time out or
 * close: MHD does not watch it, so the exchange outlives nothing it points
 * to); client_gone looks at the suspended socket without reading it; send
 * queues the reply (send_reply), which MHD accepts only in the access
 * handler: a resumed connection's reply is sent on the call after the resume.
 *
 * Methods: GET and HEAD (MHD sends no body for HEAD); OPTIONS answers CORS
 * preflights; PUT and DELETE on /v1/models/{model}/matrices/{matrix} are
 * writes (uploads.c): checked on the first call, before the body is read
 * (access, names, read-only models, type, announced length), the body streamed
 * chunk by chunk into the write's temporary file (a body slower than
 * server.body_min_rate after server.body_grace_s gets a 408 and the connection
 * is closed: see es_body_too_slow), and finished by the exchange (on the compute
 * pool, without a deadline: a write either happens or is refused, never
 * abandoned half-way). DELETE /v1/jobs/{id} cancels a job. Anything else is
 * 405 with Allow. Other requests' bodies are refused with 413 on the first
 * call, before they are read. Every request holds the catalogue it started
 * with (es_app_catalogue) until it ends. */
#include "http/acceptor.h"

#include "embedscope/exchange.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ALLOW "GET, HEAD, OPTIONS"
#define ALLOW_WRITE "GET, HEAD, OPTIONS, PUT, DELETE"
#define EXPOSE_HEADERS "ETag, X-Request-Id, Location"
#define PREFLIGHT_HEADERS "If-None-Match, X-Request-Id, Accept-Encoding, Authorization, Content-Type, Prefer"
#define ALLOW_JOB "GET, HEAD, OPTIONS, DELETE"
/* The one other path that takes DELETE: cancelling a job. */
#define JOB_ROUTE "/v1/jobs/{id}"
/* MHD's memory pool per connection: it holds a request head, what MHD parses
 * from it (~64 bytes for each field line, query parameter and cookie, and a
 * copy of the Cookie value) and the reply's header lines. The framing check
 * (framing.c) refuses, with our problem documents, every head that would not
 * fit (docs/operations.md, "Connections, slow clients and heavy requests"):
 * the largest it admits (an 8 KiB request line with 64 parameters, 8 KiB of
 * fields in 100 lines) take about 27 KiB. It is no bigger because MHD 0.9.75
 * zeroes the whole pool before every request of a keep-alive connection: at
 * 128 KiB that memset was 20 % of the CPU time of a cached /v1/models reply. */
#define CONNECTION_MEMORY (32 * 1024)
/* Access-log status of a job dropped because its client had gone (nginx's). */
#define CLIENT_GONE 499
/* Bytes of a failed upload's body read and dropped before its 413 (MHD sends
 * no reply before the body has ended); beyond, the connection is closed. */
#define DISCARD_LIMIT ((size_t)64 << 20)
/* After the pool has stopped at shutdown: time for the last replies to go out. */
#define FLUSH_SECONDS 2.0
/* Period of the exchanges' watcher (deadlines, departed clients, shutdown), ms. */
#define WATCH_MS 100

struct es_server {
    es_app *app;
    struct MHD_Daemon *daemon;
    es_conns *conns;
    unsigned port;
    es_exchanges *exchanges;
};

/* Per-request state (MHD's *con_cls), freed when the request completes. */
typedef struct request {
    es_server *srv;
    struct MHD_Connection *mhd;
    es_exchange *ex;   /* the request's life past its head (route, gate, computation) */
    char method[16];
    char *path;
    char *query_text;
    char id[72];
    char prefix[ES_PREFIX_MAX]; /* X-Forwarded-Prefix: put in front of the paths problems name */
    double t0;
    unsigned status;
    size_t bytes;
    bool answered;
    bool suspended;    /* handed to the exchange's computation or wait: its reply follows a resume */
    es_conn *conn;     /* the connection's admission record (conns.c) */
    char client[ES_CLIENT_MAX]; /* address, or a trusted proxy's X-Forwarded-For */
    char owner[ES_OWNER_MAX];   /* whose jobs it sees and makes (es_job_owner) */
    bool close;        /* answer with Connection: close */
    const char *route; /* the matched route's pattern (metrics), NULL if none */
    es_upload *upload; /* a write (PUT, DELETE) until it is finished or handed to the exchange */
    bool body_failed;  /* the upload failed mid-body (too large, I/O): the rest is discarded */
    es_err body_err;   /* why, answered once the body has ended (MHD takes no reply before) */
    size_t discarded;
    size_t body_bytes; /* of the body so far, kept or discarded (server.body_min_rate) */
} request;

/* A request header's value, NULL when absent. */
static const char *header(struct MHD_Connection *conn, const char *name)
{
    return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, name);
}

/* The client a request is counted for (logs, fairness): the connection's
 * address, or for a trusted proxy the last X-Forwarded-For entry (the address
 * the proxy itself saw; entries before it are the client's own claims). */
static void client_of(request *rq, const char *forwarded, const char *authorization)
{
    if (!es_conn_trusted(rq->conn) || !es_forwarded_for(forwarded, rq->client))
        snprintf(rq->client, sizeof rq->client, "%s", es_conn_address(rq->conn));
    es_job_owner(rq->client, authorization, rq->owner);
}

/* What MHD_OPTION_URI_LOG_CALLBACK learns from the raw request target, before
 * MHD decodes it (a decoded %00 silently cuts a path or value short): one of
 * these sentinels becomes the request's initial *con_cls. */
static char raw_ok, raw_nul;

/* The sentinel for a raw request target (its size and its number of
 * parameters were checked by the framing check before MHD parsed it). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls;
    (void)conn;
    for (const char *p = strchr(uri, '%'); p; p = strchr(p + 1, '%'))
        if (p[1] == '0' && p[2] == '0')
            return &raw_nul;
    return &raw_ok;
}

/* Is *con_cls one of on_uri's sentinels (the first call of a request)? */
static bool is_raw_mark(const void *p)
{
    return p == &raw_ok || p == &raw_nul;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    es_head_scan *h = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        h->lengths_differ = h->lengths_differ || (h->length && strcmp(h->length, value ? value : "") != 0);
        if (!h->length)
            h->length = value ? value : "";
        h->n_length++;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0) {
        h->n_host++;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        h->chunked = true;
    }
    return MHD_YES;
}

/* Why the request head is refused before anything else (RFC 9112 §3.2, §6.3:
 * ambiguous framing is an error, not a guess), or ES_PROB_COUNT if it is not;
 * *detail says why. */
static es_problem_kind head_problem(struct MHD_Connection *conn, const void *raw, const char *version,
                                    const char **detail)
{
    es_head_scan h = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, scan_header, &h);
    *detail = es_head_refusal(&h, raw == &raw_nul, strcmp(version, MHD_HTTP_VERSION_1_1) == 0);
    return *detail ? ES_PROB_BAD_REQUEST : ES_PROB_COUNT;
}

/* Exact (case-sensitive, RFC 9110) method comparison. */
static bool is_method(const char *method, const char *name)
{
    return strcmp(method, name) == 0;
}

/* Does the client announce a request body? */
static bool body_announced(struct MHD_Connection *conn)
{
    const char *len = header(conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return header(conn, MHD_HTTP_HEADER_TRANSFER_ENCODING) || (len && strspn(len, "0") != strlen(len));
}

/* MHD argument iterator: append each query parameter, duplicates kept. */
static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    es_query_add(cls, key, value);
    return MHD_YES;
}

/* Add a header unless value is NULL or "". */
static void add(struct MHD_Response *r, const char *name, const char *value)
{
    if (value && *value)
        MHD_add_response_header(r, name, value);
}

/* CORS headers for an allowed Origin; preflight answers add the path's allowed
 * methods (its Allow header: PUT and DELETE where writes go) for an origin
 * that may write (es_cors_may_write), the reading ones for any other.
 * With a restricted allow-list every reply varies by Origin (a shared cache
 * must not give one origin's reply to another), allowed or not. */
static void add_cors(struct MHD_Response *r, const request *rq, struct MHD_Connection *conn, bool preflight,
                     const char *methods, char *vary, size_t vary_size)
{
    /* the origins of the request's catalogue (a reload changes them), which it holds: no lock taken */
    const es_catalogue *held = rq->ex ? es_exchange_catalogue(rq->ex) : NULL;
    es_catalogue *cat = held ? NULL : es_app_catalogue(rq->srv->app);
    char *const *origins = (held ? held : cat)->server.cors_origins;
    if (es_cors_varies(origins))
        snprintf(vary + strlen(vary), vary_size - strlen(vary), "%sOrigin", *vary ? ", " : "");
    const char *allow = es_cors_allow(origins, header(conn, "Origin"));
    if (allow && strcmp(allow, "*") != 0)
        allow = header(conn, "Origin"); /* the request's own text: outlives cat */
    if (preflight && !es_cors_may_write(origins, header(conn, "Origin"), header(conn, MHD_HTTP_HEADER_HOST)))
        methods = ALLOW; /* another origin's page may read ("*"), never write: its PUT/DELETE preflight fails */
    es_catalogue_free(cat); /* NULL when held */
    if (!allow)
        return;
    add(r, "Access-Control-Allow-Origin", allow);
    add(r, "Access-Control-Expose-Headers", EXPOSE_HEADERS);
    if (preflight) {
        add(r, "Access-Control-Allow-Methods", methods);
        add(r, "Access-Control-Allow-Headers", PREFLIGHT_HEADERS);
        add(r, "Access-Control-Max-Age", "86400");
    }
}

/* MHD's free callback of a response over shared bytes. */
static void release_shared(void *cls) { es_shared_release(cls); }

/* Queue the reply (consumed) with every header; records status and size. */
static enum MHD_Result send_reply(es_server *srv, request *rq, struct MHD_Connection *conn, es_reply *rep,
                                  bool preflight)
{
    if (rep->content_type && strcmp(rep->content_type, "application/problem+json") == 0)
        es_problem_rebase(rep, rq->prefix);
    es_reply_finish(rep, header(conn, MHD_HTTP_HEADER_IF_NONE_MATCH));
    bool gzipped = es_reply_choose_coding(rep, header(conn, MHD_HTTP_HEADER_ACCEPT_ENCODING), srv->app->pool);
    struct MHD_Response *r =
        rep->shared        ? MHD_create_response_from_buffer_with_free_callback_cls(
                                 rep->len, rep->body, release_shared, rep->shared)
        : rep->body_static ? MHD_create_response_from_buffer(rep->len, rep->body, MHD_RESPMEM_PERSISTENT)
                           : MHD_create_response_from_buffer_with_free_callback(rep->len, rep->body, free);
    if (!r) {
        es_reply_release(rep);
        return MHD_NO;
    }
    char vary[64] = "";
    if (rep->content_type && rep->len)
        add(r, MHD_HTTP_HEADER_CONTENT_TYPE, rep->content_type);
    if (rep->status == 200 || rep->status == 304)
        snprintf(vary, sizeof vary, rep->vary_accept ? "Accept-Encoding, Accept" : "Accept-Encoding");
    if (gzipped)
        add(r, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
    add(r, MHD_HTTP_HEADER_ETAG, rep->etag);
    add(r, MHD_HTTP_HEADER_CACHE_CONTROL, rep->cache_control);
    add(r, MHD_HTTP_HEADER_ALLOW, rep->allow);
    char retry[16] = "", applied[48] = "";
    if (!rep->retry_after && rep->retry_after_s)
        snprintf(retry, sizeof retry, "%u", rep->retry_after_s);
    add(r, MHD_HTTP_HEADER_RETRY_AFTER, rep->retry_after ? rep->retry_after : retry);
    if (rq->ex)
        es_exchange_preference_applied(rq->ex, rep->status, applied, sizeof applied);
    add(r, "Preference-Applied", applied);
    add(r, MHD_HTTP_HEADER_LOCATION, rep->location);
    if (rep->status == 401)
        add(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    add(r, "X-Request-Id", rq->id);
    add_cors(r, rq, conn, preflight, rep->allow, vary, sizeof vary);
    add(r, MHD_HTTP_HEADER_VARY, vary);
    if (rq->close || atomic_load(&srv->app->stopping))
        add(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(conn, rep->status, r);
    MHD_destroy_response(r);
    rq->status = rep->status;
    rq->bytes = is_method(rq->method, "HEAD") ? 0 : rep->len;
    rq->answered = true;
    free(rep->location); /* copied into the response */
    *rep = (es_reply){0}; /* the body now belongs to the MHD response */
    return ok;
}

/* Answer with the problem of a failed es_err right away. */
static enum MHD_Result send_error(es_server *srv, request *rq, struct MHD_Connection *conn, const es_err *err)
{
    es_reply rep = {0};
    es_reply_problem(&rep, es_problem_kind_of(err->code), err->message, err->param, rq->path, rq->id);
    return send_reply(srv, rq, conn, &rep, false);
}

/* Answer with a problem of the given kind right away. */
static enum MHD_Result send_problem(es_server *srv, request *rq, struct MHD_Connection *conn, es_problem_kind kind,
                                    const char *detail)
{
    es_reply rep = {0};
    es_reply_problem(&rep, kind, detail, NULL, rq->path, rq->id);
    if (kind == ES_PROB_METHOD_NOT_ALLOWED)
        rep.allow = ALLOW;
    return send_reply(srv, rq, conn, &rep, false);
}

/* Has the client of a suspended connection gone (reset it)? MHD does not
 * watch suspended sockets, so look without reading. The end of the client's
 * stream alone (POLLRDHUP) is not departure: a client may send its request
 * and shut down its sending side (shutdown(SHUT_WR), as some clients and
 * proxies do) while it waits for the answer, and the network cannot tell that
 * from a client that closed its socket. Such a job runs to its end; a client
 * that really left is seen when the answer is written (a reset). */
static bool client_gone(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = 0};
    return poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLHUP | POLLERR));
}

/* The exchange's callbacks (exchange.h) on a request. */
static void io_suspend(void *arg)
{
    request *rq = arg;
    rq->suspended = true;
    MHD_suspend_connection(rq->mhd);
}

static void io_resume(void *arg) { MHD_resume_connection(((request *)arg)->mhd); }

static bool io_client_gone(void *arg) { return client_gone(((request *)arg)->mhd); }

static bool io_send(void *arg, es_reply *rep)
{
    request *rq = arg;
    return send_reply(rq->srv, rq, rq->mhd, rep, false) == MHD_YES;
}

/* What the exchange's step means for MHD. */
static enum MHD_Result stepped(request *rq, es_exchange_step step)
{
    rq->suspended = step == ES_EXCHANGE_SUSPENDED;
    if (step == ES_EXCHANGE_GONE)
        rq->status = CLIENT_GONE;
    return step == ES_EXCHANGE_SENT || step == ES_EXCHANGE_SUSPENDED ? MHD_YES : MHD_NO;
}

/* The final call of a read (GET, HEAD), an OPTIONS or a job's DELETE: the
 * query and the headers the service reads go to the exchange; OPTIONS on a
 * known path is answered here (its Allow and CORS are HTTP's). */
static enum MHD_Result answer(es_server *srv, request *rq, struct MHD_Connection *conn)
{
    const es_route *route = es_exchange_route(rq->ex);
    if (is_method(rq->method, "OPTIONS") && route) {
        es_reply rep = {.status = 204, .body = (char *)"", .body_static = true,
                        .allow = es_route_writable(route)                   ? ALLOW_WRITE
                                 : strcmp(route->pattern, JOB_ROUTE) == 0 ? ALLOW_JOB
                                                                          : ALLOW};
        return send_reply(srv, rq, conn, &rep, header(conn, "Access-Control-Request-Method") != NULL);
    }
    es_query q;
    es_query_init(&q);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_arg, &q);
    rq->query_text = es_query_text(&q);
    es_exchange_input in = {.if_none_match = header(conn, MHD_HTTP_HEADER_IF_NONE_MATCH),
                            .accept = header(conn, MHD_HTTP_HEADER_ACCEPT),
                            .accept_encoding = header(conn, MHD_HTTP_HEADER_ACCEPT_ENCODING),
                            .prefer = header(conn, "Prefer")};
    return stepped(rq, es_exchange_answer(rq->ex, &in, &q));
}

/* A Content-Encoding on a write: the body would be stored and parsed as sent,
 * and no coding is decoded (an upload is sent as the file itself), so any
 * coding but identity is 415 before the body is read. */
static int check_content_coding(struct MHD_Connection *conn, es_err *err)
{
    const char *coding = header(conn, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (!coding || !*coding || strcasecmp(coding, "identity") == 0)
        return 0;
    return es_fail(err, ES_E_MEDIA_TYPE, "Content-Encoding",
                   "Content-Encoding '%.60s' is not decoded: send the file itself (no Content-Encoding)", coding);
}

/* The final call of a write: the exchange finishes it (a PUT, or a DELETE
 * that locks and reads uploads.dir, on the compute pool). */
static enum MHD_Result answer_write(request *rq)
{
    es_upload *u = rq->upload;
    rq->upload = NULL;
    return stepped(rq, es_exchange_write(rq->ex, u));
}

/* The first call of a write: every check that needs no body (es_upload_begin),
 * a problem at once if one fails. */
static enum MHD_Result begin_write(es_server *srv, request *rq, struct MHD_Connection *conn)
{
    es_err coding_err = {0};
    if (is_method(rq->method, "PUT") && check_content_coding(conn, &coding_err) < 0)
        return send_error(srv, rq, conn, &coding_err);
    es_query q;
    es_query_init(&q);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_arg, &q);
    rq->query_text = es_query_text(&q);
    es_catalogue *reg = es_app_catalogue(srv->app);
    es_err err = {0};
    bool proxied = header(conn, "X-Forwarded-For") || header(conn, "Forwarded") || header(conn, "X-Real-IP");
    int rc = es_upload_begin(srv->app, reg, rq->method, rq->path, &q, header(conn, MHD_HTTP_HEADER_AUTHORIZATION),
                             proxied, header(conn, MHD_HTTP_HEADER_CONTENT_TYPE), header(conn, MHD_HTTP_HEADER_CONTENT_LENGTH),
                             &rq->upload, &err);
    es_catalogue_free(reg);
    es_query_free(&q);
    return rc == 0 ? MHD_YES : send_error(srv, rq, conn, &err);
}

/* Answer a too slow body with 408 problem+json written to the socket itself
 * (MHD queues no reply before the body has ended), log it and let MHD close
 * the connection. The client may miss the answer if it is still sending. */
static enum MHD_Result close_slow_body(es_server *srv, request *rq, struct MHD_Connection *conn)
{
    double elapsed = es_now() - rq->t0;
    es_catalogue *cat = es_app_catalogue(srv->app);
    const es_server_conf *s = &cat->server;
    char detail[200];
    snprintf(detail, sizeof detail, "%zu bytes of the body in %.1f s: less than server.body_min_rate = %u bytes/s "
             "after server.body_grace_s = %u s", rq->body_bytes, elapsed, s->body_min_rate, s->body_grace_s);
    es_catalogue_free(cat);
    es_warn("closing connection from %s: %s %s: %s", rq->client, rq->method, rq->path, detail);
    size_t len;
    char *raw = es_problem_raw(ES_PROB_BODY_TIMEOUT, detail, &len);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci && !rq->answered) {
        ssize_t sent = send(ci->connect_fd, raw, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        rq->bytes = sent > 0 ? (size_t)sent : 0;
        shutdown(ci->connect_fd, SHUT_WR);
    }
    free(raw);
    rq->status = es_problem_status(ES_PROB_BODY_TIMEOUT);
    rq->answered = true;
    atomic_fetch_add(&srv->app->metrics.connections_timed_out, 1);
    return MHD_NO;
}

/* server.connection_timeout_s as configured now (a reload may change it): MHD
 * took the starting value for every connection; a changed one is set per
 * connection when its request starts. */
static void live_timeout(es_server *srv, const request *rq, struct MHD_Connection *conn)
{
    unsigned now = es_exchange_catalogue(rq->ex)->server.connection_timeout_s; /* held by the request */
    if (now != srv->app->server.connection_timeout_s)
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, now);
}

/* A write from another origin's web page: ES_E_CROSS_ORIGIN unless its
 * origin may write or it has the token (es_check_write_origin). */
static int refuse_cross_origin(es_server *srv, struct MHD_Connection *conn, es_err *err)
{
    es_catalogue *reg = es_app_catalogue(srv->app); /* the origins as configured now */
    int rc = es_check_write_origin(srv->app, reg, header(conn, "Origin"), header(conn, MHD_HTTP_HEADER_HOST),
                                   header(conn, MHD_HTTP_HEADER_AUTHORIZATION), err);
    es_catalogue_free(reg);
    return rc;
}

/* MHD access handler: state on the first call (refusing wrong methods and
 * bodies at once), the answer on the final call, the job's reply after a
 * resume. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    es_server *srv = cls;
    request *rq = *con_cls;
    if (!rq || is_raw_mark(rq)) {
        const void *raw = rq;
        rq = es_calloc(1, sizeof *rq);
        snprintf(rq->method, sizeof rq->method, "%s", method);
        rq->path = es_strdup(url);
        rq->t0 = es_now();
        es_forwarded_prefix(header(conn, "X-Forwarded-Prefix"), rq->prefix);
        *con_cls = rq;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        rq->conn = ci ? ci->socket_context : NULL;
        /* a client's own X-Request-Id could collide with or forge another's: only a trusted proxy's is kept */
        es_request_id(es_conn_trusted(rq->conn) ? header(conn, "X-Request-Id") : NULL, rq->id);
        es_conn_request(srv->conns, rq->conn, true);
        client_of(rq, header(conn, "X-Forwarded-For"), header(conn, MHD_HTTP_HEADER_AUTHORIZATION));
        es_metrics_in_flight(&srv->app->metrics, 1);
        rq->srv = srv;
        rq->mhd = conn;
        rq->ex = es_exchange_new(srv->exchanges, &(es_exchange_head){.method = method, .path = url,
                                 .request_id = rq->id, .client = rq->client, .owner = rq->owner,
                                 .prefix = rq->prefix, .t0 = rq->t0, .conn = rq});
        live_timeout(srv, rq, conn);
        const es_route *route = es_exchange_route(rq->ex);
        rq->route = route ? route->pattern : NULL;
        const char *why;
        es_err err = {0};
        es_problem_kind bad = head_problem(conn, raw, version, &why);
        if (bad != ES_PROB_COUNT) {
            rq->close = true; /* what follows an ambiguous head is never read as a request */
            return send_problem(srv, rq, conn, bad, why);
        }
        if (!is_method(method, "GET") && !is_method(method, "HEAD") && !is_method(method, "OPTIONS") &&
            refuse_cross_origin(srv, conn, &err) < 0)
            return send_error(srv, rq, conn, &err);
        bool known = route != NULL, writable = known && es_route_writable(route);
        if ((is_method(method, "PUT") || is_method(method, "DELETE")) && writable)
            return begin_write(srv, rq, conn);
        if (is_method(method, "DELETE") && known && strcmp(route->pattern, JOB_ROUTE) == 0 && !body_announced(conn))
            return MHD_YES; /* cancelling a job: answered on the final call */
        if (!is_method(method, "GET") && !is_method(method, "HEAD") && !is_method(method, "OPTIONS"))
            return send_problem(srv, rq, conn, known ? ES_PROB_METHOD_NOT_ALLOWED : ES_PROB_NOT_FOUND,
                                known ? "use GET, HEAD or OPTIONS here (PUT and DELETE only on "
                                        "/v1/models/{model}/matrices/{matrix} and its /labels)"
                                      : "no such path");
        if (body_announced(conn))
            return send_problem(srv, rq, conn, ES_PROB_BODY_NOT_ACCEPTED, "requests must not carry a body");
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t len = *upload_data_size;
        *upload_data_size = 0; /* consumed into the upload, or discarded */
        rq->body_bytes += len;
        if (es_body_too_slow(srv->app, es_now() - rq->t0, rq->body_bytes))
            return close_slow_body(srv, rq, conn);
        if (rq->answered)
            return MHD_YES;
        if (rq->body_failed) /* discard the rest, but not without end */
            return (rq->discarded += len) > DISCARD_LIMIT ? MHD_NO : MHD_YES;
        if (rq->upload && es_upload_write(rq->upload, upload_data, len, &rq->body_err) == 0)
            return MHD_YES;
        if (rq->upload) {
            es_upload_free(rq->upload); /* its temporary file vanishes with it */
            rq->upload = NULL;
            rq->body_failed = true;
            return MHD_YES;
        }
        return send_problem(srv, rq, conn, ES_PROB_BODY_NOT_ACCEPTED, "requests must not carry a body");
    }
    if (rq->suspended) /* resumed: the exchange's outcome */
        return stepped(rq, es_exchange_resumed(rq->ex));
    if (rq->answered)
        return MHD_YES;
    if (rq->body_failed)
        return send_error(srv, rq, conn, &rq->body_err);
    return rq->upload ? answer_write(rq) : answer(srv, rq, conn);
}

/* Access log line and metrics, then free the request state (and the job of a
 * resumed connection closed before its reply could be queued). */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    es_server *srv = cls;
    request *rq = *con_cls;
    if (!rq || is_raw_mark(rq))
        return;
    if (rq->ex && es_exchange_unanswered(rq->ex)) /* closed before its reply was queued */
        rq->status = CLIENT_GONE;
    double seconds = es_now() - rq->t0;
    if (srv->app->access_log)
        es_access_log(&(es_access){rq->method, rq->path, rq->query_text ? rq->query_text : "", rq->status, rq->bytes,
                                   seconds, rq->id, rq->client, es_conn_address(rq->conn),
                                   toe != MHD_REQUEST_TERMINATED_COMPLETED_OK});
    es_metrics_observe(&srv->app->metrics, rq->route, rq->status, seconds, rq->bytes);
    es_metrics_observe_route(&srv->app->metrics, rq->route, rq->method, rq->status, seconds);
    es_metrics_in_flight(&srv->app->metrics, -1);
    es_exchange_end(rq->ex);
    es_upload_free(rq->upload); /* a write whose client went away: nothing remains */
    es_conn_request(srv->conns, rq->conn, false);
    free(rq->path);
    free(rq->query_text);
    free(rq);
    *con_cls = NULL;
}

/* libmicrohttpd's error log as one es_warn line. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    es_warn("libmicrohttpd: %s", line);
}

/* A reload changed the admission's live settings (app->admission_changed). */
static void reconfigure_admission(void *conns, const es_server_conf *conf) { es_conns_configure(conns, conf); }

/* See transport.h. ES_E_IO naming "listen" when host:port cannot be resolved or bound. */
int es_server_start(es_app *app, const char *host, unsigned port, es_server **out, es_err *err)
{
    app->server.connection_limit = es_fit_descriptors(app->server.connection_limit);
    unsigned bound = port;
    int fd = es_listen_open(host, port, &bound, err);
    if (fd < 0)
        return -1;
    es_server *srv = es_calloc(1, sizeof *srv);
    srv->app = app;
    srv->port = bound;
    srv->conns = es_conns_new(&app->server, &app->metrics);
    app->admission_arg = srv->conns;
    app->admission_changed = reconfigure_admission;
    /* poll, not epoll: MHD 0.9.75's epoll loop blocks again in epoll_wait when
     * one call returned exactly its 128 events, leaving those connections
     * unserved until another event or a timeout (the stall at
     * connection_limit 256 with 2 threads). MHD's own connection limit is
     * set above ours so that it never refuses what the acceptor admitted. */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    srv->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)app->server.threads, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)app->server.connection_timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, 2 * app->server.connection_limit + app->server.threads,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY, MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        srv, MHD_OPTION_NOTIFY_CONNECTION, es_conns_notify, srv->conns, MHD_OPTION_END);
    if (!srv->daemon) {
        close(fd);
        es_conns_free(srv->conns);
        free(srv);
        return es_fail(err, ES_E_IO, "listen", "cannot start the HTTP threads for %s:%u", host, port);
    }
    srv->exchanges = es_exchanges_new(app, &(es_exchange_io){io_suspend, io_resume, io_client_gone, io_send},
                                      WATCH_MS);
    if (!srv->exchanges) {
        close(fd);
        MHD_stop_daemon(srv->daemon);
        es_conns_free(srv->conns);
        free(srv);
        return es_fail(err, ES_E_IO, "listen", "cannot start the job watcher thread");
    }
    if (es_conns_run(srv->conns, fd, srv->daemon, err) < 0) {
        close(fd);
        es_exchanges_free(srv->exchanges);
        MHD_stop_daemon(srv->daemon);
        es_conns_free(srv->conns);
        free(srv);
        return -1;
    }
    *out = srv;
    return 0;
}

/* The bound port (the real one when 0 was asked). Never fails. */
unsigned es_server_port(const es_server *s) { return s->port; }

/* Wait until no request is in flight, or until the deadline. */
static void wait_idle(const es_server *s, double deadline)
{
    while (es_metrics_in_flight_now(&s->app->metrics) > 0 && es_now() < deadline)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
}

/* Stop accepting; let in-flight requests finish, their queued and running
 * jobs included (up to grace_s); then abandon what is left: the watcher
 * answers suspended requests 503, computations stop at their next checkpoint
 * (es_checkpoint), queued jobs are cancelled. If a computation is still inside
 * a library call after FLUSH_SECONDS nothing is freed (false: the caller
 * exits); else the last replies go out and everything stops. */
bool es_server_stop(es_server *s, double grace_s)
{
    es_conns_stop_accepting(s->conns);
    double deadline = es_now() + grace_s;
    wait_idle(s, deadline);
    /* jobs have no connection in flight: they too get the grace period to finish */
    while (es_jobs_live(s->app->jobs) > 0 && es_now() < deadline)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    es_pool_abandon(s->app->pool);
    if (s->app->pool && !es_pool_stop_within(s->app->pool, FLUSH_SECONDS)) {
        es_pool_stats ps;
        es_pool_get_stats(s->app->pool, &ps);
        es_warn("shutdown: %zu computations still running after the %.0f s grace period: abandoned", ps.running,
                grace_s);
        wait_idle(s, es_now() + FLUSH_SECONDS);
        return false;
    }
    wait_idle(s, es_now() + FLUSH_SECONDS);
    es_exchanges_free(s->exchanges);
    MHD_stop_daemon(s->daemon);
    s->app->admission_changed = NULL;
    es_conns_free(s->conns);
    free(s);
    return true;
}
