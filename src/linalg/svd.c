/* Exact thin SVD of a selected, centred block of items, in double precision.
 *
 * LAPACK is column-major and our blocks are row-major n x d. We factor X = Q R
 * by Householder QR (dgeqrf) on whichever orientation is tall, then take the SVD
 * of the small square R with dgesdd (dgesvd as fallback). This is LAPACK's own
 * route for tall matrices, minus the two costs that dominate it and that most
 * analyses never use: forming Q explicitly and multiplying it into U.
 *
 *  - tall (n >= d): the block is gathered transposed into a column-major n x d
 *    array, X = Q R with R d x d. The SVD of R^T = V S U_R^T gives the right
 *    vectors V directly (written straight into vt) and U_R; U = Q U_R is only
 *    formed when asked for (es_svd_left: the QR is redone and Q applied with
 *    dormqr). PCA coordinates are X V (es_svd_project), capture and overlap use
 *    V and s, so the first answer costs one QR plus a d x d SVD.
 *  - wide (n < d): the row-major block is already column-major X^T (d x n);
 *    X^T = Q R with R n x n, R = U_R S W^T, so U = W and V = Q U_R, both formed
 *    at once (n is small here).
 *
 * reconstruction_error is measured on the small factor, ||R - U_R S W^T|| /
 * ||X||: Q is orthogonal, so this is ||X - U S V^T|| / ||X|| up to the QR's own
 * backward error (O(n eps), Householder QR is backward stable); it costs d^3
 * instead of the n d^2 of forming X - U S V^T. */
#include "linalg/internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int force_fallback;

/* Items gathered per block when transposing or projecting: a block of rows
 * (GATHER_BLOCK x d doubles) stays in the L2 cache. */
#define GATHER_BLOCK 32
#define PROJECT_BLOCK 256
/* Left vectors are formed for at least this many columns at a time, so the
 * usual small-k requests share one formation. */
#define LEFT_MIN_COLS 64


/* Test hook: make es_svd_compute behave as if dgesdd had not converged. */
void es_svd_force_fallback(int on)
{
    __atomic_store_n(&force_fallback, on != 0, __ATOMIC_RELAXED);
}

/* Free an es_svd and all its arrays (any of which may be NULL). */
void es_svd_free(es_svd *s)
{
    free(s->rows);
    free(s->s);
    for (struct es_svd_left_block *b = s->left, *older; b; b = older) {
        older = b->older;
        free(b->u);
        free(b);
    }
    free(s->ur);
    free(s->vt);
    free(s->mean);
    free(s->key);
    es_matrix_release(s->m);
    pthread_mutex_destroy(&s->left_lock);
    free(s);
}

/* True when the block is decomposed through the transposed (tall) route. */
static bool is_tall(const es_svd *s)
{
    return s->n >= s->d;
}

/* A new es_svd for r triplets of an n x d block of m (retained), one reference,
 * method "exact". The left vectors get their array now when left_now (wide
 * blocks, top-k), else a tall block gets U_R's. NULL if a request-sized array
 * cannot be allocated. */
es_svd *es_svd_alloc(const es_matrix *m, const size_t *idx, size_t n, size_t d, es_centering c, size_t r,
                     bool left_now)
{
    es_svd *s = es_calloc(1, sizeof *s);
    s->n = n;
    s->d = d;
    s->r = r;
    s->centering = c;
    s->method = "exact";
    s->refs = 1;
    s->m = es_matrix_retain((es_matrix *)m);
    pthread_mutex_init(&s->left_lock, NULL);
    s->rows = es_try_alloc(n, sizeof *s->rows);
    s->s = es_try_alloc(r, sizeof *s->s);
    s->vt = es_try_alloc(r, d * sizeof *s->vt);
    if (!left_now) {
        s->ur = es_try_alloc(r * r, sizeof *s->ur);
    } else {
        s->left = es_calloc(1, sizeof *s->left);
        s->left->cols = r;
        s->left->u = es_try_alloc(n, r * sizeof *s->left->u);
    }
    s->mean = c == ES_CENTER_COLUMNS ? es_try_alloc(d, sizeof *s->mean) : NULL;
    if (!s->rows || !s->s || !s->vt || !(s->ur || s->left->u) || (c == ES_CENTER_COLUMNS && !s->mean)) {
        es_svd_free(s);
        return NULL;
    }
    memcpy(s->rows, idx, n * sizeof *idx);
    return s;
}

/* Turn a negative LAPACKE status into an error (work-space allocation -> ES_E_NOMEM). */
int es_lapack_fail(es_err *err, const char *routine, lapack_int info)
{
    if (info == LAPACK_WORK_MEMORY_ERROR || info == LAPACK_TRANSPOSE_MEMORY_ERROR)
        return es_fail(err, ES_E_NOMEM, "", "%s: out of memory for LAPACK work space", routine);
    return es_fail(err, ES_E_NUMERIC, "", "%s failed (info %d)", routine, (int)info);
}

/* ---------------------------------------------------------------- the block */

/* Row-major position (item * d + coord) of the first non-finite value of the
 * block held column-major (n x d, ld n), or n * d if all are finite. */
static size_t first_nonfinite_colmajor(const double *a, size_t n, size_t d)
{
    size_t best = n * d;
    for (size_t k = 0; k < d; k++)
        for (size_t i = 0; i < n; i++)
            if (!isfinite(a[k * n + i])) {
                if (i * d + k < best)
                    best = i * d + k;
                break; /* later items of this coordinate come after it */
            }
    return best;
}

/* Position of the first non-finite value among n doubles, or n. */
static size_t first_nonfinite(const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return n;
}

/* ES_E_NUMERIC naming the matrix, the item and coordinate at row-major position
 * bad (none if bad == n * d) and `stage`; 0 when bad == n * d. */
static int report_nonfinite(const es_svd *s, size_t bad, const char *stage, es_err *err)
{
    if (bad == s->n * s->d)
        return 0;
    return es_fail(err, ES_E_NUMERIC, "", "%s: item %zu coordinate %zu is not finite %s", s->m->id,
                   s->rows[bad / s->d], bad % s->d, stage);
}

/* Gather the selected items into a, row-major n x d, or column-major n x d
 * (the transpose) when `transposed`, a few items at a time so that no second
 * full copy is made and both sides stay in cache. Fails with ES_E_NUMERIC on a
 * non-finite value (the first in row-major order). */
static int gather(const es_svd *s, double *a, bool transposed, es_err *err)
{
    size_t n = s->n, d = s->d;
    for (size_t i0 = 0; i0 < n; i0 += GATHER_BLOCK) {
        size_t b = n - i0 < GATHER_BLOCK ? n - i0 : GATHER_BLOCK;
        double *blk = es_matrix_items_copy(s->m, s->rows + i0, b);
        size_t bad = first_nonfinite(blk, b * d);
        if (bad < b * d) {
            free(blk);
            return report_nonfinite(s, i0 * d + bad, "in the data", err);
        }
        if (!transposed)
            memcpy(a + i0 * d, blk, b * d * sizeof *a);
        else
            for (size_t k = 0; k < d; k++)
                for (size_t i = 0; i < b; i++)
                    a[k * n + i0 + i] = blk[i * d + k];
        free(blk);
    }
    return 0;
}

/* Centre the column-major n x d block in place: it is the row-major d x n
 * block of the transpose, so centring X's columns is centring its rows (the same
 * arithmetic and summation order as on X). The column means go to mean_out
 * (columns centring). Never fails. */
static void center_colmajor(double *a, size_t n, size_t d, es_centering c, double *mean_out)
{
    if (c == ES_CENTER_COLUMNS)
        es_center(a, d, n, ES_CENTER_ROWS, mean_out);
    else if (c == ES_CENTER_ROWS)
        es_center(a, d, n, ES_CENTER_COLUMNS, NULL);
}

/* Message tail for a non-finite value that appears only after centring. */
static const char *overflow_stage(es_centering c)
{
    return c == ES_CENTER_COLUMNS ? "after centring columns (overflow)" : "after centring rows (overflow)";
}

/* The centred block, row-major n x d, into a. Fails with ES_E_NUMERIC on
 * non-finite data or overflow in the means. */
int es_svd_load_rowmajor(const es_svd *s, double *a, double *mean_out, es_err *err)
{
    size_t n = s->n, d = s->d;
    if (gather(s, a, false, err) < 0)
        return -1;
    if (s->centering == ES_CENTER_NONE)
        return 0;
    es_center(a, n, d, s->centering, mean_out);
    return report_nonfinite(s, first_nonfinite(a, n * d), overflow_stage(s->centering), err);
}

/* The centred block in LAPACK's tall orientation: column-major n x d (tall) or
 * the row-major block, which is column-major d x n (wide). Fails with
 * ES_E_NUMERIC on non-finite data or overflow in the means. */
static int load_block(es_svd *s, double *a, double *mean_out, es_err *err)
{
    size_t n = s->n, d = s->d;
    if (!is_tall(s))
        return es_svd_load_rowmajor(s, a, mean_out, err);
    if (gather(s, a, true, err) < 0)
        return -1;
    if (s->centering == ES_CENTER_NONE)
        return 0;
    center_colmajor(a, n, d, s->centering, mean_out);
    return report_nonfinite(s, first_nonfinite_colmajor(a, n, d), overflow_stage(s->centering), err);
}

/* Householder QR of the loaded block in place (m x r column-major, m >= r),
 * reflector scalars in tau (r). ES_E_NUMERIC / ES_E_NOMEM from LAPACK. */
static int factor_qr(const es_svd *s, double *a, double *tau, es_err *err)
{
    lapack_int m = (lapack_int)(is_tall(s) ? s->n : s->d), r = (lapack_int)s->r;
    lapack_int info = LAPACKE_dgeqrf(LAPACK_COL_MAJOR, m, r, a, m, tau);
    return info == 0 ? 0 : es_lapack_fail(err, "dgeqrf", info);
}

/* ---------------------------------------------------------------- the small SVD */

/* Sum of squares of len doubles, in BLAS-int chunks. */
double es_sum_squares(const double *x, size_t len)
{
    double ss = 0;
    for (size_t i = 0; i < len; i += INT_MAX / 2) {
        size_t chunk = len - i < INT_MAX / 2 ? len - i : INT_MAX / 2;
        ss += cblas_ddot((blasint)chunk, x + i, 1, x + i, 1);
    }
    return ss;
}

/* SVD of the r x r column-major matrix b = L diag(sv) Rt (L, Rt column-major
 * r x r): dgesdd, then dgesvd when dgesdd does not converge (or the test hook
 * says so). b is kept; the solver's name goes to *solver. */
static int small_svd(const double *b, size_t r, double *sv, double *left, double *right_t, const char **solver,
                     es_err *err)
{
    lapack_int k = (lapack_int)r;
    double *w = es_malloc(r * r * sizeof *w);
    if (!__atomic_load_n(&force_fallback, __ATOMIC_RELAXED)) {
        memcpy(w, b, r * r * sizeof *w);
        lapack_int info = LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'S', k, k, w, k, sv, left, k, right_t, k);
        if (info <= 0) {
            free(w);
            *solver = "dgesdd";
            return info == 0 ? 0 : es_lapack_fail(err, "dgesdd", info);
        }
        es_warn("dgesdd did not converge on a %zu x %zu factor (info %d); falling back to dgesvd", r, r, (int)info);
    }
    memcpy(w, b, r * r * sizeof *w);
    double *superb = es_malloc(r * sizeof *superb);
    lapack_int info = LAPACKE_dgesvd(LAPACK_COL_MAJOR, 'S', 'S', k, k, w, k, sv, left, k, right_t, k, superb);
    free(superb);
    free(w);
    *solver = "dgesvd";
    if (info != 0)
        return info > 0 ? es_fail(err, ES_E_NUMERIC, "", "dgesvd did not converge on a %zu x %zu factor (info %d)",
                                  r, r, (int)info)
                        : es_lapack_fail(err, "dgesvd", info);
    return 0;
}

/* ||b - L diag(sv) Rt||_F for r x r column-major factors (the backward error of
 * small_svd). Never fails. */
static double small_residual(const double *b, size_t r, const double *sv, const double *left, const double *right_t)
{
    double *ls = es_malloc(r * r * sizeof *ls), *res = es_malloc(r * r * sizeof *res);
    for (size_t j = 0; j < r; j++)
        for (size_t i = 0; i < r; i++)
            ls[j * r + i] = left[j * r + i] * sv[j];
    memcpy(res, b, r * r * sizeof *res);
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (blasint)r, (blasint)r, (blasint)r, -1.0, ls,
                (blasint)r, right_t, (blasint)r, 1.0, res, (blasint)r);
    double norm = sqrt(es_sum_squares(res, r * r));
    free(ls);
    free(res);
    return norm;
}

/* The r x r matrix whose SVD we take, column-major: R^T for a tall block (so its
 * left vectors are our right vectors, laid out as vt), R for a wide one. The
 * upper triangle of the QR output a (leading dimension lda) holds R. */
static double *small_factor(const es_svd *s, const double *a, size_t lda)
{
    size_t r = s->r;
    double *b = es_calloc(r * r, sizeof *b);
    for (size_t k = 0; k < r; k++)
        for (size_t l = 0; l <= k; l++) {
            double rlk = a[k * lda + l]; /* R(l, k) */
            if (is_tall(s))
                b[l * r + k] = rlk; /* R^T(k, l) */
            else
                b[k * r + l] = rlk;
        }
    return b;
}

/* Sign convention: the entry of largest magnitude of each right vector (the first
 * such on ties) is made positive; the left vector (column j of U_R when the
 * block keeps it, else of u; both have stride r) flips with it. */
void es_svd_fix_signs(es_svd *s)
{
    double *left = s->ur ? s->ur : s->left->u;
    size_t left_len = s->ur ? s->r : s->n;
    for (size_t j = 0; j < s->r; j++) {
        double *v = s->vt + j * s->d;
        size_t best = 0;
        for (size_t k = 1; k < s->d; k++)
            if (fabs(v[k]) > fabs(v[best]))
                best = k;
        if (v[best] < 0) {
            cblas_dscal((blasint)s->d, -1.0, v, 1);
            cblas_dscal((blasint)left_len, -1.0, left + j, (blasint)s->r);
        }
    }
}

/* The first k left vectors from the QR in a (tall: n x d, ld n): u (n x k
 * row-major, i.e. U_k^T column-major k x n) = [U_R(:, :k)^T 0] Q^T.
 * ES_E_NUMERIC/ES_E_NOMEM from LAPACK. */
static int apply_q_left(const es_svd *s, const double *a, const double *tau, size_t k, double *u, es_err *err)
{
    size_t n = s->n, r = s->r;
    memset(u, 0, n * k * sizeof *u);
    for (size_t i = 0; i < r; i++) /* U_R(i, :k) is column i of U_R^T */
        memcpy(u + i * k, s->ur + i * r, k * sizeof *u);
    lapack_int info = LAPACKE_dormqr(LAPACK_COL_MAJOR, 'R', 'T', (lapack_int)k, (lapack_int)n, (lapack_int)r, a,
                                     (lapack_int)n, tau, u, (lapack_int)k);
    return info == 0 ? 0 : es_lapack_fail(err, "dormqr", info);
}

/* Wide block: V = Q [U_R; 0] (d x r column-major = vt row-major) from the QR of
 * X^T in a (d x n, ld d). left holds U_R (r x r column-major). */
static int apply_q_right(const es_svd *s, const double *a, const double *tau, const double *left, es_err *err)
{
    size_t d = s->d, r = s->r;
    memset(s->vt, 0, r * d * sizeof *s->vt);
    for (size_t j = 0; j < r; j++)
        memcpy(s->vt + j * d, left + j * r, r * sizeof *left);
    lapack_int info = LAPACKE_dormqr(LAPACK_COL_MAJOR, 'L', 'N', (lapack_int)d, (lapack_int)r, (lapack_int)r, a,
                                     (lapack_int)d, tau, s->vt, (lapack_int)d);
    return info == 0 ? 0 : es_lapack_fail(err, "dormqr", info);
}

/* orth_error = max |(Vt Vt^T - I)_ij| over the r right vectors (upper triangle of
 * the symmetric Gram matrix suffices). */
void es_svd_measure_orthogonality(es_svd *s)
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

/* SVD of the small factor of the QR in a (leading dimension lda) into s, its
 * backward error into recon_error. Tall: s->vt and s->ur come straight out of
 * the solver; wide: U = W lands in the first left block and V = Q U_R is formed. */
static int decompose_factor(es_svd *s, const double *a, size_t lda, const double *tau, es_err *err)
{
    size_t r = s->r;
    double *b = small_factor(s, a, lda), *left, *right_t;
    if (is_tall(s)) {
        left = s->vt; /* r == d: the left vectors of R^T, column-major, are vt */
        right_t = s->ur;
    } else {
        left = es_malloc(r * r * sizeof *left);
        right_t = s->left->u; /* r == n: W^T column-major is u row-major */
    }
    int rc = small_svd(b, r, s->s, left, right_t, &s->solver, err);
    if (rc == 0) {
        double res = small_residual(b, r, s->s, left, right_t);
        s->recon_error = s->total_ss > 0 ? res / sqrt(s->total_ss) : 0;
        if (!is_tall(s))
            rc = apply_q_right(s, a, tau, left, err);
    }
    if (!is_tall(s))
        free(left);
    free(b);
    return rc;
}

/* ES_E_NUMERIC if the solver returned any non-finite value in s, vt or the left factor. */
int es_svd_check_output(const es_svd *s, es_err *err)
{
    const double *left = s->ur ? s->ur : s->left->u;
    size_t left_len = s->ur ? s->r * s->r : s->n * s->r;
    if (first_nonfinite(s->s, s->r) == s->r && first_nonfinite(left, left_len) == left_len &&
        first_nonfinite(s->vt, s->r * s->d) == s->r * s->d)
        return 0;
    return es_fail(err, ES_E_NUMERIC, "", "%s: %s produced non-finite values", s->m->id, s->solver);
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
    es_svd *s = es_svd_alloc(m, idx, n, d, c, n < d ? n : d, n < d);
    double *a = es_try_alloc(nd, sizeof *a);
    if (!s || !a) {
        free(a);
        if (s)
            es_svd_free(s);
        return es_fail(err, ES_E_NOMEM, "rows", "%s: cannot allocate the SVD of %zu x %zu", m->id, n, d);
    }
    double *tau = es_malloc(s->r * sizeof *tau);
    int rc = load_block(s, a, s->mean, err);
    if (rc == 0) {
        s->total_ss = es_sum_squares(a, nd);
        rc = factor_qr(s, a, tau, err);
    }
    if (rc == 0)
        rc = decompose_factor(s, a, is_tall(s) ? n : d, tau, err);
    if (rc == 0)
        rc = es_svd_check_output(s, err);
    free(tau);
    free(a);
    if (rc < 0) {
        es_svd_free(s);
        return -1;
    }
    es_svd_fix_signs(s);
    es_svd_measure_orthogonality(s);
    s->cert = (es_certificate){.passed = true};
    s->seconds = es_now() - t0;
    *out = s;
    return 0;
}

/* The first k left vectors of a tall block, published as the newest block (lock
 * held): redo the QR of the block (the same arithmetic, so the same Q) and
 * apply Q to U_R's first k columns. Fails with ES_E_NOMEM or ES_E_NUMERIC. */
static int form_left(es_svd *s, size_t k, es_err *err)
{
    size_t nd = s->n * s->d;
    double *a = es_try_alloc(nd, sizeof *a), *u = es_try_alloc(s->n, k * sizeof *u);
    double *mean = s->centering == ES_CENTER_COLUMNS ? es_malloc(s->d * sizeof *mean) : NULL;
    double *tau = es_malloc(s->r * sizeof *tau);
    int rc = a && u ? 0 : es_fail(err, ES_E_NOMEM, "", "%s: cannot allocate %zu x %zu left vectors", s->m->id,
                                  s->n, k);
    if (rc == 0)
        rc = load_block(s, a, mean, err);
    if (rc == 0)
        rc = factor_qr(s, a, tau, err);
    if (rc == 0)
        rc = apply_q_left(s, a, tau, k, u, err);
    if (rc == 0) {
        struct es_svd_left_block *b = es_malloc(sizeof *b);
        *b = (struct es_svd_left_block){.u = u, .cols = k, .older = s->left};
        __atomic_store_n(&s->left, b, __ATOMIC_RELEASE);
    } else {
        free(u);
    }
    free(a);
    free(mean);
    free(tau);
    return rc;
}

/* At least the first k left vectors (row stride *ld), formed on first need:
 * LEFT_MIN_COLS columns at least, all r when more are asked for. Fails as
 * form_left, or ES_E_PARAM "k" unless 1 <= k <= r; never for a wide block
 * (formed with the decomposition). */
const double *es_svd_left(const es_svd *cs, size_t k, size_t *ld, es_err *err)
{
    es_svd *s = (es_svd *)cs; /* formed left vectors are a cache, not a change of value */
    if (k == 0 || k > s->r) {
        es_fail(err, ES_E_PARAM, "k", "k must be between 1 and %zu, got %zu", s->r, k);
        return NULL;
    }
    struct es_svd_left_block *b = __atomic_load_n(&s->left, __ATOMIC_ACQUIRE);
    if (!b || b->cols < k) {
        pthread_mutex_lock(&s->left_lock);
        int rc = 0;
        if (!s->left || s->left->cols < k)
            rc = form_left(s, k <= LEFT_MIN_COLS && s->r > LEFT_MIN_COLS ? LEFT_MIN_COLS : s->r, err);
        b = s->left;
        pthread_mutex_unlock(&s->left_lock);
        if (rc < 0)
            return NULL;
    }
    *ld = b->cols;
    return b->u;
}

/* out (n x k row-major) = X V_k for the centred block X, a block of items at a
 * time. Fails with ES_E_PARAM "k" unless 1 <= k <= r. */
int es_svd_project(const es_svd *s, size_t k, double *out, es_err *err)
{
    if (k == 0 || k > s->r)
        return es_fail(err, ES_E_PARAM, "k", "k must be between 1 and %zu, got %zu", s->r, k);
    size_t d = s->d;
    for (size_t i0 = 0; i0 < s->n; i0 += PROJECT_BLOCK) {
        size_t b = s->n - i0 < PROJECT_BLOCK ? s->n - i0 : PROJECT_BLOCK;
        double *blk = es_matrix_items_copy(s->m, s->rows + i0, b);
        if (s->centering == ES_CENTER_COLUMNS)
            for (size_t i = 0; i < b; i++)
                cblas_daxpy((blasint)d, -1.0, s->mean, 1, blk + i * d, 1);
        else
            es_center(blk, b, d, s->centering, NULL);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)b, (blasint)k, (blasint)d, 1.0, blk,
                    (blasint)d, s->vt, (blasint)d, 0.0, out + i0 * k, (blasint)k);
        free(blk);
    }
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
        es_svd_free(s);
}

/* Bytes a decomposition holds or may hold once its left vectors are formed
 * (struct, arrays, key), for the cache budget. */
size_t es_svd_bytes(const es_svd *s)
{
    size_t doubles = s->r + s->n * s->r + s->r * s->d + (s->ur ? s->r * s->r : 0) + (s->mean ? s->d : 0);
    return sizeof *s + s->n * sizeof *s->rows + doubles * sizeof(double) + (s->key ? strlen(s->key) + 1 : 0);
}
