/*
 * sec_attack.c - attacks on a secured job: chorus-run -np 3 sec_attack
 *
 * Before it joins, the last rank attacks the rendezvous store and rank 0's transport port
 * (which is listening for this very rank at that moment) four ways, each on a fresh
 * connection:
 *   nosecret  a client that skips the handshake and sends a valid request (store HELLO,
 *             transport HELLO)
 *   wrong     a full handshake with a wrong secret, then the request
 *   replay    the client messages of an earlier successful handshake, replayed verbatim
 *   random    1 KiB of random bytes
 * Each connection must be closed without an answer to the request. Then every rank joins
 * and an allreduce must give the exact expected result: the job is unharmed.
 */
#include <arpa/inet.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "bootstrap/store.h"
#include "harness.h"
#include "wire/auth.h"
#include "wire/sock.h"
#include "wire/wire.h"

typedef struct target {
    const char *name; /* "store" or "transport" */
    const char *addr;
    const char *job;
} target;

/* The request that follows authentication on this kind of connection. */
static void send_request(int fd, const target *t)
{
    if (!strcmp(t->name, "store")) {
        size_t n;
        unsigned char *p =
            chorus__wire_encode_kv(CHORUS_KV_HELLO, t->job, (uint32_t)strlen(t->job), NULL, 0, &n);
        chorus_wire_hdr h = {.type = CHORUS_MSG_KV, .len = n};
        chorus__sock_send_msg(fd, &h, p, chorus__now() + 2);
        free(p);
    } else {
        chorus_wire_hello hello = {.rank = 2, .size = 3, .lanes = 1};
        snprintf(hello.job, sizeof(hello.job), "%s", t->job);
        unsigned char p[CHORUS_WIRE_HELLO_LEN];
        chorus__wire_encode_hello(&hello, p);
        chorus_wire_hdr h = {.type = CHORUS_MSG_HELLO, .len = sizeof(p)};
        chorus__sock_send_msg(fd, &h, p, chorus__now() + 2);
    }
}

/* The peer must close the connection without sending anything (more). */
static void expect_closed(int fd, const target *t, const char *attack)
{
    unsigned char b;
    int rc = chorus__sock_read_all(fd, &b, 1, chorus__now() + 8);
    if (rc == 0 || rc == -2)
        test_fail(__FILE__, __LINE__, "%s on the %s: the connection was %s", attack, t->name,
                  rc == 0 ? "answered" : "left open");
    printf("%s attack on the %s (%s): refused (%s)\n", attack, t->name, t->addr,
           chorus__sock_errstr(rc));
    close(fd);
}

static int dial(const target *t)
{
    int fd;
    chorus_errbuf e;
    ASSERT_OK(chorus__sock_connect(t->addr, chorus__now() + 5, &fd, &e));
    return fd;
}

/* The client's proof as auth.h defines it, computed here independently with any key. */
static void client_proof(const chorus_auth_key *k, const unsigned char *ns, const unsigned char *nc,
                         unsigned char out[CHORUS_AUTH_PROOF_LEN])
{
    static const char label[] = "chorus-auth-1 client";
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, k->k, k->len);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, ns, CHORUS_AUTH_NONCE);
    crypto_auth_hmacsha256_update(&st, nc, CHORUS_AUTH_NONCE);
    crypto_auth_hmacsha256_final(&st, out);
}

/* The client side of the handshake by hand, so that its messages can be recorded and
 * replayed: sends hello, reads the challenge, sends proof_in (or the proof under k) and
 * returns what it sent in proof_out. */
static void handshake(int fd, const chorus_auth_key *k, const unsigned char *hello,
                      const unsigned char *proof_in, unsigned char *proof_out)
{
    chorus_wire_hdr h = {.type = CHORUS_MSG_AUTH_HELLO, .len = CHORUS_AUTH_HELLO_LEN};
    ASSERT_EQ(chorus__sock_send_msg(fd, &h, hello, chorus__now() + 5), 0);
    unsigned char *ch = NULL;
    char why[200];
    ASSERT_EQ(chorus__sock_recv_msg(fd, &h, &ch, CHORUS_AUTH_MAX_MSG, chorus__now() + 5, why,
                                    sizeof(why)),
              0);
    ASSERT_EQ(h.type, CHORUS_MSG_AUTH_CHALLENGE);
    ASSERT_EQ(h.len, CHORUS_AUTH_CHALLENGE_LEN);
    unsigned char p[CHORUS_AUTH_PROOF_LEN];
    if (proof_in)
        memcpy(p, proof_in, sizeof(p));
    else
        client_proof(k, ch, hello + 4, p);
    free(ch);
    if (proof_out) memcpy(proof_out, p, sizeof(p));
    h = (chorus_wire_hdr){.type = CHORUS_MSG_AUTH_PROOF, .len = CHORUS_AUTH_PROOF_LEN};
    ASSERT_EQ(chorus__sock_send_msg(fd, &h, p, chorus__now() + 5), 0);
}

static void attack(const target *t, const chorus_auth_key *real, uint64_t *seed)
{
    /* 1. no secret: straight to the request */
    int fd = dial(t);
    send_request(fd, t);
    expect_closed(fd, t, "nosecret");

    /* 2. a wrong secret */
    chorus_auth_key wrong;
    chorus__auth_key_set(&wrong, "not-the-job-secret-0123456789", 29);
    chorus_auth_state st;
    unsigned char hello[CHORUS_AUTH_HELLO_LEN], proof[CHORUS_AUTH_PROOF_LEN];
    chorus__auth_client_hello(&st, hello);
    fd = dial(t);
    handshake(fd, &wrong, hello, NULL, NULL);
    send_request(fd, t);
    expect_closed(fd, t, "wrong-secret");

    /* 3. replay: record a good handshake (its connection then just ends), replay it */
    chorus__auth_client_hello(&st, hello);
    fd = dial(t);
    handshake(fd, real, hello, NULL, proof);
    close(fd);
    fd = dial(t);
    handshake(fd, real, hello, proof, NULL); /* same hello, old proof, new challenge */
    send_request(fd, t);
    expect_closed(fd, t, "replay");

    /* 4. random bytes */
    unsigned char junk[1024];
    for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (unsigned char)test_rand(seed);
    fd = dial(t);
    if (chorus__sock_write_all(fd, junk, sizeof(junk), chorus__now() + 2)) { /* may close early */
    }
    expect_closed(fd, t, "random-bytes");
}

int main(void)
{
    const char *rank_s = getenv("CHORUS_RANK"), *size_s = getenv("CHORUS_SIZE");
    const char *store = getenv("CHORUS_STORE_ADDR"), *job = getenv("CHORUS_JOB_ID");
    ASSERT(rank_s && size_s && store && job);
    ASSERT(getenv("CHORUS_SECRET") && *getenv("CHORUS_SECRET"));
    int rank = atoi(rank_s), size = atoi(size_s);
    test_rank = rank;
    if (rank == size - 1 && size > 1) {
        chorus_auth_key real;
        chorus__auth_key_from_env(&real);
        uint64_t seed = 42;
        /* where rank 0 listens: its rendezvous record, read as a legitimate client */
        chorus_store *s;
        chorus_errbuf e;
        ASSERT_OK(chorus__store_connect(store, job, chorus__deadline(), &s, &e));
        char *rec = NULL;
        ASSERT_OK(chorus__store_get(s, "rank/0", &rec, NULL, chorus__deadline(), &e));
        /* Rank 0 reads every rank's record before it accepts connections; publish ours early
         * (the highest rank is dialled by nobody, so the address does not matter) so that rank
         * 0 is listening for us while we attack. chorus_init publishes the real one later. */
        char hid[300], name[64] = "?", mine[512], key[32];
        chorus__host_id(hid, sizeof(hid));
        gethostname(name, sizeof(name) - 1);
        snprintf(mine, sizeof(mine), "127.0.0.1:1\n%s\n%s", name, hid);
        snprintf(key, sizeof(key), "rank/%d", rank);
        ASSERT_OK(chorus__store_set(s, key, mine, strlen(mine), &e));
        chorus__store_close(s);
        *strchr(rec, '\n') = 0;
        target ts = {"store", store, job}, tt = {"transport", rec, job};
        attack(&ts, &real, &seed);
        attack(&tt, &real, &seed);
        free(rec);
    }
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    int n = 100000;
    int64_t *x = malloc(sizeof(int64_t) * (size_t)n);
    for (int i = 0; i < n; i++) x[i] = (int64_t)i * (rank + 1);
    ASSERT_OK(chorus_allreduce(c, x, x, (size_t)n, CHORUS_INT64, CHORUS_SUM));
    int64_t f = (int64_t)size * (size + 1) / 2;
    for (int i = 0; i < n; i++)
        if (x[i] != (int64_t)i * f) test_fail(__FILE__, __LINE__, "wrong result at %d", i);
    printf("rank %d: allreduce correct after the attacks\n", rank);
    free(x);
    chorus_finalize(c);
    return 0;
}
