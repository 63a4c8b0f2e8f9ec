/* libmicrohttpd glue: each request is routed (routes.c) on the final access
 * handler call, its reply becomes an MHD response with the caching, content
 * coding, CORS and request-id headers, and one access-log line is written
 * when it completes.
 *
 * Threading: the HTTP threads only parse, validate and answer what is cheap
 * (see api.h). A request the gate defers becomes a job: its connection is
 * suspended (MHD_suspend_connection), the compute pool runs the handler again
 * and stores the reply in the job, then resumes the connection as its very
 * last action; the access handler, called again by MHD, sends the reply. While
 * suspended a connection cannot time out or close (MHD does not watch it), so
 * the job outlives nothing it points to; a job whose client has already gone
 * (reset the connection: see client_gone) when a compute thread picks it up
 * is dropped unrun (status 499 in the log).
 * A full job queue is a 503 with Retry-After. Single flight: the request that
 * claims a reply (results.c) queues the one job that computes it; identical
 * requests meanwhile wait for it as jobs that are never queued (a suspended
 * connection each, bounded by the connection limits, under the same deadline
 * and departure checks) and are resumed with a copy when it is settled, with
 * its error when it failed for a reason that holds for them too, or run again
 * from the start when it was abandoned.
 *
 * Methods: GET and HEAD (MHD sends no body for HEAD); OPTIONS answers CORS
 * preflights; PUT and DELETE on /v1/models/{model}/matrices/{matrix} are
 * writes (uploads.c): checked on the first call, before the body is read
 * (access, names, read-only models, type, announced length), the body streamed
 * chunk by chunk into the write's temporary file (a body slower than
 * server.body_min_rate after server.body_grace_s gets a 408 and the connection
 * is closed: see body_too_slow), and the PUT finished as a
 * job of the compute pool (without a deadline: a write either happens or is
 * refused, never abandoned half-way). Anything else is 405 with Allow. Other
 * requests' bodies are refused with 413 on the first call, before they are
 * read. Every request holds the catalogue it started with (es_app_catalogue)
 * until it ends. */
#include "http/acceptor.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
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
/* Retry-After (seconds) of a 503 for a full job queue or a shutdown. */
#define BUSY_RETRY_AFTER "1"
/* Access-log status of a job dropped because its client had gone (nginx's). */
#define CLIENT_GONE 499
/* Bytes of a failed upload's body read and dropped before its 413 (MHD sends
 * no reply before the body has ended); beyond, the connection is closed. */
#define DISCARD_LIMIT ((size_t)64 << 20)
/* After the pool has stopped at shutdown: time for the last replies to go out. */
#define FLUSH_SECONDS 2.0
/* Descriptors kept for everything but connections (files, pipes, cache). */
#define FD_RESERVE 64
/* Period of the job watcher (deadlines, departed clients, shutdown). */
#define WATCH_TICK_NS (100 * 1000 * 1000)

typedef struct job job;

struct es_server {
    es_app *app;
    struct MHD_Daemon *daemon;
    es_conns *conns;
    unsigned port;
    pthread_mutex_t jobs_lock;  /* guards jobs and every job's list links */
    job *jobs;                  /* deferred requests not yet freed */
    pthread_t watcher;
    atomic_bool watcher_stop;
};

/* Per-request state (MHD's *con_cls), freed when the request completes. */
typedef struct request {
    char method[16];
    char *path;
    char *query_text;
    char id[72];
    char prefix[ES_PREFIX_MAX]; /* X-Forwarded-Prefix: put in front of the paths problems name */
    double t0;
    unsigned status;
    size_t bytes;
    bool answered;
    job *job;          /* handed to the compute pool; done once the connection is resumed */
    es_conn *conn;     /* the connection's admission record (conns.c) */
    char client[ES_CLIENT_MAX]; /* address, or a trusted proxy's X-Forwarded-For */
    char owner[ES_OWNER_MAX];   /* whose jobs it sees and makes (es_job_owner) */
    bool close;        /* answer with Connection: close */
    const char *route; /* the matched route's pattern (metrics), NULL if none */
    es_upload *upload; /* a write (PUT, DELETE) until it is finished or handed to a job */
    bool body_failed;  /* the upload failed mid-body (too large, I/O): the rest is discarded */
    es_err body_err;   /* why, answered once the body has ended (MHD takes no reply before) */
    size_t discarded;
    size_t body_bytes; /* of the body so far, kept or discarded (server.body_min_rate) */
    bool prefer_async; /* Prefer: respond-async (for Preference-Applied) */
    double prefer_wait; /* Prefer: wait=N, < 0 when not given */
    bool analysis;     /* an analysis, the requests those preferences apply to */
} request;

/* A deferred request: everything the handler needs, owned, so that the compute
 * thread touches no MHD state but MHD_resume_connection. Two references: the
 * HTTP side (the request) and the compute side (the pool task). Whoever
 * resumes the connection first decides the answer: the compute thread with
 * cx.reply, or the watcher (deadline passed, client gone, shutdown) with a
 * problem, after which the computation is abandoned at its next safe point
 * (es_checkpoint: the pool asks job_dropped) and its reply discarded. */
struct job {
    es_server *srv;
    struct MHD_Connection *conn;
    const es_route *route;
    char method[16];
    char *path, *if_none_match, *accept;
    char id[72];
    es_query query;
    es_upload *upload; /* a PUT to finish instead of a route to run */
    es_result *pending; /* a waiter: the held reply another job computes (nothing to run) */
    es_ctx cx;         /* cx.reply is the job's outcome; cx.reg the catalogue it holds, cx.claim
                        * the reply it computes */
    double deadline;   /* es_now() after which it is abandoned; 0: never */
    double sync_deadline; /* es_now() after which the watcher turns it into a job (202); 0: never */
    es_ajob *api;      /* the request's record (progress; a job once registered); NULL for writes, waiters
                        * (which run no route) */
    atomic_bool async; /* a job: no deadline, no client; its reply goes to api */
    bool accepted;     /* resumed by the watcher with a 202 (it became a job) */
    bool computed;     /* its computation has ended: too late to become a job */
    atomic_bool abandon;
    atomic_bool client_left; /* answered because its client left: abandoned unless others wait for its reply */
    pthread_mutex_t lock; /* guards refs, resumed, outcome */
    int refs;
    bool resumed;
    es_problem_kind outcome; /* with resumed by the watcher: the answer's kind */
    bool gone;         /* resumed by the watcher because the client left */
    job *prev, *next;  /* srv->jobs */
};

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

/* Header statistics for the framing checks. */
typedef struct head_scan {
    size_t n_length, n_host;
    const char *length;  /* the first Content-Length */
    bool lengths_differ, chunked;
} head_scan;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    head_scan *h = cls;
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
    head_scan h = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, scan_header, &h);
    *detail = raw == &raw_nul ? "%00 (a NUL byte) in the path or a parameter"
            : h.lengths_differ ? "Content-Length given twice with different values"
            : h.n_length > 1 ? "Content-Length given more than once"
            : h.n_length && h.chunked ? "both Content-Length and Transfer-Encoding"
            : h.length && (!*h.length || strspn(h.length, "0123456789") != strlen(h.length)) ? "a malformed Content-Length"
            : h.n_host > 1 ? "Host given more than once"
            : !h.n_host && strcmp(version, MHD_HTTP_VERSION_1_1) == 0 ? "an HTTP/1.1 request without Host"
            : NULL;
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

/* Turn a reply into a problem document of the given kind (the body is replaced). */
static void problem_reply(es_reply *rep, es_problem_kind kind, const char *detail, const char *param,
                          const char *instance, const char *request_id)
{
    json_t *p = es_problem_new(kind, detail, param, instance, request_id);
    es_err ignored;
    es_reply_release(rep);
    *rep = (es_reply){.status = es_problem_status(kind), .content_type = "application/problem+json",
                      .cache_control = "no-store"};
    if (kind == ES_PROB_BUSY)
        rep->retry_after = BUSY_RETRY_AFTER;
    if (es_json_body(p, 0, &rep->body, &rep->len, &ignored) < 0) {
        rep->body = (char *)"{}";
        rep->len = 2;
        rep->body_static = true;
    }
    json_decref(p);
}

/* Dispatch a routed request; a failure becomes its problem reply (5xx logged as
 * errors, except the stop of a job its client cancelled: asked for, so info).
 * api: the request's job record (NULL on an HTTP thread). */
static void run_route(const es_route *route, es_ctx *cx, const char *method, es_ajob *api)
{
    es_err err = {0};
    if (es_route_dispatch(route, cx, &err) == 0)
        return;
    if (err.code == ES_E_CANCELLED && api && es_ajob_cancelled(api))
        es_info("%s %s: stopped, its job was cancelled (DELETE /v1/jobs/{id})", method, cx->path);
    else if (es_problem_status(es_problem_kind_of(err.code)) >= 500)
        es_error("%s %s: %s error: %s", method, cx->path, es_errcode_name(err.code), err.message);
    problem_reply(&cx->reply, es_problem_kind_of(err.code), err.message, err.param, cx->path, cx->request_id);
}

/* 304 when the client has the ETag of a 200 reply (es_route_dispatch has set
 * the body-derived ones). */
static void finish_etag(es_reply *rep, const char *if_none_match)
{
    if (rep->status == 200 && rep->etag[0] && es_etag_matches(if_none_match, rep->etag))
        rep->status = 304;
}

/* Send the gzip variant instead of the body when the client accepts it and
 * there is one (shared bytes: es_shared_gzip, made on first demand; else
 * compressed here unless the reply brought one); true if so. The unsent
 * variant of an unshared reply is freed. */
static bool choose_coding(es_reply *rep, const char *accept_encoding, es_pool *pool)
{
    bool gzipped = false;
    bool wanted = rep->status == 200 && es_accepts_gzip(accept_encoding);
    if (rep->shared) { /* both variants stay in the shared bytes */
        const char *gz;
        size_t gz_len;
        gzipped = wanted && es_shared_gzip(rep->shared, pool, &gz, &gz_len);
        if (gzipped) {
            rep->body = (char *)gz;
            rep->len = gz_len;
        }
        return gzipped;
    }
    if (wanted) {
        es_reply_gzip(rep);
        gzipped = rep->gz != NULL;
    }
    if (gzipped) {
        if (!rep->body_static)
            free(rep->body);
        rep->body = rep->gz;
        rep->len = rep->gz_len;
        rep->body_static = false;
    } else {
        free(rep->gz);
    }
    rep->gz = NULL;
    rep->gz_len = 0;
    return gzipped;
}

/* Add a header unless value is NULL or "". */
static void add(struct MHD_Response *r, const char *name, const char *value)
{
    if (value && *value)
        MHD_add_response_header(r, name, value);
}

/* The preferences (RFC 7240) this reply honoured, for Preference-Applied: the
 * 202 of an analysis asked to respond-async, else the wait=N an analysis used
 * as its synchronous window (its 200, 304, or 202 after the window); "" for
 * none. */
static void preference_applied(const request *rq, unsigned status, char *out, size_t size)
{
    out[0] = '\0';
    if (!rq->analysis)
        return;
    if (status == 202 && rq->prefer_async)
        snprintf(out, size, "respond-async");
    else if (rq->prefer_wait >= 0 && (status == 200 || status == 202 || status == 304))
        snprintf(out, size, "wait=%g", rq->prefer_wait);
}

/* CORS headers for an allowed Origin; preflight answers add the path's allowed
 * methods (its Allow header: PUT and DELETE where writes go) for an origin
 * that may write (es_cors_may_write), the reading ones for any other.
 * With a restricted allow-list every reply varies by Origin (a shared cache
 * must not give one origin's reply to another), allowed or not. */
static void add_cors(struct MHD_Response *r, es_app *app, struct MHD_Connection *conn, bool preflight,
                     const char *methods, char *vary, size_t vary_size)
{
    es_registry *cat = es_app_catalogue(app); /* the origins as configured now (a reload changes them) */
    char *const *origins = cat->server.cors_origins;
    if (es_cors_varies(origins))
        snprintf(vary + strlen(vary), vary_size - strlen(vary), "%sOrigin", *vary ? ", " : "");
    const char *allow = es_cors_allow(origins, header(conn, "Origin"));
    if (allow && strcmp(allow, "*") != 0)
        allow = header(conn, "Origin"); /* the request's own text: outlives cat */
    if (preflight && !es_cors_may_write(origins, header(conn, "Origin"), header(conn, MHD_HTTP_HEADER_HOST)))
        methods = ALLOW; /* another origin's page may read ("*"), never write: its PUT/DELETE preflight fails */
    es_registry_free(cat);
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
    finish_etag(rep, header(conn, MHD_HTTP_HEADER_IF_NONE_MATCH));
    if (rep->status == 304 || rep->status == 204) {
        es_reply bodies = {.body = rep->body, .body_static = rep->body_static, .gz = rep->gz, .shared = rep->shared};
        es_reply_release(&bodies);
        rep->body = (char *)"";
        rep->len = 0;
        rep->body_static = true;
        rep->gz = NULL;
        rep->gz_len = 0;
        rep->shared = NULL;
    }
    bool gzipped = choose_coding(rep, header(conn, MHD_HTTP_HEADER_ACCEPT_ENCODING), srv->app->pool);
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
    preference_applied(rq, rep->status, applied, sizeof applied);
    add(r, "Preference-Applied", applied);
    add(r, MHD_HTTP_HEADER_LOCATION, rep->location);
    if (rep->status == 401)
        add(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    add(r, "X-Request-Id", rq->id);
    add_cors(r, srv->app, conn, preflight, rep->allow, vary, sizeof vary);
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
    problem_reply(&rep, es_problem_kind_of(err->code), err->message, err->param, rq->path, rq->id);
    return send_reply(srv, rq, conn, &rep, false);
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

/* Drop one reference; the last frees the job (and unlinks it). */
static void job_unref(job *jb)
{
    pthread_mutex_lock(&jb->lock);
    bool last = --jb->refs == 0;
    pthread_mutex_unlock(&jb->lock);
    if (!last)
        return;
    es_server *srv = jb->srv;
    pthread_mutex_lock(&srv->jobs_lock);
    if (jb->prev)
        jb->prev->next = jb->next;
    else
        srv->jobs = jb->next;
    if (jb->next)
        jb->next->prev = jb->prev;
    pthread_mutex_unlock(&srv->jobs_lock);
    pthread_mutex_destroy(&jb->lock);
    if (jb->pending) /* answered before the reply it waited for was settled */
        es_results_release(srv->app->results, jb->pending);
    es_parsed_free(jb->cx.parsed);
    es_registry_free(jb->cx.reg);
    es_upload_free(jb->upload);
    es_ajob_release(jb->api);
    es_query_free(&jb->query);
    es_reply_release(&jb->cx.reply);
    free(jb->path);
    free(jb->if_none_match);
    free(jb->accept);
    free(jb);
}

/* Resume the job's connection with its own reply unless the watcher already
 * answered it. Never fails. */
static void job_resume(job *jb)
{
    pthread_mutex_lock(&jb->lock);
    bool first = !jb->resumed;
    jb->resumed = true;
    if (first) /* under the lock: the watcher may be looking at jb->conn */
        MHD_resume_connection(jb->conn);
    pthread_mutex_unlock(&jb->lock);
}

/* The pool task's es_task_dropped_fn: is the job's work wanted no more
 * (answered by the watcher, past its deadline, or its client left and no
 * identical request waits for the reply it computes)? The shutdown is the
 * pool's to say (es_pool_abandon). Only the job's computation asks about its
 * claim. */
static bool job_dropped(void *arg)
{
    job *jb = arg;
    es_result *claim = jb->cx.claim;
    if (atomic_load(&jb->async)) /* a job: only a cancellation (unless another client's request waits for
                                    * its reply: then it computes on for them) or the shutdown stops it */
        return es_ajob_cancelled(jb->api) && !(claim && es_results_waited(jb->srv->app->results, claim));
    return atomic_load(&jb->abandon) || (jb->deadline > 0 && es_now() > jb->deadline) ||
           (atomic_load(&jb->client_left) && !(claim && es_results_waited(jb->srv->app->results, claim)));
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

/* Carry out a write; a failure becomes its problem reply (5xx logged). */
static void run_upload(es_app *app, es_upload *u, es_reply *rep, const char *method, const char *path,
                       const char *request_id)
{
    es_err err = {0};
    if (es_upload_finish(app, u, rep, &err) == 0)
        return;
    if (es_problem_status(es_problem_kind_of(err.code)) >= 500)
        es_error("%s %s: %s error: %s", method, path, es_errcode_name(err.code), err.message);
    problem_reply(rep, es_problem_kind_of(err.code), err.message, err.param, path, request_id);
}

/* Release the claim of a job that did not run its route (cancelled, abandoned,
 * refused): its waiters then run their requests again. Never fails. */
static void give_up_claim(job *jb)
{
    if (jb->cx.claim)
        es_results_settle(jb->srv->app->results, jb->cx.claim, NULL, NULL);
    jb->cx.claim = NULL;
}

/* Pool task: run the handler or finish the upload (or refuse it when the pool
 * is stopping), then resume the connection unless the watcher already
 * answered it; a job keeps its reply in its record. */
static void run_job(void *arg, bool cancelled)
{
    job *jb = arg;
    if (cancelled)
        problem_reply(&jb->cx.reply, ES_PROB_BUSY, "the server is shutting down", NULL, jb->path, jb->id);
    else if (jb->upload)
        run_upload(jb->cx.app, jb->upload, &jb->cx.reply, jb->method, jb->path, jb->id);
    else if (es_checkpoint(&(es_err){0}) == 0) { /* not dropped, nor abandoned, while it waited */
        es_pool_track(es_ajob_progress(jb->api));
        es_ajob_start(jb->api);
        run_route(jb->route, &jb->cx, jb->method, jb->api);
        es_pool_track(NULL);
    }
    pthread_mutex_lock(&jb->lock); /* from here the watcher no longer turns it into a job */
    jb->computed = true;
    bool async = atomic_load(&jb->async);
    pthread_mutex_unlock(&jb->lock);
    if (async) {
        if (!jb->cx.reply.status) /* dropped before it ran */
            problem_reply(&jb->cx.reply, ES_PROB_BUSY, "the server is shutting down", NULL, jb->path, jb->id);
        es_ajob_finish(jb->api, &jb->cx.reply);
    }
    give_up_claim(jb);
    job_resume(jb);
    job_unref(jb);
}

/* A waiter's reply is settled: resume its connection (answer_job takes the
 * reply) unless the watcher answered it, and drop the results' reference. */
static void wake_waiter(void *arg)
{
    job *jb = arg;
    job_resume(jb);
    job_unref(jb);
}

/* A computation past its synchronous window (limits.sync_seconds, or the
 * client's Prefer: wait) becomes a job: registered, it goes on without its
 * client, who gets 202 and the job's Location (answer_job); if the client
 * holds too many jobs it stays a synchronous request (its deadline, 504).
 * Called by the watcher with jb's lock held. */
static void become_job(es_server *srv, job *jb)
{
    es_err err;
    jb->sync_deadline = 0; /* decided once */
    if (jb->computed || es_jobs_add(srv->app->jobs, jb->api, &jb->cx.reg->limits, NULL, &err) < 0)
        return;
    atomic_store(&jb->async, true);
    jb->accepted = true;
    jb->resumed = true;
    MHD_resume_connection(jb->conn);
}

/* The watcher thread: every tick, answer suspended requests whose deadline
 * passed (504), whose client left (closed) or, once the server abandons work
 * at shutdown, all of them (503); their computations stop at the next
 * checkpoint, except one whose client left while identical requests still
 * wait for its reply (job_dropped). A waiter answered here lets go of the
 * reply it waited for. */
static void *watch_jobs(void *arg)
{
    es_server *srv = arg;
    while (!atomic_load(&srv->watcher_stop)) {
        nanosleep(&(struct timespec){0, WATCH_TICK_NS}, NULL);
        double now = es_now();
        bool abandon_all = es_pool_abandoned(srv->app->pool);
        pthread_mutex_lock(&srv->jobs_lock);
        for (job *jb = srv->jobs; jb; jb = jb->next) {
            /* under the job's lock the compute thread cannot resume the
             * connection, so jb->conn stays valid while it is looked at */
            pthread_mutex_lock(&jb->lock);
            bool late = false, gone = false;
            if (!jb->resumed && !abandon_all && jb->sync_deadline > 0 && now > jb->sync_deadline)
                become_job(srv, jb);
            if (!jb->resumed) {
                late = jb->deadline > 0 && now > jb->deadline;
                gone = !late && !abandon_all && client_gone(jb->conn);
            }
            bool answer = !jb->resumed && (late || gone || abandon_all);
            if (answer) {
                jb->resumed = true;
                jb->outcome = late ? ES_PROB_TIMEOUT : ES_PROB_BUSY;
                jb->gone = gone;
                atomic_store(gone ? &jb->client_left : &jb->abandon, true);
                if (jb->pending) /* a waiter no more: its computation may stop unless others wait */
                    es_results_release(srv->app->results, jb->pending);
                jb->pending = NULL;
            }
            pthread_mutex_unlock(&jb->lock);
            if (answer)
                MHD_resume_connection(jb->conn);
        }
        pthread_mutex_unlock(&srv->jobs_lock);
    }
    return NULL;
}

/* A new job for the request (its connection conn, or NULL for a job without
 * one), linked into srv->jobs with `refs` references; q and cx->parsed (with
 * the negotiated representation and predicted cost it goes with) are taken over. */
static job *job_new(es_server *srv, request *rq, struct MHD_Connection *conn, es_ctx *cx, es_query *q, int refs)
{
    job *jb = es_calloc(1, sizeof *jb);
    jb->srv = srv;
    jb->conn = conn;
    jb->query = *q;
    jb->path = es_strdup(rq->path);
    jb->if_none_match = cx->if_none_match ? es_strdup(cx->if_none_match) : NULL;
    jb->accept = cx->accept ? es_strdup(cx->accept) : NULL;
    snprintf(jb->method, sizeof jb->method, "%s", rq->method);
    memcpy(jb->id, rq->id, sizeof jb->id);
    jb->cx = (es_ctx){.app = srv->app, .query = &jb->query, .path = jb->path, .if_none_match = jb->if_none_match,
                      .accept = jb->accept, .request_id = jb->id, .reg = es_registry_retain(cx->reg),
                      .claim = cx->claim};
    if (cx->parsed) { /* the job's now: resumed, not parsed again (nor its prediction made again) */
        jb->cx.parsed = cx->parsed;
        jb->cx.cost = cx->cost;
        jb->cx.render = cx->render;
        cx->parsed = NULL;
    }
    jb->pending = cx->pending;
    jb->route = es_route_find(jb->path, &jb->cx);
    jb->upload = rq->upload;
    rq->upload = NULL;
    jb->outcome = ES_PROB_COUNT; /* none: the job's own reply */
    pthread_mutex_init(&jb->lock, NULL);
    jb->refs = refs;
    pthread_mutex_lock(&srv->jobs_lock);
    jb->next = srv->jobs;
    if (srv->jobs)
        srv->jobs->prev = jb;
    srv->jobs = jb;
    pthread_mutex_unlock(&srv->jobs_lock);
    return jb;
}

/* The URL of a request's result: its path and query (percent-encoded again), for a job's 303. Caller frees. */
static char *result_url(const request *rq, const es_query *q)
{
    es_buf b;
    es_buf_init(&b, 256);
    es_buf_printf(&b, "%s%s", rq->prefix, rq->path);
    for (size_t i = 0; i < q->n; i++) {
        es_buf_printf(&b, "%s", i ? "&" : "?");
        for (int part = 0; part < 2; part++) {
            for (const unsigned char *c = (const unsigned char *)(part ? q->items[i].value : q->items[i].key); *c; c++)
                es_buf_printf(&b, strchr("-._~/:,", *c) || (*c < 128 && isalnum(*c)) ? "%c" : "%%%02X", *c);
            if (!part)
                es_buf_printf(&b, "=");
        }
    }
    return b.s;
}

/* 202 Accepted for job a: its record as the body, Location: /v1/jobs/{id}. */
static void accepted_reply(const es_limits *lim, const request *rq, es_ajob *a, es_reply *rep)
{
    es_err err;
    json_t *doc = es_ajob_json(a, lim);
    es_reply_release(rep);
    *rep = (es_reply){.status = 202, .content_type = "application/json", .cache_control = "no-store",
                      .retry_after = BUSY_RETRY_AFTER};
    if (es_json_body(doc, 0, &rep->body, &rep->len, &err) < 0) {
        rep->body = (char *)"{}";
        rep->len = 2;
        rep->body_static = true;
    }
    json_decref(doc);
    char location[ES_PREFIX_MAX + sizeof "/v1/jobs/" + ES_JOB_ID_LEN];
    snprintf(location, sizeof location, "%s/v1/jobs/%s", rq->prefix, es_ajob_id(a));
    es_reply_location(rep, location);
}

/* A job waiting for the reply another request computes: it takes it when settled. */
typedef struct pending_job {
    es_app *app;
    es_ajob *api;
    es_result *pending;
} pending_job;

static void pending_settled(void *arg)
{
    pending_job *pj = arg;
    es_reply rep = {0};
    es_err err = {0};
    int got = es_results_take(pj->app->results, pj->pending, &rep, &err);
    if (got < 0)
        problem_reply(&rep, es_problem_kind_of(err.code), err.message, err.param, "", NULL);
    else if (got == 0)
        problem_reply(&rep, ES_PROB_BUSY, "the computation this job waited for was abandoned: ask again", NULL, "",
                      NULL);
    es_ajob_finish(pj->api, &rep);
    es_reply_release(&rep);
    es_ajob_release(pj->api);
    free(pj);
}

/* Answer a request the gate made a job (cx->async: asked for, or predicted
 * past limits.sync_seconds) with 202 at once: the live job of the same reply
 * if there is one; else a new one that computes it without the connection
 * (its claim), or takes the reply another request is computing (its
 * pending). A client over max_jobs_per_client gets the 400, a full queue 503.
 * Consumes q. */
static enum MHD_Result defer_async(es_server *srv, request *rq, struct MHD_Connection *conn, es_ctx *cx, es_query *q)
{
    es_app *app = srv->app;
    const es_limits *lim = &cx->reg->limits;
    es_reply rep = {0};
    es_err err;
    es_ajob *a = es_jobs_find(app->jobs, lim, cx->key, rq->owner);
    char *url = result_url(rq, q);
    if (!a) {
        a = es_ajob_new(cx->key, url, rq->client, rq->owner, &cx->cost);
        unsigned retry_s = 0;
        if (es_jobs_add(app->jobs, a, lim, &retry_s, &err) < 0) {
            problem_reply(&rep, ES_PROB_TOO_MANY_JOBS, err.message, err.param, rq->path, rq->id);
            rep.retry_after_s = retry_s;
            es_ajob_release(a);
            a = NULL;
        } else if (cx->pending) {
            pending_job *pj = es_malloc(sizeof *pj);
            *pj = (pending_job){app, es_ajob_retain(a), cx->pending};
            cx->pending = NULL; /* the hold goes to pj */
            if (!es_results_notify(app->results, pj->pending, pending_settled, pj))
                pending_settled(pj);
        } else {
            job *jb = job_new(srv, rq, NULL, cx, q, 1);
            q = NULL;
            cx->claim = NULL; /* the job's now */
            jb->api = es_ajob_retain(a);
            atomic_store(&jb->async, true);
            jb->resumed = true; /* no connection to resume */
            es_task_cost cost = es_task_cost_of(cx);
            if (es_pool_submit(app->pool, ES_PRIO_REQUEST, rq->client, &cost, run_job, job_dropped, jb) < 0) {
                es_ajob_cancel(a);
                give_up_claim(jb);
                job_unref(jb);
                problem_reply(&rep, ES_PROB_BUSY, "every compute thread is busy and the job queue is full", NULL,
                              rq->path, rq->id);
                es_ajob_release(a);
                a = NULL;
            }
        }
    }
    if (cx->claim) /* joined a job: its computation is not ours */
        es_results_settle(app->results, cx->claim, NULL, NULL);
    if (cx->pending)
        es_results_release(app->results, cx->pending);
    if (a)
        accepted_reply(lim, rq, a, &rep);
    es_ajob_release(a);
    free(url);
    if (q)
        es_query_free(q);
    return send_reply(srv, rq, conn, &rep, false);
}

/* Hand a deferred request (or the request's upload, taken over: no deadline)
 * to the compute pool: suspend its connection first (a job may finish at
 * once), then queue it with its claim; a refused job (full queue, this
 * client's share used up, stopping) resumes at once with a 503. A request
 * whose reply another job computes (cx->pending) is not queued: it waits for
 * that reply. A computation still running after the synchronous window
 * becomes a job (become_job). Consumes q. */
static enum MHD_Result defer(es_server *srv, request *rq, struct MHD_Connection *conn, es_ctx *cx, es_query *q)
{
    char *url = result_url(rq, q);
    job *jb = job_new(srv, rq, conn, cx, q, 2);
    unsigned timeout = cx->reg->limits.request_timeout_s;
    jb->deadline = timeout && !jb->upload ? rq->t0 + timeout : 0;
    if (!jb->upload && !jb->pending) { /* its progress; an analysis may become a job */
        jb->api = es_ajob_new(cx->key, url, rq->client, rq->owner, &cx->cost);
        if (cx->analysis)
            jb->sync_deadline = rq->t0 + (cx->prefer_wait >= 0 ? cx->prefer_wait : cx->reg->limits.sync_seconds);
    }
    free(url);
    rq->job = jb;
    MHD_suspend_connection(conn);
    if (jb->pending) { /* the results' reference replaces the compute side's */
        if (!es_results_notify(srv->app->results, jb->pending, wake_waiter, jb))
            wake_waiter(jb); /* settled meanwhile */
        return MHD_YES;
    }
    es_task_cost cost = es_task_cost_of(cx);
    int rc = es_pool_submit(srv->app->pool, ES_PRIO_REQUEST, rq->client, &cost, run_job, job_dropped, jb);
    if (rc < 0) {
        problem_reply(&jb->cx.reply, ES_PROB_BUSY,
                      atomic_load(&srv->app->stopping) ? "the server is shutting down"
                      : rc == ES_POOL_CLIENT_SHARE
                          ? "this client's share of the job queue is used up; wait for its running requests"
                          : "every compute thread is busy and the job queue is full",
                      NULL, jb->path, jb->id);
        give_up_claim(jb);
        job_resume(jb);
        job_unref(jb); /* the compute side's reference: never queued */
    }
    return MHD_YES;
}

/* DELETE /v1/jobs/{id}: cancel it (its computation stops at its next block;
 * 204) or forget a finished one (204); 404 when there is no such job of this
 * owner (another client's job is not there for it: the same request that
 * made the job, same address and same bearer token, cancels it). */
static void cancel_job(es_app *app, const es_limits *lim, const request *rq, const char *id, es_reply *rep)
{
    es_ajob *a = es_jobs_get(app->jobs, lim, id, rq->owner);
    if (!a && es_jobs_remote_cancel(app->jobs, lim, id, rq->owner)) { /* another replica's */
        es_info("job %s: cancel or forget asked for its replica", id);
        *rep = (es_reply){.status = 204, .body = (char *)"", .body_static = true, .cache_control = "no-store"};
        return;
    }
    if (!a) {
        problem_reply(rep, ES_PROB_NOT_FOUND, "no such job of this client (a finished job is kept "
                      "limits.job_ttl_s seconds)", "id", rq->path, rq->id);
        return;
    }
    if (es_ajob_cancel(a))
        es_info("job %s cancelled", id);
    else if (es_jobs_forget(app->jobs, a))
        es_info("job %s forgotten", id);
    es_ajob_release(a);
    *rep = (es_reply){.status = 204, .body = (char *)"", .body_static = true, .cache_control = "no-store"};
}

/* Route and run the request (in this thread as far as the gate allows), then
 * send its reply or problem, or defer it to the compute pool. */
static enum MHD_Result answer(es_server *srv, request *rq, struct MHD_Connection *conn)
{
    es_query q;
    es_query_init(&q);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_arg, &q);
    free(rq->query_text); /* run again after a failed computation it waited for */
    rq->query_text = es_query_text(&q);
    es_ctx cx = {.app = srv->app, .query = &q, .path = rq->path, .request_id = rq->id,
                 .if_none_match = header(conn, MHD_HTTP_HEADER_IF_NONE_MATCH),
                 .accept = header(conn, MHD_HTTP_HEADER_ACCEPT), .may_defer = srv->app->pool != NULL,
                 .accepts_gzip = es_accepts_gzip(header(conn, MHD_HTTP_HEADER_ACCEPT_ENCODING)),
                 .reg = es_app_catalogue(srv->app), .owner = rq->owner};
    const es_route *route = es_route_find(rq->path, &cx);
    es_prefer(header(conn, "Prefer"), &cx.prefer_async, &cx.prefer_wait);
    bool preflight = false;
    enum MHD_Result ok;
    if (!route) {
        problem_reply(&cx.reply, ES_PROB_NOT_FOUND, "no such path (see /openapi.yaml)", NULL, rq->path, rq->id);
    } else if (is_method(rq->method, "DELETE")) { /* only JOB_ROUTE gets here */
        cancel_job(srv->app, &cx.reg->limits, rq, cx.slug, &cx.reply);
    } else if (is_method(rq->method, "OPTIONS")) {
        preflight = header(conn, "Access-Control-Request-Method") != NULL;
        cx.reply = (es_reply){.status = 204, .body = (char *)"", .body_static = true,
                              .allow = es_route_writable(route)                   ? ALLOW_WRITE
                                       : strcmp(route->pattern, JOB_ROUTE) == 0 ? ALLOW_JOB
                                                                                : ALLOW};
    } else {
        run_route(route, &cx, rq->method, NULL);
    }
    rq->prefer_async = cx.prefer_async;
    rq->prefer_wait = cx.prefer_wait;
    rq->analysis = cx.analysis != NULL;
    if (cx.deferred && cx.async) {
        ok = defer_async(srv, rq, conn, &cx, &q);
    } else if (cx.deferred) {
        ok = defer(srv, rq, conn, &cx, &q);
    } else {
        es_query_free(&q);
        ok = send_reply(srv, rq, conn, &cx.reply, preflight);
    }
    es_parsed_free(cx.parsed); /* not taken by a job: a waiter, a joined job or a refusal */
    es_registry_free(cx.reg);
    return ok;
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

/* The final call of a write: a PUT, or a DELETE that locks and reads
 * uploads.dir, goes to the compute pool (answer's deferral with the upload);
 * any other DELETE is finished here (a pointer swap). */
static enum MHD_Result answer_write(es_server *srv, request *rq, struct MHD_Connection *conn)
{
    if (es_upload_on_pool(rq->upload) && srv->app->pool) {
        es_query q;
        es_query_init(&q);
        es_ctx cx = {.reg = es_app_catalogue(srv->app)};
        enum MHD_Result ok = defer(srv, rq, conn, &cx, &q);
        es_registry_free(cx.reg);
        return ok;
    }
    es_reply rep = {0};
    run_upload(srv->app, rq->upload, &rep, rq->method, rq->path, rq->id);
    es_upload_free(rq->upload);
    rq->upload = NULL;
    return send_reply(srv, rq, conn, &rep, false);
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
    es_registry *reg = es_app_catalogue(srv->app);
    es_err err = {0};
    bool proxied = header(conn, "X-Forwarded-For") || header(conn, "Forwarded") || header(conn, "X-Real-IP");
    int rc = es_upload_begin(srv->app, reg, rq->method, rq->path, &q, header(conn, MHD_HTTP_HEADER_AUTHORIZATION),
                             proxied, header(conn, MHD_HTTP_HEADER_CONTENT_TYPE), header(conn, MHD_HTTP_HEADER_CONTENT_LENGTH),
                             &rq->upload, &err);
    es_registry_free(reg);
    es_query_free(&q);
    return rc == 0 ? MHD_YES : send_error(srv, rq, conn, &err);
}

/* The reply of a finished job, on the call after its connection resumed: the
 * job's own, or the watcher's problem (the computation may still be running
 * and owns cx then). */
static enum MHD_Result answer_job(es_server *srv, request *rq, struct MHD_Connection *conn)
{
    job *jb = rq->job;
    rq->job = NULL;
    pthread_mutex_lock(&jb->lock);
    es_problem_kind kind = jb->outcome;
    bool gone = jb->gone;
    pthread_mutex_unlock(&jb->lock);
    enum MHD_Result ok;
    if (gone) {
        rq->status = CLIENT_GONE;
        ok = MHD_NO; /* close: nobody is listening */
    } else if (jb->accepted) { /* it became a job: its Location */
        es_reply rep = {0};
        accepted_reply(&jb->cx.reg->limits, rq, jb->api, &rep);
        ok = send_reply(srv, rq, conn, &rep, false);
    } else if (kind != ES_PROB_COUNT) {
        char detail[160];
        snprintf(detail, sizeof detail,
                 kind == ES_PROB_TIMEOUT ? "the computation did not finish within limits.request_timeout_s = %u s"
                                         : "the server is shutting down (after %u s)",
                 kind == ES_PROB_TIMEOUT ? jb->cx.reg->limits.request_timeout_s : jb->cx.reg->server.shutdown_grace_s);
        ok = send_problem(srv, rq, conn, kind, detail);
    } else if (jb->pending) {
        es_reply rep = {0};
        es_err err = {0};
        int got = es_results_take(srv->app->results, jb->pending, &rep, &err);
        jb->pending = NULL;
        job_unref(jb);
        /* the computation it waited for was abandoned: run the request again (it may claim it now) */
        return got > 0 ? send_reply(srv, rq, conn, &rep, false)
             : got < 0 ? send_error(srv, rq, conn, &err)
                       : answer(srv, rq, conn);
    } else {
        ok = send_reply(srv, rq, conn, &jb->cx.reply, false);
    }
    job_unref(jb);
    return ok;
}

/* Has the body of rq, as far as it arrived, come too slowly? After
 * server.body_grace_s seconds from the request head it must have averaged
 * server.body_min_rate bytes per second: a client dripping a body cannot hold
 * a connection (and an upload's temporary file) open. A body that stops
 * altogether is closed by the idle timeout (server.connection_timeout_s). */
static bool body_too_slow(const es_server *srv, const request *rq)
{
    es_registry *cat = es_app_catalogue(srv->app); /* a reload may change the floor */
    const es_server_conf *s = &cat->server;
    double elapsed = es_now() - rq->t0;
    bool slow = s->body_grace_s > 0 && elapsed > (double)s->body_grace_s &&
                (double)rq->body_bytes < (double)s->body_min_rate * elapsed;
    es_registry_free(cat);
    return slow;
}

/* Answer a too slow body with 408 problem+json written to the socket itself
 * (MHD queues no reply before the body has ended), log it and let MHD close
 * the connection. The client may miss the answer if it is still sending. */
static enum MHD_Result close_slow_body(es_server *srv, request *rq, struct MHD_Connection *conn)
{
    double elapsed = es_now() - rq->t0;
    es_registry *cat = es_app_catalogue(srv->app);
    const es_server_conf *s = &cat->server;
    char detail[200];
    snprintf(detail, sizeof detail, "%zu bytes of the body in %.1f s: less than server.body_min_rate = %u bytes/s "
             "after server.body_grace_s = %u s", rq->body_bytes, elapsed, s->body_min_rate, s->body_grace_s);
    es_registry_free(cat);
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
static void live_timeout(es_server *srv, struct MHD_Connection *conn)
{
    es_registry *cat = es_app_catalogue(srv->app);
    unsigned now = cat->server.connection_timeout_s;
    es_registry_free(cat);
    if (now != srv->app->server.connection_timeout_s)
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, now);
}

/* A write from another origin's web page: ES_E_CROSS_ORIGIN unless its
 * origin may write or it has the token (es_check_write_origin). */
static int refuse_cross_origin(es_server *srv, struct MHD_Connection *conn, es_err *err)
{
    es_registry *reg = es_app_catalogue(srv->app); /* the origins as configured now */
    int rc = es_check_write_origin(srv->app, reg, header(conn, "Origin"), header(conn, MHD_HTTP_HEADER_HOST),
                                   header(conn, MHD_HTTP_HEADER_AUTHORIZATION), err);
    es_registry_free(reg);
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
        live_timeout(srv, conn);
        es_metrics_in_flight(&srv->app->metrics, 1);
        es_ctx probe = {0};
        const es_route *route = es_route_find(url, &probe);
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
        if (body_too_slow(srv, rq))
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
    if (rq->job)
        return answer_job(srv, rq, conn);
    if (rq->answered)
        return MHD_YES;
    if (rq->body_failed)
        return send_error(srv, rq, conn, &rq->body_err);
    return rq->upload ? answer_write(srv, rq, conn) : answer(srv, rq, conn);
}

/* One access-log record (es_log_access: whatever --log-level says): method,
 * target, status, bytes, duration, request id, client (and the connection's
 * own address when a trusted proxy forwarded the client's). */
static void access_log(const request *rq, double seconds, bool early)
{
    const char *peer = es_conn_address(rq->conn), *query = rq->query_text ? rq->query_text : "";
    bool forwarded = strcmp(peer, rq->client) != 0;
    char text[1200];
    snprintf(text, sizeof text, "%s %s%s%.512s %u %zu B %.1f ms id=%s client=%s%s%s%s", rq->method, rq->path,
             *query ? "?" : "", query, rq->status, rq->bytes, seconds * 1e3, rq->id, rq->client,
             forwarded ? " peer=" : "", forwarded ? peer : "", early ? " (connection closed early)" : "");
    char *json = NULL;
    if (es_log_is_json()) {
        json_t *o = json_pack("{s:o, s:o, s:o, s:i, s:I, s:f, s:o, s:o, s:b}", "method", es_jstr(rq->method), "path",
                              es_jstr(rq->path), "query", es_jstr(query), "status", (int)rq->status, "bytes",
                              (json_int_t)rq->bytes, "ms", seconds * 1e3, "request_id", es_jstr(rq->id), "client",
                              es_jstr(rq->client), "closed_early", early);
        if (o && forwarded)
            json_object_set_new(o, "peer", es_jstr(peer));
        json = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
    }
    es_log_access(text, json ? json : "");
    free(json);
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
    if (rq->job) /* closed before its reply was queued */
        rq->status = CLIENT_GONE;
    double seconds = es_now() - rq->t0;
    if (srv->app->access_log)
        access_log(rq, seconds, toe != MHD_REQUEST_TERMINATED_COMPLETED_OK);
    es_metrics_observe(&srv->app->metrics, rq->route, rq->status, seconds, rq->bytes);
    es_metrics_observe_route(&srv->app->metrics, rq->route, rq->method, rq->status, seconds);
    es_metrics_in_flight(&srv->app->metrics, -1);
    if (rq->job)
        job_unref(rq->job);
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

/* A listening socket on host:port (the kernel's full backlog: clients above
 * every limit wait there only while the acceptor is paused); *bound is the
 * real port. ES_E_IO naming "listen" on failure. */
static int open_listener(const char *host, unsigned port, unsigned *bound, es_err *err)
{
    struct addrinfo *ai;
    if (resolve(host, port, &ai, err) < 0)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return es_fail(err, ES_E_IO, "listen", "cannot listen on %s:%u: %s", host, port, strerror(e));
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* Raise the open-files limit to its hard maximum and bound the connection
 * limit by it (with room for data files, the cache and the pipes). */
static unsigned fit_descriptors(unsigned limit)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return limit;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    rlim_t room = rl.rlim_cur > 2 * FD_RESERVE ? rl.rlim_cur - FD_RESERVE : rl.rlim_cur / 2;
    if (limit > room) {
        es_warn("server.connection_limit %u exceeds what the open-files limit %llu allows: using %llu", limit,
                (unsigned long long)rl.rlim_cur, (unsigned long long)room);
        return (unsigned)room;
    }
    return limit;
}

/* A reload changed the admission's live settings (app->admission_changed). */
static void reconfigure_admission(void *conns, const es_server_conf *conf) { es_conns_configure(conns, conf); }

/* See transport.h. ES_E_IO naming "listen" when host:port cannot be resolved or bound. */
int es_server_start(es_app *app, const char *host, unsigned port, es_server **out, es_err *err)
{
    app->server.connection_limit = fit_descriptors(app->server.connection_limit);
    unsigned bound = port;
    int fd = open_listener(host, port, &bound, err);
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
    pthread_mutex_init(&srv->jobs_lock, NULL);
    if (pthread_create(&srv->watcher, NULL, watch_jobs, srv) != 0) {
        close(fd);
        MHD_stop_daemon(srv->daemon);
        es_conns_free(srv->conns);
        free(srv);
        return es_fail(err, ES_E_IO, "listen", "cannot start the job watcher thread");
    }
    if (es_conns_run(srv->conns, fd, srv->daemon, err) < 0) {
        close(fd);
        atomic_store(&srv->watcher_stop, true);
        pthread_join(srv->watcher, NULL);
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
    atomic_store(&s->watcher_stop, true);
    pthread_join(s->watcher, NULL);
    MHD_stop_daemon(s->daemon);
    s->app->admission_changed = NULL;
    es_conns_free(s->conns);
    pthread_mutex_destroy(&s->jobs_lock);
    free(s);
    return true;
}
