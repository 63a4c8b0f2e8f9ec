/* The analysis alignment, GET /v1/alignment: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

typedef struct alignment_params {
    size_t k, kw, kr, bins;
} alignment_params;

static const es_pspec alignment_spec[] = {
    K_SPEC(alignment_params, ES_ALIGN_DEFAULT_K, 1),
    {.name = "kw", .kind = ES_P_SIZE, .def = ES_ALIGN_DEFAULT_K, .min = 1, .bound = ES_BOUND_RANK, .side = 0,
     .clamp_default = true, .offset = ES_FIELD(alignment_params, kw)},
    {.name = "kr", .kind = ES_P_SIZE, .def = ES_ALIGN_DEFAULT_K, .min = 1, .bound = ES_BOUND_RANK, .side = 1,
     .clamp_default = true, .offset = ES_FIELD(alignment_params, kr)},
    BINS_SPEC(alignment_params, 0, 0),
    {0}};

/* Capture of each of W's model-space singular vectors by R's top-k subspace, the
 * top-m means and the squared overlaps of W's top kw with R's top kr. */
static int fill_alignment(const es_run *run, es_out *out, es_err *err)
{
    const alignment_params *p = run->params;
    es_alignment *al;
    if (es_alignment_compute(run->svd[0], run->svd[1], p->k, p->kw, p->kr, p->bins, &al, err) < 0)
        return -1;
    es_render_capture(&out->jc, out->root, al->capture);
    json_object_set_new(out->root, "top_mean", es_render_top_means(&out->jc, al));
    es_render_grid(&out->jc, out->root, "overlap", al->overlap);
    es_out_column(out, "capture", "component", "share", al->capture->capture, NULL, al->capture->count);
    es_out_column(out, "top_mean", "m", "mean share", al->top_mean, al->top_m, al->n_top);
    es_out_grid(out, "overlap", "squared overlap per bin", al->overlap, "r_");
    es_alignment_free(al);
    return 0;
}

/* Each of W's singular vectors against R's top k, W's top kw against R's top
 * kr; the capture and grid out. */
static void cost_alignment(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)n;
    const alignment_params *p = run->params;
    size_t rw = es_one_rank(&run->one[0]);
    es_cost_products(c, d, p->k, rw);
    es_cost_products(c, d, p->kw, p->kr);
    es_cost_output(c, 3.0 * (double)rw);
    es_cost_grid(c, p->bins, p->kw, p->kr);
}

/* capture: one share per vector of W (its rank); top_mean: the summaries up to
 * that many; overlap: the kw x kr grid, binned. */
static void plan_alignment(const es_run *run, es_out_plan *p)
{
    const alignment_params *ap = run->params;
    size_t rw = es_one_rank(&run->one[0]);
    es_plan_table(p, "capture", rw, 1);
    es_plan_table(p, "top_mean", es_alignment_summary_count(rw), 1);
    es_plan_table(p, "overlap", es_bin_count(ap->kw, ap->bins), es_bin_count(ap->kr, ap->bins));
}

/* Example requests of alignment (es_examples). */
static const es_example_case ex_alignment_cases[] = {
    {"w", "w=gpt2-small/h0.k", "w=gpt2-small/h0.v", "w=nope"},
    {"r", "r=gpt2-small/h0.k", "r=gpt2-small/h0.v", "r=sinusoidal/rope64"},
    {"k", "k=2", "k=3", "k=0"},
    {"kw", "kw=2", "kw=3", "kw=0"},
    {"kr", "kr=2", "kr=3", "kr=0"},
    {"bins", "bins=4", "bins=8", "bins=100000"},
    {0}};
static const es_example_table ex_alignment_tables[] = {
    {"w=gpt2-small/h0.q&r=gpt2-small/wpe&k=5&bins=4", "capture top_mean overlap"},
    {0}};
static const es_examples ex_alignment = {
    .query = "w=gpt2-small/h0.q&r=gpt2-small/wpe&r_rows=0:64&w_rows=0:64",
    .cases = ex_alignment_cases,
    .light = "w=b/s&r=b/s&k=2&kw=2&kr=2", .heavy = "w=b/g&r=b/g&k=2&kw=2&kr=2",
    .tables = ex_alignment_tables,
};
ES_DESCRIPTOR(alignment, 140) = {
    .examples = &ex_alignment,
    .name = "alignment", .route = "/v1/alignment", .shape = ES_SHAPE_PAIR, .names = {"w", "r"},
    .decomposes = true, .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE,
    .params_size = sizeof(alignment_params), .spec = alignment_spec, .fill = fill_alignment,
    .tables = (const char *const[]){"capture", "top_mean", "overlap", NULL},
    .cost = cost_alignment, .plan = plan_alignment, .cost_params = "w_rows, r_rows, k, kw, kr, bins"};
