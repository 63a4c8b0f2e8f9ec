/* Header logic without sockets: content coding, entity tags, CORS, request ids
 * and gzip (zlib). */
#include "embedscope/negotiate.h"
#include "embedscope/results.h"

#include <arpa/inet.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <limits.h>
#include <zlib.h>
#include <stdatomic.h>

/* Skip optional whitespace. */
static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* The q value of one Accept-Encoding element from its first ';' (p, NULL if
 * none) up to end: ";q=0.5" gives 0.5, no q parameter gives 1. */
static double element_q(const char *p, const char *end)
{
    while (p && p < end) {
        const char *a = skip_ows(p + 1); /* stops at the ',' or NUL at end */
        if ((a[0] == 'q' || a[0] == 'Q') && a[1] == '=')
            return strtod(a + 2, NULL);
        p = memchr(a, ';', (size_t)(end - a));
    }
    return 1.0;
}

/* Does Accept-Encoding allow gzip? An explicit "gzip;q=0" wins over "*". */
bool es_accepts_gzip(const char *accept_encoding)
{
    if (!accept_encoding)
        return false;
    double gzip_q = -1, star_q = -1;
    for (const char *p = accept_encoding; *p;) {
        p = skip_ows(p);
        const char *end = p + strcspn(p, ",");
        size_t name_len = strcspn(p, ";, \t");
        if (name_len > (size_t)(end - p))
            name_len = (size_t)(end - p);
        const char *params = memchr(p, ';', (size_t)(end - p));
        double q = element_q(params, end);
        if ((name_len == 4 && strncasecmp(p, "gzip", 4) == 0) || (name_len == 6 && strncasecmp(p, "x-gzip", 6) == 0))
            gzip_q = q;
        else if (name_len == 1 && *p == '*')
            star_q = q;
        p = *end ? end + 1 : end;
    }
    return gzip_q >= 0 ? gzip_q > 0 : star_q > 0;
}

/* Weak comparison (RFC 9110 §8.8.3.2): opaque tags equal, W/ ignored on both sides. */
bool es_etag_matches(const char *if_none_match, const char *etag)
{
    if (!if_none_match || !etag || !*etag)
        return false;
    if (strncmp(etag, "W/", 2) == 0)
        etag += 2;
    size_t want = strlen(etag);
    for (const char *p = if_none_match; *p;) {
        p = skip_ows(p);
        if (*p == '*')
            return true;
        if (strncmp(p, "W/", 2) == 0)
            p += 2;
        size_t len = strcspn(p, ", \t");
        if (len == want && strncmp(p, etag, len) == 0)
            return true;
        p += len;
        p += strcspn(p, ",");
        if (*p == ',')
            p++;
    }
    return false;
}

/* W/"<first 32 hex digits of sha256(text)>". */
void es_etag_of(const void *text, size_t len, char out[40])
{
    char hex[65];
    es_sha256_hex(text, len, hex);
    es_etag_of_hash(hex, out);
}

/* The ETag of a text whose sha256 (hex) is known. */
void es_etag_of_hash(const char hex[65], char out[40])
{
    snprintf(out, 40, "W/\"%.32s\"", hex);
}

/* Allow-Origin value: "*" if the list allows any origin (Origin or not), the
 * origin if listed, else NULL. */
const char *es_cors_allow(char *const *origins, const char *origin)
{
    if (!origins)
        return NULL;
    for (; *origins; origins++) {
        if (strcmp(*origins, "*") == 0)
            return "*";
        if (origin && *origin && strcmp(*origins, origin) == 0)
            return origin;
    }
    return NULL;
}

/* See negotiate.h. Origin is "scheme://host[:port]" (RFC 6454), or "null" for an
 * opaque origin (a sandboxed frame, a file), which never writes. */
bool es_cors_may_write(char *const *origins, const char *origin, const char *host)
{
    if (!origin || !*origin)
        return true;
    const char *authority = strstr(origin, "://");
    if (authority && host && *host && strcasecmp(authority + 3, host) == 0)
        return true;
    for (; origins && *origins; origins++)
        if (strcmp(*origins, origin) == 0)
            return true;
    return false;
}

/* A restricted list (no "*") makes every answer's CORS headers depend on Origin. */
bool es_cors_varies(char *const *origins)
{
    return es_cors_allow(origins, NULL) == NULL;
}

/* Valid: "/" then segments of [A-Za-z0-9._~-] separated by single '/', no "."
 * or ".." segment, shorter than ES_PREFIX_MAX; a trailing '/' is dropped. */
bool es_forwarded_prefix(const char *given, char out[ES_PREFIX_MAX])
{
    out[0] = '\0';
    if (!given || given[0] != '/' || strlen(given) >= ES_PREFIX_MAX)
        return false;
    for (const char *seg = given + 1; *seg;) {
        size_t len = strspn(seg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~-");
        bool dots = (len == 1 && seg[0] == '.') || (len == 2 && seg[0] == '.' && seg[1] == '.');
        if (dots || (seg[len] && seg[len] != '/') || (len == 0 && seg[len]))
            return false;
        seg += len + (seg[len] == '/');
    }
    size_t n = strlen(given);
    snprintf(out, ES_PREFIX_MAX, "%.*s", (int)(given[n - 1] == '/' ? n - 1 : n), given);
    return true;
}

/* Is s 1..64 chars of [A-Za-z0-9._:-], safe to echo in headers and logs? */
static bool request_id_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= 64 || !(isalnum((unsigned char)s[n]) || strchr("._:-", s[n])))
            return false;
    return n > 0;
}

/* 16 bytes laid out like a UUIDv7 (RFC 9562): 48 bits of Unix milliseconds,
 * then random bits (version 7, variant 10), so ids sort by time and never
 * collide across processes, restarts or replicas. The random bits come from
 * getrandom(2); should it fail, from the clock's nanoseconds, the pid and a
 * process-wide counter mixed by splitmix64 (unique within the process still). */
static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static void random_bytes(unsigned char *out, size_t n)
{
    /* taken from the kernel 4 KiB at a time per thread: one getrandom(2) a request was a system call
     * on every reply's path (the bytes are as random; each is handed out once) */
    static _Thread_local unsigned char pool[4096];
    static _Thread_local size_t left;
    if (n <= sizeof pool) {
        if (left < n && getrandom(pool, sizeof pool, GRND_NONBLOCK) == (ssize_t)sizeof pool)
            left = sizeof pool;
        if (left >= n) {
            memcpy(out, pool + sizeof pool - left, n);
            memset(pool + sizeof pool - left, 0, n);
            left -= n;
            return;
        }
    }
    if (getrandom(out, n, GRND_NONBLOCK) == (ssize_t)n)
        return;
    static atomic_ulong fallback;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ atomic_fetch_add(&fallback, 1);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = splitmix64(seed += i + 1);
        memcpy(out + i, &r, n - i < 8 ? n - i : 8);
    }
}

void es_request_id(const char *given, char out[72])
{
    if (given && request_id_ok(given)) {
        snprintf(out, 72, "%s", given);
        return;
    }
    unsigned char b[16];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    for (int i = 0; i < 6; i++)
        b[i] = (unsigned char)(ms >> (40 - 8 * i));
    random_bytes(b + 6, 10);
    b[6] = (unsigned char)(0x70 | (b[6] & 0x0f));
    b[8] = (unsigned char)(0x80 | (b[8] & 0x3f));
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[32] = '\0';
}

/* gzip of len bytes of in at zlib level `level` into a malloc'ed buffer; -1 if zlib or malloc fails. */
static int gzip_level(const char *in, size_t len, int level, char **out, size_t *out_len)
{
    z_stream zs = {0};
    if (len > UINT_MAX / 2 || deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    uLong bound = deflateBound(&zs, (uLong)len); /* < UINT_MAX for len <= UINT_MAX / 2 */
    char *buf = es_try_alloc(bound, 1);
    if (!buf) {
        deflateEnd(&zs);
        return -1;
    }
    zs.next_in = (Bytef *)in;
    zs.avail_in = (uInt)len;
    zs.next_out = (Bytef *)buf;
    zs.avail_out = (uInt)bound;
    int rc = deflate(&zs, Z_FINISH);
    size_t produced = zs.total_out;
    deflateEnd(&zs);
    if (rc != Z_STREAM_END) {
        free(buf);
        return -1;
    }
    *out = buf;
    *out_len = produced;
    return 0;
}

/* See negotiate.h: level 6 for small bodies, 1 (several times as fast, a few per cent larger) for large ones. */
int es_gzip(const char *in, size_t len, char **out, size_t *out_len)
{
    return gzip_level(in, len, len > ES_GZIP_FAST_ABOVE ? 1 : 6, out, out_len);
}

/* See negotiate.h: the first ES_GZIP_SAMPLE bytes at level 1 say how well the rest compresses. */
bool es_gzip_pays(const char *body, size_t len, double *ratio)
{
    *ratio = 0;
    if (len < ES_GZIP_MIN_BYTES)
        return false;
    size_t n = len < ES_GZIP_SAMPLE ? len : ES_GZIP_SAMPLE;
    char *z;
    size_t zlen;
    if (gzip_level(body, n, 1, &z, &zlen) < 0)
        return false;
    free(z);
    *ratio = (double)zlen / (double)n;
    return *ratio < ES_GZIP_PAYS_BELOW;
}

/* See negotiate.h: the gzip variant of a large 200 body, kept only when smaller. */
void es_reply_gzip(es_reply *rep)
{
    double ratio;
    if (rep->gz || rep->shared || rep->status != 200 || !es_gzip_pays(rep->body, rep->len, &ratio))
        return;
    char *z = NULL;
    size_t zlen = 0;
    if (es_gzip(rep->body, rep->len, &z, &zlen) < 0)
        return;
    if (zlen >= rep->len) {
        free(z);
        return;
    }
    rep->gz = z;
    rep->gz_len = zlen;
}

/* Parse a textual IPv4/IPv6 address into a key (IPv4 mapped, as the acceptor keys
 * connections); -1 if it is neither. */
int es_addr_parse(const char *text, unsigned char key[16])
{
    unsigned char v4[4];
    if (inet_pton(AF_INET, text, v4) == 1) { /* as addr_key maps it */
        memset(key, 0, 16);
        key[10] = key[11] = 0xff;
        memcpy(key + 12, v4, 4);
        return 0;
    }
    return inet_pton(AF_INET6, text, key) == 1 ? 0 : -1;
}

/* See negotiate.h. */
bool es_forwarded_for(const char *xff, char out[ES_CLIENT_MAX])
{
    out[0] = '\0';
    if (!xff)
        return false;
    const char *last = strrchr(xff, ',');
    last = last ? last + 1 : xff;
    last += strspn(last, " \t");
    size_t n = strcspn(last, " \t");
    if (n == 0 || n >= ES_CLIENT_MAX || last[n + strspn(last + n, " \t")] != '\0')
        return false;
    char text[ES_CLIENT_MAX];
    memcpy(text, last, n);
    text[n] = '\0';
    unsigned char key[16];
    if (es_addr_parse(text, key) < 0)
        return false;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    bool v4 = memcmp(key, mapped, 12) == 0;
    return inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? key + 12 : key, out, ES_CLIENT_MAX) != NULL;
}

/* See negotiate.h. */
void es_prefer(const char *prefer, bool *async, double *wait)
{
    *async = false;
    *wait = -1;
    for (const char *p = prefer; p && *p;) {
        p += strspn(p, " \t,");
        size_t len = strcspn(p, ",;");
        if (len == 13 && strncasecmp(p, "respond-async", 13) == 0)
            *async = true;
        else if (len > 5 && strncasecmp(p, "wait=", 5) == 0) {
            char *end;
            double w = strtod(p + 5, &end);
            if (end == p + len && w >= 0 && w <= 86400)
                *wait = w;
        }
        p += len;
        p += strcspn(p, ","); /* skip the preference's parameters */
    }
}
