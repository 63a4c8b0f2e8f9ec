/* Configuration: the embedded default (ids, shapes, data, sha256), defaults of
 * omitted keys, views, and every error class with its exact key path. Config
 * texts are written with ' for " (see q()) to stay readable. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "embedscope/config.h"
#include "store/crafted.h"

#define FULL_SAFETENSORS ES_SHARED_DATA "/gpt2-small/gpt2-small-partial.safetensors"

/* A config text with every ' turned into " (model names never contain '). */
static char *q(const char *text)
{
    char *s = es_strdup(text);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    return s;
}

/* Load q(text) with base dir "." (the repository root, where tests run). */
static int load_q(const char *text, es_catalogue **r, es_err *err)
{
    char *t = q(text);
    int rc = es_config_load_text(t, "test.json", ".", r, err);
    free(t);
    return rc;
}

/* Loading q(text) fails with `code`, err->param == param, and a message that
 * starts with "test.json: PARAM: " (when param is not empty) and contains `part`. */
static void expect_error(const char *text, es_errcode code, const char *param, const char *part)
{
    es_catalogue *r = NULL;
    es_err err = {0};
    int rc = load_q(text, &r, &err);
    ck_assert_msg(rc == -1 && r == NULL, "config loaded but should fail at %s", param);
    ck_assert_msg(err.code == code, "code %s (want %s): %s", es_errcode_name(err.code), es_errcode_name(code),
                  err.message);
    ck_assert_str_eq(err.param, param);
    if (*param) {
        char *prefix = es_asprintf("test.json: %s", param); /* param may be truncated */
        ck_assert_msg(strncmp(err.message, prefix, strlen(prefix)) == 0, "no '%s' prefix: %s", prefix,
                      err.message);
        free(prefix);
    }
    ck_assert_msg(strstr(err.message, part) != NULL, "'%s' not in: %s", part, err.message);
}

/* Load q(text), which must succeed. */
static es_catalogue *load_ok(const char *text)
{
    es_catalogue *r = NULL;
    es_err err = {0};
    ck_assert_msg(load_q(text, &r, &err) == 0, "%s", err.message);
    return r;
}

/* The matrix with that id, which must exist. */
static const es_matrix *get(const es_catalogue *r, const char *id)
{
    const es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_msg(es_catalogue_lookup(r, id, "matrix", &m, &err) == 0, "%s", err.message);
    return m;
}

/* Shape, model axis and model-space size of m. */
static void expect_shape(const es_matrix *m, size_t rows, size_t cols, es_axis axis, size_t items, size_t dim)
{
    ck_assert_uint_eq(m->rows, rows);
    ck_assert_uint_eq(m->cols, cols);
    ck_assert_int_eq(m->model_axis, axis);
    ck_assert_uint_eq(es_matrix_items(m), items);
    ck_assert_uint_eq(es_matrix_dim(m), dim);
}

/* A small config around one matrix entry (model "m", matrix "a", generator 8 x 4). */
#define GEN_A "'a': {'generator': 'sinusoidal', 'n_positions': 8, 'd_model': 4}"
#define ONE_MODEL(matrices) "{'models': {'m': {'matrices': {" matrices "}}}}"
#define C_ATTN "'c': {'file': 'gpt2-small/h0_c_attn.npy', 'model_axis': 'rows'}"
#define WITH_DATA(matrices) "{'data_dir': 'data', 'models': {'m': {'matrices': {" matrices "}}}}"

/* ---------------------------------------------------------------- embedded default */

static es_catalogue *defaults;

static void load_defaults(void)
{
    es_err err = {0};
    unsetenv("EMBEDSCOPE_DATA_DIR");
    ck_assert_msg(es_config_load_default(&defaults, &err) == 0, "%s", err.message);
}

static void free_defaults(void) { es_catalogue_free(defaults); }

START_TEST(default_ids_and_shapes)
{
    const es_catalogue *r = defaults;
    ck_assert_str_eq(r->origin, "embedded default");
    expect_shape(get(r, "gpt2-small/wpe"), 1024, 768, ES_AXIS_COLUMNS, 1024, 768);
    expect_shape(get(r, "gpt2-small/h0.c_attn"), 768, 2304, ES_AXIS_ROWS, 2304, 768);
    expect_shape(get(r, "gpt2-small/h0.q"), 768, 768, ES_AXIS_ROWS, 768, 768);
    expect_shape(get(r, "gpt2-small/h0.k"), 768, 768, ES_AXIS_ROWS, 768, 768);
    expect_shape(get(r, "gpt2-small/h0.v"), 768, 768, ES_AXIS_ROWS, 768, 768);
    expect_shape(get(r, "gpt2-small/h0.q.head0"), 768, 64, ES_AXIS_ROWS, 64, 768);
    expect_shape(get(r, "gpt2-small/h0.o"), 768, 768, ES_AXIS_COLUMNS, 768, 768);
    expect_shape(get(r, "openai-gpt/wpe"), 512, 768, ES_AXIS_COLUMNS, 512, 768);
    expect_shape(get(r, "openai-gpt/h0.o"), 768, 768, ES_AXIS_COLUMNS, 768, 768);
    expect_shape(get(r, "sinusoidal/pe"), 1024, 768, ES_AXIS_COLUMNS, 1024, 768);
    expect_shape(get(r, "sinusoidal/pe512"), 512, 768, ES_AXIS_COLUMNS, 512, 768);
    expect_shape(get(r, "sinusoidal/rope"), 1024, 768, ES_AXIS_COLUMNS, 1024, 768);
    expect_shape(get(r, "baselines/gaussian"), 4096, 768, ES_AXIS_COLUMNS, 4096, 768);
    ck_assert_str_eq(get(r, "gpt2-small/h0.q")->id, "gpt2-small/h0.q");
    ck_assert_str_eq(get(r, "gpt2-small/wpe")->prov.dtype, "<f4");
    /* provenance names files as the config writes them (relative to data_dir) */
    ck_assert_str_eq(get(r, "gpt2-small/wpe")->prov.source, "gpt2-small/wpe.npy");
    ck_assert_str_eq(get(r, "gpt2-small/h0.q")->prov.source, "gpt2-small/h0_c_attn.npy");
    ck_assert_str_eq(get(r, "sinusoidal/pe")->prov.source, "generator:sinusoidal");
    const es_model *g = es_catalogue_model(r, "gpt2-small");
    ck_assert_ptr_nonnull(g);
    ck_assert_str_eq(g->matrix_names[0], "wpe");
    ck_assert_ptr_nonnull(strstr(g->matrix_descriptions[0], "W_pos"));
    ck_assert_ptr_eq(es_catalogue_matrix(r, "gpt2-small", "h0.o"), get(r, "gpt2-small/h0.o"));
    ck_assert_ptr_null(es_catalogue_matrix(r, "gpt2-small", "h9.o"));
}
END_TEST

/* q, k, v are the three column blocks of c_attn, head 0 the first 64 columns of q. */
START_TEST(default_views_share_c_attn)
{
    const es_matrix *c = get(defaults, "gpt2-small/h0.c_attn");
    const char *ids[] = {"gpt2-small/h0.q", "gpt2-small/h0.k", "gpt2-small/h0.v"};
    for (size_t b = 0; b < 3; b++) {
        const es_matrix *m = get(defaults, ids[b]);
        for (size_t i = 0; i < 768; i += 97)
            for (size_t j = 0; j < 768; j += 61)
                ck_assert(es_matrix_at(m, i, j) == es_matrix_at(c, i, 768 * b + j));
        /* model orientation: item j is column j, coordinate i is row i */
        ck_assert(es_matrix_item(m, 5, 700) == es_matrix_at(c, 700, 768 * b + 5));
    }
    const es_matrix *h = get(defaults, "gpt2-small/h0.q.head0");
    ck_assert(es_matrix_at(h, 300, 63) == es_matrix_at(c, 300, 63));
    ck_assert_ptr_nonnull(strstr(get(defaults, "gpt2-small/h0.k")->prov.view, "columns 768:1536"));
}
END_TEST

/* The file sha256 is the documented one (data/README.md); the data sha256 is that
 * of the file's last 1024*768*4 bytes (the array after the .npy header). */
START_TEST(default_wpe_sha256)
{
    const es_matrix *m = get(defaults, "gpt2-small/wpe");
    ck_assert_str_eq(m->prov.file_sha256, WPE_FILE_SHA256);
    expect_wpe_data(m, ES_REPO_DATA "/gpt2-small/wpe.npy");
}
END_TEST

/* r's server settings and limits are those of want_server / want_limits (all of
 * want_server's CORS origins, then no more). */
static void expect_server_and_limits(const es_catalogue *r, const es_server_conf *want_server,
                                     const es_limits *want_limits)
{
    const es_server_conf *s = &r->server;
    const es_limits *l = &r->limits;
    ck_assert_str_eq(s->host, want_server->host);
    ck_assert_uint_eq(s->port, want_server->port);
    ck_assert_uint_eq(s->threads, want_server->threads);
    ck_assert_uint_eq(s->blas_threads, want_server->blas_threads);
    ck_assert_uint_eq(s->connection_timeout_s, want_server->connection_timeout_s);
    ck_assert_uint_eq(s->connection_limit, want_server->connection_limit);
    ck_assert_uint_eq(s->per_address_limit, want_server->per_address_limit);
    ck_assert_uint_eq(s->header_timeout_s, want_server->header_timeout_s);
    ck_assert_uint_eq(s->body_grace_s, want_server->body_grace_s);
    ck_assert_uint_eq(s->body_min_rate, want_server->body_min_rate);
    ck_assert_uint_eq(s->shutdown_grace_s, want_server->shutdown_grace_s);
    ck_assert_uint_eq(s->cache_bytes, want_server->cache_bytes);
    size_t i = 0;
    for (; want_server->cors_origins[i]; i++)
        ck_assert_str_eq(s->cors_origins[i], want_server->cors_origins[i]);
    ck_assert_ptr_null(s->cors_origins[i]);
    for (i = 0; want_server->trusted_proxies[i]; i++)
        ck_assert_str_eq(s->trusted_proxies[i], want_server->trusted_proxies[i]);
    ck_assert_ptr_null(s->trusted_proxies[i]);
    ck_assert_uint_eq(l->max_request_memory, want_limits->max_request_memory);
    ck_assert_double_eq(l->sync_seconds, want_limits->sync_seconds);
    ck_assert_uint_eq(l->job_ttl_s, want_limits->job_ttl_s);
    ck_assert_uint_eq(l->max_jobs_per_client, want_limits->max_jobs_per_client);
    ck_assert_uint_eq(l->max_job_bytes, want_limits->max_job_bytes);
    ck_assert_uint_eq(l->request_timeout_s, want_limits->request_timeout_s);
    ck_assert_uint_eq(l->max_wait_s, want_limits->max_wait_s);
    ck_assert_uint_eq(l->max_k, want_limits->max_k);
    ck_assert_uint_eq(l->max_bins, want_limits->max_bins);
    ck_assert_uint_eq(l->max_rows, want_limits->max_rows);
    ck_assert_uint_eq(l->max_response_bytes, want_limits->max_response_bytes);
    ck_assert_uint_eq(l->max_exclude, want_limits->max_exclude);
    ck_assert_uint_eq(l->max_generated_elements, want_limits->max_generated_elements);
}

/* The documented defaults of every server and limits key (docs/configuration.md). */
static void expect_default_server_and_limits(const es_catalogue *r)
{
    static char *const any_origin[] = {"*", NULL}, *const none[] = {NULL};
    static const es_server_conf server = {.host = "127.0.0.1", .port = 8080, .threads = 0, .blas_threads = 0,
                                          .connection_timeout_s = 30, .connection_limit = 4096,
                                          .per_address_limit = 512, .header_timeout_s = 10,
                                          .body_grace_s = 10, .body_min_rate = 1024, .shutdown_grace_s = 30, .cache_bytes = 512u << 20,
                                          .cors_origins = (char **)any_origin, .trusted_proxies = (char **)none};
    static const es_limits limits = {.max_k = 768, .max_bins = 512, .max_rows = 0,
                                     .max_response_bytes = 33554432, .max_exclude = 4096,
                                     .max_generated_elements = 536870912, .max_request_memory = 0,
                                     .sync_seconds = 10, .request_timeout_s = 60, .max_wait_s = 600, .job_ttl_s = 600,
                                     .max_jobs_per_client = 16, .max_job_bytes = 256u << 20};
    expect_server_and_limits(r, &server, &limits);
}

START_TEST(default_server_limits_warm)
{
    const es_catalogue *r = defaults;
    expect_default_server_and_limits(r);
    ck_assert_uint_ge(r->n_warm, 1);
    ck_assert_str_eq(r->warm[0].matrix, "gpt2-small/wpe");
    ck_assert_str_eq(r->warm[0].rows, "1:");
    ck_assert_int_eq(r->warm[0].centering, ES_CENTER_COLUMNS);
    ck_assert_ptr_nonnull(strstr(es_config_default_text(), "\"gpt2-small\""));
}
END_TEST

/* Sinusoidal generator output matches the closed form (REFERENCE §6). */
START_TEST(default_sinusoidal_values)
{
    const es_matrix *m = get(defaults, "sinusoidal/pe");
    for (size_t p = 0; p < 1024; p += 113)
        for (size_t i = 0; i < 384; i += 37) {
            double w = pow(10000.0, -2.0 * (double)i / 768.0);
            ck_assert_double_eq_tol(es_matrix_at(m, p, 2 * i), sin((double)p * w), 1e-12);
            ck_assert_double_eq_tol(es_matrix_at(m, p, 2 * i + 1), cos((double)p * w), 1e-12);
        }
}
END_TEST

/* EMBEDSCOPE_DATA_DIR replaces the data directory of the embedded default. */
START_TEST(default_data_dir_from_env)
{
    char dir[] = "/tmp/es-config-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("EMBEDSCOPE_DATA_DIR", dir, 1);
    es_catalogue *r = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_config_load_default(&r, &err), -1);
    ck_assert_int_eq(err.code, ES_E_IO);
    ck_assert_str_eq(err.param, "models.gpt2-small.matrices.wpe.file");
    ck_assert_ptr_nonnull(strstr(err.message, dir));
    char *abs = realpath(ES_REPO_DATA, NULL);
    setenv("EMBEDSCOPE_DATA_DIR", abs, 1);
    ck_assert_msg(es_config_load_default(&r, &err) == 0, "%s", err.message);
    ck_assert_str_eq(get(r, "openai-gpt/wpe")->prov.source, "openai-gpt/wpe.npy"); /* no server path */
    es_catalogue_free(r);
    free(abs);
    unsetenv("EMBEDSCOPE_DATA_DIR");
    rmdir(dir);
}
END_TEST

/* ---------------------------------------------------------------- valid configs */

START_TEST(omitted_keys_take_defaults)
{
    es_catalogue *r = load_ok(ONE_MODEL(GEN_A));
    expect_default_server_and_limits(r);
    ck_assert_uint_eq(r->n_warm, 0);
    ck_assert_str_eq(r->models[0].description, "");
    ck_assert_str_eq(r->models[0].matrix_descriptions[0], "");
    /* base defaults to 10000: PE(1, 2) = sin(10000^(-2/4)) */
    ck_assert_double_eq_tol(es_matrix_at(get(r, "m/a"), 1, 2), sin(0.01), 1e-15);
    es_catalogue_free(r);
}
END_TEST

START_TEST(explicit_server_values)
{
    es_catalogue *r = load_ok("{'server': {'listen': '[::1]:9000', 'threads': 8, 'blas_threads': 2, "
                              "'connection_timeout_s': 0, 'connection_limit': 10, 'cache_mb': 3, "
                              "'per_address_limit': 4, 'header_timeout_s': 0, 'shutdown_grace_s': 5, "
                              "'body_grace_s': 0, 'body_min_rate': 9, "
                              "'cors_origins': ['https://a.example', 'http://b.example:8000'], "
                              "'trusted_proxies': ['10.0.0.1', '::1']}, "
                              "'limits': {'max_k': 5, 'max_bins': 6, 'max_rows': 7, 'max_response_bytes': 2048, "
                              "'max_exclude': 0, 'max_generated_elements': 32, 'max_request_cost': 1e9, "
                              "'max_request_memory': 1000000, 'sync_seconds': 2.5, 'job_ttl_s': 9, "
                              "'max_jobs_per_client': 3, 'request_timeout_s': 7, 'max_wait_s': 11, 'max_job_bytes': 0}, "
                              "'models': {'m': {'matrices': {" GEN_A "}}}}");
    static char *const origins[] = {"https://a.example", "http://b.example:8000", NULL};
    static char *const proxies[] = {"10.0.0.1", "::1", NULL};
    static const es_server_conf server = {.host = "::1", .port = 9000, .threads = 8, .blas_threads = 2,
                                          .connection_timeout_s = 0, .connection_limit = 10,
                                          .per_address_limit = 4, .header_timeout_s = 0, .shutdown_grace_s = 5,
                                          .body_grace_s = 0, .body_min_rate = 9,
                                          .cache_bytes = 3u << 20, .cors_origins = (char **)origins,
                                          .trusted_proxies = (char **)proxies};
    /* GEN_A is 8 x 4: exactly at max_generated_elements */
    static const es_limits limits = {.max_k = 5, .max_bins = 6, .max_rows = 7, .max_response_bytes = 2048,
                                     .max_exclude = 0, .max_generated_elements = 32,
                                     .max_request_memory = 1000000, .sync_seconds = 2.5, .request_timeout_s = 7,
                                     .max_wait_s = 11, .job_ttl_s = 9, .max_jobs_per_client = 3, .max_job_bytes = 0};
    expect_server_and_limits(r, &server, &limits);
    es_catalogue_free(r);
    r = load_ok("{'server': {'listen': 'localhost:0', 'cors_origins': []}, 'models': {'m': {'matrices': {" GEN_A
                "}}}}");
    ck_assert_str_eq(r->server.host, "localhost");
    ck_assert_uint_eq(r->server.port, 0);
    ck_assert_ptr_null(r->server.cors_origins[0]);
    es_catalogue_free(r);
    r = load_ok("{'server': {'blas_threads': 'auto'}, 'models': {'m': {'matrices': {" GEN_A "}}}}");
    ck_assert_uint_eq(r->server.blas_threads, 0); /* "auto" */
    es_catalogue_free(r);
}
END_TEST

/* Views: defined after their target, of views, rows, transpose, axis override, alias. */
START_TEST(view_steps)
{
    es_catalogue *r = load_ok(WITH_DATA(
        "'t': {'view': 'c', 'transpose': true}, "
        "'q': {'view': 'c', 'columns': [0, 768]}, "
        "'q2': {'view': 'q', 'rows': [10, 20], 'columns': [64, 128]}, "
        "'qa': {'view': 'q', 'model_axis': 'columns'}, "
        "'alias': {'view': 'c', 'description': 'same as c'}, " C_ATTN));
    const es_matrix *c = get(r, "m/c"), *t = get(r, "m/t"), *q2 = get(r, "m/q2");
    expect_shape(t, 2304, 768, ES_AXIS_COLUMNS, 2304, 768);
    ck_assert(es_matrix_at(t, 1000, 5) == es_matrix_at(c, 5, 1000));
    ck_assert(es_matrix_item(t, 1000, 5) == es_matrix_item(c, 1000, 5));
    expect_shape(q2, 10, 64, ES_AXIS_ROWS, 64, 10);
    ck_assert(es_matrix_at(q2, 3, 4) == es_matrix_at(c, 13, 68));
    expect_shape(get(r, "m/qa"), 768, 768, ES_AXIS_COLUMNS, 768, 768);
    const es_matrix *alias = get(r, "m/alias");
    ck_assert_str_eq(alias->id, "m/alias");
    expect_shape(alias, 768, 2304, ES_AXIS_ROWS, 2304, 768);
    ck_assert_str_eq(r->models[0].matrix_names[4], "alias");
    ck_assert_str_eq(r->models[0].matrix_descriptions[4], "same as c");
    es_catalogue_free(r);
}
END_TEST

/* A config file: data_dir resolves against the file's directory. */
START_TEST(load_file_resolves_data_dir)
{
    char dir[] = "/tmp/es-config-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char *abs = realpath(ES_REPO_DATA, NULL), *link = es_asprintf("%s/weights", dir),
         *path = es_asprintf("%s/c.json", dir);
    ck_assert_int_eq(symlink(abs, link), 0);
    char *text = q("{'data_dir': 'weights', 'models': {'gpt': {'matrices': {"
                   "'wpe': {'file': 'openai-gpt/wpe.npy'}}}}}");
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    es_catalogue *r = NULL;
    es_err err = {0};
    ck_assert_msg(es_config_load_file(path, &r, &err) == 0, "%s", err.message);
    ck_assert_str_eq(r->origin, path);
    expect_shape(get(r, "gpt/wpe"), 512, 768, ES_AXIS_COLUMNS, 512, 768);
    es_catalogue_free(r);
    unlink(path);
    ck_assert_int_eq(es_config_load_file(path, &r, &err), -1);
    ck_assert_int_eq(err.code, ES_E_IO);
    ck_assert_str_eq(err.param, "config");
    ck_assert_ptr_nonnull(strstr(err.message, path));
    unlink(link);
    rmdir(dir);
    free(text);
    free(abs);
    free(link);
    free(path);
}
END_TEST

START_TEST(safetensors_tensors)
{
    crafted f = write_two_tensor_safetensors();
    char *text = es_asprintf("{'models': {'m': {'matrices': {'w': {'file': '%s', 'tensor': 'w', 'model_axis': 'rows'}, "
                             "'b': {'file': '%s', 'tensor': 'b'}}}}}", f.path, f.path);
    es_catalogue *r = load_ok(text);
    expect_shape(get(r, "m/w"), 2, 3, ES_AXIS_ROWS, 3, 2);
    expect_shape(get(r, "m/b"), 1, 3, ES_AXIS_COLUMNS, 1, 3);
    ck_assert(es_matrix_at(get(r, "m/w"), 1, 2) == 5.5);
    ck_assert(es_matrix_at(get(r, "m/b"), 0, 1) == 7.5);
    ck_assert_str_eq(get(r, "m/b")->prov.tensor, "b");
    ck_assert_str_eq(get(r, "m/b")->prov.source, f.path); /* absolute as written */
    es_catalogue_free(r);
    free(text);
    text = es_asprintf("{'models': {'m': {'matrices': {'w': {'file': '%s', 'tensor': 'nope'}}}}}", f.path);
    expect_error(text, ES_E_CONFIG, "models.m.matrices.w.tensor", "nope");
    free(text);
    text = es_asprintf("{'models': {'m': {'matrices': {'w': {'file': '%s'}}}}}", f.path);
    expect_error(text, ES_E_CONFIG, "models.m.matrices.w.tensor", "tensor");
    free(text);
    unlink(f.path);
}
END_TEST

/* ---------------------------------------------------------------- errors */

START_TEST(unknown_keys)
{
    expect_error("{'model': {}}", ES_E_CONFIG, "model", "unknown key");
    expect_error("{'server': {'port': 1}, 'models': {}}", ES_E_CONFIG, "server.port", "\"listen\"");
    /* the allowed keys come from the settings' field lists, "listen" (host and port) named once */
    expect_error("{'server': {'port': 1}, 'models': {}}", ES_E_CONFIG, "server.port",
                 "allowed here: \"listen\", \"threads\", \"blas_threads\",");
    expect_error("{'uploads': {'size': 1}, 'models': {}}", ES_E_CONFIG, "uploads.size",
                 "allowed here: \"enabled\", \"token\", \"tmp_dir\", \"dir\", \"max_body_bytes\"");
    expect_error("{'limits': {'max_kk': 1}}", ES_E_CONFIG, "limits.max_kk", "unknown key");
    expect_error("{'models': {'m': {'matrices': {" GEN_A "}, 'colour': 1}}}", ES_E_CONFIG, "models.m.colour",
                 "unknown key");
    expect_error(ONE_MODEL("'a': {'generator': 'sinusoidal', 'n_positions': 8, 'd_model': 4, 'rows': 3}"),
                 ES_E_CONFIG, "models.m.matrices.a.rows", "\"n_positions\"");
    expect_error(ONE_MODEL("'a': {'generator': 'gaussian', 'rows': 8, 'cols': 4, 'base': 3}"), ES_E_CONFIG,
                 "models.m.matrices.a.base", "unknown key");
    expect_error(ONE_MODEL("'a': {'file': 'x.npy', 'colums': [0, 1]}"), ES_E_CONFIG, "models.m.matrices.a.colums",
                 "unknown key");
    expect_error(ONE_MODEL(GEN_A ", 'b': {'view': 'a', 'column': [0, 1]}"), ES_E_CONFIG,
                 "models.m.matrices.b.column", "unknown key");
    expect_error(ONE_MODEL(GEN_A) ",", ES_E_CONFIG, "", "line 1");
    expect_error("{'models': {'m': {'matrices': {" GEN_A "}}}, 'warm': [{'matrix': 'm/a', 'center': 'none', "
                 "'k': 3}]}", ES_E_CONFIG, "warm[0].k", "unknown key");
}
END_TEST

START_TEST(wrong_types)
{
    expect_error("[]", ES_E_CONFIG, "", "expected an object, got an array");
    expect_error("{'data_dir': 5}", ES_E_CONFIG, "data_dir", "expected a string, got an integer");
    expect_error("{'server': []}", ES_E_CONFIG, "server", "expected an object, got an array");
    expect_error("{'server': {'threads': '2'}}", ES_E_CONFIG, "server.threads", "expected an integer, got a string");
    expect_error("{'server': {'threads': 0}}", ES_E_CONFIG, "server.threads", "[1, 1024]");
    expect_error("{'server': {'blas_threads': 'all'}}", ES_E_CONFIG, "server.blas_threads",
                 "expected \"auto\" or an integer in [1, 1024], got \"all\"");
    expect_error("{'server': {'blas_threads': 0}}", ES_E_CONFIG, "server.blas_threads", "[1, 1024]");
    expect_error("{'server': {'blas_threads': 2.5}}", ES_E_CONFIG, "server.blas_threads", "got a real number");
    expect_error("{'server': {'cache_mb': 1.5}}", ES_E_CONFIG, "server.cache_mb", "got a real number");
    expect_error("{'server': {'cors_origins': '*'}}", ES_E_CONFIG, "server.cors_origins", "got a string");
    expect_error("{'server': {'cors_origins': ['*', 1]}}", ES_E_CONFIG, "server.cors_origins[1]", "got an integer");
    expect_error("{'server': {'trusted_proxies': ['10.0.0.1', 'proxy.local']}}", ES_E_CONFIG,
                 "server.trusted_proxies[1]", "a numeric IP address");
    expect_error("{'limits': {'sync_seconds': 0}}", ES_E_CONFIG, "limits.sync_seconds", "(0, 86400]");
    expect_error("{'server': {'listen': '127.0.0.1'}}", ES_E_CONFIG, "server.listen", "HOST:PORT");
    expect_error("{'server': {'listen': '127.0.0.1:65536'}}", ES_E_CONFIG, "server.listen", "HOST:PORT");
    expect_error("{'server': {'listen': ':80'}}", ES_E_CONFIG, "server.listen", "HOST:PORT");
    expect_error("{'limits': {'max_k': -1}}", ES_E_CONFIG, "limits.max_k", "got -1");
    expect_error("{'limits': {'max_bins': null}}", ES_E_CONFIG, "limits.max_bins", "got null");
    expect_error("{'models': []}", ES_E_CONFIG, "models", "expected an object");
    expect_error("{'models': {'m': 3}}", ES_E_CONFIG, "models.m", "expected an object, got an integer");
    expect_error("{'models': {'m': {'description': true, 'matrices': {}}}}", ES_E_CONFIG, "models.m.description",
                 "got a boolean");
    expect_error(ONE_MODEL("'a': 'x.npy'"), ES_E_CONFIG, "models.m.matrices.a", "expected an object, got a string");
    expect_error(ONE_MODEL("'a': {'file': 42}"), ES_E_CONFIG, "models.m.matrices.a.file", "got an integer");
    expect_error(ONE_MODEL("'a': {'file': 'x.npy', 'model_axis': 'cols'}"), ES_E_CONFIG,
                 "models.m.matrices.a.model_axis", "\"columns\" or \"rows\"");
    expect_error(ONE_MODEL("'a': {'generator': 'sinusoidal', 'n_positions': 8.0, 'd_model': 4}"), ES_E_CONFIG,
                 "models.m.matrices.a.n_positions", "got a real number");
    expect_error(ONE_MODEL("'a': {'generator': 'sinusoidal', 'n_positions': 8, 'd_model': 5}"), ES_E_CONFIG,
                 "models.m.matrices.a.d_model", "even");
    expect_error(ONE_MODEL("'a': {'generator': 'rope', 'n_positions': 8, 'd_model': 4, 'base': 1}"), ES_E_CONFIG,
                 "models.m.matrices.a.base", "> 1");
    expect_error(ONE_MODEL("'a': {'generator': 'gaussian', 'rows': 8, 'cols': 4, 'decay': '1'}"), ES_E_CONFIG,
                 "models.m.matrices.a.decay", "expected a number");
    expect_error(ONE_MODEL("'a': {'generator': 'gaussian', 'rows': 8, 'cols': 4, 'seed': -1}"), ES_E_CONFIG,
                 "models.m.matrices.a.seed", "got -1");
    expect_error(ONE_MODEL("'a': {'generator': 'fourier'}"), ES_E_CONFIG, "models.m.matrices.a.generator",
                 "\"gaussian\"");
    expect_error(ONE_MODEL(GEN_A ", 'b': {'view': 'a', 'transpose': 'yes'}"), ES_E_CONFIG,
                 "models.m.matrices.b.transpose", "expected a boolean");
    expect_error(ONE_MODEL(GEN_A ", 'b': {'view': 'a', 'columns': [1]}"), ES_E_CONFIG,
                 "models.m.matrices.b.columns", "[start, stop]");
    expect_error(ONE_MODEL(GEN_A ", 'b': {'view': 'a', 'rows': '0:4'}"), ES_E_CONFIG, "models.m.matrices.b.rows",
                 "got a string");
    expect_error("{'models': {'m': {'matrices': {" GEN_A "}}}, 'warm': {}}", ES_E_CONFIG, "warm",
                 "expected an array");
    expect_error("{'models': {'m': {'matrices': {" GEN_A "}}}, 'warm': [3]}", ES_E_CONFIG, "warm[0]",
                 "expected an object");
}
END_TEST

START_TEST(missing_keys)
{
    expect_error("{}", ES_E_CONFIG, "models", "missing required key");
    expect_error("{'models': {}}", ES_E_CONFIG, "models", "at least one model");
    expect_error("{'models': {'m': {}}}", ES_E_CONFIG, "models.m.matrices", "missing required key");
    expect_error("{'models': {'m': {'matrices': {}}}}", ES_E_CONFIG, "models.m.matrices", "at least one matrix");
    expect_error(ONE_MODEL("'a': {}"), ES_E_CONFIG, "models.m.matrices.a", "exactly one of");
    expect_error(ONE_MODEL("'a': {'description': 'x'}"), ES_E_CONFIG, "models.m.matrices.a", "got 0");
    expect_error(ONE_MODEL("'a': {'file': 'x.npy', 'view': 'b'}"), ES_E_CONFIG, "models.m.matrices.a", "got 2");
    expect_error(ONE_MODEL("'a': {'generator': 'sinusoidal', 'd_model': 4}"), ES_E_CONFIG,
                 "models.m.matrices.a.n_positions", "missing required key");
    expect_error(ONE_MODEL("'a': {'generator': 'gaussian', 'rows': 4}"), ES_E_CONFIG, "models.m.matrices.a.cols",
                 "missing required key");
    expect_error("{'models': {'m': {'matrices': {" GEN_A "}}}, 'warm': [{'matrix': 'm/a'}]}", ES_E_CONFIG,
                 "warm[0].center", "missing required key");
    expect_error("{'models': {'m': {'matrices': {" GEN_A "}}}, 'warm': [{'center': 'none'}]}", ES_E_CONFIG,
                 "warm[0].matrix", "missing required key");
}
END_TEST

/* A file that cannot be read keeps ES_E_IO, one that breaks the format keeps
 * ES_E_FORMAT; both with the key path as param and message prefix. */
START_TEST(loader_errors_keep_code)
{
    expect_error(WITH_DATA("'a': {'file': 'gpt2-small/missing.npy'}"), ES_E_IO, "models.m.matrices.a.file",
                 "missing.npy");
    bytes b = {0};
    b_put(&b, "\x93NUMPY\x01\x00", 8);
    b_le(&b, 10, 2);
    b_str(&b, "{'descr': ");
    crafted f = write_crafted(&b, ".npy");
    b_free(&b);
    char *text = es_asprintf("{'models': {'m': {'matrices': {'a': {'file': '%s'}}}}}", f.path);
    expect_error(text, ES_E_FORMAT, "models.m.matrices.a.file", f.path);
    free(text);
    text = es_asprintf("{'models': {'m': {'matrices': {'a': {'file': '%s', 'tensor': 'x'}}}}}", f.path);
    expect_error(text, ES_E_CONFIG, "models.m.matrices.a.tensor", "tensor");
    free(text);
    unlink(f.path);
}
END_TEST

/* limits.max_generated_elements caps rows x cols of every generator before it runs
 * (the fuzzer's configs asked for 457 GB), and 256 times it caps the Gaussian's
 * cost rows x cols x min(rows, cols) (6000 x 6000 took 52 s). */
/* With the default limits an upload of a Llama-sized Gaussian stand-in (128256 x 4096: 525,336,576
 * doubles, 4.2 GB, its cost 2^40.97) passes the checks an upload's generator passes before it is made,
 * within the room of an empty uploads.max_total_bytes; twice as many columns do not. Only the decision
 * is tested: generating it takes minutes and 4.2 GB. */
START_TEST(llama_sized_generator_accepted_by_default)
{
    es_catalogue *r = load_ok("{'models': {'m': {'matrices': {'a': {'generator': 'rope', 'n_positions': 2, "
                              "'d_model': 2}}}}}");
    size_t room = r->uploads.max_total_bytes;
    es_err err;
    ck_assert_int_eq(es_config_check_generated(&r->limits, "gaussian", 128256, 4096, &room, &err), 0);
    ck_assert_int_eq(es_config_check_generated(&r->limits, "gaussian", 128256, 8192, &room, &err), -1);
    ck_assert_int_eq(err.code, ES_E_LIMIT);
    ck_assert_str_eq(err.param, "max_generated_elements");
    /* within the elements limit, not within the room an upload has */
    room = 1u << 30;
    ck_assert_int_eq(es_config_check_generated(&r->limits, "gaussian", 128256, 4096, &room, &err), -1);
    ck_assert_int_eq(err.code, ES_E_STORAGE);
    ck_assert_str_eq(err.param, "uploads.max_total_bytes");
    es_catalogue_free(r);
}
END_TEST

START_TEST(generator_size_limits)
{
#define GEN_LIMITED(limit, entry) "{'limits': {'max_generated_elements': " limit "}, " \
                                  "'models': {'m': {'matrices': {'a': " entry "}}}}"
    const char *const over_default[] = {
        "{'generator': 'sinusoidal', 'n_positions': 102416, 'd_model': 558434}",
        "{'generator': 'rope', 'n_positions': 2147483647, 'd_model': 64}",
        "{'generator': 'gaussian', 'rows': 60000, 'cols': 60000}",
        "{'generator': 'sinusoidal', 'n_positions': 524289, 'd_model': 1024}", /* 2^29 + 1024 */
    };
    for (size_t i = 0; i < sizeof over_default / sizeof *over_default; i++) {
        char *text = es_asprintf("{'models': {'m': {'matrices': {'a': %s}}}}", over_default[i]);
        expect_error(text, ES_E_CONFIG, "models.m.matrices.a", "limits.max_generated_elements = 536870912");
        free(text);
    }
    /* 16384 x 16384 = 2^28 elements fit, its cost 2^42 does not (4096 x 2^29 = 2^41) */
    expect_error(ONE_MODEL("'a': {'generator': 'gaussian', 'rows': 16384, 'cols': 16384}"), ES_E_CONFIG,
                 "models.m.matrices.a", "min(rows, cols) above 4096 x limits.max_generated_elements = 2199023255552");
    /* boundaries with a small limit: elements 32 of 32 pass, 36 do not */
    es_catalogue *r = load_ok(GEN_LIMITED("32", "{'generator': 'rope', 'n_positions': 16, 'd_model': 2}"));
    expect_shape(get(r, "m/a"), 16, 2, ES_AXIS_COLUMNS, 16, 2);
    es_catalogue_free(r);
    expect_error(GEN_LIMITED("32", "{'generator': 'sinusoidal', 'n_positions': 6, 'd_model': 6}"), ES_E_CONFIG,
                 "models.m.matrices.a", "a 6 x 6 sinusoidal matrix has more than limits.max_generated_elements = 32");
    /* Gaussian cost at its boundary with the limit 2^26 (checked, not generated): 16384 x 4096 costs
     * 2^38 = 4096 x 2^26 exactly, 8192 x 8192 (as many elements) twice that */
    es_limits small = {.max_generated_elements = 1u << 26};
    es_err err;
    ck_assert_int_eq(es_config_check_generated(&small, "gaussian", 16384, 4096, NULL, &err), 0);
    ck_assert_int_eq(es_config_check_generated(&small, "gaussian", 8192, 8192, NULL, &err), -1);
    ck_assert_int_eq(err.code, ES_E_LIMIT);
    ck_assert_msg(strstr(err.message, "8192 x 8192 gaussian matrix costs") != NULL, "%s", err.message);
    ck_assert_int_eq(es_config_check_generated(&small, "rope", 8192, 8192, NULL, &err), 0);
    /* with a huge limit the cost product itself overflows 64 bits: refused, not wrapped */
    expect_error(GEN_LIMITED("4611686018427387904", "{'generator': 'gaussian', 'rows': 2147483647, "
                                                     "'cols': 2147483647}"),
                 ES_E_CONFIG, "models.m.matrices.a", "costs");
    expect_error("{'limits': {'max_generated_elements': 0}}", ES_E_CONFIG, "limits.max_generated_elements",
                 "got 0");
    expect_error("{'limits': {'max_generated_elements': 1e6}}", ES_E_CONFIG, "limits.max_generated_elements",
                 "got a real number");
#undef GEN_LIMITED
}
END_TEST

START_TEST(bad_views)
{
    expect_error(WITH_DATA(C_ATTN ", 'q': {'view': 'c', 'columns': [0, 2305]}"), ES_E_CONFIG,
                 "models.m.matrices.q.columns", "within [0, 2304]");
    expect_error(WITH_DATA(C_ATTN ", 'q': {'view': 'c', 'columns': [768, 768]}"), ES_E_CONFIG,
                 "models.m.matrices.q.columns", "start < stop");
    expect_error(WITH_DATA(C_ATTN ", 'q': {'view': 'c', 'columns': [-1, 768]}"), ES_E_CONFIG,
                 "models.m.matrices.q.columns", "[-1, 768]");
    expect_error(WITH_DATA(C_ATTN ", 'q': {'view': 'c', 'rows': [700, 769]}"), ES_E_CONFIG,
                 "models.m.matrices.q.rows", "within [0, 768]");
    /* rows apply before columns: after a transpose view c has 2304 rows */
    expect_error(WITH_DATA(C_ATTN ", 't': {'view': 'c', 'transpose': true}, 'u': {'view': 't', 'columns': [0, 769]}"),
                 ES_E_CONFIG, "models.m.matrices.u.columns", "within [0, 768]");
    expect_error(ONE_MODEL(GEN_A ", 'b': {'view': 'z'}"), ES_E_CONFIG, "models.m.matrices.b.view",
                 "no matrix \"z\"");
    expect_error("{'models': {'n': {'matrices': {" GEN_A "}}, 'm': {'matrices': {'b': {'view': 'a'}}}}}",
                 ES_E_CONFIG, "models.m.matrices.b.view", "no matrix \"a\": a view names a matrix of its own model");
}
END_TEST

START_TEST(view_cycles)
{
    expect_error(ONE_MODEL("'a': {'view': 'a'}"), ES_E_CONFIG, "models.m.matrices.a.view",
                 "cycle: \"a\" -> \"a\"");
    expect_error(ONE_MODEL("'a': {'view': 'b'}, 'b': {'view': 'a'}"), ES_E_CONFIG, "models.m.matrices.a.view",
                 "cycle: \"a\" -> \"b\" -> \"a\"");
    expect_error(ONE_MODEL(GEN_A ", 'x': {'view': 'y'}, 'y': {'view': 'z'}, 'z': {'view': 'y'}"), ES_E_CONFIG,
                 "models.m.matrices.y.view", "cycle: \"y\" -> \"z\" -> \"y\"");
}
END_TEST

START_TEST(duplicate_keys)
{
    expect_error("{'models': {'m': {'matrices': {" GEN_A ", " GEN_A "}}}}", ES_E_CONFIG, "", "duplicate");
    expect_error("{'limits': {'max_k': 1, 'max_k': 2}, 'models': {}}", ES_E_CONFIG, "", "duplicate");
}
END_TEST

START_TEST(bad_names)
{
    expect_error("{'models': {'gpt 2': {'matrices': {" GEN_A "}}}}", ES_E_CONFIG, "models.gpt 2",
                 "invalid model name");
    expect_error("{'models': {'': {'matrices': {" GEN_A "}}}}", ES_E_CONFIG, "models.", "invalid model name");
    expect_error("{'models': {'..': {'matrices': {" GEN_A "}}}}", ES_E_CONFIG, "models...", "invalid model name");
    expect_error(ONE_MODEL("'a/b': {'generator': 'rope', 'n_positions': 2, 'd_model': 2}"), ES_E_CONFIG,
                 "models.m.matrices.a/b", "invalid matrix name");
    expect_error(ONE_MODEL("'h0?q': {'generator': 'rope', 'n_positions': 2, 'd_model': 2}"), ES_E_CONFIG,
                 "models.m.matrices.h0?q", "[A-Za-z0-9._-]");
    char name[70];
    memset(name, 'x', 65);
    name[65] = '\0';
    char *text = es_asprintf("{'models': {'%s': {'matrices': {" GEN_A "}}}}", name);
    char *param = es_asprintf("models.%.56s", name); /* err->param holds 63 characters */
    expect_error(text, ES_E_CONFIG, param, "invalid model name");
    free(text);
    free(param);
    memset(name, 'x', 64);
    name[64] = '\0';
    text = es_asprintf("{'models': {'%s': {'matrices': {" GEN_A "}}}}", name);
    es_catalogue *r = load_ok(text);
    ck_assert_str_eq(r->models[0].name, name);
    es_catalogue_free(r);
    free(text);
}
END_TEST

START_TEST(bad_warm)
{
#define WARM(entry) "{'models': {'m': {'matrices': {" GEN_A "}}}, 'warm': [{'matrix': 'm/a', 'center': 'none'}, " entry "]}"
    expect_error(WARM("{'matrix': 'm/b', 'center': 'none'}"), ES_E_CONFIG, "warm[1].matrix", "no matrix \"b\"");
    expect_error(WARM("{'matrix': 'x/a', 'center': 'none'}"), ES_E_CONFIG, "warm[1].matrix", "unknown model");
    expect_error(WARM("{'matrix': 'a', 'center': 'none'}"), ES_E_CONFIG, "warm[1].matrix", "model/matrix");
    expect_error(WARM("{'matrix': 'm/a', 'center': 'cols'}"), ES_E_CONFIG, "warm[1].center", "\"columns\"");
    expect_error(WARM("{'matrix': 'm/a', 'rows': '1:2:0', 'center': 'rows'}"), ES_E_CONFIG, "warm[1].rows", "");
    expect_error(WARM("{'matrix': 'm/a', 'rows': '8:', 'center': 'rows'}"), ES_E_CONFIG, "warm[1].rows", "");
    expect_error(WARM("{'matrix': 'm/a', 'rows': 'x', 'center': 'rows'}"), ES_E_CONFIG, "warm[1].rows", "");
    es_catalogue *r = load_ok(WARM("{'matrix': 'm/a', 'rows': '-4::2', 'center': 'rows'}"));
    ck_assert_uint_eq(r->n_warm, 2);
    ck_assert_str_eq(r->warm[1].rows, "-4::2");
    ck_assert_int_eq(r->warm[1].centering, ES_CENTER_ROWS);
    ck_assert_int_eq(r->warm[0].centering, ES_CENTER_NONE);
    ck_assert_str_eq(r->warm[0].rows, "");
    es_catalogue_free(r);
#undef WARM
}
END_TEST

START_TEST(catalogue_lookup)
{
    es_catalogue *r = load_ok(ONE_MODEL(GEN_A));
    const es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_catalogue_lookup(r, "m/a", "a", &m, &err), 0);
    ck_assert_str_eq(m->id, "m/a");
    const char *malformed[] = {"m", "/a", "m/", "m/a/b", ""};
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++) {
        ck_assert_int_eq(es_catalogue_lookup(r, malformed[i], "b", &m, &err), -1);
        ck_assert_int_eq(err.code, ES_E_PARAM);
        ck_assert_str_eq(err.param, "b");
    }
    ck_assert_int_eq(es_catalogue_lookup(r, "n/a", "a", &m, &err), -1);
    ck_assert_int_eq(err.code, ES_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.message, "unknown model \"n\""));
    ck_assert_int_eq(es_catalogue_lookup(r, "m/b", "a", &m, &err), -1);
    ck_assert_int_eq(err.code, ES_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.message, "no matrix \"b\""));
    ck_assert_ptr_null(es_catalogue_model(r, "n"));
    es_catalogue_free(r);
}
END_TEST

/* ---------------------------------------------------------------- model axis origin, heads */

/* Issue 10: a 768 x 768 Conv1D weight loaded without "model_axis" silently took
 * columns. Known GPT-2 Conv1D tensor names now give their axis; a square matrix
 * whose axis was still defaulted carries a warning. */
START_TEST(conv1d_names)
{
    static const struct { const char *name; int known; es_axis axis; } cases[] = {
        {"h.0.attn.c_attn.weight", 1, ES_AXIS_ROWS},
        {"transformer.h.11.attn.c_attn.weight", 1, ES_AXIS_ROWS},
        {"h.3.mlp.c_fc.weight", 1, ES_AXIS_ROWS},
        {"h.3.attn.c_proj.weight", 1, ES_AXIS_COLUMNS},
        {"transformer.h.3.mlp.c_proj.weight", 1, ES_AXIS_COLUMNS},
        {"attn.c_proj.weight", 1, ES_AXIS_COLUMNS},
        {"h.0.attn.c_attn.bias", 0, ES_AXIS_COLUMNS},
        {"h.0.xattn.c_attn.weight", 0, ES_AXIS_COLUMNS},
        {"wpe.weight", 0, ES_AXIS_COLUMNS},
        {"", 0, ES_AXIS_COLUMNS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        es_axis axis = ES_AXIS_COLUMNS;
        ck_assert_int_eq(es_conv1d_axis(cases[i].name, &axis) == 0, cases[i].known);
        ck_assert_int_eq(axis, cases[i].axis);
    }
    ck_assert_str_eq(es_axis_origin_name(ES_AXIS_STATED), "stated");
    ck_assert_str_eq(es_axis_origin_name(ES_AXIS_BY_NAME), "tensor_name");
    ck_assert_str_eq(es_axis_origin_name(ES_AXIS_DEFAULTED), "default");
}
END_TEST

START_TEST(axis_origin_and_warning)
{
    es_catalogue *r = load_ok(WITH_DATA("'o': {'file': 'gpt2-small/h0_c_proj.npy'}, "
                                        "'os': {'file': 'gpt2-small/h0_c_proj.npy', 'model_axis': 'columns'}, "
                                        "'ov': {'view': 'o', 'columns': [0, 64]}, "
                                        "'ot': {'view': 'o', 'model_axis': 'rows'}, "
                                        "'w': {'file': 'gpt2-small/wpe.npy'}"));
    const es_matrix *o = get(r, "m/o"), *os = get(r, "m/os"), *ov = get(r, "m/ov"), *ot = get(r, "m/ot");
    ck_assert_int_eq(o->axis_origin, ES_AXIS_DEFAULTED);
    ck_assert_int_eq(o->model_axis, ES_AXIS_COLUMNS);
    char *w = es_axis_warning(o);
    ck_assert_ptr_nonnull(w);
    ck_assert_ptr_nonnull(strstr(w, "m/o is square (768 x 768)"));
    free(w);
    ck_assert_int_eq(os->axis_origin, ES_AXIS_STATED);
    ck_assert_ptr_null(es_axis_warning(os));
    ck_assert_int_eq(ov->axis_origin, ES_AXIS_DEFAULTED);   /* inherited, but not square */
    ck_assert_ptr_null(es_axis_warning(ov));
    ck_assert_int_eq(ot->axis_origin, ES_AXIS_STATED);
    ck_assert_int_eq(get(r, "m/w")->axis_origin, ES_AXIS_DEFAULTED);
    ck_assert_ptr_null(es_axis_warning(get(r, "m/w")));     /* 1024 x 768 */
    ck_assert_uint_eq(r->models[0].n_heads, 0);
    es_catalogue_free(r);
    /* the embedded default states every axis */
    for (size_t i = 0; i < defaults->n_models; i++)
        for (size_t j = 0; j < defaults->models[i].n_matrices; j++)
            ck_assert_ptr_null(es_axis_warning(defaults->models[i].matrices[j]));
}
END_TEST

/* Safetensors Conv1D weights without "model_axis" take their known axis. */
START_TEST(conv1d_default_from_safetensors)
{
    if (!es_have_file(FULL_SAFETENSORS)) {
        ES_SKIP("%s absent", FULL_SAFETENSORS);
        return;
    }
    char *text = es_asprintf("{'data_dir': '%s', 'models': {'m': {'n_heads': 12, 'matrices': {"
                             "'ca': {'file': 'gpt2-small/gpt2-small-partial.safetensors', 'tensor': 'h.2.attn.c_attn.weight'},"
                             "'cp': {'file': 'gpt2-small/gpt2-small-partial.safetensors', 'tensor': 'h.2.attn.c_proj.weight'},"
                             "'cs': {'file': 'gpt2-small/gpt2-small-partial.safetensors', 'tensor': 'h.2.attn.c_proj.weight',"
                             " 'model_axis': 'rows'}}}}}", ES_SHARED_DATA);
    es_catalogue *r = load_ok(text);
    free(text);
    const es_matrix *ca = get(r, "m/ca"), *cp = get(r, "m/cp"), *cs = get(r, "m/cs");
    expect_shape(ca, 768, 2304, ES_AXIS_ROWS, 2304, 768);
    ck_assert_int_eq(ca->axis_origin, ES_AXIS_BY_NAME);
    expect_shape(cp, 768, 768, ES_AXIS_COLUMNS, 768, 768);
    ck_assert_int_eq(cp->axis_origin, ES_AXIS_BY_NAME);
    ck_assert_ptr_null(es_axis_warning(cp));
    expect_shape(cs, 768, 768, ES_AXIS_ROWS, 768, 768);   /* stated wins */
    ck_assert_int_eq(cs->axis_origin, ES_AXIS_STATED);
    ck_assert_uint_eq(r->models[0].n_heads, 12);
    es_catalogue_free(r);
}
END_TEST

/* "n_heads" per model, and head views of the embedded default's W_Q. */
START_TEST(heads)
{
    expect_error("{'models': {'m': {'n_heads': 0, 'matrices': {" GEN_A "}}}}", ES_E_CONFIG, "models.m.n_heads", "integer in [1,");
    expect_error("{'models': {'m': {'n_heads': 'twelve', 'matrices': {" GEN_A "}}}}", ES_E_CONFIG, "models.m.n_heads",
                 "integer");
    const es_model *gpt2 = es_catalogue_model(defaults, "gpt2-small");
    ck_assert_uint_eq(gpt2->n_heads, 12);
    ck_assert_uint_eq(es_catalogue_model(defaults, "sinusoidal")->n_heads, 0);
    const es_matrix *q = get(defaults, "gpt2-small/h0.q"), *q0 = get(defaults, "gpt2-small/h0.q.head0");
    es_err err = {0};
    for (size_t h = 0; h < 12; h += 11) {
        es_matrix *v = NULL;
        ck_assert_msg(es_view_head(q, 12, h, "head", &v, &err) == 0, "%s", err.message);
        expect_shape(v, 768, 64, ES_AXIS_ROWS, 64, 768);
        for (size_t i = 0; i < 768; i += 7)
            for (size_t j = 0; j < 64; j += 5)
                ck_assert(es_matrix_at(v, i, j) == es_matrix_at(q, i, 64 * h + j));
        if (h == 0)
            for (size_t i = 0; i < 768; i += 7)
                ck_assert(es_matrix_at(v, i, 3) == es_matrix_at(q0, i, 3));
        ck_assert_str_eq(v->id, h ? "gpt2-small/h0.q[head=11]" : "gpt2-small/h0.q[head=0]");
        ck_assert_ptr_nonnull(strstr(v->prov.view, h ? "head 11 of 12 (items 704:768)" : "head 0 of 12 (items 0:64)"));
        es_matrix_release(v);
    }
    /* W_O (model axis columns): its rows are the heads */
    es_matrix *v = NULL;
    const es_matrix *o = get(defaults, "gpt2-small/h0.o");
    ck_assert_int_eq(es_view_head(o, 12, 2, "w_head", &v, &err), 0);
    expect_shape(v, 64, 768, ES_AXIS_COLUMNS, 64, 768);
    ck_assert(es_matrix_at(v, 5, 9) == es_matrix_at(o, 128 + 5, 9));
    es_matrix_release(v);
    ck_assert_int_eq(es_view_head(q, 12, 12, "a_head", &v, &err), -1);
    ck_assert_str_eq(err.param, "a_head");
    ck_assert_int_eq(es_view_head(q, 0, 0, "head", &v, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "n_heads"));
    ck_assert_int_eq(es_view_head(get(defaults, "gpt2-small/wpe"), 12, 0, "head", &v, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "1024 items of dimension 768"));
    ck_assert_int_eq(es_view_head(get(defaults, "gpt2-small/h0.c_attn"), 12, 0, "head", &v, &err), -1);
    ck_assert_int_eq(es_view_head(q, 7, 0, "head", &v, &err), -1);   /* 7 does not divide 768 */
}
END_TEST

/* ---------------------------------------------------------------- gpt2-full.json */

START_TEST(gpt2_full_config)
{
    if (!es_have_file(FULL_SAFETENSORS)) {
        ES_SKIP("%s absent, config/gpt2-full.json not tested", FULL_SAFETENSORS);
        return;
    }
    es_catalogue *r = NULL;
    es_err err = {0};
    ck_assert_msg(es_config_load_file("config/gpt2-full.json", &r, &err) == 0, "%s", err.message);
    const es_matrix *wpe = get(r, "gpt2-small/wpe");
    expect_shape(wpe, 1024, 768, ES_AXIS_COLUMNS, 1024, 768);
    ck_assert_uint_eq(es_catalogue_model(r, "gpt2-small")->n_heads, 12);
    ck_assert_str_eq(wpe->prov.tensor, "wpe.weight");
    ck_assert_str_eq(wpe->prov.source, "gpt2-small/gpt2-small-partial.safetensors");
    /* the file is opened and hashed once for its 61 tensors: the hash is the file's */
    es_file *f;
    ck_assert_int_eq(es_file_map(FULL_SAFETENSORS, &f, &err), 0);
    char file_sha[65];
    es_sha256_hex(f->bytes, f->size, file_sha);
    es_file_free(f);
    ck_assert_str_eq(wpe->prov.file_sha256, file_sha);
    ck_assert_str_eq(get(r, "gpt2-small/h11.o")->prov.file_sha256, file_sha);
    /* the shipped wpe.npy holds the same W_pos */
    const es_matrix *shipped = get(defaults, "gpt2-small/wpe");
    for (size_t i = 0; i < 1024; i += 31)
        for (size_t j = 0; j < 768; j += 17)
            ck_assert(es_matrix_at(wpe, i, j) == es_matrix_at(shipped, i, j));
    for (int layer = 0; layer < 12; layer++) {
        char id[64];
        const char *blocks[] = {"q", "k", "v"};
        snprintf(id, sizeof id, "gpt2-small/h%d.c_attn", layer);
        const es_matrix *c = get(r, id);
        expect_shape(c, 768, 2304, ES_AXIS_ROWS, 2304, 768);
        for (size_t b = 0; b < 3; b++) {
            snprintf(id, sizeof id, "gpt2-small/h%d.%s", layer, blocks[b]);
            const es_matrix *m = get(r, id);
            expect_shape(m, 768, 768, ES_AXIS_ROWS, 768, 768);
            ck_assert(es_matrix_at(m, 11, 22) == es_matrix_at(c, 11, 768 * b + 22));
        }
        snprintf(id, sizeof id, "gpt2-small/h%d.o", layer);
        expect_shape(get(r, id), 768, 768, ES_AXIS_COLUMNS, 768, 768);
        snprintf(id, sizeof id, "gpt2-small/h%d.ln_1.weight", layer);
        expect_shape(get(r, id), 1, 768, ES_AXIS_COLUMNS, 1, 768);
        snprintf(id, sizeof id, "gpt2-small/h%d.ln_1.bias", layer);
        expect_shape(get(r, id), 1, 768, ES_AXIS_COLUMNS, 1, 768);
        snprintf(id, sizeof id, "gpt2-small/h%d.c_attn.bias", layer);
        expect_shape(get(r, id), 1, 2304, ES_AXIS_COLUMNS, 1, 2304);
    }
    /* layer 0 equals the shipped layer-0 c_attn */
    const es_matrix *q0 = get(r, "gpt2-small/h0.q"), *q0s = get(defaults, "gpt2-small/h0.q");
    for (size_t i = 0; i < 768; i += 41)
        ck_assert(es_matrix_at(q0, i, 700) == es_matrix_at(q0s, i, 700));
    es_catalogue_free(r);
}
END_TEST

/* Write text to dir/name; returns the path (caller frees). */
static char *write_file(const char *dir, const char *name, const char *text)
{
    char *path = es_asprintf("%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* An entry's "labels": TSV without header (one column), CSV by its name, checked against the
 * items; refused in an upload's entry; replacing the matrix drops them, es_catalogue_with_labels
 * sets and drops them. */
START_TEST(labels_files)
{
    char dir[] = "/tmp/es-test-labels-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char *tsv = write_file(dir, "pos.tsv", "p0\np1\np2\np3\n");
    char *csv = write_file(dir, "pos.csv", "w,n\r\n\"a,b\",1\r\nc,2\r\nd,3\r\ne,4\r\n");
    char *shrt = write_file(dir, "short.tsv", "a\nb\nc\n");
    char *text = es_asprintf("{'models': {'m': {'matrices': {"
                             "'a': {'generator': 'sinusoidal', 'n_positions': 4, 'd_model': 2, 'labels': '%s'},"
                             "'b': {'view': 'a', 'labels': '%s'}, 'c': {'view': 'a'}}}}}", tsv, csv);
    es_catalogue *r = load_ok(text);
    es_labels *a = es_catalogue_labels(r, "m", "a"), *b = es_catalogue_labels(r, "m", "b");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_null(es_catalogue_labels(r, "m", "c"));
    ck_assert_str_eq(a->names[0], "label");
    ck_assert_str_eq(a->cells[3], "p3");
    ck_assert_uint_eq(b->n_cols, 2);
    ck_assert_str_eq(b->cells[0], "a,b");
    ck_assert(b->numeric[1]);
    es_catalogue *dropped = es_catalogue_with_labels(r, "m", "a", NULL);
    ck_assert_ptr_null(es_catalogue_labels(dropped, "m", "a"));
    ck_assert_ptr_eq(es_catalogue_labels(dropped, "m", "b"), b);
    es_catalogue *set = es_catalogue_with_labels(dropped, "m", "c", a);
    ck_assert_ptr_eq(es_catalogue_labels(set, "m", "c"), a);
    es_catalogue *replaced = es_catalogue_with(set, "m", "c", (es_matrix *)es_catalogue_matrix(r, "m", "a"), "", 0);
    ck_assert_ptr_null(es_catalogue_labels(replaced, "m", "c"));
    es_catalogue *without = es_catalogue_without(set, "m", "b");
    ck_assert_ptr_eq(es_catalogue_labels(without, "m", "c"), a);
    es_catalogue_free(without);
    es_catalogue_free(replaced);
    es_catalogue_free(set);
    es_catalogue_free(dropped);
    free(text);
    text = es_asprintf("{'models': {'m': {'matrices': {"
                       "'a': {'generator': 'sinusoidal', 'n_positions': 4, 'd_model': 2, 'labels': '%s'}}}}}", shrt);
    expect_error(text, ES_E_CONFIG, "models.m.matrices.a.labels", "3 rows of labels, the matrix has 4 rows");
    free(text);
    es_matrix *m = NULL;
    char *description = NULL;
    es_err err = {0};
    char *entry = es_asprintf("{\"generator\": \"sinusoidal\", \"n_positions\": 4, \"d_model\": 2, \"labels\": \"%s\"}", tsv);
    ck_assert_int_eq(es_config_build_entry(r, "u", "x", entry, strlen(entry), NULL, &m, &description, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "labels");
    free(entry);
    es_catalogue_free(r);
    unlink(tsv);
    unlink(csv);
    unlink(shrt);
    rmdir(dir);
    free(tsv);
    free(csv);
    free(shrt);
}
END_TEST

/* es_deadline_seconds: request_timeout_s, moved by a longer Prefer: wait (a
 * shorter one never shortens it) up to limits.max_wait_s, and never below
 * request_timeout_s even when max_wait_s is set lower; 0 (no deadline) stays 0.
 * Fails with the wait ignored, unbounded, or capped at a max_wait_s below
 * request_timeout_s. */
START_TEST(deadline_seconds_rule)
{
    es_limits l = {.request_timeout_s = 30, .max_wait_s = 100};
    ck_assert(es_deadline_seconds(&l, -1) == 30);
    ck_assert(es_deadline_seconds(&l, 10) == 30);
    ck_assert(es_deadline_seconds(&l, 60) == 60);
    ck_assert(es_deadline_seconds(&l, 100) == 100);
    ck_assert(es_deadline_seconds(&l, 600) == 100);
    l.max_wait_s = 10; /* below request_timeout_s: the wait cannot shorten the deadline */
    ck_assert(es_deadline_seconds(&l, 600) == 30);
    ck_assert(es_deadline_seconds(&l, 20) == 30);
    l.max_wait_s = 0;
    ck_assert(es_deadline_seconds(&l, 600) == 30);
    l = (es_limits){.request_timeout_s = 0, .max_wait_s = 100}; /* no deadline */
    ck_assert(es_deadline_seconds(&l, 600) == 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("config");
    TCase *d = tcase_create("embedded default");
    tcase_add_unchecked_fixture(d, load_defaults, free_defaults);
    tcase_set_timeout(d, 300);
    tcase_add_test(d, default_ids_and_shapes);
    tcase_add_test(d, default_views_share_c_attn);
    tcase_add_test(d, default_wpe_sha256);
    tcase_add_test(d, default_server_limits_warm);
    tcase_add_test(d, default_sinusoidal_values);
    tcase_add_test(d, default_data_dir_from_env);
    tcase_add_test(d, gpt2_full_config);
    tcase_add_test(d, axis_origin_and_warning);
    tcase_add_test(d, heads);
    suite_add_tcase(s, d);
    TCase *v = tcase_create("valid");
    tcase_add_test(v, labels_files);
    tcase_set_timeout(v, 60);
    tcase_add_test(v, omitted_keys_take_defaults);
    tcase_add_test(v, explicit_server_values);
    tcase_add_test(v, deadline_seconds_rule);
    tcase_add_test(v, view_steps);
    tcase_add_test(v, load_file_resolves_data_dir);
    tcase_add_test(v, safetensors_tensors);
    tcase_add_test(v, conv1d_names);
    tcase_add_test(v, conv1d_default_from_safetensors);
    tcase_add_test(v, catalogue_lookup);
    suite_add_tcase(s, v);
    TCase *e = tcase_create("errors");
    tcase_set_timeout(e, 60);
    tcase_add_test(e, unknown_keys);
    tcase_add_test(e, wrong_types);
    tcase_add_test(e, missing_keys);
    tcase_add_test(e, loader_errors_keep_code);
    tcase_add_test(e, generator_size_limits);
    tcase_add_test(e, llama_sized_generator_accepted_by_default);
    tcase_add_test(e, bad_views);
    tcase_add_test(e, view_cycles);
    tcase_add_test(e, duplicate_keys);
    tcase_add_test(e, bad_names);
    tcase_add_test(e, bad_warm);
    suite_add_tcase(s, e);
    return s;
}

ES_CHECK_MAIN(make_suite)
