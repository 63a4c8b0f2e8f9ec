/* es_source: one map, one validation and one file hash for many loads. Loads
 * from a source equal one-off es_matrix_load results (values and hashes), keep
 * working after the file is unlinked (they read the shared map), take their
 * provenance source name from the caller, and report errors with the real path. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "embedscope/blas.h"
#include "embedscope/store.h"
#include "store/crafted.h"

START_TEST(many_tensors_one_map)
{
    crafted c = write_two_tensor_safetensors();
    es_matrix *w1, *b1;
    es_err err = {0};
    ck_assert_int_eq(es_matrix_load("t/w", c.path, "w", ES_AXIS_COLUMNS, &w1, &err), 0);
    ck_assert_int_eq(es_matrix_load("t/b", c.path, "b", ES_AXIS_COLUMNS, &b1, &err), 0);
    ck_assert_str_eq(w1->prov.source, c.path);

    es_source *s;
    ck_assert_int_eq(es_source_open(c.path, &s, &err), 0);
    unlink(c.path); /* every load below reads the map taken at open */
    es_matrix *w2, *b2, *w3;
    ck_assert_int_eq(es_source_load_tensor(s, "t/w", "w", ES_AXIS_ROWS, "weights/two.safetensors", &w2, &err), 0);
    ck_assert_int_eq(es_source_load_tensor(s, "t/b", "b", ES_AXIS_COLUMNS, NULL, &b2, &err), 0);
    ck_assert_int_eq(es_source_load_tensor(s, "t/w2", "w", ES_AXIS_COLUMNS, "again", &w3, &err), 0);
    es_source_free(s); /* the matrices own their data */
    expect_same_load(w1, w2);
    expect_same_load(b1, b2);
    expect_same_load(w1, w3);
    ck_assert(es_matrix_at(w2, 1, 2) == 5.5);
    ck_assert_int_eq(w2->model_axis, ES_AXIS_ROWS);
    ck_assert_str_eq(w2->prov.source, "weights/two.safetensors");
    ck_assert_str_eq(b2->prov.source, c.path); /* NULL: the opened path */
    ck_assert_str_eq(w3->prov.source, "again");
    ck_assert_str_eq(w3->id, "t/w2");
    es_matrix *all[] = {w1, b1, w2, b2, w3};
    for (size_t i = 0; i < 5; i++)
        es_matrix_release(all[i]);
}
END_TEST

/* Tensor errors leave the source usable; names are checked against the format. */
START_TEST(tensor_errors_keep_source)
{
    crafted c = write_two_tensor_safetensors();
    es_source *s;
    es_err err = {0};
    es_matrix *m = NULL;
    ck_assert_int_eq(es_source_open(c.path, &s, &err), 0);
    ck_assert_int_eq(es_source_load_tensor(s, "t/x", "nope", ES_AXIS_COLUMNS, "label", &m, &err), -1);
    ck_assert_int_eq(err.code, ES_E_NOTFOUND);
    ck_assert_str_eq(err.param, "tensor");
    ck_assert_ptr_nonnull(strstr(err.message, c.path)); /* the real path, not the label */
    ck_assert_int_eq(es_source_load_tensor(s, "t/x", NULL, ES_AXIS_COLUMNS, NULL, &m, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(es_source_load_tensor(s, "t/b", "b", ES_AXIS_COLUMNS, NULL, &m, &err), 0);
    ck_assert(es_matrix_at(m, 0, 2) == 8.5);
    es_matrix_release(m);
    es_source_free(s);
    unlink(c.path);
}
END_TEST

/* A malformed file fails at every load with the same format error (rule 7:
 * a byte left over after the last tensor), naming the opened path. */
START_TEST(invalid_file_fails_every_load)
{
    const char *header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    bytes b = {0};
    b_le(&b, strlen(header), 8);
    b_str(&b, header);
    b_str(&b, "abcde");
    crafted c = write_crafted(&b, ".safetensors");
    b_free(&b);
    es_source *s;
    es_err err = {0};
    es_matrix *m = NULL;
    ck_assert_int_eq(es_source_open(c.path, &s, &err), 0);
    for (int round = 0; round < 2; round++)
        assert_format_error(es_source_load_tensor(s, "t/w", "w", ES_AXIS_COLUMNS, "label", &m, &err), &err,
                            c.path, "rule 7", 8 + strlen(header) + 4);
    ck_assert_ptr_null(m);
    es_source_free(s);
    unlink(c.path);
    ck_assert_int_eq(es_source_open(c.path, &s, &err), -1);
    ck_assert_int_eq(err.code, ES_E_IO);
    ck_assert_ptr_nonnull(strstr(err.message, c.path));
    es_source_free(NULL);
}
END_TEST

/* A .npy source: its one array loads repeatedly; a tensor name is refused. */
START_TEST(npy_source)
{
    const char *path = ES_REPO_DATA "/gpt2-small/wpe.npy";
    es_source *s;
    es_err err = {0};
    es_matrix *a, *b, *one, *m = NULL;
    ck_assert_int_eq(es_source_open(path, &s, &err), 0);
    ck_assert_int_eq(es_source_load_tensor(s, "g/wpe", "wpe.weight", ES_AXIS_COLUMNS, NULL, &m, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "tensor");
    ck_assert_ptr_null(m);
    ck_assert_int_eq(es_source_load_tensor(s, "g/wpe", NULL, ES_AXIS_COLUMNS, "gpt2-small/wpe.npy", &a, &err), 0);
    ck_assert_int_eq(es_source_load_tensor(s, "g/wpe2", "", ES_AXIS_COLUMNS, NULL, &b, &err), 0);
    es_source_free(s);
    ck_assert_int_eq(es_matrix_load("g/wpe", path, NULL, ES_AXIS_COLUMNS, &one, &err), 0);
    expect_same_load(a, one);
    expect_same_load(b, one);
    ck_assert_str_eq(a->prov.source, "gpt2-small/wpe.npy");
    ck_assert_str_eq(b->prov.source, path);
    ck_assert_str_eq(a->prov.file_sha256, WPE_FILE_SHA256);
    es_matrix_release(a);
    es_matrix_release(b);
    es_matrix_release(one);
}
END_TEST

/* es_source_open fails with ES_E_IO naming path and containing want. */
static void expect_refused(const char *path, const char *want)
{
    es_source *s = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_source_open(path, &s, &err), -1);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(err.code, ES_E_IO);
    ck_assert_msg(strstr(err.message, path) && strstr(err.message, want), "message: %s", err.message);
}

/* Non-regular files are refused at once: a FIFO without a writer would block
 * an open() for reading forever. */
START_TEST(non_regular_files_refused)
{
    char dir[] = "/tmp/es-source-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char fifo[64];
    snprintf(fifo, sizeof fifo, "%s/m.npy", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    expect_refused(fifo, "a FIFO");
    expect_refused(dir, "a directory");
    expect_refused("/dev/null", "a character device");
    unlink(fifo);
    rmdir(dir);
}
END_TEST

/* The file is mapped at the first load: one truncated after the open is a
 * clean ES_E_IO naming it and its sizes, not a SIGBUS on the lost pages. */
START_TEST(truncated_after_open_fails_cleanly)
{
    bytes b = {0};
    const char *header = "{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}";
    b_le(&b, strlen(header), 8);
    b_str(&b, header);
    double v[2] = {1.5, -2.0};
    for (int i = 0; i < 2; i++) {
        unsigned long long u;
        memcpy(&u, &v[i], 8);
        b_le(&b, u, 8);
    }
    crafted c = write_crafted(&b, ".safetensors");
    size_t size = b.n;
    b_free(&b);
    es_source *s;
    es_err err = {0};
    es_matrix *m = NULL;
    ck_assert_int_eq(es_source_open(c.path, &s, &err), 0);
    ck_assert_int_eq(truncate(c.path, 0), 0);
    ck_assert_int_eq(es_source_load_tensor(s, "t/w", "w", ES_AXIS_ROWS, NULL, &m, &err), -1);
    ck_assert_int_eq(err.code, ES_E_IO);
    ck_assert_ptr_nonnull(strstr(err.message, c.path));
    char want[96];
    snprintf(want, sizeof want, "changed size since it was opened (%zu bytes, now 0)", size);
    ck_assert_msg(strstr(err.message, want), "%s", err.message);
    ck_assert_ptr_null(m);
    es_source_free(s);
    unlink(c.path);
}
END_TEST

/* A float64 C-order .npy of 4096 x 4 doubles (128 KiB, many pages) whose
 * matrix borrows the mapped file. Returns its path. */
static crafted write_big_f64_npy(void)
{
    bytes b = {0};
    npy_aligned(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4096, 4), }", 64);
    for (int i = 0; i < 4096 * 4; i++) {
        double x = i * 0.25;
        b_endian(&b, &x, 8, 0);
    }
    crafted c = write_crafted(&b, ".npy");
    b_free(&b);
    return c;
}

/* An n-value float64 .npy with non-finite values at a and b (NaN, or an
 * infinity first with inf) fails to load naming the first of them. */
static void first_nonfinite_named(size_t n, size_t a, size_t b, bool inf)
{
    bytes f = {0};
    char dict[96];
    snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (%zu,), }", n);
    npy_aligned(&f, 1, dict, 64);
    size_t data_at = f.n;
    for (size_t i = 0; i < n; i++) {
        double x = (double)(i % 1000) * 0.25;
        b_put(&f, &x, 8);
    }
    double bad[2] = {inf ? (double)INFINITY : (double)NAN, (double)NAN};
    memcpy(f.p + data_at + 8 * a, &bad[0], 8);
    memcpy(f.p + data_at + 8 * b, &bad[1], 8);
    crafted c = write_crafted(&f, ".npy");
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_matrix_load("t/m", c.path, NULL, ES_AXIS_COLUMNS, &m, &err), -1);
    char want[64];
    snprintf(want, sizeof want, "element %zu", a < b ? a : b);
    ck_assert_msg(strstr(err.message, want) != NULL, "bad at %zu and %zu: %s (want %s)", a, b, err.message, want);
    unlink(c.path);
    b_free(&f);
}

/* A float64 file mapped in place is checked in parts on several threads (a
 * part is 2^18 values or more, one per core the process may use, at most 16):
 * 2^20 + 5 values with non-finite ones placed in the last part, in two parts,
 * and at each part's first and last value (the parts' edges computed as
 * source.c splits, from es_cores_available): the load fails naming the first
 * one over all parts (fails with a part's index reported unshifted, the last
 * part's tail left out, or a part's last value left out). */
START_TEST(parallel_finiteness_finds_the_first)
{
    const size_t n = ((size_t)1 << 20) + 5;
    const size_t cases[][2] = {{n - 1, n - 1}, {n - 3, 300001}, {262144, 700000}, {524287, 524288}, {0, n - 1}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        first_nonfinite_named(n, cases[k][0], cases[k][1], k % 2);
    size_t parts = es_cores_available(); /* the parts' edges: each side of each */
    parts = parts > 16 ? 16 : parts;
    parts = parts > n / ((size_t)1 << 18) ? n / ((size_t)1 << 18) : parts;
    for (size_t i = 1, step = (n + parts - 1) / parts; i < parts; i++) {
        first_nonfinite_named(n, i * step - 1, n - 1, false);
        first_nonfinite_named(n, i * step, n - 1, true);
    }
    bytes b = {0}; /* and none: loads */
    char dict[96];
    snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (%zu,), }", n);
    npy_aligned(&b, 1, dict, 64);
    for (size_t i = 0; i < n; i++) {
        double x = (double)i;
        b_put(&b, &x, 8);
    }
    crafted c = write_crafted(&b, ".npy");
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_msg(es_matrix_load("t/m", c.path, NULL, ES_AXIS_COLUMNS, &m, &err) == 0, "%s", err.message);
    ck_assert(es_matrix_at(m, 0, n - 1) == (double)(n - 1));
    es_matrix_release(m);
    unlink(c.path);
    b_free(&b);
}
END_TEST

/* A mapped file truncated in place under its matrix: reading the matrix then
 * raises SIGBUS, which cannot be survived, but the daemon does not die
 * silently: a child process loads it, the file is truncated, the child reads
 * the last row and dies of SIGBUS with stderr naming the file and the cause.
 * A file replaced by rename (a new inode) leaves the matrix intact. */
START_TEST(mapped_file_truncated_dies_loudly)
{
    crafted c = write_big_f64_npy();
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(pipefd[1], STDERR_FILENO);
        close(pipefd[0]);
        es_matrix *m;
        es_err err = {0};
        if (es_matrix_load("t/big", c.path, NULL, ES_AXIS_ROWS, &m, &err) != 0)
            _exit(3);
        if (es_matrix_at(m, 4095, 3) != 16383 * 0.25)
            _exit(4);
        if (truncate(c.path, 0) != 0)
            _exit(5);
        volatile double sink = es_matrix_at(m, 4095, 3); /* SIGBUS */
        (void)sink;
        _exit(6);
    }
    close(pipefd[1]);
    char out[1024] = "";
    size_t got = 0;
    for (ssize_t n; (n = read(pipefd[0], out + got, sizeof out - 1 - got)) > 0;)
        got += (size_t)n;
    out[got] = '\0';
    close(pipefd[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS, "status %d, stderr: %s", status, out);
    ck_assert_msg(strstr(out, "SIGBUS") && strstr(out, c.path) && strstr(out, "truncated or rewritten in place"),
                  "stderr: %s", out);
    unlink(c.path);

    /* replaced by rename: the map keeps the old inode */
    c = write_big_f64_npy();
    es_matrix *m;
    es_err err = {0};
    ck_assert_int_eq(es_matrix_load("t/big", c.path, NULL, ES_AXIS_ROWS, &m, &err), 0);
    crafted other = write_npy_2x3(false);
    ck_assert_int_eq(rename(other.path, c.path), 0);
    ck_assert(es_matrix_at(m, 4095, 3) == 16383 * 0.25);
    es_matrix_release(m);
    unlink(c.path);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("source");
    TCase *tc = tcase_create("source");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, many_tensors_one_map);
    tcase_add_test(tc, tensor_errors_keep_source);
    tcase_add_test(tc, invalid_file_fails_every_load);
    tcase_add_test(tc, npy_source);
    tcase_add_test(tc, non_regular_files_refused);
    tcase_add_test(tc, truncated_after_open_fails_cleanly);
    tcase_add_test(tc, mapped_file_truncated_dies_loudly);
    tcase_add_test(tc, parallel_finiteness_finds_the_first);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
