/* libFuzzer target: the configuration loader (es_config_load_text) over arbitrary
 * bytes as JSON text.
 *
 * No files are read: base_dir is an empty temporary directory, so "file" entries
 * fail with ES_E_IO, and inputs that could leave it (a string value that starts
 * with '/' or contains "..", i.e. an absolute or escaping data_dir or file) are
 * rejected before loading, and so are inputs that set limits.max_generated_elements:
 * raising that cap is the operator's choice. The others load under a cap of 2^26
 * elements (512 MiB; the default, 2^29, lets one Llama-sized generator take 4 GiB
 * and minutes); under it a config that makes the loader allocate too much is a
 * finding (-malloc_limit_mb/-rss_limit_mb).
 *
 * Checked: a failure is ES_E_CONFIG / ES_E_IO / ES_E_NOMEM whose message starts
 * with the origin; a loaded registry has non-empty matrices that its lookups find,
 * with every element readable, and warm entries that name loaded matrices. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embedscope/config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
/* The generator cap every loaded input gets (see above). */
enum { FUZZ_MAX_GENERATED = 1 << 26 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ORIGIN "fuzz-config"

/* The empty data directory every input resolves against. */
static char base_dir[] = "/tmp/embedscope-fuzz-config-XXXXXX";

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_config: %s: %s\n", what, detail);
    abort();
}

static void remove_base_dir(void) { rmdir(base_dir); }

/* Quiet logging (one line per loaded matrix otherwise) and the empty base_dir. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    es_log_set_level(ES_LOG_ERROR);
    if (!mkdtemp(base_dir))
        fail("mkdtemp", base_dir);
    atexit(remove_base_dir);
    return 0;
}

/* True if some string value of j (recursively) could name a path outside base_dir. */
static bool names_outside(const json_t *j)
{
    const char *key;
    json_t *value;
    size_t i;
    switch (json_typeof(j)) {
    case JSON_STRING:
        return json_string_value(j)[0] == '/' || strstr(json_string_value(j), "..");
    case JSON_OBJECT:
        json_object_foreach((json_t *)j, key, value) if (names_outside(value)) return true;
        return false;
    case JSON_ARRAY:
        json_array_foreach(j, i, value) if (names_outside(value)) return true;
        return false;
    default:
        return false;
    }
}

/* A failed load reports one of the loader's error classes, prefixed by the origin. */
static void check_failure(const es_err *err)
{
    if (err->code != ES_E_CONFIG && err->code != ES_E_IO && err->code != ES_E_NOMEM)
        fail("unexpected error class", err->message);
    if (strncmp(err->message, ORIGIN ": ", strlen(ORIGIN) + 2) != 0)
        fail("message does not start with the origin", err->message);
}

/* Matrices up to this many elements are read whole, larger ones at their corners. */
#define READ_ALL_MAX (1u << 16)

/* Element (i, j) of m is readable (ASan checks the view's offset) and finite. */
static void check_element(const es_matrix *m, size_t i, size_t j)
{
    double x = es_matrix_at(m, i, j);
    if (x != x || x - x != 0)
        fail("non-finite element", m->id);
}

/* m is non-empty and its elements are readable and finite. */
static void check_matrix(const es_matrix *m)
{
    if (m->rows == 0 || m->cols == 0 || es_matrix_items(m) == 0 || es_matrix_dim(m) == 0)
        fail("empty matrix", m->id);
    bool all = m->rows * m->cols <= READ_ALL_MAX;
    size_t di = all || m->rows == 1 ? 1 : m->rows - 1, dj = all || m->cols == 1 ? 1 : m->cols - 1;
    for (size_t i = 0; i < m->rows; i += di)
        for (size_t j = 0; j < m->cols; j += dj)
            check_element(m, i, j);
}

/* Lookups find every loaded matrix by its id; warm entries name loaded matrices. */
static void check_registry(const es_catalogue *r)
{
    es_err err;
    const es_matrix *found;
    if (r->n_models == 0)
        fail("no models", r->origin);
    for (size_t i = 0; i < r->n_models; i++) {
        const es_model *model = &r->models[i];
        for (size_t j = 0; j < model->n_matrices; j++) {
            char *id = es_asprintf("%s/%s", model->name, model->matrix_names[j]);
            if (es_catalogue_lookup(r, id, "matrix", &found, &err) != 0 || found != model->matrices[j] ||
                strcmp(found->id, id) != 0)
                fail("lookup does not find a loaded matrix", id);
            check_matrix(found);
            free(id);
        }
    }
    for (size_t i = 0; i < r->n_warm; i++)
        if (es_catalogue_lookup(r, r->warm[i].matrix, "warm", &found, &err) != 0)
            fail("warm entry names no loaded matrix", r->warm[i].matrix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    json_t *root = json_loads(text, 0, NULL);
    bool skip = root && (names_outside(root) ||
                         json_object_get(json_object_get(root, "limits"), "max_generated_elements"));
    if (skip) {
        json_decref(root);
        free(text);
        return -1; /* not loaded, and kept out of the corpus */
    }
    json_t *limits = json_is_object(root) ? json_object_get(root, "limits") : NULL;
    if (json_is_object(root) && !limits)
        json_object_set_new(root, "limits", limits = json_object());
    if (json_is_object(limits)) {
        json_object_set_new(limits, "max_generated_elements", json_integer(FUZZ_MAX_GENERATED));
        free(text);
        text = json_dumps(root, JSON_COMPACT);
    }
    json_decref(root);
    if (!text)
        return 0;
    es_catalogue *r = NULL;
    es_err err;
    if (es_config_load_text(text, ORIGIN, base_dir, &r, &err) != 0)
        check_failure(&err);
    else
        check_registry(r);
    es_catalogue_free(r);
    free(text);
    return 0;
}
