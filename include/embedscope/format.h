/* The rendering of the service (src/api), its representations: what a fill
 * function produces (es_out: the JSON document and typed tables), the
 * negotiation of JSON, column JSON, CSV and NPY, and the reply's size planned
 * before any work.
 * Owner: src/api/format.c. Ownership and failure rules: see core.h. */
#ifndef ES_FORMAT_H
#define ES_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "embedscope/core.h"
#include "embedscope/analysis.h"
#include "embedscope/positional.h"
#include "embedscope/render.h"

/* Declared in route.h and descriptor.h, which use this header's types. */
typedef struct es_ctx es_ctx;
typedef struct es_analysis es_analysis;

/* ================================================================ routes.c + api.c */


/* The representations of an analysis result (format.c). */
typedef enum es_format { ES_FMT_JSON, ES_FMT_CSV, ES_FMT_NPY, ES_FMT_COUNT } es_format;
/* The values of ?format= (es_format order) and ?orient=, NULL-terminated. */
extern const char *const es_format_names[ES_FMT_COUNT + 1];
extern const char *const es_orients[];
typedef struct es_render_opts {
    es_format format;
    bool columns;          /* JSON: ?orient=columns */
    const char *table;     /* ?table=, NULL: the main table (borrowed from the query) */
} es_render_opts;

/* The name of category code `code` of a label column (es_table.labels). */
typedef const char *es_label_fn(size_t code);

/* A typed result table: rows x cols float64 values (row-major) with an index
 * column (its name and one value per row: an item index, component, offset,
 * bin start) and column names. A 1-D result is a table with one column.
 * Missing cells (the JSON document's null, such as the period of a component
 * without one) are NaN: NaN in NPY, an empty field in CSV, null in the column
 * JSON; any other non-finite value is a numeric failure. A label column holds
 * category codes: NPY writes the code, CSV and the column JSON its name. */
typedef struct es_table {
    const char *name;      /* static: the ?table= name */
    const char *index;     /* static: the index column's name */
    const char *units;     /* static: what the values are (openapi.yaml lists them) */
    size_t rows, cols;
    double *index_values;  /* rows */
    double *values;        /* rows x cols; NaN marks a missing cell */
    char **col_names;      /* cols names */
    es_label_fn **labels;  /* cols entries: NULL, or the names of a label column's codes */
} es_table;

#define ES_TABLES_MAX 4

/* What a fill function produces: the JSON document (today's shapes) and the
 * same numbers as typed tables, the main one first, for CSV, NPY and the
 * column JSON (format.c). */
typedef struct es_out {
    es_jctx jc;
    json_t *root;         /* {"input": {...}, results...} */
    bool tables_only;     /* the reply is a table (CSV, NPY, column JSON): a fill may leave what its
                           * tables hold out of root (PCA's coordinates: a JSON tree of 1.5 M numbers
                           * for a 50257x30 NPY reply) and only record a non-finite value in jc */
    es_table tables[ES_TABLES_MAX];
    size_t n_tables;
} es_out;
/* root's "input" object. */
json_t *es_out_input(es_out *out);
/* A new table of out (at most ES_TABLES_MAX; aborts beyond, a programming
 * error) with room for its values, index and column names; the caller fills
 * them (es_table_columns names them). Never fails. */
es_table *es_out_table(es_out *out, const char *name, const char *index, const char *units, size_t rows,
                       size_t cols);
/* Name t's columns: names[j] when names != NULL, else "<prefix><j + first>". Never fails. */
void es_table_columns(es_table *t, const char *const *names, const char *prefix, size_t first);
/* A one-column table `name` of n values indexed by idx (NULL: 0..n-1). Never fails. */
es_table *es_out_column(es_out *out, const char *name, const char *index, const char *units, const double *v,
                        const size_t *idx, size_t n);
/* A table of n records indexed 0..n-1 whose columns are the given arrays
 * (ncols of them, each n long), named by names. Never fails. */
es_table *es_out_records(es_out *out, const char *name, const char *index, const char *units,
                         const char *const *names, const double *const *columns, size_t ncols, size_t n);
/* n sizes as doubles (a table column). Caller frees. */
double *es_sizes_as_doubles(const size_t *v, size_t n);
/* The "diagonals" table (offset, mean, count) of a Toeplitz score, indexed by offset. */
void es_out_toeplitz(es_out *out, const es_toeplitz *t);
/* A grid table: values rows x cols, index = row bin starts (row_edges), columns
 * named by their bin starts (col_edges) with prefix. The values move into
 * the table (g->values becomes NULL: a full-resolution grid is not copied).
 * Never fails. */
es_table *es_out_grid(es_out *out, const char *name, const char *units, es_grid *g, const char *prefix);
/* Free the tables and root (out itself is the caller's). Never fails. */
void es_out_free(es_out *out);

/* The rendering parameters every analysis route accepts besides its spec
 * ("format"; "orient" and "table" when it has tables). */
size_t es_render_params(const es_analysis *a, const char **names, size_t n, size_t cap);
/* Negotiate the representation of a's result into cx->render: ?format=
 * (json, csv, npy; it wins) else Accept with q-values (no Accept: JSON);
 * ?orient= (nested, columns; JSON only); ?table= (one of a->tables).
 * ES_E_UNACCEPTABLE (406, listing the supported media types) when nothing
 * acceptable is produced, ES_E_PARAM naming format / orient / table. */
int es_negotiate(es_ctx *cx, const es_analysis *a, es_err *err);
/* Does a list a table of that name (for compare: does a comparable analysis)? */
bool es_analysis_has_table(const es_analysis *a, const char *name);
/* Append the representation to a canonical key ("|format=..|orient=..|table=..").
 * Never fails. */
void es_render_key(const es_render_opts *r, es_buf *b);
/* Reply with out in cx->render's representation: the JSON document, the chosen
 * table as column JSON, CSV or NPY. out is consumed: its tables are kept in the response cache
 * (es_results_keep under cx->kept_key, when the gate set one) for the request's other
 * representations. ES_E_NUMERIC for a
 * non-finite value, ES_E_PARAM "table" when the result lacks the asked table,
 * ES_E_LIMIT "max_response_bytes" (saying which other format would fit). */
int es_reply_out(es_ctx *cx, es_out *out, es_err *err);
/* Reply with a result es_reply_out kept (its tables, an es_out without root) in cx->render's
 * representation, a table (CSV, NPY, column JSON): kept is read, not consumed. Fails like
 * es_reply_out. */
int es_reply_kept(es_ctx *cx, const es_out *kept, es_err *err);

/* The shapes of a result's tables known before computing (analysis .plan). */
typedef struct es_out_plan {
    struct {
        const char *name;
        size_t rows, cols;
        bool at_most;   /* rows is an upper bound (an exact count would need the rows' work) */
        double json_row; /* bytes a row takes at most in the nested JSON document when it is more than
                          * its numbers (an object of named fields); 0: its numbers, index included */
    } tables[ES_TABLES_MAX];
    size_t n_tables;
} es_out_plan;
/* Append a table of rows x cols to p (at most ES_TABLES_MAX). Never fails. */
void es_plan_table(es_out_plan *p, const char *name, size_t rows, size_t cols);
/* The same with at most `rows` rows (exact: exactly). Never fails. */
void es_plan_table_bounded(es_out_plan *p, const char *name, size_t rows, bool exact, size_t cols);
/* The last table's rows take at most `bytes` each in the nested JSON document
 * (named fields, strings), when that is more than their numbers. Never fails. */
void es_plan_json_row(es_out_plan *p, double bytes);
/* The reply's size in cx->render's representation from the plan, before any
 * work: NPY exactly (header included; bounded for a table of at most so many
 * rows), CSV and column JSON bounded (24 characters a number), the nested
 * JSON document's tables bounded at ES_BYTES_PER_NUMBER a number, the row
 * index included (or their planned bytes a row, es_plan_json_row): ES_E_LIMIT "max_response_bytes" (saying which other format
 * fits) when that exceeds the limit. A JSON document within its bound is
 * still checked once rendered (its "input" and labels are not planned). */
int es_check_planned_size(const es_ctx *cx, const es_out_plan *p, es_err *err);

#endif
