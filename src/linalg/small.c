/* The small SVD of an exact decomposition (svd.c's overview says which): LAPACK
 * on the factor the QR left (R, or the bidiagonal of a tall block), with the
 * dgesvd fallback when dgesdd does not converge, the residuals that give
 * reconstruction_error, the sign convention and the orthogonality measure.
 * svd.c reads the items and calls these; they read no items (the passes over
 * them are svd.c's). */
#include "linalg/internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int force_fallback;

/* Test hook: make es_svd_compute behave as if dgesdd (dbdsdc for tall blocks) had not converged. */
void es_svd_force_fallback(int on)
{
    __atomic_store_n(&force_fallback, on != 0, __ATOMIC_RELAXED);
}

/* Turn a negative LAPACKE status into an error (work-space allocation -> ES_E_NOMEM). */
int es_lapack_fail(es_err *err, const char *routine, lapack_int info)
{
    if (info == LAPACK_WORK_MEMORY_ERROR || info == LAPACK_TRANSPOSE_MEMORY_ERROR)
        return es_fail(err, ES_E_NOMEM, "", "%s: out of memory for LAPACK work space", routine);
    return es_fail(err, ES_E_NUMERIC, "", "%s failed (info %d)", routine, (int)info);
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

/* dgesvd of the rows x cols column-major b = L diag(sv) Rt (b kept; L rows x r
 * and Rt r x cols column-major, r = min(rows, cols)); solver "dgesvd"; left and
 * right_t NULL: the singular values only. ES_E_NUMERIC when it does not
 * converge, ES_E_NOMEM for its work space. */
static int fallback_svd(const double *b, size_t rows, size_t cols, double *sv, double *left, double *right_t,
                        const char **solver, es_err *err)
{
    size_t r = rows < cols ? rows : cols;
    char job = left ? 'S' : 'N';
    double *w = es_malloc(rows * cols * sizeof *w), *superb = es_malloc(r * sizeof *superb);
    memcpy(w, b, rows * cols * sizeof *w);
    lapack_int info = LAPACKE_dgesvd(LAPACK_COL_MAJOR, job, job, (lapack_int)rows, (lapack_int)cols, w,
                                     (lapack_int)rows, sv, left, (lapack_int)rows, right_t, (lapack_int)r, superb);
    free(superb);
    free(w);
    *solver = "dgesvd";
    if (info != 0)
        return info > 0 ? es_fail(err, ES_E_NUMERIC, "", "dgesvd did not converge on a %zu x %zu factor (info %d)",
                                  rows, cols, (int)info)
                        : es_lapack_fail(err, "dgesvd", info);
    return 0;
}

/* SVD of the rows x cols column-major matrix b = L diag(sv) Rt (L rows x r, Rt
 * r x cols column-major, r = min(rows, cols); both NULL: the singular values
 * only, jobz 'N'): dgesdd, then dgesvd when dgesdd does not converge (or the
 * test hook says so). b is kept; the solver's name goes to *solver. Fails as
 * fallback_svd. */
int es_svd_small(const double *b, size_t rows, size_t cols, double *sv, double *left, double *right_t,
                 const char **solver, es_err *err)
{
    size_t r = rows < cols ? rows : cols;
    if (!__atomic_load_n(&force_fallback, __ATOMIC_RELAXED)) {
        double *w = es_malloc(rows * cols * sizeof *w);
        memcpy(w, b, rows * cols * sizeof *w);
        lapack_int info = LAPACKE_dgesdd(LAPACK_COL_MAJOR, left ? 'S' : 'N', (lapack_int)rows, (lapack_int)cols, w,
                                         (lapack_int)rows, sv, left, (lapack_int)rows, right_t, (lapack_int)r);
        free(w);
        if (info <= 0) {
            *solver = "dgesdd";
            return info == 0 ? 0 : es_lapack_fail(err, "dgesdd", info);
        }
        es_warn("dgesdd did not converge on a %zu x %zu factor (info %d); falling back to dgesvd", rows, cols,
                (int)info);
    }
    return fallback_svd(b, rows, cols, sv, left, right_t, solver, err);
}

/* ||b - L diag(sv) Rt||_F for r x r column-major factors (the backward error of
 * es_svd_small). Never fails. */
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

/* ||B V_B - U_B S||_F for the r x r upper bidiagonal B (diagonal dg, superdiagonal
 * e) and its SVD from dbdsdc (U_B column-major, V_B^T column-major): B V_B is
 * O(r^2). Never fails. */
static double bidiag_residual(const double *dg, const double *e, size_t r, const double *sv, const double *ub,
                              const double *vbt)
{
    double ss = 0;
    for (size_t j = 0; j < r; j++)
        for (size_t i = 0; i < r; i++) { /* (B V_B)(i, j) = dg_i V_B(i, j) + e_i V_B(i + 1, j) */
            double bv = dg[i] * vbt[i * r + j] + (i + 1 < r ? e[i] * vbt[(i + 1) * r + j] : 0);
            double x = bv - ub[j * r + i] * sv[j];
            ss += x * x;
        }
    return sqrt(ss);
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
            if (es_svd_is_tall(s))
                b[l * r + k] = rlk; /* R^T(k, l) */
            else
                b[k * r + l] = rlk;
        }
    return b;
}

/* Tall block: the SVD of b = R^T (r x r column-major, kept) by dgebrd, dbdsdc
 * and dormbr: s->s, V into s->vt, V_B into s->vb and the reflectors into s->brd,
 * s->brd_tau (U_R = P_B V_B, formed on demand), the bidiagonal residual into
 * *res. 1 when dbdsdc did not converge (nothing usable); ES_E_NUMERIC/ES_E_NOMEM
 * from LAPACK. */
static int tall_small_svd(es_svd *s, const double *b, double *res, es_err *err)
{
    size_t r = s->r;
    lapack_int k = (lapack_int)r, iq = 0;
    /* dbdsdc overwrites the diagonal (with s) and the superdiagonal: B is kept in dg, e */
    double *dg = es_malloc(r * sizeof *dg), *e = es_calloc(r, sizeof *e), *e_work = es_calloc(r, sizeof *e_work);
    double *tauq = es_malloc(r * sizeof *tauq), q = 0;
    memcpy(s->brd, b, r * r * sizeof *b);
    lapack_int info = LAPACKE_dgebrd(LAPACK_COL_MAJOR, k, k, s->brd, k, dg, e, tauq, s->brd_tau);
    const char *routine = "dgebrd";
    if (info == 0) {
        routine = "dbdsdc";
        memcpy(s->s, dg, r * sizeof *dg);
        memcpy(e_work, e, r * sizeof *e);
        info = LAPACKE_dbdsdc(LAPACK_COL_MAJOR, 'U', 'I', k, s->s, e_work, s->vt, k, s->vb, k, &q, &iq);
    }
    if (info == 0) {
        *res = bidiag_residual(dg, e, r, s->s, s->vt, s->vb);
        routine = "dormbr";
        /* vt holds U_B (column-major r x r, r == d): V = Q_B U_B in place */
        info = LAPACKE_dormbr(LAPACK_COL_MAJOR, 'Q', 'L', 'N', k, k, k, s->brd, k, tauq, s->vt, k);
    }
    free(dg);
    free(e);
    free(e_work);
    free(tauq);
    if (info > 0 && strcmp(routine, "dbdsdc") == 0) {
        es_warn("dbdsdc did not converge on a %zu x %zu factor (info %d); falling back to dgesvd", r, r, (int)info);
        return 1;
    }
    return info == 0 ? 0 : es_lapack_fail(err, routine, info);
}

/* Sign convention: the entry of largest magnitude of each right vector (the first
 * such on ties) is made positive; the left factor (column j of V_B or U_R when
 * the block keeps it, else of u; both have stride r) flips with it. */
void es_svd_fix_signs(es_svd *s)
{
    double *left = s->vb ? s->vb : s->left->u;
    size_t left_len = s->vb ? s->r : s->n;
    for (size_t j = 0; j < s->r; j++) {
        double *v = s->vt + j * s->d;
        size_t best = 0;
        for (size_t k = 1; k < s->d; k++)
            if (fabs(v[k]) > fabs(v[best]))
                best = k;
        if (v[best] < 0) {
            cblas_dscal((blasint)s->d, -1.0, v, 1);
            cblas_dscal((blasint)left_len, -1.0, left + j, (blasint)s->r);
            if (s->xv)
                cblas_dscal((blasint)s->n, -1.0, s->xv + j, (blasint)s->r);
        }
    }
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

/* Tall block: the SVD of R^T (R d x d in rmat, column-major) into s by
 * tall_small_svd, or dgesvd when dbdsdc does not converge or the test hook says
 * so (then V_B's array holds U_R itself and brd is dropped). */
int es_svd_decompose_tall(es_svd *s, const double *rmat, es_err *err)
{
    size_t r = s->r;
    double *b = small_factor(s, rmat, r), res = 0;
    int rc = 1;
    s->solver = "dgesdd";
    if (!__atomic_load_n(&force_fallback, __ATOMIC_RELAXED))
        rc = tall_small_svd(s, b, &res, err);
    if (rc == 1) {
        free(s->brd);
        free(s->brd_tau);
        s->brd = s->brd_tau = NULL;
        rc = fallback_svd(b, r, r, s->s, s->vt, s->vb, &s->solver, err);
        if (rc == 0)
            res = small_residual(b, r, s->s, s->vt, s->vb);
    }
    s->recon_error = s->total_ss > 0 ? res / sqrt(s->total_ss) : 0;
    free(b);
    return rc;
}

/* Wide block: the SVD of the small factor of the QR of X^T in a (d x n, ld d)
 * into s; U = W lands in the first left block and V = Q U_R is formed. */
static int decompose_wide(es_svd *s, const double *a, const double *tau, es_err *err)
{
    size_t r = s->r;
    double *b = small_factor(s, a, s->d), *left = es_malloc(r * r * sizeof *left);
    double *right_t = s->left->u; /* r == n: W^T column-major is u row-major */
    int rc = es_svd_small(b, r, r, s->s, left, right_t, &s->solver, err);
    if (rc == 0) {
        double res = small_residual(b, r, s->s, left, right_t);
        s->recon_error = s->total_ss > 0 ? res / sqrt(s->total_ss) : 0;
        rc = apply_q_right(s, a, tau, left, err);
    }
    free(left);
    free(b);
    return rc;
}

/* Values only: the singular values of the small factor of the QR output a
 * (leading dimension lda; see small_factor) into s->s, without vectors
 * (dgesdd jobz 'N': dgebrd, then the bidiagonal's values by dqds; measured as
 * fast as dgebrd + dbdsqr, with the same values). Fails as es_svd_small. */
int es_svd_values_of_factor(es_svd *s, const double *a, size_t lda, es_err *err)
{
    double *b = small_factor(s, a, lda);
    int rc = es_svd_small(b, s->r, s->r, s->s, NULL, NULL, &s->solver, err);
    free(b);
    return rc;
}

/* Values only of a nearly square block (the longer side under this many times
 * the shorter): no QR first, dgesdd jobz 'N' bidiagonalises the centred block
 * itself, as LAPACK does below 11/6. Measured (d = 768, LAPACK alone, one
 * thread): 0.071 s against 0.087 s for QR + values of R at 768 and 900 rows,
 * 0.085 against 0.093 at 1023 (W_pos), even at ~1100, the QR route ahead from
 * ~1150 (0.10 against 0.12 at 1400 rows). The block is then held whole, at
 * most 1.4 d^2 doubles. */
#define VALUES_DIRECT_RATIO 1.4

/* See internal.h: does s take the direct route (values only, nearly square)? Never fails. */
bool es_svd_values_direct(const es_svd *s)
{
    size_t lo = s->n < s->d ? s->n : s->d, hi = s->n < s->d ? s->d : s->n;
    return !s->vt && (double)hi < VALUES_DIRECT_RATIO * (double)lo;
}

/* Wide block: the QR of X^T in a (d x n, ld d, overwritten), then the SVD of R
 * (its values only when s holds no vt). Fails as es_svd_compute. */
int es_svd_wide_by_qr(es_svd *s, double *a, es_err *err)
{
    double *tau = es_malloc(s->r * sizeof *tau);
    lapack_int info = LAPACKE_dgeqrf(LAPACK_COL_MAJOR, (lapack_int)s->d, (lapack_int)s->r, a, (lapack_int)s->d, tau);
    int rc = info == 0 ? 0 : es_lapack_fail(err, "dgeqrf", info);
    if (rc == 0)
        rc = s->vt ? decompose_wide(s, a, tau, err) : es_svd_values_of_factor(s, a, s->d, err);
    free(tau);
    return rc;
}

/* ES_E_NUMERIC if the solver returned any non-finite value in s, vt or the left
 * factor (those a values-only decomposition does not hold are skipped). */
