/* Matrix entries of the configuration: files, generators and views, built
 * depth first within a model (views may name entries defined later), their
 * labels, and the recipes by which a reload keeps unchanged matrices. An
 * upload's entry (es_config_build_entry) is built by the same code. */
#include "app/internal.h"
#include "embedscope/positional.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The Gaussian generator's cost, rows x cols x min(rows, cols) (two QR
 * factorisations and a product of that order), may be at most this many times
 * limits.max_generated_elements: 2^41 by default, which 128256 x 4096 (2^40.97)
 * fits; that one takes minutes on one BLAS thread. */
#define GAUSSIAN_WORK_FACTOR 4096

/* ---------------------------------------------------------------- recipes (reload) */

/* The entry as canonical JSON (sorted keys, compact) without its "description",
 * which does not change the data. Newly allocated; cannot fail. */
static char *entry_text(const json_t *spec)
{
    json_t *copy = json_deep_copy(spec);
    json_object_del(copy, "description");
    json_object_del(copy, "labels");
    char *text = json_dumps(copy, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(copy);
    if (!text) { /* jansson's allocation failed: end like es_malloc does */
        es_error("out of memory serialising a configuration entry");
        abort();
    }
    char *out = es_strdup(text);
    free(text);
    return out;
}

/* Keep that m was made by `text` in the catalogue being built (nothing for an
 * upload's entry). Takes over text; retains m. Cannot fail. */
static void record_recipe(const ctx *c, char *text, es_matrix *m)
{
    if (c->reg)
        es_catalogue_add_recipe(c->reg, text, m);
    else
        free(text);
}

/* The previous catalogue's matrix made by `text`, under id (renamed if needed),
 * into *out and recorded; false if there is none. */
static bool reuse_recipe(const ctx *c, const char *text, const char *id, es_matrix **out)
{
    es_matrix *m = es_catalogue_recipe(c->previous, text);
    if (!m)
        return false;
    *out = strcmp(m->id, id) == 0 ? es_matrix_retain(m) : es_matrix_renamed(m, id);
    record_recipe(c, es_strdup(text), *out);
    c->reg->n_reused++;
    es_info("kept %s (entry and file unchanged)", id);
    return true;
}

/* Seconds since the epoch of st's modification time. */
static double mtime_of(const struct stat *st) { return (double)st->st_mtim.tv_sec + (double)st->st_mtim.tv_nsec * 1e-9; }

/* See internal.h. */
double es_conf_made_at(void)
{
    struct stat st;
    return stat("/proc/self/exe", &st) == 0 ? mtime_of(&st) : 0;
}

/* The recipe of a file entry: the resolved path, the file's device, inode, size
 * and modification time, and the entry. NULL if the file cannot be stat'ed (it
 * is then loaded, and fails there). Caller frees. */
static char *file_recipe(const json_t *spec, const char *full)
{
    struct stat st;
    if (stat(full, &st) != 0)
        return NULL;
    char *entry = entry_text(spec);
    char *text = es_asprintf("file %s %ju:%ju:%jd:%jd.%09ld %s", full, (uintmax_t)st.st_dev, (uintmax_t)st.st_ino,
                             (intmax_t)st.st_size, (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, entry);
    free(entry);
    return text;
}

/* ---------------------------------------------------------------- matrices */

/* Build state of one matrix entry while a model's matrices are resolved (views
 * may refer to entries defined later, so they are built depth first). */
enum { TODO, BUSY, DONE };

typedef struct model_build {
    const ctx *c;
    es_model *model;
    json_t **specs;   /* per matrix: its JSON object */
    int *state;       /* per matrix: TODO / BUSY / DONE */
    char **paths;     /* per matrix: "models.M.matrices.X" */
} model_build;

static int build_matrix(model_build *b, size_t i);

/* Optional "model_axis" ("columns" | "rows"); *present tells whether given. */
static int get_axis(const ctx *c, const json_t *spec, const char *path, es_axis *axis, bool *present)
{
    const char *text;
    char p[KEYPATH_LEN];
    if (es_conf_get_string(c, spec, path, "model_axis", "", &text) != 0)
        return -1;
    *present = *text != '\0';
    es_conf_join_key(p, path, "model_axis");
    if (*present && es_axis_parse(text, axis) != 0)
        return es_conf_fail(c, p, "expected \"columns\" or \"rows\", got \"%s\"", text);
    return 0;
}

/* The source of file `full`, opened at its first use and kept until the config is
 * loaded, with its converted copies in cache_dir (NULL: none); ES_E_IO (in
 * *inner) if it cannot be opened. */
static int cached_source(source_cache *sc, const char *full, const char *cache_dir, es_source **out, es_err *inner)
{
    for (size_t i = 0; i < sc->n; i++) {
        if (strcmp(sc->paths[i], full) == 0) {
            *out = sc->sources[i];
            return 0;
        }
    }
    if (es_source_open_cached(full, cache_dir, out, inner) != 0)
        return -1;
    sc->paths = es_realloc(sc->paths, (sc->n + 1) * sizeof *sc->paths);
    sc->sources = es_realloc(sc->sources, (sc->n + 1) * sizeof *sc->sources);
    sc->paths[sc->n] = es_strdup(full);
    sc->sources[sc->n++] = *out;
    return 0;
}

/* See internal.h. */
void es_conf_source_cache_clear(source_cache *sc)
{
    for (size_t i = 0; i < sc->n; i++) {
        free(sc->paths[i]);
        es_source_free(sc->sources[i]);
    }
    free(sc->paths);
    free(sc->sources);
    *sc = (source_cache){0};
}

/* The model axis of a file matrix without "model_axis": a GPT-2 Conv1D weight's
 * known one from its safetensors tensor name (es_conv1d_axis), else the default,
 * columns; *origin says which. */
static es_axis unstated_axis(const char *tensor, es_axis_origin *origin)
{
    es_axis axis = ES_AXIS_COLUMNS;
    *origin = es_conv1d_axis(tensor, &axis) == 0 ? ES_AXIS_BY_NAME : ES_AXIS_DEFAULTED;
    return axis;
}

/* A matrix read from a file: {"file", "tensor", "model_axis" (default: the known
 * axis of a GPT-2 Conv1D tensor name, else "columns"), "description"}. "tensor" names the tensor of a .safetensors file (required
 * there) and is refused for .npy files; the store decides the format. Each file
 * is opened once per config (cached_source). The provenance source is the path as
 * written in the config; the resolved path (for the log, saying when the
 * matrix came from its converted copy in server.cache_dir or borrows the
 * file's own mapped bytes) goes to *resolved. */
static int load_file_matrix(const ctx *c, const json_t *spec, const char *path, const char *id, es_matrix **out,
                            char **resolved, double *made)
{
    static const char *const keys[] = {"file", "tensor", "model_axis", "description", "labels", NULL};
    const char *file, *tensor;
    es_axis axis = ES_AXIS_COLUMNS;
    bool has_axis;
    char pfile[KEYPATH_LEN], ptensor[KEYPATH_LEN];
    es_conf_join_key(pfile, path, "file");
    es_conf_join_key(ptensor, path, "tensor");
    if (es_conf_check_keys(c, spec, path, keys) != 0 || es_conf_get_string(c, spec, path, "file", NULL, &file) != 0 ||
        es_conf_get_string(c, spec, path, "tensor", "", &tensor) != 0 || get_axis(c, spec, path, &axis, &has_axis) != 0)
        return -1;
    es_axis_origin origin = ES_AXIS_STATED;
    if (!has_axis)
        axis = unstated_axis(tensor, &origin);
    char *full = es_conf_path_under(c->data_dir, file), *recipe = file_recipe(spec, full);
    struct stat st;
    if (stat(full, &st) == 0)
        *made = mtime_of(&st);
    if (recipe && reuse_recipe(c, recipe, id, out)) {
        free(recipe);
        *resolved = full;
        return 0;
    }
    es_err inner;
    es_source *src;
    int rc = cached_source(c->sources, full, c->upload ? NULL : c->reg->server.cache_dir, &src, &inner);
    size_t hits = rc == 0 ? es_source_cache_hits(src) : 0, in_place = rc == 0 ? es_source_in_place(src) : 0;
    if (rc == 0)
        rc = es_source_load_tensor(src, id, tensor, axis, file, out, &inner);
    if (rc != 0) {
        free(recipe);
        free(full);
        bool tensor_problem = inner.code == ES_E_NOTFOUND || strcmp(inner.param, "tensor") == 0;
        return es_conf_pass_through(c, tensor_problem ? ptensor : pfile, &inner);
    }
    (*out)->axis_origin = origin;
    if (recipe)
        record_recipe(c, recipe, *out);
    bool hit = es_source_cache_hits(src) > hits, mapped = es_source_in_place(src) > in_place;
    *resolved = hit && mapped ? es_asprintf("%s (mapped in place, sha256 from its record in cache_dir)", full)
              : hit           ? es_asprintf("%s (its converted copy in cache_dir)", full)
              : mapped        ? es_asprintf("%s (mapped in place)", full)
                              : full;
    if (*resolved != full)
        free(full);
    return 0;
}

/* Accepts base > 1. */
static bool base_ok(double x) { return x > 1.0; }
/* Accepts x >= 0. */
static bool nonneg_ok(double x) { return x >= 0.0; }
/* Accepts x > 0. */
static bool positive_ok(double x) { return x > 0.0; }

/* A generated matrix above the limit: ES_E_CONFIG at the entry's key path in a
 * configuration, ES_E_LIMIT naming "max_generated_elements" for an upload (a
 * request error of the limit class). Returns -1. */
static int size_fail(const ctx *c, const char *path, const char *text)
{
    if (c->upload)
        return es_fail(c->err, ES_E_LIMIT, "max_generated_elements", "%s: %s", c->origin, text);
    return es_conf_fail(c, path, "%s", text);
}

/* Refuse to generate a rows x cols matrix of more than limits.max_generated_elements
 * elements, or a Gaussian one whose cost rows x cols x min(rows, cols) exceeds
 * GAUSSIAN_WORK_FACTOR times that (checked multiplications); fails through
 * size_fail naming the limit. An upload's matrix larger than its room is
 * refused too (ES_E_STORAGE), before any of it is allocated. */
static int check_generated_size(const ctx *c, const char *path, const char *gen, size_t rows, size_t cols)
{
    size_t limit = c->limits->max_generated_elements, elements, work, work_limit;
    char text[300];
    if (es_mul_size(rows, cols, &elements) != 0 || elements > limit) {
        snprintf(text, sizeof text, "a %zu x %zu %s matrix has more than limits.max_generated_elements = %zu elements",
                 rows, cols, gen, limit);
        return size_fail(c, path, text);
    }
    size_t bytes;
    if (c->room && (es_mul_size(elements, sizeof(double), &bytes) != 0 || bytes > *c->room))
        return es_fail(c->err, ES_E_STORAGE, "uploads.max_total_bytes",
                       "%s: a %zu x %zu %s matrix needs %zu bytes of doubles, more than the %zu bytes "
                       "uploads.max_total_bytes leaves to it",
                       c->origin, rows, cols, gen, elements * sizeof(double), *c->room);
    if (strcmp(gen, "gaussian") != 0)
        return 0;
    if (es_mul_size(limit, GAUSSIAN_WORK_FACTOR, &work_limit) != 0)
        work_limit = SIZE_MAX;
    if (es_mul_size(elements, rows < cols ? rows : cols, &work) != 0 || work > work_limit) {
        snprintf(text, sizeof text,
                 "a %zu x %zu gaussian matrix costs rows x cols x min(rows, cols) above %d x "
                 "limits.max_generated_elements = %zu",
                 rows, cols, GAUSSIAN_WORK_FACTOR, work_limit);
        return size_fail(c, path, text);
    }
    return 0;
}

int es_config_check_generated(const es_limits *limits, const char *generator, size_t rows, size_t cols,
                              const size_t *room, es_err *err)
{
    ctx c = {.origin = "generator", .limits = limits, .upload = true, .room = room, .err = err};
    return check_generated_size(&c, "", generator, rows, cols);
}

/* A generated matrix: {"generator": "sinusoidal" | "rope", "n_positions", "d_model"
 * (even), "base" (10000)} or {"generator": "gaussian", "rows", "cols", "decay" (1),
 * "scale" (1), "seed" (0)}, each with an optional "description". */
static int generate_fresh(const ctx *c, const json_t *spec, const char *path, const char *id, es_matrix **out)
{
    static const char *const wave_keys[] = {"generator", "n_positions", "d_model", "base", "description", "labels", NULL};
    static const char *const gauss_keys[] = {"generator", "rows", "cols", "decay", "scale", "seed", "description", "labels",
                                             NULL};
    const char *gen;
    char pgen[KEYPATH_LEN];
    es_conf_join_key(pgen, path, "generator");
    if (es_conf_get_string(c, spec, path, "generator", NULL, &gen) != 0)
        return -1;
    es_err inner;
    int rc;
    if (strcmp(gen, "sinusoidal") == 0 || strcmp(gen, "rope") == 0) {
        long long n, d;
        double base;
        if (es_conf_check_keys(c, spec, path, wave_keys) != 0 ||
            es_conf_get_int(c, spec, path, "n_positions", true, 0, 1, INT_MAX, &n) != 0 ||
            es_conf_get_int(c, spec, path, "d_model", true, 0, 2, INT_MAX, &d) != 0 ||
            es_conf_get_number(c, spec, path, "base", 10000.0, base_ok, "> 1", &base) != 0)
            return -1;
        if (d % 2 != 0) {
            char p[KEYPATH_LEN];
            es_conf_join_key(p, path, "d_model");
            return es_conf_fail(c, p, "expected an even integer, got %lld", d);
        }
        if (check_generated_size(c, path, gen, (size_t)n, (size_t)d) != 0)
            return -1;
        rc = (gen[0] == 's' ? es_gen_sinusoidal : es_gen_rope)(id, (size_t)n, (size_t)d, base, out, &inner);
    } else if (strcmp(gen, "gaussian") == 0) {
        long long rows, cols, seed;
        double decay, scale;
        if (es_conf_check_keys(c, spec, path, gauss_keys) != 0 ||
            es_conf_get_int(c, spec, path, "rows", true, 0, 1, INT_MAX, &rows) != 0 ||
            es_conf_get_int(c, spec, path, "cols", true, 0, 1, INT_MAX, &cols) != 0 ||
            es_conf_get_number(c, spec, path, "decay", 1.0, nonneg_ok, ">= 0", &decay) != 0 ||
            es_conf_get_number(c, spec, path, "scale", 1.0, positive_ok, "> 0", &scale) != 0 ||
            es_conf_get_int(c, spec, path, "seed", false, 0, 0, LLONG_MAX, &seed) != 0 ||
            check_generated_size(c, path, gen, (size_t)rows, (size_t)cols) != 0)
            return -1;
        rc = es_gen_gaussian(id, (size_t)rows, (size_t)cols, decay, scale, (uint64_t)seed, out, &inner);
    } else {
        return es_conf_fail(c, pgen, "expected \"sinusoidal\", \"rope\" or \"gaussian\", got \"%s\"", gen);
    }
    return rc != 0 ? es_conf_pass_through(c, path, &inner) : 0;
}

/* A generated matrix (generate_fresh), or the previous catalogue's one made by
 * the same entry; fails like generate_fresh. */
static int generate_matrix(const ctx *c, const json_t *spec, const char *path, const char *id, es_matrix **out)
{
    char *entry = entry_text(spec), *recipe = es_asprintf("generator %s", entry);
    free(entry);
    int rc = 0;
    if (reuse_recipe(c, recipe, id, out))
        free(recipe);
    else if ((rc = generate_fresh(c, spec, path, id, out)) == 0)
        record_recipe(c, recipe, *out);
    else
        free(recipe);
    return rc;
}

/* Replace *cur by the result *next of a view step that returned rc, releasing the
 * old one; on failure report the store's message at key path `path`. (next is
 * passed by address: the step fills it while this call's arguments are evaluated.) */
static int view_step(const ctx *c, const char *path, es_matrix **cur, int rc, es_matrix *const *next,
                     const es_err *inner)
{
    if (rc != 0)
        return es_conf_pass_through(c, path, inner);
    es_matrix_release(*cur);
    *cur = *next;
    return 0;
}

/* The optional last view step "average_rows": g (integer >= 1): replace *cur by a
 * derived copy whose items are the means of groups of g consecutive items (the
 * row-averaging ablation, es_matrix_average_rows). Fails at "….average_rows" on a
 * bad type or g above the number of items. */
static int average_step(const ctx *c, const json_t *spec, const char *path, const char *id, es_matrix **cur)
{
    size_t g;
    char p[KEYPATH_LEN];
    es_conf_join_key(p, path, "average_rows");
    if (!json_object_get(spec, "average_rows"))
        return 0;
    if (es_conf_get_size(c, spec, path, "average_rows", true, 1, 1, &g) != 0)
        return -1;
    es_err inner;
    es_matrix *next = NULL;
    return view_step(c, p, cur, es_matrix_average_rows(*cur, id, g, &next, &inner), &next, &inner);
}

/* Apply a view's steps to `base` in a fixed order: rows [r0, r1), columns [c0, c1),
 * transpose, model_axis, average_rows. Without any step the view is an alias (a new id). */
static int apply_view(const ctx *c, const json_t *spec, const char *path, const char *id, es_matrix *base,
                      es_matrix **out)
{
    size_t range[2];
    bool has_rows = false, has_cols = false, transpose = false, has_axis = false;
    es_axis axis = base->model_axis;
    es_err inner;
    es_matrix *cur = es_matrix_retain(base), *next = NULL;
    char p[KEYPATH_LEN];
    int rc = es_conf_get_range(c, spec, path, "rows", cur->rows, range, &has_rows);
    es_conf_join_key(p, path, "rows");
    if (rc == 0 && has_rows)
        rc = view_step(c, p, &cur, es_view_rows(cur, id, range[0], range[1], &next, &inner), &next, &inner);
    if (rc == 0)
        rc = es_conf_get_range(c, spec, path, "columns", cur->cols, range, &has_cols);
    es_conf_join_key(p, path, "columns");
    if (rc == 0 && has_cols)
        rc = view_step(c, p, &cur, es_view_columns(cur, id, range[0], range[1], &next, &inner), &next, &inner);
    if (rc == 0)
        rc = es_conf_get_bool(c, spec, path, "transpose", &transpose);
    es_conf_join_key(p, path, "transpose");
    if (rc == 0 && transpose)
        rc = view_step(c, p, &cur, es_view_transpose(cur, id, &next, &inner), &next, &inner);
    if (rc == 0)
        rc = get_axis(c, spec, path, &axis, &has_axis);
    es_conf_join_key(p, path, "model_axis");
    bool averaged = json_object_get(spec, "average_rows") != NULL;
    if (rc == 0 && (has_axis || !(has_rows || has_cols || transpose || averaged)))
        rc = view_step(c, p, &cur, es_view_axis(cur, id, has_axis ? axis : cur->model_axis, &next, &inner), &next,
                       &inner);
    if (rc == 0)
        rc = average_step(c, spec, path, id, &cur);
    if (rc != 0) {
        es_matrix_release(cur);
        return -1;
    }
    *out = cur;
    return 0;
}

/* Fail with the chain of views that leads back to entry i. */
/* The name inside `model` that a view's target names: the target itself, or
 * MATRIX of "MODEL/MATRIX" when MODEL is this model; NULL for another model. */
static const char *local_name(const es_model *model, const char *target)
{
    const char *slash = strchr(target, '/');
    if (!slash)
        return target;
    size_t len = (size_t)(slash - target);
    return strlen(model->name) == len && strncmp(target, model->name, len) == 0 ? slash + 1 : NULL;
}

static int cycle_fail(model_build *b, size_t i)
{
    char chain[300] = "";
    size_t at = i;
    for (int hops = 0; hops < 16; hops++) {
        snprintf(chain + strlen(chain), sizeof chain - strlen(chain), "%s\"%s\"", hops ? " -> " : "",
                 b->model->matrix_names[at]);
        if (hops > 0 && at == i)
            break;
        const char *view = json_string_value(json_object_get(b->specs[at], "view"));
        at = (size_t)es_model_find(b->model, local_name(b->model, view));
    }
    char p[KEYPATH_LEN];
    es_conf_join_key(p, b->paths[i], "view");
    return es_conf_fail(b->c, p, "views form a cycle: %s", chain);
}

/* The matrix of the catalogue a view names ("MODEL/MATRIX", or a bare MATRIX
 * of `model`), or NULL. In a configuration the catalogue holds the models
 * defined before the one being built. */
static es_matrix *catalogue_matrix(const ctx *c, const char *model, const char *target)
{
    const es_matrix *m = NULL;
    if (c->catalogue && strchr(target, '/'))
        es_catalogue_lookup(c->catalogue, target, "view", &m, NULL);
    else if (c->catalogue)
        m = es_catalogue_matrix(c->catalogue, model, target);
    return (es_matrix *)m; /* retained by apply_view, never modified */
}

/* A view of another matrix: {"view", "rows", "columns", "transpose",
 * "model_axis", "average_rows", "description"}. The target is an entry of the
 * same model (built first; an upload's entry has no siblings) or a matrix of
 * the catalogue ("MODEL/MATRIX"). */
static int view_matrix(model_build *b, size_t i, const char *id, es_matrix **out)
{
    static const char *const keys[] = {"view", "rows", "columns", "transpose", "model_axis", "average_rows",
                                       "description", "labels", NULL};
    const ctx *c = b->c;
    const char *path = b->paths[i], *target, *local;
    char p[KEYPATH_LEN];
    es_conf_join_key(p, path, "view");
    if (es_conf_check_keys(c, b->specs[i], path, keys) != 0 ||
        es_conf_get_string(c, b->specs[i], path, "view", NULL, &target) != 0)
        return -1;
    if (c->upload && (local = local_name(b->model, target)) && strcmp(local, b->model->matrix_names[i]) == 0)
        return es_conf_fail(c, p, "a view cannot name itself (\"%s\"): name the matrix it should show", target);
    long t = !c->upload && (local = local_name(b->model, target)) ? es_model_find(b->model, local) : -1;
    if (t >= 0 && b->state[t] == BUSY)
        return cycle_fail(b, (size_t)t);
    if (t >= 0)
        return build_matrix(b, (size_t)t) != 0 ? -1 : apply_view(c, b->specs[i], path, id, b->model->matrices[t], out);
    es_matrix *m = catalogue_matrix(c, b->model->name, target);
    if (!m)
        return es_conf_fail(c, p,
                            "no matrix \"%s\": a view names a matrix of its own model (\"MATRIX\") or of %s "
                         "(\"MODEL/MATRIX\")",
                         target, c->upload ? "any loaded model" : "a model defined before this one");
    return apply_view(c, b->specs[i], path, id, m, out);
}

/* Log one loaded matrix (the daemon's start-up log), with the resolved path of
 * its file when it was read from one (`from`, else NULL): provenance keeps only
 * the path as written in the config. */
static void log_loaded(const es_matrix *m, const char *from, double seconds)
{
    const char *sha = es_matrix_sha256(m);
    es_info("loaded %s %zux%zu %s sha256 %.12s model_axis %s%s%s%s%s%s%s in %.1f ms", m->id, m->rows, m->cols,
            m->prov.dtype, sha ? sha : "(computing)", es_axis_name(m->model_axis),
            m->axis_origin == ES_AXIS_STATED ? "" : " (from the ", m->axis_origin == ES_AXIS_STATED ? "" :
            m->axis_origin == ES_AXIS_BY_NAME ? "tensor name)" : "default: not stated)", *m->prov.view ? " view " : "",
            m->prov.view, from ? " from " : "", from ? from : "", seconds * 1e3);
}

/* The format of a labels file, by its name: .csv, .json, else TSV. */
static es_labels_format labels_format_of(const char *file)
{
    const char *dot = strrchr(file, '.');
    return dot && strcasecmp(dot, ".csv") == 0 ? ES_LABELS_CSV
           : dot && strcasecmp(dot, ".json") == 0 ? ES_LABELS_JSON
                                                  : ES_LABELS_TSV;
}

/* The whole file at path, at most max bytes (ES_E_LIMIT naming
 * "uploads.max_labels_bytes" above), into a new buffer; ES_E_IO if unreadable. */
static int read_bounded(const char *path, size_t max, char **out, size_t *len, es_err *err)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        int rc = es_fail(err, ES_E_IO, "labels", "%s: %s", path, strerror(errno));
        if (f)
            fclose(f);
        return rc;
    }
    if ((size_t)st.st_size > max) {
        fclose(f);
        return es_fail(err, ES_E_LIMIT, "uploads.max_labels_bytes", "%s holds %lld bytes, above "
                       "uploads.max_labels_bytes = %zu", path, (long long)st.st_size, max);
    }
    char *buf = es_malloc((size_t)st.st_size + 1);
    *len = fread(buf, 1, (size_t)st.st_size, f);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return es_fail(err, ES_E_IO, "labels", "%s: read error", path);
    }
    buf[*len] = '\0';
    *out = buf;
    return 0;
}

/* An entry's "labels": a TSV (header row; one column without header), CSV or
 * JSON file under data_dir, one row per item of m, at most
 * uploads.max_labels_bytes. Nothing when absent; refused in an upload's entry
 * (labels are sent to .../labels). */
static int load_labels(const ctx *c, const json_t *spec, const char *path, const es_matrix *m, es_labels **out)
{
    const char *file;
    char p[KEYPATH_LEN];
    es_conf_join_key(p, path, "labels");
    if (!json_object_get(spec, "labels"))
        return 0;
    if (es_conf_get_string(c, spec, path, "labels", NULL, &file) != 0)
        return -1;
    if (c->upload)
        return es_conf_fail(c, p, "an upload's entry cannot name a labels file on the server: PUT the labels to "
                            "the matrix's /labels");
    char *full = es_conf_path_under(c->data_dir, file), *text = NULL;
    es_err inner;
    size_t len = 0;
    int rc = read_bounded(full, c->reg->uploads.max_labels_bytes, &text, &len, &inner);
    if (rc == 0)
        rc = es_labels_parse(text, len, labels_format_of(file), es_matrix_items(m), c->reg->uploads.max_labels_bytes,
                             "labels", "uploads.max_labels_bytes", out, &inner);
    free(text);
    free(full);
    return rc == 0 ? 0 : es_conf_pass_through(c, p, &inner);
}

/* Build entry i of the model (once), dispatching on which of "file",
 * "generator", "view" it has (exactly one). */
static int build_matrix(model_build *b, size_t i)
{
    static const char *const kinds[] = {"file", "generator", "view"};
    const ctx *c = b->c;
    const json_t *spec = b->specs[i];
    const char *path = b->paths[i], *description;
    if (b->state[i] == DONE)
        return 0;
    int nkinds = 0;
    for (size_t k = 0; k < 3; k++)
        nkinds += json_object_get(spec, kinds[k]) != NULL;
    if (nkinds != 1)
        return es_conf_fail(c, path, "expected exactly one of \"file\", \"generator\", \"view\", got %d", nkinds);
    if (c->upload && json_object_get(spec, "file")) {
        char p[KEYPATH_LEN];
        es_conf_join_key(p, path, "file");
        return es_conf_fail(c, p, "an upload cannot name a file on the server: send the .npy or .safetensors file "
                            "itself as the body, or a \"generator\" or \"view\" entry");
    }
    if (es_conf_get_string(c, spec, path, "description", "", &description) != 0)
        return -1;
    if (c->upload && strlen(description) > ES_UPLOAD_DESCRIPTION_MAX) {
        char p[KEYPATH_LEN];
        es_conf_join_key(p, path, "description");
        return es_conf_fail(c, p, "a description of an upload holds at most %d bytes, got %zu",
                            ES_UPLOAD_DESCRIPTION_MAX, strlen(description));
    }
    b->state[i] = BUSY;
    char *id = es_asprintf("%s/%s", b->model->name, b->model->matrix_names[i]);
    es_matrix *m = NULL;
    char *from = NULL;
    double t0 = es_now(), made = c->made;
    int rc = json_object_get(spec, "file")        ? load_file_matrix(c, spec, path, id, &m, &from, &made)
             : json_object_get(spec, "generator") ? generate_matrix(c, spec, path, id, &m)
                                                  : view_matrix(b, i, id, &m);
    free(id);
    if (rc != 0)
        return -1;
    log_loaded(m, from, es_now() - t0);
    free(from);
    if (load_labels(c, spec, path, m, &b->model->matrix_labels[i]) != 0) {
        es_matrix_release(m);
        return -1;
    }
    b->model->matrices[i] = m;
    b->model->matrix_descriptions[i] = es_strdup(description);
    b->model->matrix_created[i] = made;
    b->state[i] = DONE;
    return 0;
}

/* See internal.h. */
int es_conf_build_model(const ctx *c, const char *name, const json_t *spec, es_model *model)
{
    static const char *const keys[] = {"description", "n_heads", "matrices", NULL};
    char path[KEYPATH_LEN], mpath[KEYPATH_LEN];
    const char *description;
    json_t *matrices;
    size_t n_heads;
    es_conf_join_key(path, "models", name);
    es_conf_join_key(mpath, path, "matrices");
    if (es_conf_check_name(c, "models", name, "model") != 0)
        return -1;
    if (!json_is_object(spec))
        return es_conf_fail(c, path, "expected an object, got %s", es_conf_kind_name(spec));
    if (es_conf_check_keys(c, spec, path, keys) != 0 ||
        es_conf_get_string(c, spec, path, "description", "", &description) != 0 ||
        es_conf_get_size(c, spec, path, "n_heads", false, 0, 1, &n_heads) != 0 ||
        es_conf_get_object(c, spec, path, "matrices", true, &matrices) != 0)
        return -1;
    model->n_heads = n_heads;
    model->name = es_strdup(name);
    model->description = es_strdup(description);
    size_t n = json_object_size(matrices);
    if (n == 0)
        return es_conf_fail(c, mpath, "a model needs at least one matrix");
    model->matrices = es_calloc(n, sizeof *model->matrices);
    model->matrix_names = es_calloc(n, sizeof *model->matrix_names);
    model->matrix_descriptions = es_calloc(n, sizeof *model->matrix_descriptions);
    model->matrix_created = es_calloc(n, sizeof *model->matrix_created);
    model->matrix_labels = es_calloc(n, sizeof *model->matrix_labels);
    model->n_matrices = n;
    model_build b = {c, model, es_calloc(n, sizeof(json_t *)), es_calloc(n, sizeof(int)),
                     es_calloc(n, sizeof(char *))};
    int rc = 0;
    size_t i = 0;
    const char *key;
    json_t *value;
    json_object_foreach(matrices, key, value) {
        model->matrix_names[i] = es_strdup(key);
        b.specs[i] = value;
        b.paths[i] = es_malloc(KEYPATH_LEN);
        es_conf_join_key(b.paths[i], mpath, key);
        if (rc == 0 && es_conf_check_name(c, mpath, key, "matrix") != 0)
            rc = -1;
        if (rc == 0 && !json_is_object(value))
            rc = es_conf_fail(c, b.paths[i], "expected an object, got %s", es_conf_kind_name(value));
        i++;
    }
    for (i = 0; rc == 0 && i < n; i++)
        rc = build_matrix(&b, i);
    for (i = 0; i < n; i++)
        free(b.paths[i]);
    free(b.paths);
    free(b.state);
    free(b.specs);
    return rc;
}


/* ---------------------------------------------------------------- uploads' entries */

/* See config.h: one entry of the configuration's grammar, built by the same
 * code as a configuration's (build_matrix) in upload mode: errors are request
 * errors, "file" is refused, views read the catalogue. */
int es_config_build_entry(const es_catalogue *cat, const char *model, const char *name, const char *text,
                          size_t len, const size_t *room, es_matrix **out, char **description, es_err *err)
{
    ctx c = {.origin = "request body", .limits = &cat->limits, .catalogue = cat, .upload = true, .room = room,
             .err = err};
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return es_fail(err, ES_E_PARAM, "", "request body: not JSON: %s at line %d column %d (byte %d)", jerr.text,
                       jerr.line, jerr.column, jerr.position);
    if (!json_is_object(root)) {
        int rc = es_conf_fail(&c, "", "expected a matrix entry (an object), got %s", es_conf_kind_name(root));
        json_decref(root);
        return rc;
    }
    es_matrix *m = NULL;
    char *names[1] = {(char *)name}, *descriptions[1] = {NULL}, path[KEYPATH_LEN] = "", *paths[1] = {path};
    double created[1];
    es_labels *labels[1] = {NULL};
    es_model entry = {.name = (char *)model, .matrices = &m, .matrix_names = names,
                      .matrix_descriptions = descriptions, .matrix_created = created, .matrix_labels = labels,
                      .n_matrices = 1, .user = true};
    json_t *specs[1] = {root};
    int state[1] = {TODO};
    model_build b = {&c, &entry, specs, state, paths};
    int rc = build_matrix(&b, 0);
    json_decref(root);
    if (rc != 0)
        return -1;
    *out = m;
    *description = descriptions[0];
    return 0;
}
