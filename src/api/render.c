/* JSON rendering (jansson) of catalogues, matrices and analysis results.
 *
 * Numbers: doubles are written with JSON_REAL_PRECISION(17), so every value
 * parses back to the same double. Non-finite numbers cannot occur by
 * construction (loaders reject NaN/Inf, the SVD checks its output); should one
 * appear anyway, es_jnum records the field and the whole response fails with a
 * 500 "numeric-failure" problem instead of emitting null or dropping it. */
#include "embedscope/params.h"
#include "embedscope/pool.h"
#include "embedscope/render.h"

#include "embedscope/blas.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s, 0 if invalid (overlongs, surrogates
 * and code points above U+10FFFF included). */
static size_t utf8_seq_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
               : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((len == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (len == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
        (len == 4 && s[0] == 0xf0 && s[1] < 0x90) || (len == 4 && s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return len;
}

/* A JSON string of possibly invalid UTF-8, bad bytes replaced by '?'. Never fails. */
json_t *es_jstr(const char *text)
{
    size_t n = strlen(text);
    char *clean = es_malloc(n + 1);
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq_len((const unsigned char *)text + i);
        if (len == 0) {
            clean[i++] = '?';
            continue;
        }
        memcpy(clean + i, text + i, len);
        i += len;
    }
    clean[n] = '\0';
    json_t *s = json_stringn(clean, n);
    free(clean);
    return s;
}

/* A JSON real, or null with the field recorded if v is not finite. */
json_t *es_jnum(es_jctx *jc, const char *field, double v)
{
    if (isfinite(v))
        return json_real(v);
    if (!jc->bad_field)
        jc->bad_field = field;
    return json_null();
}

/* A safe point of the rendering (es_checkpoint): true once the computation
 * must stop, the reason kept in jc for es_jctx_check; the arrays built after
 * it are left empty, so a large table's rendering ends within a row. */
static bool render_stops(es_jctx *jc)
{
    if (!jc->stopped && es_checkpoint(&jc->why) < 0)
        jc->stopped = true;
    return jc->stopped;
}

/* n values as a JSON array; non-finite ones are recorded as in es_jnum. For
 * a table reply (jc->checks_only) the values are only checked: its JSON tree
 * is never rendered, and a 2048 x 2048 grid as one costs 160 MB of small
 * blocks (jansson's 4 M reals), which the allocator keeps long after. */
json_t *es_jnums(es_jctx *jc, const char *field, const double *v, size_t n)
{
    if (jc->checks_only) {
        for (size_t i = 0; i < n && !jc->bad_field && (i % 4096 || !render_stops(jc)); i++)
            if (!isfinite(v[i]))
                jc->bad_field = field;
        return json_array();
    }
    json_t *a = json_array();
    for (size_t i = 0; i < n && (i % 4096 || !render_stops(jc)); i++) /* a safe point every 4096 numbers */
        json_array_append_new(a, es_jnum(jc, field, v[i]));
    return a;
}

/* rows x cols row-major values as an array of row arrays. */
json_t *es_jgrid(es_jctx *jc, const char *field, const double *v, size_t rows, size_t cols)
{
    json_t *a = json_array();
    for (size_t i = 0; i < rows && !render_stops(jc); i++) {
        json_t *row = es_jnums(jc, field, v + i * cols, cols);
        if (jc->checks_only)
            json_decref(row); /* checked, and no tree (see es_jnums) */
        else
            json_array_append_new(a, row);
    }
    return a;
}

/* n indices or counts as a JSON array of integers. Never fails. */
json_t *es_jsizes(const size_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer((json_int_t)v[i]));
    return a;
}

/* Why the rendering stopped (ES_E_CANCELLED, ES_E_SHUTDOWN: es_jnums and
 * es_jgrid are its safe points), else ES_E_NUMERIC naming the first
 * non-finite field, if any. */
int es_jctx_check(const es_jctx *jc, es_err *err)
{
    if (jc->stopped) {
        *err = jc->why;
        return -1;
    }
    if (jc->bad_field)
        return es_fail(err, ES_E_NUMERIC, jc->bad_field, "non-finite value in result field '%s'", jc->bad_field);
    return 0;
}

/* Serialise j; see render.h for the failure rules. */
int es_json_body(const json_t *j, size_t max_bytes, char **out, size_t *len, es_err *err)
{
    char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
    if (!text)
        return es_fail(err, ES_E_NOMEM, "", "cannot serialise the response");
    size_t n = strlen(text);
    if (max_bytes && n > max_bytes) {
        free(text);
        return es_fail(err, ES_E_LIMIT, "max_response_bytes",
                       "the response would be %zu bytes, more than the configured limit max_response_bytes=%zu; "
                       "select fewer rows, a smaller k, or fewer bins",
                       n, max_bytes);
    }
    *out = text;
    *len = n;
    return 0;
}

/* A JSON object, or null, from JSON text such as a generator's parameters. */
static json_t *json_or_null(const char *text)
{
    if (!text || !*text)
        return json_null();
    json_t *j = json_loads(text, 0, NULL);
    return j ? j : es_jstr(text);
}

/* A JSON string, or null for NULL / "" (unset provenance fields). */
static json_t *text_or_null(const char *text)
{
    return text && *text ? es_jstr(text) : json_null();
}

/* A hash, or null while it is not known. */
static json_t *hash_or_null(const char *sha)
{
    return sha && *sha ? json_string(sha) : json_null();
}

/* m's provenance record; generator parameters are embedded as JSON. The
 * sha256s of a file mapped without a record are computed after loading:
 * null until known, sha256_state saying which ("computing", "known",
 * "failed" with sha256_error). */
static json_t *render_provenance(const es_matrix *m)
{
    const es_provenance *p = &m->prov;
    es_sha_state state = es_matrix_sha_state(m);
    json_t *o = json_object();
    json_object_set_new(o, "source", text_or_null(p->source));
    json_object_set_new(o, "tensor", text_or_null(p->tensor));
    json_object_set_new(o, "dtype", text_or_null(p->dtype));
    json_object_set_new(o, "shape", es_jsizes(p->shape, 2));
    json_object_set_new(o, "sha256", hash_or_null(es_matrix_sha256(m)));
    json_object_set_new(o, "sha256_state", json_string(es_sha_state_name(state)));
    if (state == ES_SHA_FAILED)
        json_object_set_new(o, "sha256_error", json_string(es_matrix_sha_error(m)));
    json_object_set_new(o, "file_sha256", hash_or_null(es_matrix_file_sha256(m)));
    json_object_set_new(o, "generator", json_or_null(p->generator));
    json_object_set_new(o, "view", text_or_null(p->view));
    return o;
}

/* See render.h. */
json_t *es_axis_warnings(json_t *list, const es_matrix *const *ms, size_t n)
{
    if (!list)
        list = json_array();
    for (size_t i = 0; i < n; i++) {
        char *w = es_axis_warning(ms[i]);
        bool seen = false;
        for (size_t j = 0; w && j < json_array_size(list); j++)
            seen = seen || strcmp(json_string_value(json_array_get(list, j)), w) == 0;
        if (w && !seen)
            json_array_append_new(list, es_jstr(w));
        free(w);
    }
    return list;
}

/* Unix time t as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC). Never fails. */
static json_t *timestamp(double t)
{
    time_t whole = (time_t)t;
    struct tm tm;
    char text[40];
    gmtime_r(&whole, &tm);
    size_t n = strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(text + n, sizeof text - n, ".%03dZ", (int)((t - (double)whole) * 1000.0) % 1000);
    return json_string(text);
}

/* Which OpenBLAS core and how many threads a computation ran on. Never fails. */
static json_t *render_blas(const char *core, unsigned threads)
{
    return json_pack("{s:s, s:I}", "core", core, "threads", (json_int_t)threads);
}

/* See render.h. */
json_t *es_render_computing(const es_computing *list, size_t n)
{
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "key", es_jstr(list[i].key));
        json_object_set_new(o, "method", json_string(list[i].method));
        json_object_set_new(o, "n_rows", json_integer((json_int_t)list[i].n));
        json_object_set_new(o, "d", json_integer((json_int_t)list[i].d));
        json_object_set_new(o, "k", list[i].k ? json_integer((json_int_t)list[i].k) : json_null());
        json_object_set_new(o, "started", timestamp(list[i].started_unix));
        json_object_set_new(o, "elapsed_s", json_real(list[i].elapsed));
        json_object_set_new(o, "fraction", json_null()); /* LAPACK reports no progress */
        json_object_set_new(o, "blas", render_blas(es_blas_core_name(), es_blas_job_threads()));
        json_array_append_new(out, o);
    }
    return json_pack("{s:o}", "jobs", out);
}

/* The fields every description of matrix j of model carries, its creation time
 * and the bytes of storage it holds among them. */
static json_t *render_matrix_summary(const es_model *model, size_t j)
{
    const es_matrix *m = model->matrices[j];
    json_t *o = json_object();
    json_object_set_new(o, "name", es_jstr(model->matrix_names[j]));
    json_object_set_new(o, "id", es_jstr(m->id));
    json_object_set_new(o, "description", text_or_null(model->matrix_descriptions[j]));
    json_object_set_new(o, "created", timestamp(model->matrix_created[j]));
    json_object_set_new(o, "bytes", json_integer((json_int_t)es_matrix_bytes(m)));
    json_object_set_new(o, "shape", json_pack("[I,I]", (json_int_t)m->rows, (json_int_t)m->cols));
    json_object_set_new(o, "dtype", text_or_null(m->prov.dtype));
    json_object_set_new(o, "model_axis", json_string(es_axis_name(m->model_axis)));
    json_object_set_new(o, "model_axis_origin", json_string(es_axis_origin_name(m->axis_origin)));
    json_object_set_new(o, "warnings", es_axis_warnings(NULL, &m, 1));
    json_object_set_new(o, "items", json_integer((json_int_t)es_matrix_items(m)));
    json_object_set_new(o, "d", json_integer((json_int_t)es_matrix_dim(m)));
    json_object_set_new(o, "provenance", render_provenance(m));
    json_object_set_new(o, "labels", es_render_labels_info(model->matrix_labels ? model->matrix_labels[j] : NULL));
    return o;
}

/* One model of the listing: name, description, source and its matrices. Never fails. */
json_t *es_render_model(es_jctx *jc, const es_model *model)
{
    (void)jc;
    json_t *matrices = json_array();
    for (size_t j = 0; j < model->n_matrices; j++)
        json_array_append_new(matrices, render_matrix_summary(model, j));
    return json_pack("{s:o, s:o, s:s, s:o}", "name", es_jstr(model->name), "description",
                     text_or_null(model->description), "source", model->user ? "user" : "config", "matrices",
                     matrices);
}

/* The /v1/models listing: config origin, every model and its matrices. Never fails. */
json_t *es_render_models(es_jctx *jc, const es_catalogue *reg)
{
    json_t *models = json_array();
    for (size_t i = 0; i < reg->n_models; i++)
        json_array_append_new(models, es_render_model(jc, &reg->models[i]));
    return json_pack("{s:o, s:o}", "config", es_jstr(reg->origin), "models", models);
}

/* One matrix's description plus its row-norm summary. Never fails. */
json_t *es_render_matrix(es_jctx *jc, const es_model *model, size_t j, const es_norms *norms)
{
    json_t *o = render_matrix_summary(model, j);
    json_object_set_new(o, "model", es_jstr(model->name));
    json_object_set_new(o, "source", json_string(model->user ? "user" : "config"));
    json_t *rn = json_object();
    json_object_set_new(rn, "min", es_jnum(jc, "row_norms.min", norms->min));
    json_object_set_new(rn, "max", es_jnum(jc, "row_norms.max", norms->max));
    json_object_set_new(rn, "mean", es_jnum(jc, "row_norms.mean", norms->mean));
    json_object_set_new(rn, "median", es_jnum(jc, "row_norms.median", norms->median));
    json_object_set_new(rn, "argmin", json_integer((json_int_t)norms->argmin));
    json_object_set_new(rn, "argmax", json_integer((json_int_t)norms->argmax));
    json_object_set_new(o, "row_norms", rn);
    return o;
}

/* A top-k certificate: k computed and the measured bounds (relative to s_0). */
static json_t *render_certificate(es_jctx *jc, const es_certificate *c, size_t k)
{
    json_t *o = json_object();
    json_object_set_new(o, "k_computed", json_integer((json_int_t)k));
    json_object_set_new(o, "residual", es_jnum(jc, "residual", c->residual));
    json_object_set_new(o, "sigma_bound", es_jnum(jc, "sigma_bound", c->sigma_bound));
    json_object_set_new(o, "vector_bound", es_jnum(jc, "vector_bound", c->vector_bound));
    json_object_set_new(o, "min_gap", es_jnum(jc, "min_gap", c->min_gap));
    json_object_set_new(o, "tolerance", es_jnum(jc, "tolerance", c->tolerance));
    return o;
}

/* The "input" description of an analysed selection; see render.h. Never fails. */
json_t *es_render_input(es_jctx *jc, const es_matrix *m, const es_selection *sel, const es_svd *svd)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", es_jstr(m->id));
    json_object_set_new(o, "sha256", hash_or_null(es_matrix_sha256(m)));
    json_object_set_new(o, "view", text_or_null(m->prov.view));
    json_object_set_new(o, "rows", json_string(sel->canonical));
    json_object_set_new(o, "n_rows", json_integer((json_int_t)sel->n));
    json_object_set_new(o, "d", json_integer((json_int_t)es_matrix_dim(m)));
    json_object_set_new(o, "center", json_string(es_centering_name(sel->center)));
    if (svd) {
        json_object_set_new(o, "solver", json_string(svd->solver));
        json_object_set_new(o, "blas", render_blas(svd->blas_core, svd->threads));
        json_object_set_new(o, "method", json_string(svd->method));
        bool values = strcmp(svd->method, "values") == 0; /* no vectors: nothing reconstructed, none orthogonal */
        if (strcmp(svd->method, "topk") == 0) /* a truncation: no reconstruction, a certificate */
            json_object_set_new(o, "certificate", render_certificate(jc, &svd->cert, svd->r));
        else if (!values)
            json_object_set_new(o, "reconstruction_error", es_jnum(jc, "reconstruction_error", svd->recon_error));
        if (!values)
            json_object_set_new(o, "orthogonality_error", es_jnum(jc, "orthogonality_error", svd->orth_error));
        if (svd->note[0])
            json_object_set_new(o, "method_note", json_string(svd->note));
    }
    return o;
}

/* Explained-variance ratios and, with_rows, each selected row's coordinates
 * (without: only a non-finite coordinate is recorded in jc, as rendering would). */
void es_render_pca(es_jctx *jc, json_t *root, const es_pca *p, bool with_rows)
{
    json_object_set_new(root, "explained_variance_ratio", es_jnums(jc, "explained_variance_ratio", p->evr, p->k));
    json_object_set_new(root, "cumulative", es_jnums(jc, "cumulative", p->cumulative, p->k));
    if (!with_rows) {
        for (size_t i = 0; i < p->n * p->k && !jc->bad_field; i++)
            if (!isfinite(p->coords[i]))
                jc->bad_field = "coords";
        return;
    }
    json_t *rows = json_array();
    for (size_t i = 0; i < p->n; i++)
        json_array_append_new(rows, json_pack("{s:I, s:o}", "index", (json_int_t)p->rows[i], "coords",
                                              es_jnums(jc, "coords", p->coords + i * p->k, p->k)));
    json_object_set_new(root, "rows", rows);
}

/* Rank, singular values, explained-variance ratios and the components needed for 50/90/99 %. */
void es_render_spectrum(es_jctx *jc, json_t *root, const es_spectrum *s)
{
    json_object_set_new(root, "rank", json_integer((json_int_t)s->r));
    json_object_set_new(root, "singular_values", es_jnums(jc, "singular_values", s->s, s->r));
    json_object_set_new(root, "explained_variance_ratio", es_jnums(jc, "explained_variance_ratio", s->evr, s->r));
    json_object_set_new(root, "cumulative", es_jnums(jc, "cumulative", s->cumulative, s->r));
    json_object_set_new(root, "components_for", json_pack("{s:I, s:I, s:I}", "0.5", (json_int_t)s->n50, "0.9",
                                                          (json_int_t)s->n90, "0.99", (json_int_t)s->n99));
}

/* One row's similarities to the selected rows, with their indices. */
void es_render_cosine_row(es_jctx *jc, json_t *root, const es_selection *sel, const double *sim)
{
    json_object_set_new(root, "rows", es_jsizes(sel->idx, sel->n));
    json_object_set_new(root, "similarity", es_jnums(jc, "similarity", sim, sel->n));
}

/* Mean similarity per offset and the number of pairs behind each mean; how
 * they were summed (method: direct or fft, with its transforms' length) and
 * the bound on every mean's error (error_bound, docs/api.md). */
void es_render_cosine_offset(es_jctx *jc, json_t *root, const es_cosine_offset *o)
{
    json_object_set_new(root, "offsets", es_jsizes(o->offset, o->count));
    json_object_set_new(root, "mean", es_jnums(jc, "mean", o->mean, o->count));
    json_object_set_new(root, "pairs", es_jsizes(o->pairs, o->count));
    json_object_set_new(root, "method", json_string(o->method));
    json_object_set_new(root, "error_bound", es_jnum(jc, "error_bound", o->error_bound));
    if (o->fft_length)
        json_object_set_new(root, "fft_length", json_integer((json_int_t)o->fft_length));
}

/* A binned grid as `field` (row arrays) plus row_edges / col_edges. */
void es_render_grid(es_jctx *jc, json_t *root, const char *field, const es_grid *g)
{
    json_object_set_new(root, field, es_jgrid(jc, field, g->values, g->rows, g->cols));
    json_object_set_new(root, "row_edges", es_jsizes(g->row_edges, g->rows + 1));
    json_object_set_new(root, "col_edges", es_jsizes(g->col_edges, g->cols + 1));
}

/* Vectors; left vectors also list the row index of each coordinate. */
void es_render_vectors(es_jctx *jc, json_t *root, const es_vectors *v, const es_svd *svd)
{
    json_t *list = json_array();
    for (size_t j = 0; j < v->k; j++)
        json_array_append_new(list, json_pack("{s:I, s:o, s:o, s:I, s:I}", "index", (json_int_t)j,
                                              "singular_value", es_jnum(jc, "singular_value", v->s[j]),
                                              "values", es_jnums(jc, "values", v->values + j * v->len, v->len),
                                              "n50", (json_int_t)v->n50[j], "n90", (json_int_t)v->n90[j]));
    json_object_set_new(root, "vectors", list);
    if (v->side == ES_SIDE_LEFT)
        json_object_set_new(root, "rows", es_jsizes(svd->rows, svd->n));
}

/* Capture per component, the random-subspace baseline and the total. */
void es_render_capture(es_jctx *jc, json_t *root, const es_capture *c)
{
    json_object_set_new(root, "capture", es_jnums(jc, "capture", c->capture, c->count));
    json_object_set_new(root, "baseline", es_jnum(jc, "baseline", c->baseline));
    json_object_set_new(root, "sum", es_jnum(jc, "sum", c->sum));
}

/* Groups of near-equal singular values, as [start, end) pairs, with what they mean. */
void es_render_degeneracy(es_jctx *jc, json_t *root, const es_degeneracy *d)
{
    (void)jc;
    json_t *groups = json_array();
    for (size_t i = 0; i < d->count; i++)
        json_array_append_new(groups, json_pack("[I,I]", (json_int_t)d->start[i], (json_int_t)d->end[i]));
    json_object_set_new(root, "degenerate_groups", groups);
    json_object_set_new(root, "degeneracy_note",
                        json_string("inside a group [start, end) of near-equal singular values (consecutive relative "
                                    "gaps below input.gap) the individual singular vectors are arbitrary up to a "
                                    "rotation within the group; subspace quantities summed over the group are not"));
}

/* True when vector j lies in one of d's groups. */
static bool in_group(const es_degeneracy *d, size_t j)
{
    for (size_t i = 0; i < d->count; i++)
        if (j >= d->start[i] && j < d->end[i])
            return true;
    return false;
}

/* Flag each rendered vector inside a degenerate group; see render.h. */
void es_render_vector_groups(json_t *root, const es_degeneracy *d)
{
    json_t *list = json_object_get(root, "vectors");
    for (size_t j = 0; j < json_array_size(list); j++)
        json_object_set_new(json_array_get(list, j), "in_degenerate_group", json_boolean(in_group(d, j)));
}

/* See render.h. */
json_t *es_render_labels_info(const es_labels *l)
{
    if (!l)
        return json_null();
    json_t *cols = json_array();
    for (size_t c = 0; c < l->n_cols; c++)
        json_array_append_new(cols, json_pack("{s:o, s:s}", "name", es_jstr(l->names[c]), "type",
                                              l->numeric[c] ? "numeric" : "categorical"));
    return json_pack("{s:I, s:o, s:I, s:s}", "rows", (json_int_t)l->n_rows, "columns", cols, "bytes",
                     (json_int_t)l->bytes, "sha256", l->sha256);
}

/* Signed integers lo..hi as a JSON array (offsets). */
static json_t *int_range(long lo, long hi)
{
    json_t *a = json_array();
    for (long v = lo; v <= hi; v++)
        json_array_append_new(a, json_integer(v));
    return a;
}

/* See render.h: score, span, offsets -span..span with the mean and count of each diagonal. */
void es_render_toeplitz(es_jctx *jc, json_t *root, const es_toeplitz *t)
{
    json_object_set_new(root, "score", es_jnum(jc, "score", t->score));
    json_object_set_new(root, "n", json_integer((json_int_t)t->n));
    json_object_set_new(root, "span", json_integer((json_int_t)t->span));
    json_object_set_new(root, "offsets", int_range(-(long)t->span, (long)t->span));
    json_object_set_new(root, "diagonal_mean", es_jnums(jc, "diagonal_mean", t->diag_mean, 2 * t->span + 1));
    json_object_set_new(root, "diagonal_count", es_jsizes(t->diag_count, 2 * t->span + 1));
}

/* See render.h. */
json_t *es_render_top_means(es_jctx *jc, const es_alignment *a)
{
    json_t *list = json_array();
    for (size_t i = 0; i < a->n_top; i++)
        json_array_append_new(list, json_pack("{s:I, s:o}", "m", (json_int_t)a->top_m[i], "mean",
                                              es_jnum(jc, "top_mean", a->top_mean[i])));
    return list;
}
