/* The analysis rows, GET /v1/models/{model}/matrices/{matrix}/rows: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

typedef struct rows_params {
    char unused; /* no parameters of its own beyond the selection */
} rows_params;

static const es_pspec rows_spec[] = {{0}};

/* The selected items in model orientation (items x d), float64: "rows" (their
 * indices), "values" and, when the matrix has labels, "labels" ({NAME: [the
 * selected rows' cells]}) in JSON; the table "values" for CSV and NPY. */
static int fill_rows(const es_run *run, es_out *out, es_err *err)
{
    const es_one *o = &run->one[0];
    size_t d = es_matrix_dim(o->m);
    if (es_checkpoint(err) < 0)
        return -1;
    double *v = es_matrix_items_copy(o->m, o->sel.idx, o->sel.n);
    json_object_set_new(out->root, "rows", es_jsizes(o->sel.idx, o->sel.n));
    json_object_set_new(out->root, "values", es_jgrid(&out->jc, "values", v, o->sel.n, d));
    es_table *t = es_out_table(out, "values", "row", "matrix entry", o->sel.n, d);
    es_table_columns(t, NULL, "d", 0);
    for (size_t i = 0; i < o->sel.n; i++)
        t->index_values[i] = (double)o->sel.idx[i];
    memcpy(t->values, v, o->sel.n * d * sizeof(double));
    free(v);
    if (run->labels)
        json_object_set_new(out->root, "labels", es_labels_rows_json(run->labels, o->sel.idx, o->sel.n));
    return 0;
}

static void cost_rows(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)run;
    es_cost_pass(c, n, d);
    es_cost_output(c, (double)n * (double)(d + 1));
}

static void plan_rows(const es_run *run, es_out_plan *p)
{
    es_plan_table(p, "values", run->one[0].sel.n, es_matrix_dim(run->one[0].m));
}

/* Example requests of rows (es_examples). */
static const es_example_table ex_rows_tables[] = {
    {"rows=0:40", "values"},
    {0}};
static const es_examples ex_rows = {
    .query = "rows=0:64",
    .light = "", .heavy = "",
    .tables = ex_rows_tables,
};
ES_DESCRIPTOR(rows, 10) = {
    .examples = &ex_rows,
    .name = "rows", .route = "/v1/models/{model}/matrices/{matrix}/rows", .shape = ES_SHAPE_ONE,
    .average_param = true, .head_param = true, .with_labels = true, .def_center = ES_CENTER_NONE,
    .params_size = sizeof(rows_params),
    .spec = rows_spec, .fill = fill_rows, .cost = cost_rows, .plan = plan_rows, .tables = (const char *const[]){"values", NULL},
    .cost_params = "rows"};
