/* RDMA verbs tap.
 *
 * ibv_post_send/ibv_post_recv/ibv_poll_cq/ibv_post_srq_recv and ibv_create_qp_ex are static
 * inline in verbs.h and jump through the context's ops, so the tap swaps those function
 * pointers for wrappers when it first sees a context (ibv_open_device, ibv_create_qp). Each QP
 * is mapped to its remote peer (DLID, DGID, destination QPN) when ibv_modify_qp moves it to
 * RTR. Sends (and RDMA reads, as received bytes) are counted when posted, receives when their
 * completion is polled. Registration paths take a mutex; the data path takes none.
 */
#define _GNU_SOURCE
#include "tap.h"

#ifdef TAP_HAVE_VERBS

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <infiniband/verbs.h>

#define MAX_CTX 64
#define MAX_QP 4096
#define VERBS_VERSION "IBVERBS_1.1"

typedef int (*post_send_fn)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
typedef int (*post_recv_fn)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
typedef int (*post_srq_recv_fn)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **);
typedef int (*poll_cq_fn)(struct ibv_cq *, int, struct ibv_wc *);
typedef struct ibv_qp *(*create_qp_ex_fn)(struct ibv_context *, struct ibv_qp_init_attr_ex *);
typedef struct ibv_context *(*open_device_fn)(struct ibv_device *);
typedef int (*close_device_fn)(struct ibv_context *);
typedef struct ibv_qp *(*create_qp_fn)(struct ibv_pd *, struct ibv_qp_init_attr *);
typedef int (*modify_qp_fn)(struct ibv_qp *, struct ibv_qp_attr *, int);

struct ctx_slot {
    _Atomic(struct ibv_context *) ctx;
    post_send_fn post_send;
    post_recv_fn post_recv;
    post_srq_recv_fn post_srq_recv;
    poll_cq_fn poll_cq;
    create_qp_ex_fn create_qp_ex;
};

enum { QP_EMPTY = 0, QP_READY = 1 };

struct qp_slot {
    _Atomic uint32_t state;
    uint32_t qpn;
    _Atomic(struct ibv_context *) ctx; /* NULL once its device is closed: never matches again */
    _Atomic int32_t peer;              /* peer index, -1 until first use in this process */
    struct tap_key key;                /* remote peer after RTR, else "local QP, peer unknown" */
};

static struct ctx_slot ctx_tab[MAX_CTX];
static struct qp_slot qp_tab[MAX_QP];
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static _Atomic(void *) real_open_device;
static _Atomic(void *) real_close_device;
static _Atomic(void *) real_create_qp;
static _Atomic(void *) real_modify_qp;

static struct ctx_slot *find_ctx(struct ibv_context *ctx)
{
    for (int i = 0; i < MAX_CTX; i++)
        if (atomic_load_explicit(&ctx_tab[i].ctx, memory_order_acquire) == ctx)
            return &ctx_tab[i];
    return NULL;
}

static inline uint32_t qp_hash(struct ibv_context *ctx, uint32_t qpn)
{
    uint64_t h = ((uint64_t)(uintptr_t)ctx >> 4) * 0x9E3779B97F4A7C15ull ^ qpn * 0x85EBCA6Bu;
    return (uint32_t)(h ^ (h >> 29)) % MAX_QP;
}

static struct qp_slot *find_qp(struct ibv_context *ctx, uint32_t qpn)
{
    uint32_t start = qp_hash(ctx, qpn);
    for (uint32_t i = 0; i < MAX_QP; i++) {
        struct qp_slot *q = &qp_tab[(start + i) % MAX_QP];
        if (atomic_load_explicit(&q->state, memory_order_acquire) == QP_EMPTY)
            return NULL;
        if (q->qpn == qpn && atomic_load_explicit(&q->ctx, memory_order_relaxed) == ctx)
            return q;
    }
    return NULL;
}

/* Under reg_lock. */
static struct qp_slot *register_qp_locked(struct ibv_context *ctx, uint32_t qpn)
{
    struct qp_slot *q = find_qp(ctx, qpn);
    if (q)
        return q;
    uint32_t start = qp_hash(ctx, qpn);
    for (uint32_t i = 0; i < MAX_QP; i++) {
        q = &qp_tab[(start + i) % MAX_QP];
        if (atomic_load_explicit(&q->state, memory_order_relaxed) != QP_EMPTY)
            continue;
        memset(&q->key, 0, sizeof q->key);
        q->key.kind = TAP_PEER_VERBS;
        q->key.local_qpn = qpn;
        q->qpn = qpn;
        atomic_store_explicit(&q->ctx, ctx, memory_order_relaxed);
        atomic_store_explicit(&q->peer, -1, memory_order_relaxed);
        atomic_store_explicit(&q->state, QP_READY, memory_order_release);
        return q;
    }
    return NULL;
}

static struct qp_slot *register_qp(struct ibv_context *ctx, uint32_t qpn)
{
    pthread_mutex_lock(&reg_lock);
    struct qp_slot *q = register_qp_locked(ctx, qpn);
    pthread_mutex_unlock(&reg_lock);
    return q;
}

/* Peer index of a QP; claims its peer slot on the first use in this process. */
static int qp_peer(struct ibv_context *ctx, uint32_t qpn)
{
    struct qp_slot *q = find_qp(ctx, qpn);
    if (TAP_UNLIKELY(!q) && !(q = register_qp(ctx, qpn)))
        return -1;
    int peer = atomic_load_explicit(&q->peer, memory_order_relaxed);
    if (TAP_UNLIKELY(peer < 0)) {
        peer = tap_peer_claim(&q->key);
        atomic_store_explicit(&q->peer, peer, memory_order_relaxed);
    }
    return peer;
}

static inline void account_or_drop(int peer, int dir, uint64_t n)
{
    if (peer >= 0)
        tap_account(peer, dir, n);
    else
        tap_drop(n);
}

/* Receive work requests the driver accepted: all of them, or those before *bad on failure. */
static inline uint64_t recvs_accepted(struct ibv_recv_wr *wr, int rc, struct ibv_recv_wr **bad)
{
    struct ibv_recv_wr *stop = rc && bad ? *bad : NULL;
    uint64_t posted = 0;
    for (struct ibv_recv_wr *w = wr; w && w != stop; w = w->next)
        posted++;
    return posted;
}

static int tap_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct ctx_slot *s = find_ctx(qp->context);
    if (TAP_UNLIKELY(!s))
        return ENODEV;
    int rc = s->post_send(qp, wr, bad);
    if (!tap_hdr)
        return rc;
    struct ibv_send_wr *stop = rc && bad ? *bad : NULL;
    int peer = qp_peer(qp->context, qp->qp_num);
    for (struct ibv_send_wr *w = wr; w && w != stop; w = w->next) {
        uint64_t n = 0;
        for (int i = 0; i < w->num_sge; i++)
            n += w->sg_list[i].length;
        account_or_drop(peer, w->opcode == IBV_WR_RDMA_READ ? TAP_RX : TAP_TX, n);
    }
    return rc;
}

static int tap_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct ctx_slot *s = find_ctx(qp->context);
    if (TAP_UNLIKELY(!s))
        return ENODEV;
    int rc = s->post_recv(qp, wr, bad);
    if (!tap_hdr)
        return rc;
    uint64_t posted = recvs_accepted(wr, rc, bad);
    int peer = qp_peer(qp->context, qp->qp_num);
    if (peer >= 0)
        atomic_fetch_add_explicit(&tap_peers[peer].recv_posted, posted, memory_order_relaxed);
    return rc;
}

static int tap_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                             struct ibv_recv_wr **bad)
{
    struct ctx_slot *s = find_ctx(srq->context);
    if (TAP_UNLIKELY(!s))
        return ENODEV;
    int rc = s->post_srq_recv(srq, wr, bad);
    if (!tap_hdr)
        return rc;
    uint64_t posted = recvs_accepted(wr, rc, bad);
    atomic_fetch_add_explicit(&tap_hdr->srq_recv_posted, posted, memory_order_relaxed);
    return rc;
}

static int tap_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    struct ctx_slot *s = find_ctx(cq->context);
    if (TAP_UNLIKELY(!s))
        return -1;
    int rc = s->poll_cq(cq, num, wc);
    if (!tap_hdr)
        return rc;
    for (int i = 0; i < rc; i++)
        if (wc[i].status == IBV_WC_SUCCESS && (wc[i].opcode & IBV_WC_RECV))
            account_or_drop(qp_peer(cq->context, wc[i].qp_num), TAP_RX, wc[i].byte_len);
    return rc;
}

static struct ibv_qp *tap_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
    struct ctx_slot *s = find_ctx(ctx);
    if (TAP_UNLIKELY(!s)) {
        errno = ENODEV;
        return NULL;
    }
    struct ibv_qp *qp = s->create_qp_ex(ctx, attr);
    if (qp)
        register_qp(ctx, qp->qp_num);
    return qp;
}

/* Swaps the context's data-path ops for our wrappers, once per context: a context has a slot
 * from here until ibv_close_device, so its ops are never captured twice (capturing our own
 * wrappers as the originals would recurse). */
static void wrap_context(struct ibv_context *ctx)
{
    pthread_mutex_lock(&reg_lock);
    struct ctx_slot *s = find_ctx(ctx);
    for (int i = 0; i < MAX_CTX && !s; i++) {
        if (atomic_load_explicit(&ctx_tab[i].ctx, memory_order_relaxed))
            continue;
        s = &ctx_tab[i];
        struct verbs_context *vctx = verbs_get_ctx_op(ctx, create_qp_ex);
        s->post_send = ctx->ops.post_send;
        s->post_recv = ctx->ops.post_recv;
        s->post_srq_recv = ctx->ops.post_srq_recv;
        s->poll_cq = ctx->ops.poll_cq;
        s->create_qp_ex = vctx ? vctx->create_qp_ex : NULL;
        atomic_store_explicit(&s->ctx, ctx, memory_order_release);
        if (s->post_send)
            ctx->ops.post_send = tap_post_send;
        if (s->post_recv)
            ctx->ops.post_recv = tap_post_recv;
        if (s->post_srq_recv)
            ctx->ops.post_srq_recv = tap_post_srq_recv;
        if (s->poll_cq)
            ctx->ops.poll_cq = tap_poll_cq;
        if (vctx)
            vctx->create_qp_ex = tap_create_qp_ex;
    }
    pthread_mutex_unlock(&reg_lock);
    tap_set_flag(TAP_F_VERBS_SEEN);
}

static void forget_context(struct ibv_context *ctx)
{
    pthread_mutex_lock(&reg_lock);
    struct ctx_slot *s = find_ctx(ctx);
    if (s)
        atomic_store_explicit(&s->ctx, NULL, memory_order_release);
    for (int i = 0; i < MAX_QP; i++)
        if (atomic_load_explicit(&qp_tab[i].ctx, memory_order_relaxed) == ctx)
            atomic_store_explicit(&qp_tab[i].ctx, NULL, memory_order_relaxed);
    pthread_mutex_unlock(&reg_lock);
}

/* The real entry point: the one a dlsym'ed handle gave us, else the next definition. */
static void *real_verbs(_Atomic(void *) *slot, const char *name)
{
    void *f = atomic_load_explicit(slot, memory_order_acquire);
    if (TAP_UNLIKELY(!f)) {
        f = tap_real_dlvsym(RTLD_NEXT, name, VERBS_VERSION);
        if (!f)
            f = tap_next(name);
        void *expect = NULL;
        if (f && !atomic_compare_exchange_strong(slot, &expect, f))
            f = expect;
    }
    return f;
}

TAP_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    open_device_fn f = (open_device_fn)real_verbs(&real_open_device, "ibv_open_device");
    if (!f) {
        errno = ENOSYS;
        return NULL;
    }
    struct ibv_context *ctx = f(device);
    if (ctx)
        wrap_context(ctx);
    return ctx;
}

TAP_EXPORT int ibv_close_device(struct ibv_context *ctx)
{
    close_device_fn f = (close_device_fn)real_verbs(&real_close_device, "ibv_close_device");
    if (!f)
        return ENOSYS;
    forget_context(ctx);
    return f(ctx);
}

TAP_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    create_qp_fn f = (create_qp_fn)real_verbs(&real_create_qp, "ibv_create_qp");
    if (!f) {
        errno = ENOSYS;
        return NULL;
    }
    struct ibv_qp *qp = f(pd, attr);
    if (qp) {
        wrap_context(qp->context);
        register_qp(qp->context, qp->qp_num);
    }
    return qp;
}

TAP_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    modify_qp_fn f = (modify_qp_fn)real_verbs(&real_modify_qp, "ibv_modify_qp");
    if (!f)
        return ENOSYS;
    int rc = f(qp, attr, mask);
    if (rc || !(mask & IBV_QP_STATE) || attr->qp_state != IBV_QPS_RTR)
        return rc;
    struct tap_key key;
    memset(&key, 0, sizeof key);
    key.kind = TAP_PEER_VERBS;
    key.local_qpn = qp->qp_num;
    if (mask & IBV_QP_AV) {
        key.lid = attr->ah_attr.dlid;
        if (attr->ah_attr.is_global)
            memcpy(key.addr, attr->ah_attr.grh.dgid.raw, 16);
    }
    if (mask & IBV_QP_DEST_QPN)
        key.port = attr->dest_qp_num;
    pthread_mutex_lock(&reg_lock);
    struct qp_slot *q = register_qp_locked(qp->context, qp->qp_num);
    if (q) {
        q->key = key;
        atomic_store_explicit(&q->peer, tap_peer_claim(&key), memory_order_relaxed);
    }
    pthread_mutex_unlock(&reg_lock);
    return rc;
}

/* dlsym() of a verbs entry point on a dlopen()ed libibverbs hands out our wrapper. */
void *tap_verbs_hook(const char *name, void *real)
{
    if (!real)
        return NULL;
    void *expect = NULL;
#define HOOK(sym, var)                                                                   \
    if (strcmp(name, #sym) == 0) {                                                       \
        atomic_compare_exchange_strong(&var, &expect, real);                            \
        return (void *)sym;                                                              \
    }
    HOOK(ibv_open_device, real_open_device)
    HOOK(ibv_close_device, real_close_device)
    HOOK(ibv_create_qp, real_create_qp)
    HOOK(ibv_modify_qp, real_modify_qp)
#undef HOOK
    return real;
}

/* Peer slots belong to the parent's file: forget them, keep what each QP is connected to. */
void tap_verbs_after_fork(void)
{
    pthread_mutex_init(&reg_lock, NULL);
    for (int i = 0; i < MAX_QP; i++)
        atomic_store_explicit(&qp_tab[i].peer, -1, memory_order_relaxed);
}

#else /* !TAP_HAVE_VERBS: socket tap only; the header flag says so. */

void *tap_verbs_hook(const char *name, void *real)
{
    (void)name;
    return real;
}

void tap_verbs_after_fork(void)
{
}

#endif
