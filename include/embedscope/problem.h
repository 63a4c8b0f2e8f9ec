/* The contract of the service (src/api), its errors: RFC 9457 problem documents
 * built from es_err, and their kinds, statuses and /problems/<slug> pages.
 * Owner: src/api/problem.c. Ownership and failure rules: see core.h. */
#ifndef ES_PROBLEM_H
#define ES_PROBLEM_H

#include <jansson.h>

#include "embedscope/core.h"

typedef enum es_problem_kind {
    ES_PROB_INVALID_PARAMETER,
    ES_PROB_LIMIT_EXCEEDED,
    ES_PROB_NOT_FOUND,
    ES_PROB_INCOMPATIBLE,
    ES_PROB_METHOD_NOT_ALLOWED,
    ES_PROB_NOT_ACCEPTABLE,
    ES_PROB_BODY_NOT_ACCEPTED,
    ES_PROB_NOT_READY,
    ES_PROB_BUSY,
    ES_PROB_OUT_OF_MEMORY,
    ES_PROB_NUMERIC,
    ES_PROB_INTERNAL,
    ES_PROB_UNAUTHORIZED,
    ES_PROB_FORBIDDEN,
    ES_PROB_CONFLICT,
    ES_PROB_TOO_LARGE,
    ES_PROB_MEDIA_TYPE,
    ES_PROB_STORAGE,
    ES_PROB_TIMEOUT,
    ES_PROB_BAD_REQUEST,
    ES_PROB_URI_TOO_LONG,
    ES_PROB_HEADERS_TOO_LARGE,
    ES_PROB_BODY_TIMEOUT,
    ES_PROB_NOT_IMPLEMENTED,
    ES_PROB_VERSION,
    ES_PROB_TOO_MANY_JOBS,
    ES_PROB_CROSS_ORIGIN,
    ES_PROB_COUNT
} es_problem_kind;

/* The kind an es_err class maps to (PARAM 400, LIMIT 400, NOTFOUND 404,
 * INCOMPATIBLE 422, NOMEM 503, CANCELLED 504, SHUTDOWN 503, NUMERIC 500; for writes
 * UNAUTHORIZED 401, FORBIDDEN 403, CONFLICT 409, TOO_LARGE 413, MEDIA_TYPE 415,
 * STORAGE 507; UNACCEPTABLE 406; everything else 500). */
es_problem_kind es_problem_kind_of(es_errcode code);
/* The HTTP status and the /problems/<slug> of a kind. Never fail. */
unsigned es_problem_status(es_problem_kind kind);
const char *es_problem_title(es_problem_kind kind);
const char *es_problem_slug(es_problem_kind kind);
/* Plain-text description served at /problems/<slug>; NULL for an unknown slug. */
const char *es_problem_doc(const char *slug);
/* {type, title, status, detail, instance, param?, limit?, request_id?}. `param` names
 * a request parameter (NULL: omitted; "" omitted too, except for
 * ES_PROB_INVALID_PARAMETER, which always names its parameter, even an empty
 * name); for ES_PROB_LIMIT_EXCEEDED it is the limit's name and is reported as
 * "limit". Never fails. */
json_t *es_problem_new(es_problem_kind kind, const char *detail, const char *param,
                       const char *instance, const char *request_id);
struct es_reply;
/* Put prefix (a proxy's path prefix, see es_forwarded_prefix) in front of the
 * "type" and "instance" paths of the problem document in rep's body, which is
 * replaced. Leaves rep unchanged when prefix is "" or the body is not a JSON
 * object (or cannot be rebuilt). */
void es_problem_rebase(struct es_reply *rep, const char *prefix);

#endif
