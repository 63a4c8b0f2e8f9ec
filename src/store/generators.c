/* Generated matrices: Vaswani sinusoidal encodings, RoPE angle tables, and seeded
 * Gaussian matrices with an exact singular spectrum. Provenance: source
 * "generator:<name>", generator = the parameters as JSON (sorted keys, 17
 * significant digits; a seed above INT64_MAX is written as a decimal string),
 * sha256 of the generated doubles in memory (little-endian IEEE 754 here). */
#include "embedscope/blas.h"
#include "embedscope/store.h"

#include <cblas.h>
#include <jansson.h>
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Wrap generated data (rows x cols, owned) into a matrix with generator provenance. */
static es_matrix *generated(const char *id, const char *name, json_t *params, double *data,
                            size_t rows, size_t cols)
{
    char *json = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    char *source = es_asprintf("generator:%s", name);
    es_provenance prov = {
        .source = source,
        .tensor = "",
        .dtype = "f64",
        .shape = {rows, cols},
        .file_sha256 = "",
        .generator = json ? json : "",
        .view = "",
    };
    es_sha256_hex(data, rows * cols * sizeof *data, prov.sha256);
    es_matrix *m = es_matrix_from_data(id, data, rows, cols, ES_AXIS_COLUMNS, &prov);
    free(json);
    free(source);
    json_decref(params);
    return m;
}

/* Allocate rows x cols doubles; ES_E_NOMEM (param "rows") if impossible. */
static double *alloc_matrix(size_t rows, size_t cols, es_err *err)
{
    size_t n;
    double *x = es_mul_size(rows, cols, &n) == 0 ? es_try_alloc_huge(n, sizeof *x) : NULL;
    if (!x)
        es_fail(err, ES_E_NOMEM, "rows", "cannot allocate a %zu x %zu matrix", rows, cols);
    return x;
}

/* Shared checks of the periodic generators: n >= 1, d even and >= 2, finite base > 1. */
static int check_periodic(size_t n, size_t d, double base, es_err *err)
{
    if (n == 0)
        return es_fail(err, ES_E_PARAM, "n_positions", "n_positions must be at least 1");
    if (d == 0 || d % 2 != 0)
        return es_fail(err, ES_E_PARAM, "d_model", "d_model must be even and positive, got %zu", d);
    if (!(base > 1.0) || !isfinite(base))
        return es_fail(err, ES_E_PARAM, "base", "base must be a finite number above 1, got %g", base);
    return 0;
}

/* Fill an n x d table: columns 2i, 2i+1 = first(p w_i), second(p w_i), w_i = base^(-2i/d). */
static void fill_pairs(double *x, size_t n, size_t d, double base, double (*first)(double),
                       double (*second)(double))
{
    for (size_t i = 0; i < d / 2; i++) {
        double w = pow(base, -(double)(2 * i) / (double)d);
        for (size_t p = 0; p < n; p++) {
            x[p * d + 2 * i] = first((double)p * w);
            x[p * d + 2 * i + 1] = second((double)p * w);
        }
    }
}

/* Parameters of the periodic generators as JSON. */
static json_t *periodic_params(size_t n, size_t d, double base)
{
    return json_pack("{s:I, s:I, s:f}", "n_positions", (json_int_t)n, "d_model", (json_int_t)d,
                     "base", base);
}

/* A periodic table built by fill_pairs; failures per check_periodic / alloc_matrix. */
static int gen_periodic(const char *id, const char *name, size_t n, size_t d, double base,
                        double (*first)(double), double (*second)(double), es_matrix **out,
                        es_err *err)
{
    if (check_periodic(n, d, base, err) != 0)
        return -1;
    double *x = alloc_matrix(n, d, err);
    if (!x)
        return -1;
    fill_pairs(x, n, d, base, first, second);
    *out = generated(id, name, periodic_params(n, d, base), x, n, d);
    return 0;
}

/* Vaswani sinusoidal encoding; ES_E_PARAM naming n_positions, d_model or base, ES_E_NOMEM. */
int es_gen_sinusoidal(const char *id, size_t n_positions, size_t d_model, double base,
                      es_matrix **out, es_err *err)
{
    return gen_periodic(id, "sinusoidal", n_positions, d_model, base, sin, cos, out, err);
}

/* RoPE table (cos, sin pairs); ES_E_PARAM naming n_positions, d_model or base, ES_E_NOMEM. */
int es_gen_rope(const char *id, size_t n_positions, size_t d_model, double base, es_matrix **out,
                es_err *err)
{
    return gen_periodic(id, "rope", n_positions, d_model, base, cos, sin, out, err);
}

/* ---------------------------------------------------------------- gaussian */

/* splitmix64 (Steele, Lea, Flood 2014): a small seeded generator with full period. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1]: 53 random bits, shifted away from 0 so log() is finite. */
static double uniform01(uint64_t *state)
{
    return ((double)(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
}

/* Fill x with n standard normal values (Box-Muller, both outputs used). */
static void fill_gaussian(double *x, size_t n, uint64_t *state)
{
    for (size_t i = 0; i < n; i += 2) {
        double radius = sqrt(-2.0 * log(uniform01(state))), angle = 2.0 * M_PI * uniform01(state);
        x[i] = radius * cos(angle);
        if (i + 1 < n)
            x[i + 1] = radius * sin(angle);
    }
}

/* Replace the n x r row-major Gaussian block q by the orthonormal Q of its QR
 * factorisation. ES_E_NUMERIC if LAPACK fails. */
static int orthonormalise(double *q, size_t n, size_t r, es_err *err)
{
    double *tau = es_malloc(r * sizeof *tau);
    lapack_int info = LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, (lapack_int)n, (lapack_int)r, q,
                                     (lapack_int)r, tau);
    if (info == 0)
        info = LAPACKE_dorgqr(LAPACK_ROW_MAJOR, (lapack_int)n, (lapack_int)r, (lapack_int)r, q,
                              (lapack_int)r, tau);
    free(tau);
    if (info != 0)
        return es_fail(err, ES_E_NUMERIC, "seed", "QR orthonormalisation failed (info %d)", (int)info);
    return 0;
}

/* Parameters of the Gaussian generator as JSON. */
static json_t *gaussian_params(size_t rows, size_t cols, double decay, double scale, uint64_t seed)
{
    char digits[24];
    snprintf(digits, sizeof digits, "%llu", (unsigned long long)seed);
    json_t *seed_json = seed <= INT64_MAX ? json_integer((json_int_t)seed) : json_string(digits);
    return json_pack("{s:I, s:I, s:f, s:f, s:o}", "rows", (json_int_t)rows, "cols",
                     (json_int_t)cols, "decay", decay, "scale", scale, "seed", seed_json);
}

/* Validate the Gaussian generator's parameters; ES_E_PARAM naming the bad one. */
static int check_gaussian(size_t rows, size_t cols, double decay, double scale, es_err *err)
{
    if (rows == 0 || cols == 0)
        return es_fail(err, ES_E_PARAM, rows == 0 ? "rows" : "cols", "rows and cols must be positive");
    if ((rows > INT32_MAX || cols > INT32_MAX))
        return es_fail(err, ES_E_PARAM, rows > INT32_MAX ? "rows" : "cols", "dimension too large");
    if (!(decay >= 0.0) || !isfinite(decay))
        return es_fail(err, ES_E_PARAM, "decay", "decay must be finite and >= 0, got %g", decay);
    if (!(scale > 0.0) || !isfinite(scale))
        return es_fail(err, ES_E_PARAM, "scale", "scale must be finite and > 0, got %g", scale);
    return 0;
}

/* A = U diag(s) V^T with U (rows x r), V (cols x r) orthonormalised Gaussian
 * factors drawn in that order from one splitmix64 stream, r = min(rows, cols),
 * s_j = scale (j+1)^-decay. Failures: ES_E_PARAM, ES_E_NOMEM, ES_E_NUMERIC. */
int es_gen_gaussian(const char *id, size_t rows, size_t cols, double decay, double scale,
                    uint64_t seed, es_matrix **out, es_err *err)
{
    if (check_gaussian(rows, cols, decay, scale, err) != 0)
        return -1;
    size_t r = rows < cols ? rows : cols;
    double *a = alloc_matrix(rows, cols, err);
    double *u = a ? alloc_matrix(rows, r, err) : NULL;
    double *v = u ? alloc_matrix(cols, r, err) : NULL;
    uint64_t state = seed;
    int rc = v ? 0 : -1;
    /* one BLAS thread: the bytes, hence the sha256 that names the matrix, must
     * not depend on the machine or on what else runs */
    es_blas_one_begin();
    if (rc == 0) {
        fill_gaussian(u, rows * r, &state);
        fill_gaussian(v, cols * r, &state);
        rc = orthonormalise(u, rows, r, err);
    }
    if (rc == 0)
        rc = orthonormalise(v, cols, r, err);
    if (rc == 0) {
        for (size_t j = 0; j < r; j++)
            cblas_dscal((int)rows, scale * pow((double)(j + 1), -decay), u + j, (int)r);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)r, 1.0, u,
                    (int)r, v, (int)r, 0.0, a, (int)cols);
        *out = generated(id, "gaussian", gaussian_params(rows, cols, decay, scale, seed), a, rows,
                         cols);
    } else {
        free(a);
    }
    es_blas_one_end();
    free(u);
    free(v);
    return rc;
}
