/* embedscope configuration: strict JSON (jansson) loaded into a catalogue
 * (catalogue.h) with its settings (settings.h); an upload's matrix entry in the
 * same grammar. Ownership and failure rules: see core.h. Format:
 * docs/configuration.md. */
#ifndef EMBEDSCOPE_CONFIG_H
#define EMBEDSCOPE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include "embedscope/catalogue.h"
#include "embedscope/core.h"
#include "embedscope/settings.h"

/* Default of uploads.max_labels_bytes. */
#define ES_LABELS_DEFAULT_MAX_BYTES ((size_t)64 << 20)

/* The longest "description" an uploaded entry may carry, in bytes: every
 * listing of /v1/models repeats it. */
#define ES_UPLOAD_DESCRIPTION_MAX 4096

/* Parse and load everything (files mapped, converted, views built). Relative
 * paths resolve against the config's "data_dir", itself relative to base_dir.
 * ES_E_CONFIG with err->param set to the JSON key path (e.g.
 * "models.gpt2-small.matrices.wpe.file") for unknown keys, wrong types, missing
 * keys and bad values; loader errors (ES_E_IO / ES_E_FORMAT) pass through with
 * the key path prefixed to the message. `origin` names the config in messages. */
int es_config_load_text(const char *text, const char *origin, const char *base_dir,
                        es_catalogue **out, es_err *err);
/* Read and load a config file; its data_dir is relative to the file's directory.
 * ES_E_IO (param "config") if it cannot be read, else as es_config_load_text. */
int es_config_load_file(const char *path, es_catalogue **out, es_err *err);
/* The embedded default config (config/embedscope.json compiled in); its data_dir
 * is resolved against ES_DEFAULT_CONFIG_DIR (build time) unless the environment
 * variable EMBEDSCOPE_DATA_DIR names the data directory. */
const char *es_config_default_text(void);
/* Load the embedded default; fails as es_config_load_text. */
int es_config_load_default(es_catalogue **out, es_err *err);

/* Load a configuration again after `previous` (the running one): path, or the
 * embedded default when path is NULL. A file entry whose file (path, device,
 * inode, size, modification time) and entry are unchanged, or a generator
 * entry with the same parameters, keeps the previous matrix (renamed if its id
 * changed) instead of reading, converting and hashing again; the result's
 * n_reused counts them. Fails as es_config_load_file. */
int es_config_reload(const es_catalogue *previous, const char *path, es_catalogue **out, es_err *err);

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
int es_config_build_entry(const es_catalogue *cat, const char *model, const char *name, const char *text,
                          size_t len, const size_t *room, es_matrix **out, char **description, es_err *err);
/* The size check an upload's generator entry passes before anything is made
 * (es_config_build_entry runs it): 0 when a rows x cols matrix of GENERATOR
 * ("sinusoidal", "rope", "gaussian") is within limits and *room bytes of
 * doubles (room NULL: no bound), else -1 with ES_E_LIMIT
 * ("max_generated_elements") or ES_E_STORAGE ("uploads.max_total_bytes"). */
int es_config_check_generated(const es_limits *limits, const char *generator, size_t rows, size_t cols,
                              const size_t *room, es_err *err);

#endif
