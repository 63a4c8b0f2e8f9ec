/* The parallel passes over a decomposition's items (internal.h):
 * out = X A^T (es_svd_times), out = U^T X (es_svd_times_t) and the Gram matrix
 * X^T X with ||X||_F^2 (es_svd_gram), each split into parts of whole
 * TSQR_BLOCK blocks fixed by n and d, every part's items centred on the way
 * into one reused block, partial results summed in part order: the same bits
 * with any thread count; with them what they share with svd.c (es_par_for, the
 * chunks and parts, the centred block, the non-finite report). Split from svd.c,
 * which keeps the scans, the TSQR and the left vectors and calls in here. */
#include "linalg/internal.h"

#include "embedscope/blas.h"

#include <cblas.h>
#include <pthread.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Position of the first non-finite value among n doubles, or n. */
size_t es_first_nonfinite(const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return n;
}

/* ES_E_NUMERIC naming the matrix, the item and coordinate at row-major position
 * bad (none if bad == n * d) and `stage`; 0 when bad == n * d. */
int es_svd_report_nonfinite(const es_svd *s, const es_matrix *m, size_t bad, const char *stage, es_err *err)
{
    if (bad == s->n * s->d)
        return 0;
    return es_fail(err, ES_E_NUMERIC, "", "%s: item %zu coordinate %zu is not finite %s", m->id,
                   s->rows[bad / s->d], bad % s->d, stage);
}

/* Message tail for a non-finite value that appears only after centring. */
const char *es_svd_overflow_stage(es_centering c)
{
    return c == ES_CENTER_COLUMNS ? "after centring columns (overflow)" : "after centring rows (overflow)";
}

/* The selected items i0 .. i0 + b centred as es_svd_centred_items says, into
 * blk (b x d, the caller's): a pass reuses one
 * block per part instead of a fresh mapping of 32 MiB per block at d = 4096
 * (malloc maps blocks that large, and every page of each new one faults in). */
void es_svd_centred_items_into(const es_svd *s, const es_matrix *m, size_t i0, size_t b, double *blk)
{
    size_t d = s->d;
    if (s->centering == ES_CENTER_COLUMNS) { /* each item centred while it is in L1: one pass over the block */
        for (size_t i = 0; i < b; i++) {
            double *row = blk + i * d;
            es_matrix_items_into(m, s->rows + i0 + i, 1, row);
            for (size_t j = 0; j < d; j++)
                row[j] -= s->mean[j];
        }
        return;
    }
    es_matrix_items_into(m, s->rows + i0, b, blk);
    if (s->centering == ES_CENTER_ROWS)
        es_center(blk, b, d, ES_CENTER_ROWS, NULL);
}

/* es_par_for's loop: its tasks, the next one to take, what each runs. */
typedef struct par_for {
    size_t tasks, next; /* next: the next task, taken atomically */
    void *ctx;
    void (*run)(void *ctx, size_t task);
} par_for;

static void *par_for_worker(void *arg)
{
    par_for *p = arg;
    for (size_t t; (t = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED)) < p->tasks;)
        p->run(p->ctx, t);
    return NULL;
}

/* See linalg.h. */
void es_par_for(size_t tasks, size_t threads, void (*run)(void *, size_t), void *ctx)
{
    par_for p = {.tasks = tasks, .ctx = ctx, .run = run};
    pthread_t tid[PAR_MAX_THREADS];
    size_t started = 0;
    threads = threads > tasks ? tasks : threads > PAR_MAX_THREADS ? PAR_MAX_THREADS : threads;
    while (started + 1 < threads && pthread_create(&tid[started], NULL, par_for_worker, &p) == 0)
        started++;
    par_for_worker(&p);
    for (size_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
}

/* Items per chunk of the parallel TSQR, at least (the chunks share the
 * remainder: es_svd_part_start): fixed by d alone, never by the thread count, so
 * that R, hence every answer, is the same bits with any number of threads. At
 * least 2 d keeps the chunks' own TSQR ahead of the reduction that combines
 * their R factors. */
size_t es_svd_chunk_items(size_t d)
{
    size_t c = 2 * d > 4 * TSQR_BLOCK ? 2 * d : 4 * TSQR_BLOCK;
    return (c + TSQR_BLOCK - 1) / TSQR_BLOCK * TSQR_BLOCK;
}

/* The first item of part c of n items split into `parts` parts of whole
 * TSQR_BLOCK blocks as even as blocks allow (c = parts: n). The parts of a
 * pass and the chunks of the TSQR: n / es_svd_chunk_items(d) of them (or fewer), so
 * each holds at least es_svd_chunk_items(d) items but one block less than
 * another at most, instead of the last taking the whole remainder (13568
 * items against 8192 at 128256 x 4096: the critical path of 15 parts on 16
 * cores). Fixed by n and the count alone. */
size_t es_svd_part_start(size_t n, size_t parts, size_t c)
{
    size_t blocks = (n + TSQR_BLOCK - 1) / TSQR_BLOCK;
    return c >= parts ? n : c * blocks / parts * TSQR_BLOCK;
}

/* Items per part of a pass over the items (es_svd_times, es_svd_times_t,
 * es_svd_gram): the TSQR's chunk, or more so that there are at most
 * PASS_MAX_PARTS parts (each reduction keeps one partial result per part: at
 * most PASS_MAX_PARTS d x d for the Gram matrix). Fixed by n and d alone, and
 * the partial results are summed in part order, so the passes give the same
 * bits with any thread count. */
#define PASS_MAX_PARTS 16
static size_t pass_part_items(size_t n, size_t d)
{
    size_t per = es_svd_chunk_items(d), spread = (n + PASS_MAX_PARTS - 1) / PASS_MAX_PARTS;
    spread = (spread + TSQR_BLOCK - 1) / TSQR_BLOCK * TSQR_BLOCK;
    return per > spread ? per : spread;
}

/* One pass: part p covers items es_svd_part_start(n, parts, p) .. es_svd_part_start(n, parts, p + 1),
 * TSQR_BLOCK at a time; `block` does one block's work into part p's result. */
typedef struct pass {
    const es_svd *s;
    const es_matrix *m;
    size_t parts, k;
    const double *in; /* A (times) or U (times_t) */
    double *out;      /* times: the n x k result; else the parts' partial results */
    double *ss;       /* gram: each part's sum of squares */
    int *rc;          /* gram: each part's status */
    es_err *errs;
    int (*block)(struct pass *p, size_t part, size_t i0, size_t b, double *blk);
    es_progress *progress; /* the computation's tracker: every part's blocks count there */
} pass;

static void pass_part(void *arg, size_t part)
{
    pass *p = arg;
    es_progress_attach(p->progress); /* this part's thread reports to the computation */
    size_t lo = es_svd_part_start(p->s->n, p->parts, part), hi = es_svd_part_start(p->s->n, p->parts, part + 1);
    double *blk = es_malloc(TSQR_BLOCK * p->s->d * sizeof *blk);
    for (size_t i0 = lo; i0 < hi; i0 += TSQR_BLOCK) {
        size_t b = hi - i0 < TSQR_BLOCK ? hi - i0 : TSQR_BLOCK;
        if (es_progress_check(&p->errs[part]) < 0) { /* a job cancelled or past its deadline stops here */
            p->rc[part] = -1;
            break;
        }
        es_progress_step();
        es_svd_centred_items_into(p->s, p->m, i0, b, blk);
        if (p->block(p, part, i0, b, blk) < 0)
            break;
    }
    free(blk);
}

/* A pass over the items of s from m doing `block`: its parts set, each with
 * its status (pass_end releases them). */
static pass pass_of(const es_svd *s, const es_matrix *m, int (*block)(pass *, size_t, size_t, size_t, double *))
{
    size_t per = pass_part_items(s->n, s->d), parts = s->n < 2 * per ? 1 : s->n / per;
    return (pass){.s = s, .m = m, .parts = parts, .block = block,
                  .rc = es_calloc(parts, sizeof(int)), .errs = es_calloc(parts, sizeof(es_err)),
                  .progress = es_progress_current()};
}

/* The first part's failure in item order (-1 with err), else 0; releases
 * the parts' statuses. */
static int pass_end(pass *p, es_err *err)
{
    int rc = 0;
    for (size_t c = 0; c < p->parts && rc == 0; c++)
        if (p->rc[c] < 0) {
            *err = p->errs[c];
            rc = -1;
        }
    free(p->rc);
    free(p->errs);
    return rc;
}

/* Run the pass over its parts: with two parts or more on the computation's
 * share of the cores, one BLAS thread per call (an es_blas_one section); a
 * single part on this thread with OpenBLAS's own threads. */
static void pass_run(pass *p, const char *name)
{
    size_t blocks = 0;
    for (size_t c = 0; c < p->parts; c++) {
        size_t lo = es_svd_part_start(p->s->n, p->parts, c), hi = es_svd_part_start(p->s->n, p->parts, c + 1);
        blocks += (hi - lo + TSQR_BLOCK - 1) / TSQR_BLOCK;
    }
    es_progress_begin(name, blocks);
    if (p->parts == 1) {
        pass_part(p, 0);
        return;
    }
    es_blas_one_begin();
    es_par_for(p->parts, es_blas_job_threads(), pass_part, p);
    es_blas_one_end();
}

/* Add the parts' partial results (len doubles each, after the first) into
 * the first, in part order. */
static void pass_sum(const pass *p, size_t len)
{
    for (size_t c = 1; c < p->parts; c++)
        cblas_daxpy((blasint)len, 1.0, p->out + c * len, 1, p->out, 1);
}

static int times_block(pass *p, size_t part, size_t i0, size_t b, double *blk)
{
    (void)part;
    size_t d = p->s->d, k = p->k;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)b, (blasint)k, (blasint)d, 1.0, blk, (blasint)d,
                p->in, (blasint)d, 0.0, p->out + i0 * k, (blasint)k);
    return 0;
}

/* See internal.h: out (n x k) = X A^T, TSQR_BLOCK items at a time (each
 * block's rows of out are its own: no reduction). */
int es_svd_times(const es_svd *s, const es_matrix *m, const double *a, size_t k, double *out, es_err *err)
{
    pass p = pass_of(s, m, times_block);
    p.k = k;
    p.in = a;
    p.out = out;
    pass_run(&p, "project");
    return pass_end(&p, err);
}

static int times_t_block(pass *p, size_t part, size_t i0, size_t b, double *blk)
{
    size_t d = p->s->d, k = p->k;
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)k, (blasint)d, (blasint)b, 1.0, p->in + i0 * k,
                (blasint)k, blk, (blasint)d, 1.0, p->out + part * k * d, (blasint)d);
    return 0;
}

/* See internal.h: out (k x d) = U^T X, accumulated over blocks of items per
 * part, the parts' results summed in order. */
int es_svd_times_t(const es_svd *s, const es_matrix *m, const double *u, size_t k, double *out, es_err *err)
{
    size_t d = s->d;
    pass p = pass_of(s, m, times_t_block);
    p.k = k;
    p.in = u;
    p.out = p.parts == 1 ? out : es_malloc(p.parts * k * d * sizeof *p.out);
    memset(p.out, 0, p.parts * k * d * sizeof *p.out);
    pass_run(&p, "project");
    if (p.out != out) {
        pass_sum(&p, k * d);
        memcpy(out, p.out, k * d * sizeof *out);
        free(p.out);
    }
    return pass_end(&p, err);
}

static int gram_block(pass *p, size_t part, size_t i0, size_t b, double *blk)
{
    size_t d = p->s->d;
    double ss = es_sum_squares(blk, b * d);
    if (!isfinite(ss)) { /* a non-finite centred value makes the sum so; find it (else squares overflowed) */
        size_t bad = p->s->centering == ES_CENTER_NONE ? b * d : es_first_nonfinite(blk, b * d);
        if (bad < b * d) {
            p->rc[part] = es_svd_report_nonfinite(p->s, p->m, i0 * d + bad, es_svd_overflow_stage(p->s->centering),
                                           &p->errs[part]);
            return -1;
        }
    }
    p->ss[part] += ss;
    /* the part's first block sets its Gram matrix (beta 0: 0 + x is x, the bits of adding to zeros), so
     * the parts' matrices are neither cleared nor faulted in beforehand but by their own threads */
    bool first = i0 == es_svd_part_start(p->s->n, p->parts, part);
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, (blasint)d, (blasint)b, 1.0, blk, (blasint)d,
                first ? 0.0 : 1.0, p->out + part * d * d, (blasint)d);
    return 0;
}

/* The parts' Gram matrices summed into g's upper triangle, rows split into
 * tasks of about equal triangle area: each element the sum in part order
 * (g = p_0 + p_1 + ..., what adding them one after another gives). */
typedef struct gram_sum {
    const double *parts;
    double *g;
    size_t n_parts, d, tasks;
} gram_sum;

/* The first row of task t: rows split so that each holds about the same share of the triangle. */
static size_t gram_sum_row(const gram_sum *p, size_t t)
{
    if (t >= p->tasks)
        return p->d;
    /* rows below r hold d^2 - (d - r)^2 of the doubled triangle: solve for a share t / tasks */
    double d = (double)p->d, r = d - d * sqrt(1.0 - (double)t / (double)p->tasks);
    size_t row = (size_t)r;
    return row < p->d ? row : p->d;
}

static void gram_sum_task(void *arg, size_t t)
{
    gram_sum *p = arg;
    size_t d = p->d, dd = d * d;
    for (size_t i = gram_sum_row(p, t); i < gram_sum_row(p, t + 1); i++) {
        double *out = p->g + i * d;
        memcpy(out + i, p->parts + i * d + i, (d - i) * sizeof *out);
        for (size_t c = 1; c < p->n_parts; c++) {
            const double *in = p->parts + c * dd + i * d;
            for (size_t j = i; j < d; j++)
                out[j] += in[j];
        }
    }
}

/* Tasks of the Gram matrices' sum: several per thread, so that the rows' costs even out. */
#define GRAM_SUM_TASKS 64

/* The lower triangle of the row-major d x d g set from its upper one, a
 * TILE x TILE tile at a time. */
static void symmetrise_upper(double *g, size_t d)
{
    for (size_t i0 = 0; i0 < d; i0 += TILE)
        for (size_t j0 = i0; j0 < d; j0 += TILE) {
            size_t i1 = i0 + TILE < d ? i0 + TILE : d, j1 = j0 + TILE < d ? j0 + TILE : d;
            for (size_t i = i0; i < i1; i++)
                for (size_t j = j0 > i + 1 ? j0 : i + 1; j < j1; j++)
                    g[j * d + i] = g[i * d + j];
        }
}

/* See internal.h: X^T X (row-major d x d, symmetric) and ||X||_F^2, one
 * partial Gram matrix per part (dsyrk per block: its upper triangle), summed
 * in part order on the computation's share of the cores, then mirrored. Fails with the first part's error
 * in item order. */
int es_svd_gram(const es_svd *s, const es_matrix *m, double *g, double *ss, es_err *err)
{
    pass p = pass_of(s, m, gram_block);
    size_t d = s->d, parts = p.parts;
    p.out = parts == 1 ? g : es_try_alloc(parts * d, d * sizeof *p.out);
    if (!p.out) {
        pass_end(&p, err);
        return es_fail(err, ES_E_NOMEM, "rows", "%s: cannot allocate %zu Gram matrices of %zu x %zu", m->id, parts,
                       d, d);
    }
    p.ss = es_calloc(parts, sizeof *p.ss);
    double t0 = es_now(), c0 = es_cpu_now();
    pass_run(&p, "gram");
    int rc = pass_end(&p, err);
    double t1 = es_now(), c1 = es_cpu_now();
    *ss = 0;
    for (size_t c = 0; c < parts; c++)
        *ss += p.ss[c];
    if (p.out != g) {
        gram_sum sum = {.parts = p.out, .g = g, .n_parts = parts, .d = d, .tasks = GRAM_SUM_TASKS};
        if (rc == 0)
            es_par_for(sum.tasks, es_blas_job_threads(), gram_sum_task, &sum);
        free(p.out);
    }
    if (rc == 0)
        symmetrise_upper(g, d);
    free(p.ss);
    es_debug("gram %zu x %zu, wall (cpu) s: %zu parts %.3f (%.2f), their sum %.3f (%.2f)", s->n, d, parts, t1 - t0,
             c1 - c0, es_now() - t1, es_cpu_now() - c1);
    return rc;
}
