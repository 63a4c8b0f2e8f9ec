/* The analysis attention/pattern, GET /v1/attention/pattern: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

/* Example requests of attention/pattern (es_examples). */
static const es_example_case ex_attention_pattern_cases[] = {
    {"model", "model=gpt2-small", NULL, "model=nope"},
    {"queries", "queries=0:16", "queries=8:24", "queries=5:2"},
    {"n_heads", "n_heads=6", "n_heads=4", "n_heads=0"},
    {"layer", "layer=0", NULL, "layer=x"},
    {"head", "head=1", "head=2", "head=12"},
    {"bins", "bins=4", "bins=8", "bins=100000"},
    {0}};
static const es_example_table ex_attention_pattern_tables[] = {
    {"model=gpt2-small&layer=0&head=1&queries=0:32&bins=8", "values"},
    {0}};
static const es_examples ex_attention_pattern = {
    .query = "model=gpt2-small&layer=0&queries=0:32&head=0",
    .cases = ex_attention_pattern_cases,
    .light = "model=gpt2-small&layer=0&head=0&queries=0:2", .heavy = "model=gpt2-small&layer=0&head=0&queries=0:1024",
    .tables = ex_attention_pattern_tables,
};
ES_DESCRIPTOR(attention_pattern, 180) = {
    .examples = &ex_attention_pattern,
    .name = "attention/pattern", .route = "/v1/attention/pattern", .params_size = sizeof(es_attention_params),
    .spec = es_pattern_spec, .handler = es_api_attention_pattern, .tables = (const char *const[]){"values", NULL},
    .cost_params = "queries, bins"};
