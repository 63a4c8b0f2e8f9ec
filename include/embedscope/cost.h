/* The runtime of the service (src/api), its predictions: the time and memory a
 * computing request will take, from rates measured at start.
 * Owner: src/api/cost.c; es_check_memory and es_task_cost_of: src/api/api.c.
 * Ownership and failure rules: see core.h. */
#ifndef ES_COST_H
#define ES_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "embedscope/core.h"
#include "embedscope/linalg.h"
#include "embedscope/pool.h"

/* Declared in render.h and route.h. */
typedef struct es_jctx es_jctx;
typedef struct es_ctx es_ctx;

/* A prediction of a computing request (cost.c): compute seconds on this machine, peak bytes. */
typedef struct es_cost {
    double seconds, bytes;
    double pass_seconds[ES_PASS_COUNT]; /* the part of seconds each progress pass takes (the rest:
                                           products and rendering, which report nothing) */
} es_cost;
/* a += b, every term. Never fails. */
void es_cost_add(es_cost *a, const es_cost *b);

/* ---- cost.c: the predicted time and memory of a computing request */

/* Bytes of JSON per rendered number at most (17 significant digits, sign, point, exponent, separator). */
#define ES_BYTES_PER_NUMBER 25.0

/* The factor within which predictions meet measured times (make bench): a
 * request predicted longer than this times its synchronous window is a job at
 * once; a shorter one runs and becomes a job if it outlasts the window. */
#define ES_COST_ERROR_BOUND 4.0

/* Rates measured by es_cost_calibrate (defaults before): seconds per unit of work. */
typedef struct es_rates {
    double qr;          /* per n d^2 of the TSQR of a tall n x d block too short to split (one TSQR), at
                           the probes' d = 256 (a wider block's is less per n d^2: cost.c's tsqr_rate) */
    double qr_parallel; /* per n d^2 of the parallel TSQR (es_tsqr_chunks > 1: a chunk per thread) */
    double fft;         /* per d N log2 N of cosine offsets' FFTs (N-point transforms of d columns) */
    double svd;         /* per d^3 of the rest of an exact decomposition (dgesdd of R, checks) */
    double values;      /* per d^3 of the values of R */
    double eig;         /* per d^3 of top-k's eigenpairs of the Gram matrix */
    double gemm;        /* per flop of dgemm / dsyrk */
    double stream;      /* per byte of one pass over memory */
    double period2, period1; /* per n^2 and per n of one component's periodicity */
    double pair;        /* per pair of items of the loops over an n x n Gram matrix */
    double render;      /* per number of a result rendered as text and sent */
    double overhead;    /* per request: parsing, the gate, the hand-over to a compute thread */
    double calibration_s; /* how long es_cost_calibrate took (0: not run) */
    double calibration_slowdown; /* how much slower than on a quiet machine its probes ran (>= 1; the
                                    rates above are divided by it); 0: not run */
    double calibration_load;     /* the one-minute load average when it ended (-1: unreadable) */
} es_rates;

/* Measure the rates with the BLAS threads set now (one computation's view;
 * well under 0.5 s on a quiet machine: five short runs a probe, each rate from
 * the medians) and log them. Call once at start, before serving. Returns how
 * many rates stayed at their defaults (a measurement failed or came out
 * non-positive); never fails. */
unsigned es_cost_calibrate(void);
/* Keep the built-in rates for the process's life (`--cost-rates fixed`, which the test suite's daemons
 * run with): no calibration, and nothing that would measure or refresh a rate later may change them, so
 * a prediction is the same on every machine. Logs it. Call at start instead of es_cost_calibrate. */
void es_cost_fix_rates(void);
/* Whether es_cost_fix_rates was called. */
bool es_cost_rates_fixed(void);
/* A decomposition by `method` (exact, values, topk: resolved; k: its K for top-k) of an n x d block
 * took `seconds` (its computation alone): the last few such ratios of measured to predicted seconds
 * of its method set the factor its later predictions are multiplied by (their median, within
 * [1/8, 8]). The cache's observer (es_cache_set_observer). Does nothing once the rates are fixed
 * (es_cost_fix_rates). Never fails. */
void es_cost_observe(es_method method, size_t n, size_t d, size_t k, double seconds);
/* The rates in use now (the defaults before es_cost_calibrate). Never fails. */
es_rates es_cost_current(void);
/* Each adds one algorithm's time and memory to c. None fails.
 * es_cost_svd: the exact decomposition of an n x d selection;
 * es_cost_decompose: the decomposition es_cache_decompose computes for
 *   method `asked` and the first k triplets (0: all);
 * es_cost_products: the a x b dot products of vectors of length d (capture, overlap, alignment);
 * es_cost_project: X V_k over n items (pca coordinates, left vectors);
 * es_cost_pass: one pass over an n x d selection;
 * es_cost_gram: the n x n Gram matrix of n items of length d and a pass over it;
 * es_cost_cosine: the cosine matrix of n items made a block of rows at a time (its upper
 *   triangle only when upper) and a pass over each block;
 * es_cost_cosine_offset: the mean cosine by offset of the n items idx, by the method
 *   es_cosine_offset_method picks (the direct sums: es_cost_cosine's upper triangle;
 *   the FFT: d transforms of its length and a copy of the selection);
 * es_cost_periodicity: k components' periodograms and fits over n positions;
 * es_cost_output: `numbers` numbers rendered;
 * es_cost_grid: a grid of bins x bins cells, or rows x cols at full resolution (bins 0);
 * es_cost_attention_layer: one attention layer over the queries [q_start, q_stop)
 *   of d-dimensional positions with n_heads heads (projections of q_stop positions, scores, softmax);
 * es_cost_request: the fixed cost of one request (parsing, the gate, the hand-over to a compute thread). */
void es_cost_svd(es_cost *c, size_t n, size_t d);
void es_cost_decompose(es_cost *c, es_method asked, size_t n, size_t d, size_t k);
void es_cost_products(es_cost *c, size_t d, size_t a, size_t b);
void es_cost_project(es_cost *c, size_t n, size_t d, size_t k);
void es_cost_pass(es_cost *c, size_t n, size_t d);
void es_cost_gram(es_cost *c, size_t n, size_t d);
void es_cost_cosine(es_cost *c, size_t n, size_t d, bool upper);
void es_cost_cosine_offset(es_cost *c, const size_t *idx, size_t n, size_t d);
void es_cost_periodicity(es_cost *c, size_t n, size_t k);
void es_cost_output(es_cost *c, double numbers);
void es_cost_grid(es_cost *c, size_t bins, size_t rows, size_t cols);
/* UMAP of n items of length d: the neighbour graph (every pair's product, pass "knn")
 * and `epochs` passes over the graph's edges (pass "layout"). Never fails. */
void es_cost_umap(es_cost *c, size_t n, size_t d, size_t n_neighbors, size_t epochs);
void es_cost_attention_layer(es_cost *c, size_t q_start, size_t q_stop, size_t d, size_t n_heads);
void es_cost_request(es_cost *c);
/* {"predicted_seconds", "predicted_bytes"} (the answer's input.cost). Never fails. */
json_t *es_cost_json(es_jctx *jc, const es_cost *c);

/* ES_E_LIMIT "max_request_memory" when cx->cost needs more memory than
 * limits.max_request_memory (0: half of the physical memory), naming the
 * parameters it grows with. Called by es_gate_answer. */
int es_check_memory(const es_ctx *cx, es_err *err);
/* What the compute pool is told of a deferred request's cost: cx->cost's
 * seconds, light when it is predicted (> 0) within limits.light_seconds. */
es_task_cost es_task_cost_of(const es_ctx *cx);

#endif
