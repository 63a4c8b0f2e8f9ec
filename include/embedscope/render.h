/* The rendering of the service (src/api), its JSON: the jansson rendering of
 * the core's result structs, with the check that every number is finite.
 * Owner: src/api/render.c. Ownership and failure rules: see core.h. */
#ifndef ES_RENDER_H
#define ES_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "embedscope/analysis.h"
#include "embedscope/catalogue.h"
#include "embedscope/core.h"
#include "embedscope/labels.h"
#include "embedscope/linalg.h"
#include "embedscope/params.h"
#include "embedscope/positional.h"
#include "embedscope/store.h"

/* Collects the first non-finite number met while rendering, so a result that
 * holds one fails as a whole (500) instead of being emitted with nulls. */
typedef struct es_jctx {
    const char *bad_field; /* NULL while every number was finite */
    bool stopped;          /* a safe point of the rendering said stop (why: the computation's es_checkpoint) */
    bool checks_only;      /* the reply is a table (es_out's tables_only): es_jnums and es_jgrid check their
                            * numbers and build empty arrays, never a tree of the table's values */
    es_err why;
} es_jctx;

/* A JSON string of text that may come from the client: bytes that are not
 * valid UTF-8 are replaced by '?'. Never fails. */
json_t *es_jstr(const char *text);
/* Number builders: a non-finite value becomes null and is recorded in jc under
 * `field` (es_jctx_check turns it into the error); es_jnums and es_jgrid are
 * safe points of a computation (es_checkpoint every 4096 numbers and every
 * row): once it must stop they build nothing more and jc records why. Never fail. */
json_t *es_jnum(es_jctx *jc, const char *field, double v);
json_t *es_jnums(es_jctx *jc, const char *field, const double *v, size_t n);
json_t *es_jgrid(es_jctx *jc, const char *field, const double *v, size_t rows, size_t cols);
json_t *es_jsizes(const size_t *v, size_t n);
/* The stop met by a safe point (ES_E_CANCELLED, ES_E_SHUTDOWN), else
 * ES_E_NUMERIC "non-finite value in result field F" if one was met. */
int es_jctx_check(const es_jctx *jc, es_err *err);

/* Serialise (compact, JSON_REAL_PRECISION(17) so doubles round-trip) into a
 * malloc'ed body (release with free). ES_E_LIMIT "max_response_bytes" if the
 * text is longer than max_bytes (0 = unlimited); ES_E_NOMEM if it cannot be built. */
int es_json_body(const json_t *j, size_t max_bytes, char **out, size_t *len, es_err *err);

/* Summary of item norms (model orientation). */
typedef struct es_norms {
    double min, max, mean, median;
    size_t argmin, argmax;
} es_norms;

/* The es_render_* functions build or add members to root and never fail; a
 * non-finite number is recorded in jc (check it with es_jctx_check).
 * es_render_models: the /v1/models listing (each model's "source": "config"
 * or "user", each matrix's "created" and "bytes"); es_render_model: one model
 * of it; es_render_matrix: matrix j of model described with its row-norm summary. */
json_t *es_render_models(es_jctx *jc, const es_catalogue *reg);
json_t *es_render_model(es_jctx *jc, const es_model *model);
/* Append to list (a new array when NULL) es_axis_warning's text for each of the
 * n matrices that has one (once each: square with a defaulted model axis); returns
 * list. The listing carries it per matrix, cross-matrix responses at the top. */
json_t *es_axis_warnings(json_t *list, const es_matrix *const *ms, size_t n);
json_t *es_render_matrix(es_jctx *jc, const es_model *model, size_t j, const es_norms *norms);
/* {"jobs": [{key, method, n_rows, d, k, started, elapsed_s, fraction: null}]}
 * of the running decompositions, oldest first. Never fails. */
json_t *es_render_computing(const es_computing *list, size_t n);
/* input.matrix / input.a / input.b: id, sha256, view, rows (canonical), n_rows,
 * d, center, and when svd != NULL solver, reconstruction_error, orthogonality_error. */
json_t *es_render_input(es_jctx *jc, const es_matrix *m, const es_selection *sel, const es_svd *svd);
void es_render_pca(es_jctx *jc, json_t *root, const es_pca *p, bool with_rows);
void es_render_spectrum(es_jctx *jc, json_t *root, const es_spectrum *s);
void es_render_cosine_row(es_jctx *jc, json_t *root, const es_selection *sel, const double *sim);
void es_render_cosine_offset(es_jctx *jc, json_t *root, const es_cosine_offset *o);
void es_render_grid(es_jctx *jc, json_t *root, const char *field, const es_grid *g);
void es_render_vectors(es_jctx *jc, json_t *root, const es_vectors *v, const es_svd *svd);
void es_render_capture(es_jctx *jc, json_t *root, const es_capture *c);
/* score, n, span, offsets, diagonal_mean, diagonal_count of a Toeplitz score. */
void es_render_toeplitz(es_jctx *jc, json_t *root, const es_toeplitz *t);
/* An alignment's top_mean as [{"m", "mean"}, ...]. Never fails. */
json_t *es_render_top_means(es_jctx *jc, const es_alignment *a);
/* "degenerate_groups": [[start, end), ...] and "degeneracy_note". */
void es_render_degeneracy(es_jctx *jc, json_t *root, const es_degeneracy *d);
/* Flag each entry of root's "vectors" inside a group: "in_degenerate_group". */
void es_render_vector_groups(json_t *root, const es_degeneracy *d);

/* The catalogue's summary of a matrix's labels: null, or {"rows", "columns":
 * [{"name", "type": "numeric" | "categorical"}], "bytes", "sha256"}. Never fails. */
json_t *es_render_labels_info(const es_labels *l);

#endif
