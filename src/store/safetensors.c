/* Strict safetensors parser (REFERENCE.md §1, huggingface safetensors/src/tensor.rs).
 *
 * The whole file is validated, in the reference validator's order, before any
 * tensor is returned. Every dtype of the format is known (so that offsets of all
 * tensors are checked with their real sizes); only F16, BF16, F32 and F64 can be
 * converted, and asking for a tensor of another dtype fails with ES_E_FORMAT.
 * Rules 4 and 5 come from one jansson decoding pass (JSON_REJECT_DUPLICATES), so
 * a duplicate key is reported where the decoder meets it. Beyond the reference,
 * tensor entries may hold only the keys dtype, shape and data_offsets. */
#include "store/internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER 100000000ULL
#define ST_PREFIX 8

/* Every safetensors dtype with its size in bytes; `supported` marks the ones
 * es_tensor_convert converts. */
static const struct st_dtype {
    const char *name;
    size_t size;
    bool supported;
    es_dtype dtype;
} st_dtypes[] = {
    {"BOOL", 1, false, 0},    {"U8", 1, false, 0},      {"I8", 1, false, 0},
    {"F8_E5M2", 1, false, 0}, {"F8_E4M3", 1, false, 0}, {"I16", 2, false, 0},
    {"U16", 2, false, 0},     {"F16", 2, true, ES_F16}, {"BF16", 2, true, ES_BF16},
    {"I32", 4, false, 0},     {"U32", 4, false, 0},     {"F32", 4, true, ES_F32},
    {"F64", 8, true, ES_F64}, {"I64", 8, false, 0},     {"U64", 8, false, 0},
};

/* One validated header entry. name points into the JSON document. */
typedef struct entry {
    const char *name;
    const struct st_dtype *dtype;
    int rank;
    size_t shape[2];   /* first two dims (unused ones are 1) */
    size_t nelem;
    size_t begin, end; /* relative to the byte buffer */
} entry;

/* A validated file: the decoded header and its entries sorted by offsets. */
struct es_st_layout {
    const es_file *f;  /* borrowed */
    json_t *root;
    entry *entries;
    size_t n;
    size_t data_start; /* 8 + N */
};

/* Release the decoded header, the entries and the record (NULL is a no-op). */
void es_st_layout_free(es_st_layout *l)
{
    if (!l)
        return;
    free(l->entries);
    json_decref(l->root);
    free(l);
}

/* File offset of the first occurrence of "name" in the header (where the entry
 * starts), or the header's start when it is spelled with escapes. */
static size_t key_offset(const es_file *f, size_t header_len, const char *name)
{
    size_t n = strlen(name);
    const unsigned char *h = f->bytes + ST_PREFIX;
    for (size_t i = 0; i + n + 2 <= header_len; i++)
        if (h[i] == '"' && memcmp(h + i + 1, name, n) == 0 && h[i + 1 + n] == '"')
            return ST_PREFIX + i;
    return ST_PREFIX;
}

/* Rules 1-3: prefix present, N within the cap, header inside the file. */
static int check_prefix(const es_file *f, size_t *header_len, es_err *err)
{
    if (f->size == 0)
        return es_format_fail(err, f, 0, "rule 1 (file shorter than 8 bytes): empty (0 bytes)");
    if (f->size < ST_PREFIX)
        return es_format_fail(err, f, 0, "rule 1 (file shorter than 8 bytes): %zu bytes", f->size);
    uint64_t n = 0;
    for (int i = ST_PREFIX - 1; i >= 0; i--)
        n = n << 8 | f->bytes[i];
    if (n > ST_MAX_HEADER)
        return es_format_fail(err, f, 0, "rule 2 (header length %llu exceeds %llu)",
                              (unsigned long long)n, ST_MAX_HEADER);
    if (n > f->size - ST_PREFIX)
        return es_format_fail(err, f, ST_PREFIX,
                              "rule 3 (header of %llu bytes runs past the end of the %zu-byte file)",
                              (unsigned long long)n, f->size);
    *header_len = (size_t)n;
    return 0;
}

/* A JSON integer in [0, SIZE_MAX]. */
static bool as_size(const json_t *v, size_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (size_t)json_integer_value(v);
    return true;
}

/* Rule 4 for one tensor entry: object with exactly dtype (known string), shape
 * (array of non-negative integers) and data_offsets ([begin, end]). */
static int parse_entry(const es_file *f, size_t hlen, const char *name, json_t *info, entry *e,
                       es_err *err)
{
    size_t at = key_offset(f, hlen, name);
    json_t *dtype = json_object_get(info, "dtype"), *shape = json_object_get(info, "shape"),
           *offs = json_object_get(info, "data_offsets");
    if (!json_is_object(info) || json_object_size(info) != 3 || !dtype || !shape || !offs)
        return es_format_fail(err, f, at,
                              "rule 4 (tensor '%s' must be an object with exactly dtype, shape "
                              "and data_offsets)", name);
    e->name = name;
    e->dtype = NULL;
    for (size_t i = 0; json_is_string(dtype) && i < sizeof st_dtypes / sizeof *st_dtypes; i++)
        if (strcmp(json_string_value(dtype), st_dtypes[i].name) == 0)
            e->dtype = &st_dtypes[i];
    if (!e->dtype)
        return es_format_fail(err, f, at, "rule 4 (tensor '%s' has an unknown dtype)", name);
    if (!json_is_array(shape) || json_array_size(shape) > (size_t)INT32_MAX)
        return es_format_fail(err, f, at, "rule 4 (tensor '%s': shape is not an array)", name);
    e->rank = (int)json_array_size(shape);
    e->shape[0] = e->shape[1] = 1;
    e->nelem = 1;
    bool overflow = false;
    for (size_t i = 0; i < json_array_size(shape); i++) {
        size_t dim;
        if (!as_size(json_array_get(shape, i), &dim))
            return es_format_fail(err, f, at,
                                  "rule 4 (tensor '%s': shape holds a non-integer or negative value)",
                                  name);
        if (i < 2)
            e->shape[i] = dim;
        overflow |= es_mul_size(e->nelem, dim, &e->nelem) != 0;
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !as_size(json_array_get(offs, 0), &e->begin) || !as_size(json_array_get(offs, 1), &e->end))
        return es_format_fail(err, f, at,
                              "rule 4 (tensor '%s': data_offsets is not two non-negative integers)",
                              name);
    if (overflow)
        e->nelem = SIZE_MAX; /* rule 6 reports it after sorting, as the reference does */
    return 0;
}

/* Rule 4 for __metadata__: an object whose values are all strings. */
static int check_metadata(const es_file *f, size_t hlen, json_t *meta, es_err *err)
{
    const char *key;
    json_t *value;
    if (!json_is_object(meta))
        return es_format_fail(err, f, key_offset(f, hlen, "__metadata__"),
                              "rule 4 (__metadata__ is not an object)");
    json_object_foreach(meta, key, value) {
        if (!json_is_string(value))
            return es_format_fail(err, f, key_offset(f, hlen, key),
                                  "rule 4 (__metadata__ value of '%s' is not a string)", key);
    }
    return 0;
}

/* Order entries by (begin, end), as the reference sorts them. */
static int by_offsets(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Rules 6 and 7 over the sorted entries: contiguous, consistent, no bytes left over. */
static int check_offsets(const es_file *f, const es_st_layout *l, es_err *err)
{
    size_t expected = 0;
    for (size_t i = 0; i < l->n; i++) {
        const entry *e = &l->entries[i];
        size_t at = l->data_start + e->begin, nbytes; /* cannot overflow: both < 2^63 */
        if (e->end < e->begin)
            return es_format_fail(err, f, at, "rule 6 (tensor '%s': data_offsets end %zu < begin %zu)",
                                  e->name, e->end, e->begin);
        if (e->begin != expected)
            return es_format_fail(err, f, at, "rule 6 (tensor '%s' begins at %zu, expected %zu: %s)",
                                  e->name, e->begin, expected, e->begin > expected ? "gap" : "overlap");
        if (e->nelem == SIZE_MAX || es_mul_size(e->nelem, e->dtype->size, &nbytes) != 0)
            return es_format_fail(err, f, at, "rule 6 (tensor '%s': element or byte count overflows)",
                                  e->name);
        if (e->end - e->begin != nbytes)
            return es_format_fail(err, f, at,
                                  "rule 6 (tensor '%s': data_offsets span %zu bytes, shape and dtype "
                                  "%s need %zu)", e->name, e->end - e->begin, e->dtype->name, nbytes);
        expected = e->end;
    }
    size_t data_len = f->size - l->data_start;
    if (expected != data_len)
        return es_format_fail(err, f, l->data_start + (expected < data_len ? expected : data_len),
                              "rule 7 (tensor data ends at %zu but the byte buffer holds %zu bytes: %s)",
                              expected, data_len, expected < data_len ? "bytes left over" : "truncated");
    return 0;
}

/* Decode the header (rules 4, 5) and collect its entries. */
static int decode_header(const es_file *f, size_t hlen, es_st_layout *l, es_err *err)
{
    json_error_t je;
    l->root = json_loadb((const char *)f->bytes + ST_PREFIX, hlen, JSON_REJECT_DUPLICATES, &je);
    if (!l->root) {
        bool dup = strstr(je.text, "duplicate") != NULL;
        return es_format_fail(err, f, ST_PREFIX + (size_t)(je.position > 0 ? je.position : 0),
                              "rule %d (%s: %s)", dup ? 5 : 4,
                              dup ? "duplicate key in header" : "header is not UTF-8 JSON", je.text);
    }
    if (!json_is_object(l->root))
        return es_format_fail(err, f, ST_PREFIX, "rule 4 (header is not a JSON object)");
    l->entries = es_calloc(json_object_size(l->root), sizeof *l->entries);
    const char *name;
    json_t *info;
    json_object_foreach(l->root, name, info) {
        int rc = strcmp(name, "__metadata__") == 0
                     ? check_metadata(f, hlen, info, err)
                     : parse_entry(f, hlen, name, info, &l->entries[l->n++], err);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Validate the whole file (rules 1-7, in the reference validator's order) and
 * keep its layout for es_safetensors_tensor; ES_E_FORMAT "FILE: rule N (...) at
 * byte OFFSET" on the first rule broken. f must outlive the layout. */
int es_safetensors_validate(const es_file *f, es_st_layout **out, es_err *err)
{
    size_t hlen = 0;
    if (check_prefix(f, &hlen, err) != 0)
        return -1;
    es_st_layout *l = es_calloc(1, sizeof *l);
    l->f = f;
    l->data_start = ST_PREFIX + hlen;
    if (decode_header(f, hlen, l, err) != 0) {
        es_st_layout_free(l);
        return -1;
    }
    qsort(l->entries, l->n, sizeof *l->entries, by_offsets);
    if (check_offsets(f, l, err) != 0) {
        es_st_layout_free(l);
        return -1;
    }
    *out = l;
    return 0;
}

/* At most this many tensor names, and this many characters of them, in a message. */
#define NAMES_LISTED 50
#define NAMES_CHARS 320

/* The first tensor names of l in data order (at most NAMES_LISTED, within
 * NAMES_CHARS), "and N more" after them. Caller frees. Never fails. */
char *es_safetensors_name_list(const es_st_layout *l)
{
    es_buf b;
    es_buf_init(&b, 128);
    size_t i = 0;
    for (; i < l->n && i < NAMES_LISTED && b.len + strlen(l->entries[i].name) + 2 <= NAMES_CHARS; i++)
        es_buf_printf(&b, "%s%s", i ? ", " : "", l->entries[i].name);
    if (i < l->n)
        es_buf_printf(&b, "%s%zu more", i ? " and " : "", l->n - i);
    if (l->n == 0)
        es_buf_printf(&b, "none");
    return b.s;
}

/* The validated entry `name` as an es_tensor; ES_E_NOTFOUND (param "tensor") if
 * absent, listing the names there are (es_safetensors_name_list); ES_E_FORMAT
 * for a rank above 2 or a dtype that cannot be converted. */
int es_safetensors_tensor(const es_st_layout *l, const char *name, es_tensor **out, es_err *err)
{
    const es_file *f = l->f;
    const entry *e = NULL;
    for (size_t i = 0; i < l->n && !e; i++)
        if (strcmp(l->entries[i].name, name) == 0)
            e = &l->entries[i];
    if (!e) {
        char *names = es_safetensors_name_list(l);
        int rc = es_fail(err, ES_E_NOTFOUND, "tensor", "%s: no tensor named '%.64s'; its %zu tensors: %s", f->path,
                         name, l->n, names);
        free(names);
        return rc;
    }
    size_t at = key_offset(f, l->data_start - ST_PREFIX, name);
    if (e->rank > 2)
        return es_format_fail(err, f, at, "tensor '%s' has rank %d; ranks above 2 are unsupported",
                              name, e->rank);
    if (!e->dtype->supported)
        return es_format_fail(err, f, at,
                              "tensor '%s' has dtype %s; supported dtypes: F16 BF16 F32 F64", name,
                              e->dtype->name);
    es_tensor *t = es_tensor_new(f, name);
    snprintf(t->descr, sizeof t->descr, "%s", e->dtype->name);
    t->dtype = e->dtype->dtype;
    t->rank = e->rank;
    t->shape[0] = e->shape[0];
    t->shape[1] = e->shape[1];
    t->offset = l->data_start + e->begin;
    t->nbytes = e->end - e->begin;
    *out = t;
    return 0;
}

/* Validate the file, then return tensor `name`. Fails as es_safetensors_validate,
 * then es_safetensors_tensor. */
int es_safetensors_parse(const es_file *f, const char *name, es_tensor **out, es_err *err)
{
    es_st_layout *l;
    if (es_safetensors_validate(f, &l, err) != 0)
        return -1;
    int rc = es_safetensors_tensor(l, name ? name : "", out, err);
    es_st_layout_free(l);
    return rc;
}

/* Validate the file and list its tensor names in data order (NULL-terminated,
 * free with es_strv_free). Fails as es_safetensors_validate. */
int es_safetensors_names(const es_file *f, char ***out_names, es_err *err)
{
    es_st_layout *l;
    if (es_safetensors_validate(f, &l, err) != 0)
        return -1;
    char **names = es_calloc(l->n + 1, sizeof *names);
    for (size_t i = 0; i < l->n; i++)
        names[i] = es_strdup(l->entries[i].name);
    es_st_layout_free(l);
    *out_names = names;
    return 0;
}

/* Free a NULL-terminated string vector (NULL is a no-op). */
void es_strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}
