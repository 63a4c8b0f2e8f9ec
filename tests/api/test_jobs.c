/* Unit tests of the jobs two replicas share through one cache_dir (jobs.c):
 * two job tables on one directory in one process, as two daemons sharing a
 * volume. Polls alternating between the replicas never see a state go back,
 * and a DELETE on the other replica that meets the job as it finishes
 * forgets it on both (in CI a replica answered 303 while its record still
 * said running: the other's DELETE left a cancel mark nobody looked for, and
 * the job lived on; at load 10, with the record written first, the other
 * replica showed done and then this one running). */
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

/* The order of the states a poll may show ("queued" < "running" < "done"); -1 for anything else. */
static int order(const char *state)
{
    static const char *const states[] = {"queued", "running", "done"};
    for (int i = 0; i < 3; i++)
        if (strcmp(state, states[i]) == 0)
            return i;
    return -1;
}

/* Polls of job a alternating between its own replica (its document) and the
 * other (the record), as a client behind a proxy polls: what they showed,
 * and the first time a state went back. */
typedef struct watch {
    es_ajob *a;
    char bad[160];
} watch;

static void *alternate_polls(void *arg)
{
    watch *w = arg;
    int last = 0;
    for (bool done = false; !done;) {
        json_t *doc = es_ajob_json(w->a, &limits);
        char here[16], there[16];
        snprintf(here, sizeof here, "%s", json_string_value(json_object_get(doc, "state")));
        json_decref(doc);
        record_state(r.b, es_ajob_id(w->a), there);
        const char *seen[2] = {here, there};
        for (int i = 0; i < 2; i++) {
            if (order(seen[i]) < last) {
                snprintf(w->bad, sizeof w->bad, "%s on %s after %s", seen[i], i ? "the other" : "its own",
                         last == 2 ? "done" : "running");
                return NULL;
            }
            last = order(seen[i]);
        }
        done = order(here) == 2 && order(there) == 2;
    }
    return NULL;
}

START_TEST(polls_alternating_between_replicas_never_see_a_state_go_back)
{
    for (unsigned i = 0; i < 200; i++) { /* the windows were a record's write: tens of microseconds */
        char id[ES_JOB_ID_LEN + 1];
        es_ajob *a = running_job(r.a, i, id);
        watch w = {.a = a};
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, alternate_polls, &w), 0);
        finish_done(a);
        pthread_join(t, NULL);
        ck_assert_msg(w.bad[0] == 0, "job %u: %s", i, w.bad);
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
    /* forgotten; or, on a machine that stalled for half a second between the look above and the finish's own
     * look, cancelled there (the DELETE's answer to a running job): never done */
    es_ajob *held = es_jobs_get(r.a, &limits, id, "127.0.0.1");
    bool cancelled = held && es_ajob_state(held) == ES_JOB_CANCELLED;
    ck_assert_msg(!held || cancelled, "the replica that ran it still holds it, %s",
                  held ? es_job_state_name(es_ajob_state(held)) : "");
    es_ajob_release(held);
    ck_record(r.b, id, cancelled ? "cancelled" : "");
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
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, polls_alternating_between_replicas_never_see_a_state_go_back);
    tcase_add_test(tc, a_delete_elsewhere_that_met_the_job_finishing_forgets_it_on_both);
    tcase_add_test(tc, a_delete_elsewhere_of_a_finished_job_forgets_it_on_both);
    tcase_add_test(tc, a_delete_elsewhere_of_a_running_job_cancels_it);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
