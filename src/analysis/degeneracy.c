/* Degeneracy: runs of near-equal singular values, inside which individual
 * singular vectors are only defined up to a rotation. */
#include "embedscope/positional.h"

#include <math.h>
#include <stdlib.h>

/* Relative gap between s[j] and s[j+1]; two zeros count as equal (gap 0). */
static double relative_gap(const double *s, size_t j)
{
    return s[j] > 0 ? (s[j] - s[j + 1]) / s[j] : 0.0;
}

/* Maximal runs of length >= 2 whose consecutive relative gaps are all below
 * threshold. ES_E_PARAM "gap" unless 0 < threshold < 1. */
int es_degeneracy_find(const double *s, size_t r, double threshold, es_degeneracy **out,
                       es_err *err)
{
    if (!(threshold > 0 && threshold < 1))
        return es_fail(err, ES_E_PARAM, "gap",
                       "gap threshold must be a relative gap in (0, 1), got %g", threshold);
    es_degeneracy *d = es_calloc(1, sizeof *d);
    d->threshold = threshold;
    d->start = es_calloc(r / 2 + 1, sizeof *d->start);  /* at most r/2 groups of >= 2 */
    d->end = es_calloc(r / 2 + 1, sizeof *d->end);
    size_t j = 0;
    while (j + 1 < r) {
        size_t e = j + 1;
        while (e < r && relative_gap(s, e - 1) < threshold)
            e++;
        if (e - j >= 2) {
            d->start[d->count] = j;
            d->end[d->count] = e;
            d->count++;
        }
        j = e;
    }
    *out = d;
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_degeneracy_free(es_degeneracy *d)
{
    if (!d)
        return;
    free(d->start);
    free(d->end);
    free(d);
}
