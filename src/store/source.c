/* Loading matrices from files: an es_source maps a file once, validates its
 * format once (at the first load) and hashes it once, so that a configuration
 * taking many tensors from one safetensors file does that work once per file,
 * not once per tensor. es_matrix_load is the one-off form. */
#include "store/internal.h"

#include <stdlib.h>
#include <string.h>

struct es_source {
    es_file *file;
    bool npy;                /* .npy (one unnamed array), else safetensors */
    es_tensor *npy_array;    /* .npy: the parsed array, after the first load */
    es_st_layout *layout;    /* safetensors: the validated header, after the first load */
    char file_sha256[65];    /* "" until the first successful load */
};

/* True if path ends with suffix. */
static bool ends_with(const char *path, const char *suffix)
{
    size_t n = strlen(path), k = strlen(suffix);
    return n >= k && strcmp(path + n - k, suffix) == 0;
}

/* A source over the mapped f (taken over), .npy when its name says so or by
 * magic unless the name ends in .safetensors. Cannot fail. */
static es_source *source_of(es_file *f)
{
    bool npy_magic = f->size >= 6 && memcmp(f->bytes, "\x93NUMPY", 6) == 0;
    es_source *s = es_calloc(1, sizeof *s);
    s->file = f;
    s->npy = ends_with(f->path, ".npy") || (!ends_with(f->path, ".safetensors") && npy_magic);
    return s;
}

/* Map path and decide its format (source_of). ES_E_IO as es_file_map. */
int es_source_open(const char *path, es_source **out, es_err *err)
{
    es_file *f;
    if (es_file_map(path, &f, err) != 0)
        return -1;
    *out = source_of(f);
    return 0;
}

/* es_source_open of an open descriptor named `name`. ES_E_IO as es_file_map_fd. */
int es_source_open_fd(int fd, const char *name, es_source **out, es_err *err)
{
    es_file *f;
    if (es_file_map_fd(fd, name, &f, err) != 0)
        return -1;
    *out = source_of(f);
    return 0;
}

/* Unmap and free the source and what it parsed (NULL is a no-op). */
void es_source_free(es_source *s)
{
    if (!s)
        return;
    es_tensor_free(s->npy_array);
    es_st_layout_free(s->layout);
    es_file_free(s->file);
    free(s);
}

/* The tensor to load, in *t, and whether the caller must free it (*owned).
 * Validates the file on first use and keeps the result. ES_E_PARAM (param
 * "tensor") on a name given for .npy or missing for safetensors; parser failures
 * otherwise (a failed validation is not kept: the next call fails the same way). */
static int find_tensor(es_source *s, const char *tensor, es_tensor **t, bool *owned, es_err *err)
{
    const es_file *f = s->file;
    bool named = tensor && tensor[0];
    *owned = !s->npy;
    if (s->npy && named)
        return es_fail(err, ES_E_PARAM, "tensor", "%s: a .npy file holds one unnamed array, not '%s'",
                       f->path, tensor);
    if (s->npy) {
        if (!s->npy_array && es_npy_parse(f, &s->npy_array, err) != 0)
            return -1;
        *t = s->npy_array;
        return 0;
    }
    if (!named)
        return es_fail(err, ES_E_PARAM, "tensor", "%s: a safetensors file needs a tensor name",
                       f->path);
    if (!s->layout && es_safetensors_validate(f, &s->layout, err) != 0)
        return -1;
    return es_safetensors_tensor(s->layout, tensor, t, err);
}

/* Convert one tensor of the shared map and describe it (see store.h for the
 * failures). The whole-file sha256 is computed at the first successful load. */
int es_source_load_tensor(es_source *s, const char *id, const char *tensor, es_axis axis,
                          const char *source_name, es_matrix **out, es_err *err)
{
    es_tensor *t;
    bool owned;
    if (find_tensor(s, tensor, &t, &owned, err) != 0)
        return -1;
    double *data;
    size_t rows, cols;
    int rc = es_tensor_to_double(t, &data, &rows, &cols, err);
    if (rc == 0) {
        if (!s->file_sha256[0])
            es_sha256_hex(s->file->bytes, s->file->size, s->file_sha256);
        es_provenance prov = {
            .source = (char *)(source_name ? source_name : s->file->path),
            .tensor = t->name,
            .dtype = t->descr,
            .shape = {t->shape[0], t->shape[1]},
            .file_sha256 = s->file_sha256,
            .generator = "",
            .view = "",
        };
        es_sha256_hex(s->file->bytes + t->offset, t->nbytes, prov.sha256);
        *out = es_matrix_from_data(id, data, rows, cols, axis, &prov);
    }
    if (owned)
        es_tensor_free(t);
    return rc;
}

/* One matrix from a file mapped for it alone; the map is released before
 * returning. Fails as es_source_open / es_source_load_tensor. */
int es_matrix_load(const char *id, const char *path, const char *tensor, es_axis axis,
                   es_matrix **out, es_err *err)
{
    es_source *s;
    if (es_source_open(path, &s, err) != 0)
        return -1;
    int rc = es_source_load_tensor(s, id, tensor, axis, NULL, out, err);
    es_source_free(s);
    return rc;
}
