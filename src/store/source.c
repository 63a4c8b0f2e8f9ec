/* Loading matrices from files: an es_source maps a file once, validates its
 * format once (at the first load) and hashes it once, so that a configuration
 * taking many tensors from one safetensors file does that work once per file,
 * not once per tensor. es_matrix_load is the one-off form.
 *
 * A little-endian float64 tensor in C order (.npy '<f8', safetensors F64) at
 * an 8-aligned offset is not converted: its matrix borrows the file's bytes
 * through a read-only map of its own (PROT_READ, MAP_PRIVATE) of the tensor's
 * pages, owned by the matrix's buffer and released with its last reference
 * (the catalogue's, a cached decomposition's, a request's), never by the
 * source. Matrix buffers are immutable (const; centring, views and derived
 * data make new arrays), and the map is read-only, so nothing writes to the
 * file's pages. Other dtypes, big-endian storage and Fortran order convert.
 *
 * A converted tensor's sha256 and its file's (identity and cache keys) are
 * computed on two threads beside the conversion; a tensor used in place is
 * served once its values are checked finite, its sha256s computed afterwards
 * in the background (digest.c, started by es_source_free). With a cache_dir
 * they are kept in a record keyed by the file's device, inode, size and
 * modification and status-change times (tcache.c): a restart with an
 * unchanged file maps it without reading it. */
#include "store/internal.h"
#include "embedscope/blas.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

struct es_source {
    char *path;              /* as opened, for messages */
    es_file *file;           /* the bytes, mapped at the first miss (es_source_open_fd: at open) */
    int fd;                  /* open while the source lives (tensors are mapped from it); -1: open_fd's */
    es_file_stamp stamp;     /* the file's at open */
    char *cache_dir;         /* converted copies and records (tcache.c), NULL: none */
    size_t cache_hits;       /* tensors whose record was in cache_dir so far */
    size_t in_place;         /* tensors mapped from the file itself so far */
    bool copied;             /* read into memory, not mapped (remote_fs): nothing in place */
    bool npy;                /* .npy (one unnamed array), else safetensors */
    es_tensor *npy_array;    /* .npy: the parsed array, after the first load */
    es_st_layout *layout;    /* safetensors: the validated header, after the first load */
    char file_sha256[65];    /* "" until the file is first hashed beside a conversion */
    es_digest_job *job;      /* the sha256s of tensors mapped in place, started by es_source_free */
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

/* See store.h: open the file and take its stamp; it is mapped only when a
 * tensor's record is not in cache_dir (or there is no cache_dir). */
int es_source_open_cached(const char *path, const char *cache_dir, es_source **out, es_err *err)
{
    int fd;
    es_file_stamp stamp;
    if (es_file_open(path, &fd, &stamp, err) != 0)
        return -1;
    unsigned char head[6];
    ssize_t got = pread(fd, head, sizeof head, 0);
    es_source *s = source_of(path, head, got > 0 ? (size_t)got : 0);
    s->fd = fd;
    s->stamp = stamp;
    s->cache_dir = cache_dir ? es_strdup(cache_dir) : NULL;
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
    if (s->job)
        es_digest_job_start(s->job, s->file_sha256);
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

/* See store.h. */
size_t es_source_in_place(const es_source *s)
{
    return s->in_place;
}

/* Whether fd lies on a filesystem another host (or a user-space server) can
 * change under the daemon: NFS, SMB/CIFS, FUSE, 9p, Ceph, AFS. Such a file is
 * read into memory (copy-on-load) instead of mapped: a truncation there would
 * raise SIGBUS in a map, and such servers do not always keep a removed
 * file's pages for the processes that map it. */
static bool remote_fs(int fd)
{
    static const unsigned long magic[] = {
        0x6969,     /* NFS */
        0xFF534D42, /* CIFS */
        0xFE534D42, /* SMB2 */
        0x517B,     /* SMB */
        0x65735546, /* FUSE */
        0x01021997, /* 9p (V9FS) */
        0x00C36400, /* Ceph */
        0x5346414F, /* AFS */
    };
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0)
        return false;
    for (size_t i = 0; i < sizeof magic / sizeof *magic; i++)
        if ((unsigned long)fs.f_type == magic[i])
            return true;
    return false;
}

/* The file's bytes at the first call: mapped (read into memory on a remote
 * filesystem, remote_fs), after checking that its size is still the stamp's
 * (a file truncated since it was opened is an error, not a SIGBUS). ES_E_IO
 * naming the path: it changed size, or as es_file_map_open / es_file_read. */
static int map_source(es_source *s, es_err *err)
{
    if (s->file)
        return 0;
    es_file_stamp now;
    if (es_file_stamp_of(s->fd, &now) != 0)
        return es_fail(err, ES_E_IO, "file", "%s: cannot stat: %s", s->path, strerror(errno));
    if (now.size != s->stamp.size)
        return es_fail(err, ES_E_IO, "file", "%s: changed size since it was opened (%ju bytes, now %ju)", s->path,
                       (uintmax_t)s->stamp.size, (uintmax_t)now.size);
    s->copied = remote_fs(s->fd);
    return s->copied ? es_file_read(s->fd, s->path, &s->stamp, &s->file, err)
                     : es_file_map_open(s->fd, s->path, &s->stamp, &s->file, err);
}

/* Whether the stamp taken at open may be recorded now that the file's bytes
 * were hashed: it is unchanged and its last change is at least
 * ES_TC_SETTLE_NS old. */
static bool stamp_trusted(const es_source *s)
{
    es_file_stamp after;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    return es_file_stamp_of(s->fd, &after) == 0 && after.dev == s->stamp.dev && after.ino == s->stamp.ino &&
           after.size == s->stamp.size && after.mtime_ns == s->stamp.mtime_ns &&
           after.ctime_ns == s->stamp.ctime_ns && now_ns - s->stamp.ctime_ns >= ES_TC_SETTLE_NS;
}

/* A sha256 computed on a thread of its own (inline when none can start). */
typedef struct hash_job {
    const void *data;
    size_t len;
    char *out; /* 65 bytes */
    pthread_t thread;
    bool started;
} hash_job;

static void *hash_run(void *arg)
{
    hash_job *j = arg;
    es_sha256_hex(j->data, j->len, j->out);
    return NULL;
}

static void hash_start(hash_job *j, const void *data, size_t len, char *out)
{
    *j = (hash_job){.data = data, .len = len, .out = out};
    j->started = pthread_create(&j->thread, NULL, hash_run, j) == 0;
    if (!j->started)
        hash_run(j);
}

static void hash_join(hash_job *j)
{
    if (j->started)
        pthread_join(j->thread, NULL);
    j->started = false;
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

/* Whether t's matrix can borrow the file's bytes: little-endian float64 on a
 * little-endian host, row-major storage (C order, or one row or column),
 * 8-aligned, from a file the source holds open. */
static bool in_place_ok(const es_source *s, const es_tensor *t)
{
    size_t r, c;
    es_tensor_dims(t, &r, &c);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return s->fd >= 0 && !s->copied && t->dtype == ES_F64 && !t->big_endian && (!t->fortran_order || r == 1 || c == 1) &&
           t->offset % 8 == 0 && t->nbytes > 0;
#else
    (void)s;
    (void)t;
    return false;
#endif
}

/* The matrix of rows x cols doubles at offset of the source's file, in a map
 * of their own that the matrix owns; ES_E_IO when mmap fails. */
static int map_in_place(es_source *s, const char *id, size_t offset, size_t rows, size_t cols, es_axis axis,
                        const es_provenance *prov, es_matrix **out, es_err *err)
{
    void *base;
    size_t len;
    const void *data;
    if (es_file_map_range(s->fd, s->path, offset, rows * cols * sizeof(double), &base, &len, &data, err) != 0)
        return -1;
    *out = es_matrix_from_map(id, data, ES_ELEM_F64, base, len, rows, cols, axis, prov);
    s->in_place++;
    return 0;
}

/* The matrix of tensor from the cache directory's record: its converted copy,
 * or the file's own bytes for an in_place record. True with *out when the
 * record of the source's stamp (and its copy) are there and whole. Never fails
 * (a bad file is logged and deleted by es_tc_lookup; a map that fails is
 * logged, and the tensor loaded from the file). */
static bool load_cached(es_source *s, const char *key, const char *id, const char *tensor, es_axis axis,
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
    if (rec.in_place) {
        es_err err;
        es_file_stamp now;
        if (remote_fs(s->fd) || es_file_stamp_of(s->fd, &now) != 0 || now.size != s->stamp.size)
            return false; /* read (remote_fs), or failed with its reason, by the file's own path */
        if (rec.offset + rec.rows * rec.cols * 8 > s->stamp.size ||
            map_in_place(s, id, (size_t)rec.offset, (size_t)rec.rows, (size_t)rec.cols, axis, &prov, out, &err) != 0) {
            es_warn("cache_dir: %s: cannot map tensor '%s' from its record: %s", s->path, prov.tensor,
                    rec.offset + rec.rows * rec.cols * 8 > s->stamp.size ? "past the file's end" : err.message);
            return false;
        }
        return true;
    }
    *out = es_matrix_from_map(id, data, (es_elem)rec.elem, base, len, (size_t)rec.rows, (size_t)rec.cols, axis, &prov);
    return true;
}

/* The provenance of tensor t of s (sha256 left for the caller). */
static es_provenance provenance_of(const es_source *s, const es_tensor *t, const char *source_name)
{
    return (es_provenance){
        .source = (char *)(source_name ? source_name : s->file->path),
        .tensor = t->name,
        .dtype = (char *)t->descr,
        .shape = {t->shape[0], t->shape[1]},
        .file_sha256 = (char *)s->file_sha256,
        .generator = "",
        .view = "",
    };
}

/* The record of t's matrix (rows x cols of elem) without its sha256s. */
static es_tc_record record_of(const es_tensor *t, size_t rows, size_t cols, es_elem elem, bool in_place)
{
    es_tc_record rec;
    memset(&rec, 0, sizeof rec);
    snprintf(rec.descr, sizeof rec.descr, "%s", t->descr);
    rec.shape[0] = t->shape[0];
    rec.shape[1] = t->shape[1];
    rec.rows = rows;
    rec.cols = cols;
    rec.fortran_order = t->fortran_order;
    rec.elem = elem;
    rec.in_place = in_place;
    rec.offset = in_place ? t->offset : 0;
    return rec;
}

/* A tensor of another storage than the file's little-endian float64 in C
 * order: converted, its whole-file sha256 computed once, on a thread beside
 * the tensor's own sha256 and the conversion; then its record and converted
 * copy are stored (key: with a cache_dir) for the next start. */
static int load_converted(es_source *s, const char *key, const char *id, const es_tensor *t, es_axis axis,
                          const char *source_name, es_matrix **out, es_err *err)
{
    hash_job file_job, tensor_job;
    bool file_hash = !s->file_sha256[0];
    if (file_hash)
        hash_start(&file_job, s->file->bytes, s->file->size, s->file_sha256);
    char tensor_sha[65];
    hash_start(&tensor_job, s->file->bytes + t->offset, t->nbytes, tensor_sha);
    void *data = NULL;
    es_elem elem = ES_ELEM_F64;
    size_t rows, cols;
    int rc = es_tensor_convert(t, &data, &elem, &rows, &cols, err);
    hash_join(&tensor_job);
    if (file_hash)
        hash_join(&file_job);
    if (rc != 0)
        return rc;
    es_provenance prov = provenance_of(s, t, source_name);
    memcpy(prov.sha256, tensor_sha, sizeof prov.sha256);
    *out = es_matrix_from_elems(id, data, elem, rows, cols, axis, &prov);
    if (key) {
        es_tc_record rec = record_of(t, rows, cols, elem, false);
        memcpy(rec.file_sha256, s->file_sha256, sizeof rec.file_sha256);
        memcpy(rec.sha256, prov.sha256, sizeof rec.sha256);
        es_tc_store(s->cache_dir, key, stamp_trusted(s), &rec, data);
    }
    return 0;
}

/* One part of the finiteness check: the first non-finite of its n values. */
typedef struct finite_part {
    const unsigned char *p;
    size_t n, first;
    pthread_t thread;
    bool started;
} finite_part;

static void *finite_run(void *arg)
{
    finite_part *f = arg;
    f->first = es_f64_first_nonfinite(f->p, f->n);
    return NULL;
}

#define FINITE_PARTS_MAX 16
#define FINITE_PART_MIN ((size_t)1 << 18) /* values a part at least (2 MiB) */

/* es_f64_first_nonfinite of n values at p on up to the cores the process may
 * use (each part a contiguous range, the first bad index over all of them):
 * the one pass over a mapped file before it is served, bound by memory and
 * page faults, so it scales with cores. Parts whose thread cannot start run
 * here. */
static size_t first_nonfinite_parallel(const unsigned char *p, size_t n)
{
    size_t parts = es_cores_available();
    parts = parts > FINITE_PARTS_MAX ? FINITE_PARTS_MAX : parts;
    if (parts > n / FINITE_PART_MIN)
        parts = n / FINITE_PART_MIN;
    if (parts <= 1)
        return es_f64_first_nonfinite(p, n);
    finite_part part[FINITE_PARTS_MAX];
    size_t step = (n + parts - 1) / parts;
    for (size_t i = 0; i < parts; i++) {
        size_t a = i * step, b = a + step < n ? a + step : n;
        part[i] = (finite_part){.p = p + 8 * a, .n = b - a};
        part[i].started = i > 0 && pthread_create(&part[i].thread, NULL, finite_run, &part[i]) == 0;
    }
    for (size_t i = 0; i < parts; i++)
        if (!part[i].started)
            finite_run(&part[i]);
    size_t first = n;
    for (size_t i = 0; i < parts; i++) {
        if (part[i].started)
            pthread_join(part[i].thread, NULL);
        if (part[i].first < part[i].n && first == n)
            first = i * step + part[i].first;
    }
    return first;
}

/* A little-endian float64 C-order tensor: checked for non-finite values and
 * mapped from the file in place, served at once; its sha256s (and, with a
 * cache_dir, its record) come later, from the source's digest job (digest.c),
 * started when the source is freed. */
static int load_in_place(es_source *s, const char *key, const char *id, const es_tensor *t, es_axis axis,
                         const char *source_name, es_matrix **out, es_err *err)
{
    size_t rows, cols;
    es_tensor_dims(t, &rows, &cols);
    size_t bad = first_nonfinite_parallel(s->file->bytes + t->offset, rows * cols);
    if (bad != rows * cols)
        return es_tensor_nonfinite_fail(t, bad, err);
    es_provenance prov = provenance_of(s, t, source_name);
    prov.file_sha256 = "";
    if (map_in_place(s, id, t->offset, rows, cols, axis, &prov, out, err) != 0)
        return -1;
    if (!s->job)
        s->job = es_digest_job_new(s->fd, s->path, &s->stamp, s->cache_dir);
    es_digest *d = es_digest_new(&s->stamp, t->offset);
    es_tc_record rec = record_of(t, rows, cols, ES_ELEM_F64, true);
    es_digest_job_add(s->job, d, t->offset, t->nbytes, key, &rec);
    (*out)->digest = d;
    return 0;
}

/* Load one tensor (see store.h for the failures): from the cache
 * directory's record when the file's stamp has one there, else from the file,
 * mapped and validated at the first such load (load_converted, load_in_place). */
int es_source_load_tensor(es_source *s, const char *id, const char *tensor, es_axis axis,
                          const char *source_name, es_matrix **out, es_err *err)
{
    char *key = s->cache_dir && s->fd >= 0 ? es_tc_record_key(&s->stamp, s->npy, tensor) : NULL;
    if (key && load_cached(s, key, id, tensor, axis, source_name, out)) {
        free(key);
        s->cache_hits++;
        return 0;
    }
    es_tensor *t;
    bool owned;
    if ((s->fd >= 0 && map_source(s, err) != 0) || find_tensor(s, tensor, &t, &owned, err) != 0) {
        free(key);
        return -1;
    }
    int rc = in_place_ok(s, t) ? load_in_place(s, key, id, t, axis, source_name, out, err)
                               : load_converted(s, key, id, t, axis, source_name, out, err);
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
