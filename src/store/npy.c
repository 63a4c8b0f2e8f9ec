/* Strict NumPy .npy parser (REFERENCE.md §2, numpy/lib/format.py).
 *
 * Accepted: versions 1.0, 2.0 and 3.0; a header of at most 10,000 bytes that is
 * the dict literal numpy writes: keys 'descr', 'fortran_order' and 'shape', each
 * exactly once, in any order, single- or double-quoted, separated by spaces, an
 * optional trailing comma, then space padding and a final '\n'. descr is one of
 * <f2 <f4 <f8 >f2 >f4 >f8; '=' (native) and '|' are rejected because numpy never
 * writes them for multi-byte floats and they would make the file mean different
 * things on different machines. Structured (list) and object descrs are rejected.
 * shape is a tuple of non-negative decimal integers (no Python 2 'L' suffix) of
 * rank 0 (a scalar, loaded as 1 x 1), 1 or 2. The data must be exactly
 * prod(shape) * itemsize bytes. Alignment of the preamble is not required. */
#include "store/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER 10000
#define NPY_MAX_RANK 2

/* Cursor over the header text; pos and end are absolute file offsets. The
 * int-returning parse steps below fail with es_format_fail into c->err
 * (ES_E_FORMAT "FILE: rule at byte N"). */
typedef struct cursor {
    const es_file *f;
    size_t pos, end;
    es_err *err;
} cursor;

/* What the header dict said. */
typedef struct header {
    const char *descr_text;
    size_t descr_len;
    bool fortran_order;
    int rank;
    size_t shape[NPY_MAX_RANK];
    size_t descr_at; /* file offset of the descr value, for dtype errors */
} header;

/* Read a little-endian unsigned integer of n bytes at p. */
static size_t read_le(const unsigned char *p, int n)
{
    size_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The byte at the cursor, or -1 at the end of the header. */
static int peek(const cursor *c) { return c->pos < c->end ? c->f->bytes[c->pos] : -1; }

/* Advance over spaces (the only separator numpy writes). */
static void skip_spaces(cursor *c)
{
    while (peek(c) == ' ')
        c->pos++;
}

/* Consume ch or fail naming what was expected at the cursor. */
static int expect(cursor *c, char ch, const char *what)
{
    if (peek(c) != ch)
        return es_format_fail(c->err, c->f, c->pos, "header: expected %s", what);
    c->pos++;
    return 0;
}

/* Consume the literal word (True, False) if it is at the cursor. */
static bool accept_word(cursor *c, const char *word)
{
    size_t n = strlen(word);
    if (c->end - c->pos < n || memcmp(c->f->bytes + c->pos, word, n) != 0)
        return false;
    c->pos += n;
    return true;
}

/* A quoted string without escapes; sets *text (in the map) and *len. */
static int parse_string(cursor *c, const char **text, size_t *len)
{
    int q = peek(c);
    if (q != '\'' && q != '"')
        return es_format_fail(c->err, c->f, c->pos, "header: expected a quoted string");
    size_t start = ++c->pos;
    while (peek(c) != q) {
        if (peek(c) < 0 || peek(c) == '\\' || peek(c) == '\n')
            return es_format_fail(c->err, c->f, c->pos,
                                  "header: unterminated string or escape in string");
        c->pos++;
    }
    *text = (const char *)c->f->bytes + start;
    *len = c->pos - start;
    c->pos++;
    return 0;
}

/* A non-negative decimal integer in the C locale (no sign, no leading zeros,
 * no 'L' suffix) that fits size_t. */
static int parse_size(cursor *c, size_t *out)
{
    size_t start = c->pos, v = 0;
    while (peek(c) >= '0' && peek(c) <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, (size_t)(peek(c) - '0'), &v))
            return es_format_fail(c->err, c->f, start, "shape: dimension overflows");
        c->pos++;
    }
    if (c->pos == start)
        return es_format_fail(c->err, c->f, start, "shape: expected a non-negative integer");
    if (c->f->bytes[start] == '0' && c->pos - start > 1)
        return es_format_fail(c->err, c->f, start, "shape: integer with a leading zero");
    *out = v;
    return 0;
}

/* A Python tuple of integers: (), (n,), (n, m) with optional trailing comma;
 * "(n)" is not a tuple. Rank above 2 is rejected. */
static int parse_shape(cursor *c, header *h)
{
    size_t at = c->pos;
    if (expect(c, '(', "'(' opening the shape tuple") != 0)
        return -1;
    int n = 0;
    bool comma = false;
    for (skip_spaces(c); peek(c) != ')'; skip_spaces(c)) {
        if (n > 0 && !comma)
            return es_format_fail(c->err, c->f, c->pos, "shape: expected ',' or ')'");
        size_t dim = 0;
        size_t dim_at = c->pos;
        if (parse_size(c, &dim) != 0)
            return -1;
        if (n == NPY_MAX_RANK)
            return es_format_fail(c->err, c->f, dim_at,
                                  "shape: rank above %d is unsupported", NPY_MAX_RANK);
        h->shape[n++] = dim;
        skip_spaces(c);
        comma = peek(c) == ',';
        if (comma)
            c->pos++;
    }
    if (n == 1 && !comma)
        return es_format_fail(c->err, c->f, at, "shape: '(n)' is not a tuple, write '(n,)'");
    c->pos++;
    h->rank = n;
    return 0;
}

/* The value of one known key; `seen` marks keys already given. */
static int parse_value(cursor *c, const char *key, size_t key_len, size_t key_at, unsigned *seen,
                       header *h)
{
    static const char *const keys[] = {"descr", "fortran_order", "shape"};
    unsigned which = 0;
    while (which < 3 && !(strlen(keys[which]) == key_len && memcmp(keys[which], key, key_len) == 0))
        which++;
    if (which == 3)
        return es_format_fail(c->err, c->f, key_at, "header: unknown key '%.*s'",
                              (int)(key_len > 32 ? 32 : key_len), key);
    if (*seen & 1u << which)
        return es_format_fail(c->err, c->f, key_at, "header: duplicate key '%s'", keys[which]);
    *seen |= 1u << which;
    switch (which) {
    case 0:
        h->descr_at = c->pos;
        if (peek(c) == '[')
            return es_format_fail(c->err, c->f, c->pos,
                                  "descr: structured dtypes are unsupported");
        return parse_string(c, &h->descr_text, &h->descr_len);
    case 1:
        if (accept_word(c, "True"))
            h->fortran_order = true;
        else if (accept_word(c, "False"))
            h->fortran_order = false;
        else
            return es_format_fail(c->err, c->f, c->pos, "fortran_order: expected True or False");
        return 0;
    default:
        return parse_shape(c, h);
    }
}

/* The dict literal, then space padding up to the final '\n' (checked by the caller). */
static int parse_dict(cursor *c, header *h)
{
    unsigned seen = 0;
    skip_spaces(c);
    if (expect(c, '{', "'{' opening the header dict") != 0)
        return -1;
    for (skip_spaces(c); peek(c) != '}'; skip_spaces(c)) {
        const char *key;
        size_t key_len, key_at = c->pos;
        if (parse_string(c, &key, &key_len) != 0)
            return -1;
        skip_spaces(c);
        if (expect(c, ':', "':' after a key") != 0)
            return -1;
        skip_spaces(c);
        if (parse_value(c, key, key_len, key_at, &seen, h) != 0)
            return -1;
        skip_spaces(c);
        if (peek(c) != '}' && expect(c, ',', "',' or '}' after a value") != 0)
            return -1;
    }
    if (seen != 7)
        return es_format_fail(c->err, c->f, c->pos, "header: missing key '%s'",
                              !(seen & 1) ? "descr" : !(seen & 2) ? "fortran_order" : "shape");
    c->pos++;
    skip_spaces(c);
    if (c->pos != c->end)
        return es_format_fail(c->err, c->f, c->pos, "header: only spaces may follow the dict");
    return 0;
}

/* Map the descr spelling to dtype and byte order; reject everything else. */
static int parse_descr(const es_file *f, const header *h, es_tensor *t, es_err *err)
{
    static const struct { const char *spelling; es_dtype dtype; } known[] = {
        {"f2", ES_F16}, {"f4", ES_F32}, {"f8", ES_F64}};
    if (h->descr_len == 3 && (h->descr_text[0] == '<' || h->descr_text[0] == '>')) {
        for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
            if (memcmp(h->descr_text + 1, known[i].spelling, 2) == 0) {
                t->dtype = known[i].dtype;
                t->big_endian = h->descr_text[0] == '>';
                memcpy(t->descr, h->descr_text, 3);
                t->descr[3] = '\0';
                return 0;
            }
        }
    }
    return es_format_fail(err, f, h->descr_at,
                          "descr: unsupported dtype '%.*s' (supported: <f2 <f4 <f8 >f2 >f4 >f8)",
                          (int)(h->descr_len > 16 ? 16 : h->descr_len), h->descr_text);
}

/* The preamble: magic, version, header length; sets the header's byte range
 * [*hstart, *hend) and whether it must be UTF-8. */
static int parse_preamble(const es_file *f, size_t *hstart, size_t *hend, bool *utf8, es_err *err)
{
    if (f->size == 0)
        return es_format_fail(err, f, 0, "magic: empty (0 bytes); a .npy file starts with \\x93NUMPY and a version");
    if (f->size < NPY_MAGIC_LEN + 2 || memcmp(f->bytes, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return es_format_fail(err, f, 0, "magic: file does not start with \\x93NUMPY and a version");
    unsigned major = f->bytes[6], minor = f->bytes[7];
    if (major < 1 || major > 3 || minor != 0)
        return es_format_fail(err, f, 6, "version: unsupported format version %u.%u (1.0, 2.0, 3.0)",
                              major, minor);
    int len_bytes = major == 1 ? 2 : 4;
    if (f->size < 8 + (size_t)len_bytes)
        return es_format_fail(err, f, 8, "header length: file ends inside the header length");
    size_t hlen = read_le(f->bytes + 8, len_bytes);
    if (hlen > NPY_MAX_HEADER)
        return es_format_fail(err, f, 8, "header length: %zu exceeds the limit of %d bytes", hlen,
                              NPY_MAX_HEADER);
    *hstart = 8 + (size_t)len_bytes;
    *hend = *hstart + hlen;
    if (*hend > f->size)
        return es_format_fail(err, f, 8, "header length: %zu bytes of header, but the file ends at %zu",
                              hlen, f->size);
    *utf8 = major == 3;
    return 0;
}

/* Length of the UTF-8 sequence that lead byte c starts, 0 if c cannot start one. */
static size_t utf8_length(unsigned c)
{
    return c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                        : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
}

/* Index of the first byte in [start, end) that begins an invalid UTF-8 sequence
 * (bad lead or continuation byte, truncation, overlong form, surrogate, or a code
 * point above U+10FFFF), or end if the range is valid. */
static size_t utf8_invalid_at(const unsigned char *b, size_t start, size_t end)
{
    static const unsigned min_code[5] = {0, 0, 0x80, 0x800, 0x10000};
    for (size_t i = start, n; i < end; i += n) {
        n = utf8_length(b[i]);
        if (n == 0 || end - i < n)
            return i;
        unsigned v = n == 1 ? b[i] : b[i] & (0x7fu >> n);
        for (size_t k = 1; k < n; k++) {
            if ((b[i + k] & 0xc0) != 0x80)
                return i;
            v = v << 6 | (b[i + k] & 0x3fu);
        }
        if (v < min_code[n] || (v >= 0xd800 && v <= 0xdfff) || v > 0x10ffff)
            return i;
    }
    return end;
}

/* The data after the header must be exactly prod(shape) * itemsize bytes
 * (checked multiplication); sets t->nbytes. */
static int check_data_length(const es_file *f, es_tensor *t, es_err *err)
{
    size_t have = f->size - t->offset, need = es_dtype_size(t->dtype);
    for (int i = 0; i < t->rank; i++)
        if (es_mul_size(need, t->shape[i], &need) != 0)
            return es_format_fail(err, f, t->offset,
                                  "data length: shape times itemsize overflows (%zu bytes of data)",
                                  have);
    if (need != have)
        return es_format_fail(err, f, t->offset,
                              "data length: %zu bytes of data, but shape and dtype %s need %zu",
                              have, t->descr, need);
    t->nbytes = need;
    return 0;
}

/* Strict .npy parse: every rule of REFERENCE §2; ES_E_FORMAT "FILE: rule at byte N". */
int es_npy_parse(const es_file *f, es_tensor **out, es_err *err)
{
    size_t hstart = 0, hend = 0;
    bool utf8 = false;
    if (parse_preamble(f, &hstart, &hend, &utf8, err) != 0)
        return -1;
    if (utf8) {
        size_t bad = utf8_invalid_at(f->bytes, hstart, hend);
        if (bad != hend)
            return es_format_fail(err, f, bad, "header: not valid UTF-8 (version 3.0)");
    }
    if (hend == hstart || f->bytes[hend - 1] != '\n')
        return es_format_fail(err, f, hend ? hend - 1 : 0, "header: does not end with '\\n'");
    header h = {0};
    cursor c = {f, hstart, hend - 1, err};
    if (parse_dict(&c, &h) != 0)
        return -1;
    es_tensor *t = es_tensor_new(f, "");
    if (parse_descr(f, &h, t, err) != 0) {
        es_tensor_free(t);
        return -1;
    }
    for (int i = 0; i < h.rank; i++)
        t->shape[i] = h.shape[i];
    t->rank = h.rank;
    t->fortran_order = h.fortran_order;
    t->offset = hend;
    if (check_data_length(f, t, err) != 0) {
        es_tensor_free(t);
        return -1;
    }
    *out = t;
    return 0;
}
