/* Query parameters: the one place where request parameters are checked,
 * defaulted, bounded by the configured limits and resolved into selections.
 * Every failure names the parameter (ES_E_PARAM) or the limit (ES_E_LIMIT). */
#include "embedscope/rowsel.h"
#include "embedscope/params.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest quote of a user value echoed in an error message. */
#define QUOTE_MAX 60

/* An empty query. Never fails. */
void es_query_init(es_query *q)
{
    q->items = NULL;
    q->n = q->cap = 0;
}

/* Append a copy of key=value (NULL value stored as ""). Never fails. */
void es_query_add(es_query *q, const char *key, const char *value)
{
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 8;
        q->items = es_realloc(q->items, q->cap * sizeof *q->items);
    }
    q->items[q->n].key = es_strdup(key);
    q->items[q->n].value = es_strdup(value ? value : "");
    q->n++;
}

/* Free every item and leave q empty and reusable. Never fails. */
void es_query_free(es_query *q)
{
    for (size_t i = 0; i < q->n; i++) {
        free(q->items[i].key);
        free(q->items[i].value);
    }
    free(q->items);
    es_query_init(q);
}

/* First value of key, NULL when absent (es_query_check refuses duplicates). */
const char *es_query_get(const es_query *q, const char *key)
{
    for (size_t i = 0; i < q->n; i++)
        if (strcmp(q->items[i].key, key) == 0)
            return q->items[i].value;
    return NULL;
}

/* Is name in the NULL-terminated list? */
static bool name_in(const char *name, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(name, *list) == 0)
            return true;
    return false;
}

/* "a, b, c" of a NULL-terminated list into buf ("none" if empty). */
static void join_names(const char *const *list, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (; *list && len < size; list++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? ", " : "", *list);
    if (!buf[0])
        snprintf(buf, size, "none");
}

/* Refuse unknown and duplicated parameter names. Fails with ES_E_PARAM naming
 * the first offending parameter. */
int es_query_check(const es_query *q, const char *const *allowed, es_err *err)
{
    for (size_t i = 0; i < q->n; i++) {
        const char *key = q->items[i].key;
        if (!name_in(key, allowed)) {
            char names[400];
            join_names(allowed, names, sizeof names);
            return es_fail(err, ES_E_PARAM, key, "unknown query parameter '%.*s' (this endpoint takes: %s)",
                           QUOTE_MAX, key, names);
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(q->items[j].key, key) == 0)
                return es_fail(err, ES_E_PARAM, key, "query parameter '%s' is given more than once", key);
    }
    return 0;
}

/* qsort order of query items: by key. */
static int compare_items(const void *a, const void *b)
{
    const es_query_item *x = a, *y = b;
    return strcmp(x->key, y->key);
}

/* "k=v&k=v" sorted by key, for the access log. Never fails. */
char *es_query_text(const es_query *q)
{
    es_query_item *sorted = es_malloc((q->n ? q->n : 1) * sizeof *sorted);
    if (q->n)
        memcpy(sorted, q->items, q->n * sizeof *sorted);
    qsort(sorted, q->n, sizeof *sorted, compare_items);
    size_t len = 1;
    for (size_t i = 0; i < q->n; i++)
        len += strlen(sorted[i].key) + strlen(sorted[i].value) + 2;
    char *text = es_malloc(len), *p = text;
    *p = '\0';
    for (size_t i = 0; i < q->n; i++)
        p += sprintf(p, "%s%s=%s", i ? "&" : "", sorted[i].key, sorted[i].value);
    free(sorted);
    return text;
}

/* Fail with ES_E_PARAM naming `name`, quoting the (truncated) value. */
static int bad_value(es_err *err, const char *name, const char *value, const char *why)
{
    return es_fail(err, ES_E_PARAM, name, "%s='%.*s%s': %s", name, QUOTE_MAX, value,
                   strlen(value) > QUOTE_MAX ? "..." : "", why);
}

/* Strict decimal digits into *out; -1 on anything else or overflow. */
static int parse_digits(const char *s, size_t *out)
{
    if (!*s)
        return -1;
    size_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (size_t)(*s - '0'), &v))
            return -1;
    }
    *out = v;
    return 0;
}

/* A bounded non-negative integer; see params.h for the error rules. */
int es_param_size(const es_query *q, const char *name, size_t def, size_t min, size_t max,
                  const char *limit, size_t *out, es_err *err)
{
    const char *text = es_query_get(q, name);
    size_t v = def;
    if (text && parse_digits(text, &v) < 0)
        return bad_value(err, name, text, "expected a non-negative decimal integer");
    if (v < min)
        return es_fail(err, ES_E_PARAM, name, "%s=%zu is below the minimum %zu", name, v, min);
    if (v > max && limit)
        return es_fail(err, ES_E_LIMIT, limit, "%s=%zu exceeds the configured limit %s=%zu", name, v,
                       limit, max);
    if (v > max)
        return es_fail(err, ES_E_PARAM, name, "%s=%zu exceeds the maximum %zu", name, v, max);
    *out = v;
    return 0;
}

/* Length of the run of decimal digits at s. */
static size_t digits_at(const char *s)
{
    return strspn(s, "0123456789");
}

/* Is text a plain decimal number: [+-] digits [. digits] [e [+-] digits], with
 * digits on at least one side of the point? strtod alone would also take hex
 * floats ("0x1p0"), "inf", "nan" and leading blanks. */
static bool plain_decimal(const char *text)
{
    const char *p = text + (*text == '+' || *text == '-');
    size_t whole = digits_at(p), frac = 0;
    p += whole;
    if (*p == '.') {
        frac = digits_at(p + 1);
        p += 1 + frac;
    }
    if (whole + frac == 0)
        return false;
    if (*p == 'e' || *p == 'E') {
        p += 1 + (p[1] == '+' || p[1] == '-');
        size_t exp = digits_at(p);
        if (exp == 0)
            return false;
        p += exp;
    }
    return *p == '\0';
}

/* A finite real in [min, max]; ES_E_PARAM naming `name` otherwise. */
int es_param_double(const es_query *q, const char *name, double def, double min, double max,
                    double *out, es_err *err)
{
    const char *text = es_query_get(q, name);
    double v = def;
    if (text) {
        errno = 0;
        v = plain_decimal(text) ? strtod(text, NULL) : NAN;
        if (errno == ERANGE || !isfinite(v))
            return bad_value(err, name, text, "expected a finite decimal number");
    }
    if (v < min || v > max)
        return es_fail(err, ES_E_PARAM, name, "%s=%.17g is outside [%g, %g]", name, v, min, max);
    *out = v;
    return 0;
}

/* One of `choices` (index into *out); ES_E_PARAM naming `name` listing them. */
int es_param_choice(const es_query *q, const char *name, const char *const *choices, size_t def,
                    size_t *out, es_err *err)
{
    const char *text = es_query_get(q, name);
    if (!text) {
        *out = def;
        return 0;
    }
    for (size_t i = 0; choices[i]; i++)
        if (strcmp(text, choices[i]) == 0) {
            *out = i;
            return 0;
        }
    char names[200], why[240];
    join_names(choices, names, sizeof names);
    snprintf(why, sizeof why, "expected one of: %s", names);
    return bad_value(err, name, text, why);
}

/* A required "model/matrix" reference; ES_E_PARAM if absent, lookup errors
 * (ES_E_PARAM malformed, ES_E_NOTFOUND unknown) name `name`. */
int es_param_matrix(const es_query *q, const char *name, const es_catalogue *reg,
                    const es_matrix **out, es_err *err)
{
    const char *text = es_query_get(q, name);
    if (!text)
        return es_fail(err, ES_E_PARAM, name, "missing required parameter '%s' (form: model/matrix)", name);
    return es_catalogue_lookup(reg, text, name, out, err);
}

/* Parse <prefix>rows and <prefix>exclude into a core row selection, enforcing
 * max_exclude. Fails with ES_E_PARAM / ES_E_LIMIT naming the parameter / limit. */
static int parse_rowsel(const es_query *q, const char *prefix, const es_limits *lim, es_rowsel *out,
                        es_err *err)
{
    char rows_name[40], exclude_name[40];
    snprintf(rows_name, sizeof rows_name, "%srows", prefix);
    snprintf(exclude_name, sizeof exclude_name, "%sexclude", prefix);
    const char *rows = es_query_get(q, rows_name), *exclude = es_query_get(q, exclude_name);
    es_rowsel sel = {.max_rows = lim->max_rows};
    if (es_rowsel_parse(rows ? rows : "", rows_name, &sel, err) < 0)
        return -1;
    if (exclude && es_index_list_parse(exclude, exclude_name, &sel.exclude, &sel.n_exclude, err) < 0) {
        es_rowsel_free(&sel);
        return -1;
    }
    if (sel.n_exclude > lim->max_exclude) {
        size_t listed = sel.n_exclude; /* es_rowsel_free resets the count */
        es_rowsel_free(&sel);
        return es_fail(err, ES_E_LIMIT, "max_exclude", "%s lists %zu rows, more than the configured limit max_exclude=%zu",
                       exclude_name, listed, lim->max_exclude);
    }
    *out = sel;
    return 0;
}

/* Parse and resolve one matrix's selection; see params.h. */
int es_param_selection(const es_query *q, const char *prefix, bool with_center, es_centering def,
                       const es_matrix *m, const es_limits *lim, es_selection *out, es_err *err)
{
    char center_name[40];
    snprintf(center_name, sizeof center_name, "%scenter", prefix);
    size_t center = ES_CENTER_NONE;
    if (with_center) {
        if (es_param_choice(q, center_name, es_centering_names, (size_t)def, &center, err) < 0)
            return -1;
    }
    es_rowsel sel;
    if (parse_rowsel(q, prefix, lim, &sel, err) < 0)
        return -1;
    size_t *idx, n;
    char rows_name[40], exclude_name[40];
    snprintf(rows_name, sizeof rows_name, "%srows", prefix);
    snprintf(exclude_name, sizeof exclude_name, "%sexclude", prefix);
    sel.rows_param = rows_name;
    sel.exclude_param = exclude_name;
    int rc = es_rowsel_resolve(&sel, es_matrix_items(m), &idx, &n, err); /* max_rows included */
    es_rowsel_free(&sel);
    if (rc < 0)
        return -1;
    out->idx = idx;
    out->n = n;
    out->canonical = es_rows_canonical(idx, n);
    out->center = (es_centering)center;
    return 0;
}

/* Free the index list and canonical text, leaving s empty; NULL is ignored. */
void es_selection_free(es_selection *s)
{
    if (!s)
        return;
    free(s->idx);
    free(s->canonical);
    s->idx = NULL;
    s->canonical = NULL;
    s->n = 0;
}

/* A contiguous position range; see params.h. */
int es_param_range(const es_query *q, const char *name, size_t n, size_t *start, size_t *stop, es_err *err)
{
    const char *text = es_query_get(q, name);
    if (!text) {
        *start = 0;
        *stop = n;
        return 0;
    }
    es_slice sl;
    if (!strchr(text, ':'))
        return bad_value(err, name, text, "expected a range start:stop");
    if (es_slice_parse(text, name, &sl, err) < 0)
        return -1;
    if (sl.step != 1)
        return bad_value(err, name, text, "a range takes no step");
    es_rowsel sel = {.parts = &sl, .n_parts = 1, .rows_param = name};
    size_t *idx, count;
    if (es_rowsel_resolve(&sel, n, &idx, &count, err) < 0)
        return -1;
    *start = idx[0];
    *stop = idx[count - 1] + 1;
    free(idx);
    return 0;
}

/* Copy of text up to the first sep or the end, advancing *s past the sep. */
static char *next_item(const char **s, char sep)
{
    const char seps[2] = {sep, '\0'};
    size_t len = strcspn(*s, seps);
    char *item = es_malloc(len + 1);
    memcpy(item, *s, len);
    item[len] = '\0';
    *s += len + ((*s)[len] == sep);
    return item;
}

/* Split at ','; see params.h. Never fails. */
char **es_split_on(const char *text, char sep, size_t *n)
{
    size_t count = 1;
    for (const char *c = text; *c; c++)
        count += *c == sep;
    char **items = es_malloc((count + 1) * sizeof *items);
    for (size_t i = 0; i < count; i++)
        items[i] = next_item(&text, sep);
    items[count] = NULL;
    *n = count;
    return items;
}

char **es_split_commas(const char *text, size_t *n) { return es_split_on(text, ',', n); }

/* Exactly n finite numbers, comma-separated; see params.h. */
int es_param_doubles(const es_query *q, const char *name, size_t n, double **out, es_err *err)
{
    const char *text = es_query_get(q, name);
    *out = NULL;
    if (!text)
        return 0;
    size_t count;
    char **items = es_split_commas(text, &count);
    int rc = 0;
    if (count != n) {
        rc = es_fail(err, ES_E_PARAM, name, "%s lists %zu numbers, expected exactly %zu", name, count, n);
        goto done;
    }
    double *v = es_malloc(n * sizeof *v);
    for (size_t i = 0; i < n && rc == 0; i++) {
        es_query one = {0};
        es_query_add(&one, name, items[i]);
        rc = es_param_double(&one, name, 0, -HUGE_VAL, HUGE_VAL, &v[i], err);
        es_query_free(&one);
    }
    if (rc == 0)
        *out = v;
    else
        free(v);
done:
    es_strv_free(items);
    return rc;
}
