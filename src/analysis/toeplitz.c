/* Toeplitz score: how much of a position-by-position matrix is a function of the
 * offset between positions alone (relative-position structure). */
#include "embedscope/positional.h"
#include "analysis/internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Position of row i: pos[i], or i without a position list. */
static size_t position(const size_t *pos, size_t i) { return pos ? pos[i] : i; }

/* Slot of the pair (i, j): offset pos_i - pos_j shifted by span into 0..2 span
 * (lo = smallest position; the order of operations keeps size_t non-negative). */
static size_t slot(const size_t *pos, size_t lo, size_t span, size_t i, size_t j)
{
    return position(pos, i) - lo + span - (position(pos, j) - lo);
}

/* Per-offset means and counts: slot t holds offset t - span. */
static void offset_means(const double *g, size_t n, const size_t *pos, size_t lo, size_t span,
                         double *mean, size_t *count)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            size_t t = slot(pos, lo, span, i, j);
            mean[t] += g[i * n + j];
            count[t]++;
        }
    for (size_t t = 0; t <= 2 * span; t++)
        if (count[t])
            mean[t] /= (double)count[t];
}

/* Score of G against its per-offset means (see positional.h). ES_E_PARAM "rows"
 * if n == 0. */
int es_toeplitz_score(const double *g, size_t n, const size_t *pos, es_toeplitz **out,
                      es_err *err)
{
    if (n == 0)
        return es_fail(err, ES_E_PARAM, "rows", "no rows selected for the Toeplitz score");
    size_t lo = position(pos, 0), hi = lo;
    for (size_t i = 1; i < n; i++) {
        lo = position(pos, i) < lo ? position(pos, i) : lo;
        hi = position(pos, i) > hi ? position(pos, i) : hi;
    }
    es_toeplitz *t = es_calloc(1, sizeof *t);
    t->n = n;
    t->span = hi - lo;
    t->diag_mean = es_calloc(2 * t->span + 1, sizeof *t->diag_mean);
    t->diag_count = es_calloc(2 * t->span + 1, sizeof *t->diag_count);
    offset_means(g, n, pos, lo, t->span, t->diag_mean, t->diag_count);
    double mean = 0;
    for (size_t i = 0; i < n * n; i++)
        mean += g[i];
    mean /= (double)(n * n);
    double resid = 0, total = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            double x = g[i * n + j];
            double mo = t->diag_mean[slot(pos, lo, t->span, i, j)];
            resid += (x - mo) * (x - mo);
            total += (x - mean) * (x - mean);
        }
    t->score = total > 0 ? 1 - resid / total : 1.0;
    *out = t;
    return 0;
}


/* G = A B^T for row-major a (n x d) and b (n x d); returns a new n x n array, or
 * NULL (ES_E_NOMEM) when n x n doubles cannot be allocated. */
static double *outer_gram(const double *a, const double *b, size_t n, size_t d, es_err *err)
{
    double *g = es_alloc_doubles(n, n, "Gram matrix", err);
    if (g)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)d, 1.0, a,
                    (int)d, b, (int)d, 0.0, g, (int)n);
    return g;
}

/* Toeplitz score of the Gram / cosine matrix of the selected items; offsets are
 * item-index differences. ES_E_PARAM "rows" if n == 0, ES_E_NOMEM if the n x n
 * matrix cannot be allocated. */
int es_toeplitz_compute(const es_matrix *m, const size_t *idx, size_t n, es_gram_kind kind,
                        es_toeplitz **out, es_err *err)
{
    if (n == 0)
        return es_fail(err, ES_E_PARAM, "rows", "no rows selected for the Toeplitz score");
    size_t d = es_matrix_dim(m);
    double *x = es_matrix_items_copy(m, idx, n);
    if (kind == ES_GRAM_COSINE)
        es_normalise_rows(x, n, d);
    double *g = outer_gram(x, x, n, d, err);
    free(x);
    if (!g)
        return -1;
    int rc = es_toeplitz_score(g, n, idx, out, err);
    free(g);
    return rc;
}

/* Rotate v (length d, even) pairwise by the angles of table row p:
 * (v0, v1) -> (v0 c - v1 s, v0 s + v1 c), c = table(p, 2i), s = table(p, 2i+1). */
static void rotate(const es_matrix *rope, size_t p, const double *v, double *dst)
{
    for (size_t i = 0; i + 1 < rope->cols; i += 2) {
        double c = es_matrix_at(rope, p, i), s = es_matrix_at(rope, p, i + 1);
        dst[i] = v[i] * c - v[i + 1] * s;
        dst[i + 1] = v[i] * s + v[i + 1] * c;
    }
}

/* ES_E_PARAM naming param unless rope has an even, non-zero column count and rows. */
int es_rope_check(const es_matrix *rope, const char *param, es_err *err)
{
    if (rope->cols % 2 || rope->cols == 0 || rope->rows == 0)
        return es_fail(err, ES_E_PARAM, param,
                       "%s is not a RoPE table: %zu x %zu, an even column count is needed",
                       rope->id, rope->rows, rope->cols);
    return 0;
}

/* Score of S[m][n] = rot_m(q) . rot_n(k). ES_E_PARAM naming param if the table's
 * column count is odd; ES_E_NOMEM if S cannot be allocated. */
int es_rope_relative(const es_matrix *rope, const char *param, const double *q, const double *k,
                     es_toeplitz **out, double **s_out, es_err *err)
{
    size_t n = rope->rows, d = rope->cols;
    if (es_rope_check(rope, param, err) < 0)
        return -1;
    double *qr = es_malloc(n * d * sizeof *qr), *kr = es_malloc(n * d * sizeof *kr);
    for (size_t p = 0; p < n; p++) {
        rotate(rope, p, q, qr + p * d);
        rotate(rope, p, k, kr + p * d);
    }
    double *s = outer_gram(qr, kr, n, d, err);
    free(qr);
    free(kr);
    if (!s)
        return -1;
    int rc = es_toeplitz_score(s, n, NULL, out, err);
    if (rc == 0 && s_out)
        *s_out = s;
    else
        free(s);
    return rc;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_toeplitz_free(es_toeplitz *t)
{
    if (!t)
        return;
    free(t->diag_mean);
    free(t->diag_count);
    free(t);
}
