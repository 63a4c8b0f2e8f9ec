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

/* ------------------------------------------------------------ fast conversion
 * One tight loop per (dtype, byte order, storage order): the raw bits of each
 * element are loaded (memcpy: unaligned), tested for Inf/NaN by their exponent
 * field and converted by bit operations; element_at above only re-reads the
 * offending element for its message. */

static inline uint16_t load16(const unsigned char *p, bool be)
{
    uint16_t u;
    memcpy(&u, p, 2);
    return be ? __builtin_bswap16(u) : u;
}

static inline uint32_t load32(const unsigned char *p, bool be)
{
    uint32_t u;
    memcpy(&u, p, 4);
    return be ? __builtin_bswap32(u) : u;
}

static inline uint64_t load64(const unsigned char *p, bool be)
{
    uint64_t u;
    memcpy(&u, p, 8);
    return be ? __builtin_bswap64(u) : u;
}

/* binary16 bits (finite) to float, exactly: subnormals as mant x 2^-24, normals
 * by moving the exponent (bias 15 -> 127) and the 10 mantissa bits into place. */
static inline float half_bits_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = h >> 10 & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        float v = (float)mant * 0x1p-24f;
        memcpy(&bits, &v, 4);
        bits |= sign;
    } else {
        bits = sign | (exp + 112) << 23 | mant << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline double bits_to_double(uint64_t u)
{
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* Convert n elements of dtype dt (byte order be) at src into dst, row-major
 * r x c (storage in Fortran order when fortran); returns n, or the storage
 * index of the first non-finite element (dst then partly written). Inlined
 * with constant dt and be, so each case is its own loop. */
static inline __attribute__((always_inline)) size_t convert_loop(const unsigned char *src, void *dst, size_t r,
                                                                size_t c, bool fortran, es_dtype dt, bool be)
{
    size_t n = r * c, outer = fortran ? c : 1, inner = fortran ? r : n, e = 0;
    float *fo = dst;
    double *dout = dst;
    for (size_t j = 0; j < outer; j++)
        for (size_t i = 0; i < inner; i++, e++) {
            size_t at = fortran ? i * c + j : e;
            switch (dt) {
            case ES_F16: {
                uint16_t h = load16(src + 2 * e, be);
                if ((h & 0x7c00) == 0x7c00)
                    return e;
                fo[at] = half_bits_to_float(h);
                break;
            }
            case ES_BF16: {
                uint16_t h = load16(src + 2 * e, be);
                if ((h & 0x7f80) == 0x7f80)
                    return e;
                fo[at] = bits_to_float((uint32_t)h << 16);
                break;
            }
            case ES_F32: {
                uint32_t u = load32(src + 4 * e, be);
                if ((u & 0x7f800000u) == 0x7f800000u)
                    return e;
                fo[at] = bits_to_float(u);
                break;
            }
            default: {
                uint64_t u = load64(src + 8 * e, be);
                if ((u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull)
                    return e;
                dout[at] = bits_to_double(u);
                break;
            }
            }
        }
    return n;
}

/* convert_loop for t's dtype and byte order, each its own specialised loop. */
static size_t convert_any(const es_tensor *t, const unsigned char *src, void *dst, size_t r, size_t c)
{
    bool f = t->fortran_order;
#define CASE(DT)                                                                                                     \
    case DT:                                                                                                         \
        return t->big_endian ? (f ? convert_loop(src, dst, r, c, true, DT, true)                                      \
                                  : convert_loop(src, dst, r, c, false, DT, true))                                    \
                             : (f ? convert_loop(src, dst, r, c, true, DT, false)                                     \
                                  : convert_loop(src, dst, r, c, false, DT, false));
    switch (t->dtype) {
        CASE(ES_F16)
        CASE(ES_BF16)
        CASE(ES_F32)
    default:
        CASE(ES_F64)
    }
#undef CASE
}

/* See internal.h: one pass that ORs the exponent test over blocks of 4096 and
 * looks inside a block only when it holds one. */
size_t es_f64_first_nonfinite(const unsigned char *p, size_t n)
{
    const uint64_t mask = 0x7ff0000000000000ull;
    for (size_t b = 0; b < n; b += 4096) {
        size_t end = n - b < 4096 ? n : b + 4096;
        uint64_t bad = 0;
        for (size_t i = b; i < end; i++) {
            uint64_t u;
            memcpy(&u, p + 8 * i, 8);
            bad |= (uint64_t)((u & mask) == mask);
        }
        if (bad)
            for (size_t i = b; i < end; i++) {
                uint64_t u;
                memcpy(&u, p + 8 * i, 8);
                if ((u & mask) == mask)
                    return i;
            }
    }
    return n;
}

/* See internal.h. */
int es_tensor_nonfinite_fail(const es_tensor *t, size_t e, es_err *err)
{
    double v = element_at(t, t->file->bytes + t->offset + e * es_dtype_size(t->dtype));
    return es_format_fail(err, t->file, t->offset + e * es_dtype_size(t->dtype),
                          "non-finite value (%s) in tensor '%s' element %zu", isnan(v) ? "NaN" : "Inf", t->name, e);
}

/* See internal.h. */
void es_tensor_dims(const es_tensor *t, size_t *rows, size_t *cols)
{
    *rows = t->rank == 2 ? t->shape[0] : 1;
    *cols = t->rank == 2 ? t->shape[1] : t->shape[0];
}

/* Convert to a new row-major rows x cols array of es_dtype_elem(t->dtype)
 * (rank 0 -> 1 x 1, rank 1 -> 1 x n, Fortran order transposed into row-major):
 * floats for F16/BF16/F32, whose values a float holds exactly. ES_E_FORMAT
 * naming the file and the element's byte offset for NaN/Inf; ES_E_NOMEM if the
 * array cannot be allocated. */
int es_tensor_convert(const es_tensor *t, void **out, es_elem *elem, size_t *rows, size_t *cols, es_err *err)
{
    size_t r, c;
    es_tensor_dims(t, &r, &c);
    size_t n = t->nbytes / es_dtype_size(t->dtype);
    void *x = es_try_alloc_huge(n, es_elem_size(es_dtype_elem(t->dtype)));
    if (!x)
        return es_fail(err, ES_E_NOMEM, "file", "%s: cannot allocate %zu elements for tensor '%s'",
                       t->file->path, n, t->name);
    size_t bad = convert_any(t, t->file->bytes + t->offset, x, r, c);
    if (bad != n) {
        free(x);
        return es_tensor_nonfinite_fail(t, bad, err);
    }
    *out = x;
    *elem = es_dtype_elem(t->dtype);
    *rows = r;
    *cols = c;
    return 0;
}
