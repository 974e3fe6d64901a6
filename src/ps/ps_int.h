/*
 * ps_int.h - what the two halves of the parameter server share: the key table with its
 * placement on the servers, the message header and tags, and the server's per-key state.
 * ps.c holds creation, registration and the worker side; server.c the serving loop and the
 * optimizers.
 */
#ifndef CHORUS_PS_INT_H
#define CHORUS_PS_INT_H

#include "base/base.h"
#include "chorus/ps.h"

/* Tags on the job's communicator. A worker sends a header (PS_HDR_WORDS int64) with TAG_HDR,
 * then, for a push, the gradient slice with TAG_DATA; the server answers a pull with the
 * parameter slice on TAG_REPLY + the key's slot. Messages of one pair and tag keep their order,
 * so a push's data always follows its header. */
#define PS_TAG_HDR   0x50530000
#define PS_TAG_DATA  0x50530001
#define PS_TAG_SAVED 0x50530002 /* a server's answer to a save: an int64 chorus_result */
#define PS_TAG_REPLY 0x50531000
#define PS_TAG_NORM  0x50532000 /* + the key's slot: a server's sum of squares of a sync round */
#define PS_MAX_KEYS  4096
#define PS_MAX_DIR   4096 /* bytes of a checkpoint directory name, with its NUL */

/* A save's header is followed by the directory name (uint8, NUL-terminated) on TAG_DATA. */
enum { PS_PUSH = 1, PS_PULL = 2, PS_BYE = 3, PS_SAVE = 4, PS_LOAD = 5 };
#define PS_HDR_WORDS 4 /* type, key, clock (this worker's pushes of the key), lr (float bits) */

/* The part of a key one server holds: floats [off, off + count) of the key. */
typedef struct ps_slice {
    int server;
    size_t off, count;
} ps_slice;

/* A deferred request on a server: a pull waiting for its round or the staleness bound, or a
 * sync push for a round after the current one (its gradient widened to float32). */
typedef struct ps_defer {
    int worker, type;
    uint64_t clock;
    float lr;
    float *grad; /* pushes only */
    struct ps_defer *next;
} ps_defer;

typedef struct ps_key {
    int key;
    size_t count;
    int nslices;
    ps_slice *slices;
    uint64_t pushes, pulls; /* worker: how many of each it started */
    /* server: its slice (mine = 1 when it holds one) and that slice's state */
    int mine;
    size_t moff, mcount;
    float *param, *m, *v; /* parameters, momentum / Adam moments */
    uint64_t t;           /* optimizer steps taken */
    uint64_t applied;     /* sync: rounds applied */
    uint64_t *wpush;      /* per worker: pushes received */
    float *acc;           /* sync: one gradient per worker for the current round */
    float *lrs;           /* sync: each worker's lr of the current round */
    unsigned char *have;  /* sync: which workers pushed the current round */
    ps_defer *deferred;   /* FIFO */
} ps_key;

struct chorus_ps {
    chorus_comm *comm, *side; /* the job; the servers' or the workers' own communicator */
    chorus_ps_opts o;
    int rank, size, nservers, nworkers, server, worker; /* server/worker: -1 when not */
    ps_key *keys;
    int nkeys;
    size_t *load;        /* bytes placed on each server so far */
    unsigned char *gone; /* server: workers that said goodbye or died */
    int ngone;
    int left;          /* worker: chorus_ps_leave was called */
    uint64_t saved[2]; /* server: the last two steps it saved shards of (0: none) */
    void *wire;        /* server: receive buffer for a gradient slice */
    size_t wire_cap;   /* bytes */
    chorus_ps_stats st;
    chorus_errbuf err;
};

/* Index of key in ps->keys, or -1. */
int chorus__ps_find(const chorus_ps *ps, int key);

/* Server: writes its shard as checkpoint `step` in dir, or loads it back (shard.c). */
chorus_result chorus__ps_save_shard(chorus_ps *ps, const char *dir, uint64_t step);
chorus_result chorus__ps_load_shard(chorus_ps *ps, const char *dir, uint64_t step);

#endif /* CHORUS_PS_INT_H */
