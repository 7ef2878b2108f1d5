/* An RDMA app compiled against the real <infiniband/verbs.h>: opens the first device, creates
 * two RC QPs (ibv_create_qp, and ibv_create_qp_ex through the context), connects them to
 * remote peers (RTR: DLID, GID, destination QPN), posts sends, an RDMA read, a failing chain
 * and receives, and polls the CQ dry. Built linked to libibverbs, or with -DUSE_DLOPEN taking
 * every entry point from dlopen("libibverbs.so.1", RTLD_LOCAL) via dlsym/dlvsym. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef USE_DLOPEN
#include <dlfcn.h>
#define V(name) p_##name
static struct ibv_device **(*p_ibv_get_device_list)(int *);
static void (*p_ibv_free_device_list)(struct ibv_device **);
static struct ibv_context *(*p_ibv_open_device)(struct ibv_device *);
static int (*p_ibv_close_device)(struct ibv_context *);
static struct ibv_pd *(*p_ibv_alloc_pd)(struct ibv_context *);
static int (*p_ibv_dealloc_pd)(struct ibv_pd *);
static struct ibv_cq *(*p_ibv_create_cq)(struct ibv_context *, int, void *,
                                         struct ibv_comp_channel *, int);
static int (*p_ibv_destroy_cq)(struct ibv_cq *);
static struct ibv_qp *(*p_ibv_create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
static int (*p_ibv_modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
static int (*p_ibv_destroy_qp)(struct ibv_qp *);

static void load(void)
{
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(1);
    }
#define SYM(name) *(void **)&p_##name = dlsym(h, #name)
    SYM(ibv_get_device_list);
    SYM(ibv_free_device_list);
    SYM(ibv_open_device);
    SYM(ibv_close_device);
    SYM(ibv_alloc_pd);
    SYM(ibv_dealloc_pd);
    SYM(ibv_create_cq);
    SYM(ibv_destroy_cq);
    SYM(ibv_create_qp);
    SYM(ibv_destroy_qp);
    *(void **)&p_ibv_modify_qp = dlvsym(h, "ibv_modify_qp", "IBVERBS_1.1");
    if (!p_ibv_get_device_list || !p_ibv_open_device || !p_ibv_modify_qp) {
        fprintf(stderr, "missing verbs symbols\n");
        exit(1);
    }
}
#else
#define V(name) name
static void load(void)
{
}
#endif

static char buf[1 << 20];

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "%s failed\n", what);
        exit(1);
    }
}

static void connect_qp(struct ibv_qp *qp, uint16_t dlid, const uint8_t *gid, uint32_t dqpn)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    check(V(ibv_modify_qp)(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                       IBV_QP_ACCESS_FLAGS) == 0, "INIT");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = dqpn;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = 1;
    if (gid) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
    }
    check(V(ibv_modify_qp)(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                       IBV_QP_MIN_RNR_TIMER) == 0, "RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    check(V(ibv_modify_qp)(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "RTS");
}

/* Posts `count` WRs of `sges` x `len` bytes as one chain; returns ibv_post_send's result. */
static int post_sends(struct ibv_qp *qp, int count, int sges, uint32_t len,
                      enum ibv_wr_opcode opcode, uint64_t bad_id)
{
    struct ibv_sge sge[8][2];
    struct ibv_send_wr wr[8], *bad = NULL;
    memset(wr, 0, sizeof wr);
    for (int i = 0; i < count; i++) {
        for (int s = 0; s < sges; s++)
            sge[i][s] = (struct ibv_sge){.addr = (uintptr_t)buf, .length = len, .lkey = 1};
        wr[i].wr_id = (uint64_t)(i == 1 ? bad_id : (uint64_t)i + 1);
        wr[i].sg_list = sge[i];
        wr[i].num_sge = sges;
        wr[i].opcode = opcode;
        wr[i].send_flags = IBV_SEND_SIGNALED;
        wr[i].next = i + 1 < count ? &wr[i + 1] : NULL;
    }
    return ibv_post_send(qp, wr, &bad);
}

static void post_recvs(struct ibv_qp *qp, int count, uint32_t len)
{
    struct ibv_sge sge[8];
    struct ibv_recv_wr wr[8], *bad = NULL;
    memset(wr, 0, sizeof wr);
    for (int i = 0; i < count; i++) {
        sge[i] = (struct ibv_sge){.addr = (uintptr_t)buf, .length = len, .lkey = 1};
        wr[i] = (struct ibv_recv_wr){.wr_id = 100 + (uint64_t)i, .sg_list = &sge[i],
                                     .num_sge = 1, .next = i + 1 < count ? &wr[i + 1] : NULL};
    }
    check(ibv_post_recv(qp, wr, &bad) == 0, "post_recv");
}

int main(void)
{
    load();
    int n = 0;
    struct ibv_device **devs = V(ibv_get_device_list)(&n);
    check(devs && n > 0, "no RDMA device: get_device_list");
    printf("device %s\n", devs[0]->name);
    struct ibv_context *ctx = V(ibv_open_device)(devs[0]);
    check(ctx != NULL, "open_device");
    struct ibv_pd *pd = V(ibv_alloc_pd)(ctx);
    struct ibv_cq *cq = V(ibv_create_cq)(ctx, 256, NULL, NULL, 0);
    check(pd && cq, "pd/cq");
    struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 64, .max_recv_wr = 64,
                                          .max_send_sge = 2, .max_recv_sge = 1}};
    struct ibv_qp *qp1 = V(ibv_create_qp)(pd, &ia);
#ifdef USE_DLOPEN
    struct ibv_qp *qp2 = V(ibv_create_qp)(pd, &ia);
#else
    struct ibv_qp_init_attr_ex iax = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                      .cap = ia.cap, .pd = pd,
                                      .comp_mask = IBV_QP_INIT_ATTR_PD |
                                                   IBV_QP_INIT_ATTR_CREATE_FLAGS};
    struct ibv_qp *qp2 = ibv_create_qp_ex(ctx, &iax);
#endif
    check(qp1 && qp2, "create_qp");
    static const uint8_t gid[16] = {0xfe, 0x80, [14] = 0x12, [15] = 0x34};
    connect_qp(qp1, 7, NULL, 0x2001);
    connect_qp(qp2, 9, gid, 0x3002);

    check(post_sends(qp1, 4, 1, 64, IBV_WR_SEND, 2) == 0, "4 x 64 B");
    check(post_sends(qp1, 2, 2, 2048, IBV_WR_RDMA_WRITE, 2) == 0, "2 x 4 KiB");
    check(post_sends(qp1, 1, 1, 1 << 20, IBV_WR_SEND_WITH_IMM, 0) == 0, "1 MiB");
    check(post_sends(qp1, 1, 1, 8192, IBV_WR_RDMA_READ, 0) == 0, "read 8 KiB");
    check(post_sends(qp1, 3, 1, 100, IBV_WR_SEND, 0xBAD) == EINVAL, "failing chain");
    post_recvs(qp1, 5, 1024);
    check(post_sends(qp2, 3, 1, 10, IBV_WR_SEND, 2) == 0, "3 x 10 B");
    post_recvs(qp2, 2, 70000);

    struct ibv_wc wc[16];
    int got, total = 0;
    while ((got = ibv_poll_cq(cq, 16, wc)) > 0)
        total += got;
    printf("completions %d\n", total);

    V(ibv_destroy_qp)(qp1);
    V(ibv_destroy_qp)(qp2);
    V(ibv_destroy_cq)(cq);
    V(ibv_dealloc_pd)(pd);
    V(ibv_close_device)(ctx);
    V(ibv_free_device_list)(devs);
    return 0;
}
