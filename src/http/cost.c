/* Cost estimates of computing requests, checked against limits.max_request_cost
 * before a request is queued (es_precheck). One unit is roughly one
 * floating-point operation or one byte of output; the default limit (1e11) is
 * about a minute of one compute thread on the machines this was measured on
 * (README, "Connections, slow clients and heavy requests"). Estimates are upper bounds from shapes alone: a cached
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
