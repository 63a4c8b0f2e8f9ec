/* Mean cosine similarity by index offset (cosine?mode=offset): over the
 * selected items' unit-normalised rows x_a, for each offset k the mean of
 * x_a . x_b over the pairs a <= b with |idx[b] - idx[a]| = k (a = b included:
 * offset 0). Two methods give the same numbers:
 *
 *   direct  every pair's cosine (the cosine matrix a block of rows at a time,
 *           n^2 d / 2 multiply-adds through dgemm), summed per offset in long
 *           double. Kept for small selections, where it is the faster.
 *   fft     the rows placed at their positions p_a = (idx[a] - lo) / g (g the
 *           gcd of the distances: every offset is a multiple of it), zero
 *           elsewhere, so the sum for offset k is the autocorrelation at lag k
 *           of each column, summed over the d columns. Each column's power
 *           spectrum comes from a real-to-complex FFT (FFTW) of length N >=
 *           2 L - 1 (L positions: no wrap-around), the spectra are summed
 *           (blocks of FFT_COLUMNS columns on the computation's threads, one
 *           plan executed on each column's contiguous zero-padded buffer:
 *           4x faster than a batched interleaved plan), and one inverse
 *           transform in long double gives every offset's sum: O(d N log N).
 *           No normalised copy of the selection is made: each block's columns
 *           are read from the matrix and normalised in the same pass
 *           (es_matrix_items_columns_scaled) with the rows' norms, which come
 *           from the derived store (uncentred: the whole matrix's, kept for
 *           every selection of it), the matrix's storage on huge pages.
 *           The few-pair tail (below) is a few dgemms of the items near the two
 *           ends (the head in chunks, each against the ends it can pair with).
 *           The pair counts are n - k for a permutation of positions, else the
 *           autocorrelation of the positions' multiplicities, the same way,
 *           rounded (exact: their error bound is checked below 1/4).
 *
 * Error bound of the fft method (docs/api.md). With u the double and u_L the
 * long double unit roundoff and delta = ceil(log2 N) * 8u the normwise
 * relative error of a computed FFT (Higham, Accuracy and Stability of
 * Numerical Algorithms, 2nd ed., Thm 24.2: log2 N stages of eta = mu +
 * gamma_4 (sqrt 2 + mu) ~ 6.7u each, taken as 8u for FFTW's mixed radices):
 * a column's spectrum X + E has |E|_2 <= delta |X|_2 and |X|_2^2 = N |x_j|^2,
 * so its power spectrum's error, inverse-transformed, moves any one lag by at
 * most (1/N) sum_m |dP_m| <= (2 delta + delta^2 + 2u) |x_j|^2; summing d columns
 * (FFT_COLUMNS at a time in double, then in long double) adds
 * (FFT_COLUMNS + 1) u sum_j |x_j|^2, and the long-double inverse
 * delta_L |S|_2 <= delta_L sqrt(2) |pairs|_2 (|S_k| <= pairs_k for unit rows).
 * With sum_j |x_j|^2 = sum_a |x_a|^2 <= (1 + 4 (d + 6) u) x the nonzero rows
 * (row_square_slack: bounded before the rows are formed), every offset's
 * sum is off by at most B, its mean by B / pairs_k + 2u. Offsets where that
 * exceeds OFFSET_TOLERANCE (the few-pair tail at large offsets) are summed
 * directly, like the direct method (bound gamma_{d+2}), so the bound stated
 * in the reply (error_bound, the largest over the offsets) is at most
 * OFFSET_TOLERANCE. The bound is of the arithmetic on the normalised rows; the
 * direct method's own is gamma_{d+2} (each pair's dot product). */
#include "analysis/internal.h"
#include "embedscope/blas.h"

#include <cblas.h>
#include <fftw3.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Columns per batched FFT plan (one block of work): 16 columns of a
 * 100k-point transform are 13 MB of input and as much output per thread. */
#define FFT_COLUMNS 16
/* Largest error of a mean the fft method leaves to its bound; offsets whose
 * bound is larger are summed directly (issue 33: exact to 1e-12). */
#define OFFSET_TOLERANCE 1e-12
/* Below this many selected items the direct method runs (auto): measured on
 * the 2-core machine, the FFT's fixed costs (planning, the long-double
 * transforms, the tail) are not repaid below a few hundred rows. */
#define FFT_MIN_ITEMS 512

/* FFTW's planner is not thread-safe (its execution is): every plan is made and
 * destroyed under this lock. */
static pthread_mutex_t planner = PTHREAD_MUTEX_INITIALIZER;

/* The number of indices from the smallest of idx (n >= 1, into *lo) to the largest. */
static size_t index_span(const size_t *idx, size_t n, size_t *lo)
{
    size_t hi = idx[0];
    *lo = idx[0];
    for (size_t i = 1; i < n; i++) {
        *lo = idx[i] < *lo ? idx[i] : *lo;
        hi = idx[i] > hi ? idx[i] : hi;
    }
    return hi - *lo + 1;
}

/* seen |= set shifted down by p bits (words 64-bit words each): the offsets
 * from position p to every position of set at or after it. */
static void or_shifted_down(uint64_t *seen, const uint64_t *set, size_t words, size_t p)
{
    size_t q = p / 64, r = p % 64, last = words - q - 1;
    const uint64_t *from = set + q;
    if (r == 0) {
        for (size_t k = 0; k <= last; k++)
            seen[k] |= from[k];
        return;
    }
    for (size_t k = 0; k < last; k++) /* branch-free, so the compiler vectorises it */
        seen[k] |= from[k] >> r | from[k + 1] << (64 - r);
    seen[last] |= from[last] >> r;
}

static size_t count_bits(const uint64_t *set, size_t words)
{
    size_t count = 0;
    for (size_t k = 0; k < words; k++)
        count += (size_t)__builtin_popcountll(set[k]);
    return count;
}

/* See analysis.h. The positions in ascending order, each adding its offsets
 * to the later ones; every 64 positions, a stop once all span offsets are seen. */
size_t es_cosine_offset_count(const size_t *idx, size_t n)
{
    size_t lo, span = index_span(idx, n, &lo), words = (span + 63) / 64;
    uint64_t *set = es_calloc(words, sizeof *set), *seen = es_calloc(words, sizeof *seen);
    for (size_t i = 0; i < n; i++)
        set[(idx[i] - lo) / 64] |= (uint64_t)1 << (idx[i] - lo) % 64;
    size_t count = 0, done = 0;
    for (size_t p = 0; p < span && count < span; p++) {
        if (!(set[p / 64] >> p % 64 & 1))
            continue;
        or_shifted_down(seen, set, words, p);
        if (++done % 64 == 0)
            count = count_bits(seen, words);
    }
    count = count_bits(seen, words);
    free(set);
    free(seen);
    return count;
}

/* Greatest common divisor (gcd(0, b) = b). */
static size_t gcd(size_t a, size_t b)
{
    while (a) {
        size_t t = b % a;
        b = a;
        a = t;
    }
    return b;
}

/* See analysis.h: the offsets are multiples of g, the gcd of the positions'
 * distances to the lowest, below the span, and the pairs a < b number n(n-1)/2
 * (offset 0 comes with them); exactly when n x span / 64 fits the budget. */
size_t es_cosine_offset_bound(const size_t *idx, size_t n, size_t budget, bool *exact)
{
    size_t lo, span = index_span(idx, n, &lo), g = 0;
    if (n <= budget / ((span + 63) / 64)) {
        *exact = true;
        return es_cosine_offset_count(idx, n);
    }
    for (size_t i = 0; i < n && g != 1; i++)
        g = gcd(idx[i] - lo, g);
    size_t multiples = g ? (span - 1) / g + 1 : 1, pairs = n % 2 ? (n - 1) / 2 * n : n / 2 * (n - 1);
    *exact = false;
    return multiples < pairs + 1 ? multiples : pairs + 1;
}


/* The items' places on the offset axis: item a at pos[a] = (idx[a] - lo) / g,
 * g the gcd of the distances to the lowest index (every offset is a multiple
 * of it), positions 0 .. len - 1. */
typedef struct positions {
    size_t g, len;
    size_t *pos; /* NULL when only g and len were asked for */
} positions;

static void positions_of(const size_t *idx, size_t n, bool each, positions *p)
{
    size_t lo, span = index_span(idx, n, &lo), g = 0;
    for (size_t i = 0; i < n && g != 1; i++)
        g = gcd(idx[i] - lo, g);
    p->g = g ? g : 1;
    p->len = (span - 1) / p->g + 1;
    p->pos = NULL;
    if (each) {
        p->pos = es_malloc(n * sizeof *p->pos);
        for (size_t i = 0; i < n; i++)
            p->pos[i] = (idx[i] - lo) / p->g;
    }
}

/* The smallest N >= m of the form 2^a 3^b 5^c 7^e (FFTW's fast lengths); 0
 * past 2^40 (no such transform is made). */
static size_t smooth_length(size_t m)
{
    if (m > (size_t)1 << 40)
        return 0;
    size_t best = (size_t)1 << 42;
    for (size_t a = 1; a < best; a *= 2)
        for (size_t b = a; b < best; b *= 3)
            for (size_t c = b; c < best; c *= 5)
                for (size_t e = c; e < best; e *= 7)
                    if (e >= m) {
                        best = e;
                        break;
                    }
    return best;
}

/* The transforms' length for len positions: the linear autocorrelation's
 * 2 len - 1 lags without wrap-around. */
static size_t fft_length(size_t len) { return smooth_length(2 * len - 1); }

/* Work of each method in dgemm multiply-adds: the direct method's n^2 d / 2;
 * an FFT costs about 2.5 N log2 N flops a column at a few times lower speed
 * than dgemm, plus its memory passes (FFT_WEIGHT, measured at 50257 x 768). */
#define FFT_WEIGHT 12.0
static double direct_work(size_t n, size_t d) { return 0.5 * (double)n * (double)n * (double)d; }
static double fft_work(size_t N, size_t d) { return FFT_WEIGHT * (double)d * (double)N * log2((double)N); }

/* See analysis.h. */
es_offset_method es_cosine_offset_method(const size_t *idx, size_t n, size_t d, size_t *length)
{
    positions p;
    positions_of(idx, n, false, &p);
    size_t N = fft_length(p.len);
    *length = 0;
    if (n < FFT_MIN_ITEMS || N == 0 || N > INT_MAX / FFT_COLUMNS || fft_work(N, d) >= direct_work(n, d))
        return ES_OFFSET_DIRECT;
    *length = N;
    return ES_OFFSET_FFT;
}

/* ---------------------------------------------------------------- direct */

/* sum[k] and pairs[k] over the pairs a <= b at |pos[b] - pos[a]| = k: the
 * upper triangle of the cosine matrix, a block of rows at a time. ES_E_NOMEM
 * for the block; stops when the computation must (es_progress_check). */
static int sums_direct(const double *x, size_t n, size_t d, const positions *p, long double *sum, size_t *pairs,
                       es_err *err)
{
    size_t step = es_cosine_block_rows(n);
    double *g = es_alloc_doubles(step, n, "cosine matrix block", err);
    if (!g)
        return -1;
    int rc = 0;
    es_progress_begin("cosine", (n + step - 1) / step);
    for (size_t a0 = 0; a0 < n && (rc = es_progress_check(err)) == 0; a0 += step) {
        size_t a1 = n - a0 < step ? n : a0 + step, w = n - a0;
        es_progress_step();
        es_cosine_block(x, n, d, a0, a1, a0, g);
        for (size_t a = a0; a < a1; a++)
            for (size_t b = a; b < n; b++) {
                size_t off = p->pos[b] > p->pos[a] ? p->pos[b] - p->pos[a] : p->pos[a] - p->pos[b];
                sum[off] += g[(a - a0) * w + (b - a0)];
                pairs[off]++;
            }
    }
    free(g);
    return rc;
}

/* ---------------------------------------------------------------- fft */

/* The normwise relative error of a computed FFT of length N in a format of
 * unit roundoff u (the header's delta). */
static double fft_delta(size_t N, double u) { return ceil(log2((double)N)) * 8.0 * u; }

/* pairs[k] (k < len) from the positions' multiplicities: their
 * autocorrelation by a long-double FFT of length N, rounded, and pairs[0] =
 * (sum of squared multiplicities + n) / 2 exactly. *norm = the pairs' l2 norm
 * over every lag, both signs. False when the rounding's bound is not below 1/4. */
static bool pair_counts(const positions *p, size_t n, size_t N, size_t *pairs, long double *norm)
{
    bool each_once = p->len == n; /* n items at n positions, each once (a permutation) */
    if (each_once) {
        char *seen = es_calloc(n, 1);
        for (size_t a = 0; each_once && a < n; a++)
            each_once = !seen[p->pos[a]]++;
        free(seen);
    }
    if (each_once) { /* pairs[k] = n - k exactly, no transform */
        long double sq = (long double)n * (long double)n;
        pairs[0] = n;
        for (size_t k = 1; k < n; k++) {
            pairs[k] = n - k;
            sq += 2 * (long double)(n - k) * (long double)(n - k);
        }
        *norm = sqrtl(sq);
        return true;
    }
    size_t half = N / 2 + 1;
    long double *r = fftwl_alloc_real(N);
    fftwl_complex *sp = fftwl_alloc_complex(half);
    pthread_mutex_lock(&planner);
    fftwl_plan fwd = fftwl_plan_dft_r2c_1d((int)N, r, sp, FFTW_ESTIMATE);
    fftwl_plan inv = fftwl_plan_dft_c2r_1d((int)N, sp, r, FFTW_ESTIMATE);
    pthread_mutex_unlock(&planner);
    memset(r, 0, N * sizeof *r);
    for (size_t a = 0; a < n; a++)
        r[p->pos[a]] += 1;
    long double squares = 0; /* sum of squared multiplicities: exact integers */
    for (size_t q = 0; q < p->len; q++)
        squares += r[q] * r[q];
    fftwl_execute(fwd);
    long double *v = (long double *)sp; /* re, im pairs, whichever type fftwl_complex is */
    for (size_t m = 0; m < half; m++) {
        v[2 * m] = v[2 * m] * v[2 * m] + v[2 * m + 1] * v[2 * m + 1];
        v[2 * m + 1] = 0;
    }
    fftwl_execute(inv); /* r[k] = N x the autocorrelation at lag k */
    long double sq = squares * squares, worst = 0;
    pairs[0] = (size_t)((squares + (long double)n) / 2);
    for (size_t k = 1; k < p->len; k++) {
        long double lag = r[k] / (long double)N, c = roundl(lag);
        worst = fmaxl(worst, fabsl(lag - c));
        pairs[k] = (size_t)c;
        sq += 2 * c * c;
    }
    *norm = sqrtl(sq);
    double uL = LDBL_EPSILON / 2, dL = fft_delta(N, uL);
    long double bound = (2 * dL + dL * dL + 2 * uL) * squares + dL * sqrtl(2) * *norm;
    pthread_mutex_lock(&planner);
    fftwl_destroy_plan(fwd);
    fftwl_destroy_plan(inv);
    pthread_mutex_unlock(&planner);
    fftwl_free(r);
    fftwl_free(sp);
    return bound < 0.25L && worst < 0.25L;
}

/* How each selected item becomes a unit row without a normalised copy of the
 * selection: item r's coordinate j is (x_rj - mean_j) * scale[r] (columns
 * centring), (x_rj - shift[r]) * scale[r] (rows) or x_rj * scale[r] (none),
 * scale[r] = 1 / the centred row's norm (0 for a zero row). A row whose norm
 * is below TINY_NORM (its squares underflow) has scale 0 and its normalised
 * values kept whole, scaled by its largest element first (es_normalise_rows). */
#define TINY_NORM 1e-150 /* cosine.c's */

typedef struct row_scales {
    es_centering c;
    size_t n, d;
    const double *mean;     /* columns centring: the selection's mean row (d), else NULL */
    double *shift;          /* rows centring: each item's row mean (n), else NULL */
    double *scale;          /* n */
    size_t ntiny, *tiny;    /* the tiny rows (items) and their values (ntiny x d) */
    size_t *tiny_of;        /* n when there are tiny rows: item r's place in tiny, or SIZE_MAX */
    double *tiny_rows;
    size_t nonzero;         /* items with a nonzero centred row */
    const es_derived *kept; /* the derived store's entry the mean came from, held */
    double *own_mean;
} row_scales;

static void scales_free(row_scales *s)
{
    es_derived_release(s->kept);
    free(s->own_mean);
    free(s->shift);
    free(s->scale);
    free(s->tiny);
    free(s->tiny_of);
    free(s->tiny_rows);
}

/* s->tiny_of from s->tiny. */
static void tiny_index(row_scales *s)
{
    if (!s->ntiny)
        return;
    s->tiny_of = es_malloc(s->n * sizeof *s->tiny_of);
    for (size_t r = 0; r < s->n; r++)
        s->tiny_of[r] = SIZE_MAX;
    for (size_t t = 0; t < s->ntiny; t++)
        s->tiny_of[s->tiny[t]] = t;
}

/* Centre len copied items (rows r0 .. r0 + len - 1 of the selection) as s says. */
static void centre_rows(const row_scales *s, double *x, size_t r0, size_t len)
{
    size_t d = s->d;
    for (size_t i = 0; i < len; i++)
        for (size_t j = 0; j < d; j++)
            x[i * d + j] -= s->c == ES_CENTER_COLUMNS ? s->mean[j] : s->c == ES_CENTER_ROWS ? s->shift[r0 + i] : 0.0;
}

/* One item's normalised coordinates from its copy (d doubles, in place). */
static void normalise_copy(const row_scales *s, size_t r, double *row)
{
    size_t d = s->d;
    if (s->ntiny && s->tiny_of[r] != SIZE_MAX) {
        memcpy(row, s->tiny_rows + s->tiny_of[r] * d, d * sizeof *row);
        return;
    }
    double sub = s->c == ES_CENTER_ROWS ? s->shift[r] : 0.0, k = s->scale[r];
    for (size_t j = 0; j < d; j++)
        row[j] = (row[j] - (s->c == ES_CENTER_COLUMNS ? s->mean[j] : sub)) * k;
}

/* The scales of the n selected items: the mean and the norms from the derived
 * store when a request kept them (cosine?row=i of the same selection), else
 * measured here a block at a time (no whole copy) and kept; rows centring
 * measures its row means here. */
static void scales_at(const es_matrix *m, const size_t *idx, size_t n, es_centering c, row_scales *s);

static void scales_of(const es_matrix *m, const size_t *idx, size_t n, es_centering c, row_scales *s)
{
    size_t d = es_matrix_dim(m), items = es_matrix_items(m);
    *s = (row_scales){.c = c, .n = n, .d = d};
    if (c == ES_CENTER_NONE && n >= items / 2) {
        /* uncentred norms do not depend on the selection: the whole matrix's,
         * kept once for every selection of it (most of it: not many more rows) */
        size_t *all = es_malloc(items * sizeof *all);
        for (size_t i = 0; i < items; i++)
            all[i] = i;
        row_scales whole;
        scales_at(m, all, items, c, &whole);
        free(all);
        *s = (row_scales){.c = c, .n = n, .d = d, .scale = es_malloc(n * sizeof *s->scale)};
        for (size_t r = 0; r < n; r++) {
            s->scale[r] = whole.scale[idx[r]];
            s->nonzero += whole.scale[idx[r]] > 0;
        }
        for (size_t r = 0; whole.ntiny && r < n; r++) /* the selection's tiny rows */
            if (whole.tiny_of[idx[r]] != SIZE_MAX) {
                s->tiny = es_realloc(s->tiny, (s->ntiny + 1) * sizeof *s->tiny);
                s->tiny_rows = es_realloc(s->tiny_rows, (s->ntiny + 1) * d * sizeof *s->tiny_rows);
                memcpy(s->tiny_rows + s->ntiny * d, whole.tiny_rows + whole.tiny_of[idx[r]] * d,
                       d * sizeof *s->tiny_rows);
                s->tiny[s->ntiny++] = r;
                s->nonzero++;
            }
        tiny_index(s);
        scales_free(&whole);
        return;
    }
    scales_at(m, idx, n, c, s);
}

/* scales_of for the selection itself (its own key in the derived store). */
static void scales_at(const es_matrix *m, const size_t *idx, size_t n, es_centering c, row_scales *s)
{
    size_t d = es_matrix_dim(m);
    *s = (row_scales){.c = c, .n = n, .d = d};
    char *key = es_derived_key(m, idx, n, c);
    s->kept = es_derived_find(key);
    const double *norms = s->kept ? s->kept->norms : NULL;
    double *measured = NULL;
    if (c == ES_CENTER_COLUMNS) {
        if (!s->kept) {
            s->own_mean = es_malloc(d * sizeof *s->own_mean);
            es_selection_mean(m, idx, n, s->own_mean);
        }
        s->mean = s->kept ? s->kept->mean : s->own_mean;
    }
    if (c == ES_CENTER_ROWS)
        s->shift = es_malloc(n * sizeof *s->shift);
    if (!norms || c == ES_CENTER_ROWS) { /* one pass: the row means, the norms */
        if (!norms)
            norms = measured = es_malloc(n * sizeof *measured);
        for (size_t at = 0; at < n; at += ES_STREAM_ITEMS) {
            size_t len = n - at < ES_STREAM_ITEMS ? n - at : ES_STREAM_ITEMS;
            double *block = es_matrix_items_copy(m, idx + at, len);
            if (c == ES_CENTER_ROWS)
                es_center(block, len, d, c, s->shift + at);
            else
                centre_rows(s, block, at, len);
            for (size_t i = 0; measured && i < len; i++)
                measured[at + i] = cblas_dnrm2((int)d, block + i * d, 1);
            free(block);
        }
    }
    s->scale = es_malloc(n * sizeof *s->scale);
    for (size_t r = 0; r < n; r++) {
        s->scale[r] = norms[r] >= TINY_NORM ? 1.0 / norms[r] : 0.0;
        s->nonzero += norms[r] > 0;
        s->ntiny += norms[r] > 0 && norms[r] < TINY_NORM;
    }
    if (s->ntiny) {
        s->tiny = es_malloc(s->ntiny * sizeof *s->tiny);
        s->tiny_rows = es_malloc(s->ntiny * d * sizeof *s->tiny_rows);
        for (size_t r = 0, t = 0; r < n; r++)
            if (norms[r] > 0 && norms[r] < TINY_NORM) {
                double *row = es_matrix_items_copy(m, idx + r, 1);
                centre_rows(s, row, r, 1);
                es_normalise_rows(row, 1, d);
                memcpy(s->tiny_rows + t * d, row, d * sizeof *row);
                s->tiny[t++] = r;
                free(row);
            }
        tiny_index(s);
    }
    if (measured && !s->kept) { /* kept for the next request of this selection (the store takes both) */
        double *mean = NULL;
        if (s->own_mean) {
            mean = es_malloc(d * sizeof *mean);
            memcpy(mean, s->own_mean, d * sizeof *mean);
        }
        double *copy = es_malloc(n * sizeof *copy);
        memcpy(copy, measured, n * sizeof *copy);
        es_derived_keep(key, n, d, mean, copy);
    }
    free(measured);
    free(key);
}

/* The normalised rows of the items which[0 .. count) (count x d). */
static double *normalised_rows(const es_matrix *m, const size_t *idx, const row_scales *s, const size_t *which,
                               size_t count)
{
    size_t d = s->d, *items = es_malloc((count ? count : 1) * sizeof *items);
    for (size_t i = 0; i < count; i++)
        items[i] = idx[which[i]];
    double *x = es_matrix_items_copy(m, items, count);
    for (size_t i = 0; i < count; i++)
        normalise_copy(s, which[i], x + i * d);
    free(items);
    return x;
}

/* The first reason a parallel pass stopped (cancelled, late, out of memory):
 * its tasks check `failed` and stop taking work once it is set. */
typedef struct pass_stop {
    int failed;            /* set (atomically) by the first task that stops */
    es_err err;            /* its reason, under lock */
    pthread_mutex_t lock;
} pass_stop;

static bool pass_stopped(pass_stop *st) { return __atomic_load_n(&st->failed, __ATOMIC_RELAXED); }

static void pass_fail(pass_stop *st, const es_err *e)
{
    pthread_mutex_lock(&st->lock);
    if (!__atomic_load_n(&st->failed, __ATOMIC_RELAXED))
        st->err = *e;
    __atomic_store_n(&st->failed, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&st->lock);
}

/* One pass of the fft method: the column blocks' power spectra. */
typedef struct fft_pass {
    const es_matrix *m;
    const size_t *idx;
    const row_scales *s;
    size_t n, d, N, stride, half, blocks;
    const size_t *pos;
    bool identity;         /* pos[r] = r: the gathered columns are already in place */
    bool repeats;          /* some position holds more than one item */
    fftw_plan plan;        /* one column's transform (new-array execution on each column) */
    double *part;          /* blocks x half: each block's summed power spectrum */
    double *squares;       /* blocks: each block's sum of the squared normalised values */
    size_t next;           /* the next block, taken atomically */
    pass_stop stop;
    es_progress *progress;
} fft_pass;

/* One block's columns j0 .. j0 + cols - 1 normalised at their positions in the
 * zero-padded buffers `in` (stride apart); tmp (cols x n) when the positions
 * are not the items' order. The matrix is read and normalised in one pass
 * (es_matrix_items_columns_scaled). Returns the sum of the squared values. */
static double gather_block(const fft_pass *w, size_t j0, size_t cols, double *in, double *tmp)
{
    const row_scales *s = w->s;
    size_t n = w->n, ld = w->identity ? w->stride : n;
    double *g = w->identity ? in : tmp, squares = 0;
    es_matrix_items_columns_scaled(w->m, w->idx, n, j0, cols, s->c == ES_CENTER_COLUMNS ? s->mean + j0 : NULL,
                                   s->c == ES_CENTER_ROWS ? s->shift : NULL, s->scale, g, ld);
    for (size_t j = 0; j < cols; j++) {
        double *col = g + j * ld, sq = 0;
        for (size_t t = 0; t < s->ntiny; t++)
            col[s->tiny[t]] = s->tiny_rows[t * s->d + j0 + j];
        for (size_t r = 0; r < n; r++)
            sq += col[r] * col[r];
        squares += sq;
        if (w->identity)
            continue;
        double *dst = in + j * w->stride;
        if (w->repeats) {
            for (size_t r = 0; r < n; r++)
                dst[w->pos[r]] = 0;
            for (size_t r = 0; r < n; r++)
                dst[w->pos[r]] += col[r];
        } else
            for (size_t r = 0; r < n; r++)
                dst[w->pos[r]] = col[r];
    }
    return squares;
}

/* A thread of the pass: blocks of FFT_COLUMNS columns taken in turn until none
 * is left; each block's columns read from the matrix, normalised and placed at
 * their positions in contiguous zero-padded buffers, each column transformed
 * (out of place: the zero padding stays), and the squared magnitudes summed
 * into the block's spectrum in column order. What a block computes does not
 * depend on the thread that runs it. */
static void fft_worker(void *arg, size_t task)
{
    (void)task;
    fft_pass *w = arg;
    es_progress_attach(w->progress);
    double *in = fftw_alloc_real(w->stride * FFT_COLUMNS);
    double *tmp = w->identity ? NULL : fftw_alloc_real(w->n * FFT_COLUMNS);
    fftw_complex *out = fftw_alloc_complex(w->half);
    es_err e;
    if (!in || !out || (!w->identity && !tmp)) {
        es_fail(&e, ES_E_NOMEM, "rows", "cannot allocate the FFT's %zu x %d block", w->N, FFT_COLUMNS);
        pass_fail(&w->stop, &e);
    } else
        memset(in, 0, w->stride * FFT_COLUMNS * sizeof *in);
    for (size_t b; !pass_stopped(&w->stop) &&
                   (b = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED)) < w->blocks;) {
        if (es_progress_check(&e) < 0) {
            pass_fail(&w->stop, &e);
            break;
        }
        size_t j0 = b * FFT_COLUMNS, cols = w->d - j0 < FFT_COLUMNS ? w->d - j0 : FFT_COLUMNS;
        w->squares[b] = gather_block(w, j0, cols, in, tmp);
        double *ps = w->part + b * w->half;
        const double *o = (const double *)out; /* re, im pairs, whichever type fftw_complex is */
        for (size_t j = 0; j < cols; j++) {
            fftw_execute_dft_r2c(w->plan, in + j * w->stride, out);
            if (j == 0)
                for (size_t m = 0; m < w->half; m++)
                    ps[m] = o[2 * m] * o[2 * m] + o[2 * m + 1] * o[2 * m + 1];
            else
                for (size_t m = 0; m < w->half; m++)
                    ps[m] += o[2 * m] * o[2 * m] + o[2 * m + 1] * o[2 * m + 1];
        }
        es_progress_step();
    }
    fftw_free(in);
    fftw_free(tmp);
    fftw_free(out);
}

/* One column's real-to-complex transform of length N, planned on buffers
 * aligned as fft_worker's (fftw_malloc's, columns stride doubles apart with
 * stride a multiple of 8: every column starts as aligned as the first). */
static fftw_plan column_plan(size_t N)
{
    double *in = fftw_alloc_real(N);
    fftw_complex *out = fftw_alloc_complex(N / 2 + 1);
    fftw_plan plan = fftw_plan_dft_r2c_1d((int)N, in, out, FFTW_ESTIMATE);
    fftw_free(in);
    fftw_free(out);
    return plan;
}

/* sum[k] (k < len) by the fft method: the d columns' power spectra summed, one
 * long-double inverse transform; *squares = the sum of every normalised row's
 * squared norm. Fails (ES_E_NOMEM, or as es_progress_check) with err filled. */
static int sums_fft(const es_matrix *m, const size_t *idx, const row_scales *s, const positions *p, bool repeats,
                    size_t N, long double *sum, long double *squares, es_err *err)
{
    size_t n = s->n, d = s->d;
    fft_pass w = {.m = m, .idx = idx, .s = s, .n = n, .d = d, .N = N, .stride = (N + 7) / 8 * 8, .half = N / 2 + 1,
                  .blocks = (d + FFT_COLUMNS - 1) / FFT_COLUMNS, .pos = p->pos, .repeats = repeats,
                  .progress = es_progress_current()};
    w.identity = !repeats && p->len == n;
    for (size_t r = 0; w.identity && r < n; r++)
        w.identity = p->pos[r] == r;
    w.part = es_alloc_doubles(w.blocks, w.half, "FFT power spectra", err);
    if (!w.part)
        return -1;
    w.squares = es_calloc(w.blocks, sizeof *w.squares);
    pthread_mutex_init(&w.stop.lock, NULL);
    pthread_mutex_lock(&planner);
    w.plan = column_plan(N);
    pthread_mutex_unlock(&planner);
    es_progress_begin("cosine", w.blocks);
    size_t threads = es_blas_job_threads();
    es_par_for(threads < w.blocks ? threads : w.blocks, threads, fft_worker, &w);
    int rc = w.stop.failed ? -1 : 0;
    if (rc < 0)
        *err = w.stop.err;
    pthread_mutex_lock(&planner);
    fftw_destroy_plan(w.plan);
    pthread_mutex_unlock(&planner);
    pthread_mutex_destroy(&w.stop.lock);
    *squares = 0;
    for (size_t b = 0; b < w.blocks; b++) /* in block order: the same bits with any thread count */
        *squares += w.squares[b];
    if (rc == 0) {
        long double *r = fftwl_alloc_real(N);
        fftwl_complex *sp = fftwl_alloc_complex(w.half);
        pthread_mutex_lock(&planner);
        fftwl_plan inv = fftwl_plan_dft_c2r_1d((int)N, sp, r, FFTW_ESTIMATE);
        pthread_mutex_unlock(&planner);
        long double *v = (long double *)sp;
        for (size_t f = 0; f < w.half; f++) {
            long double t = 0;
            for (size_t b = 0; b < w.blocks; b++) /* in block order: the same bits with any thread count */
                t += w.part[b * w.half + f];
            v[2 * f] = t;
            v[2 * f + 1] = 0;
        }
        fftwl_execute(inv);
        for (size_t k = 0; k < p->len; k++)
            sum[k] = r[k] / (long double)N;
        pthread_mutex_lock(&planner);
        fftwl_destroy_plan(inv);
        pthread_mutex_unlock(&planner);
        fftwl_free(r);
        fftwl_free(sp);
    }
    free(w.part);
    free(w.squares);
    return rc;
}

/* The items at each position: those at q are order[first[q] .. first[q + 1]). */
typedef struct by_position {
    size_t *first, *order;
} by_position;

static void group_by_position(const positions *p, size_t n, by_position *bp)
{
    bp->first = es_calloc(p->len + 1, sizeof *bp->first);
    bp->order = es_malloc(n * sizeof *bp->order);
    for (size_t a = 0; a < n; a++)
        bp->first[p->pos[a] + 1]++;
    for (size_t q = 0; q < p->len; q++)
        bp->first[q + 1] += bp->first[q];
    size_t *at = es_malloc(p->len * sizeof *at);
    memcpy(at, bp->first, p->len * sizeof *at);
    for (size_t a = 0; a < n; a++)
        bp->order[at[p->pos[a]]++] = a;
    free(at);
}

/* The offsets the fft method sums directly (its tail), each its pairs' dot products. */
typedef struct tail_pass {
    const double *x;
    size_t d, len;
    const by_position *bp;
    const size_t *offsets; /* the tail's offsets (k >= 1) */
    long double *sums;     /* one per tail offset */
    pass_stop stop;
    es_progress *progress;
} tail_pass;

static void tail_task(void *arg, size_t t)
{
    tail_pass *w = arg;
    es_progress_attach(w->progress);
    es_err e;
    if (pass_stopped(&w->stop))
        return;
    if (es_progress_check(&e) < 0) {
        pass_fail(&w->stop, &e);
        return;
    }
    size_t k = w->offsets[t], d = w->d;
    const size_t *first = w->bp->first, *order = w->bp->order;
    long double s = 0;
    for (size_t q = 0; q + k < w->len; q++)
        for (size_t i = first[q]; i < first[q + 1]; i++)
            for (size_t j = first[q + k]; j < first[q + k + 1]; j++)
                s += cblas_ddot((int)d, w->x + order[i] * d, 1, w->x + order[j] * d, 1);
    w->sums[t] = s;
}

/* Largest head x end block of cosines the tail takes through one dgemm (16 Mi entries, 128 MiB). */
#define TAIL_GEMM_ENTRIES ((size_t)1 << 24)
/* The head's rows in this many dgemms, each with the ends it can pair with at
 * a tail offset: about (1/2 + 1/TAIL_CHUNKS / 2) of the whole block's work. */
#define TAIL_CHUNKS 8

/* The tail's sums through dgemms, when that is less work than its pairs' dot
 * products one at a time (a dgemm multiply-add costs a few times less): every
 * pair at a tail offset k >= kmin (the smallest) joins an item at a position
 * below len - kmin (the head) to one at kmin or above (the end), so the head x
 * end block of cosines holds them all. Head and end are in position order and
 * the head split into TAIL_CHUNKS: a chunk needs only the ends at or above its
 * first position + kmin, so the block's half below its diagonal is mostly
 * skipped. False (nothing done) when the block is too large or not worth it. */
static bool tail_by_gemm(const es_matrix *m, const size_t *idx, const row_scales *s, const positions *p,
                         const size_t *tail_k, size_t tail, const size_t *pairs, long double *sum)
{
    size_t n = s->n, d = s->d, kmin = tail_k[0], h = 0, e = 0;
    double singles = 0;
    for (size_t i = 0; i < tail; i++)
        singles += (double)pairs[tail_k[i]];
    for (size_t a = 0; a < n; a++) {
        h += p->pos[a] + kmin < p->len;
        e += p->pos[a] >= kmin;
    }
    if (h == 0 || e == 0 || h > TAIL_GEMM_ENTRIES / e || (double)h * (double)e > 8.0 * singles)
        return false;
    by_position bp;
    group_by_position(p, n, &bp);
    size_t *hw = es_malloc(h * sizeof *hw), *ew = es_malloc(e * sizeof *ew); /* items in position order */
    size_t *hi = es_malloc(h * sizeof *hi), *ei = es_malloc(e * sizeof *ei); /* their positions */
    h = e = 0;
    for (size_t q = 0; q < p->len; q++)
        for (size_t i = bp.first[q]; i < bp.first[q + 1]; i++) {
            if (q + kmin < p->len) {
                hw[h] = bp.order[i];
                hi[h++] = q;
            }
            if (q >= kmin) {
                ew[e] = bp.order[i];
                ei[e++] = q;
            }
        }
    double *hx = normalised_rows(m, idx, s, hw, h), *ex = normalised_rows(m, idx, s, ew, e);
    size_t chunk = (h + TAIL_CHUNKS - 1) / TAIL_CHUNKS;
    double *g = es_malloc(chunk * e * sizeof *g);
    char *in_tail = es_calloc(p->len, 1);
    for (size_t i = 0; i < tail; i++)
        in_tail[tail_k[i]] = 1;
    for (size_t i = 0; i < tail; i++)
        sum[tail_k[i]] = 0;
    for (size_t i0 = 0, j0 = 0; i0 < h; i0 += chunk) {
        size_t rows = h - i0 < chunk ? h - i0 : chunk;
        while (j0 < e && ei[j0] < hi[i0] + kmin)
            j0++;
        if (j0 == e)
            break;
        size_t w = e - j0;
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)w, (int)d, 1.0, hx + i0 * d, (int)d,
                    ex + j0 * d, (int)d, 0.0, g, (int)w);
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < w; j++)
                if (ei[j0 + j] >= hi[i0 + i] + kmin && in_tail[ei[j0 + j] - hi[i0 + i]])
                    sum[ei[j0 + j] - hi[i0 + i]] += g[i * w + j];
    }
    free(hx);
    free(ex);
    free(g);
    free(hw);
    free(ew);
    free(hi);
    free(ei);
    free(in_tail);
    free(bp.first);
    free(bp.order);
    return true;
}

/* The tail's sums (offsets tail_k, ascending) directly: dgemms, or each pair's
 * dot product on the computation's threads. Fails as es_progress_check. */
static int tail_sums(const es_matrix *m, const size_t *idx, const row_scales *s, const positions *p,
                     const size_t *tail_k, size_t tail, const size_t *pairs, long double *sum, es_err *err)
{
    if (tail_by_gemm(m, idx, s, p, tail_k, tail, pairs, sum))
        return es_progress_check(err);
    size_t n = s->n, *all = es_malloc(n * sizeof *all);
    for (size_t a = 0; a < n; a++)
        all[a] = a;
    double *x = normalised_rows(m, idx, s, all, n);
    free(all);
    by_position bp;
    group_by_position(p, n, &bp);
    tail_pass t = {.x = x, .d = s->d, .len = p->len, .bp = &bp, .offsets = tail_k, .progress = es_progress_current()};
    t.sums = es_malloc(tail * sizeof *t.sums);
    pthread_mutex_init(&t.stop.lock, NULL);
    es_blas_one_begin(); /* one BLAS thread a task: the same bits with any thread count */
    es_par_for(tail, es_blas_job_threads(), tail_task, &t);
    es_blas_one_end();
    int rc = t.stop.failed ? -1 : 0;
    if (rc < 0)
        *err = t.stop.err;
    for (size_t i = 0; i < tail && rc == 0; i++)
        sum[tail_k[i]] = t.sums[i];
    pthread_mutex_destroy(&t.stop.lock);
    free(t.sums);
    free(x);
    free(bp.first);
    free(bp.order);
    return rc;
}

/* ---------------------------------------------------------------- both */

/* How far above 1 a normalised row's squared norm can be: its norm's
 * computed value (dnrm2, or es_normalise_rows' for tiny rows) within (d + 2) u
 * of the true norm, the reciprocal and each scaled coordinate within u, the
 * squares and their sum within gamma_{d+1}: (1 + (d + 5) u)^2 (1 + gamma_{d+1})
 * - 1 < 4 (d + 6) u while d u < 0.01. */
static double row_square_slack(size_t d) { return 4.0 * ((double)d + 6) * (DBL_EPSILON / 2); }

/* gamma_{d+2}: the bound of a direct mean (each pair's dot product of d terms, the quotient). */
static double direct_bound(size_t d)
{
    double u = DBL_EPSILON / 2, k = (double)d + 2;
    return k * u / (1 - k * u);
}

/* See analysis.h. */
int es_cosine_by_offset_using(const es_matrix *m, const size_t *idx, size_t n, es_centering c,
                              es_offset_method method, es_cosine_offset **out, es_err *err)
{
    if (es_check_selection(m, idx, n, err) != 0)
        return -1;
    size_t d = es_matrix_dim(m), N = 0;
    es_offset_method chosen = es_cosine_offset_method(idx, n, d, &N);
    if (method == ES_OFFSET_DIRECT || (method == ES_OFFSET_AUTO && chosen == ES_OFFSET_DIRECT))
        N = 0;
    else if (N == 0) { /* fft asked for where auto would not use it: any length that fits */
        positions q;
        positions_of(idx, n, false, &q);
        N = fft_length(q.len);
        N = N > INT_MAX / FFT_COLUMNS ? 0 : N;
    }
    positions p;
    positions_of(idx, n, true, &p); /* len <= items: these arrays are matrix-sized */
    long double *sum = es_calloc(p.len, sizeof *sum), pnorm = 0;
    size_t *pairs = es_calloc(p.len, sizeof *pairs);
    double *bound = NULL, ebound = direct_bound(d);
    size_t tail = 0, *tail_k = NULL;
    row_scales s = {0};
    if (N && !pair_counts(&p, n, N, pairs, &pnorm))
        N = 0;
    if (N) { /* the bound B of every offset's sum, and the offsets whose mean it leaves above the tolerance */
        scales_of(m, idx, n, c, &s);
        /* sum_a |x_a|^2 over the normalised rows, bounded above before they are
         * formed: at most 1 + ROW_SQUARE_SLACK each nonzero row */
        long double ss = (long double)s.nonzero * (1 + row_square_slack(d));
        double u = DBL_EPSILON / 2, dl = fft_delta(N, u), dL = fft_delta(N, LDBL_EPSILON / 2);
        double B = (double)((2 * dl + dl * dl + (FFT_COLUMNS + 3) * u) * ss + dL * sqrtl(2) * pnorm);
        double work = 0;
        bound = es_malloc(p.len * sizeof *bound);
        tail_k = es_malloc(p.len * sizeof *tail_k);
        for (size_t k = 0; k < p.len; k++) {
            if (!pairs[k])
                continue;
            bound[k] = (k ? B : B / 2) / (double)pairs[k] + 2 * u;
            if (bound[k] > OFFSET_TOLERANCE && k) {
                tail_k[tail++] = k;
                work += (double)(p.len - k) + (double)pairs[k] * (double)d;
            }
        }
        if (method == ES_OFFSET_AUTO && fft_work(N, d) + work >= direct_work(n, d))
            N = 0; /* a scattered selection whose tail would cost more than the direct sums */
    }
    int rc;
    if (N) {
        long double ss = 0;
        rc = sums_fft(m, idx, &s, &p, pairs[0] > n, N, sum, &ss, err);
        if (rc == 0) /* offset 0: (the lag-0 sum + each row with itself) / 2 */
            sum[0] = (sum[0] + ss) / 2;
        if (rc == 0 && tail)
            rc = tail_sums(m, idx, &s, &p, tail_k, tail, pairs, sum, err);
        for (size_t i = 0; i < tail && rc == 0; i++)
            bound[tail_k[i]] = direct_bound(d);
        ebound = 0;
        for (size_t k = 0; k < p.len; k++)
            if (pairs[k])
                ebound = fmax(ebound, bound[k]);
    } else {
        memset(pairs, 0, p.len * sizeof *pairs);
        double *x = es_normalised_items(m, idx, n, c);
        rc = sums_direct(x, n, d, &p, sum, pairs, err);
        free(x);
    }
    scales_free(&s);
    free(bound);
    if (rc < 0) {
        free(tail_k);
        free(sum);
        free(pairs);
        free(p.pos);
        return -1;
    }
    es_cosine_offset *o = es_malloc(sizeof *o);
    *o = (es_cosine_offset){.method = N ? "fft" : "direct", .error_bound = ebound, .fft_length = N,
                            .direct_offsets = N ? tail : 0};
    for (size_t k = 0; k < p.len; k++)
        o->count += pairs[k] > 0;
    o->offset = es_malloc(o->count * sizeof *o->offset);
    o->mean = es_malloc(o->count * sizeof *o->mean);
    o->pairs = es_malloc(o->count * sizeof *o->pairs);
    for (size_t k = 0, at = 0; k < p.len; k++)
        if (pairs[k]) {
            o->offset[at] = k * p.g;
            o->mean[at] = (double)(sum[k] / (long double)pairs[k]);
            o->pairs[at++] = pairs[k];
        }
    free(tail_k);
    free(sum);
    free(pairs);
    free(p.pos);
    *out = o;
    return 0;
}

/* See analysis.h. */
int es_cosine_by_offset(const es_matrix *m, const size_t *idx, size_t n, es_centering c, es_cosine_offset **out,
                        es_err *err)
{
    return es_cosine_by_offset_using(m, idx, n, c, ES_OFFSET_AUTO, out, err);
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_cosine_offset_free(es_cosine_offset *o)
{
    if (!o)
        return;
    free(o->offset);
    free(o->mean);
    free(o->pairs);
    free(o);
}
