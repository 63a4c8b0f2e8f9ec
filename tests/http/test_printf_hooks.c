/* Unit test: the daemon refuses printf extensions (src/http/printf_hooks.c),
 * so libquadmath, loaded with OpenBLAS's libgfortran, registers none and glibc
 * keeps formatting through its fast path. */
#include <check.h>
#include <dlfcn.h>
#include <printf.h>

#include "check_main.h"

START_TEST(libquadmath_is_loaded_and_registered_nothing)
{
    /* Loaded (else this test could not fail): */
    ck_assert_ptr_nonnull(dlopen("libquadmath.so.0", RTLD_NOW | RTLD_NOLOAD));
    /* With its hooks, %Qf is a directive taking one argument of the type
     * libquadmath registers (PA_LAST and above); without, glibc knows no Q and
     * the directive takes nothing. (Asked of the parser, not of snprintf, whose
     * ASan interceptor would warn about %Q.) */
    int types[2] = {-1, -1};
    ck_assert_uint_eq(parse_printf_format("%Qf", 2, types), 0);
    ck_assert_int_eq(types[0], -1);
    ck_assert_int_eq(register_printf_modifier(L"W"), -1);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("http-printf-hooks");
    TCase *tc = tcase_create("printf-hooks");
    tcase_add_test(tc, libquadmath_is_loaded_and_registered_nothing);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
