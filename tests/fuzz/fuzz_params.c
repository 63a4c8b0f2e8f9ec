/* libFuzzer target: the query-parameter layer of the daemon (src/api/params.c).
 *
 * Input: a query string "k=v&k=v..." already percent-decoded, as libmicrohttpd
 * hands it to the server (a bare "k" has no value). Every parsing entry point of
 * params.c runs on it against a small generated registry, and each result is
 * checked: successes against independent rules (ranges, limits, selections within
 * the matrix and without excluded rows, lossless comma splitting), failures for
 * their error class and for a problem document (RFC 9457) that renders with the
 * client's text in it. abort() on any broken rule. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedscope/config.h"
#include "embedscope/rowsel.h"
#include "embedscope/descriptor.h"
#include "embedscope/params.h"
#include "embedscope/problem.h"
#include "embedscope/render.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Small matrices: t/pe 50 items, t/g 6 items of dimension 4, t/pt (pe with the
 * other model axis: 8 items), u/rope 1024 items. */
static const char CONFIG[] =
    "{\"models\": {"
    " \"t\": {\"matrices\": {"
    "  \"pe\": {\"generator\": \"sinusoidal\", \"n_positions\": 50, \"d_model\": 8},"
    "  \"g\": {\"generator\": \"gaussian\", \"rows\": 6, \"cols\": 4, \"seed\": 3},"
    "  \"pt\": {\"view\": \"pe\", \"model_axis\": \"rows\"}}},"
    " \"u\": {\"matrices\": {"
    "  \"rope\": {\"generator\": \"rope\", \"n_positions\": 1024, \"d_model\": 2}}}}}";

static const es_limits LIMITS = {
    .max_k = 16, .max_bins = 64, .max_rows = 600, .max_response_bytes = 1 << 20, .max_exclude = 8};

/* What an endpoint could allow (es_query_check). */
static const char *const ALLOWED[] = {"matrix", "rows", "exclude", "center", "k", "gap", "side",
                                      "bins", "range", "offsets", "a", "a_rows", "a_exclude", NULL};
static const char *const SIDES[] = {"right", "left", "both", NULL};

static es_catalogue *reg;

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_params: %s: %s\n", what, detail);
    abort();
}

/* The registry the matrix parameters are looked up in. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    es_log_set_level(ES_LOG_ERROR);
    es_err err;
    if (es_config_load_text(CONFIG, "fuzz_params", ".", &reg, &err) != 0)
        fail("cannot load the registry", err.message);
    return 0;
}

/* ---------------------------------------------------------------- failures */

/* A request failure renders as a problem document with its detail and, when the
 * error names one, its param (limit for ES_E_LIMIT) as JSON strings. */
static void check_problem(const es_err *err)
{
    json_t *p = es_problem_new(es_problem_kind_of(err->code), err->message, err->param, "/v1/fuzz", "fuzz-1");
    const char *named = err->code == ES_E_LIMIT ? "limit" : "param";
    if (!json_is_string(json_object_get(p, "detail")))
        fail("problem without a detail", err->message);
    if (*err->param && !json_is_string(json_object_get(p, named)))
        fail("problem without the parameter it names", err->param);
    char *text = json_dumps(p, JSON_COMPACT);
    if (!text)
        fail("problem does not serialise", err->message);
    free(text);
    json_decref(p);
}

/* A failed parameter call is ES_E_PARAM / ES_E_LIMIT / ES_E_NOTFOUND and renders. */
static void check_failure(const es_err *err)
{
    if (err->code != ES_E_PARAM && err->code != ES_E_LIMIT && err->code != ES_E_NOTFOUND)
        fail("unexpected error class", err->message);
    check_problem(err);
}

/* ---------------------------------------------------------------- the query itself */

/* Split decoded "k=v&k" into q (a bare key gets the NULL value). */
static void parse_query(char *text, es_query *q)
{
    for (char *item = text; item;) {
        char *next = strchr(item, '&');
        if (next)
            *next++ = '\0';
        char *value = strchr(item, '=');
        if (value)
            *value++ = '\0';
        es_query_add(q, item, value);
        item = next;
    }
}

static bool listed(const char *name, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(name, *list) == 0)
            return true;
    return false;
}

/* es_query_check fails exactly when a key is unknown or repeated; es_query_text
 * has every pair; es_split_commas of each value joins back to it; es_jstr takes
 * any key and value. */
static void check_query(const es_query *q)
{
    bool bad = false;
    size_t text_len = q->n ? q->n - 1 : 0;
    for (size_t i = 0; i < q->n; i++) {
        bad |= !listed(q->items[i].key, ALLOWED) || es_query_get(q, q->items[i].key) != q->items[i].value;
        text_len += strlen(q->items[i].key) + 1 + strlen(q->items[i].value);
    }
    es_err err;
    if ((es_query_check(q, ALLOWED, &err) != 0) != bad)
        fail("es_query_check disagrees on unknown or repeated parameters", bad ? "accepted" : err.message);
    if (bad)
        check_failure(&err);
    char *text = es_query_text(q);
    if (strlen(text) != text_len)
        fail("es_query_text lost or added text", text);
    free(text);
    for (size_t i = 0; i < q->n; i++) {
        json_t *k = es_jstr(q->items[i].key), *v = es_jstr(q->items[i].value);
        if (!k || !v)
            fail("es_jstr gave no string", q->items[i].value);
        json_decref(k);
        json_decref(v);
    }
}

/* es_split_commas of text gives commas + 1 items that join back to text. */
static void check_split(const char *text)
{
    size_t n, commas = 0, len = 0;
    for (const char *c = text; *c; c++)
        commas += *c == ',';
    char **items = es_split_commas(text, &n);
    if (n != commas + 1 || items[n])
        fail("es_split_commas count", text);
    for (size_t i = 0; i < n; i++) {
        if (strncmp(text + len, items[i], strlen(items[i])) != 0 || strchr(items[i], ','))
            fail("es_split_commas item", text);
        len += strlen(items[i]) + (i + 1 < n);
    }
    if (len != strlen(text))
        fail("es_split_commas lost text", text);
    es_strv_free(items);
}

/* ---------------------------------------------------------------- scalar parameters */

/* Digits only, no overflow: the rule of es_param_size. */
static bool ref_digits(const char *s, size_t *v)
{
    *v = 0;
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9' || __builtin_mul_overflow(*v, 10, v) ||
            __builtin_add_overflow(*v, (size_t)(*s - '0'), v))
            return false;
    return true;
}

/* "bins": default 32, 1..max_bins; above it ES_E_LIMIT naming `limit`, or
 * ES_E_PARAM naming "bins" when limit is NULL. */
static void check_size(const es_query *q, const char *limit)
{
    const char *text = es_query_get(q, "bins");
    size_t v = 32, got;
    bool ok = !text || ref_digits(text, &v), valid = ok && v >= 1 && v <= LIMITS.max_bins;
    es_err err;
    int rc = es_param_size(q, "bins", 32, 1, LIMITS.max_bins, limit, &got, &err);
    if ((rc == 0) != valid || (rc == 0 && got != v))
        fail("es_param_size disagrees with the digits rule", text ? text : "(absent)");
    if (rc != 0) {
        es_errcode code = limit ? ES_E_LIMIT : ES_E_PARAM;
        const char *named = limit ? limit : "bins";
        if (ok && v > LIMITS.max_bins && (err.code != code || strcmp(err.param, named) != 0))
            fail("es_param_size above the maximum names the wrong limit or parameter", err.message);
        check_failure(&err);
    }
}

/* "gap" in [0, 1], "side" one of SIDES, "k" within max_k and the rank. */
static void check_scalars(const es_query *q, const es_matrix *m)
{
    es_err err;
    double gap;
    if (es_param_double(q, "gap", 1e-6, 0, 1, &gap, &err) != 0)
        check_failure(&err);
    else if (!(gap >= 0 && gap <= 1))
        fail("es_param_double out of range", es_query_get(q, "gap"));
    size_t side;
    const char *text = es_query_get(q, "side");
    if (es_param_choice(q, "side", SIDES, 0, &side, &err) != 0) {
        if (text && listed(text, SIDES))
            fail("es_param_choice refused a choice", text);
        check_failure(&err);
    } else if (text ? strcmp(SIDES[side], text) != 0 : side != 0) {
        fail("es_param_choice returned another choice", text);
    }
    size_t rank = es_matrix_items(m) < es_matrix_dim(m) ? es_matrix_items(m) : es_matrix_dim(m), k;
    const es_pspec k_spec[] = {{.name = "k", .kind = ES_P_SIZE, .def = 5, .min = 1, .limit = "max_k",
                                .bound = ES_BOUND_RANK, .offset = 0},
                               {0}};
    es_pctx pc = {.rank = {rank}, .lim = &LIMITS};
    if (es_spec_parse(k_spec, q, &pc, &k, &err) != 0)
        check_failure(&err);
    else if (k < 1 || k > LIMITS.max_k || k > rank)
        fail("es_spec_parse: k out of range", es_query_get(q, "k"));
}

/* ---------------------------------------------------------------- selections and ranges */

/* <prefix>rows/<prefix>exclude of m: on success 1..max_rows distinct-position
 * indices below the item count, none of them excluded, and the canonical text. */
static void check_selection(const es_query *q, const char *prefix, bool with_center, const es_matrix *m)
{
    es_selection sel;
    es_err err;
    if (es_param_selection(q, prefix, with_center, ES_CENTER_COLUMNS, m, &LIMITS, &sel, &err) != 0) {
        check_failure(&err);
        return;
    }
    char name[40];
    snprintf(name, sizeof name, "%sexclude", prefix);
    const char *exclude = es_query_get(q, name);
    size_t *ex = NULL, n_ex = 0;
    if (exclude && es_index_list_parse(exclude, name, &ex, &n_ex, &err) != 0)
        fail("selection accepted with a malformed exclude list", exclude);
    if (sel.n == 0 || sel.n > LIMITS.max_rows || n_ex > LIMITS.max_exclude)
        fail("selection breaks a limit", sel.canonical);
    for (size_t i = 0; i < sel.n; i++) {
        if (sel.idx[i] >= es_matrix_items(m))
            fail("selected row out of range", sel.canonical);
        for (size_t j = 0; j < n_ex; j++)
            if (sel.idx[i] == ex[j])
                fail("an excluded row is selected", sel.canonical);
    }
    char *canon = es_rows_canonical(sel.idx, sel.n);
    if (strcmp(canon, sel.canonical) != 0 || (!with_center && sel.center != ES_CENTER_NONE) ||
        (unsigned)sel.center > ES_CENTER_ROWS)
        fail("selection canonical text or centring", sel.canonical);
    free(canon);
    free(ex);
    es_selection_free(&sel);
}

/* "range" over the matrix's items: 0 <= start < stop <= items. */
static void check_range(const es_query *q, const es_matrix *m)
{
    size_t start, stop, n = es_matrix_items(m);
    es_err err;
    if (es_param_range(q, "range", n, &start, &stop, &err) != 0)
        check_failure(&err);
    else if (!(start < stop && stop <= n))
        fail("es_param_range gave an empty or outside range", es_query_get(q, "range"));
}

/* "offsets": absent, or exactly 3 finite numbers. */
static void check_doubles(const es_query *q)
{
    double *v;
    es_err err;
    const char *text = es_query_get(q, "offsets");
    if (es_param_doubles(q, "offsets", 3, &v, &err) != 0) {
        check_failure(&err);
        return;
    }
    if ((v == NULL) != (text == NULL))
        fail("es_param_doubles result vs presence", text ? text : "(absent)");
    for (size_t i = 0; v && i < 3; i++)
        if (v[i] != v[i] || v[i] - v[i] != 0)
            fail("es_param_doubles gave a non-finite number", text);
    free(v);
}

/* The matrix named by parameter `name`, else the registry's t/pe. */
static const es_matrix *matrix_param(const es_query *q, const char *name)
{
    const es_matrix *m;
    es_err err;
    if (es_param_matrix(q, name, reg, &m, &err) == 0)
        return m;
    check_failure(&err);
    return es_catalogue_matrix(reg, "t", "pe");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    es_query q;
    es_query_init(&q);
    parse_query(text, &q);
    free(text);

    check_query(&q);
    for (size_t i = 0; i < q.n; i++)
        check_split(q.items[i].value);
    const es_matrix *m = matrix_param(&q, "matrix"), *a = matrix_param(&q, "a");
    check_size(&q, "max_bins");
    check_size(&q, NULL);
    check_scalars(&q, m);
    check_selection(&q, "", true, m);
    check_selection(&q, "a_", false, a);
    check_range(&q, m);
    check_doubles(&q);
    es_query_free(&q);
    return 0;
}
