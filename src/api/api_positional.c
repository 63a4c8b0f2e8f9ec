/* The hand-written handlers of the irregular analyses: the per-layer alignment
 * table, positional-only attention (per head, ranking, pattern), the RoPE
 * relative property and side-by-side comparison. Their descriptors (src/api/analyses/)
 * carry the specs defined here; each handler parses what the spec cannot
 * express (a model, a position range, vectors, a list of matrices), then
 * es_spec_parse for the rest, and answers through the gate helper every
 * analysis uses (es_gate_answer): its key is es_spec_key plus what identifies
 * the data it reads (compare: each matrix's es_run_key), and its fill function
 * returns the typed result (es_out: the JSON document and named tables) that
 * the generic renderers turn into JSON, column JSON, CSV or NPY. No handler
 * renders a reply itself.
 *
 * Defaults (documented in openapi.yaml): alignment/layers k 10, w_center none;
 * attention queries all positions, n_heads the model's configured n_heads, else
 * 12, eps 1e-5 (GPT-2), pattern bins 64; rope seed 0. */
#include "embedscope/cost.h"
#include "embedscope/descriptor.h"
#include "embedscope/format.h"
#include "embedscope/params.h"
#include "embedscope/render.h"
#include "embedscope/route.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The gate and answer of a hand-written analysis (es_gate_answer): its key is
 * data, what identifies the data read (sha256s, selections; consumed; NULL
 * while an averaged copy is not built: no key yet), then every parameter of
 * the spec (es_spec_key). Fails like es_gate_answer. */
static int spec_answer(es_ctx *cx, const es_pspec *spec, const void *params, char *data, es_fill_fn fill,
                       void *arg, es_err *err)
{
    if (!data)
        return es_gate_answer(cx, NULL, fill, arg, err);
    es_buf b;
    es_buf_init(&b, 256);
    es_buf_printf(&b, "data=%s", data);
    free(data);
    es_spec_key(spec, cx->query, params, &b);
    return es_gate_answer(cx, b.s, fill, arg, err);
}

/* The most a layer's object takes in the JSON document of alignment/layers
 * (layers_out): q, k, v, o each with its id (a model name and a matrix name),
 * sha256 and n_top {m, mean} pairs. */
#define LAYER_JSON_ROW(n_top) ((double)N_QKVO * (2.0 * ES_NAME_MAX + 1 + 64 + 48 + (double)(n_top) * 64.0) + 32.0)

/* spec_answer for a reply whose tables plan describes: its size checked
 * first, before any work (after the memory check, as for a table entry: that
 * refuses whatever the format). cx->cost holds the request's prediction.
 * Fails like es_check_planned_size or spec_answer. */
static int planned_answer(es_ctx *cx, const es_out_plan *plan, const es_pspec *spec, const void *params, char *data,
                          es_fill_fn fill, void *arg, es_err *err)
{
    if (es_check_memory(cx, err) == 0 && es_check_planned_size(cx, plan, err) < 0) {
        free(data);
        return -1;
    }
    return spec_answer(cx, spec, params, data, fill, arg, err);
}

/* A hand-written request handed to the compute thread with its deferral: a
 * copy of its request struct (req, which the copy now owns: release frees what
 * it holds; NULL: nothing), the key's data, its spec, params (inside req) and fill. */
typedef struct spec_parsed {
    es_parsed base;
    void *req;
    void (*release)(void *req);
    size_t params_at; /* params' offset in req */
    const es_pspec *spec;
    char *data;
    es_fill_fn fill;
} spec_parsed;

static void spec_parsed_free(es_parsed *p)
{
    spec_parsed *sp = (spec_parsed *)p;
    if (sp->release)
        sp->release(sp->req);
    free(sp->req);
    free(sp->data);
    free(sp);
}

/* The compute side: the gate and the answer, from the request as parsed. */
static int spec_resume(es_ctx *cx, es_parsed *p, es_err *err)
{
    spec_parsed *sp = (spec_parsed *)p;
    return spec_answer(cx, sp->spec, (char *)sp->req + sp->params_at, es_strdup(sp->data), sp->fill, sp->req, err);
}

/* planned_answer for the request req (size bytes, params inside it), handed to
 * the compute thread when the gate defers it: true in *handed when it was
 * (what req holds is then the job's: the caller must not release it). */
static int handed_answer(es_ctx *cx, const es_out_plan *plan, const es_pspec *spec, const void *params, char *data,
                         es_fill_fn fill, void *req, size_t size, void (*release)(void *), bool *handed,
                         es_err *err)
{
    char *key = es_strdup(data);
    int rc = planned_answer(cx, plan, spec, params, data, fill, req, err);
    spec_parsed *sp = es_calloc(1, sizeof *sp);
    *sp = (spec_parsed){{spec_resume, spec_parsed_free}, es_malloc(size), release,
                        (size_t)((const char *)params - (const char *)req), spec, key, fill};
    memcpy(sp->req, req, size);
    *handed = rc == 0 && es_parsed_hand_over(cx, &sp->base);
    if (!*handed) {
        sp->release = NULL; /* the caller's still */
        spec_parsed_free(&sp->base);
    }
    return rc;
}

/* ---------------------------------------------------------------- alignment per layer */

const es_pspec es_layers_spec[] = {
    {.name = "model", .kind = ES_P_TEXT, .required = true},
    {.name = "r", .kind = ES_P_TEXT, .required = true}, /* its selection r_rows, ...: the descriptor's operand */
    {.name = "k", .kind = ES_P_SIZE, .def = ES_ALIGN_DEFAULT_K, .min = 1, .limit = "max_k", .bound = ES_BOUND_RANK,
     .offset = ES_FIELD(es_layers_params, k)},
    {.name = "w_center", .kind = ES_P_CHOICE, .choices = es_centering_names, .def = ES_CENTER_NONE,
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

#define N_QKVO 4

/* Weight w of the model as compared with r: its w_ parameters (w_center,
 * w_head) into *out (es_one_free it, also after a failure). Fails like
 * es_check_comparable and es_one_parse. */
static int layer_weight(es_ctx *cx, const es_one *ref, const es_matrix *w, es_one *out, es_err *err)
{
    *out = (es_one){0};
    if (es_check_comparable(ref->m, w, "model", err) < 0)
        return -1;
    return es_one_parse(cx->reg, cx->query, "w_", w, true, ES_CENTER_NONE, out, err);
}

/* Check every weight of the table before the gate (a bad one is a 400 from
 * the HTTP thread), add the estimate to cx->cost: r's decomposition, each
 * weight's and its vectors against r's top k, and return in *n_top the number
 * of top-m means every weight has (its rank's es_alignment_summary_count, the
 * smallest: layers_n_top once computed). Fails like layer_weight. */
static int layers_estimate(es_ctx *cx, const es_model *mod, const size_t *layers, size_t n, const es_one *ref,
                           size_t k, size_t *n_top, es_err *err)
{
    es_cost_svd(&cx->cost, ref->sel.n, es_matrix_dim(ref->m));
    *n_top = SIZE_MAX;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; qkvo[j]; j++) {
            es_one one;
            int rc = layer_weight(cx, ref, layer_matrix(cx->reg, mod, layers[i], qkvo[j]), &one, err);
            if (rc == 0) {
                size_t d = es_matrix_dim(one.m), tops = es_alignment_summary_count(es_one_rank(&one));
                es_cost_svd(&cx->cost, one.sel.n, d);
                es_cost_products(&cx->cost, d, k, es_one_rank(&one));
                *n_top = tops < *n_top ? tops : *n_top;
            }
            es_one_free(&one);
            if (rc < 0)
                return -1;
        }
    return 0;
}

/* A per-layer table request: the model, its layers with all of q, k, v, o,
 * the reference selection and the spec'd parameters; then each weight's
 * alignment with the reference (al[layer index * N_QKVO + weight]). */
typedef struct layers_req {
    es_ctx *cx;
    const es_model *mod;
    size_t layers[MAX_LAYERS], n_layers;
    es_one ref;
    es_svd *rsvd;
    es_layers_params p;
    size_t n_top; /* planned: the top-m means every weight has */
    es_alignment **al;
} layers_req;

/* Release what the request holds (r itself is the caller's). Never fails. */
static void layers_free(layers_req *r)
{
    for (size_t i = 0; r->al && i < r->n_layers * N_QKVO; i++)
        es_alignment_free(r->al[i]);
    free(r->al);
    es_svd_release(r->rsvd);
    es_one_free(&r->ref);
}

/* The model, r and its selection, the spec, the layers, then every weight
 * (layers_estimate, adding the cost). ES_E_PARAM / ES_E_NOTFOUND naming model
 * or r, else fails like es_one_parse / es_spec_parse / layers_estimate. */
static int layers_parse(es_ctx *cx, layers_req *r, es_err *err)
{
    const es_matrix *rm;
    r->p.w_head = SIZE_MAX;
    if (param_model(cx, &r->mod, err) < 0 || es_param_matrix(cx->query, "r", cx->reg, &rm, err) < 0 ||
        es_one_parse(cx->reg, cx->query, "r_", rm, true, ES_CENTER_NONE, &r->ref, err) < 0 ||
        es_one_average(cx->app, &r->ref, !cx->may_defer, err) < 0)
        return -1;
    es_pctx pc = {.m = {r->ref.m}, .rank = {es_one_rank(&r->ref)}, .lim = &cx->reg->limits};
    if (es_spec_parse(es_layers_spec, cx->query, &pc, &r->p, err) < 0)
        return -1;
    r->n_layers = model_layers(cx->reg, r->mod, qkvo, r->layers);
    if (r->n_layers == 0)
        return es_fail(err, ES_E_NOTFOUND, "model", "model '%s' has no layer with matrices h<i>.q, h<i>.k, h<i>.v "
                       "and h<i>.o", r->mod->name);
    return layers_estimate(cx, r->mod, r->layers, r->n_layers, &r->ref, r->p.k, &r->n_top, err);
}

/* Weight w (an index into qkvo) of layer i against r's top-k subspace:
 * es_alignment of its decomposition (w_ parameters applied) with r's. Fails
 * like layer_weight or es_one_svd. */
static int layers_align(layers_req *r, size_t i, size_t w, es_err *err)
{
    es_ctx *cx = r->cx;
    es_one one;
    es_svd *svd = NULL;
    int rc = layer_weight(cx, &r->ref, layer_matrix(cx->reg, r->mod, r->layers[i], qkvo[w]), &one, err);
    if (rc == 0)
        rc = es_one_svd(cx->app, &one, &svd, err);
    if (rc == 0)
        rc = es_alignment_compute(svd, r->rsvd, r->p.k, 1, 1, 0, &r->al[i * N_QKVO + w], err);
    es_svd_release(svd);
    es_one_free(&one);
    return rc;
}

/* The number of top-m means every weight of every layer has (the shortest list). */
static size_t layers_n_top(const layers_req *r)
{
    size_t n = SIZE_MAX;
    for (size_t i = 0; i < r->n_layers * N_QKVO; i++)
        if (r->al[i]->n_top < n)
            n = r->al[i]->n_top;
    return n;
}

/* The table "top_mean": one row per layer (indexed by it), the columns
 * top<m>_q, top<m>_k, top<m>_v, top<m>_o for each m in turn, so the NPY array
 * reshaped to (layers, m, 4) holds a layers x {q, k, v, o} table per m. */
static void layers_table(const layers_req *r, es_out *out)
{
    size_t n_top = layers_n_top(r), cols = n_top * N_QKVO;
    es_table *t = es_out_table(out, "top_mean", "layer", "mean share of the top m vectors", r->n_layers, cols);
    for (size_t j = 0; j < n_top; j++)
        for (size_t w = 0; w < N_QKVO; w++)
            t->col_names[j * N_QKVO + w] = es_asprintf("top%zu_%s", r->al[0]->top_m[j], qkvo[w]);
    for (size_t i = 0; i < r->n_layers; i++) {
        t->index_values[i] = (double)r->layers[i];
        for (size_t j = 0; j < n_top; j++)
            for (size_t w = 0; w < N_QKVO; w++)
                t->values[i * cols + j * N_QKVO + w] = r->al[i * N_QKVO + w]->top_mean[j];
    }
}

/* The result: {"input", "layers": [{"layer", "q": {"id", "sha256", "top_mean"},
 * "k", "v", "o"}], "baseline", "warnings"} and the table "top_mean"
 * (layers_table). Never fails (non-finite numbers are recorded in out->jc). */
static void layers_out(const layers_req *r, es_out *out)
{
    const es_registry *reg = r->cx->reg;
    out->root = new_root();
    json_t *list = json_array(), *input = input_of(out->root), *warnings = es_axis_warnings(NULL, &r->ref.source, 1);
    json_object_set_new(out->root, "layers", list);
    for (size_t i = 0; i < r->n_layers; i++) {
        json_t *row = json_pack("{s:I}", "layer", (json_int_t)r->layers[i]);
        json_array_append_new(list, row);
        for (size_t w = 0; w < N_QKVO; w++) {
            const es_matrix *m = layer_matrix(reg, r->mod, r->layers[i], qkvo[w]);
            json_object_set_new(row, qkvo[w], json_pack("{s:s, s:s, s:o}", "id", m->id, "sha256", m->prov.sha256,
                                                         "top_mean", es_render_top_means(&out->jc, r->al[i * N_QKVO + w])));
            es_axis_warnings(warnings, &m, 1);
        }
    }
    json_object_set_new(input, "model", json_string(r->mod->name));
    json_object_set_new(input, "r", es_one_input(&out->jc, &r->ref, r->rsvd));
    json_object_set_new(input, "k", json_integer((json_int_t)r->p.k));
    json_object_set_new(input, "w_center", json_string(es_centering_names[r->p.w_center]));
    if (r->p.w_head != SIZE_MAX)
        json_object_set_new(input, "w_head", json_integer((json_int_t)r->p.w_head));
    json_object_set_new(out->root, "baseline", es_jnum(&out->jc, "baseline", (double)r->p.k / (double)r->rsvd->d));
    json_object_set_new(out->root, "warnings", warnings);
    layers_table(r, out);
}

/* r's averaged copy (if averaged) and decomposition, each weight's alignment
 * with it, then the result (layers_out). Fails like es_one_average, es_one_svd
 * or layers_align. */
static int layers_fill(void *arg, es_out *out, es_err *err)
{
    layers_req *r = arg;
    if (es_one_average(r->cx->app, &r->ref, true, err) < 0 || es_one_svd(r->cx->app, &r->ref, &r->rsvd, err) < 0)
        return -1;
    r->al = es_calloc(r->n_layers * N_QKVO, sizeof *r->al);
    for (size_t i = 0; i < r->n_layers; i++)
        for (size_t w = 0; w < N_QKVO; w++)
            if (layers_align(r, i, w, err) < 0)
                return -1;
    layers_out(r, out);
    return 0;
}

/* A per-layer request as parsed by the HTTP thread, handed over with its deferral (es_parsed). */
typedef struct layers_parsed {
    es_parsed base;
    layers_req r;
} layers_parsed;

static void layers_parsed_free(es_parsed *p)
{
    layers_parsed *lp = (layers_parsed *)p;
    layers_free(&lp->r);
    free(lp);
}

/* The compute side of a parsed per-layer request: r's averaged copy, then the gate and the answer. */
static int layers_resume(es_ctx *cx, es_parsed *p, es_err *err)
{
    layers_req *r = &((layers_parsed *)p)->r;
    r->cx = cx; /* the job's context now */
    if (es_one_average(cx->app, &r->ref, true, err) < 0)
        return -1;
    return spec_answer(cx, es_layers_spec, &r->p, es_one_key(&r->ref), layers_fill, r, err);
}

/* The per-layer table: for every layer with h<i>.q, .k, .v, .o, the mean
 * capture of each weight's top m singular vectors by r's top-k subspace. */
int es_api_alignment_layers(es_ctx *cx, es_err *err)
{
    layers_parsed *lp = es_calloc(1, sizeof *lp);
    lp->base = (es_parsed){layers_resume, layers_parsed_free};
    layers_req *r = &lp->r;
    r->cx = cx;
    es_out_plan plan = {0};
    int rc = layers_parse(cx, r, err);
    if (rc == 0) {
        es_plan_table(&plan, "top_mean", r->n_layers, r->n_top * N_QKVO);
        es_plan_json_row(&plan, LAYER_JSON_ROW(r->n_top));
        rc = planned_answer(cx, &plan, es_layers_spec, &r->p, es_one_key(&r->ref), layers_fill, r, err);
    }
    if (rc == 0 && es_parsed_hand_over(cx, &lp->base))
        lp = NULL;
    if (lp)
        layers_parsed_free(&lp->base);
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

/* An attention request: its model, query range and spec'd parameters, then
 * its layer (attention, pattern) or every attention layer (ranking). */
typedef struct attn_req {
    const es_registry *reg;
    const es_model *mod;
    const es_pspec *spec;
    size_t n_pos, d, q_start, q_stop, n_heads;
    es_attention_params p;
    es_attn_layer l;
    size_t layers[MAX_LAYERS], n_layers;
} attn_req;

/* The model (with a "wpe"), the query range, then the spec's parameters
 * (n_heads up to the positions' dimension, layer, head, bins). ES_E_PARAM /
 * ES_E_NOTFOUND naming them, ES_E_LIMIT "max_rows" / "max_bins". */
static int attn_common(es_ctx *cx, const es_pspec *spec, attn_req *r, es_err *err)
{
    *r = (attn_req){.reg = cx->reg, .spec = spec};
    if (param_model(cx, &r->mod, err) < 0)
        return -1;
    const es_matrix *pos = es_registry_matrix(cx->reg, r->mod->name, "wpe");
    if (!pos)
        return es_fail(err, ES_E_NOTFOUND, "model", "model '%s' has no matrix 'wpe' (the positions)", r->mod->name);
    r->n_pos = es_matrix_items(pos);
    r->d = es_matrix_dim(pos);
    es_pctx pc = {.m = {pos}, .lim = &cx->reg->limits};
    r->p.n_heads = r->mod->n_heads ? r->mod->n_heads : GPT2_HEADS; /* the default (a .preset parameter) */
    if (es_spec_parse(spec, cx->query, &pc, &r->p, err) < 0)
        return -1;
    r->q_start = r->p.queries[0];
    r->q_stop = r->p.queries[1];
    r->n_heads = r->p.n_heads;
    if (cx->reg->limits.max_rows && r->q_stop > cx->reg->limits.max_rows)
        return es_fail(err, ES_E_LIMIT, "max_rows", "queries up to %zu need %zu key positions, more than the "
                       "configured limit max_rows=%zu", r->q_stop, r->q_stop, cx->reg->limits.max_rows);
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

/* The gate and answer of an attention request over n_layers layers whose
 * keys are layers_key (consumed), their estimated cost added to cx->cost and
 * the reply's tables planned (plan). */
static int attn_answer(es_ctx *cx, attn_req *r, char *layers_key, size_t n_layers, const es_out_plan *plan,
                       es_fill_fn fill, es_err *err)
{
    for (size_t i = 0; i < n_layers; i++)
        es_cost_attention_layer(&cx->cost, r->q_start, r->q_stop, r->d, r->n_heads);
    bool handed; /* an attention request holds nothing of its own: a copy serves */
    return handed_answer(cx, plan, r->spec, &r->p, layers_key, fill, r, sizeof *r, NULL, &handed, err);
}

/* The table "heads" of n heads (heads_table), ranked or not. */
static es_out_plan heads_plan(bool ranked, size_t n)
{
    es_out_plan plan = {0};
    es_plan_table(&plan, "heads", n, ranked ? 5 : 4);
    return plan;
}

/* Layer `layer` of r's model into *l, resolved and checked for r's queries
 * and heads (es_attn_check) before the gate, so a bad one is never queued.
 * Fails like attn_layer_of and es_attn_check. */
static int attn_layer_checked(const attn_req *r, size_t layer, es_attn_layer *l, es_err *err)
{
    size_t stop = r->q_stop;
    if (attn_layer_of(r->reg, r->mod, layer, r->n_heads, l, err) < 0)
        return -1;
    return es_attn_check(l, r->q_start, &stop, err);
}

/* The request's layer (parameter layer) into r->l; fails like attn_layer_checked. */
static int attn_layer_param(attn_req *r, es_err *err)
{
    return attn_layer_checked(r, r->p.layer, &r->l, err);
}

/* The scores of r's layer: {"input", "d_head", "heads": [...]} and the table
 * "heads". Fails like es_attn_scores_compute. */
static int attention_fill(void *arg, es_out *out, es_err *err)
{
    const attn_req *r = arg;
    es_attn_scores *sc;
    if (es_attn_scores_compute(&r->l, r->q_start, r->q_stop, &sc, err) < 0)
        return -1;
    out->root = new_root();
    json_t *root = out->root, *heads = json_array();
    attn_input(input_of(root), r, &r->l);
    json_object_set_new(input_of(root), "layer", json_integer((json_int_t)r->l.layer));
    json_object_set_new(root, "d_head", json_integer((json_int_t)sc->d_head));
    for (size_t h = 0; h < sc->n_heads; h++)
        json_array_append_new(heads, render_head(&out->jc, &sc->heads[h]));
    json_object_set_new(root, "heads", heads);
    heads_table(out, false, sc->heads, sc->n_heads);
    es_attn_scores_free(sc);
    return 0;
}

/* Per head of one layer: mean attention to the previous position, to itself and
 * the mean attended distance over the query range. */
int es_api_attention(es_ctx *cx, es_err *err)
{
    attn_req r;
    if (attn_common(cx, es_attention_spec, &r, err) < 0 || attn_layer_param(&r, err) < 0)
        return -1;
    es_out_plan plan = heads_plan(false, r.n_heads);
    return attn_answer(cx, &r, attn_layer_key(&r.l), 1, &plan, attention_fill, err);
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

/* Every layer's scores, ranked: {"input" (with "layers"), "heads": [... with
 * "rank"]} and the table "heads" by rank. Fails like score_layers / es_attn_rank. */
static int ranking_fill(void *arg, es_out *out, es_err *err)
{
    const attn_req *r = arg;
    size_t n = r->n_layers;
    es_attn_scores **scores = es_calloc(n, sizeof *scores);
    es_attn_ranking *rank = NULL;
    int rc = -1;
    if (score_layers(r->reg, r, r->layers, n, scores, err) < 0 ||
        es_attn_rank((const es_attn_scores *const *)scores, n, &rank, err) < 0)
        goto done;
    out->root = new_root();
    json_t *root = out->root, *list = json_array();
    attn_input(input_of(root), r, NULL);
    json_object_set_new(input_of(root), "layers", es_jsizes(r->layers, n));
    for (size_t i = 0; i < rank->count; i++) {
        json_t *h = render_head(&out->jc, &rank->heads[i]);
        json_object_set_new(h, "rank", json_integer((json_int_t)i + 1));
        json_array_append_new(list, h);
    }
    json_object_set_new(root, "heads", list);
    heads_table(out, true, rank->heads, rank->count);
    rc = 0;
done:
    es_attn_ranking_free(rank);
    for (size_t i = 0; i < n; i++)
        es_attn_scores_free(scores[i]);
    free(scores);
    return rc;
}

/* All heads of every configured attention layer, ranked by previous-token score. */
int es_api_attention_ranking(es_ctx *cx, es_err *err)
{
    attn_req r;
    if (attn_common(cx, es_ranking_spec, &r, err) < 0)
        return -1;
    r.n_layers = model_layers(cx->reg, r.mod, attn_suffixes, r.layers);
    if (r.n_layers == 0)
        return es_fail(err, ES_E_NOTFOUND, "model", "model '%s' has no attention layer (matrices h<i>.ln_1.weight, "
                       "h<i>.ln_1.bias, h<i>.c_attn, h<i>.c_attn.bias)", r.mod->name);
    for (size_t i = 0; i < r.n_layers; i++) {
        es_attn_layer l;
        if (attn_layer_checked(&r, r.layers[i], &l, err) < 0)
            return -1;
    }
    es_out_plan plan = heads_plan(true, r.n_layers * r.n_heads);
    return attn_answer(cx, &r, layers_key(cx->reg, &r, r.layers, r.n_layers), r.n_layers, &plan, ranking_fill, err);
}

/* One head's pattern: {"input", the grid "values"} and the table "values".
 * Fails like es_attn_pattern. */
static int pattern_fill(void *arg, es_out *out, es_err *err)
{
    const attn_req *r = arg;
    es_grid *g;
    if (es_attn_pattern(&r->l, r->p.head, r->q_start, r->q_stop, r->p.bins, &g, err) < 0)
        return -1;
    out->root = new_root();
    json_t *root = out->root;
    attn_input(input_of(root), r, &r->l);
    json_object_set_new(input_of(root), "layer", json_integer((json_int_t)r->l.layer));
    json_object_set_new(input_of(root), "head", json_integer((json_int_t)r->p.head));
    json_object_set_new(input_of(root), "bins", json_integer((json_int_t)r->p.bins));
    es_render_grid(&out->jc, root, "values", g);
    es_out_grid(out, "values", "mean attention weight per bin", g, "key_");
    es_grid_free(g);
    return 0;
}

/* One head's causal attention pattern over the query range, binned. */
int es_api_attention_pattern(es_ctx *cx, es_err *err)
{
    attn_req r;
    if (attn_common(cx, es_pattern_spec, &r, err) < 0 || attn_layer_param(&r, err) < 0)
        return -1;
    if (r.p.bins == 0 && es_check_cells(&cx->reg->limits, r.q_stop - r.q_start, r.q_stop, err) < 0)
        return -1; /* refused before the gate: never queued */
    es_cost_grid(&cx->cost, r.p.bins, r.q_stop - r.q_start, r.q_stop);
    /* queries x keys [0, q_stop), binned as es_attn_pattern bins them */
    es_out_plan plan = {0};
    es_plan_table(&plan, "values", es_bin_count(r.q_stop - r.q_start, r.p.bins), es_bin_count(r.q_stop, r.p.bins));
    return attn_answer(cx, &r, attn_layer_key(&r.l), 1, &plan, pattern_fill, err);
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

/* A RoPE request: the angle table, the two vectors (seeded or given) and the spec. */
typedef struct rope_req {
    const es_matrix *rope;
    double *qv, *kv;
    bool seeded;
    es_rope_params p;
} rope_req;

/* The Toeplitz score of the rotated scores: {"input" (matrix, seed, q, k),
 * score, n, span, offsets, diagonal_mean, diagonal_count} and the table
 * "diagonals". Fails like es_rope_relative. */
static int rope_fill(void *arg, es_out *out, es_err *err)
{
    const rope_req *r = arg;
    const es_matrix *rope = r->rope;
    es_toeplitz *t;
    if (es_rope_relative(rope, "matrix", r->qv, r->kv, &t, NULL, err) < 0)
        return -1;
    out->root = new_root();
    es_jctx *jc = &out->jc;
    json_t *input = input_of(out->root);
    json_object_set_new(input, "matrix", json_pack("{s:s, s:s, s:I, s:I}", "id", rope->id, "sha256",
                                                   rope->prov.sha256, "n_positions", (json_int_t)rope->rows, "d",
                                                   (json_int_t)rope->cols));
    json_object_set_new(input, "seed", r->seeded ? json_integer((json_int_t)r->p.seed) : json_null());
    json_object_set_new(input, "q", es_jnums(jc, "q", r->qv, rope->cols));
    json_object_set_new(input, "k", es_jnums(jc, "k", r->kv, rope->cols));
    es_render_toeplitz(jc, out->root, t);
    es_out_toeplitz(out, t);
    es_toeplitz_free(t);
    return 0;
}

/* Free a rope request's vectors (r itself is the caller's). */
static void rope_release(void *arg)
{
    rope_req *r = arg;
    free(r->qv);
    free(r->kv);
}

/* Toeplitz score of S[m][n] = rot_m(q) . rot_n(k) over the positions of a RoPE
 * angle table: 1 up to rounding (the relative-position property). */
int es_api_rope_relative(es_ctx *cx, es_err *err)
{
    rope_req r = {0};
    if (es_param_matrix(cx->query, "matrix", cx->reg, &r.rope, err) < 0 || es_rope_check(r.rope, "matrix", err) < 0)
        return -1;
    if (cx->reg->limits.max_rows && r.rope->rows > cx->reg->limits.max_rows)
        return es_fail(err, ES_E_LIMIT, "max_rows", "%s has %zu positions, more than the configured limit max_rows=%zu",
                       r.rope->id, r.rope->rows, cx->reg->limits.max_rows);
    es_pctx pc = {.m = {r.rope}, .lim = &cx->reg->limits};
    if (es_spec_parse(es_rope_spec, cx->query, &pc, &r.p, err) < 0 ||
        rope_vectors(cx->query, r.rope->cols, r.p.seed, &r.qv, &r.kv, &r.seeded, err) < 0)
        return -1;
    /* S = every rotated q against every rotated k, its diagonals out */
    es_cost_products(&cx->cost, r.rope->cols, r.rope->rows, r.rope->rows);
    es_cost_output(&cx->cost, 2.0 * (double)r.rope->rows);
    es_out_plan plan = {0};
    es_plan_table(&plan, "diagonals", 2 * r.rope->rows - 1, 2); /* offsets -(n-1)..n-1 of the n positions */
    bool handed;
    int rc = handed_answer(cx, &plan, es_rope_spec, &r.p, es_asprintf("%s@%s", r.rope->id, r.rope->prov.sha256),
                           rope_fill, &r, sizeof r, rope_release, &handed, err);
    if (!handed)
        rope_release(&r);
    return rc;
}

/* ---------------------------------------------------------------- side by side */

/* compare's own parameters; it also accepts every parameter of the comparable
 * analyses of its table (.gathers), checked against the chosen one here. */
const es_pspec es_compare_spec[] = {
    {.name = "matrices", .kind = ES_P_TEXT, .required = true},
    {.name = "analysis", .kind = ES_P_TEXT, .required = true},
    {.name = "rows", .kind = ES_P_TEXT},
    {.name = "center", .kind = ES_P_TEXT},
    {.name = "average", .kind = ES_P_TEXT},
    {0}};

/* Parameters given one value per matrix (or one for all), separated by
 * PER_MATRIX_SEP: a comma belongs to the value (a union of rows). */
static const char *const per_matrix[] = {"rows", "center", "average", NULL};
#define PER_MATRIX_SEP ';'

/* Is name a parameter of analysis a's own spec? */
static bool in_spec(const es_analysis *a, const char *name)
{
    for (const es_pspec *p = a->spec; p->name; p++)
        if (strcmp(p->name, name) == 0)
            return true;
    return false;
}

/* The comparable analysis of self's table (self: compare's entry) named by
 * "analysis": ES_E_PARAM naming it (listing the comparable ones) if unknown or
 * not comparable. */
static int compare_analysis(const es_analysis *self, const es_query *q, const es_analysis **out, es_err *err)
{
    const char *name = es_query_get(q, "analysis");
    for (const es_analysis *const *c = self->gathers; name && *c; c++)
        if ((*c)->comparable && strcmp((*c)->name, name) == 0) {
            *out = *c;
            return 0;
        }
    es_buf names;
    es_buf_init(&names, 64);
    for (const es_analysis *const *c = self->gathers; *c; c++)
        if ((*c)->comparable)
            es_buf_printf(&names, "%s%s", names.len ? ", " : "", (*c)->name);
    int rc = es_fail(err, ES_E_PARAM, "analysis", "analysis='%.64s': expected one of: %s", name ? name : "",
                     names.s);
    free(names.s);
    return rc;
}

/* Is name one of compare's (self's) rendering parameters (format, orient, table)? */
static bool renders(const es_analysis *self, const char *name)
{
    const char *names[4];
    size_t n = es_render_params(self, names, 0, 4);
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

/* Does analysis a (compare's choice; self: compare's entry) take parameter
 * key? Another comparable analysis' parameter given its documented default
 * is not a's: it is ignored (compare_check, compare_subquery). */
static bool compare_own(const es_analysis *self, const es_analysis *a, const char *key)
{
    return in_spec(a, key) || in_spec(self, key) || renders(self, key) || es_compare_reference_param(a, key);
}

/* See route.h: set by describe.c. */
bool (*es_compare_is_default)(const es_analysis *a, const char *name, const char *value);

/* Refuse a parameter of another comparable analysis that the chosen one does
 * not take, center for analyses without centring and a table it does not
 * produce (self: compare's entry). ES_E_PARAM naming the parameter. */
static int compare_check(const es_analysis *self, const es_query *q, const es_analysis *a, es_err *err)
{
    for (size_t i = 0; i < q->n; i++) {
        const char *key = q->items[i].key;
        if (!compare_own(self, a, key) && !(es_compare_is_default && es_compare_is_default(self, key, q->items[i].value)))
            return es_fail(err, ES_E_PARAM, key, "parameter '%s' does not apply to analysis=%s (or is its "
                           "documented default, ignored)", key, a->name);
    }
    if (!a->center_param && es_query_get(q, "center"))
        return es_fail(err, ES_E_PARAM, "center", "analysis=%s takes no centring", a->name);
    const char *table = es_query_get(q, "table");
    if (table && !es_analysis_has_table(a, table))
        return es_fail(err, ES_E_PARAM, "table", "table='%.64s' is not a table of analysis=%s", table, a->name);
    return 0;
}

/* The query of matrix i of n: shared parameters copied, per-matrix lists split
 * at ';' (one value for all, or n values; an empty value means the default).
 * For a pair analysis a the matrix is its second side: `b` (a->names[1]) names
 * it and the per-matrix values become b_rows, b_center, b_average; the
 * reference side's parameters (a, a_rows, ...) are shared. */
static int compare_subquery(const es_analysis *self, const es_analysis *a, const es_query *q, const char *id,
                            size_t i, size_t n, es_query *sub, es_err *err)
{
    es_query_init(sub);
    bool pair = a->shape == ES_SHAPE_PAIR;
    if (pair)
        es_query_add(sub, a->names[1], id);
    for (size_t j = 0; j < q->n; j++) {
        const es_query_item *it = &q->items[j];
        if (strcmp(it->key, "matrices") == 0 || strcmp(it->key, "analysis") == 0 || !compare_own(self, a, it->key))
            continue; /* not a's: a documented default, ignored (compare_check) */
        bool listed = false;
        for (size_t p = 0; per_matrix[p]; p++)
            listed = listed || strcmp(it->key, per_matrix[p]) == 0;
        if (!listed) {
            es_query_add(sub, it->key, it->value);
            continue;
        }
        size_t count;
        char **items = es_split_on(it->value, PER_MATRIX_SEP, &count);
        if (count != 1 && count != n) {
            es_strv_free(items);
            es_query_free(sub);
            return es_fail(err, ES_E_PARAM, it->key, "%s lists %zu values separated by ';'; give one for all "
                           "matrices or one per matrix (%zu)", it->key, count, n);
        }
        const char *value = items[count == 1 ? 0 : i];
        if (*value && pair) {
            char *key = es_asprintf("%s_%s", a->names[1], it->key);
            es_query_add(sub, key, value);
            free(key);
        } else if (*value) {
            es_query_add(sub, it->key, value);
        }
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

/* A comparison: the chosen analysis and, per matrix, its sub-query and parsed run. */
typedef struct compare_req {
    const es_analysis *a;
    size_t n;
    const es_matrix *m[COMPARE_MAX + 1];
    es_query sub[COMPARE_MAX];
    es_run run[COMPARE_MAX];
} compare_req;

/* Release the sub-queries and runs parsed so far. Never fails. */
static void compare_free(compare_req *c)
{
    for (size_t i = 0; i < c->n; i++) {
        es_run_free(&c->run[i]);
        es_query_free(&c->sub[i]);
    }
}

/* Parse every matrix's request before the gate (so a bad one is a 400 from the
 * HTTP thread) and add their estimated costs to cx->cost. Fails like
 * compare_subquery / es_run_parse, the message saying which matrix; release
 * with compare_free also after a failure. */
static int compare_parse(es_ctx *cx, compare_req *c, size_t n, es_err *err)
{
    for (c->n = 0; c->n < n; c->n++) {
        size_t i = c->n;
        c->run[i] = (es_run){0};
        es_query_init(&c->sub[i]);
        const es_matrix *m = c->a->shape == ES_SHAPE_PAIR ? NULL : c->m[i]; /* a pair reads a and b itself */
        if (compare_subquery(cx->analysis, c->a, cx->query, c->m[i]->id, i, n, &c->sub[i], err) < 0 ||
            es_run_parse(cx->app, cx->reg, c->a, &c->sub[i], m, &c->run[i], err) < 0 ||
            es_run_average(&c->run[i], !cx->may_defer, err) < 0) {
            blame_matrix(err, i, c->m[i]->id);
            c->n++; /* release this one too */
            return -1;
        }
        es_cost_run(&c->run[i], &c->run[i].cost);
        es_cost_add(&cx->cost, &c->run[i].cost);
    }
    return 0;
}

/* The canonical key of a comparison: every matrix's es_run_key (its data,
 * selection and every parsed parameter of the analysis), in order; NULL while
 * one is (an averaged copy not built yet). Caller frees. */
static char *compare_key(const compare_req *c)
{
    es_buf b;
    es_buf_init(&b, 512);
    es_buf_printf(&b, "n=%zu", c->n);
    for (size_t i = 0; i < c->n; i++) {
        char *key = es_run_key(&c->run[i], &c->sub[i]);
        if (!key) { /* an averaged copy not built yet */
            free(b.s);
            return NULL;
        }
        es_buf_printf(&b, ";%zu=%s", i, key);
        free(key);
    }
    return b.s;
}

/* Table j of every matrix's result stacked into one table of out: the
 * analysis' own index (component, row, offset), the first column "matrix" (the
 * position in `matrices`, so NPY holds it too), then the analysis' columns.
 * ES_E_INCOMPATIBLE naming "matrices" if the results' tables do not line up. */
static int stack_table(es_out *out, const es_out *one, size_t n, size_t j, es_err *err)
{
    const es_table *first = &one[0].tables[j];
    size_t rows = 0;
    for (size_t i = 0; i < n; i++) {
        const es_table *t = j < one[i].n_tables ? &one[i].tables[j] : NULL;
        if (!t || strcmp(t->name, first->name) != 0 || t->cols != first->cols)
            return es_fail(err, ES_E_INCOMPATIBLE, "matrices", "matrices[%zu]'s table '%s' does not line up with "
                           "matrices[0]'s", i, first->name);
        rows += t->rows;
    }
    es_table *s = es_out_table(out, first->name, first->index, first->units, rows, first->cols + 1);
    s->col_names[0] = es_strdup("matrix");
    for (size_t k = 0; k < first->cols; k++) {
        s->col_names[k + 1] = es_strdup(first->col_names[k]);
        s->labels[k + 1] = first->labels[k];
    }
    size_t r = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t row = 0; row < one[i].tables[j].rows; row++, r++) {
            const es_table *t = &one[i].tables[j];
            double *to = s->values + r * s->cols;
            s->index_values[r] = t->index_values[row];
            to[0] = (double)i;
            memcpy(to + 1, t->values + row * t->cols, t->cols * sizeof(double));
        }
    return 0;
}

/* The comparison's result: {"input": {"analysis", "matrices"}, "results": [each
 * matrix's document], "warnings"} and the analysis' tables stacked over the
 * matrices. Fails like es_run_fill (the message saying which matrix) or stack_table. */
static int compare_fill(void *arg, es_out *out, es_err *err)
{
    compare_req *c = arg;
    es_out one[COMPARE_MAX];
    memset(one, 0, sizeof one);
    for (size_t i = 0; i < c->n; i++)
        one[i].tables_only = out->tables_only; /* a table reply needs no matrix's document in full */
    json_t *results = json_array(), *ids = json_array();
    int rc = 0;
    out->root = new_root();
    json_object_set_new(out->root, "results", results);
    for (size_t i = 0; i < c->n && rc == 0; i++) {
        json_array_append_new(ids, json_string(c->m[i]->id));
        rc = es_run_fill(&c->run[i], &c->sub[i], &one[i], err);
        if (rc < 0) {
            blame_matrix(err, i, c->m[i]->id);
            break;
        }
        if (one[i].jc.bad_field && !out->jc.bad_field)
            out->jc.bad_field = one[i].jc.bad_field;
        json_array_append(results, one[i].root);
    }
    for (size_t j = 0; rc == 0 && j < one[0].n_tables; j++)
        rc = stack_table(out, one, c->n, j, err);
    for (size_t i = 0; i < c->n; i++)
        es_out_free(&one[i]);
    json_object_set_new(input_of(out->root), "analysis", json_string(c->a->name));
    json_object_set_new(input_of(out->root), "matrices", ids);
    json_object_set_new(out->root, "warnings", es_axis_warnings(NULL, c->m, c->n));
    return rc;
}

/* The stacked tables' shapes (stack_table: every matrix's rows, one more
 * column) when every matrix's run plans its tables and they line up; else
 * nothing is planned (checked once rendered). Never fails. */
static void compare_plan(const compare_req *c, es_out_plan *plan)
{
    es_out_plan one[COMPARE_MAX];
    for (size_t i = 0; i < c->n; i++) {
        one[i] = (es_out_plan){0};
        if (!c->a->plan)
            return;
        c->a->plan(&c->run[i], &one[i]);
        if (one[i].n_tables == 0 || one[i].n_tables != one[0].n_tables)
            return;
    }
    for (size_t j = 0; j < one[0].n_tables; j++) {
        size_t rows = 0;
        bool exact = true;
        double json_row = 0;
        for (size_t i = 0; i < c->n; i++) {
            if (strcmp(one[i].tables[j].name, one[0].tables[j].name) != 0 ||
                one[i].tables[j].cols != one[0].tables[j].cols) {
                plan->n_tables = 0;
                return;
            }
            rows += one[i].tables[j].rows;
            exact = exact && !one[i].tables[j].at_most;
            json_row = fmax(json_row, one[i].tables[j].json_row);
        }
        es_plan_table_bounded(plan, one[0].tables[j].name, rows, exact, one[0].tables[j].cols + 1);
        es_plan_json_row(plan, json_row);
    }
}

/* A comparison as parsed by the HTTP thread, handed over with its deferral (es_parsed). */
typedef struct compare_parsed {
    es_parsed base;
    compare_req c;
} compare_parsed;

static void compare_parsed_free(es_parsed *p)
{
    compare_parsed *cp = (compare_parsed *)p;
    compare_free(&cp->c);
    free(cp);
}

/* The compute side of a parsed comparison: the averaged copies, then the gate and the answer. */
static int compare_resume(es_ctx *cx, es_parsed *p, es_err *err)
{
    compare_req *c = &((compare_parsed *)p)->c;
    for (size_t i = 0; i < c->n; i++)
        if (es_run_average(&c->run[i], true, err) < 0) {
            blame_matrix(err, i, c->m[i]->id);
            return -1;
        }
    return es_gate_answer(cx, compare_key(c), compare_fill, c, err);
}

/* One analysis over several matrices, each on its own rows / centring / averaging. */
int es_api_compare(es_ctx *cx, es_err *err)
{
    if (!es_query_get(cx->query, "analysis"))
        return es_fail(err, ES_E_PARAM, "analysis", "missing required parameter 'analysis'");
    compare_parsed *cp = es_calloc(1, sizeof *cp);
    cp->base = (es_parsed){compare_resume, compare_parsed_free};
    compare_req *c = &cp->c;
    size_t n;
    int rc = -1;
    const es_analysis *self = cx->analysis; /* compare's entry: its route's (es_route_find) */
    if (compare_analysis(self, cx->query, &c->a, err) < 0 || compare_check(self, cx->query, c->a, err) < 0 ||
        compare_matrices(cx, c->m, &n, err) < 0 || compare_parse(cx, c, n, err) < 0)
        goto done;
    if (es_check_memory(cx, err) == 0) { /* memory first, as for one matrix: it refuses whatever the format */
        es_out_plan plan = {0};
        compare_plan(c, &plan);
        if (es_check_planned_size(cx, &plan, err) < 0)
            goto done;
    }
    rc = es_gate_answer(cx, compare_key(c), compare_fill, c, err);
    if (rc == 0 && es_parsed_hand_over(cx, &cp->base))
        cp = NULL;
done:
    if (cp)
        compare_parsed_free(&cp->base);
    return rc;
}
