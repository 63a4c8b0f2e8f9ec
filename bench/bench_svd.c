/* Benchmark runner for one tool on one matrix, one timed run: embedscope's exact
 * path or its certified top-k, each as the first PCA answer (decomposition plus
 * the k coordinates), or a bare LAPACKE_dgesdd on the same centred block (the
 * row-major call numpy makes). The load is not timed. Prints one JSON line:
 * {"tool", "seconds", "compute_rss_kb", "loaded_rss_kb", "s": [the first k
 * singular values], ...}: compute_rss_kb is the peak RSS from the end of the load
 * to the answer, loaded_rss_kb the RSS at the end of the load (process, libraries
 * and source); the whole process's peak (load included) is /usr/bin/time's.
 * Usage: bench_svd FILE.npy exact|topk|lapacke K */
#include <lapacke.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedscope/core.h"
#include "embedscope/linalg.h"
#include "embedscope/store.h"

/* The "NAME: <kB> kB" field of /proc/self/status, or 0. */
static long status_kb(const char *name)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = 0;
    size_t len = strlen(name);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, name, len) == 0 && line[len] == ':') {
            kb = atol(line + len + 1);
            break;
        }
    if (f)
        fclose(f);
    return kb;
}

static long loaded_rss_kb; /* RSS once the source is loaded (the process, its libraries and the source) */

/* Reset the peak resident set size to the current one (Linux clear_refs "5"),
 * so that the peak read afterwards is the computation's, not the load's. */
static void reset_peak_rss(void)
{
    loaded_rss_kb = status_kb("VmRSS");
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

/* Print {"tool", "seconds", "compute_rss_kb", "loaded_rss_kb", "s": [...]} plus
 * extra (already JSON members or ""). */
static void report(const char *tool, double seconds, const double *s, size_t k, const char *extra)
{
    printf("{\"tool\": \"%s\", \"seconds\": %.6f, \"compute_rss_kb\": %ld, \"loaded_rss_kb\": %ld, \"s\": [", tool,
           seconds, status_kb("VmHWM"), loaded_rss_kb);
    for (size_t j = 0; j < k; j++)
        printf("%s%.17g", j ? ", " : "", s[j]);
    printf("]%s}\n", extra);
}

/* The bare LAPACK call on the centred block (copied first, dgesdd destroys it). */
static int run_lapacke(const es_matrix *m, const size_t *idx, size_t n, size_t d, size_t k)
{
    size_t r = n < d ? n : d;
    double *x = es_matrix_items_copy(m, idx, n);
    es_center(x, n, d, ES_CENTER_COLUMNS, NULL);
    double *s = es_malloc(r * sizeof *s), *u = es_malloc(n * r * sizeof *u), *vt = es_malloc(r * d * sizeof *vt);
    double t0 = es_now();
    int info = LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'S', (int)n, (int)d, x, (int)d, s, u, (int)r, vt, (int)d);
    double t = es_now() - t0;
    if (info == 0)
        report("lapacke_dgesdd", t, s, k, "");
    free(x); free(s); free(u); free(vt);
    return info == 0 ? 0 : 1;
}

/* embedscope's first PCA: the decomposition (exact or top-k) and X V_k. */
static int run_embedscope(const es_matrix *m, const size_t *idx, size_t n, bool topk, size_t k)
{
    es_svd *svd = NULL;
    es_err err = {0};
    double t0 = es_now();
    int rc = topk ? es_svd_topk(m, idx, n, ES_CENTER_COLUMNS, k, ES_TOPK_TOLERANCE, &svd, &err)
                  : es_svd_compute(m, idx, n, ES_CENTER_COLUMNS, &svd, &err);
    double *coords = rc == 0 ? es_malloc(n * k * sizeof *coords) : NULL;
    if (rc == 0)
        rc = es_svd_project(svd, m, k, coords, &err);
    double t = es_now() - t0;
    if (rc != 0) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    char extra[200];
    snprintf(extra, sizeof extra, ", \"decompose_s\": %.6f, \"certified\": %s, \"sigma_bound\": %.3g", svd->seconds,
             svd->cert.passed ? "true" : "false", svd->cert.sigma_bound);
    report(topk ? "embedscope_topk" : "embedscope_exact", t, svd->s, k, extra);
    free(coords);
    es_svd_release(svd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s FILE.npy exact|topk|lapacke K\n", argv[0]);
        return 2;
    }
    es_err err = {0};
    es_matrix *m = NULL;
    if (es_matrix_load("bench", argv[1], NULL, ES_AXIS_COLUMNS, &m, &err) != 0) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    size_t n = es_matrix_items(m), d = es_matrix_dim(m), k = (size_t)atol(argv[3]);
    size_t *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    reset_peak_rss();
    int rc = strcmp(argv[2], "lapacke") == 0 ? run_lapacke(m, idx, n, d, k)
                                             : run_embedscope(m, idx, n, strcmp(argv[2], "topk") == 0, k);
    free(idx);
    es_matrix_release(m);
    return rc;
}
