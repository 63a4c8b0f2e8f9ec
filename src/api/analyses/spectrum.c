/* The analysis spectrum, GET /v1/models/{model}/matrices/{matrix}/spectrum: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

typedef struct spectrum_params {
    size_t k, method; /* an es_desc_topk_params first; k is not a parameter: 0, every singular value */
    double gap;
} spectrum_params;

static const es_pspec spectrum_spec[] = {GAP_SPEC(spectrum_params), METHOD_SPEC(spectrum_params, es_desc_spectrum_methods),
                                         {0}};

/* The spectrum and its degenerate groups; fails like es_spectrum_from_svd / es_degeneracy_find. */
static int fill_spectrum(const es_run *run, es_out *out, es_err *err)
{
    const spectrum_params *p = run->params;
    es_spectrum *spec = NULL;
    es_degeneracy *deg = NULL;
    int rc = -1;
    if (es_spectrum_from_svd(run->svd[0], &spec, err) < 0 || !(deg = es_desc_degeneracy(run->svd[0], p->gap, err)))
        goto done;
    es_render_spectrum(&out->jc, out->root, spec);
    es_render_degeneracy(&out->jc, out->root, deg);
    static const char *const names[] = {"singular_value", "explained_variance_ratio", "cumulative"};
    es_out_records(out, "spectrum", "component", "singular value / ratio", names,
            (const double *const[]){spec->s, spec->evr, spec->cumulative}, 3, spec->r);
    rc = 0;
done:
    es_degeneracy_free(deg);
    es_spectrum_free(spec);
    return rc;
}

/* r singular values and their ratios out. */
static void cost_spectrum(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)run;
    es_cost_output(c, 5.0 * (double)(n < d ? n : d));
}

static void plan_spectrum(const es_run *run, es_out_plan *p)
{
    es_plan_table(p, "spectrum", es_one_rank(&run->one[0]), 3);
}

/* Example requests of spectrum (es_examples). */
static const es_example_case ex_spectrum_cases[] = {
    {"gap", "gap=0.5", "gap=0.001", "gap=1"},
    {"method", "method=exact", "method=values", "method=topk"},
    {0}};
static const es_example_table ex_spectrum_tables[] = {
    {"rows=0:100", "spectrum"},
    {"rows=1:&method=values", "spectrum"},
    {0}};
static const es_examples ex_spectrum = {
    .query = "rows=0:64",
    .cases = ex_spectrum_cases,
    .light = "", .heavy = "",
    .tables = ex_spectrum_tables,
};
ES_DESCRIPTOR(spectrum, 30) = {
    .examples = &ex_spectrum,
    .name = "spectrum", .route = "/v1/models/{model}/matrices/{matrix}/spectrum", .shape = ES_SHAPE_ONE,
    .decomposes = true, .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .comparable = true, .params_size = sizeof(spectrum_params), .spec = spectrum_spec, .fill = fill_spectrum,
    .decompose = es_desc_decompose_topk, .tables = (const char *const[]){"spectrum", NULL},
    .cost = cost_spectrum, .plan = plan_spectrum, .cost_params = "rows"};
