/* Overlap: two complete bases give a doubly stochastic matrix; block sums keep
 * the total; bins clamp; the blur equals the direct 2-D normalised Gaussian and
 * a closed form for a single peak; errors. */
#include "analysis/helpers.h"
#include "check_main.h"

#include <stdlib.h>

typedef struct pair {
    es_matrix *ma, *mb;
    es_svd *a, *b;
} pair;

/* Two independent complete bases of R^48. */
static pair bases(void)
{
    pair p = { .ma = gaussian(100, 48, 0.5, 21), .mb = gaussian(60, 48, 1.5, 22) };
    p.a = svd_of(p.ma, NULL, 0, ES_CENTER_COLUMNS);
    p.b = svd_of(p.mb, NULL, 0, ES_CENTER_NONE);
    return p;
}

static void pair_free(pair *p)
{
    es_svd_release(p->a);
    es_svd_release(p->b);
    es_matrix_release(p->ma);
    es_matrix_release(p->mb);
}

static es_grid *overlap(const pair *p, size_t ka, size_t kb, size_t bins, double blur)
{
    es_grid *g = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_overlap_compute(p->a, ka, p->b, kb, bins, blur, &g, &err) == 0, "%s",
                  err.message);
    return g;
}

static double row_sum(const es_grid *g, size_t i)
{
    double s = 0;
    for (size_t j = 0; j < g->cols; j++)
        s += g->values[i * g->cols + j];
    return s;
}

static double col_sum(const es_grid *g, size_t j)
{
    double s = 0;
    for (size_t i = 0; i < g->rows; i++)
        s += g->values[i * g->cols + j];
    return s;
}

START_TEST(doubly_stochastic)
{
    pair p = bases();
    es_grid *g = overlap(&p, 0, 0, 0, 0);
    ck_assert_uint_eq(g->rows, 48);
    ck_assert_uint_eq(g->cols, 48);
    for (size_t i = 0; i < 48; i++) {
        ck_assert_double_eq_tol(row_sum(g, i), 1.0, 1e-10);
        ck_assert_double_eq_tol(col_sum(g, i), 1.0, 1e-10);
        for (size_t j = 0; j < 48; j++) {
            double dot = 0;
            for (size_t t = 0; t < 48; t++)
                dot += p.a->vt[i * 48 + t] * p.b->vt[j * 48 + t];
            ck_assert_double_eq_tol(g->values[i * 48 + j], dot * dot, 1e-13);
        }
    }
    es_grid_free(g);
    /* The top 10 of a against all of b: still 10 rows summing to 1 each. */
    g = overlap(&p, 10, 0, 0, 0);
    ck_assert_uint_eq(g->rows, 10);
    for (size_t i = 0; i < 10; i++)
        ck_assert_double_eq_tol(row_sum(g, i), 1.0, 1e-10);
    es_grid_free(g);
    pair_free(&p);
}
END_TEST

/* Against itself the overlap is the identity. */
START_TEST(self_overlap_identity)
{
    pair p = bases();
    es_grid *g = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_overlap_compute(p.a, 0, p.a, 0, 0, 0, &g, &err), 0);
    for (size_t i = 0; i < 48; i++)
        for (size_t j = 0; j < 48; j++)
            ck_assert_double_eq_tol(g->values[i * 48 + j], i == j ? 1.0 : 0.0, 1e-12);
    es_grid_free(g);
    pair_free(&p);
}
END_TEST

/* 5 bins over 48 vectors (widths 9 or 10): block sums total 48 and each row
 * block sums to its width; bins > 48 clamps to the unbinned matrix. */
START_TEST(binned_sums)
{
    pair p = bases();
    es_grid *full = overlap(&p, 0, 0, 0, 0), *g = overlap(&p, 0, 0, 5, 0);
    ck_assert_uint_eq(g->rows, 5);
    ck_assert_uint_eq(g->cols, 5);
    double total = 0;
    for (size_t i = 0; i < 5; i++) {
        size_t width = g->row_edges[i + 1] - g->row_edges[i];
        ck_assert(width == 9 || width == 10);
        ck_assert_double_eq_tol(row_sum(g, i), (double)width, 1e-10);
        ck_assert_double_eq_tol(col_sum(g, i), (double)(g->col_edges[i + 1] - g->col_edges[i]),
                                1e-10);
        total += row_sum(g, i);
        for (size_t j = 0; j < 5; j++) {
            double block = 0;
            for (size_t r = g->row_edges[i]; r < g->row_edges[i + 1]; r++)
                for (size_t c = g->col_edges[j]; c < g->col_edges[j + 1]; c++)
                    block += full->values[r * 48 + c];
            ck_assert_double_eq_tol(g->values[i * 5 + j], block, 1e-13);
        }
    }
    ck_assert_double_eq_tol(total, 48.0, 1e-10);
    es_grid_free(g);
    g = overlap(&p, 0, 0, 100, 0);
    ck_assert_uint_eq(g->rows, 48);
    ck_assert_uint_eq(g->cols, 48);
    for (size_t i = 0; i < 48 * 48; i++)
        ck_assert_double_eq(g->values[i], full->values[i]);
    es_grid_free(g);
    es_grid_free(full);
    pair_free(&p);
}
END_TEST

/* Direct 2-D normalised Gaussian (|dx|, |dy| <= 4 sigma, weights renormalised
 * over the cells inside the grid) of an unblurred grid, compared cell by cell. */
static void check_blur(const es_grid *raw, const es_grid *g, double sigma)
{
    ck_assert_uint_eq(g->rows, raw->rows);
    ck_assert_uint_eq(g->cols, raw->cols);
    long reach = (long)floor(4 * sigma);
    for (long i = 0; i < (long)raw->rows; i++)
        for (long j = 0; j < (long)raw->cols; j++) {
            double acc = 0, mass = 0;
            for (long y = i - reach; y <= i + reach; y++)
                for (long x = j - reach; x <= j + reach; x++) {
                    if (y < 0 || x < 0 || y >= (long)raw->rows || x >= (long)raw->cols)
                        continue;
                    double w = exp(-(double)((y - i) * (y - i) + (x - j) * (x - j)) /
                                   (2 * sigma * sigma));
                    acc += w * raw->values[(size_t)y * raw->cols + (size_t)x];
                    mass += w;
                }
            ck_assert_double_eq_tol(g->values[(size_t)i * g->cols + (size_t)j], acc / mass, 1e-13);
        }
}

START_TEST(blur_matches_direct_convolution)
{
    pair p = bases();
    es_grid *raw = overlap(&p, 0, 20, 12, 0);   /* 12 x 12 of 48 x 20 */
    ck_assert_uint_eq(raw->rows, 12);
    ck_assert_uint_eq(raw->cols, 12);
    const double sigmas[] = { 0.5, 1.0, 1.7, 40.0 };
    for (size_t t = 0; t < sizeof sigmas / sizeof *sigmas; t++) {
        es_grid *g = overlap(&p, 0, 20, 12, sigmas[t]);
        check_blur(raw, g, sigmas[t]);
        es_grid_free(g);
    }
    /* A blur far narrower than a bin leaves the grid as it is. */
    es_grid *g = overlap(&p, 0, 20, 12, 0.2);
    for (size_t i = 0; i < 144; i++)
        ck_assert_double_eq(g->values[i], raw->values[i]);
    es_grid_free(g);
    es_grid_free(raw);
    pair_free(&p);
}
END_TEST

/* a's 48 vectors against a's first, in 6 x 1 bins: a single peak 1 at block 0.
 * Blurred with sigma 2 (window covers the grid), block i becomes the normalised
 * weight exp(-i^2/8) / sum_t exp(-(t-i)^2/8); the one-column pass changes nothing. */
START_TEST(blur_of_single_peak)
{
    pair p = bases();
    es_grid *g = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_overlap_compute(p.a, 0, p.a, 1, 6, 2.0, &g, &err), 0);
    ck_assert_uint_eq(g->rows, 6);
    ck_assert_uint_eq(g->cols, 1);
    for (int i = 0; i < 6; i++) {
        double mass = 0;
        for (int t = 0; t < 6; t++)
            mass += exp(-(double)((t - i) * (t - i)) / 8.0);
        ck_assert_double_eq_tol(g->values[i], exp(-(double)(i * i) / 8.0) / mass, 1e-13);
    }
    es_grid_free(g);
    /* One block holding everything keeps its total, 48, whatever the blur. */
    ck_assert_int_eq(es_overlap_compute(p.a, 0, p.b, 0, 1, 3.0, &g, &err), 0);
    ck_assert_uint_eq(g->rows * g->cols, 1);
    ck_assert_double_eq_tol(g->values[0], 48.0, 1e-10);
    es_grid_free(g);
    pair_free(&p);
}
END_TEST

START_TEST(bad_parameters)
{
    pair p = bases();
    es_matrix *mc = gaussian(10, 12, 1, 23);
    es_svd *c = svd_of(mc, NULL, 0, ES_CENTER_NONE);
    es_grid *g = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_overlap_compute(p.a, 0, c, 0, 0, 0, &g, &err), err, ES_E_INCOMPATIBLE, "b");
    ck_assert_ptr_nonnull(strstr(err.message, "d=48"));
    ck_assert_ptr_nonnull(strstr(err.message, "d=12"));
    ck_assert_fails(es_overlap_compute(p.a, 49, p.b, 0, 0, 0, &g, &err), err, ES_E_PARAM, "ka");
    ck_assert_fails(es_overlap_compute(p.a, 0, p.b, 49, 0, 0, &g, &err), err, ES_E_PARAM, "kb");
    ck_assert_fails(es_overlap_compute(p.a, 0, p.b, 0, 0, -1, &g, &err), err, ES_E_PARAM, "blur");
    ck_assert_fails(es_overlap_compute(p.a, 0, p.b, 0, 0, NAN, &g, &err), err, ES_E_PARAM, "blur");
    ck_assert_fails(es_overlap_compute(p.a, 0, p.b, 0, 0, INFINITY, &g, &err), err, ES_E_PARAM,
                    "blur");
    es_svd *values = values_of(mc, ES_CENTER_NONE); /* singular values only, either side */
    ck_assert_fails(es_overlap_compute(values, 0, c, 0, 0, 0, &g, &err), err, ES_E_PARAM, "method");
    ck_assert_fails(es_overlap_compute(c, 0, values, 0, 0, 0, &g, &err), err, ES_E_PARAM, "method");
    es_svd_release(values);
    ck_assert_ptr_null(g);
    es_svd_release(c);
    es_matrix_release(mc);
    pair_free(&p);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("overlap");
    TCase *tc = tcase_create("overlap");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, doubly_stochastic);
    tcase_add_test(tc, self_overlap_identity);
    tcase_add_test(tc, binned_sums);
    tcase_add_test(tc, blur_matches_direct_convolution);
    tcase_add_test(tc, blur_of_single_peak);
    tcase_add_test(tc, bad_parameters);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
