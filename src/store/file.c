/* Whole files read into memory (or, for the daemon's own unnamed upload files,
 * mapped), and the element types the loaders know. */
#include "store/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a non-regular file is, for the message. */
static const char *kind_of(mode_t mode)
{
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket" : "not a plain file";
}

/* ES_E_IO (param "file") naming path, what failed and errno's text. */
static int io_fail(es_err *err, const char *path, const char *what)
{
    return es_fail(err, ES_E_IO, "file", "%s: cannot %s: %s", path, what, strerror(errno));
}

/* Open path read-only and check it is a regular file; *fd and its identity
 * in *stamp (see internal.h). Opened non-blocking so that a FIFO is refused at
 * once instead of blocking until a writer appears. ES_E_IO naming the path:
 * cannot open or stat (errno's text), not a regular file. */
int es_file_open(const char *path, int *fd, es_file_stamp *stamp, es_err *err)
{
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f < 0)
        return io_fail(err, path, "open");
    if (es_file_stamp_of(f, stamp) != 0) {
        int rc = io_fail(err, path, "stat");
        close(f);
        return rc;
    }
    if (!S_ISREG(stamp->mode)) {
        close(f);
        return es_fail(err, ES_E_IO, "file", "%s: not a regular file (%s)", path, kind_of(stamp->mode));
    }
    *fd = f;
    return 0;
}

/* fstat(fd) as a stamp; -1 with errno if fstat fails. */
int es_file_stamp_of(int fd, es_file_stamp *stamp)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    *stamp = (es_file_stamp){.dev = (uint64_t)st.st_dev, .ino = (uint64_t)st.st_ino, .size = (uint64_t)st.st_size,
                             .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                             .ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec,
                             .mode = st.st_mode};
    return 0;
}

/* Read the whole of the regular file fd (opened by es_file_open with *stamp,
 * at offset 0; fd stays the caller's) into memory. Read, not mapped: a mapped
 * file truncated by someone else while it is parsed kills the process with
 * SIGBUS; a read sees a short count (and the whole file is read for its
 * sha256 anyway). ES_E_IO naming path: no memory for its size, a read error,
 * or a size that changed while it was read. */
int es_file_read(int fd, const char *path, const es_file_stamp *stamp, es_file **out, es_err *err)
{
    size_t size = (size_t)stamp->size, got = 0;
    unsigned char *bytes = size ? es_try_alloc(size, 1) : NULL;
    if (size && !bytes)
        return es_fail(err, ES_E_IO, "file", "%s: cannot allocate %zu bytes to read it", path, size);
    errno = 0;
    while (got < size) {
        ssize_t n = read(fd, bytes + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    int read_errno = errno;
    char extra;
    bool longer = got == size && read(fd, &extra, 1) == 1;
    if (got != size || longer) {
        free(bytes);
        if (got != size && read_errno && read_errno != EAGAIN) {
            errno = read_errno;
            return io_fail(err, path, "read");
        }
        return es_fail(err, ES_E_IO, "file", "%s: changed while being read (%zu bytes at open, %s %zu)", path,
                       size, longer ? "more than" : "only", got);
    }
    es_file *f = es_calloc(1, sizeof *f);
    f->path = es_strdup(path);
    f->bytes = bytes;
    f->size = size;
    *out = f;
    return 0;
}

/* A copy of a whole regular file in memory (an empty file gives bytes ==
 * NULL, size 0): es_file_open, then es_file_read. Fails as those. */
int es_file_map(const char *path, es_file **out, es_err *err)
{
    int fd;
    es_file_stamp stamp;
    if (es_file_open(path, &fd, &stamp, err) != 0)
        return -1;
    int rc = es_file_read(fd, path, &stamp, out, err);
    close(fd);
    return rc;
}

/* Map an open file (see store.h): for the daemon's unnamed upload files, which
 * nobody else can reach to truncate, so a map is safe and the body is not held
 * in memory a second time. Fails like es_file_map, naming `name`. */
int es_file_map_fd(int fd, const char *name, es_file **out, es_err *err)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return io_fail(err, name, "stat");
    if (!S_ISREG(st.st_mode))
        return es_fail(err, ES_E_IO, "file", "%s: not a regular file (%s)", name, kind_of(st.st_mode));
    const unsigned char *bytes = NULL;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            return io_fail(err, name, "mmap");
        bytes = p;
    }
    es_file *f = es_calloc(1, sizeof *f);
    f->path = es_strdup(name);
    f->bytes = bytes;
    f->size = (size_t)st.st_size;
    f->mapped = true;
    *out = f;
    return 0;
}

/* Free the copy or unmap (NULL is a no-op). */
void es_file_free(es_file *f)
{
    if (!f)
        return;
    if (f->mapped && f->bytes)
        munmap((void *)f->bytes, f->size);
    else if (!f->mapped)
        free((void *)f->bytes);
    free(f->path);
    free(f);
}

/* Bytes per element (0 for an unknown value). */
size_t es_dtype_size(es_dtype t)
{
    static const size_t sizes[] = {[ES_F16] = 2, [ES_BF16] = 2, [ES_F32] = 4, [ES_F64] = 8};
    return (unsigned)t < sizeof sizes / sizeof *sizes ? sizes[t] : 0;
}

/* F64 keeps doubles; F16, BF16 and F32 values are all exactly floats. */
es_elem es_dtype_elem(es_dtype t)
{
    return t == ES_F64 ? ES_ELEM_F64 : ES_ELEM_F32;
}

/* 4 for floats, 8 for doubles. */
size_t es_elem_size(es_elem e)
{
    return e == ES_ELEM_F32 ? sizeof(float) : sizeof(double);
}
