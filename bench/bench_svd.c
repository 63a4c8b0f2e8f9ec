/* Benchmark: embedscope's SVD path (copy rows, centre, dgesdd, sign fix, error
 * checks) against a bare LAPACKE_dgesdd call on the same centred block, in one
 * run. Prints one JSON line per case: {"case", "embedscope_s", "lapack_s", "ratio"}.
 * Usage: bench_svd FILE.npy REPEATS */
#include <lapacke.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedscope/core.h"
#include "embedscope/linalg.h"
#include "embedscope/store.h"

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Time the bare LAPACK call: the block is copied first (dgesdd destroys it). */
static double time_lapack(const double *x, size_t n, size_t d)
{
    size_t r = n < d ? n : d;
    double *a = es_malloc(n * d * sizeof *a), *s = es_malloc(r * sizeof *s);
    double *u = es_malloc(n * r * sizeof *u), *vt = es_malloc(r * d * sizeof *vt);
    memcpy(a, x, n * d * sizeof *a);
    double t0 = es_now();
    int info = LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'S', (int)n, (int)d, a, (int)d, s, u, (int)r, vt, (int)d);
    double t = es_now() - t0;
    if (info != 0)
        fprintf(stderr, "dgesdd info %d\n", info);
    free(a); free(s); free(u); free(vt);
    return t;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s FILE.npy REPEATS\n", argv[0]);
        return 2;
    }
    int reps = atoi(argv[2]);
    if (reps < 1 || reps > 1000)
        reps = 5;
    es_err err = {0};
    es_matrix *m = NULL;
    if (es_matrix_load("bench", argv[1], NULL, ES_AXIS_COLUMNS, &m, &err) != 0) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    size_t n = es_matrix_items(m), d = es_matrix_dim(m);
    size_t *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    double *x = es_matrix_items_copy(m, idx, n);
    es_center(x, n, d, ES_CENTER_COLUMNS, NULL);
    double *ours = es_malloc((size_t)reps * sizeof *ours), *raw = es_malloc((size_t)reps * sizeof *raw);
    for (int i = 0; i < reps; i++) {
        es_svd *svd = NULL;
        double t0 = es_now();
        if (es_svd_compute(m, idx, n, ES_CENTER_COLUMNS, &svd, &err) != 0) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        ours[i] = es_now() - t0;
        es_svd_release(svd);
        raw[i] = time_lapack(x, n, d);
    }
    double a = median(ours, reps), b = median(raw, reps);
    printf("{\"case\": \"svd %zux%zu centred\", \"embedscope_s\": %.6f, \"lapack_s\": %.6f, \"ratio\": %.3f}\n",
           n, d, a, b, a / b);
    free(ours); free(raw); free(x); free(idx);
    es_matrix_release(m);
    return 0;
}
