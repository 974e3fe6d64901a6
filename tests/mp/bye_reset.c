/* bye_reset.c - a rank that finalizes while bytes it never read sit in its sockets (a message
 * it never received; the others' pings, arriving as it closes): its close resets the
 * connection (TCP answers unread data with a reset), right after its goodbye. The ranks still
 * working must take the reset after the goodbye for a clean end, not a lost peer: rank 0's
 * receive from a third rank completes.
 * Usage (3 ranks, TCP; tests/scripts/bye_reset.sh runs it with pings every 2 ms):
 *   CHORUS_SHM=0 CHORUS_HEARTBEAT_S=0.002 chorus-run -np 3 bye_reset DIR
 * DIR holds the files by which the ranks order their steps without the network:
 *   rank 0: sends 64 bytes to rank 1 (which never receives them), writes DIR/sent, then
 *           receives from rank 2;
 *   rank 1: waits for DIR/sent and a little more, finalizes, writes DIR/finalized, lives on
 *           a little;
 *   rank 2: waits for DIR/finalized, sends to rank 0. */
#include <stdio.h>
#include <unistd.h>

#include "base/base.h"
#include "harness.h"

static void mark(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fclose(f);
}

/* Waits for dir/name, as long as CHORUS_TIMEOUT_S lets any wait on a peer take. */
static void await(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    double deadline = chorus__deadline();
    while (access(path, F_OK) != 0) {
        if (chorus__now() > deadline)
            test_fail(__FILE__, __LINE__, "the other rank never got here");
        usleep(2000);
    }
}

int main(int argc, char **argv)
{
    ASSERT(argc == 2);
    const char *dir = argv[1];
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    test_rank = chorus_rank(c);
    ASSERT(chorus_size(c) == 3);
    unsigned char msg[64] = {0}, token = 0;
    ASSERT_OK(chorus_barrier(c));
    if (test_rank == 0) {
        ASSERT_OK(chorus_send(c, msg, sizeof(msg), CHORUS_UINT8, 1, 7));
        mark(dir, "sent");
        chorus_result r = chorus_recv(c, &token, 1, CHORUS_UINT8, 2, 9);
        if (r != CHORUS_OK)
            fprintf(stderr, "rank 0: receive from rank 2 failed: %s: %s\n", chorus_strerror(r),
                    chorus_last_error(c));
        ASSERT_OK(r);
        ASSERT(token == 42);
        printf("rank 0: received from rank 2 after rank 1 finalized\n");
    } else if (test_rank == 1) {
        await(dir, "sent");
        usleep(400000); /* the others' pings keep arriving meanwhile */
        ASSERT_OK(chorus_finalize(c));
        mark(dir, "finalized");
        usleep(300000); /* alive while rank 0 reads the goodbye and the reset */
        return 0;
    } else {
        await(dir, "finalized");
        token = 42;
        ASSERT_OK(chorus_send(c, &token, 1, CHORUS_UINT8, 0, 9));
    }
    ASSERT_OK(chorus_finalize(c));
    return 0;
}
