/* Periodicity: single sinusoids (integer and non-integer bins, 1.5 cycles up to
 * Nyquist) recovered exactly, curves without a period (trend, half cycle, white
 * noise, under one cycle) reported as none with their reason, Fisher's g-test
 * p-value against exact rational sums, the Parseval peak share, a single-frequency
 * matrix through the SVD (with a row step), a synthetic helix with known period
 * and turns, every column of a matrix of pure sinusoids (period, amplitude, phase,
 * r2), and errors. */
#include "analysis/helpers.h"
#include "check_main.h"
#include "embedscope/positional.h"

#define TWO_PI 6.283185307179586476925286766559

/* Relative closeness. */
static void ck_rel(double got, double want, double rel)
{
    ck_assert_msg(fabs(got - want) <= rel * fabs(want), "got %.15g want %.15g", got, want);
}

/* x_t = amp cos(2 pi f t / n + phase) + offset. */
static double *sinusoid(size_t n, double f, double amp, double phase, double offset)
{
    double *x = es_malloc(n * sizeof *x);
    for (size_t t = 0; t < n; t++)
        x[t] = amp * cos(TWO_PI * f * (double)t / (double)n + phase) + offset;
    return x;
}

START_TEST(pure_sinusoid_non_integer_bin)
{
    const double fs[] = { 7.3, 2.71, 41.5, 1.25 };
    for (size_t c = 0; c < sizeof fs / sizeof *fs; c++) {
        double *x = sinusoid(500, fs[c], 3, 0.4, 2);
        es_period p;
        es_err err = { 0 };
        ck_assert_int_eq(es_period_estimate(x, 500, 1, 2.0, ES_PERIOD_ALPHA, &p, &err), 0);
        ck_rel(p.cycles, fs[c], 1e-8);
        ck_rel(p.period, 500 * 2.0 / fs[c], 1e-8);    /* rows two positions apart */
        ck_assert_uint_eq(p.peak_bin, (size_t)lround(fs[c]));
        ck_assert(p.peak_share > 0.75 && p.peak_share <= 1 + 1e-12);
        free(x);
    }
}
END_TEST

/* An integer-bin sinusoid has all its variance in one bin: share 1 (Parseval). A
 * sum of two with variances 9/2 and 1/2 at distant bins: 0.9 at the stronger. */
START_TEST(peak_share_parseval)
{
    double *x = sinusoid(256, 12, 1.5, 1.0, -4);
    es_period p;
    es_err err = { 0 };
    ck_assert_int_eq(es_period_estimate(x, 256, 1, 1.0, ES_PERIOD_ALPHA, &p, &err), 0);
    ck_assert_uint_eq(p.peak_bin, 12);
    ck_assert_double_eq_tol(p.peak_share, 1.0, 1e-12);
    ck_assert_double_eq_tol(p.cycles, 12, 1e-8);
    double *y = sinusoid(256, 40, 1, 0.2, 0);
    for (size_t t = 0; t < 256; t++)
        x[t] = 3 * cos(TWO_PI * 12 * (double)t / 256) + y[t];
    ck_assert_int_eq(es_period_estimate(x, 256, 1, 1.0, ES_PERIOD_ALPHA, &p, &err), 0);
    ck_assert_double_eq_tol(p.peak_share, 0.9, 1e-12);
    /* Strided reading: the same curve stored every third double. */
    double *z = es_calloc(3 * 256, sizeof *z);
    for (size_t t = 0; t < 256; t++)
        z[3 * t] = x[t];
    es_period q;
    ck_assert_int_eq(es_period_estimate(z, 256, 3, 1.0, ES_PERIOD_ALPHA, &q, &err), 0);
    ck_assert_double_eq(q.cycles, p.cycles);
    ck_assert_double_eq(q.peak_share, p.peak_share);
    /* A constant curve has no period. */
    for (size_t t = 0; t < 256; t++)
        x[t] = 2.5;
    ck_assert_int_eq(es_period_estimate(x, 256, 1, 1.0, ES_PERIOD_ALPHA, &p, &err), 0);
    ck_assert_uint_eq(p.peak_bin, 0);
    ck_assert_double_eq(p.period, 0);
    free(x);
    free(y);
    free(z);
}
END_TEST

/* n x d matrix with row p = (a cos(w p), a sin(w p), b cos(w3 p), 0, ...). */
static es_matrix *helix_matrix(size_t n, size_t d, double w, double a, double w3, double b)
{
    double *v = es_calloc(n * d, sizeof *v);
    for (size_t p = 0; p < n; p++) {
        v[p * d] = a * cos(w * (double)p);
        v[p * d + 1] = a * sin(w * (double)p);
        v[p * d + 2] = b * cos(w3 * (double)p);
    }
    es_matrix *m = matrix_of(v, n, d);
    free(v);
    return m;
}

/* Rows p: [cos(w p), sin(w p), 0, ...] with 2 pi / w = 37.3 positions (non-integer
 * bins): every component of the centred and uncentred decomposition is a sinusoid
 * of that period; a row step of 2 keeps the period in positions. */
START_TEST(single_frequency_matrix)
{
    const double period = 37.3, w = TWO_PI / period;
    es_matrix *m = helix_matrix(400, 5, w, 1, 0, 0);
    for (int c = 0; c < 2; c++) {
        es_svd *s = svd_of(m, NULL, 0, c ? ES_CENTER_COLUMNS : ES_CENTER_NONE);
        es_periodicity *p = NULL;
        es_err err = { 0 };
        ck_assert_msg(es_periodicity_from_svd(s, m, 2, ES_PERIOD_ALPHA, &p, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(p->m, 2);
        ck_assert_int_eq(p->step, 1);
        for (size_t j = 0; j < 2; j++)
            ck_rel(p->components[j].period, period, 1e-6);
        es_periodicity_free(p);
        es_svd_release(s);
    }
    size_t idx[200];
    for (size_t i = 0; i < 200; i++)
        idx[i] = 2 * i + 1;
    es_svd *s = svd_of(m, idx, 200, ES_CENTER_COLUMNS);
    es_periodicity *p = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_periodicity_from_svd(s, m, 2, ES_PERIOD_ALPHA, &p, &err), 0);
    ck_assert_int_eq(p->step, 2);
    for (size_t j = 0; j < 2; j++)
        ck_rel(p->components[j].period, period, 1e-6);
    es_periodicity_free(p);
    es_svd_release(s);
    es_matrix_release(m);
}
END_TEST

/* A helix of T = 7 whole turns over n = 360 rows (period 360/7) riding on a slower,
 * larger third axis (one cycle, amplitude 3): component 0 is that axis, components
 * 1-2 the circle (a degenerate pair, so any rotation of it), whose periods match:
 * turns = T = n / period, the same measure as the fitted cycles (an angle count
 * over the n - 1 steps would say 7 * 359/360). */
START_TEST(helix_turns)
{
    const size_t n = 360, turns = 7;
    const double w = TWO_PI * (double)turns / (double)n;
    es_matrix *m = helix_matrix(n, 6, w, 1, TWO_PI / (double)n, 3);
    es_svd *s = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    es_periodicity *p = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_periodicity_from_svd(s, m, 3, ES_PERIOD_ALPHA, &p, &err), 0);
    ck_assert_uint_eq(p->turn_plane[0], 1);
    ck_assert_uint_eq(p->turn_plane[1], 2);
    ck_rel(p->turns, (double)turns, 1e-7);
    ck_rel(p->turns, (double)n / p->components[1].period, 1e-7);
    ck_rel(p->components[0].period, (double)n, 1e-6);
    ck_rel(p->components[1].period, (double)n / (double)turns, 1e-6);
    ck_rel(p->components[2].period, (double)n / (double)turns, 1e-6);
    ck_assert_double_eq_tol(p->components[1].peak_share, 1.0, 1e-9);
    es_periodicity_free(p);
    /* m = 1 still uses the top 3 components for the turns. */
    ck_assert_int_eq(es_periodicity_from_svd(s, m, 1, ES_PERIOD_ALPHA, &p, &err), 0);
    ck_assert_uint_eq(p->m, 1);
    ck_rel(p->turns, (double)turns, 1e-7);
    es_periodicity_free(p);
    es_svd_release(s);
    es_matrix_release(m);
}
END_TEST

/* Helices of known, non-integer turns T (either sense, any phase, radius and
 * centre, rows taken with a step): turns is T = n * step / period, and equals the
 * cycles of the circle's components. */
START_TEST(helix_turns_non_integer)
{
    static const struct {
        size_t n;
        double turns, phase, radius, cx, sense;
    } cases[] = {{200, 2.5, 0.3, 1, 0, 1}, {331, 1.93, 2.0, 5, 3, -1}, {64, 4.25, 0, 0.01, -1, 1},
                 {500, 11.7, 1.1, 2, 0, -1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = cases[i].n, d = 2;
        double w = cases[i].sense * TWO_PI * cases[i].turns / (double)n;
        double *v = es_calloc(n * d, sizeof *v);
        for (size_t p = 0; p < n; p++) {
            v[p * d] = cases[i].cx + cases[i].radius * cos(w * (double)p + cases[i].phase);
            v[p * d + 1] = cases[i].radius * sin(w * (double)p + cases[i].phase);
        }
        es_matrix *m = matrix_of(v, n, d);
        free(v);
        es_svd *s = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
        es_periodicity *p = NULL;
        es_err err = { 0 };
        ck_assert_msg(es_periodicity_from_svd(s, m, 2, ES_PERIOD_ALPHA, &p, &err) == 0, "%s", err.message);
        ck_rel(p->turns, cases[i].turns, 1e-7);
        ck_rel(p->turns, p->components[0].fit_cycles, 1e-6);
        es_periodicity_free(p);
        es_svd_release(s);
        es_matrix_release(m);
    }
}
END_TEST

START_TEST(errors)
{
    es_matrix *m = helix_matrix(50, 4, 0.3, 1, 0.1, 2);
    es_svd *s = svd_of(m, NULL, 0, ES_CENTER_COLUMNS);
    es_periodicity *p = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_periodicity_from_svd(s, m, 0, ES_PERIOD_ALPHA, &p, &err), err, ES_E_PARAM, "k");
    ck_assert_fails(es_periodicity_from_svd(s, m, 5, ES_PERIOD_ALPHA, &p, &err), err, ES_E_PARAM, "k");
    es_svd_release(s);
    const size_t uneven[] = { 0, 1, 2, 4, 5, 6 };
    s = svd_of(m, uneven, 6, ES_CENTER_COLUMNS);
    ck_assert_fails(es_periodicity_from_svd(s, m, 1, ES_PERIOD_ALPHA, &p, &err), err, ES_E_PARAM, "rows");
    es_svd_release(s);
    const size_t three[] = { 0, 1, 2 };
    s = svd_of(m, three, 3, ES_CENTER_NONE);
    ck_assert_fails(es_periodicity_from_svd(s, m, 1, ES_PERIOD_ALPHA, &p, &err), err, ES_E_PARAM, "rows");
    ck_assert_ptr_null(p);
    es_svd_release(s);
    es_period q;
    const double x[3] = { 1, 2, 3 };
    ck_assert_fails(es_period_estimate(x, 3, 1, 1.0, ES_PERIOD_ALPHA, &q, &err), err, ES_E_PARAM, "rows");
    es_periodicity_free(NULL);
    es_matrix_release(m);
}
END_TEST

/* Sinusoids from 1.5 cycles up to the Nyquist frequency n/2 return their period,
 * for an even and an odd n (where the highest frequency is (n-1)/2). */
START_TEST(sinusoids_one_and_a_half_to_nyquist)
{
    const size_t ns[] = { 256, 1023 };
    for (size_t c = 0; c < 2; c++) {
        size_t n = ns[c];
        const double fs[] = { 1.5, 2, 3.7, 50.3, (double)(n / 2) - 0.5, (double)(n / 2) };
        for (size_t i = 0; i < sizeof fs / sizeof *fs; i++) {
            double *x = sinusoid(n, fs[i], 2, 0.4, 1);
            es_period p;
            es_err err = { 0 };
            ck_assert_int_eq(es_period_estimate(x, n, 1, 1.0, ES_PERIOD_ALPHA, &p, &err), 0);
            ck_assert_msg(p.found, "n %zu f %g: %s (fit %.12g)", n, fs[i], es_period_verdict_name(p.verdict),
                          p.fit_cycles);
            ck_rel(p.cycles, fs[i], 1e-8);
            ck_rel(p.period, (double)n / fs[i], 1e-8);
            ck_assert(p.p_exact && p.p_value < 1e-20);
            free(x);
        }
    }
}
END_TEST

/* Deterministic uniform noise in [-1, 1) (splitmix64): white. */
static double *white_noise(size_t n, uint64_t seed)
{
    double *x = es_malloc(n * sizeof *x);
    for (size_t t = 0; t < n; t++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        x[t] = (double)(z >> 11) / 4503599627370496.0 - 1;
    }
    return x;
}

/* Before issue 10 every curve got a period: a trend and a half cycle the 0.5-cycle
 * floor of the search (period 2n: 2046 for n = 1023, as GPT-2 W_pos rows 1: PC3
 * did), white noise its highest periodogram bin. Now: none, with the reason. */
START_TEST(no_period)
{
    const size_t n = 1023;
    double *trend = es_malloc(n * sizeof *trend);
    for (size_t t = 0; t < n; t++)
        trend[t] = 0.01 * (double)t - 3;
    double *half = sinusoid(n, 0.5, 1, 0, 0);
    double *quadratic = es_malloc(n * sizeof *quadratic);
    for (size_t t = 0; t < n; t++)
        quadratic[t] = ((double)t - 400) * ((double)t - 400);
    es_period q;
    es_err qerr = { 0 };
    ck_assert_int_eq(es_period_estimate(quadratic, n, 1, 1.0, ES_PERIOD_ALPHA, &q, &qerr), 0);
    ck_assert_msg(!q.found && q.period == 0, "quadratic: %s", es_period_verdict_name(q.verdict));
    const double *curves[] = { trend, half };
    for (size_t c = 0; c < 2; c++) {
        es_period p;
        es_err err = { 0 };
        ck_assert_int_eq(es_period_estimate(curves[c], n, 1, 1.0, ES_PERIOD_ALPHA, &p, &err), 0);
        ck_assert_int_eq(p.verdict, ES_PERIOD_EDGE);
        ck_assert(!p.found);
        ck_assert_double_eq(p.period, 0);
        ck_assert_double_eq(p.cycles, 0);
        ck_assert_double_eq_tol(p.fit_cycles, 0.5, 1e-6);   /* what used to be reported */
        ck_assert_double_eq_tol(p.fit_period, 2046, 1e-2);
        ck_assert_double_eq(p.search_lo, 0.5);
    }
    /* Three seeds of white noise: the peak never stands out (p >= 0.01). */
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double *x = white_noise(n, seed);
        es_period p;
        es_err err = { 0 };
        ck_assert_int_eq(es_period_estimate(x, n, 1, 1.0, ES_PERIOD_ALPHA, &p, &err), 0);
        ck_assert_msg(!p.found && p.p_value >= ES_PERIOD_ALPHA, "seed %llu: %s p %g (fit %g cycles)",
                      (unsigned long long)seed, es_period_verdict_name(p.verdict), p.p_value, p.fit_cycles);
        ck_assert_uint_eq(p.n_ordinates, 511);
        free(x);
    }
    /* 0.8 cycles: an interior fit, but the rows do not hold one full cycle. */
    double *part = sinusoid(n, 0.8, 1, 0.3, 0);
    es_period p;
    es_err err = { 0 };
    ck_assert_int_eq(es_period_estimate(part, n, 1, 1.0, ES_PERIOD_ALPHA, &p, &err), 0);
    ck_assert_int_eq(p.verdict, ES_PERIOD_UNDER_ONE_CYCLE);
    ck_rel(p.fit_cycles, 0.8, 1e-6);
    /* A sinusoid buried in noise three times its amplitude is still found at n = 1023. */
    double *noisy = white_noise(n, 7), *wave = sinusoid(n, 37.25, 0.6, 1.1, 0);
    for (size_t t = 0; t < n; t++)
        noisy[t] = 1.7 * noisy[t] + wave[t];
    ck_assert_int_eq(es_period_estimate(noisy, n, 1, 1.0, ES_PERIOD_ALPHA, &p, &err), 0);
    ck_assert_msg(p.found, "%s p %g", es_period_verdict_name(p.verdict), p.p_value);
    ck_assert(fabs(p.cycles - 37.25) < 0.1);
    free(noisy);
    free(wave);
    free(part);
    free(trend);
    free(half);
    free(quadratic);
}
END_TEST

/* Fisher's p-values against exact rational sums of the same series (g taken as
 * its exact binary fraction), made by
 *   /usr/bin/python3 -c 'from fractions import Fraction as F; import math
 *   p = lambda g, m: float(sum((-1)**(j-1)*math.comb(m,j)*(1-j*F(g))**(m-1)
 *                               for j in range(1, m+1) if j*F(g) < 1))'
 * Where S1 = m (1-g)^(m-1) >= 1 only the lower bound S1/(1+S1) is returned. */
START_TEST(fisher_pvalues)
{
    static const struct { double g; size_t m; double p; bool exact; double bound; } cases[] = {
        { 0.025, 511, 0.0012606062774011288, true, 0 },
        { 0.02, 511, 0.017010558918852, true, 0 },
        { 0.015, 511, 0.20754385106181586, true, 0 },
        { 0.1, 100, 0.0029500062017708967, true, 0 },
        { 0.3, 10, 0.3917397100000001, true, 0 },
        { 0.05, 200, 0.007363920940769841, true, 0 },
        { 0.6, 4, 0.25600000000000006, true, 0 },
        { 0.2, 50, 0.0008920133055324306, true, 0 },
        { 0.012, 511, 0.6768181881204611, false, 0.5198278867152075 },
        { 0.01, 511, 0.963850370161307, false, 0.7522592741395727 },
        { 0.004, 511, 1.0, false, 0.9851131564926895 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bool exact;
        double p = es_fisher_g_pvalue(cases[i].g, cases[i].m, &exact);
        ck_assert_int_eq(exact, cases[i].exact);
        if (exact)
            ck_rel(p, cases[i].p, 1e-11);
        else {
            ck_rel(p, cases[i].bound, 1e-12);
            ck_assert(p <= cases[i].p && p >= 0.5);
        }
    }
    bool exact;
    ck_assert_double_eq(es_fisher_g_pvalue(1.0, 100, &exact), 0);
    ck_assert_double_eq(es_fisher_g_pvalue(0, 100, &exact), 1);
}
END_TEST

/* Columns that are pure sinusoids of known cycles, amplitude, phase and offset
 * (integer and non-integer cycles over the selection), a constant column and a
 * trend, read over every second row (step 2): each column's period is
 * n * step / cycles, its amplitude and phase those of the sinusoid, r2 = 1; the
 * constant has none ("constant"), the trend none either. */
START_TEST(columns_pure_sinusoids)
{
    enum { ROWS = 401, N = 200, D = 5 };
    const double f[3] = { 5, 12, 7.3 }, amp[3] = { 3, 0.5, 2 }, ph[3] = { 0.7, -1.2, 2.5 },
                 off[3] = { 1, -2, 0 };
    double *v = es_malloc(ROWS * D * sizeof *v);
    size_t idx[N];
    for (size_t i = 0; i < N; i++)
        idx[i] = 2 * i + 1;
    for (size_t r = 0; r < ROWS; r++) {
        double t = ((double)r - 1) / 2; /* the sample index in the selection */
        for (size_t j = 0; j < 3; j++)
            v[r * D + j] = amp[j] * cos(TWO_PI * f[j] * t / N + ph[j]) + off[j];
        v[r * D + 3] = 4.25;
        v[r * D + 4] = 0.01 * (double)r;
    }
    es_matrix *m = matrix_of(v, ROWS, D);
    es_period *per = NULL;
    long step = 0;
    es_err err = { 0 };
    ck_assert_msg(es_periodicity_columns(m, idx, N, ES_PERIOD_ALPHA, &per, &step, &err) == 0, "%s", err.message);
    ck_assert_int_eq(step, 2);
    for (size_t j = 0; j < 3; j++) {
        ck_assert_msg(per[j].found, "column %zu: %s", j, es_period_verdict_name(per[j].verdict));
        ck_rel(per[j].cycles, f[j], 1e-8); /* the search on a flat maximum */
        ck_rel(per[j].period, N * 2.0 / f[j], 1e-8);
        ck_assert_uint_eq(per[j].peak_bin, (size_t)lround(f[j]));
        ck_rel(per[j].amplitude, amp[j], 1e-8);
        /* The fit is at the found frequency, which the search places within ~1e-8
         * of f: the sinusoid at f + e agrees with the true one at the selection's
         * centre (n-1)/2, so the phase moves by -pi e (n-1)/n, the amplitude only
         * by ~e / f; what is left after that shift is rounding. */
        double e = per[j].fit_cycles - f[j];
        ck_rel(per[j].amplitude, amp[j], 1e-9);
        ck_assert_double_eq_tol(per[j].phase, ph[j], 1e-6);
        ck_assert_double_eq_tol(per[j].phase, ph[j] - TWO_PI / 2 * e * (N - 1) / N, 1e-9);
        ck_assert_double_eq_tol(per[j].r2, 1, 1e-12);
        ck_assert(per[j].p_value < ES_PERIOD_ALPHA);
    }
    ck_assert_int_eq(per[3].verdict, ES_PERIOD_CONSTANT);
    ck_assert(!per[3].found && per[3].period == 0 && per[3].r2 == 0 && per[3].amplitude == 0);
    ck_assert(!per[4].found);
    ck_assert_double_eq(per[4].period, 0);
    free(per);
    /* Each column equals es_period_estimate on that column alone. */
    ck_assert_int_eq(es_periodicity_columns(m, idx, N, 0.05, &per, &step, &err), 0);
    double *col = es_malloc(N * sizeof *col);
    for (size_t j = 0; j < D; j++) {
        for (size_t i = 0; i < N; i++)
            col[i] = v[idx[i] * D + j];
        es_period q;
        ck_assert_int_eq(es_period_estimate(col, N, 1, 2.0, 0.05, &q, &err), 0);
        ck_assert_double_eq(per[j].fit_cycles, q.fit_cycles);
        ck_assert_double_eq(per[j].amplitude, q.amplitude);
        ck_assert_double_eq(per[j].p_value, q.p_value);
        ck_assert_double_eq(per[j].alpha, 0.05);
    }
    free(col);
    free(per);
    per = NULL;
    const size_t uneven[] = { 0, 1, 2, 4, 5, 6 };
    ck_assert_fails(es_periodicity_columns(m, uneven, 6, ES_PERIOD_ALPHA, &per, &step, &err), err, ES_E_PARAM,
                    "rows");
    ck_assert_fails(es_periodicity_columns(m, idx, 3, ES_PERIOD_ALPHA, &per, &step, &err), err, ES_E_PARAM, "rows");
    ck_assert_fails(es_periodicity_columns(m, idx, N, 0.5, &per, &step, &err), err, ES_E_PARAM, "alpha");
    ck_assert_ptr_null(per);
    es_matrix_release(m);
    free(v);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("periodicity");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, pure_sinusoid_non_integer_bin);
    tcase_add_test(tc, peak_share_parseval);
    tcase_add_test(tc, single_frequency_matrix);
    tcase_add_test(tc, helix_turns);
    tcase_add_test(tc, helix_turns_non_integer);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, sinusoids_one_and_a_half_to_nyquist);
    tcase_add_test(tc, no_period);
    tcase_add_test(tc, fisher_pvalues);
    tcase_add_test(tc, columns_pure_sinusoids);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
