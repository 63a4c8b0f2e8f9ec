/* PCA: coordinates U S = X V of the selected items on the top k components. */
#include "analysis/internal.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

/* The result around coords (n x k, taken): rows and variance ratios from svd. */
static es_pca *pca_of(const es_svd *svd, size_t k, double *coords)
{
    es_pca *p = es_malloc(sizeof *p);
    p->n = svd->n;
    p->k = k;
    p->coords = coords;
    p->rows = es_malloc(svd->n * sizeof *p->rows);
    memcpy(p->rows, svd->rows, svd->n * sizeof *p->rows);
    p->evr = es_malloc(k * sizeof *p->evr);
    p->cumulative = es_malloc(k * sizeof *p->cumulative);
    es_variance_ratios(svd, k, p->evr, p->cumulative);
    return p;
}

/* Fails with ES_E_PARAM "k" unless 1 <= k <= r, ES_E_PARAM when src is not
 * svd's matrix. */
int es_pca_from_svd(const es_svd *svd, const es_matrix *src, size_t k, es_pca **out, es_err *err)
{
    if (es_check_k(k, svd->r, "k", err) != 0)
        return -1;
    double *coords = es_alloc_doubles(svd->n, k, "PCA coordinates", err);
    if (!coords)
        return -1;
    if (es_svd_project(svd, src, k, coords, err) < 0) {
        free(coords);
        return -1;
    }
    *out = pca_of(svd, k, coords);
    return 0;
}

/* See analysis.h: x's items svd->rows, centred as svd's were, times V_k. */
int es_pca_in_basis(const es_svd *svd, const es_matrix *x, size_t k, es_pca **out, es_err *err)
{
    if (es_svd_need_vectors(svd, "pca", err) != 0 || es_check_k(k, svd->r, "k", err) != 0)
        return -1;
    size_t d = svd->d, max_row = 0;
    for (size_t i = 0; i < svd->n; i++)
        max_row = svd->rows[i] > max_row ? svd->rows[i] : max_row;
    if (es_matrix_dim(x) != d || max_row >= es_matrix_items(x))
        return es_fail(err, ES_E_INCOMPATIBLE, "average", "%s (%zu items of dimension %zu) does not match the "
                       "decomposition (dimension %zu, item %zu selected)", x->id, es_matrix_items(x),
                       es_matrix_dim(x), d, max_row);
    double *coords = es_alloc_doubles(svd->n, k, "PCA coordinates", err);
    if (!coords)
        return -1;
    double *rows = es_matrix_items_copy(x, svd->rows, svd->n);
    if (svd->centering == ES_CENTER_COLUMNS) /* the decomposed rows' mean, not x's own */
        for (size_t i = 0; i < svd->n; i++)
            cblas_daxpy((int)d, -1.0, svd->mean, 1, rows + i * d, 1);
    else
        es_center(rows, svd->n, d, svd->centering, NULL);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)svd->n, (int)k, (int)d, 1.0, rows, (int)d, svd->vt,
                (int)d, 0.0, coords, (int)k);
    free(rows);
    *out = pca_of(svd, k, coords);
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_pca_free(es_pca *p)
{
    if (!p)
        return;
    free(p->rows);
    free(p->coords);
    free(p->evr);
    free(p->cumulative);
    free(p);
}
