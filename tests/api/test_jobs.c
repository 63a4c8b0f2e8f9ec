/* Unit tests of the jobs two replicas share through one cache_dir (jobs.c):
 * two job tables on one directory in one process, as two daemons sharing a
 * volume. A finished job is shown finished only once the record the other
 * replica reads says so, and a DELETE on the other replica that meets the job
 * as it finishes forgets it on both (in CI a replica answered 303 while its
 * record still said running: the other's DELETE left a cancel mark nobody
 * looked for, and the job lived on). */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "embedscope/jobs.h"

static const es_limits limits = {.job_ttl_s = 600, .max_jobs_per_client = 1000, .max_job_bytes = 1 << 20};

/* Two replicas: job tables on one fresh directory. */
typedef struct replicas {
    char dir[64];
    es_jobs *a, *b;
} replicas;

/* The replicas of every test (Check's fixture: opened and closed around each). */
static replicas r;

static void replicas_open(void)
{
    es_log_set_level(ES_LOG_WARN); /* each job says what becomes of it at info */
    snprintf(r.dir, sizeof r.dir, "/tmp/embedscope-test-jobs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(r.dir));
    r.a = es_jobs_new(r.dir, limits.max_job_bytes);
    r.b = es_jobs_new(r.dir, limits.max_job_bytes);
}

static void replicas_close(void)
{
    es_jobs_free(r.a);
    es_jobs_free(r.b);
    char *cmd = es_asprintf("rm -rf '%s'", r.dir);
    ck_assert_int_eq(system(cmd), 0);
    free(cmd);
}

/* A running job of table j for the reply of key (64 hex digits made of n); its id in id. */
static es_ajob *running_job(es_jobs *j, unsigned n, char id[ES_JOB_ID_LEN + 1])
{
    char key[65];
    snprintf(key, sizeof key, "%064x", n);
    es_cost cost = {.seconds = 1};
    es_ajob *a = es_ajob_new(key, "/v1/models/m/matrices/x/spectrum", "127.0.0.1", NULL, &cost);
    es_err err;
    ck_assert_int_eq(es_jobs_add(j, a, &limits, NULL, &err), 0);
    es_ajob_start(a);
    snprintf(id, ES_JOB_ID_LEN + 1, "%s", es_ajob_id(a));
    return a;
}

/* Finish a with a 200 of a small JSON body. */
static void finish_done(es_ajob *a)
{
    es_reply rep = {.status = 200, .content_type = "application/json", .body = es_strdup("[1,2,3]"), .len = 7};
    es_ajob_finish(a, &rep);
    es_reply_release(&rep);
}

/* The state the record in the shared directory gives, read by table j ("" if none). */
static void record_state(es_jobs *j, const char *id, char out[16])
{
    char *url = NULL;
    json_t *doc = es_jobs_remote(j, &limits, id, "127.0.0.1", &url);
    free(url);
    snprintf(out, 16, "%s", doc ? json_string_value(json_object_get(doc, "state")) : "");
    json_decref(doc);
}

/* The record's state, read by table j, is want ("": no record). */
static void ck_record(es_jobs *j, const char *id, const char *want)
{
    char state[16];
    record_state(j, id, state);
    ck_assert_str_eq(state, want);
}

/* A watcher of job a on its own replica: the record's state the other
 * replica read the first time a's own showed done. */
typedef struct watch {
    es_ajob *a;
    char seen[16];
} watch;

static void *watch_job(void *arg)
{
    watch *w = arg;
    while (es_ajob_state(w->a) != ES_JOB_DONE)
        ;
    record_state(r.b, es_ajob_id(w->a), w->seen);
    return NULL;
}

START_TEST(a_job_is_shown_done_only_once_its_record_says_so)
{
    for (unsigned i = 0; i < 200; i++) { /* the window was a record's write: tens of microseconds */
        char id[ES_JOB_ID_LEN + 1];
        es_ajob *a = running_job(r.a, i, id);
        watch w = {.a = a};
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, watch_job, &w), 0);
        finish_done(a);
        pthread_join(t, NULL);
        ck_assert_msg(strcmp(w.seen, "done") == 0, "job %u shown done while the other replica read '%s'", i, w.seen);
        es_ajob_release(a);
    }
}
END_TEST

/* The other replica's DELETE met the job still running in its record and
 * left a cancel mark; the job finished before its computation looked again
 * (it looks at most twice a second). */
START_TEST(a_delete_elsewhere_that_met_the_job_finishing_forgets_it_on_both)
{
    char id[ES_JOB_ID_LEN + 1];
    es_ajob *a = running_job(r.a, 1, id);
    ck_assert(!es_ajob_cancelled(a)); /* its computation's last look */
    ck_assert(es_jobs_remote_cancel(r.b, &limits, id, "127.0.0.1"));
    finish_done(a);
    es_ajob *held = es_jobs_get(r.a, &limits, id, "127.0.0.1");
    ck_assert_msg(held == NULL, "the replica that ran it still holds it, %s",
                  held ? (es_ajob_state(held) == ES_JOB_DONE ? "done" : "not done") : "");
    ck_record(r.b, id, "");
    char *marker = es_asprintf("%s/jobs/%s.cancel", r.dir, id);
    ck_assert_int_ne(access(marker, F_OK), 0); /* no mark left behind */
    free(marker);
    es_ajob_release(a);
}
END_TEST

START_TEST(a_delete_elsewhere_of_a_finished_job_forgets_it_on_both)
{
    char id[ES_JOB_ID_LEN + 1];
    es_ajob *a = running_job(r.a, 2, id);
    finish_done(a);
    ck_record(r.b, id, "done");
    ck_assert(es_jobs_remote_cancel(r.b, &limits, id, "127.0.0.1"));
    ck_assert_ptr_null(es_jobs_get(r.a, &limits, id, "127.0.0.1"));
    ck_record(r.b, id, "");
    es_ajob_release(a);
}
END_TEST

START_TEST(a_delete_elsewhere_of_a_running_job_cancels_it)
{
    char id[ES_JOB_ID_LEN + 1];
    es_ajob *a = running_job(r.a, 3, id);
    ck_assert(es_jobs_remote_cancel(r.b, &limits, id, "127.0.0.1"));
    ck_assert(es_ajob_cancelled(a)); /* its computation's next look */
    ck_assert_int_eq(es_ajob_state(a), ES_JOB_CANCELLED);
    ck_record(r.b, id, "cancelled");
    es_ajob_release(a);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("jobs");
    TCase *tc = tcase_create("replicas");
    tcase_add_checked_fixture(tc, replicas_open, replicas_close);
    tcase_add_test(tc, a_job_is_shown_done_only_once_its_record_says_so);
    tcase_add_test(tc, a_delete_elsewhere_that_met_the_job_finishing_forgets_it_on_both);
    tcase_add_test(tc, a_delete_elsewhere_of_a_finished_job_forgets_it_on_both);
    tcase_add_test(tc, a_delete_elsewhere_of_a_running_job_cancels_it);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
