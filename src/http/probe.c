/* embedscope --probe PATH: the daemon's own health probe (container
 * HEALTHCHECK, Kubernetes exec probes). One GET over a plain socket to the
 * listen address and the status line read back: the image needs no curl, and
 * with it no libcurl, Kerberos or LDAP libraries (docs/operations.md). */
#include "http/transport.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Seconds the connection, the request and the answer's status line may take all
 * together at most per step (Docker's and Kubernetes' probe timeouts are 1-3 s). */
#define PROBE_TIMEOUT_S 2

/* The address to reach a daemon listening on host: a wildcard (0.0.0.0, ::)
 * is reached on the loopback of its family. */
static const char *probe_host(const char *host)
{
    if (!*host || strcmp(host, "0.0.0.0") == 0)
        return "127.0.0.1";
    if (strcmp(host, "::") == 0)
        return "::1";
    return host;
}

/* A connected stream socket to host:port with send/receive timeouts (which
 * bound connect() too on Linux), or -1 with *why set. */
static int probe_connect(const char *host, unsigned port, const char **why)
{
    char service[16];
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai;
    int rc = getaddrinfo(host, service, &hints, &ai);
    if (rc != 0) {
        *why = gai_strerror(rc);
        return -1;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    struct timeval tv = {.tv_sec = PROBE_TIMEOUT_S};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        *why = strerror(errno);
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* See transport.h. */
int es_probe(const char *listen_host, unsigned port, const char *path)
{
    const char *host = probe_host(listen_host), *why = NULL;
    bool v6 = strchr(host, ':') != NULL;
    if (path[0] != '/' || strpbrk(path, " \r\n")) {
        fprintf(stderr, "embedscope: --probe: expected a path such as /readyz, got '%s'\n", path);
        return 2;
    }
    int status = 0, fd = probe_connect(host, port, &why);
    if (fd >= 0) {
        char req[1024], head[64] = "";
        int len = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path);
        size_t got = 0;
        ssize_t n = 0;
        if (len > 0 && (size_t)len < sizeof req && write(fd, req, (size_t)len) == len)
            while (got < sizeof head - 1 && (n = read(fd, head + got, sizeof head - 1 - got)) > 0)
                got += (size_t)n;
        head[got] = '\0';
        if (sscanf(head, "HTTP/1.%*1[01] %3d", &status) != 1)
            why = got ? "no HTTP status line" : n < 0 ? strerror(errno) : "connection closed without an answer";
        close(fd);
    }
    if (status >= 200 && status < 300)
        return 0;
    char url[300];
    snprintf(url, sizeof url, "http://%s%s%s:%u%s", v6 ? "[" : "", host, v6 ? "]" : "", port, path);
    if (why)
        fprintf(stderr, "embedscope: probe %s: %s\n", url, why);
    else
        fprintf(stderr, "embedscope: probe %s: status %d\n", url, status);
    return 1;
}
