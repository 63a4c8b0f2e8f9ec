/* The analysis overlap, GET /v1/overlap: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

typedef struct overlap_params {
    size_t ka, kb, bins;
    double blur;
} overlap_params;

static const es_pspec overlap_spec[] = {
    {.name = "ka", .kind = ES_P_SIZE, .def = (double)SIZE_MAX, .min = 1, .bound = ES_BOUND_RANK, .side = 0,
     .clamp_default = true, .offset = ES_FIELD(overlap_params, ka)},
    {.name = "kb", .kind = ES_P_SIZE, .def = (double)SIZE_MAX, .min = 1, .bound = ES_BOUND_RANK, .side = 1,
     .clamp_default = true, .offset = ES_FIELD(overlap_params, kb)},
    BINS_SPEC(overlap_params, ES_DEFAULT_BINS, 0), /* 0: full resolution (max_cells) */
    {.name = "blur", .kind = ES_P_REAL, .def = 0, .min = 0, .limit = "max_bins",
     .offset = ES_FIELD(overlap_params, blur)},
    {0}};

/* The binned squared overlaps of a's top ka and b's top kb vectors; fails like es_overlap_compute. */
static int fill_overlap(const es_run *run, es_out *out, es_err *err)
{
    const overlap_params *p = run->params;
    es_grid *grid;
    if (es_overlap_compute(run->svd[0], p->ka, run->svd[1], p->kb, p->bins, p->blur, &grid, err) < 0)
        return -1;
    es_render_grid(&out->jc, out->root, "overlap", grid);
    es_out_grid(out, "overlap", "squared overlap per bin", grid, "b_");
    es_grid_free(grid);
    return 0;
}

/* The unbinned ka x kb grid (bins=0) within max_cells; fails like es_check_cells. */
static int validate_overlap(const es_run *run, es_err *err)
{
    const overlap_params *p = run->params;
    return p->bins == 0 ? es_check_cells(run->lim, p->ka, p->kb, err) : 0;
}

/* a's top ka against b's top kb, then the grid out. */
static void cost_overlap(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)n;
    const overlap_params *p = run->params;
    es_cost_products(c, d, p->ka, p->kb);
    es_cost_grid(c, p->bins, p->ka, p->kb);
}

static void plan_overlap(const es_run *run, es_out_plan *p)
{
    const overlap_params *op = run->params;
    es_plan_table(p, "overlap", es_bin_count(op->ka, op->bins), es_bin_count(op->kb, op->bins));
}

/* Example requests of overlap (es_examples). */
static const es_example_case ex_overlap_cases[] = {
    {"a", "a=gpt2-small/h0.k", "a=gpt2-small/h0.v", "a=nope"},
    {"b", "b=gpt2-small/h0.k", "b=gpt2-small/h0.v", "b=gpt2-small"},
    {"ka", "ka=3", "ka=4", "ka=0"},
    {"kb", "kb=3", "kb=4", "kb=0"},
    {"bins", "bins=4", "bins=8", "bins=100000"},
    {"blur", "blur=0.5", "blur=1", "blur=-1"},
    {0}};
static const es_example_table ex_overlap_tables[] = {
    {"a=gpt2-small/wpe&b=gpt2-small/h0.q&a_rows=0:64&b_rows=0:64&bins=8", "overlap"},
    {0}};
static const es_examples ex_overlap = {
    .query = "a=gpt2-small/wpe&b=gpt2-small/h0.q&a_rows=0:64&b_rows=0:64",
    .cases = ex_overlap_cases,
    .light = "a=b/s&b=b/s", .heavy = "a=b/g&b=b/g",
    .tables = ex_overlap_tables,
};
ES_DESCRIPTOR(overlap, 90) = {
    .examples = &ex_overlap,
    .name = "overlap", .route = "/v1/overlap", .shape = ES_SHAPE_PAIR, .names = {"a", "b"}, .decomposes = true,
    .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE,
    .params_size = sizeof(overlap_params), .spec = overlap_spec, .fill = fill_overlap, .validate = validate_overlap,
    .tables = (const char *const[]){"overlap", NULL},
    .cost = cost_overlap, .plan = plan_overlap, .cost_params = "a_rows, b_rows, ka, kb, bins"};
