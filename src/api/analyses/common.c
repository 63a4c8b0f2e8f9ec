/* What the analysis descriptors share (common.h). */
#include "common.h"

/* See common.h. */
es_degeneracy *es_desc_degeneracy(const es_svd *svd, double gap, es_err *err)
{
    es_degeneracy *d = NULL;
    return es_degeneracy_find(svd->s, svd->r, gap, &d, err) < 0 ? NULL : d;
}

/* See common.h. */
void es_desc_cost_gram(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)run;
    es_cost_gram(c, n, d);
    es_cost_output(c, 6.0 * (double)n);
}

const char *const es_desc_methods[] = {"auto", "exact", "values", "topk", NULL};
const char *const es_desc_spectrum_methods[] = {"auto", "exact", "values", NULL};
const char *const es_desc_metrics[] = {"cosine", "euclidean", NULL};

/* See common.h. */
int es_desc_needs_vectors(const es_run *run, es_err *err)
{
    const es_desc_topk_params *p = run->params;
    return p->method == ES_METHOD_VALUES ? es_fail(err, ES_E_PARAM, "method", ES_VALUES_ONLY, run->a->name) : 0;
}

/* See common.h. */
int es_desc_decompose_topk(const es_run *run, int i, es_svd **out, es_err *err)
{
    const es_desc_topk_params *p = run->params;
    const es_one *o = &run->one[i];
    return es_cache_decompose(run->app->cache, o->m, o->sel.idx, o->sel.n, o->sel.center, (es_method)p->method,
                              p->k, out, err);
}
