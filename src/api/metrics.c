/* Prometheus metrics (text exposition format 0.0.4): request counters by
 * status class, a request-duration histogram, response bytes, in-flight
 * requests, the decomposition and response caches' statistics, the compute
 * pool and readiness. */
#include "embedscope/analysis.h"
#include "embedscope/blas.h"
#include "embedscope/jobs.h"
#include "embedscope/metrics.h"
#include "embedscope/pool.h"
#include "embedscope/results.h"
#include "embedscope/version.h"

#include <dirent.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <stdatomic.h>
#include <pthread.h>

/* Upper bounds (seconds) of the duration histogram buckets, then one at
 * the longest deadline a request may have (limits.request_timeout_s, or a
 * Prefer: wait up to limits.max_wait_s) when that is longer than the last
 * (es_metrics.timeout_le). */
static const double bucket_le[ES_METRICS_BUCKETS - 1] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                          0.5,   1,      2.5,   5,    10,    30,   60};
#define FIXED_BUCKETS ((int)(sizeof bucket_le / sizeof *bucket_le))

static int n_buckets(const es_metrics *mx)
{
    return mx->timeout_le > bucket_le[FIXED_BUCKETS - 1] ? FIXED_BUCKETS + 1 : FIXED_BUCKETS;
}

static double bucket(const es_metrics *mx, int b)
{
    return b < FIXED_BUCKETS ? bucket_le[b] : mx->timeout_le;
}

/* Is this answer the readiness probe's "not yet" while warming? Those 503s are
 * the probe working, not a server error. */
static bool warming_probe(const char *route, unsigned status)
{
    return status == 503 && route && strcmp(route, "/readyz") == 0;
}

/* This thread's shard: threads take them in turn, once. */
static es_metrics_shard *my_shard(es_metrics *mx)
{
    static atomic_uint next;
    static _Thread_local unsigned mine = UINT_MAX;
    if (mine == UINT_MAX)
        mine = atomic_fetch_add(&next, 1) % ES_METRICS_SHARDS;
    return &mx->shard[mine];
}

/* Count one finished request. Never fails. */
void es_metrics_observe(es_metrics *mx, const char *route, unsigned status, double seconds, size_t bytes)
{
    es_metrics_shard *sh = my_shard(mx);
    unsigned cls = status / 100;
    if (cls >= 1 && cls <= 5 && !warming_probe(route, status))
        atomic_fetch_add_explicit(&sh->by_class[cls], 1, memory_order_relaxed);
    for (int b = 0; b < n_buckets(mx); b++)
        if (seconds <= bucket(mx, b))
            atomic_fetch_add_explicit(&sh->duration_le[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->duration_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->duration_us, (unsigned long)(seconds * 1e6), memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->response_bytes, bytes, memory_order_relaxed);
}

/* See metrics.h. */
void es_metrics_in_flight(es_metrics *mx, int delta)
{
    atomic_fetch_add(&my_shard(mx)->in_flight, delta);
}

/* See metrics.h. */
long es_metrics_in_flight_now(es_metrics *mx)
{
    long n = 0;
    for (int i = 0; i < ES_METRICS_SHARDS; i++)
        n += atomic_load(&mx->shard[i].in_flight);
    return n;
}

/* A counter summed over the shards: the atomic_ulong at `offset` in es_metrics_shard. */
static unsigned long sum_at(const es_metrics *mx, size_t offset)
{
    unsigned long sum = 0;
    for (int i = 0; i < ES_METRICS_SHARDS; i++)
        sum += atomic_load_explicit((const atomic_ulong *)((const char *)&mx->shard[i] + offset), memory_order_relaxed);
    return sum;
}
#define SUM(mx, field) sum_at((mx), offsetof(es_metrics_shard, field))

/* One metric family with a single unlabelled sample. */
static void family(es_buf *t, const char *name, const char *type, const char *help, double value)
{
    es_buf_printf(t, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, value);
}

/* The HTTP families: requests by status class, the duration histogram, bytes, in flight. */
static void request_metrics(es_buf *t, es_metrics *mx)
{
    es_buf_printf(t, "# HELP embedscope_http_requests_total HTTP requests answered, by status class.\n"
           "# TYPE embedscope_http_requests_total counter\n");
    for (unsigned c = 1; c <= 5; c++)
        es_buf_printf(t, "embedscope_http_requests_total{code=\"%uxx\"} %lu\n", c, SUM(mx, by_class[c]));
    es_buf_printf(t, "# HELP embedscope_http_request_duration_seconds Time from request start to response completion.\n"
           "# TYPE embedscope_http_request_duration_seconds histogram\n");
    for (int b = 0; b < n_buckets(mx); b++)
        es_buf_printf(t, "embedscope_http_request_duration_seconds_bucket{le=\"%g\"} %lu\n", bucket(mx, b),
            SUM(mx, duration_le[b]));
    unsigned long count = SUM(mx, duration_count);
    es_buf_printf(t, "embedscope_http_request_duration_seconds_bucket{le=\"+Inf\"} %lu\n", count);
    es_buf_printf(t, "embedscope_http_request_duration_seconds_sum %.6f\n", (double)SUM(mx, duration_us) / 1e6);
    es_buf_printf(t, "embedscope_http_request_duration_seconds_count %lu\n", count);
    family(t, "embedscope_http_response_bytes_total", "counter", "Response body bytes sent (after compression).",
           (double)SUM(mx, response_bytes));
    family(t, "embedscope_http_requests_in_flight", "gauge", "Requests being processed.",
           (double)es_metrics_in_flight_now(mx));
}

/* One (route, method, status) and its duration histogram. */
typedef struct es_route_series {
    const char *route;    /* a static route pattern, or "none" */
    const char *method;   /* static: GET, HEAD, OPTIONS, other */
    unsigned status;
    unsigned long count, le[ES_METRICS_BUCKETS];
    double seconds;
} es_route_series;

/* At most this many series (routes x methods x statuses seen); further ones
 * are counted under route "overflow". */
#define MAX_SERIES 1024

/* The label value of a method: one of four, so that clients cannot grow the exposition. */
static const char *method_label(const char *method)
{
    static const char *const known[] = {"GET", "HEAD", "OPTIONS"};
    for (int i = 0; i < 3; i++)
        if (strcmp(method, known[i]) == 0)
            return known[i];
    return "other";
}

/* The series of (route, method, status) among n, NULL if absent. */
static es_route_series *find_series(es_route_series *series, size_t n, const char *route, const char *method,
                                    unsigned status)
{
    for (size_t i = 0; i < n; i++)
        if (series[i].route == route && series[i].method == method && series[i].status == status)
            return &series[i];
    return NULL;
}

/* A new zeroed series of (route, method, status) at the end of *series (n of cap, grown). */
static es_route_series *add_series(es_route_series **series, size_t *n, size_t *cap, const char *route,
                                   const char *method, unsigned status)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 32;
        *series = es_realloc(*series, *cap * sizeof **series);
    }
    es_route_series *s = &(*series)[(*n)++];
    *s = (es_route_series){.route = route, .method = method, .status = status};
    return s;
}

/* See metrics.h. Never fails. */
void es_metrics_observe_route(es_metrics *mx, const char *route, const char *method, unsigned status,
                              double seconds)
{
    const char *m = method_label(method), *r = route ? route : "none";
    es_metrics_shard *sh = my_shard(mx);
    pthread_mutex_lock(&sh->series_lock); /* this thread's (and the scrape's): uncontended */
    es_route_series *s = find_series(sh->series, sh->n_series, r, m, status);
    if (!s && sh->n_series >= MAX_SERIES)
        s = find_series(sh->series, sh->n_series, r = "overflow", m, status);
    if (!s)
        s = add_series(&sh->series, &sh->n_series, &sh->cap_series, r, m, status);
    s->count++;
    s->seconds += seconds;
    for (int b = 0; b < n_buckets(mx); b++)
        s->le[b] += seconds <= bucket(mx, b);
    pthread_mutex_unlock(&sh->series_lock);
}

/* See metrics.h. Never fails. */
void es_metrics_free(es_metrics *mx)
{
    for (int i = 0; i < ES_METRICS_SHARDS; i++) {
        es_metrics_shard *sh = &mx->shard[i];
        pthread_mutex_lock(&sh->series_lock);
        free(sh->series);
        sh->series = NULL;
        sh->n_series = sh->cap_series = 0;
        pthread_mutex_unlock(&sh->series_lock);
    }
}

/* Every shard's series summed by (route, method, status), in order of first
 * appearance; *n of them, malloc'ed. Never fails. */
static es_route_series *merged_series(es_metrics *mx, size_t *n)
{
    es_route_series *all = NULL;
    size_t cap = 0;
    *n = 0;
    for (int i = 0; i < ES_METRICS_SHARDS; i++) {
        es_metrics_shard *sh = &mx->shard[i];
        pthread_mutex_lock(&sh->series_lock);
        for (size_t j = 0; j < sh->n_series; j++) {
            const es_route_series *s = &sh->series[j];
            es_route_series *m = find_series(all, *n, s->route, s->method, s->status);
            if (!m)
                m = add_series(&all, n, &cap, s->route, s->method, s->status);
            m->count += s->count;
            m->seconds += s->seconds;
            for (int b = 0; b < ES_METRICS_BUCKETS; b++)
                m->le[b] += s->le[b];
        }
        pthread_mutex_unlock(&sh->series_lock);
    }
    return all;
}

/* One (route, method) duration histogram, summed over the codes of its series. */
static void route_histogram(es_buf *t, const es_metrics *mx, const es_route_series *series, size_t n,
                            const char *route, const char *method)
{
    static const char name[] = "embedscope_http_route_request_duration_seconds";
    unsigned long le[ES_METRICS_BUCKETS] = {0}, count = 0;
    double sum = 0;
    for (size_t j = 0; j < n; j++)
        if (series[j].route == route && series[j].method == method) {
            for (int b = 0; b < ES_METRICS_BUCKETS; b++)
                le[b] += series[j].le[b];
            count += series[j].count;
            sum += series[j].seconds;
        }
    for (int b = 0; b < n_buckets(mx); b++)
        es_buf_printf(t, "%s_bucket{route=\"%s\",method=\"%s\",le=\"%g\"} %lu\n", name, route, method, bucket(mx, b),
                      le[b]);
    es_buf_printf(t, "%s_bucket{route=\"%s\",method=\"%s\",le=\"+Inf\"} %lu\n", name, route, method, count);
    es_buf_printf(t, "%s_sum{route=\"%s\",method=\"%s\"} %.6f\n", name, route, method, sum);
    es_buf_printf(t, "%s_count{route=\"%s\",method=\"%s\"} %lu\n", name, route, method, count);
}

/* The per-route families: a counter by route, method and code, and a duration
 * histogram by route and method. Route labels are the static patterns of the
 * routing table, so they need no escaping. */
static void route_metrics(es_buf *t, es_metrics *mx)
{
    size_t n;
    es_route_series *series = merged_series(mx, &n);
    es_buf_printf(t, "# HELP embedscope_http_route_requests_total HTTP requests answered, by route pattern, method "
                     "and status code.\n# TYPE embedscope_http_route_requests_total counter\n");
    for (size_t i = 0; i < n; i++) {
        const es_route_series *s = &series[i];
        es_buf_printf(t, "embedscope_http_route_requests_total{route=\"%s\",method=\"%s\",code=\"%u\"} %lu\n",
                      s->route, s->method, s->status, s->count);
    }
    es_buf_printf(t, "# HELP embedscope_http_route_request_duration_seconds Request durations by route pattern "
                     "and method.\n# TYPE embedscope_http_route_request_duration_seconds histogram\n");
    for (size_t i = 0; i < n; i++) {
        bool first = true; /* of its (route, method) */
        for (size_t j = 0; j < i && first; j++)
            first = !(series[j].route == series[i].route && series[j].method == series[i].method);
        if (first)
            route_histogram(t, mx, series, n, series[i].route, series[i].method);
    }
    free(series);
}

/* Connections admitted, refused and closed for a late request head. */
static void connection_metrics(es_buf *t, es_metrics *mx)
{
    family(t, "embedscope_connections_open", "gauge", "Client connections open.",
           (double)atomic_load(&mx->connections_open));
    family(t, "embedscope_connections_accepted_total", "counter", "Client connections admitted.",
           (double)atomic_load(&mx->connections_accepted));
    es_buf_printf(t, "# HELP embedscope_connections_refused_total Connections answered 503 at once, by the limit "
                     "they hit.\n# TYPE embedscope_connections_refused_total counter\n"
                     "embedscope_connections_refused_total{limit=\"connection_limit\"} %lu\n"
                     "embedscope_connections_refused_total{limit=\"per_address_limit\"} %lu\n",
                  atomic_load(&mx->connections_refused[0]), atomic_load(&mx->connections_refused[1]));
    family(t, "embedscope_connections_timed_out_total", "counter",
           "Connections closed because a request head was not complete within server.header_timeout_s, or "
           "a request body arrived slower than server.body_min_rate.",
           (double)atomic_load(&mx->connections_timed_out));
}

/* The OpenBLAS kernels in use (an info family, always 1) and the thread policy's state. */
static void blas_metrics(es_buf *t)
{
    const es_blas_info *bi = es_blas_info_get();
    es_blas_threads_state th;
    es_blas_threads_get(&th);
    es_buf_printf(t, "# HELP embedscope_blas_info The OpenBLAS build and kernels in use, the CPU's widest vector "
                     "instructions and the start-up self-test (always 1).\n"
                     "# TYPE embedscope_blas_info gauge\nembedscope_blas_info{version=\"%s\",core=\"%s\","
                     "library_core=\"%s\",kernels=\"%s\",coretype_source=\"%s\",cpu_isa=\"%s\",parallel=\"%s\","
                     "self_test=\"%s\"} 1\n",
                  bi->version, bi->core, bi->library_core, es_isa_name(bi->core_isa),
                  es_coretype_source_name(bi->source), es_isa_name(bi->cpu_isa), bi->parallel ? bi->parallel : "unknown",
                  bi->self_test_passed ? "passed" : "failed");
    family(t, "embedscope_blas_threads", "gauge", "OpenBLAS threads each running computation uses now.", th.current);
    family(t, "embedscope_blas_threads_budget", "gauge",
           "Cores shared among computations (blas_threads auto), or the threads of each (a number).", th.budget);
    family(t, "embedscope_blas_jobs", "gauge", "Computations running now (they share the BLAS threads).", th.jobs);
}

/* Seconds since the epoch at which this process started: its start in clock
 * ticks after boot (/proc/self/stat field 22) plus the boot time (/proc/stat
 * btime), as Prometheus' own clients compute it. -1 if either is unreadable. */
static double process_start_time(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    unsigned long long ticks = 0;
    int field = 2;
    for (; p && *p && field < 22; p++)
        field += *p == ' ';
    if (!p || field != 22 || sscanf(p, "%llu", &ticks) != 1)
        return -1;
    unsigned long long btime = 0;
    f = fopen("/proc/stat", "r");
    bool found = false;
    while (f && !found && fgets(buf, sizeof buf, f))
        found = sscanf(buf, "btime %llu", &btime) == 1;
    if (f)
        fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    return found && hz > 0 ? (double)btime + (double)ticks / (double)hz : -1;
}

/* The process: start time, resident memory, open descriptors and their limit,
 * CPU time (the standard process_* names). A value that cannot be read is left out. */
static void process_metrics(es_buf *t)
{
    double start = process_start_time();
    if (start >= 0)
        family(t, "process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch in seconds.",
               start);
    long pages_total, pages_resident;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages_total, &pages_resident) == 2) {
            double page = (double)sysconf(_SC_PAGESIZE);
            family(t, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                   (double)pages_resident * page);
            family(t, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
                   (double)pages_total * page);
        }
        fclose(f);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        size_t n = 0;
        for (struct dirent *e; (e = readdir(d));)
            n += e->d_name[0] != '.';
        closedir(d);
        family(t, "process_open_fds", "gauge", "Open file descriptors.", (double)(n ? n - 1 : 0)); /* not opendir's */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        family(t, "process_max_fds", "gauge", "The open-files limit.", (double)rl.rlim_cur);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        family(t, "process_cpu_seconds_total", "counter", "User and system CPU time in seconds.",
               (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                   (double)ru.ru_stime.tv_usec / 1e6);
}

/* The decomposition cache's families. */
static void cache_metrics(es_buf *t, es_cache *cache)
{
    es_cache_stats st;
    es_cache_get_stats(cache, &st);
    family(t, "embedscope_svd_cache_hits_total", "counter", "Decomposition requests served from the cache.",
           (double)st.hits);
    family(t, "embedscope_svd_cache_misses_total", "counter", "Decomposition requests not found in the cache.",
           (double)st.misses);
    family(t, "embedscope_svd_computations_total", "counter",
           "Decompositions computed to their end (single flight: once per key, across the processes sharing cache_dir; a cancelled or failed one is not counted).",
           (double)st.computations);
    family(t, "embedscope_svd_computations_failed_total", "counter",
           "Decompositions started and stopped short: an error, a cancellation or a deadline.", (double)st.failed);
    family(t, "embedscope_svd_cache_waits_total", "counter", "Requests that waited for another's computation.",
           (double)st.waits);
    family(t, "embedscope_svd_cache_evictions_total", "counter", "Decompositions evicted by the byte budget.",
           (double)st.evictions);
    family(t, "embedscope_svd_cache_parts_total", "counter",
           "Decompositions kept in parts: too large for the budget with their left vectors, kept without them "
           "(formed per request that needs them).", (double)st.parts);
    family(t, "embedscope_svd_cache_refused_total", "counter",
           "Decompositions too large for the budget even in parts: returned to their request, not kept.",
           (double)st.refused);
    family(t, "embedscope_svd_cache_bytes", "gauge", "Bytes held by cached decompositions.", (double)st.bytes);
    family(t, "embedscope_svd_cache_entries", "gauge", "Cached decompositions.", (double)st.entries);
    family(t, "embedscope_svd_cache_max_bytes", "gauge", "Configured cache budget in bytes.", (double)st.max_bytes);
    es_computing *computing;
    size_t running = es_cache_computing(cache, &computing);
    family(t, "embedscope_svd_jobs_running", "gauge", "Decompositions being computed now (GET /v1/jobs).",
           (double)running);
    family(t, "embedscope_svd_oldest_job_seconds", "gauge", "Seconds the oldest running decomposition has run.",
           running ? computing[0].elapsed : 0.0);
    es_computing_free(computing, running);
    family(t, "embedscope_svd_disk_loads_total", "counter", "Decompositions read from cache_dir instead of computed.",
           (double)st.disk_loads);
    family(t, "embedscope_svd_disk_waits_total", "counter",
           "Decompositions another process sharing cache_dir was computing: waited for, then read from its file.",
           (double)st.disk_waits);
    family(t, "embedscope_svd_disk_writes_total", "counter", "Decompositions written to cache_dir.",
           (double)st.disk_writes);
    family(t, "embedscope_svd_disk_rejected_total", "counter",
           "Corrupt, truncated or foreign cache_dir files deleted and recomputed.", (double)st.disk_rejected);
    es_buf_printf(t, "# HELP embedscope_svd_duration_seconds Time to compute one decomposition.\n"
                     "# TYPE embedscope_svd_duration_seconds histogram\n");
    for (int b = 0; b < ES_SVD_BUCKETS; b++)
        es_buf_printf(t, "embedscope_svd_duration_seconds_bucket{le=\"%g\"} %lu\n", es_svd_bucket_le[b], st.svd_le[b]);
    es_buf_printf(t, "embedscope_svd_duration_seconds_bucket{le=\"+Inf\"} %lu\n", st.computations);
    es_buf_printf(t, "embedscope_svd_duration_seconds_sum %.6f\nembedscope_svd_duration_seconds_count %lu\n",
                  st.svd_seconds, st.computations);
}

/* The per-selection derived data (row norms, means) kept by the analyses. */
static void derived_metrics(es_buf *t)
{
    es_derived_stats st;
    es_derived_get_stats(&st);
    family(t, "embedscope_derived_hits_total", "counter",
           "Requests that found a selection's derived data (mean row, centred row norms) kept.", (double)st.hits);
    family(t, "embedscope_derived_misses_total", "counter",
           "Requests that computed a selection's derived data.", (double)st.misses);
    family(t, "embedscope_derived_evictions_total", "counter", "Derived data evicted by its byte budget.",
           (double)st.evictions);
    family(t, "embedscope_derived_bytes", "gauge", "Bytes held by kept derived data.", (double)st.bytes);
    family(t, "embedscope_derived_max_bytes", "gauge", "Budget of the kept derived data in bytes.",
           (double)st.max_bytes);
}

/* The response cache's families. */
static void results_metrics(es_buf *t, es_results *results)
{
    es_results_stats st;
    es_results_get_stats(results, &st);
    family(t, "embedscope_response_cache_hits_total", "counter",
           "Replies served from the response cache (rendered bodies by canonical request).", (double)st.hits);
    family(t, "embedscope_response_cache_misses_total", "counter",
           "Replies the response cache lacked (single flight: once per key): computed, or rendered from the "
           "request's result kept for another representation (embedscope_response_cache_rendered_total).",
           (double)st.misses);
    family(t, "embedscope_response_cache_rendered_total", "counter",
           "Replies rendered from a result kept by the same request in another representation (CSV or NPY "
           "after JSON, another table), not computed again.", (double)st.rendered);
    family(t, "embedscope_response_cache_waits_total", "counter",
           "Requests that waited for another's computation of the same reply.", (double)st.waits);
    family(t, "embedscope_response_cache_evictions_total", "counter", "Replies evicted by the byte budget.",
           (double)st.evictions);
    family(t, "embedscope_response_cache_bytes", "gauge", "Bytes held by cached replies.", (double)st.bytes);
    family(t, "embedscope_response_cache_entries", "gauge", "Cached replies.", (double)st.entries);
    family(t, "embedscope_response_cache_max_bytes", "gauge", "Response cache budget in bytes.",
           (double)st.max_bytes);
}

/* The kept replies of finished jobs. */
static void jobs_metrics(es_buf *t, es_jobs *jobs)
{
    es_jobs_stats st;
    es_jobs_get_stats(jobs, &st);
    family(t, "embedscope_job_reply_bytes", "gauge",
           "Bytes of the replies finished jobs keep in memory (bounded by limits.max_job_bytes).",
           (double)st.memory_bytes);
    family(t, "embedscope_job_reply_max_bytes", "gauge", "limits.max_job_bytes.", (double)st.budget);
    family(t, "embedscope_job_reply_disk_bytes", "gauge",
           "Bytes of job replies in cache_dir/jobs (every finished job's, for the other replicas).", (double)st.disk_bytes);
    family(t, "embedscope_job_replies_spilled_total", "counter",
           "Job replies written to cache_dir/jobs because the memory budget was full.", (double)st.spilled);
    family(t, "embedscope_job_replies_dropped_total", "counter",
           "Job replies let go because the budget was full and no cache_dir took them (computed again on GET).",
           (double)st.dropped);
    family(t, "embedscope_job_reply_disk_reads_total", "counter", "Job results served from cache_dir/jobs.",
           (double)st.disk_reads);
}

/* The compute pool's families. */
static void pool_metrics(es_buf *t, es_pool *pool)
{
    es_pool_stats st;
    es_pool_get_stats(pool, &st);
    family(t, "embedscope_compute_threads", "gauge", "Compute threads (heavy work runs there, not in HTTP threads).",
           (double)st.threads);
    family(t, "embedscope_compute_jobs_running", "gauge", "Jobs being computed.", (double)st.running);
    family(t, "embedscope_compute_light_threads", "gauge",
           "Compute threads kept for light requests (predicted within limits.light_seconds).", (double)st.reserved);
    family(t, "embedscope_compute_light_jobs_running", "gauge", "Light request jobs being computed.",
           (double)st.light_running);
    family(t, "embedscope_compute_heavy_jobs_running", "gauge",
           "Heavy jobs (and background tasks) being computed; at most the compute threads less the light ones.",
           (double)st.heavy_running);
    family(t, "embedscope_compute_light_jobs_total", "counter", "Light request jobs run.",
           (double)st.light_completed);
    family(t, "embedscope_compute_queue_depth", "gauge", "Request jobs waiting for a compute thread.",
           (double)st.queued);
    family(t, "embedscope_compute_queue_limit", "gauge", "Request jobs that may wait; beyond it 503 with Retry-After.",
           (double)st.queue_max);
    family(t, "embedscope_compute_background_depth", "gauge", "Background tasks (warming) waiting.",
           (double)st.background);
    family(t, "embedscope_compute_jobs_total", "counter", "Jobs and background tasks run.", (double)st.completed);
    family(t, "embedscope_compute_rejected_total", "counter", "Request jobs refused because the queue was full.",
           (double)st.rejected);
}

/* The catalogue's families: matrices, user matrices and their storage, reloads. */
static void catalogue_metrics(es_buf *t, es_metrics *mx, const es_catalogue *reg)
{
    size_t n = 0, user = 0, user_bytes = 0;
    for (size_t i = 0; i < reg->n_models; i++)
        n += reg->models[i].n_matrices;
    es_catalogue_user_totals(reg, &user, &user_bytes);
    family(t, "embedscope_matrices", "gauge", "Matrices loaded (configured and uploaded).", (double)n);
    family(t, "embedscope_user_matrices", "gauge", "Matrices uploaded at run time (user models).", (double)user);
    family(t, "embedscope_user_matrix_bytes", "gauge", "Storage held by uploaded matrices.", (double)user_bytes);
    family(t, "embedscope_upload_pending_bytes", "gauge",
           "Bytes of upload bodies being received (bounded by uploads.max_pending_bytes).",
           (double)atomic_load(&mx->upload_pending_bytes));
    family(t, "embedscope_upload_dir_syncs_total", "counter",
           "Changes other daemons made to uploads.dir taken into this one's catalogue.",
           (double)atomic_load(&mx->store_syncs));
    family(t, "embedscope_config_reloads_total", "counter", "Configurations reloaded on SIGHUP.",
           (double)atomic_load(&mx->reloads));
    family(t, "embedscope_config_reload_failures_total", "counter",
           "SIGHUP reloads refused (invalid configuration; the previous one kept serving).",
           (double)atomic_load(&mx->reload_failures));
}

/* The whole exposition; caller frees. Never fails. */
char *es_metrics_text(es_metrics *mx, es_cache *cache, es_results *results, es_pool *pool, es_jobs *jobs,
                      bool ready, const es_catalogue *reg)
{
    es_buf t;
    es_buf_init(&t, 4096);
    t.s[0] = '\0';
    request_metrics(&t, mx);
    route_metrics(&t, mx);
    connection_metrics(&t, mx);
    cache_metrics(&t, cache);
    derived_metrics(&t);
    if (results)
        results_metrics(&t, results);
    if (pool)
        pool_metrics(&t, pool);
    if (jobs)
        jobs_metrics(&t, jobs);
    family(&t, "embedscope_ready", "gauge", "1 when the configured decompositions are warmed.", ready ? 1 : 0);
    catalogue_metrics(&t, mx, reg);
    process_metrics(&t);
    blas_metrics(&t);
    es_buf_printf(&t, "# HELP embedscope_build_info The running build: version and git commit (always 1).\n"
                      "# TYPE embedscope_build_info gauge\nembedscope_build_info{version=\"%s\",commit=\"%s\"} 1\n",
                  ES_VERSION, es_build_commit);
    return t.s;
}
