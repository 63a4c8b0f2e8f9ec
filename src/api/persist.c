/* Persistence of user matrices (uploads.dir), shared by any number of daemons
 * on one directory (docs/operations.md, "The upload directory"):
 *
 *   DIR/lock                        flock: exclusive for a change, shared to read
 *   DIR/generation                  a counter each change increments; polled
 *   DIR/records/MODEL+MATRIX.json   one record per user matrix
 *   DIR/<sha256>                    uploaded files and labels (JSON), content-addressed
 *
 * Every file is written whole under a temporary name, fsync'ed, renamed into
 * place and its directory fsync'ed, so a crash leaves the old state or the new
 * one. A change is durable before anything it replaces is removed, and the
 * in-memory catalogue changes only after the disk did: a failed write changes
 * nothing. Files no record on disk names any more (a record of a view names
 * its base's record, so a view keeps its base's file) are removed under the
 * exclusive lock, with any temporary file a killed writer left. A daemon
 * brings its catalogue in line with the records whenever the generation
 * differs from the one it last saw (before each of its own writes, and from
 * the main loop's poll). */
#include "embedscope/config.h"
#include "embedscope/app.h"
#include "embedscope/uploads.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdatomic.h>
#include <pthread.h>

#define RECORDS "records"
#define LOCK_FILE "lock"
#define GENERATION "generation"
#define LEGACY_MANIFEST "manifest.json" /* the single-file format before records */
#define RECORD_FORMAT 2
#define RECORD_SUFFIX ".json"
/* Temporary files start with this; writers make them only under the exclusive lock. */
#define TEMP_PREFIX ".tmp-"
#define COPY_CHUNK ((size_t)1 << 20)
/* How deep views of views of user matrices may nest in a record. */
#define MAX_BASE_DEPTH 16

/* A failed file operation in DIR: the path and errno go to the log, the client
 * is told without paths: ES_E_STORAGE (507) when the disk or quota is full,
 * ES_E_IO otherwise, both naming "uploads.dir". */
static int store_fail(es_err *err, const char *what, const char *path)
{
    int e = errno;
    es_warn("uploads.dir: cannot %s %s: %s", what, path, strerror(e));
    if (e == ENOSPC || e == EDQUOT)
        return es_fail(err, ES_E_STORAGE, "uploads.dir",
                       "the upload directory is full (%s): the matrix was not changed", strerror(e));
    return es_fail(err, ES_E_IO, "uploads.dir", "cannot %s in the upload directory (%s): the matrix was not changed",
                   what, strerror(e));
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

/* fsync a directory, making the names renamed or removed in it durable. 0 or -1 with errno. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Fill a new file in dir through fill(fd, arg), fsync it, rename it to
 * dir/name and fsync dir: readers see the old file or the new one, never a
 * part, and after a crash the new one if this returned 0. */
static int replace_file(const char *dir, const char *name, int (*fill)(int fd, const void *arg), const void *arg,
                        es_err *err)
{
    char *tmp = es_asprintf("%s/" TEMP_PREFIX "XXXXXX", dir), *path = es_asprintf("%s/%s", dir, name);
    int fd = mkostemp(tmp, O_CLOEXEC), rc = 0;
    if (fd < 0)
        rc = store_fail(err, "create a file in", dir);
    else if (fill(fd, arg) != 0 || fsync(fd) != 0)
        rc = store_fail(err, "write", tmp);
    if (fd >= 0 && close(fd) != 0 && rc == 0)
        rc = store_fail(err, "write", tmp);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = store_fail(err, "rename to", path);
    if (rc != 0 && fd >= 0)
        unlink(tmp);
    if (rc == 0 && sync_dir(dir) != 0)
        rc = store_fail(err, "sync", dir);
    free(tmp);
    free(path);
    return rc;
}

/* replace_file filler: a JSON document as compact text. */
static int fill_json(int fd, const void *arg)
{
    char *text = json_dumps(arg, JSON_COMPACT | JSON_SORT_KEYS);
    int rc = text ? write_all(fd, text, strlen(text)) : -1;
    free(text);
    return rc;
}

/* A text and its length, for fill_text. */
typedef struct text_arg {
    const char *text;
    size_t len;
} text_arg;

/* replace_file filler: a text (labels as JSON). */
static int fill_text(int fd, const void *arg)
{
    const text_arg *t = arg;
    return write_all(fd, t->text, t->len);
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

/* Is DIR/NAME, a content-addressed file (NAME: the sha256 of its bytes), there
 * whole: a regular file of size bytes whose sha256 is NAME? Only then is it
 * reused for the same content; a damaged or truncated one (a disk error, a
 * hand edit) is written again, where trusting its name (it used to be
 * access(F_OK)) left the new record naming bytes that no restart can load. */
static bool content_intact(const char *dir, const char *name, off_t size)
{
    char *path = es_asprintf("%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO there is not waited on */
    free(path);
    struct stat st;
    bool ok = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == size;
    EVP_MD_CTX *md = ok ? EVP_MD_CTX_new() : NULL;
    ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1;
    char *buf = ok ? es_malloc(COPY_CHUNK) : NULL;
    for (ssize_t n; ok && (n = read(fd, buf, COPY_CHUNK)) != 0;)
        if (n < 0)
            ok = errno == EINTR;
        else
            ok = EVP_DigestUpdate(md, buf, (size_t)n) == 1;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    ok = ok && EVP_DigestFinal_ex(md, digest, &len) == 1 && len == 32;
    char hex[65] = "";
    for (unsigned i = 0; ok && i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    ok = ok && strcmp(hex, name) == 0;
    if (!ok && fd >= 0)
        es_warn("uploads.dir: %s/%s does not hold the content it is named after (damaged or truncated): written "
                "again", dir, name);
    free(buf);
    EVP_MD_CTX_free(md);
    if (fd >= 0)
        close(fd);
    return ok;
}

/* ---------------------------------------------------------------- the lock and the generation */

/* The store's directory, or NULL when uploads.dir is not set (or was not at
 * start: a reload does not change where matrices are kept). */
static const char *store_dir(const es_app *app)
{
    const char *dir = app->reg->uploads.dir;
    return dir && *dir && app->records ? dir : NULL;
}

/* flock DIR/lock with op (LOCK_EX, LOCK_SH or LOCK_UN), opening it once. */
static int store_flock(es_app *app, const char *dir, int op, es_err *err)
{
    if (app->store_lock_fd < 0) {
        char *path = es_asprintf("%s/" LOCK_FILE, dir);
        app->store_lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        int rc = app->store_lock_fd < 0 ? store_fail(err, "open", path) : 0;
        free(path);
        if (rc < 0)
            return -1;
    }
    while (flock(app->store_lock_fd, op) != 0)
        if (errno != EINTR)
            return store_fail(err, "lock", dir);
    return 0;
}

/* The generation DIR/generation holds (0 when absent or unreadable: a FIFO
 * or a device there is refused at once by es_file_map, never waited on). */
static unsigned long long read_generation(const char *dir)
{
    char *path = es_asprintf("%s/" GENERATION, dir), text[32] = "";
    es_file *f;
    es_err ignored = {0};
    if (es_file_map(path, &f, &ignored) == 0) {
        memcpy(text, f->bytes ? (const char *)f->bytes : "", f->size < sizeof text - 1 ? f->size : sizeof text - 1);
        es_file_free(f);
    }
    free(path);
    return strtoull(text, NULL, 10);
}

/* The JSON document in the regular file at path; NULL with the reason in
 * jerr->text when it cannot be read (a FIFO or a device is refused at once by
 * es_file_map, never waited on) or is not JSON. */
static json_t *load_json(const char *path, json_error_t *jerr)
{
    es_file *f;
    es_err why = {0};
    if (es_file_map(path, &f, &why) != 0) {
        memset(jerr, 0, sizeof *jerr);
        snprintf(jerr->text, sizeof jerr->text, "%.*s", (int)sizeof jerr->text - 1, why.message);
        return NULL;
    }
    json_t *doc = json_loadb(f->bytes ? (const char *)f->bytes : "", f->size, JSON_REJECT_DUPLICATES, jerr);
    es_file_free(f);
    return doc;
}

/* Increment the generation (exclusive lock held): every daemon polling it
 * will read the records again once the lock is free. Done before a change, so
 * that a writer killed halfway still leaves a generation others notice. The
 * counter is rewritten in place at a fixed width: no new block is needed, so
 * a deletion still works on a full disk (a reader that meets a torn value only
 * syncs once more, under the lock). */
static int bump_generation(es_app *app, const char *dir, es_err *err)
{
    unsigned long long g = read_generation(dir) + 1;
    char *path = es_asprintf("%s/" GENERATION, dir), text[32];
    int n = snprintf(text, sizeof text, "%020llu\n", g);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600), rc = 0; /* a FIFO: ENXIO, not a wait */
    if (fd < 0 || pwrite(fd, text, (size_t)n, 0) != n)
        rc = store_fail(err, "write", path);
    if (fd >= 0)
        close(fd);
    free(path);
    if (rc == 0)
        app->store_generation = g;
    return rc;
}

/* ---------------------------------------------------------------- records */

/* "model/matrix", the key of app->records. Caller frees. */
static char *record_key(const char *model, const char *matrix) { return es_asprintf("%s/%s", model, matrix); }

/* The file name of MODEL/MATRIX's record ('+' is not a name character). Caller frees. */
static char *record_name(const char *model, const char *matrix)
{
    return es_asprintf("%s+%s" RECORD_SUFFIX, model, matrix);
}

static const char *get_str(const json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

/* Is name a content-addressed file's (64 lowercase hex digits)? */
static bool blob_name(const char *name)
{
    return strlen(name) == 64 && strspn(name, "0123456789abcdef") == 64;
}

/* Is rec a well-formed record (valid names, exactly one of a content-addressed
 * file or an entry, a base only with an entry, nested at most MAX_BASE_DEPTH
 * deep)? A "file" that is no content-addressed name makes the record malformed
 * even beside an entry, which does not read it. */
static bool record_ok(const json_t *rec, int depth)
{
    const char *model = get_str(rec, "model"), *matrix = get_str(rec, "matrix"), *name = get_str(rec, "file");
    const json_t *entry = json_object_get(rec, "entry"), *base = json_object_get(rec, "base");
    const json_t *labels = json_object_get(rec, "labels");
    bool file = name && blob_name(name);
    if (json_object_get(rec, "file") && !file)
        return false;
    if (labels && !(json_is_string(labels) && blob_name(json_string_value(labels))))
        return false;
    return json_is_object(rec) && model && matrix && es_catalogue_check_name(model, "model", NULL) == 0 &&
           es_catalogue_check_name(matrix, "matrix", NULL) == 0 && (!entry || json_is_object(entry)) &&
           (entry != NULL) != file &&
           (!base || (entry && depth < MAX_BASE_DEPTH && record_ok(base, depth + 1)));
}

/* Every record in DIR/records as an object "model/matrix" -> record. A record
 * that is not JSON or not well formed is left out with a warning. */
static json_t *read_records(const char *dir)
{
    json_t *all = json_object();
    char *rdir = es_asprintf("%s/" RECORDS, dir);
    DIR *d = opendir(rdir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name), suffix = strlen(RECORD_SUFFIX);
        if (de->d_name[0] == '.' || len <= suffix || strcmp(de->d_name + len - suffix, RECORD_SUFFIX) != 0)
            continue;
        char *path = es_asprintf("%s/%s", rdir, de->d_name);
        json_error_t jerr;
        json_t *rec = load_json(path, &jerr);
        char *name = rec && record_ok(rec, 0) ? record_name(get_str(rec, "model"), get_str(rec, "matrix")) : NULL;
        if (name && strcmp(name, de->d_name) == 0) {
            char *key = record_key(get_str(rec, "model"), get_str(rec, "matrix"));
            json_object_set(all, key, rec);
            free(key);
        } else {
            es_warn("uploads.dir: record %s skipped (%s)", path, rec ? "malformed" : jerr.text);
        }
        free(name);
        json_decref(rec);
        free(path);
    }
    if (d)
        closedir(d);
    free(rdir);
    return all;
}

static int rebuild(const es_catalogue *cat, const char *dir, const json_t *rec, es_matrix **m, es_err *err);

/* Rebuild a record's entry (a generator or a view) against cat; a view of a
 * user matrix is built on its base's record, the data it was made from. */
static int rebuild_entry(const es_catalogue *cat, const char *dir, const json_t *rec, es_matrix **m, es_err *err)
{
    const json_t *base = json_object_get(rec, "base");
    es_catalogue *with_base = NULL;
    if (base) {
        es_matrix *bm;
        if (rebuild(cat, dir, base, &bm, err) < 0)
            return -1;
        with_base = es_catalogue_with(cat, get_str(base, "model"), get_str(base, "matrix"), bm, "", 0);
        es_matrix_release(bm);
    }
    char *text = json_dumps(json_object_get(rec, "entry"), JSON_COMPACT), *description = NULL;
    int rc = es_config_build_entry(with_base ? with_base : cat, get_str(rec, "model"), get_str(rec, "matrix"), text,
                                   strlen(text), NULL, m, &description, err);
    free(text);
    free(description);
    es_catalogue_free(with_base);
    return rc;
}

/* Rebuild the matrix of a record: a file by the loaders, an entry by the
 * configuration's parser. */
static int rebuild(const es_catalogue *cat, const char *dir, const json_t *rec, es_matrix **m, es_err *err)
{
    if (json_object_get(rec, "entry"))
        return rebuild_entry(cat, dir, rec, m, err);
    const char *file = get_str(rec, "file"), *tensor = get_str(rec, "tensor");
    const char *axis_name = get_str(rec, "model_axis");
    es_axis axis = ES_AXIS_COLUMNS;
    es_axis_origin origin = ES_AXIS_STATED;
    if (!axis_name || es_axis_parse(axis_name, &axis) != 0)
        origin = es_conv1d_axis(tensor ? tensor : "", &axis) == 0 ? ES_AXIS_BY_NAME : ES_AXIS_DEFAULTED;
    char *path = es_asprintf("%s/%s", dir, file), *id = record_key(get_str(rec, "model"), get_str(rec, "matrix"));
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

/* See uploads.h. */
int es_persist_rebuild_text(const es_catalogue *cat, const char *dir, const char *text, size_t len, es_matrix **m,
                            es_err *err)
{
    json_error_t jerr;
    json_t *rec = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc = !rec               ? es_fail(err, ES_E_FORMAT, "uploads.dir", "a record that is not JSON: %s", jerr.text)
             : !record_ok(rec, 0) ? es_fail(err, ES_E_FORMAT, "uploads.dir", "a malformed record")
                                  : rebuild(cat, dir, rec, m, err);
    json_decref(rec);
    return rc;
}

/* The labels a record names (DIR/<sha256>, JSON) for m's items, or NULL: none,
 * or a file that cannot be read or parsed (logged; the matrix stays). */
static es_labels *rebuild_labels(const char *dir, const json_t *rec, const es_matrix *m)
{
    const char *name = get_str(rec, "labels");
    if (!name)
        return NULL;
    char *path = es_asprintf("%s/%s", dir, name);
    es_file *f = NULL;
    es_labels *labels = NULL;
    es_err err = {0};
    int rc = es_file_map(path, &f, &err);
    if (rc == 0)
        rc = es_labels_parse(f->bytes ? (const char *)f->bytes : "", f->size, ES_LABELS_JSON, es_matrix_items(m),
                             SIZE_MAX, "labels", "uploads.max_labels_bytes", &labels, &err);
    if (rc != 0)
        es_warn("uploads.dir: the labels of %s/%s (%s) not restored: %s", get_str(rec, "model"),
                get_str(rec, "matrix"), path, err.message);
    es_file_free(f);
    free(path);
    return labels;
}

/* Do two records describe the same matrix (they may differ in labels)? */
static bool same_matrix(const json_t *a, const json_t *b)
{
    if (!a || !b)
        return false;
    json_t *x = json_copy((json_t *)a), *y = json_copy((json_t *)b);
    json_object_del(x, "labels");
    json_object_del(y, "labels");
    bool same = json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return same;
}

/* Replace *reg by r (dropping the reference *reg held). */
static void step(es_catalogue **reg, es_catalogue *r)
{
    es_catalogue_free(*reg);
    *reg = r;
}

/* Drop from *next the user matrices whose records are gone from disk. */
static size_t drop_gone(es_app *app, const json_t *disk, es_catalogue **next)
{
    size_t changed = 0;
    const char *key;
    json_t *rec, *tmp;
    json_object_foreach_safe(app->records, tmp, key, rec) {
        if (json_object_get(disk, key))
            continue;
        const char *model = get_str(rec, "model"), *matrix = get_str(rec, "matrix");
        const es_model *mod = es_catalogue_model(*next, model);
        if (mod && mod->user && es_catalogue_matrix(*next, model, matrix)) {
            step(next, es_catalogue_without(*next, model, matrix));
            changed++;
        }
        json_object_del(app->records, key);
    }
    return changed;
}

/* Build into *next each record of disk that differs from app->records; one
 * that cannot be built yet (a view, in the legacy format, of a user matrix
 * built later) is retried while others succeed; what never builds is logged,
 * no longer served in its previous form, and remembered, so that it is not
 * tried again until its record changes. */
static size_t take_new(es_app *app, const char *dir, const json_t *disk, es_catalogue **next)
{
    json_t *todo = json_object(), *why_not = json_object();
    const char *key;
    json_t *rec;
    json_object_foreach((json_t *)disk, key, rec) {
        if (!json_equal(json_object_get(app->records, key), rec))
            json_object_set(todo, key, rec);
    }
    size_t changed = 0, progress = 1;
    while (progress && json_object_size(todo) > 0) {
        progress = 0;
        void *it = json_object_iter(todo);
        while (it) {
            key = json_object_iter_key(it);
            rec = json_object_iter_value(it);
            it = json_object_iter_next(todo, it);
            const char *model = get_str(rec, "model"), *matrix = get_str(rec, "matrix");
            const es_model *mod = es_catalogue_model(*next, model);
            es_matrix *m = NULL;
            es_err why = {0};
            const es_matrix *have = es_catalogue_matrix(*next, model, matrix);
            if (mod && !mod->user) {
                es_warn("uploads.dir: %s not restored: the configuration defines model \"%s\"", key, model);
            } else if (have && same_matrix(json_object_get(app->records, key), rec)) {
                es_labels *labels = rebuild_labels(dir, rec, have); /* only the labels changed */
                step(next, es_catalogue_with_labels(*next, model, matrix, labels));
                es_labels_release(labels);
                changed++;
            } else if (rebuild(*next, dir, rec, &m, &why) != 0) {
                json_object_set_new(why_not, key, json_string(why.message));
                continue;
            } else {
                const json_t *created = json_object_get(rec, "created");
                step(next, es_catalogue_with(*next, model, matrix, m, get_str(rec, "description"),
                                             json_is_number(created) ? json_number_value(created) : 0));
                es_labels *labels = rebuild_labels(dir, rec, m);
                if (labels)
                    step(next, es_catalogue_with_labels(*next, model, matrix, labels));
                es_labels_release(labels);
                es_matrix_release(m);
                changed++;
            }
            json_object_set(app->records, key, rec);
            json_object_del(todo, key);
            progress++;
        }
    }
    /* the disk says these are something this daemon cannot build: not what they were */
    json_object_foreach(todo, key, rec) {
        const char *model = get_str(rec, "model"), *matrix = get_str(rec, "matrix");
        const es_model *mod = es_catalogue_model(*next, model);
        es_warn("uploads.dir: %s not restored: %s", key, get_str(why_not, key));
        if (mod && mod->user && es_catalogue_matrix(*next, model, matrix)) {
            step(next, es_catalogue_without(*next, model, matrix));
            changed++;
        }
        json_object_set(app->records, key, rec);
    }
    json_decref(todo);
    json_decref(why_not);
    return changed;
}

/* Bring the catalogue in line with the records on disk (write lock and a
 * flock held); publishes once if anything changed. Returns the changes. */
static size_t sync_records(es_app *app, const char *dir)
{
    json_t *disk = read_records(dir);
    es_catalogue *next = es_catalogue_retain(app->reg); /* stable: only writers change it, under write_lock */
    size_t changed = drop_gone(app, disk, &next) + take_new(app, dir, disk, &next);
    if (changed)
        es_app_publish(app, next);
    else
        es_catalogue_free(next);
    json_decref(disk);
    return changed;
}

/* ---------------------------------------------------------------- garbage */

/* Add the files rec and its bases name, and rec's labels, to the set `used`. */
static void note_files(json_t *used, const json_t *rec)
{
    if (get_str(rec, "labels"))
        json_object_set_new(used, get_str(rec, "labels"), json_true());
    for (; rec; rec = json_object_get(rec, "base"))
        if (get_str(rec, "file"))
            json_object_set_new(used, get_str(rec, "file"), json_true());
}

/* Remove from dir every temporary file (left by a writer killed halfway: they
 * exist only under the exclusive lock, which the caller holds) and, when used
 * is given, every content-addressed file it does not list. */
static void sweep(const char *dir, const json_t *used)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        bool temp = n[0] == '.' && strcmp(n, ".") != 0 && strcmp(n, "..") != 0;
        if (!temp && !(used && blob_name(n) && !json_object_get(used, n)))
            continue;
        char *path = es_asprintf("%s/%s", dir, n);
        if (unlink(path) == 0)
            es_info("uploads.dir: removed %s %s", temp ? "the stale temporary file" : "the unused file", path);
        free(path);
    }
    if (d)
        closedir(d);
}

/* Remove the files no record on disk names, and stale temporary files
 * (exclusive lock held). The records are read from disk, not from memory:
 * other daemons' records count. */
static void collect_garbage(const char *dir)
{
    json_t *disk = read_records(dir), *used = json_object();
    const char *key;
    json_t *rec;
    json_object_foreach(disk, key, rec) note_files(used, rec);
    char *rdir = es_asprintf("%s/" RECORDS, dir);
    sweep(rdir, NULL);
    sweep(dir, used);
    free(rdir);
    json_decref(used);
    json_decref(disk);
}

/* ---------------------------------------------------------------- writes */

/* See uploads.h. */
int es_persist_begin(es_app *app, es_err *err)
{
    const char *dir = store_dir(app);
    if (!dir)
        return 0;
    if (store_flock(app, dir, LOCK_EX, err) < 0)
        return -1;
    unsigned long long g = read_generation(dir);
    if (g != app->store_generation)
        sync_records(app, dir);
    app->store_generation = g;
    return 0;
}

/* See uploads.h. */
void es_persist_end(es_app *app)
{
    const char *dir = store_dir(app);
    if (dir && app->store_lock_fd >= 0)
        flock(app->store_lock_fd, LOCK_UN);
}

/* See uploads.h. */
const json_t *es_persist_record(const es_app *app, const char *id)
{
    return app->records ? json_object_get(app->records, id) : NULL;
}

/* The record of it (a new reference). */
static json_t *record_of(const es_persist_item *it)
{
    json_t *rec = json_pack("{s:i, s:s, s:s, s:s, s:f}", "format", RECORD_FORMAT, "model", it->model, "matrix",
                            it->matrix, "description", it->description, "created", it->created);
    if (it->entry) {
        json_object_set(rec, "entry", (json_t *)it->entry);
        if (it->base)
            json_object_set(rec, "base", (json_t *)it->base);
    } else {
        json_object_set_new(rec, "file", json_string(it->file_sha256));
        json_object_set_new(rec, "tensor", json_string(it->tensor));
        json_object_set_new(rec, "model_axis", it->axis_stated ? json_string(es_axis_name(it->axis)) : json_null());
    }
    return rec;
}

/* See uploads.h. */
int es_persist_put(es_app *app, const es_persist_item *it, es_err *err)
{
    const char *dir = store_dir(app);
    if (!dir)
        return 0;
    if (bump_generation(app, dir, err) < 0)
        return -1;
    int rc = 0;
    if (it->fd >= 0 && !it->entry) {
        struct stat st; /* content-addressed: the same bytes are kept once, if the file holds them */
        if (fstat(it->fd, &st) != 0 || !content_intact(dir, it->file_sha256, st.st_size))
            rc = replace_file(dir, it->file_sha256, fill_copy, &it->fd, err);
    }
    json_t *rec = record_of(it);
    char *rdir = es_asprintf("%s/" RECORDS, dir), *name = record_name(it->model, it->matrix);
    if (rc == 0)
        rc = replace_file(rdir, name, fill_json, rec, err);
    if (rc == 0) {
        char *key = record_key(it->model, it->matrix);
        json_object_set(app->records, key, rec);
        free(key);
    }
    collect_garbage(dir); /* the file the record replaced, or a copy a failed record left unnamed */
    free(rdir);
    free(name);
    json_decref(rec);
    return rc;
}

/* See uploads.h. */
int es_persist_delete(es_app *app, const char *model, const char *matrix, es_err *err)
{
    const char *dir = store_dir(app);
    if (!dir)
        return 0;
    if (bump_generation(app, dir, err) < 0)
        return -1;
    char *rdir = es_asprintf("%s/" RECORDS, dir), *name = record_name(model, matrix);
    char *path = es_asprintf("%s/%s", rdir, name);
    int rc = 0;
    if (unlink(path) != 0 && errno != ENOENT)
        rc = store_fail(err, "remove", path);
    else if (sync_dir(rdir) != 0)
        rc = store_fail(err, "sync", rdir);
    if (rc == 0) {
        char *key = record_key(model, matrix);
        json_object_del(app->records, key);
        free(key);
        collect_garbage(dir);
    }
    free(path);
    free(name);
    free(rdir);
    return rc;
}

/* See uploads.h. */
int es_persist_labels(es_app *app, const char *model, const char *matrix, const es_labels *labels, es_err *err)
{
    const char *dir = store_dir(app);
    if (!dir)
        return 0;
    char *key = record_key(model, matrix);
    const json_t *old = json_object_get(app->records, key);
    if (!old) {
        free(key);
        return es_fail(err, ES_E_IO, "uploads.dir", "the matrix %s/%s has no record in the upload directory",
                       model, matrix);
    }
    int rc = bump_generation(app, dir, err);
    if (rc == 0 && labels) {
        size_t len = 0;
        char *text = es_labels_text(labels, ES_LABELS_JSON, false, &len); /* what the name hashes */
        if (!content_intact(dir, labels->sha256, (off_t)len)) /* the same labels are kept once, if intact */
            rc = replace_file(dir, labels->sha256, fill_text, &(text_arg){text, len}, err);
        free(text);
    }
    json_t *rec = json_deep_copy(old);
    if (labels)
        json_object_set_new(rec, "labels", json_string(labels->sha256));
    else
        json_object_del(rec, "labels");
    char *rdir = es_asprintf("%s/" RECORDS, dir), *name = record_name(model, matrix);
    if (rc == 0)
        rc = replace_file(rdir, name, fill_json, rec, err);
    if (rc == 0)
        json_object_set(app->records, key, rec);
    collect_garbage(dir); /* the labels replaced, or a copy a failed record left unnamed */
    free(rdir);
    free(name);
    free(key);
    json_decref(rec);
    return rc;
}

/* ---------------------------------------------------------------- start and poll */

/* The record of a legacy manifest entry; a view of a user matrix migrated
 * before it gets that matrix's record as its base. */
static json_t *legacy_record(const json_t *e, const json_t *migrated)
{
    json_t *rec = json_deep_copy(e);
    json_object_set_new(rec, "format", json_integer(RECORD_FORMAT));
    const char *view = get_str(json_object_get(e, "entry"), "view");
    if (view) {
        char *target = strchr(view, '/') ? es_strdup(view) : record_key(get_str(e, "model"), view);
        char *self = record_key(get_str(e, "model"), get_str(e, "matrix"));
        json_t *base = json_object_get(migrated, target);
        if (base && strcmp(target, self) != 0)
            json_object_set(rec, "base", base);
        free(target);
        free(self);
    }
    return rec;
}

/* Turn DIR/manifest.json (the single-file format) into records, then remove
 * it (exclusive lock held). Views are migrated after the other entries, in
 * the manifest's order, each on the record its base has at that point. */
static int migrate_manifest(const char *dir, es_err *err)
{
    char *path = es_asprintf("%s/" LEGACY_MANIFEST, dir), *rdir = es_asprintf("%s/" RECORDS, dir);
    json_error_t jerr;
    json_t *old = access(path, F_OK) == 0 ? load_json(path, &jerr) : NULL;
    int rc = access(path, F_OK) == 0 && !old
                 ? es_fail(err, ES_E_IO, "uploads.dir", "%s: line %d: %s", path, jerr.line, jerr.text)
                 : 0;
    json_t *list = json_object_get(old, "matrices"), *migrated = json_object();
    for (int views = 0; rc == 0 && views < 2; views++)
        for (size_t i = 0; rc == 0 && i < json_array_size(list); i++) {
            json_t *e = json_array_get(list, i);
            if (!json_is_object(e) || (get_str(json_object_get(e, "entry"), "view") != NULL) != views)
                continue;
            json_t *rec = legacy_record(e, migrated);
            if (record_ok(rec, 0)) {
                char *key = record_key(get_str(rec, "model"), get_str(rec, "matrix"));
                char *name = record_name(get_str(rec, "model"), get_str(rec, "matrix"));
                json_object_set(migrated, key, rec);
                rc = replace_file(rdir, name, fill_json, rec, err);
                free(key);
                free(name);
            }
            json_decref(rec);
        }
    if (old && rc == 0 && (unlink(path) != 0 || sync_dir(dir) != 0))
        rc = store_fail(err, "remove", path);
    if (old && rc == 0)
        es_info("uploads.dir: %zu entries of %s moved to records", json_object_size(migrated), path);
    json_decref(migrated);
    json_decref(old);
    free(path);
    free(rdir);
    return rc;
}

/* mkdir that accepts an existing directory; fails like store_fail. */
static int make_dir(const char *path, es_err *err)
{
    return mkdir(path, 0700) != 0 && errno != EEXIST ? store_fail(err, "create", path) : 0;
}

/* See uploads.h. */
int es_persist_restore(es_app *app, es_err *err)
{
    const char *configured = app->reg->uploads.dir;
    if (!configured || !*configured)
        return 0;
    app->records = json_object();
    size_t restored = 0;
    char *dir = es_strdup(store_dir(app)); /* the publish below replaces app->reg */
    char *rdir = es_asprintf("%s/" RECORDS, dir);
    int rc = make_dir(dir, err) < 0 || make_dir(rdir, err) < 0 ? -1 : store_flock(app, dir, LOCK_EX, err);
    if (rc == 0) {
        rc = migrate_manifest(dir, err);
        collect_garbage(dir);
        app->store_generation = read_generation(dir);
        restored = rc == 0 ? sync_records(app, dir) : 0;
        flock(app->store_lock_fd, LOCK_UN);
    }
    if (rc == 0)
        es_info("uploads.dir %s: %zu user matrices restored", dir, restored);
    free(rdir);
    free(dir);
    return rc;
}

/* See uploads.h. */
void es_persist_poll(es_app *app)
{
    pthread_mutex_lock(&app->write_lock);
    const char *dir = store_dir(app);
    es_err err = {0};
    if (dir && read_generation(dir) != app->store_generation && store_flock(app, dir, LOCK_SH, &err) == 0) {
        app->store_generation = read_generation(dir);
        size_t changed = sync_records(app, dir);
        flock(app->store_lock_fd, LOCK_UN);
        if (changed) {
            atomic_fetch_add(&app->metrics.store_syncs, 1);
            es_info("uploads.dir: %zu user matrices changed by another daemon", changed);
        }
    }
    pthread_mutex_unlock(&app->write_lock);
}
