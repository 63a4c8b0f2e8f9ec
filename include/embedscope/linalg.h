/* embedscope linalg: centring, exact thin SVD, decomposition cache.
 * Ownership and failure rules: see core.h. */
#ifndef EMBEDSCOPE_LINALG_H
#define EMBEDSCOPE_LINALG_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include "embedscope/core.h"
#include "embedscope/store.h"

/* ---------------------------------------------------------------- centring */

typedef enum es_centering { ES_CENTER_NONE, ES_CENTER_COLUMNS, ES_CENTER_ROWS } es_centering;
/* The names in es_centering order, NULL-terminated (a parameter's choices). */
extern const char *const es_centering_names[];
const char *es_centering_name(es_centering c);            /* "none" | "columns" | "rows" */
int es_centering_parse(const char *s, es_centering *out); /* -1 if unknown */

/* A parallel loop: tasks 0 .. tasks - 1 taken in turn by at most `threads`
 * threads (this one included, at most 256); run(ctx, task) for each; returns
 * when all are done. Which thread runs a task must never change what it
 * computes. A thread that cannot be created leaves its share to the others. */
void es_par_for(size_t tasks, size_t threads, void (*run)(void *ctx, size_t task), void *ctx);
/* The chunks the TSQR of an n x d block (n >= d) runs in parallel, one per
 * thread at a time: 1 for a block too short to split (its TSQR runs alone,
 * with OpenBLAS's threads). Pure, never fails. */
size_t es_tsqr_chunks(size_t n, size_t d);

/* Centre an n x d row-major block in place. columns: subtract the mean row (PCA),
 * written to mean_out (d doubles) if non-NULL; rows: subtract each row's mean,
 * written to mean_out (n doubles) if non-NULL. Never fails. */
void es_center(double *x, size_t n, size_t d, es_centering c, double *mean_out);

/* ---------------------------------------------------------------- SVD */

/* Thin SVD X = U diag(s) Vt of the selected, centred items of a matrix in model
 * orientation (n x d), r = min(n, d). Immutable and reference counted. It holds
 * only factors, not its matrix: the left vectors and projections are derived from
 * the matrix, which the caller passes (a cached decomposition keeps no source
 * alive outside the cache's byte budget); its identity is checked.
 * Sign convention: for each j the entry of largest magnitude of right singular
 * vector j (row j of vt) is positive (first such entry on ties); u follows.
 * The left vectors are formed on first use (es_svd_left): most analyses need only
 * s and vt (PCA coordinates are X V, see es_svd_project). */
/* How a decomposition was computed: exactly (all r = min(n, d) triplets), the
 * r singular values alone (es_svd_values), or as the certified top k (see
 * es_svd_topk). auto picks exact or topk (es_method_resolve), never values: a
 * selection keeps one decomposition that serves every analysis. values comes
 * before topk so that the methods the spectrum takes (auto, exact, values) are
 * a prefix of the list (src/api/analyses/common.c). */
typedef enum es_method { ES_METHOD_AUTO, ES_METHOD_EXACT, ES_METHOD_VALUES, ES_METHOD_TOPK } es_method;
const char *es_method_name(es_method m);            /* "auto" | "exact" | "values" | "topk" */

/* The a-posteriori certificate of a top-k decomposition, relative to s[0]:
 * residual = max_j sqrt(||X v_j - s_j u_j||^2 + ||X^T u_j - s_j v_j||^2) / s_0;
 * each s_j is within sigma_bound * s_0 of a singular value of X
 * (sigma_bound = residual / sqrt 2), and the angle between computed and exact
 * vectors j is at most asin(vector_bound) with vector_bound = max_j residual_j
 * / gap_j (Wedin), gap_j the distance from s_j to the rest of the spectrum. */
typedef struct es_certificate {
    double residual, sigma_bound, vector_bound, min_gap;
    double tolerance;     /* what was asked for */
    bool passed;          /* sigma_bound and vector_bound <= tolerance */
} es_certificate;

typedef struct es_svd {
    size_t n, d, r;       /* r: triplets (values) held; min(n, d) for exact and values, k for top-k */
    size_t *rows;          /* the n selected item indices */
    double *s;             /* r, descending, >= 0 */
    double *vt;            /* r x d row-major: row j is right (model-space) vector j; NULL for values */
    double *mean;          /* d: the subtracted mean row for columns centring, else NULL */
    es_centering centering;
    const char *solver;    /* "dgesdd" or "dgesvd" (static string), run on the QR's R factor; for tall
                              blocks "dgesdd" is its algorithm step by step (dgebrd, dbdsdc, dormbr) */
    double recon_error;    /* ||X - U S Vt||_F / ||X||_F (0 if X = 0; values: 0, not measured), measured on the small factor through
                              the orthogonal Q of X = Q R: ||R - U_R S Vt||_F, or for tall blocks solved by
                              dbdsdc on the bidiagonal B of R^T, ||B V_B - U_B S||_F */
    double orth_error;     /* max |(V^T V - I)_ij| over the r right vectors (values: 0, none held) */
    double total_ss;       /* ||X||_F^2 = sum s^2 */
    double seconds;        /* wall time of the decomposition */
    char blas_core[32];    /* the OpenBLAS core it ran on (es_blas_core_name) */
    unsigned threads;      /* the threads it was given when it started (es_blas_job_threads): its parallel
                              passes ran on that many, its other BLAS calls on OpenBLAS's count */
    char *key;             /* cache key (matrix id @ sha | rows | centring | method) */
    const char *method;    /* "exact", "values" or "topk" (static string) */
    es_certificate cert;   /* top-k: its certificate; exact: zeros, passed */
    const char *eigensolver; /* top-k: how the Gram matrix's top eigenpairs were found, "subspace" (iteration)
                              or "dsyevr" (dense); NULL otherwise (static strings) */
    char note[200];        /* why an exact decomposition answers a top-k request, else "" */
    /* private: use es_svd_left for the left vectors */
    char *identity;        /* es_matrix_identity of the source (not kept: the caller passes it) */
    struct es_svd_left_block *left; /* the left vectors formed so far (newest first), NULL if none */
    /* n >= d: what forms U_R, the left vectors of R (U = Q U_R), on demand: U_R = P_B V_B, P_B the
     * reflectors of the bidiagonalisation of R^T (brd r x r column-major, brd_tau r, from dgebrd) and
     * V_B the bidiagonal's right vectors (vb: V_B(i, j) at vb[i * r + j]); brd NULL (dgesvd fallback):
     * vb holds U_R itself in the same layout */
    double *brd, *brd_tau, *vb;
    double *xv;            /* top-k: X V (n x r row-major), known from its Rayleigh-Ritz step (signs as vt),
                              so its PCA coordinates need no pass over X; NULL otherwise */
    double *scores;        /* tall exact: X V_c for the first c = min(r, 64) components (n x c row-major),
                              formed by the first projection that needs at most c and kept, so later PCA
                              replies copy it; NULL until then (es_svd_project) */
    char *scores_path;     /* where the kept scores are written when formed and read back before they are formed
                              again (cache_dir/HASH.scores beside the decomposition's file); NULL: memory only */
    bool scores_read;      /* the kept scores came from scores_path, not from a pass over the items */
    bool left_transient;   /* kept in parts by the cache (too large with its left vectors): es_svd_left_for
                              forms left vectors per call instead of keeping them, es_svd_bytes charges none */
    pthread_mutex_t left_lock;
    int refs;
} es_svd;

/* Compute (uncached). dgesdd first, dgesvd if dgesdd does not converge;
 * ES_E_NUMERIC if both fail or the input holds non-finite values; ES_E_PARAM
 * (param "rows") on an empty or out-of-range selection, ES_E_LIMIT (param "rows")
 * beyond LAPACK's int dimensions, ES_E_NOMEM if buffers cannot be allocated. */
int es_svd_compute(const es_matrix *m, const size_t *idx, size_t n, es_centering c,
                   es_svd **out, es_err *err);
/* The singular values alone (method "values"): the same QR as es_svd_compute
 * (the TSQR of a tall block, the QR of X^T for a wide one), then the values of
 * R by dgesdd jobz 'N' (dgesvd if it does not converge), or for a nearly
 * square block (longer side under 1.4 x the shorter) the values of the centred
 * block itself, no QR (faster there, see svd.c); s, total_ss and the
 * mean, but no vectors (vt, the left vectors and V_B are NULL; recon_error and
 * orth_error are 0, not measured). Fails as es_svd_compute. */
int es_svd_values(const es_matrix *m, const size_t *idx, size_t n, es_centering c, es_svd **out, es_err *err);
/* 0 when s holds singular vectors; ES_E_PARAM naming "method" ("method=values
 * gives singular values only; <what> needs singular vectors") when it holds
 * the values alone. Every function below that reads vectors calls it. */
int es_svd_need_vectors(const es_svd *s, const char *what, es_err *err);
/* Its message, a format taking what needs the vectors (also the HTTP gate's). */
#define ES_VALUES_ONLY "method=values gives singular values only; %s needs singular vectors"
/* At least the first k (1 <= k <= r) left vectors: left vector j at item i is
 * u[i * *ld + j]. Owned by s and valid while s is; thread-safe. Formed on the
 * first call that needs them and kept: for tall blocks X V_k S_k^-1 (4 n d k
 * flops), certified by measuring ||X^T u_j - s_j v_j|| / s_j <= 1e-12; columns
 * it cannot certify (small s_j) come from the QR redone with its reflectors
 * kept (one n x d copy, about the cost of the decomposition). NULL with
 * m must be the matrix s was computed from. NULL with ES_E_NOMEM or ES_E_NUMERIC
 * (LAPACK) on failure, ES_E_PARAM "method" for a values-only s (es_svd_need_vectors),
 * ES_E_PARAM "k" unless 1 <= k <= r, ES_E_PARAM (param "")
 * when they must be formed and m has another identity. */
const double *es_svd_left(const es_svd *s, const es_matrix *m, size_t k, size_t *ld, es_err *err);
/* es_svd_left for an analysis that reads the left vectors and lets go: the
 * same, except for a decomposition kept in parts (left_transient) that does
 * not hold k columns: then they are formed for this call alone into *owned
 * (the caller frees it after use), never kept. *owned is NULL otherwise.
 * Fails as es_svd_left. */
const double *es_svd_left_for(const es_svd *s, const es_matrix *m, size_t k, size_t *ld, double **owned,
                              es_err *err);
/* out (n x k row-major, caller-allocated) = X V_k: the coordinates U_k S_k of the
 * centred items on the first k right vectors. Taken from what s holds when it
 * can (top-k's X V; a tall exact block's kept scores, formed once for
 * min(r, 64) columns by the first request of k <= 64; never U_k S_k, whose bits
 * would depend on whether left vectors were formed first), else computed from m (the
 * matrix s was computed from) a block of items at a time. ES_E_PARAM "method" for a
 * values-only s, ES_E_PARAM "k" unless 1 <= k <= r,
 * ES_E_PARAM (param "") when m has another identity. */
int es_svd_project(const es_svd *s, const es_matrix *m, size_t k, double *out, es_err *err);
/* The top k singular triplets (1 <= k, k < min(n, d), n >= d), certified:
 * Gram matrix X^T X (dsyrk) and its top k + 1 eigenpairs (subspace iteration
 * from ES_TOPK_ITER_MIN_D coordinates, else or as its fallback dsyevr), one
 * Rayleigh-Ritz step (Y = X V, Q = qr(Y), SVD of Q^T X), then the residuals
 * X V - U S and X^T U - V S measured. The result always carries its certificate
 * (cert.passed says whether it met `tol`); the left vectors are formed. Fails as
 * es_svd_compute, ES_E_PARAM "k" for k outside [1, min(n, d)) or a wide block. */
int es_svd_topk(const es_matrix *m, const size_t *idx, size_t n, es_centering c, size_t k, double tol,
                es_svd **out, es_err *err);
/* The rule for method auto (documented in docs/algorithms.md): top-k when the block is
 * tall (n >= d), has at least ES_TOPK_MIN_ELEMENTS entries and k <= min(n, d) / 8;
 * exact otherwise. Never fails; returns exact or topk. */
#define ES_TOPK_MIN_ELEMENTS ((size_t)4 << 20)
es_method es_method_resolve(es_method asked, size_t n, size_t d, size_t k);
/* Reference counting (see core.h); both accept NULL and never fail. */
es_svd *es_svd_retain(es_svd *s);
void es_svd_release(es_svd *s);
/* Bytes held by a decomposition once its left vectors and (tall exact) its
 * kept scores are formed (struct, arrays, key), for the cache budget; the left
 * vectors are not counted for one kept in parts (left_transient). Never fails. */
size_t es_svd_bytes(const es_svd *s);
/* Bytes it would hold in parts: es_svd_bytes without left vectors not yet
 * formed. Never fails. */
size_t es_svd_parts_bytes(const es_svd *s);
/* For tests only: while on != 0, es_svd_compute skips dgesdd (for tall blocks
 * its dgebrd/dbdsdc steps) and runs the dgesvd fallback, as if it had not
 * converged (process-wide, thread-safe). */
void es_svd_force_fallback(int on);
/* For tests only: top-k's Gram eigenpairs by subspace iteration from min_d
 * coordinates on (ES_TOPK_ITER_MIN_D), within max_iterations (ES_TOPK_ITER_MAX)
 * before it falls back to dsyevr; 0 restores each default (process-wide). */
#define ES_TOPK_ITER_MIN_D 1536
#define ES_TOPK_ITER_MAX 200
void es_topk_iteration_set(size_t min_d, size_t max_iterations);

/* ---------------------------------------------------------------- cache */

/* Thread-safe LRU cache of decompositions keyed by (matrix id + sha256, resolved
 * rows, centring), bounded in bytes, single flight: concurrent requests for one
 * key wait for the one computation. A tall exact decomposition too large for the
 * budget with its left vectors (charged from the start) but not without them is
 * kept in parts: sigma, V, the small factors, the mean and the kept PCA
 * coordinates, its left vectors formed per request that needs them
 * (es_svd_left_for) and never kept. An entry larger than the budget even so is
 * computed and returned but not kept (refused). */
typedef struct es_cache es_cache;

/* Never fails. es_cache_free accepts NULL; no request may be in flight, and
 * decompositions still held by callers stay valid. */
es_cache *es_cache_new(size_t max_bytes);
void es_cache_free(es_cache *c);
/* The exact decomposition: a retained one in *out (release it). Fails as
 * es_svd_compute; waiters of a failed computation get the same error. */
int es_cache_svd(es_cache *c, const es_matrix *m, const size_t *idx, size_t n,
                 es_centering centring, es_svd **out, es_err *err);

/* As es_cache_svd for a request that uses the first k triplets (0: all of
 * them), by method `asked` (auto resolves with es_method_resolve; k == 0 is
 * exact unless values are asked for, keyed "...|values"). A top-k request computes the top K = k rounded up to a multiple
 * of ES_TOPK_STEP (below d) so nearby k share one entry, keyed "...|topk:K";
 * when its certificate misses ES_TOPK_TOLERANCE, or the block's rank is below
 * K, the exact decomposition answers instead, with svd->note saying why. auto
 * also takes an exact decomposition already in the cache. Fails as es_svd_compute. */
#define ES_TOPK_STEP 16
#define ES_TOPK_TOLERANCE 1e-10
int es_cache_decompose(es_cache *c, const es_matrix *m, const size_t *idx, size_t n, es_centering centring,
                       es_method asked, size_t k, es_svd **out, es_err *err);
/* The K a top-k request of k computes (k rounded up to a multiple of ES_TOPK_STEP, below d). Never fails. */
size_t es_topk_size(size_t k, size_t d);
/* Told of each decomposition a cache computes itself (not read from its directory, not waited for, not a
 * top-k the exact decomposition answered): the method resolved, the block's shape, K for top-k (else 0)
 * and the wall seconds of the computation. Called on the computing thread; must not fail. */
typedef void (*es_cache_observer)(es_method method, size_t n, size_t d, size_t k, double seconds);
/* Set c's observer (NULL: none) before computations start. Never fails. */
void es_cache_set_observer(es_cache *c, es_cache_observer fn);
/* Would es_cache_decompose with these arguments find its decomposition
 * computed in memory (nothing computed, the disk not read)? Never fails. */
bool es_cache_has(es_cache *c, const es_matrix *m, const size_t *idx, size_t n, es_centering centring,
                  es_method asked, size_t k);

/* Keep decompositions on disk in dir (created if missing; NULL: memory only):
 * every computed decomposition is written there atomically as a
 * content-addressed file (sha256 of the format version and its key, which
 * names the matrix identity with its data's sha256, the rows, the centring and
 * the method), and a miss reads the file before computing. A corrupt,
 * truncated or foreign file is logged, deleted and recomputed, never served.
 * Processes sharing dir compute each key once: the computing one holds an
 * exclusive flock on "<hash>.lock" beside the file (removed when done), the
 * others wait for it and read the file; a holder that dies releases it.
 * Call before the first request. ES_E_IO naming "cache_dir" if dir cannot be
 * created or written. */
int es_cache_set_dir(es_cache *c, const char *dir, es_err *err);

/* Upper bounds (seconds) of the decomposition-duration histogram buckets: from
 * 10 ms (a small warm matrix) to 4 hours, so that the jobs a configuration
 * allows (a Llama-sized decomposition takes tens of minutes on a small machine;
 * a finished job is kept limits.job_ttl_s, 600 s by default) land in a finite
 * bucket rather than +Inf. */
#define ES_SVD_BUCKETS 16
extern const double es_svd_bucket_le[ES_SVD_BUCKETS];

/* A decomposition being computed (GET /v1/jobs lists them as "jobs", /metrics). LAPACK reports no
 * progress, so there is no fraction done; elapsed against the duration
 * histogram is the estimate an operator has. */
typedef struct es_computing {
    const char *key;          /* the cache key */
    const char *method;       /* "exact", "values" or "topk" (static) */
    size_t n, d, k;           /* block size; k: triplets of a top-k decomposition, 0 for exact */
    double started;           /* es_now() at the start */
    double started_unix;      /* wall clock at the start, seconds since the epoch */
    double elapsed;           /* seconds running when the snapshot was taken */
} es_computing;
/* Copies of the running decompositions, oldest first, in *out (free with
 * es_computing_free); returns how many. Never fails. */
size_t es_cache_computing(es_cache *c, es_computing **out);
void es_computing_free(es_computing *list, size_t n); /* NULL is a no-op */

typedef struct es_cache_stats {
    unsigned long hits, misses, computations, evictions, waits; /* misses = computations + failed + disk_loads */
    unsigned long failed; /* computations that stopped short: an error, a cancellation or a deadline */
    unsigned long disk_loads, disk_writes, disk_rejected; /* with a cache_dir: misses answered from a file,
                                                             files written, corrupt files deleted */
    unsigned long disk_waits; /* disk loads of a key another process sharing the cache_dir was computing:
                                 waited for (its lock file), then read */
    unsigned long parts;      /* decompositions kept in parts (too large with their left vectors) */
    unsigned long refused;    /* decompositions too large for the budget even in parts: returned, not kept */
    size_t bytes, entries, max_bytes;
    unsigned long svd_le[ES_SVD_BUCKETS]; /* computations that took <= es_svd_bucket_le[i] s (cumulative) */
    double svd_seconds;                   /* their total duration */
} es_cache_stats;
/* A consistent snapshot of the counters. Never fails. */
void es_cache_get_stats(es_cache *c, es_cache_stats *out);

#endif
