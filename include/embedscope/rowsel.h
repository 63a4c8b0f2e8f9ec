/* embedscope store: row selections -- Python slices, unions of them and index
 * lists, resolved against a matrix's item count, and the canonical text of a
 * resolved selection. Ownership and failure rules: see core.h. */
#ifndef EMBEDSCOPE_ROWSEL_H
#define EMBEDSCOPE_ROWSEL_H

#include <stdbool.h>
#include <stddef.h>
#include "embedscope/core.h"

/* Python slice over the items of a matrix: start:stop[:step], negative indices
 * count from the end, missing bounds take Python's defaults; step != 0. */
typedef struct es_slice {
    long start, stop, step;
    bool has_start, has_stop;
} es_slice;

/* A selection: the union of parts (slices or single indices), in order, minus
 * the excluded items. Nothing is clamped: see es_rowsel_resolve. */
typedef struct es_rowsel {
    es_slice *parts;   /* n_parts slices (0 parts: every item); es_rowsel_parse fills them */
    size_t n_parts;
    size_t *exclude;   /* items to drop after slicing (any order, duplicates ok) */
    size_t n_exclude;
    size_t max_rows;   /* more selected items is ES_E_LIMIT "max_rows"; 0: no limit */
    /* The request's names of the two parts, used in errors (NULL: "rows", "exclude"). */
    const char *rows_param, *exclude_param;
} es_rowsel;

/* Parse "start:stop[:step]" or "" (everything) or a single index "i" (one row).
 * ES_E_PARAM naming `param` on malformed text or step 0. */
int es_slice_parse(const char *text, const char *param, es_slice *out, es_err *err);
/* Parse a union "part,part,..." of es_slice_parse texts ("" alone: every row)
 * into sel->parts (replacing any). ES_E_PARAM naming `param` on an empty part,
 * a part over 128 characters or one es_slice_parse refuses. */
int es_rowsel_parse(const char *text, const char *param, es_rowsel *sel, es_err *err);
/* Parse a comma-separated list of non-negative indices ("" = none). ES_E_PARAM
 * naming `param` on an empty item, a sign, garbage or overflow. */
int es_index_list_parse(const char *text, const char *param, size_t **out, size_t *n, es_err *err);
/* Resolve against n_items: each part's items in slice order (Python indexing,
 * negative bounds counting from the end), the parts in order, exclusions
 * removed. Nothing is clamped or merged: ES_E_PARAM naming sel->rows_param for
 * a bound outside -n..n-1 (a stop, or an ascending start, may be n), a part
 * that selects nothing, a row selected by two parts or nothing left;
 * sel->exclude_param if an excluded index is >= n_items; ES_E_LIMIT "max_rows"
 * above sel->max_rows (before the list is allocated). */
int es_rowsel_resolve(const es_rowsel *sel, size_t n_items, size_t **out, size_t *n, es_err *err);
void es_rowsel_free(es_rowsel *sel);   /* frees parts and exclude; NULL is a no-op */
/* Canonical text of resolved indices (compact ranges, "0:1024:1" style parts
 * joined by ','), used in cache keys and echoed in responses. Never fails. */
char *es_rows_canonical(const size_t *idx, size_t n);

#endif
