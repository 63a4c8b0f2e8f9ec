/* The compute pool: a fixed set of threads that run the heavy work (analyses,
 * decompositions, start-up warming) so that the HTTP threads never wait for
 * it. Two queues: request tasks (bounded: a full queue is refused, the server
 * answers 503) and background tasks (warming; FIFO, unbounded, run only when
 * no request task waits).
 *
 * Fairness between clients (each request task names its client: its address,
 * or the X-Forwarded-For of a trusted proxy): one client may hold the queue
 * but for a quarter of it (queue_max / ES_POOL_SHARE_DIVISOR slots, at least
 * one, stay for the others; a client always gets one slot), and a free
 * thread takes the oldest task of the client whose running tasks are predicted
 * to take the fewest seconds (fair queueing weighted by predicted cost), so
 * one client's burst does not delay everybody else's requests.
 *
 * A lane for light work: a request task predicted under the caller's threshold
 * (limits.light_seconds) is light; at most threads - reserved heavy tasks
 * (heavy request tasks and background tasks) run at once, so `reserved`
 * threads are always free for light tasks, whatever runs elsewhere: a heavy
 * computation cannot be suspended inside a LAPACK call, so waiting for it to
 * yield would cost a light request up to that call's length. The thread count
 * is unchanged (compute threads x BLAS threads <= cores); the reserved ones
 * run light tasks of every client, fairly.
 *
 * Cancellation is a property of a task: the submitter says when its work is
 * wanted no more (es_task_dropped_fn), the pool says when all work is
 * (es_pool_abandon, at the end of the shutdown's grace period), and the
 * computation asks at its safe points (es_checkpoint between steps, its
 * progress tracker inside loops), which tell the two apart: 504 for a
 * dropped request, 503 with Retry-After for one the shutdown cut short. */
#include "embedscope/blas.h"
#include "embedscope/negotiate.h"
#include "embedscope/pool.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

typedef struct task {
    es_task_fn fn;
    es_task_dropped_fn dropped; /* NULL: never dropped */
    void *arg;
    es_pool *pool;
    char client[ES_CLIENT_MAX];
    double seconds;             /* predicted (fair queueing's weight) */
    bool light;                 /* may run on a reserved thread */
    struct task *next;
} task;

typedef struct queue {
    task *head, *tail;
    size_t n;
} queue;

struct es_pool {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    queue q[2];            /* indexed by es_priority */
    size_t queue_max, running, n_threads;
    size_t heavy_max, heavy_running; /* heavy tasks that may run at once (threads - reserved), and do */
    size_t light_running;
    char (*running_client)[ES_CLIENT_MAX]; /* per thread: the client of its task, "" if none */
    double *running_seconds;               /* per thread: its task's predicted seconds */
    unsigned long completed, rejected, light_completed;
    bool stopping, cancel, joined;
    atomic_bool abandon;   /* es_pool_abandon: running tasks stop at their next safe point */
    size_t exited;         /* threads that left worker() */
    pthread_cond_t done;   /* signalled when a thread exits */
    pthread_t *threads;
};

/* Append t to q. */
static void push(queue *q, task *t)
{
    t->next = NULL;
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
    q->n++;
}

/* The oldest task of q, NULL if empty. */
static task *pop(queue *q)
{
    task *t = q->head;
    if (!t)
        return NULL;
    q->head = t->next;
    if (!q->head)
        q->tail = NULL;
    q->n--;
    return t;
}

/* The predicted seconds of client's tasks running now, and their number (lock held). */
static double running_of(const es_pool *p, const char *client, size_t *tasks)
{
    double seconds = 0;
    *tasks = 0;
    for (size_t i = 0; i < p->n_threads; i++)
        if (p->running_client[i][0] && strcmp(p->running_client[i], client) == 0) {
            seconds += p->running_seconds[i];
            ++*tasks;
        }
    return seconds;
}

/* May a free thread start t now (lock held): a light task always, a heavy
 * one while fewer than heavy_max run (any, once the pool stops: it drains). */
static bool may_start(const es_pool *p, const task *t)
{
    return t->light || p->stopping || p->heavy_running < p->heavy_max;
}

/* Unlink and return the oldest request task this thread may start of the
 * client whose running tasks are predicted to take the least time, fewest
 * tasks breaking ties (lock held); NULL if none waits. */
static task *pop_fair(es_pool *p)
{
    queue *q = &p->q[ES_PRIO_REQUEST];
    task *best = NULL, *best_prev = NULL, *prev = NULL;
    double best_seconds = HUGE_VAL;
    size_t best_tasks = SIZE_MAX;
    for (task *t = q->head; t && best_tasks > 0; prev = t, t = t->next) {
        if (!may_start(p, t))
            continue;
        size_t tasks;
        double seconds = running_of(p, t->client, &tasks);
        if (seconds < best_seconds || (seconds == best_seconds && tasks < best_tasks)) {
            best = t;
            best_prev = prev;
            best_seconds = seconds;
            best_tasks = tasks;
        }
    }
    if (!best)
        return NULL;
    if (best_prev)
        best_prev->next = best->next;
    else
        q->head = best->next;
    if (q->tail == best)
        q->tail = best_prev;
    q->n--;
    return best;
}

/* Queued request tasks of client (lock held). */
static size_t queued_of(const es_pool *p, const char *client)
{
    size_t n = 0;
    for (const task *t = p->q[ES_PRIO_REQUEST].head; t; t = t->next)
        n += strcmp(t->client, client) == 0;
    return n;
}

/* The task this compute thread runs, NULL between tasks and on other threads. */
static _Thread_local task *running_task;

typedef struct worker_arg {
    es_pool *p;
    size_t slot;
} worker_arg;

/* The next task a free thread may start (lock held): a request task (fairly),
 * else a background task if a heavy one may start; NULL if none. */
static task *next_task(es_pool *p)
{
    task *t = pop_fair(p);
    if (!t && p->q[ES_PRIO_BACKGROUND].n && may_start(p, p->q[ES_PRIO_BACKGROUND].head))
        t = pop(&p->q[ES_PRIO_BACKGROUND]);
    return t;
}

/* Worker: run request tasks first (fairly), then background tasks, heavy ones
 * only while heavy_max allows; after es_pool_stop drain both queues
 * (cancelled if asked) and exit. */
static void *worker(void *arg)
{
    worker_arg *wa = arg;
    es_pool *p = wa->p;
    size_t slot = wa->slot;
    free(wa);
    pthread_mutex_lock(&p->lock);
    for (;;) {
        task *t;
        while (!(t = next_task(p)) && !p->stopping)
            pthread_cond_wait(&p->wake, &p->lock);
        if (!t)
            break; /* stopping and drained */
        bool cancelled = p->cancel;
        p->running++;
        if (t->light)
            p->light_running++;
        else
            p->heavy_running++;
        memcpy(p->running_client[slot], t->client, ES_CLIENT_MAX);
        p->running_seconds[slot] = t->seconds;
        bool light = t->light;
        pthread_mutex_unlock(&p->lock);
        es_blas_job_begin(); /* the BLAS threads are shared among the tasks running */
        running_task = t;
        t->fn(t->arg, cancelled);
        running_task = NULL;
        es_blas_job_end();
        free(t);
        pthread_mutex_lock(&p->lock);
        p->running_client[slot][0] = '\0';
        p->running_seconds[slot] = 0;
        p->running--;
        p->completed++;
        if (light) {
            p->light_running--;
            p->light_completed++;
        } else if (p->heavy_running-- == p->heavy_max) {
            pthread_cond_broadcast(&p->wake); /* a heavy task waiting may start now */
        }
    }
    p->exited++;
    pthread_cond_broadcast(&p->done);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* See pool.h. Fails (NULL, ES_E_IO) only if not a single thread starts. */
es_pool *es_pool_new(size_t threads, size_t reserved, size_t queue_max, es_err *err)
{
    es_pool *p = es_calloc(1, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->queue_max = queue_max;
    p->threads = es_calloc(threads, sizeof *p->threads);
    p->running_client = es_calloc(threads ? threads : 1, sizeof *p->running_client);
    p->running_seconds = es_calloc(threads ? threads : 1, sizeof *p->running_seconds);
    while (p->n_threads < threads) {
        worker_arg *wa = es_malloc(sizeof *wa);
        *wa = (worker_arg){p, p->n_threads};
        if (pthread_create(&p->threads[p->n_threads], NULL, worker, wa) != 0) {
            free(wa);
            break;
        }
        p->n_threads++;
    }
    if (p->n_threads == 0) {
        es_pool_free(p);
        es_fail(err, ES_E_IO, "compute_threads", "cannot start any compute thread");
        return NULL;
    }
    if (p->n_threads < threads)
        es_warn("started %zu of %zu compute threads", p->n_threads, threads);
    p->heavy_max = reserved < p->n_threads ? p->n_threads - reserved : 1; /* one thread at least runs anything */
    return p;
}

/* Queue fn(arg). ES_POOL_FULL (nothing queued) when the pool stops or a
 * request task would exceed queue_max, ES_POOL_CLIENT_SHARE when its client
 * already holds its share of the queue. */
int es_pool_submit(es_pool *p, es_priority prio, const char *client, const es_task_cost *cost, es_task_fn fn,
                   es_task_dropped_fn dropped, void *arg)
{
    task *t = es_malloc(sizeof *t);
    *t = (task){.fn = fn, .dropped = dropped, .arg = arg, .pool = p,
                .seconds = cost && cost->seconds >= 0 ? cost->seconds : 0,
                .light = prio == ES_PRIO_REQUEST && cost && cost->light};
    snprintf(t->client, sizeof t->client, "%s", client ? client : "");
    pthread_mutex_lock(&p->lock);
    size_t kept = p->queue_max / ES_POOL_SHARE_DIVISOR, share = p->queue_max - (kept ? kept : 1);
    bool full = prio == ES_PRIO_REQUEST && p->q[prio].n >= p->queue_max;
    bool over_share = prio == ES_PRIO_REQUEST && !full && queued_of(p, t->client) >= (share ? share : 1);
    if (p->stopping || full || over_share) {
        p->rejected += full || over_share;
        pthread_mutex_unlock(&p->lock);
        free(t);
        return over_share ? ES_POOL_CLIENT_SHARE : ES_POOL_FULL;
    }
    push(&p->q[prio], t);
    pthread_cond_broadcast(&p->wake); /* a thread that may start it (a sleeping one might not) */
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* Refuse new tasks, run what is queued (with cancelled = cancel_queued) and
 * join the threads. Running tasks always finish. Idempotent. */
void es_pool_stop(es_pool *p, bool cancel_queued)
{
    pthread_mutex_lock(&p->lock);
    bool join = !p->joined;
    p->stopping = true;
    p->cancel = p->cancel || cancel_queued;
    p->joined = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    if (!join)
        return;
    for (size_t i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
}

/* See pool.h. */
bool es_pool_stop_within(es_pool *p, double seconds)
{
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    p->cancel = true;
    pthread_cond_broadcast(&p->wake);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)seconds;
    until.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    while (p->exited < p->n_threads)
        if (pthread_cond_timedwait(&p->done, &p->lock, &until) != 0)
            break;
    bool all = p->exited == p->n_threads;
    pthread_mutex_unlock(&p->lock);
    if (all)
        es_pool_stop(p, true); /* joins */
    return all;
}

/* See pool.h. Never fails. */
void es_pool_free(es_pool *p)
{
    if (!p)
        return;
    es_pool_stop(p, true);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->running_client);
    free(p->running_seconds);
    pthread_mutex_destroy(&p->lock);
    free(p->threads);
    free(p);
}

/* A consistent snapshot of the counters. Never fails. */
void es_pool_get_stats(es_pool *p, es_pool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    *out = (es_pool_stats){.threads = p->n_threads, .queue_max = p->queue_max, .queued = p->q[ES_PRIO_REQUEST].n,
                           .background = p->q[ES_PRIO_BACKGROUND].n, .running = p->running,
                           .completed = p->completed, .rejected = p->rejected,
                           .reserved = p->n_threads - p->heavy_max, .light_running = p->light_running,
                           .heavy_running = p->heavy_running, .light_completed = p->light_completed};
    pthread_mutex_unlock(&p->lock);
}

/* See pool.h. */
void es_pool_abandon(es_pool *p)
{
    if (p)
        atomic_store(&p->abandon, true);
}

/* See pool.h. */
bool es_pool_abandoned(es_pool *p) { return p && atomic_load(&p->abandon); }

/* The safe point of task t (NULL: none, never stops): the shutdown first, so
 * a request the watcher answered because of it also stops as one. */
static int task_check(void *arg, es_err *err)
{
    const task *t = arg;
    if (!t)
        return 0;
    if (atomic_load(&t->pool->abandon))
        return es_fail(err, ES_E_SHUTDOWN, "", "the server is shutting down");
    if (t->dropped && t->dropped(t->arg))
        return es_fail(err, ES_E_CANCELLED, "", "the computation was abandoned: it was cancelled, its deadline "
                       "(limits.request_timeout_s, or its Prefer: wait up to limits.max_wait_s) passed or its "
                       "client left");
    return 0;
}

/* See pool.h. */
int es_checkpoint(es_err *err) { return task_check(running_task, err); }

/* See pool.h. The helper threads that attach pr ask about the task of the
 * thread that attached it here. */
void es_pool_track(es_progress *pr)
{
    if (pr) {
        pr->check = task_check;
        pr->arg = running_task;
    }
    es_progress_attach(pr);
}
