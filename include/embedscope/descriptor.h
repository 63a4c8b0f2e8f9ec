/* The contract of the service (src/api), its analyses: the operands of an
 * analysis (es_one: a matrix, its selection, head and averaging), the typed
 * parameter specs, the analysis descriptors (es_analysis) and the parsed run a
 * descriptor's fill function reads.
 *   spec.c       typed parameter specs: allowed names, parsing, canonical key, "input" echo
 *   analyses/NAME.c  one descriptor (route, spec, fill) per analysis endpoint, one file each
 *   analyses.c   the analysis table: the descriptors of analyses/ (a list made at build time) and compare
 *   api.c        operands (es_one_*) and the generic runner (es_run_*, es_gate_answer)
 *   positional.c, compare.c  the hand-written handlers of the irregular descriptors
 * Owners: the files above. Ownership and failure rules: see core.h. */
#ifndef ES_DESCRIPTOR_H
#define ES_DESCRIPTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "embedscope/catalogue.h"
#include "embedscope/core.h"
#include "embedscope/cost.h"
#include "embedscope/format.h"
#include "embedscope/labels.h"
#include "embedscope/linalg.h"
#include "embedscope/params.h"
#include "embedscope/render.h"
#include "embedscope/route.h"
#include "embedscope/store.h"

/* One matrix as an analysis sees it: the configured matrix or its averaged copy
 * (parameter <prefix>average = g), and the selection <prefix>rows / exclude / center. */
typedef struct es_one {
    const es_matrix *source;  /* the configured matrix named in the request (borrowed) */
    const es_matrix *m;  /* what is analysed (borrowed from the catalogue, == head or == held) */
    es_matrix *head_view;  /* <prefix>head's view, retained; NULL without head */
    es_matrix *held;     /* the averaged copy, retained; NULL until es_one_average builds it */
    size_t head, n_heads;  /* n_heads 0 = no head */
    size_t average;      /* group size g, 0 = not averaged */
    es_average_order order;
    bool groups;         /* average_mode=groups: one row per group */
    size_t n_groups;
    es_selection sel;
    /* Averaged: the matrix averaged (the source or its head view; o->m until the
     * copy is built, same shape), the rows averaged (select_then_average: the
     * selection before average_mode=groups keeps its leaders; idx NULL: every
     * item) and the parameter that errors name ("<prefix>average"). */
    const es_matrix *base;
    es_selection averaged;
    char average_param[48];
} es_one;
/* The per-matrix parameters, each with the matrix's prefix ("", "a_", "w_", ...):
 * <prefix>head (one head of a d_model x d_model weight: es_view_head with the
 * n_heads of the matrix's model in reg, the catalogue the request holds, never
 * app->reg, which a reload or upload may swap meanwhile), then the selection
 * <prefix>rows / exclude / center, and
 * <prefix>average = g with <prefix>average_order (select_then_average, default:
 * the selected rows in groups from the first one; average_then_select: the whole
 * matrix from item 0, then the selection) and <prefix>average_mode (rows,
 * default: every selected row, replaced by its group's mean; groups: the first
 * row of each group only). ES_E_PARAM naming the parameter (also for an
 * average_order / average_mode without average, or a g the rows averaged
 * cannot take), or as es_param_selection. Parsing builds nothing: o->m is the
 * matrix averaged (same shape as its copy) until es_one_average. */
int es_one_parse(const es_catalogue *reg, const es_query *q, const char *prefix, const es_matrix *m, bool with_center,
                 es_centering def, es_one *out, es_err *err);
/* o's averaged copy as o->m: built (build: a compute thread's work,
 * es_app_averaged) or, from an HTTP thread, taken if already built; else o
 * stays without it, and es_one_key is NULL: the request is deferred unkeyed
 * (es_gate_answer) and keyed where it is computed. Nothing without averaging
 * or once it has its copy. Fails like es_app_averaged. */
int es_one_average(es_app *app, es_one *o, bool build, es_err *err);
/* An average order parameter: select_then_average (default) | average_then_select.
 * ES_E_PARAM naming `name` otherwise. */
int es_param_average_order(const es_query *q, const char *name, es_average_order *out, es_err *err);
/* Release the averaged copy and the selection (o itself is the caller's). Never fails. */
void es_one_free(es_one *o);
/* What identifies o's data in an ETag (id, sha256, view, rows, centring, head,
 * averaging); NULL while its averaged copy is not there (es_one_average), whose
 * sha256 it names. Caller frees. */
char *es_one_key(const es_one *o);
/* es_render_input of o plus model_axis and its origin, head and n_heads with a
 * head, and average, average_order, average_mode and n_groups when averaged. */
json_t *es_one_input(es_jctx *jc, const es_one *o, const es_svd *svd);
/* The rank bound min(n, d) of o's selection: the largest meaningful k. Never fails. */
size_t es_one_rank(const es_one *o);
/* o's decomposition through the app's cache (retained). Fails like es_cache_svd. */
int es_one_svd(es_app *app, const es_one *o, es_svd **out, es_err *err);

/* ================================================================ spec.c + analyses.c: the analysis table
 *
 * Every analysis endpoint is one es_analysis descriptor (src/api/analyses/NAME.c): its name,
 * route, which matrices it reads (es_shape), whether it decomposes them, its
 * centring, and a typed spec of its own parameters. From the descriptor the
 * generic code derives the allowed-parameter list (es_spec_allowed), parsing
 * and validation into the analysis' params struct (es_spec_parse, fields found
 * by offset), the canonical cache/ETag key over every parsed parameter
 * (es_spec_key), the "input" echo (es_spec_echo), the route and /v1/compare
 * eligibility, and --dump-api (describe.c), from which openapi.yaml's
 * analysis routes are generated (tools/gen_openapi.py, make openapi).
 *
 * Adding a parameter to an existing analysis (e.g. method= for issue 11, head= /
 * average_mode= for issue 10): add a field to the analysis' params struct in
 * src/api/analyses/NAME.c, one es_pspec line to its spec (name, kind, default, range or
 * choices, limit name, ES_FIELD(struct, field)), read the field in its fill
 * function, describe the parameter in openapi.base.yaml, run `make openapi` and
 * give it a case in the descriptor's examples (es_examples). The key, echo, allowed list, errors and docs check follow from the
 * spec; nothing else in src/api changes. A parameter that only selects among
 * renderings of the same result (format=) is not an analysis parameter. */

/* The kinds of parameter values a spec can hold. */
typedef enum es_pkind {
    ES_P_SIZE,   /* non-negative decimal integer -> size_t field */
    ES_P_REAL,   /* finite plain decimal -> double field */
    ES_P_CHOICE, /* one of .choices -> size_t field (the index) */
    ES_P_RANGE,  /* "start:stop" over the items of matrix .side (es_param_range) -> size_t[2] field */
    ES_P_TEXT    /* parsed by the handler itself (model, lists): the key and echo use the text */
} es_pkind;

/* Bounds that depend on the request, applied on top of .min/.max. */
typedef enum es_pbound {
    ES_BOUND_FIXED,     /* .max only */
    ES_BOUND_RANK,      /* <= the rank bound min(n, d) of selection .side (ES_E_PARAM above it) */
    ES_BOUND_ITEMS,     /* <= the item count of matrix .side */
    ES_BOUND_LAST_ITEM, /* <= the item count of matrix .side, minus one (an item index) */
    ES_BOUND_DIM,       /* <= the model-axis length of matrix .side */
    ES_BOUND_FIELD      /* < the value of the size field at .bound_field (parsed earlier) */
} es_pbound;

/* One parameter of an analysis. */
typedef struct es_pspec {
    const char *name;
    es_pkind kind;
    double def;                  /* default: value, or choice index */
    double min, max;             /* inclusive range (SIZE: max 0 = none) */
    bool min_open, max_open;     /* REAL: the bound itself is excluded */
    const char *limit;           /* configured limit (es_limit_value) bounding it: SIZE: ES_E_LIMIT
                                  * above it; REAL: the range's max */
    es_pbound bound;             /* request-dependent bound */
    int side;                    /* which matrix/selection bounds it (0, 1) */
    size_t bound_field;          /* ES_BOUND_FIELD: offset of the bounding size field */
    bool clamp_default;          /* lower the default to the request-dependent bound too */
    bool required;               /* absent is a 400 (when it applies) */
    const char *const *choices;  /* CHOICE: NULL-terminated */
    size_t offset;               /* where the value goes in the params struct */
    const char *when, *when_is;  /* applies only when parameter `when` (a CHOICE parsed earlier) is `when_is` */
    bool no_echo;                /* not echoed in "input" (the handler echoes it its own way) */
    bool preset;                 /* absent: keep the value the caller put in the field (a default
                                  * that depends on the request, e.g. the model's n_heads) */
} es_pspec;

#define ES_FIELD(type, field) offsetof(type, field)
#define ES_PARAMS_MAX 24

/* Which matrices an analysis reads, with the selection parameters that come with it. */
typedef enum es_shape {
    ES_SHAPE_NONE,  /* no selection parameters (the handler resolves its own inputs) */
    ES_SHAPE_ONE,   /* the path's {model}/{matrix}: rows, exclude[, center][, average] */
    ES_SHAPE_PAIR   /* two matrices named by .names: a, a_rows, a_exclude, a_center, a_average, b, ... */
} es_shape;

struct es_out;
struct es_run;
struct es_out_plan;

/* Example requests of an analysis, carried by its descriptor and exported by
 * --dump-api, from which the HTTP tests build their lists (a new analysis needs
 * no test-list edit; docs/development.md, "Adding an analysis"). A query is the
 * part after "?"; on a route with {model}/{matrix} the tests fill in the matrix.
 * A change is a query fragment merged into .query: "name=value" sets a member,
 * "-name" removes one, "@square=<operand>_" (or "@square=" for the path's
 * matrix) switches that matrix to a square d_model x d_model weight. */
typedef struct es_example_case {
    const char *param;     /* the parameter; NULL ends a list */
    const char *one, *two; /* two changes that give two different results (two NULL: the shipped
                            * configuration offers one valid value; the parameter is checked for rejection) */
    const char *bad;       /* a change refused with a 4xx naming the parameter (or a limit) */
} es_example_case;

typedef struct es_example_table {
    const char *query;  /* NULL ends a list */
    const char *tables; /* the tables it produces, space-separated */
} es_example_table;

typedef struct es_examples {
    const char *query;              /* typical: answers 200 on the shipped configuration, on the path's
                                     * gpt2-small/wpe (the base of .cases) */
    const es_example_case *cases;   /* its own parameters' cases; selection and rendering parameters
                                     * without one get the tests' generic cases; NULL: none */
    const char *light, *heavy;      /* on the cost test's configuration (models b: s 16 x 8, g 4096 x 768
                                     * gaussian; tiny), a 2 MB max_request_memory: light answers 200,
                                     * heavy is refused before any work naming .cost_params; path matrix
                                     * b/s for light, b/g for heavy */
    const es_example_table *tables; /* requests whose tables the format tests compare; together they
                                     * cover every table of the analysis */
} es_examples;

typedef struct es_analysis {
    const char *name;
    const char *route;             /* the path pattern ({model}, {matrix} capture one segment) */
    es_shape shape;
    const char *names[2];          /* ES_SHAPE_PAIR: the two matrices' parameter names; ES_SHAPE_NONE:
                                    * names[0] may name a matrix parameter of the spec whose prefixed
                                    * selection (r_rows, ...) the handler parses, accepted after it */
    bool decomposes;               /* works on the (cached) SVD of its selection(s) */
    bool center_param;             /* takes <prefix>center (default .def_center); without it the
                                    * selection is centred by .def_center */
    bool average_param;            /* takes <prefix>average, <prefix>average_order, <prefix>average_mode */
    bool head_param;               /* takes <prefix>head (one head of a d_model x d_model weight) */
    bool with_labels;              /* ES_SHAPE_ONE: the run holds the matrix's labels (es_run.labels) */
    es_centering def_center;
    bool comparable;               /* offered by /v1/compare (ES_SHAPE_ONE only) */
    /* compare: the table whose comparable analyses it gathers (it also accepts
     * their parameters and produces their tables); NULL for the others. The
     * table reaches the code that reads it (format.c, compare.c) through
     * this entry, not by name, so the table can list compare's handler. */
    const struct es_analysis *const *gathers;
    size_t params_size;            /* sizeof its params struct */
    const char *const *tables;     /* the names of its result tables, main first, NULL-terminated
                                    * (NULL: JSON only, no ?table=, ?orient=) */
    const es_pspec *spec;          /* its own parameters, .name NULL-terminated */
    /* Compute from the parsed run (selections, decompositions, params) and add
     * its "input" members beyond the echo and its results to out. */
    int (*fill)(const struct es_run *run, struct es_out *out, es_err *err);
    /* Instead of the generic runner: a hand-written handler that still uses
     * the spec (es_spec_*) and answers with es_gate_answer. NULL: generic. */
    int (*handler)(es_ctx *cx, es_err *err);
    /* Add its own cost (cost.c) beyond one pass over the n x d selection and
     * the decomposition when it decomposes to c; NULL: nothing more.
     * Hand-written handlers add their prediction to cx->cost themselves
     * before the gate. */
    void (*cost)(const struct es_run *run, size_t n, size_t d, es_cost *c);
    /* The parameters its cost grows with, named in the 400 of a request whose
     * predicted memory exceeds limits.max_request_memory (required: tests/http check it). */
    const char *cost_params;
    /* The tables this run will produce, in the order fill makes them, with
     * their shapes (es_plan_table), so that the reply's size is checked
     * before any work; NULL: checked after computing only. Never fails. */
    void (*plan)(const struct es_run *run, struct es_out_plan *p);
    /* Checks of the parsed run beyond its spec that need the selections (a
     * full-resolution grid within max_cells), run at parse time so a refused
     * request is a 400 before the gate; NULL: none. Fails ES_E_LIMIT / ES_E_PARAM. */
    int (*validate)(const struct es_run *run, es_err *err);
    /* Does this run produce table `name` (one of .tables), when its parameters
     * choose among them (cosine: one table per mode)? Checked by es_run_parse,
     * so a table the request will not produce is a 400 before the gate; NULL:
     * every run produces all of .tables. Never fails. */
    bool (*produces)(const struct es_run *run, const char *name);
    /* The decomposition of selection i when it needs less than the whole SVD
     * (method=, the top k triplets); NULL: es_one_svd. Fails like es_cache_decompose. */
    int (*decompose)(const struct es_run *run, int i, es_svd **out, es_err *err);
    /* Its example requests (required: the HTTP tests read them from --dump-api). */
    const es_examples *examples;
} es_analysis;

/* The irregular endpoints' params structs and specs (positional.c, compare.c). */
#define ES_MAX_LAYERS 256
typedef struct es_layers_params {
    size_t k, w_center, w_head;
} es_layers_params;
typedef struct es_attention_params {
    size_t queries[2], n_heads, layer, head, bins;
} es_attention_params;
typedef struct es_rope_params {
    size_t seed;
} es_rope_params;
extern const es_pspec es_layers_spec[], es_attention_spec[], es_ranking_spec[], es_pattern_spec[], es_rope_spec[],
    es_compare_spec[];

/* Defaults and choices shared by the table and the hand-written handlers: one
 * definition each. */
#define ES_ALIGN_DEFAULT_K 10
extern const char *const es_average_orders[]; /* es_average_order order */
extern const char *const es_average_modes[];  /* rows (every selected row), groups (one per group) */
/* Defines the descriptor of analysis NAME (one file of src/api/analyses each):
 *     ES_DESCRIPTOR(pca, 20) = {.name = "pca", .route = ..., ...};
 * The table lists every descriptor of the files present at build time
 * (tools/gen_analyses.sh writes the list) by ORDER, then by NAME: the order of
 * the routes, of --dump-api and openapi.yaml, and of compare's choices. */
#define ES_DESCRIPTOR(name, order) const es_analysis es_descriptor_##name
/* The table, NULL-terminated, in route order (ES_DESCRIPTOR's order), compare last. */
extern const es_analysis *const es_analyses[];

/* The value of a configured limit by name ("max_k", "max_bins", ...); SIZE_MAX
 * for an unknown name. Never fails. */
size_t es_limit_value(const es_limits *lim, const char *name);
/* A grid of rows x cols cells at full resolution (bins=0): ES_E_LIMIT
 * "max_cells" when it has more cells than the configured limit. */
int es_check_cells(const es_limits *lim, size_t rows, size_t cols, es_err *err);

/* Bounds the request-dependent bounds of a spec refer to. */
typedef struct es_pctx {
    const es_matrix *m[2];     /* the matrices (ES_BOUND_ITEMS, _LAST_ITEM, _DIM) */
    size_t rank[2];            /* rank bounds of the selections (ES_BOUND_RANK) */
    const es_limits *lim;
} es_pctx;

/* The selection parameters of one matrix, unprefixed (rows, exclude, center,
 * average, average_order, average_mode, head), .name NULL-terminated: the
 * names a route accepts per operand and their description (--dump-api). */
extern const es_pspec es_selection_spec[];
/* Does analysis a take selection parameter es_selection_spec[j] (its
 * center_param, average_param, head_param)? */
bool es_selection_applies(const es_analysis *a, size_t j);
/* Every parameter name an analysis accepts (selection parameters, its spec),
 * NULL-terminated, into names[cap]. Returns the count. Never fails. */
size_t es_spec_allowed(const es_analysis *a, const char **names, size_t cap);
/* Is name a parameter of the reference side of a pair analysis a (its first
 * matrix, "a" and "a_rows", "a_center", ...)? /v1/compare takes them as they
 * are and runs a against each of its matrices as the second side. */
bool es_compare_reference_param(const es_analysis *a, const char *name);
/* Parse and validate the spec's parameters from q into params (zeroed first;
 * CHOICE and SIZE into size_t fields, REAL into double fields; TEXT ones are left
 * to the handler). ES_E_PARAM naming the parameter (malformed, out of range,
 * missing when required, given when it does not apply), ES_E_LIMIT naming the
 * limit. */
int es_spec_parse(const es_pspec *spec, const es_query *q, const es_pctx *pc, void *params, es_err *err);
/* Is value the default documented for p (--dump-api's "default": a CHOICE's
 * default name, a SIZE's or REAL's default number)? A parameter that does not
 * apply (its `when`) is accepted, and ignored, with this value. */
bool es_pspec_is_default(const es_pspec *p, const char *value);
/* Does parameter p apply with these params (its `when` condition)? */
bool es_spec_applies(const es_pspec *spec, const es_pspec *p, const void *params);
/* Append "|name=value" for every parameter of the spec that applies (TEXT: its
 * query text, or "-" when absent) to b: the canonical key. Never fails. */
void es_spec_key(const es_pspec *spec, const es_query *q, const void *params, es_buf *b);
/* Echo every parameter that applies (and is not .no_echo) into input: sizes
 * as integers, reals as numbers, choices as their names, TEXT as given (when
 * given). Never fails (non-finite reals are recorded in jc). */
void es_spec_echo(const es_pspec *spec, const es_query *q, const void *params, es_jctx *jc, json_t *input);

/* A request of one analysis, parsed: what its fill function reads. */
typedef struct es_run {
    es_app *app;
    const es_analysis *a;
    es_one one[2];        /* one[0] (ES_SHAPE_ONE) or both (ES_SHAPE_PAIR) */
    es_svd *svd[2];       /* their decompositions when a->decomposes, else NULL */
    void *params;         /* a->params_size bytes, filled by es_spec_parse */
    es_labels *labels;    /* with a->with_labels: the matrix's labels (retained), NULL: none */
    const es_limits *lim; /* the limits of the catalogue the request holds */
    es_cost cost;         /* its prediction (es_cost_run) */
} es_run;

/* Parse analysis a (its selections and spec) for matrix m (ES_SHAPE_ONE; NULL
 * for a pair, whose matrices the query names in the catalogue reg) under query
 * q into run. ES_E_PARAM / ES_E_NOTFOUND / ES_E_INCOMPATIBLE naming the matrix
 * parameters, ES_E_PARAM naming "table" when ?table= names a table this run
 * does not produce (a->produces), else fails like es_one_parse, es_spec_parse
 * and a->validate. Release with
 * es_run_free (also after a failure). */
int es_run_parse(es_app *app, const es_catalogue *reg, const es_analysis *a, const es_query *q, const es_matrix *m,
                 es_run *run, es_err *err);
/* The canonical key of a parsed run (selections + every parameter); NULL while
 * an averaged copy is not built (es_one_key). Caller frees. */
char *es_run_key(const es_run *run, const es_query *q);
/* Decompose (if a->decomposes) and fill: the body {"input": {...}, results}
 * into *out (the caller's; root consumed by es_reply_json). Fails like
 * es_one_svd or a->fill. */
int es_run_fill(es_run *run, const es_query *q, es_out *out, es_err *err);
/* Release everything the run holds (run itself is the caller's). Never fails. */
void es_run_free(es_run *run);
/* Compute a request's result into *out (the caller's, empty): its JSON
 * document and tables. -1 with err filled on failure (out is then freed). */
typedef int (*es_fill_fn)(void *arg, es_out *out, es_err *err);
/* The gate and the answer of a parsed request, for every analysis handler:
 * es_precheck on its canonical key (consumed; the representation is added
 * there), then, unless that settled the reply (304, a cached copy, deferral),
 * fill(arg) and es_reply_out. A NULL key (an HTTP thread's request whose
 * averaged copy is not built: building is computing) defers the request
 * unkeyed: the compute thread builds the copy, then keys, claims and answers it
 * (a 304 included). A compute thread's request the HTTP thread keyed
 * (es_gate_keyed) needs no key: a handler passes "" then, never building the
 * text again. Fails like fill or es_reply_out. */
int es_gate_answer(es_ctx *cx, char *key, es_fill_fn fill, void *arg, es_err *err);
/* Has the HTTP thread's gate already keyed cx and claimed its reply, which a
 * compute thread now computes in the same cx? Its key, ETag and caching policy
 * are there: the handler passes es_gate_answer "" instead of building its key. */
bool es_gate_keyed(const es_ctx *cx);
/* The generic handler of an analysis route: parse, gate, compute, reply. */
int es_run_route(es_ctx *cx, const es_analysis *a, es_err *err);
/* The run's averaged copies (es_one_average of each operand). */
int es_run_average(es_run *run, bool build, es_err *err);
/* Add the predicted cost of a parsed run (its selections, decompositions not
 * already in the cache, and a->cost) to out. Never fails. */
void es_cost_run(const es_run *run, es_cost *out);
/* Is o's decomposition for a descriptor's decompose hook (topk: params start
 * with k and method; NULL params: the exact one) already in the cache? False
 * while its averaged copy is not built (neither is the decomposition, unless
 * the copy left the app's few kept since: then the prediction is high). */
bool es_one_cached(es_app *app, const es_one *o, const void *params);

#endif
