/* Golden values: the core analyses on the shipped GPT-2 / GPT-1 weights against
 * numpy (tests/golden/golden.json, written by tests/golden/make_golden.py with
 * np.linalg.svd in float64). Data driven: every case of the file is checked.
 *
 * Tolerance: the file's "tolerance" (1e-9), relative to each golden value
 * (singular values, ratios, sums, capture values, similarities, PCA coordinates;
 * each PCA component up to one sign, as singular vectors are). Counts (n, r,
 * n50/n90/n99, capture count) must match exactly. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "embedscope/analysis.h"
#include "embedscope/config.h"
#include "embedscope/rowsel.h"

#define GOLDEN "tests/golden/golden.json"

static es_catalogue *catalogue;
static json_t *golden;
static double tolerance;

static void setup(void)
{
    es_err err = {0};
    json_error_t jerr;
    unsetenv("EMBEDSCOPE_DATA_DIR");
    ck_assert_msg(es_config_load_default(&catalogue, &err) == 0, "%s", err.message);
    golden = json_load_file(GOLDEN, JSON_REJECT_DUPLICATES, &jerr);
    ck_assert_msg(golden != NULL, "%s: line %d: %s", GOLDEN, jerr.line, jerr.text);
    tolerance = json_real_value(json_object_get(golden, "tolerance"));
    ck_assert(tolerance > 0 && tolerance <= 1e-9);
}

static void teardown(void)
{
    json_decref(golden);
    es_catalogue_free(catalogue);
}

/* ---------------------------------------------------------------- helpers */

/* A string / number / integer member of a golden case (must exist). */
static const char *str_of(const json_t *c, const char *key)
{
    const char *s = json_string_value(json_object_get(c, key));
    ck_assert_msg(s != NULL, "golden case lacks string \"%s\"", key);
    return s;
}

static double num_of(const json_t *c, const char *key)
{
    const json_t *v = json_object_get(c, key);
    ck_assert_msg(json_is_number(v), "golden case lacks number \"%s\"", key);
    return json_number_value(v);
}

static size_t size_of(const json_t *c, const char *key)
{
    const json_t *v = json_object_get(c, key);
    ck_assert_msg(json_is_integer(v) && json_integer_value(v) >= 0, "golden case lacks count \"%s\"", key);
    return (size_t)json_integer_value(v);
}

/* Array member of a case (must exist). */
static const json_t *array_of(const json_t *c, const char *key)
{
    const json_t *a = json_object_get(c, key);
    ck_assert_msg(json_is_array(a) && json_array_size(a) > 0, "golden case lacks array \"%s\"", key);
    return a;
}

/* The cases of one section of the golden file. */
static const json_t *section(const char *name)
{
    return array_of(golden, name);
}

/* True when got is within tol * scale of want. */
static bool close_to(double got, double want, double scale)
{
    return fabs(got - want) <= tolerance * fabs(scale);
}

/* Assert got == want to the relative tolerance; `what` labels the failure. */
static void expect_rel(double got, double want, const char *what, size_t i)
{
    ck_assert_msg(close_to(got, want, want), "%s[%zu]: got %.17g, numpy %.17g (rel. error %.3g)", what, i, got,
                  want, fabs(got - want) / fabs(want));
}

/* Assert got[i] == golden array[i] (relative) for every entry of the array. */
static void expect_array(const double *got, size_t n_got, const json_t *want, const char *what)
{
    ck_assert_msg(json_array_size(want) <= n_got, "%s: %zu golden values, %zu computed", what,
                  json_array_size(want), n_got);
    for (size_t i = 0; i < json_array_size(want); i++)
        expect_rel(got[i], json_number_value(json_array_get(want, i)), what, i);
}

/* The matrix with that id in the embedded default. */
static const es_matrix *matrix(const char *id)
{
    const es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_msg(es_catalogue_lookup(catalogue, id, "matrix", &m, &err) == 0, "%s", err.message);
    return m;
}

/* Decomposition of the items of `id` selected by slice text `rows`, centred. */
static es_svd *compute(const char *id, const char *rows, const char *center)
{
    const es_matrix *m = matrix(id);
    es_rowsel sel = {0};
    es_centering c;
    size_t *idx = NULL, n = 0;
    es_svd *svd = NULL;
    es_err err = {0};
    ck_assert_msg(es_rowsel_parse(rows, "rows", &sel, &err) == 0, "%s", err.message);
    ck_assert_msg(es_rowsel_resolve(&sel, es_matrix_items(m), &idx, &n, &err) == 0, "%s", err.message);
    es_rowsel_free(&sel);
    ck_assert_int_eq(es_centering_parse(center, &c), 0);
    ck_assert_msg(es_svd_compute(m, idx, n, c, &svd, &err) == 0, "%s", err.message);
    free(idx);
    return svd;
}

/* The decompositions a test has computed, by (id, rows, center): the capture cases share 4 of their
 * 12 and each PCA case's second round its first's (8 + 3 exact SVDs of up to 1023 x 768 fewer, some
 * 4 CPU s a build). A test forks, so each starts empty; forget_all() at its end (LeakSanitizer). */
static struct {
    char key[200];
    es_svd *svd;
} memo[8];
static size_t n_memo;

/* compute(), once per (id, rows, center) within a test; the caller releases what it gets. */
static es_svd *decompose(const char *id, const char *rows, const char *center)
{
    char key[200];
    snprintf(key, sizeof key, "%s|%s|%s", id, rows, center);
    for (size_t i = 0; i < n_memo; i++)
        if (strcmp(memo[i].key, key) == 0)
            return es_svd_retain(memo[i].svd);
    es_svd *svd = compute(id, rows, center);
    if (n_memo < sizeof memo / sizeof *memo) {
        snprintf(memo[n_memo].key, sizeof memo[n_memo].key, "%s", key);
        memo[n_memo++].svd = es_svd_retain(svd);
    }
    return svd;
}

static void forget_all(void)
{
    for (size_t i = 0; i < n_memo; i++)
        es_svd_release(memo[i].svd);
    n_memo = 0;
}

/* "id rows=R center=C" label of a case, in a static buffer. */
static const char *label(const char *id, const char *rows, const char *center)
{
    static char buf[160];
    snprintf(buf, sizeof buf, "%s rows=\"%s\" center=%s", id, rows, center);
    return buf;
}

/* ---------------------------------------------------------------- tests */

/* The golden file was computed from the bytes the default config loads. */
START_TEST(inputs_match)
{
    const json_t *inputs = json_object_get(golden, "inputs");
    const char *ids[] = {"gpt2-small/wpe", "gpt2-small/h0.c_attn", "openai-gpt/wpe"};
    const char *files[] = {"data/gpt2-small/wpe.npy", "data/gpt2-small/h0_c_attn.npy", "data/openai-gpt/wpe.npy"};
    for (size_t i = 0; i < 3; i++)
        ck_assert_str_eq(matrix(ids[i])->prov.file_sha256, str_of(inputs, files[i]));
}
END_TEST

/* The comparison can fail: a value 3 tolerances away is rejected, one within is accepted. */
START_TEST(comparison_rejects_perturbation)
{
    const json_t *c = json_array_get(section("spectra"), 0);
    double s0 = json_number_value(json_array_get(array_of(c, "singular_values"), 0));
    ck_assert(!close_to(s0 * (1 + 3 * tolerance), s0, s0));
    ck_assert(!close_to(s0 * (1 - 3 * tolerance), s0, s0));
    ck_assert(close_to(s0 * (1 + tolerance / 3), s0, s0));
}
END_TEST

/* Singular values, explained-variance ratios, sums and n50/n90/n99 per case. */
START_TEST(spectra)
{
    const json_t *cases = section("spectra");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        const char *id = str_of(c, "matrix"), *rows = str_of(c, "rows"), *center = str_of(c, "center");
        char what[200];
        es_svd *svd = compute(id, rows, center);
        es_spectrum *sp = NULL;
        es_err err = {0};
        ck_assert_msg(es_spectrum_from_svd(svd, &sp, &err) == 0, "%s", err.message);
        const char *l = label(id, rows, center);
        ck_assert_msg(svd->n == size_of(c, "n") && sp->r == size_of(c, "r"), "%s: n %zu r %zu", l, svd->n, sp->r);
        snprintf(what, sizeof what, "%s singular_values", l);
        expect_array(sp->s, sp->r, array_of(c, "singular_values"), what);
        snprintf(what, sizeof what, "%s evr", l);
        expect_array(sp->evr, sp->r, array_of(c, "evr"), what);
        double sum = 0;
        for (size_t j = 0; j < sp->r; j++)
            sum += sp->s[j];
        snprintf(what, sizeof what, "%s sum_singular_values", l);
        expect_rel(sum, num_of(c, "sum_singular_values"), what, 0);
        snprintf(what, sizeof what, "%s total_ss", l);
        expect_rel(svd->total_ss, num_of(c, "total_ss"), what, 0);
        ck_assert_msg(sp->n50 == size_of(c, "n50") && sp->n90 == size_of(c, "n90") && sp->n99 == size_of(c, "n99"),
                      "%s: n50/n90/n99 %zu/%zu/%zu, numpy %zu/%zu/%zu", l, sp->n50, sp->n90, sp->n99,
                      size_of(c, "n50"), size_of(c, "n90"), size_of(c, "n99"));
        es_spectrum_free(sp);
        es_svd_release(svd);
    }
}
END_TEST

/* Position of item `item` in the PCA's rows (must be selected). */
static size_t position_of(const es_pca *p, size_t item)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->rows[i] == item)
            return i;
    ck_abort_msg("item %zu not selected", item);
    return 0;
}

/* Top-k coordinates of the golden items, each component up to one sign: in the
 * first round from a fresh decomposition, in the second after its left vectors
 * are formed (which must not change the coordinates' source: X V either way). */
START_TEST(pca_coordinates)
{
    const json_t *cases = section("pca");
    for (size_t i = 0; i < 2 * json_array_size(cases); i++) {
        bool via_left = i >= json_array_size(cases);
        const json_t *c = json_array_get(cases, i % json_array_size(cases));
        const char *id = str_of(c, "matrix"), *rows = str_of(c, "rows"), *center = str_of(c, "center");
        const json_t *items = array_of(c, "items"), *coords = array_of(c, "coords"), *s = array_of(c, "singular_values");
        size_t k = size_of(c, "k");
        es_svd *svd = decompose(id, rows, center);
        es_pca *p = NULL;
        es_err err = {0};
        size_t ld = 0;
        ck_assert_msg(!via_left || es_svd_left(svd, matrix(id), k, &ld, &err), "%s", err.message);
        ck_assert_msg(es_pca_from_svd(svd, matrix(id), k, &p, &err) == 0, "%s", err.message);
        const char *l = label(id, rows, center);
        for (size_t j = 0; j < k; j++) {
            double sj = json_number_value(json_array_get(s, j));
            /* the sign that best aligns this component with numpy's */
            double dot = 0;
            for (size_t t = 0; t < json_array_size(items); t++)
                dot += p->coords[position_of(p, (size_t)json_integer_value(json_array_get(items, t))) * k + j] *
                       json_number_value(json_array_get(json_array_get(coords, t), j));
            double sign = dot < 0 ? -1.0 : 1.0;
            for (size_t t = 0; t < json_array_size(items); t++) {
                size_t item = (size_t)json_integer_value(json_array_get(items, t));
                double got = sign * p->coords[position_of(p, item) * k + j];
                double want = json_number_value(json_array_get(json_array_get(coords, t), j));
                ck_assert_msg(close_to(got, want, want), "%s: item %zu component %zu: got %.17g, numpy %.17g", l,
                              item, j, got, want);
            }
            expect_rel(svd->s[j], sj, l, j);
        }
        es_pca_free(p);
        es_svd_release(svd);
    }
    forget_all();
}
END_TEST

/* Capture of GPT-2's h0.q/k/v model-space vectors by W_pos's top-k subspace. */
START_TEST(capture)
{
    const json_t *cases = section("capture");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        es_svd *a = decompose(str_of(c, "a"), str_of(c, "a_rows"), str_of(c, "a_center"));
        es_svd *b = decompose(str_of(c, "b"), str_of(c, "b_rows"), str_of(c, "b_center"));
        size_t k = size_of(c, "k");
        es_capture *cap = NULL;
        es_err err = {0};
        ck_assert_msg(es_capture_compute(a, k, b, &cap, &err) == 0, "%s", err.message);
        char what[200];
        snprintf(what, sizeof what, "capture of %s by %s top %zu", str_of(c, "b"), str_of(c, "a"), k);
        ck_assert_uint_eq(cap->count, size_of(c, "count"));
        expect_array(cap->capture, cap->count, array_of(c, "capture"), what);
        expect_rel(cap->sum, num_of(c, "sum"), what, cap->count);
        expect_rel(cap->baseline, num_of(c, "baseline"), what, 0);
        es_capture_free(cap);
        es_svd_release(a);
        es_svd_release(b);
    }
    forget_all();
}
END_TEST

/* Cosine similarity of one item to a few others. */
START_TEST(cosine)
{
    const json_t *cases = section("cosine");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        const json_t *items = array_of(c, "items");
        size_t n = json_array_size(items), row = size_of(c, "row");
        size_t *idx = es_malloc(n * sizeof *idx);
        for (size_t t = 0; t < n; t++)
            idx[t] = (size_t)json_integer_value(json_array_get(items, t));
        double *sim = NULL;
        es_err err = {0};
        ck_assert_msg(es_cosine_row(matrix(str_of(c, "matrix")), row, idx, n, ES_CENTER_NONE, &sim, &err) == 0, "%s", err.message);
        char what[120];
        snprintf(what, sizeof what, "%s cosine of row %zu", str_of(c, "matrix"), row);
        expect_array(sim, n, array_of(c, "similarity"), what);
        free(sim);
        free(idx);
    }
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("golden");
    TCase *tc = tcase_create("numpy");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, inputs_match);
    tcase_add_test(tc, comparison_rejects_perturbation);
    tcase_add_test(tc, spectra);
    tcase_add_test(tc, pca_coordinates);
    tcase_add_test(tc, capture);
    tcase_add_test(tc, cosine);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
