/* Generators against closed forms: sinusoidal values, norms and the Toeplitz
 * cosine (REFERENCE §6), RoPE tables, and the Gaussian generator's exact
 * singular spectrum (checked with an independent LAPACK SVD) and seeding. */
#include <lapacke.h>
#include <math.h>

#include "check_main.h"
#include "embedscope/store.h"

START_TEST(sinusoidal_values)
{
    es_matrix *m;
    es_err err = {0};
    ck_assert_int_eq(es_gen_sinusoidal("s/pe", 64, 16, 10000.0, &m, &err), 0);
    ck_assert_uint_eq(m->rows, 64);
    ck_assert_uint_eq(m->cols, 16);
    ck_assert_int_eq(m->model_axis, ES_AXIS_COLUMNS);
    static const size_t pts[][2] = {{0, 0}, {1, 0}, {5, 3}, {17, 8}, {63, 15}, {40, 14}};
    for (size_t k = 0; k < sizeof pts / sizeof *pts; k++) {
        size_t p = pts[k][0], col = pts[k][1], i = col / 2;
        double w = exp(-(double)(2 * i) / 16.0 * log(10000.0));
        double want = col % 2 ? cos((double)p * w) : sin((double)p * w);
        ck_assert_double_eq_tol(es_matrix_at(m, p, col), want, 1e-13);
    }
    ck_assert_double_eq(es_matrix_at(m, 0, 1), 1.0);
    ck_assert_double_eq_tol(es_matrix_at(m, 1, 0), sin(1.0), 1e-15);
    ck_assert_str_eq(m->prov.source, "generator:sinusoidal");
    ck_assert_str_eq(m->prov.generator, "{\"base\":10000.0,\"d_model\":16,\"n_positions\":64}");
    ck_assert_str_eq(m->prov.dtype, "f64");
    ck_assert_str_eq(m->prov.file_sha256, "");
    char want[65];
    double *x = es_matrix_items_copy(m, NULL, 64);
    es_sha256_hex(x, 64 * 16 * sizeof *x, want);
    ck_assert_str_eq(m->prov.sha256, want);
    free(x);
    es_matrix_release(m);
}
END_TEST

START_TEST(sinusoidal_norms_and_cosine)
{
    const size_t n = 200, d = 64;
    es_matrix *m;
    ck_assert_int_eq(es_gen_sinusoidal("s/pe", n, d, 10000.0, &m, NULL), 0);
    for (size_t p = 0; p < n; p++) {
        double s = 0;
        for (size_t j = 0; j < d; j++)
            s += es_matrix_at(m, p, j) * es_matrix_at(m, p, j);
        ck_assert_double_eq_tol(s, (double)d / 2.0, 1e-12);
    }
    static const size_t pairs[][2] = {{0, 1}, {3, 10}, {150, 7}, {199, 0}, {42, 42}};
    for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++) {
        size_t p = pairs[k][0], q = pairs[k][1];
        double dot = 0, delta = (double)p - (double)q, want = 0;
        for (size_t j = 0; j < d; j++)
            dot += es_matrix_at(m, p, j) * es_matrix_at(m, q, j);
        for (size_t i = 0; i < d / 2; i++)
            want += cos(pow(10000.0, -(double)(2 * i) / (double)d) * delta);
        ck_assert_double_eq_tol(dot / ((double)d / 2.0), want * 2.0 / (double)d, 1e-12);
    }
    es_matrix_release(m);
}
END_TEST

START_TEST(rope_table)
{
    es_matrix *m;
    ck_assert_int_eq(es_gen_rope("s/rope", 32, 8, 500.0, &m, NULL), 0);
    for (size_t p = 0; p < 32; p++)
        for (size_t i = 0; i < 4; i++) {
            double c = es_matrix_at(m, p, 2 * i), s = es_matrix_at(m, p, 2 * i + 1);
            ck_assert_double_eq_tol(c * c + s * s, 1.0, 1e-15);
            double theta = exp(-(double)(2 * i) / 8.0 * log(500.0));
            ck_assert_double_eq_tol(c, cos((double)p * theta), 1e-13);
            ck_assert_double_eq_tol(s, sin((double)p * theta), 1e-13);
        }
    ck_assert_str_eq(m->prov.source, "generator:rope");
    ck_assert_str_eq(m->prov.generator, "{\"base\":500.0,\"d_model\":8,\"n_positions\":32}");
    es_matrix_release(m);
}
END_TEST

START_TEST(periodic_bad_params)
{
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_gen_sinusoidal("s/x", 10, 7, 10000.0, &m, &err), -1);
    ck_assert_str_eq(err.param, "d_model");
    ck_assert_int_eq(es_gen_rope("s/x", 10, 0, 10000.0, &m, &err), -1);
    ck_assert_str_eq(err.param, "d_model");
    ck_assert_int_eq(es_gen_sinusoidal("s/x", 0, 8, 10000.0, &m, &err), -1);
    ck_assert_str_eq(err.param, "n_positions");
    ck_assert_int_eq(es_gen_sinusoidal("s/x", 10, 8, 1.0, &m, &err), -1);
    ck_assert_str_eq(err.param, "base");
    ck_assert_int_eq(es_gen_rope("s/x", 10, 8, NAN, &m, &err), -1);
    ck_assert_str_eq(err.param, "base");
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_int_eq(es_gen_sinusoidal("s/x", SIZE_MAX / 2, 8, 10.0, &m, &err), -1);
    ck_assert_int_eq(err.code, ES_E_NOMEM);
    ck_assert_ptr_null(m);
}
END_TEST

/* Singular values of m by LAPACK dgesvd on a copy, descending. */
static double *singular_values(const es_matrix *m)
{
    size_t r = m->rows < m->cols ? m->rows : m->cols;
    double *a = es_matrix_items_copy(m, NULL, m->rows), *s = es_malloc(r * sizeof *s),
           *work = es_malloc(r * sizeof *work);
    lapack_int info = LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'N', 'N', (lapack_int)m->rows, (lapack_int)m->cols, a,
                                     (lapack_int)m->cols, s, NULL, 1, NULL, 1, work);
    ck_assert_int_eq(info, 0);
    free(a);
    free(work);
    return s;
}

START_TEST(gaussian_spectrum)
{
    static const size_t shapes[][2] = {{50, 30}, {30, 50}, {64, 64}};
    for (size_t k = 0; k < 3; k++) {
        size_t n = shapes[k][0], d = shapes[k][1], r = n < d ? n : d;
        es_matrix *m;
        es_err err = {0};
        ck_assert_int_eq(es_gen_gaussian("s/g", n, d, 0.7, 3.0, 12345 + k, &m, &err), 0);
        ck_assert_uint_eq(m->rows, n);
        ck_assert_uint_eq(m->cols, d);
        double *s = singular_values(m);
        for (size_t j = 0; j < r; j++) {
            double want = 3.0 * pow((double)(j + 1), -0.7);
            ck_assert_msg(fabs(s[j] - want) <= 1e-12 * want, "s[%zu] = %.17g, want %.17g", j, s[j], want);
        }
        free(s);
        es_matrix_release(m);
    }
}
END_TEST

START_TEST(gaussian_seeding_and_provenance)
{
    es_matrix *a, *b, *c, *big;
    ck_assert_int_eq(es_gen_gaussian("s/a", 40, 20, 1.0, 2.0, 42, &a, NULL), 0);
    ck_assert_int_eq(es_gen_gaussian("s/b", 40, 20, 1.0, 2.0, 42, &b, NULL), 0);
    ck_assert_int_eq(es_gen_gaussian("s/c", 40, 20, 1.0, 2.0, 43, &c, NULL), 0);
    ck_assert_str_eq(a->prov.sha256, b->prov.sha256);
    ck_assert_str_ne(a->prov.sha256, c->prov.sha256);
    for (size_t i = 0; i < 40; i++)
        for (size_t j = 0; j < 20; j++)
            ck_assert(es_matrix_at(a, i, j) == es_matrix_at(b, i, j));
    ck_assert_double_ne(es_matrix_at(a, 0, 0), es_matrix_at(c, 0, 0));
    ck_assert_str_eq(a->prov.source, "generator:gaussian");
    ck_assert_str_eq(a->prov.generator, "{\"cols\":20,\"decay\":1.0,\"rows\":40,\"scale\":2.0,\"seed\":42}");
    double *x = es_matrix_items_copy(a, NULL, 40);
    char want[65];
    es_sha256_hex(x, 40 * 20 * sizeof *x, want);
    ck_assert_str_eq(a->prov.sha256, want);
    free(x);
    ck_assert_int_eq(es_gen_gaussian("s/big", 3, 2, 0.0, 1.0, UINT64_MAX, &big, NULL), 0);
    ck_assert_ptr_nonnull(strstr(big->prov.generator, "\"seed\":\"18446744073709551615\""));
    es_matrix_release(a);
    es_matrix_release(b);
    es_matrix_release(c);
    es_matrix_release(big);
}
END_TEST

START_TEST(gaussian_bad_params)
{
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_gen_gaussian("s/x", 0, 5, 1.0, 1.0, 1, &m, &err), -1);
    ck_assert_str_eq(err.param, "rows");
    ck_assert_int_eq(es_gen_gaussian("s/x", 5, 0, 1.0, 1.0, 1, &m, &err), -1);
    ck_assert_str_eq(err.param, "cols");
    ck_assert_int_eq(es_gen_gaussian("s/x", 5, 5, -1.0, 1.0, 1, &m, &err), -1);
    ck_assert_str_eq(err.param, "decay");
    ck_assert_int_eq(es_gen_gaussian("s/x", 5, 5, 1.0, 0.0, 1, &m, &err), -1);
    ck_assert_str_eq(err.param, "scale");
    ck_assert_int_eq(es_gen_gaussian("s/x", 5, 5, 1.0, INFINITY, 1, &m, &err), -1);
    ck_assert_str_eq(err.param, "scale");
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_ptr_null(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("generators");
    TCase *tc = tcase_create("generators");
    tcase_add_test(tc, sinusoidal_values);
    tcase_add_test(tc, sinusoidal_norms_and_cosine);
    tcase_add_test(tc, rope_table);
    tcase_add_test(tc, periodic_bad_params);
    tcase_add_test(tc, gaussian_spectrum);
    tcase_add_test(tc, gaussian_seeding_and_provenance);
    tcase_add_test(tc, gaussian_bad_params);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
