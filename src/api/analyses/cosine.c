/* The analysis cosine, GET /v1/models/{model}/matrices/{matrix}/cosine: its descriptor, parameters,
 * computation, cost and example requests. One file per analysis; the table
 * lists the files present at build time (docs/development.md, "Adding an analysis"). */
#include "common.h"

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
    if (p->mode == MODE_OFFSET)
        es_cost_cosine_offset(c, run->one[0].sel.idx, n, d);
    else
        es_cost_cosine(c, n, d, false);
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
ES_DESCRIPTOR(cosine, 40) = {
    .examples = &ex_cosine,
    .name = "cosine", .route = "/v1/models/{model}/matrices/{matrix}/cosine", .shape = ES_SHAPE_ONE,
    .center_param = true, .average_param = true, .head_param = true, .def_center = ES_CENTER_NONE,
    .comparable = true, .params_size = sizeof(cosine_params),
    .spec = cosine_spec, .fill = fill_cosine, .validate = validate_cosine, .produces = produces_cosine,
    .tables = (const char *const[]){"similarity", "offsets", "values", NULL},
    .cost = cost_cosine, .plan = plan_cosine, .cost_params = "rows, mode, bins"};
