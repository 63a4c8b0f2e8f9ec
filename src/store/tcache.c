/* Converted tensors on disk (server.cache_dir), so that a restart with
 * unchanged data files neither reads, hashes nor converts them again.
 *
 * Two kinds of files, both "checked files" (below):
 *   - a record per (file stamp, format, tensor): the file's and the tensor's
 *     sha256, dtype, shape. Its name is the sha256 of its key, which holds the
 *     file's device, inode, size, modification and status-change times (ns).
 *     A file whose stamp is unchanged is taken to hold the same bytes: its
 *     record is trusted instead of hashing the file again. Any write changes
 *     the status-change time (which no system call can set back), so the one
 *     way to get a stale record is two writes within one timestamp tick; the
 *     loader therefore writes no record for a file changed less than
 *     ES_TC_SETTLE_NS before it was read (source.c).
 *   - the converted copy, content-addressed: named by the sha256 of the
 *     tensor's sha256, dtype, storage order and shape, so a touched file with
 *     the same bytes (a new record) finds its copy again, and read into
 *     private read-only memory when used (read_private: never a map of the
 *     file, which would crash on a truncation and change with an edit).
 *     F64 tensors are kept as doubles (NAME.f64), F16/BF16/F32 ones as floats
 *     (NAME.f32: exact, half the bytes), the element type the matrix keeps.
 *
 * A little-endian float64 C-order tensor has no copy: the matrix
 * maps the file's own bytes (source.c), and its record (in_place, with the
 * tensor's offset) only spares hashing and checking the file again. Records
 * grew by these fields; one written before them has the wrong size and is
 * refused as inconsistent (logged, deleted, rebuilt once).
 *
 * Names do not depend on the format version, the header does: a file of an
 * older format sits under the name a newer daemon looks up and is rejected as
 * foreign (logged, deleted, rebuilt). Format 1 kept every tensor as doubles;
 * the .f64 copy format 1 wrote for a float tensor is deleted when its .f32
 * copy is written, so an upgraded cache_dir does not keep both.
 *
 * Checked file layout (host order): magic "ESTCACHE", u32 version, u32 kind,
 * u64 key_len, u64 payload_len (a 32-byte header), the key, zeros up to a
 * multiple of 8, the payload (8-aligned), then u32 crc32 of every byte before
 * it and u32 zero. Every byte is verified before a file is used; a bad one is
 * logged, deleted and rebuilt from the source, never served. The files are
 * renamed into place without fsync: after a crash a file may be short or hold
 * garbage, which its checksum rejects. */
#include "store/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define FORMAT_VERSION 2u
#define NAME_VERSION 1u
enum { KIND_RECORD = 1, KIND_DOUBLES = 2, KIND_FLOATS = 3 };

typedef struct header {
    char magic[8];
    uint32_t version, kind;
    uint64_t key_len, payload_len;
} header;

typedef struct trailer {
    uint32_t crc, zero;
} trailer;

/* Bytes of the key and its padding to a multiple of 8. */
static size_t padded(size_t key_len) { return (key_len + 7) & ~(size_t)7; }

/* The name suffix of a kind of checked file. */
static const char *kind_suffix(int kind)
{
    return kind == KIND_RECORD ? "tensor" : kind == KIND_FLOATS ? "f32" : "f64";
}

/* The kind of file holding a record's converted copy. */
static int copy_kind(const es_tc_record *r)
{
    return r->elem == ES_ELEM_F32 ? KIND_FLOATS : KIND_DOUBLES;
}

/* The path of the checked file of `kind` for key in dir. Caller frees. */
static char *file_path(const char *dir, int kind, const char *key)
{
    char *text = es_asprintf("embedscope-%s-v%u\n%s", kind_suffix(kind), NAME_VERSION, key);
    char hex[65];
    es_sha256_hex(text, strlen(text), hex);
    free(text);
    return es_asprintf("%s/%s.%s", dir, hex, kind_suffix(kind));
}

/* See internal.h. */
char *es_tc_record_key(const es_file_stamp *st, bool npy, const char *tensor)
{
    return es_asprintf("%s %ju:%ju %ju %jd %jd %s", npy ? "npy" : "safetensors", (uintmax_t)st->dev,
                       (uintmax_t)st->ino, (uintmax_t)st->size, (intmax_t)st->mtime_ns, (intmax_t)st->ctime_ns,
                       tensor ? tensor : "");
}

/* The content key of a record's converted copy. Caller frees. */
static char *copy_key(const es_tc_record *r)
{
    return es_asprintf("%s %s %s %jux%ju", r->sha256, r->descr, r->fortran_order ? "F" : "C",
                       (uintmax_t)r->shape[0], (uintmax_t)r->shape[1]);
}

/* The whole regular file at path read into private anonymous memory, left
 * read-only: 1 with (*base, *len) (munmap frees it), 0 when there is none, -1
 * with the reason in why. Read, not mapped: a map of the file itself would
 * kill the daemon with SIGBUS when someone truncates the file, and would show
 * an edit made in place after the checksum was verified; this copy cannot
 * change once verified. Opened non-blocking and refused unless regular, so a
 * FIFO (or a device) in cache_dir is rejected at once instead of blocking. */
static int read_private(const char *path, void **base, size_t *len, char *why, size_t why_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        snprintf(why, why_len, "%s", strerror(errno));
        return errno == ENOENT ? 0 : -1;
    }
    struct stat st;
    const char *bad = fstat(fd, &st) != 0 ? strerror(errno)
                    : !S_ISREG(st.st_mode) ? "not a regular file"
                    : st.st_size <= 0      ? "empty"
                                           : NULL;
    if (bad) {
        snprintf(why, why_len, "%s", bad);
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size, got = 0;
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    while (map != MAP_FAILED && got < size) {
        ssize_t n = pread(fd, (char *)map + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (map == MAP_FAILED || got != size) {
        snprintf(why, why_len, "%s (%zu bytes)", map == MAP_FAILED ? "no memory to read it" : "shorter than its size",
                 size);
        if (map != MAP_FAILED)
            munmap(map, size);
        return -1;
    }
    mprotect(map, size, PROT_READ);
    *base = map;
    *len = size;
    return 1;
}

/* The checked file at path, read (read_private): 1 with the copy (*base,
 * *len) and its payload (*payload, *payload_len) when it is whole and was
 * written for kind and key; 0 when there is none; -1 with the reason in why
 * when it is there but unreadable, truncated, corrupt or foreign. */
static int map_checked(const char *path, int kind, const char *key, void **base, size_t *len,
                       const unsigned char **payload, size_t *payload_len, char *why, size_t why_len)
{
    void *map;
    size_t size;
    int rc = read_private(path, &map, &size, why, why_len);
    if (rc != 1)
        return rc;
    const unsigned char *b = map;
    header h;
    trailer t;
    size_t key_len = strlen(key);
    bool ok = size >= sizeof h + sizeof t;
    if (ok) {
        memcpy(&h, b, sizeof h);
        memcpy(&t, b + size - sizeof t, sizeof t);
        ok = h.key_len == key_len && size >= sizeof h + padded(key_len) + sizeof t &&
             h.payload_len == size - sizeof h - padded(key_len) - sizeof t;
        if (!ok)
            snprintf(why, why_len, "truncated or foreign (%zu bytes)", size);
    } else {
        snprintf(why, why_len, "truncated (%zu bytes)", size);
    }
    if (ok && (t.zero != 0 || crc32_z(0, b, size - sizeof t) != t.crc)) {
        snprintf(why, why_len, "checksum mismatch (corrupt or truncated)");
        ok = false;
    }
    if (ok && (memcmp(h.magic, "ESTCACHE", 8) != 0 || h.version != FORMAT_VERSION || h.kind != (uint32_t)kind ||
               memcmp(b + sizeof h, key, key_len) != 0)) {
        snprintf(why, why_len, "written for another key or format");
        ok = false;
    }
    if (!ok) {
        munmap(map, size);
        return -1;
    }
    *base = map;
    *len = size;
    *payload = b + sizeof h + padded(key_len);
    *payload_len = (size_t)h.payload_len;
    return 1;
}

/* Log why the file at path is refused and delete it. */
static void reject(const char *path, const char *why)
{
    es_warn("cache_dir: %s: %s; deleting it and reading the source again", path, why);
    if (unlink(path) != 0 && errno != ENOENT)
        es_warn("cache_dir: cannot delete %s: %s", path, strerror(errno));
}

/* A record that describes a converted matrix consistently: NUL-terminated
 * strings, a known element type, rows x cols = the stored shape, a size that
 * cannot overflow. */
static bool record_sane(const es_tc_record *r)
{
    return memchr(r->file_sha256, 0, sizeof r->file_sha256) && memchr(r->sha256, 0, sizeof r->sha256) &&
           memchr(r->descr, 0, sizeof r->descr) && (r->elem == ES_ELEM_F32 || r->elem == ES_ELEM_F64) &&
           r->rows && r->cols && r->rows <= SIZE_MAX / 8 / r->cols &&
           r->shape[0] && r->shape[1] && r->rows * r->cols == r->shape[0] * r->shape[1] && r->reserved == 0 &&
           (r->in_place == 0 || (r->in_place == 1 && r->elem == ES_ELEM_F64 && r->offset % 8 == 0 &&
                                 r->offset <= UINT64_MAX - r->rows * r->cols * 8));
}

/* See internal.h. */
int es_tc_lookup(const char *dir, const char *key, es_tc_record *rec, const void **data, void **base, size_t *len)
{
    char why[160];
    char *path = file_path(dir, KIND_RECORD, key);
    void *rbase;
    size_t rlen, plen;
    const unsigned char *payload;
    int rc = map_checked(path, KIND_RECORD, key, &rbase, &rlen, &payload, &plen, why, sizeof why);
    if (rc == 1) {
        bool sane = plen == sizeof *rec;
        if (sane) {
            memcpy(rec, payload, sizeof *rec);
            sane = record_sane(rec);
        }
        munmap(rbase, rlen);
        if (!sane) {
            snprintf(why, sizeof why, "inconsistent record");
            rc = -1;
        }
    }
    if (rc < 0)
        reject(path, why);
    free(path);
    if (rc != 1)
        return 0;
    if (rec->in_place) {
        *data = NULL;
        *base = NULL;
        *len = 0;
        return 1;
    }
    char *dkey = copy_key(rec);
    path = file_path(dir, copy_kind(rec), dkey);
    rc = map_checked(path, copy_kind(rec), dkey, base, len, &payload, &plen, why, sizeof why);
    if (rc == 1 && plen != rec->rows * rec->cols * es_elem_size(rec->elem)) {
        munmap(*base, *len);
        snprintf(why, sizeof why, "%zu bytes of %s for %ju x %ju", plen, kind_suffix(copy_kind(rec)),
                 (uintmax_t)rec->rows, (uintmax_t)rec->cols);
        rc = -1;
    }
    if (rc < 0)
        reject(path, why);
    free(dkey);
    free(path);
    if (rc != 1)
        return 0;
    *data = payload;
    return 1;
}

/* Write the checked file of kind/key with payload to path atomically (a
 * temporary file renamed into place); logs and returns -1 on failure. */
static int write_checked(const char *path, int kind, const char *key, const void *payload, size_t payload_len)
{
    size_t key_len = strlen(key);
    header h = {.magic = "ESTCACHE", .version = FORMAT_VERSION, .kind = (uint32_t)kind, .key_len = key_len,
                .payload_len = payload_len};
    static const char zeros[8];
    struct {
        const void *p;
        size_t len;
    } pieces[] = {{&h, sizeof h}, {key, key_len}, {zeros, padded(key_len) - key_len}, {payload, payload_len}};
    trailer t = {0, 0};
    for (size_t i = 0; i < sizeof pieces / sizeof *pieces; i++)
        t.crc = (uint32_t)crc32_z(t.crc, pieces[i].p, pieces[i].len);
    char *tmp = es_asprintf("%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = fd < 0 ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < sizeof pieces / sizeof *pieces; i++)
        rc = es_write_all(fd, pieces[i].p, pieces[i].len);
    if (rc == 0)
        rc = es_write_all(fd, &t, sizeof t);
    if (fd >= 0 && close(fd) != 0)
        rc = -1;
    if (rc == 0)
        rc = rename(tmp, path);
    if (rc != 0) {
        es_warn("cache_dir: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return rc;
}

/* Whether path holds a checked file of this format and kind, by its header
 * alone: the whole file is checked when it is used (a corrupt one is replaced
 * then), but one of an older format is rewritten now rather than at the next
 * start. False when it is absent, unreadable or short. */
static bool current_format(const char *path, int kind)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return false;
    header h;
    bool ok = pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && memcmp(h.magic, "ESTCACHE", 8) == 0 &&
              h.version == FORMAT_VERSION && h.kind == (uint32_t)kind;
    close(fd);
    return ok;
}

/* Delete the doubles format 1 kept of a float tensor (content key dkey), now
 * superseded by its floats; logs a failure other than there being none. */
static void drop_format1_doubles(const char *dir, const char *dkey)
{
    char *path = file_path(dir, KIND_DOUBLES, dkey);
    if (unlink(path) != 0 && errno != ENOENT)
        es_warn("cache_dir: cannot delete %s: %s", path, strerror(errno));
    free(path);
}

/* See internal.h. */
void es_tc_store(const char *dir, const char *key, bool trust_stamp, const es_tc_record *rec, const void *data)
{
    if (es_mkdir_p(dir, 0755) != 0) {
        es_warn("cache_dir: cannot create %s: %s", dir, strerror(errno));
        return;
    }
    if (rec->in_place) {
        if (trust_stamp) {
            char *path = file_path(dir, KIND_RECORD, key);
            write_checked(path, KIND_RECORD, key, rec, sizeof *rec);
            free(path);
        }
        return;
    }
    char *dkey = copy_key(rec), *path = file_path(dir, copy_kind(rec), dkey);
    bool have = current_format(path, copy_kind(rec));
    int rc = have ? 0
                  : write_checked(path, copy_kind(rec), dkey, data, rec->rows * rec->cols * es_elem_size(rec->elem));
    if (rc == 0 && !have && rec->elem == ES_ELEM_F32)
        drop_format1_doubles(dir, dkey);
    free(dkey);
    free(path);
    if (rc != 0 || !trust_stamp)
        return;
    path = file_path(dir, KIND_RECORD, key);
    write_checked(path, KIND_RECORD, key, rec, sizeof *rec);
    free(path);
}
