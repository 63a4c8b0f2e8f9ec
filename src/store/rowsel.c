/* Row selection: parsing Python slices, unions of them and index lists,
 * resolving them against a matrix's item count, and the canonical text of a
 * resolved selection.
 *
 * Text rules (decided here, documented for the API): a selection is one part or
 * several separated by commas, each a slice or one index; blanks (spaces, tabs)
 * are allowed around each number, as in Python's `a[ 1 : 5 ]`; numbers are
 * decimal with an optional sign and must fit in [-LONG_MAX, LONG_MAX] (LONG_MIN
 * is refused so that every value can be negated safely). Anything else is an
 * error.
 *
 * Resolution rules: Python's indexing, but nothing is clamped: a bound outside
 * the matrix is an error, not silently moved to its end (Python's slice.indices
 * would turn 1:1025 on 1024 rows into 1:1024). The parts are taken in order; a
 * part that selects nothing and a row selected twice are errors, so the
 * resolved rows are exactly what the text says, each once. */
#include "embedscope/rowsel.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest quote of user text echoed in an error message. */
#define QUOTE_MAX 80
#define LIST_SYNTAX "expected a comma-separated list of row indices >= 0"
/* Longest part of a union parsed on its own (longer ones are refused). */
#define PART_MAX 128

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

/* Parse a union of parts "p1,p2,..." (each es_slice_parse text; "" or blanks
 * alone: every row) into sel->parts. Fails with ES_E_PARAM naming `param` on an
 * empty part or a part es_slice_parse refuses. */
int es_rowsel_parse(const char *text, const char *param, es_rowsel *sel, es_err *err)
{
    size_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    es_slice *parts = es_malloc(cap * sizeof *parts);
    size_t n = 0;
    for (const char *p = text;; p++) {
        size_t len = strcspn(p, ",");
        char part[PART_MAX + 1];
        int rc = 0;
        if (cap > 1 && skip_blanks(p) == p + len)
            rc = bad_text(err, param, text, "an empty part (a union is slices or indices separated by commas)");
        else if (len > PART_MAX)
            rc = bad_text(err, param, text, "a part of more than 128 characters");
        if (rc == 0) {
            memcpy(part, p, len);
            part[len] = '\0';
            rc = es_slice_parse(part, param, &parts[n], err);
        }
        if (rc < 0) {
            free(parts);
            return -1;
        }
        n++;
        p += len;
        if (*p == '\0')
            break;
    }
    free(sel->parts);
    sel->parts = parts;
    sel->n_parts = n;
    return 0;
}

/* Is the explicit bound v of a slice with this step an index of a matrix of n
 * items (-n..n-1), or, for a stop or an ascending start, its end n? Python
 * would clamp anything else into range; here it is an error. */
static bool bound_in_range(long v, long n, bool is_start, long step)
{
    long highest = is_start && step < 0 ? n - 1 : n;
    return v >= -n && v <= highest;
}

/* A bound in range as a non-negative position (negative ones count from the end). */
static long from_end(long v, long n) { return v < 0 ? v + n : v; }

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

/* The first item and count of one part over len items. ES_E_PARAM naming rows
 * for step 0, a bound out of range or a part that selects nothing. */
static int resolve_part(const es_slice *s, long len, const char *rows, long *first, size_t *count, es_err *err)
{
    char text[80];
    slice_text(s, text, sizeof text);
    if (s->step == 0 || s->step == LONG_MIN)
        return es_fail(err, ES_E_PARAM, rows, "%s '%s': slice step must be a non-zero integer", rows, text);
    const char *which = s->has_start && !bound_in_range(s->start, len, true, s->step)  ? "start"
                        : s->has_stop && !bound_in_range(s->stop, len, false, s->step) ? "stop"
                                                                                        : NULL;
    if (which)
        return es_fail(err, ES_E_PARAM, rows, "%s '%s': the %s %ld is out of range: the matrix has %ld rows "
                       "(indices 0..%ld or -%ld..-1, a stop at most %ld); nothing is clamped", rows, text, which,
                       strcmp(which, "start") == 0 ? s->start : s->stop, len, len - 1, len, len);
    long start = s->has_start ? from_end(s->start, len) : s->step > 0 ? 0 : len - 1;
    long stop = s->has_stop ? from_end(s->stop, len) : s->step > 0 ? len : -1;
    *first = start;
    *count = range_length(start, stop, s->step);
    if (*count == 0)
        return es_fail(err, ES_E_PARAM, rows, "%s '%s' selects no rows of %ld", rows, text, len);
    return 0;
}

/* Marks of the items while resolving (bits). */
enum { ITEM_EXCLUDED = 1, ITEM_TAKEN = 2 };

/* Resolve a selection against n_items (see the file comment): the parts in
 * order, then excluded items dropped. Fails with ES_E_PARAM: "exclude" for an
 * excluded index >= n_items, "rows" for a bad part, a row selected twice or
 * nothing left; ES_E_LIMIT "max_rows" for more than sel->max_rows rows (checked
 * before the list is allocated). */
int es_rowsel_resolve(const es_rowsel *sel, size_t n_items, size_t **out, size_t *n, es_err *err)
{
    const char *rows = sel->rows_param ? sel->rows_param : "rows";
    const char *exclude = sel->exclude_param ? sel->exclude_param : "exclude";
    es_slice all = {.step = 1};
    const es_slice *parts = sel->n_parts ? sel->parts : &all;
    size_t n_parts = sel->n_parts ? sel->n_parts : 1;
    for (size_t i = 0; i < sel->n_exclude; i++)
        if (sel->exclude[i] >= n_items)
            return es_fail(err, ES_E_PARAM, exclude, "%s: row %zu is out of range (the matrix has %zu rows)",
                           exclude, sel->exclude[i], n_items);
    long len = n_items > LONG_MAX ? LONG_MAX : (long)n_items;
    long *first = es_malloc(n_parts * sizeof *first);
    size_t *count = es_malloc(n_parts * sizeof *count), total = 0;
    int rc = 0;
    for (size_t p = 0; rc == 0 && p < n_parts; p++) {
        rc = resolve_part(&parts[p], len, rows, &first[p], &count[p], err);
        total += rc == 0 ? count[p] : 0;
        if (rc == 0 && total > (size_t)len) /* then some row is selected twice: found below */
            total = (size_t)len + 1;
    }
    bool twice = total > (size_t)len;
    if (rc == 0 && !twice && sel->max_rows && total > sel->max_rows + sel->n_exclude)
        rc = es_fail(err, ES_E_LIMIT, "max_rows", "%s selects at least %zu rows, more than the configured limit "
                     "max_rows=%zu", rows, total - sel->n_exclude, sel->max_rows);
    unsigned char *mark = rc == 0 ? es_calloc(n_items ? n_items : 1, 1) : NULL;
    size_t room = twice ? (size_t)len : total;
    size_t *idx = rc == 0 ? es_malloc((room ? room : 1) * sizeof *idx) : NULL, kept = 0;
    for (size_t i = 0; rc == 0 && i < sel->n_exclude; i++)
        mark[sel->exclude[i]] = ITEM_EXCLUDED;
    for (size_t p = 0; rc == 0 && p < n_parts; p++)
        for (size_t k = 0; rc == 0 && k < count[p]; k++) {
            size_t item = (size_t)(first[p] + (long)k * parts[p].step);
            if (mark[item] & ITEM_TAKEN)
                rc = es_fail(err, ES_E_PARAM, rows, "%s: row %zu is selected twice; the parts of a union must not "
                             "overlap", rows, item);
            else if (!(mark[item] & ITEM_EXCLUDED))
                idx[kept++] = item;
            mark[item] |= ITEM_TAKEN;
        }
    if (rc == 0 && kept == 0)
        rc = es_fail(err, ES_E_PARAM, rows, "%s with %zu excluded selects no rows of %zu", rows, sel->n_exclude,
                     n_items);
    if (rc == 0 && sel->max_rows && kept > sel->max_rows)
        rc = es_fail(err, ES_E_LIMIT, "max_rows", "%s selects %zu rows, more than the configured limit max_rows=%zu",
                     rows, kept, sel->max_rows);
    free(mark);
    free(first);
    free(count);
    if (rc < 0) {
        free(idx);
        return -1;
    }
    *out = idx;
    *n = kept;
    return 0;
}

/* Free the parts and exclusion list of a selection (the struct itself is the caller's). */
void es_rowsel_free(es_rowsel *sel)
{
    if (!sel)
        return;
    free(sel->parts);
    free(sel->exclude);
    sel->parts = NULL;
    sel->n_parts = 0;
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
