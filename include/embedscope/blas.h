/* embedscope BLAS: which OpenBLAS kernels run, on which CPU, and how many
 * threads each computation gets (docs/operations.md, "BLAS kernels and threads").
 *
 * Kernels. OpenBLAS's DYNAMIC_ARCH build picks its kernels when the library
 * loads; an old build that does not know a CPU model falls back to generic
 * SSE kernels (Prescott) even on a CPU with AVX-512, at a third of the speed.
 * es_blas_startup notices it and re-executes the process once with
 * OPENBLAS_CORETYPE set to the best kernel the build accepts for the CPU's
 * features, then checks the arithmetic with a small SVD of known singular
 * values; should that fail, it re-executes once more with the library's own
 * choice and warns. A user's explicit OPENBLAS_CORETYPE is never overridden.
 *
 * Threads. OpenBLAS's thread count is one process-wide setting (pthread
 * build). In "auto" mode it is the cores this process may use divided among
 * the computations running at once, recomputed under one lock whenever a
 * computation starts or ends; sections that must not depend on the thread
 * count (generated matrices, whose sha256 names them) run with one. */
#ifndef EMBEDSCOPE_BLAS_H
#define EMBEDSCOPE_BLAS_H

#include <stdbool.h>
#include <stddef.h>

/* The widest vector instruction set a CPU offers or a kernel needs, in order. */
typedef enum es_isa { ES_ISA_BASELINE, ES_ISA_AVX, ES_ISA_AVX2, ES_ISA_AVX512 } es_isa;

/* The CPU features that decide the kernel (each also enabled by the OS). */
typedef struct es_cpu_features {
    bool avx, avx2, fma, avx512f, avx512dq, avx512bw, avx512vl;
} es_cpu_features;

/* This CPU's features (cpuid through the compiler's __builtin_cpu_supports). Never fails. */
void es_cpu_features_read(es_cpu_features *out);
/* The widest set the features make whole: AVX-512 needs F, DQ, BW and VL (the
 * SkylakeX kernels use them), AVX2 needs FMA too. Pure, never fails. */
es_isa es_cpu_isa(const es_cpu_features *f);
/* "baseline", "avx", "avx2" or "avx512". Never fails. */
const char *es_isa_name(es_isa isa);
/* The instruction set an OpenBLAS core's double-precision kernels use, by its
 * name as openblas_get_corename() gives it (any case); ES_ISA_BASELINE for the
 * generic SSE cores and for names it does not know. Pure, never fails. */
es_isa es_blas_core_isa(const char *core);
/* The core to force instead of the library's pick `core` on a CPU with
 * features f: "SkylakeX" (AVX-512) or "Haswell" (AVX2) when `core` uses less
 * than AVX2 and the CPU has AVX2 or more; NULL to keep the library's choice
 * (it already uses AVX2 or wider kernels, or the CPU has no AVX2). Both names
 * are ones OpenBLAS 0.3.21's DYNAMIC_ARCH build accepts in OPENBLAS_CORETYPE.
 * Pure, never fails. */
const char *es_blas_better_core(const char *core, const es_cpu_features *f);

/* How the kernel in use was chosen. */
typedef enum es_coretype_source {
    ES_CORE_LIBRARY,    /* the library's own choice */
    ES_CORE_USER,       /* OPENBLAS_CORETYPE set by the user */
    ES_CORE_EMBEDSCOPE, /* forced by es_blas_startup (the library picked a generic one) */
} es_coretype_source;

/* "library", "user" or "embedscope" (/v1 "blas", embedscope_blas_info). Never fails. */
const char *es_coretype_source_name(es_coretype_source source);

typedef struct es_blas_info {
    char core[32];           /* openblas_get_corename() now */
    char library_core[32];   /* what the library picked itself ("" when the user chose) */
    char version[32];        /* "0.3.21" */
    char config[256];        /* openblas_get_config() */
    const char *parallel;    /* "sequential", "pthreads" or "openmp" */
    es_cpu_features cpu;
    es_isa cpu_isa, core_isa;
    es_coretype_source source;
    bool self_test_passed;
    double self_test_error;  /* the largest error the self-test measured */
    char warning[256];       /* "" or why the kernels are not the best the CPU allows */
} es_blas_info;

/* Read what OpenBLAS and the CPU are and, when the library picked a generic
 * kernel on a CPU with AVX2 or AVX-512 and the user set no OPENBLAS_CORETYPE,
 * re-execute /proc/self/exe with argv once with the better core (guarded by
 * the environment variable ES_BLAS_REEXEC, internal). After that re-execution
 * run the self-test; if it fails, re-execute with the library's own choice.
 * Logs what it finds (one info line; a warning when the kernels stay below
 * what the CPU allows). Test hooks: ES_TEST_FAKE_CORENAME replaces the
 * library's pick in the decision, ES_TEST_BLAS_SELF_TEST_FAIL=1 fails the
 * self-test. Returns only when the process keeps running (an execv failure is
 * logged and the library's choice kept). */
void es_blas_startup(char **argv);
/* What es_blas_startup found (zeroed before it ran). Never fails. */
const es_blas_info *es_blas_info_get(void);
/* The kernel check: the singular values of a dense 320 x 192 matrix built by
 * dgemm from two Householder reflectors and a diagonal (so they are the
 * diagonal's, in closed form), by dgesdd, against that closed form, and the
 * orthogonality of its vectors, each within 1e-12. 0, or -1 when the
 * arithmetic is wrong. The largest error goes to *error. */
int es_blas_self_test(double *error);

/* ---------------------------------------------------------------- threads */

/* The cores this process may use: its CPU affinity (taskset, cpusets),
 * bounded by its cgroup CPU quota (cgroup v2 cpu.max or v1 cfs quota, rounded
 * up). At least 1; never fails. */
unsigned es_cores_available(void);
/* BLAS threads for each of `jobs` computations running at once on `budget`
 * cores: budget / jobs, at least 1 and at most budget (jobs 0 counts as 1).
 * Pure, never fails. */
unsigned es_blas_share(unsigned budget, unsigned jobs);
/* Threads policy: auto (the budget divided among running computations) or a
 * fixed count per computation. Call once at start, before any computation
 * runs. Never fail. */
void es_blas_threads_auto(unsigned budget);
void es_blas_threads_fixed(unsigned threads);
/* A computation starts / ends (the compute pool calls these around each job):
 * the thread count becomes the new share. Never fail. */
void es_blas_job_begin(void);
void es_blas_job_end(void);
/* A section whose result must not depend on the thread count: one thread for
 * every computation while any such section runs. Never fail. */
void es_blas_one_begin(void);
void es_blas_one_end(void);

typedef struct es_blas_threads_state {
    bool automatic;    /* false: fixed */
    unsigned budget;   /* auto: the cores; fixed: threads per computation */
    unsigned jobs;     /* computations running now */
    unsigned current;  /* OpenBLAS's thread count now */
    unsigned peak;     /* the largest count ever set */
} es_blas_threads_state;
/* A consistent snapshot. Never fails. */
void es_blas_threads_get(es_blas_threads_state *out);
/* The threads one computation gets now: its share of the cores (auto), the
 * fixed count, or, where nothing is managed (libraries, tests, benchmarks),
 * OpenBLAS's own count outside es_blas_one sections. Not lowered by another
 * computation's es_blas_one section: the parallel passes that open one size
 * their own threads by this. At least 1; never fails. */
unsigned es_blas_job_threads(void);
/* The OpenBLAS core in use (what es_blas_startup read, else the library's
 * openblas_get_corename()). Static storage; never fails. */
const char *es_blas_core_name(void);

#endif
