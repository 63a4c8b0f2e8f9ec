/* The analysis table: one es_analysis descriptor per analysis endpoint (one file
 * each in src/api/analyses/), with its typed parameter spec and, for the regular
 * ones, its fill function (compute with the pure function of src/analysis, then
 * render with render.c).
 * Everything else (routing, allowed parameters, parsing, the canonical
 * cache/ETag key, the "input" echo, /v1/compare eligibility, the openapi.yaml
 * check) is derived from these descriptors; see descriptor.h, "the analysis table".
 *
 * How to add a parameter to an existing analysis (issue 10's head= /
 * average_mode=, issue 11's method=, ...):
 *   1. a field in the analysis' params struct (src/api/analyses/NAME.c; size_t for SIZE and
 *      CHOICE, double for REAL);
 *   2. one line in its spec, e.g.
 *        {.name = "method", .kind = ES_P_CHOICE, .choices = methods, .def = 0,
 *         .offset = ES_FIELD(pca_params, method)},
 *      (SIZE: .min/.max, .limit = "max_k" for a configured limit, .bound =
 *      ES_BOUND_RANK/_ITEMS/... for request-dependent ones; REAL: .min/.max,
 *      .min_open/.max_open; .required; .when/.when_is for mode-specific ones);
 *   3. read the field in its fill function;
 *   4. describe it in openapi.base.yaml (the route's x-parameters, or the
 *      shared x-parameter-docs), run `make openapi` (the generated
 *      openapi.yaml is checked by tests/http/test_openapi_generated.py) and
 *      give it a case in the descriptor's examples (es_examples: two valid
 *      changes and an invalid one); tests/http/test_table.py fails until it has one.
 * The parameter is then validated (problem+json naming it), part of the ETag
 * and response-cache key, echoed in "input" and accepted by the route. An
 * irregular endpoint (.handler set) calls es_spec_parse / es_spec_key itself
 * and answers with es_gate_answer and a fill function of its own.
 *
 * How to add an analysis: its pure function in src/analysis, then one new file
 * src/api/analyses/NAME.c with a params struct, a spec, a fill function, its
 * example requests (es_examples) and its descriptor, ES_DESCRIPTOR(NAME, ORDER);
 * its tests, then `make openapi` (docs/development.md, "Adding an analysis").
 * The table below lists the descriptors of the files present at build time
 * (tools/gen_analyses.sh writes $(BUILD)/gen/analyses_list.h): nothing else in
 * src/api changes. Compare, which gathers the others, is defined here.
 *
 * Defaults (in --dump-api and the generated openapi.yaml): rows "" = every row, no exclusions;
 * center "columns" for pca, spectrum, vectors and periodicity, "none" for the
 * pair analyses (the matrices' own subspaces) and cosine; k 3 for pca, vectors and
 * periodicity, 30 for capture, 10 for alignment; bins 64 (at most max_bins;
 * alignment 0 = unbinned); blur 0; side right; cosine mode row; outliers
 * threshold 3.5; toeplitz kind cosine. */
#include "embedscope/descriptor.h"
#include "embedscope/route.h"

#include <stddef.h>
#include <string.h>

/* ---------------------------------------------------------------- compare (its handler: compare.c) */

/* Example requests of compare (es_examples); its reference side's cases compare capture
 * against a shared reference a. */
#define CAPTURE "analysis=capture&a=gpt2-small/h0.q&k=3"
static const es_example_case ex_compare_cases[] = {
    {"matrices", "matrices=gpt2-small/wpe", "matrices=openai-gpt/wpe", "matrices=nope/x"},
    {"analysis", "analysis=pca", "analysis=outliers", "analysis=vectors"},
    {"rows", "rows=0:32", "rows=0:32;0:48", "rows=0:8;0:8;0:8"},
    {"center", "center=none", "center=rows", "center=x"},
    {"average", "average=2", "average=4", "average=0"},
    {"k", "analysis=pca&k=2", "analysis=pca&k=3", "analysis=pca&k=0"},
    {"gap", "gap=0.5", "gap=0.001", "gap=2"},
    {"kind", "analysis=toeplitz&kind=gram", "analysis=toeplitz&kind=cosine", "analysis=toeplitz&kind=x"},
    {"method", "method=exact", "method=values", "analysis=pca&method=values"},
    {"threshold", "analysis=outliers&threshold=1", "analysis=outliers&threshold=2", "analysis=outliers&threshold=0"},
    {"mode", "analysis=cosine&mode=offset", "analysis=cosine&mode=row&row=2", "analysis=cosine&mode=diagonal"},
    {"row", "analysis=cosine&row=2", "analysis=cosine&row=3", "analysis=cosine&row=x"},
    {"bins", "analysis=cosine&mode=matrix&bins=4", "analysis=cosine&mode=matrix&bins=8", "analysis=cosine&mode=matrix&bins=100000"},
    {"a", CAPTURE, "analysis=capture&a=gpt2-small/h0.k&k=3", "analysis=capture&a=nope&k=3"},
    {"a_rows", CAPTURE "&a_rows=0:64", CAPTURE "&a_rows=0:48", CAPTURE "&a_rows=a"},
    {"a_exclude", CAPTURE "&a_exclude=3", CAPTURE "&a_exclude=4", CAPTURE "&a_exclude=-1"},
    {"a_center", CAPTURE "&a_center=none", CAPTURE "&a_center=rows", CAPTURE "&a_center=sideways"},
    {"a_average", CAPTURE "&a_average=2", CAPTURE "&a_average=4", CAPTURE "&a_average=0"},
    {"a_average_order", CAPTURE "&a_rows=2:66&a_average=4&a_average_order=select_then_average", CAPTURE "&a_rows=2:66&a_average=4&a_average_order=average_then_select", CAPTURE "&a_average=4&a_average_order=first"},
    {"a_average_mode", CAPTURE "&a_average=2&a_average_mode=rows", CAPTURE "&a_average=2&a_average_mode=groups", CAPTURE "&a_average=4&a_average_mode=x"},
    {"a_head", CAPTURE "&@square=a_&a_head=0", CAPTURE "&@square=a_&a_head=1", CAPTURE "&@square=a_&a_head=12"},
    {"basis", "analysis=pca&average=2&basis=original", "analysis=pca&average=2&basis=own", "analysis=pca&basis=x"},
    {"axis", "analysis=periodicity&axis=columns", "analysis=periodicity", "analysis=periodicity&axis=x"},
    {"alpha", "analysis=periodicity&alpha=0.05", "analysis=periodicity&alpha=0.001", "analysis=periodicity&alpha=0"},
    {"table", "format=csv&analysis=pca&table=coords", "format=csv&analysis=pca&table=variance", "table=coords"},
    {0}};
static const es_example_table ex_compare_tables[] = {
    {"matrices=gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe&analysis=pca&k=2&rows=0:40;1:30;", "coords variance"},
    {"matrices=gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe&analysis=spectrum&rows=0:64", "spectrum"},
    {"matrices=gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe&analysis=spectrum&rows=0:64&method=values", "spectrum"},
    {"matrices=gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe&analysis=periodicity&rows=1:", "components"},
    {"matrices=gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe&analysis=outliers", "scores"},
    {"matrices=gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe&analysis=cosine&mode=offset&rows=0:64&center=columns", "offsets"},
    /* 256 positions, as periodicity's own table example: 5 CPU s a request at rows=1:512 */
    {"matrices=gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe&analysis=periodicity&rows=1:257&axis=columns", "columns"},
    {"matrices=gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe&analysis=toeplitz&rows=0:32&kind=gram", "diagonals"},
    {0}};
static const es_examples ex_compare = {
    .query = "matrices=gpt2-small/wpe,openai-gpt/wpe&analysis=spectrum&rows=0:64",
    .cases = ex_compare_cases,
    .light = "matrices=b/s,b/s&analysis=pca&k=2", .heavy = "matrices=b/g,b/g&analysis=pca&k=2",
    .tables = ex_compare_tables,
};
static const es_analysis compare = {
    .examples = &ex_compare,
    .name = "compare", .route = "/v1/compare", .gathers = es_analyses, .spec = es_compare_spec,
    .handler = es_api_compare,
    .cost_params = "matrices, rows, k"};

/* ---------------------------------------------------------------- the table */

/* Every descriptor of src/api/analyses/, in order (the generated list), then compare. */
#define ES_ANALYSIS_ENTRY(name) extern const es_analysis es_descriptor_##name;
#include "analyses_list.h"
#undef ES_ANALYSIS_ENTRY

const es_analysis *const es_analyses[] = {
#define ES_ANALYSIS_ENTRY(name) &es_descriptor_##name,
#include "analyses_list.h"
#undef ES_ANALYSIS_ENTRY
    &compare, NULL};
