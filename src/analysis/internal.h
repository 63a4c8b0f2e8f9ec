/* Helpers shared by the analysis modules (not part of the public API). */
#ifndef EMBEDSCOPE_ANALYSIS_INTERNAL_H
#define EMBEDSCOPE_ANALYSIS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include "embedscope/analysis.h"

/* Request-sized array of n*m doubles (uninitialised). Fails with ES_E_NOMEM
 * naming `what` when the size overflows or the allocation fails. */
double *es_alloc_doubles(size_t n, size_t m, const char *what, es_err *err);

/* ES_E_PARAM "rows" when the selection idx (n items) of m is empty or names an
 * item out of range. */
int es_check_selection(const es_matrix *m, const size_t *idx, size_t n, es_err *err);

/* Check 1 <= k <= r; fails with ES_E_PARAM naming `param`. */
int es_check_k(size_t k, size_t r, const char *param, es_err *err);

/* ES_E_INCOMPATIBLE (param "b") unless both decompositions live in model
 * spaces of the same length d; the message names both lengths. */
int es_check_same_space(const es_svd *a, const es_svd *b, es_err *err);

/* Reduce a dense nr x nc row-major matrix to at most bins x bins blocks
 * (es_bin_edges on each axis) holding the block sums, or the block means when
 * `mean`. Fails with ES_E_NOMEM only. */
int es_grid_from_blocks(const double *m, size_t nr, size_t nc, size_t bins, bool mean,
                        es_grid **out, es_err *err);

/* Explained-variance ratios s_j^2 / total and their running sum for the first
 * k (<= r) components: total is sum(s^2) over all r values of an exact
 * decomposition, ||X||_F^2 (total_ss) for a top-k one, which holds only part of
 * the spectrum. All zeros when X = 0. Never fails. */
void es_variance_ratios(const es_svd *svd, size_t k, double *evr, double *cumulative);

/* Scale each of the n rows of row-major x (n x d) to unit norm; a zero row
 * stays zero. Rows of subnormal values (finite, e.g. 5e-324) come out as
 * unit rows too: each row is first divided by its largest magnitude, since
 * the reciprocal of a subnormal norm overflows to infinity. Never fails. */
void es_normalise_rows(double *x, size_t n, size_t d);

/* out[i] = x_i . y for the n rows of row-major x (n x d), one dot product a
 * row, so the bits do not depend on OpenBLAS's thread count: a threaded
 * dgemv hands each thread a share of the rows, and its kernels sum the rows
 * at the edges of a share in another order. Never fails. */
void es_rows_dot(const double *x, size_t n, size_t d, const double *y, double *out);

/* Derived data of a selection (derived.c): for a matrix, a selection and a
 * centring, the norms of the centred selected rows (n, in selection order)
 * and, for columns centring, the selection's mean row (d; else NULL), kept
 * process-wide so a request that streams the selection reads it once. */
typedef struct es_derived {
    size_t n, d;
    double *mean, *norms;
} es_derived;
/* The mean of the n selected items into mean (d doubles), the same bits as
 * es_center's columns centring of their copy. Never fails. */
void es_selection_mean(const es_matrix *m, const size_t *idx, size_t n, double *mean);
/* Its key: "identity|canonical rows|centring". Caller frees; never fails. */
char *es_derived_key(const es_matrix *m, const size_t *idx, size_t n, es_centering c);
/* The kept data of key, held until es_derived_release (NULL-safe), or NULL
 * (counted as a miss). Never fails. */
const es_derived *es_derived_find(const char *key);
void es_derived_release(const es_derived *dv);
/* Keep data computed for key (taking mean and norms, es_malloc'd): stored as
 * the newest entry unless another request kept the key first (then freed).
 * Never fails. */
void es_derived_keep(const char *key, size_t n, size_t d, double *mean, double *norms);

/* UMAP's neighbour graph: the k nearest others of each of the n rows of x (n x d,
 * row-major; normalised in place for cosine) into nbr and dist (n x k, nearest
 * first, ties to the lower index; dist 1 - cos, or the euclidean distance), exact
 * in double although the candidates come from float32 products (umap.c says how
 * that is certified). block: rows whose products are taken at a time (0: as many
 * as 100 MiB of floats hold). The tracker's error (ES_E_CANCELLED...) between
 * blocks. */
int es_umap_knn(double *x, size_t n, size_t d, es_metric metric, size_t k, size_t block, size_t *nbr,
                double *dist, es_err *err);

/* Items read at a time when a selection is streamed from its matrix rather
 * than copied whole: 1024 x d doubles, 6 MiB at d = 768. */
#define ES_STREAM_ITEMS 1024

/* Items read at a time by one pass of dot products over a selection
 * (cosine?row=i, neighbors): as many as 256 KiB of doubles hold (42 at d =
 * 768), copied into one reused buffer, so the copy is still in the core's
 * cache when the products read it; a 6 MiB block went out to memory and back,
 * and a row's selection at 200000 x 768 is 1.2 GB of doubles. */
static inline size_t es_pass_items(size_t d)
{
    size_t r = ((size_t)1 << 15) / (d ? d : 1);
    return r ? r : 1;
}

/* es_rows_cosine with the rows' norms known (known[i]: the same bits as
 * measuring them) or, known NULL, measured and written to norms_out when
 * given. */
void es_rows_cosine_norms(const double *x, size_t n, size_t d, const double *u, const double *known,
                          double *norms_out, double *s);

/* query / |query| into unit (d doubles; scaled by its largest element first,
 * so a query of subnormal values is normalised without underflow); false
 * (unit undefined) for a zero query. Never fails. */
bool es_unit_vector(const double *query, size_t d, double *unit);

/* s[i] = the cosine of row i of row-major x (n x d) with the unit vector u:
 * x_i . u / |x_i| (a zero row gives 0, a row of tiny values is rescaled by its
 * largest element first). One matrix-vector product and one norm a row, no
 * normalised copy. Never fails. */
void es_rows_cosine(const double *x, size_t n, size_t d, const double *u, double *s);

/* Copy the n items idx of m into an n x d array, centred as c says, every
 * non-zero row then scaled to unit norm. Caller frees. Aborts on OOM. */
double *es_normalised_items(const es_matrix *m, const size_t *idx, size_t n, es_centering c);

/* Rows per block of an n-column cosine matrix (at least one): a block holds
 * about 4 Mi entries, so the n x n matrix is never held whole. */
size_t es_cosine_block_rows(size_t n);

/* g (a1 - a0) x (n - c0) = the cosines of items a0..a1 against items c0..n of
 * the normalised x (n x d), row-major (one dgemm). Never fails. */
void es_cosine_block(const double *x, size_t n, size_t d, size_t a0, size_t a1, size_t c0, double *g);

#endif
