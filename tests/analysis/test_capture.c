/* Capture: sum over a complete basis = k, values in [0, 1] and equal to a
 * plain-loop projection, self-capture is 1 then 0, baseline k/d, errors. */
#include "analysis/helpers.h"
#include "check_main.h"

/* Reference c_j = sum_{i<k} (va_i . vb_j)^2 with plain loops. */
static double capture_ref(const es_svd *a, size_t k, const es_svd *b, size_t j)
{
    double c = 0;
    for (size_t i = 0; i < k; i++) {
        double dot = 0;
        for (size_t t = 0; t < a->d; t++)
            dot += a->vt[i * a->d + t] * b->vt[j * b->d + t];
        c += dot * dot;
    }
    return c;
}

/* b has n >= d rows, so its d right vectors are a complete basis. */
START_TEST(complete_basis_sums_to_k)
{
    es_matrix *ma = gaussian(200, 64, 0.5, 11), *mb = gaussian(300, 64, 1.0, 12);
    es_svd *a = svd_of(ma, NULL, 0, ES_CENTER_COLUMNS), *b = svd_of(mb, NULL, 0, ES_CENTER_NONE);
    const size_t ks[] = { 1, 7, 30, 64 };
    for (size_t t = 0; t < sizeof ks / sizeof *ks; t++) {
        es_capture *c = NULL;
        es_err err = { 0 };
        ck_assert_int_eq(es_capture_compute(a, ks[t], b, &c, &err), 0);
        ck_assert_uint_eq(c->count, 64);
        ck_assert_uint_eq(c->d, 64);
        ck_assert_double_eq(c->baseline, (double)ks[t] / 64.0);
        double sum = 0;
        for (size_t j = 0; j < c->count; j++) {
            ck_assert(c->capture[j] >= -1e-12 && c->capture[j] <= 1 + 1e-12);
            ck_assert_double_eq_tol(c->capture[j], capture_ref(a, ks[t], b, j), 1e-12);
            sum += c->capture[j];
        }
        ck_assert_double_eq_tol(sum, (double)ks[t], 1e-10);
        ck_assert_double_eq_tol(c->sum, (double)ks[t], 1e-10);
        es_capture_free(c);
    }
    es_svd_release(a);
    es_svd_release(b);
    es_matrix_release(ma);
    es_matrix_release(mb);
}
END_TEST

/* Against itself: v_j lies in the top-k span for j < k and is orthogonal to it after. */
START_TEST(self_capture)
{
    es_matrix *m = gaussian(100, 40, 0.8, 13);
    es_svd *s = svd_of(m, NULL, 0, ES_CENTER_NONE);
    es_capture *c = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_capture_compute(s, 10, s, &c, &err), 0);
    for (size_t j = 0; j < c->count; j++)
        ck_assert_double_eq_tol(c->capture[j], j < 10 ? 1.0 : 0.0, 1e-10);
    es_capture_free(c);
    es_capture_free(NULL);
    es_svd_release(s);
    es_matrix_release(m);
}
END_TEST

START_TEST(bad_parameters)
{
    es_matrix *ma = gaussian(20, 8, 1, 14), *mb = gaussian(20, 6, 1, 15);
    es_svd *a = svd_of(ma, NULL, 0, ES_CENTER_NONE), *b = svd_of(mb, NULL, 0, ES_CENTER_NONE);
    es_capture *c = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_capture_compute(a, 2, b, &c, &err), err, ES_E_INCOMPATIBLE, "b");
    ck_assert_ptr_nonnull(strstr(err.message, "d=8"));
    ck_assert_ptr_nonnull(strstr(err.message, "d=6"));
    ck_assert_fails(es_capture_compute(a, 0, a, &c, &err), err, ES_E_PARAM, "k");
    ck_assert_fails(es_capture_compute(a, 9, a, &c, &err), err, ES_E_PARAM, "k");
    es_svd *values = values_of(ma, ES_CENTER_NONE); /* singular values only, either side */
    ck_assert_fails(es_capture_compute(values, 2, a, &c, &err), err, ES_E_PARAM, "method");
    ck_assert_fails(es_capture_compute(a, 2, values, &c, &err), err, ES_E_PARAM, "method");
    es_svd_release(values);
    ck_assert_ptr_null(c);
    es_svd_release(a);
    es_svd_release(b);
    es_matrix_release(ma);
    es_matrix_release(mb);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("capture");
    TCase *tc = tcase_create("capture");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, complete_basis_sums_to_k);
    tcase_add_test(tc, self_capture);
    tcase_add_test(tc, bad_parameters);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
