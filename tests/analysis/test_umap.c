/* UMAP: the fitted curve against umap-learn's find_ab_params, planted clusters kept
 * apart (every point's nearest layout neighbour in its own cluster) by both
 * metrics, the same bits for the same seed and others for another, the layout
 * moved from its start, a stop asked between epochs, and errors. umap-learn on a
 * 50257 x 768 matrix of 20 planted clusters is compared in bench/umap_learn_compare.py. */
#include "analysis/helpers.h"
#include "check_main.h"

#include <stdatomic.h>

#define CLUSTERS 4
#define PER 40
#define DIM 12

/* CLUSTERS x PER points in DIM dimensions: centre c has 10 on axis c (and 3 on
 * the last axis, so cosine sees them apart too), each point plus seeded noise
 * of amplitude 1. Row i belongs to cluster i % CLUSTERS (interleaved on purpose). */
static es_matrix *planted(void)
{
    double *x = es_malloc(CLUSTERS * PER * DIM * sizeof *x);
    uint64_t s = 12345;
    for (size_t i = 0; i < CLUSTERS * PER; i++)
        for (size_t j = 0; j < DIM; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double noise = (double)(s >> 11) / 9007199254740992.0 * 2 - 1;
            x[i * DIM + j] = (j == i % CLUSTERS ? 10.0 : j == DIM - 1 ? 3.0 : 0.0) + noise;
        }
    es_matrix *m = matrix_of(x, CLUSTERS * PER, DIM);
    free(x);
    return m;
}

/* A start: the first two coordinates of each point (any start works; the tests check the layout's result). */
static double *start_of(const es_matrix *m, size_t n)
{
    double *init = es_malloc(n * 2 * sizeof *init);
    for (size_t i = 0; i < n; i++) {
        init[2 * i] = es_matrix_at(m, i, 4 + i % 3);
        init[2 * i + 1] = es_matrix_at(m, i, 7 + i % 2);
    }
    return init;
}

static es_umap *layout_of(const es_matrix *m, es_metric metric, uint64_t seed)
{
    size_t n = es_matrix_items(m), *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    double *init = start_of(m, n);
    es_umap_params p = {.n_neighbors = 10, .dims = 2, .epochs = 200, .min_dist = 0.1, .metric = metric,
                        .seed = seed};
    es_umap *u = NULL;
    es_err err = {0};
    ck_assert_msg(es_umap_items(m, idx, n, &p, init, &u, &err) == 0, "%s", err.message);
    free(idx);
    free(init);
    return u;
}

/* umap-learn 0.5.3's find_ab_params (scipy's curve_fit), printed by Debian's umap-learn:
 * min_dist 0.1 -> a 1.5769434604, b 0.8950608781; 0.5 -> 0.5830300205, 1.3341669925;
 * 0 -> 1.9328083979, 0.7904949734. Two least-squares solvers stop apart on a flat minimum. */
START_TEST(curve_as_umap_learn)
{
    const double want[][3] = {{0.1, 1.5769434604, 0.8950608781}, {0.5, 0.5830300205, 1.3341669925},
                              {0.0, 1.9328083979, 0.7904949734}};
    for (size_t i = 0; i < 3; i++) {
        double a, b;
        es_umap_curve(1.0, want[i][0], &a, &b);
        ck_assert_msg(fabs(a - want[i][1]) < 1e-4 * want[i][1] && fabs(b - want[i][2]) < 1e-4 * want[i][2],
                      "min_dist %g: a %.10g b %.10g", want[i][0], a, b);
    }
}
END_TEST

/* Every point's nearest neighbour in the layout belongs to its own cluster. */
static void ck_clusters_apart(const es_umap *u)
{
    for (size_t i = 0; i < u->n; i++) {
        size_t best = i;
        double bd = INFINITY;
        for (size_t j = 0; j < u->n; j++) {
            if (j == i)
                continue;
            double dx = u->coords[2 * i] - u->coords[2 * j], dy = u->coords[2 * i + 1] - u->coords[2 * j + 1];
            if (dx * dx + dy * dy < bd) {
                bd = dx * dx + dy * dy;
                best = j;
            }
        }
        ck_assert_msg(u->rows[best] % CLUSTERS == u->rows[i] % CLUSTERS, "point %zu's nearest is %zu", i, best);
    }
}

START_TEST(planted_clusters_stay_apart)
{
    es_matrix *m = planted();
    for (int metric = 0; metric < 2; metric++) {
        es_umap *u = layout_of(m, (es_metric)metric, 7);
        ck_assert_uint_eq(u->n, CLUSTERS * PER);
        ck_assert_uint_eq(u->epochs, 200);
        ck_assert(u->edges >= CLUSTERS * PER * 9 / 2); /* every point's 9 neighbours, pairs counted once */
        ck_clusters_apart(u);
        es_umap_free(u);
    }
    es_matrix_release(m);
}
END_TEST

START_TEST(seeded)
{
    es_matrix *m = planted();
    es_umap *a = layout_of(m, ES_METRIC_COSINE, 3), *b = layout_of(m, ES_METRIC_COSINE, 3),
            *c = layout_of(m, ES_METRIC_COSINE, 4);
    ck_assert(memcmp(a->coords, b->coords, a->n * 2 * sizeof(double)) == 0);
    ck_assert(memcmp(a->coords, c->coords, a->n * 2 * sizeof(double)) != 0);
    es_umap_free(a);
    es_umap_free(b);
    es_umap_free(c);
    es_matrix_release(m);
}
END_TEST

START_TEST(defaults_and_errors)
{
    ck_assert_uint_eq(es_umap_epochs(10000, 0), 500);
    ck_assert_uint_eq(es_umap_epochs(10001, 0), 200);
    ck_assert_uint_eq(es_umap_epochs(50, 7), 7);
    es_matrix *m = planted();
    size_t idx[] = {0, 1, 2, 3, 4};
    double init[10] = {0};
    es_umap_params p = {.n_neighbors = 6, .dims = 2, .epochs = 10, .min_dist = 0.1};
    es_umap *u = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_umap_items(m, idx, 5, &p, init, &u, &err), -1);
    ck_assert_str_eq(err.param, "n_neighbors");
    p.n_neighbors = 2;
    ck_assert_int_eq(es_umap_items(m, idx, 2, &p, init, &u, &err), -1);
    ck_assert_str_eq(err.param, "rows");
    es_matrix_release(m);
}
END_TEST

/* A tracker that says stop after a few steps: the layout ends between epochs with its error. */
static int stop_after_three(void *arg, es_err *err)
{
    es_progress *p = arg;
    return atomic_load(&p->done) >= 3 ? es_fail(err, ES_E_CANCELLED, "", "stopped") : 0;
}

START_TEST(stops_when_asked)
{
    es_matrix *m = planted();
    es_progress pr = {.check = stop_after_three};
    pr.arg = &pr;
    es_progress_attach(&pr);
    size_t n = es_matrix_items(m), *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    double *init = start_of(m, n);
    es_umap_params p = {.n_neighbors = 10, .dims = 2, .epochs = 500, .min_dist = 0.1};
    es_umap *u = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_umap_items(m, idx, n, &p, init, &u, &err), -1);
    ck_assert_int_eq(err.code, ES_E_CANCELLED);
    ck_assert_str_eq(atomic_load(&pr.pass), "layout");
    ck_assert_uint_eq(atomic_load(&pr.done), 3);
    es_progress_attach(NULL);
    free(idx);
    free(init);
    es_matrix_release(m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("umap");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, curve_as_umap_learn);
    tcase_add_test(tc, planted_clusters_stay_apart);
    tcase_add_test(tc, seeded);
    tcase_add_test(tc, defaults_and_errors);
    tcase_add_test(tc, stops_when_asked);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(suite)
