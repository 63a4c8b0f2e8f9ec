/* libFuzzer target: the labels parser (src/store/labels.c es_labels_parse)
 * for TSV, CSV and JSON, what a PUT .../labels body, a configured labels file
 * and a labels file of uploads.dir go through.
 *
 * Input: one byte choosing the format (its value mod 3) and the row count
 * (its value / 3 mod 16), then the text. Checked: parsed labels have that row
 * count, 1 to ES_LABELS_MAX_COLUMNS named columns and cells that are valid
 * UTF-8 (jansson takes them); written as JSON and CSV (and as TSV when no
 * cell holds a tab or line break) they parse back to the same labels (hash);
 * a refusal says why and names "body". abort() on any broken rule. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "embedscope/labels.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_labels: %s: %s\n", what, detail);
    abort();
}

/* Does any cell or name hold a character TSV cannot carry? */
static int tsv_unsafe(const es_labels *l)
{
    for (size_t i = 0; i < l->n_rows * l->n_cols; i++)
        if (strpbrk(l->cells[i], "\t\r\n"))
            return 1;
    for (size_t c = 0; c < l->n_cols; c++)
        if (strpbrk(l->names[c], "\t\r\n"))
            return 1;
    return 0;
}

/* Would CSV write this cell with a leading ' (a text cell or a column name that a spreadsheet would run
 * as a formula: labels.c's put_cell)? */
static bool csv_formula(const char *cell, bool text) { return text && *cell && strchr("=+-@\t\r", *cell); }

/* CSV's formula cells come back with their leading ': every other cell and name as written. */
static void csv_cells_back(const es_labels *l, const es_labels *back, const char *text)
{
    for (size_t j = 0; j < l->n_cols; j++)
        if (strcmp(back->names[j] + (csv_formula(l->names[j], true) ? 1 : 0), l->names[j]) != 0)
            fail("a written column name parses back to another", text);
    for (size_t i = 0; i < l->n_rows * l->n_cols; i++) {
        bool quoted = csv_formula(l->cells[i], !l->numeric[i % l->n_cols]);
        if ((quoted && back->cells[i][0] != '\'') || strcmp(back->cells[i] + (quoted ? 1 : 0), l->cells[i]) != 0)
            fail("a written cell parses back to another", text);
    }
}

/* Does CSV write any cell or name of l with a leading '? */
static bool csv_rewrites(const es_labels *l)
{
    for (size_t j = 0; j < l->n_cols; j++)
        if (csv_formula(l->names[j], true))
            return true;
    for (size_t i = 0; i < l->n_rows * l->n_cols; i++)
        if (csv_formula(l->cells[i], !l->numeric[i % l->n_cols]))
            return true;
    return false;
}

/* Write l in fmt and parse it back: the same labels (typed JSON, which
 * rewrites numbers, only the same columns and numeric columns; CSV, which
 * neutralises formula cells, those with a leading '). */
static void round_trip(const es_labels *l, es_labels_format fmt, bool typed)
{
    size_t len;
    char *text = es_labels_text(l, fmt, typed, &len);
    es_labels *back = NULL;
    es_err err = {0};
    if (es_labels_parse(text, len, fmt, l->n_rows, SIZE_MAX, "body", "max", &back, &err) != 0)
        fail("written labels do not parse back", err.message);
    /* one column is written without header (the Projector's rule): its name comes back as the default */
    bool renamed = fmt != ES_LABELS_JSON && l->n_cols == 1 && strcmp(l->names[0], ES_LABELS_DEFAULT_COLUMN) != 0;
    for (size_t i = 0; renamed && i < l->n_rows; i++) {
        bool quoted = fmt == ES_LABELS_CSV && csv_formula(l->cells[i], !l->numeric[0]);
        if (strcmp(back->cells[i] + (quoted && back->cells[i][0] == '\'' ? 1 : 0), l->cells[i]) != 0)
            fail("a written cell parses back to another", text);
    }
    bool rewritten = fmt == ES_LABELS_CSV && csv_rewrites(l);
    if ((!typed && !renamed && !rewritten && strcmp(back->sha256, l->sha256) != 0) || back->n_cols != l->n_cols ||
        memcmp(back->numeric, l->numeric, l->n_cols * sizeof *l->numeric) != 0)
        fail("written labels parse back to other labels", text);
    if (rewritten && !renamed)
        csv_cells_back(l, back, text);
    es_labels_release(back);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    es_labels_format fmt = (es_labels_format)(data[0] % 3);
    size_t rows = (size_t)(data[0] / 3) % 16;
    const char *text = (const char *)data + 1;
    es_labels *l = NULL;
    es_err err = {0};
    if (es_labels_parse(text, size - 1, fmt, rows, 1 << 16, "body", "uploads.max_labels_bytes", &l, &err) != 0) {
        if (!err.message[0] || (strcmp(err.param, "body") != 0 && strcmp(err.param, "uploads.max_labels_bytes") != 0))
            fail("a refusal says nothing or names no parameter", err.message);
        return 0;
    }
    if (l->n_rows != rows || l->n_cols == 0 || l->n_cols > ES_LABELS_MAX_COLUMNS)
        fail("parsed labels of another shape", "");
    for (size_t i = 0; i < l->n_rows * l->n_cols; i++) {
        json_t *s = json_string(l->cells[i]);
        if (!s)
            fail("a cell is not valid UTF-8", l->cells[i]);
        json_decref(s);
    }
    round_trip(l, ES_LABELS_JSON, false);
    round_trip(l, ES_LABELS_JSON, true);
    if (rows > 0 || l->n_cols > 1) /* one column and no row is an empty file, which has no column */
        round_trip(l, ES_LABELS_CSV, false);
    if ((rows > 0 || l->n_cols > 1) && !tsv_unsafe(l))
        round_trip(l, ES_LABELS_TSV, false);
    es_labels_release(l);
    return 0;
}
