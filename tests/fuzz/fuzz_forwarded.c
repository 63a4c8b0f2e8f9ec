/* libFuzzer target: X-Forwarded-For (src/api/negotiate.c es_forwarded_for),
 * which names the client of a request forwarded by a trusted proxy (access
 * log, per-client fairness of the compute queue).
 *
 * Input: a header value (any bytes; a NUL ends it, as in a C header string).
 * Checked: an accepted client is shorter than ES_CLIENT_MAX, parses as an
 * address (es_addr_parse) and is canonical (formatting its parse gives it
 * back), and the input's last comma-separated entry, blanks trimmed, parses to
 * the same address; a refused value leaves out = "". abort() on any broken rule. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedscope/negotiate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *value)
{
    fprintf(stderr, "fuzz_forwarded: %s: '%s'\n", what, value);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *given = malloc(size + 1);
    memcpy(given, data, size);
    given[size] = '\0';
    char out[ES_CLIENT_MAX];
    if (es_forwarded_for(given, out)) {
        unsigned char key[16], again[16];
        if (strlen(out) >= ES_CLIENT_MAX || es_addr_parse(out, key) < 0)
            fail("accepted client is not an address", out);
        char text[INET6_ADDRSTRLEN];
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        bool v4 = memcmp(key, mapped, 12) == 0;
        inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? key + 12 : key, text, sizeof text);
        if (strcmp(text, out) != 0)
            fail("accepted client is not canonical", out);
        const char *last = strrchr(given, ',');
        last = last ? last + 1 : given;
        while (*last == ' ' || *last == '\t')
            last++;
        char entry[ES_CLIENT_MAX];
        size_t n = strcspn(last, " \t");
        if (n >= sizeof entry)
            fail("accepted an overlong last entry", given);
        memcpy(entry, last, n);
        entry[n] = '\0';
        if (es_addr_parse(entry, again) < 0 || memcmp(key, again, 16) != 0)
            fail("client is not the last entry", given);
    } else if (out[0]) {
        fail("refused value left out non-empty", given);
    }
    free(given);
    return 0;
}
