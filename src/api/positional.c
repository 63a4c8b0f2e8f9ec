/* The hand-written handlers of the positional analyses that read a model's
 * layers or vectors given in the query rather than one matrix of the path: the
 * per-layer alignment table, positional-only attention (per head, ranking,
 * pattern) and the RoPE relative property (/v1/compare, the other hand-written
 * handler, is compare.c). Their descriptors (src/api/analyses/) carry the specs
 * defined here; each handler parses what the spec cannot express (a model, a
 * position range, vectors), then
 * es_spec_parse for the rest, and answers through the gate helper every
 * analysis uses (es_gate_answer): its key is es_spec_key plus what identifies
 * the data it reads, and its fill function
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
 * the spec (es_spec_key); none on a compute thread whose request the HTTP
 * thread keyed (es_gate_keyed). Fails like es_gate_answer. */
static int spec_answer(es_ctx *cx, const es_pspec *spec, const void *params, char *data, es_fill_fn fill,
                       void *arg, es_err *err)
{
    if (!data || es_gate_keyed(cx)) {
        bool keyed = data != NULL;
        free(data);
        return es_gate_answer(cx, keyed ? es_strdup("") : NULL, fill, arg, err);
    }
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
    char *data = es_strdup(es_gate_keyed(cx) ? "" : sp->data); /* kept for a waiter left to compute unkeyed */
    return spec_answer(cx, sp->spec, (char *)sp->req + sp->params_at, data, sp->fill, sp->req, err);
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
    *out = es_catalogue_model(cx->reg, name);
    if (!*out)
        return es_fail(err, ES_E_NOTFOUND, "model", "no model '%.64s' (GET /v1/models lists them)", name);
    return 0;
}

/* Matrix "h<layer>.<suffix>" of mod, or NULL. */
static const es_matrix *layer_matrix(const es_catalogue *reg, const es_model *mod, size_t layer, const char *suffix)
{
    char name[96];
    snprintf(name, sizeof name, "h%zu.%s", layer, suffix);
    return es_catalogue_matrix(reg, mod->name, name);
}

/* Does mod have h<layer>.<s> for every suffix s? */
static bool layer_complete(const es_catalogue *reg, const es_model *mod, size_t layer, const char *const *suffixes)
{
    for (; *suffixes; suffixes++)
        if (!layer_matrix(reg, mod, layer, *suffixes))
            return false;
    return true;
}

/* The layers i (ascending, at most MAX_LAYERS) for which mod has every
 * h<i>.<suffix>, found from the names "h<digits>.…" of its matrices. */
static size_t model_layers(const es_catalogue *reg, const es_model *mod, const char *const *suffixes,
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
    const es_catalogue *reg = r->cx->reg;
    out->root = new_root();
    json_t *list = json_array(), *input = input_of(out->root), *warnings = es_axis_warnings(NULL, &r->ref.source, 1);
    json_object_set_new(out->root, "layers", list);
    for (size_t i = 0; i < r->n_layers; i++) {
        json_t *row = json_pack("{s:I}", "layer", (json_int_t)r->layers[i]);
        json_array_append_new(list, row);
        for (size_t w = 0; w < N_QKVO; w++) {
            const es_matrix *m = layer_matrix(reg, r->mod, r->layers[i], qkvo[w]);
            json_object_set_new(row, qkvo[w], json_pack("{s:s, s:s?, s:o}", "id", m->id, "sha256", es_matrix_sha256(m),
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
    char *data = es_gate_keyed(cx) ? es_strdup("") : es_one_key(&r->ref); /* keyed by the HTTP thread */
    return spec_answer(cx, es_layers_spec, &r->p, data, layers_fill, r, err);
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
static int attn_layer_of(const es_catalogue *reg, const es_model *mod, size_t layer, size_t n_heads,
                         es_attn_layer *out, es_err *err)
{
    const es_matrix *m[4];
    char missing[400] = "";
    for (size_t i = 0; attn_suffixes[i]; i++)
        if (!(m[i] = layer_matrix(reg, mod, layer, attn_suffixes[i])))
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%sh%zu.%s",
                     *missing ? ", " : "", layer, attn_suffixes[i]);
    const es_matrix *pos = es_catalogue_matrix(reg, mod->name, "wpe");
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
    const es_catalogue *reg;
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
    const es_matrix *pos = es_catalogue_matrix(cx->reg, r->mod->name, "wpe");
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
    return json_pack("{s:s, s:s?}", "id", m->id, "sha256", es_matrix_sha256(m)); /* null while computed */
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

/* ETag key of a layer: what names the data of its five matrices (their
 * sha256s once known). Caller frees. */
static char *attn_layer_key(const es_attn_layer *l)
{
    return es_asprintf("%zu:%s,%s,%s,%s,%s", l->layer, es_matrix_data_id(l->pos), es_matrix_data_id(l->ln_weight),
                       es_matrix_data_id(l->ln_bias), es_matrix_data_id(l->qkv_weight),
                       es_matrix_data_id(l->qkv_bias));
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
static int score_layers(const es_catalogue *reg, const attn_req *r, const size_t *layers, size_t n,
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
static char *layers_key(const es_catalogue *reg, const attn_req *r, const size_t *layers, size_t n)
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
    json_object_set_new(input, "matrix", json_pack("{s:s, s:s?, s:I, s:I}", "id", rope->id, "sha256",
                                                   es_matrix_sha256(rope), "n_positions", (json_int_t)rope->rows, "d",
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
    int rc = handed_answer(cx, &plan, es_rope_spec, &r.p, es_asprintf("%s@%s", r.rope->id, es_matrix_data_id(r.rope)),
                           rope_fill, &r, sizeof r, rope_release, &handed, err);
    if (!handed)
        rope_release(&r);
    return rc;
}
