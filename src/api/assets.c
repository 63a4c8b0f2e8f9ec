/* The browser dashboard: the page at / and its hashed assets at /assets/{file},
 * built by web/build.mjs and compiled into the binary (es_web_assets, generated
 * assembly). Each asset comes with its gzip made at build time, so serving one
 * costs a copy, never a compression. */
#include "embedscope/route.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* One built asset; the layout matches the table web/build.mjs writes. */
typedef struct es_web_asset {
    const char *name;  /* "index.html" or "name.<hash>.ext" */
    const char *type;  /* Content-Type */
    const char *raw;
    size_t raw_len;
    const char *gz;
    size_t gz_len;
} es_web_asset;

/* Ended by an entry whose name is NULL. */
extern const es_web_asset es_web_assets[];

/* The asset called name, or NULL. */
static const es_web_asset *find_asset(const char *name)
{
    for (const es_web_asset *a = es_web_assets; a->name; a++)
        if (strcmp(a->name, name) == 0)
            return a;
    return NULL;
}

/* A 200 reply with the asset's bytes (static) and a copy of its gzip (the
 * reply owns and frees gz). */
static void asset_reply(es_ctx *cx, const es_web_asset *a)
{
    cx->reply.status = 200;
    cx->reply.content_type = a->type;
    cx->reply.body = (char *)a->raw;
    cx->reply.len = a->raw_len;
    cx->reply.body_static = true;
    if (a->gz_len < a->raw_len) {
        cx->reply.gz = es_malloc(a->gz_len);
        memcpy(cx->reply.gz, a->gz, a->gz_len);
        cx->reply.gz_len = a->gz_len;
    }
}

/* A page (index.html at /, docs.html at /docs): revalidated on every load (its
 * ETag from the body), so a new build's asset names are seen at once.
 * ES_E_NOTFOUND when this build has no such page (built without Node.js). */
static int page(es_ctx *cx, const char *name, es_err *err)
{
    const es_web_asset *a = find_asset(name);
    if (!a)
        return es_fail(err, ES_E_NOTFOUND, "path",
                       "%s is not in this build: the daemon was built without Node.js (make dashboard)", name);
    asset_reply(cx, a);
    cx->reply.cache_control = "no-cache";
    cx->reply.etag_from_body = true;
    return 0;
}

/* Pages have plain names; hashed assets "name.<hash>.ext" have two dots. */
static bool is_page(const es_web_asset *a)
{
    return strchr(a->name, '.') == strrchr(a->name, '.');
}

/* The dashboard. */
int es_web_index(es_ctx *cx, es_err *err)
{
    return page(cx, "index.html", err);
}

/* The API reference (Swagger UI of /openapi.yaml). */
int es_web_docs(es_ctx *cx, es_err *err)
{
    return page(cx, "docs.html", err);
}

/* A hashed asset: its name changes with its content, so it is immutable for a
 * year; the ETag is the hash in the name. ES_E_NOTFOUND naming "file" for an
 * unknown name (pages are only served at their own paths). */
int es_web_file(es_ctx *cx, es_err *err)
{
    const es_web_asset *a = find_asset(cx->slug);
    if (!a || is_page(a))
        return es_fail(err, ES_E_NOTFOUND, "file", "no asset '%s'", cx->slug);
    asset_reply(cx, a);
    cx->reply.cache_control = "public, max-age=31536000, immutable";
    const char *dot = strchr(a->name, '.');
    snprintf(cx->reply.etag, sizeof cx->reply.etag, "W/\"%.16s\"", dot ? dot + 1 : a->name);
    return 0;
}
