/* The analysis outliers, GET /v1/models/{model}/matrices/{matrix}/outliers: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

typedef struct outliers_params {
    double threshold;
} outliers_params;

static const es_pspec outliers_spec[] = {
    {.name = "threshold", .kind = ES_P_REAL, .def = ES_OUTLIER_THRESHOLD, .min = 0, .max = HUGE_VAL,
     .min_open = true, .offset = ES_FIELD(outliers_params, threshold)},
    {0}};

/* Robust row-norm scores; fails like es_outliers_compute. */
static int fill_outliers(const es_run *run, es_out *out, es_err *err)
{
    const outliers_params *p = run->params;
    const es_one *one = &run->one[0];
    es_jctx *jc = &out->jc;
    json_t *root = out->root;
    es_outliers *o;
    if (es_outliers_compute(one->m, one->sel.idx, one->sel.n, p->threshold, &o, err) < 0)
        return -1;
    json_object_set_new(root, "rows", es_jsizes(o->rows, o->n));
    json_object_set_new(root, "norms", es_jnums(jc, "norms", o->norm, o->n));
    json_object_set_new(root, "scores", es_jnums(jc, "scores", o->score, o->n));
    json_object_set_new(root, "median", es_jnum(jc, "median", o->median));
    json_object_set_new(root, "mad", es_jnum(jc, "mad", o->mad));
    json_object_set_new(root, "scale", es_jnum(jc, "scale", o->scale));
    json_object_set_new(root, "threshold", es_jnum(jc, "threshold", o->threshold));
    json_object_set_new(root, "n_flagged", json_integer((json_int_t)o->n_flagged));
    json_object_set_new(root, "flagged", es_jsizes(o->flagged, o->n_flagged));
    es_table *t = es_out_records(out, "scores", "row", "norm / robust z-score", (const char *const[]){"norm", "score"},
                          (const double *const[]){o->norm, o->score}, 2, o->n);
    for (size_t i = 0; i < o->n; i++)
        t->index_values[i] = (double)o->rows[i];
    es_outliers_free(o);
    return 0;
}

/* One pass for the norms, a sort for the median; three numbers per row out. */
static void cost_outliers(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)run;
    (void)d;
    es_cost_output(c, 4.0 * (double)n);
}

static void plan_outliers(const es_run *run, es_out_plan *p)
{
    es_plan_table(p, "scores", run->one[0].sel.n, 2);
}

/* Example requests of outliers (es_examples). */
static const es_example_case ex_outliers_cases[] = {
    {"threshold", "threshold=1", "threshold=2", "threshold=0"},
    {0}};
static const es_example_table ex_outliers_tables[] = {
    {"", "scores"},
    {0}};
static const es_examples ex_outliers = {
    .query = "rows=0:64",
    .cases = ex_outliers_cases,
    .light = "", .heavy = "",
    .tables = ex_outliers_tables,
};
ES_DESCRIPTOR(outliers, 110) = {
    .examples = &ex_outliers,
    .name = "outliers", .route = "/v1/models/{model}/matrices/{matrix}/outliers", .shape = ES_SHAPE_ONE,
    .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE, .comparable = true,
    .params_size = sizeof(outliers_params), .spec = outliers_spec, .fill = fill_outliers,
    .cost = cost_outliers, .plan = plan_outliers, .tables = (const char *const[]){"scores", NULL},
    .cost_params = "rows"};
