/* libFuzzer target: the records of uploads.dir (src/api/persist.c
 * es_persist_rebuild_text, what a start or another daemon's change rebuilds),
 * with the loaders and the configuration's entry parser behind them.
 *
 * Input: the text of one record. The directory holds one content-addressed
 * file (a 2 x 3 .npy) and the catalogue a configured model "t". Checked: a
 * rebuilt matrix has the record's id and a non-empty shape, a record whose
 * "file" is not a content-addressed name (a path outside the directory) is
 * never rebuilt, and a failure says why. abort() on any broken rule. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embedscope/config.h"
#include "embedscope/uploads.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char CONFIG[] =
    "{\"limits\": {\"max_generated_elements\": 4096},"
    " \"models\": {\"t\": {\"matrices\": {"
    "  \"pe\": {\"generator\": \"sinusoidal\", \"n_positions\": 50, \"d_model\": 8}}}}}";

static es_catalogue *cat;
static char dir[] = "/tmp/fuzz_record-XXXXXX";
static char *file_path;

/* At exit: the directory and its file go. */
static void remove_dir(void)
{
    unlink(file_path);
    rmdir(dir);
}

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_record: %s: %s\n", what, detail);
    abort();
}

/* The catalogue, and the directory with one content-addressed .npy file. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    es_log_set_level(ES_LOG_ERROR);
    es_err err;
    if (es_config_load_text(CONFIG, "fuzz_record", ".", &cat, &err) != 0)
        fail("cannot load the catalogue", err.message);
    if (!mkdtemp(dir))
        fail("cannot create", dir);
    static const char header[] = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
    unsigned char file[128 + 48] = "\x93NUMPY\x01\x00";
    size_t hlen = 128 - 10;
    file[8] = (unsigned char)hlen;
    memset(file + 10, ' ', hlen);
    memcpy(file + 10, header, strlen(header));
    file[127] = '\n';
    for (int i = 0; i < 6; i++) {
        double v = i * 1.5 - 2;
        memcpy(file + 128 + 8 * i, &v, 8);
    }
    char sha[65];
    es_sha256_hex(file, sizeof file, sha);
    char *path = es_asprintf("%s/%s", dir, sha);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(file, 1, sizeof file, f) != sizeof file || fclose(f) != 0)
        fail("cannot write", path);
    fprintf(stderr, "fuzz_record: the directory's file is %s\n", sha);
    file_path = path;
    atexit(remove_dir);
    return 0;
}

/* Is s exactly 64 lowercase hex digits? */
static bool content_name(const char *s)
{
    return s && strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    es_matrix *m = NULL;
    es_err err = {0};
    char *text = es_malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    if (es_persist_rebuild_text(cat, dir, text, size, &m, &err) == 0) {
        json_t *rec = json_loadb(text, size, 0, NULL);
        const char *model = json_string_value(json_object_get(rec, "model"));
        const char *matrix = json_string_value(json_object_get(rec, "matrix"));
        const char *file = json_string_value(json_object_get(rec, "file"));
        char *id = es_asprintf("%s/%s", model ? model : "", matrix ? matrix : "");
        if (!m || strcmp(m->id, id) != 0)
            fail("a rebuilt matrix does not have the record's id", text);
        if (m->rows == 0 || m->cols == 0)
            fail("a rebuilt matrix is empty", text);
        if (json_object_get(rec, "file") && !content_name(file))
            fail("a record naming a file outside the directory was rebuilt", text);
        free(id);
        json_decref(rec);
        es_matrix_release(m);
    } else if (!err.message[0]) {
        fail("a refused record says nothing", text);
    }
    free(text);
    return 0;
}
