/* Labels and metadata of a matrix's items (the store layer): one row of text
 * cells per item, in named columns, as the TensorBoard Projector's metadata
 * TSV. Read from TSV, CSV or JSON ({"columns": {NAME: [values]}}), checked
 * against the matrix's item count, shared by reference (immutable once made).
 * Ownership and failure rules: see core.h. Format: docs/api.md, "Labels". */
#ifndef EMBEDSCOPE_LABELS_H
#define EMBEDSCOPE_LABELS_H

#include <stdbool.h>
#include <stddef.h>

#include "embedscope/core.h"

/* Bounds that hold whatever the configured byte limit is. */
#define ES_LABELS_MAX_COLUMNS 64
#define ES_LABELS_MAX_NAME 256      /* bytes of a column name */
#define ES_LABELS_MAX_QUERY 256     /* bytes of a search query or pattern */
/* The name of the only column of a file without a header (one column). */
#define ES_LABELS_DEFAULT_COLUMN "label"

typedef enum es_labels_format { ES_LABELS_TSV, ES_LABELS_CSV, ES_LABELS_JSON } es_labels_format;

typedef struct es_labels {
    size_t n_rows, n_cols;
    char **names;     /* n_cols column names, unique, non-empty; the first is the label */
    char **cells;     /* n_rows x n_cols, row-major, valid UTF-8 */
    bool *numeric;    /* per column: every cell is a finite decimal number */
    size_t bytes;     /* the cells' and names' bytes */
    char sha256[65];  /* of es_labels_text(ES_LABELS_JSON) */
    int refs;
} es_labels;

/* Parse len bytes of text in format fmt into labels of n_rows items.
 * TSV and CSV: a header row names the columns, then one line per item; a
 * file of one column has no header (its column is ES_LABELS_DEFAULT_COLUMN).
 * TSV cells are split at tabs, lines at \n (a \r before it is dropped); CSV
 * follows RFC 4180 (quoted cells may hold commas, quotes as "" and newlines).
 * JSON: {"columns": {NAME: [string | number | null, ...]}} (null is "").
 * A last empty line is ignored. Failures, with `param` as err->param and the
 * line, row or byte in the message: ES_E_LIMIT naming limit_name when len >
 * max_bytes; ES_E_PARAM for malformed text, invalid UTF-8, a row of another
 * cell count than the header, a duplicated or empty column name, more than
 * ES_LABELS_MAX_COLUMNS columns, and another row count than n_rows. */
int es_labels_parse(const char *text, size_t len, es_labels_format fmt, size_t n_rows, size_t max_bytes,
                    const char *param, const char *limit_name, es_labels **out, es_err *err);
/* The labels as text in fmt (TSV and CSV: a header row, then one line per
 * item; JSON: {"rows": n, "columns": {NAME: [..]}, "numeric": [NAME, ..]},
 * numeric columns as numbers when typed, else every cell a string). TSV cells
 * holding a tab or a line break have them replaced by spaces. Caller frees;
 * *len is its length. Never fails. */
char *es_labels_text(const es_labels *l, es_labels_format fmt, bool typed, size_t *len);
/* The column named name, or -1. */
long es_labels_column(const es_labels *l, const char *name);
es_labels *es_labels_retain(es_labels *l);
void es_labels_release(es_labels *l);

/* What a search's query is (es_labels_search's flags). */
enum { ES_SEARCH_REGEX = 1, ES_SEARCH_CASELESS = 2 };
/* ES_E_PARAM naming "q" for a query longer than ES_LABELS_MAX_QUERY bytes;
 * O(query): the check an HTTP thread makes before a search is queued. */
int es_labels_check_query(const char *query, es_err *err);
/* Items whose cell in column col matches query: a substring or, with
 * ES_SEARCH_REGEX, a PCRE2 regular expression matched anywhere in the cell;
 * case-insensitively (Unicode case folding) with ES_SEARCH_CASELESS. At most
 * limit indices, ascending, into idx (room for limit); *total counts every
 * match. Bounded in time and memory per cell (match, depth, heap and JIT
 * stack limits) and stopping at the tracker's safe points between cells
 * (es_progress_check). Failures: ES_E_PARAM naming "q" for a query longer
 * than ES_LABELS_MAX_QUERY bytes, a pattern PCRE2 refuses (its message and
 * byte offset) and a cell whose match needs more than a limit (the limit and
 * the row); the tracker's error when it says stop. */
int es_labels_search(const es_labels *l, size_t col, const char *query, unsigned flags, size_t limit, size_t *idx,
                     size_t *n_found, size_t *total, es_err *err);

#endif
