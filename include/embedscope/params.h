/* The contract of the service (src/api), its query parameters: decoded queries,
 * strict parsing of each kind of value, and row selections.
 * Owner: src/api/params.c. Ownership and failure rules: see core.h. */
#ifndef ES_PARAMS_H
#define ES_PARAMS_H

#include <stdbool.h>
#include <stddef.h>

#include "embedscope/catalogue.h"
#include "embedscope/core.h"
#include "embedscope/linalg.h"
#include "embedscope/settings.h"
#include "embedscope/store.h"

/* Decoded query parameters in arrival order (duplicates kept, so they can be refused). */
typedef struct es_query_item {
    char *key, *value;
} es_query_item;

typedef struct es_query {
    es_query_item *items;
    size_t n, cap;
} es_query;

/* An empty query. Never fails. */
void es_query_init(es_query *q);
/* Append a copy of key=value; a NULL value (a bare "?key") is stored as "". */
void es_query_add(es_query *q, const char *key, const char *value);
/* Free the items and leave q empty (reusable). Never fails. */
void es_query_free(es_query *q);
/* The value of key, or NULL when absent. */
const char *es_query_get(const es_query *q, const char *key);
/* Refuse unknown and duplicated parameters: ES_E_PARAM naming the first one,
 * the message listing the allowed names. allowed is NULL-terminated. */
int es_query_check(const es_query *q, const char *const *allowed, es_err *err);
/* Canonical "k=v&k=v" text (sorted by key) for logs. Caller frees. */
char *es_query_text(const es_query *q);

/* A non-negative decimal integer parameter (digits only). Absent: def.
 * ES_E_PARAM naming `name` if malformed or < min; if > max, ES_E_LIMIT naming
 * `limit` when limit != NULL, else ES_E_PARAM naming `name`. */
int es_param_size(const es_query *q, const char *name, size_t def, size_t min, size_t max,
                  const char *limit, size_t *out, es_err *err);
/* A finite real parameter in [min, max], written as a plain decimal number
 * ([+-]digits[.digits][e[+-]digits]: no hex floats, inf, nan or blanks).
 * Absent: def. ES_E_PARAM naming `name`. */
int es_param_double(const es_query *q, const char *name, double def, double min, double max,
                    double *out, es_err *err);
/* One of the NULL-terminated `choices`; *out is its index. Absent: def.
 * ES_E_PARAM naming `name` with the allowed values in the message. */
int es_param_choice(const es_query *q, const char *name, const char *const *choices, size_t def,
                    size_t *out, es_err *err);
/* Heatmap bins when a request gives none (lowered to the configured max_bins). */
#define ES_DEFAULT_BINS 64
/* A "model/matrix" parameter (required). ES_E_PARAM if absent or malformed,
 * ES_E_NOTFOUND naming `name` if unknown. */
int es_param_matrix(const es_query *q, const char *name, const es_catalogue *reg,
                    const es_matrix **out, es_err *err);

/* A contiguous range "start:stop" (Python slice bounds, negative from the end,
 * missing bounds = 0 / n, no step or step 1) over n positions into [*start, *stop).
 * Absent: [0, n). ES_E_PARAM naming `name` if malformed, stepped or empty. */
int es_param_range(const es_query *q, const char *name, size_t n, size_t *start, size_t *stop, es_err *err);
/* Exactly n comma-separated finite decimal numbers into a new array (caller
 * frees); *out is NULL when the parameter is absent. ES_E_PARAM naming `name`
 * on a malformed number or another count. */
int es_param_doubles(const es_query *q, const char *name, size_t n, double **out, es_err *err);
/* Split text at sep into a NULL-terminated array of copies ("" gives one empty
 * item). Caller frees with es_strv_free. Never fails. */
char **es_split_on(const char *text, char sep, size_t *n);
/* es_split_on at ','. */
char **es_split_commas(const char *text, size_t *n);

/* A resolved row selection of one matrix: the parameters <prefix>rows,
 * <prefix>exclude and <prefix>center. */
typedef struct es_selection {
    size_t *idx;          /* n selected item indices, in slice order */
    size_t n;
    char *canonical;      /* es_rows_canonical(idx, n) */
    es_centering center;
} es_selection;

/* Parse and resolve a selection against m's items (model orientation). Errors
 * name the prefixed parameter: ES_E_PARAM for malformed text, an empty
 * selection or an excluded index out of range; ES_E_LIMIT "max_exclude" and
 * "max_rows" for too many excluded / selected rows. with_center = false means
 * the endpoint takes no centring parameter and the selection is uncentred. */
int es_param_selection(const es_query *q, const char *prefix, bool with_center, es_centering def,
                       const es_matrix *m, const es_limits *lim, es_selection *out, es_err *err);
/* Free the index list and canonical text; NULL is ignored. */
void es_selection_free(es_selection *s);

#endif
