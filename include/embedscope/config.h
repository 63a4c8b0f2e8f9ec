/* embedscope configuration and model registry (JSON via jansson).
 * Ownership and failure rules: see core.h. Format: README.md, "Configuration". */
#ifndef EMBEDSCOPE_CONFIG_H
#define EMBEDSCOPE_CONFIG_H

#include <stddef.h>
#include "embedscope/core.h"
#include "embedscope/store.h"
#include "embedscope/linalg.h"

typedef struct es_server_conf {
    char *host;               /* "127.0.0.1" */
    unsigned port;            /* 8080 */
    unsigned threads;         /* HTTP worker threads (MHD thread pool) */
    unsigned blas_threads;    /* OpenBLAS threads per computation */
    unsigned connection_timeout_s;
    unsigned connection_limit;
    unsigned per_address_limit; /* connections from one client address (trusted proxies exempt) */
    unsigned header_timeout_s;  /* a started request head must be complete within it (0: off) */
    unsigned shutdown_grace_s;  /* SIGTERM: time for running requests before they are abandoned */
    size_t cache_bytes;       /* decomposition cache budget */
    char **cors_origins;      /* NULL-terminated; "*" allows any origin */
    char **trusted_proxies;   /* NULL-terminated IP addresses whose X-Forwarded-For is believed */
} es_server_conf;

typedef struct es_limits {
    size_t max_k;             /* k of pca / vectors / capture */
    size_t max_bins;          /* bins of binned grids */
    size_t max_rows;          /* selected rows of one request */
    size_t max_response_bytes;
    size_t max_exclude;       /* entries of an exclude list */
    size_t max_generated_elements; /* rows x cols of one generated matrix (config
                                      load time; also bounds the Gaussian's cost) */
    double max_request_cost;  /* estimated flops + bytes of one computing request */
    unsigned request_timeout_s; /* a computing request is answered 504 after it (0: none) */
} es_limits;

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
    size_t n_matrices;
    size_t n_heads;           /* attention heads ("n_heads"), 0 when not configured */
} es_model;

typedef struct es_registry {
    char *origin;             /* config path, or "embedded default" */
    es_model *models;
    size_t n_models;
    es_server_conf server;
    es_limits limits;
    es_warm *warm;
    size_t n_warm;
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
/* Free a registry and release its matrices; NULL is a no-op. */
void es_registry_free(es_registry *r);

/* Lookups return borrowed pointers or NULL. */
const es_model *es_registry_model(const es_registry *r, const char *model);
const es_matrix *es_registry_matrix(const es_registry *r, const char *model, const char *matrix);
/* "model/matrix" form. ES_E_NOTFOUND naming param if unknown, ES_E_PARAM if not of that form. */
int es_registry_lookup(const es_registry *r, const char *id, const char *param,
                       const es_matrix **out, es_err *err);

#endif
