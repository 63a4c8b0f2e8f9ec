/* embedscope LRU store: the keyed, byte-bounded, least-recently-used bookkeeping
 * shared by the caches (decompositions in src/linalg/cache.c, rendered replies
 * in src/api/results.c). Ownership and failure rules: see core.h.
 *
 * Intrusive: each cache embeds an es_lru_node in its entry and gets the entry
 * back with ES_LRU_ENTRY. The store never allocates or frees entries and does
 * no locking: the cache keeps its own mutex, condition variables and
 * single-flight protocol, and calls these functions with its lock held.
 *
 * A node is in one of three states:
 *   pending  added under its key (es_lru_add): found by es_lru_find, charged no
 *            bytes, not in the recency order, never evicted (a computation in
 *            progress);
 *   stored   charged its bytes (es_lru_store): found, counted in bytes/entries,
 *            evicted least recently used first when over the budget;
 *   out      never added, or removed (es_lru_remove, es_lru_evict, an oversized
 *            es_lru_store): no longer found. Its entry is freed (through the
 *            store's free_entry) by es_lru_evict or es_lru_drop_if_unused once
 *            no holder is left: holders counts the requests that still have to
 *            take the entry (waiters), kept by the cache under its lock. */
#ifndef EMBEDSCOPE_LRU_H
#define EMBEDSCOPE_LRU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct es_lru_node {
    size_t holders;    /* the cache's: requests that still have to take the entry */
    /* read-only for callers */
    const char *key;   /* borrowed from the entry, which keeps it alive */
    size_t bytes;      /* charged against the budget while stored */
    bool in_table;     /* pending or stored: es_lru_find returns it */
    bool stored;       /* stored: counted and subject to eviction */
    /* private */
    uint64_t hash;
    struct es_lru_node *hnext;       /* hash chain */
    struct es_lru_node *prev, *next; /* recency list, most recent first (stored only) */
} es_lru_node;

typedef struct es_lru {
    /* read-only for callers */
    size_t bytes, entries, max_bytes; /* of the stored nodes; the budget */
    /* private */
    void (*free_entry)(es_lru_node *n);
    es_lru_node **buckets;
    es_lru_node *head, *tail;
} es_lru;

/* The entry of type `type` whose member `member` is the node n. */
#define ES_LRU_ENTRY(n, type, member) ((type *)(void *)((char *)(n) - offsetof(type, member)))

/* Initialise an empty store with a budget of max_bytes; free_entry frees the
 * entry of a node (retained). Cannot fail. */
void es_lru_init(es_lru *lru, size_t max_bytes, void (*free_entry)(es_lru_node *n));
/* Free the entry of every pending or stored node, then the store's own memory.
 * Cannot fail. */
void es_lru_destroy(es_lru *lru);

/* The pending or stored node of key, NULL if none. Does not touch it. */
es_lru_node *es_lru_find(es_lru *lru, const char *key);
/* Add n (out, zero-initialised or removed) as pending under key, which n's
 * entry keeps alive, with no holders; the key must not be in the store yet.
 * Cannot fail. */
void es_lru_add(es_lru *lru, es_lru_node *n, const char *key);
/* Make pending n stored with the given bytes, as the most recently used, and
 * return true; if bytes exceed the whole budget, remove n instead and return
 * false. The store may now be over budget: call es_lru_evict. Cannot fail. */
bool es_lru_store(es_lru *lru, es_lru_node *n, size_t bytes);
/* Mark n the most recently used if it is stored (pending or out: no effect).
 * Cannot fail. */
void es_lru_touch(es_lru *lru, es_lru_node *n);
/* Take n out of the store (and out of the counts if stored); no effect if out.
 * Cannot fail; the entry is not freed (see es_lru_drop_if_unused). */
void es_lru_remove(es_lru *lru, es_lru_node *n);
/* While the stored bytes exceed the budget, remove the least recently used
 * stored node and free its entry unless it has holders. Returns how many were
 * removed. Cannot fail. */
size_t es_lru_evict(es_lru *lru);
/* es_lru_evict with a second chance (CLOCK over the recency order): a victim
 * for which spare(victim) is true (it clears what it read: a reference bit
 * set by readers that did not touch the order) is made the most recently
 * used instead of removed, at most as many times per call as there were
 * stored nodes, so the call ends. spare NULL: es_lru_evict. Cannot fail. */
size_t es_lru_evict_sparing(es_lru *lru, bool (*spare)(es_lru_node *n));
/* Free n's entry if n is out of the store and has no holders; else nothing. */
void es_lru_drop_if_unused(es_lru *lru, es_lru_node *n);

#endif
