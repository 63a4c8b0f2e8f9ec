/* Helpers for the store tests: build file bytes in memory, write them to a
 * temporary file, and assert that a loader error names file, rule and offset. */
#ifndef ES_TEST_CRAFTED_H
#define ES_TEST_CRAFTED_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embedscope/store.h"

/* A growable byte string. */
typedef struct bytes {
    unsigned char *p;
    size_t n, cap;
} bytes;

static inline void b_put(bytes *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 16;
        b->p = es_realloc(b->p, b->cap);
    }
    if (n)
        memcpy(b->p + b->n, data, n);
    b->n += n;
}

static inline void b_str(bytes *b, const char *s) { b_put(b, s, strlen(s)); }

/* Append v as an n-byte little-endian integer. */
static inline void b_le(bytes *b, unsigned long long v, int n)
{
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)(v >> (8 * i));
        b_put(b, &c, 1);
    }
}

/* Append the n-byte value at p, byte-reversed when big is true. */
static inline void b_endian(bytes *b, const void *p, size_t n, int big)
{
    for (size_t i = 0; i < n; i++)
        b_put(b, (const unsigned char *)p + (big ? n - 1 - i : i), 1);
}

static inline void b_free(bytes *b) { free(b->p); }

/* Magic, version major.minor, an explicit header length and the header bytes as given. */
static inline void npy_raw(bytes *b, int major, int minor, size_t hlen, const char *header, size_t n)
{
    b_put(b, "\x93NUMPY", 6);
    unsigned char v[2] = {(unsigned char)major, (unsigned char)minor};
    b_put(b, v, 2);
    b_le(b, hlen, major == 1 ? 2 : 4);
    b_put(b, header, n);
}

/* Byte where the header text starts for a version. */
static inline size_t hstart(int major) { return major == 1 ? 10 : 12; }

/* A well-formed preamble: dict padded with spaces to a multiple of `align`, then '\n'. */
static inline void npy_aligned(bytes *b, int major, const char *dict, size_t align)
{
    size_t len = strlen(dict), total = hstart(major) + len + 1;
    size_t pad = (align - total % align) % align;
    char *header = es_malloc(len + pad + 1);
    memcpy(header, dict, len);
    memset(header + len, ' ', pad);
    header[len + pad] = '\n';
    npy_raw(b, major, 0, len + pad + 1, header, len + pad + 1);
    free(header);
}

/* A crafted file on disk: its path (under /tmp, with the given suffix). */
typedef struct crafted {
    char path[64];
} crafted;

/* Write b to a fresh /tmp/es-test-XXXXXX<suffix> file. */
static inline crafted write_crafted(const bytes *b, const char *suffix)
{
    crafted c;
    snprintf(c.path, sizeof c.path, "/tmp/es-test-XXXXXX%s", suffix);
    int fd = mkstemps(c.path, (int)strlen(suffix));
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, b->p, b->n), (ssize_t)b->n);
    close(fd);
    return c;
}

/* A crafted two-tensor safetensors file: "w" 2 x 3 F32 and "b" rank 1 (3) F32,
 * holding 0.5, 1.5, ..., 8.5 in data order. */
static inline crafted write_two_tensor_safetensors(void)
{
    const char *header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[24,36]}}";
    bytes b = {0};
    b_le(&b, strlen(header), 8);
    b_str(&b, header);
    for (int i = 0; i < 9; i++) {
        float x = (float)i + 0.5f;
        b_endian(&b, &x, 4, 0);
    }
    crafted c = write_crafted(&b, ".safetensors");
    b_free(&b);
    return c;
}

/* A 2 x 3 <f8 .npy file in C or Fortran order holding 0.5, 1.5, ..., 5.5 in data order. */
static inline crafted write_npy_2x3(bool fortran)
{
    bytes b = {0};
    npy_aligned(&b, 1, fortran ? "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }"
                               : "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 64);
    for (int i = 0; i < 6; i++) {
        double x = i + 0.5;
        b_endian(&b, &x, 8, 0);
    }
    crafted c = write_crafted(&b, ".npy");
    b_free(&b);
    return c;
}

/* a and b hold the same matrix with the same provenance except the source name. */
static inline void expect_same_load(const es_matrix *a, const es_matrix *b)
{
    ck_assert_uint_eq(a->rows, b->rows);
    ck_assert_uint_eq(a->cols, b->cols);
    for (size_t i = 0; i < a->rows; i++)
        for (size_t j = 0; j < a->cols; j++)
            ck_assert(es_matrix_at(a, i, j) == es_matrix_at(b, i, j));
    ck_assert_int_eq(es_matrix_sha_wait(a), ES_SHA_KNOWN); /* a matrix mapped in place is hashed after loading */
    ck_assert_int_eq(es_matrix_sha_wait(b), ES_SHA_KNOWN);
    ck_assert_str_eq(es_matrix_sha256(a), es_matrix_sha256(b));
    ck_assert_str_eq(es_matrix_file_sha256(a), es_matrix_file_sha256(b));
    ck_assert_str_eq(a->prov.tensor, b->prov.tensor);
    ck_assert_str_eq(a->prov.dtype, b->prov.dtype);
}

/* sha256 of the whole GPT-2 small W_pos .npy (data/README.md). */
#define WPE_FILE_SHA256 "1094c21cb3b5cc6db2be773a6a6a21566206c2669fca889d3b1883ae77e9b3d1"

/* Check m, loaded from the GPT-2 W_pos file `path` (1024 x 768 <f4), against an
 * independent read of the file's last 1024*768*4 bytes (the array after the .npy
 * header): the tensor sha256 and element (5, 7) (little-endian host). */
static inline void expect_wpe_data(const es_matrix *m, const char *path)
{
    FILE *fp = fopen(path, "rb");
    ck_assert_ptr_nonnull(fp);
    size_t nbytes = 1024 * 768 * 4;
    unsigned char *raw = es_malloc(nbytes);
    ck_assert_int_eq(fseek(fp, -(long)nbytes, SEEK_END), 0);
    ck_assert_uint_eq(fread(raw, 1, nbytes, fp), nbytes);
    fclose(fp);
    char want[65];
    es_sha256_hex(raw, nbytes, want);
    ck_assert_str_eq(m->prov.sha256, want);
    float x;
    memcpy(&x, raw + 4 * (5 * 768 + 7), 4);
    ck_assert(es_matrix_at(m, 5, 7) == (double)x);
    free(raw);
}

/* Assert a failure with code ES_E_FORMAT whose message names path, contains
 * rule and ends with "at byte OFFSET". */
static inline void assert_format_error(int rc, const es_err *err, const char *path, const char *rule,
                                       size_t offset)
{
    char at[48];
    snprintf(at, sizeof at, " at byte %zu", offset);
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(err->code == ES_E_FORMAT, "code %d: %s", err->code, err->message);
    ck_assert_msg(strncmp(err->message, path, strlen(path)) == 0, "no file in: %s", err->message);
    ck_assert_msg(strstr(err->message, rule) != NULL, "rule '%s' not in: %s", rule, err->message);
    size_t n = strlen(err->message), k = strlen(at);
    ck_assert_msg(n >= k && strcmp(err->message + n - k, at) == 0, "'%s' not at end of: %s", at,
                  err->message);
}

#endif
