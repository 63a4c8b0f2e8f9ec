/* Decompositions on disk (es_cache_set_dir): a second cache on the same
 * directory reads what the first wrote, bit for bit, for tall, wide, top-k and
 * values-only decompositions; corrupt, truncated and foreign files are rejected, deleted
 * and recomputed, never served. The single flight across processes: a key whose
 * lock file another holder has locked is waited for and read from the file it
 * writes; a holder that dies is taken over. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "tmpdir.h"
#include "embedscope/linalg.h"

/* The one .svd file in dir (fails the test otherwise). Caller frees. */
static char *only_file(const char *dir)
{
    DIR *d = opendir(dir);
    char *found = NULL;
    int count = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".svd")) {
            count++;
            free(found);
            found = es_asprintf("%s/%s", dir, e->d_name);
        }
    closedir(d);
    ck_assert_int_eq(count, 1);
    ck_assert_ptr_null(strstr(found, ".tmp"));
    return found;
}

static es_cache *cache_on(const char *dir)
{
    es_cache *c = es_cache_new(64 << 20);
    es_err err = {0};
    ck_assert_msg(es_cache_set_dir(c, dir, &err) == 0, "%s", err.message);
    return c;
}

static es_svd *get(es_cache *c, const es_matrix *m, es_centering ctr, es_method method, size_t k)
{
    size_t n = es_matrix_items(m), *idx = es_malloc(n * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    es_svd *s = NULL;
    es_err err = {0};
    ck_assert_msg(es_cache_decompose(c, m, idx, n, ctr, method, k, &s, &err) == 0, "%s", err.message);
    free(idx);
    return s;
}

static es_cache_stats stats(es_cache *c)
{
    es_cache_stats st;
    es_cache_get_stats(c, &st);
    return st;
}

/* Every value the analyses read is identical; the vectors too, or (values)
 * neither holds any. */
static void assert_same(const es_svd *a, const es_svd *b, const es_matrix *m)
{
    ck_assert_uint_eq(a->n, b->n);
    ck_assert_uint_eq(a->d, b->d);
    ck_assert_uint_eq(a->r, b->r);
    ck_assert_str_eq(a->key, b->key);
    ck_assert_str_eq(a->method, b->method);
    ck_assert_str_eq(a->solver, b->solver);
    ck_assert_str_eq(a->note, b->note);
    ck_assert_str_eq(a->blas_core, b->blas_core);
    ck_assert_uint_eq(a->threads, b->threads);
    ck_assert_int_eq(a->centering, b->centering);
    ck_assert_mem_eq(a->rows, b->rows, a->n * sizeof *a->rows);
    ck_assert_mem_eq(a->s, b->s, a->r * sizeof *a->s);
    ck_assert((a->mean == NULL) == (b->mean == NULL));
    if (a->mean)
        ck_assert_mem_eq(a->mean, b->mean, a->d * sizeof *a->mean);
    ck_assert(a->recon_error == b->recon_error && a->orth_error == b->orth_error && a->total_ss == b->total_ss);
    ck_assert(a->cert.passed == b->cert.passed && a->cert.vector_bound == b->cert.vector_bound);
    ck_assert((a->vt == NULL) == (b->vt == NULL));
    if (!a->vt) {
        ck_assert(b->vb == NULL && b->brd == NULL && b->left == NULL);
        return;
    }
    ck_assert_mem_eq(a->vt, b->vt, a->r * a->d * sizeof *a->vt);
    size_t la = 0, lb = 0;
    es_err err = {0};
    const double *ua = es_svd_left(a, m, a->r, &la, &err), *ub = es_svd_left(b, m, b->r, &lb, &err);
    ck_assert_ptr_nonnull(ua);
    ck_assert_ptr_nonnull(ub);
    ck_assert_uint_eq(la, lb);
    ck_assert_mem_eq(ua, ub, a->n * la * sizeof *ua);
}

/* Write with one cache, read with a second on the same directory. */
static void round_trip(const es_matrix *m, es_centering ctr, es_method method, size_t k, const char *want_method)
{
    char *dir = es_test_fresh_dir("embedscope-persist");
    es_cache *first = cache_on(dir);
    es_svd *a = get(first, m, ctr, method, k);
    ck_assert_str_eq(a->method, want_method);
    ck_assert_uint_eq(stats(first).disk_writes, 1);
    ck_assert_uint_eq(stats(first).disk_loads, 0);
    char *file = only_file(dir);
    es_cache *second = cache_on(dir);
    es_svd *b = get(second, m, ctr, method, k);
    ck_assert_uint_eq(stats(second).disk_loads, 1);
    ck_assert_uint_eq(stats(second).disk_writes, 0);
    assert_same(a, b, m);
    es_svd_release(a);
    es_svd_release(b);
    es_cache_free(first);
    es_cache_free(second);
    free(file);
    es_test_remove_dir(dir);
}

static es_matrix *gaussian(const char *id, size_t rows, size_t cols, double decay)
{
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_msg(es_gen_gaussian(id, rows, cols, decay, 2.0, 9, &m, &err) == 0, "%s", err.message);
    return m;
}

START_TEST(round_trips)
{
    es_matrix *tall = gaussian("g/tall", 300, 40, 1.0), *wide = gaussian("g/wide", 20, 50, 1.0);
    round_trip(tall, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0, "exact");
    round_trip(tall, ES_CENTER_NONE, ES_METHOD_TOPK, 5, "topk");
    round_trip(wide, ES_CENTER_ROWS, ES_METHOD_EXACT, 0, "exact");
    round_trip(tall, ES_CENTER_COLUMNS, ES_METHOD_VALUES, 0, "values"); /* rows, s and the mean only */
    round_trip(wide, ES_CENTER_NONE, ES_METHOD_VALUES, 0, "values");
    es_matrix *flat = gaussian("g/flat", 300, 40, 0.0); /* top-k falls back: the note survives */
    round_trip(flat, ES_CENTER_NONE, ES_METHOD_TOPK, 5, "exact");
    es_matrix_release(tall);
    es_matrix_release(wide);
    es_matrix_release(flat);
}
END_TEST

/* Damage the only file of a warm directory with `damage`, then a new cache must
 * reject it (counted), compute again, write a good file and serve the same values. */
static void rejected_after(void (*damage)(const char *path, const char *dir))
{
    es_matrix *m = gaussian("g/m", 200, 30, 1.0);
    char *dir = es_test_fresh_dir("embedscope-persist");
    es_cache *first = cache_on(dir);
    es_svd *good = get(first, m, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0);
    char *file = only_file(dir);
    damage(file, dir);
    es_cache *second = cache_on(dir);
    es_svd *again = get(second, m, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0);
    es_cache_stats st = stats(second);
    ck_assert_uint_eq(st.disk_rejected, 1);
    ck_assert_uint_eq(st.disk_loads, 0);
    ck_assert_uint_eq(st.disk_writes, 1);
    assert_same(good, again, m);
    es_cache *third = cache_on(dir); /* the rewritten file is good */
    es_svd *read = get(third, m, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0);
    ck_assert_uint_eq(stats(third).disk_loads, 1);
    assert_same(good, read, m);
    es_svd_release(good);
    es_svd_release(again);
    es_svd_release(read);
    es_cache_free(first);
    es_cache_free(second);
    es_cache_free(third);
    free(file);
    es_test_remove_dir(dir);
    es_matrix_release(m);
}

static void flip_a_byte(const char *path, const char *dir)
{
    (void)dir;
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 1000, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 1000, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static void truncate_it(const char *path, const char *dir)
{
    (void)dir;
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size - 100), 0);
}

/* A valid file of another decomposition under this key's name. */
static void replace_with_foreign(const char *path, const char *dir)
{
    es_matrix *other = gaussian("g/other", 200, 30, 0.5);
    es_cache *c = es_cache_new(64 << 20);
    char *other_dir = es_asprintf("%s/other", dir);
    es_err err = {0};
    ck_assert_int_eq(es_cache_set_dir(c, other_dir, &err), 0);
    es_svd_release(get(c, other, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0));
    char *other_file = only_file(other_dir);
    ck_assert_int_eq(rename(other_file, path), 0);
    rmdir(other_dir);
    free(other_file);
    free(other_dir);
    es_cache_free(c);
    es_matrix_release(other);
}

/* cache_dir is created with its missing parents (mkdir -p). */
START_TEST(cache_dir_created_with_its_parents)
{
    char base[] = "/tmp/embedscope-persist-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(base));
    char *dir = es_asprintf("%s/a/b/c", base);
    es_cache *c = es_cache_new(64 << 20);
    es_err err = {0};
    ck_assert_msg(es_cache_set_dir(c, dir, &err) == 0, "%s", err.message);
    struct stat st;
    ck_assert_int_eq(stat(dir, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert_int_eq(es_cache_set_dir(c, dir, &err), 0); /* existing: fine */
    char *file = es_asprintf("%s/a/file", base);
    FILE *f = fopen(file, "w");
    fclose(f);
    char *under_file = es_asprintf("%s/a/file/d", base);
    ck_assert_int_eq(es_cache_set_dir(c, under_file, &err), -1);
    ck_assert_str_eq(err.param, "cache_dir");
    es_cache_free(c);
    char *cmd = es_asprintf("rm -rf %s", base);
    ck_assert_int_eq(system(cmd), 0);
    free(cmd);
    free(under_file);
    free(file);
    free(dir);
}
END_TEST

START_TEST(corrupt_file_rejected) { rejected_after(flip_a_byte); }
END_TEST
START_TEST(truncated_file_rejected) { rejected_after(truncate_it); }
END_TEST
START_TEST(foreign_file_rejected) { rejected_after(replace_with_foreign); }
END_TEST

START_TEST(unusable_dir)
{
    es_cache *c = es_cache_new(1 << 20);
    es_err err = {0};
    ck_assert_int_eq(es_cache_set_dir(c, "/proc/embedscope-no/such", &err), -1);
    ck_assert_int_eq(err.code, ES_E_IO);
    ck_assert_str_eq(err.param, "cache_dir");
    es_cache_free(c);
}
END_TEST

/* A decomposition requested on its own thread (as a second process's request would be). */
typedef struct requester {
    pthread_t thread;
    es_cache *cache;
    const es_matrix *m;
    es_svd *got;
    atomic_bool done;
} requester;

static void *request_run(void *arg)
{
    requester *r = arg;
    r->got = get(r->cache, r->m, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0);
    atomic_store(&r->done, true);
    return NULL;
}

static void start_request(requester *r, es_cache *c, const es_matrix *m)
{
    *r = (requester){.cache = c, .m = m};
    ck_assert_int_eq(pthread_create(&r->thread, NULL, request_run, r), 0);
}

/* Long enough for a requester to reach the lock and find it held. */
static void pause_a_while(void)
{
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
}

/* The name of m's decomposition file (computed once in a scratch directory, so the
 * caller also holds the good file: *good, under scratch). Caller frees. */
static char *file_name_of(const es_matrix *m, char **scratch, char **good)
{
    *scratch = es_test_fresh_dir("embedscope-persist-scratch");
    es_cache *c = cache_on(*scratch);
    es_svd_release(get(c, m, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0));
    es_cache_free(c);
    *good = only_file(*scratch);
    return es_strdup(strrchr(*good, '/') + 1);
}

/* "<dir>/<name without .svd>.lock" */
static char *lock_path_of(const char *dir, const char *svd_name)
{
    return es_asprintf("%s/%.*s.lock", dir, (int)(strlen(svd_name) - 4), svd_name);
}

START_TEST(waits_for_the_holder_then_reads_its_file)
{
    es_matrix *m = gaussian("g/m", 200, 30, 1.0);
    char *scratch, *good, *name = file_name_of(m, &scratch, &good);
    char *dir = es_test_fresh_dir("embedscope-persist");
    char *lock = lock_path_of(dir, name), *target = es_asprintf("%s/%s", dir, name);
    int fd = open(lock, O_RDWR | O_CREAT, 0644); /* the other process, computing */
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(flock(fd, LOCK_EX), 0);
    es_cache *c = cache_on(dir);
    requester r;
    start_request(&r, c, m);
    pause_a_while();
    ck_assert(!atomic_load(&r.done)); /* waiting, not computing */
    ck_assert_int_eq(rename(good, target), 0); /* the holder's result lands, then it lets go */
    ck_assert_int_eq(unlink(lock), 0);
    close(fd);
    pthread_join(r.thread, NULL);
    es_cache_stats st = stats(c);
    ck_assert_uint_eq(st.computations, 0);
    ck_assert_uint_eq(st.disk_loads, 1);
    ck_assert_uint_eq(st.disk_waits, 1);
    ck_assert_int_eq(access(lock, F_OK), -1);
    es_svd_release(r.got);
    es_cache_free(c);
    es_test_remove_dir(dir);
    es_test_remove_dir(scratch);
    free(lock);
    free(target);
    free(good);
    free(name);
    es_matrix_release(m);
}
END_TEST

START_TEST(a_dead_holder_is_taken_over)
{
    es_matrix *m = gaussian("g/m", 200, 30, 1.0);
    char *scratch, *good, *name = file_name_of(m, &scratch, &good);
    char *dir = es_test_fresh_dir("embedscope-persist");
    char *lock = lock_path_of(dir, name);
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t holder = fork();
    ck_assert_int_ge(holder, 0);
    if (holder == 0) { /* takes the lock, says so, then computes forever */
        int fd = open(lock, O_RDWR | O_CREAT, 0644);
        if (fd < 0 || flock(fd, LOCK_EX) != 0 || write(ready[1], "x", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    char byte;
    ck_assert_int_eq(read(ready[0], &byte, 1), 1);
    es_cache *c = cache_on(dir);
    requester r;
    start_request(&r, c, m);
    pause_a_while();
    ck_assert(!atomic_load(&r.done));
    kill(holder, SIGKILL); /* dies mid-computation: no file, its lock file left behind */
    waitpid(holder, NULL, 0);
    pthread_join(r.thread, NULL);
    es_cache_stats st = stats(c);
    ck_assert_uint_eq(st.computations, 1);
    ck_assert_uint_eq(st.disk_loads, 0);
    ck_assert_uint_eq(st.disk_waits, 0);
    ck_assert_uint_eq(st.disk_writes, 1);
    ck_assert_int_eq(access(lock, F_OK), -1); /* taken over, then removed */
    es_cache *again = cache_on(scratch);
    es_svd *want = get(again, m, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0);
    assert_same(want, r.got, m);
    es_svd_release(want);
    es_svd_release(r.got);
    es_cache_free(again);
    es_cache_free(c);
    close(ready[0]);
    close(ready[1]);
    es_test_remove_dir(dir);
    es_test_remove_dir(scratch);
    free(lock);
    free(good);
    free(name);
    es_matrix_release(m);
}
END_TEST

/* The PCA coordinates of s (n x k), through es_svd_project. Caller frees. */
static double *coords(const es_svd *s, const es_matrix *m, size_t k)
{
    double *out = es_malloc(s->n * k * sizeof *out);
    es_err err = {0};
    ck_assert_msg(es_svd_project(s, m, k, out, &err) == 0, "%s", err.message);
    return out;
}

/* A tall exact decomposition's kept PCA scores (X V for its first min(r, 64)
 * components) go to cache_dir beside it when the first PCA forms them, and a
 * second cache (a restart) reads them instead of a pass over the items: the
 * same bits. A corrupt file is deleted and the scores formed (and written) again. */
START_TEST(kept_scores_persisted)
{
    es_matrix *m = gaussian("g/scores", 300, 40, 1.0);
    char *dir = es_test_fresh_dir("embedscope-persist");
    es_cache *first = cache_on(dir);
    es_svd *a = get(first, m, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0);
    double *ca = coords(a, m, 5);
    ck_assert(!a->scores_read);
    char *svd_file = only_file(dir), *scores_file = es_asprintf("%.*s.scores", (int)(strlen(svd_file) - 4), svd_file);
    struct stat st;
    ck_assert_msg(stat(scores_file, &st) == 0, "no kept scores written beside %s", svd_file);
    ck_assert_int_eq(st.st_size, 64 + 300 * 40 * 8 + 32);

    es_cache *second = cache_on(dir);
    es_svd *b = get(second, m, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0);
    ck_assert_uint_eq(stats(second).disk_loads, 1);
    double *cb = coords(b, m, 5);
    ck_assert_msg(b->scores_read, "the restarted cache formed the scores again instead of reading them");
    ck_assert_mem_eq(ca, cb, 300 * 5 * sizeof *ca);

    flip_a_byte(scores_file, dir);
    es_cache *third = cache_on(dir);
    es_svd *c = get(third, m, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0);
    double *cc = coords(c, m, 5);
    ck_assert(!c->scores_read); /* rejected, formed again */
    ck_assert_mem_eq(ca, cc, 300 * 5 * sizeof *ca);
    es_cache *fourth = cache_on(dir);
    es_svd *d = get(fourth, m, ES_CENTER_COLUMNS, ES_METHOD_EXACT, 0);
    free(coords(d, m, 3));
    ck_assert(d->scores_read); /* and written again */

    es_svd *all[] = {a, b, c, d};
    es_cache *caches[] = {first, second, third, fourth};
    for (int i = 0; i < 4; i++) {
        es_svd_release(all[i]);
        es_cache_free(caches[i]);
    }
    free(ca);
    free(cb);
    free(cc);
    free(svd_file);
    free(scores_file);
    es_matrix_release(m);
    es_test_remove_dir(dir);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("persist");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, round_trips);
    tcase_add_test(tc, corrupt_file_rejected);
    tcase_add_test(tc, truncated_file_rejected);
    tcase_add_test(tc, foreign_file_rejected);
    tcase_add_test(tc, unusable_dir);
    tcase_add_test(tc, waits_for_the_holder_then_reads_its_file);
    tcase_add_test(tc, a_dead_holder_is_taken_over);
    tcase_add_test(tc, cache_dir_created_with_its_parents);
    tcase_add_test(tc, kept_scores_persisted);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
