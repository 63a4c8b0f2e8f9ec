/* The cost model's start-up calibration (cost.c), without timing anything:
 * after es_cost_calibrate every rate is finite and positive, and the values
 * rate is the measured one (timed alone on a square block), not the default it
 * used to fall back to when a difference of two timings came out negative;
 * a TSQR in chunks is predicted at the parallel TSQR's rate. */
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
    es_cost big = {0}, small = {0};
    es_cost_decompose(&big, ES_METHOD_VALUES, 50257, 768, 0);
    es_cost_decompose(&small, ES_METHOD_VALUES, 2048, 256, 0);
    ck_assert_double_eq_tol(big.pass_seconds[ES_PASS_TSQR], after.qr_parallel * 50257.0 * 768 * 768,
                            1e-9 * big.pass_seconds[ES_PASS_TSQR]);
    ck_assert_double_eq_tol(small.pass_seconds[ES_PASS_TSQR], after.qr * 2048.0 * 256 * 256,
                            1e-9 * small.pass_seconds[ES_PASS_TSQR]);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("cost");
    TCase *tc = tcase_create("calibration");
    tcase_set_timeout(tc, 600); /* the calibration takes a minute and more at load 30 */
    tcase_add_test(tc, calibrated_rates_are_measured);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
