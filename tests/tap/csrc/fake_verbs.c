/* A fake libibverbs.so.1 for testing the verbs tap without RDMA hardware: one device whose
 * context ops succeed. Every posted send and receive completes; poll_cq hands back the
 * completions in order (a receive completes with the full length of its buffer). A send WR
 * with wr_id 0xBAD fails the post at that WR, as a provider would. Built by the tests with
 * SONAME libibverbs.so.1 and the IBVERBS_1.1 version node (fake_verbs.map). */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#define MAXC 4096
static struct ibv_wc cq_ring[MAXC];
static unsigned head, tail;
static uint32_t next_qpn = 0x101;

static void complete(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len)
{
    struct ibv_wc *wc = &cq_ring[tail++ % MAXC];
    memset(wc, 0, sizeof *wc);
    wc->wr_id = wr_id;
    wc->status = IBV_WC_SUCCESS;
    wc->opcode = op;
    wc->byte_len = len;
    wc->qp_num = qp->qp_num;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    for (; wr; wr = wr->next) {
        if (wr->wr_id == 0xBAD) {
            *bad = wr;
            return EINVAL;
        }
        uint32_t len = 0;
        for (int i = 0; i < wr->num_sge; i++)
            len += wr->sg_list[i].length;
        complete(qp, wr->wr_id, wr->opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_SEND,
                 len);
    }
    return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    (void)bad;
    for (; wr; wr = wr->next)
        complete(qp, wr->wr_id, IBV_WC_RECV, wr->num_sge ? wr->sg_list[0].length : 0);
    return 0;
}

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    (void)cq;
    int n = 0;
    while (n < num && head != tail)
        wc[n++] = cq_ring[head++ % MAXC];
    return n;
}

static struct ibv_qp *new_qp(struct ibv_context *ctx, struct ibv_pd *pd)
{
    struct ibv_qp *qp = calloc(1, sizeof *qp);
    qp->context = ctx;
    qp->pd = pd;
    qp->qp_num = next_qpn++;
    qp->qp_type = IBV_QPT_RC;
    return qp;
}

static struct ibv_qp *fake_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
    return new_qp(ctx, attr->pd);
}

static struct ibv_device fake_device = {.name = "fake0", .dev_name = "fake0"};

struct ibv_device **ibv_get_device_list(int *num)
{
    struct ibv_device **list = calloc(2, sizeof *list);
    list[0] = &fake_device;
    if (num)
        *num = 1;
    return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    struct verbs_context *vctx = calloc(1, sizeof *vctx);
    vctx->sz = sizeof *vctx;
    vctx->create_qp_ex = fake_create_qp_ex;
    struct ibv_context *ctx = &vctx->context;
    ctx->device = device;
    ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
    ctx->ops.post_send = fake_post_send;
    ctx->ops.post_recv = fake_post_recv;
    ctx->ops.poll_cq = fake_poll_cq;
    return ctx;
}

int ibv_close_device(struct ibv_context *ctx)
{
    free(verbs_get_ctx(ctx));
    return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
    struct ibv_pd *pd = calloc(1, sizeof *pd);
    pd->context = ctx;
    return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector)
{
    (void)channel;
    (void)comp_vector;
    struct ibv_cq *cq = calloc(1, sizeof *cq);
    cq->context = ctx;
    cq->cq_context = cq_context;
    cq->cqe = cqe;
    return cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
    free(cq);
    return 0;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    (void)attr;
    return new_qp(pd->context, pd);
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    if (mask & IBV_QP_STATE)
        qp->state = attr->qp_state;
    return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
    free(qp);
    return 0;
}
