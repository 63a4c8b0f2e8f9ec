/* OpenBLAS's kernels and threads (see include/embedscope/blas.h).
 *
 * Why the thread policy is safe with OpenBLAS's one global setting (pthread
 * build, 0.3.21): openblas_set_num_threads only stores the count once the
 * library's thread pool is as large as it will ever be, which es_blas_threads_*
 * make it at start (the pool is grown to the budget before any computation
 * runs); every BLAS call reads the count once, when it starts, and splits its
 * work by it. So a change made while other threads are inside BLAS calls
 * changes only their next calls, never a call in flight. The count is
 * recomputed under one lock whenever a computation starts or ends, so the
 * computations running together use budget / jobs threads each; only the BLAS
 * calls already in flight when one starts finish with the older, larger
 * count, for as long as one call lasts. */
#include "embedscope/blas.h"
#include "embedscope/core.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* The environment variable that marks a re-execution by es_blas_startup:
 * "forced:<library's pick>" after forcing a better core, "fallback:<core>"
 * after the self-test failed with that forced core. */
#define REEXEC_ENV "ES_BLAS_REEXEC"
#define FORCED "forced:"
#define FALLBACK "fallback:"
/* Largest error the self-test accepts (values in [0.5, 1], vectors' orthogonality). */
#define SELF_TEST_TOL 1e-12

static es_blas_info info;

/* ---------------------------------------------------------------- the CPU */

void es_cpu_features_read(es_cpu_features *out)
{
    __builtin_cpu_init();
    *out = (es_cpu_features){
        .avx = __builtin_cpu_supports("avx"),
        .avx2 = __builtin_cpu_supports("avx2"),
        .fma = __builtin_cpu_supports("fma"),
        .avx512f = __builtin_cpu_supports("avx512f"),
        .avx512dq = __builtin_cpu_supports("avx512dq"),
        .avx512bw = __builtin_cpu_supports("avx512bw"),
        .avx512vl = __builtin_cpu_supports("avx512vl"),
    };
}

es_isa es_cpu_isa(const es_cpu_features *f)
{
    bool avx2 = f->avx && f->avx2 && f->fma;
    if (avx2 && f->avx512f && f->avx512dq && f->avx512bw && f->avx512vl)
        return ES_ISA_AVX512;
    return avx2 ? ES_ISA_AVX2 : f->avx ? ES_ISA_AVX : ES_ISA_BASELINE;
}

const char *es_isa_name(es_isa isa)
{
    static const char *const names[] = {"baseline", "avx", "avx2", "avx512"};
    return es_name_of(names, sizeof names / sizeof *names, isa);
}

/* OpenBLAS x86-64 core names (the DYNAMIC_ARCH list) by the instruction set
 * of their double-precision kernels; every other name (Katmai .. Nehalem,
 * Athlon .. Barcelona, Atom, Nano, Unknown) has SSE kernels only. Excavator
 * and Zen are listed as OpenBLAS builds them: Excavator with the AVX2/FMA
 * Haswell-class kernels of 0.3.x, Zen with Haswell's. */
es_isa es_blas_core_isa(const char *core)
{
    static const struct {
        const char *name;
        es_isa isa;
    } cores[] = {
        {"SkylakeX", ES_ISA_AVX512},  {"Cooperlake", ES_ISA_AVX512}, {"SapphireRapids", ES_ISA_AVX512},
        {"Haswell", ES_ISA_AVX2},     {"Zen", ES_ISA_AVX2},          {"Excavator", ES_ISA_AVX2},
        {"Sandybridge", ES_ISA_AVX},  {"Bulldozer", ES_ISA_AVX},     {"Piledriver", ES_ISA_AVX},
        {"Steamroller", ES_ISA_AVX},
    };
    for (size_t i = 0; core && i < sizeof cores / sizeof *cores; i++)
        if (strcasecmp(core, cores[i].name) == 0)
            return cores[i].isa;
    return ES_ISA_BASELINE;
}

const char *es_blas_better_core(const char *core, const es_cpu_features *f)
{
    es_isa cpu = es_cpu_isa(f);
    if (es_blas_core_isa(core) >= ES_ISA_AVX2 || cpu < ES_ISA_AVX2)
        return NULL;
    return cpu == ES_ISA_AVX512 ? "SkylakeX" : "Haswell";
}

/* ---------------------------------------------------------------- the self-test */

/* The reflector I - 2 w w^T / w^T w (n x n, column-major) for w_i = sin(i + 1). */
static double *reflector(size_t n)
{
    double *h = es_malloc(n * n * sizeof *h), ww = 0;
    for (size_t i = 0; i < n; i++)
        ww += sin((double)i + 1.0) * sin((double)i + 1.0);
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < n; i++)
            h[j * n + i] = (i == j) - 2 * sin((double)i + 1.0) * sin((double)j + 1.0) / ww;
    return h;
}

/* max |Q^T Q - I| for the rows x cols column-major q (its columns orthonormal). */
static double orthogonality_error(const double *q, int rows, int cols)
{
    size_t n = (size_t)cols;
    double *g = es_malloc(n * n * sizeof *g), worst = 0;
    cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, cols, cols, rows, 1.0, q, rows, q, rows, 0.0, g, cols);
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < n; i++)
            worst = fmax(worst, fabs(g[j * n + i] - (i == j)));
    free(g);
    return worst;
}

int es_blas_self_test(double *error)
{
    enum { M = 320, N = 192 };
    double *hu = reflector(M), *hv = reflector(N), *d = es_calloc((size_t)M * N, sizeof *d);
    double *t = es_malloc((size_t)M * N * sizeof *t), *a = es_malloc((size_t)M * N * sizeof *a);
    double s[N], *u = es_malloc((size_t)M * N * sizeof *u), *vt = es_malloc((size_t)N * N * sizeof *vt);
    for (size_t j = 0; j < N; j++)
        d[j * M + j] = 1.0 - (double)j / (2.0 * N); /* the singular values, decreasing */
    /* A = H_u D H_v: its singular values are D's, its vectors H_u's and H_v's columns */
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, M, N, M, 1.0, hu, M, d, M, 0.0, t, M);
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, M, N, N, 1.0, t, M, hv, N, 0.0, a, M);
    lapack_int status = LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'S', M, N, a, M, s, u, M, vt, N);
    double worst = status == 0 ? 0 : INFINITY;
    for (size_t j = 0; status == 0 && j < N; j++)
        worst = fmax(worst, fabs(s[j] - d[j * M + j]));
    if (status == 0)
        worst = fmax(worst, fmax(orthogonality_error(u, M, N), orthogonality_error(vt, N, N)));
    free(hu); free(hv); free(d); free(t); free(a); free(u); free(vt);
    *error = isnan(worst) ? INFINITY : worst;
    return worst <= SELF_TEST_TOL ? 0 : -1;
}

/* ---------------------------------------------------------------- start-up */

const char *es_coretype_source_name(es_coretype_source source)
{
    static const char *const names[] = {"library", "user", "embedscope"};
    return es_name_of(names, sizeof names / sizeof *names, source);
}

/* Copy src into a char array (truncated). */
#define COPY(dst, src) snprintf((dst), sizeof(dst), "%s", (src))

/* What the loaded library is: core, configuration, version, threading. */
static void read_library(es_blas_info *bi)
{
    static const char *const models[] = {"sequential", "pthreads", "openmp"};
    const char *config = openblas_get_config();
    COPY(bi->core, openblas_get_corename());
    COPY(bi->config, config ? config : "");
    if (sscanf(bi->config, "OpenBLAS %31s", bi->version) != 1)
        COPY(bi->version, "unknown");
    bi->parallel = es_name_of(models, sizeof models / sizeof *models, (size_t)openblas_get_parallel());
    es_cpu_features_read(&bi->cpu);
    bi->cpu_isa = es_cpu_isa(&bi->cpu);
    bi->core_isa = es_blas_core_isa(bi->core);
}

/* Start this program again with the marker set to "<state><core>" and
 * OPENBLAS_CORETYPE set to coretype (unset when NULL). Returns only when execv
 * fails (logged). */
static void reexec(char **argv, const char *state, const char *core, const char *coretype)
{
    char marker[64];
    snprintf(marker, sizeof marker, "%s%s", state, core);
    setenv(REEXEC_ENV, marker, 1);
    if (coretype)
        setenv("OPENBLAS_CORETYPE", coretype, 1);
    else
        unsetenv("OPENBLAS_CORETYPE");
    fflush(NULL);
    execv("/proc/self/exe", argv);
    es_warn("cannot restart with OPENBLAS_CORETYPE=%s (execv: %m); keeping OpenBLAS's kernels",
            coretype ? coretype : "(unset)");
    unsetenv(REEXEC_ENV);
}

/* The warning for kernels below what the CPU allows, or for a failed self-test. */
static void explain(es_blas_info *bi, const char *fallback_from)
{
    if (fallback_from)
        snprintf(bi->warning, sizeof bi->warning,
                 "the BLAS self-test failed with OPENBLAS_CORETYPE=%s; running OpenBLAS's own choice %s", fallback_from,
                 bi->core);
    else if (!bi->self_test_passed)
        snprintf(bi->warning, sizeof bi->warning,
                 "the BLAS self-test failed on the %s kernels (deviation %.3g): results may be wrong", bi->core,
                 bi->self_test_error);
    else if (es_blas_better_core(bi->core, &bi->cpu))
        snprintf(bi->warning, sizeof bi->warning,
                 "OpenBLAS runs its %s (%s) kernels on a CPU with %s%s", bi->core, es_isa_name(bi->core_isa),
                 es_isa_name(bi->cpu_isa), bi->source == ES_CORE_USER ? " because OPENBLAS_CORETYPE says so" : "");
}

void es_blas_startup(char **argv)
{
    read_library(&info);
    const char *marker = getenv(REEXEC_ENV), *user = getenv("OPENBLAS_CORETYPE"), *fallback_from = NULL;
    if (marker && strncmp(marker, FORCED, strlen(FORCED)) == 0) {
        info.source = ES_CORE_EMBEDSCOPE;
        COPY(info.library_core, marker + strlen(FORCED));
    } else if (marker && strncmp(marker, FALLBACK, strlen(FALLBACK)) == 0) {
        fallback_from = marker + strlen(FALLBACK);
        COPY(info.library_core, info.core);
    } else if (user && *user) {
        info.source = ES_CORE_USER;
    } else {
        const char *fake = getenv("ES_TEST_FAKE_CORENAME");
        COPY(info.library_core, fake && *fake ? fake : info.core);
        const char *better = es_blas_better_core(info.library_core, &info.cpu);
        if (better) {
            es_info("OpenBLAS %s picked its %s kernels on a CPU with %s: restarting with OPENBLAS_CORETYPE=%s",
                    info.version, info.library_core, es_isa_name(info.cpu_isa), better);
            reexec(argv, FORCED, info.library_core, better);
        }
    }
    const char *fail = getenv("ES_TEST_BLAS_SELF_TEST_FAIL");
    info.self_test_passed = es_blas_self_test(&info.self_test_error) == 0 && !(fail && strcmp(fail, "1") == 0);
    if (!info.self_test_passed && info.source == ES_CORE_EMBEDSCOPE) {
        es_warn("the BLAS self-test failed with OPENBLAS_CORETYPE=%s (deviation %.3g): restarting with OpenBLAS's own "
                "choice", info.core, info.self_test_error);
        reexec(argv, FALLBACK, info.core, NULL);
    }
    explain(&info, fallback_from);
    static const char *const sources[] = {"the library's choice", "OPENBLAS_CORETYPE", "forced by embedscope"};
    es_info("OpenBLAS %s (%s), core %s (%s kernels, %s), CPU with %s; self-test %s (largest deviation %.2g)", info.version,
            info.parallel, info.core, es_isa_name(info.core_isa), es_name_of(sources, 3, info.source),
            es_isa_name(info.cpu_isa), info.self_test_passed ? "passed" : "FAILED", info.self_test_error);
    if (info.warning[0])
        es_warn("%s", info.warning);
}

const es_blas_info *es_blas_info_get(void)
{
    return &info;
}

/* ---------------------------------------------------------------- threads */

/* The CPU quota of cgroup v2 (cpu.max "QUOTA PERIOD") or v1 (cfs_quota_us /
 * cfs_period_us) in cores, rounded up; 0 when there is none or it cannot be read. */
static unsigned cgroup_cores(void)
{
    long long quota = -1, period = 0;
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        if (fscanf(f, "%lld %lld", &quota, &period) != 2) /* "max 100000": no quota */
            quota = -1;
        fclose(f);
    } else if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r"))) {
        if (fscanf(f, "%lld", &quota) != 1)
            quota = -1;
        fclose(f);
        if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r"))) {
            if (fscanf(f, "%lld", &period) != 1)
                period = 0;
            fclose(f);
        }
    }
    return quota > 0 && period > 0 ? (unsigned)((quota + period - 1) / period) : 0;
}

unsigned es_cores_available(void)
{
    cpu_set_t set;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned cores = online > 0 ? (unsigned)online : 1;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        cores = (unsigned)CPU_COUNT(&set);
    unsigned quota = cgroup_cores();
    if (quota && quota < cores)
        cores = quota;
    return cores;
}

unsigned es_blas_share(unsigned budget, unsigned jobs)
{
    unsigned share = budget / (jobs ? jobs : 1);
    return share ? share : 1;
}

static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static es_blas_threads_state threads; /* budget 0: not managed (libraries and tests) */
static unsigned one_sections;         /* es_blas_one_* sections running */
static unsigned unmanaged_count;      /* the count to restore after them when not managed */

/* Set OpenBLAS's count to what the policy says now (lock held). */
static void apply(void)
{
    unsigned want = one_sections ? 1
                    : !threads.budget ? unmanaged_count
                    : threads.automatic ? es_blas_share(threads.budget, threads.jobs)
                                        : threads.budget;
    if (want && want != threads.current) {
        openblas_set_num_threads((int)want);
        threads.current = want;
        threads.peak = want > threads.peak ? want : threads.peak;
    }
}

/* Grow OpenBLAS's thread pool to its largest size once (see the top), then apply. */
static void configure(bool automatic, unsigned budget)
{
    pthread_mutex_lock(&threads_lock);
    threads.automatic = automatic;
    threads.budget = budget ? budget : 1;
    openblas_set_num_threads((int)threads.budget);
    threads.current = threads.budget;
    threads.peak = threads.peak > threads.current ? threads.peak : threads.current;
    apply();
    pthread_mutex_unlock(&threads_lock);
}

void es_blas_threads_auto(unsigned budget) { configure(true, budget); }
void es_blas_threads_fixed(unsigned threads_per_job) { configure(false, threads_per_job); }

/* Add delta (+1 or -1) to a counter and apply (lock taken). */
static void count_and_apply(unsigned *counter, int delta)
{
    pthread_mutex_lock(&threads_lock);
    if (counter == &one_sections && !threads.budget && delta > 0 && one_sections == 0) {
        unmanaged_count = (unsigned)openblas_get_num_threads();
        threads.current = unmanaged_count;
    }
    *counter = delta > 0 ? *counter + 1 : *counter ? *counter - 1 : 0;
    apply();
    pthread_mutex_unlock(&threads_lock);
}

void es_blas_job_begin(void) { count_and_apply(&threads.jobs, +1); }
void es_blas_job_end(void) { count_and_apply(&threads.jobs, -1); }
void es_blas_one_begin(void) { count_and_apply(&one_sections, +1); }
void es_blas_one_end(void) { count_and_apply(&one_sections, -1); }

unsigned es_blas_job_threads(void)
{
    pthread_mutex_lock(&threads_lock);
    unsigned n = threads.budget ? (threads.automatic ? es_blas_share(threads.budget, threads.jobs) : threads.budget)
                 : one_sections ? unmanaged_count
                                : (unsigned)openblas_get_num_threads();
    pthread_mutex_unlock(&threads_lock);
    return n ? n : 1;
}

const char *es_blas_core_name(void)
{
    return info.core[0] ? info.core : openblas_get_corename();
}

void es_blas_threads_get(es_blas_threads_state *out)
{
    pthread_mutex_lock(&threads_lock);
    *out = threads;
    pthread_mutex_unlock(&threads_lock);
}
