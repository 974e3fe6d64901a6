/* p2p_nb.c - non-blocking point-to-point over real ranks: receives from any source with any
 * tag, probe and iprobe, thousands of outstanding requests completed by tests in a shuffled
 * order, the order of messages, requests interleaved with collectives, count/dtype mismatches
 * and invalid arguments (with the messages a user sees), and a peer dying with requests posted.
 * Usage: chorus-run -np N p2p_nb [case...]   (no case: every case but death)
 *        chorus-run -np N p2p_nb death VICTIM (survivors exit 3 after checking their requests)
 *        CHORUS_TIMEOUT_S=2 chorus-run -np N p2p_nb timeout|probe_timeout
 *        chorus-run -np N p2p_nb garbage_len|garbage_dtype
 *        CHORUS_TCP_LANES=4 chorus-run -np N p2p_nb bulk */
#include <signal.h>
#include <unistd.h>

#include "base/base.h"
#include "coll/comm.h"
#include "harness.h"
#include "transport/tcp/net.h"

static chorus_comm *comm;
static int rank_, size_;

/* The value of element i of the message with tag t from rank src to rank dst. */
static int32_t val(int src, int dst, int t, size_t i)
{
    return (int32_t)((src * 1000003 + dst * 10007 + t * 101 + (int)i) & 0x7fffffff);
}

static void fill(int32_t *b, size_t n, int src, int dst, int t)
{
    for (size_t i = 0; i < n; i++) b[i] = val(src, dst, t, i);
}

static void check_data(const int32_t *b, size_t n, int src, int dst, int t)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != val(src, dst, t, i))
            test_fail(__FILE__, __LINE__,
                      "message with tag %d from rank %d: element %zu is %d, expected %d", t, src, i,
                      b[i], val(src, dst, t, i));
}

/* Waits for n receives from prev (message i: sizes[i] int32 with tag i's contents, in in[i])
 * and n sends, checks every message, and frees the buffers. */
static void wait_checked(int n, chorus_request **rr, chorus_request **sr, int32_t **in,
                         int32_t **out, const size_t *sizes, int prev)
{
    chorus_status *st = malloc(sizeof(*st) * (size_t)n);
    ASSERT(st);
    ASSERT_OK(chorus_waitall(n, rr, st));
    ASSERT_OK(chorus_waitall(n, sr, NULL));
    for (int i = 0; i < n; i++) {
        ASSERT_EQ(st[i].count, sizes[i]);
        check_data(in[i], sizes[i], prev, rank_, i);
        free(in[i]);
        free(out[i]);
    }
    free(st);
}

/* Completes every request by chorus_test, visiting them in a shuffled order, within 60 s. */
static void test_all(chorus_request **reqs, chorus_status *st, int n, uint64_t *seed)
{
    int *order = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(test_rand(seed) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int left = n;
    double until = chorus__now() + 60;
    while (left > 0) {
        for (int k = 0; k < n; k++) {
            int i = order[k], done = 0;
            if (!reqs[i]) continue;
            ASSERT_OK(chorus_test(reqs[i], &done, &st[i]));
            if (done) {
                reqs[i] = NULL;
                left--;
            }
        }
        if (chorus__now() > until)
            test_fail(__FILE__, __LINE__, "%d of %d requests still pending after 60 s", left, n);
    }
    free(order);
}

/* Every rank sends K messages to rank 0, of varied lengths and tags; rank 0 receives them all
 * with CHORUS_ANY_SOURCE/CHORUS_ANY_TAG into buffers larger than any message. */
static void case_anysource(void)
{
    enum { K = 20, CAP = 64 };
    if (rank_ != 0) {
        int32_t buf[CAP];
        for (int k = 0; k < K; k++) {
            int tag = rank_ * 100 + k;
            size_t n = 1 + (size_t)(tag % 37);
            fill(buf, n, rank_, 0, tag);
            ASSERT_OK(chorus_send(comm, buf, n, CHORUS_INT32, 0, tag));
        }
    } else {
        int n = (size_ - 1) * K;
        int32_t *bufs = malloc(sizeof(int32_t) * CAP * (size_t)n);
        chorus_request **reqs = malloc(sizeof(*reqs) * (size_t)n);
        chorus_status *st = malloc(sizeof(*st) * (size_t)n);
        for (int i = 0; i < n; i++)
            ASSERT_OK(chorus_irecv(comm, bufs + (size_t)i * CAP, CAP, CHORUS_INT32,
                                   CHORUS_ANY_SOURCE, CHORUS_ANY_TAG, &reqs[i]));
        ASSERT_OK(chorus_waitall(n, reqs, st));
        int *seen = calloc((size_t)size_ * K, sizeof(int));
        int *last = malloc(sizeof(int) * (size_t)size_);
        for (int r = 0; r < size_; r++) last[r] = -1;
        for (int i = 0; i < n; i++) {
            ASSERT(reqs[i] == NULL);
            ASSERT_OK(st[i].result);
            int src = st[i].source, tag = st[i].tag;
            ASSERT(src >= 1 && src < size_);
            ASSERT(tag >= src * 100 && tag < src * 100 + K);
            ASSERT_EQ(st[i].count, 1 + tag % 37);
            ASSERT_EQ(st[i].dtype, CHORUS_INT32);
            check_data(bufs + (size_t)i * CAP, st[i].count, src, 0, tag);
            ASSERT_EQ(seen[src * K + tag % 100]++, 0);
            /* receives are matched in the order posted, so one sender's messages in order */
            ASSERT(tag > last[src]);
            last[src] = tag;
        }
        printf("anysource: rank 0 received %d messages from %d ranks, statuses checked\n", n,
               size_ - 1);
        free(seen);
        free(last);
        free(bufs);
        free(reqs);
        free(st);
    }
    ASSERT_OK(chorus_barrier(comm));
}

/* Rank 0 learns the size of each message by probing, then receives exactly that. iprobe sees
 * nothing before the message is sent and sees it after. */
static void case_probe(void)
{
    chorus_status st;
    int flag = 1;
    if (rank_ == 0) {
        ASSERT_OK(chorus_iprobe(comm, CHORUS_ANY_SOURCE, 999, &flag, &st));
        ASSERT_EQ(flag, 0);
    }
    ASSERT_OK(chorus_barrier(comm));
    if (rank_ != 0) {
        size_t n = 1000 + (size_t)rank_ * 3001; /* above and below the staging threshold */
        double *x = malloc(sizeof(double) * n);
        for (size_t i = 0; i < n; i++) x[i] = rank_ + (double)i / 8;
        ASSERT_OK(chorus_send(comm, x, n, CHORUS_FLOAT64, 0, 40 + rank_));
        free(x);
    } else {
        for (int k = 1; k < size_; k++) {
            ASSERT_OK(chorus_probe(comm, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG, &st));
            ASSERT_EQ(st.tag, 40 + st.source);
            ASSERT_EQ(st.dtype, CHORUS_FLOAT64);
            ASSERT_EQ(st.count, 1000 + (size_t)st.source * 3001);
            double *x = malloc(sizeof(double) * st.count);
            ASSERT_OK(chorus_recv(comm, x, st.count, st.dtype, st.source, st.tag));
            for (size_t i = 0; i < st.count; i++) ASSERT(x[i] == st.source + (double)i / 8);
            free(x);
        }
    }
    ASSERT_OK(chorus_barrier(comm));
    if (rank_ == 1) ASSERT_OK(chorus_send(comm, &rank_, 1, CHORUS_INT32, 0, 999));
    if (rank_ == 0) {
        double until = chorus__now() + 20;
        do {
            ASSERT_OK(chorus_iprobe(comm, CHORUS_ANY_SOURCE, 999, &flag, &st));
            ASSERT(chorus__now() < until);
        } while (!flag);
        ASSERT_EQ(st.source, 1);
        ASSERT_EQ(st.count, 1);
        int32_t got = 0;
        ASSERT_OK(chorus_recv(comm, &got, 1, CHORUS_INT32, 1, 999));
        ASSERT_EQ(got, 1);
        /* the message is gone once received */
        ASSERT_OK(chorus_iprobe(comm, 1, 999, &flag, &st));
        ASSERT_EQ(flag, 0);
        printf("probe: %d messages sized by probe, iprobe before/after checked\n", size_ - 1);
    }
    ASSERT_OK(chorus_barrier(comm));
}

/* Every rank posts about 2000 sends and 2000 receives (spread over its peers, tags reused, a
 * few large messages) before completing any, then completes them by chorus_test in a shuffled
 * order. */
static void case_many(void)
{
    int per = 2000 / (size_ - 1); /* messages to each peer and from each peer */
    int n = 2 * per * (size_ - 1);
    chorus_request **reqs = malloc(sizeof(*reqs) * (size_t)n);
    chorus_status *st = malloc(sizeof(*st) * (size_t)n);
    int32_t **bufs = malloc(sizeof(*bufs) * (size_t)n);
    size_t *cnt = malloc(sizeof(size_t) * (size_t)n);
    int *peer = malloc(sizeof(int) * (size_t)n), *tagof = malloc(sizeof(int) * (size_t)n);
    int k = 0;
    for (int m = 0; m < per; m++)
        for (int d = 1; d < size_; d++) {
            int to = (rank_ + d) % size_, from = (rank_ - d + size_) % size_;
            int tag = m % 17;
            size_t c = m % 250 == 7 ? 300000 : 1 + (size_t)(m % 40); /* some are 1.2 MB */
            /* a receive, then a send, alternating */
            bufs[k] = malloc(sizeof(int32_t) * c);
            cnt[k] = c;
            peer[k] = from;
            tagof[k] = tag;
            ASSERT_OK(chorus_irecv(comm, bufs[k], c, CHORUS_INT32, from, tag, &reqs[k]));
            k++;
            bufs[k] = malloc(sizeof(int32_t) * c);
            fill(bufs[k], c, rank_, to, m); /* m: which message of this tag it is */
            cnt[k] = c;
            peer[k] = to;
            tagof[k] = tag;
            ASSERT_OK(chorus_isend(comm, bufs[k], c, CHORUS_INT32, to, tag, &reqs[k]));
            k++;
        }
    ASSERT_EQ(k, n);
    uint64_t seed = 0x5eed + (uint64_t)rank_;
    test_all(reqs, st, n, &seed);
    for (int i = 0; i < n; i += 2) {
        /* the receives of one peer and tag take its sends of that tag in order: receive i
         * gets message m of its peer */
        int m = i / 2 / (size_ - 1);
        ASSERT_OK(st[i].result);
        ASSERT_EQ(st[i].source, peer[i]);
        ASSERT_EQ(st[i].tag, tagof[i]);
        ASSERT_EQ(st[i].count, cnt[i]);
        check_data(bufs[i], cnt[i], peer[i], rank_, m);
        ASSERT_OK(st[i + 1].result);
        ASSERT_EQ(st[i + 1].count, cnt[i + 1]);
    }
    for (int i = 0; i < n; i++) free(bufs[i]);
    if (rank_ == 0)
        printf("many: %d requests per rank outstanding at once, completed by shuffled tests\n", n);
    free(bufs);
    free(cnt);
    free(peer);
    free(tagof);
    free(reqs);
    free(st);
    ASSERT_OK(chorus_barrier(comm));
}

/* Messages from one sender with one tag arrive in the order sent, whether the receive was
 * posted before the message arrived or after, and whatever their sizes. */
static void case_order(void)
{
    enum { N = 300 };
    int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
    size_t sizes[N];
    for (int i = 0; i < N; i++) sizes[i] = i % 50 == 3 ? 40000 : 2 + (size_t)(i % 9);
    int32_t *in[N], *out[N];
    chorus_request *rr[N], *sr[N];
    /* half the receives posted first, the others after every send */
    for (int i = 0; i < N / 2; i++) {
        in[i] = malloc(sizeof(int32_t) * sizes[i]);
        ASSERT_OK(chorus_irecv(comm, in[i], sizes[i], CHORUS_INT32, prev, 5, &rr[i]));
    }
    for (int i = 0; i < N; i++) {
        out[i] = malloc(sizeof(int32_t) * sizes[i]);
        fill(out[i], sizes[i], rank_, next, i);
        ASSERT_OK(chorus_isend(comm, out[i], sizes[i], CHORUS_INT32, next, 5, &sr[i]));
    }
    ASSERT_OK(chorus_barrier(comm)); /* the rest has arrived, or is arriving, unexpected */
    for (int i = N / 2; i < N; i++) {
        in[i] = malloc(sizeof(int32_t) * sizes[i]);
        ASSERT_OK(chorus_irecv(comm, in[i], sizes[i], CHORUS_INT32, prev, 5, &rr[i]));
    }
    wait_checked(N, rr, sr, in, out, sizes, prev);
    if (rank_ == 0) printf("order: %d messages of one tag received in the order sent\n", N);
    ASSERT_OK(chorus_barrier(comm));
}

/* Requests stay pending across collectives on the same communicator, and are completed by
 * chorus_waitany. */
static void case_mixed(void)
{
    enum { N = 8 };
    int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
    int32_t in[N][16], out[N][16];
    chorus_request *reqs[2 * N];
    for (int i = 0; i < N; i++)
        ASSERT_OK(chorus_irecv(comm, in[i], 16, CHORUS_INT32, prev, 100 + i, &reqs[i]));
    float x[1000];
    for (int it = 0; it < 3; it++) {
        for (int i = 0; i < 1000; i++) x[i] = (float)(rank_ + i);
        ASSERT_OK(chorus_allreduce(comm, x, x, 1000, CHORUS_FLOAT32, CHORUS_SUM));
        ASSERT(x[10] == (float)(size_ * (size_ - 1) / 2 + 10 * size_));
    }
    for (int i = N - 1; i >= 0; i--) { /* sent in the reverse order of the receives */
        fill(out[i], 16, rank_, next, 100 + i);
        ASSERT_OK(chorus_isend(comm, out[i], 16, CHORUS_INT32, next, 100 + i, &reqs[N + i]));
    }
    ASSERT_OK(chorus_barrier(comm));
    int got = 0;
    for (;;) {
        int idx;
        chorus_status st;
        ASSERT_OK(chorus_waitany(2 * N, reqs, &idx, &st));
        if (idx < 0) break;
        ASSERT(reqs[idx] == NULL);
        if (idx < N) {
            ASSERT_EQ(st.source, prev);
            ASSERT_EQ(st.tag, 100 + idx);
            check_data(in[idx], 16, prev, rank_, 100 + idx);
        }
        got++;
    }
    ASSERT_EQ(got, 2 * N);
    if (rank_ == 0) printf("mixed: requests pending across allreduce and barrier, waitany\n");
    ASSERT_OK(chorus_barrier(comm));
}

static void expect_mismatch(chorus_result r, const char *what, const char *n1, const char *n2)
{
    if (r != CHORUS_ERR_MISMATCH)
        test_fail(__FILE__, __LINE__, "%s: expected CHORUS_ERR_MISMATCH, got %s", what,
                  chorus_strerror(r));
    printf("%-34s -> %s\n", what, chorus_last_error(comm));
    ASSERT_STR_CONTAINS(chorus_last_error(comm), n1);
    ASSERT_STR_CONTAINS(chorus_last_error(comm), n2);
}

/* A receive of another dtype or of fewer elements fails with a mismatch naming both sides,
 * and the communicator goes on working; a larger receive takes the message (status.count). */
static void case_mismatch(void)
{
    /* a large message that does not fit a receive posted before it arrived is read and
     * dropped: the next message of the pair is intact */
    enum { BIG = 100000 };
    int32_t small[8];
    chorus_request *pre = NULL;
    if (rank_ == 0) ASSERT_OK(chorus_irecv(comm, small, 8, CHORUS_INT32, 1, 10, &pre));
    ASSERT_OK(chorus_barrier(comm));
    if (rank_ == 1) {
        int32_t *big = malloc(sizeof(int32_t) * BIG);
        fill(big, BIG, 1, 0, 10);
        ASSERT_OK(chorus_send(comm, big, BIG, CHORUS_INT32, 0, 10));
        ASSERT_OK(chorus_send(comm, big, 8, CHORUS_INT32, 0, 11));
        free(big);
    } else if (rank_ == 0) {
        expect_mismatch(chorus_wait(pre, NULL), "100000 int32 received into 8",
                        "rank 1 sent 100000 int32 with tag 10", "up to 8 int32 from rank 1");
        ASSERT_OK(chorus_recv(comm, small, 8, CHORUS_INT32, 1, 11));
        check_data(small, 8, 1, 0, 10);
    }
    if (rank_ == 1) {
        float f[200];
        int32_t a[10];
        for (int i = 0; i < 200; i++) f[i] = (float)i;
        fill(a, 10, 1, 0, 6);
        ASSERT_OK(chorus_send(comm, f, 200, CHORUS_FLOAT32, 0, 5));
        ASSERT_OK(chorus_send(comm, a, 10, CHORUS_INT32, 0, 6));
        ASSERT_OK(chorus_send(comm, a, 10, CHORUS_INT32, 0, 7));
        ASSERT_OK(chorus_send(comm, a, 10, CHORUS_INT32, 0, 8));
        ASSERT_OK(chorus_send(comm, a, 10, CHORUS_INT32, 0, 9));
    } else if (rank_ == 0) {
        double d[100];
        int32_t a[100];
        float f[10];
        chorus_request *rq;
        chorus_status st;
        ASSERT_OK(chorus_irecv(comm, d, 100, CHORUS_FLOAT64, 1, 5, &rq));
        expect_mismatch(chorus_wait(rq, &st), "200 float32 received as 100 float64",
                        "rank 1 sent 200 float32 with tag 5",
                        "rank 0 posted a receive of up to 100 float64 from rank 1");
        ASSERT_EQ(st.result, CHORUS_ERR_MISMATCH);
        ASSERT_EQ(st.count, 200);
        ASSERT_EQ(st.dtype, CHORUS_FLOAT32);
        /* larger buffer: accepted, the count tells */
        ASSERT_OK(chorus_irecv(comm, a, 100, CHORUS_INT32, 1, 6, &rq));
        ASSERT_OK(chorus_wait(rq, &st));
        ASSERT_EQ(st.count, 10);
        check_data(a, 10, 1, 0, 6);
        /* same size, other dtype */
        ASSERT_OK(
            chorus_irecv(comm, f, 10, CHORUS_FLOAT32, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG, &rq));
        expect_mismatch(chorus_wait(rq, NULL), "10 int32 received as 10 float32",
                        "rank 1 sent 10 int32 with tag 7", "from any rank with any tag");
        /* too few elements */
        ASSERT_OK(chorus_irecv(comm, a, 5, CHORUS_INT32, 1, 8, &rq));
        expect_mismatch(chorus_wait(rq, NULL), "10 int32 received into 5",
                        "rank 1 sent 10 int32 with tag 8", "up to 5 int32");
        /* the blocking receive wants the exact count */
        expect_mismatch(chorus_recv(comm, a, 100, CHORUS_INT32, 1, 9), "chorus_recv of 100 for 10",
                        "rank 1 sent 10 int32 with tag 9", "expected exactly 100");
    }
    /* nothing broke */
    int32_t one = 1;
    ASSERT_OK(chorus_allreduce(comm, &one, &one, 1, CHORUS_INT32, CHORUS_SUM));
    ASSERT_EQ(one, size_);
}

static void expect_invalid(chorus_result r, const char *what, const char *needle,
                           const chorus_comm *where)
{
    if (r != CHORUS_ERR_INVALID_ARG)
        test_fail(__FILE__, __LINE__, "%s: expected CHORUS_ERR_INVALID_ARG, got %s", what,
                  chorus_strerror(r));
    if (rank_ == 0) printf("%-34s -> %s\n", what, chorus_last_error(where));
    ASSERT_STR_CONTAINS(chorus_last_error(where), needle);
}

static void case_invalid(void)
{
    int32_t b[4] = {0};
    chorus_request *rq = (chorus_request *)&b; /* must be set to NULL on error */
    int other = (rank_ + 1) % size_, flag;
    chorus_status st;
    expect_invalid(chorus_isend(comm, b, 4, CHORUS_INT32, other, 0, NULL), "isend with NULL req",
                   "req (where the request is returned) is NULL", comm);
    expect_invalid(chorus_isend(comm, b, 4, CHORUS_INT32, size_, 0, &rq), "isend to rank = size",
                   "is not another rank", comm);
    ASSERT(rq == NULL);
    expect_invalid(chorus_isend(comm, b, 4, CHORUS_INT32, rank_, 0, &rq), "isend to self",
                   "is not another rank", comm);
    expect_invalid(chorus_isend(comm, b, 4, CHORUS_INT32, CHORUS_ANY_SOURCE, 0, &rq),
                   "isend to CHORUS_ANY_SOURCE", "peer -1 is not another rank", comm);
    expect_invalid(chorus_isend(comm, b, 4, CHORUS_INT32, other, CHORUS_ANY_TAG, &rq),
                   "isend with CHORUS_ANY_TAG", "tag -1 is negative", comm);
    expect_invalid(chorus_irecv(comm, b, 4, CHORUS_INT32, -7, 0, &rq), "irecv from rank -7",
                   "peer -7 is not another rank", comm);
    expect_invalid(chorus_irecv(comm, b, 4, CHORUS_INT32, other, -5, &rq), "irecv with tag -5",
                   "tag -5 is negative (CHORUS_ANY_TAG is -1)", comm);
    expect_invalid(chorus_irecv(comm, NULL, 4, CHORUS_INT32, other, 0, &rq), "irecv into NULL",
                   "NULL buffer with count 4", comm);
    expect_invalid(chorus_irecv(comm, b, 4, (chorus_dtype)42, other, 0, &rq), "irecv of dtype 42",
                   "unknown dtype 42", comm);
    expect_invalid(chorus_irecv(NULL, b, 4, CHORUS_INT32, other, 0, &rq), "irecv on NULL comm",
                   "comm is NULL", NULL);
    expect_invalid(chorus_wait(NULL, &st), "wait on NULL", "chorus_wait: request is NULL", NULL);
    expect_invalid(chorus_test(NULL, &flag, &st), "test on NULL", "chorus_test: request is NULL",
                   NULL);
    expect_invalid(chorus_waitall(-1, &rq, NULL), "waitall of -1", "n is negative", NULL);
    expect_invalid(chorus_probe(comm, size_ + 3, 0, &st), "probe of rank size+3",
                   "is not another rank", comm);
    expect_invalid(chorus_iprobe(comm, other, 0, NULL, &st), "iprobe with NULL flag",
                   "flag is NULL", comm);
    /* waitall/waitany of nothing at all */
    chorus_request *none[2] = {NULL, NULL};
    int idx = 7;
    ASSERT_OK(chorus_waitall(2, none, NULL));
    ASSERT_OK(chorus_waitany(2, none, &idx, &st));
    ASSERT_EQ(idx, -1);
    /* the communicator still works */
    ASSERT_OK(chorus_barrier(comm));
}

/* Every survivor has requests posted that only the victim or a failure can complete (from
 * it, to it, from any rank, from another survivor) when the victim is killed: every request
 * must end with CHORUS_ERR_PEER_LOST naming it, within the timeout. Run with
 * CHORUS_HEARTBEAT_S=0, so that the victim reads nothing once it has left its last call. */
static int case_death(int victim)
{
    enum { BIG = 16 << 20 }; /* int32s: 64 MB, more than the sockets hold */
    char needle[32];
    snprintf(needle, sizeof(needle), "rank %d", victim);
    int other = -1;
    for (int r = 0; r < size_; r++)
        if (r != victim && r != rank_) other = r;
    int32_t *big = calloc(BIG, sizeof(int32_t)), small[4][8], bye = 0;
    chorus_request *rq[5];
    int n = 0;
    if (rank_ != victim) {
        ASSERT_OK(chorus_irecv(comm, small[0], 8, CHORUS_INT32, victim, 1, &rq[n++]));
        ASSERT_OK(chorus_irecv(comm, small[1], 8, CHORUS_INT32, CHORUS_ANY_SOURCE, 2, &rq[n++]));
        if (other >= 0)
            ASSERT_OK(chorus_irecv(comm, small[2], 8, CHORUS_INT32, other, 4, &rq[n++]));
    }
    ASSERT_OK(chorus_barrier(comm));
    if (rank_ == victim) {
        /* a last message to each survivor; after it this rank never reads again */
        for (int r = 0; r < size_; r++)
            if (r != victim) ASSERT_OK(chorus_send(comm, &bye, 1, CHORUS_INT32, r, 9));
        sleep(1);
        kill(getpid(), SIGKILL);
    }
    ASSERT_OK(chorus_recv(comm, &bye, 1, CHORUS_INT32, victim, 9));
    /* the victim no longer reads: a send of 64 MB to it cannot complete */
    ASSERT_OK(chorus_isend(comm, big, BIG, CHORUS_INT32, victim, 3, &rq[n++]));
    ASSERT_OK(
        chorus_irecv(comm, small[3], 8, CHORUS_INT32, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG, &rq[n++]));
    double t0 = chorus__now();
    for (int i = 0; i < n; i++) { /* half by test, half by wait */
        int done = 0;
        chorus_status st;
        chorus_result r;
        if (i % 2 == 0) {
            do {
                r = chorus_test(rq[i], &done, &st);
                if (chorus__now() - t0 > 30) test_fail(__FILE__, __LINE__, "test never failed");
            } while (!done);
        } else {
            r = chorus_wait(rq[i], &st);
        }
        ASSERT_EQ(st.result, r);
        if (r != CHORUS_ERR_PEER_LOST)
            test_fail(__FILE__, __LINE__, "request %d ended with %s, expected PEER_LOST", i,
                      chorus_strerror(r));
        ASSERT_STR_CONTAINS(chorus_last_error(comm), needle);
    }
    double dt = chorus__now() - t0;
    fprintf(stderr, "rank %d: %d p2p requests failed after %.2fs: %s: %s\n", rank_, n, dt,
            chorus_strerror(CHORUS_ERR_PEER_LOST), chorus_last_error(comm));
    ASSERT(dt < chorus__config()->timeout_s);
    free(big);
    chorus_finalize(comm);
    sleep(2); /* chorus-run reports the first rank to end: let that be the victim */
    return 3;
}

/* Run with a short CHORUS_TIMEOUT_S: rank 0 waits for a message rank 1 never sends (or probes
 * for a message from any rank that nobody sends) and gets CHORUS_ERR_TIMEOUT naming rank 1 and
 * the receive (or the probe); the others, probing later, learn the same. */
static int case_timeout(int probe)
{
    int32_t b[4];
    chorus_request *rq;
    chorus_status st;
    const char *want = probe ? "rank 0 timed out in a probe for a message with any tag from any "
                               "rank: no rank sent a matching message"
                             : "rank 0 timed out in a receive of up to 4 int32 with tag 77 from "
                               "rank 1 (host ";
    if (rank_ == 0) {
        double t0 = chorus__now();
        chorus_result r;
        if (probe) {
            r = chorus_probe(comm, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG, &st);
        } else {
            ASSERT_OK(chorus_irecv(comm, b, 4, CHORUS_INT32, 1, 77, &rq));
            r = chorus_wait(rq, &st);
            ASSERT_EQ(st.result, CHORUS_ERR_TIMEOUT);
        }
        printf("rank 0: %s returned %s after %.1fs: %s\n", probe ? "probe" : "wait",
               chorus_strerror(r), chorus__now() - t0, chorus_last_error(comm));
        ASSERT_EQ(r, CHORUS_ERR_TIMEOUT);
        ASSERT_STR_CONTAINS(chorus_last_error(comm), want);
    } else {
        usleep(1500000); /* rank 0's deadline passes first */
        chorus_result r = chorus_probe(comm, CHORUS_ANY_SOURCE, 78, &st);
        printf("rank %d: probe returned %s: %s\n", rank_, chorus_strerror(r),
               chorus_last_error(comm));
        /* every rank learns why, the blamed rank too (it is alive: were it not told, it would
         * see rank 0 close on it and blame rank 0, a survivor) */
        ASSERT_EQ(r, CHORUS_ERR_TIMEOUT);
        ASSERT_STR_CONTAINS(chorus_last_error(comm), want);
    }
    /* the communicator is broken from now on, for every kind of call */
    ASSERT(chorus_irecv(comm, b, 4, CHORUS_INT32, CHORUS_ANY_SOURCE, 1, &rq) != CHORUS_OK);
    ASSERT(rq == NULL);
    chorus_finalize(comm);
    return 0;
}

/* Rank 1 sends rank 0 a point-to-point header that lies (through the transport, as a broken or
 * hostile peer would): a length that is not its count of int32 (bad_len), or a dtype that does
 * not exist. Rank 0's receive fails with CHORUS_ERR_PEER_LOST naming rank 1 and what was wrong,
 * nothing is copied, and every rank fails instead of waiting. */
static int case_garbage(int bad_len)
{
    int32_t b[10]; /* exactly the receive: a sanitizer sees any byte written past it */
    chorus_request *rq;
    chorus_status st;
    const char *want = bad_len ? "a point-to-point message whose length is not its count"
                               : "a point-to-point header without a valid dtype";
    if (rank_ == 1) {
        int32_t lie[16] = {0};
        chorus_wire_hdr h = {.type = CHORUS_MSG_P2P,
                             .comm_id = comm->id,
                             .tag = 3,
                             .coll = bad_len ? (uint32_t)CHORUS_INT32 << 8 : 99u << 8,
                             .count = 10,
                             .len = bad_len ? 64 : 40};
        chorus_req r;
        chorus_req *rp = &r;
        chorus__net_isend(comm->net.self, &r, comm->world[0], &h, lie); /* TCP's own bytes */
        ASSERT_OK(chorus__net_wait(comm->net.self, &rp, 1, chorus__deadline(), NULL));
    }
    /* the header may have been read (and the communicator broken) before the receive */
    chorus_result r = chorus_irecv(comm, b, 10, CHORUS_INT32, rank_ == 0 ? 1 : 0, 3, &rq);
    if (r == CHORUS_OK) r = chorus_wait(rq, &st);
    printf("rank %d: wait returned %s: %s\n", rank_, chorus_strerror(r), chorus_last_error(comm));
    ASSERT_EQ(r, CHORUS_ERR_PEER_LOST);
    if (rank_ != 1) {
        ASSERT_STR_CONTAINS(chorus_last_error(comm), "rank 1 (host ");
        ASSERT_STR_CONTAINS(chorus_last_error(comm), want);
    }
    chorus_finalize(comm);
    return 0;
}

/* Many messages from every rank to the next, in one burst: mostly 60 KB ones (below the
 * striping size: first lane only) and every 20th 1 MiB (striped over CHORUS_TCP_LANES). The
 * first lane carries far more than the others, so slices of a striped message arrive long
 * before its header: they must wait for it and land in the right receive, in order. */
static void case_bulk(void)
{
    enum { N = 200 };
    int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
    int32_t *out[N], *in[N];
    size_t sizes[N];
    chorus_request *sr[N], *rr[N];
    for (int i = 0; i < N; i++) {
        sizes[i] = i % 20 == 19 ? (size_t)1 << 18 : 15000;
        out[i] = malloc(sizeof(int32_t) * sizes[i]);
        in[i] = malloc(sizeof(int32_t) * sizes[i]);
        ASSERT(out[i] && in[i]);
        fill(out[i], sizes[i], rank_, next, i);
    }
    for (int i = 0; i < N; i++)
        ASSERT_OK(chorus_isend(comm, out[i], sizes[i], CHORUS_INT32, next, 7, &sr[i]));
    for (int i = 0; i < N; i++)
        ASSERT_OK(chorus_irecv(comm, in[i], sizes[i], CHORUS_INT32, prev, 7, &rr[i]));
    wait_checked(N, rr, sr, in, out, sizes, prev);
    ASSERT_OK(chorus_barrier(comm));
    if (rank_ == 0) printf("bulk: %d messages of one tag (60 KB and 1 MiB) received in order\n", N);
}

int main(int argc, char **argv)
{
    ASSERT_OK(chorus_init(&comm));
    rank_ = chorus_rank(comm);
    size_ = chorus_size(comm);
    test_rank = rank_;
    ASSERT(size_ >= 2);
    if (argc > 2 && !strcmp(argv[1], "death")) return case_death(atoi(argv[2]));
    if (argc > 1 && !strcmp(argv[1], "timeout")) return case_timeout(0);
    if (argc > 1 && !strcmp(argv[1], "probe_timeout")) return case_timeout(1);
    if (argc > 1 && !strcmp(argv[1], "garbage_len")) return case_garbage(1);
    if (argc > 1 && !strcmp(argv[1], "garbage_dtype")) return case_garbage(0);
    if (argc > 1 && !strcmp(argv[1], "bulk")) {
        case_bulk();
        ASSERT_OK(chorus_finalize(comm));
        return 0;
    }
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {{"invalid", case_invalid}, {"anysource", case_anysource},
                 {"probe", case_probe},     {"order", case_order},
                 {"mixed", case_mixed},     {"mismatch", case_mismatch},
                 {"many", case_many}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int run = argc < 2;
        for (int a = 1; a < argc; a++) run |= !strcmp(argv[a], cases[i].name);
        if (run) cases[i].fn();
    }
    ASSERT_OK(chorus_finalize(comm));
    return 0;
}
