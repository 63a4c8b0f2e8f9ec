/* Errors, the allocation wrapper, logging, hashing, clock. */
#include "embedscope/core.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdatomic.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* Fill err (if non-NULL; message truncated to fit) and return -1. */
int es_fail(es_err *err, es_errcode code, const char *param, const char *fmt, ...)
{
    if (!err)
        return -1;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* An empty buffer of capacity cap; see core.h. */
void es_buf_init(es_buf *b, size_t cap)
{
    *b = (es_buf){.s = es_malloc(cap ? cap : 1), .len = 0, .cap = cap ? cap : 1};
    b->s[0] = '\0';
}

/* printf onto b, growing it as needed (es_realloc aborts on OOM). */
void es_buf_printf(es_buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (k < 0)
            return; /* an encoding error: nothing appended */
        if ((size_t)k < b->cap - b->len) {
            b->len += (size_t)k;
            return;
        }
        b->cap = 2 * b->cap + (size_t)k;
        b->s = es_realloc(b->s, b->cap);
    }
}

/* See core.h. */
void es_buf_reserve(es_buf *b, size_t n)
{
    if (b->cap - b->len > n)
        return;
    b->cap = 2 * b->cap + n + 1;
    b->s = es_realloc(b->s, b->cap);
}

/* See core.h. */
void es_buf_add(es_buf *b, const char *s, size_t n)
{
    es_buf_reserve(b, n);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

/* "HOST:PORT" / "[V6]:PORT" into host and port; -1 if malformed (see core.h). */
int es_parse_listen(const char *text, char *host, size_t host_size, unsigned *port)
{
    const char *colon = strrchr(text, ':');
    const char *h = text, *h_end = colon;
    if (colon && text[0] == '[') {
        h = text + 1;
        h_end = colon > text && colon[-1] == ']' ? colon - 1 : NULL;
    }
    if (!colon || !h_end || h_end <= h || (size_t)(h_end - h) >= host_size || !colon[1] ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1) || strlen(colon + 1) > 5 || atol(colon + 1) > 65535)
        return -1;
    snprintf(host, host_size, "%.*s", (int)(h_end - h), h);
    *port = (unsigned)atol(colon + 1);
    return 0;
}

/* Short name of an error class, "unknown" outside the enum. Never fails. */
const char *es_errcode_name(es_errcode code)
{
    static const char *const names[] = {
        [ES_OK] = "ok", [ES_E_IO] = "io", [ES_E_FORMAT] = "format", [ES_E_CONFIG] = "config",
        [ES_E_PARAM] = "param", [ES_E_LIMIT] = "limit", [ES_E_NOTFOUND] = "not-found",
        [ES_E_INCOMPATIBLE] = "incompatible", [ES_E_NUMERIC] = "numeric", [ES_E_NOMEM] = "no-memory",
        [ES_E_UNAUTHORIZED] = "unauthorized", [ES_E_FORBIDDEN] = "forbidden", [ES_E_CONFLICT] = "conflict",
        [ES_E_TOO_LARGE] = "too-large", [ES_E_MEDIA_TYPE] = "media-type", [ES_E_STORAGE] = "storage",
        [ES_E_CANCELLED] = "cancelled",
        [ES_E_UNACCEPTABLE] = "not-acceptable", [ES_E_SHUTDOWN] = "shutdown",
    };
    return (unsigned)code < sizeof names / sizeof *names && names[code] ? names[code] : "unknown";
}

/* The one out-of-memory exit of the es_* allocators: log, then abort. */
static void *oom(size_t size)
{
    es_error("out of memory allocating %zu bytes", size);
    abort();
}

/* es_malloc / es_calloc / es_realloc: never NULL (abort via oom); a size of 0
 * allocates 1 byte so the result is always freeable and distinct. */
void *es_malloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    return p ? p : oom(size);
}

void *es_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    return p ? p : oom(n * size);
}

void *es_realloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    return q ? q : oom(size);
}

/* n * size bytes, or NULL on overflow or exhaustion (for user-sized buffers). */
void *es_try_alloc(size_t n, size_t size)
{
    size_t total;
    if (es_mul_size(n, size, &total) != 0)
        return NULL;
    return malloc(total ? total : 1);
}

#define HUGE_PAGE ((size_t)2 << 20)

/* See core.h. */
void *es_try_alloc_huge(size_t n, size_t size)
{
    size_t total;
    if (es_mul_size(n, size, &total) != 0)
        return NULL;
    if (total < HUGE_PAGE)
        return malloc(total ? total : 1);
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, total) != 0)
        return NULL;
    (void)madvise(p, total / 4096 * 4096, MADV_HUGEPAGE); /* a hint: EINVAL without THP is fine */
    return p;
}

/* Copy of s; aborts on OOM (es_malloc). */
char *es_strdup(const char *s)
{
    size_t len = strlen(s) + 1;
    return memcpy(es_malloc(len), s, len);
}

/* Position of s in names[0..n); -1 if absent or NULL. */
int es_name_index(const char *const *names, size_t n, const char *s)
{
    for (size_t i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return (int)i;
    return -1;
}

/* names[i], or "unknown" past the table. */
const char *es_name_of(const char *const *names, size_t n, size_t i)
{
    return i < n ? names[i] : "unknown";
}

/* A new formatted string; aborts on OOM (es_malloc), "" on a formatting error. */
char *es_asprintf(const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0)
        len = 0;
    char *s = es_malloc((size_t)len + 1);
    vsnprintf(s, (size_t)len + 1, fmt, ap2);
    va_end(ap2);
    return s;
}

/* a * b in *out, or -1 (out untouched) on overflow. */
int es_mul_size(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return -1;
    *out = r;
    return 0;
}

static es_log_level log_threshold = ES_LOG_INFO;
static bool log_json;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* Drop messages below level from now on. Never fails. */
void es_log_set_level(es_log_level level) { log_threshold = level; }
void es_log_set_json(bool json) { log_json = json; }
bool es_log_is_json(void) { return log_json; }

/* "YYYY-MM-DDTHH:MM:SS.mmmZ" of now. */
static void log_stamp(char out[32])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char sec[24];
    strftime(sec, sizeof sec, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 32, "%.24s.%03dZ", sec, (int)(ts.tv_nsec / 1000000) % 1000);
}

/* msg with every byte above 0x7f as '?', truncated to fit: messages may quote
 * client bytes, and a JSON string must be valid UTF-8. */
static void to_ascii(const char *msg, char *out, size_t size)
{
    size_t i = 0;
    for (; msg[i] && i < size - 1; i++)
        out[i] = (unsigned char)msg[i] < 0x80 ? msg[i] : '?';
    out[i] = '\0';
}

/* A field's value as JSON: a number when the whole token is one (finite),
 * else the text. */
static json_t *field_value(const char *text)
{
    char *end;
    double v = strtod(text, &end);
    if (end != text && *end == '\0' && isfinite(v))
        return strspn(text, "-0123456789") == strlen(text) ? json_integer((json_int_t)v) : json_real(v);
    return json_string(text);
}

/* Add the message's key=value tokens (key: a lower-case word, value: up to
 * the next blank, a trailing comma or semicolon left out) to o as fields, so
 * "warmed wpe solver=dgesdd seconds=0.123" can be queried by solver and
 * seconds; the first of a repeated key wins and the common keys are never
 * replaced. The message stays whole in msg. */
static void add_message_fields(json_t *o, const char *msg)
{
    for (const char *p = msg; *p;) {
        const char *key = p;
        while (*p >= 'a' && *p <= 'z')
            p++;
        while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')
            p++;
        size_t key_len = (size_t)(p - key);
        bool at_word_start = key == msg || key[-1] == ' ';
        if (key_len && *p == '=' && at_word_start && key_len < 64) {
            const char *value = ++p;
            p += strcspn(p, " ");
            size_t len = (size_t)(p - value);
            while (len && (value[len - 1] == ',' || value[len - 1] == ';'))
                len--;
            char name[64], text[256];
            snprintf(name, sizeof name, "%.*s", (int)key_len, key);
            snprintf(text, sizeof text, "%.*s", (int)len, value);
            if (len && !json_object_get(o, name) && strcmp(name, "log") != 0)
                json_object_set_new(o, name, field_value(text));
            continue;
        }
        p += *p ? 1 : 0;
    }
}

/* Write one line under log_lock so lines of different threads never interleave. */
static void log_line(const char *stamp, const char *tag, const char *msg)
{
    pthread_mutex_lock(&log_lock);
    if (log_json) {
        char ascii[2048];
        to_ascii(msg, ascii, sizeof ascii);
        json_t *o = json_pack("{s:s, s:s, s:s}", "time", stamp, "level", tag, "msg", ascii);
        if (o)
            add_message_fields(o, ascii);
        char *text = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(15)) : NULL;
        fprintf(stderr, "%s\n", text ? text : "{}");
        free(text);
        json_decref(o);
    } else {
        fprintf(stderr, "%s %-5s %s\n", stamp, tag, msg);
    }
    pthread_mutex_unlock(&log_lock);
}

/* One stderr line "UTC-timestamp level message" (or its JSON object). Never fails. */
void es_log(es_log_level level, const char *fmt, ...)
{
    static const char *const tags[] = {"debug", "info", "warn", "error"};
    if (level < log_threshold)
        return;
    char stamp[32], msg[2048];
    log_stamp(stamp);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_line(stamp, tags[level], msg);
}

/* See core.h. Never fails. */
void es_log_access(const char *text, const char *json)
{
    char stamp[32];
    log_stamp(stamp);
    if (!log_json) {
        log_line(stamp, "access", text);
        return;
    }
    json_t *o = json_loads(json, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        log_line(stamp, "access", text);
        return;
    }
    /* the common keys first (jansson keeps insertion order), the record's fields after */
    char msg[2048];
    to_ascii(text, msg, sizeof msg);
    json_t *line = json_pack("{s:s, s:s, s:s, s:s}", "time", stamp, "level", "info", "msg", msg, "log", "access");
    json_object_update(line, o);
    json_decref(o);
    char *out = json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(line);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "%s\n", out ? out : "{}");
    pthread_mutex_unlock(&log_lock);
    free(out);
}

/* SHA-256 hex digest via OpenSSL EVP; aborts if EVP fails (no caller could
 * recover: hashes identify data in provenance and ETags). */
void es_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (!EVP_Digest(data, len, md, &md_len, EVP_sha256(), NULL)) {
        es_error("sha256 failed");
        abort();
    }
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < md_len && i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
}

/* Seconds of a clock. Never fails. */
static double seconds_of(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* See core.h. */
int es_write_all(int fd, const void *p, size_t len)
{
    const char *c = p;
    while (len) {
        ssize_t w = write(fd, c, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        len -= (size_t)w;
    }
    return 0;
}

/* CLOCK_MONOTONIC in seconds, for durations only. Never fails. */
double es_now(void) { return seconds_of(CLOCK_MONOTONIC); }

/* The CPU seconds of the whole process (every thread), for phases' costs. Never fails. */
double es_cpu_now(void) { return seconds_of(CLOCK_PROCESS_CPUTIME_ID); }

/* CLOCK_REALTIME: Unix time in seconds, for timestamps. Never fails. */
double es_wall_now(void) { return seconds_of(CLOCK_REALTIME); }

/* ---------------------------------------------------------------- progress */

static _Thread_local es_progress *tracked;

/* See core.h. */
void es_progress_attach(es_progress *p) { tracked = p; }

/* See core.h. */
es_progress *es_progress_current(void) { return tracked; }

static const char *const pass_names[ES_PASS_COUNT] = {"scan",   "tsqr",        "gram",  "project",
                                                      "cosine", "periodogram", "lapack", "knn", "layout"};

/* See core.h. */
int es_progress_pass_index(const char *pass)
{
    for (int i = 0; pass && i < ES_PASS_COUNT; i++)
        if (strcmp(pass, pass_names[i]) == 0)
            return i;
    return -1;
}

/* See core.h. */
const char *es_progress_pass_name(int i) { return i >= 0 && i < ES_PASS_COUNT ? pass_names[i] : NULL; }

/* The predicted share of p's pass named `pass` (0 when not known). */
static double pass_weight(const es_progress *p, const char *pass)
{
    int i = es_progress_pass_index(pass);
    return i < 0 ? 0.0 : p->weight[i];
}

/* See core.h. */
double es_progress_pass_fraction(es_progress *p, bool *estimated)
{
    const char *pass = atomic_load(&p->pass);
    *estimated = es_progress_pass_index(pass) == ES_PASS_LAPACK;
    if (*estimated) {
        double predicted = pass_weight(p, pass) * p->predicted_s;
        double f = predicted > 0 ? (es_now() - atomic_load(&p->started)) / predicted : 0.0;
        return f < 0 ? 0.0 : f < ES_PROGRESS_ESTIMATE_CAP ? f : ES_PROGRESS_ESTIMATE_CAP;
    }
    size_t done = atomic_load(&p->done), total = atomic_load(&p->total);
    return total ? (double)done / (double)total : 0.0;
}

/* See core.h. */
double es_progress_overall(es_progress *p)
{
    bool estimated;
    double in_pass = es_progress_pass_fraction(p, &estimated);
    double f = atomic_load(&p->completed) + pass_weight(p, atomic_load(&p->pass)) * in_pass;
    return f < 1.0 ? f : 1.0;
}

/* See core.h. */
void es_progress_begin(const char *pass, size_t total)
{
    if (!tracked)
        return;
    const char *previous = atomic_load(&tracked->pass);
    if (previous) /* the loop before this one is finished */
        atomic_store(&tracked->completed, atomic_load(&tracked->completed) + pass_weight(tracked, previous));
    atomic_store(&tracked->done, 0);
    atomic_store(&tracked->total, total);
    atomic_store(&tracked->started, es_now());
    atomic_store(&tracked->pass, pass);
    atomic_fetch_add(&tracked->passes, 1);
}

/* See core.h. */
void es_progress_begin_lapack(void) { es_progress_begin("lapack", 0); }

/* See core.h. */
void es_progress_step(void)
{
    if (tracked)
        atomic_fetch_add(&tracked->done, 1);
}

/* See core.h. */
int es_progress_check(es_err *err)
{
    return tracked && tracked->check ? tracked->check(tracked->arg, err) : 0;
}

/* See core.h: each prefix ending at a '/' in turn, then the whole path. */
int es_mkdir_p(const char *dir, unsigned mode)
{
    char *path = es_strdup(dir);
    int rc = 0;
    for (char *p = path + 1; rc == 0; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, (mode_t)mode) != 0 && errno != EEXIST)
            rc = -1;
        *p = c;
        if (c == '\0')
            break;
    }
    free(path);
    return rc;
}
