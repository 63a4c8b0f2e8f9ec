/* The analysis periodicity, GET /v1/models/{model}/matrices/{matrix}/periodicity: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

enum period_axis { AXIS_COMPONENTS, AXIS_COLUMNS };
static const char *const period_axes[] = {"components", "columns", NULL};

typedef struct periodicity_params {
    size_t k;
    double alpha;   /* level of Fisher's g-test */
    size_t axis;    /* the top k PCA components, or every column of the matrix */
} periodicity_params;

static const es_pspec periodicity_spec[] = {
    /* axis first: k applies to axis=components only */
    {.name = "axis", .kind = ES_P_CHOICE, .choices = period_axes, .def = AXIS_COMPONENTS,
     .offset = ES_FIELD(periodicity_params, axis)},
    {.name = "k", .kind = ES_P_SIZE, .def = 3, .min = 1, .limit = "max_k", .bound = ES_BOUND_RANK, .side = 0,
     .when = "axis", .when_is = "components", .offset = ES_FIELD(periodicity_params, k)},
    {.name = "alpha", .kind = ES_P_REAL, .def = ES_PERIOD_ALPHA, .min = 0, .max = 0.5, .min_open = true,
     .max_open = true, .offset = ES_FIELD(periodicity_params, alpha)},
    {0}};

/* A number when the component has a period, else null. */
static json_t *if_found(es_jctx *jc, const es_period *c, const char *field, double v)
{
    return c->found ? es_jnum(jc, field, v) : json_null();
}

/* Fisher's g-test of one component (see es_period). */
static json_t *render_significance(es_jctx *jc, const es_period *c)
{
    return json_pack("{s:s, s:o, s:I, s:o, s:b, s:o, s:b}", "test", "fisher_g", "g", es_jnum(jc, "g", c->g),
                     "n_ordinates", (json_int_t)c->n_ordinates, "p_value", es_jnum(jc, "p_value", c->p_value),
                     "p_value_exact", c->p_exact, "alpha", es_jnum(jc, "alpha", c->alpha), "significant",
                     c->p_value < c->alpha);
}

/* One curve's period (null with the reason when there is none), the fit behind
 * it (with its phase, amplitude and share of the variance), the peak share and
 * the g-test, as {"index": j, ...}. */
static json_t *render_period(es_jctx *jc, const es_period *c, size_t j)
{
    json_t *o = json_pack("{s:I, s:o, s:o, s:o, s:I, s:o, s:o, s:o, s:[o, o], s:o}", "index", (json_int_t)j,
                          "period", if_found(jc, c, "period", c->period), "cycles",
                          if_found(jc, c, "cycles", c->cycles), "no_period_reason",
                          c->found ? json_null() : json_string(es_period_verdict_name(c->verdict)), "peak_bin",
                          (json_int_t)c->peak_bin, "peak_share", es_jnum(jc, "peak_share", c->peak_share),
                          "fit_cycles", es_jnum(jc, "fit_cycles", c->fit_cycles), "fit_period",
                          es_jnum(jc, "fit_period", c->fit_period), "search_cycles",
                          es_jnum(jc, "search_cycles", c->search_lo), es_jnum(jc, "search_cycles", c->search_hi),
                          "significance", render_significance(jc, c));
    json_object_set_new(o, "phase", es_jnum(jc, "phase", c->phase));
    json_object_set_new(o, "amplitude", es_jnum(jc, "amplitude", c->amplitude));
    json_object_set_new(o, "r2", es_jnum(jc, "r2", c->r2));
    return o;
}

/* Per component its period and fit (render_period); plus the turning plane. */
static void render_periodicity(es_jctx *jc, json_t *root, const es_periodicity *p)
{
    json_t *list = json_array();
    for (size_t j = 0; j < p->m; j++)
        json_array_append_new(list, render_period(jc, &p->components[j], j));
    json_object_set_new(root, "n", json_integer((json_int_t)p->n));
    json_object_set_new(root, "step", json_integer((json_int_t)p->step));
    json_object_set_new(root, "components", list);
    json_object_set_new(root, "turn_plane", es_jsizes(p->turn_plane, 2));
    json_object_set_new(root, "turns", es_jnum(jc, "turns", p->turns));
}

/* A no_period_reason code (an es_period_verdict) by name. */
static const char *verdict_label(size_t code) { return es_period_verdict_name((es_period_verdict)code); }

/* The columns of the tables "columns" (axis=columns) and "components". */
static const char *const column_period_names[] = {"peak_bin", "cycles", "period", "phase", "amplitude", "r2",
                                                  "p_value", "no_period_reason"};
static const char *const component_period_names[] = {"peak_bin", "cycles", "period", "peak_share",
                                                     "no_period_reason"};
#define COLUMN_PERIOD_COLS (sizeof column_period_names / sizeof *column_period_names)
#define COMPONENT_PERIOD_COLS (sizeof component_period_names / sizeof *component_period_names)

/* The table "columns": per column of the matrix its period (missing without
 * one), phase, amplitude, r2, p-value and the reason. */
static void columns_table(es_out *out, const es_period *per, size_t d)
{
    const char *const *names = column_period_names;
    const size_t cols = COLUMN_PERIOD_COLS;
    es_table *t = es_out_table(out, "columns", "column", "bin / cycles / positions / radians / value / share / p",
                               d, cols);
    es_table_columns(t, names, NULL, 0);
    t->labels[cols - 1] = verdict_label;
    for (size_t j = 0; j < d; j++) {
        const es_period *c = &per[j];
        double *row = t->values + j * cols;
        t->index_values[j] = (double)j;
        row[0] = (double)c->peak_bin;
        row[1] = c->found ? c->cycles : NAN;
        row[2] = c->found ? c->period : NAN;
        row[3] = c->phase;
        row[4] = c->amplitude;
        row[5] = c->r2;
        row[6] = c->p_value;
        row[7] = c->found ? NAN : (double)c->verdict;
    }
}

/* axis=columns: every column's period over the selected rows (the same test as
 * the components'); fails like es_periodicity_columns. */
static int fill_period_columns(const es_run *run, es_out *out, es_err *err)
{
    const periodicity_params *p = run->params;
    const es_one *o = &run->one[0];
    es_period *per;
    long step;
    if (es_periodicity_columns(o->m, o->sel.idx, o->sel.n, p->alpha, &per, &step, err) < 0)
        return -1;
    size_t d = es_matrix_dim(o->m);
    json_t *list = json_array();
    for (size_t j = 0; j < d; j++)
        json_array_append_new(list, render_period(&out->jc, &per[j], j));
    json_object_set_new(out->root, "n", json_integer((json_int_t)o->sel.n));
    json_object_set_new(out->root, "step", json_integer((json_int_t)step));
    json_object_set_new(out->root, "columns", list);
    columns_table(out, per, d);
    free(per);
    return 0;
}

/* Periodicity of the top k PCA components (axis=components) or of every column
 * (axis=columns); fails like es_periodicity_from_svd / es_periodicity_columns. */
static int fill_periodicity(const es_run *run, es_out *out, es_err *err)
{
    const periodicity_params *p = run->params;
    if (p->axis == AXIS_COLUMNS)
        return fill_period_columns(run, out, err);
    es_periodicity *per;
    if (es_periodicity_from_svd(run->svd[0], run->one[0].m, p->k, p->alpha, &per, err) < 0)
        return -1;
    render_periodicity(&out->jc, out->root, per);
    const size_t cols = COMPONENT_PERIOD_COLS;
    es_table *t = es_out_table(out, "components", "component", "bin / cycles / positions / share / reason",
                               per->m, cols);
    es_table_columns(t, component_period_names, NULL, 0);
    t->labels[cols - 1] = verdict_label;
    for (size_t j = 0; j < per->m; j++) {
        const es_period *c = &per->components[j];
        double *row = t->values + j * cols;
        t->index_values[j] = (double)j;
        row[0] = (double)c->peak_bin;
        row[1] = c->found ? c->cycles : NAN; /* null in the document: missing, never 0 */
        row[2] = c->found ? c->period : NAN;
        row[3] = c->peak_share;
        row[4] = c->found ? NAN : (double)c->verdict;
    }
    es_periodicity_free(per);
    return 0;
}

/* The k left vectors (formed and certified), then each one's direct periodogram
 * and fit; axis=columns: every column's. */
static void cost_periodicity(const es_run *run, size_t n, size_t d, es_cost *c)
{
    const periodicity_params *p = run->params;
    size_t curves = p->axis == AXIS_COLUMNS ? d : p->k;
    if (p->axis != AXIS_COLUMNS) {
        es_cost_project(c, n, d, p->k);
        es_cost_project(c, n, d, p->k);
    }
    es_cost_periodicity(c, n, curves);
    es_cost_output(c, 20.0 * (double)curves);
}

/* The most one curve's object takes in the JSON document (render_period: 21
 * names, 15 numbers at ES_BYTES_PER_NUMBER, two booleans, a reason; ~700). */
#define PERIOD_JSON_ROW 1024.0

/* axis=components: a row per component (k); columns: per column of the matrix. */
static void plan_periodicity(const es_run *run, es_out_plan *p)
{
    const periodicity_params *pp = run->params;
    if (pp->axis == AXIS_COLUMNS)
        es_plan_table(p, "columns", es_matrix_dim(run->one[0].m), COLUMN_PERIOD_COLS);
    else
        es_plan_table(p, "components", pp->k, COMPONENT_PERIOD_COLS);
    es_plan_json_row(p, PERIOD_JSON_ROW);
}

/* One table per axis: components, columns. */
static bool produces_periodicity(const es_run *run, const char *name)
{
    return strcmp(name, period_axes[((const periodicity_params *)run->params)->axis]) == 0;
}

/* Example requests of periodicity (es_examples). */
static const es_example_case ex_periodicity_cases[] = {
    {"exclude", "exclude=0", "exclude=63", "exclude=-1"},
    {"k", "k=2", "k=3", "k=0"},
    {"alpha", "alpha=0.05", "alpha=0.001", "alpha=0.5"},
    {"axis", "axis=columns&-k", "axis=components", "axis=rows"},
    {"table", "format=csv&table=components", "format=csv&axis=columns&-k&table=columns", "table=nope"},
    {0}};
/* axis=columns over 256 positions: every column's direct periodogram is n^2 (rows=1: was 4 CPU s a
 * request, and test_formats asks for each table in three formats, each a computation of its own). */
static const es_example_table ex_periodicity_tables[] = {
    {"rows=1:", "components"},
    {"rows=1:&k=4", "components"},
    {"rows=1:257&axis=columns", "columns"},
    {0}};
static const es_examples ex_periodicity = {
    .query = "rows=0:64",
    .cases = ex_periodicity_cases,
    .light = "k=2", .heavy = "k=2",
    .tables = ex_periodicity_tables,
};
ES_DESCRIPTOR(periodicity, 100) = {
    .examples = &ex_periodicity,
    .name = "periodicity", .route = "/v1/models/{model}/matrices/{matrix}/periodicity", .shape = ES_SHAPE_ONE,
    .decomposes = true, .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .comparable = true, .params_size = sizeof(periodicity_params), .spec = periodicity_spec,
    .fill = fill_periodicity, .cost = cost_periodicity, .plan = plan_periodicity, .produces = produces_periodicity,
    .tables = (const char *const[]){"components", "columns", NULL},
    .cost_params = "rows, k"};
