/* The user data of the service (src/api): writes of user matrices (uploads),
 * their labels, and their persistence in uploads.dir.
 * Owners: src/api/uploads.c, src/api/labels.c, src/api/persist.c.
 * Ownership and failure rules: see core.h. */
#ifndef ES_UPLOADS_H
#define ES_UPLOADS_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "embedscope/app.h"
#include "embedscope/catalogue.h"
#include "embedscope/core.h"
#include "embedscope/labels.h"
#include "embedscope/params.h"
#include "embedscope/results.h"
#include "embedscope/route.h"
#include "embedscope/settings.h"
#include "embedscope/store.h"

/* ================================================================ uploads.c */

/* A write in progress: PUT or DELETE /v1/models/{model}/matrices/{matrix}. A
 * PUT's body is streamed into an unnamed temporary file in uploads.tmp_dir (it
 * vanishes when closed, whatever happens to the request or the process), then
 * mapped and read by the same strict loaders as a configuration's files. */
typedef struct es_upload es_upload;

/* The pre-body checks of a write, in this order, each a problem: the path (404
 * unless /v1/models/{model}/matrices/{matrix}), uploads enabled (ES_E_FORBIDDEN),
 * a token for a proxied request (one carrying X-Forwarded-For, Forwarded or
 * X-Real-IP) when writes are anonymous by default (ES_E_FORBIDDEN naming
 * "uploads.token"), the bearer token (ES_E_UNAUTHORIZED), valid names (ES_E_PARAM "model" /
 * "matrix"), a user model (ES_E_CONFLICT for a configured one), the query
 * parameters (PUT: model_axis and tensor for files; ES_E_PARAM), the content
 * type (ES_E_MEDIA_TYPE; none means a file) and the announced length
 * (ES_E_TOO_LARGE naming "uploads.max_body_bytes"; ES_E_STORAGE naming
 * "uploads.max_pending_bytes" above what bodies being received leave of it).
 * Headers may be NULL when
 * absent. On success *out is the write, for a PUT with its temporary file open
 * (ES_E_IO if it cannot be created). reg is the catalogue the request holds. */
/* A write (any method but GET, HEAD, OPTIONS) from a web page: allowed when
 * es_cors_may_write says so under reg's server.cors_origins, or with the
 * configured bearer token; ES_E_CROSS_ORIGIN naming "Origin" otherwise.
 * Headers may be NULL when absent. */
int es_check_write_origin(const es_app *app, const es_catalogue *reg, const char *origin, const char *host,
                          const char *authorization, es_err *err);
int es_upload_begin(es_app *app, const es_catalogue *reg, const char *method, const char *path,
                    const es_query *q, const char *authorization, bool proxied, const char *content_type,
                    const char *content_length, es_upload **out, es_err *err);
/* Append a chunk of the body; ES_E_TOO_LARGE once the body exceeds
 * uploads.max_body_bytes, ES_E_STORAGE once all bodies being received would
 * exceed uploads.max_pending_bytes or the disk is full, ES_E_IO if the file
 * cannot be written otherwise. */
int es_upload_write(es_upload *u, const char *data, size_t len, es_err *err);
/* At start: remove the temporary files of bodies a killed daemon left in
 * uploads.tmp_dir (named ones, where O_TMPFILE is missing). Never fails. */
void es_upload_sweep_tmp(const es_uploads_conf *uc);
/* Does finishing it belong on the compute pool: a PUT, or a DELETE that
 * locks and reads uploads.dir? */
bool es_upload_on_pool(const es_upload *u);
/* Carry the write out and fill rep: a PUT builds the matrix (file or JSON
 * entry; ES_E_PARAM naming the rule and byte offset for a malformed body),
 * checks uploads.max_matrices (ES_E_LIMIT) and max_total_bytes (ES_E_STORAGE),
 * publishes a new catalogue and answers 201 (200 on replace) with the matrix's
 * description and Location; a DELETE answers 204 (ES_E_NOTFOUND if absent).
 * Both fail with ES_E_CONFLICT if the model became a configured one meanwhile. */
int es_upload_finish(es_app *app, es_upload *u, es_reply *rep, es_err *err);
/* Close the temporary file (nothing remains on disk) and free; NULL is ignored. */
void es_upload_free(es_upload *u);
/* Is host (numeric, or "localhost") a loopback address? Decides uploads.enabled
 * when the configuration leaves it out. Never fails. */
bool es_host_is_loopback(const char *host);
/* ================================================================ labels.c */

/* {NAME: [the cells of items idx[0..n)]} for /rows. Never fails. */
json_t *es_labels_rows_json(const es_labels *l, const size_t *idx, size_t n);
/* rep = 200 with es_render_labels_info(l) (the answer of a PUT). Fails like es_json_body. */
int es_labels_reply(const es_app *app, const es_labels *l, es_reply *rep, es_err *err);
/* GET .../labels and GET .../labels/search (see labels.c). */
int es_api_labels(es_ctx *cx, es_err *err);
int es_api_labels_search(es_ctx *cx, es_err *err);

/* ================================================================ persist.c */

/* Persistence (uploads.dir), shared by any number of daemons on the
 * directory: one record per user matrix, content-addressed copies of uploaded
 * files, a lock file and a generation counter (docs/operations.md). A write
 * runs es_persist_begin, its checks, es_persist_put or es_persist_delete, then
 * publishes and calls es_persist_end, all under the app's write lock. Without
 * uploads.dir every call succeeds doing nothing. */
typedef struct es_persist_item {
    const char *model, *matrix, *description;
    double created;
    const json_t *entry;        /* the JSON entry of the body, or NULL for a file */
    const json_t *base;         /* for a view of a user matrix, that matrix's record (es_persist_record) */
    int fd;                     /* a file body (read with pread), or -1 */
    const char *file_sha256;    /* the file's sha256: its name in DIR */
    const char *tensor;
    es_axis axis;
    bool axis_stated;           /* ?model_axis given (else restored by the same default) */
} es_persist_item;

/* Take the directory's exclusive lock and bring the catalogue in line with
 * the records other daemons wrote (publishing it). ES_E_IO naming
 * "uploads.dir" if the lock cannot be taken. */
int es_persist_begin(es_app *app, es_err *err);
/* Release the lock es_persist_begin took. Never fails. */
void es_persist_end(es_app *app);
/* The record of user matrix ID ("model/matrix") as kept on disk, or NULL
 * (none, or no uploads.dir). Borrowed; valid until the next write or poll. */
const json_t *es_persist_record(const es_app *app, const char *id);
/* Keep it durably: copy a file body to DIR/<sha256> unless present, then
 * write MODEL/MATRIX's record; files no record names any more are removed
 * afterwards. On failure nothing on disk changed: ES_E_STORAGE naming
 * "uploads.dir" when the disk or quota is full, else ES_E_IO (messages
 * without paths; those go to the log). */
int es_persist_put(es_app *app, const es_persist_item *it, es_err *err);
/* Remove MODEL/MATRIX's record durably (then unused files); fails like
 * es_persist_put. */
int es_persist_delete(es_app *app, const char *model, const char *matrix, es_err *err);
/* Keep the labels of user matrix MODEL/MATRIX durably (NULL: remove them):
 * DIR/<sha256> holds them as JSON (es_labels_text, untyped), the matrix's
 * record names it as "labels"; unused files are removed afterwards. Fails
 * like es_persist_put; ES_E_IO when the matrix has no record. */
int es_persist_labels(es_app *app, const char *model, const char *matrix, const es_labels *labels, es_err *err);
/* At start, with uploads.dir set: create the directory if needed, turn a
 * legacy manifest.json into records, remove stale temporary and unused files
 * and rebuild every user matrix of the records (files by the loaders, entries
 * by the configuration's parser), publishing them. A record that cannot be
 * rebuilt, or whose model the configuration now defines, is skipped with a
 * warning. ES_E_IO naming "uploads.dir" if the directory cannot be created or
 * locked or a legacy manifest is not JSON. */
int es_persist_restore(es_app *app, es_err *err);
/* Rebuild the matrix of one record's text (len bytes) against cat, its files
 * in dir: what a restart does with each record. ES_E_FORMAT naming
 * "uploads.dir" for text that is not a well-formed record (a "file" must be a
 * content-addressed name), else the loaders' and parser's errors. */
int es_persist_rebuild_text(const es_catalogue *cat, const char *dir, const char *text, size_t len, es_matrix **m,
                            es_err *err);
/* If another daemon changed the directory (its generation differs from the
 * one last seen), rebuild what changed and publish. Called from the main
 * loop; takes the write lock and a shared flock. Never fails (logs). */
void es_persist_poll(es_app *app);

#endif
