/* libFuzzer target: X-Forwarded-Prefix (src/api/negotiate.c es_forwarded_prefix)
 * and the rebasing of problem documents under it (src/api/problem.c).
 *
 * Input: a header value (any bytes; a NUL ends it, as in a C header string).
 * Checked: an accepted prefix is "" or "/" then segments of [A-Za-z0-9._~-]
 * separated by single '/', none "." or "..", no trailing '/', shorter than
 * ES_PREFIX_MAX, and equal to the input up to one trailing '/'; a refused one
 * leaves out = "". Rebasing a problem document under an accepted prefix gives
 * valid JSON whose type and instance are the prefix plus the originals and whose
 * other members are unchanged. abort() on any broken rule. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedscope/negotiate.h"
#include "embedscope/problem.h"
#include "embedscope/render.h"
#include "embedscope/results.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *prefix)
{
    fprintf(stderr, "fuzz_prefix: %s: '%s'\n", what, prefix);
    abort();
}

/* The rules of an accepted prefix (independent of the parser's own loop). */
static void check_clean(const char *given, const char *out)
{
    size_t n = strlen(out), g = strlen(given);
    if (n >= ES_PREFIX_MAX || (n && out[0] != '/') || (n && out[n - 1] == '/'))
        fail("accepted prefix has a bad shape", out);
    if (!(g == n || (g == n + 1 && given[n] == '/')) || strncmp(given, out, n) != 0)
        fail("accepted prefix is not the input without its trailing '/'", out);
    for (const char *seg = out; *seg == '/';) {
        size_t len = strcspn(seg + 1, "/");
        if (len == 0 || (len == 1 && seg[1] == '.') || (len == 2 && seg[1] == '.' && seg[2] == '.'))
            fail("empty, '.' or '..' segment accepted", out);
        for (size_t i = 1; i <= len; i++)
            if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~-", seg[i]))
                fail("character outside [A-Za-z0-9._~-] accepted", out);
        seg += len + 1;
    }
}

/* Rebase a problem document and compare it member by member. */
static void check_rebase(const char *prefix)
{
    json_t *p = es_problem_new(ES_PROB_NOT_FOUND, "detail", "param", "/v1/x", "id1");
    es_reply rep = {.status = 404};
    es_err err;
    if (es_json_body(p, 0, &rep.body, &rep.len, &err) != 0)
        fail("cannot render a problem", prefix);
    es_problem_rebase(&rep, prefix);
    json_t *q = json_loadb(rep.body, rep.len, 0, NULL);
    if (!q)
        fail("rebased problem is not JSON", prefix);
    char want[ES_PREFIX_MAX + 64];
    snprintf(want, sizeof want, "%s/problems/not-found", prefix);
    if (strcmp(json_string_value(json_object_get(q, "type")), want) != 0)
        fail("type not rebased", prefix);
    snprintf(want, sizeof want, "%s/v1/x", prefix);
    if (strcmp(json_string_value(json_object_get(q, "instance")), want) != 0)
        fail("instance not rebased", prefix);
    json_object_del(q, "type");
    json_object_del(q, "instance");
    json_object_del(p, "type");
    json_object_del(p, "instance");
    if (!json_equal(p, q))
        fail("other members changed", prefix);
    json_decref(p);
    json_decref(q);
    es_reply_release(&rep);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *given = malloc(size + 1);
    memcpy(given, data, size);
    given[size] = '\0';
    char out[ES_PREFIX_MAX];
    if (es_forwarded_prefix(given, out)) {
        check_clean(given, out);
        check_rebase(out);
    } else if (out[0]) {
        fail("refused prefix left out non-empty", given);
    }
    free(given);
    return 0;
}
