/* The daemon refuses printf extensions. glibc formats through its slow path
 * (printf_positional: every directive parsed twice, the output put piece by
 * piece) in a process where any library has registered one, and libquadmath,
 * which OpenBLAS's libgfortran loads, registers its %Q modifier and handlers in
 * a constructor: every snprintf of the daemon (cache and selection keys,
 * request ids, log lines, the numbers jansson writes) took about twice as long,
 * some 12 % of the CPU time of a warm cached reply. The executable's
 * definitions come first in symbol lookup (the link exports them, see the
 * Makefile), so libquadmath's constructor is told no, as glibc would tell it
 * when out of memory, and gives up; nothing in the process prints __float128
 * through printf (quadmath_snprintf needs no hook). */
#include <printf.h>

int register_printf_type(printf_va_arg_function *fct)
{
    (void)fct;
    return -1;
}

int register_printf_modifier(const wchar_t *str)
{
    (void)str;
    return -1;
}

int register_printf_specifier(int spec, printf_function *func, printf_arginfo_size_function *arginfo)
{
    (void)spec, (void)func, (void)arginfo;
    return -1;
}

int register_printf_function(int spec, printf_function *func, printf_arginfo_function *arginfo)
{
    (void)spec, (void)func, (void)arginfo;
    return -1;
}
