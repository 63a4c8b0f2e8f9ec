/* The analysis neighbors, GET /v1/models/{model}/matrices/{matrix}/neighbors: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

enum neighbor_space { SPACE_FULL, SPACE_PCA };
static const char *const spaces[] = {"full", "pca", NULL};

typedef struct neighbors_params {
    size_t row, k, metric, space, components;
} neighbors_params;

/* At most this many neighbours in one answer (a ranked list, not a dump). */
#define NEIGHBORS_MAX_K 1000

static const es_pspec neighbors_spec[] = {
    {.name = "row", .kind = ES_P_SIZE, .required = true, .bound = ES_BOUND_LAST_ITEM,
     .offset = ES_FIELD(neighbors_params, row)},
    {.name = "k", .kind = ES_P_SIZE, .def = 10, .min = 1, .max = NEIGHBORS_MAX_K,
     .offset = ES_FIELD(neighbors_params, k)},
    {.name = "metric", .kind = ES_P_CHOICE, .choices = es_desc_metrics, .def = ES_METRIC_COSINE,
     .offset = ES_FIELD(neighbors_params, metric)},
    {.name = "space", .kind = ES_P_CHOICE, .choices = spaces, .def = SPACE_FULL,
     .offset = ES_FIELD(neighbors_params, space)},
    {.name = "components", .kind = ES_P_SIZE, .def = 3, .min = 1, .limit = "max_k", .bound = ES_BOUND_RANK,
     .side = 0, .when = "space", .when_is = "pca", .offset = ES_FIELD(neighbors_params, components)},
    {0}};

/* In the PCA space the query is one of the selected rows (its coordinates are
 * the PCA's); in the full space any item. ES_E_PARAM "row" otherwise. */
static int validate_neighbors(const es_run *run, es_err *err)
{
    const neighbors_params *p = run->params;
    const es_one *o = &run->one[0];
    if (p->space != SPACE_PCA)
        return 0;
    for (size_t i = 0; i < o->sel.n; i++)
        if (o->sel.idx[i] == p->row)
            return 0;
    return es_fail(err, ES_E_PARAM, "row", "row %zu is not among the selected rows (space=pca needs its coordinates)",
                   p->row);
}

/* The k nearest of the query among the PCA coordinates of the selection (its
 * decomposition by the selection's centring, shared with pca). */
static int neighbors_in_pca(const es_run *run, es_neighbors **nb, es_err *err)
{
    const neighbors_params *p = run->params;
    const es_one *o = &run->one[0];
    es_svd *svd = NULL;
    es_pca *pc = NULL;
    int rc = -1;
    if (es_cache_decompose(run->app->cache, o->m, o->sel.idx, o->sel.n, o->sel.center, ES_METHOD_AUTO,
                           p->components, &svd, err) < 0 ||
        es_pca_from_svd(svd, o->m, p->components, &pc, err) < 0)
        goto done;
    size_t at = 0;
    while (pc->rows[at] != p->row) /* present: validate_neighbors */
        at++;
    rc = es_neighbors_among(pc->coords, pc->rows, pc->n, pc->k, pc->coords + at * pc->k, p->row,
                            (es_metric)p->metric, p->k, nb, err);
done:
    es_pca_free(pc);
    es_svd_release(svd);
    return rc;
}

/* The exact top k by the chosen metric, as a ranked list and a table. */
static int fill_neighbors(const es_run *run, es_out *out, es_err *err)
{
    const neighbors_params *p = run->params;
    const es_one *o = &run->one[0];
    es_neighbors *nb = NULL;
    if ((p->space == SPACE_PCA ? neighbors_in_pca(run, &nb, err)
                               : es_neighbors_items(o->m, p->row, o->sel.idx, o->sel.n, (es_metric)p->metric,
                                                    p->k, &nb, err)) < 0)
        return -1;
    json_object_set_new(out->root, "score", json_string(p->metric == ES_METRIC_COSINE ? "cosine similarity"
                                                                                       : "euclidean distance"));
    json_object_set_new(out->root, "rows", es_jsizes(nb->rows, nb->k));
    json_object_set_new(out->root, "scores", es_jnums(&out->jc, "scores", nb->score, nb->k));
    es_table *t = es_out_table(out, "neighbors", "rank", "item index / score", nb->k, 2);
    es_table_columns(t, (const char *const[]){"row", "score"}, NULL, 0);
    for (size_t i = 0; i < nb->k; i++) {
        t->index_values[i] = (double)(i + 1);
        t->values[2 * i] = (double)nb->rows[i];
        t->values[2 * i + 1] = nb->score[i];
    }
    es_neighbors_free(nb);
    return 0;
}

/* Every selected item scored once (d multiply-adds each, counted with the pass
 * over the selection), plus the decomposition and coordinates in the PCA space,
 * then k answers. */
static void cost_neighbors(const es_run *run, size_t n, size_t d, es_cost *c)
{
    const neighbors_params *p = run->params;
    es_cost_output(c, 2.0 * (double)p->k);
    if (p->space == SPACE_PCA) { /* auto: top-k or exact, as es_cache_decompose resolves it */
        es_cost_decompose(c, ES_METHOD_AUTO, n, d, p->components);
        es_cost_project(c, n, d, p->components);
    } else {
        es_cost_project(c, n, d, 1);
    }
}

/* min(k, the candidates): every selected item but the query itself. */
static void plan_neighbors(const es_run *run, es_out_plan *p)
{
    const neighbors_params *np = run->params;
    const es_selection *sel = &run->one[0].sel;
    size_t candidates = sel->n;
    for (size_t i = 0; i < sel->n; i++)
        if (sel->idx[i] == np->row) {
            candidates--;
            break;
        }
    es_plan_table(p, "neighbors", np->k < candidates ? np->k : candidates, 2);
}

/* Example requests of neighbors (es_examples). */
static const es_example_case ex_neighbors_cases[] = {
    {"row", "row=2", "row=3", "row=1024"},
    {"k", "k=2", "k=3", "k=0"},
    {"metric", "metric=euclidean", "metric=cosine&k=4", "metric=x"},
    {"space", "space=pca", "space=full&k=4", "space=x"},
    {"components", "space=pca&components=2", "space=pca&components=4", "space=pca&components=0"},
    {0}};
static const es_example_table ex_neighbors_tables[] = {
    {"row=5&k=4&rows=0:64", "neighbors"},
    {0}};
static const es_examples ex_neighbors = {
    .query = "rows=0:64&row=1",
    .cases = ex_neighbors_cases,
    .light = "row=0&k=2", .heavy = "row=0&k=2&space=pca",
    .tables = ex_neighbors_tables,
};
ES_DESCRIPTOR(neighbors, 50) = {
    .examples = &ex_neighbors,
    .name = "neighbors", .route = "/v1/models/{model}/matrices/{matrix}/neighbors", .shape = ES_SHAPE_ONE,
    .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .params_size = sizeof(neighbors_params), .spec = neighbors_spec, .fill = fill_neighbors,
    .validate = validate_neighbors, .tables = (const char *const[]){"neighbors", NULL},
    .cost = cost_neighbors, .plan = plan_neighbors, .cost_params = "rows, space"};
