/* Cosine similarity: every tested pair of a sinusoidal encoding equals the
 * closed form (2/d) sum_i cos(w_i (p - q)) (REFERENCE §6), by row, as a full
 * matrix, binned, and by offset; zero rows; parameter errors. */
#include "analysis/helpers.h"
#include "check_main.h"
#include "embedscope/blas.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include <stdlib.h>

/* closed[D] = (2/d) sum_i cos(w_i D), w_i = base^(-2i/d), for D = 0..n-1. */
static double *closed_form(size_t n, size_t d, double base)
{
    double *f = es_malloc(n * sizeof *f);
    for (size_t delta = 0; delta < n; delta++) {
        long double sum = 0;
        for (size_t i = 0; i < d / 2; i++)
            sum += cosl(powl(base, -2.0L * i / d) * delta);
        f[delta] = (double)(2 * sum / d);
    }
    return f;
}

static es_matrix *sinusoidal(size_t n, size_t d)
{
    es_matrix *m = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_gen_sinusoidal("test/sin", n, d, 10000, &m, &err) == 0, "%s", err.message);
    return m;
}

static size_t *iota(size_t n)
{
    size_t *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    return idx;
}

static size_t dist(size_t p, size_t q) { return p > q ? p - q : q - p; }

/* The unbinned n x n matrix: cell (p, q) = closed[|p - q|] for every pair. */
static void check_all_pairs(size_t n, size_t d)
{
    es_matrix *m = sinusoidal(n, d);
    double *f = closed_form(n, d, 10000);
    size_t *idx = iota(n);
    es_grid *g = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_cosine_matrix(m, idx, n, ES_CENTER_NONE, 0, &g, &err), 0);
    ck_assert_uint_eq(g->rows, n);
    ck_assert_uint_eq(g->cols, n);
    for (size_t p = 0; p < n; p++)
        for (size_t q = 0; q < n; q++)
            ck_assert_double_eq_tol(g->values[p * n + q], f[dist(p, q)], 1e-12);
    es_grid_free(g);
    free(idx);
    free(f);
    es_matrix_release(m);
}

START_TEST(all_pairs_small) { check_all_pairs(128, 64); }
END_TEST

START_TEST(all_pairs_gpt2_shape) { check_all_pairs(1024, 768); }
END_TEST

/* One row against all selected rows, for a sample of rows (and an unselected one). */
START_TEST(row_against_selection)
{
    const size_t n = 1024, d = 768;
    es_matrix *m = sinusoidal(n, d);
    double *f = closed_form(n, d, 10000);
    size_t sel[300], ns = 0;
    for (size_t q = 5; q < n; q += 7)   /* q = 5, 12, ...: row 0 is not selected */
        sel[ns++] = q;
    const size_t rows[] = { 0, 1, 2, 100, 511, 512, 777, 1000, 1022, 1023 };
    for (size_t t = 0; t < sizeof rows / sizeof *rows; t++) {
        double *sim = NULL;
        es_err err = { 0 };
        ck_assert_int_eq(es_cosine_row(m, rows[t], sel, ns, ES_CENTER_NONE, &sim, &err), 0);
        for (size_t i = 0; i < ns; i++)
            ck_assert_double_eq_tol(sim[i], f[dist(rows[t], sel[i])], 1e-12);
        free(sim);
    }
    free(f);
    es_matrix_release(m);
}
END_TEST

/* The reference cosine of rows a and b of x (d long), in long double. */
static double direct_cosine(const double *a, const double *b, size_t d)
{
    long double ab = 0, aa = 0, bb = 0;
    for (size_t j = 0; j < d; j++) {
        ab += (long double)a[j] * b[j];
        aa += (long double)a[j] * a[j];
        bb += (long double)b[j] * b[j];
    }
    return aa == 0 || bb == 0 ? 0.0 : (double)(ab / sqrtl(aa * bb));
}

/* A selection of several streamed blocks (2500 rows, in reverse, so a block's
 * offset into the answer and into the selection both matter), each centring,
 * against centring and normalising the whole selection directly; for each, a
 * first row computes the selection's mean and norms and keeps them, a second
 * row (another, selected this time) is answered from what was kept. */
START_TEST(row_streamed_in_blocks)
{
    const size_t n = 2600, ns = 2500, d = 64, rows[] = { 2550, 7 }; /* row 2550 is not selected */
    es_matrix *m = sinusoidal(n, d);
    size_t *sel = es_malloc(ns * sizeof *sel);
    for (size_t i = 0; i < ns; i++)
        sel[i] = ns - 1 - i;
    double *x = es_matrix_items_copy(m, sel, ns);
    const es_centering cs[] = { ES_CENTER_NONE, ES_CENTER_COLUMNS, ES_CENTER_ROWS };
    for (size_t t = 0; t < 3; t++)
        for (size_t r = 0; r < 2; r++) {
            double *cx = es_malloc(ns * d * sizeof *cx), cy[64], mean[64] = { 0 };
            double *y = es_matrix_items_copy(m, &rows[r], 1);
            memcpy(cx, x, ns * d * sizeof *cx);
            memcpy(cy, y, d * sizeof *cy);
            es_center(cx, ns, d, cs[t], cs[t] == ES_CENTER_COLUMNS ? mean : NULL);
            if (cs[t] == ES_CENTER_COLUMNS)
                for (size_t j = 0; j < d; j++)
                    cy[j] -= mean[j];
            else
                es_center(cy, 1, d, cs[t], NULL);
            double *sim = NULL;
            es_err err = { 0 };
            es_derived_stats before, after;
            es_derived_get_stats(&before);
            ck_assert_int_eq(es_cosine_row(m, rows[r], sel, ns, cs[t], &sim, &err), 0);
            es_derived_get_stats(&after);
            /* the first row of a selection and centring keeps its data, the second uses it */
            ck_assert_uint_eq(after.kept - before.kept, r == 0);
            ck_assert_uint_eq(after.hits - before.hits, r == 1);
            for (size_t i = 0; i < ns; i++)
                ck_assert_msg(fabs(sim[i] - direct_cosine(cx + i * d, cy, d)) <= 1e-13,
                              "%s, row %zu: item %zu: %.17g vs %.17g", es_centering_name(cs[t]), rows[r], i, sim[i],
                              direct_cosine(cx + i * d, cy, d));
            free(sim);
            free(cx);
            free(y);
        }
    es_derived_stats st;
    es_derived_get_stats(&st);
    ck_assert_uint_ge(st.entries, 3);
    ck_assert_uint_le(st.bytes, st.max_bytes);
    free(x);
    free(sel);
    es_matrix_release(m);
}
END_TEST

/* Block means of the closed form: 128 positions in 10 bins of width 12 or 13. */
START_TEST(binned_matrix)
{
    const size_t n = 128, d = 64, bins = 10;
    es_matrix *m = sinusoidal(n, d);
    double *f = closed_form(n, d, 10000);
    size_t *idx = iota(n);
    es_grid *g = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_cosine_matrix(m, idx, n, ES_CENTER_NONE, bins, &g, &err), 0);
    ck_assert_uint_eq(g->rows, bins);
    ck_assert_uint_eq(g->cols, bins);
    ck_assert_uint_eq(g->row_edges[0], 0);
    ck_assert_uint_eq(g->row_edges[bins], n);
    for (size_t a = 0; a < bins; a++)
        for (size_t b = 0; b < bins; b++) {
            double sum = 0;
            size_t cells = 0;
            for (size_t p = g->row_edges[a]; p < g->row_edges[a + 1]; p++)
                for (size_t q = g->col_edges[b]; q < g->col_edges[b + 1]; q++, cells++)
                    sum += f[dist(p, q)];
            ck_assert_double_eq_tol(g->values[a * bins + b], sum / (double)cells, 1e-12);
        }
    es_grid_free(g);
    free(idx);
    free(f);
    es_matrix_release(m);
}
END_TEST

/* Mean by offset equals the closed form at every offset, over n - D pairs, for
 * a step-1 selection; a reversed step-3 selection gives offsets 0, 3, 6, ... */
START_TEST(by_offset)
{
    const size_t n = 1024, d = 768;
    es_matrix *m = sinusoidal(n, d);
    double *f = closed_form(n, d, 10000);
    size_t *idx = iota(n);
    es_cosine_offset *o = NULL;
    es_err err = { 0 };
    for (es_offset_method how = ES_OFFSET_AUTO; how <= ES_OFFSET_FFT; how++) {
        ck_assert_int_eq(es_cosine_by_offset_using(m, idx, n, ES_CENTER_NONE, how, &o, &err), 0);
        ck_assert_str_eq(o->method, how == ES_OFFSET_DIRECT ? "direct" : "fft"); /* auto: fft from 512 rows */
        ck_assert_double_le(o->error_bound, 1e-12);
        ck_assert_uint_eq(o->count, n);
        for (size_t k = 0; k < n; k++) {
            ck_assert_uint_eq(o->offset[k], k);
            ck_assert_uint_eq(o->pairs[k], n - k);
            ck_assert_double_eq_tol(o->mean[k], f[k], 1e-12);
        }
        es_cosine_offset_free(o);
    }
    size_t ns = 0;
    for (size_t q = 1000; q >= 10; q -= 3)   /* 1000, 997, ..., 10: 331 items */
        idx[ns++] = q;
    for (es_offset_method how = ES_OFFSET_DIRECT; how <= ES_OFFSET_FFT; how++) {
        ck_assert_int_eq(es_cosine_by_offset_using(m, idx, ns, ES_CENTER_NONE, how, &o, &err), 0);
        ck_assert_uint_eq(o->count, ns);
        for (size_t k = 0; k < ns; k++) {
            ck_assert_uint_eq(o->offset[k], 3 * k);
            ck_assert_uint_eq(o->pairs[k], ns - k);
            ck_assert_double_eq_tol(o->mean[k], f[3 * k], 1e-12);
        }
        es_cosine_offset_free(o);
    }
    es_cosine_offset_free(NULL);
    free(idx);
    free(f);
    es_matrix_release(m);
}
END_TEST

/* Both methods' answers on one selection: the same offsets and pairs, means
 * within 1e-12 and within the two stated bounds; the fft one's bound at most
 * 1e-12. Returns how many offsets the fft method summed directly. */
static size_t fft_against_direct(const es_matrix *m, const size_t *idx, size_t n, es_centering c)
{
    es_cosine_offset *dir = NULL, *fft = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_cosine_by_offset_using(m, idx, n, c, ES_OFFSET_DIRECT, &dir, &err), 0);
    ck_assert_int_eq(es_cosine_by_offset_using(m, idx, n, c, ES_OFFSET_FFT, &fft, &err), 0);
    ck_assert_str_eq(dir->method, "direct");
    ck_assert_str_eq(fft->method, "fft");
    ck_assert_uint_gt(fft->fft_length, 0);
    ck_assert_double_le(fft->error_bound, 1e-12);
    ck_assert_double_le(dir->error_bound, 1e-13);
    ck_assert_uint_eq(fft->count, dir->count);
    for (size_t k = 0; k < dir->count; k++) {
        ck_assert_uint_eq(fft->offset[k], dir->offset[k]);
        ck_assert_uint_eq(fft->pairs[k], dir->pairs[k]);
        double diff = fabs(fft->mean[k] - dir->mean[k]);
        ck_assert_msg(diff <= 1e-12 && diff <= fft->error_bound + dir->error_bound,
                      "n %zu offset %zu: fft %.17g, direct %.17g (bounds %g, %g)", n, dir->offset[k], fft->mean[k],
                      dir->mean[k], fft->error_bound, dir->error_bound);
    }
    size_t tail = fft->direct_offsets;
    es_cosine_offset_free(dir);
    es_cosine_offset_free(fft);
    return tail;
}

/* The FFT's sums equal the direct sums on seeded matrices of an odd, a prime
 * and a power-of-2 number of rows, centred and not; on a scattered selection
 * in any order with repeated items; on a strided one. */
START_TEST(fft_matches_direct)
{
    static const size_t sizes[] = {1001, 1009, 2048};
    es_matrix *m = gaussian(2048, 96, 0.5, 33);
    size_t *idx = iota(2048);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        fft_against_direct(m, idx, sizes[i], ES_CENTER_NONE);
        fft_against_direct(m, idx, sizes[i], ES_CENTER_COLUMNS);
    }
    ck_assert_uint_gt(fft_against_direct(m, idx, 2048, ES_CENTER_ROWS), 0); /* the few-pair tail summed directly */
    uint64_t state = 7;
    for (size_t i = 0; i < 700; i++) { /* scattered, unordered, repeats */
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        idx[i] = (size_t)(state >> 33) % 2048;
    }
    idx[1] = idx[0];
    fft_against_direct(m, idx, 700, ES_CENTER_NONE);
    for (size_t i = 0; i < 600; i++) /* 2040, 2037, ...: step 3, reversed */
        idx[i] = 2040 - 3 * i;
    fft_against_direct(m, idx, 600, ES_CENTER_COLUMNS);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* Shapes at the edges of the FFT's column blocks and lengths: one row, two,
 * one column, a block and one column more (17: the second block has one
 * column), an odd number of rows above the direct method's range. */
START_TEST(fft_edge_shapes)
{
    static const size_t shapes[][2] = {{1, 1}, {2, 1}, {3, 17}, {513, 1}, {777, 17}, {1024, 33}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        size_t n = shapes[i][0], d = shapes[i][1];
        es_matrix *m = gaussian(n, d, 0.5, 50 + i);
        size_t *idx = iota(n);
        fft_against_direct(m, idx, n, ES_CENTER_NONE);
        fft_against_direct(m, idx, n, ES_CENTER_COLUMNS);
        if (d > 1)
            fft_against_direct(m, idx, n, ES_CENTER_ROWS);
        free(idx);
        es_matrix_release(m);
    }
}
END_TEST

/* The FFT reads each column block of the matrix and normalises it on the way
 * (no normalised copy): rows whose norm underflows (scaled by their largest
 * element first), a zero row, and a second request of the same selection that
 * takes the whole matrix's kept norms (the derived store) agree with the
 * direct sums; the second answer is the first bit for bit. */
START_TEST(fft_normalises_on_the_way)
{
    size_t n = 1500, d = 40;
    es_matrix *g = gaussian(n, d, 0.5, 41);
    double *x = es_matrix_items_copy(g, NULL, n);
    for (size_t j = 0; j < d; j++) {
        x[3 * d + j] *= 1e-160;   /* norm ~1e-159: below TINY_NORM */
        x[700 * d + j] *= 1e-300; /* subnormal squares */
        x[1499 * d + j] = 0;      /* a zero row */
    }
    es_matrix *m = matrix_of(x, n, d);
    size_t *idx = iota(n);
    fft_against_direct(m, idx, n, ES_CENTER_NONE);
    fft_against_direct(m, idx, n, ES_CENTER_COLUMNS);
    fft_against_direct(m, idx, n - 1, ES_CENTER_ROWS);
    es_cosine_offset *a = NULL, *b = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_cosine_by_offset_using(m, idx + 1, n - 1, ES_CENTER_NONE, ES_OFFSET_FFT, &a, &err), 0);
    ck_assert_int_eq(es_cosine_by_offset_using(m, idx + 1, n - 1, ES_CENTER_NONE, ES_OFFSET_FFT, &b, &err), 0);
    ck_assert_uint_eq(a->count, b->count);
    ck_assert_mem_eq(a->mean, b->mean, a->count * sizeof *a->mean);
    es_cosine_offset_free(a);
    es_cosine_offset_free(b);
    free(idx);
    free(x);
    es_matrix_release(m);
    es_matrix_release(g);
}
END_TEST

/* A tracker that says stop once three column blocks are done. */
static int stop_after_three(void *arg, es_err *err)
{
    es_progress *p = arg;
    return atomic_load(&p->done) >= 3 ? es_fail(err, ES_E_CANCELLED, "", "stopped") : 0;
}

/* The FFT stops between column blocks when its computation must (a cancel or
 * its deadline): an error, no answer, 3 of its 6 blocks done (one thread). */
START_TEST(fft_stops_when_asked)
{
    es_matrix *m = gaussian(1024, 96, 0.5, 5);
    size_t *idx = iota(1024);
    es_progress pr = {.check = stop_after_three};
    pr.arg = &pr;
    es_progress_attach(&pr);
    es_blas_threads_fixed(1);
    es_cosine_offset *o = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_cosine_by_offset_using(m, idx, 1024, ES_CENTER_NONE, ES_OFFSET_FFT, &o, &err), -1);
    ck_assert_ptr_null(o);
    ck_assert_int_eq(err.code, ES_E_CANCELLED);
    ck_assert_str_eq(atomic_load(&pr.pass), "cosine");
    ck_assert_uint_eq(atomic_load(&pr.total), 6);
    ck_assert_uint_eq(atomic_load(&pr.done), 3);
    es_progress_attach(NULL);
    free(idx);
    es_matrix_release(m);
}
END_TEST

/* Auto picks direct for few rows and the FFT for many contiguous ones. */
START_TEST(offset_method_by_size)
{
    size_t *idx = iota(50257), len;
    ck_assert_int_eq(es_cosine_offset_method(idx, 100, 768, &len), ES_OFFSET_DIRECT);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(es_cosine_offset_method(idx, 50257, 768, &len), ES_OFFSET_FFT);
    ck_assert_uint_ge(len, 2 * 50257 - 1);
    ck_assert_uint_le(len, 2 * 50257 + 2 * 50257 / 8);
    for (size_t i = 0; i < 2000; i++) /* 2000 rows spread over 10^8 indices */
        idx[i] = i * 50000;
    ck_assert_int_eq(es_cosine_offset_method(idx, 2000, 768, &len), ES_OFFSET_FFT); /* the step is divided out */
    idx[1999] += 1; /* now no common step: an FFT of 2 x 10^8 points would cost more than the sums */
    ck_assert_int_eq(es_cosine_offset_method(idx, 2000, 768, &len), ES_OFFSET_DIRECT);
    free(idx);
}
END_TEST

/* A zero row has similarity 0 to everything, itself included (never NaN). */
/* Distinct |i - j| of a selection by going over its pairs. */
static size_t offsets_by_pairs(const size_t *idx, size_t n, size_t span)
{
    char *seen = es_calloc(span, 1);
    size_t count = 0;
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < n; b++)
            if (idx[b] >= idx[a] && !seen[idx[b] - idx[a]]) {
                seen[idx[b] - idx[a]] = 1;
                count++;
            }
    free(seen);
    return count;
}

/* The count from the indices alone equals the pairs' (random sparse and dense
 * selections over spans across word boundaries, duplicates, any order) and
 * what es_cosine_by_offset produces. */
START_TEST(offset_count_from_indices)
{
    static const size_t spans[] = {1, 2, 63, 64, 65, 130, 700};
    static const size_t sizes[] = {1, 2, 3, 5, 17, 40, 300};
    uint64_t state = 12345;
    for (size_t s = 0; s < sizeof spans / sizeof *spans; s++)
        for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
            size_t n = sizes[z], *idx = es_malloc(n * sizeof *idx);
            for (size_t i = 0; i < n; i++) {
                state = state * 6364136223846793005ULL + 1442695040888963407ULL;
                idx[i] = 1000 + (size_t)(state >> 33) % spans[s];
            }
            ck_assert_uint_eq(es_cosine_offset_count(idx, n), offsets_by_pairs(idx, n, 1000 + spans[s]));
            free(idx);
        }
    /* rows 0:100,150:250 and 1,2,3,5 */
    size_t two[200], list[] = {5, 3, 2, 1};
    for (size_t i = 0; i < 200; i++)
        two[i] = i < 100 ? i : 50 + i;
    ck_assert_uint_eq(es_cosine_offset_count(two, 200), 250);
    ck_assert_uint_eq(es_cosine_offset_count(list, 4), 5);
    es_matrix *m = sinusoidal(256, 16);
    es_cosine_offset *o;
    es_err err = {0};
    size_t gaps[] = {0, 1, 7, 30, 31, 200, 255};
    ck_assert_int_eq(es_cosine_by_offset(m, gaps, 7, ES_CENTER_NONE, &o, &err), 0);
    ck_assert_uint_eq(es_cosine_offset_count(gaps, 7), o->count);
    es_cosine_offset_free(o);
    es_matrix_release(m);
}
END_TEST

/* The bound the gate takes past its budget: never below the exact count (random
 * selections, two slices with a common step), exact within the budget, and read
 * in O(n) for a selection whose exact count would take n x span / 64 steps. */
START_TEST(offset_bound_at_least_the_count)
{
    uint64_t state = 777;
    bool exact;
    for (size_t trial = 0; trial < 40; trial++) {
        size_t n = 2 + trial * 7, span = 10 + trial * 53, *idx = es_malloc(n * sizeof *idx);
        for (size_t i = 0; i < n; i++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            idx[i] = 3 * ((size_t)(state >> 33) % span); /* a common step of 3 */
        }
        size_t count = es_cosine_offset_count(idx, n);
        ck_assert_uint_eq(es_cosine_offset_bound(idx, n, SIZE_MAX, &exact), count);
        ck_assert(exact);
        size_t bound = es_cosine_offset_bound(idx, n, 0, &exact);
        ck_assert(!exact);
        ck_assert_uint_ge(bound, count);
        ck_assert_uint_le(bound, n * (n - 1) / 2 + 1);
        free(idx);
    }
    size_t two[500]; /* rows 0:1000:4,2000:3000:4: the multiples of 4 below 3000, but 1000 */
    for (size_t i = 0; i < 500; i++)
        two[i] = i < 250 ? 4 * i : 2000 + 4 * (i - 250);
    ck_assert_uint_eq(es_cosine_offset_count(two, 500), 749);
    ck_assert_uint_eq(es_cosine_offset_bound(two, 500, 0, &exact), 750);
    /* rows 0:2000000:2,2000001:4000000:3 (1.67 M rows; the exact count is ~2.6e11 word operations) */
    size_t n = 1000000 + 666667, *big = es_malloc(n * sizeof *big);
    for (size_t i = 0; i < n; i++)
        big[i] = i < 1000000 ? 2 * i : 2000001 + 3 * (i - 1000000);
    ck_assert_uint_eq(es_cosine_offset_bound(big, n, (size_t)1 << 22, &exact), 4000000);
    ck_assert(!exact);
    free(big);
}
END_TEST

START_TEST(zero_row)
{
    const double x[6] = { 1, 0, 0, 0, 3, 4 };   /* rows (1,0), (0,0), (3,4) */
    es_matrix *m = matrix_of(x, 3, 2);
    const size_t idx[3] = { 0, 1, 2 };
    es_grid *g = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_cosine_matrix(m, idx, 3, ES_CENTER_NONE, 0, &g, &err), 0);
    const double want[9] = { 1, 0, 0.6, 0, 0, 0, 0.6, 0, 1 };
    for (size_t i = 0; i < 9; i++)
        ck_assert_double_eq_tol(g->values[i], want[i], 1e-15);
    es_grid_free(g);
    es_matrix_release(m);
}
END_TEST

/* Centred rows (closed form): rows (1,0), (0,1), (2,2) minus their mean (1,1) are
 * (0,-1), (-1,0), (1,1); row 3 = (3,1), not selected, is centred by the same mean:
 * (2,0). center=rows subtracts each row's own mean: (1,0) -> (1/2,-1/2). */
START_TEST(centred_rows)
{
    const double x[8] = { 1, 0, 0, 1, 2, 2, 3, 1 };
    es_matrix *m = matrix_of(x, 4, 2);
    const size_t idx[3] = { 0, 1, 2 };
    const double h = 1 / sqrt(2.0);
    es_grid *g = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_cosine_matrix(m, idx, 3, ES_CENTER_COLUMNS, 0, &g, &err), 0);
    const double want[9] = { 1, 0, -h, 0, 1, -h, -h, -h, 1 };
    for (size_t i = 0; i < 9; i++)
        ck_assert_double_eq_tol(g->values[i], want[i], 1e-15);
    es_grid_free(g);
    double *sim = NULL;
    ck_assert_int_eq(es_cosine_row(m, 3, idx, 3, ES_CENTER_COLUMNS, &sim, &err), 0);
    const double row3[3] = { 0, -1, h };
    for (size_t i = 0; i < 3; i++)
        ck_assert_double_eq_tol(sim[i], row3[i], 1e-15);
    free(sim);
    ck_assert_int_eq(es_cosine_row(m, 0, idx, 3, ES_CENTER_ROWS, &sim, &err), 0);
    const double rows0[3] = { 1, -1, 0 }; /* (1/2,-1/2), (-1/2,1/2), (0,0): a zero row gives 0 */
    for (size_t i = 0; i < 3; i++)
        ck_assert_double_eq_tol(sim[i], rows0[i], 1e-15);
    free(sim);
    es_cosine_offset *o = NULL;
    ck_assert_int_eq(es_cosine_by_offset(m, idx, 3, ES_CENTER_COLUMNS, &o, &err), 0);
    ck_assert_double_eq_tol(o->mean[1], -h / 2, 1e-15); /* pairs (0,1): 0 and (1,2): -h */
    ck_assert_double_eq_tol(o->mean[2], -h, 1e-15);
    es_cosine_offset_free(o);
    es_matrix_release(m);
}
END_TEST

/* Subnormal values are finite: rows (5e-324, 0), (1, 0), (0, 5e-324) and (3e-320, 4e-320)
 * have the cosines of (1, 0), (1, 0), (0, 1) and (3, 4) (the reciprocal of such a norm
 * overflows, so scaling by it would give infinities). */
START_TEST(subnormal_rows)
{
    const double x[8] = { 5e-324, 0, 1, 0, 0, 5e-324, 3e-320, 4e-320 };
    es_matrix *m = matrix_of(x, 4, 2);
    const size_t idx[4] = { 0, 1, 2, 3 };
    es_grid *g = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_cosine_matrix(m, idx, 4, ES_CENTER_NONE, 0, &g, &err) == 0, "%s", err.message);
    const double want[16] = { 1, 1, 0, 0.6, 1, 1, 0, 0.6, 0, 0, 1, 0.8, 0.6, 0.6, 0.8, 1 };
    for (size_t i = 0; i < 16; i++)
        ck_assert_double_eq_tol(g->values[i], want[i], 1e-3); /* 3e-320, 4e-320 keep 3 digits */
    for (size_t i = 0; i < 12; i++) /* the rows of exact subnormal multiples: exact */
        if (i % 4 != 3)
            ck_assert_double_eq_tol(g->values[i], want[i], 1e-15);
    es_grid_free(g);
    es_matrix_release(m);
}
END_TEST

/* One row's similarities are the same bits whatever OpenBLAS's thread count: a
 * threaded dgemv splits the rows among its threads and sums the rows at the
 * edges of a share in another order, so a request computed beside another
 * (fewer threads each) differed in the last bits from the same one alone. */
START_TEST(row_bits_do_not_depend_on_threads)
{
    es_matrix *m = gaussian(1023, 96, 0.5, 7);
    size_t n = 1023, *sel = es_malloc(n * sizeof *sel);
    for (size_t i = 0; i < n; i++)
        sel[i] = i;
    double *sim[3] = { NULL };
    const int threads[3] = { 1, 2, 3 };
    es_err err = { 0 };
    int before = openblas_get_num_threads();
    for (int t = 0; t < 3; t++) {
        openblas_set_num_threads(threads[t]);
        ck_assert_int_eq(es_cosine_row(m, 5, sel, n, ES_CENTER_NONE, &sim[t], &err), 0);
    }
    openblas_set_num_threads(before);
    for (int t = 1; t < 3; t++)
        ck_assert_msg(memcmp(sim[0], sim[t], n * sizeof *sim[0]) == 0, "%d threads differ from 1", threads[t]);
    for (int t = 0; t < 3; t++)
        free(sim[t]);
    free(sel);
    es_matrix_release(m);
}
END_TEST

/* Bin edges: equal widths differing by at most one; bins 0 or > n give n bins. */
START_TEST(bin_edges)
{
    size_t b;
    size_t *e = es_bin_edges(10, 3, &b);
    ck_assert_uint_eq(b, 3);
    ck_assert(e[0] == 0 && e[1] == 3 && e[2] == 6 && e[3] == 10);
    free(e);
    e = es_bin_edges(5, 10, &b);
    ck_assert_uint_eq(b, 5);
    for (size_t i = 0; i <= 5; i++)
        ck_assert_uint_eq(e[i], i);
    free(e);
    e = es_bin_edges(7, 0, &b);
    ck_assert_uint_eq(b, 7);
    ck_assert_uint_eq(e[7], 7);
    free(e);
    es_grid_free(NULL);
}
END_TEST

START_TEST(bad_parameters)
{
    const double x[4] = { 1, 2, 3, 4 };
    es_matrix *m = matrix_of(x, 2, 2);
    const size_t ok[2] = { 0, 1 }, bad[2] = { 0, 2 };
    double *sim = NULL;
    es_grid *g = NULL;
    es_cosine_offset *o = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_cosine_row(m, 2, ok, 2, ES_CENTER_NONE, &sim, &err), err, ES_E_PARAM, "row");
    ck_assert_fails(es_cosine_row(m, 0, bad, 2, ES_CENTER_NONE, &sim, &err), err, ES_E_PARAM, "rows");
    ck_assert_fails(es_cosine_row(m, 0, ok, 0, ES_CENTER_NONE, &sim, &err), err, ES_E_PARAM, "rows");
    ck_assert_fails(es_cosine_matrix(m, bad, 2, ES_CENTER_NONE, 0, &g, &err), err, ES_E_PARAM, "rows");
    ck_assert_fails(es_cosine_by_offset(m, ok, 0, ES_CENTER_NONE, &o, &err), err, ES_E_PARAM, "rows");
    ck_assert(!sim && !g && !o);
    es_matrix_release(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("cosine");
    TCase *tc = tcase_create("cosine");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, all_pairs_small);
    tcase_add_test(tc, all_pairs_gpt2_shape);
    tcase_add_test(tc, row_against_selection);
    tcase_add_test(tc, row_streamed_in_blocks);
    tcase_add_test(tc, binned_matrix);
    tcase_add_test(tc, by_offset);
    tcase_add_test(tc, fft_matches_direct);
    tcase_add_test(tc, fft_edge_shapes);
    tcase_add_test(tc, fft_normalises_on_the_way);
    tcase_add_test(tc, offset_method_by_size);
    tcase_add_test(tc, fft_stops_when_asked);
    tcase_add_test(tc, offset_count_from_indices);
    tcase_add_test(tc, offset_bound_at_least_the_count);
    tcase_add_test(tc, zero_row);
    tcase_add_test(tc, centred_rows);
    tcase_add_test(tc, subnormal_rows);
    tcase_add_test(tc, bin_edges);
    tcase_add_test(tc, row_bits_do_not_depend_on_threads);
    tcase_add_test(tc, bad_parameters);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
