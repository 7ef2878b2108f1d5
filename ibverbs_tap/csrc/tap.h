/* ibverbs-tap: per-peer message-size histograms kept in a per-process shared-memory file.
 *
 * The file layout below is the contract with the Python reader (ibverbs_tap/shm.py); any
 * change to it bumps TAP_VERSION. All multi-byte fields are native-endian. Counters are
 * only ever updated with relaxed atomic adds, so the hot path takes no lock and allocates
 * nothing; readers see each 8-byte counter either before or after an update.
 */
#ifndef IBVERBS_TAP_H
#define IBVERBS_TAP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TAP_MAGIC "IBVTAP\0\1"
#define TAP_VERSION 1u
#define TAP_NBUCKETS 64u  /* bucket b holds sizes in [2^b, 2^(b+1)); size 0 goes to bucket 0 */
#define TAP_MAX_PEERS 1024u
#define TAP_FILE_PREFIX "ibverbs-tap."

enum { TAP_TX = 0, TAP_RX = 1 };
enum { TAP_PEER_TCP4 = 1, TAP_PEER_TCP6 = 2, TAP_PEER_VERBS = 3 };
enum { TAP_PEER_EMPTY = 0, TAP_PEER_CLAIMING = 1, TAP_PEER_READY = 2 };
enum {
    TAP_F_VERBS_BUILT = 1u << 0, /* compiled with libibverbs headers */
    TAP_F_VERBS_SEEN = 1u << 1,  /* this process opened a verbs device */
};

struct tap_header {                 /* 256 bytes */
    char magic[8];                  /*   0: written last, with release order */
    uint32_t version;               /*   8 */
    uint32_t header_size;           /*  12 */
    uint32_t peer_size;             /*  16 */
    uint32_t max_peers;             /*  20 */
    uint32_t nbuckets;              /*  24 */
    _Atomic uint32_t flags;         /*  28 */
    int32_t pid;                    /*  32 */
    int32_t ppid;                   /*  36 */
    uint64_t start_realtime_ns;     /*  40: when the first image of this process attached */
    uint64_t proc_start_ticks;      /*  48: /proc/<pid>/stat starttime, tells pid reuse */
    _Atomic uint32_t npeers;        /*  56 */
    _Atomic uint32_t images;        /*  60: 1 + number of execs that kept this file */
    _Atomic uint64_t dropped_calls; /*  64: I/O not attributed because the peer table is full */
    _Atomic uint64_t dropped_bytes; /*  72 */
    _Atomic uint64_t srq_recv_posted; /* 80: receive WRs posted to shared receive queues */
    uint64_t reserved[5];           /*  88 */
    char cmdline[128];              /* 128: NUL-separated argv, truncated */
};

struct tap_peer {                   /* 64 + 2048 bytes */
    _Atomic uint32_t state;         /*   0 */
    uint32_t kind;                  /*   4 */
    uint64_t key_hash;              /*   8 */
    uint8_t addr[16];               /*  16: IPv4 in the first 4 bytes, IPv6, or the verbs GID */
    uint32_t port;                  /*  32: TCP port, or remote QP number for verbs */
    uint32_t lid;                   /*  36: verbs destination LID */
    uint32_t local_qpn;             /*  40: verbs local QP number */
    uint32_t reserved0;             /*  44 */
    _Atomic uint64_t recv_posted;   /*  48: verbs receive WRs posted on this QP */
    uint64_t reserved1;             /*  56 */
    _Atomic uint64_t count[2][TAP_NBUCKETS];
    _Atomic uint64_t bytes[2][TAP_NBUCKETS];
};

_Static_assert(sizeof(struct tap_header) == 256, "header layout");
_Static_assert(offsetof(struct tap_header, cmdline) == 128, "header layout");
_Static_assert(offsetof(struct tap_peer, count) == 64, "peer layout");
_Static_assert(sizeof(struct tap_peer) == 64 + 2 * 2 * 8 * TAP_NBUCKETS, "peer layout");

struct tap_key {
    uint32_t kind;
    uint8_t addr[16];
    uint32_t port;
    uint32_t lid;
    uint32_t local_qpn;
};

#define TAP_EXPORT __attribute__((visibility("default")))
#define TAP_LIKELY(x) __builtin_expect(!!(x), 1)
#define TAP_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* tap_shm.c */
extern struct tap_header *tap_hdr;  /* NULL until the file is mapped (or if that failed) */
extern struct tap_peer *tap_peers;
int tap_peer_claim(const struct tap_key *key); /* index, or -1 when the table is full */
void tap_set_flag(uint32_t flag);

static inline unsigned tap_bucket(uint64_t size)
{
    return size ? 63u - (unsigned)__builtin_clzll(size) : 0u;
}

static inline void tap_account(int peer, int dir, uint64_t size)
{
    struct tap_peer *p = &tap_peers[peer];
    unsigned b = tap_bucket(size);
    atomic_fetch_add_explicit(&p->count[dir][b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->bytes[dir][b], size, memory_order_relaxed);
}

static inline void tap_drop(uint64_t size)
{
    if (tap_hdr) {
        atomic_fetch_add_explicit(&tap_hdr->dropped_calls, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&tap_hdr->dropped_bytes, size, memory_order_relaxed);
    }
}

/* tap_dl.c: the real dlsym/dlvsym, found in libc's own symbol table (ours shadow them). */
void *tap_real_dlsym(void *handle, const char *name);
void *tap_real_dlvsym(void *handle, const char *name, const char *version);
void *tap_next(const char *name); /* next definition after this library, or NULL */

/* tap_sock.c */
void tap_sock_after_fork(void);
void tap_sock_resolve(void);
ssize_t tap_raw_read(int fd, void *buf, size_t n);
int tap_raw_close(int fd);

/* tap_verbs.c (stubs when built without verbs headers) */
void tap_verbs_after_fork(void);
void *tap_verbs_hook(const char *name, void *real); /* wrapper for a dlsym'ed verbs symbol */

#endif
