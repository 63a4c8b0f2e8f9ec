/* Unit tests of the compute pool's cancellation (pool.c): a task's safe points
 * (es_checkpoint, and es_progress_check inside its loops through
 * es_pool_track) tell a dropped task (ES_E_CANCELLED, answered 504) from work
 * the shutdown abandons (ES_E_SHUTDOWN, answered 503 with Retry-After), and
 * never stop anything outside a pool task. */
#include <check.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>

#include "check_main.h"
#include "embedscope/pool.h"
#include "embedscope/problem.h"

/* What a task saw at its safe points. */
typedef struct probe {
    atomic_bool dropped;   /* what its es_task_dropped_fn answers */
    sem_t ran;             /* posted once the task has looked */
    es_err at_checkpoint, in_loop;
    int rc_checkpoint, rc_loop;
    bool cancelled;
} probe;

static bool probe_dropped(void *arg) { return atomic_load(&((probe *)arg)->dropped); }

static void probe_task(void *arg, bool cancelled)
{
    probe *p = arg;
    es_progress pr = {0};
    p->cancelled = cancelled;
    p->rc_checkpoint = es_checkpoint(&p->at_checkpoint);
    es_pool_track(&pr);
    p->rc_loop = es_progress_check(&p->in_loop);
    es_pool_track(NULL);
    sem_post(&p->ran);
}

/* Run one probe task on p and wait for it. */
static void run_probe(es_pool *pool, probe *p, bool dropped)
{
    *p = (probe){0};
    atomic_store(&p->dropped, dropped);
    sem_init(&p->ran, 0, 0);
    ck_assert_int_eq(es_pool_submit(pool, ES_PRIO_REQUEST, "client", NULL, probe_task, probe_dropped, p), 0);
    sem_wait(&p->ran);
    sem_destroy(&p->ran);
    ck_assert(!p->cancelled);
}

START_TEST(a_wanted_task_runs_on)
{
    es_err err;
    es_pool *pool = es_pool_new(1, 0, 4, &err);
    ck_assert_ptr_nonnull(pool);
    probe p;
    run_probe(pool, &p, false);
    ck_assert_int_eq(p.rc_checkpoint, 0);
    ck_assert_int_eq(p.rc_loop, 0);
    es_pool_free(pool);
}
END_TEST

START_TEST(a_dropped_task_is_cancelled)
{
    es_err err;
    es_pool *pool = es_pool_new(1, 0, 4, &err);
    probe p;
    run_probe(pool, &p, true);
    ck_assert_int_eq(p.rc_checkpoint, -1);
    ck_assert_int_eq(p.at_checkpoint.code, ES_E_CANCELLED);
    ck_assert_int_eq(p.rc_loop, -1);
    ck_assert_int_eq(p.in_loop.code, ES_E_CANCELLED);
    ck_assert_int_eq(es_problem_status(es_problem_kind_of(p.at_checkpoint.code)), 504);
    es_pool_free(pool);
}
END_TEST

START_TEST(abandoned_work_stops_as_a_shutdown)
{
    es_err err;
    es_pool *pool = es_pool_new(1, 0, 4, &err);
    ck_assert(!es_pool_abandoned(pool));
    es_pool_abandon(pool);
    ck_assert(es_pool_abandoned(pool));
    probe p;
    run_probe(pool, &p, true); /* dropped too: the shutdown is what it answers */
    ck_assert_int_eq(p.rc_checkpoint, -1);
    ck_assert_int_eq(p.at_checkpoint.code, ES_E_SHUTDOWN);
    ck_assert_int_eq(p.rc_loop, -1);
    ck_assert_int_eq(p.in_loop.code, ES_E_SHUTDOWN);
    ck_assert_int_eq(es_problem_kind_of(p.at_checkpoint.code), ES_PROB_BUSY);
    ck_assert_int_eq(es_problem_status(ES_PROB_BUSY), 503);
    es_pool_free(pool);
}
END_TEST

START_TEST(outside_a_task_nothing_stops)
{
    es_err err;
    es_pool *pool = es_pool_new(1, 0, 4, &err);
    es_pool_abandon(pool);
    ck_assert_int_eq(es_checkpoint(&err), 0); /* this thread runs no pool task */
    es_progress pr = {0};
    es_pool_track(&pr);
    ck_assert_int_eq(es_progress_check(&err), 0);
    es_pool_track(NULL);
    ck_assert(!es_pool_abandoned(NULL));
    es_pool_abandon(NULL);
    es_pool_free(pool);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("cancellation");
    tcase_add_test(tc, a_wanted_task_runs_on);
    tcase_add_test(tc, a_dropped_task_is_cancelled);
    tcase_add_test(tc, abandoned_work_stops_as_a_shutdown);
    tcase_add_test(tc, outside_a_task_nothing_stops);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
