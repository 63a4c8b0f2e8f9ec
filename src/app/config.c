/* Configuration: strict JSON (jansson) -> es_registry of loaded matrices, server
 * settings, limits and the decompositions to warm. Format: docs/configuration.md.
 *
 * Every problem is reported with the JSON key path ("models.gpt2-small.matrices.wpe.file",
 * "warm[0].center") in err->param and at the start of err->message, so a user can
 * find it in the file. Loading stops at the first problem. */
#include "embedscope/config.h"
#include "embedscope/positional.h"
#include "embedscope/rowsel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef ES_DEFAULT_CONFIG_DIR
#define ES_DEFAULT_CONFIG_DIR "config"
#endif

/* config/embedscope.json, NUL-terminated, from src/core/embedded.S. */
extern const char es_embedded_config[];

enum {
    KEYPATH_LEN = 256, /* longest key path kept in messages */
};

/* Default of limits.max_generated_elements: 2^29 doubles, 4 GiB, so that a
 * Llama-sized stand-in (128256 x 4096, 525,336,576 elements) is generated
 * without touching a limit; an upload's generator is also bounded by the room
 * uploads.max_total_bytes leaves it. */
#define DEFAULT_MAX_GENERATED (1LL << 29)
/* The Gaussian generator's cost, rows x cols x min(rows, cols) (two QR
 * factorisations and a product of that order), may be at most this many times
 * limits.max_generated_elements: 2^41 by default, which 128256 x 4096 (2^40.97)
 * fits; that one takes minutes on one BLAS thread. */
#define GAUSSIAN_WORK_FACTOR 4096

/* The files opened while loading one config, each once (es_source), by path. */
typedef struct source_cache {
    char **paths;
    es_source **sources;
    size_t n;
} source_cache;

/* What every parsing step needs: where the config came from, the resolved data
 * directory, the limits (parsed before the models), the files opened so far,
 * the registry being built (its recipes) and the catalogue cross-model views
 * read (the models built so far; for an upload the running catalogue), the
 * previous registry whose unchanged matrices a reload keeps (or NULL), whether
 * this is an upload's entry rather than a configuration, and where to report
 * errors. */
typedef struct ctx {
    const char *origin;
    const char *base_dir;      /* the configuration's directory ("" or NULL: the current one) */
    char *data_dir;
    const es_limits *limits;
    source_cache *sources;
    es_registry *reg;
    const es_registry *catalogue;
    const es_registry *previous;
    bool upload;
    const size_t *room;        /* an upload's: the bytes its matrix may hold (NULL: no bound) */
    double made;               /* "created" of generated matrices and views (made_at) */
    es_err *err;
} ctx;

/* ---------------------------------------------------------------- errors */

/* ES_E_CONFIG (ES_E_PARAM for an upload's entry: a request error) with param =
 * key path and message "ORIGIN: PATH: TEXT". Returns -1. Every int-returning
 * parser below fails through this or pass_through. */
static int conf_fail(const ctx *c, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int conf_fail(const ctx *c, const char *path, const char *fmt, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return es_fail(c->err, c->upload ? ES_E_PARAM : ES_E_CONFIG, path, "%s: %s: %s", c->origin,
                   *path ? path : "(top level)", text);
}

/* Re-report an error of the store or linalg at key path `path`: I/O, format and
 * memory errors keep their code (for an upload only memory errors do), everything
 * else becomes ES_E_CONFIG (ES_E_PARAM for an upload). Returns -1. */
static int pass_through(const ctx *c, const char *path, const es_err *inner)
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

/* "PARENT.KEY" (or "KEY" at the top level) into out. */
static void join_key(char out[KEYPATH_LEN], const char *parent, const char *key)
{
    mark_truncation(out, snprintf(out, KEYPATH_LEN, "%s%s%s", parent, *parent ? "." : "", key));
}

/* "PARENT[INDEX]" into out. */
static void join_index(char out[KEYPATH_LEN], const char *parent, size_t index)
{
    mark_truncation(out, snprintf(out, KEYPATH_LEN, "%s[%zu]", parent, index));
}

/* The JSON type of v as used in "expected X, got Y" messages. */
static const char *kind_name(const json_t *v)
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

/* Reject any key of obj that is not in `allowed`; the error names the key's path
 * and lists the allowed keys. */
static int check_keys(const ctx *c, const json_t *obj, const char *path, const char *const *allowed)
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
        join_key(p, path, key);
        return conf_fail(c, p, "unknown key; allowed here: %s", list);
    }
    return 0;
}

/* obj[key] in *out (NULL if obj is NULL or the key is absent). Fails if absent
 * and required. */
static int member(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                  json_t **out)
{
    *out = obj ? json_object_get(obj, key) : NULL;
    if (!*out && required) {
        char p[KEYPATH_LEN];
        join_key(p, path, key);
        return conf_fail(c, p, "missing required key");
    }
    return 0;
}

/* Fail with "expected WHAT, got KIND" at PATH.KEY. Returns -1. */
static int type_fail(const ctx *c, const char *path, const char *key, const char *what, const json_t *v)
{
    char p[KEYPATH_LEN];
    join_key(p, path, key);
    return conf_fail(c, p, "expected %s, got %s", what, kind_name(v));
}

/* Optional object member: *out is NULL if absent; fails if present and not an object. */
static int get_object(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                      json_t **out)
{
    if (member(c, obj, path, key, required, out) != 0)
        return -1;
    if (*out && !json_is_object(*out))
        return type_fail(c, path, key, "an object", *out);
    return 0;
}

/* String member; dflt is used when absent (dflt NULL: required). Borrowed result. */
static int get_string(const ctx *c, const json_t *obj, const char *path, const char *key, const char *dflt,
                      const char **out)
{
    json_t *v;
    if (member(c, obj, path, key, dflt == NULL, &v) != 0)
        return -1;
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_string(v))
        return type_fail(c, path, key, "a string", v);
    *out = json_string_value(v); /* no NUL inside: jansson refuses \u0000 without JSON_ALLOW_NUL */
    return 0;
}

/* Integer member in [min, max]; dflt when absent unless required. Reals such as
 * 768.0 are rejected: counts are integers. */
static int get_int(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                   long long dflt, long long min, long long max, long long *out)
{
    json_t *v;
    if (member(c, obj, path, key, required, &v) != 0)
        return -1;
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v))
        return type_fail(c, path, key, "an integer", v);
    long long x = json_integer_value(v);
    if (x < min || x > max) {
        char p[KEYPATH_LEN];
        join_key(p, path, key);
        return conf_fail(c, p, "expected an integer in [%lld, %lld], got %lld", min, max, x);
    }
    *out = x;
    return 0;
}

/* get_int into a size_t (min >= 0). */
static int get_size(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                    long long dflt, long long min, size_t *out)
{
    long long x;
    if (get_int(c, obj, path, key, required, dflt, min, LLONG_MAX, &x) != 0)
        return -1;
    *out = (size_t)x;
    return 0;
}

/* get_int into an unsigned (min >= 0). */
static int get_unsigned(const ctx *c, const json_t *obj, const char *path, const char *key, long long dflt,
                        long long min, long long max, unsigned *out)
{
    long long x;
    if (get_int(c, obj, path, key, false, dflt, min, max, &x) != 0)
        return -1;
    *out = (unsigned)x;
    return 0;
}

/* Optional number member (integer or real) with dflt, checked by
 * `ok` (a description of the allowed range is `what`). */
static int get_number(const ctx *c, const json_t *obj, const char *path, const char *key, double dflt,
                      bool (*ok)(double), const char *what, double *out)
{
    json_t *v;
    if (member(c, obj, path, key, false, &v) != 0)
        return -1;
    *out = dflt;
    if (!v)
        return 0;
    if (!json_is_number(v))
        return type_fail(c, path, key, "a number", v);
    if (!ok(json_number_value(v))) {
        char p[KEYPATH_LEN];
        join_key(p, path, key);
        return conf_fail(c, p, "expected a number %s, got %.17g", what, json_number_value(v));
    }
    *out = json_number_value(v);
    return 0;
}

/* Optional boolean member, false when absent. */
static int get_bool(const ctx *c, const json_t *obj, const char *path, const char *key, bool *out)
{
    json_t *v;
    if (member(c, obj, path, key, false, &v) != 0)
        return -1;
    if (v && !json_is_boolean(v))
        return type_fail(c, path, key, "a boolean", v);
    *out = v && json_is_true(v);
    return 0;
}

/* Optional half-open range [lo, hi] of non-negative integers with lo < hi <= limit.
 * *present tells whether the key was given. */
static int get_range(const ctx *c, const json_t *obj, const char *path, const char *key, size_t limit,
                     size_t range[2], bool *present)
{
    json_t *v;
    if (member(c, obj, path, key, false, &v) != 0)
        return -1;
    *present = v != NULL;
    if (!v)
        return 0;
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 0)) ||
        !json_is_integer(json_array_get(v, 1))) {
        char p[KEYPATH_LEN];
        join_key(p, path, key);
        return conf_fail(c, p, "expected an array [start, stop] of two integers, got %s%s", kind_name(v),
                         json_is_array(v) ? " of another form" : "");
    }
    long long lo = json_integer_value(json_array_get(v, 0)), hi = json_integer_value(json_array_get(v, 1));
    if (lo < 0 || hi <= lo || (unsigned long long)hi > limit) {
        char p[KEYPATH_LEN];
        join_key(p, path, key);
        return conf_fail(c, p, "range [%lld, %lld] is not within [0, %zu] with start < stop", lo, hi, limit);
    }
    range[0] = (size_t)lo;
    range[1] = (size_t)hi;
    return 0;
}

/* ---------------------------------------------------------------- paths and names */

/* Fail unless `name` (a key at PATH.NAME) is a valid model or matrix name. */
static int check_name(const ctx *c, const char *path, const char *name, const char *what)
{
    if (es_registry_valid_name(name))
        return 0;
    char p[KEYPATH_LEN];
    join_key(p, path, name);
    return conf_fail(c, p, "invalid %s name: use " ES_NAME_RULE, what, ES_NAME_MAX);
}

/* `rel` if absolute, else "DIR/rel". Newly allocated. */
static char *path_under(const char *dir, const char *rel)
{
    return rel[0] == '/' ? es_strdup(rel) : es_asprintf("%s/%s", dir, rel);
}

/* The data directory: `dir` resolved against base_dir, made canonical when it
 * exists (so provenance shows a clean path). Newly allocated. */
static char *resolve_data_dir(const char *base_dir, const char *dir)
{
    char *joined = path_under(base_dir && *base_dir ? base_dir : ".", dir);
    char *canon = realpath(joined, NULL);
    if (!canon)
        return joined;
    free(joined);
    char *copy = es_strdup(canon);
    free(canon);
    return copy;
}

/* ---------------------------------------------------------------- server and limits */

/* Split "HOST:PORT" ("[v6]:PORT" for IPv6) into a new host string and a port
 * (es_parse_listen). ES_E_CONFIG naming path if malformed. */
static int parse_listen(const ctx *c, const char *path, const char *text, char **host, unsigned *port)
{
    char buf[256];
    if (es_parse_listen(text, buf, sizeof buf, port) < 0)
        return conf_fail(c, path, "expected \"HOST:PORT\" (\"[IPV6]:PORT\"), PORT in 0..65535, got \"%s\"", text);
    *host = es_strdup(buf);
    return 0;
}

/* An optional array of non-empty strings `key` (default: dflt, NULL-terminated)
 * as a new NULL-terminated vector; each must pass valid (NULL: any). */
static int parse_strings(const ctx *c, const json_t *obj, const char *path, const char *key,
                         const char *const *dflt, bool (*valid)(const char *), const char *what, char ***out)
{
    json_t *v;
    char p[KEYPATH_LEN], q[KEYPATH_LEN];
    join_key(p, path, key);
    if (member(c, obj, path, key, false, &v) != 0)
        return -1;
    if (v && !json_is_array(v))
        return type_fail(c, path, key, "an array of strings", v);
    size_t n = 0;
    while (!v && dflt[n])
        n++;
    if (v)
        n = json_array_size(v);
    for (size_t i = 0; v && i < n; i++) {
        const json_t *s = json_array_get(v, i);
        join_index(q, p, i);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return conf_fail(c, q, "expected a non-empty string, got %s", kind_name(s));
        if (valid && !valid(json_string_value(s)))
            return conf_fail(c, q, "expected %s, got \"%s\"", what, json_string_value(s));
    }
    char **list = es_calloc(n + 1, sizeof *list);
    for (size_t i = 0; i < n; i++)
        list[i] = es_strdup(v ? json_string_value(json_array_get(v, i)) : dflt[i]);
    *out = list;
    return 0;
}

/* A numeric IPv4 or IPv6 address? */
static bool is_ip_address(const char *text)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, text, buf) == 1 || inet_pton(AF_INET6, text, buf) == 1;
}

/* server.blas_threads: "auto" (0, the default: the cores shared among the
 * computations running at once) or an integer in 1..1024. */
static int get_blas_threads(const ctx *c, const json_t *obj, const char *path, unsigned *out)
{
    json_t *v;
    if (member(c, obj, path, "blas_threads", false, &v) != 0)
        return -1;
    if (!v || (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0)) {
        *out = 0;
        return 0;
    }
    if (json_is_string(v)) {
        char p[KEYPATH_LEN];
        join_key(p, path, "blas_threads");
        return conf_fail(c, p, "expected \"auto\" or an integer in [1, 1024], got \"%s\"", json_string_value(v));
    }
    return get_unsigned(c, obj, path, "blas_threads", 0, 1, 1024, out);
}

/* The keys a settings section allows: its field list's (settings.h). */
#define FIELD_KEY(kind, member, key, reload) key,

/* "server": listen address, thread counts, timeouts, cache budget, CORS origins. */
static int parse_server(const ctx *c, const json_t *root, es_server_conf *s)
{
    static const char *const keys[] = {ES_SERVER_FIELDS(FIELD_KEY) NULL};
    static const char *const any_origin[] = {"*", NULL}, *const none[] = {NULL};
    const char *path = "server", *listen, *cache_dir;
    json_t *obj;
    long long cache_mb;
    if (get_object(c, root, "", "server", false, &obj) != 0 || (obj && check_keys(c, obj, path, keys) != 0) ||
        get_string(c, obj, path, "listen", "127.0.0.1:8080", &listen) != 0 ||
        parse_listen(c, "server.listen", listen, &s->host, &s->port) != 0 ||
        get_unsigned(c, obj, path, "threads", 0, 1, 1024, &s->threads) != 0 ||
        get_blas_threads(c, obj, path, &s->blas_threads) != 0 ||
        get_unsigned(c, obj, path, "connection_timeout_s", 30, 0, 86400, &s->connection_timeout_s) != 0 ||
        get_unsigned(c, obj, path, "connection_limit", 4096, 1, 1000000, &s->connection_limit) != 0 ||
        get_unsigned(c, obj, path, "per_address_limit", 512, 1, 1000000, &s->per_address_limit) != 0 ||
        get_unsigned(c, obj, path, "header_timeout_s", 10, 0, 86400, &s->header_timeout_s) != 0 ||
        get_unsigned(c, obj, path, "body_grace_s", 10, 0, 86400, &s->body_grace_s) != 0 ||
        get_unsigned(c, obj, path, "body_min_rate", 1024, 1, 1u << 30, &s->body_min_rate) != 0 ||
        get_unsigned(c, obj, path, "shutdown_grace_s", 30, 0, 86400, &s->shutdown_grace_s) != 0 ||
        get_int(c, obj, path, "cache_mb", false, 512, 1, 1LL << 30, &cache_mb) != 0 ||
        get_string(c, obj, path, "cache_dir", "", &cache_dir) != 0 ||
        parse_strings(c, obj, path, "cors_origins", any_origin, NULL, NULL, &s->cors_origins) != 0 ||
        parse_strings(c, obj, path, "trusted_proxies", none, is_ip_address, "a numeric IP address",
                      &s->trusted_proxies) != 0)
        return -1;
    s->cache_bytes = (size_t)cache_mb << 20; /* at most 2^50: fits a 64-bit size_t */
    /* relative to the configuration's directory, like data_dir; "" = none */
    s->cache_dir = *cache_dir ? path_under(c->base_dir && *c->base_dir ? c->base_dir : ".", cache_dir) : NULL;
    return 0;
}

static bool seconds_ok(double x) { return x > 0 && x <= 86400; }

/* "limits": per-request limits the HTTP layer enforces, and the size of generated
 * matrices (checked here, before generating). max_request_cost, the flop
 * budget of earlier versions, is accepted and ignored (logged): requests are
 * now priced in seconds (sync_seconds) and refused only for memory. */
static int parse_limits(const ctx *c, const json_t *root, es_limits *l)
{
    static const char *const keys[] = {ES_LIMITS_FIELDS(FIELD_KEY) "max_request_cost", NULL};
    const char *path = "limits";
    json_t *obj;
    if (get_object(c, root, "", "limits", false, &obj) != 0 || (obj && check_keys(c, obj, path, keys) != 0))
        return -1;
    if (obj && json_object_get(obj, "max_request_cost"))
        es_warn("%s: limits.max_request_cost is no longer used (requests are priced in seconds: "
                "limits.sync_seconds, limits.max_request_memory); ignored", c->origin);
    return get_size(c, obj, path, "max_k", false, 768, 1, &l->max_k) != 0 ||
                   get_size(c, obj, path, "max_bins", false, 512, 1, &l->max_bins) != 0 ||
                   get_size(c, obj, path, "max_cells", false, 4 << 20, 1, &l->max_cells) != 0 ||
                   get_size(c, obj, path, "max_rows", false, 0, 0, &l->max_rows) != 0 ||
                   get_size(c, obj, path, "max_response_bytes", false, 32 << 20, 1024, &l->max_response_bytes) != 0 ||
                   get_size(c, obj, path, "max_exclude", false, 4096, 0, &l->max_exclude) != 0 ||
                   get_size(c, obj, path, "max_generated_elements", false, DEFAULT_MAX_GENERATED, 1,
                            &l->max_generated_elements) != 0 ||
                   get_size(c, obj, path, "max_request_memory", false, 0, 0, &l->max_request_memory) != 0 ||
                   get_number(c, obj, path, "sync_seconds", 10.0, seconds_ok, "a number of seconds in (0, 86400]",
                              &l->sync_seconds) != 0 ||
                   get_unsigned(c, obj, path, "request_timeout_s", 60, 0, 86400, &l->request_timeout_s) != 0 ||
                   get_unsigned(c, obj, path, "job_ttl_s", 600, 1, 86400 * 7, &l->job_ttl_s) != 0 ||
                   get_unsigned(c, obj, path, "max_jobs_per_client", 16, 1, 100000, &l->max_jobs_per_client) != 0
               ? -1
               : 0;
}

/* "uploads": whether writes are allowed ("enabled"; absent: decided by the
 * listen address), the bearer token, where bodies are streamed and the limits
 * of user matrices. */
static int parse_uploads(const ctx *c, const json_t *root, es_uploads_conf *u)
{
    static const char *const keys[] = {ES_UPLOADS_FIELDS(FIELD_KEY) NULL};
    const char *path = "uploads", *token, *tmp_dir, *dir;
    json_t *obj, *enabled;
    if (get_object(c, root, "", "uploads", false, &obj) != 0 || (obj && check_keys(c, obj, path, keys) != 0) ||
        member(c, obj, path, "enabled", false, &enabled) != 0)
        return -1;
    if (enabled && !json_is_boolean(enabled))
        return type_fail(c, path, "enabled", "a boolean", enabled);
    u->enabled = enabled ? json_is_true(enabled) : -1;
    if (get_string(c, obj, path, "token", "", &token) != 0 || get_string(c, obj, path, "tmp_dir", "", &tmp_dir) != 0 ||
        get_string(c, obj, path, "dir", "", &dir) != 0 ||
        get_size(c, obj, path, "max_body_bytes", false, 4LL << 30, 1, &u->max_body_bytes) != 0 ||
        get_size(c, obj, path, "max_total_bytes", false, 4LL << 30, 1, &u->max_total_bytes) != 0 ||
        get_size(c, obj, path, "max_matrices", false, 1024, 1, &u->max_matrices) != 0 ||
        get_size(c, obj, path, "max_pending_bytes", false, 4LL << 30, 1, &u->max_pending_bytes) != 0 ||
        get_size(c, obj, path, "max_labels_bytes", false, ES_LABELS_DEFAULT_MAX_BYTES, 1, &u->max_labels_bytes) != 0)
        return -1;
    u->token = es_strdup(token);
    u->tmp_dir = es_strdup(tmp_dir);
    u->dir = es_strdup(dir);
    return 0;
}

/* ---------------------------------------------------------------- recipes (reload) */

/* The entry as canonical JSON (sorted keys, compact) without its "description",
 * which does not change the data. Newly allocated; cannot fail. */
static char *entry_text(const json_t *spec)
{
    json_t *copy = json_deep_copy(spec);
    json_object_del(copy, "description");
    json_object_del(copy, "labels");
    char *text = json_dumps(copy, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(copy);
    if (!text) { /* jansson's allocation failed: end like es_malloc does */
        es_error("out of memory serialising a configuration entry");
        abort();
    }
    char *out = es_strdup(text);
    free(text);
    return out;
}

/* Keep that m was made by `text` in the registry being built (nothing for an
 * upload's entry). Takes over text; retains m. Cannot fail. */
static void record_recipe(const ctx *c, char *text, es_matrix *m)
{
    if (c->reg)
        es_registry_add_recipe(c->reg, text, m);
    else
        free(text);
}

/* The previous registry's matrix made by `text`, under id (renamed if needed),
 * into *out and recorded; false if there is none. */
static bool reuse_recipe(const ctx *c, const char *text, const char *id, es_matrix **out)
{
    es_matrix *m = es_registry_recipe(c->previous, text);
    if (!m)
        return false;
    *out = strcmp(m->id, id) == 0 ? es_matrix_retain(m) : es_matrix_renamed(m, id);
    record_recipe(c, es_strdup(text), *out);
    c->reg->n_reused++;
    es_info("kept %s (entry and file unchanged)", id);
    return true;
}

/* Seconds since the epoch of st's modification time. */
static double mtime_of(const struct stat *st) { return (double)st->st_mtim.tv_sec + (double)st->st_mtim.tv_nsec * 1e-9; }

/* The "created" of configured generated matrices and views: the binary's
 * modification time (the code that makes them), a data file's own time that
 * of file entries. Both are the same on every replica of one image and
 * volume, unlike a load time or the configuration file's time (each pod's
 * kubelet writes its own copy of a ConfigMap), so replicas list the same
 * catalogue (and ETag). 0 if the binary cannot be stat'ed. */
static double made_at(void)
{
    struct stat st;
    return stat("/proc/self/exe", &st) == 0 ? mtime_of(&st) : 0;
}

/* The recipe of a file entry: the resolved path, the file's device, inode, size
 * and modification time, and the entry. NULL if the file cannot be stat'ed (it
 * is then loaded, and fails there). Caller frees. */
static char *file_recipe(const json_t *spec, const char *full)
{
    struct stat st;
    if (stat(full, &st) != 0)
        return NULL;
    char *entry = entry_text(spec);
    char *text = es_asprintf("file %s %ju:%ju:%jd:%jd.%09ld %s", full, (uintmax_t)st.st_dev, (uintmax_t)st.st_ino,
                             (intmax_t)st.st_size, (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, entry);
    free(entry);
    return text;
}

/* ---------------------------------------------------------------- matrices */

/* Build state of one matrix entry while a model's matrices are resolved (views
 * may refer to entries defined later, so they are built depth first). */
enum { TODO, BUSY, DONE };

typedef struct model_build {
    const ctx *c;
    es_model *model;
    json_t **specs;   /* per matrix: its JSON object */
    int *state;       /* per matrix: TODO / BUSY / DONE */
    char **paths;     /* per matrix: "models.M.matrices.X" */
} model_build;

static int build_matrix(model_build *b, size_t i);

/* Optional "model_axis" ("columns" | "rows"); *present tells whether given. */
static int get_axis(const ctx *c, const json_t *spec, const char *path, es_axis *axis, bool *present)
{
    const char *text;
    char p[KEYPATH_LEN];
    if (get_string(c, spec, path, "model_axis", "", &text) != 0)
        return -1;
    *present = *text != '\0';
    join_key(p, path, "model_axis");
    if (*present && es_axis_parse(text, axis) != 0)
        return conf_fail(c, p, "expected \"columns\" or \"rows\", got \"%s\"", text);
    return 0;
}

/* The source of file `full`, opened at its first use and kept until the config is
 * loaded, with its converted copies in cache_dir (NULL: none); ES_E_IO (in
 * *inner) if it cannot be opened. */
static int cached_source(source_cache *sc, const char *full, const char *cache_dir, es_source **out, es_err *inner)
{
    for (size_t i = 0; i < sc->n; i++) {
        if (strcmp(sc->paths[i], full) == 0) {
            *out = sc->sources[i];
            return 0;
        }
    }
    if (es_source_open_cached(full, cache_dir, out, inner) != 0)
        return -1;
    sc->paths = es_realloc(sc->paths, (sc->n + 1) * sizeof *sc->paths);
    sc->sources = es_realloc(sc->sources, (sc->n + 1) * sizeof *sc->sources);
    sc->paths[sc->n] = es_strdup(full);
    sc->sources[sc->n++] = *out;
    return 0;
}

/* Close every cached source. */
static void source_cache_clear(source_cache *sc)
{
    for (size_t i = 0; i < sc->n; i++) {
        free(sc->paths[i]);
        es_source_free(sc->sources[i]);
    }
    free(sc->paths);
    free(sc->sources);
    *sc = (source_cache){0};
}

/* The model axis of a file matrix without "model_axis": a GPT-2 Conv1D weight's
 * known one from its safetensors tensor name (es_conv1d_axis), else the default,
 * columns; *origin says which. */
static es_axis unstated_axis(const char *tensor, es_axis_origin *origin)
{
    es_axis axis = ES_AXIS_COLUMNS;
    *origin = es_conv1d_axis(tensor, &axis) == 0 ? ES_AXIS_BY_NAME : ES_AXIS_DEFAULTED;
    return axis;
}

/* A matrix read from a file: {"file", "tensor", "model_axis" (default: the known
 * axis of a GPT-2 Conv1D tensor name, else "columns"), "description"}. "tensor" names the tensor of a .safetensors file (required
 * there) and is refused for .npy files; the store decides the format. Each file
 * is opened once per config (cached_source). The provenance source is the path as
 * written in the config; the resolved path (for the log, saying when the
 * matrix came from its converted copy in server.cache_dir) goes to *resolved. */
static int load_file_matrix(const ctx *c, const json_t *spec, const char *path, const char *id, es_matrix **out,
                            char **resolved, double *made)
{
    static const char *const keys[] = {"file", "tensor", "model_axis", "description", "labels", NULL};
    const char *file, *tensor;
    es_axis axis = ES_AXIS_COLUMNS;
    bool has_axis;
    char pfile[KEYPATH_LEN], ptensor[KEYPATH_LEN];
    join_key(pfile, path, "file");
    join_key(ptensor, path, "tensor");
    if (check_keys(c, spec, path, keys) != 0 || get_string(c, spec, path, "file", NULL, &file) != 0 ||
        get_string(c, spec, path, "tensor", "", &tensor) != 0 || get_axis(c, spec, path, &axis, &has_axis) != 0)
        return -1;
    es_axis_origin origin = ES_AXIS_STATED;
    if (!has_axis)
        axis = unstated_axis(tensor, &origin);
    char *full = path_under(c->data_dir, file), *recipe = file_recipe(spec, full);
    struct stat st;
    if (stat(full, &st) == 0)
        *made = mtime_of(&st);
    if (recipe && reuse_recipe(c, recipe, id, out)) {
        free(recipe);
        *resolved = full;
        return 0;
    }
    es_err inner;
    es_source *src;
    int rc = cached_source(c->sources, full, c->upload ? NULL : c->reg->server.cache_dir, &src, &inner);
    size_t hits = rc == 0 ? es_source_cache_hits(src) : 0;
    if (rc == 0)
        rc = es_source_load_tensor(src, id, tensor, axis, file, out, &inner);
    if (rc != 0) {
        free(recipe);
        free(full);
        bool tensor_problem = inner.code == ES_E_NOTFOUND || strcmp(inner.param, "tensor") == 0;
        return pass_through(c, tensor_problem ? ptensor : pfile, &inner);
    }
    (*out)->axis_origin = origin;
    if (recipe)
        record_recipe(c, recipe, *out);
    *resolved = es_source_cache_hits(src) > hits ? es_asprintf("%s (its converted copy in cache_dir)", full) : full;
    if (*resolved != full)
        free(full);
    return 0;
}

/* Accepts base > 1. */
static bool base_ok(double x) { return x > 1.0; }
/* Accepts x >= 0. */
static bool nonneg_ok(double x) { return x >= 0.0; }
/* Accepts x > 0. */
static bool positive_ok(double x) { return x > 0.0; }

/* A generated matrix above the limit: ES_E_CONFIG at the entry's key path in a
 * configuration, ES_E_LIMIT naming "max_generated_elements" for an upload (a
 * request error of the limit class). Returns -1. */
static int size_fail(const ctx *c, const char *path, const char *text)
{
    if (c->upload)
        return es_fail(c->err, ES_E_LIMIT, "max_generated_elements", "%s: %s", c->origin, text);
    return conf_fail(c, path, "%s", text);
}

/* Refuse to generate a rows x cols matrix of more than limits.max_generated_elements
 * elements, or a Gaussian one whose cost rows x cols x min(rows, cols) exceeds
 * GAUSSIAN_WORK_FACTOR times that (checked multiplications); fails through
 * size_fail naming the limit. An upload's matrix larger than its room is
 * refused too (ES_E_STORAGE), before any of it is allocated. */
static int check_generated_size(const ctx *c, const char *path, const char *gen, size_t rows, size_t cols)
{
    size_t limit = c->limits->max_generated_elements, elements, work, work_limit;
    char text[300];
    if (es_mul_size(rows, cols, &elements) != 0 || elements > limit) {
        snprintf(text, sizeof text, "a %zu x %zu %s matrix has more than limits.max_generated_elements = %zu elements",
                 rows, cols, gen, limit);
        return size_fail(c, path, text);
    }
    size_t bytes;
    if (c->room && (es_mul_size(elements, sizeof(double), &bytes) != 0 || bytes > *c->room))
        return es_fail(c->err, ES_E_STORAGE, "uploads.max_total_bytes",
                       "%s: a %zu x %zu %s matrix needs %zu bytes of doubles, more than the %zu bytes "
                       "uploads.max_total_bytes leaves to it",
                       c->origin, rows, cols, gen, elements * sizeof(double), *c->room);
    if (strcmp(gen, "gaussian") != 0)
        return 0;
    if (es_mul_size(limit, GAUSSIAN_WORK_FACTOR, &work_limit) != 0)
        work_limit = SIZE_MAX;
    if (es_mul_size(elements, rows < cols ? rows : cols, &work) != 0 || work > work_limit) {
        snprintf(text, sizeof text,
                 "a %zu x %zu gaussian matrix costs rows x cols x min(rows, cols) above %d x "
                 "limits.max_generated_elements = %zu",
                 rows, cols, GAUSSIAN_WORK_FACTOR, work_limit);
        return size_fail(c, path, text);
    }
    return 0;
}

int es_config_check_generated(const es_limits *limits, const char *generator, size_t rows, size_t cols,
                              const size_t *room, es_err *err)
{
    ctx c = {.origin = "generator", .limits = limits, .upload = true, .room = room, .err = err};
    return check_generated_size(&c, "", generator, rows, cols);
}

/* A generated matrix: {"generator": "sinusoidal" | "rope", "n_positions", "d_model"
 * (even), "base" (10000)} or {"generator": "gaussian", "rows", "cols", "decay" (1),
 * "scale" (1), "seed" (0)}, each with an optional "description". */
static int generate_fresh(const ctx *c, const json_t *spec, const char *path, const char *id, es_matrix **out)
{
    static const char *const wave_keys[] = {"generator", "n_positions", "d_model", "base", "description", "labels", NULL};
    static const char *const gauss_keys[] = {"generator", "rows", "cols", "decay", "scale", "seed", "description", "labels",
                                             NULL};
    const char *gen;
    char pgen[KEYPATH_LEN];
    join_key(pgen, path, "generator");
    if (get_string(c, spec, path, "generator", NULL, &gen) != 0)
        return -1;
    es_err inner;
    int rc;
    if (strcmp(gen, "sinusoidal") == 0 || strcmp(gen, "rope") == 0) {
        long long n, d;
        double base;
        if (check_keys(c, spec, path, wave_keys) != 0 ||
            get_int(c, spec, path, "n_positions", true, 0, 1, INT_MAX, &n) != 0 ||
            get_int(c, spec, path, "d_model", true, 0, 2, INT_MAX, &d) != 0 ||
            get_number(c, spec, path, "base", 10000.0, base_ok, "> 1", &base) != 0)
            return -1;
        if (d % 2 != 0) {
            char p[KEYPATH_LEN];
            join_key(p, path, "d_model");
            return conf_fail(c, p, "expected an even integer, got %lld", d);
        }
        if (check_generated_size(c, path, gen, (size_t)n, (size_t)d) != 0)
            return -1;
        rc = (gen[0] == 's' ? es_gen_sinusoidal : es_gen_rope)(id, (size_t)n, (size_t)d, base, out, &inner);
    } else if (strcmp(gen, "gaussian") == 0) {
        long long rows, cols, seed;
        double decay, scale;
        if (check_keys(c, spec, path, gauss_keys) != 0 ||
            get_int(c, spec, path, "rows", true, 0, 1, INT_MAX, &rows) != 0 ||
            get_int(c, spec, path, "cols", true, 0, 1, INT_MAX, &cols) != 0 ||
            get_number(c, spec, path, "decay", 1.0, nonneg_ok, ">= 0", &decay) != 0 ||
            get_number(c, spec, path, "scale", 1.0, positive_ok, "> 0", &scale) != 0 ||
            get_int(c, spec, path, "seed", false, 0, 0, LLONG_MAX, &seed) != 0 ||
            check_generated_size(c, path, gen, (size_t)rows, (size_t)cols) != 0)
            return -1;
        rc = es_gen_gaussian(id, (size_t)rows, (size_t)cols, decay, scale, (uint64_t)seed, out, &inner);
    } else {
        return conf_fail(c, pgen, "expected \"sinusoidal\", \"rope\" or \"gaussian\", got \"%s\"", gen);
    }
    return rc != 0 ? pass_through(c, path, &inner) : 0;
}

/* A generated matrix (generate_fresh), or the previous registry's one made by
 * the same entry; fails like generate_fresh. */
static int generate_matrix(const ctx *c, const json_t *spec, const char *path, const char *id, es_matrix **out)
{
    char *entry = entry_text(spec), *recipe = es_asprintf("generator %s", entry);
    free(entry);
    int rc = 0;
    if (reuse_recipe(c, recipe, id, out))
        free(recipe);
    else if ((rc = generate_fresh(c, spec, path, id, out)) == 0)
        record_recipe(c, recipe, *out);
    else
        free(recipe);
    return rc;
}

/* Replace *cur by the result *next of a view step that returned rc, releasing the
 * old one; on failure report the store's message at key path `path`. (next is
 * passed by address: the step fills it while this call's arguments are evaluated.) */
static int view_step(const ctx *c, const char *path, es_matrix **cur, int rc, es_matrix *const *next,
                     const es_err *inner)
{
    if (rc != 0)
        return pass_through(c, path, inner);
    es_matrix_release(*cur);
    *cur = *next;
    return 0;
}

/* The optional last view step "average_rows": g (integer >= 1): replace *cur by a
 * derived copy whose items are the means of groups of g consecutive items (the
 * row-averaging ablation, es_matrix_average_rows). Fails at "….average_rows" on a
 * bad type or g above the number of items. */
static int average_step(const ctx *c, const json_t *spec, const char *path, const char *id, es_matrix **cur)
{
    size_t g;
    char p[KEYPATH_LEN];
    join_key(p, path, "average_rows");
    if (!json_object_get(spec, "average_rows"))
        return 0;
    if (get_size(c, spec, path, "average_rows", true, 1, 1, &g) != 0)
        return -1;
    es_err inner;
    es_matrix *next = NULL;
    return view_step(c, p, cur, es_matrix_average_rows(*cur, id, g, &next, &inner), &next, &inner);
}

/* Apply a view's steps to `base` in a fixed order: rows [r0, r1), columns [c0, c1),
 * transpose, model_axis, average_rows. Without any step the view is an alias (a new id). */
static int apply_view(const ctx *c, const json_t *spec, const char *path, const char *id, es_matrix *base,
                      es_matrix **out)
{
    size_t range[2];
    bool has_rows = false, has_cols = false, transpose = false, has_axis = false;
    es_axis axis = base->model_axis;
    es_err inner;
    es_matrix *cur = es_matrix_retain(base), *next = NULL;
    char p[KEYPATH_LEN];
    int rc = get_range(c, spec, path, "rows", cur->rows, range, &has_rows);
    join_key(p, path, "rows");
    if (rc == 0 && has_rows)
        rc = view_step(c, p, &cur, es_view_rows(cur, id, range[0], range[1], &next, &inner), &next, &inner);
    if (rc == 0)
        rc = get_range(c, spec, path, "columns", cur->cols, range, &has_cols);
    join_key(p, path, "columns");
    if (rc == 0 && has_cols)
        rc = view_step(c, p, &cur, es_view_columns(cur, id, range[0], range[1], &next, &inner), &next, &inner);
    if (rc == 0)
        rc = get_bool(c, spec, path, "transpose", &transpose);
    join_key(p, path, "transpose");
    if (rc == 0 && transpose)
        rc = view_step(c, p, &cur, es_view_transpose(cur, id, &next, &inner), &next, &inner);
    if (rc == 0)
        rc = get_axis(c, spec, path, &axis, &has_axis);
    join_key(p, path, "model_axis");
    bool averaged = json_object_get(spec, "average_rows") != NULL;
    if (rc == 0 && (has_axis || !(has_rows || has_cols || transpose || averaged)))
        rc = view_step(c, p, &cur, es_view_axis(cur, id, has_axis ? axis : cur->model_axis, &next, &inner), &next,
                       &inner);
    if (rc == 0)
        rc = average_step(c, spec, path, id, &cur);
    if (rc != 0) {
        es_matrix_release(cur);
        return -1;
    }
    *out = cur;
    return 0;
}

/* Fail with the chain of views that leads back to entry i. */
/* The name inside `model` that a view's target names: the target itself, or
 * MATRIX of "MODEL/MATRIX" when MODEL is this model; NULL for another model. */
static const char *local_name(const es_model *model, const char *target)
{
    const char *slash = strchr(target, '/');
    if (!slash)
        return target;
    size_t len = (size_t)(slash - target);
    return strlen(model->name) == len && strncmp(target, model->name, len) == 0 ? slash + 1 : NULL;
}

static int cycle_fail(model_build *b, size_t i)
{
    char chain[300] = "";
    size_t at = i;
    for (int hops = 0; hops < 16; hops++) {
        snprintf(chain + strlen(chain), sizeof chain - strlen(chain), "%s\"%s\"", hops ? " -> " : "",
                 b->model->matrix_names[at]);
        if (hops > 0 && at == i)
            break;
        const char *view = json_string_value(json_object_get(b->specs[at], "view"));
        at = (size_t)es_model_find(b->model, local_name(b->model, view));
    }
    char p[KEYPATH_LEN];
    join_key(p, b->paths[i], "view");
    return conf_fail(b->c, p, "views form a cycle: %s", chain);
}

/* The matrix of the catalogue a view names ("MODEL/MATRIX", or a bare MATRIX
 * of `model`), or NULL. In a configuration the catalogue holds the models
 * defined before the one being built. */
static es_matrix *catalogue_matrix(const ctx *c, const char *model, const char *target)
{
    const es_matrix *m = NULL;
    if (c->catalogue && strchr(target, '/'))
        es_registry_lookup(c->catalogue, target, "view", &m, NULL);
    else if (c->catalogue)
        m = es_registry_matrix(c->catalogue, model, target);
    return (es_matrix *)m; /* retained by apply_view, never modified */
}

/* A view of another matrix: {"view", "rows", "columns", "transpose",
 * "model_axis", "average_rows", "description"}. The target is an entry of the
 * same model (built first; an upload's entry has no siblings) or a matrix of
 * the catalogue ("MODEL/MATRIX"). */
static int view_matrix(model_build *b, size_t i, const char *id, es_matrix **out)
{
    static const char *const keys[] = {"view", "rows", "columns", "transpose", "model_axis", "average_rows",
                                       "description", "labels", NULL};
    const ctx *c = b->c;
    const char *path = b->paths[i], *target, *local;
    char p[KEYPATH_LEN];
    join_key(p, path, "view");
    if (check_keys(c, b->specs[i], path, keys) != 0 || get_string(c, b->specs[i], path, "view", NULL, &target) != 0)
        return -1;
    if (c->upload && (local = local_name(b->model, target)) && strcmp(local, b->model->matrix_names[i]) == 0)
        return conf_fail(c, p, "a view cannot name itself (\"%s\"): name the matrix it should show", target);
    long t = !c->upload && (local = local_name(b->model, target)) ? es_model_find(b->model, local) : -1;
    if (t >= 0 && b->state[t] == BUSY)
        return cycle_fail(b, (size_t)t);
    if (t >= 0)
        return build_matrix(b, (size_t)t) != 0 ? -1 : apply_view(c, b->specs[i], path, id, b->model->matrices[t], out);
    es_matrix *m = catalogue_matrix(c, b->model->name, target);
    if (!m)
        return conf_fail(c, p,
                         "no matrix \"%s\": a view names a matrix of its own model (\"MATRIX\") or of %s "
                         "(\"MODEL/MATRIX\")",
                         target, c->upload ? "any loaded model" : "a model defined before this one");
    return apply_view(c, b->specs[i], path, id, m, out);
}

/* Log one loaded matrix (the daemon's start-up log), with the resolved path of
 * its file when it was read from one (`from`, else NULL): provenance keeps only
 * the path as written in the config. */
static void log_loaded(const es_matrix *m, const char *from, double seconds)
{
    es_info("loaded %s %zux%zu %s sha256 %.12s model_axis %s%s%s%s%s%s%s in %.1f ms", m->id, m->rows, m->cols,
            m->prov.dtype, m->prov.sha256, es_axis_name(m->model_axis),
            m->axis_origin == ES_AXIS_STATED ? "" : " (from the ", m->axis_origin == ES_AXIS_STATED ? "" :
            m->axis_origin == ES_AXIS_BY_NAME ? "tensor name)" : "default: not stated)", *m->prov.view ? " view " : "",
            m->prov.view, from ? " from " : "", from ? from : "", seconds * 1e3);
}

/* The format of a labels file, by its name: .csv, .json, else TSV. */
static es_labels_format labels_format_of(const char *file)
{
    const char *dot = strrchr(file, '.');
    return dot && strcasecmp(dot, ".csv") == 0 ? ES_LABELS_CSV
           : dot && strcasecmp(dot, ".json") == 0 ? ES_LABELS_JSON
                                                  : ES_LABELS_TSV;
}

/* The whole file at path, at most max bytes (ES_E_LIMIT naming
 * "uploads.max_labels_bytes" above), into a new buffer; ES_E_IO if unreadable. */
static int read_bounded(const char *path, size_t max, char **out, size_t *len, es_err *err)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        int rc = es_fail(err, ES_E_IO, "labels", "%s: %s", path, strerror(errno));
        if (f)
            fclose(f);
        return rc;
    }
    if ((size_t)st.st_size > max) {
        fclose(f);
        return es_fail(err, ES_E_LIMIT, "uploads.max_labels_bytes", "%s holds %lld bytes, above "
                       "uploads.max_labels_bytes = %zu", path, (long long)st.st_size, max);
    }
    char *buf = es_malloc((size_t)st.st_size + 1);
    *len = fread(buf, 1, (size_t)st.st_size, f);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return es_fail(err, ES_E_IO, "labels", "%s: read error", path);
    }
    buf[*len] = '\0';
    *out = buf;
    return 0;
}

/* An entry's "labels": a TSV (header row; one column without header), CSV or
 * JSON file under data_dir, one row per item of m, at most
 * uploads.max_labels_bytes. Nothing when absent; refused in an upload's entry
 * (labels are sent to .../labels). */
static int load_labels(const ctx *c, const json_t *spec, const char *path, const es_matrix *m, es_labels **out)
{
    const char *file;
    char p[KEYPATH_LEN];
    join_key(p, path, "labels");
    if (!json_object_get(spec, "labels"))
        return 0;
    if (get_string(c, spec, path, "labels", NULL, &file) != 0)
        return -1;
    if (c->upload)
        return conf_fail(c, p, "an upload's entry cannot name a labels file on the server: PUT the labels to "
                               "the matrix's /labels");
    char *full = path_under(c->data_dir, file), *text = NULL;
    es_err inner;
    size_t len = 0;
    int rc = read_bounded(full, c->reg->uploads.max_labels_bytes, &text, &len, &inner);
    if (rc == 0)
        rc = es_labels_parse(text, len, labels_format_of(file), es_matrix_items(m), c->reg->uploads.max_labels_bytes,
                             "labels", "uploads.max_labels_bytes", out, &inner);
    free(text);
    free(full);
    return rc == 0 ? 0 : pass_through(c, p, &inner);
}

/* Build entry i of the model (once), dispatching on which of "file",
 * "generator", "view" it has (exactly one). */
static int build_matrix(model_build *b, size_t i)
{
    static const char *const kinds[] = {"file", "generator", "view"};
    const ctx *c = b->c;
    const json_t *spec = b->specs[i];
    const char *path = b->paths[i], *description;
    if (b->state[i] == DONE)
        return 0;
    int nkinds = 0;
    for (size_t k = 0; k < 3; k++)
        nkinds += json_object_get(spec, kinds[k]) != NULL;
    if (nkinds != 1)
        return conf_fail(c, path, "expected exactly one of \"file\", \"generator\", \"view\", got %d", nkinds);
    if (c->upload && json_object_get(spec, "file")) {
        char p[KEYPATH_LEN];
        join_key(p, path, "file");
        return conf_fail(c, p, "an upload cannot name a file on the server: send the .npy or .safetensors file "
                               "itself as the body, or a \"generator\" or \"view\" entry");
    }
    if (get_string(c, spec, path, "description", "", &description) != 0)
        return -1;
    if (c->upload && strlen(description) > ES_UPLOAD_DESCRIPTION_MAX) {
        char p[KEYPATH_LEN];
        join_key(p, path, "description");
        return conf_fail(c, p, "a description of an upload holds at most %d bytes, got %zu",
                         ES_UPLOAD_DESCRIPTION_MAX, strlen(description));
    }
    b->state[i] = BUSY;
    char *id = es_asprintf("%s/%s", b->model->name, b->model->matrix_names[i]);
    es_matrix *m = NULL;
    char *from = NULL;
    double t0 = es_now(), made = c->made;
    int rc = json_object_get(spec, "file")        ? load_file_matrix(c, spec, path, id, &m, &from, &made)
             : json_object_get(spec, "generator") ? generate_matrix(c, spec, path, id, &m)
                                                  : view_matrix(b, i, id, &m);
    free(id);
    if (rc != 0)
        return -1;
    log_loaded(m, from, es_now() - t0);
    free(from);
    if (load_labels(c, spec, path, m, &b->model->matrix_labels[i]) != 0) {
        es_matrix_release(m);
        return -1;
    }
    b->model->matrices[i] = m;
    b->model->matrix_descriptions[i] = es_strdup(description);
    b->model->matrix_created[i] = made;
    b->state[i] = DONE;
    return 0;
}

/* One model: {"description", "n_heads" (attention heads of its multi-head weights,
 * optional: the "head" request parameter and the attention endpoints' default need
 * it), "matrices": {NAME: ENTRY, ...}} (at least one matrix). */
static int build_model(const ctx *c, const char *name, const json_t *spec, es_model *model)
{
    static const char *const keys[] = {"description", "n_heads", "matrices", NULL};
    char path[KEYPATH_LEN], mpath[KEYPATH_LEN];
    const char *description;
    json_t *matrices;
    size_t n_heads;
    join_key(path, "models", name);
    join_key(mpath, path, "matrices");
    if (check_name(c, "models", name, "model") != 0)
        return -1;
    if (!json_is_object(spec))
        return conf_fail(c, path, "expected an object, got %s", kind_name(spec));
    if (check_keys(c, spec, path, keys) != 0 || get_string(c, spec, path, "description", "", &description) != 0 ||
        get_size(c, spec, path, "n_heads", false, 0, 1, &n_heads) != 0 ||
        get_object(c, spec, path, "matrices", true, &matrices) != 0)
        return -1;
    model->n_heads = n_heads;
    model->name = es_strdup(name);
    model->description = es_strdup(description);
    size_t n = json_object_size(matrices);
    if (n == 0)
        return conf_fail(c, mpath, "a model needs at least one matrix");
    model->matrices = es_calloc(n, sizeof *model->matrices);
    model->matrix_names = es_calloc(n, sizeof *model->matrix_names);
    model->matrix_descriptions = es_calloc(n, sizeof *model->matrix_descriptions);
    model->matrix_created = es_calloc(n, sizeof *model->matrix_created);
    model->matrix_labels = es_calloc(n, sizeof *model->matrix_labels);
    model->n_matrices = n;
    model_build b = {c, model, es_calloc(n, sizeof(json_t *)), es_calloc(n, sizeof(int)),
                     es_calloc(n, sizeof(char *))};
    int rc = 0;
    size_t i = 0;
    const char *key;
    json_t *value;
    json_object_foreach(matrices, key, value) {
        model->matrix_names[i] = es_strdup(key);
        b.specs[i] = value;
        b.paths[i] = es_malloc(KEYPATH_LEN);
        join_key(b.paths[i], mpath, key);
        if (rc == 0 && check_name(c, mpath, key, "matrix") != 0)
            rc = -1;
        if (rc == 0 && !json_is_object(value))
            rc = conf_fail(c, b.paths[i], "expected an object, got %s", kind_name(value));
        i++;
    }
    for (i = 0; rc == 0 && i < n; i++)
        rc = build_matrix(&b, i);
    for (i = 0; i < n; i++)
        free(b.paths[i]);
    free(b.paths);
    free(b.state);
    free(b.specs);
    return rc;
}

/* "models": {NAME: MODEL, ...}, at least one. */
static int parse_models(const ctx *c, const json_t *root, es_registry *r)
{
    json_t *models;
    if (get_object(c, root, "", "models", true, &models) != 0)
        return -1;
    if (json_object_size(models) == 0)
        return conf_fail(c, "models", "at least one model is needed");
    r->models = es_calloc(json_object_size(models), sizeof *r->models);
    const char *name;
    json_t *spec;
    json_object_foreach(models, name, spec) {
        if (build_model(c, name, spec, &r->models[r->n_models++]) != 0)
            return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- warm */

/* One warm entry {"matrix": "model/matrix", "rows": slice (default "" = all),
 * "center": "none" | "columns" | "rows" (required)}; the rows must select at least
 * one item of that matrix. */
static int parse_warm_entry(const ctx *c, const es_registry *r, const json_t *spec, const char *path, es_warm *w)
{
    static const char *const keys[] = {"matrix", "rows", "center", NULL};
    const char *id, *rows, *center;
    char p[KEYPATH_LEN];
    const es_matrix *m;
    es_err inner;
    if (!json_is_object(spec))
        return conf_fail(c, path, "expected an object, got %s", kind_name(spec));
    if (check_keys(c, spec, path, keys) != 0 || get_string(c, spec, path, "matrix", NULL, &id) != 0 ||
        get_string(c, spec, path, "rows", "", &rows) != 0 || get_string(c, spec, path, "center", NULL, &center) != 0)
        return -1;
    join_key(p, path, "matrix");
    if (es_registry_lookup(r, id, p, &m, &inner) != 0)
        return pass_through(c, p, &inner);
    join_key(p, path, "rows");
    size_t *idx = NULL, n = 0;
    es_rowsel sel = {0};
    if (es_rowsel_parse(rows, p, &sel, &inner) != 0)
        return pass_through(c, p, &inner);
    int rc = es_rowsel_resolve(&sel, es_matrix_items(m), &idx, &n, &inner);
    es_rowsel_free(&sel);
    if (rc != 0)
        return pass_through(c, p, &inner);
    free(idx);
    join_key(p, path, "center");
    if (es_centering_parse(center, &w->centering) != 0)
        return conf_fail(c, p, "expected \"none\", \"columns\" or \"rows\", got \"%s\"", center);
    w->matrix = es_strdup(id);
    w->rows = es_strdup(rows);
    return 0;
}

/* "warm": [ENTRY, ...], default none. */
static int parse_warm(const ctx *c, const json_t *root, es_registry *r)
{
    json_t *warm;
    char p[KEYPATH_LEN];
    if (member(c, root, "", "warm", false, &warm) != 0)
        return -1;
    if (!warm)
        return 0;
    if (!json_is_array(warm))
        return type_fail(c, "", "warm", "an array", warm);
    r->warm = es_calloc(json_array_size(warm), sizeof *r->warm);
    for (size_t i = 0; i < json_array_size(warm); i++) {
        join_index(p, "warm", i);
        if (parse_warm_entry(c, r, json_array_get(warm, i), p, &r->warm[i]) != 0)
            return -1;
        r->n_warm++;
    }
    return 0;
}

/* ---------------------------------------------------------------- loading */

/* Parse text and build the registry (one reference), keeping the unchanged
 * matrices of `previous` (NULL: none). data_dir_override (if non-NULL) replaces
 * the config's data_dir. */
static int load(const char *text, const char *origin, const char *base_dir, const char *data_dir_override,
                const es_registry *previous, es_registry **out, es_err *err)
{
    static const char *const keys[] = {"data_dir", "server", "limits", "uploads", "models", "warm", NULL};
    source_cache sources = {0};
    ctx c = {.origin = origin ? origin : "config", .sources = &sources, .previous = previous, .err = err,
             .made = made_at()};
    json_error_t jerr;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return es_fail(err, ES_E_CONFIG, "", "%s: line %d column %d: %s", c.origin, jerr.line, jerr.column,
                       jerr.text);
    es_registry *r = es_registry_new(c.origin);
    c.limits = &r->limits;
    c.base_dir = base_dir;
    c.reg = r;
    c.catalogue = r;
    const char *data_dir;
    int rc = json_is_object(root) ? 0 : conf_fail(&c, "", "expected an object, got %s", kind_name(root));
    if (rc == 0)
        rc = check_keys(&c, root, "", keys);
    if (rc == 0)
        rc = get_string(&c, root, "", "data_dir", ".", &data_dir);
    if (rc == 0) {
        c.data_dir = data_dir_override ? resolve_data_dir(".", data_dir_override) : resolve_data_dir(base_dir, data_dir);
        rc = parse_server(&c, root, &r->server) || parse_limits(&c, root, &r->limits) ||
                     parse_uploads(&c, root, &r->uploads) || parse_models(&c, root, r) || parse_warm(&c, root, r)
                 ? -1
                 : 0;
    }
    source_cache_clear(&sources);
    free(c.data_dir);
    json_decref(root);
    if (rc != 0) {
        es_registry_free(r);
        return -1;
    }
    *out = r;
    return 0;
}

/* See config.h: parse text (origin names it in messages), data_dir relative to base_dir. */
int es_config_load_text(const char *text, const char *origin, const char *base_dir, es_registry **out,
                        es_err *err)
{
    return load(text, origin, base_dir, NULL, NULL, out, err);
}

/* Read a whole file into a new NUL-terminated string; ES_E_IO (param "config")
 * naming the path and errno text on failure. */
static int read_text(const char *path, char **out, es_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return es_fail(err, ES_E_IO, "config", "%s: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = es_malloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0)
            buf = es_realloc(buf, cap *= 2);
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return es_fail(err, ES_E_IO, "config", "%s: read error", path);
    }
    buf[len] = '\0';
    if (strlen(buf) != len) {
        free(buf);
        return es_fail(err, ES_E_CONFIG, "", "%s: the file contains a NUL byte", path);
    }
    *out = buf;
    return 0;
}

/* Read and load a config file after `previous` (or NULL); its data_dir is
 * relative to the file's directory. Fails as es_config_load_file. */
static int load_path(const char *path, const es_registry *previous, es_registry **out, es_err *err)
{
    char *text = NULL;
    if (read_text(path, &text, err) != 0)
        return -1;
    const char *slash = strrchr(path, '/');
    char *dir = slash ? es_asprintf("%.*s", (int)(slash - path) + (slash == path), path) : es_strdup(".");
    int rc = load(text, path, dir, NULL, previous, out, err);
    free(dir);
    free(text);
    return rc;
}

/* The embedded default after `previous` (or NULL): data_dir against
 * ES_DEFAULT_CONFIG_DIR, or $EMBEDSCOPE_DATA_DIR when set and non-empty. */
static int load_default(const es_registry *previous, es_registry **out, es_err *err)
{
    const char *env = getenv("EMBEDSCOPE_DATA_DIR");
    return load(es_embedded_config, "embedded default", ES_DEFAULT_CONFIG_DIR, env && *env ? env : NULL, previous,
                out, err);
}

/* Read and load a config file; its data_dir is relative to the file's directory.
 * ES_E_IO (param "config") if it cannot be read, else as es_config_load_text. */
int es_config_load_file(const char *path, es_registry **out, es_err *err)
{
    return load_path(path, NULL, out, err);
}

/* The compiled-in config/embedscope.json. Cannot fail. */
const char *es_config_default_text(void) { return es_embedded_config; }

/* Load the embedded default; fails as es_config_load_text. */
int es_config_load_default(es_registry **out, es_err *err) { return load_default(NULL, out, err); }

/* See config.h: path (or the embedded default) after previous. */
int es_config_reload(const es_registry *previous, const char *path, es_registry **out, es_err *err)
{
    return path ? load_path(path, previous, out, err) : load_default(previous, out, err);
}

/* ---------------------------------------------------------------- uploads' entries */

/* See config.h: one entry of the configuration's grammar, built by the same
 * code as a configuration's (build_matrix) in upload mode: errors are request
 * errors, "file" is refused, views read the catalogue. */
int es_config_build_entry(const es_registry *cat, const char *model, const char *name, const char *text,
                          size_t len, const size_t *room, es_matrix **out, char **description, es_err *err)
{
    ctx c = {.origin = "request body", .limits = &cat->limits, .catalogue = cat, .upload = true, .room = room,
             .err = err};
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return es_fail(err, ES_E_PARAM, "", "request body: not JSON: %s at line %d column %d (byte %d)", jerr.text,
                       jerr.line, jerr.column, jerr.position);
    if (!json_is_object(root)) {
        int rc = conf_fail(&c, "", "expected a matrix entry (an object), got %s", kind_name(root));
        json_decref(root);
        return rc;
    }
    es_matrix *m = NULL;
    char *names[1] = {(char *)name}, *descriptions[1] = {NULL}, path[KEYPATH_LEN] = "", *paths[1] = {path};
    double created[1];
    es_labels *labels[1] = {NULL};
    es_model entry = {.name = (char *)model, .matrices = &m, .matrix_names = names,
                      .matrix_descriptions = descriptions, .matrix_created = created, .matrix_labels = labels,
                      .n_matrices = 1, .user = true};
    json_t *specs[1] = {root};
    int state[1] = {TODO};
    model_build b = {&c, &entry, specs, state, paths};
    int rc = build_matrix(&b, 0);
    json_decref(root);
    if (rc != 0)
        return -1;
    *out = m;
    *description = descriptions[0];
    return 0;
}
