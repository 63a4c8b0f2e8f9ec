/* Nearest neighbours, exact: every candidate is scored against the query (no
 * index, no approximation), then the k best are kept in order. Cosine scores
 * come from one matrix-vector product over unit-normalised points; euclidean
 * distances are summed directly so near neighbours lose nothing to the
 * cancellation of |x|^2 + |q|^2 - 2 x.q. */
#include "analysis/internal.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>


typedef struct scored {
    size_t row;
    double score;
} scored;

/* Best first: higher similarity, or lower distance, then the lower item index. */
static int by_similarity(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->row < y->row ? -1 : x->row > y->row;
}

static int by_distance(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? -1 : 1;
    return x->row < y->row ? -1 : x->row > y->row;
}

/* Score the n points (row-major n x dim) against the query into s[0..n),
 * skipping none. unit_query: the query normalised (cosine; NULL for a zero
 * query, whose similarities are 0); query: as given (euclidean). */
static void score_block(const double *points, size_t n, size_t dim, const double *query, const double *unit_query,
                        es_metric metric, double *s)
{
    if (metric == ES_METRIC_COSINE) {
        if (!unit_query) {
            memset(s, 0, n * sizeof *s);
            return;
        }
        es_rows_cosine(points, n, dim, unit_query, s);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        double sum = 0;
        for (size_t j = 0; j < dim; j++) {
            double e = points[i * dim + j] - query[j];
            sum += e * e;
        }
        s[i] = sqrt(sum);
    }
}

/* Append the scored points of one block (skipping self) to all[*count]. */
static void collect(scored *all, size_t *count, const size_t *rows, const double *s, size_t n, size_t self)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i] != self)
            all[(*count)++] = (scored){rows[i], s[i]};
}

/* Sort the candidates and keep the first k. */
static int finish(scored *all, size_t count, es_metric metric, size_t k, es_neighbors **out)
{
    qsort(all, count, sizeof *all, metric == ES_METRIC_COSINE ? by_similarity : by_distance);
    es_neighbors *nb = es_malloc(sizeof *nb);
    nb->k = k < count ? k : count;
    nb->rows = es_malloc((nb->k ? nb->k : 1) * sizeof *nb->rows);
    nb->score = es_malloc((nb->k ? nb->k : 1) * sizeof *nb->score);
    for (size_t i = 0; i < nb->k; i++) {
        nb->rows[i] = all[i].row;
        nb->score[i] = all[i].score;
    }
    free(all);
    *out = nb;
    return 0;
}

static int check_k(size_t k, es_err *err)
{
    return k == 0 ? es_fail(err, ES_E_PARAM, "k", "k must be at least 1") : 0;
}

int es_neighbors_among(const double *points, const size_t *rows, size_t n, size_t dim, const double *query,
                       size_t self, es_metric metric, size_t k, es_neighbors **out, es_err *err)
{
    if (check_k(k, err) < 0)
        return -1;
    double *s = es_malloc((n ? n : 1) * sizeof *s), *unit = es_malloc((dim ? dim : 1) * sizeof *unit);
    score_block(points, n, dim, query, es_unit_vector(query, dim, unit) ? unit : NULL, metric, s);
    free(unit);
    scored *all = es_malloc((n ? n : 1) * sizeof *all);
    size_t count = 0;
    collect(all, &count, rows, s, n, self);
    free(s);
    return finish(all, count, metric, k, out);
}

int es_neighbors_items(const es_matrix *m, size_t row, const size_t *idx, size_t n, es_metric metric, size_t k,
                       es_neighbors **out, es_err *err)
{
    size_t items = es_matrix_items(m), d = es_matrix_dim(m);
    if (row >= items)
        return es_fail(err, ES_E_PARAM, "row", "row %zu out of range (matrix %s has %zu)", row, m->id, items);
    if (es_check_selection(m, idx, n, err) < 0 || check_k(k, err) < 0)
        return -1;
    double *query = es_matrix_items_copy(m, &row, 1);
    double *unit = es_malloc((d ? d : 1) * sizeof *unit);
    const double *unit_query = es_unit_vector(query, d, unit) ? unit : NULL;
    scored *all = es_malloc(n * sizeof *all);
    double *s = es_malloc(ES_STREAM_ITEMS * sizeof *s);
    size_t count = 0;
    for (size_t at = 0; at < n; at += ES_STREAM_ITEMS) {
        size_t len = n - at < ES_STREAM_ITEMS ? n - at : ES_STREAM_ITEMS;
        double *block = es_matrix_items_copy(m, idx + at, len);
        score_block(block, len, d, query, unit_query, metric, s);
        collect(all, &count, idx + at, s, len, row);
        free(block);
    }
    free(s);
    free(unit);
    free(query);
    return finish(all, count, metric, k, out);
}

void es_neighbors_free(es_neighbors *nb)
{
    if (!nb)
        return;
    free(nb->rows);
    free(nb->score);
    free(nb);
}
