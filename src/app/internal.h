/* Pieces the configuration's files share (config.c: the sections and loading;
 * reader.c: typed JSON members reported by key path; entries.c: matrix
 * entries, for a configuration and for an upload); not part of the public API.
 * Failure rules as in core.h: every int-returning function fails through
 * es_conf_fail or es_conf_pass_through, naming the key path. */
#ifndef EMBEDSCOPE_APP_INTERNAL_H
#define EMBEDSCOPE_APP_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "embedscope/config.h"

enum {
    KEYPATH_LEN = 256, /* longest key path kept in messages */
};

/* The files opened while loading one config, each once (es_source), by path. */
typedef struct source_cache {
    char **paths;
    es_source **sources;
    size_t n;
} source_cache;

/* What every parsing step needs: where the config came from, the resolved data
 * directory, the limits (parsed before the models), the files opened so far,
 * the catalogue being built (its recipes) and the catalogue cross-model views
 * read (the models built so far; for an upload the running catalogue), the
 * previous catalogue whose unchanged matrices a reload keeps (or NULL), whether
 * this is an upload's entry rather than a configuration, and where to report
 * errors. */
typedef struct ctx {
    const char *origin;
    const char *base_dir;      /* the configuration's directory ("" or NULL: the current one) */
    char *data_dir;
    const es_limits *limits;
    source_cache *sources;
    es_catalogue *reg;
    const es_catalogue *catalogue;
    const es_catalogue *previous;
    bool upload;
    const size_t *room;        /* an upload's: the bytes its matrix may hold (NULL: no bound) */
    double made;               /* "created" of generated matrices and views (es_conf_made_at) */
    es_err *err;
} ctx;

/* ---------------------------------------------------------------- reader.c */

/* ES_E_CONFIG (ES_E_PARAM for an upload's entry: a request error) with param =
 * key path and message "ORIGIN: PATH: TEXT". Returns -1. Every int-returning
 * parser fails through this or es_conf_pass_through. */
int es_conf_fail(const ctx *c, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Re-report an error of the store or linalg at key path `path`: I/O, format and
 * memory errors keep their code (for an upload only memory errors do), everything
 * else becomes ES_E_CONFIG (ES_E_PARAM for an upload). Returns -1. */
int es_conf_pass_through(const ctx *c, const char *path, const es_err *inner);
/* "PARENT.KEY" (or "KEY" at the top level) into out. */
void es_conf_join_key(char out[KEYPATH_LEN], const char *parent, const char *key);
/* "PARENT[INDEX]" into out. */
void es_conf_join_index(char out[KEYPATH_LEN], const char *parent, size_t index);
/* The JSON type of v as used in "expected X, got Y" messages. */
const char *es_conf_kind_name(const json_t *v);
/* Reject any key of obj that is not in `allowed`; the error names the key's path
 * and lists the allowed keys. */
int es_conf_check_keys(const ctx *c, const json_t *obj, const char *path, const char *const *allowed);
/* obj[key] in *out (NULL if obj is NULL or the key is absent). Fails if absent
 * and required. */
int es_conf_member(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                   json_t **out);
/* Fail with "expected WHAT, got KIND" at PATH.KEY. Returns -1. */
int es_conf_type_fail(const ctx *c, const char *path, const char *key, const char *what, const json_t *v);
/* Optional object member: *out is NULL if absent; fails if present and not an object. */
int es_conf_get_object(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                       json_t **out);
/* String member; dflt is used when absent (dflt NULL: required). Borrowed result. */
int es_conf_get_string(const ctx *c, const json_t *obj, const char *path, const char *key, const char *dflt,
                       const char **out);
/* Integer member in [min, max]; dflt when absent unless required. Reals such as
 * 768.0 are rejected: counts are integers. */
int es_conf_get_int(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                    long long dflt, long long min, long long max, long long *out);
/* es_conf_get_int into a size_t (min >= 0). */
int es_conf_get_size(const ctx *c, const json_t *obj, const char *path, const char *key, bool required,
                     long long dflt, long long min, size_t *out);
/* es_conf_get_int into an unsigned (min >= 0). */
int es_conf_get_unsigned(const ctx *c, const json_t *obj, const char *path, const char *key, long long dflt,
                         long long min, long long max, unsigned *out);
/* Optional number member (integer or real) with dflt, checked by
 * `ok` (a description of the allowed range is `what`). */
int es_conf_get_number(const ctx *c, const json_t *obj, const char *path, const char *key, double dflt,
                       bool (*ok)(double), const char *what, double *out);
/* Optional boolean member, false when absent. */
int es_conf_get_bool(const ctx *c, const json_t *obj, const char *path, const char *key, bool *out);
/* Optional half-open range [lo, hi] of non-negative integers with lo < hi <= limit.
 * *present tells whether the key was given. */
int es_conf_get_range(const ctx *c, const json_t *obj, const char *path, const char *key, size_t limit,
                      size_t range[2], bool *present);
/* Fail unless `name` (a key at PATH.NAME) is a valid model or matrix name. */
int es_conf_check_name(const ctx *c, const char *path, const char *name, const char *what);
/* `rel` if absolute, else "DIR/rel". Newly allocated. */
char *es_conf_path_under(const char *dir, const char *rel);

/* ---------------------------------------------------------------- entries.c */

/* The "created" of configured generated matrices and views: the binary's
 * modification time (the code that makes them), a data file's own time that
 * of file entries. Both are the same on every replica of one image and
 * volume, unlike a load time or the configuration file's time (each pod's
 * kubelet writes its own copy of a ConfigMap), so replicas list the same
 * catalogue (and ETag). 0 if the binary cannot be stat'ed. */
double es_conf_made_at(void);
/* Close every cached source. */
void es_conf_source_cache_clear(source_cache *sc);
/* One model: {"description", "n_heads" (attention heads of its multi-head weights,
 * optional: the "head" request parameter and the attention endpoints' default need
 * it), "matrices": {NAME: ENTRY, ...}} (at least one matrix). */
int es_conf_build_model(const ctx *c, const char *name, const json_t *spec, es_model *model);

#endif
