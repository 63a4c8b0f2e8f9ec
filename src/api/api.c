/* The generic side of the /v1 analyses: the gate (es_precheck: 304 when the
 * client's ETag matches the canonical description of the request, a copy from
 * the response cache, or deferral to the compute pool), one matrix as an
 * analysis sees it (es_one: averaging, selection, decomposition), the generic
 * runner of a table entry (es_run_*: parse its selections and spec, key, gate,
 * decompose, fill, reply) and the two listings. The analyses themselves are
 * the descriptors of src/api/analyses/. */
#include "embedscope/rowsel.h"
#include "embedscope/app.h"
#include "embedscope/cost.h"
#include "embedscope/descriptor.h"
#include "embedscope/format.h"
#include "embedscope/jobs.h"
#include "embedscope/memo.h"
#include "embedscope/negotiate.h"
#include "embedscope/params.h"
#include "embedscope/pool.h"
#include "embedscope/render.h"
#include "embedscope/results.h"
#include "embedscope/route.h"
#include "embedscope/version.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdatomic.h>

/* Analysis results are immutable for given inputs (the ETag covers them). */
#define CACHE_IMMUTABLE "public, max-age=86400"
/* Listings depend on the loaded configuration, and results of user models on
 * data a PUT may replace under the same URL: revalidate (the ETag changes). */
#define CACHE_REVALIDATE "no-cache"

/* Set a 200 JSON reply from root (consumed); fails like es_jctx_check /
 * es_json_body. For the listings and service endpoints: analyses answer with
 * es_gate_answer. */
int es_reply_json(es_ctx *cx, json_t *root, const es_jctx *jc, es_err *err)
{
    char *body = NULL;
    size_t len = 0;
    int rc = es_jctx_check(jc, err) < 0 || es_checkpoint(err) < 0
                 ? -1
                 : es_json_body(root, cx->reg->limits.max_response_bytes, &body, &len, err);
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
    const es_model *mod = es_catalogue_model(cx->reg, cx->model);
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

/* What identifies m's data in a reply's key and ETag: its identity, and
 * while that names the data by its file's stamp (its sha256 computed after
 * loading, es_matrix_data_id) the sha256 the reply shows, so a reply rendered
 * while it was computed ("sha256": null) is rendered again once it is known,
 * from the same cached decomposition. Caller frees. */
static char *reply_identity(const es_matrix *m)
{
    char *identity = es_matrix_identity(m);
    const char *sha = es_matrix_sha256(m);
    if (sha && strcmp(es_matrix_data_id(m), sha) == 0)
        return identity;
    char *key = es_asprintf("%s|sha256=%s", identity, sha ? sha : "-");
    free(identity);
    return key;
}

/* What identifies one selection's data in an ETag. Caller frees. */
static char *selection_key(const es_matrix *m, const es_selection *s)
{
    char *identity = reply_identity(m);
    char *key = es_asprintf("%s|rows=%s|center=%s", identity, s->canonical, es_centering_name(s->center));
    free(identity);
    return key;
}

/* Is a deferred request answered as a job at once: asked for, or predicted
 * longer than the synchronous window (a client's Prefer: wait, else
 * limits.sync_seconds) by more than the model's error bound? Otherwise it
 * runs, and becomes a job if it runs past the window (exchange.c, become_job). */
static bool wants_job(const es_ctx *cx)
{
    double window = cx->prefer_wait >= 0 ? cx->prefer_wait : cx->reg->limits.sync_seconds;
    return cx->analysis && (cx->prefer_async || cx->cost.seconds > ES_COST_ERROR_BOUND * window);
}

/* See cost.h: light when predicted (a request whose cost is not predicted,
 * such as an upload, is heavy) and within limits.light_seconds. */
es_task_cost es_task_cost_of(const es_ctx *cx)
{
    double seconds = cx->cost.seconds;
    return (es_task_cost){.seconds = seconds,
                          .light = seconds > 0 && cx->reg && seconds <= cx->reg->limits.light_seconds};
}

/* The rest of the gate once the client lacks the reply: a copy from the
 * response cache (keyed by hash, the sha256 of the canonical text in hex); else, from an
 * HTTP thread, the cost check and then deferral with the claim to compute it,
 * or to wait for the request already computing it (no queue slot); else (a
 * compute thread) the claim brought from the HTTP thread, or a claim made here
 * (waiting for a concurrent computation of the same key first). True when the
 * handler must stop. */
static bool settled_by_cache(es_ctx *cx, const char hash[65])
{
    memcpy(cx->key, hash, sizeof cx->key);
    const char *key = cx->key;
    if (cx->app->jobs && es_jobs_reply(cx->app->jobs, &cx->reg->limits, key, &cx->reply))
        return true; /* a job computed it: its reply is kept for limits.job_ttl_s */
    if (cx->may_defer) {
        cx->async = wants_job(cx);
        cx->deferred = es_results_join(cx->app->results, key, &cx->reply, &cx->claim, &cx->pending) != ES_JOIN_HIT;
        return true;
    }
    if (cx->claim) /* made by the HTTP thread for this very request */
        return false;
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
    const es_model *m = es_catalogue_model(cx->reg, model);
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

/* The gate of an immutable result; see route.h. The ETag comes from the
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
    es_buf key;
    es_buf_init(&key, 256);
    es_buf_printf(&key, "%s", params ? params : "");
    free(params);
    size_t result_len = key.len; /* what identifies the result, before its representation */
    if (cx->analysis) { /* one ETag and cache entry per representation */
        es_render_key(&cx->render, &key);
        cx->reply.vary_accept = true;
    }
    char *text = canonical_text(cx, key.s), hash[65];
    es_sha256_hex(text, strlen(text), hash); /* one hash: the ETag and the response cache's key */
    cx->gates++;
    free(text);
    es_etag_of_hash(hash, cx->reply.etag);
    cx->reply.cache_control = reads_user_model(cx) ? CACHE_REVALIDATE : CACHE_IMMUTABLE;
    if (cx->memo && cx->reg) { /* what this target is keyed to, for its repetitions (memo.h) */
        es_memo_value v = {.cache_control = cx->reply.cache_control, .vary_accept = cx->reply.vary_accept};
        memcpy(v.key, hash, sizeof v.key);
        memcpy(v.etag, cx->reply.etag, sizeof v.etag);
        es_memo_put(cx->memo, cx->reg->serial, &v);
    }
    bool settled = true;
    if (es_etag_matches(cx->if_none_match, cx->reply.etag))
        cx->reply.status = 304;
    else
        settled = settled_by_cache(cx, hash);
    if (cx->analysis && (!settled || cx->deferred)) { /* to be computed, here or on the pool: the key of
                                                        * its result, which every representation shares */
        key.s[result_len] = '\0';
        text = es_asprintf("embedscope-result %s %s %s", ES_VERSION, cx->path, key.s);
        es_sha256_hex(text, strlen(text), cx->kept_key);
        free(text);
    }
    free(key.s);
    return settled;
}

/* See route.h: es_precheck's outcome for a target this thread keyed before
 * under this catalogue: the 304, a job's kept reply or the cached one, in
 * es_precheck's order; false (nothing changed) when the reply is in neither
 * cache any more, and the request takes the full path. */
bool es_gate_memo(es_ctx *cx, const struct es_memo_target *t)
{
    es_memo_value v;
    if (!cx->reg || !es_memo_get(t, cx->reg->serial, &v))
        return false;
    if (es_etag_matches(cx->if_none_match, v.etag)) {
        memcpy(cx->reply.etag, v.etag, sizeof v.etag);
        cx->reply.cache_control = v.cache_control;
        cx->reply.vary_accept = v.vary_accept;
        cx->reply.status = 304;
    } else if (!(cx->app->jobs && es_jobs_reply(cx->app->jobs, &cx->reg->limits, v.key, &cx->reply)) &&
               !es_results_peek(cx->app->results, v.key, &cx->reply)) {
        return false;
    }
    memcpy(cx->key, v.key, sizeof cx->key);
    cx->memo_hit = true;
    return true;
}

/* The gate of a listing whose ETag is computed from its body; see route.h. */
bool es_precheck_listing(es_ctx *cx, const char *identity)
{
    char *text = canonical_text(cx, identity), hash[65];
    es_sha256_hex(text, strlen(text), hash);
    cx->gates++;
    free(text);
    cx->reply.cache_control = CACHE_REVALIDATE;
    cx->reply.etag_from_body = true;
    return settled_by_cache(cx, hash);
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

/* See descriptor.h. */
int es_param_average_order(const es_query *q, const char *name, es_average_order *out, es_err *err)
{
    size_t order;
    if (es_param_choice(q, name, es_average_orders, 0, &order, err) < 0)
        return -1;
    *out = order == 0 ? ES_AVERAGE_SELECTED : ES_AVERAGE_ALL;
    return 0;
}

/* The configured model a matrix id "model/matrix" belongs to, or NULL. */
static const es_model *model_of(const es_catalogue *reg, const es_matrix *m)
{
    const char *slash = strchr(m->id, '/');
    char name[80];
    if (!slash || (size_t)(slash - m->id) >= sizeof name)
        return NULL;
    snprintf(name, sizeof name, "%.*s", (int)(slash - m->id), m->id);
    return es_catalogue_model(reg, name);
}

/* <prefix>head: replace o->m by that head's view. ES_E_PARAM naming it. */
static int one_head(const es_catalogue *reg, const es_query *q, const char *prefix, es_one *o, es_err *err)
{
    char name[40];
    snprintf(name, sizeof name, "%shead", prefix);
    if (!es_query_get(q, name))
        return 0;
    const es_model *model = model_of(reg, o->m);
    size_t n_heads = model ? model->n_heads : 0;
    if (es_param_size(q, name, 0, 0, SIZE_MAX, NULL, &o->head, err) < 0 ||
        es_view_head(o->m, n_heads, o->head, name, &o->head_view, err) < 0)
        return -1;
    o->n_heads = n_heads;
    o->m = o->head_view;
    return 0;
}

/* <prefix>average_order and <prefix>average_mode, refused without <prefix>average
 * unless they are their documented default (the first choice), then ignored. */
static int average_choices(const es_query *q, const char *prefix, bool averaged, es_one *o, es_err *err)
{
    char name[2][48];
    size_t mode;
    snprintf(name[0], sizeof name[0], "%saverage_order", prefix);
    snprintf(name[1], sizeof name[1], "%saverage_mode", prefix);
    static const char *const *const choices[2] = {es_average_orders, es_average_modes};
    for (int i = 0; i < 2; i++) {
        const char *given = es_query_get(q, name[i]);
        if (!averaged && given && strcmp(given, choices[i][0]) != 0)
            return es_fail(err, ES_E_PARAM, name[i], "%s applies only with %saverage=g (or is its default, %s, "
                           "ignored)", name[i], prefix, choices[i][0]);
    }
    if (es_param_average_order(q, name[0], &o->order, err) < 0 ||
        es_param_choice(q, name[1], es_average_modes, 0, &mode, err) < 0)
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

/* A copy of selection s (its indices and canonical text). */
static es_selection selection_copy(const es_selection *s)
{
    es_selection c = *s;
    c.idx = es_malloc((s->n ? s->n : 1) * sizeof *c.idx);
    memcpy(c.idx, s->idx, s->n * sizeof *c.idx);
    c.canonical = es_strdup(s->canonical);
    return c;
}

/* Resolve <prefix>head, the selection and averaging; see descriptor.h. The averaged
 * copy has the shape of the matrix averaged, so the selection is resolved
 * against the latter whichever the order. */
int es_one_parse(const es_catalogue *reg, const es_query *q, const char *prefix, const es_matrix *m, bool with_center,
                 es_centering def, es_one *out, es_err *err)
{
    char name[40];
    snprintf(name, sizeof name, "%saverage", prefix);
    *out = (es_one){.source = m, .m = m};
    bool averaged = es_query_get(q, name) != NULL;
    if (one_head(reg, q, prefix, out, err) < 0 || average_choices(q, prefix, averaged, out, err) < 0)
        return -1;
    const es_matrix *base = out->m;
    if (averaged) {
        if (es_param_size(q, name, 1, 1, es_matrix_items(base), NULL, &out->average, err) < 0 ||
            (out->order == ES_AVERAGE_ALL && es_group_size_check(base, false, 0, out->average, name, err) < 0))
            return -1;
    }
    if (es_param_selection(q, prefix, with_center, def, base, &reg->limits, &out->sel, err) < 0)
        return -1;
    if (!averaged)
        return 0;
    if (out->order == ES_AVERAGE_SELECTED) {
        if (es_group_size_check(base, true, out->sel.n, out->average, name, err) < 0)
            return -1;
        out->averaged = selection_copy(&out->sel);
    }
    out->base = base;
    snprintf(out->average_param, sizeof out->average_param, "%s", name);
    size_t *scratch = es_malloc(out->sel.n * sizeof *scratch);
    out->n_groups = es_average_leaders(out->sel.idx, out->sel.n, out->average, out->order, scratch);
    free(scratch);
    if (out->groups)
        keep_group_leaders(&out->sel, out->average, out->order);
    return 0;
}

/* See descriptor.h. */
int es_one_average(es_app *app, es_one *o, bool build, es_err *err)
{
    if (!o->average || o->held)
        return 0;
    const es_selection *rows = o->order == ES_AVERAGE_SELECTED ? &o->averaged : NULL;
    if (!build)
        o->held = es_app_averaged_peek(app, o->base, rows, o->average);
    else if (es_app_averaged(app, o->base, rows, o->average, o->average_param, &o->held, err) < 0)
        return -1;
    if (o->held)
        o->m = o->held;
    return 0;
}

/* See descriptor.h. */
int es_run_average(es_run *run, bool build, es_err *err)
{
    for (int i = 0; i < 2; i++)
        if (run->one[i].m && es_one_average(run->app, &run->one[i], build, err) < 0)
            return -1;
    return 0;
}

/* Release o's selections, head view and averaged copy (o itself is the caller's). */
void es_one_free(es_one *o)
{
    es_selection_free(&o->sel);
    es_selection_free(&o->averaged);
    es_matrix_release(o->held);
    es_matrix_release(o->head_view);
    o->held = o->head_view = NULL;
}

/* The selection key plus head and averaging (the sha256 of an averaged copy
 * differs anyway); NULL while the copy is not built. */
char *es_one_key(const es_one *o)
{
    if (o->average && !o->held)
        return NULL;
    char *key = selection_key(o->m, &o->sel);
    char *full = es_asprintf("%s|head=%zu/%zu|average=%zu|order=%d|groups=%d", key, o->head, o->n_heads, o->average,
                             (int)o->order, (int)o->groups);
    free(key);
    return full;
}

/* es_render_input plus the model axis, head and averaging; see descriptor.h. Never fails. */
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
        json_object_set_new(input, "average_mode", json_string(es_average_modes[o->groups]));
        json_object_set_new(input, "n_groups", json_integer((json_int_t)o->n_groups));
    }
    return input;
}

/* See descriptor.h. */
bool es_one_cached(es_app *app, const es_one *o, const void *params)
{
    const size_t *km = params; /* topk_params: k, method */
    if (o->average && !o->held)
        return false; /* its copy is not built: neither is its decomposition */
    return es_cache_has(app->cache, o->m, o->sel.idx, o->sel.n, o->sel.center,
                        km ? (es_method)km[1] : ES_METHOD_EXACT, km ? km[0] : 0);
}
/* Do both selections of a pair name the same data (one decomposition serves both)? */
static bool same_selection(const es_run *run)
{
    char *a = es_one_key(&run->one[0]), *b = es_one_key(&run->one[1]);
    bool same = a && b && strcmp(a, b) == 0; /* a copy not built yet: not known, priced apart */
    free(a);
    free(b);
    return same;
}

/* See descriptor.h. */
void es_cost_run(const es_run *run, es_cost *out)
{
    es_cost_request(out);
    for (int i = 0; i < 2; i++) {
        const es_one *o = &run->one[i];
        if (!o->m)
            continue;
        size_t n = o->sel.n, d = es_matrix_dim(o->m);
        es_cost c = {0};
        if (run->a->shape == ES_SHAPE_ONE)
            es_cost_pass(&c, n, d); /* one pass over the selection */
        if (run->a->decomposes) {
            if (es_one_cached(run->app, o, run->a->decompose ? run->params : NULL) || (i == 1 && same_selection(run)))
                c.seconds += 0; /* a decomposition at hand (or the first one's) costs nothing */
            else if (run->a->decompose) { /* topk_params first: k and method */
                const size_t *km = run->params;
                es_cost_decompose(&c, (es_method)km[1], n, d, km[0]);
            } else
                es_cost_svd(&c, n, d);
        }
        if (run->a->cost && i == 0)
            run->a->cost(run, n, d, &c);
        es_cost_add(out, &c);
    }
}

/* o's decomposition through the cache (retained); fails like es_cache_svd. */
int es_one_svd(es_app *app, const es_one *o, es_svd **out, es_err *err)
{
    if (es_checkpoint(err) < 0) /* a safe point: the job may have been abandoned */
        return -1;
    return es_cache_svd(app->cache, o->m, o->sel.idx, o->sel.n, o->sel.center, out, err);
}

/* ---------------------------------------------------------------- the generic runner */

/* root's "input" object. */
json_t *es_out_input(es_out *out) { return json_object_get(out->root, "input"); }

/* The two matrices of a pair analysis, named by the parameters a->names: both
 * required (ES_E_PARAM / ES_E_NOTFOUND naming them) and in one model space
 * (ES_E_INCOMPATIBLE naming the second, which is compared against the first). */
static int pair_matrices(const es_catalogue *reg, const es_analysis *a, const es_query *q, const es_matrix *m[2],
                         es_err *err)
{
    for (int i = 0; i < 2; i++)
        if (es_param_matrix(q, a->names[i], reg, &m[i], err) < 0)
            return -1;
    return es_check_comparable(m[0], m[1], a->names[1], err);
}

/* Parse one selection of the run (prefix "" or "<name>_"), centred by the
 * descriptor's default when it takes no centring parameter. */
static int run_selection(const es_catalogue *reg, const es_analysis *a, const es_query *q, const char *prefix,
                         const es_matrix *m, es_one *out, es_err *err)
{
    if (!a->average_param && !a->head_param) { /* the selection alone (averaging's average_order is its own) */
        *out = (es_one){.source = m, .m = m};
        if (es_param_selection(q, prefix, a->center_param, a->def_center, m, &reg->limits, &out->sel, err) < 0)
            return -1;
    } else if (es_one_parse(reg, q, prefix, m, a->center_param, a->def_center, out, err) < 0) {
        return -1;
    }
    if (!a->center_param)
        out->sel.center = a->def_center;
    return 0;
}

/* ES_E_PARAM naming "table" when the run will not produce table `name`
 * (NULL: the main one; a name outside a->tables is es_negotiate's to refuse). */
static int run_table(const es_run *run, const char *name, es_err *err)
{
    const es_analysis *a = run->a;
    if (!name || !a->produces || a->produces(run, name))
        return 0;
    es_buf list;
    es_buf_init(&list, 64);
    for (size_t i = 0; a->tables[i]; i++)
        if (a->produces(run, a->tables[i]))
            es_buf_printf(&list, "%s%s", list.len ? ", " : "", a->tables[i]);
    int rc = es_fail(err, ES_E_PARAM, "table", "table='%.64s' is not produced by this %s request; it produces: %s",
                     name, a->name, list.s);
    free(list.s);
    return rc;
}

/* Parse a table entry's selections and spec; see descriptor.h. */
int es_run_parse(es_app *app, const es_catalogue *reg, const es_analysis *a, const es_query *q, const es_matrix *m,
                 es_run *run, es_err *err)
{
    *run = (es_run){.app = app, .a = a, .params = es_calloc(1, a->params_size ? a->params_size : 1)};
    const es_matrix *ms[2] = {m, NULL};
    size_t n = a->shape == ES_SHAPE_PAIR ? 2 : 1;
    if (a->shape == ES_SHAPE_PAIR && pair_matrices(reg, a, q, ms, err) < 0)
        return -1;
    es_pctx pc = {.lim = &reg->limits};
    run->lim = &reg->limits;
    for (size_t i = 0; i < n; i++) {
        char prefix[16] = "";
        if (a->shape == ES_SHAPE_PAIR)
            snprintf(prefix, sizeof prefix, "%s_", a->names[i]);
        if (run_selection(reg, a, q, prefix, ms[i], &run->one[i], err) < 0)
            return -1;
        pc.m[i] = run->one[i].m;
        pc.rank[i] = es_one_rank(&run->one[i]);
    }
    if (es_spec_parse(a->spec, q, &pc, run->params, err) < 0 || (a->validate && a->validate(run, err) < 0))
        return -1;
    return run_table(run, es_query_get(q, "table"), err);
}

/* The selections' keys and every parameter of the spec; see descriptor.h. */
char *es_run_key(const es_run *run, const es_query *q)
{
    es_buf b;
    es_buf_init(&b, 256);
    es_buf_printf(&b, "analysis=%s", run->a->name);
    for (int i = 0; i < 2; i++)
        if (run->one[i].m) {
            char *key = es_one_key(&run->one[i]);
            if (!key) { /* an averaged copy not built yet */
                free(b.s);
                return NULL;
            }
            es_buf_printf(&b, "|%d=%s", i + 1, key);
            free(key);
        }
    if (run->labels)
        es_buf_printf(&b, "|labels=%s", run->labels->sha256);
    es_spec_key(run->a->spec, q, run->params, &b);
    return b.s;
}

/* {"input": {...}} of a run: the selections ("matrix", or the pair's names)
 * then every parameter (es_spec_echo). */
static json_t *run_root(const es_run *run, const es_query *q, es_jctx *jc)
{
    json_t *input = json_object();
    if (run->a->shape == ES_SHAPE_ONE)
        json_object_set_new(input, "matrix", es_one_input(jc, &run->one[0], run->svd[0]));
    else
        for (int i = 0; i < 2; i++)
            json_object_set_new(input, run->a->names[i], es_one_input(jc, &run->one[i], run->svd[i]));
    es_spec_echo(run->a->spec, q, run->params, jc, input);
    json_t *root = analysis_root(input);
    if (run->a->shape == ES_SHAPE_PAIR) { /* a square matrix with a defaulted axis may be compared wrongly */
        const es_matrix *ms[2] = {run->one[0].source, run->one[1].source};
        json_object_set_new(root, "warnings", es_axis_warnings(NULL, ms, 2));
    }
    return root;
}

/* Decompose and fill; see descriptor.h. */
int es_run_fill(es_run *run, const es_query *q, es_out *out, es_err *err)
{
    if (es_checkpoint(err) < 0) /* a safe point: the job may have been abandoned */
        return -1;
    if (es_run_average(run, true, err) < 0) /* built at parse time unless parsed without es_run_average */
        return -1;
    for (int i = 0; i < 2 && run->a->decomposes; i++)
        if (run->one[i].m && !run->svd[i] &&
            (run->a->decompose ? run->a->decompose(run, i, &run->svd[i], err)
                               : es_one_svd(run->app, &run->one[i], &run->svd[i], err)) < 0)
            return -1;
    out->root = run_root(run, q, &out->jc);
    if (run->a->fill(run, out, err) < 0) {
        es_out_free(out);
        return -1;
    }
    return 0;
}

/* Release the selections, decompositions and params; see descriptor.h. */
void es_run_free(es_run *run)
{
    for (int i = 0; i < 2; i++) {
        es_svd_release(run->svd[i]);
        es_one_free(&run->one[i]);
        run->svd[i] = NULL;
    }
    es_labels_release(run->labels);
    run->labels = NULL;
    free(run->params);
    run->params = NULL;
}

/* The memory a request may be predicted to need: limits.max_request_memory,
 * or (0) half of the physical memory. */
static double memory_budget(const es_limits *lim)
{
    if (lim->max_request_memory)
        return (double)lim->max_request_memory;
    /* glibc asks the kernel (sysinfo) at every call: that was 2.7 % of a cached reply's CPU */
    static _Atomic double half_physical;
    double half = atomic_load_explicit(&half_physical, memory_order_relaxed);
    if (half == 0) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        half = pages > 0 && page > 0 ? (double)pages * (double)page / 2 : 4.0 * (1 << 30);
        atomic_store_explicit(&half_physical, half, memory_order_relaxed);
    }
    return half;
}

/* See cost.h: the one cost that refuses a request (it could never be served). */
int es_check_memory(const es_ctx *cx, es_err *err)
{
    double budget = memory_budget(&cx->reg->limits);
    if (cx->cost.bytes <= budget)
        return 0;
    return es_fail(err, ES_E_LIMIT, "max_request_memory",
                   "this request is predicted to need %.3g bytes of memory, more than limits.max_request_memory "
                   "(%.3g bytes; predicted compute time %.3g s); it grows with %s: ask for less", cx->cost.bytes,
                   budget, cx->cost.seconds,
                   cx->analysis && cx->analysis->cost_params ? cx->analysis->cost_params : "the rows, k and matrices");
}

/* See descriptor.h: the compute thread of an exchange (exchange.c) has the
 * same cx, with the key and the claim the HTTP thread's gate left there. */
bool es_gate_keyed(const es_ctx *cx)
{
    return !cx->may_defer && cx->claim && cx->key[0];
}

/* The gate, then the result and its reply; see descriptor.h. */
int es_gate_answer(es_ctx *cx, char *key, es_fill_fn fill, void *arg, es_err *err)
{
    if (es_check_memory(cx, err) < 0) {
        free(key);
        return -1;
    }
    if (!key) { /* an averaged copy not built yet (es_run_average): the compute thread builds it, then keys */
        if (!cx->may_defer) {
            fprintf(stderr, "embedscope: %s reached its computation without its key\n", cx->path);
            abort(); /* a programming error: a handler computing keys before building its copies */
        }
        cx->async = wants_job(cx);
        cx->deferred = true; /* no claim: the compute thread claims the key (es_results_claim) */
        return 0;
    }
    cx->keys += *key != '\0';
    bool settled = !es_gate_keyed(cx) && es_precheck(cx, "%s", key);
    free(key);
    if (settled)
        return 0;
    bool tables_only = cx->render.format != ES_FMT_JSON || cx->render.columns;
    es_kept *kept = tables_only && cx->kept_key[0] ? es_results_kept(cx->app->results, cx->kept_key) : NULL;
    if (kept) { /* computed for another representation: rendered, not computed again */
        int rc = es_reply_kept(cx, es_kept_data(kept), err);
        es_kept_release(cx->app->results, kept);
        return rc;
    }
    es_out out = {.tables_only = tables_only, .jc.checks_only = tables_only};
    if (fill(arg, &out, err) < 0) {
        es_out_free(&out);
        return -1;
    }
    json_t *input = es_out_input(&out);
    if (input) /* what this computation was predicted to take */
        json_object_set_new(input, "cost", es_cost_json(&out.jc, &cx->cost));
    return es_reply_out(cx, &out, err);
}

/* A parsed run and the query it was parsed from: es_run_fill as an es_fill_fn. */
typedef struct run_query {
    es_run *run;
    const es_query *q;
} run_query;

static int fill_run(void *arg, es_out *out, es_err *err)
{
    run_query *rq = arg;
    return es_run_fill(rq->run, rq->q, out, err);
}

/* A table entry's parsed run, as it travels from the HTTP thread to the compute thread. */
typedef struct run_parsed {
    es_parsed base;
    es_run run;
} run_parsed;

static void run_parsed_free(es_parsed *p)
{
    run_parsed *r = (run_parsed *)p;
    es_run_free(&r->run);
    free(r);
}

/* The gate (keyed now if its averaged copies had to be built first) and the answer. */
static int run_answer(es_ctx *cx, es_run *run, es_err *err)
{
    char *key = es_gate_keyed(cx) ? es_strdup("") : es_run_key(run, cx->query); /* keyed by the HTTP thread */
    return es_gate_answer(cx, key, fill_run, &(run_query){run, cx->query}, err);
}

/* The compute side of a run parsed by an HTTP thread: its averaged copies, then run_answer. */
static int run_resume(es_ctx *cx, es_parsed *p, es_err *err)
{
    es_run *run = &((run_parsed *)p)->run;
    return es_run_average(run, true, err) < 0 ? -1 : run_answer(cx, run, err);
}

/* See route.h. */
bool es_parsed_hand_over(es_ctx *cx, es_parsed *p)
{
    if (!cx->deferred || cx->parsed)
        return false;
    cx->parsed = p; /* computed elsewhere: from this parse */
    return true;
}

/* See route.h. */
void es_parsed_free(es_parsed *p)
{
    if (p)
        p->free(p);
}

/* The generic handler of a table entry: parse, gate (304, a cached copy or
 * deferral to the pool, with the parsed run: cx->parsed), else compute and reply. */
int es_run_route(es_ctx *cx, const es_analysis *a, es_err *err)
{
    const es_matrix *m = NULL;
    run_parsed *r = es_calloc(1, sizeof *r);
    r->base = (es_parsed){run_resume, run_parsed_free};
    es_run *run = &r->run;
    int rc = -1;
    if ((a->shape == ES_SHAPE_ONE && es_path_matrix(cx, &m, err) < 0) ||
        es_run_parse(cx->app, cx->reg, a, cx->query, m, run, err) < 0 ||
        es_run_average(run, !cx->may_defer, err) < 0)
        goto done;
    es_cost_run(run, &run->cost);
    es_cost_add(&cx->cost, &run->cost);
    if (a->plan && es_check_memory(cx, err) == 0) { /* memory first: it refuses whatever the format */
        es_out_plan plan = {0};
        a->plan(run, &plan);
        if (es_check_planned_size(cx, &plan, err) < 0)
            goto done;
    }
    if (a->with_labels)
        run->labels = es_labels_retain(es_catalogue_labels(cx->reg, cx->model, cx->matrix));
    rc = run_answer(cx, run, err);
    if (rc == 0 && es_parsed_hand_over(cx, &r->base))
        r = NULL;
done:
    if (r)
        run_parsed_free(&r->base);
    return rc;
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

/* GET /v1/models/{model}: the model as the listing shows it, with the state of
 * the decompositions the configuration's warm list plans for its matrices
 * ("warm": planned, warmed by start-up warming, cached in memory now; "state":
 * "ready" once warming has decomposed all of them, "warming" before: an entry
 * the cache evicts later leaves the model ready, a request recomputes it),
 * read at each request, so revalidated by its body. ES_E_NOTFOUND naming "model". */
int es_api_model(es_ctx *cx, es_err *err)
{
    const es_model *model = es_catalogue_model(cx->reg, cx->model);
    if (!model)
        return es_fail(err, ES_E_NOTFOUND, "model", "no model '%s' (GET /v1/models lists them)", cx->model);
    size_t planned = 0, warmed = 0, cached = 0, len = strlen(model->name);
    for (size_t i = 0; i < cx->app->n_plans; i++) {
        const es_warm_plan *p = &cx->app->plans[i];
        if (strncmp(p->m->id, model->name, len) != 0 || p->m->id[len] != '/')
            continue;
        planned++;
        warmed += atomic_load(&p->warmed);
        cached += cx->app->cache && es_cache_has(cx->app->cache, p->m, p->idx, p->n, p->center, ES_METHOD_EXACT, 0);
    }
    es_jctx jc = {0};
    json_t *doc = es_render_model(&jc, model);
    json_object_set_new(doc, "state", json_string(warmed == planned ? "ready" : "warming"));
    json_object_set_new(doc, "warm", json_pack("{s:I, s:I, s:I}", "planned", (json_int_t)planned, "warmed",
                                               (json_int_t)warmed, "cached", (json_int_t)cached));
    cx->reply.cache_control = CACHE_REVALIDATE;
    cx->reply.etag_from_body = true;
    return es_reply_json(cx, doc, &jc, err);
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
    char *identity = reply_identity(model->matrices[j]);
    const es_labels *labels = model->matrix_labels ? model->matrix_labels[j] : NULL;
    char *key = es_asprintf("%s|%s|%.17g|labels=%s", identity, model->matrix_descriptions[j], model->matrix_created[j],
                            labels ? labels->sha256 : "");
    es_cost_request(&cx->cost); /* the row norms: one pass over the matrix (the compute pool's lane) */
    es_cost_pass(&cx->cost, es_matrix_items(model->matrices[j]), es_matrix_dim(model->matrices[j]));
    bool settled = es_precheck_listing(cx, key);
    free(key);
    free(identity);
    if (settled)
        return 0;
    es_jctx jc = {0};
    return es_reply_json(cx, es_describe_matrix(&jc, model, j), &jc, err);
}

/* See route.h: the row norms, then the rendering. Never fails. */
json_t *es_describe_matrix(es_jctx *jc, const es_model *model, size_t j)
{
    es_norms norms;
    item_norms(model->matrices[j], &norms);
    return es_render_matrix(jc, model, j, &norms);
}
