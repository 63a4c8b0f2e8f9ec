/* Spectrum: singular values, explained-variance ratios and the number of
 * components needed for 50 / 90 / 99 % of the variance. */
#include "analysis/internal.h"

#include <stdlib.h>
#include <string.h>

/* The total sum of squares and the running sums use long double so the ratios
 * sum to 1 within a few ulp even for r in the thousands. */
void es_variance_ratios(const es_svd *svd, size_t k, double *evr, double *cumulative)
{
    const double *s = svd->s;
    long double total = 0, running = 0;
    if (svd->r < (svd->n < svd->d ? svd->n : svd->d)) /* top-k: the rest of the spectrum is not held */
        total = svd->total_ss;
    else
        for (size_t j = 0; j < svd->r; j++)
            total += (long double)s[j] * s[j];
    for (size_t j = 0; j < k; j++) {
        long double share = total > 0 ? (long double)s[j] * s[j] / total : 0;
        running += share;
        evr[j] = (double)share;
        cumulative[j] = (double)running;
    }
}

/* Smallest m with cumulative[m-1] >= threshold - 1e-12 (the slack absorbs the
 * rounding of thresholds hit exactly); 0 when never reached (X = 0). */
static size_t components_for(const double *cumulative, size_t r, double threshold)
{
    for (size_t m = 1; m <= r; m++)
        if (cumulative[m - 1] >= threshold - 1e-12)
            return m;
    return 0;
}

/* Copies the decomposition's values; never fails (err unused). */
int es_spectrum_from_svd(const es_svd *svd, es_spectrum **out, es_err *err)
{
    (void)err;
    size_t r = svd->r;
    es_spectrum *sp = es_malloc(sizeof *sp);
    sp->r = r;
    sp->s = es_malloc(r * sizeof *sp->s);
    sp->evr = es_malloc(r * sizeof *sp->evr);
    sp->cumulative = es_malloc(r * sizeof *sp->cumulative);
    memcpy(sp->s, svd->s, r * sizeof *sp->s);
    es_variance_ratios(svd, r, sp->evr, sp->cumulative);
    sp->n50 = components_for(sp->cumulative, r, 0.50);
    sp->n90 = components_for(sp->cumulative, r, 0.90);
    sp->n99 = components_for(sp->cumulative, r, 0.99);
    *out = sp;
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_spectrum_free(es_spectrum *s)
{
    if (!s)
        return;
    free(s->s);
    free(s->evr);
    free(s->cumulative);
    free(s);
}
