/* Tensors inside mapped files: records, format errors and conversion to the
 * element type matrices keep (float or double).
 * Loading matrices from files: source.c. */
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

/* Convert to a new row-major rows x cols array of es_dtype_elem(t->dtype)
 * (rank 0 -> 1 x 1, rank 1 -> 1 x n, Fortran order transposed into row-major):
 * floats for F16/BF16/F32, whose values a float holds exactly. ES_E_FORMAT
 * naming the file and the element's byte offset for NaN/Inf; ES_E_NOMEM if the
 * array cannot be allocated. */
int es_tensor_convert(const es_tensor *t, void **out, es_elem *elem, size_t *rows, size_t *cols, es_err *err)
{
    size_t r = t->rank == 2 ? t->shape[0] : 1, c = t->rank == 2 ? t->shape[1] : t->shape[0];
    size_t size = es_dtype_size(t->dtype), n = t->nbytes / size;
    bool f32 = es_dtype_elem(t->dtype) == ES_ELEM_F32;
    void *x = es_try_alloc(n, es_elem_size(es_dtype_elem(t->dtype)));
    if (!x)
        return es_fail(err, ES_E_NOMEM, "file", "%s: cannot allocate %zu elements for tensor '%s'",
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
        size_t at = t->fortran_order ? (e % r) * c + e / r : e;
        if (f32)
            ((float *)x)[at] = (float)v; /* exact: v came from a float, half or bfloat16 */
        else
            ((double *)x)[at] = v;
    }
    *out = x;
    *elem = es_dtype_elem(t->dtype);
    *rows = r;
    *cols = c;
    return 0;
}
