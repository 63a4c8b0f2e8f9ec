/* What a warm reply's shared state costs per request by thread count, without HTTP: T threads each
 * taking the same cached reply and the catalogue N times, by the locked paths (es_results_join's hit:
 * the cache's mutex, its LRU move and hit count, the bytes' shared count; es_app_catalogue: the
 * catalogue's mutex and count) and by the per-thread ones a repeated request takes now
 * (es_results_peek from the thread's handle, es_app_hold), interleaved in rounds; CPU ns per
 * operation (the process's CPU time, getrusage, over operations), medians. Usage:
 * bench_hits [ROUNDS [OPS_PER_THREAD [THREADS...]]] (defaults 5, 200000, 1 2). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "embedscope/app.h"
#include "embedscope/config.h"
#include "embedscope/results.h"

static es_app app;
static char key[65];
static long ops;

enum { LOCKED_REPLY, HANDLE_REPLY, LOCKED_CATALOGUE, HOLD_CATALOGUE, N_PATHS };
static const char *const names[N_PATHS] = {"reply, locked (join)", "reply, thread's handle (peek)",
                                           "catalogue, locked (es_app_catalogue)", "catalogue, thread's hold"};

static void *worker(void *arg)
{
    int path = *(const int *)arg;
    for (long i = 0; i < ops; i++) {
        es_reply r = {0};
        es_result *claim, *pending;
        switch (path) {
        case LOCKED_REPLY:
            es_results_join(app.results, key, &r, &claim, &pending);
            es_reply_release(&r);
            break;
        case HANDLE_REPLY:
            es_results_peek(app.results, key, &r);
            es_reply_release(&r);
            break;
        case LOCKED_CATALOGUE:
            es_catalogue_free(es_app_catalogue(&app));
            break;
        default:
            es_catalogue_hold_release(es_app_hold(&app));
        }
    }
    return NULL;
}

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec + 1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/* CPU ns per operation of path on t threads. */
static double run(int path, int t)
{
    pthread_t th[64];
    double c0 = cpu_seconds();
    for (int i = 0; i < t; i++)
        pthread_create(&th[i], NULL, worker, &path);
    for (int i = 0; i < t; i++)
        pthread_join(th[i], NULL);
    return (cpu_seconds() - c0) * 1e9 / (double)(ops * t);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    ops = argc > 2 ? atol(argv[2]) : 200000;
    int threads[16] = {1, 2}, n_threads = 2;
    if (argc > 3)
        for (n_threads = 0; n_threads < 16 && 3 + n_threads < argc; n_threads++)
            threads[n_threads] = atoi(argv[3 + n_threads]);
    es_catalogue *reg;
    es_err err;
    const char *config = "{\"models\": {\"m\": {\"matrices\": {\"x\": {\"generator\": \"rope\", \"n_positions\": 16, "
                         "\"d_model\": 8}}}}}";
    if (es_config_load_text(config, "bench", ".", &reg, &err) < 0 || es_app_init(&app, reg, &err) < 0) {
        fprintf(stderr, "bench_hits: %s\n", err.message);
        return 1;
    }
    es_sha256_hex("bench", 5, key);
    es_result *claim;
    es_reply r = {0};
    es_results_claim(app.results, key, &r, &claim);
    es_reply body = {.status = 200, .content_type = "application/json", .len = 86000};
    body.body = es_malloc(body.len);
    memset(body.body, 'x', body.len);
    es_results_settle(app.results, claim, &body, NULL);
    es_reply_release(&body);
    double *v = es_calloc((size_t)(N_PATHS * n_threads * rounds), sizeof *v); /* [round][path][threads] */
    for (int k = 0; k < rounds; k++)
        for (int p = 0; p < N_PATHS; p++)
            for (int t = 0; t < n_threads; t++)
                v[(k * N_PATHS + p) * n_threads + t] = run(p, threads[t]);
    printf("| path | threads | CPU ns / operation (median of %d interleaved rounds) | each round |\n|---|---|---|---|\n",
           rounds);
    double *sorted = es_calloc((size_t)rounds, sizeof *sorted);
    for (int p = 0; p < N_PATHS; p++)
        for (int t = 0; t < n_threads; t++) {
            for (int k = 0; k < rounds; k++)
                sorted[k] = v[(k * N_PATHS + p) * n_threads + t];
            printf("| %s | %d |", names[p], threads[t]);
            char each[512] = "";
            for (int k = 0; k < rounds && strlen(each) < sizeof each - 16; k++)
                snprintf(each + strlen(each), sizeof each - strlen(each), " %.0f", sorted[k]);
            qsort(sorted, (size_t)rounds, sizeof *sorted, cmp);
            printf(" %.0f |%s |\n", sorted[rounds / 2], each);
        }
    free(sorted);
    free(v);
    es_app_free(&app);
    return 0;
}
