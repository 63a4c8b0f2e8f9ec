/* The analysis attention/ranking, GET /v1/attention/ranking: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

/* Example requests of attention/ranking (es_examples). */
static const es_example_case ex_attention_ranking_cases[] = {
    {"model", "model=gpt2-small", NULL, "model=nope"},
    {"queries", "queries=0:16", "queries=8:24", "queries=5:2"},
    {"n_heads", "n_heads=6", "n_heads=4", "n_heads=0"},
    {0}};
static const es_example_table ex_attention_ranking_tables[] = {
    {"model=gpt2-small&queries=0:16", "heads"},
    {0}};
static const es_examples ex_attention_ranking = {
    .query = "model=gpt2-small&queries=0:32",
    .cases = ex_attention_ranking_cases,
    .light = "model=gpt2-small&queries=0:2", .heavy = "model=gpt2-small&queries=0:1024",
    .tables = ex_attention_ranking_tables,
};
ES_DESCRIPTOR(attention_ranking, 170) = {
    .examples = &ex_attention_ranking,
    .name = "attention/ranking", .route = "/v1/attention/ranking", .params_size = sizeof(es_attention_params),
    .spec = es_ranking_spec, .handler = es_api_attention_ranking, .tables = (const char *const[]){"heads", NULL},
    .cost_params = "queries and the layers of model"};
