/* Helpers shared by the store's loaders (not part of the public API). */
#ifndef EMBEDSCOPE_STORE_INTERNAL_H
#define EMBEDSCOPE_STORE_INTERNAL_H

#include "embedscope/store.h"

#include <pthread.h>
#include <stdint.h>

/* Fill err with ES_E_FORMAT (param "file") and the message
 * "FILE: RULE at byte OFFSET", RULE formatted from fmt; returns -1. */
int es_format_fail(es_err *err, const es_file *f, size_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A new es_tensor over f with name copied and everything else zero, shape 1 x 1. */
es_tensor *es_tensor_new(const es_file *f, const char *name);

/* A validated safetensors file (header decoded, every rule checked), from which
 * tensors are taken without validating again. It borrows the file. */
typedef struct es_st_layout es_st_layout;
/* Validate the whole of f (rules 1-7); ES_E_FORMAT naming the rule and offset. */
int es_safetensors_validate(const es_file *f, es_st_layout **out, es_err *err);
/* Tensor `name` of a validated file; ES_E_NOTFOUND (param "tensor") if absent,
 * listing the names there are, ES_E_FORMAT if its rank is above 2 or its dtype
 * cannot be converted. */
int es_safetensors_tensor(const es_st_layout *l, const char *name, es_tensor **out, es_err *err);
/* The first names of l's tensors in data order for a message (at most 50 and
 * 320 characters, then "and N more"; "none"). Caller frees. Never fails. */
char *es_safetensors_name_list(const es_st_layout *l);
/* Free a layout; NULL is a no-op. */
void es_st_layout_free(es_st_layout *l);

/* The provenance view text of a view of m: "WHAT of ID", after m's own view
 * description and "; " when it has one. Newly allocated; cannot fail. */
char *es_view_description(const es_matrix *m, const char *what);

/* What identifies a file's contents without reading them: device, inode,
 * size, modification and status-change times (ns). Equal stamps of one path
 * are taken to mean equal bytes (see tcache.c for the rule that makes it
 * safe); mode is kept for the regular-file check. */
typedef struct es_file_stamp {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
    unsigned mode;
} es_file_stamp;
/* Open path read-only, non-blocking; *fd and its stamp. ES_E_IO naming the
 * path: cannot open or stat, or not a regular file (FIFO, device, directory). */
int es_file_open(const char *path, int *fd, es_file_stamp *stamp, es_err *err);
/* fstat(fd) as a stamp; -1 with errno when fstat fails. */
int es_file_stamp_of(int fd, es_file_stamp *stamp);
/* Read all of fd (at offset 0, stamp->size bytes) into a new es_file named
 * path; fd stays the caller's. ES_E_IO naming path: no memory, a read error,
 * or a size that changed while it was read. */
int es_file_read(int fd, const char *path, const es_file_stamp *stamp, es_file **out, es_err *err);
/* Map all of fd (stamp->size bytes) read-only (PROT_READ, MAP_PRIVATE) as a
 * new es_file named path (mapped: es_file_free unmaps it); fd stays the
 * caller's. A truncation while mapped raises SIGBUS (file.c's header).
 * ES_E_IO naming path when mmap fails. */
int es_file_map_open(int fd, const char *path, const es_file_stamp *stamp, es_file **out, es_err *err);
/* Map len bytes of fd at offset read-only (PROT_READ, MAP_PRIVATE): *data
 * points at them inside the map (*base, *map_len: page-aligned, released with
 * es_map_release). ES_E_IO naming path when mmap fails. */
int es_file_map_range(int fd, const char *path, size_t offset, size_t len, void **base, size_t *map_len,
                      const void **data, es_err *err);
/* munmap a map made by this file's functions (or any other: only those are
 * named by the SIGBUS handler); NULL is a no-op. */
void es_map_release(void *base, size_t len);
/* Index of the first non-finite element of n little-endian float64 at p (n
 * when all are finite). */
size_t es_f64_first_nonfinite(const unsigned char *p, size_t n);
/* ES_E_FORMAT for t's non-finite storage element e: "non-finite value (NaN|Inf)
 * in tensor 'NAME' element E" at its byte offset; returns -1. */
int es_tensor_nonfinite_fail(const es_tensor *t, size_t e, es_err *err);
/* t's matrix shape: rank 2 as stored, rank 1 -> 1 x n, rank 0 -> 1 x 1. */
void es_tensor_dims(const es_tensor *t, size_t *rows, size_t *cols);

/* es_matrix_from_data for rows x cols elements of elem (floats or doubles):
 * ownership of data passes to the matrix. Never fails. */
es_matrix *es_matrix_from_elems(const char *id, void *data, es_elem elem, size_t rows, size_t cols, es_axis axis,
                                const es_provenance *prov);
/* A matrix over elements of elem inside a read-only map of len bytes at base
 * (a checked file of the cache directory, tcache.c): the buffer unmaps it with
 * its last reference. Like es_matrix_from_elems otherwise; never fails. */
es_matrix *es_matrix_from_map(const char *id, const void *data, es_elem elem, void *base, size_t len, size_t rows,
                              size_t cols, es_axis axis, const es_provenance *prov);

/* ------------------------------------------------ converted tensors on disk */

/* What a file's tensor was last time: the record of one (file stamp, format,
 * tensor) in the cache directory. */
typedef struct es_tc_record {
    char file_sha256[65];   /* of the whole file */
    char sha256[65];        /* of the tensor's bytes */
    char descr[8];          /* the file's dtype spelling */
    uint64_t shape[2];      /* as stored */
    uint64_t rows, cols;    /* as converted (rank 1: 1 x n) */
    uint32_t fortran_order; /* .npy column-major storage */
    uint32_t elem;          /* es_elem of the converted copy: floats for F16/BF16/F32 */
    uint32_t in_place;      /* 1: no copy; the matrix maps the file's own bytes (LE float64, C order) */
    uint32_t reserved;      /* zero */
    uint64_t offset;        /* in_place: the tensor's byte offset in the file */
} es_tc_record;

/* A file whose status last changed less than this long before it was read
 * gets no record: a second write within the same timestamp tick would leave
 * its stamp unchanged (2 s also covers filesystems with 2-second times). */
#define ES_TC_SETTLE_NS 2000000000LL

/* The record's key text for a file of this stamp, format and tensor. Caller
 * frees; never fails. */
char *es_tc_record_key(const es_file_stamp *st, bool npy, const char *tensor);
/* The record of key and its converted copy, mapped, from dir: 1 with *rec,
 * *data (rows x cols elements of rec->elem, inside the map) and the map
 * (*base, *len: the caller unmaps it, or hands it to es_matrix_from_map); for
 * an in_place record 1 with *rec alone (*data, *base NULL: no copy); 0
 * when there is none. A corrupt, truncated or foreign file (checksum, header,
 * format version, key or sizes) is logged, deleted and reported as none: it is
 * never served. Never fails otherwise. */
int es_tc_lookup(const char *dir, const char *key, es_tc_record *rec, const void **data, void **base, size_t *len);
/* Keep rec and its converted copy (rows x cols elements of rec->elem) in dir
 * under key: the elements in a content-addressed file (sha256 of the tensor,
 * dtype, order and shape), the record in a file named by key; each written
 * atomically (a temporary file, rename) with a trailing checksum. trust_stamp
 * false (the file changed while it was read, or too recently for its stamp to
 * tell two versions apart) writes only the elements. An in_place record has
 * no copy (data NULL): only the record is written, and only when trusted. Failures are logged (the
 * matrix is served from memory anyway); never fails otherwise. */
void es_tc_store(const char *dir, const char *key, bool trust_stamp, const es_tc_record *rec, const void *data);

/* ------------------------------------------------ sha256s computed after loading (digest.c) */

/* The sha256s of one matrix mapped from its file, computed by a background
 * job after the matrix is loaded and served. Shared (reference-counted) by
 * the matrix, the matrices made from it without copying (renamed, views) and
 * the job. sha256 and file_sha256 are written once, before state becomes
 * ES_SHA_KNOWN with release order; readers load state with acquire order
 * first (es_matrix_sha_state), so HTTP threads never wait on it. */
typedef struct es_digest {
    int refs;                /* atomic */
    int state;               /* es_sha_state, atomic */
    char sha256[65];         /* the tensor's bytes, once KNOWN */
    char file_sha256[65];    /* the whole file's, once KNOWN */
    char provisional[160];   /* es_matrix_data_id while COMPUTING; never changes */
    char changed[176];       /* es_matrix_data_id once FAILED: another one (the bytes may have changed) */
    char why[320];           /* FAILED: what happened */
    pthread_mutex_t lock;    /* with done: es_matrix_sha_wait */
    pthread_cond_t done;
} es_digest;

/* A digest in ES_SHA_COMPUTING for the tensor at offset of the file of stamp
 * st, with one reference. Never fails. */
es_digest *es_digest_new(const es_file_stamp *st, uint64_t offset);
es_digest *es_digest_retain(es_digest *d);
void es_digest_release(es_digest *d);

/* The background hashing of one file's mapped tensors (and of the whole file
 * unless its sha256 is known): made while a source loads them, started when
 * the source is freed. */
typedef struct es_digest_job es_digest_job;
/* A job over the file open as fd (the job keeps a duplicate of its own),
 * named path, whose stamp at open is st; records go to cache_dir (NULL: none).
 * Never fails. */
es_digest_job *es_digest_job_new(int fd, const char *path, const es_file_stamp *st, const char *cache_dir);
/* Hash len bytes at offset into d (retained) and, with a cache_dir, keep rec
 * (its sha256s filled in then) under key. Never fails. */
void es_digest_job_add(es_digest_job *j, es_digest *d, uint64_t offset, uint64_t len, const char *key,
                       const es_tc_record *rec);
/* Start j on threads of its own (the whole file's sha256 beside the tensors',
 * unless file_sha256 is known: non-empty), at a lower CPU priority than the
 * daemon's, and hand it over; a job with nothing to hash is freed. Never fails
 * (a thread that cannot start makes the hashes fail, logged). Test hook: while
 * the file named by the environment variable ES_TEST_HASH_HOLD exists, a job
 * waits before hashing. */
void es_digest_job_start(es_digest_job *j, const char *file_sha256);
/* Wait until no job runs (tests). */
void es_digests_wait(void);

#endif
