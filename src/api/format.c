/* Representations of an analysis result (es_out): the JSON document (default,
 * the shapes clients know), one of its typed tables as column JSON
 * (?orient=columns: {"<index>": [...], "<column>": [...], ...}, which
 * pd.DataFrame reads directly), CSV (header row, index column first) or NPY
 * (float64 little-endian, the table's values; one column gives a 1-D array).
 * The format comes from ?format= or, without it, from Accept (q-values); the
 * table from ?table= (default: the result's main table, its first). */
#include "embedscope/cost.h"
#include "embedscope/descriptor.h"
#include "embedscope/format.h"
#include "embedscope/params.h"
#include "embedscope/pool.h"
#include "embedscope/render.h"
#include "embedscope/route.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const es_format_names[ES_FMT_COUNT + 1] = {"json", "csv", "npy", NULL};
static const char *const media_types[ES_FMT_COUNT] = {"application/json", "text/csv", "application/x-npy"};
static const char *const content_types[ES_FMT_COUNT] = {"application/json", "text/csv; charset=utf-8; header=present",
                                                        "application/x-npy"};
const char *const es_orients[] = {"nested", "columns", NULL};

/* See format.h. */
es_table *es_out_records(es_out *out, const char *name, const char *index, const char *units,
                         const char *const *names, const double *const *columns, size_t ncols, size_t n)
{
    es_table *t = es_out_table(out, name, index, units, n, ncols);
    es_table_columns(t, names, NULL, 0);
    for (size_t i = 0; i < n; i++) {
        t->index_values[i] = (double)i;
        for (size_t j = 0; j < ncols; j++)
            t->values[i * ncols + j] = columns[j][i];
    }
    return t;
}

/* See format.h. */
double *es_sizes_as_doubles(const size_t *v, size_t n)
{
    double *d = es_malloc((n ? n : 1) * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = (double)v[i];
    return d;
}

/* See format.h. */
void es_out_toeplitz(es_out *out, const es_toeplitz *t)
{
    size_t n = 2 * t->span + 1;
    double *count = es_sizes_as_doubles(t->diag_count, n);
    es_table *tab = es_out_records(out, "diagonals", "offset", "mean / count", (const char *const[]){"mean", "count"},
                            (const double *const[]){t->diag_mean, count}, 2, n);
    for (size_t i = 0; i < n; i++)
        tab->index_values[i] = (double)i - (double)t->span;
    free(count);
}

/* ---------------------------------------------------------------- tables */

es_table *es_out_table(es_out *out, const char *name, const char *index, const char *units, size_t rows,
                       size_t cols)
{
    if (out->n_tables == ES_TABLES_MAX)
        abort(); /* a descriptor with more tables than ES_TABLES_MAX: a programming error */
    es_table *t = &out->tables[out->n_tables++];
    *t = (es_table){.name = name, .index = index, .units = units, .rows = rows, .cols = cols,
                    .index_values = es_calloc(rows ? rows : 1, sizeof(double)),
                    .values = es_calloc(rows && cols ? rows * cols : 1, sizeof(double)),
                    .col_names = es_calloc(cols ? cols : 1, sizeof(char *)),
                    .labels = es_calloc(cols ? cols : 1, sizeof(es_label_fn *))};
    return t;
}

void es_table_columns(es_table *t, const char *const *names, const char *prefix, size_t first)
{
    for (size_t j = 0; j < t->cols; j++)
        t->col_names[j] = names ? es_strdup(names[j]) : es_asprintf("%s%zu", prefix, j + first);
}

es_table *es_out_column(es_out *out, const char *name, const char *index, const char *units, const double *v,
                        const size_t *idx, size_t n)
{
    es_table *t = es_out_table(out, name, index, units, n, 1);
    const char *const names[] = {name};
    es_table_columns(t, names, NULL, 0);
    for (size_t i = 0; i < n; i++) {
        t->index_values[i] = idx ? (double)idx[i] : (double)i;
        t->values[i] = v[i];
    }
    return t;
}

es_table *es_out_grid(es_out *out, const char *name, const char *units, es_grid *g, const char *prefix)
{
    es_table *t = es_out_table(out, name, "row_start", units, g->rows, g->cols);
    for (size_t j = 0; j < g->cols; j++)
        t->col_names[j] = es_asprintf("%s%zu", prefix, g->col_edges[j]);
    for (size_t i = 0; i < g->rows; i++)
        t->index_values[i] = (double)g->row_edges[i];
    if (g->values && g->rows && g->cols) { /* moved: a 2048 x 2048 grid is 32 MiB */
        free(t->values);
        t->values = g->values;
        g->values = NULL;
    }
    return t;
}

void es_out_free(es_out *out)
{
    for (size_t i = 0; i < out->n_tables; i++) {
        es_table *t = &out->tables[i];
        for (size_t j = 0; j < t->cols; j++)
            free(t->col_names[j]);
        free(t->col_names);
        free(t->labels);
        free(t->values);
        free(t->index_values);
    }
    out->n_tables = 0;
    json_decref(out->root);
    out->root = NULL;
}

/* ---------------------------------------------------------------- negotiation */

/* The quality Accept gives media type `type` (exact, type/ *, * / *): the
 * most specific range wins; 0 when none matches. No Accept: 1. */
static double accept_quality(const char *accept, const char *type)
{
    if (!accept || !*accept)
        return 1;
    double q = 0;
    int best = -1;
    const char *p = accept;
    while (*p) {
        size_t len = strcspn(p, ",");
        char item[160];
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item - 1 ? len : sizeof item - 1), p);
        p += len + (p[len] == ',');
        char *range = item + strspn(item, " \t"), *params = strchr(range, ';');
        if (params)
            *params++ = '\0';
        range[strcspn(range, " \t")] = '\0';
        double quality = 1;
        for (char *s = params; s && *s;) {
            s += strspn(s, " \t;");
            if ((s[0] == 'q' || s[0] == 'Q') && s[1] == '=')
                quality = strtod(s + 2, NULL);
            s = strchr(s, ';');
        }
        size_t slash = strcspn(type, "/");
        int specificity = strcasecmp(range, type) == 0                                            ? 2
                          : strncasecmp(range, type, slash + 1) == 0 && strcmp(range + slash + 1, "*") == 0 ? 1
                          : strcmp(range, "*/*") == 0                                               ? 0
                                                                                                    : -1;
        if (specificity > best) {
            best = specificity;
            q = isfinite(quality) && quality > 0 ? (quality > 1 ? 1 : quality) : 0;
        }
    }
    return q;
}

/* "json, csv" of the formats in mask. */
static void format_list(unsigned mask, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int f = 0; f < ES_FMT_COUNT; f++)
        if (mask & (1u << f))
            len += (size_t)snprintf(buf + len, size - len, "%s%s (%s)", len ? ", " : "", es_format_names[f],
                                    media_types[f]);
}

/* Table i of those a can produce (a->tables; for compare, those of every
 * comparable analysis, in table order), or NULL past the last. */
static const char *table_name(const es_analysis *a, size_t i)
{
    const es_analysis *const self[] = {a, NULL};
    for (const es_analysis *const *c = a->gathers ? a->gathers : self; *c; c++) {
        if (a->gathers && !(*c)->comparable)
            continue;
        for (size_t t = 0; (*c)->tables && (*c)->tables[t]; t++)
            if (i-- == 0)
                return (*c)->tables[t];
    }
    return NULL;
}

/* Parse ?format=, ?orient=, ?table= and Accept into cx->render; see format.h. */
int es_negotiate(es_ctx *cx, const es_analysis *a, es_err *err)
{
    unsigned mask = 1u << ES_FMT_JSON | (table_name(a, 0) ? 1u << ES_FMT_CSV | 1u << ES_FMT_NPY : 0);
    char supported[160];
    format_list(mask, supported, sizeof supported);
    size_t f = ES_FMT_JSON, orient = 0;
    const char *const names[] = {es_format_names[0], es_format_names[1], es_format_names[2], NULL};
    if (es_query_get(cx->query, "format")) {
        if (es_param_choice(cx->query, "format", names, ES_FMT_JSON, &f, err) < 0)
            return -1;
        if (!(mask & (1u << f)))
            return es_fail(err, ES_E_UNACCEPTABLE, "format", "format=%s is not produced here; supported: %s",
                           es_format_names[f], supported);
    } else {
        double best = 0;
        for (int i = 0; i < ES_FMT_COUNT; i++) {
            double q = (mask & (1u << i)) ? accept_quality(cx->accept, media_types[i]) : 0;
            if (q > best) {
                best = q;
                f = (size_t)i;
            }
        }
        if (best == 0)
            return es_fail(err, ES_E_UNACCEPTABLE, "", "no representation acceptable to 'Accept: %.100s'; "
                           "supported: %s (or ask with ?format=)", cx->accept, supported);
    }
    if (es_param_choice(cx->query, "orient", es_orients, 0, &orient, err) < 0)
        return -1;
    if (orient && f != ES_FMT_JSON)
        return es_fail(err, ES_E_PARAM, "orient", "orient applies to JSON only (format=json)");
    const char *table = es_query_get(cx->query, "table");
    if (table && !es_analysis_has_table(a, table)) {
        es_buf list;
        es_buf_init(&list, 64);
        for (size_t i = 0; table_name(a, i); i++)
            es_buf_printf(&list, "%s%s", i ? ", " : "", table_name(a, i));
        int rc = es_fail(err, ES_E_PARAM, "table", "table='%.64s': expected one of: %s", table,
                         list.len ? list.s : "none (this result has no tables)");
        free(list.s);
        return rc;
    }
    cx->render = (es_render_opts){.format = (es_format)f, .columns = orient == 1, .table = table};
    return 0;
}

bool es_analysis_has_table(const es_analysis *a, const char *name)
{
    for (size_t i = 0; table_name(a, i); i++)
        if (strcmp(table_name(a, i), name) == 0)
            return true;
    return false;
}

size_t es_render_params(const es_analysis *a, const char **names, size_t n, size_t cap)
{
    static const char *const all[] = {"format", "orient", "table"};
    for (size_t i = 0; i < (table_name(a, 0) ? 3u : 1u) && n < cap - 1; i++)
        names[n++] = all[i];
    names[n] = NULL;
    return n;
}

void es_render_key(const es_render_opts *r, es_buf *b)
{
    es_buf_printf(b, "|format=%s|orient=%s|table=%s", es_format_names[r->format], es_orients[r->columns ? 1 : 0],
                  r->table ? r->table : "");
}

/* ---------------------------------------------------------------- bodies */

/* The table the request asked for (or the main one). ES_E_PARAM naming
 * "table" when this result does not hold it, or holds none. */
static int chosen_table(const es_out *out, const es_render_opts *r, const es_table **t, es_err *err)
{
    for (size_t i = 0; i < out->n_tables; i++)
        if (!r->table || strcmp(out->tables[i].name, r->table) == 0) {
            *t = &out->tables[i];
            return 0;
        }
    es_buf list;
    es_buf_init(&list, 64);
    for (size_t i = 0; i < out->n_tables; i++)
        es_buf_printf(&list, "%s%s", i ? ", " : "", out->tables[i].name);
    int rc = es_fail(err, ES_E_PARAM, "table", "this result has %s%s", list.len ? "the tables: " : "no table",
                     list.s);
    free(list.s);
    return rc;
}

/* The name of label column j's code v (NaN, missing: NULL). */
static const char *label_of(const es_table *t, size_t j, double v)
{
    return isnan(v) ? NULL : t->labels[j]((size_t)v);
}

/* text as a JSON string, escaped as jansson escapes (invalid UTF-8 as es_jstr replaces it). */
static void json_text(es_buf *b, const char *text)
{
    json_t *str = es_jstr(text ? text : "");
    char *enc = json_dumps(str, JSON_ENCODE_ANY | JSON_COMPACT);
    es_buf_add(b, enc, strlen(enc));
    free(enc);
    json_decref(str);
}

/* A number as JSON, written without printf (es_dtoa: jansson's layout, the fewest digits that read back). */
static void json_number(es_buf *b, double v)
{
    es_buf_reserve(b, ES_DTOA_MAX);
    b->len += es_dtoa(v, ES_NUM_JSON, b->s + b->len);
    b->s[b->len] = '\0';
}

/* An index value: an integer when it is one (indices, offsets, bin starts), else a number. */
static void json_index(es_buf *b, double v)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0) { /* below 2^53 es_dtoa writes an integer's digits */
        es_buf_reserve(b, ES_DTOA_MAX);
        b->len += es_dtoa(v == 0 ? 0.0 : v, ES_NUM_PRINTF, b->s + b->len);
        b->s[b->len] = '\0';
    } else {
        json_number(b, v);
    }
}

/* Source s of the column JSON: the index (s = 0) or column s - 1; its name. */
static const char *source_name(const es_table *t, size_t s)
{
    return s == 0 ? t->index : t->col_names[s - 1];
}

/* {"<index>": [...], "<col>": [...], ...} written straight into b, with
 * jansson's object semantics for a repeated name (its first place, the last
 * values). Cells: null when missing, a label column's name, else the number
 * (the table holds no infinity: finite_or_missing). */
static void columns_body(const es_table *t, es_buf *b)
{
    es_buf_reserve(b, (t->rows + 1) * (t->cols + 1) * 12); /* a guess at the size: fewer reallocations */
    es_buf_add(b, "{", 1);
    for (size_t s = 0; s <= t->cols; s++) {
        bool seen = false;
        for (size_t e = 0; e < s && !seen; e++)
            seen = strcmp(source_name(t, e), source_name(t, s)) == 0;
        if (seen)
            continue;
        size_t last = s; /* whose values the name ends up with */
        for (size_t l = s + 1; l <= t->cols; l++)
            if (strcmp(source_name(t, l), source_name(t, s)) == 0)
                last = l;
        if (s > 0)
            es_buf_add(b, ",", 1);
        json_text(b, source_name(t, s));
        es_buf_add(b, ":[", 2);
        for (size_t i = 0; i < t->rows; i++) {
            if (i > 0)
                es_buf_add(b, ",", 1);
            if (last == 0) {
                json_index(b, t->index_values[i]);
                continue;
            }
            size_t j = last - 1;
            double v = t->values[i * t->cols + j];
            if (isnan(v))
                es_buf_add(b, "null", 4);
            else if (t->labels[j])
                json_text(b, label_of(t, j, v));
            else
                json_number(b, v);
        }
        es_buf_add(b, "]", 1);
    }
    es_buf_add(b, "}", 1);
}

/* A CSV field: quoted when it holds a comma, quote or line break (RFC 4180). */
static void csv_field(es_buf *b, const char *text)
{
    if (strpbrk(text, ",\"\r\n") == NULL) {
        es_buf_add(b, text, strlen(text));
        return;
    }
    es_buf_add(b, "\"", 1);
    for (const char *p = text; *p; p++)
        es_buf_add(b, *p == '"' ? "\"\"" : p, *p == '"' ? 2 : 1);
    es_buf_add(b, "\"", 1);
}

/* A number as CSV: the fewest digits that read back as v, in %.17g's layout (es_dtoa). */
static void csv_number(es_buf *b, double v)
{
    es_buf_reserve(b, ES_DTOA_MAX);
    b->len += es_dtoa(v, ES_NUM_PRINTF, b->s + b->len);
    b->s[b->len] = '\0';
}

/* One CSV cell: empty when missing, a label column's name, else the number. */
static void csv_cell(es_buf *b, const es_table *t, size_t j, double v)
{
    es_buf_add(b, ",", 1);
    if (isnan(v))
        return;
    if (t->labels[j])
        csv_field(b, label_of(t, j, v));
    else
        csv_number(b, v);
}

/* The CSV text of t: header, then one line per row; numbers written without printf. */
static void csv_body(const es_table *t, es_buf *b)
{
    csv_field(b, t->index);
    for (size_t j = 0; j < t->cols; j++) {
        es_buf_add(b, ",", 1);
        csv_field(b, t->col_names[j]);
    }
    es_buf_add(b, "\r\n", 2);
    es_buf_reserve(b, t->rows * (t->cols + 1) * 12); /* a guess at the size: fewer reallocations */
    for (size_t i = 0; i < t->rows; i++) {
        csv_number(b, t->index_values[i]);
        for (size_t j = 0; j < t->cols; j++)
            csv_cell(b, t, j, t->values[i * t->cols + j]);
        es_buf_add(b, "\r\n", 2);
    }
}

/* The NPY v1.0 header of a rows x cols table (magic, version, header length,
 * dict padded to a multiple of 64 with spaces and a newline). Returns its length. */
static size_t npy_header(size_t rows, size_t cols, char out[128])
{
    char dict[100];
    int n = cols == 1 ? snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (%zu,), }",
                                 rows)
                      : snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (%zu, %zu), }",
                                 rows, cols);
    size_t total = ((size_t)n + 10 + 1 + 63) / 64 * 64, hlen = total - 10;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (char)(hlen & 0xff);
    out[9] = (char)(hlen >> 8);
    memset(out + 10, ' ', hlen);
    memcpy(out + 10, dict, (size_t)n);
    out[total - 1] = '\n';
    return total;
}

/* Bytes of the NPY body of a rows x cols table. */
static double npy_bytes(size_t rows, size_t cols)
{
    char header[128];
    return (double)npy_header(rows, cols, header) + 8.0 * (double)rows * (double)cols;
}

/* Bytes of the NPY body of t. */
static size_t npy_size(const es_table *t) { return (size_t)npy_bytes(t->rows, t->cols); }

/* The NPY body of t: header then the values as little-endian float64 (t's are
 * kept for the result's other representations, so they are copied). */
static char *npy_body(const es_table *t, size_t *len)
{
    char header[128];
    size_t h = npy_header(t->rows, t->cols, header), n = t->rows * t->cols;
    char *body = es_malloc(h + n * sizeof(double));
    memcpy(body, header, h);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(body + h, t->values, n * sizeof(double));
#else
    for (size_t i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &t->values[i], sizeof bits);
        for (int k = 0; k < 8; k++)
            body[h + i * 8 + (size_t)k] = (char)(bits >> (8 * k)); /* little-endian whatever the host */
    }
#endif
    *len = h + n * sizeof(double);
    return body;
}

/* ES_E_NUMERIC naming t if a cell is infinite (NaN marks a missing cell). */
static int finite_or_missing(const es_table *t, es_err *err)
{
    for (size_t i = 0; i < t->rows * t->cols; i++)
        if (isinf(t->values[i]))
            return es_fail(err, ES_E_NUMERIC, t->name, "non-finite value in result table '%s'", t->name);
    return 0;
}

/* What to say when the chosen body exceeds max_response_bytes: which other
 * representation of the same result would fit. */
static void oversize_hint(const es_out *out, const es_table *t, es_format chosen, size_t max, char *hint,
                          size_t size)
{
    hint[0] = '\0';
    if (!t)
        return;
    if (chosen != ES_FMT_NPY && npy_size(t) <= max) {
        snprintf(hint, size, "; format=npy%s%s would be %zu bytes and fits", out->n_tables > 1 ? "&table=" : "",
                 out->n_tables > 1 ? t->name : "", npy_size(t));
        return;
    }
    if (chosen == ES_FMT_JSON) {
        es_buf b;
        es_buf_init(&b, 4096);
        csv_body(t, &b);
        if (b.len <= max)
            snprintf(hint, size, "; format=csv would be %zu bytes and fits", b.len);
        free(b.s);
    }
}

/* ---------------------------------------------------------------- sizes before computing */

/* The longest %.17g of a double ("-1.2345678901234567e-308") and of a column name we make. */
#define NUMBER_MAX 24.0
#define NAME_MAX_BYTES 32.0

/* See format.h. */
void es_plan_table(es_out_plan *p, const char *name, size_t rows, size_t cols)
{
    if (p->n_tables == ES_TABLES_MAX)
        abort(); /* more tables than ES_TABLES_MAX: a programming error */
    p->tables[p->n_tables].name = name;
    p->tables[p->n_tables].rows = rows;
    p->tables[p->n_tables].at_most = false;
    p->tables[p->n_tables].json_row = 0;
    p->tables[p->n_tables++].cols = cols;
}

void es_plan_json_row(es_out_plan *p, double bytes)
{
    if (p->n_tables)
        p->tables[p->n_tables - 1].json_row = bytes;
}

void es_plan_table_bounded(es_out_plan *p, const char *name, size_t rows, bool exact, size_t cols)
{
    es_plan_table(p, name, rows, cols);
    p->tables[p->n_tables - 1].at_most = !exact;
}

/* CSV of a table: header, then per row its index and the values, each at most NUMBER_MAX. */
static double csv_bound(size_t rows, size_t cols)
{
    double R = (double)rows, C = (double)cols;
    return (C + 1) * (NAME_MAX_BYTES + 3) + 2 + R * ((C + 1) * (NUMBER_MAX + 1) + 2);
}

/* Column JSON of a table: per column its quoted name and the numbers with separators. */
static double columns_bound(size_t rows, size_t cols)
{
    return 2 + ((double)cols + 1) * (NAME_MAX_BYTES + 6 + (double)rows * (NUMBER_MAX + 1));
}

/* The planned size of the representation r; the table (NULL: the main one) found in the plan. */
static double planned_size(const es_out_plan *p, const es_render_opts *r, size_t *table)
{
    *table = 0;
    for (size_t i = 0; r->table && i < p->n_tables; i++)
        if (strcmp(p->tables[i].name, r->table) == 0)
            *table = i;
    size_t rows = p->tables[*table].rows, cols = p->tables[*table].cols;
    if (r->format == ES_FMT_NPY)
        return npy_bytes(rows, cols);
    if (r->format == ES_FMT_CSV)
        return csv_bound(rows, cols);
    if (r->columns)
        return columns_bound(rows, cols);
    double bytes = 0;
    for (size_t i = 0; i < p->n_tables; i++)
        bytes += (double)p->tables[i].rows *
                 fmax(p->tables[i].json_row, ((double)p->tables[i].cols + 1) * ES_BYTES_PER_NUMBER);
    return bytes;
}

/* See format.h. */
int es_check_planned_size(const es_ctx *cx, const es_out_plan *p, es_err *err)
{
    size_t max = cx->reg->limits.max_response_bytes, table;
    if (!max || p->n_tables == 0)
        return 0;
    double size = planned_size(p, &cx->render, &table);
    if (size <= (double)max)
        return 0;
    char hint[160] = "";
    es_render_opts npy = {.format = ES_FMT_NPY, .table = cx->render.table};
    double npy_size_of = planned_size(p, &npy, &table);
    if (cx->render.format != ES_FMT_NPY && npy_size_of <= (double)max)
        snprintf(hint, sizeof hint, "; format=npy%s%s would be %s%.0f bytes and fits", p->n_tables > 1 ? "&table=" : "",
                 p->n_tables > 1 ? p->tables[table].name : "", p->tables[table].at_most ? "at most " : "",
                 npy_size_of);
    const char *how = cx->render.format == ES_FMT_NPY && !p->tables[table].at_most ? "would be" : "could be up to";
    return es_fail(err, ES_E_LIMIT, "max_response_bytes", "the %s response %s %.0f bytes, more than the configured "
                   "limit max_response_bytes=%zu%s (known before computing: nothing was computed)",
                   es_format_names[cx->render.format], how, size, max, hint);
}

/* Render out (read, not consumed; without root for a table only) in the negotiated
 * representation into cx->reply. */
static int render_out(es_ctx *cx, const es_out *out, es_err *err)
{
    const es_render_opts *r = &cx->render;
    size_t max = cx->reg->limits.max_response_bytes;
    const es_table *t = NULL;
    char *body = NULL;
    size_t len = 0;
    cx->reply.vary_accept = true;
    if ((r->format != ES_FMT_JSON || r->columns || r->table) &&
        (chosen_table(out, r, &t, err) < 0 || finite_or_missing(t, err) < 0))
        return -1;
    if (r->format == ES_FMT_CSV) {
        es_buf b;
        es_buf_init(&b, 4096);
        csv_body(t, &b);
        body = b.s;
        len = b.len;
    } else if (r->format == ES_FMT_NPY) {
        body = npy_body(t, &len);
    } else if (r->columns) {
        es_buf b;
        es_buf_init(&b, 4096);
        columns_body(t, &b);
        body = b.s;
        len = b.len;
    } else if (!out->root) {
        fprintf(stderr, "embedscope: %s: a kept result rendered as a JSON document\n", cx->path);
        abort(); /* a programming error: es_gate_answer renders a kept result only as a table */
    } else if (es_json_body(out->root, 0, &body, &len, err) < 0) {
        return -1;
    }
    if (max && len > max) {
        char hint[160];
        const es_table *main = t ? t : out->n_tables ? &out->tables[0] : NULL;
        oversize_hint(out, main, r->format, max, hint, sizeof hint);
        es_fail(err, ES_E_LIMIT, "max_response_bytes", "the %s response would be %zu bytes, more than the configured "
                "limit max_response_bytes=%zu%s", es_format_names[r->format], len, max, hint);
        free(body);
        return -1;
    }
    cx->reply.status = 200;
    cx->reply.content_type = content_types[r->format];
    cx->reply.body = body;
    cx->reply.len = len;
    return 0;
}

/* A kept result's tables (an es_out without root). */
static void free_kept(void *kept)
{
    es_out_free(kept);
    free(kept);
}

/* Bytes of out's tables (what keeping them costs). */
static size_t tables_bytes(const es_out *out)
{
    size_t bytes = sizeof *out;
    for (size_t i = 0; i < out->n_tables; i++) {
        const es_table *t = &out->tables[i];
        bytes += (t->rows * (t->cols + 1) + 2 * t->cols) * sizeof(double);
        for (size_t j = 0; j < t->cols; j++)
            bytes += strlen(t->col_names[j]) + 1;
    }
    return bytes;
}

/* Move out's tables into the response cache under cx->kept_key (when the gate set one), where
 * the request's other representations are rendered from (es_reply_kept). */
static void keep_tables(es_ctx *cx, es_out *out)
{
    if (!cx->kept_key[0] || !out->n_tables)
        return;
    es_out *kept = es_calloc(1, sizeof *kept);
    kept->n_tables = out->n_tables;
    memcpy(kept->tables, out->tables, out->n_tables * sizeof *out->tables);
    out->n_tables = 0;
    es_results_keep(cx->app->results, cx->kept_key, kept, tables_bytes(kept), free_kept);
}

/* Render out in the negotiated representation into cx->reply; see format.h. */
int es_reply_out(es_ctx *cx, es_out *out, es_err *err)
{
    int rc = -1;
    cx->reply.vary_accept = true;
    if (es_jctx_check(&out->jc, err) < 0 || es_checkpoint(err) < 0) /* a safe point before rendering */
        goto done;
    rc = render_out(cx, out, err);
    keep_tables(cx, out); /* also when too large in this representation: the hint names another */
done:
    es_out_free(out);
    return rc;
}

/* See format.h. */
int es_reply_kept(es_ctx *cx, const es_out *kept, es_err *err)
{
    return render_out(cx, kept, err);
}
