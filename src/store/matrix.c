/* Matrices: reference-counted buffers of doubles or floats, immutable windows on them (views),
 * the model-space orientation used by the analyses, and provenance records. */
#include "store/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Shared immutable storage; matrices and their views hold references to it.
 * Reference counts use __atomic builtins because matrices are shared by the
 * HTTP worker threads and the decomposition cache. */
struct es_buffer {
    const void *data; /* n elements of elem: doubles, or floats (read as doubles) */
    es_elem elem;
    size_t n;
    void *map;       /* non-NULL: data lies in this read-only map of map_len bytes */
    size_t map_len;
    int refs;
};

/* Wrap n elements of elem at data (ownership passes to the buffer) with one
 * reference. Cannot fail. */
static es_buffer *buffer_new(const void *data, es_elem elem, size_t n)
{
    es_buffer *b = es_calloc(1, sizeof *b);
    b->data = data;
    b->elem = elem;
    b->n = n;
    b->refs = 1;
    return b;
}

/* Add a reference. Cannot fail. */
static es_buffer *buffer_retain(es_buffer *b)
{
    __atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
    return b;
}

/* Drop a reference; frees the storage with the last one. Cannot fail. */
static void buffer_release(es_buffer *b)
{
    if (b && __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        if (b->map)
            es_map_release(b->map, b->map_len);
        else
            free((void *)b->data);
        free(b);
    }
}

/* ---------------------------------------------------------------- provenance */

/* es_strdup that maps NULL to "" so provenance strings are never NULL. */
static char *dup_or_empty(const char *s) { return es_strdup(s ? s : ""); }

/* Deep copy of src into dst (src may be NULL: all fields empty). Cannot fail. */
static void prov_copy(es_provenance *dst, const es_provenance *src)
{
    static const es_provenance empty;
    if (!src)
        src = &empty;
    dst->source = dup_or_empty(src->source);
    dst->tensor = dup_or_empty(src->tensor);
    dst->dtype = dup_or_empty(src->dtype);
    dst->shape[0] = src->shape[0];
    dst->shape[1] = src->shape[1];
    memcpy(dst->sha256, src->sha256, sizeof dst->sha256);
    dst->sha256[64] = '\0';
    dst->file_sha256 = dup_or_empty(src->file_sha256);
    dst->generator = dup_or_empty(src->generator);
    dst->view = dup_or_empty(src->view);
}

/* Free the strings of a provenance record. Cannot fail. */
static void prov_free(es_provenance *p)
{
    free(p->source);
    free(p->tensor);
    free(p->dtype);
    free(p->file_sha256);
    free(p->generator);
    free(p->view);
}

/* ---------------------------------------------------------------- matrices */

/* Allocate a matrix shell with one reference on buf (taken over by the caller's
 * reference), copying id and provenance. Cannot fail. */
static es_matrix *matrix_new(const char *id, es_buffer *buf, size_t rows, size_t cols,
                             es_axis axis, const es_provenance *prov)
{
    es_matrix *m = es_calloc(1, sizeof *m);
    m->id = dup_or_empty(id);
    m->rows = rows;
    m->cols = cols;
    m->model_axis = axis;
    prov_copy(&m->prov, prov);
    m->buf = buf;
    m->ld = cols;
    m->refs = 1;
    return m;
}

/* Take ownership of data (rows x cols doubles, row-major). Cannot fail. */
es_matrix *es_matrix_from_data(const char *id, double *data, size_t rows, size_t cols,
                               es_axis axis, const es_provenance *prov)
{
    return es_matrix_from_elems(id, data, ES_ELEM_F64, rows, cols, axis, prov);
}

/* See internal.h. Cannot fail. */
es_matrix *es_matrix_from_elems(const char *id, void *data, es_elem elem, size_t rows, size_t cols, es_axis axis,
                                const es_provenance *prov)
{
    return matrix_new(id, buffer_new(data, elem, rows * cols), rows, cols, axis, prov);
}

/* See internal.h: the buffer points into the map and unmaps it. Cannot fail. */
es_matrix *es_matrix_from_map(const char *id, const void *data, es_elem elem, void *base, size_t len, size_t rows,
                              size_t cols, es_axis axis, const es_provenance *prov)
{
    es_buffer *b = buffer_new(data, elem, rows * cols);
    b->map = base;
    b->map_len = len;
    return matrix_new(id, b, rows, cols, axis, prov);
}

/* Add a reference (NULL passes through). Cannot fail. */
es_matrix *es_matrix_retain(es_matrix *m)
{
    if (m)
        __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
    return m;
}

/* Drop a reference (NULL is a no-op); the last one frees id, provenance and the
 * buffer reference. */
void es_matrix_release(es_matrix *m)
{
    if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    free(m->id);
    prov_free(&m->prov);
    es_digest_release(m->digest);
    buffer_release(m->buf);
    free(m);
}

/* Buffer strides of logical rows and columns: (i, j) lives at
 * data[off + i*row_stride + j*col_stride]. */
static void logical_strides(const es_matrix *m, size_t *row_stride, size_t *col_stride)
{
    *row_stride = m->transposed ? 1 : m->ld;
    *col_stride = m->transposed ? m->ld : 1;
}

/* Buffer element k as a double (a float converts exactly); not checked. */
static inline double buffer_at(const es_buffer *b, size_t k)
{
    return b->elem == ES_ELEM_F32 ? (double)((const float *)b->data)[k] : ((const double *)b->data)[k];
}

/* Element (i, j); indices are the caller's responsibility (not checked). */
double es_matrix_at(const es_matrix *m, size_t i, size_t j)
{
    size_t rs, cs;
    logical_strides(m, &rs, &cs);
    return buffer_at(m->buf, m->off + i * rs + j * cs);
}

/* Buffer strides between items and between coordinates of the model orientation. */
static void item_strides(const es_matrix *m, size_t *item_stride, size_t *coord_stride)
{
    size_t rs, cs;
    logical_strides(m, &rs, &cs);
    bool by_rows = m->model_axis == ES_AXIS_COLUMNS; /* items are the rows */
    *item_stride = by_rows ? rs : cs;
    *coord_stride = by_rows ? cs : rs;
}

/* Number of items: the length of the axis that is not the model axis. */
size_t es_matrix_items(const es_matrix *m)
{
    return m->model_axis == ES_AXIS_COLUMNS ? m->rows : m->cols;
}

/* d: the length of the model axis. */
size_t es_matrix_dim(const es_matrix *m)
{
    return m->model_axis == ES_AXIS_COLUMNS ? m->cols : m->rows;
}

/* Coordinate `coord` of item `item` in model space; indices are not checked. */
double es_matrix_item(const es_matrix *m, size_t item, size_t coord)
{
    size_t is, ks;
    item_strides(m, &is, &ks);
    return buffer_at(m->buf, m->off + item * is + coord * ks);
}

/* d doubles from src with stride ks into dst: memcpy when contiguous. */
static void copy_doubles(double *dst, const double *src, size_t d, size_t ks)
{
    if (ks == 1) {
        memcpy(dst, src, d * sizeof *dst);
        return;
    }
    for (size_t k = 0; k < d; k++)
        dst[k] = src[k * ks];
}

/* d floats from src with stride ks into dst as doubles (exact): one convert
 * per element in a bare loop (W_pos's 1024 x 768 items in ~0.25 ms against
 * memcpy's ~0.12 ms for doubles; strided gathers are faster than for doubles,
 * half the bytes). */
static void widen_floats(double *dst, const float *src, size_t d, size_t ks)
{
    if (ks == 1) {
        for (size_t k = 0; k < d; k++)
            dst[k] = src[k];
        return;
    }
    for (size_t k = 0; k < d; k++)
        dst[k] = src[k * ks];
}

/* Gather items (all when idx == NULL) into a new n x d row-major array of
 * doubles, one typed row loop per item (the element type is tested once per
 * item, not per element). Aborts only on allocation failure (es_malloc). */
double *es_matrix_items_copy(const es_matrix *m, const size_t *idx, size_t n)
{
    double *out = es_malloc(n * es_matrix_dim(m) * sizeof *out);
    es_matrix_items_into(m, idx, n, out);
    return out;
}

/* See store.h. */
void es_matrix_items_into(const es_matrix *m, const size_t *idx, size_t n, double *out)
{
    size_t d = es_matrix_dim(m), is, ks;
    item_strides(m, &is, &ks);
    const es_buffer *b = m->buf;
    for (size_t r = 0; r < n; r++) {
        size_t at = m->off + (idx ? idx[r] : r) * is;
        if (b->elem == ES_ELEM_F32)
            widen_floats(out + r * d, (const float *)b->data + at, d, ks);
        else
            copy_doubles(out + r * d, (const double *)b->data + at, d, ks);
    }
}

/* Items ahead whose coordinates es_matrix_items_columns asks the memory for. */
#define PREFETCH_ITEMS 8

/* One item's coordinates of a column block, shifted and scaled into out (ld
 * apart): T is the buffer's element type, the coordinate stride ks a
 * compile-time 1 in the common row-major case (the compiler unrolls it). */
#define SCALED_ITEM(T, src, ks)                                                                                      \
    do {                                                                                                             \
        const T *s_ = (src);                                                                                         \
        if (col_shift)                                                                                               \
            for (size_t j = 0; j < cols; j++)                                                                        \
                out[j * ld + r] = ((double)s_[j * (ks)] - col_shift[j] - sub) * k;                                 \
        else                                                                                                         \
            for (size_t j = 0; j < cols; j++)                                                                        \
                out[j * ld + r] = ((double)s_[j * (ks)] - sub) * k;                                                \
    } while (0)

/* See store.h: each item's cols coordinates read together (one or two cache
 * lines of a row-major matrix), transformed as they are stored (x - 0.0 and
 * x * 1.0 are x bit for bit, so a missing shift or scale changes nothing). */
void es_matrix_items_columns_scaled(const es_matrix *m, const size_t *idx, size_t n, size_t j0, size_t cols,
                                    const double *col_shift, const double *row_shift, const double *scale,
                                    double *out, size_t ld)
{
    size_t is, ks;
    item_strides(m, &is, &ks);
    const es_buffer *b = m->buf;
    size_t esz = es_elem_size(b->elem), lines = (cols * ks * esz + 63) / 64;
    for (size_t r = 0; r < n; r++) {
        size_t at = m->off + (idx ? idx[r] : r) * is + j0 * ks;
        if (r + PREFETCH_ITEMS < n) {
            const char *ahead = (const char *)b->data + (m->off + (idx ? idx[r + PREFETCH_ITEMS] : r + PREFETCH_ITEMS) *
                                                                      is + j0 * ks) * esz;
            for (size_t l = 0; l < lines && l < 8; l++)
                __builtin_prefetch(ahead + 64 * l);
        }
        double k = scale ? scale[r] : 1.0, sub = row_shift ? row_shift[r] : 0.0;
        if (b->elem == ES_ELEM_F32 && ks == 1)
            SCALED_ITEM(float, (const float *)b->data + at, 1);
        else if (b->elem == ES_ELEM_F32)
            SCALED_ITEM(float, (const float *)b->data + at, ks);
        else if (ks == 1)
            SCALED_ITEM(double, (const double *)b->data + at, 1);
        else
            SCALED_ITEM(double, (const double *)b->data + at, ks);
    }
}

/* See store.h. */
void es_matrix_items_columns(const es_matrix *m, const size_t *idx, size_t n, size_t j0, size_t cols, double *out,
                             size_t ld)
{
    es_matrix_items_columns_scaled(m, idx, n, j0, cols, NULL, NULL, NULL, out, ld);
}

/* Bytes of the whole shared buffer at its element size (a view accounts for the
 * storage it keeps alive). */
size_t es_matrix_bytes(const es_matrix *m)
{
    return m->buf->n * es_elem_size(m->buf->elem);
}

/* ---------------------------------------------------------------- views */

/* "WHAT of ID" after m's own view description (and "; "), if any. Cannot fail. */
char *es_view_description(const es_matrix *m, const char *what)
{
    return m->prov.view[0] ? es_asprintf("%s; %s of %s", m->prov.view, what, m->id)
                           : es_asprintf("%s of %s", what, m->id);
}

/* A new matrix sharing m's buffer, geometry and provenance under another id
 * (m's if NULL). Cannot fail. */
es_matrix *es_matrix_renamed(const es_matrix *m, const char *id)
{
    es_matrix *v = matrix_new(id ? id : m->id, buffer_retain(m->buf), m->rows, m->cols,
                              m->model_axis, &m->prov);
    v->off = m->off;
    v->ld = m->ld;
    v->transposed = m->transposed;
    v->axis_origin = m->axis_origin;
    v->digest = es_digest_retain(m->digest); /* the same bytes: the same hashes, when they come */
    return v;
}

/* What identifies a matrix's data as the analyses see it; see store.h. */
char *es_matrix_identity(const es_matrix *m)
{
    return es_asprintf("%s@%s#%s|axis=%s|%zux%zu", m->id, es_matrix_data_id(m), m->prov.view,
                       es_axis_name(m->model_axis), m->rows, m->cols);
}

/* A new matrix sharing m's buffer and geometry, with id (m's id if NULL) and
 * `what` appended to the provenance view description. Cannot fail. */
static es_matrix *view_of(const es_matrix *m, const char *id, const char *what)
{
    es_matrix *v = es_matrix_renamed(m, id);
    free(v->prov.view);
    v->prov.view = es_view_description(m, what);
    return v;
}

/* The window [a, b) of logical rows (rows true) or columns of m. ES_E_PARAM
 * naming "rows" or "columns" unless a < b <= their count. */
static int view_range(const es_matrix *m, const char *id, bool rows, size_t a, size_t b,
                      es_matrix **out, es_err *err)
{
    const char *axis = rows ? "rows" : "columns";
    size_t len = rows ? m->rows : m->cols;
    if (!(a < b && b <= len))
        return es_fail(err, ES_E_PARAM, axis, "%s %zu:%zu is empty or outside 0:%zu of %s", axis,
                       a, b, len, m->id);
    char what[64];
    snprintf(what, sizeof what, "%s %zu:%zu", axis, a, b);
    es_matrix *v = view_of(m, id, what);
    size_t rs, cs;
    logical_strides(m, &rs, &cs);
    v->off += a * (rows ? rs : cs);
    *(rows ? &v->rows : &v->cols) = b - a;
    *out = v;
    return 0;
}

/* Logical columns [c0, c1). ES_E_PARAM (param "columns") on an empty or outside range. */
int es_view_columns(const es_matrix *m, const char *id, size_t c0, size_t c1, es_matrix **out,
                    es_err *err)
{
    return view_range(m, id, false, c0, c1, out, err);
}

/* Logical rows [r0, r1). ES_E_PARAM (param "rows") on an empty or outside range. */
int es_view_rows(const es_matrix *m, const char *id, size_t r0, size_t r1, es_matrix **out,
                 es_err *err)
{
    return view_range(m, id, true, r0, r1, out, err);
}

/* Transpose: rows and columns swap, so does the model axis (d_model stays the
 * same physical axis). Cannot fail. */
int es_view_transpose(const es_matrix *m, const char *id, es_matrix **out, es_err *err)
{
    (void)err;
    es_matrix *v = view_of(m, id, "transpose");
    v->rows = m->cols;
    v->cols = m->rows;
    v->transposed = !m->transposed;
    v->model_axis = m->model_axis == ES_AXIS_COLUMNS ? ES_AXIS_ROWS : ES_AXIS_COLUMNS;
    *out = v;
    return 0;
}

/* Same storage with another declared model axis. ES_E_PARAM (param "axis") if
 * axis is not an es_axis value. */
int es_view_axis(const es_matrix *m, const char *id, es_axis axis, es_matrix **out, es_err *err)
{
    if (axis != ES_AXIS_COLUMNS && axis != ES_AXIS_ROWS)
        return es_fail(err, ES_E_PARAM, "axis", "unknown model axis %d", (int)axis);
    char what[64];
    snprintf(what, sizeof what, "model axis %s", es_axis_name(axis));
    es_matrix *v = view_of(m, id, what);
    v->model_axis = axis;
    v->axis_origin = ES_AXIS_STATED;
    *out = v;
    return 0;
}

/* See store.h. */
int es_view_head(const es_matrix *m, size_t n_heads, size_t head, const char *param, es_matrix **out,
                 es_err *err)
{
    size_t items = es_matrix_items(m), d = es_matrix_dim(m);
    if (n_heads == 0)
        return es_fail(err, ES_E_PARAM, param, "%s needs the number of heads of %s's model: set \"n_heads\" in its "
                       "model's configuration", param, m->id);
    if (items != d || d % n_heads != 0)
        return es_fail(err, ES_E_PARAM, param, "%s splits a d_model x d_model multi-head weight (W_Q, W_K, W_V, W_O) "
                       "into %zu heads; %s has %zu items of dimension %zu", param, n_heads, m->id, items, d);
    if (head >= n_heads)
        return es_fail(err, ES_E_PARAM, param, "%s must be a head in 0..%zu (the model has %zu heads), got %zu", param,
                       n_heads - 1, n_heads, head);
    size_t dh = d / n_heads, a = head * dh;
    char *id = es_asprintf("%s[head=%zu]", m->id, head);
    int rc = view_range(m, id, m->model_axis == ES_AXIS_COLUMNS, a, a + dh, out, err);
    free(id);
    if (rc == 0) {
        char what[96];
        snprintf(what, sizeof what, "head %zu of %zu (items %zu:%zu)", head, n_heads, a, a + dh);
        free((*out)->prov.view);
        (*out)->prov.view = es_view_description(m, what);
    }
    return rc;
}

/* See store.h. */
char *es_axis_warning(const es_matrix *m)
{
    if (m->rows != m->cols || m->axis_origin != ES_AXIS_DEFAULTED)
        return NULL;
    bool uploaded = m->prov.source && strcmp(m->prov.source, ES_UPLOAD_SOURCE) == 0;
    return es_asprintf("%s is square (%zu x %zu) and its model_axis was not stated: the default, %s, was used. "
                       "If it is a Conv1D weight [in, out] that reads the residual stream, the model axis is rows "
                       "(%s)", m->id, m->rows, m->cols, es_axis_name(m->model_axis),
                       uploaded ? "upload it again with ?model_axis=rows on the PUT"
                                : "state \"model_axis\": \"rows\" in its entry: the configuration's, or the JSON "
                                  "body of its PUT");
}

/* ES_E_INCOMPATIBLE naming param, both ids and model-axis lengths. */
int es_check_comparable(const es_matrix *a, const es_matrix *b, const char *param, es_err *err)
{
    size_t da = es_matrix_dim(a), db = es_matrix_dim(b);
    if (da == db)
        return 0;
    return es_fail(err, ES_E_INCOMPATIBLE, param,
                   "%s (model axis %s, length %zu) and %s (model axis %s, length %zu) are not "
                   "comparable: their model axes differ in length",
                   a->id, es_axis_name(a->model_axis), da, b->id, es_axis_name(b->model_axis), db);
}

/* ---------------------------------------------------------------- axis names */

/* "rows" or "columns". */
const char *es_axis_name(es_axis a) { return a == ES_AXIS_ROWS ? "rows" : "columns"; }

const char *es_axis_origin_name(es_axis_origin o)
{
    return o == ES_AXIS_BY_NAME ? "tensor_name" : o == ES_AXIS_DEFAULTED ? "default" : "stated";
}

/* Does name end in suffix at a component boundary (start or after a '.')? */
static bool ends_with_component(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0 && (n == k || name[n - k - 1] == '.');
}

/* See store.h. */
int es_conv1d_axis(const char *tensor, es_axis *out)
{
    static const struct { const char *suffix; es_axis axis; } known[] = {
        {"attn.c_attn.weight", ES_AXIS_ROWS},   {"mlp.c_fc.weight", ES_AXIS_ROWS},
        {"attn.c_proj.weight", ES_AXIS_COLUMNS}, {"mlp.c_proj.weight", ES_AXIS_COLUMNS},
    };
    for (size_t i = 0; tensor && i < sizeof known / sizeof *known; i++)
        if (ends_with_component(tensor, known[i].suffix)) {
            *out = known[i].axis;
            return 0;
        }
    return -1;
}

/* "columns" or "rows" (exact spelling); -1 for anything else. */
int es_axis_parse(const char *s, es_axis *out)
{
    if (s && strcmp(s, "columns") == 0)
        *out = ES_AXIS_COLUMNS;
    else if (s && strcmp(s, "rows") == 0)
        *out = ES_AXIS_ROWS;
    else
        return -1;
    return 0;
}
