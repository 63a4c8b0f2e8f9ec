/* The runtime of the service (src/api), its jobs: the records of computing
 * requests, registered as jobs (202, GET /v1/jobs/{id}) when they take long,
 * their replies kept in memory or in cache_dir/jobs.
 * Owner: src/api/jobs.c (the job document: src/api/jobdoc.c). Ownership and failure rules: see core.h. */
#ifndef ES_JOBS_H
#define ES_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "embedscope/core.h"
#include "embedscope/cost.h"
#include "embedscope/negotiate.h"
#include "embedscope/results.h"
#include "embedscope/settings.h"

/* A computing request's record: its progress from the start, a job (GET
 * /v1/jobs/{id}) once registered. Reference counted; the functions never fail
 * unless said. */
typedef enum es_job_state {
    ES_JOB_QUEUED, ES_JOB_RUNNING, ES_JOB_DONE, ES_JOB_FAILED, ES_JOB_CANCELLED, ES_JOB_STATES
} es_job_state;
/* The member of GET /v1/jobs listing the jobs (es_jobs_json). */
#define ES_JOBS_LISTING "requests"
typedef struct es_ajob es_ajob;
typedef struct es_jobs es_jobs;

/* A job id: 128 random bits (OpenSSL's RAND_bytes) in lowercase hex. */
#define ES_JOB_ID_LEN 32
/* Who owns a job: the client (its address, or a trusted proxy's forwarded
 * one) and, when the request carried "Authorization: Bearer TOKEN", a digest
 * of the token ("ADDRESS+HEX"; the token itself is not kept). Whether the
 * token is right is not asked: it only tells its holders apart, never
 * grants more than the address alone would. */
#define ES_OWNER_MAX (ES_CLIENT_MAX + 34)
void es_job_owner(const char *client, const char *authorization, char out[ES_OWNER_MAX]);

/* The job table. Replies of finished jobs are kept in memory up to budget
 * bytes (limits.max_job_bytes; each lookup takes the current limit), beyond
 * it in cache_dir/jobs (made if missing; NULL or unusable: dropped, their
 * result URLs compute again). */
es_jobs *es_jobs_new(const char *cache_dir, size_t budget);
/* Free it with its records. With a cache_dir, a job that never finished is
 * recorded as failed (interrupted), and finished jobs' records and reply
 * files stay for the other replicas and a restart until they expire; without,
 * nothing is left. NULL: nothing. */
void es_jobs_free(es_jobs *j);
typedef struct es_jobs_stats {
    size_t budget;             /* limits.max_job_bytes */
    size_t memory_bytes;       /* replies kept in memory (body and gzip) */
    size_t disk_bytes;         /* replies in cache_dir/jobs (every finished job's: the other replicas read them) */
    unsigned long spilled;     /* replies written to disk because the budget was full */
    unsigned long dropped;     /* replies let go (no cache_dir, or its write failed) */
    unsigned long disk_reads;  /* results served from those files */
} es_jobs_stats;
void es_jobs_get_stats(es_jobs *j, es_jobs_stats *out);
/* An unregistered record of the request for the reply `key` (the response
 * cache's), its result URL (path?query), client (whose cap it counts
 * toward), owner (es_job_owner; NULL: the client) and prediction (its seconds,
 * and each progress loop's share of them, the weights of its overall
 * fraction); one reference. */
es_ajob *es_ajob_new(const char *key, const char *url, const char *client, const char *owner, const es_cost *cost);
es_ajob *es_ajob_retain(es_ajob *a);
void es_ajob_release(es_ajob *a);    /* NULL is ignored */
/* Register a as a job with a fresh id (expired jobs are dropped first).
 * ES_E_LIMIT "max_jobs_per_client" when its client has that many queued or
 * running already (finished and cancelled ones do not count); then *retry_s
 * (when not NULL) is the whole seconds until the first of them is predicted
 * to finish, at least 1. ES_E_NOMEM when no random id could be drawn. */
int es_jobs_add(es_jobs *j, es_ajob *a, const es_limits *lim, unsigned *retry_s, es_err *err);
/* The registered job of that id and owner / the live one (queued, running or
 * done) of that key and owner (NULL: anyone's), retained; NULL if none
 * (expired ones are dropped first). */
es_ajob *es_jobs_get(es_jobs *j, const es_limits *lim, const char *id, const char *owner);
es_ajob *es_jobs_find(es_jobs *j, const es_limits *lim, const char *key, const char *owner);
/* Unregister a finished (done, failed, cancelled) job: true; false when it
 * is still queued or running, or not registered. A job whose finished state
 * is being written to its record is unregistered once it is written: true. */
bool es_jobs_forget(es_jobs *j, es_ajob *a);
/* The reply of a done job of that key copied into out (shared bytes): true. */
bool es_jobs_reply(es_jobs *j, const es_limits *lim, const char *key, es_reply *out);
const char *es_ajob_id(const es_ajob *a);
const char *es_ajob_url(const es_ajob *a); /* path?query of its result */
es_progress *es_ajob_progress(es_ajob *a);
es_job_state es_ajob_state(es_ajob *a);
bool es_ajob_cancelled(es_ajob *a);
/* Running from now on. */
void es_ajob_start(es_ajob *a);
/* Finished with rep (its bodies become shared bytes, which a keeps a reference
 * to): done for a 200, failed otherwise; a cancelled job stays cancelled. */
void es_ajob_finish(es_ajob *a, es_reply *rep);
/* Cancel a queued or running job (its computation stops at its next block): true; false if finished. */
bool es_ajob_cancel(es_ajob *a);
/* The job document: the members of jobdoc.c's field table present in a's
 * state (id, state, url, progress, ...; result when done, error when failed).
 * While a change of its state is written to its record in cache_dir/jobs,
 * the record's document: what every replica answers. */
json_t *es_ajob_json(es_ajob *a, const es_limits *lim);
/* A job's values as its document shows them, read at once (jobs.c), and the
 * document jobdoc.c's table makes of them (a new object). Strings are
 * borrowed. */
typedef struct es_job_view {
    const char *id, *url;
    es_job_state state;
    double created_unix, elapsed_s, running_s, predicted_s;
    double expires_in_s;       /* finished ones */
    double fraction;           /* overall, never going back */
    double pass_fraction;      /* the running pass's */
    bool estimated;            /* pass_fraction estimated from the time */
    const char *pass;          /* the running pass's name, or NULL */
    size_t blocks_done, blocks, passes;
    const char *error;         /* failed: the problem (JSON) it answered, error_len bytes; or NULL */
    size_t error_len;
} es_job_view;
json_t *es_job_render(const es_job_view *v);
/* "queued", "running", "done", "failed", "cancelled". */
const char *es_job_state_name(es_job_state s);
/* The job document's description from the same table (--dump-api "job"):
 * {states, finished, listing, fields: [{name, type, nullable, states,
 * description, enum?, schema?, members?}]}. */
json_t *es_job_describe(void);
/* The es_ajob_json of every registered job of that owner, newest first,
 * then its jobs in cache_dir/jobs that this daemon does not hold (another
 * replica's, or from before a restart). */
json_t *es_jobs_json(es_jobs *j, const es_limits *lim, const char *owner);
/* A job of that id and owner that this daemon does not hold, from its record
 * in cache_dir/jobs (another replica's, or from before a restart): its
 * document ("failed" when the daemon computing it has stopped), and *url its
 * result URL when it is done (caller frees; NULL otherwise). NULL if none. */
json_t *es_jobs_remote(es_jobs *j, const es_limits *lim, const char *id, const char *owner, char **url);
/* DELETE of such a job: forgotten when finished, cancelled by the daemon
 * computing it when queued or running (a file it looks for): true; false if none. */
bool es_jobs_remote_cancel(es_jobs *j, const es_limits *lim, const char *id, const char *owner);
/* Registered jobs queued or running (the shutdown's grace period waits for them). */
size_t es_jobs_live(es_jobs *j);

#endif
