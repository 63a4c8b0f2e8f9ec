/* What the transport does outside libmicrohttpd: the listening socket, the
 * open-files limit the connection limit must fit in, and the access-log
 * record of a completed request. */
#include "http/transport.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* Descriptors kept for everything but connections (files, pipes, cache). */
#define FD_RESERVE 64

/* Resolve host:port to one socket address. ES_E_IO naming "listen" on failure. */
static int resolve(const char *host, unsigned port, struct addrinfo **out, es_err *err)
{
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    int rc = getaddrinfo(host, service, &hints, out);
    if (rc != 0)
        return es_fail(err, ES_E_IO, "listen", "cannot resolve listen address %s:%u: %s", host, port, gai_strerror(rc));
    return 0;
}

/* A listening socket on host:port (the kernel's full backlog: clients above
 * every limit wait there only while the acceptor is paused); *bound is the
 * real port. ES_E_IO naming "listen" on failure. */
int es_listen_open(const char *host, unsigned port, unsigned *bound, es_err *err)
{
    struct addrinfo *ai;
    if (resolve(host, port, &ai, err) < 0)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return es_fail(err, ES_E_IO, "listen", "cannot listen on %s:%u: %s", host, port, strerror(e));
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* Raise the open-files limit to its hard maximum and bound the connection
 * limit by it (with room for data files, the cache and the pipes). */
unsigned es_fit_descriptors(unsigned limit)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return limit;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    rlim_t room = rl.rlim_cur > 2 * FD_RESERVE ? rl.rlim_cur - FD_RESERVE : rl.rlim_cur / 2;
    if (limit > room) {
        es_warn("server.connection_limit %u exceeds what the open-files limit %llu allows: using %llu", limit,
                (unsigned long long)rl.rlim_cur, (unsigned long long)room);
        return (unsigned)room;
    }
    return limit;
}

/* One access-log record (es_log_access: whatever --log-level says): method,
 * target, status, bytes, duration, request id, client (and the connection's
 * own address when a trusted proxy forwarded the client's). */
void es_access_log(const es_access *rq)
{
    const char *peer = rq->peer, *query = rq->query;
    bool forwarded = strcmp(peer, rq->client) != 0;
    char text[1200];
    snprintf(text, sizeof text, "%s %s%s%.512s %u %zu B %.1f ms id=%s client=%s%s%s%s", rq->method, rq->path,
             *query ? "?" : "", query, rq->status, rq->bytes, rq->seconds * 1e3, rq->id, rq->client,
             forwarded ? " peer=" : "", forwarded ? peer : "", rq->early ? " (connection closed early)" : "");
    char *json = NULL;
    if (es_log_is_json()) {
        json_t *o = json_pack("{s:o, s:o, s:o, s:i, s:I, s:f, s:o, s:o, s:b}", "method", es_jstr(rq->method), "path",
                              es_jstr(rq->path), "query", es_jstr(query), "status", (int)rq->status, "bytes",
                              (json_int_t)rq->bytes, "ms", rq->seconds * 1e3, "request_id", es_jstr(rq->id), "client",
                              es_jstr(rq->client), "closed_early", rq->early);
        if (o && forwarded)
            json_object_set_new(o, "peer", es_jstr(peer));
        json = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
    }
    es_log_access(text, json ? json : "");
    free(json);
}

/* See transport.h (RFC 9112 §3.2, §6.3: ambiguous framing is an error, not a guess). */
const char *es_head_refusal(const es_head_scan *h, bool nul, bool http11)
{
    return nul ? "%00 (a NUL byte) in the path or a parameter"
         : h->lengths_differ ? "Content-Length given twice with different values"
         : h->n_length > 1 ? "Content-Length given more than once"
         : h->n_length && h->chunked ? "both Content-Length and Transfer-Encoding"
         : h->length && (!*h->length || strspn(h->length, "0123456789") != strlen(h->length)) ? "a malformed Content-Length"
         : h->n_host > 1 ? "Host given more than once"
         : !h->n_host && http11 ? "an HTTP/1.1 request without Host"
         : NULL;
}

/* See transport.h. */
bool es_body_too_slow(es_app *app, double elapsed, size_t bytes)
{
    es_catalogue *cat = es_app_catalogue(app); /* a reload may change the floor */
    const es_server_conf *s = &cat->server;
    bool slow = s->body_grace_s > 0 && elapsed > (double)s->body_grace_s &&
                (double)bytes < (double)s->body_min_rate * elapsed;
    es_catalogue_free(cat);
    return slow;
}
