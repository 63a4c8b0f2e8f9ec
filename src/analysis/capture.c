/* Subspace capture: how much of each of b's model-space singular vectors lies in
 * the span of a's top k. */
#include "analysis/internal.h"

#include <cblas.h>
#include <stdlib.h>

/* c_j = |V_a^k v_j|^2: the squared column norms of the k x r_b product
 * Vt_a[0:k] * Vt_b^T (long double sums). Not clamped: rounding may leave a value
 * a few ulp outside [0, 1]. ES_E_PARAM "method" if either holds values only,
 * ES_E_INCOMPATIBLE if d differs, ES_E_PARAM "k" unless 1 <= k <= a->r,
 * ES_E_NOMEM if the product does not fit. */
int es_capture_compute(const es_svd *a, size_t k, const es_svd *b, es_capture **out, es_err *err)
{
    if (es_svd_need_vectors(a, "capture", err) != 0 || es_svd_need_vectors(b, "capture", err) != 0 ||
        es_check_same_space(a, b, err) != 0 || es_check_k(k, a->r, "k", err) != 0)
        return -1;
    size_t rb = b->r, d = a->d;
    double *p = es_alloc_doubles(k, rb, "capture product", err);
    if (!p)
        return -1;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)k, (int)rb, (int)d, 1.0, a->vt,
                (int)d, b->vt, (int)d, 0.0, p, (int)rb);
    es_capture *c = es_malloc(sizeof *c);
    *c = (es_capture){ .k = k, .d = d, .count = rb, .baseline = (double)k / (double)d };
    c->capture = es_malloc(rb * sizeof *c->capture);
    long double total = 0;
    for (size_t j = 0; j < rb; j++) {
        long double cj = 0;
        for (size_t i = 0; i < k; i++)
            cj += (long double)p[i * rb + j] * p[i * rb + j];
        c->capture[j] = (double)cj;
        total += cj;
    }
    c->sum = (double)total;
    free(p);
    *out = c;
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_capture_free(es_capture *c)
{
    if (!c)
        return;
    free(c->capture);
    free(c);
}
