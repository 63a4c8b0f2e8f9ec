/* The response cache: rendered 200 replies of analyses (body, its gzip, ETag,
 * caching policy) keyed by the sha256 of the canonical request, the text the
 * ETag hashes. Results are immutable for given inputs, so a repeated request
 * (the attention ranking, per-layer tables, any analysis) is a copy instead of
 * a computation.
 *
 * Bounded by bytes, least recently used entries evicted. Single flight: the
 * first request for a key claims it and computes; concurrent requests for the
 * same key wait for it and take its reply (or, if it failed, compute
 * themselves). An entry that is
 * evicted, too large to keep, or failed is detached from the table and lives
 * on until its last waiter has taken it. */
#include "http/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_BUCKETS 4096
/* Bookkeeping charged per entry on top of its bodies. */
#define ENTRY_OVERHEAD 256

struct es_result {
    char key[65];
    bool done;       /* computed (or failed); false while its owner computes */
    bool cached;     /* in the table and the LRU list, its bytes counted */
    bool failed;     /* no reply: its waiters compute themselves */
    bool detached;   /* out of the table, kept for its waiters */
    size_t waiters;  /* requests that waited for it and have not taken it yet */
    es_reply reply;  /* status 200, body and gz owned */
    size_t bytes;
    es_result *hnext;       /* hash chain */
    es_result *prev, *next; /* LRU list, most recent first (cached entries only) */
};

struct es_results {
    pthread_mutex_t lock;
    pthread_cond_t done;
    es_result *buckets[N_BUCKETS];
    es_result *lru_head, *lru_tail;
    size_t bytes, entries, max_bytes;
    unsigned long hits, misses, waits, evictions;
};

/* An empty cache of at most max_bytes. Never fails. */
es_results *es_results_new(size_t max_bytes)
{
    es_results *c = es_calloc(1, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->done, NULL);
    c->max_bytes = max_bytes;
    return c;
}

/* Free an entry and its reply. */
static void entry_free(es_result *e)
{
    es_reply_release(&e->reply);
    free(e);
}

/* The chain head of a key (the first 8 hex digits of the sha256). */
static es_result **bucket(es_results *c, const char *key)
{
    char head[9];
    memcpy(head, key, 8);
    head[8] = '\0';
    return &c->buckets[strtoul(head, NULL, 16) % N_BUCKETS];
}

/* The table entry of key (computing or cached), NULL if none. */
static es_result *find(es_results *c, const char *key)
{
    for (es_result *e = *bucket(c, key); e; e = e->hnext)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

/* Remove e from its hash chain (it must be there). */
static void unlink_hash(es_results *c, es_result *e)
{
    es_result **p = bucket(c, e->key);
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
}

/* Remove e from the LRU list. */
static void lru_unlink(es_results *c, es_result *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->lru_head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->lru_tail = e->prev;
    e->prev = e->next = NULL;
}

/* Make e the most recently used. */
static void lru_push_front(es_results *c, es_result *e)
{
    e->prev = NULL;
    e->next = c->lru_head;
    if (c->lru_head)
        c->lru_head->prev = e;
    c->lru_head = e;
    if (!c->lru_tail)
        c->lru_tail = e;
}

/* Take e out of the table (and the LRU list and byte count if cached); free it
 * unless a waiter still has to take it. */
static void detach(es_results *c, es_result *e)
{
    unlink_hash(c, e);
    if (e->cached) {
        lru_unlink(c, e);
        c->bytes -= e->bytes;
        c->entries--;
        e->cached = false;
    }
    if (e->waiters == 0)
        entry_free(e);
    else
        e->detached = true;
}

/* A copy of a stored reply (bodies duplicated). Never fails. */
static void copy_reply(const es_reply *from, es_reply *to)
{
    *to = *from;
    to->body = es_malloc(from->len ? from->len : 1);
    memcpy(to->body, from->body, from->len);
    to->body_static = false;
    if (from->gz) {
        to->gz = es_malloc(from->gz_len);
        memcpy(to->gz, from->gz, from->gz_len);
    }
}

/* Give e's reply to a request: 1 with it copied, 0 if e failed. */
static int take(es_results *c, es_result *e, es_reply *out)
{
    if (e->failed)
        return 0;
    copy_reply(&e->reply, out);
    c->hits++;
    if (e->cached) {
        lru_unlink(c, e);
        lru_push_front(c, e);
    }
    return 1;
}

/* See http.h. */
bool es_results_peek(es_results *c, const char *key, es_reply *out)
{
    pthread_mutex_lock(&c->lock);
    es_result *e = find(c, key);
    bool hit = e && e->done && take(c, e, out) == 1;
    pthread_mutex_unlock(&c->lock);
    return hit;
}

/* See http.h. */
int es_results_claim(es_results *c, const char *key, es_reply *out, es_result **claim)
{
    *claim = NULL;
    pthread_mutex_lock(&c->lock);
    es_result *e = find(c, key);
    if (!e) {
        e = es_calloc(1, sizeof *e);
        snprintf(e->key, sizeof e->key, "%s", key);
        es_result **head = bucket(c, key);
        e->hnext = *head;
        *head = e;
        c->misses++;
        pthread_mutex_unlock(&c->lock);
        *claim = e;
        return 0;
    }
    if (!e->done) {
        c->waits++;
        e->waiters++;
        while (!e->done)
            pthread_cond_wait(&c->done, &c->lock);
        e->waiters--;
    }
    int rc = take(c, e, out);
    if (e->detached && e->waiters == 0)
        entry_free(e); /* detached while we waited: we were its last taker */
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* Evict least recently used entries until the budget holds. */
static void evict(es_results *c)
{
    while (c->bytes > c->max_bytes && c->lru_tail) {
        c->evictions++;
        detach(c, c->lru_tail);
    }
}

/* See http.h. */
void es_results_settle(es_results *c, es_result *claim, const es_reply *reply)
{
    es_result *e = claim;
    size_t bytes = 0;
    e->failed = !reply;
    if (reply) {
        copy_reply(reply, &e->reply);
        bytes = ENTRY_OVERHEAD + e->reply.len + e->reply.gz_len;
    }
    pthread_mutex_lock(&c->lock);
    e->done = true;
    if (reply && bytes <= c->max_bytes) {
        e->cached = true;
        e->bytes = bytes;
        c->bytes += bytes;
        c->entries++;
        lru_push_front(c, e);
        evict(c);
    } else {
        detach(c, e); /* failed or larger than the whole budget: only for the waiters */
    }
    pthread_cond_broadcast(&c->done);
    pthread_mutex_unlock(&c->lock);
}

/* A consistent snapshot of the counters. Never fails. */
void es_results_get_stats(es_results *c, es_results_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = (es_results_stats){.hits = c->hits, .misses = c->misses, .waits = c->waits, .evictions = c->evictions,
                              .bytes = c->bytes, .entries = c->entries, .max_bytes = c->max_bytes};
    pthread_mutex_unlock(&c->lock);
}

/* Free every entry; no request may be using the cache any more. */
void es_results_free(es_results *c)
{
    if (!c)
        return;
    for (size_t b = 0; b < N_BUCKETS; b++)
        for (es_result *e = c->buckets[b], *next; e; e = next) {
            next = e->hnext;
            entry_free(e);
        }
    pthread_cond_destroy(&c->done);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
