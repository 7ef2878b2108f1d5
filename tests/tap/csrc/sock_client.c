/* Loopback TCP client for the socket-tap test. Runs the same fixed schedule of messages on
 * several connections, one libc call pair per thread (send/recv through dlsym'ed pointers,
 * sendto/recvfrom, sendmsg/recvmsg, write/read, writev/readv), reuses closed socket numbers
 * for pipes, then forks: the child runs the schedule once on an inherited connection.
 * Prints the child's pid. Usage: sock_client PORT_A PORT_B */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static const size_t SIZES[] = {1, 100, 1000, 5000, 70000};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])
#define REPS 2
#define ACK 8

enum { OP_SEND, OP_SENDTO, OP_SENDMSG, OP_WRITE, OP_WRITEV, NOPS };

typedef ssize_t (*send_fn)(int, const void *, size_t, int);
typedef ssize_t (*recv_fn)(int, void *, size_t, int);

static char payload[70000];
static int ports[2];

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sin, sizeof sin) != 0)
        die("connect");
    return fd;
}

static void xfer(int fd, int op, size_t n)
{
    char ack[ACK];
    ssize_t w = -1, r = -1;
    struct iovec out[2] = {{payload, n / 2}, {payload + n / 2, n - n / 2}};
    struct iovec in[2] = {{ack, ACK / 2}, {ack + ACK / 2, ACK - ACK / 2}};
    struct msghdr mo = {.msg_iov = out, .msg_iovlen = 2};
    struct msghdr mi = {.msg_iov = in, .msg_iovlen = 2};
    switch (op) {
    case OP_SEND: { /* RTLD_NEXT from the program must still find the tap's send */
        send_fn s = (send_fn)dlsym(RTLD_NEXT, "send");
        recv_fn rv = (recv_fn)dlsym(RTLD_DEFAULT, "recv");
        w = s(fd, payload, n, 0);
        r = rv(fd, ack, ACK, MSG_WAITALL);
        break;
    }
    case OP_SENDTO:
        w = sendto(fd, payload, n, 0, NULL, 0);
        r = recvfrom(fd, ack, ACK, MSG_WAITALL, NULL, NULL);
        break;
    case OP_SENDMSG:
        w = sendmsg(fd, &mo, 0);
        r = recvmsg(fd, &mi, MSG_WAITALL);
        break;
    case OP_WRITE:
        w = write(fd, payload, n);
        r = read(fd, ack, ACK);
        break;
    case OP_WRITEV:
        w = writev(fd, out, 2);
        r = readv(fd, in, 2);
        break;
    }
    if (w != (ssize_t)n || r != ACK) {
        fprintf(stderr, "op %d size %zu: wrote %zd, read %zd\n", op, n, w, r);
        exit(1);
    }
}

static void schedule(int fd, int op)
{
    for (int rep = 0; rep < REPS; rep++)
        for (size_t i = 0; i < NSIZES; i++)
            xfer(fd, op, SIZES[i]);
}

static void *worker(void *arg)
{
    int op = (int)(intptr_t)arg;
    int fd = dial(ports[op % 2]);
    schedule(fd, op);
    close(fd);
    return NULL;
}

/* Traffic that must not be counted: pipes and a socketpair (also on the numbers of closed
 * TCP sockets), UDP. */
static void not_tcp(void)
{
    char buf[1000];
    int s = dial(ports[0]);
    schedule(s, OP_WRITE);
    close(s);
    int p[2];
    if (pipe(p) != 0)
        die("pipe");
    int s2 = dial(ports[0]);
    schedule(s2, OP_WRITE);
    if (dup2(p[1], s2) < 0) /* s2's number now writes into the pipe */
        die("dup2");
    if (write(s2, payload, sizeof buf) != (ssize_t)sizeof buf || write(p[1], payload, 10) != 10 ||
        read(p[0], buf, sizeof buf) <= 0)
        die("pipe io");
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0 || send(sp[0], payload, 500, 0) != 500 ||
        recv(sp[1], buf, sizeof buf, 0) != 500)
        die("socketpair");
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ports[0])};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (sendto(u, payload, 300, 0, (struct sockaddr *)&sin, sizeof sin) != 300)
        die("udp");
    close(u);
    close(sp[0]);
    close(sp[1]);
    close(p[0]);
    close(p[1]);
    close(s2);
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    ports[0] = atoi(argv[1]);
    ports[1] = atoi(argv[2]);
    memset(payload, 'x', sizeof payload);
    pthread_t t[NOPS];
    for (int op = 0; op < NOPS; op++)
        if (pthread_create(&t[op], NULL, worker, (void *)(intptr_t)op) != 0)
            die("pthread_create");
    for (int op = 0; op < NOPS; op++)
        pthread_join(t[op], NULL);
    not_tcp();
    int f = dial(ports[1]);
    pid_t child = fork();
    if (child < 0)
        die("fork");
    if (child == 0) {
        schedule(f, OP_SEND);
        _exit(0);
    }
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("child");
    schedule(f, OP_WRITEV);
    close(f);
    printf("%d\n", (int)child);
    return 0;
}
