/* Progress of a tracked computation: the overall fraction weights each pass by
 * its predicted share, adds the finished passes' shares, counts a repeated pass
 * again (capped at 1) and gives unknown passes no weight; LAPACK's pass, which
 * reports nothing, is estimated from its time against its predicted seconds,
 * capped below its share until it ends. */
#include <check.h>
#include <stdatomic.h>

#include "check_main.h"
#include "embedscope/core.h"

START_TEST(test_overall_fraction_across_passes)
{
    es_progress p = {0};
    p.weight[ES_PASS_SCAN] = 0.2;
    p.weight[ES_PASS_TSQR] = 0.6; /* the other 0.2: rendering, no blocks */
    es_progress_attach(&p);
    ck_assert_double_eq(es_progress_overall(&p), 0.0);
    es_progress_begin("scan", 4);
    es_progress_step();
    es_progress_step();
    ck_assert_double_eq_tol(es_progress_overall(&p), 0.1, 1e-15);
    es_progress_step();
    es_progress_step();
    ck_assert_double_eq_tol(es_progress_overall(&p), 0.2, 1e-15);
    es_progress_begin("tsqr", 10); /* scan's share is kept when tsqr starts at 0 blocks */
    ck_assert_double_eq_tol(es_progress_overall(&p), 0.2, 1e-15);
    for (int i = 0; i < 5; i++)
        es_progress_step();
    ck_assert_double_eq_tol(es_progress_overall(&p), 0.5, 1e-15);
    for (int i = 0; i < 5; i++)
        es_progress_step();
    ck_assert_double_eq_tol(es_progress_overall(&p), 0.8, 1e-15);
    es_progress_begin("other", 3); /* no weight */
    es_progress_step();
    ck_assert_double_eq_tol(es_progress_overall(&p), 0.8, 1e-15);
    es_progress_begin("tsqr", 2); /* a second matrix's pass: counted again, capped at 1 */
    es_progress_step();
    ck_assert_double_eq_tol(es_progress_overall(&p), 1.0, 1e-15);
    ck_assert_int_eq((int)p.passes, 4);
    es_progress_attach(NULL);
    ck_assert_int_eq(es_progress_pass_index("periodogram"), ES_PASS_PERIODOGRAM);
    ck_assert_int_eq(es_progress_pass_index("nope"), -1);
    ck_assert_int_eq(es_progress_pass_index(NULL), -1);
}
END_TEST

/* The current pass began `seconds` earlier. */
static void earlier(es_progress *p, double seconds) { atomic_store(&p->started, atomic_load(&p->started) - seconds); }

/* The LAPACK pass's fraction is its time over its predicted seconds (its
 * share of predicted_s): started moved back stands for time passed. */
START_TEST(test_lapack_pass_estimated_from_time)
{
    es_progress p = {.predicted_s = 10.0};
    p.weight[ES_PASS_TSQR] = 0.5;
    p.weight[ES_PASS_LAPACK] = 0.4; /* 4 s predicted */
    bool estimated = true;
    es_progress_attach(&p);
    ck_assert_double_eq(es_progress_pass_fraction(&p, &estimated), 0.0);
    ck_assert(!estimated);
    es_progress_begin("tsqr", 2);
    es_progress_step();
    ck_assert_double_eq_tol(es_progress_pass_fraction(&p, &estimated), 0.5, 1e-15);
    ck_assert(!estimated);
    es_progress_step();
    es_progress_begin_lapack();
    ck_assert_str_eq(p.pass, "lapack");
    ck_assert_double_lt(es_progress_pass_fraction(&p, &estimated), 0.01); /* just begun */
    ck_assert(estimated);
    earlier(&p, 1.0); /* 1 s of 4 */
    ck_assert_double_eq_tol(es_progress_pass_fraction(&p, &estimated), 0.25, 0.01);
    ck_assert_double_eq_tol(es_progress_overall(&p), 0.5 + 0.4 * 0.25, 0.01);
    double before = es_progress_overall(&p);
    earlier(&p, 2.0); /* 3 s: it only grows */
    ck_assert_double_gt(es_progress_overall(&p), before);
    earlier(&p, 100.0); /* far past the prediction: held below the pass's share */
    ck_assert_double_eq(es_progress_pass_fraction(&p, &estimated), ES_PROGRESS_ESTIMATE_CAP);
    ck_assert_double_eq_tol(es_progress_overall(&p), 0.5 + 0.4 * ES_PROGRESS_ESTIMATE_CAP, 1e-15);
    ck_assert_double_lt(es_progress_overall(&p), 0.9);
    es_progress_begin("project", 1); /* it ended: its whole share */
    ck_assert_double_eq_tol(es_progress_overall(&p), 0.9, 1e-15);
    p.predicted_s = 0; /* no prediction: no estimate */
    es_progress_begin_lapack();
    ck_assert_double_eq(es_progress_pass_fraction(&p, &estimated), 0.0);
    es_progress_attach(NULL);
    ck_assert_int_eq(es_progress_pass_index("lapack"), ES_PASS_LAPACK);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("progress");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_overall_fraction_across_passes);
    tcase_add_test(tc, test_lapack_pass_estimated_from_time);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
