/* The runtime of the service (src/api), its target memo: a gated request's
 * raw target and Accept header mapped to the key its gate computed (sha256 of
 * the canonical request), its ETag and caching policy, per HTTP thread and
 * catalogue, so a repeated request skips parsing, canonicalising and hashing.
 * Owner: src/api/memo.c. Ownership and failure rules: see core.h. */
#ifndef ES_MEMO_H
#define ES_MEMO_H

#include <stdbool.h>
#include <stddef.h>

#include "embedscope/params.h"

/* A request's raw target as memo text (path, parameters in order, Accept). */
typedef struct es_memo_target {
    unsigned long hashes;      /* es_digests_generation() before the request was keyed */
    size_t len;
    char text[4096];
} es_memo_target;

/* What the gate made of it. */
typedef struct es_memo_value {
    char key[65];              /* the response cache's key (sha256 hex of the canonical request) */
    char etag[40];
    const char *cache_control; /* a static string */
    bool vary_accept;
} es_memo_value;

/* Fill t from the request, hashes being es_digests_generation() read before it is keyed (an entry
 * made before a matrix's background sha256 settled is not used after); false when it is too long to
 * be memoised. Never fails otherwise. */
bool es_memo_make(es_memo_target *t, const char *path, const es_query *q, const char *accept,
                  unsigned long hashes);
/* What this thread memoised for t under the catalogue of that serial (0: none) and t's hashes, if anything. */
bool es_memo_get(const es_memo_target *t, unsigned long serial, es_memo_value *out);
/* Memoise v for t under the catalogue of that serial (0: nothing is kept), on this thread.
 * Never fails (without memory nothing is kept). */
void es_memo_put(const es_memo_target *t, unsigned long serial, const es_memo_value *v);

#endif
