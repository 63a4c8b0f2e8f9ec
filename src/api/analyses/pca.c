/* The analysis pca, GET /v1/models/{model}/matrices/{matrix}/pca: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

enum pca_basis { BASIS_OWN, BASIS_ORIGINAL };
static const char *const pca_bases[] = {"own", "original", NULL};

typedef struct pca_params {
    size_t k, method; /* an es_desc_topk_params first */
    size_t basis;     /* original: the averaged rows in the unaveraged rows' PCA basis */
} pca_params;

static const es_pspec pca_spec[] = {
    K_SPEC(pca_params, 3, 0), METHOD_SPEC(pca_params, es_desc_methods),
    {.name = "basis", .kind = ES_P_CHOICE, .choices = pca_bases, .def = BASIS_OWN,
     .offset = ES_FIELD(pca_params, basis)},
    {0}};

/* The matrix pca decomposes: the analysed one, or for basis=original the one
 * before averaging (its head view, or the configured matrix). */
static const es_matrix *pca_basis_matrix(const es_run *run, const es_one *o)
{
    const pca_params *p = run->params;
    if (p->basis != BASIS_ORIGINAL)
        return o->m;
    return o->head_view ? o->head_view : o->source;
}

/* es_desc_decompose_topk, of pca_basis_matrix. */
static int decompose_pca(const es_run *run, int i, es_svd **out, es_err *err)
{
    const pca_params *p = run->params;
    const es_one *o = &run->one[i];
    return es_cache_decompose(run->app->cache, pca_basis_matrix(run, o), o->sel.idx, o->sel.n, o->sel.center,
                              (es_method)p->method, p->k, out, err);
}

/* es_desc_needs_vectors; basis=original needs average=g over rows (a basis of the
 * same rows unaveraged). ES_E_PARAM naming method / basis. */
static int validate_pca(const es_run *run, es_err *err)
{
    const pca_params *p = run->params;
    const es_one *o = &run->one[0];
    if (es_desc_needs_vectors(run, err) < 0)
        return -1;
    if (p->basis == BASIS_ORIGINAL && (!o->average || o->groups))
        return es_fail(err, ES_E_PARAM, "basis", "basis=original projects averaged rows onto the PCA of the "
                       "same rows unaveraged: it needs average=g with average_mode=rows");
    return 0;
}

/* Explained variance and the coordinates of the selected rows (basis=original:
 * of the averaged rows in the unaveraged rows' basis, whose variance ratios
 * these are); fails like es_pca_from_svd / es_pca_in_basis. */
static int fill_pca(const es_run *run, es_out *out, es_err *err)
{
    const pca_params *p = run->params;
    es_pca *pca;
    int rc = p->basis == BASIS_ORIGINAL ? es_pca_in_basis(run->svd[0], run->one[0].m, p->k, &pca, err)
                                        : es_pca_from_svd(run->svd[0], run->one[0].m, p->k, &pca, err);
    if (rc < 0)
        return -1;
    es_render_pca(&out->jc, out->root, pca, !out->tables_only);
    es_table *t = es_out_table(out, "coords", "row", "coordinate", pca->n, pca->k);
    es_table_columns(t, NULL, "pc", 1);
    for (size_t i = 0; i < pca->n; i++)
        t->index_values[i] = (double)pca->rows[i];
    memcpy(t->values, pca->coords, pca->n * pca->k * sizeof(double));
    static const char *const names[] = {"explained_variance_ratio", "cumulative"};
    es_out_records(out, "variance", "component", "ratio", names, (const double *const[]){pca->evr, pca->cumulative}, 2,
            pca->k);
    es_pca_free(pca);
    return 0;
}

static const char *const pca_tables[] = {"coords", "variance", NULL};

/* The coordinates X V_k and k + 1 numbers per row out. */
static void cost_pca(const es_run *run, size_t n, size_t d, es_cost *c)
{
    size_t k = ((const pca_params *)run->params)->k;
    es_cost_project(c, n, d, k);
    es_cost_output(c, (double)(k + 1) * (double)n + 2.0 * (double)k);
}

static void plan_pca(const es_run *run, es_out_plan *p)
{
    size_t k = ((const pca_params *)run->params)->k;
    es_plan_table(p, "coords", run->one[0].sel.n, k);
    es_plan_table(p, "variance", k, 2);
}

/* Example requests of pca (es_examples). */
static const es_example_case ex_pca_cases[] = {
    {"k", "k=2", "k=3", "k=0"},
    {"method", "-rows&method=exact", "-rows&method=topk", "method=lanczos"},
    {"basis", "average=4&basis=original", "average=4&basis=own", "basis=original"},
    {0}};
static const es_example_table ex_pca_tables[] = {
    {"k=3&rows=1:", "coords variance"},
    {0}};
static const es_examples ex_pca = {
    .query = "rows=0:64",
    .cases = ex_pca_cases,
    .light = "k=2", .heavy = "k=2",
    .tables = ex_pca_tables,
};
ES_DESCRIPTOR(pca, 20) = {
    .examples = &ex_pca,
    .name = "pca", .route = "/v1/models/{model}/matrices/{matrix}/pca", .shape = ES_SHAPE_ONE,
    .decomposes = true, .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .comparable = true, .params_size = sizeof(pca_params), .spec = pca_spec, .fill = fill_pca, .cost = cost_pca,
    .decompose = decompose_pca, .validate = validate_pca, .plan = plan_pca,
    .tables = pca_tables,
    .cost_params = "rows, k"};
