/* The analysis table: one es_analysis descriptor per analysis endpoint, with its
 * typed parameter spec and, for the regular ones, its fill function (compute
 * with the pure function of src/analysis, then render with render.c).
 * Everything else (routing, allowed parameters, parsing, the canonical
 * cache/ETag key, the "input" echo, /v1/compare eligibility, the openapi.yaml
 * check) is derived from these descriptors; see descriptor.h, "the analysis table".
 *
 * How to add a parameter to an existing analysis (issue 10's head= /
 * average_mode=, issue 11's method=, ...):
 *   1. a field in the analysis' params struct below (size_t for SIZE and
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
 * How to add an analysis: its pure function in src/analysis, a params struct,
 * a spec, a fill function, its example requests (es_examples) and a descriptor
 * here, its entry in es_analyses[], its tests, then `make openapi`
 * (docs/development.md, "Adding an analysis").
 * Nothing else in src/api.
 *
 * Defaults (in --dump-api and the generated openapi.yaml): rows "" = every row, no exclusions;
 * center "columns" for pca, spectrum, vectors and periodicity, "none" for the
 * pair analyses (the matrices' own subspaces) and cosine; k 3 for pca, vectors and
 * periodicity, 30 for capture, 10 for alignment; bins 64 (at most max_bins;
 * alignment 0 = unbinned); blur 0; side right; cosine mode row; outliers
 * threshold 3.5; toeplitz kind cosine. */
#include "embedscope/app.h"
#include "embedscope/cost.h"
#include "embedscope/descriptor.h"
#include "embedscope/format.h"
#include "embedscope/params.h"
#include "embedscope/pool.h"
#include "embedscope/render.h"
#include "embedscope/route.h"
#include "embedscope/uploads.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- shared pieces */

/* The degeneracy groups of svd's singular values under threshold gap; NULL on failure. */
static es_degeneracy *degeneracy_of(const es_svd *svd, double gap, es_err *err)
{
    es_degeneracy *d = NULL;
    return es_degeneracy_find(svd->s, svd->r, gap, &d, err) < 0 ? NULL : d;
}

/* The degeneracy threshold gap, strictly between 0 and 1. */
#define GAP_SPEC(type)                                                                                     \
    {.name = "gap", .kind = ES_P_REAL, .def = ES_DEGENERACY_GAP, .min = 0, .max = 1, .min_open = true,   \
     .max_open = true, .offset = ES_FIELD(type, gap)}
/* A number of components: 1..max_k and at most the rank bound of selection side. */
#define K_SPEC(type, dflt, which)                                                                          \
    {.name = "k", .kind = ES_P_SIZE, .def = dflt, .min = 1, .limit = "max_k", .bound = ES_BOUND_RANK,      \
     .side = which, .offset = ES_FIELD(type, k)}
/* Heatmap bins: default 64 (lowered to max_bins), at most max_bins. */
#define BINS_SPEC(type, dflt, lowest)                                                                      \
    {.name = "bins", .kind = ES_P_SIZE, .def = dflt, .min = lowest, .limit = "max_bins",                  \
     .offset = ES_FIELD(type, bins)}

/* Costs beyond the selection pass and the decomposition (cost.c): each
 * analysis' own kernels and the numbers it renders. The n x n Gram matrix of
 * the items and its diagonals (toeplitz, cosine offset/matrix): */
static void cost_gram(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)run;
    es_cost_gram(c, n, d);
    es_cost_output(c, 6.0 * (double)n);
}

/* The analyses answered from the top k triplets (pca, vectors) and the
 * spectrum (k 0: every singular value): their params start with k and method,
 * so one decomposition serves them all. */
typedef struct topk_params {
    size_t k, method;
} topk_params;

/* es_method order; the spectrum takes the first three (values comes before topk
 * for that, see linalg.h), pca and vectors all four and refuse values
 * (needs_vectors). */
static const char *const methods[] = {"auto", "exact", "values", "topk", NULL};
static const char *const spectrum_methods[] = {"auto", "exact", "values", NULL};
#define METHOD_SPEC(type, names)                                                                           \
    {.name = "method", .kind = ES_P_CHOICE, .choices = names, .def = ES_METHOD_AUTO,                      \
     .no_echo = true /* input.matrix.method says which one answered */, .offset = ES_FIELD(type, method)}

/* An analysis of singular vectors (pca, vectors) asked for method=values: a
 * 400 before the gate, so nothing is queued or computed. ES_E_PARAM naming
 * "method". */
static int needs_vectors(const es_run *run, es_err *err)
{
    const topk_params *p = run->params;
    return p->method == ES_METHOD_VALUES ? es_fail(err, ES_E_PARAM, "method", ES_VALUES_ONLY, run->a->name) : 0;
}

/* The top k triplets by the asked method (exact SVD, or a certified top-k
 * solver, auto choosing), or for the spectrum (k 0) every singular value, with
 * the vectors or (values) without; fails like es_cache_decompose. */
static int decompose_topk(const es_run *run, int i, es_svd **out, es_err *err)
{
    const topk_params *p = run->params;
    const es_one *o = &run->one[i];
    return es_cache_decompose(run->app->cache, o->m, o->sel.idx, o->sel.n, o->sel.center, (es_method)p->method,
                              p->k, out, err);
}

/* ---------------------------------------------------------------- pca */

enum pca_basis { BASIS_OWN, BASIS_ORIGINAL };
static const char *const pca_bases[] = {"own", "original", NULL};

typedef struct pca_params {
    size_t k, method; /* a topk_params first */
    size_t basis;     /* original: the averaged rows in the unaveraged rows' PCA basis */
} pca_params;

static const es_pspec pca_spec[] = {
    K_SPEC(pca_params, 3, 0), METHOD_SPEC(pca_params, methods),
    {.name = "basis", .kind = ES_P_CHOICE, .choices = pca_bases, .def = BASIS_OWN,
     .offset = ES_FIELD(pca_params, basis)},
    {0}};

/* The matrix pca decomposes: the analysed one, or for basis=original the one
 * before averaging (its head view, or the configured matrix). */
static const es_matrix *pca_basis_matrix(const es_run *run, const es_one *o)
{
    const pca_params *p = run->params;
    if (p->basis != BASIS_ORIGINAL)
        return o->m;
    return o->head_view ? o->head_view : o->source;
}

/* decompose_topk, of pca_basis_matrix. */
static int decompose_pca(const es_run *run, int i, es_svd **out, es_err *err)
{
    const pca_params *p = run->params;
    const es_one *o = &run->one[i];
    return es_cache_decompose(run->app->cache, pca_basis_matrix(run, o), o->sel.idx, o->sel.n, o->sel.center,
                              (es_method)p->method, p->k, out, err);
}

/* needs_vectors; basis=original needs average=g over rows (a basis of the
 * same rows unaveraged). ES_E_PARAM naming method / basis. */
static int validate_pca(const es_run *run, es_err *err)
{
    const pca_params *p = run->params;
    const es_one *o = &run->one[0];
    if (needs_vectors(run, err) < 0)
        return -1;
    if (p->basis == BASIS_ORIGINAL && (!o->average || o->groups))
        return es_fail(err, ES_E_PARAM, "basis", "basis=original projects averaged rows onto the PCA of the "
                       "same rows unaveraged: it needs average=g with average_mode=rows");
    return 0;
}

/* Explained variance and the coordinates of the selected rows (basis=original:
 * of the averaged rows in the unaveraged rows' basis, whose variance ratios
 * these are); fails like es_pca_from_svd / es_pca_in_basis. */
static int fill_pca(const es_run *run, es_out *out, es_err *err)
{
    const pca_params *p = run->params;
    es_pca *pca;
    int rc = p->basis == BASIS_ORIGINAL ? es_pca_in_basis(run->svd[0], run->one[0].m, p->k, &pca, err)
                                        : es_pca_from_svd(run->svd[0], run->one[0].m, p->k, &pca, err);
    if (rc < 0)
        return -1;
    es_render_pca(&out->jc, out->root, pca, !out->tables_only);
    es_table *t = es_out_table(out, "coords", "row", "coordinate", pca->n, pca->k);
    es_table_columns(t, NULL, "pc", 1);
    for (size_t i = 0; i < pca->n; i++)
        t->index_values[i] = (double)pca->rows[i];
    memcpy(t->values, pca->coords, pca->n * pca->k * sizeof(double));
    static const char *const names[] = {"explained_variance_ratio", "cumulative"};
    es_out_records(out, "variance", "component", "ratio", names, (const double *const[]){pca->evr, pca->cumulative}, 2,
            pca->k);
    es_pca_free(pca);
    return 0;
}

static const char *const pca_tables[] = {"coords", "variance", NULL};

/* The coordinates X V_k and k + 1 numbers per row out. */
static void cost_pca(const es_run *run, size_t n, size_t d, es_cost *c)
{
    size_t k = ((const pca_params *)run->params)->k;
    es_cost_project(c, n, d, k);
    es_cost_output(c, (double)(k + 1) * (double)n + 2.0 * (double)k);
}

static void plan_pca(const es_run *run, es_out_plan *p)
{
    size_t k = ((const pca_params *)run->params)->k;
    es_plan_table(p, "coords", run->one[0].sel.n, k);
    es_plan_table(p, "variance", k, 2);
}

/* Example requests of pca (es_examples). */
static const es_example_case ex_pca_cases[] = {
    {"k", "k=2", "k=3", "k=0"},
    {"method", "-rows&method=exact", "-rows&method=topk", "method=lanczos"},
    {"basis", "average=4&basis=original", "average=4&basis=own", "basis=original"},
    {0}};
static const es_example_table ex_pca_tables[] = {
    {"k=3&rows=1:", "coords variance"},
    {0}};
static const es_examples ex_pca = {
    .query = "rows=0:64",
    .cases = ex_pca_cases,
    .light = "k=2", .heavy = "k=2",
    .tables = ex_pca_tables,
};
static const es_analysis pca = {
    .examples = &ex_pca,
    .name = "pca", .route = "/v1/models/{model}/matrices/{matrix}/pca", .shape = ES_SHAPE_ONE,
    .decomposes = true, .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .comparable = true, .params_size = sizeof(pca_params), .spec = pca_spec, .fill = fill_pca, .cost = cost_pca,
    .decompose = decompose_pca, .validate = validate_pca, .plan = plan_pca,
    .tables = pca_tables,
    .cost_params = "rows, k"};

/* ---------------------------------------------------------------- spectrum */

typedef struct spectrum_params {
    size_t k, method; /* a topk_params first; k is not a parameter: 0, every singular value */
    double gap;
} spectrum_params;

static const es_pspec spectrum_spec[] = {GAP_SPEC(spectrum_params), METHOD_SPEC(spectrum_params, spectrum_methods),
                                         {0}};

/* The spectrum and its degenerate groups; fails like es_spectrum_from_svd / es_degeneracy_find. */
static int fill_spectrum(const es_run *run, es_out *out, es_err *err)
{
    const spectrum_params *p = run->params;
    es_spectrum *spec = NULL;
    es_degeneracy *deg = NULL;
    int rc = -1;
    if (es_spectrum_from_svd(run->svd[0], &spec, err) < 0 || !(deg = degeneracy_of(run->svd[0], p->gap, err)))
        goto done;
    es_render_spectrum(&out->jc, out->root, spec);
    es_render_degeneracy(&out->jc, out->root, deg);
    static const char *const names[] = {"singular_value", "explained_variance_ratio", "cumulative"};
    es_out_records(out, "spectrum", "component", "singular value / ratio", names,
            (const double *const[]){spec->s, spec->evr, spec->cumulative}, 3, spec->r);
    rc = 0;
done:
    es_degeneracy_free(deg);
    es_spectrum_free(spec);
    return rc;
}

/* r singular values and their ratios out. */
static void cost_spectrum(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)run;
    es_cost_output(c, 5.0 * (double)(n < d ? n : d));
}

static void plan_spectrum(const es_run *run, es_out_plan *p)
{
    es_plan_table(p, "spectrum", es_one_rank(&run->one[0]), 3);
}

/* Example requests of spectrum (es_examples). */
static const es_example_case ex_spectrum_cases[] = {
    {"gap", "gap=0.5", "gap=0.001", "gap=1"},
    {"method", "method=exact", "method=values", "method=topk"},
    {0}};
static const es_example_table ex_spectrum_tables[] = {
    {"rows=0:100", "spectrum"},
    {"rows=1:&method=values", "spectrum"},
    {0}};
static const es_examples ex_spectrum = {
    .query = "rows=0:64",
    .cases = ex_spectrum_cases,
    .light = "", .heavy = "",
    .tables = ex_spectrum_tables,
};
static const es_analysis spectrum = {
    .examples = &ex_spectrum,
    .name = "spectrum", .route = "/v1/models/{model}/matrices/{matrix}/spectrum", .shape = ES_SHAPE_ONE,
    .decomposes = true, .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .comparable = true, .params_size = sizeof(spectrum_params), .spec = spectrum_spec, .fill = fill_spectrum,
    .decompose = decompose_topk, .tables = (const char *const[]){"spectrum", NULL},
    .cost = cost_spectrum, .plan = plan_spectrum, .cost_params = "rows"};

/* ---------------------------------------------------------------- cosine */

enum cosine_mode { MODE_ROW, MODE_OFFSET, MODE_MATRIX };
static const char *const cosine_modes[] = {"row", "offset", "matrix", NULL};

typedef struct cosine_params {
    size_t mode, row, bins;
} cosine_params;

static const es_pspec cosine_spec[] = {
    {.name = "mode", .kind = ES_P_CHOICE, .choices = cosine_modes, .def = MODE_ROW,
     .offset = ES_FIELD(cosine_params, mode)},
    {.name = "row", .kind = ES_P_SIZE, .required = true, .bound = ES_BOUND_LAST_ITEM, .when = "mode",
     .when_is = "row", .offset = ES_FIELD(cosine_params, row)},
    {.name = "bins", .kind = ES_P_SIZE, .def = ES_DEFAULT_BINS, .min = 0, .limit = "max_bins", .when = "mode",
     .when_is = "matrix", .offset = ES_FIELD(cosine_params, bins)}, /* 0: full resolution (max_cells) */
    {0}};

/* The cosine analysis of the chosen mode over the selection, centred as asked
 * (center=columns: the cosine of centred rows; default none). */
static int fill_cosine(const es_run *run, es_out *out, es_err *err)
{
    const cosine_params *p = run->params;
    const es_one *o = &run->one[0];
    if (p->mode == MODE_ROW) {
        double *sim;
        if (es_cosine_row(o->m, p->row, o->sel.idx, o->sel.n, o->sel.center, &sim, err) < 0)
            return -1;
        es_render_cosine_row(&out->jc, out->root, &o->sel, sim);
        es_out_column(out, "similarity", "row", "cosine", sim, o->sel.idx, o->sel.n);
        free(sim);
    } else if (p->mode == MODE_OFFSET) {
        es_cosine_offset *off;
        if (es_cosine_by_offset(o->m, o->sel.idx, o->sel.n, o->sel.center, &off, err) < 0)
            return -1;
        es_render_cosine_offset(&out->jc, out->root, off);
        double *pairs = es_sizes_as_doubles(off->pairs, off->count);
        es_table *t = es_out_records(out, "offsets", "offset", "cosine / count",
                              (const char *const[]){"mean", "pairs"}, (const double *const[]){off->mean, pairs}, 2,
                              off->count);
        for (size_t i = 0; i < off->count; i++)
            t->index_values[i] = (double)off->offset[i];
        free(pairs);
        es_cosine_offset_free(off);
    } else {
        es_grid *g;
        if (es_cosine_matrix(o->m, o->sel.idx, o->sel.n, o->sel.center, p->bins, &g, err) < 0)
            return -1;
        es_render_grid(&out->jc, out->root, "values", g);
        es_out_grid(out, "values", "mean cosine per bin", g, "col_");
        es_grid_free(g);
    }
    return 0;
}

/* mode=row: n numbers out; offset and matrix: every pair of rows (the cosine
 * matrix a block of rows at a time), then n offsets or the grid out. */
static void cost_cosine(const es_run *run, size_t n, size_t d, es_cost *c)
{
    const cosine_params *p = run->params;
    if (p->mode == MODE_ROW) {
        es_cost_output(c, 2.0 * (double)n);
        return;
    }
    es_cost_cosine(c, n, d, p->mode == MODE_OFFSET);
    es_cost_output(c, 6.0 * (double)n);
    if (p->mode == MODE_MATRIX)
        es_cost_grid(c, p->bins, n, n);
}

/* Whether the n selected items are evenly spaced (a slice: its n offsets are
 * 0, s, ..., (n-1) s, so the offsets table's length is known). */
static bool evenly_spaced(const size_t *idx, size_t n)
{
    for (size_t i = 2; i < n; i++)
        if (idx[i] - idx[i - 1] != idx[1] - idx[0])
            return false;
    return true;
}

/* The word operations an HTTP thread may spend counting the distinct offsets
 * of a selection exactly (es_cosine_offset_bound; about a millisecond): past
 * it the gate takes the O(n) bound, so the gate stays cheap for any rows. */
#define OFFSET_COUNT_BUDGET ((size_t)1 << 22)

/* row: one similarity per selected row; matrix: the grid; offsets: one row per
 * distinct offset, n of them for evenly spaced rows, else counted from the
 * indices alone within OFFSET_COUNT_BUDGET, else bounded. */
static void plan_cosine(const es_run *run, es_out_plan *p)
{
    const cosine_params *cp = run->params;
    const es_selection *sel = &run->one[0].sel;
    size_t n = sel->n;
    if (cp->mode == MODE_ROW)
        es_plan_table(p, "similarity", n, 1);
    else if (cp->mode == MODE_MATRIX)
        es_plan_table(p, "values", es_bin_count(n, cp->bins), es_bin_count(n, cp->bins));
    else if (evenly_spaced(sel->idx, n))
        es_plan_table(p, "offsets", n, 2);
    else {
        bool exact;
        size_t count = es_cosine_offset_bound(sel->idx, n, OFFSET_COUNT_BUDGET, &exact);
        es_plan_table_bounded(p, "offsets", count, exact, 2);
    }
}

/* The full n x n matrix (mode=matrix, bins=0) within max_cells; fails like es_check_cells. */
static int validate_cosine(const es_run *run, es_err *err)
{
    const cosine_params *p = run->params;
    size_t n = run->one[0].sel.n;
    return p->mode == MODE_MATRIX && p->bins == 0 ? es_check_cells(run->lim, n, n, err) : 0;
}

/* One table per mode, in mode order: similarity, offsets, values. */
static bool produces_cosine(const es_run *run, const char *name)
{
    static const char *const by_mode[] = {"similarity", "offsets", "values"};
    return strcmp(name, by_mode[((const cosine_params *)run->params)->mode]) == 0;
}

/* Example requests of cosine (es_examples). */
static const es_example_case ex_cosine_cases[] = {
    {"mode", "mode=offset&-row", "mode=matrix&-row", "mode=diagonal"},
    {"row", "row=2", "row=3", "row=1024"},
    {"bins", "mode=matrix&-row&bins=4", "mode=matrix&-row&bins=8", "mode=matrix&-row&bins=100000"},
    {"table", "format=csv&table=similarity", "format=csv&mode=offset&-row&table=offsets", "table=nope"},
    {0}};
static const es_example_table ex_cosine_tables[] = {
    {"row=5&rows=0:50", "similarity"},
    {"mode=offset&rows=0:50", "offsets"},
    {"mode=matrix&bins=16", "values"},
    {"row=5&rows=0:50&center=columns", "similarity"},
    {"mode=matrix&bins=0&rows=0:40&center=columns", "values"},
    {0}};
static const es_examples ex_cosine = {
    .query = "rows=0:64&row=1",
    .cases = ex_cosine_cases,
    .light = "row=0", .heavy = "mode=offset",
    .tables = ex_cosine_tables,
};
static const es_analysis cosine = {
    .examples = &ex_cosine,
    .name = "cosine", .route = "/v1/models/{model}/matrices/{matrix}/cosine", .shape = ES_SHAPE_ONE,
    .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE,
    .comparable = true, .params_size = sizeof(cosine_params),
    .spec = cosine_spec, .fill = fill_cosine, .validate = validate_cosine, .produces = produces_cosine,
    .tables = (const char *const[]){"similarity", "offsets", "values", NULL},
    .cost = cost_cosine, .plan = plan_cosine, .cost_params = "rows, mode, bins"};

/* ---------------------------------------------------------------- neighbors */

static const char *const metrics[] = {"cosine", "euclidean", NULL};  /* es_metric order */
enum neighbor_space { SPACE_FULL, SPACE_PCA };
static const char *const spaces[] = {"full", "pca", NULL};

typedef struct neighbors_params {
    size_t row, k, metric, space, components;
} neighbors_params;

/* At most this many neighbours in one answer (a ranked list, not a dump). */
#define NEIGHBORS_MAX_K 1000

static const es_pspec neighbors_spec[] = {
    {.name = "row", .kind = ES_P_SIZE, .required = true, .bound = ES_BOUND_LAST_ITEM,
     .offset = ES_FIELD(neighbors_params, row)},
    {.name = "k", .kind = ES_P_SIZE, .def = 10, .min = 1, .max = NEIGHBORS_MAX_K,
     .offset = ES_FIELD(neighbors_params, k)},
    {.name = "metric", .kind = ES_P_CHOICE, .choices = metrics, .def = ES_METRIC_COSINE,
     .offset = ES_FIELD(neighbors_params, metric)},
    {.name = "space", .kind = ES_P_CHOICE, .choices = spaces, .def = SPACE_FULL,
     .offset = ES_FIELD(neighbors_params, space)},
    {.name = "components", .kind = ES_P_SIZE, .def = 3, .min = 1, .limit = "max_k", .bound = ES_BOUND_RANK,
     .side = 0, .when = "space", .when_is = "pca", .offset = ES_FIELD(neighbors_params, components)},
    {0}};

/* In the PCA space the query is one of the selected rows (its coordinates are
 * the PCA's); in the full space any item. ES_E_PARAM "row" otherwise. */
static int validate_neighbors(const es_run *run, es_err *err)
{
    const neighbors_params *p = run->params;
    const es_one *o = &run->one[0];
    if (p->space != SPACE_PCA)
        return 0;
    for (size_t i = 0; i < o->sel.n; i++)
        if (o->sel.idx[i] == p->row)
            return 0;
    return es_fail(err, ES_E_PARAM, "row", "row %zu is not among the selected rows (space=pca needs its coordinates)",
                   p->row);
}

/* The k nearest of the query among the PCA coordinates of the selection (its
 * decomposition by the selection's centring, shared with pca). */
static int neighbors_in_pca(const es_run *run, es_neighbors **nb, es_err *err)
{
    const neighbors_params *p = run->params;
    const es_one *o = &run->one[0];
    es_svd *svd = NULL;
    es_pca *pc = NULL;
    int rc = -1;
    if (es_cache_decompose(run->app->cache, o->m, o->sel.idx, o->sel.n, o->sel.center, ES_METHOD_AUTO,
                           p->components, &svd, err) < 0 ||
        es_pca_from_svd(svd, o->m, p->components, &pc, err) < 0)
        goto done;
    size_t at = 0;
    while (pc->rows[at] != p->row) /* present: validate_neighbors */
        at++;
    rc = es_neighbors_among(pc->coords, pc->rows, pc->n, pc->k, pc->coords + at * pc->k, p->row,
                            (es_metric)p->metric, p->k, nb, err);
done:
    es_pca_free(pc);
    es_svd_release(svd);
    return rc;
}

/* The exact top k by the chosen metric, as a ranked list and a table. */
static int fill_neighbors(const es_run *run, es_out *out, es_err *err)
{
    const neighbors_params *p = run->params;
    const es_one *o = &run->one[0];
    es_neighbors *nb = NULL;
    if ((p->space == SPACE_PCA ? neighbors_in_pca(run, &nb, err)
                               : es_neighbors_items(o->m, p->row, o->sel.idx, o->sel.n, (es_metric)p->metric,
                                                    p->k, &nb, err)) < 0)
        return -1;
    json_object_set_new(out->root, "score", json_string(p->metric == ES_METRIC_COSINE ? "cosine similarity"
                                                                                       : "euclidean distance"));
    json_object_set_new(out->root, "rows", es_jsizes(nb->rows, nb->k));
    json_object_set_new(out->root, "scores", es_jnums(&out->jc, "scores", nb->score, nb->k));
    es_table *t = es_out_table(out, "neighbors", "rank", "item index / score", nb->k, 2);
    es_table_columns(t, (const char *const[]){"row", "score"}, NULL, 0);
    for (size_t i = 0; i < nb->k; i++) {
        t->index_values[i] = (double)(i + 1);
        t->values[2 * i] = (double)nb->rows[i];
        t->values[2 * i + 1] = nb->score[i];
    }
    es_neighbors_free(nb);
    return 0;
}

/* Every selected item scored once (d multiply-adds each, counted with the pass
 * over the selection), plus the decomposition and coordinates in the PCA space,
 * then k answers. */
static void cost_neighbors(const es_run *run, size_t n, size_t d, es_cost *c)
{
    const neighbors_params *p = run->params;
    es_cost_output(c, 2.0 * (double)p->k);
    if (p->space == SPACE_PCA) { /* auto: top-k or exact, as es_cache_decompose resolves it */
        es_cost_decompose(c, ES_METHOD_AUTO, n, d, p->components);
        es_cost_project(c, n, d, p->components);
    } else {
        es_cost_project(c, n, d, 1);
    }
}

/* min(k, the candidates): every selected item but the query itself. */
static void plan_neighbors(const es_run *run, es_out_plan *p)
{
    const neighbors_params *np = run->params;
    const es_selection *sel = &run->one[0].sel;
    size_t candidates = sel->n;
    for (size_t i = 0; i < sel->n; i++)
        if (sel->idx[i] == np->row) {
            candidates--;
            break;
        }
    es_plan_table(p, "neighbors", np->k < candidates ? np->k : candidates, 2);
}

/* Example requests of neighbors (es_examples). */
static const es_example_case ex_neighbors_cases[] = {
    {"row", "row=2", "row=3", "row=1024"},
    {"k", "k=2", "k=3", "k=0"},
    {"metric", "metric=euclidean", "metric=cosine&k=4", "metric=x"},
    {"space", "space=pca", "space=full&k=4", "space=x"},
    {"components", "space=pca&components=2", "space=pca&components=4", "space=pca&components=0"},
    {0}};
static const es_example_table ex_neighbors_tables[] = {
    {"row=5&k=4&rows=0:64", "neighbors"},
    {0}};
static const es_examples ex_neighbors = {
    .query = "rows=0:64&row=1",
    .cases = ex_neighbors_cases,
    .light = "row=0&k=2", .heavy = "row=0&k=2&space=pca",
    .tables = ex_neighbors_tables,
};
static const es_analysis neighbors = {
    .examples = &ex_neighbors,
    .name = "neighbors", .route = "/v1/models/{model}/matrices/{matrix}/neighbors", .shape = ES_SHAPE_ONE,
    .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .params_size = sizeof(neighbors_params), .spec = neighbors_spec, .fill = fill_neighbors,
    .validate = validate_neighbors, .tables = (const char *const[]){"neighbors", NULL},
    .cost = cost_neighbors, .plan = plan_neighbors, .cost_params = "rows, space"};

/* ---------------------------------------------------------------- umap */

typedef struct umap_params {
    size_t dims, method; /* a topk_params first: the start is the top `dims` PCA coordinates (auto) */
    size_t n_neighbors, metric, epochs, seed;
    double min_dist;
} umap_params;

/* Most neighbours per item and epochs one request may ask for. */
#define UMAP_MAX_NEIGHBORS 200
#define UMAP_MAX_EPOCHS 5000

static const es_pspec umap_spec[] = {
    {.name = "n_neighbors", .kind = ES_P_SIZE, .def = 15, .min = 2, .max = UMAP_MAX_NEIGHBORS,
     .offset = ES_FIELD(umap_params, n_neighbors)},
    {.name = "min_dist", .kind = ES_P_REAL, .def = 0.1, .min = 0, .max = 1,
     .offset = ES_FIELD(umap_params, min_dist)},
    {.name = "dims", .kind = ES_P_SIZE, .def = 2, .min = 2, .max = 3, .offset = ES_FIELD(umap_params, dims)},
    {.name = "metric", .kind = ES_P_CHOICE, .choices = metrics, .def = ES_METRIC_COSINE,
     .offset = ES_FIELD(umap_params, metric)},
    {.name = "epochs", .kind = ES_P_SIZE, .def = 0, .min = 0, .max = UMAP_MAX_EPOCHS,
     .offset = ES_FIELD(umap_params, epochs)},
    {.name = "seed", .kind = ES_P_SIZE, .def = 0, .min = 0, .offset = ES_FIELD(umap_params, seed)},
    {0}};

/* Under 3 rows, or fewer rows than n_neighbors: a 400 before the gate. */
static int validate_umap(const es_run *run, es_err *err)
{
    const umap_params *p = run->params;
    size_t n = run->one[0].sel.n;
    if (n < 3)
        return es_fail(err, ES_E_PARAM, "rows", "UMAP needs at least 3 selected rows, got %zu", n);
    if (p->n_neighbors > n)
        return es_fail(err, ES_E_PARAM, "n_neighbors", "n_neighbors=%zu is more than the %zu selected rows "
                       "(it counts the row itself, as umap-learn does)", p->n_neighbors, n);
    return 0;
}

/* The layout from the top `dims` PCA coordinates, as a JSON list like pca's and
 * the table "embedding". */
static int fill_umap(const es_run *run, es_out *out, es_err *err)
{
    const umap_params *p = run->params;
    const es_one *o = &run->one[0];
    es_pca *pc = NULL;
    es_umap *u = NULL;
    if (es_pca_from_svd(run->svd[0], o->m, p->dims, &pc, err) < 0)
        return -1;
    es_umap_params up = {.n_neighbors = p->n_neighbors, .dims = p->dims, .epochs = p->epochs,
                         .min_dist = p->min_dist, .metric = (es_metric)p->metric, .seed = p->seed};
    int rc = es_umap_items(o->m, pc->rows, pc->n, &up, pc->coords, &u, err);
    es_pca_free(pc);
    if (rc < 0)
        return -1;
    json_object_set_new(out->root, "neighbor_graph", json_string("exact"));
    json_object_set_new(out->root, "epochs", json_integer((json_int_t)u->epochs));
    json_object_set_new(out->root, "edges", json_integer((json_int_t)u->edges));
    json_object_set_new(out->root, "curve", json_pack("{s:f, s:f}", "a", u->a, "b", u->b));
    json_t *rows = json_array();
    for (size_t i = 0; i < u->n; i++)
        json_array_append_new(rows, json_pack("{s:I, s:o}", "index", (json_int_t)u->rows[i], "coords",
                                              es_jnums(&out->jc, "coords", u->coords + i * u->dims, u->dims)));
    json_object_set_new(out->root, "rows", rows);
    es_table *t = es_out_table(out, "embedding", "row", "coordinate", u->n, u->dims);
    es_table_columns(t, (const char *const[]){"x", "y", "z"}, NULL, 0);
    for (size_t i = 0; i < u->n; i++)
        t->index_values[i] = (double)u->rows[i];
    memcpy(t->values, u->coords, u->n * u->dims * sizeof(double));
    es_umap_free(u);
    return 0;
}

/* The neighbour graph (every pair's product), the layout's epochs and the table out. */
static void cost_umap(const es_run *run, size_t n, size_t d, es_cost *c)
{
    const umap_params *p = run->params;
    es_cost_project(c, n, d, p->dims);
    es_cost_umap(c, n, d, p->n_neighbors, es_umap_epochs(n, p->epochs));
    es_cost_output(c, (double)(p->dims + 1) * (double)n);
}

static void plan_umap(const es_run *run, es_out_plan *p)
{
    es_plan_table(p, "embedding", run->one[0].sel.n, ((const umap_params *)run->params)->dims);
}

/* Example requests of umap (es_examples). */
static const es_example_case ex_umap_cases[] = {
    {"n_neighbors", "n_neighbors=5", "n_neighbors=8", "n_neighbors=1"},
    {"min_dist", "min_dist=0.5", "min_dist=0.2", "min_dist=2"},
    {"dims", "dims=3", "dims=2&epochs=30", "dims=4"},
    {"metric", "metric=euclidean", "metric=cosine&epochs=30", "metric=x"},
    {"epochs", "epochs=30", "epochs=40", "epochs=100000"},
    {"seed", "seed=1", "seed=2", "seed=x"},
    {0}};
static const es_example_table ex_umap_tables[] = {
    {"rows=0:64&epochs=50", "embedding"},
    {0}};
static const es_examples ex_umap = {
    .query = "rows=0:64&epochs=50",
    .cases = ex_umap_cases,
    .light = "n_neighbors=5&epochs=20", .heavy = "n_neighbors=5",
    .tables = ex_umap_tables,
};
static const es_analysis umap = {
    .examples = &ex_umap,
    .name = "umap", .route = "/v1/models/{model}/matrices/{matrix}/umap", .shape = ES_SHAPE_ONE,
    .decomposes = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .params_size = sizeof(umap_params), .spec = umap_spec, .fill = fill_umap, .validate = validate_umap,
    .decompose = decompose_topk, .tables = (const char *const[]){"embedding", NULL},
    .cost = cost_umap, .plan = plan_umap, .cost_params = "rows, n_neighbors, epochs"};

/* ---------------------------------------------------------------- vectors */

static const char *const sides[] = {"left", "right", NULL}; /* es_side order */

typedef struct vectors_params {
    size_t k, method; /* a topk_params first */
    size_t side;
    double gap;
} vectors_params;

static const es_pspec vectors_spec[] = {
    {.name = "side", .kind = ES_P_CHOICE, .choices = sides, .def = ES_SIDE_RIGHT,
     .offset = ES_FIELD(vectors_params, side)},
    K_SPEC(vectors_params, 3, 0), GAP_SPEC(vectors_params), METHOD_SPEC(vectors_params, methods), {0}};

/* The top k vectors, flagged by degenerate group; fails like es_vectors_from_svd / es_degeneracy_find. */
static int fill_vectors(const es_run *run, es_out *out, es_err *err)
{
    const vectors_params *p = run->params;
    es_vectors *vec = NULL;
    es_degeneracy *deg = NULL;
    int rc = -1;
    if (es_vectors_from_svd(run->svd[0], run->one[0].m, (es_side)p->side, p->k, &vec, err) < 0 ||
        !(deg = degeneracy_of(run->svd[0], p->gap, err)))
        goto done;
    es_render_vectors(&out->jc, out->root, vec, run->svd[0]);
    es_render_degeneracy(&out->jc, out->root, deg);
    es_render_vector_groups(out->root, deg);
    es_table *t = es_out_table(out, "vectors", vec->side == ES_SIDE_LEFT ? "row" : "coordinate", "component",
                               vec->len, vec->k);
    es_table_columns(t, NULL, "v", 0);
    for (size_t i = 0; i < vec->len; i++) {
        t->index_values[i] = vec->side == ES_SIDE_LEFT ? (double)run->svd[0]->rows[i] : (double)i;
        for (size_t j = 0; j < vec->k; j++)
            t->values[i * vec->k + j] = vec->values[j * vec->len + i];
    }
    es_out_column(out, "singular_values", "component", "singular value", vec->s, NULL, vec->k);
    rc = 0;
done:
    es_degeneracy_free(deg);
    es_vectors_free(vec);
    return rc;
}

/* Left vectors are formed (X V_k S_k^-1, then certified: twice the products); k vectors out. */
static void cost_vectors(const es_run *run, size_t n, size_t d, es_cost *c)
{
    const vectors_params *p = run->params;
    if (p->side == ES_SIDE_LEFT) {
        es_cost_project(c, n, d, p->k);
        es_cost_project(c, n, d, p->k);
    }
    es_cost_output(c, (double)(p->k + 1) * (double)(p->side == ES_SIDE_LEFT ? n : d));
}

static void plan_vectors(const es_run *run, es_out_plan *p)
{
    const vectors_params *vp = run->params;
    es_plan_table(p, "vectors", vp->side == ES_SIDE_LEFT ? run->one[0].sel.n : es_matrix_dim(run->one[0].m), vp->k);
    es_plan_table(p, "singular_values", vp->k, 1);
}

/* Example requests of vectors (es_examples). */
static const es_example_case ex_vectors_cases[] = {
    {"k", "k=2", "k=3", "k=0"},
    {"gap", "gap=0.5", "gap=0.001", "gap=1"},
    {"method", "-rows&method=exact", "-rows&method=topk", "method=values"},
    {"side", "side=left", "side=right&k=4", "side=up"},
    {0}};
static const es_example_table ex_vectors_tables[] = {
    {"k=2&rows=0:64", "vectors singular_values"},
    {"k=2&rows=0:64&side=left", "vectors singular_values"},
    {0}};
static const es_examples ex_vectors = {
    .query = "rows=0:64",
    .cases = ex_vectors_cases,
    .light = "k=2", .heavy = "k=2",
    .tables = ex_vectors_tables,
};
static const es_analysis vectors = {
    .examples = &ex_vectors,
    .name = "vectors", .route = "/v1/models/{model}/matrices/{matrix}/vectors", .shape = ES_SHAPE_ONE,
    .decomposes = true, .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .params_size = sizeof(vectors_params), .spec = vectors_spec, .fill = fill_vectors, .cost = cost_vectors,
    .decompose = decompose_topk, .validate = needs_vectors, .plan = plan_vectors,
    .tables = (const char *const[]){"vectors", "singular_values", NULL},
    .cost_params = "rows, k"};

/* ---------------------------------------------------------------- capture */

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
static const es_analysis capture = {
    .examples = &ex_capture,
    .name = "capture", .route = "/v1/capture", .shape = ES_SHAPE_PAIR, .names = {"a", "b"}, .decomposes = true,
    .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE,
    .comparable = true, /* /v1/compare: a is the shared reference, each matrix a b */
    .params_size = sizeof(capture_params), .spec = capture_spec, .fill = fill_capture,
    .tables = (const char *const[]){"capture", NULL},
    .cost = cost_capture, .plan = plan_capture, .cost_params = "a_rows, b_rows, k"};

/* ---------------------------------------------------------------- overlap */

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
static const es_analysis overlap = {
    .examples = &ex_overlap,
    .name = "overlap", .route = "/v1/overlap", .shape = ES_SHAPE_PAIR, .names = {"a", "b"}, .decomposes = true,
    .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE,
    .params_size = sizeof(overlap_params), .spec = overlap_spec, .fill = fill_overlap, .validate = validate_overlap,
    .tables = (const char *const[]){"overlap", NULL},
    .cost = cost_overlap, .plan = plan_overlap, .cost_params = "a_rows, b_rows, ka, kb, bins"};

/* ---------------------------------------------------------------- periodicity */

enum period_axis { AXIS_COMPONENTS, AXIS_COLUMNS };
static const char *const period_axes[] = {"components", "columns", NULL};

typedef struct periodicity_params {
    size_t k;
    double alpha;   /* level of Fisher's g-test */
    size_t axis;    /* the top k PCA components, or every column of the matrix */
} periodicity_params;

static const es_pspec periodicity_spec[] = {
    /* axis first: k applies to axis=components only */
    {.name = "axis", .kind = ES_P_CHOICE, .choices = period_axes, .def = AXIS_COMPONENTS,
     .offset = ES_FIELD(periodicity_params, axis)},
    {.name = "k", .kind = ES_P_SIZE, .def = 3, .min = 1, .limit = "max_k", .bound = ES_BOUND_RANK, .side = 0,
     .when = "axis", .when_is = "components", .offset = ES_FIELD(periodicity_params, k)},
    {.name = "alpha", .kind = ES_P_REAL, .def = ES_PERIOD_ALPHA, .min = 0, .max = 0.5, .min_open = true,
     .max_open = true, .offset = ES_FIELD(periodicity_params, alpha)},
    {0}};

/* A number when the component has a period, else null. */
static json_t *if_found(es_jctx *jc, const es_period *c, const char *field, double v)
{
    return c->found ? es_jnum(jc, field, v) : json_null();
}

/* Fisher's g-test of one component (see es_period). */
static json_t *render_significance(es_jctx *jc, const es_period *c)
{
    return json_pack("{s:s, s:o, s:I, s:o, s:b, s:o, s:b}", "test", "fisher_g", "g", es_jnum(jc, "g", c->g),
                     "n_ordinates", (json_int_t)c->n_ordinates, "p_value", es_jnum(jc, "p_value", c->p_value),
                     "p_value_exact", c->p_exact, "alpha", es_jnum(jc, "alpha", c->alpha), "significant",
                     c->p_value < c->alpha);
}

/* One curve's period (null with the reason when there is none), the fit behind
 * it (with its phase, amplitude and share of the variance), the peak share and
 * the g-test, as {"index": j, ...}. */
static json_t *render_period(es_jctx *jc, const es_period *c, size_t j)
{
    json_t *o = json_pack("{s:I, s:o, s:o, s:o, s:I, s:o, s:o, s:o, s:[o, o], s:o}", "index", (json_int_t)j,
                          "period", if_found(jc, c, "period", c->period), "cycles",
                          if_found(jc, c, "cycles", c->cycles), "no_period_reason",
                          c->found ? json_null() : json_string(es_period_verdict_name(c->verdict)), "peak_bin",
                          (json_int_t)c->peak_bin, "peak_share", es_jnum(jc, "peak_share", c->peak_share),
                          "fit_cycles", es_jnum(jc, "fit_cycles", c->fit_cycles), "fit_period",
                          es_jnum(jc, "fit_period", c->fit_period), "search_cycles",
                          es_jnum(jc, "search_cycles", c->search_lo), es_jnum(jc, "search_cycles", c->search_hi),
                          "significance", render_significance(jc, c));
    json_object_set_new(o, "phase", es_jnum(jc, "phase", c->phase));
    json_object_set_new(o, "amplitude", es_jnum(jc, "amplitude", c->amplitude));
    json_object_set_new(o, "r2", es_jnum(jc, "r2", c->r2));
    return o;
}

/* Per component its period and fit (render_period); plus the turning plane. */
static void render_periodicity(es_jctx *jc, json_t *root, const es_periodicity *p)
{
    json_t *list = json_array();
    for (size_t j = 0; j < p->m; j++)
        json_array_append_new(list, render_period(jc, &p->components[j], j));
    json_object_set_new(root, "n", json_integer((json_int_t)p->n));
    json_object_set_new(root, "step", json_integer((json_int_t)p->step));
    json_object_set_new(root, "components", list);
    json_object_set_new(root, "turn_plane", es_jsizes(p->turn_plane, 2));
    json_object_set_new(root, "turns", es_jnum(jc, "turns", p->turns));
}

/* A no_period_reason code (an es_period_verdict) by name. */
static const char *verdict_label(size_t code) { return es_period_verdict_name((es_period_verdict)code); }

/* The columns of the tables "columns" (axis=columns) and "components". */
static const char *const column_period_names[] = {"peak_bin", "cycles", "period", "phase", "amplitude", "r2",
                                                  "p_value", "no_period_reason"};
static const char *const component_period_names[] = {"peak_bin", "cycles", "period", "peak_share",
                                                     "no_period_reason"};
#define COLUMN_PERIOD_COLS (sizeof column_period_names / sizeof *column_period_names)
#define COMPONENT_PERIOD_COLS (sizeof component_period_names / sizeof *component_period_names)

/* The table "columns": per column of the matrix its period (missing without
 * one), phase, amplitude, r2, p-value and the reason. */
static void columns_table(es_out *out, const es_period *per, size_t d)
{
    const char *const *names = column_period_names;
    const size_t cols = COLUMN_PERIOD_COLS;
    es_table *t = es_out_table(out, "columns", "column", "bin / cycles / positions / radians / value / share / p",
                               d, cols);
    es_table_columns(t, names, NULL, 0);
    t->labels[cols - 1] = verdict_label;
    for (size_t j = 0; j < d; j++) {
        const es_period *c = &per[j];
        double *row = t->values + j * cols;
        t->index_values[j] = (double)j;
        row[0] = (double)c->peak_bin;
        row[1] = c->found ? c->cycles : NAN;
        row[2] = c->found ? c->period : NAN;
        row[3] = c->phase;
        row[4] = c->amplitude;
        row[5] = c->r2;
        row[6] = c->p_value;
        row[7] = c->found ? NAN : (double)c->verdict;
    }
}

/* axis=columns: every column's period over the selected rows (the same test as
 * the components'); fails like es_periodicity_columns. */
static int fill_period_columns(const es_run *run, es_out *out, es_err *err)
{
    const periodicity_params *p = run->params;
    const es_one *o = &run->one[0];
    es_period *per;
    long step;
    if (es_periodicity_columns(o->m, o->sel.idx, o->sel.n, p->alpha, &per, &step, err) < 0)
        return -1;
    size_t d = es_matrix_dim(o->m);
    json_t *list = json_array();
    for (size_t j = 0; j < d; j++)
        json_array_append_new(list, render_period(&out->jc, &per[j], j));
    json_object_set_new(out->root, "n", json_integer((json_int_t)o->sel.n));
    json_object_set_new(out->root, "step", json_integer((json_int_t)step));
    json_object_set_new(out->root, "columns", list);
    columns_table(out, per, d);
    free(per);
    return 0;
}

/* Periodicity of the top k PCA components (axis=components) or of every column
 * (axis=columns); fails like es_periodicity_from_svd / es_periodicity_columns. */
static int fill_periodicity(const es_run *run, es_out *out, es_err *err)
{
    const periodicity_params *p = run->params;
    if (p->axis == AXIS_COLUMNS)
        return fill_period_columns(run, out, err);
    es_periodicity *per;
    if (es_periodicity_from_svd(run->svd[0], run->one[0].m, p->k, p->alpha, &per, err) < 0)
        return -1;
    render_periodicity(&out->jc, out->root, per);
    const size_t cols = COMPONENT_PERIOD_COLS;
    es_table *t = es_out_table(out, "components", "component", "bin / cycles / positions / share / reason",
                               per->m, cols);
    es_table_columns(t, component_period_names, NULL, 0);
    t->labels[cols - 1] = verdict_label;
    for (size_t j = 0; j < per->m; j++) {
        const es_period *c = &per->components[j];
        double *row = t->values + j * cols;
        t->index_values[j] = (double)j;
        row[0] = (double)c->peak_bin;
        row[1] = c->found ? c->cycles : NAN; /* null in the document: missing, never 0 */
        row[2] = c->found ? c->period : NAN;
        row[3] = c->peak_share;
        row[4] = c->found ? NAN : (double)c->verdict;
    }
    es_periodicity_free(per);
    return 0;
}

/* The k left vectors (formed and certified), then each one's direct periodogram
 * and fit; axis=columns: every column's. */
static void cost_periodicity(const es_run *run, size_t n, size_t d, es_cost *c)
{
    const periodicity_params *p = run->params;
    size_t curves = p->axis == AXIS_COLUMNS ? d : p->k;
    if (p->axis != AXIS_COLUMNS) {
        es_cost_project(c, n, d, p->k);
        es_cost_project(c, n, d, p->k);
    }
    es_cost_periodicity(c, n, curves);
    es_cost_output(c, 20.0 * (double)curves);
}

/* The most one curve's object takes in the JSON document (render_period: 21
 * names, 15 numbers at ES_BYTES_PER_NUMBER, two booleans, a reason; ~700). */
#define PERIOD_JSON_ROW 1024.0

/* axis=components: a row per component (k); columns: per column of the matrix. */
static void plan_periodicity(const es_run *run, es_out_plan *p)
{
    const periodicity_params *pp = run->params;
    if (pp->axis == AXIS_COLUMNS)
        es_plan_table(p, "columns", es_matrix_dim(run->one[0].m), COLUMN_PERIOD_COLS);
    else
        es_plan_table(p, "components", pp->k, COMPONENT_PERIOD_COLS);
    es_plan_json_row(p, PERIOD_JSON_ROW);
}

/* One table per axis: components, columns. */
static bool produces_periodicity(const es_run *run, const char *name)
{
    return strcmp(name, period_axes[((const periodicity_params *)run->params)->axis]) == 0;
}

/* Example requests of periodicity (es_examples). */
static const es_example_case ex_periodicity_cases[] = {
    {"exclude", "exclude=0", "exclude=63", "exclude=-1"},
    {"k", "k=2", "k=3", "k=0"},
    {"alpha", "alpha=0.05", "alpha=0.001", "alpha=0.5"},
    {"axis", "axis=columns&-k", "axis=components", "axis=rows"},
    {"table", "format=csv&table=components", "format=csv&axis=columns&-k&table=columns", "table=nope"},
    {0}};
static const es_example_table ex_periodicity_tables[] = {
    {"rows=1:", "components"},
    {"rows=1:&k=4", "components"},
    {"rows=1:&axis=columns", "columns"},
    {0}};
static const es_examples ex_periodicity = {
    .query = "rows=0:64",
    .cases = ex_periodicity_cases,
    .light = "k=2", .heavy = "k=2",
    .tables = ex_periodicity_tables,
};
static const es_analysis periodicity = {
    .examples = &ex_periodicity,
    .name = "periodicity", .route = "/v1/models/{model}/matrices/{matrix}/periodicity", .shape = ES_SHAPE_ONE,
    .decomposes = true, .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_COLUMNS,
    .comparable = true, .params_size = sizeof(periodicity_params), .spec = periodicity_spec,
    .fill = fill_periodicity, .cost = cost_periodicity, .plan = plan_periodicity, .produces = produces_periodicity,
    .tables = (const char *const[]){"components", "columns", NULL},
    .cost_params = "rows, k"};

/* ---------------------------------------------------------------- outliers */

typedef struct outliers_params {
    double threshold;
} outliers_params;

static const es_pspec outliers_spec[] = {
    {.name = "threshold", .kind = ES_P_REAL, .def = ES_OUTLIER_THRESHOLD, .min = 0, .max = HUGE_VAL,
     .min_open = true, .offset = ES_FIELD(outliers_params, threshold)},
    {0}};

/* Robust row-norm scores; fails like es_outliers_compute. */
static int fill_outliers(const es_run *run, es_out *out, es_err *err)
{
    const outliers_params *p = run->params;
    const es_one *one = &run->one[0];
    es_jctx *jc = &out->jc;
    json_t *root = out->root;
    es_outliers *o;
    if (es_outliers_compute(one->m, one->sel.idx, one->sel.n, p->threshold, &o, err) < 0)
        return -1;
    json_object_set_new(root, "rows", es_jsizes(o->rows, o->n));
    json_object_set_new(root, "norms", es_jnums(jc, "norms", o->norm, o->n));
    json_object_set_new(root, "scores", es_jnums(jc, "scores", o->score, o->n));
    json_object_set_new(root, "median", es_jnum(jc, "median", o->median));
    json_object_set_new(root, "mad", es_jnum(jc, "mad", o->mad));
    json_object_set_new(root, "scale", es_jnum(jc, "scale", o->scale));
    json_object_set_new(root, "threshold", es_jnum(jc, "threshold", o->threshold));
    json_object_set_new(root, "n_flagged", json_integer((json_int_t)o->n_flagged));
    json_object_set_new(root, "flagged", es_jsizes(o->flagged, o->n_flagged));
    es_table *t = es_out_records(out, "scores", "row", "norm / robust z-score", (const char *const[]){"norm", "score"},
                          (const double *const[]){o->norm, o->score}, 2, o->n);
    for (size_t i = 0; i < o->n; i++)
        t->index_values[i] = (double)o->rows[i];
    es_outliers_free(o);
    return 0;
}

/* One pass for the norms, a sort for the median; three numbers per row out. */
static void cost_outliers(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)run;
    (void)d;
    es_cost_output(c, 4.0 * (double)n);
}

static void plan_outliers(const es_run *run, es_out_plan *p)
{
    es_plan_table(p, "scores", run->one[0].sel.n, 2);
}

/* Example requests of outliers (es_examples). */
static const es_example_case ex_outliers_cases[] = {
    {"threshold", "threshold=1", "threshold=2", "threshold=0"},
    {0}};
static const es_example_table ex_outliers_tables[] = {
    {"", "scores"},
    {0}};
static const es_examples ex_outliers = {
    .query = "rows=0:64",
    .cases = ex_outliers_cases,
    .light = "", .heavy = "",
    .tables = ex_outliers_tables,
};
static const es_analysis outliers = {
    .examples = &ex_outliers,
    .name = "outliers", .route = "/v1/models/{model}/matrices/{matrix}/outliers", .shape = ES_SHAPE_ONE,
    .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE, .comparable = true,
    .params_size = sizeof(outliers_params), .spec = outliers_spec, .fill = fill_outliers,
    .cost = cost_outliers, .plan = plan_outliers, .tables = (const char *const[]){"scores", NULL},
    .cost_params = "rows"};

/* ---------------------------------------------------------------- Toeplitz */

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
static const es_analysis toeplitz = {
    .examples = &ex_toeplitz,
    .name = "toeplitz", .route = "/v1/models/{model}/matrices/{matrix}/toeplitz", .shape = ES_SHAPE_ONE,
    .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE, .comparable = true,
    .params_size = sizeof(toeplitz_params), .spec = toeplitz_spec, .fill = fill_toeplitz, .cost = cost_gram,
    .plan = plan_toeplitz,
    .tables = (const char *const[]){"diagonals", NULL},
    .cost_params = "rows"};

/* ---------------------------------------------------------------- averaging summary */

typedef struct averaging_params {
    size_t g, order;
} averaging_params;

static const es_pspec averaging_spec[] = {
    {.name = "g", .kind = ES_P_SIZE, .required = true, .min = 1, .bound = ES_BOUND_ITEMS,
     .offset = ES_FIELD(averaging_params, g)},
    {.name = "average_order", .kind = ES_P_CHOICE, .choices = es_average_orders, .def = 0,
     .offset = ES_FIELD(averaging_params, order)},
    {0}};

/* Per-row displacements and their summary, absolute and relative to the radius. */
static void render_averaging(es_jctx *jc, json_t *root, const es_averaging *a)
{
    json_object_set_new(root, "rows", es_jsizes(a->rows, a->n));
    json_object_set_new(root, "displacement", es_jnums(jc, "displacement", a->disp, a->n));
    json_object_set_new(root, "mean_displacement", es_jnum(jc, "mean_displacement", a->mean_disp));
    json_object_set_new(root, "max_displacement", es_jnum(jc, "max_displacement", a->max_disp));
    json_object_set_new(root, "max_row", json_integer((json_int_t)a->max_row));
    json_object_set_new(root, "radius", es_jnum(jc, "radius", a->radius));
    json_object_set_new(root, "relative_mean", es_jnum(jc, "relative_mean", a->rel_mean));
    json_object_set_new(root, "relative_max", es_jnum(jc, "relative_max", a->rel_max));
}

/* How far averaging in groups of g moves the selected rows in the top-3 PCA space
 * of the original (columns-centred on the same rows). Fails like
 * es_app_averaged or es_averaging_compute. */
static int fill_averaging(const es_run *run, es_out *out, es_err *err)
{
    const averaging_params *p = run->params;
    const es_one *one = &run->one[0];
    es_matrix *avg = NULL;
    es_averaging *a = NULL;
    int rc = -1;
    /* select_then_average: the selected rows in groups from the first one; else the whole matrix */
    if (es_app_averaged(run->app, one->m, p->order == 0 ? &one->sel : NULL, p->g, "g", &avg, err) < 0 ||
        es_averaging_compute(run->svd[0], one->m, avg, &a, err) < 0)
        goto done;
    json_t *input = es_out_input(out);
    json_object_set_new(input, "k", json_integer((json_int_t)a->k));
    json_object_set_new(input, "averaged_sha256", json_string(avg->prov.sha256));
    render_averaging(&out->jc, out->root, a);
    es_out_column(out, "displacement", "row", "distance in the top-k PCA space", a->disp, a->rows, a->n);
    rc = 0;
done:
    es_averaging_free(a);
    es_matrix_release(avg);
    return rc;
}

/* select_then_average groups the selected rows: g at most their number (as
 * es_app_averaged checks), so the 400 comes before the gate. ES_E_PARAM "g". */
static int validate_averaging(const es_run *run, es_err *err)
{
    const averaging_params *p = run->params;
    const es_one *one = &run->one[0];
    return p->order == 0 ? es_group_size_check(one->m, true, one->sel.n, p->g, "g", err) : 0;
}

/* The averaged copy (a pass to read, one to write) and both projected on the top 3. */
static void cost_averaging(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)run;
    es_cost_pass(c, n, d);
    es_cost_pass(c, n, d);
    es_cost_project(c, n, d, 3);
    es_cost_project(c, n, d, 3);
    es_cost_output(c, 2.0 * (double)n);
}

/* One displacement per selected row. */
static void plan_averaging(const es_run *run, es_out_plan *p)
{
    es_plan_table(p, "displacement", run->one[0].sel.n, 1);
}

/* Example requests of averaging (es_examples). */
static const es_example_case ex_averaging_cases[] = {
    {"g", "g=4", "g=8", "g=0"},
    {"average_order", "rows=2:66&average_order=select_then_average", "rows=2:66&average_order=average_then_select", "average_order=x"},
    {0}};
static const es_example_table ex_averaging_tables[] = {
    {"g=4&rows=0:64", "displacement"},
    {0}};
static const es_examples ex_averaging = {
    .query = "rows=0:64&g=2",
    .cases = ex_averaging_cases,
    .light = "g=2", .heavy = "g=2",
    .tables = ex_averaging_tables,
};
static const es_analysis averaging = {
    .examples = &ex_averaging,
    .name = "averaging", .route = "/v1/models/{model}/matrices/{matrix}/averaging", .shape = ES_SHAPE_ONE,
    .decomposes = true, .def_center = ES_CENTER_COLUMNS, /* the PCA space of the original */
    .params_size = sizeof(averaging_params), .spec = averaging_spec, .fill = fill_averaging,
    .validate = validate_averaging, .cost = cost_averaging, .plan = plan_averaging,
    .tables = (const char *const[]){"displacement", NULL},
    .cost_params = "rows"};

/* ---------------------------------------------------------------- alignment */


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
static const es_analysis alignment = {
    .examples = &ex_alignment,
    .name = "alignment", .route = "/v1/alignment", .shape = ES_SHAPE_PAIR, .names = {"w", "r"},
    .decomposes = true, .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE,
    .params_size = sizeof(alignment_params), .spec = alignment_spec, .fill = fill_alignment,
    .tables = (const char *const[]){"capture", "top_mean", "overlap", NULL},
    .cost = cost_alignment, .plan = plan_alignment, .cost_params = "w_rows, r_rows, k, kw, kr, bins"};

/* ---------------------------------------------------------------- the rows themselves */

typedef struct rows_params {
    char unused; /* no parameters of its own beyond the selection */
} rows_params;

static const es_pspec rows_spec[] = {{0}};

/* The selected items in model orientation (items x d), float64: "rows" (their
 * indices), "values" and, when the matrix has labels, "labels" ({NAME: [the
 * selected rows' cells]}) in JSON; the table "values" for CSV and NPY. */
static int fill_rows(const es_run *run, es_out *out, es_err *err)
{
    const es_one *o = &run->one[0];
    size_t d = es_matrix_dim(o->m);
    if (es_checkpoint(err) < 0)
        return -1;
    double *v = es_matrix_items_copy(o->m, o->sel.idx, o->sel.n);
    json_object_set_new(out->root, "rows", es_jsizes(o->sel.idx, o->sel.n));
    json_object_set_new(out->root, "values", es_jgrid(&out->jc, "values", v, o->sel.n, d));
    es_table *t = es_out_table(out, "values", "row", "matrix entry", o->sel.n, d);
    es_table_columns(t, NULL, "d", 0);
    for (size_t i = 0; i < o->sel.n; i++)
        t->index_values[i] = (double)o->sel.idx[i];
    memcpy(t->values, v, o->sel.n * d * sizeof(double));
    free(v);
    if (run->labels)
        json_object_set_new(out->root, "labels", es_labels_rows_json(run->labels, o->sel.idx, o->sel.n));
    return 0;
}

static void cost_rows(const es_run *run, size_t n, size_t d, es_cost *c)
{
    (void)run;
    es_cost_pass(c, n, d);
    es_cost_output(c, (double)n * (double)(d + 1));
}

static void plan_rows(const es_run *run, es_out_plan *p)
{
    es_plan_table(p, "values", run->one[0].sel.n, es_matrix_dim(run->one[0].m));
}

/* Example requests of rows (es_examples). */
static const es_example_table ex_rows_tables[] = {
    {"rows=0:40", "values"},
    {0}};
static const es_examples ex_rows = {
    .query = "rows=0:64",
    .light = "", .heavy = "",
    .tables = ex_rows_tables,
};
static const es_analysis rows = {
    .examples = &ex_rows,
    .name = "rows", .route = "/v1/models/{model}/matrices/{matrix}/rows", .shape = ES_SHAPE_ONE,
    .average_param = true, .head_param = true, .with_labels = true, .def_center = ES_CENTER_NONE,
    .params_size = sizeof(rows_params),
    .spec = rows_spec, .fill = fill_rows, .cost = cost_rows, .plan = plan_rows, .tables = (const char *const[]){"values", NULL},
    .cost_params = "rows"};

/* ---------------------------------------------------------------- irregular endpoints (api_positional.c) */

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
static const es_analysis alignment_layers = {
    .examples = &ex_alignment_layers,
    .name = "alignment/layers", .route = "/v1/alignment/layers", .params_size = sizeof(es_layers_params),
    .names = {"r"}, .center_param = true, .average_param = true, .head_param = true, /* r_rows ... r_head */
    .spec = es_layers_spec, .handler = es_api_alignment_layers, .tables = (const char *const[]){"top_mean", NULL},
    .cost_params = "r_rows, k and the layers of model"};
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
static const es_analysis attention = {
    .examples = &ex_attention,
    .name = "attention", .route = "/v1/attention", .params_size = sizeof(es_attention_params),
    .spec = es_attention_spec, .handler = es_api_attention, .tables = (const char *const[]){"heads", NULL},
    .cost_params = "queries"};
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
static const es_analysis attention_ranking = {
    .examples = &ex_attention_ranking,
    .name = "attention/ranking", .route = "/v1/attention/ranking", .params_size = sizeof(es_attention_params),
    .spec = es_ranking_spec, .handler = es_api_attention_ranking, .tables = (const char *const[]){"heads", NULL},
    .cost_params = "queries and the layers of model"};
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
static const es_analysis attention_pattern = {
    .examples = &ex_attention_pattern,
    .name = "attention/pattern", .route = "/v1/attention/pattern", .params_size = sizeof(es_attention_params),
    .spec = es_pattern_spec, .handler = es_api_attention_pattern, .tables = (const char *const[]){"values", NULL},
    .cost_params = "queries, bins"};
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
static const es_analysis rope_relative = {
    .examples = &ex_rope_relative,
    .name = "rope/relative", .route = "/v1/rope/relative", .params_size = sizeof(es_rope_params),
    .spec = es_rope_spec, .handler = es_api_rope_relative, .tables = (const char *const[]){"diagonals", NULL},
    .cost_params = "matrix (its positions)"};
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
    {"matrices=gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe&analysis=periodicity&rows=1:512&axis=columns", "columns"},
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

const es_analysis *const es_analyses[] = {
    &rows, &pca, &spectrum, &cosine, &neighbors, &umap, &vectors, &capture, &overlap, &periodicity, &outliers, &toeplitz, &averaging,
    &alignment, &alignment_layers, &attention, &attention_ranking, &attention_pattern, &rope_relative, &compare,
    NULL};

/* The analysis named name, or NULL. */
const es_analysis *es_analysis_find(const char *name)
{
    for (size_t i = 0; es_analyses[i]; i++)
        if (strcmp(es_analyses[i]->name, name) == 0)
            return es_analyses[i];
    return NULL;
}
