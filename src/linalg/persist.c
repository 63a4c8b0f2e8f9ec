/* Decompositions on disk: one content-addressed file per cache key, written
 * atomically (a temporary file in the same directory, fsync, rename) and
 * checked in full when read (a sha256 over everything before it), so a corrupt
 * or truncated file is detected, reported and never served.
 *
 * Layout (little-endian host order, this build's sizes; the version changes
 * with the layout): a fixed header, the key, then the arrays the decomposition
 * owns, then the 32-byte sha256 of all preceding bytes.
 *   header: magic "ESSVD\0\0\0", u32 version, u32 flags (bit 0 left vectors
 *   held, bit 1 V_B (or U_R) held, bit 2 mean held, bit 3 certificate passed,
 *   bit 4 the bidiagonal reflectors held), u64 n, d,
 *   r, left_cols, key_len, u32 centering, u32 method (0 exact, 1 topk, 2 values),
 *   u32 solver (0 dgesdd, 1 dgesvd), u32 threads, f64 recon, orth, total_ss,
 *   seconds, cert residual, sigma_bound, vector_bound, min_gap, tolerance,
 *   note[200], the OpenBLAS core[32] (what the computation ran on, echoed
 *   with its threads).
 *   arrays: rows (n u64), s (r), vt (r d), mean (d), then V_B (r r) with the
 *   reflectors (r r) and their scalars (r) when held, or left (n left_cols).
 *   A values-only decomposition (method 2) holds neither vt nor either left
 *   factor: rows, s and the mean. */
#include "linalg/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT_VERSION 3u
#define HASH_BYTES 32

enum { HAS_LEFT = 1, HAS_VB = 2, HAS_MEAN = 4, CERT_PASSED = 8, HAS_BRD = 16 };

/* The header's method codes and es_svd's names for them. */
enum { CODE_EXACT, CODE_TOPK, CODE_VALUES };
static const char *const method_names[] = {[CODE_EXACT] = "exact", [CODE_TOPK] = "topk", [CODE_VALUES] = "values"};
#define N_METHOD_CODES (sizeof method_names / sizeof *method_names)

typedef struct header {
    char magic[8];
    uint32_t version, flags;
    uint64_t n, d, r, left_cols, key_len;
    uint32_t centering, method, solver, threads;
    double recon, orth, total_ss, seconds;
    double residual, sigma_bound, vector_bound, min_gap, tolerance;
    char note[200];
    char core[32];
} header;

/* The file name of key: sha256 of the format version and the key. Caller frees. */
char *es_svd_file_name(const char *dir, const char *key)
{
    char *text = es_asprintf("embedscope-svd-v%u\n%s", FORMAT_VERSION, key), hex[65];
    es_sha256_hex(text, strlen(text), hex);
    free(text);
    return es_asprintf("%s/%s.svd", dir, hex);
}

/* One piece of the file: where it comes from and how long it is. */
typedef struct piece {
    const void *p;
    size_t len;
} piece;

/* The pieces of s in file order after the header (key first). */
static size_t pieces_of(const es_svd *s, const struct es_svd_left_block *left, piece out[8])
{
    size_t n = 0;
    out[n++] = (piece){s->key, strlen(s->key)};
    out[n++] = (piece){s->rows, s->n * sizeof *s->rows};
    out[n++] = (piece){s->s, s->r * sizeof *s->s};
    if (s->vt)
        out[n++] = (piece){s->vt, s->r * s->d * sizeof *s->vt};
    if (s->mean)
        out[n++] = (piece){s->mean, s->d * sizeof *s->mean};
    if (s->vb)
        out[n++] = (piece){s->vb, s->r * s->r * sizeof *s->vb};
    if (s->brd) {
        out[n++] = (piece){s->brd, s->r * s->r * sizeof *s->brd};
        out[n++] = (piece){s->brd_tau, s->r * sizeof *s->brd_tau};
    }
    if (!s->vb && left)
        out[n++] = (piece){left->u, s->n * left->cols * sizeof *left->u};
    return n;
}

/* See internal.h. */
int es_svd_save(const es_svd *s, const char *path, es_err *err)
{
    const struct es_svd_left_block *left = s->vb ? NULL : s->left;
    header h = {.magic = "ESSVD", .version = FORMAT_VERSION, .n = s->n, .d = s->d, .r = s->r,
                .left_cols = left ? left->cols : 0, .key_len = strlen(s->key), .centering = s->centering,
                .method = (uint32_t)es_name_index(method_names, N_METHOD_CODES, s->method), .solver = strcmp(s->solver, "dgesvd") == 0,
                .threads = s->threads,
                .recon = s->recon_error, .orth = s->orth_error, .total_ss = s->total_ss, .seconds = s->seconds,
                .residual = s->cert.residual, .sigma_bound = s->cert.sigma_bound,
                .vector_bound = s->cert.vector_bound, .min_gap = s->cert.min_gap, .tolerance = s->cert.tolerance};
    h.flags = (left ? HAS_LEFT : 0) | (s->vb ? HAS_VB : 0) | (s->brd ? HAS_BRD : 0) | (s->mean ? HAS_MEAN : 0) |
              (s->cert.passed ? CERT_PASSED : 0);
    memcpy(h.note, s->note, sizeof h.note);
    memcpy(h.core, s->blas_core, sizeof h.core);
    piece pieces[9];
    size_t np = 0;
    pieces[np++] = (piece){&h, sizeof h};
    np += pieces_of(s, left, pieces + np);
    char *tmp = es_asprintf("%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        es_fail(err, ES_E_IO, "cache_dir", "%s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char hash[HASH_BYTES];
    int rc = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < np; i++)
        rc = EVP_DigestUpdate(md, pieces[i].p, pieces[i].len) == 1 && es_write_all(fd, pieces[i].p, pieces[i].len) == 0
                 ? 0
                 : -1;
    if (rc == 0)
        rc = EVP_DigestFinal_ex(md, hash, NULL) == 1 && es_write_all(fd, hash, sizeof hash) == 0 ? 0 : -1;
    EVP_MD_CTX_free(md);
    if (rc == 0)
        rc = fsync(fd);
    if (close(fd) != 0)
        rc = -1;
    if (rc == 0)
        rc = rename(tmp, path);
    if (rc != 0) {
        es_fail(err, ES_E_IO, "cache_dir", "%s: cannot write (%s)", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return rc == 0 ? 0 : -1;
}

/* Checked reading through the bytes of a file. */
typedef struct reader {
    const unsigned char *p;
    size_t left;
} reader;

/* Copy len bytes into a new buffer (NULL for len 0 is not used: every array is
 * non-empty). NULL when the file is too short. */
static void *take(reader *r, size_t len)
{
    if (len > r->left)
        return NULL;
    void *out = es_try_alloc(1, len ? len : 1);
    if (out)
        memcpy(out, r->p, len);
    r->p += len;
    r->left -= len;
    return out;
}

/* The decomposition in the bytes (len), validated against key, the
 * selection and m; NULL with the reason in why. */
static es_svd *parse(const unsigned char *bytes, size_t len, const es_matrix *m, const size_t *idx, size_t n,
                     const char *key, char *why, size_t why_len)
{
    header h;
    unsigned char hash[HASH_BYTES];
    if (len < sizeof h + HASH_BYTES) {
        snprintf(why, why_len, "truncated (%zu bytes)", len);
        return NULL;
    }
    EVP_Digest(bytes, len - HASH_BYTES, hash, NULL, EVP_sha256(), NULL);
    if (memcmp(hash, bytes + len - HASH_BYTES, HASH_BYTES) != 0) {
        snprintf(why, why_len, "checksum mismatch (corrupt or truncated)");
        return NULL;
    }
    memcpy(&h, bytes, sizeof h);
    bool values = h.method == CODE_VALUES; /* no vt, no left factor */
    size_t d = es_matrix_dim(m);
    if (memcmp(h.magic, "ESSVD\0\0\0", 8) != 0 || h.version != FORMAT_VERSION || h.n != n || h.d != d ||
        h.key_len != strlen(key) || memcmp(bytes + sizeof h, key, h.key_len) != 0 || h.r == 0 ||
        h.r > (n < d ? n : d) || h.centering > ES_CENTER_ROWS || h.method >= N_METHOD_CODES ||
        !(h.flags & (HAS_LEFT | HAS_VB)) != values || ((h.flags & HAS_BRD) && !(h.flags & HAS_VB)) ||
        h.left_cols > h.r) {
        snprintf(why, why_len, "written for another decomposition or format");
        return NULL;
    }
    es_svd *s = es_svd_alloc(m, idx, n, d, (es_centering)h.centering, h.r,
                             values ? ES_PARTS_VALUES : h.flags & HAS_VB ? ES_PARTS_TALL : ES_PARTS_LEFT);
    if (!s) {
        snprintf(why, why_len, "out of memory");
        return NULL;
    }
    reader r = {bytes + sizeof h + h.key_len, len - HASH_BYTES - sizeof h - h.key_len};
    size_t *rows = take(&r, n * sizeof *rows);
    bool ok = rows && memcmp(rows, idx, n * sizeof *rows) == 0;
    free(rows);
    if (s->vb && !(h.flags & HAS_BRD)) { /* the dgesvd fallback: vb is U_R */
        free(s->brd);
        free(s->brd_tau);
        s->brd = s->brd_tau = NULL;
    }
    double **arrays[] = {&s->s, s->vt ? &s->vt : NULL, s->mean ? &s->mean : NULL,
                         s->vb ? &s->vb : s->left ? &s->left->u : NULL,
                         s->brd ? &s->brd : NULL, s->brd ? &s->brd_tau : NULL};
    size_t sizes[] = {h.r, h.r * d, d, s->vb ? h.r * h.r : n * h.left_cols, h.r * h.r, h.r};
    for (size_t i = 0; ok && i < 6; i++) {
        if (!arrays[i])
            continue;
        double *a = take(&r, sizes[i] * sizeof(double));
        ok = a != NULL;
        free(*arrays[i]);
        *arrays[i] = a;
    }
    if (!ok || r.left != 0 || ((h.flags & HAS_MEAN) != 0) != (s->mean != NULL)) {
        snprintf(why, why_len, "inconsistent sizes");
        es_svd_free(s);
        return NULL;
    }
    if (s->left)
        s->left->cols = h.left_cols;
    s->method = method_names[h.method];
    s->solver = h.solver ? "dgesvd" : "dgesdd";
    s->recon_error = h.recon;
    s->orth_error = h.orth;
    s->total_ss = h.total_ss;
    s->seconds = h.seconds;
    s->cert = (es_certificate){.residual = h.residual, .sigma_bound = h.sigma_bound, .vector_bound = h.vector_bound,
                               .min_gap = h.min_gap, .tolerance = h.tolerance, .passed = (h.flags & CERT_PASSED) != 0};
    memcpy(s->note, h.note, sizeof s->note);
    s->note[sizeof s->note - 1] = '\0';
    s->threads = h.threads;
    memcpy(s->blas_core, h.core, sizeof s->blas_core);
    s->blas_core[sizeof s->blas_core - 1] = '\0';
    return s;
}

/* See internal.h. */
int es_svd_load(const char *path, const es_matrix *m, const size_t *idx, size_t n, const char *key, es_svd **out,
                es_err *err)
{
    /* Read into memory, not mapped (a truncation under a map is a SIGBUS);
     * es_file_map refuses a FIFO or a device at once instead of blocking. */
    struct stat st;
    if (lstat(path, &st) != 0 && errno == ENOENT)
        return 1;
    es_file *f;
    es_err why_not = {0};
    if (es_file_map(path, &f, &why_not) != 0)
        return es_fail(err, ES_E_FORMAT, "cache_dir", "%s", why_not.message);
    char why[160] = "empty file";
    es_svd *s = f->size ? parse(f->bytes, f->size, m, idx, n, key, why, sizeof why) : NULL;
    es_file_free(f);
    if (!s)
        return es_fail(err, ES_E_FORMAT, "cache_dir", "%s: %s", path, why);
    s->key = es_strdup(key);
    *out = s;
    return 0;
}
