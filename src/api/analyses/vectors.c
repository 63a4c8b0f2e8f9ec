/* The analysis vectors, GET /v1/models/{model}/matrices/{matrix}/vectors: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

static const char *const sides[] = {"left", "right", NULL}; /* es_side order */

typedef struct vectors_params {
    size_t k, method; /* an es_desc_topk_params first */
    size_t side;
    double gap;
} vectors_params;

static const es_pspec vectors_spec[] = {
    {.name = "side", .kind = ES_P_CHOICE, .choices = sides, .def = ES_SIDE_RIGHT,
     .offset = ES_FIELD(vectors_params, side)},
    K_SPEC(vectors_params, 3, 0), GAP_SPEC(vectors_params), METHOD_SPEC(vectors_params, es_desc_methods), {0}};

/* The top k vectors, flagged by degenerate group; fails like es_vectors_from_svd / es_degeneracy_find. */
static int fill_vectors(const es_run *run, es_out *out, es_err *err)
{
    const vectors_params *p = run->params;
    es_vectors *vec = NULL;
    es_degeneracy *deg = NULL;
    int rc = -1;
    if (es_vectors_from_svd(run->svd[0], run->one[0].m, (es_side)p->side, p->k, &vec, err) < 0 ||
        !(deg = es_desc_degeneracy(run->svd[0], p->gap, err)))
        goto done;
    es_render_vectors(&out->jc, out->root, vec, run->svd[0]);
    es_render_degeneracy(&out->jc, out->root, deg);
    es_render_vector_groups(out->root, deg);
    es_table *t = es_out_table(out, "vectors", vec->side == ES_SIDE_LEFT ? "row" : "coordinate", "component",
                               vec->len, vec->k);
    es_table_columns(t, NULL, "v", 0);
    for (size_t i = 0; i < vec->len; i++) {
        t->index_values[i] = vec->side == ES_SIDE_LEFT ? (double)run->svd[0]->rows[i] : (double)i;
        for (size_t j = 0; j < vec->k; j++)
            t->values[i * vec->k + j] = vec->values[j * vec->len + i];
    }
    es_out_column(out, "singular_values", "component", "singular value", vec->s, NULL, vec->k);
    rc = 0;
done:
    es_degeneracy_free(deg);
    es_vectors_free(vec);
    return rc;
}

/* Left vectors are formed (X V_k S_k^-1, then certified: twice the products); k vectors out. */
static void cost_vectors(const es_run *run, size_t n, size_t d, es_cost *c)
{
    const vectors_params *p = run->params;
    if (p->side == ES_SIDE_LEFT) {
        es_cost_project(c, n, d, p->k);
        es_cost_project(c, n, d, p->k);
    }
    es_cost_output(c, (double)(p->k + 1) * (double)(p->side == ES_SIDE_LEFT ? n : d));
}

static void plan_vectors(const es_run *run, es_out_plan *p)
{
    const vectors_params *vp = run->params;
    es_plan_table(p, "vectors", vp->side == ES_SIDE_LEFT ? run->one[0].sel.n : es_matrix_dim(run->one[0].m), vp->k);
    es_plan_table(p, "singular_values", vp->k, 1);
}

/* Example requests of vectors (es_examples). */
static const es_example_case ex_vectors_cases[] = {
    {"k", "k=2", "k=3", "k=0"},
    {"gap", "gap=0.5", "gap=0.001", "gap=1"},
    {"method", "-rows&method=exact", "-rows&method=topk", "method=values"},
    {"side", "side=left", "side=right&k=4", "side=up"},
    {0}};
static const es_example_table ex_vectors_tables[] = {
    {"k=2&rows=0:64", "vectors singular_values"},
    {"k=2&rows=0:64&side=left", "vectors singular_values"},
    {0}};
static const es_examples ex_vectors = {
    .query = "rows=0:64",
    .cases = ex_vectors_cases,
    .light = "k=2", .heavy = "k=2",
    .tables = ex_vectors_tables,
};
ES_DESCRIPTOR(vectors, 70) = {
    .examples = &ex_vectors,
    .name = "vectors", .route = "/v1/models/{model}/matrices/{matrix}/vectors", .shape = ES_SHAPE_ONE,
    .decomposes = true, .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .params_size = sizeof(vectors_params), .spec = vectors_spec, .fill = fill_vectors, .cost = cost_vectors,
    .decompose = es_desc_decompose_topk, .validate = es_desc_needs_vectors, .plan = plan_vectors,
    .tables = (const char *const[]){"vectors", "singular_values", NULL},
    .cost_params = "rows, k"};
