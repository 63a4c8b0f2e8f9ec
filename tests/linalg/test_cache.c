/* Decomposition cache: single flight under concurrent requests, key identity,
 * LRU byte budget, oversized results, failed computations retried. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "embedscope/linalg.h"
#include "embedscope/rowsel.h"

#define N_THREADS 16

/* n x d deterministic pseudo-random values. */
static double *random_values(size_t n, size_t d, unsigned seed)
{
    double *x = es_malloc(n * d * sizeof *x);
    for (size_t i = 0; i < n * d; i++)
        x[i] = (double)rand_r(&seed) / RAND_MAX - 0.5;
    return x;
}

/* A matrix taking over x (n x d) with the given id and provenance sha256. */
static es_matrix *matrix_of(const char *id, const char *sha, double *x, size_t n, size_t d)
{
    es_provenance prov = {.source = "test"};
    snprintf(prov.sha256, sizeof prov.sha256, "%s", sha);
    return es_matrix_from_data(id, x, n, d, ES_AXIS_COLUMNS, &prov);
}

static es_matrix *test_matrix(const char *id, const char *sha, size_t n, size_t d, unsigned seed)
{
    return matrix_of(id, sha, random_values(n, d, seed), n, d);
}

static size_t *range_idx(size_t start, size_t n)
{
    size_t *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = start + i;
    return idx;
}

/* One request for the rows [start, start+n) (must succeed). */
static es_svd *request(es_cache *c, const es_matrix *m, size_t start, size_t n, es_centering ctr)
{
    size_t *idx = range_idx(start, n);
    es_svd *s = NULL;
    es_err err;
    ck_assert_msg(es_cache_svd(c, m, idx, n, ctr, &s, &err) == 0, "%s", err.message);
    free(idx);
    return s;
}

static es_cache_stats stats_of(es_cache *c)
{
    es_cache_stats st;
    es_cache_get_stats(c, &st);
    return st;
}

/* ---------------------------------------------------------------- concurrency */

typedef struct job {
    es_cache *cache;
    const es_matrix *m;
    size_t start, n;
    pthread_barrier_t *go;
    es_svd *result;
    int rc;
    es_err err;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    size_t *idx = range_idx(j->start, j->n);
    pthread_barrier_wait(j->go);
    j->rc = es_cache_svd(j->cache, j->m, idx, j->n, ES_CENTER_COLUMNS, &j->result, &j->err);
    free(idx);
    return NULL;
}

/* Start N_THREADS requests at once; thread t asks for rows [starts[t % n_starts], +n). */
static void run_concurrently(es_cache *c, const es_matrix *m, const size_t *starts, size_t n_starts, size_t n,
                             job jobs[N_THREADS])
{
    pthread_t tid[N_THREADS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N_THREADS);
    for (int t = 0; t < N_THREADS; t++) {
        jobs[t] = (job){.cache = c, .m = m, .start = starts[(size_t)t % n_starts], .n = n, .go = &go};
        ck_assert_int_eq(pthread_create(&tid[t], NULL, run_job, &jobs[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++)
        pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&go);
}

START_TEST(single_flight)
{
    es_matrix *m = test_matrix("t/big", "abc", 500, 300, 1);
    es_cache *c = es_cache_new((size_t)1 << 30);
    job jobs[N_THREADS];
    const size_t start = 0;
    run_concurrently(c, m, &start, 1, 500, jobs);
    es_cache_stats st = stats_of(c);
    ck_assert_uint_eq(st.computations, 1);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.hits + st.waits, N_THREADS - 1);
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.bytes, es_svd_bytes(jobs[0].result));
    for (int t = 0; t < N_THREADS; t++) {
        ck_assert_int_eq(jobs[t].rc, 0);
        ck_assert_ptr_eq(jobs[t].result, jobs[0].result);
    }
    ck_assert_str_eq(jobs[0].result->key, "t/big@abc#|axis=columns|500x300|0:500|columns|exact");
    ck_assert(jobs[0].result->recon_error < 1e-12);
    for (int t = 0; t < N_THREADS; t++)
        es_svd_release(jobs[t].result);
    es_cache_free(c);
    es_matrix_release(m);
}
END_TEST

/* 16 threads over 4 keys: each key computed exactly once. */
START_TEST(single_flight_per_key)
{
    es_matrix *m = test_matrix("t/big", "abc", 400, 200, 2);
    es_cache *c = es_cache_new((size_t)1 << 30);
    job jobs[N_THREADS];
    const size_t starts[] = {0, 10, 20, 30};
    run_concurrently(c, m, starts, 4, 300, jobs);
    es_cache_stats st = stats_of(c);
    ck_assert_uint_eq(st.computations, 4);
    ck_assert_uint_eq(st.hits + st.waits + st.misses, N_THREADS);
    ck_assert_uint_eq(st.entries, 4);
    for (int t = 0; t < N_THREADS; t++) {
        ck_assert_int_eq(jobs[t].rc, 0);
        ck_assert_ptr_eq(jobs[t].result, jobs[t % 4].result);
        ck_assert_uint_eq(jobs[t].result->rows[0], starts[t % 4]);
    }
    for (int t = 0; t < N_THREADS; t++)
        es_svd_release(jobs[t].result);
    es_cache_free(c);
    es_matrix_release(m);
}
END_TEST

/* A failing computation: every concurrent requester gets the error, nothing is
 * kept, and a later request computes again. */
START_TEST(failure_is_retried)
{
    double *x = random_values(300, 200, 3);
    x[150 * 200 + 7] = NAN;
    es_matrix *m = matrix_of("t/nan", "abc", x, 300, 200);
    es_cache *c = es_cache_new((size_t)1 << 30);
    job jobs[N_THREADS];
    const size_t start = 0;
    run_concurrently(c, m, &start, 1, 300, jobs);
    for (int t = 0; t < N_THREADS; t++) {
        ck_assert_int_eq(jobs[t].rc, -1);
        ck_assert_ptr_null(jobs[t].result);
        ck_assert_int_eq(jobs[t].err.code, ES_E_NUMERIC);
        ck_assert_str_eq(jobs[t].err.message, jobs[0].err.message);
    }
    ck_assert_ptr_nonnull(strstr(jobs[0].err.message, "item 150"));
    es_cache_stats st = stats_of(c);
    ck_assert_uint_eq(st.hits, 0);
    ck_assert_uint_eq(st.computations, 0);
    ck_assert_uint_eq(st.failed + st.waits, N_THREADS);
    ck_assert_uint_eq(st.entries, 0);
    ck_assert_uint_eq(st.bytes, 0);

    /* the failure was not cached: the next request computes (and fails) again */
    unsigned long before = st.failed;
    size_t *idx = range_idx(0, 300);
    es_svd *s = NULL;
    es_err err;
    ck_assert_int_eq(es_cache_svd(c, m, idx, 300, ES_CENTER_COLUMNS, &s, &err), -1);
    ck_assert_int_eq(err.code, ES_E_NUMERIC);
    ck_assert_ptr_null(s);
    ck_assert_uint_eq(stats_of(c).failed, before + 1);
    ck_assert_uint_eq(stats_of(c).computations, 0);
    /* rows without the NaN are fine */
    ck_assert_int_eq(es_cache_svd(c, m, idx, 150, ES_CENTER_COLUMNS, &s, &err), 0);
    ck_assert_uint_eq(stats_of(c).entries, 1);
    es_svd_release(s);
    free(idx);
    es_cache_free(c);
    es_matrix_release(m);
}
END_TEST

/* ---------------------------------------------------------------- keys and budget */

START_TEST(distinct_keys)
{
    es_matrix *m = test_matrix("t/m", "sha1", 30, 10, 4);
    es_matrix *same_id_other_data = test_matrix("t/m", "sha2", 30, 10, 5);
    es_cache *c = es_cache_new((size_t)1 << 30);
    es_svd *a = request(c, m, 0, 30, ES_CENTER_NONE);
    es_svd *b = request(c, m, 0, 30, ES_CENTER_COLUMNS);
    es_svd *d = request(c, m, 0, 30, ES_CENTER_ROWS);
    es_svd *e = request(c, m, 1, 29, ES_CENTER_NONE);
    es_svd *f = request(c, same_id_other_data, 0, 30, ES_CENTER_NONE);
    es_cache_stats st = stats_of(c);
    ck_assert_uint_eq(st.computations, 5);
    ck_assert_uint_eq(st.hits, 0);
    ck_assert_str_eq(a->key, "t/m@sha1#|axis=columns|30x10|0:30|none|exact");
    ck_assert_str_eq(b->key, "t/m@sha1#|axis=columns|30x10|0:30|columns|exact");
    ck_assert_str_eq(d->key, "t/m@sha1#|axis=columns|30x10|0:30|rows|exact");
    ck_assert_str_eq(e->key, "t/m@sha1#|axis=columns|30x10|1:30|none|exact");
    ck_assert_str_eq(f->key, "t/m@sha2#|axis=columns|30x10|0:30|none|exact");
    ck_assert(a->s[0] != f->s[0]);

    /* the same selection spelled differently is the same key: a hit */
    size_t *idx;
    size_t n;
    es_err err;
    es_rowsel sel = {0};
    ck_assert_int_eq(es_rowsel_parse("-29:", "rows", &sel, &err), 0);
    ck_assert_int_eq(es_rowsel_resolve(&sel, 30, &idx, &n, &err), 0);
    es_rowsel_free(&sel);
    es_svd *e2;
    ck_assert_int_eq(es_cache_svd(c, m, idx, n, ES_CENTER_NONE, &e2, &err), 0);
    free(idx);
    ck_assert_ptr_eq(e2, e);
    st = stats_of(c);
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.computations, 5);
    ck_assert_uint_eq(st.entries, 5);
    ck_assert_uint_eq(st.bytes, es_svd_bytes(a) + es_svd_bytes(b) + es_svd_bytes(d) + es_svd_bytes(e) +
                                    es_svd_bytes(f));
    es_svd *all[] = {a, b, d, e, e2, f};
    for (size_t i = 0; i < 6; i++)
        es_svd_release(all[i]);
    es_cache_free(c);
    es_matrix_release(m);
    es_matrix_release(same_id_other_data);
}
END_TEST

/* Many inserts into a budget of about 3.5 entries: the budget always holds, the
 * least recently used entry goes first, results held by callers survive eviction. */
START_TEST(byte_budget)
{
    es_matrix *m = test_matrix("t/m", "abc", 100, 16, 6);
    es_cache *c = es_cache_new(0); /* keeps nothing: used to measure one entry */
    es_svd *probe = request(c, m, 10, 20, ES_CENTER_NONE);
    size_t one = es_svd_bytes(probe);
    es_svd_release(probe);
    es_cache_free(c);
    c = es_cache_new(one * 7 / 2);
    es_svd *first = request(c, m, 10, 20, ES_CENTER_NONE);
    double s0 = first->s[0];
    for (size_t i = 11; i < 60; i++) {
        es_svd *s = request(c, m, i, 20, ES_CENTER_NONE);
        ck_assert_uint_eq(es_svd_bytes(s), one); /* keys of equal length: equal sizes */
        es_svd_release(s);
        es_cache_stats st = stats_of(c);
        ck_assert_uint_le(st.bytes, st.max_bytes);
        ck_assert_uint_eq(st.bytes, st.entries * one);
        ck_assert_uint_eq(st.entries, i - 10 + 1 < 3 ? i - 10 + 1 : 3);
    }
    es_cache_stats st = stats_of(c);
    ck_assert_uint_eq(st.computations, 50);
    ck_assert_uint_eq(st.evictions, 47);
    ck_assert_double_eq(first->s[0], s0); /* the caller's reference outlived its eviction */
    es_svd_release(first);

    /* LRU: entries 57, 58, 59 are kept; touch 57, insert 60 -> 58 is evicted */
    es_svd_release(request(c, m, 57, 20, ES_CENTER_NONE));
    es_svd_release(request(c, m, 60, 20, ES_CENTER_NONE));
    es_svd_release(request(c, m, 57, 20, ES_CENTER_NONE));
    st = stats_of(c);
    ck_assert_uint_eq(st.hits, 2);
    ck_assert_uint_eq(st.computations, 51);
    es_svd_release(request(c, m, 58, 20, ES_CENTER_NONE));
    ck_assert_uint_eq(stats_of(c).computations, 52);
    es_cache_free(c);
    es_matrix_release(m);
}
END_TEST

START_TEST(oversized_not_kept)
{
    es_matrix *m = test_matrix("t/m", "abc", 60, 40, 7);
    es_cache *c = es_cache_new(1000);
    es_svd *a = request(c, m, 0, 60, ES_CENTER_COLUMNS);
    ck_assert_uint_gt(es_svd_bytes(a), 1000);
    ck_assert(a->recon_error < 1e-12);
    ck_assert_str_eq(a->key, "t/m@abc#|axis=columns|60x40|0:60|columns|exact");
    es_cache_stats st = stats_of(c);
    ck_assert_uint_eq(st.entries, 0);
    ck_assert_uint_eq(st.bytes, 0);
    es_svd *b = request(c, m, 0, 60, ES_CENTER_COLUMNS);
    ck_assert_ptr_ne(a, b);
    ck_assert_double_eq(a->s[0], b->s[0]);
    ck_assert_uint_eq(stats_of(c).computations, 2);
    es_svd_release(a);
    es_svd_release(b);
    es_cache_free(c);
    es_matrix_release(m);
}
END_TEST

/* A tall exact decomposition over the budget with its left vectors (charged
 * from the start) but not without them is kept in parts: four identical
 * requests compute once, its left vectors are formed per use and never kept
 * (the bytes charged stay those of the parts), and they equal those of a
 * decomposition that keeps them. Below even the parts: refused, counted. */
START_TEST(kept_in_parts)
{
    es_matrix *m = test_matrix("t/m", "abc", 400, 20, 8);
    es_cache *probe = es_cache_new(0);
    es_svd *whole = request(probe, m, 0, 400, ES_CENTER_COLUMNS);
    ck_assert(!whole->left_transient);
    ck_assert_uint_eq(stats_of(probe).refused, 1);
    size_t full = es_svd_bytes(whole), parts = es_svd_parts_bytes(whole);
    ck_assert_uint_lt(parts + 400 * 20 * sizeof(double) / 2, full);
    es_cache *c = es_cache_new((parts + full) / 2);
    es_svd *s[4];
    for (int i = 0; i < 4; i++)
        s[i] = request(c, m, 0, 400, ES_CENTER_COLUMNS);
    es_cache_stats st = stats_of(c);
    ck_assert_uint_eq(st.computations, 1);
    ck_assert_uint_eq(st.hits, 3);
    ck_assert_uint_eq(st.parts, 1);
    ck_assert_uint_eq(st.refused, 0);
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.bytes, parts);
    ck_assert(s[0]->left_transient && s[3] == s[0]);
    size_t ld = 0, ld_whole = 0;
    double *owned = NULL, *none = NULL;
    es_err err = {0};
    const double *u = es_svd_left_for(s[0], m, 5, &ld, &owned, &err);
    ck_assert_msg(u != NULL, "%s", err.message);
    ck_assert_ptr_eq(u, owned);
    ck_assert_ptr_null(s[0]->left); /* formed for the call, not kept */
    ck_assert_uint_eq(es_svd_bytes(s[0]), parts);
    const double *kept = es_svd_left_for(whole, m, 5, &ld_whole, &none, &err);
    ck_assert_ptr_null(none); /* not in parts: es_svd_left's kept vectors */
    ck_assert_ptr_nonnull(whole->left);
    for (size_t i = 0; i < 400; i++)
        for (size_t j = 0; j < 5; j++)
            ck_assert_double_eq_tol(u[i * ld + j], kept[i * ld_whole + j], 1e-12);
    free(owned);
    for (int i = 0; i < 4; i++)
        es_svd_release(s[i]);
    es_svd_release(whole);
    es_cache_free(probe);
    es_cache_free(c);
    es_matrix_release(m);
}
END_TEST

/* One request through es_cache_decompose for all items (must succeed). */
static es_svd *decompose(es_cache *c, const es_matrix *m, es_method method, size_t k)
{
    size_t n = es_matrix_items(m), *idx = range_idx(0, n);
    es_svd *s = NULL;
    es_err err = {0};
    ck_assert_msg(es_cache_decompose(c, m, idx, n, ES_CENTER_NONE, method, k, &s, &err) == 0, "%s", err.message);
    free(idx);
    return s;
}

/* Top-k entries: keyed by method and K (k rounded up to 16), shared by nearby
 * k, apart from the exact entry; a failed certificate answers exactly with a
 * note; auto stays exact on a small block and takes a cached exact one. */
START_TEST(methods_in_keys)
{
    es_matrix *m = NULL, *flat = NULL;
    es_err err = {0};
    ck_assert_msg(es_gen_gaussian("g/decay", 300, 40, 1.0, 5.0, 3, &m, &err) == 0, "%s", err.message);
    ck_assert_msg(es_gen_gaussian("g/flat", 300, 40, 0.0, 5.0, 3, &flat, &err) == 0, "%s", err.message);
    es_cache *c = es_cache_new(64 << 20);
    es_svd *t3 = decompose(c, m, ES_METHOD_TOPK, 3), *t10 = decompose(c, m, ES_METHOD_TOPK, 10);
    ck_assert_ptr_eq(t3, t10);
    ck_assert_str_eq(t3->method, "topk");
    ck_assert_uint_eq(t3->r, 16);
    ck_assert(t3->cert.passed);
    ck_assert_str_eq(t3->note, "");
    ck_assert_ptr_nonnull(strstr(t3->key, "|topk:16"));
    es_svd *e = decompose(c, m, ES_METHOD_EXACT, 3);
    ck_assert_ptr_ne(e, t3);
    ck_assert_str_eq(e->method, "exact");
    ck_assert_ptr_nonnull(strstr(e->key, "|exact"));
    es_svd *a = decompose(c, m, ES_METHOD_AUTO, 3);
    ck_assert_ptr_eq(a, e); /* small block: auto is exact */
    es_svd_release(a);
    es_svd_release(e);
    ck_assert_uint_eq(stats_of(c).computations, 2);
    es_svd *f = decompose(c, flat, ES_METHOD_TOPK, 3);
    ck_assert_str_eq(f->method, "exact");
    ck_assert_uint_eq(f->r, 40);
    ck_assert_ptr_nonnull(strstr(f->note, "certificate missed the tolerance"));
    ck_assert_ptr_nonnull(strstr(f->key, "|topk:16"));
    es_svd *too_many = (es_svd *)0x1;
    size_t *idx = range_idx(0, 300);
    ck_assert_int_eq(es_cache_decompose(c, m, idx, 300, ES_CENTER_NONE, ES_METHOD_TOPK, 40, &too_many, &err), -1);
    ck_assert_str_eq(err.param, "k");
    free(idx);
    es_svd_release(f);
    es_svd_release(t3);
    es_svd_release(t10);
    es_cache_free(c);
    es_matrix_release(m);
    es_matrix_release(flat);
}
END_TEST

/* Values-only entries: keyed "|values" apart from the exact one (whatever k),
 * hit on the next request; the exact entry keeps its vectors. */
START_TEST(values_in_keys)
{
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_msg(es_gen_gaussian("g/decay", 300, 40, 1.0, 5.0, 3, &m, &err) == 0, "%s", err.message);
    es_cache *c = es_cache_new(64 << 20);
    es_svd *v = decompose(c, m, ES_METHOD_VALUES, 0), *again = decompose(c, m, ES_METHOD_VALUES, 3);
    ck_assert_ptr_eq(v, again);
    ck_assert_str_eq(v->method, "values");
    ck_assert_ptr_null(v->vt);
    ck_assert_ptr_nonnull(strstr(v->key, "|none|values"));
    es_svd *e = decompose(c, m, ES_METHOD_AUTO, 0);
    ck_assert_ptr_ne(e, v);
    ck_assert_str_eq(e->method, "exact");
    ck_assert_ptr_nonnull(e->vt);
    es_cache_stats st = stats_of(c);
    ck_assert_uint_eq(st.computations, 2);
    ck_assert_uint_eq(st.hits, 1);
    es_svd_release(v);
    es_svd_release(again);
    es_svd_release(e);
    es_cache_free(c);
    es_matrix_release(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("cache");
    TCase *tc = tcase_create("cache");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, single_flight);
    tcase_add_test(tc, single_flight_per_key);
    tcase_add_test(tc, failure_is_retried);
    tcase_add_test(tc, distinct_keys);
    tcase_add_test(tc, byte_budget);
    tcase_add_test(tc, oversized_not_kept);
    tcase_add_test(tc, kept_in_parts);
    tcase_add_test(tc, methods_in_keys);
    tcase_add_test(tc, values_in_keys);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
