/* Persistence of user matrices (uploads.dir): uploaded files are kept as
 * content-addressed files DIR/<sha256 of the file>, and DIR/manifest.json
 * lists every user matrix with what rebuilds it (the file, its tensor and model
 * axis, or the JSON entry), its description and creation time. The manifest is
 * rewritten atomically (temporary file, fsync, rename) under the app's write
 * lock after every change, so a crash leaves the previous or the next one. At
 * start the matrices are rebuilt by the same loaders and parser as uploads. */
#include "http/http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MANIFEST "manifest.json"
#define COPY_CHUNK ((size_t)1 << 20)

/* ES_E_IO naming "uploads.dir": what failed on which path, with errno's text. */
static int persist_fail(es_err *err, const char *what, const char *path)
{
    return es_fail(err, ES_E_IO, "uploads.dir", "cannot %s %s: %s", what, path, strerror(errno));
}

/* Write len bytes (all, retrying short writes). 0, or -1 with errno. */
static int write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Fill a new file in dir through fill(fd, arg), fsync it and rename it to
 * dir/name: readers see the old file or the new one, never a part. */
static int replace_file(const char *dir, const char *name, int (*fill)(int fd, const void *arg), const void *arg,
                        es_err *err)
{
    char *tmp = es_asprintf("%s/.%s-XXXXXX", dir, name), *path = es_asprintf("%s/%s", dir, name);
    int fd = mkostemp(tmp, O_CLOEXEC), rc = 0;
    if (fd < 0)
        rc = persist_fail(err, "create a file in", dir);
    else if (fill(fd, arg) != 0 || fsync(fd) != 0)
        rc = persist_fail(err, "write", tmp);
    if (fd >= 0 && close(fd) != 0 && rc == 0)
        rc = persist_fail(err, "write", tmp);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = persist_fail(err, "rename to", path);
    if (rc != 0 && fd >= 0)
        unlink(tmp);
    free(tmp);
    free(path);
    return rc;
}

/* replace_file filler: the manifest's JSON text. */
static int fill_manifest(int fd, const void *arg)
{
    char *text = json_dumps(arg, JSON_INDENT(1) | JSON_SORT_KEYS);
    int rc = text ? write_all(fd, text, strlen(text)) : -1;
    free(text);
    return rc;
}

/* replace_file filler: a copy of the open file *arg (an upload's body). */
static int fill_copy(int fd, const void *arg)
{
    int from = *(const int *)arg;
    char *buf = es_malloc(COPY_CHUNK);
    off_t at = 0;
    ssize_t n;
    while ((n = pread(from, buf, COPY_CHUNK, at)) > 0 || (n < 0 && errno == EINTR)) {
        if (n < 0)
            continue;
        if (write_all(fd, buf, (size_t)n) != 0)
            break;
        at += n;
    }
    free(buf);
    return n == 0 ? 0 : -1;
}

/* Is this manifest entry MODEL/MATRIX? */
static bool entry_is(const json_t *e, const char *model, const char *matrix)
{
    return strcmp(json_string_value(json_object_get(e, "model")), model) == 0 &&
           strcmp(json_string_value(json_object_get(e, "matrix")), matrix) == 0;
}

/* Remove MODEL/MATRIX from the manifest; returns the content file it named
 * (newly allocated) when no other entry names it, else NULL. */
static char *drop_entry(json_t *list, const char *model, const char *matrix)
{
    char *file = NULL;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *e = json_array_get(list, i);
        if (!entry_is(e, model, matrix))
            continue;
        const char *f = json_string_value(json_object_get(e, "file"));
        file = f ? es_strdup(f) : NULL;
        json_array_remove(list, i);
        break;
    }
    for (size_t i = 0; file && i < json_array_size(list); i++) {
        const char *f = json_string_value(json_object_get(json_array_get(list, i), "file"));
        if (f && strcmp(f, file) == 0) {
            free(file);
            file = NULL;
        }
    }
    return file;
}

/* The manifest's list of entries (created empty on first use). */
static json_t *entries(es_app *app)
{
    if (!app->manifest)
        app->manifest = json_pack("{s:i, s:[]}", "version", 1, "matrices");
    return json_object_get(app->manifest, "matrices");
}

/* See http.h. */
int es_persist_put(es_app *app, const char *dir, const es_persist_item *it, es_err *err)
{
    if (it->fd >= 0 && !it->entry) {
        char *path = es_asprintf("%s/%s", dir, it->file_sha256);
        bool have = access(path, F_OK) == 0; /* content-addressed: the same bytes are kept once */
        free(path);
        if (!have && replace_file(dir, it->file_sha256, fill_copy, &it->fd, err) != 0)
            return -1;
    }
    json_t *list = entries(app);
    char *orphan = drop_entry(list, it->model, it->matrix);
    json_t *e = json_pack("{s:s, s:s, s:s, s:f}", "model", it->model, "matrix", it->matrix, "description",
                          it->description, "created", it->created);
    if (it->entry) {
        json_object_set(e, "entry", (json_t *)it->entry);
    } else {
        json_object_set_new(e, "file", json_string(it->file_sha256));
        json_object_set_new(e, "tensor", json_string(it->tensor));
        json_object_set_new(e, "model_axis", it->axis_stated ? json_string(es_axis_name(it->axis)) : json_null());
    }
    json_array_append_new(list, e);
    int rc = replace_file(dir, MANIFEST, fill_manifest, app->manifest, err);
    if (orphan && strcmp(orphan, it->file_sha256) != 0) {
        char *path = es_asprintf("%s/%s", dir, orphan);
        unlink(path);
        free(path);
    }
    free(orphan);
    return rc;
}

/* See http.h. */
int es_persist_delete(es_app *app, const char *dir, const char *model, const char *matrix, es_err *err)
{
    char *orphan = drop_entry(entries(app), model, matrix);
    int rc = replace_file(dir, MANIFEST, fill_manifest, app->manifest, err);
    if (orphan) {
        char *path = es_asprintf("%s/%s", dir, orphan);
        unlink(path);
        free(path);
    }
    free(orphan);
    return rc;
}

/* Rebuild one manifest entry into *m (against the catalogue cat). */
static int rebuild(const es_registry *cat, const char *dir, const json_t *e, es_matrix **m, es_err *err)
{
    const char *model = json_string_value(json_object_get(e, "model"));
    const char *matrix = json_string_value(json_object_get(e, "matrix"));
    const json_t *entry = json_object_get(e, "entry");
    if (entry) {
        char *text = json_dumps(entry, JSON_COMPACT), *description = NULL;
        int rc = es_config_build_entry(cat, model, matrix, text, strlen(text), m, &description, err);
        free(text);
        free(description);
        return rc;
    }
    const char *file = json_string_value(json_object_get(e, "file"));
    const char *tensor = json_string_value(json_object_get(e, "tensor"));
    const char *axis_name = json_string_value(json_object_get(e, "model_axis"));
    es_axis axis = ES_AXIS_COLUMNS;
    es_axis_origin origin = ES_AXIS_STATED;
    if (!axis_name || es_axis_parse(axis_name, &axis) != 0)
        origin = es_conv1d_axis(tensor ? tensor : "", &axis) == 0 ? ES_AXIS_BY_NAME : ES_AXIS_DEFAULTED;
    char *path = es_asprintf("%s/%s", dir, file ? file : ""), *id = es_asprintf("%s/%s", model, matrix);
    es_source *src = NULL;
    int rc = es_source_open(path, &src, err);
    if (rc == 0)
        rc = es_source_load_tensor(src, id, tensor ? tensor : "", axis, ES_UPLOAD_SOURCE, m, err);
    if (rc == 0)
        (*m)->axis_origin = origin;
    es_source_free(src);
    free(path);
    free(id);
    return rc;
}

/* Is e a well-formed manifest entry (names valid, one of file or entry)? */
static bool entry_ok(const json_t *e)
{
    const char *model = json_string_value(json_object_get(e, "model"));
    const char *matrix = json_string_value(json_object_get(e, "matrix"));
    return json_is_object(e) && model && matrix && es_config_check_name(model, "model", NULL) == 0 &&
           es_config_check_name(matrix, "matrix", NULL) == 0 &&
           (json_is_object(json_object_get(e, "entry")) || json_is_string(json_object_get(e, "file")));
}

/* See http.h. */
int es_persist_restore(es_app *app, es_err *err)
{
    if (!app->reg->uploads.dir || !*app->reg->uploads.dir)
        return 0;
    char *dir = es_strdup(app->reg->uploads.dir); /* each publish below replaces app->reg */
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        int rc = persist_fail(err, "create", dir);
        free(dir);
        return rc;
    }
    char *path = es_asprintf("%s/%s", dir, MANIFEST);
    json_error_t jerr;
    json_t *old = access(path, F_OK) == 0 ? json_load_file(path, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    int rc = access(path, F_OK) == 0 && !old
                 ? es_fail(err, ES_E_IO, "uploads.dir", "%s: line %d: %s", path, jerr.line, jerr.text)
                 : 0;
    free(path);
    json_t *list = old ? json_object_get(old, "matrices") : NULL;
    size_t restored = 0;
    for (size_t i = 0; rc == 0 && i < json_array_size(list); i++) {
        json_t *e = json_array_get(list, i);
        es_matrix *m = NULL;
        es_err why = {0};
        bool ok = entry_ok(e);
        const char *model = json_string_value(json_object_get(e, "model"));
        const char *matrix = json_string_value(json_object_get(e, "matrix"));
        const es_model *existing = ok ? es_registry_model(app->reg, model) : NULL;
        if (!ok || (existing && !existing->user)) {
            es_warn("uploads.dir: manifest entry %zu skipped (malformed, or its model is now configured)", i);
            continue;
        }
        if (rebuild(app->reg, dir, e, &m, &why) != 0) {
            es_warn("uploads.dir: %s/%s not restored: %s", model, matrix, why.message);
            continue;
        }
        json_t *desc = json_object_get(e, "description"), *created = json_object_get(e, "created");
        es_app_publish(app, es_registry_with(app->reg, model, matrix, m,
                                             json_is_string(desc) ? json_string_value(desc) : "",
                                             json_is_number(created) ? json_number_value(created) : es_wall_now()));
        es_matrix_release(m);
        json_array_append(entries(app), e);
        restored++;
    }
    json_decref(old);
    if (rc == 0)
        es_info("uploads.dir %s: %zu user matrices restored", dir, restored);
    free(dir);
    return rc;
}
