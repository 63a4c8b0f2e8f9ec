/* Toeplitz score: exact 1 for sinusoidal Gram / cosine matrices and for RoPE's
 * rotated q.k matrix, per-offset means equal to the closed forms, a hand-computed
 * 2 x 2 value, position lists, a random matrix scoring clearly below 1, errors. */
#include "analysis/helpers.h"
#include "check_main.h"
#include "embedscope/positional.h"

static size_t *iota(size_t n)
{
    size_t *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    return idx;
}

/* G = diag(1, 3): offset 0 mean 2, offsets +-1 mean 0; residual 1 + 1, total
 * variance around mean 1: 0 + 1 + 1 + 4 = 6, so the score is 1 - 2/6. */
START_TEST(two_by_two_by_hand)
{
    const double g[] = { 1, 0, 0, 3 };
    es_toeplitz *t = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_toeplitz_score(g, 2, NULL, &t, &err), 0);
    ck_assert_double_eq_tol(t->score, 2.0 / 3.0, 1e-15);
    ck_assert_uint_eq(t->span, 1);
    ck_assert_double_eq(t->diag_mean[1], 2.0);   /* offset 0 */
    ck_assert_double_eq(t->diag_mean[0], 0.0);   /* offset -1 */
    ck_assert_uint_eq(t->diag_count[1], 2);
    ck_assert_uint_eq(t->diag_count[2], 1);
    es_toeplitz_free(t);
    const double constant[] = { 5, 5, 5, 5 };
    ck_assert_int_eq(es_toeplitz_score(constant, 2, NULL, &t, &err), 0);
    ck_assert_double_eq(t->score, 1.0);
    es_toeplitz_free(t);
}
END_TEST

/* Subnormal rows (finite) are unit rows of the cosine matrix like any other: the
 * cosine Gram of rows c_i * (1, 0) and c_i * (0, 1), alternating, with subnormal c_i,
 * is the Toeplitz matrix of offsets (1 at even, 0 at odd), score 1. */
START_TEST(subnormal_rows_cosine)
{
    const double x[8] = { 5e-324, 0, 0, 1e-322, 2e-320, 0, 0, 4.9e-310 };
    es_matrix *m = matrix_of(x, 4, 2);
    size_t *idx = iota(4);
    es_toeplitz *t = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_toeplitz_compute(m, idx, 4, ES_GRAM_COSINE, &t, &err) == 0, "%s", err.message);
    ck_assert_double_eq_tol(t->score, 1.0, 1e-15);
    ck_assert_double_eq_tol(t->diag_mean[t->span], 1.0, 1e-15);     /* offset 0 */
    ck_assert_double_eq_tol(t->diag_mean[t->span + 1], 0.0, 1e-15); /* offset 1 */
    ck_assert_double_eq_tol(t->diag_mean[t->span + 2], 1.0, 1e-15); /* offset 2 */
    es_toeplitz_free(t);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* G_ij = f(p_i - p_j) for uneven positions p: Toeplitz in positions (score 1), not in
 * matrix diagonals (score < 1). */
START_TEST(positions_define_offsets)
{
    const size_t pos[] = { 0, 1, 3, 7, 9 };
    double g[25];
    for (size_t i = 0; i < 5; i++)
        for (size_t j = 0; j < 5; j++) {
            double o = (double)pos[i] - (double)pos[j];
            g[i * 5 + j] = cos(0.3 * o) + 0.1 * o;
        }
    es_toeplitz *t = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_toeplitz_score(g, 5, pos, &t, &err), 0);
    ck_assert_double_eq_tol(t->score, 1.0, 1e-14);
    ck_assert_uint_eq(t->span, 9);
    ck_assert_uint_eq(t->diag_count[9 + 4], 1);     /* only 7 - 3 has offset 4 */
    ck_assert_uint_eq(t->diag_count[9 + 5], 0);     /* no pair 5 apart */
    es_toeplitz_free(t);
    ck_assert_int_eq(es_toeplitz_score(g, 5, NULL, &t, &err), 0);
    ck_assert(t->score < 0.99);
    es_toeplitz_free(t);
}
END_TEST

/* Sinusoidal: PE(p).PE(q) = sum_i cos(w_i (p - q)), norms sqrt(d/2): both the Gram
 * and the cosine matrix are exactly Toeplitz; per-offset means match the closed form. */
START_TEST(sinusoidal_scores_one)
{
    const size_t n = 300, d = 64;
    es_matrix *m = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_gen_sinusoidal("test/pe", n, d, 10000, &m, &err), 0);
    size_t *idx = iota(n);
    for (int kind = ES_GRAM_DOT; kind <= ES_GRAM_COSINE; kind++) {
        es_toeplitz *t = NULL;
        ck_assert_int_eq(es_toeplitz_compute(m, idx, n, (es_gram_kind)kind, &t, &err), 0);
        ck_assert_double_eq_tol(t->score, 1.0, 1e-12);
        ck_assert_uint_eq(t->span, n - 1);
        for (size_t delta = 0; delta < n; delta += 37) {
            double want = 0;
            for (size_t i = 0; i < d / 2; i++)
                want += cos(pow(10000, -2.0 * (double)i / (double)d) * (double)delta);
            if (kind == ES_GRAM_COSINE)
                want *= 2.0 / (double)d;
            ck_assert_double_eq_tol(t->diag_mean[n - 1 + delta], want, 1e-11);
            ck_assert_double_eq_tol(t->diag_mean[n - 1 - delta], want, 1e-11);
        }
        es_toeplitz_free(t);
    }
    /* Every third row: offsets are item-index differences, still exactly Toeplitz. */
    size_t sub[100];
    for (size_t i = 0; i < 100; i++)
        sub[i] = 3 * i;
    es_toeplitz *t = NULL;
    ck_assert_int_eq(es_toeplitz_compute(m, sub, 100, ES_GRAM_COSINE, &t, &err), 0);
    ck_assert_double_eq_tol(t->score, 1.0, 1e-12);
    ck_assert_uint_eq(t->span, 297);
    es_toeplitz_free(t);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* A Gaussian matrix has no offset structure beyond the diagonal. */
START_TEST(random_matrix_scores_low)
{
    es_matrix *m = gaussian(200, 64, 0.3, 21);
    size_t *idx = iota(200);
    for (int kind = ES_GRAM_DOT; kind <= ES_GRAM_COSINE; kind++) {
        es_toeplitz *t = NULL;
        es_err err = { 0 };
        ck_assert_int_eq(es_toeplitz_compute(m, idx, 200, (es_gram_kind)kind, &t, &err), 0);
        ck_assert_msg(t->score < 0.5, "random %s score %g", kind == ES_GRAM_COSINE ? "cosine" : "gram", t->score);
        es_toeplitz_free(t);
    }
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* RoPE: S[m][n] = sum_i q_i^T R((n - m) t_i) k_i depends on n - m only. Entries are
 * checked against that closed form and the score is 1. */
START_TEST(rope_relative_property)
{
    const size_t n = 200, d = 32;
    es_matrix *rope = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_gen_rope("test/rope", n, d, 10000, &rope, &err), 0);
    double q[32], k[32];
    for (size_t i = 0; i < d; i++) {
        q[i] = sin(1.7 * (double)i + 0.3);
        k[i] = cos(0.9 * (double)i * (double)i - 1.1);
    }
    es_toeplitz *t = NULL;
    double *s = NULL;
    ck_assert_msg(es_rope_relative(rope, "rope", q, k, &t, &s, &err) == 0, "%s", err.message);
    ck_assert_double_eq_tol(t->score, 1.0, 1e-12);
    const size_t pairs[][2] = { { 0, 0 }, { 5, 17 }, { 150, 3 }, { 199, 199 } };
    for (size_t c = 0; c < 4; c++) {
        size_t mm = pairs[c][0], nn = pairs[c][1];
        double want = 0;
        for (size_t i = 0; i < d / 2; i++) {
            double a = ((double)nn - (double)mm) * pow(10000, -2.0 * (double)i / (double)d);
            double q0 = q[2 * i], q1 = q[2 * i + 1], k0 = k[2 * i], k1 = k[2 * i + 1];
            /* q^T R(a) k with R(a) = [[cos, -sin], [sin, cos]] */
            want += q0 * (cos(a) * k0 - sin(a) * k1) + q1 * (sin(a) * k0 + cos(a) * k1);
        }
        ck_assert_double_eq_tol(s[mm * n + nn], want, 1e-11);
    }
    free(s);
    es_toeplitz_free(t);
    es_matrix_release(rope);
}
END_TEST

START_TEST(errors_and_names)
{
    es_toeplitz *t = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_toeplitz_score(NULL, 0, NULL, &t, &err), err, ES_E_PARAM, "rows");
    es_matrix *m = gaussian(10, 5, 0.5, 3);
    ck_assert_fails(es_toeplitz_compute(m, NULL, 0, ES_GRAM_DOT, &t, &err), err, ES_E_PARAM, "rows");
    double q[5] = { 0 }, k[5] = { 0 };
    ck_assert_fails(es_rope_relative(m, "rope", q, k, &t, NULL, &err), err, ES_E_PARAM, "rope");
    ck_assert_ptr_null(t);
    es_toeplitz_free(NULL);
    es_matrix_release(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("toeplitz");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, two_by_two_by_hand);
    tcase_add_test(tc, positions_define_offsets);
    tcase_add_test(tc, sinusoidal_scores_one);
    tcase_add_test(tc, random_matrix_scores_low);
    tcase_add_test(tc, rope_relative_property);
    tcase_add_test(tc, errors_and_names);
    tcase_add_test(tc, subnormal_rows_cosine);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
