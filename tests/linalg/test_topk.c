/* The certified top-k path against the exact one and against known spectra:
 * GPT-2's W_pos, a generated matrix with singular values (j+1)^-1 exactly, and
 * degenerate spectra where the certificate must fail (so callers fall back). */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "check_main.h"
#include "embedscope/linalg.h"

#define TOL 1e-10

static size_t *iota(size_t n)
{
    size_t *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    return idx;
}

static es_svd *topk_ok(const es_matrix *m, es_centering c, size_t k)
{
    size_t n = es_matrix_items(m), *idx = iota(n);
    es_svd *s = NULL;
    es_err err = {0};
    ck_assert_msg(es_svd_topk(m, idx, n, c, k, TOL, &s, &err) == 0, "%s", err.message);
    free(idx);
    ck_assert_str_eq(s->method, "topk");
    ck_assert_uint_eq(s->r, k);
    return s;
}

static es_svd *exact_ok(const es_matrix *m, es_centering c)
{
    size_t n = es_matrix_items(m), *idx = iota(n);
    es_svd *s = NULL;
    es_err err = {0};
    ck_assert_msg(es_svd_compute(m, idx, n, c, &s, &err) == 0, "%s", err.message);
    free(idx);
    ck_assert_str_eq(s->method, "exact");
    return s;
}

/* An n x d matrix with singular values sigma[0..d) exactly (up to rounding):
 * U diag(sigma) V^T with U and V the singular vectors of a seeded Gaussian. */
static es_matrix *with_spectrum(const char *id, size_t n, size_t d, const double *sigma)
{
    es_matrix *g = NULL;
    es_err err = {0};
    ck_assert_msg(es_gen_gaussian("gen/base", n, d, 1.0, 1.0, 5, &g, &err) == 0, "%s", err.message);
    es_svd *e = exact_ok(g, ES_CENTER_NONE);
    size_t ld = 0;
    const double *u = es_svd_left(e, g, d, &ld, &err);
    ck_assert_ptr_nonnull(u);
    double *x = es_calloc(n * d, sizeof *x);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            for (size_t c = 0; c < d; c++)
                x[i * d + c] += u[i * ld + j] * sigma[j] * e->vt[j * d + c];
    es_svd_release(e);
    es_matrix_release(g);
    es_provenance prov = {.source = "test"};
    return es_matrix_from_data(id, x, n, d, ES_AXIS_COLUMNS, &prov);
}

/* Top-k agrees with the exact decomposition within its certificate (plus the
 * exact path's own rounding, 1e-13 s_0): singular values, right vectors (same
 * signs by the convention), left vectors and PCA coordinates. */
static void check_against_exact(const es_svd *t, const es_svd *e, const es_matrix *m)
{
    size_t k = t->r, d = t->d, n = t->n, ld = 0;
    double s0 = e->s[0], slack = 1e-13;
    ck_assert(t->cert.passed);
    ck_assert(t->cert.sigma_bound <= TOL && t->cert.vector_bound <= TOL);
    ck_assert_double_eq_tol(t->total_ss, e->total_ss, 1e-12 * e->total_ss);
    es_err err = {0};
    const double *ut = es_svd_left(t, m, k, &ld, &err);
    ck_assert_uint_eq(ld, k);
    size_t lde = 0;
    const double *ue = es_svd_left(e, m, k, &lde, &err);
    ck_assert_ptr_nonnull(ut);
    ck_assert_ptr_nonnull(ue);
    for (size_t j = 0; j < k; j++) {
        ck_assert_msg(fabs(t->s[j] - e->s[j]) <= (t->cert.sigma_bound + slack) * s0, "s[%zu] %.17g vs %.17g", j,
                      t->s[j], e->s[j]);
        double angle = t->cert.vector_bound + slack * s0 / (t->cert.min_gap * s0);
        for (size_t c = 0; c < d; c++)
            ck_assert_msg(fabs(t->vt[j * d + c] - e->vt[j * d + c]) <= 2 * angle, "v[%zu][%zu] %.17g vs %.17g", j,
                          c, t->vt[j * d + c], e->vt[j * d + c]);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(fabs(ut[i * ld + j] - ue[i * lde + j]) <= 2 * angle, "u[%zu][%zu]", i, j);
    }
}

/* es_svd_project of a top-k decomposition (the X V its Rayleigh-Ritz step
 * measured, kept) equals X V computed here from the centred rows, to rounding,
 * for k and fewer columns. */
static void check_projection(const es_svd *t, const es_matrix *m)
{
    size_t n = t->n, d = t->d, k = t->r;
    double *x = es_matrix_items_copy(m, t->rows, n), *xv = es_malloc(n * k * sizeof *xv);
    es_err err = {0};
    for (size_t kk = k; kk + 2 >= k && kk > 0; kk--) {
        ck_assert_int_eq(es_svd_project(t, m, kk, xv, &err), 0);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < kk; j++) {
                double ref = 0;
                for (size_t c = 0; c < d; c++)
                    ref += (x[i * d + c] - (t->mean ? t->mean[c] : 0)) * t->vt[j * d + c];
                ck_assert_msg(fabs(xv[i * kk + j] - ref) <= 1e-12 * t->s[0], "X V[%zu][%zu] %.17g vs %.17g", i, j,
                              xv[i * kk + j], ref);
            }
    }
    free(x);
    free(xv);
}

START_TEST(wpe_matches_exact)
{
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_msg(es_matrix_load("gpt2/wpe", ES_REPO_DATA "/gpt2-small/wpe.npy", NULL, ES_AXIS_COLUMNS, &m, &err) == 0,
                  "%s", err.message);
    es_svd *e = exact_ok(m, ES_CENTER_COLUMNS);
    es_svd *t = topk_ok(m, ES_CENTER_COLUMNS, 10);
    check_against_exact(t, e, m);
    check_projection(t, m);
    ck_assert_ptr_nonnull(t->mean);
    es_svd_release(t);
    es_svd_release(e);
    es_matrix_release(m);
}
END_TEST

/* s_j = 10 / (j + 1) exactly (es_gen_gaussian): top-k against the closed form
 * and against the exact path. */
START_TEST(known_spectrum)
{
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_msg(es_gen_gaussian("gen/known", 2000, 150, 1.0, 10.0, 7, &m, &err) == 0, "%s", err.message);
    es_svd *t = topk_ok(m, ES_CENTER_NONE, 12);
    for (size_t j = 0; j < 12; j++)
        ck_assert_msg(fabs(t->s[j] - 10.0 / (double)(j + 1)) <= (t->cert.sigma_bound + 1e-13) * 10.0,
                      "s[%zu] = %.17g", j, t->s[j]);
    es_svd *e = exact_ok(m, ES_CENTER_NONE);
    check_against_exact(t, e, m);
    es_svd_release(t);
    es_svd_release(e);
    es_matrix_release(m);
}
END_TEST

/* All singular values equal (decay 0): no vector is determined, the gap is 0,
 * the certificate fails (sigma is still bounded); and a k that reaches past
 * the rank is refused. */
START_TEST(degenerate_fails_certificate)
{
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_msg(es_gen_gaussian("gen/flat", 600, 60, 0.0, 3.0, 11, &m, &err) == 0, "%s", err.message);
    es_svd *t = topk_ok(m, ES_CENTER_NONE, 5);
    ck_assert(!t->cert.passed);
    ck_assert(t->cert.vector_bound > TOL);
    ck_assert(t->cert.sigma_bound <= TOL);
    for (size_t j = 0; j < 5; j++)
        ck_assert_double_eq_tol(t->s[j], 3.0, 1e-12);
    es_svd_release(t);
    size_t *idx = iota(600);
    es_svd *none = (es_svd *)0x1;
    ck_assert_int_eq(es_svd_topk(m, idx, 600, ES_CENTER_NONE, 60, TOL, &none, &err), -1);
    ck_assert_str_eq(err.param, "k");
    ck_assert_int_eq(es_svd_topk(m, idx, 30, ES_CENTER_NONE, 5, TOL, &none, &err), -1); /* wide */
    ck_assert_ptr_eq(none, (es_svd *)0x1);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* A near-degenerate pair (s_2 = s_3 (1 + 1e-12)) inside the top k: the values
 * are certified, the vectors are not, so the certificate fails. */
START_TEST(near_degenerate_pair)
{
    double sigma[40];
    for (size_t j = 0; j < 40; j++)
        sigma[j] = 1.0 / (double)(j + 1);
    sigma[2] = sigma[3] * (1 + 1e-12);
    es_matrix *m = with_spectrum("test/near", 400, 40, sigma);
    es_svd *t = topk_ok(m, ES_CENTER_NONE, 6);
    ck_assert(!t->cert.passed);
    ck_assert(t->cert.min_gap < 1e-11);
    ck_assert(t->cert.sigma_bound <= TOL);
    for (size_t j = 0; j < 6; j++)
        ck_assert_double_eq_tol(t->s[j], sigma[j], 1e-13);
    es_svd *t2 = topk_ok(m, ES_CENTER_NONE, 2); /* above the pair: certified */
    ck_assert(t2->cert.passed);
    es_svd_release(t2);
    es_svd_release(t);
    es_matrix_release(m);
}
END_TEST

/* A fast-decaying spectrum, s_j = (j + 1)^-8: the Gram matrix's rounding
 * (~1e-13 s_0^2) swamps s_j^2 from j ~ 5 on, so the lower vectors of the first
 * V are wrong though every gap is wide; only the measured residuals can say
 * so. The certificate fails, and its sigma bound still holds against the
 * exact values. */
START_TEST(residual_flags_lost_accuracy)
{
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_msg(es_gen_gaussian("gen/steep", 400, 40, 8.0, 1.0, 3, &m, &err) == 0, "%s", err.message);
    es_svd *t = topk_ok(m, ES_CENTER_NONE, 8);
    es_svd *e = exact_ok(m, ES_CENTER_NONE);
    ck_assert(!t->cert.passed);
    ck_assert(t->cert.sigma_bound > TOL);
    for (size_t j = 0; j < 8; j++)
        ck_assert_msg(fabs(t->s[j] - e->s[j]) <= (t->cert.sigma_bound + 1e-13) * e->s[0], "s[%zu] %.17g vs %.17g",
                      j, t->s[j], e->s[j]);
    es_svd_release(t);
    es_svd_release(e);
    es_matrix_release(m);
}
END_TEST

/* Residual j of t measured here on the items of m (no centring), in long
 * double: sqrt(||X v_j - s_j u_j||^2 + ||X^T u_j - s_j v_j||^2). */
static double measured_residual(const es_svd *t, const es_matrix *m, size_t j)
{
    size_t n = t->n, d = t->d, ld = 0;
    es_err err = {0};
    const double *u = es_svd_left(t, m, t->r, &ld, &err);
    ck_assert_ptr_nonnull(u);
    long double left = 0, right = 0, *xtu = calloc(d, sizeof *xtu);
    for (size_t i = 0; i < n; i++) {
        long double xv = 0;
        for (size_t c = 0; c < d; c++) {
            xv += (long double)es_matrix_item(m, i, c) * t->vt[j * d + c];
            xtu[c] += (long double)es_matrix_item(m, i, c) * u[i * ld + j];
        }
        long double r = xv - (long double)t->s[j] * u[i * ld + j];
        left += r * r;
    }
    for (size_t c = 0; c < d; c++) {
        long double r = xtu[c] - (long double)t->s[j] * t->vt[j * d + c];
        right += r * r;
    }
    free(xtu);
    return (double)sqrtl(left + right);
}

/* The certificate is what linalg.h says, measured here independently: on a
 * steep spectrum scaled to s_0 = 1000 (residuals r_j far above rounding,
 * growing with j) with a close pair at 4, 5: residual = max_j r_j / s_0,
 * sigma_bound = residual / sqrt 2, vector_bound at least r_j / gap_j for each
 * inner j, gap_j to both neighbours (the pair's lower vector has the larger
 * residual), and min_gap no more than the exact values' relative gaps. The
 * two measurements of r_j differ by rounding, below 10 eps s_0. */
START_TEST(certificate_is_measured_on_x)
{
    size_t n = 400, d = 40, k = 8;
    double sigma[40];
    for (size_t j = 0; j < d; j++)
        sigma[j] = 1000.0 * pow((double)(j + 1), -6.0);
    sigma[5] = sigma[4] * (1 - 1e-3);
    es_matrix *m = with_spectrum("test/steep-pair", n, d, sigma);
    es_svd *t = topk_ok(m, ES_CENTER_NONE, k);
    double s0 = t->s[0], worst = 0, r[8], slack = 10 * DBL_EPSILON * s0;
    for (size_t j = 0; j < k; j++) {
        r[j] = measured_residual(t, m, j);
        worst = fmax(worst, r[j]);
    }
    ck_assert(worst > 1e3 * slack); /* the comparisons below are sharp */
    ck_assert_double_eq_tol(t->cert.residual * s0, worst, slack);
    ck_assert_double_eq_tol(t->cert.sigma_bound, t->cert.residual / sqrt(2.0), 1e-15 * t->cert.residual);
    for (size_t j = 1; j + 1 < k; j++) {
        double gap = fmin(t->s[j - 1] - t->s[j], t->s[j] - t->s[j + 1]);
        ck_assert_msg(t->cert.vector_bound >= (r[j] - slack) / gap, "vector_bound %g < r_%zu / gap_%zu = %g",
                      t->cert.vector_bound, j, j, r[j] / gap);
    }
    es_svd *e = exact_ok(m, ES_CENTER_NONE);
    for (size_t j = 0; j < k; j++)
        ck_assert_msg(t->cert.min_gap * s0 <= e->s[j] - e->s[j + 1], "min_gap %g > gap %zu of the exact values %g",
                      t->cert.min_gap * s0, j, e->s[j] - e->s[j + 1]);
    es_svd_release(e);
    es_svd_release(t);
    es_matrix_release(m);
}
END_TEST

/* ---------------------------------------------------------------- the Gram eigenpairs by subspace iteration
 * (forced at small d by es_topk_iteration_set; its default is from 1536 coordinates) */

/* A slowly decaying spectrum like the benchmark's, s_j = 10 (j + 1)^-1/2:
 * the iterated eigenpairs give a certified answer that agrees with the exact
 * decomposition (dgesdd of R) within the certificate, coordinates included. */
START_TEST(iterated_matches_exact)
{
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_msg(es_gen_gaussian("gen/slow", 2000, 200, 0.5, 10.0, 13, &m, &err) == 0, "%s", err.message);
    es_topk_iteration_set(8, 0);
    es_svd *t = topk_ok(m, ES_CENTER_COLUMNS, 12);
    es_topk_iteration_set(0, 0);
    ck_assert_str_eq(t->eigensolver, "subspace");
    es_svd *e = exact_ok(m, ES_CENTER_COLUMNS);
    check_against_exact(t, e, m);
    check_projection(t, m);
    es_svd_release(t);
    es_svd_release(e);
    es_matrix_release(m);
}
END_TEST

/* s_j = (j + 1)^-1/2 over 128 values: the slowly decaying spectrum the
 * iterated path's cases perturb. */
static void slow_spectrum(double sigma[128])
{
    for (size_t j = 0; j < 128; j++)
        sigma[j] = pow((double)(j + 1), -0.5);
}

/* The top 6 of m uncentred, with the iteration on from d = 8. */
static es_svd *iterated_top6(es_matrix *m)
{
    es_topk_iteration_set(8, 0);
    es_svd *t = topk_ok(m, ES_CENTER_NONE, 6);
    es_topk_iteration_set(0, 0);
    return t;
}

/* Close values inside the top k (s_1 = s_2 (1 + 1e-3)) and a repeated pair
 * just below it (s_8 = s_9): iterated, certified, agreeing with the exact
 * values and vectors within the certificate. */
START_TEST(iterated_close_and_repeated)
{
    double sigma[128];
    slow_spectrum(sigma);
    sigma[1] = sigma[2] * (1 + 1e-3);
    sigma[9] = sigma[8];
    es_matrix *m = with_spectrum("test/close", 800, 128, sigma);
    es_svd *t = iterated_top6(m);
    ck_assert_str_eq(t->eigensolver, "subspace");
    for (size_t j = 0; j < 6; j++)
        ck_assert_msg(fabs(t->s[j] - sigma[j]) <= t->cert.sigma_bound + 1e-13, "s[%zu] %.17g vs %.17g", j, t->s[j],
                      sigma[j]);
    es_svd *e = exact_ok(m, ES_CENTER_NONE);
    check_against_exact(t, e, m);
    es_svd_release(t);
    es_svd_release(e);
    es_matrix_release(m);
}
END_TEST

/* A repeated pair inside the top k (s_2 = s_3): the iterated start misses the
 * certificate, dsyevr's start is tried and misses it too (no vector is
 * determined), so the caller's exact fallback answers; the values are still
 * within sigma_bound of dgesdd's. */
START_TEST(iterated_repeated_pair_falls_back)
{
    double sigma[128];
    slow_spectrum(sigma);
    sigma[3] = sigma[2];
    es_matrix *m = with_spectrum("test/repeated", 800, 128, sigma);
    es_svd *t = iterated_top6(m);
    ck_assert(!t->cert.passed);
    ck_assert_str_eq(t->eigensolver, "dsyevr");
    ck_assert(t->cert.sigma_bound <= TOL);
    es_svd *e = exact_ok(m, ES_CENTER_NONE);
    for (size_t j = 0; j < 6; j++)
        ck_assert_msg(fabs(t->s[j] - e->s[j]) <= (t->cert.sigma_bound + 1e-13) * e->s[0], "s[%zu]", j);
    es_svd_release(t);
    es_svd_release(e);
    es_matrix_release(m);
}
END_TEST

/* A near-degenerate pair straddling k (s_5 = s_6 (1 + 1e-12), k = 6): the
 * k-th vector is not determined, and only the bound on the next eigenvalue
 * (proved by the Cholesky factorization, not taken from a Ritz value) shows
 * it: the certificate fails on both starts. */
START_TEST(iterated_pair_straddling_k_fails)
{
    double sigma[128];
    slow_spectrum(sigma);
    sigma[5] = sigma[6] * (1 + 1e-12);
    es_matrix *m = with_spectrum("test/straddle", 800, 128, sigma);
    es_svd *t = iterated_top6(m);
    ck_assert(!t->cert.passed);
    ck_assert(t->cert.vector_bound > TOL);
    ck_assert(t->cert.min_gap < 1e-10);
    ck_assert(t->cert.sigma_bound <= TOL);
    es_svd_release(t);
    es_matrix_release(m);
}
END_TEST

/* An iteration budget of one step cannot converge: dsyevr answers, with the
 * very bits of the dense path (the default at this d), certified. */
START_TEST(iteration_budget_falls_back_to_dsyevr)
{
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_msg(es_gen_gaussian("gen/slow", 2000, 200, 0.5, 10.0, 13, &m, &err) == 0, "%s", err.message);
    es_svd *dense = topk_ok(m, ES_CENTER_COLUMNS, 12);
    ck_assert_str_eq(dense->eigensolver, "dsyevr");
    es_topk_iteration_set(8, 1);
    es_svd *t = topk_ok(m, ES_CENTER_COLUMNS, 12);
    es_topk_iteration_set(0, 0);
    ck_assert_str_eq(t->eigensolver, "dsyevr");
    ck_assert(t->cert.passed);
    ck_assert_mem_eq(t->s, dense->s, 12 * sizeof *t->s);
    ck_assert_mem_eq(t->vt, dense->vt, 12 * 200 * sizeof *t->vt);
    es_svd_release(t);
    es_svd_release(dense);
    es_matrix_release(m);
}
END_TEST

START_TEST(method_rule)
{
    ck_assert_str_eq(es_method_name(ES_METHOD_EXACT), "exact");
    ck_assert_str_eq(es_method_name(ES_METHOD_TOPK), "topk");
    ck_assert_str_eq(es_method_name(ES_METHOD_VALUES), "values");
    ck_assert_int_eq(es_method_resolve(ES_METHOD_VALUES, 50257, 768, 30), ES_METHOD_VALUES); /* asked for only */
    ck_assert_int_eq(es_method_resolve(ES_METHOD_AUTO, 50257, 768, 30), ES_METHOD_TOPK);
    ck_assert_int_eq(es_method_resolve(ES_METHOD_AUTO, 50257, 768, 97), ES_METHOD_EXACT); /* > 768/8 */
    ck_assert_int_eq(es_method_resolve(ES_METHOD_AUTO, 1024, 768, 3), ES_METHOD_EXACT);   /* small */
    ck_assert_int_eq(es_method_resolve(ES_METHOD_AUTO, 768, 50257, 3), ES_METHOD_EXACT);  /* wide */
    ck_assert_int_eq(es_method_resolve(ES_METHOD_EXACT, 50257, 768, 3), ES_METHOD_EXACT);
    ck_assert_int_eq(es_method_resolve(ES_METHOD_TOPK, 1024, 768, 3), ES_METHOD_TOPK);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("topk");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, wpe_matches_exact);
    tcase_add_test(tc, known_spectrum);
    tcase_add_test(tc, degenerate_fails_certificate);
    tcase_add_test(tc, near_degenerate_pair);
    tcase_add_test(tc, residual_flags_lost_accuracy);
    tcase_add_test(tc, certificate_is_measured_on_x);
    tcase_add_test(tc, iterated_matches_exact);
    tcase_add_test(tc, iterated_close_and_repeated);
    tcase_add_test(tc, iterated_repeated_pair_falls_back);
    tcase_add_test(tc, iterated_pair_straddling_k_fails);
    tcase_add_test(tc, iteration_budget_falls_back_to_dsyevr);
    tcase_add_test(tc, method_rule);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
