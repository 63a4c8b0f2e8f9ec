/* The analysis rope/relative, GET /v1/rope/relative: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

/* Example requests of rope/relative (es_examples); q and k are 64 numbers (rope64's d_model). */
#define EIGHT(v) v "," v "," v "," v "," v "," v "," v "," v
#define SIXTY_FOUR(v) EIGHT(v) "," EIGHT(v) "," EIGHT(v) "," EIGHT(v) "," EIGHT(v) "," EIGHT(v) "," EIGHT(v) "," EIGHT(v)
static const es_example_case ex_rope_relative_cases[] = {
    {"matrix", "matrix=sinusoidal/rope", "matrix=sinusoidal/rope64&seed=1", "matrix=sinusoidal/nope"},
    {"q", "q=" SIXTY_FOUR("1") "&k=" SIXTY_FOUR("2"), "q=" SIXTY_FOUR("3") "&k=" SIXTY_FOUR("2"), "q=1,2&k=1,2"},
    {"k", "q=" SIXTY_FOUR("1") "&k=" SIXTY_FOUR("2"), "q=" SIXTY_FOUR("1") "&k=" SIXTY_FOUR("5"), "q=" SIXTY_FOUR("1") "&k=x"},
    {"seed", "seed=1", "seed=2", "seed=-1"},
    {0}};
static const es_example_table ex_rope_relative_tables[] = {
    {"matrix=sinusoidal/rope64&seed=2", "diagonals"},
    {0}};
static const es_examples ex_rope_relative = {
    .query = "matrix=sinusoidal/rope64",
    .cases = ex_rope_relative_cases,
    .light = "matrix=tiny/rope", .heavy = "matrix=sinusoidal/rope64",
    .tables = ex_rope_relative_tables,
};
ES_DESCRIPTOR(rope_relative, 190) = {
    .examples = &ex_rope_relative,
    .name = "rope/relative", .route = "/v1/rope/relative", .params_size = sizeof(es_rope_params),
    .spec = es_rope_spec, .handler = es_api_rope_relative, .tables = (const char *const[]){"diagonals", NULL},
    .cost_params = "matrix (its positions)"};
