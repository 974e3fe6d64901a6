/*
 * transport_iface.c - the transport interface (src/transport/transport.h) over real ranks: the
 * communicator's message transport says what it offers, moves a message and finds a probed one
 * through its table of operations, and a wait whose deadline passes returns an error naming the
 * peer on both ranks, whose failure records blame that peer. With a shared-memory group (run
 * without CHORUS_SHM=0): the group offers a segment and no messages, its wait gives up with
 * the message transport's failure instead of waiting out its own deadline, and its failure
 * record, broken through the interface on one rank, names the rank blamed on the other.
 *
 *   chorus-run -np 2 transport_iface
 */
#include <string.h>
#include <unistd.h>

#include "coll/comm.h"
#include "harness.h"
#include "transport/shm/shm.h"

static chorus_comm *comm;
static int rank_;

static chorus_wire_hdr p2p_hdr(int tag, size_t count)
{
    return (chorus_wire_hdr){.type = CHORUS_MSG_P2P,
                             .comm_id = comm->id,
                             .tag = tag,
                             .coll = (uint32_t)CHORUS_INT32 << 8,
                             .count = count,
                             .len = count * sizeof(int32_t)};
}

static void caps(void)
{
    const chorus_transport *t = &comm->net;
    ASSERT(chorus__tp_has(t, CHORUS_TPCAP_MSG | CHORUS_TPCAP_EXPENDABLE));
    ASSERT(!chorus__tp_has(t, CHORUS_TPCAP_SEGMENT));
    ASSERT(!strcmp(t->ops->name, "tcp"));
    ASSERT_EQ(chorus__tp_error(t, NULL, NULL), CHORUS_OK);
    if (comm->shm) {
        chorus_transport s = chorus__shm_transport(comm->shm);
        ASSERT(!strcmp(s.ops->name, "shm"));
        ASSERT(chorus__tp_has(&s, CHORUS_TPCAP_SEGMENT));
        ASSERT(!chorus__tp_has(&s, CHORUS_TPCAP_MSG));
        ASSERT_EQ(chorus__tp_has(&s, CHORUS_TPCAP_ZERO_COPY), comm->shm->cma != 0);
        ASSERT_EQ(chorus__tp_error(&s, NULL, NULL), CHORUS_OK);
    }
}

/* Each rank sends the other four numbers and receives its four; then rank 1 sends one more
 * message that rank 0 finds by probing before it receives it. */
static void messages(void)
{
    const chorus_transport *t = &comm->net;
    int peer = comm->world[1 - rank_];
    int32_t out[4], in[4] = {0};
    for (int i = 0; i < 4; i++) out[i] = 100 * rank_ + i;
    chorus_wire_hdr h = p2p_hdr(5, 4);
    chorus_req rq[2];
    memset(rq, 0, sizeof(rq));
    chorus_req *ps[2] = {&rq[0], &rq[1]};
    chorus_errbuf e = {{0}};
    chorus__tp_irecv(t, &rq[0], peer, &h, in);
    chorus__tp_isend(t, &rq[1], peer, &h, out);
    ASSERT_OK(chorus__tp_wait(t, ps, 2, 2, chorus__timeout_s(), &e));
    ASSERT_EQ(rq[0].res, CHORUS_OK);
    ASSERT_EQ(rq[1].res, CHORUS_OK);
    ASSERT_EQ(chorus__tp_test(t, &rq[0], &e), 1);
    for (int i = 0; i < 4; i++) ASSERT_EQ(in[i], 100 * (1 - rank_) + i);

    chorus_wire_hdr h6 = p2p_hdr(6, 1);
    int32_t one = 42, got = 0;
    chorus_req r;
    memset(&r, 0, sizeof(r));
    chorus_req *rp = &r;
    if (rank_ == 1) {
        chorus__tp_isend(t, &r, peer, &h6, &one);
    } else {
        int found = 0, src = -1;
        chorus_wire_hdr ph;
        ASSERT_OK(chorus__tp_probe(t, comm->id, CHORUS__NET_ANY, 6, chorus__timeout_s(), &found,
                                   &ph, &src, &e));
        ASSERT_EQ(found, 1);
        ASSERT_EQ(src, peer);
        ASSERT_EQ(ph.count, 1);
        chorus__tp_irecv(t, &r, peer, &h6, &got);
    }
    ASSERT_OK(chorus__tp_wait(t, &rp, 1, 1, chorus__timeout_s(), &e));
    if (rank_ == 0) ASSERT_EQ(got, 42);
}

/* Rank 0 waits for a message rank 1 never sends, with a deadline of 1 s without progress:
 * the wait fails naming rank 1 and the transport is broken blaming it, on rank 0 and, told by
 * rank 0, on rank 1 (which waits for a message of rank 0's that never comes either, for the
 * whole CHORUS_TIMEOUT_S, longer than rank 0's deadline). */
static void deadline(void)
{
    const chorus_transport *t = &comm->net;
    int peer = comm->world[1 - rank_];
    int32_t in[2];
    chorus_wire_hdr h = p2p_hdr(rank_ == 0 ? 7 : 8, 2);
    chorus_req r;
    memset(&r, 0, sizeof(r));
    chorus_req *rp = &r;
    chorus_errbuf e = {{0}};
    chorus__tp_irecv(t, &r, peer, &h, in);
    chorus_result res = chorus__tp_wait(t, &rp, 1, 1, rank_ == 0 ? 1.0 : chorus__timeout_s(), &e);
    printf("rank %d: wait returned %s: %s\n", rank_, chorus_strerror(res), e.msg);
    ASSERT_EQ(res, CHORUS_ERR_TIMEOUT);
    ASSERT_STR_CONTAINS(e.msg, "rank 0 timed out");
    ASSERT_STR_CONTAINS(e.msg, "from rank 1");
    int culprit = -2;
    chorus_errbuf rec = {{0}};
    ASSERT_EQ(chorus__tp_error(t, &culprit, &rec), CHORUS_ERR_TIMEOUT);
    ASSERT_EQ(culprit, comm->world[1]);
    ASSERT(!strcmp(rec.msg, e.msg));
    ASSERT_EQ(r.done, 0); /* never completes: the transport broke */
}

/* The shared-memory group over the broken message transport: a wait for a flag that will
 * never be posted ends with the message transport's failure; rank 0 then breaks the group
 * through the interface blaming rank 1, and rank 1 reads that from the group's record. */
static void shm_failure(void)
{
    chorus_shm *s = comm->shm;
    chorus_transport st = chorus__shm_transport(s);
    chorus_errbuf e = {{0}};
    int peer = 1 - rank_;
    s->what = "a test wait";
    uint64_t never =
        (uint64_t)__atomic_load_n(&s->ctrl[peer].ch[CHORUS_SHM_IN].seq, __ATOMIC_ACQUIRE) + 1000;
    chorus_result res = chorus__shm_wait(s, peer, CHORUS_SHM_IN, never, &e);
    printf("rank %d: shared-memory wait returned %s: %s\n", rank_, chorus_strerror(res), e.msg);
    if (rank_ == 0) {
        /* the message transport's failure, read through its record */
        ASSERT_EQ(res, CHORUS_ERR_TIMEOUT);
        ASSERT_STR_CONTAINS(e.msg, "rank 0 timed out");
        chorus__tp_abort(&st, comm->world[1], CHORUS_ERR_PEER_LOST, "rank 1 blamed by the test");
    } else {
        /* the same failure, or rank 0's verdict on the group if that came first */
        ASSERT(res == CHORUS_ERR_TIMEOUT || res == CHORUS_ERR_PEER_LOST);
        double until = chorus__deadline();
        while (chorus__tp_error(&st, NULL, NULL) == CHORUS_OK && chorus__now() < until)
            usleep(1000);
    }
    int culprit = -2;
    ASSERT_EQ(chorus__tp_error(&st, &culprit, &e), CHORUS_ERR_PEER_LOST);
    ASSERT_EQ(culprit, comm->world[1]);
    ASSERT_STR_CONTAINS(e.msg, "rank 1 blamed by the test");
}

int main(void)
{
    ASSERT_OK(chorus_init(&comm));
    rank_ = chorus_rank(comm);
    test_rank = rank_;
    ASSERT_EQ(chorus_size(comm), 2);
    TEST_RUN(caps);
    TEST_RUN(messages);
    TEST_RUN(deadline);
    if (comm->shm) TEST_RUN(shm_failure);
    ASSERT_EQ(chorus__comm_culprit(comm), comm->world[1]);
    chorus_finalize(comm); /* broken: its result says so */
    return 0;
}
