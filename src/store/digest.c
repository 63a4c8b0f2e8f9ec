/* The sha256s of matrices mapped from their files, computed after loading.
 *
 * A little-endian float64 C-order tensor loaded without a record in cache_dir
 * is mapped and checked for non-finite values (source.c), then served at once:
 * the daemon is ready without reading the whole file a second time for its
 * hashes. Its sha256 and the whole file's are computed here, by a job started
 * when the source that loaded it is freed (the end of a configuration's
 * load): the whole file on one thread, the tensors on another, both at a lower
 * CPU priority than the daemon's other threads, reading the file with pread
 * (never through a map: a file truncated meanwhile is a short read here, not a
 * SIGBUS).
 *
 * Until then es_matrix_data_id names the data by the file's stamp (device,
 * inode, size, modification and status-change times, the tensor's offset) and
 * a nonce of this process: a key that no other process and no later start can
 * share, so no result kept on disk can be taken for another file's. When the
 * hashes are done the stamp is taken again: unchanged, the hashes are
 * published (state KNOWN, the identity becomes the sha256 from then on) and
 * the record written to cache_dir (when the stamp has settled, tcache.c);
 * changed (written in place while hashed, truncated, unreadable), nothing is
 * published or recorded, the state is FAILED with its reason, and the
 * identity becomes another provisional one ("...:changed"), so nothing
 * computed from the earlier bytes is served again. */
#include "store/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHUNK ((size_t)4 << 20)      /* bytes read and hashed at a time */
#define NICE_STEP 10                 /* how much lower the hashing threads run */

/* ---------------------------------------------------------------- digests */

/* A nonce of this process: its pid and the time of its first digest. */
static char nonce[48];
static pthread_once_t nonce_once = PTHREAD_ONCE_INIT;

static void nonce_init(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    snprintf(nonce, sizeof nonce, "%ld.%jd%09ld", (long)getpid(), (intmax_t)t.tv_sec, t.tv_nsec);
}

/* See internal.h. */
es_digest *es_digest_new(const es_file_stamp *st, uint64_t offset)
{
    pthread_once(&nonce_once, nonce_init);
    es_digest *d = es_calloc(1, sizeof *d);
    d->refs = 1;
    d->state = ES_SHA_COMPUTING;
    snprintf(d->provisional, sizeof d->provisional, "%s%s:%ju:%ju:%ju:%jd:%jd:%ju", ES_DATA_ID_PROVISIONAL,
             nonce, (uintmax_t)st->dev, (uintmax_t)st->ino, (uintmax_t)st->size, (intmax_t)st->mtime_ns,
             (intmax_t)st->ctime_ns, (uintmax_t)offset);
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->done, NULL);
    return d;
}

es_digest *es_digest_retain(es_digest *d)
{
    if (d)
        __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
    return d;
}

void es_digest_release(es_digest *d)
{
    if (!d || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->done);
    free(d);
}

/* es_digests_generation's count. */
static unsigned long settled_count;

unsigned long es_digests_generation(void)
{
    return __atomic_load_n(&settled_count, __ATOMIC_ACQUIRE);
}

/* Publish d's outcome: the hashes (state KNOWN) or why not (FAILED). */
static void settle(es_digest *d, const char *sha, const char *file_sha, const char *why)
{
    pthread_mutex_lock(&d->lock);
    if (why) {
        snprintf(d->why, sizeof d->why, "%s", why);
        snprintf(d->changed, sizeof d->changed, "%s:changed", d->provisional);
        __atomic_store_n(&d->state, ES_SHA_FAILED, __ATOMIC_RELEASE);
    } else {
        memcpy(d->sha256, sha, 65);
        memcpy(d->file_sha256, file_sha, 65);
        __atomic_store_n(&d->state, ES_SHA_KNOWN, __ATOMIC_RELEASE);
    }
    pthread_cond_broadcast(&d->done);
    pthread_mutex_unlock(&d->lock);
    __atomic_add_fetch(&settled_count, 1, __ATOMIC_RELEASE); /* after the state: a rendering at the new count shows it */
}

/* ---------------------------------------------------------------- matrices' view of them */

const char *es_sha_state_name(es_sha_state s)
{
    return s == ES_SHA_KNOWN ? "known" : s == ES_SHA_COMPUTING ? "computing" : "failed";
}

es_sha_state es_matrix_sha_state(const es_matrix *m)
{
    return m->digest ? (es_sha_state)__atomic_load_n(&m->digest->state, __ATOMIC_ACQUIRE) : ES_SHA_KNOWN;
}

const char *es_matrix_sha256(const es_matrix *m)
{
    if (!m->digest)
        return m->prov.sha256;
    return es_matrix_sha_state(m) == ES_SHA_KNOWN ? m->digest->sha256 : NULL;
}

const char *es_matrix_file_sha256(const es_matrix *m)
{
    if (!m->digest)
        return m->prov.file_sha256 ? m->prov.file_sha256 : "";
    return es_matrix_sha_state(m) == ES_SHA_KNOWN ? m->digest->file_sha256 : NULL;
}

const char *es_matrix_sha_error(const es_matrix *m)
{
    return es_matrix_sha_state(m) == ES_SHA_FAILED ? m->digest->why : NULL;
}

const char *es_matrix_data_id(const es_matrix *m)
{
    if (!m->digest)
        return m->prov.sha256;
    /* not the sha256 once known: what was computed and kept under this name stays valid (the same bytes) */
    return es_matrix_sha_state(m) == ES_SHA_FAILED ? m->digest->changed : m->digest->provisional;
}

es_sha_state es_matrix_sha_wait(const es_matrix *m)
{
    es_digest *d = m->digest;
    if (!d)
        return ES_SHA_KNOWN;
    pthread_mutex_lock(&d->lock);
    while (__atomic_load_n(&d->state, __ATOMIC_ACQUIRE) == ES_SHA_COMPUTING)
        pthread_cond_wait(&d->done, &d->lock);
    pthread_mutex_unlock(&d->lock);
    return es_matrix_sha_state(m);
}

/* ---------------------------------------------------------------- jobs */

typedef struct target {
    es_digest *d;
    uint64_t offset, len;
    char *key;          /* the record's, or NULL */
    es_tc_record rec;
    char sha256[65];
} target;

struct es_digest_job {
    int fd;
    char *path, *cache_dir;
    es_file_stamp stamp;
    target *t;
    size_t n;
    char file_sha256[65];  /* given, or computed by file_thread */
    bool hash_file;
    pthread_t file_thread;
};

/* How many jobs run (their threads are detached), for es_digests_stop. */
static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jobs_done = PTHREAD_COND_INITIALIZER;
static size_t running;
static atomic_bool stopping;
/* es_digests_hold's gate: jobs started meanwhile wait at it before reading. */
static pthread_cond_t gate_open = PTHREAD_COND_INITIALIZER;
static bool held;

/* See internal.h. */
es_digest_job *es_digest_job_new(int fd, const char *path, const es_file_stamp *st, const char *cache_dir)
{
    es_digest_job *j = es_calloc(1, sizeof *j);
    j->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    j->path = es_strdup(path);
    j->cache_dir = cache_dir ? es_strdup(cache_dir) : NULL;
    j->stamp = *st;
    return j;
}

/* See internal.h. */
void es_digest_job_add(es_digest_job *j, es_digest *d, uint64_t offset, uint64_t len, const char *key,
                       const es_tc_record *rec)
{
    j->t = es_realloc(j->t, (j->n + 1) * sizeof *j->t);
    j->t[j->n++] = (target){.d = es_digest_retain(d), .offset = offset, .len = len,
                            .key = key ? es_strdup(key) : NULL, .rec = *rec};
}

static void job_free(es_digest_job *j)
{
    for (size_t i = 0; i < j->n; i++) {
        es_digest_release(j->t[i].d);
        free(j->t[i].key);
    }
    free(j->t);
    if (j->fd >= 0)
        close(j->fd);
    free(j->path);
    free(j->cache_dir);
    free(j);
}

/* This thread NICE_STEP lower than it was (Linux: per thread). */
static void lower_priority(void)
{
    pid_t tid = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int now = getpriority(PRIO_PROCESS, (id_t)tid);
    if (errno == 0)
        setpriority(PRIO_PROCESS, (id_t)tid, now + NICE_STEP > 19 ? 19 : now + NICE_STEP);
}

/* The sha256 of len bytes of j's file at offset into hex, read CHUNK at a
 * time into buf; NULL, or what went wrong (a read error, the file shorter
 * than the stamp said, a stop). */
static const char *hash_range(es_digest_job *j, uint64_t offset, uint64_t len, unsigned char *buf, char hex[65])
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        return "the sha256 could not start (OpenSSL)";
    }
    const char *why = NULL;
    while (len > 0 && !why) {
        if (atomic_load(&stopping)) {
            why = "the daemon is stopping";
            break;
        }
        size_t want = len < CHUNK ? (size_t)len : CHUNK;
        ssize_t got = pread(j->fd, buf, want, (off_t)offset);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            why = "it could not be read";
        else if (got == 0)
            why = "it is shorter than when it was opened";
        else if (EVP_DigestUpdate(md, buf, (size_t)got) != 1)
            why = "the sha256 failed (OpenSSL)";
        else {
            offset += (uint64_t)got;
            len -= (uint64_t)got;
        }
    }
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int out_len = 0;
    if (!why && EVP_DigestFinal_ex(md, out, &out_len) != 1)
        why = "the sha256 failed (OpenSSL)";
    EVP_MD_CTX_free(md);
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; !why && i < 32; i++) {
        hex[2 * i] = digits[out[i] >> 4];
        hex[2 * i + 1] = digits[out[i] & 15];
    }
    hex[64] = '\0';
    return why;
}

/* The whole file's sha256 (beside the tensors'). */
static void *file_thread(void *arg)
{
    es_digest_job *j = arg;
    lower_priority();
    unsigned char *buf = es_malloc(CHUNK);
    const char *why = hash_range(j, 0, j->stamp.size, buf, j->file_sha256);
    free(buf);
    return (void *)why;
}

/* Test hook (internal.h): wait while the file ES_TEST_HASH_HOLD names exists. */
static void test_hold(void)
{
    const char *hold = getenv("ES_TEST_HASH_HOLD");
    while (hold && *hold && access(hold, F_OK) == 0 && !atomic_load(&stopping)) {
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}

/* Whether the bytes hashed are those the file had when it was opened: its
 * size and modification time (every write sets it) are the same; and
 * (*settled) whether its whole stamp is too, old enough to be recorded
 * (tcache.c's rule). The status-change time alone may move without a write:
 * the documented way of replacing a data file, a rename over its path,
 * unlinks the inode the daemon holds, and that changes its ctime, not its
 * bytes. */
static bool unchanged(const es_digest_job *j, bool *settled)
{
    es_file_stamp now;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    int64_t now_ns = (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
    bool same = es_file_stamp_of(j->fd, &now) == 0 && now.dev == j->stamp.dev && now.ino == j->stamp.ino &&
                now.size == j->stamp.size && now.mtime_ns == j->stamp.mtime_ns;
    *settled = same && now.ctime_ns == j->stamp.ctime_ns && now_ns - j->stamp.ctime_ns >= ES_TC_SETTLE_NS;
    return same;
}

/* Whether some matrix still holds one of j's digests (the job holds one
 * reference to each): none when the configuration that loaded them failed, or
 * was replaced, before the job started. */
static bool wanted(const es_digest_job *j)
{
    for (size_t i = 0; i < j->n; i++)
        if (__atomic_load_n(&j->t[i].d->refs, __ATOMIC_ACQUIRE) > 1)
            return true;
    return false;
}

/* The job: the tensors' hashes here, the file's on file_thread; then the
 * outcome published and recorded. */
static void hash_job_run(es_digest_job *j)
{
    if (!wanted(j)) {
        es_debug("%s: sha256 not computed: no matrix holds it any more", j->path);
        return;
    }
    double t0 = es_now();
    bool file_started = false;
    const char *why = NULL;
    if (j->hash_file) {
        file_started = pthread_create(&j->file_thread, NULL, file_thread, j) == 0;
        if (!file_started)
            why = (const char *)file_thread(j);
    }
    unsigned char *buf = es_malloc(CHUNK);
    for (size_t i = 0; i < j->n && !why; i++)
        why = hash_range(j, j->t[i].offset, j->t[i].len, buf, j->t[i].sha256);
    free(buf);
    if (file_started) {
        void *file_why;
        pthread_join(j->file_thread, &file_why);
        if (!why)
            why = file_why;
    }
    bool settled = false;
    if (!why && !unchanged(j, &settled))
        why = "it changed while its sha256 was computed (replace data files by rename, then reload)";
    char text[320];
    if (why)
        snprintf(text, sizeof text, "%s: sha256 not known: %s", j->path, why);
    for (size_t i = 0; i < j->n; i++) {
        target *t = &j->t[i];
        if (!why && t->key && j->cache_dir) { /* first: whoever sees the hash known finds its record there */
            memcpy(t->rec.sha256, t->sha256, sizeof t->rec.sha256);
            memcpy(t->rec.file_sha256, j->file_sha256, sizeof t->rec.file_sha256);
            es_tc_store(j->cache_dir, t->key, settled, &t->rec, NULL);
        }
        settle(t->d, t->sha256, j->file_sha256, why ? text : NULL);
    }
    if (why && !atomic_load(&stopping))
        es_error("%s", text);
    else if (!why)
        es_info("%s: sha256 of %zu tensor%s%s computed in %.3f s%s", j->path, j->n, j->n == 1 ? "" : "s",
                j->hash_file ? " and of the file" : "", es_now() - t0,
                j->cache_dir ? (settled ? ", recorded in cache_dir" : ", not recorded (the file changed too recently)")
                             : "");
}

/* A job's thread: at a lower priority, after the test hook's hold. */
static void *job_thread(void *arg)
{
    es_digest_job *j = arg;
    lower_priority();
    pthread_mutex_lock(&jobs_lock);
    while (held && !atomic_load(&stopping))
        pthread_cond_wait(&gate_open, &jobs_lock);
    pthread_mutex_unlock(&jobs_lock);
    test_hold();
    hash_job_run(j);
    job_free(j);
    pthread_mutex_lock(&jobs_lock);
    running--;
    pthread_cond_broadcast(&jobs_done);
    pthread_mutex_unlock(&jobs_lock);
    return NULL;
}

/* es_digests_stop at exit, registered after OpenSSL's own clean-up (which
 * atexit runs later): a job still hashing when a process that never called
 * es_digests_stop exits must not meet a torn-down OpenSSL. */
static pthread_once_t at_exit_once = PTHREAD_ONCE_INIT;

static void stop_at_exit(void)
{
    char hex[65];
    es_sha256_hex("", 0, hex); /* OpenSSL initialised (its providers loaded): its exit handlers come first */
    atexit(es_digests_stop);
}

/* See internal.h. */
void es_digest_job_start(es_digest_job *j, const char *file_sha256)
{
    pthread_once(&at_exit_once, stop_at_exit);
    if (j->n == 0) {
        job_free(j);
        return;
    }
    j->hash_file = !file_sha256 || !*file_sha256;
    if (!j->hash_file)
        memcpy(j->file_sha256, file_sha256, sizeof j->file_sha256);
    if (j->fd >= 0)
        posix_fadvise(j->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&jobs_lock);
    bool started = !atomic_load(&stopping) && j->fd >= 0 && pthread_create(&thread, &attr, job_thread, j) == 0;
    running += started;
    pthread_mutex_unlock(&jobs_lock);
    pthread_attr_destroy(&attr);
    if (!started) {
        char text[320];
        snprintf(text, sizeof text, "%s: sha256 not known: %s", j->path,
                 atomic_load(&stopping) ? "the daemon is stopping" : "no thread could start to compute it");
        es_error("%s", text);
        for (size_t i = 0; i < j->n; i++)
            settle(j->t[i].d, NULL, NULL, text);
        job_free(j);
    }
}

/* See internal.h. */
void es_digests_wait(void)
{
    pthread_mutex_lock(&jobs_lock);
    while (running > 0)
        pthread_cond_wait(&jobs_done, &jobs_lock);
    pthread_mutex_unlock(&jobs_lock);
}

/* See store.h. */
void es_digests_hold(bool hold)
{
    pthread_mutex_lock(&jobs_lock);
    held = hold;
    pthread_cond_broadcast(&gate_open);
    pthread_mutex_unlock(&jobs_lock);
}

/* See store.h: each job sees the flag within one CHUNK (or its hold). */
void es_digests_stop(void)
{
    atomic_store(&stopping, true);
    pthread_mutex_lock(&jobs_lock);
    pthread_cond_broadcast(&gate_open);
    while (running > 0)
        pthread_cond_wait(&jobs_done, &jobs_lock);
    pthread_mutex_unlock(&jobs_lock);
}
