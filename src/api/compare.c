/* /v1/compare: one analysis of the table run on several matrices side by side,
 * its tables stacked with a "matrix" column. Its descriptor is the table's own
 * (analyses.c: it gathers the comparable analyses, .gathers); this is its
 * hand-written handler: it parses the list of matrices and the per-matrix
 * parameters, runs the chosen analysis' generic parse for each (es_run_parse),
 * keys the request by each matrix's es_run_key, and answers through the gate
 * helper every analysis uses (es_gate_answer) with a fill function returning
 * the typed result (es_out) that the generic renderers turn into JSON, column
 * JSON, CSV or NPY. */
#include "embedscope/cost.h"
#include "embedscope/descriptor.h"
#include "embedscope/format.h"
#include "embedscope/params.h"
#include "embedscope/render.h"
#include "embedscope/route.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* At most this many matrices in one /v1/compare request. */
#define COMPARE_MAX 8

/* compare's own parameters; it also accepts every parameter of the comparable
 * analyses of its table (.gathers), checked against the chosen one here. */
const es_pspec es_compare_spec[] = {
    {.name = "matrices", .kind = ES_P_TEXT, .required = true},
    {.name = "analysis", .kind = ES_P_TEXT, .required = true},
    {.name = "rows", .kind = ES_P_TEXT},
    {.name = "center", .kind = ES_P_TEXT},
    {.name = "average", .kind = ES_P_TEXT},
    {0}};

/* Parameters given one value per matrix (or one for all), separated by
 * PER_MATRIX_SEP: a comma belongs to the value (a union of rows). */
static const char *const per_matrix[] = {"rows", "center", "average", NULL};
#define PER_MATRIX_SEP ';'

/* Is name a parameter of analysis a's own spec? */
static bool in_spec(const es_analysis *a, const char *name)
{
    for (const es_pspec *p = a->spec; p->name; p++)
        if (strcmp(p->name, name) == 0)
            return true;
    return false;
}

/* The comparable analysis of self's table (self: compare's entry) named by
 * "analysis": ES_E_PARAM naming it (listing the comparable ones) if unknown or
 * not comparable. */
static int compare_analysis(const es_analysis *self, const es_query *q, const es_analysis **out, es_err *err)
{
    const char *name = es_query_get(q, "analysis");
    for (const es_analysis *const *c = self->gathers; name && *c; c++)
        if ((*c)->comparable && strcmp((*c)->name, name) == 0) {
            *out = *c;
            return 0;
        }
    es_buf names;
    es_buf_init(&names, 64);
    for (const es_analysis *const *c = self->gathers; *c; c++)
        if ((*c)->comparable)
            es_buf_printf(&names, "%s%s", names.len ? ", " : "", (*c)->name);
    int rc = es_fail(err, ES_E_PARAM, "analysis", "analysis='%.64s': expected one of: %s", name ? name : "",
                     names.s);
    free(names.s);
    return rc;
}

/* Is name one of compare's (self's) rendering parameters (format, orient, table)? */
static bool renders(const es_analysis *self, const char *name)
{
    const char *names[4];
    size_t n = es_render_params(self, names, 0, 4);
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

/* Does analysis a (compare's choice; self: compare's entry) take parameter
 * key? Another comparable analysis' parameter given its documented default
 * is not a's: it is ignored (compare_check, compare_subquery). */
static bool compare_own(const es_analysis *self, const es_analysis *a, const char *key)
{
    return in_spec(a, key) || in_spec(self, key) || renders(self, key) || es_compare_reference_param(a, key);
}

/* See route.h: set by describe.c. */
bool (*es_compare_is_default)(const es_analysis *a, const char *name, const char *value);

/* Refuse a parameter of another comparable analysis that the chosen one does
 * not take, center for analyses without centring and a table it does not
 * produce (self: compare's entry). ES_E_PARAM naming the parameter. */
static int compare_check(const es_analysis *self, const es_query *q, const es_analysis *a, es_err *err)
{
    for (size_t i = 0; i < q->n; i++) {
        const char *key = q->items[i].key;
        if (!compare_own(self, a, key) && !(es_compare_is_default && es_compare_is_default(self, key, q->items[i].value)))
            return es_fail(err, ES_E_PARAM, key, "parameter '%s' does not apply to analysis=%s (or is its "
                           "documented default, ignored)", key, a->name);
    }
    if (!a->center_param && es_query_get(q, "center"))
        return es_fail(err, ES_E_PARAM, "center", "analysis=%s takes no centring", a->name);
    const char *table = es_query_get(q, "table");
    if (table && !es_analysis_has_table(a, table))
        return es_fail(err, ES_E_PARAM, "table", "table='%.64s' is not a table of analysis=%s", table, a->name);
    return 0;
}

/* The query of matrix i of n: shared parameters copied, per-matrix lists split
 * at ';' (one value for all, or n values; an empty value means the default).
 * For a pair analysis a the matrix is its second side: `b` (a->names[1]) names
 * it and the per-matrix values become b_rows, b_center, b_average; the
 * reference side's parameters (a, a_rows, ...) are shared. */
static int compare_subquery(const es_analysis *self, const es_analysis *a, const es_query *q, const char *id,
                            size_t i, size_t n, es_query *sub, es_err *err)
{
    es_query_init(sub);
    bool pair = a->shape == ES_SHAPE_PAIR;
    if (pair)
        es_query_add(sub, a->names[1], id);
    for (size_t j = 0; j < q->n; j++) {
        const es_query_item *it = &q->items[j];
        if (strcmp(it->key, "matrices") == 0 || strcmp(it->key, "analysis") == 0 || !compare_own(self, a, it->key))
            continue; /* not a's: a documented default, ignored (compare_check) */
        bool listed = false;
        for (size_t p = 0; per_matrix[p]; p++)
            listed = listed || strcmp(it->key, per_matrix[p]) == 0;
        if (!listed) {
            es_query_add(sub, it->key, it->value);
            continue;
        }
        size_t count;
        char **items = es_split_on(it->value, PER_MATRIX_SEP, &count);
        if (count != 1 && count != n) {
            es_strv_free(items);
            es_query_free(sub);
            return es_fail(err, ES_E_PARAM, it->key, "%s lists %zu values separated by ';'; give one for all "
                           "matrices or one per matrix (%zu)", it->key, count, n);
        }
        const char *value = items[count == 1 ? 0 : i];
        if (*value && pair) {
            char *key = es_asprintf("%s_%s", a->names[1], it->key);
            es_query_add(sub, key, value);
            free(key);
        } else if (*value) {
            es_query_add(sub, it->key, value);
        }
        es_strv_free(items);
    }
    return 0;
}

/* Prefix err's message with which matrix of the comparison failed. */
static void blame_matrix(es_err *err, size_t i, const char *id)
{
    if (!err)
        return;
    char *msg = es_asprintf("matrices[%zu] (%s): %s", i, id, err->message);
    snprintf(err->message, sizeof err->message, "%s", msg);
    free(msg);
}

/* The matrices of the comparison (ES_E_PARAM / ES_E_NOTFOUND naming "matrices"). */
static int compare_matrices(es_ctx *cx, const es_matrix **m, size_t *n, es_err *err)
{
    const char *text = es_query_get(cx->query, "matrices");
    if (!text)
        return es_fail(err, ES_E_PARAM, "matrices", "missing required parameter 'matrices' (model/matrix,...)");
    char **ids = es_split_commas(text, n);
    int rc = 0;
    if (*n > COMPARE_MAX)
        rc = es_fail(err, ES_E_PARAM, "matrices", "matrices lists %zu matrices, at most %d", *n, COMPARE_MAX);
    for (size_t i = 0; rc == 0 && i < *n; i++)
        rc = es_catalogue_lookup(cx->reg, ids[i], "matrices", &m[i], err);
    es_strv_free(ids);
    return rc;
}

/* A comparison: the chosen analysis and, per matrix, its sub-query and parsed run. */
typedef struct compare_req {
    const es_analysis *a;
    size_t n;
    const es_matrix *m[COMPARE_MAX + 1];
    es_query sub[COMPARE_MAX];
    es_run run[COMPARE_MAX];
} compare_req;

/* Release the sub-queries and runs parsed so far. Never fails. */
static void compare_free(compare_req *c)
{
    for (size_t i = 0; i < c->n; i++) {
        es_run_free(&c->run[i]);
        es_query_free(&c->sub[i]);
    }
}

/* Parse every matrix's request before the gate (so a bad one is a 400 from the
 * HTTP thread) and add their estimated costs to cx->cost. Fails like
 * compare_subquery / es_run_parse, the message saying which matrix; release
 * with compare_free also after a failure. */
static int compare_parse(es_ctx *cx, compare_req *c, size_t n, es_err *err)
{
    for (c->n = 0; c->n < n; c->n++) {
        size_t i = c->n;
        c->run[i] = (es_run){0};
        es_query_init(&c->sub[i]);
        const es_matrix *m = c->a->shape == ES_SHAPE_PAIR ? NULL : c->m[i]; /* a pair reads a and b itself */
        if (compare_subquery(cx->analysis, c->a, cx->query, c->m[i]->id, i, n, &c->sub[i], err) < 0 ||
            es_run_parse(cx->app, cx->reg, c->a, &c->sub[i], m, &c->run[i], err) < 0 ||
            es_run_average(&c->run[i], !cx->may_defer, err) < 0) {
            blame_matrix(err, i, c->m[i]->id);
            c->n++; /* release this one too */
            return -1;
        }
        es_cost_run(&c->run[i], &c->run[i].cost);
        es_cost_add(&cx->cost, &c->run[i].cost);
    }
    return 0;
}

/* The canonical key of a comparison: every matrix's es_run_key (its data,
 * selection and every parsed parameter of the analysis), in order; NULL while
 * one is (an averaged copy not built yet). Caller frees. */
static char *compare_key(const compare_req *c)
{
    es_buf b;
    es_buf_init(&b, 512);
    es_buf_printf(&b, "n=%zu", c->n);
    for (size_t i = 0; i < c->n; i++) {
        char *key = es_run_key(&c->run[i], &c->sub[i]);
        if (!key) { /* an averaged copy not built yet */
            free(b.s);
            return NULL;
        }
        es_buf_printf(&b, ";%zu=%s", i, key);
        free(key);
    }
    return b.s;
}

/* Table j of every matrix's result stacked into one table of out: the
 * analysis' own index (component, row, offset), the first column "matrix" (the
 * position in `matrices`, so NPY holds it too), then the analysis' columns.
 * ES_E_INCOMPATIBLE naming "matrices" if the results' tables do not line up. */
static int stack_table(es_out *out, const es_out *one, size_t n, size_t j, es_err *err)
{
    const es_table *first = &one[0].tables[j];
    size_t rows = 0;
    for (size_t i = 0; i < n; i++) {
        const es_table *t = j < one[i].n_tables ? &one[i].tables[j] : NULL;
        if (!t || strcmp(t->name, first->name) != 0 || t->cols != first->cols)
            return es_fail(err, ES_E_INCOMPATIBLE, "matrices", "matrices[%zu]'s table '%s' does not line up with "
                           "matrices[0]'s", i, first->name);
        rows += t->rows;
    }
    es_table *s = es_out_table(out, first->name, first->index, first->units, rows, first->cols + 1);
    s->col_names[0] = es_strdup("matrix");
    for (size_t k = 0; k < first->cols; k++) {
        s->col_names[k + 1] = es_strdup(first->col_names[k]);
        s->labels[k + 1] = first->labels[k];
    }
    size_t r = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t row = 0; row < one[i].tables[j].rows; row++, r++) {
            const es_table *t = &one[i].tables[j];
            double *to = s->values + r * s->cols;
            s->index_values[r] = t->index_values[row];
            to[0] = (double)i;
            memcpy(to + 1, t->values + row * t->cols, t->cols * sizeof(double));
        }
    return 0;
}

/* The comparison's result: {"input": {"analysis", "matrices"}, "results": [each
 * matrix's document], "warnings"} and the analysis' tables stacked over the
 * matrices. Fails like es_run_fill (the message saying which matrix) or stack_table. */
static int compare_fill(void *arg, es_out *out, es_err *err)
{
    compare_req *c = arg;
    es_out one[COMPARE_MAX];
    memset(one, 0, sizeof one);
    for (size_t i = 0; i < c->n; i++)
        one[i].tables_only = one[i].jc.checks_only = out->tables_only; /* a table reply needs no matrix's document in full */
    json_t *results = json_array(), *ids = json_array();
    int rc = 0;
    out->root = json_pack("{s:o}", "input", json_object());
    json_object_set_new(out->root, "results", results);
    for (size_t i = 0; i < c->n && rc == 0; i++) {
        json_array_append_new(ids, json_string(c->m[i]->id));
        rc = es_run_fill(&c->run[i], &c->sub[i], &one[i], err);
        if (rc < 0) {
            blame_matrix(err, i, c->m[i]->id);
            break;
        }
        if (one[i].jc.bad_field && !out->jc.bad_field)
            out->jc.bad_field = one[i].jc.bad_field;
        json_array_append(results, one[i].root);
    }
    for (size_t j = 0; rc == 0 && j < one[0].n_tables; j++)
        rc = stack_table(out, one, c->n, j, err);
    for (size_t i = 0; i < c->n; i++)
        es_out_free(&one[i]);
    json_object_set_new(es_out_input(out), "analysis", json_string(c->a->name));
    json_object_set_new(es_out_input(out), "matrices", ids);
    json_object_set_new(out->root, "warnings", es_axis_warnings(NULL, c->m, c->n));
    return rc;
}

/* The stacked tables' shapes (stack_table: every matrix's rows, one more
 * column) when every matrix's run plans its tables and they line up; else
 * nothing is planned (checked once rendered). Never fails. */
static void compare_plan(const compare_req *c, es_out_plan *plan)
{
    es_out_plan one[COMPARE_MAX];
    for (size_t i = 0; i < c->n; i++) {
        one[i] = (es_out_plan){0};
        if (!c->a->plan)
            return;
        c->a->plan(&c->run[i], &one[i]);
        if (one[i].n_tables == 0 || one[i].n_tables != one[0].n_tables)
            return;
    }
    for (size_t j = 0; j < one[0].n_tables; j++) {
        size_t rows = 0;
        bool exact = true;
        double json_row = 0;
        for (size_t i = 0; i < c->n; i++) {
            if (strcmp(one[i].tables[j].name, one[0].tables[j].name) != 0 ||
                one[i].tables[j].cols != one[0].tables[j].cols) {
                plan->n_tables = 0;
                return;
            }
            rows += one[i].tables[j].rows;
            exact = exact && !one[i].tables[j].at_most;
            json_row = fmax(json_row, one[i].tables[j].json_row);
        }
        es_plan_table_bounded(plan, one[0].tables[j].name, rows, exact, one[0].tables[j].cols + 1);
        es_plan_json_row(plan, json_row);
    }
}

/* A comparison as parsed by the HTTP thread, handed over with its deferral (es_parsed). */
typedef struct compare_parsed {
    es_parsed base;
    compare_req c;
} compare_parsed;

static void compare_parsed_free(es_parsed *p)
{
    compare_parsed *cp = (compare_parsed *)p;
    compare_free(&cp->c);
    free(cp);
}

/* The compute side of a parsed comparison: the averaged copies, then the gate and the answer. */
static int compare_resume(es_ctx *cx, es_parsed *p, es_err *err)
{
    compare_req *c = &((compare_parsed *)p)->c;
    for (size_t i = 0; i < c->n; i++)
        if (es_run_average(&c->run[i], true, err) < 0) {
            blame_matrix(err, i, c->m[i]->id);
            return -1;
        }
    char *key = es_gate_keyed(cx) ? es_strdup("") : compare_key(c); /* keyed by the HTTP thread */
    return es_gate_answer(cx, key, compare_fill, c, err);
}

/* One analysis over several matrices, each on its own rows / centring / averaging. */
int es_api_compare(es_ctx *cx, es_err *err)
{
    if (!es_query_get(cx->query, "analysis"))
        return es_fail(err, ES_E_PARAM, "analysis", "missing required parameter 'analysis'");
    compare_parsed *cp = es_calloc(1, sizeof *cp);
    cp->base = (es_parsed){compare_resume, compare_parsed_free};
    compare_req *c = &cp->c;
    size_t n;
    int rc = -1;
    const es_analysis *self = cx->analysis; /* compare's entry: its route's (es_route_find) */
    if (compare_analysis(self, cx->query, &c->a, err) < 0 || compare_check(self, cx->query, c->a, err) < 0 ||
        compare_matrices(cx, c->m, &n, err) < 0 || compare_parse(cx, c, n, err) < 0)
        goto done;
    if (es_check_memory(cx, err) == 0) { /* memory first, as for one matrix: it refuses whatever the format */
        es_out_plan plan = {0};
        compare_plan(c, &plan);
        if (es_check_planned_size(cx, &plan, err) < 0)
            goto done;
    }
    rc = es_gate_answer(cx, compare_key(c), compare_fill, c, err);
    if (rc == 0 && es_parsed_hand_over(cx, &cp->base))
        cp = NULL;
done:
    if (cp)
        compare_parsed_free(&cp->base);
    return rc;
}
