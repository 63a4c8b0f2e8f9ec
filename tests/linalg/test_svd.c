/* Thin SVD: every factorisation is checked against values the test computes on its
 * own (naive loops, closed-form spectra from Householder constructions, numpy
 * goldens for GPT-2's W_pos), never against the library's own error fields alone. */
#include <cblas.h>
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "linalg/internal.h"
#include "embedscope/linalg.h"
#include "embedscope/rowsel.h"

#define TOL 1e-12

/* Deterministic uniform numbers in [-1, 1) (xorshift64). */
static double uniform(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (double)(*state >> 11) / 4503599627370496.0 - 1.0; /* 2^52 */
}

static double *random_data(size_t n, size_t d, uint64_t seed)
{
    double *x = es_malloc(n * d * sizeof *x);
    for (size_t i = 0; i < n * d; i++)
        x[i] = uniform(&seed);
    return x;
}

/* A matrix owning a copy of data (rows x cols). */
static es_matrix *matrix_of(const double *data, size_t rows, size_t cols, es_axis axis)
{
    double *copy = es_malloc(rows * cols * sizeof *copy);
    memcpy(copy, data, rows * cols * sizeof *copy);
    es_provenance prov = {.source = "test", .sha256 = "0123"};
    return es_matrix_from_data("test/m", copy, rows, cols, axis, &prov);
}

static size_t *iota(size_t n)
{
    size_t *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    return idx;
}

static es_svd *svd_ok(const es_matrix *m, const size_t *idx, size_t n, es_centering c)
{
    es_svd *s = NULL;
    es_err err = {0};
    ck_assert_msg(es_svd_compute(m, idx, n, c, &s, &err) == 0, "svd failed: %s", err.message);
    return s;
}

/* The left vectors, formed on demand; the test fails if they cannot be. */
static const double *left_of(const es_svd *s, const es_matrix *m)
{
    es_err err = {0};
    size_t ld = 0;
    const double *u = es_svd_left(s, m, s->r, &ld, &err);
    ck_assert_uint_eq(ld, s->r);
    ck_assert_msg(u != NULL, "left vectors: %s", err.message);
    ck_assert_ptr_eq(es_svd_left(s, m, s->r, &ld, &err), u); /* formed once, then kept */
    return u;
}

static double frob2(const double *x, size_t n)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    return ss;
}

/* Every invariant of a decomposition of the n x d block x (already centred),
 * computed here with plain loops. */
static void check_factorisation(const es_svd *s, const es_matrix *m, const double *x, size_t n, size_t d)
{
    ck_assert_uint_eq(s->n, n);
    ck_assert_uint_eq(s->d, d);
    ck_assert_uint_eq(s->r, n < d ? n : d);
    size_t r = s->r;
    double xx = frob2(x, n * d);
    const double *u = left_of(s, m);

    /* residual ||X - U S Vt|| / ||X|| */
    double res = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < d; k++) {
            double v = x[i * d + k];
            for (size_t j = 0; j < r; j++)
                v -= u[i * r + j] * s->s[j] * s->vt[j * d + k];
            res += v * v;
        }
    double rel = xx > 0 ? sqrt(res / xx) : sqrt(res);
    ck_assert_msg(rel < TOL, "residual %.3g", rel);
    ck_assert_msg(s->recon_error < TOL && fabs(s->recon_error - rel) < TOL, "recon_error %.3g vs %.3g",
                  s->recon_error, rel);

    /* orthonormal right vectors; left vectors too where s_j is not negligible */
    double worst_v = 0;
    for (size_t a = 0; a < r; a++)
        for (size_t b = 0; b < r; b++) {
            double g = 0;
            for (size_t k = 0; k < d; k++)
                g += s->vt[a * d + k] * s->vt[b * d + k];
            worst_v = fmax(worst_v, fabs(g - (a == b)));
            if (s->s[a] > 1e-8 * s->s[0] && s->s[b] > 1e-8 * s->s[0]) {
                double h = 0;
                for (size_t i = 0; i < n; i++)
                    h += u[i * r + a] * u[i * r + b];
                ck_assert_msg(fabs(h - (a == b)) < TOL, "U^T U [%zu,%zu] = %.17g", a, b, h);
            }
        }
    ck_assert_msg(worst_v < TOL, "V^T V - I = %.3g", worst_v);
    ck_assert_msg(fabs(s->orth_error - worst_v) < TOL, "orth_error %.3g vs %.3g", s->orth_error, worst_v);

    /* sorted, non-negative; sum of squares equals ||X||^2 */
    double ss = 0;
    for (size_t j = 0; j < r; j++) {
        ck_assert(s->s[j] >= 0);
        if (j)
            ck_assert_msg(s->s[j] <= s->s[j - 1], "s[%zu] > s[%zu]", j, j - 1);
        ss += s->s[j] * s->s[j];
    }
    ck_assert_msg(fabs(ss - xx) <= TOL * xx, "sum s^2 %.17g vs ||X||^2 %.17g", ss, xx);
    ck_assert_msg(fabs(s->total_ss - xx) <= TOL * xx, "total_ss %.17g vs %.17g", s->total_ss, xx);

    /* sign convention: the largest-|x| entry (first on ties) of each right vector is positive */
    for (size_t j = 0; j < r; j++) {
        const double *v = s->vt + j * d;
        size_t best = 0;
        for (size_t k = 1; k < d; k++)
            if (fabs(v[k]) > fabs(v[best]))
                best = k;
        ck_assert_msg(v[best] > 0, "vector %zu: largest entry %zu is %g", j, best, v[best]);
    }
    ck_assert_ptr_null(s->key);
    ck_assert(s->seconds >= 0);
    ck_assert_uint_ge(es_svd_bytes(s), (n * r + r * d + r) * sizeof(double));
}

/* Square and nearly square ones ({40, 40}, {60, 50}, {50, 60}: under 1.4) take the
 * direct route of es_svd_values, the others its QR route. */
static const size_t shapes[][2] = {{50, 30}, {30, 50}, {1, 7}, {7, 1}, {40, 40}, {1, 1}, {200, 120}, {64, 300},
                                   {60, 50}, {50, 60}};
#define N_SHAPES (sizeof shapes / sizeof *shapes)

START_TEST(random_shapes)
{
    size_t n = shapes[_i][0], d = shapes[_i][1];
    double *x = random_data(n, d, 1000 + (uint64_t)_i);
    es_matrix *m = matrix_of(x, n, d, ES_AXIS_COLUMNS);
    size_t *idx = iota(n);
    es_svd *s = svd_ok(m, idx, n, ES_CENTER_NONE);
    check_factorisation(s, m, x, n, d);
    ck_assert_str_eq(s->solver, "dgesdd");
    ck_assert_ptr_null(s->mean);
    ck_assert_int_eq(s->centering, ES_CENTER_NONE);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(s->rows[i], i);
    ck_assert_ptr_eq(es_svd_retain(s), s);
    es_svd_release(s);
    es_svd_release(s);
    free(idx);
    free(x);
    es_matrix_release(m);
}
END_TEST

/* es_svd_values of the selection: method "values", no vectors of either side;
 * the test fails if it cannot be computed. */
static es_svd *values_ok(const es_matrix *m, const size_t *idx, size_t n, es_centering c)
{
    es_svd *s = NULL;
    es_err err = {0};
    ck_assert_msg(es_svd_values(m, idx, n, c, &s, &err) == 0, "values failed: %s", err.message);
    ck_assert_str_eq(s->method, "values");
    ck_assert_ptr_null(s->vt);
    ck_assert_ptr_null(s->vb);
    ck_assert_ptr_null(s->left);
    ck_assert_uint_eq(s->r, n < s->d ? n : s->d);
    return s;
}

/* |got_j - want_j| <= tol * scale_j for j < r, scale_j = want_j (each value
 * relative to itself) or, with per_value false, want_0 (relative to ||X||_2). */
static void check_values(const double *got, const double *want, size_t r, double tol, bool per_value)
{
    for (size_t j = 0; j < r; j++)
        ck_assert_msg(fabs(got[j] - want[j]) <= tol * (per_value ? want[j] : want[0]),
                      "s[%zu] = %.17g, want %.17g (%.2e relative)", j, got[j], want[j],
                      fabs(got[j] / want[j] - 1));
}

/* X = H1 D H2 with Householder reflections H = I - 2 w w^T / w^T w: the singular
 * values are exactly sigma and right vector j is +-(column j of H2). */
static double householder(const double *w, double ww, size_t i, size_t j)
{
    return (i == j) - 2 * w[i] * w[j] / ww; /* ww = w^T w, computed once */
}

static double *known_spectrum_data(size_t n, size_t d, const double *sigma, double **h2_out)
{
    uint64_t seed = 77;
    double *a = random_data(n, 1, seed), *b = random_data(d, 1, seed + 1);
    size_t r = n < d ? n : d;
    double *x = es_calloc(n * d, sizeof *x), *h2 = es_malloc(d * d * sizeof *h2), aa = frob2(a, n), bb = frob2(b, d);
    for (size_t j = 0; j < d; j++)
        for (size_t k = 0; k < d; k++)
            h2[j * d + k] = householder(b, bb, j, k);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < r; j++) {
            double h1 = householder(a, aa, i, j) * sigma[j];
            for (size_t k = 0; k < d; k++)
                x[i * d + k] += h1 * h2[j * d + k];
        }
    free(a);
    free(b);
    *h2_out = h2;
    return x;
}

/* Right vectors equal +-(rows of h2) with the sign given by the convention. */
static void check_right_vectors(const es_svd *s, const double *h2)
{
    for (size_t j = 0; j < s->r; j++) {
        const double *v = s->vt + j * s->d, *ref = h2 + j * s->d;
        size_t best = 0;
        for (size_t k = 1; k < s->d; k++)
            if (fabs(ref[k]) > fabs(ref[best]))
                best = k;
        double sign = ref[best] > 0 ? 1 : -1;
        for (size_t k = 0; k < s->d; k++)
            ck_assert_msg(fabs(v[k] - sign * ref[k]) < 1e-10, "v[%zu][%zu] %.17g vs %.17g", j, k, v[k],
                          sign * ref[k]);
    }
}

/* Tall and wide, one TSQR block, several (2600 items) and two parallel TSQR chunks (9000), with dgesdd and with
 * its dgesvd fallback; the singular values alone (es_svd_values) too, each
 * within 1e-13 of itself, and ||X||_F^2 = sum sigma^2, by their QR route and
 * (30 x 25, 25 x 30: nearly square) their direct one. */
START_TEST(known_spectrum)
{
    static const size_t dims[][2] = {{60, 25}, {25, 60}, {2600, 25}, {25, 2600}, {30, 25}, {25, 30}, {9000, 25}};
    for (int fallback = 0; fallback < 2; fallback++)
        for (size_t t = 0; t < sizeof dims / sizeof *dims; t++) {
            size_t n = dims[t][0], d = dims[t][1], r = 25;
            double sigma[25], *h2, ss = 0;
            for (size_t j = 0; j < r; j++) {
                sigma[j] = 10.0 / (double)(j + 1);
                ss += sigma[j] * sigma[j];
            }
            double *x = known_spectrum_data(n, d, sigma, &h2);
            es_matrix *m = matrix_of(x, n, d, ES_AXIS_COLUMNS);
            size_t *idx = iota(n);
            es_svd_force_fallback(fallback);
            es_svd *s = svd_ok(m, idx, n, ES_CENTER_NONE), *v = values_ok(m, idx, n, ES_CENTER_NONE);
            es_svd_force_fallback(0);
            ck_assert_str_eq(s->solver, fallback ? "dgesvd" : "dgesdd");
            ck_assert_str_eq(v->solver, s->solver);
            check_factorisation(s, m, x, n, d);
            for (size_t j = 0; j < r; j++)
                ck_assert_msg(fabs(s->s[j] - sigma[j]) < TOL * sigma[0], "s[%zu] = %.17g, exact %.17g", j, s->s[j],
                              sigma[j]);
            check_right_vectors(s, h2);
            check_values(v->s, sigma, r, 1e-13, true);
            ck_assert_double_le(fabs(v->total_ss - ss), 1e-13 * ss);
            es_svd_release(s);
            es_svd_release(v);
            free(idx);
            free(x);
            free(h2);
            es_matrix_release(m);
        }
}
END_TEST

/* The dgesvd fallback gives the same singular values and vectors as dgesdd. */
START_TEST(fallback_agrees)
{
    size_t n = shapes[_i][0], d = shapes[_i][1];
    double *x = random_data(n, d, 2000 + (uint64_t)_i);
    es_matrix *m = matrix_of(x, n, d, ES_AXIS_COLUMNS);
    size_t *idx = iota(n);
    es_svd *sdd = svd_ok(m, idx, n, ES_CENTER_COLUMNS);
    es_svd_force_fallback(1);
    es_svd *svd = svd_ok(m, idx, n, ES_CENTER_COLUMNS);
    es_svd_force_fallback(0);
    ck_assert_str_eq(sdd->solver, "dgesdd");
    ck_assert_str_eq(svd->solver, "dgesvd");
    ck_assert_uint_eq(sdd->r, svd->r);
    for (size_t j = 0; j < sdd->r; j++)
        ck_assert_msg(fabs(sdd->s[j] - svd->s[j]) <= TOL * fmax(sdd->s[0], 1), "s[%zu]: %.17g vs %.17g", j,
                      sdd->s[j], svd->s[j]);
    ck_assert(svd->recon_error < TOL && svd->orth_error < TOL);
    es_svd_release(sdd);
    es_svd_release(svd);
    free(idx);
    free(x);
    es_matrix_release(m);
}
END_TEST

/* Centring computed here independently: returns the centred copy of x. */
static double *centred_reference(const double *x, size_t n, size_t d, es_centering c, double *col_mean)
{
    double *y = es_malloc(n * d * sizeof *y);
    memcpy(y, x, n * d * sizeof *y);
    for (size_t k = 0; k < d; k++) {
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += x[i * d + k];
        col_mean[k] = sum / (double)n;
    }
    for (size_t i = 0; i < n; i++) {
        double sum = 0;
        for (size_t k = 0; k < d; k++)
            sum += x[i * d + k];
        for (size_t k = 0; k < d; k++)
            y[i * d + k] -= c == ES_CENTER_COLUMNS ? col_mean[k] : c == ES_CENTER_ROWS ? sum / (double)d : 0;
    }
    return y;
}

/* Mean over the columns (by_rows = false) or rows of an n x d array, largest |value|. */
static double worst_mean(const double *y, size_t n, size_t d, bool by_rows)
{
    double worst = 0;
    for (size_t a = 0; a < (by_rows ? n : d); a++) {
        double sum = 0;
        for (size_t b = 0; b < (by_rows ? d : n); b++)
            sum += by_rows ? y[a * d + b] : y[b * d + a];
        worst = fmax(worst, fabs(sum / (double)(by_rows ? d : n)));
    }
    return worst;
}

START_TEST(centrings)
{
    size_t n = 80, d = 30;
    double *x = random_data(n, d, 31);
    for (size_t i = 0; i < n; i++) /* offsets so that centring matters */
        for (size_t k = 0; k < d; k++)
            x[i * d + k] += 3.0 + 0.1 * (double)k + 0.05 * (double)i;
    es_matrix *m = matrix_of(x, n, d, ES_AXIS_COLUMNS);
    size_t *idx = iota(n);
    double col_mean[30];
    for (es_centering c = ES_CENTER_NONE; c <= ES_CENTER_ROWS; c++) {
        double *y = centred_reference(x, n, d, c, col_mean);
        es_svd *s = svd_ok(m, idx, n, c);
        ck_assert_int_eq(s->centering, c);
        check_factorisation(s, m, y, n, d);
        /* the decomposed block itself (U S Vt) has zero column / row means */
        double *usv = es_calloc(n * d, sizeof *usv);
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < d; k++)
                for (size_t j = 0; j < s->r; j++)
                    usv[i * d + k] += left_of(s, m)[i * s->r + j] * s->s[j] * s->vt[j * d + k];
        if (c == ES_CENTER_COLUMNS) {
            ck_assert_double_le(worst_mean(usv, n, d, false), 1e-12);
            for (size_t k = 0; k < d; k++)
                ck_assert_double_eq_tol(s->mean[k], col_mean[k], 1e-14);
        } else {
            ck_assert_ptr_null(s->mean);
            ck_assert(worst_mean(usv, n, d, false) > 1);
        }
        if (c == ES_CENTER_ROWS)
            ck_assert_double_le(worst_mean(usv, n, d, true), 1e-12);
        else
            ck_assert(worst_mean(usv, n, d, true) > 0.01);
        es_svd_release(s);
        free(usv);
        free(y);
    }
    free(idx);
    free(x);
    es_matrix_release(m);
}
END_TEST

/* es_center on its own: closed-form means of an arithmetic table. */
START_TEST(center_function)
{
    enum { N = 4, D = 3 };
    double x[N * D], mean[D];
    for (int i = 0; i < N; i++)
        for (int k = 0; k < D; k++)
            x[i * D + k] = 10.0 * i + k; /* column means 15 + k, row means 10 i + 1 */
    es_center(x, N, D, ES_CENTER_COLUMNS, mean);
    for (int k = 0; k < D; k++)
        ck_assert_double_eq(mean[k], 15.0 + k);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < D; k++)
            ck_assert_double_eq(x[i * D + k], 10.0 * i - 15.0);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < D; k++)
            x[i * D + k] = 10.0 * i + k;
    es_center(x, N, D, ES_CENTER_ROWS, NULL);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < D; k++)
            ck_assert_double_eq(x[i * D + k], k - 1.0);
    es_center(x, N, D, ES_CENTER_NONE, NULL);
    ck_assert_double_eq(x[0], -1.0);
    es_center(x, N, D, ES_CENTER_COLUMNS, NULL); /* mean_out optional */
    ck_assert_double_eq(x[0], 0.0);
}
END_TEST

/* The centrings' names, both ways; an unknown name leaves the value as it was. */
START_TEST(centering_names)
{
    es_centering c = ES_CENTER_ROWS;
    ck_assert_int_eq(es_centering_parse("none", &c), 0);
    ck_assert_int_eq(c, ES_CENTER_NONE);
    ck_assert_int_eq(es_centering_parse("columns", &c), 0);
    ck_assert_int_eq(c, ES_CENTER_COLUMNS);
    ck_assert_int_eq(es_centering_parse("rows", &c), 0);
    ck_assert_int_eq(c, ES_CENTER_ROWS);
    ck_assert_int_eq(es_centering_parse("Rows", &c), -1);
    ck_assert_int_eq(es_centering_parse("", &c), -1);
    ck_assert_int_eq(es_centering_parse(NULL, &c), -1);
    ck_assert_int_eq(c, ES_CENTER_ROWS);
    ck_assert_str_eq(es_centering_name(ES_CENTER_NONE), "none");
    ck_assert_str_eq(es_centering_name(ES_CENTER_COLUMNS), "columns");
    ck_assert_str_eq(es_centering_name(ES_CENTER_ROWS), "rows");
    ck_assert_str_eq(es_centering_name((es_centering)7), "unknown");
}
END_TEST

/* One row: s = ||x||, v = +-x/||x||, u = +-1 (sign from the convention). */
START_TEST(single_row)
{
    const double row[] = {0.5, -3.0, 2.0, 1.0};
    es_matrix *m = matrix_of(row, 1, 4, ES_AXIS_COLUMNS);
    const size_t idx[] = {0};
    es_svd *s = svd_ok(m, idx, 1, ES_CENTER_NONE);
    double norm = sqrt(0.25 + 9 + 4 + 1);
    ck_assert_uint_eq(s->r, 1);
    ck_assert_double_eq_tol(s->s[0], norm, TOL);
    ck_assert_double_eq_tol(left_of(s, m)[0], -1.0, TOL); /* largest entry -3 is negative: v = -x/|x| */
    for (int k = 0; k < 4; k++)
        ck_assert_double_eq_tol(s->vt[k], -row[k] / norm, TOL);
    es_svd_release(s);
    /* columns centring of one row is the zero block: all zero, errors 0 */
    s = svd_ok(m, idx, 1, ES_CENTER_COLUMNS);
    ck_assert_double_eq(s->s[0], 0.0);
    ck_assert_double_eq(s->recon_error, 0.0);
    ck_assert_double_eq(s->total_ss, 0.0);
    es_svd_release(s);
    es_matrix_release(m);
}
END_TEST

/* Selected items in a chosen order, in a matrix whose model axis is its rows:
 * row i of U S Vt is item idx[i], i.e. column idx[i] of the stored matrix. */
START_TEST(selection_and_model_axis)
{
    size_t d = 12, items = 10;
    double *x = random_data(d, items, 5); /* stored d x items, model axis = rows */
    es_matrix *m = matrix_of(x, d, items, ES_AXIS_ROWS);
    const size_t idx[] = {7, 2, 9, 0, 5};
    size_t n = 5;
    double block[5 * 12];
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < d; k++)
            block[i * d + k] = x[k * items + idx[i]];
    es_svd *s = svd_ok(m, idx, n, ES_CENTER_NONE);
    check_factorisation(s, m, block, n, d);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(s->rows[i], idx[i]);
    es_svd_release(s);
    free(x);
    es_matrix_release(m);
}
END_TEST

/* A few left vectors are formed for LEFT_MIN_COLS (64) columns, more for all r;
 * both agree, and es_svd_project(k) equals U_k S_k computed here. */
START_TEST(partial_left_and_projection)
{
    size_t n = 200, d = 120, k = 5;
    double *x = random_data(n, d, 4242);
    es_matrix *m = matrix_of(x, n, d, ES_AXIS_COLUMNS);
    size_t *idx = iota(n), ld = 0;
    es_svd *s = svd_ok(m, idx, n, ES_CENTER_COLUMNS);
    es_err err = {0};
    const double *few = es_svd_left(s, m, 3, &ld, &err);
    ck_assert_ptr_nonnull(few);
    ck_assert_uint_eq(ld, 64);
    const double *all = left_of(s, m);
    double *coords = es_malloc(n * k * sizeof *coords);
    ck_assert_int_eq(es_svd_project(s, m, k, coords, &err), 0);
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < 3; j++)
            ck_assert_double_eq_tol(few[i * 64 + j], all[i * s->r + j], TOL);
        for (size_t j = 0; j < k; j++)
            ck_assert_double_eq_tol(coords[i * k + j], all[i * s->r + j] * s->s[j], TOL * s->s[0]);
    }
    ck_assert_ptr_null(es_svd_left(s, m, s->r + 1, &ld, &err));
    ck_assert_str_eq(err.param, "k");
    ck_assert_int_eq(es_svd_project(s, m, 0, coords, &err), -1);
    /* the decomposition keeps no reference to its source; another matrix is refused */
    ck_assert_int_eq(m->refs, 1);
    es_matrix *other = matrix_of(x, n, d - 1, ES_AXIS_COLUMNS); /* another identity (shape) */
    ck_assert_int_eq(es_svd_project(s, other, k, coords, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_msg(strstr(err.message, "not the matrix this decomposition was computed from"), "%s", err.message);
    es_matrix_release(other);
    free(coords);
    es_svd_release(s);
    free(idx);
    free(x);
    es_matrix_release(m);
}
END_TEST

static void expect_failure(const es_matrix *m, const size_t *idx, size_t n, es_centering c, es_errcode code,
                           const char *param, const char *says)
{
    es_svd *s = (es_svd *)0x1;
    es_err err = {0};
    ck_assert_int_eq(es_svd_compute(m, idx, n, c, &s, &err), -1);
    ck_assert_int_eq(err.code, code);
    ck_assert_str_eq(err.param, param);
    ck_assert_msg(strstr(err.message, says) != NULL, "'%s' does not say '%s'", err.message, says);
    ck_assert_ptr_eq(s, (es_svd *)0x1);
}

START_TEST(failures)
{
    double x[6 * 4];
    for (int i = 0; i < 24; i++)
        x[i] = i % 5 - 2.0;
    x[2 * 4 + 1] = NAN;
    es_matrix *m = matrix_of(x, 6, 4, ES_AXIS_COLUMNS);
    const size_t all[] = {0, 1, 2, 3, 4, 5}, without_nan[] = {0, 1, 3, 4}, out_of_range[] = {0, 6};
    expect_failure(m, all, 6, ES_CENTER_NONE, ES_E_NUMERIC, "", "item 2 coordinate 1 is not finite");
    expect_failure(m, all, 6, ES_CENTER_ROWS, ES_E_NUMERIC, "", "item 2 coordinate 1 is not finite");
    es_svd *s = svd_ok(m, without_nan, 4, ES_CENTER_NONE); /* only selected items matter */
    es_svd_release(s);
    expect_failure(m, out_of_range, 2, ES_CENTER_NONE, ES_E_PARAM, "rows", "row 6 out of range");
    expect_failure(m, all, 0, ES_CENTER_NONE, ES_E_PARAM, "rows", "empty selection");
    es_matrix_release(m);

    x[2 * 4 + 1] = INFINITY;
    m = matrix_of(x, 6, 4, ES_AXIS_COLUMNS);
    expect_failure(m, all, 6, ES_CENTER_COLUMNS, ES_E_NUMERIC, "", "item 2 coordinate 1 is not finite");
    es_matrix_release(m);

    /* finite input whose column sum overflows: the centred block is not finite */
    for (int i = 0; i < 24; i++)
        x[i] = 1.5e308;
    m = matrix_of(x, 6, 4, ES_AXIS_COLUMNS);
    expect_failure(m, all, 6, ES_CENTER_COLUMNS, ES_E_NUMERIC, "", "overflow");
    es_matrix_release(m);
}
END_TEST

/* A block taller than one TSQR step (1024 items): three steps. Columns centring
 * is full rank, so every left vector comes from X V / s, certified; rows
 * centring leaves s_{d-1} = 0: a request for the first 3 gets the d - 1
 * certified columns, the full set comes from the QR route (Q of the TSQR applied
 * block by block) and agrees with them. A non-finite value in the third step is
 * named by its item. */
START_TEST(tsqr_blocks_and_left_routes)
{
    size_t n = 2600, d = 12;
    double *x = random_data(n, d, 77);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < d; k++)
            x[i * d + k] += 2.0 + 0.3 * (double)k;
    es_matrix *m = matrix_of(x, n, d, ES_AXIS_COLUMNS);
    size_t *idx = iota(n), ld = 0;
    es_err err = {0};
    double col_mean[12];
    for (es_centering c = ES_CENTER_COLUMNS; c <= ES_CENTER_ROWS; c++) {
        double *y = centred_reference(x, n, d, c, col_mean);
        es_svd *s = svd_ok(m, idx, n, c);
        const double *few = es_svd_left(s, m, 3, &ld, &err);
        ck_assert_ptr_nonnull(few);
        ck_assert_uint_eq(ld, c == ES_CENTER_ROWS ? d - 1 : d);
        if (c == ES_CENTER_ROWS)
            ck_assert_double_lt(s->s[d - 1], 1e-12 * s->s[0]);
        check_factorisation(s, m, y, n, d); /* all d: the QR route for rows centring */
        const double *all = left_of(s, m);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < 3; j++)
                ck_assert_msg(fabs(few[i * ld + j] - all[i * d + j]) < 1e-12, "u[%zu][%zu] %.17g vs %.17g", i, j,
                              few[i * ld + j], all[i * d + j]);
        es_svd_release(s);
        free(y);
    }
    es_matrix_release(m);
    x[2100 * d + 5] = NAN;
    m = matrix_of(x, n, d, ES_AXIS_COLUMNS);
    expect_failure(m, idx, n, ES_CENTER_NONE, ES_E_NUMERIC, "", "item 2100 coordinate 5 is not finite");
    es_matrix_release(m);
    free(idx);
    free(x);
}
END_TEST

/* d above one TSQR step (1024): the first block holds d items, a second block
 * the rest. Rows centring leaves s_{d-1} = 0, so all d left vectors come from
 * the QR route; checked on a few columns (X^T u_j = s_j v_j, orthonormal). */
START_TEST(tsqr_wide_first_block)
{
    size_t n = 1300, d = 1100;
    double *x = random_data(n, d, 99);
    es_matrix *m = matrix_of(x, n, d, ES_AXIS_COLUMNS);
    size_t *idx = iota(n), ld = 0;
    double col_mean[1100];
    double *y = centred_reference(x, n, d, ES_CENTER_ROWS, col_mean);
    es_svd *s = svd_ok(m, idx, n, ES_CENTER_ROWS);
    es_err err = {0};
    ck_assert_double_lt(s->s[d - 1], 1e-12 * s->s[0]);
    const double *u = es_svd_left(s, m, d, &ld, &err);
    ck_assert_msg(u != NULL, "%s", err.message);
    ck_assert_uint_eq(ld, d);
    const size_t cols[] = {0, 1, 2, d - 2};
    for (size_t a = 0; a < 4; a++) {
        size_t j = cols[a];
        double res = 0;
        for (size_t k = 0; k < d; k++) {
            double v = -s->s[j] * s->vt[j * d + k];
            for (size_t i = 0; i < n; i++)
                v += y[i * d + k] * u[i * ld + j];
            res += v * v;
        }
        ck_assert_msg(sqrt(res) < TOL * s->s[0], "column %zu: ||X^T u - s v|| = %.3g", j, sqrt(res));
        for (size_t b = 0; b < 4; b++) {
            double g = 0;
            for (size_t i = 0; i < n; i++)
                g += u[i * ld + j] * u[i * ld + cols[b]];
            ck_assert_msg(fabs(g - (a == b)) < TOL, "u_%zu . u_%zu = %.17g", j, cols[b], g);
        }
    }
    es_svd_release(s);
    es_matrix_release(m);
    free(y);
    free(idx);
    free(x);
}
END_TEST

/* Every shape of the exact path (tall, wide, one row or column, square) in
 * every centring: the values alone equal the exact decomposition's within
 * 1e-13 of s_0, ||X||_F^2 and the mean alike, and the bytes held exclude the
 * vectors. */
START_TEST(values_match_exact)
{
    size_t n = shapes[_i][0], d = shapes[_i][1];
    double *x = random_data(n, d, 2000 + (uint64_t)_i);
    for (size_t i = 0; i < n * d; i++)
        x[i] += 1.5 + 0.01 * (double)(i % d);
    es_matrix *m = matrix_of(x, n, d, ES_AXIS_COLUMNS);
    size_t *idx = iota(n);
    for (es_centering c = ES_CENTER_NONE; c <= ES_CENTER_ROWS; c++) {
        es_svd *e = svd_ok(m, idx, n, c), *v = values_ok(m, idx, n, c);
        if (e->s[0] > 0)
            check_values(v->s, e->s, e->r, 1e-13, false);
        else
            ck_assert_double_eq(v->s[0], 0); /* one item centred by columns, or one coordinate by rows */
        ck_assert_double_le(fabs(v->total_ss - e->total_ss), 1e-13 * e->total_ss);
        ck_assert_int_eq(v->mean != NULL, c == ES_CENTER_COLUMNS);
        for (size_t k = 0; v->mean && k < d; k++)
            ck_assert_double_eq(v->mean[k], e->mean[k]);
        ck_assert_uint_lt(es_svd_bytes(v), es_svd_bytes(e));
        ck_assert_uint_ge(es_svd_bytes(v), (n + v->r) * sizeof(double));
        es_svd_release(e);
        es_svd_release(v);
    }
    free(idx);
    free(x);
    es_matrix_release(m);
}
END_TEST

/* A values-only decomposition refuses every use of vectors (left vectors,
 * projections) by naming "method", and forms nothing on the way; an exact one
 * passes the same check. */
START_TEST(values_refuse_vectors)
{
    size_t n = 50, d = 30, ld = 0;
    double *x = random_data(n, d, 5), out[50 * 3];
    es_matrix *m = matrix_of(x, n, d, ES_AXIS_COLUMNS);
    size_t *idx = iota(n);
    es_svd *s = values_ok(m, idx, n, ES_CENTER_COLUMNS);
    es_err err = {0};
    ck_assert_ptr_null(es_svd_left(s, m, 3, &ld, &err));
    ck_assert_str_eq(err.param, "method");
    ck_assert_str_eq(err.message, "method=values gives singular values only; forming left vectors needs singular vectors");
    ck_assert_ptr_null(s->left);
    err = (es_err){0};
    ck_assert_int_eq(es_svd_project(s, m, 3, out, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "method");
    ck_assert_int_eq(es_svd_need_vectors(s, "x", NULL), -1);
    es_svd *e = svd_ok(m, idx, n, ES_CENTER_COLUMNS);
    ck_assert_int_eq(es_svd_need_vectors(e, "x", NULL), 0);
    es_svd_release(e);
    es_svd_release(s);
    free(idx);
    free(x);
    es_matrix_release(m);
}
END_TEST

/* GPT-2 small W_pos (1024 x 768, float32): invariants and numpy goldens,
 *   W = np.load('wpe.npy').astype(np.float64); X = centred W (or W[1:])
 *   np.linalg.svd(X, compute_uv=False)[[0, 1, 2, 3, 100]], (X**2).sum() */
static const struct {
    const char *rows;
    es_centering c;
    double s[5], ss; /* s_0..s_3, s_100 */
} wpe_golden[] = {
    {"", ES_CENTER_NONE,
     {61.9450428330811, 60.943412451589566, 53.24087371604699, 22.701639293308624, 0.19011494410502622},
     11838.635065044584},
    {"", ES_CENTER_COLUMNS,
     {61.93267718331172, 60.94116014483859, 53.17277988255047, 20.003437312106346, 0.19007233747782834},
     11480.259359736736},
    {"", ES_CENTER_ROWS,
     {61.933583089128156, 60.87202363030165, 53.209216196299586, 22.698177449089357, 0.19010867564895134},
     11824.543502926717},
    {"1:", ES_CENTER_COLUMNS,
     {61.931140831659974, 60.93335408384569, 53.083112288611396, 19.734176339022632, 0.1888958833924093},
     11384.109244610227},
};

/* Singular values graded down to 1e-7 of the largest, singular vectors dense (a
 * Householder reflection mixes the graded columns): X v_j / s_j then loses
 * orthogonality (~5e-11 measured for the small s_j), which the certificate
 * must notice and send these left vectors to the QR route (~1e-15). */
START_TEST(graded_spectrum_left_vectors_by_qr)
{
    size_t n = 1500, d = 8;
    double *x = random_data(n, d, 5), w[8], ww = 0;
    for (size_t k = 0; k < d; k++) {
        w[k] = 1.0 + 0.37 * (double)k;
        ww += w[k] * w[k];
    }
    for (size_t i = 0; i < n; i++) {
        double *row = x + i * d, dot = 0;
        for (size_t k = 0; k < d; k++) {
            row[k] *= pow(10.0, -7.0 * (double)k / (double)(d - 1));
            dot += row[k] * w[k];
        }
        for (size_t k = 0; k < d; k++)
            row[k] -= 2 * dot / ww * w[k];
    }
    es_matrix *m = matrix_of(x, n, d, ES_AXIS_COLUMNS);
    size_t *idx = iota(n);
    es_svd *s = svd_ok(m, idx, n, ES_CENTER_NONE);
    ck_assert_double_lt(s->s[d - 1], 1e-6 * s->s[0]);
    check_factorisation(s, m, x, n, d); /* U^T U = I to 1e-12 */
    es_svd_release(s);
    es_matrix_release(m);
    free(idx);
    free(x);
}
END_TEST

START_TEST(gpt2_wpe)
{
    es_matrix *m;
    es_err err;
    ck_assert_msg(es_matrix_load("gpt2/wpe", ES_REPO_DATA "/gpt2-small/wpe.npy", NULL, ES_AXIS_COLUMNS, &m, &err) == 0,
                  "%s", err.message);
    ck_assert_uint_eq(es_matrix_items(m), 1024);
    ck_assert_uint_eq(es_matrix_dim(m), 768);
    size_t *idx, n;
    es_rowsel sel = {0};
    ck_assert_int_eq(es_rowsel_parse(wpe_golden[_i].rows, "rows", &sel, &err), 0);
    ck_assert_int_eq(es_rowsel_resolve(&sel, 1024, &idx, &n, &err), 0);
    es_rowsel_free(&sel);
    es_svd *s = svd_ok(m, idx, n, wpe_golden[_i].c);
    ck_assert_uint_eq(s->r, 768);
    ck_assert_msg(s->recon_error < TOL && s->orth_error < TOL, "recon %.3g orth %.3g", s->recon_error,
                  s->orth_error);
    const size_t at[5] = {0, 1, 2, 3, 100};
    for (int j = 0; j < 5; j++)
        ck_assert_msg(fabs(s->s[at[j]] / wpe_golden[_i].s[j] - 1) < 1e-9, "s[%zu] %.17g vs numpy %.17g", at[j],
                      s->s[at[j]], wpe_golden[_i].s[j]);
    ck_assert_msg(fabs(s->total_ss / wpe_golden[_i].ss - 1) < 1e-12, "total_ss %.17g", s->total_ss);
    double ss = 0;
    for (size_t j = 0; j < s->r; j++)
        ss += s->s[j] * s->s[j];
    ck_assert_msg(fabs(ss / wpe_golden[_i].ss - 1) < 1e-12, "sum s^2 %.17g", ss);
    if (wpe_golden[_i].c == ES_CENTER_ROWS) /* rows sum to 0: the all-ones direction is null */
        ck_assert_double_lt(s->s[767], 1e-12);
    es_svd_release(s);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* W_pos's values alone against the same numpy goldens within 1e-13 of each
 * value (s_100 is 3e-3 s_0), and against the exact path within 1e-13 s_0. */
START_TEST(gpt2_wpe_values)
{
    es_matrix *m;
    es_err err;
    ck_assert_msg(es_matrix_load("gpt2/wpe", ES_REPO_DATA "/gpt2-small/wpe.npy", NULL, ES_AXIS_COLUMNS, &m, &err) == 0,
                  "%s", err.message);
    size_t *idx, n;
    es_rowsel sel = {0};
    ck_assert_int_eq(es_rowsel_parse(wpe_golden[_i].rows, "rows", &sel, &err), 0);
    ck_assert_int_eq(es_rowsel_resolve(&sel, 1024, &idx, &n, &err), 0);
    es_rowsel_free(&sel);
    es_svd *v = values_ok(m, idx, n, wpe_golden[_i].c), *e = svd_ok(m, idx, n, wpe_golden[_i].c);
    const size_t at[5] = {0, 1, 2, 3, 100};
    double got[5];
    for (int j = 0; j < 5; j++)
        got[j] = v->s[at[j]];
    check_values(got, wpe_golden[_i].s, 5, 1e-13, true);
    check_values(v->s, e->s, v->r, 1e-13, false);
    ck_assert_msg(fabs(v->total_ss / wpe_golden[_i].ss - 1) < 1e-13, "total_ss %.17g", v->total_ss);
    if (wpe_golden[_i].c == ES_CENTER_ROWS) /* rows sum to 0: the all-ones direction is null */
        ck_assert_double_lt(v->s[767], 1e-12);
    es_svd_release(v);
    es_svd_release(e);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* The answers do not depend on the BLAS thread count (the daemon's "auto" policy
 * changes it with the load): a 9000 x 32 block (two parallel TSQR chunks) with
 * 1, 2, 4 and 8 OpenBLAS threads (8: the TSQR's last merge threaded by
 * OpenBLAS). The exact and values decompositions are the same bits, and so
 * are the PCA coordinates (X V by parts); top-k's singular values agree within
 * 1e-13 of s_0 and its vectors within the tolerance it certifies (measured:
 * 2e-13; its small steps are OpenBLAS's threaded calls). */
START_TEST(thread_counts_agree)
{
    enum { N = 9000, D = 32, K = 8 };
    double sigma[D], *h2;
    for (size_t j = 0; j < D; j++)
        sigma[j] = 2.0 - (double)j / D;
    double *x = known_spectrum_data(N, D, sigma, &h2);
    es_matrix *m = matrix_of(x, N, D, ES_AXIS_COLUMNS);
    size_t *idx = iota(N);
    es_svd *ref[3] = {0};
    double *ref_coords = es_malloc(N * K * sizeof *ref_coords), *coords = es_malloc(N * K * sizeof *coords);
    static const int counts[] = {1, 2, 4, 8};
    for (size_t t = 0; t < 4; t++) {
        openblas_set_num_threads(counts[t]);
        es_svd *got[3] = {svd_ok(m, idx, N, ES_CENTER_COLUMNS), values_ok(m, idx, N, ES_CENTER_COLUMNS), NULL};
        es_err err = {0};
        ck_assert_msg(es_svd_topk(m, idx, N, ES_CENTER_COLUMNS, K, ES_TOPK_TOLERANCE, &got[2], &err) == 0, "%s",
                      err.message);
        ck_assert_int_eq(es_svd_project(got[0], m, K, t ? coords : ref_coords, &err), 0);
        for (size_t v = 0; v < 3; v++) { /* each says what it ran on */
            ck_assert_uint_eq(got[v]->threads, (unsigned)counts[t]);
            ck_assert_str_eq(got[v]->blas_core, openblas_get_corename());
        }
        for (size_t v = 0; v < 3; v++) {
            if (!t) {
                ref[v] = got[v];
                continue;
            }
            size_t r = v == 2 ? K : D;
            if (v < 2) /* the parallel TSQR: the same R, the same bits (8 threads: its merge threaded) */
                ck_assert_msg(memcmp(got[v]->s, ref[v]->s, D * sizeof *got[v]->s) == 0 &&
                                  (!got[v]->vt || memcmp(got[v]->vt, ref[v]->vt, D * D * sizeof *got[v]->vt) == 0),
                              "%d threads, decomposition %zu: not the same bits", counts[t], v);
            for (size_t j = 0; j < r; j++)
                ck_assert_msg(fabs(got[v]->s[j] - ref[v]->s[j]) <= 1e-13 * ref[v]->s[0],
                              "%d threads, decomposition %zu: s[%zu] %.17g vs %.17g", counts[t], v, j, got[v]->s[j],
                              ref[v]->s[j]);
            for (size_t i = 0; got[v]->vt && i < r * D; i++)
                ck_assert_msg(fabs(got[v]->vt[i] - ref[v]->vt[i]) <= (v == 2 ? ES_TOPK_TOLERANCE : 1e-13),
                              "%d threads, decomposition %zu: vt[%zu] %.17g vs %.17g", counts[t], v, i,
                              got[v]->vt[i], ref[v]->vt[i]);
            es_svd_release(got[v]);
        }
        ck_assert_msg(!t || memcmp(coords, ref_coords, N * K * sizeof *coords) == 0,
                      "%d threads: PCA coordinates (X V by parts) not the same bits", counts[t]);
    }
    for (size_t v = 0; v < 3; v++)
        es_svd_release(ref[v]);
    free(ref_coords);
    free(coords);
    free(idx);
    free(x);
    free(h2);
    es_matrix_release(m);
}
END_TEST

/* The parallel TSQR's merges run panel by panel, each panel's update in fixed
 * column slices, every merge of a level at once (merge_level): 300
 * coordinates give three panels and two slices per merge, 16384 items four
 * chunks (two levels). With 1, 2 and 4 threads (teams of 1, 2 and 4) the
 * values are the known ones within 1e-13 of s_0. (R is the same bits with any
 * team; the values of R are not: OpenBLAS threads dgebrd's dgemv at d = 300,
 * and it differs in the last bits, 2e-16 s_0 here.) */
START_TEST(tsqr_merges_over_panels_and_slices)
{
    enum { N = 16384, D = 300 };
    double sigma[D], *h2;
    for (size_t j = 0; j < D; j++)
        sigma[j] = 3.0 / sqrt((double)j + 1);
    double *x = known_spectrum_data(N, D, sigma, &h2);
    es_matrix *m = matrix_of(x, N, D, ES_AXIS_COLUMNS);
    size_t *idx = iota(N);
    ck_assert_uint_eq(es_tsqr_chunks(N, D), 4);
    static const int counts[] = {1, 2, 4};
    for (size_t t = 0; t < 3; t++) {
        openblas_set_num_threads(counts[t]);
        es_svd *got = values_ok(m, idx, N, ES_CENTER_NONE);
        for (size_t j = 0; j < D; j++)
            ck_assert_msg(fabs(got->s[j] - sigma[j]) <= 1e-13 * sigma[0], "%d threads: s[%zu] %.17g vs %.17g",
                          counts[t], j, got->s[j], sigma[j]);
        es_svd_release(got);
    }
    free(idx);
    free(x);
    free(h2);
    es_matrix_release(m);
}
END_TEST

/* The passes over the items (the Gram matrix with ||X||_F^2, X A^T, U^T X) run
 * in fixed parts summed in part order: the same bits with 1, 2 and 4 threads,
 * and within rounding of one sequential product over the whole block. */
START_TEST(passes_same_bits_any_threads)
{
    enum { N = 9000, D = 32, K = 5 };
    double *x = es_malloc(N * D * sizeof *x), *a = es_malloc(K * D * sizeof *a), *u = es_malloc(N * K * sizeof *u);
    for (size_t i = 0; i < N * D; i++)
        x[i] = sin(0.37 * (double)i) + (double)(i % D) / D;
    for (size_t i = 0; i < K * D; i++)
        a[i] = cos(0.11 * (double)i);
    for (size_t i = 0; i < N * K; i++)
        u[i] = cos(0.03 * (double)i);
    es_matrix *m = matrix_of(x, N, D, ES_AXIS_COLUMNS);
    size_t *idx = iota(N);
    es_svd *s = es_svd_alloc(m, idx, N, D, ES_CENTER_COLUMNS, D, ES_PARTS_VALUES);
    es_err err = {0};
    ck_assert_int_eq(es_svd_scan(s, m, &err), 0);
    double *g[3], *xa[3], *ux[3], ss[3];
    static const int counts[] = {1, 2, 4};
    for (size_t t = 0; t < 3; t++) {
        openblas_set_num_threads(counts[t]);
        g[t] = es_malloc(D * D * sizeof *g[t]);
        xa[t] = es_malloc(N * K * sizeof *xa[t]);
        ux[t] = es_malloc(K * D * sizeof *ux[t]);
        ck_assert_int_eq(es_svd_gram(s, m, g[t], &ss[t], &err), 0);
        ck_assert_int_eq(es_svd_times(s, m, a, K, xa[t], &err), 0);
        ck_assert_int_eq(es_svd_times_t(s, m, u, K, ux[t], &err), 0);
    }
    for (size_t t = 1; t < 3; t++)
        ck_assert_msg(memcmp(g[t], g[0], D * D * sizeof *g[0]) == 0 && ss[t] == ss[0] &&
                          memcmp(xa[t], xa[0], N * K * sizeof *xa[0]) == 0 &&
                          memcmp(ux[t], ux[0], K * D * sizeof *ux[0]) == 0,
                      "%d threads: a pass gave other bits", counts[t]);
    /* the references: one product over the whole centred block each */
    double *xc = es_malloc(N * D * sizeof *xc), *ref = es_malloc(D * D * sizeof *ref);
    double *ref_xa = es_malloc(N * K * sizeof *ref_xa), *ref_ux = es_malloc(K * D * sizeof *ref_ux);
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < D; j++)
            xc[i * D + j] = x[i * D + j] - s->mean[j];
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, D, N, 1.0, xc, D, xc, D, 0.0, ref, D);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, K, D, 1.0, xc, D, a, D, 0.0, ref_xa, K);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, D, N, 1.0, u, K, xc, D, 0.0, ref_ux, D);
    for (size_t i = 0; i < D; i++)
        for (size_t j = i; j < D; j++) {
            ck_assert_double_le(fabs(g[0][i * D + j] - ref[i * D + j]), 1e-12 * ref[0]);
            ck_assert(g[0][j * D + i] == g[0][i * D + j]); /* both triangles, symmetric */
        }
    for (size_t i = 0; i < N * K; i++)
        ck_assert_double_le(fabs(xa[0][i] - ref_xa[i]), 1e-12 * (1 + fabs(ref_xa[i])));
    for (size_t i = 0; i < K * D; i++)
        ck_assert_double_le(fabs(ux[0][i] - ref_ux[i]), 1e-10 * (1 + fabs(ref_ux[i])));
    free(ref_xa);
    free(ref_ux);
    for (size_t t = 0; t < 3; t++) {
        free(g[t]);
        free(xa[t]);
        free(ux[t]);
    }
    free(xc);
    free(ref);
    free(a);
    free(u);
    es_svd_free(s);
    free(idx);
    free(x);
    es_matrix_release(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("svd");
    TCase *tc = tcase_create("svd");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, random_shapes, 0, N_SHAPES);
    tcase_add_test(tc, known_spectrum);
    tcase_add_loop_test(tc, fallback_agrees, 0, N_SHAPES);
    tcase_add_test(tc, centrings);
    tcase_add_test(tc, center_function);
    tcase_add_test(tc, centering_names);
    tcase_add_test(tc, single_row);
    tcase_add_test(tc, selection_and_model_axis);
    tcase_add_test(tc, failures);
    tcase_add_test(tc, partial_left_and_projection);
    tcase_add_test(tc, tsqr_blocks_and_left_routes);
    tcase_add_test(tc, tsqr_wide_first_block);
    tcase_add_test(tc, graded_spectrum_left_vectors_by_qr);
    tcase_add_loop_test(tc, gpt2_wpe, 0, sizeof wpe_golden / sizeof *wpe_golden);
    tcase_add_loop_test(tc, values_match_exact, 0, N_SHAPES);
    tcase_add_test(tc, values_refuse_vectors);
    tcase_add_test(tc, thread_counts_agree);
    tcase_add_test(tc, passes_same_bits_any_threads);
    tcase_add_test(tc, tsqr_merges_over_panels_and_slices);
    tcase_add_loop_test(tc, gpt2_wpe_values, 0, sizeof wpe_golden / sizeof *wpe_golden);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
