/* Typed parameter specs (see descriptor.h, "the analysis table"): the allowed names,
 * parsing and validation into a params struct by field offset, the canonical
 * key and the "input" echo, all derived from one es_pspec list per analysis,
 * so that no parameter can be parsed without being keyed and echoed. */
#include "embedscope/descriptor.h"
#include "embedscope/params.h"
#include "embedscope/render.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The configured limits a spec may name. */
size_t es_limit_value(const es_limits *lim, const char *name)
{
    if (strcmp(name, "max_k") == 0)
        return lim->max_k;
    if (strcmp(name, "max_bins") == 0)
        return lim->max_bins;
    if (strcmp(name, "max_cells") == 0)
        return lim->max_cells;
    if (strcmp(name, "max_rows") == 0)
        return lim->max_rows ? lim->max_rows : SIZE_MAX; /* 0: no limit beyond the matrix */
    return SIZE_MAX;
}

/* See descriptor.h. */
int es_check_cells(const es_limits *lim, size_t rows, size_t cols, es_err *err)
{
    size_t cells;
    if (es_mul_size(rows, cols, &cells) == 0 && cells <= lim->max_cells)
        return 0;
    return es_fail(err, ES_E_LIMIT, "max_cells", "bins=0 asks for the full %zu x %zu grid, more cells than the "
                   "configured limit max_cells=%zu; ask for fewer rows or bins >= 1", rows, cols, lim->max_cells);
}

/* The choices of <prefix>average_order and <prefix>average_mode (descriptor.h). */
const char *const es_average_orders[] = {"select_then_average", "average_then_select", NULL};
const char *const es_average_modes[] = {"rows", "groups", NULL};

/* The selection parameters of one matrix, unprefixed, in the order a route
 * accepts them (es_one_parse parses them; center's default is the analysis'
 * def_center). A pair analysis takes them once per operand, prefixed with the
 * operand's name and "_" (a_rows, w_center, ...). */
const es_pspec es_selection_spec[] = {
    {.name = "rows", .kind = ES_P_TEXT},
    {.name = "exclude", .kind = ES_P_TEXT},
    {.name = "center", .kind = ES_P_CHOICE, .choices = es_centering_names},
    {.name = "average", .kind = ES_P_SIZE, .min = 1, .bound = ES_BOUND_ITEMS},
    {.name = "average_order", .kind = ES_P_CHOICE, .choices = es_average_orders},
    {.name = "average_mode", .kind = ES_P_CHOICE, .choices = es_average_modes},
    {.name = "head", .kind = ES_P_SIZE, .preset = true /* absent: the whole matrix */},
    {0}};
#define N_SELECTION (sizeof es_selection_spec / sizeof *es_selection_spec - 1)
enum { SEL_CENTER = 2, SEL_AVERAGE = 3, SEL_AVERAGE_MODE = 5, SEL_HEAD = 6 };

/* The prefixed selection names of each operand a pair analysis declares,
 * made the first time it is asked for and kept for the process (the names
 * outlive every request); "" is the unprefixed path's matrix. Readers
 * go lock-free over the published entries; an addition is filled in before
 * the count that publishes it. */
#define MAX_OPERANDS 16
static struct operand {
    char name[17]; /* "" for the path's matrix */
    char names[N_SELECTION][48];
} operands[MAX_OPERANDS];
static _Atomic size_t n_operands;
static pthread_mutex_t operands_lock = PTHREAD_MUTEX_INITIALIZER;

/* The entry of operand name among the first n, or NULL. */
static const struct operand *operand_find(const char *name, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(operands[i].name, name) == 0)
            return &operands[i];
    return NULL;
}

/* The selection names of operand `name` (NULL: the path's matrix). Aborts past
 * MAX_OPERANDS operands or for a name longer than 16 bytes: a table that
 * declares them is a programming error, never a route cut short. */
static const struct operand *operand(const char *name)
{
    name = name ? name : "";
    const struct operand *o = operand_find(name, atomic_load(&n_operands));
    if (o)
        return o;
    pthread_mutex_lock(&operands_lock);
    size_t n = atomic_load(&n_operands);
    o = operand_find(name, n);
    if (!o) {
        if (n == MAX_OPERANDS || strlen(name) >= sizeof operands[n].name) {
            fprintf(stderr, "embedscope: operand '%s' of the analysis table: more than %d or too long\n", name,
                    MAX_OPERANDS);
            abort();
        }
        struct operand *add = &operands[n];
        snprintf(add->name, sizeof add->name, "%s", name);
        for (size_t j = 0; j < N_SELECTION; j++)
            snprintf(add->names[j], sizeof add->names[j], "%s%s%s", name, *name ? "_" : "", es_selection_spec[j].name);
        atomic_store(&n_operands, n + 1);
        o = add;
    }
    pthread_mutex_unlock(&operands_lock);
    return o;
}

/* Does analysis a take selection parameter j? */
bool es_selection_applies(const es_analysis *a, size_t j)
{
    return !((j == SEL_CENTER && !a->center_param) || (j >= SEL_AVERAGE && j <= SEL_AVERAGE_MODE && !a->average_param) ||
             (j == SEL_HEAD && !a->head_param));
}

/* Append the selection parameters of operand `matrix` (NULL: the path's), and its name when with_name. */
static size_t add_selection(const es_analysis *a, const char *matrix, bool with_name, const char **names, size_t n,
                            size_t cap)
{
    const struct operand *o = operand(matrix);
    if (with_name && n < cap)
        names[n++] = matrix;
    for (size_t j = 0; j < N_SELECTION && n < cap; j++)
        if (es_selection_applies(a, j))
            names[n++] = o->names[j];
    return n;
}

/* Every accepted name; see descriptor.h. */
size_t es_spec_allowed(const es_analysis *a, const char **names, size_t cap)
{
    size_t n = 0;
    if (a->shape == ES_SHAPE_ONE)
        n = add_selection(a, NULL, false, names, n, cap - 1);
    else if (a->shape == ES_SHAPE_PAIR)
        for (int i = 0; i < 2; i++)
            n = add_selection(a, a->names[i], true, names, n, cap - 1);
    for (const es_pspec *p = a->spec; p && p->name && n < cap - 1; p++) {
        names[n++] = p->name;
        if (a->shape == ES_SHAPE_NONE && a->names[0] && strcmp(p->name, a->names[0]) == 0)
            n = add_selection(a, a->names[0], false, names, n, cap - 1); /* a handler's own operand */
    }
    names[n] = NULL;
    return n;
}

/* See descriptor.h. */
bool es_compare_reference_param(const es_analysis *a, const char *name)
{
    if (a->shape != ES_SHAPE_PAIR)
        return false;
    size_t len = strlen(a->names[0]);
    return strncmp(name, a->names[0], len) == 0 && (name[len] == '\0' || name[len] == '_');
}

/* The spec entry named name, or NULL. */
static const es_pspec *spec_find(const es_pspec *spec, const char *name)
{
    for (const es_pspec *p = spec; p->name; p++)
        if (strcmp(p->name, name) == 0)
            return p;
    return NULL;
}

static size_t *size_field(void *params, size_t offset) { return (size_t *)((char *)params + offset); }
static double *real_field(void *params, size_t offset) { return (double *)((char *)params + offset); }
static size_t size_at(const void *params, size_t offset) { return *(const size_t *)((const char *)params + offset); }
static double real_at(const void *params, size_t offset) { return *(const double *)((const char *)params + offset); }

/* Does p apply under the already-parsed values (its `when` choice)? */
bool es_spec_applies(const es_pspec *spec, const es_pspec *p, const void *params)
{
    if (!p->when)
        return true;
    const es_pspec *w = spec_find(spec, p->when);
    return w && strcmp(w->choices[size_at(params, w->offset)], p->when_is) == 0;
}

/* The request-dependent upper bound of p (SIZE_MAX: none). */
static size_t dynamic_bound(const es_pspec *p, const es_pctx *pc, const void *params)
{
    const es_matrix *m = pc->m[p->side];
    switch (p->bound) {
    case ES_BOUND_RANK:
        return pc->rank[p->side];
    case ES_BOUND_ITEMS:
        return m ? es_matrix_items(m) : SIZE_MAX;
    case ES_BOUND_LAST_ITEM:
        return m && es_matrix_items(m) ? es_matrix_items(m) - 1 : 0;
    case ES_BOUND_DIM:
        return m ? es_matrix_dim(m) : SIZE_MAX;
    case ES_BOUND_FIELD:
        return size_at(params, p->bound_field) ? size_at(params, p->bound_field) - 1 : 0;
    case ES_BOUND_FIXED:
        break;
    }
    return SIZE_MAX;
}

/* A SIZE parameter: the range [min, max], then the configured limit (ES_E_LIMIT
 * naming it), then the request-dependent bound (ES_E_PARAM naming p). The
 * default is lowered to the limit, and to the bound with clamp_default. */
static int parse_size(const es_pspec *p, const es_query *q, const es_pctx *pc, void *params, es_err *err)
{
    if (p->preset && !es_query_get(q, p->name))
        return 0;
    size_t limit = p->limit ? es_limit_value(pc->lim, p->limit) : SIZE_MAX;
    size_t fixed = p->max > 0 && p->max < (double)SIZE_MAX ? (size_t)p->max : SIZE_MAX;
    size_t max = limit < fixed ? limit : fixed;
    const char *limit_name = p->limit && limit <= fixed ? p->limit : NULL; /* which bound binds */
    size_t bound = dynamic_bound(p, pc, params), def = p->def >= (double)SIZE_MAX ? SIZE_MAX : (size_t)p->def;
    def = def < max ? def : max;
    if (p->clamp_default && bound < def)
        def = bound;
    size_t v;
    if (es_param_size(q, p->name, def, (size_t)p->min, max, limit_name, &v, err) < 0)
        return -1;
    if (v > bound) {
        if (p->bound == ES_BOUND_RANK)
            return es_fail(err, ES_E_PARAM, p->name,
                           "%s=%zu exceeds the rank bound min(n_rows, d)=%zu of the selected rows", p->name, v, bound);
        return es_fail(err, ES_E_PARAM, p->name, "%s=%zu exceeds the maximum %zu", p->name, v, bound);
    }
    *size_field(params, p->offset) = v;
    return 0;
}

/* A REAL parameter in [min, max] (max: the named limit's value when .limit is
 * set), with open bounds refused by name. ES_E_PARAM naming p. */
static int parse_real(const es_pspec *p, const es_query *q, const es_pctx *pc, void *params, es_err *err)
{
    double v, max = p->limit ? (double)es_limit_value(pc->lim, p->limit) : p->max;
    if (es_param_double(q, p->name, p->def, p->min, max, &v, err) < 0)
        return -1;
    if ((p->min_open && v <= p->min) || (p->max_open && v >= p->max)) {
        if (p->max_open)
            return es_fail(err, ES_E_PARAM, p->name, "%s=%.17g must be strictly between %g and %g", p->name, v,
                           p->min, p->max);
        return es_fail(err, ES_E_PARAM, p->name, "%s must be > %g, got %.17g", p->name, p->min, v);
    }
    *real_field(params, p->offset) = v;
    return 0;
}

/* One parameter that applies: required check, then by kind. */
static int parse_one(const es_pspec *p, const es_query *q, const es_pctx *pc, void *params, es_err *err)
{
    if (p->required && !es_query_get(q, p->name) && p->when)
        return es_fail(err, ES_E_PARAM, p->name, "%s=%s needs the parameter '%s'", p->when, p->when_is, p->name);
    if (p->required && !es_query_get(q, p->name))
        return es_fail(err, ES_E_PARAM, p->name, "missing required parameter '%s'", p->name);
    switch (p->kind) {
    case ES_P_SIZE:
        return parse_size(p, q, pc, params, err);
    case ES_P_REAL:
        return parse_real(p, q, pc, params, err);
    case ES_P_CHOICE:
        return es_param_choice(q, p->name, p->choices, (size_t)p->def, size_field(params, p->offset), err);
    case ES_P_RANGE: {
        size_t *range = size_field(params, p->offset);
        return es_param_range(q, p->name, dynamic_bound(p, pc, params), &range[0], &range[1], err);
    }
    case ES_P_TEXT:
        break;
    }
    return 0;
}

/* See descriptor.h: the default describe.c documents for p (describe_number's and
 * pspec_json's rules), the same string or the same number. */
bool es_pspec_is_default(const es_pspec *p, const char *value)
{
    switch (p->kind) {
    case ES_P_CHOICE:
        return strcmp(value, p->choices[(size_t)p->def]) == 0;
    case ES_P_SIZE:
    case ES_P_REAL: {
        bool documented = !p->preset && !p->required && !(p->kind == ES_P_SIZE && p->def == 0 && p->min > 0) &&
                          p->def < (double)SIZE_MAX;
        char *end;
        double v = strtod(value, &end);
        return documented && *value && *end == '\0' && v == p->def;
    }
    case ES_P_RANGE:
    case ES_P_TEXT:
        break;
    }
    return false;
}

/* Parse the whole spec; see descriptor.h. */
int es_spec_parse(const es_pspec *spec, const es_query *q, const es_pctx *pc, void *params, es_err *err)
{
    for (const es_pspec *p = spec; p && p->name; p++) {
        if (!es_spec_applies(spec, p, params)) {
            const char *given = es_query_get(q, p->name);
            if (given && !es_pspec_is_default(p, given))
                return es_fail(err, ES_E_PARAM, p->name, "parameter '%s' applies only to %s=%s (or is its default "
                               "value, ignored)", p->name, p->when, p->when_is);
            continue;
        }
        if (parse_one(p, q, pc, params, err) < 0)
            return -1;
    }
    return 0;
}

/* The canonical key over every parameter; see descriptor.h. */
void es_spec_key(const es_pspec *spec, const es_query *q, const void *params, es_buf *b)
{
    for (const es_pspec *p = spec; p && p->name; p++) {
        if (!es_spec_applies(spec, p, params)) {
            es_buf_printf(b, "|%s=-", p->name);
            continue;
        }
        switch (p->kind) {
        case ES_P_SIZE:
            es_buf_printf(b, "|%s=%zu", p->name, size_at(params, p->offset));
            break;
        case ES_P_REAL:
            es_buf_printf(b, "|%s=%.17g", p->name, real_at(params, p->offset));
            break;
        case ES_P_CHOICE:
            es_buf_printf(b, "|%s=%s", p->name, p->choices[size_at(params, p->offset)]);
            break;
        case ES_P_RANGE:
            es_buf_printf(b, "|%s=%zu:%zu", p->name, size_at(params, p->offset),
                          size_at(params, p->offset + sizeof(size_t)));
            break;
        case ES_P_TEXT: {
            const char *text = es_query_get(q, p->name);
            /* length-prefixed, so no value can imitate the next member */
            if (text)
                es_buf_printf(b, "|%s=%zu:%s", p->name, strlen(text), text);
            else
                es_buf_printf(b, "|%s=-", p->name);
            break;
        }
        }
    }
}

/* The "input" echo; see descriptor.h. */
void es_spec_echo(const es_pspec *spec, const es_query *q, const void *params, es_jctx *jc, json_t *input)
{
    for (const es_pspec *p = spec; p && p->name; p++) {
        if (p->no_echo || !es_spec_applies(spec, p, params))
            continue;
        json_t *v = NULL;
        switch (p->kind) {
        case ES_P_SIZE:
            v = json_integer((json_int_t)size_at(params, p->offset));
            break;
        case ES_P_REAL:
            v = es_jnum(jc, p->name, real_at(params, p->offset));
            break;
        case ES_P_CHOICE:
            v = json_string(p->choices[size_at(params, p->offset)]);
            break;
        case ES_P_RANGE: {
            char *text = es_asprintf("%zu:%zu", size_at(params, p->offset), size_at(params, p->offset + sizeof(size_t)));
            v = json_string(text);
            free(text);
            break;
        }
        case ES_P_TEXT:
            v = es_query_get(q, p->name) ? es_jstr(es_query_get(q, p->name)) : NULL;
            break;
        }
        if (v)
            json_object_set_new(input, p->name, v);
    }
}
