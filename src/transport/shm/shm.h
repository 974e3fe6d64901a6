/*
 * shm.h - the shared-memory transport for ranks on one host: a POSIX shared-memory segment
 * mapped by every rank of a communicator, with per-rank staging buffers and single-writer
 * sequence flags to synchronise on.
 *
 * Segment layout (all offsets fixed by the creator and checked by the others):
 *
 *   header    magic, geometry, the abort word and its reason            (one page)
 *   ctrl[p]   per rank: three flags IN, RED, OUT (128-byte lines each, written only by
 *             their rank), and the rank's pid and pid namespace
 *   data[p]   per rank: two staging slots of `chunk` bytes (double buffering)
 *
 * Every collective over shared memory is a sequence of chunks. Chunk g (a counter that runs
 * across collectives, equal on all ranks) uses slot g % 2 of each rank's staging. A rank
 * posts flag IN = g+1 when its staging holds its input for chunk g, RED = g+1 when its part of
 * a reduction is in its staging, and OUT = g+1 when it has read all it needs of chunk g. A rank
 * may write slot g % 2 again (for chunk g+2) once every rank's OUT >= g+1. Flags only grow
 * (32-bit, compared with wrap-around), so a wait is "flag >= target".
 *
 * Waits spin for CHORUS_SHM_SPIN_US (yielding between polls when ranks outnumber cores), then
 * sleep in FUTEX_WAIT on the flag word (shared, not
 * private, futexes), waking every few milliseconds to check the abort word, the deadline
 * (CHORUS_TIMEOUT_S without progress), the failure record of the job's message transport
 * (transport.h; TCP) and whether the awaited peer is still alive (pidfd, else kill(pid, 0)). A
 * wait that finds a peer lost or stuck breaks the group naming it (its failure record: the
 * abort word, the result, the reason and the rank blamed). A poster wakes sleepers only
 * when the flag's waiter count says someone sleeps, so the fast path makes no system call.
 */
#ifndef CHORUS_SHM_H
#define CHORUS_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "transport/transport.h"

enum { CHORUS_SHM_IN, CHORUS_SHM_RED, CHORUS_SHM_OUT, CHORUS_SHM_NCH };

#define CHORUS_SHM_TUNE_CLASSES 48 /* size classes of the measured allreduce: 2^0 .. 2^47 B */
#define CHORUS_SHM_TUNE_TRIALS  6  /* timed trial calls per class, half of each algorithm */

/* One flag: the sequence number its owner posts, the count of ranks sleeping on it, and the
 * signature of the collective that posted IN for each slot parity (for mismatch checks). */
typedef struct chorus_shm_flag {
    _Alignas(128) uint32_t seq;
    uint32_t waiters;
    uint64_t sig[2];
    uint64_t count[2];
} chorus_shm_flag;

typedef struct chorus_shm_ctrl {
    chorus_shm_flag ch[CHORUS_SHM_NCH];
    _Alignas(128) int32_t pid;
    uint32_t finalized;
    uint64_t pidns;
    uint64_t cma_probe_addr; /* address of a private word of this rank's, for the CMA probe */
    uint64_t cma_probe_val;  /* ... and the value it holds */
    uint64_t cma_send;       /* single-copy allreduce: this rank's send and recv buffers, */
    uint64_t cma_recv;       /* valid from its IN post until its OUT post of the collective */
    /* measured allreduce (tune.c): this rank's fastest trial, in ns, of the staging slots [0]
     * and of single copy [1] for each size class 2^b <= bytes < 2^(b+1); 0: none yet */
    uint32_t tune_ns[CHORUS_SHM_TUNE_CLASSES][2];
} chorus_shm_ctrl;

typedef struct chorus_shm_hdr {
    uint64_t magic;
    uint64_t comm_id;
    uint32_t size;
    uint32_t version;
    uint64_t chunk;              /* bytes per staging slot */
    uint64_t oneshot_max;        /* largest one-shot allreduce (bytes) */
    uint64_t total;              /* bytes of the whole segment */
    uint64_t cma_min;            /* smallest allreduce (bytes) that uses single-copy reads */
    uint64_t cma_piece;          /* bytes per single-copy read */
    uint64_t cma_max;            /* largest allreduce (bytes) that uses them (by the rules) */
    uint64_t cma_tune;           /* 1: above cma_max, 2 ranks measure both (tune.c) */
    _Alignas(64) uint32_t abort; /* 0 healthy, 1 reason being written, 2 reason valid */
    int32_t abort_result;
    char abort_why[448];
    int32_t abort_rank;              /* the job's rank blamed, -1: nobody in particular */
    _Alignas(64) uint64_t cma_claim; /* single-copy allreduce: pieces claimed (allreduce_cma.c) */
} chorus_shm_hdr;

typedef struct chorus_shm {
    void *base;
    size_t len;
    int rank, size;
    chorus_shm_hdr *hdr;
    chorus_shm_ctrl *ctrl; /* [size] */
    char **data;           /* [size]: each rank's two slots */
    size_t chunk;
    size_t oneshot_max;
    size_t nt_min;          /* copy-outs of messages this large use non-temporal stores */
    uint64_t g;             /* next chunk number (equal on all ranks) */
    uint64_t out_min;       /* known: every peer's OUT flag is at least this */
    uint64_t spin_ns;       /* poll this long before sleeping */
    int yield_now;          /* more ranks than cores: yield between polls from the start */
    int *pidfd;             /* [size], -1: use kill(pid, 0) or nothing */
    int *pid_ok;            /* [size]: pid is meaningful in this pid namespace */
    chorus_transport watch; /* the job's message transport: its failures end waits too */
    const char *what;       /* the running collective, for error messages */
    char *block;            /* CHORUS_SHM_BLOCK private bytes, 64-byte aligned */
    char name[64];
    int unlinked;
    int cma;           /* every rank can read every peer with process_vm_readv (agreed) */
    int cma_ptracer;   /* this group holds a PR_SET_PTRACER_ANY reference (cma.c) */
    size_t cma_min;    /* rank 0's CHORUS_SHM_CMA_MIN (from the header) */
    size_t cma_piece;  /* rank 0's CHORUS_SHM_CMA_PIECE (from the header) */
    size_t cma_max;    /* rank 0's CHORUS_SHM_CMA_MAX (from the header) */
    uint64_t cma_word; /* the private word peers read to probe CMA */
    int tune;          /* 2 ranks, single copy, CHORUS_SHM_CMA_MAX unset: above cma_max the
                          allreduce is measured (tune.c) */
    uint8_t tune_calls[CHORUS_SHM_TUNE_CLASSES]; /* calls of each size class so far (capped) */
    const int *world; /* [size]: the job's rank of each member, for messages (NULL: same) */
} chorus_shm;

/* The rank messages name for member q: its rank in the job, which every log and launcher
 * uses, also when the group is a sub-communicator's. */
static inline int chorus__shm_wrank(const chorus_shm *s, int q)
{
    return s->world ? s->world[q] : q;
}

#define CHORUS_SHM_BLOCK 16384

/* Rank 0: creates and maps the segment `name` for size ranks and reserves its memory (so a
 * full /dev/shm is an error here, not a SIGBUS later). The name stays in /dev/shm until
 * chorus__shm_unlink. */
chorus_result chorus__shm_create(const char *name, uint64_t comm_id, int size, size_t chunk,
                                 size_t oneshot_max, chorus_shm **out, chorus_errbuf *e);
/* Other ranks: maps an existing segment and checks that it is the one expected. */
chorus_result chorus__shm_attach(const char *name, uint64_t comm_id, int size, int rank,
                                 chorus_shm **out, chorus_errbuf *e);
/* Removes the name (mappings stay valid). Idempotent. */
void chorus__shm_unlink(chorus_shm *s);
/* After every rank has attached: opens liveness handles for the peers; spin time and the
 * non-temporal threshold come from cfg (the communicator's config); waits also give up when
 * watch (the job's message transport, whose failure record they poll) has failed. */
void chorus__shm_start(chorus_shm *s, const chorus_config *cfg, chorus_transport watch,
                       int local_size);
/* Marks this rank finalized, unmaps, closes handles. NULL is fine. */
void chorus__shm_destroy(chorus_shm *s);

/* Member q was found lost or stuck (r, the reason in e): the group breaks naming it (the job's
 * rank of q), so that every member and the launcher learn the same reason at once. Returns r. */
chorus_result chorus__shm_blame(chorus_shm *s, int q, chorus_result r, chorus_errbuf *e);

/* Breaks the group: the first reason wins (with culprit, the job's rank blamed, -1 for nobody
 * in particular), sleepers are woken and fail with it. NULL is fine. */
void chorus__shm_abort(chorus_shm *s, int culprit, chorus_result r, const char *why);

/* The group as a transport (transport.h): a segment (with single-copy transfers when agreed),
 * its failure record the abort word; no messages. s NULL: none. Inline: the algorithm table
 * asks its capabilities on every call. */
extern const chorus_transport_ops chorus__shm_ops;
static inline chorus_transport chorus__shm_transport(chorus_shm *s)
{
    if (!s) return (chorus_transport){0};
    return (chorus_transport){.ops = &chorus__shm_ops,
                              .self = s,
                              .caps = CHORUS_TPCAP_SEGMENT | (s->cma ? CHORUS_TPCAP_ZERO_COPY : 0)};
}

/* Staging slot of rank q for chunk g. */
static inline char *chorus__shm_slot(const chorus_shm *s, int q, uint64_t g)
{
    return s->data[q] + (g & 1) * s->chunk;
}

/* Posts this rank's flag ch = value; wakes sleepers if there are any. */
void chorus__shm_wake(chorus_shm *s, chorus_shm_flag *f);
static inline void chorus__shm_post(chorus_shm *s, int ch, uint64_t value)
{
    chorus_shm_flag *f = &s->ctrl[s->rank].ch[ch];
    __atomic_store_n(&f->seq, (uint32_t)value, __ATOMIC_SEQ_CST);
    if (CHORUS__UNLIKELY(__atomic_load_n(&f->waiters, __ATOMIC_SEQ_CST))) chorus__shm_wake(s, f);
}

/* Posts IN = g+1 with the collective's signature (for the slot of chunk g). */
static inline void chorus__shm_post_in(chorus_shm *s, uint64_t g, uint64_t sig, uint64_t count)
{
    chorus_shm_flag *f = &s->ctrl[s->rank].ch[CHORUS_SHM_IN];
    f->sig[g & 1] = sig;
    f->count[g & 1] = count;
    chorus__shm_post(s, CHORUS_SHM_IN, g + 1);
}

/* CHORUS_OK, or the reason of the rank that broke the group (chorus__shm_abort). */
chorus_result chorus__shm_check_abort(chorus_shm *s, chorus_errbuf *e);

static inline int chorus__shm_reached(uint32_t cur, uint32_t target)
{
    return (int32_t)(cur - target) >= 0;
}

chorus_result chorus__shm_wait_slow(chorus_shm *s, int peer, int ch, uint32_t target,
                                    chorus_errbuf *e);

/* Waits until rank peer's flag ch >= target. */
static inline chorus_result chorus__shm_wait(chorus_shm *s, int peer, int ch, uint64_t target,
                                             chorus_errbuf *e)
{
    chorus_shm_flag *f = &s->ctrl[peer].ch[ch];
    if (CHORUS__LIKELY(
            chorus__shm_reached(__atomic_load_n(&f->seq, __ATOMIC_ACQUIRE), (uint32_t)target)))
        return CHORUS_OK;
    return chorus__shm_wait_slow(s, peer, ch, (uint32_t)target, e);
}

/* Waits for flag ch >= target on every other rank. */
chorus_result chorus__shm_wait_all(chorus_shm *s, int ch, uint64_t target, chorus_errbuf *e);

/* Waits for IN >= g+1 on every other rank and checks that each posted the same collective
 * (sig, count) for chunk g; a difference is CHORUS_ERR_MISMATCH naming both calls. Every
 * rank must post IN for chunk g (with chorus__shm_post_in, after chorus__shm_wait_slot). */
chorus_result chorus__shm_wait_in(chorus_shm *s, uint64_t g, uint64_t sig, uint64_t count,
                                  chorus_errbuf *e);
/* Waits for IN >= g+1 of one rank, with the same check. */
chorus_result chorus__shm_wait_in1(chorus_shm *s, int peer, uint64_t g, uint64_t sig,
                                   uint64_t count, chorus_errbuf *e);

/* Before writing this rank's slot (or IN signature) for chunk g: every rank is done with
 * chunk g-2. Usually known without looking: a peer that posted IN for chunk x had finished
 * chunk x-1. */
static inline chorus_result chorus__shm_wait_slot(chorus_shm *s, uint64_t g, chorus_errbuf *e)
{
    if (g < 2 || s->out_min >= g - 1) return CHORUS_OK;
    CHORUS_CHECK(chorus__shm_wait_all(s, CHORUS_SHM_OUT, g - 1, e));
    s->out_min = g - 1;
    return CHORUS_OK;
}

/* Ends chunk g for this rank: it has read all it needs of chunk g. */
static inline void chorus__shm_end_chunk(chorus_shm *s, uint64_t g)
{
    chorus__shm_post(s, CHORUS_SHM_OUT, g + 1);
}

/* memcpy; with nt, non-temporal stores (for destinations that will not be read soon and
 * would only push useful data out of the cache). */
void chorus__shm_copy(void *dst, const void *src, size_t n, int nt);

/* The measured choice of a 2-rank allreduce above cma_max (tune.c): 1 when an allreduce of
 * `bytes` takes single copy, 0 when it takes the staging slots. The first trial calls of a
 * size class alternate between the two; once both ranks' trials are in, every call takes the
 * faster by both ranks' best times. Every rank reaches the same answer for the same call. */
int chorus__shm_tune_pick(const chorus_shm *s, size_t bytes);
/* Whether an allreduce of `bytes` that is about to run is one to time for the tuner. */
int chorus__shm_tune_timing(const chorus_shm *s, size_t bytes);
/* After an allreduce of `bytes` (single copy: cma 1) that took `seconds` on this rank. */
void chorus__shm_tune_record(chorus_shm *s, size_t bytes, int cma, double seconds);

/* Signature of a collective for the mismatch check. */
static inline uint64_t chorus__shm_sig(int kind, int dtype, int op, int variant, int root)
{
    return (uint64_t)kind | ((uint64_t)dtype << 8) | ((uint64_t)op << 16) |
           ((uint64_t)variant << 24) | ((uint64_t)(uint32_t)root << 32);
}

#endif
