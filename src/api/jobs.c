/* Jobs: a computing request that is predicted to take longer than
 * limits.sync_seconds, that runs past it, or whose client asked for it
 * (Prefer: respond-async) answers 202 Accepted with Location: /v1/jobs/{id}
 * and goes on computing without its connection. Its record (state, elapsed
 * and predicted time, the progress its loops report) answers GET
 * /v1/jobs/{id}; once done, a 303 to the result's own URL, whose gate serves
 * the reply the job keeps (as shared bytes) for limits.job_ttl_s after it
 * finished, so a reply too large for the response cache is not computed
 * again. Identical requests share one job (one key, the response cache's);
 * DELETE cancels (the computation stops at its next block) or forgets a
 * finished job; a client holds at most limits.max_jobs_per_client queued or
 * running jobs (finished and cancelled ones do not count).
 *
 * A job belongs to its owner (es_job_owner: the client's address, or a
 * trusted proxy's forwarded one, and the bearer token it sent, if any): its id
 * is a capability of 128 random bits, and only its owner lists, polls or
 * cancels it; to anyone else it does not exist (404). Identical requests of
 * one owner share one job; another owner's identical request gets its own
 * job, which waits for the same computation (the response cache's single
 * flight) rather than the first owner's job.
 *
 * The replies finished jobs keep are bounded all together by
 * limits.max_job_bytes: a reply that would take the memory they hold past it
 * is written to cache_dir/jobs/KEY.reply (content-addressed by the response
 * cache's key, written under a temporary name and renamed, so a reader sees
 * a whole file or none) and read from there for each GET of its result (one
 * file for the identical requests of several owners: it goes with the last
 * job holding it, the records counting them, drop_file); with
 * no cache_dir (or a write that failed) it is let go, and its result URL
 * computes it again like any request.
 *
 * Replicas sharing a cache_dir share their jobs through it: DIR/ID.job is a
 * job's record (owner, key, result URL, the daemon computing it, its
 * document), rewritten whole at each change of state, and every done reply
 * is in DIR/KEY.reply, so a poll or a result that reaches another daemon is
 * answered from the files. A daemon flocks DIR/daemon-ID.lock while it runs:
 * a live record whose daemon's lock is free was interrupted, and reads
 * failed. Another daemon cancels a running job with the mark DIR/ID.cancel,
 * which the daemon computing it looks for (es_ajob_cancelled), and forgets a
 * finished one by removing its record: the daemon holding it takes a record
 * it wrote and finds missing for that deletion (forgotten_elsewhere) and
 * forgets it too. While a change of state is written to the record, the
 * daemon making it answers polls from the record too, so polls alternating
 * between replicas never see a state go back; a mark that met the job
 * finishing makes it forgotten (published), so a DELETE on any replica after
 * a 303 on any replica forgets it on all. Records and replies of finished
 * jobs outlive their daemon until they expire.
 *
 * Every computing request carries a record from the start (es_ajob_new): its
 * progress tracker is what the compute thread reports to, and a request that
 * runs past its synchronous window is turned into a job by registering the
 * record it already has (es_jobs_add). */
#include "embedscope/cost.h"
#include "embedscope/jobs.h"
#include "embedscope/negotiate.h"
#include "embedscope/problem.h"
#include "embedscope/render.h"
#include "embedscope/results.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdatomic.h>
#include <pthread.h>

struct es_ajob {
    char id[ES_JOB_ID_LEN + 1];
    char key[65];               /* the response cache's key of the reply */
    char *url;                  /* path?query of the result */
    char client[ES_CLIENT_MAX]; /* the address its cap counts for */
    char owner[ES_OWNER_MAX];   /* who may see and cancel it (es_job_owner) */
    double created, started, finished; /* es_now(); 0 until then */
    double created_unix;
    double predicted;           /* seconds */
    double shown;               /* the largest overall fraction answered (it never goes back) */
    es_progress progress;
    atomic_bool cancel;
    pthread_mutex_t lock;       /* guards state, reply, refs (and kept, which the job table's lock guards too) */
    es_job_state state;
    es_reply reply;             /* DONE: the 200 (shared bytes); FAILED: its problem */
    bool registered;
    es_jobs *jobs;              /* the job table, once registered */
    enum { KEPT_NONE, KEPT_MEMORY, KEPT_DISK, KEPT_DROPPED } kept; /* where a done job's reply is */
    size_t kept_bytes;          /* its bytes (body and gzip), counted in the job table's totals */
    bool on_disk;               /* its reply is in cache_dir/jobs too (any replica serves it) */
    bool recorded;              /* its record DIR/ID.job was written (so a missing one was removed: forgotten) */
    unsigned publishing;        /* state changes whose record is being written: polls read the record (published) */
    bool forget;                /* a DELETE reached it finished while its record was written: forgotten after */
    double marker_checked;      /* es_now() when cache_dir was last asked for a cancel from another replica */
    int refs;
    es_ajob *next;              /* the job table's list */
};

static json_t *job_json(es_ajob *a, const es_limits *lim, bool publishing_too);

struct es_jobs {
    pthread_mutex_t lock;       /* guards the list, budget and totals */
    es_ajob *head;
    char *dir;                  /* cache_dir/jobs; NULL: replies beyond the budget are dropped */
    size_t budget;              /* limits.max_job_bytes, as the last lookup read it */
    unsigned ttl;               /* limits.job_ttl_s, likewise (the records' expiry) */
    char daemon[17];            /* this daemon's id in the records (16 random hex digits) */
    int lock_fd;                /* DIR/daemon-ID.lock, flock'ed for the daemon's life; -1: none */
    double records_checked;     /* es_now() when the finished jobs' records were last looked for */
    es_jobs_stats st;
};

/* See jobs.h. */
void es_job_owner(const char *client, const char *authorization, char out[ES_OWNER_MAX])
{
    const char *token = NULL;
    if (authorization && strncasecmp(authorization, "Bearer ", 7) == 0) {
        token = authorization + 7;
        token += strspn(token, " ");
    }
    if (!token || !*token) {
        snprintf(out, ES_OWNER_MAX, "%s", client ? client : "");
        return;
    }
    /* the token itself is never kept: a digest tells its holders apart */
    char hex[65];
    es_sha256_hex(token, strlen(token), hex);
    snprintf(out, ES_OWNER_MAX, "%.*s+%.32s", ES_CLIENT_MAX - 1, client ? client : "", hex);
}

es_jobs *es_jobs_new(const char *cache_dir, size_t budget)
{
    es_jobs *j = es_calloc(1, sizeof *j);
    pthread_mutex_init(&j->lock, NULL);
    j->budget = budget;
    j->ttl = 600;
    j->lock_fd = -1;
    unsigned char bits[8] = {0};
    if (RAND_bytes(bits, (int)sizeof bits) != 1)
        es_warn("no random bytes for this daemon's id in cache_dir/jobs");
    for (size_t i = 0; i < sizeof bits; i++)
        snprintf(j->daemon + 2 * i, 3, "%02x", bits[i]);
    if (cache_dir && *cache_dir) {
        j->dir = es_asprintf("%s/jobs", cache_dir);
        char *lock = es_asprintf("%s/daemon-%s.lock", j->dir, j->daemon);
        if ((mkdir(j->dir, 0700) < 0 && errno != EEXIST) ||
            (j->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0 || flock(j->lock_fd, LOCK_EX) < 0) {
            es_warn("cache_dir: cannot use %s (%s): jobs are this daemon's alone, and job replies beyond "
                    "limits.max_job_bytes are dropped (their result URLs compute again)", j->dir, strerror(errno));
            if (j->lock_fd >= 0)
                close(j->lock_fd);
            j->lock_fd = -1;
            free(j->dir);
            j->dir = NULL;
        }
        free(lock);
    }
    return j;
}

/* s, or "" for NULL. */
static const char *or_empty(const char *s) { return s ? s : ""; }

/* DIR/NAME.EXT, a file of the job store. Caller frees. */
static char *store_path(const es_jobs *j, const char *name, const char *ext)
{
    return es_asprintf("%s/%s.%s", j->dir, name, ext);
}

/* DIR/KEY.reply, the file of a reply kept on disk. Caller frees. */
static char *reply_path(const es_jobs *j, const char *key) { return store_path(j, key, "reply"); }

/* Write head then body as path: whole under a temporary name (unique by
 * tag: a job id), then renamed into place, so a reader, in this daemon or
 * another sharing the directory, sees a whole file or none. 0, or -1
 * (logged; nothing left behind). */
static int write_whole(const es_jobs *j, const char *path, const char *tag, const char *head, size_t head_len,
                       const char *body, size_t len)
{
    char *tmp = es_asprintf("%s/.tmp-%s-%s", j->dir, tag, j->daemon);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc = fd < 0 || es_write_all(fd, head, head_len) < 0 || es_write_all(fd, body, len) < 0 ? -1 : 0;
    int e = errno;
    if (fd >= 0 && close(fd) < 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    if (rc == 0 && rename(tmp, path) < 0) {
        rc = -1;
        e = errno;
    }
    if (rc < 0) {
        es_warn("cache_dir: cannot write %s (%s)", path, strerror(e));
        unlink(tmp);
    }
    free(tmp);
    return rc;
}

/* The reply types a file may name: the static strings replies point to. */
static const char *const reply_types[] = {"application/json", "text/csv; charset=utf-8; header=present",
                                          "application/x-npy", NULL};

/* Keep rep's body in DIR/KEY.reply (not its gzip: the disk copy is served
 * as it is, identity coding being always acceptable), after one line of JSON
 * with its type, ETag and length, so that any replica serves it. 0, or -1. */
static int spill(const es_jobs *j, const es_ajob *a, const es_reply *rep)
{
    json_t *h = json_pack("{s:s?, s:s, s:b, s:I}", "content_type", rep->content_type, "etag", rep->etag,
                          "vary_accept", rep->vary_accept, "len", (json_int_t)rep->len);
    char *head = h ? json_dumps(h, JSON_COMPACT) : NULL;
    json_decref(h);
    if (!head)
        return -1;
    char *line = es_asprintf("%s\n", head), *path = reply_path(j, a->key);
    int rc = write_whole(j, path, a->id, line, strlen(line), rep->body, rep->len);
    free(line);
    free(head);
    free(path);
    return rc;
}

/* Read the reply kept in DIR/KEY.reply into out: true; false when the file is
 * gone, older than ttl seconds (then removed: its job has expired), short or
 * not a reply this daemon can serve. */
static bool unspill(const es_jobs *j, const char *key, unsigned ttl, es_reply *out)
{
    char *path = reply_path(j, key);
    FILE *f = fopen(path, "rbe");
    struct stat st;
    if (f && fstat(fileno(f), &st) == 0 && es_wall_now() - (double)st.st_mtime > (double)ttl + 1) {
        fclose(f);
        f = NULL;
        unlink(path);
    }
    free(path);
    if (!f)
        return false;
    char *line = NULL;
    size_t cap = 0;
    json_t *h = getline(&line, &cap, f) > 0 ? json_loads(line, 0, NULL) : NULL;
    free(line);
    const char *type = json_string_value(json_object_get(h, "content_type"));
    json_int_t len = json_integer_value(json_object_get(h, "len"));
    es_reply r = {.status = 200, .vary_accept = json_is_true(json_object_get(h, "vary_accept"))};
    for (const char *const *t = reply_types; type && *t && !r.content_type; t++)
        if (strcmp(*t, type) == 0)
            r.content_type = *t;
    snprintf(r.etag, sizeof r.etag, "%s", or_empty(json_string_value(json_object_get(h, "etag"))));
    bool ok = r.content_type && len >= 0 && (uint64_t)len <= (uint64_t)st.st_size;
    if (ok) {
        r.len = (size_t)len;
        r.body = es_malloc(r.len + 1);
        ok = fread(r.body, 1, r.len, f) == r.len;
        r.body[ok ? r.len : 0] = '\0';
    }
    json_decref(h);
    fclose(f);
    if (!ok) {
        es_reply_release(&r);
        return false;
    }
    es_reply_release(out);
    *out = r;
    return true;
}

/* Write a's record, DIR/ID.job: its owner, key, result URL, the daemon that
 * runs it and its document now, so that any replica answers a poll of it. A
 * failed write is logged: the job is then this daemon's alone. No lock held. */
static void write_record(es_jobs *j, es_ajob *a)
{
    if (!j || !j->dir)
        return;
    es_limits lim = {.job_ttl_s = j->ttl};
    json_t *doc = job_json(a, &lim, true);
    pthread_mutex_lock(&a->lock);
    double finished = a->finished > 0 ? a->created_unix + (a->finished - a->created) : 0;
    pthread_mutex_unlock(&a->lock);
    json_t *rec = json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:f, s:o}", "format", 1, "daemon", j->daemon, "owner",
                            a->owner, "client", a->client, "key", a->key, "url", a->url, "finished_unix", finished,
                            "doc", doc);
    char *text = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
    json_decref(rec);
    if (!text)
        return;
    char *path = store_path(j, a->id, "job");
    if (write_whole(j, path, a->id, "", 0, text, strlen(text)) == 0) {
        pthread_mutex_lock(&a->lock);
        a->recorded = true;
        pthread_mutex_unlock(&a->lock);
    }
    free(path);
    free(text);
}

/* Is the daemon of that id (16 hex digits) running? It holds its lock file
 * flock'ed while it runs: a lock this one can take is a stopped daemon's. */
static bool daemon_alive(const es_jobs *j, const char *daemon)
{
    if (strcmp(daemon, j->daemon) == 0)
        return true;
    if (strlen(daemon) != 16 || strspn(daemon, "0123456789abcdef") != 16)
        return false;
    char *path = es_asprintf("%s/daemon-%s.lock", j->dir, daemon);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    free(path);
    if (fd < 0)
        return false;
    bool alive = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    close(fd);
    return alive;
}

/* Does a record's document say queued or running? */
static bool record_live(const json_t *doc)
{
    const char *state = json_string_value(json_object_get(doc, "state"));
    return state && (strcmp(state, "queued") == 0 || strcmp(state, "running") == 0);
}

/* The document of the record at path if its owner is owner (NULL: anyone's)
 * and it has not expired (an expired one is removed): its document, with
 * expires_in_s as of now, and "failed" (the daemon computing it stopped)
 * for a queued or running job whose daemon is gone, recorded so. *url (when
 * not NULL) is its result URL, caller frees. NULL if none. */
static json_t *read_record(es_jobs *j, const char *path, const char *owner, char **url)
{
    json_t *rec = json_load_file(path, 0, NULL);
    const char *who = json_string_value(json_object_get(rec, "owner"));
    json_t *doc = json_object_get(rec, "doc");
    const char *state = json_string_value(json_object_get(doc, "state"));
    double finished = json_number_value(json_object_get(rec, "finished_unix")), now = es_wall_now();
    if (!who || !state || !json_is_object(doc) || (owner && strcmp(who, owner) != 0)) {
        json_decref(rec);
        return NULL;
    }
    if (finished > 0 && now - finished > (double)j->ttl) {
        unlink(path);
        json_decref(rec);
        return NULL;
    }
    bool live = record_live(doc);
    if (live && !daemon_alive(j, or_empty(json_string_value(json_object_get(rec, "daemon"))))) {
        json_t *problem = es_problem_new(ES_PROB_BUSY, "the daemon computing this job stopped before it finished "
                                         "(it was interrupted): ask again", NULL, json_string_value(json_object_get(rec, "url")), NULL);
        json_object_set_new(doc, "state", json_string("failed")); /* frees the string state pointed to */
        state = "failed";
        json_object_set_new(doc, "error", problem);
        json_object_set_new(doc, "expires_in_s", json_real((double)j->ttl));
        json_object_set_new(rec, "finished_unix", json_real(now));
        char *text = json_dumps(rec, JSON_COMPACT); /* so every replica says the same from now on */
        if (text)
            write_whole(j, path, "interrupted", "", 0, text, strlen(text));
        free(text);
        finished = now;
    }
    if (finished > 0)
        json_object_set_new(doc, "expires_in_s", json_real((double)j->ttl - (now - finished)));
    if (url)
        *url = strcmp(state, "done") == 0 ? es_strdup(or_empty(json_string_value(json_object_get(rec, "url")))) : NULL;
    json_incref(doc);
    json_decref(rec);
    return doc;
}

/* Does a record in DIR other than that of job except (an id, or "") still
 * hold the reply of key: one whose job is done (and not expired), or queued
 * or running in a live daemon (it writes the file when it finishes)? The
 * records are the reference count of a reply file: identical requests of
 * different owners, on any replica and across restarts, share one
 * DIR/KEY.reply, and it goes with the last of their records. */
static bool held_by_record(es_jobs *j, const char *key, const char *except)
{
    DIR *d = opendir(j->dir);
    bool held = false;
    for (struct dirent *e; d && !held && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n != ES_JOB_ID_LEN + 4 || strcmp(e->d_name + ES_JOB_ID_LEN, ".job") != 0 ||
            strncmp(e->d_name, except, ES_JOB_ID_LEN) == 0)
            continue;
        char *path = es_asprintf("%s/%s", j->dir, e->d_name);
        json_t *rec = json_load_file(path, 0, NULL);
        bool same = rec && strcmp(or_empty(json_string_value(json_object_get(rec, "key"))), key) == 0;
        json_decref(rec);
        json_t *doc = same ? read_record(j, path, NULL, NULL) : NULL; /* expiry and an interrupted daemon */
        const char *state = json_string_value(json_object_get(doc, "state"));
        held = record_live(doc) || (state && strcmp(state, "done") == 0);
        json_decref(doc);
        free(path);
    }
    if (d)
        closedir(d);
    return held;
}

/* Remove the reply file of key unless a job still holds it (job table's lock
 * held): one of this daemon's other than a that kept it on disk or may still
 * write it (not finished yet: its file is written before its state changes),
 * or another record in DIR (held_by_record: another replica's job, or one
 * from before a restart). */
static void drop_file(es_jobs *j, const es_ajob *a, const char *key)
{
    for (es_ajob *b = j->head; b; b = b->next)
        if (b != a && strcmp(b->key, key) == 0 && (b->on_disk || es_ajob_state(b) < ES_JOB_DONE))
            return;
    char *path = reply_path(j, key);
    if (access(path, F_OK) == 0 && !held_by_record(j, key, a ? a->id : "")) /* no file: no records to read */
        unlink(path);
    free(path);
}

/* A job leaves the job table (its lock held): its reply's bytes leave the
 * totals, its record goes, and its reply file unless another job keeps the
 * same reply there. */
static void unkeep(es_jobs *j, es_ajob *a)
{
    if (a->kept == KEPT_MEMORY)
        j->st.memory_bytes -= a->kept_bytes;
    if (a->on_disk) {
        j->st.disk_bytes -= a->reply.len;
        drop_file(j, a, a->key);
    }
    if (j->dir && a->registered) { /* its record, and a cancel mark that came after it finished */
        char *path = store_path(j, a->id, "job");
        unlink(path);
        free(path);
        path = store_path(j, a->id, "cancel");
        unlink(path);
        free(path);
    }
}

/* Take finished job a off the job table (its lock held): true if it was
 * there (the caller then releases the table's reference, outside the lock). */
static bool unlist(es_jobs *j, es_ajob *a)
{
    for (es_ajob **p = &j->head; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            unkeep(j, a);
            return true;
        }
    return false;
}

/* See jobs.h. */
es_ajob *es_ajob_new(const char *key, const char *url, const char *client, const char *owner, const es_cost *cost)
{
    es_ajob *a = es_calloc(1, sizeof *a);
    snprintf(a->key, sizeof a->key, "%s", key ? key : "");
    a->url = es_strdup(url ? url : "");
    snprintf(a->client, sizeof a->client, "%s", client ? client : "");
    snprintf(a->owner, sizeof a->owner, "%s", owner ? owner : a->client);
    a->created = es_now();
    a->created_unix = es_wall_now();
    a->predicted = cost->seconds;
    a->progress.predicted_s = cost->seconds; /* an estimated pass's time against its share of it */
    for (int i = 0; i < ES_PASS_COUNT; i++) /* shares of the prediction: the overall fraction's weights */
        a->progress.weight[i] = cost->seconds > 0 ? cost->pass_seconds[i] / cost->seconds : 0.0;
    a->state = ES_JOB_QUEUED;
    a->refs = 1;
    pthread_mutex_init(&a->lock, NULL);
    return a;
}

es_ajob *es_ajob_retain(es_ajob *a)
{
    if (a) {
        pthread_mutex_lock(&a->lock);
        a->refs++;
        pthread_mutex_unlock(&a->lock);
    }
    return a;
}

void es_ajob_release(es_ajob *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    bool last = --a->refs == 0;
    pthread_mutex_unlock(&a->lock);
    if (!last)
        return;
    es_reply_release(&a->reply);
    pthread_mutex_destroy(&a->lock);
    free(a->url);
    free(a);
}

const char *es_ajob_id(const es_ajob *a) { return a->id; }
const char *es_ajob_url(const es_ajob *a) { return a->url; }
es_progress *es_ajob_progress(es_ajob *a) { return &a->progress; }
/* See jobs.h: another replica asks for a cancel with the file DIR/ID.cancel,
 * looked for at most twice a second. */
bool es_ajob_cancelled(es_ajob *a)
{
    if (atomic_load(&a->cancel))
        return true;
    es_jobs *j = a->jobs;
    if (!j || !j->dir)
        return false;
    double now = es_now();
    pthread_mutex_lock(&a->lock);
    bool look = a->registered && now - a->marker_checked >= 0.5;
    if (look)
        a->marker_checked = now;
    pthread_mutex_unlock(&a->lock);
    if (!look)
        return false;
    char *marker = store_path(j, a->id, "cancel");
    bool asked = unlink(marker) == 0;
    free(marker);
    if (asked && es_ajob_cancel(a))
        es_info("job %s cancelled (asked on another replica)", a->id);
    return asked;
}

/* Is a finished (done, failed, cancelled) for longer than ttl seconds at now? (lock held) */
static bool expired(const es_ajob *a, double now, unsigned ttl)
{
    return a->state >= ES_JOB_DONE && a->finished > 0 && now - a->finished > (double)ttl;
}

/* Was finished job a forgotten by another replica (job table's lock held)? A
 * DELETE there removes its record (es_jobs_remote_cancel), which every
 * rewrite here replaces whole and never removes: a record written once and
 * missing now was deleted. A live job is cancelled by a mark instead. */
static bool forgotten_elsewhere(const es_jobs *j, es_ajob *a)
{
    if (!j->dir)
        return false;
    pthread_mutex_lock(&a->lock);
    bool check = a->registered && a->recorded && a->state >= ES_JOB_DONE;
    pthread_mutex_unlock(&a->lock);
    if (!check)
        return false;
    char *path = store_path(j, a->id, "job");
    struct stat st;
    bool gone = stat(path, &st) < 0 && errno == ENOENT;
    free(path);
    if (gone)
        es_info("job %s forgotten (deleted on another replica)", a->id);
    return gone;
}

/* Unlink and release the expired jobs, and those another replica forgot
 * when `records` (at most once a second otherwise: a stat each) (job table's lock held). */
static void sweep_records(es_jobs *j, unsigned ttl, bool records)
{
    double now = es_now();
    if (j->dir && now - j->records_checked >= 1.0) {
        records = true;
        j->records_checked = now;
    }
    for (es_ajob **p = &j->head; *p;) {
        es_ajob *a = *p;
        pthread_mutex_lock(&a->lock);
        bool gone = expired(a, now, ttl);
        pthread_mutex_unlock(&a->lock);
        if (gone || (records && forgotten_elsewhere(j, a))) {
            *p = a->next;
            unkeep(j, a);
            es_ajob_release(a);
        } else {
            p = &a->next;
        }
    }
}

static void sweep(es_jobs *j, unsigned ttl) { sweep_records(j, ttl, false); }

/* See jobs.h. */
int es_jobs_add(es_jobs *j, es_ajob *a, const es_limits *lim, unsigned *retry_s, es_err *err)
{
    unsigned char bits[ES_JOB_ID_LEN / 2];
    if (RAND_bytes(bits, (int)sizeof bits) != 1)
        return es_fail(err, ES_E_NOMEM, "", "no random bytes for a job id (OpenSSL's RAND_bytes failed)");
    pthread_mutex_lock(&j->lock);
    sweep(j, lim->job_ttl_s);
    size_t held = 0;
    double now = es_now(), first_free = -1;
    for (es_ajob *b = j->head; b; b = b->next) {
        if (strcmp(b->client, a->client) != 0)
            continue;
        pthread_mutex_lock(&b->lock);
        if (b->state < ES_JOB_DONE) { /* finished and cancelled jobs hold no slot */
            held++;
            double left = b->predicted - (now - b->created);
            if (first_free < 0 || left < first_free)
                first_free = left;
        }
        pthread_mutex_unlock(&b->lock);
    }
    if (held >= lim->max_jobs_per_client) {
        pthread_mutex_unlock(&j->lock);
        if (retry_s)
            *retry_s = first_free < 1 ? 1 : first_free > 86400 ? 86400 : (unsigned)ceil(first_free);
        return es_fail(err, ES_E_LIMIT, "max_jobs_per_client", "this client has %zu queued or running jobs, the "
                       "configured limit max_jobs_per_client=%u: a slot frees when one of them finishes (the first "
                       "is predicted in about %.0f s) or is cancelled (DELETE /v1/jobs/{id}); finished jobs do not "
                       "count", held, lim->max_jobs_per_client, first_free < 1 ? 1.0 : ceil(first_free));
    }
    for (size_t i = 0; i < sizeof bits; i++)
        snprintf(a->id + 2 * i, 3, "%02x", bits[i]);
    a->registered = true;
    a->jobs = j;
    a->next = j->head;
    j->head = es_ajob_retain(a);
    pthread_mutex_unlock(&j->lock);
    write_record(j, a);
    es_info("job %s: %s (predicted %.3g s) for %s", a->id, a->url, a->predicted, a->client);
    return 0;
}

/* The first registered job satisfying match (job table's lock held, sweeping first), retained. */
static es_ajob *find(es_jobs *j, const es_limits *lim, bool (*match)(es_ajob *, const void *), const void *arg)
{
    pthread_mutex_lock(&j->lock);
    j->budget = lim->max_job_bytes; /* a reload changes them */
    j->ttl = lim->job_ttl_s;
    sweep(j, lim->job_ttl_s);
    es_ajob *found = NULL;
    for (es_ajob **p = &j->head; *p && !found;) {
        es_ajob *a = *p;
        if (!match(a, arg)) {
            p = &a->next;
        } else if (forgotten_elsewhere(j, a)) { /* answered as forgotten at once, not after the next sweep */
            *p = a->next;
            unkeep(j, a);
            es_ajob_release(a);
        } else {
            found = es_ajob_retain(a);
        }
    }
    pthread_mutex_unlock(&j->lock);
    return found;
}

/* What a lookup asks for: an id or a key (the other NULL), and the owner
 * (NULL: anyone's; only es_jobs_reply, whose replies are public results). */
typedef struct lookup {
    const char *id, *key, *owner;
} lookup;

/* Is a the job of that id, or one that computes or holds the reply of that
 * key (not failed or cancelled), of that owner? An empty key (a request
 * deferred before it could be keyed: its averaged copy was not built yet)
 * names no reply: such a job serves no other. The ids are compared in
 * constant time: an id is a capability. */
static bool matches(es_ajob *a, const void *arg)
{
    const lookup *l = arg;
    if (l->owner && strcmp(a->owner, l->owner) != 0)
        return false;
    if (l->id)
        return strlen(l->id) == ES_JOB_ID_LEN && CRYPTO_memcmp(a->id, l->id, ES_JOB_ID_LEN) == 0;
    pthread_mutex_lock(&a->lock);
    bool ok = *l->key && strcmp(a->key, l->key) == 0 && a->state <= ES_JOB_DONE;
    pthread_mutex_unlock(&a->lock);
    return ok;
}

es_ajob *es_jobs_get(es_jobs *j, const es_limits *lim, const char *id, const char *owner)
{
    return find(j, lim, matches, &(lookup){.id = id ? id : "", .owner = owner ? owner : ""});
}

es_ajob *es_jobs_find(es_jobs *j, const es_limits *lim, const char *key, const char *owner)
{
    return find(j, lim, matches, &(lookup){.key = key ? key : "", .owner = owner});
}

/* See jobs.h. */
bool es_jobs_forget(es_jobs *j, es_ajob *a)
{
    pthread_mutex_lock(&j->lock);
    pthread_mutex_lock(&a->lock);
    bool finished = a->state >= ES_JOB_DONE, later = finished && a->publishing; /* forgotten once written */
    a->forget = a->forget || later;
    pthread_mutex_unlock(&a->lock);
    bool found = finished && !later && unlist(j, a);
    pthread_mutex_unlock(&j->lock);
    if (found)
        es_ajob_release(a); /* the job table's reference */
    return found || later;
}

/* See jobs.h. */
bool es_jobs_reply(es_jobs *j, const es_limits *lim, const char *key, es_reply *out)
{
    /* asked before every cached reply: with no job and no cache_dir there is nothing to find, and the
     * table's lock (one for every HTTP thread) is not taken; a job made meanwhile is one this request
     * did not see, as when it took the lock first */
    if (!j->dir && !__atomic_load_n(&j->head, __ATOMIC_ACQUIRE))
        return false;
    es_ajob *a = es_jobs_find(j, lim, key, NULL);
    bool done = false, from_disk = false;
    if (a) {
        pthread_mutex_lock(&a->lock);
        done = a->state == ES_JOB_DONE && a->kept == KEPT_MEMORY;
        from_disk = a->state == ES_JOB_DONE && a->kept == KEPT_DISK;
        if (done) {
            es_reply_release(out);
            es_shared_give(&a->reply, out);
        }
        pthread_mutex_unlock(&a->lock);
        es_ajob_release(a);
    } else {
        from_disk = j->dir && key && *key; /* another replica's job, or one before a restart */
    }
    if (from_disk) { /* read outside the locks */
        done = unspill(j, key, lim->job_ttl_s, out);
        pthread_mutex_lock(&j->lock);
        j->st.disk_reads += done;
        pthread_mutex_unlock(&j->lock);
    }
    return done;
}

/* Does a change of a's state go to a record the other replicas read (a's lock held)? */
static bool publishes(const es_ajob *a) { return a->registered && a->jobs && a->jobs->dir; }

/* The record of a change of a's state that counted a->publishing is written
 * (write_record after it): polls here answer from memory again once no other
 * change is being written, and a finished job that a DELETE reached meanwhile
 * is forgotten. Such a DELETE on another replica read its record while it
 * still said running and left a cancel mark, which the job's computation no
 * longer looks for; one here (es_jobs_forget) set `forget`.
 * es_jobs_remote_cancel reads the record again after its mark, so a mark
 * made after this look finds the record finished and forgets it there. */
static void published(es_jobs *j, es_ajob *a)
{
    bool finished = es_ajob_state(a) >= ES_JOB_DONE;
    char *marker = store_path(j, a->id, "cancel");
    bool asked = finished && unlink(marker) == 0;
    free(marker);
    pthread_mutex_lock(&j->lock);
    pthread_mutex_lock(&a->lock);
    a->forget = a->forget || asked;
    bool forget = --a->publishing == 0 && finished && a->forget; /* the last writer: no record written after */
    pthread_mutex_unlock(&a->lock);
    bool listed = forget && unlist(j, a);
    pthread_mutex_unlock(&j->lock);
    if (listed) {
        es_info("job %s forgotten (deleted while its record was written)", a->id);
        es_ajob_release(a); /* the job table's reference */
    }
}

void es_ajob_start(es_ajob *a)
{
    pthread_mutex_lock(&a->lock);
    bool publish = a->state == ES_JOB_QUEUED && publishes(a);
    if (a->state == ES_JOB_QUEUED)
        a->state = ES_JOB_RUNNING;
    a->publishing += publish;
    a->started = es_now();
    pthread_mutex_unlock(&a->lock);
    if (a->registered)
        write_record(a->jobs, a);
    if (publish)
        published(a->jobs, a);
}

/* See jobs.h. */
void es_ajob_finish(es_ajob *a, es_reply *rep)
{
    /* where a done reply is kept: in memory within the job table's budget, else only on disk, else nowhere;
     * with a cache_dir every done reply is on disk too, for the other replicas */
    es_jobs *j = a->jobs;
    bool counted = j && rep->status == 200 && !es_ajob_cancelled(a); /* a cancelled job keeps nothing */
    bool on_disk = false;
    int kept = KEPT_MEMORY;
    /* its body and its gzip, made when a client that accepts gzip fetches it (es_shared_gzip): counted
     * as a sample predicts it, or it would take the memory past the budget by up to the bodies again */
    double ratio = 0;
    size_t bytes = rep->len + (rep->gz ? rep->gz_len : 0);
    if (counted && !rep->gz && rep->body && es_gzip_pays(rep->body, rep->len, &ratio))
        bytes += (size_t)(ratio * (double)rep->len);
    if (counted) {
        on_disk = j->dir && spill(j, a, rep) == 0;
        pthread_mutex_lock(&j->lock);
        if (j->st.memory_bytes + bytes <= j->budget)
            j->st.memory_bytes += bytes; /* reserved */
        else
            kept = on_disk ? KEPT_DISK : KEPT_DROPPED;
        pthread_mutex_unlock(&j->lock);
    }
    if (j) /* kept and the totals change together (the job table's lock first, as everywhere) */
        pthread_mutex_lock(&j->lock);
    pthread_mutex_lock(&a->lock);
    a->finished = es_now();
    if (!a->started)
        a->started = a->finished;
    bool stored = a->state != ES_JOB_CANCELLED && rep->status == 200;
    bool publish = a->state != ES_JOB_CANCELLED && publishes(a);
    a->publishing += publish;
    if (a->state != ES_JOB_CANCELLED) {
        a->state = rep->status == 200 ? ES_JOB_DONE : ES_JOB_FAILED;
        es_reply_release(&a->reply);
        if (stored && kept != KEPT_MEMORY) { /* the shell only: the bytes are on disk, or gone */
            a->reply = *rep;
            a->reply.body = NULL;
            a->reply.gz = NULL;
            a->reply.gz_len = 0;
            a->reply.shared = NULL;
            a->reply.location = NULL;
            a->reply.body_static = false;
        } else {
            es_shared_adopt(rep);
            es_shared_give(rep, &a->reply);
        }
        a->kept = stored ? kept : KEPT_NONE;
        a->kept_bytes = stored && kept == KEPT_MEMORY ? bytes : 0;
        a->on_disk = stored && on_disk;
    }
    pthread_mutex_unlock(&a->lock);
    if (counted) {
        j->st.disk_bytes += stored && on_disk ? rep->len : 0;
        j->st.spilled += stored && kept == KEPT_DISK;
        j->st.dropped += stored && kept == KEPT_DROPPED;
        if (!stored && kept == KEPT_MEMORY) /* cancelled meanwhile: nothing is kept */
            j->st.memory_bytes -= bytes;
        if (!stored && on_disk)
            drop_file(j, a, a->key);
    }
    if (j)
        pthread_mutex_unlock(&j->lock);
    if (a->registered)
        write_record(j, a);
    if (a->registered)
        es_info("job %s %s in %.3f s (predicted %.3g s)", a->id, es_job_state_name(a->state), a->finished - a->started,
                a->predicted);
    if (publish)
        published(j, a);
}

/* See jobs.h. */
bool es_ajob_cancel(es_ajob *a)
{
    pthread_mutex_lock(&a->lock);
    bool live = a->state < ES_JOB_DONE, publish = live && publishes(a);
    if (live) {
        a->state = ES_JOB_CANCELLED;
        a->finished = es_now();
        atomic_store(&a->cancel, true);
    }
    a->publishing += publish;
    pthread_mutex_unlock(&a->lock);
    if (live && a->registered)
        write_record(a->jobs, a);
    if (publish)
        published(a->jobs, a);
    return live;
}

/* a's document from memory, as its record has it; NULL while a change of
 * its state is written to its record, unless publishing_too. */
static json_t *job_json(es_ajob *a, const es_limits *lim, bool publishing_too)
{
    pthread_mutex_lock(&a->lock);
    if (a->publishing && !publishing_too) { /* the check and the state rendered are one look */
        pthread_mutex_unlock(&a->lock);
        return NULL;
    }
    double now = es_now(), end = a->finished ? a->finished : now;
    es_job_view v = {.id = a->id, .url = a->url, .state = a->state,
                     .created_unix = a->created_unix, .elapsed_s = end - a->created,
                     .running_s = a->started ? end - a->started : 0, .predicted_s = a->predicted,
                     .expires_in_s = (double)lim->job_ttl_s - (now - a->finished),
                     .pass = atomic_load(&a->progress.pass), .blocks_done = atomic_load(&a->progress.done),
                     .blocks = atomic_load(&a->progress.total), .passes = atomic_load(&a->progress.passes),
                     .error = a->reply.body, .error_len = a->reply.len};
    /* one fraction across the passes, which never goes back (a repeated pass
     * or a late-started one can only hold it) */
    double overall = v.state == ES_JOB_DONE ? 1.0 : es_progress_overall(&a->progress);
    if (overall > a->shown)
        a->shown = overall;
    v.fraction = a->shown;
    v.pass_fraction = es_progress_pass_fraction(&a->progress, &v.estimated);
    json_t *o = es_job_render(&v);
    pthread_mutex_unlock(&a->lock);
    return o;
}

/* See jobs.h. While a change of a's state is being written to its record
 * (published), the record is what every replica answers, this one too: with
 * this one answering from memory, polls alternating between two replicas saw
 * the state go back, done here then running there (CI, stop 39) or done there
 * then running here (at load 10). */
json_t *es_ajob_json(es_ajob *a, const es_limits *lim)
{
    json_t *doc = job_json(a, lim, false);
    if (!doc) { /* the record is there (a record is only replaced whole) unless another replica forgot it */
        char *path = store_path(a->jobs, a->id, "job");
        doc = read_record(a->jobs, path, NULL, NULL);
        free(path);
    }
    return doc ? doc : job_json(a, lim, true);
}

/* See jobs.h. */
json_t *es_jobs_json(es_jobs *j, const es_limits *lim, const char *owner)
{
    json_t *list = json_array(), *mine = json_object();
    pthread_mutex_lock(&j->lock);
    j->ttl = lim->job_ttl_s;
    sweep_records(j, lim->job_ttl_s, true); /* a listing shows none another replica forgot */
    for (es_ajob *a = j->head; a; a = a->next)
        if (strcmp(a->owner, owner ? owner : "") == 0) {
            json_array_append_new(list, es_ajob_json(a, lim));
            json_object_set_new(mine, a->id, json_true());
        }
    pthread_mutex_unlock(&j->lock);
    DIR *d = j->dir ? opendir(j->dir) : NULL; /* the owner's jobs on the other replicas, and before a restart */
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n != ES_JOB_ID_LEN + 4 || strcmp(e->d_name + ES_JOB_ID_LEN, ".job") != 0)
            continue;
        char id[ES_JOB_ID_LEN + 1];
        snprintf(id, sizeof id, "%.*s", ES_JOB_ID_LEN, e->d_name);
        if (json_object_get(mine, id))
            continue;
        char *path = store_path(j, id, "job");
        json_t *doc = read_record(j, path, owner ? owner : "", NULL);
        free(path);
        if (doc)
            json_array_append_new(list, doc);
    }
    if (d)
        closedir(d);
    json_decref(mine);
    return list;
}

/* See jobs.h. */
json_t *es_jobs_remote(es_jobs *j, const es_limits *lim, const char *id, const char *owner, char **url)
{
    *url = NULL;
    if (!j->dir || !id || strlen(id) != ES_JOB_ID_LEN || strspn(id, "0123456789abcdef") != ES_JOB_ID_LEN)
        return NULL;
    pthread_mutex_lock(&j->lock);
    j->ttl = lim->job_ttl_s;
    pthread_mutex_unlock(&j->lock);
    char *path = store_path(j, id, "job");
    json_t *doc = read_record(j, path, owner ? owner : "", url);
    free(path);
    return doc;
}

/* See jobs.h. */
bool es_jobs_remote_cancel(es_jobs *j, const es_limits *lim, const char *id, const char *owner)
{
    char *url = NULL;
    json_t *doc = es_jobs_remote(j, lim, id, owner, &url);
    free(url);
    if (!doc)
        return false;
    if (record_live(doc)) { /* the daemon running it stops it (es_ajob_cancelled), or forgets it if it finished (published) */
        char *marker = store_path(j, id, "cancel");
        int fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
        /* it may have finished, and looked for a mark for the last time, between the read and the mark:
         * then its record says so now, and it is forgotten here */
        json_decref(doc);
        doc = es_jobs_remote(j, lim, id, owner, &url);
        free(url);
        bool finished = doc && !record_live(doc);
        if (finished)
            unlink(marker);
        free(marker);
        if (!finished) {
            json_decref(doc);
            return true;
        }
    }
    /* forgotten: its record goes, and the reply file with it unless another job still holds it */
    char *path = store_path(j, id, "job");
    json_t *rec = json_load_file(path, 0, NULL);
    char *key = es_strdup(or_empty(json_string_value(json_object_get(rec, "key"))));
    json_decref(rec);
    unlink(path);
    if (*key && strspn(key, "0123456789abcdef") == strlen(key)) {
        pthread_mutex_lock(&j->lock);
        drop_file(j, NULL, key);
        pthread_mutex_unlock(&j->lock);
    }
    free(key);
    free(path);
    json_decref(doc);
    return true;
}

/* See jobs.h. */
size_t es_jobs_live(es_jobs *j)
{
    size_t n = 0;
    pthread_mutex_lock(&j->lock);
    for (es_ajob *a = j->head; a; a = a->next) {
        pthread_mutex_lock(&a->lock);
        n += a->state < ES_JOB_DONE;
        pthread_mutex_unlock(&a->lock);
    }
    pthread_mutex_unlock(&j->lock);
    return n;
}

/* See jobs.h. */
void es_jobs_get_stats(es_jobs *j, es_jobs_stats *out)
{
    pthread_mutex_lock(&j->lock);
    *out = j->st;
    out->budget = j->budget;
    pthread_mutex_unlock(&j->lock);
}

es_job_state es_ajob_state(es_ajob *a)
{
    pthread_mutex_lock(&a->lock);
    es_job_state s = a->state;
    pthread_mutex_unlock(&a->lock);
    return s;
}

void es_jobs_free(es_jobs *j)
{
    if (!j)
        return;
    while (j->head) {
        es_ajob *a = j->head;
        j->head = a->next;
        if (!j->dir) {
            unkeep(j, a);
        } else if (es_ajob_state(a) < ES_JOB_DONE) { /* never ran to its end: recorded as interrupted */
            es_reply rep = {0};
            json_t *p = es_problem_new(ES_PROB_BUSY, "the daemon computing this job stopped before it finished "
                                       "(it was interrupted): ask again", NULL, a->url, NULL);
            rep.status = 503;
            rep.content_type = "application/problem+json";
            rep.body = json_dumps(p, JSON_COMPACT);
            rep.len = rep.body ? strlen(rep.body) : 0;
            json_decref(p);
            a->jobs = NULL; /* no reply to keep: the record only */
            es_ajob_finish(a, &rep);
            es_reply_release(&rep);
            a->jobs = j;
            write_record(j, a);
        } /* else its record and reply file stay for the other replicas and a restart, until they expire */
        es_ajob_release(a);
    }
    if (j->lock_fd >= 0) { /* stopped: its lock file goes, and a record still naming it reads as interrupted */
        char *lock = es_asprintf("%s/daemon-%s.lock", j->dir, j->daemon);
        unlink(lock);
        free(lock);
        close(j->lock_fd);
    }
    pthread_mutex_destroy(&j->lock);
    free(j->dir);
    free(j);
}
