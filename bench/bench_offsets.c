/* cosine?mode=offset's two methods on one generated matrix (make bench-offsets):
 * the FFT method timed (wall and this process's CPU seconds) and, unless
 * BENCH_NO_DIRECT=1, the direct sums over every pair, then the largest
 * difference between their means and both stated bounds (issue 33: agreeing to
 * 1e-12). BENCH_SAMPLE=K checks K offsets spread over the range (and the 16
 * on each side of the FFT's directly summed tail) by their pairs' dot products
 * instead of the whole direct method: minutes of CPU become seconds on a loaded
 * machine. Prints one JSON line.
 * Usage: bench_offsets ROWS COLS [SEED] [none|columns] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "analysis/internal.h"
#include "embedscope/analysis.h"
#include "embedscope/blas.h"
#include "embedscope/core.h"
#include "embedscope/store.h"

/* This process's CPU seconds (user + system, every thread). */
static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static es_cosine_offset *run(const es_matrix *m, const size_t *idx, size_t n, es_centering c, es_offset_method how,
                             double *wall, double *cpu)
{
    es_cosine_offset *o = NULL;
    es_err err;
    double w0 = es_now(), c0 = cpu_seconds();
    if (es_cosine_by_offset_using(m, idx, n, c, how, &o, &err) != 0) {
        fprintf(stderr, "bench_offsets: %s\n", err.message);
        exit(1);
    }
    *wall = es_now() - w0;
    *cpu = cpu_seconds() - c0;
    return o;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_offsets ROWS COLS [SEED] [none|columns]\n");
        return 2;
    }
    size_t n = strtoul(argv[1], NULL, 10), d = strtoul(argv[2], NULL, 10);
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 7;
    es_centering c = argc > 4 && strcmp(argv[4], "columns") == 0 ? ES_CENTER_COLUMNS : ES_CENTER_NONE;
    es_matrix *m = NULL;
    es_err err;
    if (es_gen_gaussian("bench/g", n, d, 0.5, 1.0, seed, &m, &err) != 0) {
        fprintf(stderr, "bench_offsets: %s\n", err.message);
        return 1;
    }
    size_t *idx = malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    es_blas_job_begin();
    double fw, fc, dw = 0, dc = 0, diff = 0;
    es_cosine_offset *f = run(m, idx, n, c, ES_OFFSET_FFT, &fw, &fc), *dir = NULL;
    printf("{\"rows\": %zu, \"cols\": %zu, \"threads\": %u, \"fft_seconds\": %.3f, \"fft_cpu_seconds\": %.3f, "
           "\"fft_length\": %zu, \"tail_offsets\": %zu, \"fft_bound\": %.3g",
           n, d, es_blas_job_threads(), fw, fc, f->fft_length, f->direct_offsets, f->error_bound);
    if (getenv("BENCH_SAMPLE")) { /* offsets k of the contiguous selection: sum over a of x_a . x_(a+k) */
        size_t want = strtoul(getenv("BENCH_SAMPLE"), NULL, 10), checked = 0, worst = 0;
        double *x = es_normalised_items(m, idx, n, c), w0 = es_now();
        size_t edge = n - f->direct_offsets; /* the first offset of the tail */
        for (size_t i = 0; i < want + 32; i++) {
            size_t k = i < want ? i * (n - 1) / (want - 1) : edge - 16 + (i - want);
            if (k >= n)
                continue;
            long double sum = 0;
            for (size_t a = 0; a + k < n; a++)
                sum += cblas_ddot((int)d, x + a * d, 1, x + (a + k) * d, 1);
            double mean = (double)(sum / (long double)(n - k)), e = mean > f->mean[k] ? mean - f->mean[k] : f->mean[k] - mean;
            if (e > diff) {
                diff = e;
                worst = k;
            }
            checked++;
        }
        printf(", \"sampled_offsets\": %zu, \"sample_seconds\": %.3f, \"max_difference\": %.3g, \"at_offset\": %zu",
               checked, es_now() - w0, diff, worst);
        free(x);
    } else if (!getenv("BENCH_NO_DIRECT")) {
        dir = run(m, idx, n, c, ES_OFFSET_DIRECT, &dw, &dc);
        size_t worst = 0;
        for (size_t k = 0; k < f->count; k++) {
            double e = f->mean[k] > dir->mean[k] ? f->mean[k] - dir->mean[k] : dir->mean[k] - f->mean[k];
            if (e > diff) {
                diff = e;
                worst = k;
            }
        }
        printf(", \"direct_seconds\": %.3f, \"direct_cpu_seconds\": %.3f, \"direct_bound\": %.3g, "
               "\"max_difference\": %.3g, \"at_offset\": %zu",
               dw, dc, dir->error_bound, diff, worst);
    }
    printf("}\n");
    es_blas_job_end();
    es_cosine_offset_free(f);
    es_cosine_offset_free(dir);
    free(idx);
    es_matrix_release(m);
    return 0;
}
