/* Fresh temporary directories for the tests that write files (cache
 * directories): es_test_fresh_dir makes one, es_test_remove_dir deletes its
 * files and itself. */
#ifndef ES_TEST_TMPDIR_H
#define ES_TEST_TMPDIR_H
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "embedscope/core.h"

/* A fresh empty directory /tmp/PREFIX.XXXXXX. Caller frees the name. */
static inline char *es_test_fresh_dir(const char *prefix)
{
    char *dir = es_asprintf("/tmp/%s.XXXXXX", prefix);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    return dir;
}

/* Remove the files of dir and dir itself; frees the name. */
static inline void es_test_remove_dir(char *dir)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') {
            char *p = es_asprintf("%s/%s", dir, e->d_name);
            unlink(p);
            free(p);
        }
    if (d)
        closedir(d);
    rmdir(dir);
    free(dir);
}
#endif
