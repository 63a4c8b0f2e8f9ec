/* Read-only memory maps of whole files, and the element types the loaders know. */
#include "embedscope/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ES_E_IO (param "file") naming path, what failed and errno's text. */
static int io_fail(es_err *err, const char *path, const char *what)
{
    return es_fail(err, ES_E_IO, "file", "%s: cannot %s: %s", path, what, strerror(errno));
}

/* Map path read-only (an empty file gives bytes == NULL, size 0). Fails with
 * ES_E_IO naming the path and errno's text when it cannot be opened, is not a
 * regular file, or cannot be mapped. */
int es_file_map(const char *path, es_file **out, es_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return io_fail(err, path, "open");
    int rc = es_file_map_fd(fd, path, out, err);
    close(fd); /* the mapping stays valid without the descriptor */
    return rc;
}

/* Map an open file (see store.h); fails like es_file_map, naming `name`. */
int es_file_map_fd(int fd, const char *name, es_file **out, es_err *err)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return io_fail(err, name, "stat");
    if (!S_ISREG(st.st_mode))
        return es_fail(err, ES_E_IO, "file", "%s: not a regular file", name);
    const unsigned char *bytes = NULL;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            return io_fail(err, name, "mmap");
        bytes = p;
    }
    es_file *f = es_malloc(sizeof *f);
    f->path = es_strdup(name);
    f->bytes = bytes;
    f->size = (size_t)st.st_size;
    *out = f;
    return 0;
}

/* Unmap and free (NULL is a no-op). */
void es_file_free(es_file *f)
{
    if (!f)
        return;
    if (f->bytes)
        munmap((void *)f->bytes, f->size);
    free(f->path);
    free(f);
}

/* "F16", "BF16", "F32", "F64" ("?" for an unknown value). */
const char *es_dtype_name(es_dtype t)
{
    static const char *const names[] = {[ES_F16] = "F16", [ES_BF16] = "BF16", [ES_F32] = "F32",
                                        [ES_F64] = "F64"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

/* Bytes per element (0 for an unknown value). */
size_t es_dtype_size(es_dtype t)
{
    static const size_t sizes[] = {[ES_F16] = 2, [ES_BF16] = 2, [ES_F32] = 4, [ES_F64] = 8};
    return (unsigned)t < sizeof sizes / sizeof *sizes ? sizes[t] : 0;
}
