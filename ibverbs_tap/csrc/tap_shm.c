/* The per-process shared-memory file: creation, reuse across exec, fork, peer table. */
#define _GNU_SOURCE
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct tap_header *tap_hdr;
struct tap_peer *tap_peers;

#define TAP_FILE_SIZE (sizeof(struct tap_header) + (size_t)TAP_MAX_PEERS * sizeof(struct tap_peer))

static char tap_path[PATH_MAX];

static void tap_warn(const char *msg)
{
    char line[PATH_MAX + 160];
    int n = snprintf(line, sizeof line, "ibverbs-tap: %s (%s): %s; not profiling\n", msg,
                     tap_path, strerror(errno));
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0)
        return;
}

/* Reads a small /proc file with the raw syscalls (our read() would classify the fd). */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = tap_raw_read(fd, buf, cap);
    tap_raw_close(fd);
    return n;
}

/* starttime (field 22 of /proc/self/stat): identifies this process across exec. */
static uint64_t proc_start_ticks(void)
{
    char buf[1024];
    ssize_t n = read_small("/proc/self/stat", buf, sizeof buf - 1);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    for (int field = 2; field < 22 && p; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static void fill_cmdline(struct tap_header *h)
{
    char buf[sizeof h->cmdline];
    ssize_t n = read_small("/proc/self/cmdline", buf, sizeof buf);
    memset(h->cmdline, 0, sizeof h->cmdline);
    if (n > 0)
        memcpy(h->cmdline, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    h->cmdline[sizeof h->cmdline - 1] = '\0';
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Maps this process's file. After an exec the same pid and start time keep counting into the
 * existing file; a file left by an earlier process with the same pid is reset. */
static void tap_map(void)
{
    const char *dir = getenv("IBVERBS_TAP_DIR");
    if (!dir || !*dir)
        dir = "/dev/shm";
    pid_t pid = getpid();
    snprintf(tap_path, sizeof tap_path, "%s/" TAP_FILE_PREFIX "%d", dir, (int)pid);

    int fd = open(tap_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        tap_warn("cannot create the profile file");
        return;
    }
    struct stat st;
    uint64_t ticks = proc_start_ticks();
    int reuse = 0;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == TAP_FILE_SIZE) {
        struct tap_header old;
        if (pread(fd, &old, sizeof old, 0) == (ssize_t)sizeof old &&
            memcmp(old.magic, TAP_MAGIC, 8) == 0 && old.version == TAP_VERSION &&
            old.pid == (int32_t)pid && old.proc_start_ticks == ticks)
            reuse = 1;
    }
    if (!reuse && (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)TAP_FILE_SIZE) != 0)) {
        tap_warn("cannot size the profile file");
        tap_raw_close(fd);
        return;
    }
    void *m = mmap(NULL, TAP_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    tap_raw_close(fd);
    if (m == MAP_FAILED) {
        tap_warn("cannot map the profile file");
        return;
    }
    struct tap_header *h = m;
    if (reuse) {
        atomic_fetch_add_explicit(&h->images, 1, memory_order_relaxed);
    } else {
        h->version = TAP_VERSION;
        h->header_size = sizeof(struct tap_header);
        h->peer_size = sizeof(struct tap_peer);
        h->max_peers = TAP_MAX_PEERS;
        h->nbuckets = TAP_NBUCKETS;
        h->pid = (int32_t)pid;
        h->ppid = (int32_t)getppid();
        h->start_realtime_ns = realtime_ns();
        h->proc_start_ticks = ticks;
        atomic_store_explicit(&h->images, 1, memory_order_relaxed);
    }
#ifdef TAP_HAVE_VERBS
    atomic_fetch_or_explicit(&h->flags, TAP_F_VERBS_BUILT, memory_order_relaxed);
#endif
    fill_cmdline(h);
    tap_peers = (struct tap_peer *)((char *)m + sizeof(struct tap_header));
    atomic_thread_fence(memory_order_release);
    memcpy(h->magic, TAP_MAGIC, 8);
    tap_hdr = h;
}

static void tap_unmap(void)
{
    if (tap_hdr)
        munmap(tap_hdr, TAP_FILE_SIZE);
    tap_hdr = NULL;
    tap_peers = NULL;
}

/* The child gets a file of its own: counters start at zero, fd and QP caches are dropped. */
static void tap_atfork_child(void)
{
    tap_unmap();
    tap_sock_after_fork();
    tap_verbs_after_fork();
    tap_map();
}

static int tap_keep(void)
{
    const char *keep = getenv("IBVERBS_TAP_KEEP");
    return keep && *keep && strcmp(keep, "0") != 0;
}

__attribute__((constructor)) static void tap_init(void)
{
    tap_sock_resolve();
    tap_map();
    pthread_atfork(NULL, NULL, tap_atfork_child);
}

/* Normal exit removes the file unless IBVERBS_TAP_KEEP is set (ibverbs-tap run sets it to
 * collect every process at the end); exec keeps it since no destructor runs. */
__attribute__((destructor)) static void tap_fini(void)
{
    if (tap_hdr && tap_hdr->pid == (int32_t)getpid() && !tap_keep())
        unlink(tap_path);
}

void tap_set_flag(uint32_t flag)
{
    if (tap_hdr)
        atomic_fetch_or_explicit(&tap_hdr->flags, flag, memory_order_relaxed);
}

static uint64_t key_hash(const struct tap_key *k)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    const uint8_t *p = (const uint8_t *)k;
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h | 1; /* never 0 */
}

static int key_equal(const struct tap_peer *p, const struct tap_key *k)
{
    return p->kind == k->kind && p->port == k->port && p->lid == k->lid &&
           p->local_qpn == k->local_qpn && memcmp(p->addr, k->addr, 16) == 0;
}

/* Open addressing; a slot is claimed by CAS and published with a release store. Only the
 * first I/O towards a peer gets here (callers cache the index), so the brief wait for a
 * concurrent claimer of the same slot is off the hot path. */
int tap_peer_claim(const struct tap_key *key)
{
    if (!tap_hdr)
        return -1;
    uint64_t h = key_hash(key);
    for (uint32_t i = 0; i < TAP_MAX_PEERS; i++) {
        struct tap_peer *p = &tap_peers[(h + i) % TAP_MAX_PEERS];
        uint32_t st = atomic_load_explicit(&p->state, memory_order_acquire);
        if (st == TAP_PEER_EMPTY) {
            uint32_t expect = TAP_PEER_EMPTY;
            if (atomic_compare_exchange_strong_explicit(&p->state, &expect, TAP_PEER_CLAIMING,
                                                        memory_order_acq_rel,
                                                        memory_order_acquire)) {
                p->kind = key->kind;
                memcpy(p->addr, key->addr, 16);
                p->port = key->port;
                p->lid = key->lid;
                p->local_qpn = key->local_qpn;
                p->key_hash = h;
                atomic_store_explicit(&p->state, TAP_PEER_READY, memory_order_release);
                atomic_fetch_add_explicit(&tap_hdr->npeers, 1, memory_order_relaxed);
                return (int)((h + i) % TAP_MAX_PEERS);
            }
            st = expect;
        }
        while (st == TAP_PEER_CLAIMING) {
            sched_yield();
            st = atomic_load_explicit(&p->state, memory_order_acquire);
        }
        if (p->key_hash == h && key_equal(p, key))
            return (int)((h + i) % TAP_MAX_PEERS);
    }
    return -1;
}
