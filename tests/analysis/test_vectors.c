/* Singular vectors: mass counts on hand-made vectors, left/right layout against
 * the decomposition, one-hot vectors of a diagonal matrix, side names, errors. */
#include "analysis/helpers.h"
#include "check_main.h"

START_TEST(mass_counts)
{
    double one_hot[10] = { 0 }, uniform[100], mixed[2] = { 3, -4 }, zero[4] = { 0 };
    one_hot[7] = -2.5;
    for (size_t i = 0; i < 100; i++)
        uniform[i] = 0.1;
    ck_assert_uint_eq(es_mass_count(one_hot, 10, 0.5), 1);
    ck_assert_uint_eq(es_mass_count(one_hot, 10, 0.9), 1);
    ck_assert_uint_eq(es_mass_count(uniform, 100, 0.5), 50);
    ck_assert_uint_eq(es_mass_count(uniform, 100, 0.9), 90);
    ck_assert_uint_eq(es_mass_count(uniform, 100, 1.0), 100);
    ck_assert_uint_eq(es_mass_count(mixed, 2, 0.5), 1);    /* 16 / 25 = 0.64 */
    ck_assert_uint_eq(es_mass_count(mixed, 2, 0.64), 1);
    ck_assert_uint_eq(es_mass_count(mixed, 2, 0.65), 2);
    ck_assert_uint_eq(es_mass_count(zero, 4, 0.5), 0);
    /* Geometric squares 1/2, 1/4, ...: 90 % needs 4 entries (0.9375). */
    double geo[12];
    for (size_t i = 0; i < 12; i++)
        geo[11 - i] = pow(2.0, -(double)(i + 1) / 2);
    ck_assert_uint_eq(es_mass_count(geo, 12, 0.5), 1);
    ck_assert_uint_eq(es_mass_count(geo, 12, 0.9), 4);
}
END_TEST

/* Left vectors are u's columns, right vectors vt's rows; s and counts match. */
START_TEST(layout)
{
    es_matrix *m = gaussian(30, 12, 0.5, 31);
    es_svd *svd = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    es_vectors *l = NULL, *r = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_vectors_from_svd(svd, m, ES_SIDE_LEFT, 3, &l, &err), 0);
    ck_assert_int_eq(es_vectors_from_svd(svd, m, ES_SIDE_RIGHT, 12, &r, &err), 0);
    ck_assert(l->side == ES_SIDE_LEFT && l->k == 3 && l->len == 30);
    ck_assert(r->side == ES_SIDE_RIGHT && r->k == 12 && r->len == 12);
    for (size_t j = 0; j < 3; j++) {
        ck_assert_double_eq(l->s[j], svd->s[j]);
        for (size_t i = 0; i < 30; i++)
            ck_assert_double_eq(l->values[j * 30 + i], left_of(svd, m)[i * svd->r + j]);
        ck_assert_uint_eq(l->n50[j], es_mass_count(l->values + j * 30, 30, 0.5));
        ck_assert_uint_eq(l->n90[j], es_mass_count(l->values + j * 30, 30, 0.9));
    }
    for (size_t j = 0; j < 12; j++)
        for (size_t c = 0; c < 12; c++)
            ck_assert_double_eq(r->values[j * 12 + c], svd->vt[j * 12 + c]);
    es_vectors_free(l);
    es_vectors_free(r);
    es_vectors_free(NULL);
    es_svd_release(svd);
    es_matrix_release(m);
}
END_TEST

/* A diagonal matrix with distinct entries: every vector is one-hot, counts 1 and 1. */
START_TEST(one_hot_vectors)
{
    double x[5 * 4] = { 0 };
    const double diag[4] = { 2, 5, 1, 3 };
    for (size_t i = 0; i < 4; i++)
        x[i * 4 + i] = diag[i];
    es_matrix *m = matrix_of(x, 5, 4);
    es_svd *svd = svd_of(m, NULL, 0, ES_CENTER_NONE);
    const es_side sides[2] = { ES_SIDE_LEFT, ES_SIDE_RIGHT };
    for (size_t t = 0; t < 2; t++) {
        es_vectors *v = NULL;
        es_err err = { 0 };
        ck_assert_int_eq(es_vectors_from_svd(svd, m, sides[t], 4, &v, &err), 0);
        for (size_t j = 0; j < 4; j++) {
            ck_assert_uint_eq(v->n50[j], 1);
            ck_assert_uint_eq(v->n90[j], 1);
        }
        ck_assert_double_eq_tol(v->s[0], 5, 1e-14);
        es_vectors_free(v);
    }
    es_svd_release(svd);
    es_matrix_release(m);
}
END_TEST

START_TEST(sides_and_errors)
{
    es_matrix *m = gaussian(6, 8, 1, 32);
    es_svd *svd = svd_of(m, NULL, 0, ES_CENTER_NONE);
    es_vectors *v = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_vectors_from_svd(svd, m, ES_SIDE_LEFT, 0, &v, &err), err, ES_E_PARAM, "k");
    ck_assert_fails(es_vectors_from_svd(svd, m, ES_SIDE_RIGHT, 7, &v, &err), err, ES_E_PARAM, "k");
    es_svd *values = values_of(m, ES_CENTER_NONE); /* singular values only: neither side */
    ck_assert_fails(es_vectors_from_svd(values, m, ES_SIDE_RIGHT, 1, &v, &err), err, ES_E_PARAM, "method");
    ck_assert_fails(es_vectors_from_svd(values, m, ES_SIDE_LEFT, 1, &v, &err), err, ES_E_PARAM, "method");
    es_svd_release(values);
    ck_assert_ptr_null(v);
    es_svd_release(svd);
    es_matrix_release(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("vectors");
    TCase *tc = tcase_create("vectors");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, mass_counts);
    tcase_add_test(tc, layout);
    tcase_add_test(tc, one_hot_vectors);
    tcase_add_test(tc, sides_and_errors);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
