/* libFuzzer target: content negotiation (src/api/format.c es_negotiate): the
 * Accept header with q-values and the format / orient / table parameters.
 *
 * Input: "ACCEPT\nFORMAT\nORIENT\nTABLE" (missing lines: the parameter is
 * absent; an empty Accept line: no header). Checked against pca's descriptor
 * (json, csv, npy; tables coords and variance), compare's (the tables of every
 * comparable analysis) and a descriptor without tables (JSON only): a
 * success names a format the analysis produces, orient=columns only with JSON,
 * a table it lists, and without ?format= and Accept it is JSON; a failure is
 * ES_E_UNACCEPTABLE (406) or ES_E_PARAM naming format, orient or table.
 * abort() on any broken rule. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedscope/descriptor.h"
#include "embedscope/format.h"
#include "embedscope/params.h"
#include "embedscope/route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *value)
{
    fprintf(stderr, "fuzz_accept: %s: '%s'\n", what, value);
    abort();
}

/* Line i of text (copies into buf), or NULL when there are fewer lines. */
static const char *line(const char *text, int i, char *buf, size_t size)
{
    for (; i > 0; i--) {
        text = strchr(text, '\n');
        if (!text)
            return NULL;
        text++;
    }
    size_t len = strcspn(text, "\n");
    snprintf(buf, size, "%.*s", (int)(len < size - 1 ? len : size - 1), text);
    return buf;
}

static void check(const es_analysis *a, const char *accept, const es_query *q)
{
    es_ctx cx = {.query = q, .accept = accept};
    es_err err = {0};
    if (es_negotiate(&cx, a, &err) < 0) {
        bool named = strcmp(err.param, "format") == 0 || strcmp(err.param, "orient") == 0 ||
                     strcmp(err.param, "table") == 0 || err.param[0] == '\0';
        if ((err.code != ES_E_UNACCEPTABLE && err.code != ES_E_PARAM) || !named)
            fail("unexpected failure", err.message);
        return;
    }
    const es_render_opts *r = &cx.render;
    bool tabular = a->tables || a->gathers;
    if (r->format >= ES_FMT_COUNT || (!tabular && r->format != ES_FMT_JSON))
        fail("a format the analysis does not produce", accept ? accept : "");
    if (r->columns && r->format != ES_FMT_JSON)
        fail("orient=columns with a non-JSON format", accept ? accept : "");
    if (r->table && !es_analysis_has_table(a, r->table))
        fail("a table the analysis does not list", r->table);
    if (!es_query_get(q, "format") && (!accept || !*accept) && r->format != ES_FMT_JSON)
        fail("no format and no Accept, yet not JSON", "");
}

/* The analysis named name (the table's entry). */
static const es_analysis *analysis_named(const char *name)
{
    for (size_t i = 0; es_analyses[i]; i++)
        if (strcmp(es_analyses[i]->name, name) == 0)
            return es_analyses[i];
    fail("no such analysis", name);
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    char accept[512], value[3][128];
    const char *acc = line(text, 0, accept, sizeof accept);
    es_query q;
    es_query_init(&q);
    static const char *const names[] = {"format", "orient", "table"};
    for (int i = 0; i < 3; i++)
        if (line(text, i + 1, value[i], sizeof value[i]))
            es_query_add(&q, names[i], value[i]);
    check(analysis_named("pca"), acc && *acc ? acc : NULL, &q);
    check(analysis_named("compare"), acc && *acc ? acc : NULL, &q);
    static const es_analysis json_only = {.name = "json-only", .route = "/json-only"};
    check(&json_only, acc && *acc ? acc : NULL, &q);
    es_query_free(&q);
    free(text);
    return 0;
}
