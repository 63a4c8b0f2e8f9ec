/* Positional-only attention: one GPT-2 attention layer applied to the position
 * embeddings alone (LayerNorm, per-head queries and keys, causal softmax), and
 * per-head summaries of the resulting patterns. */
#include "embedscope/positional.h"
#include "analysis/internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Validated inputs and the queries/keys of every head: qk is q1 x 2d, row p =
 * [q_p | k_p] with head h at columns h*dh.. of each half; n counts all positions. */
typedef struct layer_state {
    size_t n, d, dh, n_heads;
    size_t q0, q1;      /* queries [q0, q1); keys [0, q1) */
    double *qk;
} layer_state;

/* Length of a vector stored as 1 x len or len x 1; 0 if m is not a vector. */
static size_t vector_length(const es_matrix *m)
{
    return m->rows == 1 ? m->cols : m->cols == 1 ? m->rows : 0;
}

/* Element i of a vector stored as 1 x len or len x 1. */
static double vector_at(const es_matrix *m, size_t i)
{
    return m->rows == 1 ? es_matrix_at(m, 0, i) : es_matrix_at(m, i, 0);
}

/* ES_E_INCOMPATIBLE naming field unless m is a vector of length len. */
static int check_vector(const es_matrix *m, const char *field, size_t len, es_err *err)
{
    if (vector_length(m) == len)
        return 0;
    return es_fail(err, ES_E_INCOMPATIBLE, field,
                   "%s (%s, %zu x %zu) must be a vector of %zu values", field, m->id, m->rows,
                   m->cols, len);
}

/* Shapes, head count, epsilon and the query range (q_stop 0 = all):
 * ES_E_INCOMPATIBLE naming the bad matrix, ES_E_PARAM "n_heads" / "eps" / "queries". */
int es_attn_check(const es_attn_layer *in, size_t q_start, size_t *q_stop, es_err *err)
{
    size_t n = es_matrix_items(in->pos), d = es_matrix_dim(in->pos);
    if (check_vector(in->ln_weight, "ln_weight", d, err) != 0 ||
        check_vector(in->ln_bias, "ln_bias", d, err) != 0 ||
        check_vector(in->qkv_bias, "qkv_bias", 3 * d, err) != 0)
        return -1;
    if (es_matrix_dim(in->qkv_weight) != d || es_matrix_items(in->qkv_weight) != 3 * d)
        return es_fail(err, ES_E_INCOMPATIBLE, "qkv_weight",
                       "qkv_weight %s must be [%zu, %zu] with model axis rows (d = %zu from %s)",
                       in->qkv_weight->id, d, 3 * d, d, in->pos->id);
    if (in->n_heads == 0 || d % in->n_heads != 0)
        return es_fail(err, ES_E_PARAM, "n_heads", "n_heads %zu does not divide d_model %zu",
                       in->n_heads, d);
    if (!(in->eps >= 0 && isfinite(in->eps)))
        return es_fail(err, ES_E_PARAM, "eps", "eps must be finite and >= 0, got %g", in->eps);
    size_t stop = *q_stop ? *q_stop : n;
    if (!(q_start < stop && stop <= n && stop >= 2))
        return es_fail(err, ES_E_PARAM, "queries",
                       "query positions %zu:%zu must be a non-empty range inside 0:%zu that "
                       "includes a position >= 1",
                       q_start, stop, n);
    *q_stop = stop;
    return 0;
}

/* LayerNorm of each row of x (n x d) in place: (x - mean) / sqrt(var + eps) * g + b,
 * var the biased variance over d (as PyTorch / GPT-2). */
static void layer_norm(double *x, size_t n, size_t d, const es_matrix *g, const es_matrix *b,
                       double eps)
{
    for (size_t p = 0; p < n; p++) {
        double *row = x + p * d, mean = 0, var = 0;
        for (size_t j = 0; j < d; j++)
            mean += row[j];
        mean /= (double)d;
        for (size_t j = 0; j < d; j++)
            var += (row[j] - mean) * (row[j] - mean);
        double inv = 1 / sqrt(var / (double)d + eps);
        for (size_t j = 0; j < d; j++)
            row[j] = (row[j] - mean) * inv * vector_at(g, j) + vector_at(b, j);
    }
}

/* Validate (fails like check_layer) and compute the queries and keys of all heads. */
static int layer_prepare(const es_attn_layer *in, size_t q_start, size_t q_stop,
                         layer_state *st, es_err *err)
{
    if (es_attn_check(in, q_start, &q_stop, err) != 0)
        return -1;
    /* Positions after the last query are never attended to: only q_stop rows. */
    size_t n = q_stop, d = es_matrix_dim(in->pos), w = 2 * d;
    size_t *first = es_malloc(n * sizeof *first);
    for (size_t p = 0; p < n; p++)
        first[p] = p;
    double *x = es_matrix_items_copy(in->pos, first, n);
    free(first);
    layer_norm(x, n, d, in->ln_weight, in->ln_bias, in->eps);
    double *wqk = es_malloc(d * w * sizeof *wqk);   /* Conv1D [in, out], q|k columns */
    for (size_t i = 0; i < d; i++)
        for (size_t j = 0; j < w; j++)
            wqk[i * w + j] = es_matrix_item(in->qkv_weight, j, i);
    double *qk = es_malloc(n * w * sizeof *qk);
    for (size_t p = 0; p < n; p++)
        for (size_t j = 0; j < w; j++)
            qk[p * w + j] = vector_at(in->qkv_bias, j);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)w, (int)d, 1.0, x, (int)d,
                wqk, (int)w, 1.0, qk, (int)w);
    free(x);
    free(wqk);
    *st = (layer_state){.n = es_matrix_items(in->pos), .d = d, .dh = d / in->n_heads,
                        .n_heads = in->n_heads, .q0 = q_start, .q1 = q_stop, .qk = qk};
    return 0;
}

/* Softmax of row[0..len) in place, subtracting the maximum for stability. */
static void softmax(double *row, size_t len)
{
    double max = row[0], sum = 0;
    for (size_t j = 1; j < len; j++)
        max = row[j] > max ? row[j] : max;
    for (size_t j = 0; j < len; j++) {
        row[j] = exp(row[j] - max);
        sum += row[j];
    }
    for (size_t j = 0; j < len; j++)
        row[j] /= sum;
}

/* Attention pattern of head h: (q1 - q0) x q1, row r is query p = q0 + r, zero
 * for keys j > p. NULL (ES_E_NOMEM) if it cannot be allocated. */
static double *head_pattern(const layer_state *st, size_t h, es_err *err)
{
    size_t nq = st->q1 - st->q0, nk = st->q1, w = 2 * st->d;
    double *a = es_alloc_doubles(nq, nk, "attention pattern", err);
    if (!a)
        return NULL;
    const double *q = st->qk + st->q0 * w + h * st->dh, *k = st->qk + st->d + h * st->dh;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk, (int)st->dh,
                1 / sqrt((double)st->dh), q, (int)w, k, (int)w, 0.0, a, (int)nk);
    for (size_t r = 0; r < nq; r++) {
        size_t p = st->q0 + r;
        softmax(a + r * nk, p + 1);
        memset(a + r * nk + p + 1, 0, (nk - p - 1) * sizeof *a);
    }
    return a;
}

/* prev / self / distance of one pattern (see positional.h). */
static void head_summary(const layer_state *st, const double *a, es_attn_head *out)
{
    size_t nq = st->q1 - st->q0, nk = st->q1, n_prev = 0;
    double prev = 0, self = 0, dist = 0;
    for (size_t r = 0; r < nq; r++) {
        size_t p = st->q0 + r;
        const double *row = a + r * nk;
        if (p >= 1) {
            prev += row[p - 1];
            n_prev++;
        }
        self += row[p];
        for (size_t j = 0; j < p; j++)
            dist += row[j] * (double)(p - j);
    }
    out->prev = prev / (double)n_prev;
    out->self = self / (double)nq;
    out->distance = dist / (double)nq;
}

/* Summaries of every head of the layer over queries [q_start, q_stop). Fails
 * like check_layer, or ES_E_NOMEM for a pattern. */
int es_attn_scores_compute(const es_attn_layer *in, size_t q_start, size_t q_stop,
                           es_attn_scores **out, es_err *err)
{
    layer_state st;
    if (layer_prepare(in, q_start, q_stop, &st, err) != 0)
        return -1;
    es_attn_scores *s = es_calloc(1, sizeof *s);
    *s = (es_attn_scores){.layer = in->layer, .n_heads = st.n_heads, .d_head = st.dh,
                          .n_pos = st.n, .q_start = st.q0, .q_stop = st.q1};
    s->heads = es_calloc(st.n_heads, sizeof *s->heads);
    for (size_t h = 0; h < st.n_heads; h++) {
        double *a = head_pattern(&st, h, err);
        if (!a) {
            free(st.qk);
            es_attn_scores_free(s);
            return -1;
        }
        s->heads[h].layer = in->layer;
        s->heads[h].head = h;
        head_summary(&st, a, &s->heads[h]);
        free(a);
    }
    free(st.qk);
    *out = s;
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_attn_scores_free(es_attn_scores *s)
{
    if (!s)
        return;
    free(s->heads);
    free(s);
}

/* Descending prev; ties by layer then head. */
static int cmp_prev_desc(const void *a, const void *b)
{
    const es_attn_head *x = a, *y = b;
    if (x->prev != y->prev)
        return x->prev < y->prev ? 1 : -1;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return (x->head > y->head) - (x->head < y->head);
}

/* Every head of the given layers, sorted by previous-token score. ES_E_PARAM
 * "layers" when there are none. */
int es_attn_rank(const es_attn_scores *const *layers, size_t n_layers, es_attn_ranking **out,
                 es_err *err)
{
    if (n_layers == 0)
        return es_fail(err, ES_E_PARAM, "layers", "no layers to rank");
    size_t count = 0;
    for (size_t l = 0; l < n_layers; l++)
        count += layers[l]->n_heads;
    es_attn_ranking *r = es_calloc(1, sizeof *r);
    r->heads = es_calloc(count, sizeof *r->heads);
    for (size_t l = 0; l < n_layers; l++) {
        memcpy(r->heads + r->count, layers[l]->heads, layers[l]->n_heads * sizeof *r->heads);
        r->count += layers[l]->n_heads;
    }
    qsort(r->heads, r->count, sizeof *r->heads, cmp_prev_desc);
    *out = r;
    return 0;
}

/* Release a result and everything it owns; NULL is a no-op. Cannot fail. */
void es_attn_ranking_free(es_attn_ranking *r)
{
    if (!r)
        return;
    free(r->heads);
    free(r);
}

/* Head `head`'s pattern binned to at most bins x bins (bins = 0: full); row
 * edges are query positions. Fails like check_layer, ES_E_PARAM "head" for a
 * head the layer lacks, or ES_E_NOMEM. */
int es_attn_pattern(const es_attn_layer *in, size_t head, size_t q_start, size_t q_stop,
                    size_t bins, es_grid **out, es_err *err)
{
    layer_state st;
    if (layer_prepare(in, q_start, q_stop, &st, err) != 0)
        return -1;
    if (head >= st.n_heads) {
        free(st.qk);
        return es_fail(err, ES_E_PARAM, "head", "head %zu does not exist (the layer has %zu)",
                       head, st.n_heads);
    }
    double *a = head_pattern(&st, head, err);
    free(st.qk);
    if (!a)
        return -1;
    es_grid *g;
    int rc = es_grid_from_blocks(a, st.q1 - st.q0, st.q1, bins, true, &g, err);
    free(a);
    if (rc != 0)
        return -1;
    for (size_t i = 0; i <= g->rows; i++)
        g->row_edges[i] += st.q0;   /* row edges as query positions */
    *out = g;
    return 0;
}
