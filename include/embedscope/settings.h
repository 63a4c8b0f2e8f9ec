/* embedscope settings: the "server", "limits" and "uploads" sections of the
 * configuration and its warm list, as loaded (config.h parses them, a
 * catalogue holds them: catalogue.h). Ownership and failure rules: see core.h.
 *
 * Each settings struct is generated from one field list (an X-macro), and so
 * are its deep copy, its release and the reload's comparison (which settings a
 * reload changed, and whether the running daemon applies each): a member added
 * to a list is copied, freed and compared without another edit. The parser
 * (config.c) reads each key with its own default and range. */
#ifndef EMBEDSCOPE_SETTINGS_H
#define EMBEDSCOPE_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "embedscope/core.h"
#include "embedscope/linalg.h"

/* How a member is stored: X(KIND, ...) declares ES_FIELD_TYPE_##KIND member. */
#define ES_FIELD_TYPE_INT int
#define ES_FIELD_TYPE_UNSIGNED unsigned
#define ES_FIELD_TYPE_SIZE size_t
#define ES_FIELD_TYPE_DOUBLE double
#define ES_FIELD_TYPE_STRING char *   /* owned; NULL allowed */
#define ES_FIELD_TYPE_STRINGS char ** /* owned, NULL-terminated; NULL allowed */

/* What a reload does with a changed setting: the running daemon applies it
 * (LIVE: read from the request's catalogue; ADMISSION: also handed to the
 * connection admission), or keeps the value it started with (RESTART). */
typedef enum es_reload_effect { ES_RELOAD_RESTART, ES_RELOAD_LIVE, ES_RELOAD_ADMISSION } es_reload_effect;

/* server.listen when the configuration names none (and where --probe looks). */
#define ES_LISTEN_DEFAULT "127.0.0.1:8080"

/* X(KIND, member, "key in its section", RELOAD effect), one per member. Two
 * members may share a key ("listen" is host and port). */
#define ES_SERVER_FIELDS(X)                                                                                          \
    X(STRING, host, "listen", RESTART)    /* "127.0.0.1" */                                                          \
    X(UNSIGNED, port, "listen", RESTART)  /* 8080 */                                                                 \
    /* HTTP worker threads (MHD thread pool); 0: not set, the daemon takes min(2, the cores it may use) */           \
    X(UNSIGNED, threads, "threads", RESTART)                                                                         \
    /* OpenBLAS threads per computation; 0: "auto", the cores shared among the computations running at once */       \
    X(UNSIGNED, blas_threads, "blas_threads", RESTART)                                                               \
    /* compute threads kept for light requests (limits.light_seconds); at most the compute threads - 1 */            \
    X(UNSIGNED, light_threads, "light_threads", RESTART)                                                             \
    X(UNSIGNED, connection_timeout_s, "connection_timeout_s", LIVE)                                                  \
    X(UNSIGNED, connection_limit, "connection_limit", ADMISSION)                                                     \
    /* connections from one client address (trusted proxies exempt) */                                               \
    X(UNSIGNED, per_address_limit, "per_address_limit", ADMISSION)                                                   \
    /* a started request head must be complete within it (0: off) */                                                 \
    X(UNSIGNED, header_timeout_s, "header_timeout_s", ADMISSION)                                                     \
    /* a request body may arrive at any rate for this long (0: no floor) */                                          \
    X(UNSIGNED, body_grace_s, "body_grace_s", LIVE)                                                                  \
    X(UNSIGNED, body_min_rate, "body_min_rate", LIVE) /* then it must have averaged at least this many bytes/s */    \
    /* SIGTERM: time for running requests before they are abandoned */                                               \
    X(UNSIGNED, shutdown_grace_s, "shutdown_grace_s", LIVE)                                                          \
    X(SIZE, cache_bytes, "cache_mb", RESTART) /* decomposition cache budget */                                       \
    X(STRING, cache_dir, "cache_dir", RESTART) /* decompositions kept on disk here (resolved path), NULL: none */    \
    X(STRINGS, cors_origins, "cors_origins", LIVE) /* "*" allows any origin */                                       \
    /* IP addresses whose X-Forwarded-For is believed */                                                             \
    X(STRINGS, trusted_proxies, "trusted_proxies", ADMISSION)

/* Every limit is read from the request's catalogue: a reload applies it. */
#define ES_LIMITS_FIELDS(X)                                                                                          \
    X(SIZE, max_k, "max_k", LIVE)       /* k of pca / vectors / capture */                                           \
    X(SIZE, max_bins, "max_bins", LIVE) /* bins of binned grids */                                                   \
    X(SIZE, max_cells, "max_cells", LIVE) /* cells of an unbinned (bins=0) grid: rows x columns */                   \
    /* selected rows of one request; 0 (default): any number up to the matrix's */                                   \
    X(SIZE, max_rows, "max_rows", LIVE)                                                                              \
    X(SIZE, max_response_bytes, "max_response_bytes", LIVE)                                                          \
    X(SIZE, max_exclude, "max_exclude", LIVE) /* entries of an exclude list */                                       \
    /* rows x cols of one generated matrix (config load time; also bounds the Gaussian's cost) */                    \
    X(SIZE, max_generated_elements, "max_generated_elements", LIVE)                                                  \
    /* predicted peak bytes of one computing request; 0 (default): half of the physical memory (set by the           \
       daemon at start) */                                                                                           \
    X(SIZE, max_request_memory, "max_request_memory", LIVE)                                                          \
    /* a request predicted (or running) longer than this becomes a job */                                            \
    X(DOUBLE, sync_seconds, "sync_seconds", LIVE)                                                                    \
    /* a request predicted to compute within this is light: it may run on the threads kept for light work */          \
    X(DOUBLE, light_seconds, "light_seconds", LIVE)                                                                  \
    /* a synchronous computing request is answered 504 after it (0: none) */                                         \
    X(UNSIGNED, request_timeout_s, "request_timeout_s", LIVE)                                                        \
    /* the longest a client's Prefer: wait=N may extend that deadline (never below request_timeout_s) */             \
    X(UNSIGNED, max_wait_s, "max_wait_s", LIVE)                                                                      \
    X(UNSIGNED, job_ttl_s, "job_ttl_s", LIVE) /* a finished job (and its reply) is kept this long */                 \
    /* queued or running jobs one client may have */                                                                 \
    X(UNSIGNED, max_jobs_per_client, "max_jobs_per_client", LIVE)                                                    \
    /* bytes of the replies finished jobs keep in memory, all together (beyond: cache_dir, or computed again) */     \
    X(SIZE, max_job_bytes, "max_job_bytes", LIVE)

/* Matrices uploaded at run time (PUT /v1/models/{model}/matrices/{matrix}).
 * A reload's report (es_setting_changes) covers "server" and "limits" only. */
#define ES_UPLOADS_FIELDS(X)                                                                                         \
    /* 1 or 0 as configured; -1 when absent: on exactly when the daemon listens on a loopback address */             \
    X(INT, enabled, "enabled", NOT_REPORTED)                                                                         \
    /* bearer token writes need; "" = none configured (the daemon then takes $EMBEDSCOPE_UPLOAD_TOKEN) */            \
    X(STRING, token, "token", NOT_REPORTED)                                                                          \
    X(STRING, tmp_dir, "tmp_dir", NOT_REPORTED) /* where bodies are streamed; "" = $TMPDIR, else /tmp */             \
    X(STRING, dir, "dir", NOT_REPORTED) /* persistence: records and content-addressed files; "" = none */            \
    X(SIZE, max_body_bytes, "max_body_bytes", NOT_REPORTED) /* one request body (default 4 GiB) */                   \
    X(SIZE, max_total_bytes, "max_total_bytes", NOT_REPORTED) /* storage held by all user matrices (default 4 GiB) */ \
    X(SIZE, max_matrices, "max_matrices", NOT_REPORTED) /* number of user matrices (default 1024) */                 \
    /* upload bodies being received, all together, in tmp_dir (default 4 GiB) */                                     \
    X(SIZE, max_pending_bytes, "max_pending_bytes", NOT_REPORTED)                                                    \
    /* the labels of one matrix, as sent or as a configured file (default 64 MiB) */                                 \
    X(SIZE, max_labels_bytes, "max_labels_bytes", NOT_REPORTED)

#define ES_FIELD_MEMBER(kind, member, key, reload) ES_FIELD_TYPE_##kind member;

typedef struct es_server_conf {
    ES_SERVER_FIELDS(ES_FIELD_MEMBER)
} es_server_conf;

typedef struct es_limits {
    ES_LIMITS_FIELDS(ES_FIELD_MEMBER)
} es_limits;

typedef struct es_uploads_conf {
    ES_UPLOADS_FIELDS(ES_FIELD_MEMBER)
} es_uploads_conf;

/* A decomposition computed at start (the configuration's "warm" list). */
typedef struct es_warm {
    char *matrix;             /* "model/matrix" */
    char *rows;               /* slice text */
    es_centering centering;
} es_warm;

/* Seconds after its arrival a synchronous request is answered 504 (0: never):
 * limits.request_timeout_s, or the client's Prefer: wait=N (prefer_wait, < 0
 * when not given) when that is longer, at most limits.max_wait_s; a client
 * that said it would wait is not cut off before then (RFC 7240), within what
 * the operator allows. Never fails. */
double es_deadline_seconds(const es_limits *l, double prefer_wait);

/* Deep copies of src into dst (their own strings); release them with the
 * matching _free, which leaves the struct zeroed. None fails. */
void es_server_conf_copy(es_server_conf *dst, const es_server_conf *src);
void es_server_conf_free(es_server_conf *s);
void es_uploads_conf_copy(es_uploads_conf *dst, const es_uploads_conf *src);
void es_uploads_conf_free(es_uploads_conf *u);
/* The settings as loaded, generated from the field lists: {"server": {...},
 * "limits": {...}, "uploads": {...}}, each member under its own name (host and
 * port for server.listen, cache_bytes for server.cache_mb) with its stored
 * value (0 or -1 where the daemon decides at start: threads, blas_threads
 * "auto", uploads.enabled; null for a string not set). --dump-config prints
 * it; tests/http/test_docs_drift.py checks docs/configuration.md's defaults
 * against it. Never fails. */
json_t *es_settings_json(const es_server_conf *server, const es_limits *limits, const es_uploads_conf *uploads);

/* A copy of the n entries of w (its own strings; n 0 gives room for one), and
 * the release of one (NULL is a no-op). Neither fails. */
es_warm *es_warm_copy(const es_warm *w, size_t n);
void es_warm_free(es_warm *w, size_t n);

/* One setting of "server" or "limits" as a reload sees it: its key path
 * ("server.listen"), whether it changed between two loads, and what a reload
 * does with it. es_setting_changes lists every member of es_server_conf and
 * es_limits, in field-list order, into out (room for ES_SETTINGS_COUNT); two
 * entries share "server.listen". Never fails. */
typedef struct es_setting_change {
    const char *key;
    bool changed;
    es_reload_effect effect;
} es_setting_change;
#define ES_FIELD_COUNT(kind, member, key, reload) +1
enum { ES_SETTINGS_COUNT = 0 ES_SERVER_FIELDS(ES_FIELD_COUNT) ES_LIMITS_FIELDS(ES_FIELD_COUNT) };
void es_setting_changes(const es_server_conf *old_server, const es_limits *old_limits,
                        const es_server_conf *new_server, const es_limits *new_limits,
                        es_setting_change out[ES_SETTINGS_COUNT]);

#endif
