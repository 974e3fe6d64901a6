/*
 * select.c - which algorithm runs, by message size, rank count and topology: every rule is
 * here. The rules follow the alpha-beta cost model: a step costs alpha (latency: a message
 * over TCP ~20-50 us on loopback, a flag in shared memory ~0.1-0.3 us) plus bytes * beta
 * (seconds per byte: TCP loopback ~1/2 GB/s, a copy through memory ~1/10 GB/s). For p ranks and
 * S bytes:
 *
 *   allreduce, shm one-shot:            (S/C) * (alpha_shm + C beta_copy + (p-1) C beta_x)
 *          every rank copies its chunk of C bytes into its slot, then reduces all p slots:
 *          one synchronisation per chunk, (p-1) S bytes read across cores per rank; with one
 *          chunk (S <= C) this is the one-shot
 *   allreduce, shm pipelined:           (S/C) * (3 alpha_shm + C beta_copy + 2(p-1)/p C beta_x)
 *          reduce-scatter + allgather through the slots: three synchronisations per chunk,
 *          2(p-1)/p S bytes across cores per rank
 *          (beta_x: cross-core transfer, ~1/12 GB/s here; both keep memory traffic at the
 *           bound, one read of the input and one write of the output per rank, as the slots
 *           stay in cache. One-shot folds all S on every rank, pipelined S/p: one-shot wins by
 *           its single synchronisation while S is small, pipelined once S is large: the
 *           crossover is CHORUS_SHM_ONESHOT_MAX, for 2 ranks too - at 2 ranks and 64 MiB
 *           pipelined took 9-10 ms, one-shot 11-12)
 *   allreduce, shm single copy (2 ranks): (S/K) * (2 syscalls + K beta_x) + 2 alpha_shm
 *          the peer's input read and the result written by the kernel straight between the
 *          user buffers (K: piece): no staging copy, but the kernel pins every page it copies.
 *          Above CHORUS_SHM_CMA_MAX (384 KiB) which wins depends on the host (AMD EPYC VM: at
 *          1 MiB 100 us against 50-60 us pipelined; Xeon VM: 90 us against 155 us), so there
 *          it is measured per size class (transport/shm/tune.c)
 *   allreduce, one-shot:            alpha + (p-1) S beta                       -> small S
 *          every rank sends its buffer to every other (concurrently) and folds all p in rank
 *          order: one round instead of log2(p)
 *   allreduce, direct_ring (direct reduce-scatter + ring allgather):
 *                                   2(p-1) alpha + 2(p-1)/p S beta             -> large S
 *          rank r receives slice r from everyone and folds it in rank order (as much traffic
 *          as a ring's reduce-scatter), then the ring allgather; both default TCP algorithms
 *          fold in rank order like the shm ones, so the result of an element depends neither
 *          on the algorithm nor on its position - fusing tensors never changes a result
 *   allreduce, recursive doubling:  log2(p) * (alpha + S*beta)        (forced only: rd)
 *   allreduce, ring:                2(p-1) * alpha + 2(p-1)/p * S*beta  (forced only: ring)
 *          the same volume as direct_ring, but each rank talks to its two neighbours only
 *          and needs 2 slices of scratch instead of a whole buffer: for networks where
 *          p-1 concurrent peers congest, or memory is short; folds in ring order
 *   broadcast, shm:                 (S/C + 1) (alpha_shm + C beta_copy)
 *   broadcast, binomial tree:       log2(p) * (alpha + S*beta)                 -> small S
 *   broadcast, pipelined chain:     (p-2+S/s) * (alpha + s*beta)   -> large S (s: segment)
 *   allgather / reduce-scatter / alltoall / barrier over shm: one copy in and one copy out of
 *          each byte, alpha_shm per slot; over TCP: ring / direct / pairwise / dissemination.
 *   across h hosts of up to m ranks (alpha, beta of a host's link, shared by its ranks):
 *   allreduce, hier:  max(2 T_shm(S), 2(h-1)/h S beta) + 2R(h-1) alpha   (R pipelined rounds)
 *          reduce-scatter of m slices over shm, each slice allreduced among its owners on the
 *          h hosts, allgather over shm, round by round so that shm and the link overlap
 *          (small slices: once, one-shot across hosts, 2 T_shm(S) + alpha + (h-1) S beta);
 *          the link carries 2(h-1)/h S each way, where the flat
 *          direct_ring over p = hm ranks has each of a host's m ranks send 2(p-1)/p S
 *   broadcast, hier:  2 T_shm(S) + the TCP broadcast among the h hosts' lowest ranks
 *   allgather, hier:  T_shm(S) + one TCP broadcast per host of its blocks among the leaders
 *
 * Topology: when every rank of the communicator is on one host (comm->nhosts == 1) and
 * CHORUS_SHM is not 0, the communicator has a shared-memory group (comm_shm.c) and shared
 * memory wins for every size - alpha_shm and beta_copy are both far below TCP's - so it is
 * the default for all collectives; otherwise TCP, with the size crossovers
 * CHORUS_TCP_ONESHOT_MAX and CHORUS_BCAST_TREE_MAX. Inside shm, allreduce at 2 ranks is single
 * copy from CHORUS_SHM_CMA_MIN to CHORUS_SHM_CMA_MAX bytes (when the kernel allows it), and
 * above that single copy or pipelined as measured on the host; otherwise one-shot up to
 * CHORUS_SHM_ONESHOT_MAX bytes, pipelined above. A communicator that spans
 * hosts with several ranks on some host (and has c->hier: each host's ranks consecutive,
 * CHORUS_SHM not 0) runs allreduce, broadcast and allgather hierarchically at every size:
 * shared memory costs less than a TCP step at any size, and the link then carries each byte
 * once per host rather than once per rank.
 *
 * The table: one row per algorithm {id, collective, name, description, memory type,
 * transport, when the rules pick it, function}. The rules take, for a collective, the first
 * row (in table order) whose memory type is the buffers', whose transport the communicator
 * has, and whose size test passes; rows with no size test run only when forced. A new
 * algorithm or backend is one row. CHORUS_ALGO_<COLLECTIVE>=<name> forces a row; "shm" also
 * means "shared memory, variant by the rules". A name that is no row of that collective is
 * CHORUS_ERR_INVALID_ARG from the collective (nothing sent, the communicator stays usable);
 * forcing a shared-memory row where there is none warns once and uses the rules. Every rank
 * must see the same settings.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "coll/coll.h"
#include "transport/shm/shm.h"

static chorus_result ar_shm_oneshot(chorus_comm *c, const chorus_coll_args *a)
{
    return chorus__allreduce_shm(c, a->send, a->recv, a->count, a->t, a->op, 0);
}
/* The two large-message allreduces at 2 ranks; above CHORUS_SHM_CMA_MAX their first calls of
 * each size class are timed for the measured choice between them (transport/shm/tune.c). */
static chorus_result ar_shm_large(chorus_comm *c, const chorus_coll_args *a, int cma)
{
    size_t bytes = a->count * chorus_dtype_size(a->t);
    int timed = c->shm && chorus__shm_tune_timing(c->shm, bytes);
    double t0 = timed ? chorus__now() : 0;
    chorus_result r = cma ? chorus__allreduce_cma(c, a->send, a->recv, a->count, a->t, a->op)
                          : chorus__allreduce_shm(c, a->send, a->recv, a->count, a->t, a->op, 1);
    if (timed && r == CHORUS_OK) chorus__shm_tune_record(c->shm, bytes, cma, chorus__now() - t0);
    return r;
}
static chorus_result ar_shm_pipelined(chorus_comm *c, const chorus_coll_args *a)
{
    return ar_shm_large(c, a, 0);
}
static chorus_result ar_shm_cma(chorus_comm *c, const chorus_coll_args *a)
{
    return ar_shm_large(c, a, 1);
}

/* Size tests of the rules: does the row fit this call? */
typedef int (*fits_fn)(const chorus_comm *c, size_t bytes);
static int always(const chorus_comm *c, size_t bytes)
{
    (void)c;
    (void)bytes;
    return 1;
}
/* Single copy: faster than the slots from ~12 KiB to ~384 KiB at 2 ranks on every host measured.
 * Above, it depends on the host: the kernel's per-page pinning against the slots' second copy
 * and cross-core transfer (an AMD EPYC VM sharing one L3: slots from ~512 KiB, 64 MiB in 9-10
 * ms against 15 ms; a Xeon VM: single copy to 16 MiB, 1 MiB in ~90 us against ~155 us, the
 * slots at 64 MiB). So, unless CHORUS_SHM_CMA_MAX is set, each size class above is measured
 * in its first calls (transport/shm/tune.c). With more ranks than this host's 2 cores it was
 * not faster, so by the rules it serves 2 ranks only (shm_cma forces it for any p and size). */
static int shm_cma_fits(const chorus_comm *c, size_t bytes)
{
    const chorus_shm *s = c->shm;
    return c->size == 2 && bytes >= s->cma_min &&
           (bytes <= s->cma_max || (s->tune && chorus__shm_tune_pick(s, bytes)));
}
static int shm_oneshot_fits(const chorus_comm *c, size_t bytes)
{
    return bytes <= c->shm->oneshot_max; /* one sync, but every rank reduces all p inputs */
}
static int tcp_oneshot_fits(const chorus_comm *c, size_t bytes)
{
    return bytes <= c->cfg.tcp_oneshot_max;
}
static int tree_fits(const chorus_comm *c, size_t bytes)
{
    return bytes <= c->cfg.bcast_tree_max;
}
/* Across hosts with several ranks on some host: shared memory inside the hosts pays for
 * itself at every size (a host's ranks then cross its link once, not each on its own). */
static int hier_fits(const chorus_comm *c, size_t bytes)
{
    (void)bytes;
    return c->size > c->nhosts;
}

enum {
    AR_SHM_CMA,
    AR_SHM_ONESHOT,
    AR_SHM_PIPELINED,
    AR_HIER,
    AR_ONESHOT,
    AR_DIRECT_RING,
    AR_RD,
    AR_RING,
    BC_SHM,
    BC_HIER,
    BC_TREE,
    BC_CHAIN,
    AG_SHM,
    AG_HIER,
    AG_RING,
    RS_SHM,
    RS_DIRECT,
    A2A_SHM,
    A2A_PAIRWISE,
    BAR_SHM,
    BAR_DISSEMINATION,
    NALGO
};

typedef struct row {
    chorus_algo a;
    fits_fn fits; /* NULL: forced only */
} row;

#define ROW(id_, kind, name, alias, desc, mem, tp, fn, fits)                                       \
    [id_] = {{CHORUS_COLL_##kind, name, alias, desc, mem, tp, fn}, fits}
#define HOST CHORUS_MEM_HOST
#define NET  CHORUS_TP_NET
#define SHM  CHORUS_TP_SHM
#define CMA  CHORUS_TP_SHM_CMA
#define HIER CHORUS_TP_HIER

/* In order of preference within a collective: the rules take the first row that fits. */
static const row table[NALGO] = {
    ROW(AR_SHM_CMA, ALLREDUCE, "shm_cma", NULL,
        "same host, single copy: each rank reads its peers' pieces (process_vm_readv), folds them "
        "in rank order and writes the result into the peers (process_vm_writev)",
        HOST, CMA, ar_shm_cma, shm_cma_fits),
    ROW(AR_SHM_ONESHOT, ALLREDUCE, "shm_oneshot", "shm_flat",
        "shared memory, every rank reduces all inputs in rank order, chunk by chunk", HOST, SHM,
        ar_shm_oneshot, shm_oneshot_fits),
    ROW(AR_SHM_PIPELINED, ALLREDUCE, "shm_pipelined", NULL,
        "shared memory, per chunk a reduce-scatter then an allgather through the slots", HOST, SHM,
        ar_shm_pipelined, always),
    ROW(AR_HIER, ALLREDUCE, "hier", NULL,
        "across hosts: reduce-scatter over shared memory in each host, allreduce of each slice "
        "among its owners on every host over TCP, allgather over shared memory",
        HOST, HIER, chorus__allreduce_hier, hier_fits),
    ROW(AR_ONESHOT, ALLREDUCE, "oneshot", NULL,
        "TCP, every rank sends its buffer to every other and folds all in rank order", HOST, NET,
        chorus__allreduce_oneshot, tcp_oneshot_fits),
    ROW(AR_DIRECT_RING, ALLREDUCE, "direct_ring", NULL,
        "TCP, direct reduce-scatter folding in rank order, then a ring allgather", HOST, NET,
        chorus__allreduce_direct_ring, always),
    ROW(AR_RD, ALLREDUCE, "rd", NULL, "TCP, recursive doubling (forced only)", HOST, NET,
        chorus__allreduce_rd, NULL),
    ROW(AR_RING, ALLREDUCE, "ring", NULL,
        "TCP, ring reduce-scatter + ring allgather: neighbour links and little scratch (forced "
        "only)",
        HOST, NET, chorus__allreduce_ring, NULL),
    ROW(BC_SHM, BROADCAST, "shm", NULL, "shared memory, the root's slots copied out by all", HOST,
        SHM, chorus__bcast_shm, always),
    ROW(BC_HIER, BROADCAST, "hier", NULL,
        "across hosts: shared memory on the root's host, TCP among the hosts' lowest ranks, "
        "shared memory on the others",
        HOST, HIER, chorus__bcast_hier, hier_fits),
    ROW(BC_TREE, BROADCAST, "tree", NULL, "TCP, binomial tree", HOST, NET, chorus__bcast_tree,
        tree_fits),
    ROW(BC_CHAIN, BROADCAST, "chain", NULL, "TCP, pipelined chain", HOST, NET, chorus__bcast_chain,
        always),
    ROW(AG_SHM, ALLGATHER, "shm", NULL, "shared memory, through the slots", HOST, SHM,
        chorus__allgather_shm, always),
    ROW(AG_HIER, ALLGATHER, "hier", NULL,
        "across hosts: shared memory in each host, TCP among the hosts' lowest ranks, shared "
        "memory again",
        HOST, HIER, chorus__allgather_hier, hier_fits),
    ROW(AG_RING, ALLGATHER, "ring", NULL, "TCP, pipelined ring", HOST, NET, chorus__allgather_ring,
        always),
    ROW(RS_SHM, REDUCE_SCATTER, "shm", NULL, "shared memory, through the slots", HOST, SHM,
        chorus__reduce_scatter_shm, always),
    ROW(RS_DIRECT, REDUCE_SCATTER, "direct", NULL,
        "TCP, every rank receives its block from all and folds in rank order", HOST, NET,
        chorus__reduce_scatter_direct, always),
    ROW(A2A_SHM, ALLTOALL, "shm", NULL, "shared memory, through the slots", HOST, SHM,
        chorus__alltoall_shm, always),
    ROW(A2A_PAIRWISE, ALLTOALL, "pairwise", NULL, "TCP, pairwise exchange", HOST, NET,
        chorus__alltoall_pairwise, always),
    ROW(BAR_SHM, BARRIER, "shm", NULL, "shared memory flags", HOST, SHM, chorus__barrier_shm,
        always),
    ROW(BAR_DISSEMINATION, BARRIER, "dissemination", NULL, "TCP, dissemination", HOST, NET,
        chorus__barrier_dissemination, always),
};

/* Autotuning (src/engine/autotune.c) forces one algorithm for every size of a job, so it
 * measures only the rows that give every rank the same bits (a fold in one order for all)
 * and that are worth trying at every size, each on the topology it is an alternative for:
 * one host over shared memory, hosts joined by the hierarchical rows, or TCP alone. Single
 * copy is left out (above CHORUS_SHM_CMA_MAX it is slower than the slots), and so is
 * recursive doubling (each rank folds in its own order). */
enum { ON_SHM = 1, ON_HIER = 2, ON_NET = 4 };
static const unsigned tune_on[NALGO] = {
    [AR_SHM_ONESHOT] = ON_SHM,
    [AR_SHM_PIPELINED] = ON_SHM,
    [AR_DIRECT_RING] = ON_HIER | ON_NET, /* across hosts: flat, every rank on the network */
    [AR_ONESHOT] = ON_NET,
    [AR_RING] = ON_NET,
};

/* What a row needs, asked of the capabilities of c's transports. */
static int has_transport(const chorus_comm *c, chorus_algo_tp tp)
{
    chorus_transport shm = chorus__shm_transport(c->shm);
    switch (tp) {
    case CHORUS_TP_NET: return chorus__tp_has(&c->net, CHORUS_TPCAP_MSG);
    case CHORUS_TP_SHM: return chorus__tp_has(&shm, CHORUS_TPCAP_SEGMENT);
    case CHORUS_TP_SHM_CMA:
        return chorus__tp_has(&shm, CHORUS_TPCAP_SEGMENT | CHORUS_TPCAP_ZERO_COPY);
    case CHORUS_TP_HIER: return c->hier != NULL;
    }
    return 0;
}

static int usable(const chorus_comm *c, const row *r, chorus_mem_type mem)
{
    return r->a.mem == mem && has_transport(c, r->a.tp);
}

/* The rules: the first usable row of kind that fits (shm_only: of the shared-memory ones). */
static const row *by_rules(const chorus_comm *c, int kind, chorus_mem_type mem, size_t bytes,
                           int shm_only)
{
    for (int i = 0; i < NALGO; i++) {
        const row *r = &table[i];
        if (r->a.kind == kind && r->fits && usable(c, r, mem) &&
            (!shm_only || r->a.tp == CHORUS_TP_SHM || r->a.tp == CHORUS_TP_SHM_CMA) &&
            r->fits(c, bytes))
            return r;
    }
    return NULL;
}

/* "a, b (or c), d": the names CHORUS_ALGO_<kind> accepts. */
static void valid_names(int kind, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    int shm_row = 0;
    for (int i = 0; i < NALGO && o < len; i++) {
        const chorus_algo *a = &table[i].a;
        if (a->kind != kind) continue;
        shm_row |= !strcmp(a->name, "shm");
        o += (size_t)snprintf(out + o, len - o, "%s%s", o ? ", " : "", a->name);
        if (a->alias && o < len) o += (size_t)snprintf(out + o, len - o, " (or %s)", a->alias);
    }
    if (!shm_row && o < len) snprintf(out + o, len - o, ", shm (shared memory, by the rules)");
}

/* Where a config holds the CHORUS_ALGO_* value of a collective kind (NULL: no such kind). */
static const char **forced_field(chorus_config *cfg, int kind)
{
    switch (kind) {
    case CHORUS_COLL_ALLREDUCE: return &cfg->algo_allreduce;
    case CHORUS_COLL_BROADCAST: return &cfg->algo_broadcast;
    case CHORUS_COLL_ALLGATHER: return &cfg->algo_allgather;
    case CHORUS_COLL_REDUCE_SCATTER: return &cfg->algo_reduce_scatter;
    case CHORUS_COLL_ALLTOALL: return &cfg->algo_alltoall;
    case CHORUS_COLL_BARRIER: return &cfg->algo_barrier;
    }
    return NULL;
}

/* The CHORUS_ALGO_* value of a config for a collective kind, or NULL. */
static const char *forced_name(const chorus_config *cfg, int kind)
{
    const char **f = forced_field((chorus_config *)cfg, kind);
    return f ? *f : NULL;
}

/* "CHORUS_ALGO_<KIND>" */
static void var_name(int kind, char *var, size_t len)
{
    const char *k = chorus__coll_kind_name(kind);
    snprintf(var, len, "CHORUS_ALGO_");
    for (size_t i = 0, o = strlen(var); k[i] && o + 1 < len; i++, o++) {
        var[o] = (char)toupper((unsigned char)k[i]);
        var[o + 1] = 0;
    }
}

/* A forced algorithm whose transport this communicator lacks: warned once per collective,
 * then the rules choose. */
static void warn_unusable(chorus_comm *c, int kind, const char *v, chorus_algo_tp tp)
{
    if (c->select_warned & (1u << kind)) return;
    c->select_warned |= 1u << kind;
    char var[64];
    var_name(kind, var, sizeof(var));
    if (tp == CHORUS_TP_HIER)
        CHORUS_WARN(CHORUS_LOG_COLL,
                    "%s=%s but this communicator has no hierarchical path (%s); choosing by the "
                    "rules",
                    var, v,
                    c->nhosts < 2 ? "its ranks are on one host"
                                  : "CHORUS_SHM=0, a host's ranks not consecutive, or a split "
                                    "communicator; see CHORUS_DEBUG=INFO");
    else if (tp == CHORUS_TP_SHM_CMA && c->shm)
        CHORUS_WARN(CHORUS_LOG_COLL,
                    "%s=%s but single-copy transfers are off here (CHORUS_SHM_CMA=0 or refused by "
                    "the kernel, see CHORUS_DEBUG=INFO); choosing by the rules",
                    var, v);
    else
        CHORUS_WARN(CHORUS_LOG_COLL,
                    "%s=%s but this communicator has no shared memory (%s); choosing by the rules",
                    var, v,
                    c->size < 2      ? "one rank"
                    : c->nhosts != 1 ? "ranks on several hosts"
                                     : "CHORUS_SHM=0 or set-up failed");
}

/* The row named v (or by its alias) among kind's rows, or NULL. */
static const row *find_named(int kind, const char *v)
{
    for (int i = 0; i < NALGO; i++) {
        const chorus_algo *a = &table[i].a;
        if (a->kind == kind && (!strcmp(v, a->name) || (a->alias && !strcmp(v, a->alias))))
            return &table[i];
    }
    return NULL;
}

/* Why the rules took r for a call of bytes (for the TRACE line of each collective). */
static void rules_reason(const chorus_comm *c, const row *r, size_t bytes, char *out, size_t len)
{
    const char *no_shm = c->size < 2      ? "one rank"
                         : c->nhosts != 1 ? "ranks on several hosts"
                                          : "CHORUS_SHM=0, not set up yet, or set-up failed";
    if (r->fits == shm_cma_fits)
        snprintf(out, len,
                 "2 ranks on one host, CHORUS_SHM_CMA_MIN (%zu) <= %zu B %s CHORUS_SHM_CMA_MAX "
                 "(%zu)%s",
                 c->shm->cma_min, bytes, bytes <= c->shm->cma_max ? "<=" : ">", c->shm->cma_max,
                 bytes <= c->shm->cma_max ? "" : ", measured faster than the slots at this size");
    else if (r->fits == shm_oneshot_fits)
        snprintf(out, len, "%d ranks on one host, %zu B <= CHORUS_SHM_ONESHOT_MAX (%zu)", c->size,
                 bytes, c->shm->oneshot_max);
    else if (r->fits == tcp_oneshot_fits)
        snprintf(out, len, "no shared memory (%s), %zu B <= CHORUS_TCP_ONESHOT_MAX (%zu)", no_shm,
                 bytes, c->cfg.tcp_oneshot_max);
    else if (r->fits == hier_fits)
        snprintf(out, len, "%d ranks on %d hosts, several on some host", c->size, c->nhosts);
    else if (r->fits == tree_fits)
        snprintf(out, len, "no shared memory (%s), %zu B <= CHORUS_BCAST_TREE_MAX (%zu)", no_shm,
                 bytes, c->cfg.bcast_tree_max);
    else if (r->a.tp != CHORUS_TP_NET && r->a.kind == CHORUS_COLL_ALLREDUCE)
        snprintf(out, len, "%d ranks on one host, %zu B > CHORUS_SHM_ONESHOT_MAX (%zu)", c->size,
                 bytes, c->shm->oneshot_max);
    else if (r->a.tp != CHORUS_TP_NET)
        snprintf(out, len, "%d ranks on one host", c->size);
    else if (r->a.kind == CHORUS_COLL_ALLREDUCE)
        snprintf(out, len, "no shared memory (%s), %zu B > CHORUS_TCP_ONESHOT_MAX (%zu)", no_shm,
                 bytes, c->cfg.tcp_oneshot_max);
    else if (r->a.kind == CHORUS_COLL_BROADCAST)
        snprintf(out, len, "no shared memory (%s), %zu B > CHORUS_BCAST_TREE_MAX (%zu)", no_shm,
                 bytes, c->cfg.bcast_tree_max);
    else
        snprintf(out, len, "no shared memory (%s)", no_shm);
}

/* One TRACE line per collective: the algorithm and why. */
static void trace_choice(const chorus_comm *c, int kind, const row *r, const char *forced,
                         size_t bytes)
{
    char why[200], var[64];
    if (forced && !strcmp(forced, r->a.name)) {
        var_name(kind, var, sizeof(var));
        snprintf(why, sizeof(why), "forced by %s=%s", var, forced);
    } else {
        rules_reason(c, r, bytes, why, sizeof(why));
    }
    chorus__log(CHORUS_LOG_TRACE, CHORUS_LOG_COLL,
                "%s of %zu B on comm %016llx (%d ranks): %s (%s); %s", chorus__coll_kind_name(kind),
                bytes, (unsigned long long)c->id, c->size, r->a.name, r->a.desc, why);
}

/* CHORUS_ALGO_<KIND>=v names no row of that collective. */
static chorus_result not_an_algorithm(int kind, const char *v, chorus_errbuf *e)
{
    char var[64], names[400];
    var_name(kind, var, sizeof(var));
    valid_names(kind, names, sizeof(names));
    return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "%s=%s is not an algorithm of %s; valid: %s",
                        var, v, chorus__coll_kind_name(kind), names);
}

chorus_result chorus__select_check_config(const chorus_config *cfg, chorus_errbuf *e)
{
    for (int kind = 0; kind < CHORUS_COLL_KIND_MAX; kind++) {
        const char *v = forced_name(cfg, kind); /* NULL: no CHORUS_ALGO_ variable */
        if (v && strcmp(v, "shm") && !find_named(kind, v)) return not_an_algorithm(kind, v, e);
    }
    return CHORUS_OK;
}

const chorus_algo *chorus__select(chorus_comm *c, int kind, chorus_mem_type mem, size_t bytes,
                                  chorus_result *err)
{
    *err = CHORUS_OK;
    const char *v = forced_name(&c->cfg, kind);
    const row *r = NULL;
    if (v) { /* forced: that row, or for "shm" the shared-memory rows by the rules */
        const row *named = find_named(kind, v);
        int any_shm = !named && !strcmp(v, "shm");
        if (!named && !any_shm) {
            *err = not_an_algorithm(kind, v, &c->err);
            return NULL;
        }
        r = any_shm ? by_rules(c, kind, mem, bytes, 1) : usable(c, named, mem) ? named : NULL;
        if (!r && (any_shm || named->a.mem == mem))
            warn_unusable(c, kind, v, any_shm ? CHORUS_TP_SHM : named->a.tp);
    }
    if (!r) r = by_rules(c, kind, mem, bytes, 0);
    if (r && CHORUS__LOG_ON(CHORUS_LOG_TRACE)) trace_choice(c, kind, r, v, bytes);
    if (!r)
        *err = chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG,
                            "no %s algorithm for this memory type on this communicator",
                            chorus__coll_kind_name(kind));
    return r ? &r->a : NULL;
}

int chorus__select_candidates(const chorus_comm *c, int kind, chorus_mem_type mem, const char **out,
                              int max)
{
    int n = 0;
    if (max < 1) return 0;
    out[n++] = NULL;
    if (c->size < 2) return n;
    unsigned topo = c->shm ? ON_SHM : c->hier && c->size > c->nhosts ? ON_HIER : ON_NET;
    for (int i = 0; i < NALGO && n < max; i++)
        if (table[i].a.kind == kind && (tune_on[i] & topo) && usable(c, &table[i], mem))
            out[n++] = table[i].a.name;
    return n;
}

const char *chorus__select_forced(const chorus_comm *c, int kind)
{
    return forced_name(&c->cfg, kind);
}

chorus_result chorus__select_force(chorus_comm *c, int kind, const char *name)
{
    const char **f = forced_field(&c->cfg, kind);
    if (!f) return chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG, "no collective of kind %d", kind);
    if (!name || !strcmp(name, "shm")) {
        *f = name ? "shm" : NULL;
        return CHORUS_OK;
    }
    const row *r = find_named(kind, name);
    if (!r) return not_an_algorithm(kind, name, &c->err);
    *f = r->a.name;
    return CHORUS_OK;
}

void chorus__select_describe(const chorus_comm *c)
{
    if (!CHORUS__LOG_ON(CHORUS_LOG_INFO) || c->size < 2) return;
    if (c->shm)
        CHORUS_INFO(CHORUS_LOG_COLL,
                    "comm %016llx (%d ranks, one host): shared memory for every collective; "
                    "allreduce one-shot up to %zu B, pipelined in %zu KiB chunks above; "
                    "non-temporal stores from %zu B; single-copy allreduce %s%zu B to %zu B "
                    "(CHORUS_ALGO_* can force a TCP algorithm)",
                    (unsigned long long)c->id, c->size, c->shm->oneshot_max, c->shm->chunk >> 10,
                    c->shm->nt_min,
                    !c->shm->cma   ? "off, would be from "
                    : c->size == 2 ? "from "
                                   : "only when forced (shm_cma), with more than 2 ranks; from ",
                    c->shm->cma_min, c->shm->cma_max);
    else if (c->hier && c->size > c->nhosts)
        CHORUS_INFO(CHORUS_LOG_COLL,
                    "comm %016llx (%d ranks, %d hosts): hierarchical allreduce, broadcast and "
                    "allgather (shared memory within each host, TCP between hosts; allreduce in "
                    "%d slices, one per rank of the fullest host); TCP for the rest",
                    (unsigned long long)c->id, c->size, c->nhosts, c->hier->nslice);
    else
        CHORUS_INFO(CHORUS_LOG_COLL,
                    "comm %016llx (%d ranks, %d host%s): TCP; allreduce one-shot up to %zu B, "
                    "direct reduce-scatter + ring allgather above (both fold in rank order); "
                    "broadcast binomial tree up to %zu B, chain above; ring allgather, direct "
                    "reduce-scatter, pairwise alltoall, dissemination barrier%s",
                    (unsigned long long)c->id, c->size, c->nhosts, c->nhosts == 1 ? "" : "s",
                    c->cfg.tcp_oneshot_max, c->cfg.bcast_tree_max,
                    c->hier ? "; one rank per host, so the hierarchical path (hier) runs only "
                              "when forced"
                    : c->nhosts > 1 && c->size > c->nhosts
                        ? " (chorus_comm_split_type(CHORUS_SPLIT_HOST) gives the ranks of each "
                          "host a communicator over shared memory)"
                        : "");
}
