/* garbage_peer.c - while a 3-rank job starts, a stranger connects to the rendezvous store and
 * to a rank's transport port and sends garbage (random bytes, huge lengths, requests before a
 * hello, a hello from another job or for a rank that does not exist). The job must start and
 * compute correct results anyway. Usage: chorus-run -np 3 garbage_peer */
#include <arpa/inet.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "harness.h"
#include "wire/sock.h"
#include "wire/wire.h"

static void spray(const char *addr, const void *bytes, size_t n)
{
    int fd;
    chorus_errbuf e;
    if (chorus__sock_connect(addr, chorus__now() + 2, &fd, &e) != CHORUS_OK) return;
    if (chorus__sock_write_all(fd, bytes, n, chorus__now() + 1)) { /* peer may close early */
    }
    char tmp[256];
    chorus__sock_read_all(fd, tmp, sizeof(tmp), chorus__now() + 0.2); /* drain any reply */
    close(fd);
}

static void attack_store(const char *store, uint64_t *seed)
{
    unsigned char junk[512];
    for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (unsigned char)test_rand(seed);
    spray(store, junk, sizeof(junk));
    chorus_wire_hdr h = {.type = CHORUS_MSG_KV, .len = 1ull << 40}; /* absurd length */
    unsigned char hb[CHORUS_WIRE_HDR_LEN];
    chorus__wire_encode_hdr(&h, hb);
    spray(store, hb, sizeof(hb));
    size_t n;
    unsigned char *p = chorus__wire_encode_kv(CHORUS_KV_SET, "rank/0", 6, "1.2.3.4:1", 9, &n);
    h.len = n; /* a SET before any hello: must be refused, not stored */
    chorus__wire_encode_hdr(&h, hb);
    unsigned char msg[CHORUS_WIRE_HDR_LEN + 64];
    memcpy(msg, hb, sizeof(hb));
    memcpy(msg + sizeof(hb), p, n);
    spray(store, msg, sizeof(hb) + n);
    free(p);
    h.len = 20; /* a KV payload that does not parse */
    chorus__wire_encode_hdr(&h, hb);
    memcpy(msg, hb, sizeof(hb));
    memset(msg + sizeof(hb), 0xff, 20);
    spray(store, msg, sizeof(hb) + 20);
}

static void attack_transport(const char *addr, uint64_t *seed)
{
    unsigned char junk[300];
    for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (unsigned char)test_rand(seed);
    spray(addr, junk, sizeof(junk));
    chorus_wire_hello hello = {.rank = 2, .size = 3};
    snprintf(hello.job, sizeof(hello.job), "some-other-job");
    for (int k = 0; k < 2; k++) {
        unsigned char m[CHORUS_WIRE_HDR_LEN + CHORUS_WIRE_HELLO_LEN];
        chorus_wire_hdr h = {.type = CHORUS_MSG_HELLO, .len = CHORUS_WIRE_HELLO_LEN};
        chorus__wire_encode_hdr(&h, m);
        chorus__wire_encode_hello(&hello, m + CHORUS_WIRE_HDR_LEN);
        spray(addr, m, sizeof(m));
        snprintf(hello.job, sizeof(hello.job), "%s",
                 getenv("CHORUS_JOB_ID") ? getenv("CHORUS_JOB_ID") : "");
        hello.size = 7; /* right job, wrong world */
    }
}

int main(void)
{
    const char *store = getenv("CHORUS_STORE_ADDR");
    const char *rank_s = getenv("CHORUS_RANK");
    ASSERT(store && rank_s);
    int rank = atoi(rank_s);
    pid_t child = -1;
    if (rank == 0) {
        child = fork();
        if (child == 0) {
            uint64_t seed = 99;
            for (int i = 0; i < 5; i++) attack_store(store, &seed);
            /* find rank 1's transport address like a rank would, then attack it */
            int fd;
            chorus_errbuf e;
            if (chorus__sock_connect(store, chorus__now() + 5, &fd, &e) == CHORUS_OK) {
                const char *job = getenv("CHORUS_JOB_ID");
                size_t n;
                unsigned char *p = chorus__wire_encode_kv(CHORUS_KV_HELLO, job,
                                                          (uint32_t)strlen(job), NULL, 0, &n);
                chorus_wire_hdr h = {.type = CHORUS_MSG_KV, .len = n}, rh;
                unsigned char *reply = NULL;
                char why[128];
                int ok = chorus__sock_send_msg(fd, &h, p, chorus__now() + 2) == 0 &&
                         chorus__sock_recv_msg(fd, &rh, &reply, 1 << 20, chorus__now() + 2, why,
                                               sizeof(why)) == 0;
                free(p);
                free(reply);
                reply = NULL;
                p = chorus__wire_encode_kv(CHORUS_KV_GET, "rank/1", 6, NULL, 0, &n);
                h.len = n;
                chorus_wire_kv kv;
                if (ok && chorus__sock_send_msg(fd, &h, p, chorus__now() + 2) == 0 &&
                    chorus__sock_recv_msg(fd, &rh, &reply, 1 << 20, chorus__now() + 5, why,
                                          sizeof(why)) == 0 &&
                    chorus__wire_decode_kv(reply, rh.len, &kv) == CHORUS_OK &&
                    kv.op == CHORUS_KV_OK) {
                    char addr[128];
                    snprintf(addr, sizeof(addr), "%.*s", (int)kv.value_len, (const char *)kv.value);
                    char *nl = strchr(addr, '\n');
                    if (nl) *nl = 0;
                    fprintf(stderr, "stranger: attacking rank 1's transport at %s\n", addr);
                    attack_transport(addr, &seed);
                } else {
                    fprintf(stderr,
                            "stranger: the store did not give rank 1's address (secured job?)\n");
                }
                free(p);
                free(reply);
                close(fd);
            }
            _exit(0);
        }
    }
    if (rank == 2) sleep(2); /* rank 1 waits in accept for rank 2 while the stranger calls */
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    test_rank = chorus_rank(c);
    int64_t v[1000], want = 0;
    for (int r = 0; r < chorus_size(c); r++) want += r + 1;
    for (int i = 0; i < 1000; i++) v[i] = chorus_rank(c) + 1;
    ASSERT_OK(chorus_allreduce(c, v, v, 1000, CHORUS_INT64, CHORUS_SUM));
    for (int i = 0; i < 1000; i++) ASSERT_EQ(v[i], want);
    ASSERT_OK(chorus_barrier(c));
    if (child > 0) {
        int st;
        waitpid(child, &st, 0);
        ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        printf("job unaffected by the stranger's garbage\n");
    }
    chorus_finalize(c);
    return 0;
}
