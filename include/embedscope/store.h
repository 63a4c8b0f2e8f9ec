/* embedscope store: strict file loaders, generators, matrices and views.
 * Ownership and failure rules: see core.h. */
#ifndef EMBEDSCOPE_STORE_H
#define EMBEDSCOPE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include "embedscope/core.h"

/* ---------------------------------------------------------------- files */

/* A whole file, read into memory (es_file_map: not mapped despite the name,
 * so that a file truncated while loading is an error, not a SIGBUS), or mapped
 * (mapped: a data file of a source, source.c; an upload's unnamed file). */
typedef struct es_file {
    char *path;
    const unsigned char *bytes; /* NULL for an empty file */
    size_t size;
    bool mapped;                /* es_file_map_fd: a map, not a copy */
} es_file;

/* Read path. Fails with ES_E_IO naming the path: errno's text, not a regular
 * file (FIFO, device, directory: refused at once), no memory, or the file
 * changed size while it was read. */
int es_file_map(const char *path, es_file **out, es_err *err);
/* Map the open regular file fd read-only (fd stays the caller's): only for a
 * file nobody else can truncate (the daemon's unnamed upload files). `name` is
 * the file's name in messages (e.g. "request body"). Fails like es_file_map. */
int es_file_map_fd(int fd, const char *name, es_file **out, es_err *err);
/* Free the copy or unmap; NULL is a no-op. */
void es_file_free(es_file *f);

typedef enum es_dtype { ES_F16, ES_BF16, ES_F32, ES_F64 } es_dtype;
/* Bytes per element, 0 for an unknown value. Never fails. */
size_t es_dtype_size(es_dtype t);

/* A validated tensor inside a mapped file: element data are at
 * file->bytes + offset, nbytes long, possibly unaligned. Rank 0, 1 or 2. */
typedef struct es_tensor {
    const es_file *file;   /* borrowed: the tensor does not own the map */
    char *name;            /* tensor name ("" for .npy) */
    char descr[8];         /* the file's own dtype spelling: "<f4", "F32", ... */
    es_dtype dtype;
    bool big_endian;
    bool fortran_order;    /* column-major storage (.npy only) */
    int rank;
    size_t shape[2];       /* unused dims are 1 */
    size_t offset, nbytes;
} es_tensor;
/* Free the record (not the map it points into); NULL is a no-op. */
void es_tensor_free(es_tensor *t);

/* Strict parsers (REFERENCE.md §1-2). Every malformed input yields ES_E_FORMAT
 * with a message "FILE: rule ... at byte OFFSET"; they never read outside
 * the map. Tensors of rank > 2 are rejected (ES_E_FORMAT). */
int es_npy_parse(const es_file *f, es_tensor **out, es_err *err);
/* Validates the whole safetensors file (all tensors, offsets, no holes) and
 * returns the one named `name`; ES_E_FORMAT on a broken rule, ES_E_NOTFOUND
 * (param "tensor") if absent. */
int es_safetensors_parse(const es_file *f, const char *name, es_tensor **out, es_err *err);
/* List tensor names of a validated safetensors file (for error messages/tools).
 * *out_names is a NULL-terminated array the caller frees with es_strv_free.
 * Fails like es_safetensors_parse's validation (ES_E_FORMAT). */
int es_safetensors_names(const es_file *f, char ***out_names, es_err *err);
/* Free a NULL-terminated string vector; NULL is a no-op. */
void es_strv_free(char **v);

/* The element type a matrix keeps its values in: float for F16, BF16 and F32
 * tensors (every such value is exactly a float, so nothing is rounded and the
 * storage is half a double copy), double for F64 tensors and computed matrices. */
typedef enum es_elem { ES_ELEM_F64, ES_ELEM_F32 } es_elem;
/* The element type of a dtype's matrices (F64: double, the others float). Never fails. */
es_elem es_dtype_elem(es_dtype t);
/* Bytes per element: 8 or 4. Never fails. */
size_t es_elem_size(es_elem e);

/* Convert a tensor to a freshly allocated row-major array of es_dtype_elem(its
 * dtype), returned in *elem (rank 1 becomes 1 x n, Fortran order is transposed).
 * Fails with ES_E_FORMAT naming file and element offset if a value is NaN or
 * infinite, ES_E_NOMEM if the array cannot be allocated. */
int es_tensor_convert(const es_tensor *t, void **out, es_elem *elem, size_t *rows, size_t *cols, es_err *err);

/* ---------------------------------------------------------------- matrices */

/* Which axis of the matrix is d_model (the residual stream). Columns for
 * W_pos / W_E (rows are positions / tokens); rows for GPT-2 Conv1D weights
 * that read from the residual stream ([in, out] with in = d_model). */
typedef enum es_axis { ES_AXIS_COLUMNS, ES_AXIS_ROWS } es_axis;
const char *es_axis_name(es_axis a);                 /* "columns" | "rows" */
int es_axis_parse(const char *s, es_axis *out);      /* -1 if not a name */

/* Where a matrix's model axis came from. A square matrix whose axis was defaulted
 * may be silently wrong (a 768 x 768 Conv1D weight read with columns gives
 * plausible-looking numbers), so responses warn about it (es_axis_warning). */
typedef enum es_axis_origin {
    ES_AXIS_STATED,     /* given ("model_axis" in the config), or fixed by construction
                           (generators); views keep their source's origin unless they
                           state "model_axis" themselves */
    ES_AXIS_BY_NAME,    /* from a GPT-2 Conv1D tensor name (es_conv1d_axis) */
    ES_AXIS_DEFAULTED,  /* nothing said: the default, columns */
} es_axis_origin;
/* "stated" | "tensor_name" | "default". */
const char *es_axis_origin_name(es_axis_origin o);
/* The known model axis of a GPT-2 Conv1D weight ([in, out], y = x W) from its tensor
 * name: a name ending in "attn.c_attn.weight" or "mlp.c_fc.weight" (after "." or at
 * the start, so "h.0.…" and "transformer.h.0.…" both match) reads the residual
 * stream: in = d_model, model axis rows; "attn.c_proj.weight" or "mlp.c_proj.weight"
 * writes it: out = d_model, model axis columns. 0 and *out set when the name is one
 * of these, else -1 (*out untouched). Never fails otherwise. */
int es_conv1d_axis(const char *tensor, es_axis *out);

typedef struct es_provenance {
    char *source;       /* file path (as written in the config for config-loaded
                           matrices), or "generator:<name>" */
    char *tensor;       /* tensor name, "" for .npy and generators */
    char *dtype;        /* the file's dtype spelling, "f64" for generators */
    size_t shape[2];    /* shape as stored in the file / generated */
    char sha256[65];    /* of the bytes converted (tensor data; generated doubles);
                           "" while a mapped file's is computed: read it with
                           es_matrix_sha256, never here */
    char *file_sha256;  /* of the whole file; "" for generators (and while
                           computed: es_matrix_file_sha256) */
    char *generator;    /* JSON text of generator parameters, "" if loaded */
    char *view;         /* human description of views applied, "" if none */
} es_provenance;

/* Shared, immutable, reference-counted storage of one es_elem type: doubles, or
 * floats for float32/float16/bfloat16 sources. Private to the store: every reader
 * goes through the accessors below, which return doubles (a float converts exactly). */
typedef struct es_buffer es_buffer;

/* An immutable matrix: a window on a buffer, maybe transposed, with a model axis.
 * Logical element (i, j), 0 <= i < rows, 0 <= j < cols. */
typedef struct es_matrix {
    char *id;               /* "model/matrix" */
    size_t rows, cols;
    es_axis model_axis;
    es_axis_origin axis_origin;  /* ES_AXIS_STATED unless a loader says otherwise */
    es_provenance prov;
    /* private: */
    struct es_digest *digest; /* a mapped file's sha256s, computed after loading (NULL: prov's are final) */
    es_buffer *buf;
    size_t off, ld;         /* element (i,j) = data[off + i*ld + j] (or swapped) */
    bool transposed;
    int refs;
} es_matrix;

/* Reference counting (see core.h); both accept NULL and never fail. es_matrix_at:
 * logical element (i, j), indices not checked. */
es_matrix *es_matrix_retain(es_matrix *m);
void es_matrix_release(es_matrix *m);
double es_matrix_at(const es_matrix *m, size_t i, size_t j);

/* The model-space orientation used by every analysis: n items x d coordinates,
 * d = length of the model axis. item(i, j) = at(i, j) for columns, at(j, i) for rows. */
size_t es_matrix_items(const es_matrix *m);
size_t es_matrix_dim(const es_matrix *m);
double es_matrix_item(const es_matrix *m, size_t item, size_t coord);
/* Copy the given items (all if idx == NULL, n = items) into a new n x d row-major
 * array of doubles (float storage converted on the way). Aborts on OOM
 * (es_malloc); otherwise cannot fail. */
double *es_matrix_items_copy(const es_matrix *m, const size_t *idx, size_t n);
/* The same into out (n x d doubles, the caller's): a stream of the matrix reuses
 * one small buffer that stays in the CPU's cache. Cannot fail. */
void es_matrix_items_into(const es_matrix *m, const size_t *idx, size_t n, double *out);
/* Coordinates j0 .. j0 + cols - 1 of the given items (all if idx == NULL),
 * transposed: out[j * ld + r] = item(idx[r], j0 + j) as a double, ld >= n
 * (column blocks of a selection without copying the whole of it). Indices are
 * not checked; cannot fail. */
void es_matrix_items_columns(const es_matrix *m, const size_t *idx, size_t n, size_t j0, size_t cols, double *out,
                             size_t ld);
/* The same, each value shifted and scaled in the one pass that reads it:
 * out[j * ld + r] = (item(idx[r], j0 + j) - col_shift[j] - row_shift[r]) *
 * scale[r] (col_shift: cols values, row_shift and scale: n; a NULL shift is 0
 * and a NULL scale 1, bit for bit the plain value). Column blocks of a
 * selection's normalised rows without a second pass over them. */
void es_matrix_items_columns_scaled(const es_matrix *m, const size_t *idx, size_t n, size_t j0, size_t cols,
                                    const double *col_shift, const double *row_shift, const double *scale,
                                    double *out, size_t ld);
/* Bytes held by the matrix's buffer, at its element size (for listings, metrics
 * and upload accounting): rows x cols x 4 for a float32 source. */
size_t es_matrix_bytes(const es_matrix *m);

/* The sha256s of a matrix mapped from its file (a little-endian float64
 * C-order tensor loaded without a record in cache_dir) are computed after it
 * is loaded, on background threads (digest.c), so the matrix is served at
 * once; every other matrix's are known when it is made. */
typedef enum es_sha_state {
    ES_SHA_KNOWN,     /* prov's, or computed since */
    ES_SHA_COMPUTING, /* being computed */
    ES_SHA_FAILED,    /* not known and never will be in this process: the file
                         changed while it was hashed (or could not be read) */
} es_sha_state;
/* "known" | "computing" | "failed". */
const char *es_sha_state_name(es_sha_state s);
/* m's state now (acquire: a KNOWN state makes the hashes below readable). */
es_sha_state es_matrix_sha_state(const es_matrix *m);
/* The sha256 of m's data, or NULL while it is not known (computing, failed).
 * Never fails; the text lives as long as m. */
const char *es_matrix_sha256(const es_matrix *m);
/* The whole file's sha256 ("" for generators and derived data), or NULL while
 * it is not known. */
const char *es_matrix_file_sha256(const es_matrix *m);
/* Why the hash failed (ES_SHA_FAILED), else NULL. */
const char *es_matrix_sha_error(const es_matrix *m);
/* What names m's data in identities and keys: its sha256, or for a matrix
 * whose sha256 was not known when it was loaded, for as long as it lives,
 * "stat:NONCE:DEV:INO:SIZE:MTIME:CTIME:OFFSET" (the file as mapped and a nonce
 * of this process, so no other process, and no later start, can take it for
 * its own data: caches on disk shared by daemons never match it; and the
 * hash's arrival does not make everything computed under it unreachable).
 * Once the hash has failed, another such name (":changed" appended): the
 * file's bytes may have changed, so nothing computed before is used again.
 * Never fails; the text lives as long as m. */
const char *es_matrix_data_id(const es_matrix *m);
/* How a provisional data id starts (a sha256 never does). */
#define ES_DATA_ID_PROVISIONAL "stat:"
/* Block until m's sha256 is known or has failed, and return which. For tests,
 * benchmarks and compute threads; never an HTTP thread. */
es_sha_state es_matrix_sha_wait(const es_matrix *m);
/* How many matrices' background sha256s have been settled (known or failed)
 * in this process: a rendering of the catalogue made at an older count may
 * show one as computing. Never fails. */
unsigned long es_digests_generation(void);
/* While held, background sha256 jobs started wait before reading a byte;
 * released, they go on. The daemon holds them while its cost model times
 * its probes (a start's own reads and hashing threads beside them slowed the
 * calibration 5x on a 16-core host and would bias its rates). Never fails. */
void es_digests_hold(bool hold);
/* Stop the background hashing at once (shutdown; the hashes not finished
 * stay not known) and wait for its threads. Never fails. */
void es_digests_stop(void);

/* A new matrix sharing m's storage, geometry and provenance under another id
 * (m's if NULL): what a reloaded configuration keeps of an unchanged file.
 * Never fails. */
es_matrix *es_matrix_renamed(const es_matrix *m, const char *id);
/* "ID@DATA#VIEW|axis=A|RxC" (DATA: es_matrix_data_id, the sha256 of the data):
 * what identifies m's data in cache keys and ETags.
 * Two matrices with equal identities hold the same items in model space (the
 * view text names every step from the hashed data). Caller frees; never fails. */
char *es_matrix_identity(const es_matrix *m);

/* Build a matrix owning a copy-free transfer of `data` (rows x cols row-major,
 * ownership of data passes to the matrix). id and provenance fields are copied.
 * Never fails. */
es_matrix *es_matrix_from_data(const char *id, double *data, size_t rows, size_t cols,
                               es_axis axis, const es_provenance *prov);

/* A file opened once for loading several matrices from it: mapped once, its
 * format (.npy, or safetensors with the whole header) validated once at the first
 * load, its whole-file sha256 computed once. Loads read the shared map; the
 * matrices they return own their data (or, little-endian float64 in C order,
 * a read-only map of the file's bytes of their own) and outlive the source. Not thread-safe
 * (one thread at a time). */
typedef struct es_source es_source;

/* Open path (mapped read-only at the first load). ES_E_IO naming the path
 * (see es_file_open). The format is
 * .npy by extension or magic (a ".safetensors" name wins), otherwise safetensors. */
int es_source_open(const char *path, es_source **out, es_err *err);
/* es_source_open with converted copies kept in cache_dir (NULL: none, the
 * same as es_source_open). With one, the file is opened and stat'ed here but
 * mapped only when a tensor has no valid record there: a tensor loaded before from
 * a file with the same device, inode, size, modification and status-change
 * times is mapped from its checked copy (the same provenance, sha256s
 * included; a little-endian float64 C-order tensor from the file's own bytes,
 * its record holding only the sha256s) instead of being read, hashed and
 * converted; others are loaded
 * from the file and their copies written. A corrupt or truncated copy is
 * logged, deleted and replaced, never used; failing to write one is logged.
 * Fails like es_source_open (ES_E_IO naming the path); later reads fail in
 * es_source_load_tensor, with ES_E_IO. */
int es_source_open_cached(const char *path, const char *cache_dir, es_source **out, es_err *err);
/* How many tensors this source has mapped from its cache_dir's copies so
 * far (0 without one). Never fails. */
size_t es_source_cache_hits(const es_source *s);
/* How many of s's tensors so far are matrices borrowing the file's own bytes
 * (little-endian float64 in C order, mapped read-only, not converted; see
 * source.c), with or without a record in cache_dir. */
size_t es_source_in_place(const es_source *s);
/* es_source_open of an open file (fd stays the caller's), called `name` in
 * provenance and messages; the format is .npy by magic, otherwise safetensors.
 * Fails like es_file_map_fd. */
int es_source_open_fd(int fd, const char *name, es_source **out, es_err *err);
/* Load one matrix from the source: .npy (tensor NULL or "") or the named tensor
 * of a safetensors file; rank-1 tensors load as 1 x n. Its provenance source is
 * `source_name` (NULL: the path given to es_source_open), e.g. the path as
 * written in a configuration; error messages always name the opened path.
 * Failures: ES_E_PARAM (param "tensor") on a name given for .npy or missing for
 * safetensors, ES_E_NOTFOUND (param "tensor") for an absent tensor, ES_E_FORMAT
 * (rules, rank, dtype, NaN/Inf), ES_E_NOMEM. */
int es_source_load_tensor(es_source *s, const char *id, const char *tensor, es_axis axis,
                          const char *source_name, es_matrix **out, es_err *err);
/* Unmap and free (NULL is a no-op). */
void es_source_free(es_source *s);

/* Load one matrix from a file opened for it alone (es_source_open, then
 * es_source_load_tensor with the path as provenance source); fails as those. */
int es_matrix_load(const char *id, const char *path, const char *tensor, es_axis axis,
                   es_matrix **out, es_err *err);

/* Views (no copy). Column range [c0, c1) with step 1; transpose swaps rows and
 * columns and the model axis. es_view_columns / es_view_rows fail with ES_E_PARAM
 * (param "columns" / "rows") on an empty or outside range; es_view_transpose never
 * fails. */
int es_view_columns(const es_matrix *m, const char *id, size_t c0, size_t c1, es_matrix **out, es_err *err);
int es_view_rows(const es_matrix *m, const char *id, size_t r0, size_t r1, es_matrix **out, es_err *err);
int es_view_transpose(const es_matrix *m, const char *id, es_matrix **out, es_err *err);
/* Same storage, another declared model axis. ES_E_PARAM (param "axis") if axis
 * is not an es_axis value. */
int es_view_axis(const es_matrix *m, const char *id, es_axis axis, es_matrix **out, es_err *err);

/* Head `head` of n_heads of a multi-head weight: a view of the items
 * [head * dh, (head + 1) * dh), dh = items / n_heads — the per-head columns of
 * GPT-2's W_Q, W_K, W_V (model axis rows) or rows of W_O (model axis columns).
 * Only a d_model x d_model weight (items == d) splits into heads: c_attn's [q|k|v]
 * or W_pos would be cut into meaningless blocks. id "<m's id>[head=<h>]" (a name
 * no configuration can use, so caches never mistake it for another matrix), view
 * text "head h of n_heads (items a:b)". ES_E_PARAM naming param if n_heads is 0
 * (not configured), does not divide d, head >= n_heads, or m is not d x d. */
int es_view_head(const es_matrix *m, size_t n_heads, size_t head, const char *param, es_matrix **out,
                 es_err *err);

/* Provenance "source" of a matrix uploaded with PUT (a file body). */
#define ES_UPLOAD_SOURCE "upload"

/* Warning text when m is square and its model axis was defaulted (see
 * es_axis_origin), else NULL, saying how to state it: ?model_axis= on the PUT
 * for an upload, "model_axis" in its entry otherwise. Caller frees. Never fails. */
char *es_axis_warning(const es_matrix *m);

/* Two matrices are comparable in model space when their model axes have equal
 * length; otherwise ES_E_INCOMPATIBLE naming `param` (the request's name for b)
 * and, in the message, both ids and lengths. */
int es_check_comparable(const es_matrix *a, const es_matrix *b, const char *param, es_err *err);

/* ---------------------------------------------------------------- generators */

/* Vaswani sinusoidal encoding, interleaved: PE(p,2i)=sin(p w_i), PE(p,2i+1)=cos(p w_i),
 * w_i = base^(-2i/d). d must be even, base > 1. Model axis: columns. ES_E_PARAM
 * naming n_positions, d_model or base; ES_E_NOMEM if the table cannot be allocated. */
int es_gen_sinusoidal(const char *id, size_t n_positions, size_t d_model, double base,
                      es_matrix **out, es_err *err);
/* RoPE angle table, n_positions x d_model: columns 2i and 2i+1 hold cos(m t_i) and
 * sin(m t_i), t_i = base^(-2i/d). Fails like es_gen_sinusoidal. */
int es_gen_rope(const char *id, size_t n_positions, size_t d_model, double base,
                es_matrix **out, es_err *err);
/* Seeded Gaussian n x d with singular values s_j = (j+1)^(-decay) (exactly, via
 * orthonormalised Gaussian factors), scaled so s_0 = scale. Model axis: columns.
 * ES_E_PARAM naming the bad parameter, ES_E_NOMEM, ES_E_NUMERIC if LAPACK fails. */
int es_gen_gaussian(const char *id, size_t rows, size_t cols, double decay, double scale,
                    uint64_t seed, es_matrix **out, es_err *err);

/* ---------------------------------------------------------------- derived matrices */

/* A new matrix of the same shape and model axis in which each group of g consecutive
 * items [i g, (i+1) g) is replaced by its mean (the last, possibly partial, group by
 * its own mean). g = 1 reproduces the values bitwise. Provenance: the source's, the
 * view text extended by "rows averaged in groups of g of <source id>", sha256 of the
 * new doubles (so cache keys never collide with the source); id NULL keeps m's id.
 * ES_E_PARAM "average" unless 1 <= g <= items. */
int es_matrix_average_rows(const es_matrix *m, const char *id, size_t g, es_matrix **out,
                           es_err *err);
/* The same for a row selection: the n items idx[0..n), in that order, in groups of
 * g consecutive entries (idx[0..g), idx[g..2g), ...: groups start at the first
 * selected item; the last may be shorter), each replaced by its group's mean; items
 * outside idx keep their values. idx NULL: every item in order (es_matrix_average_rows).
 * View text "<n> selected rows from row <idx[0]> averaged in groups of <g>".
 * ES_E_PARAM naming param unless 1 <= g <= n. */
int es_matrix_average_groups(const es_matrix *m, const char *id, const size_t *idx, size_t n, size_t g,
                             const char *param, es_matrix **out, es_err *err);
/* The group-size check of es_matrix_average_groups alone (a request refused
 * before its work is queued): ES_E_PARAM naming param unless 1 <= g <= n (the
 * items of m when selected is false). */
int es_group_size_check(const es_matrix *m, bool selected, size_t n, size_t g, const char *param, es_err *err);

/* Which comes first when a request both selects rows and averages them. */
typedef enum es_average_order {
    ES_AVERAGE_SELECTED,  /* select, then average the selected rows in groups of g */
    ES_AVERAGE_ALL,       /* average the whole matrix from item 0, then select */
} es_average_order;
/* "select_then_average" | "average_then_select". */
const char *es_average_order_name(es_average_order o);
/* The first selected item of each group, in selection order, into out (room for n):
 * ES_AVERAGE_SELECTED groups entries idx[k g .. (k+1) g); ES_AVERAGE_ALL groups items
 * by item / g (a group counts once, at its first selected item). Returns the number
 * of groups. Cannot fail. */
size_t es_average_leaders(const size_t *idx, size_t n, size_t g, es_average_order order, size_t *out);

#endif
