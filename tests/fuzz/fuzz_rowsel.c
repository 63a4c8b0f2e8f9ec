/* libFuzzer target: the row-selection parsers and resolver of src/store/rowsel.c.
 *
 * Input: "ROWS\nEXCLUDE" (the second line optional). Checked against independent
 * references written here from the documented rules, abort() on any mismatch:
 *   - es_index_list_parse on both lines vs a reference list parser;
 *   - es_slice_parse on ROWS vs a reference slice parser;
 *   - es_rowsel_parse on ROWS (a union of parts separated by commas) vs the
 *     reference slice parser applied part by part;
 *   - es_rowsel_resolve against several item counts vs CPython's slice.indices
 *     (PySlice_AdjustIndices) and range() of each part, where every explicit
 *     bound must already be in range (nothing is clamped), each part must select
 *     something and no row may be selected twice, minus the excluded items;
 *   - es_rows_canonical of every resolved sequence (and of each parsed index list
 *     as an arbitrary sequence) decodes, part by part with es_slice_parse, back to
 *     the same sequence, and the decoded sequence has the same canonical text. */
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedscope/rowsel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Item counts every selection is resolved against. */
static const size_t ITEM_COUNTS[] = {0, 1, 2, 3, 7, 64, 1024};

/* Report a broken invariant with the text involved and stop (libFuzzer keeps the input). */
static void fail(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_rowsel: %s (text '%s')\n", what, text);
    abort();
}

/* A failed call must be ES_E_PARAM naming `param`. */
static void check_param_error(const es_err *err, const char *param, const char *text)
{
    if (err->code != ES_E_PARAM || strcmp(err->param, param) != 0)
        fail("error is not ES_E_PARAM naming the parameter", text);
}

/* ---------------------------------------------------------------- reference parsers */

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

/* [*p, *end) with blanks removed at both ends. */
static void trim(const char **p, const char **end)
{
    while (*p < *end && is_blank(**p))
        (*p)++;
    while (*end > *p && is_blank((*end)[-1]))
        (*end)--;
}

/* Unsigned decimal digits of [p, end) (at least one, nothing else) into *v,
 * false on anything else or a value above LONG_MAX. */
static bool ref_digits(const char *p, const char *end, unsigned long long *v)
{
    if (p == end)
        return false;
    *v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        unsigned long long digit = (unsigned long long)(*p - '0');
        if (*v > (LONG_MAX - digit) / 10)
            return false;
        *v = *v * 10 + digit;
    }
    return true;
}

/* Reference of es_index_list_parse: items between commas, blanks around each,
 * digits only, at most LONG_MAX; blank text is the empty list. Returns the count
 * or -1 if invalid; values into out (room for every comma + 1). */
static long ref_index_list(const char *text, size_t *out)
{
    const char *p = text, *all_end = text + strlen(text), *q = p;
    trim(&q, &all_end);
    if (q == all_end)
        return 0;
    long n = 0;
    for (;;) {
        const char *end = p + strcspn(p, ",");
        const char *next = *end ? end + 1 : NULL;
        unsigned long long v;
        trim(&p, &end);
        if (!ref_digits(p, end, &v))
            return -1;
        out[n++] = (size_t)v;
        if (!next)
            return n;
        p = next;
    }
}

/* One reference slice field: blanks only = absent, else an optional sign and
 * digits with |v| <= LONG_MAX. False if invalid. */
static bool ref_field(const char *p, const char *end, long *v, bool *present)
{
    trim(&p, &end);
    *present = p != end;
    if (!*present)
        return true;
    bool negative = *p == '-';
    if (*p == '-' || *p == '+')
        p++;
    unsigned long long u;
    if (!ref_digits(p, end, &u))
        return false;
    *v = negative ? -(long)u : (long)u;
    return true;
}

/* Reference of es_slice_parse: up to three ':'-separated fields, step != 0
 * (default 1); one present field i alone means i:i+1 (i = -1: to the end;
 * i = LONG_MAX: refused). */
static bool ref_slice_parse(const char *text, es_slice *s)
{
    long v[3] = {0, 0, 1};
    bool present[3] = {false, false, false};
    const char *p = text;
    int n = 0;
    for (;; n++) {
        const char *end = p + strcspn(p, ":");
        if (n == 3 || !ref_field(p, end, &v[n], &present[n]))
            return false;
        if (!*end)
            break;
        p = end + 1;
    }
    if (present[2] && v[2] == 0)
        return false;
    *s = (es_slice){.start = v[0], .stop = v[1], .step = present[2] ? v[2] : 1, .has_start = present[0],
                    .has_stop = present[1]};
    if (n == 0 && present[0]) {
        if (v[0] == LONG_MAX)
            return false;
        s->stop = v[0] + 1;
        s->has_stop = v[0] != -1;
    }
    return true;
}

static bool same_slice(const es_slice *a, const es_slice *b)
{
    return a->step == b->step && a->has_start == b->has_start && a->has_stop == b->has_stop &&
           (!a->has_start || a->start == b->start) && (!a->has_stop || a->stop == b->stop);
}

/* ---------------------------------------------------------------- reference resolution */

/* CPython's PySlice_AdjustIndices for one bound. */
static __int128 adjust_bound(__int128 v, __int128 length, __int128 step)
{
    if (v < 0) {
        v += length;
        if (v < 0)
            v = step < 0 ? -1 : 0;
    } else if (v >= length) {
        v = step < 0 ? length - 1 : length;
    }
    return v;
}

/* The items of range(*slice.indices(length)) into out; returns their count, or
 * cap + 1 if there are more than cap. */
static size_t ref_slice_items(const es_slice *s, size_t length, size_t *out, size_t cap)
{
    __int128 step = s->step, len = length;
    __int128 start = s->has_start ? adjust_bound(s->start, len, step) : step < 0 ? len - 1 : 0;
    __int128 stop = s->has_stop ? adjust_bound(s->stop, len, step) : step < 0 ? -1 : len;
    size_t n = 0;
    for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (n == cap)
            return cap + 1;
        out[n++] = (size_t)i;
    }
    return n;
}

/* A bound in range needs no clamping: -n..n-1, or n for a stop or an ascending start. */
static bool ref_in_range(const es_slice *s, size_t length)
{
    __int128 n = length;
    bool start_ok = !s->has_start || (s->start >= -n && s->start <= (s->step < 0 ? n - 1 : n));
    bool stop_ok = !s->has_stop || (s->stop >= -n && s->stop <= n);
    return start_ok && stop_ok;
}

/* Reference of es_rowsel_parse: parts between commas, each by ref_slice_parse, at
 * most 128 characters; an empty (blank) part is refused unless it is the whole
 * text. Returns the number of parts (into parts, room for every comma + 1) or -1. */
static long ref_union_parse(const char *text, es_slice *parts)
{
    long n = 0;
    bool several = strchr(text, ',') != NULL;
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        char part[200];
        const char *q = p, *end = p + len;
        trim(&q, &end);
        if (len > 128 || (several && q == end))
            return -1;
        memcpy(part, p, len);
        part[len] = '\0';
        if (!ref_slice_parse(part, &parts[n++]))
            return -1;
        if (!p[len])
            return n;
        p += len + 1;
    }
}

static bool contains(const size_t *v, size_t n, size_t x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x)
            return true;
    return false;
}

/* ---------------------------------------------------------------- canonical text */

/* Decode canonical text: each ','-part is parsed by es_slice_parse and expanded
 * against `length` items. Aborts unless it gives exactly the n items of idx. */
static void check_decodes(const char *canon, const size_t *idx, size_t n, size_t length)
{
    char *copy = strdup(canon);
    size_t *got = malloc((n + 1) * sizeof *got), have = 0;
    for (char *part = copy; *canon;) {
        char *comma = strchr(part, ',');
        if (comma)
            *comma = '\0';
        es_slice s;
        es_err err;
        if (!*part || strpbrk(part, " \t") || es_slice_parse(part, "rows", &s, &err) != 0)
            fail("a part of the canonical text is empty or does not parse", canon);
        size_t k = ref_slice_items(&s, length, got + have, n - have);
        if (k == 0 || k > n - have)
            fail("a part of the canonical text selects nothing or too much", canon);
        have += k;
        if (!comma)
            break;
        part = comma + 1;
    }
    if (have != n || (n && memcmp(got, idx, n * sizeof *idx) != 0))
        fail("the canonical text does not decode to the same sequence", canon);
    char *again = es_rows_canonical(got, have);
    if (strcmp(again, canon) != 0)
        fail("the decoded sequence has another canonical text", canon);
    free(again);
    free(got);
    free(copy);
}

/* Canonical text of idx must decode back to idx (length: more than every index). */
static void check_canonical(const size_t *idx, size_t n, size_t length)
{
    char *canon = es_rows_canonical(idx, n);
    if ((n == 0) != (*canon == '\0'))
        fail("canonical text is empty exactly when there are no indices", canon);
    check_decodes(canon, idx, n, length);
    free(canon);
}

/* ---------------------------------------------------------------- the checks */

/* es_index_list_parse vs the reference; the parsed list in *out (NULL if
 * refused or empty). True if the list was accepted. */
static bool check_index_list(const char *text, size_t **out, size_t *n)
{
    size_t *ref = malloc((strlen(text) + 1) * sizeof *ref);
    long ref_n = ref_index_list(text, ref);
    es_err err;
    *out = NULL;
    *n = 0;
    bool ok = es_index_list_parse(text, "exclude", out, n, &err) == 0;
    if (!ok) {
        check_param_error(&err, "exclude", text);
        if (ref_n >= 0)
            fail("index list refused but valid by the reference", text);
    } else if (ref_n < 0 || (size_t)ref_n != *n || (*n && memcmp(ref, *out, *n * sizeof *ref) != 0)) {
        fail("index list differs from the reference", text);
    }
    free(ref);
    return ok;
}

/* The reference selection of sel's parts over `length` items, before exclusion,
 * into ref (room for length + 1); false if it is refused (a bound out of range,
 * a part that selects nothing, a row selected twice). */
static bool ref_union_items(const es_rowsel *sel, size_t length, size_t *ref, size_t *ref_n)
{
    *ref_n = 0;
    for (size_t p = 0; p < sel->n_parts; p++) {
        if (!ref_in_range(&sel->parts[p], length))
            return false;
        size_t k = ref_slice_items(&sel->parts[p], length, ref + *ref_n, length - *ref_n);
        if (k == 0 || k > length - *ref_n)
            return false; /* nothing, or more than the matrix holds: a row twice */
        for (size_t i = 0; i < k; i++)
            if (contains(ref, *ref_n, ref[*ref_n + i]))
                return false;
        *ref_n += k;
    }
    return true;
}

/* Resolve sel against `length` items and compare with the reference; then the
 * canonical round trip of the result. */
static void check_resolve(const es_rowsel *sel, size_t length, const char *text)
{
    size_t *ref = malloc((length + 1) * sizeof *ref), *idx = NULL, n = 0, kept = 0, ref_n = 0;
    bool ref_ok = ref_union_items(sel, length, ref, &ref_n);
    bool excl_bad = false;
    for (size_t i = 0; i < sel->n_exclude; i++)
        excl_bad |= sel->exclude[i] >= length;
    for (size_t i = 0; i < ref_n; i++)
        if (!contains(sel->exclude, sel->n_exclude, ref[i]))
            ref[kept++] = ref[i];
    es_err err;
    if (es_rowsel_resolve(sel, length, &idx, &n, &err) != 0) {
        check_param_error(&err, excl_bad ? "exclude" : "rows", text);
        if (!excl_bad && ref_ok && kept != 0)
            fail("resolve failed but the reference selects rows", text);
    } else {
        if (!ref_ok)
            fail("resolve succeeded but the reference refuses the selection", text);
        if (excl_bad || n != kept || memcmp(idx, ref, n * sizeof *idx) != 0)
            fail("resolved rows differ from Python's slice semantics", text);
        check_canonical(idx, n, length);
        free(idx);
    }
    free(ref);
}

/* An arbitrary sequence (a parsed index list) through the canonical round
 * trip. Indices come from resolutions, so they are below the item count of a
 * matrix: values of 2^40 and more are left out. */
static void check_sequence(const size_t *v, size_t n)
{
    size_t max = 0;
    for (size_t i = 0; i < n; i++)
        max = v[i] > max ? v[i] : max;
    if (max < (size_t)1 << 40)
        check_canonical(v, n, max + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    char *excl_text = strchr(text, '\n');
    if (excl_text)
        *excl_text++ = '\0';

    es_rowsel sel = {0};
    size_t *list, n_list;
    check_index_list(text, &list, &n_list);
    check_sequence(list, n_list);
    free(list);
    bool exclude_ok = !excl_text || check_index_list(excl_text, &sel.exclude, &sel.n_exclude);
    check_sequence(sel.exclude, sel.n_exclude);

    es_slice ref, one;
    es_err err;
    bool ref_ok = ref_slice_parse(text, &ref);
    if (es_slice_parse(text, "rows", &one, &err) != 0) {
        check_param_error(&err, "rows", text);
        if (ref_ok)
            fail("slice refused but valid by the reference", text);
    } else if (!ref_ok || !same_slice(&ref, &one)) {
        fail("slice differs from the reference", text);
    }
    es_slice *ref_parts = malloc((strlen(text) + 1) * sizeof *ref_parts);
    long ref_n = ref_union_parse(text, ref_parts);
    if (es_rowsel_parse(text, "rows", &sel, &err) != 0) {
        check_param_error(&err, "rows", text);
        if (ref_n >= 0)
            fail("union refused but valid by the reference", text);
    } else {
        if (ref_n < 0 || (size_t)ref_n != sel.n_parts)
            fail("union differs from the reference", text);
        for (size_t p = 0; p < sel.n_parts; p++)
            if (!same_slice(&ref_parts[p], &sel.parts[p]))
                fail("a part of the union differs from the reference", text);
        for (size_t i = 0; exclude_ok && i < sizeof ITEM_COUNTS / sizeof *ITEM_COUNTS; i++)
            check_resolve(&sel, ITEM_COUNTS[i], text);
    }
    free(ref_parts);
    es_rowsel_free(&sel);
    free(text);
    return 0;
}
