/* Row-norm outliers: median / MAD by hand on small matrices (odd and even counts),
 * selections, constant-norm sinusoidal rows flag nothing, and parameter errors.
 * The flagged positions of real GPT-2 / GPT-1 are compared with numpy goldens in
 * test_golden_positional.c. */
#include "analysis/helpers.h"
#include "check_main.h"
#include "embedscope/positional.h"

/* n x 2 matrix whose row i is (norms[i] * 0.6, norms[i] * 0.8): norm exactly norms[i]
 * up to one rounding. */
static es_matrix *rows_with_norms(const double *norms, size_t n)
{
    double *v = es_malloc(2 * n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        v[2 * i] = 0.6 * norms[i];
        v[2 * i + 1] = 0.8 * norms[i];
    }
    es_matrix *m = matrix_of(v, n, 2);
    free(v);
    return m;
}

static size_t *iota(size_t n)
{
    size_t *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    return idx;
}

/* norms 1, 2, 3, 4, 100: median 3, deviations 2 1 0 1 97, MAD 1, scale 1.4826,
 * scores 1.349, 0.674, 0, 0.674, 65.4. */
START_TEST(odd_count_by_hand)
{
    const double norms[] = { 1, 2, 3, 4, 100 };
    es_matrix *m = rows_with_norms(norms, 5);
    size_t *idx = iota(5);
    es_outliers *o = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_outliers_compute(m, idx, 5, ES_OUTLIER_THRESHOLD, &o, &err), 0);
    ck_assert_double_eq_tol(o->median, 3, 1e-14);
    ck_assert_double_eq_tol(o->mad, 1, 1e-14);
    ck_assert_double_eq_tol(o->scale, 1.4826, 1e-14);
    const double want[] = { 2 / 1.4826, 1 / 1.4826, 0, 1 / 1.4826, 97 / 1.4826 };
    for (size_t i = 0; i < 5; i++) {
        ck_assert_double_eq_tol(o->norm[i], norms[i], 1e-13);
        ck_assert_double_eq_tol(o->score[i], want[i], 1e-12);
        ck_assert_uint_eq(o->rows[i], i);
    }
    ck_assert_uint_eq(o->n_flagged, 1);
    ck_assert_uint_eq(o->flagged[0], 4);
    es_outliers_free(o);
    /* Threshold 1: 1.349 > 1 flags row 0 too; 0.674 does not. */
    ck_assert_int_eq(es_outliers_compute(m, idx, 5, 1.0, &o, &err), 0);
    ck_assert_uint_eq(o->n_flagged, 2);
    ck_assert_uint_eq(o->flagged[0], 0);
    ck_assert_uint_eq(o->flagged[1], 4);
    ck_assert_double_eq(o->threshold, 1.0);
    es_outliers_free(o);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* norms 1, 2, 3, 4: median 2.5 (mean of the middle two), deviations 1.5 .5 .5 1.5,
 * MAD 1 (again the mean of the middle two). */
START_TEST(even_count_by_hand)
{
    const double norms[] = { 4, 1, 3, 2 };
    es_matrix *m = rows_with_norms(norms, 4);
    size_t *idx = iota(4);
    es_outliers *o = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_outliers_compute(m, idx, 4, ES_OUTLIER_THRESHOLD, &o, &err), 0);
    ck_assert_double_eq_tol(o->median, 2.5, 1e-14);
    ck_assert_double_eq_tol(o->mad, 1, 1e-14);
    ck_assert_uint_eq(o->n_flagged, 0);
    es_outliers_free(o);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* A selection: only the chosen items count, flags carry item indices. */
START_TEST(selection_reports_item_indices)
{
    const double norms[] = { 50, 1, 1.1, 0.9, 1.05, 0.95, 20 };
    es_matrix *m = rows_with_norms(norms, 7);
    const size_t idx[] = { 1, 2, 3, 4, 5, 6 };   /* item 0 not selected */
    es_outliers *o = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_outliers_compute(m, idx, 6, ES_OUTLIER_THRESHOLD, &o, &err), 0);
    ck_assert_uint_eq(o->n, 6);
    ck_assert_double_eq_tol(o->median, (1 + 1.05) / 2, 1e-14);
    ck_assert_uint_eq(o->n_flagged, 1);
    ck_assert_uint_eq(o->flagged[0], 6);
    es_outliers_free(o);
    es_matrix_release(m);
}
END_TEST

/* Sinusoidal rows all have norm sqrt(d/2): rounding noise must not be flagged. */
START_TEST(sinusoidal_flags_nothing)
{
    es_matrix *m = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_gen_sinusoidal("test/pe", 512, 64, 10000, &m, &err), 0);
    size_t *idx = iota(512);
    es_outliers *o = NULL;
    ck_assert_int_eq(es_outliers_compute(m, idx, 512, ES_OUTLIER_THRESHOLD, &o, &err), 0);
    ck_assert_double_eq_tol(o->median, sqrt(32.0), 1e-12);
    ck_assert(o->mad < 1e-13);
    ck_assert_uint_eq(o->n_flagged, 0);
    es_outliers_free(o);
    free(idx);
    es_matrix_release(m);
}
END_TEST

START_TEST(errors)
{
    const double norms[] = { 1, 2 };
    es_matrix *m = rows_with_norms(norms, 2);
    const size_t idx[] = { 0, 1 };
    es_outliers *o = NULL;
    es_err err = { 0 };
    const double bad[] = { 0, -1, NAN, INFINITY };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_fails(es_outliers_compute(m, idx, 2, bad[i], &o, &err), err, ES_E_PARAM,
                        "threshold");
    ck_assert_fails(es_outliers_compute(m, idx, 0, 3.5, &o, &err), err, ES_E_PARAM, "rows");
    ck_assert_ptr_null(o);
    es_outliers_free(NULL);
    es_matrix_release(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("outliers");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, odd_count_by_hand);
    tcase_add_test(tc, even_count_by_hand);
    tcase_add_test(tc, selection_reports_item_indices);
    tcase_add_test(tc, sinusoidal_flags_nothing);
    tcase_add_test(tc, errors);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
