/* Shared fixtures for the analysis tests: small matrices, decompositions and
 * error assertions. */
#ifndef ES_TEST_ANALYSIS_HELPERS_H
#define ES_TEST_ANALYSIS_HELPERS_H

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "embedscope/analysis.h"

/* A rows x cols matrix (model axis: columns) holding a copy of values. */
static inline es_matrix *matrix_of(const double *values, size_t rows, size_t cols)
{
    double *data = es_malloc(rows * cols * sizeof *data);
    memcpy(data, values, rows * cols * sizeof *data);
    es_provenance prov = { 0 };
    return es_matrix_from_data("test/m", data, rows, cols, ES_AXIS_COLUMNS, &prov);
}

/* Seeded Gaussian test matrix with singular values s_j = (j+1)^-decay. */
static inline es_matrix *gaussian(size_t rows, size_t cols, double decay, uint64_t seed)
{
    es_matrix *m = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_gen_gaussian("test/g", rows, cols, decay, 1.0, seed, &m, &err) == 0, "%s",
                  err.message);
    return m;
}

/* Decomposition of the selected items (all when idx == NULL). */
static inline es_svd *svd_of(const es_matrix *m, const size_t *idx, size_t n, es_centering c)
{
    size_t *all = NULL;
    if (!idx) {
        n = es_matrix_items(m);
        all = es_malloc(n * sizeof *all);
        for (size_t i = 0; i < n; i++)
            all[i] = i;
        idx = all;
    }
    es_svd *s = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_svd_compute(m, idx, n, c, &s, &err) == 0, "%s", err.message);
    free(all);
    return s;
}

/* The singular values alone (es_svd_values) of every item of m. */
static inline es_svd *values_of(const es_matrix *m, es_centering c)
{
    size_t n = es_matrix_items(m), *all = es_malloc(n * sizeof *all);
    for (size_t i = 0; i < n; i++)
        all[i] = i;
    es_svd *s = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_svd_values(m, all, n, c, &s, &err) == 0, "%s", err.message);
    free(all);
    return s;
}

/* All r left vectors of s (n x r row-major), formed on demand; fails the test if
 * they cannot be. */
static inline const double *left_of(const es_svd *s, const es_matrix *m)
{
    es_err err = { 0 };
    size_t ld = 0;
    const double *u = es_svd_left(s, m, s->r, &ld, &err);
    ck_assert_uint_eq(ld, s->r);
    ck_assert_msg(u != NULL, "%s", err.message);
    return u;
}

/* The call failed with `code`, naming `param`. */
#define ck_assert_fails(call, err, want_code, want_param)                         \
    do {                                                                          \
        ck_assert_int_eq((call), -1);                                             \
        ck_assert_int_eq((err).code, (want_code));                                \
        ck_assert_str_eq((err).param, (want_param));                              \
    } while (0)

#endif
