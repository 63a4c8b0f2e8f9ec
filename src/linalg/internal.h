/* Pieces shared by the exact (svd.c) and top-k (topk.c) decompositions; not
 * part of the public API. Failure rules as in core.h. */
#ifndef EMBEDSCOPE_LINALG_INTERNAL_H
#define EMBEDSCOPE_LINALG_INTERNAL_H

#include <lapacke.h>
#include <stdbool.h>

#include "embedscope/linalg.h"

/* Items per block when scanning, projecting or folding into the TSQR: a
 * TSQR_BLOCK x d block is a few MiB, large enough for dtpqrt to run at level-3
 * speed (measured: 1024 rows beat 2048 and the whole-block dgeqrf at d = 768). */
#define TSQR_BLOCK 1024
/* Most threads of one parallel loop (the TSQR's chunks, a pass's parts, a merge team). */
#define PAR_MAX_THREADS 256
/* Transposition tile (TILE x TILE doubles of each side stay in L1). */
#define TILE 32

/* Shared by svd.c and pass.c (see svd.c): the first non-finite of n doubles
 * (n if none); ES_E_NUMERIC naming the item and coordinate at row-major position
 * bad of s's block and `stage` (0 when bad == n d); the message tail of a value
 * that is non-finite only after centring; the selected items i0 .. i0 + b
 * centred as s says into blk (b x d, the caller's); the items per TSQR chunk
 * (fixed by d); the first item of part c of n items in `parts` parts of whole
 * TSQR_BLOCK blocks (fixed by n and parts). Never fail, but the report. */
size_t es_first_nonfinite(const double *x, size_t n);
int es_svd_report_nonfinite(const es_svd *s, const es_matrix *m, size_t bad, const char *stage, es_err *err);
const char *es_svd_overflow_stage(es_centering c);
void es_svd_centred_items_into(const es_svd *s, const es_matrix *m, size_t i0, size_t b, double *blk);
size_t es_svd_chunk_items(size_t d);
size_t es_svd_part_start(size_t n, size_t parts, size_t c);

/* Left vectors formed for the first `cols` columns (n x cols row-major). Blocks
 * are only added, never freed before the decomposition, because readers may
 * still hold an older one. */
struct es_svd_left_block {
    double *u;
    size_t cols;
    struct es_svd_left_block *older;
};

/* What es_svd_alloc allocates besides the rows, s and (columns centring) the mean. */
typedef enum es_svd_parts {
    ES_PARTS_TALL,   /* vt, V_B and the bidiagonal reflectors (U_R formed on demand): tall exact blocks */
    ES_PARTS_LEFT,   /* vt and the n x r left vectors now: wide blocks, top-k */
    ES_PARTS_VALUES  /* nothing more: singular values only (method values) */
} es_svd_parts;
/* A new es_svd for r triplets of an n x d block of m (its identity kept, not m), method
 * "exact" ("values" for ES_PARTS_VALUES), one reference; the rows are copied.
 * NULL if a request-sized array cannot be allocated. */
es_svd *es_svd_alloc(const es_matrix *m, const size_t *idx, size_t n, size_t d, es_centering c, size_t r,
                     es_svd_parts parts);
/* Free s and everything it holds whatever its reference count (NULL-safe arrays). */
void es_svd_free(es_svd *s);
/* Block by block over the selected items of m (s's source), never a full copy:
 * es_svd_scan checks the data (ES_E_NUMERIC naming the first non-finite item and
 * coordinate) and sets s->mean for columns centring; then the centred items
 * i0 .. i0 + b, row-major (es_svd_centred_items, caller frees; aborts on OOM);
 * out (n x k) = X A^T for A k x d row-major (es_svd_times); out (k x d) = U^T X
 * for U n x k row-major (es_svd_times_t); X^T X (row-major d x d, both
 * triangles) and ||X||_F^2 (es_svd_gram, ES_E_NUMERIC when centring
 * overflowed). The passes stop between blocks when the computation must
 * (es_progress_check: ES_E_CANCELLED, ES_E_SHUTDOWN); es_svd_centred_items
 * never fails. */
int es_svd_scan(es_svd *s, const es_matrix *m, es_err *err);
double *es_svd_centred_items(const es_svd *s, const es_matrix *m, size_t i0, size_t b);
int es_svd_times(const es_svd *s, const es_matrix *m, const double *a, size_t k, double *out, es_err *err);
int es_svd_times_t(const es_svd *s, const es_matrix *m, const double *u, size_t k, double *out, es_err *err);
int es_svd_gram(const es_svd *s, const es_matrix *m, double *g, double *ss, es_err *err);
/* The sign convention of linalg.h on vt and the left factor. Never fails. */
void es_svd_fix_signs(es_svd *s);
/* orth_error = max |V^T V - I| over the r right vectors. Never fails. */
void es_svd_measure_orthogonality(es_svd *s);
/* ES_E_NUMERIC if s, vt or the left factor hold a non-finite value. */
int es_svd_check_output(const es_svd *s, const es_matrix *m, es_err *err);
/* True when the block is decomposed through the transposed (tall) route. */
static inline bool es_svd_is_tall(const es_svd *s)
{
    return s->n >= s->d;
}
/* The small SVD (small.c), for svd.c's compute: a tall block's SVD of R^T (R
 * d x d in rmat, column-major) into s, dgesvd when dbdsdc does not converge or
 * the test hook says so (es_svd_decompose_tall); the singular values only of the
 * small factor of the QR output a, leading dimension lda
 * (es_svd_values_of_factor; fails as es_svd_small); whether a values-only block
 * is nearly square enough to skip the QR (es_svd_values_direct); a wide block's
 * QR of X^T in a (d x n, ld d, overwritten), then the SVD of R, its values only
 * when s holds no vt (es_svd_wide_by_qr; fails as es_svd_compute). */
int es_svd_decompose_tall(es_svd *s, const double *rmat, es_err *err);
int es_svd_values_of_factor(es_svd *s, const double *a, size_t lda, es_err *err);
bool es_svd_values_direct(const es_svd *s);
int es_svd_wide_by_qr(es_svd *s, double *a, es_err *err);
/* SVD of the rows x cols column-major b = L diag(sv) Rt (L rows x r, Rt r x
 * cols column-major, r = min(rows, cols); both NULL: the values only): dgesdd,
 * then dgesvd when it does not converge (or es_svd_force_fallback says so); b
 * is kept, the solver's name goes to *solver. ES_E_NUMERIC when both fail,
 * ES_E_NOMEM for work space. */
int es_svd_small(const double *b, size_t rows, size_t cols, double *sv, double *left, double *right_t,
                 const char **solver, es_err *err);
/* Sum of squares of len doubles (BLAS, chunked). Never fails. */
double es_sum_squares(const double *x, size_t len);
/* A negative LAPACKE status as an error: ES_E_NOMEM for work space, else
 * ES_E_NUMERIC naming the routine. Always returns -1. */
int es_lapack_fail(es_err *err, const char *routine, lapack_int info);

/* ---------------------------------------------------------------- on disk (persist.c) */

/* "<dir>/<sha256 of the format version and key>.svd". Caller frees. Never fails. */
char *es_svd_file_name(const char *dir, const char *key);
/* Write s (its key set) to path atomically: a temporary file beside it, fsync,
 * rename. ES_E_IO naming "cache_dir" on failure (nothing left behind). */
int es_svd_save(const es_svd *s, const char *path, es_err *err);
/* Read the decomposition of key (the selection idx[0..n) of m) from
 * path, checking its sha256 and that it was written for this key, matrix shape
 * and selection. 1 (nothing done) when there is no such file; ES_E_FORMAT
 * naming "cache_dir" and saying what is wrong for a corrupt, truncated or
 * foreign file; ES_E_IO if it cannot be read. */
int es_svd_load(const char *path, const es_matrix *m, const size_t *idx, size_t n, const char *key, es_svd **out,
                es_err *err);

/* ---------------------------------------------------------------- kept PCA scores on disk (scores.c) */

/* The file of a decomposition's kept PCA scores beside its file (svd_path,
 * es_svd_file_name): the same name with ".scores". Caller frees. Never fails. */
char *es_svd_scores_file_name(const char *svd_path);
/* Write the kept scores x (n x cols row-major) of s to s->scores_path: a
 * temporary file renamed into place, with a sha256 over everything before it
 * and the digest of s's key and right vectors, so scores are read back only
 * for these very vectors (a decomposition computed again may differ in its
 * signs). A failure is logged: the scores stay in memory. */
void es_svd_scores_save(const es_svd *s, const double *x, size_t cols);
/* Read the kept scores of s (n x cols) from s->scores_path into x: 0; 1 when
 * there is no file; -1 when the file is corrupt, truncated or written for
 * other vectors (logged and deleted). */
int es_svd_scores_load(const es_svd *s, size_t cols, double *x);

#endif
