/* The live catalogue: names, recipes, the settings' copies and the reload's
 * comparison (one field list each), cross-model views, the "uploads" section, entries built
 * for uploads by the configuration's own parser, copy-on-write changes
 * (es_catalogue_with / without / adopt_user) and reloads that keep unchanged
 * matrices. Config texts are written with ' for " (see q()). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "embedscope/catalogue.h"
#include "embedscope/config.h"
#include "embedscope/settings.h"

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
static es_catalogue *load_ok(const char *text)
{
    char *t = q(text);
    es_catalogue *r = NULL;
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
static const es_matrix *get(const es_catalogue *r, const char *model, const char *name)
{
    const es_matrix *m = es_catalogue_matrix(r, model, name);
    ck_assert_msg(m != NULL, "no %s/%s", model, name);
    return m;
}

START_TEST(views_across_models)
{
    es_catalogue *r = load_ok(TWO_MODELS);
    const es_matrix *wpe = get(r, "g", "wpe"), *half = get(r, "v", "half"), *self = get(r, "v", "self");
    ck_assert_uint_eq(half->rows, 512);
    ck_assert_uint_eq(self->cols, 2);
    ck_assert_str_eq(half->prov.sha256, wpe->prov.sha256);
    ck_assert(es_matrix_at(half, 511, 767) == es_matrix_at(wpe, 511, 767));
    ck_assert_str_eq(half->prov.view, "rows 0:512 of g/wpe");
    es_catalogue_free(r);
}
END_TEST

START_TEST(uploads_section)
{
    es_catalogue *r = load_ok(TWO_MODELS);
    ck_assert_int_eq(r->uploads.enabled, -1);
    ck_assert_str_eq(r->uploads.token, "");
    ck_assert_uint_eq(r->uploads.max_body_bytes, 4ull << 30);
    ck_assert_uint_eq(r->uploads.max_total_bytes, 4ull << 30);
    ck_assert_uint_eq(r->uploads.max_pending_bytes, 4ull << 30);
    /* a Llama-sized float32 .npy (128256 x 4096 and its 128-byte header) fits one body */
    ck_assert_uint_ge(r->uploads.max_body_bytes, 128256ull * 4096 * 4 + 128);
    ck_assert_uint_eq(r->uploads.max_matrices, 1024);
    es_catalogue_free(r);
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
    es_catalogue_free(r);
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
static int build(const es_catalogue *cat, const char *text, es_matrix **m, char **description, es_err *err)
{
    char *t = q(text);
    int rc = es_config_build_entry(cat, "u", "x", t, strlen(t), NULL, m, description, err);
    free(t);
    return rc;
}

START_TEST(entries_for_uploads)
{
    es_catalogue *cat = load_ok(TWO_MODELS);
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
    es_catalogue_free(cat);
}
END_TEST

START_TEST(copy_on_write_changes)
{
    es_catalogue *cat = load_ok(TWO_MODELS);
    es_matrix *m;
    char *description;
    es_err err;
    ck_assert_int_eq(build(cat, "{'generator': 'rope', 'n_positions': 4, 'd_model': 2}", &m, &description, &err), 0);
    es_catalogue *a = es_catalogue_with(cat, "u", "x", m, description, 1.5);
    es_catalogue *b = es_catalogue_with(a, "u", "y", m, "", 2.5);
    es_matrix_release(m);
    free(description);
    ck_assert_ptr_null(es_catalogue_model(cat, "u"));
    ck_assert(es_catalogue_model(b, "u")->user);
    ck_assert(!es_catalogue_model(b, "g")->user);
    ck_assert_uint_eq(es_catalogue_model(b, "u")->n_matrices, 2);
    ck_assert(b->generation == cat->generation + 2);
    size_t count, bytes;
    es_catalogue_user_totals(b, &count, &bytes);
    ck_assert_uint_eq(count, 2);
    ck_assert_uint_eq(bytes, 2 * 4 * 2 * sizeof(double));
    /* the readers of cat and a are unaffected; the model goes with its last matrix */
    es_catalogue *c = es_catalogue_without(b, "u", "x"), *d = es_catalogue_without(c, "u", "y");
    ck_assert_uint_eq(es_catalogue_model(c, "u")->n_matrices, 1);
    ck_assert_ptr_null(es_catalogue_model(d, "u"));
    ck_assert_ptr_nonnull(es_catalogue_matrix(a, "u", "x"));
    ck_assert_uint_eq(d->n_models, cat->n_models);
    /* a reload keeps user models, except one whose name the configuration took */
    es_catalogue *fresh = load_ok(TWO_MODELS);
    ck_assert_uint_eq(es_catalogue_adopt_user(fresh, c), 0);
    ck_assert_ptr_nonnull(es_catalogue_matrix(fresh, "u", "y"));
    es_catalogue *taken = load_ok("{'models': {'u': {'matrices': {'a': {'generator': 'rope', 'n_positions': 2, "
                                  "'d_model': 2}}}}}");
    ck_assert_uint_eq(es_catalogue_adopt_user(taken, c), 1);
    ck_assert_ptr_null(es_catalogue_matrix(taken, "u", "y"));
    es_catalogue *all[] = {cat, a, b, c, d, fresh, taken};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        es_catalogue_free(all[i]);
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
    es_catalogue *first, *second, *third;
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
    es_catalogue *bad = NULL;
    ck_assert_int_eq(es_config_reload(third, path, &bad, &err), -1);
    ck_assert_ptr_null(bad);
    ck_assert_str_eq(err.param, "models.h.matrices.x.generator");
    es_catalogue_free(first);
    es_catalogue_free(second);
    es_catalogue_free(third);
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
    ck_assert_int_eq(es_catalogue_check_name("mine", "model", &err), 0);
    ck_assert_int_eq(es_catalogue_check_name("..", "model", &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "model");
    ck_assert_int_eq(es_catalogue_check_name("a b", "matrix", &err), -1);
    ck_assert_str_eq(err.param, "matrix");
    ck_assert_msg(strstr(err.message, "1 to 64 characters of [A-Za-z0-9._-]") != NULL, "%s", err.message);
    char longest[ES_NAME_MAX + 2];
    memset(longest, 'x', sizeof longest);
    longest[ES_NAME_MAX] = '\0';
    ck_assert(es_catalogue_valid_name(longest));
    longest[ES_NAME_MAX] = 'x';
    longest[ES_NAME_MAX + 1] = '\0';
    ck_assert(!es_catalogue_valid_name(longest));
    ck_assert(!es_catalogue_valid_name("."));
    ck_assert(!es_catalogue_valid_name(""));
    ck_assert(!es_catalogue_valid_name("a/b"));
    ck_assert(es_catalogue_valid_name("gpt2-small_v1.0"));
    /* the configuration names a bad key with the same rule */
    es_catalogue *r = NULL;
    char *t = q("{'models': {'a b': {'matrices': {'x': {'generator': 'sinusoidal', 'n_positions': 4, 'd_model': 2}}}}}");
    ck_assert_int_eq(es_config_load_text(t, "test.json", ".", &r, &err), -1);
    ck_assert_ptr_null(r);
    ck_assert_str_eq(err.param, "models.a b");
    ck_assert_msg(strstr(err.message, "invalid model name: use 1 to 64 characters") != NULL, "%s", err.message);
    free(t);
}
END_TEST

/* A loader's recipes: recorded with their matrix (retained), found by text. */
START_TEST(recipes)
{
    es_catalogue *r = es_catalogue_new("test");
    ck_assert_int_eq(r->refs, 1);
    ck_assert_str_eq(r->origin, "test");
    es_catalogue *src = load_ok("{'models': {'g': {'matrices': {'pe': {'generator': 'sinusoidal', "
                                "'n_positions': 8, 'd_model': 4}}}}}");
    es_matrix *pe = (es_matrix *)get(src, "g", "pe");
    ck_assert_ptr_null(es_catalogue_recipe(r, "a"));
    es_catalogue_add_recipe(r, es_strdup("a"), pe);
    es_catalogue_add_recipe(r, es_strdup("b"), pe);
    ck_assert_ptr_eq(es_catalogue_recipe(r, "a"), pe);
    ck_assert_ptr_eq(es_catalogue_recipe(r, "b"), pe);
    ck_assert_ptr_null(es_catalogue_recipe(r, "c"));
    ck_assert_ptr_null(es_catalogue_recipe(NULL, "a"));
    es_catalogue_free(src); /* r keeps pe */
    ck_assert_uint_eq(es_catalogue_recipe(r, "a")->rows, 8);
    es_catalogue_free(r);
}
END_TEST

/* Configurations that differ in a few settings. */
#define SETTINGS_A                                                                                                   \
    "{'server': {'listen': '127.0.0.1:8080', 'cors_origins': ['https://a.example'], 'cache_dir': 'c'},"             \
    "'limits': {'max_k': 10}, 'uploads': {'token': 't', 'dir': 'u'},"                                               \
    "'models': {'g': {'matrices': {'pe': {'generator': 'sinusoidal', 'n_positions': 8, 'd_model': 4}}}}}"
#define SETTINGS_B                                                                                                   \
    "{'server': {'listen': '127.0.0.1:9090', 'cors_origins': ['https://a.example', 'https://b.example'],"           \
    "'cache_dir': 'c', 'trusted_proxies': ['10.0.0.1'], 'threads': 3},"                                             \
    "'limits': {'max_k': 10, 'sync_seconds': 2.5}, 'uploads': {'token': 't', 'dir': 'u'},"                          \
    "'models': {'g': {'matrices': {'pe': {'generator': 'sinusoidal', 'n_positions': 8, 'd_model': 4}}}}}"

/* The change of key among changes, which must be there once (or, for listen, twice: host and port). */
static const es_setting_change *change_of(const es_setting_change *changes, const char *key, int *count)
{
    const es_setting_change *found = NULL;
    *count = 0;
    for (size_t i = 0; i < ES_SETTINGS_COUNT; i++)
        if (strcmp(changes[i].key, key) == 0) {
            (*count)++;
            found = found && found->changed ? found : &changes[i];
        }
    ck_assert_msg(found != NULL, "no setting %s", key);
    return found;
}

/* The reload's comparison: every member of server and limits, each changed one
 * found with its effect, the unchanged ones not. */
START_TEST(setting_changes)
{
    es_catalogue *a = load_ok(SETTINGS_A), *b = load_ok(SETTINGS_B);
    es_setting_change same[ES_SETTINGS_COUNT], diff[ES_SETTINGS_COUNT];
    es_setting_changes(&a->server, &a->limits, &a->server, &a->limits, same);
    for (size_t i = 0; i < ES_SETTINGS_COUNT; i++)
        ck_assert_msg(!same[i].changed, "%s", same[i].key);
    ck_assert_uint_eq(ES_SETTINGS_COUNT, 16 + 15); /* es_server_conf's and es_limits' members */
    es_setting_changes(&a->server, &a->limits, &b->server, &b->limits, diff);
    static const struct {
        const char *key;
        es_reload_effect effect;
    } changed[] = {{"server.listen", ES_RELOAD_RESTART},      {"server.threads", ES_RELOAD_RESTART},
                   {"server.cors_origins", ES_RELOAD_LIVE},   {"server.trusted_proxies", ES_RELOAD_ADMISSION},
                   {"limits.sync_seconds", ES_RELOAD_LIVE}};
    size_t n_changed = 0;
    for (size_t i = 0; i < ES_SETTINGS_COUNT; i++)
        n_changed += diff[i].changed;
    ck_assert_uint_eq(n_changed, 5); /* the listen port, not its host */
    int count;
    for (size_t i = 0; i < sizeof changed / sizeof *changed; i++) {
        const es_setting_change *c = change_of(diff, changed[i].key, &count);
        ck_assert_msg(c->changed, "%s", changed[i].key);
        ck_assert_int_eq(c->effect, changed[i].effect);
        ck_assert_int_eq(count, i == 0 ? 2 : 1); /* listen is the host and the port */
    }
    ck_assert(!change_of(diff, "server.cache_dir", &count)->changed);
    ck_assert(!change_of(diff, "limits.max_k", &count)->changed);
    ck_assert_int_eq(change_of(diff, "server.connection_limit", &count)->effect, ES_RELOAD_ADMISSION);
    ck_assert_int_eq(change_of(diff, "server.header_timeout_s", &count)->effect, ES_RELOAD_ADMISSION);
    ck_assert_int_eq(change_of(diff, "limits.max_rows", &count)->effect, ES_RELOAD_LIVE);
    es_catalogue_free(a);
    es_catalogue_free(b);
}
END_TEST

/* What a reload does with each setting, all of them: the ones docs/operations.md
 * says need a restart are RESTART (named in the warning), the ones the connection
 * admission keeps a copy of are ADMISSION (without it a reload of them alone would
 * not reach the admission), every other one LIVE. A member marked otherwise, or
 * one added without its entry here, fails. */
START_TEST(setting_effects)
{
    static const struct {
        const char *key;
        es_reload_effect effect;
    } effects[] = {{"server.listen", ES_RELOAD_RESTART},
                   {"server.threads", ES_RELOAD_RESTART},
                   {"server.blas_threads", ES_RELOAD_RESTART},
                   {"server.light_threads", ES_RELOAD_RESTART},
                   {"server.connection_timeout_s", ES_RELOAD_LIVE},
                   {"server.connection_limit", ES_RELOAD_ADMISSION},
                   {"server.per_address_limit", ES_RELOAD_ADMISSION},
                   {"server.header_timeout_s", ES_RELOAD_ADMISSION},
                   {"server.body_grace_s", ES_RELOAD_LIVE},
                   {"server.body_min_rate", ES_RELOAD_LIVE},
                   {"server.shutdown_grace_s", ES_RELOAD_LIVE},
                   {"server.cache_mb", ES_RELOAD_RESTART},
                   {"server.cache_dir", ES_RELOAD_RESTART},
                   {"server.cors_origins", ES_RELOAD_LIVE},
                   {"server.trusted_proxies", ES_RELOAD_ADMISSION}};
    es_server_conf s = {0};
    es_limits l = {0};
    es_setting_change changes[ES_SETTINGS_COUNT];
    es_setting_changes(&s, &l, &s, &l, changes);
    size_t n = sizeof effects / sizeof *effects;
    for (size_t i = 0; i < ES_SETTINGS_COUNT; i++) {
        const char *key = changes[i].key;
        es_reload_effect want = ES_RELOAD_LIVE; /* every limit */
        bool known = strncmp(key, "limits.", 7) == 0;
        for (size_t j = 0; j < n; j++)
            if (strcmp(effects[j].key, key) == 0) {
                want = effects[j].effect;
                known = true;
            }
        ck_assert_msg(known, "%s: a server setting without its reload effect in this test", key);
        ck_assert_msg(changes[i].effect == want, "%s: reload effect %d, expected %d", key, changes[i].effect, want);
    }
    ck_assert_uint_eq(ES_SETTINGS_COUNT, n + 1 + 15); /* listen is two members, es_limits has 15 */
}
END_TEST

/* Copies own their strings; a release leaves the struct zeroed. */
START_TEST(settings_copies)
{
    es_catalogue *b = load_ok(SETTINGS_B);
    es_server_conf s;
    es_server_conf_copy(&s, &b->server);
    ck_assert_ptr_ne(s.host, b->server.host);
    ck_assert_str_eq(s.host, "127.0.0.1");
    ck_assert_uint_eq(s.port, 9090);
    ck_assert_ptr_ne(s.cors_origins, b->server.cors_origins);
    ck_assert_str_eq(s.cors_origins[1], "https://b.example");
    ck_assert_ptr_null(s.cors_origins[2]);
    ck_assert_ptr_ne(s.cache_dir, b->server.cache_dir);
    ck_assert_str_eq(s.trusted_proxies[0], "10.0.0.1");
    es_setting_change changes[ES_SETTINGS_COUNT];
    es_setting_changes(&s, &b->limits, &b->server, &b->limits, changes);
    for (size_t i = 0; i < ES_SETTINGS_COUNT; i++)
        ck_assert_msg(!changes[i].changed, "%s", changes[i].key);
    es_server_conf_free(&s);
    ck_assert_ptr_null(s.host);
    ck_assert_uint_eq(s.port, 0);
    es_uploads_conf u;
    es_uploads_conf_copy(&u, &b->uploads);
    ck_assert_ptr_ne(u.token, b->uploads.token);
    ck_assert_str_eq(u.token, "t");
    ck_assert_str_eq(u.dir, "u");
    ck_assert_uint_eq(u.max_matrices, b->uploads.max_matrices);
    es_uploads_conf_free(&u);
    ck_assert_ptr_null(u.token);
    es_server_conf none = {0}, none_copy;
    es_server_conf_copy(&none_copy, &none); /* NULL strings stay NULL */
    ck_assert_ptr_null(none_copy.host);
    ck_assert_ptr_null(none_copy.cors_origins);
    es_server_conf_free(&none_copy);
    es_warm w[1] = {{"g/pe", "0:4", ES_CENTER_COLUMNS}}, *wc = es_warm_copy(w, 1);
    ck_assert_ptr_ne(wc[0].rows, w[0].rows);
    ck_assert_str_eq(wc[0].rows, "0:4");
    ck_assert_int_eq(wc[0].centering, ES_CENTER_COLUMNS);
    es_warm_free(wc, 1);
    es_warm_free(es_warm_copy(NULL, 0), 0);
    es_catalogue_free(b);
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
    tcase_add_test(t, recipes);
    tcase_add_test(t, setting_changes);
    tcase_add_test(t, setting_effects);
    tcase_add_test(t, settings_copies);
    suite_add_tcase(s, t);
    return s;
}

ES_CHECK_MAIN(suite)
