/* Matrices and views: element access, model-space orientation, copy-free views
 * with provenance, comparability, reference counting across threads, and the
 * real GPT-2 W_pos file. */
#include <pthread.h>
#include <stdio.h>

#include "check_main.h"
#include "embedscope/store.h"
#include "store/crafted.h"

/* A 3 x 4 matrix with element (i, j) = 10 i + j. */
static es_matrix *grid(es_axis axis)
{
    double *x = es_malloc(12 * sizeof *x);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            x[i * 4 + j] = 10 * i + j;
    es_provenance prov = {.source = "test", .dtype = "f64", .shape = {3, 4}};
    return es_matrix_from_data("t/grid", x, 3, 4, axis, &prov);
}

START_TEST(access_and_orientation)
{
    es_matrix *m = grid(ES_AXIS_COLUMNS);
    ck_assert_str_eq(m->id, "t/grid");
    ck_assert_double_eq(es_matrix_at(m, 2, 3), 23);
    ck_assert_uint_eq(es_matrix_items(m), 3);
    ck_assert_uint_eq(es_matrix_dim(m), 4);
    ck_assert_double_eq(es_matrix_item(m, 1, 2), 12);
    ck_assert_uint_eq(es_matrix_bytes(m), 12 * sizeof(double));
    ck_assert_str_eq(m->prov.tensor, ""); /* NULL provenance strings become "" */
    ck_assert_str_eq(m->prov.view, "");
    es_matrix *r;
    ck_assert_int_eq(es_view_axis(m, "t/rows", ES_AXIS_ROWS, &r, NULL), 0);
    ck_assert_uint_eq(es_matrix_items(r), 4);
    ck_assert_uint_eq(es_matrix_dim(r), 3);
    ck_assert_double_eq(es_matrix_item(r, 1, 2), 21); /* item 1 = column 1, coordinate 2 = row 2 */
    ck_assert_str_eq(r->prov.view, "model axis rows of t/grid");
    es_matrix_release(r);
    es_matrix_release(m);
}
END_TEST

/* es_matrix_items_columns of items idx (n of them) against es_matrix_item:
 * every value (x - col_shift - row_shift) * scale bit for bit, with either
 * shift, and x itself without shifts or scale (es_matrix_items_columns), at an
 * offset column block and with ld > n. */
static void expect_items_columns(const es_matrix *v, const size_t *idx, size_t n)
{
    size_t d = es_matrix_dim(v), j0 = d > 2 ? 1 : 0, cols = d - j0, ld = n + 3;
    double *cs = es_malloc(cols * sizeof *cs), *rs = es_malloc(n * sizeof *rs), *sc = es_malloc(n * sizeof *sc);
    double *out = es_malloc(cols * ld * sizeof *out);
    for (size_t j = 0; j < cols; j++)
        cs[j] = 0.25 + (double)j / 3;
    for (size_t r = 0; r < n; r++) {
        rs[r] = -1.5 + (double)r / 7;
        sc[r] = 1.0 / (3.0 + (double)r);
    }
    for (int shifts = 0; shifts < 3; shifts++) { /* none, columns, rows */
        const double *c = shifts == 1 ? cs : NULL, *w = shifts == 2 ? rs : NULL;
        if (shifts == 0)
            es_matrix_items_columns(v, idx, n, j0, cols, out, ld);
        else
            es_matrix_items_columns_scaled(v, idx, n, j0, cols, c, w, sc, out, ld);
        for (size_t r = 0; r < n; r++)
            for (size_t j = 0; j < cols; j++) {
                double x = es_matrix_item(v, idx ? idx[r] : r, j0 + j);
                double want = shifts == 1 ? (x - cs[j]) * sc[r] : shifts == 2 ? (x - rs[r]) * sc[r] : x;
                ck_assert_msg(out[j * ld + r] == want, "item %zu coordinate %zu, shifts %d: %.17g, want %.17g", r,
                              j0 + j, shifts, out[j * ld + r], want);
            }
    }
    free(cs);
    free(rs);
    free(sc);
    free(out);
}

START_TEST(items_copy_all_orientations)
{
    es_matrix *m = grid(ES_AXIS_COLUMNS), *rows, *t, *tc;
    ck_assert_int_eq(es_view_axis(m, NULL, ES_AXIS_ROWS, &rows, NULL), 0);
    ck_assert_int_eq(es_view_transpose(m, "t/T", &t, NULL), 0);
    ck_assert_int_eq(es_view_axis(t, "t/Tc", ES_AXIS_COLUMNS, &tc, NULL), 0);
    es_matrix *all[4] = {m, rows, t, tc};
    for (int k = 0; k < 4; k++) {
        const es_matrix *v = all[k];
        size_t n = es_matrix_items(v), d = es_matrix_dim(v);
        double *x = es_matrix_items_copy(v, NULL, n);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < d; j++)
                ck_assert_double_eq(x[i * d + j], es_matrix_item(v, i, j));
        free(x);
        size_t idx[2] = {n - 1, 0};
        x = es_matrix_items_copy(v, idx, 2);
        for (size_t j = 0; j < d; j++) {
            ck_assert_double_eq(x[j], es_matrix_item(v, n - 1, j));
            ck_assert_double_eq(x[d + j], es_matrix_item(v, 0, j));
        }
        free(x);
        expect_items_columns(v, NULL, n);
        expect_items_columns(v, idx, 2);
    }
    /* The transpose keeps d_model on the same physical axis: items are unchanged. */
    ck_assert_int_eq(t->model_axis, ES_AXIS_ROWS);
    ck_assert_uint_eq(es_matrix_items(t), 3);
    ck_assert_double_eq(es_matrix_item(t, 2, 1), 21);
    ck_assert_double_eq(es_matrix_item(tc, 2, 1), 12); /* items of tc are columns of m */
    for (int k = 3; k >= 0; k--)
        es_matrix_release(all[k]);
}
END_TEST

START_TEST(column_and_row_views)
{
    es_matrix *m = grid(ES_AXIS_COLUMNS), *c, *cr, *t, *tc;
    ck_assert_int_eq(es_view_columns(m, "t/c", 1, 3, &c, NULL), 0);
    ck_assert_uint_eq(c->rows, 3);
    ck_assert_uint_eq(c->cols, 2);
    ck_assert_ptr_eq(c->buf, m->buf); /* shared storage, no copy */
    ck_assert_double_eq(es_matrix_at(c, 2, 0), 21);
    ck_assert_str_eq(c->prov.view, "columns 1:3 of t/grid");
    ck_assert_str_eq(c->prov.source, "test");
    ck_assert_int_eq(es_view_rows(c, "t/cr", 1, 3, &cr, NULL), 0);
    ck_assert_double_eq(es_matrix_at(cr, 0, 0), 11);
    ck_assert_double_eq(es_matrix_at(cr, 1, 1), 22);
    ck_assert_str_eq(cr->prov.view, "columns 1:3 of t/grid; rows 1:3 of t/c");

    /* Views of a transpose address the original storage correctly. */
    ck_assert_int_eq(es_view_transpose(m, "t/T", &t, NULL), 0);
    ck_assert_uint_eq(t->rows, 4);
    ck_assert_double_eq(es_matrix_at(t, 3, 2), 23);
    ck_assert_int_eq(es_view_columns(t, "t/Tc", 1, 3, &tc, NULL), 0);
    ck_assert_double_eq(es_matrix_at(tc, 3, 0), 13);
    ck_assert_double_eq(es_matrix_at(tc, 0, 1), 20);
    es_matrix *tcr;
    ck_assert_int_eq(es_view_rows(tc, "t/Tcr", 2, 4, &tcr, NULL), 0);
    ck_assert_double_eq(es_matrix_at(tcr, 1, 1), 23);
    ck_assert_str_eq(tcr->prov.view, "transpose of t/grid; columns 1:3 of t/T; rows 2:4 of t/Tc");

    /* Views outlive their parents (the buffer is reference counted). */
    es_matrix_release(m);
    es_matrix_release(c);
    es_matrix_release(t);
    es_matrix_release(tc);
    ck_assert_double_eq(es_matrix_at(cr, 1, 0), 21);
    ck_assert_double_eq(es_matrix_at(tcr, 0, 0), 12);
    es_matrix_release(cr);
    es_matrix_release(tcr);
}
END_TEST

START_TEST(bad_view_ranges)
{
    es_matrix *m = grid(ES_AXIS_COLUMNS), *v = NULL;
    es_err err = {0};
    static const size_t bad[][2] = {{0, 5}, {2, 2}, {3, 1}, {4, 5}};
    for (size_t k = 0; k < 4; k++) {
        ck_assert_int_eq(es_view_columns(m, "t/v", bad[k][0], bad[k][1], &v, &err), -1);
        ck_assert_int_eq(err.code, ES_E_PARAM);
        ck_assert_str_eq(err.param, "columns");
        ck_assert_ptr_nonnull(strstr(err.message, "t/grid"));
    }
    ck_assert_int_eq(es_view_rows(m, "t/v", 0, 4, &v, &err), -1);
    ck_assert_str_eq(err.param, "rows");
    ck_assert_int_eq(es_view_axis(m, "t/v", (es_axis)7, &v, &err), -1);
    ck_assert_str_eq(err.param, "axis");
    ck_assert_ptr_null(v);
    es_matrix_release(m);
}
END_TEST

START_TEST(comparability)
{
    es_matrix *a = grid(ES_AXIS_COLUMNS), *b = grid(ES_AXIS_ROWS), *t;
    es_err err = {0};
    ck_assert_int_eq(es_check_comparable(a, a, "matrix", &err), 0);
    ck_assert_int_eq(es_check_comparable(a, b, "matrix", &err), -1);
    ck_assert_int_eq(err.code, ES_E_INCOMPATIBLE);
    ck_assert_ptr_nonnull(strstr(err.message, "length 4"));
    ck_assert_ptr_nonnull(strstr(err.message, "length 3"));
    ck_assert_ptr_nonnull(strstr(err.message, "t/grid"));
    ck_assert_int_eq(es_view_transpose(b, "t/bT", &t, NULL), 0); /* d = 3 still */
    ck_assert_int_eq(es_check_comparable(b, t, "matrix", &err), 0);
    es_matrix_release(t);
    es_matrix_release(a);
    es_matrix_release(b);
}
END_TEST

START_TEST(axis_names)
{
    es_axis a;
    ck_assert_int_eq(es_axis_parse("rows", &a), 0);
    ck_assert_int_eq(a, ES_AXIS_ROWS);
    ck_assert_int_eq(es_axis_parse("columns", &a), 0);
    ck_assert_int_eq(a, ES_AXIS_COLUMNS);
    ck_assert_int_eq(es_axis_parse("cols", &a), -1);
    ck_assert_int_eq(es_axis_parse("", &a), -1);
    ck_assert_str_eq(es_axis_name(ES_AXIS_ROWS), "rows");
    ck_assert_str_eq(es_axis_name(ES_AXIS_COLUMNS), "columns");
}
END_TEST

/* Retain and release many times from several threads. */
static void *churn(void *arg)
{
    es_matrix *m = arg;
    for (int i = 0; i < 100000; i++) {
        es_matrix *v;
        es_matrix_retain(m);
        if (i % 1000 == 0 && es_view_rows(m, NULL, 0, 1, &v, NULL) == 0)
            es_matrix_release(v);
        es_matrix_release(m);
    }
    return NULL;
}

START_TEST(refcounts_across_threads)
{
    es_matrix *m = grid(ES_AXIS_COLUMNS);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, churn, m), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    ck_assert_int_eq(m->refs, 1);
    es_matrix_release(m);
}
END_TEST

/* The shipped W_pos (repo data/, else ../shared/data): shape, provenance, and the
 * whole-file sha256 from the data README. The tensor sha256 is checked against
 * an independent hash of the file's last 1024*768*4 bytes. */
START_TEST(real_wpe)
{
    const char *path = es_have_file(ES_REPO_DATA "/gpt2-small/wpe.npy") ? ES_REPO_DATA "/gpt2-small/wpe.npy"
                                                                       : ES_SHARED_DATA "/gpt2-small/wpe.npy";
    if (!es_have_file(path)) {
        ES_SKIP("%s absent, real W_pos test not run", path);
        return;
    }
    es_matrix *m;
    es_err err = {0};
    ck_assert_msg(es_matrix_load("gpt2-small/wpe", path, NULL, ES_AXIS_COLUMNS, &m, &err) == 0, "%s",
                  err.message);
    ck_assert_uint_eq(m->rows, 1024);
    ck_assert_uint_eq(m->cols, 768);
    ck_assert_str_eq(m->prov.file_sha256, WPE_FILE_SHA256);
    ck_assert_str_eq(m->prov.dtype, "<f4");
    ck_assert_str_eq(m->prov.source, path);
    expect_wpe_data(m, path);
    /* Column blocks of float32 storage, row-major and across the items' stride */
    size_t picks[3] = {767, 7, 512}; /* items of both orientations: 1024 rows, 768 columns */
    expect_items_columns(m, NULL, 1024);
    expect_items_columns(m, picks, 3);
    es_matrix *across;
    ck_assert_int_eq(es_view_axis(m, "gpt2-small/wpe-rows", ES_AXIS_ROWS, &across, &err), 0);
    expect_items_columns(across, picks, 3);
    es_matrix_release(across);

    /* One attention head's worth of columns as a view. */
    es_matrix *head;
    ck_assert_int_eq(es_view_columns(m, "gpt2-small/wpe-h1", 64, 128, &head, &err), 0);
    ck_assert_double_eq(es_matrix_at(head, 5, 0), es_matrix_at(m, 5, 64));
    ck_assert_str_eq(head->prov.view, "columns 64:128 of gpt2-small/wpe");
    ck_assert_str_eq(head->prov.file_sha256, WPE_FILE_SHA256);
    es_matrix_release(head);
    es_matrix_release(m);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("matrix");
    TCase *tc = tcase_create("matrix");
    tcase_add_test(tc, access_and_orientation);
    tcase_add_test(tc, items_copy_all_orientations);
    tcase_add_test(tc, column_and_row_views);
    tcase_add_test(tc, bad_view_ranges);
    tcase_add_test(tc, comparability);
    tcase_add_test(tc, axis_names);
    tcase_add_test(tc, refcounts_across_threads);
    tcase_add_test(tc, real_wpe);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
