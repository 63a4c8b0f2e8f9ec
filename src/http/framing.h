/* Strict framing of the request bytes (framing.c): what the acceptor (conns.c)
 * feeds every byte of a connection through before libmicrohttpd parses it. Its
 * own interface, free of libmicrohttpd's types, so that the fuzzer and the
 * tests use it alone. */
#ifndef ES_HTTP_FRAMING_H
#define ES_HTTP_FRAMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "embedscope/problem.h"

/* The strict framing check of one connection's request bytes (RFC 9112):
 * request line, field lines, Content-Length / Transfer-Encoding, chunked
 * bodies and the sizes of a head, judged while the bytes stream past. */
typedef struct es_framing {
    int state, after_cr;
    unsigned long long messages;   /* messages begun so far */
    unsigned long long offset;     /* bytes of the current message so far */
    size_t line_len, section, lines, empty, params;
    bool has_length, has_te, http10, in_trailer, text_overflow;
    bool in_query, in_cookie;      /* past the target's '?'; in a Cookie field's value */
    uint64_t remaining;            /* body or chunk bytes left; the chunk size being read */
    unsigned chunk_digits;
    char name[20];                 /* the current field name (enough to know a framing field) */
    size_t name_len;
    char text[96];                 /* the version, or a framing field's value */
    size_t text_len;
    char te[256];                  /* the Transfer-Encoding list */
    size_t te_len;
    es_problem_kind kind;          /* once refused: the answer's kind (400, 414, 431, 501, 505) */
    char detail[256];              /* and what was wrong, with the byte offset */
} es_framing;

/* Start a connection (its first byte begins a request). Never fails. */
void es_framing_init(es_framing *f);
/* Judge len more bytes of the connection. Returns len while everything is
 * acceptable; once a message is refused (es_framing_refused; f->kind and
 * f->detail say why), the number of leading bytes of data that belong to the
 * complete messages before it (those may still be served), and every later
 * call returns 0. */
size_t es_framing_feed(es_framing *f, const void *data, size_t len);
bool es_framing_refused(const es_framing *f);

#endif
