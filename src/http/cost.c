/* Cost estimates of computing requests, checked against limits.max_request_cost
 * before a request is queued (es_precheck). One unit is roughly one
 * floating-point operation or one byte of output; the default limit (1e11) is
 * roughly 5-15 s of one compute thread on the machine this was measured on
 * (docs/operations.md, "Connections, slow clients and heavy requests"). Every analysis
 * has one: the generic runner's from its descriptor (es_cost_run), the
 * hand-written handlers' added to cx->cost before their gate. Estimates are upper bounds from shapes alone: a cached
 * decomposition is still counted, so a request refused here is refused every
 * time, not depending on what happens to be cached. */
#include "http/http.h"


/* See http.h. Never fails. */
double es_cost_svd(size_t n, size_t d)
{
    double r = (double)(n < d ? n : d), N = (double)n, D = (double)d;
    /* dgesdd with both singular bases: ~4 n d r + 8 r^3 flops; the copy of the selection */
    return 4.0 * N * D * r + 8.0 * r * r * r + 8.0 * N * D;
}

/* See http.h. Never fails. */
double es_cost_products(size_t d, size_t a, size_t b) { return 2.0 * (double)d * (double)a * (double)b; }

/* See http.h. Never fails. */
double es_cost_grid(size_t bins, size_t rows, size_t cols)
{
    double cells = bins ? (double)bins * (double)bins : (double)rows * (double)cols;
    return ES_BYTES_PER_NUMBER * cells;
}

/* See http.h. Never fails. */
double es_cost_attention_layer(size_t q_start, size_t q_stop, size_t d, size_t n_heads)
{
    double q = (double)q_stop, nq = (double)(q_stop - q_start), D = (double)d;
    return 4.0 * q * D * D + 8.0 * q * D + 2.0 * nq * q * D + 8.0 * nq * q * (double)n_heads;
}

/* See http.h. Never fails. */
double es_cost_run(const es_run *run)
{
    double cost = 0;
    for (int i = 0; i < 2; i++) {
        const es_one *o = &run->one[i];
        if (!o->m)
            continue;
        size_t n = o->sel.n, d = es_matrix_dim(o->m);
        if (run->a->shape == ES_SHAPE_ONE)
            cost += 8.0 * (double)n * (double)d; /* one pass over the selection */
        if (run->a->decomposes)
            cost += es_cost_svd(n, d);
        if (run->a->cost && i == 0)
            cost += run->a->cost(run, n, d);
    }
    return cost;
}
