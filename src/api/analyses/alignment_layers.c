/* The analysis alignment/layers, GET /v1/alignment/layers: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

/* Example requests of alignment/layers (es_examples). */
static const es_example_case ex_alignment_layers_cases[] = {
    {"model", "model=gpt2-small", NULL, "model=nope"},
    {"r", "r=gpt2-small/h0.k", "r=gpt2-small/h0.v", "r=nope"},
    {"k", "k=2", "k=3", "k=0"},
    {"w_center", "w_center=columns", "w_center=rows", "w_center=x"},
    {"w_head", "w_head=0", "w_head=1", "w_head=x"},
    {0}};
static const es_example_table ex_alignment_layers_tables[] = {
    {"model=gpt2-small&r=gpt2-small/wpe&k=10&r_rows=1:&r_center=columns", "top_mean"},
    {"model=gpt2-small&r=gpt2-small/wpe&k=10&r_rows=1:&r_center=columns&w_head=7", "top_mean"},
    {0}};
static const es_examples ex_alignment_layers = {
    .query = "model=gpt2-small&r=gpt2-small/wpe&r_rows=0:64",
    .cases = ex_alignment_layers_cases,
    .light = "model=tiny&r=tiny/r&k=2", .heavy = "model=gpt2-small&r=gpt2-small/wpe&k=2",
    .tables = ex_alignment_layers_tables,
};
ES_DESCRIPTOR(alignment_layers, 150) = {
    .examples = &ex_alignment_layers,
    .name = "alignment/layers", .route = "/v1/alignment/layers", .params_size = sizeof(es_layers_params),
    .names = {"r"}, .center_param = true, .average_param = true, .head_param = true, /* r_rows ... r_head */
    .spec = es_layers_spec, .handler = es_api_alignment_layers, .tables = (const char *const[]){"top_mean", NULL},
    .cost_params = "r_rows, k and the layers of model"};
