/*
 * select.c - which algorithm runs, by message size, rank count and topology. The rules
 * follow the alpha-beta cost model (alpha: per-message latency, beta: seconds per byte) for p
 * ranks and S bytes:
 *   allreduce, recursive doubling: log2(p) * (alpha + S*beta)          -> small S
 *   allreduce, ring:               2(p-1) * alpha + 2(p-1)/p * S*beta  -> large S
 *   broadcast, binomial tree:      log2(p) * (alpha + S*beta)          -> small S
 *   broadcast, pipelined chain:    (p-2+S/s) * (alpha + s*beta)        -> large S (s: segment)
 * The crossovers are CHORUS_ALLREDUCE_RD_MAX and CHORUS_BCAST_TREE_MAX; CHORUS_ALGO_* force one.
 */
#include <string.h>

#include "coll/comm.h"

chorus_ar_algo chorus__select_allreduce(const chorus_comm *c, size_t bytes)
{
    const char *force = chorus__cfg_str("CHORUS_ALGO_ALLREDUCE");
    (void)c;
    if (force && !strcmp(force, "rd")) return CHORUS_AR_RD;
    if (force && !strcmp(force, "ring")) return CHORUS_AR_RING;
    if (force) CHORUS_WARN(CHORUS_LOG_COLL, "CHORUS_ALGO_ALLREDUCE=%s is not known; choosing by size", force);
    return bytes <= (size_t)chorus__cfg_long("CHORUS_ALLREDUCE_RD_MAX") ? CHORUS_AR_RD
                                                                        : CHORUS_AR_RING;
}

chorus_bc_algo chorus__select_broadcast(const chorus_comm *c, size_t bytes)
{
    const char *force = chorus__cfg_str("CHORUS_ALGO_BROADCAST");
    (void)c;
    if (force && !strcmp(force, "tree")) return CHORUS_BC_TREE;
    if (force && !strcmp(force, "chain")) return CHORUS_BC_CHAIN;
    if (force) CHORUS_WARN(CHORUS_LOG_COLL, "CHORUS_ALGO_BROADCAST=%s is not known; choosing by size", force);
    return bytes <= (size_t)chorus__cfg_long("CHORUS_BCAST_TREE_MAX") ? CHORUS_BC_TREE
                                                                      : CHORUS_BC_CHAIN;
}
