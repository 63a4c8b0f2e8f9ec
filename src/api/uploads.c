/* Writes at run time: PUT and DELETE /v1/models/{model}/matrices/{matrix} on
 * user models (models the configuration does not define).
 *
 * A PUT's body is streamed by the HTTP thread into an unnamed temporary file
 * (O_TMPFILE: it has no name, so nothing is left behind whatever happens; an
 * unlinked mkstemp file where the file system lacks O_TMPFILE) and is never
 * held in memory as such. The compute pool then maps it and builds the matrix
 * with the code that loads a configuration: the strict .npy / safetensors
 * loaders for a file, the configuration's own entry parser for JSON. The
 * result is published as a new catalogue (es_catalogue_with) under the app's
 * write lock; requests holding the previous catalogue finish on it, and the
 * caches, keyed by es_matrix_identity, never mix old and new data. */
#include "embedscope/config.h"
#include "embedscope/app.h"
#include "embedscope/negotiate.h"
#include "embedscope/params.h"
#include "embedscope/render.h"
#include "embedscope/results.h"
#include "embedscope/route.h"
#include "embedscope/uploads.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <stdatomic.h>
#include <pthread.h>

/* What messages about the body call it. */
#define BODY_NAME "request body"
/* The name of a body's temporary file where O_TMPFILE is missing (unlinked at once). */
#define TEMP_PREFIX "embedscope-upload-"

typedef enum body_kind { BODY_FILE, BODY_ENTRY } body_kind;

struct es_upload {
    es_app *app;
    bool put, persistent; /* persistent: uploads.dir is set (the write takes its lock) */
    char model[128], matrix[128];
    char location[192];  /* the matrix's path */
    body_kind kind;
    es_axis axis;
    es_axis_origin axis_origin; /* stated by ?model_axis, or known from the tensor name, or defaulted */
    char *tensor;        /* safetensors tensor name, "" for .npy */
    int fd;              /* the body (PUT), -1 otherwise */
    size_t bytes, max_bytes, max_pending; /* bytes held in fd (counted in app->metrics.upload_pending_bytes) */
    json_t *entry;       /* a JSON body, parsed, once the matrix is built */
    bool labels;         /* a write of the matrix's labels (.../labels), not of the matrix */
    es_labels_format labels_format;
};

static const char *const file_params[] = {"model_axis", "tensor", NULL};
static const char *const no_params[] = {NULL};

/* "Bearer TOKEN" with exactly this token, compared in constant time. */
static bool bearer_matches(const char *authorization, const char *token)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return false;
    const char *given = authorization + 7;
    while (*given == ' ')
        given++;
    size_t n = strlen(token);
    return strlen(given) == n && CRYPTO_memcmp(given, token, n) == 0;
}

/* Writes allowed, with the token if one is configured: ES_E_FORBIDDEN or
 * ES_E_UNAUTHORIZED otherwise. Writes are anonymous by default only on a
 * loopback address with no proxy in front: a request that came through one
 * (proxied: it carries X-Forwarded-For, Forwarded or X-Real-IP) needs a token
 * unless uploads.enabled says true. */
static int check_access(const es_app *app, const es_uploads_conf *uc, const char *authorization, bool proxied,
                        es_err *err)
{
    bool enabled = uc->enabled < 0 ? app->loopback : uc->enabled == 1;
    if (!enabled)
        return es_fail(err, ES_E_FORBIDDEN, "uploads.enabled",
                       "uploads are disabled: uploads.enabled is %s", uc->enabled < 0
                           ? "not set and the daemon does not listen on a loopback address"
                           : "false");
    const char *token = uc->token && *uc->token ? uc->token : app->env_token;
    if (uc->enabled < 0 && proxied && !(token && *token))
        return es_fail(err, ES_E_FORBIDDEN, "uploads.token",
                       "anonymous writes are refused through a proxy (the request carries X-Forwarded-For, "
                       "Forwarded or X-Real-IP): set uploads.token or $EMBEDSCOPE_UPLOAD_TOKEN and send "
                       "\"Authorization: Bearer TOKEN\" (or set uploads.enabled to true to allow anonymous writes "
                       "from anyone who reaches the proxy)");
    if (token && *token && !bearer_matches(authorization, token))
        return es_fail(err, ES_E_UNAUTHORIZED, "Authorization",
                       "%s bearer token: writes need \"Authorization: Bearer TOKEN\" with the token of "
                       "uploads.token or $EMBEDSCOPE_UPLOAD_TOKEN",
                       authorization ? "wrong" : "missing");
    return 0;
}

/* See uploads.h. */
int es_check_write_origin(const es_app *app, const es_catalogue *reg, const char *origin, const char *host,
                          const char *authorization, es_err *err)
{
    if (es_cors_may_write(reg->server.cors_origins, origin, host))
        return 0;
    const char *token = reg->uploads.token && *reg->uploads.token ? reg->uploads.token : app->env_token;
    if (token && *token && bearer_matches(authorization, token))
        return 0;
    return es_fail(err, ES_E_CROSS_ORIGIN, "Origin",
                   "a write from a web page of origin '%.100s' is refused: it is not this daemon's own origin "
                   "nor listed in server.cors_origins (\"*\" allows reads only), and the request has no valid "
                   "bearer token", origin);
}

/* The model must not be a configured one: ES_E_CONFLICT naming "model". */
static int check_user_model(const es_catalogue *reg, const char *model, es_err *err)
{
    const es_model *m = es_catalogue_model(reg, model);
    if (m && !m->user)
        return es_fail(err, ES_E_CONFLICT, "model",
                       "model '%s' is defined by the configuration and is read-only: upload into a model of another "
                       "name",
                       model);
    return 0;
}

/* The position of content_type's media type (parameters ignored, any case)
 * among the NULL-terminated types; 0 when absent (the first is the default);
 * -1 when not listed. *len is the media type's length, for messages. */
static int media_type_at(const char *content_type, const char *const *types, size_t *len)
{
    *len = content_type ? strcspn(content_type, "; \t") : 0;
    if (!content_type)
        return 0;
    for (int i = 0; types[i]; i++)
        if (*len == strlen(types[i]) && strncasecmp(content_type, types[i], *len) == 0)
            return i;
    return -1;
}

/* The body kind from Content-Type (absent means a file): ES_E_MEDIA_TYPE for
 * anything else. */
static int body_kind_of(const char *content_type, body_kind *out, es_err *err)
{
    static const char *const types[] = {"application/x-npy", "application/octet-stream", "application/json", NULL};
    size_t len;
    int at = media_type_at(content_type, types, &len);
    *out = at == 2 ? BODY_ENTRY : BODY_FILE;
    if (at >= 0)
        return 0;
    return es_fail(err, ES_E_MEDIA_TYPE, "Content-Type",
                   "Content-Type %.*s is not accepted: send a .npy or .safetensors file as application/x-npy or "
                   "application/octet-stream, or a matrix entry as application/json",
                   (int)(len < 100 ? len : 100), content_type);
}

/* ES_E_STORAGE naming uploads.max_pending_bytes: bodies being received would
 * hold more than it in uploads.tmp_dir. */
static int pending_fail(size_t max, es_err *err)
{
    return es_fail(err, ES_E_STORAGE, "uploads.max_pending_bytes",
                   "upload bodies being received would hold more than uploads.max_pending_bytes = %zu bytes: "
                   "retry when other uploads have finished",
                   max);
}

/* An announced Content-Length above the limit: ES_E_TOO_LARGE before any byte
 * is read; above what the bodies being received leave of
 * uploads.max_pending_bytes: ES_E_STORAGE. A malformed length is MHD's
 * business (it refuses the request). */
static int check_length(const es_app *app, const char *content_length, const es_uploads_conf *uc, es_err *err)
{
    if (!content_length || strspn(content_length, "0123456789") != strlen(content_length))
        return 0;
    errno = 0;
    unsigned long long n = strtoull(content_length, NULL, 10);
    if (n > uc->max_body_bytes || errno == ERANGE)
        return es_fail(err, ES_E_TOO_LARGE, "uploads.max_body_bytes",
                       "the body (%s bytes) is larger than uploads.max_body_bytes = %zu", content_length,
                       uc->max_body_bytes);
    size_t pending = atomic_load(&app->metrics.upload_pending_bytes);
    if (n > uc->max_pending_bytes || pending > uc->max_pending_bytes - n)
        return pending_fail(uc->max_pending_bytes, err);
    return 0;
}

/* An unnamed temporary file in dir (uploads.tmp_dir, $TMPDIR or /tmp):
 * O_TMPFILE, or mkstemp + unlink where the file system lacks it. ES_E_IO
 * naming "uploads.tmp_dir". */
static int open_temp(const char *dir, int *fd, es_err *err)
{
    *fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (*fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        char *name = es_asprintf("%s/" TEMP_PREFIX "XXXXXX", dir);
        *fd = mkostemp(name, O_CLOEXEC);
        if (*fd >= 0)
            unlink(name);
        free(name);
    }
    if (*fd < 0)
        return es_fail(err, ES_E_IO, "uploads.tmp_dir", "cannot create a temporary file in %s: %s", dir,
                       strerror(errno));
    return 0;
}

/* The directory bodies are streamed to. */
static const char *temp_dir(const es_uploads_conf *uc)
{
    const char *env = getenv("TMPDIR");
    return uc->tmp_dir && *uc->tmp_dir ? uc->tmp_dir : env && *env ? env : "/tmp";
}

/* See uploads.h. A body's named temporary file lives only between mkostemp and
 * unlink, so one found is stale (its writer was killed in between), or about
 * to be unlinked by its writer, which holds it open: removing it is safe. */
void es_upload_sweep_tmp(const es_uploads_conf *uc)
{
    const char *dir = temp_dir(uc);
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, TEMP_PREFIX, strlen(TEMP_PREFIX)) != 0)
            continue;
        char *path = es_asprintf("%s/%s", dir, de->d_name);
        if (unlink(path) == 0)
            es_info("uploads.tmp_dir: removed the stale temporary file %s", path);
        free(path);
    }
    if (d)
        closedir(d);
}

/* The PUT-only checks and set-up: parameters, content type, length, file. */
static int begin_put(const es_uploads_conf *uc, const es_query *q, const char *content_type,
                     const char *content_length, es_upload *u, es_err *err)
{
    static const char *const axes[] = {"columns", "rows", NULL};
    size_t axis = 0;
    if (body_kind_of(content_type, &u->kind, err) < 0 ||
        es_query_check(q, u->kind == BODY_FILE ? file_params : no_params, err) < 0 ||
        es_param_choice(q, "model_axis", axes, 0, &axis, err) < 0 ||
        check_length(u->app, content_length, uc, err) < 0)
        return -1;
    const char *tensor = es_query_get(q, "tensor");
    u->axis = axis == 0 ? ES_AXIS_COLUMNS : ES_AXIS_ROWS;
    u->tensor = es_strdup(tensor ? tensor : "");
    u->axis_origin = ES_AXIS_STATED;
    if (!es_query_get(q, "model_axis")) /* as a configuration's file entry without "model_axis" */
        u->axis_origin = es_conv1d_axis(u->tensor, &u->axis) == 0 ? ES_AXIS_BY_NAME : ES_AXIS_DEFAULTED;
    u->max_bytes = uc->max_body_bytes;
    u->max_pending = uc->max_pending_bytes;
    return open_temp(temp_dir(uc), &u->fd, err);
}

/* A labels body's format from Content-Type (absent means TSV):
 * ES_E_MEDIA_TYPE for anything else. */
static int labels_format_of(const char *content_type, es_labels_format *out, es_err *err)
{
    static const char *const types[] = {"text/tab-separated-values", "text/csv", "application/json", NULL};
    static const es_labels_format formats[] = {ES_LABELS_TSV, ES_LABELS_CSV, ES_LABELS_JSON};
    size_t len;
    int at = media_type_at(content_type, types, &len);
    *out = formats[at < 0 ? 0 : at];
    if (at >= 0)
        return 0;
    return es_fail(err, ES_E_MEDIA_TYPE, "Content-Type",
                   "Content-Type %.*s is not accepted for labels: send text/tab-separated-values, text/csv or "
                   "application/json", (int)(len < 100 ? len : 100), content_type);
}

/* A labels PUT's checks and set-up: no parameters, its content type, a body
 * within both uploads.max_body_bytes and uploads.max_labels_bytes. */
static int begin_labels_put(const es_uploads_conf *uc, const es_query *q, const char *content_type,
                            const char *content_length, es_upload *u, es_err *err)
{
    es_uploads_conf bounded = *uc;
    if (uc->max_labels_bytes < bounded.max_body_bytes)
        bounded.max_body_bytes = uc->max_labels_bytes;
    if (es_query_check(q, no_params, err) < 0 || labels_format_of(content_type, &u->labels_format, err) < 0 ||
        check_length(u->app, content_length, &bounded, err) < 0)
        return -1;
    u->tensor = es_strdup("");
    u->max_bytes = bounded.max_body_bytes;
    u->max_pending = uc->max_pending_bytes;
    return open_temp(temp_dir(uc), &u->fd, err);
}

/* See uploads.h. */
int es_upload_begin(es_app *app, const es_catalogue *reg, const char *method, const char *path,
                    const es_query *q, const char *authorization, bool proxied, const char *content_type,
                    const char *content_length, es_upload **out, es_err *err)
{
    es_ctx probe = {0};
    const es_route *route = es_route_find(path, &probe);
    bool labels = route && strcmp(route->pattern, ES_LABELS_ROUTE) == 0;
    if (!route || (strcmp(route->pattern, ES_MATRIX_ROUTE) != 0 && !labels))
        return es_fail(err, ES_E_NOTFOUND, "", "only %s and %s can be written", ES_MATRIX_ROUTE, ES_LABELS_ROUTE);
    if (check_access(app, &reg->uploads, authorization, proxied, err) < 0 ||
        es_catalogue_check_name(probe.model, "model", err) < 0 || es_catalogue_check_name(probe.matrix, "matrix", err) < 0 ||
        check_user_model(reg, probe.model, err) < 0)
        return -1;
    es_upload *u = es_calloc(1, sizeof *u);
    u->app = app;
    u->put = strcmp(method, "PUT") == 0;
    u->persistent = reg->uploads.dir && *reg->uploads.dir;
    u->fd = -1;
    u->labels = labels;
    memcpy(u->model, probe.model, sizeof u->model);
    memcpy(u->matrix, probe.matrix, sizeof u->matrix);
    snprintf(u->location, sizeof u->location, "/v1/models/%.64s/matrices/%.64s%s", u->model, u->matrix,
             labels ? "/labels" : "");
    int rc = !u->put  ? es_query_check(q, no_params, err)
             : labels ? begin_labels_put(&reg->uploads, q, content_type, content_length, u, err)
                      : begin_put(&reg->uploads, q, content_type, content_length, u, err);
    if (rc < 0) {
        es_upload_free(u);
        return -1;
    }
    *out = u;
    return 0;
}

/* See uploads.h. */
int es_upload_write(es_upload *u, const char *data, size_t len, es_err *err)
{
    if (len > u->max_bytes - u->bytes)
        return es_fail(err, ES_E_TOO_LARGE, "uploads.max_body_bytes",
                       "the body is larger than uploads.max_body_bytes = %zu", u->max_bytes);
    if (atomic_fetch_add(&u->app->metrics.upload_pending_bytes, len) + len > u->max_pending) {
        atomic_fetch_sub(&u->app->metrics.upload_pending_bytes, len);
        return pending_fail(u->max_pending, err);
    }
    u->bytes += len; /* counted whole: es_upload_free gives back u->bytes */
    while (len > 0) {
        ssize_t n = write(u->fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == ENOSPC || errno == EDQUOT))
            return es_fail(err, ES_E_STORAGE, "uploads.tmp_dir", "the directory upload bodies are received in is "
                           "full (%s)", strerror(errno));
        if (n < 0)
            return es_fail(err, ES_E_IO, "uploads.tmp_dir", "cannot write the body to a temporary file: %s",
                           strerror(errno));
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* See uploads.h: a body to read, or a directory to lock and read. */
bool es_upload_on_pool(const es_upload *u) { return u->put || u->persistent; }

/* Errors of the loaders are the client's: a malformed body (ES_E_FORMAT) or an
 * absent tensor becomes ES_E_PARAM, keeping the message (rule, byte offset). */
static int body_error(es_err *err)
{
    if (err && err->code == ES_E_FORMAT) {
        err->code = ES_E_PARAM;
        snprintf(err->param, sizeof err->param, "body");
    } else if (err && err->code == ES_E_NOTFOUND) {
        err->code = ES_E_PARAM;
    }
    return -1;
}

/* The bytes the new matrix MODEL/MATRIX may hold within
 * uploads.max_total_bytes, given what the other user matrices of cat hold. */
static size_t room_for(const es_catalogue *cat, const es_upload *u)
{
    const es_matrix *old = es_catalogue_matrix(cat, u->model, u->matrix);
    size_t count, bytes;
    es_catalogue_user_totals(cat, &count, &bytes);
    size_t others = bytes - (old ? es_matrix_bytes(old) : 0);
    return others < cat->uploads.max_total_bytes ? cat->uploads.max_total_bytes - others : 0;
}

/* The matrix the body describes, read from the temporary file: a .npy or
 * safetensors file through es_source, or a JSON entry through the
 * configuration's parser (views resolved in cat; a generator larger than the
 * room uploads.max_total_bytes leaves is refused before it is made). A JSON
 * body is kept parsed in u->entry. */
static int build_matrix(const es_catalogue *cat, es_upload *u, es_matrix **m, char **description, es_err *err)
{
    char *id = es_asprintf("%s/%s", u->model, u->matrix);
    int rc;
    if (u->kind == BODY_FILE) {
        es_source *src = NULL;
        rc = es_source_open_fd(u->fd, BODY_NAME, &src, err);
        if (rc == 0)
            rc = es_source_load_tensor(src, id, u->tensor, u->axis, ES_UPLOAD_SOURCE, m, err);
        if (rc == 0)
            (*m)->axis_origin = u->axis_origin;
        es_source_free(src);
        *description = rc == 0 ? es_strdup("") : NULL;
    } else {
        es_file *f = NULL;
        size_t room = room_for(cat, u);
        rc = es_file_map_fd(u->fd, BODY_NAME, &f, err);
        const char *text = rc == 0 && f->bytes ? (const char *)f->bytes : "";
        if (rc == 0)
            rc = es_config_build_entry(cat, u->model, u->matrix, text, f->size, &room, m, description, err);
        if (rc == 0 && !u->entry)
            u->entry = json_loadb(text, f->size, 0, NULL); /* parsed once already */
        es_file_free(f);
    }
    free(id);
    return rc < 0 ? body_error(err) : 0;
}

/* The "model/matrix" a JSON body's view names (a bare name is of the body's
 * model), or NULL for a generator. Caller frees. */
static char *view_target(const es_upload *u)
{
    const char *view = json_string_value(json_object_get(u->entry, "view"));
    if (!view)
        return NULL;
    return strchr(view, '/') ? es_strdup(view) : es_asprintf("%s/%s", u->model, view);
}

/* The matrix id names in reg, or NULL. */
static const es_matrix *lookup(const es_catalogue *reg, const char *id)
{
    const es_matrix *m = NULL;
    es_catalogue_lookup(reg, id, "view", &m, NULL);
    return m;
}

/* With m as MODEL/MATRIX, would the user matrices of cur stay within
 * uploads.max_matrices (ES_E_LIMIT) and max_total_bytes (ES_E_STORAGE)? */
static int check_room(const es_catalogue *cur, const es_upload *u, const es_matrix *m, es_err *err)
{
    const es_uploads_conf *uc = &cur->uploads;
    const es_matrix *old = es_catalogue_matrix(cur, u->model, u->matrix);
    size_t count, bytes;
    es_catalogue_user_totals(cur, &count, &bytes);
    if (!old && count + 1 > uc->max_matrices)
        return es_fail(err, ES_E_LIMIT, "uploads.max_matrices",
                       "there are already uploads.max_matrices = %zu user matrices; delete one first", uc->max_matrices);
    size_t after = bytes - (old ? es_matrix_bytes(old) : 0) + es_matrix_bytes(m);
    if (after > uc->max_total_bytes)
        return es_fail(err, ES_E_STORAGE, "uploads.max_total_bytes",
                       "%s needs %zu bytes: user matrices would hold %zu bytes, above uploads.max_total_bytes = %zu",
                       m->id, es_matrix_bytes(m), after, uc->max_total_bytes);
    return 0;
}

/* 201 (200 on replace) with the description of the new matrix in reg. */
static int put_reply(const es_catalogue *reg, const es_upload *u, bool replaced, es_reply *rep, es_err *err)
{
    const es_model *model = es_catalogue_model(reg, u->model);
    size_t j = 0;
    while (strcmp(model->matrix_names[j], u->matrix) != 0)
        j++;
    es_jctx jc = {0};
    json_t *root = es_describe_matrix(&jc, model, j);
    int rc = es_jctx_check(&jc, err) < 0 ? -1
                                         : es_json_body(root, reg->limits.max_response_bytes, &rep->body, &rep->len, err);
    json_decref(root);
    if (rc < 0)
        return -1;
    rep->status = replaced ? 200 : 201;
    rep->content_type = "application/json";
    rep->cache_control = "no-store";
    es_reply_location(rep, u->location);
    return 0;
}

/* Keep the new matrix in uploads.dir (es_persist_put): the file body, or the
 * JSON entry with, for a view of a user matrix, that matrix's record: the view
 * keeps the data it was made from whatever later happens to its base. */
static int persist_put(es_app *app, const es_catalogue *cur, const es_upload *u, const es_matrix *m,
                       const char *description, double created, es_err *err)
{
    es_persist_item it = {.model = u->model, .matrix = u->matrix, .description = description, .created = created,
                          .fd = u->fd, .file_sha256 = m->prov.file_sha256, .tensor = u->tensor, .axis = u->axis,
                          .axis_stated = u->axis_origin == ES_AXIS_STATED, .entry = u->entry};
    char *target = u->entry ? view_target(u) : NULL;
    const es_model *base_model = NULL;
    if (target) {
        char *slash = strchr(target, '/');
        *slash = '\0';
        base_model = es_catalogue_model(cur, target);
        *slash = '/';
    }
    if (base_model && base_model->user)
        it.base = es_persist_record(app, target);
    int rc = es_persist_put(app, &it, err);
    free(target);
    return rc;
}

/* Under the write lock, after other daemons' changes were taken in: a view
 * built on a base that has changed meanwhile is built again on the current
 * one (views are cheap), so that what is kept is what is served. */
static int rebuild_stale_view(const es_catalogue *cat, const es_catalogue *cur, es_upload *u, es_matrix **m,
                              char **description, es_err *err)
{
    char *target = u->entry ? view_target(u) : NULL;
    int rc = 0;
    if (target && lookup(cat, target) != lookup(cur, target)) {
        es_matrix_release(*m);
        free(*description);
        *m = NULL;
        *description = NULL;
        rc = build_matrix(cur, u, m, description, err);
    }
    free(target);
    return rc;
}

/* A non-finite number in the description of a matrix whose values are finite
 * (so large that its row norms overflow) is the body's fault: ES_E_PARAM. */
static void overflow_is_the_body(es_err *err)
{
    if (!err || err->code != ES_E_NUMERIC)
        return;
    char field[sizeof err->param];
    memcpy(field, err->param, sizeof field);
    es_fail(err, ES_E_PARAM, "body",
            BODY_NAME ": the values are finite but so large that the matrix's %s overflows to infinity", field);
}

/* Check, describe, keep and publish m as MODEL/MATRIX (write lock and the
 * directory's lock held): on any failure nothing changed. */
static int publish_put(es_app *app, const es_catalogue *cat, es_upload *u, es_matrix **m, char **description,
                       es_reply *rep, es_err *err)
{
    es_catalogue *cur = app->reg, *next = NULL; /* stable: only writers change it, under the write lock */
    bool replaced = es_catalogue_matrix(cur, u->model, u->matrix) != NULL;
    int rc = check_user_model(cur, u->model, err) < 0 || rebuild_stale_view(cat, cur, u, m, description, err) < 0 ||
                     check_room(cur, u, *m, err) < 0
                 ? -1
                 : 0;
    double created = es_wall_now();
    if (rc == 0) {
        next = es_catalogue_with(cur, u->model, u->matrix, *m, *description, created);
        if ((rc = put_reply(next, u, replaced, rep, err)) < 0)
            overflow_is_the_body(err);
    }
    if (rc == 0 && (rc = persist_put(app, cur, u, *m, *description, created, err)) < 0)
        es_reply_release(rep);
    if (rc < 0) {
        es_catalogue_free(next);
        return -1;
    }
    es_app_publish(app, next);
    es_info("%s %s: %zux%zu %s sha256 %.12s model_axis %s (%zu bytes)", replaced ? "replaced" : "uploaded", (*m)->id,
            (*m)->rows, (*m)->cols, (*m)->prov.dtype, (*m)->prov.sha256, es_axis_name((*m)->model_axis),
            es_matrix_bytes(*m));
    return 0;
}

/* Build the matrix (outside the locks), then check, keep and publish it
 * under them. */
static int finish_put(es_app *app, es_upload *u, es_reply *rep, es_err *err)
{
    es_catalogue *cat = es_app_catalogue(app);
    es_matrix *m = NULL;
    char *description = NULL;
    int rc = build_matrix(cat, u, &m, &description, err);
    if (rc == 0) {
        pthread_mutex_lock(&app->write_lock);
        if ((rc = es_persist_begin(app, err)) == 0) {
            rc = publish_put(app, cat, u, &m, &description, rep, err);
            es_persist_end(app);
        }
        pthread_mutex_unlock(&app->write_lock);
    }
    es_catalogue_free(cat);
    es_matrix_release(m);
    free(description);
    return rc;
}

/* A write's change, run by under_locks with both locks held. */
typedef int (*locked_change)(es_app *app, es_upload *u, es_reply *rep, es_err *err);

/* Run change under the app's write lock and the directory's lock (taken by
 * es_persist_begin, which first takes in other daemons' changes). */
static int under_locks(es_app *app, es_upload *u, es_reply *rep, locked_change change, es_err *err)
{
    pthread_mutex_lock(&app->write_lock);
    int rc = es_persist_begin(app, err);
    if (rc == 0) {
        rc = change(app, u, rep, err);
        es_persist_end(app);
    }
    pthread_mutex_unlock(&app->write_lock);
    return rc;
}

/* 204 No Content. */
static void no_content(es_reply *rep)
{
    *rep = (es_reply){.status = 204, .body = (char *)"", .body_static = true, .cache_control = "no-store"};
}

/* Remove the matrix (locks held): 204, ES_E_NOTFOUND if absent. */
static int delete_matrix(es_app *app, es_upload *u, es_reply *rep, es_err *err)
{
    es_catalogue *cur = app->reg;
    if (check_user_model(cur, u->model, err) < 0)
        return -1;
    if (!es_catalogue_matrix(cur, u->model, u->matrix))
        return es_fail(err, ES_E_NOTFOUND, "matrix", "model '%s' has no matrix '%s'", u->model, u->matrix);
    if (es_persist_delete(app, u->model, u->matrix, err) < 0)
        return -1;
    es_app_publish(app, es_catalogue_without(cur, u->model, u->matrix));
    es_info("deleted %s/%s", u->model, u->matrix);
    no_content(rep);
    return 0;
}

/* ---------------------------------------------------------------- labels */

/* The labels in the body, parsed for the n_rows items of the matrix. */
static int read_labels(const es_upload *u, size_t n_rows, size_t max_bytes, es_labels **out, es_err *err)
{
    es_file *f = NULL;
    if (es_file_map_fd(u->fd, BODY_NAME, &f, err) < 0)
        return -1;
    const char *text = f->bytes ? (const char *)f->bytes : "";
    int rc = es_labels_parse(text, f->size, u->labels_format, n_rows, max_bytes, "body", "uploads.max_labels_bytes",
                             out, err);
    es_file_free(f);
    return rc;
}

/* The matrix whose labels are written, in cur (checked under the locks):
 * ES_E_NOTFOUND naming "matrix" if absent. */
static const es_matrix *labelled_matrix(const es_catalogue *cur, const es_upload *u, es_err *err)
{
    const es_matrix *m = check_user_model(cur, u->model, err) < 0 ? NULL
                                                                  : es_catalogue_matrix(cur, u->model, u->matrix);
    if (!m && err && err->code != ES_E_CONFLICT)
        es_fail(err, ES_E_NOTFOUND, "matrix", "model '%s' has no matrix '%s'", u->model, u->matrix);
    return m;
}

/* PUT .../labels (locks held): parse the body against the matrix's items,
 * keep the labels in uploads.dir, publish them; 200 with their summary. */
static int put_labels(es_app *app, es_upload *u, es_reply *rep, es_err *err)
{
    es_catalogue *cur = app->reg;
    const es_matrix *m = labelled_matrix(cur, u, err);
    es_labels *labels = NULL;
    int rc = !m ? -1 : read_labels(u, es_matrix_items(m), cur->uploads.max_labels_bytes, &labels, err);
    if (rc == 0)
        rc = es_persist_labels(app, u->model, u->matrix, labels, err);
    if (rc == 0) {
        es_app_publish(app, es_catalogue_with_labels(cur, u->model, u->matrix, labels));
        es_info("labels of %s/%s: %zu rows x %zu columns (%zu bytes)", u->model, u->matrix, labels->n_rows,
                labels->n_cols, labels->bytes);
        rc = es_labels_reply(app, labels, rep, err);
    }
    es_labels_release(labels);
    return rc;
}

/* DELETE .../labels (locks held): 204, ES_E_NOTFOUND naming "labels" when there are none. */
static int delete_labels(es_app *app, es_upload *u, es_reply *rep, es_err *err)
{
    es_catalogue *cur = app->reg;
    if (!labelled_matrix(cur, u, err))
        return -1;
    if (!es_catalogue_labels(cur, u->model, u->matrix))
        return es_fail(err, ES_E_NOTFOUND, "labels", "%s/%s has no labels", u->model, u->matrix);
    if (es_persist_labels(app, u->model, u->matrix, NULL, err) < 0)
        return -1;
    es_app_publish(app, es_catalogue_with_labels(cur, u->model, u->matrix, NULL));
    es_info("labels of %s/%s deleted", u->model, u->matrix);
    no_content(rep);
    return 0;
}

/* See uploads.h. */
int es_upload_finish(es_app *app, es_upload *u, es_reply *rep, es_err *err)
{
    if (u->labels)
        return under_locks(app, u, rep, u->put ? put_labels : delete_labels, err);
    return u->put ? finish_put(app, u, rep, err) : under_locks(app, u, rep, delete_matrix, err);
}

/* See uploads.h. */
void es_upload_free(es_upload *u)
{
    if (!u)
        return;
    if (u->fd >= 0)
        close(u->fd);
    atomic_fetch_sub(&u->app->metrics.upload_pending_bytes, u->bytes);
    json_decref(u->entry);
    free(u->tensor);
    free(u);
}

/* See uploads.h. */
bool es_host_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (strcmp(host, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return false;
}
