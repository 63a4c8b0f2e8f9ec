/* Thread-safe LRU cache of decompositions, bounded in bytes, with single flight.
 *
 * The keys, recency order and byte budget are an es_lru store (lru.h). The
 * first requester of a key adds a COMPUTING entry (pending in the store) and
 * computes outside the lock; later requesters hold the entry (node holders)
 * and wait on the condition variable. On success the entry becomes READY and
 * is stored if it fits the budget; on failure it is removed (so a later
 * request retries) and its error is handed to the waiters. An entry out of the
 * store is freed by whoever lets go of it last.
 *
 * With a cache directory the single flight spans every process sharing it
 * (replicas on one volume): a miss first reads the key's file; without one it
 * takes the key's lock file ("<file name>.lock", flock) before computing, so
 * a key another process is computing is waited for and then read from the file
 * that process writes. The kernel drops a lock with its holder, so a daemon
 * that dies mid-computation leaves no stale lock: a waiter then gets the lock,
 * finds no file and computes the key itself.
 *
 * Statistics: every request is exactly one of a hit (READY entry found), a wait
 * (joined a computation in progress in this process) or a miss; a miss is
 * either read from the cache directory (disk_loads; disk_waits of them after
 * waiting for another process) or computed (computations). evictions counts
 * READY entries dropped for the budget; bytes and entries describe the READY
 * entries kept. */
#include "linalg/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "embedscope/lru.h"
#include "embedscope/rowsel.h"

typedef enum { ENTRY_COMPUTING, ENTRY_READY, ENTRY_FAILED } entry_state;

typedef struct entry {
    es_lru_node node;          /* key, bytes once READY, whether still in the store,
                                  holders: requesters waiting for this entry */
    char *key;
    entry_state state;
    es_svd *svd;               /* the cache's reference, once READY */
    es_err err;                /* FAILED: the error for the waiters */
    es_computing computing;    /* COMPUTING: what is being computed, since when */
    struct entry *next_computing, *prev_computing; /* COMPUTING: the cache's list of running decompositions */
} entry;

struct es_cache {
    pthread_mutex_t lock;
    pthread_cond_t done;       /* broadcast whenever a computation finishes */
    es_lru lru;
    es_cache_stats stats;      /* the counters; bytes, entries, max_bytes come from lru */
    char *dir;                 /* decompositions on disk, or NULL */
    entry *computing;          /* entries being computed, newest first */
    es_cache_observer observer; /* told of each computation (the cost model's refresh), or NULL */
};

/* "<matrix identity>|<canonical rows>|<centring>|<method>", the method being
 * "exact", "values" or "topk:K": a matrix replaced by other data (an upload, a reloaded
 * configuration) has another identity, so its old entries become unreachable
 * and age out of the LRU. Cannot fail. */
static char *key_of(const es_matrix *m, const size_t *idx, size_t n, es_centering c, es_method method, size_t k)
{
    char *rows = es_rows_canonical(idx, n), *identity = es_matrix_identity(m);
    char *key = method == ES_METHOD_TOPK
                    ? es_asprintf("%s|%s|%s|topk:%zu", identity, rows, es_centering_name(c), k)
                    : es_asprintf("%s|%s|%s|%s", identity, rows, es_centering_name(c), es_method_name(method));
    free(identity);
    free(rows);
    return key;
}

/* Free the entry of node n (the store's free_entry). */
static void node_free(es_lru_node *n)
{
    entry *e = ES_LRU_ENTRY(n, entry, node);
    es_svd_release(e->svd);
    free(e->key);
    free(e);
}

/* A new cache holding at most max_bytes of decompositions. Cannot fail. */
es_cache *es_cache_new(size_t max_bytes)
{
    es_cache *c = es_calloc(1, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->done, NULL);
    es_lru_init(&c->lru, max_bytes, node_free);
    return c;
}

/* Publish the outcome of a computation (lock held): keep a success that fits the
 * budget, remove a failure or an oversized result, wake the waiters. */
static void publish(es_cache *c, entry *e, es_svd *svd, const es_err *failure)
{
    if (!svd) {
        e->state = ENTRY_FAILED;
        e->err = *failure;
        es_lru_remove(&c->lru, &e->node);
    } else {
        e->svd = svd;
        e->state = ENTRY_READY;
        /* kept as the newest use; entries being computed are never evicted and
         * the references callers hold stay valid */
        if (es_lru_store(&c->lru, &e->node, es_svd_bytes(svd))) {
            c->stats.evictions += es_lru_evict(&c->lru);
            c->stats.parts += svd->left_transient;
        } else {
            c->stats.refused++;
        }
    }
    pthread_cond_broadcast(&c->done);
}

/* Wait (lock held) for the computation of e, then take its result or, -1, a copy
 * of its error. */
static int wait_for(es_cache *c, entry *e, es_svd **out, es_err *err)
{
    c->stats.waits++;
    e->node.holders++;
    while (e->state == ENTRY_COMPUTING)
        pthread_cond_wait(&c->done, &c->lock);
    e->node.holders--;
    int rc = 0;
    if (e->state == ENTRY_READY)
        *out = es_svd_retain(e->svd);
    else {
        if (err)
            *err = e->err;
        rc = -1;
    }
    es_lru_drop_if_unused(&c->lru, &e->node);
    return rc;
}

const double es_svd_bucket_le[ES_SVD_BUCKETS] = {0.01, 0.05, 0.1, 0.5, 1,    5,    10,   30,
                                                  60,   120,  300, 600, 1800, 3600, 7200, 14400};

/* The top k for a request, or the exact decomposition (with a note saying why)
 * when the top-k certificate misses the tolerance or the top-k path cannot run
 * (rank below k). Fails as es_svd_compute. */
static int compute_topk(const es_matrix *m, const size_t *idx, size_t n, es_centering centring, size_t k,
                        es_svd **out, es_err *err)
{
    es_svd *t = NULL;
    es_err why = {0};
    char note[sizeof t->note];
    if (es_svd_topk(m, idx, n, centring, k, ES_TOPK_TOLERANCE, &t, &why) == 0) {
        if (t->cert.passed) {
            *out = t;
            return 0;
        }
        snprintf(note, sizeof note, "top-%zu certificate missed the tolerance %.0e (singular values %.1e, vectors "
                 "%.1e): computed exactly", k, ES_TOPK_TOLERANCE, t->cert.sigma_bound, t->cert.vector_bound);
        es_svd_release(t);
    } else if (why.code == ES_E_NUMERIC) {
        snprintf(note, sizeof note, "top-%zu path not applicable (%.150s): computed exactly", k, why.message);
    } else {
        if (err)
            *err = why;
        return -1;
    }
    es_info("%s: %s", m->id, note);
    if (es_svd_compute(m, idx, n, centring, out, err) < 0)
        return -1;
    snprintf((*out)->note, sizeof (*out)->note, "%s", note);
    return 0;
}

/* Add delta to one counter (lock taken here). */
static void count(es_cache *c, unsigned long *counter)
{
    pthread_mutex_lock(&c->lock);
    (*counter)++;
    pthread_mutex_unlock(&c->lock);
}

/* The decomposition of key from the cache directory: 0 and *out when a valid
 * file is there; -1 when there is none or it was rejected (then deleted). */
static int load_file(es_cache *c, const char *path, const es_matrix *m, const size_t *idx, size_t n,
                     const char *key, es_svd **out)
{
    es_err why = {0};
    double t0 = es_now();
    int rc = es_svd_load(path, m, idx, n, key, out, &why);
    if (rc == 0) {
        es_info("read %s from %s in %.1f ms", key, path, (es_now() - t0) * 1e3);
        count(c, &c->stats.disk_loads);
        return 0;
    }
    if (rc < 0) {
        es_warn("cache_dir: %s; deleting it and computing again", why.message);
        if (unlink(path) != 0)
            es_warn("cache_dir: cannot delete %s: %s", path, strerror(errno));
        count(c, &c->stats.disk_rejected);
    }
    return -1;
}

/* Write a computed decomposition to the cache directory; a failure is logged
 * (the decomposition is still served from memory). */
static void save_file(es_cache *c, const char *path, const es_svd *svd)
{
    es_err why = {0};
    if (es_svd_save(svd, path, &why) == 0)
        count(c, &c->stats.disk_writes);
    else
        es_warn("cache_dir: %s", why.message);
}

/* Take e off the list of running decompositions (lock held). */
static void computing_done(es_cache *c, entry *e)
{
    if (e->prev_computing)
        e->prev_computing->next_computing = e->next_computing;
    else
        c->computing = e->next_computing;
    if (e->next_computing)
        e->next_computing->prev_computing = e->prev_computing;
}

/* The uncached decomposition by a resolved method. Fails as es_svd_compute. */
static int compute_by(const es_matrix *m, const size_t *idx, size_t n, es_centering centring, es_method method,
                      size_t k, es_svd **out, es_err *err)
{
    if (method == ES_METHOD_TOPK)
        return compute_topk(m, idx, n, centring, k, out, err);
    if (method == ES_METHOD_VALUES)
        return es_svd_values(m, idx, n, centring, out, err);
    return es_svd_compute(m, idx, n, centring, out, err);
}

/* "<dir>/<hash>.lock" beside the key's "<dir>/<hash>.svd". Caller frees. */
static char *lock_file_name(const char *svd_path)
{
    size_t stem = strlen(svd_path) - strlen(".svd");
    return es_asprintf("%.*s.lock", (int)stem, svd_path);
}

/* Sleep for ms milliseconds. */
static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Log that key is being waited for, naming the holder its lock file describes. */
static void log_waiting(int fd, const char *key)
{
    char holder[160] = "";
    ssize_t got = pread(fd, holder, sizeof holder - 1, 0);
    holder[got > 0 ? got : 0] = '\0';
    holder[strcspn(holder, "\n")] = '\0';
    es_info("waiting for %s computing %s (single flight across processes)", *holder ? holder : "another process",
            key);
}

/* Take the lock file of key exclusively, waiting while another process holds
 * it (polled, so it works alike on local disks and NFS, where a blocked flock
 * may notice a release late). The holder removes the file before letting go,
 * so the lock is only ours when the file we locked is still the one at lock_path.
 * The descriptor, or -1 when locking is impossible there (logged: the caller
 * computes without it). *waited: another process held it. */
static int lock_key(const char *lock_path, const char *key, bool *waited)
{
    for (;;) {
        int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0664);
        if (fd < 0) {
            es_warn("cache_dir: %s: %s (computing without the cross-process lock)", lock_path, strerror(errno));
            return -1;
        }
        for (long pause = 10; flock(fd, LOCK_EX | LOCK_NB) != 0; pause = pause < 200 ? pause * 2 : 200) {
            if (errno != EWOULDBLOCK && errno != EINTR) {
                es_warn("cache_dir: cannot lock %s: %s (computing without the cross-process lock)", lock_path,
                        strerror(errno));
                close(fd);
                return -1;
            }
            if (!*waited)
                log_waiting(fd, key);
            *waited = true;
            sleep_ms(pause);
        }
        struct stat held, named;
        if (fstat(fd, &held) == 0 && stat(lock_path, &named) == 0 && held.st_ino == named.st_ino &&
            held.st_dev == named.st_dev)
            return fd;
        close(fd); /* its holder removed it on the way out: lock the current one */
    }
}

/* Say in the lock file who holds it (read by waiters and operators). */
static void describe_holder(int fd)
{
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    if (ftruncate(fd, 0) == 0)
        dprintf(fd, "pid %ld on %s\n", (long)getpid(), host);
}

/* Remove the lock file, then let go of it (waiters then find the result's file). */
static void unlock_key(int fd, const char *lock_path)
{
    if (fd < 0)
        return;
    if (unlink(lock_path) != 0 && errno != ENOENT)
        es_warn("cache_dir: cannot remove %s: %s", lock_path, strerror(errno));
    close(fd);
}

/* The decomposition for a miss: read from the cache directory when a file holds
 * it; otherwise computed (*computed set) under the key's lock file and written
 * there, or read from the file of another process that held the lock first.
 * Fails as es_svd_compute. */
static int fetch_or_compute(es_cache *c, const char *key, const char *path, const es_matrix *m, const size_t *idx,
                            size_t n, es_centering centring, es_method method, size_t k, es_svd **svd, es_err *failure,
                            bool *computed)
{
    if (path && load_file(c, path, m, idx, n, key, svd) == 0)
        return 0;
    char *lock_path = path ? lock_file_name(path) : NULL;
    bool waited = false;
    int lock = lock_path ? lock_key(lock_path, key, &waited) : -1;
    /* whoever held the lock (or released it since the first look) may have written the file */
    if (lock >= 0 && load_file(c, path, m, idx, n, key, svd) == 0) {
        if (waited)
            count(c, &c->stats.disk_waits);
        unlock_key(lock, lock_path);
        free(lock_path);
        return 0;
    }
    if (lock >= 0)
        describe_holder(lock);
    es_info("computing %s (%zu x %zu, %s)", key, n, es_matrix_dim(m), es_method_name(method));
    *computed = true;
    double t0 = es_now();
    int rc = compute_by(m, idx, n, centring, method, k, svd, failure);
    if (rc == 0 && c->observer && strcmp((*svd)->method, es_method_name(method)) == 0)
        c->observer(method, n, es_matrix_dim(m), k, es_now() - t0);
    if (rc == 0)
        (*svd)->key = es_strdup(key);
    if (rc == 0 && path)
        save_file(c, path, *svd);
    unlock_key(lock, lock_path);
    free(lock_path);
    return rc;
}

/* Mark a decomposition that the budget holds without its left vectors but not
 * with them (charged from the start: n x r, 614 MB at 100000 x 768 against the
 * default 512 MiB) to be kept in parts: its left vectors are then formed per
 * request (es_svd_left_for) and never held. Before anyone else sees it. */
static void keep_in_parts_if_needed(es_cache *c, es_svd *svd)
{
    pthread_mutex_lock(&c->lock);
    size_t max = c->lru.max_bytes;
    pthread_mutex_unlock(&c->lock);
    size_t whole = es_svd_bytes(svd), parts = es_svd_parts_bytes(svd);
    if (whole > max && parts <= max && parts < whole) {
        svd->left_transient = true;
        es_info("%s: %.1f MB with its left vectors, over the cache budget (%.1f MB): kept in parts (%.1f MB), left "
                "vectors formed per request", svd->key, (double)whole / 1e6, (double)max / 1e6, (double)parts / 1e6);
    }
}

/* Answer the miss of a new entry outside the lock (fetch_or_compute), then
 * publish it. Fails as es_svd_compute does. */
static int compute_entry(es_cache *c, entry *e, const es_matrix *m, const size_t *idx, size_t n,
                         es_centering centring, es_method method, size_t k, es_svd **out, es_err *err)
{
    es_svd *svd = NULL;
    es_err failure = {0};
    double t0 = es_now();
    /* not on disk under a provisional identity (a file's sha256 still computed,
     * es_matrix_data_id): no other process, nor a later start, could use it */
    char *path = c->dir && !strstr(e->key, "@" ES_DATA_ID_PROVISIONAL) ? es_svd_file_name(c->dir, e->key) : NULL;
    bool computed = false;
    int rc = fetch_or_compute(c, e->key, path, m, idx, n, centring, method, k, &svd, &failure, &computed);
    if (rc == 0 && path && svd->vt && !svd->xv && es_svd_is_tall(svd)) /* its kept PCA scores go beside it */
        svd->scores_path = es_svd_scores_file_name(path);
    free(path);
    double seconds = es_now() - t0;
    if (rc == 0 && computed)
        es_info("computed %s: %s in %.3f s", e->key, svd->method, seconds);
    else if (rc != 0)
        es_info("failed %s after %.3f s: %s", e->key, seconds, failure.message);
    if (rc == 0) {
        keep_in_parts_if_needed(c, svd);
        *out = es_svd_retain(svd);
    } else if (err) {
        *err = failure;
    }
    pthread_mutex_lock(&c->lock);
    computing_done(c, e);
    publish(c, e, svd, &failure);
    es_lru_drop_if_unused(&c->lru, &e->node);
    if (computed && rc != 0)
        c->stats.failed++; /* a cancelled or failed computation is no decomposition */
    if (computed && rc == 0) {
        c->stats.computations++;
        for (int b = 0; b < ES_SVD_BUCKETS; b++)
            c->stats.svd_le[b] += seconds <= es_svd_bucket_le[b];
        c->stats.svd_seconds += seconds;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* A READY entry for key (lock held), or NULL. */
static entry *ready_entry(es_cache *c, const char *key)
{
    es_lru_node *found = es_lru_find(&c->lru, key);
    entry *e = found ? ES_LRU_ENTRY(found, entry, node) : NULL;
    return e && e->state == ENTRY_READY ? e : NULL;
}

/* See linalg.h: rounded up to a multiple of ES_TOPK_STEP so nearby k share one entry, below d. */
size_t es_topk_size(size_t k, size_t d)
{
    size_t kk = (k + ES_TOPK_STEP - 1) / ES_TOPK_STEP * ES_TOPK_STEP;
    return kk < d ? kk : k;
}

/* See linalg.h: the keys es_cache_decompose would look up, without computing. */
bool es_cache_has(es_cache *c, const es_matrix *m, const size_t *idx, size_t n, es_centering centring,
                  es_method asked, size_t k)
{
    size_t d = es_matrix_dim(m);
    es_method method = k == 0 && asked != ES_METHOD_VALUES ? ES_METHOD_EXACT : es_method_resolve(asked, n, d, k);
    char *key = key_of(m, idx, n, centring, method, method == ES_METHOD_TOPK ? es_topk_size(k, d) : 0);
    char *exact_key = method == ES_METHOD_TOPK && asked == ES_METHOD_AUTO ? key_of(m, idx, n, centring, ES_METHOD_EXACT, 0)
                                                                          : NULL;
    pthread_mutex_lock(&c->lock);
    bool found = ready_entry(c, key) || (exact_key && ready_entry(c, exact_key));
    pthread_mutex_unlock(&c->lock);
    free(key);
    free(exact_key);
    return found;
}

/* The decomposition of (m, idx[0..n), centring) for a request that uses its
 * first k triplets (0: all), computed once per key. Fails as es_svd_compute
 * does; waiters of a failed computation get the same error and the key is
 * computed again on a later request. */
int es_cache_decompose(es_cache *c, const es_matrix *m, const size_t *idx, size_t n, es_centering centring,
                       es_method asked, size_t k, es_svd **out, es_err *err)
{
    size_t d = es_matrix_dim(m);
    es_method method = k == 0 && asked != ES_METHOD_VALUES ? ES_METHOD_EXACT : es_method_resolve(asked, n, d, k);
    size_t kk = method == ES_METHOD_TOPK ? es_topk_size(k, d) : 0;
    char *key = key_of(m, idx, n, centring, method, kk);
    pthread_mutex_lock(&c->lock);
    entry *exact = NULL;
    if (method == ES_METHOD_TOPK && asked == ES_METHOD_AUTO) { /* auto: an exact one at hand is better */
        char *exact_key = key_of(m, idx, n, centring, ES_METHOD_EXACT, 0);
        exact = ready_entry(c, exact_key);
        free(exact_key);
    }
    es_lru_node *found = exact ? &exact->node : es_lru_find(&c->lru, key);
    if (found) {
        free(key);
        entry *e = ES_LRU_ENTRY(found, entry, node);
        int rc = 0;
        if (e->state == ENTRY_READY) {
            c->stats.hits++;
            es_lru_touch(&c->lru, &e->node);
            *out = es_svd_retain(e->svd);
        } else {
            rc = wait_for(c, e, out, err);
        }
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    c->stats.misses++;
    entry *e = es_calloc(1, sizeof *e);
    e->key = key;
    e->state = ENTRY_COMPUTING;
    e->computing = (es_computing){.key = e->key, .method = es_method_name(method), .n = n, .d = d, .k = kk,
                                  .started = es_now(), .started_unix = es_wall_now()};
    e->next_computing = c->computing;
    if (c->computing)
        c->computing->prev_computing = e;
    c->computing = e;
    es_lru_add(&c->lru, &e->node, e->key);
    pthread_mutex_unlock(&c->lock);
    return compute_entry(c, e, m, idx, n, centring, method, kk, out, err);
}

/* The exact decomposition; see es_cache_decompose. */
int es_cache_svd(es_cache *c, const es_matrix *m, const size_t *idx, size_t n, es_centering centring,
                 es_svd **out, es_err *err)
{
    return es_cache_decompose(c, m, idx, n, centring, ES_METHOD_EXACT, 0, out, err);
}

/* See linalg.h. */
void es_cache_set_observer(es_cache *c, es_cache_observer fn) { c->observer = fn; }

/* See linalg.h: create dir if needed and check it is writable. */
int es_cache_set_dir(es_cache *c, const char *dir, es_err *err)
{
    if (!dir)
        return 0;
    if (es_mkdir_p(dir, 0755) != 0) /* with its parents, as a user expects of a configured path */
        return es_fail(err, ES_E_IO, "cache_dir", "%s: cannot create (%s)", dir, strerror(errno));
    if (access(dir, W_OK | X_OK) != 0)
        return es_fail(err, ES_E_IO, "cache_dir", "%s: not a writable directory (%s)", dir, strerror(errno));
    free(c->dir);
    c->dir = es_strdup(dir);
    return 0;
}

/* See linalg.h: copies of the running decompositions, oldest first. */
size_t es_cache_computing(es_cache *c, es_computing **out)
{
    pthread_mutex_lock(&c->lock);
    size_t n = 0;
    for (entry *e = c->computing; e; e = e->next_computing)
        n++;
    es_computing *list = es_calloc(n ? n : 1, sizeof *list);
    double now = es_now();
    size_t i = n;
    for (entry *e = c->computing; e; e = e->next_computing) {
        list[--i] = e->computing;
        list[i].key = es_strdup(e->key);
        list[i].elapsed = now - e->computing.started;
    }
    pthread_mutex_unlock(&c->lock);
    *out = list;
    return n;
}

/* See linalg.h. NULL is a no-op. */
void es_computing_free(es_computing *list, size_t n)
{
    for (size_t i = 0; list && i < n; i++)
        free((char *)list[i].key);
    free(list);
}

/* A consistent snapshot of the counters. Cannot fail. */
void es_cache_get_stats(es_cache *c, es_cache_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    out->bytes = c->lru.bytes;
    out->entries = c->lru.entries;
    out->max_bytes = c->lru.max_bytes;
    pthread_mutex_unlock(&c->lock);
}

/* Free the cache and its references (NULL ignored). No request may be in flight;
 * decompositions still held by callers stay valid. */
void es_cache_free(es_cache *c)
{
    if (!c)
        return;
    es_lru_destroy(&c->lru);
    free(c->dir);
    pthread_cond_destroy(&c->done);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
