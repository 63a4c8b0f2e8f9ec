/* Benchmark runner for one tool on one matrix: embedscope's exact path or its
 * certified top-k, each as the first PCA answer (decomposition plus the k
 * coordinates), its singular values alone (the spectrum's method=values: no
 * vectors, no coordinates), or a bare LAPACKE_dgesdd on the same centred block
 * (the row-major call numpy makes). As bench/peers.py: the load and an untimed
 * set-up call on the first d + 256 items are not timed; "seconds" is the first
 * call on the whole matrix, "warm_seconds" a second identical call. Prints one
 * JSON line: {"tool", "seconds", "warm_seconds", "compute_rss_kb",
 * "loaded_rss_kb", "s": [the first k singular values], ...}: compute_rss_kb is
 * the peak RSS from the end of the load
 * to the answer, loaded_rss_kb the RSS at the end of the load (process, libraries
 * and source); the whole process's peak (load included) is /usr/bin/time's.
 * The OpenBLAS kernels are chosen as the daemon chooses them (es_blas_startup:
 * a generic pick on an AVX2/AVX-512 CPU is replaced by a restart); the thread
 * count is OpenBLAS's own (OPENBLAS_NUM_THREADS), reported as "threads" with
 * the core as "blas_core". BENCH_NO_WARM=1 skips the warm call (warm_seconds
 * null; for the largest matrices). BENCH_PHASES=1 logs the computation's phases
 * with their seconds on stderr (the daemon's debug lines: scan, Gram, eigenpairs,
 * Rayleigh-Ritz, certificate; TSQR chunks and merges, the factor's SVD). `bench_svd --blas` prints the kernel choice
 * alone: {"core", "library_core", "coretype_source", "version", ...}.
 * Usage: bench_svd FILE.npy exact|topk|values|lapacke K, or bench_svd --blas */
#include <cblas.h>
#include <lapacke.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedscope/blas.h"
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

/* One run's answer: its time, the first k singular values (owned) and extra
 * JSON members (already formatted, or ""). */
typedef struct run_result {
    double seconds;
    double *s;
    char extra[200];
} run_result;

/* The bare LAPACK call on the centred block (copied first, dgesdd destroys it).
 * Returns 0, or 1 when dgesdd fails. */
static int run_lapacke(const es_matrix *m, const size_t *idx, size_t n, size_t d, run_result *out)
{
    size_t r = n < d ? n : d;
    double *x = es_matrix_items_copy(m, idx, n);
    es_center(x, n, d, ES_CENTER_COLUMNS, NULL);
    double *s = es_malloc(r * sizeof *s), *u = es_malloc(n * r * sizeof *u), *vt = es_malloc(r * d * sizeof *vt);
    double t0 = es_now();
    int info = LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'S', (int)n, (int)d, x, (int)d, s, u, (int)r, vt, (int)d);
    out->seconds = es_now() - t0;
    out->s = s;
    free(x); free(u); free(vt);
    return info == 0 ? 0 : 1;
}

/* embedscope's first PCA: the decomposition (tool "exact" or "topk") and X V_k;
 * or (tool "values") the singular values alone, the spectrum's answer. Returns
 * 0, or 1 (message on stderr) when the decomposition fails. */
static int run_embedscope(const es_matrix *m, const size_t *idx, size_t n, const char *tool, size_t k,
                          run_result *out)
{
    es_svd *svd = NULL;
    es_err err = {0};
    double t0 = es_now();
    int rc = strcmp(tool, "topk") == 0     ? es_svd_topk(m, idx, n, ES_CENTER_COLUMNS, k, ES_TOPK_TOLERANCE, &svd, &err)
             : strcmp(tool, "values") == 0 ? es_svd_values(m, idx, n, ES_CENTER_COLUMNS, &svd, &err)
                                           : es_svd_compute(m, idx, n, ES_CENTER_COLUMNS, &svd, &err);
    bool pca = rc == 0 && strcmp(tool, "values") != 0;
    double *coords = pca ? es_malloc(n * k * sizeof *coords) : NULL;
    if (pca)
        rc = es_svd_project(svd, m, k, coords, &err);
    out->seconds = es_now() - t0;
    free(coords);
    if (rc != 0) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    out->s = es_malloc(k * sizeof *out->s);
    memcpy(out->s, svd->s, k * sizeof *out->s);
    snprintf(out->extra, sizeof out->extra, ", \"decompose_s\": %.6f, \"certified\": %s, \"sigma_bound\": %.3g, "
             "\"vector_bound\": %.3g, \"eigensolver\": \"%s\"", svd->seconds, svd->cert.passed ? "true" : "false",
             svd->cert.sigma_bound, svd->cert.vector_bound, svd->eigensolver ? svd->eigensolver : "");
    es_svd_release(svd);
    return 0;
}

/* Run the tool named by `tool` on the first n items. Returns 0 or 1 as the runners. */
static int run_tool(const char *tool, const es_matrix *m, const size_t *idx, size_t n, size_t k, run_result *out)
{
    *out = (run_result){0};
    size_t d = es_matrix_dim(m);
    return strcmp(tool, "lapacke") == 0 ? run_lapacke(m, idx, n, d, out) : run_embedscope(m, idx, n, tool, k, out);
}

/* Print the kernel choice: what the library picked, what runs, who chose, the CPU, the self-test. */
static void report_blas(void)
{
    const es_blas_info *bi = es_blas_info_get();
    printf("{\"core\": \"%s\", \"library_core\": \"%s\", \"coretype_source\": \"%s\", \"version\": \"%s\", "
           "\"parallel\": \"%s\", \"cpu_isa\": \"%s\", \"kernels\": \"%s\", \"self_test_passed\": %s, "
           "\"threads\": %d, \"config\": \"%s\"}\n",
           bi->core, bi->library_core, es_coretype_source_name(bi->source), bi->version, bi->parallel,
           es_isa_name(bi->cpu_isa), es_isa_name(bi->core_isa), bi->self_test_passed ? "true" : "false",
           openblas_get_num_threads(), bi->config);
}

/* Print {"tool", "seconds", "warm_seconds", "compute_rss_kb", "loaded_rss_kb", "s": [...]} plus the run's extra. */
static void report(const char *tool, const run_result *first, const run_result *warm, size_t k)
{
    const char *name = strcmp(tool, "lapacke") == 0  ? "lapacke_dgesdd"
                       : strcmp(tool, "topk") == 0   ? "embedscope_topk"
                       : strcmp(tool, "values") == 0 ? "embedscope_values"
                                                     : "embedscope_exact";
    char warm_text[32] = "null";
    if (warm->s)
        snprintf(warm_text, sizeof warm_text, "%.6f", warm->seconds);
    printf("{\"tool\": \"%s\", \"seconds\": %.6f, \"warm_seconds\": %s, \"compute_rss_kb\": %ld, "
           "\"loaded_rss_kb\": %ld, \"threads\": %d, \"blas_core\": \"%s\", \"s\": [", name, first->seconds,
           warm_text, status_kb("VmHWM"), loaded_rss_kb, openblas_get_num_threads(), es_blas_info_get()->core);
    for (size_t j = 0; j < k; j++)
        printf("%s%.17g", j ? ", " : "", first->s[j]);
    printf("]%s}\n", first->extra);
}

int main(int argc, char **argv)
{
    es_log_set_level(getenv("BENCH_PHASES") ? ES_LOG_DEBUG : ES_LOG_WARN); /* the phases' seconds on stderr */
    es_blas_startup(argv); /* the daemon's kernel choice (may restart this program) */
    if (argc == 2 && strcmp(argv[1], "--blas") == 0) {
        report_blas();
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s FILE.npy exact|topk|values|lapacke K, or %s --blas\n", argv[0], argv[0]);
        return 2;
    }
    es_err err = {0};
    es_matrix *m = NULL;
    if (es_matrix_load("bench", argv[1], NULL, ES_AXIS_COLUMNS, &m, &err) != 0) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    size_t n = es_matrix_items(m), d = es_matrix_dim(m), k = (size_t)atol(argv[3]);
    if (getenv("BENCH_TOPK_DENSE")) /* top-k's Gram eigenpairs by dsyevr at every d (the path before iteration) */
        es_topk_iteration_set(SIZE_MAX, 0);
    size_t *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    run_result first = {0}, warm = {0};
    size_t small = n < d + 256 ? n : d + 256; /* the peers' untimed set-up call on the first d + 256 rows */
    reset_peak_rss();
    int rc = run_tool(argv[2], m, idx, small, k, &first);
    free(first.s);
    if (rc == 0)
        rc = run_tool(argv[2], m, idx, n, k, &first);
    const char *no_warm = getenv("BENCH_NO_WARM");
    if (rc == 0 && !(no_warm && strcmp(no_warm, "1") == 0))
        rc = run_tool(argv[2], m, idx, n, k, &warm);
    if (rc == 0)
        report(argv[2], &first, &warm, k);
    free(first.s);
    free(warm.s);
    free(idx);
    es_matrix_release(m);
    return rc;
}
