/* Loading matrices from files: an es_source maps a file once, validates its
 * format once (at the first load) and hashes it once, so that a configuration
 * taking many tensors from one safetensors file does that work once per file,
 * not once per tensor. es_matrix_load is the one-off form. */
#include "store/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct es_source {
    char *path;              /* as opened, for messages */
    es_file *file;           /* the bytes: read at open, or with a cache_dir at the first miss */
    int fd;                  /* with a cache_dir: open until the file is read; else -1 */
    es_file_stamp stamp;     /* with a cache_dir: the file's at open */
    char *cache_dir;         /* converted copies and records (tcache.c), NULL: none */
    bool trust_stamp;        /* the bytes read are the stamp's, settled long enough to record */
    size_t cache_hits;       /* tensors mapped from cache_dir so far */
    bool npy;                /* .npy (one unnamed array), else safetensors */
    es_tensor *npy_array;    /* .npy: the parsed array, after the first load */
    es_st_layout *layout;    /* safetensors: the validated header, after the first load */
    char file_sha256[65];    /* "" until the first successful load */
};

/* True if path ends with suffix. */
static bool ends_with(const char *path, const char *suffix)
{
    size_t n = strlen(path), k = strlen(suffix);
    return n >= k && strcmp(path + n - k, suffix) == 0;
}

/* A source over path, .npy when its name says so or by magic (the first
 * `len` bytes at head) unless the name ends in .safetensors. An empty file is
 * read as .npy too: no name or magic says otherwise, and its error then says
 * it is empty rather than asking for a safetensors tensor name. Cannot fail. */
static es_source *source_of(const char *path, const unsigned char *head, size_t len)
{
    bool npy_magic = len == 0 || (len >= 6 && memcmp(head, "\x93NUMPY", 6) == 0);
    es_source *s = es_calloc(1, sizeof *s);
    s->path = es_strdup(path);
    s->fd = -1;
    s->npy = ends_with(path, ".npy") || (!ends_with(path, ".safetensors") && npy_magic);
    return s;
}

/* Read path whole and decide its format (source_of). ES_E_IO as es_file_map. */
int es_source_open(const char *path, es_source **out, es_err *err)
{
    return es_source_open_cached(path, NULL, out, err);
}

/* See store.h: without a cache_dir, read the file now; with one, open it and
 * take its stamp, and read it only when a tensor is not in the cache. */
int es_source_open_cached(const char *path, const char *cache_dir, es_source **out, es_err *err)
{
    es_file *f;
    if (!cache_dir) {
        if (es_file_map(path, &f, err) != 0)
            return -1;
        *out = source_of(path, f->bytes, f->size);
        (*out)->file = f;
        return 0;
    }
    int fd;
    es_file_stamp stamp;
    if (es_file_open(path, &fd, &stamp, err) != 0)
        return -1;
    unsigned char head[6];
    ssize_t got = pread(fd, head, sizeof head, 0);
    es_source *s = source_of(path, head, got > 0 ? (size_t)got : 0);
    s->fd = fd;
    s->stamp = stamp;
    s->cache_dir = es_strdup(cache_dir);
    *out = s;
    return 0;
}

/* es_source_open of an open descriptor named `name`. ES_E_IO as es_file_map_fd. */
int es_source_open_fd(int fd, const char *name, es_source **out, es_err *err)
{
    es_file *f;
    if (es_file_map_fd(fd, name, &f, err) != 0)
        return -1;
    *out = source_of(name, f->bytes, f->size);
    (*out)->file = f;
    return 0;
}

/* Unmap and free the source and what it parsed (NULL is a no-op). */
void es_source_free(es_source *s)
{
    if (!s)
        return;
    es_tensor_free(s->npy_array);
    es_st_layout_free(s->layout);
    es_file_free(s->file);
    if (s->fd >= 0)
        close(s->fd);
    free(s->cache_dir);
    free(s->path);
    free(s);
}

/* See store.h. */
size_t es_source_cache_hits(const es_source *s)
{
    return s->cache_hits;
}

/* The file's bytes, read at the first call (cache_dir sources); whether its
 * stamp may be recorded is decided here: the stamp is unchanged after the read
 * and its last change is at least ES_TC_SETTLE_NS old. ES_E_IO as es_file_read. */
static int read_source(es_source *s, es_err *err)
{
    if (s->file)
        return 0;
    if (es_file_read(s->fd, s->path, &s->stamp, &s->file, err) != 0)
        return -1;
    es_file_stamp after;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    s->trust_stamp = es_file_stamp_of(s->fd, &after) == 0 && after.dev == s->stamp.dev && after.ino == s->stamp.ino &&
                     after.size == s->stamp.size && after.mtime_ns == s->stamp.mtime_ns &&
                     after.ctime_ns == s->stamp.ctime_ns &&
                     now_ns - s->stamp.ctime_ns >= ES_TC_SETTLE_NS;
    close(s->fd);
    s->fd = -1;
    return 0;
}

/* The tensor to load, in *t, and whether the caller must free it (*owned).
 * Validates the file on first use and keeps the result. ES_E_PARAM (param
 * "tensor") on a name given for .npy or missing for a valid safetensors file;
 * parser failures otherwise (a failed validation is not kept: the next call fails the same way). */
static int find_tensor(es_source *s, const char *tensor, es_tensor **t, bool *owned, es_err *err)
{
    const es_file *f = s->file;
    bool named = tensor && tensor[0];
    *owned = !s->npy;
    if (s->npy && named)
        return es_fail(err, ES_E_PARAM, "tensor", "%s: a .npy file holds one unnamed array, not '%s'",
                       f->path, tensor);
    if (s->npy) {
        if (!s->npy_array && es_npy_parse(f, &s->npy_array, err) != 0)
            return -1;
        *t = s->npy_array;
        return 0;
    }
    if (!s->layout && es_safetensors_validate(f, &s->layout, err) != 0)
        return -1; /* a broken file says so before any name is asked for */
    if (!named) {
        char *names = es_safetensors_name_list(s->layout);
        int rc = es_fail(err, ES_E_PARAM, "tensor", "%s: a safetensors file needs a tensor name; its tensors: %s",
                         f->path, names);
        free(names);
        return rc;
    }
    return es_safetensors_tensor(s->layout, tensor, t, err);
}

/* The matrix of tensor from the cache directory's converted copy: true with
 * *out when the record of the source's stamp and its doubles are there and
 * whole. Never fails (a bad file is logged and deleted by es_tc_lookup). */
static bool load_cached(const es_source *s, const char *key, const char *id, const char *tensor, es_axis axis,
                        const char *source_name, es_matrix **out)
{
    es_tc_record rec;
    const void *data;
    void *base;
    size_t len;
    if (!es_tc_lookup(s->cache_dir, key, &rec, &data, &base, &len))
        return false;
    es_provenance prov = {
        .source = (char *)(source_name ? source_name : s->path),
        .tensor = (char *)(tensor ? tensor : ""),
        .dtype = rec.descr,
        .shape = {(size_t)rec.shape[0], (size_t)rec.shape[1]},
        .file_sha256 = rec.file_sha256,
        .generator = "",
        .view = "",
    };
    memcpy(prov.sha256, rec.sha256, sizeof prov.sha256);
    *out = es_matrix_from_map(id, data, (es_elem)rec.elem, base, len, (size_t)rec.rows, (size_t)rec.cols, axis, &prov);
    return true;
}

/* Convert one tensor (see store.h for the failures): from the cache
 * directory's copy when the file's stamp has a record there, else from the
 * file, read and validated at the first such load, its whole-file sha256
 * computed once; then the copy is stored for the next start. */
int es_source_load_tensor(es_source *s, const char *id, const char *tensor, es_axis axis,
                          const char *source_name, es_matrix **out, es_err *err)
{
    char *key = s->cache_dir ? es_tc_record_key(&s->stamp, s->npy, tensor) : NULL;
    if (key && load_cached(s, key, id, tensor, axis, source_name, out)) {
        free(key);
        s->cache_hits++;
        return 0;
    }
    es_tensor *t;
    bool owned;
    if (read_source(s, err) != 0 || find_tensor(s, tensor, &t, &owned, err) != 0) {
        free(key);
        return -1;
    }
    void *data;
    es_elem elem;
    size_t rows, cols;
    int rc = es_tensor_convert(t, &data, &elem, &rows, &cols, err);
    if (rc == 0) {
        if (!s->file_sha256[0])
            es_sha256_hex(s->file->bytes, s->file->size, s->file_sha256);
        es_provenance prov = {
            .source = (char *)(source_name ? source_name : s->file->path),
            .tensor = t->name,
            .dtype = t->descr,
            .shape = {t->shape[0], t->shape[1]},
            .file_sha256 = s->file_sha256,
            .generator = "",
            .view = "",
        };
        es_sha256_hex(s->file->bytes + t->offset, t->nbytes, prov.sha256);
        if (key) {
            es_tc_record rec;
            memset(&rec, 0, sizeof rec);
            memcpy(rec.file_sha256, s->file_sha256, sizeof rec.file_sha256);
            memcpy(rec.sha256, prov.sha256, sizeof rec.sha256);
            snprintf(rec.descr, sizeof rec.descr, "%s", t->descr);
            rec.shape[0] = t->shape[0];
            rec.shape[1] = t->shape[1];
            rec.rows = rows;
            rec.cols = cols;
            rec.fortran_order = t->fortran_order;
            rec.elem = elem;
            es_tc_store(s->cache_dir, key, s->trust_stamp, &rec, data);
        }
        *out = es_matrix_from_elems(id, data, elem, rows, cols, axis, &prov);
    }
    if (owned)
        es_tensor_free(t);
    free(key);
    return rc;
}

/* One matrix from a file mapped for it alone; the map is released before
 * returning. Fails as es_source_open / es_source_load_tensor. */
int es_matrix_load(const char *id, const char *path, const char *tensor, es_axis axis,
                   es_matrix **out, es_err *err)
{
    es_source *s;
    if (es_source_open(path, &s, err) != 0)
        return -1;
    int rc = es_source_load_tensor(s, id, tensor, axis, NULL, out, err);
    es_source_free(s);
    return rc;
}
