/* UMAP: the fitted curve against umap-learn's find_ab_params, planted clusters kept
 * apart (every point's nearest layout neighbour in its own cluster) by both
 * metrics, the same bits for the same seed and others for another, the layout
 * moved from its start, a stop asked between epochs, and errors. umap-learn on a
 * 50257 x 768 matrix of 20 planted clusters is compared in bench/umap_learn_compare.py. */
#include "analysis/helpers.h"
#include "check_main.h"
#include "analysis/internal.h"

#include <cblas.h>

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

/* The layout's parts run on one thread or two (es_blas_job_threads: OpenBLAS's
 * count here) and give the same bits either way. */
START_TEST(same_bits_any_threads)
{
    es_matrix *m = planted();
    int before = openblas_get_num_threads();
    openblas_set_num_threads(1);
    es_umap *one = layout_of(m, ES_METRIC_COSINE, 5);
    openblas_set_num_threads(2);
    es_umap *two = layout_of(m, ES_METRIC_COSINE, 5);
    openblas_set_num_threads(before);
    ck_assert(memcmp(one->coords, two->coords, one->n * 2 * sizeof(double)) == 0);
    ck_clusters_apart(two);
    es_umap_free(one);
    es_umap_free(two);
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

/* A matrix full of near-ties: row 0 and NT rows e_0 (1 + delta) + e_a, at the same
 * cosine (and nearly the same euclidean) distance from row 0 and from each other up
 * to delta ~ 1e-9 (which float32 cannot see and double can), RANDOM seeded
 * Gaussian rows, and DUPS exact copies of earlier rows (ties to the lower index). */
#define KD 64
#define NT 60
#define RANDOM 150
#define DUPS 6
#define KN (1 + NT + RANDOM + DUPS)
static double *near_ties(void)
{
    double *x = es_calloc(KN * KD, sizeof *x);
    uint64_t s = 777;
    x[0] = 1;
    for (size_t i = 1; i <= NT; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i * KD] = 1 + 1e-9 * ((double)(s >> 11) / 9007199254740992.0);
        x[i * KD + i] = 1;
    }
    for (size_t i = 1 + NT; i < 1 + NT + RANDOM; i++)
        for (size_t t = 0; t < KD; t += 2) { /* Box-Muller */
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double u1 = ((double)(s >> 11) + 1) / 9007199254740993.0;
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double u2 = (double)(s >> 11) / 9007199254740992.0, r = sqrt(-2 * log(u1));
            x[i * KD + t] = r * cos(2 * M_PI * u2);
            x[i * KD + t + 1] = r * sin(2 * M_PI * u2);
        }
    for (size_t i = 0; i < DUPS; i++)
        memcpy(x + (KN - DUPS + i) * KD, x + (3 + 37 * i) * KD, KD * sizeof *x);
    return x;
}

/* The exact graph by brute force: every pair scored in double as umap.c scores
 * its candidates, nearest first, ties to the lower index. */
static void brute_knn(double *x, es_metric metric, size_t k, size_t *nbr, double *dist)
{
    if (metric == ES_METRIC_COSINE)
        es_normalise_rows(x, KN, KD);
    for (size_t i = 0; i < KN; i++) {
        double dd[KN];
        bool used[KN] = {false};
        for (size_t j = 0; j < KN; j++) {
            double s = 0;
            if (metric == ES_METRIC_COSINE) {
                s = fmax(1.0 - cblas_ddot(KD, x + i * KD, 1, x + j * KD, 1), 0.0);
            } else {
                for (size_t t = 0; t < KD; t++)
                    s += (x[i * KD + t] - x[j * KD + t]) * (x[i * KD + t] - x[j * KD + t]);
            }
            dd[j] = s;
        }
        used[i] = true;
        for (size_t c = 0; c < k; c++) {
            size_t best = KN;
            for (size_t j = 0; j < KN; j++)
                if (!used[j] && (best == KN || dd[j] < dd[best]))
                    best = j;
            used[best] = true;
            nbr[i * k + c] = best;
            dist[i * k + c] = metric == ES_METRIC_COSINE ? dd[best] : sqrt(dd[best]);
        }
    }
}

/* The graph from float32 candidates equals the brute-force double graph, index
 * for index and bit for bit, on near-ties float32 cannot order and on exact
 * duplicates, in one block and in blocks of 16 rows (pairs across blocks). */
START_TEST(knn_graph_exact)
{
    for (int metric = 0; metric < 2; metric++)
        for (size_t k = 9; k <= 30; k += 21)
            for (size_t block = 0; block <= 16; block += 16) {
                double *x = near_ties(), *ref = near_ties(), *dist = es_malloc(KN * k * sizeof *dist),
                       *want_d = es_malloc(KN * k * sizeof *want_d);
                size_t *nbr = es_malloc(KN * k * sizeof *nbr), *want = es_malloc(KN * k * sizeof *want);
                es_err err = {0};
                ck_assert_int_eq(es_umap_knn(x, KN, KD, (es_metric)metric, k, block, nbr, dist, &err), 0);
                brute_knn(ref, (es_metric)metric, k, want, want_d);
                for (size_t i = 0; i < KN * k; i++)
                    ck_assert_msg(nbr[i] == want[i] && dist[i] == want_d[i],
                                  "metric %d k %zu block %zu: row %zu's neighbour %zu is %zu (%.17g), want %zu "
                                  "(%.17g)", metric, k, block, i / k, i % k, nbr[i], dist[i], want[i], want_d[i]);
                free(x);
                free(ref);
                free(dist);
                free(want_d);
                free(nbr);
                free(want);
            }
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
    tcase_add_test(tc, knn_graph_exact);
    tcase_add_test(tc, same_bits_any_threads);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(suite)
