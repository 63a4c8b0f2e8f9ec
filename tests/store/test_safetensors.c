/* safetensors loader: a valid file with every convertible dtype, rank 0, empty and
 * unsupported tensors; one crafted bad file per rule of REFERENCE §1 (error names
 * the file, the rule and the byte offset); the real GPT-2 file when present. */
#include <math.h>
#include <stdint.h>

#include "check_main.h"
#include "crafted.h"
#include "embedscope/store.h"

#define PARTIAL ES_SHARED_DATA "/gpt2-small/gpt2-small-partial.safetensors"
#define PARTIAL_SHA "d6256624aa3ede69eff7ee69111c9ed869455fcf9b1deacd73d406b19d4832e9"

/* u64 LE length | header | data. */
static void st_file(bytes *b, const char *header, const bytes *data)
{
    b_le(b, strlen(header), 8);
    b_str(b, header);
    if (data)
        b_put(b, data->p, data->n);
}

/* n zero bytes of tensor data. */
static bytes zeros(size_t n)
{
    bytes d = {0};
    for (size_t i = 0; i < n; i++)
        b_put(&d, "", 1);
    return d;
}

/* File offset of needle in the header (which starts at byte 8). */
static size_t at_in_header(const char *header, const char *needle)
{
    const char *p = strstr(header, needle);
    ck_assert_ptr_nonnull(p);
    return 8 + (size_t)(p - header);
}

/* Write b, parse tensor `name` and assert the format error. */
static void expect_st_error(const bytes *b, const char *name, const char *rule, size_t offset)
{
    crafted c = write_crafted(b, ".safetensors");
    es_file *f;
    es_err err = {0};
    ck_assert_int_eq(es_file_map(c.path, &f, &err), 0);
    es_tensor *t = NULL;
    assert_format_error(es_safetensors_parse(f, name, &t, &err), &err, c.path, rule, offset);
    ck_assert_ptr_null(t);
    es_file_free(f);
    unlink(c.path);
}

/* A header with n_data zero bytes of data; the error is at needle (offset 8 if NULL)
 * plus `extra`. */
static void expect_header_error(const char *header, size_t n_data, const char *rule, const char *needle,
                                size_t extra)
{
    bytes d = zeros(n_data), b = {0};
    st_file(&b, header, &d);
    expect_st_error(&b, "a", rule, (needle ? at_in_header(header, needle) : 8) + extra);
    b_free(&b);
    b_free(&d);
}

/* ---------------------------------------------------------------- valid */

#define VALID_HEADER                                                                   \
    "{\"__metadata__\":{\"format\":\"pt\"},"                                           \
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"               \
    "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]},"                \
    "\"c\":{\"dtype\":\"BF16\",\"shape\":[1,3],\"data_offsets\":[22,28]},"             \
    "\"g\":{\"dtype\":\"F32\",\"shape\":[1,1,2],\"data_offsets\":[44,52]},"            \
    "\"d\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[28,36]},"                 \
    "\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[36,36]},"              \
    "\"f\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[36,44]}}   "

static const float a_vals[4] = {0.5f, -1.25f, 3e-8f, 7e20f};
static const uint16_t b_bits[3] = {0x3c00, 0xc000, 0x3555};
static const double b_vals[3] = {1.0, -2.0, 0.333251953125};
static const uint16_t c_bits[3] = {0x3f80, 0xc040, 0x3eab};
static const double c_vals[3] = {1.0, -3.0, 0.333984375};
static const double d_val = -1.0 / 3.0;

/* The valid file: tensors a..g; the header length (odd) leaves F32/F64 data unaligned. */
static void valid_file(bytes *b)
{
    bytes d = {0};
    for (int i = 0; i < 4; i++)
        b_endian(&d, &a_vals[i], 4, 0);
    for (int i = 0; i < 3; i++)
        b_le(&d, b_bits[i], 2);
    for (int i = 0; i < 3; i++)
        b_le(&d, c_bits[i], 2);
    b_endian(&d, &d_val, 8, 0);
    b_le(&d, 42, 8);                     /* f: I64 */
    b_endian(&d, &a_vals[0], 4, 0);      /* g: rank 3 */
    b_endian(&d, &a_vals[1], 4, 0);
    st_file(b, VALID_HEADER, &d);
    b_free(&d);
}

/* The valid file's bytes in *b (b_free them), written to a crafted file. */
static crafted write_valid(bytes *b)
{
    *b = (bytes){0};
    valid_file(b);
    return write_crafted(b, ".safetensors");
}

/* Load tensor name of the valid file as a matrix. */
static es_matrix *load_valid(const char *name)
{
    bytes b;
    crafted c = write_valid(&b);
    es_matrix *m = NULL;
    es_err err = {0};
    int rc = es_matrix_load("t/st", c.path, name, ES_AXIS_COLUMNS, &m, &err);
    unlink(c.path);
    b_free(&b);
    ck_assert_msg(rc == 0, "load of %s failed: %s", name, err.message);
    return m;
}

START_TEST(all_dtypes)
{
    ck_assert_uint_eq(strlen(VALID_HEADER) % 4, 1); /* data start 8+N is not 4-aligned */
    es_matrix *m = load_valid("a");
    ck_assert_uint_eq(m->rows, 2);
    ck_assert_uint_eq(m->cols, 2);
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq(es_matrix_at(m, (size_t)i / 2, (size_t)i % 2), (double)a_vals[i]);
    ck_assert_str_eq(m->prov.dtype, "F32");
    ck_assert_str_eq(m->prov.tensor, "a");
    es_matrix_release(m);

    m = load_valid("b");
    ck_assert_uint_eq(m->rows, 1);
    ck_assert_uint_eq(m->cols, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_double_eq(es_matrix_at(m, 0, (size_t)i), b_vals[i]);
    ck_assert_str_eq(m->prov.dtype, "F16");
    es_matrix_release(m);

    m = load_valid("c");
    for (int i = 0; i < 3; i++)
        ck_assert_double_eq(es_matrix_at(m, 0, (size_t)i), c_vals[i]);
    ck_assert_str_eq(m->prov.dtype, "BF16");
    es_matrix_release(m);

    m = load_valid("d"); /* rank 0 */
    ck_assert_uint_eq(m->rows, 1);
    ck_assert_uint_eq(m->cols, 1);
    ck_assert_double_eq(es_matrix_at(m, 0, 0), d_val);
    es_matrix_release(m);

    m = load_valid("e"); /* empty */
    ck_assert_uint_eq(m->rows, 0);
    ck_assert_uint_eq(m->cols, 4);
    es_matrix_release(m);
}
END_TEST

START_TEST(tensor_fields_and_names)
{
    bytes b;
    crafted c = write_valid(&b);
    es_file *f;
    es_err err = {0};
    ck_assert_int_eq(es_file_map(c.path, &f, &err), 0);
    char **names;
    ck_assert_int_eq(es_safetensors_names(f, &names, &err), 0);
    static const char *const want[] = {"a", "b", "c", "d", "e", "f", "g", NULL}; /* data order */
    for (int i = 0; want[i]; i++)
        ck_assert_str_eq(names[i], want[i]);
    ck_assert_ptr_null(names[7]);
    es_strv_free(names);

    es_tensor *t;
    ck_assert_int_eq(es_safetensors_parse(f, "c", &t, &err), 0);
    ck_assert_uint_eq(t->offset, 8 + strlen(VALID_HEADER) + 22);
    ck_assert_uint_eq(t->nbytes, 6);
    ck_assert_int_eq(t->rank, 2);
    ck_assert_int_eq(t->dtype, ES_BF16);
    ck_assert_str_eq(t->name, "c");
    es_tensor_free(t);

    t = NULL;
    ck_assert_int_eq(es_safetensors_parse(f, "zz", &t, &err), -1);
    ck_assert_int_eq(err.code, ES_E_NOTFOUND);
    ck_assert_str_eq(err.param, "tensor");
    ck_assert_ptr_null(t);
    es_file_free(f);

    es_matrix *m = NULL;
    ck_assert_int_eq(es_matrix_load("t/x", c.path, NULL, ES_AXIS_COLUMNS, &m, &err), -1);
    ck_assert_int_eq(err.code, ES_E_PARAM);
    ck_assert_ptr_null(m);
    unlink(c.path);
    b_free(&b);
}
END_TEST

START_TEST(unsupported_dtype_and_rank)
{
    bytes b = {0};
    valid_file(&b);
    expect_st_error(&b, "f", "dtype I64; supported dtypes: F16 BF16 F32 F64",
                    at_in_header(VALID_HEADER, "\"f\""));
    expect_st_error(&b, "g", "rank 3", at_in_header(VALID_HEADER, "\"g\""));
    b_free(&b);
}
END_TEST

START_TEST(provenance_hashes)
{
    bytes b;
    crafted c = write_valid(&b);
    es_matrix *m;
    es_err err = {0};
    ck_assert_int_eq(es_matrix_load("t/st", c.path, "b", ES_AXIS_ROWS, &m, &err), 0);
    char want[65];
    es_sha256_hex(b.p + 8 + strlen(VALID_HEADER) + 16, 6, want);
    ck_assert_str_eq(m->prov.sha256, want);
    es_sha256_hex(b.p, b.n, want);
    ck_assert_str_eq(m->prov.file_sha256, want);
    ck_assert_uint_eq(m->prov.shape[0], 3);
    ck_assert_int_eq(m->model_axis, ES_AXIS_ROWS);
    es_matrix_release(m);
    unlink(c.path);
    b_free(&b);
}
END_TEST

/* ---------------------------------------------------------------- rules 1-3 */

START_TEST(rule1_short_file)
{
    bytes b = {0};
    b_put(&b, "\x10\0\0\0\0\0\0", 7);
    expect_st_error(&b, "a", "rule 1", 0);
    b.n = 0;
    expect_st_error(&b, "a", "rule 1", 0);
    b_free(&b);
}
END_TEST

START_TEST(rule2_header_too_long)
{
    static const unsigned long long lens[] = {100000001ULL, UINT64_MAX, 1ULL << 63};
    for (size_t i = 0; i < 3; i++) {
        bytes b = {0};
        b_le(&b, lens[i], 8);
        b_str(&b, "{}");
        expect_st_error(&b, "a", "rule 2", 0);
        b_free(&b);
    }
}
END_TEST

START_TEST(rule3_header_past_eof)
{
    static const unsigned long long lens[] = {3, 100000000ULL};
    for (size_t i = 0; i < 2; i++) {
        bytes b = {0};
        b_le(&b, lens[i], 8);
        b_str(&b, "{}");
        expect_st_error(&b, "a", "rule 3", 8);
        b_free(&b);
    }
}
END_TEST

/* ---------------------------------------------------------------- rule 4 */

#define T_A "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

START_TEST(rule4_not_json)
{
    /* jansson reports the position where decoding stopped (just past the bad token). */
    expect_header_error("{\"a\": }", 0, "rule 4 (header is not UTF-8 JSON", NULL, 7);
    expect_header_error("{\"\xff\":1}", 0, "unable to decode byte 0xff", NULL, 2);
    expect_header_error("", 0, "rule 4", NULL, 0);
    expect_header_error("{" T_A "} x", 8, "end of file expected", NULL, strlen("{" T_A "} x"));
    expect_header_error("[1]", 0, "rule 4 (header is not a JSON object", NULL, 0);
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4,
                        "too big integer", NULL, strlen("{\"a\":{\"dtype\":\"F32\",\"shape\":[") + 20);
}
END_TEST

START_TEST(rule4_bad_entries)
{
    expect_header_error("{\"a\":{\"dtype\":\"F17\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype",
                        "\"a\"", 0);
    expect_header_error("{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype", "\"a\"", 0);
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "exactly dtype, shape and data_offsets",
                        "\"a\"", 0);
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
                        "exactly dtype, shape", "\"a\"", 0);
    expect_header_error("{\"a\":5}", 0, "must be an object", "\"a\"", 0);
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
                        "non-integer or negative", "\"a\"", 0);
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
                        "non-integer or negative", "\"a\"", 0);
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "shape is not an array",
                        "\"a\"", 0);
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
                        "data_offsets is not two", "\"a\"", 0);
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8,
                        "data_offsets is not two", "\"a\"", 0);
}
END_TEST

START_TEST(rule4_metadata)
{
    expect_header_error("{\"__metadata__\":{\"k\":\"v\",\"n\":1}," T_A "}", 8, "__metadata__ value of 'n'",
                        "\"n\"", 0);
    expect_header_error("{\"__metadata__\":{\"k\":null}," T_A "}", 8, "__metadata__ value of 'k'", "\"k\"", 0);
    expect_header_error("{\"__metadata__\":[\"v\"]," T_A "}", 8, "__metadata__ is not an object", "\"__metadata__\"",
                        0);
}
END_TEST

/* ---------------------------------------------------------------- rule 5 */

START_TEST(rule5_duplicate_keys)
{
    const char *dup = "{" T_A "," T_A "}";
    expect_header_error(dup, 8, "rule 5 (duplicate key", NULL, strlen("{" T_A ",\"a\""));
    expect_header_error("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}," T_A "}", 8, "rule 5", NULL,
                        strlen("{\"__metadata__\":{\"k\":\"1\",\"k\""));
}
END_TEST

/* ---------------------------------------------------------------- rule 6 */

START_TEST(rule6_offsets)
{
    size_t n;
    /* gap between tensors */
    const char *gap = "{" T_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}";
    n = strlen(gap);
    expect_header_error(gap, 16, "rule 6 (tensor 'b' begins at 12, expected 8: gap)", NULL, n + 12);
    /* first tensor not at 0 */
    const char *late = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
    expect_header_error(late, 8, "begins at 4, expected 0: gap", NULL, strlen(late) + 4);
    /* overlap / two tensors aliasing one range */
    const char *alias = "{" T_A ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_header_error(alias, 8, "expected 8: overlap", NULL, strlen(alias) + 0);
    const char *over = "{" T_A ",\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[6,10]}}";
    expect_header_error(over, 10, "overlap", NULL, strlen(over) + 6);
    /* reversed offsets */
    const char *rev = "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}";
    expect_header_error(rev, 8, "end 0 < begin 8", NULL, strlen(rev) + 8);
    /* shape disagreeing with offsets */
    const char *size = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
    expect_header_error(size, 8, "span 8 bytes, shape and dtype F32 need 12", NULL, strlen(size));
    /* element count and byte count overflows */
    const char *elems = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,8]}}";
    expect_header_error(elems, 8, "element or byte count overflows", NULL, strlen(elems));
    const char *bytes_ = "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,536870912],\"data_offsets\":[0,8]}}";
    expect_header_error(bytes_, 8, "element or byte count overflows", NULL, strlen(bytes_));
    /* offset far past the end with matching size */
    const char *far = "{\"a\":{\"dtype\":\"U8\",\"shape\":[9223372036854775807],"
                      "\"data_offsets\":[0,9223372036854775807]}}";
    expect_header_error(far, 8, "rule 7", NULL, strlen(far) + 8);
}
END_TEST

/* ---------------------------------------------------------------- rule 7 */

START_TEST(rule7_leftover_and_truncated)
{
    const char *h = "{" T_A "}";
    expect_header_error(h, 9, "rule 7 (tensor data ends at 8 but the byte buffer holds 9 bytes: bytes left over",
                        NULL, strlen(h) + 8);
    expect_header_error(h, 7, "holds 7 bytes: truncated", NULL, strlen(h) + 7);
    expect_header_error("{}", 1, "bytes left over", NULL, 2);
}
END_TEST

START_TEST(empty_header_object_is_valid)
{
    bytes b = {0};
    st_file(&b, "{}", NULL);
    crafted c = write_crafted(&b, ".safetensors");
    es_file *f;
    es_err err = {0};
    ck_assert_int_eq(es_file_map(c.path, &f, &err), 0);
    char **names;
    ck_assert_int_eq(es_safetensors_names(f, &names, &err), 0);
    ck_assert_ptr_null(names[0]);
    es_strv_free(names);
    es_file_free(f);
    unlink(c.path);
    b_free(&b);
}
END_TEST

START_TEST(non_finite_values)
{
    const float bad = NAN;
    bytes d = {0}, b = {0};
    b_endian(&d, &a_vals[0], 4, 0);
    b_endian(&d, &bad, 4, 0);
    const char *h = "{" T_A "}";
    st_file(&b, h, &d);
    crafted c = write_crafted(&b, ".safetensors");
    es_matrix *m = NULL;
    es_err err = {0};
    assert_format_error(es_matrix_load("t/nan", c.path, "a", ES_AXIS_COLUMNS, &m, &err), &err, c.path,
                        "non-finite value (NaN) in tensor 'a' element 1", 8 + strlen(h) + 4);
    ck_assert_ptr_null(m);
    unlink(c.path);
    b_free(&b);
    b_free(&d);
}
END_TEST

/* ---------------------------------------------------------------- real data */

START_TEST(real_gpt2_partial)
{
    if (!es_have_file(PARTIAL)) {
        ES_SKIP("%s absent, real safetensors test not run", PARTIAL);
        return;
    }
    es_matrix *ln, *wpe, *npy;
    es_err err = {0};
    ck_assert_int_eq(es_matrix_load("g/ln", PARTIAL, "h.0.ln_1.weight", ES_AXIS_COLUMNS, &ln, &err), 0);
    ck_assert_uint_eq(ln->rows, 1);
    ck_assert_uint_eq(ln->cols, 768);
    ck_assert_str_eq(ln->prov.file_sha256, PARTIAL_SHA);
    ck_assert_uint_eq(ln->prov.shape[0], 768);
    es_matrix_release(ln);

    /* The same W_pos through two formats and two parsers must agree bit for bit. */
    ck_assert_int_eq(es_matrix_load("g/wpe", PARTIAL, "wpe.weight", ES_AXIS_COLUMNS, &wpe, &err), 0);
    ck_assert_int_eq(es_matrix_load("g/wpe-npy", ES_REPO_DATA "/gpt2-small/wpe.npy", NULL, ES_AXIS_COLUMNS,
                                    &npy, &err), 0);
    ck_assert_uint_eq(wpe->rows, 1024);
    ck_assert_uint_eq(wpe->cols, 768);
    ck_assert_str_eq(wpe->prov.sha256, npy->prov.sha256);
    for (size_t i = 0; i < 1024; i += 7)
        for (size_t j = 0; j < 768; j++)
            ck_assert(es_matrix_at(wpe, i, j) == es_matrix_at(npy, i, j));
    es_matrix_release(wpe);
    es_matrix_release(npy);

    es_file *f;
    char **names;
    ck_assert_int_eq(es_file_map(PARTIAL, &f, &err), 0);
    ck_assert_int_eq(es_safetensors_names(f, &names, &err), 0);
    size_t n = 0;
    while (names[n])
        n++;
    ck_assert_uint_eq(n, 123);
    es_strv_free(names);
    es_file_free(f);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *valid = tcase_create("valid");
    tcase_add_test(valid, all_dtypes);
    tcase_add_test(valid, tensor_fields_and_names);
    tcase_add_test(valid, unsupported_dtype_and_rank);
    tcase_add_test(valid, provenance_hashes);
    tcase_add_test(valid, empty_header_object_is_valid);
    tcase_add_test(valid, real_gpt2_partial);
    tcase_set_timeout(valid, 120);
    suite_add_tcase(s, valid);
    TCase *bad = tcase_create("malformed");
    tcase_add_test(bad, rule1_short_file);
    tcase_add_test(bad, rule2_header_too_long);
    tcase_add_test(bad, rule3_header_past_eof);
    tcase_add_test(bad, rule4_not_json);
    tcase_add_test(bad, rule4_bad_entries);
    tcase_add_test(bad, rule4_metadata);
    tcase_add_test(bad, rule5_duplicate_keys);
    tcase_add_test(bad, rule6_offsets);
    tcase_add_test(bad, rule7_leftover_and_truncated);
    tcase_add_test(bad, non_finite_values);
    suite_add_tcase(s, bad);
    return s;
}

ES_CHECK_MAIN(make_suite)
