/* The certified top-k path: the k leading singular triplets of a tall block
 * without the full decomposition.
 *
 * 1. G = X^T X with dsyrk (n d^2 flops, half of a QR) and its top k + 1
 *    eigenpairs: by subspace iteration on G (from ES_TOPK_ITER_MIN_D
 *    coordinates: dgemm steps instead of dsyevr's memory-bound tridiagonal
 *    reduction), the (k+1)-th eigenvalue bounded above by a Cholesky
 *    factorization that proves it (next_eigenvalue_bound); by dsyevr below
 *    that d, when the iteration does not converge, or when its start misses
 *    the certificate. The eigenvectors approximate V_k to about
 *    eps s_0^2 / gap(s^2).
 * 2. One Rayleigh-Ritz step in span(V_k) on the exact X: Y = X V_k (one pass
 *    over the items) = Q R, R = Wr S Wt; then s = S, V = V_k Wt^T and
 *    U = Q Wr come from X itself, not from the squared Gram matrix, and
 *    X V = Y Wt^T is known without another pass.
 * 3. The certificate is measured, not assumed: r_j = ||X v_j - s_j u_j|| from
 *    that X V, s_j = ||X^T u_j - s_j v_j|| from one more pass, U^T X. The gap to
 *    the rest of the spectrum uses s_{k+1} bounded above from the (k+1)-th Gram
 *    eigenvalue plus the Gram matrix's rounding bound.
 * One dsyrk and two n x d x k products: for k << d far below the QR's 2 n d^2.
 * Every pass reads the centred items a block at a time (es_svd_gram,
 * es_svd_times, es_svd_times_t): no n x d copy is made. */
#include "linalg/internal.h"

#include <cblas.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const method_names[] = {
    [ES_METHOD_AUTO] = "auto", [ES_METHOD_EXACT] = "exact", [ES_METHOD_VALUES] = "values",
    [ES_METHOD_TOPK] = "topk"};
#define N_METHODS (sizeof method_names / sizeof *method_names)

/* Name of a method; "unknown" outside the enum. Never fails. */
const char *es_method_name(es_method m)
{
    return es_name_of(method_names, N_METHODS, (size_t)m);
}

/* auto: top-k for a large tall block when k is at most min(n, d) / 8. */
es_method es_method_resolve(es_method asked, size_t n, size_t d, size_t k)
{
    if (asked != ES_METHOD_AUTO)
        return asked;
    size_t r = n < d ? n : d;
    bool large = n >= d && n * d >= ES_TOPK_MIN_ELEMENTS; /* n * d fits: the block is in memory */
    return large && k >= 1 && k <= r / 8 ? ES_METHOD_TOPK : ES_METHOD_EXACT;
}

/* The top kk eigenpairs of the symmetric d x d matrix g (upper triangle,
 * row-major), largest first: lambda (kk) and the vectors as rows of vt
 * (kk x d). ES_E_NUMERIC/ES_E_NOMEM from LAPACK. */
static int top_eigenpairs(double *g, size_t d, size_t kk, double *lambda, double *vt, es_err *err)
{
    lapack_int found = 0, n = (lapack_int)d;
    double *w = es_malloc(d * sizeof *w), *z = es_malloc(d * kk * sizeof *z);
    lapack_int *support = es_malloc(2 * kk * sizeof *support);
    /* row-major upper = column-major lower of the same symmetric matrix */
    lapack_int info = LAPACKE_dsyevr(LAPACK_COL_MAJOR, 'V', 'I', 'L', n, g, n, 0, 0, n - (lapack_int)kk + 1, n,
                                     0.0, &found, w, z, n, support);
    if (info == 0 && found == (lapack_int)kk)
        for (size_t j = 0; j < kk; j++) { /* ascending -> descending */
            lambda[j] = w[kk - 1 - j];
            memcpy(vt + j * d, z + (kk - 1 - j) * d, d * sizeof *vt);
        }
    free(w);
    free(z);
    free(support);
    if (info != 0)
        return info < 0 ? es_lapack_fail(err, "dsyevr", info)
                        : es_fail(err, ES_E_NUMERIC, "", "dsyevr did not converge (info %d)", (int)info);
    return found == (lapack_int)kk ? 0 : es_fail(err, ES_E_NUMERIC, "", "dsyevr found %d of %zu eigenpairs",
                                                 (int)found, kk);
}

/* ---------------------------------------------------------------- Gram eigenpairs by subspace iteration */

static size_t iter_min_d = ES_TOPK_ITER_MIN_D, iter_max = ES_TOPK_ITER_MAX;

/* See linalg.h (tests only). */
void es_topk_iteration_set(size_t min_d, size_t max_iterations)
{
    __atomic_store_n(&iter_min_d, min_d ? min_d : (size_t)ES_TOPK_ITER_MIN_D, __ATOMIC_RELAXED);
    __atomic_store_n(&iter_max, max_iterations ? max_iterations : (size_t)ES_TOPK_ITER_MAX, __ATOMIC_RELAXED);
}

/* Columns of the iterated block for kk wanted eigenpairs: 2 kk + 16 (the
 * slowest pair, kk - 1, converges like (lambda_b / lambda_{kk-1})^iterations). */
static size_t iter_block(size_t kk) { return 2 * kk + 16; }

/* Whether the d x d Gram matrix's top kk eigenpairs are sought by subspace
 * iteration (from ES_TOPK_ITER_MIN_D coordinates, the block at most d / 4). */
static bool use_iteration(size_t d, size_t kk)
{
    return d >= __atomic_load_n(&iter_min_d, __ATOMIC_RELAXED) && 4 * iter_block(kk) <= d;
}

/* Orthonormal columns of the d x b column-major z, into q (dgeqrf, dorgqr). */
static int orthonormalise(const double *z, size_t d, size_t b, double *q, es_err *err)
{
    double *tau = es_malloc(b * sizeof *tau);
    memcpy(q, z, d * b * sizeof *q);
    lapack_int info = LAPACKE_dgeqrf(LAPACK_COL_MAJOR, (lapack_int)d, (lapack_int)b, q, (lapack_int)d, tau);
    const char *routine = "dgeqrf";
    if (info == 0) {
        info = LAPACKE_dorgqr(LAPACK_COL_MAJOR, (lapack_int)d, (lapack_int)b, (lapack_int)b, q, (lapack_int)d, tau);
        routine = "dorgqr";
    }
    free(tau);
    return info == 0 ? 0 : es_lapack_fail(err, routine, info);
}

/* One Rayleigh-Ritz step of the iteration: given q (d x b, orthonormal) and
 * z = G q, the Ritz pairs in span(q), largest first: theta (b), q and z
 * rotated onto the Ritz vectors (q Wr, z Wr; tmp d x b scratch), and the
 * residual norms ||z_j - theta_j q_j|| (b). */
static int ritz_step(double *q, double *z, double *tmp, size_t d, size_t b, double *theta, double *res, es_err *err)
{
    double *h = es_malloc(b * b * sizeof *h), *w = es_malloc(b * sizeof *w), *wr = es_malloc(b * b * sizeof *wr);
    blasint bd = (blasint)d, bb = (blasint)b;
    cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, bb, bb, bd, 1.0, q, bd, z, bd, 0.0, h, bb);
    for (size_t i = 0; i < b; i++) /* symmetric up to rounding: its mean */
        for (size_t j = 0; j < i; j++)
            h[j * b + i] = h[i * b + j] = 0.5 * (h[j * b + i] + h[i * b + j]);
    lapack_int info = LAPACKE_dsyev(LAPACK_COL_MAJOR, 'V', 'L', bb, h, bb, w);
    if (info == 0) {
        for (size_t j = 0; j < b; j++) { /* ascending -> descending */
            theta[j] = w[b - 1 - j];
            memcpy(wr + j * b, h + (b - 1 - j) * b, b * sizeof *wr);
        }
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, bd, bb, bb, 1.0, q, bd, wr, bb, 0.0, tmp, bd);
        memcpy(q, tmp, d * b * sizeof *q);
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, bd, bb, bb, 1.0, z, bd, wr, bb, 0.0, tmp, bd);
        memcpy(z, tmp, d * b * sizeof *z);
        for (size_t j = 0; j < b; j++) {
            double sum = 0;
            for (size_t i = 0; i < d; i++) {
                double v = z[j * d + i] - theta[j] * q[j * d + i];
                sum += v * v;
            }
            res[j] = sqrt(sum);
        }
    }
    free(h);
    free(w);
    free(wr);
    return info == 0 ? 0 : info < 0 ? es_lapack_fail(err, "dsyev", info)
                                    : es_fail(err, ES_E_NUMERIC, "", "dsyev did not converge (info %d)", (int)info);
}

/* A rigorous upper bound on the (K+1)-th eigenvalue of the symmetric g (full,
 * d x d) from K orthonormal Ritz vectors v (d x K) with z = g v, Ritz values
 * theta and residual matrix R = z - v diag(theta): with P = I - v v^T,
 * lambda_{K+1}(g) <= lambda_max(P g P) + ||R||_2 (g is v^T g v on span(v) and
 * P g P on its complement, coupled only through P R), and lambda_max(P g P) <
 * tau when the Cholesky factorization of tau I - P g P succeeds (its backward
 * error, 2 (d + 1) eps trace, added). Tries tau just above the (K+1)-th Ritz
 * value, then halfway to the K-th. 0 with *bound set, 1 when neither
 * factorization succeeds, -1 on LAPACK's failure. */
static int next_eigenvalue_bound(const double *g, size_t d, size_t k, const double *v, const double *z,
                                 const double *theta, const double *res, double *bound, es_err *err)
{
    blasint bd = (blasint)d, bk = (blasint)k;
    double *c = es_malloc(k * k * sizeof *c), *w = es_malloc(d * k * sizeof *w), *a = es_try_alloc(d, d * sizeof *a);
    if (!a) {
        free(c);
        free(w);
        return es_fail(err, ES_E_NOMEM, "rows", "cannot allocate a %zu x %zu matrix", d, d);
    }
    /* P g P = g - v w'^T - w' v^T with w' = z - v (v^T z) / 2 */
    cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, bk, bk, bd, 1.0, v, bd, z, bd, 0.0, c, bk);
    memcpy(w, z, d * k * sizeof *w);
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, bd, bk, bk, -0.5, v, bd, c, bk, 1.0, w, bd);
    double r2 = 0, eps = DBL_EPSILON, slack = 4.0 * (double)d * eps * theta[0];
    for (size_t j = 0; j < k; j++)
        r2 += res[j] * res[j];
    double taus[2] = {theta[k] + res[k] + slack, 0.5 * (theta[k] + res[k] + theta[k - 1])};
    int rc = 1;
    for (size_t t = 0; t < 2 && rc == 1; t++) {
        double tau = taus[t], trace = 0;
        for (size_t j = 0; j < d; j++)
            for (size_t i = j; i < d; i++)
                a[j * d + i] = (i == j ? tau : 0.0) - g[j * d + i];
        cblas_dsyr2k(CblasColMajor, CblasLower, CblasNoTrans, bd, bk, 1.0, v, bd, w, bd, 1.0, a, bd);
        for (size_t i = 0; i < d; i++)
            trace += fabs(a[i * d + i]);
        lapack_int info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', bd, a, bd);
        if (info < 0)
            rc = es_lapack_fail(err, "dpotrf", info);
        else if (info == 0) {
            *bound = tau + 2.0 * (double)(d + 1) * eps * trace + sqrt(r2) + slack;
            rc = 0;
        }
    }
    free(c);
    free(w);
    free(a);
    return rc;
}

/* The top kk eigenpairs of the symmetric d x d g (both triangles) by subspace iteration: a block of
 * iter_block(kk) columns from a fixed pseudo-random start, multiplied by g
 * (one dgemm, every core), Rayleigh-Ritz each step, until the residuals of the
 * top kk pairs stop falling (a rounding floor) below 1e-11 lambda_0; then
 * lambda (kk, descending: the first kk - 1 Ritz values, and in lambda[kk - 1]
 * the rigorous upper bound of next_eigenvalue_bound on the kk-th eigenvalue)
 * and vt (kk x d, the Ritz vectors as rows). 0 done; 1 not converged within
 * the iteration budget or no bound found (the caller takes dsyevr); -1 on
 * LAPACK's failure. */
static int iterate_eigenpairs(double *g, size_t d, size_t kk, double *lambda, double *vt, size_t *steps, es_err *err)
{
    size_t b = iter_block(kk), budget = __atomic_load_n(&iter_max, __ATOMIC_RELAXED);
    blasint bd = (blasint)d, bb = (blasint)b;
    double *q = es_malloc(d * b * sizeof *q), *z = es_malloc(d * b * sizeof *z), *tmp = es_malloc(d * b * sizeof *tmp);
    double *theta = es_malloc(b * sizeof *theta), *res = es_malloc(b * sizeof *res);
    double history[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
    uint64_t state = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < d * b; i++) { /* splitmix64, uniform in [-1, 1): a fixed start, the same bits each run */
        uint64_t x = (state += 0x9e3779b97f4a7c15u);
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
        x ^= x >> 31;
        tmp[i] = (double)(x >> 11) * 0x1.0p-52 - 1.0;
    }
    int rc = orthonormalise(tmp, d, b, q, err);
    bool converged = false;
    size_t it = 0;
    for (; rc == 0 && !converged && it < budget; it++) {
        if (it > 0)
            rc = orthonormalise(z, d, b, q, err);
        if (rc == 0) {
            cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, bd, bb, bd, 1.0, g, bd, q, bd, 0.0, z, bd);
            rc = ritz_step(q, z, tmp, d, b, theta, res, err);
        }
        if (rc < 0)
            break;
        double worst = 0;
        for (size_t j = 0; j < kk; j++)
            worst = fmax(worst, res[j]);
        /* done when four more steps no longer halve the residuals (their rounding floor, which dsyevr's
         * accuracy needs: stopping at 2 sqrt(d) eps theta_0 left the certificate 100x worse) */
        converged = worst <= DBL_EPSILON * theta[0] || (worst <= 1e-11 * theta[0] && worst > 0.5 * history[0]);
        memmove(history, history + 1, 3 * sizeof *history);
        history[3] = worst;
    }
    *steps = it;
    if (rc == 0 && !converged)
        rc = 1;
    double next = 0;
    if (rc == 0)
        rc = next_eigenvalue_bound(g, d, kk - 1, q, z, theta, res, &next, err);
    if (rc == 0) {
        for (size_t j = 0; j < kk; j++) {
            lambda[j] = j + 1 < kk ? theta[j] : next;
            memcpy(vt + j * d, q + j * d, d * sizeof *vt);
        }
    }
    free(q);
    free(z);
    free(tmp);
    free(theta);
    free(res);
    return rc;
}

/* The thin QR of y (n x k row-major, full column rank: X V0 with s_k > 0
 * checked by the caller): q (n x k, column-major, orthonormal columns) and r
 * (k x k column-major, upper triangular). ES_E_NUMERIC/ES_E_NOMEM from LAPACK. */
static int thin_qr(const double *y, size_t n, size_t k, double *q, double *r, es_err *err)
{
    double *tau = es_malloc(k * sizeof *tau);
    for (size_t i = 0; i < n; i++) /* column-major copy for LAPACK */
        for (size_t j = 0; j < k; j++)
            q[j * n + i] = y[i * k + j];
    lapack_int m = (lapack_int)n, kk = (lapack_int)k;
    lapack_int info = LAPACKE_dgeqrf(LAPACK_COL_MAJOR, m, kk, q, m, tau);
    const char *routine = "dgeqrf";
    if (info == 0) {
        for (size_t j = 0; j < k; j++)
            for (size_t i = 0; i < k; i++)
                r[j * k + i] = i <= j ? q[j * n + i] : 0.0;
        info = LAPACKE_dorgqr(LAPACK_COL_MAJOR, m, kk, kk, q, m, tau);
        routine = "dorgqr";
    }
    free(tau);
    return info == 0 ? 0 : es_lapack_fail(err, routine, info);
}

/* Rayleigh-Ritz in span(V0) (v0: k x d row-major, rows orthonormal): Y = X V0
 * (one pass) = Q R with R = Wr S Wt, so X (V0 Wt^T) = (Q Wr) S: s->s = S,
 * s->vt = Wt v0, s->left->u = Q Wr, and xv (n x k row-major) = Y Wt^T, which is
 * X V measured through Y, for the certificate. Fails as thin_qr and
 * es_svd_small (dgesvd when dgesdd does not converge). */
static int rayleigh_ritz(es_svd *s, const es_matrix *m, const double *v0, double *xv, es_err *err)
{
    size_t n = s->n, d = s->d, k = s->r;
    double *y = es_malloc(n * k * sizeof *y), *q = es_malloc(n * k * sizeof *q);
    double *r = es_malloc(k * k * sizeof *r), *wr = es_malloc(k * k * sizeof *wr), *wt = es_malloc(k * k * sizeof *wt);
    int rc = es_svd_times(s, m, v0, k, y, err);
    if (rc == 0)
        rc = thin_qr(y, n, k, q, r, err);
    if (rc == 0)
        rc = es_svd_small(r, k, k, s->s, wr, wt, &s->solver, err);
    if (rc == 0) { /* a column-major k x k array read row-major is its transpose */
        blasint bn = (blasint)n, bk = (blasint)k, bd = (blasint)d;
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, bd, bk, 1.0, wt, bk, v0, bd, 0.0, s->vt, bd);
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasTrans, bn, bk, bk, 1.0, q, bn, wr, bk, 0.0, s->left->u, bk);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bn, bk, bk, 1.0, y, bk, wt, bk, 0.0, xv, bk);
    }
    free(y);
    free(q);
    free(r);
    free(wr);
    free(wt);
    return rc;
}

/* Measure the certificate of the signed triplets in s on the centred block of m:
 * left residuals ||X v_j - s_j u_j|| from xv = X V (n x k row-major), right
 * residuals ||X^T u_j - s_j v_j|| from one more pass, U^T X. The gap of the last
 * triplet uses lambda_next, the (k+1)-th Gram eigenvalue, plus gram_err, a
 * bound on the Gram matrix's rounding. Fails only when its pass stops (a
 * cancelled computation). */
static int certify(es_svd *s, const es_matrix *m, const double *xv, double lambda_next, double gram_err, double tol,
                   es_err *err)
{
    size_t n = s->n, d = s->d, k = s->r;
    const double *u = s->left->u;
    double *zt = es_malloc(k * d * sizeof *zt), *rn = es_calloc(k, sizeof *rn), *sn = es_calloc(k, sizeof *sn);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < k; j++) {
            double v = xv[i * k + j] - s->s[j] * u[i * k + j];
            rn[j] += v * v;
        }
    if (es_svd_times_t(s, m, u, k, zt, err) < 0) {
        free(zt);
        free(rn);
        free(sn);
        return -1;
    }
    for (size_t j = 0; j < k; j++)
        for (size_t t = 0; t < d; t++) {
            double v = zt[j * d + t] - s->s[j] * s->vt[j * d + t];
            sn[j] += v * v;
        }
    double s0 = s->s[0] > 0 ? s->s[0] : 1, next = sqrt(fmax(lambda_next, 0) + gram_err);
    es_certificate *c = &s->cert;
    *c = (es_certificate){.tolerance = tol, .min_gap = INFINITY};
    for (size_t j = 0; j < k; j++) {
        double r = sqrt(rn[j] + sn[j]);
        double below = j + 1 < k ? s->s[j] - s->s[j + 1] : s->s[j] - next;
        double gap = j > 0 ? fmin(s->s[j - 1] - s->s[j], below) : below;
        c->residual = fmax(c->residual, r / s0);
        c->min_gap = fmin(c->min_gap, gap / s0);
        c->vector_bound = gap > 0 ? fmax(c->vector_bound, r / gap) : INFINITY;
    }
    c->sigma_bound = c->residual / sqrt(2.0);
    c->passed = c->sigma_bound <= tol && c->vector_bound <= tol;
    free(zt);
    free(rn);
    free(sn);
    return 0;
}

/* The top kk eigenpairs of the Gram matrix g (row-major, both triangles) into
 * lambda and v0, by subspace iteration when use_iteration says so and it
 * converges (g kept, *iterated true), else by dsyevr (g overwritten). */
static int gram_eigenpairs(double *g, size_t d, size_t kk, double *lambda, double *v0, bool *iterated, size_t *steps,
                           es_err *err)
{
    *iterated = false;
    *steps = 0;
    if (use_iteration(d, kk)) {
        int rc = iterate_eigenpairs(g, d, kk, lambda, v0, steps, err);
        if (rc <= 0) {
            *iterated = rc == 0;
            return rc;
        }
    }
    return top_eigenpairs(g, d, kk, lambda, v0, err);
}

/* Rayleigh-Ritz on X in span(v0) and the certificate (xv: n x k scratch);
 * their wall seconds added to t[0] and t[1], their CPU seconds to t[2], t[3]. */
static int ritz_and_certify(es_svd *s, const es_matrix *m, const double *v0, const double *lambda, double lambda0,
                            double *xv, double tol, double t[4], es_err *err)
{
    size_t n = s->n, d = s->d, k = s->r;
    if (!(lambda[k - 1] > 0))
        return es_fail(err, ES_E_NUMERIC, "", "%s: rank below k = %zu; use the exact method", m->id, k);
    double t0 = es_now(), c0 = es_cpu_now();
    int rc = rayleigh_ritz(s, m, v0, xv, err);
    if (rc == 0)
        rc = es_svd_check_output(s, m, err);
    double t1 = es_now(), c1 = es_cpu_now();
    if (rc == 0) /* the certificate does not depend on the signs fixed after it */
        rc = certify(s, m, xv, lambda[k], (double)(n + d) * DBL_EPSILON * lambda0, tol, err);
    t[0] += t1 - t0;
    t[1] += es_now() - t1;
    t[2] += c1 - c0;
    t[3] += es_cpu_now() - c1;
    return rc;
}

/* The decomposition steps on the selected block of m, read a block of items at
 * a time (no n x d copy); see the file comment. When the iterated eigenpairs
 * miss the certificate, dsyevr's are tried before the caller's exact fallback. */
static int topk_steps(es_svd *s, const es_matrix *m, double tol, es_err *err)
{
    size_t n = s->n, d = s->d, k = s->r, kk = k + 1;
    double *g = es_malloc(d * d * sizeof *g), *lambda = es_malloc(kk * sizeof *lambda);
    double *v0 = es_malloc(kk * d * sizeof *v0);
    bool iterated = false;
    size_t steps = 0;
    /* the phases' ends, wall and process CPU: start, scan, gram, eigenpairs, rayleigh-ritz and certificate,
     * dsyevr again */
    double t[6] = {es_now()}, c[6] = {es_cpu_now()}, rr[4] = {0, 0, 0, 0};
    int rc = es_svd_scan(s, m, err);
    t[1] = es_now(), c[1] = es_cpu_now();
    if (rc == 0)
        rc = es_svd_gram(s, m, g, &s->total_ss, err);
    t[2] = es_now(), c[2] = es_cpu_now();
    if (rc == 0) {
        es_progress_begin_lapack();
        rc = gram_eigenpairs(g, d, kk, lambda, v0, &iterated, &steps, err);
    }
    t[3] = es_now(), c[3] = es_cpu_now();
    double *xv = rc == 0 ? es_malloc(n * k * sizeof *xv) : NULL;
    if (rc == 0)
        rc = ritz_and_certify(s, m, v0, lambda, lambda[0], xv, tol, rr, err);
    t[4] = t[5] = es_now(), c[4] = c[5] = es_cpu_now();
    bool retried = rc == 0 && iterated && !s->cert.passed;
    if (retried) { /* the dense eigensolver's start, then the exact fallback */
        iterated = false;
        es_progress_begin_lapack();
        rc = top_eigenpairs(g, d, kk, lambda, v0, err);
        t[5] = es_now(), c[5] = es_cpu_now();
        if (rc == 0)
            rc = ritz_and_certify(s, m, v0, lambda, lambda[0], xv, tol, rr, err);
    }
    es_debug("top-k phases %s %zu x %zu k %zu, wall (cpu) s: scan %.3f (%.2f), gram %.3f (%.2f), eigenpairs %.3f "
             "(%.2f; %s, %zu steps%s), rayleigh-ritz %.3f (%.2f), certificate %.3f (%.2f), total %.3f (%.2f)", m->id, n,
             d, k, t[1] - t[0], c[1] - c[0], t[2] - t[1], c[2] - c[1], t[3] - t[2] + t[5] - t[4],
             c[3] - c[2] + c[5] - c[4], iterated ? "subspace" : "dsyevr", steps, retried ? ", then dsyevr" : "", rr[0],
             rr[2], rr[1], rr[3], es_now() - t[0], es_cpu_now() - c[0]);
    free(g);
    if (rc == 0) {
        s->eigensolver = iterated ? "subspace" : "dsyevr";
        s->xv = xv; /* kept: the PCA coordinates (es_svd_project); signs fixed with the vectors */
        xv = NULL;
        es_svd_fix_signs(s);
        es_svd_measure_orthogonality(s);
    }
    free(lambda);
    free(v0);
    free(xv);
    return rc;
}

/* The certified top k of items idx[0..n) of m, centred by c. Fails as
 * es_svd_compute, ES_E_PARAM "k" for k outside [1, min(n, d)) or a wide block,
 * ES_E_NUMERIC when the block's rank is below k. */
int es_svd_topk(const es_matrix *m, const size_t *idx, size_t n, es_centering c, size_t k, double tol,
                es_svd **out, es_err *err)
{
    double t0 = es_now();
    size_t items = es_matrix_items(m), d = es_matrix_dim(m), nd;
    if (n == 0 || d == 0)
        return es_fail(err, ES_E_PARAM, "rows", "%s: empty selection (%zu rows x %zu coordinates)", m->id, n, d);
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= items)
            return es_fail(err, ES_E_PARAM, "rows", "%s: row %zu out of range (%zu rows)", m->id, idx[i], items);
    if (n < d || k == 0 || k >= d)
        return es_fail(err, ES_E_PARAM, "k", "%s: the top-k method needs 1 <= k < d <= n (k %zu, %zu x %zu); use "
                       "method=exact", m->id, k, n, d);
    if (es_mul_size(n, d, &nd) < 0 || n > INT_MAX || d > INT_MAX || nd > INT_MAX)
        return es_fail(err, ES_E_LIMIT, "rows", "%s: a %zu x %zu block is too large for LAPACK", m->id, n, d);
    es_svd *s = es_svd_alloc(m, idx, n, d, c, k, ES_PARTS_LEFT);
    if (!s)
        return es_fail(err, ES_E_NOMEM, "rows", "%s: cannot allocate the top %zu of %zu x %zu", m->id, k, n, d);
    s->method = "topk";
    int rc = topk_steps(s, m, tol, err);
    if (rc < 0) {
        es_svd_free(s);
        return -1;
    }
    s->seconds = es_now() - t0;
    *out = s;
    return 0;
}
