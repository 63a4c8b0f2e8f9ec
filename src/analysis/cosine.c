/* Cosine similarity between items in model space: one row against a selection,
 * the binned similarity matrix and the mean similarity by index offset. All
 * products go through CBLAS on unit-normalised rows; a zero row stays zero, so
 * its similarity to everything is 0 (not NaN). */
#include "analysis/internal.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* See internal.h. */
int es_check_selection(const es_matrix *m, const size_t *idx, size_t n, es_err *err)
{
    size_t items = es_matrix_items(m);
    if (n == 0)
        return es_fail(err, ES_E_PARAM, "rows", "no rows selected");
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= items)
            return es_fail(err, ES_E_PARAM, "rows", "row %zu out of range (matrix %s has %zu)",
                           idx[i], m->id, items);
    return 0;
}

/* See internal.h. */
void es_rows_dot(const double *x, size_t n, size_t d, const double *y, double *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = cblas_ddot((int)d, x + i * d, 1, y, 1);
}

/* See internal.h. */
void es_normalise_rows(double *x, size_t n, size_t d)
{
    for (size_t i = 0; i < n; i++) {
        double *row = x + i * d, largest = 0;
        for (size_t j = 0; j < d; j++)
            largest = fmax(largest, fabs(row[j]));
        if (largest == 0)
            continue;
        for (size_t j = 0; j < d; j++)
            row[j] /= largest; /* now the largest is 1: the norm is in [1, sqrt(d)] */
        cblas_dscal((int)d, 1.0 / cblas_dnrm2((int)d, row, 1), row, 1);
    }
}

/* See internal.h. */
double *es_normalised_items(const es_matrix *m, const size_t *idx, size_t n, es_centering c)
{
    size_t d = es_matrix_dim(m);
    double *x = es_matrix_items_copy(m, idx, n);
    es_center(x, n, d, c, NULL);
    es_normalise_rows(x, n, d);
    return x;
}

/* Entries of one block of rows of the cosine matrix: the n x n matrix is
 * never held, so its memory is this block and the n x d normalised copy
 * (a 50257-row token embedding's whole matrix would be 20 GB). */
#define BLOCK_ENTRIES ((size_t)1 << 22)

/* See internal.h. */
size_t es_cosine_block_rows(size_t n) { return n >= BLOCK_ENTRIES ? 1 : BLOCK_ENTRIES / n; }

/* See internal.h. */
void es_cosine_block(const double *x, size_t n, size_t d, size_t a0, size_t a1, size_t c0, double *g)
{
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(a1 - a0), (int)(n - c0), (int)d, 1.0, x + a0 * d,
                (int)d, x + c0 * d, (int)d, 0.0, g, (int)(n - c0));
}

/* Below this norm a row's products with a unit query can lose their bits to
 * underflow (subnormal values are finite and valid), so such rows are scaled
 * by their largest element first. About sqrt(DBL_MIN). */
#define TINY_NORM 1e-150

/* The cosine of one tiny row with the unit vector u: the row scaled by its
 * largest element (exact enough: a quotient of two floats), then normalised. */
static double tiny_row_cosine(const double *row, size_t d, const double *u)
{
    double largest = 0;
    for (size_t j = 0; j < d; j++)
        largest = fmax(largest, fabs(row[j]));
    if (largest == 0)
        return 0.0;
    double dot = 0, sq = 0;
    for (size_t j = 0; j < d; j++) {
        double v = row[j] / largest;
        dot += v * u[j];
        sq += v * v;
    }
    return dot / sqrt(sq);
}

/* See internal.h. */
bool es_unit_vector(const double *query, size_t d, double *unit)
{
    double largest = 0;
    for (size_t j = 0; j < d; j++)
        largest = fmax(largest, fabs(query[j]));
    if (largest == 0)
        return false;
    for (size_t j = 0; j < d; j++)
        unit[j] = query[j] / largest;
    double norm = cblas_dnrm2((int)d, unit, 1);
    for (size_t j = 0; j < d; j++)
        unit[j] /= norm;
    return true;
}

/* See internal.h. */
void es_rows_cosine_norms(const double *x, size_t n, size_t d, const double *u, const double *known,
                          double *norms_out, double *s)
{
    es_rows_dot(x, n, d, u, s);
    for (size_t i = 0; i < n; i++) {
        double norm = known ? known[i] : cblas_dnrm2((int)d, x + i * d, 1);
        if (norms_out)
            norms_out[i] = norm;
        s[i] = norm >= TINY_NORM ? s[i] / norm : tiny_row_cosine(x + i * d, d, u);
    }
}

/* See internal.h. */
void es_rows_cosine(const double *x, size_t n, size_t d, const double *u, double *s)
{
    es_rows_cosine_norms(x, n, d, u, NULL, NULL, s);
}

/* See internal.h: read a block at a time, the sums in item order (es_center's,
 * so the bits are the same). */
void es_selection_mean(const es_matrix *m, const size_t *idx, size_t n, double *mean)
{
    size_t d = es_matrix_dim(m);
    memset(mean, 0, d * sizeof *mean);
    for (size_t at = 0; at < n; at += ES_STREAM_ITEMS) {
        size_t len = n - at < ES_STREAM_ITEMS ? n - at : ES_STREAM_ITEMS;
        double *block = es_matrix_items_copy(m, idx + at, len);
        for (size_t i = 0; i < len; i++)
            for (size_t j = 0; j < d; j++)
                mean[j] += block[i * d + j];
        free(block);
    }
    for (size_t j = 0; j < d; j++)
        mean[j] /= (double)n;
}

/* Centre len items (row-major, d long) as the selection is centred: minus the
 * selection's mean row when given (columns), else as c says (rows, none). */
static void centre_as_selection(double *x, size_t len, size_t d, es_centering c, const double *mean)
{
    if (!mean) {
        es_center(x, len, d, c, NULL);
        return;
    }
    for (size_t i = 0; i < len; i++)
        cblas_daxpy((int)d, -1.0, mean, 1, x + i * d, 1);
}

/* ES_E_PARAM "row" if `row` is not an item, "rows" for a bad selection. The
 * selection is streamed a block at a time (like es_neighbors_items): one
 * matrix-vector product and one norm a row, never a normalised copy of the
 * whole selection (300 MB and seconds at 50257 x 768). What depends on the
 * selection alone is kept (derived.c): its mean (columns centring: one more
 * pass the first time) and its centred rows' norms, so a later request of
 * the same selection is one pass of dot products. */
int es_cosine_row(const es_matrix *m, size_t row, const size_t *idx, size_t n, es_centering c,
                  double **out, es_err *err)
{
    size_t items = es_matrix_items(m), d = es_matrix_dim(m);
    if (row >= items)
        return es_fail(err, ES_E_PARAM, "row", "row %zu out of range (matrix %s has %zu)", row,
                       m->id, items);
    if (es_check_selection(m, idx, n, err) != 0)
        return -1;
    double *sim = es_alloc_doubles(n, 1, "similarities", err);
    if (!sim)
        return -1;
    char *key = es_derived_key(m, idx, n, c);
    const es_derived *kept = es_derived_find(key);
    double *mean = kept ? kept->mean : NULL, *norms = NULL; /* measured here when not kept */
    if (!kept && c == ES_CENTER_COLUMNS) {
        mean = es_malloc(d * sizeof *mean);
        es_selection_mean(m, idx, n, mean);
    }
    double *y = es_matrix_items_copy(m, &row, 1), *unit = es_malloc(d * sizeof *unit);
    centre_as_selection(y, 1, d, c, mean); /* the row as the selected rows, selected or not */
    bool nonzero = es_unit_vector(y, d, unit);
    if (!kept && nonzero)
        norms = es_malloc(n * sizeof *norms);
    size_t step = es_pass_items(d);
    double *block = es_malloc(step * d * sizeof *block);
    for (size_t at = 0; at < n; at += step) {
        size_t len = n - at < step ? n - at : step;
        if (!nonzero) { /* a zero row: its similarity to everything is 0 */
            memset(sim + at, 0, len * sizeof *sim);
            continue;
        }
        es_matrix_items_into(m, idx + at, len, block);
        centre_as_selection(block, len, d, c, mean);
        es_rows_cosine_norms(block, len, d, unit, kept ? kept->norms + at : NULL, norms ? norms + at : NULL, sim + at);
    }
    free(block);
    if (norms) /* measured over the whole selection: kept for the next request */
        es_derived_keep(key, n, d, mean, norms);
    else if (!kept)
        free(mean);
    es_derived_release(kept);
    free(key);
    free(y);
    free(unit);
    *out = sim;
    return 0;
}

/* ES_E_PARAM "rows" for a bad selection; ES_E_NOMEM if n x n does not fit. */
int es_cosine_matrix(const es_matrix *m, const size_t *idx, size_t n, es_centering c, size_t bins,
                     es_grid **out, es_err *err)
{
    if (es_check_selection(m, idx, n, err) != 0)
        return -1;
    size_t d = es_matrix_dim(m), nb, step = es_cosine_block_rows(n);
    size_t *edges = es_bin_edges(n, bins, &nb);
    /* At full resolution (a bin per row: bins=0) each cell is one cosine, written
     * straight into the grid: no sums (16 bytes a cell) and no block to copy from,
     * the same bits (a sum of one value divided by 1). */
    bool full = nb == n;
    long double *acc = full ? NULL : es_try_alloc(nb * nb, sizeof *acc);
    double *values = acc || full ? es_alloc_doubles(nb, nb, "binned grid", err) : NULL;
    double *g = values && !full ? es_alloc_doubles(step, n, "cosine matrix block", err) : NULL;
    if (!values || (!full && !g)) {
        if (!acc && !full)
            es_fail(err, ES_E_NOMEM, "bins", "cannot allocate a %zu x %zu grid", nb, nb);
        free(acc);
        free(values);
        free(edges);
        return -1;
    }
    size_t *bin = es_malloc(n * sizeof *bin);
    for (size_t b = 0; b < nb; b++)
        for (size_t i = edges[b]; i < edges[b + 1]; i++)
            bin[i] = b;
    for (size_t k = 0; !full && k < nb * nb; k++)
        acc[k] = 0;
    double *x = es_normalised_items(m, idx, n, c);
    int rc = 0;
    es_progress_begin("cosine", (n + step - 1) / step);
    for (size_t a0 = 0; a0 < n && (rc = es_progress_check(err)) == 0; a0 += step) {
        /* rows in order, columns in order: es_grid_from_blocks' sums */
        size_t a1 = n - a0 < step ? n : a0 + step;
        es_progress_step();
        es_cosine_block(x, n, d, a0, a1, 0, full ? values + a0 * n : g);
        for (size_t i = a0; !full && i < a1; i++)
            for (size_t j = 0; j < n; j++)
                acc[bin[i] * nb + bin[j]] += g[(i - a0) * n + j];
    }
    for (size_t r = 0; !full && r < nb; r++)
        for (size_t q = 0; q < nb; q++)
            values[r * nb + q] = (double)(acc[r * nb + q] / ((long double)(edges[r + 1] - edges[r]) *
                                                              (long double)(edges[q + 1] - edges[q])));
    free(x);
    free(g);
    free(bin);
    free(acc);
    if (rc < 0) {
        free(values);
        free(edges);
        return -1;
    }
    es_grid *grid = es_malloc(sizeof *grid);
    size_t *col_edges = es_malloc((nb + 1) * sizeof *col_edges);
    memcpy(col_edges, edges, (nb + 1) * sizeof *col_edges);
    *grid = (es_grid){.rows = nb, .cols = nb, .row_edges = edges, .col_edges = col_edges, .values = values};
    *out = grid;
    return 0;
}

