/* Spectrum: closed-form spectra (generated Gaussian, diagonal), thresholds hit
 * exactly, and the zero matrix. */
#include "analysis/helpers.h"
#include "check_main.h"

/* Smallest m whose cumulative ratio reaches t (test-side oracle). */
static size_t count_for(const double *cum, size_t r, double t)
{
    size_t m = 0;
    while (m < r && cum[m] < t - 1e-12)
        m++;
    return m + 1;
}

/* es_gen_gaussian makes s_j = (j+1)^-decay exactly; ratios and counts follow,
 * from the exact decomposition (_i 0) and from the singular values alone (1). */
START_TEST(gaussian_closed_form)
{
    const size_t rows = 200, d = 50;
    es_matrix *m = gaussian(rows, d, 0.7, 7);
    es_svd *svd = _i ? values_of(m, ES_CENTER_NONE) : svd_of(m, NULL, 0, ES_CENTER_NONE);
    es_spectrum *sp = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_spectrum_from_svd(svd, &sp, &err), 0);
    ck_assert_uint_eq(sp->r, d);
    double total = 0, run = 0, cum[50];
    for (size_t j = 0; j < d; j++)
        total += pow((double)j + 1.0, -1.4);
    for (size_t j = 0; j < d; j++) {
        double ratio = pow((double)j + 1.0, -1.4) / total;
        cum[j] = (run += ratio);
        ck_assert_double_eq_tol(sp->s[j], pow((double)j + 1.0, -0.7), 1e-12);
        ck_assert_double_eq_tol(sp->evr[j], ratio, 1e-12);
        ck_assert_double_eq_tol(sp->cumulative[j], cum[j], 1e-12);
    }
    ck_assert_double_eq_tol(sp->cumulative[d - 1], 1.0, 1e-12);
    ck_assert_uint_eq(sp->n50, count_for(cum, d, 0.50));
    ck_assert_uint_eq(sp->n90, count_for(cum, d, 0.90));
    ck_assert_uint_eq(sp->n99, count_for(cum, d, 0.99));
    ck_assert(sp->n50 < sp->n90 && sp->n90 < sp->n99 && sp->n99 <= d);
    es_spectrum_free(sp);
    es_svd_release(svd);
    es_matrix_release(m);
}
END_TEST

/* s^2 = 50, 40, 9, 1: cumulative 0.5, 0.9, 0.99, 1 reach each threshold exactly. */
START_TEST(exact_thresholds)
{
    double x[16] = { 0 };
    x[0] = sqrt(40);
    x[5] = 3;
    x[10] = sqrt(50);
    x[15] = 1;
    es_matrix *m = matrix_of(x, 4, 4);
    es_svd *svd = svd_of(m, NULL, 0, ES_CENTER_NONE);
    es_spectrum *sp = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_spectrum_from_svd(svd, &sp, &err), 0);
    const double evr[4] = { 0.5, 0.4, 0.09, 0.01 };
    for (size_t j = 0; j < 4; j++)
        ck_assert_double_eq_tol(sp->evr[j], evr[j], 1e-14);
    ck_assert_uint_eq(sp->n50, 1);
    ck_assert_uint_eq(sp->n90, 2);
    ck_assert_uint_eq(sp->n99, 3);
    es_spectrum_free(sp);
    es_svd_release(svd);
    es_matrix_release(m);
    /* s^2 = 85, 51, 34: the first ratio is 1/2 exactly, but sqrt(85)^2 / 170
     * rounds to 0.49999999999999994; the 1e-12 slack still counts 1 component. */
    const double y[9] = { sqrt(85), 0, 0, 0, sqrt(51), 0, 0, 0, sqrt(34) };
    m = matrix_of(y, 3, 3);
    svd = svd_of(m, NULL, 0, ES_CENTER_NONE);
    ck_assert_int_eq(es_spectrum_from_svd(svd, &sp, &err), 0);
    ck_assert_double_eq_tol(sp->cumulative[0], 0.5, 1e-15);
    ck_assert_uint_eq(sp->n50, 1);
    ck_assert_uint_eq(sp->n90, 3);
    es_spectrum_free(sp);
    es_svd_release(svd);
    es_matrix_release(m);
}
END_TEST

/* A single row centred by columns is zero: ratios 0, no count reaches a threshold. */
START_TEST(zero_matrix)
{
    const double x[3] = { 1, 2, 3 };
    es_matrix *m = matrix_of(x, 1, 3);
    es_svd *svd = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    es_spectrum *sp = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_spectrum_from_svd(svd, &sp, &err), 0);
    ck_assert_uint_eq(sp->r, 1);
    ck_assert_double_eq(sp->s[0], 0);
    ck_assert_double_eq(sp->evr[0], 0);
    ck_assert_uint_eq(sp->n50 + sp->n90 + sp->n99, 0);
    es_spectrum_free(sp);
    es_spectrum_free(NULL);
    es_svd_release(svd);
    es_matrix_release(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("spectrum");
    TCase *tc = tcase_create("spectrum");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, gaussian_closed_form, 0, 2);
    tcase_add_test(tc, exact_thresholds);
    tcase_add_test(tc, zero_matrix);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
