/* PCA: explained-variance ratios sum to 1, coordinates equal X V computed
 * independently, the rank-1 closed form, coordinates of another matrix in the
 * decomposition's basis (es_pca_in_basis: itself, rows shifted), and parameter
 * errors. */
#include "analysis/helpers.h"
#include "check_main.h"

/* Sum of EVR over all r components is 1, and each ratio is s_j^2 / sum s^2. */
START_TEST(evr_sums_to_one)
{
    es_matrix *m = gaussian(300, 40, 0.5, 1);
    es_svd *svd = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    es_pca *p = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_pca_from_svd(svd, m, svd->r, &p, &err), 0);
    ck_assert_uint_eq(p->k, 40);
    double total = 0, sum = 0;
    for (size_t j = 0; j < svd->r; j++)
        total += svd->s[j] * svd->s[j];
    for (size_t j = 0; j < p->k; j++) {
        sum += p->evr[j];
        ck_assert_double_eq_tol(p->evr[j], svd->s[j] * svd->s[j] / total, 1e-14);
        ck_assert_double_eq_tol(p->cumulative[j], sum, 1e-14);
        if (j > 0)
            ck_assert(p->evr[j] <= p->evr[j - 1]);
    }
    ck_assert_double_eq_tol(sum, 1.0, 1e-12);
    ck_assert_double_eq_tol(p->cumulative[p->k - 1], 1.0, 1e-12);
    es_pca_free(p);
    es_svd_release(svd);
    es_matrix_release(m);
}
END_TEST

/* Coordinates U S equal the centred selected rows times V, computed with plain loops. */
START_TEST(coords_equal_xv)
{
    size_t rows = 121, d = 30, k = 6, n = 0;
    es_matrix *m = gaussian(rows, d, 0.3, 2);
    size_t idx[64];
    for (size_t i = 1; i < rows; i += 2)
        idx[n++] = i;
    es_svd *svd = svd_of(m, idx, n, ES_CENTER_COLUMNS);
    es_pca *p = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_pca_from_svd(svd, m, k, &p, &err), 0);
    ck_assert_uint_eq(p->n, n);
    double mean[30] = { 0 }, x[64][30];
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(p->rows[i], idx[i]);
        for (size_t c = 0; c < d; c++) {
            x[i][c] = es_matrix_item(m, idx[i], c);
            mean[c] += x[i][c] / (double)n;
        }
    }
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < d; c++)
            scale = fmax(scale, fabs(x[i][c] -= mean[c]));
    ck_assert(scale > 0);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < k; j++) {
            double ref = 0;
            for (size_t c = 0; c < d; c++)
                ref += x[i][c] * svd->vt[j * d + c];
            ck_assert_double_eq_tol(p->coords[i * k + j] / scale, ref / scale, 1e-10);
        }
    es_pca_free(p);
    es_svd_release(svd);
    es_matrix_release(m);
}
END_TEST

/* The coordinates equal X V (plain loops) to 1e-12 of their largest whichever
 * way es_svd_project takes them from a tall exact decomposition: the first
 * request forms the kept scores (64 columns), a smaller k copies them, a k
 * beyond them is a pass over the items, and once the left vectors are formed
 * they come as U_k S_k. */
static void expect_xv(const es_svd *svd, const es_matrix *m, size_t k, const char *way)
{
    es_pca *p = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_pca_from_svd(svd, m, k, &p, &err), 0);
    size_t n = svd->n, d = svd->d;
    double *ref = es_malloc(n * k * sizeof *ref), scale = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < k; j++) {
            double sum = 0;
            for (size_t c = 0; c < d; c++)
                sum += (es_matrix_item(m, svd->rows[i], c) - svd->mean[c]) * svd->vt[j * d + c];
            ref[i * k + j] = sum;
            scale = fmax(scale, fabs(sum));
        }
    for (size_t i = 0; i < n * k; i++)
        worst = fmax(worst, fabs(p->coords[i] - ref[i]));
    ck_assert_msg(scale > 0 && worst <= 1e-12 * scale, "%s, k = %zu: |coords - X V| %.3g of %.3g", way, k, worst,
                  scale);
    free(ref);
    es_pca_free(p);
}

START_TEST(coords_from_what_is_held)
{
    es_matrix *m = gaussian(400, 80, 0.4, 7);
    es_svd *svd = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    ck_assert_ptr_null(svd->scores);
    expect_xv(svd, m, 10, "scores formed");
    ck_assert_ptr_nonnull(svd->scores);
    expect_xv(svd, m, 3, "scores kept");
    expect_xv(svd, m, 64, "scores kept, all their columns");
    expect_xv(svd, m, 70, "a pass over the items");
    /* formed left vectors change no bit of a reply: U_k S_k is X V_k only to rounding */
    double before5[400 * 5], before70[400 * 70], after[400 * 70];
    es_err err = { 0 };
    ck_assert_int_eq(es_svd_project(svd, m, 5, before5, &err), 0);
    ck_assert_int_eq(es_svd_project(svd, m, 70, before70, &err), 0);
    size_t ld = 0;
    ck_assert_ptr_nonnull(es_svd_left(svd, m, 70, &ld, &err));
    ck_assert_int_eq(es_svd_project(svd, m, 70, after, &err), 0);
    ck_assert_msg(memcmp(before70, after, sizeof before70) == 0, "k=70 changed once the left vectors were formed");
    ck_assert_int_eq(es_svd_project(svd, m, 5, after, &err), 0);
    ck_assert_msg(memcmp(before5, after, sizeof before5) == 0, "k=5 changed once the left vectors were formed");
    expect_xv(svd, m, 5, "after the left vectors");
    es_svd_release(svd);
    es_matrix_release(m);
}
END_TEST

/* X = a b^T: one component carries everything; coordinate i is a_i |b| times the
 * sign that makes the largest entry of v (b's entry -2) positive, i.e. -a_i |b|. */
START_TEST(rank_one_coordinates)
{
    const double a[5] = { 1, -2, 0.5, 3, 0 }, b[3] = { 0.5, -2, 1 };
    double x[15];
    for (size_t i = 0; i < 5; i++)
        for (size_t c = 0; c < 3; c++)
            x[i * 3 + c] = a[i] * b[c];
    es_matrix *m = matrix_of(x, 5, 3);
    es_svd *svd = svd_of(m, NULL, 0, ES_CENTER_NONE);
    es_pca *p = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_pca_from_svd(svd, m, 3, &p, &err), 0);
    double norm_b = sqrt(0.25 + 4 + 1);
    for (size_t i = 0; i < 5; i++) {
        ck_assert_double_eq_tol(p->coords[i * 3], -a[i] * norm_b, 1e-12);
        ck_assert_double_eq_tol(p->coords[i * 3 + 1], 0, 1e-12);
        ck_assert_double_eq_tol(p->coords[i * 3 + 2], 0, 1e-12);
    }
    ck_assert_double_eq_tol(p->evr[0], 1.0, 1e-12);
    ck_assert_double_eq_tol(p->evr[1], 0.0, 1e-24);
    ck_assert_double_eq_tol(p->cumulative[2], 1.0, 1e-12);
    es_pca_free(p);
    es_svd_release(svd);
    es_matrix_release(m);
}
END_TEST

/* k must be in 1..r. */
/* PCA on a certified top-k decomposition equals PCA on the exact one: the
 * ratios divide by ||X||^2 (the rest of the spectrum is not held). */
START_TEST(topk_matches_exact)
{
    es_matrix *m = gaussian(500, 60, 0.7, 19);
    size_t n = es_matrix_items(m), *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    es_svd *t = NULL, *e = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    es_err err = { 0 };
    ck_assert_msg(es_svd_topk(m, idx, n, ES_CENTER_COLUMNS, 8, 1e-10, &t, &err) == 0, "%s", err.message);
    ck_assert(t->cert.passed);
    es_pca *pt = NULL, *pe = NULL;
    ck_assert_int_eq(es_pca_from_svd(t, m, 8, &pt, &err), 0);
    ck_assert_int_eq(es_pca_from_svd(e, m, 8, &pe, &err), 0);
    for (size_t j = 0; j < 8; j++) {
        ck_assert_double_eq_tol(pt->evr[j], pe->evr[j], 1e-12);
        ck_assert_double_eq_tol(pt->cumulative[j], pe->cumulative[j], 1e-12);
    }
    ck_assert(pe->cumulative[7] < 0.99); /* the ratios are not of the top 8 alone */
    for (size_t i = 0; i < n * 8; i++)
        ck_assert_double_eq_tol(pt->coords[i], pe->coords[i], 1e-9 * e->s[0]);
    ck_assert_fails(es_pca_from_svd(t, m, 9, &pt, &err), err, ES_E_PARAM, "k");
    es_pca_free(pt);
    es_pca_free(pe);
    es_svd_release(t);
    es_svd_release(e);
    free(idx);
    es_matrix_release(m);
}
END_TEST

START_TEST(bad_k)
{
    es_matrix *m = gaussian(10, 4, 1, 3);
    es_svd *svd = svd_of(m, NULL, 0, ES_CENTER_NONE);
    es_pca *p = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_pca_from_svd(svd, m, 0, &p, &err), err, ES_E_PARAM, "k");
    ck_assert_fails(es_pca_from_svd(svd, m, 5, &p, &err), err, ES_E_PARAM, "k");
    es_svd *values = values_of(m, ES_CENTER_NONE); /* singular values only: no coordinates */
    ck_assert_fails(es_pca_from_svd(values, m, 1, &p, &err), err, ES_E_PARAM, "method");
    es_svd_release(values);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(es_pca_from_svd(svd, m, 4, &p, &err), 0);
    es_pca_free(p);
    es_pca_free(NULL);
    es_svd_release(svd);
    es_matrix_release(m);
}
END_TEST

/* The matrix itself in its own basis (row averaging with groups of 1) gives the
 * plain PCA coordinates, for each centring. */
START_TEST(in_basis_of_itself_is_plain_pca)
{
    es_matrix *m = gaussian(90, 12, 0.4, 7);
    const size_t idx[] = { 3, 4, 10, 11, 12, 40, 41, 60, 61, 62, 63, 89 };
    const es_centering cs[] = { ES_CENTER_NONE, ES_CENTER_COLUMNS, ES_CENTER_ROWS };
    for (size_t c = 0; c < 3; c++) {
        es_svd *svd = svd_of(m, idx, 12, cs[c]);
        es_pca *plain = NULL, *mapped = NULL;
        es_err err = { 0 };
        ck_assert_int_eq(es_pca_from_svd(svd, m, 5, &plain, &err), 0);
        ck_assert_msg(es_pca_in_basis(svd, m, 5, &mapped, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(mapped->n, 12);
        ck_assert_uint_eq(mapped->k, 5);
        for (size_t i = 0; i < 12; i++)
            ck_assert_uint_eq(mapped->rows[i], idx[i]);
        for (size_t i = 0; i < 12 * 5; i++)
            ck_assert_double_eq_tol(mapped->coords[i], plain->coords[i], 1e-12 * svd->s[0]);
        for (size_t j = 0; j < 5; j++) {
            ck_assert_double_eq(mapped->evr[j], plain->evr[j]);
            ck_assert_double_eq(mapped->cumulative[j], plain->cumulative[j]);
        }
        es_pca_free(plain);
        es_pca_free(mapped);
        es_svd_release(svd);
    }
    es_matrix_release(m);
}
END_TEST

/* Another matrix x, row i = X_i + w + a_i (the vector w and the scalar a_i added
 * to every entry): its coordinates are X's plus the shift, centred as the
 * decomposed rows were, times V_k. Uncentred and by columns (the decomposed rows'
 * mean, not x's own) the shift is w + a_i whole; by rows (each minus its own
 * mean) a_i goes and w loses its mean. Centring x by its own column mean would
 * drop w and the a_i's mean, and fail. */
START_TEST(in_basis_of_shifted_rows_closed_form)
{
    size_t rows = 40, d = 6, k = 4;
    es_matrix *m = gaussian(rows, d, 0.5, 11);
    const double w[6] = { 0.5, -1, 2, 0.25, -0.75, 1.5 };
    double *v = es_malloc(rows * d * sizeof *v), a[40];
    for (size_t i = 0; i < rows; i++) {
        a[i] = 0.1 * (double)i - 1;
        for (size_t c = 0; c < d; c++)
            v[i * d + c] = es_matrix_item(m, i, c) + w[c] + a[i];
    }
    es_matrix *x = matrix_of(v, rows, d);
    const es_centering cs[] = { ES_CENTER_NONE, ES_CENTER_COLUMNS, ES_CENTER_ROWS };
    for (size_t c = 0; c < 3; c++) {
        es_svd *svd = svd_of(m, NULL, 0, cs[c]);
        es_pca *plain = NULL, *mapped = NULL;
        es_err err = { 0 };
        ck_assert_int_eq(es_pca_from_svd(svd, m, k, &plain, &err), 0);
        ck_assert_int_eq(es_pca_in_basis(svd, x, k, &mapped, &err), 0);
        double wbar = 0;
        for (size_t col = 0; col < d; col++)
            wbar += w[col] / (double)d;
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < k; j++) {
                /* The shift of row i, centred as the decomposition's rows were: by
                 * columns the decomposed mean is X's, so w + a_i stays whole; by
                 * rows a_i and w's mean go. */
                double shift = 0;
                for (size_t col = 0; col < d; col++) {
                    double s = cs[c] == ES_CENTER_ROWS ? w[col] - wbar : w[col] + a[i];
                    shift += s * svd->vt[j * d + col];
                }
                ck_assert_double_eq_tol(mapped->coords[i * k + j], plain->coords[i * k + j] + shift, 1e-11);
            }
        es_pca_free(plain);
        es_pca_free(mapped);
        es_svd_release(svd);
    }
    es_matrix_release(x);
    free(v);
    es_matrix_release(m);
}
END_TEST

/* Errors: k outside 1..r, a values-only decomposition, another dimension or too
 * few items. */
START_TEST(in_basis_errors)
{
    es_matrix *m = gaussian(20, 5, 1, 5), *narrow = gaussian(20, 4, 1, 6), *short_ = gaussian(10, 5, 1, 6);
    es_svd *svd = svd_of(m, NULL, 0, ES_CENTER_COLUMNS), *values = values_of(m, ES_CENTER_COLUMNS);
    es_pca *p = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_pca_in_basis(svd, m, 0, &p, &err), err, ES_E_PARAM, "k");
    ck_assert_fails(es_pca_in_basis(svd, m, 6, &p, &err), err, ES_E_PARAM, "k");
    ck_assert_fails(es_pca_in_basis(values, m, 1, &p, &err), err, ES_E_PARAM, "method");
    ck_assert_fails(es_pca_in_basis(svd, narrow, 1, &p, &err), err, ES_E_INCOMPATIBLE, "average");
    ck_assert_fails(es_pca_in_basis(svd, short_, 1, &p, &err), err, ES_E_INCOMPATIBLE, "average");
    ck_assert_ptr_null(p);
    es_svd_release(svd);
    es_svd_release(values);
    es_matrix_release(m);
    es_matrix_release(narrow);
    es_matrix_release(short_);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("pca");
    TCase *tc = tcase_create("pca");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, evr_sums_to_one);
    tcase_add_test(tc, coords_equal_xv);
    tcase_add_test(tc, coords_from_what_is_held);
    tcase_add_test(tc, rank_one_coordinates);
    tcase_add_test(tc, bad_k);
    tcase_add_test(tc, topk_matches_exact);
    tcase_add_test(tc, in_basis_of_itself_is_plain_pca);
    tcase_add_test(tc, in_basis_of_shifted_rows_closed_form);
    tcase_add_test(tc, in_basis_errors);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
