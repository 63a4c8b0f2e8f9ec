/* Exact thin SVD of a selected, centred block of items, in double precision.
 *
 * LAPACK is column-major; our blocks are row-major n x d. A row-major n x d
 * buffer is the column-major d x n matrix A = X^T, so we decompose A directly
 * (no transpose copy inside LAPACKE): A = U_A S Vt_A gives X = Vt_A^T S U_A^T.
 * U_A (d x r, column-major, ld d) has the memory layout of our vt (r x d row-major)
 * and Vt_A (r x n, column-major, ld r) that of our u (n x r row-major), so LAPACK
 * writes both straight into the es_svd arrays. */
#include "embedscope/linalg.h"

#include <cblas.h>
#include <lapacke.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int force_fallback;

/* Test hook: make es_svd_compute behave as if dgesdd had not converged. */
void es_svd_force_fallback(int on)
{
    __atomic_store_n(&force_fallback, on != 0, __ATOMIC_RELAXED);
}

/* Free an es_svd and all its arrays (any of which may be NULL). */
static void svd_free(es_svd *s)
{
    free(s->rows);
    free(s->s);
    free(s->u);
    free(s->vt);
    free(s->mean);
    free(s->key);
    free(s);
}

/* A new es_svd with arrays for an n x d block, one reference. NULL if a
 * request-sized array cannot be allocated. */
static es_svd *svd_alloc(const size_t *idx, size_t n, size_t d, es_centering c)
{
    es_svd *s = es_calloc(1, sizeof *s);
    s->n = n;
    s->d = d;
    s->r = n < d ? n : d;
    s->centering = c;
    s->refs = 1;
    s->rows = es_try_alloc(n, sizeof *s->rows);
    s->s = es_try_alloc(s->r, sizeof *s->s);
    s->u = es_try_alloc(n * s->r, sizeof *s->u);     /* n*r <= n*d, no overflow */
    s->vt = es_try_alloc(s->r * d, sizeof *s->vt);
    s->mean = c == ES_CENTER_COLUMNS ? es_try_alloc(d, sizeof *s->mean) : NULL;
    if (!s->rows || !s->s || !s->u || !s->vt || (c == ES_CENTER_COLUMNS && !s->mean)) {
        svd_free(s);
        return NULL;
    }
    memcpy(s->rows, idx, n * sizeof *idx);
    return s;
}

/* Index of the first non-finite value among n doubles, or n if all are finite. */
static size_t first_nonfinite(const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return n;
}

/* Turn a negative LAPACKE status into an error (work-space allocation -> ES_E_NOMEM). */
static int lapack_fail(es_err *err, const char *routine, lapack_int info)
{
    if (info == LAPACK_WORK_MEMORY_ERROR || info == LAPACK_TRANSPOSE_MEMORY_ERROR)
        return es_fail(err, ES_E_NOMEM, "", "%s: out of memory for LAPACK work space", routine);
    return es_fail(err, ES_E_NUMERIC, "", "%s failed (info %d)", routine, (int)info);
}

/* Decompose x (n x d row-major, kept intact) into s->s, s->u, s->vt, using the
 * scratch copy a (n x d). dgesdd first, dgesvd when dgesdd does not converge.
 * Fails with ES_E_NUMERIC (or ES_E_NOMEM for LAPACK work space). */
static int run_lapack(const double *x, double *a, es_svd *s, es_err *err)
{
    lapack_int m = (lapack_int)s->d, n = (lapack_int)s->n, r = (lapack_int)s->r;
    size_t bytes = s->n * s->d * sizeof *a;
    if (!__atomic_load_n(&force_fallback, __ATOMIC_RELAXED)) {
        memcpy(a, x, bytes);
        lapack_int info = LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'S', m, n, a, m, s->s, s->vt, m, s->u, r);
        if (info == 0) {
            s->solver = "dgesdd";
            return 0;
        }
        if (info < 0)
            return lapack_fail(err, "dgesdd", info);
        es_warn("dgesdd did not converge on a %zu x %zu block (info %d); falling back to dgesvd", s->n, s->d,
                (int)info);
    }
    memcpy(a, x, bytes);
    double *superb = es_malloc(s->r * sizeof *superb);
    lapack_int info = LAPACKE_dgesvd(LAPACK_COL_MAJOR, 'S', 'S', m, n, a, m, s->s, s->vt, m, s->u, r, superb);
    free(superb);
    if (info != 0)
        return info > 0 ? es_fail(err, ES_E_NUMERIC, "", "dgesvd did not converge on a %zu x %zu block (info %d)",
                                  s->n, s->d, (int)info)
                        : lapack_fail(err, "dgesvd", info);
    s->solver = "dgesvd";
    return 0;
}

/* Sign convention: the entry of largest magnitude of each right vector (the first
 * such on ties) is made positive; the left vector flips with it. */
static void fix_signs(es_svd *s)
{
    for (size_t j = 0; j < s->r; j++) {
        double *v = s->vt + j * s->d;
        size_t best = 0;
        for (size_t k = 1; k < s->d; k++)
            if (fabs(v[k]) > fabs(v[best]))
                best = k;
        if (v[best] < 0) {
            cblas_dscal((blasint)s->d, -1.0, v, 1);
            cblas_dscal((blasint)s->n, -1.0, s->u + j, (blasint)s->r);
        }
    }
}

/* Sum of squares of an n x d row-major array, row by row (BLAS int per row). */
static double sum_squares(const double *x, size_t n, size_t d)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += cblas_ddot((blasint)d, x + i * d, 1, x + i * d, 1);
    return ss;
}

/* recon_error = ||X - U S Vt||_F / ||X||_F, computed in scratch a (n x d). */
static void measure_reconstruction(const double *x, double *a, es_svd *s)
{
    size_t n = s->n, d = s->d, r = s->r;
    double *us = es_malloc(n * r * sizeof *us);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < r; j++)
            us[i * r + j] = s->u[i * r + j] * s->s[j];
    memcpy(a, x, n * d * sizeof *a);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n, (blasint)d, (blasint)r, -1.0, us,
                (blasint)r, s->vt, (blasint)d, 1.0, a, (blasint)d);
    free(us);
    s->recon_error = s->total_ss > 0 ? sqrt(sum_squares(a, n, d) / s->total_ss) : 0;
}

/* orth_error = max |(Vt Vt^T - I)_ij| over the r right vectors (upper triangle of
 * the symmetric Gram matrix suffices). */
static void measure_orthogonality(es_svd *s)
{
    size_t r = s->r;
    double *g = es_calloc(r * r, sizeof *g);
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, (blasint)r, (blasint)s->d, 1.0, s->vt, (blasint)s->d,
                0.0, g, (blasint)r);
    double worst = 0;
    for (size_t i = 0; i < r; i++)
        for (size_t j = i; j < r; j++)
            worst = fmax(worst, fabs(g[i * r + j] - (i == j ? 1.0 : 0.0)));
    free(g);
    s->orth_error = worst;
}

/* Check every value of the block is finite; ES_E_NUMERIC naming the matrix, the
 * first offending item and coordinate and `stage` ("in the data", "after ...") otherwise. */
static int check_block_finite(const es_matrix *m, const double *x, const es_svd *s, const char *stage,
                              es_err *err)
{
    size_t bad = first_nonfinite(x, s->n * s->d);
    if (bad == s->n * s->d)
        return 0;
    return es_fail(err, ES_E_NUMERIC, "", "%s: item %zu coordinate %zu is not finite %s", m->id, s->rows[bad / s->d],
                   bad % s->d, stage);
}

/* ES_E_NUMERIC if the solver returned any non-finite value in s, u or vt. */
static int check_output_finite(const es_matrix *m, const es_svd *s, es_err *err)
{
    if (first_nonfinite(s->s, s->r) == s->r && first_nonfinite(s->u, s->n * s->r) == s->n * s->r &&
        first_nonfinite(s->vt, s->r * s->d) == s->r * s->d)
        return 0;
    return es_fail(err, ES_E_NUMERIC, "", "%s: %s produced non-finite values", m->id, s->solver);
}

/* Compute the SVD of items idx[0..n) of m (model orientation), centred by c.
 * Fails with ES_E_PARAM (param "rows") on an empty or out-of-range selection,
 * ES_E_LIMIT (param "rows") when the block exceeds LAPACK's int dimensions,
 * ES_E_NOMEM when buffers cannot be allocated, ES_E_NUMERIC on non-finite input
 * or when both solvers fail. */
int es_svd_compute(const es_matrix *m, const size_t *idx, size_t n, es_centering c, es_svd **out, es_err *err)
{
    double t0 = es_now();
    size_t items = es_matrix_items(m), d = es_matrix_dim(m);
    if (n == 0 || d == 0)
        return es_fail(err, ES_E_PARAM, "rows", "%s: empty selection (%zu rows x %zu coordinates)", m->id, n, d);
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= items)
            return es_fail(err, ES_E_PARAM, "rows", "%s: row %zu out of range (%zu rows)", m->id, idx[i], items);
    size_t nd;
    if (es_mul_size(n, d, &nd) < 0 || n > INT_MAX || d > INT_MAX || nd > INT_MAX)
        return es_fail(err, ES_E_LIMIT, "rows", "%s: a %zu x %zu block is too large for LAPACK", m->id, n, d);
    es_svd *s = svd_alloc(idx, n, d, c);
    double *a = es_try_alloc(nd, sizeof *a);
    if (!s || !a) {
        free(a);
        if (s)
            svd_free(s);
        return es_fail(err, ES_E_NOMEM, "rows", "%s: cannot allocate the SVD of %zu x %zu", m->id, n, d);
    }
    double *x = es_matrix_items_copy(m, idx, n);
    int rc = check_block_finite(m, x, s, "in the data", err);
    if (rc == 0 && c != ES_CENTER_NONE) { /* finite data can still overflow in the means */
        es_center(x, n, d, c, s->mean);
        rc = check_block_finite(m, x, s, c == ES_CENTER_COLUMNS ? "after centring columns (overflow)"
                                                                : "after centring rows (overflow)", err);
    }
    if (rc == 0)
        rc = run_lapack(x, a, s, err);
    if (rc == 0)
        rc = check_output_finite(m, s, err);
    if (rc == 0) {
        fix_signs(s);
        s->total_ss = sum_squares(x, n, d);
        measure_reconstruction(x, a, s);
        measure_orthogonality(s);
    }
    free(x);
    free(a);
    if (rc < 0) {
        svd_free(s);
        return -1;
    }
    s->seconds = es_now() - t0;
    *out = s;
    return 0;
}

/* Add a reference (NULL passes through). Cannot fail. */
es_svd *es_svd_retain(es_svd *s)
{
    if (s)
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
    return s;
}

/* Drop a reference; the last one frees everything. NULL is ignored. */
void es_svd_release(es_svd *s)
{
    if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
        svd_free(s);
}

/* Bytes held by a decomposition (struct, arrays, key), for the cache budget. */
size_t es_svd_bytes(const es_svd *s)
{
    size_t doubles = s->r + s->n * s->r + s->r * s->d + (s->mean ? s->d : 0);
    return sizeof *s + s->n * sizeof *s->rows + doubles * sizeof(double) + (s->key ? strlen(s->key) + 1 : 0);
}
