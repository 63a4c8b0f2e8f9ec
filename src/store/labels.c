/* Labels and metadata of a matrix's items: TSV, CSV and JSON in, TSV, CSV and
 * JSON out, and search. See include/embedscope/labels.h. */
#include "embedscope/labels.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Append n bytes to b (kept NUL-terminated). Never fails. */
static void put(es_buf *b, const char *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = 2 * b->cap + n + 1;
        b->s = es_realloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = '\0';
}

/* Rows of cells as read, before the header is taken off. */
typedef struct grid {
    char **cells;
    size_t n, cap;
    size_t *start, *line; /* per row: its first cell, the line it starts on */
    size_t rows, rows_cap;
} grid;

static void grid_row(grid *g, size_t line)
{
    if (g->rows == g->rows_cap) {
        g->rows_cap = g->rows_cap ? 2 * g->rows_cap : 64;
        g->start = es_realloc(g->start, g->rows_cap * sizeof *g->start);
        g->line = es_realloc(g->line, g->rows_cap * sizeof *g->line);
    }
    g->start[g->rows] = g->n;
    g->line[g->rows++] = line;
}

static void grid_cell(grid *g, const char *p, size_t len)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 256;
        g->cells = es_realloc(g->cells, g->cap * sizeof *g->cells);
    }
    char *c = es_malloc(len + 1);
    memcpy(c, p, len);
    c[len] = '\0';
    g->cells[g->n++] = c;
}

static size_t grid_width(const grid *g, size_t r)
{
    return (r + 1 < g->rows ? g->start[r + 1] : g->n) - g->start[r];
}

static void grid_free(grid *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->cells[i]);
    free(g->cells);
    free(g->start);
    free(g->line);
}

/* The offset of the first byte of text that is not valid UTF-8 (or a NUL,
 * which no cell may hold), or len when there is none. */
static size_t utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (c == 0 || n == 0 || (n == 2 && c < 0xC2) || (n == 4 && c > 0xF4) || i + n > len)
            return i;
        unsigned cp = n == 1 ? c : c & (0x7F >> n);
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return i;
        i += n;
    }
    return len;
}

/* The 1-based line of byte offset at in text. */
static size_t line_of(const char *text, size_t at)
{
    size_t line = 1;
    for (size_t i = 0; i < at; i++)
        line += text[i] == '\n';
    return line;
}

/* TSV: cells split at tabs, lines at \n with a \r before it dropped; a last
 * empty line (the file's final newline) ends the file. */
static void read_tsv(const char *text, size_t len, grid *g)
{
    const char *p = text, *end = text + len;
    size_t line = 1;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
        size_t l = (size_t)(e - p);
        if (l && p[l - 1] == '\r')
            l--;
        grid_row(g, line++);
        const char *c = p, *stop = p + l;
        for (;;) {
            const char *tab = memchr(c, '\t', (size_t)(stop - c));
            grid_cell(g, c, (size_t)((tab ? tab : stop) - c));
            if (!tab)
                break;
            c = tab + 1;
        }
        p = nl ? nl + 1 : end;
    }
}

/* One RFC 4180 quoted cell starting at *pp (on the quote) into buf; *line
 * counts the line breaks inside. -1 when the quote is not closed or is
 * followed by something else than a comma or a line end. */
static int read_quoted(const char **pp, const char *end, es_buf *buf, size_t *line)
{
    const char *p = *pp + 1;
    for (;;) {
        if (p >= end)
            return -1;
        if (*p == '"') {
            if (p + 1 < end && p[1] == '"') {
                put(buf, "\"", 1);
                p += 2;
                continue;
            }
            p++;
            break;
        }
        *line += *p == '\n';
        put(buf, p++, 1);
    }
    *pp = p;
    bool crlf = p + 1 < end && p[0] == '\r' && p[1] == '\n';
    return p == end || *p == ',' || *p == '\n' || crlf || (p + 1 == end && *p == '\r') ? 0 : -1;
}

/* CSV (RFC 4180; an unquoted cell is taken as it is). -1 with the line of a
 * malformed quoted cell in *bad_line. */
static int read_csv(const char *text, size_t len, grid *g, size_t *bad_line)
{
    const char *p = text, *end = text + len;
    size_t line = 1;
    es_buf buf;
    es_buf_init(&buf, 64);
    int rc = 0;
    while (rc == 0 && p < end) {
        grid_row(g, line);
        for (;;) {
            buf.len = 0;
            if (p < end && *p == '"') {
                size_t at = line;
                if (read_quoted(&p, end, &buf, &line) < 0) {
                    *bad_line = at;
                    rc = -1;
                    break;
                }
            } else {
                const char *s = p;
                while (p < end && *p != ',' && *p != '\n')
                    p++;
                size_t l = (size_t)(p - s);
                if (l && s[l - 1] == '\r' && (p == end || *p == '\n'))
                    l--;
                put(&buf, s, l);
            }
            grid_cell(g, buf.s, buf.len);
            if (p < end && *p == ',') {
                p++;
                continue;
            }
            if (p < end && *p == '\r')
                p++;
            if (p < end && *p == '\n') {
                p++;
                line++;
            }
            break;
        }
    }
    free(buf.s);
    return rc;
}

static es_labels *labels_new(size_t n_rows, size_t n_cols)
{
    es_labels *l = es_calloc(1, sizeof *l);
    l->n_rows = n_rows;
    l->n_cols = n_cols;
    l->names = es_calloc(n_cols ? n_cols : 1, sizeof *l->names);
    l->cells = es_calloc(n_rows * n_cols + 1, sizeof *l->cells);
    l->numeric = es_calloc(n_cols ? n_cols : 1, sizeof *l->numeric);
    l->refs = 1;
    return l;
}

/* Is text a finite plain decimal number ([+-]digits[.digits][e[+-]digits])? */
static bool is_number(const char *text)
{
    if (!*text || !(isdigit((unsigned char)*text) || strchr("+-.", *text)) || strpbrk(text, "xXnNiI"))
        return false;
    char *end;
    double v = strtod(text, &end);
    return *end == '\0' && isfinite(v);
}

/* Check the column names, find the numeric columns, count the bytes and hash
 * the canonical text. */
static int labels_finish(es_labels *l, const char *param, es_err *err)
{
    if (l->n_cols == 0)
        return es_fail(err, ES_E_PARAM, param, "the labels have no column");
    if (l->n_cols > ES_LABELS_MAX_COLUMNS)
        return es_fail(err, ES_E_PARAM, param, "the labels have %zu columns, at most %d are allowed", l->n_cols,
                       ES_LABELS_MAX_COLUMNS);
    for (size_t c = 0; c < l->n_cols; c++) {
        size_t len = strlen(l->names[c]);
        if (len == 0 || len > ES_LABELS_MAX_NAME)
            return es_fail(err, ES_E_PARAM, param, "column %zu: a column name holds 1 to %d bytes, got %zu", c + 1,
                           ES_LABELS_MAX_NAME, len);
        for (size_t k = 0; k < c; k++)
            if (strcmp(l->names[k], l->names[c]) == 0)
                return es_fail(err, ES_E_PARAM, param, "column %zu: the column name \"%.64s\" is repeated", c + 1,
                               l->names[c]);
        l->bytes += len;
        l->numeric[c] = l->n_rows > 0;
        for (size_t r = 0; r < l->n_rows; r++) {
            const char *cell = l->cells[r * l->n_cols + c];
            l->numeric[c] = l->numeric[c] && is_number(cell);
            l->bytes += strlen(cell);
        }
    }
    size_t len;
    char *text = es_labels_text(l, ES_LABELS_JSON, false, &len);
    es_sha256_hex(text, len, l->sha256);
    free(text);
    return 0;
}

/* Labels from the rows of a TSV or CSV file: a header unless there is one
 * column; every row as wide as the first. */
static int from_grid(grid *g, size_t n_rows, const char *param, es_labels **out, es_err *err)
{
    size_t width = g->rows ? grid_width(g, 0) : 0;
    bool header = width > 1;
    size_t items = g->rows - (header ? 1 : 0);
    for (size_t r = 1; r < g->rows; r++)
        if (grid_width(g, r) != width)
            return es_fail(err, ES_E_PARAM, param, "line %zu: %zu cells, the %s has %zu", g->line[r],
                           grid_width(g, r), header ? "header" : "first line", width);
    if (items != n_rows)
        return es_fail(err, ES_E_PARAM, param, "%zu rows of labels%s, the matrix has %zu rows (items): one line per "
                       "item%s", items, header ? " after the header" : "", n_rows,
                       header ? ", after a header naming the columns" : " (a file of one column has no header)");
    es_labels *l = labels_new(items, width);
    for (size_t c = 0; c < width; c++) {
        l->names[c] = header ? g->cells[c] : es_strdup(ES_LABELS_DEFAULT_COLUMN);
        if (header)
            g->cells[c] = NULL;
    }
    for (size_t i = 0; i < items * width; i++) {
        l->cells[i] = g->cells[(header ? width : 0) + i];
        g->cells[(header ? width : 0) + i] = NULL;
    }
    if (labels_finish(l, param, err) < 0) {
        es_labels_release(l);
        return -1;
    }
    *out = l;
    return 0;
}

/* One JSON cell as text: a string, a number (integers exactly, reals to 17
 * digits) or null (""). NULL for anything else. */
static char *json_cell(const json_t *v)
{
    if (json_is_string(v))
        return es_strdup(json_string_value(v));
    if (json_is_integer(v))
        return es_asprintf("%lld", (long long)json_integer_value(v));
    if (json_is_real(v))
        return es_asprintf("%.17g", json_real_value(v));
    return json_is_null(v) ? es_strdup("") : NULL;
}

/* {"columns": {NAME: [..]}} (with "rows" and "numeric", as GET gives them, allowed). */
static int from_json(const char *text, size_t len, size_t n_rows, const char *param, es_labels **out, es_err *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return es_fail(err, ES_E_PARAM, param, "not JSON: %s at line %d column %d (byte %d)", jerr.text, jerr.line,
                       jerr.column, jerr.position);
    json_t *cols = json_object_get(root, "columns");
    const char *key;
    json_t *v;
    int rc = 0;
    if (!json_is_object(root) || !json_is_object(cols))
        rc = es_fail(err, ES_E_PARAM, param, "expected {\"columns\": {NAME: [one value per row], ...}}");
    json_object_foreach(root, key, v) {
        if (rc == 0 && strcmp(key, "columns") != 0 && strcmp(key, "rows") != 0 && strcmp(key, "numeric") != 0)
            rc = es_fail(err, ES_E_PARAM, param, "unknown member \"%.64s\" (allowed: columns, rows, numeric)", key);
    }
    es_labels *l = rc == 0 ? labels_new(n_rows, json_object_size(cols)) : NULL;
    size_t c = 0;
    json_object_foreach(cols, key, v) {
        if (rc != 0 || c >= ES_LABELS_MAX_COLUMNS)
            break;
        l->names[c] = es_strdup(key);
        if (!json_is_array(v) || json_array_size(v) != n_rows)
            rc = es_fail(err, ES_E_PARAM, param, "columns.%.64s: expected an array of %zu values (one per row of the "
                         "matrix), got %s%zu", key, n_rows, json_is_array(v) ? "" : "no array, size ",
                         json_is_array(v) ? json_array_size(v) : (size_t)0);
        for (size_t r = 0; rc == 0 && r < n_rows; r++)
            if (!(l->cells[r * l->n_cols + c] = json_cell(json_array_get(v, r))))
                rc = es_fail(err, ES_E_PARAM, param, "columns.%.64s[%zu] (row %zu): expected a string, a number or "
                             "null", key, r, r);
        c++;
    }
    for (size_t i = 0; rc == 0 && i < n_rows * (l ? l->n_cols : 0); i++)
        if (!l->cells[i])
            l->cells[i] = es_strdup("");
    if (rc == 0)
        rc = labels_finish(l, param, err);
    json_decref(root);
    if (rc < 0) {
        es_labels_release(l);
        return -1;
    }
    *out = l;
    return 0;
}

/* See labels.h. */
int es_labels_parse(const char *text, size_t len, es_labels_format fmt, size_t n_rows, size_t max_bytes,
                    const char *param, const char *limit_name, es_labels **out, es_err *err)
{
    if (len > max_bytes)
        return es_fail(err, ES_E_LIMIT, limit_name, "the labels hold %zu bytes, above %s = %zu", len, limit_name,
                       max_bytes);
    if (fmt == ES_LABELS_JSON)
        return from_json(text, len, n_rows, param, out, err);
    size_t bad = utf8_invalid_at((const unsigned char *)text, len);
    if (bad < len)
        return es_fail(err, ES_E_PARAM, param, "line %zu (byte %zu): %s", line_of(text, bad), bad,
                       text[bad] ? "not valid UTF-8" : "a NUL byte");
    grid g = {0};
    size_t bad_line = 0;
    int rc = 0;
    if (fmt == ES_LABELS_TSV)
        read_tsv(text, len, &g);
    else if (read_csv(text, len, &g, &bad_line) < 0)
        rc = es_fail(err, ES_E_PARAM, param, "line %zu: a quoted cell is not closed, or its closing quote is "
                     "followed by something else than a comma or a line end", bad_line);
    if (rc == 0)
        rc = from_grid(&g, n_rows, param, out, err);
    grid_free(&g);
    return rc;
}

/* ---------------------------------------------------------------- output */

/* One cell of a delimited file: TSV turns tabs and line breaks into spaces;
 * CSV quotes a cell holding a comma, a quote, a line break or outer blanks,
 * and a text cell (text: not of a numeric column) that a spreadsheet would
 * run as a formula (it starts with = + - @, a tab or a carriage return) gets
 * a leading ' (OWASP's CSV injection rule). TSV stays verbatim: it is the
 * machine format (the dashboard and the Projector read it). */
static void put_cell(es_buf *b, const char *cell, es_labels_format fmt, bool text)
{
    bool formula = fmt == ES_LABELS_CSV && text && *cell && strchr("=+-@\t\r", *cell);
    size_t len = strlen(cell);
    if (fmt == ES_LABELS_TSV) {
        for (const char *p = cell; *p; p++)
            put(b, strchr("\t\r\n", *p) ? " " : p, 1);
        return;
    }
    bool quote = strpbrk(cell, ",\"\r\n") || (len && (isspace((unsigned char)cell[0]) ||
                                                       isspace((unsigned char)cell[len - 1])));
    if (!quote) {
        if (formula)
            put(b, "'", 1);
        put(b, cell, len);
        return;
    }
    put(b, "\"", 1);
    if (formula) /* inside the quotes: a ' before them would make the field unquoted */
        put(b, "'", 1);
    for (const char *p = cell; *p; p++)
        put(b, *p == '"' ? "\"\"" : p, *p == '"' ? 2 : 1);
    put(b, "\"", 1);
}

/* A row of cells (n of them, stride apart) and its line end. */
static void put_row(es_buf *b, char *const *cells, size_t n, const bool *numeric, es_labels_format fmt)
{
    for (size_t c = 0; c < n; c++) {
        if (c)
            put(b, fmt == ES_LABELS_TSV ? "\t" : ",", 1);
        put_cell(b, cells[c], fmt, !(numeric && numeric[c]));
    }
    put(b, fmt == ES_LABELS_TSV ? "\n" : "\r\n", fmt == ES_LABELS_TSV ? 1 : 2);
}

/* A numeric cell as a JSON number: an integer when it is one, else a real. */
static json_t *json_number_of(const char *cell)
{
    char *end;
    long long i = strtoll(cell, &end, 10);
    return *end == '\0' ? json_integer(i) : json_real(strtod(cell, NULL));
}

static char *labels_json(const es_labels *l, bool typed, size_t *len)
{
    json_t *root = json_object(), *cols = json_object(), *numeric = json_array();
    json_object_set_new(root, "rows", json_integer((json_int_t)l->n_rows));
    for (size_t c = 0; c < l->n_cols; c++) {
        json_t *a = json_array();
        bool as_number = typed && l->numeric[c];
        for (size_t r = 0; r < l->n_rows; r++) {
            const char *cell = l->cells[r * l->n_cols + c];
            json_array_append_new(a, as_number ? json_number_of(cell) : json_string(cell));
        }
        json_object_set_new(cols, l->names[c], a);
        if (l->numeric[c])
            json_array_append_new(numeric, json_string(l->names[c]));
    }
    json_object_set_new(root, "columns", cols);
    json_object_set_new(root, "numeric", numeric);
    char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!text)
        abort(); /* jansson fails only when memory is exhausted, where es_malloc aborts too */
    *len = strlen(text);
    return text;
}

/* See labels.h. */
char *es_labels_text(const es_labels *l, es_labels_format fmt, bool typed, size_t *len)
{
    if (fmt == ES_LABELS_JSON)
        return labels_json(l, typed, len);
    es_buf b;
    es_buf_init(&b, 4096);
    if (l->n_cols > 1)
        put_row(&b, l->names, l->n_cols, NULL, fmt);
    for (size_t r = 0; r < l->n_rows; r++)
        put_row(&b, l->cells + r * l->n_cols, l->n_cols, l->numeric, fmt);
    *len = b.len;
    return b.s;
}

/* See labels.h. */
long es_labels_column(const es_labels *l, const char *name)
{
    for (size_t c = 0; c < l->n_cols; c++)
        if (strcmp(l->names[c], name) == 0)
            return (long)c;
    return -1;
}

/* See labels.h. */
es_labels *es_labels_retain(es_labels *l)
{
    if (l)
        __atomic_add_fetch(&l->refs, 1, __ATOMIC_RELAXED);
    return l;
}

/* See labels.h. */
void es_labels_release(es_labels *l)
{
    if (!l || __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (size_t i = 0; i < l->n_rows * l->n_cols; i++)
        free(l->cells[i]);
    for (size_t c = 0; c < l->n_cols; c++)
        free(l->names[c]);
    free(l->cells);
    free(l->names);
    free(l->numeric);
    free(l);
}

/* ---------------------------------------------------------------- search */

/* A cell's match is bounded whatever the pattern: these limits refuse (400)
 * what would need more. The pattern is matched once per cell from its start,
 * anchored behind a lazy "any text" prefix, so the match limit bounds the
 * whole cell (PCRE2 resets its count at every start position of an
 * unanchored search: a pattern just under the limit at each of 60,000
 * positions would run for minutes). */
#define MATCH_LIMIT 1000000     /* backtracking steps per cell (JIT: about 0.1 s) */
#define DEPTH_LIMIT 10000       /* nested backtracking points (the interpreter's) */
#define HEAP_LIMIT_KIB 20480    /* the interpreter's backtracking memory per cell */
#define JIT_STACK_BYTES 1048576
#define QUOTE(x) #x
#define TEXT_OF(x) QUOTE(x)

/* See labels.h. */
int es_labels_check_query(const char *query, es_err *err)
{
    size_t len = strlen(query);
    if (len > ES_LABELS_MAX_QUERY)
        return es_fail(err, ES_E_PARAM, "q", "the query holds %zu bytes, at most %d are allowed", len,
                       ES_LABELS_MAX_QUERY);
    return 0;
}

/* A compiled search, and what matching it needs; NULL code: a plain
 * substring search (strstr). */
typedef struct matcher {
    pcre2_code *code;
    pcre2_match_context *mc;
    pcre2_jit_stack *stack;
    pcre2_match_data *md;
} matcher;

static void matcher_free(matcher *m)
{
    pcre2_match_data_free(m->md);
    pcre2_jit_stack_free(m->stack);
    pcre2_match_context_free(m->mc);
    pcre2_code_free(m->code);
}

/* Compile text with options: ES_E_PARAM naming "q" with PCRE2's message. */
static int compile(const char *text, uint32_t options, const char *what, pcre2_code **out, es_err *err)
{
    int code;
    PCRE2_SIZE at;
    if (!(options & PCRE2_LITERAL)) /* a literal takes no other option */
        options |= PCRE2_NEVER_BACKSLASH_C; /* \C would split a UTF-8 character */
    *out = pcre2_compile((PCRE2_SPTR)text, PCRE2_ZERO_TERMINATED, options | PCRE2_UTF, &code, &at, NULL);
    if (*out)
        return 0;
    PCRE2_UCHAR why[160];
    pcre2_get_error_message(code, why, sizeof why);
    return es_fail(err, ES_E_PARAM, "q", "%s: %s (at byte %zu)", what, (const char *)why, (size_t)at);
}

/* The matcher of query: NULL code for a case-sensitive substring; a literal
 * for a case-insensitive one; else the pattern, checked alone (so its
 * errors are its own), then compiled behind "(?s:.*?)" anchored. */
static int matcher_new(const char *query, unsigned flags, matcher *m, es_err *err)
{
    *m = (matcher){0};
    uint32_t caseless = flags & ES_SEARCH_CASELESS ? PCRE2_CASELESS : 0;
    if (!(flags & ES_SEARCH_REGEX)) {
        if (!caseless)
            return 0;
        if (compile(query, PCRE2_LITERAL | caseless, "not a searchable text", &m->code, err) < 0)
            return -1;
    } else {
        if (compile(query, caseless, "not a regular expression (PCRE2 syntax)", &m->code, err) < 0)
            return -1;
        pcre2_code_free(m->code);
        char *wrapped = es_asprintf("(?s:.*?)(?:%s)", query);
        int rc = compile(wrapped, PCRE2_ANCHORED | caseless, "not a regular expression that can be searched for",
                         &m->code, err);
        free(wrapped);
        if (rc < 0)
            return -1;
    }
    pcre2_jit_compile(m->code, PCRE2_JIT_COMPLETE); /* where JIT is missing, the interpreter matches */
    m->mc = pcre2_match_context_create(NULL);
    m->stack = pcre2_jit_stack_create(32 * 1024, JIT_STACK_BYTES, NULL);
    m->md = pcre2_match_data_create(1, NULL);
    if (!m->mc || !m->stack || !m->md)
        abort(); /* PCRE2 fails only when memory is exhausted, where es_malloc aborts too */
    pcre2_set_match_limit(m->mc, MATCH_LIMIT);
    pcre2_set_depth_limit(m->mc, DEPTH_LIMIT);
    pcre2_set_heap_limit(m->mc, HEAP_LIMIT_KIB);
    pcre2_jit_stack_assign(m->mc, NULL, m->stack);
    return 0;
}

/* Does row's cell match? -1 with ES_E_PARAM naming "q" and the limit when
 * matching it needs more than the limits allow. */
static int matches(const matcher *m, const char *query, const char *cell, size_t row, es_err *err)
{
    if (!m->code)
        return strstr(cell, query) != NULL;
    /* cells are valid UTF-8 (es_labels_parse) */
    int rc = pcre2_match(m->code, (PCRE2_SPTR)cell, strlen(cell), 0, PCRE2_NO_UTF_CHECK, m->md, m->mc);
    if (rc >= 0)
        return 1;
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    const char *limit = rc == PCRE2_ERROR_MATCHLIMIT   ? "match limit (" TEXT_OF(MATCH_LIMIT) " backtracking steps per cell)"
                        : rc == PCRE2_ERROR_DEPTHLIMIT ? "depth limit (" TEXT_OF(DEPTH_LIMIT) " nested backtracking points)"
                        : rc == PCRE2_ERROR_HEAPLIMIT  ? "heap limit (" TEXT_OF(HEAP_LIMIT_KIB) " KiB per cell)"
                        : rc == PCRE2_ERROR_JIT_STACKLIMIT ? "stack limit (" TEXT_OF(JIT_STACK_BYTES) " bytes)"
                                                       : NULL;
    if (limit)
        return es_fail(err, ES_E_PARAM, "q", "matching the pattern against row %zu's cell (%zu bytes) needs more "
                       "than the search's %s: simplify the pattern (nested or alternated repetitions backtrack)",
                       row, strlen(cell), limit);
    PCRE2_UCHAR why[160];
    pcre2_get_error_message(rc, why, sizeof why);
    return es_fail(err, ES_E_PARAM, "q", "the pattern cannot be matched against row %zu's cell: %s", row,
                   (const char *)why);
}

/* See labels.h. */
int es_labels_search(const es_labels *l, size_t col, const char *query, unsigned flags, size_t limit, size_t *idx,
                     size_t *n_found, size_t *total, es_err *err)
{
    matcher m;
    if (es_labels_check_query(query, err) < 0 || matcher_new(query, flags, &m, err) < 0)
        return -1;
    *n_found = *total = 0;
    int rc = 0;
    for (size_t r = 0; r < l->n_rows && rc == 0; r++) {
        /* a safe point between cells: a pattern's match is bounded per cell, not per column */
        if ((m.code || r % 4096 == 0) && (rc = es_progress_check(err)) < 0)
            break;
        int hit = matches(&m, query, l->cells[r * l->n_cols + col], r, err);
        if (hit < 0)
            rc = -1;
        else if (hit) {
            if (*n_found < limit)
                idx[(*n_found)++] = r;
            (*total)++;
        }
    }
    matcher_free(&m);
    return rc;
}
