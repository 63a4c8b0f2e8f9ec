/* PCA: coordinates U S = X V of the selected items on the top k components. */
#include "analysis/internal.h"

#include <stdlib.h>
#include <string.h>

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
    es_pca *p = es_malloc(sizeof *p);
    p->n = svd->n;
    p->k = k;
    p->coords = coords;
    p->rows = es_malloc(svd->n * sizeof *p->rows);
    memcpy(p->rows, svd->rows, svd->n * sizeof *p->rows);
    p->evr = es_malloc(k * sizeof *p->evr);
    p->cumulative = es_malloc(k * sizeof *p->cumulative);
    es_variance_ratios(svd, k, p->evr, p->cumulative);
    *out = p;
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
