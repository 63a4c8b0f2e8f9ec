/* Reading the configuration's JSON: typed members with defaults and ranges,
 * and errors that name the key path ("models.gpt2-small.matrices.wpe.file",
 * "warm[0].center") in err->param and at the start of err->message, so a user
 * can find it in the file. */
#include "app/internal.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- errors */

/* See internal.h. */
int es_conf_fail(const ctx *c, const char *path, const char *fmt, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return es_fail(c->err, c->upload ? ES_E_PARAM : ES_E_CONFIG, path, "%s: %s: %s", c->origin,
                   *path ? path : "(top level)", text);
}

/* See internal.h. */
int es_conf_pass_through(const ctx *c, const char *path, const es_err *inner)
{
    es_errcode code = inner->code;
    if (code != ES_E_NOMEM && (c->upload || (code != ES_E_IO && code != ES_E_FORMAT)))
        code = c->upload ? ES_E_PARAM : ES_E_CONFIG;
    return es_fail(c->err, code, path, "%s: %s: %s", c->origin, path, inner->message);
}

/* Key paths only label messages: one too long for out ends in "..." instead. */
static void mark_truncation(char out[KEYPATH_LEN], int written)
{
    if (written >= KEYPATH_LEN)
        memcpy(out + KEYPATH_LEN - 4, "...", 4);
}

/* See internal.h. */
void es_conf_join_key(char out[KEYPATH_LEN], const char *parent, const char *key)
{
    mark_truncation(out, snprintf(out, KEYPATH_LEN, "%s%s%s", parent, *parent ? "." : "", key));
}

/* See internal.h. */
void es_conf_join_index(char out[KEYPATH_LEN], const char *parent, size_t index)
{
    mark_truncation(out, snprintf(out, KEYPATH_LEN, "%s[%zu]", parent, index));
}

/* See internal.h. */
const char *es_conf_kind_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* ---------------------------------------------------------------- typed members */

/* True if key is one of the NULL-terminated list. */
static bool in_list(const char *key, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(key, *list) == 0)
            return true;
    return false;
}

/* Does *a stand earlier in `allowed`? */
static bool listed_before(const char *const *allowed, const char *const *a)
{
    for (const char *const *b = allowed; b < a; b++)
        if (strcmp(*b, *a) == 0)
            return true;
    return false;
}

/* See internal.h. */
int es_conf_check_keys(const ctx *c, const json_t *obj, const char *path, const char *const *allowed)
{
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value) {
        if (in_list(key, allowed))
            continue;
        char list[256] = "", p[KEYPATH_LEN];
        for (const char *const *a = allowed; *a; a++)
            if (!listed_before(allowed, a)) /* "listen" is two members of the field list */
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", a == allowed ? "" : ", ", *a);
        es_conf_join_key(p, path, key);
        return es_conf_fail(c, p, "unknown key; allowed here: %s", list);
    }
    return 0;
}

/* See internal.h. */
int es_conf_member(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                   json_t **out)
{
    *out = obj ? json_object_get(obj, key) : NULL;
    if (!*out && required) {
        char p[KEYPATH_LEN];
        es_conf_join_key(p, path, key);
        return es_conf_fail(c, p, "missing required key");
    }
    return 0;
}

/* See internal.h. */
int es_conf_type_fail(const ctx *c, const char *path, const char *key, const char *what, const json_t *v)
{
    char p[KEYPATH_LEN];
    es_conf_join_key(p, path, key);
    return es_conf_fail(c, p, "expected %s, got %s", what, es_conf_kind_name(v));
}

/* See internal.h. */
int es_conf_get_object(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                       json_t **out)
{
    if (es_conf_member(c, obj, path, key, required, out) != 0)
        return -1;
    if (*out && !json_is_object(*out))
        return es_conf_type_fail(c, path, key, "an object", *out);
    return 0;
}

/* See internal.h. */
int es_conf_get_string(const ctx *c, const json_t *obj, const char *path, const char *key, const char *dflt,
                       const char **out)
{
    json_t *v;
    if (es_conf_member(c, obj, path, key, dflt == NULL, &v) != 0)
        return -1;
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_string(v))
        return es_conf_type_fail(c, path, key, "a string", v);
    *out = json_string_value(v); /* no NUL inside: jansson refuses \u0000 without JSON_ALLOW_NUL */
    return 0;
}

/* See internal.h. */
int es_conf_get_int(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                    long long dflt, long long min, long long max, long long *out)
{
    json_t *v;
    if (es_conf_member(c, obj, path, key, required, &v) != 0)
        return -1;
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v))
        return es_conf_type_fail(c, path, key, "an integer", v);
    long long x = json_integer_value(v);
    if (x < min || x > max) {
        char p[KEYPATH_LEN];
        es_conf_join_key(p, path, key);
        return es_conf_fail(c, p, "expected an integer in [%lld, %lld], got %lld", min, max, x);
    }
    *out = x;
    return 0;
}

/* See internal.h. */
int es_conf_get_size(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                     long long dflt, long long min, size_t *out)
{
    long long x;
    if (es_conf_get_int(c, obj, path, key, required, dflt, min, LLONG_MAX, &x) != 0)
        return -1;
    *out = (size_t)x;
    return 0;
}

/* See internal.h. */
int es_conf_get_unsigned(const ctx *c, const json_t *obj, const char *path, const char *key, long long dflt,
                         long long min, long long max, unsigned *out)
{
    long long x;
    if (es_conf_get_int(c, obj, path, key, false, dflt, min, max, &x) != 0)
        return -1;
    *out = (unsigned)x;
    return 0;
}

/* See internal.h. */
int es_conf_get_number(const ctx *c, const json_t *obj, const char *path, const char *key, double dflt,
                       bool (*ok)(double), const char *what, double *out)
{
    json_t *v;
    if (es_conf_member(c, obj, path, key, false, &v) != 0)
        return -1;
    *out = dflt;
    if (!v)
        return 0;
    if (!json_is_number(v))
        return es_conf_type_fail(c, path, key, "a number", v);
    if (!ok(json_number_value(v))) {
        char p[KEYPATH_LEN];
        es_conf_join_key(p, path, key);
        return es_conf_fail(c, p, "expected a number %s, got %.17g", what, json_number_value(v));
    }
    *out = json_number_value(v);
    return 0;
}

/* See internal.h. */
int es_conf_get_bool(const ctx *c, const json_t *obj, const char *path, const char *key, bool *out)
{
    json_t *v;
    if (es_conf_member(c, obj, path, key, false, &v) != 0)
        return -1;
    if (v && !json_is_boolean(v))
        return es_conf_type_fail(c, path, key, "a boolean", v);
    *out = v && json_is_true(v);
    return 0;
}

/* See internal.h. */
int es_conf_get_range(const ctx *c, const json_t *obj, const char *path, const char *key, size_t limit,
                      size_t range[2], bool *present)
{
    json_t *v;
    if (es_conf_member(c, obj, path, key, false, &v) != 0)
        return -1;
    *present = v != NULL;
    if (!v)
        return 0;
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 0)) ||
        !json_is_integer(json_array_get(v, 1))) {
        char p[KEYPATH_LEN];
        es_conf_join_key(p, path, key);
        return es_conf_fail(c, p, "expected an array [start, stop] of two integers, got %s%s", es_conf_kind_name(v),
                            json_is_array(v) ? " of another form" : "");
    }
    long long lo = json_integer_value(json_array_get(v, 0)), hi = json_integer_value(json_array_get(v, 1));
    if (lo < 0 || hi <= lo || (unsigned long long)hi > limit) {
        char p[KEYPATH_LEN];
        es_conf_join_key(p, path, key);
        return es_conf_fail(c, p, "range [%lld, %lld] is not within [0, %zu] with start < stop", lo, hi, limit);
    }
    range[0] = (size_t)lo;
    range[1] = (size_t)hi;
    return 0;
}

/* ---------------------------------------------------------------- paths and names */

/* See internal.h. */
int es_conf_check_name(const ctx *c, const char *path, const char *name, const char *what)
{
    if (es_catalogue_valid_name(name))
        return 0;
    char p[KEYPATH_LEN];
    es_conf_join_key(p, path, name);
    return es_conf_fail(c, p, "invalid %s name: use " ES_NAME_RULE, what, ES_NAME_MAX);
}

/* See internal.h. */
char *es_conf_path_under(const char *dir, const char *rel)
{
    return rel[0] == '/' ? es_strdup(rel) : es_asprintf("%s/%s", dir, rel);
}
