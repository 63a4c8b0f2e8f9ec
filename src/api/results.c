/* The response cache: rendered 200 replies of analyses (body, its gzip, ETag,
 * caching policy) keyed by the sha256 of the canonical request, the text the
 * ETag hashes. Results are immutable for given inputs, so a repeated request
 * (the attention ranking, per-layer tables, any analysis) is a copy instead of
 * a computation.
 *
 * Bounded by bytes, least recently used entries evicted. Single flight: the
 * first request for a key claims it and computes; concurrent requests for the
 * same key wait for it and take its reply, or the error of a computation
 * that failed for a reason that holds for them too (a limit, a parameter,
 * numerics), or compute themselves when it was abandoned (deadline, client
 * gone, shutdown) or ran out of memory. An HTTP thread never blocks: es_results_join hands it the
 * pending entry, held, and es_results_notify calls it back when the entry is
 * settled, so a waiter holds a suspended connection and no compute-queue slot. The keys, recency order and byte budget are an es_lru store
 * (lru.h): an entry being computed is pending there. An entry that is evicted,
 * too large to keep, or failed is removed from the store and lives on until its
 * last waiter has taken it. */
#include "embedscope/app.h"
#include "embedscope/negotiate.h"
#include "embedscope/pool.h"
#include "embedscope/results.h"
#include "embedscope/route.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "embedscope/lru.h"

/* Bookkeeping charged per entry on top of its bodies. */
#define ENTRY_OVERHEAD 256

/* A callback registered by es_results_notify. */
typedef struct waiter {
    void (*fn)(void *arg);
    void *arg;
    struct waiter *next;
} waiter;

struct es_result {
    es_lru_node node; /* key, bytes, whether still in the store, holders: requests
                         that waited for it and have not taken it yet */
    char key[65];
    bool done;        /* computed (or failed); false while its owner computes */
    bool failed;      /* no reply: its waiters take error, or compute themselves */
    bool has_error;   /* failed with error, which the waiters share */
    es_err error;
    es_reply reply;   /* status 200, body and gz owned */
    waiter *waiters;  /* to call back once done */
    void *kept;       /* a kept result (es_results_keep) instead of a reply, freed with free_kept */
    void (*free_kept)(void *kept);
};

struct es_results {
    pthread_mutex_t lock;
    pthread_cond_t done;
    es_lru lru;
    unsigned long hits, misses, waits, evictions, rendered;
};

/* Free the entry of node n and its reply (the store's free_entry). */
static void node_free(es_lru_node *n)
{
    es_result *e = ES_LRU_ENTRY(n, es_result, node);
    es_reply_release(&e->reply);
    if (e->kept)
        e->free_kept(e->kept);
    free(e);
}

/* An empty cache of at most max_bytes. Never fails. */
es_results *es_results_new(size_t max_bytes)
{
    es_results *c = es_calloc(1, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->done, NULL);
    es_lru_init(&c->lru, max_bytes, node_free);
    return c;
}

/* Shared reply bytes: the body (taken over, not copied) and, made when the
 * first request that accepts gzip asks (es_shared_gzip) unless a sample says
 * it would not pay, its gzip. gz and gz_len are written once, before gz_state
 * becomes GZ_READY (release), and read only after it is seen (acquire). */
enum { GZ_UNTRIED, GZ_WORKING, GZ_READY };
struct es_shared {
    int refs;
    bool body_static;
    atomic_int gz_state;
    char *body;
    char *gz; /* NULL once ready: no gzip (does not pay, failed) */
    size_t len, gz_len;
    double gz_ratio; /* the sample's compressed / original: what its gzip is expected to add */
};

/* See results.h. */
void es_shared_adopt(es_reply *rep)
{
    if (rep->shared)
        return;
    es_shared *s = es_malloc(sizeof *s);
    *s = (es_shared){.refs = 1, .body_static = rep->body_static, .body = rep->body, .len = rep->len,
                     .gz = rep->gz, .gz_len = rep->gz_len};
    if (rep->gz) {
        s->gz_ratio = (double)rep->gz_len / (double)(rep->len ? rep->len : 1);
        atomic_init(&s->gz_state, GZ_READY);
    } else if (rep->status != 200 || !es_gzip_pays(rep->body, rep->len, &s->gz_ratio)) {
        atomic_init(&s->gz_state, GZ_READY); /* none: identity for everyone */
    }
    rep->body_static = false;
    rep->gz = NULL;
    rep->gz_len = 0;
    rep->shared = s;
}

/* See results.h. */
void es_shared_give(const es_reply *from, es_reply *out)
{
    *out = *from;
    out->location = from->location ? es_strdup(from->location) : NULL; /* each reply owns its own */
    __atomic_add_fetch(&from->shared->refs, 1, __ATOMIC_RELAXED);
}

/* See results.h. */
void es_shared_release(es_shared *s)
{
    if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        if (!s->body_static)
            free(s->body);
        free(s->gz);
        free(s);
    }
}

/* Compress s (whose gz_state this caller moved to GZ_WORKING) and publish the result. */
static void shared_compress(es_shared *s)
{
    char *z = NULL;
    size_t zlen = 0;
    if (es_gzip(s->body, s->len, &z, &zlen) == 0 && zlen >= s->len) {
        free(z);
        z = NULL;
    }
    s->gz = z;
    s->gz_len = z ? zlen : 0;
    atomic_store_explicit(&s->gz_state, GZ_READY, memory_order_release);
}

/* The pool task compressing a large shared body (it holds a reference). */
static void compress_task(void *arg, bool cancelled)
{
    es_shared *s = arg;
    if (cancelled)
        atomic_store(&s->gz_state, GZ_UNTRIED);
    else
        shared_compress(s);
    es_shared_release(s);
}

/* See results.h. */
bool es_shared_gzip(es_shared *s, es_pool *pool, const char **gz, size_t *gz_len)
{
    int state = atomic_load_explicit(&s->gz_state, memory_order_acquire);
    int untried = GZ_UNTRIED;
    if (state == GZ_UNTRIED && atomic_compare_exchange_strong(&s->gz_state, &untried, GZ_WORKING)) {
        if (s->len <= ES_GZIP_INLINE_MAX || !pool) {
            shared_compress(s);
        } else { /* not on an HTTP thread: a background task makes it for the requests to come */
            __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
            if (es_pool_submit(pool, ES_PRIO_BACKGROUND, NULL, NULL, compress_task, NULL, s) < 0) {
                atomic_store(&s->gz_state, GZ_UNTRIED);
                es_shared_release(s);
            }
        }
        state = atomic_load_explicit(&s->gz_state, memory_order_acquire);
    }
    if (state != GZ_READY || !s->gz)
        return false;
    *gz = s->gz;
    *gz_len = s->gz_len;
    return true;
}

/* Bytes s holds or is expected to hold once compressed (the response cache's charge). */
static size_t shared_bytes(es_shared *s)
{
    if (atomic_load_explicit(&s->gz_state, memory_order_acquire) == GZ_READY)
        return s->len + s->gz_len;
    return s->len + (size_t)(s->gz_ratio * (double)s->len);
}

/* See results.h: replies and their bytes live here, with the cache that keeps them. */
void es_reply_release(es_reply *rep)
{
    free(rep->location);
    if (rep->shared) {
        es_shared_release(rep->shared);
    } else {
        if (!rep->body_static)
            free(rep->body);
        free(rep->gz);
    }
    *rep = (es_reply){0};
}

/* See results.h. */
void es_reply_location(es_reply *rep, const char *url)
{
    free(rep->location);
    rep->location = es_strdup(url);
}

/* Give e's reply to a request: 1 with it copied; if e failed, -1 with its
 * shared error copied into *err (when err is not NULL), else 0. */
static int take(es_results *c, es_result *e, es_reply *out, es_err *err)
{
    if (e->failed && e->has_error && err)
        *err = e->error;
    if (e->failed)
        return e->has_error && err ? -1 : 0;
    es_shared_give(&e->reply, out);
    c->hits++;
    es_lru_touch(&c->lru, &e->node);
    return 1;
}

/* See results.h. Never fails. */
int es_results_join(es_results *c, const char *key, es_reply *out, es_result **claim, es_result **pending)
{
    *claim = *pending = NULL;
    pthread_mutex_lock(&c->lock);
    es_lru_node *n = es_lru_find(&c->lru, key);
    es_result *e = n ? ES_LRU_ENTRY(n, es_result, node) : NULL;
    int rc = ES_JOIN_CLAIMED;
    if (!e) {
        e = es_calloc(1, sizeof *e);
        snprintf(e->key, sizeof e->key, "%s", key);
        es_lru_add(&c->lru, &e->node, e->key);
        c->misses++;
        *claim = e;
    } else if (e->done) {
        take(c, e, out, NULL); /* a failed entry is never found: settling removes it */
        rc = ES_JOIN_HIT;
    } else {
        c->waits++;
        e->node.holders++;
        *pending = e;
        rc = ES_JOIN_PENDING;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* See results.h. Never fails. */
bool es_results_peek(es_results *c, const char *key, es_reply *out)
{
    pthread_mutex_lock(&c->lock);
    es_lru_node *n = es_lru_find(&c->lru, key);
    es_result *e = n ? ES_LRU_ENTRY(n, es_result, node) : NULL;
    bool hit = e && e->done && !e->failed && take(c, e, out, NULL) == 1;
    pthread_mutex_unlock(&c->lock);
    return hit;
}

/* See results.h. Never fails. */
bool es_results_notify(es_results *c, es_result *e, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&c->lock);
    bool pending = !e->done;
    if (pending) {
        waiter *w = es_calloc(1, sizeof *w);
        *w = (waiter){.fn = fn, .arg = arg, .next = e->waiters};
        e->waiters = w;
    }
    pthread_mutex_unlock(&c->lock);
    return pending;
}

/* Let go of a held entry (lock held): freed if it was removed meanwhile and
 * this was its last holder. */
static void unhold(es_results *c, es_result *e)
{
    e->node.holders--;
    es_lru_drop_if_unused(&c->lru, &e->node);
}

/* See results.h. Never fails. */
int es_results_take(es_results *c, es_result *e, es_reply *out, es_err *err)
{
    pthread_mutex_lock(&c->lock);
    while (!e->done)
        pthread_cond_wait(&c->done, &c->lock);
    int rc = take(c, e, out, err);
    unhold(c, e);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* See results.h. Never fails. */
bool es_results_waited(es_results *c, es_result *e)
{
    pthread_mutex_lock(&c->lock);
    bool waited = e->node.holders > 0;
    pthread_mutex_unlock(&c->lock);
    return waited;
}

/* See results.h. Never fails. */
void es_results_release(es_results *c, es_result *e)
{
    pthread_mutex_lock(&c->lock);
    unhold(c, e);
    pthread_mutex_unlock(&c->lock);
}

/* See results.h. */
int es_results_claim(es_results *c, const char *key, es_reply *out, es_result **claim)
{
    es_result *pending;
    int rc = es_results_join(c, key, out, claim, &pending);
    if (rc == ES_JOIN_PENDING)
        return es_results_take(c, pending, out, NULL);
    return rc == ES_JOIN_HIT;
}

/* See results.h. */
void es_results_settle(es_results *c, es_result *claim, es_reply *reply, const es_err *error)
{
    es_result *e = claim;
    size_t bytes = 0;
    e->failed = !reply;
    e->has_error = !reply && error;
    if (e->has_error)
        e->error = *error;
    if (reply) {
        es_shared_adopt(reply);
        es_shared_give(reply, &e->reply);
        bytes = ENTRY_OVERHEAD + shared_bytes(reply->shared);
    }
    pthread_mutex_lock(&c->lock);
    e->done = true;
    waiter *w = e->waiters; /* taken first: dropping an unused entry below frees e */
    e->waiters = NULL;
    if (reply && es_lru_store(&c->lru, &e->node, bytes)) {
        c->evictions += es_lru_evict(&c->lru);
    } else { /* failed or larger than the whole budget: only for the waiters */
        es_lru_remove(&c->lru, &e->node);
        es_lru_drop_if_unused(&c->lru, &e->node);
    }
    pthread_cond_broadcast(&c->done);
    pthread_mutex_unlock(&c->lock);
    while (w) { /* outside the lock: a callback may take or release entries */
        waiter *next = w->next;
        w->fn(w->arg);
        free(w);
        w = next;
    }
}

/* See results.h: a kept result is an entry settled from the start, its holders the requests
 * rendering from it. */
bool es_results_keep(es_results *c, const char *key, void *data, size_t bytes, void (*free_fn)(void *data))
{
    bytes += ENTRY_OVERHEAD;
    pthread_mutex_lock(&c->lock);
    bool kept = bytes < c->lru.max_bytes / 4 && !es_lru_find(&c->lru, key);
    if (kept) {
        es_result *e = es_calloc(1, sizeof *e);
        snprintf(e->key, sizeof e->key, "%s", key);
        e->done = true;
        e->kept = data;
        e->free_kept = free_fn;
        es_lru_add(&c->lru, &e->node, e->key);
        es_lru_store(&c->lru, &e->node, bytes); /* within the budget: checked above */
        c->evictions += es_lru_evict(&c->lru);
    }
    pthread_mutex_unlock(&c->lock);
    if (!kept)
        free_fn(data);
    return kept;
}

/* See results.h. */
es_kept *es_results_kept(es_results *c, const char *key)
{
    pthread_mutex_lock(&c->lock);
    es_lru_node *n = es_lru_find(&c->lru, key);
    es_result *e = n ? ES_LRU_ENTRY(n, es_result, node) : NULL;
    if (e && e->kept) {
        e->node.holders++;
        es_lru_touch(&c->lru, &e->node);
        c->rendered++;
    } else {
        e = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    return (es_kept *)e;
}

/* See results.h. */
const void *es_kept_data(const es_kept *k)
{
    return ((const es_result *)(const void *)k)->kept;
}

/* See results.h. */
void es_kept_release(es_results *c, es_kept *k)
{
    pthread_mutex_lock(&c->lock);
    unhold(c, (es_result *)(void *)k);
    pthread_mutex_unlock(&c->lock);
}

/* A consistent snapshot of the counters. Never fails. */
void es_results_get_stats(es_results *c, es_results_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = (es_results_stats){.hits = c->hits, .misses = c->misses, .waits = c->waits, .evictions = c->evictions,
                              .rendered = c->rendered,
                              .bytes = c->lru.bytes, .entries = c->lru.entries,
                              .max_bytes = c->lru.max_bytes};
    pthread_mutex_unlock(&c->lock);
}

/* Free every entry; NULL is ignored. No request may be using the cache any more. */
void es_results_free(es_results *c)
{
    if (!c)
        return;
    es_lru_destroy(&c->lru);
    pthread_cond_destroy(&c->done);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---------------------------------------------------------------- pre-rendered replies */

#define N_PRERENDERED 4

struct es_prerendered {
    pthread_mutex_t lock;
    struct {
        const es_route *route; /* NULL: a free slot */
        es_catalogue *reg;      /* the catalogue it was rendered from (held) */
        unsigned long hashes;   /* es_digests_generation() before it was rendered */
        es_reply reply;        /* shared bytes */
    } slot[N_PRERENDERED];
};

/* See route.h. */
es_prerendered *es_prerendered_new(void)
{
    es_prerendered *p = es_calloc(1, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    return p;
}

/* See route.h. A request still holding the previous catalogue may store its
 * reply again afterwards: it is only given to requests on that catalogue, and
 * replaced by the next rendering from the current one. */
void es_prerendered_clear(es_prerendered *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < N_PRERENDERED; i++) {
        es_reply_release(&p->slot[i].reply);
        es_catalogue_free(p->slot[i].reg);
        p->slot[i].reg = NULL;
        p->slot[i].route = NULL;
    }
    pthread_mutex_unlock(&p->lock);
}

/* See route.h. */
void es_prerendered_free(es_prerendered *p)
{
    if (!p)
        return;
    es_prerendered_clear(p);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* The slot of route (or a free one; the last when all are taken), lock held. */
static size_t prerendered_slot(const es_prerendered *p, const es_route *route)
{
    size_t i = 0;
    while (i < N_PRERENDERED - 1 && p->slot[i].route && p->slot[i].route != route)
        i++;
    return i;
}

/* See route.h. */
bool es_prerendered_get(es_prerendered *p, const es_route *route, es_ctx *cx)
{
    pthread_mutex_lock(&p->lock);
    size_t i = prerendered_slot(p, route);
    bool hit = p->slot[i].route == route && p->slot[i].reg == cx->reg && p->slot[i].hashes == es_digests_generation();
    if (hit)
        es_shared_give(&p->slot[i].reply, &cx->reply);
    pthread_mutex_unlock(&p->lock);
    return hit;
}

/* See route.h. */
void es_prerendered_put(es_prerendered *p, const es_route *route, es_ctx *cx, unsigned long hashes)
{
    es_reply_gzip(&cx->reply);
    es_shared_adopt(&cx->reply);
    pthread_mutex_lock(&p->lock);
    size_t i = prerendered_slot(p, route);
    es_reply_release(&p->slot[i].reply);
    es_catalogue_free(p->slot[i].reg);
    p->slot[i].route = route;
    p->slot[i].reg = es_catalogue_retain(cx->reg);
    p->slot[i].hashes = hashes;
    es_shared_give(&cx->reply, &p->slot[i].reply);
    pthread_mutex_unlock(&p->lock);
}
