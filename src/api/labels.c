/* Labels and metadata of a matrix's items over HTTP (reads; the writes are
 * uploads.c's): GET .../labels as JSON, CSV or TSV, GET .../labels/search
 * and the cells /rows returns (their summary in the catalogue is render.c's). */
#include "embedscope/app.h"
#include "embedscope/cost.h"
#include "embedscope/params.h"
#include "embedscope/render.h"
#include "embedscope/results.h"
#include "embedscope/route.h"
#include "embedscope/uploads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most row indices one search returns, and its default. */
#define SEARCH_LIMIT_MAX 10000
#define SEARCH_LIMIT_DEFAULT 100

/* See uploads.h. */
json_t *es_labels_rows_json(const es_labels *l, const size_t *idx, size_t n)
{
    json_t *cols = json_object();
    for (size_t c = 0; c < l->n_cols; c++) {
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(a, es_jstr(l->cells[idx[i] * l->n_cols + c]));
        json_object_set_new(cols, l->names[c], a);
    }
    return cols;
}

/* See uploads.h. */
int es_labels_reply(const es_app *app, const es_labels *l, es_reply *rep, es_err *err)
{
    json_t *root = es_render_labels_info(l);
    int rc = es_json_body(root, app->limits.max_response_bytes, &rep->body, &rep->len, err);
    json_decref(root);
    if (rc < 0)
        return -1;
    rep->status = 200;
    rep->content_type = "application/json";
    rep->cache_control = "no-store";
    return 0;
}

/* The labels of the path's matrix: ES_E_NOTFOUND naming "model", "matrix"
 * or, when it has none, "labels". */
static int path_labels(es_ctx *cx, const es_labels **out, es_err *err)
{
    const es_matrix *m;
    if (es_path_matrix(cx, &m, err) < 0)
        return -1;
    *out = es_catalogue_labels(cx->reg, cx->model, cx->matrix);
    if (!*out)
        return es_fail(err, ES_E_NOTFOUND, "labels", "%s/%s has no labels (PUT them to this path, or name a "
                       "\"labels\" file in the configuration)", cx->model, cx->matrix);
    return 0;
}

/* The representation asked for: ?format=, else the Accept header (text/csv,
 * text/tab-separated-values), else JSON. */
static int labels_format(const es_ctx *cx, es_labels_format *out, es_err *err)
{
    static const char *const formats[] = {"json", "csv", "tsv", NULL};
    static const es_labels_format by_index[] = {ES_LABELS_JSON, ES_LABELS_CSV, ES_LABELS_TSV};
    size_t f = 0;
    if (!es_query_get(cx->query, "format") && cx->accept)
        f = strstr(cx->accept, "text/csv") ? 1 : strstr(cx->accept, "text/tab-separated-values") ? 2 : 0;
    if (es_param_choice(cx->query, "format", formats, f, &f, err) < 0)
        return -1;
    *out = by_index[f];
    return 0;
}

/* GET .../labels: every row's cells, typed JSON ({"rows", "columns": {NAME:
 * [..]}, "numeric": [NAME..]}), CSV or TSV. Serialised on the compute pool
 * and kept in the response cache by the labels' hash. */
int es_api_labels(es_ctx *cx, es_err *err)
{
    const es_labels *l;
    es_labels_format fmt;
    if (path_labels(cx, &l, err) < 0 || labels_format(cx, &fmt, err) < 0)
        return -1;
    es_cost_pass(&cx->cost, l->bytes / 8, 1); /* one pass over the labels' text */
    char *key = es_asprintf("labels=%s|format=%d", l->sha256, (int)fmt);
    bool settled = es_precheck_listing(cx, key);
    free(key);
    cx->reply.vary_accept = true;
    if (settled)
        return 0;
    size_t len;
    char *text = es_labels_text(l, fmt, true, &len);
    if (cx->reg->limits.max_response_bytes && len > cx->reg->limits.max_response_bytes) {
        free(text);
        return es_fail(err, ES_E_LIMIT, "max_response_bytes", "the labels take %zu bytes as %s, above "
                       "max_response_bytes = %zu", len, fmt == ES_LABELS_JSON ? "JSON" : fmt == ES_LABELS_CSV ? "CSV" : "TSV",
                       cx->reg->limits.max_response_bytes);
    }
    cx->reply.status = 200;
    cx->reply.content_type = fmt == ES_LABELS_JSON  ? "application/json"
                             : fmt == ES_LABELS_CSV ? "text/csv; charset=utf-8; header=present"
                                                    : "text/tab-separated-values; charset=utf-8";
    cx->reply.body = text;
    cx->reply.len = len;
    return 0;
}

/* The searched column: ?column=NAME, else the first (the label). */
static int search_column(const es_ctx *cx, const es_labels *l, size_t *col, es_err *err)
{
    const char *name = es_query_get(cx->query, "column");
    long c = name ? es_labels_column(l, name) : 0;
    if (c < 0)
        return es_fail(err, ES_E_PARAM, "column", "no column \"%.64s\" in the labels (GET /v1/models lists "
                       "them)", name);
    *col = (size_t)c;
    return 0;
}

/* GET .../labels/search?q=&regex=0|1&case=sensitive|insensitive&column=&limit=:
 * the rows whose cell matches, ascending, at most limit, with the total count
 * and their cells. The HTTP thread checks only the parameters (O(request));
 * the pattern is compiled and matched on the compute pool, bounded per cell
 * and stopping at its deadline between cells (es_labels_search). */
int es_api_labels_search(es_ctx *cx, es_err *err)
{
    static const char *const bools[] = {"0", "1", NULL};
    static const char *const cases[] = {"sensitive", "insensitive", NULL};
    const es_labels *l;
    size_t col = 0, regex = 0, caseless = 0, limit = 0;
    const char *q = es_query_get(cx->query, "q");
    if (path_labels(cx, &l, err) < 0 || search_column(cx, l, &col, err) < 0 ||
        es_param_choice(cx->query, "regex", bools, 0, &regex, err) < 0 ||
        es_param_choice(cx->query, "case", cases, 0, &caseless, err) < 0 ||
        es_param_size(cx->query, "limit", SEARCH_LIMIT_DEFAULT, 1, SEARCH_LIMIT_MAX, NULL, &limit, err) < 0)
        return -1;
    if (!q)
        return es_fail(err, ES_E_PARAM, "q", "q is required: the text (or, with regex=1, the PCRE2 regular "
                       "expression) to find");
    if (es_labels_check_query(q, err) < 0)
        return -1;
    unsigned flags = (regex ? ES_SEARCH_REGEX : 0) | (caseless ? ES_SEARCH_CASELESS : 0);
    es_cost_pass(&cx->cost, l->bytes / 8 * (flags ? 16 : 1), 1); /* a pass over the text (16 for PCRE2) */
    char *key = es_asprintf("search|labels=%s|column=%zu|flags=%u|limit=%zu|q=%s", l->sha256, col, flags, limit, q);
    bool settled = es_precheck_listing(cx, key);
    free(key);
    if (settled)
        return 0;
    size_t *idx = es_malloc(limit * sizeof *idx), found = 0, total = 0;
    if (es_labels_search(l, col, q, flags, limit, idx, &found, &total, err) < 0) {
        free(idx);
        return -1;
    }
    json_t *root = json_pack("{s:o, s:o, s:I, s:b, s:o}", "column", es_jstr(l->names[col]), "q", es_jstr(q), "total",
                             (json_int_t)total, "truncated", total > found, "rows", es_jsizes(idx, found));
    json_t *cells = json_array();
    for (size_t i = 0; i < found; i++)
        json_array_append_new(cells, es_jstr(l->cells[idx[i] * l->n_cols + col]));
    json_object_set_new(root, "labels", cells);
    free(idx);
    es_jctx jc = {0};
    return es_reply_json(cx, root, &jc, err);
}
