/* Binned grids (bin edges, block reduction) and helpers shared by the analyses. */
#include "analysis/internal.h"

#include <stdlib.h>

/* See internal.h: NULL with ES_E_NOMEM naming `what`. */
double *es_alloc_doubles(size_t n, size_t m, const char *what, es_err *err)
{
    size_t count;
    double *p = es_mul_size(n, m, &count) == 0 ? es_try_alloc(count, sizeof *p) : NULL;
    if (!p)
        es_fail(err, ES_E_NOMEM, "", "cannot allocate %s (%zu x %zu doubles)", what, n, m);
    return p;
}

/* See internal.h: ES_E_PARAM naming `param` unless 1 <= k <= r. */
int es_check_k(size_t k, size_t r, const char *param, es_err *err)
{
    if (k < 1 || k > r)
        return es_fail(err, ES_E_PARAM, param, "%s must be in 1..%zu, got %zu", param, r, k);
    return 0;
}

/* See internal.h: ES_E_INCOMPATIBLE (param "b") unless a->d == b->d. */
int es_check_same_space(const es_svd *a, const es_svd *b, es_err *err)
{
    if (a->d != b->d)
        return es_fail(err, ES_E_INCOMPATIBLE, "b",
                       "model spaces differ: a has d=%zu, b has d=%zu", a->d, b->d);
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_grid_free(es_grid *g)
{
    if (!g)
        return;
    free(g->row_edges);
    free(g->col_edges);
    free(g->values);
    free(g);
}

/* See analysis.h. */
size_t es_bin_count(size_t n, size_t bins) { return bins == 0 || bins > n ? n : bins; }

/* Bin i covers [floor(i n / B), floor((i+1) n / B)), B = min(bins, n) (bins 0: n),
 * so bin widths differ by at most one. Never fails; n = 0 gives one edge {0}. */
size_t *es_bin_edges(size_t n, size_t bins, size_t *out_bins)
{
    size_t b = es_bin_count(n, bins);
    size_t *edges = es_malloc((b + 1) * sizeof *edges);
    edges[0] = 0;
    for (size_t i = 1; i <= b; i++)
        edges[i] = i * n / b;
    *out_bins = b;
    return edges;
}

/* For each of n indices, the number of the bin (of `edges`) that holds it. */
static size_t *bin_of_index(const size_t *edges, size_t bins, size_t n)
{
    size_t *which = es_malloc(n * sizeof *which);
    for (size_t b = 0; b < bins; b++)
        for (size_t i = edges[b]; i < edges[b + 1]; i++)
            which[i] = b;
    return which;
}

/* Sums are accumulated in long double so block totals keep the invariants
 * (e.g. overlap blocks summing to r) to ~1e-15 relative even for 1M cells. */
int es_grid_from_blocks(const double *m, size_t nr, size_t nc, size_t bins, bool mean,
                        es_grid **out, es_err *err)
{
    size_t rb, cb;
    size_t *row_edges = es_bin_edges(nr, bins, &rb);
    size_t *col_edges = es_bin_edges(nc, bins, &cb);
    /* rb x cb <= nr x nc, which the caller already holds, so no overflow. */
    long double *acc = es_try_alloc(rb * cb, sizeof *acc);
    double *values = acc ? es_alloc_doubles(rb, cb, "binned grid", err) : NULL;
    if (!values) {
        if (!acc)
            es_fail(err, ES_E_NOMEM, "bins", "cannot allocate a %zu x %zu grid", rb, cb);
        free(acc);
        free(row_edges);
        free(col_edges);
        return -1;
    }
    size_t *col_bin = bin_of_index(col_edges, cb, nc);
    for (size_t k = 0; k < rb * cb; k++)
        acc[k] = 0;
    for (size_t I = 0; I < rb; I++)
        for (size_t i = row_edges[I]; i < row_edges[I + 1]; i++)
            for (size_t j = 0; j < nc; j++)
                acc[I * cb + col_bin[j]] += m[i * nc + j];
    for (size_t I = 0; I < rb; I++)
        for (size_t J = 0; J < cb; J++) {
            long double cells = (long double)(row_edges[I + 1] - row_edges[I]) *
                                (col_edges[J + 1] - col_edges[J]);
            values[I * cb + J] = (double)(mean ? acc[I * cb + J] / cells : acc[I * cb + J]);
        }
    free(col_bin);
    free(acc);
    es_grid *g = es_malloc(sizeof *g);
    *g = (es_grid){ .rows = rb, .cols = cb, .row_edges = row_edges, .col_edges = col_edges,
                    .values = values };
    *out = g;
    return 0;
}
