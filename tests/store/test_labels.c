/* Labels parser, writer and search: TSV (with and without header), RFC 4180
 * CSV, JSON, every refusal naming its line or row, round trips through each
 * format, numeric columns, and substring / PCRE2 search with its limits. */
#include <string.h>

#include "check_main.h"
#include "embedscope/labels.h"

static es_labels *parse_ok(const char *text, es_labels_format fmt, size_t rows)
{
    es_labels *l = NULL;
    es_err err = {0};
    int rc = es_labels_parse(text, strlen(text), fmt, rows, 1 << 20, "body", "max", &l, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    ck_assert_uint_eq(l->n_rows, rows);
    return l;
}

/* The parse fails with code, param and a message containing want. */
static void parse_fails(const char *text, size_t len, es_labels_format fmt, size_t rows, es_errcode code,
                        const char *want)
{
    es_labels *l = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_labels_parse(text, len, fmt, rows, 64, "body", "uploads.max_labels_bytes", &l, &err), -1);
    ck_assert_ptr_null(l);
    ck_assert_int_eq(err.code, code);
    ck_assert_msg(strstr(err.message, want), "'%s' lacks '%s'", err.message, want);
    ck_assert_str_eq(err.param, code == ES_E_LIMIT ? "uploads.max_labels_bytes" : "body");
}

#define CELL(l, r, c) ((l)->cells[(r) * (l)->n_cols + (c)])

START_TEST(tsv_with_header_and_without)
{
    es_labels *l = parse_ok("word\tcount\r\nthe\t10\nĠcat\t-2.5e3\n", ES_LABELS_TSV, 2);
    ck_assert_uint_eq(l->n_cols, 2);
    ck_assert_str_eq(l->names[0], "word");
    ck_assert_str_eq(l->names[1], "count");
    ck_assert_str_eq(CELL(l, 1, 0), "Ġcat");
    ck_assert_str_eq(CELL(l, 1, 1), "-2.5e3");
    ck_assert(!l->numeric[0] && l->numeric[1]);
    ck_assert_uint_eq(strlen(l->sha256), 64);
    es_labels_release(l);
    l = parse_ok("a\n\nc", ES_LABELS_TSV, 3); /* one column: no header; an empty label is a row */
    ck_assert_str_eq(l->names[0], ES_LABELS_DEFAULT_COLUMN);
    ck_assert_str_eq(CELL(l, 1, 0), "");
    ck_assert_str_eq(CELL(l, 2, 0), "c");
    es_labels_release(l);
}
END_TEST

START_TEST(csv_quotes)
{
    es_labels *l = parse_ok("n,v\r\n\"a,b\",\"say \"\"hi\"\"\"\r\n\"two\nlines\",\r\nplain,x", ES_LABELS_CSV, 3);
    ck_assert_str_eq(CELL(l, 0, 0), "a,b");
    ck_assert_str_eq(CELL(l, 0, 1), "say \"hi\"");
    ck_assert_str_eq(CELL(l, 1, 0), "two\nlines");
    ck_assert_str_eq(CELL(l, 1, 1), "");
    ck_assert_str_eq(CELL(l, 2, 1), "x");
    es_labels_release(l);
}
END_TEST

START_TEST(json_columns)
{
    es_labels *l = parse_ok("{\"columns\": {\"tok\": [\"a\", \"b\"], \"n\": [3, 0.5], \"e\": [null, \"x\"]}}",
                            ES_LABELS_JSON, 2);
    ck_assert_uint_eq(l->n_cols, 3);
    ck_assert_str_eq(l->names[1], "n");
    ck_assert_str_eq(CELL(l, 0, 1), "3");
    ck_assert_str_eq(CELL(l, 1, 1), "0.5");
    ck_assert_str_eq(CELL(l, 0, 2), "");
    ck_assert(l->numeric[1] && !l->numeric[2]);
    es_labels_release(l);
}
END_TEST

/* Each format written and read back gives the same cells (the same hash). */
START_TEST(round_trips)
{
    es_labels *l = parse_ok("{\"columns\": {\"t\": [\"a,\\\"b\", \" sp \", \"x\"], \"n\": [\"1\", \"2\", \"3\"]}}",
                            ES_LABELS_JSON, 3);
    const es_labels_format fmts[] = {ES_LABELS_CSV, ES_LABELS_JSON, ES_LABELS_TSV};
    for (size_t i = 0; i < 3; i++) {
        size_t len;
        char *text = es_labels_text(l, fmts[i], i == 1, &len);
        es_labels *back = parse_ok(text, fmts[i], 3);
        ck_assert_str_eq(back->sha256, l->sha256);
        es_labels_release(back);
        free(text);
    }
    es_labels_release(l);
}
END_TEST

START_TEST(refusals_name_the_line_or_row)
{
    const char *t;
    parse_fails("a\nb\n", 4, ES_LABELS_TSV, 3, ES_E_PARAM, "2 rows of labels, the matrix has 3 rows");
    parse_fails("h\tv\na\t1\nb\n", 10, ES_LABELS_TSV, 2, ES_E_PARAM, "line 3: 1 cells, the header has 2");
    t = "a\nb\n\xc3\x28\n";
    parse_fails(t, strlen(t), ES_LABELS_TSV, 3, ES_E_PARAM, "line 3 (byte 4): not valid UTF-8");
    parse_fails("a\n\0\n", 4, ES_LABELS_TSV, 2, ES_E_PARAM, "a NUL byte");
    parse_fails("x\tx\n1\t2\n", 8, ES_LABELS_TSV, 1, ES_E_PARAM, "repeated");
    parse_fails("\tx\n1\t2\n", 7, ES_LABELS_TSV, 1, ES_E_PARAM, "1 to 256 bytes");
    t = "a,b\n\"open,1\n";
    parse_fails(t, strlen(t), ES_LABELS_CSV, 1, ES_E_PARAM, "line 2: a quoted cell");
    t = "a\n\"x\"y\n";
    parse_fails(t, strlen(t), ES_LABELS_CSV, 2, ES_E_PARAM, "line 2");
    t = "{\"columns\": {\"a\": [1]}}";
    parse_fails(t, strlen(t), ES_LABELS_JSON, 2, ES_E_PARAM, "an array of 2 values");
    t = "{\"columns\": {\"a\": [1, [2]]}}";
    parse_fails(t, strlen(t), ES_LABELS_JSON, 2, ES_E_PARAM, "(row 1)");
    t = "{\"cols\": {}}";
    parse_fails(t, strlen(t), ES_LABELS_JSON, 2, ES_E_PARAM, "expected {\"columns\"");
    t = "{\"columns\": {}}";
    parse_fails(t, strlen(t), ES_LABELS_JSON, 2, ES_E_PARAM, "no column");
    parse_fails("not json", 8, ES_LABELS_JSON, 2, ES_E_PARAM, "not JSON");
    char big[100];
    memset(big, 'a', sizeof big);
    parse_fails(big, sizeof big, ES_LABELS_TSV, 1, ES_E_LIMIT, "100 bytes, above uploads.max_labels_bytes = 64");
}
END_TEST

START_TEST(too_many_columns)
{
    char text[1024] = "";
    for (int c = 0; c <= ES_LABELS_MAX_COLUMNS; c++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "%sc%d", c ? "\t" : "", c);
    strcat(text, "\n");
    es_labels *l = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_labels_parse(text, strlen(text), ES_LABELS_TSV, 0, 4096, "body", "m", &l, &err), -1);
    ck_assert_msg(strstr(err.message, "at most 64"), "%s", err.message);
}
END_TEST

/* CSV neutralises formula cells of text columns (OWASP); numbers and TSV stay as they are. */
START_TEST(csv_formula_cells)
{
    es_labels *l = parse_ok("tok\tn\n=cmd|' /C calc'!A0\t-1.5\n+1+1\t2\n@SUM(A1)\t3\n-x\t4\nplain\t5\n",
                            ES_LABELS_TSV, 5);
    size_t len;
    char *csv = es_labels_text(l, ES_LABELS_CSV, false, &len);
    ck_assert_str_eq(csv, "tok,n\r\n'=cmd|' /C calc'!A0,-1.5\r\n'+1+1,2\r\n'@SUM(A1),3\r\n'-x,4\r\nplain,5\r\n");
    free(csv);
    char *tsv = es_labels_text(l, ES_LABELS_TSV, false, &len);
    ck_assert_msg(strstr(tsv, "\n=cmd|' /C calc'!A0\t-1.5\n"), "%s", tsv);
    free(tsv);
    es_labels_release(l);
    /* a formula cell that is also quoted (a comma) gets its ' inside the quotes, and parses back with it
     * (fuzz_labels found '"...": the ' before the quotes made the field unquoted) */
    l = parse_ok("tok,n\n\"=a,b\",1\n", ES_LABELS_CSV, 1);
    csv = es_labels_text(l, ES_LABELS_CSV, false, &len);
    ck_assert_str_eq(csv, "tok,n\r\n\"'=a,b\",1\r\n");
    es_labels *back = parse_ok(csv, ES_LABELS_CSV, 1);
    ck_assert_str_eq(back->cells[0], "'=a,b");
    es_labels_release(back);
    free(csv);
    es_labels_release(l);
}
END_TEST

START_TEST(search)
{
    es_labels *l = parse_ok("tok\tn\nĠthe\t1\nthe\t2\nĠcat\t3\nTHE\t4\n", ES_LABELS_TSV, 4);
    size_t idx[4], found, total;
    es_err err = {0};
    ck_assert_int_eq(es_labels_search(l, 0, "the", 0, 4, idx, &found, &total, &err), 0);
    ck_assert_uint_eq(found, 2);
    ck_assert_uint_eq(idx[0], 0);
    ck_assert_uint_eq(idx[1], 1);
    ck_assert_int_eq(es_labels_search(l, 0, "^the$", ES_SEARCH_REGEX, 4, idx, &found, &total, &err), 0);
    ck_assert_uint_eq(found, 1);
    ck_assert_uint_eq(idx[0], 1);
    ck_assert_int_eq(es_labels_search(l, 0, "^(Ġ|T)", ES_SEARCH_REGEX, 1, idx, &found, &total, &err), 0);
    ck_assert_uint_eq(found, 1);
    ck_assert_uint_eq(total, 3);
    ck_assert_int_eq(es_labels_search(l, 1, "[24]", ES_SEARCH_REGEX, 4, idx, &found, &total, &err), 0);
    ck_assert_uint_eq(found, 2);
    ck_assert_uint_eq(idx[1], 3);
    ck_assert_int_eq(es_labels_search(l, 0, "(", ES_SEARCH_REGEX, 4, idx, &found, &total, &err), -1);
    ck_assert_str_eq(err.param, "q");
    ck_assert_int_eq(es_labels_search(l, 0, "(t)\\1", ES_SEARCH_REGEX, 4, idx, &found, &total, &err), 0);
    ck_assert_uint_eq(found, 0); /* back-references are allowed: the limits bound them */
    ck_assert_int_eq(es_labels_search(l, 0, "the", ES_SEARCH_CASELESS, 4, idx, &found, &total, &err), 0);
    ck_assert_uint_eq(found, 3);
    ck_assert_uint_eq(idx[2], 3);
    ck_assert_int_eq(es_labels_search(l, 0, "^t.E$", ES_SEARCH_REGEX | ES_SEARCH_CASELESS, 4, idx, &found, &total,
                                      &err), 0);
    ck_assert_uint_eq(found, 2);
    ck_assert_int_eq(es_labels_search(l, 0, "^ġ", ES_SEARCH_REGEX | ES_SEARCH_CASELESS, 4, idx, &found, &total,
                                      &err), 0);
    ck_assert_uint_eq(found, 2); /* Unicode case folding: ġ matches Ġ */
    ck_assert_int_eq(es_labels_search(l, 0, "a)|(b", ES_SEARCH_REGEX, 4, idx, &found, &total, &err), -1);
    ck_assert_str_eq(err.param, "q"); /* checked alone, not as the wrapped pattern it becomes */
    char longq[ES_LABELS_MAX_QUERY + 2];
    memset(longq, 'a', sizeof longq - 1);
    longq[sizeof longq - 1] = '\0';
    ck_assert_int_eq(es_labels_search(l, 0, longq, 0, 4, idx, &found, &total, &err), -1);
    ck_assert_int_eq(es_labels_check_query(longq, &err), -1);
    ck_assert_int_eq(es_labels_column(l, "n"), 1);
    ck_assert_int_eq(es_labels_column(l, "nope"), -1);
    es_labels_release(l);
}
END_TEST

/* Catastrophic patterns end at once with a refusal naming the limit: nested
 * counted repetitions (too large to compile), and alternated repetitions on
 * a long cell, whose backtracking the match limit bounds across every start
 * position of the cell (PCRE2 resets its count per start position: unanchored,
 * "(?:a|aa){0,12}\d" would take about 60,000 x 100,000 steps). */
START_TEST(search_limits)
{
    enum { CELL = 60000 };
    char *text = malloc(2 * CELL + 16);
    memset(text, 'a', CELL);
    memcpy(text + CELL, "\n", 1);
    memset(text + CELL + 1, 'a', CELL);
    memcpy(text + 2 * CELL + 1, "b\n", 3);
    es_labels *l = parse_ok(text, ES_LABELS_TSV, 2);
    free(text);
    size_t idx[2], found, total;
    es_err err = {0};
    ck_assert_int_eq(es_labels_search(l, 0, "(((((a{1,10}){1,10}){1,10}){1,10}){1,10}){1,10}", ES_SEARCH_REGEX, 2, idx,
                                      &found, &total, &err), -1);
    ck_assert_str_eq(err.param, "q");
    ck_assert_msg(strstr(err.message, "too large"), "%s", err.message);
    static const char *const patterns[] = {"(a|aa)*(?!)", "(a|aa)*\\d", "(?:a|aa){0,12}\\d", "a.*\\d"};
    for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++) {
        int rc = es_labels_search(l, 0, patterns[i], ES_SEARCH_REGEX, 2, idx, &found, &total, &err);
        ck_assert_msg(rc == -1, "%s: %d, %zu found", patterns[i], rc, found);
        ck_assert_str_eq(err.param, "q");
        ck_assert_msg(strstr(err.message, "limit") && strstr(err.message, "row 0"), "%s: %s", patterns[i],
                      err.message);
    }
    /* "(a|aa)*b": JIT sees at once that row 0 holds no b (a result); the interpreter's depth limit refuses */
    int rc = es_labels_search(l, 0, "(a|aa)*b", ES_SEARCH_REGEX, 2, idx, &found, &total, &err);
    ck_assert_msg(rc == 0 ? found == 1 && idx[0] == 1 : strstr(err.message, "limit") != NULL, "%d %s", rc, err.message);
    /* an ordinary pattern on the same long cells answers */
    ck_assert_int_eq(es_labels_search(l, 0, "ab$", ES_SEARCH_REGEX, 2, idx, &found, &total, &err), 0);
    ck_assert_uint_eq(found, 1);
    ck_assert_uint_eq(idx[0], 1);
    es_labels_release(l);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("labels");
    TCase *tc = tcase_create("labels");
    tcase_add_test(tc, tsv_with_header_and_without);
    tcase_add_test(tc, csv_quotes);
    tcase_add_test(tc, json_columns);
    tcase_add_test(tc, round_trips);
    tcase_add_test(tc, refusals_name_the_line_or_row);
    tcase_add_test(tc, too_many_columns);
    tcase_add_test(tc, csv_formula_cells);
    tcase_add_test(tc, search);
    tcase_add_test(tc, search_limits);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
