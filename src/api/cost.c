/* The cost model: every computing request gets a prediction of its compute
 * time (seconds on this machine) and of its peak memory (bytes) from its
 * shapes and its algorithm, before it is queued. The time is a sum of terms,
 * one per kernel the algorithm runs, each a flop count times a rate measured
 * at start by es_cost_calibrate (the daemon's own decompositions on small
 * blocks, one dgemm, the periodogram, the JSON renderer: well under 0.5 s):
 *   exact SVD (n >= d)   a_qr n d^2 (the TSQR) + b_svd d^3 (dgesdd of R, the
 *                        checks); a wide block (n < d) the same with n and d swapped
 *   values               a_qr n d^2 + b_values d^3 (a nearly square block: no QR)
 *   top-k (K triplets)   dsyrk n d^2 and ~8 n d K products at the dgemm rate, b_eig d^3
 *   projections          2 n d k at the dgemm rate (pca coordinates, left vectors)
 *   Gram n x n           2 n^2 d at the dgemm rate and the loops over its n^2 pairs
 *   periodogram          p2 n^2 + p1 n per component (direct sums, then the fit)
 *   output               r_out per rendered number (table, JSON tree, text)
 * The prediction decides whether a request is answered at once or becomes a
 * job (limits.sync_seconds); only memory (limits.max_request_memory) and the
 * response's size (max_response_bytes) refuse a request. make bench prints
 * predicted against measured times (bench/cost.py). */
#include "embedscope/cost.h"
#include "embedscope/render.h"
#include "embedscope/blas.h"
#include "embedscope/analysis.h"
#include "embedscope/linalg.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Defaults until es_cost_calibrate runs (unit tests): one core of a 2020s x86. */
static es_rates rates = {.qr = 1.2e-10, .qr_parallel = 6e-11, .fft = 1e-9, .svd = 3.5e-9, .values = 1.0e-9, .eig = 1.5e-9, .gemm = 5e-11,
                         .stream = 2e-10, .period2 = 2e-9, .period1 = 2e-6, .pair = 2e-8, .render = 1e-6,
                         .overhead = 3e-3};

/* The probes' width (es_cost_calibrate's d), and the width at which the TSQR's panel work per n r^2
 * equals its trailing updates' (tsqr_rate). */
#define PROBE_WIDTH 256.0
#define TSQR_PANEL 380.0

/* Bytes of the TSQR's working blocks (es_svd_* read TSQR_BLOCK items at a time). */
#define BLOCK_ITEMS 1024.0
/* Bytes per rendered number: the table's double, the JSON tree's node and the text. */
#define BYTES_PER_OUTPUT (8.0 + 64.0 + ES_BYTES_PER_NUMBER)

/* ---------------------------------------------------------------- terms */

static double slowdown_now(void);

/* seconds more at the rates (a quiet machine's), spent in the progress loop `pass` (-1: in none), as long
 * as the machine's load now makes them (slowdown_now). */
static void spend(es_cost *c, int pass, double seconds)
{
    seconds *= slowdown_now();
    c->seconds += seconds;
    if (pass >= 0)
        c->pass_seconds[pass] += seconds;
}

/* See cost.h. */
void es_cost_add(es_cost *a, const es_cost *b)
{
    a->seconds += b->seconds;
    a->bytes += b->bytes;
    for (int i = 0; i < ES_PASS_COUNT; i++)
        a->pass_seconds[i] += b->pass_seconds[i];
}

/* The TSQR's rate for an n x d block: the parallel one when it is split into
 * chunks (a request's TSQR at 50257 x 768 runs 12 chunks on the cores), the
 * single TSQR's otherwise (a small block, and the probe that measures it). */
static double tsqr_rate(size_t n, size_t d)
{
    double rate = es_tsqr_chunks(n >= d ? n : d, n >= d ? d : n) > 1 ? rates.qr_parallel : rates.qr;
    /* per n r^2 the TSQR costs less the wider the block: its panel factorisations (BLAS-2, ~n r nb) weigh
     * against the trailing updates (BLAS-3, n r^2) as TSQR_PANEL / r. Measured in CPU seconds on one core
     * (Zen, OpenBLAS 0.3.21): 2.11, 1.41, 1.27e-10 s per n r^2 at r = 256, 512, 768, which 1 + 380 / r
     * fits within 5 %; the probes are 256 wide, so 50257 x 768 was predicted ~1.7x its TSQR's time. */
    double r = (double)(n < d ? n : d), shape = (1.0 + TSQR_PANEL / r) / (1.0 + TSQR_PANEL / PROBE_WIDTH);
    return rate * (shape < 0.5 ? 0.5 : shape > 2.0 ? 2.0 : shape);
}

/* The exact decomposition's terms at the rates, without the correction observed requests make. */
static void svd_terms(es_cost *c, size_t n, size_t d)
{
    double N = (double)n, D = (double)d, tall = N >= D ? N : D, r = N < D ? N : D;
    spend(c, ES_PASS_TSQR, tsqr_rate(n, d) * tall * r * r);
    spend(c, ES_PASS_LAPACK, rates.svd * r * r * r);
    spend(c, ES_PASS_SCAN, rates.stream * 8.0 * N * D);
    /* a wide block is transposed (one copy); R, its bidiagonal reflectors, V_B, vt, work */
    c->bytes += 8.0 * ((N < D ? N * D : 0) + 6.0 * r * r + 2.0 * BLOCK_ITEMS * D);
}

/* The values alone: the same QR (none for a nearly square block), then the
 * values of the r x r factor. */
static void cost_values(es_cost *c, size_t n, size_t d)
{
    double N = (double)n, D = (double)d, tall = N >= D ? N : D, r = N < D ? N : D;
    bool square = tall < 1.4 * r;
    spend(c, ES_PASS_TSQR, square ? 0 : tsqr_rate(n, d) * tall * r * r);
    spend(c, ES_PASS_LAPACK, rates.values * r * r * (square ? tall : r));
    spend(c, ES_PASS_SCAN, rates.stream * 8.0 * N * D);
    c->bytes += 8.0 * ((N < D || square ? N * D : 0) + 3.0 * r * r + 2.0 * BLOCK_ITEMS * D);
}

/* The certified top K of a tall block (linalg/topk.c): the Gram matrix, its
 * top eigenpairs, one Rayleigh-Ritz step and the certificate's passes. */
static void cost_topk(es_cost *c, size_t n, size_t d, size_t k)
{
    double N = (double)n, D = (double)d, K = (double)k + 1;
    spend(c, ES_PASS_GRAM, rates.gemm * N * D * D);
    spend(c, ES_PASS_PROJECT, rates.gemm * (8.0 * N * D * K + 4.0 * N * K * K));
    spend(c, ES_PASS_LAPACK, rates.eig * D * D * D);
    spend(c, ES_PASS_SCAN, rates.stream * 16.0 * N * D);
    c->bytes += 8.0 * (2.0 * D * D + 4.0 * N * K + 2.0 * BLOCK_ITEMS * D);
}

/* The decomposition by `method` (resolved; K for top-k) at the rates, without the correction. */
static void decomposition_terms(es_cost *c, es_method method, size_t n, size_t d, size_t k)
{
    if (method == ES_METHOD_TOPK && n >= d && k < (n < d ? n : d))
        cost_topk(c, n, d, es_topk_size(k, d));
    else if (method == ES_METHOD_VALUES)
        cost_values(c, n, d);
    else
        svd_terms(c, n, d);
}

static double correction_of(es_method method);

/* c += the decomposition's terms times the correction observed requests of its method make. */
static void add_decomposition(es_cost *c, es_method method, size_t n, size_t d, size_t k)
{
    es_cost own = {0};
    decomposition_terms(&own, method, n, d, k);
    double f = correction_of(method);
    own.seconds *= f;
    for (int i = 0; i < ES_PASS_COUNT; i++)
        own.pass_seconds[i] *= f;
    es_cost_add(c, &own);
}

/* See cost.h. */
void es_cost_svd(es_cost *c, size_t n, size_t d) { add_decomposition(c, ES_METHOD_EXACT, n, d, 0); }

/* See cost.h. */
void es_cost_decompose(es_cost *c, es_method asked, size_t n, size_t d, size_t k)
{
    es_method method = k == 0 && asked != ES_METHOD_VALUES ? ES_METHOD_EXACT : es_method_resolve(asked, n, d, k);
    add_decomposition(c, method, n, d, k);
}

/* See cost.h. */
void es_cost_products(es_cost *c, size_t d, size_t a, size_t b)
{
    spend(c, -1, rates.gemm * 2.0 * (double)d * (double)a * (double)b);
    c->bytes += 8.0 * (double)a * (double)b;
}

/* See cost.h. */
void es_cost_project(es_cost *c, size_t n, size_t d, size_t k)
{
    spend(c, ES_PASS_PROJECT, rates.gemm * 2.0 * (double)n * (double)d * (double)k + rates.stream * 8.0 * (double)n * (double)d);
    c->bytes += 8.0 * (double)n * (double)k;
}

/* See cost.h. */
void es_cost_pass(es_cost *c, size_t n, size_t d)
{
    spend(c, ES_PASS_SCAN, rates.stream * 8.0 * (double)n * (double)d);
    c->bytes += 8.0 * BLOCK_ITEMS * (double)d;
}

/* See cost.h. */
void es_cost_gram(es_cost *c, size_t n, size_t d)
{
    double N = (double)n, D = (double)d;
    spend(c, -1, rates.gemm * 2.0 * N * N * D + rates.pair * N * N);
    c->bytes += 8.0 * (N * N + N * D);
}

/* See cost.h. */
void es_cost_cosine(es_cost *c, size_t n, size_t d, bool upper)
{
    double N = (double)n, D = (double)d, share = upper ? 0.5 : 1.0, block = N * N < 4194304.0 ? N * N : 4194304.0;
    spend(c, ES_PASS_COSINE, share * (rates.gemm * 2.0 * N * N * D + rates.pair * N * N) + rates.stream * 16.0 * N * D);
    c->bytes += 8.0 * (N * D + block);
}

/* See cost.h: the direct sums' upper triangle, or the FFT's d transforms of length N
 * (plus the normalised copy and the few-pair tail's dgemm, about a pass each). */
void es_cost_cosine_offset(es_cost *c, const size_t *idx, size_t n, size_t d)
{
    size_t N;
    if (es_cosine_offset_method(idx, n, d, &N) == ES_OFFSET_DIRECT) {
        es_cost_cosine(c, n, d, true);
        return;
    }
    double D = (double)d, L = (double)N;
    spend(c, ES_PASS_COSINE, rates.fft * D * L * log2(L) + rates.stream * 48.0 * (double)n * D);
    c->bytes += 8.0 * ((double)n * D + 17.0 * L * (double)es_blas_job_threads() + (D / 16.0 + 1.0) * L / 2.0);
}

/* Seconds per edge and epoch of UMAP's layout (an attractive move and its share of
 * the 5 negative samples; measured on 50257 x 768, ~2 edges sampled per epoch in 3). */
#define UMAP_EDGE_EPOCH_S 4e-8

/* See cost.h. */
void es_cost_umap(es_cost *c, size_t n, size_t d, size_t n_neighbors, size_t epochs)
{
    double N = (double)n, D = (double)d, block = N * N < 13107200.0 ? N * N : 13107200.0;
    /* each pair's product once (N^2 / 2), in float32 at about twice dgemm's rate */
    spend(c, ES_PASS_KNN, rates.gemm * 0.5 * N * N * D + rates.pair * N * N + rates.stream * 16.0 * N * D);
    spend(c, ES_PASS_LAYOUT, UMAP_EDGE_EPOCH_S * 2.0 * N * (double)n_neighbors * (double)epochs);
    c->bytes += 8.0 * (N * D + block) + 40.0 * N * (double)n_neighbors;
}

/* See cost.h. */
void es_cost_periodicity(es_cost *c, size_t n, size_t k)
{
    double N = (double)n;
    spend(c, ES_PASS_PERIODOGRAM, (double)k * (rates.period2 * N * N + rates.period1 * N));
    c->bytes += 8.0 * (4.0 * N + N / 2);
}

/* See cost.h. */
void es_cost_output(es_cost *c, double numbers)
{
    spend(c, -1, rates.render * numbers);
    c->bytes += BYTES_PER_OUTPUT * numbers;
}

/* See cost.h. */
void es_cost_grid(es_cost *c, size_t bins, size_t rows, size_t cols)
{
    es_cost_output(c, bins ? (double)bins * (double)bins : (double)rows * (double)cols);
}

/* See cost.h. */
void es_cost_attention_layer(es_cost *c, size_t q_start, size_t q_stop, size_t d, size_t n_heads)
{
    double q = (double)q_stop, nq = (double)(q_stop - q_start), D = (double)d;
    spend(c, -1, rates.gemm * (4.0 * q * D * D + 2.0 * nq * q * D) + rates.stream * (8.0 * q * D + 64.0 * nq * q * (double)n_heads));
    c->bytes += 8.0 * (4.0 * q * D + nq * q * (double)n_heads);
}

/* See cost.h. */
void es_cost_request(es_cost *c)
{
    spend(c, -1, rates.overhead);
}

/* ---------------------------------------------------------------- the load, and observed requests */

/* Predictions follow the machine (issue 33 §5). The rates are a quiet machine's: the calibration's wall
 * times divided by the slowdown it ran under (es_cost_calibrate: the time its thread waited for a core,
 * from the scheduler's statistics, and the load average), so a start during a burst of load does not
 * price the requests after it at that burst. A
 * prediction is made for the load at its moment: the rates times s(L) = max(1, L / cores), the share of
 * a core each runnable thread gets, L the kernel's one-minute load average (re-read at most once a
 * second). Not the calibration's measured slowdown: its short probes, often woken, wait less for a core
 * than a long computation does (6.4-11.2 measured at load 23-29 on 2 cores, where the 50257 x 768
 * values ran 11-27 times their quiet time and L / cores was 11.5-14.7). And each decomposition the cache computes is compared with what these would
 * have predicted for it: the median ratio of the last OBSERVED of its method (exact, values, top-k)
 * multiplies its later predictions, so a model term that is off for the served shapes (the TSQR's rate
 * at d = 768 against the 2048 x 256 probe's), or a load the formula misjudges, is corrected within a
 * few requests, and one odd run moves nothing. Before es_cost_calibrate (unit tests) the load is not
 * read: predictions are the defaults' alone, and observations still correct them. */
#define OBSERVED 5
/* A correction stays within [1 / CORRECTION_MAX, CORRECTION_MAX]: beyond it the model is wrong, not off. */
#define CORRECTION_MAX 8.0

static pthread_mutex_t follow_lock = PTHREAD_MUTEX_INITIALIZER;
static bool following_load; /* calibrated: predictions scale with the load */
static double load_read_at = -1e9, load_slowdown = 1.0, load_last = -1;
static struct observed {
    double log_ratio[OBSERVED]; /* log(observed / predicted) of the last ones, a ring */
    unsigned count, next;
    double correction;          /* exp of their median */
} observed[ES_METHOD_TOPK + 1] = {{.correction = 1}, {.correction = 1}, {.correction = 1}, {.correction = 1}};

/* The one-minute load average, or -1 when /proc/loadavg cannot be read. */
static double read_load(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double load = -1;
    if (f) {
        if (fscanf(f, "%lf", &load) != 1)
            load = -1;
        fclose(f);
    }
    return load;
}

/* How much longer a computation takes at load L than on the idle machine: each runnable thread gets
 * cores / L of a core once the runnable tasks outnumber the cores (the machine's: the load is too). */
static double slowdown_at(double load)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    double cores = online > 0 ? (double)online : 1.0;
    return load > cores ? load / cores : 1.0;
}

/* The slowdown predictions are made for now (1 before the calibration). */
static double slowdown_now(void)
{
    pthread_mutex_lock(&follow_lock);
    if (following_load) {
        double now = es_now();
        if (now - load_read_at >= 1.0) {
            load_read_at = now;
            load_last = read_load();
            load_slowdown = load_last >= 0 ? slowdown_at(load_last) : rates.calibration_slowdown;
        }
    }
    double s = following_load ? load_slowdown : 1.0;
    pthread_mutex_unlock(&follow_lock);
    return s;
}

/* The median of n values (n <= MEDIAN_MAX; the calibration's runs, the observations), copied: the
 * middle one, or the mean of the middle two. */
#define MEDIAN_MAX 8
static double median_copy(const double *v, unsigned n)
{
    double w[MEDIAN_MAX];
    memcpy(w, v, n * sizeof *w);
    for (unsigned i = 1; i < n; i++)
        for (unsigned j = i; j > 0 && w[j - 1] > w[j]; j--) {
            double t = w[j];
            w[j] = w[j - 1];
            w[j - 1] = t;
        }
    return n % 2 ? w[n / 2] : 0.5 * (w[n / 2 - 1] + w[n / 2]);
}

static double correction_of(es_method method)
{
    pthread_mutex_lock(&follow_lock);
    double f = observed[method].correction;
    pthread_mutex_unlock(&follow_lock);
    return f;
}

/* See cost.h. */
void es_cost_observe(es_method method, size_t n, size_t d, size_t k, double seconds)
{
    if (method > ES_METHOD_TOPK || !(seconds > 0) || !isfinite(seconds) || es_cost_rates_fixed())
        return;
    es_cost model = {0};
    decomposition_terms(&model, method, n, d, k); /* at the rates and the load now, uncorrected */
    if (!(model.seconds > 0))
        return;
    pthread_mutex_lock(&follow_lock);
    struct observed *o = &observed[method];
    o->log_ratio[o->next] = log(seconds / model.seconds);
    o->next = (o->next + 1) % OBSERVED;
    o->count += o->count < OBSERVED;
    double f = exp(median_copy(o->log_ratio, o->count)), load = load_last;
    o->correction = f > CORRECTION_MAX ? CORRECTION_MAX : f < 1.0 / CORRECTION_MAX ? 1.0 / CORRECTION_MAX : f;
    f = o->correction;
    unsigned count = o->count;
    pthread_mutex_unlock(&follow_lock);
    es_info("cost model: %s of %zu x %zu computed in %.3f s, the rates predicted %.3f s (load %.1f); its predictions "
            "now x%.2f (median of the last %u)", es_method_name(method), n, d, seconds, model.seconds, load, f, count);
}

/* Seconds this thread has run and waited for a core (runnable, not running) since it started, from
 * /proc/thread-self/schedstat. false when unreadable. */
static bool thread_sched(double *run, double *wait)
{
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    unsigned long long r = 0, w = 0;
    bool ok = f && fscanf(f, "%llu %llu", &r, &w) == 2;
    if (f)
        fclose(f);
    *run = (double)r * 1e-9;
    *wait = (double)w * 1e-9;
    return ok;
}

/* ---------------------------------------------------------------- calibration */

/* A deterministic n x d matrix of uniform entries in [-1, 1) (a 64-bit LCG). */
static es_matrix *probe_matrix(size_t n, size_t d)
{
    double *x = es_malloc(n * d * sizeof *x);
    unsigned long long state = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < n * d; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (double)(state >> 11) / 4503599627370496.0 - 1.0;
    }
    return es_matrix_from_data("calibration/probe", x, n, d, ES_AXIS_COLUMNS, NULL);
}

/* The item indices 0..n-1 (a selection of the first n items). Caller frees. */
static size_t *first_items(size_t n)
{
    size_t *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    return idx;
}

/* Wall seconds of one decomposition of the first n items of m (0 on failure). */
static double time_decomposition(const es_matrix *m, size_t n, es_method method, size_t k)
{
    size_t *idx = first_items(n);
    es_svd *s = NULL;
    es_err err;
    double t0 = es_now();
    int rc = method == ES_METHOD_TOPK     ? es_svd_topk(m, idx, n, ES_CENTER_COLUMNS, k, ES_TOPK_TOLERANCE, &s, &err)
             : method == ES_METHOD_VALUES ? es_svd_values(m, idx, n, ES_CENTER_COLUMNS, &s, &err)
                                          : es_svd_compute(m, idx, n, ES_CENTER_COLUMNS, &s, &err);
    double t = es_now() - t0;
    es_svd_release(s);
    free(idx);
    return rc == 0 ? t : 0;
}

/* Wall seconds of `threads` values decompositions of the first n items of m
 * run at once, one BLAS thread each: the parallel TSQR's setting (a chunk
 * per thread), contention for the cores and the memory included. 0 on failure. */
typedef struct par_probe {
    const es_matrix *m;
    size_t n;
    double seconds[64];
} par_probe;

static void par_probe_task(void *arg, size_t task)
{
    par_probe *p = arg;
    p->seconds[task] = time_decomposition(p->m, p->n, ES_METHOD_VALUES, 0);
}

static double time_parallel_values(const es_matrix *m, size_t n, size_t threads)
{
    par_probe p = {.m = m, .n = n};
    threads = threads > 64 ? 64 : threads;
    es_blas_one_begin();
    double t0 = es_now();
    es_par_for(threads, threads, par_probe_task, &p);
    double t = es_now() - t0;
    es_blas_one_end();
    for (size_t i = 0; i < threads; i++)
        if (p.seconds[i] <= 0)
            return 0;
    return t;
}

/* Seconds of cosine offsets by FFTs over the first n items of m. 0 on failure. */
static double time_offsets(const es_matrix *m, size_t n)
{
    size_t *idx = first_items(n);
    es_cosine_offset *o = NULL;
    es_err err;
    double t0 = es_now();
    int rc = es_cosine_by_offset_using(m, idx, n, ES_CENTER_NONE, ES_OFFSET_FFT, &o, &err);
    double t = es_now() - t0;
    es_cosine_offset_free(o);
    free(idx);
    return rc == 0 ? t : 0;
}

/* Seconds per flop of dgemm on square blocks of side n. */
static double time_gemm(size_t n)
{
    double *a = es_calloc(n * n, sizeof *a), *b = es_calloc(n * n, sizeof *b), *c = es_calloc(n * n, sizeof *c);
    for (size_t i = 0; i < n * n; i++)
        a[i] = b[i] = (double)(i % 7) - 3.0;
    double t0 = es_now();
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n, (blasint)n, (blasint)n, 1.0, a, (blasint)n, b,
                (blasint)n, 0.0, c, (blasint)n);
    double t = es_now() - t0;
    free(a);
    free(b);
    free(c);
    return t / (2.0 * (double)n * (double)n * (double)n);
}

/* Seconds of one component's periodicity (periodogram and fit) over n positions. */
static double time_period(size_t n)
{
    double *x = es_malloc(n * sizeof *x);
    for (size_t t = 0; t < n; t++)
        x[t] = sin(0.37 * (double)t) + 0.01 * (double)(t % 5);
    es_period p;
    es_err err;
    double t0 = es_now();
    es_period_estimate(x, n, 1, 1.0, 0.01, &p, &err);
    double t = es_now() - t0;
    free(x);
    return t;
}

/* Seconds per pair of the loops over an n x n Gram matrix (a Toeplitz score of n items of length d). */
static double time_pairs(size_t n, size_t d)
{
    es_matrix *m = probe_matrix(n, d);
    size_t *idx = first_items(n);
    es_toeplitz *t = NULL;
    es_err err;
    double t0 = es_now();
    int rc = es_toeplitz_compute(m, idx, n, ES_GRAM_COSINE, &t, &err);
    double seconds = es_now() - t0;
    es_toeplitz_free(t);
    free(idx);
    es_matrix_release(m);
    double N = (double)n;
    return rc == 0 ? (seconds - rates.gemm * 2.0 * N * N * (double)d) / (N * N) : 0;
}

/* The reply around the rendering (the table, the response cache's copy, the
 * socket) costs about as much again as the JSON text itself. */
#define REPLY_FACTOR 3.0

/* Seconds per number of rendering a grid of n numbers as JSON text (and the rest of the reply). */
static double time_render(size_t n)
{
    double t0 = es_now();
    es_jctx jc = {0};
    double *v = es_malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = 1.0 / (double)(i + 3);
    json_t *a = es_jgrid(&jc, "probe", v, n / 8, 8);
    char *body = NULL;
    size_t len;
    es_err err;
    es_json_body(a, 0, &body, &len, &err);
    free(body);
    json_decref(a);
    free(v);
    return REPLY_FACTOR * (es_now() - t0) / (double)n;
}

/* Seconds per byte of one pass over memory (a sum, as the scans do). */
static double time_stream(size_t bytes)
{
    size_t n = bytes / sizeof(double);
    double *x = es_malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (double)(i & 15);
    double t0 = es_now();
    volatile double ss = cblas_ddot((blasint)n, x, 1, x, 1);
    (void)ss;
    double t = es_now() - t0;
    free(x);
    return t / (double)bytes;
}

/* Keep a measured rate unless the measurement failed (0) or is absurd; a
 * rate left at its default counts in *fallbacks. */
static void keep(double *rate, double measured, unsigned *fallbacks)
{
    if (measured > 0 && isfinite(measured))
        *rate = measured;
    else
        ++*fallbacks;
}

/* Short runs per probe; each rate comes from the median of its runs (median_copy), so one
 * run slowed by another process (or one lucky run) does not set it. */
#define CALIBRATION_ROUNDS 5
_Static_assert(CALIBRATION_ROUNDS <= MEDIAN_MAX && OBSERVED <= MEDIAN_MAX, "median_copy's buffer");

/* See cost.h: the exact decompositions on two shapes separate the n d^2 and
 * d^3 terms; the values rate is timed alone on the square block, which
 * es_svd_values decomposes without a QR (cost_values' square case), so it is
 * never the difference of two noisy timings (that difference was negative,
 * and the rate left at its default, in most starts on a loaded machine). */
unsigned es_cost_calibrate(void)
{
    double t0 = es_now(), run0, wait0, run1, wait1;
    bool sched = thread_sched(&run0, &wait0);
    es_blas_job_begin(); /* a computation running alone: its share of the cores */
    const size_t d = (size_t)PROBE_WIDTH, tall = 2048, k = 16, threads = es_blas_job_threads();
    es_matrix *m = probe_matrix(tall, d);
    double sq_r[CALIBRATION_ROUNDS], tl_r[CALIBRATION_ROUNDS], vals_r[CALIBRATION_ROUNDS],
        top_r[CALIBRATION_ROUNDS], gemm_r[CALIBRATION_ROUNDS], ptl_r[CALIBRATION_ROUNDS], psq_r[CALIBRATION_ROUNDS],
        fft_r[CALIBRATION_ROUNDS];
    for (int round = 0; round < CALIBRATION_ROUNDS; round++) {
        sq_r[round] = time_decomposition(m, d, ES_METHOD_EXACT, 0);
        tl_r[round] = time_decomposition(m, tall, ES_METHOD_EXACT, 0);
        vals_r[round] = time_decomposition(m, d, ES_METHOD_VALUES, 0);
        top_r[round] = time_decomposition(m, tall, ES_METHOD_TOPK, k);
        gemm_r[round] = time_gemm(256);
        ptl_r[round] = time_parallel_values(m, tall, threads);
        psq_r[round] = time_parallel_values(m, d, threads);
        fft_r[round] = time_offsets(m, tall);
    }
    es_matrix_release(m);
    double sq = median_copy(sq_r, CALIBRATION_ROUNDS), tl = median_copy(tl_r, CALIBRATION_ROUNDS),
           vals = median_copy(vals_r, CALIBRATION_ROUNDS), top = median_copy(top_r, CALIBRATION_ROUNDS),
           gemm = median_copy(gemm_r, CALIBRATION_ROUNDS), ptl = median_copy(ptl_r, CALIBRATION_ROUNDS),
           psq = median_copy(psq_r, CALIBRATION_ROUNDS), fft = median_copy(fft_r, CALIBRATION_ROUNDS);
    double D = (double)d, N = (double)tall, d3 = D * D * D;
    unsigned fallbacks = 0;
    keep(&rates.gemm, gemm, &fallbacks);
    keep(&rates.stream, time_stream((size_t)16 << 20), &fallbacks);
    double qr = (tl - sq) / ((N - D) * D * D);
    keep(&rates.qr, qr, &fallbacks);
    /* threads TSQRs of N items at once in the time of the parallel TSQR of threads x N */
    keep(&rates.qr_parallel, ptl > 0 && psq > 0 ? (ptl - psq) / ((double)threads * N * D * D) : 0, &fallbacks);
    keep(&rates.svd, (sq - rates.qr * d3) / d3, &fallbacks);
    keep(&rates.values, vals / d3, &fallbacks);
    double L = 4096; /* the FFT's length for 2048 items */
    keep(&rates.fft, (fft - rates.stream * 48.0 * N * D) / (D * L * log2(L)), &fallbacks);
    double K = (double)es_topk_size(k, d) + 1;
    keep(&rates.eig, (top - rates.gemm * (N * D * D + 8.0 * N * D * K + 4.0 * N * K * K)) / d3, &fallbacks);
    double p1 = time_period(512), p2 = time_period(1536);
    double n2 = (p2 - p1 * 3.0) / (1536.0 * 1536.0 - 3.0 * 512.0 * 512.0);
    keep(&rates.period2, n2, &fallbacks);
    keep(&rates.period1, (p1 - rates.period2 * 512.0 * 512.0) / 512.0, &fallbacks);
    keep(&rates.render, time_render(20000), &fallbacks);
    keep(&rates.pair, time_pairs(1536, 8), &fallbacks);
    es_blas_job_end();
    rates.calibration_s = es_now() - t0;
    /* the slowdown the probes ran under, to divide the rates by: two noisy readings of it, the time this
     * thread (which ran most of them) waited for a core per second it ran, and the load average's
     * L / cores, which disagree by up to 2x either way at load 25-30 on 2 cores (6.4 against 13.7, 25.4
     * against 14.9): their geometric mean, or the one that could be read */
    sched = sched && thread_sched(&run1, &wait1) && run1 > run0;
    double load = read_load(), waited = sched ? 1.0 + (wait1 - wait0) / (run1 - run0) : 0,
           slowdown = sched && load >= 0 ? sqrt(waited * slowdown_at(load)) : sched ? waited : slowdown_at(load);
    if (!(slowdown >= 1.0) || !isfinite(slowdown))
        slowdown = 1.0;
    double *measured[] = {&rates.qr, &rates.qr_parallel, &rates.fft, &rates.svd, &rates.values, &rates.eig,
                          &rates.gemm, &rates.stream, &rates.period2, &rates.period1, &rates.pair, &rates.render};
    for (size_t i = 0; i < sizeof measured / sizeof *measured; i++)
        *measured[i] /= slowdown;
    rates.calibration_slowdown = slowdown;
    rates.calibration_load = load;
    pthread_mutex_lock(&follow_lock);
    following_load = true;
    load_read_at = -1e9;
    pthread_mutex_unlock(&follow_lock);
    es_info("cost model calibrated in %.3f s: dgemm %.2f Gflop/s, TSQR %.2e s/(n d^2) (parallel %.2e), offsets FFT "
            "%.2e s/(d N log2 N), dgesdd %.2e s/d^3, values "
            "%.2e s/d^3, top-k eig %.2e s/d^3, memory %.2f GB/s, periodogram %.2e s/n^2, Gram loops %.1f ns/pair, "
            "render %.0f ns/number; %u rates left at their defaults; slowdown %.2f (waits for a core %.2f), load "
            "%.1f: the rates divided by it", rates.calibration_s, 1e-9 / rates.gemm, rates.qr,
            rates.qr_parallel, rates.fft, rates.svd, rates.values,
            rates.eig, 1e-9 / rates.stream, rates.period2, rates.pair * 1e9, rates.render * 1e9, fallbacks, slowdown,
            waited, load);
    return fallbacks;
}

/* See cost.h. */
es_rates es_cost_current(void) { return rates; }

/* See cost.h: the defaults above, never measured. */
static bool rates_fixed;
void es_cost_fix_rates(void)
{
    rates_fixed = true;
    es_info("cost model: fixed rates (--cost-rates fixed), not calibrated: dgemm %.2f Gflop/s, TSQR %.2e s/(n d^2)",
            1e-9 / rates.gemm, rates.qr);
}
bool es_cost_rates_fixed(void) { return rates_fixed; }

/* See cost.h. */
json_t *es_cost_json(es_jctx *jc, const es_cost *c)
{
    json_t *o = json_object();
    json_object_set_new(o, "predicted_seconds", es_jnum(jc, "cost.predicted_seconds", c->seconds));
    json_object_set_new(o, "predicted_bytes", json_integer((json_int_t)c->bytes));
    return o;
}
