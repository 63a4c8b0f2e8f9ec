/* The routing table: every path the daemon answers, the query parameters each
 * one accepts (anything else is a 400 naming it) and its handler. The service
 * endpoints (health, readiness, OpenAPI, metrics, problem types) live here too. */
#include "http/http.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The OpenAPI document compiled into the binary (src/core/embedded.S). */
extern const char es_embedded_openapi[];

static const char *const no_params[] = {NULL};

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
    cx->reply.body = es_metrics_text(&app->metrics, app->cache, app->results, app->pool, atomic_load(&app->ready),
                                     cx->reg);
    cx->reply.len = strlen(cx->reply.body);
    cx->reply.cache_control = "no-store";
    return 0;
}

/* The API root: version, build commit and the configured request limits,
 * revalidated by its ETag. Fails like es_reply_json. */
static int service_v1(es_ctx *cx, es_err *err)
{
    const es_limits *l = &cx->app->limits;
    json_t *limits = json_object();
    json_object_set_new(limits, "max_k", json_integer((json_int_t)l->max_k));
    json_object_set_new(limits, "max_bins", json_integer((json_int_t)l->max_bins));
    json_object_set_new(limits, "max_rows", json_integer((json_int_t)l->max_rows));
    json_object_set_new(limits, "max_exclude", json_integer((json_int_t)l->max_exclude));
    json_object_set_new(limits, "max_response_bytes", json_integer((json_int_t)l->max_response_bytes));
    json_t *root = json_object();
    json_object_set_new(root, "service", json_string("embedscope"));
    json_object_set_new(root, "version", json_string(ES_VERSION));
    json_object_set_new(root, "commit", json_string(es_build_commit));
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
    es_cache_job *jobs;
    size_t n = es_cache_jobs(cx->app->cache, &jobs);
    json_t *root = es_render_jobs(jobs, n);
    es_cache_jobs_free(jobs, n);
    es_jctx jc = {0};
    if (es_reply_json(cx, root, &jc, err) < 0)
        return -1;
    cx->reply.cache_control = "no-store";
    return 0;
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
    {"/", no_params, es_web_index, NULL},
    {"/assets/{file}", no_params, es_web_file, NULL},
    {"/healthz", no_params, service_healthz, NULL},
    {"/readyz", no_params, service_readyz, NULL},
    {"/openapi.yaml", no_params, service_openapi, NULL},
    {"/metrics", no_params, service_metrics, NULL},
    {"/problems/{slug}", no_params, service_problem, NULL},
    {"/v1", no_params, service_v1, NULL},
    {"/v1/jobs", no_params, service_jobs, NULL},
    {"/v1/models", no_params, es_api_models, NULL},
    {ES_MATRIX_ROUTE, no_params, es_api_matrix, NULL},
};
#define N_SERVICE (sizeof service_routes / sizeof *service_routes)

/* The handler of every table entry: its own, or the generic runner. */
static int analysis_handler(es_ctx *cx, es_err *err)
{
    const es_analysis *a = cx->analysis;
    return a->handler ? a->handler(cx, err) : es_run_route(cx, a, err);
}

/* The service routes followed by one route per table entry, built once. */
static es_route routes[N_SERVICE + 64];
static size_t n_routes;
static pthread_once_t routes_once = PTHREAD_ONCE_INIT;

static void build_routes(void)
{
    for (size_t i = 0; i < N_SERVICE; i++)
        routes[n_routes++] = service_routes[i];
    for (size_t i = 0; es_analyses[i] && n_routes < sizeof routes / sizeof *routes; i++)
        routes[n_routes++] = (es_route){es_analyses[i]->route, NULL, analysis_handler, es_analyses[i]};
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

/* The matching route, or NULL. */
const es_route *es_route_find(const char *path, es_ctx *cx)
{
    pthread_once(&routes_once, build_routes);
    for (size_t i = 0; i < n_routes; i++)
        if (match(routes[i].pattern, path, cx)) {
            cx->analysis = routes[i].analysis;
            return &routes[i];
        }
    return NULL;
}

/* The parameters a table entry accepts: its own (es_spec_allowed) and, for
 * compare, those of every comparable analysis, without repeats. */
static size_t analysis_params(const es_analysis *a, const char **names, size_t cap)
{
    size_t n = es_spec_allowed(a, names, cap);
    n = es_render_params(a, names, n, cap);
    for (size_t i = 0; a->gathers_comparable && es_analyses[i]; i++) {
        if (!es_analyses[i]->comparable)
            continue;
        for (const es_pspec *p = es_analyses[i]->spec; p->name && n < cap - 1; p++) {
            bool seen = false;
            for (size_t j = 0; j < n; j++)
                seen = seen || strcmp(names[j], p->name) == 0;
            if (!seen)
                names[n++] = p->name;
        }
    }
    names[n] = NULL;
    return n;
}

/* Strict parameter check, the handler, then the fresh reply finished and, if
 * claimed, published to (or released from) the response cache. */
int es_route_dispatch(const es_route *route, es_ctx *cx, es_err *err)
{
    const char *names[ES_PARAMS_MAX * 2];
    const char *const *allowed = route->params;
    if (route->analysis) {
        analysis_params(route->analysis, names, sizeof names / sizeof *names);
        allowed = names;
    }
    if (es_query_check(cx->query, allowed, err) < 0 ||
        (route->analysis && es_negotiate(cx, route->analysis, err) < 0))
        return -1;
    int rc = route->handler(cx, err);
    bool fresh = rc == 0 && !cx->deferred && cx->reply.status == 200;
    if (fresh && cx->reply.etag_from_body && !cx->reply.etag[0])
        es_etag_of(cx->reply.body, cx->reply.len, cx->reply.etag);
    if (cx->claim && !cx->deferred) { /* a deferred claim goes with its job to the compute pool */
        if (fresh)
            es_reply_gzip(&cx->reply); /* compressed once, here, rather than per request */
        es_results_settle(cx->app->results, cx->claim, fresh ? &cx->reply : NULL);
        cx->claim = NULL;
    }
    return rc;
}
