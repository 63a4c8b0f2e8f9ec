/* Configuration: strict JSON (jansson) -> es_catalogue of loaded matrices (the
 * entries: entries.c), server settings, limits, uploads and the decompositions
 * to warm. Format: docs/configuration.md.
 *
 * Every problem is reported with the JSON key path (reader.c). Loading stops at
 * the first problem. */
#include "app/internal.h"
#include "embedscope/rowsel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef ES_DEFAULT_CONFIG_DIR
#define ES_DEFAULT_CONFIG_DIR "config"
#endif

/* config/embedscope.json, NUL-terminated, from src/core/embedded.S. */
extern const char es_embedded_config[];

/* Default of limits.max_generated_elements: 2^29 doubles, 4 GiB, so that a
 * Llama-sized stand-in (128256 x 4096, 525,336,576 elements) is generated
 * without touching a limit; an upload's generator is also bounded by the room
 * uploads.max_total_bytes leaves it. */
#define DEFAULT_MAX_GENERATED (1LL << 29)
/* limits.max_job_bytes: half of cache_mb's default (the decompositions' budget) */
#define DEFAULT_MAX_JOB_BYTES (256LL << 20)

/* The data directory: `dir` resolved against base_dir, made canonical when it
 * exists (so provenance shows a clean path). Newly allocated. */
static char *resolve_data_dir(const char *base_dir, const char *dir)
{
    char *joined = es_conf_path_under(base_dir && *base_dir ? base_dir : ".", dir);
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
        return es_conf_fail(c, path, "expected \"HOST:PORT\" (\"[IPV6]:PORT\"), PORT in 0..65535, got \"%s\"", text);
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
    es_conf_join_key(p, path, key);
    if (es_conf_member(c, obj, path, key, false, &v) != 0)
        return -1;
    if (v && !json_is_array(v))
        return es_conf_type_fail(c, path, key, "an array of strings", v);
    size_t n = 0;
    while (!v && dflt[n])
        n++;
    if (v)
        n = json_array_size(v);
    for (size_t i = 0; v && i < n; i++) {
        const json_t *s = json_array_get(v, i);
        es_conf_join_index(q, p, i);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return es_conf_fail(c, q, "expected a non-empty string, got %s", es_conf_kind_name(s));
        if (valid && !valid(json_string_value(s)))
            return es_conf_fail(c, q, "expected %s, got \"%s\"", what, json_string_value(s));
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
    if (es_conf_member(c, obj, path, "blas_threads", false, &v) != 0)
        return -1;
    if (!v || (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0)) {
        *out = 0;
        return 0;
    }
    if (json_is_string(v)) {
        char p[KEYPATH_LEN];
        es_conf_join_key(p, path, "blas_threads");
        return es_conf_fail(c, p, "expected \"auto\" or an integer in [1, 1024], got \"%s\"", json_string_value(v));
    }
    return es_conf_get_unsigned(c, obj, path, "blas_threads", 0, 1, 1024, out);
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
    if (es_conf_get_object(c, root, "", "server", false, &obj) != 0 ||
        (obj && es_conf_check_keys(c, obj, path, keys) != 0) ||
        es_conf_get_string(c, obj, path, "listen", ES_LISTEN_DEFAULT, &listen) != 0 ||
        parse_listen(c, "server.listen", listen, &s->host, &s->port) != 0 ||
        es_conf_get_unsigned(c, obj, path, "threads", 0, 1, 1024, &s->threads) != 0 ||
        get_blas_threads(c, obj, path, &s->blas_threads) != 0 ||
        es_conf_get_unsigned(c, obj, path, "light_threads", 1, 0, 1024, &s->light_threads) != 0 ||
        es_conf_get_unsigned(c, obj, path, "connection_timeout_s", 30, 0, 86400, &s->connection_timeout_s) != 0 ||
        es_conf_get_unsigned(c, obj, path, "connection_limit", 4096, 1, 1000000, &s->connection_limit) != 0 ||
        es_conf_get_unsigned(c, obj, path, "per_address_limit", 512, 1, 1000000, &s->per_address_limit) != 0 ||
        es_conf_get_unsigned(c, obj, path, "header_timeout_s", 10, 0, 86400, &s->header_timeout_s) != 0 ||
        es_conf_get_unsigned(c, obj, path, "body_grace_s", 10, 0, 86400, &s->body_grace_s) != 0 ||
        es_conf_get_unsigned(c, obj, path, "body_min_rate", 1024, 1, 1u << 30, &s->body_min_rate) != 0 ||
        es_conf_get_unsigned(c, obj, path, "shutdown_grace_s", 30, 0, 86400, &s->shutdown_grace_s) != 0 ||
        es_conf_get_int(c, obj, path, "cache_mb", false, 512, 1, 1LL << 30, &cache_mb) != 0 ||
        es_conf_get_string(c, obj, path, "cache_dir", "", &cache_dir) != 0 ||
        parse_strings(c, obj, path, "cors_origins", any_origin, NULL, NULL, &s->cors_origins) != 0 ||
        parse_strings(c, obj, path, "trusted_proxies", none, is_ip_address, "a numeric IP address",
                      &s->trusted_proxies) != 0)
        return -1;
    s->cache_bytes = (size_t)cache_mb << 20; /* at most 2^50: fits a 64-bit size_t */
    /* relative to the configuration's directory, like data_dir; "" = none */
    s->cache_dir = *cache_dir ? es_conf_path_under(c->base_dir && *c->base_dir ? c->base_dir : ".", cache_dir) : NULL;
    return 0;
}

static bool seconds_ok(double x) { return x > 0 && x <= 86400; }
static bool light_ok(double x) { return x >= 0 && x <= 86400; }

/* "limits": per-request limits the HTTP layer enforces, and the size of generated
 * matrices (checked here, before generating). max_request_cost, the flop
 * budget of earlier versions, is accepted and ignored (logged): requests are
 * now priced in seconds (sync_seconds) and refused only for memory. */
static int parse_limits(const ctx *c, const json_t *root, es_limits *l)
{
    static const char *const keys[] = {ES_LIMITS_FIELDS(FIELD_KEY) "max_request_cost", NULL};
    const char *path = "limits";
    json_t *obj;
    if (es_conf_get_object(c, root, "", "limits", false, &obj) != 0 ||
        (obj && es_conf_check_keys(c, obj, path, keys) != 0))
        return -1;
    if (obj && json_object_get(obj, "max_request_cost"))
        es_warn("%s: limits.max_request_cost is no longer used (requests are priced in seconds: "
                "limits.sync_seconds, limits.max_request_memory); ignored", c->origin);
    return es_conf_get_size(c, obj, path, "max_k", false, 768, 1, &l->max_k) != 0 ||
                   es_conf_get_size(c, obj, path, "max_bins", false, 512, 1, &l->max_bins) != 0 ||
                   es_conf_get_size(c, obj, path, "max_cells", false, 4 << 20, 1, &l->max_cells) != 0 ||
                   es_conf_get_size(c, obj, path, "max_rows", false, 0, 0, &l->max_rows) != 0 ||
                   es_conf_get_size(c, obj, path, "max_response_bytes", false, 32 << 20, 1024,
                                    &l->max_response_bytes) != 0 ||
                   es_conf_get_size(c, obj, path, "max_exclude", false, 4096, 0, &l->max_exclude) != 0 ||
                   es_conf_get_size(c, obj, path, "max_generated_elements", false, DEFAULT_MAX_GENERATED, 1,
                                    &l->max_generated_elements) != 0 ||
                   es_conf_get_size(c, obj, path, "max_request_memory", false, 0, 0, &l->max_request_memory) != 0 ||
                   es_conf_get_number(c, obj, path, "sync_seconds", 10.0, seconds_ok,
                                      "a number of seconds in (0, 86400]", &l->sync_seconds) != 0 ||
                   es_conf_get_number(c, obj, path, "light_seconds", 0.25, light_ok,
                                      "a number of seconds in [0, 86400]", &l->light_seconds) != 0 ||
                   es_conf_get_unsigned(c, obj, path, "request_timeout_s", 60, 0, 86400, &l->request_timeout_s) != 0 ||
                   es_conf_get_unsigned(c, obj, path, "max_wait_s", 600, 0, 86400, &l->max_wait_s) != 0 ||
                   es_conf_get_unsigned(c, obj, path, "job_ttl_s", 600, 1, 86400 * 7, &l->job_ttl_s) != 0 ||
                   es_conf_get_unsigned(c, obj, path, "max_jobs_per_client", 16, 1, 100000,
                                        &l->max_jobs_per_client) != 0 ||
                   es_conf_get_size(c, obj, path, "max_job_bytes", false, DEFAULT_MAX_JOB_BYTES, 0,
                                    &l->max_job_bytes) != 0
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
    if (es_conf_get_object(c, root, "", "uploads", false, &obj) != 0 ||
        (obj && es_conf_check_keys(c, obj, path, keys) != 0) ||
        es_conf_member(c, obj, path, "enabled", false, &enabled) != 0)
        return -1;
    if (enabled && !json_is_boolean(enabled))
        return es_conf_type_fail(c, path, "enabled", "a boolean", enabled);
    u->enabled = enabled ? json_is_true(enabled) : -1;
    if (es_conf_get_string(c, obj, path, "token", "", &token) != 0 ||
        es_conf_get_string(c, obj, path, "tmp_dir", "", &tmp_dir) != 0 ||
        es_conf_get_string(c, obj, path, "dir", "", &dir) != 0 ||
        es_conf_get_size(c, obj, path, "max_body_bytes", false, 4LL << 30, 1, &u->max_body_bytes) != 0 ||
        es_conf_get_size(c, obj, path, "max_total_bytes", false, 4LL << 30, 1, &u->max_total_bytes) != 0 ||
        es_conf_get_size(c, obj, path, "max_matrices", false, 1024, 1, &u->max_matrices) != 0 ||
        es_conf_get_size(c, obj, path, "max_pending_bytes", false, 4LL << 30, 1, &u->max_pending_bytes) != 0 ||
        es_conf_get_size(c, obj, path, "max_labels_bytes", false, ES_LABELS_DEFAULT_MAX_BYTES, 1,
                         &u->max_labels_bytes) != 0)
        return -1;
    u->token = es_strdup(token);
    u->tmp_dir = es_strdup(tmp_dir);
    u->dir = es_strdup(dir);
    return 0;
}

/* "models": {NAME: MODEL, ...}, at least one. */
static int parse_models(const ctx *c, const json_t *root, es_catalogue *r)
{
    json_t *models;
    if (es_conf_get_object(c, root, "", "models", true, &models) != 0)
        return -1;
    if (json_object_size(models) == 0)
        return es_conf_fail(c, "models", "at least one model is needed");
    r->models = es_calloc(json_object_size(models), sizeof *r->models);
    const char *name;
    json_t *spec;
    json_object_foreach(models, name, spec) {
        if (es_conf_build_model(c, name, spec, &r->models[r->n_models++]) != 0)
            return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- warm */

/* One warm entry {"matrix": "model/matrix", "rows": slice (default "" = all),
 * "center": "none" | "columns" | "rows" (required)}; the rows must select at least
 * one item of that matrix. */
static int parse_warm_entry(const ctx *c, const es_catalogue *r, const json_t *spec, const char *path, es_warm *w)
{
    static const char *const keys[] = {"matrix", "rows", "center", NULL};
    const char *id, *rows, *center;
    char p[KEYPATH_LEN];
    const es_matrix *m;
    es_err inner;
    if (!json_is_object(spec))
        return es_conf_fail(c, path, "expected an object, got %s", es_conf_kind_name(spec));
    if (es_conf_check_keys(c, spec, path, keys) != 0 || es_conf_get_string(c, spec, path, "matrix", NULL, &id) != 0 ||
        es_conf_get_string(c, spec, path, "rows", "", &rows) != 0 ||
        es_conf_get_string(c, spec, path, "center", NULL, &center) != 0)
        return -1;
    es_conf_join_key(p, path, "matrix");
    if (es_catalogue_lookup(r, id, p, &m, &inner) != 0)
        return es_conf_pass_through(c, p, &inner);
    es_conf_join_key(p, path, "rows");
    size_t *idx = NULL, n = 0;
    es_rowsel sel = {0};
    if (es_rowsel_parse(rows, p, &sel, &inner) != 0)
        return es_conf_pass_through(c, p, &inner);
    int rc = es_rowsel_resolve(&sel, es_matrix_items(m), &idx, &n, &inner);
    es_rowsel_free(&sel);
    if (rc != 0)
        return es_conf_pass_through(c, p, &inner);
    free(idx);
    es_conf_join_key(p, path, "center");
    if (es_centering_parse(center, &w->centering) != 0)
        return es_conf_fail(c, p, "expected \"none\", \"columns\" or \"rows\", got \"%s\"", center);
    w->matrix = es_strdup(id);
    w->rows = es_strdup(rows);
    return 0;
}

/* "warm": [ENTRY, ...], default none. */
static int parse_warm(const ctx *c, const json_t *root, es_catalogue *r)
{
    json_t *warm;
    char p[KEYPATH_LEN];
    if (es_conf_member(c, root, "", "warm", false, &warm) != 0)
        return -1;
    if (!warm)
        return 0;
    if (!json_is_array(warm))
        return es_conf_type_fail(c, "", "warm", "an array", warm);
    r->warm = es_calloc(json_array_size(warm), sizeof *r->warm);
    for (size_t i = 0; i < json_array_size(warm); i++) {
        es_conf_join_index(p, "warm", i);
        if (parse_warm_entry(c, r, json_array_get(warm, i), p, &r->warm[i]) != 0)
            return -1;
        r->n_warm++;
    }
    return 0;
}

/* ---------------------------------------------------------------- loading */

/* Parse text and build the catalogue (one reference), keeping the unchanged
 * matrices of `previous` (NULL: none). data_dir_override (if non-NULL) replaces
 * the config's data_dir. */
static int load(const char *text, const char *origin, const char *base_dir, const char *data_dir_override,
                const es_catalogue *previous, es_catalogue **out, es_err *err)
{
    static const char *const keys[] = {"data_dir", "server", "limits", "uploads", "models", "warm", NULL};
    source_cache sources = {0};
    ctx c = {.origin = origin ? origin : "config", .sources = &sources, .previous = previous, .err = err,
             .made = es_conf_made_at()};
    json_error_t jerr;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return es_fail(err, ES_E_CONFIG, "", "%s: line %d column %d: %s", c.origin, jerr.line, jerr.column,
                       jerr.text);
    es_catalogue *r = es_catalogue_new(c.origin);
    c.limits = &r->limits;
    c.base_dir = base_dir;
    c.reg = r;
    c.catalogue = r;
    const char *data_dir;
    int rc = json_is_object(root) ? 0 : es_conf_fail(&c, "", "expected an object, got %s", es_conf_kind_name(root));
    if (rc == 0)
        rc = es_conf_check_keys(&c, root, "", keys);
    if (rc == 0)
        rc = es_conf_get_string(&c, root, "", "data_dir", ".", &data_dir);
    if (rc == 0) {
        c.data_dir = data_dir_override ? resolve_data_dir(".", data_dir_override) : resolve_data_dir(base_dir, data_dir);
        rc = parse_server(&c, root, &r->server) || parse_limits(&c, root, &r->limits) ||
                     parse_uploads(&c, root, &r->uploads) || parse_models(&c, root, r) || parse_warm(&c, root, r)
                 ? -1
                 : 0;
    }
    es_conf_source_cache_clear(&sources);
    free(c.data_dir);
    json_decref(root);
    if (rc != 0) {
        es_catalogue_free(r);
        return -1;
    }
    *out = r;
    return 0;
}

/* See config.h: parse text (origin names it in messages), data_dir relative to base_dir. */
int es_config_load_text(const char *text, const char *origin, const char *base_dir, es_catalogue **out,
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
static int load_path(const char *path, const es_catalogue *previous, es_catalogue **out, es_err *err)
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
static int load_default(const es_catalogue *previous, es_catalogue **out, es_err *err)
{
    const char *env = getenv("EMBEDSCOPE_DATA_DIR");
    return load(es_embedded_config, "embedded default", ES_DEFAULT_CONFIG_DIR, env && *env ? env : NULL, previous,
                out, err);
}

/* Read and load a config file; its data_dir is relative to the file's directory.
 * ES_E_IO (param "config") if it cannot be read, else as es_config_load_text. */
int es_config_load_file(const char *path, es_catalogue **out, es_err *err)
{
    return load_path(path, NULL, out, err);
}

/* The compiled-in config/embedscope.json. Cannot fail. */
const char *es_config_default_text(void) { return es_embedded_config; }

/* Load the embedded default; fails as es_config_load_text. */
int es_config_load_default(es_catalogue **out, es_err *err) { return load_default(NULL, out, err); }

/* See config.h: path (or the embedded default) after previous. */
int es_config_reload(const es_catalogue *previous, const char *path, es_catalogue **out, es_err *err)
{
    return path ? load_path(path, previous, out, err) : load_default(previous, out, err);
}
