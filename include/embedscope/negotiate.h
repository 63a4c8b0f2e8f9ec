/* The rendering of the service (src/api), its header logic: ETag matching,
 * gzip, CORS, Prefer, request ids and forwarded clients.
 * Owner: src/api/negotiate.c. Ownership and failure rules: see core.h. */
#ifndef ES_NEGOTIATE_H
#define ES_NEGOTIATE_H

#include <stdbool.h>
#include <stddef.h>

/* Does Accept-Encoding allow gzip (gzip, x-gzip or *, q > 0)? NULL: no. */
bool es_accepts_gzip(const char *accept_encoding);
/* Weak comparison of If-None-Match (a list, or "*") with one entity tag. */
bool es_etag_matches(const char *if_none_match, const char *etag);
/* W/"<32 hex>" of sha256(text) into out. */
void es_etag_of(const void *text, size_t len, char out[40]);
/* The same from the text's sha256 in hex (es_sha256_hex), when the caller has it. */
void es_etag_of_hash(const char hex[65], char out[40]);
/* The Access-Control-Allow-Origin value for a request Origin (NULL: none sent)
 * under the configured allow-list (NULL-terminated, "*" = any): "*" (whatever
 * the Origin), the origin itself, or NULL (no CORS headers). */
const char *es_cors_allow(char *const *origins, const char *origin);
/* True when the list is restricted (no "*"): every reply then depends on the
 * request's Origin and must say Vary: Origin. */
bool es_cors_varies(char *const *origins);
/* May a web page of origin write here (PUT, POST, DELETE)? True for no Origin
 * (not a browser's page), the daemon's own origin (origin's host[:port] is the
 * request's Host) and an origin the list names itself; "*" lets any origin
 * read, never write. Never fails. */
bool es_cors_may_write(char *const *origins, const char *origin, const char *host);
/* RFC 7240 Prefer: respond-async into *async, wait=N (seconds, 0..86400) into
 * *wait (-1 when absent or malformed). NULL: neither. Never fails. */
void es_prefer(const char *prefer, bool *async, double *wait);
/* Longest accepted X-Forwarded-Prefix, with its NUL. */
#define ES_PREFIX_MAX 128
/* The path prefix a reverse proxy serves the daemon under (X-Forwarded-Prefix,
 * e.g. "/embedscope") into out, without a trailing '/' ("/" gives ""). False,
 * out = "", when given is NULL or not a clean absolute path (segments of
 * [A-Za-z0-9._~-], no empty, "." or ".." segment, < ES_PREFIX_MAX bytes). */
bool es_forwarded_prefix(const char *given, char out[ES_PREFIX_MAX]);
/* The client named by an X-Forwarded-For value (NULL: none): its last entry,
 * the address the (trusted) proxy itself saw, in canonical text (inet_ntop:
 * "::ffff:a.b.c.d" becomes "a.b.c.d"). Entries before it are the client's own
 * claims and are ignored. False (out = "") unless that entry, blanks trimmed,
 * is a numeric IPv4 or IPv6 address. Never fails otherwise. */
#define ES_CLIENT_MAX 64
bool es_forwarded_for(const char *xff, char out[ES_CLIENT_MAX]);
/* A numeric IPv4/IPv6 address as 16 bytes (IPv4 mapped); -1 if malformed. */
int es_addr_parse(const char *text, unsigned char key[16]);
/* given (a trusted proxy's X-Request-Id, or NULL) if it is 1..64 chars of
 * [A-Za-z0-9._:-], else a fresh id: 32 lowercase hex digits of a UUIDv7-like
 * 128-bit value (time-ordered, random). Never fails. */
void es_request_id(const char *given, char out[72]);
/* gzip (RFC 1952) of len bytes into a malloc'ed buffer: zlib level 6, or 1
 * above ES_GZIP_FAST_ABOVE (a 32 MB JSON table: 0.36 s instead of 1.9 s, 52 %
 * of its size instead of 55 %). -1 on zlib or allocation failure (the caller
 * then sends the identity body). */
int es_gzip(const char *in, size_t len, char **out, size_t *out_len);
#define ES_GZIP_FAST_ABOVE ((size_t)1 << 20)

/* Bodies smaller than this are sent uncompressed. */
#define ES_GZIP_MIN_BYTES 1024
/* Would gzip pay for this body? Its first ES_GZIP_SAMPLE bytes, compressed at
 * level 1, must shrink below ES_GZIP_PAYS_BELOW of their size (an NPY table of
 * doubles shrinks 4 %: never worth compressing); *ratio is the sample's
 * compressed / original size (0 for a body under ES_GZIP_MIN_BYTES). Never fails. */
#define ES_GZIP_SAMPLE ((size_t)64 << 10)
#define ES_GZIP_PAYS_BELOW 0.9
bool es_gzip_pays(const char *body, size_t len, double *ratio);
/* Shared bodies up to this size are compressed by the request that first
 * accepts gzip, larger ones by a background task of the compute pool (that
 * request is answered identity, later ones gzip). */
#define ES_GZIP_INLINE_MAX ((size_t)256 << 10)
struct es_reply;
/* Attach rep->gz, the gzip of a 200 body that es_gzip_pays says is worth
 * compressing, when it is smaller than the body. Never fails (no gz then). */
void es_reply_gzip(struct es_reply *rep);

#endif
