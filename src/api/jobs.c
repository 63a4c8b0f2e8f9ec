/* Jobs: a computing request that is predicted to take longer than
 * limits.sync_seconds, that runs past it, or whose client asked for it
 * (Prefer: respond-async) answers 202 Accepted with Location: /v1/jobs/{id}
 * and goes on computing without its connection. Its record (state, elapsed
 * and predicted time, the progress its loops report) answers GET
 * /v1/jobs/{id}; once done, a 303 to the result's own URL, whose gate serves
 * the reply the job keeps (as shared bytes) for limits.job_ttl_s after it
 * finished, so a reply too large for the response cache is not computed
 * again. Identical requests share one job (one key, the response cache's);
 * DELETE cancels (the computation stops at its next block); a client holds
 * at most limits.max_jobs_per_client unexpired jobs.
 *
 * Every computing request carries a record from the start (es_ajob_new): its
 * progress tracker is what the compute thread reports to, and a request that
 * runs past its synchronous window is turned into a job by registering the
 * record it already has (es_jobs_add). */
#include "embedscope/api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const state_names[] = {"queued", "running", "done", "failed", "cancelled"};

struct es_ajob {
    char id[24];
    char key[65];               /* the response cache's key of the reply */
    char *url;                  /* path?query of the result */
    char client[ES_CLIENT_MAX];
    double created, started, finished; /* es_now(); 0 until then */
    double created_unix;
    double predicted;           /* seconds */
    double shown;               /* the largest overall fraction answered (it never goes back) */
    es_progress progress;
    atomic_bool cancel;
    pthread_mutex_t lock;       /* guards state, reply, refs */
    es_job_state state;
    es_reply reply;             /* DONE: the 200 (shared bytes); FAILED: its problem */
    bool registered;
    int refs;
    es_ajob *next;              /* the registry's list */
};

struct es_jobs {
    pthread_mutex_t lock;
    es_ajob *head;
    unsigned long counter;
};

es_jobs *es_jobs_new(void)
{
    es_jobs *j = es_calloc(1, sizeof *j);
    pthread_mutex_init(&j->lock, NULL);
    return j;
}

/* See api.h. */
es_ajob *es_ajob_new(const char *key, const char *url, const char *client, const es_cost *cost)
{
    es_ajob *a = es_calloc(1, sizeof *a);
    snprintf(a->key, sizeof a->key, "%s", key ? key : "");
    a->url = es_strdup(url ? url : "");
    snprintf(a->client, sizeof a->client, "%s", client ? client : "");
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
bool es_ajob_cancelled(es_ajob *a) { return atomic_load(&a->cancel); }

/* Is a finished (done, failed, cancelled) for longer than ttl seconds at now? (lock held) */
static bool expired(const es_ajob *a, double now, unsigned ttl)
{
    return a->state >= ES_JOB_DONE && a->finished > 0 && now - a->finished > (double)ttl;
}

/* Unlink and release the expired jobs (registry lock held). */
static void sweep(es_jobs *j, unsigned ttl)
{
    double now = es_now();
    for (es_ajob **p = &j->head; *p;) {
        es_ajob *a = *p;
        pthread_mutex_lock(&a->lock);
        bool gone = expired(a, now, ttl);
        pthread_mutex_unlock(&a->lock);
        if (gone) {
            *p = a->next;
            es_ajob_release(a);
        } else {
            p = &a->next;
        }
    }
}

/* See api.h. */
int es_jobs_add(es_jobs *j, es_ajob *a, const es_limits *lim, unsigned *retry_s, es_err *err)
{
    pthread_mutex_lock(&j->lock);
    sweep(j, lim->job_ttl_s);
    size_t held = 0;
    double now = es_now(), first_expiry = (double)lim->job_ttl_s;
    for (es_ajob *b = j->head; b; b = b->next) {
        if (strcmp(b->client, a->client) != 0)
            continue;
        held++;
        pthread_mutex_lock(&b->lock);
        if (b->state >= ES_JOB_DONE && b->finished > 0 && b->finished + lim->job_ttl_s - now < first_expiry)
            first_expiry = b->finished + lim->job_ttl_s - now;
        pthread_mutex_unlock(&b->lock);
    }
    if (held >= lim->max_jobs_per_client) {
        pthread_mutex_unlock(&j->lock);
        if (retry_s)
            *retry_s = first_expiry < 1 ? 1 : (unsigned)ceil(first_expiry);
        return es_fail(err, ES_E_LIMIT, "max_jobs_per_client", "this client holds %zu jobs, the configured limit "
                       "max_jobs_per_client=%u: wait for them to expire (limits.job_ttl_s = %u s after they "
                       "finish) or cancel some (DELETE /v1/jobs/{id})", held, lim->max_jobs_per_client,
                       lim->job_ttl_s);
    }
    char seed[160], hex[65];
    snprintf(seed, sizeof seed, "%lu|%.9f|%s", ++j->counter, es_wall_now(), a->key);
    es_sha256_hex(seed, strlen(seed), hex);
    snprintf(a->id, sizeof a->id, "%.20s", hex);
    a->registered = true;
    a->next = j->head;
    j->head = es_ajob_retain(a);
    pthread_mutex_unlock(&j->lock);
    es_info("job %s: %s (predicted %.3g s) for %s", a->id, a->url, a->predicted, a->client);
    return 0;
}

/* The first registered job satisfying match (registry lock held, sweeping first), retained. */
static es_ajob *find(es_jobs *j, const es_limits *lim, bool (*match)(es_ajob *, const void *), const void *arg)
{
    pthread_mutex_lock(&j->lock);
    sweep(j, lim->job_ttl_s);
    es_ajob *found = NULL;
    for (es_ajob *a = j->head; a && !found; a = a->next)
        if (match(a, arg))
            found = es_ajob_retain(a);
    pthread_mutex_unlock(&j->lock);
    return found;
}

static bool has_id(es_ajob *a, const void *id) { return strcmp(a->id, id) == 0; }

/* A job that computes or holds the reply of key (not failed or cancelled).
 * An empty key (a request deferred before it could be keyed: its averaged
 * copy was not built yet) names no reply: such a job serves no other. */
static bool serves_key(es_ajob *a, const void *key)
{
    pthread_mutex_lock(&a->lock);
    bool ok = *(const char *)key && strcmp(a->key, key) == 0 && a->state <= ES_JOB_DONE;
    pthread_mutex_unlock(&a->lock);
    return ok;
}

es_ajob *es_jobs_get(es_jobs *j, const es_limits *lim, const char *id) { return find(j, lim, has_id, id); }
es_ajob *es_jobs_find(es_jobs *j, const es_limits *lim, const char *key) { return find(j, lim, serves_key, key); }

/* See api.h. */
bool es_jobs_reply(es_jobs *j, const es_limits *lim, const char *key, es_reply *out)
{
    es_ajob *a = es_jobs_find(j, lim, key);
    if (!a)
        return false;
    pthread_mutex_lock(&a->lock);
    bool done = a->state == ES_JOB_DONE;
    if (done) {
        es_reply_release(out);
        es_shared_give(&a->reply, out);
    }
    pthread_mutex_unlock(&a->lock);
    es_ajob_release(a);
    return done;
}

void es_ajob_start(es_ajob *a)
{
    pthread_mutex_lock(&a->lock);
    if (a->state == ES_JOB_QUEUED)
        a->state = ES_JOB_RUNNING;
    a->started = es_now();
    pthread_mutex_unlock(&a->lock);
}

/* See api.h. */
void es_ajob_finish(es_ajob *a, es_reply *rep)
{
    pthread_mutex_lock(&a->lock);
    a->finished = es_now();
    if (!a->started)
        a->started = a->finished;
    if (a->state != ES_JOB_CANCELLED) {
        a->state = rep->status == 200 ? ES_JOB_DONE : ES_JOB_FAILED;
        es_shared_adopt(rep);
        es_reply_release(&a->reply);
        es_shared_give(rep, &a->reply);
    }
    pthread_mutex_unlock(&a->lock);
    if (a->registered)
        es_info("job %s %s in %.3f s (predicted %.3g s)", a->id, state_names[a->state], a->finished - a->started,
                a->predicted);
}

/* See api.h. */
bool es_ajob_cancel(es_ajob *a)
{
    pthread_mutex_lock(&a->lock);
    bool live = a->state < ES_JOB_DONE;
    if (live) {
        a->state = ES_JOB_CANCELLED;
        a->finished = es_now();
        atomic_store(&a->cancel, true);
    }
    pthread_mutex_unlock(&a->lock);
    return live;
}

/* See api.h. */
json_t *es_ajob_json(es_ajob *a, const es_limits *lim)
{
    es_jctx jc = {0};
    pthread_mutex_lock(&a->lock);
    double now = es_now(), end = a->finished ? a->finished : now;
    const char *pass = atomic_load(&a->progress.pass);
    size_t done = atomic_load(&a->progress.done), total = atomic_load(&a->progress.total);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(a->id));
    json_object_set_new(o, "state", json_string(state_names[a->state]));
    json_object_set_new(o, "url", es_jstr(a->url));
    json_object_set_new(o, "created", es_jnum(&jc, "created", a->created_unix));
    json_object_set_new(o, "elapsed_s", es_jnum(&jc, "elapsed_s", end - a->created));
    json_object_set_new(o, "running_s", es_jnum(&jc, "running_s", a->started ? end - a->started : 0));
    json_object_set_new(o, "predicted_s", es_jnum(&jc, "predicted_s", a->predicted));
    json_t *progress = json_object();
    /* one fraction across the passes, which never goes back (a repeated pass
     * or a late-started one can only hold it) */
    double overall = a->state == ES_JOB_DONE ? 1.0 : es_progress_overall(&a->progress);
    if (overall > a->shown)
        a->shown = overall;
    bool estimated;
    double in_pass = es_progress_pass_fraction(&a->progress, &estimated);
    estimated = estimated && a->state != ES_JOB_DONE;
    json_object_set_new(progress, "fraction", json_real(a->shown));
    json_object_set_new(progress, "pass_fraction", json_real(a->state == ES_JOB_DONE ? 1.0 : in_pass));
    json_object_set_new(progress, "pass", pass ? json_string(pass) : json_null());
    json_object_set_new(progress, "estimated", json_boolean(estimated));
    json_object_set_new(progress, "blocks_done", json_integer((json_int_t)done));
    json_object_set_new(progress, "blocks", json_integer((json_int_t)total));
    json_object_set_new(progress, "passes", json_integer((json_int_t)atomic_load(&a->progress.passes)));
    json_object_set_new(o, "progress", progress);
    if (a->state == ES_JOB_DONE)
        json_object_set_new(o, "result", es_jstr(a->url));
    if (a->state == ES_JOB_FAILED) {
        json_t *problem = json_loadb(a->reply.body ? a->reply.body : "", a->reply.len, 0, NULL);
        json_object_set_new(o, "error", problem ? problem : json_null());
    }
    if (a->state >= ES_JOB_DONE)
        json_object_set_new(o, "expires_in_s", es_jnum(&jc, "expires_in_s", (double)lim->job_ttl_s - (now - a->finished)));
    pthread_mutex_unlock(&a->lock);
    return o;
}

/* See api.h. */
json_t *es_jobs_json(es_jobs *j, const es_limits *lim)
{
    json_t *list = json_array();
    pthread_mutex_lock(&j->lock);
    sweep(j, lim->job_ttl_s);
    for (es_ajob *a = j->head; a; a = a->next)
        json_array_append_new(list, es_ajob_json(a, lim));
    pthread_mutex_unlock(&j->lock);
    return list;
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
        es_ajob_release(a);
    }
    pthread_mutex_destroy(&j->lock);
    free(j);
}
