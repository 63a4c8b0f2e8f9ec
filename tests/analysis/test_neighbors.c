/* Exact nearest neighbours: rankings worked out by hand (points on a line and on a
 * circle), ties to the lower index, the query left out, k beyond the candidates,
 * zero rows, the block reading of model-space items (more than one block) against
 * the in-memory variant, euclidean distances free of cancellation, and errors.
 * Real GPT-2 rankings are compared with numpy in tests/http/test_neighbors.py. */
#include "analysis/helpers.h"
#include "check_main.h"

static size_t *iota(size_t n)
{
    size_t *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    return idx;
}

/* Points 0, 1, 3, 6, 10 on a line (2-D, y = 0): from x = 3 the distances are 3, 2, 3, 7
 * (rows 0, 1, 3, 4); nearest first with the tie 0 / 3 to the lower row. */
START_TEST(euclidean_on_a_line)
{
    const double pts[] = { 0, 0, 1, 0, 3, 0, 6, 0, 10, 0 };
    es_matrix *m = matrix_of(pts, 5, 2);
    size_t *idx = iota(5);
    es_neighbors *nb = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_neighbors_items(m, 2, idx, 5, ES_METRIC_EUCLIDEAN, 10, &nb, &err), 0);
    ck_assert_uint_eq(nb->k, 4);
    const size_t want[] = { 1, 0, 3, 4 };
    const double dist[] = { 2, 3, 3, 7 };
    for (size_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(nb->rows[i], want[i]);
        ck_assert_double_eq(nb->score[i], dist[i]);
    }
    es_neighbors_free(nb);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* Unit vectors at 0, 10, 20, 90, 180 degrees and a zero row: from 0 degrees the cosines
 * are cos 10, cos 20, 0 (90 degrees), 0 (the zero row, lower index wins the tie), -1. */
START_TEST(cosine_on_a_circle)
{
    const double r = acos(-1) / 180;
    const double pts[] = { 1, 0, cos(10 * r), sin(10 * r), 0, 0, cos(20 * r), sin(20 * r), 0, 1, -1, 0 };
    es_matrix *m = matrix_of(pts, 6, 2);
    size_t *idx = iota(6);
    es_neighbors *nb = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_neighbors_items(m, 0, idx, 6, ES_METRIC_COSINE, 5, &nb, &err), 0);
    const size_t want[] = { 1, 3, 2, 4, 5 };
    ck_assert_uint_eq(nb->k, 5);
    for (size_t i = 0; i < 5; i++)
        ck_assert_uint_eq(nb->rows[i], want[i]);
    ck_assert_double_eq_tol(nb->score[0], cos(10 * r), 1e-15);
    ck_assert_double_eq_tol(nb->score[1], cos(20 * r), 1e-15);
    ck_assert_double_eq(nb->score[2], 0.0);
    ck_assert_double_eq_tol(nb->score[4], -1.0, 1e-15);
    es_neighbors_free(nb);
    /* k = 2: the first two of the same ranking. */
    ck_assert_int_eq(es_neighbors_items(m, 0, idx, 6, ES_METRIC_COSINE, 2, &nb, &err), 0);
    ck_assert_uint_eq(nb->k, 2);
    ck_assert_uint_eq(nb->rows[1], 3);
    es_neighbors_free(nb);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* 3000 rows (many blocks) of a seeded Gaussian: reading in blocks gives the same
 * neighbours and scores as scoring the copied rows at once; a query outside the
 * selection (every other row) is allowed and never among the answers. The k best
 * (a heap) and the whole ranking (k = n) both; for cosine, also with the rows'
 * norms measured by an earlier cosine?row=i of the selection (kept, derived.c)
 * and with them measured here and kept: the same bits each time. */
START_TEST(blocks_equal_one_pass)
{
    es_matrix *m = gaussian(3000, 40, 0.3, 7);
    size_t n = 1500, *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = 2 * i;
    double *x = es_matrix_items_copy(m, idx, n);
    size_t query_row = 1001; /* odd: not selected */
    double *q = es_matrix_items_copy(m, &query_row, 1);
    for (int metric = ES_METRIC_COSINE; metric <= ES_METRIC_EUCLIDEAN; metric++)
        for (int round = 0; round < 3; round++) {
            size_t k = round == 1 ? n : 25;
            es_neighbors *a = NULL, *b = NULL;
            es_err err = { 0 };
            if (round == 2 && metric == ES_METRIC_COSINE) { /* norms kept by the cosine row: used */
                double *sim = NULL;
                ck_assert_int_eq(es_cosine_row(m, 3, idx, n, ES_CENTER_NONE, &sim, &err), 0);
                free(sim);
            }
            ck_assert_int_eq(es_neighbors_items(m, query_row, idx, n, (es_metric)metric, k, &a, &err), 0);
            ck_assert_int_eq(es_neighbors_among(x, idx, n, 40, q, query_row, (es_metric)metric, k, &b, &err), 0);
            ck_assert_uint_eq(a->k, k);
            for (size_t i = 0; i < k; i++) {
                ck_assert_uint_eq(a->rows[i], b->rows[i]);
                ck_assert_double_eq(a->score[i], b->score[i]);
                ck_assert_uint_eq(a->rows[i] % 2, 0);
                if (i)
                    ck_assert(metric == ES_METRIC_COSINE ? a->score[i] <= a->score[i - 1] : a->score[i] >= a->score[i - 1]);
            }
            es_neighbors_free(a);
            es_neighbors_free(b);
        }
    free(q);
    free(x);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* Points 1e8 + 1e-4 apart: |x|^2 + |q|^2 - 2 x.q loses every digit of the distance,
 * the direct sum keeps it (the differences are exact in double). */
START_TEST(euclidean_without_cancellation)
{
    const double pts[] = { 1e8, 1e8, 1e8 + 1.5e-4, 1e8, 1e8, 1e8 + 0.5e-4 };
    es_matrix *m = matrix_of(pts, 3, 2);
    size_t *idx = iota(3);
    es_neighbors *nb = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_neighbors_items(m, 0, idx, 3, ES_METRIC_EUCLIDEAN, 2, &nb, &err), 0);
    ck_assert_uint_eq(nb->rows[0], 2);
    ck_assert_uint_eq(nb->rows[1], 1);
    ck_assert_double_eq(nb->score[0], (1e8 + 0.5e-4) - 1e8);
    ck_assert_double_eq(nb->score[1], (1e8 + 1.5e-4) - 1e8);
    es_neighbors_free(nb);
    free(idx);
    es_matrix_release(m);
}
END_TEST

START_TEST(errors)
{
    const double pts[] = { 1, 0, 0, 1 };
    es_matrix *m = matrix_of(pts, 2, 2);
    size_t *idx = iota(2);
    const size_t outside[] = { 0, 5 };
    es_neighbors *nb = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_neighbors_items(m, 2, idx, 2, ES_METRIC_COSINE, 1, &nb, &err), err, ES_E_PARAM, "row");
    ck_assert_fails(es_neighbors_items(m, 0, idx, 0, ES_METRIC_COSINE, 1, &nb, &err), err, ES_E_PARAM, "rows");
    ck_assert_fails(es_neighbors_items(m, 0, outside, 2, ES_METRIC_COSINE, 1, &nb, &err), err, ES_E_PARAM, "rows");
    ck_assert_fails(es_neighbors_items(m, 0, idx, 2, ES_METRIC_COSINE, 0, &nb, &err), err, ES_E_PARAM, "k");
    ck_assert_fails(es_neighbors_among(pts, idx, 2, 2, pts, 0, ES_METRIC_COSINE, 0, &nb, &err), err, ES_E_PARAM, "k");
    ck_assert_ptr_null(nb);
    /* Only the query selected: no candidates, an empty answer. */
    ck_assert_int_eq(es_neighbors_items(m, 0, idx, 1, ES_METRIC_COSINE, 3, &nb, &err), 0);
    ck_assert_uint_eq(nb->k, 0);
    es_neighbors_free(nb);
    es_neighbors_free(NULL);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* Subnormal rows are finite data: integer multiples of the smallest double
 * (5e-324, exact) along (3,4), (4,3), (0,1), (1,0), (-3,-4) have the cosines of
 * the integers: 24/25, 4/5, 3/5, -1 from row 0, as for the same rows at scale 1.
 * Without the scaling the norms' product underflows (0/0 or infinities). */
START_TEST(cosine_of_subnormal_rows)
{
    const double t = 4.9406564584124654e-324;
    const double pts[] = { 3 * t, 4 * t, 4 * t, 3 * t, 0, 1 * t, 1 * t, 0, -3 * t, -4 * t };
    es_matrix *m = matrix_of(pts, 5, 2);
    size_t *idx = iota(5);
    es_neighbors *nb = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_neighbors_items(m, 0, idx, 5, ES_METRIC_COSINE, 4, &nb, &err), 0);
    const size_t want[] = { 1, 2, 3, 4 };
    const double cosines[] = { 24.0 / 25, 4.0 / 5, 3.0 / 5, -1 };
    for (size_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(nb->rows[i], want[i]);
        ck_assert_double_eq_tol(nb->score[i], cosines[i], 1e-15);
    }
    es_neighbors_free(nb);
    free(idx);
    es_matrix_release(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("neighbors");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, euclidean_on_a_line);
    tcase_add_test(tc, cosine_on_a_circle);
    tcase_add_test(tc, cosine_of_subnormal_rows);
    tcase_add_test(tc, blocks_equal_one_pass);
    tcase_add_test(tc, euclidean_without_cancellation);
    tcase_add_test(tc, errors);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
