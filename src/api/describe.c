/* The API described from the tables that serve it: the route table, the
 * analysis table (each descriptor's typed parameter spec and tables), the
 * problem types and the job document (jobdoc.c's field table), as one JSON
 * document (embedscope --dump-api). openapi.yaml's paths, parameters,
 * statuses and Job schema are generated from it (tools/gen_openapi.py)
 * and the tests read it for their lists of routes, so nothing about a route is
 * kept by hand in a second place. */
#include "embedscope/descriptor.h"
#include "embedscope/format.h"
#include "embedscope/jobs.h"
#include "embedscope/problem.h"
#include "embedscope/route.h"
#include "embedscope/version.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const shapes[] = {"none", "one", "pair"};
static const char *const bounds[] = {"fixed", "rank", "items", "last_item", "dim", "field"};

/* An array of the strings list (NULL-terminated). */
static json_t *strings(const char *const *list)
{
    json_t *a = json_array();
    for (; list && *list; list++)
        json_array_append_new(a, json_string(*list));
    return a;
}

/* A number as an integer when it is one (ranges, defaults of sizes). */
static json_t *number(double v)
{
    return v == (double)(json_int_t)v ? json_integer((json_int_t)v) : json_real(v);
}

/* The spec entry at offset `offset` of spec (an ES_BOUND_FIELD bound), or NULL. */
static const es_pspec *at_offset(const es_pspec *spec, size_t offset)
{
    for (const es_pspec *p = spec; p && p->name; p++)
        if (p->offset == offset && p->kind == ES_P_SIZE)
            return p;
    return NULL;
}

/* The request-dependent bound of p: "rank", "items", ... or "<field" naming the bounding parameter. */
static void describe_bound(const es_pspec *spec, const es_pspec *p, json_t *o)
{
    if (p->bound == ES_BOUND_FIXED)
        return;
    if (p->bound == ES_BOUND_FIELD) {
        const es_pspec *f = at_offset(spec, p->bound_field);
        json_object_set_new(o, "below", json_string(f ? f->name : "?"));
        return;
    }
    json_object_set_new(o, "bound", json_string(bounds[p->bound]));
    json_object_set_new(o, "bound_side", json_integer(p->side));
}

/* A SIZE or REAL entry: type, range, default, limit. */
static void describe_number(const es_pspec *p, json_t *o)
{
    bool size = p->kind == ES_P_SIZE;
    json_object_set_new(o, "type", json_string(size ? "integer" : "number"));
    json_object_set_new(o, p->min_open ? "exclusive_minimum" : "minimum", number(p->min));
    if (p->max > 0 && !(size && p->max >= (double)SIZE_MAX))
        json_object_set_new(o, p->max_open ? "exclusive_maximum" : "maximum", number(p->max));
    if (p->limit)
        json_object_set_new(o, "limit", json_string(p->limit));
    if (!p->preset && !p->required && !(size && p->def == 0 && p->min > 0) && p->def < (double)SIZE_MAX)
        json_object_set_new(o, "default", number(p->def));
}

/* One parameter of a spec (its kind's type, range or choices, default, bound, condition). */
static json_t *pspec_json(const es_pspec *spec, const es_pspec *p, const char *name)
{
    json_t *o = json_pack("{s:s}", "name", name ? name : p->name);
    switch (p->kind) {
    case ES_P_SIZE:
    case ES_P_REAL:
        describe_number(p, o);
        break;
    case ES_P_CHOICE:
        json_object_set_new(o, "type", json_string("string"));
        json_object_set_new(o, "enum", strings(p->choices));
        json_object_set_new(o, "default", json_string(p->choices[(size_t)p->def]));
        break;
    case ES_P_RANGE:
        json_object_set_new(o, "type", json_string("string"));
        json_object_set_new(o, "format", json_string("range"));
        break;
    case ES_P_TEXT:
        json_object_set_new(o, "type", json_string("string"));
        break;
    }
    describe_bound(spec, p, o);
    if (p->required)
        json_object_set_new(o, "required", json_true());
    if (p->when)
        json_object_set_new(o, "when", json_pack("{s:s}", p->when, p->when_is));
    return o;
}

/* Selection parameter j of operand prefix ("" or "a_") for analysis a. */
static json_t *selection_json(const es_analysis *a, size_t j, const char *prefix)
{
    const es_pspec *p = &es_selection_spec[j];
    char name[64];
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    json_t *o = pspec_json(es_selection_spec, p, name);
    if (p->choices == es_centering_names)
        json_object_set_new(o, "default", json_string(es_centering_name(a->def_center)));
    if (p->kind == ES_P_TEXT)
        json_object_set_new(o, "default", json_string(""));
    json_object_set_new(o, "selection", json_string(p->name));
    if (*prefix)
        json_object_set_new(o, "operand", json_stringn(prefix, strlen(prefix) - 1));
    return o;
}

/* The tables a route can render: a's, or for compare those of every comparable analysis. */
static json_t *tables_json(const es_analysis *a)
{
    if (!a->gathers)
        return strings(a->tables);
    json_t *all = json_array();
    for (const es_analysis *const *c = a->gathers; *c; c++)
        for (const char *const *t = (*c)->tables; (*c)->comparable && t && *t; t++) {
            size_t j;
            for (j = 0; j < json_array_size(all); j++)
                if (strcmp(json_string_value(json_array_get(all, j)), *t) == 0)
                    break;
            if (j == json_array_size(all))
                json_array_append_new(all, json_string(*t));
        }
    return all;
}

/* The rendering parameters (format.c) an analysis route takes. */
static json_t *render_json(const es_analysis *a, const char *name)
{
    json_t *choices = strcmp(name, "format") == 0   ? strings(es_format_names)
                      : strcmp(name, "orient") == 0 ? strings(es_orients)
                                                    : tables_json(a);
    json_t *o = json_pack("{s:s, s:s, s:o}", "name", name, "type", "string", "enum", choices);
    if (json_array_size(choices) && !(a->gathers && strcmp(name, "table") == 0))
        json_object_set(o, "default", json_array_get(choices, 0)); /* compare: its analysis' main table */
    json_object_set_new(o, "rendering", json_true());
    return o;
}

/* Spec entry `name` of a's own spec, or NULL. */
static const es_pspec *own(const es_analysis *a, const char *name)
{
    for (const es_pspec *p = a->spec; p && p->name; p++)
        if (strcmp(p->name, name) == 0)
            return p;
    return NULL;
}

/* A parameter compare gathers from the comparable analyses: described by the
 * first one that has it, "analyses" listing which take it; the default only
 * when they all agree. NULL when none has it. */
static json_t *gathered_json(const char *name)
{
    json_t *o = NULL, *which = json_array();
    for (size_t i = 0; es_analyses[i]; i++) {
        const es_analysis *c = es_analyses[i];
        const es_pspec *p = c->comparable ? own(c, name) : NULL;
        if (!p)
            continue;
        json_t *d = pspec_json(c->spec, p, NULL);
        if (!o)
            o = json_incref(d);
        else if (!json_equal(json_object_get(o, "default"), json_object_get(d, "default")))
            json_object_del(o, "default");
        json_decref(d);
        json_array_append_new(which, json_string(c->name));
    }
    if (o)
        json_object_set_new(o, "analyses", which);
    else
        json_decref(which);
    return o;
}

static json_t *param_json(const es_analysis *a, const char *name);

/* The selection parameter `name` is, unprefixed or prefixed by one operand
 * ("a_rows": operand a), for analysis a; NULL when it is none. */
static json_t *as_selection(const es_analysis *a, const char *name)
{
    for (size_t j = 0; es_selection_spec[j].name; j++) {
        size_t len = strlen(name), base = strlen(es_selection_spec[j].name);
        if (len < base || strcmp(name + len - base, es_selection_spec[j].name) != 0)
            continue;
        if (len == base)
            return selection_json(a, j, "");
        char prefix[32]; /* "<operand>_", the operand a name without "_" */
        size_t plen = len - base;
        if (plen >= 2 && plen < sizeof prefix && name[plen - 1] == '_' && !memchr(name, '_', plen - 1)) {
            snprintf(prefix, sizeof prefix, "%.*s", (int)plen, name);
            return selection_json(a, j, prefix);
        }
    }
    return NULL;
}

/* compare's "analysis": one of the comparable analyses. */
static json_t *comparable_names(void)
{
    json_t *names = json_array();
    for (size_t i = 0; es_analyses[i]; i++)
        if (es_analyses[i]->comparable)
            json_array_append_new(names, json_string(es_analyses[i]->name));
    return names;
}

/* A parameter of the comparable analyses compare takes (its own or their
 * reference sides'), never required as such (it applies to some analyses). */
static json_t *compare_param_json(const char *name)
{
    json_t *o = gathered_json(name);
    for (size_t i = 0; !o && es_analyses[i]; i++)
        if (es_analyses[i]->comparable && es_compare_reference_param(es_analyses[i], name)) {
            o = param_json(es_analyses[i], name);
            json_object_set_new(o, "analyses", json_pack("[s]", es_analyses[i]->name));
        }
    if (o)
        json_object_del(o, "required");
    return o;
}

/* Parameter `name` that analysis a accepts, described from where it comes from. */
static json_t *param_json(const es_analysis *a, const char *name)
{
    const es_pspec *p = own(a, name);
    json_t *sel = (!p || p->kind == ES_P_TEXT) && a->shape != ES_SHAPE_PAIR && !a->gathers
                      ? as_selection(a, name) : NULL;
    if (sel)
        return sel; /* a hand-written handler's selection, parsed by es_one_parse */
    if (p) {
        json_t *o = pspec_json(a->spec, p, NULL);
        if (a->gathers && strcmp(name, "analysis") == 0)
            json_object_set_new(o, "enum", comparable_names());
        return o;
    }
    for (int i = 0; a->shape == ES_SHAPE_PAIR && i < 2; i++)
        if (strcmp(name, a->names[i]) == 0)
            return json_pack("{s:s, s:s, s:s, s:b, s:s}", "name", name, "type", "string", "format", "model/matrix",
                             "required", true, "operand", name);
    for (int i = 0; a->shape == ES_SHAPE_PAIR && i < 2; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "%s_", a->names[i]);
        if (strncmp(name, prefix, strlen(prefix)) == 0 && (sel = as_selection(a, name)))
            return sel;
    }
    if (strcmp(name, "format") == 0 || strcmp(name, "orient") == 0 || strcmp(name, "table") == 0)
        return render_json(a, name);
    json_t *g = a->gathers ? compare_param_json(name) : NULL;
    return g ? g : json_pack("{s:s, s:s}", "name", name, "type", "string");
}

/* Does text spell the JSON value def (a string: the same text; a number: the
 * same value, whole text parsed)? */
static bool spells(const json_t *def, const char *text)
{
    if (json_is_string(def))
        return strcmp(json_string_value(def), text) == 0;
    if (!json_is_number(def) || !*text)
        return false;
    char *end;
    double v = strtod(text, &end);
    return *end == '\0' && v == json_number_value(def);
}

/* See route.h: asked only for a parameter that would otherwise be refused. */
bool es_describe_is_default(const es_analysis *a, const char *name, const char *value)
{
    json_t *o = param_json(a, name);
    json_t *def = json_object_get(o, "default");
    bool is = def && spells(def, value);
    json_decref(o);
    return is;
}

/* Hand es_describe_is_default down to compare's handler (see route.h), before main runs. */
__attribute__((constructor)) static void hand_down_default_check(void) { es_compare_is_default = es_describe_is_default; }

/* A string, or null for NULL (a case with a single valid value). */
static json_t *string_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

/* The words of a space-separated list, as an array. */
static json_t *words(const char *list)
{
    json_t *a = json_array();
    for (const char *s = list + strspn(list, " "); *s; s += strspn(s, " ")) {
        size_t len = strcspn(s, " ");
        json_array_append_new(a, json_stringn(s, len));
        s += len;
    }
    return a;
}

/* a's example requests (es_examples): {query, cases: {param: [one, two|null, bad]},
 * light, heavy, tables: [{query, tables}]}; null when it has none. */
static json_t *examples_json(const es_analysis *a)
{
    const es_examples *e = a->examples;
    if (!e)
        return json_null();
    json_t *cases = json_object(), *tables = json_array();
    for (const es_example_case *c = e->cases; c && c->param; c++)
        json_object_set_new(cases, c->param, json_pack("[s, o, s]", c->one, string_or_null(c->two), c->bad));
    for (const es_example_table *t = e->tables; t && t->query; t++)
        json_array_append_new(tables, json_pack("{s:s, s:o}", "query", t->query, "tables", words(t->tables)));
    return json_pack("{s:s, s:o, s:s?, s:s?, s:o}", "query", e->query ? e->query : "", "cases", cases, "light",
                     e->light, "heavy", e->heavy, "tables", tables);
}

/* The statuses of every analysis route: 200; 202 when it becomes a job (then
 * 429 when the client holds too many); 304 on a matching ETag; 400 for a
 * parameter or limit; 404 for a matrix; 406 for a representation; 422 for
 * matrices (or an averaged copy) that do not line up; 500 for a numeric
 * failure; 503 busy or out of memory; 504 past limits.request_timeout_s. */
static const int analysis_statuses[] = {200, 202, 304, 400, 404, 406, 422, 429, 500, 503, 504};

/* One analysis: its descriptor's facts and every parameter its route takes. */
static json_t *analysis_json(const es_analysis *a, const es_route *route)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "name", a->name, "route", a->route, "shape", shapes[a->shape]);
    if (a->shape == ES_SHAPE_PAIR)
        json_object_set_new(o, "operands", json_pack("[s, s]", a->names[0], a->names[1]));
    json_object_set_new(o, "decomposes", json_boolean(a->decomposes));
    json_object_set_new(o, "comparable", json_boolean(a->comparable));
    if (a->shape != ES_SHAPE_NONE)
        json_object_set_new(o, "default_center", json_string(es_centering_name(a->def_center)));
    json_object_set_new(o, "tables", tables_json(a));
    json_object_set_new(o, "cost_params", json_string(a->cost_params ? a->cost_params : ""));
    const char *names[ES_PARAMS_MAX * 2];
    size_t n = es_route_params(route, names, sizeof names / sizeof *names);
    json_t *params = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(params, param_json(a, names[i]));
    json_object_set_new(o, "params", params);
    json_object_set_new(o, "examples", examples_json(a));
    return o;
}

/* The methods a route answers besides OPTIONS (server.c decides: writes on
 * the matrix and labels routes, cancelling on a job). */
static json_t *methods_json(const es_route *route)
{
    json_t *m = json_pack("[s, s]", "GET", "HEAD");
    if (es_route_writable(route))
        json_array_append_new(m, json_string("PUT"));
    if (es_route_writable(route) || strcmp(route->pattern, "/v1/jobs/{id}") == 0)
        json_array_append_new(m, json_string("DELETE"));
    return m;
}

/* The statuses of a route by method: a service route's from its table entry
 * ("GET 200 304; DELETE 204"), an analysis route's GET from analysis_statuses. */
static json_t *statuses_json(const es_route *route)
{
    json_t *by_method = json_object(), *list = NULL;
    if (route->analysis) {
        list = json_array();
        for (size_t j = 0; j < sizeof analysis_statuses / sizeof *analysis_statuses; j++)
            json_array_append_new(list, json_integer(analysis_statuses[j]));
        json_object_set_new(by_method, "GET", list);
        return by_method;
    }
    for (const char *s = route->statuses ? route->statuses : ""; *s;) {
        size_t len = strcspn(s, " ;");
        if (*s >= 'A' && *s <= 'Z') {
            json_object_setn_new(by_method, s, len, list = json_array());
        } else if (len && list) {
            json_array_append_new(list, json_integer(atoi(s)));
        }
        s += len;
        s += strspn(s, " ;");
    }
    return by_method;
}

/* See route.h. */
json_t *es_api_describe(void)
{
    const es_route *routes;
    size_t n = es_routes(&routes);
    json_t *list = json_array(), *analyses = json_array(), *problems = json_array();
    for (size_t i = 0; i < n; i++) {
        const char *names[ES_PARAMS_MAX * 2];
        es_route_params(&routes[i], names, sizeof names / sizeof *names);
        json_t *r = json_pack("{s:s, s:o, s:o}", "path", routes[i].pattern, "methods", methods_json(&routes[i]),
                              "params", strings(names));
        json_object_set_new(r, "statuses", statuses_json(&routes[i]));
        if (routes[i].analysis) {
            json_object_set_new(r, "analysis", json_string(routes[i].analysis->name));
            json_array_append_new(analyses, analysis_json(routes[i].analysis, &routes[i]));
        }
        json_array_append_new(list, r);
    }
    for (int k = 0; k < ES_PROB_COUNT; k++)
        json_array_append_new(problems, json_pack("{s:s, s:i, s:s}", "slug", es_problem_slug((es_problem_kind)k),
                                                  "status", (int)es_problem_status((es_problem_kind)k), "title",
                                                  es_problem_title((es_problem_kind)k)));
    return json_pack("{s:s, s:s, s:o, s:o, s:o, s:o}", "service", "embedscope", "version", ES_VERSION, "routes", list,
                     "analyses", analyses, "problems", problems, "job", es_job_describe());
}
