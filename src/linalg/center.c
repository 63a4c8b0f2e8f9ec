/* Centring of a block of items before the SVD: none, columns (PCA) or rows. */
#include "embedscope/linalg.h"

#include <stdlib.h>
#include <string.h>

const char *const es_centering_names[] = {
    [ES_CENTER_NONE] = "none", [ES_CENTER_COLUMNS] = "columns", [ES_CENTER_ROWS] = "rows", NULL};
#define N_CENTERINGS (sizeof es_centering_names / sizeof *es_centering_names - 1)

/* Name of a centring; "unknown" for a value outside the enum (never fails). */
const char *es_centering_name(es_centering c)
{
    return es_name_of(es_centering_names, N_CENTERINGS, (size_t)c);
}

/* Parse "none" | "columns" | "rows"; -1 (out untouched) for anything else. */
int es_centering_parse(const char *s, es_centering *out)
{
    int i = es_name_index(es_centering_names, N_CENTERINGS, s);
    if (i < 0)
        return -1;
    *out = (es_centering)i;
    return 0;
}

/* Subtract the mean row (columns centring); the mean goes to mean_out if given. */
static void center_columns(double *x, size_t n, size_t d, double *mean_out)
{
    double *mean = mean_out ? mean_out : es_malloc(d * sizeof *mean);
    memset(mean, 0, d * sizeof *mean);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            mean[j] += x[i * d + j];
    for (size_t j = 0; j < d; j++)
        mean[j] /= (double)n;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < d; j++)
            x[i * d + j] -= mean[j];
    if (mean != mean_out)
        free(mean);
}

/* Subtract from each row its own mean over the d coordinates; the n means go
 * to mean_out if given. */
static void center_rows(double *x, size_t n, size_t d, double *mean_out)
{
    for (size_t i = 0; i < n; i++) {
        double *row = x + i * d, sum = 0;
        for (size_t j = 0; j < d; j++)
            sum += row[j];
        double mean = sum / (double)d;
        for (size_t j = 0; j < d; j++)
            row[j] -= mean;
        if (mean_out)
            mean_out[i] = mean;
    }
}

/* Centre an n x d row-major block in place (never fails; n, d >= 1 for any effect).
 * mean_out receives the subtracted means: the mean row (d) for columns
 * centring, the n row means for rows centring. */
void es_center(double *x, size_t n, size_t d, es_centering c, double *mean_out)
{
    if (n == 0 || d == 0)
        return;
    if (c == ES_CENTER_COLUMNS)
        center_columns(x, n, d, mean_out);
    else if (c == ES_CENTER_ROWS)
        center_rows(x, n, d, mean_out);
}
