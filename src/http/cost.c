/* Cost estimates of computing requests, checked against limits.max_request_cost
 * before a request is queued (es_precheck). One unit is roughly one
 * floating-point operation or one byte of output; the default limit (1e11) is
 * about a minute of one compute thread on the machines this was measured on
 * (README, "Connections, slow clients and heavy requests"). Estimates are upper bounds from shapes alone: a cached
 * decomposition is still counted, so a request refused here is refused every
 * time, not depending on what happens to be cached. */
#include "http/http.h"

/* Bytes of JSON per rendered number (17 significant digits and punctuation). */
#define BYTES_PER_NUMBER 25.0

/* See http.h. Never fails. */
double es_cost_svd(size_t n, size_t d)
{
    double r = (double)(n < d ? n : d), N = (double)n, D = (double)d;
    /* dgesdd with both singular bases: ~4 n d r + 8 r^3 flops; the copy of the selection */
    return 4.0 * N * D * r + 8.0 * r * r * r + 8.0 * N * D;
}

/* Output numbers of k components over the n items (pca coordinates, vectors). */
double es_cost_k_items(const es_one_req *r, size_t n, size_t d)
{
    (void)d;
    return BYTES_PER_NUMBER * (double)r->k * (double)n;
}

/* vectors: k vectors of the requested side (items n or model axis d). */
double es_cost_vectors(const es_one_req *r, size_t n, size_t d)
{
    return BYTES_PER_NUMBER * (double)r->k * (double)(n > d ? n : d);
}

/* periodicity: a direct periodogram (n/2 frequencies x n positions, ~8 operations
 * each with the index reduction) per component. */
double es_cost_periodicity(const es_one_req *r, size_t n, size_t d)
{
    (void)d;
    return 4.0 * (double)r->k * (double)n * (double)n;
}

/* toeplitz: the n x n Gram (or cosine) matrix of the items and its diagonals. */
double es_cost_gram(const es_one_req *r, size_t n, size_t d)
{
    (void)r;
    return 2.0 * (double)n * (double)n * (double)d + BYTES_PER_NUMBER * (double)n;
}

/* See http.h. Never fails. */
double es_cost_one(const es_analysis *a, const es_one_req *r)
{
    size_t n = r->one.sel.n, d = es_matrix_dim(r->one.m);
    double cost = 8.0 * (double)n * (double)d; /* one pass over the selection */
    if (a->decomposed)
        cost += es_cost_svd(n, d);
    if (a->cost)
        cost += a->cost(r, n, d);
    return cost;
}
