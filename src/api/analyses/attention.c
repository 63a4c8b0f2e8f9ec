/* The analysis attention, GET /v1/attention: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

/* Example requests of attention (es_examples). */
static const es_example_case ex_attention_cases[] = {
    {"model", "model=gpt2-small", NULL, "model=nope"},
    {"queries", "queries=0:16", "queries=8:24", "queries=5:2"},
    {"n_heads", "n_heads=6", "n_heads=4", "n_heads=0"},
    {"layer", "layer=0", NULL, "layer=x"},
    {0}};
static const es_example_table ex_attention_tables[] = {
    {"model=gpt2-small&layer=0&queries=0:32", "heads"},
    {0}};
static const es_examples ex_attention = {
    .query = "model=gpt2-small&layer=0&queries=0:32",
    .cases = ex_attention_cases,
    .light = "model=gpt2-small&layer=0&queries=0:2", .heavy = "model=gpt2-small&layer=0&queries=0:1024",
    .tables = ex_attention_tables,
};
ES_DESCRIPTOR(attention, 160) = {
    .examples = &ex_attention,
    .name = "attention", .route = "/v1/attention", .params_size = sizeof(es_attention_params),
    .spec = es_attention_spec, .handler = es_api_attention, .tables = (const char *const[]){"heads", NULL},
    .cost_params = "queries"};
