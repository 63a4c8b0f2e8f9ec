/* embedscope analyses: pure functions from matrices / decompositions to result
 * structs. No JSON, no HTTP. Ownership and failure rules: see core.h; every
 * result struct has an es_*_free that accepts NULL. Parameter errors are
 * ES_E_PARAM with `param` set to the request parameter name used by the API. */
#ifndef EMBEDSCOPE_ANALYSIS_H
#define EMBEDSCOPE_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>
#include "embedscope/core.h"
#include "embedscope/store.h"
#include "embedscope/linalg.h"

/* A dense rows x cols grid (row-major) with bin edges: bin i covers source
 * indices [row_edges[i], row_edges[i+1]). Used for binned heatmaps. */
typedef struct es_grid {
    size_t rows, cols;
    size_t *row_edges, *col_edges;  /* rows+1, cols+1 entries */
    double *values;
} es_grid;
void es_grid_free(es_grid *g);
/* Equal-width edges splitting n items into min(bins, n) bins (bins = 0: n bins).
 * Never fails (aborts on OOM, es_malloc). */
size_t *es_bin_edges(size_t n, size_t bins, size_t *out_bins);
/* The number of bins es_bin_edges makes of n items: min(bins, n), bins = 0: n. Never fails. */
size_t es_bin_count(size_t n, size_t bins);

/* 1. PCA: coordinates (U S) of each selected item on the top k components. */
typedef struct es_pca {
    size_t n, k;
    size_t *rows;        /* n item indices (copied from the svd) */
    double *coords;      /* n x k row-major */
    double *evr;         /* k explained-variance ratios s_j^2 / sum s^2 */
    double *cumulative;  /* k */
} es_pca;
/* k in 1..r, else ES_E_PARAM "k"; src is the matrix svd was computed from
 * (else ES_E_PARAM, see es_svd_project); ES_E_PARAM "method" when svd holds
 * singular values only. */
int es_pca_from_svd(const es_svd *svd, const es_matrix *src, size_t k, es_pca **out, es_err *err);
/* The coordinates in svd's basis of another matrix x's items svd->rows (such as
 * the row-averaged copy of svd's matrix): centred as svd's were (columns: minus
 * svd's mean row, the decomposed rows' mean; rows: each minus its own mean), on
 * the top k right vectors; variance ratios are svd's. ES_E_PARAM "k" unless
 * 1 <= k <= r, "method" for a values-only svd, ES_E_INCOMPATIBLE "average" when
 * x's dimension differs or lacks a selected item. */
int es_pca_in_basis(const es_svd *svd, const es_matrix *x, size_t k, es_pca **out, es_err *err);
void es_pca_free(es_pca *p);

/* 2. Spectrum: all r singular values, ratios, cumulative, components for 50/90/99 %. */
typedef struct es_spectrum {
    size_t r;
    double *s, *evr, *cumulative;
    size_t n50, n90, n99;  /* smallest m with cumulative[m-1] >= threshold (- 1e-12) */
} es_spectrum;
/* Copies the decomposition's values; never fails (err unused). */
int es_spectrum_from_svd(const es_svd *svd, es_spectrum **out, es_err *err);
void es_spectrum_free(es_spectrum *s);

/* 3. Cosine similarity between items (model orientation), on the n selected items idx,
 * centred first as c says: none; columns (every item, `row` included, minus the
 * mean of the selected items: the cosine of centred rows); rows (each item minus
 * its own mean). A zero row has similarity 0 to everything (documented, not NaN).
 * Each fails with ES_E_PARAM "rows" for an empty or out-of-range selection. */
/* Similarity of item `row` (any item, selected or not) to each selected item: *out
 * has n values. ES_E_PARAM "row" if row is not an item. What depends on the
 * selection alone (its mean row for columns centring, its centred rows' norms)
 * is computed by the first request and kept (es_derived_get_stats), so a later
 * row of the same selection reads the matrix once. */
/* The store of per-selection derived data (src/analysis/derived.c): a
 * process-wide LRU of at most ES_DERIVED_MAX_BYTES. */
#define ES_DERIVED_MAX_BYTES ((size_t)64 << 20)
typedef struct es_derived_stats {
    unsigned long hits, misses, kept, evictions;
    size_t bytes, entries, max_bytes;
} es_derived_stats;
/* A consistent snapshot of its counters. Never fails. */
void es_derived_get_stats(es_derived_stats *out);
int es_cosine_row(const es_matrix *m, size_t row, const size_t *idx, size_t n, es_centering c,
                  double **out, es_err *err);
/* Full n x n cosine matrix reduced to at most bins x bins block means. ES_E_NOMEM
 * if n x n does not fit. */
int es_cosine_matrix(const es_matrix *m, const size_t *idx, size_t n, es_centering c, size_t bins,
                     es_grid **out, es_err *err);
/* Mean similarity by offset: offsets are differences of item indices idx[b]-idx[a] >= 0;
 * for each offset value present, the mean over all pairs with that offset
 * (a = b included at offset 0). Two methods (src/analysis/cosine_offset.c):
 * the direct sums over every pair (n^2 d / 2), or each column's
 * autocorrelation by FFTs (FFTW, O(d N log N) with N ~ 2 x the indices'
 * span / their common step), its few-pair tail summed directly; both exact to
 * error_bound (at most 1e-12 for the fft method, gamma_{d+2} ~ (d + 2) 2^-53
 * for the direct one) on each mean. ES_E_NOMEM if a block does not fit. */
typedef struct es_cosine_offset {
    size_t count;          /* number of distinct offsets */
    size_t *offset;        /* ascending, starts at 0 */
    double *mean;
    size_t *pairs;         /* pairs averaged for each offset */
    const char *method;    /* "direct" or "fft" (static) */
    double error_bound;    /* the largest bound on |mean - its exact value| over the offsets */
    size_t fft_length;     /* the transforms' length N (fft), 0 (direct) */
    size_t direct_offsets; /* offsets the fft method summed directly (its tail) */
} es_cosine_offset;
/* Which method: auto (the one with less work for the selection's n, span and
 * d: direct below 512 items), or either one (tests, benchmarks). */
typedef enum es_offset_method { ES_OFFSET_AUTO, ES_OFFSET_DIRECT, ES_OFFSET_FFT } es_offset_method;
int es_cosine_by_offset(const es_matrix *m, const size_t *idx, size_t n, es_centering c,
                        es_cosine_offset **out, es_err *err);
int es_cosine_by_offset_using(const es_matrix *m, const size_t *idx, size_t n, es_centering c,
                              es_offset_method method, es_cosine_offset **out, es_err *err);
/* The method auto picks for n items idx in d dimensions (before any pair is
 * counted: a scattered selection's tail may still turn it to direct), and in
 * *length the FFT's length (0 for direct). O(n), never fails. */
es_offset_method es_cosine_offset_method(const size_t *idx, size_t n, size_t d, size_t *length);
/* The count es_cosine_by_offset gives for the selection idx (n >= 1): the
 * distinct |idx[b] - idx[a]|, 0 included, from the indices alone (a bit set
 * of the differences: at most n x span / 64 word operations, span the indices'
 * range, ending once every offset is seen). Never fails (aborts on OOM). */
size_t es_cosine_offset_count(const size_t *idx, size_t n);
/* The count es_cosine_by_offset gives, or an upper bound of it read from the
 * indices in O(n): es_cosine_offset_count (*exact true) when its n x span / 64
 * word operations are at most budget, else the offsets' multiples of the
 * indices' common step below the span, at most n(n-1)/2 + 1 (*exact false).
 * Never fails (aborts on OOM). */
size_t es_cosine_offset_bound(const size_t *idx, size_t n, size_t budget, bool *exact);
void es_cosine_offset_free(es_cosine_offset *o);

/* 4. Capture: c_j = v_j^T P_k v_j for each right singular vector v_j of b, P_k the
 * projector on a's top-k right singular vectors. ES_E_PARAM "method" if either
 * holds singular values only; ES_E_INCOMPATIBLE if d differs; ES_E_PARAM "k" if
 * k not in 1..a->r. */
typedef struct es_capture {
    size_t k, d, count;   /* count = b->r values */
    double *capture;
    double baseline;      /* k / d */
    double sum;           /* sum of capture (= k when b's vectors span the space) */
} es_capture;
int es_capture_compute(const es_svd *a, size_t k, const es_svd *b, es_capture **out, es_err *err);
void es_capture_free(es_capture *c);

/* 5. Overlap: M_ij = (v^a_i . v^b_j)^2 for the top ka of a and kb of b (0 = all),
 * optionally summed into at most bins x bins blocks (bins = 0: none) and then
 * smoothed by a separable Gaussian of standard deviation `blur` bins (0 = none,
 * edge-normalised). Rows: a's vectors, columns: b's. Fails as overlap.c says
 * (ES_E_PARAM "method" if either holds singular values only). */
int es_overlap_compute(const es_svd *a, size_t ka, const es_svd *b, size_t kb,
                       size_t bins, double blur, es_grid **out, es_err *err);

/* 6. Singular vectors with sparsity. */
typedef enum es_side { ES_SIDE_LEFT, ES_SIDE_RIGHT } es_side;
typedef struct es_vectors {
    es_side side;
    size_t k, len;       /* k vectors of length len (n for left, d for right) */
    double *values;      /* k x len row-major */
    double *s;           /* k singular values */
    size_t *n50, *n90;   /* per vector: fewest coordinates holding 50 % / 90 % of its squared mass */
} es_vectors;
/* The top k vectors of one side (src: the matrix svd was computed from, for the
 * left vectors). ES_E_PARAM "method" when svd holds singular values only
 * (es_svd_need_vectors); ES_E_PARAM "k" unless 1 <= k <= r; ES_E_NOMEM if k x len does
 * not fit; left vectors fail as es_svd_left when they cannot be formed. */
int es_vectors_from_svd(const es_svd *svd, const es_matrix *src, es_side side, size_t k, es_vectors **out,
                        es_err *err);
void es_vectors_free(es_vectors *v);
/* Fewest coordinates whose squares sum to >= frac of the vector's squared norm. */
size_t es_mass_count(const double *v, size_t len, double frac);

/* 7. Nearest neighbours, exact: the k points nearest to a query among n points
 * (model-space items, or their PCA coordinates), by cosine similarity (highest
 * first; a zero vector has similarity 0 to everything, as in 3.) or euclidean
 * distance (lowest first). Ties go to the lower item index. */
typedef enum es_metric { ES_METRIC_COSINE, ES_METRIC_EUCLIDEAN } es_metric;
typedef struct es_neighbors {
    size_t k;             /* found: min(k asked, candidates) */
    size_t *rows;         /* k item indices, nearest first */
    double *score;        /* k cosine similarities or euclidean distances */
} es_neighbors;
/* Among the n points (row-major n x dim, item indices rows[]), the k nearest to
 * query (length dim), skipping the item `self` (SIZE_MAX: none). Scores by one
 * matrix-vector product (cosine) or directly as sqrt(sum (x - q)^2), which has
 * no cancellation (euclidean). ES_E_PARAM "k" when k is 0; fewer than k when
 * fewer candidates. Never fails otherwise. */
int es_neighbors_among(const double *points, const size_t *rows, size_t n, size_t dim, const double *query,
                       size_t self, es_metric metric, size_t k, es_neighbors **out, es_err *err);
/* The same over the n selected items idx of m in model space, the query being
 * item `row` (any item, itself skipped), read in blocks so memory stays
 * O(block x d). ES_E_PARAM "row" if row is not an item, "rows" for a bad
 * selection, "k" for k 0. */
int es_neighbors_items(const es_matrix *m, size_t row, const size_t *idx, size_t n, es_metric metric, size_t k,
                       es_neighbors **out, es_err *err);
void es_neighbors_free(es_neighbors *nb);

/* 8. UMAP of the selected items (umap.c says how: umap-learn's algorithm on the
 * exact neighbour graph, seeded, the same bits whatever the threads). n_neighbors counts the item itself,
 * as umap-learn does; epochs 0 means umap-learn's default (es_umap_epochs). */
typedef struct es_umap_params {
    size_t n_neighbors, dims, epochs;
    double min_dist;
    es_metric metric;
    uint64_t seed;
} es_umap_params;
typedef struct es_umap {
    size_t n, dims, n_neighbors, epochs;
    size_t edges;         /* pairs of the symmetric graph kept for the layout */
    double a, b;          /* the fitted curve 1 / (1 + a d^2b) */
    size_t *rows;         /* n item indices */
    double *coords;       /* n x dims, row-major */
} es_umap;
/* The layout of the n selected items idx of m, starting from init (n x dims,
 * e.g. their top PCA coordinates; scaled to [0, 10] per axis first). ES_E_PARAM
 * "rows" for a bad selection or under 3 rows, "n_neighbors" unless 2 <=
 * n_neighbors <= n; ES_E_NOMEM naming what does not fit; the tracker's error
 * (ES_E_CANCELLED...) when it stops between blocks of the graph or epochs. */
int es_umap_items(const es_matrix *m, const size_t *idx, size_t n, const es_umap_params *p, const double *init,
                  es_umap **out, es_err *err);
void es_umap_free(es_umap *u);
/* umap-learn's default epochs for n items when asked is 0 (500 up to 10000 items,
 * 200 beyond), else asked. Never fails. */
size_t es_umap_epochs(size_t n, size_t asked);
/* a and b of the curve 1 / (1 + a x^2b) fitted to min_dist and spread
 * (umap-learn's find_ab_params). Never fails. */
void es_umap_curve(double spread, double min_dist, double *a, double *b);

#endif
