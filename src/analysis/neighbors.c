/* Nearest neighbours, exact: every candidate is scored against the query (no
 * index, no approximation), then the k best are kept in order. Cosine scores
 * come from one matrix-vector product over unit-normalised points; euclidean
 * distances are summed directly so near neighbours lose nothing to the
 * cancellation of |x|^2 + |q|^2 - 2 x.q. */
#include "analysis/internal.h"

#include <cblas.h>
#include <stdbool.h>
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

/* The k best candidates so far as a binary heap whose root is the worst of
 * them (under cmp), so a candidate is compared with one entry and the n
 * candidates cost n log k, not a sort of all n (200000 at token-vocabulary
 * scale). finish() orders the heap's entries as the full sort would. */
typedef struct best_k {
    scored *h;
    size_t count, k;
    int (*cmp)(const void *, const void *);
} best_k;

static void heap_down(best_k *b, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < b->count && b->cmp(&b->h[l], &b->h[worst]) > 0)
            worst = l;
        if (r < b->count && b->cmp(&b->h[r], &b->h[worst]) > 0)
            worst = r;
        if (worst == i)
            return;
        scored t = b->h[i];
        b->h[i] = b->h[worst];
        b->h[worst] = t;
        i = worst;
    }
}

static void offer(best_k *b, scored c)
{
    if (b->count < b->k) {
        size_t i = b->count++;
        b->h[i] = c;
        while (i > 0 && b->cmp(&b->h[(i - 1) / 2], &b->h[i]) < 0) {
            scored t = b->h[i];
            b->h[i] = b->h[(i - 1) / 2];
            b->h[(i - 1) / 2] = t;
            i = (i - 1) / 2;
        }
    } else if (b->cmp(&c, &b->h[0]) < 0) {
        b->h[0] = c;
        heap_down(b, 0);
    }
}

/* The selection is streamed in cache-sized blocks (es_pass_items) through one
 * reused buffer; cosine scores use the selection's row norms kept by
 * cosine?row=i (derived.c, uncentred: the same bits as measuring them), and
 * keep them when they are measured here, so the two requests of a selected
 * point read the matrix once each and measure the norms once between them. */
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
    bool cosine = metric == ES_METRIC_COSINE && unit_query;
    char *key = cosine ? es_derived_key(m, idx, n, ES_CENTER_NONE) : NULL;
    const es_derived *kept = key ? es_derived_find(key) : NULL;
    double *norms = cosine && !kept ? es_malloc(n * sizeof *norms) : NULL;
    size_t kk = k < n ? k : n;
    best_k best = {es_malloc((kk ? kk : 1) * sizeof *best.h), 0, kk,
                   metric == ES_METRIC_COSINE ? by_similarity : by_distance};
    size_t step = es_pass_items(d);
    double *s = es_malloc(step * sizeof *s), *block = es_malloc(step * d * sizeof *block);
    for (size_t at = 0; at < n; at += step) {
        size_t len = n - at < step ? n - at : step;
        es_matrix_items_into(m, idx + at, len, block);
        if (cosine)
            es_rows_cosine_norms(block, len, d, unit_query, kept ? kept->norms + at : NULL, norms ? norms + at : NULL, s);
        else
            score_block(block, len, d, query, unit_query, metric, s);
        for (size_t i = 0; i < len; i++)
            if (idx[at + i] != row)
                offer(&best, (scored){idx[at + i], s[i]});
    }
    if (norms)
        es_derived_keep(key, n, d, NULL, norms);
    es_derived_release(kept);
    free(key);
    free(block);
    free(s);
    free(unit);
    free(query);
    return finish(best.h, best.count, metric, k, out);
}

void es_neighbors_free(es_neighbors *nb)
{
    if (!nb)
        return;
    free(nb->rows);
    free(nb->score);
    free(nb);
}
