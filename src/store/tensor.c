/* Tensors inside mapped files: conversion to double, and loading a matrix from
 * a .npy or .safetensors file with its provenance. */
#include "store/internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ES_E_FORMAT "FILE: RULE at byte OFFSET" (param "file"). */
int es_format_fail(es_err *err, const es_file *f, size_t offset, const char *fmt, ...)
{
    char rule[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rule, sizeof rule, fmt, ap);
    va_end(ap);
    return es_fail(err, ES_E_FORMAT, "file", "%s: %s at byte %zu", f->path, rule, offset);
}

/* Zeroed tensor over f named name, shape 1 x 1. Cannot fail. */
es_tensor *es_tensor_new(const es_file *f, const char *name)
{
    es_tensor *t = es_calloc(1, sizeof *t);
    t->file = f;
    t->name = es_strdup(name);
    t->shape[0] = t->shape[1] = 1;
    return t;
}

/* Free the tensor record (not the file it points into); NULL is a no-op. */
void es_tensor_free(es_tensor *t)
{
    if (!t)
        return;
    free(t->name);
    free(t);
}

/* ---------------------------------------------------------------- conversion */

/* IEEE 754 binary16 bits to double (exact). */
static double half_to_double(uint16_t h)
{
    int sign = h >> 15, exp = h >> 10 & 0x1f;
    unsigned mant = h & 0x3ff;
    double v = exp == 0    ? ldexp(mant, -24)                   /* zero, subnormal */
               : exp == 31 ? (mant ? NAN : INFINITY)            /* inf, NaN */
                           : ldexp(mant | 0x400, exp - 25);     /* normal */
    return sign ? -v : v;
}

/* bfloat16 bits are the top half of a binary32. */
static double bf16_to_double(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* The element whose bytes start at p (memcpy: p may be unaligned), swapping
 * bytes for big-endian storage. */
static double element_at(const es_tensor *t, const unsigned char *p)
{
    unsigned char b[8];
    size_t n = es_dtype_size(t->dtype);
    for (size_t i = 0; i < n; i++)
        b[i] = p[t->big_endian ? n - 1 - i : i];
    uint16_t u16;
    float f32;
    double f64;
    switch (t->dtype) {
    case ES_F16:
        memcpy(&u16, b, 2);
        return half_to_double(u16);
    case ES_BF16:
        memcpy(&u16, b, 2);
        return bf16_to_double(u16);
    case ES_F32:
        memcpy(&f32, b, 4);
        return f32;
    default:
        memcpy(&f64, b, 8);
        return f64;
    }
}

/* Convert to a new row-major rows x cols double array (rank 0 -> 1 x 1, rank 1
 * -> 1 x n, Fortran order transposed into row-major). ES_E_FORMAT naming the file
 * and the element's byte offset for NaN/Inf; ES_E_NOMEM if the array cannot be
 * allocated. */
int es_tensor_to_double(const es_tensor *t, double **out, size_t *rows, size_t *cols, es_err *err)
{
    size_t r = t->rank == 2 ? t->shape[0] : 1, c = t->rank == 2 ? t->shape[1] : t->shape[0];
    size_t size = es_dtype_size(t->dtype), n = t->nbytes / size;
    double *x = es_try_alloc(n, sizeof *x);
    if (!x)
        return es_fail(err, ES_E_NOMEM, "file", "%s: cannot allocate %zu doubles for tensor '%s'",
                       t->file->path, n, t->name);
    const unsigned char *base = t->file->bytes + t->offset;
    for (size_t e = 0; e < n; e++) {
        double v = element_at(t, base + e * size);
        if (!isfinite(v)) {
            free(x);
            return es_format_fail(err, t->file, t->offset + e * size,
                                  "non-finite value (%s) in tensor '%s' element %zu",
                                  isnan(v) ? "NaN" : "Inf", t->name, e);
        }
        /* Storage element e is (e / c, e % c) in C order, (e % r, e / r) in Fortran order. */
        x[t->fortran_order ? (e % r) * c + e / r : e] = v;
    }
    *out = x;
    *rows = r;
    *cols = c;
    return 0;
}

/* ---------------------------------------------------------------- loading */

/* True if path ends with suffix. */
static bool ends_with(const char *path, const char *suffix)
{
    size_t n = strlen(path), k = strlen(suffix);
    return n >= k && strcmp(path + n - k, suffix) == 0;
}

/* Parse the tensor out of f: .npy by extension or magic (no tensor name allowed),
 * otherwise safetensors (a tensor name required). ES_E_PARAM (param "tensor") on
 * a name given for .npy or missing for safetensors; parser failures otherwise. */
static int parse_tensor(const es_file *f, const char *tensor, es_tensor **out, es_err *err)
{
    bool named = tensor && tensor[0];
    bool npy_magic = f->size >= 6 && memcmp(f->bytes, "\x93NUMPY", 6) == 0;
    bool npy = ends_with(f->path, ".npy") || (!ends_with(f->path, ".safetensors") && npy_magic);
    if (npy && named)
        return es_fail(err, ES_E_PARAM, "tensor", "%s: a .npy file holds one unnamed array, not '%s'",
                       f->path, tensor);
    if (npy)
        return es_npy_parse(f, out, err);
    if (!named)
        return es_fail(err, ES_E_PARAM, "tensor", "%s: a safetensors file needs a tensor name",
                       f->path);
    return es_safetensors_parse(f, tensor, out, err);
}

/* Map, parse, convert and describe one matrix; the map is released before
 * returning. Failures: ES_E_IO (file), ES_E_FORMAT (rules, NaN/Inf),
 * ES_E_NOTFOUND / ES_E_PARAM (tensor), ES_E_NOMEM. */
int es_matrix_load(const char *id, const char *path, const char *tensor, es_axis axis,
                   es_matrix **out, es_err *err)
{
    es_file *f;
    if (es_file_map(path, &f, err) != 0)
        return -1;
    es_tensor *t = NULL;
    double *data = NULL;
    size_t rows = 0, cols = 0;
    int rc = parse_tensor(f, tensor, &t, err);
    if (rc == 0)
        rc = es_tensor_to_double(t, &data, &rows, &cols, err);
    if (rc == 0) {
        char file_sha[65];
        es_sha256_hex(f->bytes, f->size, file_sha);
        es_provenance prov = {
            .source = (char *)path,
            .tensor = t->name,
            .dtype = t->descr,
            .shape = {t->shape[0], t->shape[1]},
            .file_sha256 = file_sha,
            .generator = "",
            .view = "",
        };
        es_sha256_hex(f->bytes + t->offset, t->nbytes, prov.sha256);
        *out = es_matrix_from_data(id, data, rows, cols, axis, &prov);
    }
    es_tensor_free(t);
    es_file_free(f);
    return rc;
}
