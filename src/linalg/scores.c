/* Kept PCA scores on disk: cache_dir/HASH.scores beside HASH.svd (persist.c),
 * a tall exact decomposition's X V for its first min(r, 64) components,
 * written when the first PCA reply forms them (es_svd_project, svd.c), so a
 * restarted daemon's first PCA reply reads them instead of a pass over the
 * whole matrix. Layout: magic "ESSCORE\0", u32 version, u32 0, u64 n, cols,
 * the sha256 of the key and the r x d right vectors they were formed with,
 * the n x cols doubles, the sha256 of everything before it. Not fsynced: a
 * torn file fails its checksum and is formed again. */
#include "linalg/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HASH_BYTES 32

#define SCORES_VERSION 1u

typedef struct scores_header {
    char magic[8];
    uint32_t version, zero;
    uint64_t n, cols;
    unsigned char vectors[HASH_BYTES];
} scores_header;

/* See internal.h. */
char *es_svd_scores_file_name(const char *svd_path)
{
    size_t len = strlen(svd_path);
    if (len > 4 && strcmp(svd_path + len - 4, ".svd") == 0)
        len -= 4;
    return es_asprintf("%.*s.scores", (int)len, svd_path);
}

/* The header of s's scores of cols columns: what they were formed from. */
static scores_header scores_header_of(const es_svd *s, size_t cols)
{
    scores_header h = {.magic = "ESSCORE", .version = SCORES_VERSION, .n = s->n, .cols = cols};
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 && EVP_DigestUpdate(md, s->key, strlen(s->key)) == 1 &&
        EVP_DigestUpdate(md, s->vt, s->r * s->d * sizeof *s->vt) == 1)
        EVP_DigestFinal_ex(md, h.vectors, NULL);
    EVP_MD_CTX_free(md);
    return h;
}

/* See internal.h. */
void es_svd_scores_save(const es_svd *s, const double *x, size_t cols)
{
    scores_header h = scores_header_of(s, cols);
    size_t bytes = s->n * cols * sizeof *x;
    unsigned char hash[HASH_BYTES];
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int rc = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 && EVP_DigestUpdate(md, &h, sizeof h) == 1 &&
                     EVP_DigestUpdate(md, x, bytes) == 1 && EVP_DigestFinal_ex(md, hash, NULL) == 1
                 ? 0
                 : -1;
    EVP_MD_CTX_free(md);
    char *tmp = es_asprintf("%s.tmp.%ld", s->scores_path, (long)getpid());
    int fd = rc == 0 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
    if (fd < 0 || es_write_all(fd, &h, sizeof h) != 0 || es_write_all(fd, x, bytes) != 0 ||
        es_write_all(fd, hash, sizeof hash) != 0)
        rc = -1;
    if (fd >= 0 && close(fd) != 0)
        rc = -1;
    if (rc == 0 && rename(tmp, s->scores_path) != 0)
        rc = -1;
    if (rc != 0) {
        es_warn("cache_dir: cannot write the kept PCA scores %s (%s): they stay in memory", s->scores_path,
                strerror(errno));
        unlink(tmp);
    }
    free(tmp);
}

/* See internal.h. */
int es_svd_scores_load(const es_svd *s, size_t cols, double *x)
{
    struct stat st;
    if (lstat(s->scores_path, &st) != 0 && errno == ENOENT)
        return 1;
    es_file *f;
    es_err why_not = {0};
    const char *why = NULL;
    if (es_file_map(s->scores_path, &f, &why_not) != 0) {
        es_warn("cache_dir: %s: the kept PCA scores are formed again", why_not.message);
        return -1;
    }
    size_t bytes = s->n * cols * sizeof *x;
    scores_header want = scores_header_of(s, cols), h;
    unsigned char hash[HASH_BYTES];
    if (f->size != sizeof h + bytes + HASH_BYTES) {
        why = "truncated or of another size";
    } else {
        EVP_Digest(f->bytes, f->size - HASH_BYTES, hash, NULL, EVP_sha256(), NULL);
        memcpy(&h, f->bytes, sizeof h);
        if (memcmp(hash, f->bytes + f->size - HASH_BYTES, HASH_BYTES) != 0)
            why = "checksum mismatch (corrupt or truncated)";
        else if (memcmp(&h, &want, sizeof h) != 0)
            why = "written for other right vectors or another format";
        else
            memcpy(x, f->bytes + sizeof h, bytes);
    }
    if (!why)
        es_info("read the kept PCA scores of %s (%zu x %zu) from %s", s->key, s->n, cols, s->scores_path);
    es_file_free(f);
    if (why) {
        es_warn("cache_dir: %s: %s; deleting it, the kept PCA scores are formed again", s->scores_path, why);
        unlink(s->scores_path);
        return -1;
    }
    return 0;
}
