/* Derived matrices: the row-averaging ablation (groups of consecutive items
 * replaced by their mean). */
#include "store/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Mean of items [a, b) of m, coordinate j. The sum starts from the first value so
 * a group of one reproduces it bitwise (including -0.0). */
static double group_mean(const es_matrix *m, size_t a, size_t b, size_t j)
{
    double sum = es_matrix_item(m, a, j);
    for (size_t i = a + 1; i < b; i++)
        sum += es_matrix_item(m, i, j);
    return sum / (double)(b - a);
}

/* Same logical shape and model axis as m, each item replaced by the mean of its
 * group of g (the last group may be shorter). ES_E_PARAM "average" unless
 * 1 <= g <= items. */
int es_matrix_average_rows(const es_matrix *m, const char *id, size_t g, es_matrix **out,
                           es_err *err)
{
    size_t n = es_matrix_items(m), d = es_matrix_dim(m);
    if (g < 1 || g > n)
        return es_fail(err, ES_E_PARAM, "average",
                       "average must be a group size in 1..%zu (the items of %s), got %zu", n,
                       m->id, g);
    double *data = es_malloc(n * d * sizeof *data);
    bool items_are_rows = m->model_axis == ES_AXIS_COLUMNS;
    for (size_t a = 0; a < n; a += g) {
        size_t b = a + g < n ? a + g : n;
        for (size_t j = 0; j < d; j++) {
            double mean = group_mean(m, a, b, j);
            for (size_t i = a; i < b; i++)
                data[items_are_rows ? i * d + j : j * n + i] = mean;
        }
    }
    es_provenance prov = m->prov;
    char what[64];
    snprintf(what, sizeof what, "rows averaged in groups of %zu", g);
    char *view = es_view_description(m, what);
    prov.view = view;
    es_sha256_hex(data, n * d * sizeof *data, prov.sha256);
    *out = es_matrix_from_data(id ? id : m->id, data, m->rows, m->cols, m->model_axis, &prov);
    free(view);
    return 0;
}
