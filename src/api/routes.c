/* The routing table: every path the daemon answers, the query parameters each
 * one accepts (anything else is a 400 naming it) and its handler. The service
 * endpoints (health, readiness, OpenAPI, metrics, problem types) live here too. */
#include "embedscope/blas.h"
#include "embedscope/app.h"
#include "embedscope/descriptor.h"
#include "embedscope/format.h"
#include "embedscope/jobs.h"
#include "embedscope/memo.h"
#include "embedscope/metrics.h"
#include "embedscope/negotiate.h"
#include "embedscope/params.h"
#include "embedscope/problem.h"
#include "embedscope/render.h"
#include "embedscope/results.h"
#include "embedscope/route.h"
#include "embedscope/uploads.h"
#include "embedscope/version.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>

/* The OpenAPI document compiled into the binary (src/core/embedded.S). */
extern const char es_embedded_openapi[];

static const char *const no_params[] = {NULL};
static const char *const labels_params[] = {"format", NULL};
static const char *const search_params[] = {"q", "regex", "case", "column", "limit", NULL};

/* Set a reply with a static body. */
static void static_reply(es_ctx *cx, unsigned status, const char *type, const char *body)
{
    cx->reply.status = status;
    cx->reply.content_type = type;
    cx->reply.body = (char *)body;
    cx->reply.len = strlen(body);
    cx->reply.body_static = true;
}

/* Alive: no dependencies. Never fails. */
static int service_healthz(es_ctx *cx, es_err *err)
{
    (void)err;
    static_reply(cx, 200, "application/json", "{\"status\":\"ok\"}");
    cx->reply.cache_control = "no-store";
    return 0;
}

/* Ready once the configured decompositions are cached: 503 problem before.
 * Never fails (the 503 is a reply, not an error). */
static int service_readyz(es_ctx *cx, es_err *err)
{
    (void)err;
    cx->reply.cache_control = "no-store";
    if (atomic_load(&cx->app->ready)) {
        static_reply(cx, 200, "application/json", "{\"status\":\"ready\"}");
        return 0;
    }
    json_t *p = es_problem_new(ES_PROB_NOT_READY, "the configured decompositions are still being computed", NULL,
                               cx->path, cx->request_id);
    es_err ignored;
    if (es_json_body(p, 0, &cx->reply.body, &cx->reply.len, &ignored) < 0)
        static_reply(cx, 503, "application/problem+json", "{\"status\":503}");
    cx->reply.status = 503;
    cx->reply.content_type = "application/problem+json";
    json_decref(p);
    return 0;
}

/* The embedded OpenAPI document, revalidated by its ETag. Never fails. */
static int service_openapi(es_ctx *cx, es_err *err)
{
    (void)err;
    static_reply(cx, 200, "application/yaml", es_embedded_openapi);
    cx->reply.cache_control = "no-cache";
    cx->reply.etag_from_body = true;
    return 0;
}

/* The Prometheus exposition, never cached. Never fails. */
static int service_metrics(es_ctx *cx, es_err *err)
{
    (void)err;
    es_app *app = cx->app;
    cx->reply.status = 200;
    cx->reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
    cx->reply.body = es_metrics_text(&app->metrics, app->cache, app->results, app->pool, app->jobs,
                                     atomic_load(&app->ready), cx->reg);
    cx->reply.len = strlen(cx->reply.body);
    cx->reply.cache_control = "no-store";
    return 0;
}

/* /v1's "blas": the OpenBLAS build and kernels, the CPU, the self-test and the
 * thread policy (what does not change while the daemon runs; the thread count
 * of the moment is the embedscope_blas_threads metric). Never fails. */
static json_t *blas_json(void)
{
    const es_blas_info *bi = es_blas_info_get();
    es_blas_threads_state th;
    es_blas_threads_get(&th);
    const es_cpu_features *f = &bi->cpu;
    json_t *features = json_array();
    const struct {
        bool on;
        const char *name;
    } flags[] = {{f->avx, "avx"},         {f->avx2, "avx2"},         {f->fma, "fma"},           {f->avx512f, "avx512f"},
                 {f->avx512dq, "avx512dq"}, {f->avx512bw, "avx512bw"}, {f->avx512vl, "avx512vl"}};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        if (flags[i].on)
            json_array_append_new(features, json_string(flags[i].name));
    json_t *threads = json_pack("{s:s, s:I}", "policy", th.automatic ? "auto" : "fixed", th.automatic ? "cores" : "per_computation",
                                (json_int_t)th.budget);
    json_t *b = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:{s:s, s:o}, s:{s:b, s:f}, s:o}", "core", bi->core,
                          "kernels", es_isa_name(bi->core_isa), "coretype_source", es_coretype_source_name(bi->source),
                          "version", bi->version, "config", bi->config, "parallel",
                          bi->parallel ? bi->parallel : "unknown", "cpu", "isa", es_isa_name(bi->cpu_isa), "features",
                          features, "self_test", "passed", bi->self_test_passed, "max_error", bi->self_test_error,
                          "threads", threads);
    if (bi->library_core[0])
        json_object_set_new(b, "library_core", json_string(bi->library_core));
    if (bi->warning[0])
        json_object_set_new(b, "warning", json_string(bi->warning));
    return b;
}

/* The API root: version, build commit, the BLAS kernels and threads and the
 * configured request limits, revalidated by its ETag. Fails like es_reply_json. */
static int service_v1(es_ctx *cx, es_err *err)
{
    const es_limits *l = &cx->reg->limits;
    json_t *limits = json_object();
    json_object_set_new(limits, "max_k", json_integer((json_int_t)l->max_k));
    json_object_set_new(limits, "max_bins", json_integer((json_int_t)l->max_bins));
    json_object_set_new(limits, "max_rows", json_integer((json_int_t)l->max_rows));
    json_object_set_new(limits, "max_exclude", json_integer((json_int_t)l->max_exclude));
    json_object_set_new(limits, "max_response_bytes", json_integer((json_int_t)l->max_response_bytes));
    json_object_set_new(limits, "sync_seconds", json_real(l->sync_seconds));
    json_object_set_new(limits, "job_ttl_s", json_integer((json_int_t)l->job_ttl_s));
    json_object_set_new(limits, "max_jobs_per_client", json_integer((json_int_t)l->max_jobs_per_client));
    json_t *root = json_object();
    json_object_set_new(root, "service", json_string("embedscope"));
    json_object_set_new(root, "version", json_string(ES_VERSION));
    json_object_set_new(root, "commit", json_string(es_build_commit));
    json_object_set_new(root, "blas", blas_json());
    json_object_set_new(root, "limits", limits);
    es_jctx jc = {0};
    if (es_reply_json(cx, root, &jc, err) < 0)
        return -1;
    cx->reply.cache_control = "no-cache";
    cx->reply.etag_from_body = true;
    return 0;
}

/* GET /v1/jobs: the decompositions being computed now (never cached). Fails
 * only as es_reply_json. */
static int service_jobs(es_ctx *cx, es_err *err)
{
    es_computing *computing;
    size_t n = es_cache_computing(cx->app->cache, &computing);
    json_t *root = es_render_computing(computing, n);
    es_computing_free(computing, n);
    json_object_set_new(root, ES_JOBS_LISTING, es_jobs_json(cx->app->jobs, &cx->reg->limits, cx->owner));
    es_jctx jc = {0};
    if (es_reply_json(cx, root, &jc, err) < 0)
        return -1;
    cx->reply.cache_control = "no-store";
    return 0;
}

/* GET /v1/jobs/{id}: the job's record; once done a 303 to its result's URL
 * (whose gate serves the reply the job keeps). ES_E_NOTFOUND naming "id". */
static int service_job(es_ctx *cx, es_err *err)
{
    const es_limits *lim = &cx->reg->limits;
    es_ajob *a = es_jobs_get(cx->app->jobs, lim, cx->slug, cx->owner);
    char *url = NULL; /* its result's, once done */
    json_t *doc = a ? es_ajob_json(a, lim) : es_jobs_remote(cx->app->jobs, lim, cx->slug, cx->owner, &url);
    const char *state = json_string_value(json_object_get(doc, "state")); /* the document's: see es_ajob_json */
    if (a && state && strcmp(state, es_job_state_name(ES_JOB_DONE)) == 0)
        url = es_strdup(es_ajob_url(a));
    es_ajob_release(a);
    if (!doc) { /* another client's job is not there for this one */
        free(url);
        return es_fail(err, ES_E_NOTFOUND, "id", "no job '%s' of this client (a finished job is kept "
                       "limits.job_ttl_s = %u s)", cx->slug, lim->job_ttl_s);
    }
    es_jctx jc = {0};
    int rc = es_reply_json(cx, doc, &jc, err);
    if (rc == 0) {
        cx->reply.cache_control = "no-store";
        if (url) {
            cx->reply.status = 303;
            es_reply_location(&cx->reply, url);
        }
    }
    free(url);
    return rc;
}

/* The description of a problem type; ES_E_NOTFOUND naming "slug". */
static int service_problem(es_ctx *cx, es_err *err)
{
    const char *doc = es_problem_doc(cx->slug);
    if (!doc)
        return es_fail(err, ES_E_NOTFOUND, "slug", "no problem type '%s'", cx->slug);
    static_reply(cx, 200, "text/plain; charset=utf-8", doc);
    cx->reply.cache_control = "public, max-age=86400";
    cx->reply.etag_from_body = true;
    return 0;
}

/* The service endpoints and listings; the analyses' routes come from the table. */
static const es_route service_routes[] = {
    {"/", no_params, es_web_index, NULL, false, "GET 200 304 400"},
    {"/docs", no_params, es_web_docs, NULL, false, "GET 200 304 400 404"},
    {"/assets/{file}", no_params, es_web_file, NULL, false, "GET 200 304 400 404"},
    {"/healthz", no_params, service_healthz, NULL, false, "GET 200 400"},
    {"/readyz", no_params, service_readyz, NULL, false, "GET 200 400 503"},
    {"/openapi.yaml", no_params, service_openapi, NULL, true, "GET 200 304 400"},
    {"/metrics", no_params, service_metrics, NULL, false, "GET 200 400"},
    {"/problems/{slug}", no_params, service_problem, NULL, false, "GET 200 304 400 404"},
    {"/v1", no_params, service_v1, NULL, true, "GET 200 304 400"},
    {"/v1/jobs", no_params, service_jobs, NULL, false, "GET 200 400"},
    {"/v1/jobs/{id}", no_params, service_job, NULL, false, "GET 200 303 400 404; DELETE 204 403 404"},
    {"/v1/models", no_params, es_api_models, NULL, true, "GET 200 304 400"},
    {"/v1/models/{model}", no_params, es_api_model, NULL, false, "GET 200 304 400 404"},
    {ES_MATRIX_ROUTE, no_params, es_api_matrix, NULL, false,
     "GET 200 304 400 404 503 504; PUT 200 201 400 401 403 408 409 413 415 503 507; DELETE 204 400 401 403 404 409"},
    {ES_LABELS_ROUTE, labels_params, es_api_labels, NULL, false,
     "GET 200 304 400 404 503 504; PUT 200 400 401 403 404 408 409 413 415 503 507; DELETE 204 400 401 403 404 409"},
    {ES_LABELS_ROUTE "/search", search_params, es_api_labels_search, NULL, false, "GET 200 304 400 404 503 504"},
};
#define N_SERVICE (sizeof service_routes / sizeof *service_routes)

/* The handler of every table entry: its own, or the generic runner. */
static int analysis_handler(es_ctx *cx, es_err *err)
{
    const es_analysis *a = cx->analysis;
    return a->handler ? a->handler(cx, err) : es_run_route(cx, a, err);
}

/* The service routes followed by one route per table entry, built once and
 * sized from the table, so no entry is ever left without its route. */
static es_route *routes;
static size_t n_routes;
static pthread_once_t routes_once = PTHREAD_ONCE_INIT;

static void build_routes(void)
{
    size_t n_analyses = 0;
    while (es_analyses[n_analyses])
        n_analyses++;
    routes = es_calloc(N_SERVICE + n_analyses, sizeof *routes); /* kept for the process */
    for (size_t i = 0; i < N_SERVICE; i++)
        routes[n_routes++] = service_routes[i];
    for (size_t i = 0; i < n_analyses; i++)
        routes[n_routes++] = (es_route){es_analyses[i]->route, NULL, analysis_handler, es_analyses[i], false, NULL};
}

/* Where a capture named `name` ("{model}") is stored in cx, with its size. */
static char *capture_slot(es_ctx *cx, const char *name, size_t len, size_t *size)
{
    if (len == 7 && strncmp(name, "{model}", len) == 0)
        return *size = sizeof cx->model, cx->model;
    if (len == 8 && strncmp(name, "{matrix}", len) == 0)
        return *size = sizeof cx->matrix, cx->matrix;
    return *size = sizeof cx->slug, cx->slug;
}

/* Match path against pattern segment by segment, filling captures. A capture
 * matches one non-empty segment that fits its buffer. */
static bool match(const char *pattern, const char *path, es_ctx *cx)
{
    while (*pattern && *path) {
        if (*pattern++ != '/' || *path++ != '/')
            return false;
        size_t plen = strcspn(pattern, "/"), len = strcspn(path, "/");
        if (*pattern == '{') {
            size_t size;
            char *slot = capture_slot(cx, pattern, plen, &size);
            if (len == 0 || len >= size)
                return false;
            memcpy(slot, path, len);
            slot[len] = '\0';
        } else if (plen != len || strncmp(pattern, path, len) != 0) {
            return false;
        }
        pattern += plen;
        path += len;
    }
    return *pattern == '\0' && *path == '\0';
}

/* See route.h. */
bool es_route_writable(const es_route *route)
{
    return strcmp(route->pattern, ES_MATRIX_ROUTE) == 0 || strcmp(route->pattern, ES_LABELS_ROUTE) == 0;
}

/* See route.h. */
size_t es_routes(const es_route **out)
{
    pthread_once(&routes_once, build_routes);
    *out = routes;
    return n_routes;
}

/* The matching route, or NULL. */
const es_route *es_route_find(const char *path, es_ctx *cx)
{
    pthread_once(&routes_once, build_routes);
    cx->route_lookups++;
    for (size_t i = 0; i < n_routes; i++)
        if (match(routes[i].pattern, path, cx)) {
            cx->analysis = routes[i].analysis;
            return &routes[i];
        }
    return NULL;
}

/* Add name to names[0..n) unless it is there; the new count. */
static size_t add_once(const char **names, size_t n, size_t cap, const char *name)
{
    for (size_t j = 0; j < n; j++)
        if (strcmp(names[j], name) == 0)
            return n;
    if (n < cap - 1)
        names[n++] = name;
    return n;
}

/* The parameters a table entry accepts: its own (es_spec_allowed) and, for
 * compare, those of every comparable analysis (a pair analysis' reference side
 * included), without repeats. */
static size_t analysis_params(const es_analysis *a, const char **names, size_t cap)
{
    size_t n = es_spec_allowed(a, names, cap);
    n = es_render_params(a, names, n, cap);
    for (size_t i = 0; a->gathers && a->gathers[i]; i++) {
        const es_analysis *c = a->gathers[i];
        if (!c->comparable)
            continue;
        for (const es_pspec *p = c->spec; p->name; p++)
            n = add_once(names, n, cap, p->name);
        const char *all[ES_PARAMS_MAX * 2];
        size_t m = es_spec_allowed(c, all, sizeof all / sizeof *all);
        for (size_t j = 0; j < m; j++)
            if (es_compare_reference_param(c, all[j]))
                n = add_once(names, n, cap, all[j]);
    }
    names[n] = NULL;
    return n;
}

/* See route.h. A list that fills names[] may have been cut: that is a table
 * grown past ES_PARAMS_MAX, stopped here rather than refusing parameters. */
size_t es_route_params(const es_route *route, const char **names, size_t cap)
{
    size_t n = 0;
    if (route->analysis)
        n = analysis_params(route->analysis, names, cap);
    else
        while (route->params[n] && n < cap - 1)
            names[n] = route->params[n], n++;
    names[n] = NULL;
    if (n >= cap - 1) {
        fprintf(stderr, "embedscope: route %s takes %zu parameters or more: raise ES_PARAMS_MAX\n", route->pattern, n);
        abort();
    }
    return n;
}

/* Strict parameter check, the handler (or the reply pre-rendered for this
 * catalogue; on a compute thread, the request the HTTP thread parsed, resumed),
 * then the fresh reply finished and, if claimed, published to (or released
 * from) the response cache or kept as the pre-rendered one. */
int es_route_dispatch(const es_route *route, es_ctx *cx, es_err *err)
{
    const char *names[ES_PARAMS_MAX * 2];
    es_route_params(route, names, sizeof names / sizeof *names);
    bool resumed = cx->parsed && !cx->may_defer; /* checked, negotiated and parsed by the HTTP thread */
    if (!resumed && (es_query_check(cx->query, names, err) < 0 ||
                     (route->analysis && es_negotiate(cx, route->analysis, err) < 0)))
        return -1;
    bool prerendered = route->prerendered && cx->reg && cx->app->prerendered;
    if (prerendered && es_prerendered_get(cx->app->prerendered, route, cx))
        return 0;
    unsigned long hashes = es_digests_generation(); /* before rendering: a hash settled meanwhile renders again */
    /* a repeated target on this HTTP thread: its key without parsing, canonicalising and hashing */
    es_memo_target target;
    bool memo = !resumed && !prerendered && cx->may_defer && cx->reg &&
                es_memo_make(&target, cx->path, cx->query, cx->accept, hashes);
    if (memo && es_gate_memo(cx, &target))
        return 0;
    cx->memo = memo ? &target : NULL;
    int rc = resumed ? cx->parsed->resume(cx, cx->parsed, err) : route->handler(cx, err);
    cx->memo = NULL;
    bool fresh = rc == 0 && !cx->deferred && cx->reply.status == 200;
    if (fresh && cx->reply.etag_from_body && !cx->reply.etag[0])
        es_etag_of(cx->reply.body, cx->reply.len, cx->reply.etag);
    if (fresh && prerendered)
        es_prerendered_put(cx->app->prerendered, route, cx, hashes);
    if (cx->claim && !cx->deferred) { /* a deferred claim goes with its job to the compute pool */
        if (fresh && cx->accepts_gzip)
            es_reply_gzip(&cx->reply); /* once, here (a compute thread), for the requests that accept it */
        /* a failure that holds for every identical request is shared with the waiters; one of
         * this request's own (abandoned, out of memory, I/O) makes them compute themselves */
        bool shared = rc < 0 && err->code != ES_E_CANCELLED && err->code != ES_E_SHUTDOWN && err->code != ES_E_NOMEM &&
                      err->code != ES_E_IO;
        es_results_settle(cx->app->results, cx->claim, fresh ? &cx->reply : NULL, shared ? err : NULL);
        cx->claim = NULL;
    }
    return rc;
}
