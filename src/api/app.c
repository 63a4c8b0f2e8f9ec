/* Application state shared by the HTTP and compute threads: the catalogue, the
 * decomposition and response caches, the compute pool, the warm list and
 * readiness. Warming runs as background tasks of the compute pool (after any
 * waiting request task), so /healthz answers at once and /readyz says 503 until
 * every configured decomposition is cached. */
#include "embedscope/blas.h"
#include "embedscope/config.h"
#include "embedscope/rowsel.h"
#include "embedscope/app.h"
#include "embedscope/jobs.h"
#include "embedscope/metrics.h"
#include "embedscope/params.h"
#include "embedscope/pool.h"
#include "embedscope/results.h"
#include "embedscope/route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdatomic.h>
#include <pthread.h>

/* Readiness, logged once with the warming time. */
static void set_ready(es_app *app)
{
    atomic_store(&app->ready, true);
    es_info("ready (%zu decompositions warmed in %.3f s)", app->n_plans, es_now() - app->warm_t0);
}

/* Resolve warm entry i into a plan. Fails with ES_E_CONFIG naming "warm[i]"
 * and the cause when the matrix is unknown or the rows select nothing. */
static int resolve_plan(const es_catalogue *reg, size_t i, es_warm_plan *plan, es_err *err)
{
    const es_warm *w = &reg->warm[i];
    char key[32];
    snprintf(key, sizeof key, "warm[%zu]", i);
    es_rowsel sel = {0};
    es_err cause;
    const es_matrix *m;
    if (es_catalogue_lookup(reg, w->matrix, "matrix", &m, &cause) < 0 ||
        es_rowsel_parse(w->rows ? w->rows : "", "rows", &sel, &cause) < 0 ||
        es_rowsel_resolve(&sel, es_matrix_items(m), &plan->idx, &plan->n, &cause) < 0) {
        es_rowsel_free(&sel);
        return es_fail(err, ES_E_CONFIG, key, "%s: %s", key, cause.message);
    }
    es_rowsel_free(&sel);
    plan->m = es_matrix_retain((es_matrix *)m); /* shared and immutable; the plan holds a reference */
    plan->center = w->centering;
    return 0;
}

/* A catalogue's serial: unique in the process, never 0 (es_catalogue.serial). */
static unsigned long next_serial(void)
{
    static atomic_ulong serials;
    return atomic_fetch_add(&serials, 1) + 1;
}

/* See app.h. On failure everything, the catalogue included, is released. */
int es_app_init(es_app *app, es_catalogue *reg, es_err *err)
{
    memset(app, 0, sizeof *app);
    reg->serial = next_serial();
    app->reg = reg;
    atomic_init(&app->reg_serial, reg->serial);
    app->id = next_serial();
    app->access_log = true;
    app->store_lock_fd = -1;
    app->limits = reg->limits;
    /* the longest deadline a request may have, fixed for the process like the limits */
    app->metrics.timeout_le = es_deadline_seconds(&reg->limits, reg->limits.max_wait_s);
    es_server_conf_copy(&app->server, &reg->server); /* its own: the catalogue may be replaced */
    pthread_mutex_init(&app->reg_lock, NULL);
    pthread_mutex_init(&app->write_lock, NULL);
    app->plans = es_calloc(reg->n_warm, sizeof *app->plans);
    for (size_t i = 0; i < reg->n_warm; i++, app->n_plans++)
        if (resolve_plan(reg, i, &app->plans[i], err) < 0) {
            es_app_free(app);
            return -1;
        }
    app->cache = es_cache_new(reg->server.cache_bytes);
    app->results = es_results_new(reg->server.cache_bytes / ES_RESULTS_BUDGET_DIVISOR);
    app->prerendered = es_prerendered_new();
    app->jobs = es_jobs_new(reg->server.cache_dir, reg->limits.max_job_bytes);
    pthread_mutex_init(&app->derived_lock, NULL);
    if (es_cache_set_dir(app->cache, reg->server.cache_dir, err) < 0) {
        es_app_free(app);
        return -1;
    }
    return 0;
}

/* See app.h: the pool, or -1 like es_pool_new. */
int es_app_start_compute(es_app *app, size_t threads, size_t queue_max, es_err *err)
{
    app->pool = es_pool_new(threads, app->server.light_threads, queue_max, err);
    return app->pool ? 0 : -1;
}

/* See app.h: the catalogue, retained under the lock. */
es_catalogue *es_app_catalogue(es_app *app)
{
    pthread_mutex_lock(&app->reg_lock);
    es_catalogue *r = es_catalogue_retain(app->reg);
    pthread_mutex_unlock(&app->reg_lock);
    return r;
}

/* A thread's hold: one reference to cat, counted by the thread's slot (while
 * the hold is in it) and by each request that took it. */
struct es_catalogue_hold {
    es_catalogue *cat;
    atomic_long refs;
};

/* A thread's slot in an app: the hold its next request takes, NULL when there
 * is none or a publication took it away. On a cache line of its own. */
struct es_hold_slot {
    _Atomic(es_catalogue_hold *) hold;
    pthread_t thread;
    es_hold_slot *next;
    char pad[64];
};

/* See app.h. */
void es_catalogue_hold_release(es_catalogue_hold *h)
{
    if (h && atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1) {
        es_catalogue_free(h->cat);
        free(h);
    }
}

/* See app.h. */
es_catalogue *es_catalogue_of(const es_catalogue_hold *h) { return h->cat; }

/* This thread's slot in app, made (under the lock) on its first request there. */
static es_hold_slot *slot_of(es_app *app)
{
    static _Thread_local unsigned long mine_app;
    static _Thread_local es_hold_slot *mine;
    if (mine_app == app->id) /* ids are unique in the process: mine belongs to this app, alive */
        return mine;
    pthread_t self = pthread_self();
    pthread_mutex_lock(&app->reg_lock);
    es_hold_slot *slot = app->slots;
    while (slot && !pthread_equal(slot->thread, self))
        slot = slot->next;
    if (!slot) {
        slot = es_calloc(1, sizeof *slot);
        slot->thread = self;
        slot->next = app->slots;
        app->slots = slot;
        app->n_slots++;
    }
    pthread_mutex_unlock(&app->reg_lock);
    mine_app = app->id;
    mine = slot;
    return slot;
}

/* See app.h. The slot's hold is taken out (exchanged for NULL) while it is
 * looked at, so a publication either finds it back in the slot and takes it
 * away, or published before the check after it is put back, which then takes
 * it away itself (sequentially consistent store and load on both sides: one
 * of the two sees the other). */
es_catalogue_hold *es_app_hold(es_app *app)
{
    es_hold_slot *slot = slot_of(app);
    unsigned long serial = atomic_load(&app->reg_serial);
    es_catalogue_hold *h = atomic_exchange(&slot->hold, NULL);
    if (h && h->cat->serial != serial) { /* a catalogue was published since */
        es_catalogue_hold_release(h);
        h = NULL;
    }
    if (!h) {
        h = es_malloc(sizeof *h);
        pthread_mutex_lock(&app->reg_lock);
        h->cat = es_catalogue_retain(app->reg);
        serial = app->reg->serial;
        pthread_mutex_unlock(&app->reg_lock);
        atomic_init(&h->refs, 1); /* the slot's */
    }
    atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed); /* the request's */
    atomic_store(&slot->hold, h);
    if (atomic_load(&app->reg_serial) != serial) /* published meanwhile: it may have missed the slot */
        es_catalogue_hold_release(atomic_exchange(&slot->hold, NULL));
    return h;
}

/* Take every thread's hold away (lock held); they are released after it. */
static es_catalogue_hold **take_holds(es_app *app)
{
    es_catalogue_hold **taken = es_calloc(app->n_slots + 1, sizeof *taken);
    size_t n = 0;
    for (es_hold_slot *slot = app->slots; slot; slot = slot->next) {
        es_catalogue_hold *h = atomic_exchange(&slot->hold, NULL);
        if (h)
            taken[n++] = h;
    }
    return taken;
}

static void release_holds(es_catalogue_hold **taken)
{
    for (size_t i = 0; taken[i]; i++)
        es_catalogue_hold_release(taken[i]);
    free(taken);
}

/* See app.h: swap under the lock, release the previous one (and the threads' holds) outside it. */
void es_app_publish(es_app *app, es_catalogue *next)
{
    next->serial = next_serial();
    pthread_mutex_lock(&app->reg_lock);
    es_catalogue *old = app->reg;
    app->reg = next;
    atomic_store(&app->reg_serial, next->serial);
    es_catalogue_hold **taken = take_holds(app);
    pthread_mutex_unlock(&app->reg_lock);
    release_holds(taken);
    es_prerendered_clear(app->prerendered);
    es_catalogue_free(old);
}

/* ---------------------------------------------------------------- what a reload changes */

/* Log what the reload from `old` to `fresh` changes: the settings applied at
 * once, and (a warning) those a restart applies. True when the admission's
 * settings changed (app->admission_changed). */
static bool report_settings(const es_catalogue *old, const es_catalogue *fresh)
{
    es_buf applied, restart;
    es_buf_init(&applied, 128);
    es_buf_init(&restart, 128);
    bool admission = false;
    es_setting_change changes[ES_SETTINGS_COUNT];
    es_setting_changes(&old->server, &old->limits, &fresh->server, &fresh->limits, changes);
    for (size_t i = 0; i < ES_SETTINGS_COUNT; i++) {
        const es_setting_change *f = &changes[i];
        bool named = i > 0 && changes[i - 1].changed && strcmp(changes[i - 1].key, f->key) == 0; /* listen */
        if (!f->changed || named)
            continue;
        es_buf *to = f->effect == ES_RELOAD_RESTART ? &restart : &applied;
        es_buf_printf(to, "%s%s", to->len ? ", " : "", f->key);
        admission = admission || f->effect == ES_RELOAD_ADMISSION;
    }
    if (restart.len)
        es_warn("reload: %s changed in %s: restart to apply it (the daemon keeps the value it started with)",
                restart.s, fresh->origin);
    if (applied.len)
        es_info("reload: applied %s", applied.s);
    free(applied.s);
    free(restart.s);
    return admission;
}

/* See app.h. */
int es_app_reload(es_app *app, es_err *err)
{
    double t0 = es_now();
    pthread_mutex_lock(&app->write_lock);
    es_catalogue *fresh;
    int rc = es_config_reload(app->reg, app->config_path, &fresh, err);
    if (rc == 0) {
        bool admission = report_settings(app->reg, fresh);
        if (admission && app->admission_changed)
            app->admission_changed(app->admission_arg, &fresh->server);
        es_catalogue_adopt_user(fresh, app->reg);
        es_info("reloaded %s in %.3f s: %zu models, %zu matrices kept unchanged", fresh->origin, es_now() - t0,
                fresh->n_models, fresh->n_reused);
        es_app_publish(app, fresh);
    }
    pthread_mutex_unlock(&app->write_lock);
    atomic_fetch_add(rc == 0 ? &app->metrics.reloads : &app->metrics.reload_failures, 1);
    if (rc != 0)
        es_error("reload failed, the previous configuration keeps serving: %s%s%s%s", err->message,
                 err->param[0] ? " (at " : "", err->param, err->param[0] ? ")" : "");
    return rc;
}

/* Move entry i of the derived copies to the front (most recently used). */
static void derived_touch(es_app *app, size_t i)
{
    es_derived hit = app->derived[i];
    memmove(app->derived + 1, app->derived, i * sizeof *app->derived);
    app->derived[0] = hit;
}

/* What identifies an averaged copy: the source's id, data and view (head views
 * are built per request, so never the pointer), g and the rows averaged. */
static char *derived_key(const es_matrix *m, const es_selection *sel, size_t g)
{
    char *identity = es_matrix_identity(m); /* uploads replace data under an id: the key names the data */
    char *key = es_asprintf("%s|g=%zu|rows=%s", identity, g, sel ? sel->canonical : "*");
    free(identity);
    return key;
}

/* The index of the copy named key, or app->n_derived; derived_lock held. */
static size_t derived_find(const es_app *app, const char *key)
{
    size_t i = 0;
    while (i < app->n_derived && strcmp(app->derived[i].key, key) != 0)
        i++;
    return i;
}

/* See app.h. */
es_matrix *es_app_averaged_peek(es_app *app, const es_matrix *m, const es_selection *sel, size_t g)
{
    char *key = derived_key(m, sel, g);
    pthread_mutex_lock(&app->derived_lock);
    size_t i = derived_find(app, key);
    es_matrix *copy = i < app->n_derived ? es_matrix_retain(app->derived[i].m) : NULL;
    pthread_mutex_unlock(&app->derived_lock);
    free(key);
    return copy;
}

/* See app.h. Averaging is O(items x d) (milliseconds), so it runs under the
 * lock: concurrent requests for the same copy build it once. */
int es_app_averaged(es_app *app, const es_matrix *m, const es_selection *sel, size_t g, const char *param,
                    es_matrix **out, es_err *err)
{
    int rc = 0;
    char *key = derived_key(m, sel, g);
    pthread_mutex_lock(&app->derived_lock);
    size_t i = derived_find(app, key);
    if (i == app->n_derived) {
        es_matrix *avg;
        if (es_matrix_average_groups(m, NULL, sel ? sel->idx : NULL, sel ? sel->n : 0, g, param, &avg, err) < 0) {
            rc = -1;
            goto done;
        }
        if (app->n_derived == ES_DERIVED_MAX) {
            es_derived *last = &app->derived[--app->n_derived];
            es_matrix_release(last->m);
            free(last->key);
        }
        i = app->n_derived++;
        app->derived[i] = (es_derived){key, avg};
        key = NULL;
    }
    derived_touch(app, i);
    *out = es_matrix_retain(app->derived[0].m);
done:
    pthread_mutex_unlock(&app->derived_lock);
    free(key);
    return rc;
}

/* Warm plan i through the cache (unless stopping, cancelled or another plan
 * failed); the last one to succeed turns the app ready. */
static void warm_one(es_app *app, size_t i, bool cancelled)
{
    if (cancelled || atomic_load(&app->stopping) || atomic_load(&app->warm_failed))
        return;
    es_warm_plan *p = &app->plans[i];
    es_svd *svd;
    es_err err;
    if (es_cache_svd(app->cache, p->m, p->idx, p->n, p->center, &svd, &err) < 0) {
        es_error("warming %s (center=%s) failed: %s", p->m->id, es_centering_name(p->center), err.message);
        if (!atomic_exchange(&app->warm_failed, true))
            app->on_warm_failure();
        return;
    }
    es_info("warmed %s solver=%s seconds=%.3f recon_error=%.2e", svd->key, svd->solver, svd->seconds,
            svd->recon_error);
    es_svd_release(svd);
    atomic_store(&p->warmed, true);
    if (atomic_fetch_add(&app->warmed, 1) + 1 == app->n_plans)
        set_ready(app);
}

/* A warm plan as a pool task. */
typedef struct warm_task {
    es_app *app;
    size_t i;
    bool chain; /* start plan i + 1 when done (warming in turn) */
} warm_task;

static void submit_warm(es_app *app, size_t i);

/* With automatic BLAS threads the plans are warmed one after another, each on
 * every core: a decomposition warmed alone then runs on the same thread count
 * as one asked for later on an idle daemon, so both give the same bits
 * (OpenBLAS splits some sums by its thread count). With a fixed count they
 * run side by side, as many as there are compute threads. */
static bool warm_in_turn(void)
{
    es_blas_threads_state threads;
    es_blas_threads_get(&threads);
    return threads.automatic;
}

/* Pool task: warm one plan, free the task, then start the next plan when
 * warming in turn. */
static void warm_task_run(void *arg, bool cancelled)
{
    warm_task *t = arg;
    es_app *app = t->app;
    size_t next = t->i + 1;
    bool chain = t->chain;
    free(t);
    warm_one(app, next - 1, cancelled);
    if (chain && !cancelled && next < app->n_plans)
        submit_warm(app, next);
}

/* Queue plan i as a background task (run inline without a pool). */
static void submit_warm(es_app *app, size_t i)
{
    warm_task *t = es_malloc(sizeof *t);
    *t = (warm_task){app, i, warm_in_turn()};
    if (!app->pool || es_pool_submit(app->pool, ES_PRIO_BACKGROUND, NULL, NULL, warm_task_run, NULL, t) < 0)
        warm_task_run(t, false);
}

/* See app.h: the plans as background tasks, in turn or side by side. */
void es_app_start_warming(es_app *app, void (*on_failure)(void))
{
    app->on_warm_failure = on_failure;
    app->warm_t0 = es_now();
    if (app->n_plans == 0)
        set_ready(app);
    if (app->n_plans && warm_in_turn())
        submit_warm(app, 0);
    else
        for (size_t i = 0; i < app->n_plans; i++)
            submit_warm(app, i);
}

/* Release everything the app owns (stops the compute pool first). */
void es_app_free(es_app *app)
{
    atomic_store(&app->stopping, true);
    es_pool_free(app->pool); /* first: its tasks use everything below */
    es_jobs_free(app->jobs);
    es_results_free(app->results);
    es_prerendered_free(app->prerendered);
    es_metrics_free(&app->metrics);
    for (size_t i = 0; i < app->n_plans; i++) {
        free(app->plans[i].idx);
        es_matrix_release(app->plans[i].m);
    }
    free(app->plans);
    if (app->cache) {
        es_cache_free(app->cache);
        pthread_mutex_destroy(&app->derived_lock);
    }
    for (size_t i = 0; i < app->n_derived; i++) {
        es_matrix_release(app->derived[i].m);
        free(app->derived[i].key);
    }
    if (app->slots) { /* every request has ended: only the threads' own holds are left */
        release_holds(take_holds(app));
        for (es_hold_slot *slot = app->slots, *next; slot; slot = next) {
            next = slot->next;
            free(slot);
        }
    }
    if (app->reg) {
        pthread_mutex_destroy(&app->reg_lock);
        pthread_mutex_destroy(&app->write_lock);
    }
    es_catalogue_free(app->reg);
    json_decref(app->records);
    if (app->store_lock_fd >= 0)
        close(app->store_lock_fd);
    es_server_conf_free(&app->server);
    memset(app, 0, sizeof *app);
}
