/* embedscope core: errors, allocation, logging, hashing.
 *
 * Ownership rule (holds for every embedscope header): a function that returns a
 * pointer or fills an out-parameter named `*out` transfers ownership to the
 * caller, who releases it with the matching es_*_free / es_*_release function.
 * Pointers passed in are borrowed for the duration of the call only, unless a
 * comment says the callee retains them. Immutable shared objects (es_matrix,
 * es_svd) are reference counted: es_*_retain adds a reference,
 * es_*_release drops one.
 *
 * Failure rule: functions returning int return 0 on success and -1 on failure,
 * in which case they have filled the es_err passed in (which may be NULL) and
 * left every out-parameter untouched or NULL. */
#ifndef EMBEDSCOPE_CORE_H
#define EMBEDSCOPE_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Error classes; the HTTP layer maps them to status codes. */
typedef enum es_errcode {
    ES_OK = 0,
    ES_E_IO,           /* a file could not be opened/read/mapped            -> 500 at run time */
    ES_E_FORMAT,       /* a file breaks a format rule                       -> 500 at run time */
    ES_E_CONFIG,       /* configuration invalid                             */
    ES_E_PARAM,        /* a request parameter is malformed or out of range  -> 400 */
    ES_E_LIMIT,        /* a configured limit was exceeded                   -> 400 (names the limit) */
    ES_E_NOTFOUND,     /* unknown model / matrix / tensor                   -> 404 */
    ES_E_INCOMPATIBLE, /* model-axis lengths differ                         -> 422 */
    ES_E_NUMERIC,      /* LAPACK failed or produced non-finite values       -> 500 */
    ES_E_NOMEM,        /* allocation failed                                 -> 503 */
    /* writes (uploads) */
    ES_E_UNAUTHORIZED, /* a write without the configured bearer token       -> 401 */
    ES_E_FORBIDDEN,    /* writes are disabled (uploads.enabled)             -> 403 */
    ES_E_CONFLICT,     /* a write to a configured (read-only) model         -> 409 */
    ES_E_TOO_LARGE,    /* a request body above uploads.max_body_bytes       -> 413 */
    ES_E_MEDIA_TYPE,   /* a request body of a type the endpoint does not take -> 415 */
    ES_E_STORAGE,      /* user matrices would exceed uploads.max_total_bytes -> 507 */
    ES_E_CANCELLED,    /* abandoned: cancelled, deadline passed, client gone -> 504 */
    ES_E_UNACCEPTABLE, /* the requested representation cannot be produced   -> 406 */
    ES_E_SHUTDOWN,     /* abandoned: the server is shutting down            -> 503 (Retry-After) */
    ES_E_CROSS_ORIGIN, /* a write from another origin's web page, no token   -> 403 */
} es_errcode;

typedef struct es_err {
    es_errcode code;
    char param[64];    /* offending parameter / key path / limit name, "" if none */
    char message[512]; /* one human sentence: what is wrong, where, which rule */
} es_err;

/* Fill err (if non-NULL) and return -1, so callers can `return es_fail(...)`. */
int es_fail(es_err *err, es_errcode code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Short name of an error class ("param", "not-found", ...); "unknown" outside
 * the enum. Never fails. */
const char *es_errcode_name(es_errcode code);

/* The one allocation wrapper. es_malloc/es_calloc/es_realloc (and es_strdup,
 * es_asprintf, built on them) never return NULL: on exhaustion they log and
 * abort (an allocation this process cannot make means the configured limits are
 * wrong). es_try_alloc is for request-sized buffers
 * that depend on user input: returns NULL on failure or on overflow of n*size. */
void *es_malloc(size_t size);
void *es_calloc(size_t n, size_t size);
void *es_realloc(void *p, size_t size);
void *es_try_alloc(size_t n, size_t size);
/* es_try_alloc for a large array read across its rows (a matrix's storage):
 * from 2 MiB on, aligned to 2 MiB and marked for transparent huge pages
 * (madvise; a hint the system may ignore), so a column read, which touches
 * every row, misses the TLB once per 2 MiB rather than once per 4 KiB page
 * (2x faster column blocks of 50257 x 768, measured). Freed with free(). */
void *es_try_alloc_huge(size_t n, size_t size);
char *es_strdup(const char *s);
char *es_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* mkdir -p: create dir and its missing parents with mode (an existing
 * directory is fine); 0, or -1 with errno set by the mkdir that failed. */
int es_mkdir_p(const char *dir, unsigned mode);
/* Enum <-> name tables (names[i] names value i): the index of s among the n
 * names, or -1 for NULL or an unknown name; the name of value i, or "unknown"
 * outside the table. Never fail. */
int es_name_index(const char *const *names, size_t n, const char *s);
const char *es_name_of(const char *const *names, size_t n, size_t i);
/* Checked size arithmetic: returns 0 and sets *out, or -1 on overflow. */
int es_mul_size(size_t a, size_t b, size_t *out);

/* A growable NUL-terminated text: es_buf_printf appends (es_realloc, so it
 * never fails), b.s is always a valid string once initialised with
 * es_buf_init; the caller owns b.s and releases it with free. */
typedef struct es_buf {
    char *s;
    size_t len, cap;
} es_buf;
/* An empty buffer with room for cap bytes (cap >= 1). Never fails. */
void es_buf_init(es_buf *b, size_t cap);
/* printf onto the end of b. Never fails (aborts on exhaustion like es_malloc). */
void es_buf_printf(es_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Doubles as text (dtoa.c): the fewest significant digits that read back
 * (strtod) as exactly v, in %.17g's layout (ES_NUM_PRINTF: "0.1", "100",
 * "1.5e-05", "1e+20") or jansson's (ES_NUM_JSON: "0.1", "100.0", "1.5e-5",
 * "1e20"); non-finite values as printf writes them ("nan", "-inf": not
 * JSON). Not NUL-terminated; returns the length (< ES_DTOA_MAX). Never fails. */
#define ES_DTOA_MAX 32
typedef enum { ES_NUM_PRINTF, ES_NUM_JSON } es_num_style;
size_t es_dtoa(double v, es_num_style style, char out[ES_DTOA_MAX]);
/* The shortest decimal digits*10^exp10 that reads back as |v| (v finite,
 * nonzero; Dragonbox, shortest.cc). Never fails. */
void es_shortest_decimal(double v, uint64_t *digits, int *exp10);
/* Append n bytes to b (growing it like es_buf_printf), keeping b NUL-terminated. */
void es_buf_add(es_buf *b, const char *s, size_t n);
/* Make room for n more bytes in b; then b->s + b->len may be written up to n bytes. */
void es_buf_reserve(es_buf *b, size_t n);

/* Split "HOST:PORT" or "[V6]:PORT" (PORT decimal in 0..65535, HOST non-empty,
 * shorter than host_size) into host and *port. -1 (nothing written) if malformed. */
int es_parse_listen(const char *text, char *host, size_t host_size, unsigned *port);

/* Logging to stderr, one line per call, with timestamp and level. Never fails. */
typedef enum { ES_LOG_DEBUG, ES_LOG_INFO, ES_LOG_WARN, ES_LOG_ERROR } es_log_level;
void es_log_set_level(es_log_level level);
/* Log lines as JSON objects {"time","level","msg"} (true) or as text (false,
 * the default). Never fails. */
void es_log_set_json(bool json);
bool es_log_is_json(void);
/* Write one access-log record whatever the level: in text mode
 * "<timestamp> access <text>", in JSON mode {"time", "level": "info", "log":
 * "access", "msg": text} followed by the fields of `json` (a complete JSON
 * object text) on one line. Never fails. */
void es_log_access(const char *text, const char *json);
void es_log(es_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define es_info(...) es_log(ES_LOG_INFO, __VA_ARGS__)
#define es_warn(...) es_log(ES_LOG_WARN, __VA_ARGS__)
#define es_error(...) es_log(ES_LOG_ERROR, __VA_ARGS__)
#define es_debug(...) es_log(ES_LOG_DEBUG, __VA_ARGS__)

/* SHA-256 of a byte range as 64 lowercase hex digits plus NUL (OpenSSL EVP).
 * Aborts if EVP fails, like an allocation. */
void es_sha256_hex(const void *data, size_t len, char out[65]);

/* Monotonic clock in seconds (durations). Never fails. */
double es_now(void);
/* CPU seconds of the whole process (every thread), for the costs of phases. Never fails. */
double es_cpu_now(void);
/* write(2) all of len bytes to fd, retrying after EINTR: 0, or -1 with errno
 * (a write error, or 0 bytes written) on failure. */
int es_write_all(int fd, const void *p, size_t len);
/* Unix time in seconds (timestamps such as a matrix's creation). Never fails. */
double es_wall_now(void);

/* Progress and cancellation of the computation running on this thread: long
 * loops (the blocks of a TSQR, a Gram matrix, a projection, the components of a
 * periodogram) report each block done and stop when asked, so that a job shows
 * how far it is and a cancelled or late one stops within a block. A thread
 * without a tracker (tests, start-up warming) reports to nothing and never stops. */
/* The loops that report progress, by name ("scan", "tsqr", "gram", "project",
 * "cosine", "periodogram", UMAP's "knn" graph and "layout" epochs), and LAPACK's factorisations ("lapack": dgesdd,
 * dgebrd + dbdsdc, dsyevr...), which report nothing, so their share is
 * estimated from the time they have run against their predicted seconds: the
 * cost model predicts each one's share. */
enum { ES_PASS_SCAN, ES_PASS_TSQR, ES_PASS_GRAM, ES_PASS_PROJECT, ES_PASS_COSINE, ES_PASS_PERIODOGRAM, ES_PASS_LAPACK,
       ES_PASS_KNN, ES_PASS_LAYOUT, ES_PASS_COUNT };
/* An estimated pass's fraction stays at most this much of its share until it ends. */
#define ES_PROGRESS_ESTIMATE_CAP 0.9
/* The index of a pass name, -1 for another. Never fails. */
int es_progress_pass_index(const char *pass);
/* The name of pass i (ES_PASS_SCAN...), NULL outside 0..ES_PASS_COUNT-1. Never fails. */
const char *es_progress_pass_name(int i);
typedef struct es_progress {
    _Atomic(const char *) pass;   /* the loop running now ("tsqr", "gram", ...; static), NULL before one */
    _Atomic(size_t) done, total;  /* its blocks done and its blocks */
    _Atomic(size_t) passes;       /* loops started so far */
    double weight[ES_PASS_COUNT]; /* each pass's predicted share of the whole computation (set before it runs) */
    double predicted_s;           /* the whole computation's predicted seconds (set before it runs) */
    _Atomic(double) completed;    /* the shares of the loops finished so far */
    _Atomic(double) started;      /* es_now() when the current pass began */
    int (*check)(void *arg, es_err *err); /* must the computation stop? -1 with err filled (why:
                                  cancelled, late, shutdown), else 0; NULL: it never stops */
    void *arg;
} es_progress;
/* Track this thread's computation in p (NULL: none); the tracker of this
 * thread (a computation's helper threads attach it too). Never fail. */
void es_progress_attach(es_progress *p);
es_progress *es_progress_current(void);
/* A loop of `total` blocks named `pass` (a static string) starts. Never fails. */
void es_progress_begin(const char *pass, size_t total);
/* A LAPACK factorisation starts (pass "lapack", no blocks). Never fails. */
void es_progress_begin_lapack(void);
/* The running pass's fraction done: its blocks done over its blocks, or for
 * an estimated pass (*estimated true) the time it has run over its predicted
 * seconds (weight x predicted_s), at most ES_PROGRESS_ESTIMATE_CAP; 0 before
 * a pass. Never fails. */
double es_progress_pass_fraction(es_progress *p, bool *estimated);
/* The share of p's computation done: the finished loops' weights plus the
 * running one's weight times its pass fraction, at most 1. Never fails. */
double es_progress_overall(es_progress *p);
/* One more block of the current loop is done. Never fails. */
void es_progress_step(void);
/* The tracker's check: -1 with err filled (ES_E_CANCELLED, ES_E_SHUTDOWN) when
 * the tracked computation must stop, 0 otherwise and without a tracker. */
int es_progress_check(es_err *err);

#endif
