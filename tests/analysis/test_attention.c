/* Positional-only attention on small hand-built layers against a direct loop
 * computation (LayerNorm, per-head q/k, causal softmax), pattern invariants (rows
 * sum to 1, causal zeros), binning, query ranges, ranking, and errors. Real GPT-2
 * layers are compared with numpy goldens in test_golden_positional.c. */
#include "analysis/helpers.h"
#include "check_main.h"
#include "embedscope/positional.h"

/* A tiny layer with deterministic pseudo-random weights. */
typedef struct fixture {
    size_t n, d, heads;
    es_matrix *pos, *g, *b, *w, *bias;
    es_attn_layer layer;
} fixture;

static double value(size_t i, double a, double c) { return sin(a * (double)i + c) * 0.8; }

static es_matrix *filled(size_t rows, size_t cols, es_axis axis, double a, double c)
{
    double *v = es_malloc(rows * cols * sizeof *v);
    for (size_t i = 0; i < rows * cols; i++)
        v[i] = value(i, a, c);
    es_provenance prov = { 0 };
    return es_matrix_from_data("test/t", v, rows, cols, axis, &prov);
}

static fixture make_fixture(size_t n, size_t d, size_t heads)
{
    fixture f = { .n = n, .d = d, .heads = heads };
    f.pos = filled(n, d, ES_AXIS_COLUMNS, 1.37, 0.2);
    f.g = filled(1, d, ES_AXIS_COLUMNS, 0.71, 1.0);
    f.b = filled(d, 1, ES_AXIS_COLUMNS, 2.3, -0.5);   /* column vector on purpose */
    f.w = filled(d, 3 * d, ES_AXIS_ROWS, 0.93, 0.7);   /* Conv1D [in, out] */
    f.bias = filled(1, 3 * d, ES_AXIS_COLUMNS, 1.9, 0.1);
    f.layer = (es_attn_layer){ .layer = 4, .pos = f.pos, .ln_weight = f.g, .ln_bias = f.b,
                               .qkv_weight = f.w, .qkv_bias = f.bias, .n_heads = heads,
                               .eps = 1e-5 };
    return f;
}

static void free_fixture(fixture *f)
{
    es_matrix_release(f->pos);
    es_matrix_release(f->g);
    es_matrix_release(f->b);
    es_matrix_release(f->w);
    es_matrix_release(f->bias);
}

/* Direct computation of head h's pattern, n x n row-major (zeros above the diagonal). */
static double *reference_pattern(const fixture *f, size_t h)
{
    size_t n = f->n, d = f->d, dh = d / f->heads;
    double *x = es_malloc(n * d * sizeof *x), *q = es_malloc(n * dh * sizeof *q);
    double *k = es_malloc(n * dh * sizeof *k), *a = es_calloc(n * n, sizeof *a);
    for (size_t p = 0; p < n; p++) {
        double mu = 0, var = 0;
        for (size_t j = 0; j < d; j++)
            mu += es_matrix_at(f->pos, p, j) / (double)d;
        for (size_t j = 0; j < d; j++)
            var += pow(es_matrix_at(f->pos, p, j) - mu, 2) / (double)d;
        for (size_t j = 0; j < d; j++)
            x[p * d + j] = (es_matrix_at(f->pos, p, j) - mu) / sqrt(var + 1e-5) *
                               es_matrix_at(f->g, 0, j) + es_matrix_at(f->b, j, 0);
        for (size_t c = 0; c < dh; c++) {
            double qs = es_matrix_at(f->bias, 0, h * dh + c);
            double ks = es_matrix_at(f->bias, 0, d + h * dh + c);
            for (size_t j = 0; j < d; j++) {
                qs += x[p * d + j] * es_matrix_at(f->w, j, h * dh + c);
                ks += x[p * d + j] * es_matrix_at(f->w, j, d + h * dh + c);
            }
            q[p * dh + c] = qs;
            k[p * dh + c] = ks;
        }
    }
    for (size_t p = 0; p < n; p++) {
        double sum = 0;
        for (size_t j = 0; j <= p; j++) {
            double s = 0;
            for (size_t c = 0; c < dh; c++)
                s += q[p * dh + c] * k[j * dh + c];
            a[p * n + j] = exp(s / sqrt((double)dh));   /* small scores: no overflow */
            sum += a[p * n + j];
        }
        for (size_t j = 0; j <= p; j++)
            a[p * n + j] /= sum;
    }
    free(x);
    free(q);
    free(k);
    return a;
}

static es_grid *pattern(const fixture *f, size_t h, size_t q0, size_t q1, size_t bins)
{
    es_grid *g = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_attn_pattern(&f->layer, h, q0, q1, bins, &g, &err) == 0, "%s", err.message);
    return g;
}

/* d = 4, one head of 4 and two heads of 2: full patterns equal the loop computation;
 * prev / self / distance equal their definitions on the reference pattern. */
START_TEST(tiny_layer_matches_loops)
{
    const size_t heads[] = { 1, 2 };
    for (size_t c = 0; c < 2; c++) {
        fixture f = make_fixture(7, 4, heads[c]);
        es_attn_scores *sc = NULL;
        es_err err = { 0 };
        ck_assert_msg(es_attn_scores_compute(&f.layer, 0, 0, &sc, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(sc->n_heads, heads[c]);
        ck_assert_uint_eq(sc->d_head, 4 / heads[c]);
        ck_assert_uint_eq(sc->q_stop, 7);
        ck_assert_uint_eq(sc->layer, 4);
        for (size_t h = 0; h < heads[c]; h++) {
            double *ref = reference_pattern(&f, h);
            es_grid *g = pattern(&f, h, 0, 0, 0);
            ck_assert_uint_eq(g->rows, 7);
            ck_assert_uint_eq(g->cols, 7);
            double prev = 0, self = 0, dist = 0;
            for (size_t p = 0; p < 7; p++) {
                for (size_t j = 0; j < 7; j++)
                    ck_assert_double_eq_tol(g->values[p * 7 + j], ref[p * 7 + j], 1e-13);
                prev += p ? ref[p * 7 + p - 1] / 6 : 0;
                self += ref[p * 7 + p] / 7;
                for (size_t j = 0; j < p; j++)
                    dist += ref[p * 7 + j] * (double)(p - j) / 7;
            }
            ck_assert_uint_eq(sc->heads[h].head, h);
            ck_assert_uint_eq(sc->heads[h].layer, 4);
            ck_assert_double_eq_tol(sc->heads[h].prev, prev, 1e-13);
            ck_assert_double_eq_tol(sc->heads[h].self, self, 1e-13);
            ck_assert_double_eq_tol(sc->heads[h].distance, dist, 1e-13);
            es_grid_free(g);
            free(ref);
        }
        es_attn_scores_free(sc);
        free_fixture(&f);
    }
}
END_TEST

/* Larger layer: rows sum to 1, causal zeros; a query range [10, 30) gives rows at
 * positions 10.. over keys 0..29; bins reduce to block means of the full pattern. */
START_TEST(pattern_invariants_ranges_bins)
{
    fixture f = make_fixture(40, 16, 4);
    es_grid *full = pattern(&f, 2, 0, 0, 0);
    for (size_t p = 0; p < 40; p++) {
        double sum = 0;
        for (size_t j = 0; j < 40; j++) {
            double v = full->values[p * 40 + j];
            if (j > p)
                ck_assert_double_eq(v, 0.0);
            else
                ck_assert(v > 0);
            sum += v;
        }
        ck_assert_double_eq_tol(sum, 1.0, 1e-14);
    }
    es_grid *part = pattern(&f, 2, 10, 30, 0);
    ck_assert_uint_eq(part->rows, 20);
    ck_assert_uint_eq(part->cols, 30);
    ck_assert_uint_eq(part->row_edges[0], 10);
    ck_assert_uint_eq(part->row_edges[20], 30);
    for (size_t r = 0; r < 20; r++)
        for (size_t j = 0; j < 30; j++)
            ck_assert_double_eq_tol(part->values[r * 30 + j], full->values[(r + 10) * 40 + j], 1e-15);
    es_grid *binned = pattern(&f, 2, 10, 30, 4);   /* rows: 4 bins of 5, cols: 4 of 7/8 */
    ck_assert_uint_eq(binned->rows, 4);
    ck_assert_uint_eq(binned->cols, 4);
    for (size_t bi = 0; bi < 4; bi++) {
        ck_assert_uint_eq(binned->row_edges[bi], 10 + 5 * bi);
        for (size_t bj = 0; bj < 4; bj++) {
            double sum = 0;
            size_t c0 = binned->col_edges[bj], c1 = binned->col_edges[bj + 1];
            for (size_t p = 10 + 5 * bi; p < 15 + 5 * bi; p++)
                for (size_t j = c0; j < c1; j++)
                    sum += full->values[p * 40 + j];
            ck_assert_double_eq_tol(binned->values[bi * 4 + bj], sum / (double)(5 * (c1 - c0)),
                                    1e-15);
        }
    }
    /* Scores over the range use only its queries. */
    es_attn_scores *sc = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_attn_scores_compute(&f.layer, 10, 30, &sc, &err), 0);
    double self = 0;
    for (size_t p = 10; p < 30; p++)
        self += full->values[p * 40 + p] / 20;
    ck_assert_double_eq_tol(sc->heads[2].self, self, 1e-14);
    es_attn_scores_free(sc);
    es_grid_free(binned);
    es_grid_free(part);
    es_grid_free(full);
    free_fixture(&f);
}
END_TEST

/* Two layers ranked: descending prev, every head once. */
START_TEST(ranking)
{
    fixture f = make_fixture(30, 16, 4), g = make_fixture(30, 16, 8);
    g.layer.layer = 9;
    es_attn_scores *a = NULL, *b = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_attn_scores_compute(&f.layer, 0, 0, &a, &err), 0);
    ck_assert_int_eq(es_attn_scores_compute(&g.layer, 5, 25, &b, &err), 0);
    const es_attn_scores *layers[] = { a, b };
    es_attn_ranking *r = NULL;
    ck_assert_int_eq(es_attn_rank(layers, 2, &r, &err), 0);
    ck_assert_uint_eq(r->count, 12);
    size_t seen[2] = { 0, 0 };
    for (size_t i = 0; i < r->count; i++) {
        if (i)
            ck_assert(r->heads[i - 1].prev >= r->heads[i].prev);
        const es_attn_scores *src = r->heads[i].layer == 4 ? a : b;
        ck_assert_double_eq(src->heads[r->heads[i].head].prev, r->heads[i].prev);
        seen[r->heads[i].layer == 4 ? 0 : 1]++;
    }
    ck_assert_uint_eq(seen[0], 4);
    ck_assert_uint_eq(seen[1], 8);
    ck_assert_fails(es_attn_rank(layers, 0, &r, &err), err, ES_E_PARAM, "layers");
    es_attn_ranking_free(r);
    es_attn_ranking_free(NULL);
    es_attn_scores_free(a);
    es_attn_scores_free(b);
    free_fixture(&f);
    free_fixture(&g);
}
END_TEST

START_TEST(errors)
{
    fixture f = make_fixture(10, 4, 2);
    es_attn_scores *s = NULL;
    es_grid *g = NULL;
    es_err err = { 0 };
    ck_assert_fails(es_attn_scores_compute(&f.layer, 0, 11, &s, &err), err, ES_E_PARAM, "queries");
    ck_assert_fails(es_attn_scores_compute(&f.layer, 5, 5, &s, &err), err, ES_E_PARAM, "queries");
    ck_assert_fails(es_attn_scores_compute(&f.layer, 0, 1, &s, &err), err, ES_E_PARAM, "queries");
    ck_assert_fails(es_attn_pattern(&f.layer, 2, 0, 0, 0, &g, &err), err, ES_E_PARAM, "head");
    es_attn_layer bad = f.layer;
    bad.n_heads = 3;
    ck_assert_fails(es_attn_scores_compute(&bad, 0, 0, &s, &err), err, ES_E_PARAM, "n_heads");
    bad = f.layer;
    bad.eps = NAN;
    ck_assert_fails(es_attn_scores_compute(&bad, 0, 0, &s, &err), err, ES_E_PARAM, "eps");
    bad = f.layer;
    bad.ln_weight = f.bias;
    ck_assert_fails(es_attn_scores_compute(&bad, 0, 0, &s, &err), err, ES_E_INCOMPATIBLE,
                    "ln_weight");
    bad = f.layer;
    bad.qkv_bias = f.g;
    ck_assert_fails(es_attn_scores_compute(&bad, 0, 0, &s, &err), err, ES_E_INCOMPATIBLE,
                    "qkv_bias");
    bad = f.layer;
    bad.qkv_weight = f.pos;
    ck_assert_fails(es_attn_scores_compute(&bad, 0, 0, &s, &err), err, ES_E_INCOMPATIBLE,
                    "qkv_weight");
    ck_assert_ptr_null(s);
    ck_assert_ptr_null(g);
    es_attn_scores_free(NULL);
    free_fixture(&f);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("attention");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, tiny_layer_matches_loops);
    tcase_add_test(tc, pattern_invariants_ranges_bins);
    tcase_add_test(tc, ranking);
    tcase_add_test(tc, errors);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
