/* embedscope configuration and model registry (JSON via jansson).
 * Ownership and failure rules: see core.h. Format: docs/configuration.md. */
#ifndef EMBEDSCOPE_CONFIG_H
#define EMBEDSCOPE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include "embedscope/core.h"
#include "embedscope/labels.h"
#include "embedscope/store.h"
#include "embedscope/linalg.h"

/* A member added to es_server_conf or es_limits goes into the settings table of
 * src/http/app.c too: a reload compares and applies them from that one list. */
typedef struct es_server_conf {
    char *host;               /* "127.0.0.1" */
    unsigned port;            /* 8080 */
    unsigned threads;         /* HTTP worker threads (MHD thread pool); 0: not set, the daemon takes
                                 min(2, the cores it may use) */
    unsigned blas_threads;    /* OpenBLAS threads per computation; 0: "auto", the cores
                                 shared among the computations running at once */
    unsigned connection_timeout_s;
    unsigned connection_limit;
    unsigned per_address_limit; /* connections from one client address (trusted proxies exempt) */
    unsigned header_timeout_s;  /* a started request head must be complete within it (0: off) */
    unsigned body_grace_s;      /* a request body may arrive at any rate for this long (0: no floor) */
    unsigned body_min_rate;     /* then it must have averaged at least this many bytes/s */
    unsigned shutdown_grace_s;  /* SIGTERM: time for running requests before they are abandoned */
    size_t cache_bytes;       /* decomposition cache budget */
    char *cache_dir;          /* decompositions kept on disk here (resolved path), NULL: none */
    char **cors_origins;      /* NULL-terminated; "*" allows any origin */
    char **trusted_proxies;   /* NULL-terminated IP addresses whose X-Forwarded-For is believed */
} es_server_conf;

typedef struct es_limits {
    size_t max_k;             /* k of pca / vectors / capture */
    size_t max_bins;          /* bins of binned grids */
    size_t max_cells;         /* cells of an unbinned (bins=0) grid: rows x columns */
    size_t max_rows;          /* selected rows of one request; 0 (default): any number up to the matrix's */
    size_t max_response_bytes;
    size_t max_exclude;       /* entries of an exclude list */
    size_t max_generated_elements; /* rows x cols of one generated matrix (config
                                      load time; also bounds the Gaussian's cost) */
    size_t max_request_memory; /* predicted peak bytes of one computing request; 0 (default): half of
                                  the physical memory (set by the daemon at start) */
    double sync_seconds;      /* a request predicted (or running) longer than this becomes a job */
    unsigned request_timeout_s; /* a synchronous computing request is answered 504 after it (0: none) */
    unsigned job_ttl_s;       /* a finished job (and its reply) is kept this long */
    unsigned max_jobs_per_client; /* jobs one client may hold (queued, running or finished) */
} es_limits;

/* Matrices uploaded at run time (PUT /v1/models/{model}/matrices/{matrix}). */
typedef struct es_uploads_conf {
    int enabled;              /* 1 or 0 as configured; -1 when absent: on exactly when
                                 the daemon listens on a loopback address */
    char *token;              /* bearer token writes need; "" = none configured (the
                                 daemon then takes $EMBEDSCOPE_UPLOAD_TOKEN) */
    char *tmp_dir;            /* where bodies are streamed; "" = $TMPDIR, else /tmp */
    char *dir;                /* persistence: records and content-addressed files; "" = none */
    size_t max_body_bytes;    /* one request body (default 4 GiB) */
    size_t max_total_bytes;   /* storage held by all user matrices (default 4 GiB) */
    size_t max_matrices;      /* number of user matrices (default 1024) */
    size_t max_pending_bytes; /* upload bodies being received, all together, in tmp_dir (default 4 GiB) */
    size_t max_labels_bytes;  /* the labels of one matrix, as sent or as a configured file (default 64 MiB) */
} es_uploads_conf;

#define ES_LABELS_DEFAULT_MAX_BYTES ((size_t)64 << 20)

/* The longest "description" an uploaded entry may carry, in bytes: every
 * listing of /v1/models repeats it. */
#define ES_UPLOAD_DESCRIPTION_MAX 4096

typedef struct es_warm {
    char *matrix;             /* "model/matrix" */
    char *rows;               /* slice text */
    es_centering centering;
} es_warm;

typedef struct es_model {
    char *name;
    char *description;
    es_matrix **matrices;     /* in config order; ids are "model/matrix" */
    char **matrix_names;      /* short names, parallel to matrices */
    char **matrix_descriptions; /* parallel to matrices; "" when the config gives none */
    double *matrix_created;   /* parallel to matrices: Unix time its data was made: a configured file's
                                 modification time, the binary's for configured generated matrices and
                                 views, the upload's time for user matrices */
    es_labels **matrix_labels; /* parallel to matrices: labels and metadata of the items, NULL: none */
    size_t n_matrices;
    bool user;                /* created by uploads, not by the configuration */
    size_t n_heads;           /* attention heads ("n_heads"), 0 when not configured */
} es_model;

struct es_recipe;

typedef struct es_registry {
    char *origin;             /* config path, or "embedded default" */
    es_model *models;
    size_t n_models;
    es_server_conf server;
    es_limits limits;
    es_warm *warm;
    size_t n_warm;
    es_uploads_conf uploads;
    unsigned long generation; /* grows with every change of the catalogue */
    size_t n_reused;          /* matrices a reload kept from the previous registry */
    /* private: how each file or generated matrix was made, so that a reload
     * keeps those whose recipe (file identity and entry) did not change */
    struct es_recipe *recipes;
    size_t n_recipes;
    int refs;
} es_registry;

/* Parse and load everything (files mapped, converted, views built). Relative
 * paths resolve against the config's "data_dir", itself relative to base_dir.
 * ES_E_CONFIG with err->param set to the JSON key path (e.g.
 * "models.gpt2-small.matrices.wpe.file") for unknown keys, wrong types, missing
 * keys and bad values; loader errors (ES_E_IO / ES_E_FORMAT) pass through with
 * the key path prefixed to the message. `origin` names the config in messages. */
int es_config_load_text(const char *text, const char *origin, const char *base_dir,
                        es_registry **out, es_err *err);
/* Read and load a config file; its data_dir is relative to the file's directory.
 * ES_E_IO (param "config") if it cannot be read, else as es_config_load_text. */
int es_config_load_file(const char *path, es_registry **out, es_err *err);
/* The embedded default config (config/embedscope.json compiled in); its data_dir
 * is resolved against ES_DEFAULT_CONFIG_DIR (build time) unless the environment
 * variable EMBEDSCOPE_DATA_DIR names the data directory. */
const char *es_config_default_text(void);
/* Load the embedded default; fails as es_config_load_text. */
int es_config_load_default(es_registry **out, es_err *err);
/* A deep copy of src into dst (its own host and origin strings); release it
 * with es_server_conf_free (which leaves dst zeroed). Neither fails. */
void es_server_conf_copy(es_server_conf *dst, const es_server_conf *src);
void es_server_conf_free(es_server_conf *s);

/* Registries are immutable once loaded and reference counted: the daemon's
 * catalogue is a registry that requests hold for their duration while writers
 * publish changed copies. es_registry_retain adds a reference (NULL passes);
 * es_registry_free drops one and frees the registry, releasing its matrices,
 * with the last (NULL is a no-op). Neither fails. */
es_registry *es_registry_retain(es_registry *r);
void es_registry_free(es_registry *r);

/* Load a configuration again after `previous` (the running one): path, or the
 * embedded default when path is NULL. A file entry whose file (path, device,
 * inode, size, modification time) and entry are unchanged, or a generator
 * entry with the same parameters, keeps the previous matrix (renamed if its id
 * changed) instead of reading, converting and hashing again; the result's
 * n_reused counts them. Fails as es_config_load_file. */
int es_config_reload(const es_registry *previous, const char *path, es_registry **out, es_err *err);
/* Add to `fresh` (just loaded, not yet shared) the user models of `old` whose
 * names the new configuration does not use; a user model whose name it took is
 * dropped with a warning in the log. Returns the number dropped; never fails. */
size_t es_registry_adopt_user(es_registry *fresh, const es_registry *old);

/* ES_E_PARAM naming `param` unless name is a valid model or matrix name (1 to
 * 64 characters of [A-Za-z0-9._-], not "." or ".."): names appear in URLs. */
int es_config_check_name(const char *name, const char *param, es_err *err);
/* Build the matrix MODEL/NAME from one matrix entry in the configuration's
 * grammar (JSON text, len bytes): a generator, or a view of a matrix of the
 * catalogue `cat` ("MATRIX" of the same model or "MODEL/MATRIX"). "file" entries
 * are refused: an upload sends the file itself. Limits are cat's. *description
 * is the entry's "description" (newly allocated). Failures: ES_E_PARAM with the
 * key path in param ("d_model", "view", "" for the whole body) for everything
 * the configuration would refuse, for a view of MODEL/NAME itself and for a
 * description above ES_UPLOAD_DESCRIPTION_MAX bytes; ES_E_LIMIT
 * ("max_generated_elements") for a generated matrix above the limit;
 * ES_E_STORAGE ("uploads.max_total_bytes") for one of more than *room bytes
 * (room NULL: no bound), refused before it is made; ES_E_NOMEM. */
int es_config_build_entry(const es_registry *cat, const char *model, const char *name, const char *text,
                          size_t len, const size_t *room, es_matrix **out, char **description, es_err *err);
/* The size check an upload's generator entry passes before anything is made
 * (es_config_build_entry runs it): 0 when a rows x cols matrix of GENERATOR
 * ("sinusoidal", "rope", "gaussian") is within limits and *room bytes of
 * doubles (room NULL: no bound), else -1 with ES_E_LIMIT
 * ("max_generated_elements") or ES_E_STORAGE ("uploads.max_total_bytes"). */
int es_config_check_generated(const es_limits *limits, const char *generator, size_t rows, size_t cols,
                              const size_t *room, es_err *err);

/* A new registry (one reference) equal to r but with MODEL/NAME set to m
 * (retained), created at `created` (Unix time), replacing a matrix of that name;
 * MODEL is created as a user model if absent. User models follow the
 * configured ones sorted by name, their matrices too (one listing whatever the
 * order of uploads). The caller checks that MODEL is not configured. Never
 * fails. */
es_registry *es_registry_with(const es_registry *r, const char *model, const char *name, es_matrix *m,
                              const char *description, double created);
/* A new registry (one reference) equal to r without MODEL/NAME (which must
 * exist); the model goes with its last matrix. Never fails. */
es_registry *es_registry_without(const es_registry *r, const char *model, const char *name);
/* A new registry (one reference) equal to r with the labels of MODEL/NAME set
 * to labels (retained; NULL drops them). The caller checks that they fit the
 * matrix's items. r unchanged but copied when MODEL/NAME is absent. Never fails. */
es_registry *es_registry_with_labels(const es_registry *r, const char *model, const char *name, es_labels *labels);
/* The labels of MODEL/MATRIX (borrowed), or NULL when it has none or is absent. */
es_labels *es_registry_labels(const es_registry *r, const char *model, const char *matrix);
/* Number of matrices in user models and the bytes of storage they hold. */
void es_registry_user_totals(const es_registry *r, size_t *count, size_t *bytes);

/* Lookups return borrowed pointers or NULL. */
const es_model *es_registry_model(const es_registry *r, const char *model);
const es_matrix *es_registry_matrix(const es_registry *r, const char *model, const char *matrix);
/* "model/matrix" form. ES_E_NOTFOUND naming param if unknown, ES_E_PARAM if not of that form. */
int es_registry_lookup(const es_registry *r, const char *id, const char *param,
                       const es_matrix **out, es_err *err);

#endif
