/*
 * transports.c - a communicator's transports, for what every transport does the same way
 * through the transport interface (transport.h): breaking them all with one reason, and
 * reading whom their failure records blame.
 */
#include "coll/comm.h"
#include "transport/shm/shm.h"

/* c's transports, for what every transport does the same way: the shared-memory groups
 * first, the message transport last. */
static int transports(const chorus_comm *c, chorus_transport out[3])
{
    int n = 0;
    if (c->shm) out[n++] = chorus__shm_transport(c->shm);
    if (c->hier && c->hier->local->shm) out[n++] = chorus__shm_transport(c->hier->local->shm);
    if (c->net.ops) out[n++] = c->net;
    return n;
}

void chorus__comm_break(chorus_comm *c, int culprit, chorus_result r, const char *why)
{
    chorus_transport t[3];
    for (int i = 0, n = transports(c, t); i < n; i++) chorus__tp_abort(&t[i], culprit, r, why);
}

void chorus__comm_break_failed(chorus_comm *c, chorus_result r)
{
    if (!c->err.msg[0]) chorus__tp_error(&c->net, NULL, &c->err);
    /* the rank a transport's record blames (a shared-memory peer that died) is the one the
     * other transports are broken for too, so that the launcher hears whom this rank lost */
    chorus__comm_break(c, chorus__comm_culprit(c), r,
                       c->err.msg[0] ? c->err.msg : chorus_strerror(r));
}

int chorus__comm_culprit(const chorus_comm *c)
{
    chorus_transport t[3];
    for (int n = transports(c, t), i = n - 1; i >= 0; i--) {
        int culprit;
        if (chorus__tp_error(&t[i], &culprit, NULL) != CHORUS_OK && culprit >= 0) return culprit;
    }
    return -1;
}
