/* Derived matrices: the row-averaging ablation (groups of consecutive items
 * replaced by their mean). */
#include "store/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The item at position i of the list idx (NULL: item i). */
static size_t item_at(const size_t *idx, size_t i) { return idx ? idx[i] : i; }

/* Mean of the items at positions [a, b) of idx, coordinate j. The sum starts from
 * the first value so a group of one reproduces it bitwise (including -0.0). */
static double group_mean(const es_matrix *m, const size_t *idx, size_t a, size_t b, size_t j)
{
    double sum = es_matrix_item(m, item_at(idx, a), j);
    for (size_t i = a + 1; i < b; i++)
        sum += es_matrix_item(m, item_at(idx, i), j);
    return sum / (double)(b - a);
}

/* See store.h. ES_E_PARAM naming param. */
int es_group_size_check(const es_matrix *m, bool selected, size_t n, size_t g, const char *param, es_err *err)
{
    if (!selected)
        n = es_matrix_items(m);
    if (g < 1 || g > n)
        return es_fail(err, ES_E_PARAM, param, "%s must be a group size in 1..%zu (the %s rows of %s), got %zu",
                       param, n, selected ? "selected" : "", m->id, g);
    return 0;
}

/* See store.h: groups of g consecutive entries of idx (all items when NULL). */
int es_matrix_average_groups(const es_matrix *m, const char *id, const size_t *idx, size_t n, size_t g,
                             const char *param, es_matrix **out, es_err *err)
{
    size_t items = es_matrix_items(m), d = es_matrix_dim(m);
    if (es_group_size_check(m, idx != NULL, n, g, param, err) < 0)
        return -1;
    if (!idx)
        n = items;
    double *data = es_malloc(items * d * sizeof *data);
    for (size_t r = 0; r < m->rows; r++)   /* items outside idx keep their values */
        for (size_t c = 0; c < m->cols; c++)
            data[r * m->cols + c] = es_matrix_at(m, r, c);
    bool items_are_rows = m->model_axis == ES_AXIS_COLUMNS;
    for (size_t a = 0; a < n; a += g) {
        size_t b = a + g < n ? a + g : n;
        for (size_t j = 0; j < d; j++) {
            double mean = group_mean(m, idx, a, b, j);
            for (size_t i = a; i < b; i++)
                data[items_are_rows ? item_at(idx, i) * d + j : j * items + item_at(idx, i)] = mean;
        }
    }
    es_provenance prov = m->prov;
    const char *file_sha = es_matrix_file_sha256(m);
    prov.file_sha256 = (char *)(file_sha ? file_sha : ""); /* while m's is computed: "" (shown as null) */
    char what[128];
    if (idx)
        snprintf(what, sizeof what, "%zu selected rows from row %zu averaged in groups of %zu", n, idx[0], g);
    else
        snprintf(what, sizeof what, "rows averaged in groups of %zu", g);
    char *view = es_view_description(m, what);
    prov.view = view;
    es_sha256_hex(data, items * d * sizeof *data, prov.sha256);
    *out = es_matrix_from_data(id ? id : m->id, data, m->rows, m->cols, m->model_axis, &prov);
    (*out)->axis_origin = m->axis_origin;
    free(view);
    return 0;
}

/* See store.h: the whole matrix from item 0. */
int es_matrix_average_rows(const es_matrix *m, const char *id, size_t g, es_matrix **out, es_err *err)
{
    return es_matrix_average_groups(m, id, NULL, 0, g, "average", out, err);
}

/* See store.h. */
size_t es_average_leaders(const size_t *idx, size_t n, size_t g, es_average_order order, size_t *out)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        bool first = order == ES_AVERAGE_SELECTED ? i % g == 0 : (i == 0 || idx[i] / g != idx[i - 1] / g);
        if (first)
            out[count++] = idx[i];
    }
    return count;
}

const char *es_average_order_name(es_average_order o)
{
    return o == ES_AVERAGE_SELECTED ? "select_then_average" : "average_then_select";
}
