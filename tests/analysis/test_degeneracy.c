/* Degeneracy: groups of near-equal singular values on constructed spectra with
 * known groups, on sinusoidal encodings (whose sin/cos pair of one frequency is
 * degenerate), and parameter errors. */
#include "analysis/helpers.h"
#include "check_main.h"
#include "embedscope/positional.h"

/* Find the groups of s and check them against the expected [start, end) pairs. */
static void check_groups(const double *s, size_t r, double threshold, const size_t (*want)[2],
                         size_t n_want)
{
    es_degeneracy *d = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_degeneracy_find(s, r, threshold, &d, &err) == 0, "%s", err.message);
    ck_assert_double_eq(d->threshold, threshold);
    ck_assert_uint_eq(d->count, n_want);
    for (size_t g = 0; g < n_want; g++) {
        ck_assert_uint_eq(d->start[g], want[g][0]);
        ck_assert_uint_eq(d->end[g], want[g][1]);
    }
    es_degeneracy_free(d);
}

START_TEST(constructed_spectrum)
{
    /* gaps: 1e-3, 5e-4 | big | big | 3e-4 | big | big | 2e-4, 3e-4 | big */
    const double s[] = { 10, 9.99, 9.985, 5, 3, 2.999, 1, 0.5, 0.4999, 0.49975, 0.1 };
    const size_t want[][2] = { { 0, 3 }, { 4, 6 }, { 7, 10 } };
    check_groups(s, 11, ES_DEGENERACY_GAP, want, 3);
    /* A looser threshold (0.45) also joins 5 -> 3 (gap 0.4); 9.985 -> 5 (0.499) still
     * separates, so 5 starts a new group. */
    const size_t loose[][2] = { { 0, 3 }, { 3, 6 }, { 7, 10 } };
    check_groups(s, 11, 0.45, loose, 3);
    /* A tighter one (4e-4) drops the 1e-3 and 5e-4 gaps. */
    const size_t tight[][2] = { { 4, 6 }, { 7, 10 } };
    check_groups(s, 11, 4e-4, tight, 2);
}
END_TEST

START_TEST(zeros_and_small_inputs)
{
    const double z[] = { 3, 1, 0, 0, 0 };
    const size_t want[][2] = { { 2, 5 } };
    check_groups(z, 5, ES_DEGENERACY_GAP, want, 1);
    const double one[] = { 1 };
    check_groups(one, 1, ES_DEGENERACY_GAP, NULL, 0);
    check_groups(NULL, 0, ES_DEGENERACY_GAP, NULL, 0);
    const double all_equal[] = { 2, 2, 2, 2 };
    const size_t whole[][2] = { { 0, 4 } };
    check_groups(all_equal, 4, ES_DEGENERACY_GAP, whole, 1);
}
END_TEST

/* Sinusoidal encodings: the sin and cos columns of a fast frequency over 1024
 * positions have near-equal norms (relative gap ~ 1/n) and are nearly orthogonal, so
 * they form one degenerate pair; with base 1e8 (d=4) the second frequency is so slow
 * that its cos column is ~1 and its sin column ~1e-4 p: singular values 32, 22.6,
 * 22.6, 0.95 — exactly one group [1, 3). d = 2: the pair alone, [0, 2). */
START_TEST(sinusoidal_pairs)
{
    const struct { size_t d; double base; size_t start, end; } cases[] = {
        { 2, 1e4, 0, 2 }, { 4, 1e8, 1, 3 }, { 6, 1e12, 1, 3 } };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        es_matrix *m = NULL;
        es_err err = { 0 };
        ck_assert_int_eq(es_gen_sinusoidal("test/pe", 1024, cases[c].d, cases[c].base, &m, &err), 0);
        es_svd *s = svd_of(m, NULL, 0, ES_CENTER_NONE);
        const size_t want[][2] = { { cases[c].start, cases[c].end } };
        check_groups(s->s, s->r, ES_DEGENERACY_GAP, want, 1);
        es_svd_release(s);
        es_matrix_release(m);
    }
}
END_TEST

START_TEST(bad_threshold)
{
    const double s[] = { 2, 1 };
    const double bad[] = { 0, -0.1, 1, 2, NAN };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        es_degeneracy *d = NULL;
        es_err err = { 0 };
        ck_assert_fails(es_degeneracy_find(s, 2, bad[i], &d, &err), err, ES_E_PARAM, "gap");
        ck_assert_ptr_null(d);
    }
    es_degeneracy_free(NULL);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("degeneracy");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, constructed_spectrum);
    tcase_add_test(tc, zeros_and_small_inputs);
    tcase_add_test(tc, sinusoidal_pairs);
    tcase_add_test(tc, bad_threshold);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
