/* The hand-written handlers of the irregular analyses: the per-layer alignment
 * table, positional-only attention (per head, ranking, pattern), the RoPE
 * relative property and side-by-side comparison. Their descriptors (analyses.c)
 * carry the specs defined here; each handler parses what the spec cannot
 * express (a model, a position range, vectors, a list of matrices), then
 * es_spec_parse for the rest, keys its request with es_spec_key plus the sha256
 * of the data it reads, and passes the gate (es_precheck) like every analysis.
 *
 * Defaults (documented in openapi.yaml): alignment/layers k 10, w_center none;
 * attention queries all positions, n_heads the model's configured n_heads, else
 * 12, eps 1e-5 (GPT-2), pattern bins 64; rope seed 0. */
#include "http/http.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN_DEFAULT_K 10
#define GPT2_HEADS 12
#define GPT2_LN_EPS 1e-5
/* At most this many layers are discovered in one model. */
#define MAX_LAYERS ES_MAX_LAYERS
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

/* The gate of a hand-written analysis: the spec's key (every parameter) plus
 * data, what identifies the data read (sha256s). */
static bool spec_precheck(es_ctx *cx, const es_pspec *spec, const void *params, const char *data)
{
    es_buf b;
    es_buf_init(&b, 256);
    es_buf_printf(&b, "data=%s", data);
    es_spec_key(spec, cx->query, params, &b);
    bool settled = es_precheck(cx, "%s", b.s);
    free(b.s);
    return settled;
}

static const char *const centers[] = {"none", "columns", "rows", NULL}; /* es_centering order */

/* ---------------------------------------------------------------- alignment per layer */

const es_pspec es_layers_spec[] = {
    {.name = "model", .kind = ES_P_TEXT, .required = true},
    {.name = "r", .kind = ES_P_TEXT, .required = true},
    {.name = "r_rows", .kind = ES_P_TEXT, .in_data = true},
    {.name = "r_exclude", .kind = ES_P_TEXT, .in_data = true},
    {.name = "r_center", .kind = ES_P_TEXT, .in_data = true},
    {.name = "r_average", .kind = ES_P_TEXT, .in_data = true},
    {.name = "r_average_order", .kind = ES_P_TEXT, .in_data = true},
    {.name = "r_average_mode", .kind = ES_P_TEXT, .in_data = true},
    {.name = "r_head", .kind = ES_P_TEXT, .in_data = true},
    {.name = "k", .kind = ES_P_SIZE, .def = ALIGN_DEFAULT_K, .min = 1, .limit = "max_k", .bound = ES_BOUND_RANK,
     .offset = ES_FIELD(es_layers_params, k)},
    {.name = "w_center", .kind = ES_P_CHOICE, .choices = centers, .def = ES_CENTER_NONE,
     .offset = ES_FIELD(es_layers_params, w_center)},
    /* checked against each weight by es_one_parse (the model's n_heads); absent: SIZE_MAX, no head */
    {.name = "w_head", .kind = ES_P_SIZE, .preset = true, .no_echo = true, .offset = ES_FIELD(es_layers_params, w_head)},
    {0}};

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

/* Weight w of the model as compared with r: its w_ parameters (w_center,
 * w_head) into *out (es_one_free it, also after a failure). Fails like
 * es_check_comparable and es_one_parse. */
static int layer_weight(es_ctx *cx, const es_one *ref, const es_matrix *w, es_one *out, es_err *err)
{
    *out = (es_one){0};
    if (es_check_comparable(ref->m, w, "model", err) < 0)
        return -1;
    return es_one_parse(cx->app, cx->reg, cx->query, "w_", w, true, ES_CENTER_NONE, out, err);
}

/* Check every weight of the table before the gate (a bad one is a 400 from
 * the HTTP thread) and add the estimate to cx->cost: r's decomposition, each
 * weight's and its vectors against r's top k. Fails like layer_weight. */
static int layers_estimate(es_ctx *cx, const es_model *mod, const size_t *layers, size_t n, const es_one *ref,
                           size_t k, es_err *err)
{
    cx->cost += es_cost_svd(ref->sel.n, es_matrix_dim(ref->m));
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; qkvo[j]; j++) {
            es_one one;
            int rc = layer_weight(cx, ref, layer_matrix(cx->reg, mod, layers[i], qkvo[j]), &one, err);
            if (rc == 0) {
                size_t d = es_matrix_dim(one.m);
                cx->cost += es_cost_svd(one.sel.n, d) + es_cost_products(d, k, es_one_rank(&one));
            }
            es_one_free(&one);
            if (rc < 0)
                return -1;
        }
    return 0;
}

/* One layer's row of the table: per weight its id, sha256 and top-m means. */
static int alignment_layer_row(es_ctx *cx, const es_model *mod, size_t layer, const es_one *ref,
                               const es_svd *rsvd, size_t k, es_jctx *jc, json_t *row, es_err *err)
{
    for (size_t i = 0; qkvo[i]; i++) {
        const es_matrix *w = layer_matrix(cx->reg, mod, layer, qkvo[i]);
        es_one one;
        es_svd *svd = NULL;
        es_alignment *al = NULL;
        int rc = layer_weight(cx, ref, w, &one, err);
        if (rc == 0)
            rc = es_one_svd(cx->app, &one, &svd, err);
        if (rc == 0)
            rc = es_alignment_compute(svd, rsvd, k, 1, 1, 0, &al, err);
        if (rc == 0)
            json_object_set_new(row, qkvo[i], json_pack("{s:s, s:s, s:o}", "id", w->id, "sha256", w->prov.sha256,
                                                        "top_mean", es_render_top_means(jc, al)));
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
    size_t layers[MAX_LAYERS], n_layers;
    es_layers_params p = {.w_head = SIZE_MAX};
    int rc = -1;
    if (param_model(cx, &mod, err) < 0 || es_param_matrix(cx->query, "r", cx->reg, &rm, err) < 0 ||
        es_one_parse(cx->app, cx->reg, cx->query, "r_", rm, true, ES_CENTER_NONE, &ref, err) < 0)
        goto done;
    es_pctx pc = {.m = {ref.m}, .rank = {es_one_rank(&ref)}, .lim = &cx->app->limits};
    if (es_spec_parse(es_layers_spec, cx->query, &pc, &p, err) < 0)
        goto done;
    size_t k = p.k;
    n_layers = model_layers(cx->reg, mod, qkvo, layers);
    if (n_layers == 0) {
        es_fail(err, ES_E_NOTFOUND, "model", "model '%s' has no layer with matrices h<i>.q, h<i>.k, h<i>.v and h<i>.o",
                mod->name);
        goto done;
    }
    if (layers_estimate(cx, mod, layers, n_layers, &ref, k, err) < 0)
        goto done;
    char *key = es_one_key(&ref);
    bool settled = spec_precheck(cx, es_layers_spec, &p, key);
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
    json_object_set_new(input, "w_center", json_string(centers[p.w_center]));
    if (p.w_head != SIZE_MAX)
        json_object_set_new(input, "w_head", json_integer((json_int_t)p.w_head));
    json_object_set_new(root, "baseline", es_jnum(&jc, "baseline", (double)k / (double)rsvd->d));
    json_t *warnings = es_axis_warnings(NULL, &ref.source, 1);
    for (size_t i = 0; i < n_layers; i++)
        for (size_t j = 0; qkvo[j]; j++) {
            const es_matrix *w = layer_matrix(cx->reg, mod, layers[i], qkvo[j]);
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

/* The attention endpoints' parameters: model, queries and n_heads shared, then
 * layer (not for the ranking), head and bins (pattern). */
#define ATTN_SHARED_SPEC                                                                                   \
    {.name = "model", .kind = ES_P_TEXT, .required = true},                                                \
    {.name = "queries", .kind = ES_P_RANGE, .bound = ES_BOUND_ITEMS, .offset = ES_FIELD(es_attention_params, queries)}, \
    {.name = "n_heads", .kind = ES_P_SIZE, .preset = true, .min = 1, .bound = ES_BOUND_DIM,                 \
     .offset = ES_FIELD(es_attention_params, n_heads)}
#define ATTN_LAYER_SPEC                                                                                    \
    {.name = "layer", .kind = ES_P_SIZE, .required = true, .max = MAX_LAYERS - 1,                           \
     .offset = ES_FIELD(es_attention_params, layer)}
const es_pspec es_attention_spec[] = {ATTN_SHARED_SPEC, ATTN_LAYER_SPEC, {0}};
const es_pspec es_ranking_spec[] = {ATTN_SHARED_SPEC, {0}};
const es_pspec es_pattern_spec[] = {
    ATTN_SHARED_SPEC, ATTN_LAYER_SPEC,
    {.name = "head", .kind = ES_P_SIZE, .required = true, .bound = ES_BOUND_FIELD,
     .bound_field = ES_FIELD(es_attention_params, n_heads), .offset = ES_FIELD(es_attention_params, head)},
    {.name = "bins", .kind = ES_P_SIZE, .def = ES_DEFAULT_BINS, .min = 0, .limit = "max_bins", /* 0: full */
     .offset = ES_FIELD(es_attention_params, bins)},
    {0}};

/* An attention request: its model, query range and spec'd parameters. */
typedef struct attn_req {
    const es_model *mod;
    const es_pspec *spec;
    size_t n_pos, d, q_start, q_stop, n_heads;
    es_attention_params p;
} attn_req;

/* The model (with a "wpe"), the query range, then the spec's parameters
 * (n_heads up to the positions' dimension, layer, head, bins). ES_E_PARAM /
 * ES_E_NOTFOUND naming them, ES_E_LIMIT "max_rows" / "max_bins". */
static int attn_common(es_ctx *cx, const es_pspec *spec, attn_req *r, es_err *err)
{
    *r = (attn_req){.spec = spec};
    if (param_model(cx, &r->mod, err) < 0)
        return -1;
    const es_matrix *pos = es_registry_matrix(cx->reg, r->mod->name, "wpe");
    if (!pos)
        return es_fail(err, ES_E_NOTFOUND, "model", "model '%s' has no matrix 'wpe' (the positions)", r->mod->name);
    r->n_pos = es_matrix_items(pos);
    r->d = es_matrix_dim(pos);
    es_pctx pc = {.m = {pos}, .lim = &cx->app->limits};
    r->p.n_heads = r->mod->n_heads ? r->mod->n_heads : GPT2_HEADS; /* the default (a .preset parameter) */
    if (es_spec_parse(spec, cx->query, &pc, &r->p, err) < 0)
        return -1;
    r->q_start = r->p.queries[0];
    r->q_stop = r->p.queries[1];
    r->n_heads = r->p.n_heads;
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

/* The gate over the spec's parameters, the resolved query range and the keys
 * of its n_layers layers, with their estimated cost added to cx->cost. */
static bool attn_precheck(es_ctx *cx, const attn_req *r, const char *layers_key, size_t n_layers)
{
    cx->cost += (double)n_layers * es_cost_attention_layer(r->q_start, r->q_stop, r->d, r->n_heads);
    return spec_precheck(cx, r->spec, &r->p, layers_key);
}

/* The heads as a table: indexed by head (one layer) with columns layer, prev,
 * self, distance, or by rank (1 = most previous-token-like) with the head too. */
static void heads_table(es_out *out, bool ranked, const es_attn_head *heads, size_t n)
{
    static const char *const names[] = {"layer", "head", "prev", "self", "distance"};
    size_t cols = ranked ? 5 : 4;
    es_table *t = es_out_table(out, "heads", ranked ? "rank" : "head", "attention share / positions", n, cols);
    es_table_columns(t, ranked ? names : (const char *const[]){"layer", "prev", "self", "distance"}, NULL, 0);
    for (size_t i = 0; i < n; i++) {
        double *row = t->values + i * cols;
        t->index_values[i] = ranked ? (double)(i + 1) : (double)heads[i].head;
        *row++ = (double)heads[i].layer;
        if (ranked)
            *row++ = (double)heads[i].head;
        row[0] = heads[i].prev;
        row[1] = heads[i].self;
        row[2] = heads[i].distance;
    }
}

/* One head's scores: previous-token, self and mean distance. */
static json_t *render_head(es_jctx *jc, const es_attn_head *h)
{
    return json_pack("{s:I, s:I, s:o, s:o, s:o}", "layer", (json_int_t)h->layer, "head", (json_int_t)h->head, "prev",
                     es_jnum(jc, "prev", h->prev), "self", es_jnum(jc, "self", h->self), "distance",
                     es_jnum(jc, "distance", h->distance));
}

/* The request's layer, resolved; fails like attn_layer_of. */
static int attn_layer_param(es_ctx *cx, const attn_req *r, es_attn_layer *l, es_err *err)
{
    return attn_layer_of(cx->reg, r->mod, r->p.layer, r->n_heads, l, err);
}

/* Per head of one layer: mean attention to the previous position, to itself and
 * the mean attended distance over the query range. */
int es_api_attention(es_ctx *cx, es_err *err)
{
    attn_req r;
    es_attn_layer l;
    es_attn_scores *sc = NULL;
    if (attn_common(cx, es_attention_spec, &r, err) < 0 || attn_layer_param(cx, &r, &l, err) < 0)
        return -1;
    char *key = attn_layer_key(&l);
    bool settled = attn_precheck(cx, &r, key, 1);
    free(key);
    if (settled)
        return 0;
    if (es_attn_scores_compute(&l, r.q_start, r.q_stop, &sc, err) < 0)
        return -1;
    es_out out = {.root = new_root()};
    json_t *root = out.root, *heads = json_array();
    attn_input(input_of(root), &r, &l);
    json_object_set_new(input_of(root), "layer", json_integer((json_int_t)l.layer));
    json_object_set_new(root, "d_head", json_integer((json_int_t)sc->d_head));
    for (size_t h = 0; h < sc->n_heads; h++)
        json_array_append_new(heads, render_head(&out.jc, &sc->heads[h]));
    json_object_set_new(root, "heads", heads);
    heads_table(&out, false, sc->heads, sc->n_heads);
    es_attn_scores_free(sc);
    return es_reply_out(cx, &out, err);
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
    if (attn_common(cx, es_ranking_spec, &r, err) < 0)
        return -1;
    n = model_layers(cx->reg, r.mod, attn_suffixes, layers);
    if (n == 0)
        return es_fail(err, ES_E_NOTFOUND, "model", "model '%s' has no attention layer (matrices h<i>.ln_1.weight, "
                       "h<i>.ln_1.bias, h<i>.c_attn, h<i>.c_attn.bias)", r.mod->name);
    char *key = layers_key(cx->reg, &r, layers, n);
    bool settled = attn_precheck(cx, &r, key, n);
    free(key);
    if (settled)
        return 0;
    es_attn_scores **scores = es_calloc(n, sizeof *scores);
    es_attn_ranking *rank = NULL;
    int rc = -1;
    if (score_layers(cx->reg, &r, layers, n, scores, err) < 0 ||
        es_attn_rank((const es_attn_scores *const *)scores, n, &rank, err) < 0)
        goto done;
    es_out out = {.root = new_root()};
    json_t *root = out.root, *list = json_array();
    attn_input(input_of(root), &r, NULL);
    json_object_set_new(input_of(root), "layers", es_jsizes(layers, n));
    for (size_t i = 0; i < rank->count; i++) {
        json_t *h = render_head(&out.jc, &rank->heads[i]);
        json_object_set_new(h, "rank", json_integer((json_int_t)i + 1));
        json_array_append_new(list, h);
    }
    json_object_set_new(root, "heads", list);
    heads_table(&out, true, rank->heads, rank->count);
    rc = es_reply_out(cx, &out, err);
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
    if (attn_common(cx, es_pattern_spec, &r, err) < 0 || attn_layer_param(cx, &r, &l, err) < 0)
        return -1;
    size_t head = r.p.head, bins = r.p.bins;
    if (bins == 0 && es_check_cells(&cx->app->limits, r.q_stop - r.q_start, r.q_stop, err) < 0)
        return -1; /* refused before the gate: never queued */
    char *key = attn_layer_key(&l);
    cx->cost += es_cost_grid(bins, r.q_stop - r.q_start, r.q_stop);
    bool settled = attn_precheck(cx, &r, key, 1);
    free(key);
    if (settled)
        return 0;
    if (es_attn_pattern(&l, head, r.q_start, r.q_stop, bins, &g, err) < 0)
        return -1;
    es_out out = {.root = new_root()};
    json_t *root = out.root;
    attn_input(input_of(root), &r, &l);
    json_object_set_new(input_of(root), "layer", json_integer((json_int_t)l.layer));
    json_object_set_new(input_of(root), "head", json_integer((json_int_t)head));
    json_object_set_new(input_of(root), "bins", json_integer((json_int_t)bins));
    es_render_grid(&out.jc, root, "values", g);
    es_out_grid(&out, "values", "mean attention weight per bin", g, "key_");
    es_grid_free(g);
    return es_reply_out(cx, &out, err);
}

/* ---------------------------------------------------------------- RoPE relative property */

const es_pspec es_rope_spec[] = {
    {.name = "matrix", .kind = ES_P_TEXT, .required = true},
    {.name = "q", .kind = ES_P_TEXT},
    {.name = "k", .kind = ES_P_TEXT},
    {.name = "seed", .kind = ES_P_SIZE, .max = (double)UINT32_MAX, .offset = ES_FIELD(es_rope_params, seed)},
    {0}};

/* q and k: both given as comma lists of d numbers, or (neither given) the two rows
 * of a seeded Gaussian 2 x d matrix with singular values 1 and 1/2 (es_gen_gaussian,
 * parameter seed, default 0, parsed by the spec). ES_E_PARAM naming q, k or seed otherwise. */
static int rope_vectors(const es_query *q, size_t d, size_t seed, double **qv, double **kv, bool *seeded,
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
    if (es_gen_gaussian("rope/qk", 2, d, 1.0, 1.0, (uint64_t)seed, &g, err) < 0)
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
    es_rope_params p = {0};
    bool seeded;
    es_toeplitz *t = NULL;
    int rc = -1;
    if (es_param_matrix(cx->query, "matrix", cx->reg, &rope, err) < 0)
        return -1;
    if (rope->rows > cx->app->limits.max_rows)
        return es_fail(err, ES_E_LIMIT, "max_rows", "%s has %zu positions, more than the configured limit max_rows=%zu",
                       rope->id, rope->rows, cx->app->limits.max_rows);
    es_pctx pc = {.m = {rope}, .lim = &cx->app->limits};
    if (es_spec_parse(es_rope_spec, cx->query, &pc, &p, err) < 0 ||
        rope_vectors(cx->query, rope->cols, p.seed, &qv, &kv, &seeded, err) < 0)
        return -1;
    char *data = es_asprintf("%s@%s", rope->id, rope->prov.sha256);
    /* S = every rotated q against every rotated k, its diagonals out */
    cx->cost += es_cost_products(rope->cols, rope->rows, rope->rows) + ES_BYTES_PER_NUMBER * 2.0 * (double)rope->rows;
    bool settled = spec_precheck(cx, es_rope_spec, &p, data);
    free(data);
    if (settled) {
        rc = 0;
        goto done;
    }
    if (es_rope_relative(rope, "matrix", qv, kv, &t, NULL, err) < 0)
        goto done;
    es_out out = {.root = new_root()};
    es_jctx *jc = &out.jc;
    json_t *root = out.root, *input = input_of(root);
    json_object_set_new(input, "matrix", json_pack("{s:s, s:s, s:I, s:I}", "id", rope->id, "sha256",
                                                   rope->prov.sha256, "n_positions", (json_int_t)rope->rows, "d",
                                                   (json_int_t)rope->cols));
    json_object_set_new(input, "seed", seeded ? json_integer((json_int_t)p.seed) : json_null());
    json_object_set_new(input, "q", es_jnums(jc, "q", qv, rope->cols));
    json_object_set_new(input, "k", es_jnums(jc, "k", kv, rope->cols));
    es_render_toeplitz(jc, root, t);
    es_out_toeplitz(&out, t);
    rc = es_reply_out(cx, &out, err);
done:
    es_toeplitz_free(t);
    free(qv);
    free(kv);
    return rc;
}

/* ---------------------------------------------------------------- side by side */

/* compare's own parameters; it also accepts every parameter of the comparable
 * analyses (.gathers_comparable), checked against the chosen one here. */
const es_pspec es_compare_spec[] = {
    {.name = "matrices", .kind = ES_P_TEXT, .required = true},
    {.name = "analysis", .kind = ES_P_TEXT, .required = true},
    {.name = "rows", .kind = ES_P_TEXT},
    {.name = "center", .kind = ES_P_TEXT},
    {.name = "average", .kind = ES_P_TEXT},
    {0}};

/* Parameters given one value per matrix (or one for all). */
static const char *const per_matrix[] = {"rows", "center", "average", NULL};

/* Is name a parameter of analysis a's own spec? */
static bool in_spec(const es_analysis *a, const char *name)
{
    for (const es_pspec *p = a->spec; p->name; p++)
        if (strcmp(p->name, name) == 0)
            return true;
    return false;
}

/* The comparable analysis named by "analysis": ES_E_PARAM naming it (listing the
 * comparable ones from the table) if unknown or not comparable. */
static int compare_analysis(const es_query *q, const es_analysis **out, es_err *err)
{
    const char *name = es_query_get(q, "analysis");
    const es_analysis *a = name ? es_analysis_find(name) : NULL;
    if (a && a->comparable) {
        *out = a;
        return 0;
    }
    es_buf names;
    es_buf_init(&names, 64);
    for (size_t i = 0; es_analyses[i]; i++)
        if (es_analyses[i]->comparable)
            es_buf_printf(&names, "%s%s", names.len ? ", " : "", es_analyses[i]->name);
    int rc = es_fail(err, ES_E_PARAM, "analysis", "analysis='%.64s': expected one of: %s", name ? name : "",
                     names.s);
    free(names.s);
    return rc;
}

/* Refuse a parameter of another comparable analysis that the chosen one does
 * not take, and center for analyses without centring. */
static int compare_check(const es_query *q, const es_analysis *a, es_err *err)
{
    for (size_t i = 0; i < q->n; i++) {
        const char *key = q->items[i].key;
        bool own = in_spec(a, key) || in_spec(es_analysis_find("compare"), key);
        if (!own)
            return es_fail(err, ES_E_PARAM, key, "parameter '%s' does not apply to analysis=%s", key, a->name);
    }
    if (!a->center_param && es_query_get(q, "center"))
        return es_fail(err, ES_E_PARAM, "center", "analysis=%s takes no centring", a->name);
    return 0;
}

/* One comparable analysis a on matrix m under the sub-query q: its body
 * {"input": ..., results} into *out. Fails like es_run_parse / es_run_fill. */
static int compare_one(es_ctx *cx, const es_analysis *a, const es_query *q, const es_matrix *m, es_jctx *jc,
                       json_t **out, es_err *err)
{
    es_run run;
    es_out o = {0};
    int rc = es_run_parse(cx->app, cx->reg, a, q, m, &run, err) < 0 ? -1 : es_run_fill(&run, q, &o, err);
    es_run_free(&run);
    if (o.jc.bad_field && !jc->bad_field)
        jc->bad_field = o.jc.bad_field;
    *out = o.root;
    o.root = NULL; /* the body is the caller's; the tables are not needed */
    es_out_free(&o);
    return rc;
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

/* Parse every matrix's request before queueing (so a bad one is a 400 from the
 * HTTP thread) and add their estimated costs to cx->cost. */
static int compare_estimate(es_ctx *cx, const es_analysis *a, const es_matrix *const *m, size_t n, es_err *err)
{
    for (size_t i = 0; i < n; i++) {
        es_query sub;
        es_run run;
        if (compare_subquery(cx->query, i, n, &sub, err) < 0)
            return -1;
        int rc = es_run_parse(cx->app, cx->reg, a, &sub, m[i], &run, err);
        if (rc == 0)
            cx->cost += es_cost_run(&run);
        es_run_free(&run);
        es_query_free(&sub);
        if (rc < 0) {
            blame_matrix(err, i, m[i]->id);
            return -1;
        }
    }
    return 0;
}

/* One analysis over several matrices, each on its own rows / centring / averaging. */
int es_api_compare(es_ctx *cx, es_err *err)
{
    const es_matrix *m[COMPARE_MAX + 1];
    const es_analysis *a = NULL;
    size_t n;
    if (!es_query_get(cx->query, "analysis"))
        return es_fail(err, ES_E_PARAM, "analysis", "missing required parameter 'analysis'");
    if (compare_analysis(cx->query, &a, err) < 0 || compare_check(cx->query, a, err) < 0 ||
        compare_matrices(cx, m, &n, err) < 0 || compare_estimate(cx, a, m, n, err) < 0)
        return -1;
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
        int rc = compare_one(cx, a, &sub, m[i], &jc, &one, err);
        es_query_free(&sub);
        if (rc < 0) {
            blame_matrix(err, i, m[i]->id);
            json_decref(ids);
            json_decref(root);
            return -1;
        }
        json_array_append_new(results, one);
    }
    json_object_set_new(input_of(root), "analysis", json_string(a->name));
    json_object_set_new(input_of(root), "matrices", ids);
    json_object_set_new(root, "warnings", es_axis_warnings(NULL, m, n));
    return es_reply_json(cx, root, &jc, err);
}
