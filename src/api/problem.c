/* RFC 9457 problem documents: the one place where error classes become HTTP
 * statuses, type URIs and titles. Type URIs are relative ("/problems/<slug>")
 * and resolve against the daemon itself, which serves a plain-text description
 * of each at that path. */
#include "embedscope/problem.h"
#include "embedscope/render.h"
#include "embedscope/results.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    unsigned status;
    const char *slug, *title, *doc;
} kinds[ES_PROB_COUNT] = {
    [ES_PROB_INVALID_PARAMETER] = {400, "invalid-parameter", "Invalid parameter",
        "A query parameter is unknown, repeated, missing, malformed or out of range. "
        "The member \"param\" names it; \"detail\" says what was expected."},
    [ES_PROB_LIMIT_EXCEEDED] = {400, "limit-exceeded", "Limit exceeded",
        "The request would exceed a limit set in the server configuration (max_k, max_bins, "
        "max_rows, max_exclude, max_response_bytes). The member \"limit\" names it; ask for "
        "fewer rows or components, or use bins."},
    [ES_PROB_NOT_FOUND] = {404, "not-found", "Not found",
        "The path, model or matrix does not exist. GET /v1/models lists what is loaded."},
    [ES_PROB_INCOMPATIBLE] = {422, "incompatible-matrices", "Incompatible matrices",
        "The two matrices do not live in the same model space: their model axes have different lengths."},
    [ES_PROB_METHOD_NOT_ALLOWED] = {405, "method-not-allowed", "Method not allowed",
        "Use GET, HEAD or OPTIONS; PUT and DELETE only on /v1/models/{model}/matrices/{matrix} (see the Allow "
        "header)."},
    [ES_PROB_NOT_ACCEPTABLE] = {406, "not-acceptable", "Not acceptable",
        "The representation asked for (parameter format, or the Accept header when format is absent) is not "
        "one this endpoint produces; \"detail\" lists the ones it does (application/json, text/csv, "
        "application/x-npy for tabular results)."},
    [ES_PROB_BODY_NOT_ACCEPTED] = {413, "body-not-accepted", "Request body not accepted",
        "No endpoint takes a request body; send parameters in the query string."},
    [ES_PROB_NOT_READY] = {503, "not-ready", "Not ready",
        "The configured decompositions are still being computed at start-up."},
    [ES_PROB_BUSY] = {503, "server-busy", "Server busy",
        "Every compute thread is busy and the queue of waiting computations is full, or the server is "
        "shutting down. Retry after the number of seconds in the Retry-After header."},
    [ES_PROB_OUT_OF_MEMORY] = {503, "out-of-memory", "Out of memory",
        "The server could not allocate memory for this request; retry later or ask for less."},
    [ES_PROB_NUMERIC] = {500, "numeric-failure", "Numeric failure",
        "A decomposition failed or a result held a non-finite number. This is a bug or broken input data."},
    [ES_PROB_INTERNAL] = {500, "internal-error", "Internal error", "An unexpected server-side failure."},
    [ES_PROB_UNAUTHORIZED] = {401, "unauthorized", "Unauthorized",
        "Writes (PUT, DELETE) need the bearer token configured in uploads.token or $EMBEDSCOPE_UPLOAD_TOKEN: "
        "send \"Authorization: Bearer TOKEN\". Reads need none."},
    [ES_PROB_FORBIDDEN] = {403, "uploads-disabled", "Uploads disabled",
        "Writes are disabled: uploads.enabled is false, or absent while the daemon listens on a non-loopback "
        "address; or absent, with no token configured, and the request came through a proxy (it carries "
        "X-Forwarded-For, Forwarded or X-Real-IP): configure uploads.token. Reads stay open."},
    [ES_PROB_CONFLICT] = {409, "read-only-model", "Read-only model",
        "The model is defined by the configuration and cannot be changed at run time; upload into a model of "
        "another name (a user model)."},
    [ES_PROB_TOO_LARGE] = {413, "body-too-large", "Request body too large",
        "The request body is larger than the configured limit (the member \"limit\" names it, "
        "uploads.max_body_bytes)."},
    [ES_PROB_MEDIA_TYPE] = {415, "unsupported-media-type", "Unsupported media type",
        "An upload is application/x-npy or application/octet-stream (a .npy or .safetensors file) or "
        "application/json (a matrix entry in the configuration's grammar)."},
    [ES_PROB_STORAGE] = {507, "insufficient-storage", "Insufficient storage",
        "The member \"limit\" says what is full: uploads.max_total_bytes (the user matrices would hold more; "
        "delete some first with DELETE /v1/models/{model}/matrices/{matrix}), uploads.max_pending_bytes (upload "
        "bodies being received; retry later) or uploads.dir (the disk; nothing was changed)."},
    [ES_PROB_TIMEOUT] = {504, "timeout", "Computation timed out",
        "The computation did not finish within limits.request_timeout_s seconds of the request's arrival "
        "(or the N seconds of its Prefer: wait=N when longer, at most limits.max_wait_s), or the server shut "
        "down first; it was abandoned. Ask for less, or retry later when the server is "
        "less busy."},
    [ES_PROB_BAD_REQUEST] = {400, "bad-request", "Bad request",
        "The request's framing is ambiguous or malformed (RFC 9112): conflicting Content-Length headers, "
        "Content-Length together with Transfer-Encoding, a NUL byte (%00) in the path or a parameter, or a "
        "request head the server could not parse. The connection is closed."},
    [ES_PROB_URI_TOO_LONG] = {414, "uri-too-long", "URI too long",
        "The request target is longer than the server accepts (see docs/operations.md, \"Connections, slow clients and heavy requests\": 32 KiB); use fewer or "
        "shorter parameters."},
    [ES_PROB_HEADERS_TOO_LARGE] = {431, "headers-too-large", "Request header fields too large",
        "The request's header fields are larger than the server accepts (see docs/operations.md, \"Connections, slow clients and heavy requests\": 32 KiB)."},
    [ES_PROB_BODY_TIMEOUT] = {408, "body-timeout", "Request body too slow",
        "The request body arrived too slowly: after server.body_grace_s seconds it must have averaged at least "
        "server.body_min_rate bytes per second since the request head. The connection is closed."},
    [ES_PROB_NOT_IMPLEMENTED] = {501, "not-implemented", "Transfer coding not implemented",
        "The request body is sent with a transfer coding the server does not decode (for example "
        "Transfer-Encoding: gzip, chunked); send it with Transfer-Encoding: chunked alone or with a "
        "Content-Length. The connection is closed."},
    [ES_PROB_VERSION] = {505, "http-version-not-supported", "HTTP version not supported",
        "The request line names an HTTP version the server does not speak; it serves HTTP/1.1 and HTTP/1.0. "
        "The connection is closed."},
    [ES_PROB_TOO_MANY_JOBS] = {429, "too-many-jobs", "Too many jobs",
        "This client (its address, or a trusted proxy's X-Forwarded-For) holds limits.max_jobs_per_client "
        "unexpired jobs (the member \"limit\" names it). A finished job is forgotten limits.job_ttl_s seconds "
        "after it finished; Retry-After says when the first of this client's will be (the limit when none has "
        "finished yet). Cancel one (DELETE /v1/jobs/{id}) to make room at once."},
    [ES_PROB_CROSS_ORIGIN] = {403, "cross-origin-write", "Cross-origin write refused",
        "A write (PUT, POST, DELETE) carried the Origin of a web page that is neither the daemon's own origin "
        "nor listed by name in server.cors_origins (\"*\" lets every page read, none write), and no valid "
        "bearer token: any page a browser shows could otherwise change or cancel a local daemon's data. List "
        "the page's origin in server.cors_origins, or send \"Authorization: Bearer TOKEN\"."},
};

/* Map an error class to its problem kind. Never fails. */
es_problem_kind es_problem_kind_of(es_errcode code)
{
    switch (code) {
    case ES_E_PARAM: return ES_PROB_INVALID_PARAMETER;
    case ES_E_LIMIT: return ES_PROB_LIMIT_EXCEEDED;
    case ES_E_NOTFOUND: return ES_PROB_NOT_FOUND;
    case ES_E_UNACCEPTABLE: return ES_PROB_NOT_ACCEPTABLE;
    case ES_E_INCOMPATIBLE: return ES_PROB_INCOMPATIBLE;
    case ES_E_NOMEM: return ES_PROB_OUT_OF_MEMORY;
    case ES_E_NUMERIC: return ES_PROB_NUMERIC;
    case ES_E_UNAUTHORIZED: return ES_PROB_UNAUTHORIZED;
    case ES_E_FORBIDDEN: return ES_PROB_FORBIDDEN;
    case ES_E_CONFLICT: return ES_PROB_CONFLICT;
    case ES_E_TOO_LARGE: return ES_PROB_TOO_LARGE;
    case ES_E_MEDIA_TYPE: return ES_PROB_MEDIA_TYPE;
    case ES_E_STORAGE: return ES_PROB_STORAGE;
    case ES_E_CANCELLED: return ES_PROB_TIMEOUT;
    case ES_E_SHUTDOWN: return ES_PROB_BUSY;
    case ES_E_CROSS_ORIGIN: return ES_PROB_CROSS_ORIGIN;
    default: return ES_PROB_INTERNAL;
    }
}

/* Table look-ups; kind must be a valid kind (< ES_PROB_COUNT). Never fail. */
unsigned es_problem_status(es_problem_kind kind) { return kinds[kind].status; }
const char *es_problem_slug(es_problem_kind kind) { return kinds[kind].slug; }
const char *es_problem_title(es_problem_kind kind) { return kinds[kind].title; }

/* Description of a problem type by slug, NULL if unknown. */
const char *es_problem_doc(const char *slug)
{
    for (int k = 0; k < ES_PROB_COUNT; k++)
        if (strcmp(kinds[k].slug, slug) == 0)
            return kinds[k].doc;
    return NULL;
}

/* Build a problem document; see problem.h. Never fails. */
json_t *es_problem_new(es_problem_kind kind, const char *detail, const char *param,
                       const char *instance, const char *request_id)
{
    char type[64];
    snprintf(type, sizeof type, "/problems/%s", kinds[kind].slug);
    json_t *p = json_object();
    json_object_set_new(p, "type", json_string(type));
    json_object_set_new(p, "title", json_string(kinds[kind].title));
    json_object_set_new(p, "status", json_integer(kinds[kind].status));
    json_object_set_new(p, "detail", es_jstr(detail ? detail : kinds[kind].title));
    json_object_set_new(p, "instance", es_jstr(instance ? instance : ""));
    /* An invalid-parameter problem always names its parameter, even one whose
     * name is empty ("?=3"); other kinds name one only when there is one. */
    bool names_limit = kind == ES_PROB_LIMIT_EXCEEDED || kind == ES_PROB_TOO_LARGE || kind == ES_PROB_STORAGE ||
                       kind == ES_PROB_TOO_MANY_JOBS;
    if (param && (*param || kind == ES_PROB_INVALID_PARAMETER))
        json_object_set_new(p, names_limit ? "limit" : "param", es_jstr(param));
    if (request_id && *request_id)
        json_object_set_new(p, "request_id", es_jstr(request_id));
    return p;
}

/* Prefix one string member of p that holds an absolute path. */
static void rebase_member(json_t *p, const char *key, const char *prefix)
{
    const char *path = json_string_value(json_object_get(p, key));
    if (!path || path[0] != '/')
        return;
    size_t n = strlen(prefix) + strlen(path) + 1;
    char *full = es_malloc(n);
    snprintf(full, n, "%s%s", prefix, path);
    json_object_set_new(p, key, es_jstr(full));
    free(full);
}

/* See problem.h. Never fails (rep is left as it was). */
void es_problem_rebase(es_reply *rep, const char *prefix)
{
    if (!*prefix || !rep->body)
        return;
    json_t *p = json_loadb(rep->body, rep->len, 0, NULL);
    char *body;
    size_t len;
    es_err ignored;
    if (json_is_object(p)) {
        rebase_member(p, "type", prefix);
        rebase_member(p, "instance", prefix);
        if (es_json_body(p, 0, &body, &len, &ignored) == 0) {
            if (!rep->body_static)
                free(rep->body);
            rep->body = body;
            rep->len = len;
            rep->body_static = false;
        }
    }
    json_decref(p);
}
