/* Doubles as text without printf: the fewest significant digits that read
 * back (strtod) as the same double, found by Dragonbox (shortest.cc), laid
 * out the way the daemon printed numbers before (%.17g, or jansson's
 * JSON_REAL_PRECISION(17) in JSON): fixed notation for decimal exponents
 * -4..16, scientific otherwise. Only the number of digits changes
 * ("0.1" where %.17g wrote "0.10000000000000001"); every value parses to the
 * same double. About 20 times as fast as glibc's %.17g, which made CSV and
 * JSON tables the slowest part of a reply. */
#include "embedscope/core.h"

#include <math.h>
#include <string.h>

/* "00" "01" ... "99": two digits at a time. */
static const char pairs[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                               "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                               "8081828384858687888990919293949596979899";

/* The decimal digits of v (no leading zeros; "0" for 0) into out; their count. */
static size_t u64_digits(uint64_t v, char out[20])
{
    char tmp[20];
    size_t n = 20;
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        n -= 2;
        memcpy(tmp + n, pairs + 2 * r, 2);
    }
    if (v >= 10) {
        n -= 2;
        memcpy(tmp + n, pairs + 2 * v, 2);
    } else {
        tmp[--n] = (char)('0' + v);
    }
    memcpy(out, tmp + n, 20 - n);
    return 20 - n;
}

/* See core.h. */
size_t es_dtoa(double v, es_num_style style, char out[ES_DTOA_MAX])
{
    char *p = out;
    bool json = style == ES_NUM_JSON;
    if (signbit(v) && !isnan(v))
        *p++ = '-';
    if (!isfinite(v)) { /* printf's words; JSON has none (callers check first) */
        memcpy(p, isnan(v) ? "nan" : "inf", 3);
        return (size_t)(p + 3 - out);
    }
    if (v == 0) {
        memcpy(p, json ? "0.0" : "0", json ? 3 : 1);
        return (size_t)(p - out) + (json ? 3 : 1);
    }
    uint64_t sig;
    int e10;
    es_shortest_decimal(v, &sig, &e10);
    char d[20];
    size_t n = u64_digits(sig, d);
    int x = e10 + (int)n - 1; /* v = d[0].d[1]... x 10^x */
    if (x < -4 || x >= 17) {  /* %g's rule at precision 17 */
        *p++ = d[0];
        if (n > 1) {
            *p++ = '.';
            memcpy(p, d + 1, n - 1);
            p += n - 1;
        }
        *p++ = 'e';
        unsigned ax = (unsigned)(x < 0 ? -x : x);
        if (x < 0)
            *p++ = '-';
        else if (!json)
            *p++ = '+';
        if (ax >= 100)
            *p++ = (char)('0' + ax / 100);
        if (ax >= 10 || !json) {
            memcpy(p, pairs + 2 * (ax % 100), 2); /* printf writes at least two exponent digits */
            p += 2;
        } else {
            *p++ = (char)('0' + ax);
        }
    } else if (x < 0) { /* 0.000ddd */
        memcpy(p, "0.000", (size_t)(1 - x));
        p += 1 - x;
        memcpy(p, d, n);
        p += n;
    } else if ((size_t)x + 1 >= n) { /* an integer: ddd000 */
        memcpy(p, d, n);
        p += n;
        memset(p, '0', (size_t)x + 1 - n);
        p += (size_t)x + 1 - n;
        if (json) { /* jansson's ".0": a real stays a real when read back */
            memcpy(p, ".0", 2);
            p += 2;
        }
    } else { /* ddd.ddd */
        memcpy(p, d, (size_t)x + 1);
        p += x + 1;
        *p++ = '.';
        memcpy(p, d + x + 1, n - (size_t)x - 1);
        p += n - (size_t)x - 1;
    }
    return (size_t)(p - out);
}
