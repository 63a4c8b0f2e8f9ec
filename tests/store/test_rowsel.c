/* Row selection: slice parsing and resolution against Python's slice semantics
 * (expected lists produced with /usr/bin/python3 `list(range(n))[slice(...)]`, see
 * the generator in the comment below), index lists, exclusions, errors, canonical text. */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "embedscope/rowsel.h"

/* Expected values from:
 *   parts = text.split(":"); one integer i -> [i % n] if in range
 *   else list(range(n))[slice(*[int(p) if p.strip() else None for p in parts])]
 * except that nothing is clamped: a case with a bound outside the matrix (which
 * Python would move to its end) is refused, like one that selects nothing
 * (count 0). */
typedef struct slice_case {
    const char *text;
    size_t n_items, count;
    size_t expect[16];
} slice_case;

static const slice_case cases[] = {
    {"", 5, 5, {0, 1, 2, 3, 4}},
    {":", 5, 5, {0, 1, 2, 3, 4}},
    {"::", 5, 5, {0, 1, 2, 3, 4}},
    {"0:5", 5, 5, {0, 1, 2, 3, 4}},
    {"1:3", 5, 2, {1, 2}},
    {"2:", 5, 3, {2, 3, 4}},
    {":3", 5, 3, {0, 1, 2}},
    {"-2:", 5, 2, {3, 4}},
    {":-2", 5, 3, {0, 1, 2}},
    {"-3:-1", 5, 2, {2, 3}},
    {"::2", 7, 4, {0, 2, 4, 6}},
    {"1::3", 10, 3, {1, 4, 7}},
    {"::-1", 5, 5, {4, 3, 2, 1, 0}},
    {"4:1:-1", 5, 3, {4, 3, 2}},
    {"-1::-2", 6, 3, {5, 3, 1}},
    {"10:", 5, 0, {0}},
    {"-10:", 5, 0, {0}},
    {":10", 5, 0, {0}},
    {":-10", 5, 0, {0}},
    {"3:1", 5, 0, {0}},
    {"1:3:-1", 5, 0, {0}},
    {"-100:100:3", 10, 0, {0}},
    {"-10:10:3", 10, 4, {0, 3, 6, 9}},
    {"100:-100:-3", 10, 0, {0}},
    {"9::-3", 10, 4, {9, 6, 3, 0}},
    {"5:0:-2", 6, 3, {5, 3, 1}},
    {"::-3", 10, 4, {9, 6, 3, 0}},
    {"0:1", 1, 1, {0}},
    {"2", 5, 1, {2}},
    {"-1", 5, 1, {4}},
    {"-3", 5, 1, {2}},
    {"0", 1, 1, {0}},
    {" 1 : 4 : 2 ", 8, 2, {1, 3}},
    {"+1:+3", 5, 2, {1, 2}},
    {"-0:", 3, 3, {0, 1, 2}},
    {"1:5:", 6, 4, {1, 2, 3, 4}},
    {"7::-1", 5, 0, {0}},
    {"5::-1", 5, 0, {0}},
    {"4::-1", 5, 5, {4, 3, 2, 1, 0}},
    {"4:-7:-1", 5, 0, {0}},
    {"4:-5:-1", 5, 4, {4, 3, 2, 1}},
    {"9223372036854775807:", 4, 0, {0}},
    {"-9223372036854775807:", 4, 0, {0}},
    {"-4:", 4, 4, {0, 1, 2, 3}},
    {":9223372036854775807:9223372036854775807", 4, 0, {0}},
    {":4:9223372036854775807", 4, 1, {0}},
    {"::-9223372036854775807", 4, 1, {3}},
    {"1024:", 1024, 0, {0}},
    {"1:1025", 1024, 0, {0}},
    {"1:1024:500", 1024, 3, {1, 501, 1001}},
    {"1024", 1024, 0, {0}},
    {"-1024", 1024, 1, {0}},
    {"-1025", 1024, 0, {0}},
    {"1023", 1024, 1, {1023}},
    {"0:1024:100", 1024, 11, {0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}},
    {"-5", 3, 0, {0}},
};
#define N_CASES (sizeof cases / sizeof *cases)

/* Parse and resolve text against n items; returns the resolver's status. */
static int select_rows(const char *text, size_t n_items, const size_t *exclude, size_t n_exclude,
                       size_t **idx, size_t *n, es_err *err)
{
    es_rowsel sel = {0};
    ck_assert_int_eq(es_rowsel_parse(text, "rows", &sel, err), 0);
    sel.exclude = (size_t *)exclude;
    sel.n_exclude = n_exclude;
    int rc = es_rowsel_resolve(&sel, n_items, idx, n, err);
    free(sel.parts);
    return rc;
}

START_TEST(slice_matches_python)
{
    const slice_case *c = &cases[_i];
    size_t *idx = NULL, n = 0;
    es_err err = {0};
    int rc = select_rows(c->text, c->n_items, NULL, 0, &idx, &n, &err);
    if (c->count == 0) {
        ck_assert_msg(rc == -1, "'%s' on %zu should select nothing", c->text, c->n_items);
        ck_assert_int_eq(err.code, ES_E_PARAM);
        ck_assert_str_eq(err.param, "rows");
        ck_assert_ptr_null(idx);
        return;
    }
    ck_assert_msg(rc == 0, "'%s': %s", c->text, err.message);
    ck_assert_uint_eq(n, c->count);
    for (size_t k = 0; k < n; k++)
        ck_assert_msg(idx[k] == c->expect[k], "'%s' on %zu: item %zu is %zu, python says %zu", c->text,
                      c->n_items, k, idx[k], c->expect[k]);
    free(idx);
}
END_TEST

START_TEST(slice_fields)
{
    es_slice s;
    es_err err;
    ck_assert_int_eq(es_slice_parse("", "rows", &s, &err), 0);
    ck_assert(!s.has_start && !s.has_stop && s.step == 1);
    ck_assert_int_eq(es_slice_parse("-3:7:-2", "rows", &s, &err), 0);
    ck_assert(s.has_start && s.has_stop);
    ck_assert_int_eq(s.start, -3);
    ck_assert_int_eq(s.stop, 7);
    ck_assert_int_eq(s.step, -2);
    ck_assert_int_eq(es_slice_parse("4", "rows", &s, &err), 0);
    ck_assert(s.has_start && s.has_stop && s.start == 4 && s.stop == 5 && s.step == 1);
    ck_assert_int_eq(es_slice_parse("-1", "rows", &s, &err), 0);
    ck_assert(s.has_start && !s.has_stop && s.start == -1);
}
END_TEST

static const char *const bad_slices[] = {
    "a",     "1:b",  "1:2:3:4", "1:2:0", "::0", "1.5", "1 2", "--1", "+-1", "1:2x", "0x10", ":: -",
    "9223372036854775808", "-9223372036854775808", "1:99999999999999999999", "9223372036854775807",
    "1,2",   "1;2",  " : : : ", "+",     "-",   "1e3",
};

START_TEST(slice_rejects_garbage)
{
    const char *text = bad_slices[_i];
    es_slice s = {.start = 42};
    es_err err = {0};
    ck_assert_msg(es_slice_parse(text, "rows_b", &s, &err) == -1, "'%s' accepted", text);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "rows_b");
    ck_assert_msg(strstr(err.message, text) != NULL, "message '%s' does not quote '%s'", err.message, text);
    ck_assert_int_eq(s.start, 42); /* out untouched */
}
END_TEST

START_TEST(index_lists)
{
    size_t *idx = NULL, n = 99;
    es_err err;
    ck_assert_int_eq(es_index_list_parse("", "exclude", &idx, &n, &err), 0);
    ck_assert_ptr_null(idx);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(es_index_list_parse("  ", "exclude", &idx, &n, &err), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(es_index_list_parse("7, 0 ,1023,7", "exclude", &idx, &n, &err), 0);
    ck_assert_uint_eq(n, 4);
    ck_assert(idx[0] == 7 && idx[1] == 0 && idx[2] == 1023 && idx[3] == 7);
    free(idx);
    ck_assert_int_eq(es_index_list_parse("5", "exclude", &idx, &n, &err), 0);
    ck_assert(n == 1 && idx[0] == 5);
    free(idx);

    static const char *const bad[] = {"1,,2", "1,", ",1", "-1", "+1", "a", "1 2", "1:3",
                                      "99999999999999999999", "9223372036854775808", "1,2x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        idx = NULL;
        ck_assert_msg(es_index_list_parse(bad[i], "exclude", &idx, &n, &err) == -1, "'%s' accepted", bad[i]);
        ck_assert_int_eq(err.code, ES_E_PARAM);
        ck_assert_str_eq(err.param, "exclude");
        ck_assert_ptr_nonnull(strstr(err.message, bad[i]));
        ck_assert_ptr_null(idx);
    }
}
END_TEST

START_TEST(exclusions)
{
    size_t *idx, n;
    es_err err;
    const size_t ex[] = {9, 0, 4, 4, 5};
    /* python: [i for i in list(range(10))[::-1] if i not in {9,0,4,5}] */
    const size_t expect[] = {8, 7, 6, 3, 2, 1};
    ck_assert_int_eq(select_rows("::-1", 10, ex, 5, &idx, &n, &err), 0);
    ck_assert_uint_eq(n, 6);
    for (size_t k = 0; k < n; k++)
        ck_assert_uint_eq(idx[k], expect[k]);
    free(idx);

    const size_t out_of_range[] = {3, 10};
    idx = NULL;
    ck_assert_int_eq(select_rows("", 10, out_of_range, 2, &idx, &n, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "exclude");
    ck_assert_ptr_nonnull(strstr(err.message, "10"));

    const size_t all_of_them[] = {2, 3};
    ck_assert_int_eq(select_rows("2:4", 10, all_of_them, 2, &idx, &n, &err), -1);
    ck_assert_str_eq(err.param, "rows");
    ck_assert_ptr_null(idx);

    /* es_rowsel_free frees the list only and leaves an empty selection. */
    es_rowsel sel = {.exclude = es_malloc(2 * sizeof(size_t)), .n_exclude = 2};
    es_rowsel_free(&sel);
    ck_assert_ptr_null(sel.exclude);
    ck_assert_uint_eq(sel.n_exclude, 0);
    es_rowsel_free(NULL);
}
END_TEST

/* One failing selection: its code, parameter and a piece of the message. */
static void refused(const char *text, size_t n_items, size_t max_rows, es_errcode code, const char *param,
                    const char *says)
{
    es_rowsel sel = {.max_rows = max_rows};
    es_err err = {0};
    size_t *idx = NULL, n;
    ck_assert_int_eq(es_rowsel_parse(text, "rows", &sel, &err), 0);
    ck_assert_msg(es_rowsel_resolve(&sel, n_items, &idx, &n, &err) == -1, "'%s' on %zu accepted", text, n_items);
    ck_assert_int_eq(err.code, code);
    ck_assert_str_eq(err.param, param);
    ck_assert_msg(strstr(err.message, says) != NULL, "'%s': message '%s' lacks '%s'", text, err.message, says);
    ck_assert_ptr_null(idx);
    es_rowsel_free(&sel);
}

/* Nothing is clamped: a bound outside the matrix is a 400 naming rows that says which bound. */
START_TEST(out_of_range_is_refused)
{
    refused("1:1025", 1024, 0, ES_E_PARAM, "rows", "the stop 1025 is out of range: the matrix has 1024 rows");
    refused("1024", 1024, 0, ES_E_PARAM, "rows", "the stop 1025 is out of range");
    refused("-1025:", 1024, 0, ES_E_PARAM, "rows", "the start -1025 is out of range");
    refused("1024::-1", 1024, 0, ES_E_PARAM, "rows", "the start 1024 is out of range");
    refused("0:10,1:2000", 1024, 0, ES_E_PARAM, "rows", "'1:2000:1': the stop 2000");
    refused("5:5", 1024, 0, ES_E_PARAM, "rows", "selects no rows");
    refused("1,5:5", 1024, 0, ES_E_PARAM, "rows", "'5:5:1' selects no rows");
}
END_TEST

/* Row lists and unions of slices: the parts in order, each row once, echoed canonically. */
START_TEST(unions)
{
    static const struct {
        const char *text;
        size_t n, expect[12];
        const char *canonical;
    } ex[] = {
        {"1,2,3,5", 4, {1, 2, 3, 5}, "1:4,5"},
        {"0:3,100:103", 6, {0, 1, 2, 100, 101, 102}, "0:3,100:103"},
        {" 7 , -1 ,0", 3, {7, 1023, 0}, "7,1023,0"},
        {"10:0:-5,1000:", 26, {10, 5, 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009}, NULL},
        {"::512,1,3", 4, {0, 512, 1, 3}, "0,512,1,3"},
    };
    for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) {
        size_t *idx, n;
        es_err err = {0};
        ck_assert_msg(select_rows(ex[i].text, 1024, NULL, 0, &idx, &n, &err) == 0, "'%s': %s", ex[i].text,
                      err.message);
        ck_assert_uint_eq(n, ex[i].n);
        for (size_t k = 0; k < n && k < 12; k++)
            ck_assert_uint_eq(idx[k], ex[i].expect[k]);
        char *canon = es_rows_canonical(idx, n);
        if (ex[i].canonical)
            ck_assert_str_eq(canon, ex[i].canonical);
        free(canon);
        free(idx);
    }
    /* exclusions apply to the union */
    size_t *idx, n;
    es_err err;
    const size_t ex_rows[] = {2, 101};
    ck_assert_int_eq(select_rows("0:3,100:103", 1024, ex_rows, 2, &idx, &n, &err), 0);
    ck_assert_uint_eq(n, 4);
    ck_assert(idx[0] == 0 && idx[1] == 1 && idx[2] == 100 && idx[3] == 102);
    free(idx);
    /* a row selected twice, an empty part */
    refused("0:10,5:15", 1024, 0, ES_E_PARAM, "rows", "row 5 is selected twice");
    refused("3,3", 1024, 0, ES_E_PARAM, "rows", "row 3 is selected twice");
    refused("0:1024,0:1024", 1024, 0, ES_E_PARAM, "rows", "row 0 is selected twice");
    /* twice is refused even when the one row in both parts is excluded */
    const size_t ex_twice[] = {5};
    idx = NULL;
    ck_assert_int_eq(select_rows("0:6,5:15", 1024, ex_twice, 1, &idx, &n, &err), -1);
    ck_assert_str_eq(err.param, "rows");
    ck_assert_ptr_nonnull(strstr(err.message, "row 5 is selected twice"));
    ck_assert_ptr_null(idx);
    static const char *const bad[] = {"1,,2", "1,", ",1", " , ", "1,a", "1:2:3:4,5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        es_rowsel sel = {0};
        ck_assert_msg(es_rowsel_parse(bad[i], "a_rows", &sel, &err) == -1, "'%s' accepted", bad[i]);
        ck_assert_int_eq(err.code, ES_E_PARAM);
        ck_assert_str_eq(err.param, "a_rows");
        ck_assert_ptr_null(sel.parts);
    }
    char longer[300];
    memset(longer, ' ', sizeof longer);
    memcpy(longer + 250, "1,2", 4);
    es_rowsel sel = {0};
    ck_assert_int_eq(es_rowsel_parse(longer, "rows", &sel, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "more than 128"));
    free(sel.parts);
    /* a part of exactly 128 characters is taken, one of 129 is not */
    char part[140] = "0,";
    memset(part + 2, ' ', 127);
    memcpy(part + 2 + 127, "1", 2);
    sel = (es_rowsel){0};
    ck_assert_msg(es_rowsel_parse(part, "rows", &sel, &err) == 0, "%s", err.message);
    ck_assert_uint_eq(sel.n_parts, 2);
    ck_assert_int_eq(sel.parts[1].start, 1);
    es_rowsel_free(&sel);
    memset(part + 2, ' ', 128);
    memcpy(part + 2 + 128, "1", 2);
    ck_assert_int_eq(es_rowsel_parse(part, "rows", &sel, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.message, "more than 128"));
}
END_TEST

/* max_rows bounds the selection, before its list is allocated (a union of many whole-matrix slices). */
START_TEST(max_rows)
{
    refused("0:100", 1024, 99, ES_E_LIMIT, "max_rows", "selects at least 100 rows");
    refused("0:50,60:110", 1024, 99, ES_E_LIMIT, "max_rows", "max_rows=99");
    size_t *idx, n;
    es_err err;
    es_rowsel sel = {.max_rows = 99};
    const size_t ex[] = {0};
    sel.exclude = (size_t *)ex;
    sel.n_exclude = 1;
    ck_assert_int_eq(es_rowsel_parse("0:100", "rows", &sel, &err), 0);
    ck_assert_int_eq(es_rowsel_resolve(&sel, 1024, &idx, &n, &err), 0); /* 99 after the exclusion */
    ck_assert_uint_eq(n, 99);
    free(idx);
    free(sel.parts);
    const size_t ex2[] = {0, 0};
    sel = (es_rowsel){.max_rows = 99, .exclude = (size_t *)ex2, .n_exclude = 2};
    ck_assert_int_eq(es_rowsel_parse("0:101", "rows", &sel, &err), 0);
    ck_assert_int_eq(es_rowsel_resolve(&sel, 1024, &idx, &n, &err), -1); /* 100 after it */
    ck_assert_str_eq(err.param, "max_rows");
    ck_assert_ptr_nonnull(strstr(err.message, "selects 100 rows"));
    free(sel.parts);
}
END_TEST

START_TEST(canonical_examples)
{
    static const struct {
        size_t idx[12], n;
        const char *text;
    } ex[] = {
        {{3}, 1, "3"},
        {{1, 2}, 2, "1,2"},
        {{0, 1, 2}, 3, "0:3"},
        {{4, 3, 2, 1, 0}, 5, "4::-1"},
        {{9, 6, 3}, 3, "9:2:-3"},
        {{0, 5, 6, 7}, 4, "0,5:8"},
        {{2, 2, 2}, 3, "2,2,2"},
        {{0, 2, 4, 5, 6}, 5, "0:5:2,5,6"},
        {{7, 3}, 2, "7,3"},
        {{10, 20, 30, 1, 2, 3}, 6, "10:31:10,1:4"},
    };
    for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) {
        char *t = es_rows_canonical(ex[i].idx, ex[i].n);
        ck_assert_str_eq(t, ex[i].text);
        free(t);
    }
    char *empty = es_rows_canonical(NULL, 0);
    ck_assert_str_eq(empty, "");
    free(empty);

    size_t big[1024 + 50];
    for (size_t i = 0; i < 100; i++)
        big[i] = i;
    for (size_t i = 0; i < 50; i++)
        big[100 + i] = 101 + 2 * i;
    char *t = es_rows_canonical(big, 150);
    ck_assert_str_eq(t, "0:100,101:200:2");
    free(t);
    for (size_t i = 0; i < 1024; i++)
        big[i] = i;
    t = es_rows_canonical(big, 1024);
    ck_assert_str_eq(t, "0:1024");
    free(t);
}
END_TEST

/* Runs next to LONG_MAX: the largest selectable index is LONG_MAX - 1 and its run
 * ends with stop LONG_MAX; larger values (no selection yields them) stay single
 * indices instead of overflowing `last + 1` or wrapping into a run (UBSan build). */
START_TEST(canonical_near_long_max)
{
    const size_t top = (size_t)LONG_MAX;
    static const char *const want[] = {
        "9223372036854775804:9223372036854775807",
        "9223372036854775805,9223372036854775806,9223372036854775807",
        "9223372036854775807,9223372036854775806,9223372036854775805",
        "18446744073709551615,0:3",
        "0:9223372036854775807:4611686018427387903",
        "9223372036854775806::-4611686018427387903",
    };
    const size_t seqs[][4] = {
        {top - 3, top - 2, top - 1},
        {top - 2, top - 1, top},
        {top, top - 1, top - 2},
        {SIZE_MAX, 0, 1, 2},
        {0, top / 2, top - 1},
        {top - 1, top / 2, 0},
    };
    const size_t lens[] = {3, 3, 3, 4, 3, 3};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char *t = es_rows_canonical(seqs[i], lens[i]);
        ck_assert_str_eq(t, want[i]);
        free(t);
    }
    es_slice s;
    es_err err = {0};
    ck_assert_int_eq(es_slice_parse(want[0], "rows", &s, &err), 0);
    ck_assert_int_eq(s.start, LONG_MAX - 3);
    ck_assert_int_eq(s.stop, LONG_MAX);
}
END_TEST

/* Decode canonical text by parsing and resolving each part. */
static void decode_canonical(const char *text, size_t n_items, size_t *out, size_t *n)
{
    char *copy = es_strdup(text), *save = NULL;
    *n = 0;
    for (char *part = strtok_r(copy, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
        size_t *idx, k;
        es_err err;
        ck_assert_msg(select_rows(part, n_items, NULL, 0, &idx, &k, &err) == 0, "part '%s': %s", part, err.message);
        memcpy(out + *n, idx, k * sizeof *idx);
        *n += k;
        free(idx);
    }
    free(copy);
}

/* Random slices with random exclusions: canonical text decodes back to the same
 * sequence, and equal sequences give equal text. */
START_TEST(canonical_roundtrip)
{
    unsigned seed = 12345;
    enum { N_ITEMS = 200 };
    size_t decoded[N_ITEMS];
    for (int trial = 0; trial < 2000; trial++) {
        char text[64];
        long a = (long)(rand_r(&seed) % 401) - 200, b = (long)(rand_r(&seed) % 401) - 200;
        long step = (long)(rand_r(&seed) % 15) - 7;
        snprintf(text, sizeof text, "%ld:%ld:%ld", a, b, step ? step : 1);
        size_t ex[8];
        size_t n_ex = (size_t)(rand_r(&seed) % 8);
        for (size_t i = 0; i < n_ex; i++)
            ex[i] = (size_t)(rand_r(&seed) % N_ITEMS);
        size_t *idx, n;
        es_err err;
        if (select_rows(text, N_ITEMS, ex, n_ex, &idx, &n, &err) < 0)
            continue;
        char *canon = es_rows_canonical(idx, n);
        size_t n_dec;
        decode_canonical(canon, N_ITEMS, decoded, &n_dec);
        ck_assert_msg(n_dec == n && memcmp(decoded, idx, n * sizeof *idx) == 0, "'%s' -> '%s' does not decode back",
                      text, canon);
        free(canon);
        free(idx);
    }
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("rowsel");
    TCase *tc = tcase_create("rowsel");
    tcase_add_loop_test(tc, slice_matches_python, 0, N_CASES);
    tcase_add_test(tc, slice_fields);
    tcase_add_loop_test(tc, slice_rejects_garbage, 0, sizeof bad_slices / sizeof *bad_slices);
    tcase_add_test(tc, index_lists);
    tcase_add_test(tc, exclusions);
    tcase_add_test(tc, out_of_range_is_refused);
    tcase_add_test(tc, unions);
    tcase_add_test(tc, max_rows);
    tcase_add_test(tc, canonical_examples);
    tcase_add_test(tc, canonical_near_long_max);
    tcase_add_test(tc, canonical_roundtrip);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
