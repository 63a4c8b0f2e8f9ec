/* The /v1 handlers: pure glue. Each one parses its parameters (params.c),
 * looks the matrices up, passes the gate (es_precheck: 304 when the client's
 * ETag matches the canonical description of the request, a copy from the
 * response cache, or deferral to the compute pool), gets decompositions
 * through the single-flight cache, runs one analysis and renders it (render.c).
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
/* Listings depend on the loaded configuration, and results of user models on
 * data a PUT may replace under the same URL: revalidate (the ETag changes). */
#define CACHE_REVALIDATE "no-cache"
/* capture and overlap compare the matrices' own subspaces unless asked to centre. */
#define PAIR_DEFAULT_CENTER ES_CENTER_NONE

/* Set a 200 JSON reply from root (consumed); fails like es_jctx_check / es_json_body. */
int es_reply_json(es_ctx *cx, json_t *root, const es_jctx *jc, es_err *err)
{
    char *body = NULL;
    size_t len = 0;
    int rc = es_jctx_check(jc, err) < 0 || es_checkpoint(err) < 0
                 ? -1
                 : es_json_body(root, cx->app->limits.max_response_bytes, &body, &len, err);
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
    const es_model *mod = es_registry_model(cx->reg, cx->model);
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
int es_path_matrix(es_ctx *cx, const es_matrix **out, es_err *err)
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
    char *identity = es_matrix_identity(m);
    char *key = es_asprintf("%s|rows=%s|center=%s", identity, s->canonical, es_centering_name(s->center));
    free(identity);
    return key;
}

/* The rest of the gate once the client lacks the reply: a copy from the
 * response cache (keyed by the sha256 of the canonical text), else deferral
 * from an HTTP thread, else a claim to compute (waiting for a concurrent
 * computation of the same key first). True when the handler must stop. */
static bool settled_by_cache(es_ctx *cx, const char *text)
{
    char key[65];
    es_sha256_hex(text, strlen(text), key);
    if (cx->may_defer) {
        if (es_results_peek(cx->app->results, key, &cx->reply))
            return true;
        if (cx->cost > cx->app->limits.max_request_cost)
            cx->cost_exceeded = true; /* refused before it takes a queue slot */
        else
            cx->deferred = true; /* an HTTP thread never computes: run again in the pool */
        return true;
    }
    return es_results_claim(cx->app->results, key, &cx->reply, &cx->claim) == 1;
}

/* Is name (text up to '/' or the end) a user model of the request's catalogue? */
static bool names_user_model(const es_ctx *cx, const char *name, size_t len)
{
    char model[128];
    if (len == 0 || len >= sizeof model)
        return false;
    memcpy(model, name, len);
    model[len] = '\0';
    const es_model *m = es_registry_model(cx->reg, model);
    return m && m->user;
}

/* Does the request read a user model's matrix (its path, or a MODEL/MATRIX or
 * MODEL value of a parameter, comma lists included)? Its data may be replaced
 * under the same URL at any time (PUT), so its result must be revalidated; a
 * value that only looks like a user model's name errs on the safe side. */
static bool reads_user_model(const es_ctx *cx)
{
    if (!cx->reg)
        return false;
    if (names_user_model(cx, cx->model, strlen(cx->model)))
        return true;
    for (size_t i = 0; cx->query && i < cx->query->n; i++)
        for (const char *v = cx->query->items[i].value; *v;) {
            if (names_user_model(cx, v, strcspn(v, ",/")))
                return true;
            size_t item = strcspn(v, ",");
            v += item + (v[item] == ',');
        }
    return false;
}

/* "embedscope <version> <path> <params>": what identifies a reply. Caller frees. */
static char *canonical_text(const es_ctx *cx, const char *params)
{
    return es_asprintf("embedscope %s %s %s", ES_VERSION, cx->path, params);
}

/* The gate of an immutable result; see http.h. The ETag comes from the
 * canonical description (path, selection keys and the other parameters,
 * formatted by the caller), so a client that has it gets 304 before anything
 * is looked up or computed. */
bool es_precheck(es_ctx *cx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *params = NULL;
    if (vasprintf(&params, fmt, ap) < 0)
        params = NULL;
    va_end(ap);
    char *text = canonical_text(cx, params ? params : "");
    free(params);
    es_etag_of(text, strlen(text), cx->reply.etag);
    cx->reply.cache_control = reads_user_model(cx) ? CACHE_REVALIDATE : CACHE_IMMUTABLE;
    bool settled = true;
    if (es_etag_matches(cx->if_none_match, cx->reply.etag))
        cx->reply.status = 304;
    else
        settled = settled_by_cache(cx, text);
    free(text);
    return settled;
}

/* The gate of a listing whose ETag is computed from its body; see http.h. */
bool es_precheck_listing(es_ctx *cx, const char *identity)
{
    char *text = canonical_text(cx, identity);
    cx->reply.cache_control = CACHE_REVALIDATE;
    cx->reply.etag_from_body = true;
    bool settled = settled_by_cache(cx, text);
    free(text);
    return settled;
}

/* {"input": input}, the start of every analysis response. */
static json_t *analysis_root(json_t *input)
{
    json_t *root = json_object();
    json_object_set_new(root, "input", input);
    return root;
}

size_t es_one_rank(const es_one *o)
{
    size_t d = es_matrix_dim(o->m);
    return o->sel.n < d ? o->sel.n : d;
}

/* ---------------------------------------------------------------- one matrix, maybe averaged */

static const char *const average_orders[] = {"select_then_average", "average_then_select", NULL};
static const char *const average_modes[] = {"rows", "groups", NULL};

/* See http.h. */
int es_param_average_order(const es_query *q, const char *name, es_average_order *out, es_err *err)
{
    size_t order;
    if (es_param_choice(q, name, average_orders, 0, &order, err) < 0)
        return -1;
    *out = order == 0 ? ES_AVERAGE_SELECTED : ES_AVERAGE_ALL;
    return 0;
}

/* The configured model a matrix id "model/matrix" belongs to, or NULL. */
static const es_model *model_of(const es_registry *reg, const es_matrix *m)
{
    const char *slash = strchr(m->id, '/');
    char name[80];
    if (!slash || (size_t)(slash - m->id) >= sizeof name)
        return NULL;
    snprintf(name, sizeof name, "%.*s", (int)(slash - m->id), m->id);
    return es_registry_model(reg, name);
}

/* <prefix>head: replace o->m by that head's view. ES_E_PARAM naming it. */
static int one_head(es_app *app, const es_query *q, const char *prefix, es_one *o, es_err *err)
{
    char name[40];
    snprintf(name, sizeof name, "%shead", prefix);
    if (!es_query_get(q, name))
        return 0;
    const es_model *model = model_of(app->reg, o->m);
    size_t n_heads = model ? model->n_heads : 0;
    if (es_param_size(q, name, 0, 0, SIZE_MAX, NULL, &o->head, err) < 0 ||
        es_view_head(o->m, n_heads, o->head, name, &o->head_view, err) < 0)
        return -1;
    o->n_heads = n_heads;
    o->m = o->head_view;
    return 0;
}

/* <prefix>average_order and <prefix>average_mode, refused without <prefix>average. */
static int average_choices(const es_query *q, const char *prefix, bool averaged, es_one *o, es_err *err)
{
    char name[2][48];
    size_t mode;
    snprintf(name[0], sizeof name[0], "%saverage_order", prefix);
    snprintf(name[1], sizeof name[1], "%saverage_mode", prefix);
    for (int i = 0; i < 2; i++)
        if (!averaged && es_query_get(q, name[i]))
            return es_fail(err, ES_E_PARAM, name[i], "%s applies only with %saverage=g", name[i], prefix);
    if (es_param_average_order(q, name[0], &o->order, err) < 0 ||
        es_param_choice(q, name[1], average_modes, 0, &mode, err) < 0)
        return -1;
    o->groups = mode == 1;
    return 0;
}

/* Keep only the first selected row of each group (average_mode=groups). */
static void keep_group_leaders(es_selection *sel, size_t g, es_average_order order)
{
    size_t n = es_average_leaders(sel->idx, sel->n, g, order, sel->idx);
    sel->n = n;
    free(sel->canonical);
    sel->canonical = es_rows_canonical(sel->idx, n);
}

/* Resolve <prefix>head, the selection and averaging; see http.h. */
int es_one_parse(es_app *app, const es_query *q, const char *prefix, const es_matrix *m, bool with_center,
                 es_centering def, es_one *out, es_err *err)
{
    char name[40];
    snprintf(name, sizeof name, "%saverage", prefix);
    *out = (es_one){.source = m, .m = m};
    bool averaged = es_query_get(q, name) != NULL;
    if (one_head(app, q, prefix, out, err) < 0 || average_choices(q, prefix, averaged, out, err) < 0)
        return -1;
    const es_matrix *base = out->m;
    if (averaged) {
        if (es_param_size(q, name, 1, 1, es_matrix_items(base), NULL, &out->average, err) < 0)
            return -1;
        if (out->order == ES_AVERAGE_ALL) {   /* the copy's items are selected below */
            if (es_app_averaged(app, base, NULL, out->average, name, &out->held, err) < 0)
                return -1;
            out->m = out->held;
        }
    }
    if (es_param_selection(q, prefix, with_center, def, out->m, &app->limits, &out->sel, err) < 0)
        return -1;
    if (!averaged)
        return 0;
    if (out->order == ES_AVERAGE_SELECTED) {
        if (es_app_averaged(app, base, &out->sel, out->average, name, &out->held, err) < 0)
            return -1;
        out->m = out->held;
    }
    size_t *scratch = es_malloc(out->sel.n * sizeof *scratch);
    out->n_groups = es_average_leaders(out->sel.idx, out->sel.n, out->average, out->order, scratch);
    free(scratch);
    if (out->groups)
        keep_group_leaders(&out->sel, out->average, out->order);
    return 0;
}

/* Release o's selection, head view and averaged copy (o itself is the caller's). */
void es_one_free(es_one *o)
{
    es_selection_free(&o->sel);
    es_matrix_release(o->held);
    es_matrix_release(o->head_view);
    o->held = o->head_view = NULL;
}

/* The selection key plus head and averaging (the sha256 of an averaged copy differs anyway). */
char *es_one_key(const es_one *o)
{
    char *key = selection_key(o->m, &o->sel);
    char *full = es_asprintf("%s|head=%zu/%zu|average=%zu|order=%d|groups=%d", key, o->head, o->n_heads, o->average,
                             (int)o->order, (int)o->groups);
    free(key);
    return full;
}

/* es_render_input plus the model axis, head and averaging; see http.h. Never fails. */
json_t *es_one_input(es_jctx *jc, const es_one *o, const es_svd *svd)
{
    json_t *input = es_render_input(jc, o->m, &o->sel, svd);
    json_object_set_new(input, "model_axis", json_string(es_axis_name(o->m->model_axis)));
    json_object_set_new(input, "model_axis_origin", json_string(es_axis_origin_name(o->m->axis_origin)));
    if (o->n_heads) {
        json_object_set_new(input, "head", json_integer((json_int_t)o->head));
        json_object_set_new(input, "n_heads", json_integer((json_int_t)o->n_heads));
    }
    if (o->average) {
        json_object_set_new(input, "average", json_integer((json_int_t)o->average));
        json_object_set_new(input, "average_order", json_string(es_average_order_name(o->order)));
        json_object_set_new(input, "average_mode", json_string(average_modes[o->groups]));
        json_object_set_new(input, "n_groups", json_integer((json_int_t)o->n_groups));
    }
    return input;
}

/* o's decomposition through the cache (retained); fails like es_cache_svd. */
int es_one_svd(es_app *app, const es_one *o, es_svd **out, es_err *err)
{
    if (es_checkpoint(err) < 0) /* a safe point: the job may have been abandoned */
        return -1;
    return es_cache_svd(app->cache, o->m, o->sel.idx, o->sel.n, o->sel.center, out, err);
}

/* Everything but the selection that identifies a request of an es_analysis. */
static char *one_req_key(const es_one_req *r)
{
    char *one = es_one_key(&r->one);
    char *key = es_asprintf("%s|k=%zu|side=%zu|gap=%.17g|threshold=%.17g|kind=%d|method=%s", one, r->k, r->side,
                            r->gap, r->threshold, (int)r->kind, es_method_name(r->method));
    free(one);
    return key;
}

/* Parse analysis a's request on m: the common parameters, then its own. */
static int one_req_parse(es_app *app, const es_analysis *a, const es_query *q, const es_matrix *m, es_one_req *r,
                         es_err *err)
{
    *r = (es_one_req){.gap = ES_DEGENERACY_GAP, .threshold = ES_OUTLIER_THRESHOLD};
    if (es_one_parse(app, q, "", m, a->with_center, a->def_center, &r->one, err) < 0)
        return -1;
    static const char *const methods[] = {"auto", "exact", "topk", NULL}; /* es_method order */
    size_t method = ES_METHOD_AUTO;
    if (a->topk && es_param_choice(q, "method", methods, ES_METHOD_AUTO, &method, err) < 0)
        return -1;
    r->method = (es_method)method;
    return a->parse(app, q, r, err);
}

/* {"input": {"matrix": ..., ...}, results} of a parsed request, decomposing the
 * selection first if a works on its SVD. Fails as es_one_svd or a->fill does. */
static int one_req_fill(es_app *app, const es_analysis *a, const es_one_req *r, es_jctx *jc, json_t **out,
                        es_err *err)
{
    es_svd *svd = NULL;
    const es_one *o = &r->one;
    if (es_checkpoint(err) < 0 ||
        (a->decomposed && (a->topk ? es_cache_decompose(app->cache, o->m, o->sel.idx, o->sel.n, o->sel.center,
                                                        r->method, r->k, &svd, err)
                                   : es_one_svd(app, o, &svd, err)) < 0))
        return -1;
    json_t *root = analysis_root(json_pack("{s:o}", "matrix", es_one_input(jc, &r->one, svd)));
    int rc = a->fill(r, svd, jc, root, err);
    es_svd_release(svd);
    if (rc < 0) {
        json_decref(root);
        return -1;
    }
    *out = root;
    return 0;
}

/* Run analysis a on m; see http.h. */
int es_one_run(es_app *app, const es_analysis *a, const es_query *q, const es_matrix *m, es_jctx *jc,
               json_t **out, es_err *err)
{
    es_one_req r;
    int rc = one_req_parse(app, a, q, m, &r, err) < 0 ? -1 : one_req_fill(app, a, &r, jc, out, err);
    es_one_free(&r.one);
    return rc;
}

/* See http.h. */
int es_one_estimate(es_app *app, const es_analysis *a, const es_query *q, const es_matrix *m, double *cost,
                    es_err *err)
{
    es_one_req r;
    int rc = one_req_parse(app, a, q, m, &r, err);
    if (rc == 0)
        *cost += es_cost_one(a, &r);
    es_one_free(&r.one);
    return rc;
}

/* The handler of /v1/models/{model}/matrices/{matrix}/<a->name>: parse, pass the
 * gate (304, a cached copy or deferral to the pool), else compute and render. */
int es_run_path_analysis(es_ctx *cx, const es_analysis *a, es_err *err)
{
    const es_matrix *m;
    es_one_req r = {0};
    int rc = -1;
    if (es_path_matrix(cx, &m, err) < 0 || one_req_parse(cx->app, a, cx->query, m, &r, err) < 0)
        goto done;
    cx->cost += es_cost_one(a, &r);
    char *key = one_req_key(&r);
    bool settled = es_precheck(cx, "%s", key);
    free(key);
    if (settled) {
        rc = 0;
        goto done;
    }
    es_jctx jc = {0};
    json_t *root;
    if (one_req_fill(cx->app, a, &r, &jc, &root, err) == 0)
        rc = es_reply_json(cx, root, &jc, err);
done:
    es_one_free(&r.one);
    return rc;
}

/* Degeneracy threshold "gap" (default ES_DEGENERACY_GAP, 0 < gap < 1). */
static int parse_gap(const es_query *q, double *gap, es_err *err)
{
    if (es_param_double(q, "gap", ES_DEGENERACY_GAP, 0, 1, gap, err) < 0)
        return -1;
    if (*gap <= 0 || *gap >= 1)
        return es_fail(err, ES_E_PARAM, "gap", "gap=%.17g must be strictly between 0 and 1", *gap);
    return 0;
}

/* ---------------------------------------------------------------- listings */

/* Every model and its matrices, revalidated by its body. Fails like es_reply_json. */
int es_api_models(es_ctx *cx, es_err *err)
{
    es_jctx jc = {0};
    cx->reply.cache_control = CACHE_REVALIDATE;
    cx->reply.etag_from_body = true;
    return es_reply_json(cx, es_render_models(&jc, cx->reg), &jc, err);
}

/* qsort order of doubles, ascending (no NaN among norms). */
static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The mean of v[0..n), n > 0, from a compensated (Neumaier) sum in long double:
 * the error stays far below half an ulp of the double result, so the mean of
 * equal values is that value and a mean never leaves [min, max] (a naive double
 * sum of 1024 equal norms drifts above them). */
static double exact_mean(const double *v, size_t n)
{
    long double sum = 0, comp = 0;
    for (size_t i = 0; i < n; i++) {
        long double t = sum + v[i];
        comp += fabsl(sum) >= fabsl((long double)v[i]) ? (sum - t) + v[i] : ((long double)v[i] - t) + sum;
        sum = t;
    }
    return (double)((sum + comp) / (long double)n);
}

/* Min/max/mean/median and arg-min/max of the item norms (model orientation). */
static void item_norms(const es_matrix *m, es_norms *out)
{
    size_t n = es_matrix_items(m), d = es_matrix_dim(m);
    *out = (es_norms){0};
    if (n == 0)
        return;
    double *norm = es_malloc(n * sizeof *norm);
    for (size_t i = 0; i < n; i++) {
        double ss = 0;
        for (size_t j = 0; j < d; j++) {
            double x = es_matrix_item(m, i, j);
            ss += x * x;
        }
        norm[i] = sqrt(ss);
        if (norm[i] < norm[out->argmin])
            out->argmin = i;
        if (norm[i] > norm[out->argmax])
            out->argmax = i;
    }
    out->min = norm[out->argmin];
    out->max = norm[out->argmax];
    out->mean = exact_mean(norm, n);
    qsort(norm, n, sizeof *norm, compare_doubles);
    out->median = n % 2 ? norm[n / 2] : (norm[n / 2 - 1] + norm[n / 2]) / 2;
    free(norm);
}

/* One matrix with its row norms: O(items x d), so gated (cached, computed in
 * the pool) like an analysis, but revalidated by its body like a listing. */
int es_api_matrix(es_ctx *cx, es_err *err)
{
    const es_model *model;
    size_t j;
    if (path_entry(cx, &model, &j, err) < 0)
        return -1;
    char *identity = es_matrix_identity(model->matrices[j]);
    char *key = es_asprintf("%s|%s|%.17g", identity, model->matrix_descriptions[j], model->matrix_created[j]);
    bool settled = es_precheck_listing(cx, key);
    free(key);
    free(identity);
    if (settled)
        return 0;
    es_jctx jc = {0};
    return es_reply_json(cx, es_describe_matrix(&jc, model, j), &jc, err);
}

/* See http.h: the row norms, then the rendering. Never fails. */
json_t *es_describe_matrix(es_jctx *jc, const es_model *model, size_t j)
{
    es_norms norms;
    item_norms(model->matrices[j], &norms);
    return es_render_matrix(jc, model, j, &norms);
}

/* ---------------------------------------------------------------- one matrix */

/* k (default 3) for pca and vectors, bounded by max_k and the rank bound. */
static int parse_k3(es_app *app, const es_query *q, es_one_req *r, es_err *err)
{
    return es_param_k(q, "k", 3, &app->limits, es_one_rank(&r->one), &r->k, err);
}

/* es_analysis_pca.fill: k and the PCA coordinates; fails like es_pca_from_svd. */
static int fill_pca(const es_one_req *r, const es_svd *svd, es_jctx *jc, json_t *root, es_err *err)
{
    es_pca *pca;
    if (es_pca_from_svd(svd, r->k, &pca, err) < 0)
        return -1;
    json_object_set_new(json_object_get(root, "input"), "k", json_integer((json_int_t)r->k));
    es_render_pca(jc, root, pca);
    es_pca_free(pca);
    return 0;
}

static const char *const pca_own[] = {"k", NULL};
const es_analysis es_analysis_pca = {.name = "pca", .decomposed = true, .with_center = true, .topk = true,
                                     .def_center = ES_CENTER_COLUMNS, .params = pca_own, .parse = parse_k3,
                                     .fill = fill_pca, .cost = es_cost_k_items};

/* GET .../pca; fails like es_run_path_analysis. */
int es_api_pca(es_ctx *cx, es_err *err)
{
    return es_run_path_analysis(cx, &es_analysis_pca, err);
}

/* es_analysis_spectrum.parse: the degeneracy threshold gap (ES_E_PARAM naming "gap"). */
static int parse_spectrum(es_app *app, const es_query *q, es_one_req *r, es_err *err)
{
    (void)app;
    return parse_gap(q, &r->gap, err);
}

/* The degeneracy groups of svd's singular values under threshold gap; NULL on failure. */
static es_degeneracy *degeneracy_of(const es_svd *svd, double gap, es_err *err)
{
    es_degeneracy *d = NULL;
    return es_degeneracy_find(svd->s, svd->r, gap, &d, err) < 0 ? NULL : d;
}

/* es_analysis_spectrum.fill: the spectrum and its degenerate groups; fails like
 * es_spectrum_from_svd / es_degeneracy_find. */
static int fill_spectrum(const es_one_req *r, const es_svd *svd, es_jctx *jc, json_t *root, es_err *err)
{
    es_spectrum *spec = NULL;
    es_degeneracy *deg = NULL;
    int rc = -1;
    if (es_spectrum_from_svd(svd, &spec, err) < 0 || !(deg = degeneracy_of(svd, r->gap, err)))
        goto done;
    json_object_set_new(json_object_get(root, "input"), "gap", es_jnum(jc, "gap", r->gap));
    es_render_spectrum(jc, root, spec);
    es_render_degeneracy(jc, root, deg);
    rc = 0;
done:
    es_degeneracy_free(deg);
    es_spectrum_free(spec);
    return rc;
}

static const char *const spectrum_own[] = {"gap", NULL};
const es_analysis es_analysis_spectrum = {.name = "spectrum", .decomposed = true, .with_center = true,
                                          .def_center = ES_CENTER_COLUMNS, .params = spectrum_own,
                                          .parse = parse_spectrum, .fill = fill_spectrum};

/* GET .../spectrum; fails like es_run_path_analysis. */
int es_api_spectrum(es_ctx *cx, es_err *err)
{
    return es_run_path_analysis(cx, &es_analysis_spectrum, err);
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
        return es_param_size(q, "bins", es_default_bins(lim), 1, lim->max_bins, "max_bins", bins, err);
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

/* GET .../cosine in mode row, offset or matrix over an uncentred selection.
 * Fails with the parameter, lookup or limit error naming its parameter. */
int es_api_cosine(es_ctx *cx, es_err *err)
{
    static const char *const mode_names[] = {"row", "offset", "matrix"};
    const es_matrix *m;
    es_one one = {0};
    size_t mode, row, bins;
    int rc = -1;
    if (es_path_matrix(cx, &m, err) < 0 || cosine_params(cx, m, &mode, &row, &bins, err) < 0 ||
        es_one_parse(cx->app, cx->query, "", m, false, ES_CENTER_NONE, &one, err) < 0)
        goto done;
    char *key = es_one_key(&one);
    bool settled = es_precheck(cx, "%s|mode=%zu|row=%zu|bins=%zu", key, mode, row, bins);
    free(key);
    if (settled) {
        rc = 0;
        goto done;
    }
    es_jctx jc = {0};
    json_t *input = json_pack("{s:o, s:s}", "matrix", es_one_input(&jc, &one, NULL), "mode", mode_names[mode]);
    if (mode == MODE_ROW)
        json_object_set_new(input, "row", json_integer((json_int_t)row));
    if (mode == MODE_MATRIX)
        json_object_set_new(input, "bins", json_integer((json_int_t)bins));
    json_t *root = analysis_root(input);
    if (cosine_results(one.m, &one.sel, mode, row, bins, &jc, root, err) < 0) {
        json_decref(root);
        goto done;
    }
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_one_free(&one);
    return rc;
}

/* es_analysis_vectors.parse: side, gap and k (ES_E_PARAM / ES_E_LIMIT naming them). */
static int parse_vectors(es_app *app, const es_query *q, es_one_req *r, es_err *err)
{
    const char *const sides[] = {es_side_name(ES_SIDE_LEFT), es_side_name(ES_SIDE_RIGHT), NULL};
    if (es_param_choice(q, "side", sides, ES_SIDE_RIGHT, &r->side, err) < 0 || parse_gap(q, &r->gap, err) < 0)
        return -1;
    return parse_k3(app, q, r, err);
}

/* es_analysis_vectors.fill: the top k vectors, flagged by degenerate group; fails
 * like es_vectors_from_svd / es_degeneracy_find. */
static int fill_vectors(const es_one_req *r, const es_svd *svd, es_jctx *jc, json_t *root, es_err *err)
{
    es_vectors *vec = NULL;
    es_degeneracy *deg = NULL;
    int rc = -1;
    if (es_vectors_from_svd(svd, (es_side)r->side, r->k, &vec, err) < 0 || !(deg = degeneracy_of(svd, r->gap, err)))
        goto done;
    json_t *input = json_object_get(root, "input");
    json_object_set_new(input, "side", json_string(es_side_name((es_side)r->side)));
    json_object_set_new(input, "k", json_integer((json_int_t)r->k));
    json_object_set_new(input, "gap", es_jnum(jc, "gap", r->gap));
    es_render_vectors(jc, root, vec, svd);
    es_render_degeneracy(jc, root, deg);
    es_render_vector_groups(root, deg);
    rc = 0;
done:
    es_degeneracy_free(deg);
    es_vectors_free(vec);
    return rc;
}

static const char *const vectors_own[] = {"side", "k", "gap", NULL};
const es_analysis es_analysis_vectors = {.name = "vectors", .decomposed = true, .with_center = true, .topk = true,
                                         .def_center = ES_CENTER_COLUMNS, .params = vectors_own,
                                         .parse = parse_vectors, .fill = fill_vectors,
                                         .cost = es_cost_vectors};

/* GET .../vectors; fails like es_run_path_analysis. */
int es_api_vectors(es_ctx *cx, es_err *err)
{
    return es_run_path_analysis(cx, &es_analysis_vectors, err);
}

/* ---------------------------------------------------------------- two matrices */

static const char *const ab_names[2] = {"a", "b"};

/* Look up the two matrices (ES_E_PARAM / ES_E_NOTFOUND naming them), check they
 * share a model space (ES_E_INCOMPATIBLE naming the second) and parse each one's
 * <name>_average and <name>_rows / _exclude / _center. */
int es_pair_parse(es_ctx *cx, const char *const names[2], es_pair *p, es_err *err)
{
    const es_matrix *m[2];
    for (int i = 0; i < 2; i++)
        if (es_param_matrix(cx->query, names[i], cx->reg, &m[i], err) < 0)
            return -1;
    if (es_check_comparable(m[0], m[1], names[1], err) < 0) /* the second is compared against the first */
        return -1;
    for (int i = 0; i < 2; i++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "%s_", names[i]);
        if (es_one_parse(cx->app, cx->query, prefix, m[i], true, PAIR_DEFAULT_CENTER, &p->one[i], err) < 0)
            return -1;
    }
    return 0;
}

/* The gate (es_precheck) over both selections plus the analysis' own parameters (extra). */
bool es_pair_precheck(es_ctx *cx, const es_pair *p, const char *extra)
{
    char *ka = es_one_key(&p->one[0]), *kb = es_one_key(&p->one[1]);
    for (int i = 0; i < 2; i++)
        cx->cost += es_cost_svd(p->one[i].sel.n, es_matrix_dim(p->one[i].m));
    bool settled = es_precheck(cx, "1=%s|2=%s|%s", ka, kb, extra);
    free(ka);
    free(kb);
    return settled;
}

/* Both decompositions into p->svd (retained); fails like es_cache_svd. */
int es_pair_decompose(es_app *app, es_pair *p, es_err *err)
{
    for (int i = 0; i < 2; i++)
        if (es_one_svd(app, &p->one[i], &p->svd[i], err) < 0)
            return -1;
    return 0;
}

/* {"input": {names[0]: ..., names[1]: ...}, "warnings": [...]}: a square matrix
 * with a defaulted model axis may be compared along the wrong axis. */
json_t *es_pair_root(es_jctx *jc, const es_pair *p, const char *const names[2])
{
    json_t *root = analysis_root(json_pack("{s:o, s:o}", names[0], es_one_input(jc, &p->one[0], p->svd[0]), names[1],
                                           es_one_input(jc, &p->one[1], p->svd[1])));
    const es_matrix *ms[2] = {p->one[0].source, p->one[1].source};
    json_object_set_new(root, "warnings", es_axis_warnings(NULL, ms, 2));
    return root;
}

/* Release both sides and their decompositions (p itself is the caller's). */
void es_pair_free(es_pair *p)
{
    for (int i = 0; i < 2; i++) {
        es_svd_release(p->svd[i]);
        es_one_free(&p->one[i]);
    }
}

/* GET /v1/capture: the share of each of b's singular vectors in a's top-k subspace.
 * Fails like es_pair_parse, es_param_k ("k") or es_capture_compute. */
int es_api_capture(es_ctx *cx, es_err *err)
{
    es_pair p = {0};
    es_capture *cap = NULL;
    size_t k;
    int rc = -1;
    if (es_pair_parse(cx, ab_names, &p, err) < 0 ||
        es_param_k(cx->query, "k", 30, &cx->app->limits, es_one_rank(&p.one[0]), &k, err) < 0)
        goto done;
    char extra[32];
    snprintf(extra, sizeof extra, "k=%zu", k);
    if (es_pair_precheck(cx, &p, extra)) {
        rc = 0;
        goto done;
    }
    if (es_pair_decompose(cx->app, &p, err) < 0 || es_capture_compute(p.svd[0], k, p.svd[1], &cap, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *root = es_pair_root(&jc, &p, ab_names);
    json_object_set_new(json_object_get(root, "input"), "k", json_integer((json_int_t)k));
    es_render_capture(&jc, root, cap);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_capture_free(cap);
    es_pair_free(&p);
    return rc;
}

/* GET /v1/overlap: the binned squared overlaps of a's top ka and b's top kb
 * vectors. Parameter errors name bins / blur / ka / kb (ES_E_LIMIT "max_bins"). */
int es_api_overlap(es_ctx *cx, es_err *err)
{
    es_pair p = {0};
    es_grid *grid = NULL;
    size_t bins, ka, kb;
    double blur;
    int rc = -1;
    const es_limits *lim = &cx->app->limits;
    if (es_pair_parse(cx, ab_names, &p, err) < 0 ||
        es_param_size(cx->query, "bins", es_default_bins(lim), 1, lim->max_bins, "max_bins", &bins, err) < 0 ||
        es_param_double(cx->query, "blur", 0, 0, (double)lim->max_bins, &blur, err) < 0)
        goto done;
    size_t ra = es_one_rank(&p.one[0]), rb = es_one_rank(&p.one[1]);
    if (es_param_size(cx->query, "ka", ra, 1, ra, NULL, &ka, err) < 0 ||
        es_param_size(cx->query, "kb", rb, 1, rb, NULL, &kb, err) < 0)
        goto done;
    char extra[96];
    snprintf(extra, sizeof extra, "ka=%zu|kb=%zu|bins=%zu|blur=%.17g", ka, kb, bins, blur);
    if (es_pair_precheck(cx, &p, extra)) {
        rc = 0;
        goto done;
    }
    if (es_pair_decompose(cx->app, &p, err) < 0 || es_overlap_compute(p.svd[0], ka, p.svd[1], kb, bins, blur, &grid, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *root = es_pair_root(&jc, &p, ab_names);
    json_t *input = json_object_get(root, "input");
    json_object_set_new(input, "ka", json_integer((json_int_t)ka));
    json_object_set_new(input, "kb", json_integer((json_int_t)kb));
    json_object_set_new(input, "bins", json_integer((json_int_t)bins));
    json_object_set_new(input, "blur", es_jnum(&jc, "blur", blur));
    es_render_grid(&jc, root, "overlap", grid);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_grid_free(grid);
    es_pair_free(&p);
    return rc;
}
