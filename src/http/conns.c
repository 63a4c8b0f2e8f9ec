/* Connection admission, in front of libmicrohttpd.
 *
 * Why not MHD's own listen socket: at its connection limit MHD 0.9.75 stops
 * accepting (new clients wait in the backlog and get no byte until a
 * keep-alive connection closes), its per-IP limit closes sockets silently, and
 * neither can answer anything. Here one acceptor thread owns the listen socket
 * and hands each admitted socket to MHD (MHD_add_connection, thread-safe: the
 * worker picks it up through its inter-thread channel). Above
 * server.connection_limit, or above server.per_address_limit connections from
 * one address (trusted proxies exempt), the socket gets a canned 503
 * problem+json at once and is closed.
 *
 * The same thread enforces server.header_timeout_s: MHD's idle timeout is
 * reset by every byte, so a client dripping one byte a second holds a
 * connection forever. Every connection's kernel byte counter (TCP_INFO
 * tcpi_bytes_received) is compared with its value when the last request
 * finished: a connection with new bytes but no complete request head after the
 * deadline is shut down (MHD then closes it). Idle keep-alive connections (no
 * new bytes) are left to MHD's idle timeout; a connection whose request is
 * being handled is left alone.
 *
 * Counting: the acceptor reserves a slot (total and per address) before
 * handing the socket over; MHD's connection-closed notification releases it.
 * That notification can come late when MHD's threads are busy (hundreds of
 * milliseconds for a load generator's 256 sockets closed at once), so before
 * refusing an address at its cap the acceptor asks the kernel which of its
 * connections the peer has already closed (POLLRDHUP) and does not count those:
 * a client that closes its connections and opens new ones at once (a proxy
 * recycling its pool, a benchmark's next run) is not refused for sockets it no
 * longer holds. MHD notifies before it closes a socket, so every descriptor in
 * the list is still the connection's while the lock is held.
 *
 * Strict framing (framing.c) sees every byte before MHD parses it: MHD 0.9.75
 * has no hook for the bytes of a plain socket, so this file defines recv(),
 * which MHD calls to read its sockets (the executable's definition comes first
 * in symbol lookup; the call reads with recvfrom). Sockets the acceptor handed
 * to MHD have a framing state in a table indexed by descriptor; every other
 * descriptor, and every MSG_PEEK, is passed through untouched. A refused
 * request is answered here with its problem document (400, 414, 431, 501,
 * 505) and MHD is told the client has finished (recv returns 0), so MHD never
 * parses it and closes the connection; complete requests before it (in the
 * same read or earlier ones) are answered first, in order: until MHD has
 * finished answering each of them (es_conn_request), its reads hear "nothing
 * yet" (EAGAIN), and the refusal is written only after the last answer (the
 * socket's read side is shut down so that MHD, done with them, reads again
 * and gets the refusal). Writing it at once, as it first did, put the 400
 * before the earlier answers and closed the connection under them: a
 * pipelined PUT ran and its 201 was never sent.
 *
 * The same count of complete requests makes a half-close harmless: a client
 * may send its requests and shut down its sending side while it waits for
 * the answers; MHD would take that end of stream for a client gone and close
 * the connection unanswered, so it is hidden from MHD until every complete
 * request has been answered. */
#include "http/acceptor.h"
#include "http/framing.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define ADDR_BUCKETS 4096
/* Sockets accepted per wake-up before the reaper gets a turn. */
#define ACCEPT_BURST 64
/* Reaper period (ms) and the poll timeout of the acceptor. */
#define TICK_MS 250
/* Pause after accept fails for lack of descriptors (the backlog holds the clients). */
#define EMFILE_PAUSE_MS 100

/* Bytes of a refused request still arriving, read and dropped before its
 * answer so that closing does not reset the connection under the answer. */
#define REFUSED_DRAIN_MAX (1 << 20)
/* Descriptors the framing table covers at most (beyond: not checked, warned once). */
#define WIRES_MAX ((size_t)1 << 22)

/* Connections from one address (IPv4 as v4-mapped IPv6). */
typedef struct addr_count {
    unsigned char key[16];
    unsigned n;
    struct addr_count *next;
} addr_count;

struct es_conn {
    es_conn *prev, *next;
    int fd;
    unsigned char key[16];
    bool trusted;
    char addr[INET6_ADDRSTRLEN];
    /* the three below are the connection's own and the reaper's, under the connection's own lock: a
     * request's start and end take no lock of every connection (c->lock is the list's) */
    pthread_mutex_t lock;
    bool busy;                /* a request head arrived; its answer is not complete */
    unsigned long long mark;  /* tcpi_bytes_received when the last request finished */
    double since;             /* when bytes past mark were first seen; 0: none */
};

struct es_conns {
    pthread_mutex_t lock;     /* guards everything below but the constants */
    addr_count *buckets[ADDR_BUCKETS];
    es_conn *head;            /* connections MHD has started */
    unsigned total;           /* admitted and not yet closed */
    /* settings (es_conns_configure at a reload; read under lock) */
    unsigned limit, per_address;
    double header_timeout_s;
    unsigned char (*trusted)[16];
    size_t n_trusted;
    char *busy_reply, *per_address_reply;
    size_t busy_len, per_address_len;
    char **retired;           /* replies of earlier settings: a refusal may still be writing one */
    size_t n_retired;
    es_metrics *mx;
    /* the acceptor */
    int listen_fd, stop_pipe[2];
    struct MHD_Daemon *daemon;
    pthread_t thread;
    bool running;
};

/* The 16-byte key of a socket address (IPv4 mapped into IPv6). */
static void addr_key(const struct sockaddr *sa, unsigned char key[16])
{
    memset(key, 0, 16);
    if (sa->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    } else if (sa->sa_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    }
}

/* See transport.h. Never fails. */
char *es_problem_raw(es_problem_kind kind, const char *detail, size_t *len)
{
    json_t *p = es_problem_new(kind, detail, NULL, NULL, NULL);
    char *body = json_dumps(p, JSON_COMPACT);
    json_decref(p);
    unsigned status = es_problem_status(kind);
    char *all = es_asprintf("HTTP/1.1 %u %s\r\nContent-Type: application/problem+json\r\n"
                            "Cache-Control: no-store\r\n%sConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                            status, MHD_get_reason_phrase_for(status),
                            kind == ES_PROB_BUSY ? "Retry-After: 1\r\n" : "", strlen(body), body);
    free(body);
    *len = strlen(all);
    return all;
}

/* Text of a key ("127.0.0.1" for mapped IPv4). */
static void key_text(const unsigned char key[16], char out[INET6_ADDRSTRLEN])
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(key, mapped, 12) == 0)
        inet_ntop(AF_INET, key + 12, out, INET6_ADDRSTRLEN);
    else
        inet_ntop(AF_INET6, key, out, INET6_ADDRSTRLEN);
}

static size_t bucket_of(const unsigned char key[16])
{
    size_t h = 14695981039346656037ULL & SIZE_MAX;
    for (int i = 0; i < 16; i++)
        h = (h ^ key[i]) * 1099511628211ULL;
    return h % ADDR_BUCKETS;
}

/* The count node of key, NULL when it has no connection (lock held). */
static addr_count *find_count(es_conns *c, const unsigned char key[16])
{
    for (addr_count *a = c->buckets[bucket_of(key)]; a; a = a->next)
        if (memcmp(a->key, key, 16) == 0)
            return a;
    return NULL;
}

/* Count one more connection of key (lock held). */
static void reserve(es_conns *c, const unsigned char key[16])
{
    addr_count *a = find_count(c, key);
    if (!a) {
        addr_count **slot = &c->buckets[bucket_of(key)];
        a = es_calloc(1, sizeof *a);
        memcpy(a->key, key, 16);
        a->next = *slot;
        *slot = a;
    }
    a->n++;
    c->total++;
}

/* Release one connection of key (lock held); the node goes at 0. */
static void release(es_conns *c, const unsigned char key[16])
{
    c->total--;
    for (addr_count **p = &c->buckets[bucket_of(key)]; *p; p = &(*p)->next)
        if (memcmp((*p)->key, key, 16) == 0) {
            if (--(*p)->n == 0) {
                addr_count *dead = *p;
                *p = dead->next;
                free(dead);
            }
            return;
        }
}

static bool is_trusted(const es_conns *c, const unsigned char key[16])
{
    for (size_t i = 0; i < c->n_trusted; i++)
        if (memcmp(c->trusted[i], key, 16) == 0)
            return true;
    return false;
}

/* The framing state of a socket handed to MHD. Only the MHD thread serving
 * the connection touches it between es_conns' registration (before
 * MHD_add_connection) and its release (MHD's close notification). */
typedef struct wire {
    es_framing f;
    unsigned long long completed; /* requests MHD has finished answering (es_conn_request) */
    bool answered;                /* the refusal has been written */
    bool probe;                   /* the start-up self-test's connection (es_conns_run) */
    char addr[INET6_ADDRSTRLEN];
} wire;

static _Atomic(wire *) *wires; /* indexed by descriptor; never freed (process-wide) */
static size_t n_wires;
static atomic_bool probe_refused;  /* the self-test's request was refused here, by the framing check */
static bool bypass_for_test;       /* ES_TEST_FRAMING_BYPASS=1: recv() checks nothing (its test) */
static pthread_once_t wires_once = PTHREAD_ONCE_INIT;

static void wires_alloc(void)
{
    struct rlimit rl;
    n_wires = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (size_t)rl.rlim_cur : WIRES_MAX;
    if (n_wires > WIRES_MAX)
        n_wires = WIRES_MAX;
    wires = es_calloc(n_wires, sizeof *wires);
}

/* Start checking the bytes of fd (an admitted socket). */
static void wire_watch(int fd, const char *addr)
{
    if (fd < 0 || (size_t)fd >= n_wires) {
        static atomic_bool warned;
        if (!atomic_exchange(&warned, true))
            es_warn("descriptor %d is beyond the framing table (%zu): its requests are not checked", fd, n_wires);
        return;
    }
    wire *w = es_calloc(1, sizeof *w);
    es_framing_init(&w->f);
    snprintf(w->addr, sizeof w->addr, "%s", addr);
    free(atomic_exchange(&wires[fd], w));
}

/* Stop checking fd (its connection closes). */
static void wire_release(int fd)
{
    if (fd >= 0 && (size_t)fd < n_wires)
        free(atomic_exchange(&wires[fd], NULL));
}

/* MHD has finished answering one more request of fd. */
static void wire_completed(int fd)
{
    wire *w = fd >= 0 && (size_t)fd < n_wires ? atomic_load(&wires[fd]) : NULL;
    if (w)
        w->completed++;
}

/* Answer a refused request (once): read what is still arriving, write the
 * problem document and end the writing side. */
static void answer_refusal(int fd, wire *w)
{
    if (w->answered)
        return;
    w->answered = true;
    char sink[4096];
    size_t drained = 0;
    ssize_t got;
    while (drained < REFUSED_DRAIN_MAX && (got = recvfrom(fd, sink, sizeof sink, MSG_DONTWAIT, NULL, NULL)) > 0)
        drained += (size_t)got;
    if (w->probe)
        atomic_store(&probe_refused, true);
    else
        es_warn("refused a request from %s: %s", w->addr, w->f.detail);
    size_t len;
    char *raw = es_problem_raw(w->f.kind, w->f.detail, &len);
    ssize_t ignored = send(fd, raw, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)ignored;
    free(raw);
    shutdown(fd, SHUT_WR);
}

/* MHD's reads (see the top of this file): the bytes pass the framing check
 * first. A refusal reads as the end of the stream. */
ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    wire *w = wires && fd >= 0 && (size_t)fd < n_wires && !(flags & MSG_PEEK) && !bypass_for_test
                  ? atomic_load(&wires[fd])
                  : NULL;
    if (w && es_framing_refused(&w->f)) {
        if (w->f.messages > w->completed) { /* the complete requests before it are answered first */
            errno = EAGAIN;
            return -1;
        }
        answer_refusal(fd, w);
        return 0;
    }
    ssize_t n = recvfrom(fd, buf, len, flags, NULL, NULL);
    if (w && n == 0 && w->f.messages > w->completed) {
        /* The client has finished sending (shutdown(SHUT_WR)) but is owed an
         * answer: no more requests, not gone. MHD would close at once on end
         * of stream, so it hears "nothing yet" until its answers are out;
         * then the end of stream (MHD reads again for the next request). */
        errno = EAGAIN;
        return -1;
    }
    if (!w || n <= 0)
        return n;
    size_t ok = es_framing_feed(&w->f, buf, (size_t)n);
    if (ok == (size_t)n)
        return n;
    if (ok > 0 || w->f.messages > w->completed) {
        /* serve the complete requests first (of this read or earlier ones): MHD reads
         * again after each answer and hears "nothing yet" until the last is out
         * (above), then the refusal and the end of stream. No more bytes are read. */
        shutdown(fd, SHUT_RD);
        if (ok > 0)
            return (ssize_t)ok;
        errno = EAGAIN;
        return -1;
    }
    answer_refusal(fd, w);
    return 0;
}

/* Take conf's settings (lock held, or before the acceptor runs). */
static void configure(es_conns *c, const es_server_conf *conf)
{
    c->limit = conf->connection_limit;
    c->per_address = conf->per_address_limit;
    c->header_timeout_s = (double)conf->header_timeout_s;
    free(c->trusted);
    c->n_trusted = 0;
    for (char **t = conf->trusted_proxies; t && *t; t++)
        c->n_trusted++;
    c->trusted = es_calloc(c->n_trusted ? c->n_trusted : 1, 16);
    for (size_t i = 0; i < c->n_trusted; i++)
        if (es_addr_parse(conf->trusted_proxies[i], c->trusted[i]) < 0)
            es_warn("server.trusted_proxies: '%s' is not an IP address (ignored)", conf->trusted_proxies[i]);
    if (c->busy_reply) {
        c->retired = es_realloc(c->retired, (c->n_retired + 2) * sizeof *c->retired);
        c->retired[c->n_retired++] = c->busy_reply;
        c->retired[c->n_retired++] = c->per_address_reply;
    }
    char *d1 = es_asprintf("too many open connections (server.connection_limit %u); retry later", c->limit);
    char *d2 = es_asprintf("too many open connections from your address (server.per_address_limit %u)",
                           c->per_address);
    c->busy_reply = es_problem_raw(ES_PROB_BUSY, d1, &c->busy_len);
    c->per_address_reply = es_problem_raw(ES_PROB_BUSY, d2, &c->per_address_len);
    free(d1);
    free(d2);
}

/* See transport.h. Never fails (a bad trusted address was refused by the config). */
es_conns *es_conns_new(const es_server_conf *conf, es_metrics *mx)
{
    pthread_once(&wires_once, wires_alloc);
    es_conns *c = es_calloc(1, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    c->mx = mx;
    c->listen_fd = c->stop_pipe[0] = c->stop_pipe[1] = -1;
    configure(c, conf);
    return c;
}

/* See transport.h: connections already admitted stay; the new limits count them. */
void es_conns_configure(es_conns *c, const es_server_conf *conf)
{
    pthread_mutex_lock(&c->lock);
    configure(c, conf);
    pthread_mutex_unlock(&c->lock);
}

/* The kernel's count of bytes received on fd; false if unavailable. */
static bool bytes_received(int fd, unsigned long long *out)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
        return false;
    *out = ti.tcpi_bytes_received;
    return true;
}

/* MHD_OPTION_NOTIFY_CONNECTION: track started connections, release closed ones. */
void es_conns_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                     enum MHD_ConnectionNotificationCode code)
{
    es_conns *c = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        es_conn *k = es_calloc(1, sizeof *k);
        pthread_mutex_init(&k->lock, NULL);
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        k->fd = fd ? fd->connect_fd : -1;
        if (ad && ad->client_addr)
            addr_key(ad->client_addr, k->key);
        key_text(k->key, k->addr);
        if (k->fd >= 0)
            bytes_received(k->fd, &k->mark);
        pthread_mutex_lock(&c->lock);
        k->trusted = is_trusted(c, k->key);
        k->next = c->head;
        if (c->head)
            c->head->prev = k;
        c->head = k;
        pthread_mutex_unlock(&c->lock);
        *socket_context = k;
        return;
    }
    es_conn *k = *socket_context;
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    if (k->prev)
        k->prev->next = k->next;
    else
        c->head = k->next;
    if (k->next)
        k->next->prev = k->prev;
    release(c, k->key);
    pthread_mutex_unlock(&c->lock);
    wire_release(k->fd);
    atomic_fetch_sub(&c->mx->connections_open, 1);
    pthread_mutex_destroy(&k->lock);
    free(k);
    *socket_context = NULL;
}

/* See transport.h. */
const char *es_conn_address(const es_conn *k) { return k ? k->addr : "-"; }
bool es_conn_trusted(const es_conn *k) { return k && k->trusted; }

/* See transport.h. */
void es_conn_request(es_conns *c, es_conn *k, bool busy)
{
    if (!k)
        return;
    unsigned long long now_bytes = 0;
    bool have = !busy && k->fd >= 0 && bytes_received(k->fd, &now_bytes);
    if (!busy)
        wire_completed(k->fd);
    (void)c;
    pthread_mutex_lock(&k->lock);
    k->busy = busy;
    k->since = 0;
    if (have)
        k->mark = now_bytes;
    pthread_mutex_unlock(&k->lock);
}

/* Shut down connections whose request head is overdue (lock taken here). */
static void reap(es_conns *c, double now)
{
    pthread_mutex_lock(&c->lock);
    if (c->header_timeout_s <= 0) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    for (es_conn *k = c->head; k; k = k->next) {
        unsigned long long b;
        pthread_mutex_lock(&k->lock);
        if (k->busy || k->fd < 0 || !bytes_received(k->fd, &b) || b <= k->mark) {
            pthread_mutex_unlock(&k->lock);
            continue;
        }
        if (k->since == 0) {
            k->since = now;
        } else if (now - k->since > c->header_timeout_s) {
            es_warn("closing connection from %s: request head incomplete after %.0f s (server.header_timeout_s)",
                    k->addr, now - k->since);
            shutdown(k->fd, SHUT_RDWR); /* MHD sees the end and closes it */
            k->mark = ULLONG_MAX;       /* once */
            atomic_fetch_add(&c->mx->connections_timed_out, 1);
        }
        pthread_mutex_unlock(&k->lock);
    }
    pthread_mutex_unlock(&c->lock);
}

/* Answer a refused socket with a canned 503 and close it. The request the
 * client may already have sent is read first, so that closing does not reset
 * the connection before the answer is read. */
static void refuse(int fd, const char *reply, size_t len)
{
    char sink[4096];
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0)
        ;
    ssize_t ignored = send(fd, reply, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)ignored;
    shutdown(fd, SHUT_WR);
    close(fd);
}

/* Connections of key that are still open at the client's end: its count less
 * the started ones whose peer has closed or reset (lock held; the caller's
 * check above the cap, one poll over that address's sockets). */
static unsigned live_count(es_conns *c, const addr_count *a)
{
    struct pollfd *p = es_calloc(a->n, sizeof *p);
    nfds_t n = 0;
    for (es_conn *k = c->head; k && n < a->n; k = k->next)
        if (k->fd >= 0 && memcmp(k->key, a->key, 16) == 0)
            p[n++] = (struct pollfd){.fd = k->fd, .events = POLLRDHUP};
    unsigned dead = 0;
    if (n && poll(p, n, 0) > 0)
        for (nfds_t i = 0; i < n; i++)
            dead += (p[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    free(p);
    return a->n - dead;
}

/* Admit or refuse one accepted socket. */
static void admit(es_conns *c, int fd, const struct sockaddr *sa, socklen_t len)
{
    unsigned char key[16];
    addr_key(sa, key);
    pthread_mutex_lock(&c->lock);
    bool trusted = is_trusted(c, key);
    const addr_count *a = find_count(c, key);
    int why = c->total >= c->limit                                                      ? 1
            : !trusted && a && a->n >= c->per_address && live_count(c, a) >= c->per_address ? 2
                                                                                           : 0;
    if (!why)
        reserve(c, key);
    const char *reply = why == 1 ? c->busy_reply : c->per_address_reply; /* retired, never freed, by a reload */
    size_t reply_len = why == 1 ? c->busy_len : c->per_address_len;
    pthread_mutex_unlock(&c->lock);
    if (why) {
        atomic_fetch_add(&c->mx->connections_refused[why - 1], 1);
        refuse(fd, reply, reply_len);
        return;
    }
    atomic_fetch_add(&c->mx->connections_open, 1);
    atomic_fetch_add(&c->mx->connections_accepted, 1);
    char text[INET6_ADDRSTRLEN];
    key_text(key, text);
    wire_watch(fd, text);
    if (MHD_add_connection(c->daemon, fd, sa, len) != MHD_YES) { /* MHD closed fd */
        wire_release(fd);
        pthread_mutex_lock(&c->lock);
        release(c, key);
        pthread_mutex_unlock(&c->lock);
        atomic_fetch_sub(&c->mx->connections_open, 1);
    }
}

/* The acceptor thread: accept and admit; reap overdue heads every tick. */
static void *acceptor(void *arg)
{
    es_conns *c = arg;
    double next_reap = es_now();
    bool warned = false;
    for (;;) {
        struct pollfd p[2] = {{.fd = c->listen_fd, .events = POLLIN}, {.fd = c->stop_pipe[0], .events = POLLIN}};
        int n = poll(p, 2, TICK_MS);
        if (p[1].revents)
            break;
        for (int i = 0; n > 0 && (p[0].revents & POLLIN) && i < ACCEPT_BURST; i++) {
            struct sockaddr_storage ss;
            socklen_t len = sizeof ss;
            int fd = accept4(c->listen_fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if ((errno == EMFILE || errno == ENFILE) && !warned) {
                    es_warn("accept: %s: clients wait in the backlog (raise the open-files limit or lower "
                            "server.connection_limit)", strerror(errno));
                    warned = true;
                }
                if (errno == EMFILE || errno == ENFILE)
                    poll(NULL, 0, EMFILE_PAUSE_MS);
                break;
            }
            admit(c, fd, (struct sockaddr *)&ss, len);
        }
        double now = es_now();
        if (now >= next_reap) {
            reap(c, now);
            next_reap = now + 1.0;
        }
    }
    return NULL;
}

/* A connected TCP pair on the loopback interface: [0] the client's end, [1] the
 * server's (non-blocking, as accept4 gives the acceptor's). */
static int loopback_pair(int pair[2], struct sockaddr_storage *server_addr)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    pair[0] = pair[1] = -1;
    if (l >= 0 && bind(l, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(l, 1) == 0 &&
        getsockname(l, (struct sockaddr *)&sa, &len) == 0 &&
        (pair[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
        connect(pair[0], (struct sockaddr *)&sa, sizeof sa) == 0) {
        len = sizeof *server_addr;
        pair[1] = accept4(l, (struct sockaddr *)server_addr, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    }
    int saved = errno;
    if (l >= 0)
        close(l);
    if (pair[1] < 0 && pair[0] >= 0)
        close(pair[0]);
    errno = saved;
    return pair[1] >= 0 ? 0 : -1;
}

/* The request of the self-test: two Content-Length fields, which the framing
 * check refuses (400) as soon as it has read the head, and nothing else would
 * answer with its problem document. */
static const char PROBE_REQUEST[] = "GET /healthz HTTP/1.1\r\nHost: self-test\r\nContent-Length: 0\r\n"
                                    "Content-Length: 0\r\n\r\n";
/* How long the self-test waits for any answer: a guard against a hang, never
 * reached when it works (milliseconds), however loaded the machine. */
#define PROBE_TIMEOUT_MS 60000

/* The framing check is in libmicrohttpd's request path only because MHD reads
 * its sockets with recv(), which this file defines (see the top): a
 * libmicrohttpd that reads otherwise (recvfrom, read, a static build, a
 * version that checks framing itself) would silently serve without it. So
 * before any client is accepted, one connection over the loopback interface
 * is handed to MHD like an admitted one, and its refused request must come
 * back refused here; otherwise the daemon does not start. ES_E_IO naming
 * "framing" when disproven; a warning, and the daemon starts, when the test
 * cannot run (no loopback interface). */
static int framing_self_test(es_conns *c, es_err *err)
{
    int pair[2];
    struct sockaddr_storage sa;
    if (loopback_pair(pair, &sa) < 0) {
        es_warn("framing self-test: cannot connect over the loopback interface (%s): not run", strerror(errno));
        return 0;
    }
    unsigned char key[16];
    addr_key((struct sockaddr *)&sa, key);
    pthread_mutex_lock(&c->lock);
    reserve(c, key); /* released by MHD's close notification, like an admitted socket's */
    pthread_mutex_unlock(&c->lock);
    atomic_fetch_add(&c->mx->connections_open, 1);
    wire_watch(pair[1], "self-test");
    wire *w = (size_t)pair[1] < n_wires ? atomic_load(&wires[pair[1]]) : NULL;
    if (w)
        w->probe = true;
    atomic_store(&probe_refused, false);
    if (MHD_add_connection(c->daemon, pair[1], (struct sockaddr *)&sa, sizeof(struct sockaddr_in)) != MHD_YES) {
        /* MHD closed it */
        wire_release(pair[1]);
        pthread_mutex_lock(&c->lock);
        release(c, key);
        pthread_mutex_unlock(&c->lock);
        atomic_fetch_sub(&c->mx->connections_open, 1);
        close(pair[0]);
        return es_fail(err, ES_E_IO, "framing", "framing self-test: libmicrohttpd refused a connection");
    }
    ssize_t sent = send(pair[0], PROBE_REQUEST, sizeof PROBE_REQUEST - 1, MSG_NOSIGNAL);
    shutdown(pair[0], SHUT_WR);
    char reply[512] = "", sink[4096];
    size_t got = 0;
    struct pollfd p = {.fd = pair[0], .events = POLLIN};
    while (sent > 0) { /* the answer, until its end (its first bytes kept) */
        int ready = poll(&p, 1, PROBE_TIMEOUT_MS);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready != 1)
            break;
        bool keep = got < sizeof reply - 1;
        ssize_t n = read(pair[0], keep ? reply + got : sink, keep ? sizeof reply - 1 - got : sizeof sink);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (keep)
            got += (size_t)n;
    }
    close(pair[0]);
    reply[got] = '\0';
    /* MHD's close notification releases the probe's slot and wire: wait for it, so
     * that the first clients find every count as it was */
    for (int ms = 0; w && ms < PROBE_TIMEOUT_MS && atomic_load(&wires[pair[1]]) == w; ms++)
        poll(NULL, 0, 1);
    if (atomic_load(&probe_refused)) {
        es_debug("framing self-test: a request with two Content-Length fields was refused by the framing check");
        return 0;
    }
    reply[strcspn(reply, "\r\n")] = '\0';
    return es_fail(err, ES_E_IO, "framing",
                   "the strict framing check is not in libmicrohttpd's request path (a request it refuses, sent "
                   "over a loopback connection, was answered '%s'; libmicrohttpd %s must read its sockets with "
                   "recv(), see src/http/conns.c): refusing to start",
                   got ? reply : "nothing", MHD_get_version());
}

/* See transport.h. ES_E_IO if the thread or its pipe cannot be created, or
 * naming "framing" if the framing check is not in MHD's request path. */
int es_conns_run(es_conns *c, int listen_fd, struct MHD_Daemon *daemon, es_err *err)
{
    c->daemon = daemon;
    const char *bypass = getenv("ES_TEST_FRAMING_BYPASS");
    bypass_for_test = bypass && strcmp(bypass, "1") == 0;
    if (framing_self_test(c, err) < 0)
        return -1;
    c->listen_fd = listen_fd;
    if (pipe2(c->stop_pipe, O_CLOEXEC) < 0)
        return es_fail(err, ES_E_IO, "listen", "cannot create the acceptor's pipe: %s", strerror(errno));
    if (pthread_create(&c->thread, NULL, acceptor, c) != 0)
        return es_fail(err, ES_E_IO, "listen", "cannot start the acceptor thread");
    c->running = true;
    return 0;
}

/* See transport.h. Never fails; idempotent. */
void es_conns_stop_accepting(es_conns *c)
{
    if (c->running) {
        ssize_t ignored = write(c->stop_pipe[1], "x", 1);
        (void)ignored;
        pthread_join(c->thread, NULL);
        c->running = false;
    }
    if (c->listen_fd >= 0)
        close(c->listen_fd);
    c->listen_fd = -1;
}

/* See transport.h. NULL is ignored; MHD must be stopped first. */
void es_conns_free(es_conns *c)
{
    if (!c)
        return;
    es_conns_stop_accepting(c);
    for (int i = 0; i < 2; i++)
        if (c->stop_pipe[i] >= 0)
            close(c->stop_pipe[i]);
    for (size_t b = 0; b < ADDR_BUCKETS; b++)
        while (c->buckets[b]) {
            addr_count *a = c->buckets[b];
            c->buckets[b] = a->next;
            free(a);
        }
    pthread_mutex_destroy(&c->lock);
    free(c->trusted);
    free(c->busy_reply);
    free(c->per_address_reply);
    for (size_t i = 0; i < c->n_retired; i++)
        free(c->retired[i]);
    free(c->retired);
    free(c);
}
