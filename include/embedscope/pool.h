/* The runtime of the service (src/api), its compute pool: fixed threads running
 * the heavy work, fair between clients, with safe points that stop a dropped task.
 * Owner: src/api/pool.c. Ownership and failure rules: see core.h. */
#ifndef ES_POOL_H
#define ES_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "embedscope/core.h"

typedef enum es_priority {
    ES_PRIO_REQUEST,    /* a client waits: bounded queue, runs first */
    ES_PRIO_BACKGROUND  /* start-up warming: unbounded, runs when no request task waits */
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
    size_t reserved;                   /* threads kept for light tasks */
    size_t light_running, heavy_running;
    unsigned long completed, rejected, light_completed;
} es_pool_stats;

/* What the pool knows of a request task's cost: its predicted seconds (fair
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
 * kept for light request tasks: heavy tasks run on the others only; at most
 * queue_max request tasks wait. NULL with ES_E_IO if no thread can be started. */
es_pool *es_pool_new(size_t threads, size_t reserved, size_t queue_max, es_err *err);
/* Queue fn(arg) for client (request tasks: fairness; NULL or "" for background
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

#endif
