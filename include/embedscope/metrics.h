/* The runtime of the service (src/api), its metrics: the request counters and
 * their Prometheus text exposition.
 * Owner: src/api/metrics.c. Ownership and failure rules: see core.h. */
#ifndef ES_METRICS_H
#define ES_METRICS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "embedscope/catalogue.h"
#include "embedscope/linalg.h"
#include "embedscope/pool.h"
#include "embedscope/results.h"

#define ES_METRICS_BUCKETS 16 /* 15 fixed bounds up to 60 s, and the longest deadline beyond */
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
    double timeout_le;                        /* the longest deadline: the last bound when > 60 s */
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
                      bool ready, const es_catalogue *reg);

#endif
