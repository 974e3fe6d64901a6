/*
 * ops.c - the TCP net as a transport (transport.h): each operation of the table is the net's
 * function of the same job, so the collective layer reaches TCP through one indirect call per
 * message or wait.
 */
#include "transport/tcp/net.h"

static void op_isend(void *n, chorus_req *r, int peer, const chorus_wire_hdr *h, const void *buf)
{
    chorus__net_isend(n, r, peer, h, buf);
}

static void op_irecv(void *n, chorus_req *r, int peer, const chorus_wire_hdr *expect, void *buf)
{
    chorus__net_irecv(n, r, peer, expect, buf);
}

static chorus_result op_wait(void *n, chorus_req *const *reqs, int nreq, int need, double timeout_s,
                             chorus_errbuf *e)
{
    return chorus__net_wait_some(n, reqs, nreq, need, timeout_s, e);
}

static int op_test(void *n, chorus_req *r, chorus_errbuf *e)
{
    return chorus__net_test(n, r, e);
}

static chorus_result op_probe(void *n, uint64_t comm_id, int peer, int tag, double timeout_s,
                              int *found, chorus_wire_hdr *h, int *src, chorus_errbuf *e)
{
    return chorus__net_probe(n, comm_id, peer, tag, timeout_s, found, h, src, e);
}

static void op_abort(void *n, int culprit, chorus_result r, const char *why)
{
    chorus__net_abort(n, culprit, r, why);
}

static chorus_result op_error(void *n, int *culprit, chorus_errbuf *e)
{
    chorus_result r = chorus__net_error(n, e);
    if (culprit) *culprit = r == CHORUS_OK ? -1 : chorus__net_failed_rank(n);
    return r;
}

static void op_set_expendable(void *n, int p)
{
    chorus__net_set_expendable(n, p);
}

static void op_loss_detail(void *n, chorus_errbuf *e)
{
    chorus__net_loss_detail(n, e);
}

static void op_retain(void *n)
{
    chorus__net_retain(n);
}

static void op_release(void *n)
{
    chorus__net_release(n);
}

static const chorus_transport_ops tcp_ops = {
    .name = "tcp",
    .isend = op_isend,
    .irecv = op_irecv,
    .wait = op_wait,
    .test = op_test,
    .probe = op_probe,
    .abort = op_abort,
    .error = op_error,
    .set_expendable = op_set_expendable,
    .loss_detail = op_loss_detail,
    .retain = op_retain,
    .release = op_release,
};

chorus_transport chorus__net_transport(chorus_net *n)
{
    if (!n) return (chorus_transport){0};
    return (chorus_transport){
        .ops = &tcp_ops, .self = n, .caps = CHORUS_TPCAP_MSG | CHORUS_TPCAP_EXPENDABLE};
}
