/* Per-selection derived data, computed once and kept (issue 33 §2, issue 31 §4).
 *
 * A request that streams a selection (cosine?row=i) needs, besides the row it
 * asks about, what depends on the selection alone: its mean row (columns
 * centring) and the norms of its centred rows. Computing them costs one or two
 * passes over the matrix; they are kept here, keyed by the matrix's identity
 * (its data's sha256, view and shape: other data is another key), the
 * selection's canonical rows and the centring, so a later request of the same
 * selection reads the matrix once.
 *
 * One process-wide store (es_lru) bounded to ES_DERIVED_MAX_BYTES, least
 * recently used out first, behind one mutex. An entry a request holds is not
 * freed until it lets go (the store's holders count the references). Two
 * requests that miss at once both compute; the first to keep wins. */
#include "analysis/internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "embedscope/lru.h"
#include "embedscope/rowsel.h"

typedef struct entry {
    es_lru_node node;
    es_derived pub;
    char *key;
} entry;

static void entry_free(es_lru_node *n)
{
    entry *e = ES_LRU_ENTRY(n, entry, node);
    free(e->pub.mean);
    free(e->pub.norms);
    free(e->key);
    free(e);
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static es_lru store;
static bool ready;
static es_derived_stats stats;

/* The store, initialised on first use (lock held). */
static es_lru *the_store(void)
{
    if (!ready) {
        es_lru_init(&store, ES_DERIVED_MAX_BYTES, entry_free);
        ready = true;
    }
    return &store;
}

/* See internal.h. */
char *es_derived_key(const es_matrix *m, const size_t *idx, size_t n, es_centering c)
{
    char *identity = es_matrix_identity(m), *rows = es_rows_canonical(idx, n);
    char *key = es_asprintf("%s|%s|%s", identity, rows, es_centering_name(c));
    free(identity);
    free(rows);
    return key;
}

/* See internal.h. */
const es_derived *es_derived_find(const char *key)
{
    pthread_mutex_lock(&lock);
    es_lru_node *found = es_lru_find(the_store(), key);
    if (found) {
        stats.hits++;
        found->holders++;
        es_lru_touch(&store, found);
    } else {
        stats.misses++;
    }
    pthread_mutex_unlock(&lock);
    return found ? &ES_LRU_ENTRY(found, entry, node)->pub : NULL;
}

/* See internal.h. */
void es_derived_release(const es_derived *dv)
{
    if (!dv)
        return;
    entry *e = (entry *)(void *)((char *)dv - offsetof(entry, pub));
    pthread_mutex_lock(&lock);
    e->node.holders--;
    es_lru_drop_if_unused(&store, &e->node);
    pthread_mutex_unlock(&lock);
}

/* See internal.h. */
void es_derived_keep(const char *key, size_t n, size_t d, double *mean, double *norms)
{
    entry *e = es_calloc(1, sizeof *e);
    e->key = es_strdup(key);
    e->pub = (es_derived){.n = n, .d = d, .mean = mean, .norms = norms};
    size_t bytes = sizeof *e + strlen(key) + 1 + (n + (mean ? d : 0)) * sizeof(double);
    pthread_mutex_lock(&lock);
    es_lru *lru = the_store();
    if (es_lru_find(lru, key)) { /* another request kept it first */
        pthread_mutex_unlock(&lock);
        entry_free(&e->node);
        return;
    }
    es_lru_add(lru, &e->node, e->key);
    if (es_lru_store(lru, &e->node, bytes)) {
        stats.kept++;
        stats.evictions += es_lru_evict(lru);
    } else {
        es_lru_drop_if_unused(lru, &e->node); /* larger than the whole budget */
    }
    pthread_mutex_unlock(&lock);
}

/* See analysis.h. */
void es_derived_get_stats(es_derived_stats *out)
{
    pthread_mutex_lock(&lock);
    *out = stats;
    out->bytes = ready ? store.bytes : 0;
    out->entries = ready ? store.entries : 0;
    out->max_bytes = ES_DERIVED_MAX_BYTES;
    pthread_mutex_unlock(&lock);
}
