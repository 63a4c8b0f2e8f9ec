/* Unit tests of the daemon's socket-free layers: query parameters (params.c),
 * problem documents (problem.c), JSON rendering (render.c), header logic and
 * gzip (negotiate.c), routing (routes.c), metrics (metrics.c) and the /v1
 * handlers (api.c) driven through es_route_dispatch on a small generated
 * configuration. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <stdatomic.h>

#include "check_main.h"
#include "embedscope/config.h"
#include "embedscope/app.h"
#include "embedscope/cost.h"
#include "embedscope/descriptor.h"
#include "embedscope/format.h"
#include "embedscope/metrics.h"
#include "embedscope/negotiate.h"
#include "embedscope/params.h"
#include "embedscope/problem.h"
#include "embedscope/render.h"
#include "embedscope/results.h"
#include "embedscope/route.h"
#include "embedscope/version.h"

/* A 16 x 8 sinusoidal encoding (model axis columns) and a 16 x 4 one. */
static const char *const small_config =
    "{\"limits\": {\"max_k\": 6, \"max_bins\": 4, \"max_rows\": 12, \"max_response_bytes\": 200000,"
    "              \"max_exclude\": 3},"
    " \"models\": {\"m\": {\"matrices\": {"
    "   \"pe\": {\"generator\": \"sinusoidal\", \"n_positions\": 16, \"d_model\": 8, \"base\": 10000},"
    "   \"pe4\": {\"generator\": \"sinusoidal\", \"n_positions\": 16, \"d_model\": 4, \"base\": 10000}}}}}";

static es_limits limits(void)
{
    return (es_limits){.max_k = 6, .max_bins = 4, .max_rows = 12, .max_response_bytes = 200000, .max_exclude = 3};
}

static es_query query_of(const char *const *pairs)
{
    es_query q;
    es_query_init(&q);
    for (; pairs[0]; pairs += 2)
        es_query_add(&q, pairs[0], pairs[1]);
    return q;
}

/* ---------------------------------------------------------------- params.c */

START_TEST(query_check_refuses_unknown_and_duplicates)
{
    static const char *const allowed[] = {"k", "rows", NULL};
    es_err err;
    es_query q = query_of((const char *const[]){"k", "3", "rows", "1:", NULL});
    ck_assert_int_eq(es_query_check(&q, allowed, &err), 0);
    ck_assert_str_eq(es_query_get(&q, "rows"), "1:");
    ck_assert_ptr_null(es_query_get(&q, "center"));
    char *text = es_query_text(&q);
    ck_assert_str_eq(text, "k=3&rows=1:");
    free(text);
    es_query_add(&q, "kk", "3");
    ck_assert_int_eq(es_query_check(&q, allowed, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "kk");
    ck_assert_ptr_nonnull(strstr(err.message, "k, rows"));
    es_query_free(&q);
    q = query_of((const char *const[]){"rows", "1:", "k", "3", "k", "3", NULL});
    ck_assert_int_eq(es_query_check(&q, allowed, &err), -1);
    ck_assert_str_eq(err.param, "k");
    es_query_free(&q);
}
END_TEST

START_TEST(size_parameter_rules)
{
    es_err err;
    size_t v = 0;
    es_query q = query_of((const char *const[]){NULL});
    ck_assert_int_eq(es_param_size(&q, "k", 7, 1, 10, "max_k", &v, &err), 0);
    ck_assert_uint_eq(v, 7);
    es_query_free(&q);
    static const char *const bad[] = {"", "+3", "-1", "3.0", " 3", "0x3", "3 ", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        q = query_of((const char *const[]){"k", bad[i], NULL});
        ck_assert_int_eq(es_param_size(&q, "k", 1, 1, 10, "max_k", &v, &err), -1);
        ck_assert_int_eq(err.code, ES_E_PARAM);
        ck_assert_str_eq(err.param, "k");
        es_query_free(&q);
    }
    q = query_of((const char *const[]){"k", "0", NULL});
    ck_assert_int_eq(es_param_size(&q, "k", 1, 1, 10, "max_k", &v, &err), -1);
    ck_assert_str_eq(err.param, "k");
    es_query_free(&q);
    q = query_of((const char *const[]){"k", "11", NULL});
    ck_assert_int_eq(es_param_size(&q, "k", 1, 1, 10, "max_k", &v, &err), -1);
    ck_assert_int_eq(err.code, ES_E_LIMIT);
    ck_assert_str_eq(err.param, "max_k");
    ck_assert_int_eq(es_param_size(&q, "k", 1, 1, 10, NULL, &v, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "k");
    ck_assert_int_eq(es_param_size(&q, "k", 1, 1, 11, "max_k", &v, &err), 0);
    ck_assert_uint_eq(v, 11);
    es_query_free(&q);
}
END_TEST

START_TEST(double_parameter_rules)
{
    es_err err;
    double v = -1;
    es_query q = query_of((const char *const[]){"blur", "0.25", NULL});
    ck_assert_int_eq(es_param_double(&q, "blur", 0, 0, 4, &v, &err), 0);
    ck_assert(v == 0.25);
    es_query_free(&q);
    static const char *const bad[] = {"", "nan", "inf", "-inf", "1e999", "abc", "1.5x", " 1", "5", "-0.5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        q = query_of((const char *const[]){"blur", bad[i], NULL});
        ck_assert_msg(es_param_double(&q, "blur", 0, 0, 4, &v, &err) == -1, "accepted '%s'", bad[i]);
        ck_assert_int_eq(err.code, ES_E_PARAM);
        ck_assert_str_eq(err.param, "blur");
        es_query_free(&q);
    }
}
END_TEST

START_TEST(choice_parameter_rules)
{
    static const char *const modes[] = {"row", "offset", "matrix", NULL};
    es_err err;
    size_t v = 99;
    es_query q = query_of((const char *const[]){"mode", "matrix", NULL});
    ck_assert_int_eq(es_param_choice(&q, "mode", modes, 0, &v, &err), 0);
    ck_assert_uint_eq(v, 2);
    ck_assert_int_eq(es_param_choice(&q, "side", modes, 1, &v, &err), 0);
    ck_assert_uint_eq(v, 1);
    es_query_free(&q);
    q = query_of((const char *const[]){"mode", "Row", NULL});
    ck_assert_int_eq(es_param_choice(&q, "mode", modes, 0, &v, &err), -1);
    ck_assert_str_eq(err.param, "mode");
    ck_assert_ptr_nonnull(strstr(err.message, "row, offset, matrix"));
    es_query_free(&q);
}
END_TEST

/* A k of default def: 1..max_k (the limit), then at most the rank bound. */
static int parse_k(const es_query *q, size_t def, const es_limits *lim, size_t rank, size_t *k, es_err *err)
{
    const es_pspec spec[] = {{.name = "k", .kind = ES_P_SIZE, .def = (double)def, .min = 1, .limit = "max_k",
                              .bound = ES_BOUND_RANK, .offset = 0},
                             {0}};
    es_pctx pc = {.rank = {rank}, .lim = lim};
    return es_spec_parse(spec, q, &pc, k, err);
}

START_TEST(k_parameter_rules)
{
    es_limits lim = limits();
    es_err err;
    size_t k = 0;
    es_query q = query_of((const char *const[]){NULL});
    ck_assert_int_eq(parse_k(&q, 30, &lim, 8, &k, &err), 0); /* default 30 clamped to max_k = 6 */
    ck_assert_uint_eq(k, 6);
    ck_assert_int_eq(parse_k(&q, 30, &lim, 5, &k, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "k");
    ck_assert_int_eq(parse_k(&q, 3, &lim, 2, &k, &err), -1);
    ck_assert_str_eq(err.param, "k");
    es_query_free(&q);
    q = query_of((const char *const[]){"k", "7", NULL});
    ck_assert_int_eq(parse_k(&q, 3, &lim, 100, &k, &err), -1);
    ck_assert_int_eq(err.code, ES_E_LIMIT);
    ck_assert_str_eq(err.param, "max_k");
    es_query_free(&q);
}
END_TEST

/* PE(p, c) of the d = 8, base 10000 encoding: sin for even c, cos for odd c. */
static double sinusoid(int p, int c)
{
    double w = pow(10000, -2.0 * (c / 2) / 8);
    return c % 2 ? cos(p * w) : sin(p * w);
}

static es_matrix *small_matrix(void)
{
    es_matrix *m;
    es_err err;
    ck_assert_int_eq(es_gen_sinusoidal("t/pe", 16, 8, 10000, &m, &err), 0);
    return m;
}

/* queries=start:stop ranges: Python bounds within the positions (nothing clamped), no step, never empty. */
START_TEST(range_parameter_rules)
{
    es_err err;
    size_t a, b;
    es_query q = query_of((const char *const[]){NULL});
    ck_assert_int_eq(es_param_range(&q, "queries", 10, &a, &b, &err), 0);
    ck_assert_uint_eq(a, 0);
    ck_assert_uint_eq(b, 10);
    es_query_free(&q);
    static const struct { const char *text; size_t a, b; } good[] = {
        {"1:", 1, 10}, {":4", 0, 4}, {"-3:", 7, 10}, {"2:10", 2, 10}, {"0:10:1", 0, 10}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        q = query_of((const char *const[]){"queries", good[i].text, NULL});
        ck_assert_int_eq(es_param_range(&q, "queries", 10, &a, &b, &err), 0);
        ck_assert_uint_eq(a, good[i].a);
        ck_assert_uint_eq(b, good[i].b);
        es_query_free(&q);
    }
    static const char *const bad[] = {"5", "0:10:2", "9:1", "5:5", "x:", "", "1:2:-1", "2:100", "-11:"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        q = query_of((const char *const[]){"queries", bad[i], NULL});
        ck_assert_msg(es_param_range(&q, "queries", 10, &a, &b, &err) == -1, "accepted '%s'", bad[i]);
        ck_assert_int_eq(err.code, ES_E_PARAM);
        ck_assert_str_eq(err.param, "queries");
        es_query_free(&q);
    }
}
END_TEST

/* Comma lists: es_split_commas keeps empty items; es_param_doubles wants exactly n numbers. */
START_TEST(list_parameter_rules)
{
    size_t n;
    char **items = es_split_commas("1:,,a", &n);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(items[0], "1:");
    ck_assert_str_eq(items[1], "");
    ck_assert_str_eq(items[2], "a");
    ck_assert_ptr_null(items[3]);
    es_strv_free(items);
    items = es_split_commas("", &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(items[0], "");
    es_strv_free(items);

    es_err err;
    double *v;
    es_query q = query_of((const char *const[]){"q", "1.5,-2,3e-1", NULL});
    ck_assert_int_eq(es_param_doubles(&q, "q", 3, &v, &err), 0);
    ck_assert(v[0] == 1.5 && v[1] == -2 && v[2] == 0.3);
    free(v);
    ck_assert_int_eq(es_param_doubles(&q, "k", 3, &v, &err), 0); /* absent */
    ck_assert_ptr_null(v);
    ck_assert_int_eq(es_param_doubles(&q, "q", 2, &v, &err), -1);
    ck_assert_str_eq(err.param, "q");
    ck_assert_ptr_nonnull(strstr(err.message, "exactly 2"));
    es_query_free(&q);
    static const char *const bad[] = {"1,,2", "1,x,2", "1,inf,2", "1,2,nan", "1,2,3,"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        q = query_of((const char *const[]){"q", bad[i], NULL});
        ck_assert_msg(es_param_doubles(&q, "q", 3, &v, &err) == -1, "accepted '%s'", bad[i]);
        ck_assert_str_eq(err.param, "q");
        es_query_free(&q);
    }
}
END_TEST

START_TEST(selection_resolves_and_names_prefixed_parameters)
{
    es_limits lim = limits();
    es_matrix *m = small_matrix();
    es_err err;
    es_selection sel;
    es_query q = query_of((const char *const[]){"rows", "5:", "exclude", "6,7", "center", "rows", NULL});
    ck_assert_int_eq(es_param_selection(&q, "", true, ES_CENTER_COLUMNS, m, &lim, &sel, &err), 0);
    ck_assert_uint_eq(sel.n, 9);
    ck_assert_uint_eq(sel.idx[0], 5);
    ck_assert_uint_eq(sel.idx[1], 8);
    ck_assert_int_eq(sel.center, ES_CENTER_ROWS);
    ck_assert_str_eq(sel.canonical, "5,8:16");
    es_selection_free(&sel);
    es_query_free(&q);

    q = query_of((const char *const[]){"a_rows", "4:", NULL});
    ck_assert_int_eq(es_param_selection(&q, "a_", true, ES_CENTER_NONE, m, &lim, &sel, &err), 0);
    ck_assert_int_eq(sel.center, ES_CENTER_NONE);
    ck_assert_str_eq(sel.canonical, "4:16");
    es_selection_free(&sel);
    es_query_free(&q);

    const char *const cases[][3] = {
        /* key, value, expected err.param */
        {"a_rows", "x", "a_rows"},   {"a_rows", "3:3", "a_rows"}, {"a_exclude", "99", "a_exclude"},
        {"a_exclude", "-1", "a_exclude"}, {"a_center", "mean", "a_center"}, {"a_rows", "0:1:0", "a_rows"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        q = query_of((const char *const[]){cases[i][0], cases[i][1], NULL});
        ck_assert_int_eq(es_param_selection(&q, "a_", true, ES_CENTER_NONE, m, &lim, &sel, &err), -1);
        ck_assert_int_eq(err.code, ES_E_PARAM);
        ck_assert_msg(strcmp(err.param, cases[i][2]) == 0, "%s=%s: param '%s'", cases[i][0], cases[i][1], err.param);
        es_query_free(&q);
    }
    es_matrix_release(m);
}
END_TEST

/* A pair analysis' selection parameters are prefixed with the operand names
 * its descriptor declares, whatever they are: a new pair x / y takes x_rows and
 * y_center, never the unprefixed rows. */
START_TEST(pair_selection_prefixes_come_from_the_descriptor)
{
    static const es_pspec none[] = {{0}};
    const es_analysis xy = {.name = "xy", .route = "/v1/xy", .shape = ES_SHAPE_PAIR, .names = {"x", "y"},
                            .center_param = true, .spec = none};
    const char *names[ES_PARAMS_MAX * 2];
    size_t n = es_spec_allowed(&xy, names, sizeof names / sizeof *names);
    bool x_rows = false, y_center = false, y_head = false;
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_ne(names[i], "rows");
        x_rows |= strcmp(names[i], "x_rows") == 0;
        y_center |= strcmp(names[i], "y_center") == 0;
        y_head |= strcmp(names[i], "y_head") == 0; /* no head_param */
    }
    ck_assert(x_rows && y_center && !y_head);
    ck_assert_str_eq(names[0], "x");
    ck_assert_uint_eq(n, 8); /* x, x_rows, x_exclude, x_center, the same for y */
}
END_TEST

/* The routes' parameter lists fit (a longer one aborts rather than being cut). */
START_TEST(route_parameter_lists_fit)
{
    const es_route *routes;
    size_t n = es_routes(&routes);
    ck_assert_uint_gt(n, 19);
    for (size_t i = 0; i < n; i++) {
        const char *names[ES_PARAMS_MAX * 2];
        es_route_params(&routes[i], names, sizeof names / sizeof *names);
    }
}
END_TEST

/* The member `name` of the array `list` of objects, or NULL. */
static json_t *named(json_t *list, const char *key, const char *name)
{
    size_t i;
    json_t *o;
    json_array_foreach(list, i, o)
        if (strcmp(json_string_value(json_object_get(o, key)), name) == 0)
            return o;
    return NULL;
}

/* --dump-api describes each parameter from its spec: pca's k (default, range,
 * configured limit, rank bound), a pair's prefixed selection with the
 * analysis' default centring, a conditional parameter, compare's gathered
 * ones without a default where the analyses differ; every route with its
 * methods and statuses, and every problem type. */
/* Every descriptor carries its example requests and --dump-api exports them
 * (the HTTP tests build their lists from them): a typical query, the light and
 * heavy cost requests, at least one table example (tests/http/test_formats.py
 * checks they cover every table); a case as its three changes, null for a
 * single valid value; the 64 numbers of rope's q; a table example's tables. */
START_TEST(every_analysis_exports_its_examples)
{
    json_t *api = es_api_describe(), *analyses = json_object_get(api, "analyses");
    for (size_t i = 0; i < json_array_size(analyses); i++) {
        json_t *a = json_array_get(analyses, i), *ex = json_object_get(a, "examples");
        ck_assert_msg(json_is_object(ex), "%s has no examples", json_string_value(json_object_get(a, "name")));
        ck_assert(json_is_string(json_object_get(ex, "query")));
        ck_assert(json_is_string(json_object_get(ex, "light")) && json_is_string(json_object_get(ex, "heavy")));
        ck_assert_uint_gt(json_array_size(json_object_get(ex, "tables")), 0);
    }
    json_t *k = json_object_get(json_object_get(json_object_get(named(analyses, "name", "pca"), "examples"), "cases"), "k");
    ck_assert_str_eq(json_string_value(json_array_get(k, 0)), "k=2");
    ck_assert_str_eq(json_string_value(json_array_get(k, 2)), "k=0");
    json_t *model = json_object_get(
        json_object_get(json_object_get(named(analyses, "name", "attention"), "examples"), "cases"), "model");
    ck_assert(json_is_null(json_array_get(model, 1)));
    json_t *rope = json_object_get(named(analyses, "name", "rope/relative"), "examples");
    const char *q = json_string_value(json_array_get(json_object_get(json_object_get(rope, "cases"), "q"), 0));
    ck_assert_uint_eq(strcspn(q, "&"), strlen("q=") + 64 * 2 - 1);
    json_t *tables = json_object_get(json_array_get(json_object_get(json_object_get(named(analyses, "name", "pca"),
                                                                                   "examples"), "tables"), 0), "tables");
    ck_assert_str_eq(json_string_value(json_array_get(tables, 1)), "variance");
    json_decref(api);
}
END_TEST

START_TEST(api_description_comes_from_the_tables)
{
    json_t *api = es_api_describe(), *analyses = json_object_get(api, "analyses");
    json_t *pca = named(analyses, "name", "pca"), *capture = named(analyses, "name", "capture");
    json_t *cosine = named(analyses, "name", "cosine"), *compare = named(analyses, "name", "compare");
    ck_assert_ptr_nonnull(pca);
    json_t *k = named(json_object_get(pca, "params"), "name", "k");
    ck_assert_int_eq(json_integer_value(json_object_get(k, "default")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(k, "minimum")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(k, "limit")), "max_k");
    ck_assert_str_eq(json_string_value(json_object_get(k, "bound")), "rank");
    json_t *center = named(json_object_get(capture, "params"), "name", "b_center");
    ck_assert_str_eq(json_string_value(json_object_get(center, "default")), "none");
    ck_assert_str_eq(json_string_value(json_object_get(center, "operand")), "b");
    ck_assert_int_eq((int)json_array_size(json_object_get(center, "enum")), 3);
    json_t *row = named(json_object_get(cosine, "params"), "name", "row");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(row, "when"), "mode")), "row");
    json_t *ck = named(json_object_get(compare, "params"), "name", "k"); /* pca 3, capture 30 */
    ck_assert_ptr_null(json_object_get(ck, "default"));
    ck_assert_ptr_nonnull(json_object_get(ck, "analyses"));
    size_t n_analyses = 0;
    while (es_analyses[n_analyses])
        n_analyses++;
    ck_assert_uint_eq(json_array_size(analyses), n_analyses);
    json_t *job = named(json_object_get(api, "routes"), "path", "/v1/jobs/{id}");
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(json_object_get(job, "statuses"), "GET"), 1)),
                     303);
    ck_assert_int_eq((int)json_array_size(json_object_get(job, "methods")), 3); /* GET, HEAD, DELETE */
    ck_assert_int_eq((int)json_array_size(json_object_get(api, "problems")), ES_PROB_COUNT);
    json_decref(api);
}
END_TEST

START_TEST(selection_limits)
{
    es_limits lim = limits();
    es_matrix *m = small_matrix();
    es_err err;
    es_selection sel;
    es_query q = query_of((const char *const[]){NULL}); /* 16 rows > max_rows 12 */
    ck_assert_int_eq(es_param_selection(&q, "", true, ES_CENTER_COLUMNS, m, &lim, &sel, &err), -1);
    ck_assert_int_eq(err.code, ES_E_LIMIT);
    ck_assert_str_eq(err.param, "max_rows");
    es_query_free(&q);
    q = query_of((const char *const[]){"rows", "0:12", NULL});
    ck_assert_int_eq(es_param_selection(&q, "", false, ES_CENTER_COLUMNS, m, &lim, &sel, &err), 0);
    ck_assert_int_eq(sel.center, ES_CENTER_NONE); /* no centring parameter: uncentred */
    es_selection_free(&sel);
    es_query_free(&q);
    q = query_of((const char *const[]){"rows", "0:12", "exclude", "1,2,3,4", NULL});
    ck_assert_int_eq(es_param_selection(&q, "", true, ES_CENTER_COLUMNS, m, &lim, &sel, &err), -1);
    ck_assert_int_eq(err.code, ES_E_LIMIT);
    ck_assert_str_eq(err.param, "max_exclude");
    es_query_free(&q);
    es_matrix_release(m);
}
END_TEST

/* ---------------------------------------------------------------- problem.c */

START_TEST(problems_map_error_classes)
{
    const struct {
        es_errcode code;
        unsigned status;
        const char *type, *member;
    } cases[] = {
        {ES_E_PARAM, 400, "/problems/invalid-parameter", "param"},
        {ES_E_LIMIT, 400, "/problems/limit-exceeded", "limit"},
        {ES_E_NOTFOUND, 404, "/problems/not-found", "param"},
        {ES_E_INCOMPATIBLE, 422, "/problems/incompatible-matrices", "param"},
        {ES_E_NUMERIC, 500, "/problems/numeric-failure", "param"},
        {ES_E_NOMEM, 503, "/problems/out-of-memory", "param"},
        {ES_E_IO, 500, "/problems/internal-error", "param"},
        {ES_E_CANCELLED, 504, "/problems/timeout", "param"},
        {ES_E_SHUTDOWN, 503, "/problems/server-busy", "param"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        es_err err;
        es_fail(&err, cases[i].code, "x", "what went wrong");
        json_t *p = es_problem_new(es_problem_kind_of(err.code), err.message, err.param, "/v1/x", "req1");
        ck_assert_int_eq(json_integer_value(json_object_get(p, "status")), cases[i].status);
        ck_assert_str_eq(json_string_value(json_object_get(p, "type")), cases[i].type);
        ck_assert_str_eq(json_string_value(json_object_get(p, "detail")), "what went wrong");
        ck_assert_str_eq(json_string_value(json_object_get(p, "instance")), "/v1/x");
        ck_assert_str_eq(json_string_value(json_object_get(p, cases[i].member)), "x");
        ck_assert_str_eq(json_string_value(json_object_get(p, "request_id")), "req1");
        ck_assert_ptr_nonnull(json_object_get(p, "title"));
        const char *slug = strrchr(cases[i].type, '/') + 1;
        ck_assert_ptr_nonnull(es_problem_doc(slug));
        json_decref(p);
    }
    ck_assert_ptr_null(es_problem_doc("nope"));
    json_t *p = es_problem_new(ES_PROB_METHOD_NOT_ALLOWED, NULL, "", "/v1/models", NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(p, "status")), 405);
    ck_assert_ptr_null(json_object_get(p, "param"));
    ck_assert_ptr_null(json_object_get(p, "request_id"));
    json_decref(p);
}
END_TEST

START_TEST(problem_text_is_valid_utf8)
{
    json_t *p = es_problem_new(ES_PROB_INVALID_PARAMETER, "bad \xff\xfe value \xc3\xa9", "\xff", "/\xe0\x80", NULL);
    ck_assert_str_eq(json_string_value(json_object_get(p, "detail")), "bad ?? value \xc3\xa9");
    ck_assert_str_eq(json_string_value(json_object_get(p, "param")), "?");
    ck_assert_str_eq(json_string_value(json_object_get(p, "instance")), "/??");
    json_decref(p);
}
END_TEST

START_TEST(forwarded_prefix_is_a_clean_path)
{
    static const struct {
        const char *given, *want;
        bool ok;
    } cases[] = {
        {"/embedscope", "/embedscope", true}, {"/embedscope/", "/embedscope", true}, {"/a/b-c_d.e~f", "/a/b-c_d.e~f", true},
        {"/", "", true}, {NULL, "", false}, {"", "", false}, {"embedscope", "", false}, {"//evil.example", "", false},
        {"/a//b", "", false}, {"/a/../b", "", false}, {"/./a", "", false}, {"/a b", "", false},
        {"/a\"b", "", false}, {"/a?x", "", false}, {"/a%2f", "", false}, {"/\xc3\xa9", "", false},
    };
    char out[ES_PREFIX_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ck_assert_msg(es_forwarded_prefix(cases[i].given, out) == cases[i].ok, "%s", cases[i].given);
        ck_assert_str_eq(out, cases[i].want);
    }
    char long_prefix[ES_PREFIX_MAX + 1];
    memset(long_prefix, 'a', sizeof long_prefix);
    long_prefix[0] = '/';
    long_prefix[ES_PREFIX_MAX] = '\0';
    ck_assert(!es_forwarded_prefix(long_prefix, out));
    long_prefix[ES_PREFIX_MAX - 1] = '\0';
    ck_assert(es_forwarded_prefix(long_prefix, out));
}
END_TEST

/* The client of a forwarded request: the last X-Forwarded-For entry, canonical,
 * and nothing when that entry is not a numeric address. */
START_TEST(forwarded_for_names_the_last_hop)
{
    static const struct {
        const char *given, *want;
        bool ok;
    } cases[] = {
        {"203.0.113.7", "203.0.113.7", true}, {"198.51.100.1, 203.0.113.7", "203.0.113.7", true},
        {" 10.0.0.1\t", "10.0.0.1", true}, {"2001:DB8::1", "2001:db8::1", true},
        {"::ffff:192.0.2.1", "192.0.2.1", true}, {NULL, "", false}, {"", "", false}, {"203.0.113.7,", "", false},
        {"proxy.local", "", false}, {"203.0.113.7:443", "", false}, {"1.2.3.4 5.6.7.8", "", false},
        {"[::1]", "", false}, {"1.2.3.4.5", "", false},
    };
    char out[ES_CLIENT_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ck_assert_msg(es_forwarded_for(cases[i].given, out) == cases[i].ok, "%s", cases[i].given);
        ck_assert_str_eq(out, cases[i].want);
    }
}
END_TEST

START_TEST(problem_rebase_prefixes_type_and_instance)
{
    json_t *p = es_problem_new(ES_PROB_NOT_FOUND, "no such path", NULL, "/v1/nope", "r1");
    es_reply rep = {.status = 404};
    es_err err;
    ck_assert_int_eq(es_json_body(p, 0, &rep.body, &rep.len, &err), 0);
    json_decref(p);
    es_problem_rebase(&rep, "");
    ck_assert(strstr(rep.body, "\"/problems/not-found\""));
    es_problem_rebase(&rep, "/embedscope");
    p = json_loadb(rep.body, rep.len, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(p, "type")), "/embedscope/problems/not-found");
    ck_assert_str_eq(json_string_value(json_object_get(p, "instance")), "/embedscope/v1/nope");
    ck_assert_str_eq(json_string_value(json_object_get(p, "request_id")), "r1");
    json_decref(p);
    es_reply_release(&rep);
    /* Not a JSON object: left alone. */
    es_reply raw = {.body = (char *)"{\"status\":", .len = 10, .body_static = true};
    es_problem_rebase(&raw, "/x");
    ck_assert_str_eq(raw.body, "{\"status\":");
}
END_TEST

/* ---------------------------------------------------------------- render.c */

START_TEST(numbers_round_trip_exactly)
{
    const double values[] = {0.1, 1.0 / 3, 2.0 / 3, 5e-324, 1.7976931348623157e308, -0.0, 123456789.123456789,
                             0.33691403712827062, 1e-300};
    size_t n = sizeof values / sizeof *values;
    es_jctx jc = {0};
    json_t *root = json_pack("{s:o}", "v", es_jnums(&jc, "v", values, n));
    es_err err;
    ck_assert_int_eq(es_jctx_check(&jc, &err), 0);
    char *body;
    size_t len;
    ck_assert_int_eq(es_json_body(root, 0, &body, &len, &err), 0);
    ck_assert_uint_eq(len, strlen(body));
    json_t *back = json_loads(body, 0, NULL);
    ck_assert_ptr_nonnull(back);
    for (size_t i = 0; i < n; i++) {
        double got = json_number_value(json_array_get(json_object_get(back, "v"), i));
        ck_assert_msg(got == values[i], "value %zu: %.17g != %.17g", i, got, values[i]);
    }
    json_decref(back);
    json_decref(root);
    free(body);
}
END_TEST

START_TEST(non_finite_numbers_fail_the_response)
{
    es_jctx jc = {0};
    const double v[] = {1, NAN, INFINITY};
    json_t *a = es_jnums(&jc, "similarity", v, 3);
    ck_assert_uint_eq(json_array_size(a), 3);
    es_err err;
    ck_assert_int_eq(es_jctx_check(&jc, &err), -1);
    ck_assert_int_eq(err.code, ES_E_NUMERIC);
    ck_assert_str_eq(err.param, "similarity");
    ck_assert_ptr_nonnull(strstr(err.message, "non-finite"));
    json_decref(a);
}
END_TEST

START_TEST(response_size_limit_is_named)
{
    json_t *s = json_pack("[s]", "0123456789012345678901234567890123456789"); /* 44 bytes */
    char *body = NULL;
    size_t len = 0;
    es_err err;
    ck_assert_int_eq(es_json_body(s, 20, &body, &len, &err), -1);
    ck_assert_int_eq(err.code, ES_E_LIMIT);
    ck_assert_str_eq(err.param, "max_response_bytes");
    ck_assert_ptr_null(body);
    ck_assert_int_eq(es_json_body(s, 43, &body, &len, &err), -1);
    ck_assert_int_eq(es_json_body(s, 44, &body, &len, &err), 0);
    ck_assert_uint_eq(len, 44);
    free(body);
    json_decref(s);
}
END_TEST

/* ---------------------------------------------------------------- negotiate.c */

START_TEST(accept_encoding)
{
    ck_assert(es_accepts_gzip("gzip"));
    ck_assert(es_accepts_gzip("deflate, gzip;q=0.5, br"));
    ck_assert(es_accepts_gzip("GZIP"));
    ck_assert(es_accepts_gzip("x-gzip"));
    ck_assert(es_accepts_gzip("*"));
    ck_assert(es_accepts_gzip("br, * ; q=0.1"));
    ck_assert(!es_accepts_gzip(NULL));
    ck_assert(!es_accepts_gzip(""));
    ck_assert(!es_accepts_gzip("identity"));
    ck_assert(!es_accepts_gzip("gzip;q=0"));
    ck_assert(!es_accepts_gzip("*, gzip;q=0"));
    ck_assert(!es_accepts_gzip("gzipx"));
    ck_assert(!es_accepts_gzip("*;q=0"));
}
END_TEST

START_TEST(etag_weak_comparison)
{
    char tag[40];
    es_etag_of("abc", 3, tag);
    ck_assert_uint_eq(strlen(tag), 36);
    ck_assert_int_eq(strncmp(tag, "W/\"", 3), 0);
    char other[40];
    es_etag_of("abd", 3, other);
    ck_assert_str_ne(tag, other);
    ck_assert(es_etag_matches(tag, tag));
    ck_assert(es_etag_matches(tag + 2, tag)); /* strong form of the same tag */
    char list[120];
    snprintf(list, sizeof list, "%s, %s", other, tag);
    ck_assert(es_etag_matches(list, tag));
    ck_assert(es_etag_matches("*", tag));
    ck_assert(!es_etag_matches(other, tag));
    ck_assert(!es_etag_matches(NULL, tag));
    ck_assert(!es_etag_matches("", tag));
    ck_assert(!es_etag_matches(tag, ""));
}
END_TEST

START_TEST(cors_and_request_ids)
{
    char *any[] = {"*", NULL}, *some[] = {"https://a.example", "https://b.example", NULL}, *none[] = {NULL};
    ck_assert_str_eq(es_cors_allow(any, "https://x.example"), "*");
    ck_assert_str_eq(es_cors_allow(some, "https://b.example"), "https://b.example");
    ck_assert_ptr_null(es_cors_allow(some, "https://c.example"));
    ck_assert_ptr_null(es_cors_allow(none, "https://a.example"));
    ck_assert_str_eq(es_cors_allow(any, NULL), "*"); /* "*" does not depend on Origin */
    ck_assert_ptr_null(es_cors_allow(some, NULL));
    ck_assert(!es_cors_varies(any));
    ck_assert(es_cors_varies(some));
    ck_assert(es_cors_varies(none));
    char id[72], other[72];
    es_request_id("abc-123_x.y:z", id);
    ck_assert_str_eq(id, "abc-123_x.y:z");
    es_request_id("bad id", id);
    ck_assert_uint_eq(strlen(id), 32);
    ck_assert_uint_eq(strspn(id, "0123456789abcdef"), 32);
    ck_assert_int_eq(id[12], '7'); /* UUIDv7 layout: version nibble */
    ck_assert(strchr("89ab", id[16]));  /* variant 10 */
    es_request_id(NULL, other);
    ck_assert_str_ne(id, other);
    ck_assert_int_le(strncmp(id, other, 12), 0); /* the leading 48 bits are milliseconds: ids sort by time */
    es_request_id("0123456789012345678901234567890123456789012345678901234567890123456789", id);
    ck_assert_uint_eq(strlen(id), 32);
}
END_TEST

/* gunzip of z (zlen bytes) equals the n bytes of want. */
static void assert_gunzips_to(const char *z, size_t zlen, const char *want, size_t n)
{
    char *back = malloc(n + 1);
    z_stream zs = {0};
    ck_assert_int_eq(inflateInit2(&zs, 16 + MAX_WBITS), Z_OK);
    zs.next_in = (Bytef *)z;
    zs.avail_in = (uInt)zlen;
    zs.next_out = (Bytef *)back;
    zs.avail_out = (uInt)n + 1;
    ck_assert_int_eq(inflate(&zs, Z_FINISH), Z_STREAM_END);
    ck_assert_uint_eq(zs.total_out, n);
    inflateEnd(&zs);
    ck_assert_int_eq(memcmp(want, back, n), 0);
    free(back);
}

/* Shared reply bytes are compressed on first demand, once, and only when it
 * pays: a text table yes, an NPY-like body of random doubles never. */
START_TEST(shared_gzip_on_demand_when_it_pays)
{
    size_t n = 200000;
    char *text = malloc(n), *doubles = malloc(n);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        text[i] = "0123456789,.\r\n-e"[(i * 7 + i / 13) % 16];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        doubles[i] = (char)x;
    }
    double ratio;
    ck_assert(es_gzip_pays(text, n, &ratio));
    ck_assert(ratio < 0.9);
    ck_assert(!es_gzip_pays(doubles, n, &ratio));
    ck_assert(!es_gzip_pays(text, 100, &ratio)); /* under ES_GZIP_MIN_BYTES */

    es_reply a = {.status = 200, .body = text, .len = n}, b = {.status = 200, .body = doubles, .len = n};
    es_shared_adopt(&a);
    es_shared_adopt(&b);
    ck_assert_ptr_eq(a.body, text); /* taken over, not copied */
    ck_assert_ptr_null(a.gz);
    const char *gz, *gz2;
    size_t gz_len, gz_len2;
    ck_assert(es_shared_gzip(a.shared, NULL, &gz, &gz_len)); /* no pool: made here */
    ck_assert(es_shared_gzip(a.shared, NULL, &gz2, &gz_len2));
    ck_assert_ptr_eq(gz, gz2); /* once */
    assert_gunzips_to(gz, gz_len, text, n);
    ck_assert(!es_shared_gzip(b.shared, NULL, &gz, &gz_len));
    es_reply given;
    es_shared_give(&a, &given);
    es_reply_release(&a);
    ck_assert(es_shared_gzip(given.shared, NULL, &gz, &gz_len)); /* the last reference keeps both */
    es_reply_release(&given);
    es_reply_release(&b);
}
END_TEST

START_TEST(gzip_round_trips)
{
    size_t n = 100000;
    char *text = malloc(n);
    for (size_t i = 0; i < n; i++)
        text[i] = "0123456789,.[]"[(i * 7 + i / 13) % 14];
    char *z;
    size_t zlen;
    ck_assert_int_eq(es_gzip(text, n, &z, &zlen), 0);
    ck_assert_uint_lt(zlen, n);
    ck_assert_int_eq((unsigned char)z[0], 0x1f); /* gzip magic */
    ck_assert_int_eq((unsigned char)z[1], 0x8b);
    char *back = malloc(n);
    z_stream zs = {0};
    ck_assert_int_eq(inflateInit2(&zs, 16 + MAX_WBITS), Z_OK);
    zs.next_in = (Bytef *)z;
    zs.avail_in = (uInt)zlen;
    zs.next_out = (Bytef *)back;
    zs.avail_out = (uInt)n;
    ck_assert_int_eq(inflate(&zs, Z_FINISH), Z_STREAM_END);
    ck_assert_uint_eq(zs.total_out, n);
    inflateEnd(&zs);
    ck_assert_int_eq(memcmp(text, back, n), 0);
    free(text);
    free(back);
    free(z);
}
END_TEST

/* ---------------------------------------------------------------- routes.c + metrics.c */

START_TEST(routes_match_and_capture)
{
    es_ctx cx = {0};
    const es_route *r = es_route_find("/v1/models/gpt2-small/matrices/h0.q/pca", &cx);
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(r->pattern, "/v1/models/{model}/matrices/{matrix}/pca");
    ck_assert_str_eq(cx.model, "gpt2-small");
    ck_assert_str_eq(cx.matrix, "h0.q");
    ck_assert_ptr_nonnull(es_route_find("/v1/models", &cx));
    ck_assert_str_eq(es_route_find("/v1/models/gpt2-small", &cx)->pattern, "/v1/models/{model}");
    ck_assert_str_eq(cx.model, "gpt2-small");
    ck_assert_ptr_nonnull(es_route_find("/v1/capture", &cx));
    ck_assert_ptr_nonnull(es_route_find("/problems/not-found", &cx));
    ck_assert_str_eq(cx.slug, "not-found");
    ck_assert_str_eq(es_route_find("/", &cx)->pattern, "/"); /* the dashboard */
    ck_assert_str_eq(es_route_find("/assets/app.0123.js", &cx)->pattern, "/assets/{file}");
    ck_assert_str_eq(cx.slug, "app.0123.js");
    static const char *const misses[] = {"", "//", "/assets/", "/assets/a/b", "/v1/models/", "/v1/models/a/matrices", "/v1/models//matrices/b",
                                         "/v1/models/a/matrices/b/pca/", "/v1/models/a/matrices/b/nope", "/healthzz",
                                         "v1/models", "/V1/models"};
    for (size_t i = 0; i < sizeof misses / sizeof *misses; i++)
        ck_assert_msg(es_route_find(misses[i], &cx) == NULL, "matched '%s'", misses[i]);
    char long_path[400];
    snprintf(long_path, sizeof long_path, "/v1/models/%0200d/matrices/b", 0);
    ck_assert_ptr_null(es_route_find(long_path, &cx));
}
END_TEST

START_TEST(metrics_exposition)
{
    es_metrics mx = {.timeout_le = 90};
    es_cache *cache = es_cache_new(1 << 20);
    es_metrics_observe(&mx, "/v1/models", 200, 0.002, 100);
    es_metrics_observe(&mx, NULL, 404, 0.2, 50);
    es_metrics_observe(&mx, "/v1/models", 304, 2, 0);
    es_metrics_observe(&mx, "/readyz", 503, 0.001, 0); /* warming: not a server error */
    es_metrics_observe(&mx, "/v1/capture", 504, 75, 0);
    es_catalogue *reg;
    es_err err;
    ck_assert_msg(es_config_load_text(small_config, "test", ".", &reg, &err) == 0, "%s", err.message);
    atomic_store(&mx.reload_failures, 2);
    char *text = es_metrics_text(&mx, cache, NULL, NULL, NULL, true, reg);
    es_catalogue_free(reg);
    ck_assert_ptr_nonnull(strstr(text, "embedscope_http_requests_total{code=\"2xx\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_http_requests_total{code=\"3xx\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_http_requests_total{code=\"4xx\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_http_requests_total{code=\"5xx\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_http_request_duration_seconds_bucket{le=\"0.0025\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_http_request_duration_seconds_bucket{le=\"0.5\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_http_request_duration_seconds_bucket{le=\"60\"} 4\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_http_request_duration_seconds_bucket{le=\"90\"} 5\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_http_request_duration_seconds_bucket{le=\"+Inf\"} 5\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_http_response_bytes_total 150\n"));
    ck_assert_ptr_nonnull(strstr(text, "# TYPE embedscope_svd_computations_total counter\nembedscope_svd_computations_total 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_svd_cache_max_bytes 1048576\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_ready 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_matrices 2\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_user_matrices 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_config_reloads_total 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "embedscope_config_reload_failures_total 2\n"));
    char info[160];
    snprintf(info, sizeof info, "embedscope_build_info{version=\"%s\",commit=\"%s\"} 1\n", ES_VERSION, es_build_commit);
    ck_assert_ptr_nonnull(strstr(text, info));
    ck_assert(strlen(es_build_commit) > 0);
    free(text);
    es_cache_free(cache);
}
END_TEST

/* Threads counting at once (more of them than shards): the exposition sums every shard. */
#define OBSERVERS (ES_METRICS_SHARDS + 4)
#define OBSERVATIONS 2000

static void *observe_many(void *arg)
{
    es_metrics *mx = arg;
    for (int i = 0; i < OBSERVATIONS; i++) {
        es_metrics_in_flight(mx, 1);
        es_metrics_observe(mx, "/v1/models", i % 2 ? 200 : 404, 0.002, 10);
        es_metrics_observe_route(mx, "/v1/models", "GET", i % 2 ? 200 : 404, 0.002);
        es_metrics_in_flight(mx, -1);
    }
    es_metrics_in_flight(mx, 1); /* one left in flight per thread */
    return NULL;
}

START_TEST(metrics_sharded_counters_sum)
{
    static es_metrics mx = {.timeout_le = 60};
    pthread_t t[OBSERVERS];
    for (int i = 0; i < OBSERVERS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, observe_many, &mx), 0);
    for (int i = 0; i < OBSERVERS; i++)
        pthread_join(t[i], NULL);
    es_cache *cache = es_cache_new(1 << 20);
    es_catalogue *reg;
    es_err err;
    ck_assert_msg(es_config_load_text(small_config, "test", ".", &reg, &err) == 0, "%s", err.message);
    char *text = es_metrics_text(&mx, cache, NULL, NULL, NULL, true, reg);
    es_catalogue_free(reg);
    char want[200];
    unsigned long half = OBSERVERS * OBSERVATIONS / 2;
    snprintf(want, sizeof want, "embedscope_http_requests_total{code=\"2xx\"} %lu\n", half);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof want, "embedscope_http_requests_total{code=\"4xx\"} %lu\n", half);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof want, "embedscope_http_response_bytes_total %lu\n", 20 * half);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof want, "embedscope_http_requests_in_flight %d\n", OBSERVERS);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof want, "embedscope_http_route_requests_total{route=\"/v1/models\",method=\"GET\",code=\"404\"} %lu\n",
             half);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof want, "embedscope_http_route_request_duration_seconds_count{route=\"/v1/models\",method=\"GET\"} %lu\n",
             2 * half);
    ck_assert_ptr_nonnull(strstr(text, want));
    ck_assert_ptr_null(strstr(strstr(text, "code=\"404\"}") + 1, "code=\"404\"}")); /* one series, merged */
    ck_assert_int_eq(es_metrics_in_flight_now(&mx), OBSERVERS);
    free(text);
    es_metrics_free(&mx);
    es_cache_free(cache);
}
END_TEST

/* ---------------------------------------------------------------- api.c through the router */

static es_app app;

static void app_setup(void)
{
    es_catalogue *reg;
    es_err err;
    ck_assert_msg(es_config_load_text(small_config, "test", ".", &reg, &err) == 0, "%s", err.message);
    ck_assert_int_eq(es_app_init(&app, reg, &err), 0);
}

static void app_teardown(void) { es_app_free(&app); }

/* Dispatch path?pairs through the router; returns the handler's result and leaves the reply in cx. */
static int call(es_ctx *cx, es_query *q, const char *path, const char *const *pairs, es_err *err)
{
    *q = query_of(pairs);
    *cx = (es_ctx){.app = &app, .query = q, .path = path, .reg = app.reg};
    const es_route *r = es_route_find(path, cx);
    ck_assert_ptr_nonnull(r);
    return es_route_dispatch(r, cx, err);
}

static void reply_free(es_ctx *cx, es_query *q)
{
    es_reply_release(&cx->reply);
    es_query_free(q);
}

static json_t *reply_json(const es_ctx *cx)
{
    ck_assert_uint_eq(cx->reply.status, 200);
    ck_assert_str_eq(cx->reply.content_type, "application/json");
    json_t *j = json_loadb(cx->reply.body, cx->reply.len, 0, NULL);
    ck_assert_ptr_nonnull(j);
    return j;
}

START_TEST(pca_handler_echoes_input_and_sums_to_one)
{
    es_ctx cx;
    es_query q;
    es_err err;
    const char *path = "/v1/models/m/matrices/pe/pca";
    ck_assert_int_eq(call(&cx, &q, path, (const char *const[]){"rows", "1:7", "k", "6", NULL}, &err), 0);
    json_t *j = reply_json(&cx);
    json_t *in = json_object_get(json_object_get(j, "input"), "matrix");
    ck_assert_str_eq(json_string_value(json_object_get(in, "id")), "m/pe");
    ck_assert_str_eq(json_string_value(json_object_get(in, "rows")), "1:7");
    ck_assert_int_eq(json_integer_value(json_object_get(in, "n_rows")), 6);
    ck_assert_str_eq(json_string_value(json_object_get(in, "center")), "columns");
    ck_assert_str_eq(json_string_value(json_object_get(in, "solver")), "dgesdd");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "input"), "k")), 6);
    json_t *rows = json_object_get(j, "rows");
    ck_assert_uint_eq(json_array_size(rows), 6);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(rows, 0), "index")), 1);
    /* k = 6 covers every component of 6 rows: the ratios sum to 1. */
    json_t *evr = json_object_get(j, "explained_variance_ratio");
    double sum = 0;
    for (size_t i = 0; i < json_array_size(evr); i++)
        sum += json_real_value(json_array_get(evr, i));
    ck_assert_double_eq_tol(sum, 1, 1e-12);
    ck_assert_double_eq_tol(json_real_value(json_array_get(json_object_get(j, "cumulative"), 5)), 1, 1e-12);
    /* The coordinates X V of all components keep the centred rows' total sum of squares,
     * computed here from the closed form of the encoding. */
    double coords_ss = 0, want_ss = 0, mean[8] = {0};
    for (size_t r = 0; r < 6; r++)
        for (size_t c = 0; c < 6; c++)
            coords_ss += pow(json_real_value(json_array_get(json_object_get(json_array_get(rows, r), "coords"), c)), 2);
    for (int p = 1; p < 7; p++)
        for (int c = 0; c < 8; c++)
            mean[c] += sinusoid(p, c) / 6;
    for (int p = 1; p < 7; p++)
        for (int c = 0; c < 8; c++)
            want_ss += pow(sinusoid(p, c) - mean[c], 2);
    ck_assert_double_eq_tol(coords_ss, want_ss, 1e-12 * want_ss);
    ck_assert_str_eq(cx.reply.cache_control, "public, max-age=86400");
    char etag[40];
    memcpy(etag, cx.reply.etag, sizeof etag);
    json_decref(j);
    reply_free(&cx, &q);

    /* The same request spelled differently has the same ETag, and If-None-Match gives 304. */
    q = query_of((const char *const[]){"k", "6", "rows", "1:7:1", NULL});
    cx = (es_ctx){.app = &app, .query = &q, .path = path, .if_none_match = etag, .reg = app.reg};
    ck_assert_int_eq(es_route_dispatch(es_route_find(path, &cx), &cx, &err), 0);
    ck_assert_uint_eq(cx.reply.status, 304);
    ck_assert_str_eq(cx.reply.etag, etag);
    reply_free(&cx, &q);
}
END_TEST

/* A request is parsed once: an HTTP thread (may_defer) defers it with its
 * parsed run (cx.parsed), which the compute side resumes without checking or
 * parsing the query again (a parameter added to it meanwhile is not refused).
 * The HTTP thread never builds an averaged copy: such a request goes unkeyed
 * (no claim, no key), and the compute side builds the copy and keys the reply
 * by it; once the copy is built an HTTP thread keys the same request with the
 * same ETag and answers it from the response cache, or 304. */
START_TEST(request_parsed_once_and_averaged_where_computed)
{
    es_ctx cx;
    es_query q;
    es_err err;
    const char *path = "/v1/models/m/matrices/pe/pca";
    const char *const pairs[] = {"k", "2", "rows", "0:12", "average", "3", NULL};
    q = query_of(pairs);
    cx = (es_ctx){.app = &app, .query = &q, .path = path, .reg = app.reg, .may_defer = true};
    ck_assert_int_eq(es_route_dispatch(es_route_find(path, &cx), &cx, &err), 0);
    ck_assert(cx.deferred);
    ck_assert_ptr_null(cx.claim);
    ck_assert_str_eq(cx.key, "");
    ck_assert_uint_eq(app.n_derived, 0);
    ck_assert_ptr_nonnull(cx.parsed);
    es_parsed *parsed = cx.parsed;
    es_render_opts render = cx.render;
    es_cost cost = cx.cost;
    reply_free(&cx, &q);

    /* the job: the parsed run resumed on the compute side */
    q = query_of((const char *const[]){"k", "2", "rows", "0:12", "average", "3", "bogus", "1", NULL});
    cx = (es_ctx){.app = &app, .query = &q, .path = path, .reg = app.reg, .parsed = parsed, .render = render,
                  .cost = cost};
    ck_assert_int_eq(es_route_dispatch(es_route_find(path, &cx), &cx, &err), 0);
    json_t *j = reply_json(&cx);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(json_object_get(j, "input"), "matrix"),
                                                        "average")), 3);
    ck_assert_uint_eq(json_array_size(json_object_get(j, "explained_variance_ratio")), 2);
    json_decref(j);
    ck_assert_uint_eq(app.n_derived, 1);
    char etag[40];
    memcpy(etag, cx.reply.etag, sizeof etag);
    es_parsed_free(cx.parsed);
    reply_free(&cx, &q);

    for (int conditional = 0; conditional < 2; conditional++) {
        q = query_of(pairs);
        cx = (es_ctx){.app = &app, .query = &q, .path = path, .reg = app.reg, .may_defer = true,
                      .if_none_match = conditional ? etag : NULL};
        ck_assert_int_eq(es_route_dispatch(es_route_find(path, &cx), &cx, &err), 0);
        ck_assert(!cx.deferred);
        ck_assert_uint_eq(cx.reply.status, conditional ? 304 : 200);
        ck_assert_str_eq(cx.reply.etag, etag);
        es_parsed_free(cx.parsed);
        reply_free(&cx, &q);
    }
    ck_assert_uint_eq(app.n_derived, 1);
    /* the same request parsed again where it is computed (no parsed run) gives the same reply */
    ck_assert_int_eq(call(&cx, &q, path, pairs, &err), 0);
    ck_assert_str_eq(cx.reply.etag, etag);
    reply_free(&cx, &q);
}
END_TEST

/* compare hands its parsed comparison over too: resumed with a parameter added
 * to the query (a re-parse would refuse it), it answers as parsed. */
START_TEST(compare_parsed_once)
{
    es_ctx cx;
    es_query q;
    es_err err;
    const char *path = "/v1/compare";
    q = query_of((const char *const[]){"matrices", "m/pe,m/pe", "analysis", "pca", "k", "2", "rows", "0:12", "average", "2", NULL});
    cx = (es_ctx){.app = &app, .query = &q, .path = path, .reg = app.reg, .may_defer = true};
    int rc0 = es_route_dispatch(es_route_find(path, &cx), &cx, &err);
    ck_assert_msg(rc0 == 0, "%s (%s)", err.message, err.param);
    ck_assert(cx.deferred);
    ck_assert_ptr_nonnull(cx.parsed);
    ck_assert_uint_eq(app.n_derived, 0);
    es_parsed *parsed = cx.parsed;
    es_render_opts render = cx.render;
    reply_free(&cx, &q);
    q = query_of((const char *const[]){"matrices", "m/pe,m/pe", "analysis", "pca", "k", "2", "rows", "0:12", "average", "2", "bogus",
                                       "1", NULL});
    cx = (es_ctx){.app = &app, .query = &q, .path = path, .reg = app.reg, .parsed = parsed, .render = render};
    ck_assert_int_eq(es_route_dispatch(es_route_find(path, &cx), &cx, &err), 0);
    json_t *j = reply_json(&cx);
    ck_assert_uint_eq(json_array_size(json_object_get(j, "results")), 2);
    json_decref(j);
    ck_assert_uint_eq(app.n_derived, 1);
    es_parsed_free(cx.parsed);
    reply_free(&cx, &q);
}
END_TEST

START_TEST(spectrum_handler_full_rank_sums_to_one)
{
    es_ctx cx;
    es_query q;
    es_err err;
    ck_assert_int_eq(call(&cx, &q, "/v1/models/m/matrices/pe/spectrum", (const char *const[]){"rows", "0:12", "center",
                                                                                             "none", NULL}, &err), 0);
    json_t *j = reply_json(&cx);
    json_t *s = json_object_get(j, "singular_values");
    ck_assert_uint_eq(json_array_size(s), 8);
    /* ||PE||_F^2 = n d / 2 for the sinusoidal encoding (each row has squared norm d/2). */
    double ss = 0;
    for (size_t i = 0; i < 8; i++)
        ss += pow(json_real_value(json_array_get(s, i)), 2);
    ck_assert_double_eq_tol(ss, 12 * 8 / 2.0, 1e-10);
    ck_assert_double_eq_tol(json_real_value(json_array_get(json_object_get(j, "cumulative"), 7)), 1, 1e-12);
    json_decref(j);
    reply_free(&cx, &q);
}
END_TEST

START_TEST(cosine_handler_matches_closed_form)
{
    es_ctx cx;
    es_query q;
    es_err err;
    ck_assert_int_eq(call(&cx, &q, "/v1/models/m/matrices/pe/cosine", (const char *const[]){"row", "2", "rows", "0:12",
                                                                                           NULL}, &err), 0);
    json_t *j = reply_json(&cx);
    json_t *sim = json_object_get(j, "similarity");
    ck_assert_uint_eq(json_array_size(sim), 12);
    for (int p = 0; p < 12; p++) {
        /* (2/d) sum_i cos(w_i (p - 2)), w_i = 10000^(-2i/d), d = 8. */
        double want = 0;
        for (int i = 0; i < 4; i++)
            want += cos(pow(10000, -2.0 * i / 8) * (p - 2));
        want *= 2.0 / 8;
        ck_assert_double_eq_tol(json_real_value(json_array_get(sim, (size_t)p)), want, 1e-12);
    }
    json_decref(j);
    reply_free(&cx, &q);

    ck_assert_int_eq(call(&cx, &q, "/v1/models/m/matrices/pe/cosine",
                          (const char *const[]){"mode", "matrix", "rows", "0:12", "bins", "5", NULL}, &err), -1);
    ck_assert_int_eq(err.code, ES_E_LIMIT);
    ck_assert_str_eq(err.param, "max_bins");
    reply_free(&cx, &q);
    ck_assert_int_eq(call(&cx, &q, "/v1/models/m/matrices/pe/cosine",
                          (const char *const[]){"mode", "offset", "rows", "0:12", "bins", "2", NULL}, &err), -1);
    ck_assert_str_eq(err.param, "bins");
    reply_free(&cx, &q);
    ck_assert_int_eq(call(&cx, &q, "/v1/models/m/matrices/pe/cosine", (const char *const[]){"row", "16", "rows", "0:4",
                                                                                           NULL}, &err), -1);
    ck_assert_str_eq(err.param, "row");
    reply_free(&cx, &q);
}
END_TEST

START_TEST(handler_errors_name_parameters)
{
    const struct {
        const char *path;
        const char *const *pairs;
        es_errcode code;
        const char *param;
    } cases[] = {
        {"/v1/models/x/matrices/pe/pca", (const char *const[]){NULL}, ES_E_NOTFOUND, "model"},
        {"/v1/models/m/matrices/x/pca", (const char *const[]){NULL}, ES_E_NOTFOUND, "matrix"},
        {"/v1/models/m/matrices/pe", (const char *const[]){"k", "3", NULL}, ES_E_PARAM, "k"},
        {"/v1/models/m/matrices/pe/pca", (const char *const[]){"rows", "0:4", "k", "5", NULL}, ES_E_PARAM, "k"},
        {"/v1/models/m/matrices/pe/vectors", (const char *const[]){"rows", "0:4", "side", "up", NULL}, ES_E_PARAM,
         "side"},
        {"/v1/capture", (const char *const[]){"a", "m/pe", "b", "m/pe4", NULL}, ES_E_INCOMPATIBLE, "b"},
        {"/v1/capture", (const char *const[]){"a", "m/pe", NULL}, ES_E_PARAM, "b"},
        {"/v1/capture", (const char *const[]){"a", "m/zz", "b", "m/pe", NULL}, ES_E_NOTFOUND, "a"},
        {"/v1/overlap", (const char *const[]){"a", "m/pe", "b", "m/pe", "a_rows", "0:8", "b_rows", "0:8", "ka", "9",
                                              NULL}, ES_E_PARAM, "ka"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        es_ctx cx;
        es_query q;
        es_err err = {0};
        ck_assert_int_eq(call(&cx, &q, cases[i].path, cases[i].pairs, &err), -1);
        ck_assert_msg(err.code == cases[i].code && strcmp(err.param, cases[i].param) == 0,
                      "case %zu: %s %s (%s)", i, es_errcode_name(err.code), err.param, err.message);
        reply_free(&cx, &q);
    }
}
END_TEST

START_TEST(capture_handler_sums_to_k_over_a_complete_basis)
{
    es_ctx cx;
    es_query q;
    es_err err;
    ck_assert_int_eq(call(&cx, &q, "/v1/capture",
                          (const char *const[]){"a", "m/pe", "b", "m/pe", "a_rows", "0:12", "b_rows", "4:16", "k", "3",
                                                NULL},
                          &err),
                     0);
    json_t *j = reply_json(&cx);
    json_t *in = json_object_get(j, "input");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(in, "a"), "center")), "none");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(in, "b"), "rows")), "4:16");
    ck_assert_uint_eq(json_array_size(json_object_get(j, "capture")), 8);
    ck_assert_double_eq_tol(json_real_value(json_object_get(j, "sum")), 3, 1e-12);
    ck_assert_double_eq_tol(json_real_value(json_object_get(j, "baseline")), 3.0 / 8, 1e-15);
    json_decref(j);
    reply_free(&cx, &q);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("http-params");
    TCase *tc = tcase_create("params");
    tcase_add_test(tc, query_check_refuses_unknown_and_duplicates);
    tcase_add_test(tc, size_parameter_rules);
    tcase_add_test(tc, double_parameter_rules);
    tcase_add_test(tc, choice_parameter_rules);
    tcase_add_test(tc, k_parameter_rules);
    tcase_add_test(tc, selection_resolves_and_names_prefixed_parameters);
    tcase_add_test(tc, selection_limits);
    tcase_add_test(tc, range_parameter_rules);
    tcase_add_test(tc, list_parameter_rules);
    suite_add_tcase(s, tc);
    tc = tcase_create("problem-render");
    tcase_add_test(tc, problems_map_error_classes);
    tcase_add_test(tc, problem_text_is_valid_utf8);
    tcase_add_test(tc, numbers_round_trip_exactly);
    tcase_add_test(tc, non_finite_numbers_fail_the_response);
    tcase_add_test(tc, response_size_limit_is_named);
    suite_add_tcase(s, tc);
    tc = tcase_create("negotiate-routes-metrics");
    tcase_add_test(tc, accept_encoding);
    tcase_add_test(tc, etag_weak_comparison);
    tcase_add_test(tc, cors_and_request_ids);
    tcase_add_test(tc, forwarded_prefix_is_a_clean_path);
    tcase_add_test(tc, forwarded_for_names_the_last_hop);
    tcase_add_test(tc, problem_rebase_prefixes_type_and_instance);
    tcase_add_test(tc, gzip_round_trips);
    tcase_add_test(tc, shared_gzip_on_demand_when_it_pays);
    tcase_add_test(tc, routes_match_and_capture);
    tcase_add_test(tc, pair_selection_prefixes_come_from_the_descriptor);
    tcase_add_test(tc, route_parameter_lists_fit);
    tcase_add_test(tc, api_description_comes_from_the_tables);
    tcase_add_test(tc, every_analysis_exports_its_examples);
    tcase_add_test(tc, metrics_exposition);
    tcase_add_test(tc, metrics_sharded_counters_sum);
    suite_add_tcase(s, tc);
    tc = tcase_create("handlers");
    tcase_add_checked_fixture(tc, app_setup, app_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, pca_handler_echoes_input_and_sums_to_one);
    tcase_add_test(tc, request_parsed_once_and_averaged_where_computed);
    tcase_add_test(tc, compare_parsed_once);
    tcase_add_test(tc, spectrum_handler_full_rank_sums_to_one);
    tcase_add_test(tc, cosine_handler_matches_closed_form);
    tcase_add_test(tc, handler_errors_name_parameters);
    tcase_add_test(tc, capture_handler_sums_to_k_over_a_complete_basis);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
