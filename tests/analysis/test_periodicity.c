/* Periodicity: single sinusoids (integer and non-integer bins) recovered exactly,
 * the Parseval peak share, a single-frequency matrix through the SVD (with a row
 * step), a synthetic helix with known period and turns, and errors. */
#include "analysis/helpers.h"
#include "check_main.h"
#include "embedscope/positional.h"

#define TWO_PI 6.283185307179586476925286766559

/* Relative closeness. */
static void ck_rel(double got, double want, double rel)
{
    ck_assert_msg(fabs(got - want) <= rel * fabs(want), "got %.15g want %.15g", got, want);
}

/* x_t = amp cos(2 pi f t / n + phase) + offset. */
static double *sinusoid(size_t n, double f, double amp, double phase, double offset)
{
    double *x = es_malloc(n * sizeof *x);
    for (size_t t = 0; t < n; t++)
        x[t] = amp * cos(TWO_PI * f * (double)t / (double)n + phase) + offset;
    return x;
}

START_TEST(pure_sinusoid_non_integer_bin)
{
    const double fs[] = { 7.3, 2.71, 41.5, 1.25 };
    for (size_t c = 0; c < sizeof fs / sizeof *fs; c++) {
        double *x = sinusoid(500, fs[c], 3, 0.4, 2);
        es_period p;
        es_err err = { 0 };
        ck_assert_int_eq(es_period_estimate(x, 500, 1, 2.0, &p, &err), 0);
        ck_rel(p.cycles, fs[c], 1e-8);
        ck_rel(p.period, 500 * 2.0 / fs[c], 1e-8);    /* rows two positions apart */
        ck_assert_uint_eq(p.peak_bin, (size_t)lround(fs[c]));
        ck_assert(p.peak_share > 0.75 && p.peak_share <= 1 + 1e-12);
        free(x);
    }
}
END_TEST

/* An integer-bin sinusoid has all its variance in one bin: share 1 (Parseval). A
 * sum of two with variances 9/2 and 1/2 at distant bins: 0.9 at the stronger. */
START_TEST(peak_share_parseval)
{
    double *x = sinusoid(256, 12, 1.5, 1.0, -4);
    es_period p;
    es_err err = { 0 };
    ck_assert_int_eq(es_period_estimate(x, 256, 1, 1.0, &p, &err), 0);
    ck_assert_uint_eq(p.peak_bin, 12);
    ck_assert_double_eq_tol(p.peak_share, 1.0, 1e-12);
    ck_assert_double_eq_tol(p.cycles, 12, 1e-8);
    double *y = sinusoid(256, 40, 1, 0.2, 0);
    for (size_t t = 0; t < 256; t++)
        x[t] = 3 * cos(TWO_PI * 12 * (double)t / 256) + y[t];
    ck_assert_int_eq(es_period_estimate(x, 256, 1, 1.0, &p, &err), 0);
    ck_assert_double_eq_tol(p.peak_share, 0.9, 1e-12);
    /* Strided reading: the same curve stored every third double. */
    double *z = es_calloc(3 * 256, sizeof *z);
    for (size_t t = 0; t < 256; t++)
        z[3 * t] = x[t];
    es_period q;
    ck_assert_int_eq(es_period_estimate(z, 256, 3, 1.0, &q, &err), 0);
    ck_assert_double_eq(q.cycles, p.cycles);
    ck_assert_double_eq(q.peak_share, p.peak_share);
    /* A constant curve has no period. */
    for (size_t t = 0; t < 256; t++)
        x[t] = 2.5;
    ck_assert_int_eq(es_period_estimate(x, 256, 1, 1.0, &p, &err), 0);
    ck_assert_uint_eq(p.peak_bin, 0);
    ck_assert_double_eq(p.period, 0);
    free(x);
    free(y);
    free(z);
}
END_TEST

/* n x d matrix with row p = (a cos(w p), a sin(w p), b cos(w3 p), 0, ...). */
static es_matrix *helix_matrix(size_t n, size_t d, double w, double a, double w3, double b)
{
    double *v = es_calloc(n * d, sizeof *v);
    for (size_t p = 0; p < n; p++) {
        v[p * d] = a * cos(w * (double)p);
        v[p * d + 1] = a * sin(w * (double)p);
        v[p * d + 2] = b * cos(w3 * (double)p);
    }
    es_matrix *m = matrix_of(v, n, d);
    free(v);
    return m;
}

/* Rows p: [cos(w p), sin(w p), 0, ...] with 2 pi / w = 37.3 positions (non-integer
 * bins): every component of the centred and uncentred decomposition is a sinusoid
 * of that period; a row step of 2 keeps the period in positions. */
START_TEST(single_frequency_matrix)
{
    const double period = 37.3, w = TWO_PI / period;
    es_matrix *m = helix_matrix(400, 5, w, 1, 0, 0);
    for (int c = 0; c < 2; c++) {
        es_svd *s = svd_of(m, NULL, 0, c ? ES_CENTER_COLUMNS : ES_CENTER_NONE);
        es_periodicity *p = NULL;
        es_err err = { 0 };
        ck_assert_msg(es_periodicity_from_svd(s, 2, &p, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(p->m, 2);
        ck_assert_int_eq(p->step, 1);
        for (size_t j = 0; j < 2; j++)
            ck_rel(p->components[j].period, period, 1e-6);
        es_periodicity_free(p);
        es_svd_release(s);
    }
    size_t idx[200];
    for (size_t i = 0; i < 200; i++)
        idx[i] = 2 * i + 1;
    es_svd *s = svd_of(m, idx, 200, ES_CENTER_COLUMNS);
    es_periodicity *p = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_periodicity_from_svd(s, 2, &p, &err), 0);
    ck_assert_int_eq(p->step, 2);
    for (size_t j = 0; j < 2; j++)
        ck_rel(p->components[j].period, period, 1e-6);
    es_periodicity_free(p);
    es_svd_release(s);
    es_matrix_release(m);
}
END_TEST

/* A helix of T = 7 whole turns over n = 360 rows (period 360/7) riding on a slower,
 * larger third axis (one cycle, amplitude 3): component 0 is that axis, components
 * 1-2 the circle (a degenerate pair, so any rotation of it), whose periods match and
 * whose angle advances by exactly w per row: turns = (n - 1) w / 2 pi = 7 * 359/360. */
START_TEST(helix_turns)
{
    const size_t n = 360, turns = 7;
    const double w = TWO_PI * (double)turns / (double)n;
    es_matrix *m = helix_matrix(n, 6, w, 1, TWO_PI / (double)n, 3);
    es_svd *s = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    es_periodicity *p = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_periodicity_from_svd(s, 3, &p, &err), 0);
    ck_assert_uint_eq(p->turn_plane[0], 1);
    ck_assert_uint_eq(p->turn_plane[1], 2);
    ck_rel(p->turns, (double)turns * (double)(n - 1) / (double)n, 1e-6);
    ck_rel(p->components[0].period, (double)n, 1e-6);
    ck_rel(p->components[1].period, (double)n / (double)turns, 1e-6);
    ck_rel(p->components[2].period, (double)n / (double)turns, 1e-6);
    ck_assert_double_eq_tol(p->components[1].peak_share, 1.0, 1e-9);
    es_periodicity_free(p);
    /* m = 1 still uses the top 3 components for the turns. */
    ck_assert_int_eq(es_periodicity_from_svd(s, 1, &p, &err), 0);
    ck_assert_uint_eq(p->m, 1);
    ck_rel(p->turns, (double)turns * (double)(n - 1) / (double)n, 1e-6);
    es_periodicity_free(p);
    es_svd_release(s);
    es_matrix_release(m);
}
END_TEST

START_TEST(errors)
{
    es_matrix *m = helix_matrix(50, 4, 0.3, 1, 0.1, 2);
    es_svd *s = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    es_periodicity *p = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_periodicity_from_svd(s, 0, &p, &err), err, ES_E_PARAM, "k");
    ck_assert_fails(es_periodicity_from_svd(s, 5, &p, &err), err, ES_E_PARAM, "k");
    es_svd_release(s);
    const size_t uneven[] = { 0, 1, 2, 4, 5, 6 };
    s = svd_of(m, uneven, 6, ES_CENTER_COLUMNS);
    ck_assert_fails(es_periodicity_from_svd(s, 1, &p, &err), err, ES_E_PARAM, "rows");
    es_svd_release(s);
    const size_t three[] = { 0, 1, 2 };
    s = svd_of(m, three, 3, ES_CENTER_NONE);
    ck_assert_fails(es_periodicity_from_svd(s, 1, &p, &err), err, ES_E_PARAM, "rows");
    ck_assert_ptr_null(p);
    es_svd_release(s);
    es_period q;
    const double x[3] = { 1, 2, 3 };
    ck_assert_fails(es_period_estimate(x, 3, 1, 1.0, &q, &err), err, ES_E_PARAM, "rows");
    es_periodicity_free(NULL);
    es_matrix_release(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("periodicity");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, pure_sinusoid_non_integer_bin);
    tcase_add_test(tc, peak_share_parseval);
    tcase_add_test(tc, single_frequency_matrix);
    tcase_add_test(tc, helix_turns);
    tcase_add_test(tc, errors);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
