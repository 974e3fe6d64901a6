/*
 * select.c - which algorithm runs, by message size, rank count and topology: every rule is
 * here. The rules follow the alpha-beta cost model: a step costs alpha (latency: a message
 * over TCP ~20-50 us on loopback, a flag in shared memory ~0.1-0.3 us) plus bytes * beta
 * (seconds per byte: TCP loopback ~1/2 GB/s, a copy through memory ~1/10 GB/s). For p ranks and
 * S bytes:
 *
 *   allreduce, shm flat:            (S/C) * (alpha_shm + C beta_copy + (p-1) C beta_x)
 *          every rank copies its chunk of C bytes into its slot, then reduces all p slots:
 *          one synchronisation per chunk, (p-1) S bytes read across cores per rank; with one
 *          chunk (S <= C) this is the one-shot
 *   allreduce, shm rsag:            (S/C) * (3 alpha_shm + C beta_copy + 2(p-1)/p C beta_x)
 *          reduce-scatter + allgather through the slots: three synchronisations per chunk,
 *          2(p-1)/p S bytes across cores per rank
 *          (beta_x: cross-core transfer, ~1/12 GB/s here; both keep memory traffic at the
 *           bound, one read of the input and one write of the output per rank, as the slots
 *           stay in cache. For p = 2 the cross-core bytes are equal, so flat wins by its single
 *           synchronisation; for p > 2 flat reads p/2 times more, so rsag wins once S is
 *           large: the crossover is CHORUS_SHM_ONESHOT_MAX)
 *   allreduce, one-shot:            alpha + (p-1) S beta                       -> small S
 *          every rank sends its buffer to every other (concurrently) and folds all p in rank
 *          order: one round instead of log2(p)
 *   allreduce, direct rs + ring ag: 2(p-1) alpha + 2(p-1)/p S beta             -> large S
 *          rank r receives slice r from everyone and folds it in rank order (as much traffic
 *          as a ring's reduce-scatter), then the ring allgather; both default TCP algorithms
 *          fold in rank order like the shm ones, so the result of an element depends neither
 *          on the algorithm nor on its position - fusing tensors never changes a result
 *   allreduce, recursive doubling:  log2(p) * (alpha + S*beta)        (forced only: rd)
 *   allreduce, ring:                2(p-1) * alpha + 2(p-1)/p * S*beta  (forced only: ring)
 *   broadcast, shm:                 (S/C + 1) (alpha_shm + C beta_copy)
 *   broadcast, binomial tree:       log2(p) * (alpha + S*beta)                 -> small S
 *   broadcast, pipelined chain:     (p-2+S/s) * (alpha + s*beta)   -> large S (s: segment)
 *   allgather / reduce-scatter / alltoall / barrier over shm: one copy in and one copy out of
 *          each byte, alpha_shm per slot; over TCP: ring / ring / pairwise / dissemination.
 *
 * Topology: when every rank of the communicator is on one host (comm->nhosts == 1) and
 * CHORUS_SHM is not 0, the communicator has a shared-memory group (comm_shm.c) and shared
 * memory wins for every size - alpha_shm and beta_copy are both far below TCP's - so it is
 * the default for all collectives; otherwise TCP, with the size crossovers
 * CHORUS_TCP_ONESHOT_MAX and CHORUS_BCAST_TREE_MAX. Inside shm, allreduce is flat for 2 ranks
 * or up to CHORUS_SHM_ONESHOT_MAX bytes, rsag above. CHORUS_ALGO_<COLLECTIVE> forces one
 * algorithm (oneshot, rsag, rd, ring, tree, chain, pairwise, dissemination, shm, and for allreduce
 * shm_flat or shm_rsag); forcing shm where there is no shared memory warns once and uses the rules.
 * Every rank must see the same settings.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "transport/shm/shm.h"

static const char *forced(chorus_comm *c, const char *var, int bit, const char *const *known)
{
    const char *v = getenv(var); /* not chorus__cfg_str: no default, and this is per call */
    if (!v || !*v) return NULL;
    for (int i = 0; known[i]; i++)
        if (!strcmp(v, known[i])) {
            if (strncmp(v, "shm", 3) || c->shm) return known[i];
            if (!(c->select_warned & (1u << bit))) {
                c->select_warned |= 1u << bit;
                CHORUS_WARN(CHORUS_LOG_COLL,
                            "%s=shm but this communicator has no shared memory (%s); choosing "
                            "by the rules",
                            var,
                            c->size < 2      ? "one rank"
                            : c->nhosts != 1 ? "ranks on several hosts"
                                             : "CHORUS_SHM=0 or set-up failed");
            }
            return NULL;
        }
    if (!(c->select_warned & (1u << bit))) {
        c->select_warned |= 1u << bit;
        CHORUS_WARN(CHORUS_LOG_COLL, "%s=%s is not known; choosing by the rules", var, v);
    }
    return NULL;
}

chorus_ar_algo chorus__select_allreduce(chorus_comm *c, size_t bytes)
{
    static const char *const known[] = {"oneshot",  "rsag",     "rd",      "ring", "shm",
                                        "shm_flat", "shm_rsag", "shm_cma", NULL};
    const char *f = forced(c, "CHORUS_ALGO_ALLREDUCE", CHORUS_COLL_ALLREDUCE, known);
    if (f && !strcmp(f, "oneshot")) return CHORUS_AR_ONESHOT;
    if (f && !strcmp(f, "rsag")) return CHORUS_AR_RSAG;
    if (f && !strcmp(f, "rd")) return CHORUS_AR_RD;
    if (f && !strcmp(f, "ring")) return CHORUS_AR_RING;
    if (f && !strcmp(f, "shm_flat")) return CHORUS_AR_SHM_FLAT;
    if (f && !strcmp(f, "shm_rsag")) return CHORUS_AR_SHM_RSAG;
    if (f && !strcmp(f, "shm_cma")) {
        if (c->shm->cma) return CHORUS_AR_SHM_CMA;
        if (!(c->select_warned & (1u << 31))) {
            c->select_warned |= 1u << 31;
            CHORUS_WARN(CHORUS_LOG_COLL,
                        "CHORUS_ALGO_ALLREDUCE=shm_cma but single-copy transfers are off here "
                        "(CHORUS_SHM_CMA=0 or refused by the kernel, see CHORUS_DEBUG=INFO); "
                        "choosing by the rules");
        }
    }
    /* single copy: measured faster from ~12 KiB at 2 ranks; with more ranks than this host's 2
     * cores it was not, so it is the rule for 2 ranks only (shm_cma forces it for any p) */
    if (c->shm && c->shm->cma && c->size == 2 && bytes >= c->shm->cma_min) return CHORUS_AR_SHM_CMA;
    if (c->shm) /* flat: one sync per slot, but every rank reads all p inputs */
        return c->size <= 2 || bytes <= c->shm->oneshot_max ? CHORUS_AR_SHM_FLAT
                                                            : CHORUS_AR_SHM_RSAG;
    /* The defaults fold in rank order, as the shared-memory algorithms do: results do not
     * depend on the algorithm, the size or the position (rd and ring, when forced, do). */
    return bytes <= (size_t)chorus__cfg_long("CHORUS_TCP_ONESHOT_MAX") ? CHORUS_AR_ONESHOT
                                                                       : CHORUS_AR_RSAG;
}

chorus_bc_algo chorus__select_broadcast(chorus_comm *c, size_t bytes)
{
    static const char *const known[] = {"tree", "chain", "shm", NULL};
    const char *f = forced(c, "CHORUS_ALGO_BROADCAST", CHORUS_COLL_BROADCAST, known);
    if (f) return f[0] == 't' ? CHORUS_BC_TREE : f[0] == 'c' ? CHORUS_BC_CHAIN : CHORUS_BC_SHM;
    if (c->shm) return CHORUS_BC_SHM;
    return bytes <= (size_t)chorus__cfg_long("CHORUS_BCAST_TREE_MAX") ? CHORUS_BC_TREE
                                                                      : CHORUS_BC_CHAIN;
}

int chorus__select_shm(chorus_comm *c, int kind)
{
    static const char *const ring[] = {"ring", "shm", NULL};
    static const char *const pairwise[] = {"pairwise", "shm", NULL};
    static const char *const dissemination[] = {"dissemination", "shm", NULL};
    const char *f = NULL;
    switch (kind) {
    case CHORUS_COLL_ALLGATHER: f = forced(c, "CHORUS_ALGO_ALLGATHER", kind, ring); break;
    case CHORUS_COLL_REDUCE_SCATTER: f = forced(c, "CHORUS_ALGO_REDUCE_SCATTER", kind, ring); break;
    case CHORUS_COLL_ALLTOALL: f = forced(c, "CHORUS_ALGO_ALLTOALL", kind, pairwise); break;
    case CHORUS_COLL_BARRIER: f = forced(c, "CHORUS_ALGO_BARRIER", kind, dissemination); break;
    default: break;
    }
    if (f) return !strcmp(f, "shm");
    return c->shm != NULL;
}

void chorus__select_describe(const chorus_comm *c)
{
    if (!CHORUS__LOG_ON(CHORUS_LOG_INFO) || c->size < 2) return;
    if (c->shm)
        CHORUS_INFO(CHORUS_LOG_COLL,
                    "comm %016llx (%d ranks, one host): shared memory for every collective; "
                    "allreduce one-shot up to %zu B, pipelined in %zu KiB chunks above; "
                    "non-temporal stores from %zu B; single-copy allreduce %s%zu B "
                    "(CHORUS_ALGO_* can force a TCP algorithm)",
                    (unsigned long long)c->id, c->size, c->shm->oneshot_max, c->shm->chunk >> 10,
                    c->shm->nt_min,
                    !c->shm->cma   ? "off, would be from "
                    : c->size == 2 ? "from "
                                   : "only when forced (shm_cma), with more than 2 ranks; from ",
                    c->shm->cma_min);
    else
        CHORUS_INFO(CHORUS_LOG_COLL,
                    "comm %016llx (%d ranks, %d hosts): TCP; allreduce one-shot up to %ld B, "
                    "direct reduce-scatter + ring allgather above (both fold in rank order); "
                    "broadcast binomial tree up to %ld B, chain above; ring "
                    "allgather and reduce-scatter, pairwise alltoall, dissemination barrier",
                    (unsigned long long)c->id, c->size, c->nhosts,
                    chorus__cfg_long("CHORUS_TCP_ONESHOT_MAX"),
                    chorus__cfg_long("CHORUS_BCAST_TREE_MAX"));
}
