/* The exchange: one request's life, from its route to its reply, without a
 * transport (src/api/exchange.c). The transport (src/http/server.c) parses
 * the request head, creates an exchange, hands it the request's query and
 * headers, and gives it four callbacks; the exchange decides everything else:
 *
 *   routed   es_exchange_new: the route is looked up, once, with the path's
 *            captures, and the catalogue taken
 *   gated    es_exchange_answer: the route's handler runs on the HTTP thread
 *            up to its gate (es_precheck: the cache key and its sha256, once)
 *     -> answered now       a cheap reply, a 304, a cached copy, a refusal:
 *                           sent at once (io.send)
 *     -> computed           the gate deferred it: the connection is
 *                           suspended (io.suspend) and the pool computes it
 *                           with the parsed request and the claim the HTTP
 *                           thread made (no new lookup, key or hash)
 *     -> waiting            another request computes the identical reply:
 *                           suspended, woken with a copy when it is settled
 *                           (its failure when that holds for this one too,
 *                           routed and gated again when it was abandoned)
 *     -> a 202 job          asked for (Prefer: respond-async) or predicted
 *                           past the synchronous window: 202 at once, the
 *                           computation goes on without the connection
 *   suspended exchanges are watched (es_exchanges_tick, every 100 ms on the
 *   watcher thread): past the synchronous window a computation becomes a job
 *   (202), past its deadline (es_deadline_seconds, settings.h) 504, a departed client (io.client_gone) is
 *   dropped unanswered (499 in the log), at shutdown 503
 *   replied  es_exchange_resumed: after io.resume, on an HTTP thread, the
 *            outcome is sent (io.send)
 *   ended    es_exchange_end: the transport lets go (the request completed).
 *
 * Writes (PUT, DELETE of uploads) take the same path without a gate:
 * es_exchange_write finishes the upload at once or on the pool.
 *
 * Threads: es_exchange_new/answer/write/resumed/end on the transport's HTTP
 * threads (one at a time per exchange, as a connection's calls are); the
 * computation on a pool thread; es_exchanges_tick on the watcher. io.send
 * and io.suspend are called only from an HTTP-thread entry point; io.resume
 * at most once per suspension, from any thread; io.client_gone from the
 * watcher while the connection is suspended.
 *
 * Ownership: an exchange is reference counted: the transport's reference
 * (dropped by es_exchange_end), the pool task's and a pending result's. The
 * exchange copies every string of its head and input; the query handed to
 * es_exchange_answer and the upload handed to es_exchange_write are taken
 * over. The connection pointer (head.conn) is the transport's: the exchange
 * hands it to the callbacks and never dereferences it; it is not used after
 * the connection was resumed. The reply handed to io.send is the callback's
 * (it must consume it: es_reply_release or take its bodies). */
#ifndef EMBEDSCOPE_EXCHANGE_H
#define EMBEDSCOPE_EXCHANGE_H

#include <stdbool.h>
#include <stddef.h>

#include "embedscope/app.h"
#include "embedscope/pool.h"
#include "embedscope/problem.h"
#include "embedscope/route.h"
#include "embedscope/uploads.h"

typedef struct es_exchange es_exchange;
typedef struct es_exchanges es_exchanges;

/* What the transport does for the exchange. conn is es_exchange_head.conn. */
typedef struct es_exchange_io {
    /* Park the connection: no reply until resume (called on an HTTP thread,
     * inside es_exchange_answer or es_exchange_write, before the computation
     * can start). */
    void (*suspend)(void *conn);
    /* Wake the parked connection (any thread): the transport then calls
     * es_exchange_resumed on an HTTP thread. */
    void (*resume)(void *conn);
    /* Has the client of a parked connection gone (the watcher; must not read
     * from it)? */
    bool (*client_gone)(void *conn);
    /* Send this reply (taken over) now; false when it could not be queued
     * (the transport then closes the connection). */
    bool (*send)(void *conn, es_reply *reply);
} es_exchange_io;

/* The request as the transport parsed it; every string is copied. */
typedef struct es_exchange_head {
    const char *method;     /* "GET", "HEAD", "DELETE", "PUT" */
    const char *path;       /* decoded */
    const char *request_id; /* X-Request-Id (echoed in problems) */
    const char *client;     /* address or a trusted proxy's X-Forwarded-For (pool fairness, jobs) */
    const char *owner;      /* es_job_owner: whose jobs it sees and makes */
    const char *prefix;     /* X-Forwarded-Prefix, "" for none: in front of Location paths */
    double t0;              /* es_now() when the request arrived (deadlines) */
    void *conn;             /* the transport's connection, handed to the callbacks */
} es_exchange_head;

/* The request headers the service reads; every string may be NULL and is copied. */
typedef struct es_exchange_input {
    const char *if_none_match;
    const char *accept;
    const char *accept_encoding;
    const char *prefer;     /* Prefer (RFC 7240): respond-async, wait=N */
} es_exchange_input;

/* How an entry point left the exchange. */
typedef enum es_exchange_step {
    ES_EXCHANGE_SENT,      /* io.send was called and queued the reply */
    ES_EXCHANGE_SUSPENDED, /* io.suspend was called: io.resume follows */
    ES_EXCHANGE_GONE,      /* its client left: close without a reply (499) */
    ES_EXCHANGE_FAILED,    /* io.send could not queue the reply: close */
} es_exchange_step;

/* Per-exchange counters (tests: a cache-miss analysis looks its route up
 * once and builds its key and hash once, wherever it is computed). */
typedef struct es_exchange_stats {
    unsigned route_lookups;  /* es_route_find calls (es_ctx.route_lookups) */
    unsigned gates;          /* keys and sha256s built (es_ctx.gates) */
    unsigned keys;           /* key texts handlers built (es_ctx.keys) */
    bool computed;           /* its route or write ran on the pool */
    bool waited;             /* it waited for another request's identical reply */
    bool job;                /* it became a 202 job (at once or after the window) */
    bool memo;               /* answered from this thread's target memo (memo.h): not parsed nor keyed */
} es_exchange_stats;

/* The exchanges of one app: io (copied) and the watcher. watch_ms > 0 starts
 * the watcher thread ticking every watch_ms; 0 starts none (tests call
 * es_exchanges_tick). NULL when the thread cannot start. */
es_exchanges *es_exchanges_new(es_app *app, const es_exchange_io *io, unsigned watch_ms);
/* Stop the watcher and free; call once no exchange is suspended. NULL ignored. */
void es_exchanges_free(es_exchanges *h);
/* One round of the watcher over the suspended exchanges. Never fails. */
void es_exchanges_tick(es_exchanges *h);

/* A new exchange for head (its route looked up here, once; its catalogue
 * taken). The transport's reference; never fails. */
es_exchange *es_exchange_new(es_exchanges *h, const es_exchange_head *head);
/* Its route, or NULL for no such path (the pointer is static). */
const es_route *es_exchange_route(const es_exchange *ex);
/* The catalogue the exchange's request reads (held until es_exchange_end): borrowed, not retained. */
const es_catalogue *es_exchange_catalogue(const es_exchange *ex);
/* Run it (a GET, HEAD, or the DELETE of a job): answered now or suspended.
 * q is taken over. */
es_exchange_step es_exchange_answer(es_exchange *ex, const es_exchange_input *in, es_query *q);
/* Finish a write whose body has arrived (u taken over): now, or suspended
 * while the pool does it. */
es_exchange_step es_exchange_write(es_exchange *ex, es_upload *u);
/* After io.resume, on an HTTP thread: send the outcome (or run it again
 * when the computation it waited for was abandoned). */
es_exchange_step es_exchange_resumed(es_exchange *ex);
/* Is it suspended or resumed without its reply sent (a request that ends
 * now ends without one)? */
bool es_exchange_unanswered(const es_exchange *ex);
/* The preferences the reply honoured (RFC 7240 Preference-Applied) given its
 * status, "" for none, into out[size]. */
void es_exchange_preference_applied(const es_exchange *ex, unsigned status, char *out, size_t size);
void es_exchange_get_stats(const es_exchange *ex, es_exchange_stats *out);
/* The transport lets go (the request has completed). NULL ignored. */
void es_exchange_end(es_exchange *ex);

/* rep becomes a problem document of kind (its previous bodies released):
 * application/problem+json, no-store, Retry-After 1 for ES_PROB_BUSY. */
void es_reply_problem(es_reply *rep, es_problem_kind kind, const char *detail, const char *param,
                      const char *instance, const char *request_id);

/* Before sending: 304 for a 200 whose ETag the client has (if_none_match;
 * es_route_dispatch has set the body-derived ones), and no body for a 304 or
 * a 204 (its bodies released). */
void es_reply_finish(es_reply *rep, const char *if_none_match);
/* Send the gzip variant instead of the body when the client accepts it
 * (accept_encoding) and there is one (shared bytes: es_shared_gzip, made on
 * first demand; else compressed here unless the reply brought one); true if
 * so. The unsent variant of an unshared reply is freed. */
bool es_reply_choose_coding(es_reply *rep, const char *accept_encoding, es_pool *pool);

#endif
