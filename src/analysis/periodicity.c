/* Periodicity of position curves: periodogram peak, sub-bin refinement by a
 * least-squares sinusoid fit, the share of variance at the peak, and the number
 * of turns of the helix traced by the top components. */
#include "embedscope/positional.h"
#include "analysis/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TWO_PI 6.283185307179586476925286766559
/* Golden-section search stops when the bracket is this narrow (in bins). */
#define REFINE_TOL 1e-11

/* Centred copy of x[t * stride], t < n; *ss receives the sum of squares. */
static double *centred_copy(const double *x, size_t n, size_t stride, double *ss)
{
    double *y = es_malloc(n * sizeof *y), mean = 0;
    for (size_t t = 0; t < n; t++)
        mean += (y[t] = x[t * stride]);
    mean /= (double)n;
    *ss = 0;
    for (size_t t = 0; t < n; t++) {
        y[t] -= mean;
        *ss += y[t] * y[t];
    }
    return y;
}

/* One-sided periodogram P_k = |sum_t y_t e^{-2 pi i k t/n}|^2, k = 0..n/2, by direct
 * sums over a table of the n roots of unity (k t reduced mod n: exact angles). */
static double *periodogram(const double *y, size_t n)
{
    double *c = es_malloc(n * sizeof *c), *s = es_malloc(n * sizeof *s);
    for (size_t t = 0; t < n; t++) {
        c[t] = cos(TWO_PI * (double)t / (double)n);
        s[t] = sin(TWO_PI * (double)t / (double)n);
    }
    double *p = es_calloc(n / 2 + 1, sizeof *p);
    for (size_t k = 1; k <= n / 2; k++) {
        double re = 0, im = 0;
        for (size_t t = 0, kt = 0; t < n; t++, kt = (kt + k) % n) {
            re += y[t] * c[kt];
            im -= y[t] * s[kt];
        }
        p[k] = re * re + im * im;
    }
    free(c);
    free(s);
    return p;
}

/* The least-squares sinusoid at f cycles per n samples of y (centred): y ~
 * alpha (c - mean c) + beta (s - mean s), c = cos, s = sin of 2 pi f t / n; returns
 * the squared norm of that projection and, when amp is non-NULL, *amp and *phase
 * with alpha c + beta s = amp cos(2 pi f t / n + phase). One pass: sum y = 0, so
 * y . (c - mean c) = y . c. A near-singular pair (f near n/2, where sin vanishes)
 * falls back to the stronger single column. */
static double sinusoid_fit(const double *y, size_t n, double f, double *amp, double *phase)
{
    double sc = 0, ss = 0, cc = 0, s2 = 0, cs = 0, u = 0, v = 0;
    for (size_t t = 0; t < n; t++) {
        double c = cos(TWO_PI * f * (double)t / (double)n);
        double s = sin(TWO_PI * f * (double)t / (double)n);
        sc += c;
        ss += s;
        cc += c * c;
        s2 += s * s;
        cs += c * s;
        u += y[t] * c;
        v += y[t] * s;
    }
    double a = cc - sc * sc / (double)n, b = s2 - ss * ss / (double)n;
    double e = cs - sc * ss / (double)n, det = a * b - e * e;
    double alpha = 0, beta = 0, power;
    if (det > 1e-12 * a * b) {
        alpha = (b * u - e * v) / det;
        beta = (a * v - e * u) / det;
        power = (b * u * u - 2 * e * u * v + a * v * v) / det; /* the quadratic form: the search's own rounding */
    } else {
        double pc = a > 0 ? u * u / a : 0, ps = b > 0 ? v * v / b : 0;
        alpha = pc > ps && a > 0 ? u / a : 0;
        beta = pc > ps || b <= 0 ? 0 : v / b;
        power = pc > ps ? pc : ps;
    }
    if (amp) {
        *amp = hypot(alpha, beta);
        *phase = atan2(-beta, alpha);
    }
    return power;
}

/* The power of sinusoid_fit alone. */
static double ls_power(const double *y, size_t n, double f) { return sinusoid_fit(y, n, f, NULL, NULL); }

/* A fitted power as a function of the frequency f (cycles per n samples): one
 * real curve y (ls_power) or a planar one x + i y (circle_power, turning the
 * way `sign` says). */
typedef struct curve {
    const double *x, *y;
    size_t n, stride;
    double sign;
    double (*power)(const struct curve *c, double f);
} curve;

static double curve_ls_power(const curve *c, double f) { return ls_power(c->y, c->n, f); }

/* Maximiser of c->power on [lo, hi] by golden-section search. */
static double refine(const curve *c, double lo, double hi)
{
    const double r = (sqrt(5.0) - 1) / 2;
    double x1 = hi - r * (hi - lo), x2 = lo + r * (hi - lo);
    double f1 = c->power(c, x1), f2 = c->power(c, x2);
    while (hi - lo > REFINE_TOL) {
        if (f1 < f2) {
            lo = x1;
            x1 = x2;
            f1 = f2;
            x2 = lo + r * (hi - lo);
            f2 = c->power(c, x2);
        } else {
            hi = x2;
            x2 = x1;
            f2 = f1;
            x1 = hi - r * (hi - lo);
            f1 = c->power(c, x1);
        }
    }
    return (lo + hi) / 2;
}

/* The power over a bracket of two cycles can have several local maxima (side lobes
 * of nearby frequencies): a golden-section search from the whole bracket finds one
 * of them, not always the highest (7 of GPT-2 W_pos' 597 periodic columns). So the
 * bracket is scanned at SCAN_STEPS + 1 points first, a spacing far below the width
 * of a lobe (about one cycle), and the search refines every grid maximum within
 * SCAN_NEAR of the highest grid value (a grid point's value is below its lobe's top
 * by a fraction ~(pi h)^2/3, under 1e-3 here), keeping the best. */
#define SCAN_STEPS 64
#define SCAN_NEAR 1e-2
#define SCAN_MAX_REFINED 8
/* The maximiser of c->power over the closed bracket [lo, hi]: the best refined grid
 * maximum, or an end if that is as high up to rounding (END_TIE relative): a maximum
 * on the end itself, such as n/2 for a Nyquist sinusoid, is then exact rather than
 * ~1e-4 off, the search's resolution on a flat maximum. */
#define END_TIE 1e-12
static double best_fit(const curve *c, double lo, double hi)
{
    double h = (hi - lo) / SCAN_STEPS, p[SCAN_STEPS + 1], top = 0;
    for (size_t i = 0; i <= SCAN_STEPS; i++) {
        p[i] = c->power(c, i == SCAN_STEPS ? hi : lo + (double)i * h);
        top = fmax(top, p[i]);
    }
    double f = lo, best = -1;
    size_t refined = 0;
    for (size_t i = 0; i <= SCAN_STEPS && refined < SCAN_MAX_REFINED; i++) {
        bool peak = (i == 0 || p[i] >= p[i - 1]) && (i == SCAN_STEPS || p[i] > p[i + 1]);
        if (!peak || p[i] < top * (1 - SCAN_NEAR))
            continue;
        double a = i == 0 ? lo : lo + (double)(i - 1) * h;
        double b = i + 1 >= SCAN_STEPS ? hi : lo + (double)(i + 1) * h;
        double g = refine(c, a, b), v = c->power(c, g);
        if (p[i] >= v) {   /* the grid point itself is as high: a maximum on it, such as an exact sinusoid's */
            g = i == SCAN_STEPS ? hi : lo + (double)i * h;
            v = p[i];
        }
        refined++;
        if (v > best) {
            best = v;
            f = g;
        }
    }
    double p_lo = p[0], p_hi = p[SCAN_STEPS];
    if (p_hi >= best * (1 - END_TIE) && p_hi >= p_lo)
        return hi;
    if (p_lo >= best * (1 - END_TIE))
        return lo;
    return f;
}

/* The golden-section search locates a smooth maximum only to ~sqrt(eps) (the
 * power is flat there): fits within this many cycles of a bracket edge count as on
 * it, and fits this close to 1 cycle as one full cycle. */
#define FIT_TOL 1e-6

const char *es_period_verdict_name(es_period_verdict v)
{
    switch (v) {
    case ES_PERIOD_FOUND: return "found";
    case ES_PERIOD_CONSTANT: return "constant";
    case ES_PERIOD_EDGE: return "edge_of_search_range";
    case ES_PERIOD_UNDER_ONE_CYCLE: return "under_one_cycle";
    case ES_PERIOD_NOT_SIGNIFICANT: return "not_significant";
    }
    return "?";
}

/* log C(m, j) (lgamma: relative error ~1e-15 of the log, ~1e-13 of the term). */
static double log_choose(size_t m, size_t j)
{
    return lgamma((double)m + 1) - lgamma((double)j + 1) - lgamma((double)(m - j) + 1);
}

/* Fisher's series, or the de Caen lower bound when S1 >= 1 (see positional.h). */
double es_fisher_g_pvalue(double g, size_t m, bool *exact)
{
    *exact = true;
    if (!(g > 0) || m < 2)
        return 1;
    if (g > 1)
        return 0;
    double s1 = exp(log((double)m) + (double)(m - 1) * log1p(-g));
    if (s1 >= 1) {
        *exact = false;
        return s1 / (1 + s1);
    }
    /* |term_j| <= s1^j / j!: positive terms shrink fast, summing from the first is fine. */
    double p = 0;
    for (size_t j = 1; j <= m && (double)j * g < 1; j++) {
        double term = exp(log_choose(m, j) + (double)(m - 1) * log1p(-(double)j * g));
        p += (j % 2 ? term : -term);
    }
    return fmin(fmax(p, 0), 1);
}

/* The verdict of a fitted curve (see positional.h), filling the g-test fields. */
static es_period_verdict judge(const double *p, size_t n, es_period *out)
{
    double f = out->fit_cycles;
    bool at_lo = f - out->search_lo <= FIT_TOL;
    bool at_hi = out->search_hi - f <= FIT_TOL && 2 * out->search_hi < (double)n;
    double total = 0;
    for (size_t k = 1; k <= n / 2; k++)
        total += p[k];
    out->n_ordinates = n / 2;
    out->g = total > 0 ? p[out->peak_bin] / total : 0;
    out->p_value = es_fisher_g_pvalue(out->g, out->n_ordinates, &out->p_exact);
    if (at_lo || at_hi)
        return ES_PERIOD_EDGE;
    if (f < 1 - FIT_TOL)
        return ES_PERIOD_UNDER_ONE_CYCLE;
    if (out->p_value >= out->alpha)
        return ES_PERIOD_NOT_SIGNIFICANT;
    return ES_PERIOD_FOUND;
}

/* Peak bin, variance share of bins peak-1..peak+1 (Parseval weights), refined
 * frequency and verdict of one curve (see positional.h). ES_E_PARAM "rows" if
 * n < 4, "alpha" unless 0 < alpha < 1/2. */
int es_period_estimate(const double *x, size_t n, size_t stride, double step, double alpha, es_period *out,
                       es_err *err)
{
    if (n < 4)
        return es_fail(err, ES_E_PARAM, "rows",
                       "a period needs at least 4 evenly spaced rows, got %zu", n);
    if (!(alpha > 0 && alpha < 0.5))
        return es_fail(err, ES_E_PARAM, "alpha", "alpha must lie in (0, 0.5), got %.17g", alpha);
    double ss;
    double *y = centred_copy(x, n, stride, &ss);
    *out = (es_period){.verdict = ES_PERIOD_CONSTANT, .alpha = alpha, .p_value = 1, .p_exact = true};
    if (ss > 0) {
        double *p = periodogram(y, n);
        size_t peak = 1;
        for (size_t k = 2; k <= n / 2; k++)
            peak = p[k] > p[peak] ? k : peak;
        double near = 0;
        for (size_t k = peak - 1; k <= peak + 1 && k <= n / 2; k++)
            near += (2 * k == n ? 1 : 2) * p[k];   /* k = 0 holds 0: the mean is removed */
        out->search_lo = fmax((double)peak - 1, 0.5);
        out->search_hi = fmin((double)peak + 1, (double)n / 2);
        out->peak_bin = peak;
        out->peak_share = near / ((double)n * ss);
        const curve fit = {.y = y, .n = n, .power = curve_ls_power};
        out->fit_cycles = best_fit(&fit, out->search_lo, out->search_hi);
        out->fit_period = (double)n * step / out->fit_cycles;
        out->r2 = sinusoid_fit(y, n, out->fit_cycles, &out->amplitude, &out->phase) / ss;
        out->verdict = judge(p, n, out);
        free(p);
    }
    out->found = out->verdict == ES_PERIOD_FOUND;
    out->cycles = out->found ? out->fit_cycles : 0;
    out->period = out->found ? out->fit_period : 0;
    free(y);
    return 0;
}

/* Position step of the n evenly spaced rows; ES_E_PARAM "rows" if they are not or n < 4. */
static int row_step(const size_t *rows, size_t n, long *step, es_err *err)
{
    if (n < 4)
        return es_fail(err, ES_E_PARAM, "rows", "periodicity needs at least 4 selected rows, got %zu", n);
    *step = (long)rows[1] - (long)rows[0];
    for (size_t i = 2; i < n; i++)
        if ((long)rows[i] - (long)rows[i - 1] != *step)
            return es_fail(err, ES_E_PARAM, "rows",
                           "periodicity needs evenly spaced rows: rows %zu, %zu, %zu are not "
                           "(drop the exclusion or choose a slice)", rows[i - 2], rows[i - 1], rows[i]);
    return 0;
}

/* See positional.h: every column's period over the items idx. */
int es_periodicity_columns(const es_matrix *m, const size_t *idx, size_t n, double alpha, es_period **out,
                           long *step, es_err *err)
{
    if (!(alpha > 0 && alpha < 0.5))
        return es_fail(err, ES_E_PARAM, "alpha", "alpha must lie in (0, 0.5), got %.17g", alpha);
    if (row_step(idx, n, step, err) != 0)
        return -1;
    size_t d = es_matrix_dim(m);
    double *x = es_matrix_items_copy(m, idx, n);
    es_period *per = es_calloc(d ? d : 1, sizeof *per);
    int rc = 0;
    es_progress_begin("periodogram", d);
    for (size_t j = 0; j < d && (rc = es_progress_check(err)) == 0; j++) { /* O(n^2) a column: stop between them */
        es_progress_step();
        es_period_estimate(x + j, n, d, fabs((double)*step), alpha, &per[j], NULL);
    }
    free(x);
    if (rc < 0) {
        free(per);
        return -1;
    }
    *out = per;
    return 0;
}

/* Relative difference of two periods; pairs with a curve without a period never match. */
static double period_mismatch(const es_period *a, const es_period *b)
{
    if (!a->found || !b->found)
        return INFINITY;
    return fabs(a->period - b->period) / fmax(a->period, b->period);
}

/* Explained power of the least-squares fit z_t ~ c + a e^{2 pi i sign f t / n}
 * (complex c and a) of the planar curve z_t = x_t + i y_t: |sum_t (z_t - mean z)
 * e^{-i theta t}|^2 / (n - |sum_t e^{i theta t}|^2 / n), theta = 2 pi sign f / n.
 * An exact circle traversed at f cycles is fitted exactly, so its maximum is f
 * itself, whatever the phase, radius or centre. */
static double circle_power(const curve *c, double f)
{
    size_t n = c->n;
    double mx = 0, my = 0;
    for (size_t t = 0; t < n; t++) {
        mx += c->x[t * c->stride];
        my += c->y[t * c->stride];
    }
    mx /= (double)n;
    my /= (double)n;
    double re = 0, im = 0, er = 0, ei = 0;
    for (size_t t = 0; t < n; t++) {
        double th = TWO_PI * c->sign * f * (double)t / (double)n, co = cos(th), si = sin(th);
        double zx = c->x[t * c->stride] - mx, zy = c->y[t * c->stride] - my;
        re += zx * co + zy * si; /* (zx + i zy) e^{-i th} */
        im += zy * co - zx * si;
        er += co;
        ei += si;
    }
    double denom = (double)n - (er * er + ei * ei) / (double)n;
    return denom > 0 ? (re * re + im * im) / denom : 0;
}

/* The number of turns of the planar curve (s_a u_a(t), s_b u_b(t)), t < n (the
 * coordinates, not the unit vectors: u_a + i u_b of a circle is an ellipse
 * when s_a != s_b, and an ellipse fits no circle exactly): the
 * frequency (cycles over the n rows, both senses of rotation) of its best
 * circular fit (circle_power): the complex periodogram's peak bin k (by
 * direct sums over the n roots of unity), refined over [max(|k| - 1, 0.5),
 * min(|k| + 1, n/2)] in k's sense. For a helix
 * x_t = r cos(2 pi T t / n), y_t = r sin(...) it is T, i.e. n * step / period:
 * the same measure as the components' fitted cycles. 0 for a constant curve. */
static double plane_turns(const double *u, size_t ld, size_t n, const double *s, size_t a, size_t b)
{
    double ss, *x = centred_copy(u + a, n, ld, &ss), *y = centred_copy(u + b, n, ld, &ss);
    for (size_t t = 0; t < n; t++) { /* the PCA coordinates s_j u_j: the plane's own geometry */
        x[t] *= s[a];
        y[t] *= s[b];
    }
    double *co = es_malloc(n * sizeof *co), *si = es_malloc(n * sizeof *si);
    for (size_t t = 0; t < n; t++) {
        co[t] = cos(TWO_PI * (double)t / (double)n);
        si[t] = sin(TWO_PI * (double)t / (double)n);
    }
    /* bin k < n: k cycles one way (k <= n/2) or n - k the other; exact angles as in periodogram */
    double best = 0;
    size_t peak = 0;
    for (size_t k = 1; k < n; k++) {
        double re = 0, im = 0;
        for (size_t t = 0, kt = 0; t < n; t++, kt = (kt + k) % n) {
            re += x[t] * co[kt] + y[t] * si[kt];
            im += y[t] * co[kt] - x[t] * si[kt];
        }
        if (re * re + im * im > best) {
            best = re * re + im * im;
            peak = k;
        }
    }
    double turns = 0;
    if (peak) {
        double k = 2 * peak <= n ? (double)peak : (double)(n - peak);
        curve c = {.x = x, .y = y, .n = n, .stride = 1, .sign = 2 * peak <= n ? 1 : -1, .power = circle_power};
        turns = best_fit(&c, fmax(k - 1, 0.5), fmin(k + 1, (double)n / 2));
    }
    free(co);
    free(si);
    free(x);
    free(y);
    return turns;
}

/* Turns of the helix in the plane of the top-3 pair with the closest periods. */
static void helix_turns(const es_svd *svd, const double *u, size_t ld, const es_period *per, size_t top,
                        es_periodicity *p)
{
    double best = INFINITY;
    p->turn_plane[0] = 0;
    p->turn_plane[1] = top > 1 ? 1 : 0;
    for (size_t a = 0; a < top; a++)
        for (size_t b = a + 1; b < top; b++)
            if (period_mismatch(&per[a], &per[b]) < best) {
                best = period_mismatch(&per[a], &per[b]);
                p->turn_plane[0] = a;
                p->turn_plane[1] = b;
            }
    p->turns = top > 1 ? plane_turns(u, ld, svd->n, svd->s, p->turn_plane[0], p->turn_plane[1]) : 0;
}

/* Periods of the top m left vectors and the helix turns (see positional.h).
 * ES_E_PARAM "k" unless 1 <= m <= r; "rows" for uneven or too few rows; "alpha";
 * fails as es_svd_left when the left vectors cannot be formed. */
int es_periodicity_from_svd(const es_svd *svd, const es_matrix *src, size_t m, double alpha, es_periodicity **out,
                            es_err *err)
{
    if (es_check_k(m, svd->r, "k", err) != 0)
        return -1;
    if (!(alpha > 0 && alpha < 0.5))
        return es_fail(err, ES_E_PARAM, "alpha", "alpha must lie in (0, 0.5), got %.17g", alpha);
    long step = 0;
    if (row_step(svd->rows, svd->n, &step, err) != 0)
        return -1;
    size_t top = svd->r < 3 ? svd->r : 3, count = m > top ? m : top, ld = 0;
    double *owned = NULL; /* left vectors formed for this call alone (a decomposition kept in parts) */
    const double *u = es_svd_left_for(svd, src, count, &ld, &owned, err);
    if (!u)
        return -1;
    es_period *per = es_calloc(count, sizeof *per);
    es_progress_begin("periodogram", count);
    for (size_t j = 0; j < count; j++) {
        if (es_progress_check(err) < 0) { /* one component's periodogram is O(n^2): stop between them */
            free(per);
            free(owned);
            return -1;
        }
        es_period_estimate(u + j, svd->n, ld, fabs((double)step), alpha, &per[j], NULL);
        es_progress_step();
    }
    es_periodicity *p = es_calloc(1, sizeof *p);
    p->n = svd->n;
    p->m = m;
    p->step = step;
    helix_turns(svd, u, ld, per, top, p);
    free(owned);
    p->components = per;
    *out = p;
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_periodicity_free(es_periodicity *p)
{
    if (!p)
        return;
    free(p->components);
    free(p);
}
