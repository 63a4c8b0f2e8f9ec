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

#include <limits.h>
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

/* Hits answered from a thread's hot replies (see hot_peek), one counter per
 * HTTP thread on a cache line of its own (threads take them in turn; past
 * HIT_SHARDS threads share them, still exact), summed for the statistics. */
#define HIT_SHARDS 16
typedef struct hit_shard {
    _Alignas(64) atomic_ulong hits;
} hit_shard;

struct es_results {
    pthread_mutex_t lock;
    pthread_cond_t done;
    es_lru lru;
    unsigned long hits, misses, waits, evictions, rendered;
    unsigned long id;                   /* unique in the process: a thread's hot replies name their cache */
    _Alignas(64) atomic_ulong removals; /* replies that left the store (written under lock, read without) */
    hit_shard fast[HIT_SHARDS];
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

/* A process-unique number, never 0 (a response cache's or pre-rendered set's id). */
static unsigned long next_id(void)
{
    static atomic_ulong ids;
    return atomic_fetch_add(&ids, 1) + 1;
}

/* size zeroed bytes on a 64-byte boundary (the hit counters' cache lines). Never fails. */
static void *calloc_lines(size_t size)
{
    size = (size + 63) / 64 * 64;
    void *p = aligned_alloc(64, size);
    if (!p) { /* as es_calloc does */
        es_error("out of memory (%zu bytes)", size);
        abort();
    }
    return memset(p, 0, size);
}

/* An empty cache of at most max_bytes. Never fails. */
es_results *es_results_new(size_t max_bytes)
{
    es_results *c = calloc_lines(sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->done, NULL);
    es_lru_init(&c->lru, max_bytes, node_free);
    c->id = next_id();
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
    atomic_bool recent;     /* given out by a thread's hot replies since the cache last looked (CLOCK) */
    es_shared *parent;      /* a thread's local handle (shared_local): the bytes are parent's, held once */
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
        if (s->parent) { /* a local handle: its bytes are the parent's */
            es_shared_release(s->parent);
            free(s);
            return;
        }
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
    if (s->parent) /* a local handle: the gzip is made once, in the bytes themselves */
        s = s->parent;
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


/* ---------------------------------------------------------------- a thread's hot replies */

/* A repeated request on an HTTP thread (the target memo's peek) is answered
 * from the thread's own handle on the cached bytes, without the cache's lock
 * or a write to anything another thread writes: a local es_shared (its own
 * reference count, on the thread's cache line) holding one reference to the
 * cache's bytes, so a reply queued from it keeps them alive whatever the cache
 * does meanwhile. It stands for the cache's entry as long as no reply has left
 * the store since it was taken (the cache's removals, an epoch written under
 * its lock and read here without it: an entry is never replaced in place, only
 * removed and added again); after one has, the thread drops its handles at its
 * next lookup and takes the locked path once. Only small replies (the warm
 * listings and analyses of HOT_MAX_BYTES at most) and HOT_SLOTS of them per
 * thread, so what a thread keeps beyond the cache's budget until its next
 * request is bounded (HOT_SLOTS x HOT_MAX_BYTES). A hit sets the bytes'
 * recent bit (read first: written once per eviction round, not per reply),
 * which gives the entry a second chance at eviction (CLOCK) in place of the
 * move to the front of the recency order a locked hit makes. */
#define HOT_SLOTS 4
#define HOT_MAX_BYTES ((size_t)256 << 10)

typedef struct hot {
    unsigned long owner;    /* the cache's id (es_results.id); 0: empty */
    unsigned long removals; /* the cache's removals when it was taken */
    char key[65];
    es_reply reply;         /* shared: a local handle on the cache's bytes */
} hot;

static _Thread_local hot hot_replies[HOT_SLOTS];
static _Thread_local unsigned hot_next;
static pthread_key_t hot_key; /* only to release a thread's handles when it ends */
static pthread_once_t hot_once = PTHREAD_ONCE_INIT;

static void prerendered_forget(void);

static void hot_clear(hot *h)
{
    es_reply_release(&h->reply);
    h->owner = 0;
}

/* The thread's end: its handles go (the bytes stay while a reply or the cache holds them). */
static void hot_exit(void *arg)
{
    (void)arg;
    for (size_t i = 0; i < HOT_SLOTS; i++)
        if (hot_replies[i].owner)
            hot_clear(&hot_replies[i]);
    prerendered_forget();
}

static void hot_key_init(void) { (void)pthread_key_create(&hot_key, hot_exit); }

/* Make sure the thread's handles are released when it ends. */
static void hot_register(void)
{
    pthread_once(&hot_once, hot_key_init);
    if (!pthread_getspecific(hot_key))
        (void)pthread_setspecific(hot_key, &hot_next);
}

/* A local handle on parent's bytes: one reference to parent, counted on its own. */
static es_shared *shared_local(es_shared *parent)
{
    es_shared *s = es_malloc(sizeof *s);
    *s = (es_shared){.refs = 1, .body_static = true, .parent = parent, .body = parent->body, .len = parent->len};
    atomic_init(&s->gz_state, GZ_READY);
    __atomic_add_fetch(&parent->refs, 1, __ATOMIC_RELAXED);
    return s;
}

/* reply (sharing parent bytes) with a local handle instead, into *out. */
static void give_local(const es_reply *reply, es_reply *out)
{
    *out = *reply;
    out->location = NULL;
    out->shared = shared_local(reply->shared);
}

/* This thread's hit counter. */
static atomic_ulong *my_hits(es_results *c)
{
    static atomic_uint threads;
    static _Thread_local unsigned mine = UINT_MAX;
    if (mine == UINT_MAX)
        mine = atomic_fetch_add(&threads, 1) % HIT_SHARDS;
    return &c->fast[mine].hits;
}

/* A hit on this thread's handles: true with the reply given into *out. Stale handles of c are dropped. */
static bool hot_peek(es_results *c, const char *key, es_reply *out)
{
    unsigned long removals = atomic_load_explicit(&c->removals, memory_order_acquire);
    for (size_t i = 0; i < HOT_SLOTS; i++) {
        hot *h = &hot_replies[i];
        if (h->owner != c->id)
            continue;
        if (h->removals != removals) {
            hot_clear(h);
            continue;
        }
        if (strcmp(h->key, key) != 0)
            continue;
        es_shared_give(&h->reply, out);
        atomic_bool *recent = &h->reply.shared->parent->recent;
        if (!atomic_load_explicit(recent, memory_order_relaxed))
            atomic_store_explicit(recent, true, memory_order_relaxed);
        atomic_fetch_add_explicit(my_hits(c), 1, memory_order_relaxed);
        return true;
    }
    return false;
}

/* Keep a handle on e's reply in this thread's slots (c's lock held: removals is exact). */
static void hot_put(es_results *c, const es_result *e, const char *key)
{
    if (!e->reply.shared || e->reply.shared->len > HOT_MAX_BYTES)
        return;
    hot_register();
    size_t i = 0;
    while (i < HOT_SLOTS && hot_replies[i].owner)
        i++;
    hot *h = &hot_replies[i < HOT_SLOTS ? i : hot_next++ % HOT_SLOTS];
    if (h->owner)
        hot_clear(h);
    h->owner = c->id;
    h->removals = atomic_load_explicit(&c->removals, memory_order_relaxed);
    snprintf(h->key, sizeof h->key, "%s", key);
    give_local(&e->reply, &h->reply);
}

/* Drop this thread's handles on c's replies (c is being freed). */
static void hot_forget(const es_results *c)
{
    for (size_t i = 0; i < HOT_SLOTS; i++)
        if (hot_replies[i].owner == c->id)
            hot_clear(&hot_replies[i]);
}

/* Count n replies removed from the store (lock held): the thread's handles on them are stale from now. */
static void count_removed(es_results *c, size_t n)
{
    if (!n)
        return;
    c->evictions += n;
    atomic_fetch_add_explicit(&c->removals, n, memory_order_release);
}

/* The store's eviction hook: an entry a hot handle gave out since the last look is kept once more (CLOCK). */
static bool spare_recent(es_lru_node *n)
{
    es_result *e = ES_LRU_ENTRY(n, es_result, node);
    return e->reply.shared && atomic_exchange_explicit(&e->reply.shared->recent, false, memory_order_relaxed);
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
    if (hot_peek(c, key, out))
        return true;
    pthread_mutex_lock(&c->lock);
    es_lru_node *n = es_lru_find(&c->lru, key);
    es_result *e = n ? ES_LRU_ENTRY(n, es_result, node) : NULL;
    bool hit = e && e->done && !e->failed && take(c, e, out, NULL) == 1;
    if (hit)
        hot_put(c, e, key);
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
        count_removed(c, es_lru_evict_sparing(&c->lru, spare_recent));
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
        count_removed(c, es_lru_evict_sparing(&c->lru, spare_recent));
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
    unsigned long fast = 0;
    for (size_t i = 0; i < HIT_SHARDS; i++)
        fast += atomic_load_explicit(&c->fast[i].hits, memory_order_relaxed);
    pthread_mutex_lock(&c->lock);
    *out = (es_results_stats){.hits = c->hits + fast, .misses = c->misses, .waits = c->waits, .evictions = c->evictions,
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
    hot_forget(c);
    es_lru_destroy(&c->lru);
    pthread_cond_destroy(&c->done);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---------------------------------------------------------------- pre-rendered replies */

#define N_PRERENDERED 4

struct es_prerendered {
    pthread_mutex_t lock;
    unsigned long id; /* unique in the process: a thread's copies name their set */
    struct {
        const es_route *route; /* NULL: a free slot */
        es_catalogue *reg;      /* the catalogue it was rendered from (held) */
        unsigned long hashes;   /* es_digests_generation() before it was rendered */
        es_reply reply;        /* shared bytes */
    } slot[N_PRERENDERED];
};

/* A thread's own copies of the pre-rendered replies it served, as the hot
 * replies above: a local handle on the bytes, valid for the catalogue of that
 * serial (unique per published catalogue: an upload, a deletion or a reload
 * misses) and the background sha256s settled then, so a repeated listing
 * takes neither the set's lock nor a count another thread writes. A stale copy
 * is dropped when its route is asked again (listings are small). */
typedef struct pre_hot {
    unsigned long owner;  /* the set's id; 0: empty */
    const es_route *route;
    unsigned long serial, hashes;
    es_reply reply;       /* shared: a local handle */
} pre_hot;

static _Thread_local pre_hot pre_replies[N_PRERENDERED];

static void pre_clear(pre_hot *h)
{
    es_reply_release(&h->reply);
    h->owner = 0;
}

/* Drop every copy this thread keeps (it ends). */
static void prerendered_forget(void)
{
    for (size_t i = 0; i < N_PRERENDERED; i++)
        if (pre_replies[i].owner)
            pre_clear(&pre_replies[i]);
}

/* This thread's copy of route's reply in p, any catalogue (NULL if none); with `empty`, else a slot to take. */
static pre_hot *pre_find(const es_prerendered *p, const es_route *route, bool empty)
{
    pre_hot *free_slot = NULL;
    for (size_t i = 0; i < N_PRERENDERED; i++) {
        pre_hot *h = &pre_replies[i];
        if (h->owner == p->id && h->route == route)
            return h;
        if (!free_slot && (!h->owner || h->owner != p->id))
            free_slot = h;
    }
    return empty ? (free_slot ? free_slot : &pre_replies[(size_t)route % N_PRERENDERED]) : NULL;
}

/* See route.h. */
es_prerendered *es_prerendered_new(void)
{
    es_prerendered *p = es_calloc(1, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    p->id = next_id();
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
    for (size_t i = 0; i < N_PRERENDERED; i++)
        if (pre_replies[i].owner == p->id)
            pre_clear(&pre_replies[i]);
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
    unsigned long hashes = es_digests_generation();
    pre_hot *h = pre_find(p, route, false);
    if (h && h->serial == cx->reg->serial && h->hashes == hashes) {
        es_shared_give(&h->reply, &cx->reply);
        return true;
    }
    if (h)
        pre_clear(h); /* another catalogue's, or made before a sha256 settled */
    pthread_mutex_lock(&p->lock);
    size_t i = prerendered_slot(p, route);
    bool hit = p->slot[i].route == route && p->slot[i].reg == cx->reg && p->slot[i].hashes == hashes;
    if (hit) {
        es_shared_give(&p->slot[i].reply, &cx->reply);
        hot_register();
        h = pre_find(p, route, true);
        if (h->owner)
            pre_clear(h);
        *h = (pre_hot){.owner = p->id, .route = route, .serial = cx->reg->serial, .hashes = hashes};
        give_local(&p->slot[i].reply, &h->reply);
    }
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
