/* Row averaging: g = 1 is the identity (bitwise, displacement exactly 0), g = n one
 * repeated mean row (displacement = the PCA radius), partial last groups, the
 * Conv1D orientation, provenance, the displacement summary against a direct
 * projection, and errors. */
#include "analysis/helpers.h"
#include "check_main.h"
#include "embedscope/positional.h"

static es_matrix *averaged(const es_matrix *m, size_t g)
{
    es_matrix *a = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_matrix_average_rows(m, "test/avg", g, &a, &err) == 0, "%s", err.message);
    ck_assert_uint_eq(a->rows, m->rows);
    ck_assert_uint_eq(a->cols, m->cols);
    ck_assert_int_eq(a->model_axis, m->model_axis);
    return a;
}

static es_averaging *summary(const es_svd *pca, const es_matrix *m, const es_matrix *a)
{
    es_averaging *s = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_averaging_compute(pca, m, a, &s, &err) == 0, "%s", err.message);
    return s;
}

/* Mean of items [a, b) of m at coordinate j, plain loop in long double. */
static double mean_ref(const es_matrix *m, size_t a, size_t b, size_t j)
{
    long double sum = 0;
    for (size_t i = a; i < b; i++)
        sum += es_matrix_item(m, i, j);
    return (double)(sum / (long double)(b - a));
}

START_TEST(g1_is_identity)
{
    es_matrix *m = gaussian(40, 6, 0.7, 5);
    es_matrix *a = averaged(m, 1);
    for (size_t i = 0; i < 40; i++)
        for (size_t j = 0; j < 6; j++) {
            double x = es_matrix_at(m, i, j), y = es_matrix_at(a, i, j);
            ck_assert(memcmp(&x, &y, sizeof x) == 0);
        }
    ck_assert_str_eq(a->id, "test/avg");
    ck_assert_str_eq(a->prov.view, "rows averaged in groups of 1 of test/g");
    ck_assert_uint_eq(strlen(a->prov.sha256), 64);
    es_svd *pca = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    es_averaging *s = summary(pca, m, a);
    ck_assert_uint_eq(s->k, 3);
    ck_assert_uint_eq(s->n, 40);
    for (size_t i = 0; i < 40; i++)
        ck_assert_double_eq(s->disp[i], 0.0);
    ck_assert_double_eq(s->mean_disp, 0.0);
    ck_assert_double_eq(s->max_disp, 0.0);
    ck_assert_double_eq(s->rel_max, 0.0);
    ck_assert(s->radius > 0);
    es_averaging_free(s);
    es_svd_release(pca);
    es_matrix_release(a);
    es_matrix_release(m);
}
END_TEST

/* g = n: every row is the column mean; the averaged rows project to the centroid,
 * so each displacement is the row's own distance from it (mean = radius). */
START_TEST(gn_is_one_mean_row)
{
    es_matrix *m = gaussian(30, 5, 0.5, 6);
    es_matrix *a = averaged(m, 30);
    for (size_t i = 0; i < 30; i++)
        for (size_t j = 0; j < 5; j++)
            ck_assert_double_eq_tol(es_matrix_at(a, i, j), mean_ref(m, 0, 30, j), 1e-15);
    es_svd *pca = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    es_averaging *s = summary(pca, m, a);
    ck_assert_double_eq_tol(s->mean_disp, s->radius, 1e-12);
    ck_assert_double_eq_tol(s->rel_mean, 1.0, 1e-12);
    for (size_t i = 0; i < 30; i++) {
        double r = 0;
        for (size_t j = 0; j < 3; j++)
            r += pow(left_of(pca, m)[i * pca->r + j] * pca->s[j], 2);
        ck_assert_double_eq_tol(s->disp[i], sqrt(r), 1e-12);
    }
    es_averaging_free(s);
    es_svd_release(pca);
    es_matrix_release(a);
    es_matrix_release(m);
}
END_TEST

/* g = 4 over 10 items: groups [0,4), [4,8) and the partial [8,10). Also a
 * provenance view chained after an existing one. */
START_TEST(partial_last_group)
{
    es_matrix *g = gaussian(10, 3, 0.2, 7), *m = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_view_rows(g, "test/rows", 0, 10, &m, &err), 0);
    es_matrix *a = averaged(m, 4);
    const size_t lo[] = { 0, 0, 0, 0, 4, 4, 4, 4, 8, 8 };
    for (size_t i = 0; i < 10; i++)
        for (size_t j = 0; j < 3; j++) {
            size_t hi = lo[i] + 4 < 10 ? lo[i] + 4 : 10;
            ck_assert_double_eq_tol(es_matrix_item(a, i, j), mean_ref(m, lo[i], hi, j), 1e-15);
        }
    ck_assert_str_eq(a->prov.view, "rows 0:10 of test/g; rows averaged in groups of 4 of test/rows");
    es_matrix_release(a);
    es_matrix_release(m);
    es_matrix_release(g);
}
END_TEST

/* Model axis rows (Conv1D [d, items]): items are the columns and are averaged as such. */
START_TEST(conv1d_orientation)
{
    double v[4 * 6];
    for (size_t i = 0; i < 24; i++)
        v[i] = sin(1.3 * (double)i) + (double)i;
    double *data = es_malloc(sizeof v);
    memcpy(data, v, sizeof v);
    es_provenance prov = { 0 };
    es_matrix *m = es_matrix_from_data("test/w", data, 4, 6, ES_AXIS_ROWS, &prov);
    ck_assert_uint_eq(es_matrix_items(m), 6);
    es_matrix *a = averaged(m, 2);
    for (size_t item = 0; item < 6; item++)
        for (size_t j = 0; j < 4; j++) {
            size_t first = item - item % 2;
            double want = (v[j * 6 + first] + v[j * 6 + first + 1]) / 2;
            ck_assert_double_eq_tol(es_matrix_at(a, j, item), want, 1e-14);
        }
    es_matrix_release(a);
    es_matrix_release(m);
}
END_TEST

/* Mean of items idx[a..b) of m at coordinate j, plain loop in long double. */
static double mean_of_list(const es_matrix *m, const size_t *idx, size_t a, size_t b, size_t j)
{
    long double sum = 0;
    for (size_t i = a; i < b; i++)
        sum += es_matrix_item(m, idx[i], j);
    return (double)(sum / (long double)(b - a));
}

/* Issue 10: rows=1: with average=3 averaged whole-matrix groups 0-2, 3-5, ... (the
 * outlier row 0 mixed into the first group). Select, then average: groups of the
 * selected rows 1-3, 4-6, 8-9 (row 7 excluded; the last group shorter), in both
 * orientations; rows outside the selection keep their values; the leaders are the
 * first row of each group, and for the other order the first selected row of each
 * whole-matrix group. */
START_TEST(select_then_average)
{
    const size_t idx[] = { 1, 2, 3, 4, 5, 6, 8, 9 }, n = 8;
    for (int orient = 0; orient < 2; orient++) {
        es_matrix *g = gaussian(10, 3, 0.2, 11), *m = NULL;
        es_err err = { 0 };
        if (orient)
            ck_assert_int_eq(es_view_transpose(g, "test/t", &m, &err), 0);
        else
            m = es_matrix_retain(g);
        es_matrix *a = NULL;
        ck_assert_msg(es_matrix_average_groups(m, NULL, idx, n, 3, "average", &a, &err) == 0, "%s", err.message);
        ck_assert_int_eq(a->model_axis, m->model_axis);
        for (size_t j = 0; j < 3; j++) {
            ck_assert_double_eq(es_matrix_item(a, 0, j), es_matrix_item(m, 0, j));
            ck_assert_double_eq(es_matrix_item(a, 7, j), es_matrix_item(m, 7, j));
            for (size_t i = 0; i < n; i++) {
                size_t lo = i - i % 3, hi = lo + 3 < n ? lo + 3 : n;
                ck_assert_double_eq_tol(es_matrix_item(a, idx[i], j), mean_of_list(m, idx, lo, hi, j), 1e-15);
            }
        }
        ck_assert_ptr_nonnull(strstr(a->prov.view, "8 selected rows from row 1 averaged in groups of 3"));
        es_matrix_release(a);
        ck_assert_fails(es_matrix_average_groups(m, NULL, idx, n, 9, "a_average", &a, &err), err, ES_E_PARAM,
                        "a_average");
        es_matrix_release(m);
        es_matrix_release(g);
    }
    size_t lead[8];
    ck_assert_uint_eq(es_average_leaders(idx, n, 3, ES_AVERAGE_SELECTED, lead), 3);
    ck_assert_uint_eq(lead[0], 1);
    ck_assert_uint_eq(lead[1], 4);
    ck_assert_uint_eq(lead[2], 8);
    ck_assert_uint_eq(es_average_leaders(idx, n, 3, ES_AVERAGE_ALL, lead), 4);   /* 0-2, 3-5, 6-8, 9 */
    ck_assert_uint_eq(lead[0], 1);
    ck_assert_uint_eq(lead[1], 3);
    ck_assert_uint_eq(lead[2], 6);
    ck_assert_uint_eq(lead[3], 9);
    ck_assert_str_eq(es_average_order_name(ES_AVERAGE_SELECTED), "select_then_average");
    ck_assert_str_eq(es_average_order_name(ES_AVERAGE_ALL), "average_then_select");
}
END_TEST

/* The summary against a direct projection with the PCA's own coordinates U S. */
START_TEST(summary_matches_direct_projection)
{
    es_matrix *m = gaussian(50, 8, 0.4, 8);
    es_matrix *a = averaged(m, 5);
    es_svd *pca = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    es_averaging *s = summary(pca, m, a);
    double sum = 0, max = 0, radius = 0;
    size_t max_row = 0;
    for (size_t i = 0; i < 50; i++) {
        double dd = 0, rr = 0;
        for (size_t j = 0; j < 3; j++) {
            double orig = left_of(pca, m)[i * pca->r + j] * pca->s[j], avg = 0;
            for (size_t t = 0; t < 8; t++)
                avg += (es_matrix_item(a, i, t) - pca->mean[t]) * pca->vt[j * 8 + t];
            dd += (avg - orig) * (avg - orig);
            rr += orig * orig;
        }
        ck_assert_double_eq_tol(s->disp[i], sqrt(dd), 1e-12);
        sum += sqrt(dd);
        radius += sqrt(rr);
        if (sqrt(dd) > max) {
            max = sqrt(dd);
            max_row = i;
        }
    }
    ck_assert_double_eq_tol(s->mean_disp, sum / 50, 1e-12);
    ck_assert_double_eq_tol(s->max_disp, max, 1e-12);
    ck_assert_uint_eq(s->max_row, max_row);
    ck_assert_double_eq_tol(s->radius, radius / 50, 1e-12);
    ck_assert_double_eq_tol(s->rel_mean, s->mean_disp / s->radius, 1e-15);
    es_averaging_free(s);
    es_svd_release(pca);
    es_matrix_release(a);
    es_matrix_release(m);
}
END_TEST

START_TEST(errors)
{
    es_matrix *m = gaussian(10, 4, 0.5, 9), *a = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_matrix_average_rows(m, "x", 0, &a, &err), err, ES_E_PARAM, "average");
    ck_assert_fails(es_matrix_average_rows(m, "x", 11, &a, &err), err, ES_E_PARAM, "average");
    ck_assert_ptr_null(a);
    a = averaged(m, 2);
    es_averaging *s = NULL;
    es_svd *raw = svd_of(m, NULL, 0, ES_CENTER_NONE);
    ck_assert_fails(es_averaging_compute(raw, m, a, &s, &err), err, ES_E_PARAM, "centering");
    es_svd_release(raw);
    es_matrix *other = gaussian(10, 5, 0.5, 9);
    es_svd *pca = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    ck_assert_fails(es_averaging_compute(pca, m, other, &s, &err), err, ES_E_INCOMPATIBLE, "average");
    ck_assert_fails(es_averaging_compute(pca, other, a, &s, &err), err, ES_E_INCOMPATIBLE, "matrix");
    es_svd *values = values_of(m, ES_CENTER_COLUMNS); /* singular values only: no PCA space */
    ck_assert_fails(es_averaging_compute(values, m, a, &s, &err), err, ES_E_PARAM, "method");
    es_svd_release(values);
    ck_assert_ptr_null(s);
    es_averaging_free(NULL);
    es_svd_release(pca);
    es_matrix_release(other);
    es_matrix_release(a);
    es_matrix_release(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("averaging");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, g1_is_identity);
    tcase_add_test(tc, gn_is_one_mean_row);
    tcase_add_test(tc, partial_last_group);
    tcase_add_test(tc, conv1d_orientation);
    tcase_add_test(tc, summary_matches_direct_projection);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, select_then_average);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
