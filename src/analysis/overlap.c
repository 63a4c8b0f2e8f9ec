/* Squared overlaps between two sets of model-space singular vectors, optionally
 * binned and smoothed.
 *
 * Smoothing: a separable Gaussian of standard deviation `blur` (in bins),
 * truncated at |t| <= 4 blur. Each output cell is the weighted MEAN of the
 * cells within the window that lie inside the grid, i.e. the weights are
 * renormalised by the kernel mass that falls inside the grid. Consequences:
 * constant grids (and constant rows or columns) are unchanged, every value stays
 * within the input's range, and the result equals the direct 2-D normalised
 * convolution with weights exp(-(dx^2 + dy^2) / (2 blur^2)). Totals (the row and
 * column sums of 1) are only approximately preserved near the edges. */
#include "analysis/internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

/* k = 0 means all r vectors; otherwise ES_E_PARAM `param` unless k <= r. */
static int resolve_count(size_t k, size_t r, const char *param, size_t *out, es_err *err)
{
    if (k != 0 && es_check_k(k, r, param, err) != 0)
        return -1;
    *out = k ? k : r;
    return 0;
}

/* Gaussian weights w[t] = exp(-t^2 / (2 sigma^2)) for t = 0..radius. */
static double *gaussian_weights(double sigma, size_t radius)
{
    double *w = es_malloc((radius + 1) * sizeof *w);
    for (size_t t = 0; t <= radius; t++)
        w[t] = exp(-(double)(t * t) / (2 * sigma * sigma));
    return w;
}

/* Normalised 1-D convolution of `lines` lines of `len` values (element i of
 * line l at data[l * line_stride + i * step]); tmp holds len doubles. */
static void blur_lines(double *data, size_t lines, size_t len, size_t line_stride, size_t step,
                       const double *w, size_t radius, double *tmp)
{
    for (size_t l = 0; l < lines; l++) {
        double *line = data + l * line_stride;
        for (size_t i = 0; i < len; i++) {
            size_t from = i > radius ? i - radius : 0;
            size_t to = len - 1 - i > radius ? i + radius : len - 1;
            long double acc = 0, mass = 0;
            for (size_t j = from; j <= to; j++) {
                double wt = w[j > i ? j - i : i - j];
                acc += (long double)wt * line[j * step];
                mass += wt;
            }
            tmp[i] = (double)(acc / mass);
        }
        for (size_t i = 0; i < len; i++)
            line[i * step] = tmp[i];
    }
}

/* Smooth the grid in place along rows, then along columns (see the file comment). */
static void blur_grid(es_grid *g, double sigma)
{
    size_t longest = g->rows > g->cols ? g->rows : g->cols;
    double reach = floor(4 * sigma);
    size_t radius = reach >= (double)(longest - 1) ? longest - 1 : (size_t)reach;
    double *w = gaussian_weights(sigma, radius);
    double *tmp = es_malloc(longest * sizeof *tmp);
    blur_lines(g->values, g->rows, g->cols, g->cols, 1, w, radius, tmp);
    blur_lines(g->values, g->cols, g->rows, 1, g->cols, w, radius, tmp);
    free(tmp);
    free(w);
}

/* ES_E_PARAM "method" if either holds values only; ES_E_INCOMPATIBLE if d
 * differs; ES_E_PARAM "ka" / "kb" if above the rank,
 * "blur" unless finite and >= 0; ES_E_NOMEM if the ka x kb product does not fit. */
int es_overlap_compute(const es_svd *a, size_t ka, const es_svd *b, size_t kb,
                       size_t bins, double blur, es_grid **out, es_err *err)
{
    if (es_svd_need_vectors(a, "overlap", err) != 0 || es_svd_need_vectors(b, "overlap", err) != 0 ||
        es_check_same_space(a, b, err) != 0 || resolve_count(ka, a->r, "ka", &ka, err) != 0 ||
        resolve_count(kb, b->r, "kb", &kb, err) != 0)
        return -1;
    if (!isfinite(blur) || blur < 0)
        return es_fail(err, ES_E_PARAM, "blur", "blur must be a finite number >= 0, got %g", blur);
    double *m = es_alloc_doubles(ka, kb, "overlap matrix", err);
    if (!m)
        return -1;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)ka, (int)kb, (int)a->d, 1.0, a->vt,
                (int)a->d, b->vt, (int)b->d, 0.0, m, (int)kb);
    for (size_t i = 0; i < ka * kb; i++)
        m[i] *= m[i];
    es_grid *g;
    int rc = es_grid_from_blocks(m, ka, kb, bins, false, &g, err);
    free(m);
    if (rc != 0)
        return -1;
    if (blur > 0)
        blur_grid(g, blur);
    *out = g;
    return 0;
}
