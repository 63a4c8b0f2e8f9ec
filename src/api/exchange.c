/* The exchange: one request's life without a transport (see
 * include/embedscope/exchange.h for its states and callbacks).
 *
 * One es_exchange per request, with one es_ctx for its whole life: the route
 * is looked up once (es_exchange_new); the HTTP thread runs the handler up to
 * its gate, which keys and hashes the request (es_precheck) and either
 * answers or defers it (cx.deferred) with the parsed request (cx.parsed) and
 * the claim to compute it (cx.claim) or the reply another request computes
 * (cx.pending). A deferred exchange goes on in the same cx on a compute
 * thread: es_route_dispatch resumes the parsed request and es_gate_answer
 * finds the key and claim already there, so nothing is looked up, keyed or
 * hashed again.
 *
 * A suspended exchange has its connection parked by the transport; whoever
 * resumes it first decides the answer: the compute thread with cx.reply, the
 * results cache with the reply it waited for, or the watcher (deadline passed,
 * client gone, shutdown) with a problem, after which the computation is
 * abandoned at its next safe point (es_checkpoint: the pool asks
 * ex_dropped) and its reply discarded. The watcher also turns a computation
 * past its synchronous window into a job (become_job): the connection is
 * resumed with 202, the computation goes on for the job's record. */
#include "embedscope/exchange.h"

#include "embedscope/cost.h"
#include "embedscope/jobs.h"
#include "embedscope/negotiate.h"
#include "embedscope/render.h"
#include "embedscope/results.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Retry-After (seconds) of a 503 for a full job queue or a shutdown, and of a 202. */
#define BUSY_RETRY_AFTER "1"

struct es_exchanges {
    es_app *app;
    es_exchange_io io;
    pthread_mutex_t lock; /* guards list and every exchange's list links */
    es_exchange *list;    /* exchanges that were suspended, until freed */
    pthread_t watcher;
    bool has_watcher;
    unsigned watch_ms;
    atomic_bool stop;
};

struct es_exchange {
    es_exchanges *hub;
    void *conn;
    const es_route *route;
    char method[16];
    char *path, *client, *owner, *prefix, *if_none_match, *accept;
    char id[72];
    double t0;
    bool prefer_async;   /* Prefer: respond-async (Preference-Applied) */
    double prefer_wait;  /* Prefer: wait=N, < 0 when not given */
    bool analysis;       /* an analysis route: the requests those preferences apply to */
    es_query query;
    es_upload *upload;   /* a write to finish instead of a route to run */
    es_result *pending;  /* a waiter: the held reply another request computes (nothing to run) */
    es_ctx cx;           /* cx.reply is the outcome of a computation; cx.reg the catalogue it holds */
    es_catalogue_hold *hold; /* cx.reg's: this thread's hold on the catalogue (es_app_hold) */
    double deadline;     /* es_now() after which it is abandoned; 0: never */
    double sync_deadline; /* es_now() after which the watcher turns it into a job (202); 0: never */
    es_ajob *api;        /* the request's record (progress; a job once registered); NULL for writes and
                          * waiters */
    atomic_bool async;   /* a job: no deadline, no client; its reply goes to api */
    bool accepted;       /* resumed by the watcher with a 202 (it became a job) */
    bool computed;       /* its computation has ended: too late to become a job */
    atomic_bool abandon;
    atomic_bool client_left; /* answered because its client left: abandoned unless others wait */
    bool suspended;      /* parked until es_exchange_resumed (the HTTP side's view) */
    pthread_mutex_t lock; /* guards refs, resumed, outcome, gone, computed */
    int refs;
    bool resumed;        /* its connection was resumed (or it has none to resume) */
    es_problem_kind outcome; /* resumed by the watcher: the answer's kind; ES_PROB_COUNT: none */
    bool gone;           /* resumed by the watcher because the client left */
    bool linked;
    es_exchange *prev, *next;
    es_exchange_stats stats;
};

static es_exchange_step exchange_run(es_exchange *ex);

/* See exchange.h. */
void es_reply_problem(es_reply *rep, es_problem_kind kind, const char *detail, const char *param,
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

/* Send the gzip variant instead of the body when the client accepts it and
 * there is one (shared bytes: es_shared_gzip, made on first demand; else
 * compressed here unless the reply brought one); true if so. The unsent
 * variant of an unshared reply is freed. */
bool es_reply_choose_coding(es_reply *rep, const char *accept_encoding, es_pool *pool)
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

/* See exchange.h. */
void es_reply_finish(es_reply *rep, const char *if_none_match)
{
    if (rep->status == 200 && rep->etag[0] && es_etag_matches(if_none_match, rep->etag))
        rep->status = 304;
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
}

static char *dup_or_null(const char *s) { return s ? es_strdup(s) : NULL; }

/* ---------------------------------------------------------------- lifetime */

/* Drop one reference; the last frees the exchange (and unlinks it). */
static void ex_unref(es_exchange *ex)
{
    pthread_mutex_lock(&ex->lock);
    bool last = --ex->refs == 0;
    pthread_mutex_unlock(&ex->lock);
    if (!last)
        return;
    es_exchanges *h = ex->hub;
    if (ex->linked) {
        pthread_mutex_lock(&h->lock);
        if (ex->prev)
            ex->prev->next = ex->next;
        else
            h->list = ex->next;
        if (ex->next)
            ex->next->prev = ex->prev;
        pthread_mutex_unlock(&h->lock);
    }
    pthread_mutex_destroy(&ex->lock);
    if (ex->pending) /* answered before the reply it waited for was settled */
        es_results_release(h->app->results, ex->pending);
    if (ex->cx.claim) /* never ran (cannot happen once handed to the pool, which settles it) */
        es_results_settle(h->app->results, ex->cx.claim, NULL, NULL);
    es_parsed_free(ex->cx.parsed);
    es_catalogue_hold_release(ex->hold);
    es_upload_free(ex->upload);
    es_ajob_release(ex->api);
    es_query_free(&ex->query);
    es_reply_release(&ex->cx.reply);
    free(ex->path);
    free(ex->client);
    free(ex->owner);
    free(ex->prefix);
    free(ex->if_none_match);
    free(ex->accept);
    free(ex);
}

static void ex_ref(es_exchange *ex)
{
    pthread_mutex_lock(&ex->lock);
    ex->refs++;
    pthread_mutex_unlock(&ex->lock);
}

/* See exchange.h. */
es_exchange *es_exchange_new(es_exchanges *h, const es_exchange_head *head)
{
    es_exchange *ex = es_calloc(1, sizeof *ex);
    ex->hub = h;
    ex->conn = head->conn;
    snprintf(ex->method, sizeof ex->method, "%s", head->method);
    ex->path = es_strdup(head->path);
    ex->client = es_strdup(head->client ? head->client : "");
    ex->owner = es_strdup(head->owner ? head->owner : "");
    ex->prefix = es_strdup(head->prefix ? head->prefix : "");
    snprintf(ex->id, sizeof ex->id, "%s", head->request_id ? head->request_id : "");
    ex->t0 = head->t0;
    ex->prefer_wait = -1;
    es_query_init(&ex->query);
    ex->hold = es_app_hold(h->app); /* no lock, no count another thread writes */
    ex->cx = (es_ctx){.app = h->app, .query = &ex->query, .path = ex->path, .request_id = ex->id,
                      .owner = ex->owner, .reg = es_catalogue_of(ex->hold)};
    ex->route = es_route_find(ex->path, &ex->cx); /* with the path's captures and analysis, for good */
    ex->outcome = ES_PROB_COUNT;
    pthread_mutex_init(&ex->lock, NULL);
    ex->refs = 1;
    return ex;
}

/* See exchange.h. */
const es_route *es_exchange_route(const es_exchange *ex) { return ex->route; }

/* See exchange.h. */
const es_catalogue *es_exchange_catalogue(const es_exchange *ex) { return ex->cx.reg; }

/* See exchange.h. */
void es_exchange_end(es_exchange *ex)
{
    if (ex)
        ex_unref(ex);
}

/* See exchange.h. */
bool es_exchange_unanswered(const es_exchange *ex) { return ex->suspended; }

/* See exchange.h. */
void es_exchange_get_stats(const es_exchange *ex, es_exchange_stats *out)
{
    *out = ex->stats;
    out->route_lookups = ex->cx.route_lookups;
    out->gates = ex->cx.gates;
    out->keys = ex->cx.keys;
    out->memo = ex->cx.memo_hit;
}

/* See exchange.h: the 202 of an analysis asked to respond-async, else the
 * wait=N an analysis used as its synchronous window (its 200, 304, or 202
 * after the window). */
void es_exchange_preference_applied(const es_exchange *ex, unsigned status, char *out, size_t size)
{
    out[0] = '\0';
    if (!ex->analysis)
        return;
    if (status == 202 && ex->prefer_async)
        snprintf(out, size, "respond-async");
    else if (ex->prefer_wait >= 0 && (status == 200 || status == 202 || status == 304))
        snprintf(out, size, "wait=%g", ex->prefer_wait);
}

/* ---------------------------------------------------------------- replies */

/* Send rep (consumed) through the transport. */
static es_exchange_step send_now(es_exchange *ex, es_reply *rep)
{
    ex->suspended = false;
    return ex->hub->io.send(ex->conn, rep) ? ES_EXCHANGE_SENT : ES_EXCHANGE_FAILED;
}

static es_exchange_step send_problem(es_exchange *ex, es_problem_kind kind, const char *detail, const char *param)
{
    es_reply rep = {0};
    es_reply_problem(&rep, kind, detail, param, ex->path, ex->id);
    return send_now(ex, &rep);
}

/* Dispatch the route; a failure becomes its problem reply (5xx logged as
 * errors, except the stop of a job its client cancelled: asked for, so info). */
static void run_route(es_exchange *ex, es_ajob *api)
{
    es_ctx *cx = &ex->cx;
    es_err err = {0};
    if (es_route_dispatch(ex->route, cx, &err) == 0)
        return;
    if (err.code == ES_E_CANCELLED && api && es_ajob_cancelled(api))
        es_info("%s %s: stopped, its job was cancelled (DELETE /v1/jobs/{id})", ex->method, cx->path);
    else if (es_problem_status(es_problem_kind_of(err.code)) >= 500)
        es_error("%s %s: %s error: %s", ex->method, cx->path, es_errcode_name(err.code), err.message);
    es_reply_problem(&cx->reply, es_problem_kind_of(err.code), err.message, err.param, cx->path, cx->request_id);
}

/* Carry out a write; a failure becomes its problem reply (5xx logged). */
static void run_upload(es_exchange *ex, es_reply *rep)
{
    es_err err = {0};
    if (es_upload_finish(ex->hub->app, ex->upload, rep, &err) == 0)
        return;
    if (es_problem_status(es_problem_kind_of(err.code)) >= 500)
        es_error("%s %s: %s error: %s", ex->method, ex->path, es_errcode_name(err.code), err.message);
    es_reply_problem(rep, es_problem_kind_of(err.code), err.message, err.param, ex->path, ex->id);
}

/* The URL of a request's result: its path and query (percent-encoded again), for a job's 303. Caller frees. */
static char *result_url(const es_exchange *ex)
{
    const es_query *q = &ex->query;
    es_buf b;
    es_buf_init(&b, 256);
    es_buf_printf(&b, "%s%s", ex->prefix, ex->path);
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
static void accepted_reply(const es_limits *lim, const es_exchange *ex, es_ajob *a, es_reply *rep)
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
    snprintf(location, sizeof location, "%s/v1/jobs/%s", ex->prefix, es_ajob_id(a));
    es_reply_location(rep, location);
}

/* ---------------------------------------------------------------- the compute side */

/* Resume the connection with the exchange's own outcome unless the watcher
 * already answered it. Never fails. */
static void ex_resume(es_exchange *ex)
{
    pthread_mutex_lock(&ex->lock);
    bool first = !ex->resumed;
    ex->resumed = true;
    if (first) /* under the lock: the watcher may be looking at the connection */
        ex->hub->io.resume(ex->conn);
    pthread_mutex_unlock(&ex->lock);
}

/* The pool task's es_task_dropped_fn: is the exchange's work wanted no more
 * (answered by the watcher, past its deadline, or its client left and no
 * identical request waits for the reply it computes)? The shutdown is the
 * pool's to say (es_pool_abandon). */
static bool ex_dropped(void *arg)
{
    es_exchange *ex = arg;
    es_results *results = ex->hub->app->results;
    es_result *claim = ex->cx.claim;
    if (atomic_load(&ex->async)) /* a job: only a cancellation (unless another client's request waits for
                                    * its reply: then it computes on for them) or the shutdown stops it */
        return es_ajob_cancelled(ex->api) && !(claim && es_results_waited(results, claim));
    return atomic_load(&ex->abandon) || (ex->deadline > 0 && es_now() > ex->deadline) ||
           (atomic_load(&ex->client_left) && !(claim && es_results_waited(results, claim)));
}

/* Release the claim of a computation that did not run its route (cancelled,
 * abandoned, refused): its waiters then run their requests again. */
static void give_up_claim(es_exchange *ex)
{
    if (ex->cx.claim)
        es_results_settle(ex->hub->app->results, ex->cx.claim, NULL, NULL);
    ex->cx.claim = NULL;
}

/* Pool task: run the route or finish the upload (or refuse it when the pool
 * is stopping), then resume the connection unless the watcher already
 * answered it; a job keeps its reply in its record. */
static void run_on_pool(void *arg, bool cancelled)
{
    es_exchange *ex = arg;
    if (cancelled)
        es_reply_problem(&ex->cx.reply, ES_PROB_BUSY, "the server is shutting down", NULL, ex->path, ex->id);
    else if (ex->upload)
        run_upload(ex, &ex->cx.reply);
    else if (es_checkpoint(&(es_err){0}) == 0) { /* not dropped, nor abandoned, while it waited */
        es_pool_track(es_ajob_progress(ex->api));
        es_ajob_start(ex->api);
        run_route(ex, ex->api);
        es_pool_track(NULL);
    }
    pthread_mutex_lock(&ex->lock); /* from here the watcher no longer turns it into a job */
    ex->computed = true;
    bool async = atomic_load(&ex->async);
    pthread_mutex_unlock(&ex->lock);
    if (async) {
        if (!ex->cx.reply.status) /* dropped before it ran */
            es_reply_problem(&ex->cx.reply, ES_PROB_BUSY, "the server is shutting down", NULL, ex->path, ex->id);
        es_ajob_finish(ex->api, &ex->cx.reply);
    }
    give_up_claim(ex);
    ex_resume(ex);
    ex_unref(ex);
}

/* A waiter's reply is settled: resume its connection (es_exchange_resumed
 * takes the reply) unless the watcher answered it, and drop the results'
 * reference. */
static void wake_waiter(void *arg)
{
    es_exchange *ex = arg;
    ex_resume(ex);
    ex_unref(ex);
}

/* Link ex into the watcher's list (once). */
static void ex_link(es_exchange *ex)
{
    if (ex->linked)
        return;
    es_exchanges *h = ex->hub;
    pthread_mutex_lock(&h->lock);
    ex->next = h->list;
    if (h->list)
        h->list->prev = ex;
    h->list = ex;
    ex->linked = true;
    pthread_mutex_unlock(&h->lock);
}

/* The computation goes on a compute thread in the same cx: as the HTTP
 * thread left it (the parse, the key, the claim), without deferring again. */
static void to_compute_side(es_ctx *cx)
{
    cx->may_defer = false;
    cx->deferred = false;
    cx->async = false;
    cx->accepts_gzip = false; /* the reply is compressed where it is sent, for the clients that ask */
    if (!cx->parsed) { /* the handler runs again there from the start, as on a fresh request */
        es_reply_release(&cx->reply);
        cx->reply = (es_reply){0};
        cx->key[0] = '\0';
        cx->cost = (es_cost){0};
        cx->render = (es_render_opts){0};
    }
}

/* Park the connection and hand the deferred request (or the write) to the
 * compute pool, with its claim; a refused one (full queue, this client's share
 * used up, stopping) resumes at once with a 503. A request whose reply
 * another request computes (ex->pending) is not queued: it waits for that
 * reply. A computation still running after the synchronous window becomes a
 * job (become_job). */
static es_exchange_step defer(es_exchange *ex)
{
    es_app *app = ex->hub->app;
    es_ctx *cx = &ex->cx;
    double timeout = es_deadline_seconds(&cx->reg->limits, cx->prefer_wait);
    ex->pending = cx->pending;
    cx->pending = NULL;
    ex->deadline = timeout > 0 && !ex->upload ? ex->t0 + timeout : 0;
    if (!ex->upload && !ex->pending) { /* its progress; an analysis may become a job */
        char *url = result_url(ex);
        ex->api = es_ajob_new(cx->key, url, ex->client, ex->owner, &cx->cost);
        free(url);
        if (cx->analysis)
            ex->sync_deadline = ex->t0 + (cx->prefer_wait >= 0 ? cx->prefer_wait : cx->reg->limits.sync_seconds);
    }
    es_task_cost cost = es_task_cost_of(cx);
    to_compute_side(cx);
    pthread_mutex_lock(&ex->lock);
    ex->resumed = false;
    ex->outcome = ES_PROB_COUNT;
    ex->gone = ex->accepted = ex->computed = false;
    ex->refs++; /* the compute side's, or the results' for a waiter */
    pthread_mutex_unlock(&ex->lock);
    ex_link(ex);
    ex->suspended = true;
    ex->hub->io.suspend(ex->conn);
    if (ex->pending) {
        ex->stats.waited = true;
        if (!es_results_notify(app->results, ex->pending, wake_waiter, ex))
            wake_waiter(ex); /* settled meanwhile */
        return ES_EXCHANGE_SUSPENDED;
    }
    ex->stats.computed = true;
    int rc = es_pool_submit(app->pool, ES_PRIO_REQUEST, ex->client, &cost, run_on_pool, ex_dropped, ex);
    if (rc < 0) {
        es_reply_problem(&cx->reply, ES_PROB_BUSY,
                         atomic_load(&app->stopping) ? "the server is shutting down"
                         : rc == ES_POOL_CLIENT_SHARE
                             ? "this client's share of the job queue is used up; wait for its running requests"
                             : "every compute thread is busy and the job queue is full",
                         NULL, ex->path, ex->id);
        pthread_mutex_lock(&ex->lock);
        ex->computed = true;
        pthread_mutex_unlock(&ex->lock);
        give_up_claim(ex);
        ex_resume(ex);
        ex_unref(ex); /* the compute side's reference: never queued */
    }
    return ES_EXCHANGE_SUSPENDED;
}

/* ---------------------------------------------------------------- 202 jobs */

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
        es_reply_problem(&rep, es_problem_kind_of(err.code), err.message, err.param, "", NULL);
    else if (got == 0)
        es_reply_problem(&rep, ES_PROB_BUSY, "the computation this job waited for was abandoned: ask again", NULL,
                         "", NULL);
    es_ajob_finish(pj->api, &rep);
    es_reply_release(&rep);
    es_ajob_release(pj->api);
    free(pj);
}

/* Answer a request the gate made a job (cx->async: asked for, or predicted
 * past limits.sync_seconds) with 202 at once: the live job of the same reply
 * if there is one; else a new one that computes it without the connection
 * (this exchange, on the pool, with its claim), or takes the reply another
 * request is computing (its pending). A client over max_jobs_per_client gets
 * the 400, a full queue 503. */
static es_exchange_step defer_async(es_exchange *ex)
{
    es_app *app = ex->hub->app;
    es_ctx *cx = &ex->cx;
    const es_limits *lim = &cx->reg->limits;
    es_reply rep = {0};
    es_err err;
    es_ajob *a = es_jobs_find(app->jobs, lim, cx->key, ex->owner);
    if (!a) {
        char *url = result_url(ex);
        a = es_ajob_new(cx->key, url, ex->client, ex->owner, &cx->cost);
        free(url);
        unsigned retry_s = 0;
        if (es_jobs_add(app->jobs, a, lim, &retry_s, &err) < 0) {
            es_reply_problem(&rep, ES_PROB_TOO_MANY_JOBS, err.message, err.param, ex->path, ex->id);
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
            ex->api = es_ajob_retain(a);
            atomic_store(&ex->async, true);
            ex->resumed = true; /* no connection to resume: its 202 is sent now */
            es_task_cost cost = es_task_cost_of(cx);
            to_compute_side(cx);
            ex_ref(ex);
            ex->stats.computed = true;
            if (es_pool_submit(app->pool, ES_PRIO_REQUEST, ex->client, &cost, run_on_pool, ex_dropped, ex) < 0) {
                es_ajob_cancel(a);
                give_up_claim(ex);
                ex_unref(ex);
                ex->stats.computed = false;
                es_reply_problem(&rep, ES_PROB_BUSY, "every compute thread is busy and the job queue is full", NULL,
                                 ex->path, ex->id);
                es_ajob_release(a);
                a = NULL;
            }
        }
    }
    if (!atomic_load(&ex->async) && cx->claim) /* joined a job: its computation is not ours */
        give_up_claim(ex);
    if (cx->pending)
        es_results_release(app->results, cx->pending);
    cx->pending = NULL;
    if (a) {
        ex->stats.job = true;
        accepted_reply(lim, ex, a, &rep);
    }
    es_ajob_release(a);
    return send_now(ex, &rep);
}

/* A computation past its synchronous window (limits.sync_seconds, or the
 * client's Prefer: wait) becomes a job: registered, it goes on without its
 * client, who gets 202 and the job's Location (es_exchange_resumed); if the
 * client holds too many jobs it stays a synchronous request (its deadline,
 * 504). Called by the watcher with ex's lock held. */
static void become_job(es_exchange *ex)
{
    es_err err;
    ex->sync_deadline = 0; /* decided once */
    if (ex->computed || es_jobs_add(ex->hub->app->jobs, ex->api, &ex->cx.reg->limits, NULL, &err) < 0)
        return;
    atomic_store(&ex->async, true);
    ex->accepted = true;
    ex->resumed = true;
    ex->stats.job = true;
    ex->hub->io.resume(ex->conn);
}

/* ---------------------------------------------------------------- the watcher */

/* See exchange.h: answer suspended exchanges whose deadline passed (504),
 * whose client left (closed) or, once the pool abandons work at shutdown, all
 * of them (503); their computations stop at the next checkpoint, except one
 * whose client left while identical requests still wait for its reply
 * (ex_dropped). A waiter answered here lets go of the reply it waited for. */
void es_exchanges_tick(es_exchanges *h)
{
    double now = es_now();
    bool abandon_all = es_pool_abandoned(h->app->pool);
    pthread_mutex_lock(&h->lock);
    for (es_exchange *ex = h->list; ex; ex = ex->next) {
        /* under the exchange's lock the compute thread cannot resume the
         * connection, so it stays valid while it is looked at */
        pthread_mutex_lock(&ex->lock);
        /* the deadline before the window: a watcher that runs late (a loaded
         * machine) past both answers the 504 the request is owed, not a job */
        bool late = !ex->resumed && ex->deadline > 0 && now > ex->deadline, gone = false;
        if (!ex->resumed && !late && !abandon_all && ex->sync_deadline > 0 && now > ex->sync_deadline)
            become_job(ex);
        if (!ex->resumed)
            gone = !late && !abandon_all && h->io.client_gone(ex->conn);
        bool answer = !ex->resumed && (late || gone || abandon_all);
        if (answer) {
            ex->resumed = true;
            ex->outcome = late ? ES_PROB_TIMEOUT : ES_PROB_BUSY;
            ex->gone = gone;
            atomic_store(gone ? &ex->client_left : &ex->abandon, true);
            if (ex->pending) /* a waiter no more: its computation may stop unless others wait */
                es_results_release(h->app->results, ex->pending);
            ex->pending = NULL;
            h->io.resume(ex->conn);
        }
        pthread_mutex_unlock(&ex->lock);
    }
    pthread_mutex_unlock(&h->lock);
}

static void *watch(void *arg)
{
    es_exchanges *h = arg;
    long ns = (long)h->watch_ms * 1000000L;
    while (!atomic_load(&h->stop)) {
        nanosleep(&(struct timespec){ns / 1000000000L, ns % 1000000000L}, NULL);
        es_exchanges_tick(h);
    }
    return NULL;
}

/* See exchange.h. */
es_exchanges *es_exchanges_new(es_app *app, const es_exchange_io *io, unsigned watch_ms)
{
    es_exchanges *h = es_calloc(1, sizeof *h);
    h->app = app;
    h->io = *io;
    h->watch_ms = watch_ms;
    pthread_mutex_init(&h->lock, NULL);
    if (watch_ms > 0) {
        if (pthread_create(&h->watcher, NULL, watch, h) != 0) {
            pthread_mutex_destroy(&h->lock);
            free(h);
            return NULL;
        }
        h->has_watcher = true;
    }
    return h;
}

/* See exchange.h. */
void es_exchanges_free(es_exchanges *h)
{
    if (!h)
        return;
    atomic_store(&h->stop, true);
    if (h->has_watcher)
        pthread_join(h->watcher, NULL);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

/* ---------------------------------------------------------------- the HTTP side */

/* DELETE /v1/jobs/{id}: cancel it (its computation stops at its next block;
 * 204) or forget a finished one (204); 404 when there is no such job of this
 * owner (another client's job is not there for it: the same request that
 * made the job, same address and same bearer token, cancels it). */
static void cancel_job(es_exchange *ex, es_reply *rep)
{
    es_app *app = ex->hub->app;
    const es_limits *lim = &ex->cx.reg->limits;
    const char *id = ex->cx.slug;
    es_ajob *a = es_jobs_get(app->jobs, lim, id, ex->owner);
    if (!a && es_jobs_remote_cancel(app->jobs, lim, id, ex->owner)) { /* another replica's */
        es_info("job %s: cancel or forget asked for its replica", id);
        *rep = (es_reply){.status = 204, .body = (char *)"", .body_static = true, .cache_control = "no-store"};
        return;
    }
    if (!a) {
        es_reply_problem(rep, ES_PROB_NOT_FOUND, "no such job of this client (a finished job is kept "
                         "limits.job_ttl_s seconds)", "id", ex->path, ex->id);
        return;
    }
    if (es_ajob_cancel(a))
        es_info("job %s cancelled", id);
    else if (es_jobs_forget(app->jobs, a))
        es_info("job %s forgotten", id);
    es_ajob_release(a);
    *rep = (es_reply){.status = 204, .body = (char *)"", .body_static = true, .cache_control = "no-store"};
}

/* Route and run the request as far as the gate allows on this thread, then
 * send its reply or problem, or defer it. */
static es_exchange_step exchange_run(es_exchange *ex)
{
    es_ctx *cx = &ex->cx;
    if (!ex->route) {
        es_reply_problem(&cx->reply, ES_PROB_NOT_FOUND, "no such path (see /openapi.yaml)", NULL, ex->path, ex->id);
    } else if (strcmp(ex->method, "DELETE") == 0) { /* only /v1/jobs/{id} gets here */
        cancel_job(ex, &cx->reply);
    } else {
        run_route(ex, NULL);
    }
    ex->analysis = cx->analysis != NULL;
    if (cx->deferred && cx->async)
        return defer_async(ex);
    if (cx->deferred)
        return defer(ex);
    es_reply rep = cx->reply;
    cx->reply = (es_reply){0};
    return send_now(ex, &rep);
}

/* See exchange.h. */
es_exchange_step es_exchange_answer(es_exchange *ex, const es_exchange_input *in, es_query *q)
{
    es_query_free(&ex->query);
    ex->query = *q;
    es_query_init(q);
    ex->if_none_match = dup_or_null(in->if_none_match);
    ex->accept = dup_or_null(in->accept);
    es_ctx *cx = &ex->cx;
    cx->if_none_match = ex->if_none_match;
    cx->accept = ex->accept;
    cx->may_defer = ex->hub->app->pool != NULL;
    cx->accepts_gzip = es_accepts_gzip(in->accept_encoding);
    es_prefer(in->prefer, &cx->prefer_async, &cx->prefer_wait);
    ex->prefer_async = cx->prefer_async;
    ex->prefer_wait = cx->prefer_wait;
    return exchange_run(ex);
}

/* See exchange.h. A PUT, or a DELETE that locks and reads uploads.dir, goes
 * to the compute pool; any other DELETE is finished here (a pointer swap). */
es_exchange_step es_exchange_write(es_exchange *ex, es_upload *u)
{
    ex->upload = u;
    if (es_upload_on_pool(u) && ex->hub->app->pool)
        return defer(ex);
    es_reply rep = {0};
    run_upload(ex, &rep);
    es_upload_free(ex->upload);
    ex->upload = NULL;
    return send_now(ex, &rep);
}

/* A waiter whose computation was abandoned runs again from the start (it may
 * claim the reply now), routed as it was. */
static es_exchange_step run_again(es_exchange *ex)
{
    es_ctx *cx = &ex->cx;
    es_parsed_free(cx->parsed);
    es_reply_release(&cx->reply);
    cx->parsed = NULL;
    cx->reply = (es_reply){0};
    cx->claim = cx->pending = NULL;
    cx->deferred = cx->async = false;
    cx->key[0] = '\0';
    cx->cost = (es_cost){0};
    cx->render = (es_render_opts){0};
    cx->may_defer = ex->hub->app->pool != NULL;
    ex->api = NULL; /* a waiter has no record */
    ex->deadline = ex->sync_deadline = 0;
    atomic_store(&ex->abandon, false);
    atomic_store(&ex->client_left, false);
    return exchange_run(ex);
}

/* See exchange.h: the outcome on the call after the connection resumed: the
 * computation's own, a 202 for a job, the reply it waited for, or the
 * watcher's problem (the computation may still be running and owns cx then). */
es_exchange_step es_exchange_resumed(es_exchange *ex)
{
    ex->suspended = false;
    pthread_mutex_lock(&ex->lock);
    es_problem_kind kind = ex->outcome;
    bool gone = ex->gone;
    pthread_mutex_unlock(&ex->lock);
    const es_catalogue *reg = ex->cx.reg;
    if (gone)
        return ES_EXCHANGE_GONE; /* close: nobody is listening */
    if (ex->accepted) { /* it became a job: its Location */
        es_reply rep = {0};
        accepted_reply(&reg->limits, ex, ex->api, &rep);
        return send_now(ex, &rep);
    }
    if (kind != ES_PROB_COUNT) {
        char detail[256];
        if (kind == ES_PROB_TIMEOUT)
            snprintf(detail, sizeof detail,
                     "the computation did not finish within its deadline of %g s (limits.request_timeout_s = %u s, "
                     "or the request's Prefer: wait up to limits.max_wait_s = %u s)",
                     es_deadline_seconds(&reg->limits, ex->prefer_wait), reg->limits.request_timeout_s,
                     reg->limits.max_wait_s);
        else
            snprintf(detail, sizeof detail, "the server is shutting down (after %u s)", reg->server.shutdown_grace_s);
        return send_problem(ex, kind, detail, NULL);
    }
    if (ex->pending) {
        es_reply rep = {0};
        es_err err = {0};
        int got = es_results_take(ex->hub->app->results, ex->pending, &rep, &err);
        ex->pending = NULL;
        return got > 0 ? send_now(ex, &rep)
             : got < 0 ? send_problem(ex, es_problem_kind_of(err.code), err.message, err.param)
                       : run_again(ex);
    }
    es_reply rep = ex->cx.reply;
    ex->cx.reply = (es_reply){0};
    return send_now(ex, &rep);
}
