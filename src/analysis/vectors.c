/* Top singular vectors of either side with their sparsity (mass counts). */
#include "analysis/internal.h"

#include <stdlib.h>
#include <string.h>

/* qsort order of doubles, descending. */
static int descending(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a < b) - (a > b);
}

/* Squares sorted descending, summed in long double until they reach frac of the
 * total (less 1e-12 of it, so exact thresholds survive rounding). Returns 0 for a
 * zero vector or frac <= 0; frac > 1 behaves as 1. Never fails. */
size_t es_mass_count(const double *v, size_t len, double frac)
{
    double *sq = es_malloc(len * sizeof *sq);
    long double total = 0;
    for (size_t i = 0; i < len; i++) {
        sq[i] = v[i] * v[i];
        total += sq[i];
    }
    qsort(sq, len, sizeof *sq, descending);
    long double goal = (frac > 1 ? 1 : frac) * total * (1 - 1e-12L), running = 0;
    size_t count = 0;
    while (count < len && total > 0 && frac > 0 && running < goal)
        running += sq[count++];
    free(sq);
    return count;
}

/* Vector j of the chosen side as `len` contiguous values: column j of u (left,
 * given with its row stride ld) or row j of vt (right). */
static void copy_vector(const es_svd *svd, const double *u, size_t ld, size_t j, double *dst)
{
    if (!u) {
        memcpy(dst, svd->vt + j * svd->d, svd->d * sizeof *dst);
        return;
    }
    for (size_t i = 0; i < svd->n; i++)
        dst[i] = u[i * ld + j];
}

/* ES_E_PARAM "method" for a values-only svd; ES_E_PARAM "k" unless 1 <= k <= r;
 * ES_E_NOMEM if k x len does not fit; fails as es_svd_left when the left
 * vectors cannot be formed. */
int es_vectors_from_svd(const es_svd *svd, const es_matrix *src, es_side side, size_t k, es_vectors **out,
                        es_err *err)
{
    if (es_svd_need_vectors(svd, "vectors", err) != 0 || es_check_k(k, svd->r, "k", err) != 0)
        return -1;
    size_t len = side == ES_SIDE_LEFT ? svd->n : svd->d;
    size_t ld = 0;
    double *owned = NULL; /* left vectors formed for this call alone (a decomposition kept in parts) */
    const double *u = side == ES_SIDE_LEFT ? es_svd_left_for(svd, src, k, &ld, &owned, err) : NULL;
    if (side == ES_SIDE_LEFT && !u)
        return -1;
    double *values = es_alloc_doubles(k, len, "singular vectors", err);
    if (!values) {
        free(owned);
        return -1;
    }
    es_vectors *v = es_malloc(sizeof *v);
    *v = (es_vectors){ .side = side, .k = k, .len = len, .values = values };
    v->s = es_malloc(k * sizeof *v->s);
    v->n50 = es_malloc(k * sizeof *v->n50);
    v->n90 = es_malloc(k * sizeof *v->n90);
    memcpy(v->s, svd->s, k * sizeof *v->s);
    for (size_t j = 0; j < k; j++) {
        copy_vector(svd, u, ld, j, values + j * len);
        v->n50[j] = es_mass_count(values + j * len, len, 0.50);
        v->n90[j] = es_mass_count(values + j * len, len, 0.90);
    }
    free(owned);
    *out = v;
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_vectors_free(es_vectors *v)
{
    if (!v)
        return;
    free(v->values);
    free(v->s);
    free(v->n50);
    free(v->n90);
    free(v);
}
