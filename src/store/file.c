/* Whole files read into memory (the daemon's own small files), data files
 * mapped read-only (sources: es_file_map_open, es_file_map_range), and the
 * element types the loaders know.
 *
 * Maps of data files and SIGBUS: a matrix may borrow the bytes of its data
 * file (a little-endian float64 C-order tensor, source.c), so the daemon holds
 * read-only MAP_PRIVATE maps of configured files for as long as the catalogue
 * holds the matrix. A file replaced by rename (a new inode) is harmless: the
 * map keeps the old inode alive. A file truncated or rewritten in place while
 * mapped makes the kernel raise SIGBUS at the next read of a page past its new
 * end, which no code can recover from; the daemon does not die silently: a
 * handler installed with the first map names the file on stderr and lets the
 * signal kill the process (a core dump where enabled). docs/operations.md says
 * how to replace data files. */
#include "store/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
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

/* ---------------------------------------------------------------- maps and SIGBUS */

/* The live maps of files, for the SIGBUS handler's message: added and removed
 * under the lock, read by the handler without it (a slot is published by its
 * base, written last with release order and cleared first). */
#define MAP_SLOTS 4096
typedef struct map_slot {
    uintptr_t base; /* 0: free */
    size_t len;
    char path[240];
} map_slot;
static map_slot slots[MAP_SLOTS];
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t handler_once = PTHREAD_ONCE_INIT;

/* Append s to buf at *at (at most cap bytes in all); async-signal-safe. */
static void put(char *buf, size_t cap, size_t *at, const char *s)
{
    while (*s && *at < cap)
        buf[(*at)++] = *s++;
}

/* SIGBUS: name the mapped file the faulting address lies in, then return with
 * the default action restored (SA_RESETHAND), so the access faults again and
 * kills the process as SIGBUS would have. Only async-signal-safe calls. */
static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr;
    const char *path = NULL;
    for (size_t i = 0; i < MAP_SLOTS && !path; i++) {
        uintptr_t b = __atomic_load_n(&slots[i].base, __ATOMIC_ACQUIRE);
        if (b && a >= b && a - b < slots[i].len)
            path = slots[i].path;
    }
    char msg[512];
    size_t at = 0;
    put(msg, sizeof msg, &at, "embedscope: fatal: SIGBUS reading ");
    put(msg, sizeof msg, &at, path ? "the mapped data file " : "memory outside the daemon's data file maps");
    put(msg, sizeof msg, &at, path ? path : "");
    put(msg, sizeof msg, &at, path ? ": it was truncated or rewritten in place while the daemon used it"
                                     " (replace data files by rename; see docs/operations.md)\n" : "\n");
    ssize_t ignored = write(STDERR_FILENO, msg, at);
    (void)ignored;
}

static void install_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = (int)(SA_SIGINFO | SA_RESETHAND); /* glibc: SA_RESETHAND is 0x80000000, an unsigned constant for an int field */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) != 0)
        es_warn("cannot install the SIGBUS handler: %s", strerror(errno));
}

/* Record a map of path for the handler (silently unnamed when all slots are taken). */
static void register_map(const void *base, size_t len, const char *path)
{
    pthread_once(&handler_once, install_handler);
    pthread_mutex_lock(&slots_lock);
    for (size_t i = 0; i < MAP_SLOTS; i++)
        if (!slots[i].base) {
            slots[i].len = len;
            snprintf(slots[i].path, sizeof slots[i].path, "%s", path);
            __atomic_store_n(&slots[i].base, (uintptr_t)base, __ATOMIC_RELEASE);
            break;
        }
    pthread_mutex_unlock(&slots_lock);
}

/* See internal.h. */
void es_map_release(void *base, size_t len)
{
    if (!base)
        return;
    pthread_mutex_lock(&slots_lock);
    for (size_t i = 0; i < MAP_SLOTS; i++)
        if (slots[i].base == (uintptr_t)base) {
            __atomic_store_n(&slots[i].base, 0, __ATOMIC_RELEASE);
            break;
        }
    pthread_mutex_unlock(&slots_lock);
    munmap(base, len);
}

/* See internal.h. */
int es_file_map_open(int fd, const char *path, const es_file_stamp *stamp, es_file **out, es_err *err)
{
    size_t size = (size_t)stamp->size;
    const unsigned char *bytes = NULL;
    if (size > 0) {
        void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            return io_fail(err, path, "mmap");
        madvise(p, size, MADV_SEQUENTIAL); /* hashed front to back; a hint only */
        register_map(p, size, path);
        bytes = p;
    }
    es_file *f = es_calloc(1, sizeof *f);
    f->path = es_strdup(path);
    f->bytes = bytes;
    f->size = size;
    f->mapped = true;
    *out = f;
    return 0;
}

/* See internal.h. */
int es_file_map_range(int fd, const char *path, size_t offset, size_t len, void **base, size_t *map_len,
                      const void **data, es_err *err)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t skip = offset % (size_t)(page > 0 ? page : 4096), n = len + skip;
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, (off_t)(offset - skip));
    if (p == MAP_FAILED)
        return io_fail(err, path, "mmap");
    register_map(p, n, path);
    *base = p;
    *map_len = n;
    *data = (const unsigned char *)p + skip;
    return 0;
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
        es_map_release((void *)f->bytes, f->size);
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
