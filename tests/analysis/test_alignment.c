/* Weight alignment on generated matrices: capture equals a plain-loop projection,
 * summaries are the means of the leading captures, overlaps are squared dot
 * products, self-alignment is 1 then 0, and errors. The real GPT-2 q/k/v against
 * W_pos are compared with numpy goldens in test_golden_positional.c. */
#include "analysis/helpers.h"
#include "check_main.h"
#include "embedscope/positional.h"

static double dot(const double *a, const double *b, size_t d)
{
    double s = 0;
    for (size_t t = 0; t < d; t++)
        s += a[t] * b[t];
    return s;
}

START_TEST(matches_loops)
{
    es_matrix *mw = gaussian(64, 32, 1.0, 31), *mr = gaussian(100, 32, 0.5, 32);
    es_svd *w = svd_of(mw, NULL, 0, ES_CENTER_NONE), *r = svd_of(mr, NULL, 0, ES_CENTER_COLUMNS);
    es_alignment *a = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_alignment_compute(w, r, 5, 10, 8, 0, &a, &err) == 0, "%s", err.message);
    ck_assert_uint_eq(a->capture->count, 32);
    ck_assert_uint_eq(a->capture->k, 5);
    ck_assert_double_eq(a->capture->baseline, 5.0 / 32);
    double cap[32];
    for (size_t j = 0; j < 32; j++) {
        cap[j] = 0;
        for (size_t i = 0; i < 5; i++)
            cap[j] += pow(dot(w->vt + j * 32, r->vt + i * 32, 32), 2);
        ck_assert_double_eq_tol(a->capture->capture[j], cap[j], 1e-12);
    }
    const size_t want_m[] = { 1, 5, 10, 20 };   /* 50 > 32 vectors: left out */
    ck_assert_uint_eq(a->n_top, 4);
    for (size_t i = 0; i < 4; i++) {
        double mean = 0;
        for (size_t j = 0; j < want_m[i]; j++)
            mean += cap[j] / (double)want_m[i];
        ck_assert_uint_eq(a->top_m[i], want_m[i]);
        ck_assert_double_eq_tol(a->top_mean[i], mean, 1e-12);
    }
    ck_assert_uint_eq(a->overlap->rows, 10);
    ck_assert_uint_eq(a->overlap->cols, 8);
    for (size_t i = 0; i < 10; i++)
        for (size_t j = 0; j < 8; j++)
            ck_assert_double_eq_tol(a->overlap->values[i * 8 + j],
                                    pow(dot(w->vt + i * 32, r->vt + j * 32, 32), 2), 1e-12);
    es_alignment_free(a);
    es_svd_release(w);
    es_svd_release(r);
    es_matrix_release(mw);
    es_matrix_release(mr);
}
END_TEST

/* W = R: the top k vectors are inside (1), the rest orthogonal (0). */
START_TEST(self_alignment)
{
    es_matrix *m = gaussian(80, 24, 0.6, 33);
    es_svd *s = svd_of(m, NULL, 0, ES_CENTER_NONE);
    es_alignment *a = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_alignment_compute(s, s, 5, 0, 0, 0, &a, &err), 0);
    ck_assert_double_eq_tol(a->top_mean[0], 1.0, 1e-12);   /* m = 1 */
    ck_assert_double_eq_tol(a->top_mean[1], 1.0, 1e-12);   /* m = 5 */
    ck_assert_double_eq_tol(a->top_mean[2], 0.5, 1e-12);   /* m = 10 */
    ck_assert_double_eq_tol(a->top_mean[3], 0.25, 1e-12);  /* m = 20 */
    ck_assert_uint_eq(a->overlap->rows, 24);
    for (size_t i = 0; i < 24; i++)
        ck_assert_double_eq_tol(a->overlap->values[i * 24 + i], 1.0, 1e-12);
    es_alignment_free(a);
    es_svd_release(s);
    es_matrix_release(m);
}
END_TEST

/* The summaries' count (the HTTP gate plans the table "top_mean" with it):
 * sizes 1, 5, 10, 20, 50 up to the number of W's vectors. */
START_TEST(summary_count)
{
    const size_t count[] = { 0, 1, 4, 5, 9, 10, 19, 20, 49, 50, 768 }, want[] = { 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5 };
    for (size_t i = 0; i < sizeof count / sizeof *count; i++)
        ck_assert_uint_eq(es_alignment_summary_count(count[i]), want[i]);
}
END_TEST

START_TEST(errors)
{
    es_matrix *m1 = gaussian(40, 16, 0.5, 34), *m2 = gaussian(40, 12, 0.5, 35);
    es_svd *a = svd_of(m1, NULL, 0, ES_CENTER_NONE), *b = svd_of(m2, NULL, 0, ES_CENTER_NONE);
    es_alignment *al = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_alignment_compute(a, a, 0, 0, 0, 0, &al, &err), err, ES_E_PARAM, "k");
    ck_assert_fails(es_alignment_compute(a, a, 17, 0, 0, 0, &al, &err), err, ES_E_PARAM, "k");
    ck_assert_int_eq(es_alignment_compute(a, b, 3, 0, 0, 0, &al, &err), -1);
    ck_assert_int_eq(err.code, ES_E_INCOMPATIBLE);
    ck_assert_int_eq(es_alignment_compute(a, a, 3, 99, 0, 0, &al, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_ptr_null(al);
    es_alignment_free(NULL);
    es_svd_release(a);
    es_svd_release(b);
    es_matrix_release(m1);
    es_matrix_release(m2);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("alignment");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, matches_loops);
    tcase_add_test(tc, self_alignment);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, summary_count);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
