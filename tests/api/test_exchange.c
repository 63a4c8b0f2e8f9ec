/* Unit tests of the exchange (src/api/exchange.c) without a socket: fake
 * transport callbacks record suspensions, resumptions and the replies sent,
 * and drive one request through each path of its life: answered now, computed
 * on the pool, waiting for an identical request's reply, a 202 job (asked
 * for, or past the synchronous window), its client gone, its deadline passed.
 * The watcher is driven by hand (es_exchanges_tick); the pool has one thread,
 * which a blocker task holds where a test needs a request to stay queued. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_main.h"
#include "embedscope/config.h"
#include "embedscope/exchange.h"
#include "embedscope/params.h"
#include "embedscope/results.h"

static const char *const config =
    "{\"limits\": {\"max_k\": 6, \"max_rows\": 64, \"request_timeout_s\": 30, \"max_wait_s\": 100},"
    " \"models\": {\"m\": {\"matrices\": {"
    "   \"pe\": {\"generator\": \"sinusoidal\", \"n_positions\": 16, \"d_model\": 8, \"base\": 10000},"
    "   \"rope\": {\"generator\": \"rope\", \"n_positions\": 16, \"d_model\": 8}}}}}";

#define PCA "/v1/models/m/matrices/pe/pca"

/* ---------------------------------------------------------------- the fake transport */

/* One fake connection: what the exchange did with it. */
typedef struct fake_conn {
    int suspends, resumes, sends;
    bool gone;           /* what client_gone answers */
    unsigned status;     /* of the last reply sent */
    char *body;          /* its body (NUL-terminated copy) */
    char location[128];
    char etag[40];       /* of the last reply sent */
} fake_conn;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;

static void fake_suspend(void *arg)
{
    pthread_mutex_lock(&lock);
    ((fake_conn *)arg)->suspends++;
    pthread_mutex_unlock(&lock);
}

static void fake_resume(void *arg)
{
    pthread_mutex_lock(&lock);
    ((fake_conn *)arg)->resumes++;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

static bool fake_gone(void *arg) { return ((fake_conn *)arg)->gone; }

static bool fake_send(void *arg, es_reply *rep)
{
    fake_conn *c = arg;
    c->sends++;
    c->status = rep->status;
    free(c->body);
    c->body = es_malloc(rep->len + 1);
    if (rep->len) /* a 304 has no body */
        memcpy(c->body, rep->body, rep->len);
    c->body[rep->len] = '\0';
    snprintf(c->location, sizeof c->location, "%s", rep->location ? rep->location : "");
    snprintf(c->etag, sizeof c->etag, "%s", rep->etag);
    free(rep->location);
    rep->location = NULL;
    es_reply_release(rep);
    return true;
}

/* Wait until the exchange resumed conn (the transport's next call follows). */
static void wait_resumed(fake_conn *c)
{
    pthread_mutex_lock(&lock);
    while (c->resumes == 0)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
}

static es_app app;
static es_exchanges *hub;

static void setup(void)
{
    es_catalogue *reg;
    es_err err;
    ck_assert_msg(es_config_load_text(config, "test", ".", &reg, &err) == 0, "%s", err.message);
    ck_assert_int_eq(es_app_init(&app, reg, &err), 0);
    ck_assert_int_eq(es_app_start_compute(&app, 1, 16, &err), 0);
    hub = es_exchanges_new(&app, &(es_exchange_io){fake_suspend, fake_resume, fake_gone, fake_send}, 0);
    ck_assert_ptr_nonnull(hub);
}

static void teardown(void)
{
    es_app_free(&app); /* the pool first: every computation has ended */
    es_exchanges_free(hub);
}

/* A GET of path?pairs with a Prefer header (or NULL), t0 seconds ago; its step. */
static es_exchange_step get(es_exchange **ex, fake_conn *c, const char *path, const char *const *pairs,
                            const char *prefer, double age)
{
    *ex = es_exchange_new(hub, &(es_exchange_head){.method = "GET", .path = path, .request_id = "t",
                                                     .client = "127.0.0.1", .owner = "o", .prefix = "",
                                                     .t0 = es_now() - age, .conn = c});
    es_query q;
    es_query_init(&q);
    for (; pairs && pairs[0]; pairs += 2)
        es_query_add(&q, pairs[0], pairs[1]);
    return es_exchange_answer(*ex, &(es_exchange_input){.prefer = prefer}, &q);
}

/* A task holding the pool's one thread until released. */
static atomic_bool held, release_it;

static void blocker(void *arg, bool cancelled)
{
    (void)arg;
    (void)cancelled;
    atomic_store(&held, true);
    while (!atomic_load(&release_it))
        nanosleep(&(struct timespec){0, 1000000}, NULL);
}

static void hold_pool(void)
{
    atomic_store(&held, false);
    atomic_store(&release_it, false);
    ck_assert_int_eq(es_pool_submit(app.pool, ES_PRIO_REQUEST, "blocker", NULL, blocker, NULL, NULL), 0);
    while (!atomic_load(&held))
        nanosleep(&(struct timespec){0, 1000000}, NULL);
}

static void release_pool(void) { atomic_store(&release_it, true); }

/* Wait until the pool's one thread has run everything queued before now. */
static atomic_bool marked;

static void marker(void *arg, bool cancelled)
{
    (void)arg;
    (void)cancelled;
    atomic_store(&marked, true);
}

static void drain_pool(void)
{
    atomic_store(&marked, false);
    ck_assert_int_eq(es_pool_submit(app.pool, ES_PRIO_REQUEST, "marker", NULL, marker, NULL, NULL), 0);
    while (!atomic_load(&marked))
        nanosleep(&(struct timespec){0, 1000000}, NULL);
}

static void conn_free(fake_conn *c) { free(c->body); }

/* ---------------------------------------------------------------- the paths */

START_TEST(cheap_request_is_answered_at_once)
{
    fake_conn c = {0};
    es_exchange *ex;
    ck_assert_int_eq(get(&ex, &c, "/v1/models", NULL, NULL, 0), ES_EXCHANGE_SENT);
    ck_assert_int_eq(c.status, 200);
    ck_assert_int_eq(c.suspends, 0);
    ck_assert(!es_exchange_unanswered(ex));
    es_exchange_end(ex);

    ck_assert_int_eq(get(&ex, &c, "/v1/no/such/path", NULL, NULL, 0), ES_EXCHANGE_SENT);
    ck_assert_int_eq(c.status, 404);
    ck_assert_ptr_null(es_exchange_route(ex));
    es_exchange_end(ex);
    conn_free(&c);
}
END_TEST

/* The cache-miss PCA of issue 30: routed once, keyed and hashed once, though
 * its gate runs on the HTTP thread and its computation on the pool. */
START_TEST(cache_miss_is_computed_on_the_pool_routed_and_keyed_once)
{
    fake_conn c = {0};
    es_exchange *ex;
    static const char *const q[] = {"k", "2", NULL};
    ck_assert_int_eq(get(&ex, &c, PCA, q, "wait=600", 0), ES_EXCHANGE_SUSPENDED);
    ck_assert_int_eq(c.suspends, 1);
    wait_resumed(&c);
    ck_assert(es_exchange_unanswered(ex));
    ck_assert_int_eq(es_exchange_resumed(ex), ES_EXCHANGE_SENT);
    ck_assert_int_eq(c.status, 200);
    ck_assert_ptr_nonnull(strstr(c.body, "\"input\""));
    es_exchange_stats st;
    es_exchange_get_stats(ex, &st);
    ck_assert(st.computed);
    ck_assert(!st.waited && !st.job);
    ck_assert_uint_eq(st.route_lookups, 1);
    ck_assert_uint_eq(st.gates, 1);
    ck_assert_uint_eq(st.keys, 1);
    char applied[32];
    es_exchange_preference_applied(ex, 200, applied, sizeof applied);
    ck_assert_str_eq(applied, "wait=600");
    es_exchange_end(ex);

    /* the same request again: a cached copy, answered at once */
    fake_conn again = {0};
    ck_assert_int_eq(get(&ex, &again, PCA, q, "wait=600", 0), ES_EXCHANGE_SENT);
    ck_assert_int_eq(again.status, 200);
    ck_assert_str_eq(again.body, c.body);
    es_exchange_end(ex);
    conn_free(&c);
    conn_free(&again);
}
END_TEST

/* get() with an If-None-Match and an Accept (either NULL). */
static es_exchange_step get_with(es_exchange **ex, fake_conn *c, const char *path, const char *const *pairs,
                                 const char *if_none_match, const char *accept)
{
    *ex = es_exchange_new(hub, &(es_exchange_head){.method = "GET", .path = path, .request_id = "t",
                                                     .client = "127.0.0.1", .owner = "o", .prefix = "",
                                                     .t0 = es_now(), .conn = c});
    es_query q;
    es_query_init(&q);
    for (; pairs && pairs[0]; pairs += 2)
        es_query_add(&q, pairs[0], pairs[1]);
    return es_exchange_answer(*ex, &(es_exchange_input){.if_none_match = if_none_match, .accept = accept,
                                                         .prefer = "wait=600"}, &q);
}

/* The stats of one more GET of path?q (answered at once) on this thread, its body into c. */
static es_exchange_stats repeat(fake_conn *c, const char *path, const char *const *q, const char *inm,
                                const char *accept)
{
    es_exchange *ex;
    pthread_mutex_lock(&lock);
    c->resumes = c->suspends = 0;
    pthread_mutex_unlock(&lock);
    es_exchange_step step = get_with(&ex, c, path, q, inm, accept);
    if (step == ES_EXCHANGE_SUSPENDED) {
        wait_resumed(c);
        step = es_exchange_resumed(ex);
    }
    ck_assert_int_eq(step, ES_EXCHANGE_SENT);
    es_exchange_stats st;
    es_exchange_get_stats(ex, &st);
    es_exchange_end(ex);
    return st;
}

typedef struct other_thread {
    const char *const *q;
    es_exchange_stats st;
    fake_conn c;
} other_thread;

static void *repeat_elsewhere(void *arg)
{
    other_thread *o = arg;
    o->st = repeat(&o->c, PCA, o->q, NULL, NULL);
    return NULL;
}

/* A repeated target is answered from the HTTP thread's target memo: the same
 * reply, 304 for its ETag, without parsing, keying or hashing; a catalogue
 * published since, another parameter value, another representation, another thread (whose table is its
 * own: nothing is shared between threads) or a reply gone from the cache take
 * the full path. */
/* Another thread's hold on the app's catalogue. */
static void *hold_elsewhere(void *arg)
{
    es_catalogue_hold **out = arg;
    *out = es_app_hold(&app);
    return NULL;
}

/* A request's catalogue comes from its thread's hold: the same hold request
 * after request (no lock, no count on the catalogue itself), another on
 * another thread; a publication is seen by the next request, the request
 * still running keeps the catalogue it started with, and every thread's own
 * hold is taken away at once (an idle thread keeps no replaced catalogue: it
 * goes with its last request). */
START_TEST(requests_take_their_threads_hold_on_the_catalogue)
{
    es_catalogue_hold *a = es_app_hold(&app), *b = es_app_hold(&app), *there = NULL;
    ck_assert_ptr_eq(a, b);
    es_catalogue_hold_release(b);
    es_catalogue *old = es_catalogue_retain(app.reg);
    ck_assert_ptr_eq(es_catalogue_of(a), old);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, hold_elsewhere, &there), 0);
    pthread_join(t, NULL);
    ck_assert_ptr_ne(there, a);
    ck_assert_ptr_eq(es_catalogue_of(there), old);
    es_catalogue_hold_release(there);
    int refs = old->refs; /* the app's, ours, this thread's hold's and the other thread's hold's */
    es_catalogue *next;
    es_err err;
    ck_assert_msg(es_config_load_text(config, "test", ".", &next, &err) == 0, "%s", err.message);
    es_app_publish(&app, next);
    ck_assert_int_eq(old->refs, refs - 2); /* the app's and the idle thread's hold gone */
    es_catalogue_hold *c = es_app_hold(&app);
    ck_assert_ptr_eq(es_catalogue_of(c), next);
    ck_assert_ptr_eq(es_catalogue_of(a), old); /* the running request's */
    es_catalogue_hold_release(a);
    ck_assert_int_eq(old->refs, refs - 3); /* this thread's hold went with its last request */
    es_catalogue_hold_release(c);
    es_catalogue_free(old);
}
END_TEST

START_TEST(repeated_target_is_answered_from_the_memo)
{
    static const char *const q[] = {"k", "2", "rows", "1:", NULL};
    fake_conn first = {0}, again = {0};
    es_exchange_stats st = repeat(&first, PCA, q, NULL, NULL);
    ck_assert(st.computed && !st.memo);
    ck_assert_int_eq(first.status, 200);
    st = repeat(&again, PCA, q, NULL, NULL);
    ck_assert(st.memo);
    ck_assert_uint_eq(st.gates, 0);
    ck_assert_uint_eq(st.keys, 0);
    ck_assert_int_eq(again.status, 200);
    ck_assert_str_eq(again.body, first.body);

    ck_assert_str_eq(again.etag, first.etag);
    /* another value of a parameter is another target */
    static const char *const k3[] = {"k", "3", "rows", "1:", NULL};
    fake_conn other = {0};
    st = repeat(&other, PCA, k3, NULL, NULL);
    ck_assert(!st.memo);
    ck_assert_uint_eq(st.gates, 1);
    ck_assert_str_ne(other.body, first.body);
    conn_free(&other);
    es_app_publish(&app, es_catalogue_retain(app.reg)); /* a new catalogue: the memo's entries do not hold */
    st = repeat(&again, PCA, q, NULL, NULL);
    ck_assert(!st.memo);
    ck_assert_uint_eq(st.gates, 1);
    ck_assert_str_eq(again.body, first.body);

    /* another representation is another target */
    st = repeat(&again, PCA, q, NULL, "text/csv");
    ck_assert(!st.memo);
    ck_assert_uint_eq(st.gates, 1);
    ck_assert_ptr_null(strstr(again.body, "\"input\""));
    st = repeat(&again, PCA, q, NULL, "text/csv");
    ck_assert(st.memo);

    /* another thread has a table of its own */
    other_thread o = {.q = q};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, repeat_elsewhere, &o), 0);
    pthread_join(t, NULL);
    ck_assert(!o.st.memo);
    ck_assert_uint_eq(o.st.gates, 1);
    ck_assert_str_eq(o.c.body, first.body);
    conn_free(&o.c);

    /* gone from the response cache: computed again through the full path, no stale reply */
    es_results_free(app.results);
    app.results = es_results_new(64 << 20);
    st = repeat(&again, PCA, q, NULL, NULL);
    ck_assert(!st.memo && st.computed);
    /* the same numbers (its "cost" is the prediction of this computation) */
    ck_assert_str_eq(strstr(again.body, "\"explained_variance_ratio\""), strstr(first.body, "\"explained_variance_ratio\""));
    conn_free(&first);
    conn_free(&again);
}
END_TEST

/* A 304 from the memo: the If-None-Match of the gate's ETag. */
START_TEST(memo_answers_304_for_its_etag)
{
    static const char *const q[] = {"k", "2", NULL};
    fake_conn c = {0};
    repeat(&c, PCA, q, NULL, NULL);
    char etag[40];
    snprintf(etag, sizeof etag, "%s", c.etag);
    ck_assert(etag[0]);
    es_exchange_stats st = repeat(&c, PCA, q, etag, NULL);
    ck_assert(st.memo);
    ck_assert_int_eq(c.status, 304);
    st = repeat(&c, PCA, q, "W/\"0000\"", NULL);
    ck_assert(st.memo);
    ck_assert_int_eq(c.status, 200);
    conn_free(&c);
}
END_TEST

/* Two identical requests of path?q while the pool is held: the first computes,
 * the second waits for its reply; both get it, keyed once each. */
static void computed_once(const char *path, const char *const *q)
{
    fake_conn a = {0}, b = {0};
    es_exchange *xa, *xb;
    hold_pool();
    ck_assert_int_eq(get(&xa, &a, path, q, "wait=600", 0), ES_EXCHANGE_SUSPENDED);
    ck_assert_int_eq(get(&xb, &b, path, q, "wait=600", 0), ES_EXCHANGE_SUSPENDED);
    es_exchange_stats sa, sb;
    es_exchange_get_stats(xa, &sa);
    es_exchange_get_stats(xb, &sb);
    ck_assert(sa.computed && !sa.waited);
    ck_assert(sb.waited && !sb.computed);
    release_pool();
    wait_resumed(&a);
    wait_resumed(&b);
    ck_assert_int_eq(es_exchange_resumed(xa), ES_EXCHANGE_SENT);
    ck_assert_int_eq(es_exchange_resumed(xb), ES_EXCHANGE_SENT);
    ck_assert_int_eq(a.status, 200);
    ck_assert_int_eq(b.status, 200);
    ck_assert_str_eq(a.body, b.body);
    es_exchange_get_stats(xa, &sa);
    ck_assert_uint_eq(sa.keys, 1);
    es_exchange_end(xa);
    es_exchange_end(xb);
    conn_free(&a);
    conn_free(&b);
}

START_TEST(identical_request_waits_for_the_one_computation)
{
    static const char *const q[] = {"k", "3", NULL};
    computed_once(PCA, q);
}
END_TEST

/* The hand-written analyses (compare.c, positional.c) are keyed by the HTTP
 * thread's gate like the table's, and their compute side builds no key text
 * again (it did: the canonical text of every matrix, for nothing). */
static void keyed_once(const char *path, const char *const *q)
{
    fake_conn c = {0};
    es_exchange *ex;
    ck_assert_int_eq(get(&ex, &c, path, q, "wait=600", 0), ES_EXCHANGE_SUSPENDED);
    wait_resumed(&c);
    ck_assert_int_eq(es_exchange_resumed(ex), ES_EXCHANGE_SENT);
    ck_assert_msg(c.status == 200, "%s: %u %s", path, c.status, c.body);
    es_exchange_stats st;
    es_exchange_get_stats(ex, &st);
    ck_assert(st.computed);
    ck_assert_uint_eq(st.route_lookups, 1);
    ck_assert_uint_eq(st.gates, 1);
    ck_assert_msg(st.keys == 1, "%s: its key text built %u times", path, st.keys);
    es_exchange_end(ex);
    conn_free(&c);
}

START_TEST(compare_and_positional_are_keyed_once)
{
    static const char *const compare[] = {"matrices", "m/pe,m/rope", "analysis", "pca", "k", "2", NULL};
    static const char *const rope[] = {"matrix", "m/rope", NULL};
    keyed_once("/v1/compare", compare);
    keyed_once("/v1/rope/relative", rope);
}
END_TEST

START_TEST(identical_compares_compute_once)
{
    static const char *const q[] = {"matrices", "m/pe,m/rope", "analysis", "spectrum", NULL};
    computed_once("/v1/compare", q);
}
END_TEST

START_TEST(respond_async_is_a_202_job_at_once)
{
    static const char *const q[] = {"k", "4", NULL};
    fake_conn c = {0};
    es_exchange *ex;
    ck_assert_int_eq(get(&ex, &c, PCA, q, "respond-async", 0), ES_EXCHANGE_SENT);
    ck_assert_int_eq(c.status, 202);
    ck_assert_int_eq(c.suspends, 0);
    ck_assert_int_eq(strncmp(c.location, "/v1/jobs/", 9), 0);
    es_exchange_stats st;
    es_exchange_get_stats(ex, &st);
    ck_assert(st.job && st.computed);
    char applied[32];
    es_exchange_preference_applied(ex, 202, applied, sizeof applied);
    ck_assert_str_eq(applied, "respond-async");
    es_exchange_end(ex); /* the computation goes on without the connection */
    conn_free(&c);
}
END_TEST

START_TEST(past_the_synchronous_window_becomes_a_job)
{
    static const char *const q[] = {"k", "5", NULL};
    fake_conn c = {0};
    es_exchange *ex;
    hold_pool();
    /* arrived 2 s ago with a 1 s window: the watcher's next round makes it a job */
    ck_assert_int_eq(get(&ex, &c, PCA, q, "wait=1", 2), ES_EXCHANGE_SUSPENDED);
    es_exchanges_tick(hub);
    ck_assert_int_eq(c.resumes, 1);
    ck_assert_int_eq(es_exchange_resumed(ex), ES_EXCHANGE_SENT);
    ck_assert_int_eq(c.status, 202);
    ck_assert_int_eq(strncmp(c.location, "/v1/jobs/", 9), 0);
    es_exchange_stats st;
    es_exchange_get_stats(ex, &st);
    ck_assert(st.job);
    release_pool();
    es_exchange_end(ex);
    conn_free(&c);
}
END_TEST

START_TEST(client_gone_is_dropped_unanswered)
{
    static const char *const q[] = {"k", "6", NULL};
    fake_conn c = {0};
    es_exchange *ex;
    hold_pool();
    ck_assert_int_eq(get(&ex, &c, PCA, q, "wait=600", 0), ES_EXCHANGE_SUSPENDED);
    es_exchanges_tick(hub);
    ck_assert_int_eq(c.resumes, 0); /* still there */
    c.gone = true;
    es_exchanges_tick(hub);
    ck_assert_int_eq(c.resumes, 1);
    ck_assert_int_eq(es_exchange_resumed(ex), ES_EXCHANGE_GONE);
    ck_assert_int_eq(c.sends, 0);
    release_pool(); /* its computation is dropped unrun, its resume not repeated */
    es_exchange_end(ex);
    drain_pool(); /* the one thread is past the dropped computation */
    ck_assert_int_eq(c.resumes, 1);
    ck_assert_ptr_null(c.body);
    conn_free(&c);
}
END_TEST

/* A client's Prefer: wait=N moves the deadline past limits.request_timeout_s
 * (up to limits.max_wait_s), for a computing request and for one waiting for
 * an identical request's reply alike: both arrived 31 s ago, past the 30 s,
 * and are still waited for; a request without a wait is answered 504. */
START_TEST(prefer_wait_extends_the_deadline)
{
    static const char *const q[] = {"k", "2", "center", "columns", NULL};
    static const char *const other[] = {"k", "3", "center", "columns", NULL};
    fake_conn a = {0}, b = {0}, c = {0};
    es_exchange *xa, *xb, *xc;
    hold_pool();
    ck_assert_int_eq(get(&xa, &a, PCA, q, "wait=600", 31), ES_EXCHANGE_SUSPENDED);
    ck_assert_int_eq(get(&xb, &b, PCA, q, "wait=600", 31), ES_EXCHANGE_SUSPENDED);
    ck_assert_int_eq(get(&xc, &c, PCA, other, NULL, 31), ES_EXCHANGE_SUSPENDED);
    es_exchange_stats st;
    es_exchange_get_stats(xb, &st);
    ck_assert(st.waited);
    es_exchanges_tick(hub);
    ck_assert_int_eq(a.resumes + b.resumes, 0); /* within their wait */
    ck_assert_int_eq(c.resumes, 1);
    ck_assert_int_eq(es_exchange_resumed(xc), ES_EXCHANGE_SENT);
    ck_assert_int_eq(c.status, 504);
    release_pool();
    wait_resumed(&a);
    wait_resumed(&b);
    ck_assert_int_eq(es_exchange_resumed(xa), ES_EXCHANGE_SENT);
    ck_assert_int_eq(es_exchange_resumed(xb), ES_EXCHANGE_SENT);
    ck_assert_int_eq(a.status, 200);
    ck_assert_int_eq(b.status, 200);
    es_exchange_end(xa);
    es_exchange_end(xb);
    es_exchange_end(xc);
    conn_free(&a);
    conn_free(&b);
    conn_free(&c);
}
END_TEST

/* ... but no further than limits.max_wait_s: arrived 101 s ago with wait=600. */
START_TEST(past_its_deadline_is_a_504)
{
    static const char *const q[] = {"k", "2", "center", "none", NULL};
    fake_conn c = {0};
    es_exchange *ex;
    hold_pool();
    /* past limits.max_wait_s = 100, which bounds its wait=600 */
    ck_assert_int_eq(get(&ex, &c, PCA, q, "wait=600", 101), ES_EXCHANGE_SUSPENDED);
    es_exchanges_tick(hub);
    ck_assert_int_eq(c.resumes, 1);
    ck_assert_int_eq(es_exchange_resumed(ex), ES_EXCHANGE_SENT);
    ck_assert_int_eq(c.status, 504);
    ck_assert_ptr_nonnull(strstr(c.body, "deadline of 100 s"));
    ck_assert_ptr_nonnull(strstr(c.body, "request_timeout_s"));
    release_pool();
    es_exchange_end(ex);
    conn_free(&c);
}
END_TEST

/* A watcher that runs late (a loaded machine) and finds a request past both
 * its deadline and its synchronous window answers the 504 it is owed: the
 * deadline comes first, the request does not turn into a job. */
START_TEST(past_deadline_and_window_is_a_504_not_a_job)
{
    static const char *const q[] = {"k", "3", "center", "none", NULL};
    fake_conn c = {0};
    es_exchange *ex;
    hold_pool();
    /* arrived 31 s ago: past request_timeout_s = 30 and past its wait=1 window */
    ck_assert_int_eq(get(&ex, &c, PCA, q, "wait=1", 31), ES_EXCHANGE_SUSPENDED);
    es_exchanges_tick(hub);
    ck_assert_int_eq(c.resumes, 1);
    ck_assert_int_eq(es_exchange_resumed(ex), ES_EXCHANGE_SENT);
    ck_assert_int_eq(c.status, 504);
    es_exchange_stats st;
    es_exchange_get_stats(ex, &st);
    ck_assert(!st.job);
    release_pool();
    es_exchange_end(ex);
    conn_free(&c);
}
END_TEST

START_TEST(cancelling_an_unknown_job_is_a_404)
{
    fake_conn c = {0};
    es_exchange *ex = es_exchange_new(hub, &(es_exchange_head){.method = "DELETE", .path = "/v1/jobs/nosuchjob",
                                                                .request_id = "t", .client = "c", .owner = "o",
                                                                .prefix = "", .t0 = es_now(), .conn = &c});
    es_query q;
    es_query_init(&q);
    ck_assert_int_eq(es_exchange_answer(ex, &(es_exchange_input){0}, &q), ES_EXCHANGE_SENT);
    ck_assert_int_eq(c.status, 404);
    es_exchange_end(ex);
    conn_free(&c);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("exchange");
    TCase *t = tcase_create("paths");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, cheap_request_is_answered_at_once);
    tcase_add_test(t, cache_miss_is_computed_on_the_pool_routed_and_keyed_once);
    tcase_add_test(t, identical_request_waits_for_the_one_computation);
    tcase_add_test(t, compare_and_positional_are_keyed_once);
    tcase_add_test(t, identical_compares_compute_once);
    tcase_add_test(t, respond_async_is_a_202_job_at_once);
    tcase_add_test(t, past_the_synchronous_window_becomes_a_job);
    tcase_add_test(t, client_gone_is_dropped_unanswered);
    tcase_add_test(t, prefer_wait_extends_the_deadline);
    tcase_add_test(t, past_its_deadline_is_a_504);
    tcase_add_test(t, past_deadline_and_window_is_a_504_not_a_job);
    tcase_add_test(t, cancelling_an_unknown_job_is_a_404);
    tcase_add_test(t, repeated_target_is_answered_from_the_memo);
    tcase_add_test(t, requests_take_their_threads_hold_on_the_catalogue);
    tcase_add_test(t, memo_answers_304_for_its_etag);
    suite_add_tcase(s, t);
    return s;
}

ES_CHECK_MAIN(suite)
