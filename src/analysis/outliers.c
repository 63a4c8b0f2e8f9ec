/* Row-norm outliers with a robust scale: median and median absolute deviation. */
#include "embedscope/positional.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The MAD of a normal distribution is 0.6745 sigma; 1.4826 = 1 / 0.6745. */
#define MAD_TO_SIGMA 1.4826
/* Relative floor of the scale: rounding noise of constant-norm rows is ~1e-16. */
#define SCALE_FLOOR 1e-9

/* qsort order of doubles, ascending (no NaN: matrices hold finite values). */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's median: the middle value, or the mean of the two middle ones. Sorts a
 * private copy; n >= 1. */
static double median_of(const double *v, size_t n)
{
    double *c = memcpy(es_malloc(n * sizeof *c), v, n * sizeof *c);
    qsort(c, n, sizeof *c, cmp_double);
    double med = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return med;
}

/* Euclidean norm of one item in model orientation. */
static double item_norm(const es_matrix *m, size_t item)
{
    size_t d = es_matrix_dim(m);
    double ss = 0;
    for (size_t j = 0; j < d; j++) {
        double x = es_matrix_item(m, item, j);
        ss += x * x;
    }
    return sqrt(ss);
}

/* Norms, robust scores and flags of the n items idx. ES_E_PARAM "threshold"
 * unless finite and > 0, "rows" if n == 0. */
int es_outliers_compute(const es_matrix *m, const size_t *idx, size_t n, double threshold,
                        es_outliers **out, es_err *err)
{
    if (!(threshold > 0 && isfinite(threshold)))
        return es_fail(err, ES_E_PARAM, "threshold",
                       "outlier threshold must be a positive number, got %g", threshold);
    if (n == 0)
        return es_fail(err, ES_E_PARAM, "rows", "no rows selected for the outlier analysis");
    es_outliers *o = es_calloc(1, sizeof *o);
    o->n = n;
    o->threshold = threshold;
    o->rows = memcpy(es_malloc(n * sizeof *o->rows), idx, n * sizeof *o->rows);
    o->norm = es_malloc(n * sizeof *o->norm);
    o->score = es_malloc(n * sizeof *o->score);
    o->flagged = es_malloc(n * sizeof *o->flagged);
    for (size_t i = 0; i < n; i++)
        o->norm[i] = item_norm(m, idx[i]);
    o->median = median_of(o->norm, n);
    for (size_t i = 0; i < n; i++)
        o->score[i] = fabs(o->norm[i] - o->median);  /* absolute deviations, for the MAD */
    o->mad = median_of(o->score, n);
    o->scale = fmax(fmax(MAD_TO_SIGMA * o->mad, SCALE_FLOOR * o->median), DBL_MIN);
    for (size_t i = 0; i < n; i++) {
        o->score[i] = fmin(o->score[i] / o->scale, DBL_MAX);
        if (o->score[i] > threshold)
            o->flagged[o->n_flagged++] = idx[i];
    }
    *out = o;
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_outliers_free(es_outliers *o)
{
    if (!o)
        return;
    free(o->rows);
    free(o->norm);
    free(o->score);
    free(o->flagged);
    free(o);
}
