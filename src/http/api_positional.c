/* The /v1 handlers of the positional analyses (issue 4): periodicity, outliers,
 * Toeplitz scores, the row-averaging summary, weight alignment (one pair and the
 * per-layer table), positional-only attention (per head, ranking, pattern), the
 * RoPE relative property and side-by-side comparison. Glue only: parse
 * (params.c), look up, decompose through the cache, run the pure function from
 * include/embedscope/positional.h, render.
 *
 * Defaults (documented in openapi.yaml): periodicity center columns, k 3;
 * outliers threshold 3.5; toeplitz kind cosine; alignment k 10, kw = kr =
 * min(10, rank), bins 0 (unbinned), centring none; attention queries all
 * positions, n_heads the model's configured n_heads, else 12, eps 1e-5 (GPT-2), pattern bins 64; rope seed 0. */
#include "http/http.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN_DEFAULT_K 10
#define GPT2_HEADS 12
#define GPT2_LN_EPS 1e-5
/* At most this many layers are discovered in one model. */
#define MAX_LAYERS 256
/* At most this many matrices in one /v1/compare request. */
#define COMPARE_MAX 8

/* {"input": {}} to be filled. */
static json_t *new_root(void)
{
    json_t *root = json_object();
    json_object_set_new(root, "input", json_object());
    return root;
}

/* The "input" object of a root made by new_root. */
static json_t *input_of(json_t *root) { return json_object_get(root, "input"); }

/* Signed integers lo..hi as a JSON array (offsets). */
static json_t *int_range(long lo, long hi)
{
    json_t *a = json_array();
    for (long v = lo; v <= hi; v++)
        json_array_append_new(a, json_integer(v));
    return a;
}

/* ---------------------------------------------------------------- periodicity */

/* es_analysis_periodicity.parse: k (default 3) up to the rank bound; fails like es_param_k. */
static int parse_periodicity(es_app *app, const es_query *q, es_one_req *r, es_err *err)
{
    size_t n = r->one.sel.n, d = es_matrix_dim(r->one.m);
    return es_param_k(q, "k", 3, &app->limits, n < d ? n : d, &r->k, err);
}

/* A number when the component has a period, else null. */
static json_t *if_found(es_jctx *jc, const es_period *c, const char *field, double v)
{
    return c->found ? es_jnum(jc, field, v) : json_null();
}

/* Fisher's g-test of one component (see es_period). */
static json_t *render_significance(es_jctx *jc, const es_period *c)
{
    return json_pack("{s:s, s:o, s:I, s:o, s:b, s:o, s:b}", "test", "fisher_g", "g", es_jnum(jc, "g", c->g),
                     "n_ordinates", (json_int_t)c->n_ordinates, "p_value", es_jnum(jc, "p_value", c->p_value),
                     "p_value_exact", c->p_exact, "alpha", es_jnum(jc, "alpha", c->alpha), "significant",
                     c->p_value < c->alpha);
}

/* Per component its period (null with the reason when there is none), the fit
 * behind it, the peak share and the g-test; plus the turning plane. */
static void render_periodicity(es_jctx *jc, json_t *root, const es_periodicity *p)
{
    json_t *list = json_array();
    for (size_t j = 0; j < p->m; j++) {
        const es_period *c = &p->components[j];
        json_array_append_new(
            list, json_pack("{s:I, s:o, s:o, s:o, s:I, s:o, s:o, s:o, s:[o, o], s:o}", "index", (json_int_t)j,
                            "period", if_found(jc, c, "period", c->period), "cycles",
                            if_found(jc, c, "cycles", c->cycles), "no_period_reason",
                            c->found ? json_null() : json_string(es_period_verdict_name(c->verdict)), "peak_bin",
                            (json_int_t)c->peak_bin, "peak_share", es_jnum(jc, "peak_share", c->peak_share),
                            "fit_cycles", es_jnum(jc, "fit_cycles", c->fit_cycles), "fit_period",
                            es_jnum(jc, "fit_period", c->fit_period), "search_cycles",
                            es_jnum(jc, "search_cycles", c->search_lo), es_jnum(jc, "search_cycles", c->search_hi),
                            "significance", render_significance(jc, c)));
    }
    json_object_set_new(root, "n", json_integer((json_int_t)p->n));
    json_object_set_new(root, "step", json_integer((json_int_t)p->step));
    json_object_set_new(root, "components", list);
    json_object_set_new(root, "turn_plane", es_jsizes(p->turn_plane, 2));
    json_object_set_new(root, "turns", es_jnum(jc, "turns", p->turns));
}

/* es_analysis_periodicity.fill; fails like es_periodicity_from_svd. */
static int fill_periodicity(const es_one_req *r, const es_svd *svd, es_jctx *jc, json_t *root, es_err *err)
{
    es_periodicity *p;
    if (es_periodicity_from_svd(svd, r->k, ES_PERIOD_ALPHA, &p, err) < 0)
        return -1;
    json_object_set_new(input_of(root), "k", json_integer((json_int_t)r->k));
    render_periodicity(jc, root, p);
    es_periodicity_free(p);
    return 0;
}

static const char *const periodicity_own[] = {"k", NULL};
const es_analysis es_analysis_periodicity = {.name = "periodicity", .decomposed = true, .with_center = true,
                                             .def_center = ES_CENTER_COLUMNS, .params = periodicity_own,
                                             .parse = parse_periodicity, .fill = fill_periodicity,
                                             .cost = es_cost_periodicity};

/* ---------------------------------------------------------------- outliers */

/* es_analysis_outliers.parse: threshold > 0 (ES_E_PARAM naming "threshold"). */
static int parse_outliers(es_app *app, const es_query *q, es_one_req *r, es_err *err)
{
    (void)app;
    if (es_param_double(q, "threshold", ES_OUTLIER_THRESHOLD, 0, HUGE_VAL, &r->threshold, err) < 0)
        return -1;
    if (r->threshold <= 0)
        return es_fail(err, ES_E_PARAM, "threshold", "threshold must be > 0, got %.17g", r->threshold);
    return 0;
}

/* es_analysis_outliers.fill: robust row-norm scores; fails like es_outliers_compute. */
static int fill_outliers(const es_one_req *r, const es_svd *svd, es_jctx *jc, json_t *root, es_err *err)
{
    (void)svd;
    es_outliers *o;
    if (es_outliers_compute(r->one.m, r->one.sel.idx, r->one.sel.n, r->threshold, &o, err) < 0)
        return -1;
    json_object_set_new(input_of(root), "threshold", es_jnum(jc, "threshold", r->threshold));
    json_object_set_new(root, "rows", es_jsizes(o->rows, o->n));
    json_object_set_new(root, "norms", es_jnums(jc, "norms", o->norm, o->n));
    json_object_set_new(root, "scores", es_jnums(jc, "scores", o->score, o->n));
    json_object_set_new(root, "median", es_jnum(jc, "median", o->median));
    json_object_set_new(root, "mad", es_jnum(jc, "mad", o->mad));
    json_object_set_new(root, "scale", es_jnum(jc, "scale", o->scale));
    json_object_set_new(root, "threshold", es_jnum(jc, "threshold", o->threshold));
    json_object_set_new(root, "n_flagged", json_integer((json_int_t)o->n_flagged));
    json_object_set_new(root, "flagged", es_jsizes(o->flagged, o->n_flagged));
    es_outliers_free(o);
    return 0;
}

static const char *const outliers_own[] = {"threshold", NULL};
const es_analysis es_analysis_outliers = {.name = "outliers", .def_center = ES_CENTER_NONE, .params = outliers_own,
                                          .parse = parse_outliers, .fill = fill_outliers};

/* ---------------------------------------------------------------- Toeplitz */

/* es_analysis_toeplitz.parse: kind gram | cosine (ES_E_PARAM naming "kind"). */
static int parse_toeplitz(es_app *app, const es_query *q, es_one_req *r, es_err *err)
{
    (void)app;
    const char *const kinds[] = {es_gram_kind_name(ES_GRAM_DOT), es_gram_kind_name(ES_GRAM_COSINE), NULL};
    size_t kind;
    if (es_param_choice(q, "kind", kinds, ES_GRAM_COSINE, &kind, err) < 0)
        return -1;
    r->kind = (es_gram_kind)kind;
    return 0;
}

/* score, span, offsets -span..span with the mean and count of each diagonal. */
static void render_toeplitz(es_jctx *jc, json_t *root, const es_toeplitz *t)
{
    json_object_set_new(root, "score", es_jnum(jc, "score", t->score));
    json_object_set_new(root, "n", json_integer((json_int_t)t->n));
    json_object_set_new(root, "span", json_integer((json_int_t)t->span));
    json_object_set_new(root, "offsets", int_range(-(long)t->span, (long)t->span));
    json_object_set_new(root, "diagonal_mean", es_jnums(jc, "diagonal_mean", t->diag_mean, 2 * t->span + 1));
    json_object_set_new(root, "diagonal_count", es_jsizes(t->diag_count, 2 * t->span + 1));
}

/* es_analysis_toeplitz.fill; fails like es_toeplitz_compute. */
static int fill_toeplitz(const es_one_req *r, const es_svd *svd, es_jctx *jc, json_t *root, es_err *err)
{
    (void)svd;
    es_toeplitz *t;
    if (es_toeplitz_compute(r->one.m, r->one.sel.idx, r->one.sel.n, r->kind, &t, err) < 0)
        return -1;
    json_object_set_new(input_of(root), "kind", json_string(es_gram_kind_name(r->kind)));
    render_toeplitz(jc, root, t);
    es_toeplitz_free(t);
    return 0;
}

static const char *const toeplitz_own[] = {"kind", NULL};
const es_analysis es_analysis_toeplitz = {.name = "toeplitz", .def_center = ES_CENTER_NONE, .params = toeplitz_own,
                                          .parse = parse_toeplitz, .fill = fill_toeplitz,
                                          .cost = es_cost_gram};

/* GET .../periodicity, .../outliers, .../toeplitz; fail like es_run_path_analysis. */
int es_api_periodicity(es_ctx *cx, es_err *err) { return es_run_path_analysis(cx, &es_analysis_periodicity, err); }
int es_api_outliers(es_ctx *cx, es_err *err) { return es_run_path_analysis(cx, &es_analysis_outliers, err); }
int es_api_toeplitz(es_ctx *cx, es_err *err) { return es_run_path_analysis(cx, &es_analysis_toeplitz, err); }

/* ---------------------------------------------------------------- averaging summary */

/* Per-row displacements and their summary, absolute and relative to the radius. */
static void render_averaging(es_jctx *jc, json_t *root, const es_averaging *a)
{
    json_object_set_new(root, "rows", es_jsizes(a->rows, a->n));
    json_object_set_new(root, "displacement", es_jnums(jc, "displacement", a->disp, a->n));
    json_object_set_new(root, "mean_displacement", es_jnum(jc, "mean_displacement", a->mean_disp));
    json_object_set_new(root, "max_displacement", es_jnum(jc, "max_displacement", a->max_disp));
    json_object_set_new(root, "max_row", json_integer((json_int_t)a->max_row));
    json_object_set_new(root, "radius", es_jnum(jc, "radius", a->radius));
    json_object_set_new(root, "relative_mean", es_jnum(jc, "relative_mean", a->rel_mean));
    json_object_set_new(root, "relative_max", es_jnum(jc, "relative_max", a->rel_max));
}

/* How far averaging in groups of g moves the selected rows in the top-3 PCA space
 * of the original (columns-centred on the same rows); average_order as for the
 * average parameter (default: the selected rows in groups from the first one). g is required (ES_E_PARAM
 * naming "g"); other failures come from the selection, es_app_averaged or the SVD. */
int es_api_averaging(es_ctx *cx, es_err *err)
{
    const es_matrix *m;
    es_one one = {0};
    es_matrix *avg = NULL;
    es_svd *svd = NULL;
    es_averaging *a = NULL;
    size_t g = 0;
    es_average_order order;
    int rc = -1;
    if (es_path_matrix(cx, &m, err) < 0)
        goto done;
    if (!es_query_get(cx->query, "g")) {
        es_fail(err, ES_E_PARAM, "g", "missing required parameter 'g' (the group size, 1..%zu)", es_matrix_items(m));
        goto done;
    }
    if (es_param_size(cx->query, "g", 1, 1, es_matrix_items(m), NULL, &g, err) < 0 ||
        es_param_average_order(cx->query, "average_order", &order, err) < 0 ||
        es_one_parse(cx->app, cx->query, "", m, false, ES_CENTER_COLUMNS, &one, err) < 0)
        goto done;
    one.sel.center = ES_CENTER_COLUMNS; /* the PCA space of the original */
    char *key = es_one_key(&one);
    bool settled = es_precheck(cx, "%s|g=%zu|order=%d", key, g, (int)order);
    free(key);
    if (settled) {
        rc = 0;
        goto done;
    }
    if (es_app_averaged(cx->app, m, order == ES_AVERAGE_SELECTED ? &one.sel : NULL, g, "g", &avg, err) < 0 ||
        es_one_svd(cx->app, &one, &svd, err) < 0 ||
        es_averaging_compute(svd, m, avg, &a, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *root = new_root();
    json_object_set_new(input_of(root), "matrix", es_one_input(&jc, &one, svd));
    json_object_set_new(input_of(root), "g", json_integer((json_int_t)g));
    json_object_set_new(input_of(root), "average_order", json_string(es_average_order_name(order)));
    json_object_set_new(input_of(root), "k", json_integer((json_int_t)a->k));
    json_object_set_new(input_of(root), "averaged_sha256", json_string(avg->prov.sha256));
    render_averaging(&jc, root, a);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_averaging_free(a);
    es_svd_release(svd);
    es_matrix_release(avg);
    es_one_free(&one);
    return rc;
}

/* ---------------------------------------------------------------- alignment */

static const char *const wr_names[2] = {"w", "r"};

/* top_mean as [{"m": m, "mean": value}, ...]. */
static json_t *render_top_means(es_jctx *jc, const es_alignment *a)
{
    json_t *list = json_array();
    for (size_t i = 0; i < a->n_top; i++)
        json_array_append_new(list, json_pack("{s:I, s:o}", "m", (json_int_t)a->top_m[i], "mean",
                                              es_jnum(jc, "top_mean", a->top_mean[i])));
    return list;
}

/* The smaller of a and b. */
static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Capture of each of W's model-space singular vectors by R's top-k subspace,
 * the top-m means and the squared overlaps of W's top kw with R's top kr. */
int es_api_alignment(es_ctx *cx, es_err *err)
{
    es_pair p = {0};
    es_alignment *al = NULL;
    size_t k, kw, kr, bins;
    int rc = -1;
    const es_limits *lim = &cx->app->limits;
    if (es_pair_parse(cx, wr_names, &p, err) < 0)
        goto done;
    size_t rw = es_one_rank(&p.one[0]), rr = es_one_rank(&p.one[1]);
    if (es_param_k(cx->query, "k", ALIGN_DEFAULT_K, lim, rr, &k, err) < 0 ||
        es_param_size(cx->query, "kw", min_size(ALIGN_DEFAULT_K, rw), 1, rw, NULL, &kw, err) < 0 ||
        es_param_size(cx->query, "kr", min_size(ALIGN_DEFAULT_K, rr), 1, rr, NULL, &kr, err) < 0 ||
        es_param_size(cx->query, "bins", 0, 0, lim->max_bins, "max_bins", &bins, err) < 0)
        goto done;
    char extra[96];
    snprintf(extra, sizeof extra, "k=%zu|kw=%zu|kr=%zu|bins=%zu", k, kw, kr, bins);
    if (es_pair_precheck(cx, &p, extra)) {
        rc = 0;
        goto done;
    }
    if (es_pair_decompose(cx->app, &p, err) < 0 ||
        es_alignment_compute(p.svd[0], p.svd[1], k, kw, kr, bins, &al, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *root = es_pair_root(&jc, &p, wr_names);
    json_t *input = input_of(root);
    json_object_set_new(input, "k", json_integer((json_int_t)k));
    json_object_set_new(input, "kw", json_integer((json_int_t)kw));
    json_object_set_new(input, "kr", json_integer((json_int_t)kr));
    json_object_set_new(input, "bins", json_integer((json_int_t)bins));
    es_render_capture(&jc, root, al->capture);
    json_object_set_new(root, "top_mean", render_top_means(&jc, al));
    es_render_grid(&jc, root, "overlap", al->overlap);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_alignment_free(al);
    es_pair_free(&p);
    return rc;
}

/* The configured model named by parameter "model" (required). ES_E_PARAM if
 * absent, ES_E_NOTFOUND naming "model" if unknown. */
static int param_model(es_ctx *cx, const es_model **out, es_err *err)
{
    const char *name = es_query_get(cx->query, "model");
    if (!name)
        return es_fail(err, ES_E_PARAM, "model", "missing required parameter 'model' (GET /v1/models lists them)");
    *out = es_registry_model(cx->reg, name);
    if (!*out)
        return es_fail(err, ES_E_NOTFOUND, "model", "no model '%.64s' (GET /v1/models lists them)", name);
    return 0;
}

/* Matrix "h<layer>.<suffix>" of mod, or NULL. */
static const es_matrix *layer_matrix(const es_registry *reg, const es_model *mod, size_t layer, const char *suffix)
{
    char name[96];
    snprintf(name, sizeof name, "h%zu.%s", layer, suffix);
    return es_registry_matrix(reg, mod->name, name);
}

/* Does mod have h<layer>.<s> for every suffix s? */
static bool layer_complete(const es_registry *reg, const es_model *mod, size_t layer, const char *const *suffixes)
{
    for (; *suffixes; suffixes++)
        if (!layer_matrix(reg, mod, layer, *suffixes))
            return false;
    return true;
}

/* The layers i (ascending, at most MAX_LAYERS) for which mod has every
 * h<i>.<suffix>, found from the names "h<digits>.…" of its matrices. */
static size_t model_layers(const es_registry *reg, const es_model *mod, const char *const *suffixes,
                           size_t out[MAX_LAYERS])
{
    size_t count = 0;
    for (size_t layer = 0; layer < MAX_LAYERS; layer++)
        if (layer_complete(reg, mod, layer, suffixes))
            out[count++] = layer;
    return count;
}

static const char *const qkvo[] = {"q", "k", "v", "o", NULL};

/* One layer's row of the table: per weight its id, sha256 and top-m means. */
static int alignment_layer_row(es_ctx *cx, const es_model *mod, size_t layer, const es_one *ref,
                               const es_svd *rsvd, size_t k, es_jctx *jc, json_t *row, es_err *err)
{
    for (size_t i = 0; qkvo[i]; i++) {
        const es_matrix *w = layer_matrix(cx->reg, mod, layer, qkvo[i]);
        es_one one = {0};
        es_svd *svd = NULL;
        es_alignment *al = NULL;
        int rc = es_check_comparable(ref->m, w, "model", err); /* a weight of the model against r */
        if (rc == 0)
            rc = es_one_parse(cx->app, cx->query, "w_", w, true, ES_CENTER_NONE, &one, err);
        if (rc == 0)
            rc = es_one_svd(cx->app, &one, &svd, err);
        if (rc == 0)
            rc = es_alignment_compute(svd, rsvd, k, 1, 1, 0, &al, err);
        if (rc == 0)
            json_object_set_new(row, qkvo[i], json_pack("{s:s, s:s, s:o}", "id", w->id, "sha256", w->prov.sha256,
                                                        "top_mean", render_top_means(jc, al)));
        es_alignment_free(al);
        es_svd_release(svd);
        es_one_free(&one);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* The per-layer table: for every layer with h<i>.q, .k, .v, .o, the mean
 * capture of each weight's top m singular vectors by r's top-k subspace. */
int es_api_alignment_layers(es_ctx *cx, es_err *err)
{
    const es_model *mod;
    const es_matrix *rm;
    es_one ref = {0};
    es_svd *rsvd = NULL;
    size_t layers[MAX_LAYERS], n_layers, k;
    int rc = -1;
    if (param_model(cx, &mod, err) < 0 || es_param_matrix(cx->query, "r", cx->reg, &rm, err) < 0 ||
        es_one_parse(cx->app, cx->query, "r_", rm, true, ES_CENTER_NONE, &ref, err) < 0 ||
        es_param_k(cx->query, "k", ALIGN_DEFAULT_K, &cx->app->limits, es_one_rank(&ref), &k, err) < 0)
        goto done;
    size_t center;
    const char *const centers[] = {"none", "columns", "rows", NULL};
    if (es_param_choice(cx->query, "w_center", centers, ES_CENTER_NONE, &center, err) < 0)
        goto done;
    n_layers = model_layers(cx->reg, mod, qkvo, layers);
    if (n_layers == 0) {
        es_fail(err, ES_E_NOTFOUND, "model", "model '%s' has no layer with matrices h<i>.q, h<i>.k, h<i>.v and h<i>.o",
                mod->name);
        goto done;
    }
    char *key = es_one_key(&ref);
    size_t w_head = SIZE_MAX;   /* checked against each weight by es_one_parse */
    if (es_query_get(cx->query, "w_head") && es_param_size(cx->query, "w_head", 0, 0, SIZE_MAX, NULL, &w_head, err) < 0) {
        free(key);
        goto done;
    }
    bool settled = es_precheck(cx, "model=%s|r=%s|k=%zu|w_center=%zu|w_head=%zu", mod->name, key, k, center, w_head);
    free(key);
    if (settled) {
        rc = 0;
        goto done;
    }
    if (es_one_svd(cx->app, &ref, &rsvd, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *root = new_root(), *table = json_array();
    json_object_set_new(root, "layers", table);
    for (size_t i = 0; i < n_layers; i++) {
        json_t *row = json_pack("{s:I}", "layer", (json_int_t)layers[i]);
        json_array_append_new(table, row);
        if (alignment_layer_row(cx, mod, layers[i], &ref, rsvd, k, &jc, row, err) < 0) {
            json_decref(root);
            goto done;
        }
    }
    json_t *input = input_of(root);
    json_object_set_new(input, "model", json_string(mod->name));
    json_object_set_new(input, "r", es_one_input(&jc, &ref, rsvd));
    json_object_set_new(input, "k", json_integer((json_int_t)k));
    json_object_set_new(input, "w_center", json_string(centers[center]));
    if (w_head != SIZE_MAX)
        json_object_set_new(input, "w_head", json_integer((json_int_t)w_head));
    json_object_set_new(root, "baseline", es_jnum(&jc, "baseline", (double)k / (double)rsvd->d));
    json_t *warnings = es_axis_warnings(NULL, &ref.source, 1);
    for (size_t i = 0; i < n_layers; i++)
        for (size_t j = 0; qkvo[j]; j++) {
            const es_matrix *w = layer_matrix(cx->app->reg, mod, layers[i], qkvo[j]);
            es_axis_warnings(warnings, &w, 1);
        }
    json_object_set_new(root, "warnings", warnings);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_svd_release(rsvd);
    es_one_free(&ref);
    return rc;
}

/* ---------------------------------------------------------------- positional-only attention */

/* The matrices one attention layer needs, by their configured names. */
static const char *const attn_suffixes[] = {"ln_1.weight", "ln_1.bias", "c_attn", "c_attn.bias", NULL};

/* Resolve layer `layer` of mod into an es_attn_layer: its wpe and the matrices
 * h<layer>.ln_1.weight, .ln_1.bias, .c_attn, .c_attn.bias. ES_E_NOTFOUND naming
 * "layer" and listing the missing ones. */
static int attn_layer_of(const es_registry *reg, const es_model *mod, size_t layer, size_t n_heads,
                         es_attn_layer *out, es_err *err)
{
    const es_matrix *m[4];
    char missing[400] = "";
    for (size_t i = 0; attn_suffixes[i]; i++)
        if (!(m[i] = layer_matrix(reg, mod, layer, attn_suffixes[i])))
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%sh%zu.%s",
                     *missing ? ", " : "", layer, attn_suffixes[i]);
    const es_matrix *pos = es_registry_matrix(reg, mod->name, "wpe");
    if (!pos)
        snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%swpe", *missing ? ", " : "");
    if (*missing)
        return es_fail(err, ES_E_NOTFOUND, "layer", "model '%s' lacks the matrices of attention layer %zu: %s",
                       mod->name, layer, missing);
    *out = (es_attn_layer){.layer = layer, .pos = pos, .ln_weight = m[0], .ln_bias = m[1], .qkv_weight = m[2],
                           .qkv_bias = m[3], .n_heads = n_heads, .eps = GPT2_LN_EPS};
    return 0;
}

/* The parameters every attention endpoint shares: model, queries, n_heads. */
typedef struct attn_req {
    const es_model *mod;
    size_t n_pos, q_start, q_stop, n_heads;
} attn_req;

/* The parameters every attention request shares: model (with a "wpe"), queries
 * and n_heads. ES_E_PARAM / ES_E_NOTFOUND naming them, ES_E_LIMIT "max_rows". */
static int attn_common(es_ctx *cx, attn_req *r, es_err *err)
{
    if (param_model(cx, &r->mod, err) < 0)
        return -1;
    const es_matrix *pos = es_registry_matrix(cx->reg, r->mod->name, "wpe");
    if (!pos)
        return es_fail(err, ES_E_NOTFOUND, "model", "model '%s' has no matrix 'wpe' (the positions)", r->mod->name);
    r->n_pos = es_matrix_items(pos);
    if (es_param_range(cx->query, "queries", r->n_pos, &r->q_start, &r->q_stop, err) < 0 ||
        es_param_size(cx->query, "n_heads", r->mod->n_heads ? r->mod->n_heads : GPT2_HEADS, 1, es_matrix_dim(pos),
                      NULL, &r->n_heads, err) < 0)
        return -1;
    if (r->q_stop > cx->app->limits.max_rows)
        return es_fail(err, ES_E_LIMIT, "max_rows", "queries up to %zu need %zu key positions, more than the "
                       "configured limit max_rows=%zu", r->q_stop, r->q_stop, cx->app->limits.max_rows);
    return 0;
}

/* {"id", "sha256"} of a matrix. */
static json_t *matrix_ref(const es_matrix *m)
{
    return json_pack("{s:s, s:s}", "id", m->id, "sha256", m->prov.sha256);
}

/* input members of an attention request over layer l. */
static void attn_input(json_t *input, const attn_req *r, const es_attn_layer *l)
{
    char queries[64];
    snprintf(queries, sizeof queries, "%zu:%zu", r->q_start, r->q_stop);
    json_object_set_new(input, "model", json_string(r->mod->name));
    json_object_set_new(input, "queries", json_string(queries));
    json_object_set_new(input, "n_heads", json_integer((json_int_t)r->n_heads));
    json_object_set_new(input, "eps", json_real(GPT2_LN_EPS));
    if (l)
        json_object_set_new(input, "matrices", json_pack("{s:o, s:o, s:o, s:o, s:o}", "pos", matrix_ref(l->pos),
                                                         "ln_weight", matrix_ref(l->ln_weight), "ln_bias",
                                                         matrix_ref(l->ln_bias), "qkv_weight",
                                                         matrix_ref(l->qkv_weight), "qkv_bias",
                                                         matrix_ref(l->qkv_bias)));
}

/* ETag key of a layer: the sha256 of its five matrices. Caller frees. */
static char *attn_layer_key(const es_attn_layer *l)
{
    return es_asprintf("%zu:%s,%s,%s,%s,%s", l->layer, l->pos->prov.sha256, l->ln_weight->prov.sha256,
                       l->ln_bias->prov.sha256, l->qkv_weight->prov.sha256, l->qkv_bias->prov.sha256);
}

/* es_precheck over the shared attention parameters, the layers' key and extra. */
static bool attn_precheck(es_ctx *cx, const attn_req *r, const char *layers_key, const char *extra)
{
    return es_precheck(cx, "model=%s|q=%zu:%zu|heads=%zu|%s|%s", r->mod->name, r->q_start, r->q_stop,
                           r->n_heads, layers_key, extra);
}

/* One head's scores: previous-token, self and mean distance. */
static json_t *render_head(es_jctx *jc, const es_attn_head *h)
{
    return json_pack("{s:I, s:I, s:o, s:o, s:o}", "layer", (json_int_t)h->layer, "head", (json_int_t)h->head, "prev",
                     es_jnum(jc, "prev", h->prev), "self", es_jnum(jc, "self", h->self), "distance",
                     es_jnum(jc, "distance", h->distance));
}

/* The required "layer" of an attention request, resolved. ES_E_PARAM naming
 * "layer" if absent or malformed; fails like attn_layer_of. */
static int attn_layer_param(es_ctx *cx, const attn_req *r, es_attn_layer *l, es_err *err)
{
    size_t layer;
    if (!es_query_get(cx->query, "layer"))
        return es_fail(err, ES_E_PARAM, "layer", "missing required parameter 'layer' (a layer index)");
    if (es_param_size(cx->query, "layer", 0, 0, MAX_LAYERS - 1, NULL, &layer, err) < 0)
        return -1;
    return attn_layer_of(cx->reg, r->mod, layer, r->n_heads, l, err);
}

/* Per head of one layer: mean attention to the previous position, to itself and
 * the mean attended distance over the query range. */
int es_api_attention(es_ctx *cx, es_err *err)
{
    attn_req r;
    es_attn_layer l;
    es_attn_scores *sc = NULL;
    if (attn_common(cx, &r, err) < 0 || attn_layer_param(cx, &r, &l, err) < 0)
        return -1;
    char *key = attn_layer_key(&l);
    bool settled = attn_precheck(cx, &r, key, "");
    free(key);
    if (settled)
        return 0;
    if (es_attn_scores_compute(&l, r.q_start, r.q_stop, &sc, err) < 0)
        return -1;
    es_jctx jc = {0};
    json_t *root = new_root(), *heads = json_array();
    attn_input(input_of(root), &r, &l);
    json_object_set_new(input_of(root), "layer", json_integer((json_int_t)l.layer));
    json_object_set_new(root, "d_head", json_integer((json_int_t)sc->d_head));
    for (size_t h = 0; h < sc->n_heads; h++)
        json_array_append_new(heads, render_head(&jc, &sc->heads[h]));
    json_object_set_new(root, "heads", heads);
    es_attn_scores_free(sc);
    return es_reply_json(cx, root, &jc, err);
}

/* Scores of every listed layer; fills scores[] (caller frees each, also after a
 * failure). Fails like attn_layer_of / es_attn_scores_compute. */
static int score_layers(const es_registry *reg, const attn_req *r, const size_t *layers, size_t n,
                        es_attn_scores **scores, es_err *err)
{
    for (size_t i = 0; i < n; i++) {
        es_attn_layer l;
        if (attn_layer_of(reg, r->mod, layers[i], r->n_heads, &l, err) < 0 ||
            es_attn_scores_compute(&l, r->q_start, r->q_stop, &scores[i], err) < 0)
            return -1;
    }
    return 0;
}

/* ETag key over every layer's matrices. Caller frees. */
static char *layers_key(const es_registry *reg, const attn_req *r, const size_t *layers, size_t n)
{
    char *key = es_strdup("");
    for (size_t i = 0; i < n; i++) {
        es_attn_layer l;
        if (attn_layer_of(reg, r->mod, layers[i], r->n_heads, &l, NULL) < 0)
            continue;
        char *one = attn_layer_key(&l), *joined = es_asprintf("%s;%s", key, one);
        free(one);
        free(key);
        key = joined;
    }
    return key;
}

/* All heads of every configured attention layer, ranked by previous-token score. */
int es_api_attention_ranking(es_ctx *cx, es_err *err)
{
    attn_req r;
    size_t layers[MAX_LAYERS], n;
    if (attn_common(cx, &r, err) < 0)
        return -1;
    n = model_layers(cx->reg, r.mod, attn_suffixes, layers);
    if (n == 0)
        return es_fail(err, ES_E_NOTFOUND, "model", "model '%s' has no attention layer (matrices h<i>.ln_1.weight, "
                       "h<i>.ln_1.bias, h<i>.c_attn, h<i>.c_attn.bias)", r.mod->name);
    char *key = layers_key(cx->reg, &r, layers, n);
    bool settled = attn_precheck(cx, &r, key, "ranking");
    free(key);
    if (settled)
        return 0;
    es_attn_scores **scores = es_calloc(n, sizeof *scores);
    es_attn_ranking *rank = NULL;
    int rc = -1;
    if (score_layers(cx->reg, &r, layers, n, scores, err) < 0 ||
        es_attn_rank((const es_attn_scores *const *)scores, n, &rank, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *root = new_root(), *list = json_array();
    attn_input(input_of(root), &r, NULL);
    json_object_set_new(input_of(root), "layers", es_jsizes(layers, n));
    for (size_t i = 0; i < rank->count; i++) {
        json_t *h = render_head(&jc, &rank->heads[i]);
        json_object_set_new(h, "rank", json_integer((json_int_t)i + 1));
        json_array_append_new(list, h);
    }
    json_object_set_new(root, "heads", list);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_attn_ranking_free(rank);
    for (size_t i = 0; i < n; i++)
        es_attn_scores_free(scores[i]);
    free(scores);
    return rc;
}

/* One head's causal attention pattern over the query range, binned. */
int es_api_attention_pattern(es_ctx *cx, es_err *err)
{
    attn_req r;
    es_attn_layer l;
    es_grid *g = NULL;
    size_t head, bins;
    const es_limits *lim = &cx->app->limits;
    if (attn_common(cx, &r, err) < 0 || attn_layer_param(cx, &r, &l, err) < 0)
        return -1;
    if (!es_query_get(cx->query, "head"))
        return es_fail(err, ES_E_PARAM, "head", "missing required parameter 'head' (0..%zu)", r.n_heads - 1);
    if (es_param_size(cx->query, "head", 0, 0, r.n_heads - 1, NULL, &head, err) < 0 ||
        es_param_size(cx->query, "bins", es_default_bins(lim), 1,
                      lim->max_bins, "max_bins", &bins, err) < 0)
        return -1;
    char *key = attn_layer_key(&l), extra[64];
    snprintf(extra, sizeof extra, "head=%zu|bins=%zu", head, bins);
    bool settled = attn_precheck(cx, &r, key, extra);
    free(key);
    if (settled)
        return 0;
    if (es_attn_pattern(&l, head, r.q_start, r.q_stop, bins, &g, err) < 0)
        return -1;
    es_jctx jc = {0};
    json_t *root = new_root();
    attn_input(input_of(root), &r, &l);
    json_object_set_new(input_of(root), "layer", json_integer((json_int_t)l.layer));
    json_object_set_new(input_of(root), "head", json_integer((json_int_t)head));
    json_object_set_new(input_of(root), "bins", json_integer((json_int_t)bins));
    es_render_grid(&jc, root, "values", g);
    es_grid_free(g);
    return es_reply_json(cx, root, &jc, err);
}

/* ---------------------------------------------------------------- RoPE relative property */

/* q and k: both given as comma lists of d numbers, or (neither given) the two rows
 * of a seeded Gaussian 2 x d matrix with singular values 1 and 1/2 (es_gen_gaussian,
 * parameter seed, default 0). ES_E_PARAM naming q, k or seed otherwise. */
static int rope_vectors(const es_query *q, size_t d, double **qv, double **kv, size_t *seed, bool *seeded,
                        es_err *err)
{
    bool given = es_query_get(q, "q") || es_query_get(q, "k");
    *seeded = !given;
    if (given) {
        if (es_query_get(q, "seed"))
            return es_fail(err, ES_E_PARAM, "seed", "give either q and k, or seed, not both");
        if (!es_query_get(q, "q") || !es_query_get(q, "k"))
            return es_fail(err, ES_E_PARAM, es_query_get(q, "q") ? "k" : "q", "q and k must be given together");
        if (es_param_doubles(q, "q", d, qv, err) < 0)
            return -1;
        if (es_param_doubles(q, "k", d, kv, err) == 0)
            return 0;
        free(*qv);
        return -1;
    }
    es_matrix *g;
    if (es_param_size(q, "seed", 0, 0, (size_t)UINT32_MAX, NULL, seed, err) < 0 ||
        es_gen_gaussian("rope/qk", 2, d, 1.0, 1.0, (uint64_t)*seed, &g, err) < 0)
        return -1;
    const size_t first = 0, second = 1;
    *qv = es_matrix_items_copy(g, &first, 1);
    *kv = es_matrix_items_copy(g, &second, 1);
    es_matrix_release(g);
    return 0;
}

/* Toeplitz score of S[m][n] = rot_m(q) . rot_n(k) over the positions of a RoPE
 * angle table: 1 up to rounding (the relative-position property). */
int es_api_rope_relative(es_ctx *cx, es_err *err)
{
    const es_matrix *rope;
    double *qv = NULL, *kv = NULL;
    size_t seed = 0;
    bool seeded;
    es_toeplitz *t = NULL;
    int rc = -1;
    if (es_param_matrix(cx->query, "matrix", cx->reg, &rope, err) < 0)
        return -1;
    if (rope->rows > cx->app->limits.max_rows)
        return es_fail(err, ES_E_LIMIT, "max_rows", "%s has %zu positions, more than the configured limit max_rows=%zu",
                       rope->id, rope->rows, cx->app->limits.max_rows);
    if (rope_vectors(cx->query, rope->cols, &qv, &kv, &seed, &seeded, err) < 0)
        return -1;
    char *text = es_query_text(cx->query);
    bool settled = es_precheck(cx, "%s@%s|%s", rope->id, rope->prov.sha256, text);
    free(text);
    if (settled) {
        rc = 0;
        goto done;
    }
    if (es_rope_relative(rope, "matrix", qv, kv, &t, NULL, err) < 0)
        goto done;
    es_jctx jc = {0};
    json_t *root = new_root(), *input = input_of(root);
    json_object_set_new(input, "matrix", json_pack("{s:s, s:s, s:I, s:I}", "id", rope->id, "sha256",
                                                   rope->prov.sha256, "n_positions", (json_int_t)rope->rows, "d",
                                                   (json_int_t)rope->cols));
    json_object_set_new(input, "seed", seeded ? json_integer((json_int_t)seed) : json_null());
    json_object_set_new(input, "q", es_jnums(&jc, "q", qv, rope->cols));
    json_object_set_new(input, "k", es_jnums(&jc, "k", kv, rope->cols));
    render_toeplitz(&jc, root, t);
    rc = es_reply_json(cx, root, &jc, err);
done:
    es_toeplitz_free(t);
    free(qv);
    free(kv);
    return rc;
}

/* ---------------------------------------------------------------- side by side */

static const es_analysis *const comparable[] = {&es_analysis_spectrum, &es_analysis_pca, &es_analysis_periodicity,
                                                &es_analysis_toeplitz, &es_analysis_outliers, NULL};

/* Parameters given one value per matrix (or one for all). */
static const char *const per_matrix[] = {"rows", "center", "average", NULL};

/* Refuse a shared parameter the chosen analysis does not take (k, gap, kind,
 * threshold) and center for analyses without centring. */
static int compare_check(const es_query *q, const es_analysis *a, es_err *err)
{
    static const char *const shared[] = {"k", "gap", "kind", "threshold", NULL};
    for (size_t i = 0; shared[i]; i++) {
        bool own = false;
        for (size_t j = 0; a->params[j]; j++)
            own = own || strcmp(a->params[j], shared[i]) == 0;
        if (!own && es_query_get(q, shared[i]))
            return es_fail(err, ES_E_PARAM, shared[i], "parameter '%s' does not apply to analysis=%s", shared[i],
                           a->name);
    }
    if (!a->with_center && es_query_get(q, "center"))
        return es_fail(err, ES_E_PARAM, "center", "analysis=%s takes no centring", a->name);
    return 0;
}

/* The query of matrix i of n: shared parameters copied, per-matrix lists split
 * (one value for all, or n values; an empty value means the default). */
static int compare_subquery(const es_query *q, size_t i, size_t n, es_query *sub, es_err *err)
{
    es_query_init(sub);
    for (size_t j = 0; j < q->n; j++) {
        const es_query_item *it = &q->items[j];
        if (strcmp(it->key, "matrices") == 0 || strcmp(it->key, "analysis") == 0)
            continue;
        bool listed = false;
        for (size_t p = 0; per_matrix[p]; p++)
            listed = listed || strcmp(it->key, per_matrix[p]) == 0;
        if (!listed) {
            es_query_add(sub, it->key, it->value);
            continue;
        }
        size_t count;
        char **items = es_split_commas(it->value, &count);
        if (count != 1 && count != n) {
            es_strv_free(items);
            es_query_free(sub);
            return es_fail(err, ES_E_PARAM, it->key, "%s lists %zu values; give one for all matrices or one per "
                           "matrix (%zu)", it->key, count, n);
        }
        const char *value = items[count == 1 ? 0 : i];
        if (*value)
            es_query_add(sub, it->key, value);
        es_strv_free(items);
    }
    return 0;
}

/* Prefix err's message with which matrix of the comparison failed. */
static void blame_matrix(es_err *err, size_t i, const char *id)
{
    if (!err)
        return;
    char *msg = es_asprintf("matrices[%zu] (%s): %s", i, id, err->message);
    snprintf(err->message, sizeof err->message, "%s", msg);
    free(msg);
}

/* The matrices of the comparison (ES_E_PARAM / ES_E_NOTFOUND naming "matrices"). */
static int compare_matrices(es_ctx *cx, const es_matrix **m, size_t *n, es_err *err)
{
    const char *text = es_query_get(cx->query, "matrices");
    if (!text)
        return es_fail(err, ES_E_PARAM, "matrices", "missing required parameter 'matrices' (model/matrix,...)");
    char **ids = es_split_commas(text, n);
    int rc = 0;
    if (*n > COMPARE_MAX)
        rc = es_fail(err, ES_E_PARAM, "matrices", "matrices lists %zu matrices, at most %d", *n, COMPARE_MAX);
    for (size_t i = 0; rc == 0 && i < *n; i++)
        rc = es_registry_lookup(cx->reg, ids[i], "matrices", &m[i], err);
    es_strv_free(ids);
    return rc;
}

/* One analysis over several matrices, each on its own rows / centring / averaging. */
int es_api_compare(es_ctx *cx, es_err *err)
{
    const char *names[sizeof comparable / sizeof *comparable];
    for (size_t i = 0; comparable[i]; i++)
        names[i] = comparable[i]->name;
    names[sizeof comparable / sizeof *comparable - 1] = NULL;
    const es_matrix *m[COMPARE_MAX + 1];
    size_t n, which;
    if (!es_query_get(cx->query, "analysis"))
        return es_fail(err, ES_E_PARAM, "analysis", "missing required parameter 'analysis'");
    if (es_param_choice(cx->query, "analysis", names, 0, &which, err) < 0 ||
        compare_check(cx->query, comparable[which], err) < 0 || compare_matrices(cx, m, &n, err) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) { /* every matrix's parameters, validated before queueing */
        es_query sub;
        if (compare_subquery(cx->query, i, n, &sub, err) < 0)
            return -1;
        int rc = es_one_estimate(cx->app, comparable[which], &sub, m[i], &cx->cost, err);
        es_query_free(&sub);
        if (rc < 0) {
            blame_matrix(err, i, m[i]->id);
            return -1;
        }
    }
    char *text = es_query_text(cx->query), *shas = es_strdup("");
    for (size_t i = 0; i < n; i++) {
        char *joined = es_asprintf("%s;%s@%s", shas, m[i]->id, m[i]->prov.sha256);
        free(shas);
        shas = joined;
    }
    bool settled = es_precheck(cx, "%s|%s", text, shas);
    free(text);
    free(shas);
    if (settled)
        return 0;
    es_jctx jc = {0};
    json_t *root = new_root(), *results = json_array(), *ids = json_array();
    json_object_set_new(root, "results", results);
    for (size_t i = 0; i < n; i++) {
        es_query sub;
        json_t *one;
        json_array_append_new(ids, json_string(m[i]->id));
        if (compare_subquery(cx->query, i, n, &sub, err) < 0) {
            json_decref(ids);
            json_decref(root);
            return -1;
        }
        int rc = es_one_run(cx->app, comparable[which], &sub, m[i], &jc, &one, err);
        es_query_free(&sub);
        if (rc < 0) {
            blame_matrix(err, i, m[i]->id);
            json_decref(ids);
            json_decref(root);
            return -1;
        }
        json_array_append_new(results, one);
    }
    json_object_set_new(input_of(root), "analysis", json_string(comparable[which]->name));
    json_object_set_new(input_of(root), "matrices", ids);
    json_object_set_new(root, "warnings", es_axis_warnings(NULL, m, n));
    return es_reply_json(cx, root, &jc, err);
}
