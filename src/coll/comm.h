/*
 * comm.h - the communicator: its members, its transports (the TCP mesh, and a shared-memory
 * group when its ranks share a host) and its life (comm.c: create, split, free). What one
 * collective call needs is in coll.h; the arithmetic of patterns in patterns.h.
 */
#ifndef CHORUS_COMM_H
#define CHORUS_COMM_H

#include "base/base.h"
#include "bootstrap/env.h"
#include "coll/patterns.h"
#include "reduce/reduce.h"
#include "transport/transport.h"
#include "wire/wire.h"

struct chorus_comm {
    chorus_transport net; /* the job's message transport (TCP), shared with split communicators */
    int rank, size;
    int local_rank, local_size;
    int *world; /* comm rank -> world rank */
    int *host;  /* comm rank -> host index (equal index: same host) */
    int nhosts;
    uint64_t id;  /* carried in every header so split communicators share connections */
    uint64_t seq; /* collectives started on this communicator */
    unsigned nsplit;
    chorus_errbuf err;
    void *scratch; /* grow-only, reused by algorithms (page faults cost more than a copy) */
    size_t scratch_cap;
    struct chorus_shm *shm;   /* shared-memory group of all ranks, when they share one host */
    struct chorus_hier *hier; /* host-local and cross-host communicators (comm.c), or NULL */
    unsigned select_warned;   /* CHORUS_ALGO_* warnings already given (bit per collective) */
    chorus_config cfg;        /* CHORUS_* variables, parsed at init; split communicators inherit */
    struct chorus_trace *trace; /* CHORUS_TIMELINE file of this rank (coll_trace.c), or NULL */
    int trace_state;            /* 0: not looked at yet; 1: tracing into row trace_row; -1: off */
    int trace_row;
};

/* Creates the world communicator of a described job (chorus_init is chorus__job_from_env +
 * this; src/elastic uses it to form each generation of an elastic job). Errors go to
 * chorus_last_error(NULL). */
chorus_result chorus__init_job(const chorus_job *job, chorus_comm **out);

/* Sets up c->shm (comm_shm.c) when every rank of c is on one host, c has 2 ranks or more and
 * CHORUS_SHM is not 0; otherwise, or when any rank cannot map the segment, c->shm stays NULL
 * and c uses TCP. A collective over c: every rank calls it. Errors are TCP failures. */
chorus_result chorus__comm_shm_setup(chorus_comm *c);

/* The communicators of the hierarchical algorithms of a job that spans hosts: the ranks of
 * each host are consecutive, hosts are numbered by their lowest rank (host order). */
typedef struct chorus_hier {
    chorus_comm *local;   /* this host's ranks, over shared memory when more than one */
    chorus_comm *leaders; /* the lowest rank of every host, in host order (NULL: not one) */
    int nslice;           /* slices of an allreduce: the most ranks on one host */
    chorus_comm **slice;  /* [nslice]: slice j's owners, one per host in host order; NULL where
                             this rank owns no part of slice j */
    int nhosts;
    int *lo, *n; /* [nhosts]: first rank and rank count of each host */
    int me;      /* this rank's host */
} chorus_hier;

/* Sets up c->hier on a communicator whose ranks span hosts (CHORUS_SHM not 0, each host's
 * ranks consecutive): splits off the host-local communicator (a collective over
 * c), builds the cross-host groups (no traffic) and has all ranks agree that every host got
 * its shared memory. Leaves c->hier NULL, with an INFO line saying why, when it does not
 * apply; errors are TCP failures. */
chorus_result chorus__comm_hier_setup(chorus_comm *c);

/* Where an algorithm's buffers live. Host memory only for now; a device memory type is a new
 * value here and rows that declare it. */
typedef enum { CHORUS_MEM_HOST = 0 } chorus_mem_type;

/* Logs the algorithm rules in force for a new communicator c at INFO (select.c; init and
 * split call it once per communicator). */
void chorus__select_describe(const chorus_comm *c);
/* CHORUS_ERR_INVALID_ARG naming the variable and the valid names when a CHORUS_ALGO_* value of
 * cfg names no algorithm of its collective (checked at init and by chorus-run before launch). */
chorus_result chorus__select_check_config(const chorus_config *cfg, chorus_errbuf *e);

/* Breaks every transport of c through the transport interface (transport.h), each keeping
 * the first reason it was given: its shared-memory groups (its own and, in a hierarchical
 * communicator, this host's), waking the ranks that wait there, then its message transport,
 * telling the peers. culprit: the job's rank blamed, -1 for nobody in particular. */
void chorus__comm_break(chorus_comm *c, int culprit, chorus_result r, const char *why);
/* A call on c failed with r: breaks c's transports with c's own detail, or, where the failing
 * algorithm left it empty (it failed on a sub-communicator), with the net's record, which names
 * the lost peer; the bare result only when neither has one. */
void chorus__comm_break_failed(chorus_comm *c, chorus_result r);

/* The job's rank that c's failure records blame (its message transport's first, then its
 * shared-memory group's), or -1: healthy, or nobody in particular. */
int chorus__comm_culprit(const chorus_comm *c);

/* The algorithms of a collective kind worth measuring on c (autotuning: one choice for every
 * size of a job), from select.c's table: NULL (the rules) first, then the rows that give every
 * rank the same bits and are an alternative on c's topology (one host, hosts, TCP), usable on
 * c for memory type mem. Up to max names (the table's strings) into out; returns the count. */
int chorus__select_candidates(const chorus_comm *c, int kind, chorus_mem_type mem, const char **out,
                              int max);
/* The algorithm forced for kind on c (CHORUS_ALGO_<KIND>, or chorus__select_force), or NULL:
 * the rules. */
const char *chorus__select_forced(const chorus_comm *c, int kind);
/* Forces kind's algorithm on c by name, as CHORUS_ALGO_<KIND> does (NULL: the rules again);
 * CHORUS_ERR_INVALID_ARG naming the valid names when no row of kind has that name. The choice
 * is c's own (split communicators made later inherit it); not thread-safe with collectives of
 * c running on another thread. */
chorus_result chorus__select_force(chorus_comm *c, int kind, const char *name);

/* Records a failure of a call on comm (the detail chorus_last_error(comm) returns) and
 * returns r; for layers above the collectives that report through a communicator. */
chorus_result chorus__comm_fail(chorus_comm *comm, chorus_result r, const char *fmt, ...)
    CHORUS__PRINTF(3, 4);

#endif
