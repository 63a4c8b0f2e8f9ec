/* The analysis capture, GET /v1/capture: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

typedef struct capture_params {
    size_t k;
} capture_params;

static const es_pspec capture_spec[] = {K_SPEC(capture_params, 30, 0), {0}};

/* The share of each of b's singular vectors in a's top-k subspace; fails like es_capture_compute. */
static int fill_capture(const es_run *run, es_out *out, es_err *err)
{
    const capture_params *p = run->params;
    es_capture *cap;
    if (es_capture_compute(run->svd[0], p->k, run->svd[1], &cap, err) < 0)
        return -1;
    es_render_capture(&out->jc, out->root, cap);
    es_out_column(out, "capture", "component", "share", cap->capture, NULL, cap->count);
    es_capture_free(cap);
    return 0;
}

/* Each of b's singular vectors against a's top k; one share each out. */
static void cost_capture(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)n;
    size_t rb = es_one_rank(&run->one[1]);
    es_cost_products(c, d, ((const capture_params *)run->params)->k, rb);
    es_cost_output(c, 2.0 * (double)rb);
}

/* One share per singular vector of b: its rank. */
static void plan_capture(const es_run *run, es_out_plan *p)
{
    es_plan_table(p, "capture", es_one_rank(&run->one[1]), 1);
}

/* Example requests of capture (es_examples). */
static const es_example_case ex_capture_cases[] = {
    {"a", "a=gpt2-small/h0.k", "a=gpt2-small/h0.v", "a=nope"},
    {"b", "b=gpt2-small/h0.k", "b=gpt2-small/h0.v", "b=gpt2-small"},
    {"k", "k=2", "k=3", "k=0"},
    {0}};
static const es_example_table ex_capture_tables[] = {
    {"a=gpt2-small/wpe&b=gpt2-small/h0.q&a_rows=0:64&b_rows=0:64&k=5", "capture"},
    {0}};
static const es_examples ex_capture = {
    .query = "a=gpt2-small/wpe&b=gpt2-small/h0.q&a_rows=0:64&b_rows=0:64",
    .cases = ex_capture_cases,
    .light = "a=b/s&b=b/s&k=2", .heavy = "a=b/g&b=b/g&k=2",
    .tables = ex_capture_tables,
};
ES_DESCRIPTOR(capture, 80) = {
    .examples = &ex_capture,
    .name = "capture", .route = "/v1/capture", .shape = ES_SHAPE_PAIR, .names = {"a", "b"}, .decomposes = true,
    .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE,
    .comparable = true, /* /v1/compare: a is the shared reference, each matrix a b */
    .params_size = sizeof(capture_params), .spec = capture_spec, .fill = fill_capture,
    .tables = (const char *const[]){"capture", NULL},
    .cost = cost_capture, .plan = plan_capture, .cost_params = "a_rows, b_rows, k"};
