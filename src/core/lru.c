/* The LRU store shared by the caches: a chained hash table of every pending or
 * stored node (FNV-1a of the key, full key compared on a hash match) and a
 * doubly linked recency list of the stored ones, with their byte count. See
 * include/embedscope/lru.h for the node states. */
#include "embedscope/lru.h"

#include <stdlib.h>
#include <string.h>

#include "embedscope/core.h"

/* Hash chains: caches hold from a few decompositions to thousands of replies. */
#define N_BUCKETS 4096

/* FNV-1a, to pick the chain and skip most string comparisons. */
static uint64_t hash_key(const char *s)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* The chain head of a hash. */
static es_lru_node **bucket(es_lru *lru, uint64_t hash)
{
    return &lru->buckets[hash % N_BUCKETS];
}

/* Initialise an empty store with a budget of max_bytes. Cannot fail. */
void es_lru_init(es_lru *lru, size_t max_bytes, void (*free_entry)(es_lru_node *n))
{
    *lru = (es_lru){.max_bytes = max_bytes, .free_entry = free_entry,
                    .buckets = es_calloc(N_BUCKETS, sizeof *lru->buckets)};
}

/* Free the entry of every node in the table, then the table. Cannot fail. */
void es_lru_destroy(es_lru *lru)
{
    for (size_t b = 0; b < N_BUCKETS; b++)
        for (es_lru_node *n = lru->buckets[b], *next; n; n = next) {
            next = n->hnext;
            lru->free_entry(n);
        }
    free(lru->buckets);
    *lru = (es_lru){0};
}

/* The pending or stored node of key, NULL if none. */
es_lru_node *es_lru_find(es_lru *lru, const char *key)
{
    uint64_t hash = hash_key(key);
    for (es_lru_node *n = *bucket(lru, hash); n; n = n->hnext)
        if (n->hash == hash && strcmp(n->key, key) == 0)
            return n;
    return NULL;
}

/* Add n as pending under key (borrowed from n's entry). Cannot fail. */
void es_lru_add(es_lru *lru, es_lru_node *n, const char *key)
{
    *n = (es_lru_node){.key = key, .hash = hash_key(key), .in_table = true};
    es_lru_node **head = bucket(lru, n->hash);
    n->hnext = *head;
    *head = n;
}

/* Put stored n at the front of the recency list. */
static void list_push_front(es_lru *lru, es_lru_node *n)
{
    n->prev = NULL;
    n->next = lru->head;
    if (lru->head)
        lru->head->prev = n;
    else
        lru->tail = n;
    lru->head = n;
}

/* Take stored n out of the recency list. */
static void list_unlink(es_lru *lru, es_lru_node *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        lru->head = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        lru->tail = n->prev;
    n->prev = n->next = NULL;
}

/* Make pending n stored and the most recently used; remove it instead if it is
 * larger than the whole budget. Returns whether it is stored. */
bool es_lru_store(es_lru *lru, es_lru_node *n, size_t bytes)
{
    if (bytes > lru->max_bytes) {
        es_lru_remove(lru, n);
        return false;
    }
    n->bytes = bytes;
    n->stored = true;
    lru->bytes += bytes;
    lru->entries++;
    list_push_front(lru, n);
    return true;
}

/* Mark n the most recently used if it is stored. */
void es_lru_touch(es_lru *lru, es_lru_node *n)
{
    if (!n->stored)
        return;
    list_unlink(lru, n);
    list_push_front(lru, n);
}

/* Take n out of its hash chain, the recency list and the counts. */
void es_lru_remove(es_lru *lru, es_lru_node *n)
{
    if (!n->in_table)
        return;
    es_lru_node **p = bucket(lru, n->hash);
    while (*p != n)
        p = &(*p)->hnext;
    *p = n->hnext;
    n->hnext = NULL;
    n->in_table = false;
    if (n->stored) {
        list_unlink(lru, n);
        lru->bytes -= n->bytes;
        lru->entries--;
        n->stored = false;
    }
}

/* Free n's entry if it is out of the store and nobody still has to take it. */
void es_lru_drop_if_unused(es_lru *lru, es_lru_node *n)
{
    if (!n->in_table && n->holders == 0)
        lru->free_entry(n);
}

/* Remove least recently used stored nodes until the budget holds; count them. */
size_t es_lru_evict(es_lru *lru)
{
    return es_lru_evict_sparing(lru, NULL);
}

/* es_lru_evict, where a victim spare() says was used since is moved to the
 * front instead (its second chance), at most once per stored node per call. */
size_t es_lru_evict_sparing(es_lru *lru, bool (*spare)(es_lru_node *n))
{
    size_t evicted = 0, chances = spare ? lru->entries : 0;
    while (lru->bytes > lru->max_bytes) {
        es_lru_node *victim = lru->tail;
        if (chances && spare(victim)) {
            chances--;
            es_lru_touch(lru, victim);
            continue;
        }
        es_lru_remove(lru, victim);
        es_lru_drop_if_unused(lru, victim);
        evicted++;
    }
    return evicted;
}
