/* .npy loader: valid files of every supported kind, and one crafted bad file per
 * rule of REFERENCE §2 (error names the file, the rule and the byte offset). */
#include <math.h>
#include <stdint.h>

#include "check_main.h"
#include "crafted.h"
#include "embedscope/store.h"

#define DICT_F8_2x3 "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }"

static const double values6[6] = {1.5, -2.25, 3.0, 0.125, 1e10, -7.0};

static void npy_header(bytes *b, int major, const char *dict) { npy_aligned(b, major, dict, 64); }

/* Append the six test doubles as f8 in the given byte order. */
static void put_values_f8(bytes *b, int big)
{
    for (int i = 0; i < 6; i++)
        b_endian(b, &values6[i], 8, big);
}

/* A valid version-1 file: 2 x 3 little-endian <f8 holding values6. */
static void valid_npy(bytes *b)
{
    npy_header(b, 1, DICT_F8_2x3);
    put_values_f8(b, 0);
}

/* File offset of needle inside the header of a version-`major` file built from dict. */
static size_t at_in_dict(int major, const char *dict, const char *needle)
{
    const char *p = strstr(dict, needle);
    ck_assert_ptr_nonnull(p);
    return hstart(major) + (size_t)(p - dict);
}

/* Write b and assert es_matrix_load fails with rule at offset. */
static void expect_load_error(const bytes *b, const char *rule, size_t offset)
{
    crafted c = write_crafted(b, ".npy");
    es_matrix *m = NULL;
    es_err err = {0};
    assert_format_error(es_matrix_load("t/bad", c.path, NULL, ES_AXIS_COLUMNS, &m, &err), &err, c.path,
                        rule, offset);
    ck_assert_ptr_null(m);
    unlink(c.path);
}

/* Write b and assert es_npy_parse itself fails with rule at offset (and so does loading). */
static void expect_npy_error(const bytes *b, const char *rule, size_t offset)
{
    crafted c = write_crafted(b, ".npy");
    es_file *f;
    es_err err = {0};
    ck_assert_int_eq(es_file_map(c.path, &f, &err), 0);
    es_tensor *t = NULL;
    assert_format_error(es_npy_parse(f, &t, &err), &err, c.path, rule, offset);
    ck_assert_ptr_null(t);
    es_file_free(f);
    unlink(c.path);
    expect_load_error(b, rule, offset);
}

/* A bad dict in an otherwise valid v1 file with 2x3 f8 data; the error is
 * expected where needle starts in the dict, or at the final '\n' if needle is NULL. */
static void expect_dict_error(const char *dict, const char *rule, const char *needle)
{
    bytes b = {0};
    npy_header(&b, 1, dict);
    size_t at = needle ? at_in_dict(1, dict, needle) : b.n - 1;
    put_values_f8(&b, 0);
    expect_npy_error(&b, rule, at);
    b_free(&b);
}

/* Load b as a matrix (asserting success); the caller releases it. */
static es_matrix *load_ok(const bytes *b)
{
    crafted c = write_crafted(b, ".npy");
    es_matrix *m = NULL;
    es_err err = {0};
    int rc = es_matrix_load("t/m", c.path, NULL, ES_AXIS_COLUMNS, &m, &err);
    unlink(c.path);
    ck_assert_msg(rc == 0, "load failed: %s", err.message);
    return m;
}

/* Assert m is 2 x 3 holding values6 in row-major order. */
static void assert_values6(const es_matrix *m)
{
    ck_assert_uint_eq(m->rows, 2);
    ck_assert_uint_eq(m->cols, 3);
    for (size_t i = 0; i < 2; i++)
        for (size_t j = 0; j < 3; j++)
            ck_assert_double_eq(es_matrix_at(m, i, j), values6[i * 3 + j]);
}

/* ---------------------------------------------------------------- valid */

START_TEST(versions_1_2_3)
{
    for (int major = 1; major <= 3; major++) {
        bytes b = {0};
        npy_header(&b, major, DICT_F8_2x3);
        ck_assert_uint_eq((b.n) % 64, 0);
        put_values_f8(&b, 0);
        es_matrix *m = load_ok(&b);
        assert_values6(m);
        ck_assert_str_eq(m->prov.dtype, "<f8");
        ck_assert_uint_eq(m->prov.shape[0], 2);
        ck_assert_uint_eq(m->prov.shape[1], 3);
        ck_assert_str_eq(m->prov.tensor, "");
        es_matrix_release(m);
        b_free(&b);
    }
}
END_TEST

START_TEST(big_endian_f8_and_fortran_order)
{
    bytes b = {0};
    npy_header(&b, 1, "{'descr': '>f8', 'fortran_order': False, 'shape': (2, 3), }");
    put_values_f8(&b, 1);
    es_matrix *m = load_ok(&b);
    assert_values6(m);
    es_matrix_release(m);
    b_free(&b);

    bytes c = {0};
    npy_header(&c, 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }");
    for (int j = 0; j < 3; j++) /* column-major storage */
        for (int i = 0; i < 2; i++)
            b_endian(&c, &values6[i * 3 + j], 8, 0);
    m = load_ok(&c);
    assert_values6(m);
    es_matrix_release(m);
    b_free(&c);
}
END_TEST

START_TEST(f4_both_endians)
{
    static const float v[4] = {0.1f, -3.5f, 1e-30f, 123456.789f};
    for (int big = 0; big <= 1; big++) {
        bytes b = {0};
        npy_header(&b, 1, big ? "{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }"
                              : "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }");
        for (int i = 0; i < 4; i++)
            b_endian(&b, &v[i], 4, big);
        es_matrix *m = load_ok(&b);
        ck_assert_uint_eq(m->rows, 1); /* 1-D loads as 1 x n */
        ck_assert_uint_eq(m->cols, 4);
        for (int i = 0; i < 4; i++)
            ck_assert_double_eq(es_matrix_at(m, 0, (size_t)i), (double)v[i]);
        ck_assert_str_eq(m->prov.dtype, big ? ">f4" : "<f4");
        es_matrix_release(m);
        b_free(&b);
    }
}
END_TEST

START_TEST(f2_both_endians)
{
    /* binary16 bit patterns and their exact values (IEEE 754). */
    static const uint16_t bits[6] = {0x3c00, 0xc000, 0x3555, 0x0001, 0x7bff, 0x8000};
    const double want[6] = {1.0, -2.0, 0.333251953125, ldexp(1.0, -24), 65504.0, -0.0};
    for (int big = 0; big <= 1; big++) {
        bytes b = {0};
        npy_header(&b, 2, big ? "{'shape': (3, 2), 'descr': '>f2', 'fortran_order': False}"
                              : "{\"fortran_order\": False, \"shape\": (3, 2), \"descr\": \"<f2\"}");
        for (int i = 0; i < 6; i++)
            b_endian(&b, &bits[i], 2, big);
        es_matrix *m = load_ok(&b);
        ck_assert_uint_eq(m->rows, 3);
        for (int i = 0; i < 6; i++)
            ck_assert_double_eq(es_matrix_at(m, (size_t)i / 2, (size_t)i % 2), want[i]);
        ck_assert(signbit(es_matrix_at(m, 2, 1)));
        es_matrix_release(m);
        b_free(&b);
    }
}
END_TEST

START_TEST(scalar_empty_and_unaligned)
{
    /* A scalar () loads as 1 x 1; the preamble needs no alignment (16 here). */
    bytes b = {0};
    npy_aligned(&b, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 16);
    ck_assert_uint_ne(b.n % 64, 0);
    b_endian(&b, &values6[1], 8, 0);
    es_matrix *m = load_ok(&b);
    ck_assert_uint_eq(m->rows, 1);
    ck_assert_uint_eq(m->cols, 1);
    ck_assert_double_eq(es_matrix_at(m, 0, 0), -2.25);
    es_matrix_release(m);
    b_free(&b);

    /* An empty array (0, 3) is valid and holds no data. */
    bytes e = {0};
    npy_header(&e, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (0, 3), }");
    m = load_ok(&e);
    ck_assert_uint_eq(m->rows, 0);
    ck_assert_uint_eq(m->cols, 3);
    es_matrix_release(m);
    b_free(&e);
}
END_TEST

START_TEST(tensor_fields_and_sha)
{
    bytes b = {0};
    npy_header(&b, 3, DICT_F8_2x3);
    size_t data_at = b.n;
    put_values_f8(&b, 0);
    crafted c = write_crafted(&b, ".npy");
    es_file *f;
    es_err err = {0};
    ck_assert_int_eq(es_file_map(c.path, &f, &err), 0);
    es_tensor *t;
    ck_assert_int_eq(es_npy_parse(f, &t, &err), 0);
    ck_assert_int_eq(t->rank, 2);
    ck_assert_int_eq(t->dtype, ES_F64);
    ck_assert_uint_eq(t->offset, data_at);
    ck_assert_uint_eq(t->nbytes, 48);
    ck_assert(!t->big_endian && !t->fortran_order);
    es_tensor_free(t);
    es_file_free(f);

    es_matrix *m;
    ck_assert_int_eq(es_matrix_load("t/m", c.path, NULL, ES_AXIS_COLUMNS, &m, &err), 0);
    ck_assert_int_eq(es_matrix_sha_wait(m), ES_SHA_KNOWN); /* mapped in place: hashed after loading */
    char want[65];
    es_sha256_hex(b.p + data_at, 48, want);
    ck_assert_str_eq(es_matrix_sha256(m), want);
    es_sha256_hex(b.p, b.n, want);
    ck_assert_str_eq(es_matrix_file_sha256(m), want);
    ck_assert_str_eq(m->prov.source, c.path);
    es_matrix_release(m);
    unlink(c.path);
    b_free(&b);
}
END_TEST

/* ---------------------------------------------------------------- preamble rules */

START_TEST(bad_magic_and_short_file)
{
    bytes b = {0};
    valid_npy(&b);
    b.p[5] = 'X';
    expect_npy_error(&b, "magic", 0);
    b.n = 5;
    expect_npy_error(&b, "magic", 0);
    b.n = 0;
    expect_npy_error(&b, "magic", 0);
    b_free(&b);
}
END_TEST

START_TEST(bad_versions)
{
    static const int bad[][2] = {{0, 0}, {4, 0}, {1, 1}, {2, 5}, {255, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bytes b = {0};
        valid_npy(&b);
        b.p[6] = (unsigned char)bad[i][0];
        b.p[7] = (unsigned char)bad[i][1];
        expect_npy_error(&b, "version", 6);
        b_free(&b);
    }
}
END_TEST

START_TEST(bad_header_length)
{
    bytes b = {0};
    b_put(&b, "\x93NUMPY\x02\x00\x10\x00", 10); /* v2 needs 4 length bytes */
    expect_npy_error(&b, "header length: file ends inside", 8);
    b_free(&b);

    bytes c = {0}; /* 10,001 > numpy's cap */
    npy_raw(&c, 2, 0, 10001, "{", 1);
    expect_npy_error(&c, "exceeds the limit of 10000", 8);
    b_free(&c);

    bytes d = {0}; /* longer than the file */
    npy_raw(&d, 1, 0, 200, DICT_F8_2x3 "\n", strlen(DICT_F8_2x3) + 1);
    expect_npy_error(&d, "but the file ends at", 8);
    b_free(&d);

    bytes e = {0}; /* length 0: no dict, no newline */
    npy_raw(&e, 1, 0, 0, "", 0);
    expect_npy_error(&e, "does not end with", 9);
    b_free(&e);
}
END_TEST

START_TEST(header_cap_boundary_is_accepted)
{
    /* Exactly 10,000 bytes of header is allowed (numpy's limit is inclusive). */
    bytes b = {0};
    const char *dict = DICT_F8_2x3;
    size_t len = strlen(dict);
    char *header = es_malloc(10000);
    memset(header, ' ', 10000);
    memcpy(header, dict, len);
    header[9999] = '\n';
    npy_raw(&b, 2, 0, 10000, header, 10000);
    free(header);
    put_values_f8(&b, 0);
    es_matrix *m = load_ok(&b);
    assert_values6(m);
    es_matrix_release(m);
    b_free(&b);
}
END_TEST

START_TEST(bad_utf8_in_v3)
{
    /* 0xC3 0x28 is an invalid UTF-8 sequence; in v1 (latin1) it is decodable but not the grammar. */
    const char *dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), '\xc3(': 1}";
    bytes b = {0};
    npy_header(&b, 3, dict);
    put_values_f8(&b, 0);
    expect_npy_error(&b, "not valid UTF-8", at_in_dict(3, dict, "\xc3"));
    b_free(&b);
    expect_dict_error(dict, "unknown key", "'\xc3");

    /* A UTF-16 surrogate encoded in UTF-8 is invalid; valid UTF-8 passes to the grammar. */
    const char *surrogate = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), '\xed\xa0\x80': 1}";
    bytes s = {0};
    npy_header(&s, 3, surrogate);
    put_values_f8(&s, 0);
    expect_npy_error(&s, "not valid UTF-8", at_in_dict(3, surrogate, "\xed"));
    b_free(&s);
    const char *valid = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), '\xc3\xa9': 1}";
    bytes v = {0};
    npy_header(&v, 3, valid);
    put_values_f8(&v, 0);
    expect_npy_error(&v, "unknown key", at_in_dict(3, valid, "'\xc3"));
    b_free(&v);
}
END_TEST

START_TEST(missing_newline_and_trailing_garbage)
{
    bytes b = {0};
    npy_header(&b, 1, DICT_F8_2x3);
    size_t nl = b.n - 1;
    b.p[nl] = ' ';
    put_values_f8(&b, 0);
    expect_npy_error(&b, "does not end with '\\n'", nl);
    b_free(&b);
    expect_dict_error(DICT_F8_2x3 " x", "only spaces may follow", "x");
    expect_dict_error(DICT_F8_2x3 "\t", "only spaces may follow", "\t");
}
END_TEST

/* ---------------------------------------------------------------- dict rules */

START_TEST(bad_dict_syntax)
{
    expect_dict_error("'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)}", "expected '{'", "'descr'");
    expect_dict_error("{'descr' '<f8', 'fortran_order': False, 'shape': (2, 3)}", "expected ':'", "'<f8'");
    expect_dict_error("{'descr': '<f8' 'fortran_order': False, 'shape': (2, 3)}", "expected ',' or '}'",
                      "'fortran_order'");
    expect_dict_error("{'descr': '<f\\8', 'fortran_order': False, 'shape': (2, 3)}", "escape in string",
                      "\\");
    expect_dict_error("{descr: '<f8', 'fortran_order': False, 'shape': (2, 3)}", "quoted string", "descr");
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)", "expected ',' or '}'",
                      NULL);
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), 'x", "unterminated", NULL);
}
END_TEST

START_TEST(bad_keys)
{
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}",
                      "unknown key 'extra'", "'extra'");
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'descr': '<f8', 'shape': (2, 3)}",
                      "duplicate key 'descr'", "'descr': '<f8', 'shape'");
    expect_dict_error("{'descr': '<f8', 'fortran_order': False}", "missing key 'shape'", "}");
    expect_dict_error("{'shape': (2, 3), 'fortran_order': False}", "missing key 'descr'", "}");
    expect_dict_error("{}", "missing key 'descr'", "}");
}
END_TEST

START_TEST(bad_fortran_order)
{
    expect_dict_error("{'descr': '<f8', 'fortran_order': true, 'shape': (2, 3)}", "fortran_order", "true");
    expect_dict_error("{'descr': '<f8', 'fortran_order': 0, 'shape': (2, 3)}", "fortran_order", "0,");
}
END_TEST

START_TEST(bad_descr)
{
    static const char *const bad[] = {"'|O'", "'O'", "'=f4'", "'|f4'", "'<i4'", "'<f16'", "'<c8'", "'f4'"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': %s, 'fortran_order': False, 'shape': (2, 3)}", bad[i]);
        expect_dict_error(dict, "unsupported dtype", bad[i]);
    }
    expect_dict_error("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2, 3)}",
                      "structured dtypes", "[");
}
END_TEST

START_TEST(bad_shapes)
{
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (6)}", "not a tuple", "(6)");
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 3)}", "rank above 2", "3)");
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (-2, 3)}", "non-negative integer",
                      "-2");
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (02, 3)}", "leading zero", "02");
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 3L)}", "expected ',' or ')'",
                      "L, 3L");
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (2 3)}", "expected ',' or ')'", "3)");
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3,,)}", "non-negative integer",
                      ",)");
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': [2, 3]}", "opening the shape", "[2");
    expect_dict_error("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999, 1)}",
                      "dimension overflows", "9999");
}
END_TEST

/* ---------------------------------------------------------------- data rules */

START_TEST(bad_data_length)
{
    bytes b = {0};
    npy_header(&b, 1, DICT_F8_2x3);
    size_t data_at = b.n;
    put_values_f8(&b, 0);
    b.n -= 1; /* one byte short */
    expect_npy_error(&b, "47 bytes of data, but shape and dtype <f8 need 48", data_at);
    b.n += 1;
    b_put(&b, "", 1); /* one byte extra */
    expect_npy_error(&b, "49 bytes of data", data_at);
    b_free(&b);

    bytes c = {0};
    npy_header(&c, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296)}");
    data_at = c.n;
    put_values_f8(&c, 0);
    expect_npy_error(&c, "overflows", data_at);
    b_free(&c);
}
END_TEST

START_TEST(non_finite_values)
{
    const double bad[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        bytes b = {0};
        npy_header(&b, 1, DICT_F8_2x3);
        size_t data_at = b.n;
        for (int i = 0; i < 6; i++)
            b_endian(&b, i == 4 ? &bad[k] : &values6[i], 8, 0);
        expect_load_error(&b, k == 0 ? "non-finite value (NaN)" : "non-finite value (Inf)", data_at + 4 * 8);
        b_free(&b);
    }
    /* A half-precision infinity (0x7c00) is caught too. */
    bytes h = {0};
    npy_header(&h, 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (2,)}");
    size_t data_at = h.n;
    b_le(&h, 0x3c00, 2);
    b_le(&h, 0x7c00, 2);
    expect_load_error(&h, "non-finite value (Inf)", data_at + 2);
    b_free(&h);
}
END_TEST

/* Each storage the loader handles finds the first non-finite element of a
 * 3 x 3000 array (past the in-place check's first 4096-element block): '<f8'
 * in C order (borrowed from the map), '>f8', '<f8' in Fortran order and '<f4'
 * (converted), each naming its storage element's byte offset. */
START_TEST(non_finite_found_in_every_storage)
{
    static const char *const dicts[] = {
        "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 3000), }",
        "{'descr': '>f8', 'fortran_order': False, 'shape': (3, 3000), }",
        "{'descr': '<f8', 'fortran_order': True, 'shape': (3, 3000), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 3000), }",
    };
    for (size_t k = 0; k < 4; k++) {
        bool big = k == 1, f4 = k == 3;
        bytes b = {0};
        npy_header(&b, 1, dicts[k]);
        size_t data_at = b.n, bad_at = 7001;
        for (size_t e = 0; e < 9000; e++) {
            double v = e == bad_at ? (k % 2 ? -INFINITY : NAN) : e == 8999 ? NAN : 0.5 * (double)e;
            float f = (float)v;
            if (f4)
                b_endian(&b, &f, 4, 0);
            else
                b_endian(&b, &v, 8, big);
        }
        char rule[96];
        snprintf(rule, sizeof rule, "non-finite value (%s) in tensor '' element %zu", k % 2 ? "Inf" : "NaN", bad_at);
        expect_load_error(&b, rule, data_at + bad_at * (f4 ? 4 : 8));
        b_free(&b);
    }
}
END_TEST

START_TEST(io_errors)
{
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_matrix_load("t/x", "/nonexistent/x.npy", NULL, ES_AXIS_COLUMNS, &m, &err), -1);
    ck_assert_int_eq(err.code, ES_E_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "/nonexistent/x.npy"));
    ck_assert_int_eq(es_matrix_load("t/x", "/tmp", NULL, ES_AXIS_COLUMNS, &m, &err), -1);
    ck_assert_int_eq(err.code, ES_E_IO);
    ck_assert_ptr_null(m);

    bytes b = {0};
    valid_npy(&b);
    crafted c = write_crafted(&b, ".npy");
    ck_assert_int_eq(es_matrix_load("t/x", c.path, "wpe.weight", ES_AXIS_COLUMNS, &m, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_str_eq(err.param, "tensor");
    unlink(c.path);
    b_free(&b);
}
END_TEST

/* A .npy by magic even without the extension. */
START_TEST(detected_by_magic)
{
    bytes b = {0};
    valid_npy(&b);
    crafted c = write_crafted(&b, ".bin");
    es_matrix *m = NULL;
    es_err err = {0};
    ck_assert_int_eq(es_matrix_load("t/x", c.path, NULL, ES_AXIS_COLUMNS, &m, &err), 0);
    assert_values6(m);
    es_matrix_release(m);
    unlink(c.path);
    b_free(&b);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("npy");
    TCase *valid = tcase_create("valid");
    tcase_add_test(valid, versions_1_2_3);
    tcase_add_test(valid, big_endian_f8_and_fortran_order);
    tcase_add_test(valid, f4_both_endians);
    tcase_add_test(valid, f2_both_endians);
    tcase_add_test(valid, scalar_empty_and_unaligned);
    tcase_add_test(valid, tensor_fields_and_sha);
    tcase_add_test(valid, header_cap_boundary_is_accepted);
    tcase_add_test(valid, detected_by_magic);
    suite_add_tcase(s, valid);
    TCase *bad = tcase_create("malformed");
    tcase_add_test(bad, bad_magic_and_short_file);
    tcase_add_test(bad, bad_versions);
    tcase_add_test(bad, bad_header_length);
    tcase_add_test(bad, bad_utf8_in_v3);
    tcase_add_test(bad, missing_newline_and_trailing_garbage);
    tcase_add_test(bad, bad_dict_syntax);
    tcase_add_test(bad, bad_keys);
    tcase_add_test(bad, bad_fortran_order);
    tcase_add_test(bad, bad_descr);
    tcase_add_test(bad, bad_shapes);
    tcase_add_test(bad, bad_data_length);
    tcase_add_test(bad, non_finite_values);
    tcase_add_test(bad, non_finite_found_in_every_storage);
    tcase_add_test(bad, io_errors);
    suite_add_tcase(s, bad);
    return s;
}

ES_CHECK_MAIN(make_suite)
