/* Strict HTTP/1.1 message framing (RFC 9112), checked on the bytes of each
 * connection before libmicrohttpd parses them (conns.c feeds it every byte MHD
 * reads; MHD stays the parser). Only what decides where one request ends and
 * the next begins, and what MHD would otherwise answer with its own HTML page,
 * is checked here:
 *
 *   request line   method SP target SP HTTP/1.0|HTTP/1.1 (other HTTP/d.d: 505)
 *   field lines    a token name, the colon right after it (whitespace before
 *                  the colon, an empty name, obs-fold (a line starting with
 *                  SP or HT) and control characters in a value are 400)
 *   framing        Content-Length once, digits only; Transfer-Encoding only
 *                  as the single coding "chunked" (a final "chunked" after
 *                  other codings: 501, which MHD does not decode; anything
 *                  else 400); not both; no Transfer-Encoding in HTTP/1.0
 *   chunked body   hex sizes, extensions, CRLF after each chunk's data,
 *                  trailer fields as field lines
 *   sizes          request line, field section, field lines and cookies,
 *                  query parameters: below what MHD's per-connection memory
 *                  holds (server.c)
 *
 * Line ends are CRLF or a bare LF (RFC 9112 §2.2 lets a recipient accept the
 * latter; MHD does); a bare CR is refused. Empty lines before a request line
 * are skipped, as MHD does. The scanner keeps no bytes: a message is judged
 * while it streams past, and a body is skipped by its length. */
#include "http/framing.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Limits of a head, the only ones (server.c relies on them): nginx's
 * defaults for the request line and the field section (an 8 KiB buffer each,
 * what deploy/nginx.conf in front accepts), Apache's for the field lines.
 * They keep every head inside MHD's per-connection pool (server.c,
 * CONNECTION_MEMORY), so that MHD never answers a size itself: the pool holds
 * the head's bytes, a copy of its Cookie value, and about 64 bytes for each
 * field line, query parameter and cookie MHD parses (0.9.75 splits a Cookie
 * value at every ';' and ','), which is why a Cookie value counts twice in
 * the field section and each of its cookies as a field line. */
#define REQUEST_LINE_MAX (8 * 1024)
#define FIELD_SECTION_MAX (8 * 1024)
#define FIELD_LINES_MAX 100
/* Query parameters of a request target: no endpoint takes more than a few
 * dozen. */
#define QUERY_PARAMS_MAX 64
/* Empty lines tolerated before a request line (MHD skips them). */
#define LEADING_EMPTY_MAX 8
/* A chunk-size line with its extensions. */
#define CHUNK_LINE_MAX 4096
/* Hex digits of a chunk size: 15 keep it below 2^60. */
#define CHUNK_DIGITS_MAX 15
/* Decimal digits of a Content-Length: 18 keep it below 2^63. */
#define LENGTH_DIGITS_MAX 18

enum {
    S_START,        /* before a request line (empty lines skipped) */
    S_METHOD,
    S_TARGET,
    S_VERSION,
    S_LINE_CR,      /* a CR was seen: LF must follow */
    S_FIELD_START,  /* start of a field line, or the empty line ending the section */
    S_NAME,
    S_VALUE,
    S_BODY,         /* Content-Length bytes left */
    S_CHUNK_SIZE,
    S_CHUNK_BWS,    /* blanks after the size, before ';' or the line end */
    S_CHUNK_EXT,
    S_CHUNK_DATA,
    S_CHUNK_END,    /* the CRLF after a chunk's data */
    S_REFUSED
};

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A field value byte: HT, SP, VCHAR, obs-text. */
static bool is_value_byte(unsigned char c)
{
    return c == '\t' || (c >= ' ' && c != 0x7f);
}

static int hex_value(unsigned char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* See framing.h. */
void es_framing_init(es_framing *f)
{
    memset(f, 0, sizeof *f);
    f->state = S_START;
    f->kind = ES_PROB_COUNT;
}

/* Refuse the message: kind and a detail naming the rule and the byte offset. */
__attribute__((format(printf, 3, 4))) static void refuse(es_framing *f, es_problem_kind kind, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(f->detail, sizeof f->detail, "%s (byte %llu of the request)", what,
             (unsigned long long)f->offset);
    f->kind = kind;
    f->state = S_REFUSED;
}

/* A new message starts (its head's facts cleared). */
static void next_message(es_framing *f)
{
    f->messages++;
    f->state = S_START;
    f->offset = 0;
    f->line_len = 0;
    f->section = 0;
    f->lines = 0;
    f->empty = 0;
    f->params = 0;
    f->has_length = f->has_te = f->http10 = f->in_trailer = f->in_query = f->in_cookie = false;
    f->te_len = 0;
}

/* The version of the request line (f->text): 1.0 and 1.1 are served, another
 * HTTP/d.d is 505, anything else 400. */
static void check_version(es_framing *f)
{
    const char *v = f->text;
    if (strcmp(v, "HTTP/1.1") == 0 || strcmp(v, "HTTP/1.0") == 0) {
        f->http10 = v[7] == '0';
        return;
    }
    bool shaped = f->text_len == 8 && strncmp(v, "HTTP/", 5) == 0 && v[5] >= '0' && v[5] <= '9' && v[6] == '.' &&
                  v[7] >= '0' && v[7] <= '9';
    if (shaped)
        refuse(f, ES_PROB_VERSION, "HTTP version %s is not supported (HTTP/1.1 and HTTP/1.0 are)", v);
    else
        refuse(f, ES_PROB_BAD_REQUEST, "the request line does not end in an HTTP version such as HTTP/1.1");
}

/* Trim blanks (OWS) of s[0..*len) in place; returns the start. */
static const char *trim(const char *s, size_t *len)
{
    while (*len && (*s == ' ' || *s == '\t'))
        s++, (*len)--;
    while (*len && (s[*len - 1] == ' ' || s[*len - 1] == '\t'))
        (*len)--;
    return s;
}

/* Blanks after a framing field's value are refused: RFC 9110 lets them go,
 * but MHD 0.9.75 does not trim them, so it would read "5 " as a malformed
 * length and "chunked " as no coding at all (and the body as the next
 * request). */
static bool trailing_blank(es_framing *f)
{
    if (!f->text_len || (f->text[f->text_len - 1] != ' ' && f->text[f->text_len - 1] != '\t'))
        return false;
    refuse(f, ES_PROB_BAD_REQUEST, "blanks after the value of %.*s", (int)f->name_len, f->name);
    return true;
}

/* A Content-Length field's value (f->text): once, 1*DIGIT. */
static void take_length(es_framing *f)
{
    size_t n = f->text_len;
    const char *v = trim(f->text, &n);
    if (trailing_blank(f))
        return;
    if (f->has_length) {
        refuse(f, ES_PROB_BAD_REQUEST, "Content-Length given more than once");
        return;
    }
    if (f->text_overflow || n == 0 || n > LENGTH_DIGITS_MAX || strspn(v, "0123456789") < n) {
        refuse(f, ES_PROB_BAD_REQUEST, "a malformed Content-Length (it must be a decimal number of bytes)");
        return;
    }
    f->has_length = true;
    f->remaining = 0;
    for (size_t i = 0; i < n; i++)
        f->remaining = f->remaining * 10 + (uint64_t)(v[i] - '0');
}

/* A Transfer-Encoding field's value: appended to the codings seen so far
 * (several fields form one list). */
static void take_codings(es_framing *f)
{
    if (f->text_overflow || f->te_len + f->text_len + 2 > sizeof f->te) {
        refuse(f, ES_PROB_BAD_REQUEST, "a Transfer-Encoding too long to be one this server decodes");
        return;
    }
    size_t n = f->text_len;
    const char *v = trim(f->text, &n);
    if (trailing_blank(f))
        return;
    if (f->has_te)
        f->te[f->te_len++] = ',';
    memcpy(f->te + f->te_len, v, n);
    f->te_len += n;
    f->te[f->te_len] = '\0';
    f->has_te = true;
}

/* The transfer codings of the head: exactly "chunked" is served; a list of
 * tokens ending in "chunked" names codings MHD does not decode (501);
 * anything else leaves the body's length undeterminable (400). */
static void check_codings(es_framing *f)
{
    size_t codings = 0;
    bool malformed = false, chunked_last = false;
    for (const char *p = f->te;;) {
        size_t n = strcspn(p, ",");
        size_t m = n;
        const char *tok = trim(p, &m);
        bool token = m > 0;
        for (size_t i = 0; i < m; i++)
            token = token && is_tchar((unsigned char)tok[i]);
        malformed = malformed || !token || (chunked_last && codings);
        chunked_last = token && m == 7 && strncasecmp(tok, "chunked", 7) == 0;
        codings++;
        if (!p[n])
            break;
        p += n + 1;
    }
    if (malformed || !chunked_last)
        refuse(f, ES_PROB_BAD_REQUEST, "Transfer-Encoding '%.60s': the request body's length cannot be determined "
               "(the final coding must be chunked, applied once)", f->te);
    else if (codings > 1)
        refuse(f, ES_PROB_NOT_IMPLEMENTED, "Transfer-Encoding '%.60s': only chunked is decoded", f->te);
}

/* Is the current field (name in f->name) one of the framing fields? */
static bool field_is(const es_framing *f, const char *name)
{
    return f->name_len == strlen(name) && strncasecmp(f->name, name, f->name_len) == 0;
}

/* A complete field line of the head (trailer fields only need the syntax). */
static void end_field(es_framing *f)
{
    f->state = S_FIELD_START;
    if (f->in_trailer)
        return;
    if (field_is(f, "content-length"))
        take_length(f);
    else if (field_is(f, "transfer-encoding"))
        take_codings(f);
}

/* The empty line ending a field section: where the body begins, and how long. */
static void end_head(es_framing *f)
{
    if (f->in_trailer) {
        next_message(f);
        return;
    }
    if (f->has_length && f->has_te) {
        refuse(f, ES_PROB_BAD_REQUEST, "both Content-Length and Transfer-Encoding");
        return;
    }
    if (f->has_te && f->http10) {
        refuse(f, ES_PROB_BAD_REQUEST, "Transfer-Encoding in an HTTP/1.0 request");
        return;
    }
    if (f->has_te) {
        check_codings(f);
        if (f->state == S_REFUSED)
            return;
        f->state = S_CHUNK_SIZE;
        f->line_len = 0;
        f->chunk_digits = 0;
        f->remaining = 0;
    } else if (f->has_length && f->remaining > 0) {
        f->state = S_BODY;
    } else {
        next_message(f);
    }
}

/* The end of a chunk-size line. */
static void end_chunk_line(es_framing *f)
{
    if (f->remaining > 0) {
        f->state = S_CHUNK_DATA;
    } else { /* the last chunk: trailer fields follow */
        f->state = S_FIELD_START;
        f->in_trailer = true;
        f->section = 0;
        f->lines = 0;
    }
}

/* Keep a byte of a field name or value (for the framing fields only). */
static void keep(es_framing *f, unsigned char c)
{
    if (f->text_len + 1 < sizeof f->text) {
        f->text[f->text_len++] = (char)c;
        f->text[f->text_len] = '\0';
    } else {
        f->text_overflow = true;
    }
}

/* A line of the current head grows by one byte: refuse it past the limits. */
static bool head_limits(es_framing *f)
{
    if (f->state == S_START) /* empty lines (LEADING_EMPTY_MAX), or a method's first byte (line_len 1) */
        return true;
    if (f->state == S_METHOD || f->state == S_TARGET || f->state == S_VERSION) {
        if (++f->line_len > REQUEST_LINE_MAX) {
            refuse(f, ES_PROB_URI_TOO_LONG, "the request line is longer than %d bytes", REQUEST_LINE_MAX);
            return false;
        }
    } else if (++f->section > FIELD_SECTION_MAX) {
        refuse(f, ES_PROB_HEADERS_TOO_LARGE, "the %s fields exceed %d bytes", f->in_trailer ? "trailer" : "header",
               FIELD_SECTION_MAX);
        return false;
    }
    return true;
}

/* One more field line, or one more cookie of a Cookie field (MHD keeps
 * each as an entry): refuse it past FIELD_LINES_MAX. */
static bool count_line(es_framing *f)
{
    if (++f->lines <= FIELD_LINES_MAX)
        return true;
    refuse(f, ES_PROB_HEADERS_TOO_LARGE, "more than %d %s field lines (each cookie of a Cookie field counts as one)",
           FIELD_LINES_MAX, f->in_trailer ? "trailer" : "header");
    return false;
}

/* A byte of a Cookie value counts twice in the field section (MHD parses a
 * copy of it), and each ';' or ',' starts another cookie. */
static bool count_cookie_byte(es_framing *f, unsigned char c)
{
    if (++f->section > FIELD_SECTION_MAX) {
        refuse(f, ES_PROB_HEADERS_TOO_LARGE, "the header fields exceed %d bytes (a Cookie field counts twice)",
               FIELD_SECTION_MAX);
        return false;
    }
    return (c != ';' && c != ',') || count_line(f);
}

/* A line end (CR or LF) in state `then`: what follows the line. */
static void line_end(es_framing *f, unsigned char c, int then)
{
    f->after_cr = then;
    if (c == '\r') {
        f->state = S_LINE_CR;
        return;
    }
    f->state = then;
}

/* Where a line that ended leads (after its LF). */
static void finish_line(es_framing *f)
{
    switch (f->after_cr) {
    case S_START: /* an empty line before the request line */
        f->state = S_START;
        break;
    case S_METHOD: /* the request line */
        check_version(f);
        if (f->state != S_REFUSED)
            f->state = S_FIELD_START;
        break;
    case S_NAME: /* a field line */
        end_field(f);
        break;
    case S_FIELD_START: /* the empty line */
        end_head(f);
        break;
    case S_CHUNK_SIZE:
        end_chunk_line(f);
        break;
    case S_CHUNK_END:
        f->state = S_CHUNK_SIZE;
        f->line_len = 0;
        f->chunk_digits = 0;
        f->remaining = 0;
        break;
    }
}

/* One byte of a head (request line or field section). */
static void head_byte(es_framing *f, unsigned char c)
{
    switch (f->state) {
    case S_START:
        if (c == '\r' || c == '\n') {
            if (++f->empty > LEADING_EMPTY_MAX)
                refuse(f, ES_PROB_BAD_REQUEST, "more than %d empty lines before the request line", LEADING_EMPTY_MAX);
            else
                line_end(f, c, S_START);
        } else if (is_tchar(c)) {
            f->state = S_METHOD;
            f->line_len = 1;
        } else {
            refuse(f, ES_PROB_BAD_REQUEST, "the request does not start with an HTTP method");
        }
        return;
    case S_METHOD:
        if (c == ' ')
            f->state = S_TARGET, f->text_len = 0;
        else if (!is_tchar(c))
            refuse(f, ES_PROB_BAD_REQUEST, "a byte 0x%02x in the method (a token, then one space)", c);
        return;
    case S_TARGET:
        if (c == ' ' && f->text_len > 0) {
            f->state = S_VERSION;
            f->text_len = 0;
            f->text[0] = '\0';
            f->text_overflow = false;
        } else if (c <= ' ' || c == 0x7f) {
            refuse(f, ES_PROB_BAD_REQUEST, "a byte 0x%02x in the request target (one space, the target, one "
                   "space, the version)", c);
        } else {
            f->text_len = 1; /* not kept: only that it is not empty */
            if (c == '?')
                f->in_query = true;
            else if (c == '&' && f->in_query && ++f->params >= QUERY_PARAMS_MAX)
                refuse(f, ES_PROB_BAD_REQUEST, "the query has more than %d parameters", QUERY_PARAMS_MAX);
        }
        return;
    case S_VERSION:
        if (c == '\r' || c == '\n') {
            line_end(f, c, S_METHOD);
        } else if (f->text_len >= 8 || c <= ' ' || c == 0x7f) {
            refuse(f, ES_PROB_BAD_REQUEST, "the request line does not end in an HTTP version such as HTTP/1.1");
        } else {
            keep(f, c);
        }
        return;
    case S_FIELD_START:
        if (c == '\r' || c == '\n') {
            line_end(f, c, S_FIELD_START);
        } else if (c == ' ' || c == '\t') {
            refuse(f, ES_PROB_BAD_REQUEST, "a field line folded onto the next (obs-fold)");
        } else if (c == ':') {
            refuse(f, ES_PROB_BAD_REQUEST, "a field line with an empty name");
        } else if (!is_tchar(c)) {
            refuse(f, ES_PROB_BAD_REQUEST, "a byte 0x%02x in a field name", c);
        } else if (count_line(f)) {
            f->state = S_NAME;
            f->name_len = 0;
            f->name[f->name_len++] = (char)c;
        }
        return;
    case S_NAME:
        if (c == ':') {
            f->state = S_VALUE;
            f->in_cookie = field_is(f, "cookie");
            f->text_len = 0;
            f->text[0] = '\0';
            f->text_overflow = false;
        } else if (c == ' ' || c == '\t') {
            refuse(f, ES_PROB_BAD_REQUEST, "whitespace between a field name and its colon");
        } else if (c == '\r' || c == '\n') {
            refuse(f, ES_PROB_BAD_REQUEST, "a field line without a colon");
        } else if (!is_tchar(c)) {
            refuse(f, ES_PROB_BAD_REQUEST, "a byte 0x%02x in a field name", c);
        } else if (f->name_len < sizeof f->name) {
            f->name[f->name_len++] = (char)c;
        } else {
            f->name_len = sizeof f->name + 1; /* longer than any framing field's name */
        }
        return;
    case S_VALUE:
        if (c == '\r' || c == '\n')
            line_end(f, c, S_NAME);
        else if (!is_value_byte(c))
            refuse(f, ES_PROB_BAD_REQUEST, "a control byte 0x%02x in a field value", c);
        else if (f->in_cookie)
            count_cookie_byte(f, c);
        else if (field_is(f, "content-length") || field_is(f, "transfer-encoding"))
            keep(f, c);
        return;
    }
}

/* One byte of a chunk-size line or of the CRLF after a chunk. */
static void chunk_byte(es_framing *f, unsigned char c)
{
    if (f->state != S_CHUNK_END && ++f->line_len > CHUNK_LINE_MAX) {
        refuse(f, ES_PROB_BAD_REQUEST, "a chunk-size line longer than %d bytes", CHUNK_LINE_MAX);
        return;
    }
    int h = hex_value(c);
    switch (f->state) {
    case S_CHUNK_SIZE:
        if (h >= 0 && f->chunk_digits < CHUNK_DIGITS_MAX) {
            f->remaining = f->remaining * 16 + (uint64_t)h;
            f->chunk_digits++;
        } else if (h >= 0) {
            refuse(f, ES_PROB_BAD_REQUEST, "a chunk size of more than %d hex digits", CHUNK_DIGITS_MAX);
        } else if (!f->chunk_digits) {
            refuse(f, ES_PROB_BAD_REQUEST, "a chunk without a hexadecimal size");
        } else if (c == '\r' || c == '\n') {
            line_end(f, c, S_CHUNK_SIZE);
        } else if (c == ';') {
            f->state = S_CHUNK_EXT;
        } else if (c == ' ' || c == '\t') {
            f->state = S_CHUNK_BWS;
        } else {
            refuse(f, ES_PROB_BAD_REQUEST, "a byte 0x%02x after a chunk size", c);
        }
        return;
    case S_CHUNK_BWS:
        if (c == ';')
            f->state = S_CHUNK_EXT;
        else if (c != ' ' && c != '\t')
            refuse(f, ES_PROB_BAD_REQUEST, "a byte 0x%02x after a chunk size", c);
        return;
    case S_CHUNK_EXT:
        if (c == '\r' || c == '\n')
            line_end(f, c, S_CHUNK_SIZE);
        else if (!is_value_byte(c))
            refuse(f, ES_PROB_BAD_REQUEST, "a control byte 0x%02x in a chunk extension", c);
        return;
    case S_CHUNK_END:
        if (c == '\r' || c == '\n')
            line_end(f, c, S_CHUNK_END);
        else
            refuse(f, ES_PROB_BAD_REQUEST, "a chunk's data is longer than its size");
        return;
    }
}

/* See framing.h. */
size_t es_framing_feed(es_framing *f, const void *data, size_t len)
{
    const unsigned char *p = data;
    size_t start = 0; /* where the current message began in this buffer */
    for (size_t i = 0; i < len && f->state != S_REFUSED;) {
        unsigned long long messages = f->messages;
        if (f->state == S_BODY || f->state == S_CHUNK_DATA) {
            size_t n = len - i < f->remaining ? len - i : (size_t)f->remaining;
            f->remaining -= n;
            f->offset += n;
            i += n;
            if (f->remaining == 0 && f->state == S_BODY)
                next_message(f);
            else if (f->remaining == 0)
                f->state = S_CHUNK_END;
        } else {
            unsigned char c = p[i++];
            int was = f->state;
            f->offset++;
            if (was == S_LINE_CR) {
                if (c == '\n')
                    finish_line(f);
                else
                    refuse(f, ES_PROB_BAD_REQUEST, "a CR not followed by LF");
            } else if (was >= S_CHUNK_SIZE && was <= S_CHUNK_END) {
                chunk_byte(f, c);
            } else if (head_limits(f)) {
                head_byte(f, c);
            }
        }
        if (f->messages != messages)
            start = i;
    }
    return f->state == S_REFUSED ? start : len;
}

/* See framing.h. */
bool es_framing_refused(const es_framing *f)
{
    return f->state == S_REFUSED;
}
