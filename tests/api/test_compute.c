/* Unit tests of the daemon's compute machinery without a socket: the compute
 * pool (pool.c: every task runs once, request jobs before background tasks, the
 * bounded queue, cancellation at stop) and the response cache (results.c:
 * copies, LRU eviction by bytes, single flight with waiters, oversized and
 * failed computations, a multi-threaded stress run for the sanitizers), and
 * their metrics families. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

#include "check_main.h"
#include "embedscope/config.h"
#include "embedscope/metrics.h"
#include "embedscope/negotiate.h"
#include "embedscope/pool.h"
#include "embedscope/render.h"
#include "embedscope/results.h"

static void sleep_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

/* ---------------------------------------------------------------- pool.c */

/* A gate the first task blocks on, so that others queue up behind it. */
typedef struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool open, entered;
} gate;

static gate the_gate;

static void gate_reset(void)
{
    pthread_mutex_init(&the_gate.lock, NULL);
    pthread_cond_init(&the_gate.cond, NULL);
    the_gate.open = the_gate.entered = false;
}

static void gate_open(void)
{
    pthread_mutex_lock(&the_gate.lock);
    the_gate.open = true;
    pthread_cond_broadcast(&the_gate.cond);
    pthread_mutex_unlock(&the_gate.lock);
}

/* Task: announce it runs, then wait for the gate. */
static void blocker(void *arg, bool cancelled)
{
    (void)arg;
    (void)cancelled;
    pthread_mutex_lock(&the_gate.lock);
    the_gate.entered = true;
    pthread_cond_broadcast(&the_gate.cond);
    while (!the_gate.open)
        pthread_cond_wait(&the_gate.cond, &the_gate.lock);
    pthread_mutex_unlock(&the_gate.lock);
}

/* Wait until the blocker occupies the pool's thread. */
static void wait_entered(void)
{
    pthread_mutex_lock(&the_gate.lock);
    while (!the_gate.entered)
        pthread_cond_wait(&the_gate.cond, &the_gate.lock);
    pthread_mutex_unlock(&the_gate.lock);
}

/* What tasks record: the order they ran in and how many were cancelled. */
static int order[64];
static atomic_int n_ran, n_cancelled;

static void record(void *arg, bool cancelled)
{
    order[atomic_fetch_add(&n_ran, 1)] = (int)(intptr_t)arg;
    if (cancelled)
        atomic_fetch_add(&n_cancelled, 1);
}

static void reset_record(void)
{
    memset(order, 0, sizeof order);
    atomic_store(&n_ran, 0);
    atomic_store(&n_cancelled, 0);
    gate_reset();
}

static void *open_gate_later(void *arg)
{
    (void)arg;
    sleep_ms(100);
    gate_open();
    return NULL;
}

START_TEST(pool_runs_every_task_once)
{
    reset_record();
    es_err err;
    es_pool *p = es_pool_new(4, 0, 64, &err);
    ck_assert_ptr_nonnull(p);
    for (int i = 0; i < 60; i++) {
        char client[16];
        snprintf(client, sizeof client, "c%d", i);
        ck_assert_int_eq(es_pool_submit(p, i % 2 ? ES_PRIO_BACKGROUND : ES_PRIO_REQUEST, client, NULL, record, NULL,
                                        (void *)(intptr_t)i), 0);
    }
    es_pool_stop(p, false);
    ck_assert_int_eq(atomic_load(&n_ran), 60);
    ck_assert_int_eq(atomic_load(&n_cancelled), 0);
    int seen[60] = {0};
    for (int i = 0; i < 60; i++)
        seen[order[i]]++;
    for (int i = 0; i < 60; i++)
        ck_assert_int_eq(seen[i], 1);
    es_pool_stats st;
    es_pool_get_stats(p, &st);
    ck_assert_uint_eq(st.threads, 4);
    ck_assert_uint_eq(st.completed, 60);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "c", NULL, record, NULL, NULL), ES_POOL_FULL); /* stopped */
    es_pool_free(p);
}
END_TEST

START_TEST(pool_runs_requests_before_background_and_bounds_the_queue)
{
    reset_record();
    es_err err;
    es_pool *p = es_pool_new(1, 0, 2, &err);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "x", NULL, blocker, NULL, NULL), 0);
    wait_entered();
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_BACKGROUND, NULL, NULL, record, NULL, (void *)3), 0);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_BACKGROUND, NULL, NULL, record, NULL, (void *)4), 0);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "a", NULL, record, NULL, (void *)1), 0);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "b", NULL, record, NULL, (void *)2), 0);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "c", NULL, record, NULL, (void *)9), ES_POOL_FULL); /* 2 wait */
    es_pool_stats st;
    es_pool_get_stats(p, &st);
    ck_assert_uint_eq(st.queued, 2);
    ck_assert_uint_eq(st.background, 2);
    ck_assert_uint_eq(st.running, 1);
    ck_assert_uint_eq(st.rejected, 1);
    ck_assert_uint_eq(st.queue_max, 2);
    gate_open();
    es_pool_stop(p, false);
    ck_assert_int_eq(atomic_load(&n_ran), 4);
    ck_assert_int_eq(order[0], 1);
    ck_assert_int_eq(order[1], 2);
    ck_assert_int_eq(order[2], 3);
    ck_assert_int_eq(order[3], 4);
    es_pool_free(p);
}
END_TEST

START_TEST(pool_stop_cancels_what_is_queued)
{
    reset_record();
    es_err err;
    es_pool *p = es_pool_new(1, 0, 8, &err);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "x", NULL, blocker, NULL, NULL), 0);
    wait_entered();
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, (const char *[]){"a", "b", "c"}[i], NULL, record, NULL,
                                        (void *)(intptr_t)i), 0);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_BACKGROUND, NULL, NULL, record, NULL, (void *)3), 0);
    pthread_t opener;
    pthread_create(&opener, NULL, open_gate_later, NULL);
    es_pool_stop(p, true); /* the running blocker finishes; the rest run cancelled */
    pthread_join(opener, NULL);
    ck_assert_int_eq(atomic_load(&n_ran), 4);
    ck_assert_int_eq(atomic_load(&n_cancelled), 4);
    es_pool_stop(p, true); /* idempotent */
    es_pool_free(p);
}
END_TEST

/* One client holds at most queue_max / ES_POOL_SHARE_DIVISOR of the queue; the
 * others still get in. */
START_TEST(pool_bounds_each_clients_share)
{
    reset_record();
    es_err err;
    es_pool *p = es_pool_new(1, 0, 4, &err); /* one slot is kept from any one client */
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "a", NULL, blocker, NULL, NULL), 0);
    wait_entered();
    for (int i = 1; i <= 3; i++)
        ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "a", NULL, record, NULL, (void *)(intptr_t)i), 0);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "a", NULL, record, NULL, (void *)9), ES_POOL_CLIENT_SHARE);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "b", NULL, record, NULL, (void *)4), 0);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "b", NULL, record, NULL, (void *)9), ES_POOL_FULL);
    es_pool_stats st;
    es_pool_get_stats(p, &st);
    ck_assert_uint_eq(st.queued, 4);
    ck_assert_uint_eq(st.rejected, 2);
    gate_open();
    es_pool_stop(p, false);
    ck_assert_int_eq(atomic_load(&n_ran), 4);
    ck_assert_int_eq(order[0], 1); /* nothing of a or b runs when the blocker ends: oldest first */
    es_pool_free(p);
}
END_TEST

/* es_pool_stop_within gives up on a task that outlives the deadline. */
START_TEST(pool_stop_within_reports_a_task_still_running)
{
    reset_record();
    es_err err;
    es_pool *p = es_pool_new(1, 0, 8, &err);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "a", NULL, blocker, NULL, NULL), 0);
    wait_entered();
    ck_assert(!es_pool_stop_within(p, 0.1));
    gate_open();
    ck_assert(es_pool_stop_within(p, 10));
    es_pool_free(p);
}
END_TEST

/* The lane for light work: with one of two threads kept for light jobs, a
 * second heavy job waits while the first runs, and a light job submitted
 * after it runs at once on the kept thread. */
START_TEST(pool_keeps_a_thread_for_light_jobs)
{
    reset_record();
    es_err err;
    es_pool *p = es_pool_new(2, 1, 8, &err);
    es_task_cost heavy = {.seconds = 30}, light = {.seconds = 0.01, .light = true};
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "flood", &heavy, blocker, NULL, NULL), 0);
    wait_entered();
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "flood", &heavy, record, NULL, (void *)1), 0);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_BACKGROUND, NULL, NULL, record, NULL, (void *)3), 0); /* heavy too */
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "other", &light, record, NULL, (void *)2), 0);
    while (atomic_load(&n_ran) == 0) /* the light job: no deadline, it needs no other job to end */
        sleep_ms(1);
    ck_assert_int_eq(order[0], 2);
    es_pool_stats st;
    es_pool_get_stats(p, &st);
    ck_assert_uint_eq(st.reserved, 1);
    ck_assert_uint_eq(st.heavy_running, 1); /* the blocker: the heavy job and the warming still wait */
    ck_assert_uint_eq(st.queued, 1);
    ck_assert_uint_eq(st.background, 1);
    ck_assert_uint_eq(st.light_completed, 1);
    ck_assert_int_eq(atomic_load(&n_ran), 1);
    gate_open();
    while (atomic_load(&n_ran) < 3) /* before the stop, which lets anything run */
        sleep_ms(1);
    es_pool_stop(p, false);
    ck_assert_int_eq(order[1], 1); /* then the request job before the background task, one at a time */
    ck_assert_int_eq(order[2], 3);
    es_pool_free(p);
}
END_TEST

/* One thread (nothing can be kept) runs anything; a kept share above the
 * threads leaves one for heavy work. */
START_TEST(pool_never_keeps_every_thread)
{
    reset_record();
    es_err err;
    es_pool *p = es_pool_new(2, 5, 8, &err);
    es_task_cost heavy = {.seconds = 30};
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "a", &heavy, record, NULL, (void *)1), 0);
    es_pool_stop(p, false);
    ck_assert_int_eq(atomic_load(&n_ran), 1);
    es_pool_stats st;
    es_pool_get_stats(p, &st);
    ck_assert_uint_eq(st.reserved, 1);
    es_pool_free(p);
}
END_TEST

/* The rendering's safe points: a task whose work is wanted no more (its
 * dropped callback says so) builds no more rows of a JSON grid, and the
 * context says why (the reply is then its 504 or 503, not a rendered table). */
static bool always_dropped(void *arg)
{
    (void)arg;
    return true;
}

typedef struct render_probe {
    size_t rows_built;
    es_err err;
    int check;
} render_probe;

static void render_task(void *arg, bool cancelled)
{
    (void)cancelled;
    render_probe *rp = arg;
    double *v = es_calloc(1000 * 10, sizeof *v);
    es_jctx jc = {0};
    json_t *grid = es_jgrid(&jc, "values", v, 1000, 10);
    rp->rows_built = json_array_size(grid);
    rp->check = es_jctx_check(&jc, &rp->err);
    json_decref(grid);
    free(v);
}

START_TEST(rendering_stops_when_its_task_is_dropped)
{
    es_err err;
    es_pool *p = es_pool_new(1, 0, 4, &err);
    render_probe dropped = {0}, kept = {0};
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "a", NULL, render_task, always_dropped, &dropped), 0);
    ck_assert_int_eq(es_pool_submit(p, ES_PRIO_REQUEST, "a", NULL, render_task, NULL, &kept), 0);
    es_pool_stop(p, false);
    ck_assert_uint_eq(dropped.rows_built, 0);
    ck_assert_int_eq(dropped.check, -1);
    ck_assert_int_eq(dropped.err.code, ES_E_CANCELLED);
    ck_assert_uint_eq(kept.rows_built, 1000);
    ck_assert_int_eq(kept.check, 0);
    es_pool_free(p);
}
END_TEST

/* ---------------------------------------------------------------- results.c */

/* A 200 reply whose body is `fill` repeated len times, with a gzip variant. */
static es_reply reply_of(char fill, size_t len)
{
    es_reply r = {.status = 200, .content_type = "application/json", .cache_control = "public, max-age=86400"};
    r.body = es_malloc(len);
    memset(r.body, fill, len);
    r.len = len;
    es_reply_gzip(&r);
    snprintf(r.etag, sizeof r.etag, "W/\"%c\"", fill);
    return r;
}

static void key_of(const char *text, char key[65])
{
    es_sha256_hex(text, strlen(text), key);
}

/* Compute-and-publish under key: claims (must be the first) and settles with reply_of(fill, len). */
static void publish(es_results *c, const char *text, char fill, size_t len)
{
    char key[65];
    key_of(text, key);
    es_reply out = {0};
    es_result *claim;
    ck_assert_int_eq(es_results_claim(c, key, &out, &claim), 0);
    ck_assert_ptr_nonnull(claim);
    es_reply r = reply_of(fill, len);
    es_results_settle(c, claim, &r, NULL);
    es_reply_release(&r);
}

/* Does join find text's reply, with fill as its bytes? (A miss claims the key
 * and gives the claim up at once.) */
static bool cached_as(es_results *c, const char *text, char fill, size_t len)
{
    char key[65];
    key_of(text, key);
    es_reply out = {0};
    es_result *claim, *pending;
    int rc = es_results_join(c, key, &out, &claim, &pending);
    ck_assert_int_ne(rc, ES_JOIN_PENDING);
    if (rc == ES_JOIN_CLAIMED) {
        es_results_settle(c, claim, NULL, NULL);
        return false;
    }
    ck_assert_uint_eq(out.len, len);
    ck_assert_uint_eq(out.status, 200);
    ck_assert_str_eq(out.content_type, "application/json");
    ck_assert_str_eq(out.cache_control, "public, max-age=86400");
    char want_etag[8];
    snprintf(want_etag, sizeof want_etag, "W/\"%c\"", fill);
    ck_assert_str_eq(out.etag, want_etag);
    for (size_t i = 0; i < len; i++)
        ck_assert_int_eq(out.body[i], fill);
    es_reply again = reply_of(fill, len);
    const char *gz = out.gz;
    size_t gz_len = out.gz_len;
    if (!gz && out.shared) /* the cache keeps the body; its gzip is made on a first request that accepts it */
        es_shared_gzip(out.shared, NULL, &gz, &gz_len);
    ck_assert_uint_eq(gz_len, again.gz_len);
    if (again.gz) /* bodies under ES_GZIP_MIN_BYTES have none */
        ck_assert_mem_eq(gz, again.gz, again.gz_len);
    es_reply_release(&again);
    es_reply_release(&out);
    return true;
}

START_TEST(results_copy_count_and_evict_least_recently_used)
{
    /* Each 4000-byte body of one letter gzips to a few dozen bytes: an entry is
     * charged about 4000 + overhead, so a 10000-byte budget holds two. */
    es_results *c = es_results_new(10000);
    ck_assert(!cached_as(c, "a", 'a', 4000));
    publish(c, "a", 'a', 4000);
    publish(c, "b", 'b', 4000);
    ck_assert(cached_as(c, "a", 'a', 4000)); /* a is now the most recently used */
    publish(c, "c", 'c', 4000);              /* evicts b */
    ck_assert(cached_as(c, "a", 'a', 4000));
    ck_assert(cached_as(c, "c", 'c', 4000));
    ck_assert(!cached_as(c, "b", 'b', 4000));
    es_results_stats st;
    es_results_get_stats(c, &st);
    ck_assert_uint_eq(st.misses, 5); /* three publications, two lookups of absent keys */
    ck_assert_uint_eq(st.hits, 3);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_uint_eq(st.entries, 2);
    ck_assert_uint_le(st.bytes, st.max_bytes);
    ck_assert_uint_ge(st.bytes, 8000);
    es_results_free(c);
}
END_TEST

/* A hit hands out the stored bytes themselves (shared, not copied), and they
 * stay valid while the reply holds them: after the entry is evicted and after
 * the cache is freed (ASan would see a use after free). */
START_TEST(results_hits_share_bytes_that_outlive_the_entry)
{
    es_results *c = es_results_new(10000);
    publish(c, "a", 'a', 4000);
    char key[65];
    key_of("a", key);
    es_reply one = {0}, two = {0};
    es_result *claim, *pending;
    ck_assert_int_eq(es_results_join(c, key, &one, &claim, &pending), ES_JOIN_HIT);
    ck_assert_int_eq(es_results_join(c, key, &two, &claim, &pending), ES_JOIN_HIT);
    ck_assert_ptr_nonnull(one.shared);
    ck_assert_ptr_eq(one.body, two.body); /* the same bytes, no copy */
    ck_assert_ptr_eq(one.gz, two.gz);
    publish(c, "b", 'b', 4000);
    publish(c, "c", 'c', 4000); /* evicts a */
    ck_assert(!cached_as(c, "a", 'a', 4000));
    es_results_free(c);
    for (size_t i = 0; i < one.len; i++)
        ck_assert_int_eq(one.body[i], 'a');
    es_reply_release(&one);
    ck_assert_int_eq(two.body[two.len - 1], 'a');
    es_reply_release(&two);
}
END_TEST


/* Peek key (the target memo's lookup): true with its reply, whose bytes must be fill. */
static bool peeked(es_results *c, const char *text, char fill, es_reply *out)
{
    char key[65];
    key_of(text, key);
    *out = (es_reply){0};
    if (!es_results_peek(c, key, out))
        return false;
    ck_assert_uint_eq(out->status, 200);
    ck_assert_int_eq(out->body[0], fill);
    ck_assert_int_eq(out->body[out->len - 1], fill);
    return true;
}

/* A repeated peek on one thread is answered from the thread's own handle on
 * the cached bytes (not the cache's reference: no count other threads write),
 * counted as a hit; once a reply has left the store the handle is not used
 * (the entry evicted is a miss, not the bytes kept), and the bytes handed out
 * outlive the eviction and the cache (ASan would see a use after free). */
START_TEST(results_repeated_peek_uses_the_threads_own_handle_until_a_removal)
{
    es_results *c = es_results_new(10000);
    publish(c, "a", 'a', 4000);
    es_reply first, second, third;
    ck_assert(peeked(c, "a", 'a', &first));  /* the locked path: takes the thread's handle */
    ck_assert(peeked(c, "a", 'a', &second)); /* the handle */
    ck_assert(peeked(c, "a", 'a', &third));
    ck_assert_ptr_eq(second.body, first.body); /* the same bytes, no copy */
    ck_assert_ptr_ne(second.shared, first.shared); /* counted on the thread's handle */
    ck_assert_ptr_eq(third.shared, second.shared);
    es_results_stats st;
    es_results_get_stats(c, &st);
    ck_assert_uint_eq(st.hits, 3);
    publish(c, "b", 'b', 4000);
    publish(c, "c", 'c', 4000); /* a, used since, is spared once: b goes */
    publish(c, "d", 'd', 4000); /* c goes */
    publish(c, "e", 'e', 4000); /* a goes */
    es_reply gone;
    ck_assert(!peeked(c, "a", 'a', &gone));
    es_results_get_stats(c, &st);
    ck_assert_uint_eq(st.hits, 3);
    ck_assert_uint_eq(st.evictions, 3);
    es_results_free(c);
    ck_assert_int_eq(second.body[1234], 'a');
    es_reply_release(&first);
    es_reply_release(&second);
    ck_assert_int_eq(third.body[3999], 'a');
    es_reply_release(&third);
}
END_TEST

/* A hit from a thread's handle does not move the entry in the recency order
 * (that needs the lock) but marks it used: at eviction it gets a second chance
 * (CLOCK) and the entry nobody used since goes instead. */
START_TEST(results_handle_hits_give_a_second_chance_at_eviction)
{
    es_results *c = es_results_new(10000);
    publish(c, "a", 'a', 4000);
    es_reply r;
    ck_assert(peeked(c, "a", 'a', &r)); /* locked: a to the front, the handle taken */
    es_reply_release(&r);
    publish(c, "b", 'b', 4000);         /* b in front of a */
    ck_assert(peeked(c, "a", 'a', &r)); /* the handle: a marked, not moved */
    es_reply_release(&r);
    publish(c, "c", 'c', 4000);         /* a, the oldest, is spared; b goes */
    ck_assert(cached_as(c, "a", 'a', 4000));
    ck_assert(!cached_as(c, "b", 'b', 4000));
    ck_assert(cached_as(c, "c", 'c', 4000));
    es_results_free(c);
}
END_TEST

typedef struct peeker {
    es_results *c;
    pthread_t thread;
} peeker;

static void *peek_many(void *arg)
{
    peeker *p = arg;
    for (int i = 0; i < 500; i++) {
        es_reply r;
        ck_assert(peeked(p->c, i % 2 ? "a" : "b", i % 2 ? 'a' : 'b', &r));
        es_reply_release(&r);
    }
    return NULL;
}

/* Hits on threads' handles, counted per thread, sum exactly. */
START_TEST(results_handle_hits_of_many_threads_are_counted_exactly)
{
    es_results *c = es_results_new(1 << 20);
    publish(c, "a", 'a', 4000);
    publish(c, "b", 'b', 3000);
    peeker p[6];
    for (int i = 0; i < 6; i++) {
        p[i] = (peeker){.c = c};
        pthread_create(&p[i].thread, NULL, peek_many, &p[i]);
    }
    for (int i = 0; i < 6; i++)
        pthread_join(p[i].thread, NULL);
    es_results_stats st;
    es_results_get_stats(c, &st);
    ck_assert_uint_eq(st.hits, 6 * 500);
    es_results_free(c);
}
END_TEST

/* A kept result's data: counts its frees. */
static int kept_freed;
static void free_counted(void *data)
{
    kept_freed++;
    free(data);
}

/* Kept results (another representation's computation) share the budget and the recency order
 * with replies, outlive their eviction while held, and are
 * refused from a quarter of the budget. */
START_TEST(results_kept_results_share_the_budget_and_outlive_eviction_while_held)
{
    kept_freed = 0;
    es_results *c = es_results_new(10000);
    char key[65], other[65];
    key_of("result a", key);
    key_of("result b", other);
    ck_assert_ptr_null(es_results_kept(c, key));
    ck_assert(es_results_keep(c, key, es_calloc(1, 2000), 2000, free_counted));
    ck_assert(!es_results_keep(c, key, es_calloc(1, 10), 10, free_counted)); /* kept already: freed */
    ck_assert_int_eq(kept_freed, 1);
    ck_assert(!es_results_keep(c, other, es_calloc(1, 2500), 2500, free_counted)); /* a quarter of 10000 */
    ck_assert_int_eq(kept_freed, 2);
    ck_assert_ptr_null(es_results_kept(c, other));
    es_kept *k = es_results_kept(c, key);
    ck_assert_ptr_nonnull(k);
    ck_assert_ptr_nonnull(es_kept_data(k));
    publish(c, "b", 'b', 4000);
    publish(c, "c", 'c', 4000); /* over budget: the kept result, least recently used, goes */
    ck_assert_ptr_null(es_results_kept(c, key));
    ck_assert_int_eq(kept_freed, 2); /* still held */
    es_kept_release(c, k);
    ck_assert_int_eq(kept_freed, 3);
    es_results_stats st;
    es_results_get_stats(c, &st);
    ck_assert_uint_eq(st.rendered, 1);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert(es_results_keep(c, other, es_calloc(1, 100), 100, free_counted));
    es_results_free(c); /* frees what is kept */
    ck_assert_int_eq(kept_freed, 4);
}
END_TEST

/* A request for `text` from another thread: claims and reports what it got. */
typedef struct asker {
    es_results *c;
    const char *text;
    pthread_t thread;
    int rc;
    es_result *claim;
    es_reply reply;
} asker;

static void *ask(void *arg)
{
    asker *a = arg;
    char key[65];
    key_of(a->text, key);
    a->rc = es_results_claim(a->c, key, &a->reply, &a->claim);
    return NULL;
}

/* Start n askers of text and wait until all of them wait for the computation. */
static void start_waiters(es_results *c, asker *a, int n, const char *text)
{
    es_results_stats st;
    es_results_get_stats(c, &st);
    unsigned long before = st.waits;
    for (int i = 0; i < n; i++) {
        a[i] = (asker){.c = c, .text = text};
        pthread_create(&a[i].thread, NULL, ask, &a[i]);
    }
    do {
        sleep_ms(1);
        es_results_get_stats(c, &st);
    } while (st.waits < before + (unsigned long)n);
}

START_TEST(results_waiters_take_the_one_computation)
{
    es_results *c = es_results_new(1 << 20);
    char key[65];
    key_of("x", key);
    es_reply out = {0};
    es_result *claim;
    ck_assert_int_eq(es_results_claim(c, key, &out, &claim), 0);
    asker a[4];
    start_waiters(c, a, 4, "x");
    es_reply r = reply_of('x', 3000);
    es_results_settle(c, claim, &r, NULL);
    es_reply_release(&r);
    for (int i = 0; i < 4; i++) {
        pthread_join(a[i].thread, NULL);
        ck_assert_int_eq(a[i].rc, 1);
        ck_assert_uint_eq(a[i].reply.len, 3000);
        ck_assert_int_eq(a[i].reply.body[2999], 'x');
        es_reply_release(&a[i].reply);
    }
    es_results_stats st;
    es_results_get_stats(c, &st);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.waits, 4);
    ck_assert_uint_eq(st.hits, 4);
    es_results_free(c);
}
END_TEST

/* The HTTP threads' way: join without blocking, be called back when settled. */
static void count_call(void *arg) { ++*(int *)arg; }

START_TEST(results_join_notifies_waiters_without_blocking)
{
    es_results *c = es_results_new(1 << 20);
    char key[65];
    key_of("n", key);
    es_reply out = {0};
    es_result *owner, *none, *w1, *w2, *w3;
    ck_assert_int_eq(es_results_join(c, key, &out, &owner, &none), ES_JOIN_CLAIMED);
    ck_assert_ptr_nonnull(owner);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(es_results_join(c, key, &out, &none, &w1), ES_JOIN_PENDING);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(es_results_join(c, key, &out, &none, &w2), ES_JOIN_PENDING);
    ck_assert_int_eq(es_results_join(c, key, &out, &none, &w3), ES_JOIN_PENDING); /* released unread */
    int calls = 0;
    ck_assert(es_results_notify(c, w1, count_call, &calls));
    ck_assert(es_results_notify(c, w2, count_call, &calls));
    ck_assert_int_eq(calls, 0);
    es_reply r = reply_of('n', 2000);
    es_results_settle(c, owner, &r, NULL);
    es_reply_release(&r);
    ck_assert_int_eq(calls, 2);
    ck_assert(!es_results_notify(c, w3, count_call, &calls)); /* settled: nothing registered */
    ck_assert_int_eq(es_results_take(c, w1, &out, NULL), 1);
    ck_assert_uint_eq(out.len, 2000);
    ck_assert_int_eq(out.body[1999], 'n');
    es_reply_release(&out);
    ck_assert_int_eq(es_results_take(c, w2, &out, NULL), 1);
    es_reply_release(&out);
    es_results_release(c, w3);
    ck_assert_int_eq(es_results_join(c, key, &out, &none, &w1), ES_JOIN_HIT);
    es_reply_release(&out);
    /* a failed computation: its waiters take nothing and compute again */
    key_of("nf", key);
    ck_assert_int_eq(es_results_join(c, key, &out, &owner, &none), ES_JOIN_CLAIMED);
    ck_assert_int_eq(es_results_join(c, key, &out, &none, &w1), ES_JOIN_PENDING);
    es_results_settle(c, owner, NULL, NULL);
    es_err err = {0};
    ck_assert_int_eq(es_results_take(c, w1, &out, &err), 0);
    ck_assert_int_eq(es_results_join(c, key, &out, &owner, &none), ES_JOIN_CLAIMED);
    ck_assert_int_eq(es_results_join(c, key, &out, &none, &w1), ES_JOIN_PENDING);
    ck_assert(es_results_waited(c, owner));
    es_err limit;
    es_fail(&limit, ES_E_LIMIT, "max_response_bytes", "too large");
    es_results_settle(c, owner, NULL, &limit); /* a failure that holds for the waiter too */
    ck_assert_int_eq(es_results_take(c, w1, &out, &err), -1);
    ck_assert_int_eq(err.code, ES_E_LIMIT);
    ck_assert_str_eq(err.param, "max_response_bytes");
    ck_assert_int_eq(es_results_join(c, key, &out, &owner, &none), ES_JOIN_CLAIMED); /* not kept */
    ck_assert(!es_results_waited(c, owner));
    es_results_settle(c, owner, NULL, NULL);
    es_results_stats st;
    es_results_get_stats(c, &st);
    ck_assert_uint_eq(st.waits, 5);
    ck_assert_uint_eq(st.misses, 4);
    ck_assert_uint_eq(st.entries, 1);
    es_results_free(c);
}
END_TEST

START_TEST(results_oversized_reply_reaches_its_waiters_only)
{
    es_results *c = es_results_new(1000);
    char key[65];
    key_of("big", key);
    es_reply out = {0};
    es_result *claim;
    ck_assert_int_eq(es_results_claim(c, key, &out, &claim), 0);
    asker a[3];
    start_waiters(c, a, 3, "big");
    es_reply r = reply_of('B', 5000);
    es_results_settle(c, claim, &r, NULL);
    es_reply_release(&r);
    for (int i = 0; i < 3; i++) {
        pthread_join(a[i].thread, NULL);
        ck_assert_int_eq(a[i].rc, 1);
        ck_assert_uint_eq(a[i].reply.len, 5000);
        es_reply_release(&a[i].reply);
    }
    ck_assert(!cached_as(c, "big", 'B', 5000)); /* not kept: larger than the budget */
    es_results_stats st;
    es_results_get_stats(c, &st);
    ck_assert_uint_eq(st.entries, 0);
    ck_assert_uint_eq(st.bytes, 0);
    es_results_free(c);
}
END_TEST

START_TEST(results_failed_computation_lets_waiters_compute)
{
    es_results *c = es_results_new(1 << 20);
    char key[65];
    key_of("f", key);
    es_reply out = {0};
    es_result *claim;
    ck_assert_int_eq(es_results_claim(c, key, &out, &claim), 0);
    asker a[2];
    start_waiters(c, a, 2, "f");
    es_results_settle(c, claim, NULL, NULL);
    for (int i = 0; i < 2; i++) {
        pthread_join(a[i].thread, NULL);
        ck_assert_int_eq(a[i].rc, 0);
        ck_assert_ptr_null(a[i].claim); /* compute without caching */
    }
    /* A later request owns a fresh claim. */
    ck_assert_int_eq(es_results_claim(c, key, &out, &claim), 0);
    ck_assert_ptr_nonnull(claim);
    es_results_settle(c, claim, NULL, NULL);
    es_results_free(c);
}
END_TEST

/* Stress: threads asking for 16 keys under a budget of about 4 entries. */
typedef struct churner {
    es_results *c;
    int index;
    pthread_t thread;
} churner;

static void *stress(void *arg)
{
    churner *ch = arg;
    es_results *c = ch->c;
    for (int i = 0; i < 400; i++) {
        char text[8], key[65];
        snprintf(text, sizeof text, "%c", 'a' + (i * 7 + ch->index) % 16);
        key_of(text, key);
        es_reply out = {0};
        es_result *claim;
        if (es_results_claim(c, key, &out, &claim) == 1) {
            ck_assert_int_eq(out.body[0], text[0]);
            es_reply_release(&out);
        } else if (claim) {
            es_reply r = reply_of(text[0], 2000);
            es_results_settle(c, claim, &r, NULL);
            es_reply_release(&r);
        }
    }
    return NULL;
}

START_TEST(results_survive_concurrent_churn)
{
    es_results *c = es_results_new(9000);
    churner ch[8];
    for (int i = 0; i < 8; i++) {
        ch[i] = (churner){.c = c, .index = i};
        pthread_create(&ch[i].thread, NULL, stress, &ch[i]);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(ch[i].thread, NULL);
    es_results_stats st;
    es_results_get_stats(c, &st);
    ck_assert_uint_eq(st.hits + st.misses, 8 * 400);
    ck_assert_uint_gt(st.evictions, 0);
    ck_assert_uint_le(st.bytes, st.max_bytes);
    es_results_free(c);
}
END_TEST

/* ---------------------------------------------------------------- metrics */

START_TEST(metrics_expose_the_response_cache_and_the_pool)
{
    es_metrics mx = {0};
    es_cache *cache = es_cache_new(1 << 20);
    es_results *c = es_results_new(1 << 16);
    es_err err;
    es_pool *p = es_pool_new(2, 0, 5, &err);
    publish(c, "m", 'm', 100);
    ck_assert(cached_as(c, "m", 'm', 100));
    es_catalogue *reg;
    ck_assert_int_eq(es_config_load_text("{\"models\": {\"m\": {\"matrices\": {\"x\": {\"generator\": \"rope\", "
                                         "\"n_positions\": 3, \"d_model\": 2}}}}}",
                                         "test", ".", &reg, &err),
                     0);
    char *text = es_metrics_text(&mx, cache, c, p, NULL, false, reg);
    es_catalogue_free(reg);
    ck_assert_ptr_nonnull(strstr(text, "# TYPE embedscope_response_cache_hits_total counter\n"
                                       "embedscope_response_cache_hits_total 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_response_cache_misses_total 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_response_cache_entries 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_response_cache_max_bytes 65536\n"));
    ck_assert_ptr_nonnull(strstr(text, "# TYPE embedscope_response_cache_bytes gauge\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_compute_threads 2\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_compute_queue_limit 5\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_compute_queue_depth 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "# TYPE embedscope_compute_rejected_total counter\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_ready 0\n"));
    free(text);
    es_pool_free(p);
    es_results_free(c);
    es_cache_free(cache);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("compute");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, pool_runs_every_task_once);
    tcase_add_test(tc, pool_runs_requests_before_background_and_bounds_the_queue);
    tcase_add_test(tc, pool_stop_cancels_what_is_queued);
    tcase_add_test(tc, pool_bounds_each_clients_share);
    tcase_add_test(tc, pool_stop_within_reports_a_task_still_running);
    tcase_add_test(tc, pool_keeps_a_thread_for_light_jobs);
    tcase_add_test(tc, pool_never_keeps_every_thread);
    tcase_add_test(tc, rendering_stops_when_its_task_is_dropped);
    suite_add_tcase(s, tc);
    tc = tcase_create("results");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, results_copy_count_and_evict_least_recently_used);
    tcase_add_test(tc, results_hits_share_bytes_that_outlive_the_entry);
    tcase_add_test(tc, results_repeated_peek_uses_the_threads_own_handle_until_a_removal);
    tcase_add_test(tc, results_handle_hits_give_a_second_chance_at_eviction);
    tcase_add_test(tc, results_handle_hits_of_many_threads_are_counted_exactly);
    tcase_add_test(tc, results_kept_results_share_the_budget_and_outlive_eviction_while_held);
    tcase_add_test(tc, results_waiters_take_the_one_computation);
    tcase_add_test(tc, results_join_notifies_waiters_without_blocking);
    tcase_add_test(tc, results_oversized_reply_reaches_its_waiters_only);
    tcase_add_test(tc, results_failed_computation_lets_waiters_compute);
    tcase_add_test(tc, results_survive_concurrent_churn);
    tcase_add_test(tc, metrics_expose_the_response_cache_and_the_pool);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
