/* The /v1 handlers: pure glue. Each one parses its parameters (params.c),
 * looks the matrices up, answers 304 when the client's ETag matches the
 * canonical description of the request, gets decompositions through the
 * single-flight cache, runs one analysis and renders it (render.c).
 *
 * Defaults (documented in openapi.yaml): rows "" = every row, no exclusions;
 * center "columns" for pca, spectrum and vectors, "none" for capture and
 * overlap (the matrices' own subspaces); k 3 for pca and vectors, 30 for
 * capture; bins 64 (at most max_bins); blur 0; side right; cosine mode row. */
#include "http/http.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Analysis results are immutable for given inputs (the ETag covers them). */
#define CACHE_IMMUTABLE "public, max-age=86400"
/* Listings depend on the loaded configuration: revalidate. */
#define CACHE_REVALIDATE "no-cache"
#define DEFAULT_BINS 64
/* capture and overlap compare the matrices' own subspaces unless asked to centre. */
#define PAIR_DEFAULT_CENTER ES_CENTER_NONE

/* Set a 200 JSON reply from root (consumed); fails like es_jctx_check / es_json_body. */
int es_reply_json(es_ctx *cx, json_t *root, const es_jctx *jc, es_err *err)
{
    char *body = NULL;
    size_t len = 0;
    int rc = es_jctx_check(jc, err) < 0 ? -1 : es_json_body(root, cx->app->limits.max_response_bytes, &body, &len, err);
    json_decref(root);
    if (rc < 0)
        return -1;
    cx->reply.status = 200;
    cx->reply.content_type = "application/json";
    cx->reply.body = body;
    cx->reply.len = len;
    return 0;
}

/* The matrix named by the path captures and its position in its model.
 * ES_E_NOTFOUND naming "model" or "matrix". */
static int path_entry(es_ctx *cx, const es_model **model, size_t *index, es_err *err)
{
    const es_model *mod = es_registry_model(cx->app->reg, cx->model);
    if (!mod)
        return es_fail(err, ES_E_NOTFOUND, "model", "no model '%s' (GET /v1/models lists them)", cx->model);
    for (size_t j = 0; j < mod->n_matrices; j++)
        if (strcmp(mod->matrix_names[j], cx->matrix) == 0) {
            *model = mod;
            *index = j;
            return 0;
        }
    return es_fail(err, ES_E_NOTFOUND, "matrix", "model '%s' has no matrix '%s'", cx->model, cx->matrix);
}

/* The matrix named by the path captures; fails like path_entry. */
static int path_matrix(es_ctx *cx, const es_matrix **out, es_err *err)
{
    const es_model *model;
    size_t j;
    if (path_entry(cx, &model, &j, err) < 0)
        return -1;
    *out = model->matrices[j];
    return 0;
}

/* What identifies one selection's data in an ETag. Caller frees. */
static char *selection_key(const es_matrix *m, const es_selection *s)
{
    return es_asprintf("%s@%s#%s|rows=%s|center=%s", m->id, m->prov.sha256, m->prov.view ? m->prov.view : "",
                       s->canonical, es_centering_name(s->center));
}

/* Set the ETag of an analysis from its canonical description (the path, the
 * selection keys and the other parameters, formatted by the caller) and the
 * immutable caching policy. True when the client already has it: the reply
 * is then 304 and the handler stops before computing anything. */
static bool not_modified(es_ctx *cx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool not_modified(es_ctx *cx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *params = NULL;
    if (vasprintf(&params, fmt, ap) < 0)
        params = NULL;
    va_end(ap);
    char *text = es_asprintf("embedscope %s %s %s", ES_VERSION, cx->path, params ? params : "");
    free(params);
    es_etag_of(text, strlen(text), cx->reply.etag);
    free(text);
    cx->reply.cache_control = CACHE_IMMUTABLE;
    if (!es_etag_matches(cx->if_none_match, cx->reply.etag))
        return false;
    cx->reply.status = 304;
    return true;
}

/* {"input": input}, the start of every analysis response. */
static json_t *analysis_root(json_t *input)
{
    json_t *root = json_object();
    json_object_set_new(root, "input", input);
    return root;
}

/* Upper bound of k for a selection: the rank bound min(n, d). */
static size_t rank_bound(const es_matrix *m, const es_selection *s)
{
    size_t d = es_matrix_dim(m);
    return s->n < d ? s->n : d;
}

static size_t default_bins(const es_limits *lim)
{
    return DEFAULT_BINS < lim->max_bins ? DEFAULT_BINS : lim->max_bins;
}

static int decompose(es_ctx *cx, const es_matrix *m, const es_selection *s, es_svd **out, es_err *err)
{
    return es_cache_svd(cx->app->cache, m, s->idx, s->n, s->center, out, err);
}

/* ---------------------------------------------------------------- listings */

int es_api_models(es_ctx *cx, es_err *err)
{
    es_jctx jc = {0};
    cx->reply.cache_control = CACHE_REVALIDATE;
    cx->reply.etag_from_body = true;
    return es_reply_json(cx, es_render_models(&jc, cx->app->reg), &jc, err);
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Min/max/mean/median and arg-min/max of the item norms (model orientation). */
static void item_norms(const es_matrix *m, es_norms *out)
{
    size_t n = es_matrix_items(m), d = es_matrix_dim(m);
    *out = (es_norms){0};
    if (n == 0)
        return;
    double *norm = es_malloc(n * sizeof *norm), sum = 0;
    for (size_t i = 0; i < n; i++) {
        double ss = 0;
        for (size_t j = 0; j < d; j++) {
            double x = es_matrix_item(m, i, j);
            ss += x * x;
        }
        norm[i] = sqrt(ss);
        sum += norm[i];
        if (norm[i] < norm[out->argmin])
            out->argmin = i;
        if (norm[i] > norm[out->argmax])
            out->argmax = i;
    }
    out->min = norm[out->argmin];
    out->max = norm[out->argmax];
    out->mean = sum / (double)n;
    qsort(norm, n, sizeof *norm, compare_doubles);
    out->median = n % 2 ? norm[n / 2] : (norm[n / 2 - 1] + norm[n / 2]) / 2;
    free(norm);
}

int es_api_matrix(es_ctx *cx, es_err *err)
{
    const es_model *model;
    size_t j;
    if (path_entry(cx, &model, &j, err) < 0)
        return -1;
    es_norms norms;
    item_norms(model->matrices[j], &norms);
    es_jctx jc = {0};
    cx->reply.cache_control = CACHE_REVALIDATE;
    cx->reply.etag_from_body = true;
    json_t *root = es_render_matrix(&jc, cx->model, cx->matrix, model->matrix_descriptions[j], model->matrices[j], &norms);
    return es_reply_json(cx, root, &jc, err);
}

/* ---------------------------------------------------------------- one matrix */

int es_api_pca(es_ctx *cx, es_err *err)
{
    const es_matrix *m;
    es_selection sel = {0};
    es_svd *svd = NULL;
    es_pca *pca = NULL;
    size_t k;
    int rc = -1;
    if (path_matrix(cx, &m, err) < 0 ||
        es_param_selection(cx->query, "", true, ES_CENTER_COLUMNS, m, &cx->app->limits, &sel, err) < 0 ||
        es_param_k(cx->query, "k", 3, &cx->app->limits, rank_bound(m, &sel), &k, err) < 0)
        goto done;
    char *key = selection_key(m, &sel);
    bool cached = not_modified(cx, "%s|k=%zu", key, k);
    free(key);
    if (cached) {
        rc = 0;
        goto done;
    }
    if (decompose(cx, m, &sel, &svd, err) < 0 || es_pca_from_svd(svd, k, &pca, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *input = json_pack("{s:o, s:I}", "matrix", es_render_input(&jc, m, &sel, svd), "k", (json_int_t)k);
    json_t *root = analysis_root(input);
    es_render_pca(&jc, root, pca);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_pca_free(pca);
    es_svd_release(svd);
    es_selection_free(&sel);
    return rc;
}

int es_api_spectrum(es_ctx *cx, es_err *err)
{
    const es_matrix *m;
    es_selection sel = {0};
    es_svd *svd = NULL;
    es_spectrum *spec = NULL;
    int rc = -1;
    if (path_matrix(cx, &m, err) < 0 ||
        es_param_selection(cx->query, "", true, ES_CENTER_COLUMNS, m, &cx->app->limits, &sel, err) < 0)
        goto done;
    char *key = selection_key(m, &sel);
    bool cached = not_modified(cx, "%s", key);
    free(key);
    if (cached) {
        rc = 0;
        goto done;
    }
    if (decompose(cx, m, &sel, &svd, err) < 0 || es_spectrum_from_svd(svd, &spec, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *root = analysis_root(json_pack("{s:o}", "matrix", es_render_input(&jc, m, &sel, svd)));
    es_render_spectrum(&jc, root, spec);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_spectrum_free(spec);
    es_svd_release(svd);
    es_selection_free(&sel);
    return rc;
}

enum cosine_mode { MODE_ROW, MODE_OFFSET, MODE_MATRIX };

/* Refuse a parameter that does not apply to the chosen cosine mode. */
static int only_in_mode(const es_query *q, const char *name, const char *mode, es_err *err)
{
    if (!es_query_get(q, name))
        return 0;
    return es_fail(err, ES_E_PARAM, name, "parameter '%s' applies only to mode=%s", name, mode);
}

/* The mode-specific parameters of cosine: row (mode row, required) and bins (mode matrix). */
static int cosine_params(es_ctx *cx, const es_matrix *m, size_t *mode, size_t *row, size_t *bins, es_err *err)
{
    static const char *const modes[] = {"row", "offset", "matrix", NULL};
    const es_query *q = cx->query;
    const es_limits *lim = &cx->app->limits;
    size_t items = es_matrix_items(m);
    *row = 0;
    *bins = 0;
    if (es_param_choice(q, "mode", modes, MODE_ROW, mode, err) < 0 ||
        (*mode != MODE_ROW && only_in_mode(q, "row", "row", err) < 0) ||
        (*mode != MODE_MATRIX && only_in_mode(q, "bins", "matrix", err) < 0))
        return -1;
    if (*mode == MODE_ROW && !es_query_get(q, "row"))
        return es_fail(err, ES_E_PARAM, "row", "mode=row needs the parameter 'row' (an index in 0..%zu)", items - 1);
    if (*mode == MODE_ROW)
        return es_param_size(q, "row", 0, 0, items - 1, NULL, row, err);
    if (*mode == MODE_MATRIX)
        return es_param_size(q, "bins", default_bins(lim), 1, lim->max_bins, "max_bins", bins, err);
    return 0;
}

/* Run the cosine analysis of the chosen mode and add its results to root. */
static int cosine_results(const es_matrix *m, const es_selection *sel, size_t mode, size_t row, size_t bins,
                          es_jctx *jc, json_t *root, es_err *err)
{
    if (mode == MODE_ROW) {
        double *sim;
        if (es_cosine_row(m, row, sel->idx, sel->n, &sim, err) < 0)
            return -1;
        es_render_cosine_row(jc, root, sel, sim);
        free(sim);
    } else if (mode == MODE_OFFSET) {
        es_cosine_offset *off;
        if (es_cosine_by_offset(m, sel->idx, sel->n, &off, err) < 0)
            return -1;
        es_render_cosine_offset(jc, root, off);
        es_cosine_offset_free(off);
    } else {
        es_grid *g;
        if (es_cosine_matrix(m, sel->idx, sel->n, bins, &g, err) < 0)
            return -1;
        es_render_grid(jc, root, "values", g);
        es_grid_free(g);
    }
    return 0;
}

int es_api_cosine(es_ctx *cx, es_err *err)
{
    static const char *const mode_names[] = {"row", "offset", "matrix"};
    const es_matrix *m;
    es_selection sel = {0};
    size_t mode, row, bins;
    int rc = -1;
    if (path_matrix(cx, &m, err) < 0 || cosine_params(cx, m, &mode, &row, &bins, err) < 0 ||
        es_param_selection(cx->query, "", false, ES_CENTER_NONE, m, &cx->app->limits, &sel, err) < 0)
        goto done;
    char *key = selection_key(m, &sel);
    bool cached = not_modified(cx, "%s|mode=%zu|row=%zu|bins=%zu", key, mode, row, bins);
    free(key);
    if (cached) {
        rc = 0;
        goto done;
    }
    es_jctx jc = {0};
    json_t *input = json_pack("{s:o, s:s}", "matrix", es_render_input(&jc, m, &sel, NULL), "mode", mode_names[mode]);
    if (mode == MODE_ROW)
        json_object_set_new(input, "row", json_integer((json_int_t)row));
    if (mode == MODE_MATRIX)
        json_object_set_new(input, "bins", json_integer((json_int_t)bins));
    json_t *root = analysis_root(input);
    if (cosine_results(m, &sel, mode, row, bins, &jc, root, err) < 0) {
        json_decref(root);
        goto done;
    }
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_selection_free(&sel);
    return rc;
}

int es_api_vectors(es_ctx *cx, es_err *err)
{
    const char *const sides[] = {es_side_name(ES_SIDE_LEFT), es_side_name(ES_SIDE_RIGHT), NULL};
    const es_matrix *m;
    es_selection sel = {0};
    es_svd *svd = NULL;
    es_vectors *vec = NULL;
    size_t side, k;
    int rc = -1;
    if (path_matrix(cx, &m, err) < 0 || es_param_choice(cx->query, "side", sides, ES_SIDE_RIGHT, &side, err) < 0 ||
        es_param_selection(cx->query, "", true, ES_CENTER_COLUMNS, m, &cx->app->limits, &sel, err) < 0 ||
        es_param_k(cx->query, "k", 3, &cx->app->limits, rank_bound(m, &sel), &k, err) < 0)
        goto done;
    char *key = selection_key(m, &sel);
    bool cached = not_modified(cx, "%s|side=%s|k=%zu", key, sides[side], k);
    free(key);
    if (cached) {
        rc = 0;
        goto done;
    }
    if (decompose(cx, m, &sel, &svd, err) < 0 || es_vectors_from_svd(svd, (es_side)side, k, &vec, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *input = json_pack("{s:o, s:s, s:I}", "matrix", es_render_input(&jc, m, &sel, svd), "side", sides[side],
                              "k", (json_int_t)k);
    json_t *root = analysis_root(input);
    es_render_vectors(&jc, root, vec, svd);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_vectors_free(vec);
    es_svd_release(svd);
    es_selection_free(&sel);
    return rc;
}

/* ---------------------------------------------------------------- two matrices */

/* The two matrices a and b of a cross-matrix analysis with their selections
 * and decompositions. */
typedef struct pair {
    const es_matrix *m[2];
    es_selection sel[2];
    es_svd *svd[2];
} pair;

/* Look up a and b (ES_E_PARAM / ES_E_NOTFOUND naming them), check they share a
 * model space (ES_E_INCOMPATIBLE) and parse the a_* and b_* selections. */
static int pair_params(es_ctx *cx, pair *p, es_err *err)
{
    static const char *const names[] = {"a", "b"}, *const prefixes[] = {"a_", "b_"};
    for (int i = 0; i < 2; i++)
        if (es_param_matrix(cx->query, names[i], cx->app->reg, &p->m[i], err) < 0)
            return -1;
    if (es_check_comparable(p->m[0], p->m[1], err) < 0) {
        snprintf(err->param, sizeof err->param, "b"); /* b is compared against a */
        return -1;
    }
    for (int i = 0; i < 2; i++)
        if (es_param_selection(cx->query, prefixes[i], true, PAIR_DEFAULT_CENTER, p->m[i], &cx->app->limits, &p->sel[i],
                               err) < 0)
            return -1;
    return 0;
}

/* ETag check over both selections plus the analysis' own parameters (extra). */
static bool pair_not_modified(es_ctx *cx, const pair *p, const char *extra)
{
    char *ka = selection_key(p->m[0], &p->sel[0]), *kb = selection_key(p->m[1], &p->sel[1]);
    bool cached = not_modified(cx, "a=%s|b=%s|%s", ka, kb, extra);
    free(ka);
    free(kb);
    return cached;
}

static int pair_decompose(es_ctx *cx, pair *p, es_err *err)
{
    for (int i = 0; i < 2; i++)
        if (decompose(cx, p->m[i], &p->sel[i], &p->svd[i], err) < 0)
            return -1;
    return 0;
}

/* {"input": {"a": ..., "b": ...}}. */
static json_t *pair_root(es_jctx *jc, const pair *p)
{
    return analysis_root(json_pack("{s:o, s:o}", "a", es_render_input(jc, p->m[0], &p->sel[0], p->svd[0]), "b",
                                   es_render_input(jc, p->m[1], &p->sel[1], p->svd[1])));
}

static void pair_free(pair *p)
{
    for (int i = 0; i < 2; i++) {
        es_svd_release(p->svd[i]);
        es_selection_free(&p->sel[i]);
    }
}

int es_api_capture(es_ctx *cx, es_err *err)
{
    pair p = {0};
    es_capture *cap = NULL;
    size_t k;
    int rc = -1;
    if (pair_params(cx, &p, err) < 0 ||
        es_param_k(cx->query, "k", 30, &cx->app->limits, rank_bound(p.m[0], &p.sel[0]), &k, err) < 0)
        goto done;
    char extra[32];
    snprintf(extra, sizeof extra, "k=%zu", k);
    if (pair_not_modified(cx, &p, extra)) {
        rc = 0;
        goto done;
    }
    if (pair_decompose(cx, &p, err) < 0 || es_capture_compute(p.svd[0], k, p.svd[1], &cap, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *root = pair_root(&jc, &p);
    json_object_set_new(json_object_get(root, "input"), "k", json_integer((json_int_t)k));
    es_render_capture(&jc, root, cap);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_capture_free(cap);
    pair_free(&p);
    return rc;
}

int es_api_overlap(es_ctx *cx, es_err *err)
{
    pair p = {0};
    es_grid *grid = NULL;
    size_t bins, ka, kb;
    double blur;
    int rc = -1;
    const es_limits *lim = &cx->app->limits;
    if (pair_params(cx, &p, err) < 0 ||
        es_param_size(cx->query, "bins", default_bins(lim), 1, lim->max_bins, "max_bins", &bins, err) < 0 ||
        es_param_double(cx->query, "blur", 0, 0, (double)lim->max_bins, &blur, err) < 0)
        goto done;
    size_t ra = rank_bound(p.m[0], &p.sel[0]), rb = rank_bound(p.m[1], &p.sel[1]);
    if (es_param_size(cx->query, "ka", ra, 1, ra, NULL, &ka, err) < 0 ||
        es_param_size(cx->query, "kb", rb, 1, rb, NULL, &kb, err) < 0)
        goto done;
    char extra[96];
    snprintf(extra, sizeof extra, "ka=%zu|kb=%zu|bins=%zu|blur=%.17g", ka, kb, bins, blur);
    if (pair_not_modified(cx, &p, extra)) {
        rc = 0;
        goto done;
    }
    if (pair_decompose(cx, &p, err) < 0 || es_overlap_compute(p.svd[0], ka, p.svd[1], kb, bins, blur, &grid, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *root = pair_root(&jc, &p);
    json_t *input = json_object_get(root, "input");
    json_object_set_new(input, "ka", json_integer((json_int_t)ka));
    json_object_set_new(input, "kb", json_integer((json_int_t)kb));
    json_object_set_new(input, "bins", json_integer((json_int_t)bins));
    json_object_set_new(input, "blur", es_jnum(&jc, "blur", blur));
    es_render_grid(&jc, root, "overlap", grid);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_grid_free(grid);
    pair_free(&p);
    return rc;
}
