/* The runtime of the service (src/api), its application state: the catalogue
 * and its publication, the caches, the compute pool, warming, readiness,
 * reloads and the averaged copies of matrices.
 * Owner: src/api/app.c (the persistence fields: src/api/persist.c).
 * Ownership and failure rules: see core.h. */
#ifndef ES_APP_H
#define ES_APP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "embedscope/catalogue.h"
#include "embedscope/core.h"
#include "embedscope/linalg.h"
#include "embedscope/metrics.h"
#include "embedscope/params.h"
#include "embedscope/pool.h"
#include "embedscope/results.h"
#include "embedscope/settings.h"
#include "embedscope/store.h"

/* ================================================================ app.c: derived matrices */

/* At most this many averaged copies (matrix, g, rows) are kept (least recently used
 * evicted; a copy in use stays alive through its reference). */
#define ES_DERIVED_MAX 8

typedef struct es_derived {
    char *key;            /* source id, sha256, view, g, rows averaged */
    es_matrix *m;
} es_derived;

typedef struct es_warm_plan {
    es_matrix *m;              /* retained: a reload may drop it from the catalogue */
    size_t *idx;
    size_t n;
    es_centering center;
    atomic_bool warmed;        /* decomposed by warming: the model's "ready" stays true when the
                                * cache later evicts it (a request then recomputes or reads it back) */
} es_warm_plan;

/* The response cache gets this fraction (1/N) of server.cache_bytes, on top
 * of the decomposition cache's budget. */
#define ES_RESULTS_BUDGET_DIVISOR 8
/* Request tasks that may wait for a compute thread (--queue-limit). */
#define ES_QUEUE_LIMIT_DEFAULT 64

typedef struct es_prerendered es_prerendered;
typedef struct es_catalogue_hold es_catalogue_hold;
typedef struct es_hold_slot es_hold_slot;

typedef struct es_app {
    es_catalogue *reg;          /* the catalogue: read it with es_app_catalogue */
    pthread_mutex_t reg_lock;  /* guards the reg pointer (held for a swap or a retain) and slots */
    atomic_ulong reg_serial;   /* reg->serial, read without the lock (es_app_hold) */
    unsigned long id;          /* unique in the process: a thread's hold slot names its app */
    es_hold_slot *slots;       /* each thread's hold on the catalogue (es_app_hold) */
    size_t n_slots;
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
    es_server_conf server;     /* the catalogue's settings at start with command-line overrides (a copy the
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
 * a bad selection; the catalogue is freed then too. */
int es_app_init(es_app *app, es_catalogue *reg, es_err *err);
/* Start the compute pool (threads, queue_max waiting request tasks). Fails like
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
 * with es_catalogue_free. Never fails. */
es_catalogue *es_app_catalogue(es_app *app);
/* The current catalogue for a request on this thread, without the lock or a
 * count another thread writes: each thread keeps one hold on the catalogue (one
 * reference), validated against app->reg_serial on every call and replaced
 * when a catalogue was published since; the request counts on the hold (a
 * cache line its thread alone writes but for the release of a request that
 * ended elsewhere). es_app_publish takes every thread's hold away (so an idle
 * thread keeps no replaced catalogue, nor its matrices); the catalogue lives
 * until the last request holding it ends. es_catalogue_of reads it; release
 * with es_catalogue_hold_release (NULL is a no-op). Never fails. */
es_catalogue_hold *es_app_hold(es_app *app);
es_catalogue *es_catalogue_of(const es_catalogue_hold *h);
void es_catalogue_hold_release(es_catalogue_hold *h);
/* Make next (its reference is taken over) the catalogue; requests holding the
 * previous one finish on it. Call with write_lock held. Never fails. */
void es_app_publish(es_app *app, es_catalogue *next);
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
 * the app's small LRU of averaged copies; *out is retained (release it). Thread-safe.
 * ES_E_PARAM naming `param` unless 1 <= g <= the rows averaged. */
int es_app_averaged(es_app *app, const es_matrix *m, const es_selection *sel, size_t g, const char *param,
                    es_matrix **out, es_err *err);
/* The copy es_app_averaged would give if it is already built (retained), else
 * NULL: nothing is built. Thread-safe. */
es_matrix *es_app_averaged_peek(es_app *app, const es_matrix *m, const es_selection *sel, size_t g);

#endif
