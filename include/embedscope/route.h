/* The contract of the service (src/api), its requests and routes: the request
 * as handlers see it (es_ctx), the route table, the gate between parsing and
 * computing (es_precheck), the service routes' handlers and --dump-api.
 *   routes.c     the service endpoints and routing (the analyses' routes come from the table)
 *   api.c        the gate, the generic runner of a descriptor and the listings
 *   describe.c   --dump-api: the route and analysis tables as one JSON document
 *   results.c    the pre-rendered replies (es_prerendered_*)
 *   assets.c     the dashboard's pages and assets
 * The analysis descriptors are in descriptor.h; the map of every header of
 * src/api is in docs/development.md ("The service's headers").
 *
 * Threading: the HTTP threads (src/http) parse and validate every request and
 * answer everything cheap themselves: errors, service endpoints, listings, 304s
 * and replies found in the response cache. A request that needs a computation
 * stops at the gate (es_precheck) with cx->deferred set; the exchange
 * (exchange.h) suspends its connection and hands it to the compute pool, which
 * resumes the parsed request in the same es_ctx with may_defer = false, stores
 * the reply and resumes the connection; the HTTP thread then sends it. Compute threads x BLAS threads
 * never exceed the cores.
 * Owners: the files above. Ownership and failure rules: see core.h. */
#ifndef ES_ROUTE_H
#define ES_ROUTE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "embedscope/app.h"
#include "embedscope/catalogue.h"
#include "embedscope/core.h"
#include "embedscope/cost.h"
#include "embedscope/format.h"
#include "embedscope/params.h"
#include "embedscope/render.h"
#include "embedscope/results.h"
#include "embedscope/version.h"


/* The request as handlers see it. */
struct es_ctx;
/* A request parsed by an HTTP thread that goes with its deferral to the
 * compute thread (es_ctx.parsed), which resumes it there instead of parsing
 * it again: resume is the gate and the answer on the compute side (the query,
 * catalogue, negotiated representation and predicted cost travel in the
 * deferred request's es_ctx); release it with es_parsed_free. */
typedef struct es_parsed {
    int (*resume)(struct es_ctx *cx, struct es_parsed *p, es_err *err);
    void (*free)(struct es_parsed *p);
} es_parsed;
/* p->free(p); NULL: nothing. */
void es_parsed_free(es_parsed *p);

typedef struct es_ctx {
    es_app *app;
    const es_query *query;
    const char *path;
    es_catalogue *reg;             /* the catalogue this request reads, held for its duration */
    char model[128], matrix[128]; /* path captures ({model}, {matrix}) */
    char slug[64];                /* {slug} of /problems/{slug} */
    const char *if_none_match;
    const char *accept;           /* the Accept header, or NULL */
    bool accepts_gzip;            /* Accept-Encoding allows gzip: a fresh reply is compressed where it is
                                   * rendered (es_route_dispatch), not for clients that never ask */
    es_render_opts render;        /* negotiated by es_negotiate (analysis routes) */
    const char *request_id;       /* echoed in problem documents; may be NULL */
    bool may_defer;               /* in an HTTP thread: computations go to the pool */
    bool deferred;                /* set by the gate: run again with may_defer = false */
    es_result *claim;             /* response-cache key this request computes (single flight); set
                                   * by the gate of an HTTP thread, it goes with the deferred request */
    es_result *pending;           /* with deferred: another request computes this reply; wait for
                                   * it (held, see es_results_join) instead of queueing a task */
    const struct es_analysis *analysis; /* the table entry of the route, or NULL */
    es_cost cost;                 /* prediction added by the handler before the gate (cost.c) */
    bool prefer_async;            /* Prefer: respond-async */
    double prefer_wait;           /* Prefer: wait=N (seconds), or < 0 when not given */
    bool async;                   /* set by the gate with deferred: answer 202 with a job */
    char key[65];                 /* set by the gate: the response cache's key of the reply */
    char kept_key[65];            /* set by the gate of an analysis it did not settle: the key of its
                                   * result kept for every representation (es_results_keep), or "" */
    es_reply reply;
    es_parsed *parsed;            /* with deferred: the parsed request, owned (NULL: parsed again where
                                   * computed); es_route_dispatch resumes it instead of the handler */
    const char *owner;            /* whose jobs it sees (es_job_owner), NULL: none (borrowed) */
    unsigned route_lookups, gates; /* es_route_find calls, and keys and sha256s the gate built
                                   * (es_precheck*), with this cx: one each per request, also when it is
                                   * computed on the pool (exchange.c: the same cx, key and claim there) */
    unsigned keys;                /* key texts handlers handed to es_gate_answer: one per request too */
    const struct es_memo_target *memo; /* set by es_route_dispatch on an HTTP thread while the handler
                                  * runs: the gate memoises what it keyed the request to (memo.h) */
    bool memo_hit;                /* answered from the target memo: not parsed, keyed nor hashed */
} es_ctx;
/* Answer a GET from the target memo (memo.h) when this HTTP thread keyed the
 * same target t under cx's catalogue before and its reply is at hand (304 for
 * a matching If-None-Match, else the kept or cached reply): true with
 * cx->reply set, without parsing, canonicalising or hashing; else false with
 * nothing changed. */
struct es_memo_target;
bool es_gate_memo(es_ctx *cx, const struct es_memo_target *t);
/* After a handler's gate: if it deferred the request (and no parsed value is
 * there yet), cx takes p, which then goes with the deferred request (true); else the
 * handler keeps p and frees it. */
bool es_parsed_hand_over(es_ctx *cx, es_parsed *p);

typedef int (*es_handler)(es_ctx *cx, es_err *err);

/* The paths that also take PUT and DELETE (uploads.c): a matrix and its labels. */
#define ES_MATRIX_ROUTE "/v1/models/{model}/matrices/{matrix}"
#define ES_LABELS_ROUTE "/v1/models/{model}/matrices/{matrix}/labels"

typedef struct es_route {
    const char *pattern;          /* segments; {model} {matrix} {slug} capture one segment */
    const char *const *params;    /* allowed query parameters, NULL-terminated (analyses: NULL, from the table) */
    es_handler handler;
    const struct es_analysis *analysis; /* the table entry it serves, or NULL */
    bool prerendered;             /* its 200 depends on the catalogue alone: rendered once per catalogue */
    const char *statuses;         /* a service route's statuses by method, "GET 200 304 400; DELETE 204"
                                   * (--dump-api; openapi.base.yaml must document the same); an analysis
                                   * route's come from describe.c */
} es_route;
/* Does route take PUT and DELETE (ES_MATRIX_ROUTE, ES_LABELS_ROUTE)? */
bool es_route_writable(const es_route *route);

/* The 200 replies of the prerendered routes (/v1, /v1/models,
 * /openapi.yaml; results.c), rendered, given an ETag and gzipped once per catalogue and
 * handed out as shared bytes (es_shared_give): answered without jansson,
 * hashing or compression. Each reply is kept with (a reference to) the
 * catalogue it was rendered from, so a request on another catalogue never
 * sees it; es_prerendered_clear (at every publish) drops them all. None
 * fails. */
es_prerendered *es_prerendered_new(void);
void es_prerendered_clear(es_prerendered *p);
void es_prerendered_free(es_prerendered *p);
/* The pre-rendered reply of route for cx's catalogue into cx->reply: true if
 * there is one, rendered since the last file sha256 was settled
 * (es_digests_generation: a listing shows them). */
bool es_prerendered_get(es_prerendered *p, const es_route *route, es_ctx *cx);
/* Keep cx's finished 200 reply of route (gzipped, made shared here) for the
 * requests on the same catalogue; hashes: es_digests_generation() read before
 * it was rendered. */
void es_prerendered_put(es_prerendered *p, const es_route *route, es_ctx *cx, unsigned long hashes);


/* Every route, service routes first, then one per table entry, in match
 * order, into *out; returns the count. Never fails. */
size_t es_routes(const es_route **out);
/* The query parameters route accepts (an analysis': its selections, spec and
 * rendering parameters), NULL-terminated, into names[cap]; returns the count.
 * Aborts when cap is too small (a programming error, never a silent cut). */
size_t es_route_params(const es_route *route, const char **names, size_t cap);
/* The API as one JSON document built from the route and analysis tables:
 * routes with their methods, parameters and statuses, each analysis with its
 * typed parameters (defaults, ranges, limits, choices) and tables, and the
 * problem types (embedscope --dump-api; openapi.yaml is generated from it by
 * tools/gen_openapi.py). Never fails. */
json_t *es_api_describe(void);
/* Is value the default --dump-api documents for analysis a's parameter name
 * (its "default": the same string, or the same number)? A parameter that does
 * not apply to a request is still accepted with this value, and ignored, so
 * that a client sending every documented default (Swagger UI's "Try it out")
 * gets the answer of leaving them out. False when none is documented. */
bool es_describe_is_default(const struct es_analysis *a, const char *name, const char *value);
/* compare's view of es_describe_is_default: compare's handler sits below describe.c in
 * src/api's one-way order of calls, so describe.c hands the check down when the program
 * starts (a constructor) rather than the handler calling up; NULL before that. */
extern bool (*es_compare_is_default)(const struct es_analysis *a, const char *name, const char *value);
/* The route whose pattern matches path, with captures copied into cx; NULL if none. */
const es_route *es_route_find(const char *path, es_ctx *cx);
/* Run the route's handler after the strict parameter check, then finish a
 * fresh 200 reply: its ETag from the body when asked, its gzip, and its entry
 * in the response cache when it claimed one (a failure releases the claim).
 * -1 with err filled on any failure (the server renders it as a problem). */
int es_route_dispatch(const es_route *route, es_ctx *cx, es_err *err);

/* ---- shared by the handlers of api.c, positional.c and compare.c */

/* The matrix named by the path captures {model}/{matrix}. ES_E_NOTFOUND naming "model" / "matrix". */
int es_path_matrix(es_ctx *cx, const es_matrix **out, es_err *err);
/* The gate between parsing and computing, called by every handler of an
 * immutable result once its parameters are valid. Sets the ETag from the
 * canonical description of the request (path + fmt) and the caching policy:
 * immutable (public, max-age=86400), or no-cache when the request reads a user
 * model (its data can be replaced under the same URL). True when the handler must stop without computing: the reply is
 * settled (304 when the client has the ETag, or a copy from the response
 * cache) or, with cx->may_defer, deferred (cx->deferred): with the claim of its reply
 * (cx->claim) to the compute pool, or (cx->pending) to wait for the request
 * that computes the same reply. False: compute now; the response cache then
 * holds the request's claim (cx->claim, settled by es_route_dispatch), so
 * concurrent requests for the same result wait for this one. */
bool es_precheck(es_ctx *cx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The gate of a listing revalidated by its body (no-cache, ETag from the body):
 * keyed by the path and `identity`, the text that identifies what is listed
 * (the catalogue changes while running: uploads, reloads). */
bool es_precheck_listing(es_ctx *cx, const char *identity);

/* Route handlers: fill cx->reply, or return -1 with err filled (a parameter,
 * lookup, limit or numeric failure; the server renders it as a problem). */
int es_api_models(es_ctx *cx, es_err *err);
int es_api_model(es_ctx *cx, es_err *err);
int es_api_matrix(es_ctx *cx, es_err *err);
/* positional.c and compare.c: the irregular analyses (descriptors with .handler) */
int es_api_alignment_layers(es_ctx *cx, es_err *err);
int es_api_attention(es_ctx *cx, es_err *err);
int es_api_attention_ranking(es_ctx *cx, es_err *err);
int es_api_attention_pattern(es_ctx *cx, es_err *err);
int es_api_rope_relative(es_ctx *cx, es_err *err);
int es_api_compare(es_ctx *cx, es_err *err);
/* assets.c: the dashboard page (/), the API reference (/docs) and their assets
 * (/assets/{file}, ES_E_NOTFOUND "file"). */
int es_web_index(es_ctx *cx, es_err *err);
int es_web_docs(es_ctx *cx, es_err *err);
int es_web_file(es_ctx *cx, es_err *err);

/* The body of GET /v1/models/{model}/matrices/{matrix} for matrix j of model:
 * its description and row-norm summary (O(items x d)). Never fails. */
json_t *es_describe_matrix(es_jctx *jc, const es_model *model, size_t j);

/* Set a JSON reply (status 200) from root, which is consumed. Fails like
 * es_jctx_check and es_json_body. */
int es_reply_json(es_ctx *cx, json_t *root, const es_jctx *jc, es_err *err);

#endif
