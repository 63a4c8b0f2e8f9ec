/* The analysis umap, GET /v1/models/{model}/matrices/{matrix}/umap: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

typedef struct umap_params {
    size_t dims, method; /* an es_desc_topk_params first: the start is the top `dims` PCA coordinates (auto) */
    size_t n_neighbors, metric, epochs, seed;
    double min_dist;
} umap_params;

/* Most neighbours per item and epochs one request may ask for. */
#define UMAP_MAX_NEIGHBORS 200
#define UMAP_MAX_EPOCHS 5000

static const es_pspec umap_spec[] = {
    {.name = "n_neighbors", .kind = ES_P_SIZE, .def = 15, .min = 2, .max = UMAP_MAX_NEIGHBORS,
     .offset = ES_FIELD(umap_params, n_neighbors)},
    {.name = "min_dist", .kind = ES_P_REAL, .def = 0.1, .min = 0, .max = 1,
     .offset = ES_FIELD(umap_params, min_dist)},
    {.name = "dims", .kind = ES_P_SIZE, .def = 2, .min = 2, .max = 3, .offset = ES_FIELD(umap_params, dims)},
    {.name = "metric", .kind = ES_P_CHOICE, .choices = es_desc_metrics, .def = ES_METRIC_COSINE,
     .offset = ES_FIELD(umap_params, metric)},
    {.name = "epochs", .kind = ES_P_SIZE, .def = 0, .min = 0, .max = UMAP_MAX_EPOCHS,
     .offset = ES_FIELD(umap_params, epochs)},
    {.name = "seed", .kind = ES_P_SIZE, .def = 0, .min = 0, .offset = ES_FIELD(umap_params, seed)},
    {0}};

/* Under 3 rows, or fewer rows than n_neighbors: a 400 before the gate. */
static int validate_umap(const es_run *run, es_err *err)
{
    const umap_params *p = run->params;
    size_t n = run->one[0].sel.n;
    if (n < 3)
        return es_fail(err, ES_E_PARAM, "rows", "UMAP needs at least 3 selected rows, got %zu", n);
    if (p->n_neighbors > n)
        return es_fail(err, ES_E_PARAM, "n_neighbors", "n_neighbors=%zu is more than the %zu selected rows "
                       "(it counts the row itself, as umap-learn does)", p->n_neighbors, n);
    return 0;
}

/* The layout from the top `dims` PCA coordinates, as a JSON list like pca's and
 * the table "embedding". */
static int fill_umap(const es_run *run, es_out *out, es_err *err)
{
    const umap_params *p = run->params;
    const es_one *o = &run->one[0];
    es_pca *pc = NULL;
    es_umap *u = NULL;
    if (es_pca_from_svd(run->svd[0], o->m, p->dims, &pc, err) < 0)
        return -1;
    es_umap_params up = {.n_neighbors = p->n_neighbors, .dims = p->dims, .epochs = p->epochs,
                         .min_dist = p->min_dist, .metric = (es_metric)p->metric, .seed = p->seed};
    int rc = es_umap_items(o->m, pc->rows, pc->n, &up, pc->coords, &u, err);
    es_pca_free(pc);
    if (rc < 0)
        return -1;
    json_object_set_new(out->root, "neighbor_graph", json_string("exact"));
    json_object_set_new(out->root, "epochs", json_integer((json_int_t)u->epochs));
    json_object_set_new(out->root, "edges", json_integer((json_int_t)u->edges));
    json_object_set_new(out->root, "curve", json_pack("{s:f, s:f}", "a", u->a, "b", u->b));
    json_t *rows = json_array();
    for (size_t i = 0; i < u->n; i++)
        json_array_append_new(rows, json_pack("{s:I, s:o}", "index", (json_int_t)u->rows[i], "coords",
                                              es_jnums(&out->jc, "coords", u->coords + i * u->dims, u->dims)));
    json_object_set_new(out->root, "rows", rows);
    es_table *t = es_out_table(out, "embedding", "row", "coordinate", u->n, u->dims);
    es_table_columns(t, (const char *const[]){"x", "y", "z"}, NULL, 0);
    for (size_t i = 0; i < u->n; i++)
        t->index_values[i] = (double)u->rows[i];
    memcpy(t->values, u->coords, u->n * u->dims * sizeof(double));
    es_umap_free(u);
    return 0;
}

/* The neighbour graph (every pair's product), the layout's epochs and the table out. */
static void cost_umap(const es_run *run, size_t n, size_t d, es_cost *c)
{
    const umap_params *p = run->params;
    es_cost_project(c, n, d, p->dims);
    es_cost_umap(c, n, d, p->n_neighbors, es_umap_epochs(n, p->epochs));
    es_cost_output(c, (double)(p->dims + 1) * (double)n);
}

static void plan_umap(const es_run *run, es_out_plan *p)
{
    es_plan_table(p, "embedding", run->one[0].sel.n, ((const umap_params *)run->params)->dims);
}

/* Example requests of umap (es_examples). */
static const es_example_case ex_umap_cases[] = {
    {"n_neighbors", "n_neighbors=5", "n_neighbors=8", "n_neighbors=1"},
    {"min_dist", "min_dist=0.5", "min_dist=0.2", "min_dist=2"},
    {"dims", "dims=3", "dims=2&epochs=30", "dims=4"},
    {"metric", "metric=euclidean", "metric=cosine&epochs=30", "metric=x"},
    {"epochs", "epochs=30", "epochs=40", "epochs=100000"},
    {"seed", "seed=1", "seed=2", "seed=x"},
    {0}};
static const es_example_table ex_umap_tables[] = {
    {"rows=0:64&epochs=50", "embedding"},
    {0}};
static const es_examples ex_umap = {
    .query = "rows=0:64&epochs=50",
    .cases = ex_umap_cases,
    .light = "n_neighbors=5&epochs=20", .heavy = "n_neighbors=5",
    .tables = ex_umap_tables,
};
ES_DESCRIPTOR(umap, 60) = {
    .examples = &ex_umap,
    .name = "umap", .route = "/v1/models/{model}/matrices/{matrix}/umap", .shape = ES_SHAPE_ONE,
    .decomposes = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .params_size = sizeof(umap_params), .spec = umap_spec, .fill = fill_umap, .validate = validate_umap,
    .decompose = es_desc_decompose_topk, .tables = (const char *const[]){"embedding", NULL},
    .cost = cost_umap, .plan = plan_umap, .cost_params = "rows, n_neighbors, epochs"};
