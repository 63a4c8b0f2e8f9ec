/* The analysis averaging, GET /v1/models/{model}/matrices/{matrix}/averaging: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

typedef struct averaging_params {
    size_t g, order;
} averaging_params;

static const es_pspec averaging_spec[] = {
    {.name = "g", .kind = ES_P_SIZE, .required = true, .min = 1, .bound = ES_BOUND_ITEMS,
     .offset = ES_FIELD(averaging_params, g)},
    {.name = "average_order", .kind = ES_P_CHOICE, .choices = es_average_orders, .def = 0,
     .offset = ES_FIELD(averaging_params, order)},
    {0}};

/* Per-row displacements and their summary, absolute and relative to the radius. */
static void render_averaging(es_jctx *jc, json_t *root, const es_averaging *a)
{
    json_object_set_new(root, "rows", es_jsizes(a->rows, a->n));
    json_object_set_new(root, "displacement", es_jnums(jc, "displacement", a->disp, a->n));
    json_object_set_new(root, "mean_displacement", es_jnum(jc, "mean_displacement", a->mean_disp));
    json_object_set_new(root, "max_displacement", es_jnum(jc, "max_displacement", a->max_disp));
    json_object_set_new(root, "max_row", json_integer((json_int_t)a->max_row));
    json_object_set_new(root, "radius", es_jnum(jc, "radius", a->radius));
    json_object_set_new(root, "relative_mean", es_jnum(jc, "relative_mean", a->rel_mean));
    json_object_set_new(root, "relative_max", es_jnum(jc, "relative_max", a->rel_max));
}

/* How far averaging in groups of g moves the selected rows in the top-3 PCA space
 * of the original (columns-centred on the same rows). Fails like
 * es_app_averaged or es_averaging_compute. */
static int fill_averaging(const es_run *run, es_out *out, es_err *err)
{
    const averaging_params *p = run->params;
    const es_one *one = &run->one[0];
    es_matrix *avg = NULL;
    es_averaging *a = NULL;
    int rc = -1;
    /* select_then_average: the selected rows in groups from the first one; else the whole matrix */
    if (es_app_averaged(run->app, one->m, p->order == 0 ? &one->sel : NULL, p->g, "g", &avg, err) < 0 ||
        es_averaging_compute(run->svd[0], one->m, avg, &a, err) < 0)
        goto done;
    json_t *input = es_out_input(out);
    json_object_set_new(input, "k", json_integer((json_int_t)a->k));
    json_object_set_new(input, "averaged_sha256", json_string(es_matrix_sha256(avg)) /* averaged data: hashed when made */);
    render_averaging(&out->jc, out->root, a);
    es_out_column(out, "displacement", "row", "distance in the top-k PCA space", a->disp, a->rows, a->n);
    rc = 0;
done:
    es_averaging_free(a);
    es_matrix_release(avg);
    return rc;
}

/* select_then_average groups the selected rows: g at most their number (as
 * es_app_averaged checks), so the 400 comes before the gate. ES_E_PARAM "g". */
static int validate_averaging(const es_run *run, es_err *err)
{
    const averaging_params *p = run->params;
    const es_one *one = &run->one[0];
    return p->order == 0 ? es_group_size_check(one->m, true, one->sel.n, p->g, "g", err) : 0;
}

/* The averaged copy (a pass to read, one to write) and both projected on the top 3. */
static void cost_averaging(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)run;
    es_cost_pass(c, n, d);
    es_cost_pass(c, n, d);
    es_cost_project(c, n, d, 3);
    es_cost_project(c, n, d, 3);
    es_cost_output(c, 2.0 * (double)n);
}

/* One displacement per selected row. */
static void plan_averaging(const es_run *run, es_out_plan *p)
{
    es_plan_table(p, "displacement", run->one[0].sel.n, 1);
}

/* Example requests of averaging (es_examples). */
static const es_example_case ex_averaging_cases[] = {
    {"g", "g=4", "g=8", "g=0"},
    {"average_order", "rows=2:66&average_order=select_then_average", "rows=2:66&average_order=average_then_select", "average_order=x"},
    {0}};
static const es_example_table ex_averaging_tables[] = {
    {"g=4&rows=0:64", "displacement"},
    {0}};
static const es_examples ex_averaging = {
    .query = "rows=0:64&g=2",
    .cases = ex_averaging_cases,
    .light = "g=2", .heavy = "g=2",
    .tables = ex_averaging_tables,
};
ES_DESCRIPTOR(averaging, 130) = {
    .examples = &ex_averaging,
    .name = "averaging", .route = "/v1/models/{model}/matrices/{matrix}/averaging", .shape = ES_SHAPE_ONE,
    .decomposes = true, .def_center = ES_CENTER_COLUMNS, /* the PCA space of the original */
    .params_size = sizeof(averaging_params), .spec = averaging_spec, .fill = fill_averaging,
    .validate = validate_averaging, .cost = cost_averaging, .plan = plan_averaging,
    .tables = (const char *const[]){"displacement", NULL},
    .cost_params = "rows"};
