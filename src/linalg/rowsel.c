/* Row selection: parsing Python slices and index lists, resolving them against a
 * matrix's item count, and the canonical text of a resolved selection.
 *
 * Text rules (decided here, documented for the API): blanks (spaces, tabs) are
 * allowed around each number, as in Python's `a[ 1 : 5 ]`; numbers are decimal with
 * an optional sign and must fit in [-LONG_MAX, LONG_MAX] (LONG_MIN is refused so
 * that every value can be negated safely). Anything else is an error. */
#include "embedscope/linalg.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest quote of user text echoed in an error message. */
#define QUOTE_MAX 80
#define LIST_SYNTAX "expected a comma-separated list of row indices >= 0"

/* The first character at or after p that is not a space or tab. */
static const char *skip_blanks(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* Fail with ES_E_PARAM naming `param`, quoting (a prefix of) the whole text. */
static int bad_text(es_err *err, const char *param, const char *text, const char *why)
{
    return es_fail(err, ES_E_PARAM, param, "%s '%.*s%s': %s", param, QUOTE_MAX, text,
                   strlen(text) > QUOTE_MAX ? "..." : "", why);
}

/* Parse one optional signed integer field occupying [p, end). Sets *present to
 * false for a field of blanks only. Fails (-1, err filled) on garbage or overflow. */
static int parse_field(const char *p, const char *end, const char *param, const char *text,
                       long *value, bool *present, es_err *err)
{
    p = skip_blanks(p);
    if (p == end) {
        *present = false;
        return 0;
    }
    const char *digits = (*p == '+' || *p == '-') ? p + 1 : p;
    if (*digits < '0' || *digits > '9')
        return bad_text(err, param, text, "expected an integer");
    errno = 0;
    char *stop;
    long v = strtol(p, &stop, 10);
    if (errno == ERANGE || v == LONG_MIN)
        return bad_text(err, param, text, "integer out of range");
    if (skip_blanks(stop) != end)
        return bad_text(err, param, text, "expected an integer");
    *value = v;
    *present = true;
    return 0;
}

/* Parse "start:stop[:step]", "" (everything) or one index "i" (the one row i,
 * negative counting from the end). Fails with ES_E_PARAM naming `param` on
 * garbage, overflow, more than two ':' or step 0. */
int es_slice_parse(const char *text, const char *param, es_slice *out, es_err *err)
{
    const char *field[3], *field_end[3];
    int nfields = 0;
    for (const char *p = text;; p++) {
        if (nfields == 3)
            return bad_text(err, param, text, "a slice has at most start:stop:step");
        field[nfields] = p;
        p += strcspn(p, ":");
        field_end[nfields++] = p;
        if (*p == '\0')
            break;
    }
    long v[3] = {0, 0, 1};
    bool present[3] = {false, false, false};
    for (int i = 0; i < nfields; i++)
        if (parse_field(field[i], field_end[i], param, text, &v[i], &present[i], err) < 0)
            return -1;
    if (present[2] && v[2] == 0)
        return bad_text(err, param, text, "slice step cannot be zero");
    es_slice s = {.start = v[0], .stop = v[1], .step = present[2] ? v[2] : 1,
                  .has_start = present[0], .has_stop = present[1]};
    if (nfields == 1 && present[0]) {
        /* One index i is the slice i:i+1, except -1 whose end is the end. */
        if (v[0] == LONG_MAX)
            return bad_text(err, param, text, "integer out of range");
        s.stop = v[0] + 1;
        s.has_stop = v[0] != -1;
    }
    *out = s;
    return 0;
}

/* Parse a comma-separated list of non-negative indices ("" or blanks = none).
 * Fails with ES_E_PARAM naming `param` on an empty item, a sign, garbage or overflow. */
int es_index_list_parse(const char *text, const char *param, size_t **out, size_t *n, es_err *err)
{
    if (*skip_blanks(text) == '\0') {
        *out = NULL;
        *n = 0;
        return 0;
    }
    size_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    size_t *idx = es_malloc(cap * sizeof *idx);
    size_t count = 0;
    for (const char *p = text;; p++) {
        const char *end = p + strcspn(p, ",");
        const char *q = skip_blanks(p);
        if (*q < '0' || *q > '9') {
            free(idx);
            return bad_text(err, param, text, LIST_SYNTAX);
        }
        errno = 0;
        char *stop;
        unsigned long long v = strtoull(q, &stop, 10);
        const char *why = skip_blanks(stop) != end ? LIST_SYNTAX
                          : errno == ERANGE || v > LONG_MAX ? "index out of range"
                                                            : NULL;
        if (why) {
            free(idx);
            return bad_text(err, param, text, why);
        }
        idx[count++] = (size_t)v;
        if (*end == '\0')
            break;
        p = end;
    }
    *out = idx;
    *n = count;
    return 0;
}

/* Python's slice.indices(n): clamp one bound into [lower, upper]. */
static long clamp_bound(long v, bool present, long dflt, long n, long lower, long upper)
{
    if (!present)
        return dflt;
    if (v < 0) {
        v += n;
        if (v < lower)
            v = lower;
    } else if (v > upper)
        v = upper;
    return v;
}

/* Number of items of range(start, stop, step) (step != 0, |step| <= LONG_MAX). */
static size_t range_length(long start, long stop, long step)
{
    if (step > 0)
        return start < stop ? (size_t)((stop - start - 1) / step) + 1 : 0;
    return start > stop ? (size_t)((start - stop - 1) / -step) + 1 : 0;
}

/* "start:stop:step" text of a slice for messages, with missing bounds left empty. */
static void slice_text(const es_slice *s, char *buf, size_t size)
{
    char a[24] = "", b[24] = "";
    if (s->has_start)
        snprintf(a, sizeof a, "%ld", s->start);
    if (s->has_stop)
        snprintf(b, sizeof b, "%ld", s->stop);
    snprintf(buf, size, "%s:%s:%ld", a, b, s->step);
}

/* Resolve a selection against n_items with Python's slice.indices semantics, in
 * slice order, then drop excluded items. Fails with ES_E_PARAM: "exclude" for an
 * excluded index >= n_items, "rows" if nothing remains or the slice step is 0. */
int es_rowsel_resolve(const es_rowsel *sel, size_t n_items, size_t **out, size_t *n, es_err *err)
{
    const es_slice *s = &sel->slice;
    const char *rows = sel->rows_param ? sel->rows_param : "rows";
    const char *exclude = sel->exclude_param ? sel->exclude_param : "exclude";
    char text[80];
    slice_text(s, text, sizeof text);
    if (s->step == 0 || s->step == LONG_MIN)
        return es_fail(err, ES_E_PARAM, rows, "%s '%s': slice step must be a non-zero integer", rows, text);
    for (size_t i = 0; i < sel->n_exclude; i++)
        if (sel->exclude[i] >= n_items)
            return es_fail(err, ES_E_PARAM, exclude, "%s: row %zu is out of range (the matrix has %zu rows)",
                           exclude, sel->exclude[i], n_items);
    long len = n_items > LONG_MAX ? LONG_MAX : (long)n_items;
    long lower = s->step > 0 ? 0 : -1, upper = s->step > 0 ? len : len - 1;
    long start = clamp_bound(s->start, s->has_start, s->step > 0 ? lower : upper, len, lower, upper);
    long stop = clamp_bound(s->stop, s->has_stop, s->step > 0 ? upper : lower, len, lower, upper);
    size_t count = range_length(start, stop, s->step);

    bool *dropped = es_calloc(n_items, sizeof *dropped);
    for (size_t i = 0; i < sel->n_exclude; i++)
        dropped[sel->exclude[i]] = true;
    size_t *idx = count ? es_malloc(count * sizeof *idx) : NULL;
    size_t kept = 0;
    for (size_t k = 0; k < count; k++) {
        size_t item = (size_t)(start + (long)k * s->step);
        if (!dropped[item])
            idx[kept++] = item;
    }
    free(dropped);
    if (kept == 0) {
        free(idx);
        return es_fail(err, ES_E_PARAM, rows, "%s '%s' with %zu excluded selects no rows of %zu", rows, text,
                       sel->n_exclude, n_items);
    }
    *out = idx;
    *n = kept;
    return 0;
}

/* Free the exclusion list of a selection (the struct itself is the caller's). */
void es_rowsel_free(es_rowsel *sel)
{
    if (!sel)
        return;
    free(sel->exclude);
    sel->exclude = NULL;
    sel->n_exclude = 0;
}

/* Append one arithmetic run first, first+step, ... (len items) as slice text:
 * "a" for one item, "a:stop" for step 1, "a:stop:step" otherwise, "a::step" for a
 * descending run that ends at 0 (a stop of -1 would mean the last row). */
static void append_run(es_buf *b, size_t first, long step, size_t len)
{
    if (b->len)
        es_buf_printf(b, ",");
    if (len == 1) {
        es_buf_printf(b, "%zu", first);
        return;
    }
    long last = (long)first + (long)(len - 1) * step;
    if (step == 1)
        es_buf_printf(b, "%zu:%ld", first, last + 1);
    else if (step > 0)
        es_buf_printf(b, "%zu:%ld:%ld", first, last + 1, step);
    else if (last == 0)
        es_buf_printf(b, "%zu::%ld", first, step);
    else
        es_buf_printf(b, "%zu:%ld:%ld", first, last - 1, step);
}

/* True if index i may be part of a run. Resolved indices are below the item
 * count, itself clamped to LONG_MAX, so they are at most LONG_MAX - 1; keeping
 * larger values (which no selection yields) out of runs keeps every step and a
 * run's stop (last + 1) within long. */
static bool runnable(size_t i) { return i < (size_t)LONG_MAX; }

/* Canonical text of a sequence of indices (order matters: it is the row order of
 * the decomposition). Greedy left to right: the longest arithmetic run of at least
 * 3 items (non-zero step, all runnable) becomes one slice, anything else a single
 * index. The text is a function of the sequence and decodes back to it, so it is
 * unique. */
char *es_rows_canonical(const size_t *idx, size_t n)
{
    es_buf b;
    es_buf_init(&b, 64);
    size_t i = 0;
    while (i < n) {
        size_t len = 1;
        long step = 0;
        if (i + 1 < n && idx[i + 1] != idx[i] && runnable(idx[i]) && runnable(idx[i + 1])) {
            step = (long)idx[i + 1] - (long)idx[i];
            len = 2;
            while (i + len < n && runnable(idx[i + len]) &&
                   (long)idx[i + len] - (long)idx[i + len - 1] == step)
                len++;
            if (len < 3)
                len = 1;
        }
        append_run(&b, idx[i], step, len);
        i += len;
    }
    return b.s;
}
