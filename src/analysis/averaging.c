/* The row-averaging summary: how far averaging positions in groups moves them in
 * the original's top PCA space (the matrices themselves are built by
 * es_matrix_average_rows in src/store/derive.c). */
#include "embedscope/positional.h"
#include "analysis/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Coordinates of item `item` of a on the top k right vectors of pca, after
 * subtracting pca's mean row: (a_item - mean) . v_j, into c[0..k). */
static void project_item(const es_svd *pca, const es_matrix *a, size_t item, size_t k, double *c)
{
    for (size_t j = 0; j < k; j++) {
        const double *v = pca->vt + j * pca->d;
        double dot = 0;
        for (size_t t = 0; t < pca->d; t++)
            dot += (es_matrix_item(a, item, t) - pca->mean[t]) * v[t];
        c[j] = dot;
    }
}

/* Check that matrix x can be projected with pca: same dimension and every
 * selected item present. ES_E_INCOMPATIBLE naming param otherwise. */
static int check_projectable(const es_svd *pca, const es_matrix *x, const char *param,
                             es_err *err)
{
    size_t max_row = 0;
    for (size_t i = 0; i < pca->n; i++)
        max_row = pca->rows[i] > max_row ? pca->rows[i] : max_row;
    if (es_matrix_dim(x) == pca->d && max_row < es_matrix_items(x))
        return 0;
    return es_fail(err, ES_E_INCOMPATIBLE, param,
                   "%s (%zu items of dimension %zu) does not match the decomposition "
                   "(dimension %zu, item %zu selected)",
                   x->id, es_matrix_items(x), es_matrix_dim(x), pca->d, max_row);
}

/* Displacements of the selected rows between the original and the averaged matrix
 * in the original's top-k PCA space (see positional.h). Both are projected by the
 * same code, so identical rows give a displacement of exactly 0. */
int es_averaging_compute(const es_svd *pca, const es_matrix *original, const es_matrix *averaged,
                         es_averaging **out, es_err *err)
{
    if (es_svd_need_vectors(pca, "averaging", err) != 0)
        return -1;
    if (pca->centering != ES_CENTER_COLUMNS || !pca->mean)
        return es_fail(err, ES_E_PARAM, "centering",
                       "the averaging summary needs the PCA (centering columns) of the original, "
                       "got centering %s", es_centering_name(pca->centering));
    if (check_projectable(pca, original, "matrix", err) != 0 ||
        check_projectable(pca, averaged, "average", err) != 0)
        return -1;
    es_averaging *a = es_calloc(1, sizeof *a);
    a->n = pca->n;
    a->k = pca->r < 3 ? pca->r : 3;
    a->rows = memcpy(es_malloc(a->n * sizeof *a->rows), pca->rows, a->n * sizeof *a->rows);
    a->disp = es_malloc(a->n * sizeof *a->disp);
    double c[3], o[3], sum_disp = 0, sum_radius = 0;
    for (size_t i = 0; i < a->n; i++) {
        project_item(pca, original, pca->rows[i], a->k, o);
        project_item(pca, averaged, pca->rows[i], a->k, c);
        double dd = 0, rr = 0;
        for (size_t j = 0; j < a->k; j++) {
            dd += (c[j] - o[j]) * (c[j] - o[j]);
            rr += o[j] * o[j];
        }
        a->disp[i] = sqrt(dd);
        sum_disp += a->disp[i];
        sum_radius += sqrt(rr);
        if (i == 0 || a->disp[i] > a->max_disp) {
            a->max_disp = a->disp[i];
            a->max_row = pca->rows[i];
        }
    }
    a->mean_disp = sum_disp / (double)a->n;
    a->radius = sum_radius / (double)a->n;
    a->rel_mean = a->radius > 0 ? a->mean_disp / a->radius : 0;
    a->rel_max = a->radius > 0 ? a->max_disp / a->radius : 0;
    *out = a;
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_averaging_free(es_averaging *a)
{
    if (!a)
        return;
    free(a->rows);
    free(a->disp);
    free(a);
}
