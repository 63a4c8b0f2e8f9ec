/* Progress of a tracked computation: the overall fraction weights each pass by
 * its predicted share, adds the finished passes' shares, counts a repeated pass
 * again (capped at 1) and gives unknown passes no weight. */
#include <check.h>

#include "check_main.h"
#include "embedscope/core.h"

START_TEST(test_overall_fraction_across_passes)
{
    es_progress p = {0};
    p.weight[ES_PASS_SCAN] = 0.2;
    p.weight[ES_PASS_TSQR] = 0.6; /* the other 0.2: LAPACK's calls, no blocks */
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

static Suite *make_suite(void)
{
    Suite *s = suite_create("progress");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_overall_fraction_across_passes);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
