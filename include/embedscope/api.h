/* The analysis service (src/api): everything between the transport (src/http:
 * libmicrohttpd, connections, framing) and the library below (configuration,
 * analyses, decompositions). None of it knows about sockets, so all of it can
 * be unit-tested without one (tests/api).
 *   params.c     query parameters: strict parsing, defaults, limits, selections
 *   problem.c    RFC 9457 problem documents built from es_err
 *   render.c     JSON rendering (jansson) of the core's result structs
 *   negotiate.c  header logic: ETag matching, gzip, CORS, request ids, forwarded clients
 *   metrics.c    Prometheus counters and their text exposition
 *   spec.c       typed parameter specs: allowed names, parsing, canonical key, "input" echo
 *   analyses.c   the analysis table: one descriptor (route, spec, fill) per analysis endpoint
 *   cost.c       the predicted time and memory of a computing request
 *   api.c        the gate, the generic runner of a descriptor (parse -> key -> gate ->
 *                es_cache_svd -> fill -> reply) and the listings
 *   api_positional.c  the hand-written handlers of the irregular descriptors
 *   format.c     the representations of a result: JSON, column JSON, CSV, NPY
 *   routes.c     the service endpoints and routing (the analyses' routes come from the table)
 *   results.c    the response cache: rendered replies by canonical request, single flight
 *   jobs.c       the long requests answered 202 and polled at /v1/jobs/{id}
 *   pool.c       the compute pool: fixed threads running the heavy work
 *   app.c        application state: registry, caches, compute pool, warming, readiness, reload
 *   uploads.c, persist.c, labels.c  user matrices: writes, their persistence, their labels
 *   assets.c     the dashboard's pages and assets; version.c the build's commit
 *
 * Threading: the HTTP threads (src/http) parse and validate every request and
 * answer everything cheap themselves: errors, service endpoints, listings, 304s
 * and replies found in the response cache. A request that needs a computation
 * stops at the gate (es_precheck) with cx->deferred set; the transport
 * suspends its connection and hands a job to the compute pool, which runs the
 * handler again with may_defer = false, stores the reply and resumes the
 * connection; the HTTP thread then sends it. Compute threads x BLAS threads
 * never exceed the cores.
 * Ownership and failure rules: see include/embedscope/core.h. */
#ifndef ES_API_H
#define ES_API_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "embedscope/analysis.h"
#include "embedscope/blas.h"
#include "embedscope/config.h"
#include "embedscope/core.h"
#include "embedscope/linalg.h"
#include "embedscope/positional.h"
#include "embedscope/rowsel.h"
#include "embedscope/store.h"

#define ES_VERSION "0.1.0"
/* The git commit of this build ("<12 hex>[-dirty]"), or "unknown" (version.c). */
extern const char es_build_commit[];

/* A prediction of a computing request (cost.c): compute seconds on this machine, peak bytes. */
typedef struct es_cost {
    double seconds, bytes;
    double pass_seconds[ES_PASS_COUNT]; /* the part of seconds each progress pass takes (the rest:
                                           products and rendering, which report nothing) */
} es_cost;
/* a += b, every term. Never fails. */
void es_cost_add(es_cost *a, const es_cost *b);

/* ================================================================ params.c */

/* Decoded query parameters in arrival order (duplicates kept, so they can be refused). */
typedef struct es_query_item {
    char *key, *value;
} es_query_item;

typedef struct es_query {
    es_query_item *items;
    size_t n, cap;
} es_query;

/* An empty query. Never fails. */
void es_query_init(es_query *q);
/* Append a copy of key=value; a NULL value (a bare "?key") is stored as "". */
void es_query_add(es_query *q, const char *key, const char *value);
/* Free the items and leave q empty (reusable). Never fails. */
void es_query_free(es_query *q);
/* The value of key, or NULL when absent. */
const char *es_query_get(const es_query *q, const char *key);
/* Refuse unknown and duplicated parameters: ES_E_PARAM naming the first one,
 * the message listing the allowed names. allowed is NULL-terminated. */
int es_query_check(const es_query *q, const char *const *allowed, es_err *err);
/* Canonical "k=v&k=v" text (sorted by key) for logs. Caller frees. */
char *es_query_text(const es_query *q);

/* A non-negative decimal integer parameter (digits only). Absent: def.
 * ES_E_PARAM naming `name` if malformed or < min; if > max, ES_E_LIMIT naming
 * `limit` when limit != NULL, else ES_E_PARAM naming `name`. */
int es_param_size(const es_query *q, const char *name, size_t def, size_t min, size_t max,
                  const char *limit, size_t *out, es_err *err);
/* A finite real parameter in [min, max], written as a plain decimal number
 * ([+-]digits[.digits][e[+-]digits]: no hex floats, inf, nan or blanks).
 * Absent: def. ES_E_PARAM naming `name`. */
int es_param_double(const es_query *q, const char *name, double def, double min, double max,
                    double *out, es_err *err);
/* One of the NULL-terminated `choices`; *out is its index. Absent: def.
 * ES_E_PARAM naming `name` with the allowed values in the message. */
int es_param_choice(const es_query *q, const char *name, const char *const *choices, size_t def,
                    size_t *out, es_err *err);
/* Heatmap bins when a request gives none (lowered to the configured max_bins). */
#define ES_DEFAULT_BINS 64
/* A "model/matrix" parameter (required). ES_E_PARAM if absent or malformed,
 * ES_E_NOTFOUND naming `name` if unknown. */
int es_param_matrix(const es_query *q, const char *name, const es_registry *reg,
                    const es_matrix **out, es_err *err);

/* A contiguous range "start:stop" (Python slice bounds, negative from the end,
 * missing bounds = 0 / n, no step or step 1) over n positions into [*start, *stop).
 * Absent: [0, n). ES_E_PARAM naming `name` if malformed, stepped or empty. */
int es_param_range(const es_query *q, const char *name, size_t n, size_t *start, size_t *stop, es_err *err);
/* Exactly n comma-separated finite decimal numbers into a new array (caller
 * frees); *out is NULL when the parameter is absent. ES_E_PARAM naming `name`
 * on a malformed number or another count. */
int es_param_doubles(const es_query *q, const char *name, size_t n, double **out, es_err *err);
/* Split text at sep into a NULL-terminated array of copies ("" gives one empty
 * item). Caller frees with es_strv_free. Never fails. */
char **es_split_on(const char *text, char sep, size_t *n);
/* es_split_on at ','. */
char **es_split_commas(const char *text, size_t *n);

/* A resolved row selection of one matrix: the parameters <prefix>rows,
 * <prefix>exclude and <prefix>center. */
typedef struct es_selection {
    size_t *idx;          /* n selected item indices, in slice order */
    size_t n;
    char *canonical;      /* es_rows_canonical(idx, n) */
    es_centering center;
} es_selection;

/* Parse and resolve a selection against m's items (model orientation). Errors
 * name the prefixed parameter: ES_E_PARAM for malformed text, an empty
 * selection or an excluded index out of range; ES_E_LIMIT "max_exclude" and
 * "max_rows" for too many excluded / selected rows. with_center = false means
 * the endpoint takes no centring parameter and the selection is uncentred. */
int es_param_selection(const es_query *q, const char *prefix, bool with_center, es_centering def,
                       const es_matrix *m, const es_limits *lim, es_selection *out, es_err *err);
/* Free the index list and canonical text; NULL is ignored. */
void es_selection_free(es_selection *s);

/* ================================================================ pool.c */

typedef enum es_priority {
    ES_PRIO_REQUEST,    /* a client waits: bounded queue, runs first */
    ES_PRIO_BACKGROUND  /* start-up warming: unbounded, runs when no request job waits */
} es_priority;

/* A task; cancelled is true when the pool stops before it could start (it
 * must then only release what it holds). */
typedef void (*es_task_fn)(void *arg, bool cancelled);
/* Is a running task's work wanted no more (its client left, its deadline
 * passed, it was cancelled)? Asked, with the task's arg, at every safe point
 * of its computation (es_checkpoint, es_progress_check), from its compute
 * thread and the computation's helper threads. */
typedef bool (*es_task_dropped_fn)(void *arg);
typedef struct es_pool es_pool;

typedef struct es_pool_stats {
    size_t threads, queue_max, queued, background, running;
    size_t reserved;                   /* threads kept for light jobs */
    size_t light_running, heavy_running;
    unsigned long completed, rejected, light_completed;
} es_pool_stats;

/* What the pool knows of a request job's cost: its predicted seconds (fair
 * queueing's weight; 0 when unknown) and whether it is light (predicted
 * within limits.light_seconds: it may run on a reserved thread). */
typedef struct es_task_cost {
    double seconds;
    bool light;
} es_task_cost;

/* Client identities (an address, or a forwarded one) are ES_CLIENT_MAX long (negotiate.c). */
/* queue_max / this slots of the request queue (at least 1) are kept from any
 * one client: it may hold the rest (at least 1). */
#define ES_POOL_SHARE_DIVISOR 4
enum { ES_POOL_FULL = -1, ES_POOL_CLIENT_SHARE = -2 };

/* Start `threads` compute threads, `reserved` of them (at most threads - 1)
 * kept for light request jobs: heavy tasks run on the others only; at most
 * queue_max request jobs wait. NULL with ES_E_IO if no thread can be started. */
es_pool *es_pool_new(size_t threads, size_t reserved, size_t queue_max, es_err *err);
/* Queue fn(arg) for client (request jobs: fairness; NULL or "" for background
 * tasks), of predicted cost (NULL: unknown, heavy; background tasks are
 * always heavy), cancelled at its safe points once dropped(arg) says so
 * (NULL: never): 0; ES_POOL_FULL (nothing queued) when the pool is stopping
 * or the request queue is full; ES_POOL_CLIENT_SHARE when the client already
 * holds its share of the queue (both counted as rejected). */
int es_pool_submit(es_pool *p, es_priority prio, const char *client, const es_task_cost *cost, es_task_fn fn,
                   es_task_dropped_fn dropped, void *arg);
/* Shutdown with a deadline: refuse new tasks, cancel the queued ones, and wait
 * up to `seconds` for the running ones. True (threads joined) if they all
 * finished; false if some still run (the pool and what they use must then be
 * left alone: the process is about to exit). */
bool es_pool_stop_within(es_pool *p, double seconds);
/* Refuse new tasks, run the queued ones (cancelled if cancel_queued), wait for
 * every thread. Idempotent. */
void es_pool_stop(es_pool *p, bool cancel_queued);
/* Stop (cancelling what is queued) and free; NULL is ignored. */
void es_pool_free(es_pool *p);
/* A consistent snapshot of the pool's counters. Never fails. */
void es_pool_get_stats(es_pool *p, es_pool_stats *out);

/* The shutdown's grace period is over: every running task stops at its next
 * safe point (ES_E_SHUTDOWN). NULL is ignored. Never fails. */
void es_pool_abandon(es_pool *p);
/* Has es_pool_abandon been called (false for NULL)? Never fails. */
bool es_pool_abandoned(es_pool *p);
/* A safe point of the computation running on this compute thread:
 * ES_E_SHUTDOWN once the pool abandons its work, ES_E_CANCELLED when its task
 * was dropped; 0 otherwise and outside a pool task. Called between
 * decompositions and before rendering; the loops inside a computation ask the
 * same through their progress tracker (es_pool_track). */
int es_checkpoint(es_err *err);
/* Attach pr as the progress tracker of this thread's computation (NULL:
 * detach), checked like es_checkpoint for the task running here, also from the
 * computation's helper threads. Never fails. */
void es_pool_track(es_progress *pr);

/* ================================================================ app.c: derived matrices */

/* At most this many averaged copies (matrix, g, rows) are kept (least recently used
 * evicted; a copy in use stays alive through its reference). */
#define ES_DERIVED_MAX 8

typedef struct es_derived {
    char *key;            /* source id, sha256, view, g, rows averaged */
    es_matrix *m;
} es_derived;

/* ================================================================ problem.c */

typedef enum es_problem_kind {
    ES_PROB_INVALID_PARAMETER,
    ES_PROB_LIMIT_EXCEEDED,
    ES_PROB_NOT_FOUND,
    ES_PROB_INCOMPATIBLE,
    ES_PROB_METHOD_NOT_ALLOWED,
    ES_PROB_NOT_ACCEPTABLE,
    ES_PROB_BODY_NOT_ACCEPTED,
    ES_PROB_NOT_READY,
    ES_PROB_BUSY,
    ES_PROB_OUT_OF_MEMORY,
    ES_PROB_NUMERIC,
    ES_PROB_INTERNAL,
    ES_PROB_UNAUTHORIZED,
    ES_PROB_FORBIDDEN,
    ES_PROB_CONFLICT,
    ES_PROB_TOO_LARGE,
    ES_PROB_MEDIA_TYPE,
    ES_PROB_STORAGE,
    ES_PROB_TIMEOUT,
    ES_PROB_BAD_REQUEST,
    ES_PROB_URI_TOO_LONG,
    ES_PROB_HEADERS_TOO_LARGE,
    ES_PROB_BODY_TIMEOUT,
    ES_PROB_NOT_IMPLEMENTED,
    ES_PROB_VERSION,
    ES_PROB_TOO_MANY_JOBS,
    ES_PROB_CROSS_ORIGIN,
    ES_PROB_COUNT
} es_problem_kind;

/* The kind an es_err class maps to (PARAM 400, LIMIT 400, NOTFOUND 404,
 * INCOMPATIBLE 422, NOMEM 503, CANCELLED 504, SHUTDOWN 503, NUMERIC 500; for writes
 * UNAUTHORIZED 401, FORBIDDEN 403, CONFLICT 409, TOO_LARGE 413, MEDIA_TYPE 415,
 * STORAGE 507; UNACCEPTABLE 406; everything else 500). */
es_problem_kind es_problem_kind_of(es_errcode code);
/* The HTTP status and the /problems/<slug> of a kind. Never fail. */
unsigned es_problem_status(es_problem_kind kind);
const char *es_problem_title(es_problem_kind kind);
const char *es_problem_slug(es_problem_kind kind);
/* Plain-text description served at /problems/<slug>; NULL for an unknown slug. */
const char *es_problem_doc(const char *slug);
/* {type, title, status, detail, instance, param?, limit?, request_id?}. `param` names
 * a request parameter (NULL: omitted; "" omitted too, except for
 * ES_PROB_INVALID_PARAMETER, which always names its parameter, even an empty
 * name); for ES_PROB_LIMIT_EXCEEDED it is the limit's name and is reported as
 * "limit". Never fails. */
json_t *es_problem_new(es_problem_kind kind, const char *detail, const char *param,
                       const char *instance, const char *request_id);
/* es_problem_new for a filled es_err (its class, message and param). Never fails. */
json_t *es_problem_from_err(const es_err *err, const char *instance, const char *request_id);
struct es_reply;
/* Put prefix (a proxy's path prefix, see es_forwarded_prefix) in front of the
 * "type" and "instance" paths of the problem document in rep's body, which is
 * replaced. Leaves rep unchanged when prefix is "" or the body is not a JSON
 * object (or cannot be rebuilt). */
void es_problem_rebase(struct es_reply *rep, const char *prefix);

/* ================================================================ render.c */

/* Collects the first non-finite number met while rendering, so a result that
 * holds one fails as a whole (500) instead of being emitted with nulls. */
typedef struct es_jctx {
    const char *bad_field; /* NULL while every number was finite */
    bool stopped;          /* a safe point of the rendering said stop (why: the computation's es_checkpoint) */
    es_err why;
} es_jctx;

/* A JSON string of text that may come from the client: bytes that are not
 * valid UTF-8 are replaced by '?'. Never fails. */
json_t *es_jstr(const char *text);
/* Number builders: a non-finite value becomes null and is recorded in jc under
 * `field` (es_jctx_check turns it into the error); es_jnums and es_jgrid are
 * safe points of a computation (es_checkpoint every 4096 numbers and every
 * row): once it must stop they build nothing more and jc records why. Never fail. */
json_t *es_jnum(es_jctx *jc, const char *field, double v);
json_t *es_jnums(es_jctx *jc, const char *field, const double *v, size_t n);
json_t *es_jgrid(es_jctx *jc, const char *field, const double *v, size_t rows, size_t cols);
json_t *es_jsizes(const size_t *v, size_t n);
/* The stop met by a safe point (ES_E_CANCELLED, ES_E_SHUTDOWN), else
 * ES_E_NUMERIC "non-finite value in result field F" if one was met. */
int es_jctx_check(const es_jctx *jc, es_err *err);

/* Serialise (compact, JSON_REAL_PRECISION(17) so doubles round-trip) into a
 * malloc'ed body (release with free). ES_E_LIMIT "max_response_bytes" if the
 * text is longer than max_bytes (0 = unlimited); ES_E_NOMEM if it cannot be built. */
int es_json_body(const json_t *j, size_t max_bytes, char **out, size_t *len, es_err *err);

/* Summary of item norms (model orientation). */
typedef struct es_norms {
    double min, max, mean, median;
    size_t argmin, argmax;
} es_norms;

/* The es_render_* functions build or add members to root and never fail; a
 * non-finite number is recorded in jc (check it with es_jctx_check).
 * es_render_models: the /v1/models listing (each model's "source": "config"
 * or "user", each matrix's "created" and "bytes"); es_render_model: one model
 * of it; es_render_matrix: matrix j of model described with its row-norm summary. */
json_t *es_render_models(es_jctx *jc, const es_registry *reg);
json_t *es_render_model(es_jctx *jc, const es_model *model);
/* Append to list (a new array when NULL) es_axis_warning's text for each of the
 * n matrices that has one (once each: square with a defaulted model axis); returns
 * list. The listing carries it per matrix, cross-matrix responses at the top. */
json_t *es_axis_warnings(json_t *list, const es_matrix *const *ms, size_t n);
json_t *es_render_matrix(es_jctx *jc, const es_model *model, size_t j, const es_norms *norms);
/* {"jobs": [{key, method, n_rows, d, k, started, elapsed_s, fraction: null}]}
 * of the running decompositions, oldest first. Never fails. */
json_t *es_render_jobs(const es_cache_job *jobs, size_t n);
/* input.matrix / input.a / input.b: id, sha256, view, rows (canonical), n_rows,
 * d, center, and when svd != NULL solver, reconstruction_error, orthogonality_error. */
json_t *es_render_input(es_jctx *jc, const es_matrix *m, const es_selection *sel, const es_svd *svd);
void es_render_pca(es_jctx *jc, json_t *root, const es_pca *p, bool with_rows);
void es_render_spectrum(es_jctx *jc, json_t *root, const es_spectrum *s);
void es_render_cosine_row(es_jctx *jc, json_t *root, const es_selection *sel, const double *sim);
void es_render_cosine_offset(es_jctx *jc, json_t *root, const es_cosine_offset *o);
void es_render_grid(es_jctx *jc, json_t *root, const char *field, const es_grid *g);
void es_render_vectors(es_jctx *jc, json_t *root, const es_vectors *v, const es_svd *svd);
void es_render_capture(es_jctx *jc, json_t *root, const es_capture *c);
/* score, n, span, offsets, diagonal_mean, diagonal_count of a Toeplitz score. */
void es_render_toeplitz(es_jctx *jc, json_t *root, const es_toeplitz *t);
/* An alignment's top_mean as [{"m", "mean"}, ...]. Never fails. */
json_t *es_render_top_means(es_jctx *jc, const es_alignment *a);
/* "degenerate_groups": [[start, end), ...] and "degeneracy_note". */
void es_render_degeneracy(es_jctx *jc, json_t *root, const es_degeneracy *d);
/* Flag each entry of root's "vectors" inside a group: "in_degenerate_group". */
void es_render_vector_groups(json_t *root, const es_degeneracy *d);

/* The catalogue's summary of a matrix's labels: null, or {"rows", "columns":
 * [{"name", "type": "numeric" | "categorical"}], "bytes", "sha256"}. Never fails. */
json_t *es_render_labels_info(const es_labels *l);

/* ================================================================ negotiate.c */

/* Does Accept-Encoding allow gzip (gzip, x-gzip or *, q > 0)? NULL: no. */
bool es_accepts_gzip(const char *accept_encoding);
/* Weak comparison of If-None-Match (a list, or "*") with one entity tag. */
bool es_etag_matches(const char *if_none_match, const char *etag);
/* W/"<32 hex>" of sha256(text) into out. */
void es_etag_of(const void *text, size_t len, char out[40]);
/* The same from the text's sha256 in hex (es_sha256_hex), when the caller has it. */
void es_etag_of_hash(const char hex[65], char out[40]);
/* The Access-Control-Allow-Origin value for a request Origin (NULL: none sent)
 * under the configured allow-list (NULL-terminated, "*" = any): "*" (whatever
 * the Origin), the origin itself, or NULL (no CORS headers). */
const char *es_cors_allow(char *const *origins, const char *origin);
/* True when the list is restricted (no "*"): every reply then depends on the
 * request's Origin and must say Vary: Origin. */
bool es_cors_varies(char *const *origins);
/* May a web page of origin write here (PUT, POST, DELETE)? True for no Origin
 * (not a browser's page), the daemon's own origin (origin's host[:port] is the
 * request's Host) and an origin the list names itself; "*" lets any origin
 * read, never write. Never fails. */
bool es_cors_may_write(char *const *origins, const char *origin, const char *host);
/* RFC 7240 Prefer: respond-async into *async, wait=N (seconds, 0..86400) into
 * *wait (-1 when absent or malformed). NULL: neither. Never fails. */
void es_prefer(const char *prefer, bool *async, double *wait);
/* Longest accepted X-Forwarded-Prefix, with its NUL. */
#define ES_PREFIX_MAX 128
/* The path prefix a reverse proxy serves the daemon under (X-Forwarded-Prefix,
 * e.g. "/embedscope") into out, without a trailing '/' ("/" gives ""). False,
 * out = "", when given is NULL or not a clean absolute path (segments of
 * [A-Za-z0-9._~-], no empty, "." or ".." segment, < ES_PREFIX_MAX bytes). */
bool es_forwarded_prefix(const char *given, char out[ES_PREFIX_MAX]);
/* The client named by an X-Forwarded-For value (NULL: none): its last entry,
 * the address the (trusted) proxy itself saw, in canonical text (inet_ntop:
 * "::ffff:a.b.c.d" becomes "a.b.c.d"). Entries before it are the client's own
 * claims and are ignored. False (out = "") unless that entry, blanks trimmed,
 * is a numeric IPv4 or IPv6 address. Never fails otherwise. */
#define ES_CLIENT_MAX 64
bool es_forwarded_for(const char *xff, char out[ES_CLIENT_MAX]);
/* A numeric IPv4/IPv6 address as 16 bytes (IPv4 mapped); -1 if malformed. */
int es_addr_parse(const char *text, unsigned char key[16]);
/* given (a trusted proxy's X-Request-Id, or NULL) if it is 1..64 chars of
 * [A-Za-z0-9._:-], else a fresh id: 32 lowercase hex digits of a UUIDv7-like
 * 128-bit value (time-ordered, random). Never fails. */
void es_request_id(const char *given, char out[72]);
/* gzip (RFC 1952) of len bytes into a malloc'ed buffer: zlib level 6, or 1
 * above ES_GZIP_FAST_ABOVE (a 32 MB JSON table: 0.36 s instead of 1.9 s, 52 %
 * of its size instead of 55 %). -1 on zlib or allocation failure (the caller
 * then sends the identity body). */
int es_gzip(const char *in, size_t len, char **out, size_t *out_len);
#define ES_GZIP_FAST_ABOVE ((size_t)1 << 20)

/* Bodies smaller than this are sent uncompressed. */
#define ES_GZIP_MIN_BYTES 1024
/* Would gzip pay for this body? Its first ES_GZIP_SAMPLE bytes, compressed at
 * level 1, must shrink below ES_GZIP_PAYS_BELOW of their size (an NPY table of
 * doubles shrinks 4 %: never worth compressing); *ratio is the sample's
 * compressed / original size (0 for a body under ES_GZIP_MIN_BYTES). Never fails. */
#define ES_GZIP_SAMPLE ((size_t)64 << 10)
#define ES_GZIP_PAYS_BELOW 0.9
bool es_gzip_pays(const char *body, size_t len, double *ratio);
/* Shared bodies up to this size are compressed by the request that first
 * accepts gzip, larger ones by a background task of the compute pool (that
 * request is answered identity, later ones gzip). */
#define ES_GZIP_INLINE_MAX ((size_t)256 << 10)
struct es_reply;
/* Attach rep->gz, the gzip of a 200 body that es_gzip_pays says is worth
 * compressing, when it is smaller than the body. Never fails (no gz then). */
void es_reply_gzip(struct es_reply *rep);

/* ================================================================ results.c: replies and the response cache */

/* What a handler produces. Bodies are malloc'ed (freed with free) unless static. */
typedef struct es_shared es_shared;
typedef struct es_reply {
    unsigned status;
    const char *content_type;
    char *body;
    size_t len;
    bool body_static;
    char *gz;                  /* gzip of body, malloc'ed, or NULL (see es_reply_gzip) */
    es_shared *shared;         /* non-NULL: body and gz live in these shared bytes, of which the
                                  reply holds one reference (neither freed nor static) */
    size_t gz_len;
    const char *retry_after;   /* Retry-After header (503 busy) or NULL */
    unsigned retry_after_s;    /* Retry-After in seconds when retry_after is NULL (429 of the job cap); 0: none */
    const char *cache_control; /* static string or NULL */
    char etag[40];             /* "" = none */
    bool etag_from_body;       /* es_route_dispatch computes the ETag from the body (200 only) */
    const char *allow;         /* Allow header (405, OPTIONS) */
    char *location;            /* Location header (201 of an upload, 202 and 303 of a job), malloc'ed
                                * (es_reply_location), of any length; NULL = none */
    bool vary_accept;          /* negotiated by Accept: "Vary: Accept" too */
} es_reply;
/* Free the reply's owned bodies (a static body is left alone, shared bytes
 * lose a reference) and clear it (rep must not be NULL). Never fails. */
void es_reply_release(es_reply *rep);
/* Set rep's Location to a copy of url (a URL of any length: never cut). */
void es_reply_location(es_reply *rep, const char *url);

typedef struct es_results es_results;
typedef struct es_result es_result;
typedef struct es_results_stats {
    unsigned long hits, misses, waits, evictions;
    size_t bytes, entries, max_bytes;
} es_results_stats;

/* A response cache of at most max_bytes (bodies, gzip and bookkeeping). */
es_results *es_results_new(size_t max_bytes);
/* Free it; NULL is ignored. No request may use it any more. */
void es_results_free(es_results *c);
enum { ES_JOIN_CLAIMED, ES_JOIN_HIT, ES_JOIN_PENDING };
/* Single flight without blocking (an HTTP thread): ES_JOIN_HIT with the cached
 * reply of key (a sha256 hex) copied into *out; ES_JOIN_CLAIMED when the
 * caller must compute: *claim is the key it owns (settle it with
 * es_results_settle); ES_JOIN_PENDING when another request computes it:
 * *pending is that entry, held for the caller until es_results_take or
 * es_results_release. Never fails. */
int es_results_join(es_results *c, const char *key, es_reply *out, es_result **claim, es_result **pending);
/* Call fn(arg) once the held entry e is settled (from the settling thread,
 * outside the cache's lock): true; false, and nothing registered, when it is
 * settled already. Never fails. */
bool es_results_notify(es_results *c, es_result *e, void (*fn)(void *arg), void *arg);
/* The reply of the held entry e (waiting until it is settled) and the hold
 * released: 1 with it copied into *out; -1 when its computation failed with an
 * error the waiters share (copied into *err; not with err NULL); 0 when it
 * failed otherwise (compute again). Never fails. */
int es_results_take(es_results *c, es_result *e, es_reply *out, es_err *err);
/* Does a request still wait for e (a hold taken by es_results_join and not
 * yet taken or released)? Never fails. */
bool es_results_waited(es_results *c, es_result *e);
/* Release the hold on e without taking its reply. Never fails. */
void es_results_release(es_results *c, es_result *e);
/* Single flight, blocking (a compute thread): 1 with the cached reply copied into *out
 * (after waiting if another request is computing it); 0 when the caller must compute: *claim is
 * then the key it owns (settle it with es_results_settle), or NULL if the
 * computation it waited for failed (compute without caching). */
int es_results_claim(es_results *c, const char *key, es_reply *out, es_result **claim);
/* Store the claimed key's reply (200 only; its bodies become shared bytes,
 * es_shared_adopt, which the reply keeps using) or, reply NULL, fail the
 * claim: with error, waiting requests take that error (a failure that holds
 * for them too); without, they compute themselves. Replies larger than the
 * whole budget are only handed to the waiting requests. */
void es_results_settle(es_results *c, es_result *claim, es_reply *reply, const es_err *error);
/* Turn rep's bodies (body, and gz when there is one) into shared bytes,
 * reference counted, taken over without a copy (a static body stays static):
 * rep->body stays, rep->gz moves into them (rep->shared; es_shared_gzip). A reply that shares already is left as it is.
 * es_shared_give copies such a reply into *out with one more reference: what
 * the response cache and the pre-rendered listings hand out instead of
 * copying bytes. es_shared_release drops a reference (NULL is a no-op); the
 * last frees the bytes. None fails. */
void es_shared_adopt(es_reply *rep);
void es_shared_give(const es_reply *from, es_reply *out);
void es_shared_release(es_shared *s);
/* The gzip of shared bytes for a request that accepts it: true with *gz and
 * *gz_len (owned by s) when it exists. Made on first demand: here when the
 * body is at most ES_GZIP_INLINE_MAX (or pool is NULL), else by a background
 * task of pool for later requests (false now); never for a body whose sample
 * did not pay (es_gzip_pays, decided by es_shared_adopt). Never fails. */
bool es_shared_gzip(es_shared *s, es_pool *pool, const char **gz, size_t *gz_len);
/* A consistent snapshot of the cache's counters. Never fails. */
void es_results_get_stats(es_results *c, es_results_stats *out);

/* ================================================================ metrics.c */

#define ES_METRICS_BUCKETS 16 /* 15 fixed bounds up to 60 s, and limits.request_timeout_s beyond */
/* The counters every request adds to, one set per HTTP thread (threads take
 * shards in turn; past ES_METRICS_SHARDS threads share them) on cache lines
 * of its own, summed at scrape: no line is written by every reply of every
 * thread (16 threads of one set cost 58 % more CPU per reply than 2). */
#define ES_METRICS_SHARDS 16
typedef struct es_metrics_shard {
    _Alignas(64) atomic_ulong by_class[6];    /* index status/100; 0 unused */
    atomic_ulong duration_le[ES_METRICS_BUCKETS]; /* cumulative histogram buckets */
    atomic_ulong duration_count, duration_us, response_bytes;
    atomic_long in_flight;                    /* started minus finished here (summed: a gauge) */
    /* per route, method and status (es_metrics_observe_route); a zeroed pthread mutex is an
     * initialised one on glibc, so es_metrics = {0} works. Taken by its threads and the scrape. */
    pthread_mutex_t series_lock;
    struct es_route_series *series;
    size_t n_series, cap_series;
} es_metrics_shard;
typedef struct es_metrics {
    double timeout_le;                        /* limits.request_timeout_s: the last bucket's bound when > 60 */
    atomic_ulong reloads, reload_failures;    /* SIGHUP reloads applied / refused */
    atomic_size_t upload_pending_bytes;      /* bodies being received (uploads.max_pending_bytes) */
    atomic_ulong store_syncs;                 /* uploads.dir changes of other daemons taken in */
    /* connections (conns.c) */
    atomic_long connections_open;
    atomic_ulong connections_accepted;
    atomic_ulong connections_refused[2];      /* [0] connection_limit, [1] per_address_limit */
    atomic_ulong connections_timed_out;       /* request head overdue (header_timeout_s), body too
                                               * slow (body_min_rate) */
    es_metrics_shard shard[ES_METRICS_SHARDS];
} es_metrics;
/* A request starts (+1) or ends (-1), on this thread's shard. Never fails. */
void es_metrics_in_flight(es_metrics *mx, int delta);
/* Requests being processed now (every shard summed). Never fails. */
long es_metrics_in_flight_now(es_metrics *mx);

/* Count one finished request under its route pattern (NULL: no route
 * matched), method (anything but GET, HEAD, OPTIONS counts as "other") and
 * exact status, with its duration. Never fails. */
void es_metrics_observe_route(es_metrics *mx, const char *route, const char *method, unsigned status,
                              double seconds);
/* Free the per-route series; the struct may be used again. Never fails. */
void es_metrics_free(es_metrics *mx);

/* Count one finished request of route (a pattern or NULL): by status class
 * (except the 503s /readyz answers while warming: the probe working, not a
 * server error), duration and bytes. Never fails. */
void es_metrics_observe(es_metrics *mx, const char *route, unsigned status, double seconds, size_t bytes);
/* Prometheus text format 0.0.4 of the request counters (also per route,
 * method and status) and reload counters, the connections, the decomposition
 * (with its duration histogram) and response cache statistics, the compute
 * pool, the process (RSS, descriptors, CPU), the readiness gauges and the
 * catalogue reg's matrices, the replies jobs keep (results, pool and jobs may
 * be NULL: their families are left out). Never fails; caller frees. */
struct es_jobs; /* jobs.c */
char *es_metrics_text(es_metrics *mx, es_cache *cache, es_results *results, es_pool *pool, struct es_jobs *jobs,
                      bool ready, const es_registry *reg);

/* ================================================================ app.c */

typedef struct es_warm_plan {
    es_matrix *m;              /* retained: a reload may drop it from the catalogue */
    size_t *idx;
    size_t n;
    es_centering center;
} es_warm_plan;

/* The response cache gets this fraction (1/N) of server.cache_bytes, on top
 * of the decomposition cache's budget. */
#define ES_RESULTS_BUDGET_DIVISOR 8
/* Request jobs that may wait for a compute thread (--queue-limit). */
#define ES_QUEUE_LIMIT_DEFAULT 64

typedef struct es_prerendered es_prerendered;

typedef struct es_app {
    es_registry *reg;          /* the catalogue: read it with es_app_catalogue */
    pthread_mutex_t reg_lock;  /* guards the reg pointer (held for a swap or a retain) */
    pthread_mutex_t write_lock; /* serialises writers: uploads, deletions, reloads */
    const char *config_path;   /* what SIGHUP reloads; NULL: the embedded default */
    bool loopback;             /* listening on a loopback address: uploads.enabled's default */
    const char *env_token;     /* $EMBEDSCOPE_UPLOAD_TOKEN, used when uploads.token is "" */
    json_t *records;           /* persist.c: "model/matrix" -> record the catalogue reflects; NULL without
                                  uploads.dir; guarded by write_lock */
    int store_lock_fd;         /* persist.c: uploads.dir's lock file, -1 until opened */
    unsigned long long store_generation; /* persist.c: the directory's generation last seen */
    es_cache *cache;
    es_results *results;       /* rendered replies */
    es_prerendered *prerendered; /* listings rendered once per catalogue */
    es_pool *pool;             /* NULL until es_app_start_compute: handlers then run inline */
    struct es_jobs *jobs;      /* the long requests answered 202 (jobs.c) */
    /* The transport's connection admission, told by a reload when its live settings (connection
     * limits, header timeout, trusted proxies) changed: set by the server (NULL: nobody to tell). */
    void (*admission_changed)(void *arg, const es_server_conf *conf);
    void *admission_arg;
    es_limits limits;          /* the limits at start; requests read their catalogue's (cx->reg->limits),
                                * which a reload replaces */
    es_server_conf server;     /* registry's settings at start with command-line overrides (a copy the
                                * app owns): what needs a restart; live ones are read from the catalogue */
    es_warm_plan *plans;
    size_t n_plans;
    void (*on_warm_failure)(void);
    double warm_t0;
    atomic_size_t warmed;      /* plans decomposed so far */
    atomic_bool ready, stopping, warm_failed;
    bool access_log;           /* one access-log line per request (--access-log) */
    es_metrics metrics;
    pthread_mutex_t derived_lock;  /* guards derived[] */
    es_derived derived[ES_DERIVED_MAX]; /* most recently used first */
    size_t n_derived;
} es_app;

/* Take ownership of reg, create the caches and resolve the warm list. Fails
 * (ES_E_CONFIG naming "warm[i]...") if a warm entry names an unknown matrix or
 * a bad selection; the registry is freed then too. */
int es_app_init(es_app *app, es_registry *reg, es_err *err);
/* Start the compute pool (threads, queue_max waiting request jobs). Fails like
 * es_pool_new. */
int es_app_start_compute(es_app *app, size_t threads, size_t queue_max, es_err *err);
/* Warm the decompositions as background tasks of the compute pool (inline,
 * before returning, without one); `ready` turns true when all are cached. On a
 * failed decomposition warm_failed is set and on_failure() is called, once,
 * from the compute thread. */
void es_app_start_warming(es_app *app, void (*on_failure)(void));
/* Stop the pool (queued tasks cancelled, running ones finish) and release
 * everything the app owns. */
void es_app_free(es_app *app);
/* The current catalogue, retained: a request holds it from start to end, so it
 * sees one consistent set of matrices while writers publish new ones. Release
 * with es_registry_free. Never fails. */
es_registry *es_app_catalogue(es_app *app);
/* Make next (its reference is taken over) the catalogue; requests holding the
 * previous one finish on it. Call with write_lock held. Never fails. */
void es_app_publish(es_app *app, es_registry *next);
/* SIGHUP: load app->config_path again (es_config_reload after the current
 * catalogue, so unchanged files are not read again), keep the user models and
 * publish it; counted in reloads / reload_failures. On failure the error is
 * logged with its key path and the current catalogue keeps serving; -1 with
 * err filled. "limits" and the live "server" settings (CORS origins, trusted
 * proxies, connection limits, timeouts, grace periods) apply at once (new
 * requests read them from the catalogue, the admission is reconfigured);
 * the listen address, thread counts and cache settings are named in a
 * warning (a restart applies them). Both come from one field list. */
int es_app_reload(es_app *app, es_err *err);
/* The row-averaged copy of m in groups of g, same id: of the selected rows sel
 * (groups start at its first row, es_matrix_average_groups), or of every item
 * from item 0 when sel is NULL (es_matrix_average_rows). Built once and kept in
 * the app's small LRU registry; *out is retained (release it). Thread-safe.
 * ES_E_PARAM naming `param` unless 1 <= g <= the rows averaged. */
int es_app_averaged(es_app *app, const es_matrix *m, const es_selection *sel, size_t g, const char *param,
                    es_matrix **out, es_err *err);
/* The copy es_app_averaged would give if it is already built (retained), else
 * NULL: nothing is built. Thread-safe. */
es_matrix *es_app_averaged_peek(es_app *app, const es_matrix *m, const es_selection *sel, size_t g);

/* ================================================================ routes.c + api.c */


/* The representations of an analysis result (format.c). */
typedef enum es_format { ES_FMT_JSON, ES_FMT_CSV, ES_FMT_NPY, ES_FMT_COUNT } es_format;
/* The values of ?format= (es_format order) and ?orient=, NULL-terminated. */
extern const char *const es_format_names[ES_FMT_COUNT + 1];
extern const char *const es_orients[];
typedef struct es_render_opts {
    es_format format;
    bool columns;          /* JSON: ?orient=columns */
    const char *table;     /* ?table=, NULL: the main table (borrowed from the query) */
} es_render_opts;

/* The request as handlers see it. */
struct es_ctx;
/* A request parsed by an HTTP thread that goes with its deferral to the
 * compute thread (es_ctx.parsed), which resumes it there instead of parsing
 * it again: resume is the gate and the answer on the compute side (the query,
 * catalogue, negotiated representation and predicted cost travel in the
 * job's es_ctx); release it with es_parsed_free. */
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
    es_registry *reg;             /* the catalogue this request reads, held for its duration */
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
                                   * by the gate of an HTTP thread, it goes with the deferred job */
    es_result *pending;           /* with deferred: another request computes this reply; wait for
                                   * it (held, see es_results_join) instead of queueing a job */
    const struct es_analysis *analysis; /* the table entry of the route, or NULL */
    es_cost cost;                 /* prediction added by the handler before the gate (cost.c) */
    bool prefer_async;            /* Prefer: respond-async */
    double prefer_wait;           /* Prefer: wait=N (seconds), or < 0 when not given */
    bool async;                   /* set by the gate with deferred: answer 202 with a job */
    char key[65];                 /* set by the gate: the response cache's key of the reply */
    es_reply reply;
    es_parsed *parsed;            /* with deferred: the parsed request, owned (NULL: parsed again where
                                   * computed); es_route_dispatch resumes it instead of the handler */
    const char *owner;            /* whose jobs it sees (es_job_owner), NULL: none (borrowed) */
} es_ctx;
/* After a handler's gate: if it deferred the request (and no parsed value is
 * there yet), cx takes p, which then goes with the job (true); else the
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
 * there is one. */
bool es_prerendered_get(es_prerendered *p, const es_route *route, es_ctx *cx);
/* Keep cx's finished 200 reply of route (gzipped, made shared here) for the
 * requests on the same catalogue. */
void es_prerendered_put(es_prerendered *p, const es_route *route, es_ctx *cx);


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

/* ---- shared by the handlers of api.c and api_positional.c */

/* The matrix named by the path captures {model}/{matrix}. ES_E_NOTFOUND naming "model" / "matrix". */
int es_path_matrix(es_ctx *cx, const es_matrix **out, es_err *err);
/* The gate between parsing and computing, called by every handler of an
 * immutable result once its parameters are valid. Sets the ETag from the
 * canonical description of the request (path + fmt) and the caching policy:
 * immutable (public, max-age=86400), or no-cache when the request reads a user
 * model (its data can be replaced under the same URL). True when the handler must stop without computing: the reply is
 * settled (304 when the client has the ETag, or a copy from the response
 * cache) or, with cx->may_defer, the request is refused for its cost
 * (cx->cost_exceeded) or deferred (cx->deferred): with the claim of its reply
 * (cx->claim) to the compute pool, or (cx->pending) to wait for the request
 * that computes the same reply. False: compute now; the response cache then
 * holds the request's claim (cx->claim, settled by es_route_dispatch), so
 * concurrent requests for the same result wait for this one. */
bool es_precheck(es_ctx *cx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The gate of a listing revalidated by its body (no-cache, ETag from the body):
 * keyed by the path and `identity`, the text that identifies what is listed
 * (the catalogue changes while running: uploads, reloads). */
bool es_precheck_listing(es_ctx *cx, const char *identity);

/* One matrix as an analysis sees it: the configured matrix or its averaged copy
 * (parameter <prefix>average = g), and the selection <prefix>rows / exclude / center. */
typedef struct es_one {
    const es_matrix *source;  /* the configured matrix named in the request (borrowed) */
    const es_matrix *m;  /* what is analysed (borrowed from the registry, == head or == held) */
    es_matrix *head_view;  /* <prefix>head's view, retained; NULL without head */
    es_matrix *held;     /* the averaged copy, retained; NULL until es_one_average builds it */
    size_t head, n_heads;  /* n_heads 0 = no head */
    size_t average;      /* group size g, 0 = not averaged */
    es_average_order order;
    bool groups;         /* average_mode=groups: one row per group */
    size_t n_groups;
    es_selection sel;
    /* Averaged: the matrix averaged (the source or its head view; o->m until the
     * copy is built, same shape), the rows averaged (select_then_average: the
     * selection before average_mode=groups keeps its leaders; idx NULL: every
     * item) and the parameter that errors name ("<prefix>average"). */
    const es_matrix *base;
    es_selection averaged;
    char average_param[48];
} es_one;
/* The per-matrix parameters, each with the matrix's prefix ("", "a_", "w_", ...):
 * <prefix>head (one head of a d_model x d_model weight: es_view_head with the
 * n_heads of the matrix's model in reg, the catalogue the request holds, never
 * app->reg, which a reload or upload may swap meanwhile), then the selection
 * <prefix>rows / exclude / center, and
 * <prefix>average = g with <prefix>average_order (select_then_average, default:
 * the selected rows in groups from the first one; average_then_select: the whole
 * matrix from item 0, then the selection) and <prefix>average_mode (rows,
 * default: every selected row, replaced by its group's mean; groups: the first
 * row of each group only). ES_E_PARAM naming the parameter (also for an
 * average_order / average_mode without average, or a g the rows averaged
 * cannot take), or as es_param_selection. Parsing builds nothing: o->m is the
 * matrix averaged (same shape as its copy) until es_one_average. */
int es_one_parse(const es_registry *reg, const es_query *q, const char *prefix, const es_matrix *m, bool with_center,
                 es_centering def, es_one *out, es_err *err);
/* o's averaged copy as o->m: built (build: a compute thread's work,
 * es_app_averaged) or, from an HTTP thread, taken if already built; else o
 * stays without it, and es_one_key is NULL: the request is deferred unkeyed
 * (es_gate_answer) and keyed where it is computed. Nothing without averaging
 * or once it has its copy. Fails like es_app_averaged. */
int es_one_average(es_app *app, es_one *o, bool build, es_err *err);
/* An average order parameter: select_then_average (default) | average_then_select.
 * ES_E_PARAM naming `name` otherwise. */
int es_param_average_order(const es_query *q, const char *name, es_average_order *out, es_err *err);
/* Release the averaged copy and the selection (o itself is the caller's). Never fails. */
void es_one_free(es_one *o);
/* What identifies o's data in an ETag (id, sha256, view, rows, centring, head,
 * averaging); NULL while its averaged copy is not there (es_one_average), whose
 * sha256 it names. Caller frees. */
char *es_one_key(const es_one *o);
/* es_render_input of o plus model_axis and its origin, head and n_heads with a
 * head, and average, average_order, average_mode and n_groups when averaged. */
json_t *es_one_input(es_jctx *jc, const es_one *o, const es_svd *svd);
/* The rank bound min(n, d) of o's selection: the largest meaningful k. Never fails. */
size_t es_one_rank(const es_one *o);
/* o's decomposition through the app's cache (retained). Fails like es_cache_svd. */
int es_one_svd(es_app *app, const es_one *o, es_svd **out, es_err *err);

/* ================================================================ spec.c + analyses.c: the analysis table
 *
 * Every analysis endpoint is one es_analysis descriptor (analyses.c): its name,
 * route, which matrices it reads (es_shape), whether it decomposes them, its
 * centring, and a typed spec of its own parameters. From the descriptor the
 * generic code derives the allowed-parameter list (es_spec_allowed), parsing
 * and validation into the analysis' params struct (es_spec_parse, fields found
 * by offset), the canonical cache/ETag key over every parsed parameter
 * (es_spec_key), the "input" echo (es_spec_echo), the route and /v1/compare
 * eligibility, and --dump-api (describe.c), from which openapi.yaml's
 * analysis routes are generated (tools/gen_openapi.py, make openapi).
 *
 * Adding a parameter to an existing analysis (e.g. method= for issue 11, head= /
 * average_mode= for issue 10): add a field to the analysis' params struct in
 * analyses.c, one es_pspec line to its spec (name, kind, default, range or
 * choices, limit name, ES_FIELD(struct, field)), read the field in its fill
 * function, describe the parameter in openapi.base.yaml, run `make openapi` and
 * give it a case in the descriptor's examples (es_examples). The key, echo, allowed list, errors and docs check follow from the
 * spec; nothing else in src/api changes. A parameter that only selects among
 * renderings of the same result (format=) is not an analysis parameter. */

/* The kinds of parameter values a spec can hold. */
typedef enum es_pkind {
    ES_P_SIZE,   /* non-negative decimal integer -> size_t field */
    ES_P_REAL,   /* finite plain decimal -> double field */
    ES_P_CHOICE, /* one of .choices -> size_t field (the index) */
    ES_P_RANGE,  /* "start:stop" over the items of matrix .side (es_param_range) -> size_t[2] field */
    ES_P_TEXT    /* parsed by the handler itself (model, lists): the key and echo use the text */
} es_pkind;

/* Bounds that depend on the request, applied on top of .min/.max. */
typedef enum es_pbound {
    ES_BOUND_FIXED,     /* .max only */
    ES_BOUND_RANK,      /* <= the rank bound min(n, d) of selection .side (ES_E_PARAM above it) */
    ES_BOUND_ITEMS,     /* <= the item count of matrix .side */
    ES_BOUND_LAST_ITEM, /* <= the item count of matrix .side, minus one (an item index) */
    ES_BOUND_DIM,       /* <= the model-axis length of matrix .side */
    ES_BOUND_FIELD      /* < the value of the size field at .bound_field (parsed earlier) */
} es_pbound;

/* One parameter of an analysis. */
typedef struct es_pspec {
    const char *name;
    es_pkind kind;
    double def;                  /* default: value, or choice index */
    double min, max;             /* inclusive range (SIZE: max 0 = none) */
    bool min_open, max_open;     /* REAL: the bound itself is excluded */
    const char *limit;           /* configured limit (es_limit_value) bounding it: SIZE: ES_E_LIMIT
                                  * above it; REAL: the range's max */
    es_pbound bound;             /* request-dependent bound */
    int side;                    /* which matrix/selection bounds it (0, 1) */
    size_t bound_field;          /* ES_BOUND_FIELD: offset of the bounding size field */
    bool clamp_default;          /* lower the default to the request-dependent bound too */
    bool required;               /* absent is a 400 (when it applies) */
    const char *const *choices;  /* CHOICE: NULL-terminated */
    size_t offset;               /* where the value goes in the params struct */
    const char *when, *when_is;  /* applies only when parameter `when` (a CHOICE parsed earlier) is `when_is` */
    bool no_echo;                /* not echoed in "input" (the handler echoes it its own way) */
    bool preset;                 /* absent: keep the value the caller put in the field (a default
                                  * that depends on the request, e.g. the model's n_heads) */
} es_pspec;

#define ES_FIELD(type, field) offsetof(type, field)
#define ES_PARAMS_MAX 24

/* Which matrices an analysis reads, with the selection parameters that come with it. */
typedef enum es_shape {
    ES_SHAPE_NONE,  /* no selection parameters (the handler resolves its own inputs) */
    ES_SHAPE_ONE,   /* the path's {model}/{matrix}: rows, exclude[, center][, average] */
    ES_SHAPE_PAIR   /* two matrices named by .names: a, a_rows, a_exclude, a_center, a_average, b, ... */
} es_shape;

struct es_out;
struct es_run;
struct es_out_plan;

/* Example requests of an analysis, carried by its descriptor and exported by
 * --dump-api, from which the HTTP tests build their lists (a new analysis needs
 * no test-list edit; docs/development.md, "Adding an analysis"). A query is the
 * part after "?"; on a route with {model}/{matrix} the tests fill in the matrix.
 * A change is a query fragment merged into .query: "name=value" sets a member,
 * "-name" removes one, "@square=<operand>_" (or "@square=" for the path's
 * matrix) switches that matrix to a square d_model x d_model weight. */
typedef struct es_example_case {
    const char *param;     /* the parameter; NULL ends a list */
    const char *one, *two; /* two changes that give two different results (two NULL: the shipped
                            * configuration offers one valid value; the parameter is checked for rejection) */
    const char *bad;       /* a change refused with a 4xx naming the parameter (or a limit) */
} es_example_case;

typedef struct es_example_table {
    const char *query;  /* NULL ends a list */
    const char *tables; /* the tables it produces, space-separated */
} es_example_table;

typedef struct es_examples {
    const char *query;              /* typical: answers 200 on the shipped configuration, on the path's
                                     * gpt2-small/wpe (the base of .cases) */
    const es_example_case *cases;   /* its own parameters' cases; selection and rendering parameters
                                     * without one get the tests' generic cases; NULL: none */
    const char *light, *heavy;      /* on the cost test's configuration (models b: s 16 x 8, g 4096 x 768
                                     * gaussian; tiny), a 2 MB max_request_memory: light answers 200,
                                     * heavy is refused before any work naming .cost_params; path matrix
                                     * b/s for light, b/g for heavy */
    const es_example_table *tables; /* requests whose tables the format tests compare; together they
                                     * cover every table of the analysis */
} es_examples;

typedef struct es_analysis {
    const char *name;
    const char *route;             /* the path pattern ({model}, {matrix} capture one segment) */
    es_shape shape;
    const char *names[2];          /* ES_SHAPE_PAIR: the two matrices' parameter names; ES_SHAPE_NONE:
                                    * names[0] may name a matrix parameter of the spec whose prefixed
                                    * selection (r_rows, ...) the handler parses, accepted after it */
    bool decomposes;               /* works on the (cached) SVD of its selection(s) */
    bool center_param;             /* takes <prefix>center (default .def_center); without it the
                                    * selection is centred by .def_center */
    bool average_param;            /* takes <prefix>average, <prefix>average_order, <prefix>average_mode */
    bool head_param;               /* takes <prefix>head (one head of a d_model x d_model weight) */
    bool with_labels;              /* ES_SHAPE_ONE: the run holds the matrix's labels (es_run.labels) */
    es_centering def_center;
    bool comparable;               /* offered by /v1/compare (ES_SHAPE_ONE only) */
    /* compare: the table whose comparable analyses it gathers (it also accepts
     * their parameters and produces their tables); NULL for the others. The
     * table reaches the code that reads it (format.c, api_positional.c) through
     * this entry, not by name, so the table can list compare's handler. */
    const struct es_analysis *const *gathers;
    size_t params_size;            /* sizeof its params struct */
    const char *const *tables;     /* the names of its result tables, main first, NULL-terminated
                                    * (NULL: JSON only, no ?table=, ?orient=) */
    const es_pspec *spec;          /* its own parameters, .name NULL-terminated */
    /* Compute from the parsed run (selections, decompositions, params) and add
     * its "input" members beyond the echo and its results to out. */
    int (*fill)(const struct es_run *run, struct es_out *out, es_err *err);
    /* Instead of the generic runner: a hand-written handler that still uses
     * the spec (es_spec_*) and answers with es_gate_answer. NULL: generic. */
    int (*handler)(es_ctx *cx, es_err *err);
    /* Add its own cost (cost.c) beyond one pass over the n x d selection and
     * the decomposition when it decomposes to c; NULL: nothing more.
     * Hand-written handlers add their prediction to cx->cost themselves
     * before the gate. */
    void (*cost)(const struct es_run *run, size_t n, size_t d, es_cost *c);
    /* The parameters its cost grows with, named in the 400 of a request whose
     * predicted memory exceeds limits.max_request_memory (required: tests/http check it). */
    const char *cost_params;
    /* The tables this run will produce, in the order fill makes them, with
     * their shapes (es_plan_table), so that the reply's size is checked
     * before any work; NULL: checked after computing only. Never fails. */
    void (*plan)(const struct es_run *run, struct es_out_plan *p);
    /* Checks of the parsed run beyond its spec that need the selections (a
     * full-resolution grid within max_cells), run at parse time so a refused
     * request is a 400 before the gate; NULL: none. Fails ES_E_LIMIT / ES_E_PARAM. */
    int (*validate)(const struct es_run *run, es_err *err);
    /* Does this run produce table `name` (one of .tables), when its parameters
     * choose among them (cosine: one table per mode)? Checked by es_run_parse,
     * so a table the request will not produce is a 400 before the gate; NULL:
     * every run produces all of .tables. Never fails. */
    bool (*produces)(const struct es_run *run, const char *name);
    /* The decomposition of selection i when it needs less than the whole SVD
     * (method=, the top k triplets); NULL: es_one_svd. Fails like es_cache_decompose. */
    int (*decompose)(const struct es_run *run, int i, es_svd **out, es_err *err);
    /* Its example requests (required: the HTTP tests read them from --dump-api). */
    const es_examples *examples;
} es_analysis;

/* ---- cost.c: the predicted time and memory of a computing request */

/* Bytes of JSON per rendered number at most (17 significant digits, sign, point, exponent, separator). */
#define ES_BYTES_PER_NUMBER 25.0

/* The factor within which predictions meet measured times (make bench): a
 * request predicted longer than this times its synchronous window is a job at
 * once; a shorter one runs and becomes a job if it outlasts the window. */
#define ES_COST_ERROR_BOUND 4.0

/* Rates measured by es_cost_calibrate (defaults before): seconds per unit of work. */
typedef struct es_rates {
    double qr;          /* per n d^2 of the TSQR of a tall n x d block */
    double svd;         /* per d^3 of the rest of an exact decomposition (dgesdd of R, checks) */
    double values;      /* per d^3 of the values of R */
    double eig;         /* per d^3 of top-k's eigenpairs of the Gram matrix */
    double gemm;        /* per flop of dgemm / dsyrk */
    double stream;      /* per byte of one pass over memory */
    double period2, period1; /* per n^2 and per n of one component's periodicity */
    double pair;        /* per pair of items of the loops over an n x n Gram matrix */
    double render;      /* per number of a result rendered as text and sent */
    double overhead;    /* per request: parsing, the gate, the hand-over to a compute thread */
    double calibration_s; /* how long es_cost_calibrate took (0: not run) */
} es_rates;

/* Measure the rates with the BLAS threads set now (one computation's view;
 * well under 0.5 s on a quiet machine: five short runs a probe, each rate from
 * the medians) and log them. Call once at start, before serving. Returns how
 * many rates stayed at their defaults (a measurement failed or came out
 * non-positive); never fails. */
unsigned es_cost_calibrate(void);
/* The rates in use now (the defaults before es_cost_calibrate). Never fails. */
es_rates es_cost_current(void);
/* Each adds one algorithm's time and memory to c. None fails.
 * es_cost_svd: the exact decomposition of an n x d selection;
 * es_cost_decompose: the decomposition es_cache_decompose computes for
 *   method `asked` and the first k triplets (0: all);
 * es_cost_products: the a x b dot products of vectors of length d (capture, overlap, alignment);
 * es_cost_project: X V_k over n items (pca coordinates, left vectors);
 * es_cost_pass: one pass over an n x d selection;
 * es_cost_gram: the n x n Gram matrix of n items of length d and a pass over it;
 * es_cost_cosine: the cosine matrix of n items made a block of rows at a time (its upper
 *   triangle only when upper) and a pass over each block;
 * es_cost_periodicity: k components' periodograms and fits over n positions;
 * es_cost_output: `numbers` numbers rendered;
 * es_cost_grid: a grid of bins x bins cells, or rows x cols at full resolution (bins 0);
 * es_cost_attention_layer: one attention layer over the queries [q_start, q_stop)
 *   of d-dimensional positions with n_heads heads (projections of q_stop positions, scores, softmax);
 * es_cost_request: the fixed cost of one request (parsing, the gate, the hand-over to a compute thread). */
void es_cost_svd(es_cost *c, size_t n, size_t d);
void es_cost_decompose(es_cost *c, es_method asked, size_t n, size_t d, size_t k);
void es_cost_products(es_cost *c, size_t d, size_t a, size_t b);
void es_cost_project(es_cost *c, size_t n, size_t d, size_t k);
void es_cost_pass(es_cost *c, size_t n, size_t d);
void es_cost_gram(es_cost *c, size_t n, size_t d);
void es_cost_cosine(es_cost *c, size_t n, size_t d, bool upper);
void es_cost_periodicity(es_cost *c, size_t n, size_t k);
void es_cost_output(es_cost *c, double numbers);
void es_cost_grid(es_cost *c, size_t bins, size_t rows, size_t cols);
/* UMAP of n items of length d: the neighbour graph (every pair's product, pass "knn")
 * and `epochs` passes over the graph's edges (pass "layout"). Never fails. */
void es_cost_umap(es_cost *c, size_t n, size_t d, size_t n_neighbors, size_t epochs);
void es_cost_attention_layer(es_cost *c, size_t q_start, size_t q_stop, size_t d, size_t n_heads);
void es_cost_request(es_cost *c);
/* {"predicted_seconds", "predicted_bytes"} (the answer's input.cost). Never fails. */
json_t *es_cost_json(es_jctx *jc, const es_cost *c);

/* The irregular endpoints' params structs and specs (api_positional.c). */
#define ES_MAX_LAYERS 256
typedef struct es_layers_params {
    size_t k, w_center, w_head;
} es_layers_params;
typedef struct es_attention_params {
    size_t queries[2], n_heads, layer, head, bins;
} es_attention_params;
typedef struct es_rope_params {
    size_t seed;
} es_rope_params;
extern const es_pspec es_layers_spec[], es_attention_spec[], es_ranking_spec[], es_pattern_spec[], es_rope_spec[],
    es_compare_spec[];

/* The table, NULL-terminated, in route order. */
/* Defaults and choices shared by the table and the hand-written handlers: one
 * definition each. */
#define ES_ALIGN_DEFAULT_K 10
extern const char *const es_average_orders[]; /* es_average_order order */
extern const char *const es_average_modes[];  /* rows (every selected row), groups (one per group) */
extern const es_analysis *const es_analyses[];
/* The analysis named `name`, or NULL. */
const es_analysis *es_analysis_find(const char *name);

/* The value of a configured limit by name ("max_k", "max_bins", ...); SIZE_MAX
 * for an unknown name. Never fails. */
size_t es_limit_value(const es_limits *lim, const char *name);
/* A grid of rows x cols cells at full resolution (bins=0): ES_E_LIMIT
 * "max_cells" when it has more cells than the configured limit. */
int es_check_cells(const es_limits *lim, size_t rows, size_t cols, es_err *err);

/* Bounds the request-dependent bounds of a spec refer to. */
typedef struct es_pctx {
    const es_matrix *m[2];     /* the matrices (ES_BOUND_ITEMS, _LAST_ITEM, _DIM) */
    size_t rank[2];            /* rank bounds of the selections (ES_BOUND_RANK) */
    const es_limits *lim;
} es_pctx;

/* The selection parameters of one matrix, unprefixed (rows, exclude, center,
 * average, average_order, average_mode, head), .name NULL-terminated: the
 * names a route accepts per operand and their description (--dump-api). */
extern const es_pspec es_selection_spec[];
/* Does analysis a take selection parameter es_selection_spec[j] (its
 * center_param, average_param, head_param)? */
bool es_selection_applies(const es_analysis *a, size_t j);
/* Every parameter name an analysis accepts (selection parameters, its spec),
 * NULL-terminated, into names[cap]. Returns the count. Never fails. */
size_t es_spec_allowed(const es_analysis *a, const char **names, size_t cap);
/* Is name a parameter of the reference side of a pair analysis a (its first
 * matrix, "a" and "a_rows", "a_center", ...)? /v1/compare takes them as they
 * are and runs a against each of its matrices as the second side. */
bool es_compare_reference_param(const es_analysis *a, const char *name);
/* Parse and validate the spec's parameters from q into params (zeroed first;
 * CHOICE and SIZE into size_t fields, REAL into double fields; TEXT ones are left
 * to the handler). ES_E_PARAM naming the parameter (malformed, out of range,
 * missing when required, given when it does not apply), ES_E_LIMIT naming the
 * limit. */
int es_spec_parse(const es_pspec *spec, const es_query *q, const es_pctx *pc, void *params, es_err *err);
/* Is value the default documented for p (--dump-api's "default": a CHOICE's
 * default name, a SIZE's or REAL's default number)? A parameter that does not
 * apply (its `when`) is accepted, and ignored, with this value. */
bool es_pspec_is_default(const es_pspec *p, const char *value);
/* Does parameter p apply with these params (its `when` condition)? */
bool es_spec_applies(const es_pspec *spec, const es_pspec *p, const void *params);
/* Append "|name=value" for every parameter of the spec that applies (TEXT: its
 * query text, or "-" when absent) to b: the canonical key. Never fails. */
void es_spec_key(const es_pspec *spec, const es_query *q, const void *params, es_buf *b);
/* Echo every parameter that applies (and is not .no_echo) into input: sizes
 * as integers, reals as numbers, choices as their names, TEXT as given (when
 * given). Never fails (non-finite reals are recorded in jc). */
void es_spec_echo(const es_pspec *spec, const es_query *q, const void *params, es_jctx *jc, json_t *input);

/* A request of one analysis, parsed: what its fill function reads. */
typedef struct es_run {
    es_app *app;
    const es_analysis *a;
    es_one one[2];        /* one[0] (ES_SHAPE_ONE) or both (ES_SHAPE_PAIR) */
    es_svd *svd[2];       /* their decompositions when a->decomposes, else NULL */
    void *params;         /* a->params_size bytes, filled by es_spec_parse */
    es_labels *labels;    /* with a->with_labels: the matrix's labels (retained), NULL: none */
    const es_limits *lim; /* the limits of the catalogue the request holds */
    es_cost cost;         /* its prediction (es_cost_run) */
} es_run;

/* The name of category code `code` of a label column (es_table.labels). */
typedef const char *es_label_fn(size_t code);

/* A typed result table: rows x cols float64 values (row-major) with an index
 * column (its name and one value per row: an item index, component, offset,
 * bin start) and column names. A 1-D result is a table with one column.
 * Missing cells (the JSON document's null, such as the period of a component
 * without one) are NaN: NaN in NPY, an empty field in CSV, null in the column
 * JSON; any other non-finite value is a numeric failure. A label column holds
 * category codes: NPY writes the code, CSV and the column JSON its name. */
typedef struct es_table {
    const char *name;      /* static: the ?table= name */
    const char *index;     /* static: the index column's name */
    const char *units;     /* static: what the values are (openapi.yaml lists them) */
    size_t rows, cols;
    double *index_values;  /* rows */
    double *values;        /* rows x cols; NaN marks a missing cell */
    char **col_names;      /* cols names */
    es_label_fn **labels;  /* cols entries: NULL, or the names of a label column's codes */
} es_table;

#define ES_TABLES_MAX 4

/* What a fill function produces: the JSON document (today's shapes) and the
 * same numbers as typed tables, the main one first, for CSV, NPY and the
 * column JSON (format.c). */
typedef struct es_out {
    es_jctx jc;
    json_t *root;         /* {"input": {...}, results...} */
    bool tables_only;     /* the reply is a table (CSV, NPY, column JSON): a fill may leave what its
                           * tables hold out of root (PCA's coordinates: a JSON tree of 1.5 M numbers
                           * for a 50257x30 NPY reply) and only record a non-finite value in jc */
    es_table tables[ES_TABLES_MAX];
    size_t n_tables;
} es_out;
/* root's "input" object. */
json_t *es_out_input(es_out *out);
/* A new table of out (at most ES_TABLES_MAX; aborts beyond, a programming
 * error) with room for its values, index and column names; the caller fills
 * them (es_table_columns names them). Never fails. */
es_table *es_out_table(es_out *out, const char *name, const char *index, const char *units, size_t rows,
                       size_t cols);
/* Name t's columns: names[j] when names != NULL, else "<prefix><j + first>". Never fails. */
void es_table_columns(es_table *t, const char *const *names, const char *prefix, size_t first);
/* A one-column table `name` of n values indexed by idx (NULL: 0..n-1). Never fails. */
es_table *es_out_column(es_out *out, const char *name, const char *index, const char *units, const double *v,
                        const size_t *idx, size_t n);
/* A table of n records indexed 0..n-1 whose columns are the given arrays
 * (ncols of them, each n long), named by names. Never fails. */
es_table *es_out_records(es_out *out, const char *name, const char *index, const char *units,
                         const char *const *names, const double *const *columns, size_t ncols, size_t n);
/* n sizes as doubles (a table column). Caller frees. */
double *es_sizes_as_doubles(const size_t *v, size_t n);
/* The "diagonals" table (offset, mean, count) of a Toeplitz score, indexed by offset. */
void es_out_toeplitz(es_out *out, const es_toeplitz *t);
/* A grid table: values rows x cols, index = row bin starts (row_edges), columns
 * named by their bin starts (col_edges) with prefix. Never fails. */
es_table *es_out_grid(es_out *out, const char *name, const char *units, const es_grid *g, const char *prefix);
/* Free the tables and root (out itself is the caller's). Never fails. */
void es_out_free(es_out *out);

/* The rendering parameters every analysis route accepts besides its spec
 * ("format"; "orient" and "table" when it has tables). */
size_t es_render_params(const es_analysis *a, const char **names, size_t n, size_t cap);
/* Negotiate the representation of a's result into cx->render: ?format=
 * (json, csv, npy; it wins) else Accept with q-values (no Accept: JSON);
 * ?orient= (nested, columns; JSON only); ?table= (one of a->tables).
 * ES_E_UNACCEPTABLE (406, listing the supported media types) when nothing
 * acceptable is produced, ES_E_PARAM naming format / orient / table. */
int es_negotiate(es_ctx *cx, const es_analysis *a, es_err *err);
/* Does a list a table of that name (for compare: does a comparable analysis)? */
bool es_analysis_has_table(const es_analysis *a, const char *name);
/* Append the representation to a canonical key ("|format=..|orient=..|table=..").
 * Never fails. */
void es_render_key(const es_render_opts *r, es_buf *b);
/* Reply with out in cx->render's representation: the JSON document, the chosen
 * table as column JSON, CSV or NPY. out is consumed. ES_E_NUMERIC for a
 * non-finite value, ES_E_PARAM "table" when the result lacks the asked table,
 * ES_E_LIMIT "max_response_bytes" (saying which other format would fit). */
int es_reply_out(es_ctx *cx, es_out *out, es_err *err);

/* Parse analysis a (its selections and spec) for matrix m (ES_SHAPE_ONE; NULL
 * for a pair, whose matrices the query names in the catalogue reg) under query
 * q into run. ES_E_PARAM / ES_E_NOTFOUND / ES_E_INCOMPATIBLE naming the matrix
 * parameters, ES_E_PARAM naming "table" when ?table= names a table this run
 * does not produce (a->produces), else fails like es_one_parse, es_spec_parse
 * and a->validate. Release with
 * es_run_free (also after a failure). */
int es_run_parse(es_app *app, const es_registry *reg, const es_analysis *a, const es_query *q, const es_matrix *m,
                 es_run *run, es_err *err);
/* The canonical key of a parsed run (selections + every parameter); NULL while
 * an averaged copy is not built (es_one_key). Caller frees. */
char *es_run_key(const es_run *run, const es_query *q);
/* Decompose (if a->decomposes) and fill: the body {"input": {...}, results}
 * into *out (the caller's; root consumed by es_reply_json). Fails like
 * es_one_svd or a->fill. */
int es_run_fill(es_run *run, const es_query *q, es_out *out, es_err *err);
/* Release everything the run holds (run itself is the caller's). Never fails. */
void es_run_free(es_run *run);
/* Compute a request's result into *out (the caller's, empty): its JSON
 * document and tables. -1 with err filled on failure (out is then freed). */
typedef int (*es_fill_fn)(void *arg, es_out *out, es_err *err);
/* The gate and the answer of a parsed request, for every analysis handler:
 * es_precheck on its canonical key (consumed; the representation is added
 * there), then, unless that settled the reply (304, a cached copy, deferral),
 * fill(arg) and es_reply_out. A NULL key (an HTTP thread's request whose
 * averaged copy is not built: building is computing) defers the request
 * unkeyed: the compute thread builds the copy, then keys, claims and answers it
 * (a 304 included). Fails like fill or es_reply_out. */
int es_gate_answer(es_ctx *cx, char *key, es_fill_fn fill, void *arg, es_err *err);
/* The generic handler of an analysis route: parse, gate, compute, reply. */
int es_run_route(es_ctx *cx, const es_analysis *a, es_err *err);
/* The run's averaged copies (es_one_average of each operand). */
int es_run_average(es_run *run, bool build, es_err *err);
/* Add the predicted cost of a parsed run (its selections, decompositions not
 * already in the cache, and a->cost) to out. Never fails. */
void es_cost_run(const es_run *run, es_cost *out);
/* Is o's decomposition for a descriptor's decompose hook (topk: params start
 * with k and method; NULL params: the exact one) already in the cache? False
 * while its averaged copy is not built (neither is the decomposition, unless
 * the copy left the app's few kept since: then the prediction is high). */
bool es_one_cached(es_app *app, const es_one *o, const void *params);

/* ES_E_LIMIT "max_request_memory" when cx->cost needs more memory than
 * limits.max_request_memory (0: half of the physical memory), naming the
 * parameters it grows with. Called by es_gate_answer. */
int es_check_memory(const es_ctx *cx, es_err *err);
/* What the compute pool is told of a deferred request's cost: cx->cost's
 * seconds, light when it is predicted (> 0) within limits.light_seconds. */
es_task_cost es_task_cost_of(const es_ctx *cx);

/* The shapes of a result's tables known before computing (analysis .plan). */
typedef struct es_out_plan {
    struct {
        const char *name;
        size_t rows, cols;
        bool at_most;   /* rows is an upper bound (an exact count would need the rows' work) */
        double json_row; /* bytes a row takes at most in the nested JSON document when it is more than
                          * its numbers (an object of named fields); 0: its numbers, index included */
    } tables[ES_TABLES_MAX];
    size_t n_tables;
} es_out_plan;
/* Append a table of rows x cols to p (at most ES_TABLES_MAX). Never fails. */
void es_plan_table(es_out_plan *p, const char *name, size_t rows, size_t cols);
/* The same with at most `rows` rows (exact: exactly). Never fails. */
void es_plan_table_bounded(es_out_plan *p, const char *name, size_t rows, bool exact, size_t cols);
/* The last table's rows take at most `bytes` each in the nested JSON document
 * (named fields, strings), when that is more than their numbers. Never fails. */
void es_plan_json_row(es_out_plan *p, double bytes);
/* The reply's size in cx->render's representation from the plan, before any
 * work: NPY exactly (header included; bounded for a table of at most so many
 * rows), CSV and column JSON bounded (24 characters a number), the nested
 * JSON document's tables bounded at ES_BYTES_PER_NUMBER a number, the row
 * index included (or their planned bytes a row, es_plan_json_row): ES_E_LIMIT "max_response_bytes" (saying which other format
 * fits) when that exceeds the limit. A JSON document within its bound is
 * still checked once rendered (its "input" and labels are not planned). */
int es_check_planned_size(const es_ctx *cx, const es_out_plan *p, es_err *err);

/* Route handlers: fill cx->reply, or return -1 with err filled (a parameter,
 * lookup, limit or numeric failure; the server renders it as a problem). */
int es_api_models(es_ctx *cx, es_err *err);
int es_api_model(es_ctx *cx, es_err *err);
int es_api_matrix(es_ctx *cx, es_err *err);
/* api_positional.c: the irregular analyses (descriptors with .handler) */
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

/* ================================================================ uploads.c */

/* A write in progress: PUT or DELETE /v1/models/{model}/matrices/{matrix}. A
 * PUT's body is streamed into an unnamed temporary file in uploads.tmp_dir (it
 * vanishes when closed, whatever happens to the request or the process), then
 * mapped and read by the same strict loaders as a configuration's files. */
typedef struct es_upload es_upload;

/* The pre-body checks of a write, in this order, each a problem: the path (404
 * unless /v1/models/{model}/matrices/{matrix}), uploads enabled (ES_E_FORBIDDEN),
 * a token for a proxied request (one carrying X-Forwarded-For, Forwarded or
 * X-Real-IP) when writes are anonymous by default (ES_E_FORBIDDEN naming
 * "uploads.token"), the bearer token (ES_E_UNAUTHORIZED), valid names (ES_E_PARAM "model" /
 * "matrix"), a user model (ES_E_CONFLICT for a configured one), the query
 * parameters (PUT: model_axis and tensor for files; ES_E_PARAM), the content
 * type (ES_E_MEDIA_TYPE; none means a file) and the announced length
 * (ES_E_TOO_LARGE naming "uploads.max_body_bytes"; ES_E_STORAGE naming
 * "uploads.max_pending_bytes" above what bodies being received leave of it).
 * Headers may be NULL when
 * absent. On success *out is the write, for a PUT with its temporary file open
 * (ES_E_IO if it cannot be created). reg is the catalogue the request holds. */
/* A write (any method but GET, HEAD, OPTIONS) from a web page: allowed when
 * es_cors_may_write says so under reg's server.cors_origins, or with the
 * configured bearer token; ES_E_CROSS_ORIGIN naming "Origin" otherwise.
 * Headers may be NULL when absent. */
int es_check_write_origin(const es_app *app, const es_registry *reg, const char *origin, const char *host,
                          const char *authorization, es_err *err);
int es_upload_begin(es_app *app, const es_registry *reg, const char *method, const char *path,
                    const es_query *q, const char *authorization, bool proxied, const char *content_type,
                    const char *content_length, es_upload **out, es_err *err);
/* Append a chunk of the body; ES_E_TOO_LARGE once the body exceeds
 * uploads.max_body_bytes, ES_E_STORAGE once all bodies being received would
 * exceed uploads.max_pending_bytes or the disk is full, ES_E_IO if the file
 * cannot be written otherwise. */
int es_upload_write(es_upload *u, const char *data, size_t len, es_err *err);
/* Is this a PUT (a body to read, work for the compute pool) rather than a DELETE? */
bool es_upload_has_body(const es_upload *u);
/* At start: remove the temporary files of bodies a killed daemon left in
 * uploads.tmp_dir (named ones, where O_TMPFILE is missing). Never fails. */
void es_upload_sweep_tmp(const es_uploads_conf *uc);
/* Does finishing it belong on the compute pool: a PUT, or a DELETE that
 * locks and reads uploads.dir? */
bool es_upload_on_pool(const es_upload *u);
/* Carry the write out and fill rep: a PUT builds the matrix (file or JSON
 * entry; ES_E_PARAM naming the rule and byte offset for a malformed body),
 * checks uploads.max_matrices (ES_E_LIMIT) and max_total_bytes (ES_E_STORAGE),
 * publishes a new catalogue and answers 201 (200 on replace) with the matrix's
 * description and Location; a DELETE answers 204 (ES_E_NOTFOUND if absent).
 * Both fail with ES_E_CONFLICT if the model became a configured one meanwhile. */
int es_upload_finish(es_app *app, es_upload *u, es_reply *rep, es_err *err);
/* Close the temporary file (nothing remains on disk) and free; NULL is ignored. */
void es_upload_free(es_upload *u);
/* Is host (numeric, or "localhost") a loopback address? Decides uploads.enabled
 * when the configuration leaves it out. Never fails. */
bool es_host_is_loopback(const char *host);
/* ================================================================ labels.c */

/* {NAME: [the cells of items idx[0..n)]} for /rows. Never fails. */
json_t *es_labels_rows_json(const es_labels *l, const size_t *idx, size_t n);
/* rep = 200 with es_render_labels_info(l) (the answer of a PUT). Fails like es_json_body. */
int es_labels_reply(const es_app *app, const es_labels *l, es_reply *rep, es_err *err);
/* GET .../labels and GET .../labels/search (see labels.c). */
int es_api_labels(es_ctx *cx, es_err *err);
int es_api_labels_search(es_ctx *cx, es_err *err);

/* ================================================================ persist.c */

/* Persistence (uploads.dir), shared by any number of daemons on the
 * directory: one record per user matrix, content-addressed copies of uploaded
 * files, a lock file and a generation counter (docs/operations.md). A write
 * runs es_persist_begin, its checks, es_persist_put or es_persist_delete, then
 * publishes and calls es_persist_end, all under the app's write lock. Without
 * uploads.dir every call succeeds doing nothing. */
typedef struct es_persist_item {
    const char *model, *matrix, *description;
    double created;
    const json_t *entry;        /* the JSON entry of the body, or NULL for a file */
    const json_t *base;         /* for a view of a user matrix, that matrix's record (es_persist_record) */
    int fd;                     /* a file body (read with pread), or -1 */
    const char *file_sha256;    /* the file's sha256: its name in DIR */
    const char *tensor;
    es_axis axis;
    bool axis_stated;           /* ?model_axis given (else restored by the same default) */
} es_persist_item;

/* Take the directory's exclusive lock and bring the catalogue in line with
 * the records other daemons wrote (publishing it). ES_E_IO naming
 * "uploads.dir" if the lock cannot be taken. */
int es_persist_begin(es_app *app, es_err *err);
/* Release the lock es_persist_begin took. Never fails. */
void es_persist_end(es_app *app);
/* The record of user matrix ID ("model/matrix") as kept on disk, or NULL
 * (none, or no uploads.dir). Borrowed; valid until the next write or poll. */
const json_t *es_persist_record(const es_app *app, const char *id);
/* Keep it durably: copy a file body to DIR/<sha256> unless present, then
 * write MODEL/MATRIX's record; files no record names any more are removed
 * afterwards. On failure nothing on disk changed: ES_E_STORAGE naming
 * "uploads.dir" when the disk or quota is full, else ES_E_IO (messages
 * without paths; those go to the log). */
int es_persist_put(es_app *app, const es_persist_item *it, es_err *err);
/* Remove MODEL/MATRIX's record durably (then unused files); fails like
 * es_persist_put. */
int es_persist_delete(es_app *app, const char *model, const char *matrix, es_err *err);
/* Keep the labels of user matrix MODEL/MATRIX durably (NULL: remove them):
 * DIR/<sha256> holds them as JSON (es_labels_text, untyped), the matrix's
 * record names it as "labels"; unused files are removed afterwards. Fails
 * like es_persist_put; ES_E_IO when the matrix has no record. */
int es_persist_labels(es_app *app, const char *model, const char *matrix, const es_labels *labels, es_err *err);
/* At start, with uploads.dir set: create the directory if needed, turn a
 * legacy manifest.json into records, remove stale temporary and unused files
 * and rebuild every user matrix of the records (files by the loaders, entries
 * by the configuration's parser), publishing them. A record that cannot be
 * rebuilt, or whose model the configuration now defines, is skipped with a
 * warning. ES_E_IO naming "uploads.dir" if the directory cannot be created or
 * locked or a legacy manifest is not JSON. */
int es_persist_restore(es_app *app, es_err *err);
/* Rebuild the matrix of one record's text (len bytes) against cat, its files
 * in dir: what a restart does with each record. ES_E_FORMAT naming
 * "uploads.dir" for text that is not a well-formed record (a "file" must be a
 * content-addressed name), else the loaders' and parser's errors. */
int es_persist_rebuild_text(const es_registry *cat, const char *dir, const char *text, size_t len, es_matrix **m,
                            es_err *err);
/* If another daemon changed the directory (its generation differs from the
 * one last seen), rebuild what changed and publish. Called from the main
 * loop; takes the write lock and a shared flock. Never fails (logs). */
void es_persist_poll(es_app *app);

/* ================================================================ jobs.c */

/* A computing request's record: its progress from the start, a job (GET
 * /v1/jobs/{id}) once registered. Reference counted; the functions never fail
 * unless said. */
typedef enum es_job_state {
    ES_JOB_QUEUED, ES_JOB_RUNNING, ES_JOB_DONE, ES_JOB_FAILED, ES_JOB_CANCELLED, ES_JOB_STATES
} es_job_state;
/* The member of GET /v1/jobs listing the jobs (es_jobs_json). */
#define ES_JOBS_LISTING "requests"
typedef struct es_ajob es_ajob;
typedef struct es_jobs es_jobs;

/* A job id: 128 random bits (OpenSSL's RAND_bytes) in lowercase hex. */
#define ES_JOB_ID_LEN 32
/* Who owns a job: the client (its address, or a trusted proxy's forwarded
 * one) and, when the request carried "Authorization: Bearer TOKEN", a digest
 * of the token ("ADDRESS+HEX"; the token itself is not kept). Whether the
 * token is right is not asked: it only tells its holders apart, never
 * grants more than the address alone would. */
#define ES_OWNER_MAX (ES_CLIENT_MAX + 34)
void es_job_owner(const char *client, const char *authorization, char out[ES_OWNER_MAX]);

/* The registry. Replies of finished jobs are kept in memory up to budget
 * bytes (limits.max_job_bytes; each lookup takes the current limit), beyond
 * it in cache_dir/jobs (made if missing; NULL or unusable: dropped, their
 * result URLs compute again). */
es_jobs *es_jobs_new(const char *cache_dir, size_t budget);
/* Free it with its records. With a cache_dir, a job that never finished is
 * recorded as failed (interrupted), and finished jobs' records and reply
 * files stay for the other replicas and a restart until they expire; without,
 * nothing is left. NULL: nothing. */
void es_jobs_free(es_jobs *j);
typedef struct es_jobs_stats {
    size_t budget;             /* limits.max_job_bytes */
    size_t memory_bytes;       /* replies kept in memory (body and gzip) */
    size_t disk_bytes;         /* replies in cache_dir/jobs (every finished job's: the other replicas read them) */
    unsigned long spilled;     /* replies written to disk because the budget was full */
    unsigned long dropped;     /* replies let go (no cache_dir, or its write failed) */
    unsigned long disk_reads;  /* results served from those files */
} es_jobs_stats;
void es_jobs_get_stats(es_jobs *j, es_jobs_stats *out);
/* An unregistered record of the request for the reply `key` (the response
 * cache's), its result URL (path?query), client (whose cap it counts
 * toward), owner (es_job_owner; NULL: the client) and prediction (its seconds,
 * and each progress loop's share of them, the weights of its overall
 * fraction); one reference. */
es_ajob *es_ajob_new(const char *key, const char *url, const char *client, const char *owner, const es_cost *cost);
es_ajob *es_ajob_retain(es_ajob *a);
void es_ajob_release(es_ajob *a);    /* NULL is ignored */
/* Register a as a job with a fresh id (expired jobs are dropped first).
 * ES_E_LIMIT "max_jobs_per_client" when its client has that many queued or
 * running already (finished and cancelled ones do not count); then *retry_s
 * (when not NULL) is the whole seconds until the first of them is predicted
 * to finish, at least 1. ES_E_NOMEM when no random id could be drawn. */
int es_jobs_add(es_jobs *j, es_ajob *a, const es_limits *lim, unsigned *retry_s, es_err *err);
/* The registered job of that id and owner / the live one (queued, running or
 * done) of that key and owner (NULL: anyone's), retained; NULL if none
 * (expired ones are dropped first). */
es_ajob *es_jobs_get(es_jobs *j, const es_limits *lim, const char *id, const char *owner);
es_ajob *es_jobs_find(es_jobs *j, const es_limits *lim, const char *key, const char *owner);
/* Unregister a finished (done, failed, cancelled) job: true; false when it
 * is still queued or running, or not registered. */
bool es_jobs_forget(es_jobs *j, es_ajob *a);
/* The reply of a done job of that key copied into out (shared bytes): true. */
bool es_jobs_reply(es_jobs *j, const es_limits *lim, const char *key, es_reply *out);
const char *es_ajob_id(const es_ajob *a);
const char *es_ajob_url(const es_ajob *a); /* path?query of its result */
es_progress *es_ajob_progress(es_ajob *a);
es_job_state es_ajob_state(es_ajob *a);
bool es_ajob_cancelled(es_ajob *a);
/* Running from now on. */
void es_ajob_start(es_ajob *a);
/* Finished with rep (its bodies become shared bytes, which a keeps a reference
 * to): done for a 200, failed otherwise; a cancelled job stays cancelled. */
void es_ajob_finish(es_ajob *a, es_reply *rep);
/* Cancel a queued or running job (its computation stops at its next block): true; false if finished. */
bool es_ajob_cancel(es_ajob *a);
/* The job document: the members of jobs.c's field table present in a's state
 * (id, state, url, progress, ...; result when done, error when failed). */
json_t *es_ajob_json(es_ajob *a, const es_limits *lim);
/* The job document's description from the same table (--dump-api "job"):
 * {states, finished, listing, fields: [{name, type, nullable, states,
 * description, enum?, schema?, members?}]}. */
json_t *es_job_describe(void);
/* The es_ajob_json of every registered job of that owner, newest first,
 * then its jobs in cache_dir/jobs that this daemon does not hold (another
 * replica's, or from before a restart). */
json_t *es_jobs_json(es_jobs *j, const es_limits *lim, const char *owner);
/* A job of that id and owner that this daemon does not hold, from its record
 * in cache_dir/jobs (another replica's, or from before a restart): its
 * document ("failed" when the daemon computing it has stopped), and *url its
 * result URL when it is done (caller frees; NULL otherwise). NULL if none. */
json_t *es_jobs_remote(es_jobs *j, const es_limits *lim, const char *id, const char *owner, char **url);
/* DELETE of such a job: forgotten when finished, cancelled by the daemon
 * computing it when queued or running (a file it looks for): true; false if none. */
bool es_jobs_remote_cancel(es_jobs *j, const es_limits *lim, const char *id, const char *owner);
/* Registered jobs queued or running (the shutdown's grace period waits for them). */
size_t es_jobs_live(es_jobs *j);


#endif
