/* Float sources are kept as floats (es_tensor_convert, src/store/tensor.c): a
 * float16, bfloat16 or float32 tensor is stored in 4 bytes an element, not as a
 * double copy, and every accessor reads back the exact double conversion, bit
 * for bit (signed zeros, subnormals, extremes), through views and row subsets;
 * float64 stays double. The expected doubles are numpy's conversions of the
 * same bits (hex literals), not this code's. Every finite float16 and
 * bfloat16 bit pattern converts as the closed forms say (the converter's tight
 * loops against the per-element formulas they replaced); a little-endian
 * float64 C-order tensor, borrowed from the mapped file, holds the same bits
 * as the converted Fortran-order and big-endian copies of the same values. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "embedscope/store.h"
#include "store/crafted.h"

#define R 3
#define C 4
#define N (R * C)

static const uint16_t f16_bits[N] = {0x3C00, 0xC000, 0x3555, 0x0001, 0x7BFF, 0x8000,
                                     0x03FF, 0x3E00, 0xBC01, 0x5640, 0x2E66, 0x0400};
static const double f16_want[N] = {0x1p+0, -0x1p+1, 0x1.554p-2, 0x1p-24, 0x1.ffcp+15, -0x0p+0,
                                   0x1.ff8p-15, 0x1.8p+0, -0x1.004p+0, 0x1.9p+6, 0x1.998p-4, 0x1p-14};
static const uint16_t bf16_bits[N] = {0x3F80, 0x3EAB, 0xC2F7, 0x0001, 0x7F7F, 0x8000,
                                      0x007F, 0x4049, 0xBF81, 0x3C23, 0x4780, 0x0080};
static const double bf16_want[N] = {0x1p+0, 0x1.56p-2, -0x1.eep+6, 0x1p-133, 0x1.fep+127, -0x0p+0,
                                    0x1.fcp-127, 0x1.92p+1, -0x1.02p+0, 0x1.46p-7, 0x1p+16, 0x1p-126};
static const uint32_t f32_bits[N] = {0x3eaaaaab, 0x80000000, 0x00000001, 0x7f7fffff, 0x33d6bf95, 0x47f12065,
                                     0xc0200000, 0x00200000, 0x3dcccccd, 0xe217c9ce, 0x477fe000, 0x35800000};
static const double f32_want[N] = {0x1.555556p-2, -0x0p+0, 0x1p-149, 0x1.fffffep+127, 0x1.ad7f2ap-24,
                                   0x1.e240cap+16, -0x1.4p+1, 0x1p-128, 0x1.99999ap-4, -0x1.2f939cp+69,
                                   0x1.ffcp+15, 0x1p-20};
/* Not floats: a double copy must keep every bit. */
static const double f64_want[N] = {0.1, 1.0 / 3, -0.0, 0x1p-1074, 0x1.fffffffffffffp+1023, -2.5,
                                   1e-300, 123456.789, -7e20, 0x1.0000000000001p+0, 3.0, 0x1p-20};

static crafted st_file;

/* One safetensors file: "h" F16, "bf" BF16, "f" F32, "d" F64, each R x C. */
static void write_file(void)
{
    const char *header = "{\"h\":{\"dtype\":\"F16\",\"shape\":[3,4],\"data_offsets\":[0,24]},"
                         "\"bf\":{\"dtype\":\"BF16\",\"shape\":[3,4],\"data_offsets\":[24,48]},"
                         "\"f\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[48,96]},"
                         "\"d\":{\"dtype\":\"F64\",\"shape\":[3,4],\"data_offsets\":[96,192]}}";
    bytes b = {0};
    b_le(&b, strlen(header), 8);
    b_str(&b, header);
    for (int i = 0; i < N; i++)
        b_le(&b, f16_bits[i], 2);
    for (int i = 0; i < N; i++)
        b_le(&b, bf16_bits[i], 2);
    for (int i = 0; i < N; i++)
        b_le(&b, f32_bits[i], 4);
    for (int i = 0; i < N; i++)
        b_endian(&b, &f64_want[i], 8, 0);
    st_file = write_crafted(&b, ".safetensors");
    b_free(&b);
}

static void remove_file(void) { unlink(st_file.path); }

static es_matrix *load(const char *tensor, es_axis axis)
{
    es_matrix *m;
    es_err err = {0};
    ck_assert_msg(es_matrix_load("t/m", st_file.path, tensor, axis, &m, &err) == 0, "%s", err.message);
    return m;
}

/* Bit-for-bit equality (tells -0.0 from 0.0). */
static void expect_bits(double got, double want, const char *what, size_t i, size_t j)
{
    ck_assert_msg(memcmp(&got, &want, sizeof got) == 0, "%s (%zu, %zu): %a, want %a", what, i, j, got, want);
}

/* Items {2, 0} of m gathered: rows 2 and 0 of want (R x C row-major). */
static void expect_subset(const es_matrix *m, const double *want, const char *what)
{
    const size_t idx[2] = {2, 0};
    double *sub = es_matrix_items_copy(m, idx, 2);
    for (size_t r = 0; r < 2; r++)
        for (size_t j = 0; j < C; j++)
            expect_bits(sub[r * C + j], want[idx[r] * C + j], what, idx[r], j);
    free(sub);
}

/* m (R x C, model axis columns) holds want row-major: element by element, item
 * by item, and gathered whole and as the subset {2, 0}. */
static void expect_matrix(const es_matrix *m, const double *want)
{
    for (size_t i = 0; i < R; i++)
        for (size_t j = 0; j < C; j++) {
            expect_bits(es_matrix_at(m, i, j), want[i * C + j], "at", i, j);
            expect_bits(es_matrix_item(m, i, j), want[i * C + j], "item", i, j);
        }
    double *all = es_matrix_items_copy(m, NULL, R);
    for (size_t k = 0; k < N; k++)
        expect_bits(all[k], want[k], "items_copy", k / C, k % C);
    free(all);
    expect_subset(m, want, "items_copy subset");
}

/* The transposed view (C x R, model axis rows: the same items) and the view of
 * rows 1:3 (an offset) read the same values; the model axis rows on the
 * loaded matrix makes its items the columns (strided gathers). */
static void expect_views(const es_matrix *m, const double *want)
{
    es_err err = {0};
    es_matrix *t, *v;
    ck_assert_int_eq(es_view_transpose(m, NULL, &t, &err), 0);
    for (size_t i = 0; i < R; i++)
        for (size_t j = 0; j < C; j++)
            expect_bits(es_matrix_at(t, j, i), want[i * C + j], "transposed at", i, j);
    expect_subset(t, want, "transposed items_copy");
    ck_assert_int_eq(es_view_rows(m, NULL, 1, 3, &v, &err), 0);
    double *rows = es_matrix_items_copy(v, NULL, 2);
    for (size_t k = 0; k < 2 * C; k++)
        expect_bits(rows[k], want[C + k], "rows 1:3", 1 + k / C, k % C);
    free(rows);
    ck_assert_uint_eq(es_matrix_bytes(v), es_matrix_bytes(m)); /* a view holds its source's storage */
    es_matrix_release(t);
    es_matrix_release(v);
}

/* Items are the columns when the model axis is rows: item i coordinate k is
 * (k, i) of want (rows x cols row-major). */
static void expect_column_items(const es_matrix *m, const double *want, size_t rows, size_t cols)
{
    ck_assert_uint_eq(es_matrix_items(m), cols);
    double *items = es_matrix_items_copy(m, NULL, cols);
    for (size_t i = 0; i < cols; i++)
        for (size_t k = 0; k < rows; k++) {
            expect_bits(items[i * rows + k], want[k * cols + i], "column items_copy", k, i);
            expect_bits(es_matrix_item(m, i, k), want[k * cols + i], "column item", k, i);
        }
    free(items);
}

/* Every check on tensor name of the file, whose element size is elem_bytes. */
static void expect_tensor(const char *name, const double *want, size_t elem_bytes)
{
    es_matrix *m = load(name, ES_AXIS_COLUMNS), *by_cols = load(name, ES_AXIS_ROWS);
    ck_assert_uint_eq(es_matrix_bytes(m), (size_t)N * elem_bytes); /* no double copy of a float source */
    expect_matrix(m, want);
    expect_views(m, want);
    expect_column_items(by_cols, want, R, C);
    es_matrix_release(m);
    es_matrix_release(by_cols);
}

START_TEST(float16_kept_as_floats_read_exactly) { expect_tensor("h", f16_want, 4); }
END_TEST

START_TEST(bfloat16_kept_as_floats_read_exactly) { expect_tensor("bf", bf16_want, 4); }
END_TEST

START_TEST(float32_kept_as_floats_read_exactly) { expect_tensor("f", f32_want, 4); }
END_TEST

START_TEST(float64_kept_as_doubles_read_exactly) { expect_tensor("d", f64_want, 8); }
END_TEST

/* The .npy of header dict holding the n float32 values of bits in file
 * order (big-endian when big), loaded with the model axis axis. */
static es_matrix *load_f32_npy(const char *dict, const uint32_t *bits, size_t n, int big, es_axis axis)
{
    bytes b = {0};
    npy_aligned(&b, 1, dict, 64);
    for (size_t e = 0; e < n; e++)
        b_endian(&b, &bits[e], 4, big);
    crafted c = write_crafted(&b, ".npy");
    b_free(&b);
    es_matrix *m;
    es_err err = {0};
    ck_assert_msg(es_matrix_load("t/npy", c.path, NULL, axis, &m, &err) == 0, "%s", err.message);
    unlink(c.path);
    return m;
}

/* A big-endian Fortran-order float32 .npy: transposed into row-major floats. */
START_TEST(fortran_big_endian_float32_npy)
{
    uint32_t file_order[N];
    for (size_t j = 0; j < C; j++)
        for (size_t i = 0; i < R; i++)
            file_order[j * R + i] = f32_bits[i * C + j];
    es_matrix *m = load_f32_npy("{'descr': '>f4', 'fortran_order': True, 'shape': (3, 4), }", file_order, N, 1,
                                ES_AXIS_COLUMNS);
    ck_assert_uint_eq(es_matrix_bytes(m), (size_t)N * 4);
    expect_matrix(m, f32_want);
    es_matrix_release(m);
}
END_TEST

/* Float columns as items at every coordinate stride: a '<f4' .npy of the
 * first six float32 values as rows x cols (cols 1, 2, 3, 6) with the model
 * axis rows, so item i coordinate k is element (k, i), k * cols + i in the
 * file, read by es_matrix_item and gathered by es_matrix_items_copy. */
static const size_t column_counts[] = {1, 2, 3, 6};

START_TEST(float_column_items_at_every_stride)
{
    size_t cols = column_counts[_i], rows = 6 / cols;
    char dict[80];
    snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", rows, cols);
    es_matrix *m = load_f32_npy(dict, f32_bits, 6, 0, ES_AXIS_ROWS);
    expect_column_items(m, f32_want, rows, cols);
    es_matrix_release(m);
}
END_TEST

/* The closed forms: binary16 is (-1)^s 2^(e-15) (1 + m/1024), subnormal
 * m 2^-24; bfloat16 is the top half of a binary32. */
static double half_reference(uint16_t h)
{
    int exp = h >> 10 & 0x1f;
    unsigned mant = h & 0x3ff;
    double v = exp == 0 ? ldexp(mant, -24) : ldexp(mant | 0x400, exp - 25);
    return h >> 15 ? -v : v;
}

/* A temporary file of b (suffix), loaded as tensor name; the path removed. */
static es_matrix *load_bytes(const bytes *b, const char *suffix, const char *name, size_t *in_place)
{
    crafted c = write_crafted(b, suffix);
    es_source *s;
    es_matrix *m;
    es_err err = {0};
    ck_assert_msg(es_source_open(c.path, &s, &err) == 0, "%s", err.message);
    ck_assert_msg(es_source_load_tensor(s, "t/x", name, ES_AXIS_ROWS, NULL, &m, &err) == 0, "%s", err.message);
    *in_place = es_source_in_place(s);
    es_source_free(s);
    unlink(c.path);
    return m;
}

/* Every finite float16 pattern (63488: exponent 31 is Inf/NaN, refused) in a
 * 62 x 1024 .npy, and every finite bfloat16 pattern in a safetensors file. */
START_TEST(every_finite_half_and_bfloat16)
{
    bytes b = {0};
    npy_aligned(&b, 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (62, 1024), }", 64);
    uint16_t want[63488];
    size_t n = 0;
    for (uint32_t h = 0; h < 65536; h++)
        if ((h & 0x7c00) != 0x7c00) {
            want[n++] = (uint16_t)h;
            b_le(&b, h, 2);
        }
    ck_assert_uint_eq(n, 63488);
    size_t in_place;
    es_matrix *m = load_bytes(&b, ".npy", NULL, &in_place);
    b_free(&b);
    ck_assert_uint_eq(in_place, 0);
    for (size_t e = 0; e < n; e++) {
        double got = es_matrix_at(m, e / 1024, e % 1024), ref = half_reference(want[e]);
        ck_assert_msg(memcmp(&got, &ref, 8) == 0, "half 0x%04x: %a, want %a", want[e], got, ref);
    }
    es_matrix_release(m);

    /* bfloat16: exponent 0xff is Inf/NaN: 65536 - 2 x 128 finite patterns */
    char header[128];
    snprintf(header, sizeof header, "{\"x\":{\"dtype\":\"BF16\",\"shape\":[65280],\"data_offsets\":[0,%d]}}",
             65280 * 2);
    b = (bytes){0};
    b_le(&b, strlen(header), 8);
    b_str(&b, header);
    n = 0;
    for (uint32_t h = 0; h < 65536; h++)
        if ((h & 0x7f80) != 0x7f80) {
            b_le(&b, h, 2);
            n++;
        }
    ck_assert_uint_eq(n, 65280);
    m = load_bytes(&b, ".safetensors", "x", &in_place);
    b_free(&b);
    n = 0;
    for (uint32_t h = 0; h < 65536; h++)
        if ((h & 0x7f80) != 0x7f80) {
            uint32_t bits = h << 16;
            float f;
            memcpy(&f, &bits, 4);
            double got = es_matrix_at(m, 0, n++), ref = f;
            ck_assert_msg(memcmp(&got, &ref, 8) == 0, "bfloat16 0x%04x: %a, want %a", h, got, ref);
        }
    es_matrix_release(m);
}
END_TEST

/* 37 x 29 doubles from a fixed generator with signed zeros, subnormals and
 * extremes among them, as a C-order '<f8' .npy (borrowed from the map), a
 * Fortran-order one and a big-endian one (both converted): the same bits at
 * every element, and in_place says which was mapped. */
START_TEST(mapped_float64_equals_converted)
{
    enum { RR = 37, CC = 29 };
    static double x[RR * CC];
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (size_t e = 0; e < RR * CC; e++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(state >> 11) * 0x1p-53;
        x[e] = (u - 0.5) * ldexp(1.0, (int)(state % 64) - 32);
    }
    x[0] = -0.0;
    x[1] = 0x1p-1074;
    x[2] = -0x1.fffffffffffffp+1023;
    x[3] = 0x1p-1022;
    char dict[96];
    bytes c = {0}, f = {0}, be = {0};
    snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }", RR, CC);
    npy_aligned(&c, 1, dict, 64);
    snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': True, 'shape': (%d, %d), }", RR, CC);
    npy_aligned(&f, 1, dict, 64);
    snprintf(dict, sizeof dict, "{'descr': '>f8', 'fortran_order': False, 'shape': (%d, %d), }", RR, CC);
    npy_aligned(&be, 1, dict, 64);
    for (size_t e = 0; e < RR * CC; e++) {
        b_endian(&c, &x[e], 8, 0);
        b_endian(&f, &x[(e % RR) * CC + e / RR], 8, 0);
        b_endian(&be, &x[e], 8, 1);
    }
    size_t in_c, in_f, in_be;
    es_matrix *mc = load_bytes(&c, ".npy", NULL, &in_c), *mf = load_bytes(&f, ".npy", NULL, &in_f),
              *mbe = load_bytes(&be, ".npy", NULL, &in_be);
    b_free(&c);
    b_free(&f);
    b_free(&be);
    ck_assert_uint_eq(in_c, 1);
    ck_assert_uint_eq(in_f, 0);
    ck_assert_uint_eq(in_be, 0);
    for (size_t e = 0; e < RR * CC; e++) {
        double vc = es_matrix_at(mc, e / CC, e % CC), vf = es_matrix_at(mf, e / CC, e % CC),
               vbe = es_matrix_at(mbe, e / CC, e % CC);
        ck_assert_msg(memcmp(&vc, &x[e], 8) == 0 && memcmp(&vf, &x[e], 8) == 0 && memcmp(&vbe, &x[e], 8) == 0,
                      "element %zu: %a %a %a, want %a", e, vc, vf, vbe, x[e]);
    }
    ck_assert_uint_eq(es_matrix_bytes(mc), sizeof x);
    es_matrix_release(mc);
    es_matrix_release(mf);
    es_matrix_release(mbe);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("tensor");
    tcase_add_unchecked_fixture(tc, write_file, remove_file);
    tcase_add_test(tc, float16_kept_as_floats_read_exactly);
    tcase_add_test(tc, bfloat16_kept_as_floats_read_exactly);
    tcase_add_test(tc, float32_kept_as_floats_read_exactly);
    tcase_add_test(tc, float64_kept_as_doubles_read_exactly);
    tcase_add_test(tc, fortran_big_endian_float32_npy);
    tcase_add_test(tc, every_finite_half_and_bfloat16);
    tcase_add_test(tc, mapped_float64_equals_converted);
    tcase_add_loop_test(tc, float_column_items_at_every_stride, 0, sizeof column_counts / sizeof *column_counts);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
