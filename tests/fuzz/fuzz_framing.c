/* libFuzzer target: the strict request framing check (src/http/framing.c),
 * which judges every byte of a connection before libmicrohttpd parses it.
 *
 * Input: the bytes a client sends on one connection; the first byte picks the
 * size of the reads they arrive in (the rest is the stream).
 * Checked: the verdict (served, or refused with the same kind and detail) does
 * not depend on how the stream is cut into reads (all at once, in reads of the
 * chosen size, a byte at a time); a feed never passes more than it was given,
 * and nothing after a refusal; a refusal has a kind and names a byte offset;
 * the bytes passed before a refusal are whole messages (a fresh check of them
 * alone ends at a message boundary and refuses nothing). abort() on any broken
 * rule. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/framing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_framing: %s\n", what);
    abort();
}

/* Feed data in reads of `step` bytes; returns the bytes passed in all. */
static size_t feed_in_steps(es_framing *f, const uint8_t *data, size_t size, size_t step)
{
    size_t passed = 0;
    for (size_t at = 0; at < size; at += step) {
        size_t n = size - at < step ? size - at : step;
        bool before = es_framing_refused(f);
        size_t ok = es_framing_feed(f, data + at, n);
        if (ok > n)
            fail("passed more bytes than given");
        if (before && ok != 0)
            fail("passed bytes after a refusal");
        if (ok < n && !es_framing_refused(f))
            fail("held bytes back without refusing");
        passed += ok;
    }
    return passed;
}

static void same_verdict(const es_framing *a, const es_framing *b)
{
    if (es_framing_refused(a) != es_framing_refused(b))
        fail("the verdict depends on how the stream is read");
    if (es_framing_refused(a) && (a->kind != b->kind || strcmp(a->detail, b->detail) != 0))
        fail("the refusal depends on how the stream is read");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t step = 1 + data[0] % 64;
    data++, size--;
    es_framing whole, steps, bytes;
    es_framing_init(&whole);
    es_framing_init(&steps);
    es_framing_init(&bytes);
    size_t passed = feed_in_steps(&whole, data, size, size ? size : 1);
    size_t passed_steps = feed_in_steps(&steps, data, size, step);
    feed_in_steps(&bytes, data, size, 1);
    same_verdict(&whole, &steps);
    same_verdict(&whole, &bytes);
    if (!es_framing_refused(&whole))
        return 0;
    if (whole.kind >= ES_PROB_COUNT || !strstr(whole.detail, " of the request)"))
        fail("a refusal without a kind or a byte offset");
    if (passed_steps < passed)
        fail("reads in steps passed fewer bytes than one read");
    es_framing prefix;
    es_framing_init(&prefix);
    if (es_framing_feed(&prefix, data, passed) != passed || es_framing_refused(&prefix) || prefix.offset != 0)
        fail("the bytes passed before a refusal are not whole messages");
    return 0;
}
