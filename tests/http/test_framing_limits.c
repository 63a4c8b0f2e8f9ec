/* Unit test of the framing check's limits on a chunked request's trailer
 * fields (src/http/framing.c): libmicrohttpd keeps trailer fields in the same
 * per-connection memory as header fields, so the trailer section has the
 * header section's limits (8 KiB, 100 lines) of its own; the HTTP tests
 * (test_hostile) send the head's limits only. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "check_main.h"
#include "http/framing.h"

#define SECTION_MAX 8192
#define LINES_MAX 100

/* A chunked POST head, a 5-byte chunk, the last chunk and then `lines` trailer
 * field lines whose section counts `size` bytes as the framing check counts a
 * head's fields (each line with its CR, the CR of the empty line), and the empty line. */
static size_t chunked_with_trailer(char *out, size_t cap, size_t lines, size_t size)
{
    size_t n = (size_t)snprintf(out, cap, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                          "5\r\nhello\r\n0\r\n");
    size_t counted = 1; /* the empty line's CR */
    for (size_t i = 0; i + 1 < lines; i++) {
        n += (size_t)snprintf(out + n, cap - n, "T%zu: x\r\n", i % 10);
        counted += strlen("T0: x\r");
    }
    counted += strlen("L: \r");
    ck_assert_uint_ge(size, counted);
    n += (size_t)snprintf(out + n, cap - n, "L: ");
    memset(out + n, 'v', size - counted);
    n += size - counted;
    n += (size_t)snprintf(out + n, cap - n, "\r\n\r\n");
    return n;
}

/* Feed data; return whether the framing refused it, its detail in detail. */
static bool refused(const char *data, size_t len, char detail[256])
{
    es_framing f;
    es_framing_init(&f);
    size_t took = es_framing_feed(&f, data, len);
    strcpy(detail, f.detail);
    if (!es_framing_refused(&f))
        ck_assert_uint_eq(took, len);
    return es_framing_refused(&f);
}

START_TEST(trailer_section_limits)
{
    static char buf[3 * SECTION_MAX];
    char detail[256];
    /* The largest trailer admitted: 100 lines, 8 KiB; one line or one byte more is refused. */
    size_t n = chunked_with_trailer(buf, sizeof buf, LINES_MAX, SECTION_MAX);
    ck_assert_msg(!refused(buf, n, detail), "the largest trailer refused: %s", detail);
    n = chunked_with_trailer(buf, sizeof buf, LINES_MAX + 1, 2000);
    ck_assert(refused(buf, n, detail));
    ck_assert_msg(strstr(detail, "more than 100 trailer field lines") != NULL, "%s", detail);
    n = chunked_with_trailer(buf, sizeof buf, LINES_MAX, SECTION_MAX + 1);
    ck_assert(refused(buf, n, detail));
    ck_assert_msg(strstr(detail, "the trailer fields exceed 8192 bytes") != NULL, "%s", detail);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("http-framing-limits");
    TCase *tc = tcase_create("trailer");
    tcase_add_test(tc, trailer_section_limits);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
