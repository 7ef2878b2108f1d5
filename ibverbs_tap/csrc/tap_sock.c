/* TCP socket tap: the libc send/recv family, attributed per peer (IP:port).
 *
 * Whether an fd is a TCP socket (and to which peer) is decided once, on its first I/O, and
 * cached in a flat per-fd array; close/dup2/dup3/socket/accept/connect invalidate it. The hot
 * path is then one relaxed load plus two relaxed atomic adds.
 */
#define _GNU_SOURCE
#include "tap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define FD_CACHE_SIZE 65536
enum { FD_UNKNOWN = 0, FD_OTHER = 1, FD_PEER0 = 2 };

static _Atomic uint32_t fd_cache[FD_CACHE_SIZE];

typedef ssize_t (*send_fn)(int, const void *, size_t, int);
typedef ssize_t (*sendto_fn)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*recv_fn)(int, void *, size_t, int);
typedef ssize_t (*recvfrom_fn)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
typedef ssize_t (*recvmsg_fn)(int, struct msghdr *, int);
typedef ssize_t (*read_fn)(int, void *, size_t);
typedef ssize_t (*readv_fn)(int, const struct iovec *, int);
typedef int (*close_fn)(int);
typedef int (*dup2_fn)(int, int);
typedef int (*dup3_fn)(int, int, int);
typedef int (*socket_fn)(int, int, int);
typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

static send_fn real_send;
static sendto_fn real_sendto;
static sendmsg_fn real_sendmsg;
static write_fn real_write;
static writev_fn real_writev;
static recv_fn real_recv;
static recvfrom_fn real_recvfrom;
static recvmsg_fn real_recvmsg;
static read_fn real_read;
static readv_fn real_readv;
static close_fn real_close;
static dup2_fn real_dup2;
static dup3_fn real_dup3;
static socket_fn real_socket;
static accept_fn real_accept;
static accept4_fn real_accept4;
static connect_fn real_connect;

void tap_sock_resolve(void)
{
    real_send = (send_fn)tap_next("send");
    real_sendto = (sendto_fn)tap_next("sendto");
    real_sendmsg = (sendmsg_fn)tap_next("sendmsg");
    real_write = (write_fn)tap_next("write");
    real_writev = (writev_fn)tap_next("writev");
    real_recv = (recv_fn)tap_next("recv");
    real_recvfrom = (recvfrom_fn)tap_next("recvfrom");
    real_recvmsg = (recvmsg_fn)tap_next("recvmsg");
    real_read = (read_fn)tap_next("read");
    real_readv = (readv_fn)tap_next("readv");
    real_close = (close_fn)tap_next("close");
    real_dup2 = (dup2_fn)tap_next("dup2");
    real_dup3 = (dup3_fn)tap_next("dup3");
    real_socket = (socket_fn)tap_next("socket");
    real_accept = (accept_fn)tap_next("accept");
    real_accept4 = (accept4_fn)tap_next("accept4");
    real_connect = (connect_fn)tap_next("connect");
}

/* Every wrapper may run before our constructor (another library's constructor doing I/O). */
#define RESOLVED(fn) (TAP_LIKELY(fn != NULL) || (tap_sock_resolve(), fn != NULL))

void tap_sock_after_fork(void)
{
    for (size_t i = 0; i < FD_CACHE_SIZE; i++)
        atomic_store_explicit(&fd_cache[i], FD_UNKNOWN, memory_order_relaxed);
}

static inline void forget(int fd)
{
    if (fd >= 0 && fd < FD_CACHE_SIZE)
        atomic_store_explicit(&fd_cache[fd], FD_UNKNOWN, memory_order_relaxed);
}

/* FD_OTHER, FD_PEER0 + index, or FD_UNKNOWN when the answer may still change (not yet
 * connected, a transient error) or the peer table is full. */
static uint32_t classify(int fd)
{
    int saved = errno;
    uint32_t result = FD_UNKNOWN;
    int type = 0, domain = 0, proto = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
        if (errno == ENOTSOCK)
            result = FD_OTHER;
        goto out;
    }
    len = sizeof domain;
    if (type != SOCK_STREAM || getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
        (domain != AF_INET && domain != AF_INET6)) {
        result = FD_OTHER;
        goto out;
    }
    len = sizeof proto;
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 || proto != IPPROTO_TCP) {
        result = FD_OTHER;
        goto out;
    }
    struct sockaddr_storage ss;
    len = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
        goto out;
    struct tap_key key;
    memset(&key, 0, sizeof key);
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
        key.kind = TAP_PEER_TCP4;
        memcpy(key.addr, &sin->sin_addr, 4);
        key.port = ntohs(sin->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
        key.port = ntohs(sin6->sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) { /* report ::ffff:a.b.c.d as a.b.c.d */
            key.kind = TAP_PEER_TCP4;
            memcpy(key.addr, &sin6->sin6_addr.s6_addr[12], 4);
        } else {
            key.kind = TAP_PEER_TCP6;
            memcpy(key.addr, &sin6->sin6_addr, 16);
        }
    } else {
        goto out;
    }
    int idx = tap_peer_claim(&key);
    if (idx >= 0)
        result = FD_PEER0 + (uint32_t)idx;
out:
    if (result != FD_UNKNOWN && fd >= 0 && fd < FD_CACHE_SIZE)
        atomic_store_explicit(&fd_cache[fd], result, memory_order_relaxed);
    errno = saved;
    return result;
}

static inline void account(int fd, int dir, ssize_t n)
{
    if (n <= 0 || TAP_UNLIKELY(tap_hdr == NULL))
        return;
    uint32_t e = FD_UNKNOWN;
    if (TAP_LIKELY(fd >= 0 && fd < FD_CACHE_SIZE))
        e = atomic_load_explicit(&fd_cache[fd], memory_order_relaxed);
    if (e == FD_UNKNOWN)
        e = classify(fd);
    if (e >= FD_PEER0)
        tap_account((int)(e - FD_PEER0), dir, (uint64_t)n);
    else if (e == FD_UNKNOWN && tap_hdr->npeers >= TAP_MAX_PEERS)
        tap_drop((uint64_t)n);
}

TAP_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    if (!RESOLVED(real_send))
        return errno = ENOSYS, -1;
    ssize_t r = real_send(fd, buf, n, flags);
    account(fd, TAP_TX, r);
    return r;
}

TAP_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
                          const struct sockaddr *to, socklen_t tolen)
{
    if (!RESOLVED(real_sendto))
        return errno = ENOSYS, -1;
    ssize_t r = real_sendto(fd, buf, n, flags, to, tolen);
    account(fd, TAP_TX, r);
    return r;
}

TAP_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (!RESOLVED(real_sendmsg))
        return errno = ENOSYS, -1;
    ssize_t r = real_sendmsg(fd, msg, flags);
    account(fd, TAP_TX, r);
    return r;
}

TAP_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
    if (!RESOLVED(real_write))
        return errno = ENOSYS, -1;
    ssize_t r = real_write(fd, buf, n);
    account(fd, TAP_TX, r);
    return r;
}

TAP_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
    if (!RESOLVED(real_writev))
        return errno = ENOSYS, -1;
    ssize_t r = real_writev(fd, iov, iovcnt);
    account(fd, TAP_TX, r);
    return r;
}

TAP_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    if (!RESOLVED(real_recv))
        return errno = ENOSYS, -1;
    ssize_t r = real_recv(fd, buf, n, flags);
    account(fd, TAP_RX, r);
    return r;
}

TAP_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from,
                            socklen_t *fromlen)
{
    if (!RESOLVED(real_recvfrom))
        return errno = ENOSYS, -1;
    ssize_t r = real_recvfrom(fd, buf, n, flags, from, fromlen);
    account(fd, TAP_RX, r);
    return r;
}

TAP_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    if (!RESOLVED(real_recvmsg))
        return errno = ENOSYS, -1;
    ssize_t r = real_recvmsg(fd, msg, flags);
    account(fd, TAP_RX, r);
    return r;
}

TAP_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
    if (!RESOLVED(real_read))
        return errno = ENOSYS, -1;
    ssize_t r = real_read(fd, buf, n);
    account(fd, TAP_RX, r);
    return r;
}

TAP_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
    if (!RESOLVED(real_readv))
        return errno = ENOSYS, -1;
    ssize_t r = real_readv(fd, iov, iovcnt);
    account(fd, TAP_RX, r);
    return r;
}

/* Invalidated before the real close (so a racing I/O cannot re-cache the old socket after the
 * number is reused) and after it (a racing I/O may have re-cached it meanwhile). */
TAP_EXPORT int close(int fd)
{
    if (!RESOLVED(real_close))
        return errno = ENOSYS, -1;
    forget(fd);
    int r = real_close(fd);
    forget(fd);
    return r;
}

TAP_EXPORT int dup2(int oldfd, int newfd)
{
    if (!RESOLVED(real_dup2))
        return errno = ENOSYS, -1;
    forget(newfd);
    int r = real_dup2(oldfd, newfd);
    forget(newfd);
    return r;
}

TAP_EXPORT int dup3(int oldfd, int newfd, int flags)
{
    if (!RESOLVED(real_dup3))
        return errno = ENOSYS, -1;
    forget(newfd);
    int r = real_dup3(oldfd, newfd, flags);
    forget(newfd);
    return r;
}

/* New descriptors start unknown even if their number was closed behind our back (fclose and
 * other libc-internal closes do not go through close()). */
TAP_EXPORT int socket(int domain, int type, int protocol)
{
    if (!RESOLVED(real_socket))
        return errno = ENOSYS, -1;
    int r = real_socket(domain, type, protocol);
    forget(r);
    return r;
}

TAP_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    if (!RESOLVED(real_accept))
        return errno = ENOSYS, -1;
    int r = real_accept(fd, addr, len);
    forget(r);
    return r;
}

TAP_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    if (!RESOLVED(real_accept4))
        return errno = ENOSYS, -1;
    int r = real_accept4(fd, addr, len, flags);
    forget(r);
    return r;
}

TAP_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    if (!RESOLVED(real_connect))
        return errno = ENOSYS, -1;
    int r = real_connect(fd, addr, len);
    int saved = errno;
    forget(fd);
    errno = saved;
    return r;
}

ssize_t tap_raw_read(int fd, void *buf, size_t n)
{
    return RESOLVED(real_read) ? real_read(fd, buf, n) : -1;
}

int tap_raw_close(int fd)
{
    return RESOLVED(real_close) ? real_close(fd) : -1;
}
