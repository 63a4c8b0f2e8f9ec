/* Application state shared by the HTTP worker threads: the registry, the
 * decomposition cache, the warm list and readiness. Warming runs in a
 * background thread so /healthz answers at once and /readyz says 503 until
 * every configured decomposition is cached. */
#include "http/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Resolve warm entry i into a plan. Fails with ES_E_CONFIG naming "warm[i]"
 * and the cause when the matrix is unknown or the rows select nothing. */
static int resolve_plan(const es_registry *reg, size_t i, es_warm_plan *plan, es_err *err)
{
    const es_warm *w = &reg->warm[i];
    char key[32];
    snprintf(key, sizeof key, "warm[%zu]", i);
    es_rowsel sel = {.exclude = NULL, .n_exclude = 0};
    es_err cause;
    if (es_registry_lookup(reg, w->matrix, "matrix", &plan->m, &cause) < 0 ||
        es_slice_parse(w->rows ? w->rows : "", "rows", &sel.slice, &cause) < 0 ||
        es_rowsel_resolve(&sel, es_matrix_items(plan->m), &plan->idx, &plan->n, &cause) < 0)
        return es_fail(err, ES_E_CONFIG, key, "%s: %s", key, cause.message);
    plan->center = w->centering;
    return 0;
}

/* See http.h. On failure everything, the registry included, is released. */
int es_app_init(es_app *app, es_registry *reg, es_err *err)
{
    memset(app, 0, sizeof *app);
    app->reg = reg;
    app->limits = reg->limits;
    app->server = reg->server;
    for (size_t i = 0; i < reg->n_models; i++)
        app->n_matrices += reg->models[i].n_matrices;
    app->plans = es_calloc(reg->n_warm, sizeof *app->plans);
    for (size_t i = 0; i < reg->n_warm; i++, app->n_plans++)
        if (resolve_plan(reg, i, &app->plans[i], err) < 0) {
            es_app_free(app);
            return -1;
        }
    app->cache = es_cache_new(reg->server.cache_bytes);
    pthread_mutex_init(&app->derived_lock, NULL);
    return 0;
}

/* Move entry i of the derived registry to the front (most recently used). */
static void derived_touch(es_app *app, size_t i)
{
    es_derived hit = app->derived[i];
    memmove(app->derived + 1, app->derived, i * sizeof *app->derived);
    app->derived[0] = hit;
}

/* See http.h. Averaging is O(items x d) (milliseconds), so it runs under the
 * lock: concurrent requests for the same copy build it once. */
int es_app_averaged(es_app *app, const es_matrix *m, size_t g, const char *param, es_matrix **out,
                    es_err *err)
{
    int rc = 0;
    pthread_mutex_lock(&app->derived_lock);
    size_t i = 0;
    while (i < app->n_derived && !(app->derived[i].source == m && app->derived[i].g == g))
        i++;
    if (i == app->n_derived) {
        es_matrix *avg;
        if (es_matrix_average_rows(m, NULL, g, &avg, err) < 0) {
            if (err)
                snprintf(err->param, sizeof err->param, "%s", param);
            rc = -1;
            goto done;
        }
        if (app->n_derived == ES_DERIVED_MAX)
            es_matrix_release(app->derived[--app->n_derived].m);
        i = app->n_derived++;
        app->derived[i] = (es_derived){m, g, avg};
    }
    derived_touch(app, i);
    *out = es_matrix_retain(app->derived[0].m);
done:
    pthread_mutex_unlock(&app->derived_lock);
    return rc;
}

typedef struct warm_args {
    es_app *app;
    void (*on_failure)(void);
} warm_args;

/* Thread body: decompose each plan through the cache, log it, then turn ready. */
static void *warm_main(void *arg)
{
    warm_args *wa = arg;
    es_app *app = wa->app;
    double t0 = es_now();
    for (size_t i = 0; i < app->n_plans && !atomic_load(&app->stopping); i++) {
        const es_warm_plan *p = &app->plans[i];
        es_svd *svd;
        es_err err;
        if (es_cache_svd(app->cache, p->m, p->idx, p->n, p->center, &svd, &err) < 0) {
            es_error("warming %s (center=%s) failed: %s", p->m->id, es_centering_name(p->center), err.message);
            atomic_store(&app->warm_failed, true);
            wa->on_failure();
            free(wa);
            return NULL;
        }
        es_info("warmed %s solver=%s seconds=%.3f recon_error=%.2e", svd->key, svd->solver, svd->seconds,
                svd->recon_error);
        es_svd_release(svd);
    }
    if (!atomic_load(&app->stopping)) {
        atomic_store(&app->ready, true);
        es_info("ready (%zu decompositions warmed in %.3f s)", app->n_plans, es_now() - t0);
    }
    free(wa);
    return NULL;
}

/* Start the warm thread; if it cannot be created, warm inline (still correct). */
void es_app_start_warming(es_app *app, void (*on_failure)(void))
{
    warm_args *wa = es_malloc(sizeof *wa);
    *wa = (warm_args){app, on_failure};
    if (pthread_create(&app->warm_thread, NULL, warm_main, wa) == 0) {
        app->warm_started = true;
        return;
    }
    es_warn("cannot start the warm thread; warming before serving");
    warm_main(wa);
}

void es_app_stop_warming(es_app *app)
{
    atomic_store(&app->stopping, true);
    if (app->warm_started)
        pthread_join(app->warm_thread, NULL);
    app->warm_started = false;
}

/* Release everything the app owns (joins the warm thread first). */
void es_app_free(es_app *app)
{
    es_app_stop_warming(app);
    for (size_t i = 0; i < app->n_plans; i++)
        free(app->plans[i].idx);
    free(app->plans);
    if (app->cache) {
        es_cache_free(app->cache);
        pthread_mutex_destroy(&app->derived_lock);
    }
    for (size_t i = 0; i < app->n_derived; i++)
        es_matrix_release(app->derived[i].m);
    es_registry_free(app->reg);
    memset(app, 0, sizeof *app);
}
