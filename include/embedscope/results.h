/* The runtime of the service (src/api), its replies: what a handler produces
 * (es_reply), the response cache of rendered replies by canonical request
 * (single flight) and the shared reply bytes it hands out.
 * Owner: src/api/results.c. Ownership and failure rules: see core.h. */
#ifndef ES_RESULTS_H
#define ES_RESULTS_H

#include <stdbool.h>
#include <stddef.h>

#include "embedscope/core.h"
#include "embedscope/pool.h"

/* What a handler produces. Bodies are malloc'ed (freed with free) unless static. */
typedef struct es_shared es_shared;
typedef struct es_reply {
    unsigned status;
    const char *content_type;
    char *body;
    size_t len;
    bool body_static;
    char *gz;                  /* gzip of body, malloc'ed, or NULL (see es_reply_gzip) */
    es_shared *shared;         /* non-NULL: body and gz live in these shared bytes, of which the
                                  reply holds one reference (neither freed nor static) */
    size_t gz_len;
    const char *retry_after;   /* Retry-After header (503 busy) or NULL */
    unsigned retry_after_s;    /* Retry-After in seconds when retry_after is NULL (429 of the job cap); 0: none */
    const char *cache_control; /* static string or NULL */
    char etag[40];             /* "" = none */
    bool etag_from_body;       /* es_route_dispatch computes the ETag from the body (200 only) */
    const char *allow;         /* Allow header (405, OPTIONS) */
    char *location;            /* Location header (201 of an upload, 202 and 303 of a job), malloc'ed
                                * (es_reply_location), of any length; NULL = none */
    bool vary_accept;          /* negotiated by Accept: "Vary: Accept" too */
} es_reply;
/* Free the reply's owned bodies (a static body is left alone, shared bytes
 * lose a reference) and clear it (rep must not be NULL). Never fails. */
void es_reply_release(es_reply *rep);
/* Set rep's Location to a copy of url (a URL of any length: never cut). */
void es_reply_location(es_reply *rep, const char *url);

typedef struct es_results es_results;
typedef struct es_result es_result;
typedef struct es_results_stats {
    unsigned long hits, misses, waits, evictions;
    unsigned long rendered; /* misses answered from a kept result (es_results_kept) */
    size_t bytes, entries, max_bytes;
} es_results_stats;

/* A response cache of at most max_bytes (bodies, gzip and bookkeeping). */
es_results *es_results_new(size_t max_bytes);
/* Free it; NULL is ignored. No request may use it any more. */
void es_results_free(es_results *c);
enum { ES_JOIN_CLAIMED, ES_JOIN_HIT, ES_JOIN_PENDING };
/* Single flight without blocking (an HTTP thread): ES_JOIN_HIT with the cached
 * reply of key (a sha256 hex) copied into *out; ES_JOIN_CLAIMED when the
 * caller must compute: *claim is the key it owns (settle it with
 * es_results_settle); ES_JOIN_PENDING when another request computes it:
 * *pending is that entry, held for the caller until es_results_take or
 * es_results_release. Never fails. */
int es_results_join(es_results *c, const char *key, es_reply *out, es_result **claim, es_result **pending);
/* Call fn(arg) once the held entry e is settled (from the settling thread,
 * outside the cache's lock): true; false, and nothing registered, when it is
 * settled already. Never fails. */
bool es_results_notify(es_results *c, es_result *e, void (*fn)(void *arg), void *arg);
/* The reply of the held entry e (waiting until it is settled) and the hold
 * released: 1 with it copied into *out; -1 when its computation failed with an
 * error the waiters share (copied into *err; not with err NULL); 0 when it
 * failed otherwise (compute again). Never fails. */
int es_results_take(es_results *c, es_result *e, es_reply *out, es_err *err);
/* Does a request still wait for e (a hold taken by es_results_join and not
 * yet taken or released)? Never fails. */
bool es_results_waited(es_results *c, es_result *e);
/* Release the hold on e without taking its reply. Never fails. */
void es_results_release(es_results *c, es_result *e);
/* Single flight, blocking (a compute thread): 1 with the cached reply copied into *out
 * (after waiting if another request is computing it); 0 when the caller must compute: *claim is
 * then the key it owns (settle it with es_results_settle), or NULL if the
 * computation it waited for failed (compute without caching). */
int es_results_claim(es_results *c, const char *key, es_reply *out, es_result **claim);
/* The cached reply of key copied into *out (counted as a hit) when there is
 * one, settled and not failed; else false, and nothing is claimed, counted or
 * waited for (the target memo's lookup: the full path follows). Never fails. */
bool es_results_peek(es_results *c, const char *key, es_reply *out);
/* Store the claimed key's reply (200 only; its bodies become shared bytes,
 * es_shared_adopt, which the reply keeps using) or, reply NULL, fail the
 * claim: with error, waiting requests take that error (a failure that holds
 * for them too); without, they compute themselves. Replies larger than the
 * whole budget are only handed to the waiting requests. */
void es_results_settle(es_results *c, es_result *claim, es_reply *reply, const es_err *error);
/* Turn rep's bodies (body, and gz when there is one) into shared bytes,
 * reference counted, taken over without a copy (a static body stays static):
 * rep->body stays, rep->gz moves into them (rep->shared; es_shared_gzip). A reply that shares already is left as it is.
 * es_shared_give copies such a reply into *out with one more reference: what
 * the response cache and the pre-rendered listings hand out instead of
 * copying bytes. es_shared_release drops a reference (NULL is a no-op); the
 * last frees the bytes. None fails. */
void es_shared_adopt(es_reply *rep);
void es_shared_give(const es_reply *from, es_reply *out);
void es_shared_release(es_shared *s);
/* The gzip of shared bytes for a request that accepts it: true with *gz and
 * *gz_len (owned by s) when it exists. Made on first demand: here when the
 * body is at most ES_GZIP_INLINE_MAX (or pool is NULL), else by a background
 * task of pool for later requests (false now); never for a body whose sample
 * did not pay (es_gzip_pays, decided by es_shared_adopt). Never fails. */
bool es_shared_gzip(es_shared *s, es_pool *pool, const char **gz, size_t *gz_len);
/* Computed analysis results kept beside the replies rendered from them, so that another
 * representation of the same request (CSV or NPY after JSON, another table) is rendered from
 * them instead of computed again. They share the cache's byte budget and recency order; their
 * keys are sha256 hex of texts of their own (never a reply's key). */
typedef struct es_kept es_kept;
/* Keep data under key, charged bytes, freed with free_fn(data) once evicted and no longer held:
 * true; false when it is not kept (a quarter of the budget or more, or key kept already) and
 * free_fn(data) was called. Never fails. */
bool es_results_keep(es_results *c, const char *key, void *data, size_t bytes, void (*free_fn)(void *data));
/* The data kept under key, held until es_kept_release (counted in rendered), or NULL. Never fails. */
es_kept *es_results_kept(es_results *c, const char *key);
const void *es_kept_data(const es_kept *k);
void es_kept_release(es_results *c, es_kept *k);
/* A consistent snapshot of the cache's counters. Never fails. */
void es_results_get_stats(es_results *c, es_results_stats *out);

#endif
