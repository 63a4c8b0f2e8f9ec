/* Weight alignment: how much of a weight matrix's model-space singular basis lies
 * inside a reference matrix's top-k subspace (capture) and the squared overlaps
 * between the two bases. A thin combination of es_capture and es_overlap. */
#include "embedscope/positional.h"

#include <stdlib.h>

/* The numbers of leading W vectors summarised by their mean capture. */
static const size_t summary_sizes[] = {1, 5, 10, 20, 50};
#define N_SUMMARY (sizeof summary_sizes / sizeof *summary_sizes)

/* See positional.h. */
size_t es_alignment_summary_count(size_t count)
{
    size_t n = 0;
    while (n < N_SUMMARY && summary_sizes[n] <= count)
        n++;
    return n;
}

/* Mean capture of the top m vectors for each summary size m <= count. */
static void summarise(es_alignment *a)
{
    const es_capture *c = a->capture;
    a->top_m = es_calloc(N_SUMMARY, sizeof *a->top_m);
    a->top_mean = es_calloc(N_SUMMARY, sizeof *a->top_mean);
    for (size_t i = 0; i < N_SUMMARY && summary_sizes[i] <= c->count; i++) {
        double sum = 0;
        for (size_t j = 0; j < summary_sizes[i]; j++)
            sum += c->capture[j];
        a->top_m[i] = summary_sizes[i];
        a->top_mean[i] = sum / (double)summary_sizes[i];
        a->n_top = i + 1;
    }
}

/* Capture of W's vectors in R's top k, overlaps of W's top kw with R's top kr
 * (optionally binned), and summaries. Errors: those of es_capture_compute and
 * es_overlap_compute, passed through. */
int es_alignment_compute(const es_svd *w, const es_svd *r, size_t k, size_t kw, size_t kr,
                         size_t bins, es_alignment **out, es_err *err)
{
    es_capture *capture = NULL;
    es_grid *overlap = NULL;
    if (es_capture_compute(r, k, w, &capture, err) != 0)
        return -1;
    if (es_overlap_compute(w, kw, r, kr, bins, 0.0, &overlap, err) != 0) {
        es_capture_free(capture);
        return -1;
    }
    es_alignment *a = es_calloc(1, sizeof *a);
    a->capture = capture;
    a->overlap = overlap;
    summarise(a);
    *out = a;
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_alignment_free(es_alignment *a)
{
    if (!a)
        return;
    es_capture_free(a->capture);
    es_grid_free(a->overlap);
    free(a->top_m);
    free(a->top_mean);
    free(a);
}
