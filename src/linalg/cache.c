/* Thread-safe LRU cache of decompositions, bounded in bytes, with single flight.
 *
 * Entries live in one doubly linked list, most recently used first, found by a
 * 64-bit hash then the full key (the list is short: each entry is a whole SVD).
 * The first requester of a key links a COMPUTING entry and computes outside the
 * lock; later requesters pin the entry and wait on the condition variable. On
 * success the entry becomes READY and is kept if it fits the budget; on failure
 * it is unlinked (so a later request retries) and its error is handed to the
 * waiters. An unlinked entry is freed by whoever unpins it last.
 *
 * Statistics: every request is exactly one of a hit (READY entry found), a wait
 * (joined a computation in progress) or a miss (computed it: misses ==
 * computations). evictions counts READY entries dropped for the budget; bytes and
 * entries describe the READY entries kept. */
#include "embedscope/linalg.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum { ENTRY_COMPUTING, ENTRY_READY, ENTRY_FAILED } entry_state;

typedef struct entry {
    struct entry *prev, *next; /* LRU list, only while linked */
    char *key;
    uint64_t hash;
    entry_state state;
    bool linked;
    int pins;                  /* requesters waiting for this entry */
    es_svd *svd;               /* the cache's reference, once READY */
    size_t bytes;              /* es_svd_bytes, once READY */
    es_err err;                /* FAILED: the error for the waiters */
} entry;

struct es_cache {
    pthread_mutex_t lock;
    pthread_cond_t done;       /* broadcast whenever a computation finishes */
    entry *head, *tail;
    es_cache_stats stats;
};

/* FNV-1a, to skip most string comparisons during lookup. */
static uint64_t hash_key(const char *s)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* "<matrix id>@<sha256>|<canonical rows>|<centring>". Cannot fail. */
static char *key_of(const es_matrix *m, const size_t *idx, size_t n, es_centering c)
{
    char *rows = es_rows_canonical(idx, n);
    char *key = es_asprintf("%s@%s|%s|%s", m->id, m->prov.sha256, rows, es_centering_name(c));
    free(rows);
    return key;
}

/* A new cache holding at most max_bytes of decompositions. Cannot fail. */
es_cache *es_cache_new(size_t max_bytes)
{
    es_cache *c = es_calloc(1, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->done, NULL);
    c->stats.max_bytes = max_bytes;
    return c;
}

static void entry_free(entry *e)
{
    es_svd_release(e->svd);
    free(e->key);
    free(e);
}

static void list_push_front(es_cache *c, entry *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    else
        c->tail = e;
    c->head = e;
}

static void list_remove(es_cache *c, entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

/* Link e as the most recently used entry, counting its bytes if READY. */
static void link_entry(es_cache *c, entry *e)
{
    list_push_front(c, e);
    e->linked = true;
    if (e->state == ENTRY_READY) {
        c->stats.bytes += e->bytes;
        c->stats.entries++;
    }
}

/* Take e out of the list and out of the counts. */
static void unlink_entry(es_cache *c, entry *e)
{
    list_remove(c, e);
    e->linked = false;
    if (e->state == ENTRY_READY) {
        c->stats.bytes -= e->bytes;
        c->stats.entries--;
    }
}

/* Free e if it is out of the list and nobody waits on it any more. */
static void drop_if_unused(entry *e)
{
    if (!e->linked && e->pins == 0)
        entry_free(e);
}

/* Mark e as the most recently used. */
static void touch(es_cache *c, entry *e)
{
    list_remove(c, e);
    list_push_front(c, e);
}

static entry *find(es_cache *c, const char *key, uint64_t hash)
{
    for (entry *e = c->head; e; e = e->next)
        if (e->hash == hash && strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

/* Drop least recently used READY entries until the budget holds. Entries being
 * computed hold no bytes and are skipped; callers' references stay valid. */
static void evict_over_budget(es_cache *c)
{
    entry *e = c->tail;
    while (c->stats.bytes > c->stats.max_bytes && e) {
        entry *prev = e->prev;
        if (e->state == ENTRY_READY) {
            unlink_entry(c, e);
            c->stats.evictions++;
            drop_if_unused(e);
        }
        e = prev;
    }
}

/* Publish the outcome of a computation (lock held): keep a success that fits the
 * budget, unlink a failure or an oversized result, wake the waiters. */
static void publish(es_cache *c, entry *e, es_svd *svd, const es_err *failure)
{
    unlink_entry(c, e); /* still COMPUTING: it held no bytes */
    if (!svd) {
        e->state = ENTRY_FAILED;
        e->err = *failure;
    } else {
        e->svd = svd;
        e->bytes = es_svd_bytes(svd);
        e->state = ENTRY_READY;
        if (e->bytes <= c->stats.max_bytes) { /* kept as the newest use */
            link_entry(c, e);
            evict_over_budget(c);
        }
    }
    pthread_cond_broadcast(&c->done);
}

/* Wait (lock held) for the computation of e, then take its result or error. */
static int wait_for(es_cache *c, entry *e, es_svd **out, es_err *err)
{
    c->stats.waits++;
    e->pins++;
    while (e->state == ENTRY_COMPUTING)
        pthread_cond_wait(&c->done, &c->lock);
    e->pins--;
    int rc = 0;
    if (e->state == ENTRY_READY)
        *out = es_svd_retain(e->svd);
    else {
        if (err)
            *err = e->err;
        rc = -1;
    }
    drop_if_unused(e);
    return rc;
}

/* Compute the decomposition for a new entry outside the lock, then publish it. */
static int compute_entry(es_cache *c, entry *e, const es_matrix *m, const size_t *idx, size_t n,
                         es_centering centring, es_svd **out, es_err *err)
{
    es_svd *svd = NULL;
    es_err failure = {0};
    int rc = es_svd_compute(m, idx, n, centring, &svd, &failure);
    if (rc == 0) {
        svd->key = es_strdup(e->key);
        *out = es_svd_retain(svd);
    } else if (err) {
        *err = failure;
    }
    pthread_mutex_lock(&c->lock);
    publish(c, e, svd, &failure);
    drop_if_unused(e);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* The decomposition of (m, idx[0..n), centring), computed once per key. Fails as
 * es_svd_compute does; waiters of a failed computation get the same error and
 * the key is computed again on a later request. */
int es_cache_svd(es_cache *c, const es_matrix *m, const size_t *idx, size_t n, es_centering centring,
                 es_svd **out, es_err *err)
{
    char *key = key_of(m, idx, n, centring);
    uint64_t hash = hash_key(key);
    pthread_mutex_lock(&c->lock);
    entry *e = find(c, key, hash);
    if (e) {
        free(key);
        int rc = 0;
        if (e->state == ENTRY_READY) {
            c->stats.hits++;
            touch(c, e);
            *out = es_svd_retain(e->svd);
        } else {
            rc = wait_for(c, e, out, err);
        }
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    c->stats.misses++;
    c->stats.computations++;
    e = es_calloc(1, sizeof *e);
    e->key = key;
    e->hash = hash;
    e->state = ENTRY_COMPUTING;
    link_entry(c, e);
    pthread_mutex_unlock(&c->lock);
    return compute_entry(c, e, m, idx, n, centring, out, err);
}

/* A consistent snapshot of the counters. Cannot fail. */
void es_cache_get_stats(es_cache *c, es_cache_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->lock);
}

/* Free the cache and its references (NULL ignored). No request may be in flight;
 * decompositions still held by callers stay valid. */
void es_cache_free(es_cache *c)
{
    if (!c)
        return;
    for (entry *e = c->head, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    pthread_cond_destroy(&c->done);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
