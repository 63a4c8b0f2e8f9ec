/* The analysis toeplitz, GET /v1/models/{model}/matrices/{matrix}/toeplitz: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

static const char *const gram_kinds[] = {"gram", "cosine", NULL}; /* es_gram_kind order */

typedef struct toeplitz_params {
    size_t kind;
} toeplitz_params;

static const es_pspec toeplitz_spec[] = {
    {.name = "kind", .kind = ES_P_CHOICE, .choices = gram_kinds, .def = ES_GRAM_COSINE,
     .offset = ES_FIELD(toeplitz_params, kind)},
    {0}};

/* The Toeplitz score of the selection's Gram or cosine matrix; fails like es_toeplitz_compute. */
static int fill_toeplitz(const es_run *run, es_out *out, es_err *err)
{
    const toeplitz_params *p = run->params;
    const es_one *one = &run->one[0];
    es_toeplitz *t;
    if (es_toeplitz_compute(one->m, one->sel.idx, one->sel.n, (es_gram_kind)p->kind, &t, err) < 0)
        return -1;
    es_render_toeplitz(&out->jc, out->root, t);
    es_out_toeplitz(out, t);
    es_toeplitz_free(t);
    return 0;
}

/* One row per offset -span..span, span the selected positions' range. */
static void plan_toeplitz(const es_run *run, es_out_plan *p)
{
    const es_selection *sel = &run->one[0].sel;
    size_t lo = sel->idx[0], hi = sel->idx[0];
    for (size_t i = 1; i < sel->n; i++) {
        lo = sel->idx[i] < lo ? sel->idx[i] : lo;
        hi = sel->idx[i] > hi ? sel->idx[i] : hi;
    }
    es_plan_table(p, "diagonals", 2 * (hi - lo) + 1, 2);
}

/* Example requests of toeplitz (es_examples). */
static const es_example_case ex_toeplitz_cases[] = {
    {"kind", "kind=gram", "kind=cosine&rows=0:32", "kind=x"},
    {0}};
static const es_example_table ex_toeplitz_tables[] = {
    {"rows=0:64", "diagonals"},
    {0}};
static const es_examples ex_toeplitz = {
    .query = "rows=0:64",
    .cases = ex_toeplitz_cases,
    .light = "", .heavy = "",
    .tables = ex_toeplitz_tables,
};
ES_DESCRIPTOR(toeplitz, 120) = {
    .examples = &ex_toeplitz,
    .name = "toeplitz", .route = "/v1/models/{model}/matrices/{matrix}/toeplitz", .shape = ES_SHAPE_ONE,
    .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE, .comparable = true,
    .params_size = sizeof(toeplitz_params), .spec = toeplitz_spec, .fill = fill_toeplitz, .cost = es_desc_cost_gram,
    .plan = plan_toeplitz,
    .tables = (const char *const[]){"diagonals", NULL},
    .cost_params = "rows"};
