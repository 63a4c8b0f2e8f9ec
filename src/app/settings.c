/* Settings: deep copies, releases and the reload's comparison of the settings
 * structs, each generated from the struct's one field list (settings.h). */
#include "embedscope/settings.h"

#include <stdlib.h>
#include <string.h>

/* A NULL-terminated copy of a NULL-terminated string vector (NULL stays NULL). */
static char **strv_copy(char *const *v)
{
    if (!v)
        return NULL;
    size_t n = 0;
    while (v[n])
        n++;
    char **out = es_calloc(n + 1, sizeof *out);
    for (size_t i = 0; i < n; i++)
        out[i] = es_strdup(v[i]);
    return out;
}

/* NULL-terminated string vectors equal (NULL equals an empty one)? */
static bool strv_equal(char *const *a, char *const *b)
{
    for (; a && b && *a && *b; a++, b++)
        if (strcmp(*a, *b) != 0)
            return false;
    return (!a || !*a) && (!b || !*b);
}

static bool string_equal(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

/* Per kind: the deep copy of one member (dst already holds src's bytes), its
 * release and its comparison. */
#define COPY_INT(dst, src)
#define COPY_UNSIGNED(dst, src)
#define COPY_SIZE(dst, src)
#define COPY_DOUBLE(dst, src)
#define COPY_STRING(dst, src) (dst) = (src) ? es_strdup(src) : NULL;
#define COPY_STRINGS(dst, src) (dst) = strv_copy(src);
#define FREE_INT(x)
#define FREE_UNSIGNED(x)
#define FREE_SIZE(x)
#define FREE_DOUBLE(x)
#define FREE_STRING(x) free(x);
#define FREE_STRINGS(x) es_strv_free(x);
#define EQUAL_INT(a, b) ((a) == (b))
#define EQUAL_UNSIGNED(a, b) ((a) == (b))
#define EQUAL_SIZE(a, b) ((a) == (b))
#define EQUAL_DOUBLE(a, b) ((a) == (b))
#define EQUAL_STRING(a, b) string_equal(a, b)
#define EQUAL_STRINGS(a, b) strv_equal(a, b)

/* Per kind: one member as JSON. */
static json_t *strv_json(char *const *v)
{
    json_t *a = json_array();
    for (; v && *v; v++)
        json_array_append_new(a, json_string(*v));
    return a;
}
#define JSON_INT(x) json_integer((json_int_t)(x))
#define JSON_UNSIGNED(x) json_integer((json_int_t)(x))
#define JSON_SIZE(x) json_integer((json_int_t)(x))
#define JSON_DOUBLE(x) json_real(x)
#define JSON_STRING(x) ((x) ? json_string(x) : json_null())
#define JSON_STRINGS(x) strv_json(x)
#define JSON_FIELD(kind, member, key, reload) json_object_set_new(o, #member, JSON_##kind(s->member));

static json_t *server_json(const es_server_conf *s)
{
    json_t *o = json_object();
    ES_SERVER_FIELDS(JSON_FIELD)
    return o;
}

static json_t *limits_json(const es_limits *s)
{
    json_t *o = json_object();
    ES_LIMITS_FIELDS(JSON_FIELD)
    return o;
}

static json_t *uploads_json(const es_uploads_conf *s)
{
    json_t *o = json_object();
    ES_UPLOADS_FIELDS(JSON_FIELD)
    return o;
}

/* See settings.h. */
json_t *es_settings_json(const es_server_conf *server, const es_limits *limits, const es_uploads_conf *uploads)
{
    return json_pack("{s:o, s:o, s:o}", "server", server_json(server), "limits", limits_json(limits), "uploads",
                     uploads_json(uploads));
}

#define COPY_FIELD(kind, member, key, reload) COPY_##kind(dst->member, src->member)
#define FREE_FIELD(kind, member, key, reload) FREE_##kind(s->member)

/* See settings.h. */
void es_server_conf_copy(es_server_conf *dst, const es_server_conf *src)
{
    *dst = *src;
    ES_SERVER_FIELDS(COPY_FIELD)
}

/* See settings.h. */
void es_server_conf_free(es_server_conf *s)
{
    ES_SERVER_FIELDS(FREE_FIELD)
    *s = (es_server_conf){0};
}

/* See settings.h. */
void es_uploads_conf_copy(es_uploads_conf *dst, const es_uploads_conf *src)
{
    *dst = *src;
    ES_UPLOADS_FIELDS(COPY_FIELD)
}

/* See settings.h. */
void es_uploads_conf_free(es_uploads_conf *s)
{
    ES_UPLOADS_FIELDS(FREE_FIELD)
    *s = (es_uploads_conf){0};
}

/* See settings.h. */
es_warm *es_warm_copy(const es_warm *w, size_t n)
{
    es_warm *c = es_calloc(n ? n : 1, sizeof *c);
    for (size_t i = 0; i < n; i++)
        c[i] = (es_warm){es_strdup(w[i].matrix), es_strdup(w[i].rows), w[i].centering};
    return c;
}

/* See settings.h. */
void es_warm_free(es_warm *w, size_t n)
{
    for (size_t i = 0; w && i < n; i++) {
        free(w[i].matrix);
        free(w[i].rows);
    }
    free(w);
}

#define SERVER_CHANGE(kind, member, key, reload)                                                                     \
    out[i++] = (es_setting_change){"server." key, !EQUAL_##kind(a->member, b->member), ES_RELOAD_##reload};
#define LIMIT_CHANGE(kind, member, key, reload)                                                                      \
    out[i++] = (es_setting_change){"limits." key, !EQUAL_##kind(l->member, m->member), ES_RELOAD_##reload};

/* See settings.h. */
void es_setting_changes(const es_server_conf *a, const es_limits *l, const es_server_conf *b, const es_limits *m,
                        es_setting_change out[ES_SETTINGS_COUNT])
{
    size_t i = 0;
    ES_SERVER_FIELDS(SERVER_CHANGE)
    ES_LIMITS_FIELDS(LIMIT_CHANGE)
}

/* See settings.h. */
double es_deadline_seconds(const es_limits *l, double prefer_wait)
{
    double s = l->request_timeout_s, cap = l->max_wait_s > s ? l->max_wait_s : s;
    if (s > 0 && prefer_wait > s)
        s = prefer_wait < cap ? prefer_wait : cap;
    return s;
}
