/* Exact thin SVD of a selected, centred block of items, in double precision.
 *
 * LAPACK is column-major and our blocks are row-major n x d.
 *
 *  - tall (n >= d): X = Q R by a sequential TSQR: the centred items are read
 *    TSQR_BLOCK at a time, transposed into a column-major block, and folded
 *    into R (d x d) with dtpqrt, the QR of [R; block] that exploits R's
 *    triangle; the flops are dgeqrf's (2 n d^2) but only one block is ever in
 *    memory, so the peak is the source plus a few MiB, not a second n x d copy.
 *    Blocks of two chunks or more (es_svd_chunk_items) run one such TSQR per chunk on
 *    parallel threads and combine the chunks' R factors in a fixed tree
 *    (tsqr_parallel): the same bits with any thread count.
 *    The SVD of R^T = V S U_R^T is dgesdd's algorithm run step by step so that
 *    only what the analyses use is formed: bidiagonalisation (dgebrd,
 *    R^T = Q_B B P_B^T), the bidiagonal SVD by divide and conquer (dbdsdc,
 *    B = U_B S V_B^T) and V = Q_B U_B (dormbr). U_R = P_B V_B is formed only
 *    when left vectors are asked for, from the kept reflectors and V_B. PCA
 *    coordinates are X V (es_svd_project); spectrum, capture, overlap use s and V.
 *  - wide (n < d): the row-major block is already column-major X^T (d x n);
 *    X^T = Q R with R n x n, R = U_R S W^T by dgesdd, so U = W and V = Q U_R,
 *    both formed at once (n is small here).
 *
 * Values only (es_svd_values, method "values"): the same QR of either shape,
 * then the values of the small factor by dgesdd jobz 'N', or without a QR for
 * a nearly square block (es_svd_values_direct); no vectors are
 * formed or held, and every function here that reads them refuses (ES_E_PARAM
 * naming "method", es_svd_need_vectors).
 *
 * Left vectors of a tall block (es_svd_left): U_k = X V_k S_k^-1, one pass over
 * the items, certified by a second pass that measures ||X^T u_j - s_j v_j|| / s_j
 * (the residual is eps (s_0 / s_j)^2, so it certifies the leading columns and
 * fails for small s_j); the columns it does not certify come from the QR route
 * instead: the TSQR is redone keeping its reflectors and U = Q [U_R; 0].
 *
 * reconstruction_error is measured on the small factor: tall blocks on the
 * bidiagonal, ||B V_B - U_B S||_F / ||X||_F (O(d^2), the reductions to B and the
 * back-transformations are orthogonal and backward stable), wide blocks and the
 * dgesvd fallback on R, ||R - U_R S W^T||_F / ||X||_F.
 *
 * This file reads the items (scans, the TSQR, left vectors); the parallel passes
 * (X A^T, U^T X, the Gram matrix) are pass.c's; the SVD of the small factor, its
 * fallback, residuals and signs are small.c's. */
#include "linalg/internal.h"

#include "embedscope/blas.h"

#include <cblas.h>
#include <pthread.h>
#include <lapacke.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TSQR_NB 32
/* dtpqrt's block size where no reflectors are kept (the R of the exact and
 * values-only paths: the chunks' folds and the tree's merges): measured on
 * one core at d = 4096, a 1024-item fold took 2.11 CPU s with 32, 1.81 with
 * 64, 1.59 with 128 (1.58 with 256), a merge of two triangles 2.67 against
 * 1.91 s with 128: wider panels put more of the flops in dgemm. */
#define FOLD_NB 128
/* Left vectors are formed for at least this many columns at a time, so the
 * usual small-k requests share one formation. */
#define LEFT_MIN_COLS 64
/* Columns of X V a tall exact block keeps for PCA replies (es_svd_project): a
 * reply of k <= this many copies them instead of a pass over the items. */
#define SCORES_COLS 64
/* Largest ||X^T u_j - s_j v_j|| / s_j accepted for left vectors formed as
 * X v_j / s_j; their pairwise inner products are then within this of 0. */
#define LEFT_TOL 1e-12


/* Free an es_svd and all its arrays (any of which may be NULL). */
void es_svd_free(es_svd *s)
{
    free(s->rows);
    free(s->s);
    for (struct es_svd_left_block *b = s->left, *older; b; b = older) {
        older = b->older;
        free(b->u);
        free(b);
    }
    free(s->brd);
    free(s->brd_tau);
    free(s->vb);
    free(s->xv);
    free(s->scores);
    free(s->scores_path);
    free(s->vt);
    free(s->mean);
    free(s->key);
    free(s->identity);
    pthread_mutex_destroy(&s->left_lock);
    free(s);
}


/* A new es_svd for r triplets of an n x d block of m (its identity kept, not m), one reference,
 * method "exact" ("values" for ES_PARTS_VALUES). ES_PARTS_LEFT: the left vectors get
 * their array now (wide blocks, top-k); ES_PARTS_TALL: V_B's and the bidiagonal
 * reflectors' (brd, brd_tau; free them for the dgesvd fallback); ES_PARTS_VALUES:
 * neither, nor vt. NULL if a request-sized array cannot be allocated. */
es_svd *es_svd_alloc(const es_matrix *m, const size_t *idx, size_t n, size_t d, es_centering c, size_t r,
                     es_svd_parts parts)
{
    es_svd *s = es_calloc(1, sizeof *s);
    s->n = n;
    s->d = d;
    s->r = r;
    s->centering = c;
    s->method = parts == ES_PARTS_VALUES ? "values" : "exact";
    s->refs = 1;
    s->threads = es_blas_job_threads();
    snprintf(s->blas_core, sizeof s->blas_core, "%s", es_blas_core_name());
    s->identity = es_matrix_identity(m);
    pthread_mutex_init(&s->left_lock, NULL);
    s->rows = es_try_alloc(n, sizeof *s->rows);
    s->s = es_try_alloc(r, sizeof *s->s);
    bool parts_ok = true;
    if (parts != ES_PARTS_VALUES) {
        s->vt = es_try_alloc(r, d * sizeof *s->vt);
        parts_ok = s->vt != NULL;
    }
    if (parts == ES_PARTS_TALL) {
        s->vb = es_try_alloc(r * r, sizeof *s->vb);
        s->brd = es_try_alloc(r * r, sizeof *s->brd);
        s->brd_tau = es_try_alloc(r, sizeof *s->brd_tau);
        parts_ok = parts_ok && s->vb && s->brd && s->brd_tau;
    } else if (parts == ES_PARTS_LEFT) {
        s->left = es_calloc(1, sizeof *s->left);
        s->left->cols = r;
        s->left->u = es_try_alloc(n, r * sizeof *s->left->u);
        parts_ok = parts_ok && s->left->u;
    }
    s->mean = c == ES_CENTER_COLUMNS ? es_try_alloc(d, sizeof *s->mean) : NULL;
    if (!s->rows || !s->s || !parts_ok || (c == ES_CENTER_COLUMNS && !s->mean)) {
        es_svd_free(s);
        return NULL;
    }
    memcpy(s->rows, idx, n * sizeof *idx);
    return s;
}


/* ---------------------------------------------------------------- the block */

/* The selected items i0 .. i0 + b, row-major b x d, centred as the
 * decomposition says (columns: minus s->mean, which must be set). Never fails
 * (aborts on OOM like es_malloc). */
double *es_svd_centred_items(const es_svd *s, const es_matrix *m, size_t i0, size_t b)
{
    double *blk = es_malloc(b * s->d * sizeof *blk);
    es_svd_centred_items_into(s, m, i0, b, blk);
    return blk;
}

/* The scan's columns per task: at least SCAN_MIN_COLS, so that each item's
 * slice is a few cache lines. */
#define SCAN_MIN_COLS 64

/* The scan split by columns: task t reads coordinates t * cols .. of every
 * item, a block of items at a time, and sums them into its own part of the
 * mean in item order (the very additions of one sequential loop); bad[t] is
 * its first non-finite value in row-major order (n * d if none). */
typedef struct scan_par {
    es_svd *s;
    const es_matrix *m;
    size_t cols;
    size_t *bad;
    int *rc;
    es_err *errs;
    es_progress *progress;
} scan_par;

static void scan_task(void *arg, size_t task)
{
    scan_par *p = arg;
    es_progress_attach(p->progress); /* this task's thread reports to the computation */
    size_t n = p->s->n, d = p->s->d, j0 = task * p->cols, c = d - j0 < p->cols ? d - j0 : p->cols;
    double *buf = es_malloc(TSQR_BLOCK * c * sizeof *buf), *sum = p->s->mean ? p->s->mean + j0 : NULL;
    p->bad[task] = n * d;
    for (size_t i0 = 0; i0 < n && p->bad[task] == n * d; i0 += TSQR_BLOCK) {
        size_t b = n - i0 < TSQR_BLOCK ? n - i0 : TSQR_BLOCK;
        if (es_progress_check(&p->errs[task]) < 0) { /* a job cancelled or past its deadline stops here */
            p->rc[task] = -1;
            break;
        }
        es_progress_step();
        es_matrix_items_columns(p->m, p->s->rows + i0, b, j0, c, buf, b);
        for (size_t j = 0; j < c; j++)
            for (size_t r = 0; r < b; r++) {
                double v = buf[j * b + r];
                if (!isfinite(v)) {
                    size_t at = (i0 + r) * d + j0 + j;
                    p->bad[task] = at < p->bad[task] ? at : p->bad[task];
                } else if (sum)
                    sum[j] += v;
            }
    }
    free(buf);
}

/* First pass over the selection: ES_E_NUMERIC on the first non-finite value
 * (row-major order); for columns centring the mean row into s->mean, summed in
 * item order as es_center does, so the centred values are es_center's. Split
 * by columns over the computation's share of the cores (scan_task): the same
 * bits with any thread count. */
int es_svd_scan(es_svd *s, const es_matrix *m, es_err *err)
{
    size_t n = s->n, d = s->d, threads = es_blas_job_threads(), most = d / SCAN_MIN_COLS;
    size_t tasks = threads < most ? threads : most > 0 ? most : 1;
    scan_par p = {.s = s, .m = m, .cols = (d + tasks - 1) / tasks, .progress = es_progress_current()};
    tasks = (d + p.cols - 1) / p.cols;
    p.bad = es_calloc(tasks, sizeof *p.bad);
    p.rc = es_calloc(tasks, sizeof *p.rc);
    p.errs = es_calloc(tasks, sizeof *p.errs);
    if (s->mean)
        memset(s->mean, 0, d * sizeof *s->mean);
    es_progress_begin("scan", tasks * ((n + TSQR_BLOCK - 1) / TSQR_BLOCK));
    es_par_for(tasks, threads, scan_task, &p);
    size_t bad = n * d;
    int rc = 0;
    for (size_t t = 0; t < tasks; t++) {
        if (p.rc[t] < 0 && rc == 0) {
            *err = p.errs[t];
            rc = -1;
        }
        bad = p.bad[t] < bad ? p.bad[t] : bad;
    }
    free(p.bad);
    free(p.rc);
    free(p.errs);
    if (rc == 0 && bad < n * d)
        return es_svd_report_nonfinite(s, m, bad, "in the data", err);
    if (rc == 0 && s->mean)
        for (size_t j = 0; j < d; j++)
            s->mean[j] /= (double)n;
    return rc;
}

/* The centred items i0 .. i0 + b as a column-major b x d array (ld b) in a:
 * centred (the arithmetic of es_center), checked and transposed in one pass a
 * tile at a time (blk: b x d scratch for the items as read); adds their
 * squares to *ss. ES_E_NUMERIC when centring
 * overflowed (the first such value in row-major order). */
static int centred_block_colmajor(const es_svd *s, const es_matrix *m, size_t i0, size_t b, double *a, double *blk,
                                  double *ss, es_err *err)
{
    size_t d = s->d, bad = b * d;
    double *shift = NULL, sum = 0;
    es_matrix_items_into(m, s->rows + i0, b, blk);
    if (s->centering == ES_CENTER_ROWS) { /* each item's own mean, as es_center computes it */
        shift = es_malloc(b * sizeof *shift);
        for (size_t i = 0; i < b; i++) {
            double row = 0;
            for (size_t k = 0; k < d; k++)
                row += blk[i * d + k];
            shift[i] = row / (double)d;
        }
    }
    for (size_t k0 = 0; k0 < d; k0 += TILE)
        for (size_t j0 = 0; j0 < b; j0 += TILE) {
            size_t k1 = k0 + TILE < d ? k0 + TILE : d, j1 = j0 + TILE < b ? j0 + TILE : b;
            for (size_t k = k0; k < k1; k++) {
                double mk = s->centering == ES_CENTER_COLUMNS ? s->mean[k] : 0;
                for (size_t i = j0; i < j1; i++) {
                    double v = blk[i * d + k] - (shift ? shift[i] : mk);
                    if (!isfinite(v) && i * d + k < bad)
                        bad = i * d + k;
                    sum += v * v;
                    a[k * b + i] = v;
                }
            }
        }
    free(shift);
    *ss += sum;
    return es_svd_report_nonfinite(s, m, bad == b * d ? s->n * d : i0 * d + bad, es_svd_overflow_stage(s->centering), err);
}

/* The centred block row-major n x d into a (wide blocks).
 * Fails with ES_E_NUMERIC on non-finite data or overflow in the means. */
static int load_rowmajor(const es_svd *s, const es_matrix *m, double *a, double *mean_out, es_err *err)
{
    size_t n = s->n, d = s->d;
    for (size_t i0 = 0; i0 < n; i0 += TSQR_BLOCK) {
        size_t b = n - i0 < TSQR_BLOCK ? n - i0 : TSQR_BLOCK;
        double *blk = es_matrix_items_copy(m, s->rows + i0, b);
        size_t bad = es_first_nonfinite(blk, b * d);
        memcpy(a + i0 * d, blk, b * d * sizeof *a);
        free(blk);
        if (bad < b * d)
            return es_svd_report_nonfinite(s, m, i0 * d + bad, "in the data", err);
    }
    if (s->centering == ES_CENTER_NONE)
        return 0;
    es_center(a, n, d, s->centering, mean_out);
    return es_svd_report_nonfinite(s, m, es_first_nonfinite(a, n * d), es_svd_overflow_stage(s->centering), err);
}

/* The TSQR's blocks of items: the first holds max(TSQR_BLOCK, d) items (at
 * least d: n >= d), each later one TSQR_BLOCK. Block j starts at item
 * block_start(n, d, j) and there are tsqr_blocks(n, d) of them. Never fail. */
static size_t first_block(size_t n, size_t d)
{
    size_t b = d > TSQR_BLOCK ? d : TSQR_BLOCK;
    return b < n ? b : n;
}

static size_t tsqr_blocks(size_t n, size_t d)
{
    size_t b1 = first_block(n, d);
    return 1 + (n - b1 + TSQR_BLOCK - 1) / TSQR_BLOCK;
}

static size_t block_start(size_t n, size_t d, size_t j)
{
    return j == 0 ? 0 : first_block(n, d) + (j - 1) * TSQR_BLOCK;
}

/* Sequential TSQR of the items lo .. hi of the tall centred block (see the
 * top; es_svd_scan has checked the data and set the mean; hi - lo >= d):
 * R (d x d, upper triangle, column-major) and the items' sum of squares in
 * *ss. The first block is factored by dgeqrf (faster than dtpqrt on a zero R),
 * each later one folded in by dtpqrt; blocks as tsqr_blocks and block_start
 * say for hi - lo items, from lo. With q non-NULL (lo 0, hi n only) the
 * blocks' reflectors are kept there (block at item i0 at q + i0 * d,
 * column-major with ld its height) and, per block j, TSQR_NB x d doubles at
 * t + j * TSQR_NB * d: the first block's dgeqrf scalars, then the dtpqrt T
 * factors, for apply_tsqr_q. ES_E_NUMERIC on overflow in centring,
 * ES_E_NOMEM/ES_E_NUMERIC from LAPACK. */
static int tsqr_rows(const es_svd *s, const es_matrix *m, size_t lo, size_t hi, double *r, double *q, double *t,
                     double *ss, es_err *err)
{
    size_t n = hi - lo, d = s->d, nb = q ? (d < TSQR_NB ? d : TSQR_NB) : d < FOLD_NB ? d : FOLD_NB;
    size_t b1 = first_block(n, d);
    double *own = q ? NULL : es_try_alloc(b1, d * sizeof *own);
    double *own_t = q ? NULL : es_malloc(nb * d * sizeof *own_t), *rows = es_try_alloc(b1, d * sizeof *rows);
    int rc = (q || own) && rows ? 0
                                : es_fail(err, ES_E_NOMEM, "rows", "%s: cannot allocate a %zu x %zu block", m->id, b1, d);
    memset(r, 0, d * d * sizeof *r);
    *ss = 0;
    for (size_t j = 0; rc == 0 && j < tsqr_blocks(n, d); j++) {
        size_t i0 = block_start(n, d, j), b = j == 0 ? b1 : (n - i0 < TSQR_BLOCK ? n - i0 : TSQR_BLOCK);
        double *a = q ? q + i0 * d : own, *tb = q ? t + j * nb * d : own_t;
        rc = es_progress_check(err); /* a job cancelled or past its deadline stops here */
        if (rc == 0)
            rc = centred_block_colmajor(s, m, lo + i0, b, a, rows, ss, err);
        es_progress_step();
        if (rc == 0 && j == 0) {
            lapack_int info = LAPACKE_dgeqrf(LAPACK_COL_MAJOR, (lapack_int)b, (lapack_int)d, a, (lapack_int)b, tb);
            rc = info == 0 ? 0 : es_lapack_fail(err, "dgeqrf", info);
            for (size_t k = 0; rc == 0 && k < d; k++) /* b >= d: R is the upper triangle */
                memcpy(r + k * d, a + k * b, (k + 1) * sizeof *r);
        } else if (rc == 0) {
            lapack_int info = LAPACKE_dtpqrt(LAPACK_COL_MAJOR, (lapack_int)b, (lapack_int)d, 0, (lapack_int)nb, r,
                                             (lapack_int)d, a, (lapack_int)b, tb, (lapack_int)nb);
            rc = info == 0 ? 0 : es_lapack_fail(err, "dtpqrt", info);
        }
    }
    free(own);
    free(own_t);
    free(rows);
    return rc;
}

/* ---------------------------------------------------------------- the parallel TSQR */

/* See linalg.h: tsqr's test for the parallel TSQR (blocks of two chunks or more). */
size_t es_tsqr_chunks(size_t n, size_t d) { return n >= 2 * es_svd_chunk_items(d) ? n / es_svd_chunk_items(d) : 1; }

/* The work of one parallel TSQR: chunk c covers items es_svd_part_start(n, chunks, c)
 * .. es_svd_part_start(n, chunks, c + 1); each gets its R (r + c * d * d) and sum of squares; then
 * pairs of R factors are combined, level by level (stride 1, 2, 4, ...: R_c
 * absorbs R_{c + stride}), into R_0. */
typedef struct par_tsqr {
    const es_svd *s;
    const es_matrix *m;
    size_t chunks, stride; /* stride: the tree level being merged (R_c absorbs R_{c + stride}) */
    double *r, *ss;
    int *rc;                    /* per chunk */
    es_err *errs;               /* per chunk */
    es_progress *progress;      /* the computation's tracker: every chunk's blocks count there */
} par_tsqr;

/* Task `task` of the chunks' stage: chunk `task`'s TSQR. */
static void par_tsqr_task(void *arg, size_t task)
{
    par_tsqr *p = arg;
    es_progress_attach(p->progress); /* this task's thread reports to the computation */
    size_t d = p->s->d, lo = es_svd_part_start(p->s->n, p->chunks, task), hi = es_svd_part_start(p->s->n, p->chunks, task + 1);
    p->rc[task] = tsqr_rows(p->s, p->m, lo, hi, p->r + task * d * d, NULL, NULL, &p->ss[task], &p->errs[task]);
}

/* ---------------------------------------------------------------- the tree's merges, in parallel */

/* A merge of two R factors is dtpqrt's loop (the QR of [R_c; R_{c+stride}],
 * both upper triangular, l = d) run here panel by panel: each panel of
 * MERGE_NB columns is factored by dtpqrt2, then its block reflector is applied
 * to the columns right of it by dtprfb, one call per MERGE_SLICE columns
 * (fixed column ranges: the same calls, so the same bits, whatever the thread
 * count). Every merge of a tree level runs at once on a team of threads that
 * share out the panels, then the slices, with a barrier after each: the
 * level's few 4096 x 4096 merges use every core, each BLAS call on one thread,
 * instead of one merge per thread (7 and 4 of 16 threads busy at 128256 x 4096)
 * or one merge at a time with OpenBLAS's threads (its panel serial). */
#define MERGE_NB 128
#define MERGE_SLICE 256

typedef struct merge_team {
    par_tsqr *p;
    size_t pairs, nb;
    double *t;            /* per merge: its panel's T factor, nb x nb */
    size_t next;          /* the current phase's next task, taken atomically */
    pthread_mutex_t lock; /* the barrier: */
    pthread_cond_t cond;
    size_t size, arrived, generation;
} merge_team;

/* The team's barrier; the last thread to arrive resets the task counter. */
static void team_wait(merge_team *t)
{
    pthread_mutex_lock(&t->lock);
    size_t generation = t->generation;
    if (++t->arrived == t->size) {
        t->arrived = 0;
        t->generation++;
        __atomic_store_n(&t->next, 0, __ATOMIC_RELAXED);
        pthread_cond_broadcast(&t->cond);
    } else {
        while (generation == t->generation)
            pthread_cond_wait(&t->cond, &t->lock);
    }
    pthread_mutex_unlock(&t->lock);
}

/* Merge q's chunk (its R_c, and R_{c+stride} below it). */
static size_t merge_chunk(const merge_team *t, size_t q) { return q * 2 * t->p->stride; }

/* dtpqrt's row counts for the panel at column i0 (ib wide) when m = l = d:
 * the rows of the lower triangle it reaches (mb) and of them the triangular
 * part (lb). */
static void panel_rows(size_t d, size_t i0, size_t ib, size_t *mb, size_t *lb)
{
    *mb = i0 + ib < d ? i0 + ib : d;
    *lb = i0 + 1 >= d ? 0 : *mb - i0;
}

/* Phase 1 of a panel: merge q's panel at column i0 factored (dtpqrt2). */
static void merge_panel(merge_team *t, size_t q, size_t i0, size_t ib)
{
    par_tsqr *p = t->p;
    size_t d = p->s->d, c = merge_chunk(t, q), mb, lb;
    double *a = p->r + c * d * d, *b = p->r + (c + p->stride) * d * d;
    panel_rows(d, i0, ib, &mb, &lb);
    lapack_int info = LAPACKE_dtpqrt2_work(LAPACK_COL_MAJOR, (lapack_int)mb, (lapack_int)ib, (lapack_int)lb,
                                           a + i0 * d + i0, (lapack_int)d, b + i0 * d, (lapack_int)d, t->t + q * t->nb * t->nb,
                                           (lapack_int)t->nb);
    if (info != 0 && p->rc[c] == 0)
        p->rc[c] = es_lapack_fail(&p->errs[c], "dtpqrt2", info);
}

/* Phase 2: merge q's panel at column i0 applied (dtprfb) to the columns
 * c0 .. c1 right of it; work: ib x (c1 - c0). */
static void merge_update(merge_team *t, size_t q, size_t i0, size_t ib, size_t c0, size_t c1, double *work)
{
    par_tsqr *p = t->p;
    size_t d = p->s->d, c = merge_chunk(t, q), mb, lb;
    double *a = p->r + c * d * d, *b = p->r + (c + p->stride) * d * d;
    panel_rows(d, i0, ib, &mb, &lb);
    lapack_int info = LAPACKE_dtprfb_work(LAPACK_COL_MAJOR, 'L', 'T', 'F', 'C', (lapack_int)mb, (lapack_int)(c1 - c0),
                                          (lapack_int)ib, (lapack_int)lb, b + i0 * d, (lapack_int)d,
                                          t->t + q * t->nb * t->nb, (lapack_int)t->nb, a + c0 * d + i0, (lapack_int)d,
                                          b + c0 * d, (lapack_int)d, work, (lapack_int)ib);
    if (info != 0 && p->rc[c] == 0)
        p->rc[c] = es_lapack_fail(&p->errs[c], "dtprfb", info);
}

/* One member of the team: every panel of every merge, in step with the others. */
static void *merge_member(void *arg)
{
    merge_team *t = arg;
    size_t d = t->p->s->d, nb = t->nb, pairs = t->pairs;
    double *work = es_malloc(nb * MERGE_SLICE * sizeof *work);
    for (size_t i0 = 0; i0 < d; i0 += nb) {
        size_t ib = d - i0 < nb ? d - i0 : nb, right = i0 + ib, task;
        while ((task = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED)) < pairs)
            merge_panel(t, task, i0, ib);
        team_wait(t);
        size_t first = right / MERGE_SLICE, slices = right < d ? (d - 1) / MERGE_SLICE + 1 - first : 0;
        while ((task = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED)) < pairs * slices) {
            size_t slice = first + task % slices, c0 = slice * MERGE_SLICE, c1 = c0 + MERGE_SLICE;
            merge_update(t, task / slices, i0, ib, c0 > right ? c0 : right, c1 < d ? c1 : d, work);
        }
        team_wait(t);
    }
    free(work);
    return NULL;
}

/* The `pairs` merges of the level p->stride, at once, on at most `threads`
 * threads (inside the caller's es_blas_one section). Their failures go to
 * p->rc and p->errs at the merge's first chunk. */
static void merge_level(par_tsqr *p, size_t pairs, size_t threads)
{
    size_t d = p->s->d, nb = d < MERGE_NB ? d : MERGE_NB, most = pairs * ((d + MERGE_SLICE - 1) / MERGE_SLICE);
    merge_team t = {.p = p, .pairs = pairs, .nb = nb, .t = es_malloc(pairs * nb * nb * sizeof *t.t)};
    pthread_mutex_init(&t.lock, NULL);
    pthread_cond_init(&t.cond, NULL);
    pthread_t tid[PAR_MAX_THREADS];
    size_t want = threads < most ? threads : most, started = 0;
    want = want > PAR_MAX_THREADS ? PAR_MAX_THREADS : want;
    pthread_mutex_lock(&t.lock); /* the team's size is known before anyone waits at the barrier */
    while (started + 1 < want && pthread_create(&tid[started], NULL, merge_member, &t) == 0)
        started++;
    t.size = started + 1;
    pthread_mutex_unlock(&t.lock);
    merge_member(&t);
    for (size_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&t.lock);
    pthread_cond_destroy(&t.cond);
    free(t.t);
}

/* R of the tall centred block by the parallel TSQR: chunks of es_svd_chunk_items(d)
 * items, each by tsqr_rows on its own thread with one BLAS thread (an
 * es_blas_one section: OpenBLAS's count is process-wide), their R factors
 * combined pairwise in a fixed tree, each level's merges at once on every
 * thread (merge_level). As many threads as the computation's
 * share of the cores (es_blas_job_threads), at most the chunks. The
 * chunking and the tree do not depend on the thread count, so neither does
 * the result. Each chunk holds its R (d^2 doubles) and a block until the end.
 * Fails as tsqr_rows (the first chunk's error in item order). */
static int tsqr_parallel(const es_svd *s, const es_matrix *m, double *r, double *ss, es_err *err)
{
    size_t d = s->d, chunks = s->n / es_svd_chunk_items(d);
    par_tsqr p = {.s = s, .m = m, .chunks = chunks, .progress = es_progress_current()};
    p.r = es_try_alloc(chunks * d, d * sizeof *p.r);
    if (!p.r)
        return es_fail(err, ES_E_NOMEM, "rows", "%s: cannot allocate %zu R factors of %zu x %zu", m->id, chunks, d, d);
    p.ss = es_calloc(chunks, sizeof *p.ss);
    p.rc = es_calloc(chunks, sizeof *p.rc);
    p.errs = es_calloc(chunks, sizeof *p.errs);
    size_t threads = es_blas_job_threads();
    char levels[256] = "";
    size_t used = 0;
    double t0 = es_now(), c0 = es_cpu_now(), t1, c1;
    es_blas_one_begin();
    es_par_for(chunks, threads, par_tsqr_task, &p);
    t1 = es_now(), c1 = es_cpu_now();
    int rc = 0;
    for (size_t c = 0; c < chunks && rc == 0; c++)
        if (p.rc[c] < 0) {
            *err = p.errs[c];
            rc = -1;
        }
    for (p.stride = 1; rc == 0 && p.stride < chunks; p.stride *= 2) {
        size_t pairs = (chunks - p.stride + 2 * p.stride - 1) / (2 * p.stride); /* c + stride < chunks */
        double tl = es_now(), cl = es_cpu_now();
        merge_level(&p, pairs, threads);
        if (used < sizeof levels)
            used += (size_t)snprintf(levels + used, sizeof levels - used, "%s%zu: %.3f (%.2f)", used ? ", " : "",
                                     pairs, es_now() - tl, es_cpu_now() - cl);
        for (size_t c = 0; c + p.stride < chunks && rc == 0; c += 2 * p.stride)
            if (p.rc[c] < 0) {
                *err = p.errs[c];
                rc = -1;
            }
    }
    es_blas_one_end();
    es_debug("tsqr %zu x %zu, wall (cpu) s: %zu chunks on %zu threads %.3f (%.2f), merges by level (pairs: s): %s",
             s->n, d, chunks, threads < chunks ? threads : chunks, t1 - t0, c1 - c0, levels);
    *ss = 0;
    for (size_t c = 0; c < chunks; c++)
        *ss += p.ss[c];
    if (rc == 0)
        for (size_t k = 0; k < d; k++) /* R_0's upper triangle, zeros below */
            for (size_t i = 0; i < d; i++)
                r[k * d + i] = i <= k ? p.r[k * d + i] : 0;
    free(p.r);
    free(p.ss);
    free(p.rc);
    free(p.errs);
    return rc;
}

/* The TSQR of the whole tall block (see tsqr_rows): in parallel chunks when
 * it spans two chunks or more and no reflectors are kept, else in one pass. */
static int tsqr(const es_svd *s, const es_matrix *m, double *r, double *q, double *t, double *ss, es_err *err)
{
    if (!q && s->n >= 2 * es_svd_chunk_items(s->d)) {
        size_t chunks = s->n / es_svd_chunk_items(s->d), blocks = 0;
        for (size_t c = 0; c < chunks; c++)
            blocks += tsqr_blocks(es_svd_part_start(s->n, chunks, c + 1) - es_svd_part_start(s->n, chunks, c), s->d);
        es_progress_begin("tsqr", blocks);
        return tsqr_parallel(s, m, r, ss, err);
    }
    es_progress_begin("tsqr", tsqr_blocks(s->n, s->d));
    return tsqr_rows(s, m, 0, s->n, r, q, t, ss, err);
}

/* u (n x k row-major) = Q [W; 0] for the Q of the TSQR kept in q, t (see tsqr)
 * and W = U_R(:, :k) (column-major d x k in w, overwritten): the later blocks'
 * Q_j applied in reverse order to the running top part w (R's rows, which the
 * first block holds) and the block's rows, then the first block's dgeqrf Q to
 * [w; 0]. ES_E_NOMEM/ES_E_NUMERIC from LAPACK. */
static int apply_tsqr_q(const es_svd *s, const double *q, const double *t, double *w, size_t k, double *u,
                        es_err *err)
{
    size_t n = s->n, d = s->d, nb = d < TSQR_NB ? d : TSQR_NB, b1 = first_block(n, d);
    double *c = es_malloc(b1 * k * sizeof *c); /* b1 >= TSQR_BLOCK or b1 == n: holds any block */
    int rc = 0;
    for (size_t j = tsqr_blocks(n, d) - 1; rc == 0 && j > 0; j--) {
        size_t i0 = block_start(n, d, j), b = n - i0 < TSQR_BLOCK ? n - i0 : TSQR_BLOCK;
        memset(c, 0, b * k * sizeof *c);
        lapack_int info = LAPACKE_dtpmqrt(LAPACK_COL_MAJOR, 'L', 'N', (lapack_int)b, (lapack_int)k, (lapack_int)d, 0,
                                          (lapack_int)nb, q + i0 * d, (lapack_int)b, t + j * nb * d, (lapack_int)nb,
                                          w, (lapack_int)d, c, (lapack_int)b);
        rc = info == 0 ? 0 : es_lapack_fail(err, "dtpmqrt", info);
        for (size_t i = 0; rc == 0 && i < b; i++)
            for (size_t l = 0; l < k; l++)
                u[(i0 + i) * k + l] = c[l * b + i];
    }
    if (rc == 0) { /* the first block: [w; 0] (b1 x k) */
        memset(c, 0, b1 * k * sizeof *c);
        for (size_t l = 0; l < k; l++)
            memcpy(c + l * b1, w + l * d, d * sizeof *c);
        lapack_int info = LAPACKE_dormqr(LAPACK_COL_MAJOR, 'L', 'N', (lapack_int)b1, (lapack_int)k, (lapack_int)d, q,
                                         (lapack_int)b1, t, c, (lapack_int)b1);
        rc = info == 0 ? 0 : es_lapack_fail(err, "dormqr", info);
        for (size_t i = 0; rc == 0 && i < b1; i++)
            for (size_t l = 0; l < k; l++)
                u[i * k + l] = c[l * b1 + i];
    }
    free(c);
    return rc;
}

int es_svd_check_output(const es_svd *s, const es_matrix *m, es_err *err)
{
    const double *left = s->vb ? s->vb : s->left ? s->left->u : NULL;
    size_t left_len = s->vb ? s->r * s->r : s->left ? s->n * s->r : 0, vt_len = s->vt ? s->r * s->d : 0;
    if (es_first_nonfinite(s->s, s->r) == s->r && es_first_nonfinite(left, left_len) == left_len &&
        es_first_nonfinite(s->vt, vt_len) == vt_len)
        return 0;
    return es_fail(err, ES_E_NUMERIC, "", "%s: %s produced non-finite values", m->id, s->solver);
}

/* Wide block (n < d): the row-major block is column-major X^T (d x n); its QR
 * and the SVD of R, or (es_svd_values_direct) the values of X^T itself. Fails as
 * es_svd_compute. */
static int compute_wide(es_svd *s, const es_matrix *m, es_err *err)
{
    size_t nd = s->n * s->d;
    double *a = es_try_alloc(nd, sizeof *a);
    int rc = a ? load_rowmajor(s, m, a, s->mean, err)
               : es_fail(err, ES_E_NOMEM, "rows", "%s: cannot allocate the SVD of %zu x %zu", m->id, s->n, s->d);
    if (rc == 0) {
        s->total_ss = es_sum_squares(a, nd);
        es_progress_begin_lapack();
        rc = es_svd_values_direct(s) ? es_svd_small(a, s->d, s->n, s->s, NULL, NULL, &s->solver, err)
                              : es_svd_wide_by_qr(s, a, err);
    }
    free(a);
    return rc;
}

/* Tall block: TSQR, then the SVD of R^T (its values only when s holds no vt),
 * or (es_svd_values_direct) the values of the whole centred block, column-major.
 * Fails as es_svd_compute. */
static int compute_tall(es_svd *s, const es_matrix *m, es_err *err)
{
    double t0 = es_now(), c0 = es_cpu_now();
    bool direct = es_svd_values_direct(s);
    double *a = es_try_alloc(direct ? s->n : s->d, s->d * sizeof *a); /* the block, or R */
    int rc = a ? es_svd_scan(s, m, err)
               : es_fail(err, ES_E_NOMEM, "rows", "%s: cannot allocate the SVD of %zu x %zu", m->id, s->n, s->d);
    if (rc == 0 && direct) { /* at most 1.4 d x d items (es_svd_values_direct) */
        double *rows = es_malloc(s->n * s->d * sizeof *rows);
        rc = centred_block_colmajor(s, m, 0, s->n, a, rows, &s->total_ss, err);
        free(rows);
    } else if (rc == 0)
        rc = tsqr(s, m, a, NULL, NULL, &s->total_ss, err);
    double t1 = es_now(), c1 = es_cpu_now();
    if (rc == 0)
        es_progress_begin_lapack();
    if (rc == 0 && direct)
        rc = es_svd_small(a, s->n, s->d, s->s, NULL, NULL, &s->solver, err);
    else if (rc == 0)
        rc = s->vt ? es_svd_decompose_tall(s, a, err) : es_svd_values_of_factor(s, a, s->d, err);
    es_debug("%s phases %s %zu x %zu, wall (cpu) s: scan and QR %.3f (%.2f), the %s of the %zu x %zu factor %.3f "
             "(%.2f)", s->method, m->id, s->n, s->d, t1 - t0, c1 - c0, s->vt ? "SVD" : "values", direct ? s->n : s->d,
             s->d, es_now() - t1, es_cpu_now() - c1);
    free(a);
    return rc;
}

/* The SVD of items idx[0..n) of m (model orientation), centred by c, with its
 * vectors or (values) without. Fails with ES_E_PARAM (param "rows") on an
 * empty or out-of-range selection, ES_E_LIMIT (param "rows") when the block
 * exceeds LAPACK's int dimensions, ES_E_NOMEM when buffers cannot be
 * allocated, ES_E_NUMERIC on non-finite input or when both solvers fail. */
static int compute(const es_matrix *m, const size_t *idx, size_t n, es_centering c, bool values, es_svd **out,
                   es_err *err)
{
    double t0 = es_now();
    size_t items = es_matrix_items(m), d = es_matrix_dim(m);
    if (n == 0 || d == 0)
        return es_fail(err, ES_E_PARAM, "rows", "%s: empty selection (%zu rows x %zu coordinates)", m->id, n, d);
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= items)
            return es_fail(err, ES_E_PARAM, "rows", "%s: row %zu out of range (%zu rows)", m->id, idx[i], items);
    size_t nd;
    if (es_mul_size(n, d, &nd) < 0 || n > INT_MAX || d > INT_MAX || nd > INT_MAX)
        return es_fail(err, ES_E_LIMIT, "rows", "%s: a %zu x %zu block is too large for LAPACK", m->id, n, d);
    es_svd_parts parts = values ? ES_PARTS_VALUES : n < d ? ES_PARTS_LEFT : ES_PARTS_TALL;
    es_svd *s = es_svd_alloc(m, idx, n, d, c, n < d ? n : d, parts);
    if (!s)
        return es_fail(err, ES_E_NOMEM, "rows", "%s: cannot allocate the SVD of %zu x %zu", m->id, n, d);
    int rc = es_svd_is_tall(s) ? compute_tall(s, m, err) : compute_wide(s, m, err);
    if (rc == 0)
        rc = es_svd_check_output(s, m, err);
    if (rc < 0) {
        es_svd_free(s);
        return -1;
    }
    if (!values) {
        es_svd_fix_signs(s);
        es_svd_measure_orthogonality(s);
    }
    s->cert = (es_certificate){.passed = true};
    s->seconds = es_now() - t0;
    *out = s;
    return 0;
}

/* See linalg.h: the exact decomposition. Fails as compute. */
int es_svd_compute(const es_matrix *m, const size_t *idx, size_t n, es_centering c, es_svd **out, es_err *err)
{
    return compute(m, idx, n, c, false, out, err);
}

/* See linalg.h: the singular values alone. Fails as compute. */
int es_svd_values(const es_matrix *m, const size_t *idx, size_t n, es_centering c, es_svd **out, es_err *err)
{
    return compute(m, idx, n, c, true, out, err);
}

/* See linalg.h: ES_E_PARAM naming "method" when s holds singular values only. */
int es_svd_need_vectors(const es_svd *s, const char *what, es_err *err)
{
    if (s->vt)
        return 0;
    return es_fail(err, ES_E_PARAM, "method", ES_VALUES_ONLY, what);
}

/* U_R(:, :k) = P_B V_B(:, :k) (or U_R's own columns after the dgesvd fallback)
 * into w, column-major r x k. ES_E_NUMERIC/ES_E_NOMEM from LAPACK. */
static int form_ur(const es_svd *s, size_t k, double *w, es_err *err)
{
    size_t r = s->r;
    for (size_t j = 0; j < k; j++)
        for (size_t i = 0; i < r; i++)
            w[j * r + i] = s->vb[i * r + j]; /* V_B(i, j) */
    if (!s->brd)
        return 0;
    lapack_int info = LAPACKE_dormbr(LAPACK_COL_MAJOR, 'P', 'L', 'N', (lapack_int)r, (lapack_int)k, (lapack_int)r,
                                     s->brd, (lapack_int)r, s->brd_tau, w, (lapack_int)r);
    return info == 0 ? 0 : es_lapack_fail(err, "dormbr", info);
}

/* The first k left vectors of a tall block by the QR route into u (n x k
 * row-major): the TSQR redone keeping its reflectors (one n x d copy), then
 * U = Q [U_R(:, :k); 0]. Fails with ES_E_NOMEM or ES_E_NUMERIC. */
static int left_by_qr(const es_svd *s, const es_matrix *m, size_t k, double *u, es_err *err)
{
    size_t n = s->n, d = s->d, nb = d < TSQR_NB ? d : TSQR_NB, blocks = tsqr_blocks(n, d);
    double *q = es_try_alloc(n * d, sizeof *q), *t = es_try_alloc(blocks * nb * d, sizeof *t);
    double *rmat = es_malloc(d * d * sizeof *rmat), *w = es_malloc(d * k * sizeof *w);
    double ss = 0; /* s->total_ss again */
    int rc = q && t ? 0 : es_fail(err, ES_E_NOMEM, "", "%s: cannot allocate %zu x %zu left vectors", m->id, n, k);
    if (rc == 0)
        rc = tsqr(s, m, rmat, q, t, &ss, err);
    if (rc == 0)
        rc = form_ur(s, k, w, err);
    if (rc == 0)
        rc = apply_tsqr_q(s, q, t, w, k, u, err);
    free(q);
    free(t);
    free(rmat);
    free(w);
    return rc;
}

static int project(const es_svd *cs, const es_matrix *m, size_t k, double *out, bool locked, es_err *err);

/* Left vectors as u_j = X v_j / s_j for j < k into u (n x k row-major), and
 * in *ok how many leading columns pass the certificate ||X^T u_j - s_j v_j|| /
 * s_j <= LEFT_TOL (0 when s_0 is 0). Fails only when its passes stop (a
 * cancelled computation: es_progress_check). */
static int left_by_projection(const es_svd *s, const es_matrix *m, size_t k, double *u, size_t *cols, bool locked,
                              es_err *err)
{
    size_t n = s->n, d = s->d, ok = 0;
    *cols = 0;
    while (ok < k && s->s[ok] > 0)
        ok++;
    if (ok == 0)
        return 0;
    if (project(s, m, k, u, locked, err) < 0) /* 1 <= k <= r, m checked: only a stop */
        return -1;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < ok; j++)
            u[i * k + j] /= s->s[j];
    double *w = es_malloc(k * d * sizeof *w); /* U^T X: row j is X^T u_j */
    if (es_svd_times_t(s, m, u, k, w, err) < 0) {
        free(w);
        return -1;
    }
    for (size_t j = 0; j < ok; j++) {
        double res = 0;
        for (size_t l = 0; l < d; l++) {
            double x = w[j * d + l] - s->s[j] * s->vt[j * d + l];
            res += x * x;
        }
        if (!(sqrt(res) <= LEFT_TOL * s->s[j])) {
            ok = j;
            break;
        }
    }
    free(w);
    *cols = ok;
    return 0;
}

/* The first k left vectors of a tall block into a new array (*cols of them, row
 * stride *cols): X V_k S_k^-1 where certified for the `need` columns asked for
 * (kept as far as certified), else the QR route. locked: the caller holds
 * left_lock. NULL with ES_E_NOMEM or ES_E_NUMERIC. */
static double *left_of(const es_svd *s, const es_matrix *m, size_t k, size_t need, bool locked, size_t *cols_out,
                       es_err *err)
{
    double *u = es_try_alloc(s->n, k * sizeof *u);
    if (!u) {
        es_fail(err, ES_E_NOMEM, "", "%s: cannot allocate %zu x %zu left vectors", m->id, s->n, k);
        return NULL;
    }
    size_t cols;
    if (left_by_projection(s, m, k, u, &cols, locked, err) < 0) {
        free(u);
        return NULL;
    }
    if (cols >= need && cols < k) { /* keep the certified columns only */
        for (size_t i = 1; i < s->n; i++)
            memmove(u + i * cols, u + i * k, cols * sizeof *u);
    } else if (cols < need) {
        cols = k;
        if (left_by_qr(s, m, k, u, err) < 0) {
            free(u);
            return NULL;
        }
    }
    *cols_out = cols;
    return u;
}

/* The first k left vectors of a tall block, published as the newest block (lock
 * held); see left_of. Fails with ES_E_NOMEM or ES_E_NUMERIC. */
static int form_left(es_svd *s, const es_matrix *m, size_t k, size_t need, es_err *err)
{
    size_t cols;
    double *u = left_of(s, m, k, need, true, &cols, err);
    if (!u)
        return -1;
    struct es_svd_left_block *b = es_malloc(sizeof *b);
    *b = (struct es_svd_left_block){.u = u, .cols = cols, .older = s->left};
    __atomic_store_n(&s->left, b, __ATOMIC_RELEASE);
    return 0;
}

/* ES_E_PARAM unless m is the matrix s was computed from (the same identity:
 * id, sha256 of the data, view, model axis, shape). */
static int check_source(const es_svd *s, const es_matrix *m, es_err *err)
{
    char *identity = es_matrix_identity(m);
    bool same = strcmp(identity, s->identity) == 0;
    free(identity);
    return same ? 0 : es_fail(err, ES_E_PARAM, "", "%s is not the matrix this decomposition was computed from", m->id);
}

/* At least the first k left vectors (row stride *ld), formed on first need:
 * LEFT_MIN_COLS columns at least, all r when more are asked for. Fails as
 * form_left, ES_E_PARAM "method" for a values-only s, ES_E_PARAM "k" unless
 * 1 <= k <= r, ES_E_PARAM when they must be formed and m is not s's source;
 * never for a wide block (formed with the decomposition). */
const double *es_svd_left(const es_svd *cs, const es_matrix *m, size_t k, size_t *ld, es_err *err)
{
    es_svd *s = (es_svd *)cs; /* formed left vectors are a cache, not a change of value */
    if (es_svd_need_vectors(s, "forming left vectors", err) < 0)
        return NULL;
    if (k == 0 || k > s->r) {
        es_fail(err, ES_E_PARAM, "k", "k must be between 1 and %zu, got %zu", s->r, k);
        return NULL;
    }
    struct es_svd_left_block *b = __atomic_load_n(&s->left, __ATOMIC_ACQUIRE);
    if (!b || b->cols < k) {
        if (check_source(s, m, err) < 0)
            return NULL;
        pthread_mutex_lock(&s->left_lock);
        int rc = 0;
        if (!s->left || s->left->cols < k)
            rc = form_left(s, m, k <= LEFT_MIN_COLS && s->r > LEFT_MIN_COLS ? LEFT_MIN_COLS : s->r, k, err);
        b = s->left;
        pthread_mutex_unlock(&s->left_lock);
        if (rc < 0)
            return NULL;
    }
    *ld = b->cols;
    return b->u;
}

/* See linalg.h: a decomposition kept in parts forms the left vectors it lacks
 * for this call alone (k columns, or as many as LEFT_MIN_COLS when fewer are
 * asked: the same columns es_svd_left would keep). */
const double *es_svd_left_for(const es_svd *s, const es_matrix *m, size_t k, size_t *ld, double **owned,
                              es_err *err)
{
    *owned = NULL;
    struct es_svd_left_block *b = __atomic_load_n(&s->left, __ATOMIC_ACQUIRE);
    if (!s->left_transient || (b && b->cols >= k))
        return es_svd_left(s, m, k, ld, err);
    if (es_svd_need_vectors(s, "forming left vectors", err) < 0)
        return NULL;
    if (k == 0 || k > s->r) {
        es_fail(err, ES_E_PARAM, "k", "k must be between 1 and %zu, got %zu", s->r, k);
        return NULL;
    }
    if (check_source(s, m, err) < 0)
        return NULL;
    size_t cols;
    double *u = left_of(s, m, k <= LEFT_MIN_COLS && s->r > LEFT_MIN_COLS ? LEFT_MIN_COLS : s->r, k, false, &cols, err);
    *ld = cols;
    return *owned = u;
}

/* out (n x k row-major) = X V_k (1 <= k <= r, m checked) from what s holds
 * (top-k's X V, the kept scores) or by a pass over the items; the scores are formed here when a tall exact
 * block is asked for k <= SCORES_COLS the first time (under left_lock, which
 * the caller holds when `locked`). Fails only when a pass stops. */
static int project(const es_svd *cs, const es_matrix *m, size_t k, double *out, bool locked, es_err *err)
{
    es_svd *s = (es_svd *)cs; /* kept scores are a cache, not a change of value */
    size_t n = s->n;
    if (s->xv) { /* top-k holds X V already */
        for (size_t i = 0; i < n; i++)
            memcpy(out + i * k, s->xv + i * s->r, k * sizeof *out);
        return 0;
    }
    /* never U_k S_k from formed left vectors: equal to X V_k only to rounding, so
     * a reply's bits would depend on whether another request formed them first */
    size_t cols = s->r < SCORES_COLS ? s->r : SCORES_COLS;
    if (!es_svd_is_tall(s) || k > cols)
        return es_svd_times(s, m, s->vt, k, out, err);
    double *scores = __atomic_load_n(&s->scores, __ATOMIC_ACQUIRE);
    if (!scores) {
        if (!locked)
            pthread_mutex_lock(&s->left_lock);
        int rc = 0;
        scores = s->scores;
        if (!scores) {
            double *x = es_try_alloc(n, cols * sizeof *x);
            bool read = x && s->scores_path && es_svd_scores_load(s, cols, x) == 0; /* kept before a restart */
            rc = read ? 0 : x ? es_svd_times(s, m, s->vt, cols, x, err) : es_svd_times(s, m, s->vt, k, out, err);
            if (x && rc == 0 && !read && s->scores_path)
                es_svd_scores_save(s, x, cols);
            if (x && rc == 0) {
                s->scores_read = read;
                __atomic_store_n(&s->scores, scores = x, __ATOMIC_RELEASE);
            } else {
                free(x); /* no room to keep them: this reply's columns were computed alone */
            }
        }
        if (!locked)
            pthread_mutex_unlock(&s->left_lock);
        if (rc < 0 || !scores)
            return rc;
    }
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * k, scores + i * cols, k * sizeof *out);
    return 0;
}

/* See linalg.h. Fails with ES_E_PARAM "method" for a values-only s,
 * ES_E_PARAM "k" unless 1 <= k <= r, ES_E_PARAM when m is not s's source. */
int es_svd_project(const es_svd *s, const es_matrix *m, size_t k, double *out, es_err *err)
{
    if (es_svd_need_vectors(s, "a projection", err) < 0)
        return -1;
    if (k == 0 || k > s->r)
        return es_fail(err, ES_E_PARAM, "k", "k must be between 1 and %zu, got %zu", s->r, k);
    if (check_source(s, m, err) < 0)
        return -1;
    return project(s, m, k, out, false, err);
}

/* Add a reference (NULL passes through). Cannot fail. */
es_svd *es_svd_retain(es_svd *s)
{
    if (s)
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
    return s;
}

/* Drop a reference; the last one frees everything. NULL is ignored. */
void es_svd_release(es_svd *s)
{
    if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
        es_svd_free(s);
}

static size_t svd_bytes(const es_svd *s, bool left);

/* Bytes a decomposition holds or may hold once its left vectors are formed
 * (struct, arrays, key), for the cache budget. */
size_t es_svd_bytes(const es_svd *s)
{
    return s->left_transient ? es_svd_parts_bytes(s) : svd_bytes(s, true);
}

/* See linalg.h. */
size_t es_svd_parts_bytes(const es_svd *s)
{
    return svd_bytes(s, s->left != NULL);
}

/* The bytes of s, its left vectors (n x r) counted when `left`. */
static size_t svd_bytes(const es_svd *s, bool left)
{
    size_t small = (s->vb ? s->r * s->r : 0) + (s->brd ? s->r * s->r + s->r : 0);
    size_t vectors = s->vt ? (left ? s->n * s->r : 0) + s->r * s->d : 0; /* left (once formed) and right */
    size_t scores = s->vt && !s->xv && es_svd_is_tall(s) ? s->n * (s->r < SCORES_COLS ? s->r : SCORES_COLS) : 0;
    size_t doubles = s->r + vectors + small + (s->mean ? s->d : 0) + (s->xv ? s->n * s->r : 0) + scores;
    return sizeof *s + s->n * sizeof *s->rows + doubles * sizeof(double) + (s->key ? strlen(s->key) + 1 : 0) +
           strlen(s->identity) + 1;
}
