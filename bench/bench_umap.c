/* UMAP's own stages timed in one process, no daemon, no HTTP (for profiling: perf
 * record -g build/bench/bench_umap ...): a matrix of planted clusters (seeded
 * Gaussian centres x 1.5, each row a centre plus unit Gaussian noise, like
 * bench/umap_learn_compare.py's, though not the same draws), its exact cosine
 * neighbour graph (es_umap_knn) timed alone, then es_umap_items whole from a
 * seeded random start. Wall and this process's CPU seconds, the threads
 * (es_blas_job_threads: OpenBLAS's and the layout's), and a checksum of the
 * coordinates' bits (the same for any threads). Prints one JSON line.
 * Usage: bench_umap [ROWS [COLS [CLUSTERS [EPOCHS]]]] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "analysis/internal.h"
#include "embedscope/analysis.h"
#include "embedscope/blas.h"
#include "embedscope/core.h"
#include "embedscope/store.h"

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static uint64_t state = 0x2545f4914f6cdd1dull;
static double uniform(void)
{
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return ((double)((state * 0x2545f4914f6cdd1dull) >> 11) + 0.5) * 0x1p-53;
}
static double gauss(void) { return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()); }

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 50257, d = argc > 2 ? strtoul(argv[2], NULL, 10) : 768;
    size_t clusters = argc > 3 ? strtoul(argv[3], NULL, 10) : 20, epochs = argc > 4 ? strtoul(argv[4], NULL, 10) : 0;
    double *centres = malloc(clusters * d * sizeof *centres), *x = malloc(n * d * sizeof *x);
    for (size_t i = 0; i < clusters * d; i++)
        centres[i] = 1.5 * gauss();
    for (size_t i = 0; i < n; i++) {
        size_t c = (size_t)(uniform() * (double)clusters);
        for (size_t t = 0; t < d; t++)
            x[i * d + t] = (double)(float)(centres[c * d + t] + gauss());
    }
    double *init = malloc(n * 2 * sizeof *init), *copy = malloc(n * d * sizeof *copy);
    for (size_t i = 0; i < 2 * n; i++)
        init[i] = gauss();
    memcpy(copy, x, n * d * sizeof *x);
    es_matrix *m = es_matrix_from_data("bench/clusters", x, n, d, ES_AXIS_COLUMNS, NULL);
    size_t *idx = malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    es_blas_job_begin();
    es_err err;
    size_t k = 14, *nbr = malloc(n * k * sizeof *nbr);
    double *dist = malloc(n * k * sizeof *dist);
    double w0 = es_now(), c0 = cpu_seconds();
    if (!getenv("BENCH_NO_KNN") && es_umap_knn(copy, n, d, ES_METRIC_COSINE, k, 0, nbr, dist, &err) != 0) {
        fprintf(stderr, "bench_umap: %s\n", err.message);
        return 1;
    }
    double kw = es_now() - w0, kc = cpu_seconds() - c0;
    es_umap_params p = {.n_neighbors = 15, .dims = 2, .epochs = epochs, .min_dist = 0.1,
                        .metric = ES_METRIC_COSINE, .seed = 0};
    es_umap *u = NULL;
    w0 = es_now();
    c0 = cpu_seconds();
    if (es_umap_items(m, idx, n, &p, init, &u, &err) != 0) {
        fprintf(stderr, "bench_umap: %s\n", err.message);
        return 1;
    }
    double uw = es_now() - w0, uc = cpu_seconds() - c0;
    uint64_t sum = 0;
    for (size_t i = 0; i < n * 2; i++) {
        uint64_t b;
        memcpy(&b, &u->coords[i], sizeof b);
        sum = sum * 1099511628211ull + b;
    }
    printf("{\"rows\": %zu, \"cols\": %zu, \"threads\": %u, \"knn_seconds\": %.2f, \"knn_cpu_seconds\": %.2f, "
           "\"umap_seconds\": %.2f, \"umap_cpu_seconds\": %.2f, \"epochs\": %zu, \"edges\": %zu, "
           "\"bits\": \"%016llx\"}\n",
           n, d, es_blas_job_threads(), kw, kc, uw, uc, u->epochs, u->edges, (unsigned long long)sum);
    es_blas_job_end();
    es_umap_free(u);
    es_matrix_release(m);
    free(centres);
    free(copy);
    free(init);
    free(idx);
    free(nbr);
    free(dist);
    return 0;
}
