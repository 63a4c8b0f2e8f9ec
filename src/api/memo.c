/* The target memo: what a gated request's raw target (its path, its query
 * parameters as received and its Accept header) was keyed to under one
 * catalogue, so that a repeated request finds its cached reply without being
 * parsed, canonicalised and hashed again (docs/operations.md, "Where a warm
 * reply's time goes": that work was a third of a cached PCA reply's CPU).
 *
 * One table per HTTP thread (thread-specific data, freed when the thread
 * ends): a lookup and a store write nothing another thread reads, so no lock,
 * counter or cache line is shared by the replies of different threads. An
 * entry is valid only for the catalogue it was made under (es_catalogue.serial,
 * unique per published catalogue): an upload, a deletion or a reload
 * publishes a new one, whose requests miss and are keyed again. What a
 * request is keyed to depends on the catalogue and those inputs alone (the
 * analyses' keys are their parsed parameters and selections, never the load or
 * the caches' contents), so a hit names the same reply the full path would. */
#include "embedscope/memo.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MEMO_SLOTS 512 /* direct-mapped: a colliding target replaces the older one */

typedef struct memo_entry {
    unsigned long serial; /* the catalogue's; 0: empty */
    unsigned long hashes; /* es_digests_generation() before it was keyed */
    uint64_t h;
    size_t len;
    char *target;
    es_memo_value v;
} memo_entry;

typedef struct memo {
    memo_entry slot[MEMO_SLOTS];
} memo;

static pthread_key_t memo_key;
static pthread_once_t memo_once = PTHREAD_ONCE_INIT;

static void memo_free(void *p)
{
    memo *m = p;
    for (size_t i = 0; i < MEMO_SLOTS; i++)
        free(m->slot[i].target);
    free(m);
}

static void memo_init(void) { (void)pthread_key_create(&memo_key, memo_free); }

/* This thread's table, made on first use; NULL if it cannot be. */
static memo *my_memo(bool create)
{
    pthread_once(&memo_once, memo_init);
    memo *m = pthread_getspecific(memo_key);
    if (!m && create) {
        m = calloc(1, sizeof *m);
        if (m && pthread_setspecific(memo_key, m) != 0) {
            free(m);
            m = NULL;
        }
    }
    return m;
}

/* FNV-1a, 64 bits. */
static uint64_t hash_of(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Append len bytes and a NUL separator; false when it does not fit. */
static bool put(es_memo_target *t, const char *s)
{
    size_t len = strlen(s);
    if (t->len + len + 1 > sizeof t->text)
        return false;
    memcpy(t->text + t->len, s, len + 1);
    t->len += len + 1;
    return true;
}

/* See memo.h. Every part is NUL-terminated (no part holds a NUL: %00 is
 * refused before a request is routed), so different inputs never give one text. */
bool es_memo_make(es_memo_target *t, const char *path, const es_query *q, const char *accept,
                  unsigned long hashes)
{
    t->hashes = hashes;
    t->len = 0;
    if (!put(t, path))
        return false;
    for (size_t i = 0; q && i < q->n; i++)
        if (!put(t, "\1") || !put(t, q->items[i].key) || !put(t, q->items[i].value))
            return false;
    return put(t, "\2") && put(t, accept ? accept : "\3");
}

/* See memo.h. */
bool es_memo_get(const es_memo_target *t, unsigned long serial, es_memo_value *out)
{
    memo *m = serial ? my_memo(false) : NULL;
    if (!m)
        return false;
    uint64_t h = hash_of(t->text, t->len);
    const memo_entry *e = &m->slot[h % MEMO_SLOTS];
    if (e->serial != serial || e->hashes != t->hashes || e->h != h || e->len != t->len || memcmp(e->target, t->text, t->len) != 0)
        return false;
    *out = e->v;
    return true;
}

/* See memo.h. */
void es_memo_put(const es_memo_target *t, unsigned long serial, const es_memo_value *v)
{
    memo *m = serial ? my_memo(true) : NULL;
    if (!m)
        return;
    uint64_t h = hash_of(t->text, t->len);
    memo_entry *e = &m->slot[h % MEMO_SLOTS];
    if (e->len < t->len || !e->target) {
        char *grown = realloc(e->target, t->len);
        if (!grown)
            return;
        e->target = grown;
    }
    memcpy(e->target, t->text, t->len);
    e->len = t->len;
    e->h = h;
    e->serial = serial;
    e->hashes = t->hashes;
    e->v = *v;
}
