/* What the analysis descriptors of src/api/analyses share: the service headers
 * they use, the spec lines several of them take (gap, k, bins, method) and the
 * top-k decomposition, degeneracy and Gram-cost helpers (common.c). A new
 * analysis includes this and needs nothing else of src/api (docs/development.md,
 * "Adding an analysis"). Owner: src/api/analyses/common.c. */
#ifndef ES_ANALYSES_COMMON_H
#define ES_ANALYSES_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "embedscope/analysis.h"
#include "embedscope/app.h"
#include "embedscope/cost.h"
#include "embedscope/descriptor.h"
#include "embedscope/format.h"
#include "embedscope/params.h"
#include "embedscope/positional.h"
#include "embedscope/render.h"
#include "embedscope/route.h"
#include "embedscope/uploads.h"

/* The degeneracy groups of svd's singular values under threshold gap; NULL on failure. */
es_degeneracy *es_desc_degeneracy(const es_svd *svd, double gap, es_err *err);

/* The degeneracy threshold gap, strictly between 0 and 1. */
#define GAP_SPEC(type)                                                                                     \
    {.name = "gap", .kind = ES_P_REAL, .def = ES_DEGENERACY_GAP, .min = 0, .max = 1, .min_open = true,   \
     .max_open = true, .offset = ES_FIELD(type, gap)}
/* A number of components: 1..max_k and at most the rank bound of selection side. */
#define K_SPEC(type, dflt, which)                                                                          \
    {.name = "k", .kind = ES_P_SIZE, .def = dflt, .min = 1, .limit = "max_k", .bound = ES_BOUND_RANK,      \
     .side = which, .offset = ES_FIELD(type, k)}
/* Heatmap bins: default 64 (lowered to max_bins), at most max_bins. */
#define BINS_SPEC(type, dflt, lowest)                                                                      \
    {.name = "bins", .kind = ES_P_SIZE, .def = dflt, .min = lowest, .limit = "max_bins",                  \
     .offset = ES_FIELD(type, bins)}

/* Costs beyond the selection pass and the decomposition (cost.c): each
 * analysis' own kernels and the numbers it renders. The n x n Gram matrix of
 * the items and its diagonals (toeplitz): */
void es_desc_cost_gram(const es_run *run, size_t n, size_t d, es_cost *c);

/* The analyses answered from the top k triplets (pca, vectors) and the
 * spectrum (k 0: every singular value): their params start with k and method,
 * so one decomposition serves them all. */
typedef struct es_desc_topk_params {
    size_t k, method;
} es_desc_topk_params;

/* es_method order; the spectrum takes the first three (values comes before topk
 * for that, see linalg.h), pca and vectors all four and refuse values
 * (es_desc_needs_vectors). */
extern const char *const es_desc_methods[];
extern const char *const es_desc_spectrum_methods[];
#define METHOD_SPEC(type, names)                                                                           \
    {.name = "method", .kind = ES_P_CHOICE, .choices = names, .def = ES_METHOD_AUTO,                      \
     .no_echo = true /* input.matrix.method says which one answered */, .offset = ES_FIELD(type, method)}
/* The metrics of neighbors and umap, es_metric order. */
extern const char *const es_desc_metrics[];

/* An analysis of singular vectors (pca, vectors) asked for method=values: a
 * 400 before the gate, so nothing is queued or computed. ES_E_PARAM naming
 * "method". */
int es_desc_needs_vectors(const es_run *run, es_err *err);

/* The top k triplets by the asked method (exact SVD, or a certified top-k
 * solver, auto choosing), or for the spectrum (k 0) every singular value, with
 * the vectors or (values) without; fails like es_cache_decompose. */
int es_desc_decompose_topk(const es_run *run, int i, es_svd **out, es_err *err);

#endif
