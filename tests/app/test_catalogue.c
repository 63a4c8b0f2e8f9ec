/* The live catalogue: cross-model views, the "uploads" section, entries built
 * for uploads by the configuration's own parser, copy-on-write changes
 * (es_registry_with / without / adopt_user) and reloads that keep unchanged
 * matrices. Config texts are written with ' for " (see q()). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "embedscope/config.h"

/* text with every ' turned into ". */
static char *q(const char *text)
{
    char *s = es_strdup(text);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    return s;
}

/* Load q(text) (base dir "."), which must succeed. */
static es_registry *load_ok(const char *text)
{
    char *t = q(text);
    es_registry *r = NULL;
    es_err err = {0};
    ck_assert_msg(es_config_load_text(t, "test.json", ".", &r, &err) == 0, "%s", err.message);
    free(t);
    return r;
}

#define TWO_MODELS                                                                                                   \
    "{'data_dir': 'data', 'models': {"                                                                               \
    "'g': {'matrices': {'wpe': {'file': 'gpt2-small/wpe.npy'}, 'pe': {'generator': 'sinusoidal', "                  \
    "'n_positions': 8, 'd_model': 4}}},"                                                                             \
    "'v': {'matrices': {'half': {'view': 'g/wpe', 'rows': [0, 512]}, 'self': {'view': 'v/half', 'columns': [0, 2]}}}}}"

/* The one matrix MODEL/NAME of r, which must exist. */
static const es_matrix *get(const es_registry *r, const char *model, const char *name)
{
    const es_matrix *m = es_registry_matrix(r, model, name);
    ck_assert_msg(m != NULL, "no %s/%s", model, name);
    return m;
}

START_TEST(views_across_models)
{
    es_registry *r = load_ok(TWO_MODELS);
    const es_matrix *wpe = get(r, "g", "wpe"), *half = get(r, "v", "half"), *self = get(r, "v", "self");
    ck_assert_uint_eq(half->rows, 512);
    ck_assert_uint_eq(self->cols, 2);
    ck_assert_str_eq(half->prov.sha256, wpe->prov.sha256);
    ck_assert(es_matrix_at(half, 511, 767) == es_matrix_at(wpe, 511, 767));
    ck_assert_str_eq(half->prov.view, "rows 0:512 of g/wpe");
    es_registry_free(r);
}
END_TEST

START_TEST(uploads_section)
{
    es_registry *r = load_ok(TWO_MODELS);
    ck_assert_int_eq(r->uploads.enabled, -1);
    ck_assert_str_eq(r->uploads.token, "");
    ck_assert_uint_eq(r->uploads.max_body_bytes, 4ull << 30);
    ck_assert_uint_eq(r->uploads.max_total_bytes, 4ull << 30);
    ck_assert_uint_eq(r->uploads.max_pending_bytes, 4ull << 30);
    /* a Llama-sized float32 .npy (128256 x 4096 and its 128-byte header) fits one body */
    ck_assert_uint_ge(r->uploads.max_body_bytes, 128256ull * 4096 * 4 + 128);
    ck_assert_uint_eq(r->uploads.max_matrices, 1024);
    es_registry_free(r);
    r = load_ok("{'uploads': {'enabled': false, 'token': 't', 'tmp_dir': '/x', 'dir': '/d', 'max_body_bytes': 10, "
                "'max_total_bytes': 20, 'max_matrices': 3}, 'models': {'m': {'matrices': {'a': {'generator': "
                "'rope', 'n_positions': 2, 'd_model': 2}}}}}");
    ck_assert_int_eq(r->uploads.enabled, 0);
    ck_assert_str_eq(r->uploads.token, "t");
    ck_assert_str_eq(r->uploads.tmp_dir, "/x");
    ck_assert_str_eq(r->uploads.dir, "/d");
    ck_assert_uint_eq(r->uploads.max_body_bytes, 10);
    ck_assert_uint_eq(r->uploads.max_total_bytes, 20);
    ck_assert_uint_eq(r->uploads.max_matrices, 3);
    es_registry_free(r);
    char *t = q("{'uploads': {'enabled': 'yes'}, 'models': {}}");
    es_err err;
    ck_assert_int_eq(es_config_load_text(t, "test.json", ".", &r, &err), -1);
    ck_assert_str_eq(err.param, "uploads.enabled");
    free(t);
    t = q("{'uploads': {'max_matrices': 0}, 'models': {}}");
    ck_assert_int_eq(es_config_load_text(t, "test.json", ".", &r, &err), -1);
    ck_assert_str_eq(err.param, "uploads.max_matrices");
    free(t);
}
END_TEST

/* Build an upload entry q(text) as u/x against cat. */
static int build(const es_registry *cat, const char *text, es_matrix **m, char **description, es_err *err)
{
    char *t = q(text);
    int rc = es_config_build_entry(cat, "u", "x", t, strlen(t), NULL, m, description, err);
    free(t);
    return rc;
}

START_TEST(entries_for_uploads)
{
    es_registry *cat = load_ok(TWO_MODELS);
    es_matrix *m;
    char *description;
    es_err err;
    ck_assert_msg(build(cat, "{'generator': 'sinusoidal', 'n_positions': 1024, 'd_model': 1024, 'base': 10000, "
                             "'description': 'd=1024'}",
                        &m, &description, &err) == 0,
                  "%s", err.message);
    ck_assert_str_eq(m->id, "u/x");
    ck_assert_uint_eq(m->cols, 1024);
    ck_assert_str_eq(description, "d=1024");
    es_matrix_release(m);
    free(description);
    ck_assert_msg(build(cat, "{'view': 'g/wpe', 'average_rows': 2}", &m, &description, &err) == 0, "%s", err.message);
    ck_assert_str_eq(m->prov.view, "rows averaged in groups of 2 of g/wpe");
    es_matrix_release(m);
    free(description);
    /* errors are request errors naming the key */
    ck_assert_int_eq(build(cat, "{'generator': 'sinusoidal', 'n_positions': 4, 'd_model': 3}", &m, &description, &err),
                     -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "d_model");
    ck_assert_int_eq(build(cat, "{'file': '/etc/passwd'}", &m, &description, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "file");
    ck_assert_int_eq(build(cat, "{'view': 'nope/x'}", &m, &description, &err), -1);
    ck_assert_str_eq(err.param, "view");
    ck_assert_int_eq(build(cat, "{'view': 'g/wpe', 'rows': [0, 2000]}", &m, &description, &err), -1);
    ck_assert_str_eq(err.param, "rows");
    ck_assert_int_eq(build(cat, "[1]", &m, &description, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_int_eq(build(cat, "{'generator': ", &m, &description, &err), -1);
    ck_assert_msg(strstr(err.message, "byte") != NULL, "%s", err.message);
    ck_assert_int_eq(build(cat, "{'generator': 'gaussian', 'rows': 100000, 'cols': 100000}", &m, &description, &err),
                     -1);
    ck_assert_int_eq(err.code, ES_E_LIMIT);
    ck_assert_str_eq(err.param, "max_generated_elements");
    es_registry_free(cat);
}
END_TEST

START_TEST(copy_on_write_changes)
{
    es_registry *cat = load_ok(TWO_MODELS);
    es_matrix *m;
    char *description;
    es_err err;
    ck_assert_int_eq(build(cat, "{'generator': 'rope', 'n_positions': 4, 'd_model': 2}", &m, &description, &err), 0);
    es_registry *a = es_registry_with(cat, "u", "x", m, description, 1.5);
    es_registry *b = es_registry_with(a, "u", "y", m, "", 2.5);
    es_matrix_release(m);
    free(description);
    ck_assert_ptr_null(es_registry_model(cat, "u"));
    ck_assert(es_registry_model(b, "u")->user);
    ck_assert(!es_registry_model(b, "g")->user);
    ck_assert_uint_eq(es_registry_model(b, "u")->n_matrices, 2);
    ck_assert(b->generation == cat->generation + 2);
    size_t count, bytes;
    es_registry_user_totals(b, &count, &bytes);
    ck_assert_uint_eq(count, 2);
    ck_assert_uint_eq(bytes, 2 * 4 * 2 * sizeof(double));
    /* the readers of cat and a are unaffected; the model goes with its last matrix */
    es_registry *c = es_registry_without(b, "u", "x"), *d = es_registry_without(c, "u", "y");
    ck_assert_uint_eq(es_registry_model(c, "u")->n_matrices, 1);
    ck_assert_ptr_null(es_registry_model(d, "u"));
    ck_assert_ptr_nonnull(es_registry_matrix(a, "u", "x"));
    ck_assert_uint_eq(d->n_models, cat->n_models);
    /* a reload keeps user models, except one whose name the configuration took */
    es_registry *fresh = load_ok(TWO_MODELS);
    ck_assert_uint_eq(es_registry_adopt_user(fresh, c), 0);
    ck_assert_ptr_nonnull(es_registry_matrix(fresh, "u", "y"));
    es_registry *taken = load_ok("{'models': {'u': {'matrices': {'a': {'generator': 'rope', 'n_positions': 2, "
                                 "'d_model': 2}}}}}");
    ck_assert_uint_eq(es_registry_adopt_user(taken, c), 1);
    ck_assert_ptr_null(es_registry_matrix(taken, "u", "y"));
    es_registry *all[] = {cat, a, b, c, d, fresh, taken};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        es_registry_free(all[i]);
}
END_TEST

START_TEST(reload_keeps_unchanged_matrices)
{
    char dir[] = "/tmp/embedscope-test-reload-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char *path = es_asprintf("%s/c.json", dir), *cwd = getcwd(NULL, 0);
    char *text = es_asprintf("{\"data_dir\": \"%s/data\", \"models\": {\"g\": {\"matrices\": {"
                             "\"wpe\": {\"file\": \"gpt2-small/wpe.npy\"},"
                             "\"pe\": {\"generator\": \"sinusoidal\", \"n_positions\": 8, \"d_model\": 4}}}}}",
                             cwd);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    es_registry *first, *second, *third;
    es_err err;
    ck_assert_msg(es_config_load_file(path, &first, &err) == 0, "%s", err.message);
    ck_assert_msg(es_config_reload(first, path, &second, &err) == 0, "%s", err.message);
    ck_assert_uint_eq(second->n_reused, 2);
    ck_assert_ptr_eq(get(second, "g", "wpe"), get(first, "g", "wpe")); /* the same object: not read again */
    /* renamed model: the storage is shared under the new id */
    f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    char *renamed = es_asprintf("{\"data_dir\": \"%s/data\", \"models\": {\"h\": {\"matrices\": {"
                                "\"wpe\": {\"file\": \"gpt2-small/wpe.npy\", \"description\": \"new words\"},"
                                "\"pe\": {\"generator\": \"sinusoidal\", \"n_positions\": 8, \"d_model\": 6}}}}}",
                                cwd);
    f = fopen(path, "w");
    fputs(renamed, f);
    fclose(f);
    ck_assert_msg(es_config_reload(second, path, &third, &err) == 0, "%s", err.message);
    ck_assert_uint_eq(third->n_reused, 1); /* wpe kept (a description does not change data), pe regenerated */
    ck_assert_str_eq(get(third, "h", "wpe")->id, "h/wpe");
    ck_assert_str_eq(get(third, "h", "wpe")->prov.sha256, get(first, "g", "wpe")->prov.sha256);
    ck_assert_uint_eq(get(third, "h", "pe")->cols, 6);
    /* an invalid configuration fails with its key path */
    f = fopen(path, "w");
    fputs("{\"models\": {\"h\": {\"matrices\": {\"x\": {\"generator\": \"nope\"}}}}}", f);
    fclose(f);
    es_registry *bad = NULL;
    ck_assert_int_eq(es_config_reload(third, path, &bad, &err), -1);
    ck_assert_ptr_null(bad);
    ck_assert_str_eq(err.param, "models.h.matrices.x.generator");
    es_registry_free(first);
    es_registry_free(second);
    es_registry_free(third);
    unlink(path);
    rmdir(dir);
    free(renamed);
    free(text);
    free(cwd);
    free(path);
}
END_TEST

START_TEST(names)
{
    es_err err;
    ck_assert_int_eq(es_config_check_name("mine", "model", &err), 0);
    ck_assert_int_eq(es_config_check_name("..", "model", &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "model");
    ck_assert_int_eq(es_config_check_name("a b", "matrix", &err), -1);
    ck_assert_str_eq(err.param, "matrix");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("catalogue");
    TCase *t = tcase_create("catalogue");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, views_across_models);
    tcase_add_test(t, uploads_section);
    tcase_add_test(t, entries_for_uploads);
    tcase_add_test(t, copy_on_write_changes);
    tcase_add_test(t, reload_keeps_unchanged_matrices);
    tcase_add_test(t, names);
    suite_add_tcase(s, t);
    return s;
}

ES_CHECK_MAIN(suite)
