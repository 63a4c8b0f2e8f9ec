/* libFuzzer target: the upload path of the daemon (src/api/uploads.c and the
 * loaders and configuration parser behind it), headers and body.
 *
 * Input: a request head, NUL, then the body. The head is lines: the method,
 * the path with its query ("k=v&k=v", already decoded, as libmicrohttpd hands
 * it over), then "Name: value" headers (Content-Type, Authorization,
 * Content-Length). The body is written in chunks of the first head byte's size
 * (1..256) and the write is finished as the compute pool would finish it, on a
 * small app (no HTTP socket). Each outcome is checked: a success leaves the
 * matrix in the catalogue (PUT: 200/201 with its description, DELETE: 204 and
 * gone), a failure has a write's error class and renders as a problem document,
 * and the configured model never changes. abort() on any broken rule. After a
 * PUT the matrix is deleted again, so the catalogue stays small. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "embedscope/config.h"
#include "embedscope/app.h"
#include "embedscope/params.h"
#include "embedscope/problem.h"
#include "embedscope/results.h"
#include "embedscope/uploads.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A configured model "t" (read-only) with small matrices; small upload limits. */
static const char CONFIG[] =
    "{\"limits\": {\"max_generated_elements\": 4096},"
    " \"uploads\": {\"token\": \"tok\", \"max_body_bytes\": 65536, \"max_total_bytes\": 262144,"
    "               \"max_matrices\": 4},"
    " \"models\": {\"t\": {\"matrices\": {"
    "  \"pe\": {\"generator\": \"sinusoidal\", \"n_positions\": 50, \"d_model\": 8},"
    "  \"g\": {\"generator\": \"gaussian\", \"rows\": 6, \"cols\": 4, \"seed\": 3}}}}}";

static es_app app;

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_upload: %s: %s\n", what, detail);
    abort();
}

/* The app the writes go to (no compute pool: es_upload_finish runs inline). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    es_log_set_level(ES_LOG_ERROR);
    es_catalogue *reg;
    es_err err;
    if (es_config_load_text(CONFIG, "fuzz_upload", ".", &reg, &err) != 0 || es_app_init(&app, reg, &err) != 0)
        fail("cannot set up the app", err.message);
    app.loopback = true;
    return 0;
}

/* The head of a request, parsed from the input. */
typedef struct head {
    char method[16], path[512];
    const char *content_type, *authorization, *content_length;
    es_query query;
} head;

/* Split "path?k=v&k" into path and query items. */
static void split_query(head *h, char *target)
{
    char *q = strchr(target, '?');
    if (q)
        *q++ = '\0';
    snprintf(h->path, sizeof h->path, "%s", target);
    for (char *item = q ? strtok(q, "&") : NULL; item; item = strtok(NULL, "&")) {
        char *eq = strchr(item, '=');
        if (eq)
            *eq++ = '\0';
        es_query_add(&h->query, item, eq);
    }
}

/* Parse the head text (modified in place; header values point into it). */
static void parse_head(char *text, head *h)
{
    *h = (head){0};
    es_query_init(&h->query);
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    snprintf(h->method, sizeof h->method, "%s", line ? line : "");
    line = strtok_r(NULL, "\n", &save);
    split_query(h, line ? line : "");
    while ((line = strtok_r(NULL, "\n", &save))) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        const char *value = colon + 1 + (colon[1] == ' ');
        if (strcasecmp(line, "Content-Type") == 0)
            h->content_type = value;
        else if (strcasecmp(line, "Authorization") == 0)
            h->authorization = value;
        else if (strcasecmp(line, "Content-Length") == 0)
            h->content_length = value;
    }
}

/* A failure must be of a class a write can fail with, and render. */
static void check_failure(const es_err *err, const char *path)
{
    switch (err->code) {
    case ES_E_PARAM: case ES_E_LIMIT: case ES_E_NOTFOUND: case ES_E_UNAUTHORIZED: case ES_E_FORBIDDEN:
    case ES_E_CONFLICT: case ES_E_TOO_LARGE: case ES_E_MEDIA_TYPE: case ES_E_STORAGE:
        break;
    default:
        fail("unexpected error class", err->message);
    }
    json_t *p = es_problem_new(es_problem_kind_of(err->code), err->message, err->param, path, "fuzz");
    char *text = json_dumps(p, 0);
    if (!text || es_problem_status(es_problem_kind_of(err->code)) < 400)
        fail("problem does not render", err->message);
    free(text);
    json_decref(p);
}

/* After a successful write: the reply and the catalogue agree with it. */
static void check_success(const head *h, const es_reply *rep)
{
    es_catalogue *cat = es_app_catalogue(&app);
    const es_model *t = es_catalogue_model(cat, "t");
    if (!t || t->user || t->n_matrices != 2)
        fail("the configured model changed", h->path);
    bool put = strcmp(h->method, "PUT") == 0;
    if ((put && rep->status != 200 && rep->status != 201) ||
        (!put && rep->status != 204))
        fail("unexpected reply status", h->path);
    if (put && (!rep->body || !rep->location || strncmp(rep->location, "/v1/models/", 11) != 0))
        fail("a PUT reply lacks its description or Location", h->path);
    es_catalogue_free(cat);
}

/* Delete what a successful PUT created (directly, as an authorised DELETE). */
static void undo(const char *path)
{
    es_upload *u;
    es_err err;
    es_query q;
    es_query_init(&q);
    es_catalogue *cat = es_app_catalogue(&app);
    if (es_upload_begin(&app, cat, "DELETE", path, &q, "Bearer tok", false, NULL, NULL, &u, &err) != 0)
        fail("cannot begin the undo", err.message);
    es_reply rep = {0};
    if (es_upload_finish(&app, u, &rep, &err) != 0)
        fail("cannot undo a PUT", err.message);
    es_reply_release(&rep);
    es_upload_free(u);
    es_catalogue_free(cat);
    es_query_free(&q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul || nul == data)
        return 0;
    size_t head_len = (size_t)(nul - data), chunk = data[0] % 256 + 1;
    char *text = es_malloc(head_len + 1);
    memcpy(text, data, head_len);
    text[head_len] = '\0';
    head h;
    parse_head(text, &h);
    const char *body = (const char *)nul + 1;
    size_t body_len = size - head_len - 1;
    es_catalogue *cat = es_app_catalogue(&app);
    es_upload *u = NULL;
    es_err err = {0};
    int rc = es_upload_begin(&app, cat, h.method, h.path, &h.query, h.authorization, false, h.content_type,
                             h.content_length, &u, &err);
    bool put = strcmp(h.method, "PUT") == 0; /* a body to write (es_upload_begin refuses other methods) */
    for (size_t at = 0; rc == 0 && put && at < body_len; at += chunk)
        rc = es_upload_write(u, body + at, body_len - at < chunk ? body_len - at : chunk, &err);
    es_reply rep = {0};
    if (rc == 0)
        rc = es_upload_finish(&app, u, &rep, &err);
    if (rc != 0)
        check_failure(&err, h.path);
    else
        check_success(&h, &rep);
    if (rc == 0 && put)
        undo(h.path);
    es_reply_release(&rep);
    es_upload_free(u);
    es_catalogue_free(cat);
    es_query_free(&h.query);
    free(text);
    return 0;
}
