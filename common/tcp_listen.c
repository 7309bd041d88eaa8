/* SPDX-License-Identifier: MIT */
/* Listening TCP sockets (tcp_listen.h). */
#include "tcp_listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int split(const char *addr, char *host, size_t n, const char **port)
{
    const char *colon = strrchr(addr, ':');
    size_t hl = colon ? (size_t)(colon - addr) : 0;
    if (!colon || hl == 0 || hl >= n || !colon[1])
        return -EINVAL;
    memcpy(host, addr, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    *port = colon + 1;
    return 0;
}

static bool sa_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

bool dsv4_addr_is_loopback(const char *addr)
{
    char host[256];
    const char *port;
    if (split(addr, host, sizeof(host), &port) < 0)
        return false;
    struct addrinfo hints = { .ai_flags = AI_NUMERICSERV, .ai_socktype = SOCK_STREAM }, *ai, *p;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return false;
    bool all = true;
    for (p = ai; p; p = p->ai_next)
        all &= sa_loopback(p->ai_addr);
    freeaddrinfo(ai);
    return all;
}

bool dsv4_fd_is_loopback(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    return getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && sa_loopback((struct sockaddr *)&ss);
}

int dsv4_tcp_listen(const char *what, const char *addr, int backlog, char *bound,
                    size_t bound_n, struct dsv4_err *err)
{
    char host[256];
    const char *port;
    if (split(addr, host, sizeof(host), &port) < 0)
        return dsv4_errf(err, -EINVAL, "%s address %s: expected HOST:PORT", what, addr);
    struct addrinfo hints = { .ai_flags = AI_NUMERICSERV, .ai_socktype = SOCK_STREAM }, *ai;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g != 0)
        return dsv4_errf(err, -EINVAL, "%s address %s: %s", what, addr, gai_strerror(g));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, backlog) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return dsv4_errf(err, -e, "%s address %s: %s", what, addr, strerror(e));
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char h[INET6_ADDRSTRLEN] = "?";
    int p = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const void *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof(h));
            p = ntohs(a->sin6_port);
        } else {
            const struct sockaddr_in *a = (const void *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, h, sizeof(h));
            p = ntohs(a->sin_port);
        }
    }
    snprintf(bound, bound_n, ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", h, p);
    return fd;
}
