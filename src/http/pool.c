/* The compute pool: a fixed set of threads that run the heavy work (analyses,
 * decompositions, start-up warming) so that the HTTP threads never wait for
 * it. Two FIFO queues: request jobs (bounded: a full queue is refused, the
 * server answers 503) and background tasks (warming; unbounded, run only when
 * no request job waits). */
#include "http/http.h"

#include <stdlib.h>

typedef struct task {
    es_task_fn fn;
    void *arg;
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
    unsigned long completed, rejected;
    bool stopping, cancel, joined;
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

/* Worker: run request jobs first, then background tasks; after es_pool_stop
 * drain both queues (cancelled if asked) and exit. */
static void *worker(void *arg)
{
    es_pool *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stopping && !p->q[ES_PRIO_REQUEST].n && !p->q[ES_PRIO_BACKGROUND].n)
            pthread_cond_wait(&p->wake, &p->lock);
        task *t = pop(&p->q[ES_PRIO_REQUEST]);
        if (!t)
            t = pop(&p->q[ES_PRIO_BACKGROUND]);
        if (!t)
            break; /* stopping and drained */
        bool cancelled = p->cancel;
        p->running++;
        pthread_mutex_unlock(&p->lock);
        t->fn(t->arg, cancelled);
        free(t);
        pthread_mutex_lock(&p->lock);
        p->running--;
        p->completed++;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* See http.h. Fails (NULL, ES_E_IO) only if not a single thread starts. */
es_pool *es_pool_new(size_t threads, size_t queue_max, es_err *err)
{
    es_pool *p = es_calloc(1, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->queue_max = queue_max;
    p->threads = es_calloc(threads, sizeof *p->threads);
    while (p->n_threads < threads && pthread_create(&p->threads[p->n_threads], NULL, worker, p) == 0)
        p->n_threads++;
    if (p->n_threads == 0) {
        es_pool_free(p);
        es_fail(err, ES_E_IO, "compute_threads", "cannot start any compute thread");
        return NULL;
    }
    if (p->n_threads < threads)
        es_warn("started %zu of %zu compute threads", p->n_threads, threads);
    return p;
}

/* Queue fn(arg). -1 (nothing queued) when the pool stops or a request job
 * would exceed queue_max. */
int es_pool_submit(es_pool *p, es_priority prio, es_task_fn fn, void *arg)
{
    task *t = es_malloc(sizeof *t);
    *t = (task){.fn = fn, .arg = arg};
    pthread_mutex_lock(&p->lock);
    bool full = prio == ES_PRIO_REQUEST && p->q[prio].n >= p->queue_max;
    if (p->stopping || full) {
        p->rejected += full;
        pthread_mutex_unlock(&p->lock);
        free(t);
        return -1;
    }
    push(&p->q[prio], t);
    pthread_cond_signal(&p->wake);
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

/* See http.h. Never fails. */
void es_pool_free(es_pool *p)
{
    if (!p)
        return;
    es_pool_stop(p, true);
    pthread_cond_destroy(&p->wake);
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
                           .completed = p->completed, .rejected = p->rejected};
    pthread_mutex_unlock(&p->lock);
}
