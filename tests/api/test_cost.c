/* The cost model's start-up calibration (cost.c), without timing anything:
 * after es_cost_calibrate every rate is finite and positive, and the values
 * rate is the measured one (timed alone on a square block), not the default it
 * used to fall back to when a difference of two timings came out negative;
 * a TSQR in chunks is predicted at the parallel TSQR's rate; observed decompositions correct the predictions
 * of their method (the median ratio of the last five), unless the rates are fixed. */
#include <check.h>
#include <math.h>

#include "check_main.h"
#include "embedscope/cost.h"

/* Every rate of r, by name, for the messages. */
static void rates_finite_and_positive(const es_rates *r)
{
    const struct { const char *name; double v; } all[] = {
        {"qr", r->qr},         {"svd", r->svd},         {"values", r->values},   {"eig", r->eig},
        {"gemm", r->gemm},     {"stream", r->stream},   {"period2", r->period2}, {"period1", r->period1},
        {"pair", r->pair},     {"render", r->render},   {"overhead", r->overhead}, {"qr_parallel", r->qr_parallel},
        {"fft", r->fft}};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        ck_assert_msg(isfinite(all[i].v) && all[i].v > 0, "rate %s = %g", all[i].name, all[i].v);
}

START_TEST(calibrated_rates_are_measured)
{
    es_rates before = es_cost_current();
    ck_assert_double_eq(before.calibration_s, 0);
    unsigned fallbacks = es_cost_calibrate();
    es_rates after = es_cost_current();
    rates_finite_and_positive(&after);
    ck_assert_msg(after.calibration_s > 0, "calibration_s %g", after.calibration_s);
    /* the values rate no longer depends on a subtraction: measured on every start */
    ck_assert_msg(after.values != before.values, "values rate left at its default %g (%u fallbacks)",
                  before.values, fallbacks);
    ck_assert_msg(after.gemm != before.gemm, "dgemm rate left at its default");
    ck_assert_msg(after.qr_parallel != before.qr_parallel, "parallel TSQR rate left at its default");
    ck_assert_uint_le(fallbacks, 13);
    /* a TSQR split into chunks (50257 x 768: 12) is predicted at the parallel rate, a short one at the single's */
    /* (both at the slowdown of the load now, which may be re-read between two predictions: retried) */
    double big_ratio = 0, small_ratio = 1;
    for (int attempt = 0; attempt < 3 && fabs(big_ratio / small_ratio - 1) > 1e-9; attempt++) {
        es_cost big = {0}, small = {0};
        es_cost_decompose(&big, ES_METHOD_VALUES, 50257, 768, 0);
        es_cost_decompose(&small, ES_METHOD_VALUES, 2048, 256, 0);
        /* per n d^2 a 768-wide TSQR costs (1 + 380 / 768) / (1 + 380 / 256) of the 256-wide probes' */
        big_ratio = big.pass_seconds[ES_PASS_TSQR] /
                    (after.qr_parallel * 50257.0 * 768 * 768 * (1 + 380.0 / 768) / (1 + 380.0 / 256));
        small_ratio = small.pass_seconds[ES_PASS_TSQR] / (after.qr * 2048.0 * 256 * 256);
    }
    ck_assert_msg(fabs(big_ratio / small_ratio - 1) < 1e-9 && big_ratio > 0, "TSQR terms %g and %g x their rates",
                  big_ratio, small_ratio);
    /* the rates are a quiet machine's: the calibration's wall times divided by the slowdown it saw */
    ck_assert_msg(after.calibration_slowdown >= 1 && isfinite(after.calibration_slowdown), "slowdown %g",
                  after.calibration_slowdown);
}
END_TEST

/* The seconds predicted for the values of an n x d block (and the request around it). */
static double predicted_values(size_t n, size_t d)
{
    es_cost c = {0};
    es_cost_decompose(&c, ES_METHOD_VALUES, n, d, 0);
    return c.seconds;
}

/* Predictions follow observed decompositions (before any calibration: the load is not read, so the
 * figures are the defaults' and exact): the median of the last five ratios of each method. */
START_TEST(observed_decompositions_correct_predictions)
{
    const size_t n = 50257, d = 768;
    double base = predicted_values(n, d), exact_base = 0;
    es_cost e = {0};
    es_cost_svd(&e, n, d);
    exact_base = e.seconds;
    /* five runs three times as long as predicted: the prediction triples */
    for (int i = 0; i < 5; i++)
        es_cost_observe(ES_METHOD_VALUES, n, d, 0, 3.0 * base);
    ck_assert_double_eq_tol(predicted_values(n, d), 3.0 * base, 1e-9 * base);
    /* another method's predictions are its own */
    es_cost e2 = {0};
    es_cost_svd(&e2, n, d);
    ck_assert_double_eq_tol(e2.seconds, exact_base, 1e-12 * exact_base);
    /* one odd run (a burst of load, 50 times as long) moves nothing: the median of the last five */
    es_cost_observe(ES_METHOD_VALUES, n, d, 0, 150.0 * base);
    ck_assert_double_eq_tol(predicted_values(n, d), 3.0 * base, 1e-9 * base);
    /* the machine got faster: after three runs at half the prediction the median follows, whatever the
     * shape the runs had (the ratio is to the model's figure for that shape) */
    double small = predicted_values(4096, 512) / 3.0;
    for (int i = 0; i < 3; i++)
        es_cost_observe(ES_METHOD_VALUES, 4096, 512, 0, 0.5 * small);
    ck_assert_double_eq_tol(predicted_values(n, d), 0.5 * base, 1e-9 * base);
    /* bounded: a model off by more than 8x is wrong, not off */
    for (int i = 0; i < 5; i++)
        es_cost_observe(ES_METHOD_EXACT, n, d, 0, 1000.0 * exact_base);
    es_cost e3 = {0};
    es_cost_svd(&e3, n, d);
    ck_assert_double_eq_tol(e3.seconds, 8.0 * exact_base, 1e-9 * exact_base);
    /* nothing from a failed or unmeasured run */
    es_cost_observe(ES_METHOD_VALUES, n, d, 0, 0.0);
    es_cost_observe(ES_METHOD_VALUES, n, d, 0, NAN);
    ck_assert_double_eq_tol(predicted_values(n, d), 0.5 * base, 1e-9 * base);
}
END_TEST

/* Fixed rates (--cost-rates fixed, the test suite's daemons) are never refreshed: the same predictions
 * on every machine whatever was computed. Forked (the fixing lasts the process). */
START_TEST(fixed_rates_ignore_observations)
{
    double base = predicted_values(50257, 768);
    es_cost_fix_rates();
    for (int i = 0; i < 5; i++)
        es_cost_observe(ES_METHOD_VALUES, 50257, 768, 0, 3.0 * base);
    ck_assert_double_eq(predicted_values(50257, 768), base);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("cost");
    TCase *observed = tcase_create("observed");
    tcase_add_test(observed, observed_decompositions_correct_predictions);
    suite_add_tcase(s, observed);
    TCase *tc = tcase_create("calibration");
    tcase_set_timeout(tc, 600); /* the calibration takes a minute and more at load 30 */
    tcase_add_test(tc, calibrated_rates_are_measured);
    suite_add_tcase(s, tc);
    TCase *fixed = tcase_create("fixed"); /* last: without CK_FORK the fixing would reach the others */
    tcase_add_test(fixed, fixed_rates_ignore_observations);
    suite_add_tcase(s, fixed);
    return s;
}

ES_CHECK_MAIN(make_suite)
